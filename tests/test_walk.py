"""The folders' walk (`digest.walk`) and the incremental reads of growing files (`digest.manifest`),
through the real `ingest_paths` into a real DuckDB file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from digest.ingest import ingest_paths
from digest.walk import (
    EMPTY,
    NOT_A_LOG_CONTENT,
    NOT_A_LOG_NAME,
    SUBAGENT_META,
    SYMLINK_OUT,
    TOO_DEEP,
    harness_homes,
    walk,
    walk_order,
    watch_folders,
)
from tests.harness_homes import claude_home, claude_turn, codex_head, codex_home, codex_turn, write_lines
from tests.test_ingest import rows


@pytest.fixture
def db(store):
    return store


def _turns(db) -> dict[str, dict]:
    return {r["id"]: r for r in rows(db, "SELECT * EXCLUDE (ingested_at) FROM turns")}


def test_nested_harness_homes_are_walked_in_the_readers_order(tmp_path):
    claude = claude_home(tmp_path)
    codex = codex_home(tmp_path)
    found = walk([tmp_path / ".claude" / "projects", tmp_path / ".codex" / "sessions"])
    assert found.files == [claude["main"], claude["flat"], claude["subagent"], codex["legacy"], codex["dated"]]
    # The session file before its sub-agents' folder; the meta file beside them passed over, with its reason.
    assert found.skipped == {SUBAGENT_META: 1}
    assert found.examples[SUBAGENT_META] == [str(claude["meta"])]


def test_what_a_walk_passes_over_is_counted_with_its_reason(tmp_path):
    root = tmp_path / "logs"
    write_lines(root / "a.jsonl", claude_turn("s", 1))
    (root / "notes.txt").write_text("not a log\n")
    (root / "README.md").write_text("# Notes\n\nnot a chat history\n")
    (root / "empty.jsonl").write_text("")
    deep = root.joinpath(*[f"d{i}" for i in range(9)])
    write_lines(deep / "deep.jsonl", claude_turn("s", 2))
    outside = write_lines(tmp_path / "outside" / "secret.jsonl", claude_turn("x", 1))
    (root / "link-out.jsonl").symlink_to(outside)
    (root / "dir-out").symlink_to(outside.parent)
    (root / "link-in.jsonl").symlink_to(root / "a.jsonl")  # the same file: read once
    (root / "loop").symlink_to(root)  # a folder inside the tree: never walked through the link

    found = walk([root], max_depth=8)

    assert found.files == [root / "a.jsonl"]
    assert found.skipped == {NOT_A_LOG_NAME: 1, NOT_A_LOG_CONTENT: 1, EMPTY: 1, TOO_DEEP: 1, SYMLINK_OUT: 2}
    assert str(root / "link-out.jsonl") in found.examples[SYMLINK_OUT]
    assert found.examples[TOO_DEEP] == [str(root.joinpath(*[f"d{i}" for i in range(8)]))]
    assert "too-deep: 1" in found.summary()


def test_an_ingest_of_a_folder_reports_what_it_skipped(db, tmp_path):
    claude_home(tmp_path)
    outside = write_lines(tmp_path / "elsewhere" / "x.jsonl", claude_turn("x", 1))
    projects = tmp_path / ".claude" / "projects"
    (projects / "link.jsonl").symlink_to(outside)
    report = ingest_paths([projects], db)
    assert report.skipped == {SUBAGENT_META: 1, SYMLINK_OUT: 1}
    assert len(report.files) == 3 and report.turns == 4
    assert "x-00001-p" not in _turns(db)


def test_harness_homes_follow_their_variables(tmp_path):
    env = {"HOME": str(tmp_path)}
    assert harness_homes(env) == [tmp_path / ".claude" / "projects", tmp_path / ".codex" / "sessions"]
    moved = {**env, "CLAUDE_CONFIG_DIR": str(tmp_path / "cc"), "CODEX_HOME": str(tmp_path / "cx")}
    assert harness_homes(moved) == [tmp_path / "cc" / "projects", tmp_path / "cx" / "sessions"]
    text = os.pathsep.join(["~/.claude/projects", "${CODEX_HOME}/sessions", "$UNSET/x", " "])
    assert watch_folders(text, moved) == (tmp_path / ".claude/projects", tmp_path / "cx/sessions", Path("$UNSET/x"))


# --- incremental reads ---------------------------------------------------------------------------


def _age(path: Path, seconds: float = 60) -> None:
    """Back-date the file's mtime past the racy window, as a file written a while before its read."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns - int(seconds * 1e9)))


