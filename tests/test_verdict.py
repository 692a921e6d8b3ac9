"""The verdict on a summary (digest/verdict.py) on hand-written sessions, and in the store."""

from __future__ import annotations

import json

from digest.prompts import SUMMARY_INSTRUCTIONS, SUMMARY_PARTS, TOOL_CALLS_LABEL
from digest.repeats import SHOWN_EARLIER, marker
from digest.verdict import JUNK, VERDICTS, content_words, judge, judge_mini, own_words

TURNS = [
    "User Prompt: Fix #13904: the grid selection jumps after a sort.\n"
    "Agent Thought: the bug is in src/grid/RowModel.mjs, where getSelection() reads a stale buffer_range.\n"
    "Agent Response: RowModel stores row indices; after a sort the index points at another record.",
    "User Prompt: go ahead.\nAgent Response: I switched RowModel to record keys, kept selectRow(index) as a "
    "wrapper, added a regression test in RowModel.spec.mjs and ran `npm test`: 41 passed. Commit 3f9c2ab1.",
]
FAITHFUL = (
    "Fix grid selection after sort (#13904)",
    "RowModel kept row indices, so a sort moved the selection to another record. It now stores record keys, "
    "selectRow(index) stays as a wrapper, and RowModel.spec.mjs has a regression test; npm test passes.",
)


def test_the_labels():
    assert VERDICTS[0] == "ok" and JUNK == set(VERDICTS) - {"ok"}


def test_a_faithful_summary_is_ok_with_its_evidence():
    verdict = judge(TURNS, *FAITHFUL)
    assert verdict.label == "ok", verdict.evidence
    assert verdict.evidence["precision"] == 1.0 and verdict.evidence["copied"] < 0.2
    json.loads(verdict.json())
    assert "`ok`" in verdict.markdown()


def test_each_kind_of_junk_is_named():
    echo = judge(TURNS, "Fix", " ".join(TURNS)[:400])
    assert echo.label == "echo" and echo.evidence["fragments"][0]["source"] == "session"
    fabricated = judge(TURNS, FAITHFUL[0], FAITHFUL[1] + " See #14001 and src/grid/ColumnBuffer.mjs.")
    assert fabricated.label == "fabricated" and {"#14001", "columnbuffer.mjs"} <= set(
        fabricated.evidence["unknown_identifiers"]
    )
    template = judge(TURNS, "Summary", "This [action] will create a new file [file_name] in the project.")
    assert template.label == "template" and "[file_name]" in template.evidence["placeholders"]
    # The scaffolding the project writes into its prompts, from its own constants: a repeat marker as
    # the title of a faithful summary, a metadata label of the summary prompt.
    marked = judge(TURNS, marker(1), FAITHFUL[1])
    assert marked.label == "template" and marked.evidence["scaffolding"] == [marker(1)]
    label = judge(TURNS, FAITHFUL[0], f"{FAITHFUL[1]} {TOOL_CALLS_LABEL} 4")
    assert label.label == "template" and label.evidence["scaffolding"] == [TOOL_CALLS_LABEL]
    assert judge(TURNS, FAITHFUL[0], f"{FAITHFUL[1]} The failure {SHOWN_EARLIER} is gone.").label == "ok"
    fields = judge(TURNS, "Summary", "The goal: 1.0, the key decisions: 2.0, the code that was modified: 3.0.")
    assert fields.label == "template"
    assert judge(TURNS, "AI-Agent Work Session", "The user asked for a summary of the changes made.").label == (
        "content-free"
    )
    assert judge(TURNS, "Title", " ... ").label == "empty"
    assert judge(["short session text"], "Title", "A summary much longer than the session it summarizes.").label == (
        "too-long"
    )
    # A summary that is only the labels a turn is written with (issue 36.4: "Sıpır 12: User Prompt:").
    only_labels = judge(TURNS, FAITHFUL[0], "Sıpır 12: User Prompt:")
    assert only_labels.label == "template" and "only labels: User Prompt:" in only_labels.evidence["template_fields"]
    assert judge(TURNS, FAITHFUL[0], "The User Prompt: asked for " + FAITHFUL[1]).label == "ok"
    # A title that is one line of a tool's output, word for word; the user's own ask is a fair title.
    aider = [*TURNS, "User Prompt: /run make\nAgent Thought: \nAgent Response: > Tokens: 703 sent, 1.1k received."]
    copied = judge(aider, "Tokens: 703 sent, 1.1k received.", FAITHFUL[1])
    assert copied.label == "echo" and copied.evidence["title_copied"].endswith("> Tokens: 703 sent, 1.1k received.")
    assert judge(aider, "Fix #13904: the grid selection jumps after a sort.", FAITHFUL[1]).label == "ok"
    # The prompt's field list given back, or a field with a bare number; a reply that continues the
    # prompt's sentence; a title with no word; a summary whose one identifier is the only thing it says.
    listed = judge(TURNS, FAITHFUL[0], "The summary covers the goal, the key decisions, and the outcome of it all.")
    assert listed.label == "template"
    assert judge(TURNS, FAITHFUL[0], f"The goal: 12.0, then {FAITHFUL[1]}").label == "template"
    assert judge(TURNS, FAITHFUL[0], f"The outcome: 41 tests pass. {FAITHFUL[1]}").label == "ok"
    assert judge(TURNS, FAITHFUL[0], ", a summary of " + FAITHFUL[1]).label == "template"
    assert judge(TURNS, "36", FAITHFUL[1]).label == "empty"
    vague = judge(TURNS, "Faster grids", "The goal was to make the RowModel faster for users on GitHub.")
    assert vague.label == "content-free" and vague.evidence["grounded_identifiers"] == ["github", "rowmodel"]
    # Against what the model was given, when the caller knows it (a degraded prompt's content).
    assert judge(TURNS, *FAITHFUL, input_chars=120).label == "too-long"


