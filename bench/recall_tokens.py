"""What an agent reads to find a past session: the MCP tools' answers, before (every field whole,
pretty-printed, as the SDK wrote a returned dict) and now (compact: a session by its card line, a
matched turn by a cited snippet, compact JSON), side by side over the same store and queries.

Run: PYTHONPATH=. .venv/bin/python bench/recall_tokens.py [--sessions 1000] [--seed 28]

The store and the labelled queries are `bench/search.py`'s (the realistic corpus with its planted
stories; each query with the sessions that answer it). Per tool and shape: the tokens of the whole
answer (characters / 4: all of it lands in the agent's context), the tokens until the first result
of an answering session (the answer's head, then each result in order), hit@1 and hit@5 by session,
and what a miss costs (its whole answer).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.answers import dumps, tokens  # noqa: E402
from app.mcp_server import Tools  # noqa: E402
from resources.store import DigestStore  # noqa: E402

TOOLS = ("query_summaries", "query_raw_memories")
# Questions in common words, that many sessions answer in part: each answer fills its ten results.
BROAD = ("fix the failing test", "error when running the server", "update the readme", "refactor the config loader")


def shaped(answer: dict, before: bool) -> str:
    return json.dumps(answer, indent=2, default=str) if before else dumps(answer)


def until_answer(answer: dict, answers: set[str], before: bool) -> tuple[int | None, int]:
    """(the rank of the first answering result, from 1, or None; the tokens read until it, or the
    whole answer's when none answers)."""
    results = answer["results"]
    head = {**answer, "results": []}
    for rank, result in enumerate(results, 1):
        if result["sessionId"] in answers:
            return rank, tokens(shaped({**head, "results": results[:rank]}, before))
    return None, tokens(shaped(answer, before))


def measure(store_path: Path, queries: list[dict]) -> dict:
    tools = Tools(store_path)
    out = {}
    for tool in TOOLS:
        for before in (True, False):
            rows = []
            for q in queries:
                answer = json.loads(getattr(tools, tool)(q["query"], 10, full=before))
                rank, until = until_answer(answer, set(q["answers"]), before)
                rows.append({"kind": q["kind"], "rank": rank, "until": until, "whole": tokens(shaped(answer, before))})
            out[(tool, "before" if before else "now")] = rows
    return out


def broad(store_path: Path) -> dict:
    """The whole answer's tokens for `BROAD` questions, before and now: what ten results cost."""
    tools = Tools(store_path)
    return {
        (tool, shape): statistics.median(
            tokens(shaped(json.loads(getattr(tools, tool)(q, 10, full=shape == "before")), shape == "before"))
            for q in BROAD
        )
        for tool in TOOLS
        for shape in ("before", "now")
    }


def summary(rows: list[dict]) -> dict:
    hits = [r for r in rows if r["rank"] is not None]
    misses = [r for r in rows if r["rank"] is None]
    untils = sorted(r["until"] for r in rows)
    return {
        "queries": len(rows),
        "hit@1": round(sum(r["rank"] == 1 for r in hits) / len(rows), 3),
        "hit@5": round(sum(r["rank"] <= 5 for r in hits) / len(rows), 3),
        "until p50": statistics.median(untils),
        "until p90": untils[int(0.9 * (len(untils) - 1))],
        "whole p50": statistics.median(r["whole"] for r in rows),
        "miss costs": round(statistics.mean(r["whole"] for r in misses)) if misses else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=28)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        db, facts = Path(work) / "search.duckdb", Path(work) / "answers.json"
        subprocess.run(
            [sys.executable, str(ROOT / "bench" / "search.py"), "--build", str(db), str(args.sessions), str(args.seed), str(facts)],
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        store = DigestStore(db)
        store.migrate()
        store.search.refresh()
        queries = json.loads(facts.read_text())["queries"]
        results = measure(db, queries)
        wide = broad(db)
    print(f"{len(queries)} labelled queries over {args.sessions} sessions; tokens = characters / 4")
    names = ["hit@1", "hit@5", "until p50", "until p90", "whole p50", "miss costs"]
    print(f"{'tool':<20} {'answer':<7} " + " ".join(f"{n:>10}" for n in names))
    for (tool, shape), rows in results.items():
        figures = summary(rows)
        print(f"{tool:<20} {shape:<7} " + " ".join(f"{figures[n]:>10}" for n in names))
    for tool in TOOLS:
        before, now = summary(results[(tool, "before")]), summary(results[(tool, "now")])
        print(f"{tool}: tokens until the answer, before / now: {before['until p50'] / max(1, now['until p50']):.1f}x")
    print(f"\nten results for {len(BROAD)} questions in common words (median tokens of the whole answer):")
    for tool in TOOLS:
        b, n = wide[(tool, "before")], wide[(tool, "now")]
        print(f"  {tool:<20} before {b:>7.0f}  now {n:>6.0f}  ({b / max(1, n):.1f}x)")


if __name__ == "__main__":
    main()
