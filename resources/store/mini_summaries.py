"""Per-turn mini summaries (`digest.mini_summaries` makes them): the turns still needing one, each
turn's failed attempts and archive, each session's backoff, and the sessions pending one."""

from __future__ import annotations

import duckdb

from digest.mini_summaries import (
    ARCHIVE_JUNK,
    PendingSession,
    PendingTurn,
    archive_reason_after,
    clean_output,
    headed_for_degraded,
    order_sessions,
    turn_document,
)
from digest.synthesis import Limits
from digest.verdict import judge_mini
from resources.store.connection import Repository, now
from resources.store.ledger import RunLedger

# Turns that still need a mini summary: none yet, and not archived (by us, or by the export unless
# un-archived here). The thought is not selected: it never reaches the mini summary prompt.
PENDING_MINI_SUMMARY_TURNS = """
    SELECT t.id, t.session_id, t.ts_ms, t.prompt, t.response, t.document
    FROM turns t
    LEFT JOIN mini_summaries m ON m.turn_id = t.id
    LEFT JOIN mini_summary_state st ON st.turn_id = t.id
    WHERE m.turn_id IS NULL AND st.archived_at IS NULL AND (t.archived_at IS NULL OR st.unarchived_at IS NOT NULL)
"""


def judge_stored_mini_summaries(con: duckdb.DuckDBPyConnection) -> int:
    """The generated mini summaries judged (`digest.verdict.judge_mini`) and cleaned as a reply is now:
    a junk one goes and its turn is archived (the turn's own text stands for it, in a degraded
    summary's input, in search and in its vectors, which follow at the next refresh); a kept one loses
    the prompt's repeat markers it copied. Imported ones are the export's own and stay. Returns how
    many went."""
    rows = con.execute(
        """SELECT t.id, t.session_id, t.ts_ms, t.prompt, t.response, t.document, m.text
           FROM mini_summaries m JOIN turns t ON t.id = m.turn_id WHERE m.origin = 'generated'"""
    ).fetchall()
    junk = []
    for row in rows:
        if judge_mini(turn_document(PendingTurn(*row[:6])), row[6]).junk:
            junk.append((row[0], row[1]))
        elif (cleaned := clean_output(row[6])) != row[6]:
            con.execute("UPDATE mini_summaries SET text = ? WHERE turn_id = ?", [cleaned, row[0]])
    for turn_id, session_id in junk:
        con.execute("DELETE FROM mini_summaries WHERE turn_id = ?", [turn_id])
        archive(con, turn_id, session_id, ARCHIVE_JUNK)
    return len(junk)


def owe_upgrades_of_summaries_from_junk(con: duckdb.DuckDBPyConnection) -> int:
    """A generated degraded summary that carried a mini summary since judged junk (its turn archived
    `junk-output`) goes back to coverage step 0: the sweep's upgrade queue makes it again, that
    turn's own text in place of the junk line, once its session's step is higher. Returns how many."""
    (count,) = con.execute(
        """UPDATE session_summaries x SET coverage_step = 0
           WHERE x.origin = 'generated' AND x.coverage_step > 0
             AND EXISTS (SELECT 1 FROM mini_summary_state st
                         WHERE st.turn_id IN (SELECT unnest(x.mini_turn_ids)) AND st.archived_reason = ?)""",
        [ARCHIVE_JUNK],
    ).fetchone()  # DuckDB answers an UPDATE with the rows it changed
    return count


def archive(con: duckdb.DuckDBPyConnection, turn_id: str, session_id: str, reason: str) -> None:
    """Out of mini summary generation; the turn keeps its text and stays in the raw summary input."""
    stamp = now()
    con.execute(
        """INSERT INTO mini_summary_state (turn_id, session_id, attempts, archived_at, archived_reason, updated_at)
               VALUES (?, ?, 0, ?, ?, ?)
               ON CONFLICT (turn_id) DO UPDATE SET archived_at = excluded.archived_at,
                   archived_reason = excluded.archived_reason, updated_at = excluded.updated_at""",
        [turn_id, session_id, stamp, reason, stamp],
    )


