"""Streaming ingest end to end: real JSONL files under tmp_path into a real DuckDB file."""

from __future__ import annotations

import json
import random
import re
import struct
from pathlib import Path

import duckdb
import pytest

import digest.ingest as ingest_module
from digest.ingest import ingest_paths
from digest.turns import canonical_order, compose_document, input_revision
from resources.store import DigestStore
from resources.store.connection import ROW_GROUP_ROWS, StoreFile

# A float that occurs only in embeddings, so a stored copy of one is easy to find.
SENTINEL = "0.7182818"


@pytest.fixture
def db(tmp_path) -> DigestStore:
    store = DigestStore(tmp_path / "digest.duckdb")
    store.migrate()
    return store


def write_jsonl(path: Path, rows: list) -> Path:
    """Each row is a dict (dumped as one JSON line) or a str (written as the raw line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def embedding(n: int = 4096) -> list[float]:
    values = [round((i % 97) / 97 - 0.5, 6) for i in range(n)]
    values[7] = float(SENTINEL)
    values[8] = -1.25e-05
    return values


def memory_row(turn_id, session_id, ts, *, document=None, with_embedding=True, **meta) -> dict:
    """A Neo.mjs memory-backup row in the export's key order: id, embedding, metadata, document."""
    metadata = {
        "sessionId": session_id,
        "timestamp": ts,
        "type": "agent-interaction",
        "prompt": f"prompt of {turn_id}",
        "thought": f"thought of {turn_id}",
        "response": f"response of {turn_id}",
        "agent": "claude-code",
        "agentIdentity": "@neo-opus-ada",
        "model": "claude-opus-4",
    }
    metadata.update(meta)
    row: dict = {"id": turn_id}
    if with_embedding:
        row["embedding"] = embedding()
    row["metadata"] = metadata
    if document is not None:
        row["document"] = document
    return row


def graph_node(turn_id, session_id, mini, label="AGENT_MEMORY") -> dict:
    properties = {"sessionId": session_id, "timestamp": 1}
    if mini is not None:
        properties["miniSummary"] = mini
    return {"type": "node", "data": {"id": turn_id, "label": label, "properties": properties}}


def summary_row(session_id, text, embedding=None, **meta) -> dict:
    metadata = {
        "sessionId": session_id,
        "memoryCount": 2,
        "dreamInputRevision": "sha256:" + "ab" * 32,
        "title": f"Title of {session_id}",
        "sourceTier": "raw",
    }
    metadata.update(meta)
    row = {"id": f"summary_{session_id}", "document": text, "metadata": metadata}
    return {"id": row["id"], "embedding": embedding, **row} if embedding is not None else row


def rows(db: DigestStore, sql: str) -> list[dict]:
    """Plain Python values (None for NULL), not pandas' NaN: read through the store's own connection."""
    with db.file.connect(read_only=True) as con:
        cursor = con.execute(sql)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def turns_by_id(db: DigestStore) -> dict[str, dict]:
    return {r["id"]: r for r in rows(db, "SELECT * FROM turns")}


# --- memory-backup rows ---------------------------------------------------------------------


def test_missing_document_is_rebuilt_from_metadata(db, tmp_path):
    path = write_jsonl(
        tmp_path / "memory-backup-2025-01-01.jsonl",
        [
            memory_row(
                "t-rebuilt", "s1", 1_000, prompt="Fix the grid", thought="Row.mjs is stale", response="Patched it"
            ),
            memory_row("t-kept", "s1", 2_000, document="the original document text"),
            memory_row("t-blank", "s1", 3_000, document="   ", prompt="P", thought="T", response="R"),
        ],
    )
    report = ingest_paths([path], db)

    assert report.turns == 3 and report.rejects == 0
    turns = turns_by_id(db)
    rebuilt = turns["t-rebuilt"]
    assert (
        rebuilt["document"] == "User Prompt: Fix the grid\nAgent Thought: Row.mjs is stale\nAgent Response: Patched it"
    )
    assert rebuilt["document_rebuilt"] is True
    assert (rebuilt["prompt"], rebuilt["thought"], rebuilt["response"]) == (
        "Fix the grid",
        "Row.mjs is stale",
        "Patched it",
    )
    assert (rebuilt["agent"], rebuilt["agent_identity"], rebuilt["model"]) == (
        "claude-code",
        "@neo-opus-ada",
        "claude-opus-4",
    )
    assert rebuilt["source_file"] == str(path.resolve()) and rebuilt["source_line"] == 1

    assert turns["t-kept"]["document"] == "the original document text"
    assert turns["t-kept"]["document_rebuilt"] is False
    # A whitespace-only document counts as missing.
    assert turns["t-blank"]["document"] == compose_document("P", "T", "R")
    assert turns["t-blank"]["document_rebuilt"] is True


def test_tool_fields_are_kept(db, tmp_path):
    path = write_jsonl(
        tmp_path / "memory-backup-x.jsonl",
        [
            memory_row("t1", "s", 1, amountToolCalls=4, toolsUsed=["read_file", "bash"]),
            memory_row("t2", "s", 2, amountToolCalls="7", toolsUsed="bash"),
            memory_row("t3", "s", 3),
        ],
    )
    ingest_paths([path], db)
    got = {r["id"]: (r["amount_tool_calls"], r["tools_used"]) for r in rows(db, "SELECT * FROM turns")}
    assert got["t1"] == (4, '["read_file", "bash"]')
    assert got["t2"] == (7, "bash")
    assert got["t3"] == (None, None)


def test_the_embedding_is_kept_as_its_text_in_turns_only(db, tmp_path):
    # A document that itself talks about an embedding array must come through untouched.
    tricky = 'config {"embedding": [1, 2, 3]} was wrong]'
    big = memory_row("t-big", "s1", 1_000, document=tricky)
    assert len(big["embedding"]) == 4096
    # A row whose embedding comes first and which is rejected: its excerpt must not be floats.
    rejected = memory_row("t-bad", "s1", "not a time")
    path = write_jsonl(tmp_path / "memory-backup-emb.jsonl", [big, rejected])
    assert len(path.read_text()) > 4096 * 4  # the file really carries the vectors

    report = ingest_paths([path], db)

    assert report.turns == 1 and report.rejects == 1
    [file_report] = report.files
    assert (file_report.vectors, file_report.vectors_dropped) == (1, 0)
    stored = turns_by_id(db)["t-big"]
    assert stored["document"] == tricky
    # The vector's text exactly as the line had it (json.dumps spacing, `-1.25e-05`), unparsed.
    assert stored["embedding"] == json.dumps(big["embedding"]) and "-1.25e-05" in stored["embedding"]
    # ... and no other text column of any table holds a copy of one of its floats.
    columns = rows(db, "SELECT table_name, column_name, data_type FROM information_schema.columns")
    for table in ("turns", "sessions", "mini_summaries", "rejects", "imported_summaries"):
        text_columns = [c["column_name"] for c in columns if c["table_name"] == table and c["data_type"] == "VARCHAR"]
        for column in set(text_columns) - ({"embedding"} if table == "turns" else set()):
            hits = rows(db, f"SELECT count(*) AS n FROM {table} WHERE {column} LIKE '%{SENTINEL}%'")
            assert hits[0]["n"] == 0, f"{table}.{column} holds embedding floats"
    excerpt = rows(db, "SELECT excerpt FROM rejects")[0]["excerpt"]
    assert '"id": "t-bad"' in excerpt and '"metadata"' in excerpt


