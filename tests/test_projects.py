"""A project per session (issue 35): `project` and `git_branch` from the turn rows that carry them,
`source_path` from the latest turn's file, none of them in the input revision; `status` and
`plan` narrowed by `--project` (a whole path or its last components)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.cli import main
from digest.friction_report.render import project_section
from digest.ingest import ingest_paths
from digest.projects import project_matches
from resources.store import DigestStore


@pytest.mark.parametrize(
    ("wanted", "matches"),
    [
        ("app", True), ("src/app", True), ("/home/ada/src/app", True), ("/home/ada/src/app/", True),
        ("ada/src/app", True), ("pp", False), ("/src/app", False), ("src", False), ("", False), ("/", False),
    ],
)  # fmt: skip
def test_a_project_is_named_by_its_whole_path_or_its_last_components(wanted, matches):
    assert project_matches("/home/ada/src/app", wanted) is matches


def test_windows_paths_match_by_their_components():
    assert project_matches("C:\\Users\\ada\\app", "app")
    assert project_matches("C:\\Users\\ada\\app", "C:/Users/ada/app")
    assert not project_matches(None, "app")


def _log(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _turn(i: int, session: str, **extra) -> dict:
    return {"id": f"{session}-{i}", "session_id": session, "timestamp": 1_760_000_000_000 + i * 1000,
            "prompt": f"prompt {i}", "response": "done", **extra}  # fmt: skip


def test_a_session_has_its_latest_turns_project_branch_and_file_and_the_revision_ignores_them(store, tmp_path):
    bare = _log(tmp_path / "bare.jsonl", [_turn(1, "s"), _turn(2, "s"), _turn(3, "s")])
    ingest_paths([bare], store)
    [before] = store.sessions.session_rows(["s"])
    assert (before["project"], before["git_branch"], before["source_path"]) == (None, None, str(bare))

    # The same turns, now saying where they ran: the latest turn that says wins; its file is the source.
    first = _log(tmp_path / "a.jsonl", [_turn(1, "s", project="/w/old", git_branch="main"), _turn(2, "s")])
    second = _log(tmp_path / "b.jsonl", [_turn(3, "s", project="/w/app")])
    ingest_paths([first, second], store)
    [after] = store.sessions.session_rows(["s"])
    assert (after["project"], after["git_branch"], after["source_path"]) == ("/w/app", "main", str(second))
    assert after["input_revision"] == before["input_revision"]
    assert store.summaries.pending_summary_keys() == ["s"]  # still the one session, not two


def test_rows_built_by_hand_with_the_keys_and_without_them(store, tmp_path):
    """The readers' contract: a row may carry `project` and `git_branch`; one without them is unknown."""
    row = {
        "id": "t1", "session_id": "s", "ts_ms": 1, "type": "agent-interaction", "prompt": "p", "thought": "",
        "response": "r", "document": "User Prompt: p\nAgent Thought: \nAgent Response: r", "document_rebuilt": True,
        "agent": "claude-code", "agent_identity": None, "model": None, "user_id": None, "amount_tool_calls": 0,
        "tools_used": None, "archived_at": None, "archived_reason": None, "source_file": "/logs/x.jsonl",
        "source_line": 1, "embedding": None,
    }  # fmt: skip
    store.ingest.write_turns([row, {**row, "id": "t2", "ts_ms": 2, "project": "/w/app", "git_branch": "feat"}])
    [session] = store.sessions.session_rows(["s"])
    assert (session["project"], session["git_branch"], session["source_path"]) == ("/w/app", "feat", "/logs/x.jsonl")


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DIGEST_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    store = DigestStore(tmp_path / "home" / "digest.duckdb")
    store.migrate()
    log = _log(
        tmp_path / "mixed.jsonl",
        [_turn(1, "a1", project="/home/ada/src/app"), _turn(2, "a2", project="/home/ada/src/app/"),
         _turn(3, "b1", project="/home/ada/src/tool", prompt="TOKEN=Zq8vN3mK1pL7x"), _turn(4, "c1")],
    )  # fmt: skip
    ingest_paths([log], store)

    def run(*argv: str) -> dict:
        main([*argv, "--json"])
        return json.loads(capsys.readouterr().out)

    return run


@pytest.mark.integration  # the CLI's command, in-process
def test_status_narrows_to_a_project_and_counts_redactions(cli):
    whole = cli("status")
    assert whole["sessions"] == 4
    assert whole["redactions"] == {"by_kind": {"env-secret": 1}, "turns": 1, "sessions": 1}
    assert whole["sessions_by_project"] == {"(unknown)": 1, "/home/ada/src/app": 1, "/home/ada/src/app/": 1,
                                            "/home/ada/src/tool": 1}  # fmt: skip
    app = cli("status", "--project", "app")
    assert (app["sessions"], app["turns"], app["pending_summaries"]) == (2, 2, 2)
    assert app["projects"] == ["/home/ada/src/app", "/home/ada/src/app/"]
    assert app["redactions"]["turns"] == 0
    tool = cli("status", "--project", "/home/ada/src/tool")
    assert (tool["sessions"], tool["redactions"]["by_kind"]) == (1, {"env-secret": 1})
    assert cli("status", "--project", "nowhere")["sessions"] == 0


@pytest.mark.integration  # the CLI's command, in-process
def test_plan_narrows_the_next_sweep_to_a_project(cli):
    everything = cli("plan")
    app = cli("plan", "--project", "src/app")
    assert everything["next_sweep"]["sessions"] == 4
    assert app["pending_in_project"] == 2
    assert sorted(s["partition"] for s in app["next_sweep"]["sessions_detail"]) == ["a1", "a2"]


def test_the_friction_reports_table_by_project(store, tmp_path):
    log = _log(
        tmp_path / "mixed.jsonl",
        [_turn(1, "a1", project="/w/app"), _turn(2, "a2", project="/w/app", prompt="TOKEN=Zq8vN3mK1pL7x"),
         _turn(3, "c1")],
    )  # fmt: skip
    ingest_paths([log], store)
    rows = store.projects.project_rows()
    assert [(r["project"], r["sessions"], r["summaries"], r["calls"], r["redacted_turns"]) for r in rows] == [
        ("/w/app", 2, 0, 0, 1), ("(unknown)", 1, 0, 0, 0),
    ]  # fmt: skip
    section = project_section(SimpleNamespace(projects=rows), max_rows=10)
    assert section.title == "By project"
    assert section.table.rows[0][:2] == ["/w/app", "2"]
