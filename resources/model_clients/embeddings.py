"""Embedding clients over httpx: Ollama's `POST /api/embed` and the OpenAI-compatible
`POST /v1/embeddings` (llama.cpp's server, vLLM, LM Studio, OpenAI itself).

One call embeds a batch of texts and returns one vector per text, in order. Every call is bounded
by a wall-clock timeout and a byte cap on the body read, and the reply is validated (one vector per
input, every vector of one dimension, finite numbers): a server that answers otherwise is a
`ProviderError`, never a silently short or misordered batch. A connection refused is
`HostUnreachable`, so a search falls back to keyword results with one notice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import httpx
from pydantic import BaseModel, ValidationError

from digest.model_api import HostUnreachable, ModelTimeout, ProviderError
from resources.model_clients.embedded_embeddings import EmbeddedEmbedder, embedded_client
from resources.model_clients.streams import tls_context

# 64 KB of vector JSON a text is some 8,000 dimensions: far past any embedding model's.
REPLY_BYTES_PER_TEXT = 64 << 10


class _OllamaEmbedReply(BaseModel):
    embeddings: list[list[float]]


class _OpenAIItem(BaseModel):
    index: int
    embedding: list[float]


class _OpenAIEmbedReply(BaseModel):
    data: list[_OpenAIItem]


@dataclass(frozen=True)
class EmbeddingClient:
    """A model host that serves embeddings: `embed(texts)` is one vector a text."""

    provider: str  # ollama | openai
    base_url: str
    model: str
    timeout_s: float = 60.0

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        if self.provider == "ollama":
            path, body = "/api/embed", {"model": self.model, "input": texts, "truncate": True}
        else:
            path, body = "/v1/embeddings", {"model": self.model, "input": texts}
        url = self.base_url.rstrip("/") + path
        raw = self._post(url, body, cap=REPLY_BYTES_PER_TEXT * len(texts) + 4096)
        try:
            if self.provider == "ollama":
                vectors = _OllamaEmbedReply.model_validate_json(raw).embeddings
            else:
                items = sorted(_OpenAIEmbedReply.model_validate_json(raw).data, key=lambda item: item.index)
                if [item.index for item in items] != list(range(len(items))):
                    raise _error(ProviderError, f"{url}: the reply's indexes are not 0..{len(items) - 1}", 500)
                vectors = [item.embedding for item in items]
        except ValidationError as exc:
            raise _error(ProviderError, f"{url}: not an embeddings reply: {exc.errors()[0]['msg']}", 500) from None
        _check(vectors, len(texts), url)
        return vectors

    def embed_query(self, text: str) -> list[float]:
        """A query's vector: these hosts embed a query as they embed a document."""
        return self.embed([text])[0]

    def _post(self, url: str, body: dict, cap: int) -> bytes:
        try:
            with httpx.Client(timeout=httpx.Timeout(self.timeout_s), verify=tls_context()) as client:
                with client.stream("POST", url, json=body) as response:
                    chunks, size = [], 0
                    for chunk in response.iter_bytes():
                        size += len(chunk)
                        if size > cap:
                            raise _error(ProviderError, f"{url}: reply over {cap} bytes", 500)
                        chunks.append(chunk)
                    raw = b"".join(chunks)
                    if response.status_code >= 400:
                        raise _error(
                            ProviderError,
                            f"{url}: HTTP {response.status_code}: {raw[:300].decode('utf-8', 'replace')}",
                            response.status_code,
                        )
                    return raw
        except httpx.TimeoutException:
            raise ModelTimeout(f"{url}: no embeddings within {self.timeout_s:g}s") from None
        except (httpx.ConnectError, httpx.RemoteProtocolError) as exc:
            raise _error(HostUnreachable, f"{url}: {exc}", None) from None


def embedding_client(
    provider: str, url: str | None, model: str | None, threads: int = 1
) -> EmbeddingClient | EmbeddedEmbedder | None:
    """The configured embeddings host's client (`DIGEST_EMBED_*`), None when it is off; `embedded`
    runs its one model in this process (loaded at the first text) on at most `threads` threads."""
    if provider == "embedded":
        return embedded_client(model, threads)
    if provider == "off" or not url or not model:
        return None
    return EmbeddingClient(provider, url, model)


def _error(kind: type[ProviderError], message: str, status: int | None) -> ProviderError:
    error = kind(message)
    error.status = status
    return error


def _check(vectors: list[list[float]], expected: int, url: str) -> None:
    if len(vectors) != expected:
        raise _error(ProviderError, f"{url}: {len(vectors)} vectors for {expected} texts", 500)
    dims = {len(v) for v in vectors}
    if len(dims) != 1 or 0 in dims:
        raise _error(ProviderError, f"{url}: vectors of dimensions {sorted(dims)} in one reply", 500)
    if not all(math.isfinite(x) for v in vectors for x in v):
        raise _error(ProviderError, f"{url}: a vector holds a number that is not finite", 500)
