"""The session graph: provenance nodes, and semantic extraction from raw turns (the original's REM pass).

The evidence rule: entities and relations come only from the model's extraction over the session's
raw turn documents, cut into turn-aligned chunks that each fit the model's budget. A summary,
degraded or not, is a navigation index: it names its own SESSION_SUMMARY node, and its text is
scanned for issue references (as the original's DISCUSSED_IN does), nothing more.

By concern: `policy` (the bounds and the budget they leave), `extraction` (the prompt, the output
model, the parse and the salvage of a cut reply), `chunking`, `builder` (nodes, edges, the merge of
chunk results), `provenance` (the nodes and edges from stored rows), `state` (the digest-state
transitions), `session` (one session's digest) and `export` (the graph-backup lines). The public
names are re-exported here. No Dagster here: the asset wires a client, a ledger and the store in.
"""

from __future__ import annotations

from importlib import import_module

# Each public name's module, imported when the name is first used: a reader of the settings (the
# graph's policy) does not load the extraction's models.
_EXPORTS = {
    "RAW_EVIDENCE": "builder", "ExtractionStats": "builder", "GraphBuilder": "builder",
    "GraphEdge": "builder", "GraphNode": "builder", "edge_id": "builder",
    "entity_id": "builder", "grounded": "builder", "merge_extractions": "builder",
    "normalize_name": "builder", "reinforce": "builder", "session_node_id": "builder",
    "summary_node_id": "builder", "Chunk": "chunking", "chunk_turns": "chunking",
    "split_oversized": "chunking", "edge_line": "export", "merge_stored_edges": "export",
    "merge_stored_nodes": "export", "node_line": "export", "write_graph_backup": "export",
    "ENTITY_TYPES": "extraction", "RELATION_TYPES": "extraction", "GraphExtraction": "extraction",
    "GraphParseError": "extraction", "build_extraction_prompt": "extraction", "extraction_json_schema": "extraction",
    "parse_extraction": "extraction", "salvage_cut_reply": "extraction", "MIN_CHUNK_CONTENT_BYTES": "policy",
    "GraphPolicy": "policy", "chunk_content_budget_bytes": "policy", "graph_limits": "policy",
    "prompt_window_tokens": "policy", "FRONTIER": "provenance", "add_provenance": "provenance",
    "add_summary_provenance": "provenance", "iso_ms": "provenance", "issue_references": "provenance",
    "payload_hash": "provenance", "summary_graph": "provenance", "ChunkStore": "session",
    "DigestResult": "session", "SessionGraph": "session", "digest_session": "session",
    "DeferReason": "state", "DigestState": "state", "DigestStatus": "state",
    "after_failure": "state", "after_reset": "state", "after_success": "state",
    "digest_gate": "state", "reset_undigestible": "state",
}  # fmt: skip
__all__ = [
    "ENTITY_TYPES",
    "FRONTIER",
    "MIN_CHUNK_CONTENT_BYTES",
    "RAW_EVIDENCE",
    "RELATION_TYPES",
    "Chunk",
    "ChunkStore",
    "DeferReason",
    "DigestResult",
    "DigestState",
    "DigestStatus",
    "ExtractionStats",
    "GraphBuilder",
    "GraphEdge",
    "GraphExtraction",
    "GraphNode",
    "GraphParseError",
    "GraphPolicy",
    "SessionGraph",
    "add_provenance",
    "add_summary_provenance",
    "after_failure",
    "after_reset",
    "after_success",
    "build_extraction_prompt",
    "chunk_content_budget_bytes",
    "chunk_turns",
    "digest_gate",
    "digest_session",
    "edge_id",
    "edge_line",
    "entity_id",
    "extraction_json_schema",
    "graph_limits",
    "grounded",
    "issue_references",
    "iso_ms",
    "merge_extractions",
    "merge_stored_edges",
    "merge_stored_nodes",
    "node_line",
    "normalize_name",
    "parse_extraction",
    "payload_hash",
    "prompt_window_tokens",
    "reinforce",
    "reset_undigestible",
    "salvage_cut_reply",
    "session_node_id",
    "split_oversized",
    "summary_graph",
    "summary_node_id",
    "write_graph_backup",
]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
