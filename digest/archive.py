"""Archive bundles: their line shapes, the manifest and its checksums, validation, and restore planning.

A bundle is a folder `session-digest-archive-<ts>/` holding, as the original's export does,
- `memory-backup-<ts>.jsonl`: one turn per line, `{id, embedding, metadata, document}`. The
  embedding is the one the turn was ingested with, its JSON text written back verbatim, or null for
  a turn that came without one (the original's import needs its re-embed option for those; the
  manifest counts them); the flat metadata carries the original's keys plus the project's own
  (`documentRebuilt`, `sourceFile`, `sourceLine`, `ingestedAt`), so a turn comes back exactly.
  `session-digest ingest` reads this file too;
- `summaries-backup-<ts>.jsonl`: one session summary per line in the original's shape (§1.3 keys,
  lists comma-joined), with the Dream keys of a session digested here at its revision, so the
  original's sweeps take it as summarized and digested. An imported summary goes out with the
  metadata and embedding it came with. It is for readers of that shape: a comma inside a
  technology's name would not survive the join, so the exact rows are in `tables/session_summaries.jsonl`;
- `graph-backup-<ts>.jsonl`: node lines, then edge lines; each turn's mini summary is on its
  `AGENT_MEMORY` node, as in the original;
- `tables/<table>.jsonl`: every other table of the project, one row per line, every column;
- `manifest.json`, written last: the scope (all sessions, or a list), per file its kind, table,
  columns, row count and sha256, and its own sha256 over all that. A folder without one is an
  interrupted archive.

No DuckDB here: the store reads and writes the tables; this module shapes lines and checks files.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import math
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from digest.visibility import summary_user_id

FORMAT = "session-digest-archive"
FORMAT_VERSION = 2  # 2: the manifest's own sha256, the memory-backup file's columns
MANIFEST = "manifest.json"
KINDS = ("memory", "summaries", "graph", "table")
# The longest line read back (a turn can be a big document), and the largest manifest.
MAX_LINE_BYTES = 1 << 30
MAX_MANIFEST_BYTES = 64 << 20
# The column naming a row's session, where it is not `session_id`.
SESSION_COLUMN = {"friction_events": "asset_ref"}
_SHA256 = re.compile(r"[0-9a-f]{64}")
# Problems listed in a refusal; the rest are counted, so a badly damaged file stays readable.
MAX_PROBLEMS = 20
HASH_CHUNK = 1 << 20


def archive_stamp(at: dt.datetime) -> str:
    """The original's file stamp: an ISO time in UTC with `:` replaced by `-`."""
    utc = at.astimezone(dt.UTC)
    return utc.strftime("%Y-%m-%dT%H-%M-%S.") + f"{utc.microsecond // 1000:03d}Z"


def bundle_file_names(stamp: str) -> dict[str, str]:
    return {
        "memory": f"memory-backup-{stamp}.jsonl",
        "summaries": f"summaries-backup-{stamp}.jsonl",
        "graph": f"graph-backup-{stamp}.jsonl",
    }


def table_file_name(table: str) -> str:
    return f"tables/{table}.jsonl"


