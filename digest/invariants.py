"""The store's invariants as plain rules on one stored row (or one session's graph): each returns
what the row breaks, as sentences, and `pipelines.checks` wraps it in an asset check that reads the
store and lists the violations."""

from __future__ import annotations

from pydantic import ValidationError

from digest.fidelity import FLOOR as FIDELITY_FLOOR
from digest.graph import RAW_EVIDENCE, grounded
from digest.summary_output import SessionSummaryOutput, SourceTier
from digest.synthesis import Route

SOURCE_TIERS = tuple(SourceTier)
ROUTE_REASONS = tuple(Route)
OUTPUT_FIELDS = tuple(SessionSummaryOutput.model_fields)
# What `digest.graph` builds from stored rows rather than from extraction: the summary, session,
# turns, agents and issues, and the edges between them. Everything else is evidence.
PROVENANCE_LABELS = frozenset({"SESSION_SUMMARY", "SESSION", "AGENT_MEMORY", "AGENT", "ISSUE"})
PROVENANCE_EDGES = frozenset({"ORIGINATES_IN", "AUTHORED_BY", "DISCUSSED_IN", "SESSION_COMPLETED", "SPAWNED_MEMORY"})


def provenance_problems(row: dict) -> list[str]:
    """What is missing or contradictory in a summary's account of how it was made."""
    problems = []
    tier = row.get("source_tier")
    if tier not in SOURCE_TIERS:
        problems.append(f"source_tier {tier!r} is not one of {', '.join(SOURCE_TIERS)}")
    if row.get("degraded") is None or (tier in SOURCE_TIERS and row["degraded"] != (tier != SourceTier.RAW)):
        problems.append(f"degraded={row.get('degraded')} contradicts source_tier {tier!r}")
    if row.get("raw_canonical") is not True:
        problems.append("raw_canonical is not true")
    if not str(row.get("input_revision") or "").startswith("sha256:"):
        problems.append("input_revision is not a sha256 revision")
    if row.get("origin") == "imported":
        # An export's summary: no run, route, model or mini summary count of ours made it.
        return problems
    reason = row.get("route_reason")
    if reason not in ROUTE_REASONS:
        problems.append(f"route_reason {reason!r} is not one of {', '.join(ROUTE_REASONS)}")
    elif (tier == SourceTier.RAW) != (reason == Route.WITHIN_CAP):
        problems.append(f"route_reason {reason!r} contradicts source_tier {tier!r}")
    if not row.get("model"):
        problems.append("model is empty")
    if not row.get("run_id"):
        problems.append("run_id is empty: no run made it")
    memory_count, mini_count = row.get("memory_count") or 0, row.get("mini_summary_count")
    if memory_count < 1:
        problems.append("memory_count is below 1")
    if mini_count is None or not 0 <= mini_count <= memory_count:
        problems.append(f"mini_summary_count {mini_count} is outside 0..memory_count")
    elif tier == SourceTier.MINI_SUMMARY and mini_count == 0:
        problems.append("source_tier miniSummary with no mini summary")
    elif tier in (SourceTier.TRUNCATED_RAW, SourceTier.TURN_CARDS) and mini_count > 0:
        problems.append(f"source_tier {tier} although turns had mini summaries")
    return problems


def raw_cap_problems(row: dict) -> list[str]:
    """A raw summary whose raw prompt was over the cap in force when it was made: the one rule. The
    tokens are the host tokenizer's count when the route was decided on one, else the estimate."""
    cap, counted = row.get("raw_cap_tokens"), row.get("raw_tokens_counted")
    tokens, how = (counted, "counted") if counted is not None else (row.get("raw_tokens_estimate"), "estimated")
    if row.get("source_tier") == SourceTier.RAW and cap is not None and tokens is not None and tokens > cap:
        return [f"raw prompt of {tokens} {how} tokens was sent over the raw cap {cap}"]
    return []


def schema_problems(row: dict) -> list[str]:
    """The stored output fields, validated again by the model that validated the reply."""
    try:
        SessionSummaryOutput.model_validate({name: row.get(name) for name in OUTPUT_FIELDS})
    except ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    return []


def fidelity_problems(row: dict) -> list[str]:
    """A summary that names under FLOOR (weighted) of its session's salient identifiers."""
    score = row.get("fidelity")
    if score is None or score >= FIDELITY_FLOOR:
        return []
    return [f"fidelity {score:.2f} < {FIDELITY_FLOOR} ({row['origin']}, {row['source_tier']}): {row['title']!r}"]


def graph_evidence_problems(graph: dict) -> list[str]:
    """Entities and relations of one session's graph that its raw turns do not ground: each must say
    it came from the raw turns and, for an entity, be named there (the rule `digest.graph` applies
    when it builds the graph), so a word found only in the summary text is caught."""
    raw_folded = graph["raw_text"].casefold()
    problems = []
    for node in graph["nodes"]:
        if node["label"] in PROVENANCE_LABELS:
            continue
        name, evidence = str(node["properties"].get("name") or ""), node["properties"].get("evidence")
        if evidence != RAW_EVIDENCE:
            problems.append(f"{node['label']} {name!r} has evidence {evidence!r}")
        elif not grounded(name, raw_folded):
            problems.append(f"{node['label']} {name!r} is named nowhere in the raw turns")
    for edge in graph["edges"]:
        evidence = edge["properties"].get("evidence")
        if edge["type"] not in PROVENANCE_EDGES and evidence != RAW_EVIDENCE:
            problems.append(f"edge {edge['id']} has evidence {evidence!r}")
    return problems
