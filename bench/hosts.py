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
import math
import multiprocessing
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

from assets.work.runs import RunFacts  # noqa: E402
from assets.work.sessions import summarize_partition  # noqa: E402
from digest.circuit import CircuitPolicy  # noqa: E402
from digest.hosts import Fleet, HostSpec  # noqa: E402
from digest.ingest import ingest_paths  # noqa: E402
from digest.model_api import ChatReply, ModelError  # noqa: E402
from digest.scheduling import SweepPolicy, failure_backoff_s, now_ms  # noqa: E402
from digest.settings import Settings, load_settings  # noqa: E402
from digest.synthesis import Limits, estimate_raw_tokens, summarize_session  # noqa: E402
from digest.tags import MODEL_HOST_REASON_TAG, MODEL_HOST_TAG  # noqa: E402
from pipelines.selection import next_summary_batch  # noqa: E402
from resources.model_clients import OpenAIChatClient  # noqa: E402
from resources.model_hosts import ModelHosts, hosts_in_rotation  # noqa: E402
from resources.response_cache import CachedChatClient  # noqa: E402
from resources.store import DigestStore, RunLedger, StoreFile  # noqa: E402
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer, Received  # noqa: E402
from tests.synthetic_export import write_export  # noqa: E402

SERVER_BYTES_PER_TOKEN = 3.5  # what the simulated servers count (SmolLM2 on the demo's prompts)
TIMEOUT_S = 180.0  # DIGEST_SUMMARY_TIMEOUT_S
MAX_OUTPUT_TOKENS = 1024  # DIGEST_SUMMARY_MAX_OUTPUT_TOKENS
SENSOR_INTERVAL_S = 60.0  # summary_sensor's minimum_interval_seconds
REPLY = Behaviour.reply(GOOD_SUMMARY)
# The server reports len(content) // 4 completion tokens: the model time counts the same.
COMPLETION_TOKENS = max(1, len(REPLY.content) // 4)


@dataclass(frozen=True)
class SimHost:
    name: str
    prompt_rate: float  # prompt tokens/s
    generation_rate: float  # completion tokens/s
    context_limit_tokens: int = 131072
    safe_limit_tokens: int = 131072 * 3 // 4  # the default safe band
    raw_cap_tokens: int | None = 8192
    concurrency: int = 1

    @property
    def model(self) -> str:
        return f"sim-{self.name}"

    def spec(self) -> HostSpec:
        # The estimate is pinned at 3 bytes/token so the routing is the same on every run.
        return HostSpec(
            self.name,
            "openai",
            None,
            self.model,
            self.context_limit_tokens,
            self.safe_limit_tokens,
            self.raw_cap_tokens,
            self.concurrency,
            bytes_per_token=3.0,
        )


def fleet(hosts: list[SimHost], scale: float) -> Fleet:
    """The hosts as the project declares them; the summary deadline on the simulated clock."""
    return Fleet(tuple(h.spec() for h in hosts), max_output_tokens=MAX_OUTPUT_TOKENS, timeout_s=TIMEOUT_S / scale)


def cpu_host(name: str, raw_cap_tokens: int | None = 8192) -> SimHost:
    """A 7B model on a few CPU cores."""
    return SimHost(name, prompt_rate=50.0, generation_rate=10.0, raw_cap_tokens=raw_cap_tokens)


def gpu_host(name: str) -> SimHost:
    """A long-context GPU box, 20x the CPU host; its safe band is the context less the answer."""
    return SimHost(
        name,
        prompt_rate=1000.0,
        generation_rate=200.0,
        safe_limit_tokens=131072 - MAX_OUTPUT_TOKENS,
        raw_cap_tokens=None,
    )


def fixed_rate(host: SimHost, scale: float, model_s: list[float]) -> Callable[[Received], Behaviour]:
    """The server's answer to one chat: refused over the context, else a summary after the model time."""

    def script(received: Received) -> Behaviour:
        tokens = math.ceil(len(received.prompt.encode("utf-8")) / SERVER_BYTES_PER_TOKEN)
        if tokens > host.context_limit_tokens:
            return Behaviour.overflow(tokens, host.context_limit_tokens)
        seconds = tokens / host.prompt_rate + COMPLETION_TOKENS / host.generation_rate
        model_s.append(seconds)
        return dataclasses.replace(REPLY, delay_s=seconds / scale, prompt_tokens=tokens)

    return script


# --- the corpus ----------------------------------------------------------------------------------


def write_corpus(root: Path, classes: list[tuple[int, int, int]], store_path: Path) -> DigestStore:
    """`classes`: (sessions, turns each, bytes a turn); one seeded export each, ingested together."""
    folders = []
    for seed, (sessions, turns, turn_bytes) in enumerate(classes, start=100):
        folder = root / f"export-{seed}"
        write_export(folder, sessions, turns, summarized_share=0.0, turn_bytes=turn_bytes, seed=seed)
        folders.append(folder)
    store = DigestStore(store_path)
    store.migrate()
    ingest_paths(folders, store)
    return store


def corpus_sizes(store: DigestStore) -> list[int]:
    """Each session's raw prompt in estimated tokens (3 bytes each), the project's unit."""
    limits = fleet([cpu_host("x")], 1.0).limits()
    rows = store.query("SELECT raw_bytes, turn_count FROM sessions").itertuples()
    return sorted(estimate_raw_tokens(r.raw_bytes, r.turn_count, limits) for r in rows)


class BenchFile(StoreFile):
    """The store's file as the bench's threads share it: one connection at a time in this process
    (the exclusion DuckDB's file lock gives a run's process; two threads of one process opening and
    closing the file at once can fail with DuckDB 1.5's "Unique file handle conflict"), each
    opening of the file counted (read or write, each one takes the file's lock)."""

    _locks: dict[Path, threading.RLock] = {}

    def __init__(self, path):
        super().__init__(path)
        self.connections = 0
        self._lock = self._locks.setdefault(self.path.resolve(), threading.RLock())

    @contextmanager
    def connect(self, read_only: bool = False):
        with self._lock:
            with super().connect(read_only) as con:
                yield con

    def _open(self, read_only: bool):
        self.connections += 1
        return super()._open(read_only)


# --- one summary run's work, as the session_summaries asset does it -------------------------------


@dataclass(frozen=True)
class Job:
    partition_key: str
    host: str
    reason: str
    estimate_s: float


def summary_run(store: DigestStore, client, limits: Limits, job: Job, run_id: str) -> None:
    """The store work of one `session_summaries` run around its model calls, in its order, with
    DIGEST_RESPONSE_CACHE=off (the sequence with the most writes: the staged reply is dropped),
    each store method on a connection of its own (the writer's "per method" side)."""
    session = store.sessions.session_by_partition(job.partition_key)
    session_id, revision = session["session_id"], session["input_revision"]
    store.summaries.summary_row(session_id)  # the asset's check for an imported summary of these turns
    holder = store.summaries.claim_summary_lease(session_id, run_id, now_ms(), 2 * limits.timeout_s + 120)
    assert holder is None, f"{session_id} leased twice"
    try:
        store.summaries.summary_standing(session_id)
        turns = store.sessions.load_turns([session_id])
        staged = CachedChatClient(
            client, store.cache, {"provider": "openai"}, reuse=False, session=(session_id, revision)
        )
        result = summarize_session(turns, staged, limits, RunLedger(store, run_id, host=job.host))
        if result.summary is None and result.host_failure:
            return  # the host's fault, on its circuit: the session is not backed off, the next tick places it again
        if result.summary is None:
            store.summaries.record_summary_failure(
                session_id, revision, result.failure, now_ms(), lambda n: failure_backoff_s(n, SweepPolicy())
            )
            return
        store.summaries.write_summary(result.summary, run_id=run_id, host=job.host, host_reason=job.reason)
        store.cache.drop_staged_replies(session_id)
        store.summaries.clear_summary_failures(session_id)
    finally:
        store.summaries.release_summary_lease(session_id, run_id)


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


# --- the DuckDB writer ------------------------------------------------------------------------------


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


# --- the report -------------------------------------------------------------------------------------


def table(header: list[str], rows: list[list]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


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
