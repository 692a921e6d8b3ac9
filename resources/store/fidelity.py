"""Each summary's fidelity score (`digest.fidelity`) and verdict (`digest.verdict`), kept up to date
with its turns: the sessions' salient identifiers in `fidelity_terms` (the store's document
frequencies), the score, the identifiers found and missed, the verdict and its evidence in
`session_summaries`."""

from __future__ import annotations

import logging
from collections import Counter

import duckdb
import pandas as pd

from digest.fidelity import Fidelity, score, session_terms, session_text
from digest.verdict import Verdict, judge

log = logging.getLogger(__name__)

_DOCUMENTS = """SELECT session_id, list(document ORDER BY ts_ms, id) FROM turns
    WHERE session_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY 1"""


def turn_documents(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> dict[str, list[str]]:
    """Each session's raw turn documents, in order."""
    return {sid: [d or "" for d in docs] for sid, docs in con.execute(_DOCUMENTS, [session_ids]).fetchall()}


def judge_stored(con: duckdb.DuckDBPyConnection, session_id: str, title: str, summary: str) -> Verdict:
    """The verdict a summary would get against this session's stored turns (before writing it)."""
    return judge(turn_documents(con, [session_id]).get(session_id, []), title, summary)


def _derived(session_id: str, what: str, fallback, compute, *args, **kwargs):
    """`compute(*args, **kwargs)`, a value derived from the session's text, or `fallback` when it
    fails on some text: a derived value costs this session its terms, score or verdict, never the
    write that refreshes it."""
    try:
        return compute(*args, **kwargs)
    except Exception as exc:  # whatever the text holds
        log.warning("%s of session %r not computed: %s: %s", what, session_id, type(exc).__name__, exc)
        return fallback


def refresh_fidelity(con: duckdb.DuckDBPyConnection, session_ids: list[str], unscored_only: bool = False) -> None:
    """Extract these sessions' identifiers from their turns again, judge and score their summaries
    (with `unscored_only`, those with no score yet: a restore keeps the scores its bundle holds)."""
    if not session_ids:
        return
    ids = sorted(set(session_ids))
    documents = turn_documents(con, ids)
    texts = {sid: session_text(docs) for sid, docs in documents.items()}
    terms = {sid: _derived(sid, "fidelity terms", Counter(), session_terms, text) for sid, text in texts.items()}
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
        + (" AND (fidelity IS NULL OR verdict IS NULL)" if unscored_only else ""),
        [ids],
    ).fetchall()
    for sid, title, summary in summaries:
        # No text to judge against: no verdict, as no score.
        verdict = (
            _derived(sid, "verdict", None, judge, documents[sid], title, summary)
            if texts.get(sid, "").strip()
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
