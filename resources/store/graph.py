"""The session graph: each session's nodes and edges (its SESSION_SUMMARY node and summary-time
edges written with its summary, the rest by a digest), the chunks a digest has finished, the
digest state and the digest cadence's pick. The states a digest moves through are
`digest.graph`'s (`after_success`, `after_failure`, ...); this module only reads and writes them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator

import duckdb

from digest.graph import (
    Chunk,
    DigestState,
    GraphEdge,
    GraphExtraction,
    GraphNode,
    SessionGraph,
    after_failure,
    after_success,
    reset_undigestible,
    summary_graph,
    summary_node_id,
)
from digest.turns import Turn
from resources.store.connection import Repository, batch_source, now, records
from resources.store.sessions import load_turns

GRAPH_NODE_COLUMNS = ["session_id", "input_revision", "run_id", "created_at", "id", "label", "properties"]
GRAPH_EDGE_COLUMNS = [
    "session_id",
    "input_revision",
    "run_id",
    "created_at",
    "id",
    "source",
    "target",
    "type",
    "properties",
]


def insert_graph(
    con: duckdb.DuckDBPyConnection, parts: Iterable[tuple[dict, list[GraphNode], list[GraphEdge]]]
) -> None:
    """Insert graph rows: each part is the columns its rows share (session, revision, run, time)
    and its nodes and edges."""
    nodes, edges = [], []
    for common, part_nodes, part_edges in parts:
        nodes += [{**common, "id": n.id, "label": n.label, "properties": json.dumps(n.properties)} for n in part_nodes]
        edges += [
            {
                **common,
                "id": e.id,
                "source": e.source,
                "target": e.target,
                "type": e.type,
                "properties": json.dumps(e.properties),
            }
            for e in part_edges
        ]
    for table, columns, rows in (
        ("graph_nodes", GRAPH_NODE_COLUMNS, nodes),
        ("graph_edges", GRAPH_EDGE_COLUMNS, edges),
    ):
        if rows:
            with batch_source(con, f"{table}_batch", columns, rows) as (source, params):
                con.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT * FROM {source}", params)


def write_summary_graphs(con: duckdb.DuckDBPyConnection, summaries: list[dict]) -> None:
    """Each summary row's SESSION_SUMMARY node and summary-time edges, in place of the session's
    earlier ones, as the original writes them with the summary: every summary's provenance is in
    the graph, digested or not. The rest of a session's graph (its last digest) stays; the next
    digest rewrites it all, the summary rows built the same way from the same row."""
    if not summaries:
        return
    session_ids = [row["session_id"] for row in summaries]
    turns: dict[str, list[Turn]] = {}
    for turn in load_turns(con, session_ids):
        turns.setdefault(turn.session_id, []).append(turn)
    scope = "session_id IN (SELECT unnest(?::VARCHAR[]))"
    summary_ids = [summary_node_id(sid) for sid in session_ids]
    con.execute(
        f"DELETE FROM graph_nodes WHERE {scope} AND id IN (SELECT unnest(?::VARCHAR[]))", [session_ids, summary_ids]
    )
    con.execute(
        f"DELETE FROM graph_edges WHERE {scope} AND (source IN (SELECT unnest(?::VARCHAR[])) "
        "OR target IN (SELECT unnest(?::VARCHAR[])))",
        [session_ids, summary_ids, summary_ids],
    )
    stamp = now()
    insert_graph(
        con,
        (
            (
                {
                    "session_id": row["session_id"],
                    "input_revision": row["input_revision"],
                    "run_id": row["run_id"],
                    "created_at": stamp,
                },
                *summary_graph(turns[row["session_id"]], row),
            )
            for row in summaries
            if row["session_id"] in turns
        ),
    )


def _digest_state(con: duckdb.DuckDBPyConnection, session_id: str) -> DigestState | None:
    row = con.execute(
        "SELECT digest_state, attempts, defer_reason, revision FROM digest_state WHERE session_id = ?", [session_id]
    ).fetchone()
    return DigestState(*row) if row else None


def _put_digest_state(con: duckdb.DuckDBPyConnection, session_id: str, state: DigestState) -> None:
    con.execute(
        "INSERT OR REPLACE INTO digest_state VALUES (?, ?, ?, ?, ?, ?)",
        [session_id, state.digest_state, state.attempts, state.defer_reason, state.revision, now()],
    )


class Graph(Repository):
    def digest_state(self, session_id: str) -> DigestState | None:
        with self.file.connect() as con:
            return _digest_state(con, session_id)

    def _transition_digest_state(
        self, session_id: str, step: Callable[[DigestState | None], DigestState | None]
    ) -> tuple[DigestState | None, DigestState | None]:
        """Read the session's digest state, store `step(previous)` unless that is None (no change),
        in one transaction; returns (previous, new)."""
        with self.file.transaction() as con:
            previous = _digest_state(con, session_id)
            state = step(previous)
            if state is not None:
                _put_digest_state(con, session_id, state)
        return previous, state

    def write_graph(self, graph: SessionGraph, run_id: str | None = None) -> None:
        """Replace the session's graph (its finished chunks go) and mark it digested at its revision
        (`digest.graph.after_success`), in one transaction."""
        common = {
            "session_id": graph.session_id,
            "input_revision": graph.input_revision,
            "run_id": run_id,
            "created_at": now(),
        }
        with self.file.transaction() as con:
            con.execute("DELETE FROM graph_nodes WHERE session_id = ?", [graph.session_id])
            con.execute("DELETE FROM graph_edges WHERE session_id = ?", [graph.session_id])
            con.execute("DELETE FROM graph_chunks WHERE session_id = ?", [graph.session_id])
            insert_graph(con, [(common, graph.nodes, graph.edges)])
            _put_digest_state(con, graph.session_id, after_success(graph.input_revision))

    def record_digest_failure(self, session_id: str, revision: str, symptom: str, max_attempts: int) -> DigestState:
        """Count a failed digest (`digest.graph.after_failure`); the session's last good graph, if
        any, stays. Returns the new state."""
        _, state = self._transition_digest_state(
            session_id, lambda previous: after_failure(previous, revision, symptom, max_attempts)
        )
        return state

    def reset_digest(self, session_id: str) -> DigestState | None:
        """An operator's reset of an undigestible session; returns the state it had, or None if it
        was not undigestible (nothing changed)."""
        previous, state = self._transition_digest_state(session_id, reset_undigestible)
        return previous if state is not None else None

    def finished_graph_chunks(
        self, session_id: str, revision: str
    ) -> dict[tuple[int, str], tuple[GraphExtraction, bool]]:
        """The session's chunk results stored at this revision, by (chunk index, text digest)."""
        with self.file.connect() as con:
            rows = con.execute(
                """SELECT chunk_index, chunk_sha256, extraction::VARCHAR, cut_at_output_cap FROM graph_chunks
                   WHERE session_id = ? AND input_revision = ?""",
                [session_id, revision],
            ).fetchall()
        return {(index, sha): (GraphExtraction.model_validate_json(data), cut) for index, sha, data, cut in rows}

    def save_graph_chunk(
        self, session_id: str, revision: str, chunk: Chunk, extraction: GraphExtraction, cut: bool, model: str,
        run_id: str | None = None,
    ) -> None:  # fmt: skip
        """One chunk's result, written as it arrives; rows of the session's older revisions go."""
        with self.file.transaction() as con:
            con.execute("DELETE FROM graph_chunks WHERE session_id = ? AND input_revision <> ?", [session_id, revision])
            con.execute(
                "INSERT OR REPLACE INTO graph_chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [session_id, revision, chunk.index, chunk.digest, list(chunk.turn_ids), extraction.model_dump_json(),
                 cut, model, run_id, now()],
            )  # fmt: skip

    def pending_digest_keys(self, fresh: int, total: int, exclude: Iterable[str] = ()) -> list[str]:
        """Sessions the digest cadence takes, as the original's REM pass does: `fresh` of the newest,
        the rest oldest first, `total` at most. Pending means summarized from the turns as they are,
        not yet digested at that revision, not undigestible at it, not retired. Sessions a run's
        budget left part-done (chunks stored at their turns) come first, oldest first: they finish
        in a bounded number of runs, and none waits behind a backlog with its work half done."""
        pending = """
            SELECT s.partition_key, s.session_id, s.last_activity_ms, s.input_revision FROM sessions s
            JOIN session_summaries x USING (session_id)
            LEFT JOIN digest_state d USING (session_id)
            WHERE x.input_revision = s.input_revision
              AND NOT coalesce(d.revision = s.input_revision AND d.digest_state IN ('digested', 'undigestible'), false)
              AND s.session_id NOT IN (SELECT session_id FROM retired_sessions)
              AND s.partition_key NOT IN (SELECT unnest(?::VARCHAR[]))
        """
        with self.file.connect() as con:
            resumed = con.execute(
                f"""SELECT partition_key FROM ({pending}) p WHERE EXISTS (SELECT 1 FROM graph_chunks g
                    WHERE g.session_id = p.session_id AND g.input_revision = p.input_revision)
                    ORDER BY last_activity_ms ASC NULLS FIRST, session_id LIMIT ?""",
                [list(exclude), total],
            ).fetchall()
            exclude = [*exclude, *(r[0] for r in resumed)]
            rest = total - len(resumed)
            newest = con.execute(
                f"SELECT partition_key FROM ({pending}) ORDER BY last_activity_ms DESC NULLS LAST, session_id LIMIT ?",
                [exclude, min(fresh, max(0, rest - 1))],
            ).fetchall()
            oldest = con.execute(
                f"""SELECT partition_key FROM ({pending}) WHERE partition_key NOT IN (SELECT unnest(?::VARCHAR[]))
                    ORDER BY last_activity_ms ASC NULLS FIRST, session_id LIMIT ?""",
                [exclude, [r[0] for r in newest], rest - len(newest)],
            ).fetchall()
        return [r[0] for r in resumed + newest + oldest]

    def graph_pages(self, table: str, ids_per_page: int = 2000) -> Iterator[list[dict]]:
        """Every row of `graph_nodes` or `graph_edges`, with the imported graph's row of each id
        first (`imported_graph_*`), sorted by id (then oldest digest first), a page of whole id
        groups per short connection, for the export's merge."""
        columns = {"graph_nodes": "id, label, properties", "graph_edges": "id, source, target, type, properties"}[table]
        rows_sql = f"""SELECT {columns}, true AS imported, 0 AS rank, imported_at AS created_at, NULL AS session_id
                       FROM imported_{table}
                       UNION ALL
                       SELECT {columns}, false, 1, created_at, session_id FROM {table}"""
        after = ""
        while True:
            with self.file.connect() as con:
                rows = records(
                    con,
                    f"""WITH all_rows AS ({rows_sql}),
                        page AS (SELECT DISTINCT id FROM all_rows WHERE id > ? ORDER BY id LIMIT {int(ids_per_page)})
                        SELECT {columns.replace("properties", "properties::VARCHAR AS properties")}, imported
                        FROM all_rows JOIN page USING (id) ORDER BY id, rank, created_at, session_id""",
                    [after],
                )
            if not rows:
                return
            yield rows
            after = rows[-1]["id"]
