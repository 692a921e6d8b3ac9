"""A local embeddings server for tests, over real HTTP with the real wire protocols: Ollama's
`POST /api/embed` (`{"model", "input": [...]}` → `{"model", "embeddings": [[...]]}`) and the
OpenAI-compatible `POST /v1/embeddings` (→ `{"object": "list", "data": [{"object": "embedding",
"index", "embedding"}], "model", "usage"}`).

Its vectors are a hashed bag of words over a small thesaurus (words of one concept share a
dimension), so a paraphrase with no word in common lands near its original as a real embedding
model's would; `fault` scripts what a broken server does (an error status, a short batch, a hang).
It records every request so tests can assert what reached it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from dataclasses import dataclass, field

from tests.local_http import LocalServer, QuietHandler

# Words of one concept, mapped to its first word.
THESAURUS = {
    word: group[0]
    for group in (
        ("reconnect", "reconnection", "retry", "retries", "backoff", "redial"),
        ("websocket", "socket", "ws", "realtime"),
        ("drop", "remove", "removed", "abandon", "replace", "rip"),
        ("orm", "sqlalchemy", "mapper", "activerecord"),
        ("fix", "fixed", "repair", "repaired", "resolve", "resolved", "bug"),
        ("slow", "latency", "performance", "speed", "faster"),
        ("login", "auth", "authentication", "signin", "credentials"),
    )
    for word in group
}
WORD = re.compile(r"[a-z0-9]+")


def vector(text: str, dim: int) -> list[float]:
    values = [0.0] * dim
    for word in WORD.findall(text.lower()):
        concept = THESAURUS.get(word, word)
        values[int(hashlib.blake2b(concept.encode(), digest_size=4).hexdigest(), 16) % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


@dataclass
class EmbeddingServer(LocalServer):
    """`with EmbeddingServer() as server: server.url`."""

    dim: int = 64
    model: str = "test-embed"
    fault: str | None = None  # None | "error" | "short" | "hang"
    requests: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        owner = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                owner.requests.append({"path": self.path, **body})
                texts = body.get("input")
                texts = [texts] if isinstance(texts, str) else list(texts or [])
                if self.path not in ("/api/embed", "/v1/embeddings"):
                    return self.send_json(404, {"error": "not found"})
                if owner.fault == "error":
                    return self.send_json(500, {"error": "model not loaded"})
                if owner.fault == "hang":
                    time.sleep(5)
                vectors = [vector(t, owner.dim) for t in texts]
                if owner.fault == "short":
                    vectors = vectors[:-1]
                if self.path == "/api/embed":
                    return self.send_json(200, {"model": body.get("model"), "embeddings": vectors})
                data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
                tokens = sum(len(WORD.findall(t)) for t in texts)
                usage = {"prompt_tokens": tokens, "total_tokens": tokens}
                self.send_json(200, {"object": "list", "data": data, "model": body.get("model"), "usage": usage})

        LocalServer.__init__(self, Handler)
