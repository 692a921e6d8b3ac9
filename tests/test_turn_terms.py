"""Each turn's identifiers (`turns.terms`), extracted once when the turn is written: a session's
fidelity terms are their sum, so a growing log's refresh reads no turn document of a session with
no summary, and an append ends with the terms, scores and verdicts of a one-shot ingest. Real
DuckDB files, the real ingest of the samples; moved into the turns by migration 19 (from the
`turn_terms` table, a row a term, of migration 15), rebuilt on restore."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from digest.archive_read import validate_bundle
from digest.fidelity import session_terms
from digest.ingest import ingest_paths
from resources.store import fidelity as store_fidelity
from resources.store import turn_rows
from resources.store.migrations import SCHEMA_VERSION

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CLAUDE_LOG = SAMPLES / "harnesses" / "0b6c3f1e-5a2d-4c8e-9f41-7d2e8a1c5b90.jsonl"
MEMORY = next((SAMPLES / "bundle").glob("memory-backup-*.jsonl"))
# Each turn's terms, a row a term (as the `turn_terms` table had them before migration 19).
TERMS = (
    "SELECT id AS turn_id, session_id, unnest(map_keys(terms)) AS term, unnest(map_values(terms)) AS tf, "
    "terms_words AS word FROM turns"
)
SCORED = (
    "SELECT session_id, fidelity, fidelity_found, fidelity_missed, verdict, verdict_evidence FROM session_summaries"
)


def stored(store, sql: str, params: list | None = None) -> list[tuple]:
    with store.file.connect() as con:
        return con.execute(sql + " ORDER BY ALL", params or []).fetchall()


def grow(path: Path, source: Path, lines: int) -> None:
    """The file as a log growing: its source's first `lines` lines."""
    path.write_text("".join(source.read_text(encoding="utf-8").splitlines(keepends=True)[:lines]), encoding="utf-8")


