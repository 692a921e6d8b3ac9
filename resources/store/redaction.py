"""Secrets in what a store held before the ingest redacted them (`digest.redact`): migration 13
redacts the stored turns, mini summaries and summaries in place, and the redactions `status` counts;
migration 18 does it again for the kinds added since, each turn's counts added to.

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


def redact_stored(con: duckdb.DuckDBPyConnection) -> None:
    """Migrations 13's and 18's step: the stored text redacted, unless `DIGEST_REDACT` is off (read
    here: a migration has no settings; the setting's own parser, so a bad value fails as at load)."""
    if not setting_of("DIGEST_REDACT").read(os.environ, {}):
        return
    sessions = _redact_rows(con, "turns", TURN_TEXT_FIELDS, record=True)
    for table, columns in SUMMARY_TEXTS.items():
        _redact_rows(con, table, columns, record=False)
    _carry_revisions(con, sorted(sessions))


def _redact_rows(con: duckdb.DuckDBPyConnection, table: str, columns: tuple[str, ...], record: bool) -> set[str]:
    """The rows of `table` whose `columns` held a secret, redacted in batches; returns their
    sessions. `record`: each row's counts go to its `redactions` column (the turns')."""
    wanted = " OR ".join(f"regexp_matches(coalesce({c}, ''), ?)" for c in columns)
    rowids = [r[0] for r in con.execute(f"SELECT rowid FROM {table} WHERE {wanted}", [HINTS] * len(columns)).fetchall()]
    sessions: set[str] = set()
    names = ", ".join(columns) + (", redactions" if record else "")
    for start in range(0, len(rowids), BATCH_ROWS):
        chunk = rowids[start : start + BATCH_ROWS]
        rows = con.execute(
            f"SELECT rowid, session_id, {names} FROM {table} WHERE rowid IN (SELECT unnest(?::BIGINT[]))", [chunk]
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
    # The redacted documents' identifiers (a secret may have looked like one), then the scores.
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
