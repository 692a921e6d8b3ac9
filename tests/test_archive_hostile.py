"""Restores of intact and hostile bundles (tests/hostile_bundles.py) into copies of one live store: only
the bundle's sessions change, a refusal changes nothing and says why, from the API and from the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import build_sensor_context

from digest import archive_read
from digest.archive_read import BundleError, validate_bundle
from digest.ingest import ingest_paths
from digest.settings import load_settings
from pipelines.definitions import build_definitions
from pipelines.sensors import register_partitions, summary_sensor
from resources.store import DigestStore
from tests.bundle_edits import (
    before_restore,
    bundle_turn_sessions,
    check_accepted,
    edit_line,
    file_of,
    fingerprint,
    manifest,
    reseal,
    save_manifest,
)
from tests.bundles import write_bundle
from tests.conftest import make_turns, project_free_environ
from tests.hostile_bundles import CASES
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer
from tests.test_archive import CLI, _populated_store


@pytest.fixture(scope="module")
def restore_base(tmp_path_factory) -> dict[str, Path]:
    """A live store of four sessions, a bundle of two of them (small, third) and one of the whole
    store; then the store moves on (a new session, a changed summary). `own` wrote the bundles (it
    has their records); `foreign` is the same store without them, as another host's would be."""
    tmp = tmp_path_factory.mktemp("restore-base")
    with ModelServer(lambda received: Behaviour.reply(GOOD_SUMMARY)) as server:
        settings, store = _populated_store(tmp, server.url)
    ingest_paths([write_bundle(tmp / "third", make_turns("third", 4, minis=2))], store)
    scoped = store.archive.write_archive(tmp / "scoped", sessions=["small", "third"])
    whole = store.archive.write_archive(tmp / "whole")
    ingest_paths([write_bundle(tmp / "fresh", make_turns("fresh", 2))], store)
    store.query("UPDATE session_summaries SET title = 'moved on', created_at = now() WHERE session_id = 'small'")
    shutil.copy(store.path, tmp / "own.duckdb")
    shutil.copy(store.path, tmp / "foreign.duckdb")
    DigestStore(tmp / "foreign.duckdb").query("DELETE FROM archives")
    return {
        "own": tmp / "own.duckdb",
        "foreign": tmp / "foreign.duckdb",
        "scoped": Path(scoped["path"]),
        "whole": Path(whole["path"]),
    }


def _restore_case(restore_base, tmp_path, base: str, own_store: bool) -> tuple[Path, Path, Path]:
    """A copy of a base bundle, a folder outside it, and a copy of a store to restore into."""
    bundle, outside, db = tmp_path / "bundle", tmp_path / "outside", tmp_path / "store.duckdb"
    shutil.copytree(restore_base[base], bundle)
    outside.mkdir()
    shutil.copy(restore_base["own" if own_store else "foreign"], db)
    return bundle, outside, db


@pytest.mark.parametrize("base", ["scoped", "whole"])
@pytest.mark.parametrize("mode", ["merge", "replace"])
@pytest.mark.parametrize("own_store", [True, False])
def test_an_intact_bundle_restores_its_sessions_and_no_other(restore_base, tmp_path, base, mode, own_store):
    bundle, _, db = _restore_case(restore_base, tmp_path, base, own_store)
    held = bundle_turn_sessions(bundle)
    assert held == ({"small", "third"} if base == "scoped" else {"small", "big", "third"})
    before = before_restore(db, held)
    store = DigestStore(db)
    store.archive.restore_archive(validate_bundle(bundle), mode)
    check_accepted(db, before, held, base == "whole", mode)
    titles = dict(store.query("SELECT session_id, title FROM session_summaries").values.tolist())
    assert titles["small"] == ("moved on" if mode == "merge" else GOOD_SUMMARY["title"])
    assert ("fresh" in store.sessions.partition_keys()) == (mode == "merge" or base == "scoped")


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_hostile_bundle_is_refused_and_changes_nothing(restore_base, tmp_path, monkeypatch, case):
    bundle, outside, db = _restore_case(restore_base, tmp_path, case.base, case.own_store)
    for name, value in case.limits.items():
        monkeypatch.setattr(archive_read, name, value)
    case.apply(bundle, outside)
    if case.reseal:
        reseal(bundle)
    before = fingerprint(db)
    with pytest.raises(BundleError) as refused:
        DigestStore(db).archive.restore_archive(validate_bundle(bundle), case.mode)
    assert case.expect in str(refused.value)
    assert str(refused.value).splitlines()[0].endswith("cannot be restored, nothing was changed:")
    assert all(p.isprintable() for p in refused.value.problems)
    assert fingerprint(db) == before


