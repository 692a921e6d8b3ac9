"""The one selection every summary sweep uses: the sensor's tick, `session-digest sweep` and
`session-digest plan` all ask `next_summary_batch`, so they always agree."""

from __future__ import annotations

from dataclasses import dataclass

from digest.scheduling import DEFAULT_SECONDS_PER_TOKEN, PlannedSession, SweepPolicy, choose_batch, plan_session
from digest.synthesis import Limits
from resources.store import DigestStore

# How many of the newest and oldest eligible sessions to size up per tick: enough to fill the
# batch when the largest ones do not fit the time budget, few enough to keep the tick cheap.
LOOKAHEAD = 10


@dataclass(frozen=True)
class SweepSelection:
    batch: list[PlannedSession]
    pending: int
    active: int
    backing_off: int
    seconds_per_token: float
    throughput_measured: bool

    @property
    def skip_reason(self) -> str | None:
        if self.batch:
            return None
        if not self.pending:
            return "no session needs a summary"
        return (
            f"{self.pending} pending, none eligible: {self.active} active within the idle window, "
            f"{self.backing_off} in failure backoff"
        )


def next_summary_batch(
    store: DigestStore,
    limits: Limits,
    policy: SweepPolicy,
    model: str,
    now_ms: int,
    exclude: set[str] = frozenset(),
) -> SweepSelection:
    """`exclude`: partition keys already queued or running."""
    queue = store.summary_queue(
        now_ms, policy.idle_window_s, newest=policy.max_sessions * LOOKAHEAD, oldest=policy.oldest_share * LOOKAHEAD
    )
    measured = store.seconds_per_token(model)
    seconds_per_token = measured or DEFAULT_SECONDS_PER_TOKEN
    planned = [
        plan_session(c, limits, seconds_per_token) for c in queue["candidates"] if c.partition_key not in exclude
    ]
    return SweepSelection(
        batch=choose_batch(planned, policy),
        pending=queue["pending"],
        active=queue["active"],
        backing_off=queue["backing_off"],
        seconds_per_token=seconds_per_token,
        throughput_measured=measured is not None,
    )
