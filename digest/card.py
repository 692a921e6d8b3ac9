"""The session card: a session's account made from its own stored facts, with no model call.

A card says what the log shows: the ask (the first real prompt, and the later ones that change
direction), the files edited and created, the commands with their exit status, the test runs, the
errors met, the commits made, and how the session ended, each with the turn it came from. Every
word on it is the session's own or a fixed label, so it invents nothing (it can still miss what
matters); it is bounded in size: a line of at most `LINE_CHARS` for an agent, a text of at most
`TEXT_CHARS` for a person.

The title is the session's `ok` summary's where it has one, else the first ask's gist. A card is
stored as its own tier (`source_tier` `facts`, degraded, not raw-canonical: a navigation summary),
and is the session's account wherever no `ok` summary is (docs/cards.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

# Bumped when a change here would write a different card for the same turns, with a migration
# that makes the stored cards again (`refresh_all_cards`).
CARD_VERSION = 1
SOURCE_TIER = "facts"
LINE_CHARS = 300
TEXT_CHARS = 2_000
PROMPT_CHARS = 1_500  # of each turn's prompt, read for its ask
REPLY_CHARS = 4_000  # of the last turn's response, read for the outcome
GIST_CHARS = 140
WORDS_CHARS = 300  # of a prompt, compared with the asks before it
MAX_ASKS = 4
LISTED = 6  # items of each kind listed on the text (the line lists fewer)

# Lines a harness or its prompt template writes around the real ask.
_BOILERPLATE = re.compile(
    r"^(?:we'?re currently solving the following|here'?s the issue text|issue:?$|instructions:?$"
    r"|@agent continue|\^c again to exit|\^c keyboardinterrupt"
    r"|i'?ve uploaded a (?:python )?code repository|consider the following (?:pr|issue) description"
    r"|can you help me implement the necessary changes|caveat: the messages below were generated"
    r"|<uploaded_files>|you are a helpful|you are an? (?:ai|autonomous|expert)\b)",
    re.I,
)
_TAG = re.compile(r"</?[A-Za-z_][\w:.-]{0,40}(?:\s[^<>\n]{0,200})?/?>")
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_MARKDOWN = re.compile(r"^\s{0,3}(?:#{1,6}\s+|[-*+]\s+|>\s?|\d{1,3}[.)]\s+)")
# A label a harness or a template puts before the words themselves (mini-SWE-agent's `THOUGHT:`).
_LEAD_IN = re.compile(
    r"^(?:please (?:solve|fix) (?:this|the following) (?:issue|problem)|here'?s the issue text|issue|task"
    r"|thought|discussion|answer|response)\s?:\s*",
    re.I,
)
_SLASH = re.compile(r"^/([A-Za-z][\w-]{0,30})\b\s*(.*)", re.S)
_ASKING_COMMANDS = frozenset({"ask", "code", "architect", "chat", "agent"})
_ACKNOWLEDGEMENT = re.compile(
    r"^(?:ok(?:ay)?|yes|yep|yeah|sure|no|nope|continue|go on|go ahead|proceed|next|done|lgtm|thanks?(?: you)?"
    r"|please continue|keep going|try again|do it|y|n|good|great|perfect|fine)\b[\s.!,]*(?:please|thanks)?[.!]*$",
    re.I,
)
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n")
_WORD = re.compile(r"\w{3,}", re.U)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
# Tool-call marks of the readers (`digest.facts`) and of Claude Code's exported text.
_TOOL_LINE = re.compile(
    r"^\s*(?:\[(?:tool [^\]]{1,100}|tool result|output|subagent tool result|system|command|exit)\]|⎿|[⏺●] \w+\()"
)
# A line of bold headings only (an editor's planning notes), and a bracketed mode label.
_HEADINGS = re.compile(r"^(?:\*\*[^*]{1,120}\*\*\s*)+$")
_MODE_LABEL = re.compile(r"^\[[A-Z][A-Z :_-]{2,30}\]\s*")
# A diff as a reply (an agent's submission): its files.
_DIFF_FILE = re.compile(r"^diff --git a/(\S{1,300}) b/", re.M)
# A run's end as its harness wrote it (mini-SWE-agent's `exit`, `digest.readers.trajectory`), unless
# it is the diff the run submitted: the error it stopped on.
_EXIT_LINE = re.compile(r"^\[exit\] (?!diff --git)(\S.*)$", re.M)
# What code and tool output look like, as against a sentence.
_CODE_START = re.compile(
    r"^(?:[\s{}\[\]();=<>#$|/\\@*+-]|\"\"\"|\'\'\'|(?:def|class|for|if|else|elif|return|import|from|const|let|var|function|public|private|index|diff)\b)"
)
_CODE_SIGNS = re.compile(r"[{}]|;$|\s=\s|\w=\w|\w\.\w+\(|\w\([\"'\w]|'\w+',|\"\"\"|:$")
# Errors a session can end on that say why it stopped.
_ENDING = re.compile(
    r"rate.?limit|too many requests|\b429\b|credit balance|quota|token limit|context (?:length|window)"
    r"|maximum context|not found|unauthori[sz]ed|\b401\b|overloaded|interrupted",
    re.I,
)


@dataclass(frozen=True)
class CardTurn:
    """What a card reads of one turn, in canonical order (`index` counts from 1)."""

    id: str
    index: int
    prompt: str  # its first `PROMPT_CHARS` characters
    response_tail: str = ""  # the last turn's last `REPLY_CHARS` characters, else empty


@dataclass(frozen=True)
class Item:
    text: str
    turn: int  # the turn's place in the session, from 1
    turn_id: str


@dataclass(frozen=True)
class SessionCard:
    session_id: str
    title: str
    title_source: str  # "summary" | "ask" | "none"
    turn_count: int
    harness: str | None = None
    project: str | None = None
    branch: str | None = None
    first_ms: int | None = None
    last_ms: int | None = None
    asks: list[Item] = field(default_factory=list)
    edited: list[Item] = field(default_factory=list)
    created: list[Item] = field(default_factory=list)
    commands: list[Item] = field(default_factory=list)
    tests: list[Item] = field(default_factory=list)
    errors: list[Item] = field(default_factory=list)
    commits: list[Item] = field(default_factory=list)
    outcome: Item | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SessionCard:
        data = json.loads(text)
        items = {
            k: [Item(**i) for i in data[k]]
            for k in ("asks", "edited", "created", "commands", "tests", "errors", "commits")
        }
        outcome = Item(**data["outcome"]) if data.get("outcome") else None
        return cls(**{**data, **items, "outcome": outcome})

    # --- as shown ---------------------------------------------------------------------------------

    def line(self) -> str:
        """One line for an agent, at most `LINE_CHARS`: the title, then what happened, most telling first."""
        head = f"Asked: {self.title}" if self.title_source == "ask" else self.title
        tail = f"{self.turn_count} turn{'s' if self.turn_count != 1 else ''}" + (
            f", {self.harness}" if self.harness else ""
        )
        parts = [
            # In the order they are kept when the line is full.
            ("Outcome", [self.outcome] if self.outcome else [], 1, 80),
            ("Edited", self.edited, 3, 60),
            ("Created", self.created, 2, 70),
            ("Tests", self.tests[-1:], 1, 60),
            ("Errors", self.errors, 1, 90),
            ("Commits", self.commits, 1, 80),
            ("Ran", self.commands, 1, 70),
        ]
        budget = LINE_CHARS - len(tail) - 2
        head = _cut(head, 100).rstrip(".")
        pieces, used = [], len(head) + 2
        for label, items, shown, limit in parts:
            if not items:
                continue
            words = _cut(", ".join(_short(i.text, label) for i in items[:shown]), limit)
            more = f" (+{len(items) - shown})" if len(items) > shown else ""
            piece = f"{label}: {words}{more}"
            if used + len(piece) + 2 <= budget:
                pieces.append((label, piece))
                used += len(piece) + 2
        ordered = [head, *(p for _, p in sorted(pieces, key=lambda p: _LINE_ORDER.index(p[0]))), tail]
        # A piece that ends a sentence already (or was cut, "…") needs no full stop after it.
        return "".join(p + (" " if p.endswith(("…", ".", "?", "!")) else ". ") for p in ordered[:-1]) + tail + "."

    def markdown(self) -> str:
        """The text as Markdown (the partition's metadata): the title a heading, a paragraph a line."""
        head, *rest = self.text().split("\n")
        return (
            f"### {head}\n\n" + "\n\n".join(line.replace("`", "'") for line in rest) + "\n\n*card: source tier facts*"
        )

    def text(self) -> str:
        """The card for a person (`show`, the partition), at most `TEXT_CHARS`, each item with its turn."""
        lines = [self.title]
        where = " · ".join(
            p
            for p in (
                self.project and (self.project + (f" ({self.branch})" if self.branch else "")),
                f"{self.turn_count} turns",
                self.harness,
            )
            if p
        )
        lines.append(where)
        if self.asks:
            lines.append(f"Asked: {self.asks[0].text} [#{self.asks[0].turn}]")
            lines += [f"  then: {a.text} [#{a.turn}]" for a in self.asks[1:]]
        for label, items in (
            ("Edited", self.edited), ("Created", self.created), ("Ran", self.commands), ("Tests", self.tests),
            ("Errors", self.errors), ("Commits", self.commits),
        ):  # fmt: skip
            if items:
                listed = "; ".join(f"{_cut(i.text, 120)} [#{i.turn}]" for i in items[:LISTED])
                more = f" (+{len(items) - LISTED} more)" if len(items) > LISTED else ""
                lines.append(f"{label}: {listed}{more}")
        if self.outcome:
            lines.append(f"Outcome: {self.outcome.text} [#{self.outcome.turn}]")
        text = "\n".join(lines)
        return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


# In the line, the asks and files come before how it ended.
_LINE_ORDER = ["Edited", "Created", "Ran", "Tests", "Errors", "Commits", "Outcome"]


def _short(text: str, label: str) -> str:
    """A path by its last two parts on the line; anything else as it is."""
    if label in ("Edited", "Created"):
        parts = text.split("/")
        return "/".join(parts[-2:]) if len(parts) > 2 else text
    return text


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,.;:") + "…"


# --- the ask --------------------------------------------------------------------------------------


def clean_prompt(prompt: str, keep_lines: bool = False) -> str:
    """A prompt as a person typed it: without code blocks, tags, harness boilerplate and markdown marks;
    a slash command that asks (`/ask …`, `/code …`) keeps its question, any other leaves nothing.
    `keep_lines`: one line of text a line kept, else one line in all."""
    text = (prompt or "").strip()
    if match := _SLASH.match(text):
        if match.group(1).lower() not in _ASKING_COMMANDS:
            return ""
        text = match.group(2)
    text = _FENCE.sub(" ", _TAG.sub(" ", text))
    kept = []
    for line in text.splitlines():
        line = _MODE_LABEL.sub("", _LEAD_IN.sub("", _MARKDOWN.sub("", line).strip()))
        if line and not _BOILERPLATE.match(line) and not _TOOL_LINE.match(line) and not _HEADINGS.match(line):
            kept.append(line)
    if keep_lines:
        return "\n".join(" ".join(line.split()) for line in kept)
    return " ".join(" ".join(kept).split())


def gist(text: str, limit: int = GIST_CHARS) -> str:
    """The first sentence (and the next, while short) of a cleaned text, at most `limit` characters."""
    sentences = [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]
    if not sentences:
        return ""
    out = sentences[0]
    for sentence in sentences[1:]:
        if len(out) + len(_CJK.findall(out)) >= 40:  # a CJK character says about as much as two letters
            break
        out = f"{out} {sentence}"
    return _cut(out, limit)


def _words(text: str) -> set[str]:
    """The words a prompt opens with (its first `WORDS_CHARS` characters: enough to tell its subject)."""
    text = text[:WORDS_CHARS].lower()
    return set(_WORD.findall(text)) | set(_CJK.findall(text))


def _substantial(text: str) -> bool:
    return (len(text.split()) >= 4 or len(_CJK.findall(text)) >= 6) and not _ACKNOWLEDGEMENT.match(text)


def asks(turns: list[CardTurn]) -> list[Item]:
    """The first real prompt, then each later one that changes direction: substantial (not an
    acknowledgement) and sharing under half its words with the asks before it."""
    found: list[Item] = []
    seen: set[str] = set()
    for turn in turns:
        cleaned = clean_prompt(turn.prompt)
        if not cleaned or (found and not _substantial(cleaned)):
            continue
        words = _words(cleaned)
        if found and len(words & seen) >= 0.5 * max(1, len(words)):
            continue
        found.append(Item(gist(cleaned), turn.index, turn.id))
        seen |= words
        if len(found) >= MAX_ASKS:
            break
    return found


# --- the facts ------------------------------------------------------------------------------------


def _fact_items(facts: list[dict], turns_by_id: dict[str, CardTurn]) -> dict[str, list[Item]]:
    """The facts as card items by kind, in turn order, each once (a file by its path, a command by
    its line and status, an error by its text); a file created is not listed as edited too."""
    out: dict[str, dict[str, Item]] = {k: {} for k in ("edited", "created", "commands", "tests", "errors", "commits")}
    ordered = sorted((f for f in facts if f["turn_id"] in turns_by_id), key=lambda f: turns_by_id[f["turn_id"]].index)
    for f in ordered:
        turn = turns_by_id[f["turn_id"]]
        kind, value, detail = f["kind"], f["value"].strip(), f.get("detail")
        if kind == "file-create":
            out["created"].setdefault(value, Item(value, turn.index, turn.id))
        elif kind == "file-edit" and value not in out["created"]:
            out["edited"].setdefault(value, Item(value, turn.index, turn.id))
        elif kind == "command":
            line = _cut(value.splitlines()[0] if value else value, 100)
            text = f"{line} → {detail}" if detail else line
            out["commands"].pop(text, None)  # the last run of the same command stands, in its place
            out["commands"][text] = Item(text, turn.index, turn.id)
        elif kind == "test":
            out["tests"][f"{turn.index}:{value}"] = Item(value, turn.index, turn.id)
        elif kind == "error":
            out["errors"].setdefault(_cut(value, 160), Item(_cut(value, 160), turn.index, turn.id))
        elif kind == "commit":
            text = f"{value[:7]} {detail}" if detail else value[:12]
            out["commits"].setdefault(value[:7], Item(_cut(text, 100), turn.index, turn.id))
    items = {k: list(v.values()) for k, v in out.items()}
    items["tests"] = _test_story(items["tests"])
    items["commands"].sort(key=_telling)
    return items


def _telling(command: Item) -> int:
    """A command's place on the card: the failed first, then what builds, tests and changes, then
    what only looks around (`ls`, `grep`, `sed -n`), each in turn order."""
    if re.search(r"→ exit [1-9]", command.text):
        return 0
    programs = {part.split()[0] for part in re.split(r"&&|\|\||;|\|", command.text) if part.split()}
    return 2 if programs <= _LOOKING else 1


_LOOKING = frozenset(
    {"ls", "cat", "grep", "rg", "find", "sed", "nl", "head", "tail", "pwd", "cd", "echo", "wc", "tree", "less", "file"}
)


def _test_story(runs: list[Item]) -> list[Item]:
    """The test runs as failed → passed: the first failing tally and the last tally, when they differ."""
    if len(runs) <= 1:
        return runs
    failed = next((r for r in runs if "failed" in r.text or "error" in r.text), None)
    return [failed, runs[-1]] if failed is not None and failed is not runs[-1] else [runs[-1]]


# --- how it ended ---------------------------------------------------------------------------------


def _prose(sentence: str) -> bool:
    """A sentence, not code or tool output: three words or more (or four CJK characters), hardly any
    of code's punctuation, and more letters than anything else."""
    if _CODE_START.match(sentence) or not (len(sentence.split()) >= 3 or len(_CJK.findall(sentence)) >= 4):
        return False
    if _CODE_SIGNS.search(sentence):
        return False
    code = sum(c in "[]()<>|\\$" for c in sentence)
    letters = sum(c.isalpha() for c in sentence)
    return code <= 2 + 0.02 * len(sentence) and letters >= 0.5 * len(sentence)


def _last_reply(response: str, cut: bool) -> str:
    """The last prose of a response: the text after its last tool call and output (`cut`: the
    response's head was cut off, so its first line may be a part of one)."""
    lines = response.splitlines()[1:] if cut else response.splitlines()
    blocks, current = [], []
    in_tool = False
    for line in lines:
        if _TOOL_LINE.match(line):
            if current:
                blocks.append(current)
            current, in_tool = [], True
            continue
        if in_tool and (line.startswith((" ", "\t")) or not line.strip()):
            continue  # an output's indented or blank lines
        in_tool = False
        current.append(line)
    if current:
        blocks.append(current)
    for block in reversed(blocks):
        text = clean_prompt("\n".join(block), keep_lines=True)
        # From its first sentence that reads as one (a reply may open with code or a file listing).
        at = 0
        for sentence in _SENTENCE_END.split(text):
            start = text.find(sentence, at)
            at = start + len(sentence)
            if sentence and _prose(sentence.strip()):
                return " ".join(text[start:].split())
    return ""


def reply_gist(response: str, limit: int = GIST_CHARS) -> str:
    """The gist of a response's last prose (of its last `REPLY_CHARS`): what the agent said it did."""
    tail = response[-REPLY_CHARS:]
    return gist(_last_reply(tail, cut=len(response) > REPLY_CHARS), limit)


def outcome(turns: list[CardTurn], errors: list[Item], commands: list[Item]) -> Item | None:
    """How the session ended as its log shows it: an error in its last turn that says why it
    stopped, else the error its harness ended the run on, else the last reply's first sentence, else its last command's status."""
    if not turns:
        return None
    last = turns[-1]
    for error in reversed(errors):
        if error.turn == last.index and _ENDING.search(error.text):
            return Item(f"ended on: {error.text}", error.turn, error.turn_id)
    tail = last.response_tail
    if ended := list(_EXIT_LINE.finditer(tail)):
        return Item(_cut(f"ended on: {ended[-1].group(1)}", 160), last.index, last.id)
    diffs = list(_DIFF_FILE.finditer(tail))
    if diffs and not _last_reply(tail[diffs[-1].start() :], cut=False):  # it ends on the diff
        listed = ", ".join(dict.fromkeys(d.group(1) for d in diffs))
        return Item(_cut(f"submitted a diff of {listed}", 160), last.index, last.id)
    reply = _last_reply(tail, cut=len(tail) >= REPLY_CHARS)
    if reply:
        return Item(gist(reply, 160), last.index, last.id)
    ran = [c for c in commands if c.turn == last.index]
    if ran:
        return Item(f"last ran: {ran[-1].text}", last.index, last.id)
    return None


# --- the card -------------------------------------------------------------------------------------


def build_card(
    session: dict, turns: list[CardTurn], facts: list[dict], summary_title: str | None = None
) -> SessionCard:
    """The card of one session: `session` its `sessions` row (with `harness`, its turns' commonest agent),
    `turns` in canonical order (the last with its `response_tail`), `facts` its `turn_facts` rows,
    `summary_title` its `ok` summary's title, if it has one."""
    by_id = {t.id: t for t in turns}
    items = _fact_items(facts, by_id)
    found = asks(turns)
    if summary_title:
        title, source = _cut(summary_title, GIST_CHARS), "summary"
    elif found:
        # A greeting ("hi") says nothing: the first ask that does is the title.
        title = next((a.text for a in found if len(a.text.split()) >= 3 or len(_CJK.findall(a.text)) >= 4), None)
        title, source = title or found[0].text, "ask"
    else:
        title, source = "(no prompt in its turns)", "none"
    return SessionCard(
        session_id=session["session_id"],
        title=title,
        title_source=source,
        turn_count=session.get("turn_count") or len(turns),
        harness=session.get("harness"),
        project=session.get("project"),
        branch=session.get("git_branch"),
        first_ms=session.get("first_activity_ms"),
        last_ms=session.get("last_activity_ms"),
        asks=found,
        outcome=outcome(turns, items["errors"], items["commands"]),
        **items,
    )
