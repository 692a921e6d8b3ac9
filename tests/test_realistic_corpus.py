"""The realistic corpus generator (tests/realistic_corpus.py) draws the sizes measured on real
transcripts, with a fifth of its bytes in repeated lines, the same bytes from the same seed."""

from __future__ import annotations

import json

from digest.repeats import repeated_bytes
from tests.realistic_corpus import TARGETS, draw_plan, session_turns, size_figures, write_corpus


def test_the_sizes_follow_the_measured_distribution():
    figures = size_figures([draw_plan(7, i) for i in range(3000)])
    assert 7 <= figures["turns_median"] <= 10
    assert 20 <= figures["turns_q3"] <= 34
    assert abs(figures["single_turn_share"] - TARGETS["single_turn_share"]) < 0.03
    assert 0.03 <= figures["hundred_plus_share"] <= 0.08
    assert figures["turns_max"] <= TARGETS["turns_max"]
    assert abs(figures["bytes_median"] / TARGETS["bytes_median"] - 1) < 0.2
    assert abs(figures["bytes_q3"] / TARGETS["bytes_q3"] - 1) < 0.25
    assert TARGETS["bytes_max"] * 0.9 <= figures["bytes_max"] <= TARGETS["bytes_max"]
    assert figures["turn_bytes_max"] <= TARGETS["turn_bytes_max"]


def test_a_fifth_of_the_bytes_are_repeated_lines():
    repeated = total = 0
    small = [i for i in range(200) if sum(draw_plan(7, i).turn_bytes) < 100_000][:30]  # a quick test
    for i in small:
        rows = session_turns(draw_plan(7, i), 7, i)
        r, t = repeated_bytes(f"{row['prompt']}\n{row['response']}" for row in rows)
        repeated, total = repeated + r, total + t
    assert 0.12 <= repeated / total <= 0.28


def test_the_turns_have_their_planned_size_and_the_plain_format():
    plan = draw_plan(7, 3)
    rows = session_turns(plan, 7, 3)
    sizes = [len((r["prompt"] + r["response"]).encode()) for r in rows]
    # Each turn at most its planned size (one too small for a whole step keeps its prompt alone).
    assert all(size <= planned for size, planned in zip(sizes, plan.turn_bytes, strict=True))
    assert sum(sizes) >= 0.97 * sum(plan.turn_bytes)
    assert {"id", "session_id", "timestamp", "prompt", "response"} <= set(rows[0])


def test_the_same_seed_writes_the_same_bytes(tmp_path):
    write_corpus(tmp_path / "a", sessions=5, seed=3)
    write_corpus(tmp_path / "b", sessions=5, seed=3)
    write_corpus(tmp_path / "c", sessions=5, seed=4)
    a, b, c = (tmp_path / d / f"corpus-{s}.jsonl" for d, s in (("a", 3), ("b", 3), ("c", 4)))
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert len({json.loads(line)["session_id"] for line in a.read_text().splitlines()}) == 5
