"""What both protocols share: the HTTP request of a call, the streamed reply read line by line
within its bounds, the server's error classified, and the reply shapes both use."""

from __future__ import annotations

import functools
import json
import math
import re
import ssl
from dataclasses import dataclass
from typing import Annotated, TypeVar

import httpx
from pydantic import BaseModel, BeforeValidator, StrictStr, ValidationError

from digest.model_api import (
    ChatReply,
    ContextOverflow,
    HostUnreachable,
    MalformedReply,
    ModelError,
    OutputLimitExceeded,
    ProviderError,
    RunawayReply,
    StreamBounds,
)
from resources.model_clients.deadline import Deadline
from resources.model_clients.progress import CallProgress

# Connecting is quick or not at all; the deadline is the call's own budget.
CONNECT_TIMEOUT_S = 10.0
# A token is 3-5 bytes of text and JSON escaping (\uXXXX) can make it six times that: 64 bytes a
# token is room for any honest reply and its envelope. The floor covers short caps and error pages.
REPLY_BYTES_PER_TOKEN = 64
MIN_REPLY_BYTES = 256 * 1024
# A stream past its output cap by this much is a runaway: a piece is at most a token on the servers
# read (llama.cpp and Ollama send a token a piece, vLLM one or more), and the slack covers a role
# chunk, a finish chunk and a stray character split in two.
RUNAWAY_FACTOR = 1.25
RUNAWAY_SLACK_PIECES = 16
INT32_MAX = 2**31 - 1  # the ledger's INTEGER columns
# Uncompressed, so the bytes counted are the bytes the reply holds.
_HEADERS = {"Accept-Encoding": "identity"}


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default verification, built once: loading the CA bundle is costly
    (docs/model-clients.md), and every call (a chat, an embedding batch) opens a client of its own."""
    return httpx.create_ssl_context()


def http_client() -> httpx.Client:
    return httpx.Client(headers=_HEADERS, verify=tls_context())


_CONTEXT_MESSAGE = re.compile(
    r"context[ _](length|window|size)|maximum context|exceeds? (the )?(available )?context", re.IGNORECASE
)


def reply_byte_cap(max_output_tokens: int) -> int:
    """The most bytes of reply a call reads before it gives up on it."""
    return max(MIN_REPLY_BYTES, max_output_tokens * REPLY_BYTES_PER_TOKEN)


@dataclass
class Reply:
    """What a reply says, in either protocol, whole or streamed."""

    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None


class Budget:
    """What one call may hold and read, over all its requests: its reply text (`reply_bytes`, from
    the output cap; a whole body too), the pieces of a stream (`max_pieces`: past them the server
    ignores the output cap), one event of a stream, and every byte off the wire."""

    def __init__(self, max_output_tokens: int, bounds: StreamBounds, reply_bytes: int | None = None):
        self.reply_bytes = reply_byte_cap(max_output_tokens) if reply_bytes is None else reply_bytes
        self.output_tokens = max_output_tokens
        self.max_pieces = math.ceil(max_output_tokens * RUNAWAY_FACTOR) + RUNAWAY_SLACK_PIECES
        self.event_bytes = bounds.event_max_bytes
        self.call_bytes = bounds.call_max_bytes
        self.read = 0

    def received(self, size: int, url: str, deadline: Deadline) -> None:
        self.read += size
        if self.read > self.call_bytes:
            message = f"model server at {url} sent over {self.call_bytes} bytes in one call: stopped reading"
            raise deadline.error(MalformedReply, message)

    def over_event(self, size: int, url: str, deadline: Deadline) -> None:
        if size > self.event_bytes:
            message = f"malformed stream from {url}: one event over {self.event_bytes} bytes, stopped reading"
            raise deadline.error(MalformedReply, message)


class Stream:
    """A streamed reply, parsed line by line as the bytes arrive. A subclass is one protocol."""

    media_type = ""  # the Content-Type of a streamed answer; another is a server that did not stream

    def __init__(self, url: str, deadline: Deadline, budget: Budget):
        self.url, self.deadline, self.budget = url, deadline, budget
        self.pieces: list[str] = []
        self.size = 0
        self.generated = 0  # pieces of text, answer or reasoning: at most the tokens generated
        self.reply: Reply | None = None  # set at the stream's end marker

    def line(self, line: bytes) -> bool:
        """Take one line (its end of line stripped); True when the reply has ended."""
        raise NotImplementedError

    def text(self, content: str | None, reasoning: str | None = None) -> None:
        """A well-formed chunk's text: `content` the answer's, `reasoning` a thinking model's, which
        is no part of the reply but is generated, under the same output cap. A chunk with neither
        is no progress."""
        if not content and not reasoning:
            return
        if content:
            self.pieces.append(content)
            self.size += len(content.encode("utf-8"))
            if self.size > self.budget.reply_bytes:
                message = f"reply from {self.url} over {self.budget.reply_bytes} bytes: stopped reading"
                raise self.deadline.error(OutputLimitExceeded, message)
        self.generated += 1
        if self.generated > self.budget.max_pieces:
            message = (
                f"runaway reply from {self.url}: over {self.budget.max_pieces} pieces streamed for an output cap "
                f"of {self.budget.output_tokens} tokens: stopped reading"
            )
            raise self.deadline.error(RunawayReply, message)
        self.deadline.piece()


def _media_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "").split(";")[0].strip().lower()


def _read_stream(response: httpx.Response, parser: Stream, url: str, deadline: Deadline) -> Reply:
    buffer = bytearray()
    for chunk in response.iter_bytes():
        parser.budget.received(len(chunk), url, deadline)
        buffer += chunk
        while (end := buffer.find(b"\n")) >= 0:
            line = bytes(buffer[:end]).rstrip(b"\r")
            del buffer[: end + 1]
            if parser.line(line):
                deadline.quiet()
                return parser.reply
        parser.budget.over_event(len(buffer), url, deadline)  # one line with no end
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


def send(
    http: httpx.Client, url: str, body: dict, deadline: Deadline, budget: Budget, stream: type[Stream] | None = None
) -> tuple[int, bytes, Reply | None]:
    """POST `body` within the deadline. With `stream`, a 200 in the stream's media type is read as
    that stream: (200, b"", the reply). Anything else is a whole body, read up to the budget's reply
    bytes: (status, body, None)."""
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
                return status, b"", _read_stream(response, stream(url, deadline, budget), url, deadline)
            deadline.quiet()  # a whole body: only the ceiling bounds it
            for chunk in response.iter_bytes():
                budget.received(len(chunk), url, deadline)
                data += chunk
                if len(data) > budget.reply_bytes:
                    cap = budget.reply_bytes
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


def raise_for_status(status: int, data: bytes, deadline: Deadline, coded: bool) -> None:
    """`coded`: the OpenAI protocol, whose error object has a `code` and a `type`; Ollama's is a string."""
    if status < 400:
        return
    message, error = _server_error(data)
    raise _failure(status, message, error, deadline, coded)


