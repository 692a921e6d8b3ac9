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

from digest.graph.builder import (
    RAW_EVIDENCE,
    ExtractionStats,
    GraphBuilder,
    GraphEdge,
    GraphNode,
    edge_id,
    entity_id,
    grounded,
    merge_extractions,
    normalize_name,
    reinforce,
    session_node_id,
    summary_node_id,
)
from digest.graph.chunking import Chunk, chunk_turns, split_oversized
from digest.graph.export import edge_line, merge_stored_edges, merge_stored_nodes, node_line, write_graph_backup
from digest.graph.extraction import (
    ENTITY_TYPES,
    RELATION_TYPES,
    GraphExtraction,
    GraphParseError,
    build_extraction_prompt,
    extraction_json_schema,
    parse_extraction,
    salvage_cut_reply,
)
from digest.graph.policy import (
    MIN_CHUNK_CONTENT_BYTES,
    GraphPolicy,
    chunk_content_budget_bytes,
    graph_limits,
    prompt_window_tokens,
)
from digest.graph.provenance import (
    FRONTIER,
    add_provenance,
    add_summary_provenance,
    iso_ms,
    issue_references,
    payload_hash,
    summary_graph,
)
from digest.graph.session import ChunkStore, DigestResult, SessionGraph, digest_session
from digest.graph.state import (
    DeferReason,
    DigestState,
    DigestStatus,
    after_failure,
    after_reset,
    after_success,
    digest_gate,
    reset_undigestible,
)

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
