"""Exported summaries through the real ingest into a real DuckDB store: a current one stands as the
session's summary (no model call owed), a stale one leaves the session pending, and a bad value in
a summaries-backup line is that line's reject, never the whole ingest's end."""

from __future__ import annotations

import math

import pytest
from dagster import AssetKey, instance_for_test

from app import cli
from assets.partitions import sessions_partitions
from digest.ingest import ingest_paths
from digest.invariants import provenance_problems
from digest.settings import load_settings
from digest.turns import canonical_order, input_revision
from resources.store import DigestStore
from tests.bundles import STAMP, exported_summary, write_bundle, write_summaries
from tests.conftest import make_turns
from tests.model_server import ModelServer
from tests.test_pipeline import _defs, _ingest

STALE = "sha256:" + "0" * 64


def three_sessions() -> tuple[list, list[dict]]:
    """Turns of three sessions, and their exported summaries: one current by revision, one current
    by the original's count rule (no revision), one stale (made from other turns)."""
    by_revision, by_count, stale = (
        make_turns("by-revision", 3, minis=1),
        make_turns("by-count", 2),
        make_turns("stale", 4),
    )
    summaries = [
        exported_summary(
            "by-revision",
            memoryCount=3,
            dreamInputRevision=input_revision(canonical_order(by_revision)),
            sourceTier="miniSummary",
            degraded=True,
        ),
        exported_summary("by-count", memoryCount=2, sourceTier="truncatedRaw", degraded=True),
        exported_summary("stale", memoryCount=4, dreamInputRevision=STALE),
    ]
    return by_revision + by_count + stale, summaries


def records(store: DigestStore, sql: str) -> list[dict]:
    with store.file.connect(read_only=True) as con:
        cursor = con.execute(sql)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def summaries_by_session(store: DigestStore) -> dict[str, dict]:
    return {r["session_id"]: r for r in records(store, "SELECT * FROM session_summaries")}


def assert_only_the_stale_one_is_pending(store: DigestStore) -> None:
    assert store.summaries.pending_summary_keys() == ["stale"]
    summaries = summaries_by_session(store)
    assert set(summaries) == {"by-revision", "by-count"}
    sessions = {r["session_id"]: r for r in records(store, "SELECT * FROM sessions")}
    for sid, row in summaries.items():
        assert row["origin"] == "imported" and row["input_revision"] == sessions[sid]["input_revision"]
        assert row["run_id"] is None and row["memory_count"] == sessions[sid]["turn_count"]
    # The provenance is the export's, not a guess of ours.
    assert (summaries["by-revision"]["source_tier"], summaries["by-revision"]["degraded"]) == ("miniSummary", True)
    assert (summaries["by-count"]["source_tier"], summaries["by-count"]["degraded"]) == ("truncatedRaw", True)
    assert all(row["raw_canonical"] is True for row in summaries.values())
    assert summaries["by-revision"]["mini_summary_count"] == 1
    assert summaries["by-revision"]["summary"] == "Summary of by-revision."
    assert summaries["by-revision"]["technologies"] == ["javascript", "neo.mjs"]
    assert summaries["by-revision"]["tools_used"] == ["read_file", "edit"]
    assert [provenance_problems(row) for row in summaries.values()] == [[], []]


def test_a_bundle_leaves_pending_only_the_session_whose_summary_is_stale(store, tmp_path):
    turns, summaries = three_sessions()
    folder = write_bundle(tmp_path / "bundle", turns)
    write_summaries(folder, summaries)

    ingest_paths([folder], store)

    assert_only_the_stale_one_is_pending(store)
    status = store.reports.status()
    assert status["pending_summaries"] == 1 and status["summaries_by_origin"] == {"imported": 2}
    # The digest pass takes the imported ones as summarized.
    assert sorted(store.graph.pending_digest_keys(fresh=1, total=10)) == ["by-count", "by-revision"]


@pytest.mark.parametrize("summaries_first", [True, False])
def test_summaries_and_turns_in_either_order_across_ingests(store, tmp_path, summaries_first):
    turns, summaries = three_sessions()
    memory = write_bundle(tmp_path / "turns", turns)
    exported = write_summaries(tmp_path / "summaries", summaries)

    for path in [exported, memory] if summaries_first else [memory, exported]:
        ingest_paths([path], store)

    assert_only_the_stale_one_is_pending(store)


def test_plan_owes_a_model_call_for_the_stale_session_only(tmp_path):
    settings = load_settings({"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai"})
    turns, summaries = three_sessions()
    folder = write_bundle(tmp_path / "bundle", turns)
    write_summaries(folder, summaries)
    store = DigestStore(settings.db_path)
    store.migrate()
    ingest_paths([folder], store)

    plan = cli.plan(settings, None)

    assert plan["pending"] == 1
    assert [s["partition"] for s in plan["next_sweep"]["sessions_detail"]] == ["stale"]