def jsonable(value: Any) -> Any:
    """A DuckDB value as JSON: times as ISO-8601 with their offset, decimals and UUIDs as text."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


def dump_line(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


# --- line shapes -------------------------------------------------------------------------------

# turns column → memory-backup metadata key: the original's (§1.1), then the project's own.
TURN_METADATA_KEYS = {
    "prompt": "prompt",
    "thought": "thought",
    "response": "response",
    "session_id": "sessionId",
    "ts_ms": "timestamp",
    "type": "type",
    "agent": "agent",
    "agent_identity": "agentIdentity",
    "model": "model",
    "user_id": "userId",
    "amount_tool_calls": "amountToolCalls",
    "tools_used": "toolsUsed",
    "archived_at": "archivedAt",
    "archived_reason": "archivedReason",
    "document_rebuilt": "documentRebuilt",
    "source_file": "sourceFile",
    "source_line": "sourceLine",
    "ingested_at": "ingestedAt",
}
ARCHIVED_TURN_COLUMNS = ["id", *TURN_METADATA_KEYS, "document", "embedding"]
# Bundles written before turns kept their embedding: every line's is null.
ARCHIVED_TURN_COLUMNS_NO_EMBEDDING = ARCHIVED_TURN_COLUMNS[:-1]
MEMORY_LINE_KEYS = {"id", "embedding", "metadata", "document"}
# Present on every line this project writes: a memory-backup without them came from elsewhere
# (the original's own export is ingested with `session-digest ingest`, not restored).
_REQUIRED_TURN_KEYS = {
    "sessionId": str, "documentRebuilt": bool, "sourceFile": str, "sourceLine": int, "ingestedAt": str,
}  # fmt: skip


def memory_row(turn: dict) -> dict:
    """A `turns` row → a `memory-backup` line, its embedding null (`vector_line` puts the text in).
    Absent values are left out, as flat metadata does."""
    metadata = {key: jsonable(turn[column]) for column, key in TURN_METADATA_KEYS.items() if turn[column] is not None}
    return {"id": turn["id"], "embedding": None, "metadata": metadata, "document": turn["document"]}


def vector_line(row: dict, embedding: str | None) -> str:
    """A vector row's JSON line with the embedding's stored JSON text in it, verbatim. The first
    `"embedding":null` of the line is the key's: the id before it is a JSON string, whose quotes
    are escaped."""
    line = dump_line(row)
    return line if embedding is None else line.replace('"embedding":null', f'"embedding":{embedding}', 1)


def embedding_problem(value: Any) -> str | None:
    """Why a parsed line's embedding is not one the original's import takes as given, if it is not
    (null is allowed: the line then needs its re-embed option)."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        return "the embedding is not a non-empty array"
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value):
        return "the embedding holds something other than finite numbers"
    return None


def turn_from_memory_row(obj: dict) -> dict:
    """A `memory-backup` line this project wrote → the `turns` row it came from; ValueError if it is not one."""
    if not isinstance(obj.get("id"), str) or not obj["id"]:
        raise ValueError("id is missing or not a string")
    if not isinstance(obj.get("document"), str):
        raise ValueError("document is missing or not a string")
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise ValueError("metadata is not an object")
    for key, kind in _REQUIRED_TURN_KEYS.items():
        if not isinstance(metadata.get(key), kind):
            raise ValueError(
                f"metadata.{key} is missing or not {kind.__name__}: not a line of a session-digest archive"
            )
    if not metadata["sessionId"]:
        raise ValueError("metadata.sessionId is empty")
    row = {column: metadata.get(key) for column, key in TURN_METADATA_KEYS.items()}
    return {"id": obj["id"], **row, "document": obj["document"]}


def _joined(values: Iterable[str] | None) -> str:
    return ",".join(values or [])


def dream_keys(summary: dict) -> dict:
    """The keys the original's Dream pass writes on success, for a session digested here at the
    revision its summary was made from, which is its turns' revision now: the original's REM then
    takes it as digested (`dreamCompletedRevision == dreamInputRevision`). Nothing for any other
    state: an undigestible verdict is this project's model's, so the original tries for itself."""
    revision = summary["input_revision"]
    if summary.get("digest_state") != "digested" or summary.get("digest_revision") != revision:
        return {}
    if summary.get("session_revision", revision) != revision:
        return {}
    return {
        "graphDigested": True,
        "digestState": "digested",
        "dreamCompletedRevision": revision,
        "dreamStateRevision": revision,
    }


def junk_keys(metadata: dict, summary: dict) -> dict:
    """A junk summary (`digest.verdict`) goes out with its verdict and evidence (`summaryVerdict`,
    `summaryVerdictEvidence`, as text: Chroma takes no nested values) and without `memoryCount`: the
    original's sweep takes a session whose summary has no count equal to its turns' as still to
    summarize, so it writes its own instead of keeping ours as if it were one."""
    if summary.get("verdict") in (None, "ok"):
        return metadata
    kept = {k: v for k, v in metadata.items() if k != "memoryCount"}
    return {**kept, "summaryVerdict": summary["verdict"], "summaryVerdictEvidence": summary.get("verdict_evidence")}


