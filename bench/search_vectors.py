"""Do the embedded SmolLM2's embeddings help search? (issue 34 item 3: ship them only if they do.)

The labelled corpus and queries of `bench/search.py` (its `STORIES` planted into the realistic
corpus, their lexical, paraphrase, file, error and decision queries), ranked two ways side by side:
keyword alone (`store.search.sessions`) and hybrid (`resources.hybrid_search.search_sessions`:
keyword fused with the nearest documents by reciprocal rank), the vectors made by SmolLM2-135M
in-process under llama.cpp (xllamacpp's server object, called in-process with mean pooling; the
embedded chat server is not started for embeddings).

SmolLM2 embeds some 100-200 tokens a second on a busy 2-core machine, so the vectors cover the
summary layer of the index: every summary and mini summary, each session's first turn and its
planted story turn, each cut to `--chars`. That is the layer paraphrase queries should reach.

Run: PYTHONPATH=. .venv/bin/python bench/search_vectors.py [--sessions 60] [--seed 28] [--chars 400]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class SmolEmbedder:
    """SmolLM2-135M's mean-pooled hidden states, speaking `EmbeddingClient`'s `model` and `embed`."""

    model = "smollm2-135m-mean"

    def __init__(self, chars: int):
        import xllamacpp

        from resources.embedded_server import gguf_path

        self.chars = chars
        params = xllamacpp.CommonParams()
        params.model.path = str(gguf_path())
        params.embedding = True
        params.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
        params.n_ctx = params.n_batch = params.n_ubatch = 1024
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = 2
        params.offline = True
        self.server = xllamacpp.Server(params)

    def embed(self, texts: list[str]) -> list[list[float]]:
        reply = self.server.handle_embeddings({"input": [t[: self.chars] or " " for t in texts]})
        if "error" in reply:
            raise RuntimeError(f"embeddings: {reply['error']}")
        return [row["embedding"] for row in sorted(reply["data"], key=lambda row: row["index"])]

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]


def summary_layer(store, model: str) -> list:
    """The pending documents of the summary layer: summaries, mini summaries, first and story turns."""
    keep = []
    for doc in store.search_vectors.pending(model, 10**6):
        if doc.kind in ("summary", "mini") or (doc.turn_id or "").endswith(("-story", "-t000", ":00001")):
            keep.append(doc)
    return keep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--chars", type=int, default=400)
    args = parser.parse_args()

    from bench import search
    from resources.hybrid_search import search_sessions
    from resources.store import DigestStore

    work = Path(tempfile.mkdtemp(prefix="search-vectors-"))
    db, answers = work / "store.duckdb", work / "answers.json"
    search.build_corpus(str(db), args.sessions, args.seed, str(answers))
    facts = json.loads(answers.read_text())
    store = DigestStore(db)
    store.migrate()
    store.search.refresh()

    embedder = SmolEmbedder(args.chars)
    documents = summary_layer(store, embedder.model)
    started = time.perf_counter()
    for start in range(0, len(documents), 16):
        batch = documents[start : start + 16]
        store.search_vectors.write(embedder.model, batch, embedder.embed([d.text for d in batch]))
    embed_s = time.perf_counter() - started
    search.cover_every_session(store, embedder.model)

    queries = facts["queries"]
    keyword = {q["query"]: [h.session_id for h in store.search.sessions(q["query"], limit=10)] for q in queries}
    hybrid, vector_only = {}, {}
    for q in queries:
        results = search_sessions(store, embedder, q["query"], limit=10)
        assert results.mode == "hybrid", results.notice
        hybrid[q["query"]] = [h.session_id for h in results.hits]
        (vector,) = embedder.embed([q["query"]])
        seen: list[str] = []
        for hit in store.search_vectors.nearest(embedder.model, vector, 200):
            if hit.session_id not in seen:
                seen.append(hit.session_id)
        vector_only[q["query"]] = seen[:10]

    arms = {
        "keyword": search.relevance(keyword, queries),
        "vectors alone": search.relevance(vector_only, queries),
        "hybrid": search.relevance(hybrid, queries),
    }
    print(
        f"SmolLM2 embeddings for search: {args.sessions} sessions, {len(queries)} labelled queries, "
        f"{len(documents)} documents embedded (summary layer, {args.chars} chars each) in {embed_s:.0f} s "
        f"({len(documents) / embed_s:.2f} documents/s)"
    )
    kinds = sorted({q["kind"] for q in queries}) + ["all"]
    print(f"{'kind':<12} {'n':>3}  " + "  ".join(f"{arm + ' hit@5':>20} {'MRR@10':>7}" for arm in arms))
    for kind in kinds:
        n = arms["keyword"][kind]["n"]
        cells = "  ".join(f"{arms[a][kind]['hit@5']:>20.2f} {arms[a][kind]['mrr@10']:>7.2f}" for a in arms)
        print(f"{kind:<12} {n:>3}  {cells}")
    kind = "paraphrase" if "paraphrase" in arms["keyword"] else "all"
    gain = arms["hybrid"][kind]["hit@5"] - arms["keyword"][kind]["hit@5"]
    print(f"{kind} hit@5, hybrid - keyword: {gain:+.2f}")


if __name__ == "__main__":
    main()
