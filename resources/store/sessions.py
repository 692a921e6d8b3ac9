"""Turns as the summarizer and the graph read them back, and the `sessions` rows derived from them
(`digest.turns.session_rows`): what every later stage looks a session up by."""

from __future__ import annotations

from collections.abc import Iterable

import duckdb

from digest.turns import Turn, id_sort_key, session_rows
from resources.store.connection import Repository, batch_source, now, record, records, upsert_sql


def load_turns(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> list[Turn]:
    rows = con.execute(
        """
        SELECT t.id, t.session_id, t.document, t.ts_ms, t.agent, t.agent_identity, t.model, t.user_id,
               t.amount_tool_calls, t.tools_used, m.text
        FROM turns t LEFT JOIN mini_summaries m ON m.turn_id = t.id
        WHERE t.session_id IN (SELECT unnest(?::VARCHAR[]))
        """,
        [session_ids],
    ).fetchall()
    return [Turn(*row) for row in rows]


# Where each session ran and was read from: its latest turn's project and branch that has one, and
# its latest turn's file (latest: by ts_ms, a missing one as 0 as in the canonical order, then id). Not part of the input
# revision: knowing the project changes nothing a summary reads.
SESSION_PLACES = """
    SELECT session_id,
           arg_max(project, (coalesce(ts_ms, 0), id)) FILTER (WHERE project IS NOT NULL),
           arg_max(git_branch, (coalesce(ts_ms, 0), id)) FILTER (WHERE git_branch IS NOT NULL),
           arg_max(source_file, (coalesce(ts_ms, 0), id))
    FROM turns WHERE session_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY session_id
"""


def derived_session_rows(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> list[dict]:
    """The `sessions` rows of these sessions as their stored turns make them (none for a session
    with no turns)."""
    stamp = now()
    places = {sid: rest for sid, *rest in con.execute(SESSION_PLACES, [session_ids]).fetchall()}
    return [
        {**row, "updated_at": stamp, **dict(zip(("project", "git_branch", "source_path"), places[row["session_id"]]))}
        for row in session_rows(load_turns(con, session_ids))
    ]


def upsert_sessions(con: duckdb.DuckDBPyConnection, rows: list[dict]) -> None:
    if rows:
        columns = list(rows[0])
        with batch_source(con, "batch", columns, rows) as (source, params):
            con.execute(upsert_sql("sessions", columns, ["session_id"], source=source), params)


def _turn_rows(con: duckdb.DuckDBPyConnection, turn_ids: list[str]) -> list[dict]:
    rows = records(
        con,
        """SELECT id, session_id, ts_ms, type, prompt, thought, response, agent, model, amount_tool_calls, tools_used
           FROM turns WHERE id IN (SELECT unnest(?::VARCHAR[]))""",
        [list(turn_ids)],
    )
    by_id = {r["id"]: r for r in rows}
    return [by_id[i] for i in turn_ids if i in by_id]


class Sessions(Repository):
    def session_rows(self, session_ids: Iterable[str]) -> list[dict]:
        """The stored `sessions` rows of these sessions (those that have one)."""
        with self.file.connect() as con:
            return records(
                con,
                "SELECT * FROM sessions WHERE session_id IN (SELECT unnest(?::VARCHAR[]))",
                [sorted(set(session_ids))],
            )

    def load_turns(self, session_ids: list[str]) -> list[Turn]:
        with self.file.connect() as con:
            return load_turns(con, session_ids)

    def turn_page(self, session_id: str, offset: int = 0, limit: int = 100) -> tuple[int, list[dict]]:
        """The session's turn count, and `limit` of its turns from `offset` in canonical order (oldest
        first), as `turns_by_id` gives them."""
        with self.file.connect() as con:
            keys = con.execute("SELECT id, ts_ms FROM turns WHERE session_id = ?", [session_id]).fetchall()
            ordered = sorted(keys, key=lambda k: (k[1] or 0, id_sort_key(k[0]), k[0]))
            page = [k[0] for k in ordered[max(0, offset) : max(0, offset) + max(0, limit)]]
            return len(keys), _turn_rows(con, page)

    def turns_by_id(self, turn_ids: list[str]) -> list[dict]:
        """These turns (in this order, those stored): id, session, time, type, prompt, thought,
        response, agent, model, tool calls and tools used."""
        with self.file.connect() as con:
            return _turn_rows(con, turn_ids)

    def session_by_partition(self, key: str) -> dict | None:
        with self.file.connect() as con:
            return record(con, "SELECT * FROM sessions WHERE partition_key = ?", [key])

    def partition_keys(self) -> list[str]:
        with self.file.connect() as con:
            return [r[0] for r in con.execute("SELECT partition_key FROM sessions ORDER BY partition_key").fetchall()]

    def resolve_sessions(self, refs: list[str]) -> list[str]:
        """Session ids for session ids or partition keys; ValueError naming any that is neither."""
        with self.file.connect() as con:
            rows = con.execute(
                "SELECT session_id, partition_key FROM sessions "
                "WHERE session_id IN (SELECT unnest(?::VARCHAR[])) OR partition_key IN (SELECT unnest(?::VARCHAR[]))",
                [refs, refs],
            ).fetchall()
        by_ref = {ref: sid for sid, key in rows for ref in (sid, key)}
        unknown = [ref for ref in refs if ref not in by_ref]
        if unknown:
            raise ValueError(f"no such session: {', '.join(unknown)}")
        return sorted({by_ref[ref] for ref in refs})
