"""Neo.mjs export bundles, routed by file name as the original's import does:
- `memory-backup-*.jsonl`: turn rows `{id, embedding, metadata, document}`;
- `graph-backup-*.jsonl`: every node and edge line is kept by id (`imported_graph_nodes`,
  `imported_graph_edges`: the source system's graph, written back by `export-graph` and archives),
  and `AGENT_MEMORY` node lines give the turns' mini summaries;
- `summaries-backup-*.jsonl`: the exported session summaries, kept for drift detection;
- `temporal-summary-backup-*.jsonl`: recognised and skipped (nothing here consumes it).

The 4096-float embedding of each vector row is cut out of the line before JSON parsing
(`common.cut_embedding`) and checked cheaply as text (`embedding_text`); the store parses it as it
writes the batch and keeps a float32-origin vector as numbers, any other as its text
(resources/store/vectors.py), so an archive writes back numbers that parse to exactly the values
the line held.
"""

from __future__ import annotations

import json
import math
import re

from digest.readers.common import Reject, required_id, text_field, timestamp, turn_row
from digest.redact import counts_problem
from digest.summary_output import SourceTier

# What a vector's text may hold between its brackets: JSON numbers, commas and blanks. Checking
# the characters (bytes.translate, in C) costs a small part of parsing the 4096 floats; a
# malformed number made of them (`1-2`) is not caught (JSON.stringify, which writes the
# original's exports, never writes one).
_NUMBER_BYTES = b"0123456789.eE+-,"
_BLANKS = b" \t"
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
# A number JavaScript reads as Infinity: an exponent of 3+ digits (checked exactly), or 309+ digits.
_HUGE_EXPONENT = re.compile(rb"[eE]\+?0*[1-9]\d{2}")
_HUGE_DIGITS = b"0" * 309
_E_LOWER = bytes.maketrans(b"E", b"e")

NAME_PREFIXES = (
    ("memory-backup-", "memory"),
    ("graph-backup-", "graph"),
    ("summaries-backup-", "summaries"),
    ("temporal-summary-backup-", "temporal"),
)


def embedding_text(cut: str) -> str:
    """The vector's JSON text as cut, if it is a non-empty array of finite numbers; else Reject,
    whose reason the file's report keeps (the turn itself is kept, without the vector: an archive
    lists it as needing the original's re-embed). Checked without parsing the floats: the
    characters, no empty element; the rare huge number is parsed to see it is finite."""
    try:
        body = cut[1:-1].encode("ascii")
    except UnicodeEncodeError:
        raise Reject("bad-embedding: holds something other than numbers") from None
    # Every digit a 0, blanks gone: one pass, and the checks below read the short alphabet.
    shape = body.translate(_DIGITS_TO_ZERO, _BLANKS)
    if shape.translate(None, _NUMBER_BYTES):
        raise Reject("bad-embedding: holds something other than numbers")
    if not shape:
        raise Reject("empty-embedding: no numbers")
    if b",," in shape or shape[:1] == b"," or shape[-1:] == b",":
        raise Reject("bad-embedding: an empty element")
    # Only a positive exponent can overflow (`e-05` cannot): the signs, commas and exponent marks
    # alone (a tenth of the text) say whether there is one, so the regex runs on the rare vector
    # that has one.
    marks = shape.translate(_E_LOWER, b"0.")
    positive_exponent = b"e," in marks or b"e+" in marks or marks.endswith(b"e")
    if (positive_exponent and _HUGE_EXPONENT.search(body)) or _HUGE_DIGITS in shape:
        try:
            finite = all(math.isfinite(float(x)) for x in body.translate(None, _BLANKS).split(b","))
        except ValueError:
            raise Reject("bad-embedding: a malformed number") from None
        if not finite:
            raise Reject("non-finite-values: a number JSON readers take as Infinity")
    return cut


def tool_calls_count(value: object) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise Reject("wrong-type: metadata.amountToolCalls is bool, expected number")
    number = value if isinstance(value, (int, float)) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
    # NaN and infinities fail the comparison; the column is a 32-bit INTEGER.
    if number is not None and -(2**31) <= number < 2**31:
        return int(number)
    raise Reject(f"wrong-type: metadata.amountToolCalls is {value!r}, expected number")


