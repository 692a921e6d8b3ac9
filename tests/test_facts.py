"""The facts of a turn (`digest.facts`): read through each harness's real reader from the samples
and from hand-written lines as each harness writes them, stored with the turns in a real DuckDB
file (replaced when a turn is rewritten, backfilled by migration 14, rebuilt on restore), found by
file, and shown on the session's partition."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from digest.archive_read import validate_bundle
from digest.facts import MAX_FACTS, Fact, extract_facts, facts_markdown, turn_fact_rows
from digest.ingest import ingest_paths
from digest.readers import HARNESS_READERS, file_kind
from resources.store import turn_rows
from resources.store.migrations import SCHEMA_VERSION

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "harnesses"
CLAUDE_SESSION = "0b6c3f1e-5a2d-4c8e-9f41-7d2e8a1c5b90"
CODEX_SESSION = "01936a4e-7c1b-7d42-9a0e-3b5f2c8d1e67"


def read_turns(path: Path) -> list[dict]:
    """The turns the file's own harness reader makes of it."""

    def lines():
        with path.open("rb") as handle:
            yield from enumerate(handle, 1)

    return [r.row for r in HARNESS_READERS[file_kind(path)](lines(), str(path)) if r.outcome == "turn"]


def facts_of(row: dict) -> set[tuple[str, str, str | None]]:
    return {(f.kind, f.value, f.detail) for f in extract_facts(row["prompt"], row["response"], row["agent"])}


def write(tmp_path: Path, name: str, lines: list) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def only(rows: list[dict]) -> dict:
    assert len(rows) == 1, rows
    return rows[0]


# --- the samples, through their readers -----------------------------------------------------------


def test_claude_code_sample_files_commands_and_issue():
    first, second = read_turns(SAMPLES / f"{CLAUDE_SESSION}.jsonl")
    assert facts_of(first) == {
        ("issue", "acme/webapp#311", None),  # the prompt's github.com/acme/webapp/issues/311
        ("file-read", "/home/dev/webapp/server.py", "Read"),
        ("file-edit", "/home/dev/webapp/server.py", "Edit"),
        # A successful Bash result carries no exit code in Claude Code's log.
        ("command", "python -m pytest tests/test_server.py -q", None),
        ("test", "1200 passed", "passed"),  # its summary line
    }
    assert facts_of(second) == {("file-edit", "/home/dev/webapp/README.md", "Edit")}


def test_codex_sample_exit_status_from_the_json_output_and_the_patch():
    first, second = read_turns(next(SAMPLES.glob("rollout-*.jsonl")))
    assert facts_of(first) == {("command", "rg -n 'DATABASE_URL|localhost' tests/conftest.py", "exit 0")}
    assert facts_of(second) == {("file-edit", ".github/workflows/ci.yml", "apply_patch")}


def test_aider_sample_edits_commits_run_and_failure():
    turns = read_turns(SAMPLES / ".aider.chat.history.md")
    # `/run` is the first turn's tool call (the reader keeps a command in the turn it belongs to), its
    # output the `> ` lines; aider writes no exit status.
    assert facts_of(turns[0]) == {
        ("file-edit", "cli.py", "aider"),
        ("commit", "4e1f2a9", "feat: Add --verbose flag to cli.py"),
        ("command", "python -m pytest -q tests/test_cli.py", None),
        ("error", "FAILED tests/test_cli.py::test_verbose - AssertionError: assert 'WARNING' == 'DEBUG'", "run"),
        ("test", "1 failed, 4 passed", "failed"),
    }
    assert ("commit", "9b3c7d0", "fix: Force logging config so --verbose takes effect") in facts_of(turns[1])
    assert facts_of(turns[2]) == set()  # a question answered, nothing run


def test_swe_agent_sample_viewer_editor_and_shell_actions():
    turns = read_turns(SAMPLES / "astropy__astropy-13033.traj")
    assert [facts_of(t) for t in turns] == [
        {("issue", "astropy/astropy#13007", None)},  # search_dir: navigation, not a command
        {("file-read", "astropy/timeseries/core.py", "open")},
        # `edit 77:79` names no file: its output's `[File: …]` does.
        {("file-edit", "/astropy__astropy/astropy/timeseries/core.py", "edit")},
        {
            ("command", "python reproduce.py", None),
            ("error", "ValueError: TimeSeries object is invalid - required columns missing: ['flux']", "python"),
        },
        set(),  # submit
    ]


