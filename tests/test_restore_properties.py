"""Property-based tests of the restore validator (hypothesis): random edits of a real bundle of a
real store are either refused, with the store unchanged row for row, or restored, with the store
holding the bundle's sessions and no row of any other session changed. Never a session lost that
the bundle does not hold.

RESTORE_PROPERTY_EXAMPLES sets the examples per run (60), for a longer soak."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from digest.archive import MANIFEST
from digest.archive_read import BundleError, validate_bundle
from resources.store import DigestStore
from tests.bundle_edits import (
    LIVE_ONLY,
    before_restore,
    bundle_turn_sessions,
    check_accepted,
    fingerprint,
    manifest,
    raw_lines,
    reseal,
    save_manifest,
    set_lines,
)
from tests.test_archive_hostile import restore_base  # noqa: F401  (the module's store and bundles)

EXAMPLES = int(os.environ.get("RESTORE_PROPERTY_EXAMPLES", "60"))
SESSIONS = ["small", "third", *LIVE_ONLY]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(SESSIONS),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=4,
)


def _members(bundle: Path) -> list[str]:
    return sorted(
        str(p.relative_to(bundle))
        for p in bundle.rglob("*")
        if p.is_file() and not p.is_symlink() and p.name != MANIFEST
    )


def _edit_manifest(bundle: Path, data: st.DataObject) -> None:
    try:
        m = manifest(bundle)
        files = m["files"]
        assert isinstance(m, dict) and isinstance(files, list) and files
    except Exception:
        return
    what = data.draw(st.sampled_from(["sessions", "entry-field", "drop-entry", "top-field"]))
    if what == "sessions":
        m["sessions"] = data.draw(
            st.one_of(
                st.none(),
                st.lists(st.sampled_from(SESSIONS), max_size=5),
                st.lists(st.sampled_from(SESSIONS), max_size=4, unique=True),
                json_values,
            )
        )
    elif what == "entry-field":
        entry = data.draw(st.sampled_from(files))
        if isinstance(entry, dict):
            key = data.draw(st.sampled_from(["name", "kind", "table", "rows", "sha256", "columns"]))
            entry[key] = data.draw(
                json_values | st.sampled_from(_members(bundle) + ["turns", "memory", "table", "../x"])
            )
    elif what == "drop-entry":
        files.remove(data.draw(st.sampled_from(files)))
    else:
        m[data.draw(st.sampled_from(["format", "version", "archive_id", "schema_version", "created_at"]))] = data.draw(
            json_values
        )
    save_manifest(bundle, m)


def _edit_line(bundle: Path, name: str, data: st.DataObject) -> None:
    lines = raw_lines(bundle, name)
    if not lines:
        return
    index = data.draw(st.integers(0, len(lines) - 1))
    try:
        obj = json.loads(lines[index])
    except ValueError:
        return
    if not isinstance(obj, dict):
        return
    target = obj["metadata"] if isinstance(obj.get("metadata"), dict) and data.draw(st.booleans()) else obj
    keys = sorted(target) + ["sessionId", "session_id", "asset_ref", "extra"]
    key = data.draw(st.sampled_from(keys))
    if data.draw(st.booleans()) and key in target:
        del target[key]
    else:
        # Often a session: rows claiming another session are the edit that could cost one.
        target[key] = data.draw(st.sampled_from(SESSIONS) | json_values)
    lines[index] = (json.dumps(obj) + "\n").encode()
    set_lines(bundle, name, lines)


def _edit_file(bundle: Path, outside: Path, data: st.DataObject) -> None:
    names = _members(bundle)
    if not names:
        return
    name = data.draw(st.sampled_from(names))
    path = bundle / name
    what = data.draw(
        st.sampled_from(["line", "line", "truncate", "append", "drop-line", "delete", "symlink", "rename", "bytes"])
    )
    if what == "line":
        _edit_line(bundle, name, data)
    elif what == "truncate":
        size = path.stat().st_size
        with path.open("r+b") as handle:
            handle.truncate(data.draw(st.integers(0, max(size - 1, 0))))
    elif what == "append":
        lines = raw_lines(bundle, name)
        extra = data.draw(
            st.sampled_from(lines)
            if lines and data.draw(st.booleans())
            else st.binary(max_size=12).map(lambda b: b + b"\n")
        )
        set_lines(bundle, name, [*lines, extra])
    elif what == "drop-line":
        lines = raw_lines(bundle, name)
        if lines:
            del lines[data.draw(st.integers(0, len(lines) - 1))]
            set_lines(bundle, name, lines)
    elif what == "delete":
        path.unlink()
    elif what == "symlink":
        copy = outside / path.name
        shutil.copy(path, copy)
        path.unlink()
        path.symlink_to(copy)
    elif what == "rename":
        path.rename(path.with_name(data.draw(st.sampled_from(["renamed.jsonl", *[Path(n).name for n in names]]))))
    else:
        raw = bytearray(path.read_bytes())
        if raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
            path.write_bytes(bytes(raw))


def _claim_session(bundle: Path, data: st.DataObject) -> None:
    """Turns moved to another session (a live one, often), and a scoped manifest's list made to
    agree: a bundle that then holds that session may replace it, and no other."""
    try:
        m = manifest(bundle)
        name = next(f["name"] for f in m["files"] if f["kind"] == "memory")
        lines = [json.loads(line) for line in raw_lines(bundle, name)]
        for obj in data.draw(st.lists(st.sampled_from(lines), min_size=1, max_size=3)):
            obj["metadata"]["sessionId"] = data.draw(st.sampled_from(SESSIONS))
    except Exception:  # an earlier edit broke what this one needs
        return
    set_lines(bundle, name, [(json.dumps(obj) + "\n").encode() for obj in lines])
    if m["sessions"] is not None:
        save_manifest(bundle, {**m, "sessions": sorted({obj["metadata"]["sessionId"] for obj in lines})})


def _add_file(bundle: Path, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(["extra.jsonl", "tables/extra.jsonl", "tables/rejects.jsonl", ".hidden"]))
    (bundle / name).write_bytes(data.draw(st.binary(max_size=30)))


@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_restore_is_refused_unchanged_or_holds_exactly_the_bundles_sessions(restore_base, tmp_path, data):  # noqa: F811
    base = data.draw(st.sampled_from(["scoped", "whole"]), label="base")
    mode = data.draw(st.sampled_from(["replace", "merge"]), label="mode")
    own_store = data.draw(st.booleans(), label="own store")
    with tempfile.TemporaryDirectory(dir=tmp_path) as work:
        bundle, outside, db = Path(work) / "bundle", Path(work) / "outside", Path(work) / "store.duckdb"
        shutil.copytree(restore_base[base], bundle)
        outside.mkdir()
        shutil.copy(restore_base["own" if own_store else "foreign"], db)
        for _ in range(data.draw(st.integers(0, 3), label="edits")):
            kind = data.draw(st.sampled_from(["manifest", "file", "file", "claim", "add"]))
            if kind == "manifest":
                _edit_manifest(bundle, data)
            elif kind == "file":
                _edit_file(bundle, outside, data)
            elif kind == "claim":
                _claim_session(bundle, data)
            else:
                _add_file(bundle, data)
        seal = data.draw(st.sampled_from(["none", "manifest", "all", "all"]), label="reseal")
        if seal == "all":
            reseal(bundle)
        elif seal == "manifest":
            try:
                save_manifest(bundle, manifest(bundle), digest=True)
            except (OSError, ValueError, RecursionError):
                pass
        held = bundle_turn_sessions(bundle)
        before = before_restore(db, held)
        try:
            valid = validate_bundle(bundle)
            DigestStore(db).archive.restore_archive(valid, mode)
        except BundleError as exc:
            event("refused")
            assert "nothing was changed" in str(exc).splitlines()[0]
            assert fingerprint(db) == before.tables
        else:
            event(f"accepted ({mode}, {'whole store' if valid.sessions is None else 'some sessions'})")
            check_accepted(db, before, held, valid.sessions is None, mode)
