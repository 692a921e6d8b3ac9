"""A `ChatClient` that keeps every usable reply in DuckDB (`response_cache`), keyed by a hash of
everything that shapes the reply: the model, the wire parameters, the prompt and the schema.

Two jobs, one table:
- **reuse**: the same request again (a rerun after a restore, a retried run) is answered from the
  table with no model call, so it reproduces the same summary;
- **staging**: a reply is written the moment it arrives, before the summary built from it is
  written, so a process killed in between loses nothing: the rerun finds the reply and finishes.

Only replies the caller would accept are kept (a summary or graph reply that parses and validates,
a non-empty plain reply): a failure is never replayed. Errors and timeouts raise, so they never reach
the table. With reuse off (`DIGEST_RESPONSE_CACHE=off`) the staging job stays: a reply tagged with
its session is read back only by that session's rerun at the same turns, and the summary run drops
it once the summary is written.

A run that holds the store's connection (`Connection.held`) has it let go for each model call and
tokenizer count here, the one place every call of a run passes through, so the file is never held
while the model works.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from digest.graph import extraction_json_schema, parse_extraction
from digest.model_api import ChatClient, ChatReply
from digest.summary_output import parse_summary_output, response_json_schema


class ReplyStore(Protocol):
    def cached_reply(self, key: str, session: tuple[str, str] | None) -> ChatReply | None: ...

    def save_reply(self, key: str, model: str, reply: ChatReply, session: tuple[str, str] | None) -> None: ...

    def released(self) -> AbstractContextManager[None]: ...


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def request_key(model: str, wire: dict, prompt: str, schema: dict | None) -> str:
    """sha256 over what the server sees that can change its answer. Not the URL or the timeout:
    the same model behind another address (a restore on another host) answers alike."""
    payload = _canonical({"model": model, "wire": wire, "prompt": prompt, "schema": schema})
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


# The parsers the callers apply, by the schema they send: a reply is kept only if it passes.
_VALIDATORS: dict[str, Callable[[str], object]] = {
    _canonical(response_json_schema()): parse_summary_output,
    _canonical(extraction_json_schema()): parse_extraction,
}


def usable_reply(text: str, schema: dict | None) -> bool:
    """Would the caller accept this reply? A plain reply must hold text; a structured one must pass
    its caller's parser (any JSON, for a schema this project does not know)."""
    if schema is None:
        return bool(text.strip())
    validate = _VALIDATORS.get(_canonical(schema), json.loads)
    try:
        validate(text)
    except ValueError:  # OutputParseError, GraphParseError and JSONDecodeError all are
        return False
    return True


class CachedChatClient:
    """Wraps a `ChatClient`. `wire`: the client's fixed request parameters (provider, context);
    `session`: (session id, input revision) when the calls are for one session's summary."""

    def __init__(
        self,
        inner: ChatClient,
        store: ReplyStore,
        wire: dict,
        reuse: bool = True,
        session: tuple[str, str] | None = None,
    ):
        self.inner = inner
        self.store = store
        self.wire = wire
        self.reuse = reuse
        self.session = session
        self.model = inner.model

    @property
    def streaming(self) -> bool:
        return self.inner.streaming

    def chat(
        self,
        prompt: str,
        *,
        schema: dict | None,
        max_output_tokens: int,
        timeout_s: float,
        stall_s: float | None = None,
    ) -> ChatReply:
        """A cached reply is replayed with no model time and no first token (`first_token_s` None)."""
        limits = {"max_output_tokens": max_output_tokens, "timeout_s": timeout_s, "stall_s": stall_s}
        if not self.reuse and self.session is None:
            with self.store.released():
                return self.inner.chat(prompt, schema=schema, **limits)
        key = request_key(self.model, {**self.wire, "max_output_tokens": max_output_tokens}, prompt, schema)
        # Reuse off: only this session's own staged reply, from a run that died before finishing.
        cached = self.store.cached_reply(key, None if self.reuse else self.session)
        if cached is not None:
            return cached
        with self.store.released():
            reply = self.inner.chat(prompt, schema=schema, **limits)
        # A reply cut at the output cap is refused by the summary, and salvaged by the graph only in part.
        if reply.finish_reason != "length" and usable_reply(reply.text, schema):
            self.store.save_reply(key, self.model, reply, self.session)
        return reply

    def count_tokens(self, text: str) -> int | None:
        """The inner client's tokenizer count: never cached, it is a quick call that routes one session."""
        with self.store.released():
            return self.inner.count_tokens(text)
