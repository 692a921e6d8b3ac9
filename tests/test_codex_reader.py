"""The Codex CLI reader on each rollout layout the CLI has written (tests/fixtures/harnesses/codex/):
the TypeScript CLI's `.json` document, the JSONL before the envelope, and the `{timestamp, type,
payload}` envelope, with a resumed rollout beside its original."""

from __future__ import annotations

import json
import shutil

import pytest

from digest.ingest import discover, ingest_paths
from digest.readers import file_kind
from tests.harness_fixtures import FIXTURES, read_file, rows, turns

CODEX = FIXTURES / "codex"
ENVELOPE = CODEX / "0.46-envelope"
ORIGINAL_ID = "0199a1b2-3c4d-7e5f-8a9b-0c1d2e3f4a5b"
RESUMED_ID = "0199c7d8-9e0f-7a1b-8c2d-3e4f5a6b7c8d"
ORIGINAL = ENVELOPE / f"rollout-2026-10-02T08-10-00-{ORIGINAL_ID}.jsonl"
RESUMED = ENVELOPE / f"rollout-2026-10-05T15-00-00-{RESUMED_ID}.jsonl"
ORIGINAL_PROMPTS = [
    "Invoices round 0.005 down; make totals use banker's rounding.",
    "Also add a test for 2.675.",
    "Keep going, but name the test test_round_half_even.",
]


def test_the_typescript_clis_json_rollout_is_read_and_found_in_a_folder(tmp_path):
    [path] = (CODEX / "0.1-typescript-json").iterdir()
    assert file_kind(path) == "codex" and discover([path.parent]) == [path]  # skipped silently before
    reads = read_file(path)
    got = [r.row for r in reads if r.outcome == "turn"]
    assert [t["prompt"] for t in got] == ["Why does `npm test` hang after the last suite?", "Add the afterAll hook."]
    first = got[0]
    assert first["session_id"] == "9c1f0a5e-2b3d-4e6f-8a7b-1c2d3e4f5a6b" and first["id"].endswith(":00001")
    assert first["thought"] == "An open handle keeps the event loop alive."
    assert "[tool shell]" in first["response"] and "TCPSERVERWRAP" in first["response"]
    assert "call `server.close()` in afterAll" in first["response"] and first["amount_tool_calls"] == 1
    assert first["ts_ms"] == got[1]["ts_ms"] == 1745337911123  # the session's time: items have none
    assert got[1]["source_line"] > first["source_line"] > 1  # each counted where its first item starts


def test_a_message_item_with_a_role_and_no_type_is_read_as_the_message():
    """Some TypeScript-CLI rollouts write a message as `{role, content}` with no `"type": "message"`:
    here the file's one item, a pasted test failure, is its one turn's prompt (it was `no-turns`)."""
    [path] = (CODEX / "0.1-typescript-json-untyped").iterdir()
    reads = read_file(path)
    assert [r for r in reads if r.outcome == "reject"] == []
    [turn] = [r.row for r in reads if r.outcome == "turn"]
    assert turn["prompt"].startswith("Fix this failing test:") and "Received: 81" in turn["prompt"]
    assert turn["session_id"] == "5e0b7d1c-6a2f-4c8e-9d3b-7f1a2c4e6b80" and turn["ts_ms"] == 1744971160005


