"""Every line of an ingest accounted for: rejected with its reason and line number, superseded by a later
line, or kept; bytes that are not clean UTF-8 text. Real JSONL files under tmp_path into a real DuckDB file."""

from __future__ import annotations

from pathlib import Path

import tests.test_ingest
from digest.ingest import ingest_paths
from digest.turns import canonical_order, input_revision
from tests.test_ingest import memory_row, rows, turns_by_id, write_jsonl

db = tests.test_ingest.db  # the store fixture of tests/test_ingest.py: pytest finds it here by this name


# --- rejects --------------------------------------------------------------------------------


def test_bad_lines_are_rejected_with_reason_and_line_number(db, tmp_path):
    no_id = memory_row("x", "s1", 5)
    del no_id["id"]
    no_session = memory_row("t-ns", "s1", 6)
    del no_session["metadata"]["sessionId"]
    path = write_jsonl(
        tmp_path / "memory-backup-mixed.jsonl",
        [
            memory_row("good-1", "s1", 1_000),  # 1
            '{"id": "broken", "metadata": {',  # 2
            memory_row("good-2", "s1", 2_000),  # 3
            "",  # 4: blank lines are skipped but still counted
            no_id,  # 5
            no_session,  # 6
            memory_row("t-empty", "s1", 7, prompt=""),  # 7: no document and an empty prompt
            memory_row("t-ts", "s1", [2024, 5, 1]),  # 8
            {"id": "t-meta", "metadata": "agent-interaction", "document": "text"},  # 9
            memory_row("good-3", "s2", 3_000),  # 10
            memory_row("t-ts2", "s1", {"ms": 1}, with_embedding=False),  # 11
            memory_row("t-ts3", "s1", True, with_embedding=False),  # 12
            memory_row("t-blank-id", "s1", 1, with_embedding=False) | {"id": "  "},  # 13
            memory_row("t-agent", "s1", 1, agent=42, with_embedding=False),  # 14
            "[1, 2, 3]",  # 15
        ],
    )
    report = ingest_paths([path], db)

    expected = {
        2: "json-parse",
        5: "missing-id",
        6: "missing-session-id",
        7: "empty-turn-fields",
        8: "bad-timestamp",
        9: "wrong-type",
        11: "bad-timestamp",
        12: "bad-timestamp",
        13: "missing-id",
        14: "wrong-type",
        15: "not-an-object",
    }
    stored = {r["line_no"]: r for r in rows(db, "SELECT * FROM rejects")}
    assert sorted(stored) == sorted(expected)
    for line_no, prefix in expected.items():
        assert stored[line_no]["reason"].startswith(prefix + ":"), (line_no, stored[line_no]["reason"])
        assert stored[line_no]["source_file"] == str(path.resolve())
    assert "prompt" in stored[7]["reason"]
    assert stored[2]["excerpt"].startswith('{"id": "broken"')

    assert rows(db, "SELECT id, source_line FROM turns ORDER BY id") == [
        {"id": "good-1", "source_line": 1},
        {"id": "good-2", "source_line": 3},
        {"id": "good-3", "source_line": 10},
    ]
    [file_report] = report.files
    assert (file_report.lines, file_report.rows, file_report.rejects, file_report.skipped) == (15, 3, 11, 1)
    assert report.turns == 3 and report.rejects == 11
    assert {s["session_id"]: s["turn_count"] for s in report.sessions} == {"s1": 2, "s2": 1}


