"""The chat clients over real HTTP against a local server that speaks the real wire protocols."""

from __future__ import annotations

import dataclasses
import json
import socket

import pytest

from digest.friction import classify_error
from digest.model_api import (
    ContextOverflow,
    HostUnreachable,
    MalformedReply,
    ModelError,
    ModelTimeout,
    OutputLimitExceeded,
    ProviderError,
)
from digest.summary_output import OutputParseError
from resources.model_clients import (
    MIN_REPLY_BYTES,
    REPLY_BYTES_PER_TOKEN,
    OllamaChatClient,
    OpenAIChatClient,
    reply_byte_cap,
)
from tests.local_http import LocalServer, QuietHandler
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer

SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "title": {"type": "string"}},
    "required": ["summary", "title"],
}


def _chat(client, prompt: str = "Summarize this session.", *, timeout_s: float = 5.0, max_output_tokens: int = 321):
    return client.chat(prompt, schema=SCHEMA, max_output_tokens=max_output_tokens, timeout_s=timeout_s)


def _caught(call) -> ModelError:
    with pytest.raises(ModelError) as info:
        call()
    return info.value


class RawServer(LocalServer):
    """A bare HTTP server answering every POST with a fixed status and body (for malformed replies)."""

    def __init__(self, status: int, body: bytes, content_type: str = "application/json"):
        outer = self
        self.paths: list[str] = []

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.paths.append(self.path)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(Handler)


@pytest.fixture(scope="module")
def shared_model_server():
    with ModelServer() as model_server:
        yield model_server


@pytest.fixture
def server(shared_model_server) -> ModelServer:
    """The module's ModelServer with a fresh script (a good reply) and an empty request log."""
    shared_model_server.script = lambda received: Behaviour.reply()
    shared_model_server.requests.clear()
    return shared_model_server


