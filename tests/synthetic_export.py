"""A seeded Neo.mjs export of any size, for scale tests and benchmarks.

    write_export(folder, sessions=10_000, turns_per_session=30, summarized_share=1/3)

Writes `memory-backup-*.jsonl` (turn rows with a short embedding), `graph-backup-*.jsonl` (some
turns' mini summaries) and `summaries-backup-*.jsonl` (a current summary for a share of the
sessions: `dreamInputRevision` and `memoryCount` as the original writes them). The turns carry
what real exports carry and what the original's revision is sensitive to: turns without `userId`
or `agentIdentity`, timestamp ties, numeric-string timestamps, dropped documents rebuilt from the
split fields. Every session was last active days ago, so the churn gate lets all of them through.
Standard library plus the project's own revision function; the same seed writes the same bytes.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from digest.turns import Turn, canonical_order, compose_document, input_revision

STAMP = "2026-11-20T09-00-00.000Z"
NOW_MS = 1_763_600_000_000  # 2025-11-20; every session ends at least two days before it
EMBEDDING = [0.125, -0.5, 0.25, 1.0, 0.0, -0.25, 0.5, 0.75]

_SUBJECTS = [
    "the grid",
    "the worker bridge",
    "the VDOM diff",
    "the store",
    "the router",
    "the form field",
    "the backup rotation",
    "the config loader",
    "the test runner",
    "the build script",
]
_ACTIONS = ["fix a regression in", "refactor", "add tests for", "document", "profile", "review"]
_FILES = [
    "src/grid/Body.mjs",
    "src/worker/Manager.mjs",
    "src/vdom/Helper.mjs",
    "src/data/Store.mjs",
    "src/form/field/Text.mjs",
    "buildScripts/webpack.mjs",
    "ai/services/Backup.py",
]
_AGENTS = [
    ("claude-code", "@neo-opus-ada", "claude-opus-4"),
    ("codex", "@neo-gpt", "gpt-5"),
    ("gemini-cli", None, "gemini-3.5-flash"),
]


@dataclass(frozen=True)
class ExportFacts:
    """What was written, so a test can check the store against it."""

    folder: Path
    sessions: int
    turns: int
    summarized: list[str]  # session ids whose exported summary is current
    memory_bytes: int


def _sentence(rng: random.Random, length: int) -> str:
    words = []
    while sum(len(w) + 1 for w in words) < length:
        words.append(
            rng.choice(
                [
                    f"{rng.choice(_ACTIONS)} {rng.choice(_SUBJECTS)}",
                    rng.choice(_FILES),
                    "then ran the suite",
                    "and checked the diff",
                    f"step {rng.randrange(99)}",
                ]
            )
        )
    return " ".join(words)[:length]


def _session(rng: random.Random, index: int, turns_per_session: int, turn_bytes: int) -> tuple[list[dict], list[Turn]]:
    session_id = f"{rng.getrandbits(32):08x}-{index:05d}-{rng.getrandbits(48):012x}"
    agent, identity, model = rng.choice(_AGENTS)
    user_id = None if rng.random() < 0.3 else f"user{rng.randrange(5)}"
    start = NOW_MS - 2 * 86_400_000 - rng.randrange(60 * 86_400_000)
    rows, turns = [], []
    ts = start
    for _ in range(turns_per_session):
        if rng.random() > 0.1:  # one turn in ten shares its predecessor's timestamp (a tie)
            ts += rng.randrange(1_000, 300_000)
        prompt = _sentence(rng, turn_bytes // 5)
        thought = _sentence(rng, turn_bytes // 5)
        response = _sentence(rng, turn_bytes - 2 * (turn_bytes // 5))
        document = compose_document(prompt, thought, response)
        turn_id = f"{session_id}-{rng.getrandbits(64):016x}"
        metadata = {
            "prompt": prompt,
            "thought": thought,
            "response": response,
            "sessionId": session_id,
            "timestamp": str(ts) if rng.random() < 0.05 else ts,
            "type": "agent-interaction",
            "agent": agent,
            "model": model,
            "amountToolCalls": rng.randrange(6),
        }
        if identity and rng.random() > 0.1:
            metadata["agentIdentity"] = identity
        if user_id:
            metadata["userId"] = user_id
        row = {"id": turn_id, "embedding": EMBEDDING, "metadata": metadata}
        if rng.random() > 0.1:  # the field-document de-dup dropped one document in ten
            row["document"] = document
        rows.append(row)
        turns.append(
            Turn(
                id=turn_id,
                session_id=session_id,
                document=document,
                ts_ms=ts,
                agent=agent,
                agent_identity=metadata.get("agentIdentity"),
                model=model,
                user_id=user_id,
            )
        )
    return rows, turns


def _summary_row(rng: random.Random, turns: list[Turn]) -> dict:
    ordered = canonical_order(turns)
    metadata = {
        "sessionId": turns[0].session_id,
        "timestamp": max(t.ts_ms for t in turns),
        "memoryCount": len(turns),
        "dreamInputRevision": input_revision(ordered),
        "title": f"Work on {rng.choice(_SUBJECTS)}",
        "category": rng.choice(["bugfix", "feature", "refactoring", "analysis"]),
        "quality": rng.randrange(101),
        "productivity": rng.randrange(101),
        "impact": rng.randrange(101),
        "complexity": rng.randrange(101),
        "technologies": "javascript,neo.mjs",
        "participatingAgents": turns[0].agent,
        "models": turns[0].model,
        "sourceTier": "raw",
        "degraded": False,
        "rawCanonical": True,
    }
    return {
        "id": f"summary_{turns[0].session_id}",
        "embedding": EMBEDDING,
        "metadata": metadata,
        "document": f"The agent worked on {rng.choice(_SUBJECTS)} over {len(turns)} turns.",
    }


def _vector_pool(dimensions: int, seed: int) -> list[str]:
    import numpy as np

    numbers = np.random.default_rng(seed)
    return [
        json.dumps(numbers.uniform(-1, 1, dimensions).astype(np.float32).tolist(), separators=(",", ":"))
        for _ in range(256)
    ]


def _with_vector(row: dict, vectors: list[str] | None, rng: random.Random) -> str:
    """The row's JSON line, its embedding one of `vectors` when there are some."""
    if vectors is None:
        return json.dumps(row, separators=(",", ":")) + "\n"
    line = json.dumps({**row, "embedding": None}, separators=(",", ":"))
    return line.replace('"embedding":null', '"embedding":' + rng.choice(vectors), 1) + "\n"


