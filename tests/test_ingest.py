"""Streaming ingest end to end: real JSONL files under tmp_path into a real DuckDB file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from digest.ingest import ingest_paths
from digest.turns import compose_document
from resources.store import DigestStore

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
