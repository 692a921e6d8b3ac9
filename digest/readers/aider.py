"""aider chat histories (`.aider.chat.history.md`), as aider's `InputOutput` appends them:
`# aider chat started at <time>` opens a session, `#### ` lines are what the user typed (a
multi-line input is several `#### ` lines), `> ` lines are aider's own output (tool output, command
results, confirmations), and the other lines are the model's reply.

A turn is one user input (its consecutive `#### ` lines) and every line after it until the next
input or session: the reply and aider's `> ` lines, as written (a `> ` inside a fenced code block
is the reply's). The file holds no session id and no time but the session's start: the session is
`aider-<start>-<10 hex digits>` (a hash of its header line and first input, so a history appended
to keeps its ids), its turns `<session>:00001`... in order, each at the session's start time; the
model is read from the banner (`> Model: …` / `> Main model: …`) before the first input. The
banner's other lines are folded (read for the model, not kept as text), as is the header.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

from digest.readers.common import Lines, PendingTurn, Read, Reject, decode, excerpt, timestamp

KIND = "aider"
AGENT = "aider"
HEADER = "# aider chat started at "
_USER = "#### "
_MODEL = re.compile(r"^> (?:Main )?[Mm]odel: (\S+)")
_FENCE = "```"


def sniff(head: bytes) -> bool:
    return head.lstrip().startswith(HEADER.encode())


def read(lines: Lines, source: str) -> Iterator[Read]:
    header: tuple[str, int | None] | None = None  # the header line and its time
    model: str | None = None
    session_id: str | None = None
    count = 0
    turn: PendingTurn | None = None
    fenced = False
    in_input = False  # the previous line was one of the turn's `#### ` lines
    for line_no, raw in lines:
        try:
            text = decode(raw).rstrip("\r\n")
        except Reject as reason:
            yield Read("reject", line_no, reason=str(reason), excerpt=excerpt(raw))
            continue
        line = text[:-2] if text.endswith("  ") else text  # markdown's hard line break
        if line.startswith(HEADER):
            if turn is not None:
                yield turn.finish(source)
            turn, session_id, model, count, fenced, in_input = None, None, None, 0, False, False
            try:
                header = (line, timestamp(line[len(HEADER) :].strip(), ""))
            except Reject:
                header = (line, None)
            yield Read("fold", line_no)
            continue
        if header is None:
            if line.strip():
                reason = f"not-in-a-session: a line before the first '{HEADER.strip()}' header"
                yield Read("reject", line_no, reason=reason, excerpt=excerpt(raw))
            else:
                yield Read("skip", line_no)
            continue
        user = line.startswith(_USER) or line == _USER.strip()
        if user and not fenced and not in_input:
            if turn is not None:
                yield turn.finish(source)
            if session_id is None:
                session_id = _session_id(header, line)
            count += 1
            turn = PendingTurn(
                turn_id=f"{session_id}:{count:05d}",
                session_id=session_id,
                line_no=line_no,
                first_line=raw,
                ts_ms=header[1],
                agent=AGENT,
                model=model,
            )
            turn.prompt.append(line[len(_USER) :])
            in_input = True
            continue
        if user and in_input:
            turn.prompt.append(line[len(_USER) :])
            yield Read("fold", line_no)
            continue
        in_input = False
        if turn is None:  # the banner, before the first input
            if match := _MODEL.match(line):
                model = match.group(1)
            yield Read("fold" if line.strip() else "skip", line_no)
            continue
        if line.lstrip().startswith(_FENCE):
            fenced = not fenced
        turn.response.append(line)
        yield Read("fold", line_no)
    if turn is not None:
        yield turn.finish(source)


def _session_id(header: tuple[str, int | None], first_input: str) -> str:
    """`aider-<start>-<hash>`: the start as digits, the hash over the header and the first input."""
    stamp = re.sub(r"\D", "", header[0][len(HEADER) :])[:14] or "undated"
    digest = hashlib.sha256(f"{header[0]}\n{first_input}".encode("utf-8", "replace")).hexdigest()[:10]
    return f"aider-{stamp}-{digest}"
