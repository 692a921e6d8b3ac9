"""Archive bundles (`digest.archive` defines them, `digest.archive_read` validates them): a
snapshot of some sessions or the whole store written as JSONL files with a manifest, and a bundle
restored in one transaction, merged or replacing what its sessions had."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from digest.archive import (
    ARCHIVED_TURN_COLUMNS,
    MANIFEST,
    SESSION_COLUMN,
    TURN_METADATA_KEYS,
    BundleFile,
    JsonlWriter,
    archive_stamp,
    build_manifest,
    bundle_file_names,
    jsonable,
    memory_row,
    mini_summary_node_row,
    sha256_file,
    summary_backup_row,
    table_file_name,
    vector_line,
    write_manifest,
)
from digest.archive_read import (
    MAX_LINE_BYTES,
    Bundle,
    BundleError,
    SessionState,
    VectorCount,
    restore_outcome,
    validate_bundle,
)
from digest.graph import edge_line, merge_stored_edges, merge_stored_nodes, node_line
from resources.store.cards import refresh_cards
from resources.store.connection import Repository, now
from resources.store.facts import refresh_turn_facts
from resources.store.fidelity import refresh_fidelity, refresh_turn_terms
from resources.store.migrations import SCHEMA_VERSION
from resources.store.redaction import redact_restored
from resources.store.sessions import derived_session_rows, upsert_sessions
from resources.store.summary_history import by_restore, keep_replaced_rows
from resources.store.vectors import convert_text_vectors, split_vectors_sql, vector_json_sql

# Archives: rows fetched per batch.
EXPORT_BATCH_ROWS = 2000
# A summary a replace-mode restore removed or put another in place of (the same one restored is not).
RESTORE_REPLACED = """
    SELECT r.* FROM restore_replaced r
    WHERE NOT EXISTS (SELECT 1 FROM session_summaries x WHERE x.session_id = r.session_id
                      AND x.created_at IS NOT DISTINCT FROM r.created_at AND x.summary IS NOT DISTINCT FROM r.summary)
"""
# Not the store's content, so never archived: the schema version (in the manifest), leases of live
# runs, this deployment's view of its model hosts (`host_circuits`, `host_raw_caps`), the record of
# archives written; and what is derived from the turns and recomputed on restore: `sessions` (its
# project, branch and source path too, from the turns' `project`, `git_branch` and `source_file`),
# `turn_facts`, `fidelity_terms` and `session_cards` (and the turns' `terms`); and the search index (`search_*`, its vectors too), rebuilt by
# its next refresh. Turns are archived, every stored column, but as the memory-backup file. Every
# other table is archived whole, every column, from the catalog.
NOT_ARCHIVED = frozenset(
    {
        "fidelity_terms",
        "schema_meta",
        "summary_leases",
        "host_circuits",
        "host_raw_caps",
        "archives",
        "sessions",
        "turns",
        "turn_facts",
        "session_cards",
        "search_vectors",
        "search_vector_stamp",
    }
)
RESTORE_MODES = ("merge", "replace")


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _table_source(columns: list[tuple[str, str]]) -> str:
    """A `tables/*.jsonl` file as rows of its columns (JSON columns were written as their text, so
    their text comes back unchanged). The file's path is the query's parameter."""
    types = ", ".join(f"{_sql_text(c)}: {_sql_text('VARCHAR' if t == 'JSON' else t)}" for c, t in columns)
    return f"read_json(?, format='newline_delimited', columns={{{types}}}, maximum_object_size={MAX_LINE_BYTES})"


# A line of the memory-backup file, read whole: its embedding is taken as the text it is, verbatim
# (read_json would rewrite its numbers). A validated line holds no raw control character, so no
# \x01 to split on, and no other `"embedding": [` than its own: a JSON string's quotes are
# escaped and its metadata has only the turn's keys.
_LINE_SOURCE = (
    "read_csv(?, columns={'line': 'VARCHAR'}, delim='\\x01', quote='', escape='', header=false, new_line='\\n', "
    f"auto_detect=false, max_line_size={MAX_LINE_BYTES})"
)
_LINE_EMBEDDING = r'"embedding"\s*:\s*(\[[^\]]*\])'


def _memory_source(columns: list[tuple[str, str]]) -> str:
    """The memory-backup file as `turns` rows: its flat metadata mapped back to the manifest's
    columns (a bundle from older code has fewer: the load leaves the others NULL), the embedding's
    JSON text as written (a bundle from older code has none: NULL), split into `embedding` and
    `embedding_f32` as an ingest stores it."""
    types = dict(columns)
    keys = {column: key for column, key in TURN_METADATA_KEYS.items() if column in types}
    metadata = {key: types[column] for column, key in keys.items()}
    structure = json.dumps({"id": "VARCHAR", "document": "VARCHAR", "metadata": metadata})
    fields = ", ".join(f'j.metadata."{key}" AS "{column}"' for column, key in keys.items())
    embedding = (
        f"nullif(regexp_extract(line, {_sql_text(_LINE_EMBEDDING)}, 1), '')"
        if "embedding" in types
        else "NULL::VARCHAR"
    )
    lines = (
        f"(SELECT j.id AS id, {fields}, j.document AS document, embedding FROM "
        f"(SELECT json_transform(line, {_sql_text(structure)}) AS j, {embedding} AS embedding FROM {_LINE_SOURCE}))"
    )
    # The vector as the store keeps it: numbers when of float32 origin, else the text as written.
    return f"({split_vectors_sql(lines)})"


@contextmanager
def _loading(bundle: Bundle, name: str) -> Iterator[None]:
    """DuckDB refusing a bundle file's rows (a constraint, a value it cannot take) refuses the bundle."""
    try:
        yield
    except duckdb.Error as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BundleError(bundle.path, [f"{name}: the store cannot take its rows: {reason}"]) from None


