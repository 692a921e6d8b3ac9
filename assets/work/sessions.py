"""The work of `raw_sessions` and `session_summaries`: one session's route, and its summary under
the lease, with the takeover of a dead run's lease and the failure accounting."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from assets.work.runs import RunFacts, host_check, out_of_rotation_reason, unknown_partition
from digest.circuit import CircuitPolicy
from digest.cost import SummaryCost, summary_cost
from digest.friction import EmissionPoint, FrictionEvent, Symptom
from digest.prompts import SUMMARY_CODE_VERSION
from digest.scheduling import SweepPolicy, failure_backoff_s, now_ms, upgrade_due
from digest.synthesis import build_prompt, raw_content, raw_route, summarize_session
from digest.tags import EXPLICIT_TAG, ROUTE_TAG, SWEEP_TAG
from digest.turns import canonical_order
from resources.store import DigestStore, RunLedger

if TYPE_CHECKING:
    from resources.model_clients.progress import CallProgress
    from resources.model_hosts import ModelHosts, Placement


@dataclass(frozen=True)
class Described:
    """A session's route as `raw_sessions` shows it: `metadata`, else `failure`."""

    metadata: dict = field(default_factory=dict)
    failure: str | None = None


def describe_partition(store: DigestStore, hosts: ModelHosts, run: RunFacts, partition_key: str) -> Described:
    """One session's raw turns in canonical order, with the size and the route its summary will take."""
    with store.file.held():
        session = store.sessions.session_by_partition(partition_key)
        if session is None:
            return Described(failure=unknown_partition(partition_key))
        session_id = session["session_id"]
        row = store.ingest.refresh_sessions([session_id])[0]
        turns = canonical_order(store.sessions.load_turns([session_id]))
        redactions = store.projects.redactions([session_id])
        placement = hosts.place(store, run.tags, session_id)
    limits = placement.limits
    raw_tokens = limits.estimate_tokens(build_prompt(raw_content(turns), turns))
    with_mini = sum(1 for t in turns if t.mini_summary)
    return Described(
        metadata={
            "session_id": session_id,
            "host": placement.host,
            "host_reason": placement.reason,
            "turn_count": row["turn_count"],
            "raw_bytes": row["raw_bytes"],
            "raw_tokens_estimate": raw_tokens,
            "raw_cap_tokens": limits.raw_cap_tokens if limits.raw_cap_tokens is not None else "off",
            # pinned, off, or auto: the host's measured speed (auto-unmeasured: the default until then).
            "raw_cap_source": limits.raw_cap_source,
            # The estimate's ratio, and where it comes from: pinned, the host's ledger, or the default.
            "bytes_per_token": round(limits.bytes_per_token, 3),
            "bytes_per_token_source": limits.bytes_per_token_source,
            "predicted_route": str(raw_route(raw_tokens, limits)),  # Dagster's metadata takes plain text, no enum
            "mini_summary_coverage": with_mini / len(turns) if turns else 0.0,
            "input_revision": row["input_revision"],
            # Where it ran and was read from (`unknown`: its log does not say), and the secrets
            # replaced in its turns at ingest, by kind (`digest.redact`).
            "project": row["project"] or "unknown",
            "git_branch": row["git_branch"] or "unknown",
            "source_path": row["source_path"] or "unknown",
            "redactions": sum(redactions["by_kind"].values()),
            "redactions_by_kind": ", ".join(f"{k} {n}" for k, n in redactions["by_kind"].items()) or "none",
        }
    )


def nothing_to_summarize(standing: dict | None, tags: Mapping[str, str], now: int) -> str | None:
    """Why a run has no summary to make, asked under the lease (and by the CLI's sweep just before
    the run): the selection that queued the run may be stale, e.g. a concurrent sweep summarized the
    session (or failed it) since. A run asked for by hand (a rerun from the UI after a prompt change)
    summarizes a current session again; it is left out of a gone or retired one too. A sweep makes a
    current degraded summary again only while the session's mini-summary coverage step is above the
    one it was made at (an upgrade), and any current summary while a re-summary of it is asked for
    (`sweep --resummarize`); a session named by hand (`EXPLICIT_TAG`, `sweep --session`) is
    summarized in its failure backoff too."""
    if standing is None:
        return "the session no longer exists (a replace-mode restore removed it)"
    if standing["retired_by"]:
        return f"the session is retired (archive {standing['retired_by']}): restore its bundle to summarize it"
    if SWEEP_TAG not in tags:
        return None
    revision = standing["input_revision"]
    if (
        standing["summary_revision"] == revision
        and not upgrade_due(standing["summary_step"], standing["coverage_step"])
        and not standing.get("resummary_requested")
    ):
        return f"already summarized at its current turns (revision {revision}) by run {standing['summary_run_id']}"
    # A staged reply finishes with no model call, whatever the backoff.
    backing_off = standing["failed_revision"] == revision and standing["backoff_until_ms"] > now
    if backing_off and tags.get(ROUTE_TAG) != "staged" and EXPLICIT_TAG not in tags:
        return f"failed at its current turns since it was queued (failure {standing['failures']}): in failure backoff"
    return None