def parse_memory_row(obj: dict, source: str, line_no: int) -> dict:
    """A `memory-backup` row → a `turns` row."""
    turn_id = required_id(obj, "id", "", "missing-id")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise Reject(f"wrong-type: metadata is {type(meta).__name__}, expected object")
    session_id = required_id(meta, "sessionId", "metadata.", "missing-session-id")

    def meta_get(key: str) -> str | None:
        return text_field(meta, key, "metadata.") or None

    row = turn_row(
        turn_id=turn_id,
        session_id=session_id,
        # The original orders by `timestamp ?? createdAt`.
        ts_ms=timestamp(meta["timestamp"] if meta.get("timestamp") is not None else meta.get("createdAt"), "metadata."),
        kind=meta_get("type") or "agent-interaction",
        prompt=text_field(meta, "prompt", "metadata."),
        thought=text_field(meta, "thought", "metadata."),
        response=text_field(meta, "response", "metadata."),
        document=text_field(obj, "document", ""),
        meta_get=meta_get,
        source=source,
        line_no=line_no,
    )
    tools = meta.get("toolsUsed")
    if isinstance(tools, list):
        tools = json.dumps(tools)
    elif tools is not None and not isinstance(tools, str):
        raise Reject(f"wrong-type: metadata.toolsUsed is {type(tools).__name__}, expected string or array")
    row.update(
        amount_tool_calls=tool_calls_count(meta.get("amountToolCalls")),
        tools_used=tools or None,
        archived_at=meta_get("archivedAt"),
        archived_reason=meta_get("archivedReason"),
        # As exported, "" included: the input revision hashes them (`?? null` keeps an empty string).
        agent_identity=text_field(meta, "agentIdentity", "metadata."),
        user_id=text_field(meta, "userId", "metadata."),
        # A session-digest archive's own keys: where the turn ran, and the secrets redacted in it.
        project=meta_get("project"),
        git_branch=meta_get("gitBranch"),
        redactions=redactions(meta.get("redactions")),
    )
    return row


def redactions(value: object) -> str | None:
    """A line's `redactions` (JSON text, kind → count), kept as written; Reject if it is not one."""
    if value is None:
        return None
    if not isinstance(value, str) or counts_problem(value) is not None:
        raise Reject(f"wrong-type: metadata.redactions is {value!r:.60}, expected JSON text of kinds and counts")
    return value


def parse_graph_line(obj: dict) -> dict | None:
    """A `graph-backup` line → a mini summary row, or None for lines that carry none."""
    if obj.get("type") != "node":
        return None
    data = obj.get("data")
    if not isinstance(data, dict) or data.get("label") != "AGENT_MEMORY":
        return None
    props = data.get("properties")
    if not isinstance(props, dict):
        raise Reject("wrong-type: data.properties of an AGENT_MEMORY node is not an object")
    mini = props.get("miniSummary")
    if mini is None or (isinstance(mini, str) and not mini.strip()):
        return None
    if not isinstance(mini, str):
        raise Reject(f"wrong-type: data.properties.miniSummary is {type(mini).__name__}, expected string")
    turn_id = required_id(data, "id", "data.", "missing-id")
    session_id = required_id(props, "sessionId", "data.properties.", "missing-session-id")
    return {"turn_id": turn_id, "session_id": session_id, "text": mini.strip()}


def _graph_properties(data: dict) -> dict:
    props = data.get("properties", {})
    if not isinstance(props, dict):
        raise Reject(f"wrong-type: data.properties is {type(props).__name__}, expected object")
    return props


