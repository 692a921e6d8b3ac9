"""`session-digest`: the front door. Every command that does work does it as a Dagster run in the
instance under DAGSTER_HOME, so `session-digest ui` (or `dagster dev`) shows it afterwards."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path

from digest.pacing import slowdown_status
from digest.scheduling import now_ms
from digest.settings import Settings, SettingsError, load_settings
from pipelines.console import Output, run_log_config, run_log_file
from pipelines.instance import write_instance_config
from pipelines.tags import EXPLICIT_TAG, ROUTE_TAG, SWEEP_TAG
from resources.store import StoreUnreadable

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "samples" / "bundle"


def _telemetry_notice(home: Path) -> None:
    """Dagster prints a two-paragraph telemetry banner in the middle of the first run's events, when
    it makes the instance's telemetry id. The id is made here, by Dagster's own function, and one
    line says the same. Telemetry itself stays as dagster.yaml has it."""
    from dagster_shared.telemetry import get_or_set_instance_id, get_telemetry_enabled_from_dagster_yaml

    if not get_telemetry_enabled_from_dagster_yaml():
        return
    banner = io.StringIO()
    with contextlib.redirect_stderr(banner):
        get_or_set_instance_id()
    if banner.getvalue():  # the first run on this instance
        print(
            "Dagster sends anonymous usage statistics (https://docs.dagster.io/about/telemetry); "
            f"to turn them off, add `telemetry: {{enabled: false}}` to {home / 'dagster.yaml'}.",
            file=sys.stderr,
        )


def _prepare_home(settings: Settings) -> None:
    """DAGSTER_HOME defaults to a folder under DIGEST_HOME, so the CLI's runs and the UI agree; its
    dagster.yaml follows the settings (`pipelines.instance`)."""
    os.environ.setdefault("DAGSTER_HOME", str(settings.dagster_home))
    home = Path(os.environ["DAGSTER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    warning = write_instance_config(home, settings)
    if warning:
        print(warning, file=sys.stderr)
    _telemetry_notice(home)
    settings.inbox.mkdir(parents=True, exist_ok=True)


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


def _instance():
    from dagster import DagsterInstance

    return DagsterInstance.get()


@contextlib.contextmanager
def _model_url(settings: Settings, output: Output):
    """One embedded server for the whole sweep, instead of one per run."""
    if settings.provider == "embedded" and not settings.model_url:
        from resources.embedded_server import EmbeddedServer

        output.note("Starting the embedded model server…")

        with EmbeddedServer(n_ctx=settings.context_limit_tokens) as server:
            yield dataclasses.replace(settings, model_url=server.url)
    else:
        yield settings


def ingest(settings: Settings, paths: list[str]) -> dict:
    from pipelines.sensors import register_partitions

    instance = _instance()
    config = {"ops": {"raw_turns": {"config": {"paths": [str(Path(p).resolve()) for p in paths]}}}}
    result = _execute(settings, instance, _job(settings, "ingest"), config)
    materialization = result.asset_materializations_for_node("raw_turns")
    if not result.success or not materialization:
        raise SystemExit(f"ingest failed (run {result.run_id}); see `session-digest ui` for the run's logs")
    meta = {k: v.value for k, v in materialization[0].metadata.items() if k != "files_preview"}
    return {"run_id": result.run_id, **meta, "new_partitions": register_partitions(instance, _store(settings))}


def _store(settings: Settings):
    from resources.store import DigestStore

    store = DigestStore(settings.db_path)
    store.migrate()
    return store


def _reading_store(settings: Settings):
    """The store for a command that only reads (`status`): no migration, read-only connections, so
    a full or read-only disk does not stop it. A store missing, or of an older schema, is migrated."""
    from resources.store import DigestStore
    from resources.store.connection import SCHEMA_VERSION

    if settings.db_path.is_file():
        store = DigestStore(settings.db_path, read_only=True)
        try:
            with store.file.connect() as con:
                version = con.execute("SELECT max(version) FROM schema_meta").fetchone()[0]
        except duckdb_errors() as exc:
            version = exc
        if version == SCHEMA_VERSION:
            return store
    return _store(settings)


def duckdb_errors():
    import duckdb

    return duckdb.Error


def _disk_state(path: Path) -> str | None:
    """Why nothing can be written under `path` now, as the OS words it, or None."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    if stat.f_flag & os.ST_RDONLY:
        return "Read-only file system"
    if stat.f_bavail * stat.f_frsize < 2**20:
        return "No space left on device"
    return None


