"""The routing rule end to end: real HTTP to a local model server, the ledger in a real DuckDB file."""

from __future__ import annotations

import json

import pytest

from digest.summary_output import OutputParseError, parse_summary_output
from digest.synthesis import FALLBACK_CHARS, MIN_COMPACT_CHARS, raw_route, summarize_session
from digest.turns import Turn, compose_document
from resources.model_clients import OllamaChatClient, OpenAIChatClient
from resources.store import RunLedger
from tests.conftest import make_limits, make_turns
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer


def _client(server: ModelServer) -> OpenAIChatClient:
    return OpenAIChatClient(server.url, "fake-model", schema_style="json_object")


def _ledger(store):
    return RunLedger(store, run_id="test-run")


def _rows(store, sql):
    return store.query(sql).to_dict("records")


def test_small_session_gets_one_raw_call(store):
    turns = make_turns("small", 3)
    with ModelServer() as server:
        result = summarize_session(turns, _client(server), make_limits(), _ledger(store))
    assert len(server.chat_requests()) == 1
    # The raw prompt carries every turn document, in canonical order.
    prompt = server.chat_requests()[0].prompt
    positions = [prompt.index(t.document) for t in turns]
    assert positions == sorted(positions)
    summary = result.summary
    assert summary.source_tier == "raw" and summary.degraded is False and summary.raw_canonical is True
    assert summary.route_reason == "within-cap"
    assert summary.memory_count == 3
    assert summary.output.title == GOOD_SUMMARY["title"]
    attempts = _rows(store, "SELECT tier, outcome, run_id, prompt_tokens FROM attempts")
    assert attempts == [
        {"tier": "raw", "outcome": "ok", "run_id": "test-run", "prompt_tokens": attempts[0]["prompt_tokens"]}
    ]
    assert attempts[0]["prompt_tokens"] > 0
    assert _rows(store, "SELECT * FROM friction_events") == []


def test_over_cap_with_mini_summaries_never_sends_the_raw_prompt(store):
    turns = make_turns("big", 40, doc_bytes=400, minis=40)  # ~18 KB of documents, cap 2000 tokens = 6 KB
    with ModelServer() as server:
        result = summarize_session(turns, _client(server), make_limits(), _ledger(store))
    requests = server.chat_requests()
    assert len(requests) == 1
    sent = requests[0].prompt
    assert not any(t.document in sent for t in turns), "a raw turn document reached the model"
    assert "Turn 1: Turn 0 mini summary" in sent and "Turn 40: Turn 39 mini summary" in sent
    summary = result.summary
    assert (summary.source_tier, summary.degraded, summary.raw_canonical) == ("miniSummary", True, True)
    assert summary.route_reason == "over-raw-cap"
    assert summary.mini_summary_count == 40
    assert summary.raw_tokens_estimate > 2000 >= summary.prompt_tokens_estimate
    friction = _rows(store, "SELECT symptom, emission_point, raw_cap_tokens, note FROM friction_events")
    assert len(friction) == 1
    assert friction[0]["symptom"] == "size-precheck-skip"
    assert friction[0]["emission_point"] == "pre-invocation"
    assert friction[0]["raw_cap_tokens"] == 2000
    assert "over-raw-cap" in friction[0]["note"]
    assert _rows(store, "SELECT tier, outcome FROM attempts") == [{"tier": "miniSummary", "outcome": "ok"}]


def test_over_cap_without_mini_summaries_sends_each_turns_card(store):
    turns = make_turns("big", 30, doc_bytes=900)
    with ModelServer() as server:
        result = summarize_session(turns, _client(server), make_limits(), _ledger(store))
    sent = server.chat_requests()[0].prompt
    summary = result.summary
    # Made of facts, not of the turns' text: degraded and not raw-canonical.
    assert (summary.source_tier, summary.degraded, summary.raw_canonical) == ("turnCards", True, True)
    for i in range(1, len(turns) + 1):
        line = next(line for line in sent.splitlines() if line.startswith(f"Turn {i}: "))
        assert len(line) - len(f"Turn {i}: ") <= FALLBACK_CHARS
        assert line == f"Turn {i}: asked: Prompt {i - 1}: fix the grid; replied: step {i - 1} of the refactor " + (
            "touched src/grid/Row.mjs and worker/Manager.mjs."
        )
    assert not any(t.document in sent for t in turns)
    assert "User Prompt:" not in sent  # no turn's raw head
    assert _rows(store, "SELECT tier, outcome FROM attempts") == [{"tier": "turnCards", "outcome": "ok"}]


