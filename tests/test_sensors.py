"""Sensors: registration, selection, budgets and backoff, in a real Dagster instance over real DuckDB;
the helpers the test_sensors_* modules share."""

from __future__ import annotations

import dataclasses
import time

import pytest
from dagster import (
    AssetKey,
    DagsterRunStatus,
    build_sensor_context,
    instance_for_test,
    validate_run_config,
)
from dagster._core.storage.event_log.schema import DynamicPartitionsTable

from assets.partitions import add_new_partitions, sessions_partitions
from digest.ingest import ingest_paths
from digest.scheduling import SweepPolicy, failure_backoff_s
from digest.settings import load_settings
from digest.summary_output import SessionSummaryOutput
from digest.synthesis import SessionSummary
from digest.tags import ESTIMATED_S_TAG, PRIORITY_TAG
from pipelines.definitions import build_definitions
from pipelines.jobs import default_run_config, requested_job
from pipelines.sensors import (
    PARTITION_CHUNK,
    digest_sensor,
    mini_summary_sensor,
    register_partitions,
    summary_sensor,
)
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


def _settings(tmp_path, **env):
    base = {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_RAW_CAP_TOKENS": "2000"}
    return load_settings({**base, **env})


def _resources(settings, url="http://127.0.0.1:9"):
    return build_definitions(dataclasses.replace(settings, model_url=url)).resources


def _tick(instance, resources, sensor=summary_sensor, cursor=None):
    with build_sensor_context(instance=instance, resources=resources, cursor=cursor) as context:
        return sensor(context)


def _daemon_tick(instance, definitions, name: str, cursor=None):
    """A tick as the daemon runs it: evaluated (which checks every requested partition, failing the
    whole tick over an unknown one), then its partition requests applied to the instance."""
    with build_sensor_context(
        instance_ref=instance.get_ref(), definitions=definitions, resources=definitions.resources, cursor=cursor
    ) as context:
        data = definitions.resolve_sensor_def(name).evaluate_tick(context)
    for request in data.dynamic_partitions_requests:
        instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
    for request in data.run_requests:
        if request.partition_key is not None:
            assert instance.has_dynamic_partition(sessions_partitions.name, request.partition_key)
    return data


def _seed_sessions(store: DigestStore, count: int, last_activity_ms: int, prefix: str = "s", turns: int = 1) -> None:
    """`count` sessions of `turns` turns a second apart, one minute apart, the newest ending at
    `last_activity_ms`."""
    rows = [
        {
            "id": f"{prefix}{i:06d}-t{j}",
            "session_id": f"{prefix}{i:06d}",
            "ts_ms": last_activity_ms - i * 60_000 - (turns - 1 - j) * 1000,
            "type": "agent-interaction",
            "document": f"User Prompt: task {i}.{j}\nAgent Thought: plan\nAgent Response: done {i}.{j}",
            "document_rebuilt": False,
            "source_file": "seed.jsonl",
            "source_line": i * turns + j + 1,
        }
        for i in range(count)
        for j in range(turns)
    ]
    for start in range(0, len(rows), 5000):
        store.ingest.write_turns(rows[start : start + 5000])
    store.ingest.refresh_sessions(dict.fromkeys(r["session_id"] for r in rows))


def _summary(session_id: str, turns: int, revision: str) -> SessionSummary:
    """A raw summary of the session at `revision`, as a run would have written it."""
    return SessionSummary(
        session_id=session_id, output=SessionSummaryOutput(**GOOD_SUMMARY), source_tier="raw", degraded=False,
        raw_canonical=True, memory_count=turns, mini_summary_count=0, input_revision=revision, model="m",
        raw_tokens_estimate=100, prompt_tokens_estimate=100, raw_cap_tokens=2000, route_reason="within-cap",
        first_activity_ms=None, last_activity_ms=None, participating_agents=[], models=[], total_tool_calls=0,
        tools_used=[], source_agent_identities=[],
    )  # fmt: skip


def _ingested(settings, model_url: str, folder, instance) -> tuple:
    """(definitions on the model at `model_url`, the store): the bundle at `folder` ingested by the
    ingest job and its sessions registered as partitions."""
    definitions = build_definitions(dataclasses.replace(settings, model_url=model_url))
    config = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
    assert definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance).success
    store = DigestStore(settings.db_path)
    register_partitions(instance, store)
    return definitions, store


