"""A property test of the text formats' facts (`digest.text_facts` through `digest.facts`): any mix
of their pieces gives well-formed facts, and what only a prompt holds is never a run or a file. In
the stress tier with the other property tests: hypothesis's import and its 300 examples were the
largest test of the unit tier (`make test-fast`)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from digest.facts import KINDS, MAX_VALUE_CHARS, extract_facts

# Pieces of every format read here, put together at random.
PIECES = [
    "⏺ Bash(", "● Update(", "⏺ Write(", "a.py", "git status", ")", ") timeout: 30s", "\n", "\n\n", "  ⎿  ",
    "      ", "     ", "Error: Exit code 1", "Error", "Updated a.py", "```bash", "```console", "```", "```text",
    "$ ", "bash-$ ", "5", "npm test", "_**User**_", "_**Agent (m)**_", "_****_", '<tool-use data-tool-type="shell" '
    'data-tool-name="run_terminal_cmd">', "</tool-use>", "Tool use: **edit_file**", "<summary>Tool use: **Bash**",
    "Run command: ls", "Edit file: b.py", "Read file: c.py", "@@ -0,0 +1 @@", "@@ -1,1 +1,2 @@", "- ", "---",
    "<think>", "</think>", "Traceback (most recent call last):", "  File x", "ValueError: x", "=== ", "1 failed, ",
    "2 passed", " in 0.1s", " ===", "Tests:  ", ", 3 total", "Ran 3 tests in 0.1s", "OK", "FAILED (failures=1)",
    "exit 1", "Exit code: 2", "fatal: x", "> ", "stderr: '", "API Error: 429", "rate limit", "&amp;",
]  # fmt: skip


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(st.sampled_from(PIECES), max_size=60))
def test_any_mix_of_the_formats_gives_well_formed_facts_and_none_from_a_prompt(pieces):
    text = "".join(pieces)
    found = extract_facts("", text)
    for fact in found:
        assert fact.kind in KINDS and fact.value and len(fact.value) <= MAX_VALUE_CHARS
        if fact.kind == "command":
            assert fact.detail is None or re.fullmatch(r"exit -?\d+", fact.detail)
        if fact.kind == "test":
            assert fact.detail in ("failed", "passed")
    # What only the prompt holds is never a run or a file (its errors and tallies stay).
    assert {f.kind for f in extract_facts(text, "")} <= {"error", "test", "commit", "issue", "pr"}
