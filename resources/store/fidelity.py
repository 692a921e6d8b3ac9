"""Each summary's fidelity score (`digest.fidelity`), kept up to date with its turns: the sessions'
salient identifiers in `fidelity_terms` (the store's document frequencies), the score and the
identifiers found and missed in `session_summaries`."""

from __future__ import annotations

import logging
from collections import Counter

import duckdb
import pandas as pd

from digest.fidelity import Fidelity, score, session_terms

log = logging.getLogger(__name__)


def _terms(session_id: str, text: str) -> Counter:
    """The session's identifiers; none when extracting them fails on some text (the session then
    has no fidelity score: a derived value never takes the write that refreshes it down)."""
    try:
        return session_terms(text)
    except Exception as exc:  # whatever the text holds, it costs this session's terms only
        log.warning("fidelity terms of session %r not extracted: %s: %s", session_id, type(exc).__name__, exc)
        return Counter()


def _score(session_id: str, terms: Counter, text: str, df: dict, n_sessions: int) -> Fidelity:
    try:
        return score(terms, text, df, n_sessions)
    except Exception as exc:  # as for its terms: no score, never a failed write
        log.warning("fidelity of session %r not scored: %s: %s", session_id, type(exc).__name__, exc)
        return Fidelity(None, [], [])


def refresh_fidelity(con: duckdb.DuckDBPyConnection, session_ids: list[str], unscored_only: bool = False) -> None:
    """Extract these sessions' identifiers from their turns again and score their summaries (with
    `unscored_only`, those with no score yet: a restore keeps the scores its bundle holds)."""
    if not session_ids:
        return
    ids = sorted(set(session_ids))
    texts = con.execute(
        """SELECT session_id, string_agg(document, chr(10) ORDER BY ts_ms, id) FROM turns
           WHERE session_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY 1""",
        [ids],
    ).fetchall()
    terms = {sid: _terms(sid, text or "") for sid, text in texts}
    con.execute("DELETE FROM fidelity_terms WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
    batch = pd.DataFrame([(sid, t) for sid, found in terms.items() for t in found], columns=["session_id", "term"])
    if len(batch):
        con.register("fidelity_batch", batch)
        con.execute("INSERT INTO fidelity_terms SELECT session_id, term FROM fidelity_batch")
        con.unregister("fidelity_batch")
    n_sessions = con.execute("SELECT count(DISTINCT session_id) FROM fidelity_terms").fetchone()[0]
    wanted = sorted({t for found in terms.values() for t in found})
    df = dict(
        con.execute(
            "SELECT term, count(DISTINCT session_id) FROM fidelity_terms "
            "WHERE term IN (SELECT unnest(?::VARCHAR[])) GROUP BY term",
            [wanted],
        ).fetchall()
    )
    summaries = con.execute(
        "SELECT session_id, title, summary FROM session_summaries WHERE session_id IN (SELECT unnest(?::VARCHAR[]))"
        + (" AND fidelity IS NULL" if unscored_only else ""),
        [ids],
    ).fetchall()
    for sid, title, summary in summaries:
        result = _score(sid, terms.get(sid, Counter()), f"{title}\n{summary}", df, n_sessions)
        con.execute(
            "UPDATE session_summaries SET fidelity = ?, fidelity_found = ?, fidelity_missed = ? WHERE session_id = ?",
            [result.score, result.found, result.missed, sid],
        )
