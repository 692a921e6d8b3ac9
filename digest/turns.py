"""Turn documents, canonical order and the input revision, as the Neo.mjs Memory Core defines them."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from digest.collation import RootCollator


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


# The canonical document is `User Prompt: …\nAgent Thought: …\nAgent Response: …`.
PROMPT_LABEL = "User Prompt: "
THOUGHT_LABEL = "\nAgent Thought: "
RESPONSE_LABEL = "\nAgent Response: "


def split_document(document: str) -> tuple[str, str]:
    """Prompt and response out of a canonical turn document, the thought left behind.

    The prompt ends at the first label after it and the response starts after the last response
    label, so a label quoted inside a field can shorten what is sent but never let the thought in.
    A document with none of the labels has no thought to strip: it is all response.
    """
    labelled = document.startswith(PROMPT_LABEL) or THOUGHT_LABEL in document or RESPONSE_LABEL in document
    if not labelled:
        return "", document
    head = document[len(PROMPT_LABEL) :] if document.startswith(PROMPT_LABEL) else ""
    ends = [i for i in (head.find(THOUGHT_LABEL), head.find(RESPONSE_LABEL)) if i >= 0]
    prompt = head[: min(ends)] if ends else head
    cut = document.rfind(RESPONSE_LABEL)
    response = document[cut + len(RESPONSE_LABEL) :] if cut >= 0 else ""
    return prompt, response


# `String.prototype.localeCompare` as Node (V8 over ICU) runs it in the original: the default
# locale's collator (en-US, whose collation is ICU's root), tertiary strength, normalization on.
# The order is the system ICU's (`digest.collation`, its C API through ctypes): Node 20.20 bundles
# ICU 78, which ranks the apostrophes (' ‘ ’ ׳) alike and the double quotes (" “ ”) alike; the
# system ICU 72 still tells them apart, and knows no character newer than Unicode 15. Ids with
# neither sort as Node sorts them.
_COLLATOR = RootCollator()


def canonical_order(turns: list[Turn]) -> list[Turn]:
    """`canonicalizeSessionTurnInput`: timestamp ascending (a missing one counts as 0), ties broken
    by id in `localeCompare` order (`_z` < `10` < `9` < `ax` < `aY` < `Bx`), not code point order.

    Ids the collator holds equal (`á` and `a` + U+0301) keep their read order in the original, whose
    sort is stable over Chroma's order; here code point order settles them, so the order (and the
    revision) does not depend on the order the turns were read in.
    """
    return sorted(turns, key=lambda t: (t.ts_ms or 0, id_sort_key(t.id), t.id))


def id_sort_key(turn_id: str) -> bytes:
    """A turn id's place in `localeCompare` order (`canonical_order`'s tie-break)."""
    return _COLLATOR.sort_key(turn_id)


def input_revision(turns: list[Turn]) -> str:
    """`sha256:` over the ordered turns, the contract between summary and graph digestion.

    `computeSessionTurnInputRevision` byte for byte: JSON.stringify's compact separators, every
    key present, and a missing identity as `null` (`metadata.agentIdentity ?? null`).
    """
    rows = [
        {
            "id": t.id,
            "document": t.document,
            "agentIdentity": t.agent_identity,
            "sessionId": t.session_id,
            "userId": t.user_id,
        }
        for t in turns
    ]
    payload = json.dumps({"version": 1, "turns": rows}, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(payload.encode("utf-8")).hexdigest()


_SAFE_KEY = re.compile(r"[^A-Za-z0-9_-]")
_HASHED_SHAPE = re.compile(r"(.*)-[0-9a-f]{10}")
_HASH_PREFIX_CHARS = 53  # + "-" + 10 hex digits = 64
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def partition_key(session_id: str) -> str:
    """A Dagster-safe partition key: `[A-Za-z0-9_-]`, 1 to 64 characters, one per session.

    A safe id is kept as it is, so the keys stores and Dagster instances hold stay valid. Any
    other id gets a hashed key: its first 53 characters with each unsafe one made `_`, then `-`
    and 10 hex digits of its SHA-256 (`a.b` → `a_b-2e7336dc8e`).

    A safe id of that hashed shape would be kept as itself and so could take another session's
    key (`a_b-2e7336dc8e` beside `a.b`): such an id is hashed too, but only when some id could
    hash to it at all (`_could_be_hashed`), so `run-1700000000` keeps its key. Kept keys and hashed
    keys are then disjoint by construction; two hashed keys meet only if the ids share their first
    53 cleaned characters and 40 bits of SHA-256 (odds of about n²/2⁴¹ for n such ids).
    """
    if 0 < len(session_id) <= 64 and not _SAFE_KEY.search(session_id) and not _could_be_hashed(session_id):
        return session_id
    cleaned = _SAFE_KEY.sub("_", session_id)
    digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:10]
    return f"{cleaned[:_HASH_PREFIX_CHARS]}-{digest}"


def _could_be_hashed(key: str) -> bool:
    """Whether `key` has the shape `PREFIX-hhhhhhhhhh` with a prefix some hashed key has.

    Each unsafe character becomes one `_`, so a hashed id's prefix is empty (the empty id), 53
    characters long (a long id), holds a `_` (an unsafe character, or a safe id's own `_`), or
    is itself of a hashed shape (a safe id hashed by this rule, such as `-0123456789`).
    """
    match = _HASHED_SHAPE.fullmatch(key)
    if match is None:
        return False
    prefix = match.group(1)
    return not prefix or len(prefix) == _HASH_PREFIX_CHARS or "_" in prefix or _could_be_hashed(prefix)


def parse_timestamp_ms(value: object, *, seconds: bool = False) -> int | None:
    """Epoch milliseconds from a number, a numeric string or an ISO-8601 string; with `seconds`, a
    number (or numeric string) is epoch seconds, as `time.time()` writes it.

    Raises ValueError for anything else, and for an instant outside years 1 to 9999 whatever its
    form, so the ingest can reject the line with its reason.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"timestamp {value!r} is a boolean")
    scale = 1000 if seconds else 1
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"timestamp {value!r} is not finite")
        return _in_range(int(value * scale), value)
    if isinstance(value, str):
        text = value.strip()
        try:
            ms = int(float(text) * scale)
        except OverflowError:  # "inf", "Infinity": float() accepts them, int() does not
            raise ValueError(f"timestamp {value!r} is not finite") from None
        except ValueError:
            pass
        else:
            return _in_range(ms, value)
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"timestamp {value!r} is neither epoch ms nor ISO-8601") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        # Integer arithmetic: `int(parsed.timestamp() * 1000)` loses a millisecond to float rounding.
        return _in_range((parsed - _EPOCH) // timedelta(milliseconds=1), value)
    raise ValueError(f"timestamp has type {type(value).__name__}")


# The instants a `datetime` can hold (years 1 to 9999 in UTC): every later step turns `ts_ms` back
# into one (`datetime.fromtimestamp`), so an epoch number past them would fail that session's
# summary run on every sweep, while the same instant in ISO-8601 never parses at all.
MIN_TS_MS = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1)
MAX_TS_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1)


def _in_range(ms: int, value: object) -> int:
    if not MIN_TS_MS <= ms <= MAX_TS_MS:
        raise ValueError(f"timestamp {value!r} is out of range: outside years 1 to 9999 (UTC)")
    return ms


def session_rows(turns: list[Turn]) -> list[dict]:
    """What a session is, derived from its turns: one row per session of these turns (its
    partition key, turn count, activity span, raw bytes and input revision)."""
    by_session: dict[str, list[Turn]] = {}
    for turn in turns:
        by_session.setdefault(turn.session_id, []).append(turn)
    rows = []
    for sid, session_turns in by_session.items():
        ordered = canonical_order(session_turns)
        stamps = [t.ts_ms for t in ordered if t.ts_ms is not None]
        rows.append(
            {
                "session_id": sid,
                "partition_key": partition_key(sid),
                "turn_count": len(ordered),
                "first_activity_ms": min(stamps) if stamps else None,
                "last_activity_ms": max(stamps) if stamps else None,
                "raw_bytes": sum(len(t.document.encode("utf-8")) for t in ordered),
                "input_revision": input_revision(ordered),
            }
        )
    return rows