def summary_backup_row(summary: dict) -> dict:
    """A `session_summaries` row → a `summaries-backup` line with the original's keys and types (§1.3),
    plus the Dream keys (`dream_keys`), and a junk one's verdict (`junk_keys`). An imported summary
    (`imported_metadata`, its line's metadata as ingested) goes out with its own metadata. None values
    are left out: Chroma takes none."""
    if summary.get("origin") == "imported" and summary.get("imported_metadata"):
        metadata = {**json.loads(summary["imported_metadata"]), **dream_keys(summary)}
        return {
            "id": f"summary_{summary['session_id']}",
            "embedding": None,
            "metadata": junk_keys(metadata, summary),
            "document": summary["summary"],
        }
    created_ms = int(summary["created_at"].timestamp() * 1000)
    metadata = {
        "sessionId": summary["session_id"],
        # lastActivity; the original falls back to the write time for a session without timestamps.
        "timestamp": summary["last_activity_ms"] if summary["last_activity_ms"] is not None else created_ms,
        "memoryCount": summary["memory_count"],
        "dreamInputRevision": summary["input_revision"],
        "title": summary["title"],
        "category": summary["category"],
        "quality": summary["quality"],
        "productivity": summary["productivity"],
        "impact": summary["impact"],
        "complexity": summary["complexity"],
        "technologies": _joined(summary["technologies"]),
        "participatingAgents": _joined(summary["participating_agents"]),
        "models": _joined(summary["models"]),
        "totalToolCalls": summary["total_tool_calls"],
        "toolsUsed": _joined(summary["tools_used"]),
        "sourceAgentIdentities": _joined(summary["source_agent_identities"]),
        # No identity registry here, so no source has a known trust tier (as the graph's nodes say).
        "sourceTrustTier": "unclassified",
        "provenancePolicy": "most-restrictive-source",
        "sourceTier": summary["source_tier"],
        "degraded": summary["degraded"],
        "rawCanonical": summary["raw_canonical"],
        # Every source is unclassified while no identity has a known tier (rows without one too).
        "unclassifiedSourceCount": summary["memory_count"] or None,
        "userId": summary_user_id(summary["participating_agents"]),
        **dream_keys(summary),
    }
    metadata = {k: v for k, v in junk_keys(metadata, summary).items() if v is not None}
    return {
        "id": f"summary_{summary['session_id']}",
        "embedding": None,
        "metadata": metadata,
        "document": summary["summary"],
    }


def mini_summary_node_row(mini: dict) -> dict:
    """A `mini_summaries` row as a stored graph node row (id, label, properties): the original keeps
    a turn's mini summary on its `AGENT_MEMORY` node."""
    return {
        "id": mini["turn_id"],
        "label": "AGENT_MEMORY",
        "properties": {"sessionId": mini["session_id"], "miniSummary": mini["text"]},
    }


# --- writing and the manifest ------------------------------------------------------------------


@dataclass(frozen=True)
class BundleFile:
    name: str  # relative to the bundle folder
    kind: str  # memory | summaries | graph | table
    table: str | None  # the table it restores (None: a view for other readers)
    rows: int
    sha256: str
    columns: list[tuple[str, str]] | None = None  # (name, DuckDB type), for table files
    vectors: dict | None = None  # vector files: rows with and without an embedding (`VectorCount`)


