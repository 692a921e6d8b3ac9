"""Lines a session repeats: a file read again, a test log or an output printed again.

Real transcripts hold many long lines already seen earlier in the same session (BENCHMARKS.md
§13 counts them); a model reading the session pays for them twice. One
rule here, for the benchmark's measure and for the prompts that leave them out: a line is repeated
when, without its surrounding blanks, it has at least `MIN_REPEAT_CHARS` characters and the same
text appeared as a line earlier in the session (in an earlier turn, or earlier in the same one).
Shorter lines (braces, `else:`, blank lines) always stay: they are cheap and carry the layout. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MIN_REPEAT_CHARS = 40
SHOWN_EARLIER = "shown earlier in the session"  # the marker's words


def _repeated(line: str, seen: set[str]) -> bool:
    """Is the line repeated? Remembers it when it is long and new."""
    key = line.strip()
    if len(key) < MIN_REPEAT_CHARS:
        return False
    if key in seen:
        return True
    seen.add(key)
    return False


def repeated_bytes(texts: Iterable[str]) -> tuple[int, int]:
    """(UTF-8 bytes of the repeated lines, all bytes) over a session's texts in order; each line's
    newline counts with it."""
    seen: set[str] = set()
    repeated = total = 0
    for text in texts:
        for line in text.split("\n"):
            size = len(line.encode("utf-8")) + 1
            total += size
            repeated += size if _repeated(line, seen) else 0
    return repeated, total


def marker(lines: int) -> str:
    """What stands for a run of repeated lines left out of a prompt."""
    return f"[{lines} line{'s' if lines > 1 else ''} {SHOWN_EARLIER}]"


# A marker, or what is left of one when a model copies it without its brackets: the verdict looks
# for it in a summary (a summary that reproduces it copied the prompt, not the session).
MARKER_PATTERN = re.compile(rf"\[?\d+ lines? {re.escape(SHOWN_EARLIER)}\]?", re.IGNORECASE)


def drop_repeated_lines(text: str, seen: set[str]) -> str:
    """`text` with each run of repeated lines replaced by one `marker` line; `seen` holds the long
    lines of the session's texts before this one and takes this one's."""
    out: list[str] = []
    run = 0
    for line in text.split("\n"):
        if _repeated(line, seen):
            run += 1
            continue
        if run:
            out.append(marker(run))
            run = 0
        out.append(line)
    if run:
        out.append(marker(run))
    return "\n".join(out)
