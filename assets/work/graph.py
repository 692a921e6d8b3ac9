"""The work of `session_graph`: one session digested into the graph, within the run's model time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from assets.work.runs import RunFacts, unknown_partition
from digest.circuit import CircuitPolicy
from digest.graph import (
    DigestResult,
    DigestStatus,
    GraphPolicy,
    SessionGraph,
    chunk_content_budget_bytes,
    digest_gate,
    digest_session,
    prompt_window_tokens,
)
from digest.turns import canonical_order, input_revision
from resources.store import DigestStore, RunLedger

if TYPE_CHECKING:
    from resources.model_hosts import ModelHosts


@dataclass(frozen=True)
class GraphOutcome:
    """What a digest run came to: `graph`, the graph written, with `metadata`; else `not_digested`,
    why nothing is materialized, with the observation's `metadata` (`part_digested`: the run's model
    time ran out before the last chunk); else `failure`, why the run fails, with its metadata."""

    session_id: str | None = None
    graph: SessionGraph | None = None
    not_digested: str | None = None
    part_digested: bool = False
    metadata: dict = field(default_factory=dict)
    failure: str | None = None


def digest_partition(
    store: DigestStore,
    hosts: ModelHosts,
    run: RunFacts,
    partition_key: str,
    policy: GraphPolicy,
    circuit: CircuitPolicy,
) -> GraphOutcome:
    """Provenance nodes and the entities and relations the model extracts from the raw turns,
    chunk by chunk within the budget. Not digested when the turns changed since the summary, the
    session is undigestible at its current turns, or, in a run a sweep launched, it was digested at
    its current turns since the run was queued; a session whose chunks do not fit the run's model
    time keeps the finished ones for the next run."""
    with store.file.held():
        session = store.sessions.session_by_partition(partition_key)
        if session is None:
            return GraphOutcome(failure=unknown_partition(partition_key))
        session_id = session["session_id"]
        turns = canonical_order(store.sessions.load_turns([session_id]))
        revision = input_revision(turns)
        summary = store.summaries.summary_row(session_id)
        state = store.graph.digest_state(session_id)
        blocked = digest_gate(revision, summary, state)
        digested = state is not None and (state.digest_state, state.revision) == (DigestStatus.DIGESTED, revision)
        if not blocked and digested and run.swept:
            blocked = f"already digested at its current turns (revision {revision})"
        if blocked:
            return GraphOutcome(session_id, not_digested=blocked, metadata={"input_revision": revision})
        on = hosts.tagged(store, run.tags, policy.timeout_s)
        ledger = RunLedger(store, run.run_id, host=on.name, circuit=circuit)
        result = digest_session(
            turns, summary, on.client, on.limits, policy, ledger, chunk_store=ledger, pacer=on.pacer
        )
        if result.left_for_later:
            metadata = _part_digested(result, revision, policy)
            return GraphOutcome(session_id, not_digested=result.note, part_digested=True, metadata=metadata)
        if result.graph is None:
            return _failed(store, session_id, revision, result, policy)
        store.graph.write_graph(result.graph, run_id=run.run_id)
    built, stats = result.graph, result.graph.stats
    return GraphOutcome(
        session_id,
        graph=built,
        metadata={
            "session_id": session_id,
            "digest_state": str(DigestStatus.DIGESTED),
            "input_revision": revision,
            "summary_source_tier": summary["source_tier"],
            "evidence": "raw turns only",
            "nodes": len(built.nodes),
            "edges": len(built.edges),
            "entities": stats.entities,
            "relations": stats.relations,
            "ungrounded_entities_dropped": stats.ungrounded_entities,
            "relations_culled": stats.culled_relations,
            "issues_discussed": built.issues,
            "chunks": built.chunks,
            "chunks_from_earlier_runs": result.chunks_resumed,
            "model_seconds": round(result.model_seconds, 2),
            "replies_cut_at_output_cap": built.cut_replies,
            "prompt_window_tokens": prompt_window_tokens(on.limits, policy),
            "chunk_content_budget_bytes": chunk_content_budget_bytes(on.limits, policy),
        },
    )


def _part_digested(result: DigestResult, revision: str, policy: GraphPolicy) -> dict:
    return {
        "input_revision": revision,
        "chunks_planned": result.chunks_planned,
        "chunks_done": result.chunks_done,
        "chunks_left_for_later": result.left_for_later,
        "model_seconds": round(result.model_seconds, 2),
        "budget_s": policy.budget_s,
    }


def _failed(
    store: DigestStore, session_id: str, revision: str, result: DigestResult, policy: GraphPolicy
) -> GraphOutcome:
    """The failed digest counted; the session's last good graph, if any, stays."""
    state = store.graph.record_digest_failure(session_id, revision, result.failure, policy.max_attempts)
    then = "out of the cadence until reset" if state.digest_state == DigestStatus.UNDIGESTIBLE else "will be retried"
    return GraphOutcome(
        session_id,
        failure=f"no graph for session {session_id!r}: {result.failure} ({result.note}); "
        f"{state.digest_state} after {state.attempts} attempt(s), {then}",
        metadata={  # plain text: Dagster serializes no enum of ours
            "symptom": str(result.failure),
            "digest_state": str(state.digest_state),
            "attempts": state.attempts,
            "defer_reason": str(state.defer_reason),
            "chunks_planned": result.chunks_planned,
            "chunks_done": result.chunks_done,
        },
    )
