"""Codex CLI rollouts, in each layout the CLI has written (docs/ingest.md § Harness logs):

- the `{timestamp, type, payload}` envelope (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`), one
  line per item the CLI recorded (`session_meta`, `turn_context`, `response_item`, `event_msg`,
  `compacted`);
- the JSONL before the envelope: a first line `{id, timestamp, instructions, git?}`, then bare
  response items and `record_type` state lines;
- the TypeScript CLI's `.json` document `{"session": {id, timestamp, instructions}, "items": [...]}`
  (`~/.codex/sessions/rollout-*.json`), read whole.

A turn is a prompt the user typed and every item until the next one. The session is the first
`session_meta`'s id (else the file name): a resumed or forked rollout carries its own id first and
then a copy of the earlier session (its `session_meta` and items) stamped at the resume; that copy
is read as this session's opening turns, so a session never takes another's id and its turns
(`<session>:00001`, …) never replace another file's. What the CLI writes into the conversation
itself (`<environment_context>`, `<user_instructions>`, AGENTS.md, `developer` messages) starts no
turn; `<turn_aborted>`, `<user_action>` and `<user_shell_command>` are kept as text of their turn.
`event_msg` copies of messages (`user_message`, `agent_message`, `agent_reasoning`) are read only
when the turn does not already hold the same text from a `response_item` (and the other way
round), so a file with either copy, or both, reads the same.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Mapping
from itertools import chain
from pathlib import Path

from digest.readers.common import (
    Lines,
    PendingTurn,
    Read,
    Reject,
    arguments_text,
    block_text,
    decode,
    excerpt,
    load,
    load_json,
    reason_of,
    text_field,
    timestamp,
)
from digest.readers.harness import Harness, Head
from digest.readers.trajectory import element_positions

KIND = "codex"
AGENT = "codex"
LINE_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
ITEM_TYPES = frozenset(
    {
        "message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
        "custom_tool_call_output", "local_shell_call", "web_search_call",
    }
)  # fmt: skip
# A user message the CLI wrote itself: `<tag>…</tag>` blocks, each tag with a `_` or a space
# (`<environment_context>`, `<permissions instructions>`), which a typed prompt almost never is.
_CLI_BLOCK = re.compile(r"\s*<([a-z]+(?:[_ ][a-z]+)+)>(.*?)</\1>\s*", re.DOTALL)
# Of those, the ones kept as text of their turn, and their label; the others are context, skipped.
_KEPT_BLOCKS = {"turn_aborted": "aborted", "user_action": "user action", "user_shell_command": "user shell"}
_AGENTS_MD = "# AGENTS.md instructions"
_CWD = re.compile(r"<cwd>(.*?)</cwd>", re.DOTALL)
# `event_msg` payloads that copy a message: what part of the turn they are.
_EVENT_COPIES = {"user_message": "prompt", "agent_message": "response", "agent_reasoning": "thought"}
_DOCUMENT = re.compile(rb'\A\s*\{\s*"session"\s*:\s*\{.*"items"\s*:\s*\[', re.DOTALL)


def sniff(head: Head) -> bool:
    """A rollout's lines (or its older JSONL, or the TypeScript CLI's `.json` document)."""
    if _DOCUMENT.match(head.data):
        return True
    objs = head.objects
    if any(obj.get("type") in LINE_TYPES and isinstance(obj.get("payload"), dict) for obj in objs):
        return True
    # The JSONL before the envelope: its first line is the session, with the instructions it started under.
    first = objs[0] if objs else {}
    return {"id", "timestamp"} <= first.keys() and "instructions" in first and "session_id" not in first


def read(lines: Lines, source: str, resume: dict | None = None) -> Iterator[Read]:
    """`resume`: `resume_context` of the turn whose first line `lines` start at (a grown rollout
    read on from the turn open at its old end, `digest.manifest`)."""
    first: list[tuple[int, bytes]] = []
    for numbered in lines:
        first.append(numbered)
        if numbered[1].strip():
            break
    if first and (first[-1][1].strip() == b"{" or _DOCUMENT.match(first[-1][1])):
        yield from _read_document([*first, *lines], source)
    else:
        yield from _read_lines(chain(first, lines), source, resume)


class _Session:
    """One rollout's state as its items are read: the session, the turn being read, and the turns done."""

    def __init__(self, source: str, resume: dict | None = None):
        self.session_id = Path(source).name.removesuffix(".jsonl").removesuffix(".json")  # until the file says
        self.owned = False  # whether a `session_meta` has named the session
        self.session_ts: int | None = None
        self.model: str | None = None
        self.project: str | None = None
        self.git_branch: str | None = None
        self.count = 0
        if resume:  # read on from a turn's first line: the head's `session_meta` was read before
            self.owned = True
            for key in ("session_id", "session_ts", "model", "project", "git_branch", "count"):
                setattr(self, key, resume[key])
        self.turn: PendingTurn | None = None
        self.done: list[PendingTurn] = []
        # The message texts the turn holds, by part, with where each came from (`item` or `event`).
        self.texts: dict[tuple[str, str], str] = {}
        self.prompt_from: str | None = None  # where the turn's prompt came from

    def meta(self, payload: dict, ts) -> None:
        meta_id = text_field(payload, "id", "payload.")
        meta_ts = timestamp(payload.get("timestamp", ts), "payload.")
        if self.owned or not meta_id:
            return  # a later `session_meta` opens the copy of the session this one resumed or forked
        self.owned, self.session_id, self.session_ts = True, meta_id, meta_ts
        self.project = _text(payload.get("cwd")) or self.project
        git = payload.get("git")
        self.git_branch = _text(git.get("branch")) if isinstance(git, dict) else None

    def context(self, payload: dict) -> None:
        """A `turn_context`: the model and working folder from here on, the turn's too."""
        self.model = text_field(payload, "model", "payload.") or self.model
        self.project = _text(payload.get("cwd")) or self.project
        if self.turn is not None:
            self.turn.model, self.turn.project = self.model, self.project

    def item(self, item: dict, ts, line_no: int, raw: bytes, can_start: bool = True) -> str:
        """A response item: `start` (it opens a turn, counted at its line), `fold` or `skip`."""
        kind = item.get("type")
        if kind not in ITEM_TYPES and isinstance(item.get("role"), str):
            kind = "message"  # some TypeScript-CLI rollouts write a message as `{role, content}` alone
        if kind not in ITEM_TYPES:
            return "skip"
        if kind == "reasoning":
            parts = item.get("summary") if isinstance(item.get("summary"), list) else [item.get("summary")]
            outcomes = [self._copy("thought", block_text(part), "item", ts, line_no, raw) for part in parts]
            return next((o for o in ("start", "fold") if o in outcomes), "skip")
        if kind != "message":
            if self.turn is None:  # work before any prompt (a file cut at its head): a turn of its own
                self._start(ts, line_no, raw)
                _add_item(self.turn, item)
                return "start"
            _add_item(self.turn, item)
            return "fold"
        role = item.get("role")
        text = block_text(item.get("content"))
        if role == "assistant":
            return self._copy("response", text, "item", ts, line_no, raw)
        if role != "user":
            return "skip"  # `developer` and `system`: the CLI's instructions
        return self._user_text(text, "item", ts, line_no, raw, can_start)

    def _user_text(self, text: str, origin: str, ts, line_no: int, raw: bytes, can_start: bool) -> str:
        """A user message: a prompt, or what the CLI wrote itself (context skipped, notices kept)."""
        stripped = text.strip()
        if stripped.startswith(_AGENTS_MD):
            return "skip"
        blocks = _cli_blocks(stripped)
        if not blocks:
            return self._copy("prompt", text, origin, ts, line_no, raw, can_start)
        outcome = "skip"
        for tag, inner in blocks:
            if tag == "environment_context" and (cwd := _CWD.search(inner)):
                self.project = self.project or cwd.group(1).strip()  # the older rollouts' only cwd
            label = _KEPT_BLOCKS.get(tag)
            if label is not None and self._mark(label, "" if tag == "turn_aborted" else inner.strip()) == "fold":
                outcome = "fold"
        return outcome

    def event(self, payload: dict, ts, line_no: int, raw: bytes, can_start: bool = True) -> str:
        kind = payload.get("type")
        part = _EVENT_COPIES.get(kind)
        if part is not None:
            text = block_text(payload.get("message", payload.get("text")))
            if part != "prompt":
                return self._copy(part, text, "event", ts, line_no, raw, can_start)
            if payload.get("kind") not in (None, "plain"):  # some CLIs tag the context they send
                return "skip"
            return self._user_text(text, "event", ts, line_no, raw, can_start)
        if kind == "turn_aborted":  # the CLI writes it as a `<turn_aborted>` message too: one mark a turn
            return self._mark("aborted", "")
        if kind == "thread_rolled_back":
            # The turns it takes back stay stored: they were read, and the model saw them then.
            return self._mark("rolled back", f"{payload.get('num_turns')} turns")
        return "skip"

    def _mark(self, label: str, text: str) -> str:
        """A notice of the CLI's, as `[label] text` in the turn's response: once a turn when the CLI
        writes it both as an event and as a message (all but the rollback)."""
        if label != "rolled back" and ("mark", f"{label} {text}") in self.texts:
            return "skip"
        self.texts[("mark", f"{label} {text}")] = "item"
        return self._add(lambda turn: turn.response.append(f"[{label}] {text}".rstrip()))

    def _copy(self, part: str, text: str, origin: str, ts, line_no: int, raw: bytes, can_start: bool = True) -> str:
        """A message's text, once: the other origin's copy of a text the turn holds is skipped."""
        if not text.strip():
            return "skip"
        key = (part, text.strip())
        if self.texts.get(key, origin) != origin:
            return "skip"
        if part == "prompt" and self.prompt_from not in (None, origin) and not self._worked():
            return "skip"  # the other copy of the prompt just read (with images, their texts differ)
        if self.turn is None or (part == "prompt" and can_start):
            self._start(ts, line_no, raw)
            outcome = "start"
        else:
            outcome = "fold"
        getattr(self.turn, part).append(text)
        self.texts[key] = origin
        if part == "prompt":
            self.prompt_from = origin
        return outcome

    def _worked(self) -> bool:
        """Whether the turn holds anything besides its prompt."""
        return bool(self.turn.response or self.turn.thought or self.turn.tool_calls)

    def _add(self, fill) -> str:
        if self.turn is None:
            return "skip"  # a notice with no turn yet to belong to
        fill(self.turn)
        return "fold"

    def _start(self, ts, line_no: int, raw: bytes) -> None:
        if self.turn is not None:
            self.done.append(self.turn)
        self.count += 1
        self.texts, self.prompt_from = {}, None
        self.turn = PendingTurn(
            turn_id=f"{self.session_id}:{self.count:05d}",
            session_id=self.session_id,
            line_no=line_no,
            first_line=raw,
            ts_ms=timestamp(ts, "") if ts is not None else self.session_ts,
            agent=AGENT,
            model=self.model,
            project=self.project,
            git_branch=self.git_branch,
        )

    def unstart(self, line_no: int) -> None:
        """A turn begun at a line that is then rejected is no turn: the one before goes on."""
        if self.turn is not None and self.turn.line_no == line_no:
            self.turn = self.done.pop() if self.done else None
            self.count -= 1
            self.texts, self.prompt_from = {}, None