def test_new_turns_make_an_imported_summary_stale(store, tmp_path):
    turns, summaries = three_sessions()
    folder = write_bundle(tmp_path / "bundle", turns)
    write_summaries(folder, summaries)
    ingest_paths([folder], store)

    more = make_turns("by-revision", 4)[3:]  # a fourth turn arrives
    ingest_paths([write_bundle(tmp_path / "later", more, stamp="2026-11-21T09-00-00.000Z")], store)

    assert sorted(store.summaries.pending_summary_keys()) == ["by-revision", "stale"]
    # Re-ingesting the old bundle does not bring the old summary back over the new turns.
    ingest_paths([folder], store)
    assert sorted(store.summaries.pending_summary_keys()) == ["by-revision", "stale"]


def test_ours_at_the_current_turns_stays_and_ours_at_older_turns_gives_way(store, tmp_path):
    turns, summaries = three_sessions()
    folder = write_bundle(tmp_path / "bundle", turns)
    write_summaries(folder, summaries)
    ingest_paths([folder], store)
    with store.file.connect() as con:  # as if a run had summarized them since: one at these turns, one at older ones
        con.execute("UPDATE session_summaries SET summary = 'ours', origin = 'generated' WHERE session_id = 'by-count'")
        con.execute(
            "UPDATE session_summaries SET summary = 'ours', origin = 'generated', input_revision = ? "
            "WHERE session_id = 'by-revision'",
            [STALE],
        )

    ingest_paths([write_summaries(tmp_path / "again", summaries, stamp="2026-11-22T09-00-00.000Z")], store)

    rows = summaries_by_session(store)
    assert (rows["by-count"]["summary"], rows["by-count"]["origin"]) == ("ours", "generated")
    assert (rows["by-revision"]["summary"], rows["by-revision"]["origin"]) == ("Summary of by-revision.", "imported")
    # The one that gave way is kept, saying an import replaced it (issue 36).
    history = records(store, "SELECT session_id, summary, input_revision, replaced_by_run FROM summary_history")
    assert history == [
        {"session_id": "by-revision", "summary": "ours", "input_revision": STALE, "replaced_by_run": "import"}
    ]


def test_a_materialization_of_an_imported_summary_calls_no_model(tmp_path):
    turns, summaries = three_sessions()
    folder = write_bundle(tmp_path / "bundle", turns)
    write_summaries(folder, summaries)
    with instance_for_test() as instance, ModelServer() as server:
        definitions = _defs(tmp_path, server.url)
        _ingest(definitions, instance, folder)
        result = definitions.resolve_job_def("summarize_sessions").execute_in_process(
            instance=instance, partition_key="by-revision"
        )
        calls = server.chat_requests()
    assert result.success and calls == []
    meta = result.asset_materializations_for_node("session_summaries")[0].metadata
    assert meta["origin"].value == "imported"
    assert (meta["source_tier"].value, meta["degraded"].value) == ("miniSummary", True)


def test_migrate_adds_the_new_columns_to_an_older_store(store):
    with store.file.connect() as con:
        con.execute("ALTER TABLE session_summaries DROP COLUMN origin")
        con.execute("ALTER TABLE imported_summaries DROP COLUMN degraded")
        con.execute("DELETE FROM schema_meta")  # a store from before the numbered migrations
        con.execute("INSERT INTO schema_meta VALUES (1, now())")

    store.migrate()
    store.migrate()  # idempotent

    columns = {
        (r["table_name"], r["column_name"])
        for r in records(store, "SELECT table_name, column_name FROM information_schema.columns")
    }
    assert {("session_summaries", "origin"), ("imported_summaries", "degraded")} <= columns


# --- bad values in a summaries-backup line (issue 14) -------------------------------------------