def parse_graph_row(obj: dict, source: str, line_no: int) -> tuple[str, dict]:
    """A `graph-backup` line → ("node", an `imported_graph_nodes` row) or ("edge", an
    `imported_graph_edges` row), as the original's import reads it (GJI): an edge without an id
    takes `<source>-><target>:<type>`, and one missing an end or its type is refused. The
    properties are kept as they are (JSON text); `data` keys beyond the import's shape are not."""
    kind = obj.get("type")
    if kind not in ("node", "edge"):
        raise Reject(f"not-a-graph-line: type is {kind!r}, expected 'node' or 'edge'")
    data = obj.get("data")
    if not isinstance(data, dict):
        raise Reject(f"wrong-type: data is {type(data).__name__}, expected object")
    where = {"source_file": source, "source_line": line_no}
    if kind == "node":
        node_id = required_id(data, "id", "data.", "missing-id")
        label = required_id(data, "label", "data.", "missing-label")
        props = json.dumps(_graph_properties(data), ensure_ascii=False)
        return "node", {"id": node_id, "label": label, "properties": props, **where}
    ends = {key: required_id(data, key, "data.", "missing-edge-end") for key in ("source", "target", "type")}
    props = _graph_properties(data)
    weight = props.get("weight")
    # The export's edge merge reinforces by weight: it must be a number when there is one.
    number = isinstance(weight, (int, float)) and not isinstance(weight, bool)
    if weight is not None and not (number and math.isfinite(weight)):
        raise Reject(f"wrong-type: data.properties.weight is {weight!r}, expected a finite number")
    edge_id = text_field(data, "id", "data.") or f"{ends['source']}->{ends['target']}:{ends['type']}"
    return "edge", {"id": edge_id, **ends, "properties": json.dumps(props, ensure_ascii=False), **where}


SOURCE_TIERS = tuple(SourceTier)
_INT_MAX = 2**31 - 1  # the INTEGER columns: a larger value would fail the whole batch's insert


def _whole(meta: dict, key: str, high: int = _INT_MAX) -> int | None:
    """A count or score: a whole number in 0..high. NaN, the infinities, fractions and values out
    of range (`3000000000`, `1e300`) are the line's reject, never an error of the whole ingest."""
    value = meta.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Reject(f"wrong-type: metadata.{key} is {type(value).__name__}, expected number")
    # NaN fails every comparison, so it is out of range too; the range test comes before int().
    if not 0 <= value <= high or value != int(value):
        raise Reject(f"out-of-range: metadata.{key} is {value!r}, expected a whole number in 0..{high}")
    return int(value)


def _flag(meta: dict, key: str) -> bool | None:
    value = meta.get(key)
    if value is not None and not isinstance(value, bool):
        raise Reject(f"wrong-type: metadata.{key} is {type(value).__name__}, expected boolean")
    return value


def _names(meta: dict, key: str) -> list[str] | None:
    """A list the original writes comma-joined (`technologies`, `models`, ...); an array is read too."""
    value = meta.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return [name for name in value.split(",") if name]
    if isinstance(value, list) and all(isinstance(name, str) for name in value):
        return [name for name in value if name]
    raise Reject(f"wrong-type: metadata.{key} is {type(value).__name__}, expected comma-joined string")


def parse_summary_row(obj: dict, source: str) -> dict:
    """A `summaries-backup` row → an `imported_summaries` row: what a current one needs to stand as
    the session's summary (`resources.store.summaries.adopt_imported_summaries`)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise Reject(f"wrong-type: metadata is {type(meta).__name__}, expected object")
    session_id = required_id(meta, "sessionId", "metadata.", "missing-session-id")
    tier = text_field(meta, "sourceTier", "metadata.")
    if tier is not None and tier not in SOURCE_TIERS:
        raise Reject(f"out-of-range: metadata.sourceTier is {tier!r}, expected one of {', '.join(SOURCE_TIERS)}")
    return {
        "session_id": session_id,
        "memory_count": _whole(meta, "memoryCount"),
        "input_revision": text_field(meta, "dreamInputRevision", "metadata."),
        "title": text_field(meta, "title", "metadata."),
        "summary": text_field(obj, "document", ""),
        "source_tier": tier,
        "source_file": source,
        "category": text_field(meta, "category", "metadata."),
        **{score: _whole(meta, score, high=100) for score in ("quality", "productivity", "impact", "complexity")},
        "technologies": _names(meta, "technologies"),
        "degraded": _flag(meta, "degraded"),
        "raw_canonical": _flag(meta, "rawCanonical"),
        "participating_agents": _names(meta, "participatingAgents"),
        "models": _names(meta, "models"),
        "total_tool_calls": _whole(meta, "totalToolCalls"),
        "tools_used": _names(meta, "toolsUsed"),
        "source_agent_identities": _names(meta, "sourceAgentIdentities"),
        # As exported: an archive writes an imported summary back with the metadata it came with.
        "metadata": json.dumps(meta, ensure_ascii=False),
    }
