"""`store.search`: the search index over each session's summary, mini summaries and turns, and the
queries over it (BM25, `digest.search_text`'s code-aware terms).

The index is three tables of the store (`schema.sql`): `search_documents` (one row a document: a
session's summary, its card, a mini summary, a turn), `search_postings` (term key, document, term frequency)
and `search_index_state` (what each session was indexed at). `refresh` indexes again only the
sessions whose turns, summary or mini summaries changed since their state, and drops the removed
ones; a query computes document frequencies and the average length when it runs, so nothing global
is kept in step. A document keeps no copy of its text: a hit's snippet is cut from the row it was
made from. A turn's prompt and thought are indexed up to twice `FIELD_CHARS` characters, its response (tool
output and all) up to `FIELD_CHARS`.

Ranking: BM25 per document; a session scores its best document plus a share of its next two. A
summary judged junk (a verdict other than ok) is not indexed, so it never ranks its session (the
turns still do); a degraded summary is labelled a navigation index.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import duckdb
import pandas as pd

from digest.search_text import TOKENIZER_VERSION, query_terms, snippet, term_counts, term_key
from digest.summary_output import Category
from resources.store.connection import Repository, now, records
from resources.store.facts import touched_file_sql
from resources.store.projects import project_session_ids

# Each turn field (prompt, thought, response) is indexed up to this many characters: the tool output
# past it (file dumps, logs) is left out of the index and of the snippets.
FIELD_CHARS = 16_000
MAX_QUERY_CHARS = 1_000
K1, B = 1.2, 0.75
# A session's score: its best document's, plus this share of each of its next two.
NEXT_SHARE = 0.1
MATCHES = 3  # the documents a session hit shows
TURN_IDS = 10  # the matched turns a session hit lists
BATCH_SESSIONS = 50  # sessions indexed per transaction
# A refresh merges the new postings into the sorted ones when they and the replaced documents' come to
# this share of the sorted ones, and at least this many rows.
COMPACT_SHARE = 0.25
COMPACT_MIN_ROWS = 500_000
# A query term in more than this share of the documents is common: see `_scored`.
COMMON_SHARE = 0.05
CATEGORIES = Category.__args__


class SearchError(ValueError):
    """A query that cannot run: the message is the one-line answer shown to the user."""


@dataclass
class Match:
    kind: str  # 'summary' | 'card' | 'mini' | 'turn'
    turn_id: str | None
    score: float
    snippet: str


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
class TurnHit:
    session_id: str
    turn_id: str
    ts_ms: int | None
    score: float
    kind: str  # 'turn' | 'mini'
    snippet: str


@dataclass
class RefreshReport:
    sessions_indexed: int
    sessions_removed: int
    documents: int  # written by this refresh
    seconds: float
    behind: int  # sessions still to index (a `limit` left them)
    compacted: bool = False  # the postings were merged and sorted again


# The sessions whose index state is not what they are now (or that have none), newest first.
_CHANGED = """
    WITH minis AS (SELECT session_id, count(*) AS n, max(created_at) AS at FROM mini_summaries GROUP BY 1),
    cur AS (
        SELECT s.session_id, s.input_revision, x.created_at AS summary_at, x.verdict AS summary_verdict,
               coalesce(m.n, 0) AS mini_count, m.at AS mini_at, s.last_activity_ms,
               greatest(s.updated_at, x.created_at, m.at) AS changed_at
        FROM sessions s LEFT JOIN session_summaries x USING (session_id) LEFT JOIN minis m USING (session_id)
    )
    SELECT cur.* FROM cur LEFT JOIN search_index_state st USING (session_id)
    WHERE st.session_id IS NULL OR st.input_revision <> cur.input_revision
       OR st.summary_at IS DISTINCT FROM cur.summary_at OR st.summary_verdict IS DISTINCT FROM cur.summary_verdict
       OR st.mini_count <> cur.mini_count OR st.mini_at IS DISTINCT FROM cur.mini_at
       OR st.tokenizer_version <> ?
    ORDER BY cur.last_activity_ms DESC NULLS LAST, cur.session_id
