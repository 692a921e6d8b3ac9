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
import calendar
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Story:
    """Planted into one session: a turn, its summary (title, text, category) and its file facts."""

    prompt: str
    response: str
    summary: tuple[str, str, str] | None
    files: list[str]
    queries: list[tuple[str, str]]  # (kind, query)
    verdict: str = "ok"
    tier: str = "raw"
    extra: dict = field(default_factory=dict)


STORIES = [
    Story(
        "The websocket client keeps reconnecting in a tight loop after the server restarts.",
        "Found it: ReconnectLoop in src/net/ws_client.py never resets backoff_ms after a successful open, so "
        "every close retries at once.\nConnectionResetError: [Errno 104] Connection reset by peer\nFixed: the "
        "attempt counter resets on open, backoff doubles up to 30 s.",
        ("Fix websocket client reconnect loop", "Stopped the tight reconnect loop: backoff resets on open.", "bugfix"),
        ["src/net/ws_client.py"],
        [
            ("lexical", "ReconnectLoop ws_client"),
            ("paraphrase", "which session fixed the reconnect loop in the websocket client?"),
            ("error", "ConnectionResetError: Connection reset by peer"),
            ("file", "src/net/ws_client.py"),
        ],
    ),
    Story(
        "Should we keep SQLAlchemy or drop the ORM?",
        "Decision: we drop the ORM and write plain SQL through duckdb. The models in app/db/orm_models.py go "
        "away; queries move to app/db/queries.sql. Reason: the ORM hid N+1 queries and slowed the sweep.",
        ("Decide to drop the ORM for plain SQL", "Dropped SQLAlchemy; plain SQL queries instead.", "refactoring"),
        ["app/db/orm_models.py", "app/db/queries.sql"],
        [
            ("decision", "when did we decide to drop the ORM?"),
            ("lexical", "sqlalchemy orm_models"),
            ("file", "orm_models.py"),
        ],
    ),
    Story(
        "Raise the default timeout: requests to the model host time out at 30 seconds.",
        "Changed DEFAULT_TIMEOUT_S in src/app/settings.py from 30 to 120 and the loader no longer reads "
        "DIGEST_TIMEOUT twice.",
        None,
        ["src/app/settings.py"],
        [
            ("file", "src/app/settings.py"),
            ("lexical", "DEFAULT_TIMEOUT_S"),
            ("paraphrase", "where did we change the default timeout setting"),
        ],
    ),
    Story(
        "test_checkpoint_resume is flaky on CI.",
        "E   AssertionError: expected 3 checkpoints got 2 in tests/test_checkpoint.py\nThe race is in "
        "CheckpointWriter.flush: two threads flush the same buffer. Added a lock.",
        ("Fix flaky checkpoint resume test", "A lock in CheckpointWriter.flush ends the race.", "bugfix"),
        ["tests/test_checkpoint.py"],
        [
            ("error", "AssertionError: expected 3 checkpoints got 2"),
            ("lexical", "CheckpointWriter.flush"),
            ("paraphrase", "the flaky checkpoint test on CI"),
        ],
    ),
    Story(
        "The media worker was OOM killed again.",
        "MemoryError in thumbnail_cache: PIL images are never closed in services/media/resize.py; each resize "
        "keeps its decoded frame. Now they are closed in a with block.",
        ("Fix memory leak in image resize worker", "Images closed after resizing; no more OOM kills.", "bugfix"),
        ["services/media/resize.py"],
        [
            ("error", "MemoryError thumbnail_cache"),
            ("paraphrase", "why did the image worker run out of memory"),
            ("file", "services/media/resize.py"),
        ],
    ),
    Story(
        "Postgres will not start in docker compose: the port is taken.",
        "The host runs its own postgres on 5432, so we decided to move the compose postgres to port 5433 in "
        "docker-compose.yml and DATABASE_URL follows.",
        None,
        ["docker-compose.yml"],
        [
            ("decision", "why did we move postgres to port 5433"),
            ("file", "docker-compose.yml"),
        ],
    ),
    Story(
        "Add rate limiting to the public API.",
        "Implemented TokenBucketRateLimiter in pkg/ratelimit/bucket.go: burst 20, refill 5 per second, one "
        "bucket per API key.",
        ("Add token bucket rate limiter to API", "Each API key gets a token bucket (burst 20).", "feature"),
        ["pkg/ratelimit/bucket.go"],
        [
            ("lexical", "TokenBucketRateLimiter"),
            ("paraphrase", "add rate limiting to the API"),
            ("file", "bucket.go"),
        ],
    ),
    Story(
        "The grid crashes when a row is removed while scrolling.",
        "TypeError: Cannot read properties of undefined (reading 'gridRow') at src/grid/Row.mjs:212. The row "
        "was recycled before its update ran.",
        ("Fix grid crash on row removal", "A recycled row no longer receives updates.", "bugfix"),
        ["src/grid/Row.mjs"],
        [
            ("error", "Cannot read properties of undefined (reading 'gridRow')"),
            ("file", "Row.mjs"),
        ],
    ),
    Story(
        "Which library for translations?",
        "We chose ICU MessageFormat over gettext: plural rules per locale and no build step. Decision recorded "
        "in docs/adr/0007-translations.md.",
        ("Choose ICU MessageFormat for translations", "MessageFormat chosen over gettext.", "analysis"),
        ["docs/adr/0007-translations.md"],
        [
            ("decision", "which translation library did we choose"),
            ("lexical", "MessageFormat gettext"),
        ],
    ),
    Story(
        "The migration downgrade fails.",
        "alembic downgrade failed: KeyError: 'users_email_idx' when dropping the index in "
        "migrations/versions/0042_add_email_index.py; the index was created under another name.",
        None,
        ["migrations/versions/0042_add_email_index.py"],
        [
            ("error", "KeyError: 'users_email_idx'"),
            ("file", "0042_add_email_index.py"),
        ],
    ),
    Story(
        "Let people download the report.",
        "Added export_to_csv to the reports page: it streams rows through csv.writer with QUOTE_MINIMAL.",
        ("Add CSV export to reports", "Reports can be exported as CSV.", "feature"),
        [],
        [
            ("lexical", "export_to_csv"),
            ("paraphrase", "download the report as a spreadsheet"),
        ],
    ),
    Story(
        "Users are logged out after five minutes.",
        "JWT tokens expired early because exp was computed in milliseconds where seconds were expected, in "
        "lib/auth/jwt_issuer.ts.",
        ("Fix early JWT expiry", "exp is in seconds now.", "bugfix"),
        ["lib/auth/jwt_issuer.ts"],
        [
            ("paraphrase", "login session expiring too soon"),
            ("lexical", "jwt_issuer exp milliseconds"),
            ("file", "lib/auth/jwt_issuer.ts"),
        ],
    ),
    Story(
        "The api pods restart during warmup.",
        "The livenessProbe killed the pod while the model loaded; raised initialDelaySeconds to 60 in "
        "deploy/k8s/api-deployment.yaml.",
        ("Fix pod restarts during warmup", "Liveness probe waits for warmup.", "bugfix"),
        ["deploy/k8s/api-deployment.yaml"],
        [
            ("lexical", "livenessProbe initialDelaySeconds"),
            ("paraphrase", "pods restarting during startup"),
            ("file", "api-deployment.yaml"),
        ],
    ),
    # A degraded summary: found, and labelled a navigation index.
    Story(
        "Stitch the two GraphQL schemas.",
        "Merged the catalog and orders schemas with schema stitching in services/gateway/stitch.ts.",
        ("GraphQL schema stitching in gateway", "Catalog and orders schemas stitched.", "feature"),
        ["services/gateway/stitch.ts"],
        [("lexical", "GraphQL schema stitching")],
        tier="miniSummary",
    ),
    # A junk summary: its own words must not find its session.
    Story(
        "Tidy the logging config.",
        "Moved the log format into logging.yaml.",
        ("Quantum teleporter blockchain", "Built a quantum teleporter on a blockchain.", "feature"),
        [],
        [],
        verdict="fabricated",
    ),
]
JUNK_QUERY = "quantum teleporter blockchain"
DEGRADED_QUERY = "GraphQL schema stitching"
FILE_PATH = re.compile(
    r"\b(?:src|lib|app|pkg|core|tests|scripts|services|internal)/\w+/\w+\.(?:py|ts|go|rs|mjs|java)\b"
)
NATURAL_FILE_QUERIES = 10


