"""Search with vectors where a host serves embeddings: keyword (BM25) results fused with the nearest
documents by reciprocal rank (`digest.embeddings`), for sessions and for turns.

The fusion runs once the vectors cover every session the search covers (its filters' sessions, or
all): a session's card and summary for a session search, its turns too for a turn search. Before
that a vector-only hit would push down a session that is simply not embedded yet, so the keyword
results stand alone and `notice` says how many sessions wait (`vector_coverage`, read without the
store: such a search loads neither DuckDB nor the model). The query is embedded by the configured
model; when that fails (the host is down, the index was made by another model) the keyword results
stand alone and `notice` says why, once, as deja-vu does: vectors can only add to what keyword
search finds, never take it away.

Neither half opens the store, so neither waits for a writer: the keyword half and what a hit shows
come from the search index (`SearchIndex`), the nearest documents and their texts from the vectors'
snapshot the embedding pass publishes beside it (`vector_snapshot`). A snapshot not published yet,
unreadable, or older than the coverage leaves the keyword results alone, and `notice` says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from digest.embeddings import SESSION_KINDS, EmbeddingModelMismatch, fuse_rankings, not_embedded_notice
from digest.model_api import ModelError
from digest.search_text import query_terms, snippet
from resources.store.search_index import IndexUnavailable
from resources.store.search_reads import Match, SearchIndex, SessionHit, TurnHit
from resources.store.vector_coverage import read_coverage

if TYPE_CHECKING:
    from resources.model_clients.embeddings import EmbeddingClient

# Candidates each ranking gives the fusion: past the first few dozen, reciprocal ranks add little.
CANDIDATES = 50
NEAREST_DOCUMENTS = 200
# Every text has a nearest neighbour, a nonsense query's too: where no document holds the query's
# words, only these few nearest are shown, and the notice says they matched by meaning alone.
MEANING_ONLY_HITS = 3
MEANING_ONLY_NOTICE = "no session holds these words: the nearest by meaning alone follow, and may be unrelated"


@dataclass
class Results:
    hits: list = field(default_factory=list)  # SessionHit | TurnHit, best first
    mode: str = "keyword"  # keyword | hybrid
    notice: str | None = None  # why the vectors were left out, when they were


@dataclass
class DeferredEmbedder:
    """An embedding client made at its first query (`make`), named by its model till then: a search
    that stays keyword alone imports no client and loads no model."""

    model: str
    make: Callable[[], object]
    made: object = None

    def embed_query(self, text: str) -> list[float]:
        if self.made is None:
            self.made = self.make()
        return self.made.embed_query(text)


def _reader(source) -> SearchIndex | None:
    """The index: `source` itself, or the store's (None when none is built yet)."""
    if isinstance(source, SearchIndex):
        return source
    try:
        return source.search.reader()
    except IndexUnavailable:
        return None


def search_sessions(
    source, client: EmbeddingClient | None, query: str, *, limit: int = 10, summaries_only: bool = False, **filters
) -> Results:
    """The index's `sessions` (its filters: since_ms, category, file, project), fused with the
    sessions of the nearest documents when `client` is set; `summaries_only`: by the accounts'
    documents alone, summaries and cards (`summaries`, category its one filter: `query_summaries`).
    `source`: the store, or its index alone."""
    index = _reader(source)
    if index is None:  # nothing indexed yet: bad input is still said, no hit is found
        ask = source.search.summaries if summaries_only else source.search.sessions
        return Results(ask(query, limit=limit, **filters))
    wanted = _candidates(limit) if client is not None else limit
    if summaries_only:
        keyword = index.summaries(query, limit=wanted, **filters)
    else:
        keyword = index.sessions(query, limit=wanted, **filters)
    if client is None:
        return Results(keyword[:limit])
    allowed = index.allowed_session_ids(**filters)
    if notice := _not_covered(index, client, allowed, turns=False):
        return Results(keyword[:limit], notice=notice)
    vectors, nearest, notice = _nearest(index, client, query, allowed)
    if nearest is None:
        return Results(keyword[:limit], notice=notice)
    if summaries_only:
        nearest = [hit for hit in nearest if hit.kind in SESSION_KINDS]
    best: dict[str, object] = {}
    for hit in nearest:  # best first: a session's first is its best document
        best.setdefault(hit.session_id, hit)
    by_id = {h.session_id: h for h in keyword}
    fused = fuse_rankings(
        [(s, h.score) for s, h in by_id.items()],
        [(s, h.similarity) for s, h in best.items()],
        _fused_limit(keyword, limit),
    )
    missing = [s for s, _ in fused if s not in by_id]
    texts = vectors.texts([best[s].doc_key for s in missing])
    made = {s: _vector_only_hit(s, meta, best[s], texts, query) for s, meta in index.metas(missing).items()}
    hits = [
        replace(by_id[s], score=score) if s in by_id else replace(made[s], score=score)
        for s, score in fused
        if s in by_id or s in made
    ]
    return Results(hits, mode="hybrid", notice=None if keyword else MEANING_ONLY_NOTICE)


