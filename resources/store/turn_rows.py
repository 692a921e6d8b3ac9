"""Rows derived from each turn's text (`turn_facts`; the turns' own `terms`): written in the
transaction that writes their turns, in place of what those turns had, and extracted again from
the stored turns (a migration, a restore, a redaction) in batches."""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from resources.store.connection import batch_source, records

# Turns read per batch when rows are extracted again from stored turns.
BACKFILL_BATCH_TURNS = 2000


def replace_turn_rows(
    con: duckdb.DuckDBPyConnection, table: str, columns: list[str], rows: list[dict], turn_ids: list[str]
) -> int:
    """`rows` (of the table's `columns`) in place of the rows `table` held for these turns; returns
    the rows written. In the caller's transaction."""
    con.execute(f"DELETE FROM {table} WHERE turn_id IN (SELECT unnest(?::VARCHAR[]))", [turn_ids])
    if rows:
        with batch_source(con, "turn_rows_batch", columns, rows) as (source, params):
            con.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT * FROM {source}", params)
    return len(rows)


def refresh_turn_rows(
    con: duckdb.DuckDBPyConnection,
    table: str | None,
    turn_columns: list[str],
    replace: Callable[[duckdb.DuckDBPyConnection, list[dict]], int],
    session_ids: list[str] | None = None,
) -> int:
    """`table`'s rows made again by `replace` from the stored turns' `turn_columns` (`id` first):
    these sessions' turns (None: every turn), in batches of `BACKFILL_BATCH_TURNS` so memory stays
    bounded; rows of turns no longer stored go (`table` None: `replace` writes into the turns
    themselves). Returns the rows written."""
    scope = "" if session_ids is None else "WHERE session_id IN (SELECT unnest(?::VARCHAR[]))"
    params = [] if session_ids is None else [sorted(set(session_ids))]
    if table is not None:
        con.execute(f"DELETE FROM {table} {scope}", params)
    written, after = 0, ""
    while True:
        where = scope + (" AND " if scope else "WHERE ") + "id > ?"
        rows = records(
            con,
            f"SELECT {', '.join(turn_columns)} FROM turns {where} ORDER BY id LIMIT {BACKFILL_BATCH_TURNS}",
            [*params, after],
        )
        if not rows:
            return written
        written += replace(con, rows)
        after = rows[-1]["id"]
