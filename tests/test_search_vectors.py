"""The search index's vectors on a real DuckDB file, made over real HTTP by the local embeddings
server: what is pending (cards and summaries first, in chunks within the model's window, again only
when a text changed), the budgeted pass, the model stamp and a model change, the nearest documents,
a failing host that costs the pass, not the refresh, the hybrid only once the vectors cover the
search, the fusion that keeps keyword's clear leaders first and adds few sessions by meaning alone, and
the vectors' backlog in `backlog`."""

from __future__ import annotations

import pytest

from digest.embeddings import KEEP_FIRST_MARGIN, VECTOR_ONLY_MAX, EmbeddingModelMismatch
from digest.ingest import ingest_paths
from resources.embedding_pass import embed_pending
from resources.hybrid_search import MEANING_ONLY_HITS, MEANING_ONLY_NOTICE, search_sessions, search_turns
from resources.model_clients.embeddings import EmbeddingClient
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.embedding_server import EmbeddingServer, vector
from tests.test_imported_summaries import exported_summary, write_summaries


@pytest.fixture
def ingested(store, tmp_path):
    turns = make_turns("grid", 3) + make_turns("other", 2)
    ingest_paths([write_bundle(tmp_path / "bundle", turns)], store)
    return store


def _set_prompt(store, turn_id: str, prompt: str) -> None:
    with store.file.transaction() as con:
        # Both indexes read a turn's document.
        con.execute("UPDATE turns SET prompt = ?, document = ? WHERE id = ?", [prompt, prompt, turn_id])


def test_a_pass_embeds_within_its_budget_and_the_rest_stays_pending(ingested):
    with EmbeddingServer(dim=16) as server:
        client = EmbeddingClient("ollama", server.url, "test-embed")
        first = embed_pending(ingested.search_vectors, client, max_documents=3, max_seconds=60, batch=2)
        assert (first.embedded, first.calls, first.pending_after, first.error) == (3, 2, 4, None)
        second = embed_pending(ingested.search_vectors, client, max_documents=100, max_seconds=60)
    assert (second.embedded, second.pending_after) == (4, 0)
    assert ingested.search_vectors.stamp().model == "test-embed"
    assert ingested.search_vectors.stamp().dim == 16
    assert ingested.search_vectors.counts("test-embed") == {
        "model": "test-embed", "stamped_model": "test-embed", "documents": 7, "embedded": 7, "pending": 0,
        "pending_accounts": 0,
    }  # fmt: skip


def test_a_changed_text_is_embedded_again_and_nothing_else(ingested):
    with EmbeddingServer(dim=16) as server:
        client = EmbeddingClient("openai", server.url, "test-embed")
        embed_pending(ingested.search_vectors, client, max_documents=100, max_seconds=60)
        _set_prompt(ingested, "grid-t001", "reconnect the websocket after a drop")
        assert [d.doc_key for d in ingested.search_vectors.pending("test-embed", 10)] == ["turn:grid-t001"]
        embed_pending(ingested.search_vectors, client, max_documents=100, max_seconds=60)
        assert server.requests[-1]["input"][0].startswith("reconnect the websocket")
    hits = ingested.search_vectors.nearest("test-embed", vector("retry the socket", 16), limit=2)
    assert hits[0].doc_key == "turn:grid-t001" and hits[0].session_id == "grid"


def test_a_query_by_another_model_is_refused_until_the_new_model_covers_the_index(ingested):
    with EmbeddingServer(dim=16) as server:
        old = EmbeddingClient("ollama", server.url, "old-embed")
        embed_pending(ingested.search_vectors, old, max_documents=100, max_seconds=60)
        new = EmbeddingClient("ollama", server.url, "new-embed")
        embed_pending(ingested.search_vectors, new, max_documents=3, max_seconds=60)
        with pytest.raises(EmbeddingModelMismatch, match="made by old-embed"):
            ingested.search_vectors.nearest("new-embed", vector("grid", 16), limit=3)
        assert ingested.search_vectors.nearest("old-embed", vector("grid", 16), limit=3)  # the old still serves
        embed_pending(ingested.search_vectors, new, max_documents=100, max_seconds=60)
    assert ingested.search_vectors.stamp().model == "new-embed"
    assert ingested.search_vectors.nearest("new-embed", vector("grid", 16), limit=3)
    with ingested.file.connect() as con:
        assert con.execute("SELECT DISTINCT model FROM search_vectors").fetchall() == [("new-embed",)]


