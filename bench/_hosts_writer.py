"""The DuckDB writer's headroom for bench/hosts.py (its part 3.): summary runs back to back with no
model time, from threads of one process and from separate processes, each store method on its own
connection (the code before) beside the run's own work on one held connection a phase.

Not a benchmark itself (tests/test_bench_smoke.py runs every bench/*.py but the ones named `_*`).
"""

from __future__ import annotations

import math
import multiprocessing
import queue
import threading
import time
from pathlib import Path

from _hosts_sim import COMPLETION_TOKENS, REPLY, SERVER_BYTES_PER_TOKEN, BenchFile, Job, cpu_host, fleet, summary_run
from _text_table import table

from assets.work.runs import RunFacts
from assets.work.sessions import summarize_partition
from digest.circuit import CircuitPolicy
from digest.hosts import HostSpec
from digest.model_api import ChatReply
from digest.scheduling import SweepPolicy
from digest.settings import Settings, load_settings
from digest.tags import MODEL_HOST_REASON_TAG, MODEL_HOST_TAG
from resources.model_hosts import ModelHosts
from resources.store import DigestStore


class InstantClient:
    """A reply at once: only the store's work is timed."""

    model = "bench-instant"
    streaming = False

    def chat(self, prompt: str, *, schema, max_output_tokens: int, timeout_s: float, stall_s=None) -> ChatReply:
        tokens = math.ceil(len(prompt.encode("utf-8")) / SERVER_BYTES_PER_TOKEN)
        return ChatReply(REPLY.content, tokens, COMPLETION_TOKENS, duration_s=0.0, finish_reason="stop")

    def count_tokens(self, text: str) -> int | None:
        return None  # no tokenizer: the estimate routes


class InstantHosts(ModelHosts):
    """Model hosts that all answer at once (`InstantClient`)."""

    def _provider_client(self, spec: HostSpec, progress=None) -> InstantClient:
        return InstantClient()


def instant_settings(home: str) -> Settings:
    """One host as the writer's "per method" side has it: context 131,072, raw cap 8192, 3 bytes a
    token, no response cache (the staged reply dropped: the most writes)."""
    return load_settings(
        {
            "DIGEST_HOME": home,
            "DIGEST_MODEL_PROVIDER": "openai",
            "DIGEST_CONTEXT_LIMIT_TOKENS": "131072",
            "DIGEST_RAW_CAP_TOKENS": "8192",
            "DIGEST_BYTES_PER_TOKEN": "3",
            "DIGEST_RESPONSE_CACHE": "off",
        }
    )


def writer_loop(path: str, keys: list[str], seconds: float, barrier, results, tag: str, side: str) -> None:
    """Summary runs back to back for `seconds` after every writer is ready; (runs, connections, errors).
    `side`: "per method", the store work of a run with each method on its own connection
    (`summary_run`, the code before one connection per phase); "held", the run's own work
    (`summarize_partition`: one held connection before the model call and one after)."""
    store = DigestStore(BenchFile(path))
    limits = fleet([cpu_host("writer")], 1.0).limits()
    client = InstantClient()
    settings = instant_settings(str(Path(path).parent))
    host = InstantHosts(settings).fleet.host().name
    tags = {MODEL_HOST_TAG: host, MODEL_HOST_REASON_TAG: "bench"}  # placed, as a sweep's run is
    runs, errors = 0, 0
    barrier.wait()
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        key, run_id = keys[runs % len(keys)], f"{tag}-{runs}"
        try:
            if side == "held":
                outcome = summarize_partition(
                    store, InstantHosts(settings), RunFacts(run_id, tags), key, SweepPolicy(), CircuitPolicy()
                )
                assert outcome.row is not None, outcome
            else:
                summary_run(store, client, limits, Job(key, "writer", "bench", 0.0), run_id)
        except Exception:  # a lock wait past LOCK_WAIT_S, a conflict: counted
            errors += 1
        runs += 1
    results.put((runs, store.file.connections, errors))


def writer_headroom(path: Path, workers: int, mode: str, seconds: float, side: str = "per method") -> dict:
    keys = DigestStore(path).sessions.partition_keys()
    slices = [keys[i::workers] for i in range(workers)]
    if mode == "threads":
        barrier, results = threading.Barrier(workers + 1), queue.Queue()
        starters = [
            threading.Thread(target=writer_loop, args=(str(path), s, seconds, barrier, results, f"t{i}", side))
            for i, s in enumerate(slices)
        ]
    else:
        context = multiprocessing.get_context("spawn")
        barrier, results = context.Barrier(workers + 1), context.Queue()
        starters = [
            context.Process(target=writer_loop, args=(str(path), s, seconds, barrier, results, f"p{i}", side))
            for i, s in enumerate(slices)
        ]
    for s in starters:
        s.start()
    barrier.wait()  # every writer has imported and opened its store
    rows = [results.get(timeout=seconds + 300) for _ in starters]
    for s in starters:
        s.join()
    runs = sum(r[0] for r in rows)
    return {
        "side": side,
        "mode": mode,
        "workers": workers,
        "runs": runs,
        "runs_per_s": runs / seconds,
        "connections_per_run": sum(r[1] for r in rows) / max(1, runs),
        "errors": sum(r[2] for r in rows),
    }


def measure_writer(path: Path, seconds: float, processes: list[int]) -> list[dict]:
    """Both sides from threads of one process and from separate processes (a Dagster run is a
    process), each on the same file; printed as a table."""
    measured = []
    for side in ("per method", "held"):
        for mode, counts in (("threads", [1, 4]), ("processes", processes)):
            for workers in counts:
                measured.append(writer_headroom(path, workers, mode, seconds, side))
    print(f"\n3. The DuckDB writer: summary runs back to back, no model time, {seconds:g} s each")
    print(
        table(
            ["side", "writers", "runs", "runs/s", "connections/run", "errors"],
            [
                [
                    m["side"],
                    f"{m['workers']} {m['mode']}",
                    m["runs"],
                    f"{m['runs_per_s']:.1f}",
                    f"{m['connections_per_run']:.1f}",
                    m["errors"],
                ]
                for m in measured
            ],
        )
    )
    return measured
