"""Session summaries and the sweeps that make them: which sessions are pending, the sweep's queue
behind the churn gate and failure backoff, the lease a run holds while it summarizes, a summary
written (or an export's adopted) with its summary-time graph rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import duckdb

from digest.scheduling import COMPLETE_STEP, UPGRADE_COVERAGE, Candidate, failures_after
from digest.synthesis import FALLBACK_CHARS, SessionSummary
from digest.verdict import Verdict
from resources.store.cards import refresh_cards
from resources.store.connection import Repository, now, record, records
from resources.store.fidelity import judge_stored, refresh_fidelity
from resources.store.graph import write_summary_graphs
from resources.store.summary_history import BY_IMPORT, close_requests, keep_replaced, keep_replaced_rows
from resources.store.summary_row import SUMMARY_ROW, adopt_columns

# The sessions with no summary, or whose turns changed since it was made; retired sessions
# (archived with --retire) are left out: they are out of every sweep. Rows: `sessions` columns.
PENDING_SUMMARY_SESSIONS = """
    SELECT s.* FROM sessions s LEFT JOIN session_summaries x USING (session_id)
    WHERE (x.session_id IS NULL OR x.input_revision <> s.input_revision)
      AND s.session_id NOT IN (SELECT session_id FROM retired_sessions)
"""

# The sweep's sizes of the sessions in the CTE `picked` (`session_id`, `summary_step`: the step of
# the degraded summary an upgrade replaces, else NULL), newest first (rows: `Candidate` fields).
CANDIDATES_PICKED = f"""
    SELECT s.partition_key, s.session_id, s.last_activity_ms, s.turn_count, s.raw_bytes,
           sum(least(coalesce(length(m.text), length(t.document)), {FALLBACK_CHARS}))::BIGINT,
           count(m.turn_id), picked.summary_step
    FROM picked JOIN sessions s USING (session_id)
    JOIN turns t ON t.session_id = s.session_id
    LEFT JOIN mini_summaries m ON m.turn_id = t.id
    GROUP BY ALL
    ORDER BY s.last_activity_ms DESC NULLS LAST, s.session_id
"""

# Each session's mini-summary coverage step now, for the sessions of the CTE `stepped`: the one place
# the rule is written (`digest.scheduling` keeps its constants), over the store's counts (a pending
# turn as `PENDING_MINI_SUMMARY_TURNS` has it: no mini summary, not archived). Rows: (session_id, step).
COVERAGE_STEP_SQL = f"""
    SELECT t.session_id,
           CASE WHEN count(*) FILTER (m.turn_id IS NULL AND st.archived_at IS NULL
                                      AND (t.archived_at IS NULL OR st.unarchived_at IS NOT NULL)) = 0
                THEN {COMPLETE_STEP}
                WHEN count(m.turn_id) >= {UPGRADE_COVERAGE} * count(*) THEN 1 ELSE 0 END AS step
    FROM turns t
    LEFT JOIN mini_summaries m ON m.turn_id = t.id
    LEFT JOIN mini_summary_state st ON st.turn_id = t.id
    WHERE t.session_id IN (SELECT session_id FROM stepped)
    GROUP BY 1
"""

# An exported summary is current when it was made from the turns as they are: its
# `dreamInputRevision` is the session's input revision or, without one, the original's own rule,
# its `memoryCount` is the session's turn count. A current one stands as the session's summary,
# with its provenance as exported (an absent `sourceTier` predates the degraded path: raw), unless
# the session already has a summary of these turns.
_ADOPTED = adopt_columns()
# The sessions (of the parameter) whose current imported summary is adopted, over `i`, `s` and `x`.
_ADOPTABLE = """
    s.session_id IN (SELECT unnest(?::VARCHAR[]))
      AND (i.input_revision = s.input_revision OR (i.input_revision IS NULL AND i.memory_count = s.turn_count))
      AND trim(coalesce(i.summary, '')) <> ''
      AND (x.session_id IS NULL OR x.input_revision <> s.input_revision)
