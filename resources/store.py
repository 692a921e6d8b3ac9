"""The DuckDB store: the system of record for turns, sessions, summaries and the model ledger.

DuckDB allows one writer per file across processes, so every method opens a connection, does a
short piece of work and closes it: no connection is ever held across a model call. Opening
retries while another process holds the lock, so concurrent runs wait instead of failing.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator

import duckdb
import pandas as pd

from digest.friction import FrictionEvent
from digest.synthesis import Attempt, SessionSummary
from digest.turns import Turn, canonical_order, input_revision, partition_key

SCHEMA_VERSION = 1
LOCK_WAIT_S = 120.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_meta (version INTEGER NOT NULL, migrated_at TIMESTAMPTZ NOT NULL);

CREATE TABLE IF NOT EXISTS turns (
    id VARCHAR PRIMARY KEY,
    session_id VARCHAR NOT NULL,
    ts_ms BIGINT,
    type VARCHAR,
    prompt VARCHAR,
    thought VARCHAR,
    response VARCHAR,
    document VARCHAR NOT NULL,
    document_rebuilt BOOLEAN NOT NULL,
    agent VARCHAR,
    agent_identity VARCHAR,
    model VARCHAR,
    user_id VARCHAR,
    amount_tool_calls INTEGER,
    tools_used VARCHAR,
    archived_at VARCHAR,
    archived_reason VARCHAR,
    source_file VARCHAR NOT NULL,
    source_line INTEGER NOT NULL,
    ingested_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_session ON turns (session_id);

CREATE TABLE IF NOT EXISTS sessions (
    session_id VARCHAR PRIMARY KEY,
    partition_key VARCHAR NOT NULL UNIQUE,
    turn_count INTEGER NOT NULL,
    first_activity_ms BIGINT,
    last_activity_ms BIGINT,
    raw_bytes BIGINT NOT NULL,
    input_revision VARCHAR NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS mini_summaries (
    turn_id VARCHAR PRIMARY KEY,
    session_id VARCHAR NOT NULL,
    text VARCHAR NOT NULL,
    origin VARCHAR NOT NULL,          -- imported | generated
    model VARCHAR,
    created_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS session_summaries (
    session_id VARCHAR PRIMARY KEY,
    summary VARCHAR NOT NULL,
    title VARCHAR NOT NULL,
    category VARCHAR NOT NULL,
    quality INTEGER NOT NULL,
    productivity INTEGER NOT NULL,
    impact INTEGER NOT NULL,
    complexity INTEGER NOT NULL,
    technologies VARCHAR[] NOT NULL,
    source_tier VARCHAR NOT NULL,     -- raw | miniSummary | truncatedRaw
    degraded BOOLEAN NOT NULL,
    raw_canonical BOOLEAN NOT NULL,
    memory_count INTEGER NOT NULL,
    mini_summary_count INTEGER NOT NULL,
    input_revision VARCHAR NOT NULL,
    model VARCHAR NOT NULL,
    raw_tokens_estimate INTEGER NOT NULL,
    prompt_tokens_estimate INTEGER NOT NULL,
    raw_cap_tokens INTEGER,           -- NULL: the cap was off
    route_reason VARCHAR NOT NULL,    -- within-cap | over-raw-cap | over-safe-band | raw-timeout
    first_activity_ms BIGINT,
    last_activity_ms BIGINT,
    participating_agents VARCHAR[] NOT NULL,
    models VARCHAR[] NOT NULL,
    total_tool_calls INTEGER NOT NULL,
    tools_used VARCHAR[] NOT NULL,
    source_agent_identities VARCHAR[] NOT NULL,
    run_id VARCHAR,
    created_at TIMESTAMPTZ NOT NULL
);

CREATE SEQUENCE IF NOT EXISTS attempt_ids;
CREATE TABLE IF NOT EXISTS attempts (
    attempt_id BIGINT PRIMARY KEY DEFAULT nextval('attempt_ids'),
    session_id VARCHAR NOT NULL,
    stage VARCHAR NOT NULL,
    tier VARCHAR NOT NULL,
    model VARCHAR NOT NULL,
    prompt_bytes INTEGER NOT NULL,
    tokens_estimate INTEGER NOT NULL,
    prompt_tokens INTEGER,            -- the server's own count
    completion_tokens INTEGER,
    duration_s DOUBLE NOT NULL,
    outcome VARCHAR NOT NULL,         -- ok | a friction symptom
    suspected_truncation BOOLEAN NOT NULL,
    error_text VARCHAR,
    run_id VARCHAR,
    created_at TIMESTAMPTZ NOT NULL
);

CREATE SEQUENCE IF NOT EXISTS friction_ids;
CREATE TABLE IF NOT EXISTS friction_events (
    event_id BIGINT PRIMARY KEY DEFAULT nextval('friction_ids'),
    occurred_at TIMESTAMPTZ NOT NULL,
    asset_ref VARCHAR NOT NULL,
    consumer VARCHAR NOT NULL,
    model VARCHAR NOT NULL,
    symptom VARCHAR NOT NULL,
    emission_point VARCHAR NOT NULL,
    suggestion_kind VARCHAR NOT NULL,
    input_bytes BIGINT NOT NULL,
    input_tokens_estimate BIGINT NOT NULL,
    context_limit_tokens INTEGER NOT NULL,
    safe_limit_tokens INTEGER NOT NULL,
    raw_cap_tokens INTEGER,
    service_domain VARCHAR NOT NULL,
    note VARCHAR,
    error_text VARCHAR,
    run_id VARCHAR
);

CREATE OR REPLACE VIEW friction_aggregates AS
SELECT asset_ref, consumer, symptom, any_value(suggestion_kind) AS suggestion_kind,
       count(*) AS count, min(occurred_at) AS first_seen_at, max(occurred_at) AS last_seen_at,
       arg_max(note, occurred_at) AS latest_note, arg_max(error_text, occurred_at) AS latest_error
FROM friction_events GROUP BY asset_ref, consumer, symptom;

CREATE TABLE IF NOT EXISTS rejects (
    source_file VARCHAR NOT NULL,
    line_no INTEGER NOT NULL,
    reason VARCHAR NOT NULL,
    excerpt VARCHAR,
    rejected_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (source_file, line_no)
);

CREATE TABLE IF NOT EXISTS imported_summaries (
    session_id VARCHAR PRIMARY KEY,
    memory_count INTEGER,
    input_revision VARCHAR,
    title VARCHAR,
    summary VARCHAR,
    source_tier VARCHAR,
    source_file VARCHAR NOT NULL,
    imported_at TIMESTAMPTZ NOT NULL
);
"""

