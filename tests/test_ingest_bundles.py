"""Whole bundles and folders ingested: read again unchanged, a changed turn's session revision, the
sessions' rows, the files a folder holds, and the partition keys of odd session ids."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tests.test_ingest
from digest.ingest import ingest_paths
from digest.turns import canonical_order, input_revision
from resources.store import DigestStore
from tests.test_ingest import graph_node, memory_row, rows, summary_row, turns_by_id, write_jsonl

db = tests.test_ingest.db  # the store fixture of tests/test_ingest.py: pytest finds it here by this name


# --- idempotence and revisions --------------------------------------------------------------

SNAPSHOTS = {
    "turns": "SELECT * EXCLUDE (ingested_at) FROM turns ORDER BY id",
    "sessions": "SELECT * EXCLUDE (updated_at) FROM sessions ORDER BY session_id",
    "mini_summaries": "SELECT * EXCLUDE (created_at) FROM mini_summaries ORDER BY turn_id",
    "rejects": "SELECT * EXCLUDE (rejected_at) FROM rejects ORDER BY source_file, line_no",
    "imported_summaries": "SELECT * EXCLUDE (imported_at) FROM imported_summaries ORDER BY session_id",
    "kept_stamps": (
        "SELECT 'turn' AS k, id AS key, ingested_at AS at FROM turns UNION ALL "
        "SELECT 'mini', turn_id, created_at FROM mini_summaries UNION ALL "
        "SELECT 'reject', source_file || ':' || line_no, rejected_at FROM rejects UNION ALL "
        "SELECT 'summary', session_id, imported_at FROM imported_summaries ORDER BY k, key"
    ),
}


def snapshot(db: DigestStore) -> dict[str, list[dict]]:
    return {name: rows(db, sql) for name, sql in SNAPSHOTS.items()}


def write_bundle(folder: Path, *, t2_response: str = "response of t2") -> Path:
    write_jsonl(
        folder / "memory-backup-2025.jsonl",
        [
            memory_row("t1", "s1", 1_000),
            memory_row("t2", "s1", "1970-01-01T00:00:02Z", response=t2_response),
            memory_row("t3", "s2", 5_000, document="s2 first turn"),
            "{oops",
            memory_row("t4", "s2", None, prompt=""),
        ],
    )
    write_jsonl(
        folder / "graph-backup-2025.jsonl", [graph_node("t1", "s1", "mini one"), graph_node("t3", "s2", "mini three")]
    )
    write_jsonl(folder / "summaries-backup-2025.jsonl", [summary_row("s1", "summary one")])
    write_jsonl(folder / "temporal-summary-backup-2025.jsonl", ["{not even json"])
    write_jsonl(
        folder / "other-harness.jsonl",
        [
            {
                "id": "h1",
                "session_id": "s3",
                "timestamp": 9_000,
                "prompt": "p",
                "response": "r",
                "mini_summary": "h mini",
            }
        ],
    )
    return folder


def test_reingesting_the_same_bundle_changes_nothing(db, tmp_path):
    bundle = write_bundle(tmp_path / "bundle")
    first = ingest_paths([bundle], db)
    before = snapshot(db)
    assert len(before["turns"]) == 4 and len(before["sessions"]) == 3
    assert len(before["mini_summaries"]) == 3 and len(before["rejects"]) == 2
    assert len(before["imported_summaries"]) == 1

    second = ingest_paths([bundle], db)

    assert snapshot(db) == before
    # Unchanged since their read (digest/manifest.py): not read again.
    assert first.turns == 4 and first.rejects == 2
    assert second.turns == second.rejects == 0 and second.sessions == []
    # (The file skipped by design, not read, may be looked at again within 2 s of its last read.)
    assert second.unchanged + len(second.files) == 5 and sum(f.lines for f in second.files) == 0
    # Read again whole (their manifest rows dropped): the same rows, the same revisions.
    with db.file.connect() as con:
        con.execute("DELETE FROM ingest_files")
    third = ingest_paths([bundle], db)
    assert snapshot(db) == before
    assert third.turns == 4 and third.rejects == 2
    assert {s["session_id"]: s["input_revision"] for s in third.sessions} == {
        s["session_id"]: s["input_revision"] for s in first.sessions
    }


def test_a_changed_turn_changes_its_sessions_input_revision(db, tmp_path):
    bundle = write_bundle(tmp_path / "bundle")
    ingest_paths([bundle], db)
    before = {r["session_id"]: r for r in rows(db, "SELECT * FROM sessions")}

    write_bundle(bundle, t2_response="a different answer")
    ingest_paths([bundle], db)
    after = {r["session_id"]: r for r in rows(db, "SELECT * FROM sessions")}

    assert after["s1"]["input_revision"] != before["s1"]["input_revision"]
    assert after["s1"]["turn_count"] == 2
    assert after["s2"]["input_revision"] == before["s2"]["input_revision"]
    assert turns_by_id(db)["t2"]["response"] == "a different answer"
    assert "Agent Response: a different answer" in turns_by_id(db)["t2"]["document"]
    # The stored revision is the one the turns contract defines over the stored turns.
    assert after["s1"]["input_revision"] == input_revision(canonical_order(db.sessions.load_turns(["s1"])))
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", after["s1"]["input_revision"])


# --- sessions ------------------------------------------------------------------------------


def test_refresh_sessions_rows(db, tmp_path):
    path = write_jsonl(
        tmp_path / "memory-backup-sessions.jsonl",
        [
            memory_row("c2", "a,b", 3_000, document="é" * 10),  # 20 bytes, 10 characters
            memory_row("c1", "a,b", 1_000, document="abc"),
            memory_row("c3", "a,b", None, document="xyz"),
            memory_row("c4", "a,b", 2_000, document="12345"),
            memory_row("u1", "a_b", 500, document="u"),
            memory_row("d1", "a.b", 700, document="d"),
            memory_row("n1", "no-stamps", None, document="n"),
        ],
    )
    report = ingest_paths([path], db)

    sessions = {r["session_id"]: r for r in rows(db, "SELECT * FROM sessions")}
    assert set(sessions) == {"a,b", "a_b", "a.b", "no-stamps"}
    keys = {sid: r["partition_key"] for sid, r in sessions.items()}
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", k) for k in keys.values())
    assert len(set(keys.values())) == 4  # a,b / a_b / a.b sanitize alike but keep distinct keys
    assert keys["a_b"] == "a_b" and keys["no-stamps"] == "no-stamps"  # safe ids are kept as they are
    assert keys["a,b"].startswith("a_b-")

    ab = sessions["a,b"]
    assert ab["turn_count"] == 4
    assert (ab["first_activity_ms"], ab["last_activity_ms"]) == (1_000, 3_000)
    assert ab["raw_bytes"] == 20 + 3 + 3 + 5
    none = sessions["no-stamps"]
    assert none["turn_count"] == 1
    assert (none["first_activity_ms"], none["last_activity_ms"]) == (None, None)

    # The report carries the same rows, and the partition key leads back to the session.
    assert {r["session_id"]: r["partition_key"] for r in report.sessions} == keys
    assert db.sessions.session_by_partition(keys["a,b"])["session_id"] == "a,b"
    assert db.sessions.partition_keys() == sorted(keys.values())


# --- discovery ------------------------------------------------------------------------------


def test_a_folder_ingests_every_jsonl_in_it_and_in_its_sub_folders(db, tmp_path):
    bundle = write_bundle(tmp_path / "bundle")
    (bundle / "notes.txt").write_text("not a bundle file\n")
    write_jsonl(bundle / "nested" / "memory-backup-nested.jsonl", [memory_row("nested", "s9", 1)])

    report = ingest_paths([bundle], db)

    kinds = {Path(f.path).name: f.kind for f in report.files}
    assert kinds == {
        "graph-backup-2025.jsonl": "graph",
        "memory-backup-2025.jsonl": "memory",
        "memory-backup-nested.jsonl": "memory",
        "other-harness.jsonl": "turns",
        "summaries-backup-2025.jsonl": "summaries",
        "temporal-summary-backup-2025.jsonl": "temporal",
    }
    assert report.skipped == {"not-a-log-by-name": 1}  # notes.txt
    temporal = next(f for f in report.files if f.kind == "temporal")
    assert (temporal.lines, temporal.rows, temporal.rejects) == (0, 0, 0)
    assert sorted(turns_by_id(db)) == ["h1", "nested", "t1", "t2", "t3"]
    assert {r["session_id"] for r in rows(db, "SELECT session_id FROM sessions")} == {"s1", "s2", "s3", "s9"}
    assert rows(db, "SELECT count(*) AS n FROM imported_summaries")[0]["n"] == 1


def test_a_file_named_twice_is_ingested_once(db, tmp_path):
    bundle = write_bundle(tmp_path / "bundle")
    report = ingest_paths([bundle, bundle / "memory-backup-2025.jsonl", bundle], db)
    assert [Path(f.path).name for f in report.files].count("memory-backup-2025.jsonl") == 1
    # Read twice, each line superseded itself, and its turns counted twice.
    assert report.turns == 4 and report.superseded == 0 and report.rejects == 2


def test_a_missing_path_raises_and_ingests_nothing(db, tmp_path):
    good = write_jsonl(tmp_path / "memory-backup-ok.jsonl", [memory_row("t1", "s1", 1)])
    missing = tmp_path / "no-such-export"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        ingest_paths([good, missing], db)
    # Discovery fails before anything is written.
    assert rows(db, "SELECT count(*) AS n FROM turns")[0]["n"] == 0


# --- partition keys of odd session ids (issue 14.4) ------------------------------------------

ODD_SESSION_IDS = [
    "a.b", "a_b-2e7336dc8e",  # a safe id that is the hashed key of `a.b`
    "a_b-2e7336dc8e-a2f4eb30e6",  # ... and the hashed key of that one
    "a,b", "a_b", "a:b", "a/b", "a\\b", "a b", " a", "a ", "a\tb", "a\nb", "a;b", "a|b", "a=b", "%2F",
    "'q'", '"dq"', "{}", "null", "0", "-", "_", ".", "..",
    "日本語", "emoji 😀", "é", "e\u0301", "ß", "SS", "Ab", "aB", "ab", "AB",  # unicode, case only
    "-e3b0c44298",  # the hashed key of the empty id
    "-0123456789", "run-1700000000", "run_x-1700000000",
    "x" * 64, "x" * 65, "x" * 200, "x" * 200 + "y", "x" * 53 + "-0123456789", "x" * 52 + ".",
]  # fmt: skip


def test_odd_session_ids_get_distinct_dagster_safe_keys(db, tmp_path):
    from dagster import instance_for_test

    from digest.turns import partition_key

    assert partition_key("a.b") == "a_b-2e7336dc8e"
    keys = {sid: partition_key(sid) for sid in ODD_SESSION_IDS}
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", k) for k in keys.values()), keys
    assert len(set(keys.values())) == len(ODD_SESSION_IDS)
    # Safe ids keep their keys, unless some other id could hash to them.
    kept = {sid for sid, k in keys.items() if k == sid}
    assert {"a_b", "run-1700000000", "-", "_", "0", "SS", "Ab", "aB", "ab", "AB", "x" * 64} <= kept
    assert not kept & {"a_b-2e7336dc8e", "a_b-2e7336dc8e-a2f4eb30e6", "-e3b0c44298", "-0123456789", "run_x-1700000000"}

    # Through the ingest: every session gets its row (one UNIQUE clash used to abort them all) ...
    path = write_jsonl(
        tmp_path / "memory-backup-odd.jsonl",
        [memory_row(f"t{i}", sid, i, with_embedding=False) for i, sid in enumerate(ODD_SESSION_IDS)],
    )
    report = ingest_paths([path], db)
    assert report.rejects == 0 and report.turns == len(ODD_SESSION_IDS)
    stored = {r["session_id"]: r["partition_key"] for r in rows(db, "SELECT * FROM sessions")}
    assert stored == keys
    assert all(db.sessions.session_by_partition(k)["session_id"] == sid for sid, k in keys.items())
    # ... and Dagster takes every key as a partition.
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("sessions", list(keys.values()))
        assert sorted(instance.get_dynamic_partitions("sessions")) == sorted(keys.values())
