"""What a placement knows of the model hosts, read from the store: which are in rotation (their
circuits), and each one's bounds, measured speed and queue. The sweeps' selection, a run placing
itself and the backlog all read them here."""

from __future__ import annotations

from collections.abc import Mapping

from digest.circuit import CircuitPolicy, CircuitState
from digest.hosts import Fleet, HostView
from digest.scheduling import DEFAULT_SECONDS_PER_TOKEN
from resources.store import DigestStore


def host_views(
    store: DigestStore, fleet: Fleet, available: list[str], queued_s: Mapping[str, float]
) -> tuple[list[HostView], dict[str, bool]]:
    """What the assignment knows of each available host: its bounds (with its measured bytes per
    token), its measured speed (seconds per estimated token over its recent calls, else the
    CPU-class default) and its queue."""
    views, measured = [], {}
    for name in available:
        speed = store.speed.seconds_per_token(fleet.host(name).model, host=name)
        measured[name] = speed is not None
        views.append(
            HostView(
                fleet.host(name),
                fleet.measured_limits(store, name),
                speed or DEFAULT_SECONDS_PER_TOKEN,
                queued_s.get(name, 0.0),
            )
        )
    return views, measured


def hosts_in_rotation(store: DigestStore, fleet: Fleet, policy: CircuitPolicy, now_ms: int):
    """(the hosts a run may go to now, those of them half-open): a host whose circuit is open is
    out of rotation; a half-open one is in for its one probe run (taken by `next_summary_batch`
    when it places a session there). Only reads."""
    available = store.hosts.available_hosts(fleet.names, now_ms, policy, probe=False)
    circuits = store.hosts.host_circuits()
    probing = [n for n in available if n in circuits and circuits[n].state(now_ms) == CircuitState.HALF_OPEN]
    return available, probing


def closed_hosts(store: DigestStore, fleet: Fleet, policy: CircuitPolicy, now_ms: int) -> list[str]:
    """The hosts whose circuit is closed: where mini-summary and graph runs go (a half-open host's
    one probe is the summary sensor's to take)."""
    available, probing = hosts_in_rotation(store, fleet, policy, now_ms)
    return [name for name in available if name not in probing]
