"""What an ingest writes from an export bundle (`digest.ingest` reads and checks it): turns, the
export's mini summaries and summaries, and the lines it rejected; each write keeps the `sessions`
rows of the sessions it touched up to date in the same transaction."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields

import duckdb

from digest.manifest import FileState
from resources.store.cards import refresh_cards
from resources.store.connection import Repository, batch_source, now, upsert_sql
from resources.store.facts import replace_turn_facts
from resources.store.fidelity import term_columns, terms_sql
from resources.store.sessions import derived_session_rows, upsert_sessions
from resources.store.summaries import adopt_imported_summaries
from resources.store.vectors import split_vectors_sql

TURN_COLUMNS = [
    "id", "session_id", "ts_ms", "type", "prompt", "thought", "response", "document", "document_rebuilt",
    "agent", "agent_identity", "model", "user_id", "amount_tool_calls", "tools_used", "archived_at",
    "archived_reason", "source_file", "source_line", "embedding", "project", "git_branch", "redactions",
]  # fmt: skip
# A reader's row may leave these out: unknown (`project`, `git_branch`), or nothing redacted.
OPTIONAL_TURN_COLUMNS = {"project": None, "git_branch": None, "redactions": None}
# Besides `embedding` (the checked JSON text, kept only for a vector not of float32 origin): the
# vector as numbers (resources/store/vectors.py).
STORED_VECTOR_COLUMNS = ["embedding_f32"]
# Derived from the turn's document as it is written (`resources.store.fidelity.term_columns`).
TERM_COLUMNS = ["terms", "terms_words"]

IMPORTED_SUMMARY_COLUMNS = [
    "session_id", "memory_count", "input_revision", "title", "summary", "source_tier", "source_file", "category",
    "quality", "productivity", "impact", "complexity", "technologies", "degraded", "raw_canonical",
    "participating_agents", "models", "total_tool_calls", "tools_used", "source_agent_identities", "metadata",
    "embedding",
]  # fmt: skip


def refresh_sessions(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> list[dict]:
    """Recompute these sessions' rows from their turns, then let a current imported summary stand
    as the summary of any whose turns it matches; returns the rows."""
    rows = derived_session_rows(con, session_ids)
    # A session all of whose turns moved to another one is gone.
    if gone := sorted(set(session_ids) - {r["session_id"] for r in rows}):
        con.execute("DELETE FROM sessions WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [gone])
    if rows:
        upsert_sessions(con, rows)
        adopt_imported_summaries(con, [r["session_id"] for r in rows])
    refresh_cards(con, session_ids)
    return rows


@contextmanager
def _vector_batch(
    con: duckdb.DuckDBPyConnection, columns: list[str], rows: list[dict], replace: str = ""
) -> Iterator[tuple[str, str, list | None]]:
    """The rows (`batch_source`) for the statements of the block: yields what to select them FROM
    as they are, what to select them FROM with their vectors split into text and numbers
    (`split_vectors_sql`) and their columns converted as `replace` says (a REPLACE list), and the
    parameters of a statement that names either."""
    with batch_source(con, "batch_rows", columns, rows) as (source, params):
        select = f"SELECT * REPLACE ({replace}) FROM" if replace else "SELECT * FROM"
        yield source, f"({select} ({split_vectors_sql(source)}))", params


class Ingest(Repository):
    def write_turns(self, rows: list[dict]) -> list[str]:
        """Upsert by id; returns the sessions that stored turns moved out of (same id, another
        session), which need their `sessions` rows refreshed too."""
        if not rows:
            return []
        # One row per id: DuckDB refuses to update the same row twice in one statement.
        batch = list({r["id"]: {**OPTIONAL_TURN_COLUMNS, **r} for r in rows}.values())
        # Its identifiers (or plain words), so a session's fidelity terms are a sum, not its every
        # turn read again: in the turn's own row, where they cost no turn id a term.
        terms, words = term_columns(batch)
        stamp = now()
        written = [
            {**row, "ingested_at": stamp, "terms": t, "terms_words": w}
            for row, t, w in zip(batch, terms, words, strict=True)
        ]
        with self.file.transaction() as con:
            # The file is checkpointed when the ingest lets its connection go (`digest.ingest.HOLD_BYTES`),
            # not at every 16 MB of log as by default: each checkpoint rewrites the last, partly filled
            # row group (up to ROW_GROUP_ROWS turns), vectors and all, and frees the old copy's blocks.
            con.execute("SET checkpoint_threshold = '64GB'")
            columns = [*TURN_COLUMNS, *TERM_COLUMNS, "ingested_at"]
            with _vector_batch(con, columns, written, f"{terms_sql('terms')} AS terms") as (rows_of, split, params):
                left = con.execute(
                    f"SELECT DISTINCT t.session_id FROM turns t JOIN {rows_of} b ON b.id = t.id "
                    "WHERE t.session_id <> b.session_id",
                    params,
                ).fetchall()
                stored = TURN_COLUMNS + STORED_VECTOR_COLUMNS + TERM_COLUMNS + ["ingested_at"]
                con.execute(upsert_sql("turns", stored, ["id"], keep=["ingested_at"], source=split), params)
            moved_out = [r[0] for r in left]
            # The turns' facts (files, commands, errors, ...) as their text now says, with them.
            replace_turn_facts(con, batch)
            # In the same transaction: no turn is ever stored without its session's row up to date
            # (the sessions turns moved out of too), even when the ingest stops at a later line.
            refresh_sessions(con, sorted({r["session_id"] for r in batch} | set(moved_out)))
        return moved_out

    def write_imported_mini_summaries(self, rows: list[dict]) -> None:
        """Mini summaries from an export bundle: the source system's word, so they win over ours."""
        if not rows:
            return
        stamp = now()
        batch = [
            {**row, "origin": "imported", "model": None, "created_at": stamp}
            for row in {r["turn_id"]: r for r in rows}.values()
        ]
        columns = ["turn_id", "session_id", "text", "origin", "model", "created_at"]
        with self.file.transaction() as con, batch_source(con, "batch", columns, batch) as (source, params):
            con.execute(upsert_sql("mini_summaries", columns, ["turn_id"], keep=["created_at"], source=source), params)

    def write_imported_summaries(self, rows: list[dict]) -> None:
        """The export's summaries; each current one becomes its session's summary at once if the
        turns are already here, else when they arrive (`write_turns`)."""
        if not rows:
            return
        columns = IMPORTED_SUMMARY_COLUMNS
        stamp = now()
        batch = [{**row, "imported_at": stamp} for row in {r["session_id"]: r for r in rows}.values()]
        with self.file.transaction() as con:
            with _vector_batch(con, [*columns, "imported_at"], batch) as (_, split, params):
                stored = columns + STORED_VECTOR_COLUMNS + ["imported_at"]
                con.execute(
                    upsert_sql("imported_summaries", stored, ["session_id"], keep=["imported_at"], source=split), params
                )
            session_ids = [r["session_id"] for r in batch]
            adopt_imported_summaries(con, session_ids)
            refresh_cards(con, session_ids)

    # --- imported graph: ingest ---

    def write_imported_graph(self, nodes: list[dict], edges: list[dict]) -> None:
        """A graph-backup file's node and edge rows (`digest.ingest.parse_graph_row`), upserted by id:
        the later line wins, as for turns."""
        if not nodes and not edges:
            return
        with self.file.transaction() as con:
            for table, rows in (("imported_graph_nodes", nodes), ("imported_graph_edges", edges)):
                if not rows:
                    continue
                stamp = now()
                batch = [{**row, "imported_at": stamp} for row in {r["id"]: r for r in rows}.values()]
                columns = list(dict.fromkeys(key for row in batch for key in row))
                with batch_source(con, "batch", columns, batch) as (source, params):
                    con.execute(upsert_sql(table, columns, ["id"], source=source), params)

    def write_rejects(self, rows: list[dict]) -> None:
        if not rows:
            return
        columns = ["source_file", "line_no", "reason", "excerpt", "rejected_at"]
        stamp = now()
        # One row per line, its last: DuckDB refuses to update the same row twice in one statement.
        batch = [{**row, "rejected_at": stamp} for row in {(r["source_file"], r["line_no"]): r for r in rows}.values()]
        with self.file.transaction() as con, batch_source(con, "batch", columns, batch) as (source, params):
            con.execute(
                upsert_sql("rejects", columns, ["source_file", "line_no"], keep=["rejected_at"], source=source), params
            )

    def clear_rejects(self, source_file: str, line_nos: list[int]) -> None:
        """The rejects of these lines of the file, which an ingest has now kept (a line read while
        the file was still being written, complete since): they no longer stand."""
        if not line_nos:
            return
        with self.file.transaction() as con:
            con.execute(
                "DELETE FROM rejects WHERE source_file = ? AND line_no IN (SELECT unnest(?::INTEGER[]))",
                [source_file, line_nos],
            )

    # --- the manifest of files read (digest/manifest.py) ---

    def file_states(self, paths: list[str]) -> dict[str, FileState]:
        """The manifest's rows of these files (one query, however many: a watch tick asks for all)."""
        if not paths:
            return {}
        names = [f.name for f in fields(FileState)]
        with self.file.connect() as con:
            found = con.execute(
                f"SELECT {', '.join(names)} FROM ingest_files WHERE path IN (SELECT unnest(?::VARCHAR[]))", [paths]
            ).fetchall()
        states = {}
        for row in found:
            state = FileState(**dict(zip(names, row)))
            state.resume_context = json.loads(state.resume_context) if state.resume_context else None
            states[state.path] = state
        return states

    def record_file(self, state: FileState, lines: int) -> None:
        """The file as a read left it, `lines` long: a reject of a line past its end (the file shrank
        or was rewritten shorter) no longer stands."""
        row = asdict(state)
        row["resume_context"] = json.dumps(state.resume_context) if state.resume_context is not None else None
        columns = list(row)
        with self.file.transaction() as con:
            con.execute(
                f"INSERT OR REPLACE INTO ingest_files ({', '.join(columns)}, ingested_at) "
                f"VALUES ({', '.join('?' for _ in columns)}, now())",
                list(row.values()),
            )
            con.execute("DELETE FROM rejects WHERE source_file = ? AND line_no > ?", [state.path, lines])

    def refresh_sessions(self, session_ids: Iterable[str]) -> list[dict]:
        """Recompute the `sessions` rows of these sessions from their turns; returns the rows.

        A session left with no turns (they all moved to another session) loses its row, so it
        is not pending for ever."""
        ids = sorted(set(session_ids))
        if not ids:
            return []
        with self.file.transaction() as con:
            return refresh_sessions(con, ids)