def test_a_malformed_embedding_is_dropped_with_its_reason_and_the_turn_kept(db, tmp_path):
    def raw(turn_id: str, vector_text: str) -> str:
        line = json.dumps(memory_row(turn_id, "s1", 1, with_embedding=False))
        return line.replace(f'{{"id": "{turn_id}", ', f'{{"id": "{turn_id}", "embedding": {vector_text}, ', 1)

    path = write_jsonl(
        tmp_path / "memory-backup-bad-vectors.jsonl",
        [
            raw("ok", "[0.5,-1e-7, 3]"),  # 1: kept verbatim (-1e-7 is not a float32 value); 3 numbers
            raw("strings", '["a", 0.5, 1]'),  # 2
            raw("nan", "[NaN, 0.5, 1]"),  # 3: Python's json would take it; JSON has no NaN
            raw("empty", "[ ]"),  # 4
            raw("hole", "[0.5,,1]"),  # 5
            raw("huge", "[1e400, 0.5, 1]"),  # 6: Infinity to a JSON reader
            raw("fine-exponent", "[1e30, 0.5, 1]"),  # 7: big, finite
            raw("null", "null"),  # 8: no vector at all, not a problem
            raw("short", "[0.5, 1]"),  # 9: the file's vectors have 3 numbers
            raw("float32", "[0.5, -0.25, 3]"),  # 10: float32 values: kept as numbers
        ],
    )
    report = ingest_paths([path], db)

    [f] = report.files
    assert (f.rows, f.rejects, f.vectors, f.vectors_dropped, f.dimensions) == (10, 0, 3, 6, 3)
    assert f.vector_problems == [
        "line 2: bad-embedding: holds something other than numbers",
        "line 3: bad-embedding: holds something other than numbers",
        "line 4: empty-embedding: no numbers",
        "line 5: bad-embedding: an empty element",
        "line 6: non-finite-values: a number JSON readers take as Infinity",
        "line 9: wrong-length: 2 numbers, the file's vectors have 3",
    ]
    stored = {t["id"]: (t["embedding"], t["embedding_f32"]) for t in rows(db, "SELECT * FROM turns")}
    assert stored == {
        "ok": ("[0.5,-1e-7, 3]", None), "strings": (None, None), "nan": (None, None), "empty": (None, None),
        "hole": (None, None), "huge": (None, None), "fine-exponent": ("[1e30, 0.5, 1]", None),
        "null": (None, None), "short": (None, None), "float32": (None, [0.5, -0.25, 3.0]),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1_714_566_896_789, 1_714_566_896_789),
        ("1714566896789", 1_714_566_896_789),
        (1_714_566_896_789.0, 1_714_566_896_789),
        ("2024-05-01T12:34:56.789Z", 1_714_566_896_789),
        ("2024-05-01T14:34:56.789+02:00", 1_714_566_896_789),
        ("2024-05-01T12:34:56Z", 1_714_566_896_000),
        ("2024-05-01T12:34:56", 1_714_566_896_000),  # naive: read as UTC
        # Float rounding once turned these into ...471 and ...410.
        ("2004-03-15T07:55:47.472Z", 1_079_337_347_472),
        ("2039-03-08T19:46:13.411Z", 2_183_226_373_411),
        (None, None),
    ],
)
def test_timestamps_become_epoch_ms(db, tmp_path, value, expected):
    path = write_jsonl(tmp_path / "memory-backup-ts.jsonl", [memory_row("t1", "s1", value)])
    report = ingest_paths([path], db)
    assert report.rejects == 0
    [row] = rows(db, "SELECT ts_ms FROM turns")
    assert row["ts_ms"] == expected


# --- graph-backup and summaries-backup ------------------------------------------------------


def test_graph_mini_summaries_are_imported_and_joined_onto_turns(db, tmp_path):
    write_jsonl(
        tmp_path / "bundle" / "memory-backup-1.jsonl",
        [memory_row("t1", "s1", 1_000), memory_row("t2", "s1", 2_000), memory_row("t3", "s1", 3_000)],
    )
    write_jsonl(
        tmp_path / "bundle" / "graph-backup-1.jsonl",
        [
            graph_node("t1", "s1", "  Fixed the grid row.  "),
            graph_node("t2", "s1", None),  # no miniSummary: nothing to import
            graph_node("t3", "s1", "   "),  # blank: nothing to import
            graph_node("file-x", "s1", "not a memory", label="FILE"),
            {"type": "edge", "data": {"source": "t1", "target": "file-x", "label": "TOUCHED"}},
            {"type": "node", "data": {"id": "t9", "label": "AGENT_MEMORY", "properties": "oops"}},
        ],
    )
    report = ingest_paths([tmp_path / "bundle"], db)

    graph = next(f for f in report.files if f.kind == "graph")
    # Every node is kept in the imported graph; the edge has no `type` (the original's import fails it).
    assert (graph.lines, graph.rows, graph.rejects, graph.skipped) == (6, 4, 2, 0)
    assert rows(db, "SELECT turn_id, session_id, text, origin, model FROM mini_summaries") == [
        {"turn_id": "t1", "session_id": "s1", "text": "Fixed the grid row.", "origin": "imported", "model": None}
    ]
    assert [r["line_no"] for r in rows(db, "SELECT line_no FROM rejects ORDER BY 1")] == [5, 6]
    assert {r["line_no"]: r["reason"] for r in rows(db, "SELECT line_no, reason FROM rejects")} == {
        5: "missing-edge-end: data.type is missing or empty",
        6: "wrong-type: data.properties is str, expected object",
    }

    turns = {t.id: t for t in db.sessions.load_turns(["s1"])}
    assert turns["t1"].mini_summary == "Fixed the grid row."
    assert turns["t2"].mini_summary is None and turns["t3"].mini_summary is None