def _requested(result) -> list[str]:
    return [r.partition_key for r in result.run_requests]


def test_budget_holds_at_a_thousand_pending_sessions(tmp_path, instance):
    settings = _settings(tmp_path)
    store = DigestStore(settings.db_path)
    store.migrate()
    now = int(time.time() * 1000)
    _seed_sessions(store, 1000, now - 2 * HOUR_MS)
    result = _tick(instance, _resources(settings))
    assert len(result.run_requests) == 5
    # Newest first, with one slot for the oldest so the tail never starves.
    assert _requested(result)[:4] == ["s000000", "s000001", "s000002", "s000003"]
    assert _requested(result)[4] == "s000999"
    assert all(r.run_key is None for r in result.run_requests)  # reruns are never swallowed
    assert {r.tags["digest/sweep"] for r in result.run_requests} == {"sensor"}
    # Partitions are registered in chunks a tick can afford, by the sensor result itself.
    (request,) = result.dynamic_partitions_requests
    assert len(request.partition_keys) == min(1000, PARTITION_CHUNK)


def test_ten_thousand_new_sessions_are_registered_a_chunk_a_tick_and_run_from_the_first(tmp_path, instance):
    settings = _settings(tmp_path)
    store = DigestStore(settings.db_path)
    store.migrate()
    _seed_sessions(store, 10_000, int(time.time() * 1000) - 3 * DAY_MS, turns=3)
    definitions = build_definitions(dataclasses.replace(settings, model_url="http://127.0.0.1:9"))
    registered, ticks = 0, 0
    while registered < 10_000:
        data = _daemon_tick(instance, definitions, "summary_sensor")  # every key it requests exists
        ticks += 1
        now_registered = len(instance.get_dynamic_partitions(sessions_partitions.name))
        assert now_registered == min(registered + PARTITION_CHUNK, 10_000)  # progress on every tick
        registered = now_registered
        # The batch comes from the first tick on: newest first, one slot for the oldest, which the
        # alphabetical chunks reach last (no run starts here, so each tick asks for the same five).
        assert [r.partition_key for r in data.run_requests] == ["s000000", "s000001", "s000002", "s000003", "s009999"]
        assert ticks <= 10_000 // PARTITION_CHUNK
    assert _daemon_tick(instance, definitions, "summary_sensor").dynamic_partitions_requests == []


def test_a_failing_selection_does_not_stop_registration(tmp_path, instance, monkeypatch):
    settings = _settings(tmp_path)
    store = DigestStore(settings.db_path)
    store.migrate()
    _seed_sessions(store, 3, int(time.time() * 1000) - 2 * HOUR_MS)
    definitions = build_definitions(dataclasses.replace(settings, model_url="http://127.0.0.1:9"))

    def broken(*args, **kwargs):
        raise RuntimeError("selection bug")

    monkeypatch.setattr("pipelines.sensors.next_summary_batch", broken)
    data = _daemon_tick(instance, definitions, "summary_sensor")
    assert data.run_requests == [] and "selection bug" in data.skip_message
    assert sorted(instance.get_dynamic_partitions(sessions_partitions.name)) == ["s000000", "s000001", "s000002"]


def test_partitions_another_process_registers_meanwhile_do_not_fail_the_registration(tmp_path, instance):
    """Concurrent sweeps and an ingest register the same new sessions: one of them inserts a key
    between another's read and its insert, and the storage refuses that whole request on its unique
    key (CI saw it from `session-digest sweep`). The keys still missing are added, once each."""
    settings = _settings(tmp_path)
    store = DigestStore(settings.db_path)
    store.migrate()
    _seed_sessions(store, 3, int(time.time() * 1000) - 2 * HOUR_MS)
    stale_read = set(instance.get_dynamic_partitions(sessions_partitions.name))

    class RacedInstance:
        """The real instance, but the first insert finds s000001 registered by another process after
        this one read the partitions: the storage's own filter misses it, its unique key does not."""

        def __init__(self):
            self.raced = False

        def __getattr__(self, name):
            return getattr(instance, name)

        def add_dynamic_partitions(self, name, keys):
            if self.raced:
                return instance.add_dynamic_partitions(name, keys)
            self.raced = True
            instance.add_dynamic_partitions(name, ["s000001"])
            storage = instance._event_storage  # noqa: SLF001 the insert the storage does, past its filter
            with storage.index_connection() as conn:
                conn.execute(
                    DynamicPartitionsTable.insert(), [{"partitions_def_name": name, "partition": k} for k in keys]
                )

    raced = RacedInstance()
    assert add_new_partitions(raced, store, stale_read) == 2
    assert raced.raced
    assert sorted(instance.get_dynamic_partitions(sessions_partitions.name)) == ["s000000", "s000001", "s000002"]


