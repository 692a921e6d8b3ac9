"""The verdict on a summary (digest/verdict.py) on hand-written sessions, and in the store."""

from __future__ import annotations

import json

from digest.verdict import JUNK, VERDICTS, judge

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
    assert fabricated.label == "fabricated" and {"#14001", "columnbuffer"} <= set(
        fabricated.evidence["unknown_identifiers"]
    )
    template = judge(TURNS, "Summary", "This [action] will create a new file [file_name] in the project.")
    assert template.label == "template" and "[file_name]" in template.evidence["placeholders"]
    fields = judge(TURNS, "Summary", "The goal: 1.0, the key decisions: 2.0, the code that was modified: 3.0.")
    assert fields.label == "template"
    assert judge(TURNS, "AI-Agent Work Session", "The user asked for a summary of the changes made.").label == (
        "content-free"
    )
    assert judge(TURNS, "Title", " ... ").label == "empty"
    assert judge(["short session text"], "Title", "A summary much longer than the session it summarizes.").label == (
        "too-long"
    )
