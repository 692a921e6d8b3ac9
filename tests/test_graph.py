"""The session graph: chunking, extraction, merge, provenance, digest state and export, over a
real DuckDB file, real HTTP to tests/model_server.py, and a real Dagster instance for the asset."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from pathlib import Path

import pytest
from dagster import build_sensor_context, instance_for_test

from app.store_commands import export_graph, reset_digest
from digest.graph import (
    ENTITY_TYPES,
    Chunk,
    DigestState,
    ExtractionStats,
    GraphBuilder,
    GraphEdge,
    GraphExtraction,
    GraphNode,
    GraphParseError,
    GraphPolicy,
    SessionGraph,
    after_failure,
    after_reset,
    after_success,
    chunk_turns,
    digest_gate,
    digest_session,
    entity_id,
    extraction_json_schema,
    grounded,
    issue_references,
    merge_extractions,
    parse_extraction,
    prompt_window_tokens,
    reinforce,
    salvage_cut_reply,
)
from digest.ingest import parse_graph_line
from digest.prompts import TURN_SEPARATOR
from digest.settings import SettingsError, load_settings
from digest.turns import Turn, canonical_order, compose_document, input_revision
from digest.visibility import summary_user_id
from pipelines.definitions import build_definitions
from pipelines.sensors import digest_sensor, register_partitions
from resources.model_clients import OllamaChatClient, OpenAIChatClient
from resources.store import DigestStore, RunLedger
from tests.bundles import memory_row, write_bundle
from tests.conftest import make_limits, make_turns
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer, Received
from tests.test_imported_summaries import exported_summary, write_summaries

PLANTED = "Zanzibarquux"
# The graph bounds of a small-context model: the reference's 8192 output tokens would fill make_limits' context.
SMALL_MODEL = GraphPolicy(output_limit_tokens=1024)


# --- a stand-in model ------------------------------------------------------------------------------


def is_graph_request(received: Received) -> bool:
    return received.prompt.startswith("Extract a knowledge graph")


def echo_extraction(prompt: str) -> dict:
    """What a model would extract if it took every capitalized word of the excerpt it was given:
    whatever reaches the graph prompt reaches the graph, so a leak would show."""
    excerpt = prompt.split("--- Session excerpt ---\n", 1)[1]
    names = list(dict.fromkeys(re.findall(r"\b[A-Z][A-Za-z]{5,}\b", excerpt)))[:6]
    return {
        "entities": [{"name": n, "type": "CONCEPT", "description": f"{n} as the excerpt names it."} for n in names],
        "relations": [
            {"source": a, "target": b, "type": "RELATES_TO", "description": "named together", "weight": 1.0}
            for a, b in zip(names, names[1:])
        ],
    }


def script(summary: dict = GOOD_SUMMARY, graph=None):
    """Summary requests get `summary`; graph requests get `graph(received)` (default: the echo)."""

    def answer(received: Received) -> Behaviour:
        if is_graph_request(received):
            return graph(received) if graph else Behaviour.reply(echo_extraction(received.prompt))
        return Behaviour.reply(summary)

    return answer


def summary_row(turns: list[Turn], **overrides) -> dict:
    """A stored summary row as `DigestStore.summaries.summary_row` returns it."""
    row = {
        "session_id": turns[0].session_id,
        "summary": "The agent fixed the grid.",
        "title": "Fix the grid",
        "category": "bugfix",
        "source_tier": "raw",
        "degraded": False,
        "raw_canonical": True,
        "input_revision": input_revision(turns),
        "participating_agents": ["claude-code"],
        "last_activity_ms": max(t.ts_ms for t in turns),
    }
    return {**row, **overrides}


def turn(session_id: str, index: int, response: str, **fields) -> Turn:
    return Turn(
        id=f"{session_id}-t{index}",
        session_id=session_id,
        document=compose_document(f"step {index}", "thinking", response),
        ts_ms=1_760_000_000_000 + index * 60_000,
        agent="claude-code",
        **{"agent_identity": "@neo-opus-ada", **fields},
    )


# --- settings ------------------------------------------------------------------------------------


def test_graph_settings_defaults_and_overrides(tmp_path):
    embedded = load_settings({"DIGEST_HOME": str(tmp_path)})
    assert embedded.graph == GraphPolicy(output_limit_tokens=1024)  # 8192 would fill SmolLM2's whole context
    assert prompt_window_tokens(embedded.limits(), embedded.graph) == 6144  # the safe band binds
    small_remote = load_settings({"DIGEST_MODEL_PROVIDER": "openai", "DIGEST_CONTEXT_LIMIT_TOKENS": "8192"})
    assert small_remote.graph.output_limit_tokens == 1024  # an eighth of a small context, whatever the provider
    remote = load_settings({"DIGEST_MODEL_PROVIDER": "ollama"})
    assert remote.graph == GraphPolicy(chunk_limit_tokens=50000, output_limit_tokens=8192, max_attempts=3)
    assert remote.graph.budget_s == 1800.0
    assert prompt_window_tokens(remote.limits(), remote.graph) == 8192  # the raw cap binds every call
    uncapped = load_settings({"DIGEST_MODEL_PROVIDER": "ollama", "DIGEST_RAW_CAP_TOKENS": "off"})
    assert prompt_window_tokens(uncapped.limits(), uncapped.graph) == 50000  # cap off: the chunk limit binds
    tuned = load_settings(
        {
            "DIGEST_MODEL_PROVIDER": "openai",
            "DIGEST_GRAPH_CHUNK_LIMIT_TOKENS": "4000",
            "DIGEST_GRAPH_OUTPUT_LIMIT_TOKENS": "512",
            "DIGEST_GRAPH_MAX_ATTEMPTS": "5",
            "DIGEST_GRAPH_TIMEOUT_S": "90",
            "DIGEST_GRAPH_MAX_CHUNKS": "10",
            "DIGEST_GRAPH_BUDGET_S": "120",
        }
    )
    assert tuned.graph == GraphPolicy(4000, 512, 5, 90.0, 10, budget_s=120.0)
    with pytest.raises(SettingsError, match=r"DIGEST_RAW_CAP_TOKENS \(when on\).* = 300 tokens"):
        load_settings({"DIGEST_RAW_CAP_TOKENS": "300"})  # no room for turn text next to the extraction prompt
    with pytest.raises(SettingsError, match="DIGEST_GRAPH_OUTPUT_LIMIT_TOKENS"):
        load_settings({"DIGEST_GRAPH_OUTPUT_LIMIT_TOKENS": "8192"})  # the embedded context, all of it
    with pytest.raises(SettingsError, match="DIGEST_GRAPH_MAX_ATTEMPTS"):
        load_settings({"DIGEST_GRAPH_MAX_ATTEMPTS": "zero"})


# --- chunking ------------------------------------------------------------------------------------


def test_chunks_are_turn_aligned_and_an_oversized_turn_is_split_within_the_budget():
    budget = 1200
    small = [turn("s", i, f"small turn {i} " * 10) for i in range(6)]
    lines = "\n".join(f"line {i}: " + "word " * 30 for i in range(40))  # many lines, each under the budget
    one_long_line = "é" * 1500  # 3000 bytes, no line break, 2-byte characters
    big = turn("s", 6, lines + "\n" + one_long_line)
    last = turn("s", 7, "the last turn")
    chunks = chunk_turns(small + [big, last], budget)
    assert all(len(c.text.encode("utf-8")) <= budget for c in chunks)
    for t in small:  # whole, in exactly one chunk
        assert sum(t.document in c.text for c in chunks) == 1
    others = {t.document for t in small + [last]}
    parts = [part for c in chunks if big.id in c.turn_ids for part in c.text.split(TURN_SEPARATOR)]
    pieces = [part for part in parts if part not in others]
    assert len(pieces) > 3 and "".join(pieces) == big.document  # nothing lost, nothing cut mid-character
    assert chunks[-1].text.endswith("the last turn")
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_chunks_at_the_model_server_never_exceed_the_budget(store):
    """A large session on a small budget: every prompt that reaches the server fits the window."""
    limits = make_limits(context_limit_tokens=8192, safe_limit_tokens=6144, bytes_per_token=3.0)
    policy = GraphPolicy(chunk_limit_tokens=900, output_limit_tokens=256, max_chunks=100, timeout_s=5)
    window = prompt_window_tokens(limits, policy)
    assert window == 900
    turns = make_turns("large", 30, doc_bytes=700) + [turn("large", 99, "x" * 9000)]  # one turn over a chunk
    with ModelServer(script()) as server:
        client = OpenAIChatClient(server.url, "fake-model", schema_style="json_object")
        result = digest_session(turns, summary_row(turns), client, limits, policy, RunLedger(store, "run-1"))
    prompts = [r.prompt for r in server.chat_requests()]
    assert result.graph is not None and len(prompts) == result.graph.chunks > 10
    assert max(limits.estimate_tokens(p) for p in prompts) <= window
    sent = "".join(p.split("--- Session excerpt ---\n", 1)[1] for p in prompts)
    assert all(t.document in sent for t in turns[:30])  # every small turn reached the model whole
    # Each request carries the output cap and the schema, and each call is in the ledger as stage=graph.
    body = server.chat_requests()[0].body
    assert body["max_tokens"] == 256 and body["response_format"]["schema"] == extraction_json_schema()
    ledger = store.query("SELECT stage, tier, outcome, count(*) AS n FROM attempts GROUP BY ALL")
    assert ledger.to_dict("records") == [{"stage": "graph", "tier": "raw", "outcome": "ok", "n": len(prompts)}]


def test_a_session_needing_too_many_chunks_is_precheck_skipped_without_a_call(store):
    limits = make_limits()
    policy = GraphPolicy(chunk_limit_tokens=900, output_limit_tokens=256, max_chunks=3)
    turns = make_turns("huge", 40, doc_bytes=700)
    with ModelServer(script()) as server:
        client = OpenAIChatClient(server.url, "fake-model")
        result = digest_session(turns, summary_row(turns), client, limits, policy, RunLedger(store, "run-1"))
    assert (result.graph, result.failure) == (None, "size-precheck-skip")
    assert server.chat_requests() == []
    event = store.query("SELECT consumer, symptom, emission_point, service_domain, note FROM friction_events").iloc[0]
    assert event["consumer"] == "session_graph" and event["symptom"] == "size-precheck-skip"
    assert event["emission_point"] == "pre-invocation"
    assert event["service_domain"] == "dream-pipeline" and "DIGEST_GRAPH_MAX_CHUNKS=3" in event["note"]


# --- output, merge and remap -------------------------------------------------------------------------


def test_the_schema_sent_has_no_bounds_or_refs_and_the_parser_validates():
    schema = json.dumps(extraction_json_schema())
    for key in ("minLength", "maxLength", "minItems", "maxItems", "$ref", "$defs"):
        assert key not in schema
    reply = {
        "entities": [{"name": " Grid  Store ", "type": "class", "description": "holds rows"}],
        "relations": [{"source": "a", "target": "b", "type": "depends on", "description": "", "weight": 12}],
    }
    parsed = parse_extraction("```json\n" + json.dumps(reply) + "\n```")
    assert parsed.entities[0].name == "Grid Store" and parsed.entities[0].type == "CLASS"
    assert parsed.relations[0].type == "DEPENDS_ON" and parsed.relations[0].weight == 5.0  # clamped
    with pytest.raises(GraphParseError, match="graph schema"):
        parse_extraction('{"entities": [{"name": "x", "type": "PLANET", "description": ""}], "relations": []}')
    with pytest.raises(GraphParseError, match="not JSON"):
        parse_extraction("no json here")
    # Cut at the output cap mid-list: the complete items stand, the torn one goes.
    cut = '{"entities": [{"name": "Grid", "type": "CLASS", "description": "rows"}, {"name": "Sto'
    assert [e.name for e in salvage_cut_reply(cut).entities] == ["Grid"]
    with pytest.raises(GraphParseError, match="before one complete entity"):
        salvage_cut_reply('{"entities": [{"name": "Gr')


def extraction(entities: list[tuple[str, str]], relations: list[tuple[str, str, str, float]]) -> GraphExtraction:
    return GraphExtraction.model_validate(
        {
            "entities": [{"name": n, "type": t, "description": f"about {n}"} for n, t in entities],
            "relations": [
                {"source": s, "target": d, "type": t, "description": "", "weight": w} for s, d, t, w in relations
            ],
        }
    )


def _entity_props(name: str, description: str, session_id: str = "s", tags: list | None = None) -> dict:
    """An extracted node's properties as the original's commit writes them, with our evidence key."""
    return {
        "name": name, "description": description, "semanticVectorId": f"summary_{session_id}",
        "logical_layer": "Unknown", "stability": "UNKNOWN", "gravity_well": False, "strategic_weight": 0.1,
        "confidence": 0.5, "tags": tags or [], "context_source": session_id, "evidence": "raw-turns",
    }  # fmt: skip


def test_entity_ids_are_the_originals_type_and_name_as_written():
    """`TYPE:` + the name, case kept, each character outside [A-Za-z0-9_.-] → `_` per UTF-16 unit."""
    assert entity_id("CLASS", "RecordStore") == "CLASS:RecordStore"
    assert entity_id("CLASS", "Neo.data.RecordStore") == "CLASS:Neo.data.RecordStore"
    assert entity_id("METHOD", "onStoreSort()") == "METHOD:onStoreSort__"
    assert entity_id("FILE", "src/a b.py") == "FILE:src_a_b.py"
    assert entity_id("CONCEPT", "multi-threading in café 🚀") == "CONCEPT:multi-threading_in_caf____"  # é: 1, 🚀: 2
    assert entity_id("TECHNOLOGY", "DuckDB") == entity_id("TOOL", "DuckDB") == "CONCEPT:DuckDB"


def test_chunk_results_merge_on_the_originals_type_and_name_and_edges_are_remapped():
    builder = GraphBuilder()
    builder.add_node("session:s", "SESSION", {"name": "s"})
    first = Chunk(0, "RowSelectionModel depends on the RecordStore; onStoreSort() sorts it with DuckDB.", ("t1",))
    second = Chunk(1, "The RowSelectionModel again, a recordstore in lower case, and a Teapot in passing.", ("t2",))
    one = extraction([("RowSelectionModel", "CLASS"), ("RecordStore", "CLASS"), ("onStoreSort()", "METHOD"),
                      ("DuckDB", "TECHNOLOGY")],
                     [("RowSelectionModel", "RecordStore", "DEPENDS_ON", 2.0), ("onStoreSort()", "RecordStore", "MODIFIES", 1.0),
                      ("onStoreSort()", "Nowhere", "RELATES_TO", 1.0)])  # fmt: skip
    one.entities[0].description = "keeps rows"
    one.relations[0].description = "reads records"
    one.relations[1].description = "sorts"
    two = extraction([("RowSelectionModel", "CLASS"), ("recordstore", "CLASS"), ("Kettle", "TOOL")],
                     [("RowSelectionModel", "RecordStore", "DEPENDS_ON", 1.0), ("Kettle", "recordstore", "RELATES_TO", 1.0)])  # fmt: skip
    two.entities[0].description = "keeps the selected rows by record id"
    two.relations[0].description = "again"
    stats = merge_extractions(builder, "s", [(first, one), (second, two)])
    nodes = {i: (n.label, n.properties) for i, n in builder.nodes.items() if i != "session:s"}
    # Case-sensitive, as the original: `recordstore` is another node than `RecordStore`.
    assert nodes == {
        "CLASS:RowSelectionModel": (
            "CLASS",
            _entity_props("RowSelectionModel", "keeps the selected rows by record id"),
        ),
        "CLASS:RecordStore": ("CLASS", _entity_props("RecordStore", "about RecordStore")),
        "METHOD:onStoreSort__": ("METHOD", _entity_props("onStoreSort()", "about onStoreSort()")),
        "CONCEPT:DuckDB": ("CONCEPT", _entity_props("DuckDB", "about DuckDB", tags=["TECHNOLOGY"])),
        "CLASS:recordstore": ("CLASS", _entity_props("recordstore", "about recordstore")),
    }
    edges = {i: e.properties for i, e in builder.edges.items()}
    raw = {"context_source": "s", "evidence": "raw-turns"}
    # Re-linked in a later chunk: the larger weight and both justifications (the chunk reduce).
    assert edges["CLASS:RowSelectionModel->CLASS:RecordStore:DEPENDS_ON"] == {
        "weight": 2.0, "justification": "reads records / again", **raw}  # fmt: skip
    # MODIFIES is not one of the original's relationships: RELATES_TO, the type kept in the justification.
    assert edges["METHOD:onStoreSort__->CLASS:RecordStore:RELATES_TO"] == {
        "weight": 1.0,
        "justification": "MODIFIES: sorts",
        **raw,
    }
    assert edges["CLASS:RowSelectionModel->session:s:MENTIONED_IN"] == {"weight": 1.0, "justification": "", **raw}
    # Kettle is named nowhere in its chunk's raw text: dropped, and its relation culled with the unknown target.
    assert (stats.entities, stats.relations, stats.ungrounded_entities, stats.culled_relations) == (5, 2, 1, 2)


def test_an_entity_is_grounded_only_by_its_name_in_the_raw_text():
    raw = "rowselectionmodel kept rows by index; onstoresort() sorts the store. a test."
    assert all(grounded(n, raw) for n in ("RowSelectionModel", "onStoreSort()", "Store", "sort", "store sort"))
    # Copied from the prompt's example, made up, a stray letter, or only inside another word.
    assert not any(grounded(n, raw) for n in ("Teapot", "pour()", "user_prompt", "A", "tore", "Row Selection"))


def test_reinforcement_is_capped_at_five():
    weight = 4.8
    for _ in range(5):
        weight = reinforce(weight, 1.0)
    assert weight == 5.0


# --- provenance --------------------------------------------------------------------------------


def test_issue_references_are_the_originals_scan():
    # No word boundary, the digits as written, an HTML entity counts: the original's regex as it is.
    text = "fixes #123 and issue-45, ISSUE-45 again, &#38; neo#7, issue-0012 and #12abc"
    assert issue_references(text) == ["123", "45", "38", "7", "0012", "12"]
    assert issue_references("#١٢") == []  # JavaScript's \d is ASCII


def test_visibility_of_a_summary_follows_the_originals_core_swarm_rule():
    assert summary_user_id(["claude-code", "Neo-Opus-Ada (Claude Code)"]) == "shared"
    assert summary_user_id(["@neo-gpt"]) == "shared"
    assert summary_user_id(["claude-code"]) is None  # no request user here: visible to every tenant


def _hex(stable: str) -> str:
    return hashlib.sha256(stable.encode()).hexdigest()


def test_provenance_nodes_and_edges_are_the_originals_field_by_field():
    """Each line built by hand from the original's code (SessionService.summarizeSession,
    MemoryService._projectMemoryToGraph, MemorySessionIngestor), for a session whose summary is
    degraded and whose turns name issues."""
    turns = [
        turn("s", 0, "Looked at #123 and issue-9.", mini_summary="Turn 0 mini.", user_id="@tobi"),
        turn("s", 1, "Nothing here.", agent_identity=None),
    ]
    summary = summary_row(turns, summary="Closes #500 and #123.", source_tier="miniSummary", degraded=True)
    swarm_summary = {**summary, "participating_agents": ["neo-gpt (Codex)"]}
    with ModelServer(script(graph=lambda received: Behaviour.reply({"entities": [], "relations": []}))) as server:
        client = OpenAIChatClient(server.url, "fake-model")
        graph = digest_session(turns, summary, client, make_limits(), SMALL_MODEL, _NullLedger()).graph
        swarm = digest_session(turns, swarm_summary, client, make_limits(), SMALL_MODEL, _NullLedger()).graph
    nodes = {n.id: (n.label, n.properties) for n in graph.nodes}
    t0, t1 = "2025-10-09T08:53:20.000Z", "2025-10-09T08:54:20.000Z"
    # Seeded by the original (identities, the frontier) or never made by it (issue stubs): not exported.
    assert sorted(nodes) == ["s-t0", "s-t1", "session:s", "summary_s"]
    assert nodes["summary_s"] == ("SESSION_SUMMARY", {
        "name": "Fix the grid", "description": "bugfix session by claude-code", "semanticVectorId": "summary_s",
        "sessionId": "s", "sourceAgentIdentities": ["@neo-opus-ada"], "sourceTrustTier": "unclassified",
        "provenancePolicy": "most-restrictive-source", "sourceTier": "miniSummary", "degraded": True,
        "rawCanonical": True})  # fmt: skip
    assert nodes["session:s"] == ("SESSION", {
        "name": "Fix the grid", "description": "", "chromaId": "summary_s", "liveIngested": True,
        "payloadHash": _hex('{"createdAt":"","sessionId":"s","title":"Fix the grid","userId":""}'), "sessionId": "s"})  # fmt: skip
    assert nodes["s-t0"] == ("AGENT_MEMORY", {
        "name": f"Memory: {t0}", "description": "Agent thought flow inside session s.", "semanticVectorId": "s-t0",
        "agentIdentity": "@neo-opus-ada", "userId": "tobi", "sessionId": "s", "timestamp": t0,
        "miniSummary": "Turn 0 mini.", "chromaId": "s-t0", "liveIngested": True,
        "payloadHash": _hex('{"createdAt":"","sessionId":"s","userId":"@tobi"}')})  # fmt: skip
    assert nodes["s-t1"][1]["payloadHash"] == _hex('{"createdAt":"","sessionId":"s","userId":""}')
    edges = {e.id: (e.source, e.target, e.type, e.properties) for e in graph.edges}
    assert edges == {
        "frontier->summary_s:SESSION_COMPLETED": ("frontier", "summary_s", "SESSION_COMPLETED", {"weight": 1.0}),
        "summary_s->@neo-opus-ada:AUTHORED_BY": ("summary_s", "@neo-opus-ada", "AUTHORED_BY", {
            "weight": 1.0, "timestamp": t1, "userId": "neo-opus-ada", "sharedEntity": True,
            "provenancePolicy": "most-restrictive-source"}),
        # The summary text, then the raw turns, whatever the summary's tier.
        "summary_s->issue-500:DISCUSSED_IN": ("summary_s", "issue-500", "DISCUSSED_IN", {"weight": 0.8, "foundIn": ["summary"]}),
        "summary_s->issue-123:DISCUSSED_IN": ("summary_s", "issue-123", "DISCUSSED_IN", {
            "weight": 0.8, "foundIn": ["summary", "raw-turns"]}),
        "summary_s->issue-9:DISCUSSED_IN": ("summary_s", "issue-9", "DISCUSSED_IN", {"weight": 0.8, "foundIn": ["raw-turns"]}),
        "s-t0->session:s:ORIGINATES_IN": ("s-t0", "session:s", "ORIGINATES_IN", {"weight": 1.0}),
        "s-t1->session:s:ORIGINATES_IN": ("s-t1", "session:s", "ORIGINATES_IN", {"weight": 1.0}),
        "frontier->s-t0:SPAWNED_MEMORY": ("frontier", "s-t0", "SPAWNED_MEMORY", {"weight": 0.8}),
        "frontier->s-t1:SPAWNED_MEMORY": ("frontier", "s-t1", "SPAWNED_MEMORY", {"weight": 0.8}),
        "s-t0->@neo-opus-ada:AUTHORED_BY": ("s-t0", "@neo-opus-ada", "AUTHORED_BY", {
            "weight": 1.0, "timestamp": t0, "userId": "neo-opus-ada", "sharedEntity": True}),
    }  # fmt: skip
    assert graph.issues == 3
    # A core swarm agent took part: the summary and session are shared, and hashed so.
    shared = {n.id: n.properties for n in swarm.nodes}
    assert shared["summary_s"]["userId"] == shared["session:s"]["userId"] == "shared"
    assert shared["summary_s"]["description"] == "bugfix session by neo-gpt (Codex)"
    assert shared["session:s"]["payloadHash"] == _hex(
        '{"createdAt":"","sessionId":"s","title":"Fix the grid","userId":"shared"}'
    )


class _NullLedger:
    def start_attempt(self, attempt) -> None:
        pass

    def record_attempt(self, attempt, started=None) -> None:
        pass

    def record_friction(self, event) -> None:
        pass


# --- digest state --------------------------------------------------------------------------------


def test_digest_state_transitions():
    assert after_success("r1") == DigestState("digested", 0, None, "r1")
    first = after_failure(None, "r1", "timeout", 3)
    assert first == DigestState("undigested", 1, "wall-clock-timeout", "r1")
    second = after_failure(first, "r1", "parse-failure", 3)
    assert second == DigestState("undigested", 2, "schema-failure", "r1")
    assert after_failure(second, "r1", "provider-error", 3) == DigestState("undigestible", 3, "provider-error", "r1")
    assert after_failure(second, "r2", "parse-failure", 3).attempts == 1  # the turns changed: counted afresh
    # Deterministic failures: undigestible at once.
    assert after_failure(None, "r1", "size-precheck-skip", 3) == DigestState("undigestible", 1, "skip-over-band", "r1")
    assert after_failure(None, "r1", "context-overflow", 3) == DigestState("undigestible", 1, "under-band-choke", "r1")
    stuck = DigestState("undigestible", 3, "schema-failure", "r1")
    assert after_reset(stuck) == DigestState("undigested", 0, "operator-reset", "r1")

    summary = {"input_revision": "r1"}
    assert digest_gate("r1", None, None).startswith("no summary")
    assert "input revision mismatch" in digest_gate("r2", summary, None)
    assert "undigestible" in digest_gate("r1", summary, stuck)
    assert digest_gate("r2", {"input_revision": "r2"}, stuck) is None  # new turns: tried again
    assert digest_gate("r1", summary, after_reset(stuck)) is None


# --- through Dagster -----------------------------------------------------------------------------


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


def _definitions(tmp_path, url: str, **env):
    settings = load_settings(
        {
            "DIGEST_HOME": str(tmp_path / "home"),
            "DIGEST_MODEL_PROVIDER": "openai",
            "DIGEST_RAW_CAP_TOKENS": "2000",
            "DIGEST_GRAPH_CHUNK_LIMIT_TOKENS": "1500",
            "DIGEST_GRAPH_OUTPUT_LIMIT_TOKENS": "512",
            **env,
        }
    )
    return build_definitions(dataclasses.replace(settings, model_url=url)), settings


def _ingest(definitions, instance, folder) -> DigestStore:
    config = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
    assert definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance).success
    store = DigestStore(definitions.resources["store"].db_path)
    register_partitions(instance, store)
    return store


def _run(definitions, instance, job: str, key: str):
    job_def = definitions.resolve_job_def(job)
    return job_def.execute_in_process(instance=instance, partition_key=key, raise_on_error=False)


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


def _export_lines(settings, path: Path) -> tuple[dict, dict]:
    """`export-graph` into `path`: its node lines by id (each id once) and its edge lines by id."""
    export_graph(settings, str(path))
    lines = [json.loads(line)["data"] for line in path.read_text().splitlines()]
    nodes = [d for d in lines if "label" in d]
    assert len({n["id"] for n in nodes}) == len(nodes)
    return {n["id"]: n for n in nodes}, {d["id"]: d for d in lines if "source" in d}


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


# --- the raw cap and the run budget ----------------------------------------------------------------


def _estimate(prompt: str) -> int:
    return math.ceil(len(prompt.encode("utf-8")) / 3)  # DIGEST_BYTES_PER_TOKEN's default


def _excerpt_parts(prompts: list[str]) -> list[str]:
    return [part for p in prompts for part in p.split("--- Session excerpt ---\n", 1)[1].split(TURN_SEPARATOR)]


def _write_memory_bundle(folder: Path, turns: list[tuple[Turn, str, str, str]]) -> Path:
    """A memory-backup file whose rows carry their prompt, thought and response, as Neo's do."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "memory-backup-2026-11-20T09-00-00.000Z.jsonl").open("w") as out:
        for t, prompt, thought, response in turns:
            out.write(json.dumps(memory_row(t, prompt, thought, response)) + "\n")
    return folder


