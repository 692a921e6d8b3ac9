"""The work of `backlog`: the store's figures and every pending session placed as a sweep would
place it now, on the hosts in rotation at their measured speeds (`digest.backlog`)."""

from __future__ import annotations

from digest.backlog import Backlog, measure_backlog
from digest.circuit import CircuitPolicy
from digest.hosts import Fleet
from digest.scheduling import SweepPolicy
from resources.model_hosts import host_views, hosts_in_rotation
from resources.store import DigestStore


def measure(
    store: DigestStore,
    fleet: Fleet,
    circuit: CircuitPolicy,
    sweep: SweepPolicy,
    now_ms: int,
    embed_model: str | None = None,
) -> Backlog:
    """Only reads. A session queued or running is still pending here, priced in full: the ETA is
    the plan's estimate, not a forecast of runs already part done. `embed_model`: the model the
    search index's vectors are made by (None: no vectors, none counted)."""
    # The reads on one connection (an open and its closing checkpoint cost more than a read here);
    # every pending session is placed after it is let go: seconds of Python at 100,000 (BENCHMARKS §4).
    with store.file.held():
        available, _ = hosts_in_rotation(store, fleet, circuit, now_ms)
        views, _ = host_views(store, fleet, available, {})
        drain = store.backlog.drain(now_ms, sweep.idle_window_s)
        vectors = store.search_vectors.counts(embed_model) if embed_model else None
        candidates = store.backlog.pending_candidates()
    return measure_backlog(drain, candidates, views, now_ms, vectors)
