"""A summary points to its turns (issue 29): the turn ids its prompt carried, which of them went by
their mini summary, the partition's metadata with them, and a query that lists the turns, over real
HTTP to the local model server and a real DuckDB file."""

from __future__ import annotations

import dataclasses

import duckdb
import pytest

from assets.summary_view import summary_view
from digest.ingest import ingest_paths
from digest.synthesis import summarize_session
from digest.turns import canonical_order, input_revision
from resources.model_clients import OpenAIChatClient
from resources.store import DigestStore, RunLedger
from resources.store.summaries import covered_turns_query
from tests.bundles import exported_summary, write_bundle, write_summaries
from tests.conftest import make_limits, make_turns
from tests.model_server import ModelServer


def _summarize(store: DigestStore, session_id: str) -> dict:
    with ModelServer() as server:
        client = OpenAIChatClient(server.url, "fake-model", schema_style="json_object")
        result = summarize_session(
            store.sessions.load_turns([session_id]), client, make_limits(), RunLedger(store, "r")
        )
    store.summaries.write_summary(result.summary, run_id="r")
    return store.summaries.summary_row(session_id)


def _paste(store: DigestStore, session_id: str) -> list[tuple]:
    """The metadata's query, run as a user would paste it into a DuckDB client (the test's held
    connection let go meanwhile: a second database cannot attach the file this process holds)."""
    with store.file.released(), duckdb.connect(str(store.path), read_only=True) as con:
        return con.execute(covered_turns_query(session_id)).fetchall()


def _ingested(tmp_path, new_store, turns) -> DigestStore:
    store = new_store(tmp_path / "digest.duckdb")
    ingest_paths([write_bundle(tmp_path / "bundle", turns)], store)
    return store


def test_a_raw_summary_covers_every_turn_in_prompt_order_and_none_by_mini_summary(tmp_path, new_store):
    turns = make_turns("small", 3, minis=1)
    store = _ingested(tmp_path, new_store, turns)
    row = _summarize(store, "small")
    ids = [t.id for t in canonical_order(turns)]
    assert row["source_tier"] == "raw"
    assert row["covered_turn_ids"] == ids
    assert row["mini_turn_ids"] == []  # the raw prompt carries documents, whatever minis exist
    pasted = _paste(store, "small")
    assert [(r[0], r[1], r[3]) for r in pasted] == [(1, ids[0], False), (2, ids[1], False), (3, ids[2], False)]
    assert [r[5] for r in pasted] == [t.document for t in canonical_order(turns)]
    metadata = summary_view(row)
    assert metadata["covered_turns"] == 3
    assert all(f"`{i}`" in metadata["covered_turn_ids"].value for i in ids)
    assert "truncated raw" not in metadata["covered_turn_ids"].value  # a raw summary truncated nothing
    assert metadata["covered_turns_query"] == covered_turns_query("small")


def test_a_degraded_summary_says_which_turns_went_by_mini_summary_and_which_truncated_raw(tmp_path, new_store):
    turns = make_turns("big", 40, doc_bytes=400, minis=10)  # over the 2000-token cap: degraded
    store = _ingested(tmp_path, new_store, turns)
    row = _summarize(store, "big")
    ids = [t.id for t in canonical_order(turns)]
    assert (row["source_tier"], row["degraded"]) == ("miniSummary", True)
    assert row["covered_turn_ids"] == ids
    assert row["mini_turn_ids"] == ids[:10]
    pasted = _paste(store, "big")
    assert [r[1] for r in pasted] == ids
    by_mini = {r[1]: (r[3], r[4]) for r in pasted}
    assert by_mini[ids[0]] == (True, "Turn 0 mini summary: fixed grid row step 0.")
    assert by_mini[ids[10]] == (False, None)
    shown = summary_view(row)["covered_turn_ids"].value
    assert "**by their mini summary** (10)" in shown and "**truncated raw** (30)" in shown
    truncated_part = shown.split("**truncated raw**")[1]
    assert f"`{ids[10]}`" in truncated_part and f"`{ids[0]}`" not in truncated_part


def test_a_turn_with_no_text_is_not_covered_by_the_degraded_prompt(store):
    turns = make_turns("bare", 40, doc_bytes=400)
    blank = turns[5] = dataclasses.replace(turns[5], document="   ")
    with ModelServer() as server:
        client = OpenAIChatClient(server.url, "fake-model", schema_style="json_object")
        summary = summarize_session(turns, client, make_limits(), RunLedger(store, "r")).summary
    assert summary.source_tier == "turnCards"
    assert blank.id not in summary.covered_turn_ids and len(summary.covered_turn_ids) == 39
    assert summary.mini_turn_ids == []


def test_an_adopted_imported_summary_covers_every_turn_and_does_not_say_which_were_minis(tmp_path, new_store):
    turns = make_turns("imp", 3, minis=1)
    folder = tmp_path / "bundle"
    write_bundle(folder, turns)
    write_summaries(folder, [exported_summary("imp", memoryCount=3, dreamInputRevision=input_revision(turns))])
    store = new_store(tmp_path / "digest.duckdb")
    ingest_paths([folder], store)
    row = store.summaries.summary_row("imp")
    assert row["origin"] == "imported"
    assert sorted(row["covered_turn_ids"]) == sorted(t.id for t in turns)
    assert row["mini_turn_ids"] is None
    assert len(_paste(store, "imp")) == 3


@pytest.mark.integration  # an older store migrated in place
def test_the_migration_fills_the_turns_of_current_raw_summaries_and_leaves_degraded_ones_unknown(tmp_path, new_store):
    turns = make_turns("small", 3) + make_turns("big", 40, doc_bytes=400, minis=10)
    store = _ingested(tmp_path, new_store, turns)
    _summarize(store, "small")
    _summarize(store, "big")
    # The store as migration 8 left it: no such columns.
    with store.file.released(), duckdb.connect(str(store.path)) as con:
        con.execute("ALTER TABLE session_summaries DROP COLUMN covered_turn_ids")
        con.execute("ALTER TABLE session_summaries DROP COLUMN mini_turn_ids")
        con.execute("DELETE FROM schema_meta")
        con.execute("INSERT INTO schema_meta VALUES (8, now())")
    DigestStore(store.path).migrate()
    small, big = store.summaries.summary_row("small"), store.summaries.summary_row("big")
    assert small["covered_turn_ids"] == [t.id for t in canonical_order(make_turns("small", 3))]
    assert small["mini_turn_ids"] == []
    assert big["covered_turn_ids"] is None and big["mini_turn_ids"] is None
    assert summary_view(big)["covered_turns"].startswith("not recorded")


def test_the_query_quotes_the_session_id():
    assert "WHERE x.session_id = 'it''s' ORDER BY" in covered_turns_query("it's")
