"""The largest prompt any model call sent in the graph scenario of issue 11.4.

Run: PYTHONPATH=. .venv/bin/python bench/graph_cap.py [--cap 3000] [--kilobytes 90]
PYTHONPATH picks the code measured (and its tests/model_server.py): point it at a checkout of an
older commit for the "before" figure.

An Ollama host of context 131072 with `DIGEST_RAW_CAP_TOKENS=--cap`, and one session of about
`--kilobytes` of turn documents (one turn of them over the cap), digested into the graph against
tests/model_server.py speaking Ollama's `/api/chat` (it echoes an extraction; no real model). The
figures are the prompts the server received, in bytes and estimated tokens (bytes / 3), and what
the largest would cost in prompt evaluation on a CPU 7B model at ~50 tokens/s.
"""

from __future__ import annotations

import argparse
import math
import re
import tempfile
from pathlib import Path

from digest.graph import digest_session
from digest.settings import load_settings
from digest.turns import Turn, compose_document, input_revision
from resources.model_clients import OllamaChatClient
from resources.store import DigestStore, RunLedger
from tests.model_server import Behaviour, ModelServer, Received

CPU_PROMPT_TOKENS_PER_S = 50


def session(kilobytes: int) -> list[Turn]:
    """Turns of ~1.7 KB, the 14th of ~14 KB (over a 3000-token cap), until the documents hold `kilobytes`."""
    turns, total, i = [], 0, 0
    while total < kilobytes * 1000:
        lines = 200 if i == 13 else 24
        response = "\n".join(
            f"Step {i}.{n}: Quillmotor touched src/grid/Row.mjs and Kestrelbus again." for n in range(lines)
        )
        document = compose_document(f"Prompt {i}: fix the grid", f"Thinking about step {i}", response)
        turns.append(
            Turn(id=f"bench-t{i:03d}", session_id="bench", document=document, ts_ms=i * 60_000, agent="claude-code")
        )
        total += len(document.encode("utf-8"))
        i += 1
    return turns


def echo(received: Received) -> Behaviour:
    excerpt = received.prompt.split("--- Session excerpt ---\n", 1)[-1]
    names = list(dict.fromkeys(re.findall(r"\b[A-Z][a-z]{5,}\b", excerpt)))[:6]
    return Behaviour.reply(
        {"entities": [{"name": n, "type": "CONCEPT", "description": n} for n in names], "relations": []}
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cap", default="3000", help="DIGEST_RAW_CAP_TOKENS (a token count or off)")
    parser.add_argument("--kilobytes", type=int, default=90)
    args = parser.parse_args()
    settings = load_settings({"DIGEST_MODEL_PROVIDER": "ollama", "DIGEST_RAW_CAP_TOKENS": args.cap})
    # The bounds resolve the bytes per token (pinned, else the default: no ledger here).
    limits = settings.limits()
    turns = session(args.kilobytes)
    summary = {"title": "bench", "category": "other", "source_tier": "miniSummary", "degraded": True,
               "raw_canonical": True, "input_revision": input_revision(turns), "summary": ""}  # fmt: skip
    with ModelServer(echo) as server, tempfile.TemporaryDirectory() as tmp:
        store = DigestStore(Path(tmp) / "bench.duckdb")
        store.migrate()
        client = OllamaChatClient(server.url, settings.model_name, num_ctx=settings.context_limit_tokens)
        result = digest_session(turns, summary, client, limits, settings.graph, RunLedger(store, "bench"))
        sizes = [len(r.prompt.encode("utf-8")) for r in server.chat_requests()]
    largest = max(sizes)
    tokens = math.ceil(largest / limits.bytes_per_token)
    print(f"session: {len(turns)} turns, {sum(len(t.document.encode()) for t in turns):,} bytes of documents; "
          f"context {settings.context_limit_tokens}, DIGEST_RAW_CAP_TOKENS={args.cap}")  # fmt: skip
    print(f"graph calls: {len(sizes)} (digested: {result.graph is not None})")
    print(f"the largest prompt any model call sent in the graph scenario: {largest:,} bytes, "
          f"~{tokens:,} estimated tokens, ~{tokens / CPU_PROMPT_TOKENS_PER_S / 60:.1f} min of CPU prompt evaluation")  # fmt: skip


if __name__ == "__main__":
    main()