def test_a_turn_with_no_card_keeps_its_snippet_and_turns_with_none_are_truncated_raw(store):
    # Code and nothing else: no ask, no fact, no reply in prose.
    code = "{ rows[i] = grid.map((r) => r.id); }\n" * 30
    mixed = make_turns("mixed", 30, doc_bytes=900)
    mixed[3] = Turn(**{**mixed[3].__dict__, "document": compose_document("", "", code)})
    with ModelServer() as server:
        result = summarize_session(mixed, _client(server), make_limits(), _ledger(store))
        sent = server.chat_requests()[0].prompt
    assert result.summary.source_tier == "turnCards"
    assert "Turn 4: User Prompt: Agent Thought: Agent Response: { rows[i]" in sent
    bare = [Turn(**{**t.__dict__, "document": compose_document("", "", code)}) for t in make_turns("bare", 30)]
    with ModelServer() as server:
        result = summarize_session(bare, _client(server), make_limits(), _ledger(store))
    summary = result.summary
    assert (summary.source_tier, summary.degraded, summary.raw_canonical) == ("truncatedRaw", True, True)


def test_partial_mini_summaries_are_labelled_mini_summary(store):
    turns = make_turns("big", 30, doc_bytes=900, minis=2)
    with ModelServer() as server:
        result = summarize_session(turns, _client(server), make_limits(), _ledger(store))
        sent = server.chat_requests()[0].prompt
    assert result.summary.source_tier == "miniSummary"
    assert "Turn 1: Turn 0 mini summary" in sent
    assert "Turn 3: User Prompt: Prompt 2" in sent  # no mini summary: the raw snippet


def test_raw_timeout_falls_back_to_degraded_and_both_attempts_are_ledgered(store):
    turns = make_turns("slow", 3, minis=1)

    def script(received):
        # The raw prompt carries the full documents; hang on it, answer the compact one.
        return Behaviour.hang(3.0) if turns[0].document in received.prompt else Behaviour.reply()

    with ModelServer(script) as server:
        result = summarize_session(turns, _client(server), make_limits(timeout_s=0.5), _ledger(store))
    assert len(server.chat_requests()) == 2
    assert result.summary.source_tier == "miniSummary" and result.summary.degraded is True
    assert result.summary.route_reason == "raw-timeout"
    attempts = _rows(store, "SELECT tier, outcome, duration_s FROM attempts ORDER BY attempt_id")
    assert [(a["tier"], a["outcome"]) for a in attempts] == [("raw", "timeout"), ("miniSummary", "ok")]
    assert attempts[0]["duration_s"] >= 0.5
    friction = _rows(store, "SELECT symptom, emission_point FROM friction_events")
    assert friction == [{"symptom": "timeout", "emission_point": "post-invocation-failure"}]


@pytest.mark.parametrize(
    "behaviour, reason",
    [
        (Behaviour.text("The session was about fixing a bug."), "not JSON"),
        (Behaviour.reply({**GOOD_SUMMARY, "category": "chore"}), "category"),
        (
            Behaviour.reply({**GOOD_SUMMARY, "title": "one two three four five six seven eight nine ten eleven"}),
            "title",
        ),
        (Behaviour.reply({k: v for k, v in GOOD_SUMMARY.items() if k != "impact"}), "impact"),
        (Behaviour.reply({**GOOD_SUMMARY, "quality": 140}), "quality"),
    ],
)
def test_unparseable_or_schema_violating_output_leaves_no_summary(store, behaviour, reason):
    with ModelServer(lambda received: behaviour) as server:
        result = summarize_session(make_turns("s", 2), _client(server), make_limits(), _ledger(store))
    assert result.summary is None and result.failure == "parse-failure"
    assert len(server.chat_requests()) == 1, "a parse failure must not fall back to the degraded path"
    attempt = _rows(store, "SELECT outcome, error_text FROM attempts")[0]
    assert attempt["outcome"] == "parse-failure" and reason in attempt["error_text"]
    assert _rows(store, "SELECT symptom, suggestion_kind FROM friction_events") == [
        {"symptom": "parse-failure", "suggestion_kind": "schema-repair"}
    ]