def _read_lines(lines: Lines, source: str, resume: dict | None = None) -> Iterator[Read]:
    session = _Session(source, resume)
    for line_no, raw in lines:
        if not raw.strip():
            yield Read("skip", line_no)
            continue
        try:
            kind, payload, ts = _line(raw)
            if kind == "session_meta":
                session.meta(payload, ts)
                outcome = "fold"
            elif kind == "turn_context":
                session.context(payload)
                outcome = "fold"
            elif kind == "response_item":
                outcome = session.item(payload, ts, line_no, raw)
            elif kind == "event_msg":
                outcome = session.event(payload, ts, line_no, raw)
            else:
                outcome = "skip"
        except Exception as exc:  # any content: this line's reject, never the run's end
            session.unstart(line_no)
            yield Read("reject", line_no, reason=reason_of(exc), excerpt=excerpt(raw))
            continue
        for turn in session.done:
            yield turn.finish(source)
        session.done.clear()
        if outcome != "start":  # a turn is counted when it is done
            yield Read(outcome, line_no)
    if session.turn is not None:
        yield session.turn.finish(source)


def _line(raw: bytes) -> tuple[str | None, dict | None, object]:
    """The line's type, payload and timestamp (checked), the older rollout's lines read as the newer's."""
    obj, _ = load(decode(raw))
    kind, payload = obj.get("type"), obj.get("payload")
    # The older rollout's bare item (a message may have a `role` and no `type`).
    if kind not in LINE_TYPES and (kind in ITEM_TYPES or isinstance(obj.get("role"), str)):
        kind, payload = "response_item", obj
    elif kind is None and "id" in obj and "timestamp" in obj:  # the older rollout's first line
        kind, payload = "session_meta", obj
    if kind in LINE_TYPES and not isinstance(payload, dict):
        raise Reject(f"wrong-type: payload is {type(payload).__name__}, expected object")
    ts = obj.get("timestamp")
    timestamp(ts, "")  # a bad one is the line's reject
    return kind, payload, ts


