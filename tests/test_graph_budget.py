"""The graph stage's bounds: the raw cap on every model call, the chunk limit, a session over the run
budget finished by the next run, a retry that sends only the chunks not done."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from dagster import build_sensor_context

import tests.test_graph
from digest.graph import GraphPolicy, digest_session
from digest.prompts import TURN_SEPARATOR
from digest.settings import load_settings
from digest.turns import Turn, compose_document
from pipelines.sensors import digest_sensor
from resources.model_clients import OllamaChatClient, OpenAIChatClient
from resources.store import DigestStore, RunLedger
from tests.bundles import memory_row
from tests.conftest import make_limits, make_turns
from tests.model_server import Behaviour, ModelServer, Received
from tests.test_graph import (
    _definitions,
    _ingest,
    _NullLedger,
    _run,
    echo_extraction,
    is_graph_request,
    script,
    summary_row,
)

instance = tests.test_graph.instance  # the fixture of tests/test_graph.py: pytest finds it here by this name


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