def _ninety_kb_session(session_id: str) -> list[tuple[Turn, str, str, str]]:
    """About 90 KB: 26 turns of ~2.9 KB and one of ~16 KB, a single turn over a 3000-token cap."""
    rows = []
    for i in range(27):
        lines = 120 if i == 13 else 21
        response = "\n".join(f"Step {i}.{n}: Quillmotor{i} touched src/grid/Row.mjs and Kestrelbus{n} again." +
                             " the worker answered" * 3 for n in range(lines))  # fmt: skip
        prompt, thought = f"Prompt {i}: fix the Quillmotor grid", f"Thinking about step {i}"
        document = compose_document(prompt, thought, response)
        t = Turn(id=f"{session_id}-t{i:03d}", session_id=session_id, document=document,
                 ts_ms=1_760_000_000_000 + i * 60_000, agent="claude-code", agent_identity="@neo-opus-ada")  # fmt: skip
        rows.append((t, prompt, thought, response))
    return rows


def test_with_the_raw_cap_on_no_model_call_of_any_stage_exceeds_it(tmp_path, instance):
    """Issue 11.4: an Ollama host of context 131072 with DIGEST_RAW_CAP_TOKENS=3000 sent one whole
    ~90 KB session as a single extraction prompt. Every call (mini summaries, the degraded summary,
    each graph chunk) stays within the cap, and the chunks still carry every turn's text."""
    rows = _ninety_kb_session("wide")
    assert 85_000 < sum(len(t.document.encode()) for t, *_ in rows) < 95_000
    folder = _write_memory_bundle(tmp_path / "bundle", rows)
    with ModelServer(script()) as server:
        definitions, _ = _definitions(
            tmp_path, server.url, DIGEST_MODEL_PROVIDER="ollama", DIGEST_RAW_CAP_TOKENS="3000",
            DIGEST_GRAPH_CHUNK_LIMIT_TOKENS="", DIGEST_GRAPH_OUTPUT_LIMIT_TOKENS="",
        )  # fmt: skip
        assert definitions.resources["model"].context_limit_tokens == 131072
        store = _ingest(definitions, instance, folder)
        assert _run(definitions, instance, "summarize_sessions", "wide").success
        result = _run(definitions, instance, "digest_sessions", "wide")
    assert result.success and store.graph.digest_state("wide").digest_state == "digested"
    requests = server.chat_requests()
    assert {r.path for r in requests} == {"/api/chat"}
    stages = {"graph": [r.prompt for r in requests if is_graph_request(r)]}
    stages["other"] = [r.prompt for r in requests if not is_graph_request(r)]
    assert len(stages["graph"]) > 5 and len(stages["other"]) > 20  # mini summaries and the summary too
    assert max(_estimate(p) for p in stages["graph"] + stages["other"]) <= 3000
    # Every turn's evidence reached the model: the small turns whole, the big one in pieces, in order.
    turns = store.sessions.load_turns(["wide"])
    big = next(t for t in turns if t.id == "wide-t013")
    assert _estimate(big.document) > 3000
    parts = _excerpt_parts(stages["graph"])
    small = {t.document for t in turns if t is not big}
    assert small <= set(parts)
    assert "".join(p for p in parts if p not in small) == big.document
    assert result.asset_materializations_for_node("session_graph")[0].metadata["prompt_window_tokens"].value == 3000