def _only(report, path: Path):
    (f,) = [f for f in report.files if f.path == str(path)]
    return f


def test_an_unchanged_file_is_not_read_again(db, tmp_path):
    path = write_lines(tmp_path / "s.jsonl", claude_turn("s", 1))
    _age(path)
    ingest_paths([path], db)
    again = ingest_paths([path], db)
    assert again.files == [] and again.unchanged == 1


@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_growth_reads_from_the_open_turn_and_the_store_equals_a_whole_read(db, tmp_path, harness, new_store):
    """A turn open at the old end receives more events; then a new turn starts. Each read starts at
    the open turn's first line: only it and the appended lines are parsed."""
    session = "0199a1b2-c3d4"
    turn = (lambda n, tools: claude_turn(session, n, tools)) if harness == "claude" else codex_turn
    head = [] if harness == "claude" else codex_head(session)
    first, second = turn(1, 2), turn(2, 3)
    path = write_lines(tmp_path / "rollout.jsonl", head + first + second[:3])  # turn 2 is mid-way
    first_read = ingest_paths([path], db)
    assert _only(first_read, path).lines == len(head + first) + 3
    write_lines(path, second[3:], mode="a")
    grown = _only(ingest_paths([path], db), path)
    opened = len(head + first) + 1  # the line turn 2 starts on
    assert (grown.read, grown.from_line, grown.lines) == ("appended", opened, len(second))
    write_lines(path, turn(3, 1), mode="a")
    third = _only(ingest_paths([path], db), path)
    assert (third.read, third.from_line) == ("appended", opened)  # turn 2 was still the open one
    assert third.lines == len(second) + len(turn(3, 1))
    write_lines(path, turn(4, 1), mode="a")
    fourth = _only(ingest_paths([path], db), path)
    assert fourth.from_line == opened + len(second)  # turn 3's first line

    incremental = _turns(db)
    fresh = new_store(tmp_path / "fresh.duckdb")
    ingest_paths([path], fresh)
    assert incremental == _turns(fresh) and len(incremental) == 4
    assert rows(db, "SELECT * FROM rejects") == []


def test_a_torn_last_line_is_rejected_then_read_again_once_complete(db, tmp_path):
    lines = claude_turn("s", 1) + claude_turn("s", 2)
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:30], encoding="utf-8")
    ingest_paths([path], db)
    assert [r["reason"].split(":")[0] for r in rows(db, "SELECT reason FROM rejects")] == ["json-parse"]
    with path.open("a", encoding="utf-8") as handle:
        handle.write(lines[-1][30:] + "\n")
    report = _only(ingest_paths([path], db), path)
    assert report.read == "appended" and report.rejects == 0
    assert rows(db, "SELECT * FROM rejects") == []
    assert "done" in _turns(db)["s-00002-p"]["response"]


@pytest.mark.parametrize("change", ["shrank", "changed"])
def test_a_file_that_shrank_or_changed_in_its_read_part_is_read_again_whole(db, tmp_path, change):
    lines = claude_turn("s", 1) + claude_turn("s", 2)
    path = write_lines(tmp_path / "s.jsonl", lines + ["not json"])
    ingest_paths([path], db)
    assert [r["line_no"] for r in rows(db, "SELECT line_no FROM rejects")] == [len(lines) + 1]
    if change == "shrank":
        write_lines(path, lines[:4])
    else:  # the first prompt edited in place, same size: only the hash tells
        write_lines(path, [lines[0].replace("prompt 1", "prompt X")] + lines[1:] + ["not json"])
    report = _only(ingest_paths([path], db), path)
    assert (report.read, report.from_line, report.lines) == (change, 1, 4 if change == "shrank" else len(lines) + 1)
    assert _turns(db)["s-00001-p"]["prompt"].startswith("prompt X" if change == "changed" else "prompt 1")
    # A reject past the shorter file's end no longer stands.
    assert len(rows(db, "SELECT * FROM rejects")) == (0 if change == "shrank" else 1)


