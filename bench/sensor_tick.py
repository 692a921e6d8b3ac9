"""How long one summary-sensor tick takes with 1,000, 10,000 and 100,000 known sessions.

Run: .venv/bin/python bench/sensor_tick.py [--sizes 1000 10000 100000]

Each size gets a fresh DuckDB store (one turn per session, all pending) and a fresh Dagster
instance with every session registered as a partition, so the tick does the steady-state work:
diff the partitions, gate and rank the backlog, size up the batch. Dagster's default sensor
limit is 60 s; the ratio column says how much of it one tick uses.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

from dagster import build_sensor_context, instance_for_test

from digest.settings import load_settings
from pipelines.definitions import build_definitions
from pipelines.sensors import register_partitions, summary_sensor
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
        store.write_turns(rows)
        store.refresh_sessions(r["session_id"] for r in rows)


def measure(count: int, repeats: int = 3) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp, instance_for_test() as instance:
        settings = load_settings({"DIGEST_HOME": tmp, "DIGEST_MODEL_PROVIDER": "openai"})
        store = DigestStore(Path(tmp) / "digest.duckdb")
        store.migrate()
        seed(store, count)
        register_partitions(instance, store)
        resources = build_definitions(dataclasses.replace(settings, model_url="http://127.0.0.1:9")).resources
        times, launched = [], 0
        for _ in range(repeats):
            started = time.perf_counter()
            with build_sensor_context(instance=instance, resources=resources) as context:
                result = summary_sensor(context)
            times.append(time.perf_counter() - started)
            launched = len(result.run_requests)
        return min(times), launched


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    args = parser.parse_args()
    print(f"{'sessions':>9} {'tick s':>8} {'of 60 s limit':>14} {'runs':>5}")
    for size in args.sizes:
        seconds, launched = measure(size)
        print(f"{size:>9} {seconds:>8.3f} {seconds / SENSOR_LIMIT_S:>13.2%} {launched:>5}")


if __name__ == "__main__":
    main()
