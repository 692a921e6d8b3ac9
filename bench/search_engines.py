"""The search index's engine: today's postings tables in the store against a Tantivy index of the same
documents and the same code-aware terms, side by side in one run, at each size.

Run: PYTHONPATH=. .venv/bin/python bench/search_engines.py [--sessions 1000 10000] [--seed 28] [--work DIR]
     (needs `tantivy`, the test extra's; `--work DIR` keeps the corpora and reuses them next time)

The corpus and the labelled queries are `bench/search.py`'s (its `--build` writes the store). Tantivy
is fed the terms `digest.search_text` makes (each document's terms, repeats kept, space-joined under
Tantivy's whitespace tokenizer; a query's by `query_terms`), so both engines rank the same terms with
the same BM25 (k1 1.2, b 0.75), the same pruning of common terms (a term in more than 5% of the
documents only adds to a document holding a rarer one) and the same session score: its best
document plus 0.1 of its next two (Tantivy's top `TOP_DOCS` documents grouped by session). The
Tantivy index also stores each document's text, so a hit's snippets come from it without the store.

For each engine: build from nothing; one new session (a median one) indexed and visible to readers;
warm queries (a held connection / a held searcher, as a long-lived MCP server): wall p50/p95 and CPU;
a cold query (a new process: imports, open, one answer); size on disk against the corpus; hit@1,
hit@5, MRR@10 by kind and how often both put the same session first; and reads during a writer: a
child process writes new sessions in a loop (the store: an ingest and a refresh, each in the
store's write transaction; Tantivy: an IndexWriter adding and committing) while this process runs
queries as the MCP server does (the store: a read-only open per call waiting out the lock up to the
server's 30 s; Tantivy: its held searcher, reloaded on each commit).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import chain, repeat
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.search import new_session_rows, quantile, relevance  # noqa: E402

TOP_DOCS = 200  # Tantivy's top documents grouped into sessions
COMMON_SHARE = 0.05  # as resources/store/search.py
NEXT_SHARE = 0.1
MATCHES = 3  # the documents a session hit shows (their snippets)
BATCH = 200  # sessions read from the store per batch while Tantivy builds
WRITER_PREFIX = "bench-writer-"
MCP_LOCK_WAIT_S = 30.0  # pipelines/mcp_server.py's LOCK_WAIT_S


# --- Tantivy: the schema, its documents, its queries ----------------------------------------------


def tantivy_schema():
    import tantivy

    builder = tantivy.SchemaBuilder()
    # The terms, already made by digest.search_text: frequencies, no positions (no phrase queries).
    builder.add_text_field("terms", tokenizer_name="whitespace", index_option="freq")
    # The session: a term to delete a session's documents by, and its id stored for the answer.
    builder.add_text_field("session", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_unsigned_field("session_key", fast=True)  # grouping the top documents by session
    builder.add_text_field("kind", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("turn", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_bytes_field("text", stored=True)  # the snippet's source, not indexed
    return builder.build()


def session_key(session_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(session_id.encode(), digest_size=8).digest(), "little")


def tantivy_documents(documents: dict[str, list[tuple[str, str | None, str]]]):
    """Tantivy documents of `Search._read_documents`' (kind, turn id, text) rows, each with the
    terms the postings tables would count for it."""
    import tantivy

    from digest.search_text import term_counts

    for session_id, rows in documents.items():
        key = session_key(session_id)
        for kind, turn_id, text in rows:
            doc = tantivy.Document()
            counts = term_counts(text)
            doc.add_text("terms", " ".join(chain.from_iterable(repeat(t, n) for t, n in counts.items())))
            doc.add_text("session", session_id)
            doc.add_unsigned("session_key", key)
            doc.add_text("kind", kind)
            doc.add_text("turn", turn_id or "")
            doc.add_bytes("text", text.encode())
            yield doc


def index_sessions(writer, store, session_ids: list[str], replace: bool) -> int:
    """Add the sessions' documents to the writer (replacing theirs when `replace`); not committed."""
    documents = store.search._read_documents(session_ids)
    if replace:
        for session_id in session_ids:
            writer.delete_documents_by_term("session", session_id)
    n = 0
    for doc in tantivy_documents(documents):
        writer.add_document(doc)
        n += 1
    return n