def _closed_port() -> int:
    """A port nothing listens on: bound, then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- OpenAI-compatible ----------------------------------------------------------------------


@pytest.mark.parametrize("style", ["json_schema", "json_object"])
def test_openai_request_and_reply(style, server):
    client = OpenAIChatClient(server.url + "/", "qwen2.5-3b", schema_style=style)
    server.script = lambda received: dataclasses.replace(Behaviour.reply(), delay_s=0.05)
    reply = _chat(client, "Summarize: the agent fixed auth.py", max_output_tokens=321)

    [request] = server.chat_requests()
    assert request.path == "/v1/chat/completions"
    body = request.body
    assert body["model"] == "qwen2.5-3b"
    assert body["messages"] == [{"role": "user", "content": "Summarize: the agent fixed auth.py"}]
    assert body["temperature"] == 0
    assert body["max_tokens"] == 321
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}  # every call streams
    if style == "json_schema":
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "sessionSummary", "schema": SCHEMA, "strict": True},
        }
    else:
        assert body["response_format"] == {"type": "json_object", "schema": SCHEMA}

    assert json.loads(reply.text) == GOOD_SUMMARY
    # The server's own counts: ModelServer reports len(prompt)//4 and len(content)//4.
    assert reply.prompt_tokens == len("Summarize: the agent fixed auth.py") // 4
    assert reply.completion_tokens == len(json.dumps(GOOD_SUMMARY)) // 4
    assert reply.finish_reason == "stop"
    assert 0.05 <= reply.duration_s < 5.0  # the server's delay, in seconds, within the call's deadline


def _rejects_json_schema(received) -> Behaviour:
    """llama-cpp-python's server: a 500 naming `json_schema` for OpenAI's form, fine with json_object."""
    if received.body["response_format"]["type"] == "json_schema":
        return Behaviour(
            status=500,
            error_body={
                "error": {"message": "Input should be 'text' or 'json_object': response_format.type json_schema"}
            },
        )
    return Behaviour.reply()


def test_auto_schema_style_falls_back_to_json_object_once_and_remembers(server):
    server.script = _rejects_json_schema
    client = OpenAIChatClient(server.url, "m", schema_style="auto")
    first = _chat(client, "first")
    second = _chat(client, "second")

    assert json.loads(first.text) == GOOD_SUMMARY and json.loads(second.text) == GOOD_SUMMARY
    sent = [(r.prompt, r.body["response_format"]["type"]) for r in server.chat_requests()]
    assert sent == [("first", "json_schema"), ("first", "json_object"), ("second", "json_object")]
    retry = server.chat_requests()[1].body
    assert retry["response_format"] == {"type": "json_object", "schema": SCHEMA}
    # The retry is the same request but for the format.
    assert {k: v for k, v in retry.items() if k != "response_format"} == {
        k: v for k, v in server.chat_requests()[0].body.items() if k != "response_format"
    }
    assert client.schema_style == "json_object"


def test_auto_schema_style_keeps_json_schema_when_the_server_takes_it(server):
    client = OpenAIChatClient(server.url, "m")  # auto is the default
    _chat(client, "one")
    _chat(client, "two")
    assert [r.body["response_format"]["type"] for r in server.chat_requests()] == ["json_schema", "json_schema"]


def test_an_explicit_json_schema_style_never_falls_back(server):
    server.script = _rejects_json_schema
    client = OpenAIChatClient(server.url, "m", schema_style="json_schema")
    error = _caught(lambda: _chat(client))
    assert isinstance(error, ProviderError) and "HTTP 500" in str(error)
    assert len(server.chat_requests()) == 1


def test_auto_does_not_retry_an_unrelated_server_error(server):
    server.script = lambda received: Behaviour.server_error()
    client = OpenAIChatClient(server.url, "m", schema_style="auto")
    error = _caught(lambda: _chat(client))
    assert type(error) is ProviderError
    assert str(error) == "HTTP 500: internal error"
    assert len(server.chat_requests()) == 1
    assert client.schema_style == "auto"


def test_an_unknown_schema_style_is_refused():
    with pytest.raises(ValueError, match="xml"):
        OpenAIChatClient("http://127.0.0.1:1", "m", schema_style="xml")


def test_context_length_exceeded_is_a_context_overflow(server):
    server.script = lambda received: Behaviour.overflow(n_prompt=9000, n_ctx=8192)
    client = OpenAIChatClient(server.url, "m", schema_style="json_object")
    error = _caught(lambda: _chat(client))
    assert type(error) is ContextOverflow
    assert "HTTP 400" in str(error) and "8192" in str(error)
    assert len(server.chat_requests()) == 1


def test_a_slow_server_is_a_timeout(server):
    server.script = lambda received: Behaviour.hang(2.0)
    client = OpenAIChatClient(server.url, "m", schema_style="json_object")
    error = _caught(lambda: _chat(client, timeout_s=0.2))
    assert type(error) is ModelTimeout
    assert "0.2s" in str(error)
    assert 0.15 <= error.duration_s < 1.9  # gave up at the timeout, did not wait for the reply


def test_an_unreachable_server_is_a_provider_error():
    url = f"http://127.0.0.1:{_closed_port()}"
    error = _caught(lambda: _chat(OpenAIChatClient(url, "m"), timeout_s=2.0))
    # Its own kind, so the host's circuit can tell it from an error the server answered with.
    assert type(error) is HostUnreachable and isinstance(error, ProviderError) and error.status is None
    assert url in str(error)


@pytest.mark.parametrize(
    "body",
    [
        b"<html>502 Bad Gateway</html>",
        b'{"choices": []}',
        b'{"choices": [{"finish_reason": "stop"}]}',
        b'["not", "an", "object"]',
    ],
)
def test_a_malformed_chat_completion_is_a_provider_error(body):
    with RawServer(200, body) as server:
        error = _caught(lambda: _chat(OpenAIChatClient(server.url, "m", schema_style="json_object")))
    assert type(error) is MalformedReply and classify_error(error) == "provider-error"
    assert "malformed chat completion" in str(error)
    assert server.paths == ["/v1/chat/completions"]


def test_a_non_json_error_body_is_still_a_provider_error():
    with RawServer(503, b"upstream unavailable", content_type="text/plain") as server:
        error = _caught(lambda: _chat(OpenAIChatClient(server.url, "m", schema_style="json_object")))
    assert type(error) is ProviderError and str(error) == "HTTP 503: upstream unavailable" and error.status == 503


# --- Ollama ---------------------------------------------------------------------------------


def test_ollama_request_and_reply(server):
    client = OllamaChatClient(server.url, "qwen2.5:3b", num_ctx=8192)
    reply = _chat(client, "Summarize: the agent fixed auth.py", max_output_tokens=400)

    [request] = server.chat_requests()
    assert request.path == "/api/chat"
    body = request.body
    assert body["model"] == "qwen2.5:3b"
    assert body["messages"] == [{"role": "user", "content": "Summarize: the agent fixed auth.py"}]
    assert body["stream"] is True  # every call streams
    assert body["format"] == SCHEMA
    assert body["options"] == {"num_ctx": 8192, "num_predict": 400, "temperature": 0}
    assert body["keep_alive"] == "5m"

    assert json.loads(reply.text) == GOOD_SUMMARY
    assert reply.prompt_tokens == len("Summarize: the agent fixed auth.py") // 4  # prompt_eval_count
    assert reply.completion_tokens == len(json.dumps(GOOD_SUMMARY)) // 4  # eval_count
    assert reply.finish_reason == "stop"


def test_ollama_errors(server):
    server.script = lambda received: Behaviour.server_error()
    failed = _caught(lambda: _chat(OllamaChatClient(server.url, "m", num_ctx=4096)))
    assert type(failed) is ProviderError and "HTTP 500" in str(failed)

    server.script = lambda received: Behaviour.hang(2.0)
    slow = _caught(lambda: _chat(OllamaChatClient(server.url, "m", num_ctx=4096), timeout_s=0.2))
    assert type(slow) is ModelTimeout

    assert [r.path for r in server.chat_requests()] == ["/api/chat", "/api/chat"]

    with RawServer(200, b'{"done": true}') as raw:
        malformed = _caught(lambda: _chat(OllamaChatClient(raw.url, "m", num_ctx=4096)))
    assert type(malformed) is MalformedReply and "malformed chat reply" in str(malformed)
    assert raw.paths == ["/api/chat"]


# --- friction symptoms of the real errors ---------------------------------------------------


def test_classify_error_maps_the_clients_errors_to_symptoms(server):
    server.script = lambda received: Behaviour.hang(2.0)
    timeout = _caught(lambda: _chat(OpenAIChatClient(server.url, "m", "json_object"), timeout_s=0.2))
    server.script = lambda received: Behaviour.overflow()
    overflow = _caught(lambda: _chat(OpenAIChatClient(server.url, "m", "json_object")))
    server.script = lambda received: Behaviour.server_error()
    server_error = _caught(lambda: _chat(OpenAIChatClient(server.url, "m", "json_object")))
    unreachable = _caught(lambda: _chat(OpenAIChatClient(f"http://127.0.0.1:{_closed_port()}", "m"), timeout_s=2.0))

    assert classify_error(timeout) == "timeout"
    assert classify_error(overflow) == "context-overflow"
    assert classify_error(server_error) == "provider-error"
    assert classify_error(unreachable) == "provider-error"
    # Not a model error: the caller could not parse the reply, whatever words the error quotes.
    assert classify_error(OutputParseError("reply is not JSON: 'request timeout, aborted'")) == "parse-failure"
    assert classify_error(OutputParseError("reply is not JSON: 'maximum context exceeded'")) == "parse-failure"


# --- classified by what failed --------------------------------------------------------------


@pytest.mark.parametrize(
    "status, error, expected",
    [
        # llama.cpp's server: the error type, whatever the status.
        (
            400,
            {"error": {"code": 400, "type": "exceed_context_size_error", "message": "request (9000 tokens) too large"}},
            ContextOverflow,
        ),
        # vLLM: only a message, on a 400.
        (
            400,
            {"error": {"message": "This model's maximum context length is 8192 tokens.", "type": "BadRequestError"}},
            ContextOverflow,
        ),
        # A 500 that names the context is a server failure, not the prompt's size.
        (500, {"error": {"message": "slot timeout, context freed", "type": "server_error"}}, ProviderError),
        (503, {"error": {"message": "maximum slots exceeded", "type": "unavailable_error"}}, ProviderError),
    ],
)
def test_openai_errors_are_classified_by_code_then_by_the_servers_message(server, status, error, expected):
    server.script = lambda received: Behaviour(status=status, error_body=error)
    failure = _caught(lambda: _chat(OpenAIChatClient(server.url, "m", schema_style="json_object")))
    assert type(failure) is expected and failure.status == status
    assert failure.duration_s > 0


@pytest.mark.parametrize("status", [400, 413, 500])
def test_ollamas_context_error_string_is_an_overflow_on_any_status(server, status):
    overflow = {"error": "the input length exceeds the context length"}
    server.script = lambda received: Behaviour(status=status, error_body=overflow)
    failure = _caught(lambda: _chat(OllamaChatClient(server.url, "m", num_ctx=4096)))
    assert type(failure) is ContextOverflow and f"HTTP {status}" in str(failure)
    missing = {"error": "model 'm' not found, try pulling it first"}
    server.script = lambda received: Behaviour(status=status, error_body=missing)
    assert type(_caught(lambda: _chat(OllamaChatClient(server.url, "m", num_ctx=4096)))) is ProviderError


@pytest.mark.parametrize("client_kind", ["openai", "ollama"])
def test_a_reply_that_names_the_context_is_a_reply_not_an_error(server, client_kind):
    words = '{"error": {"code": "context_length_exceeded", "message": "maximum context exceeded, timeout"}}'
    server.script = lambda received: Behaviour.text(words)
    openai = client_kind == "openai"
    client = OpenAIChatClient(server.url, "m", "json_object") if openai else OllamaChatClient(server.url, "m", 4096)
    assert _chat(client).text == words


# --- bounded ----------------------------------------------------------------------------------


def test_the_schema_style_fallback_shares_the_calls_deadline(server):
    """Both requests of one attempt under one deadline, and the reply's duration covers both."""

    server.script = lambda received: dataclasses.replace(_rejects_json_schema(received), delay_s=0.3)
    reply = _chat(OpenAIChatClient(server.url, "m", schema_style="auto"), timeout_s=5.0)
    assert len(server.chat_requests()) == 2 and reply.duration_s >= 0.6

    server.requests.clear()

    def slow(received):  # the refusal in 0.9 s, well inside the deadline on a busy machine; the retry never ends in it
        behaviour = _rejects_json_schema(received)
        return dataclasses.replace(behaviour, delay_s=0.9 if behaviour.status != 200 else 5.0)

    server.script = slow
    timeout = _caught(lambda: _chat(OpenAIChatClient(server.url, "m", schema_style="auto"), timeout_s=1.5))
    assert type(timeout) is ModelTimeout and len(server.chat_requests()) == 2
    assert 1.5 <= timeout.duration_s < 2.3  # not 0.9 + a fresh 1.5 for the retry


