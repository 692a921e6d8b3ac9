"""Re-summaries asked for (`digest.resummary`): the current summaries criteria select, the requests
recorded in `resummary_requests`, the sweep's queue of them (taken after new work:
`pipelines.selection.next_summary_batch`), each request closed by the summary its session gets
next, and `summary_history`, the summaries replaced."""

from __future__ import annotations

from digest.resummary import ANY_JUNK, KEPT_PREVIOUS, NOT_CURRENT, REPLACED, ResummaryCriteria
from digest.scheduling import Candidate
from resources.store.connection import Repository, now, records
from resources.store.summaries import CANDIDATES_PICKED, active_sql

# The summaries a re-summary may replace: current for their session's turns (a stale one is pending
# anyway), of a session not retired; of the origin the criteria name (`criteria_sql`).
CURRENT_SUMMARIES = """
    FROM session_summaries x JOIN sessions s USING (session_id)
    WHERE x.input_revision = s.input_revision
      AND s.session_id NOT IN (SELECT session_id FROM retired_sessions)
"""


def criteria_sql(criteria: ResummaryCriteria, current_code_version: str) -> tuple[str, list]:
    """The criteria as conditions on `x` (session_summaries), and their parameters."""
    conditions, params = [], []
    # Generated alone unless asked: an imported summary is the export's word.
    if criteria.origin != "any":
        conditions.append("x.origin = ?")
        params.append(criteria.origin or "generated")
    for column, value in (("model", criteria.model), ("host", criteria.host), ("source_tier", criteria.tier)):
        if value is not None:
            conditions.append(f"x.{column} = ?")
            params.append(value)
    if criteria.code_version == NOT_CURRENT:
        conditions.append("x.code_version IS DISTINCT FROM ?")  # NULL, made before it was recorded: not current
        params.append(current_code_version)
    elif criteria.code_version is not None:
        conditions.append("x.code_version = ?")
        params.append(criteria.code_version)
    if criteria.verdict == ANY_JUNK:
        conditions.append("x.verdict <> 'ok'")
    elif criteria.verdict is not None:
        conditions.append("x.verdict = ?")
        params.append(criteria.verdict)
    if criteria.fidelity_below is not None:
        conditions.append("x.fidelity < ?")
        params.append(criteria.fidelity_below)
    return "".join(f" AND {c}" for c in conditions), params


class Resummaries(Repository):
    def matching(self, criteria: ResummaryCriteria, current_code_version: str) -> list[dict]:
        """The current summaries the criteria select, newest session first."""
        where, params = criteria_sql(criteria, current_code_version)
        with self.file.connect() as con:
            return records(
                con,
                f"""SELECT x.session_id, s.partition_key, x.model, x.host, x.code_version, x.source_tier,
                           x.route_reason, x.verdict, x.fidelity, x.run_id, x.created_at
                    {CURRENT_SUMMARIES} {where}
                    ORDER BY s.last_activity_ms DESC NULLS LAST, x.session_id""",
                params,
            )

    def candidates(self, session_ids: list[str]) -> list[Candidate]:
        """These sessions' sizes as a sweep sees them, each marked a re-summary."""
        with self.file.connect() as con:
            rows = con.execute(
                f"""WITH picked AS (SELECT unnest(?::VARCHAR[]) AS session_id, NULL::INTEGER AS summary_step)
                    {CANDIDATES_PICKED}""",
                [session_ids],
            ).fetchall()
        return [Candidate(*row, resummary=True) for row in rows]

    def record_requests(self, criteria: ResummaryCriteria, session_ids: list[str]) -> dict:
        """A request for each session without an open one; how many were recorded and already open."""
        with self.file.transaction() as con:
            already = con.execute(
                "SELECT count(DISTINCT session_id) FROM resummary_requests WHERE done_at IS NULL "
                "AND session_id IN (SELECT unnest(?::VARCHAR[]))",
                [session_ids],
            ).fetchone()[0]
            recorded = con.execute(
                """INSERT INTO resummary_requests (request_id, session_id, criteria, requested_at)
                   SELECT uuid()::VARCHAR, session_id, ?, ? FROM (SELECT DISTINCT unnest(?::VARCHAR[]) AS session_id)
                   WHERE session_id NOT IN (SELECT session_id FROM resummary_requests WHERE done_at IS NULL)""",
                [criteria.to_json(), now(), session_ids],
            ).fetchone()[0]
        return {"recorded": recorded, "already_requested": already}

    def resummary_queue(self, now_ms: int, idle_window_s: float, limit: int) -> list[Candidate]:
        """The open requests a sweep may take now, oldest request first, at most `limit`: their
        session's summary current (else the session is pending, its next summary closes the request),
        behind the churn gate and failure backoff as pending sessions are."""
        idle_ms = int(idle_window_s * 1000)
        with self.file.connect() as con:
            rows = con.execute(
                f"""
                WITH picked AS (
                    SELECT r.session_id, NULL::INTEGER AS summary_step
                    FROM resummary_requests r JOIN session_summaries x USING (session_id)
                    JOIN sessions s USING (session_id) LEFT JOIN summary_state st USING (session_id)
                    WHERE r.done_at IS NULL AND x.input_revision = s.input_revision
                      AND s.session_id NOT IN (SELECT session_id FROM retired_sessions)
                      AND NOT {active_sql(now_ms, idle_ms)}
                      AND NOT coalesce(st.backoff_until_ms > {now_ms} AND st.failed_revision = s.input_revision, false)
                    ORDER BY r.requested_at, s.last_activity_ms DESC NULLS LAST, r.session_id LIMIT {int(limit)}
                )
                {CANDIDATES_PICKED}
                """
            ).fetchall()
        return [Candidate(*row, resummary=True) for row in rows]

    def queue_counts(self) -> dict:
        """For `status`: requests recorded, done (replaced, or the previous summary kept), waiting."""
        with self.file.connect() as con:
            row = con.execute(
                f"""SELECT count(*), count(done_at), count(*) FILTER (outcome = '{REPLACED}'),
                           count(*) FILTER (outcome = '{KEPT_PREVIOUS}'), count(*) FILTER (done_at IS NULL)
                    FROM resummary_requests"""
            ).fetchone()
        return dict(zip(("requested", "done", "replaced", "kept_previous", "waiting"), row, strict=True))

    def finished(self) -> list[dict]:
        """The done requests with their before and after (the friction report's before/after)."""
        with self.file.connect() as con:
            return records(
                con,
                """SELECT session_id, run_id, outcome, previous_model, previous_verdict, previous_fidelity,
                          new_model, new_verdict, new_fidelity
                   FROM resummary_requests WHERE done_at IS NOT NULL ORDER BY done_at, session_id""",
            )

    def history(self, session_id: str) -> list[dict]:
        """The session's replaced summaries, oldest first."""
        with self.file.connect() as con:
            return records(con, "SELECT * FROM summary_history WHERE session_id = ? ORDER BY replaced_at", [session_id])
