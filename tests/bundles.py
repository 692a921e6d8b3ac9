"""Writers for small export bundles in the Neo.mjs shapes, for tests."""

from __future__ import annotations

import json
from pathlib import Path

from digest.turns import Turn


def memory_row(
    turn: Turn, prompt: str = "p", thought: str = "t", response: str = "r", with_document: bool = True
) -> dict:
    metadata = {
        "prompt": prompt,
        "thought": thought,
        "response": response,
        "sessionId": turn.session_id,
        "timestamp": turn.ts_ms,
        "type": "agent-interaction",
        "agent": turn.agent,
        "agentIdentity": turn.agent_identity,
        "model": turn.model,
    }
    row = {
        "id": turn.id,
        "embedding": [0.125, -0.5, 0.25, 1.0],
        "metadata": {k: v for k, v in metadata.items() if v is not None},
    }
    if with_document:
        row["document"] = turn.document
    return row


def write_bundle(folder: Path, turns: list[Turn], stamp: str = "2026-11-20T09-00-00.000Z") -> Path:
    """A memory-backup file for the turns, and a graph-backup file for those with a mini summary."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"memory-backup-{stamp}.jsonl").open("w") as out:
        for turn in turns:
            out.write(json.dumps(memory_row(turn)) + "\n")
    with (folder / f"graph-backup-{stamp}.jsonl").open("w") as out:
        for turn in turns:
            props = {"sessionId": turn.session_id}
            if turn.mini_summary:
                props["miniSummary"] = turn.mini_summary
            out.write(
                json.dumps({"type": "node", "data": {"id": turn.id, "label": "AGENT_MEMORY", "properties": props}})
                + "\n"
            )
    return folder
