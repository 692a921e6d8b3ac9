"""The graph stage through Dagster: what a degraded session's graph holds, the revision gate, sweeps,
failures counted to undigestible and reset, every summary in the graph from when it is written. Real
DuckDB file, real HTTP to tests/model_server.py, a real Dagster instance."""

from __future__ import annotations

import tests.test_graph
from app.store_commands import reset_digest
from digest.graph import DigestState
from digest.turns import canonical_order, input_revision
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer
from tests.test_graph import (
    PLANTED,
    _definitions,
    _export_lines,
    _ingest,
    _run,
    echo_extraction,
    is_graph_request,
    script,
)
from tests.test_imported_summaries import exported_summary, write_summaries

instance = tests.test_graph.instance  # the fixture of tests/test_graph.py: pytest finds it here by this name


def test_a_degraded_sessions_graph_holds_nothing_from_its_summary_text(tmp_path, instance):
    turns = make_turns("big", 40, doc_bytes=400, minis=40)  # over the raw cap: a degraded summary
    folder = write_bundle(tmp_path / "bundle", turns)
    planted = {**GOOD_SUMMARY, "summary": f"The agent rebuilt the {PLANTED} pipeline and the Quokkawidget cache."}
    with ModelServer(script(summary=planted)) as server:
        definitions, _ = _definitions(tmp_path, server.url)
        store = _ingest(definitions, instance, folder)
        assert _run(definitions, instance, "summarize_sessions", "big").success
        result = _run(definitions, instance, "digest_sessions", "big")
    assert store.summaries.summary_row("big")["source_tier"] == "miniSummary"
    assert PLANTED in store.summaries.summary_row("big")["summary"]
    assert result.success
    graph_prompts = [r.prompt for r in server.chat_requests() if is_graph_request(r)]
    assert len(graph_prompts) > 1 and not any(PLANTED in p or "Quokkawidget" in p for p in graph_prompts)
    rows = store.query(
        "SELECT id, label, properties::VARCHAR AS p FROM graph_nodes UNION ALL "
        "SELECT id, type, properties::VARCHAR FROM graph_edges"
    )
    assert len(rows) > 80
    for column in ("id", "p"):
        assert not rows[column].str.contains(f"{PLANTED}|Quokkawidget", case=False).any()
    # The echo model extracted what the raw turns say, and it landed as raw-turn evidence.
    entities = store.query("SELECT properties->>'name' AS name, properties->>'evidence' AS evidence FROM graph_nodes "
                           "WHERE label = 'CONCEPT'")  # fmt: skip
    assert "Prompt" in entities["name"].tolist() and set(entities["evidence"]) == {"raw-turns"}
    meta = result.asset_materializations_for_node("session_graph")[0].metadata
    assert meta["summary_source_tier"].value == "miniSummary" and meta["evidence"].value == "raw turns only"
    assert meta["chunks"].value == len(graph_prompts) and meta["nodes"].value == store.query(
        "SELECT count(*) AS n FROM graph_nodes")["n"][0]  # fmt: skip
    assert "| entity | type | description |" in meta["graph"].value
    assert store.graph.digest_state("big").digest_state == "digested"
    assert store.graph.pending_digest_keys(fresh=2, total=10) == []


def test_the_revision_gate_leaves_a_changed_session_pending(tmp_path, instance):
    folder = write_bundle(tmp_path / "bundle", make_turns("s1", 3))
    with ModelServer(script()) as server:
        definitions, _ = _definitions(tmp_path, server.url)
        store = _ingest(definitions, instance, folder)
        assert _run(definitions, instance, "summarize_sessions", "s1").success
        assert store.graph.pending_digest_keys(fresh=2, total=10) == ["s1"]
        # A turn changes after the summary was made.
        changed = {"id": "s1-t001", "session_id": "s1", "ts_ms": 1_760_000_060_000, "type": "agent-interaction",
                   "document": "User Prompt: changed\nAgent Thought: t\nAgent Response: r", "document_rebuilt": False,
                   "source_file": "edit.jsonl", "source_line": 1}  # fmt: skip
        store.ingest.write_turns([changed])
        store.ingest.refresh_sessions(["s1"])
        result = _run(definitions, instance, "digest_sessions", "s1")
        assert result.success and result.asset_materializations_for_node("session_graph") == []
        (observation,) = result.asset_observations_for_node("session_graph")
        assert "input revision mismatch" in observation.metadata["reason"].value
        assert not any(is_graph_request(r) for r in server.chat_requests())
        # Only what the summary wrote: its SESSION_SUMMARY node.
        assert store.query("SELECT label FROM graph_nodes")["label"].tolist() == ["SESSION_SUMMARY"]
        assert store.graph.digest_state("s1") is None  # not a failure: no attempt counted
        assert store.graph.pending_digest_keys(fresh=2, total=10) == []  # pending a new summary, not a digest
        assert _run(definitions, instance, "summarize_sessions", "s1").success
        assert store.graph.pending_digest_keys(fresh=2, total=10) == ["s1"]
        assert _run(definitions, instance, "digest_sessions", "s1").success
    assert store.graph.digest_state("s1").revision == store.sessions.session_by_partition("s1")["input_revision"]