class TantivyReader:
    """A held index and searcher, as a long-lived MCP server would keep them (reloaded on each commit)."""

    def __init__(self, path: Path):
        import tantivy

        self.tantivy = tantivy
        self.index = tantivy.Index.open(str(path))
        self.schema = self.index.schema

    def sessions(self, query: str, limit: int = 10, snippets: bool = False) -> list[tuple[str, float, list]]:
        """(session id, score, matches) of the best sessions; a match is (kind, turn id, snippet) with
        `snippets`, else (kind, turn id)."""
        from digest.search_text import query_terms, snippet

        tv, searcher = self.tantivy, self.index.searcher()
        terms = query_terms(query)
        df = {t: searcher.doc_freq("terms", t) for t in terms}
        present = [t for t in terms if df[t]]
        if not present:
            return []
        rare = [t for t in present if df[t] <= COMMON_SHARE * searcher.num_docs] or present
        common = [t for t in present if t not in rare]

        def term(t: str):
            return tv.Query.term_query(self.schema, "terms", t, index_option="freq")

        query_ = tv.Query.boolean_query([(tv.Occur.Should, term(t)) for t in rare])
        if common:  # MaxScore's pruning, as the postings tables' `_scored`
            query_ = tv.Query.boolean_query([(tv.Occur.Must, query_)] + [(tv.Occur.Should, term(t)) for t in common])
        hits = searcher.search(query_, TOP_DOCS, count=False).hits
        if not hits:
            return []
        keys = searcher.fast_field_values("session_key", [address for _, address in hits])
        grouped: dict[int, list] = {}
        for (score, address), key in zip(hits, keys):
            grouped.setdefault(key, []).append((score, address))
        totals = sorted(
            ((docs[0][0] + NEXT_SHARE * sum(s for s, _ in docs[1:3]), docs) for docs in grouped.values()),
            key=lambda x: -x[0],
        )[:limit]
        out = []
        for total, docs in totals:
            matches, session_id = [], None
            for _score, address in docs[:MATCHES] if snippets else docs[:1]:
                doc = searcher.doc(address)
                session_id = session_id or doc.get_first("session")
                if snippets:
                    text = bytes(doc.get_first("text")).decode()
                    matches.append((doc.get_first("kind"), doc.get_first("turn") or None, snippet(text, terms)))
                else:
                    matches.append((doc.get_first("kind"), doc.get_first("turn") or None))
            out.append((session_id, total, matches))
        return out


# --- the measures ------------------------------------------------------------------------------------


def dir_bytes(path: Path, store_files: bool | None = None) -> int:
    """A folder's bytes; only the stored texts (`*.store`) with True, all but them with False."""
    files = [f for f in path.rglob("*") if f.is_file()]
    if store_files is not None:
        files = [f for f in files if (f.suffix == ".store") == store_files]
    return sum(f.stat().st_size for f in files)


def reset_store(store, new_session: str) -> None:
    """The store as the corpus builder left it: no index, no session a previous run added."""
    with store.file.transaction() as con:
        for table in ("search_documents", "search_postings", "search_postings_new", "search_index_state"):
            con.execute(f"DELETE FROM {table}")
        tables = con.execute(
            "SELECT DISTINCT table_name FROM information_schema.columns WHERE column_name = 'session_id' "
            "AND table_schema = 'main' AND table_name IN (SELECT table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE')"
        ).fetchall()
        for (table,) in tables:
            con.execute(
                f"DELETE FROM {table} WHERE session_id LIKE ? OR session_id = ?", [f"{WRITER_PREFIX}%", new_session]
            )