class MiniSummaries(Repository):
    def pending_mini_summary_turns(self, session_id: str) -> list[PendingTurn]:
        with self.file.connect() as con:
            rows = con.execute(
                f"SELECT * FROM ({PENDING_MINI_SUMMARY_TURNS}) WHERE session_id = ?", [session_id]
            ).fetchall()
        return [PendingTurn(*row) for row in rows]

    def mini_summary_pending(self, turn_id: str) -> bool:
        with self.file.connect() as con:
            row = con.execute(f"SELECT count(*) FROM ({PENDING_MINI_SUMMARY_TURNS}) WHERE id = ?", [turn_id]).fetchone()
        return row[0] > 0

    def pending_mini_summary_sessions(self, now_ms: int) -> list[PendingSession]:
        """Sessions with turns that need a mini summary and no backoff in force, in no order."""
        with self.file.connect() as con:
            rows = con.execute(
                f"""SELECT DISTINCT s.partition_key, s.session_id, s.raw_bytes, s.turn_count, s.last_activity_ms
                    FROM ({PENDING_MINI_SUMMARY_TURNS}) p
                    JOIN sessions s ON s.session_id = p.session_id
                    LEFT JOIN backfill_state b ON b.session_id = p.session_id
                    WHERE (b.backoff_until_ms IS NULL OR b.backoff_until_ms <= ?)
                      AND p.session_id NOT IN (SELECT session_id FROM retired_sessions)""",
                [now_ms],
            ).fetchall()
        return [PendingSession(*row) for row in rows]

    def save_generated_mini_summary(self, turn_id: str, session_id: str, text: str, model: str) -> None:
        """Never over an existing one: an imported mini summary is the source system's word."""
        with self.file.connect() as con:
            con.execute(
                """INSERT INTO mini_summaries (turn_id, session_id, text, origin, model, created_at)
                   VALUES (?, ?, ?, 'generated', ?, ?) ON CONFLICT (turn_id) DO NOTHING""",
                [turn_id, session_id, text, model, now()],
            )

    def pending_mini_summary_keys(
        self, limits: Limits, priority: str, now_ms: int, limit: int | None = None
    ) -> list[str]:
        """Sessions with turns that need a mini summary and no backoff in force, in priority order
        (`digest.mini_summaries.order_sessions`)."""
        ordered = order_sessions(self.pending_mini_summary_sessions(now_ms), limits, priority)
        return [s.partition_key for s in ordered[:limit]]

    def pending_degraded_mini_summary_keys(self, limits: Limits, now_ms: int) -> list[str]:
        """Of those, the sessions headed for the degraded path, the one where a mini summary reaches
        a summary (`digest.mini_summaries.headed_for_degraded`), by partition key."""
        sessions = self.pending_mini_summary_sessions(now_ms)
        return sorted(s.partition_key for s in sessions if headed_for_degraded(s.raw_bytes, s.turn_count, limits))

    def record_mini_summary_failure(self, turn_id: str, session_id: str, cause: str, max_attempts: int) -> bool:
        """Count a failed attempt, and archive the turn when `digest.mini_summaries.archive_reason_after`
        says so (at `max_attempts`), in one transaction. True if it was archived."""
        with self.file.transaction() as con:
            row = con.execute("SELECT attempts FROM mini_summary_state WHERE turn_id = ?", [turn_id]).fetchone()
            attempts = (row[0] if row else 0) + 1
            reason = archive_reason_after(attempts, max_attempts)
            archived = reason is not None
            stamp = now()
            con.execute(
                """INSERT INTO mini_summary_state (turn_id, session_id, attempts, last_cause, archived_at,
                       archived_reason, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (turn_id) DO UPDATE SET attempts = excluded.attempts, last_cause = excluded.last_cause,
                       archived_at = excluded.archived_at, archived_reason = excluded.archived_reason,
                       updated_at = excluded.updated_at""",
                [turn_id, session_id, attempts, cause, stamp if archived else None, reason, stamp],
            )  # fmt: skip
        return archived

    def archive_turn(self, turn_id: str, session_id: str, reason: str) -> None:
        with self.file.connect() as con:
            archive(con, turn_id, session_id, reason)

    def unarchive_turns(self, turn_ids: list[str] | None = None, session_id: str | None = None) -> list[str]:
        """Give archived turns (ours or the export's) their attempts back; returns their ids."""
        if not turn_ids and not session_id:
            raise ValueError("name turn ids or a session")
        stamp = now()
        with self.file.transaction() as con:
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
                [stamp, stamp, ids],
            )
        return ids

    def record_backfill_run(
        self, session_id: str, attempted: int, generated: int, backoff_until_ms: int | None, run_id: str | None
    ) -> None:
        with self.file.connect() as con:
            con.execute(
                "INSERT OR REPLACE INTO backfill_state VALUES (?, ?, ?, ?, ?, ?)",
                [session_id, backoff_until_ms, attempted, generated, run_id, now()],
            )

    def mini_summary_backoff_until_ms(self, session_id: str) -> int | None:
        with self.file.connect() as con:
            row = con.execute(
                "SELECT backoff_until_ms FROM backfill_state WHERE session_id = ?", [session_id]
            ).fetchone()
        return row[0] if row else None

    def mini_summary_counts(self, session_id: str) -> dict:
        """Coverage of one session: its turns, those with a mini summary by origin, archived, pending."""
        with self.file.connect() as con:
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


class MiniSummaryLedger(RunLedger):
    """Where one mini summary run writes (`digest.mini_summaries.MiniSummaryStore`), as it happens:
    its attempts as any run's (stamped with the host, the outcome on the host's circuit), and the turns'
    mini summaries and failures."""

    def save_mini_summary(self, turn: PendingTurn, text: str, model: str) -> None:
        self.store.mini_summaries.save_generated_mini_summary(turn.id, turn.session_id, text, model)

    def record_failure(self, turn: PendingTurn, cause: str, max_attempts: int) -> bool:
        return self.store.mini_summaries.record_mini_summary_failure(turn.id, turn.session_id, cause, max_attempts)

    def archive(self, turn: PendingTurn, reason: str) -> None:
        self.store.mini_summaries.archive_turn(turn.id, turn.session_id, reason)

    def still_pending(self, turn: PendingTurn) -> bool:
        return self.store.mini_summaries.mini_summary_pending(turn.id)
