"""Chat-model clients over httpx: Ollama's native API and the OpenAI-compatible one.

Both speak `digest.model_api.ChatClient`: one user message in, the reply text and the server's
own token counts out, typed errors for timeout, context overflow, an overrun reply and provider
failure.

Every call is streamed (Ollama: `stream: true`, newline-delimited JSON ending in a `done: true`
line; OpenAI: `stream: true` with `stream_options.include_usage`, server-sent events ending in
`data: [DONE]`), so a call that is producing tokens can be told from a stuck one, and giving up
closes the connection, which is what makes a server stop generating. A server that refuses to
stream (a whole JSON reply to a stream request, or a 4xx that names `stream`) is answered as it
answers, and called without streaming from then on (`streaming` turns False). A stream with no
usage chunk (llama-cpp-python's server ignores include_usage) has its answer counted in pieces and
its prompt by the server's tokenizer.

Every call is bounded four ways: a wall-clock ceiling (`timeout_s`, however slowly the server
sends), a stall window (`stall_s`: no complete chunk for that long, the wait for the first one
included, is `ModelStalled`), a cap on the bytes held (from the output token cap: the body of a
whole reply, the text and any one line of a streamed one), and a validated reply shape, chunk by
chunk. Both windows are kept by one watchdog thread that shuts the call's sockets down, which
ends a read blocked in the kernel at once.

What failed decides the error type, never the words of the model's reply:
- no answer by the ceiling: `ModelTimeout` (`progressing` when pieces were still arriving); no
  piece for the stall window: `ModelStalled`;
- an HTTP error whose server error says the prompt is over the context: `ContextOverflow`. For the
  OpenAI protocol that is the error's `code` ("context_length_exceeded": OpenAI, llama-cpp-python)
  or `type` ("exceed_context_size_error": llama.cpp's server) on any status, or a 400/413 whose
  error message names the context (vLLM sends only a message). Ollama has no error codes: its
  `error` string names the context ("the input length exceeds the context length"), and has come
  as 400, 413 or 500 by version and endpoint, so there the message decides on any error status.
  Both read the server's error object of an error status (or an error chunk inside a stream)
  only, never the reply text;
- a reply over the byte cap: `OutputLimitExceeded`;
- a connection refused, or closed before the reply's end: `HostUnreachable`; a 200 that breaks
  the wire protocol (a bad chunk mid-stream included): `MalformedReply`; anything else the server
  did wrong: `ProviderError`.
"""

from __future__ import annotations

import functools
import json
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, replace
from typing import Annotated, TypeVar

import httpx
from pydantic import BaseModel, BeforeValidator, Field, StrictBool, StrictInt, StrictStr, ValidationError

from digest.model_api import (
    ChatReply,
    ContextOverflow,
    HostUnreachable,
    MalformedReply,
    ModelError,
    ModelStalled,
    ModelTimeout,
    OutputLimitExceeded,
    ProviderError,
)

