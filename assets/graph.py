"""The `session_graph` asset: thin over `digest.graph` (policy) and the store."""

from collections import Counter

from dagster import AssetExecutionContext, AssetObservation, Failure, MaterializeResult, MetadataValue, asset

from assets.partitions import sessions_partitions
from assets.sessions import session_or_fail, session_summaries, tagged_host
from digest.graph import (
    ENTITY_TYPES,
    RELATION_TYPES,
    DigestStatus,
    SessionGraph,
    chunk_content_budget_bytes,
    digest_gate,
    digest_session,
    prompt_window_tokens,
)
from digest.turns import canonical_order, input_revision
from pipelines.tags import SWEEP_TAG
from resources.bindings import ChatModelResource, CircuitPolicyResource, DigestStoreResource, GraphPolicyResource
from resources.store import RunLedger

# Bump when the extraction prompt, the schema or the graph's shape changes.
GRAPH_CODE_VERSION = "graph-v2"  # v2: Neo.mjs's node ids, labels and edges
PREVIEW_ROWS = 15


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _preview(graph: SessionGraph) -> str:
    names = {n.id: n.properties.get("name", n.id) for n in graph.nodes}
    entities = [n for n in graph.nodes if n.label in ENTITY_TYPES]
    relations = [e for e in graph.edges if e.type in RELATION_TYPES]
    by_label = ", ".join(f"{label} {count}" for label, count in sorted(Counter(n.label for n in graph.nodes).items()))
    lines = [f"**nodes by label**: {by_label}", ""]
    if entities:
        lines += ["| entity | type | description |", "|---|---|---|"]
        lines += [f"| {_cell(n.properties['name'])} | {n.label} | {_cell(n.properties.get('description', ''))} |"
                  for n in entities[:PREVIEW_ROWS]]  # fmt: skip
        lines.append("")
    if relations:
        lines += ["| source | relation | target | weight |", "|---|---|---|---|"]
        lines += [f"| {_cell(names[e.source])} | {e.type} | {_cell(names[e.target])} | {e.weight:.2f} |"
                  for e in relations[:PREVIEW_ROWS]]  # fmt: skip
    if not entities:
        lines.append("no entity extracted from the raw turns")
    return "\n".join(lines)


@asset(
    partitions_def=sessions_partitions,
    deps=[session_summaries],
    group_name="sessions",
    kinds={"duckdb"},
    pool="model",
    code_version=GRAPH_CODE_VERSION,
    output_required=False,
)
def session_graph(
    context: AssetExecutionContext,
    store: DigestStoreResource,
    model: ChatModelResource,
    graph: GraphPolicyResource,
    circuit: CircuitPolicyResource,
):
    """The session's knowledge graph in `graph_nodes` / `graph_edges`: provenance nodes (summary,
    session, one per turn, with edges to the agents and issues Neo.mjs holds) and the entities and
    relations the model extracts from the raw turns, chunk by chunk within its budget. Never from a
    summary's text, degraded or not.

    Not digested (nothing materialized, an observation says why) when the turns changed since the
    summary, or the session is undigestible at its current turns, or, in a run a sweep launched, it
    was digested at its current turns since the run was queued (by a concurrent sweep's run). A run
    spends at most `DIGEST_GRAPH_BUDGET_S` of model time: a session whose chunks do not fit keeps the
    finished ones and the next run (the digest sensor's) goes on from there; not a failure.
    """
    db = store.store()
    session = session_or_fail(db, context.partition_key)
    session_id = session["session_id"]
    turns = canonical_order(db.load_turns([session_id]))
    revision = input_revision(turns)
    summary = db.summary_row(session_id)
    state = db.digest_state(session_id)
    blocked = digest_gate(revision, summary, state)
    digested = state is not None and (state.digest_state, state.revision) == (DigestStatus.DIGESTED, revision)
    if not blocked and digested and SWEEP_TAG in context.run.tags:
        blocked = f"already digested at its current turns (revision {revision})"
    if blocked:
        context.log.info(f"session {session_id!r} not digested: {blocked}")
        context.log_event(
            AssetObservation(
                asset_key=context.asset_key,
                partition=context.partition_key,
                metadata={"session_id": session_id, "digested": False, "reason": blocked, "input_revision": revision},
            )
        )
        return

    host = tagged_host(context, model)
    limits, policy = model.limits(host, db), graph.policy()
    ledger = RunLedger(db, context.run.run_id, host=host, circuit=circuit.policy())
    result = digest_session(
        turns, summary, model.client(db, host=host), limits, policy, ledger, chunk_store=ledger,
        pacer=model.pacer(db, host, policy.timeout_s),
    )  # fmt: skip
    if result.left_for_later:
        context.log.info(f"session {session_id!r} part-digested: {result.note}")
        context.log_event(
            AssetObservation(
                asset_key=context.asset_key,
                partition=context.partition_key,
                metadata={
                    "session_id": session_id,
                    "digested": False,
                    "reason": result.note,
                    "input_revision": revision,
                    "chunks_planned": result.chunks_planned,
                    "chunks_done": result.chunks_done,
                    "chunks_left_for_later": result.left_for_later,
                    "model_seconds": round(result.model_seconds, 2),
                    "budget_s": policy.budget_s,
                },
            )
        )
        return
    if result.graph is None:
        state = db.record_digest_failure(session_id, revision, result.failure, policy.max_attempts)
        then = (
            "out of the cadence until reset" if state.digest_state == DigestStatus.UNDIGESTIBLE else "will be retried"
        )
        raise Failure(
            description=f"no graph for session {session_id!r}: {result.failure} ({result.note}); "
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
    built = result.graph
    db.write_graph(built, run_id=context.run.run_id)
    stats = built.stats
    yield MaterializeResult(
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
            "prompt_window_tokens": prompt_window_tokens(limits, policy),
            "chunk_content_budget_bytes": chunk_content_budget_bytes(limits, policy),
            "graph": MetadataValue.md(_preview(built)),
        }
    )