def test_with_the_raw_cap_off_the_chunk_limit_alone_bounds_the_graph(store):
    """Cap off: as before, a 90 KB session fits one chunk of the 50000-token limit."""
    settings = load_settings({"DIGEST_MODEL_PROVIDER": "ollama", "DIGEST_RAW_CAP_TOKENS": "off"})
    turns = [t for t, *_ in _ninety_kb_session("wide")]
    with ModelServer(script()) as server:
        client = OllamaChatClient(server.url, "llama3.2", num_ctx=settings.context_limit_tokens)
        result = digest_session(turns, summary_row(turns), client, settings.limits(), settings.graph, _NullLedger())
    (prompt,) = [r.prompt for r in server.chat_requests()]
    assert result.graph.chunks == 1 and 30_000 < _estimate(prompt) <= 50000


def _graph_rows(store: DigestStore, session_id: str) -> tuple[set, set]:
    """A session's stored graph (no property holds a time the digest ran)."""

    def props(raw: str) -> str:
        return json.dumps(json.loads(raw), sort_keys=True)

    nodes = store.query(
        "SELECT id, label, properties::VARCHAR AS p FROM graph_nodes WHERE session_id = ?", [session_id]
    )
    edges = store.query(
        "SELECT id, source, target, type, properties::VARCHAR AS p FROM graph_edges WHERE session_id = ?", [session_id]
    )
    return ({(r.id, r.label, props(r.p)) for r in nodes.itertuples()},
            {(r.id, r.source, r.target, r.type, props(r.p)) for r in edges.itertuples()})  # fmt: skip


