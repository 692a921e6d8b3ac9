"""The hybrid's fusion rule chosen on the tune split: each candidate rule re-ranks the same keyword and
vector lists (read once from what `bench/recall.py` left in `--work`), scored by hit@1 / hit@5 / MRR@10
by kind, on the corpus's file paths, and by how many `query_summaries` results an agent reads.

Run (over what `bench/recall.py --sessions 1000 --work bench/out/recall` left there, or made anew):
  PYTHONPATH=. .venv/bin/python bench/fusion_tune.py --work bench/out/recall [--tokens] [--heldout --only RULE]

The keyword lists are the index's (`sessions`, and `summaries` as `query_summaries` asks, 50 each with
their BM25 scores); the vector lists `search_vectors.nearest` (200 documents, a session by its best).
The held-out split is printed only with `--heldout`, for the rule chosen, once.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import recall  # noqa: E402
from bench.recall import KINDS, labelled, scores  # noqa: E402
from digest import embeddings  # noqa: E402
from digest.embeddings import EMBEDDED_EMBED_MODEL, fuse_rankings  # noqa: E402


def lists(db: str, work: Path, questions: list[dict]) -> dict:
    """Per query: keyword (session, BM25) for sessions and summaries, nearest (session, similarity)."""
    cache = work / "fusion-lists.json"
    if cache.exists():
        return json.loads(cache.read_text())
    from resources.hybrid_search import CANDIDATES, NEAREST_DOCUMENTS
    from resources.model_clients.embedded_embeddings import EmbeddedEmbedder
    from resources.store import DigestStore
    from resources.store.search_reads import SearchIndex

    index, store, embedder, out = SearchIndex(db), DigestStore(db), EmbeddedEmbedder(), {}
    for q in questions:
        query = q["query"]
        vector = embedder.embed_query(query)
        near = store.search_vectors.nearest(embedder.model, vector, NEAREST_DOCUMENTS)
        best: dict[str, float] = {}
        for hit in near:
            best.setdefault(hit.session_id, hit.similarity)
        out[query] = {
            "vector": vector,
            "sessions": [(h.session_id, h.score) for h in index.sessions(query, limit=CANDIDATES)],
            "summaries": [(h.session_id, h.score) for h in index.summaries(query, limit=CANDIDATES)],
            "nearest": list(best.items()),
        }
    cache.write_text(json.dumps(out))
    return out


def ranked(found: dict, mode: str, alone: bool, limit: int = 10) -> list[str]:
    if alone:
        return [s for s, _ in found[mode][:limit]]
    return [s for s, _ in fuse_rankings(found[mode], found["nearest"], limit)]


class KeptVectors:
    """The embedder's query vectors as `lists` kept them: the MCP answers without the model."""

    def __init__(self, found: dict, model: str):
        self.found, self.model = found, model

    def embed_query(self, text: str) -> list[float]:
        return self.found[text]["vector"]


def summaries_read(tools, questions: list[dict], found: dict) -> dict:
    """`query_summaries`' MCP answer: tokens until the answer's session (p50, p90), what a miss costs,
    hit@5; and the p90 apart where keyword's summaries search found some session, and where none."""
    from bench.recall import quantile
    from bench.recall_tokens import until_answer

    rows = [
        until_answer(json.loads(tools.query_summaries(q["query"], 10)), set(q["answers"]), False) for q in questions
    ]
    until, misses = [t for _, t in rows], [t for r, t in rows if r is None]
    some = [t for q, (_, t) in zip(questions, rows, strict=True) if found[q["query"]]["summaries"]]
    none = [t for q, (_, t) in zip(questions, rows, strict=True) if not found[q["query"]]["summaries"]]
    return {
        "p50": quantile(until, 0.5), "p90": quantile(until, 0.9), "miss": sum(misses) / max(1, len(misses)),
        "hit@5": sum(r is not None and r <= 5 for r, _ in rows) / len(rows),
        "some": (quantile(some, 0.9), len(some)), "none": (quantile(none, 0.9), len(none)),
    }  # fmt: skip


def evaluate(found: dict, questions: list[dict], files: list[dict], tools, alone: bool) -> dict:
    ranks = {q["query"]: ranked(found[q["query"]], "sessions", alone) for q in questions + files}
    out = scores(ranks, questions, lambda q: q["kind"])
    out["files"] = scores(ranks, files, lambda q: "files")["all"]
    if tools is not None:
        out["summaries"] = summaries_read(tools, questions, found)
    return out


