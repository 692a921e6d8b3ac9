"""Runs whose process died (SIGKILL, the OOM killer, a reboot). Dagster would show them running for
ever: the sensors would never relaunch their partitions, and their `model` pool slot would block
every later model run. The default run launcher cannot tell a dead run worker from a live one, so
each run worker tags its run with its host and process (`resources.worker.worker_tags`: the store resource adds them
when the run starts; the CLI sets them already when it creates its in-process runs), and
`close_interrupted_runs` (the `interrupted_runs_sensor` and every CLI
sweep) closes the runs whose process is gone."""

from __future__ import annotations

import socket

from dagster import AssetKey, AssetMaterialization, AssetRecordsFilter, DagsterInstance, DagsterRunStatus, RunsFilter

from assets.sessions import summary_record_metadata
from assets.work.sessions import run_cost
from digest.tags import HOST_TAG, PID_STARTED_TAG, PID_TAG
from digest.turns import partition_key
from resources.store import DigestStore
from resources.worker import process_alive

IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]


def record_summaries(instance: DagsterInstance, store: DigestStore, rows: list[dict], note: str) -> int:
    """Tell Dagster about summaries DuckDB holds that no run of it materialized (restored from a
    bundle, or written by a run killed before it could say so), so the asset page matches the store:
    the metadata a summary run records (`summary_record_metadata`), its cost where the ledger has
    its run's calls, and `note`."""
    for row in rows:
        cost = run_cost(store, row["session_id"], row["run_id"]) if row["run_id"] else None
        known = cost is not None and (cost.calls or cost.cached)
        instance.report_runless_asset_event(
            AssetMaterialization(
                asset_key="session_summaries",
                partition=partition_key(row["session_id"]),
                description=note,
                metadata={**summary_record_metadata(row, cost if known else None), "recorded_by": note},
            )
        )
    return len(rows)


def close_interrupted_runs(instance: DagsterInstance, store: DigestStore) -> list[str]:
    """Marks failed every unfinished run on this host whose process is gone, frees its pool slot
    and its lease on a session, and closes the model call it died in (`interrupted`); a summary such a run wrote before it died is recorded as
    materialized. Returns the closed runs' ids."""
    host = socket.gethostname()
    runs = instance.get_runs(filters=RunsFilter(statuses=IN_FLIGHT, tags={HOST_TAG: host}))
    dead = [
        r for r in runs if PID_TAG in r.tags and not process_alive(int(r.tags[PID_TAG]), r.tags.get(PID_STARTED_TAG))
    ]
    written = {row["run_id"]: row for row in store.summaries.summaries_where("run_id", [run.run_id for run in dead])}
    for run in dead:
        if run.run_id in written:
            # Asked of the asset index, not the run's log: a kill can land after Dagster wrote the
            # event to the run's log and before it indexed it, and only the index feeds the asset page.
            latest = instance.fetch_materializations(
                AssetRecordsFilter(
                    asset_key=AssetKey("session_summaries"), asset_partitions=[run.tags["dagster/partition"]]
                ),
                limit=1,
            ).records
            if not (latest and latest[0].run_id == run.run_id):
                record_summaries(
                    instance, store, [written[run.run_id]], f"written by run {run.run_id}, whose process died"
                )
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        store.attempts.close_in_flight([run.run_id])  # the model call it died in, if any
        store.summaries.release_leases_of_runs([run.run_id])
        # Last: once failed, the run is not found here again.
        instance.report_run_failed(run, message=f"process {run.tags[PID_TAG]} on {host} is gone: the run was killed")
    return [run.run_id for run in dead]
