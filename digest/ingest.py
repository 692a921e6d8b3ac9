"""Streaming ingest of Neo.mjs export bundles and of the simple JSONL turn format.

Files are read line by line, so memory stays bounded whatever the file size; the 4096-float
embedding of each vector row is cut out of the line before JSON parsing and checked cheaply as text
(`embedding_text`); the store parses it as it writes the batch and keeps a float32-origin vector as
numbers, any other as its text (resources/store/vectors.py), so an archive writes back numbers that
parse to exactly the values the line held.
A bad line becomes a reject with its reason and line number, and the rest of the file goes on.

Every physical line (split on `\n` only, a leading UTF-8 BOM dropped) is accounted for in the
file's report as exactly one of: kept (`rows`), rejected, superseded or skipped (blank). A turn
id (or a graph node or edge id) seen again in the same ingest: the later line wins, as a later
ingest updates a stored turn or graph row (the original's merge import keeps the first; one rule
for both cases is easier to trust), and the earlier line is `superseded`, stored in `rejects`
with a reason naming the line that won. Finding repeats holds each id of the ingest in memory,
some 200 bytes an id against the 50 KB of a vector row's line.

Routing is by file name, as the original's import does:
- `memory-backup-*.jsonl`: turn rows `{id, embedding, metadata, document}`;
- `graph-backup-*.jsonl`: every node and edge line is kept by id (`imported_graph_nodes`,
  `imported_graph_edges`: the source system's graph, written back by `export-graph` and archives),
  and `AGENT_MEMORY` node lines give the turns' mini summaries;
- `summaries-backup-*.jsonl`: the exported session summaries, kept for drift detection;
- `temporal-summary-backup-*.jsonl`: recognised and skipped (nothing here consumes it);
- any other `*.jsonl`: the simple turn format (README, "Turn format for other harnesses").
"""

from __future__ import annotations

import json
import math
import queue
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from digest.synthesis import SourceTier
from digest.turns import compose_document, parse_timestamp_ms

# Rows and line bytes per write: large, since each is one transaction, but bounded (memory).
BATCH_ROWS = 20_000
BATCH_BYTES = 64 << 20
# A file's batches share one held connection for this many line bytes, then let it go: the store
# is checkpointed then (`Ingest.write_turns`), and each checkpoint rewrites the last, partly filled
# row group (at most `ROW_GROUP_ROWS` turns, resources/store/connection.py), while a writer that
# never let go would keep other processes waiting the whole ingest (they wait up to the store's
# LOCK_WAIT_S; 512 MB is about 25 s here).
HOLD_BYTES = 512 << 20
MAX_VECTOR_PROBLEMS = 20
EXCERPT_CHARS = 200
READ_BUFFER_BYTES = 1 << 20
_EMBEDDING = re.compile(r'"embedding"\s*:\s*\[')
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
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_BOM = b"\xef\xbb\xbf"
_JSON_WHITESPACE = b" \t\r\n"


class Reject(Exception):
    """A line that cannot be ingested; the message is the stored reason."""


class Sink(Protocol):
    """Where a file's rows are written (the store's `ingest` repository)."""

    def write_turns(self, rows: list[dict]) -> list[str]: ...  # the sessions turns moved out of
    def write_imported_mini_summaries(self, rows: list[dict]) -> None: ...
    def write_imported_summaries(self, rows: list[dict]) -> None: ...
    def write_imported_graph(self, nodes: list[dict], edges: list[dict]) -> None: ...
    def write_rejects(self, rows: list[dict]) -> None: ...
    def clear_rejects(self, source_file: str, line_nos: list[int]) -> None: ...  # lines now kept


class SessionRows(Protocol):
    def session_rows(self, session_ids: Iterable[str]) -> list[dict]: ...


class HeldFile(Protocol):
    def held(self) -> AbstractContextManager[None]: ...  # one connection for the writes inside
    def released(self) -> AbstractContextManager[None]: ...  # that connection let go (checkpointed)


class IngestStore(Protocol):
    """What an ingest uses of the store: its writes, the file they share a connection of, and the
    sessions' rows read back after them."""

    ingest: Sink
    file: HeldFile
    sessions: SessionRows


@dataclass
class FileReport:
    path: str
    kind: str
    lines: int = 0  # physical lines: rows + rejects + superseded + skipped
    rows: int = 0
    rejects: int = 0
    superseded: int = 0
    skipped: int = 0
    # Vector rows: embeddings kept, and those dropped as malformed (their turn or summary is kept).
    # A file's vectors have one length, its first kept vector's (`dimensions`).
    dimensions: int | None = None
    vectors: int = 0
    vectors_dropped: int = 0
    vector_problems: list[str] = field(default_factory=list)  # "line N: reason", the first few


