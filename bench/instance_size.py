"""What a summary run leaves in the Dagster instance (SQLite, under DAGSTER_HOME), by part.

Run: .venv/bin/python bench/instance_size.py [--runs 200] [--degraded 0] [--config new|old|both|postgres]

N sessions (4 turns each, imported mini summaries: the mini-summary step makes no model call; the
first `--degraded` of them over the raw cap), each summarized by one `summarize_sessions` run (the
run request the summary sensor makes, of the assets its route needs, executed in process as
`session-digest sweep` does) against a local server that answers at once, on an instance
whose dagster.yaml is written by `pipelines.instance` (`new`), or as the code before issue 20 wrote
it (`old`: no compute log manager, no retention), or by `pipelines.instance` on a throwaway
PostgreSQL server (`postgres`: tests/postgres.py, Debian's binaries). Prints the instance's growth per part (run
storage, the per-run event log files, compute logs, schedules) and per 1,000 runs, and the event
log's rows and bytes by type; then checks that every partition's materializations and metadata and
every run's status and steps read back from the instance.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ (the bundle writer and the model server) is not installed

from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter  # noqa: E402

from assets.partitions import sessions_partitions  # noqa: E402
from digest.hosts import assign_host  # noqa: E402
from digest.ingest import ingest_paths  # noqa: E402
from digest.settings import load_settings  # noqa: E402
from digest.tags import SWEEP_TAG  # noqa: E402
from pipelines.definitions import build_definitions  # noqa: E402
from pipelines.instance import write_instance_config  # noqa: E402
from pipelines.jobs import default_run_config, requested_job  # noqa: E402
from pipelines.sensors import summary_run_request  # noqa: E402
from resources.model_hosts import host_views  # noqa: E402
from resources.store import DigestStore  # noqa: E402
from tests.bundles import write_bundle  # noqa: E402
from tests.conftest import make_turns  # noqa: E402
from tests.model_server import ModelServer  # noqa: E402
from tests.postgres import postgres_server  # noqa: E402

TELEMETRY_PART = "telemetry log (logs/, rotated)"
PARTS = {
    "run storage (history/runs.db)": lambda p: p.parts[-2:] == ("history", "runs.db"),
    "event logs (history/runs/*.db)": lambda p: "runs" in p.parts and p.suffix == ".db" and p.name != "runs.db",
    "event log, one file (event_log.db*)": lambda p: p.name.startswith("event_log.db"),
    "compute logs (storage/)": lambda p: "storage" in p.parts,
    TELEMETRY_PART: lambda p: p.parts[:1] == ("logs",),
    "schedules and ticks (schedules/)": lambda p: "schedules" in p.parts,
}
POSTGRES_PART = "PostgreSQL database (pg_database_size)"


def sizes(home: Path) -> Counter:
    """Bytes per part, each SQLite file's write-ahead log checkpointed first: a WAL is bounded (SQLite
    checkpoints it at 1,000 pages) and reused, so it is not the instance's growth."""
    for db in home.rglob("*.db"):
        with sqlite3.connect(db) as con:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out: Counter = Counter()
    for path in home.rglob("*"):
        if path.is_file():
            rel = path.relative_to(home)
            part = next((name for name, match in PARTS.items() if match(rel)), "other")
            out[part] += path.stat().st_size
    return out


def old_yaml(settings) -> str:
    """dagster.yaml as written before issue 20: the same file without the size settings."""
    import yaml

    from pipelines import instance as module

    config = module.instance_config(settings)
    for key in module.SIZE_KEYS:
        config.pop(key, None)
    return module._HEADER + yaml.safe_dump(config, sort_keys=False)


def pg_rows(url: str, sql: str) -> list[tuple]:
    import psycopg2

    with psycopg2.connect(url) as con, con.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchall()


def database_bytes(url: str) -> int:
    return pg_rows(url, "SELECT pg_database_size(current_database())")[0][0]


