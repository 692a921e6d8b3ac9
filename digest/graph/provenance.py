"""The provenance nodes and edges built from stored rows: summary, session, turns, agents and issues."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime

from digest.graph.builder import (
    RAW_EVIDENCE,
    GraphBuilder,
    GraphEdge,
    GraphNode,
    session_node_id,
    summary_node_id,
)
from digest.turns import Turn, canonical_order
from digest.visibility import normalize_user_id, summary_user_id

DISCUSSED_IN_WEIGHT = 0.8
PROVENANCE_POLICY = "most-restrictive-source"

# The original's scan, as it is: no word boundary, the digits as written (`issue-0012` is its own
# id), `&#38;` counts. ASCII digits, as JavaScript's `\d`.
_ISSUE_REFERENCE = re.compile(r"(?:#|issue-)(\d+)", re.IGNORECASE | re.ASCII)
FRONTIER = "frontier"  # the original's seeded SYSTEM_ANCHOR node


def issue_references(text: str) -> list[str]:
    """Issue numbers named as `#123` or `issue-123`, digits as written, in order, once each."""
    return list(dict.fromkeys(m.group(1) for m in _ISSUE_REFERENCE.finditer(text)))


def iso_ms(ms: int | None) -> str | None:
    """JavaScript's `toISOString()`, as the original stamps graph timestamps."""
    if ms is None:
        return None
    stamp = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def payload_hash(fields: dict) -> str:
    """MemorySessionIngestor's `payloadHash`: hex sha256 of the fields' stable stringify (keys
    sorted, no spaces), so its REM pass sees the node as unchanged."""
    stable = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(stable.encode("utf-8")).hexdigest()


def _without_none(properties: dict) -> dict:
    return {k: v for k, v in properties.items() if v is not None}


def add_summary_provenance(builder: GraphBuilder, turns: list[Turn], summary: dict) -> int:
    """What the original writes when the summary is written (reference §4.1): the SESSION_SUMMARY
    node, `frontier` SESSION_COMPLETED it, AUTHORED_BY each agent identity of the turns and
    DISCUSSED_IN each issue its text or the raw turns name. `summary` is the stored summary row;
    its text is used only for issue references. The frontier, identity and issue nodes are the
    target graph's own: an edge to one it lacks is culled by its import, as `linkNodes` culls.
    Returns the number of issues linked."""
    session_id = turns[0].session_id
    summary_id = summary_node_id(session_id)
    identities = list(dict.fromkeys(t.agent_identity for t in turns if t.agent_identity))
    agents = summary.get("participating_agents") or []
    user_id = summary_user_id(agents)
    builder.add_node(
        summary_id,
        "SESSION_SUMMARY",
        _without_none(
            {
                "name": summary["title"] or summary_id,
                "description": f"{summary['category']} session by {', '.join(agents)}",
                "semanticVectorId": summary_id,
                "sessionId": session_id,
                "sourceAgentIdentities": identities,
                # No identity registry here, so no identity has a known trust tier.
                "sourceTrustTier": "unclassified",
                "provenancePolicy": PROVENANCE_POLICY,
                "sourceTier": summary["source_tier"],
                "degraded": bool(summary["degraded"]),
                "rawCanonical": bool(summary["raw_canonical"]),
                "userId": user_id,
            }
        ),
    )
    builder.link(FRONTIER, summary_id, "SESSION_COMPLETED", 1.0, outside=True)
    last_activity = iso_ms(summary.get("last_activity_ms"))
    for identity in identities:
        authored = {
            "timestamp": last_activity,
            "userId": normalize_user_id(identity),
            "sharedEntity": True,
            "provenancePolicy": PROVENANCE_POLICY,
        }
        builder.link(summary_id, identity, "AUTHORED_BY", 1.0, _without_none(authored), outside=True)
    # The summary text, then the raw turns whatever the summary's tier, as the original scans them.
    found_in: dict[str, list[str]] = {}
    for number in issue_references(summary.get("summary") or ""):
        found_in.setdefault(number, []).append("summary")
    for number in issue_references("\n".join(t.document for t in turns)):
        found_in.setdefault(number, []).append(RAW_EVIDENCE)
    for number, sources in found_in.items():
        issue = f"issue-{number}"
        builder.link(summary_id, issue, "DISCUSSED_IN", DISCUSSED_IN_WEIGHT, {"foundIn": sources}, outside=True)
    return len(found_in)


def summary_graph(turns: list[Turn], summary: dict) -> tuple[list[GraphNode], list[GraphEdge]]:
    """The summary-time rows of a session (`add_summary_provenance`), for the store to write with
    the summary; the digest later rewrites them, built the same way from the same row."""
    builder = GraphBuilder()
    add_summary_provenance(builder, canonical_order(turns), summary)
    return list(builder.nodes.values()), list(builder.edges.values())


def add_provenance(builder: GraphBuilder, turns: list[Turn], summary: dict) -> int:
    """The summary-time rows, then the SESSION node and one AGENT_MEMORY per turn as the original's
    write time and REM pass make them (reference §4.2–4.3), with ORIGINATES_IN, SPAWNED_MEMORY
    and AUTHORED_BY edges. Agent identity nodes are not built: the original seeds its own, and
    only those. Returns the number of issues linked."""
    issues = add_summary_provenance(builder, turns, summary)
    session_id = turns[0].session_id
    session_node = session_node_id(session_id)
    user_id = summary_user_id(summary.get("participating_agents") or [])
    title = summary["title"] or ""
    builder.add_node(
        session_node,
        "SESSION",
        _without_none(
            {
                "name": title or session_id,
                "description": "",
                "chromaId": summary_node_id(session_id),
                "liveIngested": True,
                # The summary row has no createdAt, so the original hashes ''.
                "payloadHash": payload_hash(
                    {"createdAt": "", "sessionId": session_id, "title": title, "userId": user_id or ""}
                ),
                "sessionId": session_id,
                "userId": user_id,
            }
        ),
    )
    for turn in turns:
        stamp = iso_ms(turn.ts_ms)
        builder.add_node(
            turn.id,
            "AGENT_MEMORY",
            _without_none(
                {
                    "name": f"Memory: {stamp or 'unknown time'}",
                    "description": f"Agent thought flow inside session {session_id}.",
                    "semanticVectorId": turn.id,
                    "agentIdentity": turn.agent_identity,
                    "userId": normalize_user_id(turn.user_id),
                    "sessionId": session_id,
                    "timestamp": stamp,
                    "miniSummary": turn.mini_summary,
                    "chromaId": turn.id,
                    "liveIngested": True,
                    "payloadHash": payload_hash(
                        {"createdAt": "", "sessionId": session_id, "userId": turn.user_id or ""}
                    ),
                }
            ),
        )
        builder.link(turn.id, session_node, "ORIGINATES_IN", 1.0)
        builder.link(FRONTIER, turn.id, "SPAWNED_MEMORY", 0.8, outside=True)
        if turn.agent_identity:
            authored = {"timestamp": stamp, "userId": normalize_user_id(turn.agent_identity), "sharedEntity": True}
            builder.link(turn.id, turn.agent_identity, "AUTHORED_BY", 1.0, _without_none(authored), outside=True)
    return issues