@dataclass
class IngestReport:
    files: list[FileReport] = field(default_factory=list)
    sessions: list[dict] = field(default_factory=list)  # the refreshed `sessions` rows
    emptied: list[str] = field(default_factory=list)  # sessions all of whose turns moved away

    @property
    def turns(self) -> int:
        return sum(f.rows for f in self.files if f.kind in ("memory", "turns"))

    @property
    def rejects(self) -> int:
        return sum(f.rejects for f in self.files)

    @property
    def superseded(self) -> int:
        return sum(f.superseded for f in self.files)

    @property
    def vectors(self) -> int:
        return sum(f.vectors for f in self.files)

    @property
    def vectors_dropped(self) -> int:
        return sum(f.vectors_dropped for f in self.files)

    def vector_problems(self) -> list[str]:
        return [f"{f.path}: {p}" for f in self.files for p in f.vector_problems]


def file_kind(path: Path) -> str:
    name = path.name
    for prefix, kind in (
        ("memory-backup-", "memory"),
        ("graph-backup-", "graph"),
        ("summaries-backup-", "summaries"),
        ("temporal-summary-backup-", "temporal"),
    ):
        if name.startswith(prefix):
            return kind
    return "turns"


def _cut_embedding(line: str) -> tuple[str, str | None]:
    """Cut the embedding array out of the raw line: `]` cannot occur inside a float array, and
    the pattern cannot occur inside a JSON string, whose quotes are escaped. Returns the line with
    a null embedding and the array's text as it was."""
    match = _EMBEDDING.search(line)
    if not match:
        return line, None
    end = line.find("]", match.end())
    if end < 0:
        return line, None
    return line[: match.start()] + '"embedding":null' + line[end + 1 :], line[match.end() - 1 : end + 1]


def _strip_embedding(line: str) -> str:
    return _cut_embedding(line)[0]


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


def _load(line: str) -> tuple[dict, str | None]:
    """The line's JSON with its embedding cut out, and the embedding's text as cut (unchecked)."""
    text, cut = _cut_embedding(line)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Reject(f"json-parse: {exc.msg} at column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:  # a 4300+ digit number, nesting too deep
        raise Reject(f"json-parse: {exc}"[:300]) from None
    if not isinstance(value, dict):
        raise Reject(f"not-an-object: line holds a JSON {type(value).__name__}")
    if _SURROGATE_ESCAPE.search(text):
        _refuse_lone_surrogate_ids(value)
        value = _without_lone_surrogates(value)
    return value, cut


# Where a line's identities are (memory rows, simple turns, graph nodes and edges, summaries): a
# lone surrogate there is refused, since replacing it would make distinct ids one.
_ID_PATHS = (
    ("id",),
    ("session_id",),
    ("metadata", "sessionId"),
    ("data", "id"),
    ("data", "source"),
    ("data", "target"),
    ("data", "properties", "sessionId"),
)


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _refuse_lone_surrogate_ids(value: dict) -> None:
    for path in _ID_PATHS:
        node = value
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, str) and _has_lone_surrogate(node):
            escaped = node.encode("ascii", "backslashreplace").decode("ascii")
            raise Reject(
                f"lone-surrogate-id: {'.'.join(path)} {escaped[:120]!r} holds a lone UTF-16 surrogate escape; "
                "replaced, it would merge with other ids"
            )


