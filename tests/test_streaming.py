"""Streamed model calls: the real clients against local servers that stream both wire protocols
exactly (Ollama's chunked NDJSON, the OpenAI protocol's server-sent events ending in `[DONE]`),
well and badly. The tests that wait out a stall window or a ceiling are in
test_streaming_waits.py (integration tier)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from digest.model_api import (
    ContextOverflow,
    HostUnreachable,
    MalformedReply,
    ModelError,
    OutputLimitExceeded,
)
from resources.model_clients import OllamaChatClient, OpenAIChatClient, reply_byte_cap
from tests.fault_server import FaultServer
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer, fake_token_count

PROTOCOLS = ("openai", "ollama")
STALL_S = 0.5


def _client(protocol: str, url: str):
    if protocol == "openai":
        return OpenAIChatClient(url, "m", schema_style="json_object")
    return OllamaChatClient(url, "m", num_ctx=4096)


def _chat(client, *, timeout_s: float = 10.0, stall_s: float | None = STALL_S, max_output_tokens: int = 256):
    return client.chat(
        "Summarize.", schema=None, max_output_tokens=max_output_tokens, timeout_s=timeout_s, stall_s=stall_s
    )


def _caught(call) -> ModelError:
    with pytest.raises(ModelError) as info:
        call()
    return info.value


@pytest.fixture(scope="module")
def model_server():
    with ModelServer() as server:
        yield server


@pytest.fixture
def server(model_server) -> ModelServer:
    model_server.script = lambda received: Behaviour.reply()
    model_server.requests.clear()
    return model_server


def _script(server: ModelServer, **fields) -> None:
    server.script = lambda received: dataclasses.replace(Behaviour.reply(), **fields)


# --- a good stream ------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_streamed_reply_is_assembled_with_its_counts_and_its_first_token_time(server, protocol):
    _script(server, first_piece_s=0.2, piece_gap_s=0.003)
    client = _client(protocol, server.url)
    reply = _chat(client)

    [request] = server.chat_requests()
    assert request.body["stream"] is True
    if protocol == "openai":
        assert request.body["stream_options"] == {"include_usage": True}
    assert json.loads(reply.text) == GOOD_SUMMARY
    # The server's counts: the usage chunk (OpenAI), the done line (Ollama).
    assert reply.prompt_tokens == max(1, len("Summarize.") // 4)
    assert reply.completion_tokens == len(json.dumps(GOOD_SUMMARY)) // 4
    assert reply.finish_reason == "stop"
    assert 0.2 <= reply.first_token_s < reply.duration_s
    assert client.streaming and request.gone_after_s is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_length_cut_stream_reports_its_finish_reason(server, protocol):
    _script(server, finish="length")
    assert _chat(_client(protocol, server.url)).finish_reason == "length"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_streamed_reply_over_the_byte_cap_is_refused(server, protocol):
    cap = reply_byte_cap(16)
    server.script = lambda received: Behaviour(content="a" * (cap + 1), piece_chars=4096)
    over = _caught(lambda: _chat(_client(protocol, server.url), max_output_tokens=16))
    assert type(over) is OutputLimitExceeded and f"over {cap} bytes" in str(over)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_context_overflow_to_a_streamed_request_is_an_overflow(server, protocol):
    if protocol == "openai":
        server.script = lambda received: Behaviour.overflow()
    else:
        server.script = lambda received: Behaviour(
            status=400, error_body={"error": "the input length exceeds the context length"}
        )
    client = _client(protocol, server.url)
    error = _caught(lambda: _chat(client))
    assert type(error) is ContextOverflow and error.status == 400
    assert client.streaming  # an error reply is no refusal to stream


# --- stuck, trickling, broken --------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_stream_cut_before_its_end_is_a_host_that_broke_off(protocol):
    with FaultServer("stream-cut") as server:
        error = _caught(lambda: _chat(_client(protocol, server.url)))
    assert type(error) is HostUnreachable and "broke off" in str(error)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_stream_that_breaks_its_protocol_mid_way_is_malformed(protocol):
    with FaultServer("stream-malformed") as server:
        error = _caught(lambda: _chat(_client(protocol, server.url)))
    assert type(error) is MalformedReply and "malformed stream chunk" in str(error)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_slow_stream_to_a_good_end(protocol):
    with FaultServer("stream-slow", gap_s=0.01) as server:
        reply = _chat(_client(protocol, server.url))
    assert json.loads(reply.text) == GOOD_SUMMARY and reply.finish_reason == "stop"
    assert reply.prompt_tokens == 12 and reply.first_token_s >= 0.01


# --- servers that do not stream ------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_whole_json_reply_to_a_stream_request_is_read_and_streaming_turned_off(protocol):
    with FaultServer("stream-ignored") as server:
        client = _client(protocol, server.url)
        first = _chat(client)
        assert not client.streaming
        second = _chat(client)
    assert json.loads(first.text) == GOOD_SUMMARY == json.loads(second.text)
    assert (first.prompt_tokens, first.completion_tokens) == (12, 34)
    assert first.first_token_s is None  # not streamed: no first token to time
    assert server.streamed == [True, False]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_server_that_rejects_stream_is_asked_again_without_it(protocol):
    with FaultServer("stream-rejected") as server:
        client = _client(protocol, server.url)
        reply = _chat(client)
        _chat(client)
    assert json.loads(reply.text) == GOOD_SUMMARY and not client.streaming
    assert server.streamed == [True, False, False]  # one retry in the first call, then never asked


def test_a_server_that_ignores_include_usage_streams_without_a_prompt_count(server):
    """llama-cpp-python's server ignores include_usage: the server's tokenizer counts the prompt,
    the answer is counted in pieces."""

    def no_usage(received):
        received.body.pop("stream_options", None)  # the server reads the request without it
        return dataclasses.replace(Behaviour.reply(), piece_chars=10)

    server.script = no_usage
    reply = _chat(_client("openai", server.url))
    assert json.loads(reply.text) == GOOD_SUMMARY
    assert reply.prompt_tokens == fake_token_count("Summarize.")  # /tokenize's count
    assert reply.completion_tokens == -(-len(json.dumps(GOOD_SUMMARY)) // 10)  # the pieces
    assert [r.path for r in server.requests] == ["/v1/chat/completions", "/tokenize"]
