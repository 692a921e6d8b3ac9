"""Turn documents, canonical order and the input revision, as the Neo.mjs Memory Core defines them."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import icu


@dataclass(frozen=True)
class Turn:
    """One raw turn as the summarizer and the graph extractor read it."""

    id: str
    session_id: str
    document: str
    ts_ms: int | None = None
    agent: str | None = None
    agent_identity: str | None = None
    model: str | None = None
    user_id: str | None = None
    amount_tool_calls: int | None = None
    tools_used: str | None = None
    mini_summary: str | None = None


def compose_document(prompt: str, thought: str, response: str) -> str:
    """The canonical turn text (`composeTurnDocumentText`)."""
    return f"User Prompt: {prompt}\nAgent Thought: {thought}\nAgent Response: {response}"


# `String.prototype.localeCompare` as Node (V8 over ICU) runs it in the original: the default
# locale's collator (en-US, whose collation is ICU's root), tertiary strength, normalization on.
# The order is the linked ICU's: Node 20.20 bundles ICU 78, which ranks the apostrophes (' ‘ ’ ׳)
# alike and the double quotes (" “ ”) alike; the system ICU 72 still tells them apart, and knows
# no character newer than Unicode 15. Ids with neither sort as Node sorts them.
_COLLATOR = icu.Collator.createInstance(icu.Locale.getRoot())
_COLLATOR.setAttribute(icu.UCollAttribute.NORMALIZATION_MODE, icu.UCollAttributeValue.ON)


def canonical_order(turns: list[Turn]) -> list[Turn]:
    """`canonicalizeSessionTurnInput`: timestamp ascending (a missing one counts as 0), ties broken
    by id in `localeCompare` order (`_z` < `10` < `9` < `ax` < `aY` < `Bx`), not code point order.

    Ids the collator holds equal (`á` and `a` + U+0301) keep their read order in the original, whose
    sort is stable over Chroma's order; here code point order settles them, so the order (and the
    revision) does not depend on the order the turns were read in.
    """
    return sorted(turns, key=lambda t: (t.ts_ms or 0, _COLLATOR.getSortKey(t.id), t.id))


def input_revision(turns: list[Turn]) -> str:
    """`sha256:` over the ordered turns, the contract between summary and graph digestion.

    `computeSessionTurnInputRevision` byte for byte: JSON.stringify's compact separators, every
    key present, and a missing identity as `null` (`metadata.agentIdentity ?? null`).
    """
    rows = [
        {"id": t.id, "document": t.document, "agentIdentity": t.agent_identity, "sessionId": t.session_id, "userId": t.user_id}
        for t in turns
    ]
    payload = json.dumps({"version": 1, "turns": rows}, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(payload.encode("utf-8")).hexdigest()


_SAFE_KEY = re.compile(r"[^A-Za-z0-9_-]")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def partition_key(session_id: str) -> str:
    """A Dagster-safe partition key: `[A-Za-z0-9_-]`, at most 64 characters.

    An id that is already safe is kept as it is; any other gets a hash suffix so that two ids
    that sanitize alike (`a.b`, `a,b`) never share a key.
    """
    cleaned = _SAFE_KEY.sub("_", session_id)
    if cleaned == session_id and 0 < len(session_id) <= 64:
        return session_id
    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:10]
    return f"{cleaned[:53]}-{digest}"


def parse_timestamp_ms(value: object) -> int | None:
    """Epoch milliseconds from a number, a numeric string or an ISO-8601 string.

    Raises ValueError for anything else, so the ingest can reject the line with its reason.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"timestamp {value!r} is a boolean")
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"timestamp {value!r} is not finite")
        return _in_bigint_range(int(value), value)
    if isinstance(value, str):
        text = value.strip()
        try:
            ms = int(float(text))
        except OverflowError:  # "inf", "Infinity": float() accepts them, int() does not
            raise ValueError(f"timestamp {value!r} is not finite") from None
        except ValueError:
            pass
        else:
            return _in_bigint_range(ms, value)
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"timestamp {value!r} is neither epoch ms nor ISO-8601") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        # Integer arithmetic: `int(parsed.timestamp() * 1000)` loses a millisecond to float rounding.
        return (parsed - _EPOCH) // timedelta(milliseconds=1)
    raise ValueError(f"timestamp has type {type(value).__name__}")


def _in_bigint_range(ms: int, value: object) -> int:
    """`turns.ts_ms` is a BIGINT: a larger value would fail the whole batch's insert, not one line."""
    if not -(2**63) <= ms < 2**63:
        raise ValueError(f"timestamp {value!r} is out of range")
    return ms
