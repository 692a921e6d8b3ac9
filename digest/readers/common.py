"""What every reader shares: the line's reject, loading a JSON line, the checked fields of a turn,
and the turn a harness reader builds from several events.

A harness reader (Claude Code, Codex, aider, trajectories) reads a file's lines itself and says
what each one became, as a `Read`: a turn (counted at the line it starts on), a reject, a line
skipped (blank, or an event the format's reader leaves out by design), or a line folded into a
turn or a session's metadata counted at another line. So every line is accounted for once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from digest.turns import compose_document, id_sort_key, parse_timestamp_ms, partition_key

EXCERPT_CHARS = 200
# The line around an excerpt that its redaction reads: a secret that starts in the excerpt ends in
# it (a PEM block of a 4096-bit RSA key is some 3,300 characters). A batch holds at most 20,000.
EXCERPT_WINDOW = 4_096
# How deep a line's JSON may nest. Every walk of a line's values (its text, its lone surrogates)
# recurses a level a call or two, so a line nested deeper than this is the line's reject before any
# walk starts, not a RecursionError that would end the whole ingest; real logs nest some 10 levels.
MAX_NESTING = 200
_EMBEDDING = re.compile(r'"embedding"\s*:\s*\[')
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
BOM = b"\xef\xbb\xbf"


class Reject(Exception):
    """A line (or a turn) that cannot be ingested; the message is the stored reason."""


def reason_of(exc: Exception) -> str:
    """A reject's reason: a Reject's own, else what a reader did not foresee in this content
    (`unreadable: IndexError: …`), which costs the line, never the run."""
    return str(exc) if isinstance(exc, Reject) else f"unreadable: {type(exc).__name__}: {exc}"[:300]


Lines = Iterator[tuple[int, bytes]]  # (1-based line number, the physical line as read)


@dataclass
class Read:
    """What a harness reader made of one line: `turn` (with its row), `reject` (with its reason),
    `skip` or `fold`."""

    outcome: str
    line_no: int
    row: dict | None = None
    reason: str | None = None
    excerpt: str | None = None


def cut_embedding(line: str) -> tuple[str, str | None]:
    """Cut the embedding array out of the raw line: `]` cannot occur inside a float array, and
    the pattern cannot occur inside a JSON string, whose quotes are escaped. Returns the line with
    a null embedding and the array's text as it was."""
    match = _EMBEDDING.search(line)
    if not match:
        return line, None
    end = line.find("]", match.end())
    if end < 0:
        return line, None
    return line[: match.start()] + '"embedding":null' + line[end + 1 :], line[match.end() - 1 : end + 1]


def excerpt(raw: bytes) -> str:
    """A rejected line as the `rejects` table keeps it, never an embedding's floats: its first
    `EXCERPT_WINDOW` characters, which the ingest redacts before it cuts them to `EXCERPT_CHARS`."""
    return cut_embedding(raw.decode("utf-8", "replace"))[0][:EXCERPT_WINDOW]


def decode(raw: bytes) -> str:
    """Strict: replacing invalid bytes would make ids that differ only in them one id."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Reject(f"invalid-utf8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1} ({exc.reason})") from None


def load(line: str) -> tuple[dict, str | None]:
    """The line's JSON object with its embedding cut out, and the embedding's text as cut (unchecked)."""
    text, cut = cut_embedding(line)
    return load_json(text), cut


def load_json(text: str, what: str = "line") -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"column {exc.colno}" if what == "line" else f"line {exc.lineno} column {exc.colno}"
        raise Reject(f"json-parse: {exc.msg} at {where}") from None
    except (ValueError, RecursionError) as exc:  # a 4300+ digit number, nesting too deep
        raise Reject(f"json-parse: {exc}"[:300]) from None
    if not isinstance(value, dict):
        raise Reject(f"not-an-object: {what} holds a JSON {type(value).__name__}")
    if text.count("{") + text.count("[") > MAX_NESTING:  # else it cannot nest that deep: no walk
        _check_nesting(value, what)
    if _SURROGATE_ESCAPE.search(text):
        _refuse_lone_surrogate_ids(value)
        value = without_lone_surrogates(value)
    return value


def _check_nesting(value: dict, what: str) -> None:
    """Refuse a value nested deeper than MAX_NESTING, walked without recursion."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise Reject(f"too-deep: the {what}'s JSON nests more than {MAX_NESTING} levels")
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


# Where a line's identities are (memory rows, simple turns, graph nodes and edges, summaries,
# harness events): a lone surrogate there is refused, since replacing it would make distinct ids one.
_ID_PATHS = (
    ("id",),
    ("session_id",),
    ("sessionId",),
    ("uuid",),
    ("metadata", "sessionId"),
    ("data", "id"),
    ("data", "source"),
    ("data", "target"),
    ("data", "properties", "sessionId"),
    ("payload", "id"),
)


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _refuse_lone_surrogate_ids(value: dict) -> None:
    for path in _ID_PATHS:
        node = value
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, str) and _has_lone_surrogate(node):
            escaped = node.encode("ascii", "backslashreplace").decode("ascii")
            raise Reject(
                f"lone-surrogate-id: {'.'.join(path)} {escaped[:120]!r} holds a lone UTF-16 surrogate escape; "
                "replaced, it would merge with other ids"
            )


