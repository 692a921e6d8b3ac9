"""`session-digest mcp` through the official SDK's own client over stdio (`stdio_client` +
`ClientSession`), against a real store file holding the samples: the tools listed read-only, each
called, a tool error answered as one (`isError`) with the server serving on, and a writer writing
between calls while the server runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from digest.ingest import ingest_paths
from resources.store import DigestStore
from tests.bundles import samples_home
from tests.conftest import project_free_environ

ROOT = Path(__file__).resolve().parents[1]
CLAUDE = "0b6c3f1e-5a2d-4c8e-9f41-7d2e8a1c5b90"
CODEX = "01936a4e-7c1b-7d42-9a0e-3b5f2c8d1e67"
SUMMARIZED = "d23f0824-128b-4f33-8c5c-7fd0a6a3a450"  # the bundle's session with the export's summary
TOOLS = {
    "query_summaries", "query_raw_memories", "get_session_memories", "get_all_summaries", "find_sessions_by_file",
    "blame_file", "why_commit",
}  # fmt: skip


@pytest.fixture
def home(tmp_path) -> Path:
    return samples_home(tmp_path)


def server(home: Path) -> StdioServerParameters:
    env = project_free_environ()
    return StdioServerParameters(
        command=sys.executable, args=["-m", "app.cli", "mcp"], env={**env, "DIGEST_HOME": str(home)}, cwd=ROOT
    )


async def call(session: ClientSession, tool: str, **arguments) -> tuple[bool, dict | str]:
    """(isError, the answer: its JSON, or the error's text)."""
    result = await session.call_tool(tool, arguments)
    text = "".join(part.text for part in result.content)
    return result.is_error, text if result.is_error else json.loads(text)


def test_the_tools_answer_through_the_sdk_client_and_errors_keep_it_serving(home):
    async def scenario(errlog) -> None:
        async with stdio_client(server(home), errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = (await session.list_tools()).tools
                assert {t.name for t in listed} == TOOLS
                assert all(t.annotations.read_only_hint and not t.annotations.destructive_hint for t in listed)
                schema = next(t for t in listed if t.name == "query_summaries").input_schema
                assert schema["required"] == ["query"] and schema["properties"]["nResults"]["maximum"] == 100

                error, found = await call(session, "query_summaries", query="grid selection sort")
                assert not error and found["query"] == "grid selection sort"
                top = found["results"][0]
                assert top["id"] == f"summary_{SUMMARIZED}" and top["sessionId"] == SUMMARIZED
                assert top["category"] == "bugfix" and top["sourceTier"] == "raw" and top["navigationIndex"] is False
                assert top["relevanceScore"] > 0 and top["timestamp"].endswith("Z") and top["technologies"]
                error, found = await call(session, "query_summaries", query="grid selection", category="feature")
                assert not error and found["count"] == 0

                error, found = await call(session, "query_raw_memories", query="pytest test_server", nResults=3)
                assert not error
                claude = next(r for r in found["results"] if r["sessionId"] == CLAUDE)
                # A matched turn is a cited snippet; its session is named once, by its card line.
                assert claude["cite"] == f"{CLAUDE}:{claude['id']}" and 0 < len(claude["snippet"]) <= 200
                assert "response" not in claude and claude["relevanceScore"] > 0
                assert found["sessions"][CLAUDE]["line"].startswith("Asked: The dev server ignores PORT")
                assert len(found["results"]) <= 3 and len(json.dumps(found)) < 3_000
                # `full`: the turns' texts; the Claude Code turn's 89 KB response cut with a marker.
                error, whole = await call(
                    session, "query_raw_memories", query="pytest test_server", nResults=3, full=True
                )
                claude = next(r for r in whole["results"] if r["sessionId"] == CLAUDE)
                assert not error and "…[cut: " in claude["response"] and len(json.dumps(whole)) < 12_000
                # A budget caps any answer, and says what it left out.
                error, capped = await call(session, "query_raw_memories", query="pytest test_server", maxTokens=100)
                assert not error and capped["count"] == 0 and "maxTokens 100" in capped["truncated"]
                error, text = await call(session, "query_raw_memories", query="pytest", nresults=3)
                assert error and "takes no 'nresults'" in text and "query, nResults, sessionId" in text
                error, empty = await call(session, "query_summaries", query="zebra quokka")
                assert not error and empty["count"] == 0 and "hold these words" in empty["why"]
                error, found = await call(session, "query_raw_memories", query="DATABASE_URL", sessionId=CODEX)
                assert not error and {r["sessionId"] for r in found["results"]} == {CODEX}

                error, page = await call(session, "get_session_memories", sessionId=CLAUDE, limit=1, offset=1)
                assert not error and (page["count"], page["total"]) == (1, 2)
                assert page["memories"][0]["id"] == "7c0e000b-1d2b-4f5a-8c3e-a1b2c3d4e5f6"
                assert page["memories"][0]["toolsUsed"] == ["Edit"]

                # Every session's account: the export's summary for one, a card for the other eleven.
                error, listing = await call(session, "get_all_summaries")
                assert not error and listing["total"] == 12
                accounts = {s["sessionId"]: s for s in listing["summaries"]}
                assert (accounts[SUMMARIZED]["account"], accounts[SUMMARIZED]["sourceTier"]) == ("summary", "raw")
                card = accounts[CODEX]
                assert (card["account"], card["sourceTier"], card["memoryCount"]) == ("card", "facts", 2)
                # The card's line past its title, which the result names already; no verdict, no empty field.
                assert card["title"].startswith("Why does `make test` fail") and "ci.yml" in card["summary"]
                assert "verdict" not in card and "category" not in card and None not in card.values()
                error, listing = await call(session, "get_all_summaries", category="refactoring")
                assert not error and (listing["count"], listing["total"]) == (0, 0)  # applied, unlike upstream

                error, files = await call(session, "find_sessions_by_file", path="ci.yml")
                assert not error and [r["sessionId"] for r in files["results"]] == [CODEX]
                assert files["results"][0]["kinds"] == ["file-edit"]
                error, blamed = await call(session, "blame_file", path="ci.yml")
                assert not error and [r["sessionId"] for r in blamed["results"]] == [CODEX]
                error, made = await call(session, "why_commit", commit="9b3c7d0")
                assert not error and made["results"][0]["commit"].startswith("9b3c7d0 fix: Force logging config")
                error, text = await call(session, "why_commit", commit="not-a-hash")
                assert error and "is no commit hash" in text

                # Errors: answered as tool errors, with the reason.
                error, text = await call(session, "query_raw_memories", query="the of and")
                assert error and "only common words" in text
                error, text = await call(session, "get_session_memories", sessionId="no-such-session")
                assert error and "no session 'no-such-session'" in text
                error, text = await call(session, "query_summaries", query="x", nResults=500)
                assert error and "nResults" in text

                # A writer writes while the server runs: it holds no connection between calls.
                log = home / "extra.jsonl"
                log.write_text(
                    json.dumps(
                        {
                            "type": "assistant",
                            "sessionId": "extra",
                            "uuid": "e1",
                            "timestamp": "2026-11-30T10:00:00Z",
                            "message": {
                                "content": [
                                    {
                                        "type": "tool_use",
                                        "name": "Edit",
                                        "input": {"file_path": "/w/src/app/settings.py"},
                                    }
                                ]
                            },
                        }
                    )  # fmt: skip
                    + "\n",
                    encoding="utf-8",
                )
                writer = DigestStore(home / "digest.duckdb")
                assert ingest_paths([log], writer).turns == 1

                # And the server still answers, the new turn's facts among them.
                error, files = await call(session, "find_sessions_by_file", path="settings.py")
                assert not error and [r["sessionId"] for r in files["results"]] == ["extra"]

    # The server's log (a line per tool error) goes to a file, not into the test's output.
    with (home / "server.log").open("w") as errlog:
        anyio.run(scenario, errlog)
    assert "Tool 'get_session_memories' failed" in (home / "server.log").read_text()