# Connecting is quick or not at all; the deadline is the call's own budget.
CONNECT_TIMEOUT_S = 10.0
# A token is 3-5 bytes of text and JSON escaping (\uXXXX) can make it six times that: 64 bytes a
# token is room for any honest reply and its envelope. The floor covers short caps and error pages.
REPLY_BYTES_PER_TOKEN = 64
MIN_REPLY_BYTES = 256 * 1024
INT32_MAX = 2**31 - 1  # the ledger's INTEGER columns
# A token count routes one session: asked once, quickly, never at the cost of the chat call.
TOKENIZE_TIMEOUT_S = 10.0
# A token id in a JSON list: at most 7 digits and a comma, and no more tokens than bytes of text.
TOKENIZE_BYTES_PER_BYTE = 8
# The tokenizers of OpenAI-compatible servers, tried in this order: (path, the body's text field).
# llama.cpp's server: POST /tokenize {"content"} -> {"tokens": [ids]} (add_special: false, no BOS);
# llama-cpp-python's: POST /extras/tokenize {"input", "model"} -> {"tokens": [ids]}.
TOKENIZE_ROUTES = (("/tokenize", "content"), ("/extras/tokenize", "input"))
# Without a stall window, a call cut at its ceiling counts as progressing when its last piece is
# this recent: a few token gaps of a slow CPU host.
PROGRESS_WINDOW_S = 5.0
# Uncompressed, so the bytes counted are the bytes the reply holds.
_HEADERS = {"Accept-Encoding": "identity"}


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default verification, built once: loading the CA bundle costs ~30 ms of CPU, and
    every call opens a client of its own."""
    return httpx.create_ssl_context()


def _http_client() -> httpx.Client:
    return httpx.Client(headers=_HEADERS, verify=_tls_context())


_CONTEXT_MESSAGE = re.compile(
    r"context[ _](length|window|size)|maximum context|exceeds? (the )?(available )?context", re.IGNORECASE
)


def reply_byte_cap(max_output_tokens: int) -> int:
    """The most bytes of reply a call reads before it gives up on it."""
    return max(MIN_REPLY_BYTES, max_output_tokens * REPLY_BYTES_PER_TOKEN)


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


class _Deadline:
    """The wall-clock ceiling of one `chat` call, all its requests, and the stall window of each
    streamed one.

    httpx's timeouts bound each socket operation, so a server that sends a byte a second never
    trips one, and a stall is only a read that waits. A watchdog thread shuts the call's sockets
    down at the ceiling, or when a streamed request has received no piece for `stall_s`; that
    ends a read blocked in the kernel at once (and closes the stream, so the server can stop),
    and the call reports a timeout.
    """

    def __init__(self, timeout_s: float, stall_s: float | None = None):
        self.timeout_s = timeout_s
        self.stall_s = stall_s
        self.started = time.monotonic()
        self.expired = False  # the sockets were shut: by the ceiling, or by the stall window
        self.stalled = False
        self.first_token_s: float | None = None  # of the request being answered
        self._sent = self.started  # when the current request was sent
        self._last_piece: float | None = None  # of the whole call
        self._quiet_since: float | None = None  # the stall window's start; None: not watching
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._finished = False
        self._wake = threading.Condition()  # a request's start or end moves the watchdog's next check
        self._watchdog = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> _Deadline:
        self._watchdog.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._wake:
            self._finished = True
            self._wake.notify()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def sending(self, streamed: bool) -> None:
        """A request goes out: its stall window starts now (the wait for its first piece counts)."""
        with self._wake:
            self._sent = time.monotonic()
            self.first_token_s = None
            self._quiet_since = self._sent if streamed and self.stall_s is not None else None
            self._wake.notify()

    def piece(self, content: bool) -> None:
        """A complete, well-formed chunk arrived; `content`: it carries reply text."""
        now = time.monotonic()
        self._last_piece = now
        if self._quiet_since is not None:
            self._quiet_since = now
        if content and self.first_token_s is None:
            self.first_token_s = now - self._sent

    def quiet(self) -> None:
        """The stream has ended, or a whole body is read: no stall window."""
        with self._wake:
            self._quiet_since = None
            self._wake.notify()

    def trace(self, event: str, info: dict) -> None:
        """httpx's `trace` request extension: keep each socket the call opens."""
        if event != "connection.connect_tcp.complete":
            return
        sock = info["return_value"].get_extra_info("socket")
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shutdown(sock)

    def _watch(self) -> None:
        # One thread per call, woken at the nearer of the ceiling and the stall point; a piece only
        # moves the stall point (no lock, no wake-up), so it wakes about once a window, not a piece.
        ceiling = self.started + self.timeout_s
        with self._wake:
            while not self._finished:
                now = time.monotonic()
                stall_at = None if self._quiet_since is None else self._quiet_since + self.stall_s
                if now >= ceiling:
                    break
                if stall_at is not None and now >= stall_at:
                    self.stalled = True
                    break
                self._wake.wait(min(ceiling, stall_at or ceiling) - now)
            else:
                return
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)

    def error(self, kind: type[ModelError], message: str) -> ModelError:
        error = kind(message)
        error.duration_s = self.elapsed
        return error

    def timeout(self) -> ModelTimeout:
        if self.stalled:
            message = f"model call stalled: nothing received for {self.stall_s:g}s"
            error = self.error(ModelStalled, message)
        else:
            error = self.error(ModelTimeout, f"model call timed out after {self.timeout_s:g}s (wall-clock deadline)")
            window = self.stall_s if self.stall_s is not None else PROGRESS_WINDOW_S
            error.progressing = self._last_piece is not None and time.monotonic() - self._last_piece <= window
        error.first_token_s = self.first_token_s
        return error


