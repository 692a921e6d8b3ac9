"""A real user's export at real scale, through the daemon's code path, side by side in one run.

Run: .venv/bin/python bench/real_export.py [--sessions 10000] [--turns 30] [--drain 200]
                                             [--rate 50] [--time-scale 40] [--dimensions 4096]
                                             [--old SOURCE_TREE]

`--dimensions`: every turn and exported summary carries a float32 vector of that length, as a
Neo.mjs export does (0: the generator's short 8-number vector). `--old`: a source tree of earlier
code (`git archive <commit> | tar -x -C DIR`) whose ingest runs on the same export into its own
store first, for its time, peak RSS and store size beside this code's.

A seeded export (`tests/synthetic_export.py`: 10,000 sessions x 30 turns, a current
summaries-backup row for a third of them) goes the way the daemon takes it:

1. ingest: the `ingest` job (the `raw_turns` asset, as an inbox-sensor run executes it) in a child
   process, so its wall time and peak RSS are its own;
2. registration: `summary_sensor` ticks evaluated against a real instance on disk, each tick's
   `dynamic_partitions_requests` applied as the daemon applies them, until every session is a
   partition: ticks, seconds, p95 tick;
3. what is owed: model calls the backlog needs with and without the imported summaries;
4. drain: sensor ticks whose run requests are executed (the `summarize_sessions` job with the
   request's partition, tags and assets: a sweep's run has no mini-summary step; in process,
   the daemon would start a worker process per run on top) until `--drain` sessions are summarized,
   against a local server that answers at a fixed prompt rate. `--time-scale` shortens the
   server's sleep by that factor so the drain finishes in minutes; the model seconds at the real rate and the orchestration share at that rate are
   printed beside the measured ones;
5. sizes: the DuckDB file, and the Dagster instance's growth per 1,000 runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ (the generator and the model server) is not installed

from dagster import AddDynamicPartitionsRequest, DagsterInstance, build_sensor_context  # noqa: E402

from assets.partitions import sessions_partitions  # noqa: E402
from digest.settings import load_settings  # noqa: E402
from pipelines.definitions import build_definitions  # noqa: E402
from pipelines.instance import write_instance_config  # noqa: E402
from pipelines.jobs import default_run_config, requested_job  # noqa: E402
from pipelines.sensors import summary_sensor  # noqa: E402
from resources.store import DigestStore  # noqa: E402
from tests.model_server import Behaviour, ModelServer, Received  # noqa: E402
from tests.synthetic_export import write_export  # noqa: E402


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def env_for(home: Path, url: str) -> dict[str, str]:
    return {
        "DIGEST_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        "DIGEST_MODEL_PROVIDER": "openai",
        "DIGEST_MODEL_URL": url,
        "DIGEST_RESPONSE_CACHE": "off",
    }


def child_ingest(export: str) -> None:
    """In the child: the ingest job, as an inbox-sensor run executes it; no partition is registered."""
    settings = load_settings()
    job = build_definitions(settings).resolve_job_def("ingest")
    result = job.execute_in_process(
        run_config={"ops": {"raw_turns": {"config": {"paths": [export]}}}}, instance=DagsterInstance.get()
    )
    assert result.success


def ingest(home: Path, export: Path, url: str, source: Path = ROOT) -> tuple[float, float]:
    """The ingest job in a child process of the code at `source`; its wall time and peak RSS."""
    (home / "dagster").mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD_PEAK, str(source / "bench" / "real_export.py"), str(export)],
        env={**os.environ, **env_for(home, url), "PYTHONPATH": str(source)},
        cwd=source,
        check=True,
        capture_output=True,
        text=True,
    )
    peak_mb = float(done.stdout.strip().splitlines()[-1])
    return time.perf_counter() - started, peak_mb


# The child's own peak RSS (RUSAGE_CHILDREN would be the largest child so far, whichever ran).
CHILD_PEAK = """
import resource, runpy, sys
script, export = sys.argv[1:3]
sys.argv = [script, "--child-ingest", export]
runpy.run_path(script, run_name="__main__")
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def store_figures(path: Path, turns: int) -> str:
    size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    return f"{size / 1e6:.1f} MB ({size / turns / 1024:.1f} KB per turn)"


