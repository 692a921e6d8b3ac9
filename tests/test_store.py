"""The store's one way in (`open_store`, which the resource, the CLI, the MCP server and the run
coordinator use) migrates a file once per process: a sensor tick, a check or a command that only
reads does not take DuckDB's single writer for a migration each time."""

from __future__ import annotations

import subprocess
import sys
import threading

import duckdb
import pytest

import resources.store.migrations as migrations
from resources.bindings import DigestStoreResource
from resources.store import DigestStore, StoreFile, open_store

# Another process reading the file: it holds DuckDB's shared lock, so no process can write.
HOLD_READ_LOCK = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


@pytest.fixture
def reader():
    """Start a process holding a read-only connection to a file; stopped at the end."""
    started = []

    def hold(path):
        process = subprocess.Popen(
            [sys.executable, "-c", HOLD_READ_LOCK, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        started.append(process)
        assert process.stdout.readline().strip() == "held"

    yield hold
    for process in started:
        process.stdin.close()
        process.wait(timeout=30)


def test_the_store_resource_migrates_a_file_once_per_process(tmp_path, monkeypatch, reader):
    path = tmp_path / "digest.duckdb"
    resource = DigestStoreResource(db_path=str(path), inbox=str(tmp_path / "inbox"))
    resource.open()  # migrates: the tables are there
    assert DigestStore(path).reports.status()["sessions"] == 0

    reader(path)
    with pytest.raises(duckdb.IOException, match="(?i)could not set lock"):
        DigestStore(StoreFile(path, lock_wait_s=1.0)).migrate()  # a migration needs the writer, which the reader denies
    opened = []
    monkeypatch.setattr(duckdb, "connect", lambda *args, **kwargs: opened.append(args))
    resource.open()  # no migration again: returns at once, without opening the file
    assert opened == []


def test_every_door_to_the_store_migrates_it_once_per_process(tmp_path, monkeypatch):
    migrated = []
    real = migrations.migrate
    monkeypatch.setattr(migrations, "migrate", lambda file: (migrated.append(file.read_only), real(file)))
    path = tmp_path / "digest.duckdb"
    resource = DigestStoreResource(db_path=str(path), inbox=str(tmp_path / "inbox"))

    open_store(path)  # a CLI command's
    resource.open()  # then the run it launches, in the same process
    open_store(path, read_only=True)  # `status`, `show`, the MCP server
    assert migrated == [False]  # once, by a writer


def test_a_read_only_open_of_a_current_store_writes_nothing(tmp_path, reader):
    path = tmp_path / "digest.duckdb"
    open_store(path)
    migrations._current.clear()  # as another process would start
    reader(path)  # DuckDB's shared lock: no process can write now

    store = open_store(path, read_only=True, lock_wait_s=1.0)
    assert store.file.read_only and store.reports.status()["sessions"] == 0
    migrations._current.clear()
    with pytest.raises(duckdb.IOException, match="(?i)could not set lock"):
        open_store(path, lock_wait_s=1.0)  # a writing open migrates, which needs the writer


def test_a_read_only_open_of_a_missing_store_makes_it_first(tmp_path):
    path = tmp_path / "digest.duckdb"
    store = open_store(path, read_only=True)
    assert store.file.read_only and store.reports.status()["pending_summaries"] == 0


def test_a_store_file_deleted_since_is_migrated_again(tmp_path):
    path = tmp_path / "digest.duckdb"
    resource = DigestStoreResource(db_path=str(path), inbox=str(tmp_path / "inbox"))
    resource.open()
    path.unlink()
    path.with_name(path.name + ".wal").unlink(missing_ok=True)

    assert resource.open().reports.status()["pending_summaries"] == 0  # the tables are there again


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """The paths this process opens with duckdb.connect from here on."""
    paths, real = [], duckdb.connect

    def connect(path, *args, **kwargs):
        paths.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(duckdb, "connect", connect)
    return paths


def test_a_held_scope_opens_the_file_once_and_a_failed_transaction_leaves_it_usable(store, opened):
    with store.file.held():
        store.summaries.claim_summary_lease("s1", "run-1", 0, 60)
        with pytest.raises(duckdb.ConstraintException), store.file.transaction() as con:
            con.execute("INSERT INTO summary_leases VALUES ('s2', 'run-1', 1)")
            con.execute("INSERT INTO summary_leases VALUES ('s2', 'run-2', 1)")  # the key twice
        with store.file.transaction() as outer:
            outer.execute("INSERT INTO summary_leases VALUES ('s3', 'run-1', 1)")
            with store.file.transaction() as inner:  # joins the outer one: DuckDB nests none
                inner.execute("INSERT INTO summary_leases VALUES ('s4', 'run-1', 1)")
        with store.file.held():  # the outer scope's connection
            leases = store.query("SELECT session_id FROM summary_leases ORDER BY 1")["session_id"].tolist()
    assert leases == ["s1", "s3", "s4"]  # the failed one rolled back, the nested one committed with its outer
    assert len(opened) == 1
    store.summaries.release_summary_lease("s1", "run-1")  # outside the scope: a connection of its own
    assert len(opened) == 2


def test_released_lets_the_held_connection_go_and_another_thread_opens_its_own(store, opened):
    seen = []
    with store.file.held():
        store.summaries.summary_row("s1")
        with store.file.released():
            worker = threading.Thread(target=lambda: seen.append(store.summaries.summary_row("s1")))
            worker.start()
            worker.join()
        store.summaries.summary_row("s1")  # opened again after the call
        with store.file.transaction(), pytest.raises(RuntimeError, match="across a model call"), store.file.released():
            pass
        store.summaries.summary_row("s1")  # still the held connection, its transaction ended
    assert seen == [None] and len(opened) == 3