def test_graph_lines_of_any_label_are_kept_by_id_and_bad_ones_are_rejects_with_line_numbers(db, tmp_path):
    path = write_jsonl(
        tmp_path / "graph-backup-1.jsonl",
        [
            {"type": "node", "data": {"id": "@neo-gpt", "label": "AgentIdentity", "properties": {"name": "GPT", "n": [1, {"x": None}]}}},
            {"type": "node", "data": {"id": "CLASS:RowModel", "label": "CLASS"}},  # no properties: {}
            {"type": "node", "data": {"label": "CLASS", "properties": {}}},  # 3: no id
            {"type": "node", "data": {"id": "CLASS:Grid", "label": 7, "properties": {}}},  # 4: label not text
            {"type": "edge", "data": {"source": "CLASS:RowModel", "target": "@neo-gpt", "type": "RELATES_TO",
                                      "properties": {"weight": 0.5}}},  # no id: the original import's
            {"type": "edge", "data": {"id": "e-1", "source": "CLASS:RowModel", "target": "nowhere", "type": "DEPENDS_ON",
                                      "properties": {"weight": 2}}},  # an end in no file: kept, as its source had it
            {"type": "edge", "data": {"id": "e-2", "source": "a", "target": "b", "type": "X", "properties": {"weight": "1"}}},
            {"type": "blob", "data": {}},  # 8
            {"type": "node", "data": {"id": "@neo-gpt", "label": "AgentIdentity", "properties": {"name": "GPT-5"}}},  # 9: wins
        ],
    )  # fmt: skip
    [f] = ingest_paths([path], db).files
    assert (f.lines, f.rows, f.rejects, f.superseded, f.skipped) == (9, 4, 4, 1, 0)
    assert rows(db, "SELECT line_no, reason FROM rejects ORDER BY line_no") == [
        {"line_no": 1, "reason": f"superseded: node id '@neo-gpt' comes again at line 9 of {path}, which is kept"},
        {"line_no": 3, "reason": "missing-id: data.id is missing or empty"},
        {"line_no": 4, "reason": "wrong-type: data.label is int, expected string"},
        {"line_no": 7, "reason": "wrong-type: data.properties.weight is '1', expected a finite number"},
        {"line_no": 8, "reason": "not-a-graph-line: type is 'blob', expected 'node' or 'edge'"},
    ]
    nodes = rows(db, "SELECT id, label, properties::VARCHAR AS p, source_line FROM imported_graph_nodes ORDER BY id")
    assert [(n["id"], n["label"], json.loads(n["p"]), n["source_line"]) for n in nodes] == [
        ("@neo-gpt", "AgentIdentity", {"name": "GPT-5"}, 9),
        ("CLASS:RowModel", "CLASS", {}, 2),
    ]
    edges = rows(db, "SELECT id, source, target, type, properties::VARCHAR AS p FROM imported_graph_edges ORDER BY id")
    assert [(e["id"], e["target"], json.loads(e["p"])) for e in edges] == [
        ("CLASS:RowModel->@neo-gpt:RELATES_TO", "@neo-gpt", {"weight": 0.5}),
        ("e-1", "nowhere", {"weight": 2}),
    ]
    # A later ingest of the same id wins too.
    again = write_jsonl(
        tmp_path / "graph-backup-2.jsonl",
        [{"type": "node", "data": {"id": "CLASS:RowModel", "label": "CLASS", "properties": {"a": 1}}}],
    )
    ingest_paths([again], db)
    assert rows(db, "SELECT properties->>'a' AS a FROM imported_graph_nodes WHERE id = 'CLASS:RowModel'") == [
        {"a": "1"}
    ]


def test_summaries_backup_rows_land_in_imported_summaries(db, tmp_path):
    path = write_jsonl(
        tmp_path / "summaries-backup-1.jsonl",
        [
            summary_row(
                "s1",
                "The agent fixed the grid.",
                embedding=[0.25, -0.5],
                category="bugfix",
                quality=80,
                productivity=70.0,
                impact=40,
                complexity=30,
                technologies="python,duckdb",
                degraded=False,
                rawCanonical=True,
                participatingAgents="claude-code",
                models="m1,m2",
                totalToolCalls=3,
                toolsUsed=["grep", "edit"],
                sourceAgentIdentities="@neo-opus-ada",
            ),
            summary_row("s2", "Docs work.", memoryCount=None, dreamInputRevision=None, title=None, sourceTier=None),
            {"id": "x", "document": "no session", "metadata": {"title": "t"}},
            summary_row("s3", "bad count", memoryCount="many"),
        ],
    )
    report = ingest_paths([path], db)

    assert report.turns == 0 and report.rejects == 2
    got = rows(db, "SELECT * EXCLUDE (imported_at) FROM imported_summaries ORDER BY session_id")
    assert got[0] == {
        "session_id": "s1",
        "memory_count": 2,
        "input_revision": "sha256:" + "ab" * 32,
        "title": "Title of s1",
        "summary": "The agent fixed the grid.",
        "source_tier": "raw",
        "source_file": str(path.resolve()),
        "category": "bugfix",
        "quality": 80,
        "productivity": 70,
        "impact": 40,
        "complexity": 30,
        "technologies": ["python", "duckdb"],
        "degraded": False,
        "raw_canonical": True,
        "participating_agents": ["claude-code"],
        "models": ["m1", "m2"],
        "total_tool_calls": 3,
        "tools_used": ["grep", "edit"],
        "source_agent_identities": ["@neo-opus-ada"],
        # As exported, for the archive to write back; the vector as numbers (float32 values).
        "metadata": json.dumps(json.loads(path.read_text().splitlines()[0])["metadata"]),
        "embedding": None,
        "embedding_f32": [0.25, -0.5],
    }
    assert got[1]["session_id"] == "s2" and got[1]["summary"] == "Docs work." and got[1]["title"] is None
    assert len(got) == 2
    reasons = {r["line_no"]: r["reason"] for r in rows(db, "SELECT line_no, reason FROM rejects")}
    assert reasons[3].startswith("missing-session-id:") and reasons[4].startswith("wrong-type:")
    # Summaries are no turns: no session rows come from them.
    assert rows(db, "SELECT count(*) AS n FROM sessions")[0]["n"] == 0


# --- rejects --------------------------------------------------------------------------------


def test_bad_lines_are_rejected_with_reason_and_line_number(db, tmp_path):
    no_id = memory_row("x", "s1", 5)
    del no_id["id"]
    no_session = memory_row("t-ns", "s1", 6)
    del no_session["metadata"]["sessionId"]
    path = write_jsonl(
        tmp_path / "memory-backup-mixed.jsonl",
        [
            memory_row("good-1", "s1", 1_000),  # 1
            '{"id": "broken", "metadata": {',  # 2
            memory_row("good-2", "s1", 2_000),  # 3
            "",  # 4: blank lines are skipped but still counted
            no_id,  # 5
            no_session,  # 6
            memory_row("t-empty", "s1", 7, prompt=""),  # 7: no document and an empty prompt
            memory_row("t-ts", "s1", [2024, 5, 1]),  # 8
            {"id": "t-meta", "metadata": "agent-interaction", "document": "text"},  # 9
            memory_row("good-3", "s2", 3_000),  # 10
            memory_row("t-ts2", "s1", {"ms": 1}, with_embedding=False),  # 11
            memory_row("t-ts3", "s1", True, with_embedding=False),  # 12
            memory_row("t-blank-id", "s1", 1, with_embedding=False) | {"id": "  "},  # 13
            memory_row("t-agent", "s1", 1, agent=42, with_embedding=False),  # 14
            "[1, 2, 3]",  # 15
        ],
    )
    report = ingest_paths([path], db)

    expected = {
        2: "json-parse",
        5: "missing-id",
        6: "missing-session-id",
        7: "empty-turn-fields",
        8: "bad-timestamp",
        9: "wrong-type",
        11: "bad-timestamp",
        12: "bad-timestamp",
        13: "missing-id",
        14: "wrong-type",
        15: "not-an-object",
    }
    stored = {r["line_no"]: r for r in rows(db, "SELECT * FROM rejects")}
    assert sorted(stored) == sorted(expected)
    for line_no, prefix in expected.items():
        assert stored[line_no]["reason"].startswith(prefix + ":"), (line_no, stored[line_no]["reason"])
        assert stored[line_no]["source_file"] == str(path.resolve())
    assert "prompt" in stored[7]["reason"]
    assert stored[2]["excerpt"].startswith('{"id": "broken"')

    assert rows(db, "SELECT id, source_line FROM turns ORDER BY id") == [
        {"id": "good-1", "source_line": 1},
        {"id": "good-2", "source_line": 3},
        {"id": "good-3", "source_line": 10},
    ]
    [file_report] = report.files
    assert (file_report.lines, file_report.rows, file_report.rejects, file_report.skipped) == (15, 3, 11, 1)
    assert report.turns == 3 and report.rejects == 11
    assert {s["session_id"]: s["turn_count"] for s in report.sessions} == {"s1": 2, "s2": 1}