def test_a_trajectory_is_read_again_whole_when_it_changes(db, tmp_path):
    path = tmp_path / "run.traj"
    doc = {
        "trajectory": [{"thought": "t", "action": "ls", "observation": "o"}],
        "history": [{"role": "user", "content": "task"}],
    }
    path.write_text(json.dumps(doc, indent=2))
    ingest_paths([path], db)
    doc["trajectory"].append({"thought": "t2", "action": "cat x", "observation": "o2"})
    path.write_text(json.dumps(doc, indent=2))
    report = _only(ingest_paths([path], db), path)
    assert report.read == "rewritten" and report.from_line == 1 and report.rows == 2


def test_a_codex_rollout_read_from_an_offset_keeps_its_session_and_turn_numbers(db, tmp_path):
    """The head's `session_meta` is not in the lines read on: the manifest keeps what the reader needs."""
    path = write_lines(tmp_path / "rollout-x.jsonl", codex_head("sess-1") + codex_turn(1) + codex_turn(2))
    ingest_paths([path], db)
    write_lines(path, codex_turn(3), mode="a")
    report = _only(ingest_paths([path], db), path)
    assert report.read == "appended" and report.from_line > 3
    assert sorted(_turns(db)) == ["sess-1:00001", "sess-1:00002", "sess-1:00003"]
    assert {t["model"] for t in _turns(db).values()} == {"gpt-5-codex"}
    state = rows(db, "SELECT resume_context FROM ingest_files")[0]["resume_context"]
    assert json.loads(state)["session_id"] == "sess-1"


def test_growth_moves_the_sessions_last_activity(db, tmp_path):
    path = write_lines(tmp_path / "s.jsonl", claude_turn("s", 1))
    ingest_paths([path], db)
    before = rows(db, "SELECT last_activity_ms FROM sessions")[0]["last_activity_ms"]
    write_lines(path, claude_turn("s", 2), mode="a")
    ingest_paths([path], db)
    after = rows(db, "SELECT last_activity_ms, turn_count FROM sessions")[0]
    assert after["turn_count"] == 2 and after["last_activity_ms"] > before


def test_a_session_whose_file_grew_waits_the_idle_window_from_the_files_last_write(db, tmp_path):
    """The churn gate: the turns are old (their prompts' times), but the file grew since its first
    read, as a long turn still running adds events: held back until the window has passed since
    the file's last write (`ingest_files.grown_ms`). A first read alone holds nothing back."""
    from resources.store.summaries import summary_gates

    def active(now_ms: int) -> bool:
        return bool(rows(db, f"SELECT active FROM ({summary_gates(now_ms, 600.0)})")[0]["active"])

    path = write_lines(tmp_path / "s.jsonl", claude_turn("s", 1))
    ingest_paths([path], db)
    now_ms = time.time_ns() // 1_000_000
    assert not active(now_ms)
    write_lines(path, claude_turn("s", 2), mode="a")
    ingest_paths([path], db)
    written_ms = path.stat().st_mtime_ns // 1_000_000
    assert rows(db, "SELECT grown_ms FROM ingest_files")[0]["grown_ms"] == written_ms
    assert active(written_ms + 599_000) and not active(written_ms + 600_000)


def test_a_file_gone_between_the_walk_and_its_read_is_counted_and_the_rest_read(db, tmp_path, monkeypatch):
    import digest.ingest as ingest_module
    from digest.walk import VANISHED, Walk

    kept = write_lines(tmp_path / "kept.jsonl", claude_turn("s", 1))
    monkeypatch.setattr(ingest_module, "walk", lambda paths: Walk(files=[tmp_path / "gone.jsonl", kept]))
    report = ingest_paths([tmp_path], db)
    assert report.skipped == {VANISHED: 1} and report.turns == 1


def test_walk_order_sorts_named_files_as_the_walk_finds_them(tmp_path):
    claude_home(tmp_path)
    codex_home(tmp_path)
    found = walk([tmp_path]).files
    assert sorted(reversed(found), key=walk_order) == found
    assert sorted(map(str, found)) != list(map(str, found))  # plain name order would not do
