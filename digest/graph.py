"""The session graph: provenance nodes, and semantic extraction from raw turns (the original's REM pass).

The evidence rule: entities and relations come only from the model's extraction over the session's
raw turn documents, cut into turn-aligned chunks that each fit the model's budget. A summary,
degraded or not, is a navigation index: it names its own SESSION_SUMMARY node, and its text is
scanned for issue references (as the original's DISCUSSED_IN does), nothing more.

Here: the budget and the chunker, the extraction prompt and its output model, the merge of chunk
results, the provenance nodes and edges, the digest-state transitions and the export line shapes.
No Dagster here: the asset wires a client, a ledger and the store in.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import IO, Literal, Protocol

from pydantic import BaseModel, Field, ValidationError, field_validator

from digest.friction import DETERMINISTIC_SYMPTOMS, EmissionPoint, FrictionEvent, Symptom, classify_error
from digest.model_api import ChatClient, ChatReply, ModelError
from digest.pacing import Pacer
from digest.prompts import TURN_SEPARATOR, extraction_instructions, extraction_prompt
from digest.summary_output import unfenced
from digest.synthesis import Ledger, Limits, SourceTier, call_attempt, prompt_friction
from digest.turns import Turn, canonical_order, input_revision
from digest.visibility import normalize_user_id, summary_user_id

CONSUMER = "session_graph"
SERVICE_DOMAIN = "dream-pipeline"
# A chunk with less room than this for turn text is not worth a model call: the window is misconfigured.
MIN_CHUNK_CONTENT_BYTES = 512
MAX_WEIGHT = 5.0
REINFORCE_STEP = 0.1
DISCUSSED_IN_WEIGHT = 0.8
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 500
PROVENANCE_POLICY = "most-restrictive-source"

# --- settings --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphPolicy:
    """The graph's own bounds; the context, safe band and token estimate are the model's (`Limits`)."""

    chunk_limit_tokens: int = 50000
    output_limit_tokens: int = 8192
    max_attempts: int = 3
    timeout_s: float = 600.0
    max_chunks: int = 64  # more chunk calls than this for one session: undigestible (size pre-check)
    batch_sessions: int = 10  # sessions one digest sensor tick launches at most
    fresh_reserve: int = 2  # of those, the newest; the rest are the oldest, so nothing starves
    budget_s: float = 1800.0  # model time one digest run may spend; it starts no chunk after that


def graph_limits(model: Limits, policy: GraphPolicy) -> Limits:
    """The model's context, safe band, raw cap and estimate, with the graph's output cap and timeout.
    The raw cap stays: it is the host's largest prompt that finishes in time, whatever the call."""
    return replace(model, max_output_tokens=policy.output_limit_tokens, timeout_s=policy.timeout_s)


def prompt_window_tokens(model: Limits, policy: GraphPolicy) -> int:
    """The largest extraction prompt: min(graph chunk limit, raw cap when on, safe band, context −
    graph output limit)."""
    return min(policy.chunk_limit_tokens, graph_limits(model, policy).prompt_budget_tokens)


def chunk_content_budget_bytes(model: Limits, policy: GraphPolicy) -> int:
    """Bytes of turn text one chunk may carry: the window less the prompt's own size. Counted in
    bytes, so `estimate_tokens` of any chunk's prompt stays within the window."""
    window_bytes = int(prompt_window_tokens(model, policy) * model.bytes_per_token)
    return window_bytes - len(build_extraction_prompt("").encode("utf-8"))


# --- the extraction prompt and its output ------------------------------------------------------

EntityType = Literal["CONCEPT", "CLASS", "METHOD", "FILE", "TEST", "TECHNOLOGY", "TOOL"]
RelationType = Literal[
    "IMPLEMENTS", "EXTENDS", "DEPENDS_ON", "BLOCKS", "RELATES_TO", "RESOLVES", "CAUSES_ISSUE", "MODIFIES", "TESTS"
]  # fmt: skip
ENTITY_TYPES: tuple[str, ...] = EntityType.__args__
RELATION_TYPES: tuple[str, ...] = RelationType.__args__
# Ours that the original's graph does not have (its SemanticGraphExtractor VALID_TYPES and
# relationships), filed as it files them: an unknown type as CONCEPT (the extracted type kept in
# `tags`), an unknown relation as RELATES_TO (kept in `justification`).
NEO_NODE_TYPE = {"TECHNOLOGY": "CONCEPT", "TOOL": "CONCEPT"}
NEO_RELATION = {"MODIFIES": "RELATES_TO", "TESTS": "RELATES_TO"}

