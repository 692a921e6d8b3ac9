-- The store's tables at the latest version (resources/store/connection.py runs this on migrate; every
-- statement is idempotent). A column added since stores were first made also has its numbered
-- migration in resources/store/migrations.py.

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
    embedding VARCHAR,                -- the export's vector as its JSON text, verbatim: only one not of float32 origin
    embedding_f32 FLOAT[],            -- the export's vector of float32 origin (exact; resources/store/vectors.py)
    project VARCHAR,                  -- the working directory or repository root the harness recorded; NULL: unknown
    git_branch VARCHAR,
    redactions VARCHAR,               -- JSON {kind: count} of the secrets replaced in its text at ingest (`digest.redact`)
    -- Its identifiers and their counts, or its plain words when it names none (digest/fidelity.py
    -- `turn_terms`), written with the turn: a session's terms are their sum, so a refresh reads no
    -- turn documents to know them.
    terms MAP(VARCHAR, INTEGER),
    terms_words BOOLEAN               -- true: `terms` are plain content words (the turn names no identifier)
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
    updated_at TIMESTAMPTZ NOT NULL,
    project VARCHAR,                  -- its latest turn's that has one (ts_ms, then id), and so git_branch
    git_branch VARCHAR,
    source_path VARCHAR               -- the file its latest turn came from
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
    archived_reason VARCHAR,          -- no-content | generation-timeout | junk-output
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

-- session_summaries: its DDL is derived from the one definition of the row, resources/store/summary_row.py.


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
    outcome VARCHAR NOT NULL,         -- ok | a friction symptom | in-flight | interrupted
    suspected_truncation BOOLEAN NOT NULL,
    cached BOOLEAN NOT NULL DEFAULT false,  -- replayed from response_cache: no model call
    error_text VARCHAR,
    run_id VARCHAR,
    created_at TIMESTAMPTZ NOT NULL,
    host VARCHAR,                     -- the model host that answered (NULL before several hosts)
    first_token_s DOUBLE,             -- a streamed call's seconds to its first piece (NULL: not streamed)
    deadline_s DOUBLE                 -- the longest the call may run (NULL: not recorded)
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
    run_id VARCHAR,
    bound VARCHAR                     -- a raw summary prompt pre-routed (size-precheck-skip): over-raw-cap | over-safe-band
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