"""
# The summaries an adoption replaces: made of turns that changed since.
REPLACED_BY_ADOPTION = f"""
    SELECT x.* FROM imported_summaries i JOIN sessions s USING (session_id) JOIN session_summaries x USING (session_id)
    WHERE {_ADOPTABLE}
"""
ADOPT_IMPORTED_SUMMARIES = f"""
    INSERT INTO session_summaries ({", ".join(c.name for c in _ADOPTED)})
    WITH minis AS (
        SELECT t.session_id, count(*) AS n FROM turns t JOIN mini_summaries m ON m.turn_id = t.id
        WHERE t.session_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY 1
    )
    SELECT {", ".join(c.imported for c in _ADOPTED)}
    FROM imported_summaries i
    JOIN sessions s USING (session_id)
    LEFT JOIN session_summaries x USING (session_id)
    LEFT JOIN minis USING (session_id)
    WHERE {_ADOPTABLE}
    ON CONFLICT (session_id) DO UPDATE SET {", ".join(f"{c.name} = excluded.{c.name}" for c in _ADOPTED[1:])}
    RETURNING *
"""


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


def covered_turns_query(session_id: str) -> str:
    """A query to paste into any DuckDB client: the turns a session's summary covered, in prompt order,
    each with whether it went by its mini summary (a degraded summary's others went truncated raw)."""
    quoted = "'" + session_id.replace("'", "''") + "'"
    return (
        "SELECT list_position(x.covered_turn_ids, t.id) AS position, t.id, t.ts_ms, "
        "coalesce(list_contains(x.mini_turn_ids, t.id), false) AS by_mini_summary, m.text AS mini_summary, t.document "
        "FROM session_summaries x JOIN turns t ON t.session_id = x.session_id AND list_contains(x.covered_turn_ids, t.id) "
        f"LEFT JOIN mini_summaries m ON m.turn_id = t.id WHERE x.session_id = {quoted} ORDER BY position"
    )


def active_sql(now_ms: int, idle_ms: int) -> str:
    """The churn gate: the session's newest turn is within the idle window, or a harness log of it
    grew since it was first read and was last written within the window (a long turn still running
    adds events, not turns: `ingest_files.grown_ms`, docs/ingest.md#growing-files)."""
    return f"""(coalesce({now_ms} - s.last_activity_ms BETWEEN 0 AND {idle_ms - 1}, false)
        OR s.session_id IN (SELECT unnest(sessions) FROM ingest_files
                            WHERE {now_ms} - grown_ms BETWEEN 0 AND {idle_ms - 1}))"""


def summary_gates(now_ms: int, idle_window_s: float) -> str:
    """The pending sessions (`sessions` columns) with the sweep's two gates: `active` (within the
    idle window) and `backing_off` (in failure backoff at the session's current turns)."""
    idle_ms = int(idle_window_s * 1000)
    return f"""
        SELECT s.*,
               {active_sql(now_ms, idle_ms)} AS active,
               coalesce(st.backoff_until_ms > {now_ms} AND st.failed_revision = s.input_revision, false)
                   AS backing_off
        FROM ({PENDING_SUMMARY_SESSIONS}) s
        LEFT JOIN summary_state st USING (session_id)
    """


def adopt_imported_summaries(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> None:
    """Let a current imported summary stand as the summary of these sessions, graph rows and all;
    one that says its session was digested at these turns marks it digested."""
    # Most sessions (every harness log's) have no imported summary: the three joins are skipped.
    imported = [
        r[0]
        for r in con.execute(
            "SELECT session_id FROM imported_summaries WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [session_ids]
        ).fetchall()
    ]
    if imported:
        keep_replaced_rows(con, REPLACED_BY_ADOPTION, [imported], BY_IMPORT)
        write_summary_graphs(con, records(con, ADOPT_IMPORTED_SUMMARIES, [imported, now(), imported]))
        con.execute(MARK_IMPORTED_DIGESTS, [now(), imported])
    # The sessions' turns changed or their summary did: score them again.
    refresh_fidelity(con, session_ids)


# The session's summary of these turns when its verdict is ok (generated or imported): no junk one
# replaces it.
CURRENT_OK_SUMMARY = """
    SELECT origin, run_id, created_at FROM session_summaries
    WHERE session_id = ? AND input_revision = ? AND verdict = 'ok'
"""


@dataclass(frozen=True)
class SummaryWrite:
    """What `write_summary` did: the summary's verdict, and `kept`, why it was not written (a junk
    summary and a current ok one standing); None: written."""

    verdict: Verdict
    kept: str | None = None


class Summaries(Repository):
    def pending_summary_keys(self, limit: int | None = None) -> list[str]:
        """Sessions with no summary, or whose turns changed since it: newest activity first."""
        sql = f"SELECT partition_key FROM ({PENDING_SUMMARY_SESSIONS}) ORDER BY last_activity_ms DESC NULLS LAST, session_id"
        with self.file.connect() as con:
            rows = con.execute(sql + (f" LIMIT {int(limit)}" if limit else "")).fetchall()
        return [r[0] for r in rows]

    def write_summary(
        self,
        summary: SessionSummary,
        run_id: str | None = None,
        host: str | None = None,
        host_reason: str | None = None,
        coverage_step: int | None = None,
        code_version: str | None = None,
    ) -> SummaryWrite:
        """`host`, `host_reason`: the model host that made it, and why the sweep chose that host;
        `coverage_step`: the session's mini-summary coverage step (`COVERAGE_STEP_SQL`)
        when its turns were read, kept for a degraded summary alone; `code_version`: the summary code
        version it was made under. A junk summary (`digest.verdict`) is not written over a current ok
        one, generated or imported. The summary it replaces goes to `summary_history`, and the
        session's open re-summary request is closed either way (`summary_history.py`)."""
        degraded = summary.source_tier != "raw"
        row = {
            "session_id": summary.session_id,
            **summary.output.model_dump(),  # the model-generated columns
            "source_tier": summary.source_tier,
            "degraded": summary.degraded,
            "raw_canonical": summary.raw_canonical,
            "memory_count": summary.memory_count,
            "mini_summary_count": summary.mini_summary_count,
            "mini_summary_coverage": summary.mini_summary_count / max(1, summary.memory_count) if degraded else None,
            "coverage_step": coverage_step if degraded else None,
            "input_revision": summary.input_revision,
            "model": summary.model,
            "raw_tokens_estimate": summary.raw_tokens_estimate,
            "raw_tokens_source": summary.raw_tokens_source,
            "raw_tokens_counted": summary.raw_tokens_counted,
            "prompt_tokens_estimate": summary.prompt_tokens_estimate,
            "raw_cap_tokens": summary.raw_cap_tokens,
            "raw_cap_source": summary.raw_cap_source,
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
            "host": host,
            "host_reason": host_reason,
            "fidelity": None,  # scored below, from the turns
            "fidelity_found": None,
            "fidelity_missed": None,
            "verdict": None,  # judged below, against the turns
            "verdict_evidence": None,
            "covered_turn_ids": summary.covered_turn_ids,
            "mini_turn_ids": summary.mini_turn_ids,
            "code_version": code_version,
        }
        missing = [c.name for c in SUMMARY_ROW if c.name not in row]
        if missing:
            raise ValueError(f"a summary row without {missing}: fill them in write_summary")
        columns = list(row)
        placeholders = ", ".join("?" for _ in columns)
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c != "session_id")
        with self.file.transaction() as con:
            verdict = judge_stored(
                con, summary.session_id, summary.output.title, summary.output.summary, summary.output.technologies
            )
            previous = record(con, "SELECT * FROM session_summaries WHERE session_id = ?", [summary.session_id])
            if verdict.junk:
                standing = record(con, CURRENT_OK_SUMMARY, [summary.session_id, summary.input_revision])
                if standing:
                    # An upgrade judged junk is not due again at this step: the ok summary stands for it.
                    con.execute(
                        """UPDATE session_summaries SET coverage_step = greatest(coverage_step, ?)
                           WHERE session_id = ? AND origin = 'generated' AND coverage_step IS NOT NULL""",
                        [row["coverage_step"], summary.session_id],
                    )
                    made = f"by run {standing['run_id']}" if standing["run_id"] else f"at {standing['created_at']}"
                    kept = f"a {verdict.label} summary does not replace the current ok {standing['origin']} one (made {made})"
                    made_now = {"model": summary.model, "verdict": verdict.label}
                    close_requests(con, summary.session_id, run_id, previous, made_now, detail=kept)
                    return SummaryWrite(verdict, kept=kept)
            if previous:
                keep_replaced(con, summary.session_id, run_id)
            con.execute(
                f"INSERT INTO session_summaries ({', '.join(columns)}) VALUES ({placeholders}) "
                f"ON CONFLICT (session_id) DO UPDATE SET {updates}",
                list(row.values()),
            )
            write_summary_graphs(con, [row])
            refresh_fidelity(con, [summary.session_id])
            refresh_cards(con, [summary.session_id])  # an ok summary's title is its card's
            close_requests(
                con, summary.session_id, run_id, previous,
                record(con, "SELECT model, verdict, fidelity FROM session_summaries WHERE session_id = ?", [summary.session_id]),
            )  # fmt: skip
        return SummaryWrite(verdict)

    def summary_row(self, session_id: str) -> dict | None:
        with self.file.connect() as con:
            return record(con, "SELECT * FROM session_summaries WHERE session_id = ?", [session_id])

    def summaries_where(self, column: str, values: list[str]) -> list[dict]:
        """Summary rows by `session_id` or `run_id`."""
        if column not in ("session_id", "run_id"):
            raise ValueError(f"summaries are not looked up by {column!r}")
        with self.file.connect() as con:
            return records(
                con,
                f"SELECT * FROM session_summaries WHERE {column} IN (SELECT unnest(?::VARCHAR[])) ORDER BY session_id",
                [values],
            )

    # --- sweeps -----------------------------------------------------------------------------

    def summary_candidate(self, session_id: str) -> Candidate | None:
        """One session's sizes, as a sweep sees them (for a run that places itself on a host)."""
        with self.file.connect() as con:
            row = con.execute(
                f"WITH picked AS (SELECT ?::VARCHAR AS session_id, NULL::INTEGER AS summary_step) {CANDIDATES_PICKED}",
                [session_id],
            ).fetchone()
        return Candidate(*row) if row else None

    def summary_queue(
        self, now_ms: int, idle_window_s: float, newest: int, oldest: int, in_flight: list[str] = ()
    ) -> dict:
        """The pending sessions a sweep may take, the newest `newest` and the oldest `oldest`
        after the churn gate and failure backoff, with how many each gate held back, and how many
        of the others are `in_flight` (partition keys queued or running)."""
        gates = summary_gates(now_ms, idle_window_s)
        with self.file.connect() as con:
            counts = con.execute(
                f"""SELECT count(*), count(*) FILTER (active), count(*) FILTER (backing_off AND NOT active),
                           count(*) FILTER (NOT active AND NOT backing_off
                                            AND partition_key IN (SELECT unnest(?::VARCHAR[])))
                    FROM ({gates})""",
                [list(in_flight)],
            ).fetchone()
            rows = con.execute(
                f"""
                WITH eligible AS (SELECT * FROM ({gates}) WHERE NOT active AND NOT backing_off),
                picked AS (
                    SELECT session_id, NULL::INTEGER AS summary_step FROM (
                        (SELECT session_id FROM eligible ORDER BY last_activity_ms DESC NULLS LAST, session_id LIMIT {int(newest)})
                        UNION
                        (SELECT session_id FROM eligible ORDER BY last_activity_ms ASC NULLS FIRST, session_id LIMIT {int(oldest)})
                    )
                )
                {CANDIDATES_PICKED}
                """
            ).fetchall()
        return {
            "pending": counts[0],
            "active": counts[1],
            "backing_off": counts[2],
            "in_flight": counts[3],
            "candidates": [Candidate(*row) for row in rows],
        }

    def upgrade_queue(self, now_ms: int, idle_window_s: float, limit: int) -> list[Candidate]:
        """Sessions whose pre-routed degraded summary is current for their turns but was made at a
        lower mini-summary coverage step than they have now (`COVERAGE_STEP_SQL`),
        newest first, at most `limit`, behind the churn gate and failure backoff as pending ones.
        Imported summaries are the export's word and are not made again."""
        idle_ms = int(idle_window_s * 1000)
        with self.file.connect() as con:
            rows = con.execute(
                f"""
                WITH stepped AS (
                    SELECT x.session_id, x.coverage_step, s.last_activity_ms
                    FROM session_summaries x JOIN sessions s USING (session_id)
                    LEFT JOIN summary_state st USING (session_id)
                    WHERE x.origin = 'generated' AND x.coverage_step < {COMPLETE_STEP}
                      AND x.route_reason IN ('over-raw-cap', 'over-safe-band')
                      AND x.input_revision = s.input_revision
                      AND s.session_id NOT IN (SELECT session_id FROM retired_sessions)
                      AND NOT {active_sql(now_ms, idle_ms)}
                      AND NOT coalesce(st.backoff_until_ms > {now_ms} AND st.failed_revision = s.input_revision, false)
                ),
                picked AS (
                    SELECT session_id, coverage_step AS summary_step FROM stepped
                    JOIN ({COVERAGE_STEP_SQL}) now_at USING (session_id)
                    WHERE now_at.step > stepped.coverage_step
                    ORDER BY last_activity_ms DESC NULLS LAST, session_id LIMIT {int(limit)}
                )
                {CANDIDATES_PICKED}
                """
            ).fetchall()
        return [Candidate(*row) for row in rows]

    def held_later_work(self, now_ms: int, idle_window_s: float) -> dict[str, dict[str, int]]:
        """The upgrades due and the re-summaries asked for that the sweep's gates hold back, by kind
        (`upgrades`, `resummaries`): how many within the idle window (`active`) and how many in
        failure backoff (`backing_off`). What a sweep with nothing to launch says waits."""
        idle_ms = int(idle_window_s * 1000)
        with self.file.connect() as con:
            rows = con.execute(
                f"""
                WITH stepped AS (
                    SELECT x.session_id, x.coverage_step FROM session_summaries x JOIN sessions s USING (session_id)
                    WHERE x.origin = 'generated' AND x.coverage_step < {COMPLETE_STEP}
                      AND x.route_reason IN ('over-raw-cap', 'over-safe-band') AND x.input_revision = s.input_revision
                ),
                later AS (
                    SELECT 'upgrades' AS kind, session_id FROM stepped JOIN ({COVERAGE_STEP_SQL}) now_at USING (session_id)
                    WHERE now_at.step > stepped.coverage_step
                    UNION
                    SELECT 'resummaries', r.session_id FROM resummary_requests r
                    JOIN session_summaries x USING (session_id) JOIN sessions s USING (session_id)
                    WHERE r.done_at IS NULL AND x.input_revision = s.input_revision
                )
                SELECT kind,
                       count(*) FILTER (coalesce({now_ms} - s.last_activity_ms BETWEEN 0 AND {idle_ms - 1}, false)),
                       count(*) FILTER (NOT coalesce({now_ms} - s.last_activity_ms BETWEEN 0 AND {idle_ms - 1}, false)
                                        AND coalesce(st.backoff_until_ms > {now_ms}
                                                     AND st.failed_revision = s.input_revision, false))
                FROM later JOIN sessions s USING (session_id) LEFT JOIN summary_state st USING (session_id)
                WHERE s.session_id NOT IN (SELECT session_id FROM retired_sessions)
                GROUP BY kind ORDER BY kind
                """
            ).fetchall()
        return {kind: {"active": active, "backing_off": backing_off} for kind, active, backing_off in rows}

    def coverage_steps(self, session_ids: list[str]) -> dict[str, int]:
        """Each session's mini-summary coverage step now (`COVERAGE_STEP_SQL`)."""
        with self.file.connect() as con:
            rows = con.execute(
                f"WITH stepped AS (SELECT unnest(?::VARCHAR[]) AS session_id) {COVERAGE_STEP_SQL}", [session_ids]
            ).fetchall()
        return dict(rows)

    # --- failure backoff --------------------------------------------------------------------

    def record_summary_failure(
        self, session_id: str, revision: str, symptom: str, now_ms: int, backoff_s: Callable[[int], float]
    ) -> int:
        """Count a failure (from 1 again when the turns changed: `digest.scheduling.failures_after`)
        and back the session off by `backoff_s(failures)` from now, in one transaction; returns the
        failure count."""
        with self.file.transaction() as con:
            row = con.execute(
                "SELECT failures, failed_revision FROM summary_state WHERE session_id = ?", [session_id]
            ).fetchone()
            failures = failures_after(row, revision)
            con.execute(
                """INSERT OR REPLACE INTO summary_state VALUES (?, ?, ?, ?, ?, ?)""",
                [session_id, failures, symptom, revision, now_ms + int(backoff_s(failures) * 1000), now()],
            )
        return failures

    def clear_summary_failures(self, session_id: str) -> None:
        with self.file.connect() as con:
            con.execute("DELETE FROM summary_state WHERE session_id = ?", [session_id])

    # --- leases -----------------------------------------------------------------------------

    def claim_summary_lease(self, session_id: str, run_id: str, now_ms: int, ttl_s: float) -> str | None:
        """Claim the session for this run; returns None when granted, else the holding run's id.
        An expired lease (a crashed run) is taken over, and every other expired one is dropped."""
        with self.file.transaction() as con:
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
        with self.file.connect() as con:
            con.execute("DELETE FROM summary_leases WHERE session_id = ? AND run_id = ?", [session_id, run_id])

    def release_leases_of_runs(self, run_ids: list[str]) -> None:
        """Every lease these (dead) runs hold."""
        with self.file.connect() as con:
            con.execute("DELETE FROM summary_leases WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [run_ids])

    def summary_standing(self, session_id: str) -> dict | None:
        """What a summary run reads under the lease before its model work (and a sweep just before
        the run): the session's current revision, its summary's, whether it is retired, its failure
        backoff, whether a re-summary of it is asked for. None: no such session."""
        with self.file.connect() as con:
            return record(
                con,
                f"""WITH stepped AS (SELECT ?::VARCHAR AS session_id)
                   SELECT s.input_revision, x.input_revision AS summary_revision, x.run_id AS summary_run_id,
                          r.archive_id AS retired_by, st.failures, st.failed_revision, st.backoff_until_ms,
                          x.coverage_step AS summary_step, now_at.step AS coverage_step,
                          s.session_id IN (SELECT session_id FROM resummary_requests WHERE done_at IS NULL)
                              AS resummary_requested
                   FROM sessions s
                   LEFT JOIN ({COVERAGE_STEP_SQL}) now_at USING (session_id)
                   LEFT JOIN session_summaries x USING (session_id)
                   LEFT JOIN retired_sessions r USING (session_id)
                   LEFT JOIN summary_state st USING (session_id)
                   WHERE s.session_id = ?""",
                [session_id, session_id],
            )
