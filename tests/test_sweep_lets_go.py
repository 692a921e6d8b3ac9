"""A sweep holds the store's file for its bookkeeping, a phase at a time, and lets it go for every
model call: another process writes the store while the sweep's summary and embedding calls wait on
their servers (the CLI in a subprocess, real HTTP, the writer a process of its own). The search
index's refresh after a sweep or an ingest opens the store once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from assets.search_index import search_index_events
from digest.prompts import SUMMARY_INSTRUCTIONS
from resources.model_clients.embeddings import EmbeddingClient
from tests.bundles import write_bundle
from tests.conftest import make_turns, project_free_environ
from tests.embedding_server import WORD, EmbeddingServer, vector
from tests.local_http import LocalServer, QuietHandler
from tests.model_server import FAITHFUL_SUMMARY, Behaviour, ModelServer
from tests.test_held_phases import WatchedClient, ingested_store

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "app.cli"]
# A write of another process: it waits this long for the file at most, then fails.
WRITER = """
import sys
from resources.store.connection import StoreFile

with StoreFile(sys.argv[1], lock_wait_s=float(sys.argv[2])).transaction() as con:
    con.execute("CREATE TABLE IF NOT EXISTS written_meanwhile (during VARCHAR)")
    con.execute("INSERT INTO written_meanwhile VALUES (?)", [sys.argv[3]])
"""
LOCK_WAIT_S = 10.0


class WriterDuringCalls:
    """At each model call, before it answers, another process writes the store: its exit codes by call."""

    def __init__(self, db: Path):
        self.db = db
        self.writes: list[tuple[str, int, str]] = []

    def write(self, call: str) -> None:
        done = subprocess.run(
            [sys.executable, "-c", WRITER, str(self.db), str(LOCK_WAIT_S), call],
            cwd=ROOT,
            env={**project_free_environ(), "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.writes.append((call, done.returncode, done.stderr[-500:]))


def embedding_server(writer: WriterDuringCalls) -> LocalServer:
    """An OpenAI-compatible embeddings server (`tests.embedding_server`'s vectors) that has the writer
    write before each answer."""

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            writer.write("embedding")
            texts = body["input"]
            data = [{"object": "embedding", "index": i, "embedding": vector(t, 16)} for i, t in enumerate(texts)]
            tokens = sum(len(WORD.findall(t)) for t in texts)
            usage = {"prompt_tokens": tokens, "total_tokens": tokens}
            self.send_json(200, {"object": "list", "data": data, "model": body["model"], "usage": usage})

    return LocalServer(Handler)


def test_another_process_writes_the_store_while_a_sweeps_summary_and_embedding_calls_wait(tmp_path):
    home = tmp_path / "home"
    writer = WriterDuringCalls(home / "digest.duckdb")

    def script(received) -> Behaviour:
        if SUMMARY_INSTRUCTIONS[:40] in received.prompt:
            writer.write("summary")
            return Behaviour.reply(FAITHFUL_SUMMARY)  # judged ok: its summary is embedded after the run
        return Behaviour.fitting(received)

    bundle = write_bundle(tmp_path / "bundle", make_turns("held", 3))
    with ModelServer(script) as model, embedding_server(writer) as embeddings:
        env = {
            **project_free_environ(),
            "PYTHONPATH": str(ROOT),
            "DIGEST_HOME": str(home),
            "DIGEST_MODEL_PROVIDER": "openai",
            "DIGEST_MODEL_URL": model.url,
            "DIGEST_EMBED_PROVIDER": "openai",
            "DIGEST_EMBED_URL": embeddings.url,
            "DIGEST_EMBED_MODEL": "test-embed",
        }

        def cli(*args: str) -> dict:
            done = subprocess.run(
                [*CLI, *args, "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, done.stderr[-3000:]
            return json.loads(done.stdout)

        ingested = cli("ingest", str(bundle))
        assert ingested["search_index"]["vectors_embedded"] > 0  # the ingest's own pass: its calls let go too
        during_ingest = len(writer.writes)
        swept = cli("sweep")
    assert swept["summarized"] == 1 and swept["failed"] == 0
    assert swept["search_index"]["vectors_embedded"] > 0  # the new summary's vector, after the run
    calls = [call for call, _, _ in writer.writes[during_ingest:]]
    assert "summary" in calls and "embedding" in calls
    failed = [(call, err) for call, code, err in writer.writes if code != 0]
    assert failed == [], failed


def test_a_search_refresh_opens_the_store_once_and_lets_it_go_for_each_embedding_call(tmp_path, migrated_store_file):
    store, file = ingested_store(tmp_path, migrated_store_file)
    with EmbeddingServer(dim=16) as server:
        client = WatchedClient(EmbeddingClient("openai", server.url, "test-embed"), file)
        search_index_events(store, 600.0, None, client, embed_documents=100, embed_seconds=60)
        # One open, then one again after the call (the pass writes its vectors when the model answers).
        assert client.held_during_calls == [False] and file.opens == 2
        file.opens = 0
        [materialization, _] = search_index_events(store, 600.0, None, client, 100, 60)
    assert file.opens == 1 and client.held_during_calls == [False]  # nothing left to embed: no call
    assert materialization.metadata["sessions_behind"].value == 0
