"""`store.search`: the search index over each session's summary, card, mini summaries and turns,
brought up to date from the store (BM25 over `digest.search_text`'s code-aware terms).

The index is a Tantivy index in a folder beside the store (`search_index.py`): readers open it
without the store's lock (`search_reads.py`), so a search never waits for a writer. The folder keeps
what each session was indexed at (`search_indexed.py`): `refresh` indexes again only the sessions
whose turns, summary or mini summaries changed since, drops the removed ones, and publishes each
batch (a Tantivy commit) between marking its sessions pending and recording what they were indexed
at, so a crash around the commit indexes the batch again (replacing a session's documents is
idempotent) or drops it. A turn's prompt and thought are indexed up to twice `FIELD_CHARS`
characters, its response (tool output and all) up to `FIELD_CHARS`.

A summary judged junk (a verdict other than ok) is not indexed, so it never ranks its session (the
turns still do); a degraded summary is labelled a navigation index.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from digest.facts import FILE_KINDS
from resources.store.connection import Repository, now, records
from resources.store.search_index import (
    IndexBusy,
    IndexUnavailable,
    IndexWriting,
    folder_bytes,
    index_folder,
    read_state,
    unusable,
)
from resources.store.search_indexed import IndexedSessions
from resources.store.search_reads import Match, SearchError, SearchIndex, SessionHit, TurnHit, check_request

__all__ = ["Match", "RefreshReport", "Search", "SearchError", "SessionHit", "TurnHit"]

# Each turn field (prompt, thought, response) is indexed up to this many characters: the tool output
# past it (file dumps, logs) is left out of the index and of the snippets.
FIELD_CHARS = 16_000
BATCH_SESSIONS = 50  # sessions indexed per commit


@dataclass
class RefreshReport:
    sessions_indexed: int
    sessions_removed: int
    documents: int  # written by this refresh
    seconds: float
    behind: int  # sessions still to index (a `limit` left them, or another process was writing)
    busy: bool = False  # another process wrote the index: this refresh left the work to the next
    rebuilt: bool = False  # the index was built again from nothing (missing, or of another version)


# Each session as it is now, newest first: the figures it is indexed at (`_figures`; its summary's
# and latest mini summary's times in microseconds) and when it last changed.
_CURRENT = """
    WITH minis AS (SELECT session_id, count(*) AS n, max(created_at) AS at FROM mini_summaries GROUP BY 1)
    SELECT s.session_id, s.input_revision, epoch_us(x.created_at) AS summary_at, x.verdict AS summary_verdict,
           coalesce(m.n, 0) AS mini_count, epoch_us(m.at) AS mini_at,
           greatest(s.updated_at, x.created_at, m.at) AS changed_at
    FROM sessions s LEFT JOIN session_summaries x USING (session_id) LEFT JOIN minis m USING (session_id)
    ORDER BY s.last_activity_ms DESC NULLS LAST, s.session_id
