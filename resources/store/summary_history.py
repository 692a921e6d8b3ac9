"""What a summary written does beside its row: the summary it replaces kept in `summary_history`,
and its session's open re-summary request (`resummary_requests`) closed with the before and after.
Both run inside `Summaries.write_summary`'s transaction."""

from __future__ import annotations

import duckdb

from digest.resummary import KEPT_PREVIOUS, REPLACED
from resources.store.connection import now

# A replaced summary's row as it stood, kept in `summary_history`.
KEEP_REPLACED = """
    INSERT INTO summary_history
    SELECT session_id, title, summary, model, host, source_tier, route_reason, verdict, fidelity, code_version,
           input_revision, origin, run_id, created_at, ?, ?
    FROM session_summaries WHERE session_id = ?
"""


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
