"""The Claude Code reader on files in Claude Code's own layout, one fixture set per CLI version
(`tests/fixtures/harnesses/claude-code/generate.py`): sub-agents in both layouts attached to their
parent session, the `/btw` copy of the first prompt never replacing it, notices folded into their
turn, bookkeeping-only files skipped with their reason, each turn's project and branch; and a line
nested hundreds of levels deep costing that line, never the ingest (issue 36)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from digest.ingest import ingest_paths
from digest.readers import claude_code, file_kind
from digest.readers.common import MAX_NESTING
from tests.test_ingest import rows

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "harnesses" / "claude-code"
PROJECT = "-home-dev-webapp"
V1_0, V2_0, V2_1 = (FIXTURES / v / PROJECT for v in ("1.0.58", "2.0.28", "2.1.126"))
S_21 = "21a00000-0000-4000-8000-000000000003"
SUBAGENTS = V2_1 / S_21 / "subagents"
AGENT_21 = SUBAGENTS / "agent-a3f9c2e17b4d80156.jsonl"
ASIDE_21 = SUBAGENTS / "agent-aside_question-c5e5c961a7749e08.jsonl"
TRUNK_21 = V2_1 / f"{S_21}.jsonl"
FIRST_21 = "21b00000-7e1d-4c2b-9a0f-0123456789ab"


def turns(store, session: str | None = None) -> list[dict]:
    where = f"WHERE session_id = '{session}'" if session else ""
    return rows(store, f"SELECT * FROM turns {where} ORDER BY source_file, source_line")


def read_rows(path: Path) -> list[dict]:
    with path.open("rb") as handle:
        reads = list(claude_code.read(enumerate(handle, start=1), str(path)))
    return [r.row for r in reads if r.outcome == "turn"]


def test_the_fixtures_are_what_the_generator_writes(tmp_path):
    """Regenerated into a copy, the fixture sets come out byte for byte as committed."""
    copy = tmp_path / "claude-code"
    shutil.copytree(FIXTURES, copy)
    for path in copy.rglob("*.json*"):
        path.unlink()
    exec(compile((copy / "generate.py").read_text(), str(copy / "generate.py"), "exec"), {"__name__": "__main__", "__file__": str(copy / "generate.py")})  # fmt: skip
    written = sorted(p.relative_to(copy) for p in copy.rglob("*.json*"))
    assert written == sorted(p.relative_to(FIXTURES) for p in FIXTURES.rglob("*.json*"))
    assert all((copy / p).read_bytes() == (FIXTURES / p).read_bytes() for p in written)


@pytest.mark.parametrize("order", ["trunk first", "agents first"])
def test_2_1_sub_agents_are_turns_of_their_parent_session_and_replace_none_of_its(store, order):
    files = [TRUNK_21, AGENT_21, ASIDE_21]
    report = ingest_paths(files if order == "trunk first" else files[::-1], store)
    assert report.rejects == 0 and report.superseded == 0
    for f in report.files:
        assert f.lines == f.rows + f.rejects + f.superseded + f.skipped + f.folded, f
    trunk, agent, aside = (next(f for f in report.files if f.path == str(p)) for p in files)
    # The trunk's agent_progress copies of the agent's work are left to the agent's own file: read once.
    assert trunk.skip_reasons["agent_progress: read from the sub-agent's own file"] == 8
    assert aside.skip_reasons == {"replayed: a copy of an event of 21a00000-0000-4000-8000-000000000003.jsonl": 3}

    stored = {t["id"]: t for t in turns(store, S_21)}
    assert set(stored) == {
        FIRST_21,
        "21b00019-7e1d-4c2b-9a0f-0123456789ab",
        "21c00000-7e1d-4c2b-9a0f-0123456789ab@agent-a3f9c2e17b4d80156",
        "21d00002-7e1d-4c2b-9a0f-0123456789ab@agent-aside_question-c5e5c961a7749e08",
    }
    first = stored[FIRST_21]
    # The parent's first turn keeps its own prompt and calls, whatever order the files come in.
    assert first["prompt"] == "Add exponential backoff to client.py and prove it with a test."
    assert first["amount_tool_calls"] == 4 and first["source_file"] == str(TRUNK_21)
    assert "[tool result of agent-a3f9c2e17b4d80156] worker.py:12" in first["response"]
    work = stored["21c00000-7e1d-4c2b-9a0f-0123456789ab@agent-a3f9c2e17b4d80156"]
    assert work["prompt"].splitlines() == [
        "[subagent agent-a3f9c2e17b4d80156: Explore: Find other retry loops; spawned by toolu_21T]",
        "Find other retry loops.",
    ]
    assert work["amount_tool_calls"] == 3 and json.loads(work["tools_used"]) == ["Grep", "Read"]
    btw = stored["21d00002-7e1d-4c2b-9a0f-0123456789ab@agent-aside_question-c5e5c961a7749e08"]
    assert btw["prompt"].endswith("Is 5 attempts enough for the CI proxy?") and "exponential" not in btw["document"]
    assert btw["amount_tool_calls"] == 0  # the replayed call (same message.id, new uuid) is the trunk's
    [session] = rows(store, f"SELECT turn_count FROM sessions WHERE session_id = '{S_21}'")
    assert session["turn_count"] == 4 and sum(t["amount_tool_calls"] for t in stored.values()) == 8


def test_an_aside_file_read_without_its_trunk_still_cannot_replace_the_trunks_first_turn(store, tmp_path):
    """Without the trunk on disk nothing tells the copy of the first prompt apart: it is a turn of
    the agent's, under the agent's namespaced id, and the trunk read later keeps its own turn."""
    alone = tmp_path / S_21 / "subagents"
    alone.mkdir(parents=True)
    shutil.copy(ASIDE_21, alone)
    ingest_paths([alone / ASIDE_21.name], store)
    copy, question = turns(store)
    assert copy["id"] == f"{FIRST_21}@agent-aside_question-c5e5c961a7749e08"
    assert question["prompt"] == "Is 5 attempts enough for the CI proxy?"
    ingest_paths([TRUNK_21], store)
    first = next(t for t in turns(store) if t["id"] == FIRST_21)
    assert first["amount_tool_calls"] == 4 and first["prompt"].startswith("Add exponential backoff")
    assert len(turns(store)) == 4


def test_2_0_flat_agent_file_and_1_0_inline_sidechains(store):
    report = ingest_paths([V2_0 / "20a00000-0000-4000-8000-000000000002.jsonl", V2_0 / "agent-5f3c9e1a.jsonl"], store)
    assert report.rejects == 0 and report.superseded == 0
    trunk, agent = turns(store, "20a00000-0000-4000-8000-000000000002")
    assert trunk["id"] == "20b00000-7e1d-4c2b-9a0f-0123456789ab" and trunk["amount_tool_calls"] == 1
    assert "[tool result of agent-5f3c9e1a] Retries never back off." in trunk["response"]
    assert agent["id"] == "20c00000-7e1d-4c2b-9a0f-0123456789ab@agent-5f3c9e1a" and agent["amount_tool_calls"] == 2
    assert agent["prompt"] == "[subagent agent-5f3c9e1a]\nReview the retry logic in client.py."  # no meta.json then

    # 1.0: the sub-agent's events sit in the session file: the work of the turn that spawned it.
    ingest_paths([V1_0 / "10a00000-0000-4000-8000-000000000001.jsonl"], store)
    first, _ = turns(store, "10a00000-0000-4000-8000-000000000001")
    assert json.loads(first["tools_used"]) == ["Task", "Grep", "Edit"] and first["amount_tool_calls"] == 3
    assert "[subagent] Find where PORT is parsed." in first["response"]
    assert "[subagent tool result] server.py:5" in first["response"]


def test_agent_progress_carries_the_work_of_an_agent_without_a_file_of_its_own(store):
    """16 calls, 6 of the trunk's and 10 of the agent's, stored as 16 (not the trunk's 6)."""
    report = ingest_paths([V2_1 / "21a00000-0000-4000-8000-000000000004.jsonl"], store)
    [turn] = turns(store)
    assert turn["amount_tool_calls"] == 16 and report.files[0].skipped == 0
    assert "[subagent tool result] timeout=10 in mod14.py" in turn["response"]
    assert "[subagent] mod5..mod14 all pass timeout=10." in turn["response"]


def test_notices_compactions_and_commands_are_text_of_their_turn_not_turns(store):
    ingest_paths([V1_0 / "10a00000-0000-4000-8000-000000000001.jsonl", TRUNK_21], store)
    old = turns(store, "10a00000-0000-4000-8000-000000000001")
    assert [t["prompt"] for t in old] == [
        "Find where the server parses PORT and make it accept HOST too.",
        "Now add a test for HOST.",
    ]
    # The command that opened the file is the first turn's text; the turn is the prompt's (id, line).
    assert old[0]["id"] == "10b00002-7e1d-4c2b-9a0f-0123456789ab" and old[0]["source_line"] == 4
    assert old[0]["response"].startswith("<command-name>/model</command-name>")
    assert "<local-command-stdout>Set model to sonnet" in old[0]["response"]
    for notice in (
        "[Request interrupted by user for tool use]",
        "<bash-input>git diff --stat</bash-input>",
        "<bash-stdout>",
    ):
        assert notice in old[0]["response"]
    assert old[1]["response"].endswith("[Request interrupted by user]")

    new = turns(store, S_21)
    assert [t["prompt"] for t in new] == [
        "Add exponential backoff to client.py and prove it with a test.",
        "Apply the same backoff to worker.py.",
    ]
    assert new[0]["thought"].startswith("[compacted context] This session is being continued")
    assert "[system] Conversation compacted" in new[0]["response"]
    assert "<command-name>/compact</command-name>" in new[0]["response"]
    assert "<system-reminder>\nThe user opened worker.py" in new[0]["response"]
    assert "<task-notification>" in new[1]["response"]
    # A system event without text (turn_duration) adds nothing: no bare `[system]` line.
    assert all(line.strip() != "[system]" for t in old + new for line in t["response"].splitlines())


@pytest.mark.parametrize(
    ("name", "reasons"),
    [
        ("20a00000-0000-4000-8000-0000000000ff.jsonl", {"teleported-from: bookkeeping, no turn text": 1}),
        (
            "20a00000-0000-4000-8000-0000000000fe.jsonl",
            {"summary: bookkeeping, no turn text": 1, "file-history-snapshot: bookkeeping, no turn text": 1},
        ),
    ],
)
def test_a_file_of_bookkeeping_lines_only_is_skipped_with_its_reason(store, name, reasons):
    assert file_kind(V2_0 / name) == "claude-code"  # not the plain turn format, not a missing-id reject
    [report] = ingest_paths([V2_0 / name], store).files
    assert (report.rows, report.rejects, report.skipped) == (0, 0, sum(reasons.values()))
    assert report.skip_reasons == reasons


def test_each_turn_row_says_where_the_work_happened(tmp_path):
    rows_21 = read_rows(TRUNK_21)
    assert {(r["project"], r["git_branch"]) for r in rows_21} == {("/home/dev/webapp", "feature/backoff")}
    # The latest of the turn's events wins; an empty branch (not a repository) is none.
    lines = TRUNK_21.read_text().splitlines()
    moved = [json.loads(line) for line in lines]
    for event in moved[20:]:
        if "cwd" in event:
            event["cwd"], event["gitBranch"] = "/home/dev/other", ""
    path = tmp_path / TRUNK_21.name
    path.write_text("\n".join(json.dumps(e) for e in moved) + "\n")
    first, second = read_rows(path)
    assert (first["project"], first["git_branch"]) == ("/home/dev/other", "feature/backoff")
    assert (second["project"], second["git_branch"]) == ("/home/dev/other", None)


def _nested(depth: int) -> dict:
    node: dict = {"type": "text", "text": "the bottom"}
    for _ in range(depth - 1):
        node = {"type": "text", "text": node}
    return node


def _claude_line(uuid: str, kind: str, content) -> str:
    message = {"role": kind, "content": content} | ({"model": "claude-sonnet-4-5"} if kind == "assistant" else {})
    event = {"type": kind, "sessionId": "deep", "uuid": uuid, "timestamp": "2026-11-20T10:00:00Z", "message": message}
    return json.dumps(event)


def _codex_line(role: str, content) -> str:
    item = {"type": "message", "role": role, "content": content}
    return json.dumps({"timestamp": "2026-11-20T10:00:00Z", "type": "response_item", "payload": item})


def test_content_nested_hundreds_deep_is_that_lines_reject_not_the_ingests_end(store, tmp_path):
    """Issue 36: 500–985 levels raised RecursionError in the text walk, which ended the ingest."""
    depth = 900
    claude = tmp_path / "deep-claude.jsonl"
    claude.write_text(
        "\n".join(
            [
                _claude_line("u1", "user", "first prompt"),
                _claude_line("a1", "assistant", [{"type": "text", "text": "first answer"}]),
                _claude_line("a2", "assistant", [_nested(depth)]),
                _claude_line("u2", "user", "second prompt"),
                _claude_line("a3", "assistant", [{"type": "text", "text": "second answer"}]),
            ]
        )
        + "\n"  # fmt: skip
    )
    codex = tmp_path / "rollout-2026-11-20T10-00-00-deep.jsonl"
    meta = {"timestamp": "2026-11-20T10:00:00Z", "type": "session_meta", "payload": {"id": "deep-codex"}}
    text = [{"type": "input_text", "text": "a prompt"}]
    codex.write_text(
        "\n".join(
            [
                json.dumps(meta),
                _codex_line("user", text),
                _codex_line("assistant", [{"type": "output_text", "text": "an answer"}]),
                _codex_line("assistant", [_nested(depth)]),
                _codex_line("user", [{"type": "input_text", "text": "another prompt"}]),
                _codex_line("assistant", [{"type": "output_text", "text": "another answer"}]),
            ]
        )
        + "\n"  # fmt: skip
    )
    report = ingest_paths([claude, codex], store)
    assert [(f.kind, f.rows, f.rejects) for f in report.files] == [("claude-code", 2, 1), ("codex", 2, 1)]
    rejects = rows(store, "SELECT source_file, line_no, reason FROM rejects ORDER BY source_file")
    assert [(Path(r["source_file"]).name, r["line_no"]) for r in rejects] == [(claude.name, 3), (codex.name, 4)]
    assert all(r["reason"] == f"too-deep: the line's JSON nests more than {MAX_NESTING} levels" for r in rejects)
    assert [t["response"] for t in turns(store, "deep")] == ["first answer", "second answer"]


def test_a_file_of_notices_only_is_one_turn_of_them(tmp_path):
    """Nothing is lost when no prompt ever comes: the notices are one turn, at the first of them."""
    path = tmp_path / "notices.jsonl"
    path.write_text(
        "\n".join(
            [
                _claude_line("n1", "user", "<command-name>/doctor</command-name>"),
                json.dumps(
                    {"type": "system", "subtype": "turn_duration", "sessionId": "deep", "uuid": "s1", "durationMs": 5}
                ),
                _claude_line("n2", "user", "<local-command-stdout>All checks passed</local-command-stdout>"),
            ]
        )
        + "\n"  # fmt: skip
    )
    [row] = read_rows(path)
    assert (row["id"], row["source_line"], row["prompt"]) == ("n1", 1, "")
    assert row["response"] == (
        "<command-name>/doctor</command-name>\n<local-command-stdout>All checks passed</local-command-stdout>"
    )
