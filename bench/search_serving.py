"""Search served: the old path (the store's postings tables, read under the store's lock) against the
new one (the Tantivy index beside the store, read without it), side by side in one run on the same
corpus: building the index from nothing, warm queries in-process (p50/p95: the old as its MCP server
read, a read-only open of the store per call; the new as its MCP server reads, a held index), the
CLI's `search` with the process start, and the MCP server's `initialize`.

Run: PYTHONPATH=. .venv/bin/python bench/search_serving.py [--sessions 1000] [--work DIR]
     (old: the code at `--old-ref`, checked out as a detached git worktree under bench/out/, made if
     missing; new: this checkout. Each arm builds the same corpus, `bench/search.py --build`, seed 28)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _measure import quantile
from _old_code import worktree

ROOT = Path(__file__).resolve().parents[1]
OLD_REF = "8d342e9"  # the last commit that read the postings tables
MCP_INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}  # fmt: skip


def cli_module(tree: Path) -> str:
    """The CLI's module in that tree: `app.cli`, `pipelines.cli` before the front doors had their floor."""
    return "app.cli" if (tree / "app" / "cli.py").is_file() else "pipelines.cli"


def arm_env(tree: Path, home: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIGEST_", "DAGSTER_"))}
    return {**env, "PYTHONPATH": str(tree), **({"DIGEST_HOME": str(home)} if home else {})}


# --- inside an arm (a child process running that arm's code) --------------------------------------------


def build_child(db: str) -> None:
    """Index the corpus from nothing; print the seconds."""
    from resources.store import DigestStore

    store = DigestStore(db)
    store.migrate()
    with store.file.transaction() as con:  # from nothing, also when the corpus is reused
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        for table in ("search_index_state", "search_documents", "search_postings", "search_postings_new"):
            if table in tables:
                con.execute(f"DELETE FROM {table}")
    shutil.rmtree(f"{db}.search", ignore_errors=True)
    started = time.perf_counter()
    store.search.refresh()
    print(json.dumps({"build_s": time.perf_counter() - started, "documents": store.search.status()["documents"]}))


def warm_child(arm: str, db: str, answers: str, reps: int) -> None:
    """Each labelled query once to warm, then `reps` times: wall ms of each answer (ten sessions with
    their snippets), as that arm's MCP server reads."""
    labelled = json.loads(Path(answers).read_text())["queries"]
    queries = [q["query"] for q in labelled]
    if arm == "old":
        from resources.store import DigestStore
        from resources.store.connection import StoreFile

        def run(query: str) -> list[str]:  # as its MCP server: a read-only open per call
            hits = DigestStore(StoreFile(db, read_only=True, lock_wait_s=30.0)).search.sessions(query)
            return [h.session_id for h in hits]
    else:
        from resources.store.search_reads import SearchIndex

        held = [SearchIndex(db)]

        def run(query: str) -> list[str]:  # as its MCP server: the held index, reloaded when a refresh published
            held[0] = held[0].current()
            return [h.session_id for h in held[0].sessions(query)]

    ranked = [run(q["query"]) for q in labelled]  # the first pass warms, and is scored
    hit1 = sum(bool(set(r[:1]) & set(q["answers"])) for r, q in zip(ranked, labelled)) / len(labelled)
    hit5 = sum(bool(set(r[:5]) & set(q["answers"])) for r, q in zip(ranked, labelled)) / len(labelled)
    wall = []
    for _ in range(reps):
        for query in queries:
            started = time.perf_counter()
            run(query)
            wall.append((time.perf_counter() - started) * 1000)
    size = sum(f.stat().st_size for f in Path(f"{db}.search").rglob("*") if f.is_file())
    print(json.dumps({"wall_ms": wall, "hit1": hit1, "hit5": hit5, "index_mb": size / 1e6}))


# --- the measures ---------------------------------------------------------------------------------------


def child(tree: Path, *args: str, home: Path | None = None) -> dict:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "search_serving.py"), *args],
        cwd=tree, env=arm_env(tree, home), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed in {tree}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def children_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def cli_walls(tree: Path, home: Path, queries: list[str]) -> tuple[list[float], list[float]]:
    """`session-digest search QUERY --json`, a new process each: wall ms, Python's start included,
    and its CPU ms (less moved by the other processes of a busy machine than its wall)."""
    walls, cpus = [], []
    for query in queries:
        cpu_started, started = children_cpu_ms(), time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", cli_module(tree), "search", *query.split(), "--json"],
            cwd=tree, env=arm_env(tree, home), capture_output=True, text=True, check=False,
        )  # fmt: skip
        walls.append((time.perf_counter() - started) * 1000)
        cpus.append(children_cpu_ms() - cpu_started)
        if done.returncode != 0:
            raise SystemExit(f"search {query!r} failed in {tree}:\n{done.stderr[-2000:]}")
    return walls, cpus


