"""Search reads: the Tantivy index beside the store (`search_index.py`) opened and queried without
the store, so a search never waits for a writer. `SearchIndex` is held by a long-lived reader (the
MCP server) or opened per call (the CLI's `search`, a few milliseconds); each query takes a
searcher, a snapshot that no commit or merge changes under it.

Ranking: BM25 (k1 1.2, b 0.75) per document over the code-aware terms of `digest.search_text`; a
query term in more than `COMMON_SHARE` of the documents only adds to documents that hold a rarer one
(MaxScore's pruning); a session scores its best document plus `NEXT_SHARE` of each of its next two,
over the best `TOP_DOCS` documents. Ties go to the session active last. Only this module's imports
and Tantivy are loaded: no DuckDB, no pandas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from digest.projects import wanted_project_key
from digest.search_text import query_terms, snippet
from resources.store.search_index import (
    NO_TIME,
    IndexUnavailable,
    documents_schema,
    index_folder,
    read_state,
    unusable,
)

MAX_QUERY_CHARS = 1_000
COMMON_SHARE = 0.05
NEXT_SHARE = 0.1
MATCHES = 3  # the documents a session hit shows
TURN_IDS = 10  # the matched turns a session hit lists
TOP_DOCS = 200  # the best documents grouped into sessions (more when a query asks for more)


class SearchError(ValueError):
    """A query that cannot run: the message is the one-line answer shown to the user."""


class _Snippet:
    """A hit's `snippet`: given, or cut from its document's text at its first read. A ranking reads
    many more hits than an answer shows, and cutting a snippet from a long tool output is most of
    a query's time."""

    snippet_source: str | tuple[str, list[str]]  # the snippet, or (the text, the query's terms)

    @property
    def snippet(self) -> str:
        if not isinstance(self.snippet_source, str):
            self.snippet_source = snippet(*self.snippet_source)
        return self.snippet_source


@dataclass
class Match(_Snippet):
    kind: str  # 'summary' | 'card' | 'mini' | 'turn'
    turn_id: str | None
    score: float
    snippet_source: str | tuple[str, list[str]]


@dataclass
class SessionHit:
    session_id: str
    score: float
    title: str | None
    summary: str | None
    category: str | None
    first_activity_ms: int | None
    last_activity_ms: int | None
    tier: str | None
    degraded: bool | None
    verdict: str | None
    navigation_index: bool
    matches: list[Match] = field(default_factory=list)
    turn_ids: list[str] = field(default_factory=list)


@dataclass
class TurnHit(_Snippet):
    session_id: str
    turn_id: str
    ts_ms: int | None
    score: float
    kind: str  # 'turn' | 'mini'
    snippet_source: str | tuple[str, list[str]]


def categories() -> tuple[str, ...]:
    from typing import get_args

    from digest.summary_output import Category

    return get_args(Category)


def check_request(query: str, limit: int, category: str | None = None, file: str | None = None) -> list[str]:
    """The query's terms; `SearchError` for a query, a limit or a filter that cannot be searched."""
    terms = check_query(query, limit)
    if category is not None and category not in categories():
        raise SearchError(f"unknown category {category!r}: one of {', '.join(categories())}")
    if file is not None and not file.strip().removeprefix("./"):
        raise SearchError("the file to search by is empty")
    return terms


def check_query(query: str, limit: int) -> list[str]:
    if not isinstance(limit, int) or limit < 1:
        raise SearchError(f"the limit must be a positive whole number, not {limit!r}")
    if len(query) > MAX_QUERY_CHARS:
        raise SearchError(f"the query is {len(query):,} characters long; at most {MAX_QUERY_CHARS:,} are searched")
    if not query.strip():
        raise SearchError("the query is empty: give a word, a name or a path to search for")
    terms = query_terms(query)
    if not terms:
        raise SearchError(f"the query {query.strip()!r} has only common words: add one that names something")
    return terms


