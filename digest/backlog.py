"""The backlog at a glance: what waits for a summary, how fast it drains, when it should end, and
whether it has stalled. Pure: the store's figures come in (`resources/store/backlog.py`), and the
pending sessions are priced and placed as a sweep would (`digest.hosts.assign_batch`), so the ETA
is the plan's own estimate at each host's measured speed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from digest.hosts import HostView, assign_batch
from digest.scheduling import Candidate


@dataclass(frozen=True)
class Drain:
    """What the store says of the backlog and its drain (epoch milliseconds)."""

    pending: int  # sessions with no summary, or one older than their turns (retired ones left out)
    active: int  # of them, active within the idle window (the churn gate holds them)
    backing_off: int  # of them, in failure backoff
    oldest_pending_ms: int | None  # when the longest-waiting pending session was ingested or changed
    last_finished_ms: int | None  # the newest summary a run wrote
    finished_last_hour: int  # summaries written by runs in the last hour
    finished_last_day: int
    model_seconds_last_hour: float  # model calls' seconds (every stage, cache replays left out)
    model_seconds_last_day: float
    summaries_by_tier: Mapping[str, int]
    summaries_by_verdict: Mapping[str, int]  # `none`: a summary with no text to judge
    resummaries_waiting: int = 0  # re-summaries asked for and not done; sweeps take them after `pending`


@dataclass(frozen=True)
class Backlog:
    drain: Drain
    now_ms: int
    hosts_in_rotation: tuple[str, ...]
    by_route: Mapping[str, int]  # pending, as a sweep would place them now
    by_host: Mapping[str, int]
    by_tier: Mapping[str, int]
    unplaced: int  # pending with no host in rotation to go to
    eta_s: float | None  # None: nothing placed (no host in rotation), 0: nothing pending
    # The search index's vectors (`store.search_vectors.counts`): model, documents, embedded, pending,
    # pending_accounts; None when no embedding provider is configured.
    vectors: Mapping[str, object] | None = None

    @property
    def oldest_pending_age_s(self) -> float | None:
        return _age_s(self.now_ms, self.drain.oldest_pending_ms)

    @property
    def since_last_finished_s(self) -> float | None:
        return _age_s(self.now_ms, self.drain.last_finished_ms)

    @property
    def waiting(self) -> int:
        """Pending past the churn gate: what a sweep should be working through."""
        return self.drain.pending - self.drain.active


def _age_s(now_ms: int, then_ms: int | None) -> float | None:
    return None if then_ms is None else max(0.0, (now_ms - then_ms) / 1000)


def measure_backlog(
    drain: Drain,
    candidates: Sequence[Candidate],
    views: Sequence[HostView],
    now_ms: int,
    vectors: Mapping[str, object] | None = None,
) -> Backlog:
    """`candidates`: every pending session not already queued or running (a run in flight is in
    its host's `queued_s`); `views`: the hosts in rotation. Each candidate is placed in turn, its
    estimate added to its host's queue before the next, as `assign_batch` places a sweep's batch;
    the ETA is the longest host queue over its concurrency."""
    placed = assign_batch(candidates, views)
    queued = {view.spec.name: view.queued_s for view in views}
    for item in placed:
        queued[item.host] += item.model_seconds_estimate
    eta = max((queued[v.spec.name] / v.spec.concurrency for v in views), default=None)
    return Backlog(
        drain=drain,
        now_ms=now_ms,
        hosts_in_rotation=tuple(v.spec.name for v in views),
        by_route=dict(sorted(Counter(str(item.route) for item in placed).items())),
        by_host=dict(sorted(Counter(item.host for item in placed).items())),
        by_tier=dict(sorted(Counter(str(item.tier) for item in placed).items())),
        unplaced=len(candidates) - len(placed),
        eta_s=eta,
        vectors=vectors,
    )


def stalled(backlog: Backlog, stall_after_s: float) -> str | None:
    """Why the backlog is stalled, or None: sessions wait past the churn gate, a model host is in
    rotation, and no summary has finished for `stall_after_s`, while the oldest of them has waited
    that long too (a backlog that has only just arrived is not stalled)."""
    if backlog.waiting <= 0 or not backlog.hosts_in_rotation:
        return None
    oldest = backlog.oldest_pending_age_s
    if oldest is None or oldest < stall_after_s:
        return None
    since = backlog.since_last_finished_s
    if since is not None and since < stall_after_s:
        return None
    last = "no summary has finished yet" if since is None else f"the last summary finished {since / 60:.0f} min ago"
    return (
        f"stalled backlog: {backlog.waiting} session(s) wait (the oldest {oldest / 60:.0f} min), "
        f"{len(backlog.hosts_in_rotation)} model host(s) in rotation ({', '.join(backlog.hosts_in_rotation)}), "
        f"and {last} (DIGEST_BACKLOG_STALL_S {stall_after_s:g} s)"
    )


def backlog_metadata(backlog: Backlog) -> dict[str, int | float | str]:
    """Flat numbers the Dagster UI plots across materializations (a figure with no value yet is left
    out), and a one-line `summary`."""
    d = backlog.drain
    out: dict[str, int | float | str] = {
        "pending": d.pending,
        "pending_active": d.active,
        "pending_backing_off": d.backing_off,
        "pending_unplaced": backlog.unplaced,
        "resummaries_waiting": d.resummaries_waiting,
        **{f"pending_route_{k}": v for k, v in backlog.by_route.items()},
        **{f"pending_host_{k}": v for k, v in backlog.by_host.items()},
        **{f"pending_tier_{k}": v for k, v in backlog.by_tier.items()},
        "finished_last_hour": d.finished_last_hour,
        "finished_last_day": d.finished_last_day,
        "model_seconds_last_hour": round(d.model_seconds_last_hour, 1),
        "model_seconds_last_day": round(d.model_seconds_last_day, 1),
        "hosts_in_rotation": len(backlog.hosts_in_rotation),
        **{f"summaries_tier_{k}": v for k, v in d.summaries_by_tier.items()},
        **{f"summaries_verdict_{k}": v for k, v in d.summaries_by_verdict.items()},
    }
    figures = {
        "oldest_pending_age_s": backlog.oldest_pending_age_s,
        "since_last_finished_s": backlog.since_last_finished_s,
        "eta_s": backlog.eta_s,
    }
    out.update({k: round(v, 1) for k, v in figures.items() if v is not None})
    if backlog.vectors is not None:
        out.update(
            {f"vectors_{k}": backlog.vectors[k] for k in ("documents", "embedded", "pending", "pending_accounts")}
        )
    out["summary"] = backlog_line(backlog)
    return out


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def backlog_line(backlog: Backlog) -> str:
    """One sentence: pending, the oldest's age, the drain in the last hour and day, the ETA."""
    d = backlog.drain
    if not d.pending:
        head = "nothing pending"
    else:
        oldest = backlog.oldest_pending_age_s
        head = f"{d.pending} pending" + (f", the oldest waiting {_duration(oldest)}" if oldest is not None else "")
    drain = (
        f"{d.finished_last_hour} finished in the last hour ({_duration(d.model_seconds_last_hour)} of model time), "
        f"{d.finished_last_day} in the last day"
    )
    if d.resummaries_waiting:
        head += f" ({d.resummaries_waiting} re-summaries asked for wait after them)"
    vectors = f"; {vectors_line(backlog.vectors)}" if backlog.vectors is not None else ""
    if not d.pending:
        return f"{head}; {drain}{vectors}"
    if backlog.eta_s is None:
        eta = "no model host in rotation to estimate an end"
    else:
        eta = f"about {_duration(backlog.eta_s)} of model time left at the hosts' measured speeds"
    return f"{head}; {drain}; {eta}{vectors}"


def vectors_line(vectors: Mapping[str, object]) -> str:
    """The search vectors' backlog in a clause: chunks pending, those of cards and summaries first."""
    if not vectors["pending"]:
        return f"every one of {vectors['documents']} search chunks embedded ({vectors['model']})"
    return (
        f"{vectors['pending']} of {vectors['documents']} search chunks wait for a vector ({vectors['model']}), "
        f"{vectors['pending_accounts']} of them cards and summaries, embedded first"
    )
