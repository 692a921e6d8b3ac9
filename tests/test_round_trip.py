"""The golden round trip, as a user runs it: the sample bundle through `session-digest` (ingest,
sweep, digest, archive) against the local OpenAI-protocol test server; the archive checked field by
field against what the original's import reads (reference §1.1, §1.3, §8.1; issue12-spec §2);
then the archive ingested into a fresh store, which must come out the same with no model call."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb

from digest.ingest import file_kind
from tests.conftest import project_free_environ
from tests.model_server import Behaviour, ModelServer

CLI = [sys.executable, "-m", "app.cli"]
SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "bundle"
IMPORTED = "d23f0824-128b-4f33-8c5c-7fd0a6a3a450"  # its exported summary is current: it stands

# §1.1: what a memory row's flat metadata may hold; the project adds its own four (spec B2).
MEMORY_KEYS = {
    "prompt", "thought", "response", "sessionId", "timestamp", "type", "userId", "agentIdentity", "agent", "model",
    "amountToolCalls", "toolsUsed", "archivedAt", "archivedReason",
}  # fmt: skip
PROJECT_MEMORY_KEYS = {"documentRebuilt", "sourceFile", "sourceLine", "ingestedAt"}
# §1.3: the synthesis-owned keys, then those written only when set, then the Dream pass's.
SUMMARY_KEYS = {
    "sessionId", "timestamp", "memoryCount", "dreamInputRevision", "title", "category", "quality", "productivity",
    "impact", "complexity", "technologies", "participatingAgents", "models", "totalToolCalls", "toolsUsed",
    "sourceAgentIdentities", "sourceTrustTier", "provenancePolicy", "sourceTier", "degraded", "rawCanonical",
}  # fmt: skip
DIGESTED = {"graphDigested", "digestState", "dreamCompletedRevision", "dreamStateRevision"}
JUNK_KEYS = {"summaryVerdict", "summaryVerdictEvidence"}  # a junk summary's, in place of its memoryCount
EXTRACTION = {
    "entities": [
        {"name": "RowModel", "type": "CLASS", "description": "grid selection model"},
        {"name": "grid", "type": "CONCEPT", "description": "the data grid"},
    ],
    "relations": [
        {"source": "RowModel", "target": "grid", "type": "RELATES_TO", "weight": 1.0, "description": "selects rows of"}
    ],
}


def _script(received):
    if received.prompt.startswith("Extract a knowledge graph"):
        return Behaviour.reply(EXTRACTION)
    return Behaviour.reply()


def _env(home: Path, url: str) -> dict:
    base = project_free_environ()
    return {**base, "DIGEST_HOME": str(home), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_MODEL_URL": url}


def _run(args: list[str], env: dict) -> dict:
    done = subprocess.run(CLI + [*args, "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _drain(env: dict) -> None:
    """Sweeps, then digests, until nothing is owed (bounded: each round must make progress)."""
    for command, done_key in (("sweep", "summarized"), ("digest", "digested")):
        for _ in range(8):
            if _run([command], env)[done_key] == 0:
                break
        else:
            raise AssertionError(f"{command} never settled")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _file(bundle: Path, prefix: str) -> Path:
    [path] = bundle.glob(f"{prefix}-*.jsonl")
    return path


def _raw_vectors(path: Path) -> dict[str, str]:
    """id → the embedding's JSON text as the file has it (the sample's good lines)."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r'\{"id": ?"([^"]+)", ?"embedding": ?(\[[^\]]*\])', line)
        if match:
            found[match[1]] = match[2]
    return found


def _export_graph(home: Path, path: Path) -> dict[tuple[str, str], dict]:
    """`session-digest export-graph` (no model is needed): (node|edge, id) → line, each id once."""
    env = project_free_environ() | {"DIGEST_HOME": str(home)}
    _run(["export-graph", str(path)], env)
    lines = _lines(path)
    by_id = {(g["type"], g["data"]["id"]): g for g in lines}
    assert len(by_id) == len(lines)
    return by_id


def _store_rows(home: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(home / "digest.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _sessions(home: Path) -> dict[str, tuple]:
    return {r[0]: r[1:] for r in _store_rows(home, "SELECT session_id, turn_count, input_revision FROM sessions")}


def _summaries(home: Path) -> dict[str, tuple]:
    sql = "SELECT session_id, summary, title, input_revision, memory_count, source_tier, degraded, origin FROM session_summaries"
    return {r[0]: r[1:] for r in _store_rows(home, sql)}


def test_the_sample_bundle_round_trips_through_an_archive_in_the_originals_shapes(tmp_path):
    home = tmp_path / "home"
    with ModelServer(_script) as server:
        env = _env(home, server.url)
        ingested = _run(["ingest", str(SAMPLES)], env)
        assert ingested["turns"] == 94 and ingested["rejects"] == 5
        assert (ingested["vectors"], ingested["vectors_dropped"]) == (94 + 2, 0)  # the turns' and the summaries'
        _drain(env)
        bundle = Path(_run(["archive", "--out", str(tmp_path / "archives")], env)["path"])
    sessions, summaries = _sessions(home), _summaries(home)
    assert len(sessions) == 6 and set(summaries) == set(sessions)
    assert summaries[IMPORTED][-1] == "imported"
    digested = {r[0] for r in _store_rows(home, "SELECT session_id FROM digest_state WHERE digest_state = 'digested'")}
    assert digested == set(sessions)

    # --- memory rows: id, the sample's own vector back verbatim, §1.1 metadata, the document.
    kept = {r[0] for r in _store_rows(home, "SELECT id FROM turns")}  # the sample's last 5 lines are rejects
    sample_vectors = {i: v for i, v in _raw_vectors(_file(SAMPLES, "memory-backup")).items() if i in kept}
    memory_file = _file(bundle, "memory-backup")
    memory = _lines(memory_file)
    assert len(memory) == 94 and {m["id"] for m in memory} == set(sample_vectors)
    written = memory_file.read_text(encoding="utf-8")
    for row in memory:
        assert list(row) == ["id", "embedding", "metadata", "document"]
        assert f'"embedding":{sample_vectors[row["id"]]},' in written  # byte for byte, spaces included
        meta = row["metadata"]
        assert set(meta) <= MEMORY_KEYS | PROJECT_MEMORY_KEYS
        assert {"prompt", "thought", "response", "sessionId", "timestamp", "type"} <= set(meta)
        assert isinstance(meta["timestamp"], int) and meta["type"] == "agent-interaction"
        assert all(v is not None and not isinstance(v, (list, dict)) for v in meta.values())  # flat Chroma metadata
        assert isinstance(row["document"], str) and row["document"].startswith("User Prompt: ")

    # --- summary rows: §1.3 keys, the revision and count the original's gates compare.
    summary_lines = {s["metadata"]["sessionId"]: s for s in _lines(_file(bundle, "summaries-backup"))}
    assert set(summary_lines) == set(sessions)
    sample_summary = next(
        s for s in _lines(_file(SAMPLES, "summaries-backup")) if s["metadata"]["sessionId"] == IMPORTED
    )
    verdicts = dict(_store_rows(home, "SELECT session_id, verdict FROM session_summaries"))
    # The test server's summary (GOOD_SUMMARY) names auth.py, which no sample has: fabricated junk.
    assert {v for s, v in verdicts.items() if s != IMPORTED} == {"fabricated"}
    for session_id, row in summary_lines.items():
        meta = row["metadata"]
        turn_count, revision = sessions[session_id]
        assert row["id"] == f"summary_{session_id}" and row["document"] == summaries[session_id][0]
        assert meta["dreamInputRevision"] == revision
        if verdicts[session_id] == "ok":
            assert meta["memoryCount"] == turn_count
        else:
            # Junk goes out with its verdict and no count, so the original's sweep summarizes it again.
            assert "memoryCount" not in meta and meta["summaryVerdict"] == verdicts[session_id]
            assert "auth.py" in json.loads(meta["summaryVerdictEvidence"])["unknown_identifiers"]
        # Digested here at its revision: the original's REM takes it as done.
        assert {k: meta[k] for k in DIGESTED} == {
            "graphDigested": True, "digestState": "digested", "dreamCompletedRevision": revision,
            "dreamStateRevision": revision,
        }  # fmt: skip
        assert all(v is not None and not isinstance(v, (list, dict)) for v in meta.values())
        if session_id == IMPORTED:
            # As it came in: its own metadata and its own vector.
            assert {k: v for k, v in meta.items() if k not in DIGESTED} == sample_summary["metadata"]
            assert row["embedding"] == sample_summary["embedding"]
        else:
            assert set(meta) == (SUMMARY_KEYS - {"memoryCount"}) | DIGESTED | {"unclassifiedSourceCount"} | JUNK_KEYS
            assert meta["unclassifiedSourceCount"] == turn_count  # no identity has a known tier here
            assert meta["sourceTrustTier"] == "unclassified" and meta["provenancePolicy"] == "most-restrictive-source"
            assert row["embedding"] is None  # made here: the original's import must re-embed it

    # --- graph lines (§8.1): nodes first, then edges, in the import's shapes.
    graph = _lines(_file(bundle, "graph-backup"))
    kinds = [g["type"] for g in graph]
    assert kinds == sorted(kinds, key=lambda k: k == "edge") and set(kinds) == {"node", "edge"}
    node_ids = set()
    for g in graph:
        data = g["data"]
        if g["type"] == "node":
            assert set(data) == {"id", "label", "properties"} and isinstance(data["properties"], dict)
            node_ids.add(data["id"])
        else:
            assert {"id", "source", "target", "type", "properties"} <= set(data)
            assert isinstance(data["properties"]["weight"], (int, float))
    memory_nodes = {
        g["data"]["id"]: g["data"] for g in graph if g["type"] == "node" and g["data"]["label"] == "AGENT_MEMORY"
    }
    assert set(memory_nodes) == set(sample_vectors)

    # --- the manifest says which rows need the original's re-embed option.
    files = {f["kind"]: f for f in json.loads((bundle / "manifest.json").read_text())["files"]}
    assert files["memory"]["vectors"] == {
        "with_embedding": 94,
        "without_embedding": 0,
        "sessions_without_embedding": [],
    }
    assert files["summaries"]["vectors"] == {
        "with_embedding": 1, "without_embedding": 5, "sessions_without_embedding": sorted(set(sessions) - {IMPORTED}),
    }  # fmt: skip
    # The original's directory import reads only top-level *.jsonl: the three backups.
    assert sorted(file_kind(p) for p in bundle.glob("*.jsonl")) == ["graph", "memory", "summaries"]

    # The graph the store exports: the sample's own graph lines (its agent identity nodes, say) and
    # the sessions' digests, one line per id.
    exported = _export_graph(home, tmp_path / "first-export.jsonl")
    sample_graph = {(g["type"], g["data"]["id"]) for g in _lines(_file(SAMPLES, "graph-backup"))}
    assert sample_graph <= set(exported)
    assert {("node", f"summary_{s}") for s in sessions} | {("node", f"session:{s}") for s in sessions} <= set(exported)
    assert exported == {(g["type"], g["data"]["id"]): g for g in graph}  # the archive's graph file is the same

    # --- re-ingest the archive into a fresh store: the same sessions, summaries and graph, no model call.
    again = tmp_path / "again"
    with ModelServer(_script) as other:
        env = _env(again, other.url)
        reingested = _run(["ingest", str(bundle)], env)
        swept = _run(["sweep"], env)
        digested_again = _run(["digest"], env)  # the digest sensor's selection: none is owed
        assert other.chat_requests() == []
    assert reingested["turns"] == 94 and reingested["rejects"] == 0
    assert swept["summarized"] == 0 and swept["pending"] == 0
    assert digested_again["runs"] == [] and digested_again["digested"] == 0
    states = _store_rows(again, "SELECT session_id, digest_state, revision FROM digest_state")
    assert {r[0]: r[1:] for r in states} == {s: ("digested", revision) for s, (_, revision) in sessions.items()}
    # Exported again: the same node and edge ids, line for line.
    assert _export_graph(again, tmp_path / "second-export.jsonl") == exported
    assert _sessions(again) == sessions
    restored = _summaries(again)
    assert {s: row[:3] for s, row in restored.items()} == {s: row[:3] for s, row in summaries.items()}
    assert all(row[-1] == "imported" and row[2] == sessions[s][1] for s, row in restored.items())
    # The vectors come back too: a second archive carries them, and the imported summaries' own.
    vectors = dict(_store_rows(again, "SELECT id, embedding FROM turns"))
    assert vectors == sample_vectors
    # The graph file gives back the turns' mini summaries (what `ingest` reads of a graph-backup).
    minis = "SELECT turn_id, text FROM mini_summaries ORDER BY turn_id"
    assert _store_rows(again, minis) == _store_rows(home, minis)