def test_values_that_would_fail_the_database_insert_are_rejected_not_fatal(db, tmp_path):
    """Each of these once crashed the whole ingest (or its batch) instead of rejecting one line."""
    base = '{"id": "%s", "metadata": {"sessionId": "s1", "prompt": "p", "thought": "t", "response": "r", %s}}'
    path = write_jsonl(
        tmp_path / "memory-backup-edge.jsonl",
        [
            base % ("t-inf-string", '"timestamp": "Infinity"'),  # 1
            base % ("t-huge-ts", '"timestamp": 1e30'),  # 2
            base % ("t-nan-calls", '"timestamp": 1, "amountToolCalls": NaN'),  # 3
            base % ("t-big-calls", '"timestamp": 1, "amountToolCalls": 3000000000'),  # 4
            '{"id": "t-digits", "n": ' + "1" * 5000 + "}",  # 5
            "[" * 50_000 + "]" * 50_000,  # 6
            # JSON.stringify writes a surrogate cut in half as an escape: keep the turn, replace it.
            base % ("t-surrogate", '"timestamp": 2, "model": "m \\ud83d", "extra": "\\ud83d\\ude00"'),  # 7
            base % ("t-good", '"timestamp": 3'),  # 8
        ],
    )
    report = ingest_paths([path], db)

    reasons = {r["line_no"]: r["reason"] for r in rows(db, "SELECT line_no, reason FROM rejects")}
    assert sorted(reasons) == [1, 2, 3, 4, 5, 6]
    assert reasons[1].startswith("bad-timestamp:") and reasons[2].startswith("bad-timestamp:")
    assert reasons[3].startswith("wrong-type:") and reasons[4].startswith("wrong-type:")
    assert reasons[5].startswith("json-parse:") and reasons[6].startswith("json-parse:")
    turns = turns_by_id(db)
    assert sorted(turns) == ["t-good", "t-surrogate"]
    assert turns["t-surrogate"]["model"] == "m \ufffd"
    assert report.turns == 2


# --- idempotence and revisions --------------------------------------------------------------

SNAPSHOTS = {
    "turns": "SELECT * EXCLUDE (ingested_at) FROM turns ORDER BY id",
    "sessions": "SELECT * EXCLUDE (updated_at) FROM sessions ORDER BY session_id",
    "mini_summaries": "SELECT * EXCLUDE (created_at) FROM mini_summaries ORDER BY turn_id",
    "rejects": "SELECT * EXCLUDE (rejected_at) FROM rejects ORDER BY source_file, line_no",
    "imported_summaries": "SELECT * EXCLUDE (imported_at) FROM imported_summaries ORDER BY session_id",
    "kept_stamps": (
        "SELECT 'turn' AS k, id AS key, ingested_at AS at FROM turns UNION ALL "
        "SELECT 'mini', turn_id, created_at FROM mini_summaries UNION ALL "
        "SELECT 'reject', source_file || ':' || line_no, rejected_at FROM rejects UNION ALL "
        "SELECT 'summary', session_id, imported_at FROM imported_summaries ORDER BY k, key"
    ),
}


def snapshot(db: DigestStore) -> dict[str, list[dict]]:
    return {name: rows(db, sql) for name, sql in SNAPSHOTS.items()}


def write_bundle(folder: Path, *, t2_response: str = "response of t2") -> Path:
    write_jsonl(
        folder / "memory-backup-2025.jsonl",
        [
            memory_row("t1", "s1", 1_000),
            memory_row("t2", "s1", "1970-01-01T00:00:02Z", response=t2_response),
            memory_row("t3", "s2", 5_000, document="s2 first turn"),
            "{oops",
            memory_row("t4", "s2", None, prompt=""),
        ],
    )
    write_jsonl(
        folder / "graph-backup-2025.jsonl", [graph_node("t1", "s1", "mini one"), graph_node("t3", "s2", "mini three")]
    )
    write_jsonl(folder / "summaries-backup-2025.jsonl", [summary_row("s1", "summary one")])
    write_jsonl(folder / "temporal-summary-backup-2025.jsonl", ["{not even json"])
    write_jsonl(
        folder / "other-harness.jsonl",
        [
            {
                "id": "h1",
                "session_id": "s3",
                "timestamp": 9_000,
                "prompt": "p",
                "response": "r",
                "mini_summary": "h mini",
            }
        ],
    )
    return folder


def test_reingesting_the_same_bundle_changes_nothing(db, tmp_path):
    bundle = write_bundle(tmp_path / "bundle")
    first = ingest_paths([bundle], db)
    before = snapshot(db)
    assert len(before["turns"]) == 4 and len(before["sessions"]) == 3
    assert len(before["mini_summaries"]) == 3 and len(before["rejects"]) == 2
    assert len(before["imported_summaries"]) == 1

    second = ingest_paths([bundle], db)

    assert snapshot(db) == before
    # Unchanged since their read (digest/manifest.py): not read again.
    assert first.turns == 4 and first.rejects == 2
    assert second.turns == second.rejects == 0 and second.sessions == []
    # (The file skipped by design, not read, may be looked at again within 2 s of its last read.)
    assert second.unchanged + len(second.files) == 5 and sum(f.lines for f in second.files) == 0
    # Read again whole (their manifest rows dropped): the same rows, the same revisions.
    with db.file.connect() as con:
        con.execute("DELETE FROM ingest_files")
    third = ingest_paths([bundle], db)
    assert snapshot(db) == before
    assert third.turns == 4 and third.rejects == 2
    assert {s["session_id"]: s["input_revision"] for s in third.sessions} == {
        s["session_id"]: s["input_revision"] for s in first.sessions
    }


def test_a_changed_turn_changes_its_sessions_input_revision(db, tmp_path):
    bundle = write_bundle(tmp_path / "bundle")
    ingest_paths([bundle], db)
    before = {r["session_id"]: r for r in rows(db, "SELECT * FROM sessions")}

    write_bundle(bundle, t2_response="a different answer")
    ingest_paths([bundle], db)
    after = {r["session_id"]: r for r in rows(db, "SELECT * FROM sessions")}

    assert after["s1"]["input_revision"] != before["s1"]["input_revision"]
    assert after["s1"]["turn_count"] == 2
    assert after["s2"]["input_revision"] == before["s2"]["input_revision"]
    assert turns_by_id(db)["t2"]["response"] == "a different answer"
    assert "Agent Response: a different answer" in turns_by_id(db)["t2"]["document"]
    # The stored revision is the one the turns contract defines over the stored turns.
    assert after["s1"]["input_revision"] == input_revision(canonical_order(db.sessions.load_turns(["s1"])))
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", after["s1"]["input_revision"])


# --- the simple turn format ----------------------------------------------------------------


