"""What the `backlog` asset reads: the pending sessions with their sizes, and the drain's figures
(`digest.backlog.Drain`), in one connection."""

from __future__ import annotations

from digest.backlog import Drain
from digest.scheduling import Candidate
from resources.store.connection import Repository
from resources.store.summaries import CANDIDATES_PICKED, PENDING_SUMMARY_SESSIONS, summary_gates

HOUR_MS = 3_600_000


class BacklogReads(Repository):
    def pending_candidates(self, exclude: list[str] = ()) -> list[Candidate]:
        """Every pending session's sizes, as a sweep sees them, newest first; `exclude`: partition
        keys left out (those queued or running)."""
        with self.file.connect() as con:
            rows = con.execute(
                f"""WITH picked AS (
                        SELECT session_id, NULL::INTEGER AS summary_step FROM ({PENDING_SUMMARY_SESSIONS})
                        WHERE partition_key NOT IN (SELECT unnest(?::VARCHAR[])))
                    {CANDIDATES_PICKED}""",
                [list(exclude)],
            ).fetchall()
        return [Candidate(*row) for row in rows]

    def drain(self, now_ms: int, idle_window_s: float) -> Drain:
        hour_ago, day_ago = now_ms - HOUR_MS, now_ms - 24 * HOUR_MS
        with self.file.connect() as con:
            pending, active, backing_off, oldest = con.execute(
                f"""SELECT count(*), count(*) FILTER (active), count(*) FILTER (backing_off AND NOT active),
                           min(epoch_ms(updated_at))
                    FROM ({summary_gates(now_ms, idle_window_s)})"""
            ).fetchone()
            # A run's summaries: an export's adopted or a restore's carry no model time of ours.
            last, hour, day = con.execute(
                f"""SELECT max(epoch_ms(created_at)),
                           count(*) FILTER (epoch_ms(created_at) >= {hour_ago}),
                           count(*) FILTER (epoch_ms(created_at) >= {day_ago})
                    FROM session_summaries WHERE origin = 'generated'"""
            ).fetchone()
            seconds_hour, seconds_day = con.execute(
                f"""SELECT coalesce(sum(duration_s) FILTER (epoch_ms(created_at) >= {hour_ago}), 0),
                           coalesce(sum(duration_s), 0)
                    FROM attempts WHERE NOT cached AND epoch_ms(created_at) >= {day_ago}"""
            ).fetchone()
            tiers = dict(
                con.execute("SELECT source_tier, count(*) FROM session_summaries GROUP BY 1 ORDER BY 1").fetchall()
            )
            verdicts = dict(
                con.execute(
                    "SELECT coalesce(verdict, 'none'), count(*) FROM session_summaries GROUP BY 1 ORDER BY 1"
                ).fetchall()
            )
            resummaries_waiting = con.execute(
                "SELECT count(DISTINCT session_id) FROM resummary_requests WHERE done_at IS NULL"
            ).fetchone()[0]
        return Drain(
            pending=pending,
            active=active,
            backing_off=backing_off,
            oldest_pending_ms=oldest,
            last_finished_ms=last,
            finished_last_hour=hour,
            finished_last_day=day,
            model_seconds_last_hour=float(seconds_hour),
            model_seconds_last_day=float(seconds_day),
            summaries_by_tier=tiers,
            summaries_by_verdict=verdicts,
            resummaries_waiting=resummaries_waiting,
        )