def _cli_restore(home: Path, bundle: Path, mode: str = "replace") -> subprocess.CompletedProcess:
    env = {
        **project_free_environ(),
        "DIGEST_HOME": str(home),
    }
    return subprocess.run(
        CLI + ["restore", str(bundle), "--mode", mode], env=env, capture_output=True, text=True, timeout=300
    )


def _assert_refused(done: subprocess.CompletedProcess, reason: str) -> None:
    assert done.returncode != 0 and done.stdout == ""
    assert "Traceback" not in done.stderr
    # The first command on a fresh instance says how to turn Dagster's telemetry off; then the refusal.
    said = [line for line in done.stderr.splitlines() if not line.startswith("Dagster sends anonymous usage")]
    assert said[0].startswith("session-digest: bundle ") and "cannot be restored, nothing was changed:\n" in done.stderr
    assert reason in done.stderr


def test_a_replace_restore_never_deletes_sessions_the_bundle_does_not_hold(restore_base, tmp_path):
    """Issue 14.1: a bundle of two sessions whose manifest names two more live ones."""
    bundle, _, db = _restore_case(restore_base, tmp_path, "scoped", own_store=True)
    home = tmp_path / "home"
    home.mkdir()
    db = db.rename(home / "digest.duckdb")
    data = manifest(bundle)
    save_manifest(bundle, {**data, "sessions": ["big", "fresh", "small", "third"]})
    before = fingerprint(db)
    assert {"big", "fresh"} <= {r[0] for r in before["sessions"]}

    _assert_refused(_cli_restore(home, bundle), "manifest.json: its sha256 does not match its content")
    assert fingerprint(db) == before
    # Checksums recomputed too: the rows still say which sessions the bundle holds.
    reseal(bundle)
    _assert_refused(
        _cli_restore(home, bundle), "manifest.json: lists sessions the bundle holds no turns of: big, fresh"
    )
    assert fingerprint(db) == before
    # Rows of a live session written into the bundle, and resealed: the store that wrote it knows.
    save_manifest(bundle, data)
    edit_line(bundle, file_of(bundle, "memory"), 0, lambda line: line["metadata"].update(sessionId="big"))
    save_manifest(bundle, {**manifest(bundle), "sessions": ["big", "small", "third"]})
    reseal(bundle)
    _assert_refused(_cli_restore(home, bundle), "differs from the one this store wrote for archive")
    assert fingerprint(db) == before


@pytest.mark.parametrize(
    "name", ["member-symlinked-out", "row-int-a-string", "row-not-null-violated", "line-nested-too-deep"]
)
def test_a_refused_restore_from_the_cli_says_why_and_nothing_was_changed(restore_base, tmp_path, name):
    case = next(c for c in CASES if c.name == name)
    bundle, outside, db = _restore_case(restore_base, tmp_path, case.base, case.own_store)
    home = tmp_path / "home"
    home.mkdir()
    db = db.rename(home / "digest.duckdb")
    case.apply(bundle, outside)
    if case.reseal:
        reseal(bundle)
    before = fingerprint(db)
    _assert_refused(_cli_restore(home, bundle, case.mode), case.expect)
    assert fingerprint(db) == before


