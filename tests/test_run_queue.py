"""The run queue of the instance the project writes (`pipelines/run_coordinator.py`): a session run
submitted without a model host (as the UI's Materialize submits one) is placed and tagged as the
summary sensor's runs are, while still queued, so the per-host run limit holds it; a busy store
never fails the submission. On a real instance from the written dagster.yaml and a real DuckDB
file, locked by a real second process."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus
from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.run_coordinator.base import SubmitRunContext
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from assets.partitions import sessions_partitions
from digest.ingest import ingest_paths
from digest.settings import load_settings
from digest.tags import MODEL_HOST_REASON_TAG, MODEL_HOST_TAG, ROUTE_TAG, SWEEP_TAG
from pipelines.definitions import build_definitions
from pipelines.instance import write_instance_config
from pipelines.run_coordinator import HostPlacingRunCoordinator
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns

HOSTS = """
[[hosts]]
name = "cpu"
provider = "openai"
url = "http://127.0.0.1:9"
context_limit_tokens = 8192
raw_cap_tokens = 2000

[[hosts]]
name = "gpu"
provider = "openai"
url = "http://127.0.0.1:9"
context_limit_tokens = 131072
raw_cap_tokens = "off"
concurrency = 2
"""


@pytest.fixture
def queue(tmp_path, monkeypatch):
    """The instance as `session-digest ui` writes it, over a store with one session ("big": over
    the CPU host's raw cap, raw on the GPU host's); the env the webserver would have."""
    (tmp_path / "hosts.toml").write_text(HOSTS)
    env = {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_HOSTS": str(tmp_path / "hosts.toml")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings(env)
    store = DigestStore(settings.db_path)
    store.migrate()
    ingest_paths([write_bundle(tmp_path / "bundle", make_turns("big", 40, doc_bytes=400))], store)
    write_instance_config(settings.dagster_home, settings)
    with DagsterInstance.from_config(str(settings.dagster_home)) as instance:
        instance.add_dynamic_partitions(sessions_partitions.name, ["big"])
        yield instance, build_definitions(settings), settings


def _submit(instance, definitions, tags: dict[str, str] | None = None):
    """A run of the summary alone for "big", as the UI's Materialize of that partition submits it."""
    selection = {AssetKey("session_summaries")}
    job = definitions.resolve_job_def("summarize_sessions").get_subset(asset_selection=selection)
    # Where the webserver would load the job from: a queued run must name it (the daemon's dequeue does).
    location = InProcessCodeLocationOrigin(LoadableTargetOrigin(module_name="pipelines.definitions"))
    origin = RemoteJobOrigin(RemoteRepositoryOrigin(location, "__repository__"), job.name)
    run = instance.create_run_for_job(
        job_def=job,
        asset_selection=selection,
        tags={"dagster/partition": "big", **(tags or {})},
        remote_job_origin=origin,
    )
    instance.run_coordinator.submit_run(SubmitRunContext(run, workspace=None))
    return instance.get_run_by_id(run.run_id)


def test_a_run_submitted_without_a_host_is_placed_and_tagged_as_the_sensors_before_it_is_dequeued(queue):
    instance, definitions, _ = queue
    assert isinstance(instance.run_coordinator, HostPlacingRunCoordinator)
    limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
    assert {"key": MODEL_HOST_TAG, "value": "gpu", "limit": 2} in limits

    run = _submit(instance, definitions)
    assert run.status == DagsterRunStatus.QUEUED  # not dequeued yet, already on its host
    assert (run.tags[MODEL_HOST_TAG], run.tags[ROUTE_TAG]) == ("gpu", "raw")
    assert run.tags[MODEL_HOST_REASON_TAG].endswith("(placed when the run was submitted)")
    assert SWEEP_TAG not in run.tags  # still a run asked for by hand (a rerun summarizes again)

    # A run that names its host (the sensor's, a user's) keeps it.
    assert _submit(instance, definitions, {MODEL_HOST_TAG: "cpu"}).tags[MODEL_HOST_TAG] == "cpu"


def test_a_busy_store_queues_the_run_on_the_first_host_held_by_its_run_limit_and_says_so(queue, caplog):
    instance, definitions, settings = queue
    # Another process holds the file (an ingest's long write): DuckDB lets no other process open it.
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import duckdb, time; c = duckdb.connect({str(settings.db_path)!r}); "
         "print('held', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with caplog.at_level(logging.WARNING):
            run = _submit(instance, definitions)
    finally:
        holder.kill()
        holder.wait()
    # Issue 36: not outside the per-host limit, untagged; on the first declared host, which limits it.
    assert run.status == DagsterRunStatus.QUEUED and run.tags[MODEL_HOST_TAG] == "cpu"
    assert run.tags[MODEL_HOST_REASON_TAG].startswith("the first declared host: placing the run failed")
    limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
    assert {"key": MODEL_HOST_TAG, "value": "cpu", "limit": 1} in limits
    message = f"run {run.run_id} (partition 'big') queued on the first declared model host 'cpu', held by its run limit"
    assert message in caplog.text
    assert "lock" in caplog.text.lower()
