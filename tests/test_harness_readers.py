"""The harness readers against the samples the project writes (`samples/harnesses/generate.py`):
each log through the real ingest into a real DuckDB file, a mixed folder through the CLI and the
inbox sensor, and a derived value that cannot be computed costing a turn or a score, never the run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from digest.ingest import discover, ingest_paths
from digest.mini_summaries import build_prompt
from digest.readers import file_kind
from resources.store import DigestStore
from tests.test_cli import CLI, _cli_env
from tests.test_ingest import rows

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "harnesses"
CLAUDE = "0b6c3f1e-5a2d-4c8e-9f41-7d2e8a1c5b90.jsonl"
CODEX = "rollout-2026-11-19T14-02-11-01936a4e-7c1b-7d42-9a0e-3b5f2c8d1e67.jsonl"
AIDER = ".aider.chat.history.md"
SWE_AGENT = "astropy__astropy-13033.traj"
MINI = "psf__requests-4498.traj.json"
LOGS = sorted([CLAUDE, CODEX, AIDER, SWE_AGENT, MINI])


@pytest.fixture
def db(tmp_path) -> DigestStore:
    store = DigestStore(tmp_path / "digest.duckdb")
    store.migrate()
    return store


def snapshot(db: DigestStore) -> tuple:
    return (
        rows(db, "SELECT * EXCLUDE (ingested_at) FROM turns ORDER BY id"),
        rows(db, "SELECT * EXCLUDE (updated_at) FROM sessions ORDER BY session_id"),
        rows(db, "SELECT * EXCLUDE (rejected_at) FROM rejects ORDER BY source_file, line_no"),
    )


def turns_of(db: DigestStore, agent: str) -> list[dict]:
    return rows(db, f"SELECT * FROM turns WHERE agent = '{agent}' ORDER BY session_id, id")


def test_each_sample_reads_as_its_harness_writes_it(db):
    assert [p.name for p in discover([SAMPLES])] == LOGS  # not generate.py, not README.md
    report = ingest_paths([SAMPLES], db)
    kinds = {Path(f.path).name: f.kind for f in report.files}
    assert kinds == {CLAUDE: "claude-code", CODEX: "codex", AIDER: "aider", SWE_AGENT: "trajectory", MINI: "trajectory"}
    for f in report.files:
        assert f.lines == f.rows + f.rejects + f.superseded + f.skipped + f.folded, f
        assert f.lines == len(Path(f.path).read_bytes().splitlines())
    assert report.turns == 15 and report.rejects == 1

    claude = turns_of(db, "claude-code")
    assert [t["id"] for t in claude] == ["7c0e0000-1d2b-4f5a-8c3e-a1b2c3d4e5f6", "7c0e000b-1d2b-4f5a-8c3e-a1b2c3d4e5f6"]
    first = claude[0]
    assert first["prompt"].startswith("The dev server ignores PORT") and first["source_line"] == 2
    assert first["thought"] == "Read server.py first, then check how the port is parsed."
    assert json.loads(first["tools_used"]) == ["Read", "Edit", "Bash"] and first["amount_tool_calls"] == 3
    assert first["model"] == "claude-sonnet-4-5-20250929" and first["ts_ms"] == 1794992400000
    # The 60 KB test run's output is kept whole: bounded where a prompt is built, not at ingest.
    assert "test_port_from_env[1199] PASSED" in first["document"] and len(first["document"]) > 60_000
    assert "/clear" not in claude[1]["document"]  # an isMeta line is skipped
    # ... and a mini summary's prompt of the turn holds to its bound (here the default cap's bytes).
    bound = 8192 * 3
    prompt = build_prompt(first["prompt"], first["response"], max_bytes=bound)
    assert len(prompt.encode()) <= bound and "The dev server ignores PORT" in prompt

    codex = turns_of(db, "codex")
    assert [t["prompt"] for t in codex] == [
        "Why does `make test` fail with ConnectionRefusedError on CI only?",
        "Do it.",
    ]
    assert all(t["model"] == "gpt-5-codex" for t in codex) and "environment_context" not in codex[0]["document"]
    assert codex[0]["thought"] == "**Checking the test fixture's database URL**"
    assert 'url = f\\"http://{host}:{port}\\"' in codex[0]["response"]
    [reject] = rows(db, "SELECT line_no, reason FROM rejects")
    assert reject["line_no"] == 15 and reject["reason"].startswith("json-parse:")  # the half-written last line

    aider = turns_of(db, "aider")
    assert [t["session_id"][:20] for t in aider] == ["aider-20261117162005"] * 2 + ["aider-20261118100244"]
    assert aider[1]["prompt"] == "fix the failing test\nthe level must be set before the first log call"
    # `/run` is not a turn: a tool call of the turn before it, the `> ` lines after it its output.
    assert "[tool run] python -m pytest -q tests/test_cli.py" in aider[0]["response"]
    assert all(t["model"] == "gpt-4o" for t in aider) and "> Applied edit to cli.py" in aider[0]["response"]
    assert "Aider v0.86.1" not in aider[0]["document"]  # the banner is read for the model only

    swe = turns_of(db, "swe-agent")
    assert len(swe) == 5 and "misleading exception" in swe[0]["prompt"] and swe[1]["prompt"] == ""
    assert json.loads(swe[2]["tools_used"]) == ["edit"] and swe[0]["model"] == "gpt-4o-2024-08-06"
    mini = turns_of(db, "mini-swe-agent")
    assert len(mini) == 3 and "IndexError instead of InvalidURL" in mini[0]["prompt"]
    assert "THOUGHT: Reproduce it first." in mini[0]["response"] and "string index out of range" in mini[0]["response"]
    assert [t["amount_tool_calls"] for t in mini] == [1, 1, 1] and mini[0]["model"] == "claude-sonnet-4-20250514"
    assert "helpful assistant" not in " ".join(t["document"] for t in mini)  # the system message is dropped

    sessions = rows(db, "SELECT session_id, turn_count FROM sessions ORDER BY session_id")
    assert len(sessions) == 6 and sum(s["turn_count"] for s in sessions) == 15
    before = snapshot(db)
    ingest_paths([SAMPLES], db)
    assert snapshot(db) == before


def test_logs_are_told_by_their_content_not_their_names(db, tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    for source, name in [
        (CLAUDE, "a.jsonl"),
        (CODEX, "b.jsonl"),
        (AIDER, "notes.md"),
        (SWE_AGENT, "r1.json"),
        (MINI, "r2.traj"),
    ]:
        shutil.copy(SAMPLES / source, folder / name)
    # A resumed session's log can open with many `summary` lines before its first event.
    (folder / "c.jsonl").write_text('{"type":"summary","summary":"Port","leafUuid":"u1"}\n' * 60)
    (folder / "README.md").write_text("# Logs\n\nNot a chat history.\n")
    (folder / "config.json").write_text('{"trajectory": 3}\n')  # not a trajectory: no list
    found = {p.name: file_kind(p) for p in discover([folder])}
    assert found == {
        "a.jsonl": "claude-code",
        "b.jsonl": "codex",
        "c.jsonl": "claude-code",
        "notes.md": "aider",
        "r1.json": "trajectory",
        "r2.traj": "trajectory",
    }
    # Named explicitly, a file no reader knows is one reject at its first line, the rest folded.
    (folder / "notes.txt").write_text("line one\nline two\n")
    report = ingest_paths([folder / "notes.txt", folder / "README.md", folder / "r1.json"], db)
    assert [(f.kind, f.lines, f.rejects, f.folded, f.rows) for f in report.files] == [
        ("unknown", 2, 1, 1, 0), ("unknown", 3, 1, 2, 0), ("trajectory", 66, 0, 61, 5),
    ]  # fmt: skip
    reasons = {(Path(r["source_file"]).name, r["line_no"]): r["reason"] for r in rows(db, "SELECT * FROM rejects")}
    assert reasons[("notes.txt", 1)].startswith("unknown-format:") and reasons[("README.md", 1)].startswith(
        "unknown-format:"
    )


def test_a_derived_value_that_fails_costs_its_turn_or_its_score_never_the_run(db, tmp_path, monkeypatch):
    import digest.fidelity
    import digest.readers.common

    real_key = digest.readers.common.partition_key

    def partition_key(session_id: str) -> str:
        if session_id == "cursed":
            raise IndexError("string index out of range")
        return real_key(session_id)

    def extract(text: str):
        raise IndexError("string index out of range")  # as `http://` alone once did

    monkeypatch.setattr(digest.readers.common, "partition_key", partition_key)
    monkeypatch.setattr(digest.fidelity, "extract", extract)
    path = tmp_path / "turns.jsonl"
    lines = [{"id": f"t{i}", "session_id": sid, "prompt": "see http:// and src/app.py", "response": "ok"}
             for i, sid in enumerate(["fine", "cursed", "fine"])]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = ingest_paths([path], db)
    assert report.turns == 2 and report.rejects == 1
    [reject] = rows(db, "SELECT line_no, reason FROM rejects")
    assert reject == {"line_no": 2, "reason": "underivable: IndexError: string index out of range"}
    assert rows(db, "SELECT session_id, turn_count FROM sessions") == [{"session_id": "fine", "turn_count": 2}]
    assert rows(db, "SELECT count(*) AS n FROM fidelity_terms") == [{"n": 0}]


def test_a_mixed_folder_ingests_through_the_cli_and_again_changes_nothing(tmp_path):
    folder = tmp_path / "mixed"
    shutil.copytree(SAMPLES, folder)
    (folder / "turns.jsonl").write_text(
        json.dumps({"id": "p1", "session_id": "plain", "prompt": "hi", "response": "hello"}) + "\n"
    )
    env = _cli_env(tmp_path / "home", "http://127.0.0.1:9")

    def ingest() -> dict:
        done = subprocess.run(
            CLI + ["ingest", str(folder), "--json"], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    first = ingest()
    assert (first["turns"], first["rejects"], first["new_partitions"]) == (16, 1, 7)
    store = DigestStore(tmp_path / "home" / "digest.duckdb")
    before = snapshot(store)
    again = ingest()
    # Unchanged since the first read: not read again (digest/manifest.py); the trajectories, read
    # whole, may be looked at again within 2 s of their last read, and give the same rows.
    assert again["new_partitions"] == 0 and again["files"] + again["files_unchanged"] == first["files"]
    assert snapshot(store) == before


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