def test_a_session_over_the_run_budget_is_finished_by_the_next_run_with_no_chunk_sent_twice(tmp_path, instance):
    """A budget smaller than one chunk's call: each run starts one chunk and stops, its result kept;
    the next run, which the digest sensor gives the part-done session before older ones, goes on
    from there. The response cache is off, so only the stored chunk results prevent a repeat."""
    texts = [("older", "p", "t", "r")] + [
        ("two", f"Prompt {i}", "plan", "Quillmotor and Kestrelbus " * 60) for i in range(4)
    ]
    rows = [
        (Turn(id=f"{sid}-t{i}", session_id=sid, document=compose_document(*fields), ts_ms=(i + 1) * 60_000 if sid == "older"
              else 1_760_000_000_000 + i * 60_000, agent="claude-code"), *fields)
        for i, (sid, *fields) in enumerate(texts)
    ]  # fmt: skip
    folder = _write_memory_bundle(tmp_path / "bundle", rows)
    slow_echo = lambda received: Behaviour(content=json.dumps(echo_extraction(received.prompt)), delay_s=0.02)  # noqa: E731
    with ModelServer(script(graph=slow_echo)) as server:
        definitions, settings = _definitions(
            tmp_path, server.url, DIGEST_GRAPH_BUDGET_S="0.001", DIGEST_RESPONSE_CACHE="off",
            DIGEST_GRAPH_BATCH_SESSIONS="1",
        )  # fmt: skip
        store = _ingest(definitions, instance, folder)
        for key in ("older", "two"):
            assert _run(definitions, instance, "summarize_sessions", key).success
        assert _tick_digest_sensor(instance, definitions) == ["older"]  # the oldest, before any is part-done

        first = _run(definitions, instance, "digest_sessions", "two")
        assert first.success and first.asset_materializations_for_node("session_graph") == []
        (observation,) = first.asset_observations_for_node("session_graph")
        meta = {k: v.value for k, v in observation.metadata.items()}
        assert (meta["digested"], meta["chunks_planned"], meta["chunks_done"], meta["chunks_left_for_later"]) == (
            False, 2, 1, 1)  # fmt: skip
        assert "next run" in meta["reason"]
        assert store.graph.digest_state("two") is None  # not a failure: no attempt counted
        assert store.query("SELECT chunk_index FROM graph_chunks WHERE session_id = 'two'")["chunk_index"].tolist() == [
            0
        ]
        assert _tick_digest_sensor(instance, definitions) == ["two"]  # the part-done session goes next

        second = _run(definitions, instance, "digest_sessions", "two")
        assert second.success
        graph_prompts = [r.prompt for r in server.chat_requests() if is_graph_request(r)]
        assert len(graph_prompts) == len(set(graph_prompts)) == 2  # each chunk sent once, over two runs
        meta = second.asset_materializations_for_node("session_graph")[0].metadata
        assert (meta["chunks"].value, meta["chunks_from_earlier_runs"].value) == (2, 1)
        assert store.graph.digest_state("two").digest_state == "digested"
        assert store.query("SELECT count(*) AS n FROM graph_chunks")["n"][0] == 0  # dropped with the graph write
        two_runs = _graph_rows(store, "two")

        # The same session in one run, with room in the budget: the same graph.
        one_run_store = DigestStore(tmp_path / "one-run.duckdb")
        one_run_store.migrate()
        turns = store.sessions.load_turns(["two"])
        one_run = digest_session(
            turns, store.summaries.summary_row("two"), OpenAIChatClient(server.url, "default"), settings.limits(),
            dataclasses.replace(settings.graph, budget_s=1800.0), _NullLedger(),
        )  # fmt: skip
    assert one_run.graph.chunks == 2 and one_run.chunks_resumed == 0
    one_run_store.graph.write_graph(one_run.graph)
    assert two_runs == _graph_rows(one_run_store, "two")
    assert len(two_runs[0]) > 10 and any(n[1] == "CONCEPT" for n in two_runs[0])
    ledger = store.query("SELECT outcome, count(*) AS n FROM attempts WHERE stage = 'graph' GROUP BY ALL")
    assert ledger.to_dict("records") == [{"outcome": "ok", "n": 2}]


