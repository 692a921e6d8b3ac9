"""What the session assets show on a partition (assets/work/views.py), in plain values read from a
real ingest into a DuckDB file: no Dagster, no run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from assets.summary_view import TURN_IDS_SHOWN, Markdown
from assets.work.sessions import SummaryOutcome
from assets.work.views import facts_view, ingest_view, made_summary_view, place_view, read_how, redactions_table
from digest.ingest import FileReport, IngestReport
from resources.store import DigestStore
from tests.bundles import ingested_harnesses

HARNESSES = Path(__file__).resolve().parents[1] / "samples" / "harnesses"
AIDER_SESSION = "aider-20261117162005-78439743b1"


@pytest.fixture(scope="module")
def ingested() -> Iterator[tuple[DigestStore, IngestReport]]:
    path, report = ingested_harnesses()
    store = DigestStore(path, read_only=True)
    with store.file.held():  # one connection for the module's reads, not a database started for each
        yield store, report


def test_the_ingest_view_counts_the_run_and_lists_each_file(ingested):
    _, report = ingested
    view = ingest_view(report, new_partitions=6)
    assert (view["files"], view["turns"], view["new_partitions"]) == (5, report.turns, 6)
    assert view["skipped"] == {"not-a-log-by-name": 1} and "vector_problems" not in view
    rows = view["files_preview"].value.splitlines()[2:]
    assert len(rows) == 5 and all(row.count("|") == 11 for row in rows)
    assert any("| claude-code | new |" in row for row in rows) and any("| aider | new |" in row for row in rows)
    # Nothing read: no table, and no entry for what did not happen.
    assert ingest_view(type(report)(), 0)["files_preview"] == Markdown("no files")


def test_how_a_file_was_read_and_the_sessions_redacted():
    assert read_how(FileReport("a.jsonl", "codex", read="appended", from_line=41)) == "appended from line 41"
    assert read_how(FileReport("a.md", "aider", read="rewritten")) == "rewritten"
    table = redactions_table(Counter({"b": 2, "a": 2, "c": 5}))
    assert table.splitlines()[2:] == ["| `c` | 5 |", "| `a` | 2 |", "| `b` | 2 |"]  # most first, then by id
    many = redactions_table({f"s{i:03}": 1 for i in range(TURN_IDS_SHOWN + 3)})
    assert many.endswith("… and 3 more") and many.count("| 1 |") == TURN_IDS_SHOWN


def test_a_made_summary_shows_the_sessions_facts_card_and_place(ingested):
    store, _ = ingested
    facts = facts_view(store, AIDER_SESSION)
    assert facts["facts"].value.startswith("**Files edited or created**")
    assert "`cli.py` (edited)" in facts["facts"].value
    assert facts["card"].value.startswith("### add a --verbose flag")
    assert place_view(store, AIDER_SESSION) == {"project": str(HARNESSES), "git_branch": "unknown"}
    assert place_view(store, "no-such-session") == {"project": "unknown", "git_branch": "unknown"}
    made = SummaryOutcome(AIDER_SESSION, row={"session_id": AIDER_SESSION})
    assert made_summary_view(store, made) == {**facts, **place_view(store, AIDER_SESSION)}
    # A run that made no summary, or kept the one there, shows none of it.
    for outcome in (
        SummaryOutcome(AIDER_SESSION),
        SummaryOutcome(AIDER_SESSION, row={}, failure="the host is down"),
        SummaryOutcome(AIDER_SESSION, row={}, skipped="nothing to do"),
        SummaryOutcome(AIDER_SESSION, row={}, kept="junk"),
    ):
        assert made_summary_view(store, outcome) == {}