def test_a_swept_digest_run_leaves_a_session_another_run_digested_meanwhile(tmp_path, instance):
    folder = write_bundle(tmp_path / "bundle", make_turns("s1", 3))
    with ModelServer(script()) as server:
        definitions, _ = _definitions(tmp_path, server.url, DIGEST_RESPONSE_CACHE="off")  # every chunk a call
        _ingest(definitions, instance, folder)
        assert _run(definitions, instance, "summarize_sessions", "s1").success
        job = definitions.resolve_job_def("digest_sessions")
        swept = {"digest/sweep": "cli"}  # two `session-digest digest` at once both queued s1
        assert job.execute_in_process(instance=instance, partition_key="s1", tags=swept).success
        calls = len(server.chat_requests())
        again = job.execute_in_process(instance=instance, partition_key="s1", tags=swept)
        assert again.success and again.asset_materializations_for_node("session_graph") == []
        assert "already digested" in again.asset_observations_for_node("session_graph")[0].metadata["reason"].value
        assert len(server.chat_requests()) == calls
        by_hand = _run(definitions, instance, "digest_sessions", "s1")  # e.g. after a prompt change
        assert by_hand.asset_materializations_for_node("session_graph") and len(server.chat_requests()) > calls


def test_failures_count_to_undigestible_and_an_operator_reset_brings_it_back(tmp_path, instance):
    folder = write_bundle(tmp_path / "bundle", make_turns("flaky", 2))
    replies = {"graph": lambda received: Behaviour.text("not json")}
    with ModelServer(script(graph=lambda received: replies["graph"](received))) as server:
        definitions, settings = _definitions(tmp_path, server.url)
        store = _ingest(definitions, instance, folder)
        assert _run(definitions, instance, "summarize_sessions", "flaky").success
        states = []
        for _ in range(3):
            result = _run(definitions, instance, "digest_sessions", "flaky")
            assert not result.success
            state = store.graph.digest_state("flaky")
            states.append((state.digest_state, state.attempts, state.defer_reason))
        assert states == [
            ("undigested", 1, "schema-failure"),
            ("undigested", 2, "schema-failure"),
            ("undigestible", 3, "schema-failure"),
        ]
        failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
        assert "undigestible after 3 attempt(s)" in failure.event_specific_data.error.message
        assert store.graph.pending_digest_keys(fresh=2, total=10) == []  # out of the cadence
        calls = len(server.chat_requests())
        skipped = _run(definitions, instance, "digest_sessions", "flaky")
        assert skipped.success and len(server.chat_requests()) == calls  # not tried again
        assert "reset-digest" in skipped.asset_observations_for_node("session_graph")[0].metadata["reason"].value
        report = store.reports.friction_report_rows()["undigestible"]
        assert [(r["session_id"], r["reason"], r["attempts"]) for r in report] == [("flaky", "schema-failure", 3)]

        assert reset_digest(settings, "flaky")["was"] == {"digest_state": "undigestible", "attempts": 3,
                                                          "defer_reason": "schema-failure"}  # fmt: skip
        assert reset_digest(settings, "flaky")["reset"] is False  # only an undigestible session is reset
        assert store.graph.pending_digest_keys(fresh=2, total=10) == ["flaky"]
        replies["graph"] = lambda received: Behaviour.reply(echo_extraction(received.prompt))
        assert _run(definitions, instance, "digest_sessions", "flaky").success
    revision = store.sessions.session_by_partition("flaky")["input_revision"]
    assert store.graph.digest_state("flaky") == DigestState("digested", 0, None, revision)
    outcomes = store.query("SELECT outcome FROM attempts WHERE stage = 'graph' ORDER BY attempt_id")["outcome"].tolist()
    assert outcomes == ["parse-failure"] * 3 + ["ok"]


