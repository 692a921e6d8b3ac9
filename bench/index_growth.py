"""The search index's folder over many one-session refreshes: its size, segments and deleted
documents, old code against new, with and without a reader holding a searcher in another process.

    PYTHONPATH=. python bench/index_growth.py [--sessions 600] [--refreshes 100] [--old-ref REF]

1. the corpus: `bench/search.py`'s (`tests/realistic_corpus.py`'s sessions), written once by a child;
2. each arm (old code, new code; no reader, a reader) in a child process of its own with its tree
   first on the path: a copy of the store, the index built from nothing, then `--refreshes`
   refreshes in turn of the kinds the product does: a new session (the corpus's median size), a
   session whose summary changed, a session that got a new turn (each re-indexed whole: its
   documents deleted and written again); each refresh one commit;
3. the reader (its own process, the arm's code): a `SearchIndex` whose first searcher it keeps
   and searches throughout, while it searches the current one as the MCP server does; its errors;
4. after each ten refreshes: the folder's MB, its segments (both indexes), the documents' deleted
   share and the ten refreshes' median wall; at the end the folder against a fresh build of the
   same store, and the refreshes' median and p90 wall, new against old.

The old code is `git archive`d from `--old-ref` (default: fdac0c5, the commit before the fix) into the
work folder.
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

from _measure import quantile
from _old_code import exported

ROOT = Path(__file__).resolve().parent.parent
QUERY = "pytest failed assertion in the parser module"


def index_stats(folder: Path) -> dict:
    """The folder's bytes, its segments and the documents' deleted share, from Tantivy's meta.json."""
    segments, deleted, max_doc = 0, 0, 0
    for part in ("documents", "sessions"):
        meta = json.loads((folder / part / "meta.json").read_text())
        segments += len(meta["segments"])
        if part == "documents":
            deleted = sum((s.get("deletes") or {}).get("num_deleted_docs", 0) for s in meta["segments"])
            max_doc = sum(s["max_doc"] for s in meta["segments"])
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return {"mb": size / 1e6, "segments": segments, "deleted_share": deleted / max(max_doc, 1)}


# --- a reader (a child process) ----------------------------------------------------------------------


def reader_child(db: str, stop: str) -> None:
    """Search the index until `stop` exists, through a searcher taken at the start and kept, and the
    current one; print what was searched and what failed."""
    from resources.store.search_reads import SearchIndex

    index = SearchIndex(db)
    pinned = index.documents.searcher()
    pinned_docs = pinned.num_docs
    query = index.documents.parse_query("terms:pytest")
    searches, errors = 0, []
    print("ready", flush=True)
    while not Path(stop).exists():
        try:
            index = index.current()
            index.sessions(QUERY, limit=10)
            hits = pinned.search(query, 10).hits
            for _, address in hits:
                pinned.doc(address)  # its stored fields: the old segments' files read
            if pinned.num_docs != pinned_docs:
                errors.append(f"the kept searcher's documents went from {pinned_docs} to {pinned.num_docs}")
            searches += 1
        except Exception as exc:  # noqa: BLE001 - every failure is what is measured
            errors.append(f"{type(exc).__name__}: {exc}")
        time.sleep(0.05)
    print(json.dumps({"searches": searches, "errors": errors[:5], "error_count": len(errors)}), flush=True)


# --- an arm (a child process, the arm's tree first on the path) ------------------------------------


def arm_child(db: str, refreshes: int, seed: int, with_reader: bool) -> None:
    from bench.search import new_session_rows
    from resources.store import DigestStore

    store = DigestStore(db)
    store.migrate()
    started = time.monotonic()
    store.search.refresh()
    build_s = time.monotonic() - started
    fresh = index_stats(store.search.folder)
    with store.file.connect() as con:
        existing = [r[0] for r in con.execute("SELECT session_id FROM sessions ORDER BY session_id").fetchall()]
        summarized = [r[0] for r in con.execute("SELECT session_id FROM session_summaries ORDER BY 1").fetchall()]
    reader = None
    stop = Path(f"{db}.stop")
    if with_reader:
        reader = subprocess.Popen(
            [sys.executable, __file__, "--reader", db, str(stop)], stdout=subprocess.PIPE, text=True, env=os.environ
        )
        assert reader.stdout.readline().strip() == "ready"
    rows, walls, tens = new_session_rows(seed), [], []
    for n in range(refreshes):
        target = existing[(n * 37) % len(existing)]
        if n % 3 == 0:  # a new session
            sid = f"growth-{n:04d}"
            store.ingest.write_turns([{**r, "id": f"{sid}-{k}", "session_id": sid} for k, r in enumerate(rows)])
        elif n % 3 == 1:  # a session's summary written again (as a new summary replaces it)
            with store.file.connect() as con:
                con.execute(
                    "UPDATE session_summaries SET summary = ?, created_at = now() WHERE session_id = ?",
                    [f"Summary {n} of the session, written again", summarized[(n * 37) % len(summarized)]],
                )
        else:  # a session's new turn
            store.ingest.write_turns([{**rows[0], "id": f"{target}-growth-{n}", "session_id": target}])
        started = time.monotonic()
        report = store.search.refresh()
        walls.append(time.monotonic() - started)
        assert report.sessions_indexed >= 1, (n, report)
        if (n + 1) % 10 == 0:
            tens.append(
                {"refreshes": n + 1, **index_stats(store.search.folder), "wall_s": statistics.median(walls[-10:])}
            )
    read = None
    if reader is not None:
        stop.touch()
        read = json.loads(reader.stdout.readline())
        reader.wait()
    # A fresh build of the store as it is now: what the folder is weighed against.
    copy = Path(f"{db}.fresh.duckdb")
    with store.file.connect() as con:
        con.execute("CHECKPOINT")
    shutil.copy(db, copy)
    fresh_store = DigestStore(copy)
    fresh_store.search.refresh()
    final_fresh = index_stats(fresh_store.search.folder)
    print(
        json.dumps(
            {"build_s": build_s, "fresh": fresh, "tens": tens, "walls": walls, "reader": read,
             "final": index_stats(store.search.folder), "final_fresh": final_fresh}
        )
    )  # fmt: skip