@dataclass
class _Reply:
    """What a reply says, in either protocol, whole or streamed."""

    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None


class _Stream:
    """A streamed reply, parsed line by line as the bytes arrive. A subclass is one protocol."""

    media_type = ""  # the Content-Type of a streamed answer; another is a server that did not stream

    def __init__(self, url: str, deadline: _Deadline, cap: int):
        self.url, self.deadline, self.cap = url, deadline, cap
        self.pieces: list[str] = []
        self.size = 0
        self.reply: _Reply | None = None  # set at the stream's end marker

    def line(self, line: bytes) -> bool:
        """Take one line (its end of line stripped); True when the reply has ended."""
        raise NotImplementedError

    def text(self, content: str | None) -> None:
        if content:
            self.pieces.append(content)
            self.size += len(content.encode("utf-8"))
            if self.size > self.cap:
                raise self.deadline.error(
                    OutputLimitExceeded, f"reply from {self.url} over {self.cap} bytes: stopped reading"
                )
        self.deadline.piece(bool(content))


class _SSE(_Stream):
    """OpenAI's stream: `data: {chunk}` events, each ended by a blank line, then `data: [DONE]`.
    Comments (sse-starlette's `: ping`), blank keep-alives and other fields carry no reply and are
    no progress."""

    media_type = "text/event-stream"

    def __init__(self, *args):
        super().__init__(*args)
        self.data: list[bytes] = []
        self.finish_reason: str | None = None
        self.usage: _Usage | None = None

    def line(self, line: bytes) -> bool:
        field, _, value = line.partition(b":")
        if field in (b"data", b"error"):  # llama.cpp's server sends a failure as an `error:` field
            self.data.append(value[1:] if value.startswith(b" ") else value)
            return False
        if line or not self.data:
            return False
        data, self.data = b"\n".join(self.data), []
        if data.strip() == b"[DONE]":
            usage = self.usage
            if usage is None:
                # No usage chunk (llama-cpp-python 0.3 ignores include_usage): no prompt count, and
                # the pieces for the answer's, a token each on llama.cpp-based servers.
                usage = _Usage(completion_tokens=len(self.pieces))
            self.reply = _Reply("".join(self.pieces), self.finish_reason, usage.prompt_tokens, usage.completion_tokens)
            return True
        chunk = _validated(_Chunk, data, self.url, "stream chunk", self.deadline, error_coded=True)
        if chunk.usage is not None:  # include_usage's last chunk (empty choices), or any that has it
            self.usage = chunk.usage
        if chunk.choices:
            choice = chunk.choices[0]
            self.finish_reason = choice.finish_reason or self.finish_reason
            self.text(choice.delta.content)
        else:
            self.text(None)
        return False


class _NDJSON(_Stream):
    """Ollama's stream: a JSON object a line, `done: false` with a piece, then `done: true` with
    the reason and the counts."""

    media_type = "application/x-ndjson"

    def line(self, line: bytes) -> bool:
        if not line.strip():
            return False
        chunk = _validated(_OllamaChunk, line, self.url, "stream chunk", self.deadline, error_coded=False)
        self.text(chunk.message.content if chunk.message else None)
        if not chunk.done:
            return False
        self.reply = _Reply("".join(self.pieces), chunk.done_reason, chunk.prompt_eval_count, chunk.eval_count)
        return True


def _media_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "").split(";")[0].strip().lower()


