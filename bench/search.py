"""The search index (issue 34): relevance on a labelled query set, latency, build time, size, the
cost of one new session and memory, over the realistic corpus; DuckDB's `fts` and bm25s beside it.

Run: PYTHONPATH=. .venv/bin/python bench/search.py [--sessions 1000 10000] [--seed 28]
                                                   [--alt-python /tmp/fts-venv/bin/python]

1. the corpus: `tests/realistic_corpus.py`'s sessions (plain turns), every third with an adopted
   summary made of its first prompt, every fourth with a mini summary per turn, and `STORIES` planted
   into a few of them: a turn (a bug, a decision, an error, files), most with a summary, and the
   file facts the facts extraction would record. The corpus's bytes are its turns' documents';
2. the index: `store.search.refresh()` from nothing (seconds, the peak RSS of this process, which
   only indexes: the corpus is written by a child), the store file's growth after a checkpoint
   (the index keeps no text: snippets are cut from the turns), postings and documents;
3. one new session (the corpus's median size) indexed by a refresh, and a refresh with nothing changed
   (a sensor tick's cost);
4. relevance, keyword alone: hit@1, hit@5, MRR@10 by kind over `STORIES`' queries and file queries
   drawn from the corpus's own paths (their answers: every session whose text holds the path); and
   the ranking rules (a junk summary never ranks its session, a degraded one is a navigation index);
5. latency of `store.search.sessions` (p50/p95), on a held connection and as a CLI call opens one;
6. with `--alt-python` (a venv with duckdb==1.5.5, duckdb-extension-fts==1.5.5 and bm25s): the same
   documents in DuckDB's `fts` (loaded from its wheel's file, offline) and in bm25s: build time (both
   rebuild whole: neither updates incrementally), size, latency and hit@5 by kind on the same queries.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _measure import quantile, relevance
from _search_alternatives import alternatives, run_alternatives
from _search_corpus import DEGRADED_QUERY, JUNK_QUERY, build_corpus, new_session_rows

ROOT = Path(__file__).resolve().parents[1]


# --- measuring ----------------------------------------------------------------------------------


def cover_every_session(store, model: str) -> None:
    """Let a search fuse over the vectors a bench wrote itself (its own layer of documents, not the
    product's pass): their snapshot published, and the coverage file saying `model` covers every session."""
    from resources.embedding_pass import publish_snapshot
    from resources.store.vector_coverage import write_coverage

    every = [s for (s,) in store.query("SELECT session_id FROM sessions").itertuples(index=False)]
    write_coverage(store.path, model, {"accounts": every, "turns": every}, publish_snapshot(store.search_vectors))


def run_size(sessions: int, seed: int, work: Path, alt_python: str | None) -> dict:
    from resources.store import DigestStore

    db, answers = work / f"search-{sessions}.duckdb", work / f"answers-{sessions}.json"
    for path in (db, Path(f"{db}.wal")):
        path.unlink(missing_ok=True)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, __file__, "--build", str(db), str(sessions), str(seed), str(answers)],
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    built_s = time.monotonic() - started
    facts = json.loads(answers.read_text())
    store = DigestStore(db)
    store.migrate()
    before = db.stat().st_size
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    store.search.refresh()
    index_s = time.monotonic() - started
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with store.file.connect() as con:
        con.execute("CHECKPOINT")
    grown = db.stat().st_size - before
    status = store.search.status()
    postings = status["documents"]  # the index's documents, as its record sums them

    # One new session, then a refresh with nothing changed (a sensor tick's).
    store.ingest.write_turns(new_session_rows(seed))
    started = time.monotonic()
    one = store.search.refresh()
    one_s = time.monotonic() - started
    started = time.monotonic()
    store.search.refresh()
    idle_s = time.monotonic() - started

    result = {
        "sessions": sessions,
        "turns": facts["turns"],
        "corpus_mb": facts["corpus_bytes"] / 1e6,
        "corpus_build_s": built_s,
        "index_s": index_s,
        "index_mb_s": facts["corpus_bytes"] / 1e6 / index_s,
        "documents": status["documents"],
        "postings": postings,
        # The index tables' blocks: a compaction's freed blocks stay in the file for reuse, so its growth says more.
        "index_mb": status["size_bytes"] / 1e6,
        "index_share": status["size_bytes"] / facts["corpus_bytes"],
        "file_growth_mb": grown / 1e6,
        "peak_rss_mb": rss_peak / 1024,
        "rss_before_mb": rss_before / 1024,
        "one_session_s": one_s,
        "one_session_docs": one.documents,
        "idle_refresh_s": idle_s,
        **measure_queries(store, facts),
    }
    if alt_python:
        result["alt"] = run_alternatives(store, facts["queries"], work, sessions, alt_python)
    return result


