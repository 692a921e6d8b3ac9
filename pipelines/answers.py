"""Answers sized for an agent: the MCP tools' results as compact JSON, a session named by its card
line, each matched turn as one cited snippet, and a budget (`maxTokens`) that caps the whole answer.

An agent reads an answer to decide which session to open; the full text comes by drill-in
(`get_session_memories`, `full: true`). Tokens are counted as characters over four, as the
benchmarks count them (BENCHMARKS.md §22). An empty answer, or one that left something out, says why.
"""

from __future__ import annotations

import json
import math

SNIPPET_CHARS = 200  # of a matched turn's snippet
LINE_CHARS = 300  # of a session's line (its card's line is at most that)
DEFAULT_MAX_TOKENS = 1_500
TURNS_PER_SESSION = 2  # matched turns a compact answer cites per session


def dumps(answer: dict) -> str:
    """The answer as compact JSON: no indent, no spaces, UTF-8 text as it is."""
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"), default=str)


def tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def cut(text: str | None, limit: int) -> str | None:
    """The text, or its first `limit` characters and a marker saying how much was left out."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f" …[cut: {len(text) - limit:,} more characters]"


def short(text: str | None, limit: int = SNIPPET_CHARS) -> str | None:
    """The text on one line, at most `limit` characters (an ellipsis where it was cut)."""
    if text is None:
        return None
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cite(session_id: str, turn_id: str | None) -> str:
    """Where a snippet comes from: `session:turn` (`session` alone for its summary or card)."""
    return f"{session_id}:{turn_id}" if turn_id else session_id


def compact(result: dict) -> dict:
    """A result without its empty fields (None, "" and []): the fields stay the Memory Core's, each
    present where it says something."""
    return {k: v for k, v in result.items() if v is not None and v != "" and v != []}


def within_budget(answer: dict, key: str, max_tokens: int) -> dict:
    """The answer with results dropped from the end of `answer[key]` until its JSON fits `max_tokens`;
    `truncated` says how many and how to get them."""
    results, dropped = answer[key], 0
    while results and tokens(dumps(answer)) > max_tokens:
        results.pop()
        dropped += 1
    if dropped:
        answer["count"] = len(results)
        answer["truncated"] = (
            f"{dropped} more result{'s' if dropped > 1 else ''} left out to stay within maxTokens {max_tokens}: "
            "raise maxTokens, or read a session with get_session_memories"
        )
    return answer
