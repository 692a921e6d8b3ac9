"""The response cache (`resources/response_cache.py` reads and writes through it): usable model
replies by request, reused by reruns, and a summary's reply staged until its summary is written."""

from __future__ import annotations

import duckdb

from digest.model_api import ChatReply
from resources.store.connection import Repository, now
from resources.store.summaries import PENDING_SUMMARY_SESSIONS


def mark_staged_attempts_recorded(con: duckdb.DuckDBPyConnection, session_id: str) -> None:
    """In the transaction that writes a session's summary-call attempt: its staged reply's call
    is in the ledger now."""
    con.execute(
        "UPDATE response_cache SET attempt_recorded = NULL WHERE session_id = ? AND attempt_recorded = false",
        [session_id],
    )


class Cache(Repository):
    def cached_reply(self, key: str, session: tuple[str, str] | None = None) -> ChatReply | None:
        """The stored reply for this request; with `session`, only one staged by that session at
        that input revision. Replayed, it took no model time: duration 0, `cached`. A staged reply
        whose call left no `attempts` row (its run was killed in between) is that call: returned
        as it came, not cached, with its duration, so the ledger records the call the host served."""
        sql = (
            "SELECT text, prompt_tokens, completion_tokens, finish_reason, duration_s, attempt_recorded "
            "FROM response_cache WHERE request_key = ?"
        )
        params = [key]
        if session is not None:
            sql += " AND session_id = ? AND input_revision = ?"
            params += list(session)
        with self.file.connect() as con:
            row = con.execute(sql, params).fetchone()
        if row is None:
            return None
        text, prompt_tokens, completion_tokens, finish_reason, duration_s, recorded = row
        if recorded is False:
            return ChatReply(text, prompt_tokens, completion_tokens, duration_s, finish_reason)
        return ChatReply(text, prompt_tokens, completion_tokens, 0.0, finish_reason, cached=True)

    def save_reply(self, key: str, model: str, reply: ChatReply, session: tuple[str, str] | None = None) -> None:
        session_id, revision = session or (None, None)
        with self.file.connect() as con:
            con.execute(
                "INSERT OR REPLACE INTO response_cache (request_key, model, text, prompt_tokens, completion_tokens, "
                "duration_s, finish_reason, session_id, input_revision, created_at, attempt_recorded) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [key, model, reply.text, reply.prompt_tokens, reply.completion_tokens, reply.duration_s,
                 reply.finish_reason, session_id, revision, now(), False if session_id is not None else None],
            )  # fmt: skip

    def drop_staged_replies(self, session_id: str) -> None:
        """With reuse off, a session's staged reply goes once its summary is written."""
        with self.file.connect() as con:
            con.execute("DELETE FROM response_cache WHERE session_id = ?", [session_id])

    def clear_response_cache(self) -> int:
        with self.file.connect() as con:
            return con.execute("DELETE FROM response_cache").fetchone()[0]

    def staged_summary_keys(self, now_ms: int | None = None) -> list[str]:
        """Pending sessions with a reply staged at their current turns: a run died between the model
        call and the summary write. Their rerun finishes without a model call. Given `now_ms`, not
        those in failure backoff at their current turns: a replay that failed (the run raised on the
        session's data after its call) would fail the same way on every sweep."""
        backing_off = (
            ""
            if now_ms is None
            else f"""AND s.session_id NOT IN (SELECT session_id FROM summary_state st
                                             WHERE st.failed_revision = s.input_revision
                                               AND st.backoff_until_ms > {int(now_ms)})"""
        )
        with self.file.connect() as con:
            rows = con.execute(
                f"""SELECT DISTINCT s.partition_key FROM ({PENDING_SUMMARY_SESSIONS}) s
                    WHERE s.session_id IN (SELECT c.session_id FROM response_cache c
                                           WHERE c.input_revision = s.input_revision)
                    {backing_off}
                    ORDER BY 1"""
            ).fetchall()
        return [r[0] for r in rows]
