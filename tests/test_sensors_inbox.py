"""The inbox sensor: ingest runs launched for new settled files only, a failed ingest retried until one
succeeds, harness logs found by their content. A real Dagster instance over real DuckDB."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

from dagster import DagsterRunStatus, RunsFilter

import tests.test_sensors
from pipelines.definitions import build_definitions
from pipelines.sensors import inbox_sensor
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.test_sensors import _resources, _settings, _tick

instance = tests.test_sensors.instance  # the fixture of tests/test_sensors.py: pytest finds it here by this name


def _settle(folder) -> None:
    settled = time.time() - 60
    for path in folder.glob("*.jsonl"):
        os.utime(path, (settled, settled))


def _launch(instance, definitions, request, status=None):
    """What the daemon does with an ingest request: a run not started yet (`status`), or the run itself."""
    job = definitions.resolve_job_def("ingest")
    if status is not None:
        return instance.create_run_for_job(job, run_config=request.run_config, tags=request.tags, status=status)
    return job.execute_in_process(
        run_config=request.run_config, tags=request.tags, instance=instance, raise_on_error=False
    )


def test_inbox_sensor_launches_ingest_for_new_settled_files_only(tmp_path, instance):
    settings = _settings(tmp_path)
    settings.inbox.mkdir(parents=True)
    resources = _resources(settings)
    _settle(write_bundle(settings.inbox, make_turns("a", 1)))
    result = _tick(instance, resources, inbox_sensor)
    (request,) = result.run_requests
    paths = request.run_config["ops"]["raw_turns"]["config"]["paths"]
    assert sorted(p.rsplit("/", 1)[1][:6] for p in paths) == ["graph-", "memory"]
    # Its run not started yet: not launched twice. A file still being written: not yet.
    _launch(instance, build_definitions(settings), request, status=DagsterRunStatus.NOT_STARTED)
    again = _tick(instance, resources, inbox_sensor, cursor=result.cursor)
    assert again.run_requests == []
    (settings.inbox / "turns-live.jsonl").write_text('{"id": "x"}\n')
    assert _tick(instance, resources, inbox_sensor, cursor=again.cursor).run_requests == []


def test_inbox_sensor_retries_a_failed_ingest_until_one_succeeds(tmp_path, instance, monkeypatch):
    settings = _settings(tmp_path)
    settings.inbox.mkdir(parents=True)
    resources = _resources(settings)
    definitions = build_definitions(settings)
    # Runs that cannot open the store (a folder where the DuckDB file should be) fail.
    (tmp_path / "unopenable").mkdir()
    broken = build_definitions(dataclasses.replace(settings, db_path=tmp_path / "unopenable"))
    _settle(write_bundle(settings.inbox, make_turns("lost", 2)))

    first = _tick(instance, resources, inbox_sensor)
    (request,) = first.run_requests
    assert not _launch(instance, broken, request).success
    # The next tick launches the same files again, as the same batch.
    second = _tick(instance, resources, inbox_sensor, cursor=first.cursor)
    (retry,) = second.run_requests
    assert retry.run_config == request.run_config and retry.tags == request.tags
    assert not _launch(instance, broken, retry).success
    # A second failure waits (doubling) before the next try.
    third = _tick(instance, resources, inbox_sensor, cursor=second.cursor)
    assert third.run_requests == [] and "2 file(s) retry in" in third.skip_reason.skip_message
    monkeypatch.setattr("pipelines.sensors.RETRY_BASE_S", 0.0)
    fourth = _tick(instance, resources, inbox_sensor, cursor=third.cursor)
    (retry,) = fourth.run_requests
    queued = _launch(instance, definitions, retry, status=DagsterRunStatus.NOT_STARTED)
    assert _tick(instance, resources, inbox_sensor, cursor=fourth.cursor).run_requests == []  # in flight
    instance.delete_run(queued.run_id)  # the queued run, executed for real:
    assert _launch(instance, definitions, retry).success
    done = _tick(instance, resources, inbox_sensor, cursor=fourth.cursor)
    assert done.run_requests == [] and _tick(instance, resources, inbox_sensor, cursor=done.cursor).run_requests == []
    assert DigestStore(settings.db_path).sessions.partition_keys() == ["lost"]
    runs = instance.get_runs(filters=RunsFilter(job_name="ingest"))
    assert sorted(run.status.value for run in runs) == ["FAILURE", "FAILURE", "SUCCESS"]


def test_inbox_sensor_finds_harness_logs_by_their_content(tmp_path, instance):
    settings = _settings(tmp_path)
    samples = Path(__file__).resolve().parent.parent / "samples" / "harnesses"
    shutil.copytree(samples, settings.inbox)
    (settings.inbox / "notes.md").write_text("# Notes\n\nnot a chat history\n")
    settled = time.time() - 60
    for path in settings.inbox.iterdir():
        os.utime(path, (settled, settled))
    (request,) = _tick(instance, _resources(settings), inbox_sensor).run_requests
    paths = request.run_config["ops"]["raw_turns"]["config"]["paths"]
    assert sorted(Path(p).name for p in paths) == [
        ".aider.chat.history.md",
        "0b6c3f1e-5a2d-4c8e-9f41-7d2e8a1c5b90.jsonl",
        "astropy__astropy-13033.traj",
        "psf__requests-4498.traj.json",
        "rollout-2026-11-19T14-02-11-01936a4e-7c1b-7d42-9a0e-3b5f2c8d1e67.jsonl",
    ]
