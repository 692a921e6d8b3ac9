"""The `backlog` asset and its stall check, refreshed by the summary sensor and the CLI's sweep, in a
real Dagster instance over a real DuckDB file; and new sessions as partitions at ingest."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
import yaml
from dagster import (
    AssetCheckEvaluation,
    AssetKey,
    AssetMaterialization,
    DagsterRunStatus,
    RunsFilter,
    build_sensor_context,
    instance_for_test,
    materialize,
)

from assets.backlog import backlog, backlog_not_stalled
from assets.friction_report import friction_report
from assets.partitions import sessions_partitions
from digest.backlog import Drain, measure_backlog, stalled
from digest.hosts import HostView, assign_batch
from digest.ingest import ingest_paths
from digest.scheduling import Candidate
from digest.settings import load_settings
from digest.tags import (
    BUDGET_TAG,
    ESTIMATED_S_TAG,
    FILES_TAG,
    INBOX_BATCH_TAG,
    MODEL_HOST_REASON_TAG,
    MODEL_HOST_TAG,
    ROUTE_TAG,
    SWEEP_TAG,
)
from pipelines.definitions import build_definitions
from pipelines.instance import write_instance_config
from pipelines.jobs import requested_job
from pipelines.sensors import inbox_sensor, summary_sensor
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.test_sensors import _summary

HOUR_MS = 3_600_000
TWO_HOSTS = """
[[hosts]]
name = "cpu"
provider = "ollama"
url = "http://10.0.0.5:11434/"
model = "qwen3:4b"
context_limit_tokens = 32768
raw_cap_tokens = 8192

[[hosts]]
name = "gpu"
provider = "openai"
url = "http://10.0.0.9:8080"
context_limit_tokens = 131072
raw_cap_tokens = "off"
concurrency = 4
"""


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


def _drain(**fields) -> Drain:
    base = dict(
        pending=0, active=0, backing_off=0, oldest_pending_ms=None, last_finished_ms=None, finished_last_hour=0,
        finished_last_day=0, model_seconds_last_hour=0.0, model_seconds_last_day=0.0, summaries_by_tier={},
        summaries_by_verdict={},
    )  # fmt: skip
    return Drain(**{**base, **fields})


def _views(tmp_path) -> list[HostView]:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(TWO_HOSTS)
    fleet = load_settings({"DIGEST_HOME": str(tmp_path), "DIGEST_MODEL_HOSTS": str(hosts)}).fleet
    return [HostView(h, fleet.limits(h.name), 1 / 50) for h in fleet.hosts]


def test_the_eta_is_the_longest_host_queue_over_its_call_slots(tmp_path):
    views = _views(tmp_path)
    # Nine small sessions both hosts take raw, and one over the CPU host's cap that only the GPU host takes raw.
    candidates = [Candidate(f"s{i}", f"s{i}", None, 10, 6_000, 2_000, 0) for i in range(9)]
    candidates.append(Candidate("big", "big", None, 10, 60_000, 2_000, 0))
    backlog = measure_backlog(_drain(pending=10), candidates, views, now_ms=0)
    placed = assign_batch(candidates, views)
    per_host = {h: sum(a.model_seconds_estimate for a in placed if a.host == h) for h in ("cpu", "gpu")}
    assert backlog.by_host == {h: sum(a.host == h for a in placed) for h in ("cpu", "gpu")}
    assert backlog.by_host["gpu"] > backlog.by_host["cpu"] > 0  # four call slots to one
    assert backlog.by_route == {"within-cap": 10} and backlog.by_tier == {"raw": 10}
    assert backlog.eta_s == pytest.approx(max(per_host["cpu"] / 1, per_host["gpu"] / 4))
    assert backlog.eta_s < sum(per_host.values())  # the hosts drain side by side
    # No host in rotation: nothing placed, no ETA.
    alone = measure_backlog(_drain(pending=10), candidates, [], now_ms=0)
    assert (alone.unplaced, alone.eta_s, alone.by_host) == (10, None, {})


@pytest.mark.parametrize(
    ("drain", "hosts", "is_stalled"),
    [
        ({"pending": 3, "oldest_pending_ms": 0}, 1, True),  # waited 2 h, never a summary
        ({"pending": 3, "oldest_pending_ms": 0, "last_finished_ms": HOUR_MS // 2}, 1, True),
        ({"pending": 3, "oldest_pending_ms": 0, "last_finished_ms": int(1.5 * HOUR_MS)}, 1, False),  # 30 min ago
        ({"pending": 3, "oldest_pending_ms": int(1.5 * HOUR_MS)}, 1, False),  # arrived 30 min ago
        ({"pending": 3, "active": 3, "oldest_pending_ms": 0}, 1, False),  # all behind the churn gate
        ({"pending": 3, "oldest_pending_ms": 0}, 0, False),  # no host in rotation: the circuits say so
        ({"pending": 0}, 1, False),
    ],
)
def test_a_backlog_is_stalled_only_when_work_waits_a_host_is_up_and_nothing_finishes(
    tmp_path, drain, hosts, is_stalled
):
    views = _views(tmp_path)[:hosts]
    backlog = measure_backlog(_drain(**drain), [], views, now_ms=2 * HOUR_MS)
    reason = stalled(backlog, stall_after_s=3600)
    assert (reason is not None) == is_stalled
    if is_stalled:
        assert reason.startswith("stalled backlog: 3 session(s) wait (the oldest 120 min)")


def _settings(tmp_path, **env):
    base = {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_RAW_CAP_TOKENS": "2000"}
    return load_settings({**base, **env})


def _definitions(settings):
    return build_definitions(dataclasses.replace(settings, model_url="http://127.0.0.1:9"))


def _tick(instance, definitions, sensor=summary_sensor, cursor=None):
    with build_sensor_context(instance=instance, resources=definitions.resources, cursor=cursor) as context:
        return sensor(context)


def _inbox_request(instance, definitions, settings, turns):
    """The inbox sensor's run request for a bundle of these turns dropped into the inbox."""
    write_bundle(settings.inbox, turns)
    old = time.time() - 60  # settled: untouched for longer than the sensor waits
    for path in settings.inbox.iterdir():
        os.utime(path, (old, old))
    (request,) = _tick(instance, definitions, inbox_sensor).run_requests
    return request