@dataclass(frozen=True)
class SummaryOutcome:
    """What a summary run came to: `row`, the stored summary to materialize (made now, or a current
    imported one kept); else `skipped`, why nothing is materialized (the latest materialization
    stays the one that made the summary), or `kept`, why the junk summary it made was not stored;
    else `failure`, why the run fails, with its metadata."""

    session_id: str | None
    row: dict | None = None
    cost: SummaryCost = SummaryCost()  # of `row`, in this run: nothing for a kept imported summary
    skipped: str | None = None
    failure: str | None = None
    failure_metadata: dict = field(default_factory=dict)
    # A junk summary made and not stored, why (a current ok one stands), and its verdict.
    kept: str | None = None
    verdict: str | None = None


def summarize_partition(
    store: DigestStore,
    hosts: ModelHosts,
    run: RunFacts,
    partition_key: str,
    sweep: SweepPolicy,
    circuit: CircuitPolicy,
    replace_imported: bool = False,
    log: Callable[[str], None] = lambda line: None,
    progress: CallProgress | None = None,
) -> SummaryOutcome:
    """The session summary, raw when the session fits the raw-synthesis cap, else degraded.

    Nothing to do (`skipped`) when, under the lease, `nothing_to_summarize` says so, or when a run a
    sweep launched finds another run holding the lease: that run is doing it. A current imported
    summary is kept (no model call) unless `replace_imported`. `progress`: where the model calls'
    pieces are counted for the run log."""
    with store.file.held():
        session = store.sessions.session_by_partition(partition_key)
        if session is None:
            return SummaryOutcome(None, failure=unknown_partition(partition_key))
        session_id = session["session_id"]
        stored = store.summaries.summary_row(session_id)
        current_import = (
            stored and stored["origin"] == "imported" and stored["input_revision"] == session["input_revision"]
        )
        # A re-summary asked for it (`--resummarize --origin imported`): made again, as a run asked to.
        requested = current_import and store.summaries.summary_standing(session_id)["resummary_requested"]
        if current_import and not (replace_imported or requested):
            # The export's summary of these very turns: no model call is owed.
            log(
                f"session {session_id!r} keeps its imported summary (current for its turns, fidelity "
                f"{stored['fidelity']}); run with config replace_imported: true to have the model replace it"
            )
            return SummaryOutcome(session_id, row=stored)
        placement = hosts.place(store, run.tags, session_id)
        # Held across the raw call and the degraded one, each up to the call ceiling, with room to write.
        lease_ttl_s = 2 * hosts.call_ceiling_s + 120
        holder = store.summaries.claim_summary_lease(session_id, run.run_id, now_ms(), lease_ttl_s)
        if holder is not None and run.ended(holder):
            # Its process died holding the lease (killed mid-run, marked failed since): take it over,
            # closing the model call it died in (a run on another machine, marked failed in the UI).
            store.attempts.close_in_flight([holder])
            store.summaries.release_summary_lease(session_id, holder)
            holder = store.summaries.claim_summary_lease(session_id, run.run_id, now_ms(), lease_ttl_s)
        if holder is not None:
            busy = f"session {session_id!r} is being summarized by run {holder}"
            if not run.swept:
                return SummaryOutcome(session_id, failure=f"{busy}; not summarizing it twice")
            return SummaryOutcome(session_id, skipped=busy)
        try:
            outcome = _summarize_leased(store, hosts, run, session, placement, sweep, circuit, log, progress)
        finally:
            store.summaries.release_summary_lease(session_id, run.run_id)
        if outcome is not None:
            return outcome
        return SummaryOutcome(
            session_id, row=store.summaries.summary_row(session_id), cost=run_cost(store, session_id, run.run_id)
        )


def run_cost(store: DigestStore, session_id: str, run_id: str) -> SummaryCost:
    """What this run's summary cost, from the ledger, on the run's held connection; an unstreamed
    call is split at its host's measured rates."""
    summary_calls, mini_calls = store.attempts.summary_cost_rows(session_id, run_id)
    return summary_cost(
        summary_calls, mini_calls, lambda host, model: store.speed.host_speed(host, model) if host else None
    )


