"""The CLI's in-process Dagster runs (`app.cli` parses the command line and runs the rest):
ingest, sweep, digest, the friction report and the mini summary fill, with what they share: the
job with its log file, the run's config, the store, the sweep's selection."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

from app.console import Output, run_log_config, run_log_file
from app.stopping import stop_requested
from digest.scheduling import now_ms
from digest.settings import Settings
from digest.tags import EXPLICIT_TAG, ROUTE_TAG, SWEEP_TAG
from resources.store import open_store


def log_path(settings: Settings) -> Path:
    """Where the CLI's runs write Dagster's event stream (the instance holds it too, for the UI)."""
    return settings.home / "logs" / "session-digest.log"


def _job(settings: Settings, name: str):
    """A job of the code location, with the logger that writes its events to `log_path`."""
    from dagster import Definitions

    from pipelines.definitions import build_definitions

    defs = Definitions.merge(build_definitions(settings), Definitions(loggers={"run_log_file": run_log_file()}))
    return defs.resolve_job_def(name)


def deep_merge(base: dict, extra: dict) -> dict:
    """`base` with `extra` laid over it, key by key at every depth (`extra` wins on a leaf)."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _execute(settings: Settings, instance, job, run_config: dict | None = None, **kwargs):
    """`execute_in_process` with Dagster's events in the instance and the log file, not on the console.
    The run's config is the job's default with the command's and the logger's merged into it (a run
    config passed to `execute_in_process` replaces the default whole)."""
    from pipelines.jobs import default_run_config

    own = deep_merge(run_config or {}, run_log_config(log_path(settings)))
    run_config = deep_merge(default_run_config(job, kwargs.get("partition_key")), own)
    return job.execute_in_process(run_config=run_config, instance=instance, raise_on_error=False, **kwargs)


def dagster_instance():
    from dagster import DagsterInstance

    return DagsterInstance.get()


@contextlib.contextmanager
def model_served(settings: Settings, output: Output):
    """One embedded server for the whole sweep, instead of one per run."""
    if settings.provider == "embedded" and not settings.model_url:
        from resources.embedded_server import EmbeddedServer

        output.note("Starting the embedded model server…")

        with EmbeddedServer(n_ctx=settings.context_limit_tokens) as server:
            yield dataclasses.replace(settings, model_url=server.url)
    else:
        yield settings


def ingest_folders(settings: Settings) -> tuple[list[Path], str]:
    """What `ingest` with no path reads: `DIGEST_WATCH`'s folders, else the harness homes, those
    that exist; and where they come from. None exists: the command fails saying where it looked."""
    from digest.walk import harness_homes, watch_folders

    if settings.watch:
        folders, origin = list(watch_folders(settings.watch)), "DIGEST_WATCH"
    else:
        folders, origin = harness_homes(), "the harness homes (DIGEST_WATCH is not set)"
    found = [f for f in folders if f.is_dir()]
    if not found:
        looked = ", ".join(str(f) for f in folders)
        raise SystemExit(
            f"session-digest ingest: no path given, and no folder of {origin} exists (looked for {looked}); "
            "name the files or folders to ingest, or set DIGEST_WATCH"
        )
    return found, origin


def ingest(settings: Settings, paths: list[str]) -> dict:
    """The ingest run; it registers the new sessions as partitions itself (`new_partitions`).
    No path: `ingest_folders`, named in the result."""
    read_from = {}
    if not paths:
        folders, origin = ingest_folders(settings)
        paths = [str(f) for f in folders]
        read_from = {"read_from": f"{origin}: {', '.join(paths)}"}
    instance = dagster_instance()
    config = {"ops": {"raw_turns": {"config": {"paths": [str(Path(p).resolve()) for p in paths]}}}}
    result = _execute(settings, instance, _job(settings, "ingest"), config)
    materialization = result.asset_materializations_for_node("raw_turns")
    if not result.success or not materialization:
        raise SystemExit(f"ingest failed (run {result.run_id}); see `session-digest ui` for the run's logs")
    # The tables are for the UI; the counts stand for them here.
    meta = {
        k: v.value
        for k, v in materialization[0].metadata.items()
        if k not in ("files_preview", "redactions_by_session")
    }
    return {
        "run_id": result.run_id,
        **read_from,
        **meta,
        "search_index": refresh_search_index(settings, instance, open_store(settings.db_path)),
    }


