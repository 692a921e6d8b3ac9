"""Archive and restore over real DuckDB files, real HTTP to the test model server, and a real
Dagster instance for the reruns after a restore."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, build_sensor_context, instance_for_test

from assets.sessions import summary_record_metadata
from assets.work.sessions import run_cost
from digest.archive import summary_backup_row
from digest.archive_read import BundleError, SessionState, restore_outcome, validate_bundle
from digest.friction import FrictionEvent
from digest.ingest import ingest_paths
from digest.settings import load_settings
from digest.synthesis import summarize_session
from pipelines.definitions import build_definitions
from pipelines.sensors import register_partitions, summary_sensor
from resources.model_hosts import ModelHosts
from resources.store import NOT_ARCHIVED, DigestStore, RunLedger
from tests.bundle_edits import (
    fingerprint,
)
from tests.bundles import write_bundle
from tests.conftest import make_turns, project_free_environ
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer

CLI = [sys.executable, "-m", "app.cli"]


@pytest.fixture
def server():
    with ModelServer(
        lambda received: Behaviour.reply({**GOOD_SUMMARY, "technologies": ["C, C++", "duckdb"]})
    ) as server:
        yield server


def _settings(home: Path, url: str, **env):
    base = {"DIGEST_HOME": str(home), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_RAW_CAP_TOKENS": "2000"}
    return dataclasses.replace(load_settings({**base, **env}), model_url=url)


def _new_store(settings) -> DigestStore:
    store = DigestStore(settings.db_path)
    store.migrate()
    return store


def _summarize(settings, store: DigestStore, session_ids: list[str]) -> None:
    """What the summary asset does, without a Dagster run: the cached client, the synthesis, the write."""
    model = ModelHosts(settings)
    for session_id in session_ids:
        revision = store.sessions.session_by_partition(session_id)["input_revision"]
        client = model.client(store, session=(session_id, revision))
        result = summarize_session(
            store.sessions.load_turns([session_id]), client, model.limits(), RunLedger(store, f"run-{session_id}")
        )
        store.summaries.write_summary(result.summary, run_id=f"run-{session_id}")


def _populated_store(tmp_path, url: str) -> tuple:
    """Every table with rows: turns, mini summaries (imported and generated), summaries (raw and
    degraded), attempts, friction, rejects, imported summaries, backoff and archive state, the cache."""
    settings = _settings(tmp_path / "live", url)
    store = _new_store(settings)
    folder = write_bundle(tmp_path / "bundle", make_turns("small", 3) + make_turns("big", 30, doc_bytes=400, minis=20))
    (folder / "turns-extra.jsonl").write_text('{"id": "x1"}\n')
    (folder / "summaries-backup-2026-01-01T00-00-00.000Z.jsonl").write_text(
        json.dumps(
            {
                "id": "summary_small",
                "metadata": {"sessionId": "small", "memoryCount": 2, "title": "old"},
                "document": "d",
            }
        )
        + "\n"
    )
    ingest_paths([folder], store)
    _summarize(settings, store, ["small", "big"])
    store.mini_summaries.save_generated_mini_summary("big-t025", "big", "generated line", "m")
    store.mini_summaries.record_mini_summary_failure("big-t026", "big", "timeout-inner", 5)
    store.mini_summaries.record_backfill_run("big", 2, 1, None, "run-x")
    store.summaries.record_summary_failure("small", "sha256:old", "timeout", 1, lambda n: 60)
    store.attempts.record_friction(
        FrictionEvent("small", "c", "m", "timeout", "post-invocation-failure", 10, 4, 8192, 6144, 2000, note="n"),
        "run-x",
    )
    # Graph rows: an entity both sessions name, and a turn node holding an older copy of its mini summary.
    store.query(
        """INSERT INTO graph_nodes (session_id, id, label, properties, input_revision, run_id, created_at) VALUES
           ('small', 'concept:grid', 'CONCEPT', '{"name": "grid", "description": "rows"}', 'r', 'g', '2026-01-01 00:00:00+00'),
           ('big', 'concept:grid', 'CONCEPT', '{"name": "grid", "seenIn": "big"}', 'r', 'g', '2026-01-02 00:00:00+00'),
           ('big', 'big-t000', 'AGENT_MEMORY', '{"sessionId": "big", "miniSummary": "stale"}', 'r', 'g', '2026-01-02 00:00:00+00')"""
    )
    store.query(
        """INSERT INTO graph_edges (session_id, id, source, target, type, properties, input_revision, run_id, created_at)
           VALUES ('big', 'concept:grid->session:big:MENTIONED_IN', 'concept:grid', 'session:big', 'MENTIONED_IN',
                   '{"weight": 1.0}', 'r', 'g', '2026-01-02 00:00:00+00')"""
    )
    return settings, store


def _manifest(archive: dict) -> dict:
    return json.loads((Path(archive["path"]) / "manifest.json").read_text())


def test_archive_then_restore_into_an_empty_store_gives_the_same_rows(tmp_path, server):
    settings, store = _populated_store(tmp_path, server.url)
    first = store.archive.write_archive(tmp_path / "archives")

    copy = _new_store(_settings(tmp_path / "copy", server.url))
    result = copy.archive.restore_archive(validate_bundle(first["path"]), "replace")
    second = copy.archive.write_archive(tmp_path / "archives-of-copy")

    # The copy's own archive has the same files, row for row: same counts, same checksums.
    def by_content(archive):
        return {(f["kind"], f["table"]): (f["rows"], f["sha256"]) for f in _manifest(archive)["files"]}

    assert by_content(second) == by_content(first)
    assert result["rows"]["turns"] == 33 and result["rows"]["response_cache"] == 2
    live, restored = fingerprint(store.path), fingerprint(copy.path)
    for table in set(live) - {"archives", "sessions", "schema_meta"}:
        assert restored[table] == live[table], table
    # `sessions` is recomputed from the turns: the same but for when it was computed.
    without_updated_at = "SELECT * EXCLUDE (updated_at) FROM sessions ORDER BY session_id"
    assert copy.query(without_updated_at).equals(store.query(without_updated_at))
    assert result["outcome"].pending == [] and result["outcome"].summaries_restored == ["big", "small"]
    # A comma inside a technology survives (the table file is exact; the Neo-shaped line joins them).
    assert copy.query("SELECT technologies FROM session_summaries WHERE session_id = 'small'")["technologies"][
        0
    ].tolist() == [
        "C, C++",
        "duckdb",
    ]
    # Restored ids are past the sequences: new ledger rows do not collide.
    copy.attempts.record_friction(
        FrictionEvent("small", "c", "m", "timeout", "post-invocation-failure", 1, 1, 1, 1, None, "n")
    )


def test_the_bundle_has_the_originals_shapes(tmp_path, server):
    settings, store = _populated_store(tmp_path, server.url)
    bundle = Path(store.archive.write_archive(tmp_path / "archives")["path"])
    memory = [json.loads(line) for line in next(bundle.glob("memory-backup-*.jsonl")).read_text().splitlines()]
    assert set(memory[0]) == {"id", "embedding", "metadata", "document"}
    # Each turn's vector as it was ingested (`[0.125, -0.5, 0.25, 1.0]`, float32 values: kept as
    # numbers and written back as the shortest decimals of the same doubles).
    assert all(m["embedding"] == [0.125, -0.5, 0.25, 1.0] for m in memory)
    assert next(bundle.glob("memory-backup-*.jsonl")).read_text().count('"embedding":[0.125,-0.5,0.25,1.0],') == 33
    files = {f["kind"]: f for f in json.loads((bundle / "manifest.json").read_text())["files"]}
    assert files["memory"]["vectors"] == {
        "with_embedding": 33,
        "without_embedding": 0,
        "sessions_without_embedding": [],
    }
    # Summaries made here have no vector: the original's import re-embeds them.
    assert files["summaries"]["vectors"] == {
        "with_embedding": 0,
        "without_embedding": 2,
        "sessions_without_embedding": ["big", "small"],
    }
    assert {"sessionId", "timestamp", "prompt", "thought", "response"} <= set(memory[0]["metadata"])
    summaries = [json.loads(line) for line in next(bundle.glob("summaries-backup-*.jsonl")).read_text().splitlines()]
    small = next(s for s in summaries if s["id"] == "summary_small")
    assert small["metadata"]["technologies"] == "C, C++,duckdb" and small["document"] == GOOD_SUMMARY["summary"]
    graph = [json.loads(line) for line in next(bundle.glob("graph-backup-*.jsonl")).read_text().splitlines()]
    nodes = {g["data"]["id"]: g["data"] for g in graph if g["type"] == "node"}
    minis = {i: n["properties"]["miniSummary"] for i, n in nodes.items() if "miniSummary" in n["properties"]}
    assert len(minis) == 21 and minis["big-t025"] == "generated line"
    # The ingested graph lines go out too: the export's AGENT_MEMORY node of every turn.
    assert sum(n["label"] == "AGENT_MEMORY" for n in nodes.values()) == 33
    assert minis["big-t000"].startswith("Turn 0 mini summary")  # the store's, not the graph's older copy
    assert nodes["concept:grid"]["properties"] == {"name": "grid", "description": "rows", "seenIn": "big"}
    edges = {g["data"]["id"] for g in graph if g["type"] == "edge"}
    assert [g["type"] for g in graph] == ["node"] * len(nodes) + ["edge"] * len(edges)
    assert "concept:grid->session:big:MENTIONED_IN" in edges
    assert {"summary_small", "summary_big"} <= set(nodes)  # written with the summaries
    # The bundle is also an export `session-digest ingest` reads: turns and mini summaries come in.
    other = _new_store(_settings(tmp_path / "other", server.url))
    report = ingest_paths([bundle], other)
    assert report.turns == 33 and report.rejects == 0
    assert other.query("SELECT count(*) AS n FROM mini_summaries")["n"][0] == 21
    tables = {f["table"] for f in json.loads((bundle / "manifest.json").read_text())["files"] if f["kind"] == "table"}
    assert {"attempts", "friction_events", "mini_summaries", "response_cache", "session_summaries"} <= tables
    assert not tables & NOT_ARCHIVED


def test_a_corrupt_or_truncated_bundle_is_refused_and_changes_nothing(tmp_path, server):
    settings, store = _populated_store(tmp_path, server.url)
    archive = store.archive.write_archive(tmp_path / "archives")
    bundle = Path(archive["path"])
    store.mini_summaries.save_generated_mini_summary("small-t000", "small", "written after the archive", "m")
    before = fingerprint(store.path)

    memory = next(bundle.glob("memory-backup-*.jsonl"))
    data = memory.read_bytes()
    memory.write_bytes(data[: len(data) - 40])  # truncated in its last line
    with pytest.raises(BundleError) as refused:
        store.archive.restore_archive(validate_bundle(bundle), "replace")
    problems = "\n".join(refused.value.problems)
    last = len(data.splitlines())
    assert f"{memory.name}: sha256 differs" in problems
    assert f"{memory.name}:{last}: the last line is cut off" in problems
    memory.write_bytes(data)

    attempts = bundle / "tables" / "attempts.jsonl"
    lines = attempts.read_text().splitlines(keepends=True)
    attempts.write_text(lines[0] + "{not json\n" + "".join(lines[1:]))
    with pytest.raises(BundleError, match=r"tables/attempts.jsonl:2: .*Expecting property name"):
        validate_bundle(bundle)
    attempts.write_text("".join(lines))

    # End to end: the CLI says what is wrong and the store is untouched.
    summaries = bundle / "tables" / "session_summaries.jsonl"
    summaries.write_text(
        summaries.read_text().replace('"title":"Fix token refresh"', '"title":"Fix token refreshes"', 1)
    )
    env = {
        **project_free_environ(),
        "DIGEST_HOME": str(tmp_path / "live"),
    }
    done = subprocess.run(
        CLI + ["restore", str(bundle), "--mode", "replace"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "tables/session_summaries.jsonl: sha256 differs from the manifest's" in done.stderr
    assert "nothing was changed" in done.stderr
    assert fingerprint(store.path) == before


def test_replace_touches_only_the_bundles_sessions_and_tables(tmp_path, server):
    settings, store = _populated_store(tmp_path, server.url)
    archive = store.archive.write_archive(tmp_path / "archives", sessions=["small"])
    assert "tables/rejects.jsonl" not in archive["rows"]  # not about any session
    # Both re-summarized since (a summary write sets created_at).
    store.query(
        "UPDATE session_summaries SET title = 'changed since', created_at = now() WHERE session_id IN ('small', 'big')"
    )
    result = store.archive.restore_archive(validate_bundle(archive["path"]), "replace")
    titles = dict(store.query("SELECT session_id, title FROM session_summaries").values.tolist())
    assert titles == {"small": GOOD_SUMMARY["title"], "big": "changed since"}
    assert store.query("SELECT count(*) AS n FROM rejects")["n"][0] == 1
    assert result["outcome"].summaries_restored == ["small"]
    # The summary the restore replaced is kept, saying what replaced it (issue 36).
    history = store.query("SELECT session_id, title, replaced_by_run FROM summary_history").values.tolist()
    assert history == [["small", "changed since", f"restore of archive {archive['archive_id']}"]]


def test_merge_adds_what_is_missing_and_keeps_what_is_there(tmp_path, server):
    settings, store = _populated_store(tmp_path, server.url)
    archive = store.archive.write_archive(tmp_path / "archives")
    attempts = store.query("SELECT count(*) AS n FROM attempts")["n"][0]
    store.query("DELETE FROM session_summaries WHERE session_id = 'big'")
    store.query("UPDATE session_summaries SET title = 'kept' WHERE session_id = 'small'")
    result = store.archive.restore_archive(validate_bundle(archive["path"]), "merge")
    assert dict(store.query("SELECT session_id, title FROM session_summaries").values.tolist()) == {
        "small": "kept",
        "big": GOOD_SUMMARY["title"],
    }
    # Ledger rows are merged by content: restoring the same bundle again adds nothing.
    assert store.query("SELECT count(*) AS n FROM attempts")["n"][0] == attempts
    assert result["rows"]["attempts"] == 0 and result["rows"]["session_summaries"] == 1
    assert store.archive.restore_archive(validate_bundle(archive["path"]), "merge")["rows"]["session_summaries"] == 0


def test_restored_sessions_with_changed_turns_are_rerun_and_identical_ones_are_not(tmp_path, server):
    settings, store = _populated_store(tmp_path, server.url)
    baseline = store.archive.write_archive(tmp_path / "archives")
    # The store moves on: a new turn for `small`, not summarized yet; that state is archived too.
    extra = make_turns("small", 4)[3]
    ingest_paths([write_bundle(tmp_path / "extra", [extra], stamp="2026-11-21T09-00-00.000Z")], store)
    moved_on = store.archive.write_archive(tmp_path / "archives-later")

    target_settings = _settings(tmp_path / "target", server.url)
    target = _new_store(target_settings)
    first = target.archive.restore_archive(validate_bundle(baseline["path"]), "replace")
    assert first["outcome"].pending == [] and target.summaries.pending_summary_keys() == []
    for mode in ("merge", "replace"):
        outcome = target.archive.restore_archive(validate_bundle(moved_on["path"]), mode)["outcome"]
        assert outcome.pending == ["small"] and "big" not in outcome.pending
        assert target.summaries.pending_summary_keys() == ["small"]

    # The summary sensor asks for exactly that session: no run key swallows the rerun.
    with instance_for_test() as instance:
        register_partitions(instance, target)
        resources = build_definitions(target_settings).resources
        with build_sensor_context(instance=instance, resources=resources) as context:
            result = summary_sensor(context)
    assert [r.partition_key for r in result.run_requests] == ["small"]


def _run_every_partition(settings, instance, keys):
    job = build_definitions(settings).resolve_job_def("summarize_sessions")
    return [job.execute_in_process(instance=instance, partition_key=key) for key in keys]


def test_a_rerun_after_a_restore_makes_no_model_call(tmp_path):
    folder = write_bundle(tmp_path / "bundle", make_turns("small", 3) + make_turns("big", 30, doc_bytes=400, minis=20))
    with ModelServer() as server, instance_for_test() as instance:
        settings = _settings(tmp_path / "live", server.url)
        store = _new_store(settings)
        ingest_paths([folder], store)
        register_partitions(instance, store)
        assert all(r.success for r in _run_every_partition(settings, instance, ["small", "big"]))
        archive = store.archive.write_archive(tmp_path / "archives")
    archived = {r["session_id"]: r for r in store.reports.summary_rows()}
    assert len(server.chat_requests()) > 2  # the big session's mini summaries, then both summaries

    # Another host: a new DuckDB file, a new Dagster instance, the model at another address.
    with ModelServer() as other_server, instance_for_test() as instance:
        settings = _settings(tmp_path / "restored", other_server.url)
        store = _new_store(settings)
        store.archive.restore_archive(validate_bundle(archive["path"]), "replace")
        register_partitions(instance, store)
        # What a user does from the UI after a restore: rerun every partition.
        results = _run_every_partition(settings, instance, ["small", "big"])
        materialized = instance.get_materialized_partitions(AssetKey("session_summaries"))
    assert all(r.success for r in results) and materialized == {"small", "big"}
    assert other_server.chat_requests() == []
    rerun = {r["session_id"]: r for r in store.reports.summary_rows()}
    content = [
        "summary",
        "title",
        "category",
        "technologies",
        "source_tier",
        "degraded",
        "route_reason",
        "input_revision",
    ]
    assert {s: {c: row[c] for c in content} for s, row in rerun.items()} == {
        s: {c: row[c] for c in content} for s, row in archived.items()
    }
    assert {r["source_tier"] for r in rerun.values()} == {"raw", "miniSummary"}


def test_retired_sessions_are_out_of_every_sweep_until_restored(tmp_path, server):
    settings, store = _populated_store(tmp_path, server.url)
    ingest_paths([write_bundle(tmp_path / "more", make_turns("small", 4)[3:] + make_turns("fresh", 2))], store)
    assert sorted(store.summaries.pending_summary_keys()) == ["fresh", "small"]
    archive = store.archive.write_archive(tmp_path / "archives", sessions=["small", "big"], retire=True)
    assert archive["retired"] == ["big", "small"]

    assert store.summaries.pending_summary_keys() == ["fresh"]
    queue = store.summaries.summary_queue(now_ms=2_000_000_000_000, idle_window_s=600, newest=10, oldest=10)
    assert [c.session_id for c in queue["candidates"]] == ["fresh"]
    limits = settings.limits()
    assert "big" not in store.mini_summaries.pending_mini_summary_keys(limits, "degraded-first", 2_000_000_000_000)
    assert store.reports.status()["pending_summaries"] == 1
    recorded = store.query("SELECT archive_id, sessions, retired FROM archives")
    assert recorded["retired"].tolist() == [True] and list(recorded["sessions"][0]) == ["big", "small"]

    # Merge keeps the tombstones (the live store wins); replace restores the bundle's state.
    assert store.archive.restore_archive(validate_bundle(archive["path"]), "merge")["outcome"].retired == [
        "big",
        "small",
    ]
    outcome = store.archive.restore_archive(validate_bundle(archive["path"]), "replace")["outcome"]
    assert outcome.retired == [] and outcome.pending == ["small"]
    assert sorted(store.summaries.pending_summary_keys()) == ["fresh", "small"]


def test_restore_outcome_classifies_sessions():
    def state(revision, summary, created="t1", retired=False):
        return SessionState("key", revision, summary, created if summary else None, retired)

    before = {
        "same": state("r1", "r1"),
        "older": state("r2", "r2"),
        "gone": state("r1", "r1"),
        "quiet": state("r1", "r1"),
    }
    after = {
        "same": state("r1", "r1"),
        "older": state("r1", "r1", created="t0"),  # the bundle's older summary, consistent with its turns
        "grown": state("r3", "r1"),
        "new": state("r1", None),
        "quiet": state("r1", "r1", retired=True),
    }
    outcome = restore_outcome(before, after)
    assert outcome.pending == ["grown", "new"]
    assert outcome.summaries_restored == ["older"]
    assert outcome.removed == ["gone"]
    assert outcome.retired == ["quiet"]
    assert outcome.unchanged == ["same"]


def test_summary_backup_row_falls_back_to_the_write_time_without_activity(tmp_path, server):
    settings, store = _populated_store(tmp_path, server.url)
    row = {**store.reports.summary_rows()[0], "last_activity_ms": None}
    line = summary_backup_row(row)
    assert line["metadata"]["timestamp"] == int(row["created_at"].timestamp() * 1000)


def test_archive_restore_and_cache_clear_from_the_cli(tmp_path, server):
    settings, store = _populated_store(tmp_path, server.url)
    env = {
        **project_free_environ(),
        "DIGEST_HOME": str(tmp_path / "live"),
    }

    def run(*args) -> dict:
        done = subprocess.run(CLI + [*args, "--json"], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    archived = run("archive", "--sessions", "small", "--retire")
    assert archived["retired"] == ["small"] and Path(archived["path"]).parent == tmp_path / "live" / "archives"
    assert store.summaries.pending_summary_keys() == [] and store.query("SELECT * FROM retired_sessions")[
        "session_id"
    ].tolist() == ["small"]
    store.query("UPDATE session_summaries SET title = 'moved on', created_at = now() WHERE session_id = 'small'")
    restored = run("restore", archived["path"], "--mode", "replace")
    assert restored["summaries_restored"] == 1 and restored["partitions"] == {"added": 2, "removed": []}
    assert restored["still_retired"] == [] and restored["pending"] == []
    assert (
        store.query("SELECT title FROM session_summaries WHERE session_id = 'small'")["title"][0]
        == GOOD_SUMMARY["title"]
    )
    # The asset page shows the restored summary as its run did: the one metadata builder for both,
    # the cost from the ledger the bundle brought back, and where it came from.
    with DagsterInstance.from_config(str(settings.dagster_home)) as instance:
        event = instance.get_latest_materialization_event(AssetKey("session_summaries"))
    shown = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    row = store.summaries.summary_row("small")
    assert event.run_id == "" and event.asset_materialization.partition == "small"
    assert shown.keys() >= summary_record_metadata(row, run_cost(store, "small", row["run_id"])).keys()
    assert f"### {GOOD_SUMMARY['title']}" in shown["summary"] and shown["source_tier"] == "raw"
    assert (shown["verdict"], shown["fidelity"], shown["model"]) == (row["verdict"], row["fidelity"], row["model"])
    assert shown["cost_calls"] == 1 and shown["cost_model_s"] > 0
    assert shown["recorded_by"] == f"restored from {Path(archived['path']).resolve()}"
    assert run("cache", "clear") == {"cleared": 2}