def _read_stream(response: httpx.Response, parser: _Stream, url: str, deadline: _Deadline) -> _Reply:
    buffer = bytearray()
    for chunk in response.iter_bytes():
        buffer += chunk
        while (end := buffer.find(b"\n")) >= 0:
            line = bytes(buffer[:end]).rstrip(b"\r")
            del buffer[: end + 1]
            if parser.line(line):
                deadline.quiet()
                return parser.reply
        if len(buffer) > parser.cap:  # one line with no end: a reply too, held to the cap
            raise deadline.error(OutputLimitExceeded, f"reply from {url} over {parser.cap} bytes: stopped reading")
    if deadline.expired:  # the shutdown reads as the end of the body
        raise deadline.timeout()
    # The last line may come without its end of line; a stream with no end marker broke off.
    if buffer and parser.line(bytes(buffer).rstrip(b"\r")) or parser.line(b""):
        deadline.quiet()
        return parser.reply
    if deadline.first_token_s is None:
        raise deadline.error(EmptyStream, f"model server at {url} ended the stream before its first piece")
    raise deadline.error(HostUnreachable, f"model server at {url} broke off the stream before its end")


class EmptyStream(HostUnreachable):
    """A streamed request that ended, or was broken off, before its first piece: llama-cpp-python's
    answer to a streamed request it cannot serve (a prompt over its context: an empty 200 stream,
    or a reset), whose reason only an unstreamed request is told."""


def _send(
    http: httpx.Client, url: str, body: dict, deadline: _Deadline, cap: int, stream: type[_Stream] | None = None
) -> tuple[int, bytes, _Reply | None]:
    """POST `body` within the deadline. With `stream`, a 200 in the stream's media type is read as
    that stream: (200, b"", the reply). Anything else is a whole body, read up to `cap` bytes:
    (status, body, None)."""
    remaining = deadline.timeout_s - deadline.elapsed
    if remaining <= 0:
        raise deadline.timeout()
    timeout = httpx.Timeout(remaining, connect=min(CONNECT_TIMEOUT_S, remaining))
    data = bytearray()
    deadline.sending(streamed=stream is not None)
    try:
        # Leaving this block before the body's end closes the connection: how a call gives up.
        with http.stream("POST", url, json=body, timeout=timeout, extensions={"trace": deadline.trace}) as response:
            status = response.status_code
            if stream is not None and status == 200 and _media_type(response) == stream.media_type:
                return status, b"", _read_stream(response, stream(url, deadline, cap), url, deadline)
            deadline.quiet()  # a whole body: only the ceiling bounds it
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > cap:
                    message = f"reply from {url} over {cap} bytes: stopped reading (HTTP {response.status_code})"
                    raise deadline.error(OutputLimitExceeded, message)
    except httpx.TimeoutException:
        raise deadline.timeout() from None
    except httpx.HTTPError as exc:
        if deadline.expired:
            raise deadline.timeout() from None
        if isinstance(exc, httpx.ConnectError):
            raise deadline.error(HostUnreachable, f"model server unreachable at {url}: {exc}") from None
        kind = EmptyStream if stream is not None and deadline.first_token_s is None else HostUnreachable
        raise deadline.error(kind, f"model server at {url} broke off the reply: {exc}") from None
    if deadline.expired:  # the shutdown can pass for the end of a body that runs to the close
        raise deadline.timeout()
    return status, bytes(data), None


def _refuses_stream(status: int, data: bytes) -> bool:
    """A server that will not stream: a 4xx whose error names `stream` (a whole 200 to a stream
    request says the same, and is read as the reply it is)."""
    return 400 <= status < 500 and b"stream" in data.lower()


def _server_error(data: bytes) -> tuple[str, dict]:
    """The server's error message, and its error object (empty when it sent a bare string)."""
    text = data.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        return text[:500], {}
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        return str(error.get("message") or error)[:500], error
    return str(error)[:500], {}


def _raise_for_status(status: int, data: bytes, deadline: _Deadline, coded: bool) -> None:
    """`coded`: the OpenAI protocol, whose error object has a `code` and a `type`; Ollama's is a string."""
    if status < 400:
        return
    message, error = _server_error(data)
    raise _failure(status, message, error, deadline, coded)