def story_sessions(sessions: int) -> list[int]:
    """The session each story is planted in: the same ones at every size above 1,000."""
    if sessions >= 1000:
        return [7 + 61 * k for k in range(len(STORIES))]
    step = max(1, sessions // len(STORIES))
    return [(k * step) % sessions for k in range(len(STORIES))]


# --- the corpus (a child process) -----------------------------------------------------------------


def build_corpus(db: str, sessions: int, seed: int, out: str) -> None:
    """Write the corpus into a fresh store; its answers and figures into `out` (JSON)."""
    sys.path.insert(0, str(ROOT))
    from digest.turns import compose_document
    from resources.store import DigestStore
    from tests.realistic_corpus import draw_plan, session_turns

    store = DigestStore(db)
    store.migrate()
    planted = dict(zip(story_sessions(sessions), range(len(STORIES))))
    # The file queries from the corpus's own paths: one of each of these sessions' paths.
    picks = [3 + (sessions // NATURAL_FILE_QUERIES) * k for k in range(NATURAL_FILE_QUERIES)]
    picks = [p for p in picks if p < sessions and p not in planted]
    natural: dict[str, list[str]] = {}
    for i in picks:
        text = "\n".join(r["response"] for r in session_turns(draw_plan(seed, i), seed, i))
        found = FILE_PATH.findall(text)
        if found:
            natural.setdefault(found[len(found) // 2], [])
    rows, summaries, minis, facts = [], [], [], []

    def flush() -> None:
        store.ingest.write_turns(rows)
        rows.clear()

    for i in range(sessions):
        plan = draw_plan(seed, i)
        turns = session_turns(plan, seed, i)
        sid = plan.session_id
        story = STORIES[planted[i]] if i in planted else None
        if story is not None:
            at = turns[len(turns) // 2]
            turns.insert(
                len(turns) // 2 + 1,
                {**at, "id": f"{sid}-story", "prompt": story.prompt, "response": story.response},
            )
            facts += [(f"{sid}-story", sid, "file-edit", path, "edit") for path in story.files]
        text = "\n".join(t["response"] for t in turns)
        for path, answers in natural.items():
            if path in text:
                answers.append(sid)
        for n, t in enumerate(turns):
            rows.append(
                {
                    "id": t["id"],
                    "session_id": sid,
                    "type": "agent-interaction",
                    # The document alone (the index reads nothing else): the prompt and response again
                    # would double the store's bytes and the build's time.
                    "document": compose_document(t["prompt"], "", t["response"]),
                    "document_rebuilt": False,
                    "agent": t["agent"],
                    "model": t["model"],
                    "source_file": "corpus.jsonl",
                    "source_line": n + 1,
                    "ts_ms": calendar.timegm(time.strptime(t["timestamp"], "%Y-%m-%dT%H:%M:%S.000Z")) * 1000,
                }  # fmt: skip
            )
            if i % 4 == 1:
                minis.append({"turn_id": t["id"], "session_id": sid, "text": f"Asked: {t['prompt']}"})
        title, summary, category = (
            story.summary if story and story.summary else (turns[0]["prompt"][:60], turns[0]["prompt"], "other")
        )
        if (story and story.summary) or i % 3 == 0:
            summaries.append(
                {
                    "session_id": sid,
                    "memory_count": len(turns),
                    "title": title,
                    "summary": summary,
                    "category": category,
                    "source_tier": story.tier if story else "raw",
                    "source_file": "s.jsonl",
                    "technologies": ["python"],
                    "degraded": bool(story and story.tier != "raw"),
                }  # fmt: skip
            )
        if len(rows) >= 8000:
            flush()
    flush()
    # The summaries and mini summaries once, after every turn: each adoption looks at its sessions' turns.
    store.ingest.write_imported_summaries(summaries)
    store.ingest.write_imported_mini_summaries(minis)
    with store.file.connect() as con:
        con.executemany("INSERT INTO turn_facts VALUES (?, ?, ?, ?, ?)", facts)
    junk = [f"rt-{seed}-{i:05d}" for i, k in planted.items() if STORIES[k].verdict != "ok"]
    with store.file.connect() as con:
        con.execute("UPDATE session_summaries SET verdict = 'ok'")
        con.execute(
            "UPDATE session_summaries SET verdict = 'fabricated' WHERE session_id IN (SELECT unnest(?))", [junk]
        )
        corpus_bytes = con.execute("SELECT sum(strlen(document)) FROM turns").fetchone()[0]
        turns_n = con.execute("SELECT count(*) FROM turns").fetchone()[0]
        con.execute("CHECKPOINT")
    queries = [
        {"kind": kind, "query": q, "answers": [f"rt-{seed}-{i:05d}"]}
        for i, k in planted.items()
        for kind, q in STORIES[k].queries
    ]
    queries += [{"kind": "file", "query": path, "answers": answers} for path, answers in natural.items()]
    Path(out).write_text(
        json.dumps(
            {
                "queries": queries,
                "corpus_bytes": corpus_bytes,
                "turns": turns_n,
                "junk": junk,
                "degraded": [f"rt-{seed}-{i:05d}" for i, k in planted.items() if STORIES[k].tier != "raw"],
            }
        )
    )


def new_session_rows(seed: int) -> list[dict]:
    """A session of the corpus's median size (about 54 KB) that is not in it."""
    from digest.turns import compose_document
    from tests.realistic_corpus import draw_plan, session_turns

    for i in range(10**6, 10**6 + 500):
        plan = draw_plan(seed, i)
        if 45_000 < sum(plan.turn_bytes) < 65_000:
            return [
                {"id": t["id"], "session_id": plan.session_id, "type": "agent-interaction", "prompt": t["prompt"],
                 "response": t["response"], "document": compose_document(t["prompt"], "", t["response"]),
                 "document_rebuilt": False, "source_file": "new.jsonl", "source_line": n + 1, "ts_ms": 1_790_000_000_000 + n}
                for n, t in enumerate(session_turns(plan, seed, i))
            ]  # fmt: skip
    raise RuntimeError("no median session found")


# --- measuring ----------------------------------------------------------------------------------


def cover_every_session(store, model: str) -> None:
    """Let a search fuse over the vectors a bench wrote itself (its own layer of documents, not the
    product's pass): their snapshot published, and the coverage file saying `model` covers every session."""
    from resources.embedding_pass import publish_snapshot
    from resources.store.vector_coverage import write_coverage

    every = [s for (s,) in store.query("SELECT session_id FROM sessions").itertuples(index=False)]
    write_coverage(store.path, model, {"accounts": every, "turns": every}, publish_snapshot(store.search_vectors))


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def relevance(ranked: dict[str, list[str]], queries: list[dict]) -> dict[str, dict[str, float]]:
    """hit@1, hit@5 and MRR@10 by kind (and over all), from each query's ranked session ids."""
    by_kind: dict[str, list[tuple[int, int, float]]] = {}
    for q in queries:
        ids, answers = ranked[q["query"]], set(q["answers"])
        rank = next((n for n, s in enumerate(ids[:10], 1) if s in answers), None)
        row = (int(rank == 1), int(rank is not None and rank <= 5), 1 / rank if rank else 0.0)
        by_kind.setdefault(q["kind"], []).append(row)
        by_kind.setdefault("all", []).append(row)
    return {
        kind: {"n": len(rows), "hit@1": _mean(rows, 0), "hit@5": _mean(rows, 1), "mrr@10": _mean(rows, 2)}
        for kind, rows in by_kind.items()
    }


def _mean(rows: list[tuple], i: int) -> float:
    return sum(r[i] for r in rows) / len(rows)


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


# --- the alternatives (run under --alt-python: duckdb 1.5.5, its fts wheel, bm25s) -------------


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
    done = subprocess.run([alt_python, __file__, "--alt", str(spec)], capture_output=True, text=True, timeout=7200)
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
    ranked, ms = {}, []
    sql = """SELECT session_id, max(score) AS s FROM (SELECT session_id, fts_main_docs.match_bm25(doc_id, ?) AS score
             FROM docs) WHERE score IS NOT NULL GROUP BY 1 ORDER BY s DESC LIMIT 10"""
    for _rep in range(2):
        for q in queries:
            started = time.perf_counter()
            ids = [r[0] for r in con.execute(sql, [q["query"]]).fetchall()]
            ms.append((time.perf_counter() - started) * 1000)
            ranked[q["query"]] = ids
    result["duckdb_fts"] = {
        "build_s": build_s, "size_mb": size / 1e6, "p50_ms": quantile(ms, 0.5), "p95_ms": quantile(ms, 0.95),
        "relevance": relevance(ranked, queries), "update": "rebuild whole (overwrite=1)",
    }  # fmt: skip
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
    ranked, ms = {}, []
    for _rep in range(2):
        for q in queries:
            started = time.perf_counter()
            found, scores = retriever.retrieve(
                bm25s.tokenize([q["query"]], stopwords="en", show_progress=False), k=50, show_progress=False
            )
            ids = list(dict.fromkeys(sessions_of[i] for i, s in zip(found[0], scores[0]) if s > 0))[:10]
            ms.append((time.perf_counter() - started) * 1000)
            ranked[q["query"]] = ids
    result["bm25s"] = {
        "build_s": build_s, "size_mb": size / 1e6, "p50_ms": quantile(ms, 0.5), "p95_ms": quantile(ms, 0.95),
        "relevance": relevance(ranked, queries), "update": "rebuild whole (no add)",
    }  # fmt: skip
    print(json.dumps(result))


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
