"""Chat-model clients over httpx: Ollama's native API and the OpenAI-compatible one.

Both speak `digest.model_api.ChatClient`: one user message in, the reply text and the server's
own token counts out, a typed error for what failed (never read from the words of the reply).
Every call is streamed, so a call that is producing tokens can be told from a stuck one, and giving
up closes the connection, which is what makes a server stop generating; every call is bounded in
time and in bytes. The stream, its bounds and what each error means: docs/model-clients.md.
"""

from __future__ import annotations

from importlib import import_module

# The package's names, each imported when first used: a search that embeds its query in this process
# (`embedded_embeddings`) loads no httpx and no chat client.
_EXPORTS = {
    "MIN_REPLY_BYTES": "streams", "REPLY_BYTES_PER_TOKEN": "streams", "OllamaChatClient": "ollama",
    "OpenAIChatClient": "openai", "reply_byte_cap": "streams",
}  # fmt: skip
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