def test_simple_turn_format(db, tmp_path):
    path = write_jsonl(
        tmp_path / "claude-code-export.jsonl",
        [
            {
                "id": "h1",
                "session_id": "harness-1",
                "timestamp": "2025-06-01T10:00:00Z",
                "prompt": "Add a test",
                "thought": "pytest is set up",
                "response": "Added tests/test_x.py",
                "agent": "aider",
                "model": "qwen2.5-coder",
                "mini_summary": "  Added a test.  ",
                "tool_calls": 3,
            },
            # thought is optional in this format
            {
                "id": "h2",
                "session_id": "harness-1",
                "timestamp": 1_748_772_060_000,
                "prompt": "Run it",
                "response": "Green",
            },
            {"id": "h3", "session_id": "harness-1", "timestamp": 1_748_772_120_000, "document": "own document"},
            {"id": "h4", "timestamp": 1, "prompt": "p", "response": "r"},
            {"id": "h5", "session_id": "harness-1", "prompt": "p", "response": ""},
            {"id": "h6", "session_id": "harness-1", "prompt": "p", "response": "r", "mini_summary": 5},
        ],
    )
    report = ingest_paths([path], db)

    assert report.files[0].kind == "turns"
    turns = turns_by_id(db)
    assert sorted(turns) == ["h1", "h2", "h3"]
    h1 = turns["h1"]
    assert (
        h1["document"]
        == "User Prompt: Add a test\nAgent Thought: pytest is set up\nAgent Response: Added tests/test_x.py"
    )
    assert h1["document_rebuilt"] is True
    assert h1["ts_ms"] == 1_748_772_000_000
    assert (h1["agent"], h1["model"], h1["amount_tool_calls"]) == ("aider", "qwen2.5-coder", 3)
    assert turns["h2"]["document"] == compose_document("Run it", "", "Green")
    assert turns["h3"]["document"] == "own document" and turns["h3"]["document_rebuilt"] is False

    assert rows(db, "SELECT turn_id, session_id, text, origin FROM mini_summaries") == [
        {"turn_id": "h1", "session_id": "harness-1", "text": "Added a test.", "origin": "imported"}
    ]
    loaded = {t.id: t for t in db.sessions.load_turns(["harness-1"])}
    assert loaded["h1"].mini_summary == "Added a test." and loaded["h2"].mini_summary is None

    reasons = {r["line_no"]: r["reason"] for r in rows(db, "SELECT line_no, reason FROM rejects")}
    assert sorted(reasons) == [4, 5, 6]
    assert reasons[4].startswith("missing-session-id:")
    assert reasons[5].startswith("empty-turn-fields:") and "response" in reasons[5]
    assert reasons[6].startswith("wrong-type:")
    [session] = report.sessions
    assert session["session_id"] == "harness-1" and session["turn_count"] == 3


# --- sessions ------------------------------------------------------------------------------


def test_refresh_sessions_rows(db, tmp_path):
    path = write_jsonl(
        tmp_path / "memory-backup-sessions.jsonl",
        [
            memory_row("c2", "a,b", 3_000, document="é" * 10),  # 20 bytes, 10 characters
            memory_row("c1", "a,b", 1_000, document="abc"),
            memory_row("c3", "a,b", None, document="xyz"),
            memory_row("c4", "a,b", 2_000, document="12345"),
            memory_row("u1", "a_b", 500, document="u"),
            memory_row("d1", "a.b", 700, document="d"),
            memory_row("n1", "no-stamps", None, document="n"),
        ],
    )
    report = ingest_paths([path], db)

    sessions = {r["session_id"]: r for r in rows(db, "SELECT * FROM sessions")}
    assert set(sessions) == {"a,b", "a_b", "a.b", "no-stamps"}
    keys = {sid: r["partition_key"] for sid, r in sessions.items()}
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", k) for k in keys.values())
    assert len(set(keys.values())) == 4  # a,b / a_b / a.b sanitize alike but keep distinct keys
    assert keys["a_b"] == "a_b" and keys["no-stamps"] == "no-stamps"  # safe ids are kept as they are
    assert keys["a,b"].startswith("a_b-")

    ab = sessions["a,b"]
    assert ab["turn_count"] == 4
    assert (ab["first_activity_ms"], ab["last_activity_ms"]) == (1_000, 3_000)
    assert ab["raw_bytes"] == 20 + 3 + 3 + 5
    none = sessions["no-stamps"]
    assert none["turn_count"] == 1
    assert (none["first_activity_ms"], none["last_activity_ms"]) == (None, None)

    # The report carries the same rows, and the partition key leads back to the session.
    assert {r["session_id"]: r["partition_key"] for r in report.sessions} == keys
    assert db.sessions.session_by_partition(keys["a,b"])["session_id"] == "a,b"
    assert db.sessions.partition_keys() == sorted(keys.values())


# --- batching and discovery ----------------------------------------------------------------


class CountingSink:
    """The real store's ingest writes, with a count of the write calls (to prove the batches really
    were small)."""

    def __init__(self, ingest):
        self.ingest = ingest
        self.turn_batches: list[int] = []

    def write_turns(self, rows):
        if rows:
            self.turn_batches.append(len(rows))
        return self.ingest.write_turns(rows)

    def __getattr__(self, name):
        return getattr(self.ingest, name)


def test_more_lines_than_a_batch_ingest_every_row_exactly_once(db, tmp_path, monkeypatch):
    monkeypatch.setattr(ingest_module, "BATCH_ROWS", 3)
    lines = []
    for i in range(11):
        # s-early's turns all sit in the first batch: it must still get its sessions row.
        session = "s-early" if i < 3 else "s-batch" if i % 2 else "s-other"
        lines.append(memory_row(f"t{i:02d}", session, 1_000 + i, with_embedding=i < 3))
        if i in (4, 8):
            lines.append("{broken")
    # The same id again, in a later batch: one row, the later line's content; line 2 is superseded.
    lines.append(memory_row("t01", "s-early", 1_001, document="t01 again"))
    path = write_jsonl(tmp_path / "memory-backup-batches.jsonl", lines)
    sink = CountingSink(db.ingest)
    monkeypatch.setattr(db, "ingest", sink)

    report = ingest_paths([path], db)

    assert len(sink.turn_batches) >= 4 and max(sink.turn_batches) <= 3
    counts = rows(db, "SELECT count(*) AS n, count(DISTINCT id) AS d FROM turns")[0]
    assert counts == {"n": 11, "d": 11}
    assert turns_by_id(db)["t01"]["document"] == "t01 again"
    assert turns_by_id(db)["t01"]["source_line"] == 14
    reasons = {r["line_no"]: r["reason"] for r in rows(db, "SELECT line_no, reason FROM rejects")}
    assert sorted(reasons) == [2, 6, 11]
    assert reasons[2].startswith("superseded:") and "line 14" in reasons[2]
    sessions = {r["session_id"]: r["turn_count"] for r in rows(db, "SELECT * FROM sessions")}
    assert sessions == {"s-early": 3, "s-batch": 4, "s-other": 4}
    assert (report.files[0].rows, report.files[0].rejects, report.files[0].superseded) == (11, 2, 1)
    assert report.turns == 11


@pytest.mark.parametrize("hold_bytes, opens", [(1 << 30, 1), (1, 4)])
def test_a_files_batches_share_one_connection_until_the_hold_is_spent(db, tmp_path, monkeypatch, hold_bytes, opens):
    """Each open of the file while writing is a close and a checkpoint later, which rewrites the
    last row group: one connection for the file's batches, let go every HOLD_BYTES of lines."""
    import duckdb

    monkeypatch.setattr(ingest_module, "BATCH_ROWS", 3)
    monkeypatch.setattr(ingest_module, "HOLD_BYTES", hold_bytes)
    path = write_jsonl(
        tmp_path / "memory-backup-hold.jsonl", [memory_row(f"t{i:02d}", "s", 1_000 + i) for i in range(12)]
    )
    db.migrate()
    connect, counted = duckdb.connect, []
    monkeypatch.setattr(duckdb, "connect", lambda *a, **k: counted.append(a) or connect(*a, **k))

    report = ingest_paths([path], db)

    # The file's opens, one for the manifest's rows of the files before, one for reading the
    # sessions back after it, and one for the file's manifest row when its last batch let go.
    assert len(counted) == opens + 2 + (hold_bytes == 1)
    assert report.turns == 12 and rows(db, "SELECT count(*) AS n FROM turns")[0]["n"] == 12


