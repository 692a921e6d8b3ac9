"""The asset checks: each passes on what the real synthesis and graph code stored, and fails on a
crafted violation (and only that check does)."""

from __future__ import annotations

import json

import pytest

from digest.graph import GraphPolicy, digest_session
from digest.ingest import ingest_paths
from digest.invariants import raw_cap_problems
from digest.synthesis import summarize_session
from pipelines.checks import (
    graph_evidence_from_raw_turns_only,
    no_raw_summary_over_its_cap,
    store_checks,
    summaries_have_complete_provenance,
    summaries_match_output_schema,
)
from resources.bindings import DigestStoreResource
from resources.model_clients import OpenAIChatClient
from resources.store import DigestStore, RunLedger
from tests.bundles import write_bundle
from tests.conftest import make_limits, make_turns
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer

# "auth.py" is in the model's summary (GOOD_SUMMARY) and nowhere in the raw turns; "Row.mjs" is in both.
assert "auth.py" in GOOD_SUMMARY["summary"]
EXTRACTION = {
    "entities": [
        {"name": "Row.mjs", "type": "FILE", "description": "the grid row"},
        {"name": "auth.py", "type": "FILE", "description": "named only in the summary"},
    ],
    "relations": [{"source": "Row.mjs", "target": "auth.py", "type": "DEPENDS_ON", "description": "d", "weight": 1.0}],
}


@pytest.fixture(scope="module")
def clean_store(tmp_path_factory) -> DigestStore:
    """One summary per source tier (raw cap 2000), and the degraded sessions' graphs, all made by
    the real code over real HTTP."""
    folder = tmp_path_factory.mktemp("clean")
    store = DigestStore(folder / "digest.duckdb")
    store.migrate()
    turns = (
        make_turns("small", 3) + make_turns("big", 40, doc_bytes=400, minis=40) + make_turns("bare", 40, doc_bytes=400)
    )
    ingest_paths([write_bundle(folder / "bundle", turns)], store)
    with ModelServer() as summaries, ModelServer(lambda _: Behaviour.reply(EXTRACTION)) as extraction:
        for session_id in ("small", "big", "bare"):  # raw, miniSummary, turnCards
            client = OpenAIChatClient(summaries.url, "fake-model")
            result = summarize_session(
                store.sessions.load_turns([session_id]), client, make_limits(), RunLedger(store, "run-1")
            )
            store.summaries.write_summary(result.summary, run_id="run-1")
        for session_id in ("big", "bare"):
            client = OpenAIChatClient(extraction.url, "fake-model")
            digest = digest_session(
                store.sessions.load_turns([session_id]), store.summaries.summary_row(session_id), client, make_limits(),
                GraphPolicy(output_limit_tokens=1024), RunLedger(store, "run-2"),
            )  # fmt: skip
            store.graph.write_graph(digest.graph, run_id="run-2")
    tiers = store.query("SELECT session_id, source_tier FROM session_summaries ORDER BY 1")
    assert tiers.values.tolist() == [["bare", "turnCards"], ["big", "miniSummary"], ["small", "raw"]]
    entities = store.query("SELECT session_id, properties->>'name' AS name FROM graph_nodes WHERE label = 'FILE'")
    assert sorted(entities.values.tolist()) == [["bare", "Row.mjs"], ["big", "Row.mjs"]]  # auth.py was dropped
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


def test_every_check_passes_on_what_the_real_code_stored(store):
    results = _run_checks(store)
    failed = {name: result.metadata["examples"].value for name, result in results.items() if not result.passed}
    assert not failed
    assert all(result.metadata["violations"].value == 0 for result in results.values())
    assert results["summaries_match_output_schema"].metadata["summaries_checked"].value == 3
    graphs = results["graph_evidence_from_raw_turns_only"].metadata["degraded_session_graphs_checked"]
    assert graphs.value == 2


def _props(**values) -> str:
    return json.dumps(values)


VIOLATIONS = [
    (summaries_have_complete_provenance, "big", "UPDATE session_summaries SET degraded = false WHERE session_id = ?",
     "contradicts source_tier 'miniSummary'"),
    (summaries_have_complete_provenance, "small", "UPDATE session_summaries SET run_id = NULL WHERE session_id = ?",
     "run_id is empty"),
    (summaries_have_complete_provenance, "small",
     "UPDATE session_summaries SET route_reason = 'over-raw-cap' WHERE session_id = ?", "contradicts source_tier 'raw'"),
    (summaries_have_complete_provenance, "bare",
     "UPDATE session_summaries SET mini_summary_count = 3 WHERE session_id = ?", "turnCards although turns had mini"),
    (summaries_have_complete_provenance, "bare",
     "UPDATE session_summaries SET raw_canonical = false WHERE session_id = ?", "raw_canonical is not true"),
    (summaries_have_complete_provenance, "big", "UPDATE session_summaries SET input_revision = 'r1' WHERE session_id = ?",
     "not a sha256 revision"),
    (no_raw_summary_over_its_cap, "small",
     "UPDATE session_summaries SET raw_tokens_estimate = raw_cap_tokens + 1 WHERE session_id = ?",
     "over the raw cap 2000"),
    (summaries_match_output_schema, "small", "UPDATE session_summaries SET quality = 150 WHERE session_id = ?",
     "quality: Input should be less than or equal to 100"),
    (summaries_match_output_schema, "big",
     "UPDATE session_summaries SET title = 'one two three four five six seven eight nine ten eleven' "
     "WHERE session_id = ?", "title has 11 words"),
    (summaries_match_output_schema, "bare", "UPDATE session_summaries SET category = 'chitchat' WHERE session_id = ?",
     "category: Input should be"),
    # The summary's own word, planted in the graph as if it had been extracted from the turns.
    (graph_evidence_from_raw_turns_only, "big",
     "INSERT INTO graph_nodes VALUES (?, 'file:auth.py', 'FILE', "
     f"'{_props(name='auth.py', evidence='raw-turns')}', 'sha256:x', NULL, now())",
     "FILE 'auth.py' is named nowhere in the raw turns"),
    (graph_evidence_from_raw_turns_only, "bare",
     "INSERT INTO graph_nodes VALUES (?, 'concept:grid', 'CONCEPT', "
     f"'{_props(name='grid', evidence='summary')}', 'sha256:x', NULL, now())",
     "CONCEPT 'grid' has evidence 'summary'"),
    (graph_evidence_from_raw_turns_only, "big",
     "INSERT INTO graph_edges VALUES (?, 'a->b:DEPENDS_ON', 'a', 'b', 'DEPENDS_ON', "
     f"'{_props(weight=1.0)}', 'sha256:x', NULL, now())",
     "edge a->b:DEPENDS_ON has evidence None"),
]  # fmt: skip


@pytest.mark.parametrize(("check", "session_id", "sql", "problem"), VIOLATIONS)
def test_each_check_fails_on_its_crafted_violation_and_only_that_check(store, check, session_id, sql, problem):
    with store.file.connect() as con:
        con.execute(sql, [session_id])
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
