"""The fidelity score (digest/fidelity.py) on hand-written sessions with known identifiers."""

from __future__ import annotations

import json

import pytest

from digest.fidelity import FLOOR, extract, fallback_terms, fidelity, score, session_terms
from digest.invariants import fidelity_problems

SESSION = """User Prompt: Fix #13904: the grid selection jumps after a sort.
Agent Thought: the bug is in src/grid/RowModel.mjs, where getSelection() reads a stale buffer_range.
```js
const rows = RowModel.sortRows(store.items);   // TypeError when items is undefined
```
Agent Response: I ran `npm test` and fixed RowModel; see https://github.com/neomjs/neo/pull/13905.
"""


def test_the_identifiers_of_a_session_are_found_in_prose_code_paths_and_refs():
    terms = extract(SESSION)
    for key in ("#13904", "#13905", "rowmodel", "getselection", "buffer_range", "sortrows", "typeerror", "npm test"):
        assert key in terms, key
    assert terms["rowmodel"] == 3  # the path, the class in the code block, the prose


def test_a_summary_that_names_them_all_scores_1_none_0_half_in_between():
    everything = "Fixed #13904 and #13905: RowModel getSelection buffer_range sortRows TypeError, npm test."
    assert fidelity([SESSION], "Fix", everything).score == 1.0
    assert fidelity([SESSION], "AI-Agent Work Session", "The user asked for a summary of the changes.").score == 0.0
    half = fidelity([SESSION], "Fix grid selection (#13904)", "Fixed RowModel.spec.mjs and getSelection.")
    assert 0.3 < half.score < 0.8
    assert set(half.found) == {"#13904", "rowmodel", "getselection"} and "typeerror" in half.missed


def test_a_session_terms_are_its_turns_summed_and_no_command_takes_the_next_turn_word():
    assert session_terms(["Fixed RowModel", "RowModel again, see #4711"]) == {"rowmodel": 2, "#4711": 1}
    assert extract("ran git\nstatus_code is clean") == {"git status_code": 1}
    assert session_terms(["ran git", "status_code is clean"]) == {"status_code": 1}
    with pytest.raises(TypeError, match="turn documents"):
        session_terms("Fixed RowModel")
    assert session_terms(["the harvest festival", "was great"]) == fallback_terms("the harvest festival\nwas great")


def test_matching_is_case_insensitive_and_tolerant_of_a_file_name_for_its_stem():
    terms = extract("We changed RowModel twice. RowModel is the class.")
    assert score(terms, "edited rowmodel.spec.mjs").score == 1.0
    assert score(terms, "edited rowmodels").score == 0.0  # a word bound, not a substring


def test_non_ascii_text_around_identifiers():
    session = "Benutzer: Die Größe in GridView ändern, Fehler in calc_größe? 表示が崩れる #4711"
    result = fidelity([session], "GridView のサイズ", "Größe von GridView korrigiert (#4711)")
    assert {"gridview", "#4711"} <= set(result.found) and result.score > 0.5


def test_frequent_terms_of_the_store_weigh_less_than_the_session_own():
    terms = extract("AGENTS.md says run npm test. Fixed ColumnBuffer.")
    df = {"agents": 99, "npm test": 99, "columnbuffer": 1}
    assert score(terms, "ColumnBuffer", df, n_sessions=100).score > 0.65
    assert score(terms, "AGENTS.md npm test", df, n_sessions=100).score < 0.35


def test_no_text_scores_none_and_a_text_without_identifiers_falls_back_to_words():
    assert fidelity(["   "], "t", "s").score is None
    plain = fidelity(["The committee discussed the harvest festival schedule."], "Festival", "harvest schedule")
    assert plain.score is not None and plain.score > 0.5


def test_the_check_warns_under_the_floor_only():
    row = {"fidelity": FLOOR / 2, "origin": "generated", "source_tier": "raw", "title": "t"}
    assert fidelity_problems(row) and not fidelity_problems({**row, "fidelity": FLOOR})
    assert not fidelity_problems({**row, "fidelity": None})


def test_status_has_fidelity_by_tier_and_the_imported_sample_is_scored(samples_store):
    store = samples_store  # the samples' export ingested
    by_tier = store.reports.status()["fidelity_by_tier"]
    imported = by_tier["raw"]["imported"]
    assert imported["summaries"] == imported["scored"] == 1 and 0 < imported["mean"] <= 1
    [example] = store.reports.fidelity_examples()
    assert example["origin"] == "imported" and round(example["fidelity"], 3) == imported["mean"]


