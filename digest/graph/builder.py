"""Graph nodes and edges, their ids, the builder that merges them, and the merge of chunk extractions."""

from __future__ import annotations

import re
from dataclasses import dataclass

from digest.graph.chunking import Chunk
from digest.graph.extraction import MAX_WEIGHT, NEO_NODE_TYPE, NEO_RELATION, REINFORCE_STEP, GraphExtraction


@dataclass
class GraphNode:
    id: str
    label: str
    properties: dict


@dataclass
class GraphEdge:
    id: str
    source: str
    target: str
    type: str
    properties: dict  # always holds "weight"

    @property
    def weight(self) -> float:
        return self.properties["weight"]


def edge_id(source: str, target: str, edge_type: str) -> str:
    """The original import's id for an edge without one."""
    return f"{source}->{target}:{edge_type}"


def reinforce(weight: float, added: float) -> float:
    """`linkNodes` on an existing edge: the weight grows by a tenth of the new link's, up to 5.0."""
    return min(weight + REINFORCE_STEP * added, MAX_WEIGHT)


def normalize_name(name: str) -> str:
    """How relation endpoints are matched to entity names when the model's spelling drifts."""
    return " ".join(name.strip().strip("`'\"").casefold().split())


_NOT_ID_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def entity_id(entity_type: str, name: str) -> str:
    """The original's id for an extracted node with no `Type:Name` id of its own (SemanticGraphExtractor
    commit): `TYPE:` and the name as written, case kept, each character outside `[A-Za-z0-9_.-]`
    replaced by `_` per UTF-16 code unit (JavaScript's `replace`), so an astral character gives `__`."""
    clean = _NOT_ID_SAFE.sub(lambda m: "_" * (2 if ord(m.group()) > 0xFFFF else 1), name)
    return f"{NEO_NODE_TYPE.get(entity_type, entity_type)}:{clean}"


def summary_node_id(session_id: str) -> str:
    return f"summary_{session_id}"


def session_node_id(session_id: str) -> str:
    return f"session:{session_id}"


class GraphBuilder:
    """One session's nodes and edges keyed by id, merged as the original's chunk reduce does: a
    repeated node keeps its first properties but the longest description and every tag, a repeated
    edge keeps the larger weight and every justification. An edge to a node it does not hold is
    culled, unless that node is the target graph's own (`outside`)."""

    def __init__(self) -> None:
        self.nodes: dict[str, GraphNode] = {}
        self.edges: dict[str, GraphEdge] = {}

    def add_node(self, node_id: str, label: str, properties: dict) -> None:
        existing = self.nodes.get(node_id)
        if existing is None:
            self.nodes[node_id] = GraphNode(node_id, label, dict(properties))
            return
        old = existing.properties
        if len(properties.get("description") or "") > len(old.get("description") or ""):
            old["description"] = properties["description"]
        if properties.get("tags"):
            old["tags"] = list(dict.fromkeys([*old.get("tags", []), *properties["tags"]]))

    def link(
        self, source: str, target: str, edge_type: str, weight: float, properties: dict | None = None,
        outside: bool = False,
    ) -> bool:  # fmt: skip
        """False when the edge was culled: a loop, or an endpoint missing. With `outside`, one
        endpoint is a node the target graph holds itself (the seeded frontier or an agent identity,
        an issue node): not exported, so not checked here; the import culls the edge without it."""
        known = [node in self.nodes for node in (source, target)]
        if source == target or not (all(known) or (outside and any(known))):
            return False
        key = edge_id(source, target, edge_type)
        existing = self.edges.get(key)
        if existing is None:
            self.edges[key] = GraphEdge(key, source, target, edge_type, {"weight": weight, **(properties or {})})
            return True
        merged = {**existing.properties, **{k: v for k, v in (properties or {}).items() if v not in (None, "")}}
        old, added = existing.properties.get("justification") or "", (properties or {}).get("justification") or ""
        if added:
            merged["justification"] = old if added in old else " / ".join(filter(None, (old, added)))
        merged["weight"] = max(existing.weight, weight)
        existing.properties = merged
        return True