@pytest.mark.parametrize("hold_seconds, opens", [(3600.0, 1), (0.0, 4)])
def test_a_folders_files_share_one_connection_until_it_is_held_too_long(db, tmp_path, monkeypatch, hold_seconds, opens):
    """A connection a file paid DuckDB's attach and a checkpoint for each file of a folder of many
    small logs; the one connection is let go between files once held HOLD_SECONDS, so that other
    processes write in between."""
    import duckdb

    monkeypatch.setattr(ingest_module, "HOLD_SECONDS", hold_seconds)
    for i in range(4):
        write_jsonl(tmp_path / "in" / f"memory-backup-{i}.jsonl", [memory_row(f"t{i}", f"s{i}", 1_000 + i)])
    db.migrate()
    connect, counted = duckdb.connect, []
    monkeypatch.setattr(duckdb, "connect", lambda *a, **k: counted.append(a) or connect(*a, **k))

    report = ingest_paths([tmp_path / "in"], db)

    # The files' opens, one for the manifest's rows of the files before and one for reading the
    # sessions back after them.
    assert len(counted) == opens + 2
    assert len(report.files) == 4 and rows(db, "SELECT count(*) AS n FROM sessions")[0]["n"] == 4


def test_a_folder_ingests_every_jsonl_in_it_and_in_its_sub_folders(db, tmp_path):
    bundle = write_bundle(tmp_path / "bundle")
    (bundle / "notes.txt").write_text("not a bundle file\n")
    write_jsonl(bundle / "nested" / "memory-backup-nested.jsonl", [memory_row("nested", "s9", 1)])

    report = ingest_paths([bundle], db)

    kinds = {Path(f.path).name: f.kind for f in report.files}
    assert kinds == {
        "graph-backup-2025.jsonl": "graph",
        "memory-backup-2025.jsonl": "memory",
        "memory-backup-nested.jsonl": "memory",
        "other-harness.jsonl": "turns",
        "summaries-backup-2025.jsonl": "summaries",
        "temporal-summary-backup-2025.jsonl": "temporal",
    }
    assert report.skipped == {"not-a-log-by-name": 1}  # notes.txt
    temporal = next(f for f in report.files if f.kind == "temporal")
    assert (temporal.lines, temporal.rows, temporal.rejects) == (0, 0, 0)
    assert sorted(turns_by_id(db)) == ["h1", "nested", "t1", "t2", "t3"]
    assert {r["session_id"] for r in rows(db, "SELECT session_id FROM sessions")} == {"s1", "s2", "s3", "s9"}
    assert rows(db, "SELECT count(*) AS n FROM imported_summaries")[0]["n"] == 1


def test_a_file_named_twice_is_ingested_once(db, tmp_path):
    bundle = write_bundle(tmp_path / "bundle")
    report = ingest_paths([bundle, bundle / "memory-backup-2025.jsonl", bundle], db)
    assert [Path(f.path).name for f in report.files].count("memory-backup-2025.jsonl") == 1
    # Read twice, each line superseded itself, and its turns counted twice.
    assert report.turns == 4 and report.superseded == 0 and report.rejects == 2


def test_a_missing_path_raises_and_ingests_nothing(db, tmp_path):
    good = write_jsonl(tmp_path / "memory-backup-ok.jsonl", [memory_row("t1", "s1", 1)])
    missing = tmp_path / "no-such-export"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        ingest_paths([good, missing], db)
    # Discovery fails before anything is written.
    assert rows(db, "SELECT count(*) AS n FROM turns")[0]["n"] == 0


# --- partition keys of odd session ids (issue 14.4) ------------------------------------------

ODD_SESSION_IDS = [
    "a.b", "a_b-2e7336dc8e",  # a safe id that is the hashed key of `a.b`
    "a_b-2e7336dc8e-a2f4eb30e6",  # ... and the hashed key of that one
    "a,b", "a_b", "a:b", "a/b", "a\\b", "a b", " a", "a ", "a\tb", "a\nb", "a;b", "a|b", "a=b", "%2F",
    "'q'", '"dq"', "{}", "null", "0", "-", "_", ".", "..",
    "日本語", "emoji 😀", "é", "e\u0301", "ß", "SS", "Ab", "aB", "ab", "AB",  # unicode, case only
    "-e3b0c44298",  # the hashed key of the empty id
    "-0123456789", "run-1700000000", "run_x-1700000000",
    "x" * 64, "x" * 65, "x" * 200, "x" * 200 + "y", "x" * 53 + "-0123456789", "x" * 52 + ".",
]  # fmt: skip


def test_odd_session_ids_get_distinct_dagster_safe_keys(db, tmp_path):
    from dagster import instance_for_test

    from digest.turns import partition_key

    assert partition_key("a.b") == "a_b-2e7336dc8e"
    keys = {sid: partition_key(sid) for sid in ODD_SESSION_IDS}
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", k) for k in keys.values()), keys
    assert len(set(keys.values())) == len(ODD_SESSION_IDS)
    # Safe ids keep their keys, unless some other id could hash to them.
    kept = {sid for sid, k in keys.items() if k == sid}
    assert {"a_b", "run-1700000000", "-", "_", "0", "SS", "Ab", "aB", "ab", "AB", "x" * 64} <= kept
    assert not kept & {"a_b-2e7336dc8e", "a_b-2e7336dc8e-a2f4eb30e6", "-e3b0c44298", "-0123456789", "run_x-1700000000"}

    # Through the ingest: every session gets its row (one UNIQUE clash used to abort them all) ...
    path = write_jsonl(
        tmp_path / "memory-backup-odd.jsonl",
        [memory_row(f"t{i}", sid, i, with_embedding=False) for i, sid in enumerate(ODD_SESSION_IDS)],
    )
    report = ingest_paths([path], db)
    assert report.rejects == 0 and report.turns == len(ODD_SESSION_IDS)
    stored = {r["session_id"]: r["partition_key"] for r in rows(db, "SELECT * FROM sessions")}
    assert stored == keys
    assert all(db.sessions.session_by_partition(k)["session_id"] == sid for sid, k in keys.items())
    # ... and Dagster takes every key as a partition.
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("sessions", list(keys.values()))
        assert sorted(instance.get_dynamic_partitions("sessions")) == sorted(keys.values())


# --- every line accounted for (issue 14.7) ---------------------------------------------------


