"""The backlog's reads (a sweep's, a sensor tick's, `session-digest backlog`'s) open the store's file
once: an open and its closing checkpoint cost more than the reads (a sweep with nothing to do opened
it 26 times). The embedding pass lets a held connection go for each call to the model. A real DuckDB
file and a local embeddings server over real HTTP (`test_sweep_lets_go` has the search refresh's)."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from assets.work.backlog import measure
from digest.ingest import ingest_paths
from digest.scheduling import now_ms
from digest.settings import load_settings
from resources.embedding_pass import embed_pending
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


def ingested_store(tmp_path: Path, migrated_store_file: Path) -> tuple[DigestStore, CountedFile]:
    """The samples of two sessions ingested into a copy of the migrated store (a migrate is some 40
    ms of CPU), opened and closed as production opens them: nothing held."""
    file = CountedFile(tmp_path / "digest.duckdb")
    shutil.copyfile(migrated_store_file, file.path)
    store = DigestStore(file)
    ingest_paths([write_bundle(tmp_path / "bundle", make_turns("grid", 3) + make_turns("other", 2))], store)
    file.opens = 0
    return store, file


def test_the_backlogs_reads_open_the_store_once(tmp_path, migrated_store_file):
    store, file = ingested_store(tmp_path, migrated_store_file)
    settings = load_settings({"DIGEST_HOME": str(tmp_path), "DIGEST_MODEL_PROVIDER": "openai"})
    measured = measure(store, settings.fleet, settings.circuit, settings.sweep, now_ms(), "m")
    assert file.opens == 1
    assert measured.drain.pending == 2 and measured.vectors["pending"] == 7


def test_the_embedding_pass_lets_a_held_connection_go_for_each_call(tmp_path, migrated_store_file):
    store, file = ingested_store(tmp_path, migrated_store_file)
    with EmbeddingServer(dim=16) as server, file.held():
        client = WatchedClient(EmbeddingClient("openai", server.url, "test-embed"), file)
        done = embed_pending(store.search_vectors, client, max_documents=100, max_seconds=60, batch=4)
    assert (done.calls, done.embedded, done.pending_after) == (2, 7, 0)
    # One open for the pass, then one again after each call (its vectors are written when the model answers).
    assert client.held_during_calls == [False, False] and file.opens == 3