class JsonlWriter:
    """Writes JSON lines, counting them and hashing the bytes as they go."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.rows = 0
        self._hash = hashlib.sha256()
        self._out = path.open("wb")

    def write(self, obj: dict | str) -> None:
        """A row, or a line already made (`vector_line`)."""
        data = (obj if isinstance(obj, str) else dump_line(obj)).encode("utf-8")
        self._hash.update(data)
        self._out.write(data)
        self.rows += 1

    def close(self) -> str:
        """Flush to disk; returns the sha256. The manifest is only written once every file is synced."""
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        return self._hash.hexdigest()


def build_manifest(
    archive_id: str, created_at: dt.datetime, sessions: list[str] | None, schema_version: int, files: list[BundleFile]
) -> dict:
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "archive_id": archive_id,
        "created_at": created_at.isoformat(),
        "schema_version": schema_version,
        "sessions": sessions,  # None: the whole store
        "files": [
            {
                "name": f.name,
                "kind": f.kind,
                "table": f.table,
                "rows": f.rows,
                "sha256": f.sha256,
                **({"columns": [list(c) for c in f.columns]} if f.columns is not None else {}),
                **({"vectors": f.vectors} if f.vectors is not None else {}),
            }
            for f in files
        ],
    }
    # Covers the session list and every file's checksum: an edit of either without it is refused.
    return {**manifest, "sha256": manifest_digest(manifest)}


def write_manifest(folder: Path, manifest: dict) -> None:
    """Written last and synced: a bundle with a manifest has every file complete."""
    with (folder / MANIFEST).open("w", encoding="utf-8") as out:
        json.dump(manifest, out, indent=2)
        out.write("\n")
        out.flush()
        os.fsync(out.fileno())


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# --- validation --------------------------------------------------------------------------------


class BundleError(Exception):
    """A bundle that cannot be restored; `problems` says where (file, line) and why."""

    def __init__(self, bundle: Path, problems: list[str], more: int = 0):
        self.problems = [_one_line(p) for p in problems]
        listing = "\n".join(f"  {p}" for p in self.problems)
        tail = f"\n  … and {more} more" if more else ""
        super().__init__(f"bundle {bundle} cannot be restored, nothing was changed:\n{listing}{tail}")


def _one_line(text: str, limit: int = 500) -> str:
    """A problem as one printable line: names and values come from the bundle, so they may hold anything."""
    flat = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True)
class Bundle:
    path: Path
    manifest: dict
    files: list[BundleFile]
    manifest_sha256: str  # of manifest.json's bytes, as `archives` records it
    turn_sessions: frozenset[str]  # the sessions the memory-backup file holds turns of

    @property
    def sessions(self) -> list[str] | None:
        """The sessions the bundle holds (checked against its rows); None: a whole store."""
        return self.manifest["sessions"]

    @property
    def archive_id(self) -> str:
        return self.manifest["archive_id"]

    def file(self, kind: str) -> BundleFile | None:
        return next((f for f in self.files if f.kind == kind), None)

    def tables(self) -> list[BundleFile]:
        return [f for f in self.files if f.kind == "table"]


class _Problems:
    def __init__(self) -> None:
        self.listed: list[str] = []
        self.more = 0

    def add(self, text: str) -> None:
        if len(self.listed) < MAX_PROBLEMS:
            self.listed.append(text)
        else:
            self.more += 1


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


_INT_BITS = {"TINYINT": 7, "SMALLINT": 15, "INTEGER": 31, "BIGINT": 63}


def _type_problem(value: Any, kind: str) -> str | None:
    """Why a JSON value cannot be a value of this DuckDB type, if it cannot. DuckDB's read_json would
    coerce it silently (1.5 into an INTEGER 2, a list into a VARCHAR), so the check is here.
    NULLs and types not listed are left to DuckDB."""
    if value is None:
        return None
    if kind.endswith("[]"):
        if not isinstance(value, list):
            return f"a JSON {_json_type(value)}, not {kind}"
        return next((p for v in value if (p := _type_problem(v, kind[:-2])) is not None), None)
    if kind in _INT_BITS:
        if not _is_int(value):
            return f"a JSON {_json_type(value)}, not {kind}"
        if not -(1 << _INT_BITS[kind]) <= value < (1 << _INT_BITS[kind]):
            return f"{value} is out of range for {kind}"
    elif kind in ("DOUBLE", "FLOAT", "REAL"):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"a JSON {_json_type(value)}, not {kind}"
    elif kind in ("BOOLEAN", "VARCHAR", "JSON"):
        if not isinstance(value, bool if kind == "BOOLEAN" else str):
            return f"a JSON {_json_type(value)}, not {kind}"
    elif kind.startswith("TIMESTAMP") or kind == "DATE":
        parse = dt.date.fromisoformat if kind == "DATE" else dt.datetime.fromisoformat
        try:
            parse(value)
        except (TypeError, ValueError):
            return f"{_json_type(value)} {str(value)[:40]!r} is not an ISO-8601 {kind}"
    return None


def _row_problem(row: dict, types: dict[str, str]) -> str | None:
    for column, value in row.items():
        if (problem := _type_problem(value, types[column])) is not None:
            return f"{column}: {problem}"
    return None


def manifest_digest(manifest: dict) -> str:
    """sha256 of the manifest's canonical JSON (sorted keys, ASCII, no spaces), its own `sha256` left out."""
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("ascii")).hexdigest()