def _failure(status: int | None, message: str, error: dict, deadline: _Deadline, coded: bool) -> ModelError:
    """The server's own error: of an error status, or (`status` None) a chunk inside a stream,
    which has no status of its own to weigh the message by."""
    named = bool(_CONTEXT_MESSAGE.search(message))
    if coded:
        overflow = error.get("code") == "context_length_exceeded" or error.get("type") == "exceed_context_size_error"
        overflow = overflow or (status in (400, 413, None) and named)
    else:
        overflow = named
    where = f"HTTP {status}" if status is not None else "error in the stream"
    failure = deadline.error(ContextOverflow if overflow else ProviderError, f"{where}: {message}")
    failure.status = status  # a 5xx says the host is bad, a 4xx the request (`digest.circuit`)
    return failure


# --- the reply shapes --------------------------------------------------------------------------


def _count(value: object) -> int | None:
    """A token count the ledger can hold: a JSON integer in 0..INT32_MAX. Anything else (a
    string, a float, a negative, 3e9) is dropped to None, not clamped: a clamped count would be
    a number the server never sent."""
    return value if type(value) is int and 0 <= value <= INT32_MAX else None


def _reason(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _usage(value: object) -> object:
    return value if isinstance(value, dict) else None


Count = Annotated[int | None, BeforeValidator(_count)]
Reason = Annotated[str | None, BeforeValidator(_reason)]


class _Message(BaseModel):
    content: StrictStr | None = None  # text or null; an object or a number breaks the protocol


class _Usage(BaseModel):
    prompt_tokens: Count = None
    completion_tokens: Count = None


class _Choice(BaseModel):
    message: _Message
    finish_reason: Reason = None


class _Completion(BaseModel):
    """An OpenAI chat completion: the fields read, validated; a bad count or usage is dropped."""

    choices: list[_Choice] = Field(min_length=1)
    usage: Annotated[_Usage | None, BeforeValidator(_usage)] = None


class _OllamaReply(BaseModel):
    message: _Message
    done_reason: Reason = None
    prompt_eval_count: Count = None
    eval_count: Count = None


class _Delta(BaseModel):
    delta: _Message = _Message()
    finish_reason: Reason = None


class _Chunk(BaseModel):
    """One chunk of an OpenAI stream; include_usage's last one has no choices and the usage."""

    choices: list[_Delta]
    usage: Annotated[_Usage | None, BeforeValidator(_usage)] = None


class _OllamaChunk(BaseModel):
    """One line of an Ollama stream; the `done` one has the reason and the counts."""

    message: _Message | None = None
    done: StrictBool
    done_reason: Reason = None
    prompt_eval_count: Count = None
    eval_count: Count = None


class _Tokens(BaseModel):
    tokens: list[StrictInt]


Shape = TypeVar("Shape", bound=BaseModel)


def _validated(
    shape: type[Shape], data: bytes, url: str, what: str, deadline: _Deadline, error_coded: bool | None = None
) -> Shape:
    """`error_coded` (a stream chunk): a chunk that is the server's error object raises that
    error, classified as an error status's would be (see `_failure`)."""
    try:
        body = json.loads(data)
        if error_coded is not None and isinstance(body, dict) and "error" in body and "choices" not in body:
            message, error = _server_error(data)
            raise _failure(None, message, error, deadline, error_coded)
        return shape.model_validate(body)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError and ValidationError all are
        if isinstance(exc, ValidationError):
            reason = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:3])
        else:
            reason = "not JSON"
        raise deadline.error(MalformedReply, f"malformed {what} from {url} ({reason}): {data[:300]!r}") from None