def test_a_failing_host_ends_the_pass_with_its_reason_and_keeps_what_was_made(ingested):
    with EmbeddingServer(dim=16) as server:
        client = EmbeddingClient("openai", server.url, "test-embed")
        embed_pending(ingested.search_vectors, client, max_documents=2, max_seconds=60)
        server.fault = "short"
        failed = embed_pending(ingested.search_vectors, client, max_documents=100, max_seconds=60)
    assert failed.embedded == 0 and "ProviderError" in failed.error and failed.pending_after == 5
    assert ingested.search_vectors.counts("test-embed")["embedded"] == 2


def test_a_junk_summary_gets_no_vector_and_a_removed_document_loses_its_own(ingested, tmp_path):
    summary = exported_summary("grid", memoryCount=3)
    ingest_paths([write_summaries(tmp_path / "summaries", [summary])], ingested)
    with ingested.file.transaction() as con:  # "Summary of grid." is content-free by the verdict
        con.execute("UPDATE session_summaries SET verdict = 'ok' WHERE session_id = 'grid'")
    kinds = [d.kind for d in ingested.search_vectors.pending("m", 10)]
    assert sorted(kinds[:3]) == ["card", "card", "summary"]  # the accounts first, then the turns
    assert set(kinds[3:]) == {"turn"}
    with ingested.file.transaction() as con:
        con.execute("UPDATE session_summaries SET verdict = 'content-free' WHERE session_id = 'grid'")
    with EmbeddingServer(dim=16) as server:
        embed_pending(ingested.search_vectors, EmbeddingClient("ollama", server.url, "m"), 100, 60)
    assert not [d for d in ingested.search_vectors.nearest("m", vector("grid", 16), 50) if d.kind == "summary"]
    with ingested.file.transaction() as con:
        con.execute("DELETE FROM turns WHERE session_id = 'other'")
    assert ingested.search_vectors.prune() == 2


def _two_sessions(store, tmp_path):
    turns = make_turns("ws", 2) + make_turns("orm", 2)
    ingest_paths([write_bundle(tmp_path / "b2", turns)], store)
    _set_prompt(store, "ws-t001", "fixed the websocket reconnect loop in the client")
    _set_prompt(store, "orm-t000", "we decided to drop the ORM for plain SQL")
    store.search.refresh()


def test_hybrid_search_finds_a_paraphrase_keyword_search_misses_and_keeps_keyword_hits(store, tmp_path):
    _two_sessions(store, tmp_path)
    with EmbeddingServer(dim=64) as server:
        client = EmbeddingClient("ollama", server.url, "test-embed")
        embed_pending(store.search_vectors, client, 100, 60)
        assert search_sessions(store, None, "repair socket retry").hits == []  # no word in common
        found = search_sessions(store, client, "repair socket retry", limit=3)
        # No document holds a word of it: the nearest by meaning, said to be so.
        assert (found.mode, found.notice) == ("hybrid", MEANING_ONLY_NOTICE)
        assert found.hits[0].session_id == "ws" and found.hits[0].matches[0].turn_id == "ws-t001"
        lexical = search_sessions(store, client, "ORM", limit=1)
        assert [h.session_id for h in lexical.hits] == ["orm"] and lexical.notice is None
        turns = search_turns(store, client, "repair socket retry", limit=1)
        assert [(h.session_id, h.turn_id) for h in turns.hits] == [("ws", "ws-t001")]
        assert "websocket reconnect" in turns.hits[0].snippet


def test_a_query_no_document_holds_a_word_of_shows_only_the_few_nearest_and_says_so(store, tmp_path):
    for i in range(MEANING_ONLY_HITS + 2):
        ingest_paths([write_bundle(tmp_path / f"b{i}", make_turns(f"s{i}", 2))], store)
    store.search.refresh()
    with EmbeddingServer(dim=64) as server:
        client = EmbeddingClient("ollama", server.url, "test-embed")
        embed_pending(store.search_vectors, client, 100, 60)
        sessions = search_sessions(store, client, "zzqxj vvkwp", limit=10)
        turns = search_turns(store, client, "zzqxj vvkwp", limit=10)
    assert len(sessions.hits) == MEANING_ONLY_HITS and sessions.notice == MEANING_ONLY_NOTICE
    assert len(turns.hits) == MEANING_ONLY_HITS and turns.notice == MEANING_ONLY_NOTICE


