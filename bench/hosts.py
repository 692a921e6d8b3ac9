"""Several model hosts, side by side in one run: throughput with 1, 2 and 4 hosts, the seed's
pathology on a CPU host, and the DuckDB writer's headroom.

Run: .venv/bin/python bench/hosts.py [--quick | --smoke] [--writer]

No real model: each host is a local OpenAI-protocol server (tests/model_server.py) that answers
with a valid summary after prompt tokens / prompt rate + completion tokens / generation rate,
counting a token per 3.5 bytes (its `usage.prompt_tokens`) and refusing a prompt over its
context as llama.cpp does. Its sleep is that model time divided by a time scale, so an hour of a
50 tokens/s CPU host passes in a minute or two; the client scales each call's duration back up,
so the ledger and every model second printed are simulated seconds. The summary deadline
(DIGEST_SUMMARY_TIMEOUT_S, 180 s) is scaled the same way. A run's other work (DuckDB, the HTTP
client) counts in real seconds, unscaled; a drain lasts as long as its busiest worker's model
plus other time. A call its client gave up on is taken to stop occupying the host (llama.cpp and Ollama
cancel a request whose connection closed).

1. throughput: one corpus of typical sessions (a few thousand tokens, all under the 8192 cap),
   drained by 1, 2 and 4 identical CPU hosts in turn, each drain on a fresh copy of ONE DuckDB
   file that every worker writes to;
2. the seed's pathology: a heavy-tailed corpus on a simulated 7B CPU host (context 131,072,
   50 prompt tokens/s) with the raw cap off, on (8192), and on with a long-context GPU host
   beside it; the three cases run at the same time, each on its own store and servers;
3. the DuckDB writer: a summary run's store work (no model time) from several threads and
   several processes at once, against what N hosts need; side by side, each store method on its
   own connection (the code before) and the run's own work, `summarize_partition`, on one held
   connection a phase (`--writer`: only this, a minute or two).

Sessions are assigned to hosts by the project's selection, as the summary sensor does: a tick
every 60 simulated seconds (the sensor's interval) asks for the next batch, with the sessions
already queued or running excluded, and each host's workers (as many as its `concurrency`) run
its sessions. A run here is a thread doing the store work of the `session_summaries` asset
(lease, standing, turns, staged reply, attempts and the host's circuit, summary, failure state):
Dagster's own cost per run (BENCHMARKS.md section 2) is not included. Outputs go under bench/out/ (never committed).
"""

from __future__ import annotations

import argparse
import dataclasses
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ (the export generator and the model server) is not installed

from _hosts_sim import (  # noqa: E402
    BenchFile,
    Job,
    SimHost,
    corpus_sizes,
    cpu_host,
    fixed_rate,
    fleet,
    gpu_host,
    summary_run,
    write_corpus,
)
from _hosts_writer import measure_writer  # noqa: E402
from _text_table import table  # noqa: E402

from digest.circuit import CircuitPolicy  # noqa: E402
from digest.model_api import ChatReply, ModelError  # noqa: E402
from digest.scheduling import SweepPolicy, now_ms  # noqa: E402
from pipelines.selection import next_summary_batch  # noqa: E402
from resources.model_clients import OpenAIChatClient  # noqa: E402
from resources.model_hosts import hosts_in_rotation  # noqa: E402
from resources.store import DigestStore  # noqa: E402
from tests.model_server import ModelServer  # noqa: E402

SENSOR_INTERVAL_S = 60.0  # summary_sensor's minimum_interval_seconds


# --- host assignment -------------------------------------------------------------------------------

Plan = Callable[[DigestStore, set[str], dict[str, float]], list[Job]]


def project_plan(hosts: list[SimHost], scale: float) -> Plan:
    """The summary sensor's selection: the hosts in rotation (their circuits), then
    `next_summary_batch` over the fleet, with the sessions queued or running excluded and each
    host's queued model seconds (the sensor reads both from the runs' tags)."""
    declared = fleet(hosts, scale)

    def plan(store: DigestStore, exclude: set[str], queued_s: dict[str, float]) -> list[Job]:
        now = now_ms()
        available, probing = hosts_in_rotation(store, declared, CircuitPolicy(), now)
        selection = next_summary_batch(
            store, declared, SweepPolicy(), now, exclude, queued_s, available, probing, CircuitPolicy()
        )
        return [Job(a.candidate.partition_key, a.host, a.reason, a.model_seconds_estimate) for a in selection.batch]

    return plan


# --- a drain: the sweep's ticks, each host's workers, one DuckDB file -------------------------------


