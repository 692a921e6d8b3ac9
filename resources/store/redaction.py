"""Secrets in what a store held before the ingest redacted them (`digest.redact`): migration 13
redacts the stored turns, mini summaries and summaries in place, and the redactions `status` counts;
migration 17 the rejects (reason and excerpt), the imported summaries' metadata and the imported
graph's properties, redacted at ingest since; migration 18 the turns, mini summaries and summaries
again for the kinds added since, each turn's counts added to; a restore all of them, since a bundle may
come from a store that did not redact. `NOT_INPUT_TEXT` names every other text column of the
store with why it holds no input text (tests/test_redaction_coverage.py walks the schema).

Redacting a turn changes its document, and so its session's input revision (a hash of the stored
text, `digest.turns.input_revision`). Everything recorded at the old revision (the summary, the
graph, the digest and failure states, the staged replies) is moved to the new one in the same
transaction: a redaction takes out no meaning a summary drew on, so it makes no summary owed again.
The summaries' own text is redacted too.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import duckdb
import pandas as pd

from digest.redact import PATTERNS, SUMMARY_TEXT_FIELDS, TURN_TEXT_FIELDS, redact_fields
from digest.settings import setting_of
from resources.store.cards import refresh_cards
from resources.store.facts import refresh_turn_facts
from resources.store.fidelity import refresh_fidelity, refresh_turn_terms
from resources.store.sessions import derived_session_rows, upsert_sessions

BATCH_ROWS = 2000
# Every pattern's hints in one RE2 expression: DuckDB picks the rows worth reading in Python.
HINTS = "(?i)" + "|".join(re.escape(hint) for pattern in PATTERNS for hint in pattern.hints)
# (table, column) of what is recorded at a session's input revision, all keyed by session_id.
REVISION_COLUMNS = (
    ("session_summaries", "input_revision"),
    ("imported_summaries", "input_revision"),
    ("summary_state", "failed_revision"),
    ("digest_state", "revision"),
    ("graph_nodes", "input_revision"),
    ("graph_edges", "input_revision"),
    ("graph_chunks", "input_revision"),
    ("response_cache", "input_revision"),
)
# The text columns redacted besides the turns', by table.
SUMMARY_TEXTS = {
    "mini_summaries": ("text",),
    "session_summaries": SUMMARY_TEXT_FIELDS,
    "imported_summaries": SUMMARY_TEXT_FIELDS,
    "summary_history": SUMMARY_TEXT_FIELDS,
}


# Why each text column outside `REDACTED_TEXT` holds no input text: what it holds, and where that
# comes from. A new text column is one list's or the other's (tests/test_redaction_coverage.py).
_ID = "an id, revision or hash a record is named and joined by (the log's or the store's): not prose"
_CLOSED = "one of the few values this code writes: a stage, kind, outcome, symptom, tier, verdict or route"
_NAME = "a name the log or the export gives, not prose: a model, host, agent, tool, user, category or technology"
_PATH = "a file's path, a working folder or a git branch, as the file system and git name them"
_DERIVED = "made from the redacted turns (by this code, or by the model it sent them to) after their redaction"
_ERROR = "a model host's or this code's message about a call, whose prompt was redacted text"
_NUMBERS = "numbers or counts written as text (a vector, secrets counted by kind)"
_SUMMARY = "the model's summary of redacted turns, or an imported summary redacted at its ingest (or by migration 13)"


def _columns(reason: str, columns: str) -> dict[tuple[str, str], str]:
    """`table.column` names (space-separated) with their one reason."""
    return {tuple(name.split(".")): reason for name in columns.split()}


NOT_INPUT_TEXT: dict[tuple[str, str], str] = {
    **_columns(_ID, """
        archives.archive_id archives.sessions archives.manifest_sha256 attempts.session_id attempts.run_id
        backfill_state.session_id backfill_state.last_run_id digest_state.session_id digest_state.revision
        fidelity_terms.session_id friction_events.run_id graph_chunks.session_id graph_chunks.input_revision
        graph_chunks.chunk_sha256 graph_chunks.turn_ids graph_chunks.run_id graph_edges.session_id graph_edges.id
        graph_edges.input_revision graph_edges.run_id graph_nodes.session_id graph_nodes.id graph_nodes.input_revision
        graph_nodes.run_id imported_graph_edges.id imported_graph_edges.source imported_graph_edges.target
        imported_graph_nodes.id imported_summaries.session_id imported_summaries.input_revision
        ingest_files.read_hash ingest_files.sessions mini_summaries.turn_id mini_summaries.session_id
        mini_summary_state.turn_id mini_summary_state.session_id response_cache.request_key response_cache.session_id
        response_cache.input_revision resummary_requests.request_id resummary_requests.session_id
        resummary_requests.run_id retired_sessions.session_id retired_sessions.archive_id
        search_vectors.doc_key search_vectors.session_id search_vectors.turn_id search_vectors.text_hash
        session_cards.session_id session_cards.input_revision session_summaries.session_id
        session_summaries.input_revision session_summaries.run_id session_summaries.covered_turn_ids
        session_summaries.mini_turn_ids session_summaries.code_version sessions.session_id sessions.partition_key
        sessions.input_revision summary_history.session_id summary_history.code_version summary_history.input_revision
        summary_history.run_id summary_history.replaced_by_run summary_leases.session_id summary_leases.run_id
        summary_state.session_id summary_state.failed_revision turn_facts.turn_id turn_facts.session_id
        turns.id turns.session_id
    """),
    **_columns(_CLOSED, """
        attempts.stage attempts.tier attempts.outcome digest_state.digest_state digest_state.defer_reason
        friction_events.asset_ref friction_events.consumer friction_events.symptom friction_events.emission_point
        friction_events.suggestion_kind friction_events.service_domain friction_events.bound graph_nodes.label
        graph_edges.type ingest_files.kind mini_summaries.origin mini_summary_state.last_cause
        mini_summary_state.archived_reason response_cache.finish_reason resummary_requests.outcome
        resummary_requests.previous_verdict resummary_requests.new_verdict
        search_vectors.kind session_cards.title_source session_cards.source_tier
        session_summaries.source_tier session_summaries.raw_cap_source session_summaries.route_reason
        session_summaries.origin session_summaries.host_reason session_summaries.raw_tokens_source
        session_summaries.verdict summary_history.source_tier summary_history.route_reason summary_history.verdict
        summary_history.origin summary_state.last_symptom turn_facts.kind turns.type
        imported_summaries.source_tier imported_graph_nodes.label imported_graph_edges.type
    """),
    **_columns(_NAME, """
        attempts.model attempts.host friction_events.model graph_chunks.model host_circuits.host host_raw_caps.host
        host_raw_caps.model imported_summaries.category imported_summaries.technologies
        imported_summaries.participating_agents imported_summaries.models imported_summaries.tools_used
        imported_summaries.source_agent_identities mini_summaries.model response_cache.model
        resummary_requests.previous_model resummary_requests.new_model search_vector_stamp.model search_vectors.model
        session_summaries.category session_summaries.technologies session_summaries.model
        session_summaries.participating_agents session_summaries.models session_summaries.tools_used
        session_summaries.source_agent_identities session_summaries.host summary_history.model summary_history.host
        turns.agent turns.agent_identity turns.model turns.user_id turns.tools_used
    """),
    **_columns(_PATH, """
        archives.path imported_graph_edges.source_file imported_graph_nodes.source_file imported_summaries.source_file
        ingest_files.path rejects.source_file sessions.project sessions.git_branch sessions.source_path
        turns.source_file turns.project turns.git_branch
    """),
    **_columns(_DERIVED, """
        fidelity_terms.term graph_chunks.extraction graph_edges.source graph_edges.target graph_edges.properties
        graph_nodes.properties response_cache.text session_cards.title session_cards.line session_cards.text
        session_cards.card session_summaries.fidelity_found session_summaries.fidelity_missed
        session_summaries.verdict_evidence turn_facts.value turn_facts.detail
    """),
    **_columns(_SUMMARY, """
        session_summaries.title session_summaries.summary summary_history.title summary_history.summary
    """),
    **_columns(_ERROR, """
        attempts.error_text friction_events.note friction_events.error_text host_circuits.last_error
        resummary_requests.outcome_detail
    """),
    **_columns(_NUMBERS, "imported_summaries.embedding turns.embedding turns.redactions"),
    ("turns", "archived_at"): "the export's time its turn was archived",
    ("turns", "archived_reason"): "the export's reason label its turn was archived for (`no-content`, ...)",
    ("ingest_files", "resume_context"): (
        "where a growing Codex rollout is read on from: its session id, model, turns counted, time, folder and branch"
    ),
    ("resummary_requests", "criteria"): "the operator's filters from the command line (model, host, tier, verdict)",
}  # fmt: skip


# The texts redacted at ingest since migration 13 (`digest.redact.REDACTED_TEXT`), which migration 17
# redacts in a store that held them before: none of them is an input of a session's revision.
REDACTED_SINCE_13 = {
    "rejects": ("reason", "excerpt"),
    "imported_summaries": ("metadata",),
    "imported_graph_nodes": ("properties",),
    "imported_graph_edges": ("properties",),
}


def _redacting() -> bool:
    """`DIGEST_REDACT`, read here: a migration has no settings; the setting's own parser, so a bad
    value fails as at load."""
    return setting_of("DIGEST_REDACT").read(os.environ, {})


def redact_stored(con: duckdb.DuckDBPyConnection) -> None:
    """Migrations 13's and 18's step: the stored text redacted, unless `DIGEST_REDACT` is off."""
    if not _redacting():
        return
    sessions = _redact_rows(con, "turns", TURN_TEXT_FIELDS, record=True)
    for table, columns in SUMMARY_TEXTS.items():
        _redact_rows(con, table, columns, record=False)
    _carry_revisions(con, sorted(sessions))


def redact_stored_since_13(con: duckdb.DuckDBPyConnection) -> None:
    """Migration 17's step: the rejects, imported metadata and imported graph redacted, unless
    `DIGEST_REDACT` is off. An excerpt was stored cut to 200 characters: a secret the cut split
    keeps the part before the cut unless it is still one by its pattern."""
    if not _redacting():
        return
    for table, columns in REDACTED_SINCE_13.items():
        _redact_rows(con, table, columns, record=False)


def redact_restored(con: duckdb.DuckDBPyConnection) -> None:
    """A restore's step: a bundle written by a store that did not redact (older code, or
    `DIGEST_REDACT` off) brings its secrets back; they are taken out as at ingest."""
    redact_stored(con)
    redact_stored_since_13(con)


def _redact_rows(con: duckdb.DuckDBPyConnection, table: str, columns: tuple[str, ...], record: bool) -> set[str]:
    """The rows of `table` whose `columns` held a secret, redacted in batches (`REDACTED_TEXT`'s
    way: a JSON column stays JSON); returns their sessions (`record`: each row's counts go to its
    `redactions` column, the turns')."""
    wanted = " OR ".join(f"regexp_matches(coalesce({c}::VARCHAR, ''), ?)" for c in columns)
    rowids = [r[0] for r in con.execute(f"SELECT rowid FROM {table} WHERE {wanted}", [HINTS] * len(columns)).fetchall()]
    sessions: set[str] = set()
    names = ", ".join(f"{c}::VARCHAR" for c in columns) + (", redactions" if record else "")
    session = "session_id" if record else "NULL"
    for start in range(0, len(rowids), BATCH_ROWS):
        chunk = rowids[start : start + BATCH_ROWS]
        rows = con.execute(
            f"SELECT rowid, {session}, {names} FROM {table} WHERE rowid IN (SELECT unnest(?::BIGINT[]))", [chunk]
        ).fetchall()
        changed = []
        for rowid, session_id, *texts in rows:
            before = dict(zip(columns, texts))
            after, counts = redact_fields(before, columns)
            if counts:
                # A turn redacted before keeps the counts of what was found then.
                counts += Counter(json.loads(texts[-1] or "{}")) if record else Counter()
                extra = [json.dumps(dict(sorted(counts.items())))] if record else []
                changed.append([rowid, *(after[c] for c in columns), *extra])
                if record:
                    sessions.add(session_id)
        if not changed:
            continue
        set_columns = list(columns) + (["redactions"] if record else [])
        con.register("redacted", pd.DataFrame(changed, columns=["rid", *set_columns]))
        assignments = ", ".join(f"{c} = r.{c}" for c in set_columns)
        con.execute(f"UPDATE {table} SET {assignments} FROM redacted r WHERE {table}.rowid = r.rid")
        con.unregister("redacted")
    return sessions


def _carry_revisions(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> None:
    """These sessions' rows derived again from their redacted turns, and what was recorded at each
    one's old input revision moved to its new one."""
    if not session_ids:
        return
    old = dict(
        con.execute(
            "SELECT session_id, input_revision FROM sessions WHERE session_id IN (SELECT unnest(?::VARCHAR[]))",
            [session_ids],
        ).fetchall()
    )
    rows = derived_session_rows(con, session_ids)
    upsert_sessions(con, rows)
    moves = pd.DataFrame(
        [(r["session_id"], old[r["session_id"]], r["input_revision"]) for r in rows if r["session_id"] in old],
        columns=["session_id", "old", "new"],
    )
    con.register("moves", moves)
    for table, column in REVISION_COLUMNS:
        con.execute(
            f"UPDATE {table} SET {column} = m.new FROM moves m "
            f"WHERE {table}.session_id = m.session_id AND {table}.{column} = m.old"
        )
    con.unregister("moves")
    # The facts read from the turns' text (a command may have held the secret), the redacted
    # documents' identifiers (a secret may have looked like one), then the scores.
    refresh_turn_facts(con, session_ids)
    refresh_turn_terms(con, session_ids)
    refresh_fidelity(con, session_ids)
    refresh_cards(con, session_ids)  # from the redacted text, under the verdicts just made


def redaction_counts(con: duckdb.DuckDBPyConnection, session_ids: list[str] | None = None) -> dict:
    """The secrets replaced in the stored turns by kind, and how many turns and sessions had one
    (of these sessions; None: all)."""
    where = "" if session_ids is None else "AND session_id IN (SELECT unnest(?::VARCHAR[]))"
    rows = con.execute(
        f"SELECT session_id, redactions FROM turns WHERE redactions IS NOT NULL {where}",
        [] if session_ids is None else [session_ids],
    ).fetchall()
    kinds: Counter = Counter()
    for _, counts in rows:
        kinds.update(json.loads(counts))
    return {
        "by_kind": dict(sorted(kinds.items())),
        "turns": len(rows),
        "sessions": len({sid for sid, _ in rows}),
    }