"""
_FIGURES = ("input_revision", "summary_at", "summary_verdict", "mini_count", "mini_at")


def _figures(row: dict) -> list:
    return [row[k] for k in _FIGURES]


def _changes(con, indexed: IndexedSessions) -> tuple[list[dict], list[str]]:
    """The sessions the index holds at other figures than the store's (or at none), newest first,
    and those it holds that the store has no more."""
    current = records(con, _CURRENT)
    in_store = {r["session_id"] for r in current}
    changed = [r for r in current if indexed.current(r["session_id"]) != _figures(r)]
    return changed, [s for s in indexed.sessions if s not in in_store]


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
# A turn's row as a search result shows it (`search_index.ROW_TEXT_CHARS` of each text).
_TURN_ROW = (
    "session_id",
    "ts_ms",
    "type",
    "prompt",
    "thought",
    "response",
    "agent",
    "model",
    "amount_tool_calls",
    "tools_used",
)


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
    @property
    def folder(self):
        return index_folder(self.file.path)

    # --- the index -------------------------------------------------------------------------------

    def refresh(self, limit: int | None = None) -> RefreshReport:
        """Index again the sessions that changed since they were indexed (or never were), at most
        `limit` of them, newest first, and drop the removed ones; each batch of `BATCH_SESSIONS` is
        committed to the index, then recorded beside it. The index is built again from nothing
        when its folder is missing or of another version. Another process writing the index (its
        writer's lock held) leaves the work to the next refresh."""
        started = time.monotonic()
        try:
            with IndexWriting(self.folder) as index:
                return self._refresh(index, limit, started)
        except IndexBusy:
            return RefreshReport(0, 0, 0, time.monotonic() - started, self.behind(), busy=True)

    def _refresh(self, index: IndexWriting, limit: int | None, started: float) -> RefreshReport:
        with self.file.held():
            with self.file.connect() as con:
                changed, removed = _changes(con, index.indexed)
                store_sessions = con.execute("SELECT count(*) FROM sessions").fetchone()[0]
            if not index.indexed.sessions and index.document_count():
                index.clear()  # documents no record names (the record was lost): none stays
                index.commit()
            todo = changed if limit is None else changed[:limit]
            if removed:
                index.remove(removed)
                index.commit()
                index.indexed.removed(removed)
            written = indexed = 0
            for start in range(0, len(todo), BATCH_SESSIONS):
                if start:
                    with self.file.released():
                        pass  # other processes' turn at the file
                batch = todo[start : start + BATCH_SESSIONS]
                ids = [r["session_id"] for r in batch]
                documents, metas, files = self._read_documents(ids)
                per_session = {s: index.replace(s, metas[s], files.get(s, []), documents[s]) for s in ids if s in metas}
                index.indexed.pending(ids)
                index.commit()
                index.record(store_sessions, len(changed) - indexed - len(batch))
                index.indexed.indexed({r["session_id"]: _figures(r) for r in batch}, per_session)
                written += sum(per_session.values())
                indexed += len(batch)
            index.record(store_sessions, len(changed) - indexed)
        return RefreshReport(
            indexed, len(removed), written, time.monotonic() - started, len(changed) - indexed, rebuilt=index.rebuilt
        )

    def _read_documents(self, session_ids: list[str]) -> tuple[dict, dict, dict]:
        """Each session's documents as (kind, turn id, text, time, turn row | None), the summary
        first, then by turn; each session's own document (`meta`: its account, activity times,
        project, its summary's category); the files its turns read, edited or created."""
        ids = "(SELECT unnest(?::VARCHAR[]))"
        with self.file.connect() as con:
            turns = records(
                con,
                f"""SELECT d.*, {", ".join(f"t.{c} AS row_{c}" for c in _TURN_ROW)}
                    FROM ({_TURN_TEXT} WHERE session_id IN {ids}) d JOIN turns t ON t.id = d.turn_id
                    ORDER BY d.session_id, d.ts_ms NULLS FIRST, d.turn_id""",
                [session_ids],
            )
            minis = records(
                con,
                f"""SELECT m.turn_id, m.session_id, m.text, t.ts_ms FROM mini_summaries m LEFT JOIN turns t ON t.id = m.turn_id
                    WHERE m.session_id IN {ids} ORDER BY m.turn_id""",
                [session_ids],
            )
            summaries = records(
                con,
                f"SELECT session_id, title, summary, category, technologies, verdict FROM session_summaries WHERE session_id IN {ids}",
                [session_ids],
            )
            cards = con.execute(f"SELECT session_id, text FROM session_cards WHERE session_id IN {ids}", [session_ids])
            cards = cards.fetchall()
            sessions = records(
                con,
                f"""SELECT s.session_id, s.first_activity_ms, s.last_activity_ms, s.project, x.category AS summary_category
                    FROM sessions s LEFT JOIN session_summaries x USING (session_id) WHERE s.session_id IN {ids}""",
                [session_ids],
            )
            accounts = records(con, f"SELECT * FROM session_accounts WHERE session_id IN {ids}", [session_ids])
            touched = con.execute(
                f"""SELECT DISTINCT session_id, value FROM turn_facts
                    WHERE session_id IN {ids} AND kind IN (SELECT unnest(?::VARCHAR[]))""",
                [session_ids, list(FILE_KINDS)],
            ).fetchall()
        documents: dict[str, list[tuple]] = {s: [] for s in session_ids}
        for row in summaries:
            if not _junk(row["verdict"]):
                documents[row["session_id"]].append(("summary", None, _summary_text(row), None, None))
        for session_id, text in cards:
            documents[session_id].append(("card", None, text, None, None))
        for row in minis:
            documents[row["session_id"]].append(("mini", row["turn_id"], row["text"], row["ts_ms"], None))
        for row in turns:
            turn = {"id": row["turn_id"], **{k: row[f"row_{k}"] for k in _TURN_ROW}}
            documents[row["session_id"]].append(("turn", row["turn_id"], _turn_text(row), row["ts_ms"], turn))
        account_of = {r["session_id"]: r for r in accounts}
        metas = {r["session_id"]: {**r, "account": account_of.get(r["session_id"])} for r in sessions}
        files: dict[str, list[str]] = {}
        for session_id, value in touched:
            files.setdefault(session_id, []).append(value)
        return documents, metas, files

    def behind(self) -> int:
        """The sessions a refresh would index or drop: one query, cheap when nothing changed."""
        with self.file.connect() as con:
            changed, removed = _changes(con, self._indexed())
        return len(changed) + len(removed)

    def _indexed(self) -> IndexedSessions:
        """What the index holds each session at; nothing when the next refresh builds it again."""
        indexed = IndexedSessions(self.folder)
        if unusable(self.folder, read_state(self.folder)):
            indexed.sessions.clear()  # a record the rebuild throws away
        return indexed

    def status(self) -> dict:
        """The index's documents and sessions, its size on disk, the sessions behind the store
        (`behind`: changed since they were indexed, never indexed, or removed), how long the oldest of
        those changes has waited (`lag_s`, 0 when none waits) and the last refresh's time."""
        indexed = self._indexed()
        with self.file.connect() as con:
            changed, removed = _changes(con, indexed)
        waiting = [r["changed_at"] for r in changed if r["changed_at"] is not None]
        return {
            "documents": indexed.documents(),
            "sessions": len(indexed.sessions),
            "size_bytes": folder_bytes(self.folder),
            "behind": len(changed) + len(removed),
            "lag_s": max(0.0, (now() - min(waiting)).total_seconds()) if waiting else 0.0,
            "last_refresh": indexed.last_indexed(),
        }

    # --- queries (from the index alone: `search_reads.SearchIndex`) ------------------------------------

    def reader(self) -> SearchIndex:
        """The index opened for reading; `IndexUnavailable` when none is built yet."""
        return SearchIndex(self.file.path)

    def sessions(self, query: str, *, limit: int = 10, **filters) -> list[SessionHit]:
        """The sessions that best match `query`, best first (filters: since_ms, category, file, project)."""
        return self._read(lambda index: index.sessions(query, limit=limit, **filters), query, limit, filters)

    def summaries(self, query: str, *, limit: int = 10, category: str | None = None) -> list[SessionHit]:
        """Sessions by their accounts' documents alone, the summary's and the card's (`query_summaries`)."""
        ask = lambda index: index.summaries(query, limit=limit, category=category)  # noqa: E731
        return self._read(ask, query, limit, {"category": category})

    def turns(self, query: str, *, limit: int = 10, session_id: str | None = None) -> list[TurnHit]:
        """The turns that best match `query` (by their text or their mini summary), best first."""
        ask = lambda index: index.turns(query, limit=limit, session_id=session_id)  # noqa: E731
        return self._read(ask, query, limit, {}, session_id)

    def _read(self, ask, query: str, limit: int, filters: dict, session_id: str | None = None) -> list:
        """`ask(index)`; with no index built yet, nothing found (bad input still said as such)."""
        try:
            index = self.reader()
        except IndexUnavailable:
            check_request(query, limit, filters.get("category"), filters.get("file"))
            if session_id is not None:
                raise SearchError(f"no session {session_id!r} in the store") from None
            return []
        return ask(index)