class SimClockClient:
    """The simulated host's clock: each call's duration (a timeout's too) x the scale, so the
    ledger, and the host speed the assignment measures from it, are in simulated seconds."""

    def __init__(self, inner, scale: float):
        self.inner = inner
        self.model = inner.model
        self.scale = scale
        self.real_s = 0.0  # the real seconds of every call so far

    @property
    def streaming(self) -> bool:
        return self.inner.streaming

    def chat(self, prompt: str, **kwargs) -> ChatReply:
        try:
            reply = self.inner.chat(prompt, **kwargs)
        except ModelError as exc:
            self.real_s += exc.duration_s
            exc.duration_s *= self.scale
            if getattr(exc, "first_token_s", None) is not None:
                exc.first_token_s *= self.scale
            raise
        self.real_s += reply.duration_s
        first = None if reply.first_token_s is None else reply.first_token_s * self.scale
        return dataclasses.replace(reply, duration_s=reply.duration_s * self.scale, first_token_s=first)


@dataclass
class Drain:
    name: str
    hosts: list[SimHost]
    scale: float
    makespan_real_s: float = 0.0
    # Per worker, its simulated busy time: model seconds x the scale, plus its runs' other work
    # (store, client set-up) in real seconds, unscaled: DuckDB does not run faster with the clock.
    busy_sim_s: dict[str, float] = dataclasses.field(default_factory=dict)
    store_real_s: list[float] = dataclasses.field(default_factory=list)  # per run
    server_model_s: dict[str, float] = dataclasses.field(default_factory=dict)
    errors: list[str] = dataclasses.field(default_factory=list)
    figures: dict = dataclasses.field(default_factory=dict)

    @property
    def makespan_sim_s(self) -> float:
        """The busiest worker's simulated time: when the last session would be done."""
        return max(self.busy_sim_s.values())


def drain(name: str, store_path: Path, hosts: list[SimHost], scale: float) -> Drain:
    """Summarize every pending session, as the sensor and the per-host pools would."""
    out = Drain(name, hosts, scale)
    plan = project_plan(hosts, scale)
    declared = fleet(hosts, scale)
    store = DigestStore(BenchFile(store_path))
    logs = {h.name: [] for h in hosts}
    queues: dict[str, queue.Queue] = {h.name: queue.Queue() for h in hosts}
    in_flight: dict[str, Job] = {}
    lock = threading.Lock()
    done = threading.Event()
    last_finish = [time.perf_counter()]

    def worker(host: SimHost, url: str, index: int) -> None:
        client = SimClockClient(OpenAIChatClient(url, host.model, schema_style="json_schema"), scale)
        limits = declared.limits(host.name)
        runs, busy = 0, 0.0
        while (job := queues[host.name].get()) is not None:
            runs += 1
            started, model_before = time.perf_counter(), client.real_s
            try:
                summary_run(store, client, limits, job, f"{name}-{host.name}-{index}-{runs}")
            except Exception as exc:  # counted and shown: a bench run must not hide one
                out.errors.append(f"{job.partition_key} on {host.name}: {exc!r}"[:300])
            model = client.real_s - model_before
            other = time.perf_counter() - started - model
            busy += model * scale + other
            with lock:
                out.store_real_s.append(other)
                del in_flight[job.partition_key]
                last_finish[0] = time.perf_counter()
            done.set()
        out.busy_sim_s[f"{host.name}/{index}"] = busy

    with servers_for(hosts, scale, logs) as urls:
        threads = [
            threading.Thread(target=worker, args=(h, urls[h.name], i), daemon=True)
            for h in hosts
            for i in range(h.concurrency)
        ]
        for t in threads:
            t.start()
        started = time.perf_counter()
        while True:
            with lock:
                exclude = set(in_flight)
                queued_s = {h.name: 0.0 for h in hosts}
                for job in in_flight.values():
                    queued_s[job.host] += job.estimate_s
            jobs = plan(store, exclude, queued_s)
            with lock:
                for job in jobs:
                    in_flight[job.partition_key] = job
                    queues[job.host].put(job)
                idle = not in_flight
            if idle and not jobs:
                break
            # The next tick, or sooner when the last run in flight ends (so a drain does not wait a tick out).
            deadline = time.perf_counter() + SENSOR_INTERVAL_S / scale
            while time.perf_counter() < deadline:
                done.wait(max(0.0, deadline - time.perf_counter()))
                done.clear()
                with lock:
                    if not in_flight:
                        break
        for h in hosts:
            for _ in range(h.concurrency):
                queues[h.name].put(None)
        for t in threads:
            t.join()
    out.makespan_real_s = last_finish[0] - started
    out.server_model_s = {h: sum(log) for h, log in logs.items()}
    out.figures = outcome(store)
    return out


