"""`session-digest`: the front door. Every command that does work does it as a Dagster run in the
instance under DAGSTER_HOME, so `session-digest ui` (or `dagster dev`) shows it afterwards."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from digest.settings import Settings, SettingsError, load_settings

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "samples" / "bundle"


# One model call at a time on a CPU host; `dagster instance concurrency set model N` raises it.
INSTANCE_CONFIG = """\
# Written by session-digest.
concurrency:
  pools:
    default_limit: 1
"""


def _prepare_home(settings: Settings) -> None:
    """DAGSTER_HOME defaults to a folder under DIGEST_HOME, so the CLI's runs and the UI agree."""
    os.environ.setdefault("DAGSTER_HOME", str(settings.dagster_home))
    home = Path(os.environ["DAGSTER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text(INSTANCE_CONFIG)
    settings.inbox.mkdir(parents=True, exist_ok=True)


def _instance():
    from dagster import DagsterInstance

    return DagsterInstance.get()


@contextlib.contextmanager
def _model_url(settings: Settings):
    """One embedded server for the whole sweep, instead of one per run."""
    if settings.provider == "embedded" and not settings.model_url:
        from resources.embedded_server import EmbeddedServer

        with EmbeddedServer(n_ctx=settings.context_limit_tokens) as server:
            yield dataclasses.replace(settings, model_url=server.url)
    else:
        yield settings


def ingest(settings: Settings, paths: list[str]) -> dict:
    from pipelines.definitions import build_definitions
    from pipelines.sensors import register_partitions

    instance = _instance()
    job = build_definitions(settings).resolve_job_def("ingest")
    config = {"ops": {"raw_turns": {"config": {"paths": [str(Path(p).resolve()) for p in paths]}}}}
    result = job.execute_in_process(run_config=config, instance=instance, raise_on_error=False)
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


def _selection(settings: Settings, limit: int | None):
    from pipelines.selection import next_summary_batch

    policy = settings.sweep if limit is None else dataclasses.replace(settings.sweep, max_sessions=limit)
    return next_summary_batch(_store(settings), settings.limits(), policy, settings.model_name, int(time.time() * 1000))


def sweep(settings: Settings, limit: int | None) -> dict:
    """The summary sensor's selection and budget, run now: one Dagster run per session."""
    from pipelines.definitions import build_definitions
    from pipelines.sensors import register_partitions

    selection = _selection(settings, limit)
    outcomes = []
    if selection.batch:
        instance = _instance()
        register_partitions(instance, _store(settings))
        with _model_url(settings) as run_settings:
            job = build_definitions(run_settings).resolve_job_def("summarize_sessions")
            for item in selection.batch:
                key = item.candidate.partition_key
                started = time.monotonic()
                result = job.execute_in_process(
                    instance=instance,
                    partition_key=key,
                    raise_on_error=False,
                    tags={"digest/sweep": "cli", "digest/route": item.tier},
                )
                outcome = {"partition": key, "run_id": result.run_id, "success": result.success}
                for event in result.asset_materializations_for_node("session_summaries"):
                    meta = event.metadata
                    outcome.update(source_tier=meta["source_tier"].value, route_reason=meta["route_reason"].value)
                outcome["seconds"] = round(time.monotonic() - started, 2)
                outcomes.append(outcome)
                print(json.dumps(outcome), file=sys.stderr)
    return {
        "pending": selection.pending,
        "skipped": selection.skip_reason,
        "summarized": sum(o["success"] for o in outcomes),
        "runs": outcomes,
    }


def plan(settings: Settings, limit: int | None) -> dict:
    """What the next sweep would do, without calling a model."""
    selection = _selection(settings, limit)
    routes: dict[str, int] = {}
    for item in selection.batch:
        routes[item.tier] = routes.get(item.tier, 0) + 1
    return {
        "pending": selection.pending,
        "held_back": {"active_within_idle_window": selection.active, "in_failure_backoff": selection.backing_off},
        "seconds_per_token": selection.seconds_per_token,
        "throughput": "measured from the attempt ledger" if selection.throughput_measured else "default (no calls yet)",
        "next_sweep": {
            "sessions": len(selection.batch),
            "by_route": routes,
            "estimated_prompt_tokens": sum(i.prompt_tokens_estimate for i in selection.batch),
            "estimated_model_seconds": round(sum(i.model_seconds_estimate for i in selection.batch), 1),
            "sessions_detail": [
                {
                    "partition": i.candidate.partition_key,
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
        row = store.session_by_partition(session)
        session_id = row["session_id"] if row else session
    ids = store.unarchive_turns(turn_ids=turn_ids, session_id=session_id)
    return {"unarchived": len(ids), "turn_ids": ids}


def status(settings: Settings) -> dict:
    return _store(settings).status()


def ui(settings: Settings, port: int) -> None:
    command = ["dagster", "dev", "-m", "pipelines.definitions", "-h", "127.0.0.1", "-p", str(port)]
    print(f"Dagster UI on http://127.0.0.1:{port} (DAGSTER_HOME={os.environ['DAGSTER_HOME']})", file=sys.stderr)
    raise SystemExit(subprocess.call([str(Path(sys.executable).parent / command[0]), *command[1:]], cwd=REPO_ROOT))


def demo(settings: Settings) -> dict:
    started = time.monotonic()
    ingested = ingest(settings, [str(SAMPLES)])
    runs = []
    while batch := sweep(settings, None)["runs"]:  # one budgeted sweep after another
        runs.extend(batch)
    report = {
        "ingest": ingested,
        "summary_runs": runs,
        "status": status(settings),
        "seconds": round(time.monotonic() - started, 1),
    }
    report["where_to_look"] = {
        "database": str(settings.db_path),
        "try": f"duckdb {settings.db_path} \"SELECT session_id, source_tier, degraded, route_reason, title "
        "FROM session_summaries\"",
        "ui": "session-digest ui  # then open http://127.0.0.1:3000 : Runs, Assets > session_summaries",
    }
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="session-digest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_ingest = sub.add_parser("ingest", help="ingest export bundles (files or folders of *.jsonl)")
    p_ingest.add_argument("paths", nargs="+")
    p_sweep = sub.add_parser("sweep", help="summarize the next budgeted batch now, one Dagster run each")
    p_sweep.add_argument("--limit", type=int, default=None, help="at most this many sessions")
    p_plan = sub.add_parser("plan", help="what the next sweep would do, without calling a model")
    p_plan.add_argument("--limit", type=int, default=None, help="at most this many sessions")
    sub.add_parser("status", help="counts as JSON")
    p_unarchive = sub.add_parser("unarchive-turns", help="let archived turns get mini summary attempts again")
    p_unarchive.add_argument("--session", help="every archived turn of this session (id or partition key)")
    p_unarchive.add_argument("turn_ids", nargs="*", metavar="TURN_ID")
    p_ui = sub.add_parser("ui", help="start the Dagster UI on loopback over the same instance")
    p_ui.add_argument("--port", type=int, default=3000)
    sub.add_parser("demo", help="ingest the bundled samples, summarize them, print where to look")
    args = parser.parse_args(argv)

    try:
        settings = load_settings()
    except SettingsError as exc:
        raise SystemExit(f"session-digest: {exc}") from None
    _prepare_home(settings)
    if args.command == "ingest":
        result = ingest(settings, args.paths)
    elif args.command == "sweep":
        result = sweep(settings, args.limit)
    elif args.command == "plan":
        result = plan(settings, args.limit)
    elif args.command == "unarchive-turns":
        if not args.session and not args.turn_ids:
            parser.error("unarchive-turns needs --session ID or TURN_ID...")
        result = unarchive_turns(settings, args.session, args.turn_ids)
    elif args.command == "status":
        result = status(settings)
    elif args.command == "ui":
        ui(settings, args.port)
        return
    else:
        result = demo(settings)
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
