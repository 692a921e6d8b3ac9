"""The fixed list of hostile archive bundles, for the restore tests: each a real bundle damaged by an
edit of tests/bundle_edits.py, with what its refusal says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from digest.archive import MANIFEST
from tests.bundle_edits import (
    _add_sessionless_table,
    _add_sessions,
    _column_type,
    _delete_member,
    _digest_only,
    _dir_member,
    _drop,
    _drop_memory_entry,
    _drop_table,
    _duplicate_entry,
    _entry_edit,
    _extra_file,
    _fifo_member,
    _huge_line,
    _huge_manifest,
    _line_edit,
    _manifest_edit,
    _node_after_edge,
    _raw_edit,
    _rename_column,
    _rename_member,
    _rows_off_by_one,
    _second_memory_entry,
    _second_table_entry,
    _set,
    _symlink_manifest,
    _symlink_member,
    _symlink_tables,
)

# --- the fixed list -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    apply: Callable[[Path, Path], None]  # (bundle, a folder outside it)
    expect: str  # in the refusal
    base: str = "scoped"  # scoped (small, third) | whole
    reseal: bool = False
    own_store: bool = False  # the store that wrote the bundle (it has the archive's record)
    mode: str = "replace"
    limits: dict = field(default_factory=dict)  # archive module constants to lower, for size limits


NESTED = b"[" * 200_000 + b"]" * 200_000
ROW_TYPES = "session_summaries"

CASES = [
    # the manifest itself
    Case("manifest-missing", lambda b, o: (b / MANIFEST).unlink(), "manifest.json: missing"),
    Case("manifest-not-json", lambda b, o: (b / MANIFEST).write_text("{not json"), "manifest.json: not JSON"),
    Case(
        "manifest-not-utf8",
        lambda b, o: (b / MANIFEST).write_bytes(b'{"format": "\xff\xfe"}'),
        "manifest.json: not JSON",
    ),
    Case("manifest-a-list", lambda b, o: (b / MANIFEST).write_text("[1, 2]"), "format is not"),
    Case("manifest-nested-too-deep", lambda b, o: (b / MANIFEST).write_bytes(NESTED), "manifest.json: not JSON"),
    Case("manifest-huge", _huge_manifest, "larger than"),
    Case("manifest-a-symlink", _symlink_manifest, "manifest.json: missing"),
    Case("wrong-format", _manifest_edit(_set("format", "other")), "format is not"),
    Case("version-1", _manifest_edit(_set("version", 1)), "version 1, this code reads 2"),
    Case("version-a-string", _manifest_edit(_set("version", "2")), "version '2'"),
    # issue 14.1: live sessions added to the manifest's list
    Case("sessions-added", _manifest_edit(_add_sessions), "its sha256 does not match its content"),
    Case(
        "sessions-added-resealed",
        _manifest_edit(_add_sessions),
        "lists sessions the bundle holds no turns of: big, fresh",
        reseal=True,
    ),
    Case(
        "row-edited-resealed-own-store",
        _line_edit("table", _set("title", "edited"), ROW_TYPES),
        "differs from the one this store wrote",
        reseal=True,
        own_store=True,
    ),
    Case("sessions-added-merge", _manifest_edit(_add_sessions), "its sha256 does not match", mode="merge"),
    Case(
        "sessions-null-resealed",
        _manifest_edit(_set("sessions", None)),
        "a whole-store bundle holds every table",
        reseal=True,
    ),
    Case(
        "sessions-one-removed",
        _manifest_edit(_set("sessions", ["small"])),
        "session 'third' is not one of the manifest's",
        reseal=True,
    ),
    Case(
        "sessions-not-a-list", _manifest_edit(_set("sessions", "small")), "sessions must be null or a list", reseal=True
    ),
    Case(
        "sessions-duplicated",
        _manifest_edit(_set("sessions", ["small", "small", "third"])),
        "list of distinct ids",
        reseal=True,
    ),
    Case(
        "sessions-not-strings", _manifest_edit(_set("sessions", [1, 2])), "sessions must be null or a list", reseal=True
    ),
    Case("manifest-sha256-removed", _manifest_edit(_drop("sha256")), "its sha256 does not match"),
    Case("manifest-sha256-edited", _manifest_edit(_set("sha256", "0" * 64)), "its sha256 does not match"),
    Case("file-sha256-edited", _entry_edit("memory", _set("sha256", "0" * 64)), "its sha256 does not match"),
    Case("archive-id-a-number", _manifest_edit(_set("archive_id", 7)), "archive_id must be", reseal=True),
    Case(
        "schema-version-a-string",
        _manifest_edit(_set("schema_version", "1")),
        "schema_version must be an integer",
        reseal=True,
    ),
    Case("schema-version-newer", _manifest_edit(_set("schema_version", 99)), "schema version 99 is newer", reseal=True),
    Case("files-not-a-list", _manifest_edit(_set("files", {})), "files must be a list", reseal=True),
    Case(
        "files-entry-a-string",
        _manifest_edit(lambda m: m["files"].append("x")),
        "a files entry is a JSON string",
        reseal=True,
    ),
    Case(
        "file-name-absolute",
        _entry_edit("graph", _set("name", "/etc/passwd")),
        "not a path inside the bundle",
        reseal=True,
    ),
    Case(
        "file-name-parent",
        _entry_edit("graph", _set("name", "../outside.jsonl")),
        "not a path inside the bundle",
        reseal=True,
    ),
    Case(
        "file-name-dotted",
        _entry_edit("graph", _set("name", "tables/../manifest.json")),
        "not a path inside the bundle",
        reseal=True,
    ),
    Case(
        "file-name-the-manifest",
        _entry_edit("graph", _set("name", MANIFEST)),
        "the manifest cannot list itself",
        reseal=True,
    ),
    Case("file-name-a-number", _entry_edit("graph", _set("name", 3)), "not a path inside the bundle", reseal=True),
    Case("file-kind-unknown", _entry_edit("graph", _set("kind", "blob")), "unknown kind 'blob'", reseal=True),
    Case("file-rows-a-string", _digest_only(_entry_edit("graph", _set("rows", "3"))), "rows must be a count"),
    Case("file-rows-negative", _digest_only(_entry_edit("graph", _set("rows", -1))), "rows must be a count"),
    Case("file-sha256-not-hex", _digest_only(_entry_edit("graph", _set("sha256", "z" * 64))), "sha256 64 hex digits"),
    Case(
        "memory-table-not-turns",
        _entry_edit("memory", _set("table", "attempts")),
        "does not fit kind memory",
        reseal=True,
    ),
    Case(
        "table-file-for-turns",
        _entry_edit("table", _set("table", "turns"), "attempts"),
        "does not fit kind table",
        reseal=True,
    ),
    Case(
        "table-never-restored",
        _entry_edit("table", _set("table", "summary_leases"), "backfill_state"),
        "is never restored",
        reseal=True,
    ),
    Case(
        "table-unknown",
        _entry_edit("table", _set("table", "nope"), "backfill_state"),
        "this store has no table nope",
        reseal=True,
    ),
    Case(
        "table-columns-missing", _entry_edit("table", _drop("columns"), "attempts"), "columns are missing", reseal=True
    ),
    Case(
        "graph-with-columns",
        _entry_edit("graph", _set("columns", [["id", "VARCHAR"]])),
        "columns are unexpected",
        reseal=True,
    ),
    Case(
        "columns-not-pairs",
        _entry_edit("table", _set("columns", [["a"]]), "attempts"),
        "distinct [name, type] pairs",
        reseal=True,
    ),
    Case(
        "columns-not-a-list", _entry_edit("memory", _set("columns", True)), "distinct [name, type] pairs", reseal=True
    ),
    Case(
        "columns-duplicated",
        _entry_edit("table", lambda e: e["columns"].append(e["columns"][0]), "attempts"),
        "distinct [name, type]",
        reseal=True,
    ),
    Case("column-unknown-here", _rename_column, "has no column backoff_until here", reseal=True),
    Case(
        "column-type-differs",
        _column_type(ROW_TYPES, "model", "JSON"),
        "column model is JSON in the bundle, VARCHAR here",
        reseal=True,
    ),
    Case(
        "memory-columns-not-ours",
        _entry_edit("memory", lambda e: e["columns"].pop(1)),
        "the turn columns are not this code's",
        reseal=True,
    ),
    Case(
        "memory-vectors-not-counts",
        _entry_edit("memory", _set("vectors", {"with_embedding": "3"})),
        "vectors must be",
        reseal=True,
    ),
    Case("graph-with-vectors", _entry_edit("graph", _set("vectors", {})), "vectors must be", reseal=True),
    Case("two-memory-files", _second_memory_entry, "exactly one memory-backup file", reseal=True),
    Case("no-memory-entry", _drop_memory_entry, "exactly one memory-backup file", reseal=True),
    Case("file-listed-twice", _duplicate_entry, "is listed more than once", reseal=True),
    Case("table-listed-twice", _second_table_entry, "backfill_state is listed more than once", reseal=True),
    Case("rows-off-by-one", _rows_off_by_one, "lines, the manifest says"),
    # the members
    Case("memory-missing", _delete_member("memory"), "missing (or not a regular file)"),
    Case("table-missing", _delete_member("table", "mini_summaries"), "tables/mini_summaries.jsonl: missing"),
    Case("extra-file", _extra_file("turns-extra.jsonl"), "turns-extra.jsonl: not in the manifest"),
    Case("extra-table-file", _extra_file("tables/rejects.jsonl"), "tables/rejects.jsonl: not in the manifest"),
    Case("member-symlinked-out", _symlink_member("table", "session_summaries"), "a symbolic link", reseal=True),
    Case("memory-symlinked-out", _symlink_member("memory"), "a symbolic link"),
    Case("tables-folder-symlinked-out", _symlink_tables, "tables: a symbolic link"),
    Case("member-a-fifo", _fifo_member, "not a regular file"),
    Case("member-a-folder", _dir_member, "missing (or not a regular file)"),
    Case("member-renamed", _rename_member, "memory-backup-renamed.jsonl: not in the manifest"),
    # the lines
    Case(
        "memory-truncated",
        _raw_edit("memory", lambda ls: [*ls[:-1], ls[-1][:-40]]),
        "sha256 differs from the manifest's",
    ),
    Case(
        "memory-truncated-resealed",
        _raw_edit("memory", lambda ls: [*ls[:-1], ls[-1][:-40]]),
        "the last line is cut off",
        reseal=True,
    ),
    Case("table-emptied", _raw_edit("table", lambda ls: [], "attempts"), "0 lines, the manifest says"),
    Case(
        "line-bad-json",
        _raw_edit("table", lambda ls: [b"{not json\n", *ls[1:]], "attempts"),
        "Expecting property name",
        reseal=True,
    ),
    Case("line-empty", _raw_edit("table", lambda ls: [b"\n", *ls], "attempts"), "Expecting value", reseal=True),
    Case("line-not-utf8", _raw_edit("memory", lambda ls: [b'{"id": "\xff"}\n', *ls[1:]]), "not UTF-8", reseal=True),
    Case(
        "line-an-array",
        _raw_edit("table", lambda ls: [b"[1]\n", *ls[1:]], "attempts"),
        "a JSON array, not an object",
        reseal=True,
    ),
    Case(
        "line-nested-too-deep",
        _raw_edit("table", lambda ls: [NESTED + b"\n", *ls[1:]], "attempts"),
        "nested too deeply",
        reseal=True,
    ),
    Case(
        "line-too-long",
        _raw_edit("memory", _huge_line),
        "longer than 4096 bytes",
        reseal=True,
        limits={"MAX_LINE_BYTES": 4096},
    ),
    Case(
        "memory-timestamp-a-string",
        _line_edit("memory", _set("metadata.timestamp", "x")),
        "ts_ms: a JSON string, not BIGINT",
        reseal=True,
    ),
    Case(
        "memory-timestamp-infinite",
        _line_edit("memory", _set("metadata.timestamp", 1e400)),
        "ts_ms: a JSON number, not BIGINT",
        reseal=True,
    ),
    Case(
        "memory-rebuilt-a-string",
        _line_edit("memory", _set("metadata.documentRebuilt", "yes")),
        "documentRebuilt is missing or not bool",
        reseal=True,
    ),
    Case(
        "memory-ingested-at-garbage",
        _line_edit("memory", _set("metadata.ingestedAt", "yesterday")),
        "not an ISO-8601",
        reseal=True,
    ),
    Case(
        "memory-unknown-metadata-key",
        _line_edit("memory", _set("metadata.colour", "red")),
        "metadata keys this code does not restore: colour",
        reseal=True,
    ),
    Case(
        "memory-embedding-not-numbers",
        _line_edit("memory", _set("embedding", [0.5, "x"])),
        "other than finite numbers",
        reseal=True,
    ),
    Case("memory-embedding-empty", _line_edit("memory", _set("embedding", [])), "not a non-empty array", reseal=True),
    Case(
        "memory-embedding-dropped",
        _line_edit("memory", _set("embedding", None)),
        "not the manifest's count",
        reseal=True,
    ),
    Case(
        "summary-embedding-a-string",
        _line_edit("summaries", _set("embedding", "0.5")),
        "not a non-empty array",
        reseal=True,
    ),
    Case("memory-id-missing", _line_edit("memory", _drop("id")), "a line of this project has", reseal=True),
    Case(
        "memory-session-empty",
        _line_edit("memory", _set("metadata.sessionId", "")),
        "metadata.sessionId is empty",
        base="whole",
        reseal=True,
    ),
    Case(
        "memory-session-elsewhere",
        _line_edit("memory", _set("metadata.sessionId", "big")),
        "session 'big' is not one of the manifest's",
        reseal=True,
    ),
    Case(
        "memory-duplicate-turn", _raw_edit("memory", lambda ls: [*ls, ls[0]]), "is on an earlier line too", reseal=True
    ),
    Case(
        "row-extra-key",
        _line_edit("table", _set("colour", "red"), "attempts"),
        "columns differ from the manifest's",
        reseal=True,
    ),
    Case(
        "row-missing-key",
        _line_edit("table", _drop("stage"), "attempts"),
        "columns differ from the manifest's",
        reseal=True,
    ),
    Case(
        "row-int-a-string",
        _line_edit("table", _set("quality", "high"), ROW_TYPES),
        "quality: a JSON string, not INTEGER",
        reseal=True,
    ),
    Case(
        "row-int-a-float",
        _line_edit("table", _set("quality", 1.5), ROW_TYPES),
        "quality: a JSON number, not INTEGER",
        reseal=True,
    ),
    Case(
        "row-int-out-of-range",
        _line_edit("table", _set("quality", 2**40), ROW_TYPES),
        "out of range for INTEGER",
        reseal=True,
    ),
    Case(
        "row-list-a-string", _line_edit("table", _set("technologies", "a,b"), ROW_TYPES), "not VARCHAR[]", reseal=True
    ),
    Case(
        "row-list-of-numbers",
        _line_edit("table", _set("technologies", [1, 2]), ROW_TYPES),
        "technologies: a JSON number, not VARCHAR",
        reseal=True,
    ),
    Case(
        "row-bool-a-number",
        _line_edit("table", _set("degraded", 0), ROW_TYPES),
        "degraded: a JSON number, not BOOLEAN",
        reseal=True,
    ),
    Case(
        "row-text-a-list",
        _line_edit("table", _set("title", ["t"]), ROW_TYPES),
        "title: a JSON array, not VARCHAR",
        reseal=True,
    ),
    Case(
        "row-time-garbage",
        _line_edit("table", _set("created_at", "yesterday"), ROW_TYPES),
        "not an ISO-8601",
        reseal=True,
    ),
    Case(
        "row-not-null-violated",
        _line_edit("table", _set("summary", None), ROW_TYPES),
        "the store cannot take its rows",
        reseal=True,
    ),
    Case(
        "row-duplicate-key",
        _raw_edit("table", lambda ls: [*ls, ls[0]], "mini_summaries"),
        "rows share the key (turn_id)",
        reseal=True,
    ),
    Case(
        "row-duplicate-key-merge",
        _raw_edit("table", lambda ls: [*ls, ls[0]], "mini_summaries"),
        "rows share the key",
        reseal=True,
        mode="merge",
    ),
    Case(
        "row-of-another-session",
        _line_edit("table", _set("session_id", "big"), "mini_summaries"),
        "session 'big' is not one of",
        reseal=True,
    ),
    Case(
        "row-session-null",
        _line_edit("table", _set("session_id", None), "response_cache"),
        "session None is not one of",
        reseal=True,
    ),
    Case(
        "friction-of-another-session",
        _line_edit("table", _set("asset_ref", "fresh"), "friction_events"),
        "session 'fresh' is not one of",
        reseal=True,
    ),
    Case(
        "summary-line-elsewhere",
        _line_edit("summaries", _set("metadata.sessionId", "big")),
        "session 'big' is not one of",
        reseal=True,
    ),
    Case("summary-line-no-metadata", _line_edit("summaries", _drop("metadata")), "not a summary row", reseal=True),
    Case(
        "graph-node-after-edge",
        _raw_edit("graph", _node_after_edge),
        "a node line after the first edge line",
        reseal=True,
    ),
    Case("graph-line-unknown-type", _line_edit("graph", _set("type", "blob")), "not a graph line", reseal=True),
    Case("sessionless-table-in-scoped", _add_sessionless_table, "table rejects has no session column", reseal=True),
    Case(
        "whole-without-a-table",
        _drop_table("rejects"),
        "a whole-store bundle holds every table, this one lacks rejects",
        base="whole",
        reseal=True,
    ),
    Case(
        "whole-sessions-edited", _manifest_edit(_set("sessions", ["small"])), "its sha256 does not match", base="whole"
    ),
    Case(
        "turn-id-of-another-sessions-turn",
        _line_edit("memory", _set("id", "big-t000")),
        "the store cannot take its rows",
        reseal=True,
    ),
]
