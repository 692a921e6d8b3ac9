"""Damaged and hostile archive bundles, for the restore tests: edits of a real bundle, the checks of
what a restore may do to a store, and a fixed list of hostile bundles.

`reseal` recomputes every file's sha256 and line count and the manifest's own sha256, as someone
who knows the format would: a resealed edit gets past the checksums, so the deeper checks are tried."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from digest import archive_read
from digest.archive import MANIFEST, SESSION_COLUMN, manifest_digest

# Sessions of the live store the scoped bundle does not hold.
LIVE_ONLY = ["big", "fresh"]


# --- reading and editing a bundle ---------------------------------------------------------------


def manifest(bundle: Path) -> dict:
    return json.loads((bundle / MANIFEST).read_text())


def save_manifest(bundle: Path, data, digest: bool = False) -> None:
    if digest and isinstance(data, dict):
        data = {**data, "sha256": manifest_digest(data)}
    (bundle / MANIFEST).write_text(json.dumps(data, indent=2) + "\n")


def reseal(bundle: Path) -> None:
    """Every listed regular file's sha256 and line count, then the manifest's sha256, made to fit."""
    try:
        data = manifest(bundle)
    except (OSError, ValueError, RecursionError):
        return
    if not isinstance(data, dict):
        return
    for entry in data.get("files") if isinstance(data.get("files"), list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            continue
        path = bundle / entry["name"]
        if path.is_file() and not path.is_symlink():
            raw = path.read_bytes()
            entry["sha256"] = hashlib.sha256(raw).hexdigest()
            entry["rows"] = raw.count(b"\n") + (0 if raw.endswith(b"\n") or not raw else 1)
    save_manifest(bundle, data, digest=True)


def file_of(bundle: Path, kind: str, table: str | None = None) -> str:
    return next(
        f["name"] for f in manifest(bundle)["files"] if f["kind"] == kind and (table is None or f["table"] == table)
    )


def raw_lines(bundle: Path, name: str) -> list[bytes]:
    return (bundle / name).read_bytes().splitlines(keepends=True)


def set_lines(bundle: Path, name: str, lines: list[bytes]) -> None:
    (bundle / name).write_bytes(b"".join(lines))


def edit_line(bundle: Path, name: str, index: int, change: Callable[[dict], None]) -> None:
    """Change one JSON line in place (index modulo the line count)."""
    lines = raw_lines(bundle, name)
    index %= len(lines)
    obj = json.loads(lines[index])
    change(obj)
    lines[index] = (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    set_lines(bundle, name, lines)


def edit_entry(bundle: Path, name: str, change: Callable[[dict], None]) -> None:
    data = manifest(bundle)
    change(next(f for f in data["files"] if f["name"] == name))
    save_manifest(bundle, data)


def bundle_turn_sessions(bundle: Path) -> set[str]:
    """The sessions whose turns the bundle's memory-backup file holds, read without the validator."""
    try:
        name = file_of(bundle, "memory")
        lines = (bundle / name).read_bytes().splitlines()
    except Exception:  # a bundle too broken to say: it must then have been refused
        return set()
    held = set()
    for line in lines:
        try:
            held.add(json.loads(line)["metadata"]["sessionId"])
        except Exception:
            pass
    return held


# --- what a restore may do to a store -----------------------------------------------------------


def fingerprint(path: Path) -> dict[str, list]:
    """Every table's rows, sorted: what "unchanged" means for a store."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
            ).fetchall()
        ]
        return {t: con.execute(f'SELECT * FROM "{t}" ORDER BY ALL').fetchall() for t in sorted(tables)}
    finally:
        con.close()


def rows_outside(path: Path, sessions: set[str]) -> dict[str, list]:
    """Every table's rows that belong to none of these sessions (all rows of a table without a
    session column): what a replace of these sessions must leave exactly as it was."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        columns: dict[str, set[str]] = {}
        for table, column in con.execute(
            """SELECT c.table_name, c.column_name FROM information_schema.columns c
               JOIN information_schema.tables t USING (table_schema, table_name) WHERE t.table_type = 'BASE TABLE'"""
        ).fetchall():
            columns.setdefault(table, set()).add(column)
        out = {}
        for table, names in sorted(columns.items()):
            column = SESSION_COLUMN.get(table, "session_id")
            if column in names:
                sql = f'SELECT * FROM "{table}" WHERE "{column}" IS NULL OR "{column}" NOT IN (SELECT unnest(?::VARCHAR[])) ORDER BY ALL'
                out[table] = con.execute(sql, [sorted(sessions)]).fetchall()
            else:
                out[table] = con.execute(f'SELECT * FROM "{table}" ORDER BY ALL').fetchall()
        return out
    finally:
        con.close()


