"""digest.repeats: which lines a session repeats, counted and left out of prompts by one rule."""

from __future__ import annotations

from digest.repeats import MARKER_PATTERN, MIN_REPEAT_CHARS, drop_repeated_lines, marker, repeated_bytes

LONG = "x" * MIN_REPEAT_CHARS
OTHER = "y" * MIN_REPEAT_CHARS
SHORT = "z" * (MIN_REPEAT_CHARS - 1)


def test_repeated_lines_are_long_lines_seen_before_in_the_session():
    # Seen in an earlier text, and within the same text; short lines never count; blanks around do not matter.
    assert repeated_bytes([f"{LONG}\n{SHORT}", f"  {LONG}\n{SHORT}\n{LONG}"]) == (
        (len(LONG) + 3) + (len(LONG) + 1),
        (len(LONG) + 1) + (len(SHORT) + 1) + (len(LONG) + 3) + (len(SHORT) + 1) + (len(LONG) + 1),
    )
    assert repeated_bytes([]) == (0, 0)


def test_a_run_of_repeated_lines_becomes_one_marker_and_short_lines_stay():
    seen: set[str] = set()
    assert drop_repeated_lines(f"{LONG}\n{OTHER}\n{SHORT}", seen) == f"{LONG}\n{OTHER}\n{SHORT}"
    again = drop_repeated_lines(f"head\n{LONG}\n {OTHER}\n{SHORT}\n{SHORT}\n{LONG}", seen)
    assert again == f"head\n{marker(2)}\n{SHORT}\n{SHORT}\n{marker(1)}"
    assert marker(1) == "[1 line shown earlier in the session]"
    # The pattern the verdict looks for matches every marker, and one a model copied without its brackets.
    assert all(MARKER_PATTERN.fullmatch(marker(n)) for n in (1, 2, 30))
    assert MARKER_PATTERN.fullmatch(marker(2)[1:-1])
    assert not MARKER_PATTERN.search("the log shown earlier in the session")


def test_what_is_dropped_is_what_is_counted():
    texts = [f"{LONG}\nfirst", f"{LONG}\n{OTHER}\n{OTHER}", "last"]
    repeated, total = repeated_bytes(texts)
    seen: set[str] = set()
    kept = [drop_repeated_lines(t, seen) for t in texts]
    assert kept[1] == f"{marker(1)}\n{OTHER}\n{marker(1)}"
    assert sum(len(t.encode()) + 1 for t in kept) == total - repeated + 2 * (len(marker(1)) + 1)