def test_hybrid_search_falls_back_to_keywords_with_the_reason(store, tmp_path):
    _two_sessions(store, tmp_path)
    before = search_sessions(store, EmbeddingClient("ollama", "http://x", "m"), "ORM")
    assert before.notice.startswith("keyword results only: 2 of 2 session(s) this search covers are not yet embedded")
    with EmbeddingServer(dim=64) as server:
        embed_pending(store.search_vectors, EmbeddingClient("ollama", server.url, "old"), 100, 60)
        # Another model's vectors cover nothing of the new one's.
        other = search_sessions(store, EmbeddingClient("ollama", server.url, "new"), "ORM")
        assert other.mode == "keyword" and "2 of 2 session(s)" in other.notice
        assert [h.session_id for h in other.hits] == ["orm"]
        down_url = server.url
    down = search_sessions(store, EmbeddingClient("ollama", down_url, "old", timeout_s=2), "ORM")
    assert [h.session_id for h in down.hits] == ["orm"] and "could not be embedded (HostUnreachable" in down.notice


def test_a_document_is_embedded_in_chunks_within_the_models_window(ingested):
    _set_prompt(ingested, "grid-t001", "websocket reconnect notes. " * 130)  # 3,510 characters
    _set_prompt(ingested, "grid-t002", "x" * 20_000)  # a turn of pasted logs
    pending = {d.doc_key: d for d in ingested.search_vectors.pending("m", 100)}
    chunks = sorted(k for k in pending if k.startswith("turn:grid-t001"))
    assert chunks == ["turn:grid-t001", "turn:grid-t001#1", "turn:grid-t001#2", "turn:grid-t001#3"]
    assert [len(pending[k].text) for k in chunks] == [1000, 1000, 1000, 510]
    assert "".join(pending[k].text for k in chunks) == "websocket reconnect notes. " * 130
    assert len([k for k in pending if k.startswith("turn:grid-t002")]) == 8  # its first eight chunks
    assert all(d.turn_id == "grid-t001" and d.kind == "turn" for k, d in pending.items() if "grid-t001" in k)


def test_only_a_changed_card_or_summary_is_embedded_again(store, tmp_path):
    _two_sessions(store, tmp_path)
    with EmbeddingServer(dim=16) as server:
        client = EmbeddingClient("ollama", server.url, "m")
        embed_pending(store.search_vectors, client, 100, 60)
        assert store.search_vectors.pending("m", 100) == []
        with store.file.transaction() as con:
            con.execute("UPDATE session_cards SET text = text || ' and a new outcome' WHERE session_id = 'ws'")
        assert [d.doc_key for d in store.search_vectors.pending("m", 100)] == ["card:ws"]
        again = embed_pending(store.search_vectors, client, 100, 60)
    assert (again.embedded, again.pending_after) == (1, 0)
    assert server.requests[-1]["input"][0].endswith("and a new outcome")


def test_the_hybrid_waits_until_the_vectors_cover_every_session_the_search_covers(store, tmp_path):
    _two_sessions(store, tmp_path)
    index = store.search.reader()
    with EmbeddingServer(dim=64) as server:
        client = EmbeddingClient("ollama", server.url, "m")
        embed_pending(store.search_vectors, client, 1, 60)  # one session's card
        first = search_sessions(index, client, "ORM")
        assert (first.mode, [h.session_id for h in first.hits]) == ("keyword", ["orm"])
        assert "1 of 2 session(s) this search covers are not yet embedded (their cards and summaries)" in first.notice
        assert not server.requests[1:]  # no query was embedded
        embed_pending(store.search_vectors, client, 1, 60)  # the other's: every account covered
        assert search_sessions(index, client, "repair socket retry").mode == "hybrid"
        turns = search_turns(index, client, "repair socket retry")
        assert turns.mode == "keyword" and "2 of 2 session(s)" in turns.notice and "(their turns)" in turns.notice
        embed_pending(store.search_vectors, client, 100, 60)
        assert search_turns(index, client, "repair socket retry").mode == "hybrid"


