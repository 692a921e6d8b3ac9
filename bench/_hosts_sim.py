"""The simulated model hosts of bench/hosts.py: each a local OpenAI-protocol server
(tests/model_server.py) whose answer takes its model time divided by a time scale; the seeded
corpora they summarize; the store file the bench's threads share; and one summary run's store work
around its model calls, as the `session_summaries` asset does it.

Not a benchmark itself (tests/test_bench_smoke.py runs every bench/*.py but the ones named `_*`).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from digest.hosts import Fleet, HostSpec
from digest.ingest import ingest_paths
from digest.scheduling import SweepPolicy, failure_backoff_s, now_ms
from digest.synthesis import Limits, estimate_raw_tokens, summarize_session
from resources.response_cache import CachedChatClient
from resources.store import DigestStore, RunLedger, StoreFile
from tests.model_server import GOOD_SUMMARY, Behaviour, Received
from tests.synthetic_export import write_export

SERVER_BYTES_PER_TOKEN = 3.5  # what the simulated servers count (SmolLM2 on the demo's prompts)
TIMEOUT_S = 180.0  # DIGEST_SUMMARY_TIMEOUT_S
MAX_OUTPUT_TOKENS = 1024  # DIGEST_SUMMARY_MAX_OUTPUT_TOKENS
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
