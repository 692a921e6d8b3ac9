"""The run queue of the project's instance (`run_coordinator` in the dagster.yaml it writes):
Dagster's queued run coordinator, which first places a model run submitted without a model host
(the UI's Materialize of a session partition, a backfill's runs, a job launched from the
launchpad) on a host as the sensors would, and tags it as theirs. The queue's per-host limit
(`concurrency.runs.tag_concurrency_limits`, key `digest/model_host`) then holds it like theirs,
and the run goes to that host (`resources.model_hosts.ModelHosts.place` reads the tag).

It runs in the process that submits (the webserver, the daemon for a backfill), where the store
may be busy with another process's write: it waits for the file a moment at most, and a run it
cannot place goes on the first declared host (`unplaced_tags`), held by that host's run limit,
with a line in this process's log saying so."""

from __future__ import annotations

import os

from dagster import DagsterRun
from dagster._core.run_coordinator.base import SubmitRunContext
from dagster._core.run_coordinator.queued_run_coordinator import QueuedRunCoordinator

from digest.scheduling import now_ms
from digest.settings import Settings, load_settings
from digest.tags import MODEL_HOST_REASON_TAG, MODEL_HOST_TAG
from pipelines.jobs import digest_job, fill_mini_summaries_job, summarize_job
from pipelines.selection import named_sessions_batch
from pipelines.sensors import spread_over_hosts, summary_run_tags
from resources.model_hosts import ModelHosts, closed_hosts
from resources.store import open_store

# How long a submission waits for the store's file (another process's write) before it gives up
# placing the run: a click in the UI should not hang behind a long ingest.
STORE_WAIT_S = 2.0
PARTITION_TAG = "dagster/partition"
SUMMARY, MINI_SUMMARIES, GRAPH = "session_summaries", "turn_mini_summaries", "session_graph"
# The model assets of a run of a whole job (a run launched from the job's launchpad names none).
JOB_MODEL_ASSETS = {summarize_job.name: SUMMARY, fill_mini_summaries_job.name: MINI_SUMMARIES, digest_job.name: GRAPH}


class HostPlacingRunCoordinator(QueuedRunCoordinator):
    """`QueuedRunCoordinator`, with a model host placed and tagged on a session run submitted without one."""

    _settings: Settings | None = None

    def settings(self) -> Settings:
        """The settings of the submitting process, loaded at its first model run and kept: they come
        from its environment. Settings that fail to load are read again at the next run."""
        if self._settings is None:
            self._settings = load_settings(os.environ)
        return self._settings

    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        run = context.dagster_run
        if MODEL_HOST_TAG not in run.tags and run.tags.get(PARTITION_TAG) and model_assets(run):
            hosts = None
            try:
                # The hosts as the run will see them: the hosts file read once for this run.
                hosts = ModelHosts(self.settings())
                tags = placement_tags(self._instance, run, self.settings(), hosts)
            except Exception as exc:  # the store busy or unreadable, the settings broken
                tags = unplaced_tags(exc, hosts)
                where = (
                    f"on the first declared model host {tags[MODEL_HOST_TAG]!r}, held by its run limit"
                    if tags
                    else "without a model host tag, outside the per-host run limit"
                )
                self._logger.warning(
                    f"run {run.run_id} (partition {run.tags[PARTITION_TAG]!r}) queued {where}: "
                    f"placing it failed: {exc!r}"
                )
            if tags:
                self._instance.add_run_tags(run.run_id, tags)
                self._logger.info(f"run {run.run_id} placed on model host {tags[MODEL_HOST_TAG]!r}")
        return super().submit_run(context)


def model_assets(run: DagsterRun) -> set[str]:
    """The assets of the run that call a model (the `model` pool's)."""
    if run.asset_selection is None:
        return {JOB_MODEL_ASSETS[run.job_name]} if run.job_name in JOB_MODEL_ASSETS else set()
    return {key.to_user_string() for key in run.asset_selection} & {SUMMARY, MINI_SUMMARIES, GRAPH}


def unplaced_tags(error: Exception, hosts: ModelHosts | None) -> dict[str, str]:
    """A run that could not be placed (the store busy) goes on the first declared host, whose run
    limit holds it like any other: no reading of the store is needed. Empty when the settings or
    the hosts file do not load (then no host is known)."""
    if hosts is None:
        return {}
    try:
        host = hosts.fleet.host().name
    except Exception:
        return {}
    return {MODEL_HOST_TAG: host, MODEL_HOST_REASON_TAG: f"the first declared host: placing the run failed ({error!r})"}


def placement_tags(instance, run: DagsterRun, settings: Settings, hosts: ModelHosts) -> dict[str, str]:
    """The tags the sensors would give the run: a summary run's placement (`summary_run_tags`: the
    sweep's assignment of a session named by hand, on a host whose circuit is closed), else a
    mini-summary or graph run's host (`spread_over_hosts`, as their sensors place them). Empty when
    no host's circuit is closed or the session is unknown (the run then fails on that itself)."""
    store = open_store(settings.db_path, read_only=True, lock_wait_s=STORE_WAIT_S)
    fleet, circuit = hosts.fleet, settings.circuit
    if SUMMARY not in model_assets(run):
        hosts = spread_over_hosts(instance, store, fleet, circuit, 1)
        return {MODEL_HOST_TAG: hosts[0]} if hosts else {}
    with store.file.held():
        session = store.sessions.session_by_partition(run.tags[PARTITION_TAG])
        available = closed_hosts(store, fleet, circuit, now_ms())
        if session is None or not available:
            return {}
        batch = named_sessions_batch(store, fleet, [session["session_id"]], available=available).batch
    if not batch:
        return {}
    tags = summary_run_tags(batch[0])
    return {**tags, MODEL_HOST_REASON_TAG: f"{tags[MODEL_HOST_REASON_TAG]} (placed when the run was submitted)"}