def search_turns(
    source, client: EmbeddingClient | None, query: str, *, limit: int = 10, session_id: str | None = None
) -> Results:
    """The index's `turns`, fused with the nearest turns and mini summaries when `client` is set."""
    index = _reader(source)
    if index is None:
        return Results(source.search.turns(query, limit=limit, session_id=session_id))
    keyword = index.turns(query, limit=_candidates(limit) if client is not None else limit, session_id=session_id)
    if client is None:
        return Results(keyword[:limit])
    scope = None if session_id is None else [session_id]
    if notice := _not_covered(index, client, scope, turns=True):
        return Results(keyword[:limit], notice=notice)
    vectors, nearest, notice = _nearest(index, client, query, scope)
    if nearest is None:
        return Results(keyword[:limit], notice=notice)
    near_turns: dict[str, object] = {}
    for hit in nearest:
        if hit.turn_id is not None:
            near_turns.setdefault(hit.turn_id, hit)
    by_id = {h.turn_id: h for h in keyword}
    fused = fuse_rankings(
        [(t, h.score) for t, h in by_id.items()],
        [(t, h.similarity) for t, h in near_turns.items()],
        _fused_limit(keyword, limit),
    )
    missing = [near_turns[t] for t, _ in fused if t not in by_id]
    texts = vectors.texts([h.doc_key for h in missing])
    rows = index.turn_rows([h.turn_id for h in missing])
    terms = query_terms(query)
    made = {
        h.turn_id: TurnHit(h.session_id, h.turn_id, (rows.get(h.turn_id) or {}).get("ts_ms"), h.similarity, h.kind, snippet(texts.get(h.doc_key, ""), terms))
        for h in missing
    }  # fmt: skip
    hits = [replace(by_id[t] if t in by_id else made[t], score=score) for t, score in fused]
    return Results(hits, mode="hybrid", notice=None if keyword else MEANING_ONLY_NOTICE)


def _fused_limit(keyword: list, limit: int) -> int:
    return limit if keyword else min(limit, MEANING_ONLY_HITS)


def _candidates(limit) -> int:
    """The keyword leg's count beside vectors: the fusion's candidates, or a bad limit as given, for
    its error. Keyword alone asks for `limit`: each hit past it would cost its documents' reads."""
    return max(limit, CANDIDATES) if isinstance(limit, int) and limit >= 1 else limit


def _not_covered(index: SearchIndex, client, scope: list[str] | None, *, turns: bool) -> str | None:
    """Why the search stays keyword alone: sessions of its scope whose vectors (by `client`'s model)
    are not all made yet; None when every one is covered."""
    coverage = read_coverage(index.db_path)
    covered = frozenset()
    if coverage is not None and coverage.model == client.model:
        covered = coverage.turns if turns else coverage.accounts
    if scope is None:  # a session removed since the pass is still counted covered, until the next pass
        total = index.session_count()
        missing = max(0, total - len(covered))
    else:
        total, missing = len(scope), sum(1 for session in scope if session not in covered)
    if not missing:
        return None
    return not_embedded_notice(missing, total, "their turns" if turns else "their cards and summaries")


def _nearest(index: SearchIndex, client, query: str, sessions: list[str] | None):
    """(the snapshot read, the documents nearest the query): the nearest None, with the reason, when
    vectors cannot be used."""
    from resources.store.vector_snapshot import SnapshotUnavailable, VectorSnapshot  # numpy: for a fused search only

    try:
        vectors = VectorSnapshot.open(index.db_path)
    except SnapshotUnavailable as exc:
        return None, None, f"keyword results only: {exc}; the next embedding pass publishes it"
    coverage = read_coverage(index.db_path)
    if coverage is not None and coverage.snapshot is not None and vectors.generation < coverage.snapshot:
        return None, None, (
            f"keyword results only: the vectors' snapshot (generation {vectors.generation}) is older than their "
            f"coverage (generation {coverage.snapshot}); the next embedding pass publishes it again"
        )  # fmt: skip
    try:
        vectors.stamp.refuse_other(client.model)
        vector = client.embed_query(query)
        return vectors, vectors.nearest(client.model, vector, NEAREST_DOCUMENTS, sessions), None
    except EmbeddingModelMismatch as exc:
        return None, None, f"keyword results only: {exc}"
    except ModelError as exc:
        return None, None, f"keyword results only: the query could not be embedded ({type(exc).__name__}: {exc})"[:300]


def _vector_only_hit(session_id: str, meta: dict, near, texts: dict[str, str], query: str) -> SessionHit:
    match = Match(near.kind, near.turn_id, near.similarity, snippet(texts.get(near.doc_key, ""), query_terms(query)))
    account = meta.get("account") or {}
    return SessionHit(
        session_id, near.similarity, account.get("title"), account.get("summary"), account.get("category"),
        meta.get("first_activity_ms"), meta.get("last_activity_ms"), account.get("source_tier"),
        account.get("degraded"), account.get("verdict"), bool(account.get("degraded")), [match],
        [near.turn_id] if near.turn_id else [],
    )  # fmt: skip