def _ingest_from_inbox(instance, definitions, settings, turns) -> None:
    """What the daemon does with the inbox sensor's run request: the ingest job, run as requested."""
    request = _inbox_request(instance, definitions, settings, turns)
    job = definitions.resolve_job_def("ingest")
    result = requested_job(job, request).execute_in_process(
        run_config=request.run_config, instance=instance, tags=request.tags
    )
    assert result.success


def _backlog_events(result):
    materialized = [e for e in result.asset_events if isinstance(e, AssetMaterialization)]
    checked = [e for e in result.asset_events if isinstance(e, AssetCheckEvaluation)]
    return [e for e in materialized if e.asset_key == AssetKey("backlog")], checked


def test_the_summary_sensor_records_the_backlog_at_most_every_refresh_and_ingest_makes_partitions(tmp_path, instance):
    settings = _settings(tmp_path, DIGEST_BACKLOG_REFRESH_S="3600")
    definitions = _definitions(settings)
    _ingest_from_inbox(instance, definitions, settings, make_turns("a", 3) + make_turns("b", 2) + make_turns("c", 4))
    # The ingest run registered its sessions: no summary sensor tick was needed.
    assert sorted(instance.get_dynamic_partitions(sessions_partitions.name)) == ["a", "b", "c"]

    result = _tick(instance, definitions)
    [materialization], [check] = _backlog_events(result)
    meta = {k: v.value for k, v in materialization.metadata.items()}
    assert meta["pending"] == 3 and meta["pending_host_default"] == 3
    assert meta["pending_route_within-cap"] + meta.get("pending_route_over-raw-cap", 0) == 3
    assert meta["eta_s"] > 0 and meta["finished_last_hour"] == 0 and meta["oldest_pending_age_s"] < 600
    assert meta["summary"].startswith("3 pending, the oldest waiting")
    assert check.passed and check.check_name == "backlog_not_stalled"  # just arrived: not stalled
    # Recorded in the instance (as the daemon records a tick's events), the next tick within the hour adds none.
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    assert instance.get_latest_materialization_event(AssetKey("backlog")) is not None
    assert _backlog_events(_tick(instance, definitions)) == ([], [])


def _materialize_backlog(instance, definitions):
    """The asset and its check in a run, as the UI's Materialize does."""
    return materialize([backlog, backlog_not_stalled], instance=instance, resources=definitions.resources)