def test_the_verdict_reads_the_prompts_own_words():
    # The parts the summary field asks for come from the prompt's text, so a reworded prompt moves
    # the template rule with it.
    assert {"goal", "key decisions", "outcome"} <= set(SUMMARY_PARTS)
    assert all(part in SUMMARY_INSTRUCTIONS.lower() for part in SUMMARY_PARTS if part != "modified code")
    given_back = ", ".join(f"the {part}" for part in SUMMARY_PARTS[:3])
    assert judge(TURNS, FAITHFUL[0], f"{FAITHFUL[1]} It covers {given_back}.").label == "template"
    assert judge(TURNS, FAITHFUL[0], f"The {SUMMARY_PARTS[-1]}: 3.0, then {FAITHFUL[1]}").label == "template"


def test_the_labelled_set_precision_and_recall_per_class_hold_their_floor():
    """tests/fixtures/verdicts.jsonl, labelled by hand (BENCHMARKS.md §14): each verdict's precision and
    recall on it, and junk of any class told from ok."""
    from tests.verdict_cases import judged, junk_against_ok, per_class

    rows = judged()
    assert len(rows) >= 60 and {r["label"] for r in rows} == set(VERDICTS)
    figures = per_class(rows)
    for label, floor in FLOORS.items():
        assert figures[label]["precision"] >= floor[0] and figures[label]["recall"] >= floor[1], (label, figures)
    junk_precision, junk_recall = junk_against_ok(rows)
    assert junk_precision >= 0.9 and junk_recall >= 0.9, (junk_precision, junk_recall)
    # The export's own summaries are never junk.
    assert all(r["verdict"] == "ok" for r in rows if r["source"] == "export")


def test_the_held_out_set_keeps_junk_out_of_ok():
    """bench/data/verdict_blind.jsonl (issue 36.4): the embedded model's summaries of sessions the rules
    were not written beside, labelled by reading each before the verdict was run on it. Batch 1 was
    measured first (ok precision 0.36, junk recall 0.75) and then tuned on; BENCHMARKS.md has both."""
    from tests.verdict_cases import judged, junk_against_ok, per_class

    rows = judged(blind=True)
    assert len(rows) >= 30
    junk_precision, junk_recall = junk_against_ok(rows)
    assert per_class(rows)["ok"]["precision"] >= 0.9 and junk_recall >= 0.8, (per_class(rows)["ok"], junk_recall)
    assert junk_precision >= 0.9, junk_precision


