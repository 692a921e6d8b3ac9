"""The store's schema: docs/schema.md names every column the DDL makes (and no other), the summary
row is defined once, and an existing store at version 1 migrates in place with nothing lost."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from digest.summary_output import SessionSummaryOutput
from resources.store import DigestStore
from resources.store.migrations import MIGRATIONS, SCHEMA_VERSION
from resources.store.summary_row import SUMMARY_ROW

ROOT = Path(__file__).resolve().parents[1]
V1_SCHEMA = Path(__file__).parent / "fixtures" / "schema_v1.sql"  # schema.sql as the last version-1 stores had it


def _outside_parentheses(text: str) -> str:
    depth, kept = 0, []
    for ch in text:
        depth += ch == "("
        if depth == 0:
            kept.append(ch)
        depth -= ch == ")" and depth > 0
    return "".join(kept)


def documented_columns() -> dict[str, list[str]]:
    """docs/schema.md's table: each table's columns, the backquoted names outside parentheses."""
    tables = {}
    for line in (ROOT / "docs" / "schema.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\| `(\w+)` \| [^|]+ \| (.*) \|$", line)
        if match:
            tables[match.group(1)] = re.findall(r"`(\w+)`", _outside_parentheses(match.group(2).replace("\\|", "/")))
    return tables


def shape(path: Path) -> dict[str, dict[str, str]]:
    """Every table's and view's columns, as the live store has them."""
    with duckdb.connect(str(path), read_only=True) as con:
        rows = con.execute(
            """SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c
               JOIN information_schema.tables t USING (table_schema, table_name)
               WHERE t.table_type IN ('BASE TABLE', 'VIEW') AND t.table_schema = 'main'
               ORDER BY c.table_name, c.ordinal_position"""
        ).fetchall()
    tables: dict[str, dict[str, str]] = {}
    for table, column, data_type in rows:
        tables.setdefault(table, {})[column] = data_type
    return tables


def _assert_documented(path: Path) -> None:
    ddl = {table: sorted(columns) for table, columns in shape(path).items()}
    doc = {table: sorted(set(columns)) for table, columns in documented_columns().items()}
    assert set(doc) == set(ddl), f"tables: only in the doc {set(doc) - set(ddl)}, only in the DDL {set(ddl) - set(doc)}"
    for table in ddl:
        assert doc[table] == ddl[table], (
            f"{table}: the doc lacks {set(ddl[table]) - set(doc[table])}, names {set(doc[table]) - set(ddl[table])} "
            "the DDL does not have"
        )


def test_docs_schema_names_every_column_of_the_live_schema_and_no_other(tmp_path, migrated_store_file):
    """A fresh store, and a version-1 store migrated to the latest version: views included."""
    _assert_documented(migrated_store_file)
    old = tmp_path / "v1.duckdb"
    _v1_store(old)
    DigestStore(old).migrate()
    _assert_documented(old)


def test_the_summary_table_is_the_row_definition_with_the_model_fields_in_it(migrated_store_file):
    assert list(shape(migrated_store_file)["session_summaries"]) == [c.name for c in SUMMARY_ROW]
    assert set(SessionSummaryOutput.model_fields) <= {c.name for c in SUMMARY_ROW}


def _v1_store(path: Path) -> None:
    """A store as the version-1 code left it: today's shape, version 1, a row in each summary table."""
    with duckdb.connect(str(path)) as con:
        con.execute(V1_SCHEMA.read_text(encoding="utf-8"))
        for table, column in [
            ("session_summaries", "origin VARCHAR DEFAULT 'generated'"), ("session_summaries", "host VARCHAR"),
            ("session_summaries", "host_reason VARCHAR"), ("session_summaries", "raw_tokens_source VARCHAR"),
            ("session_summaries", "raw_tokens_counted INTEGER"), ("attempts", "host VARCHAR"),
        ]:  # fmt: skip
            con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column}")
        con.execute("INSERT INTO schema_meta VALUES (1, now())")
        con.execute(
            """INSERT INTO session_summaries VALUES ('s1', 'a summary', 'a title', 'bugfix', 1, 2, 3, 4, ['python'],
               'raw', false, true, 3, 0, 'sha256:x', 'm', 10, 20, NULL, 'within-cap', 1, 2, ['a'], ['m'], 5, ['t'],
               ['i'], 'run', now(), 'generated', 'h1', 'placed', 'tokenizer', 42)"""
        )
        con.execute(
            "INSERT INTO turns (id, session_id, document, document_rebuilt, source_file, source_line, ingested_at) "
            "VALUES ('t1', 's1', 'doc', false, 'f', 1, now())"
        )


@pytest.mark.integration  # an older store migrated in place
def test_a_version_1_store_migrates_in_place_to_the_fresh_shape_and_keeps_its_rows(tmp_path):
    old = tmp_path / "v1.duckdb"
    _v1_store(old)
    with duckdb.connect(str(old), read_only=True) as con:
        before = con.execute("SELECT * FROM session_summaries").fetchall()[0]

    store = DigestStore(old)
    store.migrate()
    store.migrate()  # idempotent: nothing runs twice

    fresh = DigestStore(tmp_path / "fresh.duckdb")
    fresh.migrate()
    assert shape(old) == shape(fresh.path)
    with duckdb.connect(str(old), read_only=True) as con:
        after = con.execute("SELECT * FROM session_summaries").fetchall()[0]
        versions = [r[0] for r in con.execute("SELECT version FROM schema_meta ORDER BY version").fetchall()]
        turns = con.execute("SELECT id, document FROM turns").fetchall()
    assert after[: len(before)] == before
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert turns == [("t1", "doc")]


def test_migrations_are_numbered_from_2_without_gaps():
    assert sorted(MIGRATIONS) == list(range(2, SCHEMA_VERSION + 1))