def live_sessions(path: Path) -> set[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT session_id FROM sessions").fetchall()}
    finally:
        con.close()


@dataclass(frozen=True)
class Before:
    """A store before a restore: every row, its sessions, and the rows of the sessions the bundle does not hold."""

    tables: dict[str, list]
    sessions: set[str]
    outside: dict[str, list]


def before_restore(path: Path, held: set[str]) -> Before:
    return Before(fingerprint(path), live_sessions(path), rows_outside(path, held))


def check_accepted(path: Path, before: Before, held: set[str], whole: bool, mode: str) -> None:
    """An accepted restore: a replace leaves the store holding the bundle's sessions, and no row of
    another session changed; a merge lost nothing."""
    after_sessions = live_sessions(path)
    if mode == "replace" and whole:
        assert after_sessions == held
    elif mode == "replace":
        assert after_sessions == before.sessions | held
        assert rows_outside(path, held) == before.outside
    else:
        assert after_sessions >= before.sessions
        after = fingerprint(path)
        for table, rows in before.tables.items():
            if table != "sessions":  # recomputed from the turns
                assert set(map(repr, rows)) <= set(map(repr, after[table])), table


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


def _manifest_edit(change: Callable[[dict], None]) -> Callable[[Path, Path], None]:
    def apply(bundle: Path, outside: Path) -> None:
        data = manifest(bundle)
        change(data)
        save_manifest(bundle, data)

    return apply


def _entry_edit(kind: str, change: Callable[[dict], None], table: str | None = None) -> Callable[[Path, Path], None]:
    return lambda bundle, outside: edit_entry(bundle, file_of(bundle, kind, table), change)


def _line_edit(
    kind: str, change: Callable[[dict], None], table: str | None = None, index: int = 0
) -> Callable[[Path, Path], None]:
    return lambda bundle, outside: edit_line(bundle, file_of(bundle, kind, table), index, change)


def _raw_edit(
    kind: str, change: Callable[[list[bytes]], list[bytes]], table: str | None = None
) -> Callable[[Path, Path], None]:
    def apply(bundle: Path, outside: Path) -> None:
        name = file_of(bundle, kind, table)
        set_lines(bundle, name, change(raw_lines(bundle, name)))

    return apply


def _digest_only(apply: Callable[[Path, Path], None]) -> Callable[[Path, Path], None]:
    """An edit, then only the manifest's own sha256 made to fit (the files' entries stay as edited)."""

    def sealed(bundle: Path, outside: Path) -> None:
        apply(bundle, outside)
        save_manifest(bundle, manifest(bundle), digest=True)

    return sealed


def _set(path: str, value) -> Callable[[dict], None]:
    """Set a dotted key of a line (`metadata.sessionId`)."""
    *parents, last = path.split(".")

    def change(obj: dict) -> None:
        for key in parents:
            obj = obj[key]
        obj[last] = value

    return change


def _drop(key: str) -> Callable[[dict], None]:
    return lambda obj: obj.pop(key)


def _add_sessions(data: dict) -> None:
    data["sessions"] = sorted(data["sessions"] + LIVE_ONLY)


def _symlink_member(kind: str, table: str | None = None) -> Callable[[Path, Path], None]:
    """The member replaced by a link to a byte-identical copy outside the bundle."""

    def apply(bundle: Path, outside: Path) -> None:
        member = bundle / file_of(bundle, kind, table)
        copy = outside / member.name
        copy.write_bytes(member.read_bytes())
        member.unlink()
        member.symlink_to(copy)

    return apply


def _symlink_tables(bundle: Path, outside: Path) -> None:
    copy = outside / "tables"
    os.rename(bundle / "tables", copy)
    (bundle / "tables").symlink_to(copy, target_is_directory=True)


def _symlink_manifest(bundle: Path, outside: Path) -> None:
    copy = outside / MANIFEST
    os.rename(bundle / MANIFEST, copy)
    (bundle / MANIFEST).symlink_to(copy)


def _fifo_member(bundle: Path, outside: Path) -> None:
    member = bundle / file_of(bundle, "graph")
    member.unlink()
    os.mkfifo(member)


def _dir_member(bundle: Path, outside: Path) -> None:
    member = bundle / file_of(bundle, "summaries")
    member.unlink()
    member.mkdir()


def _rename_member(bundle: Path, outside: Path) -> None:
    member = bundle / file_of(bundle, "memory")
    member.rename(member.with_name("memory-backup-renamed.jsonl"))


def _delete_member(kind: str, table: str | None = None) -> Callable[[Path, Path], None]:
    return lambda bundle, outside: (bundle / file_of(bundle, kind, table)).unlink()


def _extra_file(name: str) -> Callable[[Path, Path], None]:
    return lambda bundle, outside: (bundle / name).write_text('{"id": "x"}\n')


def _duplicate_entry(bundle: Path, outside: Path) -> None:
    data = manifest(bundle)
    data["files"].append(dict(next(f for f in data["files"] if f["kind"] == "graph")))
    save_manifest(bundle, data)


def _second_table_entry(bundle: Path, outside: Path) -> None:
    data = manifest(bundle)
    entry = dict(next(f for f in data["files"] if f["table"] == "backfill_state"))
    (bundle / "tables" / "backfill_state_2.jsonl").write_bytes((bundle / entry["name"]).read_bytes())
    data["files"].append({**entry, "name": "tables/backfill_state_2.jsonl"})
    save_manifest(bundle, data)


def _second_memory_entry(bundle: Path, outside: Path) -> None:
    data = manifest(bundle)
    entry = dict(next(f for f in data["files"] if f["kind"] == "memory"))
    (bundle / "memory-backup-second.jsonl").write_bytes((bundle / entry["name"]).read_bytes())
    data["files"].append({**entry, "name": "memory-backup-second.jsonl"})
    save_manifest(bundle, data)


def _drop_memory_entry(bundle: Path, outside: Path) -> None:
    data = manifest(bundle)
    data["files"] = [f for f in data["files"] if f["kind"] != "memory"]
    save_manifest(bundle, data)


def _drop_table(table: str) -> Callable[[Path, Path], None]:
    def apply(bundle: Path, outside: Path) -> None:
        data = manifest(bundle)
        (bundle / file_of(bundle, "table", table)).unlink()
        data["files"] = [f for f in data["files"] if f["table"] != table]
        save_manifest(bundle, data)

    return apply


def _add_sessionless_table(bundle: Path, outside: Path) -> None:
    """A rejects file (no session column) put into a bundle of some sessions."""
    data = manifest(bundle)
    (bundle / "tables" / "rejects.jsonl").write_text(
        '{"source_file":"f","line_no":1,"reason":"r","excerpt":null,"rejected_at":"2026-01-01T00:00:00+00:00"}\n'
    )
    columns = [["source_file", "VARCHAR"], ["line_no", "INTEGER"], ["reason", "VARCHAR"], ["excerpt", "VARCHAR"],
               ["rejected_at", "TIMESTAMP WITH TIME ZONE"]]  # fmt: skip
    data["files"].append(
        {
            "name": "tables/rejects.jsonl",
            "kind": "table",
            "table": "rejects",
            "rows": 1,
            "sha256": "0" * 64,
            "columns": columns,
        }
    )
    save_manifest(bundle, data)


def _rename_column(bundle: Path, outside: Path) -> None:
    name = file_of(bundle, "table", "backfill_state")
    edit_entry(bundle, name, lambda e: e["columns"].__setitem__(1, ["backoff_until", e["columns"][1][1]]))
    lines = [json.loads(line) for line in raw_lines(bundle, name)]
    for obj in lines:
        obj["backoff_until"] = obj.pop("backoff_until_ms")
    set_lines(bundle, name, [(json.dumps(o) + "\n").encode() for o in lines])


def _column_type(table: str, column: str, kind: str) -> Callable[[Path, Path], None]:
    def change(entry: dict) -> None:
        entry["columns"] = [[c, kind if c == column else t] for c, t in entry["columns"]]

    return _entry_edit("table", change, table)


def _rows_off_by_one(bundle: Path, outside: Path) -> None:
    data = manifest(bundle)
    next(f for f in data["files"] if f["kind"] == "memory")["rows"] += 1
    save_manifest(bundle, data, digest=True)


def _node_after_edge(lines: list[bytes]) -> list[bytes]:
    return [*lines, b'{"type":"edge","data":{"id":"a->b:X","source":"a","target":"b","type":"X"}}\n', lines[0]]


def _huge_manifest(bundle: Path, outside: Path) -> None:
    with (bundle / MANIFEST).open("r+b") as handle:
        handle.truncate(archive_read.MAX_MANIFEST_BYTES + 1)


def _huge_line(lines: list[bytes]) -> list[bytes]:
    obj = json.loads(lines[0])
    obj["document"] = "x" * 10_000
    return [(json.dumps(obj) + "\n").encode(), *lines[1:]]


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
