"""How long one summary-sensor tick takes with 1,000, 10,000 and 100,000 pending sessions, both
while they are new (not yet partitions) and once all are registered.

Run: .venv/bin/python bench/sensor_tick.py [--sizes 1000 10000 100000]

Each size gets a fresh DuckDB store (one turn per session, all pending and idle) and a fresh
Dagster instance with no partitions. Ticks run as the daemon runs them: `evaluate_tick` (the
sensor, then Dagster's check of every requested partition), then the tick's partition requests
applied to the instance (and its asset events recorded), until every session is registered; then
a steady-state tick (best of 3), and beside it a tick that also measures the `backlog` asset (every
pending session sized and placed, the drain's figures: what a tick does every
`DIGEST_BACKLOG_REFRESH_S`, best of 3). Dagster's default sensor limit is 60 s and covers the
evaluation; the daemon applies the partition requests after it.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

from dagster import build_sensor_context, instance_for_test

from assets.partitions import sessions_partitions
from digest.settings import load_settings
from pipelines.definitions import build_definitions
from resources.store import DigestStore

SENSOR_LIMIT_S = 60.0


def seed(store: DigestStore, count: int) -> None:
    now = int(time.time() * 1000) - 2 * 3_600_000
    for start in range(0, count, 20_000):
        rows = [
            {
                "id": f"s{i:07d}-t",
                "session_id": f"s{i:07d}",
                "ts_ms": now - i * 1000,
                "type": "agent-interaction",
                "document": f"User Prompt: task {i}\nAgent Thought: plan\nAgent Response: done {i}",
                "document_rebuilt": False,
                "source_file": "bench.jsonl",
                "source_line": i + 1,
            }
            for i in range(start, min(count, start + 20_000))
        ]
        store.ingest.write_turns(rows)
        store.ingest.refresh_sessions(r["session_id"] for r in rows)


def tick(instance, definitions) -> tuple[float, float, int]:
    """(evaluation s, applying s, runs requested) of one daemon-style tick."""
    started = time.perf_counter()
    with build_sensor_context(
        instance_ref=instance.get_ref(), definitions=definitions, resources=definitions.resources
    ) as context:
        data = definitions.resolve_sensor_def("summary_sensor").evaluate_tick(context)
    evaluated = time.perf_counter()
    for request in data.dynamic_partitions_requests:
        instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
    for event in data.asset_events:
        instance.report_runless_asset_event(event)
    return evaluated - started, time.perf_counter() - evaluated, len(data.run_requests)


def measure(count: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp, instance_for_test() as instance:
        settings = load_settings({"DIGEST_HOME": tmp, "DIGEST_MODEL_PROVIDER": "openai"})
        store = DigestStore(Path(tmp) / "digest.duckdb")
        store.migrate()
        seed(store, count)
        definitions = build_definitions(
            dataclasses.replace(settings, db_path=store.path, model_url="http://127.0.0.1:9")
        )
        first, first_apply, first_runs = tick(instance, definitions)
        ticks, worst = 1, first
        while len(instance.get_dynamic_partitions(sessions_partitions.name)) < count:
            seconds, _, _ = tick(instance, definitions)
            ticks, worst = ticks + 1, max(worst, seconds)
        steady = min(tick(instance, definitions)[0] for _ in range(3))
        # Every tick due to refresh the backlog.
        sweep = dataclasses.replace(settings.sweep, backlog_refresh_s=1e-3)
        refreshing = build_definitions(
            dataclasses.replace(settings, db_path=store.path, model_url="http://127.0.0.1:9", sweep=sweep)
        )
        backlog = min(tick(instance, refreshing)[0] for _ in range(3))
        return {
            "first": first, "apply": first_apply, "runs": first_runs, "ticks": ticks, "worst": worst, "steady": steady,
            "backlog": backlog,
        }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    args = parser.parse_args()
    print(
        f"{'sessions':>9} {'1st tick s':>10} {'runs':>5} {'apply s':>8} {'ticks to register':>18}"
        f" {'worst tick s':>12} {'steady tick s':>13} {'backlog tick s':>14} {'worst of 60 s':>13}"
    )
    for size in args.sizes:
        m = measure(size)
        print(
            f"{size:>9} {m['first']:>10.3f} {m['runs']:>5} {m['apply']:>8.3f} {m['ticks']:>18}"
            f" {m['worst']:>12.3f} {m['steady']:>13.3f} {m['backlog']:>14.3f}"
            f" {max(m['worst'], m['steady'], m['backlog']) / SENSOR_LIMIT_S:>12.2%}"
        )


if __name__ == "__main__":
    main()