def measure(root: Path, runs: int, degraded: int, config: str, server_url: str, pg_url: str | None = None) -> dict:
    home = root / config
    dagster_home = home / "dagster"
    dagster_home.mkdir(parents=True)
    env = {
        "DIGEST_HOME": str(home),
        "DAGSTER_HOME": str(dagster_home),
        "DIGEST_MODEL_PROVIDER": "openai",
        "DIGEST_MODEL_URL": server_url,
        "DIGEST_RESPONSE_CACHE": "off",
    }
    if pg_url:
        env["DIGEST_DAGSTER_PG_URL"] = pg_url.replace("postgresql://", "postgresql+psycopg2://")  # the driver installed
    os.environ.update(env)
    settings = load_settings()
    if config in ("new", "postgres"):
        write_instance_config(dagster_home, settings)
    else:
        (dagster_home / "dagster.yaml").write_text(old_yaml(settings))
    # 4 turns of 600 bytes: about 1,200 tokens, raw; of 12,000 bytes: over the 8,192-token raw cap.
    doc_bytes = [12_000 if i < degraded else 600 for i in range(runs)]
    turns = [t for i, b in enumerate(doc_bytes) for t in make_turns(f"size-{config}-{i:04d}", 4, doc_bytes=b, minis=4)]
    store = DigestStore(settings.db_path)
    store.migrate()
    ingest_paths([write_bundle(home / "bundle", turns)], store)
    keys = store.sessions.partition_keys()
    job = build_definitions(settings).resolve_job_def("summarize_sessions")
    # Each run as the summary sensor requests it: on the host and of the assets its route needs.
    views, _ = host_views(store, settings.fleet, settings.fleet.names, {})
    requests = []
    for key in keys:
        item = assign_host(
            store.summaries.summary_candidate(store.sessions.session_by_partition(key)["session_id"]), views
        )
        requests.append(summary_run_request(item, {SWEEP_TAG: "bench"}))
    with DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(sessions_partitions.name, keys)
        before = sizes(dagster_home)
        if pg_url:
            before[POSTGRES_PART] = database_bytes(pg_url)
        started = time.perf_counter()
        for request in requests:
            run, key = requested_job(job, request), request.partition_key
            config = default_run_config(run, key)
            assert run.execute_in_process(config, instance=instance, partition_key=key, tags=request.tags).success
        seconds = time.perf_counter() - started
        growth = sizes(dagster_home)
        if pg_url:
            growth[POSTGRES_PART] = database_bytes(pg_url)
        growth.subtract(before)
        # What the UI shows, read back: each partition's materialization and its metadata, each run's status.
        for asset in ("raw_sessions", "session_summaries"):
            materialized = instance.get_materialized_partitions(AssetKey(asset))
            assert set(keys) <= materialized, f"a partition lost its {asset} materialization"
        # First summaries go first (docs/sweeps.md): a degraded session's sweep run is the raw one's two
        # steps too, its summary made from truncated lines, and leaves its mini summaries missing; a raw
        # session's run records its mini-summary partition as not needed.
        assert all(r.asset_selection is not None for r in requests)
        raw_keys = store.query(
            "SELECT partition_key FROM sessions JOIN session_summaries USING (session_id) WHERE NOT degraded"
        )["partition_key"]
        assert instance.get_materialized_partitions(AssetKey("turn_mini_summaries")) == set(raw_keys)
        made_degraded = store.query("SELECT count(*) AS n FROM session_summaries WHERE degraded")["n"][0]
        assert made_degraded == degraded, made_degraded
        event = instance.get_latest_materialization_event(AssetKey("session_summaries"))
        metadata = sorted(event.asset_materialization.metadata)
        assert {"summary", "source_tier", "host"} <= set(metadata), metadata
        done = instance.get_runs(RunsFilter(job_name="summarize_sessions"))
        statuses = Counter(r.status for r in done)
        assert statuses == {DagsterRunStatus.SUCCESS: runs}, statuses
        for r in done:  # each run's steps: no mini-summary step, no check
            steps = {stats.step_key for stats in instance.get_run_step_stats(r.run_id)}
            assert steps == {"raw_sessions", "session_summaries"}, steps
    events: Counter = Counter()
    event_bytes: Counter = Counter()  # the serialized events' own bytes, without indexes
    by_type = "SELECT dagster_event_type, count(*), sum(length(event)) FROM event_logs GROUP BY 1"
    # The per-run files (the index repeats their rows), or the one file.
    files = [p for p in (dagster_home / "history" / "runs").glob("*.db") if p.name != "index.db"]
    rows = pg_rows(pg_url, by_type) if pg_url else []
    for db in [] if pg_url else files or [dagster_home / "event_log.db"]:
        with sqlite3.connect(db) as con:
            rows += con.execute(by_type).fetchall()
    for kind, count, size in rows:
        events[kind] += count
        event_bytes[kind] += size
    return {"growth": growth, "seconds": seconds, "metadata": metadata, "events": events, "bytes": event_bytes}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--degraded", type=int, default=0, help="how many of the sessions go degraded")
    parser.add_argument("--config", choices=("new", "old", "both", "postgres"), default="both")
    args = parser.parse_args()
    configs = ["old", "new"] if args.config == "both" else [args.config]
    results = {}
    (ROOT / "bench" / "out").mkdir(exist_ok=True)
    with ModelServer() as server, tempfile.TemporaryDirectory(dir=ROOT / "bench" / "out") as tmp:
        for config in configs:
            if config == "postgres":
                with postgres_server() as pg_url:
                    results[config] = measure(Path(tmp), args.runs, args.degraded, config, server.url, pg_url)
            else:
                results[config] = measure(Path(tmp), args.runs, args.degraded, config, server.url)
    print(f"{args.runs} summary runs ({args.degraded} degraded, in process), growth of the instance:")
    parts = [*PARTS, *([POSTGRES_PART] if "postgres" in configs else []), "other"]
    print(f"{'part':<36}" + "".join(f"{c + ' MB':>12}" for c in configs))
    for part in parts:
        print(f"{part:<36}" + "".join(f"{results[c]['growth'][part] / 1e6:>12.2f}" for c in configs))
    total = {c: sum(results[c]["growth"].values()) for c in configs}
    print(f"{'total':<36}" + "".join(f"{total[c] / 1e6:>12.2f}" for c in configs))
    print(f"{'per 1,000 runs':<36}" + "".join(f"{total[c] / args.runs * 1000 / 1e6:>12.1f}" for c in configs))
    bare = {c: total[c] - results[c]["growth"][TELEMETRY_PART] for c in configs}
    print(
        f"{'  without the telemetry log':<36}" + "".join(f"{bare[c] / args.runs * 1000 / 1e6:>12.1f}" for c in configs)
    )
    print(f"{'seconds for the runs':<36}" + "".join(f"{results[c]['seconds']:>12.1f}" for c in configs))
    for config in configs:
        events, event_bytes = results[config]["events"], results[config]["bytes"]
        top = ", ".join(f"{k} {v} ({event_bytes[k] / args.runs / 1e3:.1f} KB/run)" for k, v in events.most_common())
        print(f"{config}: event log rows (their serialized events): {top}")
        print(f"{config}: latest materialization metadata: {', '.join(results[config]['metadata'])}")


if __name__ == "__main__":
    main()