def warm(run, queries: list[dict], reps: int) -> dict:
    """Each query once to warm, then `reps` times: wall and CPU p50/p95 (ms)."""
    for q in queries:
        run(q["query"])
    wall, cpu = [], []
    for _ in range(reps):
        for q in queries:
            started, cpu_started = time.perf_counter(), time.process_time()
            run(q["query"])
            wall.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - cpu_started) * 1000)
    return {
        "p50_ms": quantile(wall, 0.5), "p95_ms": quantile(wall, 0.95),
        "cpu_p50_ms": quantile(cpu, 0.5), "cpu_p95_ms": quantile(cpu, 0.95),
    }  # fmt: skip


def cold(engine: str, path: Path, queries: list[dict], n: int) -> dict:
    """A new process per query: Python's start, the imports, the open and one answer (wall, ms)."""
    wall, inner = [], []
    for q in queries[:n]:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, __file__, "--cold", engine, str(path), q["query"]],
            capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        wall.append((time.perf_counter() - started) * 1000)
        inner.append(json.loads(done.stdout.strip().splitlines()[-1])["open_and_query_ms"])
    return {"cold_p50_ms": quantile(wall, 0.5), "cold_max_ms": max(wall), "cold_inner_p50_ms": quantile(inner, 0.5)}


def cold_child(engine: str, path: str, query: str) -> None:
    """(A new process.) Import, open, answer one query; the open-and-query time."""
    if engine == "tantivy":
        started = time.perf_counter()
        hits = TantivyReader(Path(path)).sessions(query, snippets=True)
    else:
        from resources.store import DigestStore
        from resources.store.connection import StoreFile

        started = time.perf_counter()
        hits = DigestStore(StoreFile(path, read_only=True, lock_wait_s=MCP_LOCK_WAIT_S)).search.sessions(query)
    print(json.dumps({"open_and_query_ms": (time.perf_counter() - started) * 1000, "hits": len(hits)}))


def writer_child(engine: str, path: str, db: str, seed: int, stop: str) -> None:
    """(A new process.) Write new sessions into `path` until `stop` exists; print the commits made.
    Tantivy's writer reads the new session's documents from the store `db` once, before it starts."""
    from resources.store import DigestStore

    store = DigestStore(db)
    rows = new_session_rows(seed)
    documents = store.search._read_documents([rows[0]["session_id"]])
    commits = 0
    if engine == "tantivy":
        import tantivy

        index = tantivy.Index.open(path)
        writer = index.writer(heap_size=64_000_000, num_threads=1)
        Path(stop + ".ready").touch()
        while not Path(stop).exists():
            renamed = {f"{WRITER_PREFIX}{commits}": docs for docs in documents.values()}
            for doc in tantivy_documents(renamed):
                writer.add_document(doc)
            writer.commit()
            commits += 1
    else:
        Path(stop + ".ready").touch()
        while not Path(stop).exists():
            sid = f"{WRITER_PREFIX}{commits}"
            store.ingest.write_turns([{**r, "id": f"{sid}-{n}", "session_id": sid} for n, r in enumerate(rows)])
            store.search.refresh()
            commits += 1
    print(json.dumps({"commits": commits, "documents_per_commit": sum(map(len, documents.values()))}))


