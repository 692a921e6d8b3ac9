"""The helpers every compact answer is made with (`app/answers.py`)."""

from __future__ import annotations

from app.answers import cut


def test_a_text_is_cut_with_a_marker_saying_how_much_was_left_out():
    assert cut("abcdef", 10) == "abcdef"
    assert cut("abcdefghij" * 3, 10) == "abcdefghij …[cut: 20 more characters]"
    # A search index keeps a turn's head and its whole length: the marker counts from the whole.
    assert cut("abcdefghij", 4, whole=1_000) == "abcd …[cut: 996 more characters]"


def test_a_missing_text_stays_missing():
    # A turn with no thought (most have none), from the store or from the index.
    assert cut(None, 10) is None and cut(None, 10, whole=None) is None and cut(None, 10, whole=0) is None