def test_a_retry_after_a_failed_chunk_sends_only_the_chunks_not_done(store):
    """A chunk's result is stored as it arrives; a failure later in the session costs that chunk
    only, and a stored result counts only for the same text (another chunking sends all again)."""
    limits, policy = make_limits(), GraphPolicy(chunk_limit_tokens=900, output_limit_tokens=256, timeout_s=5)
    turns = make_turns("retry", 9, doc_bytes=700)
    failing = {"on": True}

    def graph(received: Received) -> Behaviour:
        if failing["on"] and turns[4].document in received.prompt:
            return Behaviour.text("not json")
        return Behaviour.reply(echo_extraction(received.prompt))

    ledger = RunLedger(store, "run")
    with ModelServer(script(graph=graph)) as server:
        client = OpenAIChatClient(server.url, "fake-model")
        first = digest_session(turns, summary_row(turns), client, limits, policy, ledger, chunk_store=ledger)
        sent_first = [r.prompt for r in server.chat_requests()]
        failing["on"] = False
        second = digest_session(turns, summary_row(turns), client, limits, policy, ledger, chunk_store=ledger)
        sent_second = [r.prompt for r in server.chat_requests()][len(sent_first) :]
        rechunked = dataclasses.replace(policy, chunk_limit_tokens=1200)
        third = digest_session(turns, summary_row(turns), client, limits, rechunked, ledger, chunk_store=ledger)
    assert first.failure == "parse-failure" and first.chunks_done == len(sent_first) - 1 > 0
    assert second.graph is not None and second.chunks_resumed == first.chunks_done
    assert sent_second[0] == sent_first[-1] and not set(sent_second[1:]) & set(sent_first)
    assert len(sent_first) - 1 + len(sent_second) == second.graph.chunks  # the failed chunk alone sent twice
    assert third.chunks_resumed == 0 and third.graph.chunks < second.graph.chunks


