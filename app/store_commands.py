"""The store's upkeep from the command line (registered in `app/cli.py`): archive and restore
bundles, archived turns given attempts again, the response cache cleared, the graph exported, a
session put back in the digest cadence."""

from __future__ import annotations

import argparse
from datetime import UTC
from pathlib import Path

from app.command import Command, UsageError
from app.console import Output
from digest.settings import Settings


def archive(settings: Settings, sessions: list[str], retire: bool, out: str | None) -> dict:
    """A bundle of these sessions (ids or partition keys; none: the whole store), recorded in
    `archives`; `retire` then takes them out of every sweep."""
    from resources.store import open_store

    store = open_store(settings.db_path)
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
    from app.runs import dagster_instance
    from digest.archive_read import BundleError, validate_bundle
    from digest.turns import partition_key
    from pipelines.interrupted_runs import record_summaries
    from pipelines.sensors import reconcile_partitions
    from resources.store import open_store

    store = open_store(settings.db_path)
    try:
        bundle = validate_bundle(bundle_path)
        result = store.archive.restore_archive(bundle, mode)
    except BundleError as exc:
        raise SystemExit(f"session-digest: {exc}") from None
    after_restore_commit()
    outcome = result["outcome"]
    instance = dagster_instance()
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
    from resources.store import open_store

    return {"cleared": open_store(settings.db_path).cache.clear_response_cache()}


def unarchive_turns(settings: Settings, session: str | None, turn_ids: list[str]) -> dict:
    """Archived turns (no content, attempts exhausted, or archived in the export) get mini summary
    attempts again. `session` is a session id or its partition key."""
    from resources.store import open_store

    store = open_store(settings.db_path)
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
    from resources.store import open_store

    store = open_store(settings.db_path)
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
    from resources.store import open_store

    store = open_store(settings.db_path)
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


def unarchive_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--session", help="every archived turn of this session (id or partition key)")
    command.add_argument("turn_ids", nargs="*", metavar="TURN_ID")


def unarchive_command(args, settings: Settings, output: Output) -> dict:
    if not args.session and not args.turn_ids:
        raise UsageError("unarchive-turns needs --session ID or TURN_ID...")
    return unarchive_turns(settings, args.session, args.turn_ids)


def archive_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--sessions", nargs="+", default=[], metavar="ID", help="session ids or partition keys")
    command.add_argument("--retire", action="store_true", help="then take these sessions out of every sweep")
    command.add_argument("--out", help="the folder to write the bundle in (default: $DIGEST_HOME/archives)")


def archive_command(args, settings: Settings, output: Output) -> dict:
    if args.retire and not args.sessions:
        raise UsageError("archive --retire needs --sessions: the sessions to retire")
    return archive(settings, args.sessions, args.retire, args.out)


def restore_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("bundle")
    command.add_argument("--mode", choices=["merge", "replace"], default="merge")


COMMANDS = (
    Command(
        "unarchive-turns", "let archived turns get mini summary attempts again", unarchive_command, unarchive_arguments
    ),
    Command(
        "archive",
        "write a bundle of the store (or of some sessions) with a manifest",
        archive_command,
        archive_arguments,
    ),
    Command(
        "restore",
        "validate a bundle, then restore it in one transaction",
        lambda args, settings, output: restore(settings, args.bundle, args.mode),
        restore_arguments,
    ),
    Command(
        "cache",
        "the response cache of model replies",
        lambda args, settings, output: clear_cache(settings),
        lambda command: command.add_argument("action", choices=["clear"]),
    ),
    Command(
        "export-graph",
        "write the graph as graph-backup JSONL, loadable into Neo.mjs",
        lambda args, settings, output: export_graph(settings, args.path),
        lambda command: command.add_argument(
            "path", help="a file, or a folder to write graph-backup-<timestamp>.jsonl in"
        ),
    ),
    Command(
        "reset-digest",
        "put an undigestible session back in the digest cadence",
        lambda args, settings, output: reset_digest(settings, args.session),
        lambda command: command.add_argument("session", metavar="SESSION_ID", help="session id or partition key"),
    ),
)