# --- the run --------------------------------------------------------------------------------------


def run_arm(tree: Path, corpus: Path, work: Path, name: str, refreshes: int, seed: int, with_reader: bool) -> dict:
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    db = folder / "store.duckdb"
    shutil.copy(corpus, db)
    out = subprocess.run(
        [sys.executable, __file__, "--arm", str(db), str(refreshes), str(seed), "1" if with_reader else "0"],
        check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}"},
    )  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    shutil.rmtree(folder, ignore_errors=True)
    return result


def report(results: dict[str, dict], load: tuple) -> None:
    print(f"load average before/after: {load[0]:.1f} / {os.getloadavg()[0]:.1f} (2 cores)")
    print("\n| arm | refreshes | folder MB | segments | deleted share | median refresh s |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        f = r["fresh"]
        print(
            f"| {name} | 0 (fresh) | {f['mb']:.1f} | {f['segments']} | {f['deleted_share']:.1%} | {r['build_s']:.1f} (build) |"
        )
        for t in r["tens"]:
            print(
                f"| {name} | {t['refreshes']} | {t['mb']:.1f} | {t['segments']} | {t['deleted_share']:.1%} | {t['wall_s']:.2f} |"
            )
    print(
        "\n| arm | fresh build MB | after MB | after / fresh build | segments | deleted | refresh median s | p90 s | max s | reader |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        fin, ff, walls, rd = r["final"], r["final_fresh"], r["walls"], r["reader"]
        reader = "-" if rd is None else f"{rd['searches']} searches, {rd['error_count']} errors {rd['errors']}"
        print(
            f"| {name} | {ff['mb']:.1f} | {fin['mb']:.1f} | {fin['mb'] / ff['mb']:.2f}x | {fin['segments']} "
            f"| {fin['deleted_share']:.1%} | {statistics.median(walls):.2f} | {quantile(walls, 0.9):.2f} | {max(walls):.2f} "
            f"| {reader} |"
        )
    for reader in ("", " + reader"):
        old, new = results.get(f"old{reader}"), results.get(f"new{reader}")
        if old and new:
            print(
                f"new/old{reader}: folder {new['final']['mb'] / old['final']['mb']:.2f}x, refresh median "
                f"{statistics.median(new['walls']) / statistics.median(old['walls']):.2f}x, "
                f"p90 {quantile(new['walls'], 0.9) / quantile(old['walls'], 0.9):.2f}x"
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--reader":
        reader_child(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--arm":
        arm_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=600)
    parser.add_argument("--refreshes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument(
        "--old-ref", default="fdac0c5", help="the old code: a git ref (default: fdac0c5, before the fix)"
    )
    parser.add_argument("--work", type=Path, help="where the stores go (default: a temporary folder)")
    parser.add_argument("--arms", nargs="+", default=["old", "new", "old + reader", "new + reader"])
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="index-growth-"))
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    try:
        shutil.rmtree(work / "old-tree", ignore_errors=True)  # --work may hold another ref's
        old_tree = exported(args.old_ref, work / "old-tree")
        # Built by the old code, at its schema: the new arm migrates its copy, the old one could not
        # open a store of a newer schema.
        corpus = work / f"corpus-{args.sessions}-{args.seed}-{args.old_ref}.duckdb"
        if not corpus.exists():  # kept in --work for the next run
            subprocess.run(
                [sys.executable, str(old_tree / "bench" / "search.py"), "--build", str(corpus), str(args.sessions),
                 str(args.seed), str(work / "answers.json")],
                check=True, env={**os.environ, "PYTHONPATH": str(old_tree)},
            )  # fmt: skip
        trees = {"old": old_tree, "new": ROOT}
        results = {}
        for name in args.arms:
            results[name] = run_arm(
                trees[name.split()[0]],
                corpus,
                work,
                name.replace(" + ", "-"),
                args.refreshes,
                args.seed,
                "reader" in name,
            )
            print(f"{name}: done", file=sys.stderr, flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    report(results, load)
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
