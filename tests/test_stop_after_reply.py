"""A stop between the model's reply and the run's end leaves the store and Dagster's asset catalog in
agreement: a summary that reached DuckDB is its partition's materialization, named by the run that
wrote it, the CLI counts it as summarized, and no model call is made again. Real SIGTERMs and
SIGKILLs to `session-digest` subprocesses at each point, real Dagster instances, real DuckDB, the
local model test server over real HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    AssetRecordsFilter,
    DagsterInstance,
    DagsterRunStatus,
    build_sensor_context,
    instance_for_test,
)
from dagster._core.errors import DagsterExecutionInterruptedError

from digest.ingest import ingest_paths
from digest.settings import load_settings
from pipelines.definitions import build_definitions
from pipelines.sensors import interrupted_runs_sensor
from resources.store import DigestStore
from resources.store.summaries import Summaries
from tests.bundles import write_bundle
from tests.conftest import make_turns, project_free_environ
from tests.model_server import FAITHFUL_SUMMARY, Behaviour, ModelServer

SUMMARIES = AssetKey("session_summaries")
MINI_SUMMARIES = AssetKey("turn_mini_summaries")
REPO = Path(__file__).resolve().parents[1]

# Runs `session-digest` with a signal sent to itself at one point of the summary run: around the
# summary's write to DuckDB, or when Dagster stores one of the run's events (after it, or before it
# for the run's end). Where the signal lands is where a real one would: Dagster's handler in force
# then decides whether it raises in the step or is held.
DRIVER = textwrap.dedent(
    """
    import os, signal, sys
    from dagster import DagsterInstance
    from resources.store.summaries import Summaries

    point, stop = os.environ["STOP_AT"], signal.Signals[os.environ["STOP_WITH"]]
    sent = []

    def send():
        if not sent:
            sent.append(point)
            os.kill(os.getpid(), stop)

    write_summary = Summaries.write_summary

    def stopping_write(self, *args, **kwargs):
        if point == "before the summary's write":
            send()
        written = write_summary(self, *args, **kwargs)
        if point == "after the summary's write":
            send()
        return written

    Summaries.write_summary = stopping_write
    handle_new_event = DagsterInstance.handle_new_event
    AFTER = {"STEP_OUTPUT": "after the step's output", "STEP_SUCCESS": "after the step's success"}
    seen = []

    def stopping_handle(self, event, *args, **kwargs):
        kind = event.dagster_event.event_type_value if event.dagster_event else None
        summary_step = event.dagster_event is not None and event.dagster_event.step_key == "session_summaries"
        if kind == "PIPELINE_SUCCESS" and point == "before the run's end":
            send()
        handled = handle_new_event(self, event, *args, **kwargs)
        if summary_step and kind == "ASSET_MATERIALIZATION" and not seen:
            seen.append(kind)
            if point == "after the summary's materialization":
                send()
        if summary_step and AFTER.get(kind) == point:
            send()
        if kind == "PIPELINE_FAILURE" and os.environ.get("KILLED_AT_RUN_END"):
            os.kill(os.getpid(), signal.SIGKILL)  # the process gone before the CLI hears of the run's end
        return handled

    DagsterInstance.handle_new_event = stopping_handle
    from app.cli import main

    main()
    """
)

AFTER_THE_WRITE = [
    "after the summary's write",
    "after the step's output",
    "after the summary's materialization",
    "after the step's success",
    "before the run's end",
]


def _env(home, url: str, **extra: str) -> dict[str, str]:
    kept = project_free_environ()
    return {**kept, "DIGEST_HOME": str(home), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_MODEL_URL": url, **extra}


def _cli(args: list[str], env: dict, driver=None) -> subprocess.CompletedProcess:
    command = [sys.executable, str(driver)] if driver else [sys.executable, "-m", "app.cli"]
    return subprocess.run(command + args, env=env, capture_output=True, text=True, timeout=300)


def _catalog(home, run_id: str | None = None, asset: AssetKey = SUMMARIES) -> tuple[list, DagsterRunStatus | None]:
    """The `s1` partition's materializations of `asset` in the asset index, newest first, and `run_id`'s status."""
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    try:
        with DagsterInstance.get() as instance:
            found = AssetRecordsFilter(asset_key=asset, asset_partitions=["s1"])
            status = instance.get_run_by_id(run_id).status if run_id else None
            return list(instance.fetch_materializations(found, limit=100).records), status
    finally:
        del os.environ["DAGSTER_HOME"]


def _written_by(record) -> str:
    """The run a materialization names: its own, or the one a later record says wrote the summary."""
    entry = record.asset_materialization.metadata.get("written_by_run")
    return entry.value if entry is not None else record.run_id


def _stopped_sweep(tmp_path, point: str, **extra: str):
    """One session ingested, then a sweep stopped by SIGTERM at `point` and a second drain after it:
    (the stopped sweep, the drain, the store, the model server's chat requests)."""
    home = tmp_path / "home"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    with ModelServer(lambda r: Behaviour.reply(FAITHFUL_SUMMARY)) as server:
        env = _env(home, server.url, PYTHONPATH=str(REPO))
        assert _cli(["ingest", write_bundle(tmp_path / "bundle", make_turns("s1", 2))], env).returncode == 0
        stopped = _cli(["sweep", "--json"], {**env, "STOP_AT": point, "STOP_WITH": "SIGTERM", **extra}, driver)
        drained = _cli(["sweep", "--drain", "--json"], env)
        assert drained.returncode == 0, drained.stderr[-3000:]
        calls = len(server.chat_requests())
    store = DigestStore(load_settings({"DIGEST_HOME": str(home)}).db_path)
    return stopped, json.loads(drained.stdout), store, calls


@pytest.mark.parametrize("point", AFTER_THE_WRITE)
def test_a_stop_after_the_summary_is_written_leaves_it_materialized_and_counted_once(tmp_path, point):
    """On the old code a stop after the write (the first two points) left the run FAILURE, the
    partition never materialized, the sweep saying `summarized 0, failed 1`, and the next drain doing
    nothing for a current summary: the UI showed it unfinished for good."""
    stopped, drained, store, calls = _stopped_sweep(tmp_path, point)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    result = json.loads(stopped.stdout)
    [run] = result["runs"]
    assert (result["summarized"], result["failed"]) == (1, 0), run
    assert run["success"] and run["source_tier"] == "raw"
    written = store.query("SELECT run_id FROM session_summaries WHERE session_id = 's1'")["run_id"].tolist()
    assert written == [run["run_id"]]
    # The catalog: the partition materialized once, naming the run that wrote the summary.
    records, status = _catalog(tmp_path / "home", run["run_id"])
    assert [_written_by(r) for r in records] == [run["run_id"]]
    # And the raw summary's "no mini summary needed" on the partition upstream, once.
    assert len(_catalog(tmp_path / "home", asset=MINI_SUMMARIES)[0]) == 1
    # A run that ended FAILURE says so on its line; one whose stop Dagster held to its end succeeded.
    if status == DagsterRunStatus.FAILURE:
        assert run["interrupted"] == "SIGTERM"
        assert run["run_ended"].startswith("the run was stopped by SIGTERM after writing its summary")
    else:
        assert status == DagsterRunStatus.SUCCESS and "run_ended" not in run
    # The next drain has nothing to redo: no second model call, no second record.
    assert (drained["summarized"], drained["failed"]) == (0, 0)
    assert calls == 1


def test_a_stop_before_the_summary_is_written_is_finished_from_the_staged_reply(tmp_path):
    """The reply is in, the summary not yet written: the run fails as interrupted, and the next drain
    writes the summary from the staged reply with no model call; its run materializes it."""
    stopped, drained, store, calls = _stopped_sweep(tmp_path, "before the summary's write")
    assert stopped.returncode == 128 + signal.SIGTERM
    result = json.loads(stopped.stdout)
    assert (result["summarized"], result["failed"]) == (0, 1)
    assert result["runs"][0]["interrupted"] == "SIGTERM"
    assert drained["summarized"] == 1 and calls == 1
    [record], _ = _catalog(tmp_path / "home")
    assert record.run_id == store.summaries.summary_row("s1")["run_id"] == drained["summary_runs"][0]["run_id"]


def test_a_process_killed_once_its_stopped_run_ended_is_repaired_by_the_next_sweep(tmp_path):
    """SIGTERM after the write, then SIGKILL as the run's failure is stored, before the CLI can record
    the summary: the next sweep's pass over ended runs records it, with the run that wrote it."""
    stopped, drained, store, calls = _stopped_sweep(tmp_path, "after the summary's write", KILLED_AT_RUN_END="1")
    assert stopped.returncode == -signal.SIGKILL
    run_id = store.summaries.summary_row("s1")["run_id"]
    [record], status = _catalog(tmp_path / "home", run_id)
    assert status == DagsterRunStatus.FAILURE
    assert _written_by(record) == run_id and record.run_id != run_id  # recorded after the run, not by it
    assert "which ended before it recorded it" in record.asset_materialization.description
    assert drained["summarized"] == 0 and calls == 1


def test_the_sensor_records_a_summary_whose_run_failed_after_writing_it_once(tmp_path, monkeypatch):
    """A run (the daemon's, say) interrupted after the summary's write ends FAILURE with nobody to
    record it: the sensor's next tick does, naming the run; the tick after it records nothing more."""
    env = {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai"}
    write_summary = Summaries.write_summary

    def stopped_after_the_write(self, *args, **kwargs):
        write_summary(self, *args, **kwargs)
        raise DagsterExecutionInterruptedError()

    with ModelServer(lambda r: Behaviour.reply(FAITHFUL_SUMMARY)) as server:
        defs = build_definitions(load_settings({**env, "DIGEST_MODEL_URL": server.url}))
        store = defs.resources["store"].open()
        ingest_paths([write_bundle(tmp_path / "bundle", make_turns("s1", 2))], store)
        with instance_for_test() as instance:
            instance.add_dynamic_partitions("sessions", ["s1"])
            monkeypatch.setattr(Summaries, "write_summary", stopped_after_the_write)
            failed = defs.resolve_job_def("summarize_sessions").execute_in_process(
                instance=instance, partition_key="s1", raise_on_error=False
            )
            monkeypatch.undo()
            assert instance.get_run_by_id(failed.run_id).status == DagsterRunStatus.FAILURE
            assert store.summaries.summary_row("s1")["run_id"] == failed.run_id
            assert not instance.fetch_materializations(SUMMARIES, limit=1).records  # the split
            ticks = []
            for _ in range(2):
                with build_sensor_context(instance=instance, resources=defs.resources) as context:
                    ticks.append(interrupted_runs_sensor(context).skip_message)
            [record] = instance.fetch_materializations(SUMMARIES, limit=10).records
            [not_needed] = instance.fetch_materializations(MINI_SUMMARIES, limit=10).records
    assert record.partition_key == "s1" and _written_by(record) == failed.run_id
    # The job ran its own mini-summary step before the stop: that partition is not recorded twice.
    assert not_needed.run_id == failed.run_id
    assert f"recorded the summaries of 1 run(s) that ended first: {failed.run_id}" in ticks[0]
    assert ticks[1] == "no run lost its process, no summary waits to be recorded"