"""
_REMOVED = "SELECT session_id FROM search_index_state WHERE session_id NOT IN (SELECT session_id FROM sessions)"

# A turn's text is its canonical document ("User Prompt: ...\nAgent Thought: ...\nAgent Response: ..."):
# the prompt and thought up to twice `FIELD_CHARS`, the response up to `FIELD_CHARS`.
_RESPONSE = "\nAgent Response: "
_TURN_TEXT = f"""
    SELECT turn_id, session_id, ts_ms,
           CASE WHEN cut > 0 THEN substr(document, 1, least(cut - 1, {2 * FIELD_CHARS}))
                ELSE substr(document, 1, {3 * FIELD_CHARS}) END AS head,
           CASE WHEN cut > 0 THEN substr(document, cut + {len(_RESPONSE)}, {FIELD_CHARS}) ELSE '' END AS response
    FROM (SELECT id AS turn_id, session_id, ts_ms, document, strpos(document, '{_RESPONSE}') AS cut FROM turns)
"""
_LABELS = ("User Prompt: ", "\nAgent Thought: ")


def _turn_text(row: dict) -> str:
    head = row["head"]
    for label in _LABELS:
        head = head.replace(label, "\n", 1)
    return f"{head.strip()}\n{row['response']}".strip()


def _summary_text(row: dict) -> str:
    parts = [row.get("title"), row.get("summary"), row.get("category"), " ".join(row.get("technologies") or [])]
    return "\n".join(p for p in parts if p)


def _junk(verdict: str | None) -> bool:
    return verdict is not None and verdict != "ok"


class Search(Repository):
    # --- the index -------------------------------------------------------------------------------

    def refresh(self, limit: int | None = None) -> RefreshReport:
        """Index again the sessions that changed since they were indexed (or never were), at most
        `limit` of them, newest first, and drop the removed ones. One connection serves a batch of
        `BATCH_SESSIONS` (an open costs about 90 ms); it is let go between batches, so other
        processes write meanwhile."""
        started = time.monotonic()
        with self.file.held():
            with self.file.connect() as con:
                changed = records(con, _CHANGED, [TOKENIZER_VERSION])
                removed = [r["session_id"] for r in records(con, _REMOVED)]
            todo = changed if limit is None else changed[:limit]
            if removed:
                with self.file.transaction() as con:
                    _delete_sessions(con, removed)
                    con.execute(
                        "DELETE FROM search_index_state WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [removed]
                    )
            written = indexed = 0
            for start in range(0, len(todo), BATCH_SESSIONS):
                if start:
                    with self.file.released():
                        pass  # other processes' turn at the file
                batch = todo[start : start + BATCH_SESSIONS]
                documents = self._read_documents([r["session_id"] for r in batch])
                try:
                    written += self._write(batch, documents)
                    indexed += len(batch)
                except duckdb.TransactionException:
                    pass  # another refresh wrote these sessions meanwhile
            compacted = self._compact_if_due() if indexed or removed else False
        return RefreshReport(
            indexed, len(removed), written, time.monotonic() - started, len(changed) - indexed, compacted
        )

    def _compact_if_due(self, force: bool = False) -> bool:
        """Merge the new postings into the sorted ones, dropping those of replaced documents, when
        they (new and dead) come to `COMPACT_SHARE` of the sorted ones (and `COMPACT_MIN_ROWS`): a
        refresh appends only, and a query's read of the unsorted ones stays small."""
        with self.file.connect() as con:
            sorted_rows, new_rows, live = con.execute(
                """SELECT (SELECT count(*) FROM search_postings), (SELECT count(*) FROM search_postings_new),
                          (SELECT coalesce(sum(terms), 0) FROM search_documents)"""
            ).fetchone()
        dead = sorted_rows + new_rows - live
        if not force and new_rows + dead < max(COMPACT_MIN_ROWS, COMPACT_SHARE * sorted_rows):
            return False
        with self.file.transaction() as con:
            con.execute(
                """CREATE TEMP TABLE search_merge AS
                   SELECT p.* FROM (SELECT * FROM search_postings UNION ALL SELECT * FROM search_postings_new) p
                   SEMI JOIN search_documents d ON d.doc_id = p.doc_id"""
            )
            con.execute("DELETE FROM search_postings")
            con.execute("DELETE FROM search_postings_new")
            con.execute("INSERT INTO search_postings SELECT * FROM search_merge ORDER BY term, doc_id")
            con.execute("DROP TABLE search_merge")
        return True

    def _read_documents(self, session_ids: list[str]) -> dict[str, list[tuple[str, str | None, str]]]:
        """Each session's documents as (kind, turn id, text), the summary first, then by turn."""
        ids = "(SELECT unnest(?::VARCHAR[]))"
        with self.file.connect() as con:
            turns = records(
                con,
                f"{_TURN_TEXT} WHERE session_id IN {ids} ORDER BY session_id, ts_ms NULLS FIRST, turn_id",
                [session_ids],
            )
            minis = records(
                con,
                f"SELECT m.turn_id, m.session_id, m.text FROM mini_summaries m WHERE m.session_id IN {ids} ORDER BY m.turn_id",
                [session_ids],
            )
            summaries = records(
                con,
                f"SELECT session_id, title, summary, category, technologies, verdict FROM session_summaries WHERE session_id IN {ids}",
                [session_ids],
            )
            cards = con.execute(f"SELECT session_id, text FROM session_cards WHERE session_id IN {ids}", [session_ids])
            cards = cards.fetchall()
        documents: dict[str, list[tuple[str, str | None, str]]] = {s: [] for s in session_ids}
        for row in summaries:
            if not _junk(row["verdict"]):
                documents[row["session_id"]].append(("summary", None, _summary_text(row)))
        for session_id, text in cards:
            documents[session_id].append(("card", None, text))
        for row in minis:
            documents[row["session_id"]].append(("mini", row["turn_id"], row["text"]))
        for row in turns:
            documents[row["session_id"]].append(("turn", row["turn_id"], _turn_text(row)))
        return documents

    def _write(self, batch: list[dict], documents: dict[str, list[tuple[str, str | None, str]]]) -> int:
        """Replace the batch's sessions' documents (their old postings stay until the next compaction,
        matching no document) and record what they were indexed at."""
        counted = [(s, kind, turn, term_counts(text)) for s, rows in documents.items() for kind, turn, text in rows]
        per_session = {s: len(rows) for s, rows in documents.items()}
        with self.file.transaction() as con:
            # The state first: a concurrent refresh of the same session conflicts here, not later.
            state = pd.DataFrame(
                {
                    "session_id": [r["session_id"] for r in batch],
                    "input_revision": [r["input_revision"] for r in batch],
                    "summary_at": [r["summary_at"] for r in batch],
                    "summary_verdict": [r["summary_verdict"] for r in batch],
                    "mini_count": [r["mini_count"] for r in batch],
                    "mini_at": [r["mini_at"] for r in batch],
                    "documents": [per_session[r["session_id"]] for r in batch],
                }
            )
            con.register("state", state)
            con.execute(
                """INSERT INTO search_index_state BY NAME
                   SELECT *, ? AS tokenizer_version, ? AS indexed_at FROM state
                   ON CONFLICT (session_id) DO UPDATE SET input_revision = excluded.input_revision,
                       summary_at = excluded.summary_at, summary_verdict = excluded.summary_verdict,
                       mini_count = excluded.mini_count, mini_at = excluded.mini_at, documents = excluded.documents,
                       tokenizer_version = excluded.tokenizer_version, indexed_at = excluded.indexed_at""",
                [TOKENIZER_VERSION, now()],
            )
            con.unregister("state")
            _delete_sessions(con, list(documents))
            if not counted:
                return 0
            first = con.execute("SELECT nextval('search_doc_ids') FROM range(?)", [len(counted)]).fetchall()
            ids = [r[0] for r in first]
            terms, doc_ids, tfs = [], [], []
            for doc_id, (_, _, _, counts) in zip(ids, counted):
                terms.extend(map(term_key, counts))
                tfs.extend(counts.values())
                doc_ids.extend([doc_id] * len(counts))
            docs = pd.DataFrame(
                {
                    "doc_id": ids,
                    "session_id": [c[0] for c in counted],
                    "turn_id": [c[2] for c in counted],
                    "kind": [c[1] for c in counted],
                    "length": [sum(c[3].values()) for c in counted],
                    "terms": [len(c[3]) for c in counted],
                }
            )
            con.register("docs", docs)
            con.execute("INSERT INTO search_documents BY NAME SELECT * FROM docs")
            con.unregister("docs")
            postings = pd.DataFrame({"term": terms, "doc_id": doc_ids, "tf": tfs})
            con.register("postings", postings)
            con.execute("INSERT INTO search_postings_new SELECT term, doc_id, tf FROM postings ORDER BY term, doc_id")
            con.unregister("postings")
        return len(counted)

    def behind(self) -> int:
        """The sessions a refresh would index or drop: one query, cheap when nothing changed."""
        with self.file.connect() as con:
            return len(records(con, _CHANGED, [TOKENIZER_VERSION])) + len(records(con, _REMOVED))

    def status(self) -> dict:
        """The index's documents and sessions, an estimate of its size on disk, the sessions behind the
        store (`behind`: changed since they were indexed, never indexed, or removed), how long the
        oldest of those changes has waited (`lag_s`, 0 when none waits) and the last refresh's time."""
        with self.file.connect() as con:
            documents = con.execute("SELECT count(*) FROM search_documents").fetchone()[0]
            state = con.execute("SELECT count(*), max(indexed_at) FROM search_index_state").fetchone()
            changed = records(con, _CHANGED, [TOKENIZER_VERSION])
            removed = len(records(con, _REMOVED))
            size = _size_bytes(con)
        waiting = [r["changed_at"] for r in changed if r["changed_at"] is not None]
        return {
            "documents": documents,
            "sessions": state[0],
            "size_bytes": size,
            "behind": len(changed) + removed,
            "lag_s": max(0.0, (now() - min(waiting)).total_seconds()) if waiting else 0.0,
            "last_refresh": state[1],
        }

    # --- queries ---------------------------------------------------------------------------------

    def sessions(
        self,
        query: str,
        *,
        limit: int = 10,
        since_ms: int | None = None,
        category: str | None = None,
        file: str | None = None,
        project: str | None = None,
    ) -> list[SessionHit]:
        """The sessions that best match `query`, best first, each with its best documents."""
        return self._sessions(query, limit, since_ms, category, file, project, kinds=None)

    def summaries(self, query: str, *, limit: int = 10, category: str | None = None) -> list[SessionHit]:
        """Sessions by their accounts' documents alone, the summary's and the card's (`query_summaries`)."""
        return self._sessions(query, limit, None, category, None, None, kinds=("summary", "card"))

    def turns(self, query: str, *, limit: int = 10, session_id: str | None = None) -> list[TurnHit]:
        """The turns that best match `query` (by their text or their mini summary), best first."""
        terms = _check_query(query, limit)
        with self.file.connect() as con:
            if (
                session_id is not None
                and not con.execute("SELECT count(*) FROM sessions WHERE session_id = ?", [session_id]).fetchone()[0]
            ):
                raise SearchError(f"no session {session_id!r} in the store")
            where = ["d.kind IN ('turn', 'mini')"]
            params: list = []
            if session_id is not None:
                where.append("d.session_id = ?")
                params.append(session_id)
            rows = records(
                con,
                f"""{_scored(con, terms)},
                ranked AS (
                    SELECT d.session_id, d.turn_id, d.kind, d.doc_id, sc.score,
                           row_number() OVER (PARTITION BY d.turn_id ORDER BY sc.score DESC, d.kind) AS rn
                    FROM scored sc JOIN search_documents d USING (doc_id) WHERE {" AND ".join(where)}
                )
                SELECT r.*, t.ts_ms FROM ranked r LEFT JOIN turns t ON t.id = r.turn_id
                WHERE r.rn = 1
                ORDER BY round(r.score, 6) DESC, t.ts_ms DESC NULLS LAST, r.session_id, r.turn_id LIMIT ?""",
                [*params, limit],
            )
            texts = _texts(con, [(r["kind"], r["session_id"], r["turn_id"]) for r in rows])
        return [
            TurnHit(
                r["session_id"], r["turn_id"], r["ts_ms"], r["score"], r["kind"],
                snippet(texts.get((r["kind"], r["session_id"], r["turn_id"]), ""), terms),
            )
            for r in rows
        ]  # fmt: skip

    def _sessions(self, query, limit, since_ms, category, file, project, kinds) -> list[SessionHit]:
        terms = _check_query(query, limit)
        if category is not None and category not in CATEGORIES:
            raise SearchError(f"unknown category {category!r}: one of {', '.join(CATEGORIES)}")
        where, params = ["true"], []
        if kinds is not None:
            where.append(f"d.kind IN ({', '.join(repr(k) for k in kinds)})")
        with self.file.connect() as con:
            filters, filter_params = session_filters(con, since_ms, category, file, project)
            where += filters
            params += filter_params
            rows = records(
                con,
                f"""{_scored(con, terms)},
                ranked AS MATERIALIZED (
                    SELECT d.session_id, d.doc_id, d.kind, d.turn_id, sc.score,
                           row_number() OVER (PARTITION BY d.session_id ORDER BY sc.score DESC, d.doc_id) AS rn
                    FROM scored sc JOIN search_documents d USING (doc_id)
                    JOIN sessions s ON s.session_id = d.session_id
                    LEFT JOIN session_summaries x ON x.session_id = d.session_id
                    WHERE {" AND ".join(where)}
                ),
                top AS (
                    SELECT r.session_id,
                           sum(CASE WHEN rn = 1 THEN score WHEN rn <= 3 THEN {NEXT_SHARE} * score ELSE 0 END) AS total,
                           any_value(s.last_activity_ms) AS last_ms
                    FROM ranked r JOIN sessions s USING (session_id)
                    GROUP BY r.session_id
                    ORDER BY round(total, 6) DESC, last_ms DESC NULLS LAST, r.session_id LIMIT ?
                ),
                turns_matched AS (
                    SELECT session_id, turn_id, max(score) AS score FROM ranked
                    WHERE turn_id IS NOT NULL AND session_id IN (SELECT session_id FROM top) GROUP BY 1, 2
                ),
                turn_lists AS (
                    SELECT session_id, list(turn_id ORDER BY score DESC, turn_id)[1:{TURN_IDS}] AS turn_ids
                    FROM turns_matched GROUP BY 1
                ),
                best AS (
                    SELECT session_id, list({{'kind': kind, 'turn_id': turn_id, 'score': score}} ORDER BY rn) AS matches
                    FROM ranked WHERE rn <= {MATCHES} AND session_id IN (SELECT session_id FROM top) GROUP BY 1
                )
                SELECT top.session_id, top.total AS score, a.title, a.summary, a.category, s.first_activity_ms,
                       s.last_activity_ms, a.source_tier AS tier, a.degraded, a.verdict, b.matches,
                       coalesce(tl.turn_ids, []) AS turn_ids
                FROM top JOIN sessions s USING (session_id) LEFT JOIN session_accounts a USING (session_id)
                JOIN best b USING (session_id) LEFT JOIN turn_lists tl USING (session_id)
                ORDER BY round(top.total, 6) DESC, s.last_activity_ms DESC NULLS LAST, top.session_id""",
                [*params, limit],
            )
            wanted = [(m["kind"], r["session_id"], m["turn_id"]) for r in rows for m in r["matches"]]
            texts = _texts(con, wanted)
        hits = []
        for r in rows:
            matches = [
                Match(m["kind"], m["turn_id"], m["score"], snippet(texts.get((m["kind"], r["session_id"], m["turn_id"]), ""), terms))
                for m in r["matches"]
            ]  # fmt: skip
            hits.append(
                SessionHit(
                    r["session_id"], r["score"], r["title"], r["summary"], r["category"], r["first_activity_ms"],
                    r["last_activity_ms"], r["tier"], r["degraded"], r["verdict"], bool(r["degraded"]),
                    matches, list(r["turn_ids"]),
                )
            )  # fmt: skip
        return hits