class _StreamingClient:
    """What both clients share: a call streamed while the server streams, and the fallback."""

    stream: type[_Stream]
    # Whether calls are streamed: False once the server has refused (`ChatClient.streaming`).
    streaming = True

    def _stream_fields(self, streamed: bool) -> dict:
        return {"stream": streamed}

    def _post(
        self, http: httpx.Client, url: str, body: dict, deadline: _Deadline, cap: int
    ) -> tuple[int, bytes, _Reply | None]:
        """One request, streamed while the client streams; (status, whole body, None) when the
        server answered with a whole body, which the caller parses as an unstreamed reply."""
        streamed = self.streaming
        request = {**body, **self._stream_fields(streamed)}
        try:
            status, data, reply = _send(http, url, request, deadline, cap, self.stream if streamed else None)
        except EmptyStream:
            # Asked again unstreamed, under the same deadline and on a new connection (the server
            # dropped the last one), it says why (an overflow).
            with _http_client() as fresh:
                return _send(fresh, url, {**body, **self._stream_fields(False)}, deadline, cap)
        if streamed and reply is None:
            if status == 200:  # a whole reply to a stream request: the server ignores `stream`
                self.streaming = False
            elif _refuses_stream(status, data):
                self.streaming = False
                # Under the same deadline: one attempt, one budget, however many requests.
                status, data, reply = _send(http, url, {**body, **self._stream_fields(False)}, deadline, cap)
        return status, data, reply


def _chat_reply(reply: _Reply, deadline: _Deadline) -> ChatReply:
    return ChatReply(
        text=reply.text,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        duration_s=deadline.elapsed,
        finish_reason=reply.finish_reason,
        first_token_s=deadline.first_token_s,
    )


class OpenAIChatClient(_StreamingClient):
    """`POST /v1/chat/completions` (llama.cpp server, vLLM, LM Studio, Ollama's /v1).

    llama-cpp-python's server takes the schema as `{"type": "json_object", "schema": ...}` and
    rejects OpenAI's `json_schema` form; the others want `json_schema`. `schema_style` says which
    to send; `auto` tries `json_schema` and falls back to `json_object` once, then remembers.
    """

    def __init__(self, base_url: str, model: str, schema_style: str = "auto"):
        if schema_style not in ("auto", "json_schema", "json_object"):
            raise ValueError(f"unknown schema style {schema_style!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.schema_style = schema_style

    def _response_format(self, schema: dict, style: str) -> dict:
        if style == "json_object":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": "sessionSummary", "schema": schema, "strict": True}}

    stream = _SSE

    def _stream_fields(self, streamed: bool) -> dict:
        # include_usage: the counts come in a last chunk; a server that ignores it streams none.
        return {"stream": True, "stream_options": {"include_usage": True}} if streamed else {"stream": False}

    def chat(
        self,
        prompt: str,
        *,
        schema: dict | None,
        max_output_tokens: int,
        timeout_s: float,
        stall_s: float | None = None,
    ) -> ChatReply:
        """`schema=None`: a plain-text reply, no `response_format` sent."""
        style = "json_schema" if self.schema_style == "auto" else self.schema_style
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": max_output_tokens,
        }
        if schema is not None:
            body["response_format"] = self._response_format(schema, style)
        url = f"{self.base_url}/v1/chat/completions"
        cap = reply_byte_cap(max_output_tokens)
        # The client before the deadline: loading its TLS context can take 0.1 s on a loaded host.
        with _http_client() as http, _Deadline(timeout_s, stall_s) as deadline:
            status, data, reply = self._post(http, url, body, deadline, cap)
            if (
                reply is None
                and schema is not None
                and self.schema_style == "auto"
                and status in (400, 422, 500)
                and b"json_schema" in data
            ):
                self.schema_style = "json_object"
                body["response_format"] = self._response_format(schema, "json_object")
                status, data, reply = self._post(http, url, body, deadline, cap)
            streamed = reply is not None
            if not streamed:
                _raise_for_status(status, data, deadline, coded=True)
                completion = _validated(_Completion, data, url, "chat completion", deadline)
                choice, usage = completion.choices[0], completion.usage or _Usage()
                reply = _Reply(
                    choice.message.content or "", choice.finish_reason, usage.prompt_tokens, usage.completion_tokens
                )
        answer = _chat_reply(reply, deadline)
        remaining = deadline.timeout_s - deadline.elapsed
        if streamed and answer.prompt_tokens is None and remaining > 0:
            # A stream with no usage (llama-cpp-python's): the server's tokenizer counts the prompt
            # instead (its text, without the chat template's few tokens), within the call's ceiling.
            answer = replace(answer, prompt_tokens=self._count_tokens(prompt, remaining))
        return answer

    # The tokenizer route that answered (an index into TOKENIZE_ROUTES); None: not asked yet;
    # -1: every route refused the request (an error of the request, 4xx), so none is asked again.
    _tokenizer: int | None = None

    def count_tokens(self, text: str) -> int | None:
        """The server's own token count of `text`, or None: no tokenizer, or it failed (never raises).
        See `_count_tokens`."""
        return self._count_tokens(text, TOKENIZE_TIMEOUT_S)

    def _count_tokens(self, text: str, timeout_s: float) -> int | None:
        """`count_tokens` within `timeout_s`.

        Tries TOKENIZE_ROUTES in order once and remembers the one that answers. A route refused
        with a 4xx (llama.cpp has no /extras/tokenize, llama-cpp-python no /tokenize, another
        server neither) is not asked again; a 5xx, a timeout or no connection fails this count only.
        """
        if self._tokenizer == -1:
            return None
        order = range(len(TOKENIZE_ROUTES)) if self._tokenizer is None else [self._tokenizer]
        for index in order:
            path, field = TOKENIZE_ROUTES[index]
            body = {field: text} if field == "content" else {field: text, "model": self.model}
            url = f"{self.base_url}{path}"
            cap = MIN_REPLY_BYTES + TOKENIZE_BYTES_PER_BYTE * len(text.encode("utf-8"))
            try:
                with _http_client() as http, _Deadline(min(timeout_s, TOKENIZE_TIMEOUT_S)) as deadline:
                    status, data, _ = _send(http, url, body, deadline, cap)
            except ModelError:
                return None  # the server failed this time: the route may answer the next
            if 400 <= status < 500:
                continue
            if status != 200:
                return None
            try:
                tokens = _Tokens.model_validate_json(data).tokens
            except ValidationError:
                continue  # a 200 that is no token list: not a tokenizer at this route
            self._tokenizer = index
            return len(tokens)
        if self._tokenizer is None:
            self._tokenizer = -1
        return None