def sweep_selection(
    settings: Settings,
    limit: int | None,
    exclude: set[str] = frozenset(),
    probe: bool = True,
    named=None,
    model_seconds: float | None = None,
    first_only: bool = False,
    store=None,
):
    """The sweep's selection; `probe` off (`plan`): a half-open host's probe is looked at, not taken;
    `named`: these session ids alone (`sweep --session`); `model_seconds`: the model-time budget, when
    not the sweep's (what a drain has left); `first_only`: first summaries alone, no upgrade or re-summary;
    `store`: the caller's (default: the settings' store opened)."""
    from pipelines.selection import named_sessions_batch, next_summary_batch
    from resources.model_hosts import hosts_in_rotation

    store = store if store is not None else open_store(settings.db_path)
    now, fleet = now_ms(), settings.fleet
    policy = settings.sweep if limit is None else dataclasses.replace(settings.sweep, max_sessions=limit)
    if model_seconds is not None:
        policy = dataclasses.replace(policy, model_seconds=model_seconds)
    available, probing = hosts_in_rotation(store, fleet, settings.circuit, now)
    if named is not None:
        return named_sessions_batch(store, fleet, named, available=available, exclude=exclude)
    circuit = settings.circuit if probe else None
    return next_summary_batch(
        store, fleet, policy, now, exclude, available=available, probing=probing, circuit=circuit, later=not first_only
    )


def run_partitions(
    settings: Settings,
    instance,
    store,
    job_name: str,
    todo,
    asset: str,
    output: Output,
    estimates: list[float | None],
    nothing_to_do=lambda key, tags: None,
) -> list[dict]:
    """One in-process Dagster run per run request in `todo` (what the sensor would launch), of the
    assets it names; the embedded model starts once for all.
    `estimates`: the plan's model seconds of each, for the progress bar.
    `nothing_to_do(key, tags)`: why a partition needs no run any more, asked just before its run."""
    from pipelines.jobs import requested_job
    from pipelines.sensors import register_partitions
    from resources.worker import worker_tags

    outcomes = []
    if not todo:
        return outcomes
    register_partitions(instance, store)
    # Tagged at creation, not only when the run's resources start: a kill can land in between.
    process = worker_tags()
    title = {
        "summarize_sessions": "summarizing",
        "digest_sessions": "digesting",
        "fill_mini_summaries": "filling mini summaries",
    }[job_name]
    # The embedded server outlives every run of the batch: it stops only once no run will use it.
    with model_served(settings, output) as run_settings, output.sessions(title, estimates) as progress:
        job = _job(run_settings, job_name)
        for request in todo:
            if stop_requested():  # a stopped sweep launches nothing more
                break
            key, started = request.partition_key, time.monotonic()
            progress.starting(key)
            tags = {SWEEP_TAG: "cli", **request.tags, **process}
            reason = nothing_to_do(key, tags)
            if reason:
                outcome = {"partition": key, "run_id": None, "success": True, "nothing_to_do": reason}
                outcomes.append(outcome)
                progress.finished(outcome)
                continue
            result = _execute(run_settings, instance, requested_job(job, request), partition_key=key, tags=tags)
            outcome = {"partition": key, "run_id": result.run_id, "success": result.success}
            if not result.success:
                outcome.update(run_failure(result))
            if not result.success and stop_requested():  # Dagster raised the signal in the run's step
                outcome["interrupted"] = stop_requested()
            if not result.success and asset == "session_summaries":
                outcome.update(
                    summary_written_before_the_end(instance, store, result.run_id, outcome.get("interrupted"))
                )
            for event in result.asset_materializations_for_node(asset):
                meta = event.metadata
                outcome.update(
                    {
                        k: meta[k].value
                        for k in ("source_tier", "route_reason", "verdict", "nodes", "edges")
                        if k in meta
                    }
                )
                if "generated" in meta:
                    outcome["mini_summaries"] = meta["generated"].value
            for event in result.asset_observations_for_node(asset):
                # The run found nothing to do (e.g. a concurrent sweep had done it): no model call.
                if "reason" in event.metadata:
                    outcome["nothing_to_do"] = event.metadata["reason"].value
            outcome["seconds"] = round(time.monotonic() - started, 2)
            outcomes.append(outcome)
            progress.finished(outcome)
    return outcomes


