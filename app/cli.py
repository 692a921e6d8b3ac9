"""`session-digest`: the front door. Every command that does work does it as a Dagster run in the
instance under DAGSTER_HOME, so `session-digest ui` (or `dagster dev`) shows it afterwards."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path

from app import search_cli
from app.console import Output
from digest.settings import Settings, SettingsError, load_settings

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "samples" / "bundle"
# The sessions whose account the demo's closing lines show (newest first).
DEMO_ACCOUNTS = 20
# The commands that launch model runs one after another: a signal stops them between runs.
STOPPABLE = ("sweep", "digest", "demo")
# The commands that start no Dagster run: no instance to prepare, and only what they need imported.
LIGHT = ("search", "mcp")


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
    from pipelines.instance import write_instance_config

    os.environ.setdefault("DAGSTER_HOME", str(settings.dagster_home))
    home = Path(os.environ["DAGSTER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    warning = write_instance_config(home, settings)
    if warning:
        print(warning, file=sys.stderr)
    _telemetry_notice(home)
    settings.inbox.mkdir(parents=True, exist_ok=True)


def _reading_store(settings: Settings):
    """The store for a command that only reads (`status`): no migration, read-only connections, so
    a full or read-only disk does not stop it. A store missing, or of an older schema, is migrated."""
    from app.runs import _store
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


def archive(settings: Settings, sessions: list[str], retire: bool, out: str | None) -> dict:
    """A bundle of these sessions (ids or partition keys; none: the whole store), recorded in
    `archives`; `retire` then takes them out of every sweep."""
    from app.runs import _store

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
    from app.runs import _instance, _store
    from digest.archive_read import BundleError, validate_bundle
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
        store,
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
    from app.runs import _store

    return {"cleared": _store(settings).cache.clear_response_cache()}


def plan(settings: Settings, limit: int | None, project: str | None = None) -> dict:
    """What the next sweep would do, without calling a model; `project`: its part for that project's
    sessions (`digest.projects.project_matches`)."""
    from app.runs import _selection
    from pipelines.selection import batch_price

    selection = _selection(settings, limit, probe=False)
    batch, narrowed = selection.batch, {}
    if project is not None:
        store = _reading_store(settings)
        keys = store.projects.partition_keys(project)
        batch = [item for item in batch if item.candidate.partition_key in keys]
        narrowed = {"project": project, "pending_in_project": store.projects.pending_summaries(project)}
    price = batch_price(batch)
    return {
        **narrowed,
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
            "sessions": price.pop("sessions"),
            # Current degraded summaries made again, their mini-summary coverage having crossed a step.
            "upgrades": selection.upgrades,
            "resummaries": selection.resummaries,  # re-summaries asked for (`sweep --resummarize`)
            **price,
        },
        "skipped": selection.skip_reason,
    }


def unarchive_turns(settings: Settings, session: str | None, turn_ids: list[str]) -> dict:
    """Archived turns (no content, attempts exhausted, or archived in the export) get mini summary
    attempts again. `session` is a session id or its partition key."""
    from app.runs import _store

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

    from app.runs import _store
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
    from app.runs import _store

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


def status(settings: Settings, project: str | None = None) -> dict:
    from digest.pacing import slowdown_status

    store = _reading_store(settings)
    if project is not None:  # that project's sessions alone
        return store.projects.status(project)
    result = store.reports.status()
    # Secrets replaced at ingest, by kind (`digest.redact`), and the sessions each project has.
    result["redactions"] = store.projects.redactions()
    result["sessions_by_project"] = store.projects.sessions_by_project()
    # Each host's recent calls against its earlier ones: slow is shown, not taken out of rotation.
    slowdowns = store.speed.host_slowdowns([(h.name, h.model) for h in settings.fleet.hosts])
    result["host_speed"] = {host: slowdown_status(slow) for host, slow in slowdowns.items()}
    # Re-summaries asked for (`sweep --resummarize`): requested, done (replaced or previous kept), waiting.
    result["resummary_queue"] = store.resummaries.queue_counts()
    return result


def instance_config() -> dict:
    """The dagster.yaml this start wrote (or found: the user's own), as Dagster will read it."""
    from pipelines.instance import describe

    return describe(Path(os.environ["DAGSTER_HOME"]))


def ui(settings: Settings, port: int) -> None:
    command = ["dagster", "dev", "-m", "pipelines.definitions", "-h", "127.0.0.1", "-p", str(port)]
    print(f"Dagster UI on http://127.0.0.1:{port} (DAGSTER_HOME={os.environ['DAGSTER_HOME']})", file=sys.stderr)
    raise SystemExit(subprocess.call([str(Path(sys.executable).parent / command[0]), *command[1:]], cwd=REPO_ROOT))


def demo(settings: Settings, output: Output) -> dict:
    from app.drain import drain
    from app.runs import _store, friction_report, ingest, log_path

    started = time.monotonic()
    output.note(f"Ingesting the samples in {SAMPLES}; Dagster's run logs go to {log_path(settings)}.")
    ingested = ingest(settings, [str(SAMPLES)])
    drained = drain(settings, output)
    friction = friction_report(settings)
    report = {
        "ingest": ingested,
        "summary_runs": drained["summary_runs"],
        "mini_summary_runs": drained["mini_summary_runs"],
        "status": status(settings),
        "seconds": round(time.monotonic() - started, 1),
        # Per tier the best summary that is not junk, with its fidelity, the imported ones beside as the
        # reference; then every session's account (its ok summary, else its card: never a junk summary).
        "fidelity_examples": _store(settings).reports.fidelity_examples(),
        "junk": len(_store(settings).reports.junk_summaries()),
        "accounts": _store(settings).cards.account_page(DEMO_ACCOUNTS)[1],
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


def resummary_filters(command: argparse.ArgumentParser) -> None:
    """`--resummarize` and its filters (`plan`, `sweep`): the criteria of `digest.resummary`."""
    from digest.resummary import ANY_JUNK, NOT_CURRENT, ORIGINS

    command.add_argument(
        "--resummarize", action="store_true",
        help="current summaries to make again (after a model or prompt change), selected by the filters below",
    )  # fmt: skip
    command.add_argument("--model", help="made by this model")
    command.add_argument("--host", help="made on this model host")
    command.add_argument(
        "--code-version", nargs="?", const=NOT_CURRENT, metavar="V",
        help="made under summary code version V; without V: any but the current one (unrecorded included)",
    )  # fmt: skip
    command.add_argument("--tier", help="of this source tier: raw, miniSummary, truncatedRaw")
    command.add_argument("--verdict", help=f"with this verdict (ok, echo, template, ...), or {ANY_JUNK}: any but ok")
    command.add_argument("--fidelity-below", type=float, metavar="F", help="with a fidelity under F")
    command.add_argument(
        "--origin", choices=ORIGINS, help="of this origin (default: generated; imported ones are the export's word)"
    )


def _resummary_criteria(args, parser: argparse.ArgumentParser):
    """The criteria the command line gives, or None without `--resummarize`."""
    from digest.resummary import ResummaryCriteria

    criteria = ResummaryCriteria.of(vars(args))
    if not args.resummarize:
        if criteria.given:
            parser.error(f"{', '.join(criteria.given)}: filters of --resummarize")
        return None
    if not criteria.given:
        parser.error(
            "--resummarize needs at least one filter: --model, --host, --code-version, --tier, --verdict, "
            "--fidelity-below, --origin"
        )
    return criteria


def resummarize(settings: Settings, criteria, record: bool) -> dict:
    """`plan --resummarize` (`record` off): the selected summaries priced; `sweep --resummarize`:
    their requests recorded, for this sweep and the sensor's ticks to take after new work."""
    from app.runs import _store
    from digest.scheduling import now_ms
    from pipelines.resummary import plan_resummaries, record_resummaries
    from resources.host_views import hosts_in_rotation

    store = _store(settings)
    if record:
        return record_resummaries(store, criteria)
    available, _ = hosts_in_rotation(store, settings.fleet, settings.circuit, now_ms())
    return plan_resummaries(store, settings.fleet, criteria, available)


def _sweep_command(args, settings: Settings, output: Output) -> dict:
    """`sweep`, or `sweep --drain` within one budget for the whole drain (`app.drain`)."""
    from app.drain import drain
    from app.runs import sweep

    if args.drain:
        return drain(settings, output, args.limit, settings.sweep.model_seconds)
    return sweep(settings, args.limit, output, args.session)


def _run_command(args, settings: Settings, parser: argparse.ArgumentParser, output: Output) -> dict | None:
    from app.runs import digest, friction_report, ingest

    if args.command in search_cli.COMMANDS:
        return search_cli.run(args, settings, output)
    if args.command == "ingest":
        return ingest(settings, args.paths)
    if args.command == "sweep" and args.drain and args.session:
        parser.error("--drain takes the whole backlog: it takes no --session")
    if args.command in ("plan", "sweep") and (criteria := _resummary_criteria(args, parser)):
        requested = resummarize(settings, criteria, record=args.command == "sweep")
        if args.command == "plan":
            return requested
        return {"resummary_requests": requested, **_sweep_command(args, settings, output)}
    if args.command == "sweep":
        return _sweep_command(args, settings, output)
    if args.command == "digest":
        return digest(settings, args.limit, output)
    if args.command == "friction-report":
        return friction_report(settings)
    if args.command == "plan":
        return plan(settings, args.limit, args.project)
    if args.command == "unarchive-turns":
        if not args.session and not args.turn_ids:
            parser.error("unarchive-turns needs --session ID or TURN_ID...")
        return unarchive_turns(settings, args.session, args.turn_ids)
    if args.command == "status":
        return status(settings, args.project)
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
    p_ingest = sub.add_parser(
        "ingest",
        help="ingest agent logs and export bundles: files, or folders walked; none: DIGEST_WATCH or the harness homes",
    )
    p_ingest.add_argument("paths", nargs="*", metavar="PATH")
    p_sweep = sub.add_parser("sweep", help="summarize the next budgeted batch now, one Dagster run each")
    p_sweep.add_argument("--limit", type=int, default=None, help="at most this many sessions")
    p_sweep.add_argument(
        "--session", action="extend", nargs="+", default=[], metavar="ID",
        help="these sessions alone (ids or partition keys; repeatable), in their failure backoff too",
    )  # fmt: skip
    p_sweep.add_argument(
        "--drain", action="store_true",
        help="what the sensors would do, now: first summaries, the mini-summary backfill, upgrades, re-summaries "
        "(--limit runs and DIGEST_SWEEP_MODEL_SECONDS of model time in all)",
    )  # fmt: skip
    p_plan = sub.add_parser("plan", help="what the next sweep would do, without calling a model")
    p_plan.add_argument("--limit", type=int, default=None, help="at most this many sessions")
    for command in (p_sweep, p_plan):
        resummary_filters(command)
    p_status = sub.add_parser("status", help="counts of the store")
    for command in (p_plan, p_status):
        command.add_argument("--project", help="that project's sessions alone: its whole path or last component(s)")
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
    search_cli.add_commands(sub)
    for name, command in sub.choices.items():
        if name not in ("ui", "mcp"):
            command.add_argument("--json", action="store_true", help="print the result as JSON, for scripts")
    args = parser.parse_args(argv)

    try:
        settings = load_settings()
    except SettingsError as exc:
        raise SystemExit(f"session-digest: {exc}") from None
    try:
        if args.command not in LIGHT:
            _prepare_home(settings)
        output = Output(as_json=getattr(args, "json", False))
        if args.command in STOPPABLE:
            from app.stopping import exit_code, stop_on_signals

            # A sweep told to stop interrupts its run in hand and launches nothing more.
            with stop_on_signals():
                result = _run_command(args, settings, parser, output)
                stopped = exit_code()
        else:
            result, stopped = _run_command(args, settings, parser, output), 0
    except (SystemExit, KeyboardInterrupt):
        raise
    except Exception as exc:
        from resources.store import StoreUnreadable

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
    if stopped:
        raise SystemExit(stopped)
    # A run that raised on its session's data is the sweep's own failure, not a model's (each run's line said why).
    if args.command == "sweep" and result.get("run_errors"):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