def measure_queries(store, facts: dict) -> dict:
    """Relevance, the ranking rules, and latency: wall time on a held connection and as a CLI call
    opens one, and the process's CPU time per query (DuckDB's threads included), which the machine's
    load does not inflate."""
    queries = facts["queries"]
    ranked, held_ms, cpu_ms, cold_ms = {}, [], [], []
    with store.file.held():
        for q in queries:  # warm
            ranked[q["query"]] = [h.session_id for h in store.search.sessions(q["query"], limit=10)]
        for _ in range(3):
            for q in queries:
                started, cpu = time.perf_counter(), time.process_time()
                store.search.sessions(q["query"], limit=10)
                held_ms.append((time.perf_counter() - started) * 1000)
                cpu_ms.append((time.process_time() - cpu) * 1000)
    for q in queries[:15]:
        started = time.perf_counter()
        store.search.sessions(q["query"], limit=10)
        cold_ms.append((time.perf_counter() - started) * 1000)
    junk_hits = [h.session_id for h in store.search.sessions(JUNK_QUERY)]
    degraded = [h for h in store.search.sessions(DEGRADED_QUERY) if h.session_id in facts["degraded"]]
    return {
        "load_avg": os.getloadavg()[0],
        "p50_ms": quantile(held_ms, 0.5),
        "p95_ms": quantile(held_ms, 0.95),
        "cpu_p50_ms": quantile(cpu_ms, 0.5),
        "cpu_p95_ms": quantile(cpu_ms, 0.95),
        "cold_p50_ms": quantile(cold_ms, 0.5),
        "cold_p95_ms": quantile(cold_ms, 0.95),
        "relevance": relevance(ranked, queries),
        "junk_ranked": any(s in facts["junk"] for s in junk_hits),
        "degraded_labelled": bool(degraded) and all(h.navigation_index for h in degraded),
        "examples": _examples(store, queries),
    }


def rerun_queries(sessions: int, work: Path) -> dict:
    """`--reuse`: the queries again over a store a previous run left in `--work` (its index as it is)."""
    from resources.store import DigestStore

    store = DigestStore(work / f"search-{sessions}.duckdb")
    store.migrate()
    store.search.refresh()
    facts = json.loads((work / f"answers-{sessions}.json").read_text())
    return {"sessions": sessions, **measure_queries(store, facts)}


