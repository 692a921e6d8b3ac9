"""Reading and editing an archive bundle, for the restore tests: the edits the hostile bundles of
tests/hostile_bundles.py are made with, and the checks of what a restore may do to a store.

`reseal` recomputes every file's sha256 and line count and the manifest's own sha256, as someone
who knows the format would: a resealed edit gets past the checksums, so the deeper checks are tried."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
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


# --- the edits of the fixed list (tests/hostile_bundles.py) -----------------------------------


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
