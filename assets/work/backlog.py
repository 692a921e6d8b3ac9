"""The work of `backlog`: the store's figures and every pending session placed as a sweep would
place it now, on the hosts in rotation at their measured speeds (`digest.backlog`)."""

from __future__ import annotations

from digest.backlog import Backlog, measure_backlog
from digest.circuit import CircuitPolicy
from digest.hosts import Fleet
from digest.scheduling import SweepPolicy
from resources.model_hosts import host_views, hosts_in_rotation
from resources.store import DigestStore


def measure(store: DigestStore, fleet: Fleet, circuit: CircuitPolicy, sweep: SweepPolicy, now_ms: int) -> Backlog:
    """Only reads. A session queued or running is still pending here, priced in full: the ETA is
    the plan's estimate, not a forecast of runs already part done."""
    available, _ = hosts_in_rotation(store, fleet, circuit, now_ms)
    views, _ = host_views(store, fleet, available, {})
    drain = store.backlog.drain(now_ms, sweep.idle_window_s)
    return measure_backlog(drain, store.backlog.pending_candidates(), views, now_ms)