def tick(instance, resources):
    """One evaluation of the summary sensor, its registrations applied as the daemon does."""
    started = time.perf_counter()
    with build_sensor_context(instance=instance, resources=resources) as context:
        result = summary_sensor(context)
    for request in getattr(result, "dynamic_partitions_requests", None) or []:
        if isinstance(request, AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    requests = getattr(result, "run_requests", None) or []
    unknown = [
        r.partition_key
        for r in requests
        if not instance.has_dynamic_partition(sessions_partitions.name, r.partition_key)
    ]
    assert not unknown, f"the tick requested runs of unregistered partitions: {unknown[:3]}"
    return time.perf_counter() - started, requests


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--drain", type=int, default=200)
    parser.add_argument("--rate", type=float, default=50.0, help="prompt tokens/s the server answers at")
    parser.add_argument("--time-scale", type=float, default=40.0, help="the server sleeps model time / this")
    parser.add_argument("--dimensions", type=int, default=4096, help="each turn's vector length (0: 8 numbers)")
    parser.add_argument("--old", type=Path, help="a source tree of earlier code, to ingest with beside this one")
    parser.add_argument("--child-ingest")
    args = parser.parse_args()
    if args.child_ingest:
        return child_ingest(args.child_ingest)

    slept: list[float] = []

    def fixed_rate(received: Received) -> Behaviour:
        model_s = len(received.prompt.encode()) / 3 / args.rate
        slept.append(model_s)
        return dataclasses.replace(Behaviour.reply(), delay_s=model_s / args.time_scale)

    figures: list[tuple[str, str]] = []
    (ROOT / "bench" / "out").mkdir(exist_ok=True)  # never committed
    with tempfile.TemporaryDirectory(dir=ROOT / "bench" / "out") as tmp, ModelServer(fixed_rate) as server:
        root = Path(tmp)
        started = time.perf_counter()
        facts = write_export(
            root / "export", args.sessions, args.turns, summarized_share=1 / 3, dimensions=args.dimensions or None
        )
        figures.append(
            (
                "export written",
                f"{facts.sessions} sessions, {facts.turns} turns, "
                f"{facts.memory_bytes / 1e6:.0f} MB memory file, {time.perf_counter() - started:.1f} s",
            )
        )

        if args.old:
            old_home = root / "old-home"
            seconds, peak_mb = ingest(old_home, root / "export", server.url, args.old.resolve())
            figures.append(
                (
                    "ingest, old code",
                    f"{seconds:.1f} s, peak RSS {peak_mb:.0f} MB, {facts.turns / seconds:,.0f} turns/s; "
                    f"DuckDB file {store_figures(old_home / 'digest.duckdb', facts.turns)}",
                )
            )
            shutil.rmtree(old_home)
        home = root / "home"
        (home / "dagster").mkdir(parents=True)
        os.environ.update(env_for(home, server.url))
        write_instance_config(home / "dagster", load_settings())
        seconds, peak_mb = ingest(home, root / "export", server.url)
        figures.append(
            (
                "ingest (raw_turns run, child process)",
                f"{seconds:.1f} s, peak RSS {peak_mb:.0f} MB, {facts.turns / seconds:,.0f} turns/s",
            )
        )

        settings = load_settings()
        resources = build_definitions(settings).resources
        store = DigestStore(settings.db_path)
        instance = DagsterInstance.get()
        tick_s: list[float] = []
        started = time.perf_counter()
        first_runs = None
        while len(instance.get_dynamic_partitions(sessions_partitions.name)) < facts.sessions:
            seconds, requests = tick(instance, resources)
            tick_s.append(seconds)
            first_runs = len(requests) if first_runs is None else first_runs
            assert len(tick_s) < 1000, "registration makes no progress"
        figures.append(
            (
                "registration",
                f"{len(tick_s)} ticks, {time.perf_counter() - started:.1f} s, "
                f"p95 tick {p95(tick_s):.2f} s (of the 60 s limit), {first_runs} runs requested by tick 1",
            )
        )

        status = store.reports.status()
        owed_after = status["pending_summaries"]
        figures.append(
            (
                "model calls owed",
                f"{facts.sessions} without reusing imported summaries, "
                f"{owed_after} with ({facts.sessions - owed_after} reused; {len(facts.summarized)} exported current)",
            )
        )
        figures.append(("DuckDB file", store_figures(settings.db_path, facts.turns)))

        job = build_definitions(settings).resolve_job_def("summarize_sessions")
        instance_before = folder_bytes(home / "dagster")
        summarized, runs, drain_ticks = 0, 0, []
        slept.clear()
        started = time.perf_counter()
        while summarized < args.drain:
            seconds, requests = tick(instance, resources)
            drain_ticks.append(seconds)
            assert requests, "the sensor launched nothing while sessions were pending"
            for request in requests[: args.drain - summarized]:
                run_job = requested_job(job, request)  # the route's assets, as the daemon runs the request
                result = run_job.execute_in_process(
                    run_config=default_run_config(run_job, request.partition_key),
                    instance=instance,
                    partition_key=request.partition_key,
                    tags=request.tags,
                    raise_on_error=False,
                )
                runs += 1
                summarized += result.success
        wall = time.perf_counter() - started
        model_scaled = sum(slept) / args.time_scale
        orchestration = wall - model_scaled
        figures.append(
            (
                f"drain {args.drain} sessions",
                f"{wall:.1f} s wall, {runs} runs, {len(drain_ticks)} ticks; "
                f"model {model_scaled:.1f} s (x{args.time_scale:g} faster than {args.rate:g} tok/s), "
                f"orchestration {orchestration:.1f} s = {orchestration / wall:.1%} of wall",
            )
        )
        figures.append(
            (
                f"  at {args.rate:g} tok/s",
                f"model {sum(slept):.0f} s, orchestration share "
                f"{orchestration / (orchestration + sum(slept)):.1%}, "
                f"{orchestration / runs:.2f} s orchestration per session",
            )
        )
        growth = folder_bytes(home / "dagster") - instance_before
        figures.append(
            (
                "Dagster instance",
                f"{growth / runs * 1000 / 1e6:.1f} MB per 1,000 runs ({growth / 1e6:.1f} MB for {runs})",
            )
        )

    width = max(len(name) for name, _ in figures)
    for name, value in figures:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
