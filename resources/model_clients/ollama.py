"""The Ollama client: its native `POST /api/chat`, streamed as newline-delimited JSON."""

from __future__ import annotations

from pydantic import BaseModel, StrictBool

from digest.model_api import DEFAULT_STREAM_BOUNDS, ChatReply, StreamBounds
from resources.model_clients.deadline import Deadline
from resources.model_clients.streams import (
    Budget,
    Count,
    Message,
    Reason,
    Reply,
    Stream,
    StreamingClient,
    chat_reply,
    http_client,
    raise_for_status,
    validated,
)


class _OllamaReply(BaseModel):
    message: Message
    done_reason: Reason = None
    prompt_eval_count: Count = None
    eval_count: Count = None


class _OllamaChunk(BaseModel):
    """One line of an Ollama stream; the `done` one has the reason and the counts."""

    message: Message | None = None
    done: StrictBool
    done_reason: Reason = None
    prompt_eval_count: Count = None
    eval_count: Count = None


class _NDJSON(Stream):
    """Ollama's stream: a JSON object a line, `done: false` with a piece, then `done: true` with
    the reason and the counts."""

    media_type = "application/x-ndjson"

    def line(self, line: bytes) -> bool:
        if not line.strip():
            return False
        chunk = validated(_OllamaChunk, line, self.url, "stream chunk", self.deadline, error_coded=False)
        if chunk.message is not None:
            self.text(chunk.message.content, chunk.message.thought)
        if not chunk.done:
            return False
        self.reply = Reply("".join(self.pieces), chunk.done_reason, chunk.prompt_eval_count, chunk.eval_count)
        return True


class OllamaChatClient(StreamingClient):
    """Ollama's native `POST /api/chat`, with an explicit context and output cap.

    Ollama truncates an oversized prompt silently; its `prompt_eval_count` comes back as the
    reply's `prompt_tokens`, and the synthesis flags a count far below the estimate.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        num_ctx: int,
        keep_alive: str = "5m",
        bounds: StreamBounds = DEFAULT_STREAM_BOUNDS,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.num_ctx = num_ctx
        self.keep_alive = keep_alive
        self.bounds = bounds

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
        with http_client() as http, Deadline(timeout_s, stall_s, self.progress) as deadline:
            status, data, reply = self._post(http, url, body, deadline, Budget(max_output_tokens, self.bounds))
            if reply is None:
                raise_for_status(status, data, deadline, coded=False)
                whole = validated(_OllamaReply, data, url, "chat reply", deadline)
                reply = Reply(whole.message.content or "", whole.done_reason, whole.prompt_eval_count, whole.eval_count)
        return chat_reply(reply, deadline)

    def count_tokens(self, text: str) -> int | None:
        """None: Ollama's API has no tokenizer endpoint."""
        return None