def _time(value: int) -> int | None:
    return None if value == NO_TIME else value


class SearchIndex:
    """The index of the store at `db_path`, opened for reading (`IndexUnavailable` when there is none
    yet). A rebuilt index (another build in its state file) is opened again by `current`."""

    def __init__(self, db_path: str | Path):
        import tantivy

        self.tantivy = tantivy
        self.db_path = db_path
        self.folder = index_folder(db_path)
        state = read_state(self.folder)
        if reason := unusable(self.folder, state):
            raise IndexUnavailable(reason)
        self.build, self.seen = state["build"], state
        self.documents = tantivy.Index.open(str(self.folder / "documents"))
        self.sessions_index = tantivy.Index.open(str(self.folder / "sessions"))
        self.schema = documents_schema()
        self.session_schema = self.sessions_index.schema

    def current(self) -> SearchIndex:
        """This index, its searchers reloaded when a refresh published since (Tantivy's own reload on
        commit polls, so a search right after a refresh could miss it); or the one built since."""
        state = read_state(self.folder)
        if state is None or state.get("build") != self.build:
            return SearchIndex(self.db_path)
        if state != self.seen:
            self.documents.reload()
            self.sessions_index.reload()
            self.seen = state
        return self

    def state(self) -> dict:
        """The store's sessions and those left behind at the last refresh (None: not known yet)."""
        return read_state(self.folder) or {}

    # --- queries ---------------------------------------------------------------------------------

    def sessions(self, query, *, limit=10, since_ms=None, category=None, file=None, project=None) -> list[SessionHit]:
        """The sessions that best match `query`, best first, each with its best documents."""
        return self._sessions(query, limit, since_ms, category, file, project, kinds=None)

    def summaries(self, query: str, *, limit: int = 10, category: str | None = None) -> list[SessionHit]:
        """Sessions by their accounts' documents alone, the summary's and the card's (`query_summaries`)."""
        return self._sessions(query, limit, None, category, None, None, kinds=("summary", "card"))

    def turns(self, query: str, *, limit: int = 10, session_id: str | None = None) -> list[TurnHit]:
        """The turns that best match `query` (by their text or their mini summary), best first."""
        terms = check_query(query, limit)
        tv = self.tantivy
        filters = [tv.Query.term_set_query(self.schema, "kind", ["turn", "mini"])]
        if session_id is not None:
            if not self.sessions_index.searcher().doc_freq("session", session_id):
                raise SearchError(f"no session {session_id!r} in the store")
            filters.append(tv.Query.term_query(self.schema, "session", session_id))
        searcher = self.documents.searcher()
        hits = self._ranked(searcher, terms, filters, max(TOP_DOCS, 4 * limit))
        times = searcher.fast_field_values("ts_ms", [a for _, a in hits]) if hits else []
        best: dict[str, tuple] = {}  # a turn's best document: its text's or its mini summary's
        cut = None  # the score of the `limit`th turn seen: hits come best first, so one below it ends the list
        for (score, address), ts in zip(hits, times):
            if cut is not None and round(score, 6) < cut:
                break
            doc = searcher.doc(address)
            turn_id, kind = doc.get_first("turn"), doc.get_first("kind")
            held = best.get(turn_id)
            if held is None or score > held[0] or (score == held[0] and kind < held[2]):
                best[turn_id] = (score, doc, kind, _time(ts))
            if cut is None and len(best) == limit:
                cut = round(score, 6)

        def order(item):
            turn_id, (score, doc, _, ts) = item
            return -round(score, 6), -(ts if ts is not None else NO_TIME), doc.get_first("session"), turn_id

        return [
            TurnHit(doc.get_first("session"), turn_id, ts, score, kind, (bytes(doc.get_first("text")).decode(), terms))
            for turn_id, (score, doc, kind, ts) in sorted(best.items(), key=order)[:limit]
        ]  # fmt: skip

    def _sessions(self, query, limit, since_ms, category, file, project, kinds) -> list[SessionHit]:
        terms = check_request(query, limit, category, file)
        tv = self.tantivy
        filters = []
        if kinds is not None:
            filters.append(tv.Query.term_set_query(self.schema, "kind", list(kinds)))
        allowed = self.allowed_sessions(since_ms=since_ms, category=category, file=file, project=project)
        if allowed is not None:
            if not allowed:
                return []
            filters.append(tv.Query.term_set_query(self.schema, "session_key", allowed))
        searcher = self.documents.searcher()
        hits = self._ranked(searcher, terms, filters, max(TOP_DOCS, 4 * limit))
        if not hits:
            return []
        addresses = [a for _, a in hits]
        grouped: dict[int, list] = {}
        last_of: dict[int, int] = {}
        keys = searcher.fast_field_values("session_key", addresses)
        for (score, address), key, last in zip(hits, keys, searcher.fast_field_values("last_ms", addresses)):
            grouped.setdefault(key, []).append((score, address))
            last_of[key] = last
        total_of = {key: docs[0][0] + NEXT_SHARE * sum(s for s, _ in docs[1:3]) for key, docs in grouped.items()}
        order = sorted((-round(total, 6), -last_of[key], key) for key, total in total_of.items())
        # The first `limit`, and those tied with the last of them: a tie goes to the session id.
        cut = order[min(limit, len(order)) - 1][:2]
        named = sorted(
            (neg_total, neg_last, searcher.doc(grouped[key][0][1]).get_first("session"), key)
            for neg_total, neg_last, key in order
            if (neg_total, neg_last) <= cut
        )[:limit]
        chosen = [(total_of[key], session_id, grouped[key]) for _, _, session_id, key in named]
        metas = self.metas([session_id for _, session_id, _ in chosen])
        out = []
        for total, session_id, docs in chosen:
            meta = metas.get(session_id)
            if meta is None:  # removed since the documents were read
                continue
            matches, turn_scores = [], {}
            for score, address in docs:
                if len(matches) >= MATCHES and len(turn_scores) >= TURN_IDS:
                    break
                doc = searcher.doc(address)
                turn_id = doc.get_first("turn") or None
                if len(matches) < MATCHES:
                    text = bytes(doc.get_first("text")).decode()
                    matches.append(Match(doc.get_first("kind"), turn_id, score, (text, terms)))
                if turn_id is not None:
                    turn_scores.setdefault(turn_id, score)
            turn_ids = sorted(turn_scores, key=lambda t: (-turn_scores[t], t))[:TURN_IDS]
            out.append(_session_hit(session_id, total, meta, matches, turn_ids))
        return out

    def _ranked(self, searcher, terms: list[str], filters: list, top: int) -> list:
        """The best `top` documents (score, address) by BM25 over `terms`, within every filter."""
        tv = self.tantivy
        df = {t: searcher.doc_freq("terms", t) for t in dict.fromkeys(terms)}
        present = [t for t in df if df[t]]
        if not present:
            return []
        rare = [t for t in present if df[t] <= COMMON_SHARE * searcher.num_docs] or present
        common = [t for t in present if t not in rare]

        def term(t: str):
            return tv.Query.term_query(self.schema, "terms", t, index_option="freq")

        ranked = tv.Query.boolean_query([(tv.Occur.Should, term(t)) for t in rare])
        clauses = [(tv.Occur.Must, ranked)] + [(tv.Occur.Should, term(t)) for t in common]
        clauses += [(tv.Occur.Must, tv.Query.const_score_query(f, 0.0)) for f in filters]
        return searcher.search(tv.Query.boolean_query(clauses), top, count=False).hits

    # --- the sessions' own documents ----------------------------------------------------------------

    def allowed_sessions(self, since_ms=None, category=None, file=None, project=None) -> list[int] | None:
        """The keys of the sessions a search's filters let through (None: no filter): last active
        since, the summary's category, a file a turn read, edited or created (its whole path or its
        tail: `settings.py` finds `src/app/settings.py`), the project (its whole path or its last
        components, as `status --project` names one)."""
        tv, schema = self.tantivy, self.session_schema
        clauses = []
        if since_ms is not None:
            clauses.append(tv.Query.range_query(schema, "last_ms", tv.FieldType.Integer, int(since_ms), None))
        if category is not None:
            clauses.append(tv.Query.term_query(schema, "category", category))
        if file is not None:
            clauses.append(tv.Query.term_query(schema, "files", file.strip().removeprefix("./")))
        if project is not None:
            key = wanted_project_key(project)
            if key is None:
                return []
            clauses.append(tv.Query.term_query(schema, "project", key))
        if not clauses:
            return None
        searcher = self.sessions_index.searcher()
        query = tv.Query.boolean_query([(tv.Occur.Must, c) for c in clauses])
        hits = searcher.search(query, max(1, searcher.num_docs), count=False).hits
        return list(searcher.fast_field_values("session_key", [a for _, a in hits])) if hits else []

    def allowed_session_ids(self, **filters) -> list[str] | None:
        """`allowed_sessions` as session ids."""
        keys = self.allowed_sessions(**filters)
        if keys is None or not keys:
            return keys
        tv = self.tantivy
        searcher = self.sessions_index.searcher()
        query = tv.Query.term_set_query(self.session_schema, "session_key", keys)
        return [searcher.doc(a).get_first("session") for _, a in searcher.search(query, len(keys), count=False).hits]

    def metas(self, session_ids: list[str]) -> dict[str, dict]:
        """Each indexed session's own document: its account (`session_accounts`' row, or None), its
        activity times, project and summary."""
        import json

        if not session_ids:
            return {}
        tv = self.tantivy
        searcher = self.sessions_index.searcher()
        query = tv.Query.term_set_query(self.session_schema, "session", list(session_ids))
        out = {}
        for _, address in searcher.search(query, len(session_ids), count=False).hits:
            doc = searcher.doc(address)
            out[doc.get_first("session")] = json.loads(bytes(doc.get_first("meta")))
        return out

    def accounts(self, session_ids: list[str]) -> dict[str, dict]:
        """The accounts of these sessions as `store.cards.accounts` gives them, those that have one."""
        return {s: m["account"] for s, m in self.metas(session_ids).items() if m.get("account")}

    def turn_rows(self, turn_ids: list[str]) -> dict[str, dict]:
        """These turns' rows as indexed (their texts cut to `ROW_TEXT_CHARS`, with their lengths), by id."""
        import json

        if not turn_ids:
            return {}
        tv = self.tantivy
        searcher = self.documents.searcher()
        query = tv.Query.boolean_query(
            [
                (tv.Occur.Must, tv.Query.term_set_query(self.schema, "turn", list(turn_ids))),
                (tv.Occur.Must, tv.Query.term_query(self.schema, "kind", "turn")),
            ]
        )
        out = {}
        for _, address in searcher.search(query, len(turn_ids), count=False).hits:
            row = searcher.doc(address).get_first("row")
            if row is not None:
                parsed = json.loads(bytes(row))
                out[parsed["id"]] = parsed
        return out

    def session_count(self) -> int:
        return self.sessions_index.searcher().num_docs


def _session_hit(session_id: str, total: float, meta: dict, matches: list, turn_ids: list) -> SessionHit:
    account = meta.get("account") or {}
    return SessionHit(
        session_id, total, account.get("title"), account.get("summary"), account.get("category"),
        meta.get("first_activity_ms"), meta.get("last_activity_ms"), account.get("source_tier"),
        account.get("degraded"), account.get("verdict"), bool(account.get("degraded")), matches, turn_ids,
    )  # fmt: skip