EXTRACTION_INSTRUCTIONS = extraction_instructions(ENTITY_TYPES, RELATION_TYPES)


def build_extraction_prompt(content: str) -> str:
    return extraction_prompt(EXTRACTION_INSTRUCTIONS, content)


def _upper_token(value: object) -> object:
    """`depends on`, `Depends-On` → `DEPENDS_ON`: servers without a grammar get the case wrong."""
    return re.sub(r"[\s-]+", "_", value.strip()).upper() if isinstance(value, str) else value


def _one_line(value: object, limit: int) -> object:
    return " ".join(value.split())[:limit] if isinstance(value, str) else value


def _name_line(value: object) -> object:
    return _one_line(value, MAX_NAME_CHARS)


def _description_line(value: object) -> object:
    return _one_line(value, MAX_DESCRIPTION_CHARS)


class ExtractedEntity(BaseModel):
    name: str = Field(min_length=1)
    type: EntityType
    description: str

    _type = field_validator("type", mode="before")(_upper_token)
    _name = field_validator("name", mode="before")(_name_line)
    _description = field_validator("description", mode="before")(_description_line)


class ExtractedRelation(BaseModel):
    source: str = Field(min_length=1)
    target: str = Field(min_length=1)
    type: RelationType
    description: str
    weight: float

    _type = field_validator("type", mode="before")(_upper_token)
    _endpoint = field_validator("source", "target", mode="before")(_name_line)
    _description = field_validator("description", mode="before")(_description_line)

    @field_validator("weight")
    @classmethod
    def _weight(cls, value: float) -> float:
        # Clamped rather than bounded in the schema: a numeric bound is one more grammar rule to trip on.
        return min(max(value, REINFORCE_STEP), MAX_WEIGHT)


class GraphExtraction(BaseModel):
    entities: list[ExtractedEntity]
    relations: list[ExtractedRelation]


class GraphParseError(ValueError):
    """The model's reply is not a graph extraction."""


# llama.cpp compiles the schema into a grammar: length bounds unroll into rules that crash its
# parser, and `$ref`s are not understood everywhere, so the schema sent is inlined and unbounded.
_GRAMMAR_UNSAFE_KEYS = ("minLength", "maxLength", "minItems", "maxItems")


def _inline(node: object, defs: dict) -> object:
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {k: _inline(v, defs) for k, v in node.items() if k not in _GRAMMAR_UNSAFE_KEYS and k != "$defs"}
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    return node


def extraction_json_schema() -> dict:
    schema = GraphExtraction.model_json_schema()
    return _inline(schema, schema.get("$defs", {}))


def _validate(data: object) -> GraphExtraction:
    try:
        return GraphExtraction.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors()[:5])
        raise GraphParseError(f"reply violates the graph schema: {problems}") from None


def parse_extraction(text: str) -> GraphExtraction:
    """Strip a markdown fence if there is one, then parse and validate."""
    body = unfenced(text)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise GraphParseError(f"reply is not JSON ({exc.msg} at char {exc.pos}): {body[:120]!r}") from None
    return _validate(data)


def salvage_cut_reply(text: str) -> GraphExtraction:
    """A reply cut at the output cap, mid-list: its complete entities and relations, validated.
    Small models under a grammar often repeat list items until the cap; what came before the cut
    is whole objects the model emitted, so the cut costs the tail, not the chunk."""
    body, decoder = unfenced(text), json.JSONDecoder()
    data: dict[str, list] = {}
    for key in ("entities", "relations"):
        start = re.search(rf'"{key}"\s*:\s*\[', body)
        items: list = []
        position = start.end() if start else len(body)
        while position < len(body):
            position = len(body) - len(body[position:].lstrip(" \t\r\n,"))
            if body.startswith("]", position):
                break
            try:
                item, position = decoder.raw_decode(body, position)
            except json.JSONDecodeError:
                break
            items.append(item)
        data[key] = items
    if not data["entities"]:
        raise GraphParseError(f"reply was cut at the output cap before one complete entity: {body[:120]!r}")
    return _validate(data)


