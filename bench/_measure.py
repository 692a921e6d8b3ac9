"""Measurement helpers the search benchmarks share (bench/search.py, bench/recall.py and the ones that
import them): a quantile of timings, and hit@1 / hit@5 / MRR@10 of ranked session ids by group.

Not a benchmark itself (tests/test_bench_smoke.py runs every bench/*.py but the ones named `_*`).
"""

from __future__ import annotations


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def scores(ranked: dict[str, list[str]], questions: list[dict], key) -> dict[str, dict]:
    """hit@1, hit@5 and MRR@10 by `key(question)` (and over all), from each question's ranked session ids."""
    groups: dict[str, list[tuple]] = {}
    for q in questions:
        answers = set(q["answers"])
        rank = next((n for n, s in enumerate(ranked[q["query"]][:10], 1) if s in answers), None)
        row = (rank == 1, rank is not None and rank <= 5, 1 / rank if rank else 0.0)
        for group in (key(q), "all"):
            groups.setdefault(group, []).append(row)
    return {
        g: {
            "n": len(rows),
            **{m: sum(r[i] for r in rows) / len(rows) for i, m in enumerate(("hit@1", "hit@5", "mrr@10"))},
        }
        for g, rows in groups.items()
    }


def relevance(ranked: dict[str, list[str]], queries: list[dict]) -> dict[str, dict[str, float]]:
    """hit@1, hit@5 and MRR@10 by kind (and over all), from each query's ranked session ids."""
    return scores(ranked, queries, lambda q: q["kind"])