def summary_written_before_the_end(instance, store, run_id: str, stopped_by: str | None) -> dict:
    """A summary run that failed (a stop between its summary's write and its end, most often) after
    its summary reached the store: the summary is made, and recorded as materialized where Dagster
    did not hear of it, so the catalog agrees with the store (no later run redoes a current summary).
    The outcome's changes: a success, with the summary's route and tier and how its run ended."""
    from pipelines.interrupted_runs import record_summaries_of_runs

    how = f"was stopped by {stopped_by}" if stopped_by else "failed"
    written, recorded = record_summaries_of_runs(
        instance, store, [run_id], lambda run_id: f"written by run {run_id}, which {how} before it recorded it"
    )
    if run_id not in written:
        return {}
    row = written[run_id]
    return {
        "success": True,
        **{k: row[k] for k in ("source_tier", "route_reason", "verdict")},
        "run_ended": f"the run {how} after writing its summary"
        + ("; its materialization recorded" if recorded else ""),
    }


def sweep(
    settings: Settings,
    limit: int | None,
    output: Output,
    sessions: list[str] = (),
    model_seconds: float | None = None,
    first_only: bool = False,
) -> dict:
    """Runs that died mid-sweep are closed, and summaries their model calls finished (staged in
    DuckDB) are written first, with no model call. Then the summary sensor's selection and budget,
    run now: one Dagster run per session. A session another sweep running at the same time has
    summarized meanwhile gets no run, or its run no model call (counted in `nothing_to_do`).
    `sessions` (ids or partition keys): those alone, outside the budget, the churn gate and their
    failure backoff; one already summarized at its current turns, and not due an upgrade, gets no run.
    `model_seconds`, `first_only`: a drain's (`sweep_selection`)."""
    from dagster import RunRequest

    from assets.work.sessions import nothing_to_summarize
    from pipelines.interrupted_runs import close_interrupted_runs, record_summaries_of_ended_runs
    from pipelines.sensors import summary_run_request

    instance = dagster_instance()
    store = open_store(settings.db_path)
    named = None
    if sessions:
        try:
            named = store.sessions.resolve_sessions(list(sessions))
        except ValueError as exc:
            raise SystemExit(f"session-digest sweep --session: {exc}") from None

    def nothing_to_do(key: str, tags: dict) -> str | None:
        # The selection is as old as the sweep: another sweep may have done the session since.
        session = store.sessions.session_by_partition(key)
        standing = store.summaries.summary_standing(session["session_id"]) if session else None
        return nothing_to_summarize(standing, tags, now_ms())

    recovered = close_interrupted_runs(instance, store)
    recorded = record_summaries_of_ended_runs(instance, store)
    # The selection's reads on one connection (an open and its closing checkpoint cost more than a
    # read: BENCHMARKS §42), let go before the runs, which open the file themselves.
    with store.file.held():
        staged = store.cache.staged_summary_keys(now_ms())
        selection = sweep_selection(
            settings,
            limit,
            exclude=set(staged),
            named=named,
            model_seconds=model_seconds,
            first_only=first_only,
            store=store,
        )
    todo = [RunRequest(partition_key=key, tags={ROUTE_TAG: "staged"}) for key in staged]
    todo += [summary_run_request(item, {EXPLICIT_TAG: "cli"} if named else None) for item in selection.batch]
    # A staged replay calls no model.
    estimates = [0.0] * len(staged) + [i.model_seconds_estimate for i in selection.batch]
    outcomes = run_partitions(
        settings, instance, store, "summarize_sessions", todo, "session_summaries", output, estimates, nothing_to_do
    )
    return {
        "backlog": refresh_backlog(settings, instance, store),
        "search_index": refresh_search_index(settings, instance, store),
        "pending": selection.pending,
        "skipped": selection.skip_reason,
        "interrupted_runs_closed": recovered,
        # Runs that ended after writing their summary and before Dagster recorded it: recorded now.
        "summaries_recorded": recorded,
        "staged_replayed": staged,
        "summarized": sum(o["success"] and "nothing_to_do" not in o for o in outcomes),
        "failed": sum(not o["success"] for o in outcomes),
        "run_errors": run_errors(outcomes),
        "upgrades": selection.upgrades,  # runs planned as upgrades: degraded summaries made again at a higher step
        "resummaries": selection.resummaries,  # runs planned as re-summaries asked for (`--resummarize`)
        "nothing_to_do": sum("nothing_to_do" in o for o in outcomes),
        "runs": outcomes,
    }


