"""The DuckDB store: the system of record for turns, sessions, summaries and the model ledger.

DuckDB allows one writer per file across processes, so every method opens a connection, does a
short piece of work and closes it: no connection is ever held across a model call. Opening
retries while another process holds the lock, so concurrent runs wait instead of failing.
"""

from __future__ import annotations

import json
import re
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator

import duckdb
import pandas as pd

from digest.archive import (
    ARCHIVED_TURN_COLUMNS,
    MANIFEST,
    MAX_LINE_BYTES,
    SESSION_COLUMN,
    TURN_METADATA_KEYS,
    Bundle,
    BundleError,
    BundleFile,
    JsonlWriter,
    SessionState,
    archive_stamp,
    build_manifest,
    bundle_file_names,
    jsonable,
    memory_row,
    mini_summary_node_row,
    restore_outcome,
    sha256_file,
    summary_backup_row,
    table_file_name,
    validate_bundle,
    vector_line,
    write_manifest,
    VectorCount,
)
from digest.friction import FrictionEvent
from digest.graph import UNDIGESTIBLE, DigestState, SessionGraph, after_failure, after_reset, after_success
from digest.graph import Chunk, GraphEdge, GraphExtraction, GraphNode, summary_graph, summary_node_id
from digest.graph import edge_line, merge_stored_edges, merge_stored_nodes, node_line
from digest.model_api import ChatReply
from digest.mini_summaries import ARCHIVE_GENERATION_TIMEOUT, PendingSession, PendingTurn, order_sessions
from digest.synthesis import Limits  # for the mini summary priority
from digest.scheduling import Candidate
from digest.synthesis import FALLBACK_CHARS, Attempt, SessionSummary
from digest.turns import Turn, canonical_order, input_revision, partition_key