def _tick_digest_sensor(instance, definitions) -> list[str]:
    with build_sensor_context(instance=instance, resources=definitions.resources) as context:
        result = digest_sensor(context)
    return [r.partition_key for r in getattr(result, "run_requests", None) or []]


# --- export ----------------------------------------------------------------------------------------


# The nodes an exported edge may end on that the export leaves to the target graph: seeded there
# (the frontier, agent identities) or its own (issues). Its import culls an edge to one it lacks.
OUTSIDE = {"frontier", "@neo-opus-ada", "issue-42"}


def test_the_export_is_node_lines_then_edge_lines_in_the_graph_backup_shape(tmp_path, store):
    """Two sessions that name the same entities: one node line each, with the original's id, so a
    merge import into a Neo graph that holds them adds edges to them rather than new nodes; their
    shared relation reinforced across sessions, and AGENT_MEMORY mini summaries readable by an import."""
    both = "The RowSelectionModel depends on the RecordStore."
    sessions = {
        sid: [turn(sid, 0, both, mini_summary=f"{sid} mini"), turn(sid, 1, f"#42 in {sid}")] for sid in ("a", "b")
    }
    shared = {
        "entities": [
            {"name": "RowSelectionModel", "type": "CLASS", "description": "keeps the selection"},
            {"name": "RecordStore", "type": "CLASS", "description": "holds records"},
        ],
        "relations": [{"source": "RowSelectionModel", "target": "RecordStore", "type": "DEPENDS_ON",
                       "description": "reads records", "weight": 2.0}],
    }  # fmt: skip
    with ModelServer(script(graph=lambda received: Behaviour.reply(shared))) as server:
        client = OpenAIChatClient(server.url, "fake-model")
        for turns in sessions.values():
            ledger = RunLedger(store, "r")
            result = digest_session(turns, summary_row(turns), client, make_limits(), SMALL_MODEL, ledger)
            store.graph.write_graph(result.graph, run_id="r")
    settings = dataclasses.replace(load_settings({"DIGEST_HOME": str(tmp_path)}), db_path=store.path)
    out = export_graph(settings, str(tmp_path))
    path = Path(out["path"])
    assert path.name.startswith("graph-backup-") and path.suffix == ".jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    kinds = [line["type"] for line in lines]
    assert kinds == ["node"] * out["nodes"] + ["edge"] * out["edges"]  # every node line first
    shapes = {"node": {"id", "label", "properties"}, "edge": {"id", "source", "target", "type", "properties"}}
    for line in lines:
        assert set(line) == {"type", "data"} and set(line["data"]) == shapes[line["type"]]
    node_lines = [line["data"] for line in lines if line["type"] == "node"]
    nodes = {n["id"]: n for n in node_lines}
    edges = {line["data"]["id"]: line["data"] for line in lines if line["type"] == "edge"}
    assert len(nodes) == len(node_lines)  # one line per id
    assert all(isinstance(e["properties"]["weight"], float) for e in edges.values())
    assert all({e["source"], e["target"]} <= set(nodes) | OUTSIDE for e in edges.values())
    assert {n["label"] for n in node_lines} == {"SESSION_SUMMARY", "SESSION", "AGENT_MEMORY", "CLASS"}
    # Shared across the two sessions: one node line each, with the original's id, the relation
    # reinforced as a re-link; the node's context is the later session's, as the original's upsert.
    assert [i for i in nodes if i.startswith("CLASS:")] == ["CLASS:RecordStore", "CLASS:RowSelectionModel"]
    assert nodes["CLASS:RecordStore"] == {"id": "CLASS:RecordStore", "label": "CLASS", "properties": {
        "name": "RecordStore", "description": "holds records", "semanticVectorId": "summary_b",
        "logical_layer": "Unknown", "stability": "UNKNOWN", "gravity_well": False, "strategic_weight": 0.1,
        "confidence": 0.5, "tags": [], "context_source": "b", "evidence": "raw-turns"}}  # fmt: skip
    relation = edges["CLASS:RowSelectionModel->CLASS:RecordStore:DEPENDS_ON"]
    assert relation["properties"]["weight"] == pytest.approx(reinforce(2.0, 2.0))
    assert relation["properties"]["justification"] == "reads records"
    for sid in ("a", "b"):
        assert (
            f"frontier->summary_{sid}:SESSION_COMPLETED" in edges and f"summary_{sid}->issue-42:DISCUSSED_IN" in edges
        )
    assert {"summary_a", "summary_b", "session:a", "session:b"} <= set(nodes)
    # Loadable back: the AGENT_MEMORY lines carry the mini summaries an import reads.
    minis = [parse_graph_line(line) for line in lines]
    assert sorted(m["text"] for m in minis if m) == ["a mini", "b mini"]


