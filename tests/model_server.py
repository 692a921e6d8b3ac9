"""A local model server for tests that speaks the real wire protocols over real HTTP.

It answers `POST /v1/chat/completions` (OpenAI-compatible, as llama.cpp's server does, including
its `context_length_exceeded` 400), `POST /api/chat` (Ollama), `GET /v1/models` and the two
tokenizers (llama.cpp's `POST /tokenize {"content"}`, llama-cpp-python's `POST /extras/tokenize
{"input"}`, each `{"tokens": [ids]}`; `tokenizers` says which it offers, a token per
TEST_BYTES_PER_TOKEN bytes), and records every request it receives so tests can assert what
reached the model. A test scripts each reply
with a `Behaviour`: a JSON object to return, a delay (to cause a real client timeout), a raw
text, or an HTTP error.

A chat request with `stream: true` is answered as the real servers stream (`stream_events`):
Ollama's chunked NDJSON, the OpenAI protocol's server-sent events ending in `data: [DONE]` (the
usage chunk when `stream_options.include_usage` asks), the first piece after `first_piece_s`,
the next ones `piece_gap_s` apart. `StreamSink` writes them and notes when the client left.
"""

from __future__ import annotations

import json
import math
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from digest.prompts import MINI_SUMMARY_INSTRUCTION
from digest.repeats import MARKER_PATTERN
from tests.local_http import LocalServer, QuietHandler

GOOD_SUMMARY = {
    "summary": "The agent fixed the token refresh in auth.py and added a regression test.",
    "title": "Fix token refresh",
    "category": "bugfix",
    "quality": 80,
    "productivity": 75,
    "impact": 40,
    "complexity": 30,
    "technologies": ["python", "pytest"],
}

# A summary of `tests.conftest.make_turns`' sessions that names their files: its verdict is `ok`.
FAITHFUL_SUMMARY = {
    **GOOD_SUMMARY,
    "summary": "The agent refactored the grid row in src/grid/Row.mjs and worker/Manager.mjs, step by step.",
    "title": "Refactor the grid row",
    "technologies": ["JavaScript"],  # the session's .mjs files: python and pytest would be claims it cannot back
}

# Junk a small model writes (issue 29): the prompt's field list with numbers for values, placeholders.
TEMPLATE_SUMMARY = {
    **GOOD_SUMMARY,
    "summary": "The goal: 1.0, the key decisions: 2.0, the code that was modified: 3.0. This [action] will "
    "create a new file [file_name].",
    "title": "The goal and the key decisions",
}

CHAT_PATHS = ("/v1/chat/completions", "/api/chat")


# The test tokenizer: a token per 3.5 bytes, SmolLM2's rate on the demo's summary prompts.
TEST_BYTES_PER_TOKEN = 3.5
TOKENIZE_FIELDS = {"/tokenize": "content", "/extras/tokenize": "input"}


def fake_token_count(text: str) -> int:
    return math.ceil(len(text.encode("utf-8")) / TEST_BYTES_PER_TOKEN)


@dataclass
class Behaviour:
    """What the server does with one chat request."""

    content: str | None = None  # the assistant message text
    delay_s: float = 0.0
    status: int = 200
    error_body: dict | None = None
    prompt_tokens: int | None = None  # the count reported (a chat's or a tokenizer's); default: len(prompt) // 4
    # A stream request: the pieces of `piece_chars` characters, the first after `first_piece_s`,
    # then `piece_gap_s` apart, ended with `finish`. `streams=False`: a whole reply regardless.
    first_piece_s: float = 0.0
    piece_gap_s: float = 0.0
    piece_chars: int = 4
    finish: str = "stop"
    streams: bool = True

    @staticmethod
    def reply(obj: dict = GOOD_SUMMARY) -> Behaviour:
        return Behaviour(content=json.dumps(obj))

    @staticmethod
    def text(content: str) -> Behaviour:
        return Behaviour(content=content)

    @staticmethod
    def echo(received: Received, chars: int = 600) -> Behaviour:
        """A summary that copies the session's text from the prompt (what follows its `---` line)."""
        content = received.prompt.split("\n---\n", 1)[-1]
        return Behaviour.reply({**GOOD_SUMMARY, "summary": content[:chars], "title": "The session"})

    @staticmethod
    def mini(received: Received) -> Behaviour:
        """A mini summary in the turn's own words, as a fair model writes one: the first sentence of
        the ask and of the reply in the mini summary prompt."""
        turn = MARKER_PATTERN.sub("", received.prompt.split("\nUser: ", 1)[-1])  # never the prompt's own markers
        user, _, agent = turn.partition("\nAgent: ")
        asked, replied = (part.strip().split(". ")[0].rstrip(".")[:120] for part in (user, agent))
        return Behaviour(content=f"{asked}: {replied}" if asked and replied else asked or replied)

    @staticmethod
    def fitting(received: Received) -> Behaviour:
        """What a fair model answers each prompt with: a mini summary prompt a line (`mini`), any other
        the good summary."""
        return Behaviour.mini(received) if received.prompt.startswith(MINI_SUMMARY_INSTRUCTION) else Behaviour.reply()

    @staticmethod
    def hang(seconds: float) -> Behaviour:
        return Behaviour(content=json.dumps(GOOD_SUMMARY), delay_s=seconds)

    @staticmethod
    def overflow(n_prompt: int = 9000, n_ctx: int = 8192) -> Behaviour:
        message = f"Requested tokens ({n_prompt}) exceed context window of {n_ctx}"
        return Behaviour(
            status=400,
            error_body={
                "error": {"message": message, "type": "invalid_request_error", "code": "context_length_exceeded"}
            },
        )

    @staticmethod
    def server_error() -> Behaviour:
        return Behaviour(status=500, error_body={"error": {"message": "internal error", "type": "server_error"}})