# --- chunking ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str
    turn_ids: tuple[str, ...]  # the turns whose text (whole, or a piece) it carries

    @property
    def digest(self) -> str:
        """Names the chunk's range of text: a stored result is reused only for the same text."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def _byte_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _split_bytes(text: str, budget: int) -> list[str]:
    """Pieces of at most `budget` UTF-8 bytes, cut between characters."""
    data, pieces, start = text.encode("utf-8"), [], 0
    while start < len(data):
        end = min(start + budget, len(data))
        while end < len(data) and (data[end] & 0xC0) == 0x80:  # inside a multi-byte character
            end -= 1
        pieces.append(data[start:end].decode("utf-8"))
        start = end
    return pieces


def split_oversized(text: str, budget: int) -> list[str]:
    """A turn too large for a chunk on its own: pieces on line boundaries, a longer line on
    character boundaries, each piece within `budget` bytes."""
    if _byte_len(text) <= budget:
        return [text]
    pieces, current, size = [], [], 0
    for line in text.splitlines(keepends=True):
        n = _byte_len(line)
        if size + n > budget and current:
            pieces.append("".join(current))
            current, size = [], 0
        if n > budget:
            pieces.extend(_split_bytes(line, budget))
        else:
            current.append(line)
            size += n
    if current:
        pieces.append("".join(current))
    return pieces


def chunk_turns(turns: list[Turn], budget_bytes: int) -> list[Chunk]:
    """Turn-aligned chunks of the turn documents, each within `budget_bytes`: whole turns joined
    by the summary's separator, and a turn over the budget split into budget-sized pieces."""
    separator = _byte_len(TURN_SEPARATOR)
    chunks: list[Chunk] = []
    texts: list[str] = []
    ids: list[str] = []
    size = 0

    def flush() -> None:
        if texts:
            chunks.append(Chunk(len(chunks), TURN_SEPARATOR.join(texts), tuple(dict.fromkeys(ids))))
            texts.clear()
            ids.clear()

    for turn in turns:
        if not turn.document.strip():
            continue
        for piece in split_oversized(turn.document, budget_bytes):
            n = _byte_len(piece)
            if texts and size + separator + n > budget_bytes:
                flush()
            size = n if not texts else size + separator + n
            texts.append(piece)
            ids.append(turn.id)
    flush()
    return chunks


# --- nodes, edges and the merge ------------------------------------------------------------------


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


# --- provenance --------------------------------------------------------------------------------

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


def summary_node_id(session_id: str) -> str:
    return f"summary_{session_id}"


def session_node_id(session_id: str) -> str:
    return f"session:{session_id}"


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


# --- digest state ----------------------------------------------------------------------------------


class DigestStatus(StrEnum):
    DIGESTED = "digested"
    UNDIGESTED = "undigested"
    UNDIGESTIBLE = "undigestible"


class DeferReason(StrEnum):
    """Why a session is not digested (yet): the original's reasons, and ours."""

    SKIP_OVER_BAND = "skip-over-band"
    WALL_CLOCK_TIMEOUT = "wall-clock-timeout"
    SCHEMA_FAILURE = "schema-failure"
    PROVIDER_ERROR = "provider-error"  # ours: the original files it under schema-failure
    UNDER_BAND_CHOKE = "under-band-choke"  # context-overflow and anything else, as the original
    OPERATOR_RESET = "operator-reset"


UNDIGESTIBLE = DigestStatus.UNDIGESTIBLE  # the name `resources.store` imports
DEFER_REASONS = {
    Symptom.SIZE_PRECHECK_SKIP: DeferReason.SKIP_OVER_BAND,
    Symptom.TIMEOUT: DeferReason.WALL_CLOCK_TIMEOUT,
    Symptom.PARSE_FAILURE: DeferReason.SCHEMA_FAILURE,
    Symptom.PROVIDER_ERROR: DeferReason.PROVIDER_ERROR,
}


@dataclass(frozen=True)
class DigestState:
    digest_state: DigestStatus
    attempts: int  # failed attempts at `revision`
    defer_reason: DeferReason | None
    revision: str


def after_success(revision: str) -> DigestState:
    return DigestState(DigestStatus.DIGESTED, 0, None, revision)


def after_failure(previous: DigestState | None, revision: str, symptom: Symptom, max_attempts: int) -> DigestState:
    """Count the failure (from 1 again when the turns changed); undigestible at once for a
    deterministic symptom (a size pre-check, a context overflow: the same input fails the same
    way, so retrying only costs model time), after `max_attempts` for anything else."""
    attempts = (previous.attempts if previous and previous.revision == revision else 0) + 1
    terminal = symptom in DETERMINISTIC_SYMPTOMS or attempts >= max_attempts
    return DigestState(
        DigestStatus.UNDIGESTIBLE if terminal else DigestStatus.UNDIGESTED,
        attempts,
        DEFER_REASONS.get(symptom, DeferReason.UNDER_BAND_CHOKE),
        revision,
    )


