"""`store.search_vectors`: the search index's vectors, where a host serves embeddings
(`DIGEST_EMBED_PROVIDER`): one a chunk of a document (a session's card and summary, a turn's mini
summary, a turn), made by one model, stamped into the index with its dimension.

What a document is embedded from is derived from the store as it is now (`DOCUMENTS_SQL`), with a
hash of that text: a chunk whose text changed, or that no vector of the configured model covers,
is pending, and a refresh embeds the pending ones in budgeted batches, cards and summaries first. A
summary judged junk has no vector (it never ranks its session by its own text; its turns still
can). A changed model re-embeds every document beside the old vectors, which keep serving until
the new model covers the whole index; then the stamp moves to the new model and the old vectors go.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from digest.embeddings import EMBED_CHUNK_CHARS, EMBED_TURN_CHUNKS, SESSION_KINDS, EmbeddingStamp
from resources.store.connection import Repository, now, records
from resources.store.vector_snapshot import SnapshotRow, VectorHit

# Every document a vector may be made for, whole: a session's card and summary come first (they answer
# a session search), then its mini summaries and turns.
_WHOLE_DOCUMENTS = """
    SELECT 'card:' || session_id AS doc_key, session_id, NULL::VARCHAR AS turn_id, 'card' AS kind, 0 AS priority,
           text FROM session_cards
    UNION ALL
    SELECT 'summary:' || session_id, session_id, NULL::VARCHAR, 'summary', 0,
           coalesce(title, '') || chr(10) || coalesce(summary, '')
    FROM session_summaries WHERE verdict IS NULL OR verdict = 'ok'
    UNION ALL
    SELECT 'mini:' || turn_id, session_id, turn_id, 'mini', 1, text FROM mini_summaries
    UNION ALL
    SELECT 'turn:' || id, session_id, id, 'turn', 2, document FROM turns
"""
# Each document in chunks of at most `EMBED_CHUNK_CHARS` (a turn's first `EMBED_TURN_CHUNKS`, any
# other's first two: a card holds at most 2,000 characters); the first chunk keeps the document's
# key, the next are `<key>#<n>`.
DOCUMENTS_SQL = f"""
    SELECT CASE WHEN chunk = 0 THEN doc_key ELSE doc_key || '#' || chunk END AS doc_key, session_id, turn_id, kind,
           priority, substr(text, chunk * {EMBED_CHUNK_CHARS} + 1, {EMBED_CHUNK_CHARS}) AS text
    FROM (SELECT *, unnest(range(0, least(greatest(ceil(length(coalesce(text, '')) / {EMBED_CHUNK_CHARS}), 1),
                                            CASE WHEN kind = 'turn' THEN {EMBED_TURN_CHUNKS} ELSE 2 END)::BIGINT)) AS chunk
          FROM ({_WHOLE_DOCUMENTS}))