def reads_during_writer(
    engine: str, path: Path, db: Path, queries: list[dict], seed: int, n: int, budget_s: float
) -> dict:
    """`n` queries (at most `budget_s` seconds) while a child process writes: count, failures, wall p50/p95/max."""
    stop = Path(tempfile.mkdtemp(prefix="writer-")) / "stop"
    child = subprocess.Popen(
        [sys.executable, __file__, "--writer", engine, str(path), str(db), str(seed), str(stop)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    while not Path(f"{stop}.ready").exists() and child.poll() is None:
        time.sleep(0.05)
    if engine == "tantivy":
        reader = TantivyReader(path)
        docs_before = reader.index.searcher().num_docs

        def run(query: str) -> None:
            reader.sessions(query, snippets=True)
    else:
        from resources.store import DigestStore
        from resources.store.connection import StoreFile

        def run(query: str) -> None:  # as pipelines/mcp_server.py's Reads: a read-only open per call
            DigestStore(StoreFile(path, read_only=True, lock_wait_s=MCP_LOCK_WAIT_S)).search.sessions(query)

    time.sleep(1.0)  # the writer under way
    wall, failures, errors, started_all = [], 0, set(), time.monotonic()
    for k in range(n):
        if time.monotonic() - started_all > budget_s:
            break
        started = time.perf_counter()
        try:
            run(queries[k % len(queries)]["query"])
        except Exception as exc:  # noqa: BLE001 - a failed read is what is counted
            failures += 1
            errors.add(str(exc).splitlines()[0][:120])
        wall.append((time.perf_counter() - started) * 1000)
        time.sleep(0.05)
    stop.touch()
    out, _ = child.communicate(timeout=600)
    result = {
        "queries": len(wall), "failures": failures, "errors": sorted(errors), **{f"writer_{k}": v for k, v in json.loads(out.strip().splitlines()[-1]).items()},
        "p50_ms": quantile(wall, 0.5), "p95_ms": quantile(wall, 0.95), "max_ms": max(wall),
    }  # fmt: skip
    if engine == "tantivy":
        time.sleep(1.5)  # the reader's reload on commit
        result["docs_seen_added"] = reader.index.searcher().num_docs - docs_before
    shutil.rmtree(stop.parent, ignore_errors=True)
    return result


# --- one size -------------------------------------------------------------------------------------------


def run_size(sessions: int, seed: int, work: Path, args) -> dict:
    import tantivy

    from resources.store import DigestStore

    db, answers = work / f"search-{sessions}.duckdb", work / f"answers-{sessions}.json"
    if not answers.exists():  # bench/search.py writes its answers last: a corpus without them is redone
        for path in (db, Path(f"{db}.wal")):
            path.unlink(missing_ok=True)
        subprocess.run(
            [sys.executable, str(ROOT / "bench" / "search.py"), "--build", str(db), str(sessions), str(seed), str(answers)],
            check=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
    facts = json.loads(answers.read_text())
    queries = facts["queries"]
    store = DigestStore(db)
    store.migrate()
    new_rows = new_session_rows(seed)
    new_sid = new_rows[0]["session_id"]
    reset_store(store, new_sid)
    ids = [r[0] for r in store.query("SELECT session_id FROM sessions ORDER BY session_id").itertuples(index=False)]
    out: dict = {"sessions": sessions, "turns": facts["turns"], "corpus_mb": facts["corpus_bytes"] / 1e6}

    # Build from nothing: the postings tables, then Tantivy from the same store.
    started = time.monotonic()
    store.search.refresh()
    post = {"build_s": time.monotonic() - started}
    status = store.search.status()
    post |= {"documents": status["documents"], "size_mb": status["size_bytes"] / 1e6}
    folder = work / f"tantivy-{sessions}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    index = tantivy.Index(tantivy_schema(), path=str(folder))
    started = time.monotonic()
    writer = index.writer(heap_size=args.heap_mb * 1_000_000, num_threads=args.threads)
    docs = 0
    with store.file.held():
        for start in range(0, len(ids), BATCH):
            docs += index_sessions(writer, store, ids[start : start + BATCH], replace=False)
    writer.commit()
    tv = {"build_s": time.monotonic() - started, "documents": docs}
    started = time.monotonic()
    writer.wait_merging_threads()
    tv["merge_s"] = time.monotonic() - started
    tv["size_mb"] = dir_bytes(folder) / 1e6
    tv["index_only_mb"] = dir_bytes(folder, store_files=False) / 1e6
    for engine in (post, tv):
        engine["share"] = engine["size_mb"] / out["corpus_mb"]
    tv["index_only_share"] = tv["index_only_mb"] / out["corpus_mb"]

    # One new session: written to the store once; each engine indexes it and a reader sees it.
    store.ingest.write_turns(new_rows)
    started = time.monotonic()
    store.search.refresh()
    post["one_session_s"] = time.monotonic() - started
    reader = TantivyReader(folder)
    started = time.monotonic()
    writer = index.writer(heap_size=64_000_000, num_threads=1)
    index_sessions(writer, store, [new_sid], replace=True)
    writer.commit()
    reader.index.reload()
    tv["one_session_s"] = time.monotonic() - started
    tv["one_session_found"] = any(s == new_sid for s, _, _ in reader.sessions(new_rows[0]["prompt"], limit=50))
    writer.wait_merging_threads()
    del writer

    # Relevance and the same first session.
    ranked_post = {q["query"]: [h.session_id for h in store.search.sessions(q["query"], limit=10)] for q in queries}
    ranked_tv = {q["query"]: [s for s, _, _ in reader.sessions(q["query"], limit=10)] for q in queries}
    post["relevance"], tv["relevance"] = relevance(ranked_post, queries), relevance(ranked_tv, queries)
    out["same_first"] = sum(ranked_post[q][:1] == ranked_tv[q][:1] for q in ranked_post) / len(queries)
    out["top10_overlap"] = sum(
        len(set(ranked_post[q]) & set(ranked_tv[q])) / max(1, len(ranked_post[q])) for q in ranked_post
    ) / len(queries)

    # Warm queries: the store on a held connection (its best case), Tantivy's held searcher.
    out["load_before"] = os.getloadavg()[0]
    with store.file.held():
        post |= warm(lambda q: store.search.sessions(q, limit=10), queries, args.reps)
    tv |= warm(lambda q: reader.sessions(q, snippets=True), queries, args.reps)
    tv["rank_only"] = warm(lambda q: reader.sessions(q), queries, args.reps)
    out["load_after"] = os.getloadavg()[0]
    # A cold query, a new process each.
    post |= cold("postings", db, queries, args.cold)
    tv |= cold("tantivy", folder, queries, args.cold)
    # Reads during a writer.
    for name, engine, path in (("postings", post, db), ("tantivy", tv, folder)):
        engine["during_writer"] = reads_during_writer(
            name, path, db, queries, seed, args.writer_queries, args.writer_budget
        )
    reset_store(store, new_sid)
    out["postings"], out["tantivy"] = post, tv
    return out


# --- the report ------------------------------------------------------------------------------------


def report(results: list[dict]) -> None:
    print("\n## Search engines: postings tables in the store against Tantivy (same documents, same terms)\n")
    rows = [
        ("build from nothing, s", lambda e: e["build_s"], "{:.1f}"),
        ("one new session, indexed and seen, s", lambda e: e["one_session_s"], "{:.3f}"),
        ("warm query wall p50, ms", lambda e: e["p50_ms"], "{:.2f}"),
        ("warm query wall p95, ms", lambda e: e["p95_ms"], "{:.2f}"),
        ("warm query CPU p50, ms", lambda e: e["cpu_p50_ms"], "{:.2f}"),
        ("warm query CPU p95, ms", lambda e: e["cpu_p95_ms"], "{:.2f}"),
        ("cold query (new process) p50, ms", lambda e: e["cold_p50_ms"], "{:.0f}"),
        ("cold: open + one query alone p50, ms", lambda e: e["cold_inner_p50_ms"], "{:.1f}"),
        ("size on disk, MB", lambda e: e["size_mb"], "{:.1f}"),
        ("size / corpus", lambda e: e["share"], "{:.1%}"),
        ("during a writer: queries", lambda e: e["during_writer"]["queries"], "{:d}"),
        ("during a writer: failures", lambda e: e["during_writer"]["failures"], "{:d}"),
        ("during a writer: wall p50, ms", lambda e: e["during_writer"]["p50_ms"], "{:.1f}"),
        ("during a writer: wall p95, ms", lambda e: e["during_writer"]["p95_ms"], "{:.1f}"),
        ("during a writer: wall max, ms", lambda e: e["during_writer"]["max_ms"], "{:.1f}"),
        ("during a writer: the writer's commits", lambda e: e["during_writer"]["writer_commits"], "{:d}"),
    ]
    for r in results:
        post, tv = r["postings"], r["tantivy"]
        print(
            f"\n### {r['sessions']:,} sessions ({r['turns']:,} turns, {r['corpus_mb']:,.0f} MB of turn documents; "
            f"{post['documents']:,} documents in the store's index, {tv['documents']:,} in Tantivy's; "
            f"load average {r['load_before']:.1f} → {r['load_after']:.1f} on 2 cores)\n"
        )
        print("| figure | postings tables | Tantivy | ratio (Tantivy / postings) |")
        print("|---|---|---|---|")
        for name, get, fmt in rows:
            a, b = get(post), get(tv)
            ratio = f"{b / a:.3f}" if a else "-"
            print(f"| {name} | {fmt.format(a)} | {fmt.format(b)} | {ratio} |")
        rank = tv["rank_only"]
        print(
            f"\nTantivy ranking alone (session ids, no snippets): wall p50 {rank['p50_ms']:.2f} ms, p95 {rank['p95_ms']:.2f} ms, "
            f"CPU p50 {rank['cpu_p50_ms']:.2f} ms; its build's merges after the commit {tv['merge_s']:.1f} s; the index "
            f"without the stored texts {tv['index_only_mb']:.1f} MB ({tv['index_only_share']:.1%} of the corpus); "
            f"the new session found by its first prompt: {tv['one_session_found']}; documents a reader saw the writer add: "
            f"{tv['during_writer'].get('docs_seen_added')} of {tv['during_writer']['writer_commits'] * tv['during_writer']['writer_documents_per_commit']}"
        )
        for name, e in (("postings", post), ("tantivy", tv)):
            if e["during_writer"]["errors"]:
                print(f"{name} reads' errors during the writer: {'; '.join(e['during_writer']['errors'])}")
        print(
            f"relevance at {r['sessions']:,} sessions (hit@1 / hit@5 / MRR@10, postings | Tantivy); the same first "
            f"session for {r['same_first']:.0%} of the queries, top-10 overlap {r['top10_overlap']:.0%}:"
        )
        for kind in sorted(post["relevance"]):
            a, b = post["relevance"][kind], tv["relevance"][kind]
            print(
                f"  {kind:<10} n={a['n']:>2}  {a['hit@1']:.2f} / {a['hit@5']:.2f} / {a['mrr@10']:.2f}"
                f"  |  {b['hit@1']:.2f} / {b['hit@5']:.2f} / {b['mrr@10']:.2f}"
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--cold":
        cold_child(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer_child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument(
        "--work", type=Path, help="where the corpora and indexes go, kept (default: a temporary folder)"
    )
    parser.add_argument("--reps", type=int, default=3, help="warm passes over the labelled queries")
    parser.add_argument("--cold", type=int, default=5, help="cold queries, a new process each")
    parser.add_argument("--writer-queries", type=int, default=40, help="queries while a child writes")
    parser.add_argument("--writer-budget", type=float, default=120.0, help="seconds at most for them")
    parser.add_argument("--heap-mb", type=int, default=256, help="Tantivy's writer heap while building")
    parser.add_argument("--threads", type=int, default=1, help="Tantivy's indexing threads while building")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="search-engines-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        results = [run_size(n, args.seed, work, args) for n in args.sessions]
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    report(results)
    if args.json:
        print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