def after_reset(previous: DigestState) -> DigestState:
    """An operator's reset: back in the cadence with its attempts restored."""
    return DigestState(DigestStatus.UNDIGESTED, 0, DeferReason.OPERATOR_RESET, previous.revision)


def reset_undigestible(previous: DigestState | None) -> DigestState | None:
    """`reset-digest`: only an undigestible session is reset; None for any other (no change)."""
    if previous is None or previous.digest_state != UNDIGESTIBLE:
        return None
    return after_reset(previous)


def digest_gate(current_revision: str, summary: dict | None, state: DigestState | None) -> str | None:
    """Why this session must not be digested now, or None. The summary must describe the turns
    as they are (the revision contract), and an undigestible verdict holds until the turns change
    or an operator resets it."""
    if summary is None:
        return "no summary yet: summarize the session first"
    if summary["input_revision"] != current_revision:
        return "turns changed since the summary (input revision mismatch): pending a new summary"
    if state is not None and state.digest_state == DigestStatus.UNDIGESTIBLE and state.revision == current_revision:
        return f"undigestible ({state.defer_reason}, {state.attempts} attempts): `session-digest reset-digest` to retry"
    return None


# --- the digest -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionGraph:
    session_id: str
    input_revision: str
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    chunks: int
    cut_replies: int  # chunks whose reply hit the output cap; their complete items were kept
    stats: ExtractionStats
    issues: int


@dataclass(frozen=True)
class DigestResult:
    graph: SessionGraph | None
    failure: Symptom | None  # the friction symptom that stopped it
    chunks_planned: int
    chunks_done: int
    note: str = ""
    left_for_later: int = 0  # chunks the run's budget did not reach: the next run does them
    chunks_resumed: int = 0  # results stored by earlier runs, used with no model call
    model_seconds: float = 0.0


class ChunkStore(Protocol):
    """Where finished chunk results are kept between runs (DuckDB in production), keyed by session,
    input revision, chunk index and the chunk's text digest: a session cut short by the budget goes
    on in the next run, and no chunk is sent twice."""

    def finished_chunks(self, session_id: str, revision: str) -> dict[tuple[int, str], tuple[GraphExtraction, bool]]:
        """(index, digest) → (extraction, whether its reply was cut at the output cap)."""
        ...

    def save_chunk(
        self, session_id: str, revision: str, chunk: Chunk, extraction: GraphExtraction, cut: bool, model: str
    ) -> None: ...


def _friction(session_id, client, limits, prompt, symptom, point, note, error=None) -> FrictionEvent:
    return prompt_friction(CONSUMER, session_id, client, limits, prompt, symptom, point, note, error, SERVICE_DOMAIN)


def _extract(
    client: ChatClient,
    chunk: Chunk,
    total: int,
    limits: Limits,
    policy: GraphPolicy,
    ledger: Ledger,
    session_id: str,
    pacer: Pacer,
) -> tuple[GraphExtraction | None, BaseException | None, str, bool, float]:
    """One chunk's model call, its attempt recorded whatever happens; True when its reply was cut
    at the output cap and only its complete items were kept; the call's model seconds."""
    prompt = build_extraction_prompt(chunk.text)
    reply: ChatReply | None = None
    error: BaseException | None = None
    extraction = None
    cut = False
    plan = pacer.plan(limits.estimate_tokens(prompt), policy.output_limit_tokens, client.streaming)
    try:
        reply = client.chat(
            prompt,
            schema=extraction_json_schema(),
            max_output_tokens=policy.output_limit_tokens,
            timeout_s=plan.timeout_s,
            stall_s=plan.stall_s,
        )
        try:
            extraction = parse_extraction(reply.text)
        except GraphParseError:
            if reply.finish_reason != "length":
                raise
            extraction, cut = salvage_cut_reply(reply.text), True
    except (ModelError, GraphParseError) as exc:
        error = exc
    # Tier raw: graph evidence is always the raw turns.
    where = f"chunk {chunk.index + 1}/{total}: "
    attempt = call_attempt(
        session_id, "graph", SourceTier.RAW, prompt, limits, client.model, reply, error, where, plan=plan
    )
    ledger.record_attempt(attempt)
    pacer.observe(attempt.speed_sample(), error)
    return extraction, error, prompt, cut, attempt.duration_s


