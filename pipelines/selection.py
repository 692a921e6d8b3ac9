"""The one selection every summary sweep uses: the sensor's tick, `session-digest sweep` and
`session-digest plan` all ask `next_summary_batch`, so they always agree, on the sessions and on
the model host each one goes to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from digest.hosts import Assignment, Fleet, HostView, assign_batch, assign_host
from digest.scheduling import DEFAULT_SECONDS_PER_TOKEN, SweepPolicy, choose_batch
from resources.store import DigestStore

# How many of the newest and oldest eligible sessions to size up per tick: enough to fill the
# batch when the largest ones do not fit the time budget, few enough to keep the tick cheap.
LOOKAHEAD = 10


@dataclass(frozen=True)
class SweepSelection:
    batch: list[Assignment]
    pending: int
    active: int
    backing_off: int
    seconds_per_token: dict[str, float]  # by host
    throughput_measured: dict[str, bool]  # by host: from its ledger, or the default
    hosts_unavailable: list[str]  # declared, but out of rotation (their circuit is open)

    @property
    def skip_reason(self) -> str | None:
        if self.batch:
            return None
        if not self.pending:
            return "no session needs a summary"
        if not self.seconds_per_token:
            return (
                f"{self.pending} pending, no model host available: {', '.join(self.hosts_unavailable)} out of rotation"
            )
        return (
            f"{self.pending} pending, none eligible: {self.active} active within the idle window, "
            f"{self.backing_off} in failure backoff"
        )


def host_views(
    store: DigestStore, fleet: Fleet, available: list[str], queued_s: Mapping[str, float]
) -> tuple[list[HostView], dict[str, bool]]:
    """What the assignment knows of each available host: its bounds, its measured speed (seconds
    per estimated token over its recent calls, else the CPU-class default) and its queue."""
    views, measured = [], {}
    for name in available:
        speed = store.seconds_per_token(fleet.host(name).model, host=name)
        measured[name] = speed is not None
        views.append(
            HostView(fleet.host(name), fleet.limits(name), speed or DEFAULT_SECONDS_PER_TOKEN, queued_s.get(name, 0.0))
        )
    return views, measured


def next_summary_batch(
    store: DigestStore,
    fleet: Fleet,
    policy: SweepPolicy,
    now_ms: int,
    exclude: set[str] = frozenset(),
    queued_s: Mapping[str, float] | None = None,
    available: list[str] | None = None,
) -> SweepSelection:
    """`exclude`: partition keys already queued or running; `queued_s`: the estimated model
    seconds queued or running on each host; `available`: the hosts in rotation (default: all).

    The sweep's budget (`max_sessions`, `model_seconds`) is per available host: N hosts take N
    times the work a tick."""
    available = fleet.names if available is None else [n for n in fleet.names if n in available]
    views, measured = host_views(store, fleet, available, queued_s or {})
    scale = max(1, len(views))
    queue = store.summary_queue(
        now_ms,
        policy.idle_window_s,
        newest=policy.max_sessions * LOOKAHEAD * scale,
        oldest=policy.oldest_share * LOOKAHEAD * scale,
    )
    candidates = [c for c in queue["candidates"] if c.partition_key not in exclude]
    # Sized on the host each would go to alone, then chosen within the budget, then placed in
    # order, each one's time added to its host's queue before the next.
    alone = [a for a in (assign_host(c, views) for c in candidates) if a is not None]
    budget = replace(policy, max_sessions=policy.max_sessions * scale, model_seconds=policy.model_seconds * scale)
    chosen = [item.candidate for item in choose_batch([a.planned for a in alone], budget)]
    return SweepSelection(
        batch=assign_batch(chosen, views),
        pending=queue["pending"],
        active=queue["active"],
        backing_off=queue["backing_off"],
        seconds_per_token={v.spec.name: v.seconds_per_token for v in views},
        throughput_measured=measured,
        hosts_unavailable=[n for n in fleet.names if n not in available],
    )
