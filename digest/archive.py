"""Archive bundles: their line shapes, and the manifest and its checksums (`digest.archive_read`
validates a bundle and plans its restore).

A bundle is a folder `session-digest-archive-<ts>/` holding, as the original's export does,
- `memory-backup-<ts>.jsonl`: one turn per line, `{id, embedding, metadata, document}`. The
  embedding is the one the turn was ingested with, its JSON text written back verbatim, or null for
  a turn that came without one (the original's import needs its re-embed option for those; the
  manifest counts them); the flat metadata carries the original's keys plus the project's own
  (`documentRebuilt`, `sourceFile`, `sourceLine`, `ingestedAt`, and where known `project`,
  `gitBranch`, `redactions`), so a turn comes back exactly.
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
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from digest.visibility import summary_user_id

FORMAT = "session-digest-archive"
FORMAT_VERSION = 2  # 2: the manifest's own sha256, the memory-backup file's columns
MANIFEST = "manifest.json"
KINDS = ("memory", "summaries", "graph", "table")
# The column naming a row's session, where it is not `session_id`.
SESSION_COLUMN = {"friction_events": "asset_ref"}
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
    # Since migration 13: where the turn ran (the sessions' project and branch are derived from
    # these on restore), and the secrets its text had redacted at ingest (JSON text, kind → count).
    "project": "project",
    "git_branch": "gitBranch",
    "redactions": "redactions",
}
ARCHIVED_TURN_COLUMNS = ["id", *TURN_METADATA_KEYS, "document", "embedding"]
# The turn columns older code wrote, also restored (the columns they lack come back NULL): before
# the place columns, and before that, before turns kept their embedding (every line's is null).
_BEFORE_PLACES = [c for c in ARCHIVED_TURN_COLUMNS if c not in ("project", "git_branch", "redactions")]
OLDER_TURN_COLUMNS = (_BEFORE_PLACES, _BEFORE_PLACES[:-1])
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
    """A `memory-backup` line this project wrote → the `turns` row it came from (a key the line
    leaves out, None); ValueError if it is not one."""
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


def manifest_digest(manifest: dict) -> str:
    """sha256 of the manifest's canonical JSON (sorted keys, ASCII, no spaces), its own `sha256` left out."""
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("ascii")).hexdigest()


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