def digest_session(
    turns: list[Turn],
    summary: dict,
    client: ChatClient,
    limits: Limits,
    policy: GraphPolicy,
    ledger: Ledger,
    chunk_store: ChunkStore | None = None,
    pacer: Pacer | None = None,
) -> DigestResult:
    """The session's graph: provenance from the stored rows, semantics from the model over raw
    turn chunks. The first failed chunk stops the digest (friction recorded, no graph), so a
    failing session costs one call a try, not one per chunk. A chunk is started only while the
    run's model time (`policy.budget_s`) is left; with `chunk_store`, finished chunks are kept
    there and a later run starts where this one stopped. `pacer`: each call's deadlines
    (`digest.pacing`); default `policy.timeout_s`, fixed."""
    pacer = pacer or Pacer.fixed(policy.timeout_s)
    if not turns:
        raise ValueError("a session with no turns cannot be digested")
    ordered = canonical_order(turns)
    session_id = ordered[0].session_id
    budget = chunk_content_budget_bytes(limits, policy)
    window = prompt_window_tokens(limits, policy)
    limits = graph_limits(limits, policy)
    chunks = chunk_turns(ordered, max(budget, 1))
    over = None
    if budget < MIN_CHUNK_CONTENT_BYTES:
        over = f"the prompt window ({window} tokens) leaves {budget} bytes for turn text"
    elif len(chunks) > policy.max_chunks:
        over = f"{len(chunks)} chunks of {budget} bytes needed, over DIGEST_GRAPH_MAX_CHUNKS={policy.max_chunks}"
    if over:
        whole = build_extraction_prompt(TURN_SEPARATOR.join(t.document for t in ordered))
        ledger.record_friction(
            _friction(
                session_id,
                client,
                limits,
                whole,
                Symptom.SIZE_PRECHECK_SKIP,
                EmissionPoint.PRE_INVOCATION,
                f"no graph call: {over}",
            )
        )
        return DigestResult(None, Symptom.SIZE_PRECHECK_SKIP, len(chunks), 0, over)

    revision = input_revision(ordered)
    finished = chunk_store.finished_chunks(session_id, revision) if chunk_store else {}
    extractions: list[tuple[Chunk, GraphExtraction]] = []
    cut_replies = resumed = 0
    spent = 0.0
    for chunk in chunks:
        stored = finished.get((chunk.index, chunk.digest))
        if stored is not None:
            extraction, cut = stored
            resumed += 1
        elif spent >= policy.budget_s:
            left = sum((c.index, c.digest) not in finished for c in chunks[chunk.index :])
            note = (
                f"{len(chunks) - left}/{len(chunks)} chunks done, {spent:.0f}s of the {policy.budget_s:g}s "
                "budget spent: the next run goes on from here"
            )
            return DigestResult(
                None, None, len(chunks), len(chunks) - left, note, left_for_later=left, chunks_resumed=resumed,
                model_seconds=spent,
            )  # fmt: skip
        else:
            extraction, error, prompt, cut, seconds = _extract(
                client, chunk, len(chunks), limits, policy, ledger, session_id, pacer
            )
            spent += seconds
            if error is not None:
                symptom = classify_error(error)
                note = f"chunk {chunk.index + 1}/{len(chunks)}"
                ledger.record_friction(
                    _friction(
                        session_id, client, limits, prompt, symptom, EmissionPoint.POST_INVOCATION_FAILURE, note, error
                    )
                )
                return DigestResult(
                    None, symptom, len(chunks), chunk.index, f"{note}: {error}", chunks_resumed=resumed,
                    model_seconds=spent,
                )  # fmt: skip
            if chunk_store is not None:
                chunk_store.save_chunk(session_id, revision, chunk, extraction, cut, client.model)
        cut_replies += cut
        extractions.append((chunk, extraction))

    builder = GraphBuilder()
    issues = add_provenance(builder, ordered, summary)
    stats = merge_extractions(builder, session_id, extractions)
    graph = SessionGraph(
        session_id=session_id,
        input_revision=revision,
        nodes=list(builder.nodes.values()),
        edges=list(builder.edges.values()),
        chunks=len(chunks),
        cut_replies=cut_replies,
        stats=stats,
        issues=issues,
    )
    return DigestResult(graph, None, len(chunks), len(chunks), chunks_resumed=resumed, model_seconds=spent)


# --- export (graph-backup JSONL) ------------------------------------------------------------------


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
