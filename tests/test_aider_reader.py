"""The aider reader on the histories aider 0.4x and 0.86 write (tests/fixtures/harnesses/aider/):
the model's own `#### ` headings, slash commands, reasoning blocks and each banner's model."""

from __future__ import annotations

import json

from tests.harness_fixtures import FIXTURES, read_file, turns

V04X = FIXTURES / "aider" / "0.4x" / ".aider.chat.history.md"
V086 = FIXTURES / "aider" / "0.86" / ".aider.chat.history.md"


def test_the_replys_own_headings_and_slash_commands_start_no_turn():
    [turn] = turns(V04X)  # one prompt: `/add`, `/run` and `/drop` are kept in its turn
    assert turn["prompt"] == "the cart total ignores discounts"
    response = turn["response"]
    for heading in ("#### Changes", "#### Why this works", "#### Notes"):
        assert heading in response  # the reply is one reply, not four turns
    assert response.startswith("[command] /add app.py\n\n> Added /home/dev/shop/app.py to the chat")
    # `/run` is a tool call, the `> ` lines after it its output.
    assert "[tool run] pytest -q\n[output] ...\n3 passed in 0.05s\nAdd the output to the chat? y\n[command]" in response
    assert response.endswith("[command] /drop app.py\n\n> Removed app.py from the chat")
    assert turn["amount_tool_calls"] == 1 and json.loads(turn["tools_used"]) == ["run"]
    assert turn["model"] == "gpt-4-1106-preview"  # from the v0.4x `> Models:` banner
    assert turn["source_line"] == 10  # counted at `/add`, the first input of the turn the prompt fills
    assert turn["project"] == str(V04X.parent) and turn["git_branch"] is None


def test_reasoning_goes_to_the_thought_and_a_fenced_heading_stays_in_the_reply():
    first, second = turns(V086)
    assert first["prompt"] == "how do I make the README's install section a heading?"
    assert first["thought"] == "The user wants a level-4 heading. Markdown uses `####` for that."
    assert "thinking-content" not in first["response"]
    assert "```markdown\n#### Install\npip install shop\n```\n\n#### Install\n\nThat line" in first["response"]
    assert "[tool run] git status --short\n[output] M README.md" in first["response"]  # `!cmd` is `/run`
    assert second["prompt"] == "ok, do it" and "#### Install\n>>>>>>> REPLACE" in second["response"]
    # An answer aider gave itself, logged as input, is kept in the turn.
    assert (
        "[command] Apply edits to README.md? (Y)es/(N)o/(A)ll/(S)kip all/(D)on't ask again [Yes]: all"
        in second["response"]
    )
    assert {t["model"] for t in (first, second)} == {"deepseek/deepseek-reasoner"}


def test_a_history_whose_trailing_spaces_were_trimmed_still_tells_inputs_by_blank_lines_and_fences(tmp_path):
    path = tmp_path / ".aider.chat.history.md"
    path.write_text("\n".join(line.rstrip() for line in V086.read_text().splitlines()) + "\n")
    got = turns(path)
    # Without the line breaks a heading after a blank line cannot be told from an input: the one
    # inside the fence stays in the reply, the one after it starts a turn.
    assert [t["prompt"] for t in got] == [
        "how do I make the README's install section a heading?",
        "Install",
        "ok, do it",
    ]
    assert "```markdown\n#### Install\npip install shop\n```" in got[0]["response"]


def test_a_session_of_commands_alone_is_one_turn_and_every_line_is_counted(tmp_path):
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(
        "\n# aider chat started at 2026-01-05 10:00:00\n\n> Aider v0.86.1  \n\n"
        "#### /add a.py  \n\n> Added a.py to the chat  \n\n#### /tokens  \n\n> 1.2k tokens  \n"
    )
    reads = read_file(path)
    [turn] = [r.row for r in reads if r.outcome == "turn"]
    assert (
        turn["prompt"] == ""
        and turn["response"] == "[command] /add a.py\n\n> Added a.py to the chat\n\n[command] /tokens\n\n> 1.2k tokens"
    )


def test_a_think_block_the_model_wrote_is_its_thought_but_not_inside_a_fence(tmp_path):
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(
        "\n# aider chat started at 2026-01-05 10:00:00\n\n#### explain the tags  \n\n"
        "<think>\nThey want XML.\n</think>\n\n```xml\n<think>\n```\n\nThat is the tag.\n"
    )
    [turn] = turns(path)
    assert turn["thought"] == "They want XML." and turn["response"] == "```xml\n<think>\n```\n\nThat is the tag."


def test_the_prompt_aider_logs_again_after_ask_or_code_is_the_same_turn(tmp_path):
    """`/ask Q` is logged, then Q again as the coder takes it: one ask, answered once."""
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(
        "\n# aider chat started at 2024-08-26 16:36:00\n\n> Aider v0.52.1  \n\n"
        "#### /ask which file renders the products?  \n\n####  which file renders the products?  \n\n"
        "app/routes/collections.tsx renders them.\n\n"
        "#### /code make the grid two columns  \n\n####  make the grid two columns  \n\nDone: grid-cols-2.\n\n"
        "#### /ask which file renders the products?  \n\nThe same one.\n\n"
        "#### which file renders the products?  \n\nStill collections.tsx.\n"
    )
    got = turns(path)
    assert [(t["prompt"], t["response"]) for t in got] == [
        ("/ask which file renders the products?", "app/routes/collections.tsx renders them."),
        ("/code make the grid two columns", "Done: grid-cols-2."),
        # Answered in between: a question asked again is a turn of its own.
        ("/ask which file renders the products?", "The same one."),
        ("which file renders the products?", "Still collections.tsx."),
    ]