def _without_lone_surrogates(value):
    """JSON.stringify writes a lone surrogate (text cut inside an emoji) as `\\udXXX`; Python
    decodes it to a str that cannot be encoded as UTF-8, which would fail the whole batch's
    insert. Replace each lone surrogate with U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {k: _without_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    return value


def _text(obj: dict, key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Reject(f"wrong-type: {where}{key} is {type(value).__name__}, expected string")
    return value


def _required_id(obj: dict, key: str, where: str, code: str) -> str:
    value = _text(obj, key, where)
    if value is None or not value.strip():
        raise Reject(f"{code}: {where}{key} is missing or empty")
    return value


def _timestamp(value: object, where: str) -> int | None:
    try:
        return parse_timestamp_ms(value)
    except ValueError as exc:
        raise Reject(f"bad-timestamp: {where}timestamp: {exc}") from None


def _tool_calls(value: object) -> int | None:
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


def _turn_row(
    *,
    turn_id,
    session_id,
    ts_ms,
    kind,
    prompt,
    thought,
    response,
    document,
    meta_get,
    source,
    line_no,
    required=("prompt", "thought", "response"),
) -> dict:
    rebuilt = False
    if document is None or not document.strip():
        if kind != "agent-interaction":
            raise Reject(f"empty-turn-fields: a {kind!r} row has no document")
        fields = {"prompt": prompt, "thought": thought, "response": response}
        empty = [name for name in required if not (fields[name] or "").strip()]
        if empty:
            raise Reject(f"empty-turn-fields: no document, and {', '.join(empty)} empty")
        document, rebuilt = compose_document(prompt, thought, response), True
    return {
        "id": turn_id,
        "session_id": session_id,
        "ts_ms": ts_ms,
        "type": kind,
        "prompt": prompt,
        "thought": thought,
        "response": response,
        "document": document,
        "document_rebuilt": rebuilt,
        "agent": meta_get("agent"),
        "agent_identity": meta_get("agentIdentity"),
        "model": meta_get("model"),
        "user_id": meta_get("userId"),
        "amount_tool_calls": None,
        "tools_used": None,
        "archived_at": None,
        "archived_reason": None,
        "source_file": source,
        "source_line": line_no,
    }


def parse_memory_row(obj: dict, source: str, line_no: int) -> dict:
    """A `memory-backup` row → a `turns` row."""
    turn_id = _required_id(obj, "id", "", "missing-id")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise Reject(f"wrong-type: metadata is {type(meta).__name__}, expected object")
    session_id = _required_id(meta, "sessionId", "metadata.", "missing-session-id")

    def meta_get(key: str) -> str | None:
        return _text(meta, key, "metadata.") or None

    row = _turn_row(
        turn_id=turn_id,
        session_id=session_id,
        # The original orders by `timestamp ?? createdAt`.
        ts_ms=_timestamp(
            meta["timestamp"] if meta.get("timestamp") is not None else meta.get("createdAt"), "metadata."
        ),
        kind=meta_get("type") or "agent-interaction",
        prompt=_text(meta, "prompt", "metadata."),
        thought=_text(meta, "thought", "metadata."),
        response=_text(meta, "response", "metadata."),
        document=_text(obj, "document", ""),
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
        amount_tool_calls=_tool_calls(meta.get("amountToolCalls")),
        tools_used=tools or None,
        archived_at=meta_get("archivedAt"),
        archived_reason=meta_get("archivedReason"),
        # As exported, "" included: the input revision hashes them (`?? null` keeps an empty string).
        agent_identity=_text(meta, "agentIdentity", "metadata."),
        user_id=_text(meta, "userId", "metadata."),
    )
    return row


def parse_simple_turn(obj: dict, source: str, line_no: int) -> tuple[dict, str | None]:
    """The simple turn format → a `turns` row and the turn's mini summary, if it carries one."""
    turn_id = _required_id(obj, "id", "", "missing-id")
    session_id = _required_id(obj, "session_id", "", "missing-session-id")
    prompt, response = _text(obj, "prompt", ""), _text(obj, "response", "")
    row = _turn_row(
        turn_id=turn_id,
        session_id=session_id,
        ts_ms=_timestamp(obj.get("timestamp"), ""),
        kind="agent-interaction",
        prompt=prompt,
        thought=_text(obj, "thought", "") or "",
        response=response,
        document=_text(obj, "document", ""),
        meta_get=lambda key: (
            _text(obj, {"agentIdentity": "agent_identity", "userId": "user_id"}.get(key, key), "") or None
        ),
        source=source,
        line_no=line_no,
        required=("prompt", "response"),  # thought is optional in this format
    )
    row["amount_tool_calls"] = _tool_calls(obj.get("tool_calls"))
    row["embedding"] = None  # the format has none
    mini = _text(obj, "mini_summary", "")
    return row, (mini.strip() or None) if mini else None


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
    turn_id = _required_id(data, "id", "data.", "missing-id")
    session_id = _required_id(props, "sessionId", "data.properties.", "missing-session-id")
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
        node_id = _required_id(data, "id", "data.", "missing-id")
        label = _required_id(data, "label", "data.", "missing-label")
        props = json.dumps(_graph_properties(data), ensure_ascii=False)
        return "node", {"id": node_id, "label": label, "properties": props, **where}
    ends = {key: _required_id(data, key, "data.", "missing-edge-end") for key in ("source", "target", "type")}
    props = _graph_properties(data)
    weight = props.get("weight")
    # The export's edge merge reinforces by weight: it must be a number when there is one.
    number = isinstance(weight, (int, float)) and not isinstance(weight, bool)
    if weight is not None and not (number and math.isfinite(weight)):
        raise Reject(f"wrong-type: data.properties.weight is {weight!r}, expected a finite number")
    edge_id = _text(data, "id", "data.") or f"{ends['source']}->{ends['target']}:{ends['type']}"
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
    session_id = _required_id(meta, "sessionId", "metadata.", "missing-session-id")
    tier = _text(meta, "sourceTier", "metadata.")
    if tier is not None and tier not in SOURCE_TIERS:
        raise Reject(f"out-of-range: metadata.sourceTier is {tier!r}, expected one of {', '.join(SOURCE_TIERS)}")
    return {
        "session_id": session_id,
        "memory_count": _whole(meta, "memoryCount"),
        "input_revision": _text(meta, "dreamInputRevision", "metadata."),
        "title": _text(meta, "title", "metadata."),
        "summary": _text(obj, "document", ""),
        "source_tier": tier,
        "source_file": source,
        "category": _text(meta, "category", "metadata."),
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


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """Physical lines as bytes, split on `\n` only: a raw CR (JSON whitespace between tokens,
    invalid inside a string) must not split a line and shift the line numbers after it."""
    # A buffer larger than the default 8 KiB: a vector row's line is some 50 KB.
    with path.open("rb", buffering=READ_BUFFER_BYTES) as handle:
        for line_no, line in enumerate(handle, start=1):
            yield line_no, line[len(_BOM) :] if line_no == 1 and line.startswith(_BOM) else line


def _decode(raw: bytes) -> str:
    """Strict: replacing invalid bytes would make ids that differ only in them one id."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Reject(f"invalid-utf8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1} ({exc.reason})") from None


@dataclass
class _Batch:
    """One write's worth of a file's rows, as read and checked."""

    turns: list[dict] = field(default_factory=list)
    minis: list[dict] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)
    graph: dict[str, list[dict]] = field(default_factory=lambda: {"node": [], "edge": []})
    rejects: list[dict] = field(default_factory=list)
    # Line numbers kept: a reject of one from an earlier read (a half-written line) no longer stands.
    kept: list[int] = field(default_factory=list)
    line_bytes: int = 0

    def rows(self) -> int:
        return sum(map(len, (self.turns, self.minis, self.summaries, self.rejects, *self.graph.values())))


def _read_ahead(batches: Iterator[_Batch]) -> Iterator[_Batch]:
    """`batches`, produced in a second thread while the caller writes the one before: DuckDB lets go
    of the GIL while it executes, so reading and checking batch n+1 overlaps writing batch n on a
    second core. At most two batches exist at a time (the one being written, the one being read),
    so memory stays bounded by the batch. An error of either side ends both; the reader's is
    raised here."""
    ready: queue.Queue = queue.Queue()
    slots = threading.Semaphore(2)
    stop = threading.Event()
    done = object()

    def read() -> None:
        try:
            while True:
                slots.acquire()
                if stop.is_set():
                    return
                batch = next(batches, done)
                ready.put(batch)
                if batch is done:
                    return
        except BaseException as exc:  # handed to the writing thread, which raises it
            ready.put(exc)

    reader = threading.Thread(target=read, name="ingest-read-ahead", daemon=True)
    reader.start()
    try:
        while (batch := ready.get()) is not done:
            if isinstance(batch, BaseException):
                raise batch
            yield batch
            slots.release()
    finally:
        stop.set()
        slots.release()
        reader.join()


def _read_batches(path: Path, kind: str, report: FileReport, seen: dict) -> Iterator[_Batch]:
    """The file's rows and rejects in batches of at most BATCH_ROWS rows or BATCH_BYTES of lines,
    the last one possibly empty; counts them in `report`."""
    source = str(path)
    batch = _Batch()
    line_no = 0

    def vector(cut: str | None) -> str | None:
        if cut is None:
            return None
        try:
            text = embedding_text(cut)
            # No empty element (checked): one more number than commas.
            length = text.count(",") + 1
            if report.dimensions is None:
                report.dimensions = length
            elif length != report.dimensions:
                raise Reject(f"wrong-length: {length} numbers, the file's vectors have {report.dimensions}")
        except Reject as reason:
            report.vectors_dropped += 1
            if len(report.vector_problems) < MAX_VECTOR_PROBLEMS:
                report.vector_problems.append(f"line {line_no}: {reason}")
            return None
        report.vectors += 1
        return text

    def supersede(key, what: str) -> None:
        earlier = seen.get(key)
        if earlier is not None:
            earlier_report, earlier_line = earlier
            earlier_report.rows -= 1
            earlier_report.superseded += 1
            batch.rejects.append(
                {
                    "source_file": earlier_report.path,
                    "line_no": earlier_line,
                    "reason": f"superseded: {what} comes again at line {line_no} of {source}, which is kept",
                    "excerpt": None,
                }
            )
        seen[key] = (report, line_no)

    def keep_turn(row: dict) -> None:
        supersede(row["id"], f"turn id {row['id']!r}")
        batch.turns.append(row)

    for line_no, raw in _lines(path):
        report.lines += 1
        batch.line_bytes += len(raw)
        if not raw.strip(_JSON_WHITESPACE):
            report.skipped += 1
            continue
        try:
            obj, cut = _load(_decode(raw))
            if kind == "memory":
                row = parse_memory_row(obj, source, line_no)
                keep_turn({**row, "embedding": vector(cut)})
            elif kind == "turns":
                row, mini = parse_simple_turn(obj, source, line_no)
                keep_turn(row)
                if mini:
                    batch.minis.append({"turn_id": row["id"], "session_id": row["session_id"], "text": mini})
            elif kind == "graph":
                graph_kind, row = parse_graph_row(obj, source, line_no)
                mini = parse_graph_line(obj)
                # A turn and its AGENT_MEMORY node share the id: graph rows are keyed apart.
                supersede((graph_kind, row["id"]), f"{graph_kind} id {row['id']!r}")
                batch.graph[graph_kind].append(row)
                if mini is not None:
                    batch.minis.append(mini)
            else:
                batch.summaries.append({**parse_summary_row(obj, source), "embedding": vector(cut)})
            report.rows += 1
            batch.kept.append(line_no)
        except Reject as reason:
            report.rejects += 1
            batch.rejects.append(
                {
                    "source_file": source,
                    "line_no": line_no,
                    "reason": str(reason),
                    # Never the embedding's floats.
                    "excerpt": _strip_embedding(raw.decode("utf-8", "replace"))[:EXCERPT_CHARS],
                }
            )
        if batch.rows() >= BATCH_ROWS or batch.line_bytes >= BATCH_BYTES:
            yield batch
            batch = _Batch()
    yield batch


def ingest_file(path: Path, sink: Sink, file: HeldFile, touched: set[str], seen: dict) -> FileReport:
    """`seen`: each turn id (and each graph row as `(kind, id)`) kept so far in this ingest, with
    its file's report and line."""
    kind = file_kind(path)
    report = FileReport(path=str(path), kind=kind)
    if kind == "temporal":
        return report
    held_bytes = 0
    for batch in _read_ahead(_read_batches(path, kind, report, seen)):
        touched.update(r["session_id"] for r in batch.turns)
        touched.update(sink.write_turns(batch.turns))
        sink.write_imported_mini_summaries(batch.minis)
        sink.write_imported_summaries(batch.summaries)
        sink.write_imported_graph(batch.graph["node"], batch.graph["edge"])
        sink.clear_rejects(str(path), batch.kept)  # before this batch's rejects: one may supersede a kept line
        sink.write_rejects(batch.rejects)
        held_bytes += batch.line_bytes
        if held_bytes >= HOLD_BYTES:
            with file.released():  # other processes write in between; the next batch opens again
                held_bytes = 0
    return report


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given, and every `*.jsonl` directly inside a given folder, in name order."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(p for p in path.glob("*.jsonl") if p.is_file()))
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")
    return found


def ingest_paths(paths: Iterable[str | Path], store: IngestStore) -> IngestReport:
    report = IngestReport()
    touched: set[str] = set()
    seen: dict = {}
    # A file named twice (or inside a folder also named) is read once: its lines would supersede themselves.
    for path in dict.fromkeys(p.resolve() for p in discover(paths)):
        with store.file.held():
            report.files.append(ingest_file(path, store.ingest, store.file, touched, seen))
    # Each batch of turns brought its sessions' rows up to date as it was written: read them back.
    report.sessions = store.sessions.session_rows(touched)
    report.emptied = sorted(touched - {s["session_id"] for s in report.sessions})
    return report