def test_values_that_would_fail_the_database_insert_are_rejected_not_fatal(db, tmp_path):
    """Each of these once crashed the whole ingest (or its batch) instead of rejecting one line."""
    base = '{"id": "%s", "metadata": {"sessionId": "s1", "prompt": "p", "thought": "t", "response": "r", %s}}'
    path = write_jsonl(
        tmp_path / "memory-backup-edge.jsonl",
        [
            base % ("t-inf-string", '"timestamp": "Infinity"'),  # 1
            base % ("t-huge-ts", '"timestamp": 1e30'),  # 2
            base % ("t-nan-calls", '"timestamp": 1, "amountToolCalls": NaN'),  # 3
            base % ("t-big-calls", '"timestamp": 1, "amountToolCalls": 3000000000'),  # 4
            '{"id": "t-digits", "n": ' + "1" * 5000 + "}",  # 5
            "[" * 50_000 + "]" * 50_000,  # 6
            # JSON.stringify writes a surrogate cut in half as an escape: keep the turn, replace it.
            base % ("t-surrogate", '"timestamp": 2, "model": "m \\ud83d", "extra": "\\ud83d\\ude00"'),  # 7
            base % ("t-good", '"timestamp": 3'),  # 8
        ],
    )
    report = ingest_paths([path], db)

    reasons = {r["line_no"]: r["reason"] for r in rows(db, "SELECT line_no, reason FROM rejects")}
    assert sorted(reasons) == [1, 2, 3, 4, 5, 6]
    assert reasons[1].startswith("bad-timestamp:") and reasons[2].startswith("bad-timestamp:")
    assert reasons[3].startswith("wrong-type:") and reasons[4].startswith("wrong-type:")
    assert reasons[5].startswith("json-parse:") and reasons[6].startswith("json-parse:")
    turns = turns_by_id(db)
    assert sorted(turns) == ["t-good", "t-surrogate"]
    assert turns["t-surrogate"]["model"] == "m \ufffd"
    assert report.turns == 2


# --- every line accounted for (issue 14.7) ---------------------------------------------------


def test_a_repeated_turn_id_keeps_the_later_line_and_counts_the_earlier_as_superseded(db, tmp_path):
    first = write_jsonl(
        tmp_path / "bundle" / "memory-backup-1.jsonl",
        [
            memory_row("t1", "s1", 1, document="first"),
            memory_row("t2", "s1", 2),
            memory_row("t1", "s1", 3, document="second"),
        ],
    )
    second = write_jsonl(tmp_path / "bundle" / "memory-backup-2.jsonl", [memory_row("t2", "s2", 4, document="moved")])

    report = ingest_paths([tmp_path / "bundle"], db)

    stored = turns_by_id(db)
    assert report.turns == len(stored) == 2  # once 4, over-counting the two superseded lines
    assert (stored["t1"]["document"], stored["t1"]["source_line"]) == ("second", 3)
    assert (stored["t2"]["session_id"], stored["t2"]["source_file"]) == ("s2", str(second.resolve()))
    f1, f2 = report.files
    assert (f1.lines, f1.rows, f1.superseded, f1.rejects) == (3, 1, 2, 0)
    assert (f2.lines, f2.rows, f2.superseded) == (1, 1, 0)
    assert report.superseded == 2 and report.rejects == 0
    reasons = {(r["source_file"], r["line_no"]): r["reason"] for r in rows(db, "SELECT * FROM rejects")}
    assert reasons == {
        (
            str(first.resolve()),
            1,
        ): f"superseded: turn id 't1' comes again at line 3 of {first.resolve()}, which is kept",
        (
            str(first.resolve()),
            2,
        ): f"superseded: turn id 't2' comes again at line 1 of {second.resolve()}, which is kept",
    }
    # s1 lost t2 to s2 within the ingest: both rows count what they hold.
    assert {s["session_id"]: s["turn_count"] for s in report.sessions} == {"s1": 1, "s2": 1}