SCHEMA_VERSION = 1
LOCK_WAIT_S = 120.0
# Archives: rows fetched per batch.
EXPORT_BATCH_ROWS = 2000
# Not the store's content, so never archived: the schema version (in the manifest), leases of live
# runs, the record of archives written, and `sessions`, recomputed from turns on restore. Turns are
# archived, but as the memory-backup file.
NOT_ARCHIVED = frozenset({"schema_meta", "summary_leases", "archives", "sessions", "turns"})
RESTORE_MODES = ("merge", "replace")

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
    ingested_at TIMESTAMPTZ NOT NULL,
    embedding VARCHAR                 -- the export's vector, its JSON text as cut from the line (never parsed)
);
-- No index on turns(session_id): DuckDB (1.4 to 1.5.5 at least, duckdb/duckdb#23848) can persist a
-- secondary index stale when a writer is killed and the next process checkpoints its WAL, and then
-- a session's lookup silently misses turns. A scan costs ~20 ms a lookup at a million turns.

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

-- Mini summary generation per turn: failed attempts and the archive (ours, apart from the export's
-- turns.archived_at, which a re-ingest rewrites).
CREATE TABLE IF NOT EXISTS mini_summary_state (
    turn_id VARCHAR PRIMARY KEY,
    session_id VARCHAR NOT NULL,
    attempts INTEGER NOT NULL,        -- failed attempts since the last un-archive
    last_cause VARCHAR,               -- timeout-inner | timeout-outer | no-model | empty-output | provider-error | unspecified
    archived_at TIMESTAMPTZ,
    archived_reason VARCHAR,          -- no-content | generation-timeout
    unarchived_at TIMESTAMPTZ,        -- set by un-archive; also overrides the export's archive flag
    updated_at TIMESTAMPTZ NOT NULL
);

-- Mini summary runs per session: one that attempted turns and generated none backs off.
CREATE TABLE IF NOT EXISTS backfill_state (
    session_id VARCHAR PRIMARY KEY,
    backoff_until_ms BIGINT,          -- NULL: no backoff
    last_attempted INTEGER NOT NULL,
    last_generated INTEGER NOT NULL,
    last_run_id VARCHAR,
    updated_at TIMESTAMPTZ NOT NULL
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
    created_at TIMESTAMPTZ NOT NULL,
    origin VARCHAR DEFAULT 'generated'  -- generated | imported (an export's summary, current for the turns)
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
    cached BOOLEAN NOT NULL DEFAULT false,  -- replayed from response_cache: no model call
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

-- Failure backoff: a failed session waits before it is tried again, unless its turns change.
CREATE TABLE IF NOT EXISTS summary_state (
    session_id VARCHAR PRIMARY KEY,
    failures INTEGER NOT NULL,
    last_symptom VARCHAR,
    failed_revision VARCHAR NOT NULL,
    backoff_until_ms BIGINT NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);

-- A session is claimed before its model work, so two runs never summarize it at once.
CREATE TABLE IF NOT EXISTS summary_leases (
    session_id VARCHAR PRIMARY KEY,
    run_id VARCHAR NOT NULL,
    expires_at_ms BIGINT NOT NULL
);

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
    imported_at TIMESTAMPTZ NOT NULL,
    category VARCHAR,
    quality INTEGER,
    productivity INTEGER,
    impact INTEGER,
    complexity INTEGER,
    technologies VARCHAR[],
    degraded BOOLEAN,
    raw_canonical BOOLEAN,
    participating_agents VARCHAR[],
    models VARCHAR[],
    total_tool_calls INTEGER,
    tools_used VARCHAR[],
    source_agent_identities VARCHAR[],
    metadata JSON,                    -- the line's metadata as exported: an archive writes it back
    embedding VARCHAR                 -- the line's vector, its JSON text as cut
);

-- Archives written from this store (`session-digest archive`).
CREATE TABLE IF NOT EXISTS archives (
    archive_id VARCHAR PRIMARY KEY,
    path VARCHAR NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    sessions VARCHAR[],               -- NULL: the whole store
    manifest_sha256 VARCHAR NOT NULL,
    retired BOOLEAN NOT NULL          -- its sessions were retired from the live store
);

-- Tombstones of sessions archived with --retire: their rows stay, every sweep leaves them out,
-- until a replace-mode restore of their bundle brings them back.
CREATE TABLE IF NOT EXISTS retired_sessions (
    session_id VARCHAR PRIMARY KEY,
    archive_id VARCHAR NOT NULL,
    retired_at TIMESTAMPTZ NOT NULL
);

-- Usable model replies by request: reused by reruns (after a restore, say), and the staging of a
-- summary's reply until the summary is written (resources/response_cache.py).
CREATE TABLE IF NOT EXISTS response_cache (
    request_key VARCHAR PRIMARY KEY,  -- sha256 of (model, wire parameters, prompt, schema)
    model VARCHAR NOT NULL,
    text VARCHAR NOT NULL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    duration_s DOUBLE NOT NULL,       -- of the call that produced it
    finish_reason VARCHAR,
    session_id VARCHAR,               -- the session whose summary asked, at which turns
    input_revision VARCHAR,
    created_at TIMESTAMPTZ NOT NULL
);

-- The session graph (`session_graph`): each session's nodes and edges, replaced whole when the
-- session is digested again; its SESSION_SUMMARY node and summary-time edges are written with its
-- summary (digested or not). A node or edge several sessions share is merged on export.
CREATE TABLE IF NOT EXISTS graph_nodes (
    session_id VARCHAR NOT NULL,
    id VARCHAR NOT NULL,
    label VARCHAR NOT NULL,           -- SESSION_SUMMARY | SESSION | AGENT_MEMORY | an entity type (before graph-v2 also AGENT, ISSUE)
    properties JSON NOT NULL,
    input_revision VARCHAR NOT NULL,  -- of the turns it was digested from
    run_id VARCHAR,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (session_id, id)
);

CREATE TABLE IF NOT EXISTS graph_edges (
    session_id VARCHAR NOT NULL,
    id VARCHAR NOT NULL,              -- <source>-><target>:<type>
    source VARCHAR NOT NULL,
    target VARCHAR NOT NULL,
    type VARCHAR NOT NULL,
    properties JSON NOT NULL,         -- always holds "weight"
    input_revision VARCHAR NOT NULL,
    run_id VARCHAR,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (session_id, id)
);

-- Finished graph chunks of a session not yet digested at its turns: a digest run its budget cut
-- short goes on from them (no chunk is sent twice). Dropped when the session's graph is written.
CREATE TABLE IF NOT EXISTS graph_chunks (
    session_id VARCHAR NOT NULL,
    input_revision VARCHAR NOT NULL,  -- of the turns the chunk was cut from
    chunk_index INTEGER NOT NULL,
    chunk_sha256 VARCHAR NOT NULL,    -- of the chunk's text: another chunking is another chunk
    turn_ids VARCHAR[] NOT NULL,
    extraction JSON NOT NULL,         -- the validated entities and relations
    cut_at_output_cap BOOLEAN NOT NULL,
    model VARCHAR NOT NULL,
    run_id VARCHAR,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (session_id, input_revision, chunk_index, chunk_sha256)
);

-- Graph digestion per session: undigestible sessions are out of the cadence until their turns
-- change or an operator resets them (`session-digest reset-digest`).
CREATE TABLE IF NOT EXISTS digest_state (
    session_id VARCHAR PRIMARY KEY,
    digest_state VARCHAR NOT NULL,    -- digested | undigested | undigestible
    attempts INTEGER NOT NULL,        -- failed attempts at `revision`
    defer_reason VARCHAR,             -- skip-over-band | wall-clock-timeout | schema-failure | under-band-choke | provider-error | operator-reset
    revision VARCHAR NOT NULL,        -- the input revision the state is about
    updated_at TIMESTAMPTZ NOT NULL
);

-- --- imported graph (ingest of a graph-backup file) ---
-- The source system's graph as its graph-backup file had it (ours too, when our export comes back),
-- every node and edge line by id; a later line or ingest wins. `export-graph` and archives lay each
-- session's own graph rows over these by id (`digest.graph.merge_stored_nodes`).
CREATE TABLE IF NOT EXISTS imported_graph_nodes (
    id VARCHAR PRIMARY KEY,
    label VARCHAR NOT NULL,
    properties JSON NOT NULL,         -- as the line had them
    source_file VARCHAR NOT NULL,
    source_line INTEGER NOT NULL,
    imported_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS imported_graph_edges (
    id VARCHAR PRIMARY KEY,           -- the line's, else <source>-><target>:<type> as the original's import
    source VARCHAR NOT NULL,
    target VARCHAR NOT NULL,
    type VARCHAR NOT NULL,
    properties JSON NOT NULL,
    source_file VARCHAR NOT NULL,
    source_line INTEGER NOT NULL,
    imported_at TIMESTAMPTZ NOT NULL
);
"""

# Columns added since stores were first made: `migrate` adds them to an older store (DuckDB adds no
# column with a constraint, so these are nullable; the writers always fill them).
ADDED_COLUMNS = [
    ("session_summaries", "origin VARCHAR DEFAULT 'generated'"),
    ("turns", "embedding VARCHAR"),
    ("imported_summaries", "metadata JSON"),
    ("imported_summaries", "embedding VARCHAR"),
    *[
        ("imported_summaries", column)
        for column in (
            "category VARCHAR", "quality INTEGER", "productivity INTEGER", "impact INTEGER", "complexity INTEGER",
            "technologies VARCHAR[]", "degraded BOOLEAN", "raw_canonical BOOLEAN", "participating_agents VARCHAR[]",
            "models VARCHAR[]", "total_tool_calls INTEGER", "tools_used VARCHAR[]", "source_agent_identities VARCHAR[]",
        )
    ],
]  # fmt: skip

IMPORTED_SUMMARY_COLUMNS = [
    "session_id", "memory_count", "input_revision", "title", "summary", "source_tier", "source_file", "category",
    "quality", "productivity", "impact", "complexity", "technologies", "degraded", "raw_canonical",
    "participating_agents", "models", "total_tool_calls", "tools_used", "source_agent_identities", "metadata",
    "embedding",
]  # fmt: skip

# An exported summary is current when it was made from the turns as they are: its
# `dreamInputRevision` is the session's input revision or, without one, the original's own rule,
# its `memoryCount` is the session's turn count. A current one stands as the session's summary,
# with its provenance as exported (an absent `sourceTier` predates the degraded path: raw), unless
# the session already has a summary of these turns.
ADOPT_IMPORTED_SUMMARIES = """
    INSERT INTO session_summaries (session_id, summary, title, category, quality, productivity, impact, complexity,
        technologies, source_tier, degraded, raw_canonical, memory_count, mini_summary_count, input_revision, model,
        raw_tokens_estimate, prompt_tokens_estimate, raw_cap_tokens, route_reason, first_activity_ms,
        last_activity_ms, participating_agents, models, total_tool_calls, tools_used, source_agent_identities,
        run_id, created_at, origin)
    WITH ids AS (SELECT unnest(?::VARCHAR[]) AS session_id),
    minis AS (
        SELECT t.session_id, count(*) AS n FROM turns t JOIN mini_summaries m ON m.turn_id = t.id
        WHERE t.session_id IN (SELECT session_id FROM ids) GROUP BY 1
    )
    SELECT s.session_id, i.summary, coalesce(i.title, ''), coalesce(i.category, ''), coalesce(i.quality, 0),
        coalesce(i.productivity, 0), coalesce(i.impact, 0), coalesce(i.complexity, 0), coalesce(i.technologies, []),
        coalesce(i.source_tier, 'raw'), coalesce(i.degraded, coalesce(i.source_tier, 'raw') <> 'raw'),
        coalesce(i.raw_canonical, true), s.turn_count, coalesce(minis.n, 0), s.input_revision, '', 0, 0, NULL,
        'imported', s.first_activity_ms, s.last_activity_ms, coalesce(i.participating_agents, []),
        coalesce(i.models, []), coalesce(i.total_tool_calls, 0), coalesce(i.tools_used, []),
        coalesce(i.source_agent_identities, []), NULL, ?, 'imported'
    FROM imported_summaries i
    JOIN sessions s USING (session_id)
    LEFT JOIN session_summaries x USING (session_id)
    LEFT JOIN minis USING (session_id)
    WHERE s.session_id IN (SELECT session_id FROM ids)
      AND (i.input_revision = s.input_revision OR (i.input_revision IS NULL AND i.memory_count = s.turn_count))
      AND trim(coalesce(i.summary, '')) <> ''
      AND (x.session_id IS NULL OR x.input_revision <> s.input_revision)
    ON CONFLICT (session_id) DO UPDATE SET summary = excluded.summary, title = excluded.title,
        category = excluded.category, quality = excluded.quality, productivity = excluded.productivity,
        impact = excluded.impact, complexity = excluded.complexity, technologies = excluded.technologies,
        source_tier = excluded.source_tier, degraded = excluded.degraded, raw_canonical = excluded.raw_canonical,
        memory_count = excluded.memory_count, mini_summary_count = excluded.mini_summary_count,
        input_revision = excluded.input_revision, model = excluded.model,
        raw_tokens_estimate = excluded.raw_tokens_estimate, prompt_tokens_estimate = excluded.prompt_tokens_estimate,
        raw_cap_tokens = excluded.raw_cap_tokens, route_reason = excluded.route_reason,
        first_activity_ms = excluded.first_activity_ms, last_activity_ms = excluded.last_activity_ms,
        participating_agents = excluded.participating_agents, models = excluded.models,
        total_tool_calls = excluded.total_tool_calls, tools_used = excluded.tools_used,
        source_agent_identities = excluded.source_agent_identities, run_id = excluded.run_id,
        created_at = excluded.created_at, origin = excluded.origin
    RETURNING *
"""

# --- imported graph: digest state ---
# An exported summary that says its session was digested at the turns as they are (the Dream keys
# the original and our archive write: `dreamCompletedRevision` = the session's input revision) marks
# the session digested at that revision: its graph came in with the export (`imported_graph_*`), so
# the digest cadence does not redo it with model calls.
MARK_IMPORTED_DIGESTS = """
    INSERT INTO digest_state (session_id, digest_state, attempts, defer_reason, revision, updated_at)
    SELECT s.session_id, 'digested', 0, NULL, s.input_revision, ?
    FROM imported_summaries i
    JOIN sessions s USING (session_id)
    LEFT JOIN digest_state d USING (session_id)
    WHERE s.session_id IN (SELECT unnest(?::VARCHAR[]))
      AND i.input_revision = s.input_revision
      AND (i.metadata->>'dreamCompletedRevision') = s.input_revision
      AND coalesce(i.metadata->>'digestState', 'digested') = 'digested'
      AND coalesce(i.metadata->>'graphDigested', 'true') = 'true'
      AND NOT coalesce(d.digest_state = 'digested' AND d.revision = s.input_revision, false)
    ON CONFLICT (session_id) DO UPDATE SET digest_state = excluded.digest_state, attempts = excluded.attempts,
        defer_reason = excluded.defer_reason, revision = excluded.revision, updated_at = excluded.updated_at
"""

# Sessions with no summary, or whose turns changed since it was made.
# Retired sessions (archived with --retire) are left out: they are out of every sweep.
PENDING_SUMMARIES = (
    "FROM sessions s LEFT JOIN session_summaries x USING (session_id) "
    "WHERE (x.session_id IS NULL OR x.input_revision <> s.input_revision) "
    "AND s.session_id NOT IN (SELECT session_id FROM retired_sessions)"
)

# Turns that still need a mini summary: none yet, and not archived (by us, or by the export unless
# un-archived here). The thought is not selected: it never reaches the mini summary prompt.
PENDING_MINI_SUMMARY_TURNS = """
    SELECT t.id, t.session_id, t.ts_ms, t.prompt, t.response, t.document
    FROM turns t
    LEFT JOIN mini_summaries m ON m.turn_id = t.id
    LEFT JOIN mini_summary_state st ON st.turn_id = t.id
    WHERE m.turn_id IS NULL AND st.archived_at IS NULL AND (t.archived_at IS NULL OR st.unarchived_at IS NOT NULL)
"""

TURN_COLUMNS = [
    "id", "session_id", "ts_ms", "type", "prompt", "thought", "response", "document", "document_rebuilt",
    "agent", "agent_identity", "model", "user_id", "amount_tool_calls", "tools_used", "archived_at",
    "archived_reason", "source_file", "source_line", "embedding",
]  # fmt: skip


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _load_turns(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> list[Turn]:
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


def _session_rows(turns: Iterable[Turn]) -> list[dict]:
    """The `sessions` rows of these turns' sessions."""
    by_session: dict[str, list[Turn]] = {}
    for turn in turns:
        by_session.setdefault(turn.session_id, []).append(turn)
    rows = []
    for sid, session_turns in by_session.items():
        ordered = canonical_order(session_turns)
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
    return rows


def _refresh_sessions(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> list[dict]:
    """Recompute these sessions' rows from their turns, then let a current imported summary stand
    as the summary of any whose turns it matches; returns the rows."""
    rows = _session_rows(_load_turns(con, session_ids))
    # A session all of whose turns moved to another one is gone.
    con.execute(
        "DELETE FROM sessions WHERE session_id IN (SELECT unnest(?::VARCHAR[]))",
        [sorted(set(session_ids) - {r["session_id"] for r in rows})],
    )
    if rows:
        con.register("batch", pd.DataFrame(rows))
        con.execute(_upsert_sql("sessions", list(rows[0]), ["session_id"]))
        con.unregister("batch")
        _adopt_imported_summaries(con, [r["session_id"] for r in rows])
    return rows


def _adopt_imported_summaries(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> None:
    cursor = con.execute(ADOPT_IMPORTED_SUMMARIES, [session_ids, _now()])
    names = [d[0] for d in cursor.description]
    _write_summary_graphs(con, [dict(zip(names, row)) for row in cursor.fetchall()])
    con.execute(MARK_IMPORTED_DIGESTS, [_now(), session_ids])


GRAPH_NODE_COLUMNS = ["session_id", "input_revision", "run_id", "created_at", "id", "label", "properties"]
GRAPH_EDGE_COLUMNS = ["session_id", "input_revision", "run_id", "created_at", "id", "source", "target", "type", "properties"]


def _insert_graph(
    con: duckdb.DuckDBPyConnection, parts: Iterable[tuple[dict, list[GraphNode], list[GraphEdge]]]
) -> None:
    """Insert graph rows: each part is the columns its rows share (session, revision, run, time)
    and its nodes and edges."""
    nodes, edges = [], []
    for common, part_nodes, part_edges in parts:
        nodes += [{**common, "id": n.id, "label": n.label, "properties": json.dumps(n.properties)} for n in part_nodes]
        edges += [
            {**common, "id": e.id, "source": e.source, "target": e.target, "type": e.type, "properties": json.dumps(e.properties)}
            for e in part_edges
        ]
    con.register("node_batch", pd.DataFrame(nodes, columns=GRAPH_NODE_COLUMNS))
    con.register("edge_batch", pd.DataFrame(edges, columns=GRAPH_EDGE_COLUMNS))
    con.execute(f"INSERT INTO graph_nodes ({', '.join(GRAPH_NODE_COLUMNS)}) SELECT * FROM node_batch")
    con.execute(f"INSERT INTO graph_edges ({', '.join(GRAPH_EDGE_COLUMNS)}) SELECT * FROM edge_batch")
    con.unregister("node_batch")
    con.unregister("edge_batch")


def _write_summary_graphs(con: duckdb.DuckDBPyConnection, summaries: list[dict]) -> None:
    """Each summary row's SESSION_SUMMARY node and summary-time edges, in place of the session's
    earlier ones, as the original writes them with the summary: every summary's provenance is in
    the graph, digested or not. The rest of a session's graph (its last digest) stays; the next
    digest rewrites it all, the summary rows built the same way from the same row."""
    if not summaries:
        return
    session_ids = [row["session_id"] for row in summaries]
    turns: dict[str, list[Turn]] = {}
    for turn in _load_turns(con, session_ids):
        turns.setdefault(turn.session_id, []).append(turn)
    scope = "session_id IN (SELECT unnest(?::VARCHAR[]))"
    summary_ids = [summary_node_id(sid) for sid in session_ids]
    con.execute(f"DELETE FROM graph_nodes WHERE {scope} AND id IN (SELECT unnest(?::VARCHAR[]))", [session_ids, summary_ids])
    con.execute(
        f"DELETE FROM graph_edges WHERE {scope} AND (source IN (SELECT unnest(?::VARCHAR[])) "
        "OR target IN (SELECT unnest(?::VARCHAR[])))",
        [session_ids, summary_ids, summary_ids],
    )
    now = _now()
    _insert_graph(
        con,
        (
            (
                {"session_id": row["session_id"], "input_revision": row["input_revision"], "run_id": row["run_id"], "created_at": now},
                *summary_graph(turns[row["session_id"]], row),
            )
            for row in summaries
            if row["session_id"] in turns
        ),
    )


def _imported_graph_scope(where: str, params: list, sessions: list[str] | None) -> tuple[str, list]:
    """The imported graph rows an archive of these sessions holds (None: all of them), as the CTEs
    `imported_nodes` and `imported_edges`, with their parameters: the nodes the sessions' graph or
    mini summaries name or whose `sessionId` is one of them, the edges the sessions' graph names or
    that touch such a node."""
    if sessions is None:
        return "WITH imported_nodes AS (FROM imported_graph_nodes), imported_edges AS (FROM imported_graph_edges)", []
    cte = f"""WITH node_set AS (
            SELECT id FROM graph_nodes {where} UNION SELECT turn_id FROM mini_summaries {where}
            UNION SELECT id FROM imported_graph_nodes WHERE (properties->>'sessionId') IN (SELECT unnest(?::VARCHAR[]))
        ),
        imported_nodes AS (FROM imported_graph_nodes WHERE id IN (SELECT id FROM node_set)),
        imported_edges AS (
            FROM imported_graph_edges WHERE id IN (SELECT id FROM graph_edges {where})
            OR source IN (SELECT id FROM node_set) OR target IN (SELECT id FROM node_set)
        )"""
    return cte, [*params, *params, sessions, *params]


def _upsert_sql(table: str, columns: list[str], key: list[str], keep: Iterable[str] = ()) -> str:
    """INSERT ... ON CONFLICT DO UPDATE of every column but the key and those in `keep`."""
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key and c not in keep)
    action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(columns)} FROM batch "
        f"ON CONFLICT ({', '.join(key)}) {action}"
    )


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _table_source(columns: list[tuple[str, str]]) -> str:
    """A `tables/*.jsonl` file as rows of its columns (JSON columns were written as their text, so
    their text comes back unchanged). The file's path is the query's parameter."""
    types = ", ".join(f"{_sql_text(c)}: {_sql_text('VARCHAR' if t == 'JSON' else t)}" for c, t in columns)
    return f"read_json(?, format='newline_delimited', columns={{{types}}}, maximum_object_size={MAX_LINE_BYTES})"


# A line of the memory-backup file, read whole: its embedding is taken as the text it is, verbatim
# (read_json would rewrite its numbers). A validated line holds no raw control character, so no
# \x01 to split on, and no other `"embedding": [` than its own: a JSON string's quotes are
# escaped and its metadata has only the turn's keys.
_LINE_SOURCE = (
    "read_csv(?, columns={'line': 'VARCHAR'}, delim='\\x01', quote='', escape='', header=false, new_line='\\n', "
    f"auto_detect=false, max_line_size={MAX_LINE_BYTES})"
)
_LINE_EMBEDDING = r'"embedding"\s*:\s*(\[[^\]]*\])'


def _memory_source(columns: list[tuple[str, str]]) -> str:
    """The memory-backup file as `turns` rows: its flat metadata mapped back to the columns, the
    embedding's JSON text as written (a bundle from older code has none: NULL)."""
    types = dict(columns)
    metadata = {key: types[column] for column, key in TURN_METADATA_KEYS.items()}
    structure = json.dumps({"id": "VARCHAR", "document": "VARCHAR", "metadata": metadata})
    fields = ", ".join(f'j.metadata."{key}" AS "{column}"' for column, key in TURN_METADATA_KEYS.items())
    embedding = (
        f"nullif(regexp_extract(line, {_sql_text(_LINE_EMBEDDING)}, 1), '')" if "embedding" in types else "NULL::VARCHAR"
    )
    return (
        f"(SELECT j.id AS id, {fields}, j.document AS document, embedding FROM "
        f"(SELECT json_transform(line, {_sql_text(structure)}) AS j, {embedding} AS embedding FROM {_LINE_SOURCE}))"
    )


@contextmanager
def _loading(bundle: Bundle, name: str) -> Iterator[None]:
    """DuckDB refusing a bundle file's rows (a constraint, a value it cannot take) refuses the bundle."""
    try:
        yield
    except duckdb.Error as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BundleError(bundle.path, [f"{name}: the store cannot take its rows: {reason}"]) from None


class StoreUnreadable(RuntimeError):
    def __init__(self, path: Path, cause: Exception):
        super().__init__(
            f"cannot open the store {path}: {cause}\n"
            "If the file is damaged, move it (and its .wal) aside and restore your latest bundle into a fresh "
            "store with `session-digest restore BUNDLE`; a bundle holds the turns, summaries, graph, attempts "
            "and friction (`session-digest archive` writes one)."
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
                # Another process holds the file: "Could not set lock on file ...: Conflicting lock ...".
                if "could not set lock" not in str(exc).lower():
                    raise StoreUnreadable(self.path, exc) from exc
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
            except duckdb.Error as exc:  # a damaged file: DuckDB raises its base error
                raise StoreUnreadable(self.path, exc) from exc
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
            for table, column in ADDED_COLUMNS:
                con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column}")

    # --- ingest -----------------------------------------------------------------------------

    def write_turns(self, rows: list[dict]) -> list[str]:
        """Upsert by id; returns the sessions that stored turns moved out of (same id, another
        session), which need their `sessions` rows refreshed too."""
        if not rows:
            return []
        # One row per id: DuckDB refuses to update the same row twice in one statement.
        batch = pd.DataFrame(list({r["id"]: r for r in rows}.values()), columns=TURN_COLUMNS)
        batch["ingested_at"] = _now()
        with self.transaction() as con:
            con.register("batch", batch)
            left = con.execute(
                "SELECT DISTINCT t.session_id FROM turns t JOIN batch b ON b.id = t.id WHERE t.session_id <> b.session_id"
            ).fetchall()
            con.execute(_upsert_sql("turns", TURN_COLUMNS + ["ingested_at"], ["id"], keep=["ingested_at"]))
            con.unregister("batch")
            moved_out = [r[0] for r in left]
            # In the same transaction: no turn is ever stored without its session's row up to date
            # (the sessions turns moved out of too), even when the ingest stops at a later line.
            _refresh_sessions(con, sorted(set(batch["session_id"]) | set(moved_out)))
        return moved_out

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
        """The export's summaries; each current one becomes its session's summary at once if the
        turns are already here, else when they arrive (`write_turns`)."""
        if not rows:
            return
        columns = IMPORTED_SUMMARY_COLUMNS
        batch = pd.DataFrame(list({r["session_id"]: r for r in rows}.values()), columns=columns)
        batch["imported_at"] = _now()
        with self.transaction() as con:
            con.register("batch", batch)
            con.execute(_upsert_sql("imported_summaries", columns + ["imported_at"], ["session_id"], keep=["imported_at"]))
            con.unregister("batch")
            _adopt_imported_summaries(con, batch["session_id"].tolist())

    # --- imported graph: ingest ---

    def write_imported_graph(self, nodes: list[dict], edges: list[dict]) -> None:
        """A graph-backup file's node and edge rows (`digest.ingest.parse_graph_row`), upserted by id:
        the later line wins, as for turns."""
        if not nodes and not edges:
            return
        with self.transaction() as con:
            for table, rows in (("imported_graph_nodes", nodes), ("imported_graph_edges", edges)):
                if not rows:
                    continue
                batch = pd.DataFrame(list({r["id"]: r for r in rows}.values()))
                batch["imported_at"] = _now()
                con.register("batch", batch)
                con.execute(_upsert_sql(table, list(batch.columns), ["id"]))
                con.unregister("batch")

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
        """Recompute the `sessions` rows of these sessions from their turns; returns the rows.

        A session left with no turns (they all moved to another session) loses its row, so it
        is not pending for ever."""
        ids = sorted(set(session_ids))
        if not ids:
            return []
        with self.transaction() as con:
            return _refresh_sessions(con, ids)

    # --- reads ------------------------------------------------------------------------------

    def session_rows(self, session_ids: Iterable[str]) -> list[dict]:
        """The stored `sessions` rows of these sessions (those that have one)."""
        with self.connect() as con:
            return self._records(
                con, "SELECT * FROM sessions WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [sorted(set(session_ids))]
            )

    def load_turns(self, session_ids: list[str]) -> list[Turn]:
        with self.connect() as con:
            return _load_turns(con, session_ids)

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
                   completion_tokens, duration_s, outcome, suspected_truncation, cached, error_text, run_id, created_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [
                    attempt.session_id, attempt.stage, attempt.tier, attempt.model, attempt.prompt_bytes,
                    attempt.tokens_estimate, attempt.prompt_tokens, attempt.completion_tokens, attempt.duration_s,
                    attempt.outcome, attempt.suspected_truncation, attempt.cached, attempt.error_text, run_id, _now(),
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
            "origin": "generated",
        }
        columns = list(row)
        placeholders = ", ".join("?" for _ in columns)
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c != "session_id")
        with self.transaction() as con:
            con.execute(
                f"INSERT INTO session_summaries ({', '.join(columns)}) VALUES ({placeholders}) "
                f"ON CONFLICT (session_id) DO UPDATE SET {updates}",
                list(row.values()),
            )
            _write_summary_graphs(con, [row])

    # --- sweeps -------------------------------------------------------------------------------

    def summary_queue(self, now_ms: int, idle_window_s: float, newest: int, oldest: int) -> dict:
        """The pending sessions a sweep may take, the newest `newest` and the oldest `oldest`
        after the churn gate and failure backoff, with how many each gate held back."""
        idle_ms = int(idle_window_s * 1000)
        gates = f"""
            SELECT s.*,
                   coalesce({now_ms} - s.last_activity_ms BETWEEN 0 AND {idle_ms - 1}, false) AS active,
                   coalesce(st.backoff_until_ms > {now_ms} AND st.failed_revision = s.input_revision, false)
                       AS backing_off
            FROM sessions s
            LEFT JOIN session_summaries x USING (session_id)
            LEFT JOIN summary_state st USING (session_id)
            WHERE (x.session_id IS NULL OR x.input_revision <> s.input_revision)
              AND s.session_id NOT IN (SELECT session_id FROM retired_sessions)
        """
        with self.connect() as con:
            counts = con.execute(
                f"SELECT count(*), count(*) FILTER (active), count(*) FILTER (backing_off AND NOT active) FROM ({gates})"
            ).fetchone()
            rows = con.execute(
                f"""
                WITH eligible AS (SELECT * FROM ({gates}) WHERE NOT active AND NOT backing_off),
                picked AS (
                    (SELECT session_id FROM eligible ORDER BY last_activity_ms DESC NULLS LAST, session_id LIMIT {int(newest)})
                    UNION
                    (SELECT session_id FROM eligible ORDER BY last_activity_ms ASC NULLS FIRST, session_id LIMIT {int(oldest)})
                )
                SELECT s.partition_key, s.session_id, s.last_activity_ms, s.turn_count, s.raw_bytes,
                       sum(least(coalesce(length(m.text), length(t.document)), {FALLBACK_CHARS}))::BIGINT,
                       count(m.turn_id)
                FROM picked JOIN sessions s USING (session_id)
                JOIN turns t ON t.session_id = s.session_id
                LEFT JOIN mini_summaries m ON m.turn_id = t.id
                GROUP BY ALL
                ORDER BY s.last_activity_ms DESC NULLS LAST, s.session_id
                """
            ).fetchall()
        return {
            "pending": counts[0],
            "active": counts[1],
            "backing_off": counts[2],
            "candidates": [Candidate(*row) for row in rows],
        }

    def seconds_per_token(self, model: str, recent: int = 50) -> float | None:
        """Measured model seconds per estimated prompt token over the model's recent good calls."""
        with self.connect() as con:
            row = con.execute(
                """SELECT sum(duration_s) / nullif(sum(tokens_estimate), 0) FROM (
                       SELECT duration_s, tokens_estimate FROM attempts
                       -- duration 0: a reply replayed from the response cache, which says nothing of the model's speed
                       WHERE outcome = 'ok' AND model = ? AND stage = 'session-summary' AND NOT cached
                       ORDER BY attempt_id DESC LIMIT ?)""",
                [model, recent],
            ).fetchone()
        return row[0]

    def record_summary_failure(
        self, session_id: str, revision: str, symptom: str, now_ms: int, backoff_s
    ) -> int:
        """Count a failure (from 1 again when the turns changed) and back the session off;
        returns the failure count. `backoff_s(failures)` gives the wait."""
        with self.transaction() as con:
            row = con.execute(
                "SELECT failures, failed_revision FROM summary_state WHERE session_id = ?", [session_id]
            ).fetchone()
            failures = row[0] + 1 if row and row[1] == revision else 1
            con.execute(
                """INSERT OR REPLACE INTO summary_state VALUES (?, ?, ?, ?, ?, ?)""",
                [session_id, failures, symptom, revision, now_ms + int(backoff_s(failures) * 1000), _now()],
            )
        return failures

    def clear_summary_failures(self, session_id: str) -> None:
        with self.connect() as con:
            con.execute("DELETE FROM summary_state WHERE session_id = ?", [session_id])

    def claim_summary_lease(self, session_id: str, run_id: str, now_ms: int, ttl_s: float) -> str | None:
        """Claim the session for this run; returns None when granted, else the holding run's id.
        An expired lease (a crashed run) is taken over, and every other expired one is dropped."""
        with self.transaction() as con:
            con.execute(
                "DELETE FROM summary_leases WHERE expires_at_ms <= ? OR (session_id = ? AND run_id = ?)",
                [now_ms, session_id, run_id],
            )
            holder = con.execute("SELECT run_id FROM summary_leases WHERE session_id = ?", [session_id]).fetchone()
            if holder:
                return holder[0]
            con.execute("INSERT INTO summary_leases VALUES (?, ?, ?)", [session_id, run_id, now_ms + int(ttl_s * 1000)])
        return None

    def release_summary_lease(self, session_id: str, run_id: str) -> None:
        with self.connect() as con:
            con.execute("DELETE FROM summary_leases WHERE session_id = ? AND run_id = ?", [session_id, run_id])

    def release_leases_of_runs(self, run_ids: list[str]) -> None:
        """Every lease these (dead) runs hold."""
        with self.connect() as con:
            con.execute("DELETE FROM summary_leases WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [run_ids])

    def summary_standing(self, session_id: str) -> dict | None:
        """What a summary run reads under the lease before its model work (and a sweep just before
        the run): the session's current revision, its summary's, whether it is retired, its failure
        backoff. None: no such session."""
        with self.connect() as con:
            cursor = con.execute(
                """SELECT s.input_revision, x.input_revision AS summary_revision, x.run_id AS summary_run_id,
                          r.archive_id AS retired_by, st.failures, st.failed_revision, st.backoff_until_ms
                   FROM sessions s
                   LEFT JOIN session_summaries x USING (session_id)
                   LEFT JOIN retired_sessions r USING (session_id)
                   LEFT JOIN summary_state st USING (session_id)
                   WHERE s.session_id = ?""",
                [session_id],
            )
            row = cursor.fetchone()
            return dict(zip([d[0] for d in cursor.description], row)) if row else None

    # --- mini summaries ---------------------------------------------------------------------

    def pending_mini_summary_turns(self, session_id: str) -> list[PendingTurn]:
        with self.connect() as con:
            rows = con.execute(
                f"SELECT * FROM ({PENDING_MINI_SUMMARY_TURNS}) WHERE session_id = ?", [session_id]
            ).fetchall()
        return [PendingTurn(*row) for row in rows]

    def mini_summary_pending(self, turn_id: str) -> bool:
        with self.connect() as con:
            row = con.execute(f"SELECT count(*) FROM ({PENDING_MINI_SUMMARY_TURNS}) WHERE id = ?", [turn_id]).fetchone()
        return row[0] > 0

    def save_generated_mini_summary(self, turn_id: str, session_id: str, text: str, model: str) -> None:
        """Never over an existing one: an imported mini summary is the source system's word."""
        with self.connect() as con:
            con.execute(
                """INSERT INTO mini_summaries (turn_id, session_id, text, origin, model, created_at)
                   VALUES (?, ?, ?, 'generated', ?, ?) ON CONFLICT (turn_id) DO NOTHING""",
                [turn_id, session_id, text, model, _now()],
            )

    def record_mini_summary_failure(self, turn_id: str, session_id: str, cause: str, max_attempts: int) -> bool:
        """Count a failed attempt; at `max_attempts` the turn is archived. True if it was."""
        with self.transaction() as con:
            row = con.execute("SELECT attempts FROM mini_summary_state WHERE turn_id = ?", [turn_id]).fetchone()
            attempts = (row[0] if row else 0) + 1
            archived = attempts >= max_attempts
            now = _now()
            con.execute(
                """INSERT INTO mini_summary_state (turn_id, session_id, attempts, last_cause, archived_at,
                       archived_reason, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (turn_id) DO UPDATE SET attempts = excluded.attempts, last_cause = excluded.last_cause,
                       archived_at = excluded.archived_at, archived_reason = excluded.archived_reason,
                       updated_at = excluded.updated_at""",
                [turn_id, session_id, attempts, cause, now if archived else None,
                 ARCHIVE_GENERATION_TIMEOUT if archived else None, now],
            )  # fmt: skip
        return archived

    def archive_turn(self, turn_id: str, session_id: str, reason: str) -> None:
        """Out of mini summary generation; the turn keeps its text and stays in the raw summary input."""
        now = _now()
        with self.connect() as con:
            con.execute(
                """INSERT INTO mini_summary_state (turn_id, session_id, attempts, archived_at, archived_reason, updated_at)
                   VALUES (?, ?, 0, ?, ?, ?)
                   ON CONFLICT (turn_id) DO UPDATE SET archived_at = excluded.archived_at,
                       archived_reason = excluded.archived_reason, updated_at = excluded.updated_at""",
                [turn_id, session_id, now, reason, now],
            )

    def unarchive_turns(self, turn_ids: list[str] | None = None, session_id: str | None = None) -> list[str]:
        """Give archived turns (ours or the export's) their attempts back; returns their ids."""
        if not turn_ids and not session_id:
            raise ValueError("name turn ids or a session")
        now = _now()
        with self.transaction() as con:
            ids = [
                r[0]
                for r in con.execute(
                    """SELECT t.id FROM turns t LEFT JOIN mini_summary_state st ON st.turn_id = t.id
                       WHERE (t.session_id = ? OR t.id IN (SELECT unnest(?::VARCHAR[])))
                         AND (st.archived_at IS NOT NULL OR (t.archived_at IS NOT NULL AND st.unarchived_at IS NULL))
                       ORDER BY t.id""",
                    [session_id, turn_ids or []],
                ).fetchall()
            ]
            con.execute(
                """INSERT INTO mini_summary_state (turn_id, session_id, attempts, archived_at, archived_reason,
                       unarchived_at, updated_at)
                   SELECT id, session_id, 0, NULL, NULL, ?, ? FROM turns WHERE id IN (SELECT unnest(?::VARCHAR[]))
                   ON CONFLICT (turn_id) DO UPDATE SET attempts = 0, archived_at = NULL, archived_reason = NULL,
                       unarchived_at = excluded.unarchived_at, updated_at = excluded.updated_at""",
                [now, now, ids],
            )
        return ids

    def record_backfill_run(
        self, session_id: str, attempted: int, generated: int, backoff_until_ms: int | None, run_id: str | None
    ) -> None:
        with self.connect() as con:
            con.execute(
                "INSERT OR REPLACE INTO backfill_state VALUES (?, ?, ?, ?, ?, ?)",
                [session_id, backoff_until_ms, attempted, generated, run_id, _now()],
            )

    def mini_summary_backoff_until_ms(self, session_id: str) -> int | None:
        with self.connect() as con:
            row = con.execute("SELECT backoff_until_ms FROM backfill_state WHERE session_id = ?", [session_id]).fetchone()
        return row[0] if row else None

    def pending_mini_summary_keys(
        self, limits: Limits, priority: str, now_ms: int, limit: int | None = None
    ) -> list[str]:
        """Sessions with turns that need a mini summary and no backoff in force, in priority order."""
        with self.connect() as con:
            rows = con.execute(
                f"""SELECT DISTINCT s.partition_key, s.session_id, s.raw_bytes, s.turn_count, s.last_activity_ms
                    FROM ({PENDING_MINI_SUMMARY_TURNS}) p
                    JOIN sessions s ON s.session_id = p.session_id
                    LEFT JOIN backfill_state b ON b.session_id = p.session_id
                    WHERE (b.backoff_until_ms IS NULL OR b.backoff_until_ms <= ?)
                      AND p.session_id NOT IN (SELECT session_id FROM retired_sessions)""",
                [now_ms],
            ).fetchall()
        ordered = order_sessions([PendingSession(*row) for row in rows], limits, priority)
        return [s.partition_key for s in ordered[:limit]]

    def mini_summary_counts(self, session_id: str) -> dict:
        """Coverage of one session: its turns, those with a mini summary by origin, archived, pending."""
        with self.connect() as con:
            row = con.execute(
                f"""SELECT count(*), count(m.turn_id), count(*) FILTER (m.origin = 'imported'),
                           count(*) FILTER (m.origin = 'generated'), count(*) FILTER (st.archived_at IS NOT NULL),
                           (SELECT count(*) FROM ({PENDING_MINI_SUMMARY_TURNS}) WHERE session_id = ?)
                    FROM turns t
                    LEFT JOIN mini_summaries m ON m.turn_id = t.id
                    LEFT JOIN mini_summary_state st ON st.turn_id = t.id
                    WHERE t.session_id = ?""",
                [session_id, session_id],
            ).fetchone()
        keys = ("turns", "with_mini_summary", "imported", "generated", "archived", "pending")
        return dict(zip(keys, row))

    def status(self) -> dict:
        """Counts for `session-digest status`."""
        with self.connect() as con:

            def scalar(sql: str) -> int:
                return con.execute(sql).fetchone()[0]

            tiers = dict(con.execute("SELECT source_tier, count(*) FROM session_summaries GROUP BY 1 ORDER BY 1").fetchall())
            origins = dict(con.execute("SELECT origin, count(*) FROM session_summaries GROUP BY 1 ORDER BY 1").fetchall())
            friction = dict(con.execute("SELECT symptom, count(*) FROM friction_events GROUP BY 1 ORDER BY 1").fetchall())
            return {
                "database": str(self.path),
                "sessions": scalar("SELECT count(*) FROM sessions"),
                "turns": scalar("SELECT count(*) FROM turns"),
                "mini_summaries": scalar("SELECT count(*) FROM mini_summaries"),
                "summaries": scalar("SELECT count(*) FROM session_summaries"),
                "summaries_by_source_tier": tiers,
                # imported: an export's summary, current for the turns, so no model call was owed.
                "summaries_by_origin": origins,
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

    # --- friction report ---

    def _records(self, con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict]:
        """Rows as dicts of plain Python values (a NULL stays None, not pandas' NaN)."""
        cursor = con.execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def friction_report_rows(self) -> dict:
        """What the friction report reads, in one connection: events, attempts, summaries, mini-summary
        coverage and undigestible sessions."""
        with self.connect() as con:
            rows = {
                "events": self._records(
                    con,
                    "SELECT occurred_at, asset_ref, consumer, model, symptom, suggestion_kind, input_bytes, "
                    "input_tokens_estimate, note, error_text FROM friction_events ORDER BY occurred_at",
                ),
                "attempts": self._records(
                    con,
                    "SELECT session_id, stage, tier, model, prompt_bytes, tokens_estimate, prompt_tokens, "
                    "completion_tokens, duration_s, outcome, suspected_truncation, created_at FROM attempts "
                    "WHERE NOT cached",  # a replay from the response cache is no model call
                ),
                "summaries": self._records(
                    con,
                    "SELECT session_id, source_tier, degraded, route_reason FROM session_summaries",
                ),
                "mini_coverage": self._records(
                    con,
                    "SELECT count(*) AS turns, count(*) FILTER (m.origin = 'imported') AS imported, "
                    "count(*) FILTER (m.origin = 'generated') AS generated "
                    "FROM turns t LEFT JOIN mini_summaries m ON m.turn_id = t.id",
                )[0],
            }
            # Undigestible at the session's current turns: new turns make a session digestible again.
            rows["undigestible"] = self._records(
                con,
                "SELECT d.session_id, d.defer_reason AS reason, d.attempts, d.updated_at FROM digest_state d "
                "JOIN sessions s ON s.session_id = d.session_id AND s.input_revision = d.revision "
                "WHERE d.digest_state = 'undigestible' ORDER BY d.updated_at DESC",
            )
        return rows

    def summary_rows(self) -> list[dict]:
        """Every stored summary, every column: what the asset checks validate."""
        with self.connect() as con:
            return self._records(con, "SELECT * FROM session_summaries ORDER BY session_id")

    def degraded_graph_sessions(self) -> list[str]:
        """Sessions with a graph whose summary is degraded: where summary text could leak into it."""
        with self.connect() as con:
            rows = con.execute(
                "SELECT DISTINCT g.session_id FROM graph_nodes g JOIN session_summaries s USING (session_id) "
                "WHERE s.degraded ORDER BY 1"
            ).fetchall()
        return [r[0] for r in rows]

    def graph_evidence(self, session_id: str) -> dict:
        """One session's raw turn text and its graph's nodes and edges (properties parsed)."""
        with self.connect() as con:
            documents = con.execute("SELECT document FROM turns WHERE session_id = ?", [session_id]).fetchall()
            nodes = con.execute(
                "SELECT id, label, properties FROM graph_nodes WHERE session_id = ?", [session_id]
            ).fetchall()
            edges = con.execute(
                "SELECT id, type, properties FROM graph_edges WHERE session_id = ?", [session_id]
            ).fetchall()
        return {
            "raw_text": "\n".join(d[0] for d in documents),
            "nodes": [{"id": i, "label": label, "properties": json.loads(props)} for i, label, props in nodes],
            "edges": [{"id": i, "type": kind, "properties": json.loads(props)} for i, kind, props in edges],
        }

    # --- archive and cache ---

    def cached_reply(self, key: str, session: tuple[str, str] | None = None) -> ChatReply | None:
        """The stored reply for this request; with `session`, only one staged by that session at
        that input revision. Replayed, it took no model time: duration 0."""
        sql = "SELECT text, prompt_tokens, completion_tokens, finish_reason FROM response_cache WHERE request_key = ?"
        params = [key]
        if session is not None:
            sql += " AND session_id = ? AND input_revision = ?"
            params += list(session)
        with self.connect() as con:
            row = con.execute(sql, params).fetchone()
        if row is None:
            return None
        text, prompt_tokens, completion_tokens, finish_reason = row
        return ChatReply(text, prompt_tokens, completion_tokens, 0.0, finish_reason, cached=True)

    def save_reply(self, key: str, model: str, reply: ChatReply, session: tuple[str, str] | None = None) -> None:
        session_id, revision = session or (None, None)
        with self.connect() as con:
            con.execute(
                "INSERT OR REPLACE INTO response_cache VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [key, model, reply.text, reply.prompt_tokens, reply.completion_tokens, reply.duration_s,
                 reply.finish_reason, session_id, revision, _now()],
            )  # fmt: skip

    def drop_staged_replies(self, session_id: str) -> None:
        """With reuse off, a session's staged reply goes once its summary is written."""
        with self.connect() as con:
            con.execute("DELETE FROM response_cache WHERE session_id = ?", [session_id])

    def clear_response_cache(self) -> int:
        with self.connect() as con:
            return con.execute("DELETE FROM response_cache").fetchone()[0]

    def staged_summary_keys(self) -> list[str]:
        """Pending sessions with a reply staged at their current turns: a run died between the model
        call and the summary write. Their rerun finishes without a model call."""
        with self.connect() as con:
            rows = con.execute(
                f"""SELECT DISTINCT s.partition_key {PENDING_SUMMARIES}
                    AND s.session_id IN (SELECT c.session_id FROM response_cache c
                                         WHERE c.input_revision = s.input_revision)
                    ORDER BY 1"""
            ).fetchall()
        return [r[0] for r in rows]

    def summaries_where(self, column: str, values: list[str]) -> list[dict]:
        """Summary rows by `session_id` or `run_id`."""
        if column not in ("session_id", "run_id"):
            raise ValueError(f"summaries are not looked up by {column!r}")
        with self.connect() as con:
            cursor = con.execute(
                f"SELECT * FROM session_summaries WHERE {column} IN (SELECT unnest(?::VARCHAR[])) ORDER BY session_id",
                [values],
            )
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row)) for row in cursor.fetchall()]

    def resolve_sessions(self, refs: list[str]) -> list[str]:
        """Session ids for session ids or partition keys; ValueError naming any that is neither."""
        with self.connect() as con:
            rows = con.execute(
                "SELECT session_id, partition_key FROM sessions "
                "WHERE session_id IN (SELECT unnest(?::VARCHAR[])) OR partition_key IN (SELECT unnest(?::VARCHAR[]))",
                [refs, refs],
            ).fetchall()
        by_ref = {ref: sid for sid, key in rows for ref in (sid, key)}
        unknown = [ref for ref in refs if ref not in by_ref]
        if unknown:
            raise ValueError(f"no such session: {', '.join(unknown)}")
        return sorted({by_ref[ref] for ref in refs})

    def _table_columns(self, con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str]]]:
        """Every table with its (column, type) in order, from the catalog: tables added later are
        archived and restored too, with no list to keep up to date."""
        tables: dict[str, list[tuple[str, str]]] = {}
        for table, column, kind in con.execute(
            """SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c
               JOIN information_schema.tables t USING (table_schema, table_name)
               WHERE t.table_type = 'BASE TABLE' AND t.table_schema = current_schema()
               ORDER BY c.table_name, c.ordinal_position"""
        ).fetchall():
            tables.setdefault(table, []).append((column, kind))
        return tables

    def _archive_tables(self, con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str]]]:
        return {t: columns for t, columns in self._table_columns(con).items() if t not in NOT_ARCHIVED}

    def _scope(self, columns: list[str], table: str, sessions: list[str] | None) -> tuple[str, list] | None:
        """The WHERE clause that keeps these sessions' rows; None if the table has no session column
        (its rows belong to the whole store, so only a whole-store archive holds them)."""
        if sessions is None:
            return "", []
        column = SESSION_COLUMN.get(table, "session_id")
        if column not in columns:
            return None
        return f'WHERE "{column}" IN (SELECT unnest(?::VARCHAR[]))', [sessions]

    def _rows(self, con: duckdb.DuckDBPyConnection, sql: str, params: list) -> Iterator[dict]:
        """A query's rows as dicts, fetched in batches: an archive never holds a table in memory."""
        cursor = con.execute(sql, params)
        names = [d[0] for d in cursor.description]
        while batch := cursor.fetchmany(EXPORT_BATCH_ROWS):
            for row in batch:
                yield dict(zip(names, row))

    def _graph_lines(self, con: duckdb.DuckDBPyConnection, sessions: list[str] | None) -> Iterator[dict]:
        """Node lines, then edge lines, merged per id as `export-graph` does (imported rows under
        the sessions' own, oldest digest first), with each turn's mini summary on its AGENT_MEMORY
        node: ours win over the graph's copy."""
        where, params = self._scope(["session_id"], "graph_nodes", sessions)
        imported, imported_params = _imported_graph_scope(where, params, sessions)
        nodes = f"""{imported}
            SELECT id, label, properties::VARCHAR AS properties, session_id, NULL AS text, 1 AS rank, created_at,
                   false AS imported
            FROM graph_nodes {where}
            UNION ALL
            SELECT id, label, properties::VARCHAR, NULL, NULL, 0, imported_at, true FROM imported_nodes
            UNION ALL
            SELECT turn_id, 'AGENT_MEMORY', NULL, session_id, text, 2, NULL, false FROM mini_summaries {where}
            ORDER BY id, rank, created_at, session_id"""
        node_rows = (
            mini_summary_node_row({"turn_id": r["id"], "session_id": r["session_id"], "text": r["text"]})
            if r["rank"] == 2
            else r
            for r in self._rows(con, nodes, imported_params + params * 2)
        )
        yield from map(node_line, merge_stored_nodes(node_rows))
        edges = f"""{imported}
            SELECT id, source, target, type, properties::VARCHAR AS properties, 1 AS rank, created_at, session_id,
                   false AS imported
            FROM graph_edges {where}
            UNION ALL
            SELECT id, source, target, type, properties::VARCHAR, 0, imported_at, NULL, true FROM imported_edges
            ORDER BY id, rank, created_at, session_id"""
        yield from map(edge_line, merge_stored_edges(self._rows(con, edges, imported_params + params)))

    def write_archive(self, out_dir: Path, sessions: list[str] | None = None, retire: bool = False) -> dict:
        """Write a bundle of these sessions (None: the whole store) into `out_dir` and record it.
        `retire`: the sessions then leave the live sweeps (tombstones), once the bundle is verified."""
        if retire and not sessions:
            raise ValueError("retiring needs the sessions to retire")
        sessions = sorted(set(sessions)) if sessions is not None else None
        if sessions:
            # A bundle holds a session by its turns: a restore refuses a manifest naming one it has none of.
            with self.connect() as con:
                where, params = self._scope(["session_id"], "turns", sessions)
                found = {r[0] for r in con.execute(f"SELECT DISTINCT session_id FROM turns {where}", params).fetchall()}
            if missing := [s for s in sessions if s not in found]:
                raise ValueError(f"no turns for session {', '.join(missing)}: nothing of it to archive")
        created_at = _now()
        stamp = archive_stamp(created_at)
        names = bundle_file_names(stamp)
        final = Path(out_dir) / f"session-digest-archive-{stamp}"
        # Written under another name and renamed once complete: a bundle folder is never half there.
        partial = final.with_name(f".{final.name}.partial")
        partial.mkdir(parents=True)
        files: list[BundleFile] = []

        def write(name: str, kind: str, table: str | None, lines: Iterable[dict | str], columns=None, vectors=None) -> None:
            writer = JsonlWriter(partial / name)
            for line in lines:
                writer.write(line)
            entry = vectors.entry() if vectors is not None else None
            files.append(BundleFile(name, kind, table, writer.rows, writer.close(), columns, entry))

        def vector_lines(rows: Iterable[dict], shape, embedding_of, vectors: VectorCount) -> Iterator[str]:
            for r in rows:
                line = shape(r)
                embedding = embedding_of(r)
                vectors.add(embedding is not None, line["metadata"]["sessionId"])
                yield vector_line(line, embedding)

        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")  # one snapshot for every file
            where, params = self._scope(["session_id"], "turns", sessions)
            turn_types = dict(self._table_columns(con)["turns"])
            turns = self._rows(con, f"SELECT * FROM turns {where} ORDER BY id", params)
            counted = VectorCount()
            lines = vector_lines(turns, memory_row, lambda r: r["embedding"], counted)
            write(names["memory"], "memory", "turns", lines, [(c, turn_types[c]) for c in ARCHIVED_TURN_COLUMNS], counted)
            # What the original's gates read beside the row: the digest state, and an imported
            # summary's own metadata and vector (kept while it stands as the session's summary).
            summaries = self._rows(
                con,
                f"""SELECT x.*, s.input_revision AS session_revision, d.digest_state, d.revision AS digest_revision,
                           i.metadata::VARCHAR AS imported_metadata, i.embedding AS imported_embedding
                    FROM (SELECT * FROM session_summaries {where}) x
                    LEFT JOIN sessions s USING (session_id)
                    LEFT JOIN digest_state d USING (session_id)
                    LEFT JOIN imported_summaries i ON i.session_id = x.session_id AND x.origin = 'imported'
                        AND i.summary = x.summary AND coalesce(i.input_revision, x.input_revision) = x.input_revision
                    ORDER BY x.session_id""",
                params,
            )
            counted = VectorCount()
            lines = vector_lines(summaries, summary_backup_row, lambda r: r["imported_embedding"], counted)
            write(names["summaries"], "summaries", None, lines, vectors=counted)
            write(names["graph"], "graph", None, self._graph_lines(con, sessions))
            for table, columns in self._archive_tables(con).items():
                scope = self._scope([c for c, _ in columns], table, sessions)
                if scope is not None:
                    rows = self._rows(con, f'SELECT * FROM "{table}" {scope[0]} ORDER BY ALL', scope[1])
                    write(table_file_name(table), "table", table, ({k: jsonable(v) for k, v in r.items()} for r in rows), columns)
            con.execute("ROLLBACK")
        write_manifest(partial, build_manifest(stamp, created_at, sessions, SCHEMA_VERSION, files))
        partial.rename(final)
        if retire:
            validate_bundle(final)  # never retire sessions whose bundle did not land intact
        manifest_sha256 = sha256_file(final / MANIFEST)
        with self.transaction() as con:
            con.execute(
                "INSERT INTO archives VALUES (?, ?, ?, ?, ?, ?)",
                [stamp, str(final), created_at, sessions, manifest_sha256, retire],
            )
            if retire:
                con.execute(
                    "INSERT OR REPLACE INTO retired_sessions SELECT unnest(?::VARCHAR[]), ?, ?",
                    [sessions, stamp, created_at],
                )
        return {
            "archive_id": stamp,
            "path": str(final),
            "sessions": len(sessions) if sessions is not None else "all",
            "rows": {f.name: f.rows for f in files},
            "manifest_sha256": manifest_sha256,
            "retired": sessions if retire else [],
        }

    def restore_archive(self, bundle: Bundle, mode: str) -> dict:
        """Restore a validated bundle in one transaction: a failure anywhere changes nothing.

        `merge` adds what the store lacks (by key; ledger rows by content, with new ids). `replace`
        empties the bundle's tables of the bundle's sessions (of every row, for a whole-store bundle)
        and loads them from it; tables the bundle does not hold are not touched. Then the sessions'
        rows are recomputed from their turns, so the pending query sees which turns differ from
        what was summarized. Whatever the store refuses (a table, a type, a key twice, a constraint)
        is a BundleError. Returns rows loaded per table and the sessions' `RestoreOutcome`."""
        if mode not in RESTORE_MODES:
            raise ValueError(f"restore mode {mode!r} is not one of {', '.join(RESTORE_MODES)}")
        if bundle.manifest["schema_version"] > SCHEMA_VERSION:
            raise BundleError(bundle.path, [f"schema version {bundle.manifest['schema_version']} is newer than {SCHEMA_VERSION}"])
        memory = bundle.file("memory")
        # DuckDB reads the bundle's files in place: no copy of the turns is left behind by a kill.
        sources = [(memory, _memory_source(memory.columns))] + [(f, _table_source(f.columns)) for f in bundle.tables()]
        with self.transaction() as con:
            live = self._table_columns(con)
            problems = self._recorded_manifest_problems(con, bundle)
            problems += [p for f, _ in sources for p in self._unfit(f, live)]
            lacking = sorted(set(self._archive_tables(con)) - {f.table for f in bundle.tables()})
            if mode == "replace" and bundle.sessions is None and lacking:
                # It would empty the whole store: only a bundle of the whole store may.
                problems.append(
                    f"{MANIFEST}: a whole-store bundle holds every table, this one lacks {', '.join(lacking)} "
                    "(a bundle of some sessions relabelled, or from older code: `--mode merge` adds it)"
                )
            if problems:
                raise BundleError(bundle.path, problems)
            for f, source in sources:
                with _loading(bundle, f.name):
                    problems += self._duplicate_keys(con, f, source, bundle.path / f.name)
            if problems:
                raise BundleError(bundle.path, problems)
            before = self._session_states(con, bundle.sessions)
            rows = {}
            for f, source in sources:
                with _loading(bundle, f.name):
                    rows[f.table] = self._load_table(con, f.table, source, bundle.path / f.name, f.columns, mode, bundle.sessions)
            with _loading(bundle, memory.name):  # its sessions' rows, recomputed from its turns
                self._rebuild_sessions(con, mode, bundle.sessions, sorted(bundle.turn_sessions))
            after = self._session_states(con, bundle.sessions)
        return {"rows": rows, "outcome": restore_outcome(before, after)}

    def _recorded_manifest_problems(self, con: duckdb.DuckDBPyConnection, bundle: Bundle) -> list[str]:
        """A bundle this store wrote must have the manifest it recorded: that catches an edit even
        with every checksum recomputed (which a bundle from elsewhere cannot be checked for)."""
        row = con.execute("SELECT manifest_sha256, path FROM archives WHERE archive_id = ?", [bundle.archive_id]).fetchone()
        if row is None or row[0] == bundle.manifest_sha256:
            return []
        return [f"{MANIFEST}: differs from the one this store wrote for archive {bundle.archive_id} (to {row[1]}): edited since"]

    def _unfit(self, f: BundleFile, live: dict) -> list[str]:
        """Why a bundle file cannot go into this store's table, if it cannot."""
        if f.kind == "table" and f.table in NOT_ARCHIVED:
            return [f"{f.name}: table {f.table} is never restored from a table file"]
        if f.table not in live:
            return [f"{f.name}: this store has no table {f.table} (a bundle from newer code?)"]
        here = dict(live[f.table])
        missing = [c for c, _ in f.columns if c not in here]
        if missing:
            return [f"{f.name}: table {f.table} has no column {', '.join(missing)} here (a bundle from newer code?)"]
        return [f"{f.name}: column {c} is {t} in the bundle, {here[c]} here" for c, t in f.columns if here[c] != t]

    def _duplicate_keys(self, con: duckdb.DuckDBPyConnection, f: BundleFile, source: str, path: Path) -> list[str]:
        """A key on two rows of a file: a replace would fail on it, a merge keep either row."""
        names = {c for c, _ in f.columns}
        problems = []
        for (key,) in con.execute(
            "SELECT constraint_column_names FROM duckdb_constraints() WHERE table_name = ? AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')",
            [f.table],
        ).fetchall():
            if set(key) <= names:
                cols = ", ".join(f'"{c}"' for c in key)
                row = con.execute(f"SELECT {cols}, count(*) FROM {source} GROUP BY ALL HAVING count(*) > 1 LIMIT 1", [str(path)]).fetchone()
                if row is not None:
                    problems.append(f"{f.name}: {row[-1]} rows share the key ({', '.join(key)}) = {', '.join(map(repr, row[:-1]))}")
        return problems

    def _load_table(
        self, con: duckdb.DuckDBPyConnection, table: str, source: str, path: Path, columns: list, mode: str, sessions: list[str] | None
    ) -> int:
        """Load one bundle file (`source`, reading `path`) into its table; returns the rows inserted."""
        names = [c for c, _ in columns]
        serial = self._serial_column(con, table)

        def quoted(cols: list[str]) -> str:
            return ", ".join(f'"{c}"' for c in cols)

        if mode == "replace":
            where, params = self._scope(names, table, sessions)
            con.execute(f'DELETE FROM "{table}" {where}', params)
            # A whole table keeps its ids; some sessions' ledger rows take new ones (the bundle's may
            # belong to other sessions here).
            keep_ids = sessions is None
            cols = [c for c in names if keep_ids or c != (serial and serial[0])]
            inserted = con.execute(f'INSERT INTO "{table}" ({quoted(cols)}) SELECT {quoted(cols)} FROM {source}', [str(path)])
            count = inserted.fetchone()[0]
            if keep_ids and serial:
                self._advance_sequence(con, table, *serial)
            return count
        cols = [c for c in names if c != (serial and serial[0])]
        has_key = con.execute(
            "SELECT count(*) FROM duckdb_constraints() WHERE table_name = ? AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')",
            [table],
        ).fetchone()[0]
        ignore = "OR IGNORE " if has_key else ""
        inserted = con.execute(
            f'INSERT {ignore}INTO "{table}" ({quoted(cols)}) '
            f'SELECT {quoted(cols)} FROM {source} EXCEPT SELECT {quoted(cols)} FROM "{table}"',
            [str(path)],
        )
        return inserted.fetchone()[0]

    def _serial_column(self, con: duckdb.DuckDBPyConnection, table: str) -> tuple[str, str] | None:
        """(column, sequence) of a column numbered by a sequence (attempt ids, friction ids)."""
        row = con.execute(
            "SELECT column_name, column_default FROM information_schema.columns "
            "WHERE table_name = ? AND column_default LIKE 'nextval(%'",
            [table],
        ).fetchone()
        if row is None:
            return None
        return row[0], re.search(r"nextval\('([^']+)'", row[1]).group(1)

    def _advance_sequence(self, con: duckdb.DuckDBPyConnection, table: str, column: str, sequence: str) -> None:
        """Past the largest restored id, so the next row does not collide (DuckDB cannot set a sequence)."""
        top = con.execute(f'SELECT max("{column}") FROM "{table}"').fetchone()[0]
        if top is None:
            return
        following = con.execute(f"SELECT nextval('{sequence}')").fetchone()[0]
        if following < top:
            con.execute(f"SELECT max(nextval('{sequence}')) FROM range(?)", [top - following])

    def _rebuild_sessions(self, con: duckdb.DuckDBPyConnection, mode: str, sessions: list[str] | None, ids: list[str]) -> None:
        """`sessions` rows are derived from turns: recomputed for the restored ones, `ids` (and, in
        replace mode, dropped first, so a session the bundle does not hold any more is gone)."""
        if mode == "replace":
            where, params = self._scope(["session_id"], "sessions", sessions)
            con.execute(f"DELETE FROM sessions {where}", params)
        rows = _session_rows(_load_turns(con, ids))
        if rows:
            con.register("batch", pd.DataFrame(rows))
            con.execute(_upsert_sql("sessions", list(rows[0]), ["session_id"]))
            con.unregister("batch")

    def _session_states(self, con: duckdb.DuckDBPyConnection, sessions: list[str] | None) -> dict[str, SessionState]:
        where, params = self._scope(["session_id"], "sessions", sessions)
        rows = con.execute(
            f"""SELECT s.session_id, s.partition_key, s.input_revision, x.input_revision, x.created_at::VARCHAR,
                       r.session_id IS NOT NULL
                FROM (SELECT * FROM sessions {where}) s
                LEFT JOIN session_summaries x USING (session_id)
                LEFT JOIN retired_sessions r USING (session_id)""",
            params,
        ).fetchall()
        return {row[0]: SessionState(*row[1:]) for row in rows}


    # --- graph ---

    def summary_row(self, session_id: str) -> dict | None:
        with self.connect() as con:
            cursor = con.execute("SELECT * FROM session_summaries WHERE session_id = ?", [session_id])
            row = cursor.fetchone()
            return dict(zip([d[0] for d in cursor.description], row)) if row else None

    def digest_state(self, session_id: str) -> DigestState | None:
        with self.connect() as con:
            row = con.execute(
                "SELECT digest_state, attempts, defer_reason, revision FROM digest_state WHERE session_id = ?", [session_id]
            ).fetchone()
        return DigestState(*row) if row else None

    def _put_digest_state(self, con: duckdb.DuckDBPyConnection, session_id: str, state: DigestState) -> None:
        con.execute(
            "INSERT OR REPLACE INTO digest_state VALUES (?, ?, ?, ?, ?, ?)",
            [session_id, state.digest_state, state.attempts, state.defer_reason, state.revision, _now()],
        )

    def write_graph(self, graph: SessionGraph, run_id: str | None = None) -> None:
        """Replace the session's graph and mark it digested at its revision, in one transaction."""
        common = {"session_id": graph.session_id, "input_revision": graph.input_revision, "run_id": run_id, "created_at": _now()}
        with self.transaction() as con:
            con.execute("DELETE FROM graph_nodes WHERE session_id = ?", [graph.session_id])
            con.execute("DELETE FROM graph_edges WHERE session_id = ?", [graph.session_id])
            con.execute("DELETE FROM graph_chunks WHERE session_id = ?", [graph.session_id])
            _insert_graph(con, [(common, graph.nodes, graph.edges)])
            self._put_digest_state(con, graph.session_id, after_success(graph.input_revision))

    def finished_graph_chunks(self, session_id: str, revision: str) -> dict[tuple[int, str], tuple[GraphExtraction, bool]]:
        """The session's chunk results stored at this revision, by (chunk index, text digest)."""
        with self.connect() as con:
            rows = con.execute(
                """SELECT chunk_index, chunk_sha256, extraction::VARCHAR, cut_at_output_cap FROM graph_chunks
                   WHERE session_id = ? AND input_revision = ?""",
                [session_id, revision],
            ).fetchall()
        return {(index, sha): (GraphExtraction.model_validate_json(data), cut) for index, sha, data, cut in rows}

    def save_graph_chunk(
        self, session_id: str, revision: str, chunk: Chunk, extraction: GraphExtraction, cut: bool, model: str,
        run_id: str | None = None,
    ) -> None:  # fmt: skip
        """One chunk's result, written as it arrives; rows of the session's older revisions go."""
        with self.transaction() as con:
            con.execute("DELETE FROM graph_chunks WHERE session_id = ? AND input_revision <> ?", [session_id, revision])
            con.execute(
                "INSERT OR REPLACE INTO graph_chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [session_id, revision, chunk.index, chunk.digest, list(chunk.turn_ids), extraction.model_dump_json(),
                 cut, model, run_id, _now()],
            )  # fmt: skip

    def record_digest_failure(self, session_id: str, revision: str, symptom: str, max_attempts: int) -> DigestState:
        """Count a failed digest; the session's last good graph, if any, stays. Returns the new state."""
        with self.transaction() as con:
            row = con.execute(
                "SELECT digest_state, attempts, defer_reason, revision FROM digest_state WHERE session_id = ?", [session_id]
            ).fetchone()
            state = after_failure(DigestState(*row) if row else None, revision, symptom, max_attempts)
            self._put_digest_state(con, session_id, state)
        return state

    def reset_digest(self, session_id: str) -> DigestState | None:
        """An operator's reset of an undigestible session; returns the state it had, or None if it
        was not undigestible (nothing changed)."""
        with self.transaction() as con:
            row = con.execute(
                "SELECT digest_state, attempts, defer_reason, revision FROM digest_state WHERE session_id = ?", [session_id]
            ).fetchone()
            previous = DigestState(*row) if row else None
            if previous is None or previous.digest_state != UNDIGESTIBLE:
                return None
            self._put_digest_state(con, session_id, after_reset(previous))
        return previous

    def pending_digest_keys(self, fresh: int, total: int, exclude: Iterable[str] = ()) -> list[str]:
        """Sessions the digest cadence takes, as the original's REM pass does: `fresh` of the newest,
        the rest oldest first, `total` at most. Pending means summarized from the turns as they are,
        not yet digested at that revision, not undigestible at it, not retired. Sessions a run's
        budget left part-done (chunks stored at their turns) come first, oldest first: they finish
        in a bounded number of runs, and none waits behind a backlog with its work half done."""
        pending = """
            SELECT s.partition_key, s.session_id, s.last_activity_ms, s.input_revision FROM sessions s
            JOIN session_summaries x USING (session_id)
            LEFT JOIN digest_state d USING (session_id)
            WHERE x.input_revision = s.input_revision
              AND NOT coalesce(d.revision = s.input_revision AND d.digest_state IN ('digested', 'undigestible'), false)
              AND s.session_id NOT IN (SELECT session_id FROM retired_sessions)
              AND s.partition_key NOT IN (SELECT unnest(?::VARCHAR[]))
        """
        with self.connect() as con:
            resumed = con.execute(
                f"""SELECT partition_key FROM ({pending}) p WHERE EXISTS (SELECT 1 FROM graph_chunks g
                    WHERE g.session_id = p.session_id AND g.input_revision = p.input_revision)
                    ORDER BY last_activity_ms ASC NULLS FIRST, session_id LIMIT ?""",
                [list(exclude), total],
            ).fetchall()
            exclude = [*exclude, *(r[0] for r in resumed)]
            rest = total - len(resumed)
            newest = con.execute(
                f"SELECT partition_key FROM ({pending}) ORDER BY last_activity_ms DESC NULLS LAST, session_id LIMIT ?",
                [exclude, min(fresh, max(0, rest - 1))],
            ).fetchall()
            oldest = con.execute(
                f"""SELECT partition_key FROM ({pending}) WHERE partition_key NOT IN (SELECT unnest(?::VARCHAR[]))
                    ORDER BY last_activity_ms ASC NULLS FIRST, session_id LIMIT ?""",
                [exclude, [r[0] for r in newest], rest - len(newest)],
            ).fetchall()
        return [r[0] for r in resumed + newest + oldest]

    def graph_pages(self, table: str, ids_per_page: int = 2000) -> Iterator[list[dict]]:
        """Every row of `graph_nodes` or `graph_edges`, with the imported graph's row of each id
        first (`imported_graph_*`), sorted by id (then oldest digest first), a page of whole id
        groups per short connection, for the export's merge."""
        columns = {"graph_nodes": "id, label, properties", "graph_edges": "id, source, target, type, properties"}[table]
        rows_sql = f"""SELECT {columns}, true AS imported, 0 AS rank, imported_at AS created_at, NULL AS session_id
                       FROM imported_{table}
                       UNION ALL
                       SELECT {columns}, false, 1, created_at, session_id FROM {table}"""
        after = ""
        while True:
            with self.connect() as con:
                cursor = con.execute(
                    f"""WITH all_rows AS ({rows_sql}),
                        page AS (SELECT DISTINCT id FROM all_rows WHERE id > ? ORDER BY id LIMIT {int(ids_per_page)})
                        SELECT {columns.replace("properties", "properties::VARCHAR AS properties")}, imported
                        FROM all_rows JOIN page USING (id) ORDER BY id, rank, created_at, session_id""",
                    [after],
                )
                names = [d[0] for d in cursor.description]
                rows = [dict(zip(names, row)) for row in cursor.fetchall()]
            if not rows:
                return
            yield rows
            after = rows[-1]["id"]


