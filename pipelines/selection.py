"""The one selection every summary sweep uses: the sensor's tick, `session-digest sweep` and
`session-digest plan` all ask `next_summary_batch`, so they always agree, on the sessions and on
the model host each one goes to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from digest.circuit import CircuitPolicy
from digest.hosts import Assignment, Fleet, HostView, assign_batch, assign_host
from digest.scheduling import (
    Candidate,
    SweepPolicy,
    choose_batch,
    plan_session,
    upgrade_due,
)
from digest.synthesis import Route
from resources.model_hosts import host_views
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
    # Held back: only a host out of rotation takes them raw, and they are not degraded for that.
    waiting_for_host: int = 0
    upgrades: int = 0  # of the batch, current degraded summaries made again (`Candidate.summary_step`)
    in_flight: int = 0  # past both gates, but queued or running already
    resummaries: int = 0  # of the batch, re-summaries asked for (`Candidate.resummary`)
    # With nothing pending: upgrades and re-summaries the gates hold back (`Summaries.held_later_work`).
    held_later: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def skip_reason(self) -> str | None:
        if self.batch:
            return None
        held = {kind: n for kind, n in self.held_later.items() if n["active"] or n["backing_off"]}
        if not self.pending and held:
            waits = "; ".join(
                f"{n['active'] + n['backing_off']} {kind.replace('resummaries', 're-summaries')} "
                f"({n['active']} active within the idle window, {n['backing_off']} in failure backoff)"
                for kind, n in held.items()
            )
            return f"no session needs a first summary; waiting behind the gates: {waits}"
        if not self.pending:
            return "no session needs a summary"
        if not self.seconds_per_token:
            return (
                f"{self.pending} pending, no model host available: {', '.join(self.hosts_unavailable)} out of rotation"
            )
        return (
            f"{self.pending} pending, none eligible: {self.active} active within the idle window, "
            f"{self.backing_off} in failure backoff, {self.waiting_for_host} waiting for a host out of rotation "
            f"({', '.join(self.hosts_unavailable) or 'none'}), {self.in_flight} queued or running"
        )


def next_summary_batch(
    store: DigestStore,
    fleet: Fleet,
    policy: SweepPolicy,
    now_ms: int,
    exclude: set[str] = frozenset(),
    queued_s: Mapping[str, float] | None = None,
    available: list[str] | None = None,
    probing: Sequence[str] = (),
    circuit: CircuitPolicy | None = None,
    later: bool = True,
) -> SweepSelection:
    """`exclude`: partition keys already queued or running; `queued_s`: the estimated model
    seconds queued or running on each host; `available`: the hosts in rotation (default: all);
    `probing`: those of them half-open, which get one run, their probe. With `circuit`, the probe
    of a host a session is placed on is taken (a session whose probe another tick took first is
    left for later); without (`plan`), nothing is taken. `later` off: first summaries alone, no
    upgrade or re-summary (a drain's first pass: those come after the mini-summary backfill).

    The sweep's budget (`max_sessions`, `model_seconds`) is per available host: N hosts take N
    times the work a tick."""
    available = fleet.names if available is None else [n for n in fleet.names if n in available]
    views, measured = host_views(store, fleet, available, queued_s or {})
    scale = max(1, len(views))
    queue = store.summaries.summary_queue(
        now_ms,
        policy.idle_window_s,
        newest=policy.max_sessions * LOOKAHEAD * scale,
        oldest=policy.oldest_share * LOOKAHEAD * scale,
        in_flight=list(exclude),
    )
    out_of_rotation, _ = host_views(store, fleet, [n for n in fleet.names if n not in available], {})
    alone, waiting = sized_alone(queue["candidates"], views, out_of_rotation, exclude)
    if not alone and later:
        # First summaries first: a degraded summary is made again only when no session waits for its
        # first (or a stale one's), so new sessions never queue behind upgrades.
        upgrades = store.summaries.upgrade_queue(now_ms, policy.idle_window_s, policy.max_sessions * LOOKAHEAD * scale)
        alone, _ = sized_alone(upgrades, views, out_of_rotation, exclude)
    if not alone and later:
        # Re-summaries asked for (`sweep --resummarize`) last: after new work and upgrades.
        resummaries = store.resummaries.resummary_queue(
            now_ms, policy.idle_window_s, policy.max_sessions * LOOKAHEAD * scale
        )
        alone, _ = sized_alone(resummaries, views, out_of_rotation, exclude)
    # Nothing to launch and nothing pending: say what later work waits behind the gates, if any.
    held = store.summaries.held_later_work(now_ms, policy.idle_window_s) if not alone and not queue["pending"] else {}
    budget = replace(policy, max_sessions=policy.max_sessions * scale, model_seconds=policy.model_seconds * scale)
    chosen = [item.candidate for item in choose_batch([a.planned for a in alone], budget)]
    batch = assign_batch(chosen, views, at_most={name: 1 for name in probing})
    probed = sorted({a.host for a in batch if a.host in probing})
    if probed and circuit is not None:
        taken = set(store.hosts.available_hosts(probed, now_ms, circuit))
        batch = [a for a in batch if a.host not in probed or a.host in taken]
    return SweepSelection(
        batch=batch,
        pending=queue["pending"],
        active=queue["active"],
        backing_off=queue["backing_off"],
        seconds_per_token={v.spec.name: v.seconds_per_token for v in views},
        throughput_measured=measured,
        hosts_unavailable=[n for n in fleet.names if n not in available],
        waiting_for_host=waiting,
        in_flight=queue["in_flight"],
        upgrades=sum(a.candidate.summary_step is not None for a in batch),
        resummaries=sum(a.candidate.resummary for a in batch),
        held_later=held,
    )


def sized_alone(
    candidates: Sequence[Candidate], views: Sequence[HostView], out_of_rotation: Sequence[HostView], exclude: set[str]
) -> tuple[list[Assignment], int]:
    """Each candidate not in flight (`exclude`) sized on the host it would go to alone (chosen within
    the budget, then placed in order, each one's time added to its host's queue before the next),
    and how many wait for a host out of rotation."""
    alone, waiting = [], 0
    for candidate in candidates:
        if candidate.partition_key in exclude:
            continue
        assignment = assign_host(candidate, views)
        # Not degraded for want of a host that is only away: it waits for the host that takes it raw.
        if (assignment is None or assignment.route != Route.WITHIN_CAP) and admitted_raw(candidate, out_of_rotation):
            waiting += 1
        elif assignment is not None:
            alone.append(assignment)
    return alone, waiting


def named_sessions_batch(
    store: DigestStore,
    fleet: Fleet,
    session_ids: Sequence[str],
    available: list[str] | None = None,
    exclude: set[str] = frozenset(),
) -> SweepSelection:
    """The sessions named by hand (`session-digest sweep --session`), each placed on a host in
    rotation, outside the budget and with no churn gate or failure backoff (the reference's explicit
    single-session run); a session whose degraded summary is due an upgrade is one. Whether each
    still needs a summary is asked just before its run (`nothing_to_summarize`). `exclude`:
    partition keys left out (a staged reply finishes theirs with no model call)."""
    candidates = []
    for session_id in session_ids:
        candidate = store.summaries.summary_candidate(session_id)
        if candidate is None or candidate.partition_key in exclude:  # no turns left, or staged
            continue
        standing = store.summaries.summary_standing(session_id)
        current = standing["summary_revision"] == standing["input_revision"]
        if current and upgrade_due(standing["summary_step"], standing["coverage_step"]):
            candidate = replace(candidate, summary_step=standing["summary_step"])
        candidates.append(candidate)
    return _all_placed(store, fleet, candidates, len(session_ids), available)


def priced_resummaries(
    store: DigestStore, fleet: Fleet, session_ids: Sequence[str], available: list[str] | None = None
) -> SweepSelection:
    """Re-summaries of these sessions (`plan --resummarize`), each placed on a host in rotation and
    sized as a sweep would, all of them: no budget (the sweeps take them a budget at a time)."""
    return _all_placed(store, fleet, store.resummaries.candidates(list(session_ids)), len(session_ids), available)


def _all_placed(
    store: DigestStore, fleet: Fleet, candidates: Sequence[Candidate], asked: int, available: list[str] | None
) -> SweepSelection:
    """Every candidate placed on a host in rotation (default: all): no budget, churn gate or backoff."""
    available = fleet.names if available is None else [n for n in fleet.names if n in available]
    views, measured = host_views(store, fleet, available, {})
    batch = assign_batch(candidates, views)
    return SweepSelection(
        batch=batch,
        pending=asked,
        active=0,
        backing_off=0,
        seconds_per_token={v.spec.name: v.seconds_per_token for v in views},
        throughput_measured=measured,
        hosts_unavailable=[n for n in fleet.names if n not in available],
        upgrades=sum(a.candidate.summary_step is not None for a in batch),
        resummaries=sum(a.candidate.resummary for a in batch),
    )


def batch_price(batch: Sequence[Assignment]) -> dict:
    """A batch as `plan` shows it: by route and host, the estimated prompt tokens and model seconds,
    and each session's placement and size."""
    routes: dict[str, int] = {}
    hosts: dict[str, int] = {}
    for item in batch:
        routes[item.tier] = routes.get(item.tier, 0) + 1
        hosts[item.host] = hosts.get(item.host, 0) + 1
    return {
        "sessions": len(batch),
        "by_route": routes,
        "by_host": hosts,
        "estimated_prompt_tokens": sum(i.prompt_tokens_estimate for i in batch),
        "estimated_model_seconds": round(sum(i.model_seconds_estimate for i in batch), 1),
        "sessions_detail": [
            {
                "partition": i.candidate.partition_key,
                "host": i.host,
                "host_reason": i.reason,
                "tier": i.tier,
                "route": i.route,
                "prompt_tokens_estimate": i.prompt_tokens_estimate,
                "model_seconds_estimate": round(i.model_seconds_estimate, 1),
            }
            for i in batch
        ],
    }


def admitted_raw(candidate: Candidate, views: Sequence[HostView]) -> bool:
    return any(plan_session(candidate, v.limits, v.seconds_per_token).route == Route.WITHIN_CAP for v in views)