def _members(folder: Path, problems: _Problems) -> set[str]:
    """The bundle's regular files as relative names. Symbolic links are never followed: a member
    pointing elsewhere would restore a file that is not the bundle's."""
    found: set[str] = set()
    pending = [""]
    while pending:
        prefix = pending.pop()
        with os.scandir(folder / prefix) as entries:
            for entry in entries:
                name = prefix + entry.name
                if entry.is_symlink():
                    problems.add(f"{name}: a symbolic link: a bundle holds only its own regular files")
                elif entry.is_dir(follow_symlinks=False):
                    pending.append(name + "/")
                elif entry.is_file(follow_symlinks=False):
                    found.add(name)
                else:
                    problems.add(f"{name}: not a regular file")
    return found


def _entry(entry: Any, problems: _Problems) -> BundleFile | None:
    """One `files` entry of the manifest, if its fields have their types."""
    if not isinstance(entry, dict):
        problems.add(f"{MANIFEST}: a files entry is a JSON {_json_type(entry)}, not an object")
        return None
    name, kind, table, rows, sha, columns = (
        entry.get(k) for k in ("name", "kind", "table", "rows", "sha256", "columns")
    )
    where = f"{MANIFEST}: file {name!r}"
    parts = PurePosixPath(name).parts if isinstance(name, str) else ()
    if (
        not isinstance(name, str)
        or not name
        or name.startswith("/")
        or "\\" in name
        or "/".join(parts) != name
        or {".", ".."} & set(parts)
    ):
        problems.add(f"{where}: not a path inside the bundle")
    elif name == MANIFEST:
        problems.add(f"{where}: the manifest cannot list itself")
    elif kind not in KINDS:
        problems.add(f"{where}: unknown kind {kind!r}")
    elif not _is_int(rows) or rows < 0 or not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        problems.add(f"{where}: rows must be a count and sha256 64 hex digits")
    elif not {"memory": table == "turns", "table": isinstance(table, str) and table not in ("", "turns")}.get(
        kind, table is None
    ):
        problems.add(f"{where}: table {table!r} does not fit kind {kind}")
    elif (kind in ("memory", "table")) != (columns is not None):
        problems.add(f"{where}: {'columns are missing' if columns is None else 'columns are unexpected'}")
    elif columns is not None and not (
        isinstance(columns, list)
        and columns
        and all(isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) and x for x in c) for c in columns)
        and len({c[0] for c in columns}) == len(columns)
    ):
        problems.add(f"{where}: columns must be distinct [name, type] pairs")
    elif kind == "memory" and [c[0] for c in columns] not in (
        ARCHIVED_TURN_COLUMNS,
        ARCHIVED_TURN_COLUMNS_NO_EMBEDDING,
    ):
        problems.add(f"{where}: the turn columns are not this code's ({', '.join(ARCHIVED_TURN_COLUMNS)})")
    elif not _vectors_entry_ok(kind, entry.get("vectors")):
        problems.add(f"{where}: vectors must be {{with_embedding, without_embedding, sessions_without_embedding}}")
    else:
        columns = [tuple(c) for c in columns] if columns is not None else None
        return BundleFile(name, kind, table, rows, sha, columns, entry.get("vectors"))
    return None


