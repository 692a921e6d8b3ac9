"""The alternatives of bench/search.py (its part 6.): the same documents in DuckDB's `fts` and in
bm25s, measured under `--alt-python` (a venv with duckdb==1.5.5, duckdb-extension-fts==1.5.5 and
bm25s) by `bench/search.py --alt`.

Not a benchmark itself (tests/test_bench_smoke.py runs every bench/*.py but the ones named `_*`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from _measure import quantile, relevance

SEARCH = Path(__file__).with_name("search.py")  # run again under the alternative venv, with --alt


def run_alternatives(store, queries: list[dict], work: Path, sessions: int, alt_python: str) -> dict:
    """Export every document's text (as our index reads it) to Parquet, then measure the others on it."""
    import pandas as pd

    from resources.store.search import BATCH_SESSIONS

    out = work / f"docs-{sessions}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    ids = [r[0] for r in store.query("SELECT session_id FROM sessions ORDER BY session_id").itertuples(index=False)]
    doc_id = 0
    with store.file.connect() as con:
        for start in range(0, len(ids), BATCH_SESSIONS * 10):
            rows = []
            for sid, docs in store.search._read_documents(ids[start : start + BATCH_SESSIONS * 10])[0].items():
                for _kind, _turn, text, _ts, _row in docs:
                    rows.append((doc_id, sid, text))
                    doc_id += 1
            frame = pd.DataFrame(rows, columns=["doc_id", "session_id", "text"])
            con.register("frame", frame)
            con.execute(f"COPY (SELECT * FROM frame) TO '{out}/part-{start:06d}.parquet' (FORMAT parquet)")
            con.unregister("frame")
    spec = work / f"alt-{sessions}.json"
    spec.write_text(json.dumps({"docs": str(out), "queries": queries, "work": str(work)}))
    done = subprocess.run([alt_python, str(SEARCH), "--alt", str(spec)], capture_output=True, text=True, timeout=7200)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def alternatives(spec_path: str) -> None:
    """(Under the alternative venv.) DuckDB fts and bm25s over the exported documents."""
    import duckdb
    import duckdb_extension_fts

    spec = json.loads(Path(spec_path).read_text())
    queries, work = spec["queries"], Path(spec["work"])
    result = {}
    # DuckDB fts: its extension loaded from the wheel's file, no network.
    path = work / "fts.duckdb"
    path.unlink(missing_ok=True)
    con = duckdb.connect(str(path), config={"autoinstall_known_extensions": False})
    ext = Path(duckdb_extension_fts.__file__).parent / "extensions" / f"v{duckdb.__version__}" / "fts.duckdb_extension"
    con.execute(f"LOAD '{ext}'")
    con.execute(f"CREATE TABLE docs AS SELECT * FROM read_parquet('{spec['docs']}/*.parquet')")
    con.execute("CHECKPOINT")
    before = path.stat().st_size
    started = time.monotonic()
    con.execute("PRAGMA create_fts_index('docs', 'doc_id', 'text', stemmer = 'none', overwrite = 1)")
    build_s = time.monotonic() - started
    con.execute("CHECKPOINT")
    size = path.stat().st_size - before
    sql = """SELECT session_id, max(score) AS s FROM (SELECT session_id, fts_main_docs.match_bm25(doc_id, ?) AS score
             FROM docs) WHERE score IS NOT NULL GROUP BY 1 ORDER BY s DESC LIMIT 10"""
    ranked, ms = timed(queries, lambda query: [r[0] for r in con.execute(sql, [query]).fetchall()])
    result["duckdb_fts"] = figures(build_s, size, ranked, ms, queries, "rebuild whole (overwrite=1)")
    con.close()
    # bm25s: its own tokenizer (English stop words), a sparse matrix in memory, saved to a folder.
    import bm25s

    docs = duckdb.sql(
        f"SELECT session_id, text FROM read_parquet('{spec['docs']}/*.parquet') ORDER BY doc_id"
    ).fetchall()
    sessions_of = [d[0] for d in docs]
    started = time.monotonic()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([d[1] for d in docs], stopwords="en", show_progress=False), show_progress=False)
    build_s = time.monotonic() - started
    del docs
    folder = work / "bm25s"
    shutil.rmtree(folder, ignore_errors=True)
    retriever.save(str(folder))
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())

    def bm25s_ranking(query: str) -> list[str]:
        found, scores = retriever.retrieve(
            bm25s.tokenize([query], stopwords="en", show_progress=False), k=50, show_progress=False
        )
        return list(dict.fromkeys(sessions_of[i] for i, s in zip(found[0], scores[0]) if s > 0))[:10]

    ranked, ms = timed(queries, bm25s_ranking)
    result["bm25s"] = figures(build_s, size, ranked, ms, queries, "rebuild whole (no add)")
    print(json.dumps(result))


def timed(queries: list[dict], rank) -> tuple[dict[str, list[str]], list[float]]:
    """Each query's ranked session ids from `rank`, every query asked twice; the wall ms of each ask."""
    ranked, ms = {}, []
    for _rep in range(2):
        for q in queries:
            started = time.perf_counter()
            ids = rank(q["query"])
            ms.append((time.perf_counter() - started) * 1000)
            ranked[q["query"]] = ids
    return ranked, ms


def figures(build_s: float, size: int, ranked: dict, ms: list[float], queries: list[dict], update: str) -> dict:
    """One alternative's figures, as the report prints them."""
    return {
        "build_s": build_s, "size_mb": size / 1e6, "p50_ms": quantile(ms, 0.5), "p95_ms": quantile(ms, 0.95),
        "relevance": relevance(ranked, queries), "update": update,
    }  # fmt: skip