def test_every_summary_is_in_the_graph_from_when_it_is_written(tmp_path, instance):
    """Issue 12.2: the original writes the SESSION_SUMMARY node (tier, degraded, raw canonical) and
    its summary-time edges with the summary. A session summarized under the raw cap and never
    digested, one whose digest ends undigestible, and one whose exported summary is adopted all have
    theirs in `export-graph`; the digest that succeeds at last rewrites it, once and the same."""
    big, flaky, adopted = (
        make_turns("big", 40, doc_bytes=400, minis=40),
        make_turns("flaky", 2),
        make_turns("adopted", 2),
    )
    folder = write_bundle(tmp_path / "bundle", big + flaky + adopted)
    revision = input_revision(canonical_order(adopted))
    write_summaries(folder, [exported_summary("adopted", memoryCount=2, dreamInputRevision=revision,
                                              sourceTier="truncatedRaw", degraded=True, participatingAgents="neo-gpt")])  # fmt: skip
    replies = {"graph": lambda received: Behaviour.text("not json")}
    with ModelServer(script(graph=lambda received: replies["graph"](received))) as server:
        definitions, settings = _definitions(tmp_path, server.url)
        store = _ingest(definitions, instance, folder)
        for key in ("big", "flaky"):
            assert _run(definitions, instance, "summarize_sessions", key).success
        for _ in range(3):
            assert not _run(definitions, instance, "digest_sessions", "flaky").success
        assert store.graph.digest_state("flaky").digest_state == "undigestible"
        assert store.graph.digest_state("big") is None and store.graph.digest_state("adopted") is None
        assert store.summaries.summary_row("big")["raw_cap_tokens"] == 2000
        assert store.summaries.summary_row("adopted")["origin"] == "imported"
        nodes, edges = _export_lines(settings, tmp_path / "before.jsonl")
        # The bundle's own graph lines (its turns' AGENT_MEMORY nodes) come back too.
        imported = set(store.query("SELECT id FROM imported_graph_nodes")["id"])
        assert imported and sorted(set(nodes) - imported) == ["summary_adopted", "summary_big", "summary_flaky"]
        provenance = {sid: {k: nodes[f"summary_{sid}"]["properties"].get(k) for k in ("sourceTier", "degraded", "rawCanonical", "userId")}
                      for sid in ("big", "flaky", "adopted")}  # fmt: skip
        assert provenance == {
            "big": {"sourceTier": "miniSummary", "degraded": True, "rawCanonical": True, "userId": None},
            "flaky": {"sourceTier": "raw", "degraded": False, "rawCanonical": True, "userId": None},
            "adopted": {"sourceTier": "truncatedRaw", "degraded": True, "rawCanonical": True, "userId": "shared"},
        }
        assert nodes["summary_big"]["label"] == "SESSION_SUMMARY"
        assert nodes["summary_big"]["properties"]["name"] == GOOD_SUMMARY["title"]
        assert nodes["summary_adopted"]["properties"]["description"] == "bugfix session by neo-gpt"
        for sid in ("big", "flaky", "adopted"):
            assert edges[f"frontier->summary_{sid}:SESSION_COMPLETED"]["properties"] == {"weight": 1.0}
            assert edges[f"summary_{sid}->@neo-opus-ada:AUTHORED_BY"]["properties"]["sharedEntity"] is True
        assert len(edges) == 6

        assert reset_digest(settings, "flaky")["reset"] is not False
        replies["graph"] = lambda received: Behaviour.reply(echo_extraction(received.prompt))
        assert _run(definitions, instance, "digest_sessions", "flaky").success
        after, after_edges = _export_lines(settings, tmp_path / "after.jsonl")
    assert after["summary_flaky"] == nodes["summary_flaky"]  # rewritten by the digest, the same
    assert after["summary_big"] == nodes["summary_big"] and after["summary_adopted"] == nodes["summary_adopted"]
    assert {"session:flaky", "flaky-t000", "flaky-t001"} <= set(after)
    assert {i: after_edges[i] for i in edges} == edges
    stored = store.query(
        "SELECT id, count(*) AS n FROM graph_nodes WHERE label = 'SESSION_SUMMARY' GROUP BY id ORDER BY id"
    )
    assert stored.to_dict("records") == [{"id": f"summary_{sid}", "n": 1} for sid in ("adopted", "big", "flaky")]


def test_a_context_overflow_is_undigestible_at_once(tmp_path, instance):
    folder = write_bundle(tmp_path / "bundle", make_turns("wide", 2))
    with ModelServer(script(graph=lambda received: Behaviour.overflow())) as server:
        definitions, _ = _definitions(tmp_path, server.url)
        store = _ingest(definitions, instance, folder)
        assert _run(definitions, instance, "summarize_sessions", "wide").success
        assert not _run(definitions, instance, "digest_sessions", "wide").success
    state = store.graph.digest_state("wide")
    assert (state.digest_state, state.attempts, state.defer_reason) == ("undigestible", 1, "under-band-choke")
    symptoms = store.query("SELECT consumer, symptom FROM friction_events WHERE consumer = 'session_graph'")
    assert symptoms.to_dict("records") == [{"consumer": "session_graph", "symptom": "context-overflow"}]
