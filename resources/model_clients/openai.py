"""The OpenAI-compatible client: `POST /v1/chat/completions`, streamed as server-sent events."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field, StrictInt, ValidationError

from digest.model_api import DEFAULT_STREAM_BOUNDS, ChatReply, ModelError, StreamBounds
from resources.model_clients.deadline import Deadline
from resources.model_clients.streams import (
    MIN_REPLY_BYTES,
    Budget,
    Count,
    Message,
    Reason,
    Reply,
    Stream,
    StreamingClient,
    chat_reply,
    http_client,
    json_object,
    raise_for_status,
    send,
    validated,
)

# A token count routes one session: asked once, quickly, never at the cost of the chat call.
TOKENIZE_TIMEOUT_S = 10.0
# A token id in a JSON list: at most 7 digits and a comma, and no more tokens than bytes of text.
TOKENIZE_BYTES_PER_BYTE = 8
# The tokenizers of OpenAI-compatible servers, tried in this order: (path, the body's text field).
# llama.cpp's server: POST /tokenize {"content"} -> {"tokens": [ids]} (add_special: false, no BOS);
# llama-cpp-python's: POST /extras/tokenize {"input", "model"} -> {"tokens": [ids]}.
TOKENIZE_ROUTES = (("/tokenize", "content"), ("/extras/tokenize", "input"))


class _Usage(BaseModel):
    prompt_tokens: Count = None
    completion_tokens: Count = None


class _Choice(BaseModel):
    message: Message
    finish_reason: Reason = None


class _Completion(BaseModel):
    """An OpenAI chat completion: the fields read, validated; a bad count or usage is dropped."""

    choices: list[_Choice] = Field(min_length=1)
    usage: Annotated[_Usage | None, BeforeValidator(json_object)] = None


class _Delta(BaseModel):
    delta: Message = Message()
    finish_reason: Reason = None


class _Chunk(BaseModel):
    """One chunk of an OpenAI stream; include_usage's last one has no choices and the usage."""

    choices: list[_Delta]
    usage: Annotated[_Usage | None, BeforeValidator(json_object)] = None


class _Tokens(BaseModel):
    tokens: list[StrictInt]


class _SSE(Stream):
    """OpenAI's stream: `data: {chunk}` events, each ended by a blank line, then `data: [DONE]`.
    Comments (sse-starlette's `: ping`), blank keep-alives and other fields carry no reply and are
    no progress."""

    media_type = "text/event-stream"

    def __init__(self, *args):
        super().__init__(*args)
        self.data: list[bytes] = []
        self.event_size = 0  # of `data`: an event that never ends is held to the event bound
        self.finish_reason: str | None = None
        self.usage: _Usage | None = None

    def line(self, line: bytes) -> bool:
        field, _, value = line.partition(b":")
        if field in (b"data", b"error"):  # llama.cpp's server sends a failure as an `error:` field
            self.data.append(value[1:] if value.startswith(b" ") else value)
            self.event_size += len(self.data[-1]) + 1
            self.budget.over_event(self.event_size, self.url, self.deadline)
            return False
        if line or not self.data:
            return False
        data, self.data, self.event_size = b"\n".join(self.data), [], 0
        if data.strip() == b"[DONE]":
            usage = self.usage
            if usage is None:
                # No usage chunk (llama-cpp-python 0.3 ignores include_usage): no prompt count, and
                # the pieces for the answer's, a token each on llama.cpp-based servers.
                usage = _Usage(completion_tokens=self.generated)
            self.reply = Reply("".join(self.pieces), self.finish_reason, usage.prompt_tokens, usage.completion_tokens)
            return True
        chunk = validated(_Chunk, data, self.url, "stream chunk", self.deadline, error_coded=True)
        if chunk.usage is not None:  # include_usage's last chunk (empty choices), or any that has it
            self.usage = chunk.usage
        if chunk.choices:
            choice = chunk.choices[0]
            self.finish_reason = choice.finish_reason or self.finish_reason
            self.text(choice.delta.content, choice.delta.thought)
        return False


class OpenAIChatClient(StreamingClient):
    """`POST /v1/chat/completions` (llama.cpp server, vLLM, LM Studio, Ollama's /v1).

    llama-cpp-python's server takes the schema as `{"type": "json_object", "schema": ...}` and
    rejects OpenAI's `json_schema` form; the others want `json_schema`. `schema_style` says which
    to send; `auto` tries `json_schema` and falls back to `json_object` once, then remembers.
    """

    def __init__(
        self, base_url: str, model: str, schema_style: str = "auto", bounds: StreamBounds = DEFAULT_STREAM_BOUNDS
    ):
        if schema_style not in ("auto", "json_schema", "json_object"):
            raise ValueError(f"unknown schema style {schema_style!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.schema_style = schema_style
        self.bounds = bounds

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
        budget = Budget(max_output_tokens, self.bounds)
        # The client before the deadline: loading its TLS context is slow on a loaded host.
        with http_client() as http, Deadline(timeout_s, stall_s, self.progress) as deadline:
            status, data, reply = self._post(http, url, body, deadline, budget)
            if (
                reply is None
                and schema is not None
                and self.schema_style == "auto"
                and status in (400, 422, 500)
                and b"json_schema" in data
            ):
                self.schema_style = "json_object"
                body["response_format"] = self._response_format(schema, "json_object")
                status, data, reply = self._post(http, url, body, deadline, budget)
            streamed = reply is not None
            if not streamed:
                raise_for_status(status, data, deadline, coded=True)
                completion = validated(_Completion, data, url, "chat completion", deadline)
                choice, usage = completion.choices[0], completion.usage or _Usage()
                reply = Reply(
                    choice.message.content or "", choice.finish_reason, usage.prompt_tokens, usage.completion_tokens
                )
        answer = chat_reply(reply, deadline)
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
                with http_client() as http, Deadline(min(timeout_s, TOKENIZE_TIMEOUT_S)) as deadline:
                    status, data, _ = send(http, url, body, deadline, Budget(0, self.bounds, cap))
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