def test_a_bare_role_item_of_the_jsonl_before_the_envelope_is_read(tmp_path):
    path = tmp_path / "rollout-2025-07-14T09-30-00-old.jsonl"
    lines = [
        {"id": "5973b6c0", "timestamp": "2025-07-14T09:30:00.000Z", "instructions": ""},
        {"role": "user", "content": [{"type": "text", "text": "Why is the cache cold?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "The key has the pid in it."}]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    [turn] = turns(path)
    assert (turn["prompt"], turn["response"]) == ("Why is the cache cold?", "The key has the pid in it.")


def test_the_jsonl_before_the_envelope_reads_its_session_branch_and_cwd():
    [path] = (CODEX / "0.2-pre-envelope").iterdir()
    got = turns(path)
    assert [t["prompt"] for t in got] == [
        "The nightly job writes duplicate rows; find why.",
        "Make it an upsert on event_id.",
    ]
    assert {t["session_id"] for t in got} == {"5973b6c0-94b8-487b-a530-2aeb6098ae0e"}
    assert got[0]["thought"] == "**Looking at the upsert**" and "gAAAAB" not in got[0]["document"]
    assert "etl/load.py:41: INSERT" in got[0]["response"]  # `{content, success}` output
    assert {(t["project"], t["git_branch"]) for t in got} == {("/home/dev/etl", "main")}
    doc = " ".join(t["document"] for t in got)
    assert "environment_context" not in doc and "Prefer small commits" not in doc  # a message of two CLI blocks


def test_cli_notices_start_no_turn_and_copies_are_read_once():
    got = turns(ORIGINAL)
    assert [t["prompt"] for t in got] == ORIGINAL_PROMPTS
    assert [t["id"] for t in got] == [f"{ORIGINAL_ID}:0000{i}" for i in (1, 2, 3)]
    first, second, third = got
    # event_msg and response_item copies (in either order) are one text each.
    assert first["thought"] == "**Finding where totals are rounded**"
    assert first["response"].count("Decimal.quantize") == 1 and first["amount_tool_calls"] == 1
    assert "AGENTS.md" not in first["document"] and "permissions" not in first["document"]
    # The abort is a mark in its turn (the event and the message the CLI writes: once), not a turn.
    assert second["response"].count("[aborted]") == 1 and "apply_patch" in second["response"]
    assert third["response"].endswith("[user action] <action>review</action>\n  <results>No issues found.</results>")
    assert first["ts_ms"] == 1790928605000  # the prompt's line, the event copy before it
    assert {t["model"] for t in got} == {"gpt-5-codex"} and {t["git_branch"] for t in got} == {"fix/rounding"}
    # The latest `turn_context` gives the turn's working folder.
    assert [t["project"] for t in got] == ["/home/dev/billing", "/home/dev/billing", "/home/dev/billing/tests"]


def test_a_resumed_rollout_is_its_own_session_and_keeps_the_rollback_as_a_mark():
    got = turns(RESUMED)
    assert {t["session_id"] for t in got} == {RESUMED_ID}  # the first `session_meta` owns identity
    assert [t["prompt"] for t in got] == [
        ORIGINAL_PROMPTS[0],  # the resumed session's history, as the model saw it again
        ORIGINAL_PROMPTS[1],
        "Now run the whole suite.",
        "Run only tests/test_rounding.py instead.",
    ]
    assert got[2]["response"].endswith("[rolled back] 1 turns") and "214 passed" in got[2]["response"]
    assert got[0]["ts_ms"] == 1791212400002  # the copy is stamped at the resume


@pytest.mark.parametrize("order", ["original first", "resumed first"])
def test_a_resumed_rollout_beside_its_original_loses_and_overwrites_nothing(store, tmp_path, order):
    folder = tmp_path / "sessions" / "2026" / "10"
    folder.mkdir(parents=True)
    files = [shutil.copy(p, folder / p.name) for p in (ORIGINAL, RESUMED)]
    report = ingest_paths(files if order == "original first" else files[::-1], store)
    assert report.turns == 7 and report.rejects == 0
    assert all(f.superseded == 0 for f in report.files)
    stored = rows(store, "SELECT session_id, id, prompt, ts_ms, source_file FROM turns ORDER BY id")
    original = [t for t in stored if t["session_id"] == ORIGINAL_ID]
    resumed = [t for t in stored if t["session_id"] == RESUMED_ID]
    assert [t["prompt"] for t in original] == ORIGINAL_PROMPTS  # the last prompt too
    assert {t["source_file"] for t in original} == {str(files[0].resolve())}
    assert original[0]["ts_ms"] == 1790928605000  # not the resume's time
    assert len(resumed) == 4 and {t["source_file"] for t in resumed} == {str(files[1].resolve())}
    sessions = rows(store, "SELECT session_id, turn_count FROM sessions ORDER BY session_id")
    assert sessions == [{"session_id": ORIGINAL_ID, "turn_count": 3}, {"session_id": RESUMED_ID, "turn_count": 4}]


def test_a_rollout_cut_at_its_head_keeps_its_work_and_a_bad_line_costs_only_itself(tmp_path):
    lines = ORIGINAL.read_text().splitlines()
    path = tmp_path / "rollout-cut.jsonl"
    # From the reasoning on (no `session_meta`, no prompt), with a payload that is not an object.
    bad = json.dumps({"timestamp": "2026-10-02T08:10:30Z", "type": "response_item", "payload": [1]})
    path.write_text("\n".join([*lines[7:12], bad, *lines[12:]]) + "\n")
    reads = read_file(path)
    [reject] = [r for r in reads if r.outcome == "reject"]
    assert reject.line_no == 6 and reject.reason.startswith("wrong-type: payload is list")
    got = [r.row for r in reads if r.outcome == "turn"]
    assert got[0]["prompt"] == "" and "[tool shell]" in got[0]["response"]  # the work before a prompt is a turn
    assert got[0]["session_id"] == "rollout-cut" and [t["prompt"] for t in got[1:]] == ORIGINAL_PROMPTS[1:]


def test_a_prompt_with_an_image_and_its_event_copy_are_one_turn(tmp_path):
    image = "data:image/png;base64,iVBORw0KGgo="
    lines = [
        {"timestamp": "2026-10-02T08:10:00Z", "type": "session_meta", "payload": {"id": "s-image", "cwd": "/w"}},
        {"timestamp": "2026-10-02T08:10:01Z", "type": "event_msg",
         "payload": {"type": "user_message", "message": "Why is this chart empty?", "images": [image]}},
        {"timestamp": "2026-10-02T08:10:01Z", "type": "response_item",
         "payload": {"type": "message", "role": "user", "content": [
             {"type": "input_text", "text": "Why is this chart empty?"}, {"type": "input_image", "image_url": image}]}},
        {"timestamp": "2026-10-02T08:10:05Z", "type": "response_item", "payload": {
            "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The y range is 0."}]}},
        {"timestamp": "2026-10-02T08:11:00Z", "type": "event_msg",
         "payload": {"type": "user_message", "message": "Why is this chart empty?", "images": []}},
    ]  # fmt: skip
    path = tmp_path / "rollout-image.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    first, second = turns(path)  # the same words typed again after a reply are a turn of their own
    assert first["prompt"] == "Why is this chart empty?" and "base64" not in first["document"]
    assert first["response"] == "The y range is 0." and second["prompt"] == "Why is this chart empty?"


def test_a_line_that_fails_after_opening_a_turn_is_its_reject_and_no_turn(tmp_path, monkeypatch):
    import digest.readers.codex as codex

    real = codex.arguments_text

    def arguments_text(value):
        if "boom" in str(value):
            raise RecursionError("maximum recursion depth exceeded")  # as a too deeply nested value does
        return real(value)

    monkeypatch.setattr(codex, "arguments_text", arguments_text)
    call = {"type": "function_call", "name": "shell", "arguments": "boom", "call_id": "c"}
    lines = [
        {"timestamp": "2026-10-02T08:10:00Z", "type": "response_item", "payload": call},
        {"timestamp": "2026-10-02T08:10:01Z", "type": "response_item",
         "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]}},
    ]  # fmt: skip
    path = tmp_path / "rollout-boom.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    reads = read_file(path)  # every line once: the rejected line is not also a turn's
    assert [(r.outcome, r.line_no) for r in reads] == [("reject", 1), ("turn", 2)]
    assert reads[1].row["id"] == "rollout-boom:00001"
