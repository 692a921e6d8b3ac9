"""Facts read from tool calls written as text (`digest.text_facts`, called by `digest.facts` for
every harness's prose): Claude Code's `/export`, SpecStory's Markdown histories (three layouts,
tests/test_text_facts_specstory.py), console transcripts and shell blocks with their output; model
and tool failures; Python tracebacks; test-runner tallies. The texts are short hand-written ones, as
the tools write them. Precision comes first: code shown, commands suggested, a user's pasted blocks
and prose that mentions `exit 1` are no runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from digest.facts import MAX_FACTS, extract_facts, facts_markdown
from digest.ingest import ingest_paths
from digest.text_facts import exit_status, line_facts, text_calls


def facts(response: str, prompt: str = "", agent: str | None = None) -> set[tuple[str, str, str | None]]:
    return {(f.kind, f.value, f.detail) for f in extract_facts(prompt, response, agent)}


def kinds(response: str, kind: str, prompt: str = "") -> set[tuple[str, str | None]]:
    return {(v, d) for k, v, d in facts(response, prompt) if k == kind}


# --- Claude Code's /export ------------------------------------------------------------------------

CLAUDE_EXPORT = """\
> the tests fail, fix them

⏺ I'll run the tests first.

⏺ Bash(npm test)
  ⎿  Error: Exit code 1
     FAIL src/cart.test.js
       ● cart › totals
     Tests:       1 failed, 5 passed, 6 total

⏺ Read(src/cart.js)
  ⎿  Read 40 lines

⏺ Update(src/cart.js)
  ⎿  Updated src/cart.js with 1 addition and 1 removal
       12 -    return items.length
       12 +    return items.reduce((n, i) => n + i.qty, 0)

⏺ Update(src/totals.js)
  ⎿  Error: String to replace not found in file.

⏺ Write(src/qty.js)
  ⎿  Wrote 8 lines to src/qty.js
     export const qty = (i) => i.qty;

⏺ Write(README.md)
  ⎿  Updated README.md with 2 additions

⏺ Bash(python scripts/seed.py --db
      local.sqlite)
  ⎿  Error: Exit code 1
     Traceback (most recent call last):
       File "/w/scripts/seed.py", line 4, in <module>
         import yaml
     ModuleNotFoundError: No module named 'yaml'

⏺ Bash(npm test)
  ⎿  > cart@1.0.0 test
     > jest
     … +6 lines (ctrl+o to expand)
     Tests:       6 passed, 6 total

⏺ Bash(git commit -am "Count quantities in the cart total")
  ⎿  Error: Exit code 128
     error: gpg failed to sign the data
     fatal: failed to write commit object