def mcp_initialize_walls(tree: Path, home: Path, n: int) -> tuple[list[float], list[float]]:
    """`session-digest mcp` started and sent `initialize`: wall ms until its answer, a new process
    each, and the server's CPU ms until then (it is stopped at once)."""
    walls, cpus = [], []
    for _ in range(n):
        cpu_started, started = children_cpu_ms(), time.perf_counter()
        server = subprocess.Popen(
            [sys.executable, "-m", cli_module(tree), "mcp"], cwd=tree, env=arm_env(tree, home),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        server.stdin.write(json.dumps(MCP_INITIALIZE) + "\n")
        server.stdin.flush()
        ready, _, _ = select.select([server.stdout], [], [], 120)
        line = server.stdout.readline() if ready else ""
        walls.append((time.perf_counter() - started) * 1000)
        server.kill()
        server.wait()
        cpus.append(children_cpu_ms() - cpu_started)
        if '"serverInfo"' not in line:
            raise SystemExit(f"mcp in {tree} gave no answer to initialize: {line[:300]!r}")
    return walls, cpus


def run_arm(name: str, tree: Path, work: Path, args) -> dict:
    home = work / f"{name}-{args.sessions}"
    db, answers = home / "digest.duckdb", home / "answers.json"
    if not answers.exists():
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        subprocess.run(
            [sys.executable, str(tree / "bench" / "search.py"), "--build", str(db), str(args.sessions), str(args.seed), str(answers)],
            cwd=tree, env=arm_env(tree), check=True,
        )  # fmt: skip
    out = {"load_before": os.getloadavg()[0]}
    out |= child(tree, "--build-index", str(db))
    queries = [q["query"] for q in json.loads(answers.read_text())["queries"]]
    warm = child(tree, "--warm", name, str(db), str(answers), str(args.reps))
    wall = warm["wall_ms"]
    out |= {"warm_p50_ms": quantile(wall, 0.5), "warm_p95_ms": quantile(wall, 0.95), "warm_n": len(wall)}
    out |= {"hit1": warm["hit1"], "hit5": warm["hit5"], "index_mb": warm["index_mb"]}
    cli, cli_cpu = cli_walls(tree, home, queries[: args.cli])
    out |= {"cli_p50_ms": statistics.median(cli), "cli_max_ms": max(cli), "cli_cpu_ms": statistics.median(cli_cpu)}
    mcp, mcp_cpu = mcp_initialize_walls(tree, home, args.mcp)
    out |= {"mcp_p50_ms": statistics.median(mcp), "mcp_max_ms": max(mcp), "mcp_cpu_ms": statistics.median(mcp_cpu)}
    out["load_after"] = os.getloadavg()[0]
    return out


def report(sessions: int, old: dict, new: dict) -> None:
    print(
        f"\n## Search served: the postings tables (old) against the Tantivy index beside the store (new), {sessions:,} sessions\n"
    )
    print("| figure | old (postings, under the store's lock) | new (Tantivy, no lock) | new / old |")
    print("|---|---|---|---|")
    rows = [
        ("index built from nothing, s", "build_s", "{:.1f}"),
        ("relevance over the labelled queries: hit@1", "hit1", "{:.2f}"),
        ("relevance over the labelled queries: hit@5", "hit5", "{:.2f}"),
        ("warm query wall p50, ms", "warm_p50_ms", "{:.2f}"),
        ("warm query wall p95, ms", "warm_p95_ms", "{:.2f}"),
        ("`session-digest search` wall p50 (process start included), ms", "cli_p50_ms", "{:.0f}"),
        ("`session-digest search` wall max, ms", "cli_max_ms", "{:.0f}"),
        ("`session-digest search` CPU p50 (user + system), ms", "cli_cpu_ms", "{:.0f}"),
        ("`session-digest mcp` answers `initialize`, wall p50, ms", "mcp_p50_ms", "{:.0f}"),
        ("`session-digest mcp` answers `initialize`, wall max, ms", "mcp_max_ms", "{:.0f}"),
        ("`session-digest mcp` until `initialize` is answered, CPU p50, ms", "mcp_cpu_ms", "{:.0f}"),
    ]
    for label, key, fmt in rows:
        print(f"| {label} | {fmt.format(old[key])} | {fmt.format(new[key])} | {new[key] / old[key]:.3f} |")
    print(
        f"\nthe index folder beside the store (new): {new['index_mb']:.1f} MB (the old index is tables inside the store)"
    )
    print(
        f"warm queries: {new['warm_n']} a side; documents indexed: old {old['documents']:,}, new {new['documents']:,}; "
        f"load average: old {old['load_before']:.1f} → {old['load_after']:.1f}, new {new['load_before']:.1f} → "
        f"{new['load_after']:.1f} (2 cores)"
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--build-index":
        return build_child(sys.argv[2])
    if len(sys.argv) > 1 and sys.argv[1] == "--warm":
        return warm_child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--work", type=Path, help="where the corpora go, kept and reused (default: a temporary folder)")
    parser.add_argument("--reps", type=int, default=3, help="warm passes over the labelled queries")
    parser.add_argument("--cli", type=int, default=7, help="CLI searches, a new process each")
    parser.add_argument("--mcp", type=int, default=5, help="MCP servers started, one `initialize` each")
    parser.add_argument("--old-ref", default=OLD_REF)
    parser.add_argument("--old-tree", type=Path, default=ROOT / "bench" / "out" / f"old-{OLD_REF}")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="search-serving-"))
    try:
        old = run_arm("old", worktree(args.old_ref, args.old_tree), work, args)
        new = run_arm("new", ROOT, work, args)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    report(args.sessions, old, new)


if __name__ == "__main__":
    main()
