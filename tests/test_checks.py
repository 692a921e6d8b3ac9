"""The asset checks: each passes on summaries the real synthesis made and fails on a crafted violation."""

from __future__ import annotations

import pytest

from digest.synthesis import summarize_session
from pipelines.checks import (
    no_raw_summary_over_its_cap,
    raw_cap_problems,
    store_checks,
    summaries_have_complete_provenance,
    summaries_match_output_schema,
)
from resources.bindings import DigestStoreResource
from resources.model_clients import OpenAIChatClient
from resources.store import DigestStore, RunLedger
from tests.conftest import make_limits, make_turns
from tests.model_server import ModelServer


@pytest.fixture(scope="module")
def clean_store(tmp_path_factory) -> DigestStore:
    """One summary per source tier, made by the real synthesis over real HTTP (raw cap 2000)."""
    store = DigestStore(tmp_path_factory.mktemp("clean") / "digest.duckdb")
    store.migrate()
    sessions = {
        "small": make_turns("small", 3),  # raw
        "big": make_turns("big", 40, doc_bytes=400, minis=40),  # miniSummary
        "bare": make_turns("bare", 40, doc_bytes=400),  # truncatedRaw
    }
    with ModelServer() as server:
        client = OpenAIChatClient(server.url, "fake-model")
        for turns in sessions.values():
            result = summarize_session(turns, client, make_limits(), RunLedger(store, "run-1"))
            store.write_summary(result.summary, run_id="run-1")
    tiers = store.query("SELECT session_id, source_tier FROM session_summaries ORDER BY 1")
    assert tiers.values.tolist() == [["bare", "truncatedRaw"], ["big", "miniSummary"], ["small", "raw"]]
    return store


@pytest.fixture
def store(clean_store, tmp_path) -> DigestStore:
    """A private copy of the clean store, for one crafted violation."""
    copy = tmp_path / "digest.duckdb"
    copy.write_bytes(clean_store.path.read_bytes())
    return DigestStore(copy)


def _run_checks(store: DigestStore) -> dict:
    resource = DigestStoreResource(db_path=str(store.path), inbox=str(store.path.parent))
    return {check.check_key.name: check(store=resource) for check in store_checks}


def test_every_check_passes_on_clean_summaries(store):
    for name, result in _run_checks(store).items():
        assert result.passed, name
        assert result.metadata["summaries_checked"].value == 3
        assert result.metadata["violations"].value == 0


VIOLATIONS = [
    (summaries_have_complete_provenance, "big", "degraded = false", "contradicts source_tier 'miniSummary'"),
    (summaries_have_complete_provenance, "small", "run_id = NULL", "run_id is empty"),
    (summaries_have_complete_provenance, "small", "route_reason = 'over-raw-cap'", "contradicts source_tier 'raw'"),
    (summaries_have_complete_provenance, "bare", "mini_summary_count = 3", "truncatedRaw although turns had mini"),
    (summaries_have_complete_provenance, "big", "input_revision = 'r1'", "not a sha256 revision"),
    (no_raw_summary_over_its_cap, "small", "raw_tokens_estimate = raw_cap_tokens + 1", "over the raw cap 2000"),
    (summaries_match_output_schema, "small", "quality = 150", "quality: Input should be less than or equal to 100"),
    (summaries_match_output_schema, "big", "title = 'one two three four five six seven eight nine ten eleven'",
     "title has 11 words"),
    (summaries_match_output_schema, "bare", "category = 'chitchat'", "category: Input should be"),
]  # fmt: skip


@pytest.mark.parametrize(("check", "session_id", "assignment", "problem"), VIOLATIONS)
def test_each_check_fails_on_its_crafted_violation_and_only_that_check(store, check, session_id, assignment, problem):
    with store.connect() as con:
        con.execute(f"UPDATE session_summaries SET {assignment} WHERE session_id = ?", [session_id])
    results = _run_checks(store)
    failed = results.pop(check.check_key.name)
    assert not failed.passed
    assert failed.metadata["violations"].value == 1
    assert f"| {session_id} |" in failed.metadata["examples"].value and problem in failed.metadata["examples"].value
    assert all(other.passed for other in results.values())


def test_a_raw_summary_made_with_the_cap_off_is_no_violation():
    row = {"source_tier": "raw", "raw_tokens_estimate": 90_000, "raw_cap_tokens": None}
    assert raw_cap_problems(row) == []
    assert raw_cap_problems({**row, "raw_cap_tokens": 8192}) == [
        "raw prompt of 90000 estimated tokens was sent over the raw cap 8192"
    ]
    assert raw_cap_problems({**row, "source_tier": "miniSummary", "raw_cap_tokens": 8192}) == []
