"""The session graph: settings, chunking, extraction, merge, provenance and digest state, over a
real DuckDB file and real HTTP to tests/model_server.py; the stand-in model and the Dagster helpers
the test_graph_* modules share."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import pytest
from dagster import instance_for_test

from app.store_commands import export_graph
from digest.graph import (
    ENTITY_TYPES,
    Chunk,
    DigestState,
    GraphBuilder,
    GraphExtraction,
    GraphParseError,
    GraphPolicy,
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
from digest.prompts import TURN_SEPARATOR
from digest.settings import SettingsError, load_settings
from digest.turns import Turn, compose_document, input_revision
from digest.visibility import summary_user_id
from pipelines.definitions import build_definitions
from pipelines.sensors import register_partitions
from resources.model_clients import OpenAIChatClient
from resources.store import DigestStore, RunLedger
from tests.conftest import make_limits, make_turns
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer, Received

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


def _export_lines(settings, path: Path) -> tuple[dict, dict]:
    """`export-graph` into `path`: its node lines by id (each id once) and its edge lines by id."""
    export_graph(settings, str(path))
    lines = [json.loads(line)["data"] for line in path.read_text().splitlines()]
    nodes = [d for d in lines if "label" in d]
    assert len({n["id"] for n in nodes}) == len(nodes)
    return {n["id"]: n for n in nodes}, {d["id"]: d for d in lines if "source" in d}


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