def _read_document(read_lines: list[tuple[int, bytes]], source: str) -> Iterator[Read]:
    """The `.json` rollout: one document; each turn counted at the line its first item starts on,
    the other lines folded into it (every item holds to its turn: a document has no torn line)."""
    try:
        turns = _document_turns(read_lines, source)
    except Exception as exc:  # any content: this file's reject, never the run's end
        yield Read("reject", read_lines[0][0], reason=reason_of(exc), excerpt=excerpt(read_lines[0][1]))
        yield from (Read("fold", n) for n, _ in read_lines[1:])
        return
    for line_no, _ in read_lines:
        yield turns[line_no].finish(source) if line_no in turns else Read("fold", line_no)


def _document_turns(read_lines: list[tuple[int, bytes]], source: str) -> dict[int, PendingTurn]:
    text = decode(b"".join(line for _, line in read_lines))
    doc = load_json(text, "file")
    meta, items = doc.get("session"), doc.get("items")
    if not isinstance(meta, dict) or not isinstance(items, list):
        raise Reject("not-a-rollout: `session` is not an object or `items` not a list")
    session = _Session(source)
    session.meta(meta, None)
    starts = [0]
    for _, line in read_lines:
        starts.append(starts[-1] + len(line.decode("utf-8")))
    positions = element_positions(text, "items", len(items))
    for i, (item, position) in enumerate(zip(items, positions)):
        if not isinstance(item, dict):
            raise Reject(f"wrong-type: items[{i}] is {type(item).__name__}, expected object")
        index = min(max(0, bisect.bisect_right(starts, position) - 1), len(read_lines) - 1)
        line_no, line = read_lines[index]
        # Items written on one line with the turn before them join it: a line is counted once.
        can_start = session.turn is None or session.turn.line_no != line_no
        session.item(item, None, line_no, line, can_start)
    if session.turn is not None:
        session.done.append(session.turn)
    if not session.done:
        raise Reject("no-turns: the rollout holds no prompt, reply or tool call")
    return {turn.line_no: turn for turn in session.done}