def _summarize_leased(
    store: DigestStore,
    hosts: ModelHosts,
    run: RunFacts,
    session: dict,
    placement: Placement,
    sweep: SweepPolicy,
    circuit: CircuitPolicy,
    log: Callable[[str], None],
    progress: CallProgress | None,
) -> SummaryOutcome | None:
    """The run's work under the lease; None once the summary is written."""
    session_id, revision = session["session_id"], session["input_revision"]
    skip = nothing_to_summarize(store.summaries.summary_standing(session_id), run.tags, now_ms())
    if skip:
        return SummaryOutcome(session_id, skipped=skip)
    host = placement.host
    # Read before the turns: a mini summary made in between lowers the step kept, never raises it.
    step = store.summaries.coverage_steps([session_id]).get(session_id)
    turns = store.sessions.load_turns([session_id])
    # The placed host's client and pacer. Each usable reply is staged in DuckDB before the summary is
    # built from it: a run killed before the write below is finished by the next one, from the
    # reply, with no model call.
    on = hosts.run_host(store, placement, session=(session_id, revision), progress=progress)
    log(f"session {session_id!r} goes to model host {host!r}: {placement.reason}")
    # Near the bound, the host's own tokenizer (when it has one) counts the raw prompt.
    ledger = RunLedger(store, run.run_id, host=host, circuit=circuit)
    result = summarize_session(
        turns, on.client, on.limits, ledger, count_tokens=on.client.count_tokens, pacer=on.pacer,
        host_available=host_check(store, host),
    )  # fmt: skip
    if result.host_out_of_rotation:
        # No failure of the session's: no backoff, the lease released, the next tick places it again.
        return SummaryOutcome(session_id, skipped=out_of_rotation_reason(host))
    if result.summary is None and result.host_failure:
        # The host's fault, counted on its circuit: no backoff of the session, which the next tick
        # gives to another host (or to this one, once its circuit closes).
        return SummaryOutcome(
            session_id,
            failure=f"host {host} failed: {result.failure} on session {session_id!r} "
            f"(route {result.route_reason}); the session goes to another host",
            failure_metadata={"symptom": str(result.failure), "route_reason": str(result.route_reason), "host": host},
        )
    if result.summary is None:
        failures = store.summaries.record_summary_failure(
            session_id, revision, result.failure, now_ms(), lambda n: failure_backoff_s(n, sweep)
        )
        return SummaryOutcome(
            session_id,
            failure=f"no summary for session {session_id!r}: {result.failure} (route {result.route_reason}); "
            f"failure {failures}, backing off {failure_backoff_s(failures, sweep):.0f}s",
            failure_metadata={
                "symptom": str(result.failure),
                "route_reason": str(result.route_reason),
                "failures": failures,
            },
        )
    written = store.summaries.write_summary(
        result.summary, run_id=run.run_id, host=host, host_reason=placement.reason, coverage_step=step,
        code_version=SUMMARY_CODE_VERSION,
    )  # fmt: skip
    if not hosts.response_cache:
        store.cache.drop_staged_replies(session_id)
    store.summaries.clear_summary_failures(session_id)
    return SummaryOutcome(session_id, kept=written.kept, verdict=written.verdict.label) if written.kept else None


def record_run_error(store: DigestStore, partition_key: str, run_id: str, error: Exception, sweep: SweepPolicy) -> str:
    """A summary run that raised on its session's data (not a model call's failure: those are
    classified where they happen): the session's failure is counted, with its backoff, and a
    friction event says what raised, so a session that fails the same way on every sweep waits out
    its backoff instead of failing every sweep unseen. The line the run fails with."""
    what = f"{type(error).__name__}: {error}"
    session = store.sessions.session_by_partition(partition_key)
    if session is None:
        return f"the run raised {what}"
    session_id, revision = session["session_id"], session["input_revision"]
    failures = store.summaries.record_summary_failure(
        session_id, revision, Symptom.RUN_ERROR, now_ms(), lambda n: failure_backoff_s(n, sweep)
    )
    note = f"the summary run raised on the session's data (failure {failures} at its current turns): {what}"
    store.attempts.record_friction(
        FrictionEvent(
            asset_ref=session_id, consumer="session_summaries", model="", symptom=Symptom.RUN_ERROR,
            emission_point=EmissionPoint.PRE_INVOCATION, input_bytes=session["raw_bytes"] or 0,
            input_tokens_estimate=0, context_limit_tokens=0, safe_limit_tokens=0, raw_cap_tokens=None,
            note=note, error_text=what[:2000],
        ),
        run_id,
    )  # fmt: skip
    return (
        f"no summary for session {session_id!r}: the run raised {what}; failure {failures}, "
        f"backing off {failure_backoff_s(failures, sweep):.0f}s"
    )
