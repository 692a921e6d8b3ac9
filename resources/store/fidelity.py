"""Each summary's fidelity score (`digest.fidelity`) and verdict (`digest.verdict`), kept up to date
with its turns: each turn's identifiers in its `terms` (extracted once, when the turn is written),
the sessions' salient identifiers in `fidelity_terms` (the store's document frequencies), the score,
the identifiers found and missed, the verdict and its evidence in `session_summaries`."""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict

import duckdb
import pandas as pd

from digest.fidelity import Fidelity, score, turn_terms
from digest.verdict import Verdict, judge
from resources.store.connection import batch_source
from resources.store.turn_rows import refresh_turn_rows

log = logging.getLogger(__name__)

# A turn's terms travel as JSON text (`{term: count}`) and are stored as this type.
TERMS_TYPE = "MAP(VARCHAR, INTEGER)"

_DOCUMENTS = """SELECT session_id, list(document ORDER BY ts_ms, id) FROM turns
    WHERE session_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY 1"""


def turn_documents(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> dict[str, list[str]]:
    """Each session's raw turn documents, in order."""
    return {sid: [d or "" for d in docs] for sid, docs in con.execute(_DOCUMENTS, [session_ids]).fetchall()}


def judge_stored(
    con: duckdb.DuckDBPyConnection, session_id: str, title: str, summary: str, technologies: list[str] | None = None
) -> Verdict:
    """The verdict a summary would get against this session's stored turns (before writing it)."""
    return judge(turn_documents(con, [session_id]).get(session_id, []), title, summary, technologies=technologies or [])


def _derived(session_id: str, what: str, fallback, compute, *args, **kwargs):
    """`compute(*args, **kwargs)`, a value derived from the session's text, or `fallback` when it
    fails on some text: a derived value costs this session its terms, score or verdict, never the
    write that refreshes it."""
    try:
        return compute(*args, **kwargs)
    except Exception as exc:  # whatever the text holds
        log.warning("%s of session %r not computed: %s: %s", what, session_id, type(exc).__name__, exc)
        return fallback


def term_columns(rows: list[dict]) -> tuple[list[str], list[bool]]:
    """The `terms` (as JSON text, `terms_sql` stores it) and `terms_words` of these turns (rows with
    `session_id` and `document`): a turn's identifiers and their counts, or its plain words when it
    names none (`digest.fidelity.turn_terms`)."""
    texts, words = [], []
    for r in rows:
        document = r["document"] if isinstance(r["document"], str) else ""
        counts, word = _derived(r["session_id"], "turn terms", (Counter(), False), turn_terms, document)
        texts.append(json.dumps(counts))
        words.append(word)
    return texts, words


def terms_sql(column: str) -> str:
    """SQL: the JSON text of `term_columns` as the stored `terms`."""
    return f"{column}::JSON::{TERMS_TYPE}"


def replace_turn_terms(con: duckdb.DuckDBPyConnection, rows: list[dict]) -> int:
    """These stored turns' terms (rows with `id`, `session_id`, `document`) extracted again and
    written in place; returns the terms written. In the caller's transaction."""
    if not rows:
        return 0
    texts, words = term_columns(rows)
    frame = pd.DataFrame({"id": [r["id"] for r in rows], "terms": texts, "words": words})
    con.register("terms_batch", frame)
    con.execute(
        f"UPDATE turns SET terms = {terms_sql('b.terms')}, terms_words = b.words FROM terms_batch b WHERE turns.id = b.id"
    )
    con.unregister("terms_batch")
    return sum(len(json.loads(t)) for t in texts)


def refresh_turn_terms(con: duckdb.DuckDBPyConnection, session_ids: list[str] | None = None) -> int:
    """Extract the identifiers of stored turns again: these sessions' (None: every turn); returns
    the terms written."""
    return refresh_turn_rows(con, None, ["id", "session_id", "document"], replace_turn_terms, session_ids)


def _stored_terms(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> dict[str, Counter]:
    """Each session's terms as `digest.fidelity.session_terms` counts them: its turns' identifiers
    summed, or their plain words when no turn names one; a session with neither is left out."""
    terms: dict[str, Counter] = defaultdict(Counter)
    for sid, term, tf in con.execute(
        """WITH t AS (SELECT session_id, terms_words AS word, unnest(map_keys(terms)) AS term,
                             unnest(map_values(terms)) AS tf
                      FROM turns WHERE session_id IN (SELECT unnest(?::VARCHAR[])) AND cardinality(terms) > 0),
                words AS (SELECT session_id, bool_and(word) AS word FROM t GROUP BY 1)
           SELECT session_id, term, sum(tf) FROM t JOIN words USING (session_id, word) GROUP BY 1, 2""",
        [session_ids],
    ).fetchall():
        terms[sid][term] = int(tf)
    return dict(terms)


def refresh_fidelity(con: duckdb.DuckDBPyConnection, session_ids: list[str], unscored_only: bool = False) -> None:
    """Sum these sessions' terms from their turns' (`turns.terms`), judge and score their summaries
    (with `unscored_only`, those with no score yet: a restore keeps the scores its bundle holds).
    Only the turn documents of a session with a summary to judge are read: a growing log's session
    with none costs its new turns' extraction only, done as they were written."""
    if not session_ids:
        return
    ids = sorted(set(session_ids))
    terms = _stored_terms(con, ids)
    summaries = con.execute(
        "SELECT session_id, title, summary, technologies FROM session_summaries WHERE session_id IN (SELECT unnest(?::VARCHAR[]))"
        + (" AND (fidelity IS NULL OR verdict IS NULL)" if unscored_only else ""),
        [ids],
    ).fetchall()
    con.execute("DELETE FROM fidelity_terms WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
    batch = [(sid, t) for sid, found in terms.items() for t in found]
    if batch:
        with batch_source(con, "fidelity_batch", ["session_id", "term"], batch) as (source, params):
            con.execute(f"INSERT INTO fidelity_terms SELECT session_id, term FROM {source}", params)
    if not summaries:
        return  # nothing to score: the store's term counts are read for a summary only
    documents = turn_documents(con, sorted({r[0] for r in summaries}))
    n_sessions = con.execute("SELECT count(DISTINCT session_id) FROM fidelity_terms").fetchone()[0]
    wanted = sorted({t for found in terms.values() for t in found})
    df = dict(
        con.execute(
            "SELECT term, count(DISTINCT session_id) FROM fidelity_terms "
            "WHERE term IN (SELECT unnest(?::VARCHAR[])) GROUP BY term",
            [wanted],
        ).fetchall()
    )
    for sid, title, summary, technologies in summaries:
        # No text to judge against: no verdict, as no score.
        verdict = (
            _derived(
                sid,
                "verdict",
                None,
                judge,
                documents[sid],
                title,
                summary,
                terms=terms.get(sid, Counter()),
                technologies=technologies or [],
            )  # fmt: skip
            if any(d.strip() for d in documents.get(sid, []))
            else None
        )
        evidence = verdict.evidence if verdict else {}
        result = _derived(
            sid, "fidelity", Fidelity(None, [], []),
            score, terms.get(sid, Counter()), f"{title}\n{summary}", df, n_sessions,
            precision=evidence.get("precision", 1.0), copied=evidence.get("copied", 0.0),
        )  # fmt: skip
        con.execute(
            "UPDATE session_summaries SET fidelity = ?, fidelity_found = ?, fidelity_missed = ?, verdict = ?, "
            "verdict_evidence = ? WHERE session_id = ?",
            [
                result.score, result.found, result.missed,
                verdict and verdict.label, verdict and verdict.json(), sid,
            ],
        )  # fmt: skip