def _write_failure(exc: BaseException, settings: Settings) -> str | None:
    """The one line for a write the disk refused (full, read-only), found anywhere in the error's
    chain: the file and the cause. None for any other error."""
    import errno
    import re

    from resources.store.connection import disk_cause

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES):
            where = exc.filename or settings.home
            return f"cannot write {where}: {os.strerror(exc.errno)}"
        cause = disk_cause(exc)
        if cause is None and re.search(
            r"disk I/O error|database or disk is full|readonly database|unable to open database file", str(exc)
        ):
            # SQLite (Dagster's storage) names no OS error: the disk under DIGEST_HOME says which.
            cause = _disk_state(settings.home) or str(exc).splitlines()[0][:200]
        if cause is not None:
            quoted = re.search(r'"(/[^"]+)"', str(exc))
            if quoted:
                where = quoted.group(1)
            elif "sqlite" in type(exc).__module__ or "sqlalchemy" in type(exc).__module__:
                where = f"the Dagster instance in {os.environ.get('DAGSTER_HOME', settings.dagster_home)}"
            else:
                where = settings.db_path
            return f"cannot write {where}: {cause}"
        exc = exc.__cause__ or exc.__context__
    return None


def _selection(settings: Settings, limit: int | None, exclude: set[str] = frozenset(), probe: bool = True, named=None):
    """The sweep's selection; `probe` off (`plan`): a half-open host's probe is looked at, not taken;
    `named`: these session ids alone (`sweep --session`)."""
    from pipelines.selection import hosts_in_rotation, named_sessions_batch, next_summary_batch

    store, now, fleet = _store(settings), now_ms(), settings.fleet
    policy = settings.sweep if limit is None else dataclasses.replace(settings.sweep, max_sessions=limit)
    available, probing = hosts_in_rotation(store, fleet, settings.circuit, now)
    if named is not None:
        return named_sessions_batch(store, fleet, named, available=available, exclude=exclude)
    circuit = settings.circuit if probe else None
    return next_summary_batch(store, fleet, policy, now, exclude, available=available, probing=probing, circuit=circuit)