"""


@dataclass(frozen=True)
class PendingDocument:
    doc_key: str
    session_id: str
    turn_id: str | None
    kind: str
    text: str
    text_hash: str


class SearchVectors(Repository):
    def stamp(self) -> EmbeddingStamp | None:
        """The model (and dimension) whose vectors the index serves; None before the first vector."""
        with self.file.connect() as con:
            row = con.execute("SELECT model, dim FROM search_vector_stamp").fetchone()
        return EmbeddingStamp(row[0], row[1]) if row else None

    def pending(self, model: str, limit: int) -> list[PendingDocument]:
        """Documents `model` has no vector for at their current text, summaries first, newest
        sessions first within a kind."""
        with self.file.connect() as con:
            rows = records(
                con,
                f"""SELECT d.doc_key, d.session_id, d.turn_id, d.kind, d.text, md5(d.text) AS text_hash
                    FROM ({DOCUMENTS_SQL}) d
                    LEFT JOIN search_vectors v ON v.doc_key = d.doc_key AND v.model = ?
                    LEFT JOIN sessions s ON s.session_id = d.session_id
                    WHERE trim(d.text) <> '' AND (v.doc_key IS NULL OR v.text_hash <> md5(d.text))
                    ORDER BY d.priority, s.last_activity_ms DESC NULLS LAST, d.doc_key
                    LIMIT ?""",
                [model, limit],
            )
        return [PendingDocument(**row) for row in rows]

    def counts(self, model: str) -> dict:
        """Documents with a current vector of `model`, and those pending: all, and the accounts' (cards
        and summaries, embedded first)."""
        with self.file.connect() as con:
            total, current, accounts, accounts_current = con.execute(
                f"""SELECT count(*), count(v.doc_key), count(*) FILTER (d.priority = 0),
                           count(v.doc_key) FILTER (d.priority = 0)
                    FROM ({DOCUMENTS_SQL}) d
                    LEFT JOIN search_vectors v
                      ON v.doc_key = d.doc_key AND v.model = ? AND v.text_hash = md5(d.text)
                    WHERE trim(d.text) <> ''""",
                [model],
            ).fetchone()
        stamp = self.stamp()
        return {
            "model": model,
            "stamped_model": stamp.model if stamp else None,
            "documents": total,
            "embedded": current,
            "pending": total - current,
            "pending_accounts": accounts - accounts_current,
        }

    def coverage(self, model: str) -> dict:
        """The sessions whose account documents (card, summary) all have a current vector of `model`,
        the sessions whose every document has, and how many sessions the store holds."""
        with self.file.connect() as con:
            rows = con.execute(
                f"""SELECT s.session_id,
                           count(d.doc_key) FILTER (d.kind IN {SESSION_KINDS} AND v.doc_key IS NULL) = 0,
                           count(d.doc_key) FILTER (v.doc_key IS NULL) = 0
                    FROM sessions s
                    LEFT JOIN ({DOCUMENTS_SQL}) d ON d.session_id = s.session_id AND trim(d.text) <> ''
                    LEFT JOIN search_vectors v
                      ON v.doc_key = d.doc_key AND v.model = ? AND v.text_hash = md5(d.text)
                    GROUP BY s.session_id ORDER BY s.session_id""",
                [model],
            ).fetchall()
        return {
            "sessions": len(rows),
            "accounts": [session for session, accounts, _ in rows if accounts],
            "turns": [session for session, _, everything in rows if everything],
        }

    def write(self, model: str, documents: list[PendingDocument], vectors: list[list[float]]) -> None:
        """Store one batch's vectors; stamp the index with `model` when it has no stamp yet, or when
        `model` now covers every document (the previous model's vectors then go)."""
        if len(documents) != len(vectors):
            raise ValueError(f"{len(vectors)} vectors for {len(documents)} documents")
        if not documents:
            return
        dim = len(vectors[0])
        with self.file.transaction() as con:
            stamp = con.execute("SELECT model, dim FROM search_vector_stamp").fetchone()
            if stamp and stamp[0] == model and stamp[1] != dim:
                raise ValueError(f"{model} answered {dim} dimensions; the index holds {stamp[1]} from it")
            con.executemany(
                """INSERT INTO search_vectors (doc_key, session_id, turn_id, kind, model, text_hash, vector, embedded_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (doc_key, model) DO UPDATE SET text_hash = excluded.text_hash,
                       vector = excluded.vector, embedded_at = excluded.embedded_at""",
                [
                    [d.doc_key, d.session_id, d.turn_id, d.kind, model, d.text_hash, v, now()]
                    for d, v in zip(documents, vectors)
                ],
            )
            if stamp is None:
                con.execute("INSERT INTO search_vector_stamp VALUES (?, ?, ?)", [model, dim, now()])
            elif stamp[0] != model and not self._uncovered(con, model):
                con.execute("DELETE FROM search_vectors WHERE model <> ?", [model])
                con.execute("UPDATE search_vector_stamp SET model = ?, dim = ?, stamped_at = ?", [model, dim, now()])

    @staticmethod
    def _uncovered(con, model: str) -> int:
        return con.execute(
            f"""SELECT count(*) FROM ({DOCUMENTS_SQL}) d
                LEFT JOIN search_vectors v ON v.doc_key = d.doc_key AND v.model = ?
                WHERE trim(d.text) <> '' AND v.doc_key IS NULL""",
            [model],
        ).fetchone()[0]

    def prune(self) -> int:
        """Vectors of documents that are gone (a session's turns replaced, a summary now junk)."""
        with self.file.transaction() as con:
            return (
                con.execute(
                    f"""DELETE FROM search_vectors WHERE doc_key NOT IN (SELECT doc_key FROM ({DOCUMENTS_SQL}))
                    RETURNING doc_key"""
                )
                .fetchall()
                .__len__()
            )

    def hashes(self, model: str) -> dict[str, str]:
        """doc_key → the text hash of its vector by `model`."""
        with self.file.connect() as con:
            columns = con.execute("SELECT doc_key, text_hash FROM search_vectors WHERE model = ?", [model]).fetchnumpy()
        return dict(zip(columns["doc_key"].tolist(), columns["text_hash"].tolist()))

    def snapshot_rows(self, stamp: EmbeddingStamp, doc_keys: list[str]) -> tuple[list[SnapshotRow], np.ndarray]:
        """These documents' vectors by the stamped model (a matrix, a row each), each with the text it
        was embedded from (a vector-only hit's snippet is cut from it), for the snapshot searches read
        (`vector_snapshot`)."""
        if not doc_keys:
            return [], np.zeros((0, stamp.dim), dtype=np.float32)
        with self.file.connect() as con:
            con.execute("CREATE TEMP TABLE wanted (doc_key VARCHAR)")
            con.execute("INSERT INTO wanted SELECT unnest(?::VARCHAR[])", [doc_keys])
            # As a fixed-size array, the vectors come out as numpy rows: as lists they take 35 times longer.
            columns = con.execute(
                f"""SELECT v.doc_key, v.session_id, v.turn_id, v.kind, v.text_hash, coalesce(d.text, '') AS text,
                           v.vector::FLOAT[{int(stamp.dim)}] AS vector
                    FROM search_vectors v JOIN wanted w USING (doc_key)
                    LEFT JOIN ({DOCUMENTS_SQL}) d ON d.doc_key = v.doc_key
                    WHERE v.model = ? ORDER BY v.doc_key""",
                [stamp.model],
            ).fetchnumpy()
        names = ("doc_key", "session_id", "turn_id", "kind", "text_hash", "text")
        rows = [SnapshotRow(*row) for row in zip(*(columns[name].tolist() for name in names))]
        matrix = np.stack(columns["vector"]) if rows else np.zeros((0, stamp.dim), dtype=np.float32)
        return rows, matrix

    def nearest(
        self, model: str, query: list[float], limit: int, session_ids: list[str] | None = None
    ) -> list[VectorHit]:
        """The documents nearest the query by cosine similarity, best first (a scan: exact)."""
        stamp = self.stamp()
        if stamp is None:
            return []
        stamp.refuse_other(model, len(query))
        where, params = "model = ?", [model]
        if session_ids is not None:
            where += " AND list_contains(?, session_id)"
            params.append(session_ids)
        with self.file.connect() as con:
            rows = records(
                con,
                f"""SELECT doc_key, session_id, turn_id, kind,
                           list_cosine_similarity(vector, ?::FLOAT[]) AS similarity
                    FROM search_vectors WHERE {where}
                    ORDER BY similarity DESC, doc_key LIMIT ?""",
                [query, *params, limit],
            )
        return [VectorHit(**row) for row in rows]