class RunLedger:
    """The synthesis ledger for one run: each attempt and friction event written as it happens."""

    def __init__(self, store: DigestStore, run_id: str | None):
        self.store = store
        self.run_id = run_id

    def record_attempt(self, attempt: Attempt) -> None:
        self.store.record_attempt(attempt, self.run_id)

    def record_friction(self, event: FrictionEvent) -> None:
        self.store.record_friction(event, self.run_id)

    # The graph's `ChunkStore`: a digest run's finished chunks, tagged with the run.
    def finished_chunks(self, session_id: str, revision: str) -> dict[tuple[int, str], tuple[GraphExtraction, bool]]:
        return self.store.finished_graph_chunks(session_id, revision)

    def save_chunk(
        self, session_id: str, revision: str, chunk: Chunk, extraction: GraphExtraction, cut: bool, model: str
    ) -> None:
        self.store.save_graph_chunk(session_id, revision, chunk, extraction, cut, model, self.run_id)


class MiniSummaryLedger:
    """Where one mini summary run writes (`digest.mini_summaries.MiniSummaryStore`), as it happens."""

    def __init__(self, store: DigestStore, run_id: str | None):
        self.store = store
        self.run_id = run_id

    def record_attempt(self, attempt: Attempt) -> None:
        self.store.record_attempt(attempt, self.run_id)

    def save_mini_summary(self, turn: PendingTurn, text: str, model: str) -> None:
        self.store.save_generated_mini_summary(turn.id, turn.session_id, text, model)

    def record_failure(self, turn: PendingTurn, cause: str, max_attempts: int) -> bool:
        return self.store.record_mini_summary_failure(turn.id, turn.session_id, cause, max_attempts)

    def archive(self, turn: PendingTurn, reason: str) -> None:
        self.store.archive_turn(turn.id, turn.session_id, reason)

    def still_pending(self, turn: PendingTurn) -> bool:
        return self.store.mini_summary_pending(turn.id)
