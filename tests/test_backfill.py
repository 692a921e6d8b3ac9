"""UI reruns run as the project's runs do (issue 31, defect 7). A Materialize of several session
partitions from the asset page is an asset backfill, which the daemon runs through `__ASSET_JOB`.
On a real instance under the real `dagster-daemon run`: its runs go in process and run no store
check, and a run that had nothing to do is no failed partition on the backfill's page (since dagster
1.13.22 a backfill marks failed what a successful run did not materialize, dagster-io/dagster#34219)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.storage.tags import BACKFILL_ID_TAG

from digest.ingest import ingest_paths
from digest.settings import load_settings
from digest.tags import MODEL_HOST_TAG
from pipelines.definitions import build_definitions
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns, project_free_environ
from tests.model_server import ModelServer

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CLI = [sys.executable, "-m", "app.cli"]
SUMMARIES = AssetKey("session_summaries")
DEADLINE_S = 300
DONE = (BulkActionStatus.COMPLETED_SUCCESS, BulkActionStatus.COMPLETED_FAILED, BulkActionStatus.FAILED)


def _env(home: Path, url: str) -> dict[str, str]:
    return {
        **project_free_environ(),
        "DAGSTER_HOME": str(home / "dagster"),
        "DIGEST_HOME": str(home),
        "DIGEST_MODEL_PROVIDER": "openai",
        "DIGEST_MODEL_URL": url,
        # The sensors' sweeps would summarize the same sessions: every session waits in the churn gate.
        "DIGEST_IDLE_WINDOW_S": str(10**10),
    }


def _partitions(subset) -> set[str]:
    return {key.partition_key for key in subset.iterate_asset_partitions() if key.asset_key == SUMMARIES}


def test_a_backfill_from_the_ui_runs_in_process_without_store_checks_and_fails_no_partition_it_skipped(tmp_path):
    home = tmp_path / "home"
    with ModelServer() as server:
        env = _env(home, server.url)
        settings = load_settings(env)
        store = DigestStore(settings.db_path)
        store.migrate()
        turns = [t for sid in ("fresh", "retired", "leased") for t in make_turns(sid, 2, minis=2)]
        ingest_paths([write_bundle(tmp_path / "bundle", turns)], store)
        store.archive.write_archive(tmp_path / "archive", ["retired"], retire=True)  # nothing to do
        # Another run (a sweep's, on another machine) is summarizing it: a run asked for by hand fails.
        store.summaries.claim_summary_lease("leased", "sweep-elsewhere", int(time.time() * 1000), ttl_s=3600)
        # Any CLI command writes dagster.yaml from the settings, as a user's first command does.
        done = subprocess.run(CLI + ["instance-config"], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]

        instance = DagsterInstance.from_config(env["DAGSTER_HOME"])  # the daemon's
        keys = ["fresh", "retired", "leased"]
        instance.add_dynamic_partitions("sessions", keys)
        # What the asset page's Materialize of these partitions asks for (`launchPartitionBackfill`).
        backfill = PartitionBackfill.from_asset_partitions(
            backfill_id="uirerun",
            asset_graph=build_definitions(settings).resolve_asset_graph(),
            partition_names=keys,
            asset_selection=[SUMMARIES],
            backfill_timestamp=time.time(),
            tags={},
            dynamic_partitions_store=instance,
            all_partitions=False,
            title=None,
            description=None,
            run_config=None,
        )
        instance.add_backfill(backfill)
        log = tmp_path / "daemon.log"
        with log.open("w") as out:
            daemon = subprocess.Popen(
                [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + DEADLINE_S
            while (backfill := instance.get_backfill("uirerun")).status not in DONE:
                assert daemon.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, f"backfill {backfill.status} after {DEADLINE_S}s"
                time.sleep(2)
        finally:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(timeout=60)
        runs = instance.get_runs(filters=RunsFilter(tags={BACKFILL_ID_TAG: "uirerun"}))
        by_partition = {run.tags["dagster/partition"]: run for run in runs}
        steps = {
            key: {step.key for step in instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id).steps}
            for key, run in by_partition.items()
        }
        messages = [e.message or "" for run in runs for e in instance.all_logs(run.run_id)]
        data = backfill.asset_backfill_data
        materialized, failed = _partitions(data.materialized_subset), _partitions(data.failed_and_downstream_subset)
        statuses = {key: run.status for key, run in by_partition.items()}
        materializations = instance.fetch_materializations(SUMMARIES, limit=10).records
        instance.dispose()
    assert {run.job_name for run in runs} == {"__ASSET_JOB"} and sorted(by_partition) == sorted(keys)
    # The project's run queue placed each run on the model host, as the sensor's are, before it was
    # queued; one it could not place (the store busy with a run's write) the daemon's log names.
    daemon_log = log.read_text()
    for run in runs:
        assert run.tags.get(MODEL_HOST_TAG) == "default" or f"run {run.run_id} (partition" in daemon_log, run.tags
    # In process, as the project's jobs: one process a run, and only the summary step, no check's.
    assert all(step_keys == {"session_summaries"} for step_keys in steps.values()), steps
    assert not [m for m in messages if "multiprocess" in m]
    assert sum("Executing steps in process" in m for m in messages) == len(runs), messages[:20]
    # The retired session's run had nothing to do, and said so in a materialization: not failed.
    assert statuses == {
        "fresh": DagsterRunStatus.SUCCESS,
        "retired": DagsterRunStatus.SUCCESS,
        "leased": DagsterRunStatus.FAILURE,
    }
    assert materialized == {"fresh", "retired"} and failed == {"leased"}  # the page agrees with the runs
    assert backfill.status == BulkActionStatus.COMPLETED_FAILED
    retired = next(r for r in materializations if r.partition_key == "retired").asset_materialization.metadata
    assert "retired" in retired["not_done"].value and retired["summarized"].value is False
    assert [r["session_id"] for r in store.reports.summary_rows()] == ["fresh"]