def _vectors_entry_ok(kind: str, vectors: Any) -> bool:
    """A vector file's `vectors` entry (absent in bundles from older code), none on other files."""
    if kind not in ("memory", "summaries") or vectors is None:
        return vectors is None
    return (
        isinstance(vectors, dict)
        and set(vectors) == {"with_embedding", "without_embedding", "sessions_without_embedding"}
        and _is_int(vectors["with_embedding"]) and _is_int(vectors["without_embedding"])
        and isinstance(vectors["sessions_without_embedding"], list)
        and all(isinstance(s, str) for s in vectors["sessions_without_embedding"])
    )  # fmt: skip


class VectorCount:
    """Counts a vector file's rows with and without an embedding, as the manifest records them."""

    def __init__(self) -> None:
        self.with_embedding = 0
        self.without = 0
        self.sessions_without: set[str] = set()

    def add(self, has_embedding: bool, session_id: str) -> None:
        if has_embedding:
            self.with_embedding += 1
        else:
            self.without += 1
            self.sessions_without.add(session_id)

    def entry(self) -> dict:
        return {
            "with_embedding": self.with_embedding,
            "without_embedding": self.without,
            "sessions_without_embedding": sorted(self.sessions_without),
        }


def _lines(handle: BinaryIO, digest: Any) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) of each line, hashing as it reads; None for a line over MAX_LINE_BYTES,
    which is skipped in chunks rather than held in memory."""
    limit = MAX_LINE_BYTES
    line_no = 0
    while raw := handle.readline(limit + 1):
        digest.update(raw)
        line_no += 1
        if len(raw) <= limit:
            yield line_no, raw
            continue
        while not raw.endswith(b"\n") and (raw := handle.readline(HASH_CHUNK)):
            digest.update(raw)
        yield line_no, None


def _line_check(f: BundleFile) -> Callable[[dict], str | None]:
    """The per-line check of a file: raises ValueError with the reason; returns the row's session
    (None: a graph line, or a table without a session column)."""
    types = dict(f.columns or [])
    session_column = SESSION_COLUMN.get(f.table, "session_id") if f.table else None
    graph_state = {"edges_started": False}

    def check(obj: dict) -> str | None:
        if f.kind == "memory":
            if set(obj) != MEMORY_LINE_KEYS:
                raise ValueError(f"keys {sorted(obj)}, a line of this project has {sorted(MEMORY_LINE_KEYS)}")
            if "embedding" not in types and obj["embedding"] is not None:
                raise ValueError("an embedding in a bundle whose turn columns have none")
            if (problem := embedding_problem(obj["embedding"])) is not None:
                raise ValueError(problem)
            unknown = (
                set(obj["metadata"]) - set(TURN_METADATA_KEYS.values()) if isinstance(obj["metadata"], dict) else set()
            )
            if unknown:
                raise ValueError(f"metadata keys this code does not restore: {', '.join(sorted(unknown))}")
            row = turn_from_memory_row(obj)
            if (problem := _row_problem(row, types)) is not None:
                raise ValueError(problem)
            return row["session_id"]
        if f.kind == "summaries":
            meta = obj.get("metadata")
            if (
                not isinstance(obj.get("id"), str)
                or not isinstance(meta, dict)
                or not isinstance(meta.get("sessionId"), str)
            ):
                raise ValueError("not a summary row: id and metadata.sessionId are required")
            if (problem := embedding_problem(obj.get("embedding"))) is not None:
                raise ValueError(problem)
            return meta["sessionId"]
        if f.kind == "graph":
            if obj.get("type") not in ("node", "edge") or not isinstance(obj.get("data"), dict):
                raise ValueError("not a graph line: type node|edge and a data object are required")
            if obj["type"] == "edge":
                graph_state["edges_started"] = True
            elif graph_state["edges_started"]:
                raise ValueError("a node line after the first edge line: nodes come first")
            return None
        if set(obj) != set(types):
            missing, extra = sorted(set(types) - set(obj)), sorted(set(obj) - set(types))
            raise ValueError(f"columns differ from the manifest's (missing {missing}, unexpected {extra})")
        if (problem := _row_problem(obj, types)) is not None:
            raise ValueError(problem)
        return obj[session_column] if session_column in types else None

    return check


def _check_file(folder: Path, f: BundleFile, scope: set[str] | None, problems: _Problems) -> set[str]:
    """Check one file's checksum, line count and lines; returns the sessions its rows belong to."""
    has_session = f.kind in ("memory", "summaries") or (
        f.kind == "table" and SESSION_COLUMN.get(f.table, "session_id") in dict(f.columns)
    )
    if scope is not None and f.kind == "table" and not has_session:
        problems.add(f"{f.name}: table {f.table} has no session column, so a bundle of some sessions cannot hold it")
    check = _line_check(f)
    sessions: set[str] = set()
    turn_ids: set[str] = set()
    vectors = VectorCount()
    digest = hashlib.sha256()
    rows = 0
    with (folder / f.name).open("rb") as handle:
        for line_no, raw in _lines(handle, digest):
            rows = line_no
            where = f"{f.name}:{line_no}"
            if raw is None:
                problems.add(f"{where}: longer than {MAX_LINE_BYTES} bytes")
                continue
            if not raw.endswith(b"\n"):
                problems.add(f"{where}: the last line is cut off (no newline)")
            try:
                obj = json.loads(raw.decode("utf-8"))
                if not isinstance(obj, dict):
                    raise ValueError(f"a JSON {_json_type(obj)}, not an object")
                session = check(obj)
            except UnicodeDecodeError as exc:
                problems.add(f"{where}: not UTF-8 ({exc.reason})")
                continue
            except RecursionError:
                problems.add(f"{where}: JSON nested too deeply")
                continue
            except ValueError as exc:  # json.JSONDecodeError included
                problems.add(f"{where}: {exc}")
                continue
            if f.kind in ("memory", "summaries"):
                vectors.add(obj.get("embedding") is not None, session)
            if f.kind == "memory":
                if obj["id"] in turn_ids:
                    problems.add(f"{where}: turn id {obj['id']!r} is on an earlier line too")
                turn_ids.add(obj["id"])
            if not has_session:
                continue
            if scope is not None and (not isinstance(session, str) or session not in scope):
                problems.add(f"{where}: session {session!r} is not one of the manifest's sessions")
            elif isinstance(session, str):
                sessions.add(session)
    if digest.hexdigest() != f.sha256:
        problems.add(f"{f.name}: sha256 differs from the manifest's (changed or truncated)")
    if rows != f.rows:
        problems.add(f"{f.name}: {rows} lines, the manifest says {f.rows}")
    if f.vectors is not None and vectors.entry() != f.vectors:
        problems.add(
            f"{f.name}: its rows with and without an embedding are not the manifest's count ({vectors.entry()})"
        )
    return sessions


