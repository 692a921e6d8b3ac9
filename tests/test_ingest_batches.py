"""An ingest's batches and holds: rows in batches, connections held and let go, the store's size across
holds, and the reader running ahead of the writer."""

from __future__ import annotations

import random
import struct

import duckdb
import pytest

import digest.ingest as ingest_module
import tests.test_ingest
from digest.ingest import ingest_paths
from resources.store import DigestStore
from resources.store.connection import ROW_GROUP_ROWS, StoreFile
from tests.test_ingest import memory_row, rows, turns_by_id, write_jsonl

db = tests.test_ingest.db  # the store fixture of tests/test_ingest.py: pytest finds it here by this name


# --- batching -------------------------------------------------------------------------------


class CountingSink:
    """The real store's ingest writes, with a count of the write calls (to prove the batches really
    were small)."""

    def __init__(self, ingest):
        self.ingest = ingest
        self.turn_batches: list[int] = []

    def write_turns(self, rows):
        if rows:
            self.turn_batches.append(len(rows))
        return self.ingest.write_turns(rows)

    def __getattr__(self, name):
        return getattr(self.ingest, name)


def test_more_lines_than_a_batch_ingest_every_row_exactly_once(db, tmp_path, monkeypatch):
    monkeypatch.setattr(ingest_module, "BATCH_ROWS", 3)
    lines = []
    for i in range(11):
        # s-early's turns all sit in the first batch: it must still get its sessions row.
        session = "s-early" if i < 3 else "s-batch" if i % 2 else "s-other"
        lines.append(memory_row(f"t{i:02d}", session, 1_000 + i, with_embedding=i < 3))
        if i in (4, 8):
            lines.append("{broken")
    # The same id again, in a later batch: one row, the later line's content; line 2 is superseded.
    lines.append(memory_row("t01", "s-early", 1_001, document="t01 again"))
    path = write_jsonl(tmp_path / "memory-backup-batches.jsonl", lines)
    sink = CountingSink(db.ingest)
    monkeypatch.setattr(db, "ingest", sink)

    report = ingest_paths([path], db)

    assert len(sink.turn_batches) >= 4 and max(sink.turn_batches) <= 3
    counts = rows(db, "SELECT count(*) AS n, count(DISTINCT id) AS d FROM turns")[0]
    assert counts == {"n": 11, "d": 11}
    assert turns_by_id(db)["t01"]["document"] == "t01 again"
    assert turns_by_id(db)["t01"]["source_line"] == 14
    reasons = {r["line_no"]: r["reason"] for r in rows(db, "SELECT line_no, reason FROM rejects")}
    assert sorted(reasons) == [2, 6, 11]
    assert reasons[2].startswith("superseded:") and "line 14" in reasons[2]
    sessions = {r["session_id"]: r["turn_count"] for r in rows(db, "SELECT * FROM sessions")}
    assert sessions == {"s-early": 3, "s-batch": 4, "s-other": 4}
    assert (report.files[0].rows, report.files[0].rejects, report.files[0].superseded) == (11, 2, 1)
    assert report.turns == 11


@pytest.mark.parametrize("hold_bytes, opens", [(1 << 30, 1), (1, 4)])
def test_a_files_batches_share_one_connection_until_the_hold_is_spent(db, tmp_path, monkeypatch, hold_bytes, opens):
    """Each open of the file while writing is a close and a checkpoint later, which rewrites the
    last row group: one connection for the file's batches, let go every HOLD_BYTES of lines."""
    import duckdb

    monkeypatch.setattr(ingest_module, "BATCH_ROWS", 3)
    monkeypatch.setattr(ingest_module, "HOLD_BYTES", hold_bytes)
    path = write_jsonl(
        tmp_path / "memory-backup-hold.jsonl", [memory_row(f"t{i:02d}", "s", 1_000 + i) for i in range(12)]
    )
    db.migrate()
    connect, counted = duckdb.connect, []
    monkeypatch.setattr(duckdb, "connect", lambda *a, **k: counted.append(a) or connect(*a, **k))

    report = ingest_paths([path], db)

    # The file's opens, one for the manifest's rows of the files before, one for reading the
    # sessions back after it, and one for the file's manifest row when its last batch let go.
    assert len(counted) == opens + 2 + (hold_bytes == 1)
    assert report.turns == 12 and rows(db, "SELECT count(*) AS n FROM turns")[0]["n"] == 12


@pytest.mark.parametrize("hold_seconds, opens", [(3600.0, 1), (0.0, 4)])
def test_a_folders_files_share_one_connection_until_it_is_held_too_long(db, tmp_path, monkeypatch, hold_seconds, opens):
    """A connection a file paid DuckDB's attach and a checkpoint for each file of a folder of many
    small logs; the one connection is let go between files once held HOLD_SECONDS, so that other
    processes write in between."""
    import duckdb

    monkeypatch.setattr(ingest_module, "HOLD_SECONDS", hold_seconds)
    for i in range(4):
        write_jsonl(tmp_path / "in" / f"memory-backup-{i}.jsonl", [memory_row(f"t{i}", f"s{i}", 1_000 + i)])
    db.migrate()
    connect, counted = duckdb.connect, []
    monkeypatch.setattr(duckdb, "connect", lambda *a, **k: counted.append(a) or connect(*a, **k))

    report = ingest_paths([tmp_path / "in"], db)

    # The files' opens, one for the manifest's rows of the files before and one for reading the
    # sessions back after them.
    assert len(counted) == opens + 2
    assert len(report.files) == 4 and rows(db, "SELECT count(*) AS n FROM sessions")[0]["n"] == 4