def without_lone_surrogates(value):
    """JSON.stringify writes a lone surrogate (text cut inside an emoji) as `\\udXXX`; Python
    decodes it to a str that cannot be encoded as UTF-8, which would fail the whole batch's
    insert. Replace each lone surrogate with U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {k: without_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_lone_surrogates(v) for v in value]
    return value


def text_field(obj: dict, key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Reject(f"wrong-type: {where}{key} is {type(value).__name__}, expected string")
    return value


def required_id(obj: dict, key: str, where: str, code: str) -> str:
    value = text_field(obj, key, where)
    if value is None or not value.strip():
        raise Reject(f"{code}: {where}{key} is missing or empty")
    return value


def timestamp(value: object, where: str) -> int | None:
    try:
        return parse_timestamp_ms(value)
    except ValueError as exc:
        raise Reject(f"bad-timestamp: {where}timestamp: {exc}") from None


def turn_row(
    *,
    turn_id,
    session_id,
    ts_ms,
    kind,
    prompt,
    thought,
    response,
    document,
    meta_get,
    source,
    line_no,
    required=("prompt", "thought", "response"),
) -> dict:
    rebuilt = False
    if document is None or not document.strip():
        if kind != "agent-interaction":
            raise Reject(f"empty-turn-fields: a {kind!r} row has no document")
        fields = {"prompt": prompt, "thought": thought, "response": response}
        empty = [name for name in required if not (fields[name] or "").strip()]
        if empty:
            raise Reject(f"empty-turn-fields: no document, and {', '.join(empty)} empty")
        document, rebuilt = compose_document(prompt, thought, response), True
    return {
        "id": turn_id,
        "session_id": session_id,
        "ts_ms": ts_ms,
        "type": kind,
        "prompt": prompt,
        "thought": thought,
        "response": response,
        "document": document,
        "document_rebuilt": rebuilt,
        "agent": meta_get("agent"),
        "agent_identity": meta_get("agentIdentity"),
        "model": meta_get("model"),
        "user_id": meta_get("userId"),
        "amount_tool_calls": None,
        "tools_used": None,
        "archived_at": None,
        "archived_reason": None,
        "source_file": source,
        "source_line": line_no,
        # Where the work happened, as the harness recorded it (the working directory and its git
        # branch), when it does.
        "project": None,
        "git_branch": None,
    }


def check_derivable(row: dict) -> None:
    """What the store derives from a turn as it writes it, tried on this turn alone: its session's
    partition key, its id's place in the canonical order (an ICU sort key), and the UTF-8 of the
    text the input revision hashes and the raw bytes count (the revision's JSON and hash cannot fail
    on text that encodes). A turn any of them fails for is this line's reject, not an error of the
    whole batch's write. (Fidelity terms degrade instead: `resources.store.fidelity`.)"""
    try:
        partition_key(row["session_id"])
        id_sort_key(row["id"])
        for key in ("id", "session_id", "document", "agent_identity", "user_id"):
            if row[key] is not None:
                row[key].encode("utf-8")
    except Exception as exc:  # whatever it is, it costs this turn only
        raise Reject(f"underivable: {type(exc).__name__}: {exc}"[:300]) from None


# --- the turn a harness reader builds from several events ---------------------------------------


@dataclass
class PendingTurn:
    """A turn being read: a user's prompt and everything the agent did until the next one."""

    turn_id: str
    session_id: str
    line_no: int  # where it starts, and is counted
    first_line: bytes
    ts_ms: int | None = None
    agent: str | None = None
    model: str | None = None
    project: str | None = None  # the working folder or repository the session ran in
    git_branch: str | None = None
    prompt: list[str] = field(default_factory=list)
    thought: list[str] = field(default_factory=list)
    response: list[str] = field(default_factory=list)
    tool_calls: int = 0
    tools: list[str] = field(default_factory=list)

    def tool(self, name: str, call: str) -> None:
        """A tool call, kept in the response as `[tool name] arguments`."""
        self.tool_calls += 1
        if name not in self.tools:
            self.tools.append(name)
        self.response.append(f"[tool {name}] {call}".rstrip())

    def output(self, text: str, label: str = "output") -> None:
        """A tool's output, kept whole in the response (every turn's text is bounded where a
        prompt is built from it, not here: docs/ingest.md)."""
        self.response.append(f"[{label}] {text}".rstrip())

    def finish(self, source: str) -> Read:
        """The turn as a `turns` row, or the reject of its first line."""
        try:
            prompt, thought, response = (
                "\n".join(parts).strip() for parts in (self.prompt, self.thought, self.response)
            )
            if not (prompt.strip() or thought.strip() or response.strip()):
                raise Reject("empty-turn-fields: no prompt, thought or response text")
            meta = {"agent": self.agent, "model": self.model}
            row = turn_row(
                turn_id=self.turn_id,
                session_id=self.session_id,
                ts_ms=self.ts_ms,
                kind="agent-interaction",
                prompt=prompt,
                thought=thought,
                response=response,
                document=None,
                meta_get=meta.get,
                source=source,
                line_no=self.line_no,
                required=(),
            )
            row["amount_tool_calls"] = self.tool_calls
            row["project"], row["git_branch"] = self.project, self.git_branch
            row["tools_used"] = json.dumps(self.tools) if self.tools else None
            row["embedding"] = None
            check_derivable(row)
            return Read("turn", self.line_no, row=row)
        except Reject as reason:
            return Read("reject", self.line_no, reason=str(reason), excerpt=excerpt(self.first_line))


def block_text(value) -> str:
    """Text out of a message's content: a string, or a list of parts with `text` (image and other
    parts named by their type)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(filter(None, (_part_text(part) for part in value)))
    if isinstance(value, dict):
        return _part_text(value)
    return json.dumps(value, ensure_ascii=False)


def _part_text(part) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return json.dumps(part, ensure_ascii=False)
    for key in ("text", "content", "output"):
        if key in part:
            return block_text(part[key])
    return f"[{part.get('type', 'part')}]"


def arguments_text(value) -> str:
    """A tool call's arguments as one line of JSON (a string is kept as written)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