class OllamaChatClient(_StreamingClient):
    """Ollama's native `POST /api/chat`, with an explicit context and output cap.

    Ollama truncates an oversized prompt silently; its `prompt_eval_count` comes back as the
    reply's `prompt_tokens`, and the synthesis flags a count far below the estimate.
    """

    def __init__(self, base_url: str, model: str, num_ctx: int, keep_alive: str = "5m"):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.num_ctx = num_ctx
        self.keep_alive = keep_alive

    stream = _NDJSON

    def chat(
        self,
        prompt: str,
        *,
        schema: dict | None,
        max_output_tokens: int,
        timeout_s: float,
        stall_s: float | None = None,
    ) -> ChatReply:
        """`schema=None`: a plain-text reply, no `format` sent."""
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "keep_alive": self.keep_alive,
            # truncate/shift false: newer servers fail on an oversized prompt instead of cutting it.
            "truncate": False,
            "shift": False,
            "options": {"num_ctx": self.num_ctx, "num_predict": max_output_tokens, "temperature": 0},
        }
        if schema is not None:
            body["format"] = schema
        url = f"{self.base_url}/api/chat"
        with _http_client() as http, _Deadline(timeout_s, stall_s) as deadline:
            status, data, reply = self._post(http, url, body, deadline, reply_byte_cap(max_output_tokens))
            if reply is None:
                _raise_for_status(status, data, deadline, coded=False)
                whole = _validated(_OllamaReply, data, url, "chat reply", deadline)
                reply = _Reply(
                    whole.message.content or "", whole.done_reason, whole.prompt_eval_count, whole.eval_count
                )
        return _chat_reply(reply, deadline)

    def count_tokens(self, text: str) -> int | None:
        """None: Ollama's API has no tokenizer endpoint."""
        return None
