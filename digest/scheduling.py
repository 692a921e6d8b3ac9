"""Which sessions the next sweep summarizes: the churn gate, failure backoff and the budget.

The original caps a sweep at 5 sessions and skips sessions active in the last 10 minutes; its
retry counter is written but never read, so a failing session is retried every sweep. Here a
failure backs the session off (30 minutes, doubling to 24 hours), and a sweep is bounded by an
estimated model-time budget as well as a count, so one tick never queues hours of CPU work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from digest.backoff import doubling_backoff_s
from digest.summary_output import SourceTier
from digest.synthesis import Limits, Route, estimate_compact_tokens, estimate_raw_tokens, raw_route

# Before the ledger has any successful call: 50 estimated tokens a second, a CPU-class host.
DEFAULT_SECONDS_PER_TOKEN = 1 / 50


@dataclass(frozen=True)
class SweepPolicy:
    max_sessions: int = 5
    model_seconds: float = 1800.0  # the estimated model time one sweep may queue
    idle_window_s: float = 600.0  # sessions active more recently than this wait (churn gate)
    oldest_share: int = 1  # of `max_sessions`, slots kept for the oldest pending sessions
    backoff_base_s: float = 1800.0
    backoff_max_s: float = 86400.0
    backlog_refresh_s: float = 300.0  # the summary sensor refreshes the `backlog` asset at most this often
    backlog_stall_s: float = 3600.0  # nothing finished this long, with sessions waiting: a stalled backlog


def failure_backoff_s(failures: int, policy: SweepPolicy) -> float:
    """30 min after the first failure, doubling each time, never more than 24 h."""
    if failures < 1:
        return 0.0
    return doubling_backoff_s(failures, policy.backoff_base_s, policy.backoff_max_s)


def now_ms() -> int:
    """The wall clock in epoch milliseconds, the unit of every stored timestamp."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Candidate:
    partition_key: str
    session_id: str
    last_activity_ms: int | None
    turn_count: int
    raw_bytes: int  # the turn documents alone
    compact_bytes: int  # sum over turns of min(document or mini summary, 280 chars)
    mini_summary_count: int
    # An upgrade: the coverage step its current degraded summary was made at (`coverage_step`);
    # None: the session has no summary of its current turns.
    summary_step: int | None = None
    # A re-summary asked for (`digest.resummary`): its current summary made again.
    resummary: bool = False


@dataclass(frozen=True)
class PlannedSession:
    candidate: Candidate
    route: Route  # within-cap, over-raw-cap or over-safe-band: the raw-timeout route is known only after the call
    tier: SourceTier
    prompt_tokens_estimate: int
    model_seconds_estimate: float


def plan_session(candidate: Candidate, limits: Limits, seconds_per_token: float) -> PlannedSession:
    """The route a session will take and what it will cost, from its sizes alone (no model call)."""
    raw_tokens = estimate_raw_tokens(candidate.raw_bytes, candidate.turn_count, limits)
    route = raw_route(raw_tokens, limits)
    if route == Route.WITHIN_CAP:
        tier, tokens = SourceTier.RAW, raw_tokens
    else:
        # Without mini summaries, the turns' cards (a turn with none keeps its snippet).
        tier = SourceTier.MINI_SUMMARY if candidate.mini_summary_count else SourceTier.TURN_CARDS
        tokens = estimate_compact_tokens(candidate.compact_bytes, candidate.turn_count, limits)
    return PlannedSession(candidate, route, tier, tokens, tokens * seconds_per_token)


def choose_batch(planned_newest_first: list[PlannedSession], policy: SweepPolicy) -> list[PlannedSession]:
    """Newest first, with `oldest_share` slots for the oldest so nothing starves; within both the
    count and the model-time budget. A batch always takes at least one session, however large,
    so a session bigger than the budget is not starved for ever."""
    chosen: list[PlannedSession] = []
    seconds = 0.0

    def take(item: PlannedSession) -> None:
        nonlocal seconds
        if item in chosen or len(chosen) >= policy.max_sessions:
            return
        if chosen and seconds + item.model_seconds_estimate > policy.model_seconds:
            return
        chosen.append(item)
        seconds += item.model_seconds_estimate

    oldest_slots = min(policy.oldest_share, max(0, policy.max_sessions - 1))
    newest_slots = policy.max_sessions - oldest_slots
    for item in planned_newest_first:
        if len(chosen) >= newest_slots:
            break
        take(item)
    for item in reversed(planned_newest_first):
        if len(chosen) >= policy.max_sessions:
            break
        take(item)
    return chosen


# A degraded summary is made again only when its session's mini-summary coverage has crossed a
# step since: half its turns, then every turn the backfill can do. So a session pays the compact
# call at most three times (its first summary, at half, complete), not once per mini-summary run.
# A session's step: 0 while under `UPGRADE_COVERAGE` of its turns have a mini summary, 1 from that
# share, `COMPLETE_STEP` when no turn is left for the backfill (each has one, or was archived
# without). The rule is written once, in the store's `COVERAGE_STEP_SQL` over these constants:
# the queue and the run both read the step there.
UPGRADE_COVERAGE = 0.5
COMPLETE_STEP = 2


def upgrade_due(summary_step: int | None, step_now: int | None) -> bool:
    """A degraded summary made at `summary_step` is made again at a higher coverage step; a raw or
    imported one (no step) never is."""
    return summary_step is not None and (step_now or 0) > summary_step


def failures_after(previous: tuple[int, str] | None, revision: str) -> int:
    """A session's failure count after one more at `revision`: `previous` is its (failures,
    revision) so far; new turns start the count again."""
    return previous[0] + 1 if previous and previous[1] == revision else 1
