"""Archive bundles: their line shapes, the manifest and its checksums, validation, and restore planning.

A bundle is a folder `session-digest-archive-<ts>/` holding, as the original's export does,
- `memory-backup-<ts>.jsonl`: one turn per line, `{id, embedding, metadata, document}`. There is no
  embedding (the ingest never keeps one), so it is null; the flat metadata carries the original's
  keys plus the project's own (`documentRebuilt`, `sourceFile`, `sourceLine`, `ingestedAt`), so a
  turn comes back exactly. `session-digest ingest` reads this file too;
- `summaries-backup-<ts>.jsonl`: one session summary per line in the original's shape (§1.3 keys,
  lists comma-joined). It is for readers of that shape: a comma inside a technology's name would not
  survive the join, so the exact rows are in `tables/session_summaries.jsonl`;
- `graph-backup-<ts>.jsonl`: node lines, then edge lines; each turn's mini summary is on its
  `AGENT_MEMORY` node, as in the original;
- `tables/<table>.jsonl`: every other table of the project, one row per line, every column;
- `manifest.json`, written last: the scope (all sessions, or a list), and per file its kind, table,
  columns, row count and sha256. A folder without one is an interrupted archive.

No DuckDB here: the store reads and writes the tables; this module shapes lines and checks files.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

FORMAT = "session-digest-archive"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
KINDS = ("memory", "summaries", "graph", "table")
# Problems listed in a refusal; the rest are counted, so a badly damaged file stays readable.
MAX_PROBLEMS = 20
HASH_CHUNK = 1 << 20


def archive_stamp(at: dt.datetime) -> str:
    """The original's file stamp: an ISO time in UTC with `:` replaced by `-`."""
    utc = at.astimezone(dt.timezone.utc)
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
ARCHIVED_TURN_COLUMNS = ["id", *TURN_METADATA_KEYS, "document"]
# Present on every line this project writes: a memory-backup without them came from elsewhere
# (the original's own export is ingested with `session-digest ingest`, not restored).
_REQUIRED_TURN_KEYS = {
    "sessionId": str, "documentRebuilt": bool, "sourceFile": str, "sourceLine": int, "ingestedAt": str,
}  # fmt: skip


def memory_row(turn: dict) -> dict:
    """A `turns` row → a `memory-backup` line. Absent values are left out, as flat metadata does."""
    metadata = {key: jsonable(turn[column]) for column, key in TURN_METADATA_KEYS.items() if turn[column] is not None}
    return {"id": turn["id"], "embedding": None, "metadata": metadata, "document": turn["document"]}


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
            raise ValueError(f"metadata.{key} is missing or not {kind.__name__}: not a line of a session-digest archive")
    row = {column: metadata.get(key) for column, key in TURN_METADATA_KEYS.items()}
    return {"id": obj["id"], **row, "document": obj["document"]}


def _joined(values: Iterable[str] | None) -> str:
    return ",".join(values or [])


def summary_backup_row(summary: dict) -> dict:
    """A `session_summaries` row → a `summaries-backup` line with the original's keys and types (§1.3)."""
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
    }
    return {"id": f"summary_{summary['session_id']}", "embedding": None, "metadata": metadata, "document": summary["summary"]}


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