def validate_bundle(folder: str | Path) -> Bundle:
    """Read the whole bundle: the manifest and its own checksum, each file's sha256 and row count,
    every line's JSON, shape and value types, and that the rows are the sessions the manifest names.
    Raises BundleError listing what is wrong; nothing is read into any store before this."""
    folder = Path(folder)
    try:
        return _validate(folder)
    except OSError as exc:  # a member unreadable or gone while it was read
        raise BundleError(folder, [f"cannot be read: {exc}"]) from None


def _validate(folder: Path) -> Bundle:
    problems = _Problems()
    manifest_path = folder / MANIFEST
    if manifest_path.is_symlink() or not manifest_path.is_file():
        raise BundleError(
            folder,
            [f"{MANIFEST}: missing (or not a regular file): not a session-digest archive, or an interrupted one"],
        )
    if manifest_path.stat().st_size > MAX_MANIFEST_BYTES:
        raise BundleError(
            folder, [f"{MANIFEST}: larger than {MAX_MANIFEST_BYTES} bytes: not a manifest this code wrote"]
        )
    data = manifest_path.read_bytes()
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise BundleError(folder, [f"{MANIFEST}: not JSON ({exc})"]) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(folder, [f"{MANIFEST}: format is not {FORMAT!r}"])
    if manifest.get("version") != FORMAT_VERSION:
        raise BundleError(
            folder, [f"{MANIFEST}: version {manifest.get('version')!r}, this code reads {FORMAT_VERSION}"]
        )
    try:
        sealed = manifest.get("sha256") == manifest_digest(manifest)
    except RecursionError:  # nested deeper than json.dumps goes
        sealed = False
    if not sealed:
        problems.add(f"{MANIFEST}: its sha256 does not match its content (edited after it was written)")
    if not isinstance(manifest.get("archive_id"), str) or not manifest["archive_id"]:
        problems.add(f"{MANIFEST}: archive_id must be a non-empty string")
    if not _is_int(manifest.get("schema_version")):
        problems.add(f"{MANIFEST}: schema_version must be an integer")
    sessions = manifest.get("sessions")
    if sessions is not None and not (
        isinstance(sessions, list) and all(isinstance(s, str) for s in sessions) and len(set(sessions)) == len(sessions)
    ):
        problems.add(f"{MANIFEST}: sessions must be null or a list of distinct ids")
        sessions = []
    entries = manifest.get("files")
    if not isinstance(entries, list):
        raise BundleError(folder, [*problems.listed, f"{MANIFEST}: files must be a list"])
    files = [f for entry in entries if (f := _entry(entry, problems)) is not None]
    if len(files) < len(entries):
        raise BundleError(folder, problems.listed, problems.more)
    names = [f.name for f in files]
    tables = [f.table for f in files if f.kind == "table"]
    for duplicate in sorted({n for n in names if names.count(n) > 1} | {t for t in tables if tables.count(t) > 1}):
        problems.add(f"{MANIFEST}: {duplicate} is listed more than once")
    if [f.kind for f in files].count("memory") != 1:
        problems.add(f"{MANIFEST}: a bundle holds exactly one memory-backup file")
    members = _members(folder, problems)
    for name in sorted(members - set(names) - {MANIFEST}):
        problems.add(f"{name}: not in the manifest (added after the archive was written?)")
    scope = set(sessions) if sessions is not None else None
    turn_sessions: set[str] = set()
    for f in files:
        if f.name not in members:
            problems.add(f"{f.name}: missing (or not a regular file)")
            continue
        held = _check_file(folder, f, scope, problems)
        if f.kind == "memory":
            turn_sessions = held
    if scope is not None and (empty := scope - turn_sessions):
        problems.add(f"{MANIFEST}: lists sessions the bundle holds no turns of: {', '.join(sorted(empty))}")
    if problems.listed:
        raise BundleError(folder, problems.listed, problems.more)
    return Bundle(folder, manifest, files, hashlib.sha256(data).hexdigest(), frozenset(turn_sessions))


