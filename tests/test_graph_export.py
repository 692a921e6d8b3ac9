"""The graph export (`export-graph`): node lines then edge lines in the graph backup's shape, and a
session's own graph laid over the imported one by id."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from app.store_commands import export_graph
from digest.graph import ExtractionStats, GraphEdge, GraphNode, SessionGraph, digest_session, reinforce
from digest.ingest import parse_graph_line
from digest.settings import load_settings
from resources.model_clients import OpenAIChatClient
from resources.store import RunLedger
from tests.conftest import make_limits
from tests.model_server import Behaviour, ModelServer
from tests.test_graph import SMALL_MODEL, _export_lines, script, summary_row, turn

# --- export ----------------------------------------------------------------------------------------


# The nodes an exported edge may end on that the export leaves to the target graph: seeded there
# (the frontier, agent identities) or its own (issues). Its import culls an edge to one it lacks.
OUTSIDE = {"frontier", "@neo-opus-ada", "issue-42"}


def test_the_export_is_node_lines_then_edge_lines_in_the_graph_backup_shape(tmp_path, store):
    """Two sessions that name the same entities: one node line each, with the original's id, so a
    merge import into a Neo graph that holds them adds edges to them rather than new nodes; their
    shared relation reinforced across sessions, and AGENT_MEMORY mini summaries readable by an import."""
    both = "The RowSelectionModel depends on the RecordStore."
    sessions = {
        sid: [turn(sid, 0, both, mini_summary=f"{sid} mini"), turn(sid, 1, f"#42 in {sid}")] for sid in ("a", "b")
    }
    shared = {
        "entities": [
            {"name": "RowSelectionModel", "type": "CLASS", "description": "keeps the selection"},
            {"name": "RecordStore", "type": "CLASS", "description": "holds records"},
        ],
        "relations": [{"source": "RowSelectionModel", "target": "RecordStore", "type": "DEPENDS_ON",
                       "description": "reads records", "weight": 2.0}],
    }  # fmt: skip
    with ModelServer(script(graph=lambda received: Behaviour.reply(shared))) as server:
        client = OpenAIChatClient(server.url, "fake-model")
        for turns in sessions.values():
            ledger = RunLedger(store, "r")
            result = digest_session(turns, summary_row(turns), client, make_limits(), SMALL_MODEL, ledger)
            store.graph.write_graph(result.graph, run_id="r")
    settings = dataclasses.replace(load_settings({"DIGEST_HOME": str(tmp_path)}), db_path=store.path)
    out = export_graph(settings, str(tmp_path))
    path = Path(out["path"])
    assert path.name.startswith("graph-backup-") and path.suffix == ".jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    kinds = [line["type"] for line in lines]
    assert kinds == ["node"] * out["nodes"] + ["edge"] * out["edges"]  # every node line first
    shapes = {"node": {"id", "label", "properties"}, "edge": {"id", "source", "target", "type", "properties"}}
    for line in lines:
        assert set(line) == {"type", "data"} and set(line["data"]) == shapes[line["type"]]
    node_lines = [line["data"] for line in lines if line["type"] == "node"]
    nodes = {n["id"]: n for n in node_lines}
    edges = {line["data"]["id"]: line["data"] for line in lines if line["type"] == "edge"}
    assert len(nodes) == len(node_lines)  # one line per id
    assert all(isinstance(e["properties"]["weight"], float) for e in edges.values())
    assert all({e["source"], e["target"]} <= set(nodes) | OUTSIDE for e in edges.values())
    assert {n["label"] for n in node_lines} == {"SESSION_SUMMARY", "SESSION", "AGENT_MEMORY", "CLASS"}
    # Shared across the two sessions: one node line each, with the original's id, the relation
    # reinforced as a re-link; the node's context is the later session's, as the original's upsert.
    assert [i for i in nodes if i.startswith("CLASS:")] == ["CLASS:RecordStore", "CLASS:RowSelectionModel"]
    assert nodes["CLASS:RecordStore"] == {"id": "CLASS:RecordStore", "label": "CLASS", "properties": {
        "name": "RecordStore", "description": "holds records", "semanticVectorId": "summary_b",
        "logical_layer": "Unknown", "stability": "UNKNOWN", "gravity_well": False, "strategic_weight": 0.1,
        "confidence": 0.5, "tags": [], "context_source": "b", "evidence": "raw-turns"}}  # fmt: skip
    relation = edges["CLASS:RowSelectionModel->CLASS:RecordStore:DEPENDS_ON"]
    assert relation["properties"]["weight"] == pytest.approx(reinforce(2.0, 2.0))
    assert relation["properties"]["justification"] == "reads records"
    for sid in ("a", "b"):
        assert (
            f"frontier->summary_{sid}:SESSION_COMPLETED" in edges and f"summary_{sid}->issue-42:DISCUSSED_IN" in edges
        )
    assert {"summary_a", "summary_b", "session:a", "session:b"} <= set(nodes)
    # Loadable back: the AGENT_MEMORY lines carry the mini summaries an import reads.
    minis = [parse_graph_line(line) for line in lines]
    assert sorted(m["text"] for m in minis if m) == ["a mini", "b mini"]


def test_the_sessions_own_graph_is_laid_over_the_imported_one_by_id(tmp_path, store):
    """Ingested graph lines are the base of `export-graph`: a session's own row of the same id wins
    its label and non-empty properties, an imported key it lacks stays; an edge takes the session's
    weight (a copy of our own export does not reinforce it), a second session reinforces as before;
    imported rows no session has go out as they came."""
    line = {"source_file": "graph-backup-1.jsonl", "source_line": 1}
    store.ingest.write_imported_graph(
        [
            {"id": "CLASS:Grid", "label": "CONCEPT", "properties": json.dumps({"name": "Grid", "description": "old", "x": 1}), **line},
            {"id": "@neo-gpt", "label": "AgentIdentity", "properties": json.dumps({"name": "GPT"}), **line},
        ],
        [
            {"id": "g", "source": "CLASS:Grid", "target": "@neo-gpt", "type": "RELATES_TO",
             "properties": json.dumps({"weight": 1.5, "justification": "imported"}), **line},
            {"id": "h", "source": "@neo-gpt", "target": "CLASS:Grid", "type": "X", "properties": json.dumps({}), **line},
        ],
    )  # fmt: skip
    stats = ExtractionStats(0, 0, 0, 0)
    for sid, weight in (("a", 1.0), ("b", 2.0)):
        nodes = [GraphNode("CLASS:Grid", "CLASS", {"name": "Grid", "description": "" if sid == "a" else "new"})]
        edges = [GraphEdge("g", "CLASS:Grid", "@neo-gpt", "RELATES_TO", {"weight": weight})]
        store.graph.write_graph(SessionGraph(sid, "rev", nodes, edges, 0, 0, stats, 0))
    settings = dataclasses.replace(load_settings({"DIGEST_HOME": str(tmp_path)}), db_path=store.path)
    nodes, edges = _export_lines(settings, tmp_path / "export.jsonl")
    assert nodes["CLASS:Grid"] == {
        "id": "CLASS:Grid",
        "label": "CLASS",
        "properties": {"name": "Grid", "description": "new", "x": 1},
    }
    assert nodes["@neo-gpt"] == {"id": "@neo-gpt", "label": "AgentIdentity", "properties": {"name": "GPT"}}
    assert edges["g"]["properties"] == {"weight": pytest.approx(reinforce(1.0, 2.0)), "justification": "imported"}
    assert edges["h"] == {"id": "h", "source": "@neo-gpt", "target": "CLASS:Grid", "type": "X", "properties": {}}