def test_context_overflow_leaves_no_summary_and_no_fallback(store):
    with ModelServer(lambda received: Behaviour.overflow()) as server:
        result = summarize_session(make_turns("s", 2), _client(server), make_limits(), _ledger(store))
    assert result.summary is None and result.failure == "context-overflow"
    assert len(server.chat_requests()) == 1
    friction = _rows(store, "SELECT symptom, error_text FROM friction_events")[0]
    assert friction["symptom"] == "context-overflow"
    assert "exceed context window" in friction["error_text"]  # the provider's text is kept


def test_failed_degraded_call_never_claims_raw(store):
    with ModelServer(lambda received: Behaviour.server_error()) as server:
        result = summarize_session(make_turns("big", 30, doc_bytes=900), _client(server), make_limits(), _ledger(store))
    assert result.summary is None and result.failure == "provider-error"
    assert [r["symptom"] for r in _rows(store, "SELECT symptom FROM friction_events ORDER BY event_id")] == [
        "size-precheck-skip",
        "provider-error",
    ]


def test_cap_off_sends_a_large_session_raw_while_it_fits_the_safe_band(store):
    turns = make_turns("big", 30, doc_bytes=400)  # ~5k tokens: over a 2000 cap, under the 6144 band
    limits = make_limits(raw_cap_tokens=None)
    with ModelServer() as server:
        result = summarize_session(turns, _client(server), limits, _ledger(store))
    assert result.summary.source_tier == "raw"
    assert result.summary.raw_cap_tokens is None
    assert all(t.document in server.chat_requests()[0].prompt for t in turns)


def test_safe_band_still_bounds_raw_calls_when_the_cap_is_off():
    limits = make_limits(raw_cap_tokens=None)
    assert raw_route(6000, limits) == "within-cap"
    assert raw_route(6145, limits) == "over-safe-band"
    assert raw_route(2001, make_limits()) == "over-raw-cap"
    # The answer needs room too: the context less the output cap bounds a raw prompt.
    assert raw_route(7800, make_limits(raw_cap_tokens=None, safe_limit_tokens=8192)) == "over-safe-band"


def test_compact_input_shrinks_to_fit_the_budget(store):
    turns = make_turns("huge", 60, doc_bytes=900)  # 60 x 280 chars would be ~6k tokens, over 2000
    limits = make_limits()
    with ModelServer() as server:
        result = summarize_session(turns, _client(server), limits, _ledger(store))
    sent = server.chat_requests()[0].prompt
    assert result.summary.prompt_tokens_estimate <= limits.prompt_budget_tokens
    assert limits.estimate_tokens(sent) <= limits.prompt_budget_tokens
    assert "Turn 60: " in sent  # every turn keeps its line


def test_compact_input_that_cannot_fit_is_refused_before_any_call(store):
    turns = make_turns("enormous", 400, doc_bytes=900)
    limits = make_limits(raw_cap_tokens=1000)
    with ModelServer() as server:
        result = summarize_session(turns, _client(server), limits, _ledger(store))
    assert server.chat_requests() == []
    assert result.summary is None and result.failure == "size-precheck-skip"
    notes = [r["note"] for r in _rows(store, "SELECT note FROM friction_events ORDER BY event_id")]
    assert len(notes) == 2 and f"{MIN_COMPACT_CHARS} characters" in notes[1]