def _failure(status: int | None, message: str, error: dict, deadline: Deadline, coded: bool) -> ModelError:
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
    # A 5xx says the host is bad, a 4xx the request (`digest.circuit`). An error inside a 200
    # stream has no status: the server failed mid-answer, after it accepted the request, so a 5xx
    # unless its `code` is an HTTP status that says otherwise (llama.cpp's: 500, type server_error).
    code = error.get("code")
    failure.status = status if status is not None else code if type(code) is int and 400 <= code < 600 else 500
    return failure


# --- the reply shapes --------------------------------------------------------------------------


def _count(value: object) -> int | None:
    """A token count the ledger can hold: a JSON integer in 0..INT32_MAX. Anything else (a
    string, a float, a negative, 3e9) is dropped to None, not clamped: a clamped count would be
    a number the server never sent."""
    return value if type(value) is int and 0 <= value <= INT32_MAX else None


def _reason(value: object) -> str | None:
    return value if isinstance(value, str) else None


def json_object(value: object) -> object:
    return value if isinstance(value, dict) else None


Count = Annotated[int | None, BeforeValidator(_count)]
Reason = Annotated[str | None, BeforeValidator(_reason)]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


Text = Annotated[str | None, BeforeValidator(_text)]


class Message(BaseModel):
    content: StrictStr | None = None  # text or null; an object or a number breaks the protocol
    # A thinking model's reasoning, streamed apart from its answer: `reasoning_content` (llama.cpp's
    # server), `reasoning` (vLLM, Ollama's /v1), `thinking` (Ollama's /api/chat). Progress, and under
    # the output cap, but no part of the reply; a non-string is dropped, as no reply depends on it.
    reasoning_content: Text = None
    reasoning: Text = None
    thinking: Text = None

    @property
    def thought(self) -> str | None:
        return self.reasoning_content or self.reasoning or self.thinking


Shape = TypeVar("Shape", bound=BaseModel)


def validated(
    shape: type[Shape], data: bytes, url: str, what: str, deadline: Deadline, error_coded: bool | None = None
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


class StreamingClient:
    """What both clients share: a call streamed while the server streams, and the fallback."""

    stream: type[Stream]
    # Whether calls are streamed: False once the server has refused (`ChatClient.streaming`).
    streaming = True
    # Where a call's pieces are counted for the run log (`progress.py`); None: nobody watches.
    progress: CallProgress | None = None

    def _stream_fields(self, streamed: bool) -> dict:
        return {"stream": streamed}

    def _post(
        self, http: httpx.Client, url: str, body: dict, deadline: Deadline, budget: Budget
    ) -> tuple[int, bytes, Reply | None]:
        """One request, streamed while the client streams; (status, whole body, None) when the
        server answered with a whole body, which the caller parses as an unstreamed reply."""
        streamed = self.streaming
        request = {**body, **self._stream_fields(streamed)}
        try:
            status, data, reply = send(http, url, request, deadline, budget, self.stream if streamed else None)
        except EmptyStream:
            # Asked again unstreamed, under the same deadline and on a new connection (the server
            # dropped the last one), it says why (an overflow).
            with http_client() as fresh:
                return send(fresh, url, {**body, **self._stream_fields(False)}, deadline, budget)
        if streamed and reply is None:
            if status == 200:  # a whole reply to a stream request: the server ignores `stream`
                self.streaming = False
            elif _refuses_stream(status, data):
                self.streaming = False
                # Under the same deadline: one attempt, one budget, however many requests.
                status, data, reply = send(http, url, {**body, **self._stream_fields(False)}, deadline, budget)
        return status, data, reply


def chat_reply(reply: Reply, deadline: Deadline) -> ChatReply:
    return ChatReply(
        text=reply.text,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        duration_s=deadline.elapsed,
        finish_reason=reply.finish_reason,
        first_token_s=deadline.first_token_s,
    )