def test_a_turn_moved_to_another_session_refreshes_or_removes_the_session_it_left(db, tmp_path):
    write_jsonl(
        tmp_path / "memory-backup-1.jsonl",
        [memory_row("t1", "s1", 1), memory_row("t2", "s1", 2), memory_row("t3", "s2", 3)],
    )
    ingest_paths([tmp_path / "memory-backup-1.jsonl"], db)
    before = {r["session_id"]: r for r in rows(db, "SELECT * FROM sessions")}

    moved = write_jsonl(tmp_path / "memory-backup-2.jsonl", [memory_row("t1", "s2", 1)])
    report = ingest_paths([moved], db)

    after = {r["session_id"]: r for r in rows(db, "SELECT * FROM sessions")}
    assert (after["s1"]["turn_count"], after["s2"]["turn_count"]) == (1, 2)
    assert after["s1"]["input_revision"] != before["s1"]["input_revision"]
    assert after["s1"]["input_revision"] == input_revision(canonical_order(db.sessions.load_turns(["s1"])))
    assert report.emptied == []

    # The last turn leaves too: the empty session's row goes, rather than stay pending for ever.
    last = write_jsonl(tmp_path / "memory-backup-3.jsonl", [memory_row("t2", "s3", 2)])
    report = ingest_paths([last], db)
    assert report.emptied == ["s1"]
    assert {r["session_id"]: r["turn_count"] for r in rows(db, "SELECT * FROM sessions")} == {"s2": 2, "s3": 1}
    assert sorted(db.summaries.pending_summary_keys()) == ["s2", "s3"]


