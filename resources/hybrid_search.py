"""Search with vectors where a host serves embeddings: keyword (BM25) results fused with the nearest
documents by reciprocal rank (`digest.embeddings`), for sessions and for turns.

The query is embedded by the configured model; when that fails (the host is down, the index was
made by another model) the keyword results stand alone and `notice` says why, once, as deja-vu
does: vectors can only add to what keyword search finds, never take it away.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from digest.embeddings import EmbeddingModelMismatch, reciprocal_rank_fusion
from digest.model_api import ModelError
from digest.search_text import query_terms, snippet
from resources.model_clients.embeddings import EmbeddingClient
from resources.store import DigestStore
from resources.store.connection import records
from resources.store.search import Match, SessionHit, TurnHit, session_filters

# Candidates each ranking gives the fusion: past the first few dozen, reciprocal ranks add little.
CANDIDATES = 50
NEAREST_DOCUMENTS = 200


@dataclass
class Results:
    hits: list = field(default_factory=list)  # SessionHit | TurnHit, best first
    mode: str = "keyword"  # keyword | hybrid
    notice: str | None = None  # why the vectors were left out, when they were


def search_sessions(
    store: DigestStore,
    client: EmbeddingClient | None,
    query: str,
    *,
    limit: int = 10,
    summaries_only: bool = False,
    **filters,
) -> Results:
    """`store.search.sessions` (its filters: since_ms, category, file, project), fused with the
    sessions of the nearest documents when `client` is set; `summaries_only`: by the summaries'
    documents alone (`store.search.summaries`, category its one filter: `query_summaries`)."""
    if summaries_only:
        keyword = store.search.summaries(query, limit=_candidates(limit), **filters)
    else:
        keyword = store.search.sessions(query, limit=_candidates(limit), **filters)
    nearest, notice = _nearest(store, client, query, _allowed_sessions(store, **filters))
    if nearest is None:
        return Results(keyword[:limit], notice=notice)
    if summaries_only:
        nearest = [hit for hit in nearest if hit.kind == "summary"]
    best: dict[str, object] = {}
    for hit in nearest:  # best first: a session's first is its best document
        best.setdefault(hit.session_id, hit)
    by_id = {h.session_id: h for h in keyword}
    fused = reciprocal_rank_fusion([list(by_id), list(best)])[:limit]
    missing = [s for s, _ in fused if s not in by_id]
    texts = store.search_vectors.texts([best[s].doc_key for s in missing])
    made = {s: _vector_only_hit(row, best[s], texts, query) for s, row in _session_rows(store, missing).items()}
    hits = [replace(by_id[s], score=score) if s in by_id else replace(made[s], score=score) for s, score in fused]
    return Results(hits, mode="hybrid")


def search_turns(
    store: DigestStore, client: EmbeddingClient | None, query: str, *, limit: int = 10, session_id: str | None = None
) -> Results:
    """`store.search.turns`, fused with the nearest turns and mini summaries when `client` is set."""
    keyword = store.search.turns(query, limit=_candidates(limit), session_id=session_id)
    nearest, notice = _nearest(store, client, query, None if session_id is None else [session_id])
    if nearest is None:
        return Results(keyword[:limit], notice=notice)
    near_turns: dict[str, object] = {}
    for hit in nearest:
        if hit.turn_id is not None:
            near_turns.setdefault(hit.turn_id, hit)
    by_id = {h.turn_id: h for h in keyword}
    fused = reciprocal_rank_fusion([list(by_id), list(near_turns)])[:limit]
    missing = [near_turns[t] for t, _ in fused if t not in by_id]
    texts = store.search_vectors.texts([h.doc_key for h in missing])
    times = _turn_times(store, [h.turn_id for h in missing])
    terms = query_terms(query)
    made = {
        h.turn_id: TurnHit(h.session_id, h.turn_id, times.get(h.turn_id), h.similarity, h.kind, snippet(texts.get(h.doc_key, ""), terms))
        for h in missing
    }  # fmt: skip
    hits = [replace(by_id[t] if t in by_id else made[t], score=score) for t, score in fused]
    return Results(hits, mode="hybrid")


def _candidates(limit) -> int:
    """The keyword leg's count: the fusion's candidates, or a bad limit as given, for its error."""
    return max(limit, CANDIDATES) if isinstance(limit, int) and limit >= 1 else limit


def _nearest(store: DigestStore, client: EmbeddingClient | None, query: str, sessions: list[str] | None):
    """The documents nearest the query (None, with the reason, when vectors cannot be used)."""
    if client is None:
        return None, None
    stamp = store.search_vectors.stamp()
    if stamp is None:
        return None, "no document has a vector yet: keyword results only (the index embeds them at its refreshes)"
    try:
        stamp.refuse_other(client.model)
        vector = client.embed_query(query)
        return store.search_vectors.nearest(client.model, vector, NEAREST_DOCUMENTS, sessions), None
    except EmbeddingModelMismatch as exc:
        return None, f"keyword results only: {exc}"
    except ModelError as exc:
        return None, f"keyword results only: the query could not be embedded ({type(exc).__name__}: {exc})"[:300]


def _allowed_sessions(store: DigestStore, **filters) -> list[str] | None:
    """The sessions the keyword search's filters let through (None: no filter), for the vector leg."""
    if not any(value is not None for value in filters.values()):
        return None
    with store.file.connect() as con:
        where, params = session_filters(con, **filters)
        rows = con.execute(
            f"""SELECT s.session_id FROM sessions s LEFT JOIN session_summaries x USING (session_id)
                WHERE {" AND ".join(where)}""",
            params,
        ).fetchall()
    return [r[0] for r in rows]


def _session_rows(store: DigestStore, session_ids: list[str]) -> dict[str, dict]:
    if not session_ids:
        return {}
    with store.file.connect() as con:
        rows = records(
            con,
            """SELECT s.session_id, x.title, x.summary, x.category, s.first_activity_ms, s.last_activity_ms,
                      x.source_tier AS tier, x.degraded, x.verdict
               FROM sessions s LEFT JOIN session_summaries x USING (session_id)
               WHERE s.session_id IN (SELECT unnest(?::VARCHAR[]))""",
            [session_ids],
        )
    return {r["session_id"]: r for r in rows}


def _vector_only_hit(row: dict, near, texts: dict[str, str], query: str) -> SessionHit:
    match = Match(near.kind, near.turn_id, near.similarity, snippet(texts.get(near.doc_key, ""), query_terms(query)))
    return SessionHit(
        row["session_id"], near.similarity, row["title"], row["summary"], row["category"], row["first_activity_ms"],
        row["last_activity_ms"], row["tier"], row["degraded"], row["verdict"], bool(row["degraded"]), [match],
        [near.turn_id] if near.turn_id else [],
    )  # fmt: skip


def _turn_times(store: DigestStore, turn_ids: list[str]) -> dict[str, int | None]:
    if not turn_ids:
        return {}
    with store.file.connect() as con:
        rows = con.execute("SELECT id, ts_ms FROM turns WHERE id IN (SELECT unnest(?::VARCHAR[]))", [turn_ids])
        return dict(rows.fetchall())