def refresh_backlog(settings: Settings, instance, store) -> str:
    """The `backlog` asset recorded after a sweep (no run), as the summary sensor's ticks record it;
    its one-line summary."""
    from assets.backlog import backlog_events
    from assets.work.backlog import measure
    from digest.backlog import backlog_line

    measured = measure(store, settings.fleet, settings.circuit, settings.sweep, now_ms(), settings.vector_model)
    for event in backlog_events(measured, settings.sweep):
        instance.report_runless_asset_event(event)
    return backlog_line(measured)


def refresh_search_index(settings: Settings, instance, store) -> dict:
    """The `search_index` asset brought up to date and recorded after a sweep or an ingest (no run),
    as the search sensor's ticks record it; its figures."""
    from assets.search_index import EMBED_PASS_S, search_index_events
    from resources.model_clients.embeddings import embedding_client

    client = embedding_client(settings.embed_provider, settings.embed_url, settings.embed_model, settings.embed_threads)
    events = search_index_events(
        store, settings.search_lag_max_s, None, client, settings.embed_batch_documents, EMBED_PASS_S
    )
    for event in events:
        instance.report_runless_asset_event(event)
    metadata = events[0].metadata
    shown = ("sessions_indexed", "sessions_behind", "seconds", "vectors_embedded", "vectors_pending", "vectors_error")
    return {key: metadata[key].value for key in shown if key in metadata}


def digest(settings: Settings, limit: int | None, output: Output) -> dict:
    """The digest sensor's selection, run now: one `digest_sessions` run per session. A run that
    succeeds without a graph left its session part-done (its budget ran out) or gated."""
    from dagster import RunRequest

    store = open_store(settings.db_path)
    policy = settings.graph
    keys = store.graph.pending_digest_keys(policy.fresh_reserve, limit or policy.batch_sessions)
    todo = [RunRequest(partition_key=k, tags={ROUTE_TAG: "graph"}) for k in keys]
    # The plan estimates summaries only: a graph run's bar counts sessions, with no time left.
    estimates = [None] * len(keys)
    runs = run_partitions(
        settings, dagster_instance(), store, "digest_sessions", todo, "session_graph", output, estimates
    )
    return {
        "digested": sum("nodes" in r for r in runs),  # graphs written (a run may stop part-done)
        "nothing_to_do": sum("nothing_to_do" in r for r in runs),
        "runs": runs,
    }


def friction_report(settings: Settings) -> dict:
    result = _execute(settings, dagster_instance(), _job(settings, "report_friction"))
    events = result.asset_materializations_for_node("friction_report")
    if not result.success or not events:
        raise SystemExit(f"the friction report failed (run {result.run_id}); see `session-digest ui`")
    # The numbers and the report file; the Markdown copy is for the UI.
    return {"run_id": result.run_id, **{k: v.value for k, v in events[0].metadata.items() if k != "report"}}


def run_failure(result) -> dict:
    """Why a run failed: `error`, its step's error in a line (a `Failure`'s description, or the
    exception), and `symptom` where the failure names one (`run-error`: it raised on its session's data)."""
    for event in result.all_events:
        if event.is_step_failure:
            data = event.step_failure_data
            failure = data.user_failure_data
            message = ((failure and failure.description) or data.error.message or data.error.cls_name or "").strip()
            symptom = (failure.metadata or {}).get("symptom") if failure else None
            return {
                "error": message.splitlines()[0] if message else "unknown error",
                **({"symptom": str(symptom.value)} if symptom is not None else {}),
            }
        if event.is_run_failure and event.event_specific_data and event.event_specific_data.error:
            return {"error": event.event_specific_data.error.message.strip().splitlines()[0]}
    return {"error": "the run failed; see `session-digest ui` for its logs"}


def run_errors(outcomes: list[dict]) -> int:
    """The runs that raised on their session's data (`run-error`): not a model's failure, a sweep's own."""
    return sum(o.get("symptom") == "run-error" for o in outcomes)