def test_mini_swe_agent_sample_bash_blocks_and_return_codes():
    turns = read_turns(SAMPLES / "psf__requests-4498.traj.json")
    assert facts_of(turns[0]) == {
        ("issue", "psf/requests#4498", None),
        ("command", "python -c \"import requests; requests.get('http://')\"", "exit 1"),
        ("error", "IndexError: string index out of range", "bash"),
    }
    edit = facts_of(turns[1])
    assert ("file-edit", "requests/models.py", "bash") in edit  # sed -i
    assert {d for k, _, d in edit if k == "command"} == {"exit 0"}
    assert {d for k, _, d in facts_of(turns[2]) if k == "command"} == {None}  # its output has no <returncode>


# --- hand-written lines, as each harness writes them ----------------------------------------------


def claude_event(kind: str, n: int, content, **extra) -> dict:
    message = {"role": kind, "content": content}
    if kind == "assistant":
        message["model"] = "claude-sonnet-4-5"
    return {
        "type": kind, "sessionId": "s1", "uuid": f"u{n}", "timestamp": f"2026-11-18T09:00:{n:02d}Z",
        "message": message, **extra,
    }  # fmt: skip


def tool_use(n: int, name: str, **arguments) -> dict:
    return claude_event("assistant", n, [{"type": "tool_use", "id": f"t{n}", "name": name, "input": arguments}])


def tool_result(n: int, text: str, **extra) -> dict:
    return claude_event("user", n, [{"type": "tool_result", "tool_use_id": f"t{n - 1}", "content": text, **extra}])


def test_claude_code_failure_status_write_create_or_update_and_subagent(tmp_path):
    path = write(
        tmp_path,
        "s1.jsonl",
        [
            claude_event("user", 1, "fix the build, see #42"),
            tool_use(2, "Write", file_path="/w/new.py", content="print(1)\n"),
            tool_result(3, "File created successfully at: /w/new.py"),
            tool_use(4, "Write", file_path="/w/old.py", content="x = 2\n"),
            tool_result(5, "The file /w/old.py has been updated. Here's the result of running `cat -n`"),
            tool_use(6, "Bash", command="cargo build 2>&1 | tail -5", description="build"),
            tool_result(
                7,
                "Exit code 101\nerror[E0308]: mismatched types\n  --> src/main.rs:4:5\nerror: could not compile `app`",
                is_error=True,
            ),
            tool_use(8, "Bash", command="git commit -am 'Fix types' && cat src/main.rs"),
            tool_result(9, "[main 1a2b3c4] Fix types\n 1 file changed, 1 insertion(+)"),
            # A Task subagent's work, read as this turn's.
            {**tool_use(10, "Edit", file_path="/w/lib.rs", old_string="a", new_string="b"), "isSidechain": True},
            {**tool_result(11, "The file /w/lib.rs has been updated."), "isSidechain": True},
            tool_use(12, "NotebookEdit", notebook_path="/w/a.ipynb", new_source="x"),
        ],
    )
    assert facts_of(only(read_turns(path))) == {
        ("issue", "#42", None),
        ("file-create", "/w/new.py", "Write"),
        ("file-edit", "/w/old.py", "Write"),
        ("command", "cargo build 2>&1 | tail -5", "exit 101"),
        ("error", "error[E0308]: mismatched types", "Bash"),
        ("error", "error: could not compile `app`", "Bash"),
        ("command", "git commit -am 'Fix types' && cat src/main.rs", None),
        ("file-read", "src/main.rs", "Bash"),
        ("commit", "1a2b3c4", "Fix types"),
        ("file-edit", "/w/lib.rs", "Edit"),
        ("file-edit", "/w/a.ipynb", "NotebookEdit"),
    }