@contextmanager
def servers_for(hosts: list[SimHost], scale: float, logs: dict[str, list[float]]):
    servers = [ModelServer(fixed_rate(h, scale, logs[h.name])) for h in hosts]
    for s in servers:
        s.__enter__()
    try:
        yield {h.name: s.url for h, s in zip(hosts, servers)}
    finally:
        for s in servers:
            s.__exit__(None, None, None)


def outcome(store: DigestStore) -> dict:
    """What the ledger (in simulated seconds) and the summaries say of a drain."""
    calls = store.query(
        "SELECT coalesce(sum(duration_s), 0) AS total, coalesce(max(duration_s), 0) AS longest, count(*) AS calls, "
        "count(*) FILTER (outcome = 'timeout') AS timeouts FROM attempts"
    ).iloc[0]
    tiers = store.query("SELECT source_tier, count(*) AS n FROM session_summaries GROUP BY 1")
    routes = store.query(
        "SELECT route_reason, count(*) AS n FROM session_summaries WHERE degraded GROUP BY 1 ORDER BY 1"
    )
    by_host = store.query("SELECT host, count(DISTINCT session_id) AS n FROM attempts GROUP BY 1 ORDER BY 1")
    sessions = int(store.query("SELECT count(*) AS n FROM sessions").iloc[0]["n"])
    summarized = int(tiers["n"].sum()) if len(tiers) else 0
    degraded = int(tiers[tiers["source_tier"] != "raw"]["n"].sum()) if len(tiers) else 0
    return {
        "sessions": sessions,
        "summarized": summarized,
        "raw": summarized - degraded,
        "degraded": degraded,
        "failed": sessions - summarized,
        "model_s": float(calls["total"]),
        "longest_s": float(calls["longest"]),
        "calls": int(calls["calls"]),
        "timeouts": int(calls["timeouts"]),
        "by_host": {r.host: int(r.n) for r in by_host.itertuples()},
        "degraded_by": {r.route_reason: int(r.n) for r in routes.itertuples()},
    }


# --- the report -------------------------------------------------------------------------------------


