"""The work of `turn_mini_summaries`: one session's missing mini summaries, within the run's budget."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from assets.work.runs import RunFacts, host_check, out_of_rotation_reason, unknown_partition
from digest.circuit import CircuitPolicy
from digest.mini_summaries import FillReport, MiniSummaryPolicy, fill_mini_summaries, headed_for_degraded
from digest.scheduling import now_ms
from resources.store import DigestStore, MiniSummaryLedger

if TYPE_CHECKING:
    from resources.model_hosts import ModelHosts


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class MiniSummaryOutcome:
    """What the run did (`report`; empty when it had nothing to do) and the session's counts
    after it; `failure` when there is no such session."""

    session_id: str | None = None
    host: str | None = None
    report: FillReport = field(default_factory=FillReport)
    backoff_until_ms: int | None = None
    counts: dict = field(default_factory=dict)
    failure: str | None = None


def fill_partition(
    store: DigestStore,
    hosts: ModelHosts,
    run: RunFacts,
    partition_key: str,
    policy: MiniSummaryPolicy,
    circuit: CircuitPolicy,
    only_if_degraded: bool = False,
    ignore_backoff: bool = False,
    log: Callable[[str], None] = lambda line: None,
) -> MiniSummaryOutcome:
    """Mini summaries for the session's turns that have none. `only_if_degraded`: none for a session
    its summary's host takes raw; `ignore_backoff`: try a session in its no-progress backoff anyway."""
    with store.file.held():
        session = store.sessions.session_by_partition(partition_key)
        if session is None:
            return MiniSummaryOutcome(failure=unknown_partition(partition_key))
        session_id = session["session_id"]
        # The summary's host: whether the session is headed for the degraded path depends on it.
        placement = hosts.place(store, run.tags, session_id)
        host = placement.host
        backoff_until_ms = store.mini_summaries.mini_summary_backoff_until_ms(session_id)
        report = FillReport()
        if only_if_degraded and not headed_for_degraded(session["raw_bytes"], session["turn_count"], placement.limits):
            log(f"session {session_id!r} is within the raw cap: its summary needs no mini summaries")
        elif backoff_until_ms is not None and backoff_until_ms > now_ms() and not ignore_backoff:
            log(f"session {session_id!r} made no progress last time; backing off until {iso(backoff_until_ms)}")
        else:
            on = hosts.run_host(store, placement, first_timeout_s=policy.timeout_s)
            report = fill_mini_summaries(
                store.mini_summaries.pending_mini_summary_turns(session_id),
                on.client,
                on.limits,
                policy,
                MiniSummaryLedger(store, run.run_id, host=host, circuit=circuit),
                pacer=on.pacer,
                host_available=host_check(store, host),
            )
            if report.host_out_of_rotation:
                log(f"{out_of_rotation_reason(host)}; {report.left_for_later} turn(s) left for later")
            backoff_until_ms = report.backoff_until_ms(now_ms())
            store.mini_summaries.record_backfill_run(
                session_id, report.attempted, len(report.generated), backoff_until_ms, run.run_id
            )
        return MiniSummaryOutcome(
            session_id, host, report, backoff_until_ms, store.mini_summaries.mini_summary_counts(session_id)
        )


def coverage_metadata(counts: dict) -> dict:
    """A session's mini-summary coverage (`mini_summary_counts`) as a `turn_mini_summaries`
    materialization shows it, whichever run records it."""
    return {
        "turns": counts["turns"],
        "mini_summaries_imported": counts["imported"],
        "mini_summaries_generated": counts["generated"],
        "turns_archived": counts["archived"],
        "turns_pending": counts["pending"],
        "mini_summary_coverage": counts["with_mini_summary"] / counts["turns"] if counts["turns"] else 0.0,
    }