def test_a_repeated_turn_id_keeps_the_later_line_and_counts_the_earlier_as_superseded(db, tmp_path):
    first = write_jsonl(
        tmp_path / "bundle" / "memory-backup-1.jsonl",
        [
            memory_row("t1", "s1", 1, document="first"),
            memory_row("t2", "s1", 2),
            memory_row("t1", "s1", 3, document="second"),
        ],
    )
    second = write_jsonl(tmp_path / "bundle" / "memory-backup-2.jsonl", [memory_row("t2", "s2", 4, document="moved")])

    report = ingest_paths([tmp_path / "bundle"], db)

    stored = turns_by_id(db)
    assert report.turns == len(stored) == 2  # once 4, over-counting the two superseded lines
    assert (stored["t1"]["document"], stored["t1"]["source_line"]) == ("second", 3)
    assert (stored["t2"]["session_id"], stored["t2"]["source_file"]) == ("s2", str(second.resolve()))
    f1, f2 = report.files
    assert (f1.lines, f1.rows, f1.superseded, f1.rejects) == (3, 1, 2, 0)
    assert (f2.lines, f2.rows, f2.superseded) == (1, 1, 0)
    assert report.superseded == 2 and report.rejects == 0
    reasons = {(r["source_file"], r["line_no"]): r["reason"] for r in rows(db, "SELECT * FROM rejects")}
    assert reasons == {
        (
            str(first.resolve()),
            1,
        ): f"superseded: turn id 't1' comes again at line 3 of {first.resolve()}, which is kept",
        (
            str(first.resolve()),
            2,
        ): f"superseded: turn id 't2' comes again at line 1 of {second.resolve()}, which is kept",
    }
    # s1 lost t2 to s2 within the ingest: both rows count what they hold.
    assert {s["session_id"]: s["turn_count"] for s in report.sessions} == {"s1": 1, "s2": 1}


def test_a_turn_moved_to_another_session_refreshes_or_removes_the_session_it_left(db, tmp_path):
    write_jsonl(
        tmp_path / "memory-backup-1.jsonl",
        [memory_row("t1", "s1", 1), memory_row("t2", "s1", 2), memory_row("t3", "s2", 3)],
    )
    ingest_paths([tmp_path / "memory-backup-1.jsonl"], db)
    before = {r["session_id"]: r for r in rows(db, "SELECT * FROM sessions")}

    moved = write_jsonl(tmp_path / "memory-backup-2.jsonl", [memory_row("t1", "s2", 1)])
    report = ingest_paths([moved], db)

    after = {r["session_id"]: r for r in rows(db, "SELECT * FROM sessions")}
    assert (after["s1"]["turn_count"], after["s2"]["turn_count"]) == (1, 2)
    assert after["s1"]["input_revision"] != before["s1"]["input_revision"]
    assert after["s1"]["input_revision"] == input_revision(canonical_order(db.sessions.load_turns(["s1"])))
    assert report.emptied == []

    # The last turn leaves too: the empty session's row goes, rather than stay pending for ever.
    last = write_jsonl(tmp_path / "memory-backup-3.jsonl", [memory_row("t2", "s3", 2)])
    report = ingest_paths([last], db)
    assert report.emptied == ["s1"]
    assert {r["session_id"]: r["turn_count"] for r in rows(db, "SELECT * FROM sessions")} == {"s2": 2, "s3": 1}
    assert sorted(db.summaries.pending_summary_keys()) == ["s2", "s3"]