def line(name: str, m: dict) -> str:
    cells = [f"{m[k]['hit@1']:.2f}/{m[k]['hit@5']:.2f}" if k in m else "-" for k in (*KINDS, "all", "files")]
    cells[-2] += f" ({m['all']['mrr@10']:.3f})"
    s = m.get("summaries")
    tokens = "-"
    if s:
        tokens = f"{s['p50']}/{s['p90']} ({s['miss']:.0f}; {s['hit@5']:.2f}) | {s['some'][0]} ({s['some'][1]})"
        tokens += f" | {s['none'][0]} ({s['none'][1]})"
    return f"| {name} | " + " | ".join(cells) + f" | {tokens} |"


# Candidate rules: (name, the constants of `digest.embeddings` they set). Before: equal-weight
# reciprocal rank at k 60, nothing kept first, every vector-only session admitted.
BEFORE = {**recall.BEFORE, "KEEP_FIRST_MAX": 3}
CHOSEN = {"RRF_K": 2, "KEEP_FIRST_MARGIN": 1.5, "KEEP_FIRST_MAX": 3, "VECTOR_ONLY_MAX": 1}


def candidates() -> list[tuple[str, dict]]:
    out = [("equal RRF, k 60 (before)", BEFORE)]
    for k in (20, 10, 5, 2):
        out.append((f"k {k}", {**BEFORE, "RRF_K": k}))
    for cap in (2, 3):
        out.append((f"vector-only at most {cap}", {**BEFORE, "VECTOR_ONLY_MAX": cap}))
    for margin in (1.1, 1.25, 1.5, 2.0):
        out.append((f"keep first at margin {margin}", {**BEFORE, "KEEP_FIRST_MARGIN": margin}))
    for k in (60, 40, 20, 10, 5, 2):
        for margin in (1.05, 1.1, 1.25, 1.5, 1.75, 2.0):
            rule = {**BEFORE, "RRF_K": k, "KEEP_FIRST_MARGIN": margin, "VECTOR_ONLY_MAX": 3}
            out.append((f"k {k}, margin {margin}, vector-only at most 3", rule))
    for lead in (1, 2, 3, 5):
        rule = {**CHOSEN, "KEEP_FIRST_MAX": lead, "VECTOR_ONLY_MAX": 3}
        out.append((f"k 2, margin 1.5 among the first {lead}, vector-only at most 3", rule))
    for cap in (0, 1, 2, 3, 5):
        out.append((f"k 2, margin 1.5, vector-only at most {cap}", {**CHOSEN, "VECTOR_ONLY_MAX": cap}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--heldout", action="store_true", help="also the held-out split, for the rules in --only")
    parser.add_argument("--only", nargs="*", help="the rules (by name) to print")
    parser.add_argument("--tokens", action="store_true", help="also `query_summaries`' tokens (slow: a scan each)")
    args = parser.parse_args()
    home = args.work.resolve() / f"recall-{args.sessions}"
    if not (home / "fusion-lists.json").exists():  # the store and its vectors, as recall.py leaves them
        recall.prepare(args.sessions, args.seed, args.work.resolve(), reuse=True)
        recall.embed(str(home / "digest.duckdb"), args.work.resolve(), args.sessions)
    questions = labelled(args.seed, args.sessions)
    files = json.loads((home / "ready.json").read_text())["file_queries"]
    found = lists(str(home / "digest.duckdb"), home, questions + files)
    from app.mcp_server import Tools

    kept = KeptVectors(found, EMBEDDED_EMBED_MODEL)
    tools = {False: Tools(home / "digest.duckdb", kept), True: Tools(home / "digest.duckdb")} if args.tokens else None
    splits = ("tune", "heldout") if args.heldout else ("tune",)
    header = (
        "| rule | "
        + " | ".join((*KINDS, "all (MRR)", "corpus files"))
        + " | `query_summaries` tokens p50/p90 (a miss; hit@5) | p90 where keyword found some (n) | where none (n) |"
    )
    rules = [c for c in candidates() if not args.only or c[0] in args.only]
    for split in splits:
        chosen = [q for q in questions if q["split"] == split]
        print(f"\n## {split} ({len(chosen)} questions): hit@1/hit@5\n\n{header}\n|" + "---|" * 10)
        for name, rule in [("keyword alone", None), *rules]:
            for key, value in (rule or {}).items():
                setattr(embeddings, key, value)
            print(line(name, evaluate(found, chosen, files, (tools or {}).get(rule is None), rule is None)))


if __name__ == "__main__":
    main()
