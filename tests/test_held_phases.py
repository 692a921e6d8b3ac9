"""The bookkeeping a sweep, a sensor tick and `backlog` do around their runs opens the store's file
once a phase: an open and its closing checkpoint cost more than the reads (a sweep with nothing to do
opened it 26 times). The embedding pass lets its connection go for each call to the model. A real
DuckDB file and a local embeddings server over real HTTP."""

from __future__ import annotations

from pathlib import Path

import duckdb

from assets.search_index import search_index_events
from assets.work.backlog import measure
from digest.ingest import ingest_paths
from digest.scheduling import now_ms
from digest.settings import load_settings
from resources.model_clients.embeddings import EmbeddingClient
from resources.store import DigestStore, StoreFile
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.embedding_server import EmbeddingServer


class CountedFile(StoreFile):
    """A store file that counts the connections it opens."""

    opens = 0

    def _attach(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        self.opens += 1
        return super()._attach(read_only)


class WatchedClient:
    """An embedding client that notes at each call whether the store's file has a connection held."""

    def __init__(self, client: EmbeddingClient, file: StoreFile):
        self.client, self.file, self.model = client, file, client.model
        self.held_during_calls: list[bool] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.held_during_calls.append(any(held.con is not None for held in self.file._held.values()))
        return self.client.embed(texts)


def _ingested(tmp_path: Path) -> tuple[DigestStore, CountedFile]:
    file = CountedFile(tmp_path / "digest.duckdb")
    store = DigestStore(file)
    store.migrate()
    ingest_paths([write_bundle(tmp_path / "bundle", make_turns("grid", 3) + make_turns("other", 2))], store)
    file.opens = 0
    return store, file


def test_the_backlogs_reads_open_the_store_once(tmp_path):
    store, file = _ingested(tmp_path)
    settings = load_settings({"DIGEST_HOME": str(tmp_path), "DIGEST_MODEL_PROVIDER": "openai"})
    measured = measure(store, settings.fleet, settings.circuit, settings.sweep, now_ms(), "m")
    assert file.opens == 1
    assert measured.drain.pending == 2 and measured.vectors["pending"] == 7


def test_a_search_refresh_opens_the_store_once_and_lets_it_go_for_each_embedding_call(tmp_path):
    store, file = _ingested(tmp_path)
    with EmbeddingServer(dim=16) as server:
        client = WatchedClient(EmbeddingClient("openai", server.url, "test-embed"), file)
        search_index_events(store, 600.0, None, client, embed_documents=100, embed_seconds=60)
        # One open, then one again after each call (the pass writes its vectors when the model answers).
        assert client.held_during_calls == [False] and file.opens == 2
        assert store.search_vectors.counts("test-embed")["pending"] == 0
        file.opens = 0
        [materialization, _] = search_index_events(store, 600.0, None, client, 100, 60)
    assert file.opens == 1 and client.held_during_calls == [False]  # nothing left to embed: no call
    assert materialization.metadata["sessions_behind"].value == 0
