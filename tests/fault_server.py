"""A local model server that misbehaves on purpose, over real HTTP, in both wire protocols.

`POST /v1/chat/completions` answers as an OpenAI-compatible server (llama.cpp's) and `POST /api/chat`
as Ollama; each request gets the server's one `fault`. It writes the bytes itself, so it can hang,
trickle a byte a second, reset the connection or send 50 MB. Every sleep waits on a stop event and
every write loop ends at a broken pipe, so a test's server stops at once, whatever its mode.

The `FAULTS` answer every request with a whole body (a client that asked to stream reads it as a
server that does not). The `STREAM_FAULTS` answer a `stream: true` request as the real servers
stream (`tests.model_server.stream_events`), misbehaving `gap_s` apart, and a `stream: false`
one with a good whole reply; `gone_after_s` records, per streamed request, when the client
closed the connection (None: it never did before the server finished or stopped).
"""

from __future__ import annotations

import json
import socket
import struct
import threading

from tests.local_http import LocalServer, QuietHandler
from tests.model_server import GOOD_SUMMARY, StreamSink, stream_events

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
STREAM_FAULTS = (
    "stream-slow",  # a piece every gap_s, to a good end
    "stream-stall-first",  # the headers, then nothing: stuck evaluating the prompt
    "stream-stall-mid",  # a few pieces, then nothing
    "stream-trickle",  # a piece every gap_s, never ending
    "stream-cut",  # a few pieces, then the connection closed
    "stream-pings",  # keep-alives only (SSE `: ping` comments, blank NDJSON lines), never a piece
    "stream-malformed",  # a few pieces, then a line that is not JSON
    "stream-ignored",  # a whole JSON reply to a stream request (a server that does not stream)
    "stream-rejected",  # a 400 naming `stream` to a stream request, a good reply without
    "stream-flood",  # 64 KB `data:` lines with no event end (Ollama: one line with no end), as fast as it can
    "stream-empty",  # well-formed chunks with no text, every gap_s, never ending
    "stream-runaway",  # one-character pieces every gap_s, never ending: the output cap ignored
    "stream-error",  # a 200 stream whose first chunk is the server's error object (llama.cpp's server_error)
)
STREAM_PIECES = 3  # the pieces before a stream stalls, is cut or breaks
HUGE_BYTES = 50 * 1024 * 1024
FLOOD_LINE_BYTES = 64 * 1024
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


def _textless(protocol: str, text: str) -> bytes:
    """One well-formed chunk carrying `text` (empty: none): SSE `{"choices": [{"delta": {...}}]}`,
    Ollama `{"message": {...}, "done": false}`."""
    if protocol == "ollama":
        line = {"model": "fake-model", "message": {"role": "assistant", "content": text}, "done": False}
        return json.dumps(line).encode() + b"\n"
    delta = {"content": text} if text else {}
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}).encode() + b"\n\n"


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
    return ok(envelope(protocol, good))  # trickle and reset send a good reply, slowly or half; "good" whole


class FaultServer(LocalServer):
    """`with FaultServer("hang") as server: server.url`; `server.requests` counts chat requests."""

    def __init__(self, fault: str, gap_s: float = 0.2):
        if fault not in FAULTS + STREAM_FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        self.fault = fault
        self.gap_s = gap_s
        self.requests: list[str] = []
        self.streamed: list[bool] = []  # per request: whether it asked to stream
        self.gone_after_s: list[float | None] = []  # per streamed answer
        self._stop = threading.Event()
        outer = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                protocol = PROTOCOLS.get(self.path)
                if protocol is None:
                    self.send_error(404)
                    return
                outer.requests.append(protocol)
                outer.streamed.append(bool(body.get("stream")))
                self.close_connection = True
                try:
                    if outer.fault in STREAM_FAULTS:
                        outer._serve_stream(self.connection, protocol, body)
                    else:
                        outer._serve(self.connection, protocol)
                except OSError:
                    pass  # the client gave up and closed: what these faults are for

        super().__init__(Handler)

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

    def _serve_stream(self, conn: socket.socket, protocol: str, body: dict) -> None:
        fault = self.fault
        if fault == "stream-ignored" or not body.get("stream"):
            conn.sendall(fault_response("good", protocol))
            return
        if fault == "stream-rejected":
            error = {"error": {"message": "stream is not supported by this server", "type": "invalid_request_error"}}
            conn.sendall(_response(400, json.dumps(error).encode(), "Bad Request"))
            return
        sink = StreamSink(conn, protocol, self._stop)
        self.gone_after_s.append(None)
        words = json.dumps(GOOD_SUMMARY).split(" ")
        pieces = [word + " " for word in words[:-1]] + words[-1:]
        usage = bool(body.get("stream_options", {}).get("include_usage"))
        events = stream_events(protocol, pieces, "stop", (12, len(pieces)), usage)
        forever = range(10**9)  # until the client leaves or the server stops
        ok = sink.head()
        if fault == "stream-slow":
            for event in events:
                ok = ok and sink.wait(self.gap_s) and sink.send(event)
            ok = ok and sink.end()
        elif fault in ("stream-stall-first", "stream-stall-mid", "stream-cut", "stream-malformed"):
            for event in [] if fault == "stream-stall-first" else events[:STREAM_PIECES]:
                ok = ok and sink.send(event)
            if fault == "stream-malformed":
                ok = ok and sink.send(
                    b'data: {"choices": [{"delta": \n\n' if protocol == "openai" else b'{"message": \n'
                )
            if fault != "stream-cut":  # a stall holds the connection open and silent
                ok = ok and sink.wait(120)
        elif fault == "stream-trickle":
            for i in forever:
                ok = ok and sink.wait(self.gap_s) and sink.send(events[1 + i % (len(events) - 4)])
                if not ok:
                    break
        elif fault == "stream-flood":
            block = (b"data: " if protocol == "openai" else b"") + b"a" * FLOOD_LINE_BYTES
            for _ in forever:
                ok = ok and sink.send(block + (b"\n" if protocol == "openai" else b""))
                if not ok or self._stop.is_set():
                    break
        elif fault in ("stream-empty", "stream-runaway"):
            for _ in forever:
                ok = (
                    ok
                    and sink.wait(self.gap_s)
                    and sink.send(_textless(protocol, "x" if fault == "stream-runaway" else ""))
                )
                if not ok:
                    break
        elif fault == "stream-error":
            error = {"error": {"code": 500, "message": "llama_decode failed: out of memory", "type": "server_error"}}
            if protocol == "ollama":
                error = {"error": "llama runner process has terminated: signal: killed"}
            ok = ok and sink.send(
                (b"data: " if protocol == "openai" else b"")
                + json.dumps(error).encode()
                + (b"\n\n" if protocol == "openai" else b"\n")
            )
            ok = ok and sink.end()
        elif fault == "stream-pings":
            ping = b": ping - 2026-01-01 00:00:00.000000+00:00\n\n" if protocol == "openai" else b"\n"
            for _ in forever:
                ok = ok and sink.wait(self.gap_s) and sink.send(ping)
                if not ok:
                    break
        self.gone_after_s[-1] = sink.gone_after_s

    def __exit__(self, *exc) -> None:
        self._stop.set()
        super().__exit__(*exc)