def test_a_restore_copies_nothing_to_a_temp_folder(restore_base, tmp_path, monkeypatch):
    """A killed restore left a copy of the bundle's turns in the system's temp folder: DuckDB now
    reads the bundle's files in place."""

    def no_temp_folder(*args, **kwargs):
        raise AssertionError("the restore made a temp folder")

    monkeypatch.setattr("tempfile.mkdtemp", no_temp_folder)
    monkeypatch.setattr("tempfile.mkstemp", no_temp_folder)
    bundle, _, db = _restore_case(restore_base, tmp_path, "whole", own_store=False)
    assert DigestStore(db).archive.restore_archive(validate_bundle(bundle), "replace")["rows"]["turns"] == 37


def test_an_archive_of_a_session_without_turns_is_not_written(restore_base, tmp_path):
    """Its bundle would name a session it holds nothing of, which a restore refuses."""
    _, _, db = _restore_case(restore_base, tmp_path, "scoped", own_store=False)
    with pytest.raises(ValueError, match="no turns for session nope"):
        DigestStore(db).archive.write_archive(tmp_path / "archives", sessions=["small", "nope"])
    assert not (tmp_path / "archives").exists()


def test_a_replace_restore_killed_after_its_commit_leaves_no_stale_partition(restore_base, tmp_path):
    """Issue 22, defect 4: SIGKILLed at the commit point (a hook, not a timing), a replace restore left
    the partitions of the sessions it removed, and nothing repaired them. The summary sensor's next
    tick deletes them, and so does the same restore run again."""
    import signal

    from dagster import DagsterInstance

    from assets.partitions import sessions_partitions

    bundle, _, db = _restore_case(restore_base, tmp_path, "whole", own_store=True)
    home = tmp_path / "home"
    home.mkdir()
    db = db.rename(home / "digest.duckdb")
    env = {
        **project_free_environ(),
        "DIGEST_HOME": str(home),
    }
    assert subprocess.run(CLI + ["status"], env=env, capture_output=True, timeout=300).returncode == 0
    store = DigestStore(db)
    instance = DagsterInstance.from_config(str(home / "dagster"))
    try:
        register_partitions(instance, store)
        assert "fresh" in instance.get_dynamic_partitions(sessions_partitions.name)
    finally:
        instance.dispose()
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal, sys; import app.cli as cli, app.store_commands as store_commands; "
            "store_commands.after_restore_commit = lambda: os.kill(os.getpid(), signal.SIGKILL); "
            "cli.main(sys.argv[1:])",
            "restore",
            str(bundle),
            "--mode",
            "replace",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert "fresh" not in store.sessions.partition_keys()  # committed: the whole bundle has no `fresh`
    settings = load_settings({**env, "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_MODEL_URL": "http://127.0.0.1:9"})
    instance = DagsterInstance.from_config(str(home / "dagster"))
    try:
        known = set(instance.get_dynamic_partitions(sessions_partitions.name))
        assert known - set(store.sessions.partition_keys()) == {"fresh"}  # what the kill left
        definitions = build_definitions(settings)
        with build_sensor_context(instance=instance, resources=definitions.resources) as context:
            result = summary_sensor(context)
        deleted = [
            key
            for request in result.dynamic_partitions_requests
            if type(request).__name__ == "DeleteDynamicPartitionsRequest"
            for key in request.partition_keys
        ]
        assert deleted == ["fresh"]
    finally:
        instance.dispose()
    # The same restore, run again, brings the partitions in line itself.
    done = subprocess.run(
        CLI + ["restore", str(bundle), "--mode", "replace", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["partitions"]["removed"] == ["fresh"]
    instance = DagsterInstance.from_config(str(home / "dagster"))
    try:
        assert set(instance.get_dynamic_partitions(sessions_partitions.name)) == set(store.sessions.partition_keys())
    finally:
        instance.dispose()