def write_export(
    folder: Path,
    sessions: int,
    turns_per_session: int = 3,
    summarized_share: float = 1 / 3,
    mini_summary_share: float = 0.1,
    turn_bytes: int = 400,
    seed: int = 11,
    dimensions: int | None = None,
) -> ExportFacts:
    """`dimensions`: every turn and summary carries a vector of that many float32 values, as Neo's
    export writes them (drawn from a pool of 256 distinct vectors); None: the short EMBEDDING."""
    rng = random.Random(seed)
    vectors = _vector_pool(dimensions, seed) if dimensions else None
    folder.mkdir(parents=True, exist_ok=True)
    memory = folder / f"memory-backup-{STAMP}.jsonl"
    summarized: list[str] = []
    total_turns = 0
    with (
        memory.open("w") as mem,
        (folder / f"graph-backup-{STAMP}.jsonl").open("w") as graph,
        (folder / f"summaries-backup-{STAMP}.jsonl").open("w") as summaries,
    ):
        for index in range(sessions):
            rows, turns = _session(rng, index, turns_per_session, turn_bytes)
            total_turns += len(rows)
            for row in rows:
                mem.write(_with_vector(row, vectors, rng))
                if rng.random() < mini_summary_share:
                    props = {"sessionId": row["metadata"]["sessionId"], "miniSummary": _sentence(rng, 120)}
                    node = {"type": "node", "data": {"id": row["id"], "label": "AGENT_MEMORY", "properties": props}}
                    graph.write(json.dumps(node, separators=(",", ":")) + "\n")
            if rng.random() < summarized_share:
                summarized.append(turns[0].session_id)
                summaries.write(_with_vector(_summary_row(rng, turns), vectors, rng))
    return ExportFacts(folder, sessions, total_turns, summarized, memory.stat().st_size)