def session_filters(
    con: duckdb.DuckDBPyConnection, since_ms=None, category=None, file=None, project=None
) -> tuple[list[str], list]:
    """The conditions (over `sessions s` and `session_summaries x`) and their parameters of a
    search's filters: last active since, the summary's category, a file a turn read, edited or
    created (its whole path or its tail: `settings.py` finds `src/app/settings.py`), the project (its
    whole path or its last components, as `status --project` names one)."""
    where, params = [], []
    if since_ms is not None:
        where.append("s.last_activity_ms >= ?")
        params.append(int(since_ms))
    if category is not None:
        where.append("x.category = ?")
        params.append(category)
    if file is not None:
        try:
            touched, touched_params = touched_file_sql(file)
        except ValueError as exc:
            raise SearchError("the file to search by is empty") from exc
        where.append(f"s.session_id IN (SELECT f.session_id FROM turn_facts f WHERE {touched})")
        params += touched_params
    if project is not None:
        where.append("s.session_id IN (SELECT unnest(?::VARCHAR[]))")
        params.append(project_session_ids(con, project)[1])
    return where, params


def _check_query(query: str, limit: int) -> list[str]:
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


def _scored(con: duckdb.DuckDBPyConnection, terms: list[str]) -> str:
    """`scored` (doc_id, score): the BM25 of the documents holding the query's terms. The keys are
    integers, inlined: the sorted postings' row groups are skipped by their term ranges as the scan
    reads. Document frequencies are counted first, over the postings (a replaced document's too until
    the next compaction: at most a quarter more). A term in more than `COMMON_SHARE` of the documents
    then only adds to the score of documents that hold a rarer query term, when there is one
    (MaxScore's pruning): "client" in a query about a websocket client does not score every document
    with "client" in it."""
    keys = sorted({term_key(t) for t in terms})
    listed = ", ".join(map(str, keys))
    n = con.execute("SELECT count(*) FROM search_documents").fetchone()[0]
    df = dict(
        con.execute(
            f"""SELECT term, count(*) FROM (
                    SELECT term FROM search_postings WHERE term IN ({listed})
                    UNION ALL SELECT term FROM search_postings_new WHERE term IN ({listed})
                ) GROUP BY term"""
        ).fetchall()
    )
    rare = [k for k, count in df.items() if count <= COMMON_SHARE * n] or list(df) or keys
    common = [k for k in df if k not in rare]

    def postings(which: list[int]) -> str:
        listed = ", ".join(map(str, which))
        return (
            f"SELECT term, doc_id, tf FROM search_postings WHERE term IN ({listed}) "
            f"UNION ALL SELECT term, doc_id, tf FROM search_postings_new WHERE term IN ({listed})"
        )

    frequencies = ", ".join(f"({k}, {df.get(k, 1)})" for k in keys)
    common_part = (
        f"UNION ALL SELECT * FROM ({postings(common)}) WHERE doc_id IN (SELECT doc_id FROM rare)" if common else ""
    )
    return f"""
        WITH stats AS (SELECT count(*)::DOUBLE AS n, avg(length) AS avgdl FROM search_documents),
        df(term, df) AS (VALUES {frequencies}),
        rare AS MATERIALIZED ({postings(rare)}),
        kept AS (SELECT * FROM rare {common_part}),
        scored AS MATERIALIZED (
            SELECT kept.doc_id,
                   sum(ln(1 + greatest(stats.n - df.df + 0.5, 0.5) / (df.df + 0.5))
                       * kept.tf * {K1 + 1} / (kept.tf + {K1} * (1 - {B} + {B} * d.length / stats.avgdl))) AS score
            FROM kept JOIN df USING (term) JOIN search_documents d USING (doc_id), stats
            GROUP BY kept.doc_id
        )"""