def test_the_backlog_counts_the_chunks_waiting_for_a_vector(ingested, tmp_path):
    from assets.work.backlog import measure
    from digest.backlog import backlog_metadata
    from digest.scheduling import now_ms
    from digest.settings import load_settings

    settings = load_settings({"DIGEST_HOME": str(tmp_path), "DIGEST_MODEL_PROVIDER": "openai"})
    measured = measure(ingested, settings.fleet, settings.circuit, settings.sweep, now_ms(), "m")
    metadata = backlog_metadata(measured)
    assert (metadata["vectors_documents"], metadata["vectors_pending"], metadata["vectors_pending_accounts"]) == (
        7,
        7,
        2,
    )
    assert "7 of 7 search chunks wait for a vector (m), 2 of them cards and summaries" in metadata["summary"]
    with EmbeddingServer(dim=16) as server:
        embed_pending(ingested.search_vectors, EmbeddingClient("ollama", server.url, "m"), 2, 60)
    after = backlog_metadata(measure(ingested, settings.fleet, settings.circuit, settings.sweep, now_ms(), "m"))
    assert (after["vectors_pending"], after["vectors_pending_accounts"]) == (5, 0)
    none = measure(ingested, settings.fleet, settings.circuit, settings.sweep, now_ms())
    assert "vectors_pending" not in backlog_metadata(none)  # embeddings off: no vectors counted


def test_session_digest_backlog_shows_the_chunks_waiting_for_a_vector(tmp_path):
    import json
    import subprocess
    import sys

    from tests.bundles import samples_home
    from tests.conftest import project_free_environ

    home = samples_home(tmp_path)
    environment = {**project_free_environ(), "DIGEST_HOME": str(home), "DIGEST_MODEL_PROVIDER": "openai"}
    shown = {}
    for provider in ("ollama", "off"):
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "backlog", "--json"],
            capture_output=True, text=True, timeout=300, env={**environment, "DIGEST_EMBED_PROVIDER": provider},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        shown[provider] = json.loads(done.stdout)
    vectors = shown["ollama"]
    assert vectors["vectors_pending"] == vectors["vectors_documents"] > vectors["vectors_pending_accounts"] > 0
    assert "search chunks wait for a vector (nomic-embed-text)" in vectors["summary"]
    assert "vectors_pending" not in shown["off"] and shown["off"]["pending"] == vectors["pending"]


def test_a_pass_stopped_midway_keeps_every_finished_batch_and_embeds_only_the_rest(ingested):
    class StoppedAtTheThirdBatch:
        model = "m"

        def __init__(self):
            self.texts = []

        def embed(self, texts):
            if len(self.texts) >= 4:  # two batches of two made: the process is stopped in the third
                raise KeyboardInterrupt
            self.texts += texts
            return [vector(text, 16) for text in texts]

    stopped = StoppedAtTheThirdBatch()
    with pytest.raises(KeyboardInterrupt):
        embed_pending(ingested.search_vectors, stopped, max_documents=100, max_seconds=60, batch=2)
    assert ingested.search_vectors.counts("m")["embedded"] == 4
    with EmbeddingServer(dim=16) as server:
        done = embed_pending(ingested.search_vectors, EmbeddingClient("ollama", server.url, "m"), 100, 60)
    assert (done.embedded, done.pending_after) == (3, 0)  # the 7 documents' last 3, none again


def _lead_and_near(store, tmp_path) -> None:
    """`lead` holds the query's words (BM25 first by far) in a long turn, far by meaning; `near` one of
    them in a short turn that is nearest by meaning; `v0`-`v3` none, nearer by meaning than `lead`."""
    names = ["lead", "near", *(f"v{i}" for i in range(4))]
    ingest_paths([write_bundle(tmp_path / "b3", [t for n in names for t in make_turns(n, 2)])], store)
    _set_prompt(store, "lead-t000", "websocket reconnect websocket reconnect: the handler " + "grid cells " * 20)
    _set_prompt(store, "near-t000", "socket retry websocket")
    for i in range(4):
        _set_prompt(store, f"v{i}-t000", f"realtime backoff notes {i}")
    with store.file.transaction() as con:
        con.execute("UPDATE session_cards SET text = 'websocket reconnect handler rewritten' WHERE session_id = 'lead'")
        con.execute("UPDATE session_cards SET text = 'realtime backoff notes' WHERE session_id <> 'lead'")
    store.search.refresh()


