"""The extraction call's prompt, its output model and JSON schema, and the parse (with the salvage of a cut reply)."""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from digest.prompts import extraction_instructions, extraction_prompt
from digest.summary_output import unfenced

MAX_WEIGHT = 5.0
REINFORCE_STEP = 0.1
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 500

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