# Sessions with no summary, or whose turns changed since it was made.
PENDING_SUMMARIES = (
    "FROM sessions s LEFT JOIN session_summaries x USING (session_id) "
    "WHERE x.session_id IS NULL OR x.input_revision <> s.input_revision"
)

TURN_COLUMNS = [
    "id", "session_id", "ts_ms", "type", "prompt", "thought", "response", "document", "document_rebuilt",
    "agent", "agent_identity", "model", "user_id", "amount_tool_calls", "tools_used", "archived_at",
    "archived_reason", "source_file", "source_line",
]  # fmt: skip


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _upsert_sql(table: str, columns: list[str], key: list[str], keep: Iterable[str] = ()) -> str:
    """INSERT ... ON CONFLICT DO UPDATE of every column but the key and those in `keep`."""
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key and c not in keep)
    action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(columns)} FROM batch "
        f"ON CONFLICT ({', '.join(key)}) {action}"
    )


class DigestStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    # --- connections ------------------------------------------------------------------------

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived connection; waits (with backoff) while another process holds the file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + LOCK_WAIT_S
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=read_only)
                break
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        try:
            yield con
        finally:
            con.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def migrate(self) -> None:
        with self.transaction() as con:
            con.execute(SCHEMA)
            row = con.execute("SELECT max(version) FROM schema_meta").fetchone()
            current = row[0] if row else None
            if current is None:
                con.execute("INSERT INTO schema_meta VALUES (?, ?)", [SCHEMA_VERSION, _now()])
            elif current > SCHEMA_VERSION:
                raise RuntimeError(f"{self.path} has schema version {current}, newer than this code's {SCHEMA_VERSION}")

    # --- ingest -----------------------------------------------------------------------------

    def write_turns(self, rows: list[dict]) -> None:
        if not rows:
            return
        # One row per id: DuckDB refuses to update the same row twice in one statement.
        batch = pd.DataFrame(list({r["id"]: r for r in rows}.values()), columns=TURN_COLUMNS)
        batch["ingested_at"] = _now()
        with self.transaction() as con:
            con.register("batch", batch)
            con.execute(_upsert_sql("turns", TURN_COLUMNS + ["ingested_at"], ["id"], keep=["ingested_at"]))

    def write_imported_mini_summaries(self, rows: list[dict]) -> None:
        """Mini summaries from an export bundle: the source system's word, so they win over ours."""
        if not rows:
            return
        batch = pd.DataFrame(list({r["turn_id"]: r for r in rows}.values()), columns=["turn_id", "session_id", "text"])
        batch["origin"] = "imported"
        batch["model"] = None
        batch["created_at"] = _now()
        columns = ["turn_id", "session_id", "text", "origin", "model", "created_at"]
        with self.transaction() as con:
            con.register("batch", batch)
            con.execute(_upsert_sql("mini_summaries", columns, ["turn_id"], keep=["created_at"]))

    def write_imported_summaries(self, rows: list[dict]) -> None:
        if not rows:
            return
        columns = ["session_id", "memory_count", "input_revision", "title", "summary", "source_tier", "source_file"]
        batch = pd.DataFrame(list({r["session_id"]: r for r in rows}.values()), columns=columns)
        batch["imported_at"] = _now()
        with self.transaction() as con:
            con.register("batch", batch)
            con.execute(_upsert_sql("imported_summaries", columns + ["imported_at"], ["session_id"], keep=["imported_at"]))

    def write_rejects(self, rows: list[dict]) -> None:
        if not rows:
            return
        columns = ["source_file", "line_no", "reason", "excerpt"]
        batch = pd.DataFrame(rows, columns=columns).drop_duplicates(["source_file", "line_no"], keep="last")
        batch["rejected_at"] = _now()
        with self.transaction() as con:
            con.register("batch", batch)
            con.execute(_upsert_sql("rejects", columns + ["rejected_at"], ["source_file", "line_no"], keep=["rejected_at"]))

    def refresh_sessions(self, session_ids: Iterable[str]) -> list[dict]:
        """Recompute the `sessions` rows of these sessions from their turns; returns the rows."""
        ids = sorted(set(session_ids))
        if not ids:
            return []
        by_session: dict[str, list[Turn]] = {}
        for turn in self.load_turns(ids):
            by_session.setdefault(turn.session_id, []).append(turn)
        rows = []
        for sid, turns in by_session.items():
            ordered = canonical_order(turns)
            stamps = [t.ts_ms for t in ordered if t.ts_ms is not None]
            rows.append(
                {
                    "session_id": sid,
                    "partition_key": partition_key(sid),
                    "turn_count": len(ordered),
                    "first_activity_ms": min(stamps) if stamps else None,
                    "last_activity_ms": max(stamps) if stamps else None,
                    "raw_bytes": sum(len(t.document.encode("utf-8")) for t in ordered),
                    "input_revision": input_revision(ordered),
                    "updated_at": _now(),
                }
            )
        batch = pd.DataFrame(rows)
        with self.transaction() as con:
            con.register("batch", batch)
            con.execute(_upsert_sql("sessions", list(batch.columns), ["session_id"]))
        return rows

    # --- reads ------------------------------------------------------------------------------

    def load_turns(self, session_ids: list[str]) -> list[Turn]:
        with self.connect() as con:
            rows = con.execute(
                """
                SELECT t.id, t.session_id, t.document, t.ts_ms, t.agent, t.agent_identity, t.model, t.user_id,
                       t.amount_tool_calls, t.tools_used, m.text
                FROM turns t LEFT JOIN mini_summaries m ON m.turn_id = t.id
                WHERE t.session_id IN (SELECT unnest(?::VARCHAR[]))
                """,
                [session_ids],
            ).fetchall()
        return [Turn(*row) for row in rows]

    def session_by_partition(self, key: str) -> dict | None:
        with self.connect() as con:
            cursor = con.execute("SELECT * FROM sessions WHERE partition_key = ?", [key])
            row = cursor.fetchone()
            return dict(zip([d[0] for d in cursor.description], row)) if row else None

    def partition_keys(self) -> list[str]:
        with self.connect() as con:
            return [r[0] for r in con.execute("SELECT partition_key FROM sessions ORDER BY partition_key").fetchall()]

    def pending_summary_keys(self, limit: int | None = None) -> list[str]:
        """Sessions with no summary, or whose turns changed since it: newest activity first."""
        sql = f"SELECT s.partition_key {PENDING_SUMMARIES} ORDER BY s.last_activity_ms DESC NULLS LAST, s.session_id"
        with self.connect() as con:
            rows = con.execute(sql + (f" LIMIT {int(limit)}" if limit else "")).fetchall()
        return [r[0] for r in rows]

    def query(self, sql: str, params: list | None = None) -> pd.DataFrame:
        with self.connect() as con:
            return con.execute(sql, params or []).df()

    # --- the model ledger -------------------------------------------------------------------

    def record_attempt(self, attempt: Attempt, run_id: str | None = None) -> None:
        with self.connect() as con:
            con.execute(
                """INSERT INTO attempts (session_id, stage, tier, model, prompt_bytes, tokens_estimate, prompt_tokens,
                   completion_tokens, duration_s, outcome, suspected_truncation, error_text, run_id, created_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [
                    attempt.session_id, attempt.stage, attempt.tier, attempt.model, attempt.prompt_bytes,
                    attempt.tokens_estimate, attempt.prompt_tokens, attempt.completion_tokens, attempt.duration_s,
                    attempt.outcome, attempt.suspected_truncation, attempt.error_text, run_id, _now(),
                ],
            )  # fmt: skip

    def record_friction(self, event: FrictionEvent, run_id: str | None = None) -> None:
        with self.connect() as con:
            con.execute(
                """INSERT INTO friction_events (occurred_at, asset_ref, consumer, model, symptom, emission_point,
                   suggestion_kind, input_bytes, input_tokens_estimate, context_limit_tokens, safe_limit_tokens,
                   raw_cap_tokens, service_domain, note, error_text, run_id)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [
                    _now(), event.asset_ref, event.consumer, event.model, event.symptom, event.emission_point,
                    event.suggestion_kind, event.input_bytes, event.input_tokens_estimate, event.context_limit_tokens,
                    event.safe_limit_tokens, event.raw_cap_tokens, event.service_domain, event.note, event.error_text,
                    run_id,
                ],
            )  # fmt: skip

    def write_summary(self, summary: SessionSummary, run_id: str | None = None) -> None:
        out = summary.output
        row = {
            "session_id": summary.session_id,
            "summary": out.summary,
            "title": out.title,
            "category": out.category,
            "quality": out.quality,
            "productivity": out.productivity,
            "impact": out.impact,
            "complexity": out.complexity,
            "technologies": list(out.technologies),
            "source_tier": summary.source_tier,
            "degraded": summary.degraded,
            "raw_canonical": summary.raw_canonical,
            "memory_count": summary.memory_count,
            "mini_summary_count": summary.mini_summary_count,
            "input_revision": summary.input_revision,
            "model": summary.model,
            "raw_tokens_estimate": summary.raw_tokens_estimate,
            "prompt_tokens_estimate": summary.prompt_tokens_estimate,
            "raw_cap_tokens": summary.raw_cap_tokens,
            "route_reason": summary.route_reason,
            "first_activity_ms": summary.first_activity_ms,
            "last_activity_ms": summary.last_activity_ms,
            "participating_agents": summary.participating_agents,
            "models": summary.models,
            "total_tool_calls": summary.total_tool_calls,
            "tools_used": summary.tools_used,
            "source_agent_identities": summary.source_agent_identities,
            "run_id": run_id,
            "created_at": summary.created_at,
        }
        columns = list(row)
        placeholders = ", ".join("?" for _ in columns)
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c != "session_id")
        with self.connect() as con:
            con.execute(
                f"INSERT INTO session_summaries ({', '.join(columns)}) VALUES ({placeholders}) "
                f"ON CONFLICT (session_id) DO UPDATE SET {updates}",
                list(row.values()),
            )

    def status(self) -> dict:
        """Counts for `session-digest status`."""
        with self.connect() as con:

            def scalar(sql: str) -> int:
                return con.execute(sql).fetchone()[0]

            tiers = dict(con.execute("SELECT source_tier, count(*) FROM session_summaries GROUP BY 1 ORDER BY 1").fetchall())
            friction = dict(con.execute("SELECT symptom, count(*) FROM friction_events GROUP BY 1 ORDER BY 1").fetchall())
            return {
                "database": str(self.path),
                "sessions": scalar("SELECT count(*) FROM sessions"),
                "turns": scalar("SELECT count(*) FROM turns"),
                "mini_summaries": scalar("SELECT count(*) FROM mini_summaries"),
                "summaries": scalar("SELECT count(*) FROM session_summaries"),
                "summaries_by_source_tier": tiers,
                "pending_summaries": scalar(f"SELECT count(*) {PENDING_SUMMARIES}"),
                "attempts": scalar("SELECT count(*) FROM attempts"),
                "rejects": scalar("SELECT count(*) FROM rejects"),
                # Sessions whose exported summary counted another number of turns than we hold.
                "drifted_from_export": scalar(
                    "SELECT count(*) FROM imported_summaries i JOIN sessions s USING (session_id) "
                    "WHERE i.memory_count IS DISTINCT FROM s.turn_count"
                ),
                "friction_by_symptom": friction,
            }



class RunLedger:
    """The synthesis ledger for one run: each attempt and friction event written as it happens."""

    def __init__(self, store: DigestStore, run_id: str | None):
        self.store = store
        self.run_id = run_id

    def record_attempt(self, attempt: Attempt) -> None:
        self.store.record_attempt(attempt, self.run_id)

    def record_friction(self, event: FrictionEvent) -> None:
        self.store.record_friction(event, self.run_id)
