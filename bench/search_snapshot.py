"""Hybrid search with its vectors read from the store (old) against the snapshot the embedding pass
publishes beside it (new), side by side in one run on the same store:

1. `session-digest search QUERY --json` with vectors covering the store (the embedded e5 model
   embeds the query): wall and CPU, a new process each, Python's start included; old and new
   alternate, so both see the same load.
2. Warm in-process hybrid `search_sessions` over a held index: p50 / p95 (old: the vectors read from
   a read-only open of the store per search, as its MCP server did; new: the held snapshot).
3. Hybrid searches while another process holds the store and writes (as bench/recall.py's writer):
   count, failures, p95. The old arm's store open waits at most `--lock-wait` seconds (the MCP
   server waits 30, the CLI 120) before it counts as failed.
4. The snapshot's size and a pass's publish at 1,000 and ~10,000 sessions' worth of rows (synthetic
   rows shaped as the corpus's: documents a session and text length): the first publish (as a
   compaction costs), a pass's batch appended, and the live hashes a pass compares.

The store: `bench/search.py --build` (realistic sessions with turns, cards and summaries), its
search index, and deterministic random unit vectors for every document (cards, summaries, mini
summaries, turns) stamped with the embedded e5 model: the latencies are the real ones, the rankings
are not meaningful.

Run: PYTHONPATH=. .venv/bin/python bench/search_snapshot.py [--sessions 300] [--work DIR]
     (old: the code at `--old-ref`, checked out as a detached git worktree under bench/out/)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _old_code import worktree

from bench.search_serving import arm_env, children_cpu_ms, quantile

ROOT = Path(__file__).resolve().parents[1]

OLD_REF = "fdac0c5"  # the last commit whose hybrid read its vectors from the store
QUERIES = [
    "websocket reconnect loop", "database migration failed", "flaky test in CI", "refactor the parser",
    "memory leak in the worker", "add a settings page", "slow query on the dashboard", "docker build cache",
]  # fmt: skip


# --- the corpus (built once, by this checkout) ------------------------------------------------------------


def build(work: Path, sessions: int, seed: int) -> dict:
    """The store with its index, vectors for every document, their coverage and snapshot."""
    home = work / f"store-{sessions}"
    db, ready = home / "digest.duckdb", home / "ready.json"
    if ready.exists():
        return json.loads(ready.read_text())
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    script = ROOT / "bench" / "search.py"
    subprocess.run([sys.executable, str(script), "--build", str(db), str(sessions), str(seed), str(home / "a.json")],
                   cwd=ROOT, env=arm_env(ROOT), check=True)  # fmt: skip
    import numpy as np

    from digest.embeddings import EMBEDDED_EMBED_MODEL
    from resources.embedding_pass import publish_snapshot
    from resources.store import DigestStore
    from resources.store.vector_coverage import write_coverage

    store = DigestStore(db)
    store.search.refresh()
    documents = store.search_vectors.pending(EMBEDDED_EMBED_MODEL, 10**7)
    rng = np.random.default_rng(seed)
    for at in range(0, len(documents), 2000):
        batch = documents[at : at + 2000]
        made = rng.standard_normal((len(batch), 384)).astype(np.float32)
        store.search_vectors.write(EMBEDDED_EMBED_MODEL, batch, made.tolist())
    started = time.perf_counter()
    generation = publish_snapshot(store.search_vectors)
    publish_s = time.perf_counter() - started
    write_coverage(db, EMBEDDED_EMBED_MODEL, store.search_vectors.coverage(EMBEDDED_EMBED_MODEL), generation)
    figures = {
        "db": str(db), "home": str(home), "sessions": sessions, "documents": len(documents),
        "text_chars": sum(len(d.text) for d in documents), "first_publish_s": publish_s,
    }  # fmt: skip
    ready.write_text(json.dumps(figures))
    return figures


def arm_copy(corpus: dict, tree: Path) -> dict:
    """The store for the old arm: a copy of the built one (index, vectors, snapshot) recorded at the
    old code's schema version, which refuses a newer store. The migrations between change rows the
    bench's store does not hold (its mini summaries are none generated), never a column it reads."""
    home = Path(f"{corpus['home']}-{tree.name}")
    if not home.exists():
        shutil.copytree(corpus["home"], home)
        version = subprocess.run(
            [sys.executable, "-c", "from resources.store.migrations import SCHEMA_VERSION; print(SCHEMA_VERSION)"],
            env=arm_env(tree), cwd=tree, check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        import duckdb

        with duckdb.connect(str(home / "digest.duckdb")) as con:
            con.execute("DELETE FROM schema_meta WHERE version > ?", [int(version)])
    return {**corpus, "home": str(home), "db": str(home / "digest.duckdb")}


# --- inside an arm (a child process running that arm's code) ---------------------------------------------


def warm_child(arm: str, db: str, reps: int) -> None:
    """Each query once to warm, then `reps` times: wall ms of each hybrid answer."""
    from resources.hybrid_search import search_sessions
    from resources.model_clients.embedded_embeddings import EmbeddedEmbedder
    from resources.store.search_reads import SearchIndex

    index, client = SearchIndex(db), EmbeddedEmbedder()
    opener = {}
    if arm == "old":
        from resources.store import open_store

        opener = {"vectors": lambda: open_store(db, read_only=True, lock_wait_s=30.0)}
    modes = {search_sessions(index, client, q, **opener).mode for q in QUERIES}
    wall = []
    for _ in range(reps):
        for query in QUERIES:
            started = time.perf_counter()
            search_sessions(index, client, query, **opener)
            wall.append((time.perf_counter() - started) * 1000)
    print(json.dumps({"wall_ms": wall, "modes": sorted(modes)}))


def writer_child(db: str, seconds: float) -> None:
    """Hold the store and write sessions' turns until `seconds` pass (the index is not refreshed, so the
    vectors still cover every session the searches cover)."""
    from bench.search import new_session_rows
    from resources.store import DigestStore

    store = DigestStore(db)
    rows, commits = new_session_rows(7), 0
    with store.file.held():
        print("ready", flush=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sid = f"writer-{os.getpid()}-{commits:04d}"
            store.ingest.write_turns([{**r, "id": f"{sid}-{n}", "session_id": sid} for n, r in enumerate(rows)])
            commits += 1
    print(json.dumps({"commits": commits}), flush=True)


def beside_writer_child(arm: str, db: str, seconds: float, lock_wait: float) -> None:
    """Hybrid searches back to back while the writer holds the store: wall ms, failures."""
    from resources.hybrid_search import search_sessions
    from resources.model_clients.embedded_embeddings import EmbeddedEmbedder
    from resources.store.search_reads import SearchIndex

    index, client = SearchIndex(db), EmbeddedEmbedder()
    client.embed_query("warm the model")
    opener = {}
    if arm == "old":
        from resources.store import open_store

        opener = {"vectors": lambda: open_store(db, read_only=True, lock_wait_s=lock_wait)}
    writer = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--writer", db, str(seconds + 3)],
        env=os.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    if writer.stdout.readline().strip() != "ready":
        raise SystemExit(f"the writer did not start: {writer.stderr.read()[-2000:]}")
    wall, failures, n = [], [], 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            found = search_sessions(index, client, QUERIES[n % len(QUERIES)], **opener)
            if found.mode != "hybrid":
                failures.append(f"answered {found.mode}: {found.notice}"[:200])
        except Exception as exc:  # noqa: BLE001 - a failure is counted, with its reason
            failures.append(f"{type(exc).__name__}: {exc}"[:200])
        wall.append((time.perf_counter() - started) * 1000)
        n += 1
    commits = json.loads(writer.communicate(timeout=600)[0].strip().splitlines()[-1])["commits"]
    print(json.dumps({"wall_ms": wall, "failures": failures, "commits": commits}))


def publish_child(sessions_list: list[int], per_session: float, text_chars: float, batch: int) -> None:
    """The snapshot's size and publish costs over synthetic rows shaped as the corpus's."""
    import numpy as np

    from digest.embeddings import EmbeddingStamp
    from resources.store.vector_snapshot import SnapshotRow, VectorSnapshot, publish, snapshot_dir

    stamp, rng, out = EmbeddingStamp("bench-model", 384), np.random.default_rng(3), []
    for sessions in sessions_list:
        where = Path(tempfile.mkdtemp(prefix="snapshot-")) / "digest.duckdb"
        n = int(sessions * per_session)
        text = "x" * int(text_chars)
        rows = [SnapshotRow(f"turn:s{i // per_session:.0f}-t{i}", f"s{i // per_session:.0f}", f"t{i}", "turn", f"{i:032x}", text) for i in range(n)]  # fmt: skip
        vectors = rng.standard_normal((n, 384)).astype(np.float32)
        started = time.perf_counter()
        publish(where, stamp, None, rows, vectors, [])
        first_s = time.perf_counter() - started
        size = sum(f.stat().st_size for f in snapshot_dir(where).iterdir())
        appends = []
        for k in range(5):  # a pass's batch, each superseding rows already published
            started = time.perf_counter()
            old = VectorSnapshot.open(where)
            hashes = old.live_hashes()
            changed = [SnapshotRow(r.doc_key, r.session_id, r.turn_id, r.kind, f"{k}{r.text_hash}", r.text) for r in rows[k * batch : (k + 1) * batch]]  # fmt: skip
            publish(where, stamp, old, changed, rng.standard_normal((batch, 384)), [])
            appends.append((time.perf_counter() - started) * 1000)
            assert len(hashes) == n
        started = time.perf_counter()
        snapshot = VectorSnapshot.open(where)  # a search's first: not held by this process yet
        open_ms = (time.perf_counter() - started) * 1000
        query = rng.standard_normal(384).tolist()
        started = time.perf_counter()
        snapshot.nearest(stamp.model, query, 200)
        nearest_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        snapshot.nearest(stamp.model, query, 200, [f"s{k}" for k in range(0, sessions, 2)])
        filtered_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        snapshot.live_hashes()
        hashes_ms = (time.perf_counter() - started) * 1000
        out.append({"sessions": sessions, "rows": n, "mb": size / 1e6, "vectors_mb": n * 384 * 4 / 1e6,
                    "first_s": first_s, "append_ms": statistics.median(appends), "open_ms": open_ms,
                    "nearest_ms": nearest_ms, "filtered_ms": filtered_ms, "hashes_ms": hashes_ms})  # fmt: skip
        shutil.rmtree(where.parent)
    print(json.dumps(out))


# --- the measures -------------------------------------------------------------------------------------


def child(tree: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "search_snapshot.py"), *args],
        cwd=tree, env=arm_env(tree), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed in {tree}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cli_run(tree: Path, home: str, query: str) -> tuple[float, float, str]:
    cpu_started, started = children_cpu_ms(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "search", *query.split(), "--json"],
        cwd=tree, env=arm_env(tree, Path(home)), capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall, cpu = (time.perf_counter() - started) * 1000, children_cpu_ms() - cpu_started
    if done.returncode != 0:
        raise SystemExit(f"search {query!r} failed in {tree}:\n{done.stderr[-2000:]}")
    return wall, cpu, json.loads(done.stdout)["mode"]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--warm":
        return warm_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        return writer_child(sys.argv[2], float(sys.argv[3]))
    if len(sys.argv) > 1 and sys.argv[1] == "--beside":
        return beside_writer_child(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
    if len(sys.argv) > 1 and sys.argv[1] == "--publish":
        sizes = [int(s) for s in sys.argv[2].split(",")]
        return publish_child(sizes, float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--work", type=Path, help="where the store goes, kept and reused (default: a temporary folder)")
    parser.add_argument("--cli", type=int, default=8, help="CLI searches a side, a new process each")
    parser.add_argument("--reps", type=int, default=3, help="warm passes over the queries")
    parser.add_argument("--beside-s", type=float, default=8.0, help="seconds of searches beside the writer")
    parser.add_argument("--lock-wait", type=float, default=2.0, help="the old arm's wait for the store's lock, s")
    parser.add_argument("--publish-sizes", default="1000,10000", help="sessions' worth of rows for the publish figures")
    parser.add_argument("--batch", type=int, default=200, help="rows a pass publishes (the default embed budget)")
    parser.add_argument("--old-ref", default=OLD_REF)
    parser.add_argument("--old-tree", type=Path, default=ROOT / "bench" / "out" / f"old-{OLD_REF}")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="search-snapshot-"))
    trees = {"old": worktree(args.old_ref, args.old_tree), "new": ROOT}
    try:
        corpus = build(work, args.sessions, args.seed)
        stores = {"old": arm_copy(corpus, trees["old"]), "new": corpus}
        load = [os.getloadavg()[0]]
        out = {arm: {} for arm in trees}
        for arm, tree in trees.items():  # the model loaded once by each, so the first CLI runs are not cold
            cli_run(tree, stores[arm]["home"], QUERIES[0])
        walls = {arm: ([], [], set()) for arm in trees}
        for n in range(args.cli):
            for arm, tree in trees.items():
                wall, cpu, mode = cli_run(tree, stores[arm]["home"], QUERIES[n % len(QUERIES)])
                walls[arm][0].append(wall)
                walls[arm][1].append(cpu)
                walls[arm][2].add(mode)
        for arm, tree in trees.items():
            w, c, modes = walls[arm]
            out[arm] |= {"cli_p50": statistics.median(w), "cli_max": max(w), "cli_cpu": statistics.median(c),
                         "cli_modes": sorted(modes)}  # fmt: skip
            warm = child(tree, "--warm", arm, stores[arm]["db"], str(args.reps))
            out[arm] |= {"warm_p50": quantile(warm["wall_ms"], 0.5), "warm_p95": quantile(warm["wall_ms"], 0.95),
                         "warm_n": len(warm["wall_ms"]), "warm_modes": warm["modes"]}  # fmt: skip
            beside = child(tree, "--beside", arm, stores[arm]["db"], str(args.beside_s), str(args.lock_wait))
            out[arm] |= {"beside_n": len(beside["wall_ms"]), "beside_failures": beside["failures"],
                         "beside_p95": quantile(beside["wall_ms"], 0.95), "commits": beside["commits"]}  # fmt: skip
        load.append(os.getloadavg()[0])
        per_session = corpus["documents"] / corpus["sessions"]
        chars = corpus["text_chars"] / corpus["documents"]
        published = child(ROOT, "--publish", args.publish_sizes, str(per_session), str(chars), str(args.batch))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    report(corpus, out, published, load, args)


def report(corpus: dict, out: dict, published: list[dict], load: list[float], args) -> None:
    old, new = out["old"], out["new"]
    print(
        f"\n## Hybrid search: vectors read from the store (old, {args.old_ref}) against the snapshot beside it "
        f"(new), {corpus['sessions']:,} sessions, {corpus['documents']:,} documents with vectors\n"
    )
    print("| figure | old (the store) | new (the snapshot) | new / old |")
    print("|---|---|---|---|")
    rows = [
        ("`session-digest search` wall p50 (process start included), ms", "cli_p50"),
        ("`session-digest search` wall max, ms", "cli_max"),
        ("`session-digest search` CPU p50 (user + system), ms", "cli_cpu"),
        ("warm hybrid `search_sessions` wall p50, ms", "warm_p50"),
        ("warm hybrid `search_sessions` wall p95, ms", "warm_p95"),
        ("hybrid searches beside a writer holding the store: wall p95, ms", "beside_p95"),
    ]
    for label, key in rows:
        print(f"| {label} | {old[key]:.0f} | {new[key]:.0f} | {new[key] / old[key]:.3f} |")
    print(
        f"| hybrid searches beside the writer in {args.beside_s:.0f} s: count, failures | {old['beside_n']}, "
        f"**{len(old['beside_failures'])}** | {new['beside_n']}, **{len(new['beside_failures'])}** | |"
    )
    print(
        f"\nmodes answered: CLI old {old['cli_modes']}, new {new['cli_modes']}; warm old {old['warm_modes']}, "
        f"new {new['warm_modes']}; writer commits meanwhile: old {old['commits']}, new {new['commits']}; "
        f"the old arm's store open waited at most {args.lock_wait:g} s"
    )
    for failure in old["beside_failures"][:2] + new["beside_failures"][:2]:
        print(f"  a search beside the writer failed: {failure}")
    print(
        f"the corpus's first publish: {corpus['first_publish_s']:.2f} s for {corpus['documents']:,} rows; "
        f"load average {load[0]:.1f} → {load[1]:.1f} (2 cores)\n"
    )
    print(f"### The snapshot at scale (synthetic rows: {corpus['documents'] / corpus['sessions']:.1f} documents a "
          f"session, {corpus['text_chars'] / corpus['documents']:.0f} characters a text, as the corpus)\n")  # fmt: skip
    print(
        "| sessions | rows | snapshot MB (vectors MB) | first publish (= a compaction), s "
        f"| a pass's {args.batch} rows appended, ms | a search's open, ms | nearest 200, ms "
        "| nearest 200 in half the sessions, ms | the pass's live hashes, ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for p in published:
        print(
            f"| {p['sessions']:,} | {p['rows']:,} | {p['mb']:.0f} ({p['vectors_mb']:.0f}) | {p['first_s']:.2f} "
            f"| {p['append_ms']:.0f} | {p['open_ms']:.1f} | {p['nearest_ms']:.0f} | {p['filtered_ms']:.0f} "
            f"| {p['hashes_ms']:.0f} |"
        )


if __name__ == "__main__":
    main()