def write_raw(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_invalid_utf8_is_rejected_not_replaced(db, tmp_path):
    line = b'{"id": "t-%s", "metadata": {"sessionId": "s1", "timestamp": 1}, "document": "d"}\n'
    path = write_raw(
        tmp_path / "memory-backup-bytes.jsonl",
        (line % b"\xff") + (line % b"\xfe") + (line % "ok-é".encode()) + (line % b"\xc3"),  # \xc3 starts é, cut short
    )
    report = ingest_paths([path], db)

    # Replaced, both ids were `t-\ufffd`: one turn, the other silently overwritten.
    assert sorted(turns_by_id(db)) == ["t-ok-é"]
    got = {r["line_no"]: r for r in rows(db, "SELECT * FROM rejects")}
    assert sorted(got) == [1, 2, 4] and report.rejects == 3
    assert got[1]["reason"] == "invalid-utf8: byte 0xff at column 11 (invalid start byte)"
    assert got[4]["reason"].startswith("invalid-utf8: byte 0xc3 at column 11")
    assert got[2]["excerpt"].startswith('{"id": "t-\ufffd"')


def test_a_raw_carriage_return_does_not_split_a_line(db, tmp_path):
    good = '{"id": "%s", "metadata": {"sessionId": "s1", "timestamp": 1}, "document": "d"}'
    path = write_raw(
        tmp_path / "memory-backup-cr.jsonl",
        (
            (good % "t1")
            + "\r\n"  # 1: a CRLF file
            + '{"id": "t-cr", "metadata": {"sessionId": "s1"}, "document": "one\rtwo"}\n'  # 2: raw CR in a string
            + (good % "t3").replace(", ", ",\r ")
            + "\n"  # 3: raw CRs between tokens are JSON whitespace
            + "\r\n"  # 4: blank
            + (good % "t5")
            + "\n"  # 5
        ).encode(),
    )
    report = ingest_paths([path], db)

    assert {t["id"]: t["source_line"] for t in turns_by_id(db).values()} == {"t1": 1, "t3": 3, "t5": 5}
    [reject] = rows(db, "SELECT * FROM rejects")
    assert reject["line_no"] == 2 and reject["reason"].startswith("json-parse: Invalid control character")
    [f] = report.files
    assert (f.lines, f.rows, f.rejects, f.skipped) == (5, 3, 1, 1)


def test_a_leading_bom_does_not_lose_the_first_line(db, tmp_path):
    path = write_jsonl(tmp_path / "memory-backup-bom.jsonl", [memory_row("t1", "s1", 1), memory_row("t2", "s1", 2)])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    simple = write_raw(
        tmp_path / "harness.jsonl", b'\xef\xbb\xbf{"id": "h1", "session_id": "s2", "prompt": "p", "response": "r"}\n'
    )
    report = ingest_paths([path, simple], db)
    assert report.rejects == 0 and sorted(turns_by_id(db)) == ["h1", "t1", "t2"]


def test_ids_with_lone_surrogate_escapes_are_rejected_never_merged(db, tmp_path):
    """Issue 22, defect 7: `"t-\\ud800"` and `"t-\\udbff"` both became `t-\\ufffd`, one turn (the other
    counted superseded), and session ids merged the same way. Such a line is rejected with its reason."""
    base = (
        '{"id": "%s", "metadata": {"sessionId": "%s", "prompt": "p", "thought": "t", "response": "r", "timestamp": %d}}'
    )
    path = write_jsonl(
        tmp_path / "memory-backup-ids.jsonl",
        [
            base % ("t-\\ud800", "s1", 1),  # 1
            base % ("t-\\udbff", "s1", 2),  # 2
            base % ("t-a", "s-\\udc00", 3),  # 3
            base % ("t-b", "s-\\udfff", 4),  # 4
            base % ("t-c", "s-\\ud83d\\ude00", 5),  # 5: a whole pair is a character, kept
            base % ("t-d", "s1", 6),  # 6
        ],
    )
    report = ingest_paths([path], db)
    reasons = {r["line_no"]: r["reason"] for r in rows(db, "SELECT line_no, reason FROM rejects")}
    assert sorted(reasons) == [1, 2, 3, 4]
    assert all(reason.startswith("lone-surrogate-id:") for reason in reasons.values()), reasons
    assert "metadata.sessionId" in reasons[3] and reasons[1].startswith("lone-surrogate-id: id ")
    assert sorted(turns_by_id(db)) == ["t-c", "t-d"]
    assert report.superseded == 0
    assert sorted(s["session_id"] for s in report.sessions) == ["s-\U0001f600", "s1"]


def test_graph_and_simple_turn_ids_with_lone_surrogates_are_rejected(db, tmp_path):
    path = write_jsonl(
        tmp_path / "turns-ids.jsonl",
        [
            '{"id": "x-\\ud800", "session_id": "s1", "document": "d"}',
            '{"id": "x-\\udbff", "session_id": "s1", "document": "d"}',
            '{"id": "x-1", "session_id": "s-\\ud800", "document": "d"}',
        ],
    )
    ingest_paths([path], db)
    reasons = [r["reason"] for r in rows(db, "SELECT reason FROM rejects ORDER BY line_no")]
    assert len(reasons) == 3 and all(r.startswith("lone-surrogate-id:") for r in reasons), reasons
    assert turns_by_id(db) == {}


def test_a_reject_of_a_line_later_kept_is_cleared(db, tmp_path):
    """Issue 22, defect 6: the file's last line read half-written is rejected; the completed file is
    ingested again and the line kept, and its reject must go (and `status` not count it)."""
    base = (
        '{"id": "%s", "metadata": {"sessionId": "s1", "prompt": "p", "thought": "t", "response": "r", "timestamp": %d}}'
    )
    path = tmp_path / "memory-backup-growing.jsonl"
    whole = [base % ("t-1", 1), base % ("t-2", 2), base % ("t-\u00e9", 3)]
    cut = whole[2].encode("utf-8")
    # Cut inside the 2-byte é: invalid UTF-8; then, on another read, cut mid-JSON.
    path.write_bytes((whole[0] + "\n" + whole[1] + "\n").encode() + cut[: cut.index(b"\xc3") + 1])
    ingest_paths([path], db)
    assert [r["reason"].split(":")[0] for r in rows(db, "SELECT reason FROM rejects")] == ["invalid-utf8"]
    path.write_bytes((whole[0] + "\n" + whole[1] + "\n").encode() + cut[:40])
    ingest_paths([path], db)
    assert [r["reason"].split(":")[0] for r in rows(db, "SELECT reason FROM rejects")] == ["json-parse"]
    path.write_text("\n".join(whole) + "\n", encoding="utf-8")
    report = ingest_paths([path], db)
    assert report.rejects == 0 and sorted(turns_by_id(db)) == ["t-1", "t-2", "t-\u00e9"]
    assert rows(db, "SELECT * FROM rejects") == []
    assert db.reports.status()["rejects"] == 0
    # A reject of a line that is still bad stays; one of another file is untouched.
    other = write_jsonl(tmp_path / "memory-backup-other.jsonl", ["not json"])
    ingest_paths([path, other], db)
    assert [r["line_no"] for r in rows(db, "SELECT line_no FROM rejects")] == [1]
