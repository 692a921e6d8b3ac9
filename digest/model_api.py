"""The one interface every chat-model client speaks, and the errors it raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ChatReply:
    text: str
    prompt_tokens: int | None  # the server's own count (usage.prompt_tokens / prompt_eval_count)
    completion_tokens: int | None
    duration_s: float
    finish_reason: str | None = None
    cached: bool = False  # replayed from the response cache: no model call, no model time
    # Seconds from sending the request to the first piece of the answer: the prompt's evaluation
    # time. Only a streamed reply shows it; None without streaming.
    first_token_s: float | None = None


class ModelError(Exception):
    """A model call that produced no usable reply."""

    duration_s: float = 0.0  # wall-clock seconds the call took before it failed (set by the client)
    status: int | None = None  # the HTTP status of an error reply (set by the client), None for no reply


class ModelTimeout(ModelError):
    """The call did not finish within its timeout."""

    # A streamed call still receiving pieces when its wall-clock ceiling came: slow, not stuck.
    progressing: bool = False
    first_token_s: float | None = None  # when the first piece came, if one did (see ChatReply)


class ModelStalled(ModelTimeout):
    """A streamed call that received nothing for its stall window: the server is stuck."""


class ContextOverflow(ModelError):
    """The server refused the prompt as larger than its context."""


class ProviderError(ModelError):
    """The server could not be reached or answered with an error."""


class HostUnreachable(ProviderError):
    """The server could not be reached, or broke the connection off before its reply ended."""


class MalformedReply(ProviderError):
    """The server answered 200 with a body that breaks its own wire protocol (not JSON, a field of
    the wrong type, no choice). The reply text inside a well-formed reply is the caller's to parse."""


class OutputLimitExceeded(ModelError):
    """The reply ran past its output bound: cut at the output cap (`finish_reason` "length"), or
    larger than the client reads for that cap."""


class RunawayReply(OutputLimitExceeded):
    """A streamed reply still coming past its output cap (`max_tokens` / `num_predict`, counted in
    pieces as they arrive): the server ignores the cap it was sent. The same server does it on every
    call, so it is a host failure (`digest.circuit`), not a long answer."""


# Defaults of the stream bounds (DIGEST_STREAM_EVENT_MAX_BYTES, DIGEST_CALL_MAX_BYTES).
EVENT_MAX_BYTES = 1024 * 1024
CALL_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class StreamBounds:
    """What one call may hold and read, besides its reply text (held to the output cap's bytes).

    An honest event (one SSE event, one NDJSON line) is one chunk of a few hundred bytes; a call
    reads its reply and a few requests' worth of envelopes. A server past either is broken."""

    event_max_bytes: int = EVENT_MAX_BYTES  # one SSE event (all its data lines) or one line of a stream
    call_max_bytes: int = CALL_MAX_BYTES  # every byte one call reads off the wire, all its requests


DEFAULT_STREAM_BOUNDS = StreamBounds()


class ChatClient(Protocol):
    model: str
    # Whether calls are streamed: False once the server has refused to stream (the client then
    # calls it without, and only the ceiling bounds a call, so the caller sizes it by itself).
    streaming: bool

    def chat(
        self,
        prompt: str,
        *,
        schema: dict | None,
        max_output_tokens: int,
        timeout_s: float,
        stall_s: float | None = None,
    ) -> ChatReply:
        """Send one user message and return the reply; raise a ModelError subclass on failure.
        With `schema`, the reply is asked for as JSON of that schema; without, as plain text.
        `timeout_s` is a wall-clock ceiling for the whole call, whatever the server sends.
        `stall_s`: a streamed call that receives no piece for this long (the first one included)
        is given up as stuck (`ModelStalled`); None, or a call that is not streamed: only the ceiling."""
        ...

    def count_tokens(self, text: str) -> int | None:
        """The server's own token count of `text`, or None when it has no tokenizer (never raises)."""
        ...