# (precision, recall) floors per verdict: the set measures 1.0 for each (BENCHMARKS.md §14); one miss
# in a class of 6-13 rows stays above its floor, two do not.
FLOORS = {
    "ok": (0.9, 0.9),
    "echo": (0.9, 0.9),
    "fabricated": (0.9, 0.9),
    "template": (0.8, 0.8),
    "content-free": (0.8, 0.8),
    "empty": (1.0, 1.0),
    "too-long": (1.0, 1.0),
}


def test_a_summary_caught_in_a_loop_is_an_echo_of_itself():
    # The embedded model's summary of a real session, its last sentence said seven times over.
    loop = "RowModel keeps the selected record after a sort. " + "It also stores the record keys of every row. " * 7
    looping = judge(TURNS, "RowModel selection after sort", loop)
    assert looping.label == "echo" and "of its words in a phrase it repeats" in looping.evidence["reason"]
    assert looping.evidence["repeated"] >= 0.8
    # Naming the same file and test twice is not a loop.
    twice = FAITHFUL[1] + " RowModel.spec.mjs passes; npm test passes."
    assert judge(TURNS, FAITHFUL[0], twice).label == "ok"


# --- a turn's mini summary (`judge_mini`): the turn's own words are fine, saying nothing is not ------------

MINI_TURN = (
    "User Prompt: Count how many VDOM deltas each scroll step produces.\nAgent Thought: \n"
    "Agent Response: Counted about 4,100 deltas per scroll step, mostly attribute and text updates on recycled "
    "rows. Added a temporary counter to `createDeltas` in src/util/VdomHelper.mjs."
)


def test_a_mini_summary_in_the_turns_own_words_is_ok():
    for line in (
        "Added a temporary counter to `createDeltas`: about 4,100 deltas per scroll step.",
        "Counted about 4,100 VDOM deltas per scroll step, mostly updates on recycled rows.",
        "Deltas per scroll step: 4,100, most of them attribute and text updates.",
    ):
        assert judge_mini(MINI_TURN, line).label == "ok", line


def test_a_mini_summary_that_says_nothing_of_its_turn_is_junk():
    shown = marker(1)
    cases = {
        f"{shown} {shown}": "empty",  # the prompt's repeat markers and nothing else
        "``` ``` ``` ```": "empty",
        "I'm ready to continue with the next step. Please go ahead and continue with the next step.": "content-free",
        "Your code is indeed very efficient and easy to use, but it is not optimized for large datasets.": "content-free",
        "The next step builds on the previous one, and the next step builds on the previous one. " * 3: "echo",
        "Fixed the flaky timeout in src/grid/ScrollManager.mjs by waiting for scrollDone (#13911).": "fabricated",
    }
    for line, label in cases.items():
        verdict = judge_mini(MINI_TURN, line)
        assert verdict.label == label, (line, verdict.evidence)
        assert verdict.junk and verdict.evidence["reason"]


def test_a_short_turn_lends_its_mini_summary_only_the_words_it_has():
    short = "User Prompt: List the tests.\nAgent Thought: \nAgent Response: All 214 pass."
    assert judge_mini(short, "List the tests: all 214 pass").label == "ok"
    assert judge_mini(short, "The server delivered the packages to the client.").label == "content-free"


def test_own_words_are_whole_words_of_the_source_lowering_and_all():
    source = "the retry-budget of istanbul_cache ran out; i̇zmir was fine. reconnecting"
    words = content_words("Retry budget Istanbul cache İzmir Reconnect reconnecting")
    # "cache" is inside `istanbul_cache` (one run of word characters): not whole; "İzmir" lowers to
    # a dotted i whose dot is no word character, and is found as the source spells it.
    assert own_words(words, source) == ["budget", "i̇zmir", "reconnecting", "retry"]
