"""What a summary written does beside its row: the summary it replaces kept in `summary_history`,
and its session's open re-summary request (`resummary_requests`) closed with the before and after.
Both run inside `Summaries.write_summary`'s transaction. A summary an import adopts or a restore
loads over another keeps the one it replaces too (`keep_replaced_rows`)."""

from __future__ import annotations

import duckdb

from digest.resummary import KEPT_PREVIOUS, REPLACED
from resources.store.connection import now

# A replaced summary's row as it stood (`summary_history`'s columns up to `replaced_at`).
HISTORY_COLUMNS = (
    "session_id, title, summary, model, host, source_tier, route_reason, verdict, fidelity, code_version, "
    "input_revision, origin, run_id, created_at"
)
KEEP_REPLACED = f"""
    INSERT INTO summary_history
    SELECT {HISTORY_COLUMNS}, ?, ? FROM session_summaries WHERE session_id = ?
"""
# What an import or a restore put in place of a summary, in `replaced_by_run` (no run of ours made it).
BY_IMPORT = "import"


def by_restore(archive_id: str) -> str:
    return f"restore of archive {archive_id}"


def keep_replaced_rows(con: duckdb.DuckDBPyConnection, rows_sql: str, params: list, replaced_by: str) -> None:
    """The summaries `rows_sql` selects (rows of `session_summaries`' shape, about to be replaced or
    replaced already) into `summary_history`."""
    con.execute(
        f"INSERT INTO summary_history SELECT {HISTORY_COLUMNS}, ?, ? FROM ({rows_sql})", [now(), replaced_by, *params]
    )


def keep_replaced(con: duckdb.DuckDBPyConnection, session_id: str, replaced_by_run: str | None) -> None:
    """The session's summary, about to be replaced, into `summary_history` (none: nothing kept)."""
    con.execute(KEEP_REPLACED, [now(), replaced_by_run, session_id])


def close_requests(
    con: duckdb.DuckDBPyConnection,
    session_id: str,
    run_id: str | None,
    previous: dict | None,
    new: dict,
    detail: str | None = None,
) -> None:
    """The session's open request done by this run's summary: `new` (model, verdict, fidelity) replaced
    `previous`, or, with `detail` (why), was judged junk and `previous` kept."""
    previous = previous or {}
    con.execute(
        """UPDATE resummary_requests SET done_at = ?, run_id = ?, outcome = ?, outcome_detail = ?,
                  previous_model = ?, previous_verdict = ?, previous_fidelity = ?,
                  new_model = ?, new_verdict = ?, new_fidelity = ?
           WHERE session_id = ? AND done_at IS NULL""",
        [
            now(), run_id, KEPT_PREVIOUS if detail else REPLACED, detail,
            previous.get("model"), previous.get("verdict"), previous.get("fidelity"),
            new.get("model"), new.get("verdict"), new.get("fidelity"), session_id,
        ],
    )  # fmt: skip
