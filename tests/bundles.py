"""Writers for small export bundles in the Neo.mjs shapes, for tests."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from functools import cache
from pathlib import Path

from digest.ingest import IngestReport, ingest_paths
from digest.turns import Turn
from resources.store import DigestStore

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


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


# The stamp of the `summaries-backup` files written here by default.
STAMP = "2026-11-20T09-00-00.000Z"


def exported_summary(session_id: str, **meta) -> dict:
    """A `summaries-backup` line in the original's shape (§1.3)."""
    metadata = {
        "sessionId": session_id,
        "timestamp": 1_760_000_000_000,
        "title": f"Work on {session_id}",
        "category": "bugfix",
        "quality": 80,
        "productivity": 70,
        "impact": 40,
        "complexity": 30,
        "technologies": "javascript,neo.mjs",
        "participatingAgents": "claude-code",
        "models": "claude-opus-4",
        "totalToolCalls": 4,
        "toolsUsed": "read_file,edit",
        "sourceAgentIdentities": "@neo-opus-ada",
        "sourceTrustTier": "unclassified",
        "provenancePolicy": "most-restrictive-source",
        "sourceTier": "raw",
        "degraded": False,
        "rawCanonical": True,
    }
    metadata.update(meta)
    return {
        "id": f"summary_{session_id}",
        "embedding": [0.5, -0.25],
        "metadata": metadata,
        "document": f"Summary of {session_id}.",
    }


def write_summaries(folder: Path, lines: list, stamp: str = STAMP) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"summaries-backup-{stamp}.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def samples_home(folder: Path) -> Path:
    """`folder` as a `DIGEST_HOME` whose store holds the bundled samples, their search index made."""
    store = DigestStore(folder / "digest.duckdb")
    store.migrate()
    ingest_paths([SAMPLES / "bundle", SAMPLES / "harnesses"], store)
    store.search.refresh()
    return folder


def _ingested_once(name: str) -> tuple[Path, IngestReport]:
    """A store file holding `samples/<name>` as an ingest leaves it, and the ingest's report;
    checkpointed at its close, so a copy of the file alone is whole. Never written after."""
    folder = Path(tempfile.mkdtemp(prefix=f"ingested-{name}-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    store = DigestStore(folder / "digest.duckdb")
    with store.file.held():
        with store.file.connect() as con:
            con.execute("SET threads TO 1")  # as the tests' stores (`held_copy`): a second thread only adds CPU
        store.migrate()
        report = ingest_paths([SAMPLES / name], store)
    return store.path, report


@cache
def ingested_harnesses() -> tuple[Path, IngestReport]:
    """The harness logs bundled as samples (`samples/harnesses`), ingested once per process, with the
    ingest's report."""
    return _ingested_once("harnesses")


@cache
def ingested_samples() -> Path:
    """The bundled samples' export (`samples/bundle`), ingested once per process (some 0.4 s of CPU)
    for the tests that read it or start from a copy of it."""
    return _ingested_once("bundle")[0]
