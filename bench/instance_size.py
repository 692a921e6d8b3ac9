"""What a summary run leaves in the Dagster instance (SQLite, under DAGSTER_HOME), by part.

Run: .venv/bin/python bench/instance_size.py [--runs 200] [--config new|old|both|postgres]

N sessions (4 turns each, imported mini summaries: the mini-summary step makes no model call),
each summarized by one `summarize_sessions` run (what the summary sensor launches, executed in
process as bench/real_export.py does) against a local server that answers at once, on an instance
whose dagster.yaml is written by `pipelines.instance` (`new`), or as the code before issue 20 wrote
it (`old`: no compute log manager, no retention), or by `pipelines.instance` on a throwaway
PostgreSQL server (`postgres`: tests/postgres.py, Debian's binaries). Prints the instance's growth per part (run
storage, the per-run event log files, compute logs, schedules) and per 1,000 runs, and the event
log's rows by type; then checks that every partition's materialization and metadata and every
run's status read back from the instance.
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
from digest.ingest import ingest_paths  # noqa: E402
from digest.settings import load_settings  # noqa: E402
from pipelines.definitions import build_definitions  # noqa: E402
from pipelines.instance import write_instance_config  # noqa: E402
from resources.store import DigestStore  # noqa: E402
from tests.bundles import write_bundle  # noqa: E402
from tests.conftest import make_turns  # noqa: E402
from tests.model_server import ModelServer  # noqa: E402
from tests.postgres import postgres_server  # noqa: E402

PARTS = {
    "run storage (history/runs.db)": lambda p: p.parts[-2:] == ("history", "runs.db"),
    "event logs (history/runs/*.db)": lambda p: "runs" in p.parts and p.suffix == ".db" and p.name != "runs.db",
    "event log, one file (event_log.db*)": lambda p: p.name.startswith("event_log.db"),
    "compute logs (storage/)": lambda p: "storage" in p.parts,
    "telemetry log (logs/, rotated)": lambda p: p.parts[:1] == ("logs",),
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


def measure(root: Path, runs: int, config: str, server_url: str, pg_url: str | None = None) -> dict:
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
    turns = [t for i in range(runs) for t in make_turns(f"size-{config}-{i:04d}", 4, doc_bytes=600, minis=4)]
    store = DigestStore(settings.db_path)
    store.migrate()
    ingest_paths([write_bundle(home / "bundle", turns)], store)
    keys = store.partition_keys()
    job = build_definitions(settings).resolve_job_def("summarize_sessions")
    with DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(sessions_partitions.name, keys)
        before = sizes(dagster_home)
        if pg_url:
            before[POSTGRES_PART] = database_bytes(pg_url)
        started = time.perf_counter()
        for key in keys:
            assert job.execute_in_process(instance=instance, partition_key=key).success
        seconds = time.perf_counter() - started
        growth = sizes(dagster_home)
        if pg_url:
            growth[POSTGRES_PART] = database_bytes(pg_url)
        growth.subtract(before)
        # What the UI shows, read back: each partition's materialization and its metadata, each run's status.
        materialized = instance.get_materialized_partitions(AssetKey("session_summaries"))
        assert set(keys) <= materialized, "a partition lost its materialization"
        event = instance.get_latest_materialization_event(AssetKey("session_summaries"))
        metadata = sorted(event.asset_materialization.metadata)
        statuses = Counter(r.status for r in instance.get_runs(RunsFilter(job_name="summarize_sessions")))
        assert statuses == {DagsterRunStatus.SUCCESS: runs}, statuses
    events: Counter = Counter()
    # The per-run files (the index repeats their rows), or the one file.
    files = [p for p in (dagster_home / "history" / "runs").glob("*.db") if p.name != "index.db"]
    if pg_url:
        events.update(dict(pg_rows(pg_url, "SELECT dagster_event_type, count(*) FROM event_logs GROUP BY 1")))
    for db in [] if pg_url else files or [dagster_home / "event_log.db"]:
        with sqlite3.connect(db) as con:
            events.update(
                dict(con.execute("SELECT dagster_event_type, count(*) FROM event_logs GROUP BY 1").fetchall())
            )
    return {"growth": growth, "seconds": seconds, "metadata": metadata, "events": events}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--config", choices=("new", "old", "both", "postgres"), default="both")
    args = parser.parse_args()
    configs = ["old", "new"] if args.config == "both" else [args.config]
    results = {}
    (ROOT / "bench" / "out").mkdir(exist_ok=True)
    with ModelServer() as server, tempfile.TemporaryDirectory(dir=ROOT / "bench" / "out") as tmp:
        for config in configs:
            if config == "postgres":
                with postgres_server() as pg_url:
                    results[config] = measure(Path(tmp), args.runs, config, server.url, pg_url)
            else:
                results[config] = measure(Path(tmp), args.runs, config, server.url)
    print(f"{args.runs} summary runs (in process), growth of the instance:")
    parts = [*PARTS, *([POSTGRES_PART] if "postgres" in configs else []), "other"]
    print(f"{'part':<36}" + "".join(f"{c + ' MB':>12}" for c in configs))
    for part in parts:
        print(f"{part:<36}" + "".join(f"{results[c]['growth'][part] / 1e6:>12.2f}" for c in configs))
    total = {c: sum(results[c]["growth"].values()) for c in configs}
    print(f"{'total':<36}" + "".join(f"{total[c] / 1e6:>12.2f}" for c in configs))
    print(f"{'per 1,000 runs':<36}" + "".join(f"{total[c] / args.runs * 1000 / 1e6:>12.1f}" for c in configs))
    print(f"{'seconds for the runs':<36}" + "".join(f"{results[c]['seconds']:>12.1f}" for c in configs))
    for config in configs:
        top = ", ".join(f"{k} {v}" for k, v in results[config]["events"].most_common())
        print(f"{config}: event log rows: {top}")
        print(f"{config}: latest materialization metadata: {', '.join(results[config]['metadata'])}")


if __name__ == "__main__":
    main()
