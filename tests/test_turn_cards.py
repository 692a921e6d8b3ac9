"""A turn's card (`digest.turn_cards`): the line the degraded prompt gives a turn with no mini summary."""

from __future__ import annotations

from digest.summary_output import SourceTier
from digest.synthesis import FALLBACK_CHARS, compact_content, compact_entries
from digest.turn_cards import turn_card
from digest.turns import Turn, compose_document


def _turn(i: int, prompt: str, response: str, agent: str | None = None, mini: str | None = None) -> Turn:
    return Turn(
        id=f"t{i}", session_id="s", document=compose_document(prompt, "", response), agent=agent, mini_summary=mini
    )


AIDER = _turn(
    1,
    "add an empty NLog.config file",
    'NLog.config\n```\n<?xml version="1.0"?>\n```\nApplied edit to NLog.config\n'
    "Commit 6bc7616 chore: add empty NLog.config file\nI added the empty NLog.config file.",
    agent="aider",
)
TOOLS = _turn(
    2,
    "<system-reminder>Be brief.</system-reminder>\nplease run the tests and fix the failing parser",
    '[tool Bash] {"command": "pytest -q"}\n[tool result] FAILED tests/test_parse.py::test_week - AssertionError\n'
    "1 failed, 12 passed in 0.4s\nexit code 1\n"
    '[tool Edit] {"file_path": "/repo/dates/parser.py", "old_string": "a", "new_string": "b"}\n[tool result] ok\n'
    "The parser now returns ISO week 53; the failing test passes.",
)


def test_a_turn_card_says_the_ask_the_files_the_commands_and_the_reply_in_its_own_words():
    card = turn_card(AIDER)
    assert card.startswith("asked: add an empty NLog.config file; ")
    assert "NLog.config" in card and "commit: 6bc7616 chore: add empty NLog.config file" in card
    assert "; replied: " in card and len(card) <= 320
    tools = turn_card(TOOLS)
    assert "<system-reminder>" not in tools and "please run the tests and fix the failing parser;" in tools
    assert "edited: parser.py" in tools and "ran: pytest -q" in tools


def test_sessions_without_mini_summaries_send_turn_cards_and_a_turn_with_none_its_snippet():
    code_only = _turn(3, "", "{ rows[i] = grid.map((r) => r.id); }\n" * 20)
    compact = compact_entries([AIDER, code_only, TOOLS])
    assert compact.tier == SourceTier.TURN_CARDS and compact.mini_turn_ids == []
    assert compact.entries[0] == turn_card(AIDER) and compact.entries[2] == turn_card(TOOLS)
    assert compact.entries[1].startswith("User Prompt: Agent Thought: Agent Response: { rows[i]")
    # Each line is held to the snippet's size, so the prompt fits where the snippets did.
    for line in compact_content(compact.entries).splitlines():
        assert len(line.split(": ", 1)[1]) <= FALLBACK_CHARS
    assert compact_entries([code_only]).tier == SourceTier.TRUNCATED_RAW
    # A mini summary anywhere: the mini summaries' tier, the other turns as snippets, as before.
    with_mini = compact_entries([_turn(4, "p", "r", mini="Added NLog.config."), TOOLS])
    assert with_mini.tier == SourceTier.MINI_SUMMARY
    assert with_mini.entries[1].startswith("User Prompt: <system-reminder>")
