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


class ModelTimeout(ModelError):
    """The call did not finish within its timeout."""


class ContextOverflow(ModelError):
    """The server refused the prompt as larger than its context."""


class ProviderError(ModelError):
    """The server could not be reached or answered with an error."""


class ChatClient(Protocol):
    model: str

    def chat(self, prompt: str, *, schema: dict | None, max_output_tokens: int, timeout_s: float) -> ChatReply:
        """Send one user message and return the reply; raise a ModelError subclass on failure.
        With `schema`, the reply is asked for as JSON of that schema; without, as plain text."""
        ...