def test_the_friction_report_rows_by_tier_and_degraded_against_raw_per_host():
    from digest.friction_report import degraded_against_raw, fidelity_rows

    rows = [
        {"source_tier": "raw", "route_reason": "within-cap", "origin": "generated", "host": "a", "degraded": False,
         "fidelity": 0.6},
        {"source_tier": "miniSummary", "route_reason": "over-raw-cap", "origin": "generated", "host": "a",
         "degraded": True, "fidelity": 0.2},
        {"source_tier": "raw", "route_reason": "imported", "origin": "imported", "host": None, "degraded": False,
         "fidelity": 0.9},
        {"source_tier": "raw", "route_reason": "within-cap", "origin": "generated", "host": "a", "degraded": False,
         "fidelity": None},
    ]  # fmt: skip
    assert fidelity_rows(rows) == [
        ["miniSummary", "over-raw-cap", "generated", "1", "0.20"],
        ["raw", "imported", "imported", "1", "0.90"],
        ["raw", "within-cap", "generated", "1", "0.60"],
    ]
    assert degraded_against_raw(rows) == [["a", "1", "0.60", "1", "0.20", "-0.40"]]


def test_a_bare_url_scheme_names_nothing_and_raises_nothing():
    # Real transcripts hold `f"http://{host}:{port}"`: the token `http://` alone once aborted an ingest.
    terms = extract('url = f"http://{host}:{port}" and https:// then http:/// see https://example.org/docs/')
    assert "" not in terms and "example.org/docs" in terms


def _sample(session_id: str) -> tuple[list[str], str, str]:
    """A sample session's turn documents, and its export's own summary (title, text)."""
    import json
    from pathlib import Path

    from tests.verdict_cases import sessions

    bundle = Path(__file__).resolve().parents[1] / "samples" / "bundle"
    [line] = [
        line
        for line in (next(bundle.glob("summaries-backup-*.jsonl"))).read_text(encoding="utf-8").splitlines()
        if session_id in line
    ]
    exported = json.loads(line)
    return [t.document for t in sessions()[session_id]], exported["metadata"]["title"], exported["document"]


def test_copying_or_inventing_names_cannot_outscore_the_export_or_a_faithful_summary():
    documents, title, summary = _sample("d23f0824-128b-4f33-8c5c-7fd0a6a3a450")
    text = "\n".join(documents)
    reference = fidelity(documents, title, summary)
    faithful = fidelity(
        documents,
        "Grid selection follows the record after sorting",
        "Issue #13904: a selected row lost its highlight after a sort because RowModel stored row indices. "
        "RowModel and CellModel now keep record keys, selectRow(index) stays as a wrapper, and RowModel.spec.mjs "
        "gained regression tests.",
    )
    assert reference.score > 0.3 and faithful.score > 0.3
    for n in (300, 800, 2000, len(text)):  # the turns verbatim, however much of them
        echo = fidelity(documents, "Fix", text[:n])
        assert echo.copied > 0.9 and echo.score < min(reference.score, faithful.score) / 4, n
    # The reference's own words plus names no turn has: each invented name costs its share.
    fabricated = fidelity(documents, title, summary + " Fixed in GridSelectionManager.mjs (3f9c2ab), closes #13907.")
    assert fabricated.recall >= reference.recall and fabricated.precision < 0.75
    assert fabricated.score < reference.score * 0.75


def test_the_score_is_recall_times_precision_times_what_is_not_copied():
    terms = extract(SESSION)
    plain = score(terms, "Fixed #13904 in RowModel")
    cut = score(terms, "Fixed #13904 in RowModel", precision=0.5, copied=0.2)
    assert cut.recall == plain.recall == plain.score and cut.score == round(plain.recall * 0.5 * 0.8, 4)


def test_the_store_judges_and_scores_every_summary_again_from_its_turns(samples_store):
    from resources.store.fidelity import judge_stored, refresh_fidelity

    store = samples_store  # the samples' export ingested
    sid = "d23f0824-128b-4f33-8c5c-7fd0a6a3a450"
    imported = store.summaries.summary_row(sid)
    assert imported["origin"] == "imported" and imported["verdict"] == "ok"
    evidence = json.loads(imported["verdict_evidence"])
    assert evidence["precision"] == 1.0 and "#13904" in evidence["grounded_identifiers"]
    text = "\n".join(_sample(sid)[0])
    with store.file.transaction() as con:
        assert judge_stored(con, sid, "Fix", text[:900]).label == "echo"
        con.execute("UPDATE session_summaries SET summary = ? WHERE session_id = ?", [text[:900], sid])
        refresh_fidelity(con, [sid])
    echoed = store.summaries.summary_row(sid)
    assert echoed["verdict"] == "echo" and echoed["fidelity"] < imported["fidelity"] / 4
    assert json.loads(echoed["verdict_evidence"])["fragments"][0]["source"] == "session"