def test_the_reply_byte_cap_follows_the_output_cap():
    assert reply_byte_cap(8192) == 8192 * REPLY_BYTES_PER_TOKEN
    assert reply_byte_cap(16) == MIN_REPLY_BYTES


@pytest.mark.parametrize("client_kind", ["openai", "ollama"])
def test_a_reply_over_the_byte_cap_is_refused_and_one_under_it_read(server, client_kind):
    def client():
        if client_kind == "openai":
            return OpenAIChatClient(server.url, "m", "json_object")
        return OllamaChatClient(server.url, "m", 4096)

    cap = reply_byte_cap(16)
    # Streamed in pieces of 4 KB (not 4 bytes, so the test is quick); the text is what is held to
    # the cap, so a reply one byte over it is refused.
    server.script = lambda received: dataclasses.replace(Behaviour.text("a" * (cap - 1000)), piece_chars=4096)
    assert len(_chat(client(), max_output_tokens=16).text) == cap - 1000
    server.script = lambda received: dataclasses.replace(Behaviour.text("a" * (cap + 1)), piece_chars=4096)
    over = _caught(lambda: _chat(client(), max_output_tokens=16))
    assert type(over) is OutputLimitExceeded and f"over {cap} bytes" in str(over)
    assert classify_error(over) == "token-budget-exceeded"
