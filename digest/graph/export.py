"""The graph-backup JSONL export: stored rows merged into one line per node and per edge."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import IO

from digest.graph.builder import GraphEdge, GraphNode, reinforce


def node_line(node: GraphNode) -> dict:
    return {"type": "node", "data": {"id": node.id, "label": node.label, "properties": node.properties}}


def edge_line(edge: GraphEdge) -> dict:
    return {
        "type": "edge",
        "data": {
            "id": edge.id,
            "source": edge.source,
            "target": edge.target,
            "type": edge.type,
            "properties": edge.properties,
        },
    }


def _properties(row: dict) -> dict:
    value = row["properties"]
    return value if isinstance(value, dict) else json.loads(value)


def merge_stored_nodes(rows: Iterable[dict]) -> Iterable[GraphNode]:
    """Stored rows (one per session, sorted by id) → one node per id, properties merged in order:
    a node several sessions name (an entity, an agent, an issue) is exported once. An imported row
    (`imported`: the ingested graph-backup's) comes first and is the base: the sessions' own rows
    are laid over it, their label and non-empty properties win, so an export re-ingested and
    exported again gives the same node."""
    current: GraphNode | None = None
    base_only = False  # `current` is an imported row no session row has been laid over yet
    for row in rows:
        if current is not None and current.id == row["id"]:
            if base_only and not row.get("imported"):
                current.label, base_only = row["label"], False
            current.properties.update({k: v for k, v in _properties(row).items() if v not in (None, "")})
            continue
        if current is not None:
            yield current
        current = GraphNode(row["id"], row["label"], _properties(row))
        base_only = bool(row.get("imported"))
    if current is not None:
        yield current


def merge_stored_edges(rows: Iterable[dict]) -> Iterable[GraphEdge]:
    """Stored rows (sorted by id) → one edge per id; the same link from another session
    reinforces the weight as `linkNodes` does. An imported row (first) is the base: the first
    session row's properties are laid over it and its weight replaces the imported one, as a copy
    of our own export must not reinforce the link it is a copy of."""
    current: GraphEdge | None = None
    base_only = False
    for row in rows:
        props = _properties(row)
        if current is not None and current.id == row["id"]:
            if base_only and not row.get("imported"):
                current.properties, base_only = {**current.properties, **props}, False
                continue
            current.properties = {**current.properties, **props, "weight": reinforce(current.weight, props["weight"])}
            continue
        if current is not None:
            yield current
        current = GraphEdge(row["id"], row["source"], row["target"], row["type"], props)
        base_only = bool(row.get("imported"))
    if current is not None:
        yield current


def _write_line(out: IO[str], line: dict) -> None:
    out.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")


def write_graph_backup(
    node_pages: Iterable[list[dict]], edge_pages: Iterable[list[dict]], out: IO[str]
) -> tuple[int, int]:
    """Every node line, then every edge line, as the original's `graph-backup-*.jsonl`. Each page
    holds whole id groups, sorted by id. Returns how many nodes and edges were written."""
    nodes = edges = 0
    for page in node_pages:
        for node in merge_stored_nodes(page):
            _write_line(out, node_line(node))
            nodes += 1
    for page in edge_pages:
        for edge in merge_stored_edges(page):
            _write_line(out, edge_line(edge))
            edges += 1
    return nodes, edges