class JsonlWriter:
    """Writes JSON lines, counting them and hashing the bytes as they go."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.rows = 0
        self._hash = hashlib.sha256()
        self._out = path.open("wb")

    def write(self, obj: dict) -> None:
        data = dump_line(obj).encode("utf-8")
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
    return {
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
            }
            for f in files
        ],
    }


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
        self.problems = problems
        listing = "\n".join(f"  {p}" for p in problems)
        tail = f"\n  … and {more} more" if more else ""
        super().__init__(f"bundle {bundle} cannot be restored, nothing was changed:\n{listing}{tail}")


@dataclass(frozen=True)
class Bundle:
    path: Path
    manifest: dict
    files: list[BundleFile]

    @property
    def sessions(self) -> list[str] | None:
        """The sessions the bundle holds; None: a whole store."""
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


def _line_check(kind: str, columns: set[str] | None) -> Callable[[dict], None]:
    """The per-line check of a file kind: raises ValueError with the reason."""
    graph_state = {"edges_started": False}

    def check(obj: dict) -> None:
        if kind == "memory":
            turn_from_memory_row(obj)
        elif kind == "summaries":
            meta = obj.get("metadata")
            if not isinstance(obj.get("id"), str) or not isinstance(meta, dict) or not isinstance(meta.get("sessionId"), str):
                raise ValueError("not a summary row: id and metadata.sessionId are required")
        elif kind == "graph":
            if obj.get("type") not in ("node", "edge") or not isinstance(obj.get("data"), dict):
                raise ValueError("not a graph line: type node|edge and a data object are required")
            if obj["type"] == "edge":
                graph_state["edges_started"] = True
            elif graph_state["edges_started"]:
                raise ValueError("a node line after the first edge line: nodes come first")
        elif set(obj) != columns:
            missing, extra = sorted(columns - set(obj)), sorted(set(obj) - columns)
            raise ValueError(f"columns differ from the manifest's (missing {missing}, unexpected {extra})")

    return check


def read_objects(path: Path) -> Iterator[dict]:
    """Every line of a validated file."""
    with path.open("r", encoding="utf-8") as handle:
        for line in handle:
            yield json.loads(line)


def _check_file(folder: Path, entry: dict, problems: _Problems) -> BundleFile | None:
    name = entry.get("name")
    kind = entry.get("kind")
    if not isinstance(name, str) or Path(name).is_absolute() or ".." in Path(name).parts:
        problems.add(f"{MANIFEST}: file name {name!r} is not a path inside the bundle")
        return None
    if kind not in KINDS:
        problems.add(f"{MANIFEST}: {name}: unknown kind {kind!r}")
        return None
    columns = entry.get("columns")
    if kind == "table" and (not isinstance(entry.get("table"), str) or not isinstance(columns, list)):
        problems.add(f"{MANIFEST}: {name}: a table file needs its table and columns")
        return None
    path = folder / name
    if not path.is_file():
        problems.add(f"{name}: missing")
        return None
    if sha256_file(path) != entry.get("sha256"):
        problems.add(f"{name}: sha256 differs from the manifest's (changed or truncated)")
    check = _line_check(kind, {c[0] for c in columns} if kind == "table" else None)
    rows = 0
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            rows += 1
            if not raw.endswith(b"\n"):
                problems.add(f"{name}:{line_no}: the last line is cut off (no newline)")
            try:
                obj = json.loads(raw.decode("utf-8"))
                if not isinstance(obj, dict):
                    raise ValueError(f"a JSON {type(obj).__name__}, not an object")
                check(obj)
            except UnicodeDecodeError as exc:
                problems.add(f"{name}:{line_no}: not UTF-8 ({exc.reason})")
            except ValueError as exc:  # json.JSONDecodeError included
                problems.add(f"{name}:{line_no}: {exc}")
    if rows != entry.get("rows"):
        problems.add(f"{name}: {rows} lines, the manifest says {entry.get('rows')}")
    return BundleFile(
        name, kind, entry.get("table"), rows, entry.get("sha256"), [tuple(c) for c in columns] if columns else None
    )


def validate_bundle(folder: str | Path) -> Bundle:
    """Read the whole bundle: the manifest, each file's sha256 and row count, and every line's JSON
    and shape. Raises BundleError listing what is wrong; nothing is read into any store before this."""
    folder = Path(folder)
    problems = _Problems()
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise BundleError(folder, [f"{MANIFEST}: missing: not a session-digest archive, or an interrupted one"])
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BundleError(folder, [f"{MANIFEST}: not JSON ({exc})"]) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(folder, [f"{MANIFEST}: format is not {FORMAT!r}"])
    if manifest.get("version") != FORMAT_VERSION:
        raise BundleError(folder, [f"{MANIFEST}: version {manifest.get('version')!r}, this code reads {FORMAT_VERSION}"])
    sessions = manifest.get("sessions")
    if sessions is not None and not (isinstance(sessions, list) and all(isinstance(s, str) for s in sessions)):
        problems.add(f"{MANIFEST}: sessions must be null or a list of ids")
    files = [f for entry in manifest.get("files", []) if (f := _check_file(folder, entry, problems)) is not None]
    if len([f for f in files if f.kind == "memory"]) != 1:
        problems.add(f"{MANIFEST}: a bundle holds exactly one memory-backup file")
    if problems.listed:
        raise BundleError(folder, problems.listed, problems.more)
    return Bundle(folder, manifest, files)


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