def test_ollama_wire_carries_context_output_cap_and_schema(store):
    with ModelServer() as server:
        client = OllamaChatClient(server.url, "llama3.2", num_ctx=8192)
        result = summarize_session(make_turns("s", 2), client, make_limits(), _ledger(store))
    body = server.chat_requests()[0].body
    assert server.chat_requests()[0].path == "/api/chat"
    assert body["stream"] is True and body["options"]["num_ctx"] == 8192 and body["options"]["num_predict"] == 512
    assert body["format"]["required"] == list(GOOD_SUMMARY)
    assert result.summary.source_tier == "raw"


def test_suspected_truncation_is_flagged_from_the_servers_own_count(store):
    turns = make_turns("s", 3, doc_bytes=1500)
    truncated = Behaviour(content=json.dumps(GOOD_SUMMARY), prompt_tokens=100)  # Ollama cut the prompt
    with ModelServer(lambda received: truncated) as server:
        summarize_session(turns, OllamaChatClient(server.url, "m", num_ctx=8192), make_limits(), _ledger(store))
    with ModelServer() as server:  # counts len/4: a fair count for prose
        summarize_session(turns, OllamaChatClient(server.url, "m", num_ctx=8192), make_limits(), _ledger(store))
    flags = _rows(store, "SELECT suspected_truncation FROM attempts ORDER BY attempt_id")
    assert [f["suspected_truncation"] for f in flags] == [True, False]


def test_parse_summary_output_strips_a_code_fence():
    parsed = parse_summary_output("```json\n" + json.dumps(GOOD_SUMMARY) + "\n```")
    assert parsed.category == "bugfix"
    with pytest.raises(OutputParseError, match="not JSON"):
        parse_summary_output("```json\n{broken\n```")


def test_the_ledger_shows_both_requests_of_a_schema_style_fallback(store):
    """One attempt, two requests (json_schema refused, json_object answered): the real duration."""

    def script(received):
        if received.body["response_format"]["type"] == "json_schema":
            return Behaviour(
                status=500, error_body={"error": {"message": "response_format.type json_schema"}}, delay_s=0.3
            )
        return Behaviour(content=json.dumps(GOOD_SUMMARY), delay_s=0.3)

    with ModelServer(script) as server:
        client = OpenAIChatClient(server.url, "fake-model", schema_style="auto")
        result = summarize_session(make_turns("s", 2), client, make_limits(), _ledger(store))
    assert result.summary.source_tier == "raw" and len(server.chat_requests()) == 2
    [attempt] = _rows(store, "SELECT outcome, duration_s FROM attempts")
    assert attempt["outcome"] == "ok" and attempt["duration_s"] >= 0.6


@pytest.mark.parametrize("field", ["agent", "model", "tools_used", "many_agents"])
def test_huge_metadata_is_bounded_in_the_prompt_and_the_session_is_summarized(store, field):
    """Issue 22, defect 5: a 100,000-character `agent` or `model` went into the degraded prompt
    uncut, and both routes failed the size pre-check forever."""
    import dataclasses

    from digest.synthesis import METADATA_CHARS, METADATA_NAMES

    huge = "x" * 100_000
    turns = make_turns("meta", 30, doc_bytes=900)
    if field == "tools_used":
        turns = [
            dataclasses.replace(t, tools_used=json.dumps([f"{i}-{huge[:60]}" for i in range(5000)])) for t in turns
        ]
    elif field == "many_agents":
        turns = [dataclasses.replace(t, agent=f"agent-{i}-{'y' * 90}") for i, t in enumerate(turns)]
    else:
        turns = [dataclasses.replace(t, **{field: huge}) for t in turns]
    with ModelServer() as server:
        result = summarize_session(turns, _client(server), make_limits(), _ledger(store))
    assert result.summary is not None, _rows(store, "SELECT note FROM friction_events")
    assert result.summary.source_tier == "turnCards"
    [request] = server.chat_requests()
    header = request.prompt.split("\n---\n", 1)[0]
    assert (
        len(header) < 1000 + 3 * METADATA_NAMES * (METADATA_CHARS + 2)
        and huge[: METADATA_CHARS + 1] not in request.prompt
    )


