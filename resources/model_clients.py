"""Chat-model clients over httpx: Ollama's native API and the OpenAI-compatible one.

Both speak `digest.model_api.ChatClient`: one user message in, the reply text and the server's
own token counts out, typed errors for timeout, context overflow, an overrun reply and provider
failure. Every call is bounded three ways: a wall-clock deadline (`timeout_s`, however slowly the
server sends), a cap on the bytes read (from the output token cap), and a validated reply shape.

What failed decides the error type, never the words of the model's reply:
- no answer by the deadline: `ModelTimeout`;
- an HTTP error whose server error says the prompt is over the context: `ContextOverflow`. For the
  OpenAI protocol that is the error's `code` ("context_length_exceeded": OpenAI, llama-cpp-python)
  or `type` ("exceed_context_size_error": llama.cpp's server) on any status, or a 400/413 whose
  error message names the context (vLLM sends only a message). Ollama has no error codes: its
  `error` string names the context ("the input length exceeds the context length"), and has come
  as 400, 413 or 500 by version and endpoint, so there the message decides on any error status.
  Both read the server's error object of an error status only, never a 200's reply text;
- a reply over the byte cap: `OutputLimitExceeded`;
- anything else the server did wrong, a 200 that breaks the wire protocol included: `ProviderError`.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from typing import Annotated, TypeVar

import httpx
from pydantic import BaseModel, BeforeValidator, Field, StrictStr, ValidationError

from digest.model_api import (
    ChatReply,
    ContextOverflow,
    HostUnreachable,
    MalformedReply,
    ModelError,
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
# Uncompressed, so the bytes counted are the bytes the reply holds.
_HEADERS = {"Accept-Encoding": "identity"}
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
    """One wall-clock deadline for every request of one `chat` call.

    httpx's timeouts bound each socket operation, so a server that sends a byte a second never
    trips one. At the deadline a timer shuts the call's sockets down, which ends a read blocked in
    the kernel at once, and the call reports a timeout.
    """

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.started = time.monotonic()
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout_s, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

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

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)

    def error(self, kind: type[ModelError], message: str) -> ModelError:
        error = kind(message)
        error.duration_s = self.elapsed
        return error

    def timeout(self) -> ModelError:
        return self.error(ModelTimeout, f"model call timed out after {self.timeout_s:g}s (wall-clock deadline)")


def _send(http: httpx.Client, url: str, body: dict, deadline: _Deadline, cap: int) -> tuple[int, bytes]:
    """POST `body` within the deadline; the status and the body, read up to `cap` bytes."""
    remaining = deadline.timeout_s - deadline.elapsed
    if remaining <= 0:
        raise deadline.timeout()
    timeout = httpx.Timeout(remaining, connect=min(CONNECT_TIMEOUT_S, remaining))
    data = bytearray()
    try:
        with http.stream("POST", url, json=body, timeout=timeout, extensions={"trace": deadline.trace}) as response:
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > cap:
                    message = f"reply from {url} over {cap} bytes: stopped reading (HTTP {response.status_code})"
                    raise deadline.error(OutputLimitExceeded, message)
            status = response.status_code
    except httpx.TimeoutException:
        raise deadline.timeout() from None
    except httpx.HTTPError as exc:
        if deadline.expired:
            raise deadline.timeout() from None
        if isinstance(exc, httpx.ConnectError):
            raise deadline.error(HostUnreachable, f"model server unreachable at {url}: {exc}") from None
        raise deadline.error(HostUnreachable, f"model server at {url} broke off the reply: {exc}") from None
    if deadline.expired:  # the shutdown can pass for the end of a body that runs to the close
        raise deadline.timeout()
    return status, bytes(data)


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
    if coded:
        overflow = error.get("code") == "context_length_exceeded" or error.get("type") == "exceed_context_size_error"
        overflow = overflow or (status in (400, 413) and bool(_CONTEXT_MESSAGE.search(message)))
    else:
        overflow = bool(_CONTEXT_MESSAGE.search(message))
    error = deadline.error(ContextOverflow if overflow else ProviderError, f"HTTP {status}: {message}")
    error.status = status  # a 5xx says the host is bad, a 4xx the request (`digest.circuit`)
    raise error


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


Shape = TypeVar("Shape", bound=BaseModel)


def _validated(shape: type[Shape], data: bytes, url: str, what: str, deadline: _Deadline) -> Shape:
    try:
        return shape.model_validate(json.loads(data))
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError and ValidationError all are
        if isinstance(exc, ValidationError):
            reason = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:3])
        else:
            reason = "not JSON"
        raise deadline.error(MalformedReply, f"malformed {what} from {url} ({reason}): {data[:300]!r}") from None


class OpenAIChatClient:
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

    def chat(self, prompt: str, *, schema: dict | None, max_output_tokens: int, timeout_s: float) -> ChatReply:
        """`schema=None`: a plain-text reply, no `response_format` sent."""
        style = "json_schema" if self.schema_style == "auto" else self.schema_style
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": max_output_tokens,
            "stream": False,
        }
        if schema is not None:
            body["response_format"] = self._response_format(schema, style)
        url = f"{self.base_url}/v1/chat/completions"
        cap = reply_byte_cap(max_output_tokens)
        # The client before the deadline: loading its TLS context can take 0.1 s on a loaded host.
        with httpx.Client(headers=_HEADERS) as http, _Deadline(timeout_s) as deadline:
            status, data = _send(http, url, body, deadline, cap)
            if (
                schema is not None
                and self.schema_style == "auto"
                and status in (400, 422, 500)
                and b"json_schema" in data
            ):
                self.schema_style = "json_object"
                body["response_format"] = self._response_format(schema, "json_object")
                # Under the same deadline: one attempt, one budget, however many requests.
                status, data = _send(http, url, body, deadline, cap)
            _raise_for_status(status, data, deadline, coded=True)
            completion = _validated(_Completion, data, url, "chat completion", deadline)
        choice, usage = completion.choices[0], completion.usage or _Usage()
        return ChatReply(
            text=choice.message.content or "",
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            duration_s=deadline.elapsed,
            finish_reason=choice.finish_reason,
        )


class OllamaChatClient:
    """Ollama's native `POST /api/chat`, with an explicit context and output cap.

    Ollama truncates an oversized prompt silently; its `prompt_eval_count` comes back as the
    reply's `prompt_tokens`, and the synthesis flags a count far below the estimate.
    """

    def __init__(self, base_url: str, model: str, num_ctx: int, keep_alive: str = "5m"):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.num_ctx = num_ctx
        self.keep_alive = keep_alive

    def chat(self, prompt: str, *, schema: dict | None, max_output_tokens: int, timeout_s: float) -> ChatReply:
        """`schema=None`: a plain-text reply, no `format` sent."""
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "stream": False,
            "keep_alive": self.keep_alive,
            # truncate/shift false: newer servers fail on an oversized prompt instead of cutting it.
            "truncate": False,
            "shift": False,
            "options": {"num_ctx": self.num_ctx, "num_predict": max_output_tokens, "temperature": 0},
        }
        if schema is not None:
            body["format"] = schema
        url = f"{self.base_url}/api/chat"
        with httpx.Client(headers=_HEADERS) as http, _Deadline(timeout_s) as deadline:
            status, data = _send(http, url, body, deadline, reply_byte_cap(max_output_tokens))
            _raise_for_status(status, data, deadline, coded=False)
            reply = _validated(_OllamaReply, data, url, "chat reply", deadline)
        return ChatReply(
            text=reply.message.content or "",
            prompt_tokens=reply.prompt_eval_count,
            completion_tokens=reply.eval_count,
            duration_s=deadline.elapsed,
            finish_reason=reply.done_reason,
        )
