"""The store resource migrates a file once per process: a sensor tick or a check that only reads
does not take DuckDB's single writer for a migration each time."""

from __future__ import annotations

import subprocess
import sys

import duckdb
import pytest

from resources.bindings import DigestStoreResource
from resources.store import DigestStore

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
    monkeypatch.setattr("resources.store.connection.LOCK_WAIT_S", 1.0)
    path = tmp_path / "digest.duckdb"
    resource = DigestStoreResource(db_path=str(path), inbox=str(tmp_path / "inbox"))
    resource.store()  # migrates: the tables are there
    assert DigestStore(path).status()["sessions"] == 0

    reader(path)
    with pytest.raises(duckdb.IOException, match="(?i)could not set lock"):
        DigestStore(path).migrate()  # a migration needs the writer, which the reader denies
    opened = []
    monkeypatch.setattr(duckdb, "connect", lambda *args, **kwargs: opened.append(args))
    resource.store()  # no migration again: returns at once, without opening the file
    assert opened == []


def test_a_store_file_deleted_since_is_migrated_again(tmp_path):
    path = tmp_path / "digest.duckdb"
    resource = DigestStoreResource(db_path=str(path), inbox=str(tmp_path / "inbox"))
    resource.store()
    path.unlink()
    path.with_name(path.name + ".wal").unlink(missing_ok=True)

    assert resource.store().status()["pending_summaries"] == 0  # the tables are there again