def test_the_check_names_a_stalled_backlog_and_passes_once_a_summary_finishes(tmp_path, instance):
    settings = _settings(tmp_path, DIGEST_BACKLOG_STALL_S="1800")
    definitions = _definitions(settings)
    store = DigestStore(settings.db_path)
    store.migrate()
    write_bundle(tmp_path / "bundle", make_turns("a", 3) + make_turns("b", 2))
    ingest_paths([tmp_path / "bundle"], store)
    with store.file.connect() as con:  # ingested two hours ago, and nothing finished since
        con.execute("UPDATE sessions SET updated_at = now() - INTERVAL 2 HOUR")
    result = _materialize_backlog(instance, definitions)
    [check] = result.get_asset_check_evaluations()
    assert not check.passed
    report = materialize([friction_report], instance=instance, resources=definitions.resources)
    markdown = report.asset_materializations_for_node("friction_report")[0].metadata["report"].value
    assert "### Backlog\n\n2 pending, the oldest waiting 2.0 h; 0 finished in the last hour" in markdown
    verdict = check.metadata["finding"].value
    assert verdict.startswith("stalled backlog: 2 session(s) wait (the oldest 120 min), 1 model host(s) in rotation")
    assert "no summary has finished yet" in verdict and "DIGEST_BACKLOG_STALL_S 1800" in verdict

    revision = store.query("SELECT input_revision FROM sessions WHERE session_id = 'a'").iloc[0, 0]
    store.summaries.write_summary(_summary("a", 3, revision), run_id="r1")
    result = _materialize_backlog(instance, definitions)
    [check] = result.get_asset_check_evaluations()
    assert check.passed
    meta = {k: v.value for k, v in result.asset_materializations_for_node("backlog")[0].metadata.items()}
    assert (meta["pending"], meta["finished_last_hour"], meta["finished_last_day"]) == (1, 1, 1)
    # The summary's verdict, as the store judged it against the session's turns, is counted.
    verdict = store.query("SELECT verdict FROM session_summaries WHERE session_id = 'a'").iloc[0, 0]
    assert meta["summaries_tier_raw"] == 1 and meta[f"summaries_verdict_{verdict}"] == 1


def test_the_skip_reason_counts_the_runs_in_flight(tmp_path, instance):
    settings = _settings(tmp_path)
    definitions = _definitions(settings)
    _ingest_from_inbox(instance, definitions, settings, make_turns("a", 3) + make_turns("b", 2))
    job = definitions.resolve_job_def("summarize_sessions")
    for key, status in (("a", DagsterRunStatus.STARTED), ("b", DagsterRunStatus.NOT_STARTED)):
        instance.create_run_for_job(job, tags={"dagster/partition": key}, status=status)
    result = _tick(instance, definitions)
    assert not result.run_requests
    assert result.skip_reason.skip_message == (
        "2 pending, none eligible: 0 active within the idle window, 0 in failure backoff, "
        "0 waiting for a host out of rotation (none), 2 queued or running"
    )


def test_sensors_and_the_schedule_describe_themselves_in_the_ui(tmp_path):
    definitions = _definitions(_settings(tmp_path))
    repository = definitions.get_repository_def()
    for sensor in repository.sensor_defs:
        assert sensor.description and sensor.description == sensor.description.strip(), sensor.name
    for schedule in repository.schedule_defs:
        assert schedule.description, schedule.name


def test_runs_show_only_the_tags_a_user_filters_by_and_the_per_host_limit_stays_on_a_visible_one(tmp_path, instance):
    settings = _settings(tmp_path)
    definitions = _definitions(settings)
    ingest = _inbox_request(instance, definitions, settings, make_turns("a", 3))
    assert _visible(ingest.tags) == {SWEEP_TAG}
    assert INBOX_BATCH_TAG in ingest.tags and FILES_TAG in ingest.tags  # hidden, still there for the next tick
    job = definitions.resolve_job_def("ingest")
    assert job.execute_in_process(run_config=ingest.run_config, instance=instance, tags=ingest.tags).success
    # The next tick finds the batch's run by its hidden tag, as it finds any tag.
    batch = RunsFilter(job_name="ingest", tags={INBOX_BATCH_TAG: ingest.tags[INBOX_BATCH_TAG]})
    assert [r.dagster_run.status for r in instance.get_run_records(filters=batch)] == [DagsterRunStatus.SUCCESS]
    (summary,) = _tick(instance, definitions).run_requests
    assert _visible(summary.tags) == {SWEEP_TAG, ROUTE_TAG, MODEL_HOST_TAG}
    assert {ESTIMATED_S_TAG, MODEL_HOST_REASON_TAG, BUDGET_TAG} <= set(summary.tags)
    # The run queue limits each host's runs on the visible host tag the sensor sets.
    write_instance_config(tmp_path / "dagster", settings)
    config = yaml.safe_load((tmp_path / "dagster" / "dagster.yaml").read_text())
    [limit] = config["concurrency"]["runs"]["tag_concurrency_limits"]
    assert limit["key"] == MODEL_HOST_TAG and summary.tags[limit["key"]] == limit["value"]


def _visible(tags) -> set[str]:
    return {key for key in tags if not key.startswith(".dagster/")}
