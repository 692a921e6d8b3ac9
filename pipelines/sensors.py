"""Sensors: the inbox feeds ingest, the summary sensor works through the backlog in budgeted
batches, the mini-summary and graph sensors launch their backfills, one closes runs whose process
died (and records the summaries of runs that ended before recording them), and one keeps the search
index up to date. All six are cheap: they list files and read DuckDB and the instance's runs (the
fifth also marks a dead run failed, the last indexes the sessions that changed); none calls a model."""

import json
import os
import time
import uuid
from pathlib import Path

from dagster import (
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from assets.backlog import BACKLOG_KEY, backlog_events
from assets.partitions import (
    PARTITION_CHUNK,
    add_new_partitions,
    imported_materializations,
    registered_partitions,
    sessions_partitions,
    unregistered_partition_keys,
)
from assets.search_index import TICK_SESSIONS, search_index_events
from assets.work.backlog import measure
from digest.backoff import doubling_backoff_s
from digest.hosts import estimated_seconds
from digest.scheduling import now_ms
from digest.tags import (
    BUDGET_TAG,
    ESTIMATED_S_TAG,
    FILES_TAG,
    INBOX_BATCH_TAG,
    MODEL_HOST_REASON_TAG,
    MODEL_HOST_TAG,
    PRIORITY_TAG,
    RESUMMARY_TAG,
    ROUTE_TAG,
    SWEEP_TAG,
    UPGRADE_TAG,
)
from digest.walk import walk, walk_order
from pipelines.interrupted_runs import IN_FLIGHT, close_interrupted_runs, record_summaries_of_ended_runs
from pipelines.jobs import SWEEP_RUN_ASSETS, digest_job, fill_mini_summaries_job, ingest_job, summarize_job
from pipelines.selection import next_summary_batch
from resources.bindings import (
    ChatModelResource,
    CircuitPolicyResource,
    DigestStoreResource,
    EmbeddingResource,
    GraphPolicyResource,
    MiniSummaryPolicyResource,
    SweepPolicyResource,
)
from resources.model_hosts import ModelHosts, closed_hosts, hosts_in_rotation

# A file modified more recently than this may still be being copied in.
SETTLE_S = 5.0
# A batch whose ingest failed twice waits this long before its next try, doubling up to the cap.
RETRY_BASE_S = 60.0
RETRY_MAX_S = 3600.0


def described_sensor(**kwargs):
    """`@sensor`, its docstring the description the UI shows (Dagster reads none from the docstring)."""

    def wrap(fn):
        return sensor(description=" ".join(fn.__doc__.split()), **kwargs)(fn)

    return wrap


def _file_signature(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def _mtime_s(signature: str) -> float:
    return int(signature.split(":")[1]) / 1e9


def _batch_state(instance, batch: str) -> tuple[str, float]:
    """("done" | "running" | "failed", when a failed batch may go again). A batch with no run at
    all (deleted from the UI) counts as failed, due now."""
    records = instance.get_run_records(filters=RunsFilter(job_name=ingest_job.name, tags={INBOX_BATCH_TAG: batch}))
    statuses = {r.dagster_run.status for r in records}
    if DagsterRunStatus.SUCCESS in statuses:
        return "done", 0.0
    if statuses - {DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}:
        return "running", 0.0
    if not records:
        return "failed", 0.0
    # The first retry goes on the next tick; then the wait doubles, so a file that keeps failing
    # does not fill the run list.
    wait = 0.0 if len(records) < 2 else doubling_backoff_s(len(records) - 1, RETRY_BASE_S, RETRY_MAX_S)
    return "failed", max(r.end_time or 0.0 for r in records) + wait


def _ingest_request(batch: str, files: dict[str, str]) -> RunRequest:
    return RunRequest(
        # In the walk's order: a session's file before its sub-agents' (the readers attach them).
        run_config={"ops": {"raw_turns": {"config": {"paths": sorted(files, key=walk_order)}}}},
        tags={SWEEP_TAG: "inbox", FILES_TAG: str(len(files)), INBOX_BATCH_TAG: batch},
    )


@described_sensor(job=ingest_job, minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING)
def inbox_sensor(context: SensorEvaluationContext, store: DigestStoreResource):
    """Launches an ingest of every new or changed log in the inbox (`DIGEST_INBOX`) and in the
    folders of `DIGEST_WATCH` (the harness homes, say), walked down their sub-folders as `ingest
    DIR` walks them: every `*.jsonl`, and each `.md`, `.traj` or `.json` whose content is a harness
    log. The ingest reads a grown file from where its last read stopped. A file is done once an
    ingest of it succeeded: a failed run is launched again (the next tick, then after a doubling
    wait), and a file whose run is still going is not launched twice."""
    folders = store.watched()
    existing = [folder for folder in folders if folder.is_dir()]
    if not existing:
        return SkipReason(f"none of the watched folders exists yet: {', '.join(map(str, folders))}")
    state = json.loads(context.cursor) if context.cursor else {}
    # A cursor from before runs were followed maps files to signatures: those are done.
    done, launched = (state["done"], state["launched"]) if "done" in state else (state, {})
    # A cursor from before folders were walked names the inbox's files by name alone.
    inbox = Path(store.inbox)
    done = {name if os.path.isabs(name) else str(inbox / name): sig for name, sig in done.items()}
    now = time.time()
    current = {}
    for path in walk(existing).files:
        try:
            current[str(path)] = _file_signature(path)
        except FileNotFoundError:  # gone since the walk listed it
            continue
    requests, kept, waiting = [], {}, []
    for batch, files in launched.items():
        outcome, retry_at = _batch_state(context.instance, batch)
        if outcome == "done":
            done.update(files)
            continue
        if outcome == "failed" and retry_at <= now:
            # Only the files still there as they were: a changed file goes out as a new one.
            files = {name: sig for name, sig in files.items() if current.get(name) == sig}
            if not files:
                continue
            requests.append(_ingest_request(batch, files))
        elif outcome == "failed":
            waiting.append(f"{len(files)} file(s) retry in {retry_at - now:.0f}s")
        kept[batch] = files
    in_hand = {(name, sig) for files in kept.values() for name, sig in files.items()}
    settled_before = now - SETTLE_S
    fresh = {
        name: sig
        for name, sig in current.items()
        if done.get(name) != sig and (name, sig) not in in_hand and _mtime_s(sig) <= settled_before
    }
    if fresh:
        batch = uuid.uuid4().hex
        requests.append(_ingest_request(batch, fresh))
        kept[batch] = fresh
    # Files gone from the folders drop out; a file still being written keeps its last done signature.
    cursor = json.dumps(
        {"done": {name: done[name] for name in current if name in done}, "launched": kept}, sort_keys=True
    )
    if not requests:
        where = ", ".join(map(str, existing))
        reason = f"no new or grown files in {where}" + (f" ({'; '.join(waiting)})" if waiting else "")
        return SensorResult(skip_reason=SkipReason(reason), cursor=cursor)
    return SensorResult(run_requests=requests, cursor=cursor)


def stale_partition_keys(registered: set[str], stored: list[str], limit: int | None = PARTITION_CHUNK) -> list[str]:
    """Partitions whose session DuckDB no longer holds (a replace restore removed it, and was killed
    before it could delete its partition), at most `limit`: the partition set converges to the store's."""
    return sorted(registered - set(stored))[:limit]


def reconcile_partitions(instance, store) -> tuple[int, list[str]]:
    """What the summary sensor does a chunk a tick, done at once (for the CLI, which has no tick):
    the store's new sessions registered, partitions of sessions it no longer holds deleted.
    (how many added, the keys deleted)."""
    registered, stored = registered_partitions(instance), store.sessions.partition_keys()
    added = add_new_partitions(instance, store, registered, stored)
    stale = stale_partition_keys(registered, stored, limit=None)
    for key in stale:
        instance.delete_dynamic_partition(sessions_partitions.name, key)
    return added, stale


def register_partitions(instance, store) -> int:
    """`reconcile_partitions`, saying how many partitions it added."""
    return reconcile_partitions(instance, store)[0]


def _with_partitions(context: SensorEvaluationContext, run_requests: list[RunRequest]) -> SensorResult:
    """The requests, with the partitions they name that are not registered yet added in the same
    result: Dagster fails the whole tick over one unknown partition."""
    missing = [
        request.partition_key
        for request in run_requests
        if not context.instance.has_dynamic_partition(sessions_partitions.name, request.partition_key)
    ]
    requests = [sessions_partitions.build_add_request(missing)] if missing else []
    return SensorResult(run_requests=run_requests, dynamic_partitions_requests=requests)


def in_flight_partitions(instance, job_name: str) -> set[str]:
    return in_flight(instance, job_name)[0]


def in_flight(instance, job_name: str) -> tuple[set[str], dict[str, float]]:
    """The partitions of the job's queued and running runs, and the estimated model seconds they
    hold on each model host (their `digest/model_host` and `digest/estimated_s` tags)."""
    keys, queued_s = set(), {}
    for run in instance.get_runs(filters=RunsFilter(job_name=job_name, statuses=IN_FLIGHT)):
        keys.add(run.tags.get("dagster/partition"))
        if MODEL_HOST_TAG in run.tags:
            host = run.tags[MODEL_HOST_TAG]
            queued_s[host] = queued_s.get(host, 0.0) + estimated_seconds(run.tags.get(ESTIMATED_S_TAG))
    return keys, queued_s


def spread_over_hosts(instance, store, fleet, circuit, count: int) -> list[str]:
    """Hosts for `count` new mini-summary or graph runs: each to the host with a closed circuit
    that has the fewest queued or running model runs per call slot, counting the ones placed
    before it (ties: the first declared). Empty when no host's circuit is closed."""
    names = closed_hosts(store, fleet, circuit, now_ms())
    if not names:
        return []
    runs = {name: 0 for name in names}
    for run in instance.get_runs(filters=RunsFilter(statuses=IN_FLIGHT)):
        if run.tags.get(MODEL_HOST_TAG) in runs:
            runs[run.tags[MODEL_HOST_TAG]] += 1
    placed = []
    for _ in range(count):
        host = min(names, key=lambda n: runs[n] / fleet.host(n).concurrency)
        runs[host] += 1
        placed.append(host)
    return placed


def _no_host_in_rotation(fleet) -> SkipReason:
    return SkipReason(f"no model host in rotation: {', '.join(fleet.names)} have their circuit open")


def summary_run_tags(item) -> dict[str, str]:
    """A summary run's tags from its planned assignment: the host (the UI filters runs on it, and
    the run queue limits each host's runs to its concurrency), why, and the route and cost."""
    upgrade = item.candidate.summary_step
    return {
        MODEL_HOST_TAG: item.host,
        MODEL_HOST_REASON_TAG: item.reason,
        ROUTE_TAG: str(item.tier),  # Dagster's tags are plain text
        ESTIMATED_S_TAG: f"{item.model_seconds_estimate:.0f}",
        **({UPGRADE_TAG: str(upgrade)} if upgrade is not None else {}),
        **({RESUMMARY_TAG: "requested"} if item.candidate.resummary else {}),
    }


@described_sensor(job=summarize_job, minimum_interval_seconds=60, default_status=DefaultSensorStatus.RUNNING)
def summary_sensor(
    context: SensorEvaluationContext,
    store: DigestStoreResource,
    model: ChatModelResource,
    sweep: SweepPolicyResource,
    circuit: CircuitPolicyResource,
    embeddings: EmbeddingResource,
):
    """Registers new sessions as partitions, then launches the next budgeted batch of summaries:
    newest first with a share for the oldest, idle sessions only, failures in backoff skipped, each
    placed on a model host in rotation. Records the `backlog` asset every `DIGEST_BACKLOG_REFRESH_S`."""
    # The Dagster instance is read first, so the store's file is held for its own reads alone (other
    # processes wait for it meanwhile): the partitions (0.7 s of a tick at 100,000) and in-flight runs.
    registered = registered_partitions(context.instance)
    exclude, queued_s = in_flight(context.instance, summarize_job.name)
    db = store.open()
    # Measured on connections of its own before the held one: placing every pending session is
    # seconds of Python at 100,000 (BENCHMARKS §4), which would keep other processes off the file.
    due = backlog_due(context.instance, sweep.policy().backlog_refresh_s)
    backlog = backlog_refresh(context, db, model.hosts, sweep, circuit, embeddings.embedded_model()) if due else []
    with db.file.held():  # the tick's reads, and a probe taken, on one connection
        return summary_tick(context, db, model.hosts, sweep, circuit, registered, exclude, queued_s, backlog)


def backlog_due(instance, refresh_s: float) -> bool:
    """Whether the `backlog` asset's last materialization (a tick's, a sweep's or a run's) is older
    than `refresh_s`."""
    latest = instance.get_latest_materialization_event(BACKLOG_KEY)
    return latest is None or time.time() - latest.timestamp >= refresh_s


def backlog_refresh(
    context: SensorEvaluationContext, db, hosts: ModelHosts, sweep, circuit, embed_model: str | None = None
) -> list:
    """The `backlog` asset's runless materialization and stall check; none when measuring fails (the
    tick goes on without them)."""
    try:
        measured = measure(db, hosts.fleet, circuit.policy(), sweep.policy(), now_ms(), embed_model)
        return backlog_events(measured, sweep.policy())
    except Exception:
        context.log.exception("measuring the backlog failed")
        return []


def summary_tick(
    context: SensorEvaluationContext,
    db,
    hosts: ModelHosts,
    sweep,
    circuit,
    registered,
    exclude,
    queued_s,
    backlog: list = (),
) -> SensorResult:
    """`registered`: the partitions; `exclude`, `queued_s`: the summary runs in flight (`in_flight`);
    `backlog`: the `backlog` asset's events to record with the tick's (`backlog_refresh`)."""
    policy = sweep.policy()
    try:
        fleet, now = hosts.fleet, now_ms()
        available, probing = hosts_in_rotation(db, fleet, circuit.policy(), now)
        if len(available) < len(fleet.names):
            out = ", ".join(n for n in fleet.names if n not in available)
            context.log.warning(f"model host(s) out of rotation, their circuit open: {out}")
        selection = next_summary_batch(
            db, fleet, policy, now, exclude, queued_s, available=available, probing=probing, circuit=circuit.policy()
        )
        batch, skip_reason = selection.batch, selection.skip_reason
    except Exception as exc:  # the tick still registers: a raised tick would drop its chunk with it
        context.log.exception("the summary selection failed")
        batch, skip_reason = [], f"the summary selection failed: {exc!r}"
    # The batch's sessions go first, so its runs never wait for their partitions.
    stored = db.sessions.partition_keys()
    new_keys = unregistered_partition_keys(registered, stored, first=[item.candidate.partition_key for item in batch])
    partition_requests = [sessions_partitions.build_add_request(new_keys)] if new_keys else []
    # The registration diff both ways: a session the store no longer holds loses its partition.
    stale = stale_partition_keys(registered, stored)
    if stale:
        partition_requests.append(sessions_partitions.build_delete_request(stale))
    # Registered, or added by this result: only a batch larger than a chunk leaves some to a later tick.
    known = registered | set(new_keys)
    batch = [item for item in batch if item.candidate.partition_key in known]
    events = [*imported_materializations(db, new_keys), *backlog]
    if not batch:
        return SensorResult(
            dynamic_partitions_requests=partition_requests, skip_reason=skip_reason, asset_events=events
        )
    budget = f"{policy.max_sessions} sessions / {policy.model_seconds:.0f}s a host"
    return SensorResult(
        dynamic_partitions_requests=partition_requests,
        asset_events=events,
        run_requests=[
            # No run key: a key would be deduplicated for the sensor's life and swallow a rerun
            # after a restore. Duplicates are prevented by the in-flight check and the lease.
            summary_run_request(item, {SWEEP_TAG: "sensor", BUDGET_TAG: budget})
            for item in batch
        ],
    )


def summary_run_request(item, sweep_tags: dict[str, str] | None = None) -> RunRequest:
    """The run of a planned assignment, of the assets a sweep's run needs (`SWEEP_RUN_ASSETS`: no
    mini summaries first), tagged with its plan (`summary_run_tags`) beside `sweep_tags` (who
    launched it, on what budget)."""
    return RunRequest(
        partition_key=item.candidate.partition_key,
        tags={**(sweep_tags or {}), **summary_run_tags(item)},
        asset_selection=list(SWEEP_RUN_ASSETS),
        # A subset names its checks (none, as the job's), else Dagster adds back the selected assets' checks.
        asset_check_keys=[],
    )


@described_sensor(job=fill_mini_summaries_job, minimum_interval_seconds=120, default_status=DefaultSensorStatus.RUNNING)
def mini_summary_sensor(
    context: SensorEvaluationContext,
    store: DigestStoreResource,
    model: ChatModelResource,
    mini_summaries: MiniSummaryPolicyResource,
    circuit: CircuitPolicyResource,
    sweep: SweepPolicyResource,
):
    """The mini-summary backfill: one session at a time, each run within its own model-time budget
    (`DIGEST_MINI_SUMMARY_BUDGET_S`), sessions headed for the degraded path first by default;
    sessions in their no-progress backoff wait, and all wait while a session the summary sensor may
    take waits for its first summary."""
    if in_flight_partitions(context.instance, fill_mini_summaries_job.name):
        return SkipReason("a mini-summary backfill run is still going")
    db = store.open()
    with db.file.held():
        return mini_summary_tick(context, db, model.hosts, mini_summaries, circuit, sweep)


def mini_summary_tick(context: SensorEvaluationContext, db, hosts: ModelHosts, mini_summaries, circuit, sweep):
    """`sweep`: the summary sweep's policy, whose gates say which sessions wait for a summary now."""
    # First summaries first: a backfill run holds the model for its whole budget.
    queue = db.summaries.summary_queue(now_ms(), sweep.policy().idle_window_s, newest=0, oldest=0)
    waiting = queue["pending"] - queue["active"] - queue["backing_off"]
    if waiting:
        return SkipReason(f"{waiting} session(s) wait for a summary: the summary sensor goes first")
    policy, fleet = mini_summaries.policy(), hosts.fleet
    keys = db.mini_summaries.pending_mini_summary_keys(hosts.limits(), policy.priority, now_ms(), limit=1)
    if not keys:
        return SkipReason("no turn needs a mini summary (or the sessions that do are backing off)")
    hosts = spread_over_hosts(context.instance, db, fleet, circuit.policy(), 1)
    if not hosts:
        return _no_host_in_rotation(fleet)
    tags = {
        SWEEP_TAG: "mini-summaries",
        BUDGET_TAG: f"{policy.budget_s:.0f}s",
        PRIORITY_TAG: policy.priority,
        MODEL_HOST_TAG: hosts[0],
    }
    return _with_partitions(context, [RunRequest(partition_key=keys[0], tags=tags)])


@described_sensor(job=digest_job, minimum_interval_seconds=300, default_status=DefaultSensorStatus.RUNNING)
def digest_sensor(
    context: SensorEvaluationContext,
    store: DigestStoreResource,
    model: ChatModelResource,
    graph: GraphPolicyResource,
    circuit: CircuitPolicyResource,
):
    """Digests summarized sessions into the graph, as the original's REM pass: at most
    `DIGEST_GRAPH_BATCH_SESSIONS` a tick, `DIGEST_GRAPH_FRESH_RESERVE` of them the newest and the
    rest the oldest; undigestible sessions and sessions whose turns changed since their summary
    are left out, and so are those already queued or running."""
    db = store.open()
    with db.file.held():
        return digest_tick(context, db, model.hosts, graph, circuit)


def digest_tick(context: SensorEvaluationContext, db, hosts: ModelHosts, graph, circuit):
    policy, fleet = graph.policy(), hosts.fleet
    keys = db.graph.pending_digest_keys(
        policy.fresh_reserve, policy.batch_sessions, exclude=in_flight_partitions(context.instance, digest_job.name)
    )
    if not keys:
        return SkipReason("no summarized session waits for its graph")
    tags = {SWEEP_TAG: "graph", BUDGET_TAG: f"{policy.batch_sessions} sessions"}
    hosts = spread_over_hosts(context.instance, db, fleet, circuit.policy(), len(keys))
    if not hosts:
        return _no_host_in_rotation(fleet)
    requests = [RunRequest(partition_key=key, tags={**tags, MODEL_HOST_TAG: host}) for key, host in zip(keys, hosts)]
    return _with_partitions(context, requests)


@described_sensor(minimum_interval_seconds=60, default_status=DefaultSensorStatus.RUNNING)
def interrupted_runs_sensor(context: SensorEvaluationContext, store: DigestStoreResource):
    """Closes runs on this host whose process died, so their partitions can run again and their
    `model` pool slot is freed (Dagster's run monitoring cannot tell for the default launcher); and
    records as materialized the summaries of runs stopped or failed after writing them, which no
    later run would make again."""
    db = store.open()
    closed = close_interrupted_runs(context.instance, db)
    recorded = record_summaries_of_ended_runs(context.instance, db)
    done = [f"closed {len(closed)} run(s) whose process died: {', '.join(closed)}"] if closed else []
    if recorded:
        done.append(f"recorded the summaries of {len(recorded)} run(s) that ended first: {', '.join(recorded)}")
    return SkipReason("; ".join(done) or "no run lost its process, no summary waits to be recorded")


@described_sensor(minimum_interval_seconds=60, default_status=DefaultSensorStatus.RUNNING)
def search_index_sensor(context: SensorEvaluationContext, store: DigestStoreResource, embeddings: EmbeddingResource):
    """Brings the `search_index` asset up to date when sessions changed since they were indexed (at
    most 500 sessions a tick, newest first), and records it with its check; where a host serves
    embeddings, also while documents wait for their vectors. A tick with nothing to do reads a
    query or two and records nothing."""
    db = store.open()
    client = embeddings.client()
    waiting = client is not None and db.search_vectors.counts(client.model)["pending"] > 0
    if not db.search.behind() and not waiting:
        return SkipReason("the search index is up to date")
    events = search_index_events(db, store.search_lag_max_s, TICK_SESSIONS, client, embeddings.embed_batch_documents)
    return SensorResult(asset_events=events)