# --- restore planning --------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionState:
    """One session as the pending query sees it."""

    partition_key: str
    input_revision: str  # of its turns now
    summary_revision: str | None  # of its summary, None: no summary
    summary_created_at: str | None
    retired: bool


@dataclass(frozen=True)
class RestoreOutcome:
    pending: list[str]  # turns differ from what was summarized (or no summary): the sweeps rerun them
    summaries_restored: list[str]  # their summary row is now the bundle's: Dagster's record is stale
    removed: list[str]  # gone from the store (replace): their partitions go too
    retired: list[str]  # restored, but still tombstoned: out of every sweep
    unchanged: list[str]


def restore_outcome(before: dict[str, SessionState], after: dict[str, SessionState]) -> RestoreOutcome:
    """Which sessions a restore changed, and how, from their state before and after it."""
    pending, restored, retired, unchanged = [], [], [], []
    for session_id in sorted(after):
        now, was = after[session_id], before.get(session_id)
        summary_changed = was is None or (was.summary_revision, was.summary_created_at) != (
            now.summary_revision,
            now.summary_created_at,
        )
        if now.retired:
            retired.append(session_id)
        elif now.summary_revision != now.input_revision:
            pending.append(session_id)
        elif summary_changed:
            restored.append(session_id)
        else:
            unchanged.append(session_id)
    removed = sorted(set(before) - set(after))
    return RestoreOutcome(pending, restored, removed, retired, unchanged)
