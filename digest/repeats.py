"""Lines a session repeats: a file read again, a test log or an output printed again.

In 290 real transcripts (issue 28) about 20% of a session's bytes are lines of 40+ characters
already seen earlier in the same session. A model reading the session pays for them twice; this
module measures them (the benchmark's figure) by one rule: a line counts as repeated when, without
its surrounding blanks, it has at least `MIN_REPEAT_CHARS` characters and the same text appeared as
a line earlier in the session, in an earlier turn or earlier in the same one. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

MIN_REPEAT_CHARS = 40


def repeated_bytes(texts: Iterable[str]) -> tuple[int, int]:
    """(UTF-8 bytes of the repeated lines, all bytes) over a session's texts in order; each line's
    newline counts with it."""
    seen: set[str] = set()
    repeated = total = 0
    for text in texts:
        for line in text.split("\n"):
            size = len(line.encode("utf-8")) + 1
            total += size
            key = line.strip()
            if len(key) < MIN_REPEAT_CHARS:
                continue
            if key in seen:
                repeated += size
            else:
                seen.add(key)
    return repeated, total
