"""The labelled corpus of bench/search.py (also bench/recall.py's, bench/search_vectors.py's and
others'): `tests/realistic_corpus.py`'s sessions with `STORIES` planted into a few of them, written
into a fresh store by `build_corpus` (`bench/search.py --build`), and one new session of the corpus's
median size.

Not a benchmark itself (tests/test_bench_smoke.py runs every bench/*.py but the ones named `_*`).
"""

from __future__ import annotations

import calendar
import json
import re
import sys
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