def stream_events(
    protocol: str, pieces: list[str], finish: str, counts: tuple[object, object], usage: bool
) -> list[bytes]:
    """The writes of one streamed reply, as the real servers send them: Ollama a JSON line a
    piece and a `done` line with the counts and durations (ns); llama-cpp-python's server a role
    chunk, a chunk a piece, a finish chunk, the usage chunk (empty choices) when asked, `[DONE]`."""
    prompt_tokens, completion_tokens = counts
    if protocol == "ollama":
        base = {"model": "fake-model", "created_at": "2026-01-01T00:00:00.000000Z"}
        lines = [{**base, "message": {"role": "assistant", "content": piece}, "done": False} for piece in pieces]
        done = {
            **base,
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": finish,
            "total_duration": 2_000_000_000,
            "load_duration": 1_000_000,
            "prompt_eval_count": prompt_tokens,
            "prompt_eval_duration": 500_000_000,
            "eval_count": completion_tokens,
            "eval_duration": 1_400_000_000,
        }
        return [json.dumps(line).encode() + b"\n" for line in [*lines, done]]
    base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1767225600, "model": "fake-model"}

    def chunk(delta: dict, reason: str | None = None) -> dict:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}

    events = [chunk({"role": "assistant"}), *(chunk({"content": piece}) for piece in pieces), chunk({}, finish)]
    if usage:
        total = (prompt_tokens or 0) + (completion_tokens or 0)
        counted = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": total}
        events.append({**base, "choices": [], "usage": counted})
    return [b"data: " + json.dumps(event).encode() + b"\n\n" for event in events] + [b"data: [DONE]\n\n"]


STREAM_TYPES = {"ollama": "application/x-ndjson", "openai": "text/event-stream; charset=utf-8"}


