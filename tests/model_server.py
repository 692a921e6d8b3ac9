"""A local model server for tests that speaks the real wire protocols over real HTTP.

It answers `POST /v1/chat/completions` (OpenAI-compatible, as llama.cpp's server does, including
its `context_length_exceeded` 400), `POST /api/chat` (Ollama) and `GET /v1/models`, and records
every request it receives so tests can assert what reached the model. A test scripts each reply
with a `Behaviour`: a JSON object to return, a delay (to cause a real client timeout), a raw
text, or an HTTP error.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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

CHAT_PATHS = ("/v1/chat/completions", "/api/chat")


@dataclass
class Behaviour:
    """What the server does with one chat request."""

    content: str | None = None  # the assistant message text
    delay_s: float = 0.0
    status: int = 200
    error_body: dict | None = None
    prompt_tokens: int | None = None  # the count the server reports; default: len(prompt) // 4

    @staticmethod
    def reply(obj: dict = GOOD_SUMMARY) -> Behaviour:
        return Behaviour(content=json.dumps(obj))

    @staticmethod
    def text(content: str) -> Behaviour:
        return Behaviour(content=content)

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


@dataclass
class Received:
    path: str
    body: dict

    @property
    def prompt(self) -> str:
        return "\n".join(m["content"] for m in self.body.get("messages", []))


@dataclass
class ModelServer:
    """`with ModelServer(script) as server: server.url`; `script` picks a Behaviour per request."""

    script: Callable[[Received], Behaviour] = field(default=lambda received: Behaviour.reply())
    requests: list[Received] = field(default_factory=list)
    concurrent_chats: int = 0  # the chat requests it is answering now
    peak_concurrent_chats: int = 0  # the most it answered at once

    def __post_init__(self) -> None:
        server = self
        counting = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

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
                    self._send(behaviour.status, behaviour.error_body or {"error": {"message": "error"}})
                    return
                prompt_tokens = behaviour.prompt_tokens or max(1, len(received.prompt) // 4)
                completion_tokens = max(1, len(behaviour.content or "") // 4)
                if self.path == "/api/chat":
                    self._send(
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
                    self._send(
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
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def chat_requests(self) -> list[Received]:
        return [r for r in self.requests if r.path in CHAT_PATHS]
