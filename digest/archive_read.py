"""Reading an archive bundle back (`digest.archive` defines its shapes): validation, and restore planning.

`validate_bundle` checks a bundle's manifest, files, checksums and every line before a restore
touches the store; a refusal (`BundleError`) lists where and why. `restore_outcome` says which
sessions a restore changed, and how. No DuckDB here either.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from digest.archive import (
    ARCHIVED_TURN_COLUMNS,
    FORMAT,
    FORMAT_VERSION,
    HASH_CHUNK,
    KINDS,
    MANIFEST,
    MEMORY_LINE_KEYS,
    OLDER_TURN_COLUMNS,
    SESSION_COLUMN,
    TURN_METADATA_KEYS,
    BundleFile,
    embedding_problem,
    manifest_digest,
    turn_from_memory_row,
)
from digest.redact import counts_problem

# The longest line read back (a turn can be a big document), and the largest manifest.
MAX_LINE_BYTES = 1 << 30
MAX_MANIFEST_BYTES = 64 << 20
# Problems listed in a refusal; the rest are counted, so a badly damaged file stays readable.
MAX_PROBLEMS = 20
_SHA256 = re.compile(r"[0-9a-f]{64}")


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
    elif kind == "memory" and [c[0] for c in columns] not in (ARCHIVED_TURN_COLUMNS, *OLDER_TURN_COLUMNS):
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
    metadata_keys = {key: column for column, key in TURN_METADATA_KEYS.items() if column in types}
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
            keys = set(obj["metadata"]) if isinstance(obj["metadata"], dict) else set()
            if unknown := keys - set(TURN_METADATA_KEYS.values()):
                raise ValueError(f"metadata keys this code does not restore: {', '.join(sorted(unknown))}")
            # A bundle from older code has fewer turn columns: its lines have only their keys.
            if unlisted := keys - set(metadata_keys):
                raise ValueError(f"metadata keys this bundle's turn columns do not have: {', '.join(sorted(unlisted))}")
            row = turn_from_memory_row(obj)
            if (problem := _row_problem({c: row[c] for c in metadata_keys.values()}, types)) is not None:
                raise ValueError(problem)
            if row["redactions"] is not None and (problem := counts_problem(row["redactions"])) is not None:
                raise ValueError(f"redactions: {problem}")
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
