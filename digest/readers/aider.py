"""aider chat histories (`.aider.chat.history.md`), as aider's `InputOutput` appends them:
`# aider chat started at <time>` opens a session; what the user typed is written as `#### ` lines
right after a blank line, each ending in a markdown line break (two spaces: `user_input` writes
them with `linebreak=True`); `> ` lines are aider's own output (tool output, command results,
confirmations), also ending in two spaces; the model's reply is written stripped, as Markdown.

So a `#### ` line is the user's only after a blank line (or another input line) and, once a
session's first input shows the two spaces (the first input comes before any reply, so it is
surely the user's), only with them: the model's own `#### ` headings are part of its reply. Where
the history lost its trailing spaces (an editor trimmed them), a `#### ` line after a blank line
is the user's unless it is inside a code fence of the reply.

A turn is one user input (its consecutive `#### ` lines) and every line after it until the next
input or session: the reply and aider's `> ` lines, as written. An input that is a slash command
(`/add`, `/run`, `/drop`, … or `!cmd`) is not a turn: it is kept in the turn it belongs to, the one
before it (or, before the session's first prompt, the turn that prompt then fills), as
`[command] /add …`; `/run`, `/test`, `/lint`, `/git` and `!` as a tool call, the `> ` lines after
it its output. `/ask`, `/code`, `/architect` and `/help` with a question are prompts (aider logs the question again
as it hands it on: that echo is the same turn). A reasoning
model's `<thinking-content-…>` block (or `► **THINKING**` … `► **ANSWER**` as later versions
render it, or a `<think>` block outside a code fence) goes to the thought.

The file holds no session id and no time but the session's start: the session is
`aider-<start>-<10 hex digits>` (a hash of its header line and first input, so a history appended
to keeps its ids), its turns `<session>:00001`... in order, each at the session's start time; the
model is read from the banner (`> Model: …`, `> Main model: …`, v0.4x's `> Models: …`) and again
after a `/model` switch; the project is the history's folder (aider writes it at the repository
root). The banner's other lines are folded (read for the model, not kept as text), as is the header.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

from digest.readers.common import Lines, PendingTurn, Read, Reject, decode, excerpt, timestamp
from digest.readers.harness import Harness, Head

KIND = "aider"
AGENT = "aider"
HEADER = "# aider chat started at "
_USER = "#### "
_BREAK = "  "  # markdown's hard line break, which aider ends its own lines with
_MODEL = re.compile(r"^> (?:Main )?[Mm]odels?: (\S+)")
_FENCE = re.compile(r"^\s*(```|~~~)")
# A reasoning block: aider's own tag, or the `<think>` a model wrote in its reply.
_THINK_OPEN = re.compile(r"^<(thinking-content-[0-9a-f]+|think|thinking)>\s*$")
_THINKING, _ANSWER = "► **THINKING**", "► **ANSWER**"
_TOOL_COMMANDS = frozenset({"run", "test", "lint", "git"})
_PROMPT_COMMANDS = frozenset({"ask", "code", "architect", "help"})
# `confirm_ask` logs an answer it gave from a group's earlier choice through `user_input`.
_CONFIRM = re.compile(r"\(Y\)es/\(N\)o.*\]: ?\S*$")


def sniff(head: Head) -> bool:
    return head.data.lstrip().startswith(HEADER.encode())


class _Session:
    def __init__(self, header: tuple[str, int | None], model: str | None, project: str):
        self.header = header
        self.model = model
        self.project = project
        self.session_id: str | None = None
        self.count = 0
        self.turn: PendingTurn | None = None
        self.strict: bool | None = None  # whether inputs end in the line break (told by the first)
        self.fence = False  # inside a code fence of the reply
        self.thinking: str | None = None  # the closing line of the reasoning block being read
        self.output: list[str] | None = None  # the `> ` lines after a command that ran something

    def flush(self) -> None:
        """The command's output, as the tool call's output."""
        if self.output is not None:
            self.turn.output("\n".join(self.output).strip())
            self.output = None

    def start(self, line_no: int, raw: bytes, first_input: str) -> PendingTurn | None:
        """A new turn at this line; returns the one it ends."""
        self.flush()
        done = self.turn
        if self.session_id is None:
            self.session_id = _session_id(self.header, first_input)
        self.count += 1
        self.turn = PendingTurn(
            turn_id=f"{self.session_id}:{self.count:05d}",
            session_id=self.session_id,
            line_no=line_no,
            first_line=raw,
            ts_ms=self.header[1],
            agent=AGENT,
            model=self.model,
            project=self.project,
        )
        self.fence, self.thinking = False, None
        return done


def read(lines: Lines, source: str) -> Iterator[Read]:
    project = str(Path(source).parent)
    session: _Session | None = None
    in_input = False  # the previous line was one of an input's `#### ` lines
    command = False  # that input is a slash command
    echo = False  # that input repeats the prompt command before it
    blank_before = True
    for line_no, raw in lines:
        try:
            text = decode(raw).rstrip("\r\n")
        except Reject as reason:
            yield Read("reject", line_no, reason=str(reason), excerpt=excerpt(raw))
            continue
        line = text[:-2] if text.endswith(_BREAK) else text
        after_blank, blank_before = blank_before, not text.strip()
        if line.startswith(HEADER):
            if session is not None and session.turn is not None:
                session.flush()
                yield session.turn.finish(source)
            try:
                header = (line, timestamp(line[len(HEADER) :].strip(), ""))
            except Reject:
                header = (line, None)
            session, in_input = _Session(header, None, project), False
            yield Read("fold", line_no)
            continue
        if session is None:
            if line.strip():
                reason = f"not-in-a-session: a line before the first '{HEADER.strip()}' header"
                yield Read("reject", line_no, reason=reason, excerpt=excerpt(raw))
            else:
                yield Read("skip", line_no)
            continue
        if _is_input(session, text, in_input, after_blank):
            body = line[len(_USER) :] if line.startswith(_USER) else ""
            if in_input:  # the same input's next line
                if not echo:
                    _input_line(session, body, command, first=False)
                yield Read("fold", line_no)
                continue
            if session.strict is None:
                session.strict = text.endswith(_BREAK)
            in_input, command = True, _is_command(body)
            turn = session.turn
            echo = not command and turn is not None and _echoes(turn, body)
            if echo:
                yield Read("fold", line_no)
                continue
            if turn is not None and (command or not _has_prompt(turn)):
                session.flush()
                _input_line(session, body, command, first=True)  # kept in the turn it belongs to
                yield Read("fold", line_no)
                continue
            done = session.start(line_no, raw, line)
            if done is not None:
                yield done.finish(source)
            _input_line(session, body, command, first=True)
            continue  # counted when the turn is done
        in_input = False
        if session.turn is None:  # the banner, before the first input
            if match := _MODEL.match(line):
                session.model = match.group(1)
            yield Read("fold" if line.strip() else "skip", line_no)
            continue
        if match := _MODEL.match(line):  # a `/model` switch: the next turns' model
            session.model = match.group(1)
        _reply_line(session, line)
        yield Read("fold", line_no)
    if session is not None and session.turn is not None:
        session.flush()
        yield session.turn.finish(source)


def _is_input(session: _Session, text: str, in_input: bool, after_blank: bool) -> bool:
    if not (text.startswith(_USER) or text.rstrip() == _USER.strip()):
        return False
    if in_input:
        return not session.strict or text.endswith(_BREAK)
    if not after_blank:
        return False
    if session.strict:
        return text.endswith(_BREAK)
    return not session.fence


def _is_command(body: str) -> bool:
    """A slash command, `!cmd`, or a confirmation aider answered itself and logged as input."""
    if body.startswith("!") or _CONFIRM.search(body):
        return True
    if not body.startswith("/"):
        return False
    name, _, rest = body[1:].partition(" ")
    return not (name in _PROMPT_COMMANDS and rest.strip())


def _echoes(turn: PendingTurn, body: str) -> bool:
    """Whether this input repeats the turn's `/ask`, `/code` or `/architect` prompt, as aider logs
    the prompt again when the command hands it to its coder: the same ask, not a second turn."""
    if not turn.prompt or any(part.strip() for part in turn.response):
        return False
    name, _, rest = turn.prompt[0].partition(" ")
    return name[1:] in _PROMPT_COMMANDS and name.startswith("/") and rest.strip() == body.strip()


def _has_prompt(turn: PendingTurn) -> bool:
    return any(part.strip() for part in turn.prompt)


def _input_line(session: _Session, body: str, command: bool, first: bool) -> None:
    """One line of an input: the prompt's, or a command kept as text of the turn (a tool call for
    those that run something, the `> ` lines after it its output)."""
    turn = session.turn
    if not command:
        turn.prompt.append(body)
        return
    if not first:
        turn.response[-1] += "\n" + body  # a command's next line
        return
    name, _, args = body[1:].partition(" ")
    if body.startswith("!"):
        turn.tool("run", body[1:].strip())
    elif body.startswith("/") and name in _TOOL_COMMANDS:
        turn.tool(name, args.strip())
    else:
        turn.response.append(f"[command] {body}")
        return
    session.output = []


def _reply_line(session: _Session, line: str) -> None:
    """A reply or output line: to a command's output, to the thought inside a reasoning block, else
    to the response."""
    turn = session.turn
    if session.output is not None:
        if line.startswith("> ") or line.strip() in ("", ">"):
            session.output.append(line[2:])
            return
        session.flush()
    if session.thinking is not None:
        if line.strip() == session.thinking:
            session.thinking = None
        elif line.strip() == _ANSWER:
            session.thinking = None
            if turn.thought and set(turn.thought[-1].strip()) == {"-"}:
                turn.thought.pop()  # the rule aider draws before the answer
        else:
            turn.thought.append(line)
        return
    if not session.fence and (match := _THINK_OPEN.match(line)):
        session.thinking = f"</{match.group(1)}>"
        return
    if line.strip() == _THINKING:
        session.thinking = _ANSWER
        if turn.response and set(turn.response[-1].strip()) == {"-"}:
            turn.response.pop()  # the rule aider draws before the thinking
        return
    if _FENCE.match(line):
        session.fence = not session.fence
    turn.response.append(line)


def _session_id(header: tuple[str, int | None], first_input: str) -> str:
    """`aider-<start>-<hash>`: the start as digits, the hash over the header and the first input."""
    stamp = re.sub(r"\D", "", header[0][len(HEADER) :])[:14] or "undated"
    digest = hashlib.sha256(f"{header[0]}\n{first_input}".encode("utf-8", "replace")).hexdigest()[:10]
    return f"aider-{stamp}-{digest}"


# A history aider may edit is read again whole; its `/run`, `/test`, `/lint` and `/git` are its shell.
HARNESS = Harness(KIND, "aider", read, sniff, suffixes=(".md",), shell_tools=_TOOL_COMMANDS)