class StreamSink:
    """One streamed response on a raw socket, chunked as both servers send it. `gone_after_s`:
    seconds from the start until the server saw the client close the connection (a failed write,
    or the end of the socket while it waited), None while it is there."""

    def __init__(self, conn: socket.socket, protocol: str, stop: threading.Event | None = None):
        self.conn, self.protocol, self.stop = conn, protocol, stop
        self.started = time.monotonic()
        self.gone_after_s: float | None = None

    def _left(self) -> bool:
        if self.gone_after_s is None:
            self.gone_after_s = time.monotonic() - self.started
        return False

    def head(self) -> bool:
        head = f"HTTP/1.1 200 OK\r\nContent-Type: {STREAM_TYPES[self.protocol]}\r\nTransfer-Encoding: chunked\r\n"
        return self._write(f"{head}Cache-Control: no-cache\r\nConnection: close\r\n\r\n".encode())

    def send(self, data: bytes) -> bool:
        """One chunk of the body; False once the client has left."""
        return self._write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def end(self) -> bool:
        return self._write(b"0\r\n\r\n")

    def _write(self, data: bytes) -> bool:
        try:
            self.conn.sendall(data)
        except OSError:  # broken pipe, reset: the client closed the stream
            return self._left()
        return True

    def wait(self, seconds: float) -> bool:
        """Sleep, watching the socket: False as soon as the client closes it (or the server stops)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if self.stop is not None and self.stop.is_set():
                return False
            readable, _, _ = select.select([self.conn], [], [], min(left, 0.02))
            if readable:
                try:
                    if not self.conn.recv(1, socket.MSG_PEEK):
                        return self._left()
                except OSError:
                    return self._left()
                time.sleep(0.02)  # bytes from the client: not a close
        return True


@dataclass
class Received:
    path: str
    body: dict
    gone_after_s: float | None = None  # a streamed reply: when the client closed it early

    @property
    def prompt(self) -> str:
        return "\n".join(m["content"] for m in self.body.get("messages", []))


@dataclass
class ModelServer(LocalServer):
    """`with ModelServer(script) as server: server.url`; `script` picks a Behaviour per request."""

    script: Callable[[Received], Behaviour] = field(default=lambda received: Behaviour.fitting(received))
    requests: list[Received] = field(default_factory=list)
    concurrent_chats: int = 0  # the chat requests it is answering now
    peak_concurrent_chats: int = 0  # the most it answered at once
    tokenizers: tuple[str, ...] = tuple(TOKENIZE_FIELDS)  # the tokenize routes offered; () for none

    def __post_init__(self) -> None:
        server = self
        counting = threading.Lock()

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"  # chunked streams

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self.send_json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
                else:
                    self.send_json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                chat = self.path in CHAT_PATHS
                if chat:
                    with counting:
                        server.concurrent_chats += 1
                        server.peak_concurrent_chats = max(server.peak_concurrent_chats, server.concurrent_chats)
                try:
                    self._answer()
                finally:
                    if chat:
                        with counting:
                            server.concurrent_chats -= 1

            def _answer(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                received = Received(self.path, body)
                server.requests.append(received)
                behaviour = server.script(received)
                if behaviour.delay_s:
                    time.sleep(behaviour.delay_s)
                if behaviour.status != 200:
                    self.send_json(behaviour.status, behaviour.error_body or {"error": {"message": "error"}})
                    return
                if self.path in server.tokenizers:
                    text = str(body.get(TOKENIZE_FIELDS[self.path], ""))
                    count = behaviour.prompt_tokens if behaviour.prompt_tokens is not None else fake_token_count(text)
                    self.send_json(200, {"tokens": list(range(count))})
                    return
                prompt_tokens = behaviour.prompt_tokens or max(1, len(received.prompt) // 4)
                completion_tokens = max(1, len(behaviour.content or "") // 4)
                if self.path in CHAT_PATHS and body.get("stream") and behaviour.streams:
                    self._stream(received, behaviour, (prompt_tokens, completion_tokens))
                    return
                if self.path == "/api/chat":
                    self.send_json(
                        200,
                        {
                            "model": body.get("model"),
                            "message": {"role": "assistant", "content": behaviour.content},
                            "done": True,
                            "done_reason": "stop",
                            "prompt_eval_count": prompt_tokens,
                            "eval_count": completion_tokens,
                        },
                    )
                elif self.path == "/v1/chat/completions":
                    self.send_json(
                        200,
                        {
                            "id": "chatcmpl-test",
                            "object": "chat.completion",
                            "model": body.get("model"),
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": behaviour.content},
                                    "finish_reason": "stop",
                                }
                            ],
                            "usage": {
                                "prompt_tokens": prompt_tokens,
                                "completion_tokens": completion_tokens,
                                "total_tokens": prompt_tokens + completion_tokens,
                            },
                        },
                    )
                else:
                    self.send_json(404, {"error": {"message": f"no route {self.path}"}})

            def _stream(self, received: Received, behaviour: Behaviour, counts: tuple[int, int]) -> None:
                self.close_connection = True
                protocol = "ollama" if self.path == "/api/chat" else "openai"
                content = behaviour.content or ""
                # A real server streams no more tokens than the output cap it is sent: a text longer
                # than that many pieces comes in fewer, larger ones (a server past it is a runaway,
                # `tests.fault_server`'s stream-runaway).
                cap = received.body.get("max_tokens") or received.body.get("options", {}).get("num_predict")
                size = max(behaviour.piece_chars, math.ceil(len(content) / cap) if cap else 0)
                pieces = [content[i : i + size] for i in range(0, len(content), size)]
                usage = bool(received.body.get("stream_options", {}).get("include_usage"))
                events = stream_events(protocol, pieces, behaviour.finish, counts, usage)
                sink = StreamSink(self.connection, protocol)
                # The first piece after the prompt's evaluation, each next one after a token's time.
                ok = sink.head() and sink.wait(behaviour.first_piece_s)
                for i, event in enumerate(events):
                    ok = ok and (i == 0 or sink.wait(behaviour.piece_gap_s)) and sink.send(event)
                if ok:
                    sink.end()
                received.gone_after_s = sink.gone_after_s

        LocalServer.__init__(self, Handler)

    def chat_requests(self) -> list[Received]:
        return [r for r in self.requests if r.path in CHAT_PATHS]

    def tokenize_requests(self) -> list[Received]:
        return [r for r in self.requests if r.path in TOKENIZE_FIELDS]
