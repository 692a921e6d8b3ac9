"""The session card (`digest.card`): a session's account from its own facts, with no model call,
and its place in the store (`store.cards`, the `session_accounts` view)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from digest.card import LINE_CHARS, TEXT_CHARS, CardTurn, SessionCard, asks, build_card, clean_prompt
from digest.ingest import ingest_paths
from digest.settings_fleet import EMBEDDED_MODEL
from digest.summary_output import SessionSummaryOutput
from digest.synthesis import SessionSummary
from resources.store.cards import leads
from resources.store.migrations import SCHEMA_VERSION

SESSION = {"session_id": "s1", "turn_count": 4, "harness": "aider", "project": "/w/app", "git_branch": "main"}


def turns(*prompts: str, last_reply: str = "") -> list[CardTurn]:
    return [CardTurn(f"t{n}", n, p, last_reply if n == len(prompts) else "") for n, p in enumerate(prompts, 1)]


def fact(turn: int, kind: str, value: str, detail: str | None = None) -> dict:
    return {"turn_id": f"t{turn}", "kind": kind, "value": value, "detail": detail}


# --- the ask --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "cleaned"),
    [
        ("/add src/app.py", ""),  # a command, not an ask
        ("/clear", ""),
        ("/ask why does the build fail on CI?", "why does the build fail on CI?"),
        ("<command-name>/model</command-name>", "/model"),
        (
            "We're currently solving the following issue within our repository. Here's the issue text:\n"
            "ISSUE:\nTimeDelta serialization precision is lost\n```python\nprint(1)\n```",
            "TimeDelta serialization precision is lost",
        ),
        ("## Fix the **navbar** padding\n- on mobile", "Fix the **navbar** padding on mobile"),
        (
            "Please solve this issue: `requests.get('http://')` raises IndexError",
            "`requests.get('http://')` raises IndexError",
        ),
        ("<pr_description>\nAdd a --dry-run flag\n</pr_description>", "Add a --dry-run flag"),
    ],
)
def test_a_prompt_is_cleaned_of_commands_templates_and_markup(prompt, cleaned):
    assert clean_prompt(prompt) == cleaned


def test_the_asks_are_the_first_real_prompt_and_the_later_changes_of_direction():
    found = asks(
        turns(
            "/add NLog.config",
            "Add an empty NLog.config file to the project.",
            "ok, continue",
            "Add the NLog.config file to the project file too",  # the same ask again
            "Now write a GitHub Actions workflow that builds on Windows",
        )
    )
    assert [(a.turn, a.text) for a in found] == [
        (2, "Add an empty NLog.config file to the project."),
        (5, "Now write a GitHub Actions workflow that builds on Windows"),
    ]


def test_an_ask_in_another_language_keeps_its_words():
    found = asks(turns("Zmenši padding v navbaru na mobilu, je moc velký.", "díky"))
    assert [a.text for a in found] == ["Zmenši padding v navbaru na mobilu, je moc velký."]


# --- the facts and the outcome --------------------------------------------------------------------


def test_the_card_lists_what_happened_each_with_its_turn():
    card = build_card(
        SESSION,
        turns(
            "Fix the failing date parser test",
            "run the tests",
            "commit it",
            "thanks",
            last_reply="All 12 tests pass now. The parser handles ISO weeks.",
        ),
        [
            fact(1, "file-edit", "src/dates/parser.py", "aider"),
            fact(1, "file-create", "tests/test_weeks.py", "aider"),
            fact(2, "file-edit", "tests/test_weeks.py", "aider"),  # created: not listed as edited too
            fact(2, "command", "pytest -q", "exit 1"),
            fact(2, "test", "1 failed, 11 passed", "failed"),
            fact(2, "error", "AssertionError: week 53"),
            fact(3, "command", "pytest -q", "exit 0"),
            fact(3, "test", "12 passed", "passed"),
            fact(3, "commit", "6bc7616a", "fix: ISO week parsing"),
        ],
    )
    assert card.title == "Fix the failing date parser test" and card.title_source == "ask"
    assert [(i.text, i.turn) for i in card.edited] == [("src/dates/parser.py", 1)]
    assert [(i.text, i.turn) for i in card.created] == [("tests/test_weeks.py", 1)]
    assert [i.text for i in card.commands] == ["pytest -q → exit 1", "pytest -q → exit 0"]
    assert [(i.text, i.turn) for i in card.tests] == [("1 failed, 11 passed", 2), ("12 passed", 3)]
    assert [i.text for i in card.commits] == ["6bc7616 fix: ISO week parsing"]
    assert (card.outcome.text, card.outcome.turn, card.outcome.turn_id) == (
        "All 12 tests pass now. The parser handles ISO weeks.",
        4,
        "t4",
    )
    line = card.line()
    assert line.startswith(
        "Asked: Fix the failing date parser test. Edited: dates/parser.py. Created: tests/test_weeks.py"
    )
    assert "Commits: 6bc7616 fix: ISO week parsing" in line and line.endswith("4 turns, aider.")
    text = card.text()
    assert (
        "Asked: Fix the failing date parser test [#1]" in text
        and "Outcome: All 12 tests pass now. The parser handles ISO weeks. [#4]" in text
    )
    assert "/w/app (main) · 4 turns · aider" in text
    assert SessionCard.from_json(card.to_json()) == card


def test_a_session_that_ended_on_an_error_says_so():
    card = build_card(
        SESSION,
        turns("hello", "ollama pull qwen:4b", last_reply="I'll try again."),
        [fact(2, "error", "Error: model 'qwen:4b' not found"), fact(2, "command", "ollama pull qwen:4b", "exit 1")],
    )
    assert card.outcome.text == "ended on: Error: model 'qwen:4b' not found"
    credit = build_card(SESSION, turns("refactor the cli"), [fact(1, "error", "Credit balance is too low")])
    assert credit.outcome.text == "ended on: Credit balance is too low"


def test_the_outcome_is_the_last_reply_after_its_tool_calls():
    reply = (
        '[tool Bash] {"command": "npm test"}\n[tool result] Tests: 3 passed\n  more output\n'
        "Done: the navbar padding is 8px on mobile now. Anything else?"
    )
    card = build_card(SESSION, turns("fix the navbar padding", last_reply=reply), [])
    assert card.outcome.text == "Done: the navbar padding is 8px on mobile now."


def test_a_summary_title_is_the_cards_title():
    card = build_card(SESSION, turns("fix it"), [], summary_title="Fix the date parser for ISO weeks")
    assert (card.title, card.title_source) == ("Fix the date parser for ISO weeks", "summary")
    assert card.line().startswith("Fix the date parser for ISO weeks.")


def test_the_card_is_bounded_however_much_happened():
    many = [fact(1 + n % 3, "file-edit", f"src/module_{n}/" + "deep/" * 30 + f"file_{n}.py") for n in range(150)]
    many += [fact(2, "command", "make " + "target " * 80, "exit 2") for _ in range(3)]
    many += [fact(3, "error", f"RuntimeError: {'x' * 400} {n}") for n in range(40)]
    card = build_card(SESSION, turns("x " * 5000, "y " * 5000, "z", last_reply="w " * 3000), many)
    assert len(card.line()) <= LINE_CHARS and len(card.text()) <= TEXT_CHARS
    assert "(+147)" in card.line()  # how many more files than it names


def test_a_session_with_no_prompt_still_has_a_card():
    card = build_card({**SESSION, "turn_count": 1}, turns("/clear"), [])
    assert card.title_source == "none" and card.line() == "(no prompt in its turns). 1 turn, aider."


# --- in the store ---------------------------------------------------------------------------------


def plain_session(path: Path, session_id: str, turns_: list[tuple[str, str]], start: int = 0) -> Path:
    lines = [
        {
            "id": f"{session_id}-{n}",
            "session_id": session_id,
            "timestamp": f"2026-11-20T10:{n:02d}:00Z",
            "prompt": prompt,
            "response": response,
        }
        for n, (prompt, response) in enumerate(turns_, start)
    ]
    with path.open("a", encoding="utf-8") as out:
        for line in lines:
            out.write(json.dumps(line) + "\n")
    return path


def accounts(store) -> list[tuple]:
    with store.file.connect() as con:
        return con.execute(
            "SELECT session_id, account, title, source_tier, degraded, raw_canonical, origin FROM session_accounts"
        ).fetchall()


def summary(session_id: str, revision: str, title: str, text: str, model: str = "m") -> SessionSummary:
    output = SessionSummaryOutput(
        summary=text, title=title, category="bugfix", quality=70, productivity=70, impact=30, complexity=20,
        technologies=["python"],
    )  # fmt: skip
    return SessionSummary(
        session_id=session_id, output=output, source_tier="raw", degraded=False, raw_canonical=True, memory_count=2,
        mini_summary_count=0, input_revision=revision, model=model, raw_tokens_estimate=100, prompt_tokens_estimate=100,
        raw_cap_tokens=2000, route_reason="within-cap", first_activity_ms=None, last_activity_ms=None,
        participating_agents=[], models=[], total_tool_calls=0, tools_used=[], source_agent_identities=[],
    )  # fmt: skip


TURNS = [
    ("The parse_week function in dates/parser.py returns week 1 for 2026-12-31; fix it.",
     "$ pytest tests/test_parser.py\nFAILED tests/test_parser.py::test_week_53\nI changed parse_week to use isocalendar."),
    ("run the tests again", "All tests pass now: parse_week returns ISO week 53 for 2026-12-31."),
]  # fmt: skip


def test_an_ingested_session_has_a_card_as_its_account_until_an_ok_summary(store, tmp_path):
    ingest_paths([plain_session(tmp_path / "s.jsonl", "s1", TURNS)], store)
    card = store.cards.card("s1")
    assert card.title.startswith("The parse_week function in dates/parser.py returns week 1")
    assert (
        card.outcome.text == "All tests pass now: parse_week returns ISO week 53 for 2026-12-31."
        and card.outcome.turn == 2
    )
    assert accounts(store) == [("s1", "card", card.title, "facts", True, False, "facts")]
    (revision,) = [s["input_revision"] for s in store.sessions.session_rows(["s1"])]
    # A junk summary (it names nothing of the session) leaves the card as the account.
    junk = store.summaries.write_summary(summary("s1", revision, "Summary", "The user asked for a summary."))
    assert junk.verdict.junk and accounts(store)[0][1] == "card"
    made = store.summaries.write_summary(
        summary("s1", revision, "Fix parse_week for ISO week 53",
                "parse_week in dates/parser.py returned week 1 for 2026-12-31; it now uses isocalendar and "
                "test_week_53 passes."),
    )  # fmt: skip
    assert made.verdict.label == "ok"
    assert accounts(store) == [("s1", "summary", "Fix parse_week for ISO week 53", "raw", False, True, "generated")]
    # The ok summary's title is the card's too.
    assert store.cards.card("s1").title == "Fix parse_week for ISO week 53"


def test_the_embedded_models_ok_summary_stays_beside_the_card_which_leads(store, tmp_path):
    ingest_paths([plain_session(tmp_path / "s.jsonl", "s1", TURNS)], store)
    card_title = store.cards.card("s1").title
    (revision,) = [s["input_revision"] for s in store.sessions.session_rows(["s1"])]
    text = "parse_week in dates/parser.py returned week 1 for 2026-12-31; it now uses isocalendar."
    made = store.summaries.write_summary(summary("s1", revision, "Fix parse_week", text, model=EMBEDDED_MODEL))
    assert made.verdict.label == "ok"
    assert accounts(store) == [("s1", "card", card_title, "facts", True, False, "facts")]
    assert store.cards.card("s1").title == card_title
    # The same summary from another model leads.
    store.summaries.write_summary(summary("s1", revision, "Fix parse_week", text, model="qwen3:4b"))
    assert accounts(store)[0][:3] == ("s1", "summary", "Fix parse_week")
    assert store.cards.card("s1").title == "Fix parse_week"


@pytest.mark.parametrize("verdict", ["ok", "echo", None])
@pytest.mark.parametrize("model", [EMBEDDED_MODEL, "qwen3:4b", None])
def test_leads_says_what_the_leading_summaries_view_selects(store, verdict, model):
    with store.file.transaction() as con:
        con.execute("CREATE TEMP TABLE probe AS SELECT ?::VARCHAR AS verdict, ?::VARCHAR AS model", [verdict, model])
        view = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'leading_summaries'").fetchone()[0]
        where = view.split(" WHERE ", 1)[1].rstrip(";")
        selected = con.execute(f"SELECT count(*) FROM probe WHERE {where}").fetchone()[0] == 1
    assert leads({"verdict": verdict, "model": model}) is selected


def test_a_grown_session_gets_its_card_made_again(store, tmp_path):
    path = plain_session(tmp_path / "s.jsonl", "s1", TURNS)
    ingest_paths([path], store)
    assert store.cards.card("s1").turn_count == 2
    plain_session(path, "s1", [("now rename parse_week to iso_week", "Renamed; 14 tests pass.")], start=2)
    ingest_paths([path], store)
    card = store.cards.card("s1")
    assert card.turn_count == 3 and card.outcome.text == "Renamed; 14 tests pass."
    assert [a.text for a in card.asks][-1] == "now rename parse_week to iso_week"


@pytest.mark.integration  # an older store migrated in place
def test_migration_16_makes_every_sessions_card(store, tmp_path):
    ingest_paths([plain_session(tmp_path / "s.jsonl", "s1", TURNS)], store)
    before = accounts(store)
    with store.file.transaction() as con:
        con.execute("DELETE FROM session_cards")
        con.execute("UPDATE schema_meta SET version = 15")
    assert accounts(store) == []
    store.migrate()
    assert accounts(store) == before
    with store.file.connect() as con:
        assert con.execute("SELECT max(version) FROM schema_meta").fetchone() == (SCHEMA_VERSION,)


@pytest.mark.integration  # an older store migrated in place
def test_the_migration_after_the_loop_rule_judges_every_summary_again(store, tmp_path):
    ingest_paths([plain_session(tmp_path / "s.jsonl", "s1", TURNS)], store)
    (revision,) = [s["input_revision"] for s in store.sessions.session_rows(["s1"])]
    loop = (
        "parse_week in dates/parser.py returns ISO week 53 now. " + "The parser also reads the week of the year. " * 6
    )
    store.summaries.write_summary(summary("s1", revision, "Fix parse_week", loop, model="qwen3:4b"))
    with store.file.transaction() as con:  # as judged before the rule
        con.execute("UPDATE session_summaries SET verdict = 'ok'")
        con.execute("UPDATE schema_meta SET version = 20")
    store.migrate()
    assert accounts(store)[0][:2] == ("s1", "card")
    with store.file.connect() as con:
        assert con.execute("SELECT verdict FROM session_summaries").fetchone() == ("echo",)


@pytest.mark.integration  # an archive written and restored
def test_a_restore_makes_the_cards_again(store, tmp_path):
    from digest.archive_read import validate_bundle

    ingest_paths([plain_session(tmp_path / "s.jsonl", "s1", TURNS)], store)
    before = store.cards.card("s1")
    bundle = validate_bundle(store.archive.write_archive(tmp_path / "out")["path"])
    with store.file.transaction() as con:
        con.execute("DELETE FROM session_cards")
    store.archive.restore_archive(bundle, "replace")
    assert store.cards.card("s1") == before


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        # Code or a listing before the words: the first sentence that reads as one.
        ("{ itemNameText.text = item.ItemName; }\nif (x != null) { y(); }\nThe port UI now shows prices.", "The port UI now shows prices."),
        ('"""Verificar la señal"""\nt = np.linspace(-2, 2, 100)\nLos tests pasan ahora.', "Los tests pasan ahora."),
        ("'BitsAllocated', 'Rows', 'Columns'\nAdded the check; 3 tests pass.", "Added the check; 3 tests pass."),
        # A session that ends on its diff (an agent's submission) says which files it changed.
        ("[exit]\ndiff --git a/pkg/core.py b/pkg/core.py\nindex 1..2 100644\n--- a/pkg/core.py\n+++ b/pkg/core.py", "submitted a diff of pkg/core.py"),
        # A head cut off mid-line is not read.
        ("x" * 3990 + "ing, still half a line.\nFixed the loader.", "Fixed the loader."),
    ],
)  # fmt: skip
def test_the_outcome_is_the_first_sentence_that_reads_as_one(reply, outcome):
    card = build_card(SESSION, turns("fix the loader", last_reply=reply), [])
    assert card.outcome.text == outcome