def test_an_appended_log_ends_with_the_terms_and_scores_of_a_one_shot_ingest(tmp_path, store, new_store):
    once = new_store(tmp_path / "once.duckdb")
    ingest_paths([SAMPLES / "bundle", CLAUDE_LOG], once)
    folder = tmp_path / "grown"
    folder.mkdir()
    for other in (SAMPLES / "bundle").glob("*.jsonl"):
        if other != MEMORY:
            shutil.copy(other, folder / other.name)
    total = len(MEMORY.read_text(encoding="utf-8").splitlines())
    for lines in (total // 3, total // 3 + 1, 2 * total // 3, total):
        grow(folder / MEMORY.name, MEMORY, lines)
        grow(folder / CLAUDE_LOG.name, CLAUDE_LOG, lines * 17 // total)
        ingest_paths([folder], store)
    # A score weighs by the store's document frequencies at its refresh: both stores' summaries are
    # scored again at the same ones, from the terms each store summed as its turns came.
    for each in (store, once):
        with each.file.transaction() as con:
            sessions = [r[0] for r in con.execute("SELECT session_id FROM sessions").fetchall()]
            store_fidelity.refresh_fidelity(con, sessions)
    for sql in (TERMS, "SELECT * FROM fidelity_terms", SCORED):
        assert stored(store, sql) == stored(once, sql), sql
    assert stored(store, SCORED + " WHERE fidelity IS NOT NULL")  # the imported summaries were scored
    # A session's terms are its turns' summed, as `digest.fidelity.session_terms` counts them.
    with once.file.connect() as con:
        documents = store_fidelity.turn_documents(con, [CLAUDE_LOG.stem])[CLAUDE_LOG.stem]
        summed = store_fidelity._stored_terms(con, [CLAUDE_LOG.stem])[CLAUDE_LOG.stem]
    assert summed == session_terms(documents) and len(summed) > 5


def test_a_session_with_no_summary_has_no_turn_document_read_on_refresh(tmp_path, store, monkeypatch):
    read: list[str] = []
    original = store_fidelity.turn_documents

    def counted(con, session_ids):
        read.extend(session_ids)
        return original(con, session_ids)

    monkeypatch.setattr(store_fidelity, "turn_documents", counted)
    log = tmp_path / CLAUDE_LOG.name
    for lines in (6, 9, 17):  # the log grows over three ticks
        grow(log, CLAUDE_LOG, lines)
        ingest_paths([log], store)
    assert CLAUDE_LOG.stem not in read
    assert stored(store, "SELECT count(*) FROM fidelity_terms WHERE session_id = ?", [CLAUDE_LOG.stem])[0][0] > 5
    # A session with a summary to judge is read: its verdict needs the text.
    ingest_paths([SAMPLES / "bundle"], store)
    summarized = {r[0] for r in stored(store, "SELECT session_id FROM session_summaries")}
    assert summarized and summarized <= set(read)


def test_a_session_scores_by_its_words_until_a_turn_names_an_identifier(store, tmp_path, monkeypatch):
    read: list[str] = []
    monkeypatch.setattr(store_fidelity, "turn_documents", lambda con, ids: read.extend(ids) or {})
    log = tmp_path / "plain.jsonl"

    def say(n: int, text: str) -> None:
        event = {
            "type": "user", "sessionId": "s1", "uuid": f"u{n}", "timestamp": f"2026-11-18T09:00:0{n}Z",
            "message": {"role": "user", "content": text},
        }  # fmt: skip
        with log.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(event) + "\n")
        ingest_paths([log], store)

    say(1, "the harvest festival schedule was discussed")
    assert stored(store, f"SELECT DISTINCT word FROM ({TERMS})") == [(True,)]
    assert {r[0] for r in stored(store, "SELECT term FROM fidelity_terms")} >= {"harvest", "festival", "schedule"}
    say(2, "Then we fixed RowModel and RowModel.spec.mjs")
    assert stored(store, "SELECT term FROM fidelity_terms") == [("rowmodel",)]
    assert read == []


@pytest.mark.integration  # an older store migrated in place
def test_migration_19_moves_the_terms_into_the_turns_in_batches(store, monkeypatch):
    ingest_paths([SAMPLES / "harnesses", SAMPLES / "bundle"], store)
    before = stored(store, TERMS)
    assert len(before) > 50
    # The store as migration 18 left it: the terms in their own table, a row a term.
    with store.file.transaction() as con:
        con.execute(
            "CREATE TABLE turn_terms (turn_id VARCHAR NOT NULL, session_id VARCHAR NOT NULL, term VARCHAR NOT NULL, "
            "tf INTEGER NOT NULL, word BOOLEAN NOT NULL)"
        )
        con.execute(f"INSERT INTO turn_terms {TERMS}")
        con.execute("ALTER TABLE turns DROP COLUMN terms")
        con.execute("ALTER TABLE turns DROP COLUMN terms_words")
        con.execute("UPDATE schema_meta SET version = 18")
    monkeypatch.setattr(turn_rows, "BACKFILL_BATCH_TURNS", 7)  # several batches
    store.migrate()
    assert stored(store, TERMS) == before
    assert stored(store, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'turn_terms'") == [(0,)]
    assert stored(store, "SELECT max(version) FROM schema_meta") == [(SCHEMA_VERSION,)]


@pytest.mark.integration  # an archive written and restored
def test_a_restore_extracts_the_terms_of_its_turns_again(store, tmp_path):
    ingest_paths([SAMPLES / "harnesses", SAMPLES / "bundle"], store)
    before = [stored(store, TERMS), stored(store, "SELECT * FROM fidelity_terms")]
    bundle = validate_bundle(store.archive.write_archive(tmp_path / "out")["path"])
    with store.file.transaction() as con:
        con.execute("UPDATE turns SET terms = NULL, terms_words = NULL")
    store.archive.restore_archive(bundle, "replace")
    assert [stored(store, TERMS), stored(store, "SELECT * FROM fidelity_terms")] == before