-- The salient identifiers of each session (digest/fidelity.py): the store's document frequencies.
CREATE TABLE IF NOT EXISTS fidelity_terms (
    session_id VARCHAR NOT NULL,
    term VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS rejects (
    source_file VARCHAR NOT NULL,
    line_no INTEGER NOT NULL,
    reason VARCHAR NOT NULL,
    excerpt VARCHAR,
    rejected_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (source_file, line_no)
);

-- Each file an ingest read, as it left it (digest/manifest.py): an unchanged file is not read
-- again, a grown one is read on from `resume_bytes` once the hash of its read part matches.
CREATE TABLE IF NOT EXISTS ingest_files (
    path VARCHAR PRIMARY KEY,
    kind VARCHAR NOT NULL,            -- the reader: claude-code, codex, aider, trajectory, memory, turns, ...
    size BIGINT NOT NULL,             -- the file's size and mtime when the read began
    mtime_ns BIGINT NOT NULL,
    read_bytes BIGINT NOT NULL,       -- the end of the last complete line read
    read_lines INTEGER NOT NULL,      -- complete lines up to read_bytes
    read_hash VARCHAR NOT NULL,       -- SHA-256 of the bytes [0, read_bytes)
    resume_bytes BIGINT NOT NULL,     -- where the next read starts: the first line of the turn open at read_bytes
    resume_lines INTEGER NOT NULL,    -- lines before resume_bytes
    resume_context JSON,              -- what the reader needs from before resume_bytes (Codex: session, model, turns)
    read_at_ns BIGINT NOT NULL,       -- when the read began (epoch ns): a file modified close to it is checked by hash
    sessions VARCHAR[] NOT NULL,      -- the sessions whose turns the file holds
    grown_ms BIGINT,                  -- its mtime (epoch ms) when a read found it grown; NULL: read whole since
    ingested_at TIMESTAMPTZ NOT NULL
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
    embedding VARCHAR,                -- the line's vector as its JSON text: only one not of float32 origin
    embedding_f32 FLOAT[]             -- the line's vector of float32 origin (resources/store/vectors.py)
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
    created_at TIMESTAMPTZ NOT NULL,
    attempt_recorded BOOLEAN          -- false: staged, its call has no attempts row yet; NULL: not staged, or recorded
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

-- A circuit breaker per model host (`digest.circuit`): a host that keeps failing is out of rotation
-- until its backoff passes, then one probe run may go to it.
CREATE TABLE IF NOT EXISTS host_circuits (
    host VARCHAR PRIMARY KEY,
    failures INTEGER NOT NULL,        -- host failures in a row
    opens INTEGER NOT NULL,           -- openings since the host last succeeded (the backoff doubles)
    retry_at_ms BIGINT,               -- NULL: closed; else open until then, half-open after
    probe_until_ms BIGINT,            -- a half-open probe run is out until then
    last_error VARCHAR,
    changed_at_ms BIGINT NOT NULL
);

-- The raw-synthesis cap in force on each host whose cap follows its speed (raw_cap_tokens = auto,
-- `digest.pacing`): moved only when a fresh computation differs by more than the hysteresis.
CREATE TABLE IF NOT EXISTS host_raw_caps (
    host VARCHAR PRIMARY KEY,
    model VARCHAR NOT NULL,
    cap_tokens INTEGER NOT NULL,      -- the cap in force
    computed_tokens INTEGER NOT NULL, -- the last computation, before the hysteresis
    prompt_tps DOUBLE NOT NULL,
    answer_tps DOUBLE NOT NULL,
    samples INTEGER NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);

-- Re-summaries asked for (`session-digest sweep --resummarize`, the `request_resummaries` job): a
-- sweep takes them after new work; the summary written for the session closes its open request.
CREATE TABLE IF NOT EXISTS resummary_requests (
    request_id VARCHAR PRIMARY KEY,
    session_id VARCHAR NOT NULL,
    criteria VARCHAR NOT NULL,        -- JSON: the filters that selected it
    requested_at TIMESTAMPTZ NOT NULL,
    done_at TIMESTAMPTZ,              -- NULL: waiting
    run_id VARCHAR,                   -- the run whose summary closed it
    outcome VARCHAR,                  -- replaced | kept-previous
    outcome_detail VARCHAR,
    previous_model VARCHAR,           -- the summary before, and the one made: the report's before/after
    previous_verdict VARCHAR,
    previous_fidelity DOUBLE,
    new_model VARCHAR,
    new_verdict VARCHAR,
    new_fidelity DOUBLE
);

-- A summary replaced by another (a re-summary, an upgrade, new turns), as it stood.
CREATE TABLE IF NOT EXISTS summary_history (
    session_id VARCHAR NOT NULL,
    title VARCHAR,
    summary VARCHAR,
    model VARCHAR,
    host VARCHAR,
    source_tier VARCHAR,
    route_reason VARCHAR,
    verdict VARCHAR,
    fidelity DOUBLE,
    code_version VARCHAR,
    input_revision VARCHAR,
    origin VARCHAR,
    run_id VARCHAR,
    created_at TIMESTAMPTZ,
    replaced_at TIMESTAMPTZ NOT NULL,
    replaced_by_run VARCHAR
);

-- The search index's vectors, where a host serves embeddings (resources/store/search_vectors.py): one a
-- document and model; the stamp names the model (and dimension) the index serves queries from.
CREATE TABLE IF NOT EXISTS search_vectors (
    doc_key VARCHAR NOT NULL,         -- card:|summary:<session_id> | mini:|turn:<turn_id>; a later chunk <key>#<n>
    session_id VARCHAR NOT NULL,
    turn_id VARCHAR,
    kind VARCHAR NOT NULL,            -- card | summary | mini | turn
    model VARCHAR NOT NULL,
    text_hash VARCHAR NOT NULL,       -- md5 of the text embedded: a changed text is embedded again
    vector FLOAT[] NOT NULL,
    embedded_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (doc_key, model)
);

CREATE TABLE IF NOT EXISTS search_vector_stamp (
    model VARCHAR NOT NULL,
    dim INTEGER NOT NULL,
    stamped_at TIMESTAMPTZ NOT NULL
);

-- Facts a coding-agent user searches by, extracted at ingest with no model call (digest/facts.py).
CREATE TABLE IF NOT EXISTS turn_facts (
    turn_id VARCHAR NOT NULL,
    session_id VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,            -- file-read | file-edit | file-create | command | error | commit | issue | pr
    value VARCHAR NOT NULL,           -- the path, the command line, the error text, the hash, the reference
    detail VARCHAR                    -- the tool, or a command's exit status where the log records it
);

-- Each session's card: its account from its own facts, with no model call (`digest.card`); made
-- again when its turns or its ok summary change.
CREATE TABLE IF NOT EXISTS session_cards (
    session_id VARCHAR PRIMARY KEY,
    input_revision VARCHAR,           -- of the turns it was made from
    title VARCHAR NOT NULL,
    title_source VARCHAR NOT NULL,    -- summary | ask | none
    line VARCHAR NOT NULL,            -- at most 300 characters, for an agent
    text VARCHAR NOT NULL,            -- at most 2,000 characters, each item with its turn
    card VARCHAR NOT NULL,            -- JSON: every item with its turn's place and id
    source_tier VARCHAR NOT NULL,     -- facts
    degraded BOOLEAN NOT NULL,        -- true: a navigation summary
    raw_canonical BOOLEAN NOT NULL,   -- false
    summary_at TIMESTAMPTZ,           -- the ok summary its title came from
    card_version INTEGER NOT NULL
);

