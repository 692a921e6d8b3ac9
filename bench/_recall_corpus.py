"""The corpus of bench/recall.py (its part 1.): bench/search.py's realistic corpus written once and
copied for each run (`--copies-of`: each unplanted session copied under new ids), the stories of
`bench/data/recall_questions.json` planted as sessions of their own, the index built; the labelled
questions with their answers resolved; the vectors of every session's ok summary and card.

Not a benchmark itself (tests/test_bench_smoke.py runs every bench/*.py but the ones named `_*`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "bench" / "data" / "recall_questions.json"
EMBED_CHARS = 1000  # of a document embedded: about the model's 256 tokens
START_MS = 1_788_000_000_000


def story_rows(story: dict, number: int, seed: int) -> list[dict]:
    """A planted story's session: an English story inside a realistic session's turns, one in another
    language as a session of its own."""
    from digest.turns import compose_document
    from tests.realistic_corpus import draw_plan, session_turns

    sid = f"recall-{story['key']}"
    pairs = [{"prompt": p, "response": r} for p, r in story["turns"]]
    agent, model = "claude-code", "claude-sonnet-4"
    if story["language"] == "en":
        plan_id = 3_000_000 + number
        turns = session_turns(draw_plan(seed, plan_id), seed, plan_id)
        agent, model = turns[0]["agent"], turns[0]["model"]
        middle = len(turns) // 2 + 1
        pairs = [{"prompt": t["prompt"], "response": t["response"]} for t in turns[:middle]] + pairs
        pairs += [{"prompt": t["prompt"], "response": t["response"]} for t in turns[middle:]]
    start = START_MS + number * 86_400_000
    return [
        {"id": f"{sid}-{n:03d}", "session_id": sid, "type": "agent-interaction", "prompt": p["prompt"],
         "response": p["response"], "document": compose_document(p["prompt"], "", p["response"]),
         "document_rebuilt": False, "agent": agent, "model": model, "source_file": f"{sid}.jsonl",
         "source_line": n + 1, "ts_ms": start + n * 60_000}
        for n, p in enumerate(pairs)
    ]  # fmt: skip


def plant(store, stories: list[dict], seed: int) -> int:
    """Write the stories' sessions, their summaries and file facts; returns their documents' bytes."""
    rows, summaries, facts = [], [], []
    for number, story in enumerate(stories):
        written = story_rows(story, number, seed)
        rows += written
        sid = written[0]["session_id"]
        story_turn = written[-len(story["turns"])] if story["language"] == "en" else written[0]
        facts += [(story_turn["id"], sid, "file-edit", path, "edit") for path in story["files"]]
        if story["summary"]:
            title, summary, category = story["summary"]
            summaries.append(
                {"session_id": sid, "memory_count": len(written), "title": title, "summary": summary,
                 "category": category, "source_tier": "raw", "source_file": "s.jsonl", "technologies": [],
                 "degraded": False}
            )  # fmt: skip
    store.ingest.write_turns(rows)
    store.ingest.write_imported_summaries(summaries)
    with store.file.connect() as con:
        con.executemany("INSERT INTO turn_facts VALUES (?, ?, ?, ?, ?)", facts)
        con.execute("UPDATE session_summaries SET verdict = 'ok' WHERE session_id LIKE 'recall-%'")
    return sum(len(r["document"]) for r in rows)


def labelled(seed: int, sessions: int) -> list[dict]:
    """The labelled questions, each answer resolved to its session id."""
    from bench._search_corpus import story_sessions

    planted = story_sessions(sessions)
    out = []
    for q in json.loads(QUESTIONS.read_text())["questions"]:
        answers = []
        for a in q["answers"]:
            origin, _, key = a.partition(":")
            answers.append(f"rt-{seed}-{planted[int(key)]:05d}" if origin == "search.py" else f"recall-{key}")
        out.append({**q, "answers": answers})
    return out


def corpus_file_queries(queries: list[dict]) -> list[dict]:
    """`search.py`'s file queries drawn from the corpus's own paths (not its stories'), those answered."""
    from bench._search_corpus import STORIES

    planted = {q for story in STORIES for _, q in story.queries}
    return [q for q in queries if q["kind"] == "file" and q["answers"] and q["query"] not in planted]


# Tables copied with a session's copy (`--copies-of`), and the columns renamed in them.
COPIED = {
    "turns": ("session_id", "id"), "sessions": ("session_id", "partition_key"), "session_cards": ("session_id",),
    "session_summaries": ("session_id",), "imported_summaries": ("session_id",),
    "mini_summaries": ("session_id", "turn_id"), "turn_facts": ("session_id", "turn_id"),
    "fidelity_terms": ("session_id",), "graph_nodes": ("session_id",), "graph_edges": ("session_id",),
}  # fmt: skip


def copy_sessions(store, times: int, kept: list[str]) -> None:
    """Every session but `kept` (the planted ones: their copies would answer too) copied `times - 1`
    more times, `~k` after its ids: a larger corpus without writing one (10,000 sessions take an
    hour to generate on a loaded 2-core machine)."""
    with store.file.transaction() as con:
        for copy in range(1, times):
            for table, columns in COPIED.items():
                renamed = ", ".join(f"{c} || '~{copy}' AS {c}" for c in columns)
                con.execute(
                    f"INSERT INTO {table} SELECT * REPLACE ({renamed}) FROM {table} "
                    "WHERE session_id NOT IN (SELECT unnest(?::VARCHAR[])) AND session_id NOT LIKE '%~%'",
                    [kept],
                )


def counted_once(index_module):
    """The index's `term_counts` memoized by text while copies are indexed: each distinct text's
    terms are counted once (the copies' documents are the same texts)."""
    counts, seen = index_module.term_counts, {}

    def memo(text: str):
        found = seen.get(text)
        if found is None:
            found = seen[text] = counts(text)
        return found

    return memo


def prepare(sessions: int, seed: int, work: Path, reuse: bool, copies_of: int | None = None) -> dict:
    """The store of this size with the stories planted and its index built (kept in `work`); with
    `copies_of`, made of that size's corpus copied."""
    from bench._search_corpus import story_sessions
    from resources.store import DigestStore, search_index

    made = copies_of if copies_of and copies_of < sessions else sessions
    base, facts = work / f"base-{made}.duckdb", work / f"base-{made}.json"
    if not facts.exists():
        for path in (base, Path(f"{base}.wal")):
            path.unlink(missing_ok=True)
        subprocess.run(
            [sys.executable, str(ROOT / "bench" / "search.py"), "--build", str(base), str(made), str(seed), str(facts)],
            check=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
    home = work / f"recall-{sessions}"
    db, ready = home / "digest.duckdb", home / "ready.json"
    if reuse and ready.exists():
        return {**json.loads(ready.read_text()), "db": str(db)}
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    shutil.copyfile(base, db)
    store = DigestStore(db)
    store.migrate()
    times = sessions // made
    file_queries = corpus_file_queries(json.loads(facts.read_text())["queries"])
    if times > 1:
        copy_sessions(store, times, [f"rt-{seed}-{i:05d}" for i in story_sessions(made)])
        for q in file_queries:
            q["answers"] += [f"{a}~{k}" for a in q["answers"] for k in range(1, times)]
    plant(store, json.loads(QUESTIONS.read_text())["stories"], seed)
    counts = search_index.term_counts
    if times > 1:
        search_index.term_counts = counted_once(search_index)
    started = time.perf_counter()
    store.search.refresh()
    search_index.term_counts = counts
    with store.file.connect() as con:
        count, corpus = con.execute("SELECT count(DISTINCT session_id), sum(strlen(document)) FROM turns").fetchone()
    built = {
        "build_s": time.perf_counter() - started,
        "copies": times,
        "store_sessions": count,
        "documents": store.search.status()["documents"],
        "corpus_bytes": corpus,
        "file_queries": file_queries,
    }
    ready.write_text(json.dumps(built))
    return {**built, "db": str(db)}


def embed(db: str, work: Path, sessions: int) -> dict:
    """Vectors for every session's ok summary and card (kept in `work` for the next run)."""
    from bench.search import cover_every_session
    from resources.model_clients.embedded_embeddings import EmbeddedEmbedder
    from resources.store import DigestStore
    from resources.store.search_vectors import PendingDocument

    store = DigestStore(db)
    with store.file.connect() as con:
        rows = con.execute(
            f"""SELECT 'summary:' || session_id, session_id, 'summary', left(title || chr(10) || summary, {EMBED_CHARS})
                FROM session_summaries WHERE verdict = 'ok'
                UNION ALL SELECT 'card:' || session_id, session_id, 'card', left(text, {EMBED_CHARS}) FROM session_cards
                ORDER BY 1"""
        ).fetchall()
    embedder = EmbeddedEmbedder()
    cache = work / f"vectors-{sessions}.json"
    kept = json.loads(cache.read_text()) if cache.exists() else {}
    # A copied session's documents are its original's texts: their vectors too (any size's cache).
    by_text = {
        v["text"]: v["vector"] for other in work.glob("vectors-*.json") for v in json.loads(other.read_text()).values()
    }
    for row in rows:
        if kept.get(row[0], {}).get("text") != row[3] and row[3] in by_text:
            kept[row[0]] = {"text": row[3], "vector": by_text[row[3]]}
    todo = [r for r in rows if kept.get(r[0], {}).get("text") != r[3]]
    cpu, started = time.process_time(), time.perf_counter()
    for at in range(0, len(todo), 16):
        batch = todo[at : at + 16]
        for row, vector in zip(batch, embedder.embed([r[3] for r in batch])):
            kept[row[0]] = {"text": row[3], "vector": vector}
        cache.write_text(json.dumps(kept))
    made_s, made_cpu = time.perf_counter() - started, time.process_time() - cpu
    docs = [
        PendingDocument(k, s, None, kind, text, hashlib.md5(text.encode()).hexdigest()) for k, s, kind, text in rows
    ]
    with store.file.connect() as con:
        con.execute("DELETE FROM search_vectors")
    store.search_vectors.write(embedder.model, docs, [kept[d.doc_key]["vector"] for d in docs])
    cover_every_session(store, embedder.model)  # the search fuses only over vectors that cover it
    return {"documents": len(rows), "embedded_now": len(todo), "embed_s": made_s, "embed_cpu_s": made_cpu}