def _imported_graph_scope(where: str, params: list, sessions: list[str] | None) -> tuple[str, list]:
    """The imported graph rows an archive of these sessions holds (None: all of them), as the CTEs
    `imported_nodes` and `imported_edges`, with their parameters: the nodes the sessions' graph or
    mini summaries name or whose `sessionId` is one of them, the edges the sessions' graph names or
    that touch such a node."""
    if sessions is None:
        return "WITH imported_nodes AS (FROM imported_graph_nodes), imported_edges AS (FROM imported_graph_edges)", []
    cte = f"""WITH node_set AS (
            SELECT id FROM graph_nodes {where} UNION SELECT turn_id FROM mini_summaries {where}
            UNION SELECT id FROM imported_graph_nodes WHERE (properties->>'sessionId') IN (SELECT unnest(?::VARCHAR[]))
        ),
        imported_nodes AS (FROM imported_graph_nodes WHERE id IN (SELECT id FROM node_set)),
        imported_edges AS (
            FROM imported_graph_edges WHERE id IN (SELECT id FROM graph_edges {where})
            OR source IN (SELECT id FROM node_set) OR target IN (SELECT id FROM node_set)
        )"""
    return cte, [*params, *params, sessions, *params]


class Archive(Repository):
    def _table_columns(self, con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str]]]:
        """Every table with its (column, type) in order, from the catalog: tables added later are
        archived and restored too, with no list to keep up to date."""
        tables: dict[str, list[tuple[str, str]]] = {}
        for table, column, kind in con.execute(
            """SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c
               JOIN information_schema.tables t USING (table_schema, table_name)
               WHERE t.table_type = 'BASE TABLE' AND t.table_schema = current_schema()
               ORDER BY c.table_name, c.ordinal_position"""
        ).fetchall():
            tables.setdefault(table, []).append((column, kind))
        return tables

    def _archive_tables(self, con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str]]]:
        return {t: columns for t, columns in self._table_columns(con).items() if t not in NOT_ARCHIVED}

    def _scope(self, columns: list[str], table: str, sessions: list[str] | None) -> tuple[str, list] | None:
        """The WHERE clause that keeps these sessions' rows; None if the table has no session column
        (its rows belong to the whole store, so only a whole-store archive holds them)."""
        if sessions is None:
            return "", []
        column = SESSION_COLUMN.get(table, "session_id")
        if column not in columns:
            return None
        return f'WHERE "{column}" IN (SELECT unnest(?::VARCHAR[]))', [sessions]

    def _rows(self, con: duckdb.DuckDBPyConnection, sql: str, params: list) -> Iterator[dict]:
        """A query's rows as dicts, fetched in batches: an archive never holds a table in memory."""
        cursor = con.execute(sql, params)
        names = [d[0] for d in cursor.description]
        while batch := cursor.fetchmany(EXPORT_BATCH_ROWS):
            for row in batch:
                yield dict(zip(names, row))

    def _graph_lines(self, con: duckdb.DuckDBPyConnection, sessions: list[str] | None) -> Iterator[dict]:
        """Node lines, then edge lines, merged per id as `export-graph` does (imported rows under
        the sessions' own, oldest digest first), with each turn's mini summary on its AGENT_MEMORY
        node: ours win over the graph's copy."""
        where, params = self._scope(["session_id"], "graph_nodes", sessions)
        imported, imported_params = _imported_graph_scope(where, params, sessions)
        nodes = f"""{imported}
            SELECT id, label, properties::VARCHAR AS properties, session_id, NULL AS text, 1 AS rank, created_at,
                   false AS imported
            FROM graph_nodes {where}
            UNION ALL
            SELECT id, label, properties::VARCHAR, NULL, NULL, 0, imported_at, true FROM imported_nodes
            UNION ALL
            SELECT turn_id, 'AGENT_MEMORY', NULL, session_id, text, 2, NULL, false FROM mini_summaries {where}
            ORDER BY id, rank, created_at, session_id"""
        node_rows = (
            mini_summary_node_row({"turn_id": r["id"], "session_id": r["session_id"], "text": r["text"]})
            if r["rank"] == 2
            else r
            for r in self._rows(con, nodes, imported_params + params * 2)
        )
        yield from map(node_line, merge_stored_nodes(node_rows))
        edges = f"""{imported}
            SELECT id, source, target, type, properties::VARCHAR AS properties, 1 AS rank, created_at, session_id,
                   false AS imported
            FROM graph_edges {where}
            UNION ALL
            SELECT id, source, target, type, properties::VARCHAR, 0, imported_at, NULL, true FROM imported_edges
            ORDER BY id, rank, created_at, session_id"""
        yield from map(edge_line, merge_stored_edges(self._rows(con, edges, imported_params + params)))

    def write_archive(self, out_dir: Path, sessions: list[str] | None = None, retire: bool = False) -> dict:
        """Write a bundle of these sessions (None: the whole store) into `out_dir` and record it.
        `retire`: the sessions then leave the live sweeps (tombstones), once the bundle is verified."""
        if retire and not sessions:
            raise ValueError("retiring needs the sessions to retire")
        sessions = sorted(set(sessions)) if sessions is not None else None
        if sessions:
            # A bundle holds a session by its turns: a restore refuses a manifest naming one it has none of.
            with self.file.connect() as con:
                where, params = self._scope(["session_id"], "turns", sessions)
                found = {r[0] for r in con.execute(f"SELECT DISTINCT session_id FROM turns {where}", params).fetchall()}
            if missing := [s for s in sessions if s not in found]:
                raise ValueError(f"no turns for session {', '.join(missing)}: nothing of it to archive")
        created_at = now()
        stamp = archive_stamp(created_at)
        names = bundle_file_names(stamp)
        final = Path(out_dir) / f"session-digest-archive-{stamp}"
        # Written under another name and renamed once complete: a bundle folder is never half there.
        partial = final.with_name(f".{final.name}.partial")
        partial.mkdir(parents=True)
        files: list[BundleFile] = []

        def write(
            name: str, kind: str, table: str | None, lines: Iterable[dict | str], columns=None, vectors=None
        ) -> None:
            writer = JsonlWriter(partial / name)
            for line in lines:
                writer.write(line)
            entry = vectors.entry() if vectors is not None else None
            files.append(BundleFile(name, kind, table, writer.rows, writer.close(), columns, entry))

        def vector_lines(rows: Iterable[dict], shape, embedding_of, vectors: VectorCount) -> Iterator[str]:
            for r in rows:
                line = shape(r)
                embedding = embedding_of(r)
                vectors.add(embedding is not None, line["metadata"]["sessionId"])
                yield vector_line(line, embedding)

        with self.file.connect() as con:
            con.execute("BEGIN TRANSACTION")  # one snapshot for every file
            where, params = self._scope(["session_id"], "turns", sessions)
            turn_types = dict(self._table_columns(con)["turns"])
            turns = self._rows(
                con,
                f"SELECT * EXCLUDE (embedding, embedding_f32), {vector_json_sql()} AS embedding "
                f"FROM turns {where} ORDER BY id",
                params,
            )
            counted = VectorCount()
            lines = vector_lines(turns, memory_row, lambda r: r["embedding"], counted)
            write(
                names["memory"], "memory", "turns", lines, [(c, turn_types[c]) for c in ARCHIVED_TURN_COLUMNS], counted
            )
            # What the original's gates read beside the row: the digest state, and an imported
            # summary's own metadata and vector (kept while it stands as the session's summary).
            summaries = self._rows(
                con,
                f"""SELECT x.*, s.input_revision AS session_revision, d.digest_state, d.revision AS digest_revision,
                           i.metadata::VARCHAR AS imported_metadata,
                           {vector_json_sql("i")} AS imported_embedding
                    FROM (SELECT * FROM session_summaries {where}) x
                    LEFT JOIN sessions s USING (session_id)
                    LEFT JOIN digest_state d USING (session_id)
                    LEFT JOIN imported_summaries i ON i.session_id = x.session_id AND x.origin = 'imported'
                        AND i.summary = x.summary AND coalesce(i.input_revision, x.input_revision) = x.input_revision
                    ORDER BY x.session_id""",
                params,
            )
            counted = VectorCount()
            lines = vector_lines(summaries, summary_backup_row, lambda r: r["imported_embedding"], counted)
            write(names["summaries"], "summaries", None, lines, vectors=counted)
            write(names["graph"], "graph", None, self._graph_lines(con, sessions))
            for table, columns in self._archive_tables(con).items():
                scope = self._scope([c for c, _ in columns], table, sessions)
                if scope is not None:
                    rows = self._rows(con, f'SELECT * FROM "{table}" {scope[0]} ORDER BY ALL', scope[1])
                    write(
                        table_file_name(table),
                        "table",
                        table,
                        ({k: jsonable(v) for k, v in r.items()} for r in rows),
                        columns,
                    )
            con.execute("ROLLBACK")
        write_manifest(partial, build_manifest(stamp, created_at, sessions, SCHEMA_VERSION, files))
        partial.rename(final)
        if retire:
            validate_bundle(final)  # never retire sessions whose bundle did not land intact
        manifest_sha256 = sha256_file(final / MANIFEST)
        with self.file.transaction() as con:
            con.execute(
                "INSERT INTO archives VALUES (?, ?, ?, ?, ?, ?)",
                [stamp, str(final), created_at, sessions, manifest_sha256, retire],
            )
            if retire:
                con.execute(
                    "INSERT OR REPLACE INTO retired_sessions SELECT unnest(?::VARCHAR[]), ?, ?",
                    [sessions, stamp, created_at],
                )
        return {
            "archive_id": stamp,
            "path": str(final),
            "sessions": len(sessions) if sessions is not None else "all",
            "rows": {f.name: f.rows for f in files},
            "manifest_sha256": manifest_sha256,
            "retired": sessions if retire else [],
        }

    def restore_archive(self, bundle: Bundle, mode: str) -> dict:
        """Restore a validated bundle in one transaction: a failure anywhere changes nothing.

        `merge` adds what the store lacks (by key; ledger rows by content, with new ids). `replace`
        empties the bundle's tables of the bundle's sessions (of every row, for a whole-store bundle)
        and loads them from it; tables the bundle does not hold are not touched. Then the sessions'
        rows are recomputed from their turns, so the pending query sees which turns differ from
        what was summarized. Whatever the store refuses (a table, a type, a key twice, a constraint)
        is a BundleError. Returns rows loaded per table and the sessions' `RestoreOutcome`."""
        if mode not in RESTORE_MODES:
            raise ValueError(f"restore mode {mode!r} is not one of {', '.join(RESTORE_MODES)}")
        if bundle.manifest["schema_version"] > SCHEMA_VERSION:
            raise BundleError(
                bundle.path, [f"schema version {bundle.manifest['schema_version']} is newer than {SCHEMA_VERSION}"]
            )
        memory = bundle.file("memory")
        # DuckDB reads the bundle's files in place: no copy of the turns is left behind by a kill.
        sources = [(memory, _memory_source(memory.columns))] + [(f, _table_source(f.columns)) for f in bundle.tables()]
        with self.file.transaction() as con:
            live = self._table_columns(con)
            problems = self._recorded_manifest_problems(con, bundle)
            problems += [p for f, _ in sources for p in self._unfit(f, live)]
            lacking = sorted(set(self._archive_tables(con)) - {f.table for f in bundle.tables()})
            if mode == "replace" and bundle.sessions is None and lacking:
                # It would empty the whole store: only a bundle of the whole store may.
                problems.append(
                    f"{MANIFEST}: a whole-store bundle holds every table, this one lacks {', '.join(lacking)} "
                    "(a bundle of some sessions relabelled, or from older code: `--mode merge` adds it)"
                )
            if problems:
                raise BundleError(bundle.path, problems)
            for f, source in sources:
                with _loading(bundle, f.name):
                    problems += self._duplicate_keys(con, f, source, bundle.path / f.name)
            if problems:
                raise BundleError(bundle.path, problems)
            before = self._session_states(con, bundle.sessions)
            if mode == "replace":  # the summaries it may replace, kept in `summary_history` after
                where, params = self._scope(["session_id"], "session_summaries", bundle.sessions)
                con.execute(
                    f"CREATE OR REPLACE TEMP TABLE restore_replaced AS SELECT * FROM session_summaries {where}", params
                )
            rows = {}
            for f, source in sources:
                columns = f.columns
                if f.kind == "memory" and "embedding" in dict(columns):
                    columns = [*columns, ("embedding_f32", "FLOAT[]")]  # `_memory_source` splits the vector
                with _loading(bundle, f.name):
                    rows[f.table] = self._load_table(
                        con, f.table, source, bundle.path / f.name, columns, mode, bundle.sessions
                    )
            if "imported_summaries" in rows:  # a bundle from before `embedding_f32` holds them as text
                convert_text_vectors(con, "imported_summaries")
            with _loading(bundle, memory.name):  # its sessions' rows, recomputed from its turns
                self._rebuild_sessions(con, mode, bundle.sessions, sorted(bundle.turn_sessions))
            redact_restored(con)
            if mode == "replace":
                keep_replaced_rows(con, RESTORE_REPLACED, [], by_restore(bundle.archive_id))
                con.execute("DROP TABLE restore_replaced")
            after = self._session_states(con, bundle.sessions)
        return {"rows": rows, "outcome": restore_outcome(before, after)}

    def _recorded_manifest_problems(self, con: duckdb.DuckDBPyConnection, bundle: Bundle) -> list[str]:
        """A bundle this store wrote must have the manifest it recorded: that catches an edit even
        with every checksum recomputed (which a bundle from elsewhere cannot be checked for)."""
        row = con.execute(
            "SELECT manifest_sha256, path FROM archives WHERE archive_id = ?", [bundle.archive_id]
        ).fetchone()
        if row is None or row[0] == bundle.manifest_sha256:
            return []
        return [
            f"{MANIFEST}: differs from the one this store wrote for archive {bundle.archive_id} (to {row[1]}): edited since"
        ]

    def _unfit(self, f: BundleFile, live: dict) -> list[str]:
        """Why a bundle file cannot go into this store's table, if it cannot."""
        if f.kind == "table" and f.table in NOT_ARCHIVED:
            return [f"{f.name}: table {f.table} is never restored from a table file"]
        if f.table not in live:
            return [f"{f.name}: this store has no table {f.table} (a bundle from newer code?)"]
        here = dict(live[f.table])
        missing = [c for c, _ in f.columns if c not in here]
        if missing:
            return [f"{f.name}: table {f.table} has no column {', '.join(missing)} here (a bundle from newer code?)"]
        return [f"{f.name}: column {c} is {t} in the bundle, {here[c]} here" for c, t in f.columns if here[c] != t]

    def _duplicate_keys(self, con: duckdb.DuckDBPyConnection, f: BundleFile, source: str, path: Path) -> list[str]:
        """A key on two rows of a file: a replace would fail on it, a merge keep either row."""
        names = {c for c, _ in f.columns}
        problems = []
        for (key,) in con.execute(
            "SELECT constraint_column_names FROM duckdb_constraints() WHERE table_name = ? AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')",
            [f.table],
        ).fetchall():
            if set(key) <= names:
                cols = ", ".join(f'"{c}"' for c in key)
                row = con.execute(
                    f"SELECT {cols}, count(*) FROM {source} GROUP BY ALL HAVING count(*) > 1 LIMIT 1", [str(path)]
                ).fetchone()
                if row is not None:
                    problems.append(
                        f"{f.name}: {row[-1]} rows share the key ({', '.join(key)}) = {', '.join(map(repr, row[:-1]))}"
                    )
        return problems

    def _load_table(
        self,
        con: duckdb.DuckDBPyConnection,
        table: str,
        source: str,
        path: Path,
        columns: list,
        mode: str,
        sessions: list[str] | None,
    ) -> int:
        """Load one bundle file (`source`, reading `path`) into its table; returns the rows inserted."""
        names = [c for c, _ in columns]
        serial = self._serial_column(con, table)

        def quoted(cols: list[str]) -> str:
            return ", ".join(f'"{c}"' for c in cols)

        if mode == "replace":
            where, params = self._scope(names, table, sessions)
            con.execute(f'DELETE FROM "{table}" {where}', params)
            # A whole table keeps its ids; some sessions' ledger rows take new ones (the bundle's may
            # belong to other sessions here).
            keep_ids = sessions is None
            cols = [c for c in names if keep_ids or c != (serial and serial[0])]
            inserted = con.execute(
                f'INSERT INTO "{table}" ({quoted(cols)}) SELECT {quoted(cols)} FROM {source}', [str(path)]
            )
            count = inserted.fetchone()[0]
            if keep_ids and serial:
                self._advance_sequence(con, table, *serial)
            return count
        cols = [c for c in names if c != (serial and serial[0])]
        has_key = con.execute(
            "SELECT count(*) FROM duckdb_constraints() WHERE table_name = ? AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')",
            [table],
        ).fetchone()[0]
        ignore = "OR IGNORE " if has_key else ""
        inserted = con.execute(
            f'INSERT {ignore}INTO "{table}" ({quoted(cols)}) '
            f'SELECT {quoted(cols)} FROM {source} EXCEPT SELECT {quoted(cols)} FROM "{table}"',
            [str(path)],
        )
        return inserted.fetchone()[0]

    def _serial_column(self, con: duckdb.DuckDBPyConnection, table: str) -> tuple[str, str] | None:
        """(column, sequence) of a column numbered by a sequence (attempt ids, friction ids)."""
        row = con.execute(
            "SELECT column_name, column_default FROM information_schema.columns "
            "WHERE table_name = ? AND column_default LIKE 'nextval(%'",
            [table],
        ).fetchone()
        if row is None:
            return None
        return row[0], re.search(r"nextval\('([^']+)'", row[1]).group(1)

    def _advance_sequence(self, con: duckdb.DuckDBPyConnection, table: str, column: str, sequence: str) -> None:
        """Past the largest restored id, so the next row does not collide (DuckDB cannot set a sequence)."""
        top = con.execute(f'SELECT max("{column}") FROM "{table}"').fetchone()[0]
        if top is None:
            return
        following = con.execute(f"SELECT nextval('{sequence}')").fetchone()[0]
        if following < top:
            con.execute(f"SELECT max(nextval('{sequence}')) FROM range(?)", [top - following])

    def _rebuild_sessions(
        self, con: duckdb.DuckDBPyConnection, mode: str, sessions: list[str] | None, ids: list[str]
    ) -> None:
        """`sessions` rows are derived from turns: recomputed for the restored ones, `ids` (and, in
        replace mode, dropped first, so a session the bundle does not hold any more is gone)."""
        if mode == "replace":
            where, params = self._scope(["session_id"], "sessions", sessions)
            con.execute(f"DELETE FROM sessions {where}", params)
        upsert_sessions(con, derived_session_rows(con, ids))
        # The fidelity terms are derived from the turns too (not archived): the restored sessions'
        # are extracted again, a removed session's dropped; a summary the bundle holds unscored (an
        # older bundle's) is scored.
        con.execute("DELETE FROM fidelity_terms WHERE session_id NOT IN (SELECT session_id FROM sessions)")
        refresh_turn_terms(con, ids)
        refresh_fidelity(con, ids, unscored_only=True)
        # So are the turns' facts (files, commands, errors, ...).
        con.execute("DELETE FROM turn_facts WHERE session_id NOT IN (SELECT session_id FROM sessions)")
        refresh_turn_facts(con, ids)
        # And the cards, made from the facts and the restored summaries.
        con.execute("DELETE FROM session_cards WHERE session_id NOT IN (SELECT session_id FROM sessions)")
        refresh_cards(con, ids)

    def _session_states(self, con: duckdb.DuckDBPyConnection, sessions: list[str] | None) -> dict[str, SessionState]:
        where, params = self._scope(["session_id"], "sessions", sessions)
        rows = con.execute(
            f"""SELECT s.session_id, s.partition_key, s.input_revision, x.input_revision, x.created_at::VARCHAR,
                       r.session_id IS NOT NULL
                FROM (SELECT * FROM sessions {where}) s
                LEFT JOIN session_summaries x USING (session_id)
                LEFT JOIN retired_sessions r USING (session_id)""",
            params,
        ).fetchall()
        return {row[0]: SessionState(*row[1:]) for row in rows}