def _cli_blocks(text: str) -> list[tuple[str, str]]:
    """The CLI's blocks a user message is made of (its tag and inner text each), or none when
    anything else is in it: then the user typed it."""
    blocks, pos = [], 0
    while pos < len(text):
        match = _CLI_BLOCK.match(text, pos)
        if match is None:
            return []
        blocks.append((match.group(1), match.group(2)))
        pos = match.end()
    return blocks


def _add_item(turn: PendingTurn, item: dict) -> None:
    kind = item.get("type")
    if kind in ("function_call", "custom_tool_call"):
        turn.tool(str(item.get("name") or kind), arguments_text(item.get("arguments", item.get("input"))))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        turn.output(_output_text(item.get("output")))
    elif kind == "local_shell_call":
        action = item.get("action") if isinstance(item.get("action"), dict) else {}
        command = action.get("command")
        turn.tool("shell", " ".join(map(str, command)) if isinstance(command, list) else arguments_text(command))
    else:  # web_search_call
        turn.tool("web_search", arguments_text(item.get("action")))


def _output_text(output) -> str:
    """A call's output: a string, `{content, success}` as older rollouts write it, or content parts."""
    if isinstance(output, dict) and "content" in output:
        return block_text(output["content"])
    return block_text(output)


def _text(value) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def resume_context(row: dict) -> dict:
    """What `read` needs to go on from this turn's first line, as `digest.manifest` reads a growing
    rollout from the turn open at its end: the session (from the head's `session_meta`), the model,
    the turns counted before it, and the session's time (the time of an older rollout's turns,
    whose lines have none)."""
    return {
        "session_id": row["session_id"],
        "model": row["model"],
        "count": int(row["id"].rsplit(":", 1)[1]) - 1,
        "session_ts": row["ts_ms"],
        "project": row.get("project"),
        "git_branch": row.get("git_branch"),
    }


def home(env: Mapping[str, str], user_home: Path) -> Path:
    """`${CODEX_HOME:-~/.codex}/sessions`."""
    return (Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else user_home / ".codex") / "sessions"


HARNESS = Harness(
    KIND,
    "Codex",
    read,
    sniff,
    suffixes=(".json",),
    resume_context=resume_context,
    home=home,
    shell_tools=frozenset({"shell", "shell_command", "exec_command", "container.exec", "local_shell"}),
    patch_tools=frozenset({"apply_patch", "applypatch"}),
)