⏺ The cart total counts quantities now; the commit failed on gpg signing.
"""


def test_claude_code_export_commands_statuses_files_and_errors():
    assert facts(CLAUDE_EXPORT, prompt="the tests fail, fix them") == {
        ("command", "npm test", "exit 1"),
        ("error", "FAIL src/cart.test.js", "Bash"),
        ("test", "1 failed, 5 passed", "failed"),
        ("file-read", "src/cart.js", "Read"),
        ("file-edit", "src/cart.js", "Update"),
        # The failed Update edited nothing; its result is an error.
        ("error", "Error: String to replace not found in file.", "Update"),
        ("file-create", "src/qty.js", "Write"),
        ("file-edit", "README.md", "Write"),  # a Write that updated the file
        # A long call goes on in lines indented six: kept as the log has it.
        ("command", "python scripts/seed.py --db\nlocal.sqlite", "exit 1"),
        ("error", "ModuleNotFoundError: No module named 'yaml'", "Bash"),
        # A success has no status in Claude Code's log (as in its JSONL): the `npm test` with one stands.
        ("test", "6 passed", "passed"),
        ("command", 'git commit -am "Count quantities in the cart total"', "exit 128"),
        ("error", "error: gpg failed to sign the data", "Bash"),
        ("error", "fatal: failed to write commit object", "Bash"),
    }


def test_claude_code_export_call_with_a_timeout_and_an_older_result_connector():
    text = (
        "● Bash(python -m pytest tests/unit -q) timeout: 30s\n  ⎿  Error: Exit code 4\n"
        "     ImportError while loading conftest '/w/tests/conftest.py'.\n\n"
        "● Update(src/models/task.py)\n  ⎿  Error editing file\n\n"  # edited nothing
        "⏺ Update(src/hands.ts)…\n⎿ Updated src/hands.ts with 2 additions and 1 removal\n"
    )
    assert facts(text) == {
        ("command", "python -m pytest tests/unit -q", "exit 4"),
        ("file-edit", "src/hands.ts", "Update"),
    }


def test_claude_code_export_calls_that_are_not_read():
    text = (
        "⏺ Update(backend/…/client.py)\n  ⎿  Added 2 lines\n\n"  # a path the display shortened
        "⏺ Update(src/a.py)\n  ⎿  Interrupted by user\n\n"
        "⏺ Bash(make deploy\n\nThat was cut off.\n\n"  # never closed
        "```text\n⏺ Bash(rm -rf build)\n  ⎿  (No content)\n```\n"  # a block quoting a session
    )
    assert facts(text) == set()


# --- console transcripts and shell blocks ---------------------------------------------------------


def test_a_console_block_with_output_is_a_run_with_its_status():
    text = (
        "I ran the suite:\n\n```console\n$ python -m unittest\n..E\n"
        "ERROR: test_parse (tests.test_cli.TestCli)\n----------------------------------------------------------------------\n"
        'Traceback (most recent call last):\n  File "/w/tests/test_cli.py", line 9, in test_parse\n'
        "    parse('x')\nKeyError: 'x'\n\n----------------------------------------------------------------------\n"
        "Ran 3 tests in 0.002s\n\nFAILED (errors=1)\nexit status 1\n"
        "$ go test ./...\nok  \tgithub.com/acme/tool/cli\t0.012s\nFAIL\tgithub.com/acme/tool/parse\t0.020s\n```\n"
    )
    found = facts(text)
    assert ("command", "python -m unittest", "exit 1") in found
    assert ("command", "go test ./...", None) in found
    assert ("error", "KeyError: 'x'", "shell") in found
    assert ("test", "1 error, 2 passed", "failed") in found
    assert ("test", "1 failed, 1 passed (packages)", "failed") in found


def test_a_shell_block_is_a_run_only_when_its_output_follows():
    ran = "```bash\nnpm install express dotenv\n```\n\n```\nadded 2 packages in 1s\nexit code: 0\n```\n"
    assert kinds(ran, "command") == {("npm install express dotenv", "exit 0")}
    shown = "Run this yourself:\n\n```bash\nnpm run dev\n```\n\nIt starts the server.\n"
    assert facts(shown) == set()
    listed = "```console\n$ pip install -e .\n$ make test\n```\n"  # commands to run, no output
    assert facts(listed) == set()
    dollar_lines = "```sh\n$ cargo test\ntest result: FAILED. 3 passed; 1 failed; 0 ignored\n```\n"
    assert facts(dollar_lines) == {("command", "cargo test", None), ("test", "1 failed, 3 passed", "failed")}


def test_a_mini_swe_agent_step_pasted_as_text():
    text = (
        "THOUGHT: Let me reproduce the error first.\n\n```bash\npython repro.py\n```\n\n"
        '<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\n  File "repro.py", line 2\n'
        "IndexError: string index out of range\n$ git status\nok\n</output>\n"
    )
    assert facts(text) == {
        ("command", "python repro.py", "exit 1"),
        ("error", "IndexError: string index out of range", "shell"),
    }


def test_a_prompt_line_in_prose_with_output_is_a_run():
    text = 'bash-$ python reproduce.py\nTraceback (most recent call last):\n  File "reproduce.py", line 3\nValueError: bad\n'
    assert facts(text) == {("command", "python reproduce.py", None), ("error", "ValueError: bad", "shell")}
    user_at_host = "dev@box:~/app$ make\nmake: *** [all] Error 2\nCommand failed with exit code 2\n"
    assert kinds(user_at_host, "command") == {("make", "exit 2")}


@pytest.mark.parametrize(
    "text",
    [
        "The plan costs $ 5 a month.\n$ 5\nper seat\n",  # `$ 5` is no command
        "$ x + y $\nis the sum\n",  # math
        "$ whatever you like\nis fine\n",  # a bare `$ ` needs a known program
        "$ npm test\n\nruns the tests.\n",  # no output right after it
        "> npm test\n> jest\n",  # `> ` lines are quotes (and aider's own lines)
        "If it fails it will exit 1, as `exit 1` does; Exit code: 2 is what CI printed.\n",
        "Process exited with code 1\n",  # a status with no command
    ],
)
def test_prose_is_no_command_run(text):
    assert {k for k, _, _ in facts(text)} <= {"error"} and not kinds(text, "command")


def test_a_users_prompt_is_never_read_for_runs():
    prompt = (
        "This fails:\n\n```bash\nnpm run build\n```\n\n```\nerror TS2345: Argument of type 'x'\n```\n"
        "```console\n$ npm test\nTests:       1 failed, 2 passed, 3 total\n```\n"
        "⏺ Bash(rm -rf dist)\n  ⎿  (No content)\n"
    )
    found = facts("I'll look.", prompt=prompt)
    # What the user pasted still tells what failed; no command or file is the agent's.
    assert found == {("error", "TS2345: Argument of type 'x'", None), ("test", "1 failed, 2 passed", "failed")}


def test_a_structured_harness_command_is_not_counted_again_from_its_prose():
    response = (
        '[tool Bash] {"command": "npm test"}\n[tool result] Exit code 1\nTests:       1 failed, 1 passed, 2 total\n'
        "Here is what I ran:\n\n```console\n$ npm test\nTests:       1 failed, 1 passed, 2 total\n```\n"
    )
    assert kinds(response, "command") == {("npm test", "exit 1")}


# --- exit statuses --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "status"),
    [
        (["Exit code: 2"], 2),
        (["Exit code 3", "boom"], 3),
        (["...", "Process exited with code 0"], 0),
        (["...", "npm ERR! failed", "error Command failed with exit code 1."], 1),
        (["FAIL", "exited with code 4"], 4),
        (["out", "(exit status 5)"], 5),
        (["out", "[exit 6]"], 6),
        (["x", "exit 7"], 7),
        (["subprocess.CalledProcessError: Command 'make' returned non-zero exit status 2."], 2),
        (["subprocess.CalledProcessError: Command 'gcc a.c' returned non-zero exit status 1."], None),  # another
        (["web_1 exited with code 1", "done"], None),  # a container's, not the command's
        (["it would exit 1 if the port is taken", "done"], None),
        (["Exit code: 9", *["line"] * 10], 9),  # the first line
        (["line", "Exit code: 9", *["line"] * 5], None),  # neither first nor last
    ],
)
def test_exit_status_forms(output, status):
    assert exit_status(output, "make") == status


# --- failures -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("error: gpg failed to sign the data", "error: gpg failed to sign the data"),
        ("fatal: failed to write commit object", "fatal: failed to write commit object"),
        ("> The LLM did not conform to the edit format.", "The LLM did not conform to the edit format."),
        ("> # 1 SEARCH/REPLACE block failed to match!", "# 1 SEARCH/REPLACE block failed to match!"),
        (
            "> ## SearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in app.py",
            "## SearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in app.py",
        ),
        (
            "> Model ollama/qwen2.5-coder:7b has hit a token limit!",
            "Model ollama/qwen2.5-coder:7b has hit a token limit!",
        ),
        (
            "Credit balance is too low · Add funds: https://console.anthropic.com/settings/billing",
            "Credit balance is too low · Add funds: https://console.anthropic.com/settings/billing",
        ),
        ("  ⎿  API Error: 429 Too Many Requests", "API Error: 429 Too Many Requests"),
        ("Claude AI usage limit reached|1764000000", "Claude AI usage limit reached|1764000000"),
        (
            "You've hit your session limit · resets 7:20am (Europe/Paris)",
            "You've hit your session limit · resets 7:20am (Europe/Paris)",
        ),
        ("HTTP/1.1 429 Too Many Requests", "HTTP/1.1 429 Too Many Requests"),
        ("Error: Rate limit exceeded, retry in 20s", "Error: Rate limit exceeded, retry in 20s"),
        (
            "    Error: model 'qwen:4b' not found, try pulling it first",
            "Error: model 'qwen:4b' not found, try pulling it first",
        ),
        (
            'API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 212000 tokens > 200000 maximum"}}',
            'API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 212000 tokens > 200000 maximum"}}',
        ),
        (
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens.",
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens.",
        ),
        # A long JSON error line: its message, from the phrase on.
        (
            '{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to '
            'access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."},'
            '"request_id":"req_011CUv8yZ4nTbmKeRUMmB5Vn", "padding": "' + "x" * 120 + '"}',
            "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade "
            "or purchase credits.",
        ),
    ],
)
def test_failure_lines_are_errors_as_logged(line, error):
    structured = {v for k, v, _ in facts(f"[tool result] ok\n{line}") if k == "error"}
    assert error in structured
    assert error in {v for k, v, _ in facts(line) if k == "error"}  # in prose too


def test_aiders_failed_commit_as_it_writes_it():
    history = (
        "> Applied edit to src/bare.cpp  \n"
        "> Unable to commit: Cmd('git') failed due to: exit code(128)  \n"
        "> cmdline: git commit -m fix: Bank switching in the emulator --no-verify -- /home/dev/bare/src/bare.cpp  \n"
        "> stderr: 'error: gpg failed to sign the data  \n"
        "> fatal: failed to write commit object'  \n"
    )
    assert kinds(history, "error") == {
        ("Unable to commit: Cmd('git') failed due to: exit code(128)", None),
        ("error: gpg failed to sign the data", None),
        ("fatal: failed to write commit object", None),
    }
    assert kinds(history, "file-edit") == {("src/bare.cpp", "aider")}


@pytest.mark.parametrize(
    "line",
    [
        "Security measures will include rate limits, auth guards and a 429 Too Many Requests response.",
        'The "Model has hit a token limit!" errors are gone now.',
        "We should handle the case where the credit balance is too low.",
        "Error handling for rate limits: add backoff.",
        "The model not found page is at /404.",
        "Keep the context length in mind.",
        "If you've hit your limit, wait.",
        "    if err.type == 'rate_limit_error':",  # code that handles them
        'if e.code == "context_length_exceeded": shrink()',
        "+        raise ModelMissing(f\"model '{name}' not found\")",
    ],
)
def test_prose_about_failures_is_no_error(line):
    assert not [f for f in extract_facts(line, line) if f.kind == "error"]


def test_tracebacks_end_in_their_exception_at_their_own_indentation():
    quoted = (
        'The job log says:\n\n    Traceback (most recent call last):\n      File "job.py", line 3, in <module>\n'
        "        run()\n    RuntimeError: worker died\n\nand then it stopped.\n"
    )
    chained = (
        "Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'id'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "a.py", line 3\nLookupError\n'
    )
    assert kinds(quoted, "error") == {("RuntimeError: worker died", None)}
    assert kinds(chained, "error") == {("KeyError: 'id'", None), ("LookupError", None)}


# --- test tallies ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "tally"),
    [
        ("==================== 3 failed, 10 passed in 1.20s ====================", ("3 failed, 10 passed", "failed")),
        (
            "========= 1 failed, 2 passed, 1 error, 3 warnings in 0.31s (0:00:01) =========",
            ("1 failed, 1 error, 2 passed", "failed"),
        ),
        ("12 passed, 1 skipped in 0.08s", ("12 passed", "passed")),
        ("\x1b[32m===== 5 passed in 0.02s =====\x1b[0m", ("5 passed", "passed")),
        ("Tests:       1 failed, 1 skipped, 5 passed, 7 total", ("1 failed, 5 passed", "failed")),
        ("      Tests  2 failed | 9 passed (11)", ("2 failed, 9 passed", "failed")),
        (
            "test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s",
            ("1 failed, 3 passed", "failed"),
        ),
        ("test result: ok. 7 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out", ("7 passed", "passed")),
        (
            "ok  \tgithub.com/acme/x/api\t0.130s\nok  \tgithub.com/acme/x/db\t(cached)",
            ("2 passed (packages)", "passed"),
        ),
        ("  14 passing (52ms)\n  2 pending\n  1 failing\n\n  1) cart totals:", ("1 failed, 14 passed", "failed")),
        ("Ran 12 tests in 0.410s\n\nOK (skipped=2)", ("10 passed", "passed")),
        ("Ran 5 tests in 0.010s\n\nFAILED (failures=2, errors=1)", ("2 failed, 1 error, 2 passed", "failed")),
    ],
)
def test_test_runner_tallies(output, tally):
    assert kinds(f"[tool result] {output}", "test") == {tally}


@pytest.mark.parametrize(
    "text",
    [
        "All 10 tests passed and 0 failed.",
        "===== no tests ran in 0.01s =====",
        "3 passed",  # pytest always writes its time
        "Tests: many failed, a few passed, 3 total",
        "Ran the tests again.\n\nOK",
        "ok, the build failed",
    ],
)
def test_what_is_no_tally(text):
    assert not kinds(f"[tool result] {text}", "test") and not kinds(text, "test")


def test_the_card_sees_tests_failed_then_passed_across_turns():
    first = facts("[tool Bash] pytest -q\n[tool result] Exit code 1\nFAILED t.py::a\n1 failed, 4 passed in 0.3s")
    second = facts("[tool Bash] pytest -q\n[tool result] 5 passed in 0.3s")
    assert [d for k, _, d in (*first, *second) if k == "test"] == ["failed", "passed"]
    shown = facts_markdown([("test", "1 failed, 4 passed", "failed"), ("test", "5 passed", "passed")])
    assert "**Tests** (2)\n\n- 1 failed, 4 passed\n- 5 passed" in shown


# --- the whole of a turn, and its bounds ----------------------------------------------------------


def test_text_calls_are_plain_values():
    (call,) = text_calls("⏺ Bash(ls)\n  ⎿  Error: Exit code 2\n     ls: x: No such file")
    assert (call.tool, call.command, call.status, call.output) == ("Bash", "ls", 2, "ls: x: No such file")
    assert list(line_facts("fatal: bad object HEAD")) == [("error", "fatal: bad object HEAD", None)]


def test_a_200_kb_turn_is_read_in_bounded_time_and_finds_nothing_false():
    near_misses = "\n".join(
        [
            "⏺ Bash(" + "x" * 5_000,  # never closed
            "      " + "y" * 3_000,
            "```bash\n" * 2_000,  # blocks never closed
            "$ " + "5 " * 5_000,
            "Traceback (most recent call last):\n" * 300,
            '<tool-use data-tool-name="' + "n" * 5_000,
            "Tool use: **run_terminal_cmd**\n" * 1_000,
            "==== " + "1 failed, " * 2_000 + " in 1s ====",
            "Error:" + " " * 20_000 + "rate limit",
            "model '" + "q" * 20_000 + "' not found",
            "_**User" + "*" * 10_000,
        ]
    )
    text = (near_misses * 3)[:200_000]
    started = time.perf_counter()
    found = extract_facts(text, text)
    assert time.perf_counter() - started < 5
    assert {f.kind for f in found} <= {"error"}  # the prompt's `Error: …` lines only
    call = "⏺ Bash(git status)\n  ⎿  Error: Exit code 1\n     fatal: not a git repository\n\n"
    lots = "".join(f"⏺ Read(src/f{i}.py)\n  ⎿  Read 3 lines\n\n" for i in range(6_000))
    started = time.perf_counter()
    assert len(extract_facts("", call * (200_000 // len(call)))) == 2  # the command, its error
    assert len(extract_facts("", lots)) == MAX_FACTS
    assert time.perf_counter() - started < 5


def test_a_plain_turn_with_an_export_is_stored_with_its_facts(store, tmp_path: Path):
    path = tmp_path / "turns.jsonl"
    row = {"id": "e1", "session_id": "export-1", "prompt": "the tests fail, fix them", "response": CLAUDE_EXPORT}
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    ingest_paths([path], store)
    stored = {(f["kind"], f["value"]) for f in store.facts.for_session("export-1")}
    assert {("command", "npm test"), ("file-edit", "src/cart.js"), ("test", "6 passed")} <= stored
    assert [s["session_id"] for s in store.facts.sessions_by_file("qty.js")] == ["export-1"]