def test_a_staged_reply_whose_run_died_before_its_attempt_is_ledgered_once_as_the_hosts_call(store):
    """Issue 22, defect 9: a run killed between staging its reply and writing the attempt left no
    `attempts` row, and the replay was ledgered as `cached`: the host's call was never counted. The
    staged reply carries its attempt: the replay records it as the call, once."""
    from resources.response_cache import CachedChatClient

    class KilledLedger:
        def start_attempt(self, attempt):
            return None

        def record_attempt(self, attempt, started=None):
            raise KeyboardInterrupt("killed between the staged reply and the attempt")

        def record_friction(self, event):
            pass

    turns = make_turns("staged", 3)
    session = ("staged", "rev-1")
    with ModelServer() as server:
        client = CachedChatClient(_client(server), store.cache, {"provider": "openai"}, reuse=False, session=session)
        with pytest.raises(KeyboardInterrupt):
            summarize_session(turns, client, make_limits(), KilledLedger())
        assert _rows(store, "SELECT * FROM attempts") == []
        client = CachedChatClient(_client(server), store.cache, {"provider": "openai"}, reuse=False, session=session)
        result = summarize_session(turns, client, make_limits(), _ledger(store))
        again = summarize_session(turns, client, make_limits(), _ledger(store))  # a rerun: a true replay
        served = len(server.chat_requests())
    assert result.summary is not None and again.summary is not None and served == 1
    attempts = _rows(store, "SELECT cached, duration_s FROM attempts ORDER BY attempt_id")
    assert [a["cached"] for a in attempts] == [False, True]  # the host's one call, then the replay
    assert attempts[0]["duration_s"] > 0


def test_a_call_is_in_the_ledger_while_it_runs_and_one_stopped_midway_is_interrupted(store):
    """Issue 31, defect 6: the attempt is written before the call (`in-flight`, what it sends and its
    deadline), and finished after it in the same row. A run stopped during the call (terminated from
    the UI) finishes the row as `interrupted` with the time spent, and its host's circuit is untouched."""
    seen_during_call = []

    def script(received):
        seen_during_call.extend(
            _rows(store, "SELECT stage, tier, model, host, outcome, prompt_bytes, deadline_s, run_id FROM attempts")
        )
        return Behaviour.reply()

    ledger = RunLedger(store, run_id="test-run", host="h1")
    with ModelServer(script) as server:
        assert summarize_session(make_turns("s", 2), _client(server), make_limits(), ledger).summary is not None
        prompt_bytes = len(server.chat_requests()[0].prompt.encode("utf-8"))
    [during] = seen_during_call
    assert during["outcome"] == "in-flight" and during["deadline_s"] > 0
    assert {k: during[k] for k in ("stage", "tier", "model", "host", "run_id")} == {
        "stage": "session-summary", "tier": "raw", "model": "fake-model", "host": "h1", "run_id": "test-run",
    }  # fmt: skip
    assert during["prompt_bytes"] == prompt_bytes
    [finished] = _rows(store, "SELECT outcome, duration_s, completion_tokens, deadline_s FROM attempts")
    assert finished["outcome"] == "ok" and finished["completion_tokens"] > 0
    assert finished["deadline_s"] == during["deadline_s"]

    class Stopped:
        model, streaming = "fake-model", False

        def chat(self, prompt, **limits):
            raise KeyboardInterrupt("terminated from the UI")

    with pytest.raises(KeyboardInterrupt):
        summarize_session(make_turns("t", 2), Stopped(), make_limits(), ledger)
    [stopped] = _rows(store, "SELECT outcome, duration_s, error_text FROM attempts WHERE session_id = 't'")
    assert stopped["outcome"] == "interrupted" and stopped["duration_s"] >= 0
    assert "KeyboardInterrupt: terminated from the UI" in stopped["error_text"]
    assert _rows(store, "SELECT * FROM host_circuits") == []  # a stop is not the host's failure
