"""The `session_graph` asset: maps its work's outcome (`assets/work/graph.py`) to what Dagster records."""

from collections import Counter

from dagster import AssetExecutionContext, Failure, MetadataValue, asset

from assets.partitions import sessions_partitions
from assets.sessions import materialized, not_done, run_facts, session_summaries
from assets.work.graph import digest_partition
from digest.graph import ENTITY_TYPES, RELATION_TYPES, SessionGraph
from digest.prompts import GRAPH_CODE_VERSION
from resources.bindings import ChatModelResource, CircuitPolicyResource, DigestStoreResource, GraphPolicyResource

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

    Not digested (`not_done` says what is on the partition then) when the turns changed since the
    summary, or the session is undigestible at its current turns, or, in a run a sweep launched, it
    was digested at its current turns since the run was queued (by a concurrent sweep's run). A run
    spends at most `DIGEST_GRAPH_BUDGET_S` of model time: a session whose chunks do not fit keeps the
    finished ones and the next run (the digest sensor's) goes on from there; not a failure.
    """
    outcome = digest_partition(
        store.open(), model.hosts, run_facts(context), context.partition_key, graph.policy(), circuit.policy()
    )
    if outcome.failure:
        raise Failure(description=outcome.failure, metadata=outcome.metadata)
    if outcome.not_digested:
        what = "part-digested" if outcome.part_digested else "not digested"
        done = not_done(context, outcome.session_id, what, outcome.not_digested, digested=False, **outcome.metadata)
        if done is not None:
            yield done
        return
    yield materialized(context, {**outcome.metadata, "graph": MetadataValue.md(_preview(outcome.graph))})