def _run_partitions(
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
    from pipelines.interrupted_runs import worker_tags
    from pipelines.jobs import requested_job
    from pipelines.sensors import register_partitions

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
    with _model_url(settings, output) as run_settings, output.sessions(title, estimates) as progress:
        job = _job(run_settings, job_name)
        for request in todo:
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


def sweep(settings: Settings, limit: int | None, output: Output, sessions: list[str] = ()) -> dict:
    """Runs that died mid-sweep are closed, and summaries their model calls finished (staged in
    DuckDB) are written first, with no model call. Then the summary sensor's selection and budget,
    run now: one Dagster run per session. A session another sweep running at the same time has
    summarized meanwhile gets no run, or its run no model call (counted in `nothing_to_do`).
    `sessions` (ids or partition keys): those alone, outside the budget, the churn gate and their
    failure backoff; one already summarized at its current turns, and not due an upgrade, gets no run."""
    from dagster import RunRequest

    from assets.work.sessions import nothing_to_summarize
    from pipelines.interrupted_runs import close_interrupted_runs
    from pipelines.sensors import summary_run_request

    instance = _instance()
    store = _store(settings)
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
    staged = store.cache.staged_summary_keys()
    selection = _selection(settings, limit, exclude=set(staged), named=named)
    todo = [RunRequest(partition_key=key, tags={ROUTE_TAG: "staged"}) for key in staged]
    todo += [summary_run_request(item, {EXPLICIT_TAG: "cli"} if named else None) for item in selection.batch]
    # A staged replay calls no model.
    estimates = [0.0] * len(staged) + [i.model_seconds_estimate for i in selection.batch]
    outcomes = _run_partitions(
        settings, instance, store, "summarize_sessions", todo, "session_summaries", output, estimates, nothing_to_do
    )
    return {
        "pending": selection.pending,
        "skipped": selection.skip_reason,
        "interrupted_runs_closed": recovered,
        "staged_replayed": staged,
        "summarized": sum(o["success"] and "nothing_to_do" not in o for o in outcomes),
        "upgrades": selection.upgrades,  # runs planned as upgrades: degraded summaries made again at a higher step
        "nothing_to_do": sum("nothing_to_do" in o for o in outcomes),
        "runs": outcomes,
    }


def digest(settings: Settings, limit: int | None, output: Output) -> dict:
    """The digest sensor's selection, run now: one `digest_sessions` run per session. A run that
    succeeds without a graph left its session part-done (its budget ran out) or gated."""
    from dagster import RunRequest

    store = _store(settings)
    policy = settings.graph
    keys = store.graph.pending_digest_keys(policy.fresh_reserve, limit or policy.batch_sessions)
    todo = [RunRequest(partition_key=k, tags={ROUTE_TAG: "graph"}) for k in keys]
    # The plan estimates summaries only: a graph run's bar counts sessions, with no time left.
    estimates = [None] * len(keys)
    runs = _run_partitions(settings, _instance(), store, "digest_sessions", todo, "session_graph", output, estimates)
    return {
        "digested": sum("nodes" in r for r in runs),  # graphs written (a run may stop part-done)
        "nothing_to_do": sum("nothing_to_do" in r for r in runs),
        "runs": runs,
    }


def friction_report(settings: Settings) -> dict:
    result = _execute(settings, _instance(), _job(settings, "report_friction"))
    events = result.asset_materializations_for_node("friction_report")
    if not result.success or not events:
        raise SystemExit(f"the friction report failed (run {result.run_id}); see `session-digest ui`")
    # The numbers and the report file; the Markdown copy is for the UI.
    return {"run_id": result.run_id, **{k: v.value for k, v in events[0].metadata.items() if k != "report"}}


def archive(settings: Settings, sessions: list[str], retire: bool, out: str | None) -> dict:
    """A bundle of these sessions (ids or partition keys; none: the whole store), recorded in
    `archives`; `retire` then takes them out of every sweep."""
    store = _store(settings)
    try:
        ids = store.sessions.resolve_sessions(sessions) if sessions else None
    except ValueError as exc:
        raise SystemExit(f"session-digest: {exc}") from None
    return store.archive.write_archive(Path(out) if out else settings.home / "archives", ids, retire)


def after_restore_commit() -> None:
    """A hook, called once a restore's DuckDB transaction has committed and before Dagster is brought
    in line: the point a kill leaves the two apart (the crash tests kill the process here)."""


def restore(settings: Settings, bundle_path: str, mode: str) -> dict:
    """Validate the whole bundle, restore it in one transaction, then bring Dagster in line: the
    partitions of the restored sessions exist, those of sessions the restore removed are gone, and
    restored summaries are recorded as materialized. Sessions whose turns differ from what was
    summarized are pending: the summary sensor (or `sweep`) reruns them."""
    from digest.archive import BundleError, validate_bundle
    from digest.turns import partition_key
    from pipelines.interrupted_runs import record_summaries
    from pipelines.sensors import reconcile_partitions

    store = _store(settings)
    try:
        bundle = validate_bundle(bundle_path)
        result = store.archive.restore_archive(bundle, mode)
    except BundleError as exc:
        raise SystemExit(f"session-digest: {exc}") from None
    after_restore_commit()
    outcome = result["outcome"]
    instance = _instance()
    # Both ways, against the store: the partitions of a restore killed here converge on the next
    # command (this one rerun, a sweep, an ingest) or the summary sensor's next tick.
    added, removed = reconcile_partitions(instance, store)
    recorded = record_summaries(
        instance,
        store.summaries.summaries_where("session_id", outcome.summaries_restored),
        f"restored from {bundle.path}",
    )
    return {
        "bundle": str(bundle.path),
        "archive_id": bundle.archive_id,
        "mode": mode,
        "rows": result["rows"],
        "pending": [partition_key(s) for s in outcome.pending],
        "summaries_restored": recorded,
        "unchanged": len(outcome.unchanged),
        "still_retired": outcome.retired,
        "partitions": {"added": added, "removed": removed},
    }


def clear_cache(settings: Settings) -> dict:
    return {"cleared": _store(settings).cache.clear_response_cache()}


def plan(settings: Settings, limit: int | None) -> dict:
    """What the next sweep would do, without calling a model."""
    selection = _selection(settings, limit, probe=False)
    routes: dict[str, int] = {}
    hosts: dict[str, int] = {}
    for item in selection.batch:
        routes[item.tier] = routes.get(item.tier, 0) + 1
        hosts[item.host] = hosts.get(item.host, 0) + 1
    return {
        "pending": selection.pending,
        "held_back": {"active_within_idle_window": selection.active, "in_failure_backoff": selection.backing_off},
        # Each host's speed: measured from its attempt ledger, or the CPU-class default before any call.
        "seconds_per_token": {
            host: f"{spt:.4f} ({'measured' if selection.throughput_measured[host] else 'default, no calls yet'})"
            for host, spt in selection.seconds_per_token.items()
        },
        "hosts_out_of_rotation": selection.hosts_unavailable,
        "waiting_for_a_host_out_of_rotation": selection.waiting_for_host,
        "next_sweep": {
            "sessions": len(selection.batch),
            # Current degraded summaries made again, their mini-summary coverage having crossed a step.
            "upgrades": selection.upgrades,
            "by_route": routes,
            "by_host": hosts,
            "estimated_prompt_tokens": sum(i.prompt_tokens_estimate for i in selection.batch),
            "estimated_model_seconds": round(sum(i.model_seconds_estimate for i in selection.batch), 1),
            "sessions_detail": [
                {
                    "partition": i.candidate.partition_key,
                    "host": i.host,
                    "host_reason": i.reason,
                    "tier": i.tier,
                    "route": i.route,
                    "prompt_tokens_estimate": i.prompt_tokens_estimate,
                    "model_seconds_estimate": round(i.model_seconds_estimate, 1),
                }
                for i in selection.batch
            ],
        },
        "skipped": selection.skip_reason,
    }


def unarchive_turns(settings: Settings, session: str | None, turn_ids: list[str]) -> dict:
    """Archived turns (no content, attempts exhausted, or archived in the export) get mini summary
    attempts again. `session` is a session id or its partition key."""
    store = _store(settings)
    session_id = None
    if session:
        row = store.sessions.session_by_partition(session)
        session_id = row["session_id"] if row else session
    ids = store.mini_summaries.unarchive_turns(turn_ids=turn_ids, session_id=session_id)
    return {"unarchived": len(ids), "turn_ids": ids}


def export_graph(settings: Settings, path: str) -> dict:
    """The graph as the original's `graph-backup` JSONL (every node line, then every edge line),
    loadable into Neo.mjs. PATH is a file, or a folder to write `graph-backup-<timestamp>.jsonl` in."""
    from datetime import datetime

    from digest.graph import write_graph_backup

    store = _store(settings)
    target = Path(path)
    if target.is_dir():
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z").replace(":", "-")
        target = target / f"graph-backup-{stamp}.jsonl"
    partial = target.with_name(target.name + ".partial")  # a reader never sees half a file
    with partial.open("w", encoding="utf-8") as out:
        nodes, edges = write_graph_backup(
            store.graph.graph_pages("graph_nodes"), store.graph.graph_pages("graph_edges"), out
        )
    partial.replace(target)
    return {"path": str(target.resolve()), "nodes": nodes, "edges": edges}


def reset_digest(settings: Settings, session: str) -> dict:
    """An undigestible session (id or partition key) back in the digest cadence, attempts restored."""
    store = _store(settings)
    row = store.sessions.session_by_partition(session)
    session_id = row["session_id"] if row else session
    previous = store.graph.reset_digest(session_id)
    if previous is None:
        current = store.graph.digest_state(session_id)
        return {
            "session_id": session_id,
            "reset": False,
            "digest_state": current.digest_state if current else None,
            "note": "only an undigestible session is reset",
        }
    return {
        "session_id": session_id,
        "reset": True,
        "was": {
            "digest_state": previous.digest_state,
            "attempts": previous.attempts,
            "defer_reason": previous.defer_reason,
        },
        "digest_state": "undigested",
    }


def status(settings: Settings) -> dict:
    store = _reading_store(settings)
    result = store.reports.status()
    # Each host's recent calls against its earlier ones: slow is shown, not taken out of rotation.
    slowdowns = store.speed.host_slowdowns([(h.name, h.model) for h in settings.fleet.hosts])
    result["host_speed"] = {host: slowdown_status(slow) for host, slow in slowdowns.items()}
    return result


def instance_config() -> dict:
    """The dagster.yaml this start wrote (or found: the user's own), as Dagster will read it."""
    from pipelines.instance import describe

    return describe(Path(os.environ["DAGSTER_HOME"]))


def ui(settings: Settings, port: int) -> None:
    command = ["dagster", "dev", "-m", "pipelines.definitions", "-h", "127.0.0.1", "-p", str(port)]
    print(f"Dagster UI on http://127.0.0.1:{port} (DAGSTER_HOME={os.environ['DAGSTER_HOME']})", file=sys.stderr)
    raise SystemExit(subprocess.call([str(Path(sys.executable).parent / command[0]), *command[1:]], cwd=REPO_ROOT))


def fill_degraded_mini_summaries(settings: Settings, output: Output) -> list[dict]:
    """What `mini_summary_sensor` launches in turn, run now for the sessions headed for the degraded
    path (their mini summaries reach their summary; no backoff is ignored): one run each."""
    from dagster import RunRequest

    store = _store(settings)
    keys = store.mini_summaries.pending_degraded_mini_summary_keys(settings.fleet.measured_limits(store), now_ms())
    todo = [RunRequest(partition_key=key) for key in keys]
    return _run_partitions(
        settings, _instance(), store, "fill_mini_summaries", todo, "turn_mini_summaries", output, [None] * len(keys)
    )


def drain(settings: Settings, output: Output) -> tuple[list[dict], list[dict]]:
    """The backlog's runs now, in the sensors' order, until nothing is left: every session's first
    summary, then the degraded ones' missing mini summaries, then their upgrades (`demo`, the bench)."""
    runs, mini_summary_runs = [], []
    while True:
        while batch := sweep(settings, None, output)["runs"]:  # one budgeted sweep after another
            runs.extend(batch)
        filled = fill_degraded_mini_summaries(settings, output)
        mini_summary_runs.extend(filled)
        if not any(run.get("mini_summaries") for run in filled):  # none left, or no progress: done
            return runs, mini_summary_runs


def demo(settings: Settings, output: Output) -> dict:
    started = time.monotonic()
    output.note(f"Ingesting the samples in {SAMPLES}; Dagster's run logs go to {log_path(settings)}.")
    ingested = ingest(settings, [str(SAMPLES)])
    runs, mini_summary_runs = drain(settings, output)
    friction = friction_report(settings)
    report = {
        "ingest": ingested,
        "summary_runs": runs,
        "mini_summary_runs": mini_summary_runs,
        "status": status(settings),
        "seconds": round(time.monotonic() - started, 1),
        # Per tier the best summary that is not junk, with its fidelity, the imported ones beside as the
        # reference; then every junk one, named as such.
        "fidelity_examples": _store(settings).reports.fidelity_examples(),
        "junk": _store(settings).reports.junk_summaries(),
    }
    query = "SELECT session_id, source_tier, degraded, route_reason, title FROM session_summaries"
    report["where_to_look"] = {
        "database": str(settings.db_path),
        "query": f".venv/bin/python -c \"import duckdb; duckdb.connect('{settings.db_path}', read_only=True).sql('{query}').show()\"",
        "friction_report": friction["report_path"],
        "ui": ".venv/bin/session-digest ui, then http://127.0.0.1:3000: Runs; Assets > session_summaries",
        "next": "session-digest digest (the session graph), session-digest plan, session-digest archive",
    }
    return report


def _run_command(args, settings: Settings, parser: argparse.ArgumentParser, output: Output) -> dict | None:
    if args.command == "ingest":
        return ingest(settings, args.paths)
    if args.command == "sweep":
        return sweep(settings, args.limit, output, args.session)
    if args.command == "digest":
        return digest(settings, args.limit, output)
    if args.command == "friction-report":
        return friction_report(settings)
    if args.command == "plan":
        return plan(settings, args.limit)
    if args.command == "unarchive-turns":
        if not args.session and not args.turn_ids:
            parser.error("unarchive-turns needs --session ID or TURN_ID...")
        return unarchive_turns(settings, args.session, args.turn_ids)
    if args.command == "status":
        return status(settings)
    if args.command == "instance-config":
        return instance_config()
    if args.command == "ui":
        return ui(settings, args.port)
    if args.command == "archive":
        if args.retire and not args.sessions:
            parser.error("archive --retire needs --sessions: the sessions to retire")
        return archive(settings, args.sessions, args.retire, args.out)
    if args.command == "restore":
        return restore(settings, args.bundle, args.mode)
    if args.command == "cache":
        return clear_cache(settings)
    if args.command == "export-graph":
        return export_graph(settings, args.path)
    if args.command == "reset-digest":
        return reset_digest(settings, args.session)
    return demo(settings, output)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="session-digest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_ingest = sub.add_parser("ingest", help="ingest export bundles (files or folders of *.jsonl)")
    p_ingest.add_argument("paths", nargs="+")
    p_sweep = sub.add_parser("sweep", help="summarize the next budgeted batch now, one Dagster run each")
    p_sweep.add_argument("--limit", type=int, default=None, help="at most this many sessions")
    p_sweep.add_argument(
        "--session", action="extend", nargs="+", default=[], metavar="ID",
        help="these sessions alone (ids or partition keys; repeatable), in their failure backoff too",
    )  # fmt: skip
    p_plan = sub.add_parser("plan", help="what the next sweep would do, without calling a model")
    p_plan.add_argument("--limit", type=int, default=None, help="at most this many sessions")
    sub.add_parser("status", help="counts of the store")
    sub.add_parser("instance-config", help="write $DAGSTER_HOME/dagster.yaml from the settings, and show it")
    p_unarchive = sub.add_parser("unarchive-turns", help="let archived turns get mini summary attempts again")
    p_unarchive.add_argument("--session", help="every archived turn of this session (id or partition key)")
    p_unarchive.add_argument("turn_ids", nargs="*", metavar="TURN_ID")
    p_ui = sub.add_parser("ui", help="start the Dagster UI on loopback over the same instance")
    p_ui.add_argument("--port", type=int, default=3000)
    sub.add_parser("demo", help="ingest the bundled samples, summarize them, print where to look")
    p_digest = sub.add_parser("digest", help="digest the next batch of summarized sessions into the graph")
    p_digest.add_argument("--limit", type=int, default=None, help="at most this many sessions")
    sub.add_parser("friction-report", help="refresh the friction report now")
    p_archive = sub.add_parser("archive", help="write a bundle of the store (or of some sessions) with a manifest")
    p_archive.add_argument("--sessions", nargs="+", default=[], metavar="ID", help="session ids or partition keys")
    p_archive.add_argument("--retire", action="store_true", help="then take these sessions out of every sweep")
    p_archive.add_argument("--out", help="the folder to write the bundle in (default: $DIGEST_HOME/archives)")
    p_restore = sub.add_parser("restore", help="validate a bundle, then restore it in one transaction")
    p_restore.add_argument("bundle")
    p_restore.add_argument("--mode", choices=["merge", "replace"], default="merge")
    p_cache = sub.add_parser("cache", help="the response cache of model replies")
    p_cache.add_argument("action", choices=["clear"])
    p_export = sub.add_parser("export-graph", help="write the graph as graph-backup JSONL, loadable into Neo.mjs")
    p_export.add_argument("path", help="a file, or a folder to write graph-backup-<timestamp>.jsonl in")
    p_reset = sub.add_parser("reset-digest", help="put an undigestible session back in the digest cadence")
    p_reset.add_argument("session", metavar="SESSION_ID", help="session id or partition key")
    for name, command in sub.choices.items():
        if name != "ui":
            command.add_argument("--json", action="store_true", help="print the result as JSON, for scripts")
    args = parser.parse_args(argv)

    try:
        settings = load_settings()
    except SettingsError as exc:
        raise SystemExit(f"session-digest: {exc}") from None
    try:
        _prepare_home(settings)
        output = Output(as_json=getattr(args, "json", False))
        result = _run_command(args, settings, parser, output)
    except (SystemExit, KeyboardInterrupt):
        raise
    except Exception as exc:
        # A full or read-only DIGEST_HOME: nothing is lost, one line says which file and why.
        failure = _write_failure(exc, settings)
        if failure is not None:
            raise SystemExit(
                f"session-digest: {failure}; nothing was lost: free some space (or make it writable) and run "
                "the command again"
            ) from None
        if isinstance(exc, StoreUnreadable):
            raise SystemExit(f"session-digest: {exc}") from None
        raise
    if result is not None:
        output.result(args.command, result)


if __name__ == "__main__":
    main()