# --- the store's size across holds ----------------------------------------------------------


def float32_rows(first: int, count: int, dimensions: int, seed: int) -> list[dict]:
    """Memory rows with float32-origin vectors (kept as FLOAT[]), ten turns a session."""
    rng = random.Random(seed)
    return [
        {
            "id": f"t{i:05d}",
            "embedding": [struct.unpack("f", struct.pack("f", rng.uniform(-1, 1)))[0] for _ in range(dimensions)],
            "metadata": {"sessionId": f"s{i // 10}", "timestamp": i, "type": "agent-interaction", "prompt": "p",
                         "thought": "t", "response": "r"},
        }
        for i in range(first, first + count)
    ]  # fmt: skip


def stored_vectors(db: DigestStore) -> dict[str, list[float]]:
    return {r["id"]: r["embedding_f32"] for r in rows(db, "SELECT id, embedding_f32 FROM turns")}


def test_a_store_written_in_many_holds_keeps_no_stale_copies_of_its_vectors(db, tmp_path, monkeypatch):
    """Each hold ends in a checkpoint, which rewrites the turns' last, partly filled row group and
    frees the old copy's blocks: with DuckDB's 122,880-row groups each hold rewrote every turn so far
    (BENCHMARKS §3.2), and here half the file was free blocks (22 of 47; 10 of 38 now)."""
    dimensions, turns = 256, 5_000
    monkeypatch.setattr(ingest_module, "BATCH_ROWS", 500)
    monkeypatch.setattr(ingest_module, "HOLD_BYTES", 1)  # every batch its own hold, and a checkpoint
    written = float32_rows(0, turns, dimensions, seed=5)
    report = ingest_paths([write_jsonl(tmp_path / "memory-backup-holds.jsonl", written)], db)

    assert report.turns == turns and report.vectors == turns
    assert stored_vectors(db) == {r["id"]: r["embedding"] for r in written}
    (size,) = rows(
        db,
        "SELECT used_blocks, free_blocks FROM pragma_database_size() WHERE database_name = current_database()",
    )
    assert size["free_blocks"] <= size["used_blocks"] / 2
    largest = rows(db, "SELECT max(count) AS n FROM pragma_storage_info('turns') WHERE column_name = 'id'")
    assert largest[0]["n"] <= ROW_GROUP_ROWS


def test_a_store_written_with_duckdbs_default_row_groups_takes_more_turns_exactly(db, tmp_path, monkeypatch):
    """A store from before ROW_GROUP_ROWS (opened by path: 122,880-row groups) is used as it is:
    the turns it holds stay, one updated by a later line, and the new ones come in beside them."""
    dimensions = 64
    first, second = float32_rows(0, 3_000, dimensions, seed=1), float32_rows(2_999, 2_000, dimensions, seed=2)
    with monkeypatch.context() as before:
        before.setattr(
            StoreFile, "_attach", lambda self, read_only: duckdb.connect(str(self.path), read_only=read_only)
        )
        ingest_paths([write_jsonl(tmp_path / "memory-backup-before.jsonl", first)], db)
    assert (
        rows(db, "SELECT max(count) AS n FROM pragma_storage_info('turns') WHERE column_name = 'id'")[0]["n"] == 3_000
    )

    ingest_paths([write_jsonl(tmp_path / "memory-backup-after.jsonl", second)], db)

    assert stored_vectors(db) == {r["id"]: r["embedding"] for r in first + second}
    assert rows(db, "SELECT count(*) AS n FROM turns")[0]["n"] == 4_999


# --- reading ahead of the writes ------------------------------------------------------------


def test_the_reader_runs_at_most_one_batch_ahead_of_the_writer_and_hands_over_its_error():
    finished = 0
    produced = []

    def batches():
        for i in range(6):
            # Two batches at most: this one, and the one being written (batch i - 1).
            assert finished >= i - 1
            produced.append(i)
            yield i
        raise OSError("the disk went away")

    written = []
    with pytest.raises(OSError, match="the disk went away"):
        for batch in ingest_module._read_ahead(batches()):
            written.append(batch)
            finished += 1
    assert written == produced == list(range(6))


def test_a_failed_write_stops_the_reader():
    produced = []

    def batches():
        for i in range(100):
            produced.append(i)
            yield i

    with pytest.raises(RuntimeError, match="write failed"):
        for batch in ingest_module._read_ahead(batches()):
            if batch == 2:
                raise RuntimeError("write failed")
    # The reader is stopped (joined) by then, having read at most one batch past the failed one.
    assert produced in ([0, 1, 2], [0, 1, 2, 3])
