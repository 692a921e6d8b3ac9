"""Runs that ended without Dagster hearing all they did.

A run whose process died (SIGKILL, the OOM killer, a reboot): Dagster would show it running for
ever, the sensors would never relaunch its partition, and its `model` pool slot would block every
later model run. The default run launcher cannot tell a dead run worker from a live one, so each
run worker tags its run with its host and process (`resources.worker.worker_tags`: the store
resource adds them when the run starts; the CLI sets them already when it creates its in-process
runs), and `close_interrupted_runs` (the `interrupted_runs_sensor` and every CLI sweep) closes the
runs whose process is gone.

A run stopped (SIGTERM, Ctrl-C, Terminate in the UI) or failing between its summary's write to
DuckDB and its materialization event ends FAILURE or CANCELED with the summary stored: no later
run redoes it, as it is current. `record_summaries_of_ended_runs` (the same sensor, every CLI
sweep, and the CLI right after such a run) records its materialization, naming the run that wrote
it, so the store and the asset catalog agree after any stop."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime

from dagster import AssetKey, AssetMaterialization, AssetRecordsFilter, DagsterInstance, DagsterRunStatus, RunsFilter

from assets.sessions import no_mini_summaries_needed, summary_record_metadata
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
ENDED_UNSUCCESSFUL = [DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
SUMMARIES_KEY = AssetKey("session_summaries")
# The instance's key-value entry saying when `record_summaries_of_ended_runs` last read the ended runs.
ENDED_RUNS_CURSOR = "session_digest/ended_runs_read_at"
# Each pass reads again this far before its cursor: a run's end stamped just before the last read
# may have been committed after it.
CURSOR_OVERLAP_S = 300.0


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
                metadata={
                    **summary_record_metadata(row, cost if known else None),
                    "recorded_by": note,
                    # The run that wrote it: how a later pass knows this summary is recorded.
                    "written_by_run": row["run_id"] or "none",
                },
            )
        )
    return len(rows)


def is_recorded(instance: DagsterInstance, row: dict) -> bool:
    """Whether the summary is its partition's latest materialization: its run's own, or one recorded
    for it since (`written_by_run`). Asked of the asset index, not the run's log: a stop can land after
    Dagster wrote the event to the run's log and before it indexed it, and only the index feeds the
    asset page."""
    latest = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=SUMMARIES_KEY, asset_partitions=[partition_key(row["session_id"])]), limit=1
    ).records
    if not latest:
        return False
    if latest[0].run_id == row["run_id"]:
        return True
    written_by = latest[0].asset_materialization.metadata.get("written_by_run")
    return written_by is not None and written_by.value == row["run_id"]


def record_summaries_of_runs(
    instance: DagsterInstance, store: DigestStore, run_ids: list[str], note: Callable[[str], str]
) -> tuple[dict[str, dict], list[str]]:
    """The store's summaries these ended runs wrote, by run id, and the runs whose summary this call
    recorded as materialized (`note(run_id)` saying by whom), as it was not. A later summary of the
    same session replaced its row, so only a summary the store still holds is recorded."""
    written = {row["run_id"]: row for row in store.summaries.summaries_where("run_id", run_ids)} if run_ids else {}
    unrecorded = [run_id for run_id, row in written.items() if not is_recorded(instance, row)]
    for run_id in unrecorded:
        record_summaries(instance, store, [written[run_id]], note(run_id))
    for row in written.values():
        record_no_mini_summaries_needed(instance, store, row)
    return written, unrecorded


def record_no_mini_summaries_needed(instance: DagsterInstance, store: DigestStore, row: dict) -> None:
    """What the summary's run would have recorded after it (`assets.sessions.no_mini_summaries_needed`),
    where the session's `turn_mini_summaries` partition has no materialization."""
    key = partition_key(row["session_id"])
    event = no_mini_summaries_needed(store, row, key)
    if event is None:
        return
    filter_ = AssetRecordsFilter(asset_key=event.asset_key, asset_partitions=[key])
    if not instance.fetch_materializations(filter_, limit=1).records:
        instance.report_runless_asset_event(event)


def record_summaries_of_ended_runs(instance: DagsterInstance, store: DigestStore) -> list[str]:
    """The summaries written by runs that ended FAILURE or CANCELED since the last pass (a cursor on
    the instance, shared by the sensor and the CLI), recorded where their materialization is missing;
    the ids of the runs whose summary this pass recorded."""
    read_at = time.time()
    cursor = instance.run_storage.get_cursor_values({ENDED_RUNS_CURSOR}).get(ENDED_RUNS_CURSOR)
    after = datetime.fromtimestamp(float(cursor) - CURSOR_OVERLAP_S, UTC) if cursor else None
    ended = list(instance.get_run_ids(RunsFilter(statuses=ENDED_UNSUCCESSFUL, updated_after=after)))
    _, recorded = record_summaries_of_runs(
        instance, store, ended, lambda run_id: f"written by run {run_id}, which ended before it recorded it"
    )
    instance.run_storage.set_cursor_values({ENDED_RUNS_CURSOR: str(read_at)})
    return recorded


def close_interrupted_runs(instance: DagsterInstance, store: DigestStore) -> list[str]:
    """Marks failed every unfinished run on this host whose process is gone, frees its pool slot
    and its lease on a session, and closes the model call it died in (`interrupted`); a summary such
    a run wrote before it died is recorded as materialized. Returns the closed runs' ids."""
    host = socket.gethostname()
    runs = instance.get_runs(filters=RunsFilter(statuses=IN_FLIGHT, tags={HOST_TAG: host}))
    dead = [
        r for r in runs if PID_TAG in r.tags and not process_alive(int(r.tags[PID_TAG]), r.tags.get(PID_STARTED_TAG))
    ]
    record_summaries_of_runs(
        instance, store, [run.run_id for run in dead], lambda run_id: f"written by run {run_id}, whose process died"
    )
    for run in dead:
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        store.attempts.close_in_flight([run.run_id])  # the model call it died in, if any
        store.summaries.release_leases_of_runs([run.run_id])
        # Last: once failed, the run is not found here again.
        instance.report_run_failed(run, message=f"process {run.tags[PID_TAG]} on {host} is gone: the run was killed")
    return [run.run_id for run in dead]
