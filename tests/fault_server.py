"""A local model server that misbehaves on purpose, over real HTTP, in both wire protocols.

`POST /v1/chat/completions` answers as an OpenAI-compatible server (llama.cpp's) and `POST /api/chat`
as Ollama; each request gets the server's one `fault`. It writes the bytes itself, so it can hang,
trickle a byte a second, reset the connection or send 50 MB. Every sleep waits on a stop event and
every write loop ends at a broken pipe, so a test's server stops at once, whatever its mode.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.model_server import GOOD_SUMMARY

PROTOCOLS = {"/v1/chat/completions": "openai", "/api/chat": "ollama"}
FAULTS = (
    "hang",  # reads the request and sends nothing
    "trickle-body",  # headers at once, then the body a byte a second
    "trickle-headers",  # the whole response, status line included, a byte a second
    "server-error",  # a 500 whose message mentions a timeout
    "context-overflow",  # the server's own overflow error (llama.cpp's object, Ollama's string)
    "reset",  # half a response, then a TCP reset
    "malformed-json",  # a 200 whose body is cut-off JSON
    "content-object",  # message.content is a JSON object, not a string
    "no-choices",  # OpenAI: "choices": []; Ollama: no "message"
    "bad-counts",  # a good reply with token counts of 3e9, -5, "12": usable, counts dropped
    "length-cut",  # a reply that parses, cut at the output cap
    "huge",  # a 50 MB reply
    "mentions-timeout",  # a reply that is not JSON and says "timeout" and "aborted"
    "mentions-context",  # a reply that is not JSON and says "context", "maximum", "exceed"
)
HUGE_BYTES = 50 * 1024 * 1024
TIMEOUT_WORDS = "Request timeout: the call was aborted and timed out."
CONTEXT_WORDS = "The context window maximum was exceeded (context_length_exceeded), so no JSON."


def envelope(protocol: str, content: object, finish: str = "stop", counts: tuple[object, object] = (12, 34)) -> dict:
    prompt_tokens, completion_tokens = counts
    if protocol == "ollama":
        return {
            "model": "fake-model",
            "created_at": "2026-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": content},
            "done": True,
            "done_reason": finish,
            "prompt_eval_count": prompt_tokens,
            "eval_count": completion_tokens,
        }
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion",
        "model": "fake-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


def _response(status: int, body: bytes, reason: str = "OK", length: int | None = None) -> bytes:
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def fault_response(fault: str, protocol: str) -> bytes:
    """The bytes a fault sends when it sends a whole response."""
    good = json.dumps(GOOD_SUMMARY)
    ok = lambda payload: _response(200, json.dumps(payload).encode())  # noqa: E731
    if fault == "server-error":
        error = {"error": {"message": "slot timeout: the request was aborted", "type": "server_error"}}
        if protocol == "ollama":
            error = {"error": "llama runner process has terminated: timeout"}
        return _response(500, json.dumps(error).encode(), "Internal Server Error")
    if fault == "context-overflow":
        error = {
            "error": {
                "code": 400,
                "message": "request (9000 tokens) exceeds the available context size (8192 tokens)",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 9000,
                "n_ctx": 8192,
            }
        }
        if protocol == "ollama":
            error = {"error": "the input length exceeds the context length"}
        return _response(400, json.dumps(error).encode(), "Bad Request")
    if fault == "malformed-json":
        return _response(200, b'{"choices": [{"message": {"content": "{\\"summary')
    if fault == "content-object":
        return ok(envelope(protocol, GOOD_SUMMARY))
    if fault == "no-choices":
        return ok({"choices": []} if protocol == "openai" else {"model": "fake-model", "done": True})
    if fault == "bad-counts":
        # INT32 overflow and a negative on one side; a float and a string on the other.
        counts = (3_000_000_000, -5) if protocol == "openai" else (3e9, "12")
        return ok(envelope(protocol, good, counts=counts))
    if fault == "length-cut":
        return ok(envelope(protocol, good, finish="length"))
    if fault == "mentions-timeout":
        return ok(envelope(protocol, TIMEOUT_WORDS))
    if fault == "mentions-context":
        return ok(envelope(protocol, CONTEXT_WORDS))
    return ok(envelope(protocol, good))  # trickle and reset send a good reply, slowly or half


class FaultServer:
    """`with FaultServer("hang") as server: server.url`; `server.requests` counts chat requests."""

    def __init__(self, fault: str):
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        self.fault = fault
        self.requests: list[str] = []
        self._stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                protocol = PROTOCOLS.get(self.path)
                if protocol is None:
                    self.send_error(404)
                    return
                outer.requests.append(protocol)
                self.close_connection = True
                try:
                    outer._serve(self.connection, protocol)
                except OSError:
                    pass  # the client gave up and closed: what these faults are for

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def _serve(self, conn: socket.socket, protocol: str) -> None:
        fault = self.fault
        if fault == "hang":
            self._stop.wait(120)
            return
        if fault == "huge":
            head = _response(200, b"", length=HUGE_BYTES)
            conn.sendall(head + b'{"choices": [{"message": {"role": "assistant", "content": "')
            block = b"a" * 65536
            for _ in range(HUGE_BYTES // len(block)):
                if self._stop.is_set():
                    return
                conn.sendall(block)
            return
        data = fault_response(fault, protocol)
        if fault in ("trickle-body", "trickle-headers"):
            start = data.index(b"\r\n\r\n") + 4 if fault == "trickle-body" else 0
            conn.sendall(data[:start])
            for i in range(start, len(data)):
                if self._stop.wait(1.0):
                    return
                conn.sendall(data[i : i + 1])
            return
        if fault == "reset":
            conn.sendall(data[: len(data) // 2])
            # Linger 0: close sends a RST, not a FIN.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
            return
        conn.sendall(data)

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