def test_a_session_keyword_ranks_first_by_far_stays_first_beside_nearer_vectors(store, tmp_path):
    _lead_and_near(store, tmp_path)
    with EmbeddingServer(dim=64) as server:
        client = EmbeddingClient("ollama", server.url, "test-embed")
        embed_pending(store.search_vectors, client, 100, 60)
        keyword = search_sessions(store, None, "websocket reconnect").hits
        assert [h.session_id for h in keyword] == ["lead", "near"]
        assert keyword[0].score >= KEEP_FIRST_MARGIN * keyword[1].score
        found = search_sessions(store, client, "websocket reconnect", limit=10)
    # Equal-weight reciprocal rank put `near` first: second by keyword, first by meaning.
    assert found.mode == "hybrid" and [h.session_id for h in found.hits][:2] == ["lead", "near"]
    assert len(found.hits) == 2 + VECTOR_ONLY_MAX  # a few sessions by meaning alone, not ten
    assert [h.score for h in found.hits] == sorted((h.score for h in found.hits), reverse=True)


def test_a_summaries_search_keyword_answers_adds_only_a_few_sessions_by_meaning(store, tmp_path):
    _lead_and_near(store, tmp_path)
    with EmbeddingServer(dim=64) as server:
        client = EmbeddingClient("ollama", server.url, "test-embed")
        embed_pending(store.search_vectors, client, 100, 60)
        found = search_sessions(store, client, "websocket reconnect", summaries_only=True, limit=10)
        meaning_only = search_sessions(store, client, "redial ws", summaries_only=True, limit=10)
    # Before, the vectors filled the ten results an agent reads.
    assert [h.session_id for h in found.hits][0] == "lead" and len(found.hits) == 1 + VECTOR_ONLY_MAX
    assert found.notice is None
    assert (len(meaning_only.hits), meaning_only.notice) == (MEANING_ONLY_HITS, MEANING_ONLY_NOTICE)