def sizes_line(sizes: list[int]) -> str:
    return (
        f"{len(sizes)} sessions, estimated tokens (3 bytes each): median {statistics.median(sizes):,.0f}, "
        f"min {sizes[0]:,}, max {sizes[-1]:,}, over 8192: {sum(s > 8192 for s in sizes)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a smaller corpus and faster clocks (about 4 min)")
    parser.add_argument(
        "--smoke", action="store_true", help="the smallest size, for the test suite (its figures mean little)"
    )
    parser.add_argument("--writer", action="store_true", help="only the DuckDB writer (3.), on the typical corpus")
    args = parser.parse_args()
    size = "smoke" if args.smoke else "quick" if args.quick else "full"
    throughput_scale = {"full": 50.0, "quick": 100.0, "smoke": 1000.0}[size]
    pathology_scale = {"full": 40.0, "quick": 60.0, "smoke": 1000.0}[size]
    typical_per_class = {"full": 8, "quick": 4, "smoke": 1}[size]  # x 5 size classes
    small_per_class = {"full": 4, "quick": 2, "smoke": 1}[size]  # x 6 size classes, beside the large sessions
    large_tokens = (50_000,) if size == "smoke" else (50_000, 70_000, 95_000, 120_000)
    writer_seconds = {"full": 5.0, "quick": 3.0, "smoke": 0.5}[size]
    writer_processes = {"full": [1, 4, 16], "quick": [1, 4], "smoke": [1]}[size]

    (ROOT / "bench" / "out").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "bench" / "out") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        typical = write_corpus(
            root / "typical", [(typical_per_class, turns, 1200) for turns in (4, 6, 8, 10, 12)], root / "typical.duckdb"
        )
        if args.writer:
            print(f"typical corpus: {sizes_line(corpus_sizes(typical))}")
            measure_writer(root / "typical.duckdb", writer_seconds, writer_processes)
            return
        big = [(1, round(tokens * 3 / 4000), 4000) for tokens in large_tokens]
        heavy = write_corpus(
            root / "heavy", [(small_per_class, t, 1200) for t in (4, 6, 8, 10, 12, 14)] + big, root / "heavy.duckdb"
        )
        print(f"corpora written and ingested in {time.perf_counter() - started:.1f} s")
        print(f"  typical: {sizes_line(corpus_sizes(typical))}")
        print(f"  heavy-tailed: {sizes_line(corpus_sizes(heavy))}")
        shutil.copy(root / "typical.duckdb", root / "writer.duckdb")

        # 1. throughput with 1, 2 and 4 hosts
        drains = []
        for n in (1, 2, 4):
            hosts = [cpu_host(f"cpu{i + 1}") for i in range(n)]
            path = root / f"throughput-{n}.duckdb"
            shutil.copy(root / "typical.duckdb", path)
            drains.append(drain(f"{n}-hosts", path, hosts, throughput_scale))
            print(f"  drained with {n} host(s) in {drains[-1].makespan_real_s:.1f} s real")
        per_hour = [d.figures["summarized"] / (d.makespan_sim_s / 3600) for d in drains]
        rows = []
        for d, sph in zip(drains, per_hour):
            n = len(d.hosts)
            busy = sum(d.server_model_s.values()) / (d.makespan_sim_s * n)
            rows.append(
                [
                    n,
                    d.figures["summarized"],
                    f"{d.makespan_real_s:.1f}",
                    f"{statistics.mean(d.store_real_s):.2f}",
                    f"{d.makespan_sim_s / 3600:.2f}",
                    f"{sph:.1f}",
                    f"{sph / per_hour[0]:.2f}",
                    f"{sph / per_hour[0] / n:.2f}",
                    f"{busy:.0%}",
                    f"{min(d.busy_sim_s.values()):,.0f}-{max(d.busy_sim_s.values()):,.0f}",
                    " ".join(f"{h}:{c}" for h, c in d.figures["by_host"].items()),
                ]
            )
        print(f"\n1. Throughput, CPU hosts of 50 prompt / 10 generated tokens/s, time scale {throughput_scale:g}x")
        print(
            table(
                [
                    "hosts",
                    "sessions",
                    "real s",
                    "store s/run",
                    "sim h",
                    "sessions/h",
                    "x 1 host",
                    "of linear",
                    "host busy",
                    "worker sim s",
                    "sessions by host",
                ],
                rows,
            )
        )

        # 2. the pathology: three cases at once
        cases = {
            "(a) cap off": [cpu_host("cpu-7b", raw_cap_tokens=None)],
            "(b) cap 8192": [cpu_host("cpu-7b")],
            "(c) cap 8192 + GPU host": [cpu_host("cpu-7b"), gpu_host("gpu")],
        }
        results: dict[str, Drain] = {}

        def run_case(label: str, hosts: list[SimHost], index: int) -> None:
            path = root / f"pathology-{index}.duckdb"
            shutil.copy(root / "heavy.duckdb", path)
            results[label] = drain(label, path, hosts, pathology_scale)

        threads = [threading.Thread(target=run_case, args=(k, v, i)) for i, (k, v) in enumerate(cases.items())]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rows = []
        for label in cases:
            d = results[label]
            f = d.figures
            rows.append(
                [
                    label,
                    f"{f['model_s']:,.0f}",
                    f"{f['longest_s']:.0f}",
                    f["timeouts"],
                    f"{f['degraded'] / f['sessions']:.0%}",
                    f"{f['raw']}/{f['degraded']}/{f['failed']}",
                    " ".join(f"{r}:{c}" for r, c in f["degraded_by"].items()) or "-",
                    f"{d.makespan_sim_s:,.0f}",
                    " ".join(f"{h}:{c}" for h, c in f["by_host"].items()),
                ]
            )
        print(f"\n2. The pathology on a 7B CPU host (50 prompt tokens/s), time scale {pathology_scale:g}x (sim s)")
        print(
            table(
                [
                    "case",
                    "model s",
                    "longest call s",
                    "timeouts",
                    "degraded",
                    "raw/degraded/failed",
                    "degraded by",
                    "wall s",
                    "sessions by host",
                ],
                rows,
            )
        )

        # 3. the DuckDB writer
        measured = measure_writer(root / "writer.duckdb", writer_seconds, writer_processes)
        per_host_s = per_hour[0] / 3600
        processes = [m for m in measured if m["mode"] == "processes" and m["side"] == "held"]
        rows = []
        for n in (1, 2, 4, 16):
            sustained = max((m for m in processes if m["workers"] <= n), key=lambda m: m["workers"])
            need_cpu = n * per_host_s
            rows.append(
                [
                    n,
                    f"{need_cpu:.4f}",
                    f"{sustained['runs_per_s']:.1f} ({sustained['workers']} processes)",
                    f"{sustained['runs_per_s'] / need_cpu:,.1f}",
                    f"{sustained['runs_per_s'] / (20 * need_cpu):,.1f}",
                ]
            )
        print(f"\nHeadroom: runs/s the writer sustains / runs/s N hosts need (CPU host: {per_hour[0]:.1f} sessions/h)")
        print(table(["hosts", "need runs/s", "writer runs/s", "headroom", "headroom, 20x hosts"], rows))

        errors = [e for d in drains + list(results.values()) for e in d.errors]
        if errors:
            print(f"\n{len(errors)} run errors, first: {errors[:3]}")


if __name__ == "__main__":
    main()