def test_the_sessions_own_graph_is_laid_over_the_imported_one_by_id(tmp_path, store):
    """Ingested graph lines are the base of `export-graph`: a session's own row of the same id wins
    its label and non-empty properties, an imported key it lacks stays; an edge takes the session's
    weight (a copy of our own export does not reinforce it), a second session reinforces as before;
    imported rows no session has go out as they came."""
    line = {"source_file": "graph-backup-1.jsonl", "source_line": 1}
    store.ingest.write_imported_graph(
        [
            {"id": "CLASS:Grid", "label": "CONCEPT", "properties": json.dumps({"name": "Grid", "description": "old", "x": 1}), **line},
            {"id": "@neo-gpt", "label": "AgentIdentity", "properties": json.dumps({"name": "GPT"}), **line},
        ],
        [
            {"id": "g", "source": "CLASS:Grid", "target": "@neo-gpt", "type": "RELATES_TO",
             "properties": json.dumps({"weight": 1.5, "justification": "imported"}), **line},
            {"id": "h", "source": "@neo-gpt", "target": "CLASS:Grid", "type": "X", "properties": json.dumps({}), **line},
        ],
    )  # fmt: skip
    stats = ExtractionStats(0, 0, 0, 0)
    for sid, weight in (("a", 1.0), ("b", 2.0)):
        nodes = [GraphNode("CLASS:Grid", "CLASS", {"name": "Grid", "description": "" if sid == "a" else "new"})]
        edges = [GraphEdge("g", "CLASS:Grid", "@neo-gpt", "RELATES_TO", {"weight": weight})]
        store.graph.write_graph(SessionGraph(sid, "rev", nodes, edges, 0, 0, stats, 0))
    settings = dataclasses.replace(load_settings({"DIGEST_HOME": str(tmp_path)}), db_path=store.path)
    nodes, edges = _export_lines(settings, tmp_path / "export.jsonl")
    assert nodes["CLASS:Grid"] == {
        "id": "CLASS:Grid",
        "label": "CLASS",
        "properties": {"name": "Grid", "description": "new", "x": 1},
    }
    assert nodes["@neo-gpt"] == {"id": "@neo-gpt", "label": "AgentIdentity", "properties": {"name": "GPT"}}
    assert edges["g"]["properties"] == {"weight": pytest.approx(reinforce(1.0, 2.0)), "justification": "imported"}
    assert edges["h"] == {"id": "h", "source": "@neo-gpt", "target": "CLASS:Grid", "type": "X", "properties": {}}