# The hybrid reads its vectors from the snapshot the pass publishes beside the store, never the store.
_HOLD_THE_STORE = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])  # read-write: DuckDB lets no other process open the file meanwhile
con.execute("SELECT count(*) FROM turns").fetchall()
print("holding", flush=True)
sys.stdin.read()
"""


def test_a_hybrid_search_answers_while_another_process_holds_the_store_to_write(store, tmp_path):
    import subprocess
    import sys

    from resources.store.search_reads import SearchIndex

    _two_sessions(store, tmp_path)
    with EmbeddingServer(dim=64) as server:
        client = EmbeddingClient("ollama", server.url, "m")
        embed_pending(store.search_vectors, client, 100, 60)
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLD_THE_STORE, str(store.path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert holder.stdout.readline().strip() == "holding"
            index = SearchIndex(store.path)
            found = search_sessions(index, client, "repair socket retry", limit=3)
            turns = search_turns(index, client, "repair socket retry", limit=1)
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
    assert found.mode == "hybrid" and found.hits[0].session_id == "ws"
    assert turns.mode == "hybrid" and "websocket reconnect" in turns.hits[0].snippet


def test_a_reader_holding_an_old_snapshot_keeps_answering_after_its_files_are_replaced(store, tmp_path):
    from resources.store.vector_snapshot import VectorSnapshot, snapshot_dir

    _two_sessions(store, tmp_path)
    query = vector("repair socket retry", 64)
    with EmbeddingServer(dim=64) as server:
        client = EmbeddingClient("ollama", server.url, "m")
        embed_pending(store.search_vectors, client, 100, 60)
        held = VectorSnapshot.open(store.path)
        nearest = held.nearest("m", query, 3)
        texts = held.texts([h.doc_key for h in nearest])
        first_files = f"s{held.generation:06d}*"
        for n in range(12):  # a changed text a pass: new segments, then one compacted, the first removed
            _set_prompt(store, "orm-t001", f"another prompt about the ORM, take {n}")
            embed_pending(store.search_vectors, client, 100, 60)
            if not any(snapshot_dir(store.path).glob(first_files)):
                break
    assert not any(snapshot_dir(store.path).glob(first_files))
    newest = VectorSnapshot.open(store.path)
    assert newest.generation > held.generation and newest.texts(["turn:orm-t001"])["turn:orm-t001"].endswith(
        f"take {n}"
    )
    assert held.nearest("m", query, 3) == nearest and held.texts([h.doc_key for h in nearest]) == texts
    assert "websocket reconnect" in texts["turn:ws-t001"]


def test_a_missing_torn_or_stale_snapshot_leaves_the_keyword_results_with_the_reason(store, tmp_path):
    import shutil

    from resources.store.search_reads import SearchIndex
    from resources.store.vector_coverage import read_coverage, write_coverage
    from resources.store.vector_snapshot import snapshot_dir

    _two_sessions(store, tmp_path)
    folder = snapshot_dir(store.path)

    def answer():
        found = search_sessions(SearchIndex(store.path), client, "ORM")
        assert [h.session_id for h in found.hits][:1] == ["orm"]
        return found.mode, found.notice or ""

    with EmbeddingServer(dim=64) as server:
        client = EmbeddingClient("ollama", server.url, "m")
        embed_pending(store.search_vectors, client, 100, 60)
        next(folder.glob("*.texts.npy")).unlink()  # a file the manifest names is gone
        mode, notice = answer()
        assert mode == "keyword" and "a file of the snapshot is missing" in notice
        shutil.rmtree(folder)
        mode, notice = answer()
        assert mode == "keyword" and "no vectors' snapshot is published yet" in notice
        assert "the next embedding pass publishes it" in notice
        embed_pending(store.search_vectors, client, 100, 60)  # nothing to embed: the snapshot published whole
        assert answer() == ("hybrid", "")
        coverage = read_coverage(store.path)
        counts = {"accounts": sorted(coverage.accounts), "turns": sorted(coverage.turns)}
        write_coverage(store.path, "m", counts, coverage.snapshot + 1)  # counts of a snapshot not read yet
        mode, notice = answer()
        assert mode == "keyword" and "older than their coverage" in notice
        write_coverage(store.path, "m", counts, coverage.snapshot)
        (folder / "manifest.json").write_text('{"generation": ')
        mode, notice = answer()
        assert mode == "keyword" and "manifest.json is unreadable" in notice


def test_the_snapshot_holds_what_the_store_holds_after_changes_removals_and_compactions(ingested):
    from resources.store.vector_snapshot import VectorSnapshot

    query = vector("grid retry", 16)
    with EmbeddingServer(dim=16) as server:
        client = EmbeddingClient("ollama", server.url, "m")
        embed_pending(ingested.search_vectors, client, 100, 60)
        for n in range(6):  # changed texts (superseded rows, then a compaction), then a session gone
            _set_prompt(ingested, f"grid-t00{n % 3}", f"grid prompt rewritten, take {n}")
            if n == 4:
                with ingested.file.transaction() as con:
                    con.execute("DELETE FROM turns WHERE session_id = 'other'")
            embed_pending(ingested.search_vectors, client, 100, 60)
            snapshot = VectorSnapshot.open(ingested.path)
            assert snapshot.live_hashes() == ingested.search_vectors.hashes("m")
            near, exact = snapshot.nearest("m", query, 50), ingested.search_vectors.nearest("m", query, 50)
            assert [h.doc_key for h in near] == [h.doc_key for h in exact]
            assert [round(h.similarity, 4) for h in near] == [round(h.similarity, 4) for h in exact]
    assert not [h for h in near if h.session_id == "other" and h.kind == "turn"]  # its turns are gone
    assert snapshot.nearest("m", query, 50, ["grid"]) == [h for h in near if h.session_id == "grid"]
    assert snapshot.texts(["turn:grid-t002"]) == {"turn:grid-t002": "grid prompt rewritten, take 5"}