@dataclass(frozen=True)
class ExtractionStats:
    entities: int
    relations: int
    ungrounded_entities: int  # named nowhere in the raw text they were extracted from: dropped
    culled_relations: int  # an endpoint unknown or dropped


def grounded(name: str, raw_text_folded: str) -> bool:
    """The entity is named in the raw text it was extracted from: every word of its name starts a
    word there (`sort` grounds in "sorting", not in "resort"), and one word has 3+ characters (an
    entity "A" would ground anywhere). Drops what a model copied from the prompt or made up."""
    words = re.findall(r"\w+", name.casefold())
    return any(len(word) >= 3 for word in words) and all(
        re.search(rf"\b{re.escape(word)}", raw_text_folded) for word in words
    )


RAW_EVIDENCE = "raw-turns"


def merge_extractions(
    builder: GraphBuilder, session_id: str, extractions: list[tuple[Chunk, GraphExtraction]]
) -> ExtractionStats:
    """Chunk results into the graph: entities grounded in their chunk's raw text, one node per id
    (the original's `(TYPE, name)` as written; `entity_id`), with the original's properties and
    defaults. Each relation's endpoints are the names the model used, looked up in its own chunk
    first, then among earlier chunks' entities, as written before case-folded; an unknown name is
    culled. Every entity is linked MENTIONED_IN the session."""
    session_node, summary_id = session_node_id(session_id), summary_node_id(session_id)
    earlier: tuple[dict[str, str], dict[str, str]] = ({}, {})  # name as written / folded → node id
    entity_ids: set[str] = set()
    relation_ids: set[str] = set()
    ungrounded = culled = 0
    for chunk, extraction in extractions:
        raw_text_folded = chunk.text.casefold()
        local: tuple[dict[str, str], dict[str, str]] = ({}, {})
        for entity in extraction.entities:
            if not grounded(entity.name, raw_text_folded):
                ungrounded += 1
                continue
            node_id = entity_id(entity.type, entity.name)
            for names in (local, earlier):
                names[0].setdefault(entity.name, node_id)
                names[1].setdefault(normalize_name(entity.name), node_id)
            label = NEO_NODE_TYPE.get(entity.type, entity.type)
            builder.add_node(
                node_id,
                label,
                {
                    "name": entity.name,
                    "description": entity.description,
                    "semanticVectorId": summary_id,
                    "logical_layer": "Unknown",
                    "stability": "UNKNOWN",
                    "gravity_well": False,
                    "strategic_weight": 0.1,
                    "confidence": 0.5,
                    "tags": [entity.type] if label != entity.type else [],
                    "context_source": session_id,
                    "evidence": RAW_EVIDENCE,
                },
            )
            provenance = {"justification": "", "context_source": session_id, "evidence": RAW_EVIDENCE}
            builder.link(node_id, session_node, "MENTIONED_IN", 1.0, provenance)
            entity_ids.add(node_id)

        def resolve(name: str, local: tuple[dict, dict] = local) -> str | None:
            folded = normalize_name(name)
            return local[0].get(name) or earlier[0].get(name) or local[1].get(folded) or earlier[1].get(folded)

        for relation in extraction.relations:
            source, target = resolve(relation.source), resolve(relation.target)
            relation_type = NEO_RELATION.get(relation.type, relation.type)
            justification = relation.description
            if relation_type != relation.type:
                justification = f"{relation.type}: {justification}" if justification else relation.type
            properties = {"justification": justification, "context_source": session_id, "evidence": RAW_EVIDENCE}
            linked = source is not None and target is not None
            if not (linked and builder.link(source, target, relation_type, relation.weight, properties)):
                culled += 1
                continue
            relation_ids.add(edge_id(source, target, relation_type))
    return ExtractionStats(
        entities=len(entity_ids), relations=len(relation_ids), ungrounded_entities=ungrounded, culled_relations=culled
    )