def _texts(con: duckdb.DuckDBPyConnection, wanted: list[tuple[str, str, str | None]]) -> dict:
    """The text each (kind, session id, turn id) document was indexed from, for its snippet."""
    out: dict = {}
    sessions = sorted({s for kind, s, _ in wanted if kind == "summary"})
    cards = sorted({s for kind, s, _ in wanted if kind == "card"})
    if cards:
        for session_id, text in con.execute(
            "SELECT session_id, text FROM session_cards WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [cards]
        ).fetchall():
            out[("card", session_id, None)] = text
    minis = sorted({t for kind, _, t in wanted if kind == "mini"})
    turns = sorted({t for kind, _, t in wanted if kind == "turn"})
    if sessions:
        for row in records(
            con,
            "SELECT session_id, title, summary, category, technologies FROM session_summaries WHERE session_id IN (SELECT unnest(?::VARCHAR[]))",
            [sessions],
        ):
            out[("summary", row["session_id"], None)] = _summary_text(row)
    if minis:
        for row in records(
            con,
            "SELECT turn_id, session_id, text FROM mini_summaries WHERE turn_id IN (SELECT unnest(?::VARCHAR[]))",
            [minis],
        ):
            out[("mini", row["session_id"], row["turn_id"])] = row["text"]
    if turns:
        for row in records(con, f"{_TURN_TEXT} WHERE turn_id IN (SELECT unnest(?::VARCHAR[]))", [turns]):
            out[("turn", row["session_id"], row["turn_id"])] = _turn_text(row)
    return out


def _delete_sessions(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> None:
    """Drop the sessions' documents; their postings match none from now on, and go at the next compaction."""
    con.execute("DELETE FROM search_documents WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [session_ids])


def _size_bytes(con: duckdb.DuckDBPyConnection) -> int:
    """The index tables' blocks on disk (DuckDB's storage info: blocks they use, at the file's block size)."""
    block = con.execute("SELECT block_size FROM pragma_database_size() WHERE database_name = 'store'").fetchone()
    size = block[0] if block else 262_144
    blocks = 0
    for table in ("search_documents", "search_postings", "search_postings_new", "search_index_state"):
        blocks += con.execute(
            f"SELECT count(DISTINCT block_id) FROM pragma_storage_info('{table}') WHERE block_id >= 0"
        ).fetchone()[0]
    return blocks * size