@pytest.mark.parametrize(
    "meta, reason",
    [
        ({"memoryCount": math.nan}, "out-of-range: metadata.memoryCount is nan"),
        ({"memoryCount": math.inf}, "out-of-range: metadata.memoryCount is inf"),
        ({"memoryCount": -math.inf}, "out-of-range: metadata.memoryCount is -inf"),
        ({"memoryCount": 3_000_000_000}, "out-of-range: metadata.memoryCount is 3000000000"),
        ({"memoryCount": 1e300}, "out-of-range: metadata.memoryCount is 1e+300"),
        ({"memoryCount": 2.5}, "out-of-range: metadata.memoryCount is 2.5"),
        ({"memoryCount": -1}, "out-of-range: metadata.memoryCount is -1"),
        ({"memoryCount": "3"}, "wrong-type: metadata.memoryCount is str"),
        ({"memoryCount": True}, "wrong-type: metadata.memoryCount is bool"),
        ({"quality": 101}, "out-of-range: metadata.quality is 101"),
        ({"totalToolCalls": 1e10}, "out-of-range: metadata.totalToolCalls is 10000000000.0"),
        ({"sourceTier": "premium"}, "out-of-range: metadata.sourceTier is 'premium'"),
        ({"degraded": "no"}, "wrong-type: metadata.degraded is str, expected boolean"),
        ({"technologies": 7}, "wrong-type: metadata.technologies is int"),
        ({"dreamInputRevision": 5}, "wrong-type: metadata.dreamInputRevision is int"),
    ],
)
def test_a_bad_value_is_one_reject_and_the_rest_goes_through(store, tmp_path, meta, reason):
    turns = make_turns("s1", 2) + make_turns("s2", 2) + make_turns("s3", 2)
    folder = write_bundle(tmp_path / "bundle", turns)
    revision = {sid: input_revision(canonical_order([t for t in turns if t.session_id == sid])) for sid in ("s1", "s3")}
    path = write_summaries(
        folder,
        [
            exported_summary("s1", dreamInputRevision=revision["s1"]),
            exported_summary("s2", **meta),
            exported_summary("s3", dreamInputRevision=revision["s3"]),
        ],
    )

    report = ingest_paths([folder], store)

    assert report.rejects == 1
    (reject,) = records(store, "SELECT source_file, line_no, reason FROM rejects")
    assert (reject["source_file"], reject["line_no"]) == (str(path.resolve()), 2)
    assert reject["reason"].startswith(reason)
    assert sorted(r["session_id"] for r in records(store, "SELECT session_id FROM imported_summaries")) == ["s1", "s3"]
    assert store.summaries.pending_summary_keys() == ["s2"]
    assert {r["session_id"]: r["turn_count"] for r in records(store, "SELECT * FROM sessions")} == {
        "s1": 2,
        "s2": 2,
        "s3": 2,
    }


class FailingSink:
    """The real store's ingest writes, whose write fails at the second batch: an ingest that stops
    part-way."""

    def __init__(self, ingest):
        self.ingest, self.batches = ingest, 0

    def write_turns(self, rows):
        self.batches += 1
        if self.batches == 2:
            raise OSError("disk full")
        return self.ingest.write_turns(rows)

    def __getattr__(self, name):
        return getattr(self.ingest, name)


def test_an_ingest_that_stops_part_way_leaves_no_turn_without_its_session(store, tmp_path, monkeypatch):
    import digest.ingest as ingest_module

    monkeypatch.setattr(ingest_module, "BATCH_ROWS", 4)
    folder = write_bundle(tmp_path / "bundle", make_turns("s1", 3) + make_turns("s2", 6))

    monkeypatch.setattr(store, "ingest", FailingSink(store.ingest))
    with pytest.raises(OSError):
        ingest_paths([folder / f"memory-backup-{STAMP}.jsonl"], store)

    written = records(store, "SELECT session_id, count(*) AS n FROM turns GROUP BY 1 ORDER BY 1")
    assert written == [{"session_id": "s1", "n": 3}, {"session_id": "s2", "n": 1}]
    sessions = records(store, "SELECT session_id, turn_count FROM sessions ORDER BY 1")
    assert sessions == [{"session_id": "s1", "turn_count": 3}, {"session_id": "s2", "turn_count": 1}]
    assert sorted(store.summaries.pending_summary_keys()) == ["s1", "s2"]


def test_a_current_imported_summary_is_a_materialized_partition_and_a_rerun_keeps_it(tmp_path):
    turns, summaries = three_sessions()
    folder = write_bundle(tmp_path / "bundle", turns)
    write_summaries(folder, summaries)
    with instance_for_test() as instance, ModelServer() as server:
        definitions = _defs(tmp_path, server.url)
        _ingest(definitions, instance, folder)  # registers the partitions
        status = instance.get_status_by_partition(
            AssetKey("session_summaries"), instance.get_dynamic_partitions("sessions"), sessions_partitions
        )
        materialized = {k for k, v in status.items() if v is not None}
        events = instance.fetch_materializations(AssetKey("session_summaries"), limit=10).records
        meta = {e.partition_key: e.asset_materialization.metadata for e in events}
        result = definitions.resolve_job_def("summarize_sessions").execute_in_process(
            instance=instance, partition_key="by-revision"
        )
        calls = server.chat_requests()
        logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert set(meta) == {"by-revision", "by-count"}  # the stale one stays missing
    assert meta["by-revision"]["origin"].value == "imported"
    assert "imported from" in meta["by-revision"]["provenance"].value
    assert isinstance(meta["by-revision"]["fidelity"].value, float)
    assert {"by-revision", "by-count"} <= materialized and "stale" not in materialized
    assert result.success and calls == []
    assert any("keeps its imported summary" in m for m in logs)