def codex_line(kind: str, payload: dict) -> dict:
    return {"timestamp": "2026-11-19T14:02:11.000Z", "type": kind, "payload": payload}


def call(name: str, arguments: dict) -> dict:
    return codex_line("response_item", {"type": "function_call", "name": name, "arguments": json.dumps(arguments)})


def output(text: str) -> dict:
    return codex_line("response_item", {"type": "function_call_output", "output": text})


def test_codex_exec_command_shell_local_shell_and_patch_actions(tmp_path):
    path = write(
        tmp_path,
        "rollout-x.jsonl",
        [
            codex_line("session_meta", {"id": "c1", "timestamp": "2026-11-19T14:02:11.000Z"}),
            codex_line("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}),
            call("exec_command", {"cmd": "sed -n '1,80p' src/app.py", "workdir": "/w"}),
            output("Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 0\nOutput:\nimport os\n"),
            call("shell", {"command": ["bash", "-lc", "pytest -q && nl -ba tests/test_app.py"]}),
            output(
                "Exit code: 1\nWall time: 2 seconds\nOutput:\nE       KeyError: 'port'\n"
                "FAILED tests/test_app.py::test_port - KeyError: 'port'\n"
            ),
            codex_line("response_item", {"type": "local_shell_call", "action": {"type": "exec", "command": ["bash", "-lc", "head -n 5 README.md"]}}),
            call("shell", {"command": ["apply_patch", "*** Begin Patch\n*** Add File: docs/new.md\n+x\n*** Delete File: old.txt\n*** End Patch"]}),
            output("Done!"),
            codex_line("response_item", {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch\n*** Update File: src/a.py\n*** Move to: src/b.py\n@@\n-x\n+y\n*** End Patch"}),
            call("shell", {"command": ["gh", "pr", "view", "77"]}),
        ],
    )  # fmt: skip
    assert facts_of(only(read_turns(path))) == {
        ("command", "sed -n '1,80p' src/app.py", "exit 0"),
        ("file-read", "src/app.py", "exec_command"),
        ("command", "pytest -q && nl -ba tests/test_app.py", "exit 1"),
        ("file-read", "tests/test_app.py", "shell"),
        ("error", "KeyError: 'port'", "shell"),
        ("error", "FAILED tests/test_app.py::test_port - KeyError: 'port'", "shell"),
        ("command", "head -n 5 README.md", None),
        ("file-read", "README.md", "shell"),
        ("file-create", "docs/new.md", "shell"),
        ("file-edit", "old.txt", "shell"),
        ("file-edit", "src/a.py", "apply_patch"),
        ("file-edit", "src/b.py", "apply_patch"),
        ("command", "gh pr view 77", None),
        ("pr", "#77", "shell"),
    }


def test_aider_created_and_added_files_and_a_bang_command(tmp_path):
    path = write(
        tmp_path,
        ".aider.chat.history.md",
        [
            "# aider chat started at 2026-11-17 16:20:05",
            "",
            "#### /add src/new_mod.py tests/test_mod.py  ",
            "",
            "> Creating empty file src/new_mod.py  ",
            "> Added src/new_mod.py to the chat  ",
            "> Added tests/test_mod.py to the chat  ",
            "",
            "#### !npm test  ",
            "",
            "> npm ERR! code ELIFECYCLE  ",
            "> npm ERR! errno 1  ",
            "> npm ERR! app@1.0.0 test: `jest`  ",
        ],
    )
    # Commands are no turns of their own: both are the one turn's, `!npm test` a tool call.
    (turn,) = read_turns(path)
    assert facts_of(turn) == {
        ("file-create", "src/new_mod.py", "aider"),
        ("file-read", "src/new_mod.py", "aider"),
        ("file-read", "tests/test_mod.py", "aider"),
        ("command", "npm test", None),
        ("error", "npm ERR! code ELIFECYCLE", "run"),
        ("error", "npm ERR! app@1.0.0 test: `jest`", "run"),
    }


def test_swe_agent_str_replace_editor_commands(tmp_path):
    steps = [
        ("str_replace_editor view /testbed/src/io.py", "Here's the result of running `cat -n`"),
        ("str_replace_editor create /testbed/repro.py --file_text 'import io'", "File created successfully"),
        ("str_replace_editor str_replace /testbed/src/io.py --old_str a --new_str b", "The file has been edited."),
        ("cd /testbed && python repro.py", "Traceback (most recent call last):\n  File x\nOSError: [Errno 9] bad fd"),
        ("scroll_down", "[File: /testbed/src/io.py (400 lines total)]"),
    ]
    doc = {
        "trajectory": [{"action": a, "observation": o, "thought": "t", "response": "r"} for a, o in steps],
        "history": [{"role": "user", "content": "Fix the fd leak (PR #512)"}],
        "info": {},
    }
    path = tmp_path / "x__y-1.traj"
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    assert [facts_of(t) for t in read_turns(path)] == [
        {("pr", "#512", None), ("file-read", "/testbed/src/io.py", "str_replace_editor")},
        {("file-create", "/testbed/repro.py", "str_replace_editor")},
        {("file-edit", "/testbed/src/io.py", "str_replace_editor")},
        {("command", "cd /testbed && python repro.py", None), ("error", "OSError: [Errno 9] bad fd", "cd")},
        set(),
    ]


# --- the patterns ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("ModuleNotFoundError: No module named 'dotenv'", "ModuleNotFoundError: No module named 'dotenv'"),
        ("E       AssertionError: assert 1 == 2", "AssertionError: assert 1 == 2"),
        ("Caused by: java.lang.IllegalStateException: closed", "java.lang.IllegalStateException: closed"),
        ("Error: Cannot find module 'express'", "Error: Cannot find module 'express'"),
        ("src/a.ts(3,7): error TS2345: Argument of type 'x'", "TS2345: Argument of type 'x'"),
        ("main.c:12:5: error: expected ';' before '}'", "main.c:12:5: error: expected ';' before '}'"),
        ("panic: runtime error: index out of range [3]", "panic: runtime error: index out of range [3]"),
        ("--- FAIL: TestParse (0.00s)", "--- FAIL: TestParse (0.00s)"),
        ("\x1b[31mnot ansi-stripped\x1b[0m", None),
        ("    ValueError: if the port is negative", None),  # a docstring's line, indented
        ("raise ValueError('x')", None),
        ("Errors: 0", None),
    ],
)
def test_error_lines(line, error):
    found = [f.value for f in extract_facts("", f"[tool result] ok\n{line}") if f.kind == "error"]
    assert found == ([error] if error else [])


@pytest.mark.parametrize(
    ("text", "refs"),
    [
        ("see https://github.com/o/r/pull/9 and github.com/o/r/issues/10", {("pr", "o/r#9"), ("issue", "o/r#10")}),
        ("https://gitlab.com/g/sub/p/-/merge_requests/4", {("pr", "g/sub/p!4")}),
        ("Merge pull request #123 from a/b", {("pr", "#123")}),
        ("Fix the parser (#88)", {("pr", "#88")}),
        ("this fixes #12; closes: #13", {("issue", "#12"), ("issue", "#13")}),
        ("tracked in acme/web#7", {("issue", "acme/web#7")}),
        ("step #1 of 3, color #fff, item #42", set()),  # a bare `#N` is not a reference
        ("see src/docs/page.md#12", set()),
    ],
)
def test_issue_and_pr_references(text, refs):
    found = {(f.kind, f.value) for f in extract_facts(text, "")}
    assert found == refs


def test_commits_made_and_shown():
    output = (
        "[feature/x (root-commit) 0123abc] Initial\ncommit " + "f" * 40 + "\nAuthor: a\n[detached HEAD 9abcdef] wip"
    )
    found = {(f.value, f.detail) for f in extract_facts("", f"[tool result] {output}") if f.kind == "commit"}
    assert found == {("0123abc", "Initial"), ("f" * 40, None), ("9abcdef", "wip")}


def test_a_turn_keeps_each_fact_once_and_at_most_max_facts():
    lines = "\n".join(f"[tool Read] {json.dumps({'file_path': f'/f{i % 300}.py'})}" for i in range(900))
    found = extract_facts("", lines)
    assert len(found) == MAX_FACTS
    assert len({f.value for f in found}) == MAX_FACTS
    again = extract_facts("", '[tool Read] {"file_path": "/a.py"}\n[tool Read] {"file_path": "/a.py"}')
    assert again == [Fact("file-read", "/a.py", "Read")]


def test_adversarial_text_is_read_whole_and_bounded():
    """Long lines with near-matches (no line end, a dotted name that never ends in Error, `#` runs,
    a path with no patch end) finish, and find nothing false."""
    nasty = "\n".join(
        [
            "a." * 300_000 + "b",
            "Value" + "x" * 500_000,
            "#" * 200_000 + "1",
            "fixes " * 100_000,
            "[main " + "a" * 100_000,
            "*** Update File: " + "p" * 200_000,
        ]
    )
    found = extract_facts(nasty, f"[tool result] {nasty}\n[tool apply_patch] {nasty}\n{nasty}")
    assert {f.kind for f in found} <= {"file-edit"}


def test_a_turn_whose_text_defeats_extraction_keeps_no_facts(monkeypatch):
    import digest.facts as facts

    def broken(*_):
        raise RecursionError("deep")

    monkeypatch.setattr(facts, "extract_facts", broken)
    rows = [{"id": "t1", "session_id": "s", "prompt": "x", "response": "y", "agent": None}]
    assert turn_fact_rows(rows) == []


def test_markdown_lists_edits_commands_with_their_last_status_and_errors():
    shown = facts_markdown(
        [
            ("file-read", "a.py", "Read"),
            ("file-edit", "a.py", "Edit"),
            ("file-create", "b.py", "Write"),
            ("command", "pytest -q", "exit 1"),
            ("error", "KeyError: 'port'", "Bash"),
            ("command", "pytest -q", "exit 0"),
            ("commit", "1a2b3c4", "fix"),
            *[("command", f"echo {i}", None) for i in range(12)],
        ],
        top=10,
    )
    assert "**Files edited or created** (2)\n\n- `b.py` (created)\n- `a.py` (edited)" in shown
    assert "- `pytest -q` → exit 0" in shown and "exit 1" not in shown
    assert "**Commands** (13)" in shown and "- … and 3 more" in shown
    assert "- `KeyError: 'port'`" in shown
    assert shown.endswith("Also: 1 files read, 1 commits.")
    assert facts_markdown([]).startswith("No files")


# --- in the store ---------------------------------------------------------------------------------


def stored(store, sql: str, params: list | None = None) -> list[tuple]:
    with store.file.connect() as con:
        return con.execute(sql, params or []).fetchall()


def test_ingest_stores_facts_with_their_turns_and_finds_sessions_by_file(harnesses_store):
    store = harnesses_store
    facts = store.facts.for_session(CLAUDE_SESSION)
    assert [(f["kind"], f["value"]) for f in facts][:3] == [
        ("issue", "acme/webapp#311"),
        ("file-read", "/home/dev/webapp/server.py"),
        ("file-edit", "/home/dev/webapp/server.py"),
    ]
    assert facts[0]["turn_id"] == "7c0e0000-1d2b-4f5a-8c3e-a1b2c3d4e5f6" and facts[0]["ts_ms"] > 0
    by_tail = store.facts.sessions_by_file("server.py")
    assert [s["session_id"] for s in by_tail] == [CLAUDE_SESSION]
    assert by_tail[0]["kinds"] == ["file-edit", "file-read"] and by_tail[0]["paths"] == ["/home/dev/webapp/server.py"]
    assert [t["kind"] for t in by_tail[0]["turns"]] == ["file-edit", "file-read"]
    assert store.facts.sessions_by_file("webapp/server.py")[0]["session_id"] == CLAUDE_SESSION
    assert store.facts.sessions_by_file("er.py") == []  # a tail on a `/` only
    assert store.facts.sessions_by_file("./.github/workflows/ci.yml")[0]["session_id"] == CODEX_SESSION
    # Newest first: cli.py (aider, 2026-11-17) and core.py (no time) lose to none here; README.md
    # only by the Claude Code session.
    assert [s["session_id"] for s in store.facts.sessions_by_file("README.md", limit=5)] == [CLAUDE_SESSION]
    with pytest.raises(ValueError, match="empty path"):
        store.facts.sessions_by_file("  ")


def test_a_rewritten_turn_replaces_its_facts(store, tmp_path):
    line = claude_event("user", 1, "go")
    first = write(tmp_path, "a.jsonl", [line, tool_use(2, "Read", file_path="/w/one.py")])
    ingest_paths([first], store)
    assert stored(store, "SELECT value FROM turn_facts") == [("/w/one.py",)]
    second = write(tmp_path, "b.jsonl", [line, tool_use(2, "Read", file_path="/w/two.py")])
    ingest_paths([second], store)
    assert stored(store, "SELECT turn_id, value FROM turn_facts") == [("u1", "/w/two.py")]


@pytest.mark.integration  # an older store migrated in place
def test_migration_14_backfills_the_facts_of_stored_turns_in_batches(store, monkeypatch):
    ingest_paths([SAMPLES], store)
    before = stored(store, "SELECT * FROM turn_facts ORDER BY ALL")
    assert len(before) > 10
    with store.file.transaction() as con:
        con.execute("DELETE FROM turn_facts")
        con.execute("UPDATE schema_meta SET version = 13")
    monkeypatch.setattr(turn_rows, "BACKFILL_BATCH_TURNS", 2)  # several batches over the 14 turns
    store.migrate()
    assert stored(store, "SELECT * FROM turn_facts ORDER BY ALL") == before
    assert stored(store, "SELECT max(version) FROM schema_meta") == [(SCHEMA_VERSION,)]


@pytest.mark.integration  # an archive written and restored
def test_a_restore_extracts_the_facts_of_its_turns_again(store, tmp_path):
    ingest_paths([SAMPLES], store)
    before = stored(store, "SELECT * FROM turn_facts ORDER BY ALL")
    bundle = validate_bundle(store.archive.write_archive(tmp_path / "out")["path"])
    with store.file.transaction() as con:
        con.execute("DELETE FROM turn_facts")
    store.archive.restore_archive(bundle, "replace")
    assert stored(store, "SELECT * FROM turn_facts ORDER BY ALL") == before


def test_a_small_batch_is_stored_as_a_large_one_is(store, new_store, tmp_path, monkeypatch):
    # A write of a few rows passes them to DuckDB as lists, a larger one as a pandas frame: the same
    # rows stored either way (NULLs, numbers, times and all), in each table the write keeps.
    from resources.store import connection

    rows = [
        {
            "id": f"t{n}", "session_id": session, "ts_ms": None if n == 2 else 1_760_000_000_000 + n,
            "type": "agent-interaction", "prompt": f"fix https://github.com/acme/app/issues/{n + 30} step {n}",
            "response": "ran `pytest -q`: FAILED tests/test_app.py::test_x - KeyError: 'timeout'",
            "document": f"User Prompt: fix src/app/settings.py step {n}\nAgent Response: KeyError in ReconnectLoop",
            "document_rebuilt": n == 1, "source_file": "f.jsonl", "source_line": n + 1,
            "project": "/home/dev/app" if n else None, "amount_tool_calls": n,
        }
        for n, session in enumerate(["a", "a", "b"])
    ]  # fmt: skip
    tables = {
        "sessions": "SELECT * EXCLUDE (updated_at) FROM sessions ORDER BY session_id",
        "session_cards": "SELECT * FROM session_cards ORDER BY session_id",
        "turn_facts": "SELECT * FROM turn_facts ORDER BY turn_id, kind, value",
        "fidelity_terms": "SELECT * FROM fidelity_terms ORDER BY session_id, term",
    }
    store.ingest.write_turns(rows)
    as_lists = {name: stored(store, sql) for name, sql in tables.items()}
    monkeypatch.setattr(connection, "LIST_BATCH_ROWS", 0)
    as_frame = new_store(tmp_path / "frame.duckdb")
    as_frame.ingest.write_turns(rows)
    assert all(as_lists.values()) and as_lists == {name: stored(as_frame, sql) for name, sql in tables.items()}