def _examples(store, queries: list[dict]) -> list[str]:
    """The top hit of a few queries, to read with one's own eyes."""
    lines = []
    for q in queries[:: max(1, len(queries) // 5)][:5]:
        hits = store.search.sessions(q["query"], limit=1)
        if hits:
            m = hits[0].matches[0]
            ok = "answer" if hits[0].session_id in q["answers"] else "NOT an answer"
            lines.append(f'[{q["kind"]}] "{q["query"]}" -> {hits[0].session_id} ({ok}) {m.kind}: {m.snippet[:160]}')
    return lines


# --- the report -----------------------------------------------------------------------------------


def report(results: list[dict]) -> None:
    print("\n## Search index (keyword, BM25 over the store's own postings)\n")
    print("| sessions | turns | corpus MB | build s | MB/s | docs | postings | index MB | index/corpus | file growth MB | peak RSS MB | "
          "one new session s | idle refresh s | p50 ms | p95 ms | cold p50 ms | cold p95 ms |")  # fmt: skip
    print("|" + "---|" * 17)
    for r in results:
        if "index_s" not in r:
            continue
        print(
            f"| {r['sessions']:,} | {r['turns']:,} | {r['corpus_mb']:,.0f} | {r['index_s']:.1f} | {r['index_mb_s']:.1f} "
            f"| {r['documents']:,} | {r['postings']:,} | {r['index_mb']:.0f} | {r['index_share']:.1%} | {r['file_growth_mb']:.0f} "
            f"| {r['peak_rss_mb']:.0f} | {r['one_session_s']:.2f} | {r['idle_refresh_s']:.3f} | {r['p50_ms']:.1f} "
            f"| {r['p95_ms']:.1f} | {r['cold_p50_ms']:.1f} | {r['cold_p95_ms']:.1f} |"
        )
    for r in results:
        print(
            f"\nlatency at {r['sessions']:,} sessions (load average {r['load_avg']:.1f} on 2 cores): wall p50 "
            f"{r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms; CPU p50 {r['cpu_p50_ms']:.1f} ms, p95 {r['cpu_p95_ms']:.1f} ms; "
            f"opening the store each time p50 {r['cold_p50_ms']:.1f} ms, p95 {r['cold_p95_ms']:.1f} ms"
        )
        print(f"relevance at {r['sessions']:,} sessions, keyword alone (hit@1 / hit@5 / MRR@10):")
        for kind, m in sorted(r["relevance"].items()):
            print(f"  {kind:<10} n={m['n']:>2}  {m['hit@1']:.2f} / {m['hit@5']:.2f} / {m['mrr@10']:.2f}")
        print(f"  a junk summary ranks its session: {r['junk_ranked']}; degraded labelled: {r['degraded_labelled']}")
        for line in r["examples"]:
            print(f"  e.g. {line}")
        if "alt" in r:
            alt = r["alt"]
            if "error" in alt:
                print(f"  alternatives failed: {alt['error']}")
                continue
            print(f"\nalternatives at {r['sessions']:,} sessions, same documents (ours: build {r['index_s']:.1f} s, "
                  f"one new session {r['one_session_s']:.2f} s, {r['index_mb']:.0f} MB, p95 {r['p95_ms']:.1f} ms):")  # fmt: skip
            for name, a in alt.items():
                hits = ", ".join(f"{k} {m['hit@5']:.2f}" for k, m in sorted(a["relevance"].items()))
                print(
                    f"  {name:<11} build {a['build_s']:.1f} s ({a['build_s'] / r['index_s']:.2f}x ours), "
                    f"one new session = {a['update']} ({a['build_s'] / max(r['one_session_s'], 1e-6):,.0f}x ours), "
                    f"{a['size_mb']:.0f} MB ({a['size_mb'] / max(r['index_mb'], 1e-6):.2f}x ours), "
                    f"p50 {a['p50_ms']:.1f} ms, p95 {a['p95_ms']:.1f} ms ({a['p95_ms'] / r['p95_ms']:.2f}x ours); hit@5: {hits}"
                )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--build":
        build_corpus(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--alt":
        alternatives(sys.argv[2])
        return
    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--alt-python", help="a python with duckdb==1.5.5, duckdb-extension-fts==1.5.5, bm25s")
    parser.add_argument("--work", type=Path, help="where the stores go (default: a temporary folder)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument("--reuse", action="store_true", help="only the queries, over the stores left in --work")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="search-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.reuse:
            results = [rerun_queries(n, work) for n in args.sessions]
        else:
            results = [run_size(n, args.seed, work, args.alt_python) for n in args.sessions]
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    report(results)
    if args.json:
        print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
