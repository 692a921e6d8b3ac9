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


class ModelError(Exception):
    """A model call that produced no usable reply."""

    duration_s: float = 0.0  # wall-clock seconds the call took before it failed (set by the client)
    status: int | None = None  # the HTTP status of an error reply (set by the client), None for no reply


class ModelTimeout(ModelError):
    """The call did not finish within its timeout."""


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


class ChatClient(Protocol):
    model: str

    def chat(self, prompt: str, *, schema: dict | None, max_output_tokens: int, timeout_s: float) -> ChatReply:
        """Send one user message and return the reply; raise a ModelError subclass on failure.
        With `schema`, the reply is asked for as JSON of that schema; without, as plain text.
        `timeout_s` is a wall-clock deadline for the whole call, whatever the server sends."""
        ...