def write_raw(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_invalid_utf8_is_rejected_not_replaced(db, tmp_path):
    line = b'{"id": "t-%s", "metadata": {"sessionId": "s1", "timestamp": 1}, "document": "d"}\n'
    path = write_raw(
        tmp_path / "memory-backup-bytes.jsonl",
        (line % b"\xff") + (line % b"\xfe") + (line % "ok-é".encode()) + (line % b"\xc3"),  # \xc3 starts é, cut short
    )
    report = ingest_paths([path], db)

    # Replaced, both ids were `t-\ufffd`: one turn, the other silently overwritten.
    assert sorted(turns_by_id(db)) == ["t-ok-é"]
    got = {r["line_no"]: r for r in rows(db, "SELECT * FROM rejects")}
    assert sorted(got) == [1, 2, 4] and report.rejects == 3
    assert got[1]["reason"] == "invalid-utf8: byte 0xff at column 11 (invalid start byte)"
    assert got[4]["reason"].startswith("invalid-utf8: byte 0xc3 at column 11")
    assert got[2]["excerpt"].startswith('{"id": "t-\ufffd"')


def test_a_raw_carriage_return_does_not_split_a_line(db, tmp_path):
    good = '{"id": "%s", "metadata": {"sessionId": "s1", "timestamp": 1}, "document": "d"}'
    path = write_raw(
        tmp_path / "memory-backup-cr.jsonl",
        (
            (good % "t1")
            + "\r\n"  # 1: a CRLF file
            + '{"id": "t-cr", "metadata": {"sessionId": "s1"}, "document": "one\rtwo"}\n'  # 2: raw CR in a string
            + (good % "t3").replace(", ", ",\r ")
            + "\n"  # 3: raw CRs between tokens are JSON whitespace
            + "\r\n"  # 4: blank
            + (good % "t5")
            + "\n"  # 5
        ).encode(),
    )
    report = ingest_paths([path], db)

    assert {t["id"]: t["source_line"] for t in turns_by_id(db).values()} == {"t1": 1, "t3": 3, "t5": 5}
    [reject] = rows(db, "SELECT * FROM rejects")
    assert reject["line_no"] == 2 and reject["reason"].startswith("json-parse: Invalid control character")
    [f] = report.files
    assert (f.lines, f.rows, f.rejects, f.skipped) == (5, 3, 1, 1)


def test_a_leading_bom_does_not_lose_the_first_line(db, tmp_path):
    path = write_jsonl(tmp_path / "memory-backup-bom.jsonl", [memory_row("t1", "s1", 1), memory_row("t2", "s1", 2)])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    simple = write_raw(
        tmp_path / "harness.jsonl", b'\xef\xbb\xbf{"id": "h1", "session_id": "s2", "prompt": "p", "response": "r"}\n'
    )
    report = ingest_paths([path, simple], db)
    assert report.rejects == 0 and sorted(turns_by_id(db)) == ["h1", "t1", "t2"]


def test_ids_with_lone_surrogate_escapes_are_rejected_never_merged(db, tmp_path):
    """Issue 22, defect 7: `"t-\\ud800"` and `"t-\\udbff"` both became `t-\\ufffd`, one turn (the other
    counted superseded), and session ids merged the same way. Such a line is rejected with its reason."""
    base = (
        '{"id": "%s", "metadata": {"sessionId": "%s", "prompt": "p", "thought": "t", "response": "r", "timestamp": %d}}'
    )
    path = write_jsonl(
        tmp_path / "memory-backup-ids.jsonl",
        [
            base % ("t-\\ud800", "s1", 1),  # 1
            base % ("t-\\udbff", "s1", 2),  # 2
            base % ("t-a", "s-\\udc00", 3),  # 3
            base % ("t-b", "s-\\udfff", 4),  # 4
            base % ("t-c", "s-\\ud83d\\ude00", 5),  # 5: a whole pair is a character, kept
            base % ("t-d", "s1", 6),  # 6
        ],
    )
    report = ingest_paths([path], db)
    reasons = {r["line_no"]: r["reason"] for r in rows(db, "SELECT line_no, reason FROM rejects")}
    assert sorted(reasons) == [1, 2, 3, 4]
    assert all(reason.startswith("lone-surrogate-id:") for reason in reasons.values()), reasons
    assert "metadata.sessionId" in reasons[3] and reasons[1].startswith("lone-surrogate-id: id ")
    assert sorted(turns_by_id(db)) == ["t-c", "t-d"]
    assert report.superseded == 0
    assert sorted(s["session_id"] for s in report.sessions) == ["s-\U0001f600", "s1"]


def test_graph_and_simple_turn_ids_with_lone_surrogates_are_rejected(db, tmp_path):
    path = write_jsonl(
        tmp_path / "turns-ids.jsonl",
        [
            '{"id": "x-\\ud800", "session_id": "s1", "document": "d"}',
            '{"id": "x-\\udbff", "session_id": "s1", "document": "d"}',
            '{"id": "x-1", "session_id": "s-\\ud800", "document": "d"}',
        ],
    )
    ingest_paths([path], db)
    reasons = [r["reason"] for r in rows(db, "SELECT reason FROM rejects ORDER BY line_no")]
    assert len(reasons) == 3 and all(r.startswith("lone-surrogate-id:") for r in reasons), reasons
    assert turns_by_id(db) == {}


def test_a_reject_of_a_line_later_kept_is_cleared(db, tmp_path):
    """Issue 22, defect 6: the file's last line read half-written is rejected; the completed file is
    ingested again and the line kept, and its reject must go (and `status` not count it)."""
    base = (
        '{"id": "%s", "metadata": {"sessionId": "s1", "prompt": "p", "thought": "t", "response": "r", "timestamp": %d}}'
    )
    path = tmp_path / "memory-backup-growing.jsonl"
    whole = [base % ("t-1", 1), base % ("t-2", 2), base % ("t-\u00e9", 3)]
    cut = whole[2].encode("utf-8")
    # Cut inside the 2-byte é: invalid UTF-8; then, on another read, cut mid-JSON.
    path.write_bytes((whole[0] + "\n" + whole[1] + "\n").encode() + cut[: cut.index(b"\xc3") + 1])
    ingest_paths([path], db)
    assert [r["reason"].split(":")[0] for r in rows(db, "SELECT reason FROM rejects")] == ["invalid-utf8"]
    path.write_bytes((whole[0] + "\n" + whole[1] + "\n").encode() + cut[:40])
    ingest_paths([path], db)
    assert [r["reason"].split(":")[0] for r in rows(db, "SELECT reason FROM rejects")] == ["json-parse"]
    path.write_text("\n".join(whole) + "\n", encoding="utf-8")
    report = ingest_paths([path], db)
    assert report.rejects == 0 and sorted(turns_by_id(db)) == ["t-1", "t-2", "t-\u00e9"]
    assert rows(db, "SELECT * FROM rejects") == []
    assert db.reports.status()["rejects"] == 0
    # A reject of a line that is still bad stays; one of another file is untouched.
    other = write_jsonl(tmp_path / "memory-backup-other.jsonl", ["not json"])
    ingest_paths([path, other], db)
    assert [r["line_no"] for r in rows(db, "SELECT line_no FROM rejects")] == [1]


# --- the store's size across holds ----------------------------------------------------------


def float32_rows(first: int, count: int, dimensions: int, seed: int) -> list[dict]:
    """Memory rows with float32-origin vectors (kept as FLOAT[]), ten turns a session."""
    rng = random.Random(seed)
    return [
        {
            "id": f"t{i:05d}",
            "embedding": [struct.unpack("f", struct.pack("f", rng.uniform(-1, 1)))[0] for _ in range(dimensions)],
            "metadata": {"sessionId": f"s{i // 10}", "timestamp": i, "type": "agent-interaction", "prompt": "p",
                         "thought": "t", "response": "r"},
        }
        for i in range(first, first + count)
    ]  # fmt: skip


def stored_vectors(db: DigestStore) -> dict[str, list[float]]:
    return {r["id"]: r["embedding_f32"] for r in rows(db, "SELECT id, embedding_f32 FROM turns")}


def test_a_store_written_in_many_holds_keeps_no_stale_copies_of_its_vectors(db, tmp_path, monkeypatch):
    """Each hold ends in a checkpoint, which rewrites the turns' last, partly filled row group and
    frees the old copy's blocks: with DuckDB's 122,880-row groups each hold rewrote every turn so far
    (BENCHMARKS §3.2), and here half the file was free blocks (22 of 47; 10 of 38 now)."""
    dimensions, turns = 256, 5_000
    monkeypatch.setattr(ingest_module, "BATCH_ROWS", 500)
    monkeypatch.setattr(ingest_module, "HOLD_BYTES", 1)  # every batch its own hold, and a checkpoint
    written = float32_rows(0, turns, dimensions, seed=5)
    report = ingest_paths([write_jsonl(tmp_path / "memory-backup-holds.jsonl", written)], db)

    assert report.turns == turns and report.vectors == turns
    assert stored_vectors(db) == {r["id"]: r["embedding"] for r in written}
    (size,) = rows(
        db,
        "SELECT used_blocks, free_blocks FROM pragma_database_size() WHERE database_name = current_database()",
    )
    assert size["free_blocks"] <= size["used_blocks"] / 2
    largest = rows(db, "SELECT max(count) AS n FROM pragma_storage_info('turns') WHERE column_name = 'id'")
    assert largest[0]["n"] <= ROW_GROUP_ROWS


def test_a_store_written_with_duckdbs_default_row_groups_takes_more_turns_exactly(db, tmp_path, monkeypatch):
    """A store from before ROW_GROUP_ROWS (opened by path: 122,880-row groups) is used as it is:
    the turns it holds stay, one updated by a later line, and the new ones come in beside them."""
    dimensions = 64
    first, second = float32_rows(0, 3_000, dimensions, seed=1), float32_rows(2_999, 2_000, dimensions, seed=2)
    with monkeypatch.context() as before:
        before.setattr(
            StoreFile, "_attach", lambda self, read_only: duckdb.connect(str(self.path), read_only=read_only)
        )
        ingest_paths([write_jsonl(tmp_path / "memory-backup-before.jsonl", first)], db)
    assert (
        rows(db, "SELECT max(count) AS n FROM pragma_storage_info('turns') WHERE column_name = 'id'")[0]["n"] == 3_000
    )

    ingest_paths([write_jsonl(tmp_path / "memory-backup-after.jsonl", second)], db)

    assert stored_vectors(db) == {r["id"]: r["embedding"] for r in first + second}
    assert rows(db, "SELECT count(*) AS n FROM turns")[0]["n"] == 4_999


# --- reading ahead of the writes ------------------------------------------------------------


def test_the_reader_runs_at_most_one_batch_ahead_of_the_writer_and_hands_over_its_error():
    finished = 0
    produced = []

    def batches():
        for i in range(6):
            # Two batches at most: this one, and the one being written (batch i - 1).
            assert finished >= i - 1
            produced.append(i)
            yield i
        raise OSError("the disk went away")

    written = []
    with pytest.raises(OSError, match="the disk went away"):
        for batch in ingest_module._read_ahead(batches()):
            written.append(batch)
            finished += 1
    assert written == produced == list(range(6))


def test_a_failed_write_stops_the_reader():
    produced = []

    def batches():
        for i in range(100):
            produced.append(i)
            yield i

    with pytest.raises(RuntimeError, match="write failed"):
        for batch in ingest_module._read_ahead(batches()):
            if batch == 2:
                raise RuntimeError("write failed")
    # The reader is stopped (joined) by then, having read at most one batch past the failed one.
    assert produced in ([0, 1, 2], [0, 1, 2, 3])
