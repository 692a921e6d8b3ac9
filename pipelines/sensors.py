"""Sensors: the inbox feeds ingest, and the summary sensor works through the backlog in budgeted
batches. Both are cheap: they list files or run one DuckDB query, never call a model."""

import json
import time
from pathlib import Path

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from assets.partitions import sessions_partitions
from pipelines.interrupted_runs import IN_FLIGHT, close_interrupted_runs
from pipelines.jobs import digest_job, fill_mini_summaries_job, ingest_job, summarize_job
from pipelines.selection import next_summary_batch
from resources.bindings import (
    ChatModelResource,
    DigestStoreResource,
    GraphPolicyResource,
    MiniSummaryPolicyResource,
    SweepPolicyResource,
)

# A file modified more recently than this may still be being copied in.
SETTLE_S = 5.0
# Partition keys registered per tick: SQLite refuses very large single requests.
PARTITION_CHUNK = 1000


def _file_signature(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


@sensor(job=ingest_job, minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING)
def inbox_sensor(context: SensorEvaluationContext, store: DigestStoreResource):
    """Launches an ingest of every new or changed `*.jsonl` in the inbox (`DIGEST_INBOX`)."""
    inbox = Path(store.inbox)
    if not inbox.is_dir():
        return SkipReason(f"inbox {inbox} does not exist yet")
    seen = json.loads(context.cursor) if context.cursor else {}
    settled_before = time.time() - SETTLE_S
    current, fresh = {}, []
    for path in sorted(inbox.glob("*.jsonl")):
        signature = _file_signature(path)
        current[path.name] = signature
        if seen.get(path.name) != signature:
            if path.stat().st_mtime > settled_before:
                current[path.name] = seen.get(path.name)  # look again next tick
                continue
            fresh.append(str(path))
    cursor = json.dumps({k: v for k, v in current.items() if v is not None}, sort_keys=True)
    if not fresh:
        return SensorResult(skip_reason=SkipReason(f"no new files in {inbox}"), cursor=cursor)
    return SensorResult(
        run_requests=[
            RunRequest(
                run_config={"ops": {"raw_turns": {"config": {"paths": fresh}}}},
                tags={"digest/sweep": "inbox", "digest/files": str(len(fresh))},
            )
        ],
        cursor=cursor,
    )


def unregistered_partition_keys(instance, store) -> list[str]:
    """Up to a chunk of sessions in DuckDB that are not yet partitions (new, or from a restore)."""
    known = set(instance.get_dynamic_partitions(sessions_partitions.name))
    return [key for key in store.partition_keys() if key not in known][:PARTITION_CHUNK]


def register_partitions(instance, store) -> int:
    """What the summary sensor does a chunk a tick, done at once (for the CLI, which has no tick)."""
    added = 0
    while keys := unregistered_partition_keys(instance, store):
        instance.add_dynamic_partitions(sessions_partitions.name, keys)
        added += len(keys)
    return added


def in_flight_partitions(instance, job_name: str) -> set[str]:
    runs = instance.get_runs(filters=RunsFilter(job_name=job_name, statuses=IN_FLIGHT))
    return {run.tags.get("dagster/partition") for run in runs}


@sensor(job=summarize_job, minimum_interval_seconds=60, default_status=DefaultSensorStatus.RUNNING)
def summary_sensor(
    context: SensorEvaluationContext,
    store: DigestStoreResource,
    model: ChatModelResource,
    sweep: SweepPolicyResource,
):
    """Registers new sessions as partitions, then launches the next budgeted batch of summaries:
    newest first with a share for the oldest, idle sessions only, failures in backoff skipped."""
    db = store.store()
    new_keys = unregistered_partition_keys(context.instance, db)
    policy = sweep.policy()
    selection = next_summary_batch(
        db, model.limits(), policy, model.model, int(time.time() * 1000), exclude=in_flight_partitions(context.instance, summarize_job.name)
    )
    partition_requests = [sessions_partitions.build_add_request(new_keys)] if new_keys else []
    if not selection.batch:
        return SensorResult(dynamic_partitions_requests=partition_requests, skip_reason=selection.skip_reason)
    budget = f"{policy.max_sessions} sessions / {policy.model_seconds:.0f}s"
    return SensorResult(
        dynamic_partitions_requests=partition_requests,
        run_requests=[
            # No run key: a key would be deduplicated for the sensor's life and swallow a rerun
            # after a restore. Duplicates are prevented by the in-flight check and the lease.
            RunRequest(
                partition_key=item.candidate.partition_key,
                tags={
                    "digest/sweep": "sensor",
                    "digest/budget": budget,
                    "digest/route": item.tier,
                    "digest/estimated_s": f"{item.model_seconds_estimate:.0f}",
                },
            )
            for item in selection.batch
        ],
    )


@sensor(job=fill_mini_summaries_job, minimum_interval_seconds=120, default_status=DefaultSensorStatus.RUNNING)
def mini_summary_sensor(
    context: SensorEvaluationContext,
    store: DigestStoreResource,
    model: ChatModelResource,
    mini_summaries: MiniSummaryPolicyResource,
):
    """The mini-summary backfill: one session at a time, each run within its own model-time budget
    (`DIGEST_MINI_SUMMARY_BUDGET_S`), sessions headed for the degraded path first by default;
    sessions in their no-progress backoff wait."""
    if in_flight_partitions(context.instance, fill_mini_summaries_job.name):
        return SkipReason("a mini-summary backfill run is still going")
    policy = mini_summaries.policy()
    keys = store.store().pending_mini_summary_keys(model.limits(), policy.priority, int(time.time() * 1000), limit=20)
    registered = [k for k in keys if context.instance.has_dynamic_partition(sessions_partitions.name, k)]
    if not registered:
        return SkipReason("no turn needs a mini summary (or the sessions that do are backing off)")
    return RunRequest(
        partition_key=registered[0],
        tags={"digest/sweep": "mini-summaries", "digest/budget": f"{policy.budget_s:.0f}s", "digest/priority": policy.priority},
    )


@sensor(job=digest_job, minimum_interval_seconds=300, default_status=DefaultSensorStatus.RUNNING)
def digest_sensor(context: SensorEvaluationContext, store: DigestStoreResource, graph: GraphPolicyResource):
    """Digests summarized sessions into the graph, as the original's REM pass: at most
    `DIGEST_GRAPH_BATCH_SESSIONS` a tick, `DIGEST_GRAPH_FRESH_RESERVE` of them the newest and the
    rest the oldest; undigestible sessions and sessions whose turns changed since their summary
    are left out, and so are those already queued or running."""
    policy = graph.policy()
    keys = store.store().pending_digest_keys(
        policy.fresh_reserve, policy.batch_sessions, exclude=in_flight_partitions(context.instance, digest_job.name)
    )
    if not keys:
        return SkipReason("no summarized session waits for its graph")
    return [
        RunRequest(partition_key=key, tags={"digest/sweep": "graph", "digest/budget": f"{policy.batch_sessions} sessions"})
        for key in keys
    ]


@sensor(minimum_interval_seconds=60, default_status=DefaultSensorStatus.RUNNING)
def interrupted_runs_sensor(context: SensorEvaluationContext, store: DigestStoreResource):
    """Closes runs on this host whose process died, so their partitions can run again and their
    `model` pool slot is freed (Dagster's run monitoring cannot tell for the default launcher)."""
    closed = close_interrupted_runs(context.instance, store.store())
    if not closed:
        return SkipReason("no run lost its process")
    return SkipReason(f"closed {len(closed)} run(s) whose process died: {', '.join(closed)}")
