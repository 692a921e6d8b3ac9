"""The structured session summary the model must return, and its parser."""

from __future__ import annotations

import json
import re
from typing import Literal, get_args

from pydantic import BaseModel, Field, ValidationError, field_validator

Category = Literal["bugfix", "feature", "refactoring", "documentation", "new-app", "analysis", "other"]
CATEGORIES: tuple[str, ...] = get_args(Category)


class SessionSummaryOutput(BaseModel):
    """All eight fields are required, as in the original `sessionSummary` response schema."""

    summary: str = Field(min_length=1, max_length=4000, description="Goal, key decisions, modified code, outcome.")
    title: str = Field(min_length=1, description="At most 10 words.")
    category: Category
    quality: int = Field(ge=0, le=100, description="Flow and focus.")
    productivity: int = Field(ge=0, le=100, description="Goals met.")
    impact: int = Field(ge=0, le=100, description="Significance.")
    complexity: int = Field(ge=0, le=100, description="Typo < 10, deep core refactor > 90.")
    technologies: list[str] = Field(max_length=12)

    @field_validator("title")
    @classmethod
    def _title_words(cls, value: str) -> str:
        words = value.split()
        if not words:
            raise ValueError("title is blank")
        if len(words) > 10:
            raise ValueError(f"title has {len(words)} words, at most 10 are allowed")
        return value.strip()

    @field_validator("summary")
    @classmethod
    def _summary_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("summary is blank")
        return value.strip()


# What the summary prompt asks of each field (`digest.prompts`), in the output model's order.
PROMPT_LINES = {
    "summary": "the goal, the key decisions, the code that was modified, and the outcome.",
    "title": "a title of at most 10 words.",
    "category": f"one of {', '.join(CATEGORIES)}.",
    "quality": "0-100, the flow and focus of the session.",
    "productivity": "0-100, how far the goals were met.",
    "impact": "0-100, the significance of the changes.",
    "complexity": "0-100 (a typo fix is below 10, a deep core refactor above 90).",
    "technologies": "the technologies involved, as a list of strings.",
}


# The schema sent to the model bounds what a small model would otherwise generate without end (a
# summary or a title that never closes, scores past 100, an endless list), in forms a grammar can
# carry: llama.cpp compiles the schema into a grammar and unrolls each length bound into nested
# rules, and its parser gives up on a long bound (docs/routing.md). Its converter also ignores `minimum`/`maximum`, so scores are an enum. The validation keeps
# the looser bounds of the output model: a server that ignores these still gets a fair check.
WIRE_SUMMARY_CHARS = 800
_TITLE_WORD = r'[^ \t\n\r\\"]{1,24}'
_SCORES = ("quality", "productivity", "impact", "complexity")


def response_json_schema() -> dict:
    """The schema sent to the model: the output model's, with bounds a grammar can enforce."""
    schema = SessionSummaryOutput.model_json_schema()
    schema.pop("description", None)
    props = schema["properties"]
    props["summary"]["maxLength"] = WIRE_SUMMARY_CHARS
    props["title"]["pattern"] = f"^{_TITLE_WORD}( {_TITLE_WORD}){{0,9}}$"
    for score in _SCORES:
        props[score] = {"type": "integer", "enum": list(range(101)), "description": props[score]["description"]}
    props["technologies"]["maxItems"] = 8
    props["technologies"]["items"] = {"type": "string", "maxLength": 40}
    return schema


class OutputParseError(ValueError):
    """The model's reply is not the expected JSON object."""


_FENCE = re.compile(r"^\s*```(?:json|js|javascript)?\s*\n?(.*?)\n?```\s*$", re.DOTALL)


def unfenced(text: str) -> str:
    """The reply without a markdown code fence around it, if it has one (`Json.extract`)."""
    match = _FENCE.match(text)
    return match.group(1) if match else text


def parse_summary_output(text: str) -> SessionSummaryOutput:
    """Strip a markdown code fence if there is one, then parse and validate."""
    body = unfenced(text)
    try:
        # strict=False: a raw newline inside a string is a small model's habit, not a wrong answer.
        data = json.loads(body, strict=False)
    except json.JSONDecodeError as exc:
        raise OutputParseError(f"reply is not JSON ({exc.msg} at char {exc.pos}): {body[:120]!r}") from None
    try:
        return SessionSummaryOutput.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors())
        raise OutputParseError(f"reply violates the summary schema: {problems}") from None
