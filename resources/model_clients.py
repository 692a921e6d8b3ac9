"""Chat-model clients over httpx: Ollama's native API and the OpenAI-compatible one.

Both speak `digest.model_api.ChatClient`: one user message in, the reply text and the server's
own token counts out, typed errors for timeout, context overflow and provider failure.
"""

from __future__ import annotations

import time

import httpx

from digest.model_api import ChatReply, ContextOverflow, ModelTimeout, ProviderError

# Connecting is quick or not at all; the read timeout is the call's own budget.
CONNECT_TIMEOUT_S = 10.0


def _timeout(timeout_s: float) -> httpx.Timeout:
    return httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))


def _post(url: str, body: dict, timeout_s: float) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    try:
        response = httpx.post(url, json=body, timeout=_timeout(timeout_s))
    except httpx.TimeoutException as exc:
        error = ModelTimeout(f"model call timed out after {timeout_s:g}s ({type(exc).__name__})")
        error.duration_s = time.monotonic() - started
        raise error from None
    except httpx.HTTPError as exc:
        raise ProviderError(f"model server unreachable at {url}: {exc}") from None
    return response, time.monotonic() - started


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        return str(error.get("message") or error)[:500]
    return str(error)[:500]


def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    text = _error_text(response)
    if "context_length_exceeded" in response.text or (
        response.status_code == 400 and "context" in text.lower()
    ):
        raise ContextOverflow(f"HTTP {response.status_code}: {text}")
    raise ProviderError(f"HTTP {response.status_code}: {text}")


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
        response, duration = _post(url, body, timeout_s)
        if (
            schema is not None
            and self.schema_style == "auto"
            and response.status_code in (400, 422, 500)
            and "json_schema" in response.text
        ):
            self.schema_style = "json_object"
            body["response_format"] = self._response_format(schema, "json_object")
            response, duration = _post(url, body, timeout_s)
        _raise_for_status(response)
        try:
            data = response.json()
            choice = data["choices"][0]
            text = choice["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            raise ProviderError(f"malformed chat completion from {url}: {response.text[:300]!r}") from None
        usage = data.get("usage") or {}
        return ChatReply(
            text=text,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            duration_s=duration,
            finish_reason=choice.get("finish_reason"),
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
        response, duration = _post(url, body, timeout_s)
        _raise_for_status(response)
        try:
            data = response.json()
            text = data["message"]["content"] or ""
        except (ValueError, KeyError, TypeError):
            raise ProviderError(f"malformed chat reply from {url}: {response.text[:300]!r}") from None
        return ChatReply(
            text=text,
            prompt_tokens=data.get("prompt_eval_count"),
            completion_tokens=data.get("eval_count"),
            duration_s=duration,
            finish_reason=data.get("done_reason"),
        )
