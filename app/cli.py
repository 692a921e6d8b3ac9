"""`session-digest`: the front door. Every command that does work does it as a Dagster run in the
instance under DAGSTER_HOME, so `session-digest ui` (or `dagster dev`) shows it afterwards."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import io
import os
import subprocess
import sys
import time
from pathlib import Path

from app import search_cli, store_commands
from app.command import Command, UsageError
from app.console import Output
from digest.settings import Settings, SettingsError, load_settings

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "samples" / "bundle"
# The sessions whose account the demo's closing lines show (newest first).
DEMO_ACCOUNTS = 20
# Allocations between two passes of the garbage collector over the youngest objects (Python's
# default: 700). A command imports some 2,000 modules as it goes (Dagster's, SQLAlchemy's, pandas'),
# and at the default the collector's passes, full ones over every object the imports had made among
# them, were much of a short command's CPU (BENCHMARKS §42). What a command leaves in cycles is little,
# and waits a few more allocations to be collected.
GC_YOUNG_ALLOCATIONS = 10_000


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


def plan(settings: Settings, limit: int | None, project: str | None = None) -> dict:
    """What the next sweep would do, without calling a model; `project`: its part for that project's
    sessions (`digest.projects.project_matches`)."""
    from app.runs import sweep_selection
    from pipelines.selection import batch_price
    from resources.store import open_store

    store = open_store(settings.db_path)
    with store.file.held():  # the selection's reads on one connection: no model call, no probe taken
        selection = sweep_selection(settings, limit, probe=False, store=store)
        batch, narrowed = selection.batch, {}
        if project is not None:
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


def status(settings: Settings, project: str | None = None) -> dict:
    from digest.pacing import slowdown_status
    from resources.store import open_store

    store = open_store(settings.db_path, read_only=True)
    with store.file.held():  # every count on one connection: an open costs more than a count
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


def backlog(settings: Settings) -> dict:
    """The backlog as the `backlog` asset records it, now: summaries pending, their drain and ETA, and
    the search index's chunks still waiting for a vector. Only reads."""
    from assets.work.backlog import measure
    from digest.backlog import backlog_metadata
    from digest.scheduling import now_ms
    from resources.store import open_store

    store = open_store(settings.db_path, read_only=True)
    measured = measure(store, settings.fleet, settings.circuit, settings.sweep, now_ms(), settings.vector_model)
    return backlog_metadata(measured)


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
    from app.runs import friction_report, ingest, log_path
    from resources.store import open_store

    started = time.monotonic()
    output.note(f"Ingesting the samples in {SAMPLES}; Dagster's run logs go to {log_path(settings)}.")
    ingested = ingest(settings, [str(SAMPLES)])
    drained = drain(settings, output)
    friction = friction_report(settings)
    store = open_store(settings.db_path)
    report = {
        "ingest": ingested,
        "summary_runs": drained["summary_runs"],
        "mini_summary_runs": drained["mini_summary_runs"],
        "status": status(settings),
        "seconds": round(time.monotonic() - started, 1),
        # Per tier the best summary that is not junk, with its fidelity, the imported ones beside as the
        # reference; then every session's account (its ok summary, else its card: never a junk summary).
        "fidelity_examples": store.reports.fidelity_examples(),
        "junk": len(store.reports.junk_summaries()),
        "accounts": store.cards.account_page(DEMO_ACCOUNTS)[1],
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
    command.add_argument("--tier", help="of this source tier: raw, miniSummary, turnCards, truncatedRaw")
    command.add_argument("--verdict", help=f"with this verdict (ok, echo, template, ...), or {ANY_JUNK}: any but ok")
    command.add_argument("--fidelity-below", type=float, metavar="F", help="with a fidelity under F")
    command.add_argument(
        "--origin", choices=ORIGINS, help="of this origin (default: generated; imported ones are the export's word)"
    )


def resummary_criteria(args):
    """The criteria the command line gives, or None without `--resummarize`."""
    from digest.resummary import ResummaryCriteria

    criteria = ResummaryCriteria.of(vars(args))
    if not args.resummarize:
        if criteria.given:
            raise UsageError(f"{', '.join(criteria.given)}: filters of --resummarize")
        return None
    if not criteria.given:
        raise UsageError(
            "--resummarize needs at least one filter: --model, --host, --code-version, --tier, --verdict, "
            "--fidelity-below, --origin"
        )
    return criteria


def resummarize(settings: Settings, criteria, record: bool) -> dict:
    """`plan --resummarize` (`record` off): the selected summaries priced; `sweep --resummarize`:
    their requests recorded, for this sweep and the sensor's ticks to take after new work."""
    from digest.scheduling import now_ms
    from pipelines.resummary import plan_resummaries, record_resummaries
    from resources.model_hosts import hosts_in_rotation
    from resources.store import open_store

    store = open_store(settings.db_path)
    if record:
        return record_resummaries(store, criteria)
    available, _ = hosts_in_rotation(store, settings.fleet, settings.circuit, now_ms())
    return plan_resummaries(store, settings.fleet, criteria, available)


# --- the commands: what each parses and runs -----------------------------------------------------------


def ingest_command(args, settings: Settings, output: Output) -> dict:
    from app.runs import ingest

    return ingest(settings, args.paths)


def sweep_arguments(command: argparse.ArgumentParser) -> None:
    limit_argument(command)
    command.add_argument(
        "--session", action="extend", nargs="+", default=[], metavar="ID",
        help="these sessions alone (ids or partition keys; repeatable), in their failure backoff too",
    )  # fmt: skip
    command.add_argument(
        "--drain", action="store_true",
        help="what the sensors would do, now: first summaries, the mini-summary backfill, upgrades, re-summaries "
        "(--limit runs and DIGEST_SWEEP_MODEL_SECONDS of model time in all)",
    )  # fmt: skip
    resummary_filters(command)


def sweep_command(args, settings: Settings, output: Output) -> dict:
    """`sweep`, or `sweep --drain` within one budget for the whole drain (`app.drain`); with
    `--resummarize`, its requests recorded first."""
    from app.drain import drain
    from app.runs import sweep

    if args.drain and args.session:
        raise UsageError("--drain takes the whole backlog: it takes no --session")
    requested = {}
    if criteria := resummary_criteria(args):
        requested = {"resummary_requests": resummarize(settings, criteria, record=True)}
    if args.drain:
        return {**requested, **drain(settings, output, args.limit, settings.sweep.model_seconds)}
    return {**requested, **sweep(settings, args.limit, output, args.session)}


def plan_arguments(command: argparse.ArgumentParser) -> None:
    limit_argument(command)
    resummary_filters(command)
    project_argument(command)


def plan_command(args, settings: Settings, output: Output) -> dict:
    if criteria := resummary_criteria(args):
        return resummarize(settings, criteria, record=False)
    return plan(settings, args.limit, args.project)


def project_argument(command: argparse.ArgumentParser) -> None:
    command.add_argument("--project", help="that project's sessions alone: its whole path or last component(s)")


def limit_argument(command: argparse.ArgumentParser) -> None:
    command.add_argument("--limit", type=int, default=None, help="at most this many sessions")


def digest_command(args, settings: Settings, output: Output) -> dict:
    from app.runs import digest

    return digest(settings, args.limit, output)


def friction_report_command(args, settings: Settings, output: Output) -> dict:
    from app.runs import friction_report

    return friction_report(settings)


def ingest_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("paths", nargs="*", metavar="PATH")


COMMANDS = (
    Command(
        "ingest",
        "ingest agent logs and export bundles: files, or folders walked; none: DIGEST_WATCH or the harness homes",
        ingest_command,
        ingest_arguments,
    ),
    Command(
        "sweep",
        "summarize the next budgeted batch now, one Dagster run each",
        sweep_command,
        sweep_arguments,
        stoppable=True,
    ),
    Command("plan", "what the next sweep would do, without calling a model", plan_command, plan_arguments),
    Command(
        "status", "counts of the store", lambda args, settings, output: status(settings, args.project), project_argument
    ),
    Command(
        "backlog",
        "what waits for a model: summaries (their drain and ETA) and search vectors",
        lambda args, settings, output: backlog(settings),
    ),
    Command(
        "instance-config",
        "write $DAGSTER_HOME/dagster.yaml from the settings, and show it",
        lambda args, settings, output: instance_config(),
    ),
    Command(
        "ui",
        "start the Dagster UI on loopback over the same instance",
        lambda args, settings, output: ui(settings, args.port),
        lambda command: command.add_argument("--port", type=int, default=3000),
        takes_json=False,
    ),
    Command(
        "demo",
        "ingest the bundled samples, summarize them, print where to look",
        lambda args, settings, output: demo(settings, output),
        stoppable=True,
    ),
    Command(
        "digest",
        "digest the next batch of summarized sessions into the graph",
        digest_command,
        limit_argument,
        stoppable=True,
    ),
    Command("friction-report", "refresh the friction report now", friction_report_command),
    *store_commands.COMMANDS,
    *search_cli.COMMANDS,
)


def main(argv: list[str] | None = None) -> None:
    gc.set_threshold(GC_YOUNG_ALLOCATIONS)
    # At the interpreter's exit the collector walked every object again, to free what the process's
    # end frees anyway (BENCHMARKS §42): what is alive then is frozen instead. Objects are still freed
    # as their modules go; files, logs and the store are closed before (or by their own `atexit`
    # handlers).
    atexit.unregister(gc.freeze)  # once however often `main` runs in one process (tests)
    atexit.register(gc.freeze)
    parser = argparse.ArgumentParser(prog="session-digest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        arguments = sub.add_parser(command.name, help=command.help)
        command.arguments(arguments)
        if command.takes_json:
            arguments.add_argument("--json", action="store_true", help="print the result as JSON, for scripts")
    args = parser.parse_args(argv)
    command = next(c for c in COMMANDS if c.name == args.command)

    try:
        settings = load_settings()
    except SettingsError as exc:
        raise SystemExit(f"session-digest: {exc}") from None
    try:
        if not command.light:
            _prepare_home(settings)
        output = Output(as_json=getattr(args, "json", False))
        if command.stoppable:
            from app.stopping import exit_code, stop_on_signals

            # A sweep told to stop interrupts its run in hand and launches nothing more.
            with stop_on_signals():
                result = command.run(args, settings, output)
                stopped = exit_code()
        else:
            result, stopped = command.run(args, settings, output), 0
    except UsageError as exc:
        parser.error(str(exc))
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