def test_mini_summary_and_digest_sensors_register_what_they_request(tmp_path, instance):
    settings = _settings(tmp_path)
    store = DigestStore(settings.db_path)
    store.migrate()
    _seed_sessions(store, 3, int(time.time() * 1000) - 2 * HOUR_MS)
    for row in store.query("SELECT session_id, turn_count, input_revision FROM sessions").itertuples():
        store.summaries.write_summary(_summary(row.session_id, row.turn_count, row.input_revision))
    definitions = build_definitions(dataclasses.replace(settings, model_url="http://127.0.0.1:9"))
    # None of them is a partition yet (the summary sensor may be off, or behind).
    graph = _daemon_tick(instance, definitions, "digest_sensor")
    assert sorted(r.partition_key for r in graph.run_requests) == ["s000000", "s000001", "s000002"]
    (request,) = _daemon_tick(instance, definitions, "mini_summary_sensor").run_requests
    assert instance.has_dynamic_partition(sessions_partitions.name, request.partition_key)


def test_a_sweeps_run_leaves_the_mini_summary_step_out_and_still_shows_its_summary(tmp_path, instance):
    """Issue 20: the sensor requests a raw session's run without `turn_mini_summaries` (the job runs
    it `only_if_degraded`: nothing to do there) and without checks; issue 28: a degraded one's too,
    its first summary made from the mini summaries it has. Run as the daemon takes them (the job's
    default config, whose mini-summary entry the subset ignores) and in process as the CLI does,
    each materializes its summary, its metadata on the materialization and not repeated in the
    step's output event."""
    small, big = make_turns("small", 3), make_turns("big", 40, doc_bytes=400, minis=40)  # big: over the 2,000 cap
    with ModelServer() as server:
        settings = dataclasses.replace(_settings(tmp_path), model_url=server.url)
        store = DigestStore(settings.db_path)
        store.migrate()
        ingest_paths([write_bundle(tmp_path / "bundle", small + big)], store)
        definitions = build_definitions(settings)
        requests = {r.partition_key: r for r in _daemon_tick(instance, definitions, "summary_sensor").run_requests}
        for key in ("small", "big"):
            assert requests[key].asset_selection == [AssetKey("raw_sessions"), AssetKey("session_summaries")]
            assert requests[key].asset_check_keys == []
        job = definitions.resolve_job_def("summarize_sessions")
        subset = requested_job(job, requests["small"])  # as the daemon's code server makes it
        assert validate_run_config(subset, job.get_run_config_for_partition_key("small"))
        results = {}
        for key, request in requests.items():
            run = requested_job(job, request)
            results[key] = run.execute_in_process(
                default_run_config(run, key), instance=instance, partition_key=key, tags=request.tags
            )
        assert len(server.requests) == 2  # one summary call each, no mini summary
    for key, steps in (("small", 2), ("big", 2)):
        result = results[key]
        assert result.success and len(instance.get_run_step_stats(result.run_id)) == steps
        assert instance.get_run_by_id(result.run_id).status == DagsterRunStatus.SUCCESS
        by_key = {}
        for event in result.asset_materializations_for_node("session_summaries"):
            by_key.setdefault(event.asset_key.to_user_string(), []).append(event)
        [materialized] = by_key.pop("session_summaries")
        assert materialized.partition == key and "summary" in materialized.metadata
        outputs = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
        assert len(outputs) == steps and not any(e.step_output_data.metadata for e in outputs)
        # The raw summary needed no mini summary, and its run says so on that partition (the launch
        # dialog's "Upstream data missing" otherwise); the degraded one's wait for the backfill.
        if key == "small":
            [mini] = by_key.pop("turn_mini_summaries")
            assert mini.partition == "small" and list(mini.metadata) == ["not_needed"]  # one entry (BENCHMARKS §20)
            assert mini.metadata["not_needed"].value == (
                "no mini summary needed: the summary read the raw turns (route within-cap), 3 turns, 0 mini summaries exist"
            )
        assert by_key == {}
    assert instance.get_materialized_partitions(AssetKey("session_summaries")) == {"small", "big"}
    assert instance.get_materialized_partitions(AssetKey("turn_mini_summaries")) == {"small"}
    assert store.summaries.summary_row("small")["source_tier"] == "raw"
    assert store.summaries.summary_row("big")["source_tier"] == "miniSummary"