# --- the real embedded model -------------------------------------------------------------------------


@pytest.mark.embedded
def test_embedded_model_extraction_validates_and_lands_in_duckdb(store):
    from resources.embedded_server import MODEL_ALIAS, EmbeddedServer

    turns = [
        turn("grid-fix", 0, "RowSelectionModel kept selected rows by index; I changed it to keep record ids "
                            "in onStoreSort() and added a test."),
    ]  # fmt: skip
    replies = []

    class Recording:
        def __init__(self, inner):
            self.inner, self.model, self.streaming = inner, inner.model, inner.streaming

        def chat(self, prompt, **kwargs):
            replies.append(self.inner.chat(prompt, **kwargs))
            return replies[-1]

    # A short output cap keeps it fast; a reply cut there keeps its complete items.
    policy = GraphPolicy(output_limit_tokens=128, timeout_s=170)
    # One thread: on a shared 2-core host, llama.cpp's spinning thread barriers collapse when oversubscribed.
    with EmbeddedServer(threads=1) as server:
        client = Recording(OpenAIChatClient(server.url, MODEL_ALIAS, schema_style="json_object"))
        result = digest_session(turns, summary_row(turns), client, make_limits(), policy, RunLedger(store, "embedded"))
    assert result.failure is None, store.query("SELECT error_text FROM attempts").to_dict("records")
    (reply,) = replies
    parsed = parse_extraction(reply.text) if reply.finish_reason != "length" else salvage_cut_reply(reply.text)
    assert isinstance(parsed, GraphExtraction) and parsed.entities
    store.graph.write_graph(result.graph, run_id="embedded")
    labels = store.query("SELECT label, count(*) AS n FROM graph_nodes GROUP BY 1")
    counts = dict(zip(labels["label"], labels["n"]))
    assert counts["SESSION_SUMMARY"] == counts["SESSION"] == counts["AGENT_MEMORY"] == 1
    entity_rows = store.query(
        "SELECT label, properties->>'evidence' AS evidence FROM graph_nodes "
        "WHERE label NOT IN ('SESSION_SUMMARY', 'SESSION', 'AGENT_MEMORY', 'AGENT', 'ISSUE')"
    )
    assert set(entity_rows["label"]) <= set(ENTITY_TYPES) and set(entity_rows["evidence"]) <= {"raw-turns"}
    assert len(entity_rows) == result.graph.stats.entities
    attempt = store.query("SELECT stage, outcome, prompt_tokens, completion_tokens FROM attempts").iloc[0]
    assert (attempt["stage"], attempt["outcome"]) == ("graph", "ok") and attempt["completion_tokens"] > 0
    assert store.graph.digest_state("grid-fix").digest_state == "digested"