def test_churn_gate_holds_active_sessions_back(tmp_path, instance):
    settings = _settings(tmp_path)
    store = DigestStore(settings.db_path)
    store.migrate()
    now = int(time.time() * 1000)
    _seed_sessions(store, 1, now - 60_000, prefix="active")
    _seed_sessions(store, 1, now - 2 * HOUR_MS, prefix="quiet")
    resources = _resources(settings)
    assert _requested(_tick(instance, resources)) == ["quiet000000"]
    # With a 30 s idle window, the session last active a minute ago is idle too.
    short_window = _settings(tmp_path, DIGEST_IDLE_WINDOW_S="30")
    assert sorted(_requested(_tick(instance, _resources(short_window)))) == ["active000000", "quiet000000"]


def test_nothing_eligible_says_why(tmp_path, instance):
    settings = _settings(tmp_path)
    store = DigestStore(settings.db_path)
    store.migrate()
    result = _tick(instance, _resources(settings))
    assert result.run_requests == [] and "no session needs a summary" in result.skip_reason.skip_message
    _seed_sessions(store, 2, int(time.time() * 1000) - 60_000)
    result = _tick(instance, _resources(settings))
    assert "2 pending, none eligible: 2 active within the idle window" in result.skip_reason.skip_message


def test_backoff_grows_and_resets(tmp_path, instance):
    policy = SweepPolicy()
    assert [failure_backoff_s(n, policy) for n in (1, 2, 3)] == [1800, 3600, 7200]
    assert failure_backoff_s(20, policy) == 86400

    settings = _settings(tmp_path)
    folder = write_bundle(tmp_path / "bundle", make_turns("flaky", 2))
    with ModelServer(lambda received: Behaviour.text("not json")) as server:
        definitions, store = _ingested(settings, server.url, folder, instance)
        job = definitions.resolve_job_def("summarize_sessions")

        def fail_once():
            assert not job.execute_in_process(instance=instance, partition_key="flaky", raise_on_error=False).success
            return store.query("SELECT failures, backoff_until_ms FROM summary_state").iloc[0]

        before = int(time.time() * 1000)
        first = fail_once()
        assert first["failures"] == 1 and first["backoff_until_ms"] >= before + 1800 * 1000
        result = _tick(instance, definitions.resources)
        assert result.run_requests == [] and "1 in failure backoff" in result.skip_reason.skip_message
        second = fail_once()  # e.g. a rerun from the UI
        assert second["failures"] == 2 and second["backoff_until_ms"] >= before + 3600 * 1000

        # New turns change the revision: the session is eligible again and the count restarts.
        write_bundle(tmp_path / "more", make_turns("flaky", 3), stamp="2026-11-21T00-00-00.000Z")
        config = {"ops": {"raw_turns": {"config": {"paths": [str(tmp_path / "more")]}}}}
        assert definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance).success
        assert _requested(_tick(instance, definitions.resources)) == ["flaky"]
        assert fail_once()["failures"] == 1
        server.script = lambda received: Behaviour.reply()
        assert job.execute_in_process(instance=instance, partition_key="flaky").success
    assert store.query("SELECT count(*) AS n FROM summary_state")["n"][0] == 0  # success clears it


def test_model_time_budget_follows_measured_throughput(tmp_path, instance):
    settings = _settings(tmp_path, DIGEST_SWEEP_MODEL_SECONDS="60", DIGEST_SWEEP_MAX_SESSIONS="5")
    store = DigestStore(settings.db_path)
    store.migrate()
    _seed_sessions(store, 10, int(time.time() * 1000) - 2 * HOUR_MS)
    resources = _resources(settings)
    fast = _tick(instance, resources)
    assert len(fast.run_requests) == 5  # the default throughput fits five small sessions in 60 s

    def ledger(seconds_per_token: float) -> None:
        with store.file.connect() as con:
            con.execute("DELETE FROM attempts")
            con.execute(
                """INSERT INTO attempts (session_id, stage, tier, model, prompt_bytes, tokens_estimate, duration_s,
                   outcome, suspected_truncation, created_at)
                   VALUES ('x', 'session-summary', 'raw', ?, 3000, 1000, ?, 'ok', false, now())""",
                [settings.model_name, 1000 * seconds_per_token],
            )

    ledger(0.05)  # a slow host: each small session now costs ~21 s of the 60 s budget
    slow = _tick(instance, resources)
    assert 1 <= len(slow.run_requests) < 5
    assert sum(float(r.tags[ESTIMATED_S_TAG]) for r in slow.run_requests) <= 60 + 1
    ledger(10.0)  # absurdly slow: one session still goes, so nothing starves
    assert len(_tick(instance, resources).run_requests) == 1


def test_mini_summary_sensor_serves_degraded_sessions_first_one_run_at_a_time(tmp_path, instance):
    settings = _settings(tmp_path)
    store = DigestStore(settings.db_path)
    store.migrate()
    folder = write_bundle(tmp_path / "b", make_turns("small", 2) + make_turns("huge", 30, doc_bytes=900))
    from digest.ingest import ingest_paths

    ingest_paths([folder], store)
    register_partitions(instance, store)
    resources = _resources(settings)
    # First summaries first (issue 28): while a session waits for one, no backfill holds the model.
    assert "2 session(s) wait for a summary" in _tick(instance, resources, mini_summary_sensor).skip_message
    for row in store.query("SELECT session_id, turn_count, input_revision FROM sessions").itertuples():
        store.summaries.write_summary(_summary(row.session_id, row.turn_count, row.input_revision))
    (request,) = _tick(instance, resources, mini_summary_sensor).run_requests
    assert request.partition_key == "huge"  # over the cap: its mini summaries reach its summary
    assert request.tags[PRIORITY_TAG] == "degraded-first"
    job = build_definitions(settings).resolve_job_def("fill_mini_summaries")
    instance.create_run_for_job(job, tags={"dagster/partition": "huge"}, status=DagsterRunStatus.NOT_STARTED)
    assert "still going" in _tick(instance, resources, mini_summary_sensor).skip_message


def test_digest_sensor_takes_a_fresh_reserve_then_the_oldest_and_skips_undigestible(tmp_path, instance):
    settings = _settings(tmp_path, DIGEST_GRAPH_BATCH_SESSIONS="4", DIGEST_GRAPH_FRESH_RESERVE="1")
    store = DigestStore(settings.db_path)
    store.migrate()
    _seed_sessions(store, 8, int(time.time() * 1000) - 2 * HOUR_MS)  # s000000 newest .. s000007 oldest
    register_partitions(instance, store)
    resources = _resources(settings)
    assert "no summarized session" in _tick(instance, resources, digest_sensor).skip_message
    for row in store.query("SELECT session_id, turn_count, input_revision FROM sessions").itertuples():
        store.summaries.write_summary(_summary(row.session_id, row.turn_count, row.input_revision))
    with store.file.connect() as con:
        con.execute(
            """INSERT INTO digest_state (session_id, digest_state, attempts, defer_reason, revision, updated_at)
               SELECT session_id, 'undigestible', 1, 'skip-over-band', input_revision, now() FROM sessions
               WHERE session_id = 's000007'"""
        )
    assert _requested(_tick(instance, resources, digest_sensor)) == ["s000000", "s000006", "s000005", "s000004"]
    job = build_definitions(settings).resolve_job_def("digest_sessions")
    instance.create_run_for_job(job, tags={"dagster/partition": "s000000"}, status=DagsterRunStatus.NOT_STARTED)
    assert _requested(_tick(instance, resources, digest_sensor)) == ["s000001", "s000006", "s000005", "s000004"]
