"""Answers sized for an agent: the MCP tools' results as compact JSON, a session named by its card
line, each matched turn as one cited snippet, and a budget (`maxTokens`) that caps the whole answer.

An agent reads an answer to decide which session to open; the full text comes by drill-in
(`get_session_memories`, `full: true`). Tokens are counted as characters over four, as the
benchmarks count them (BENCHMARKS.md §24). An empty answer, or one that left something out, says why.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

SNIPPET_CHARS = 200  # of a matched turn's snippet
LINE_CHARS = 300  # of a session's line (its card's line is at most that)
DEFAULT_MAX_TOKENS = 1_500
TURNS_PER_SESSION = 2  # matched turns a compact answer cites per session


def dumps(answer: dict) -> str:
    """The answer as compact JSON: no indent, no spaces, UTF-8 text as it is."""
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"), default=str)


def tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def cut(text: str | None, limit: int, whole: int | None = None) -> str | None:
    """The text, or its first `limit` characters and a marker saying how much was left out; `whole`:
    the length of the text it was already cut from (a search index keeps a turn's head alone)."""
    if text is None:
        return None
    length = len(text) if whole is None else whole
    if length <= limit:
        return text
    return text[:limit] + f" …[cut: {length - limit:,} more characters]"


def short(text: str | None, limit: int = SNIPPET_CHARS) -> str | None:
    """The text on one line, at most `limit` characters (an ellipsis where it was cut)."""
    if text is None:
        return None
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cite(session_id: str, turn_id: str | None) -> str:
    """Where a snippet comes from: `session:turn` (`session` alone for its summary or card)."""
    return f"{session_id}:{turn_id}" if turn_id else session_id


def compact(result: dict) -> dict:
    """A result without its empty fields (None, "" and []): the fields stay the Memory Core's, each
    present where it says something."""
    return {k: v for k, v in result.items() if v is not None and v != "" and v != []}


def within_budget(answer: dict, key: str, max_tokens: int) -> dict:
    """The answer with results dropped from the end of `answer[key]` until its JSON fits `max_tokens`;
    `truncated` says how many and how to get them."""
    results, dropped = answer[key], 0
    while results and tokens(dumps(answer)) > max_tokens:
        results.pop()
        dropped += 1
    if dropped:
        answer["count"] = len(results)
        answer["truncated"] = (
            f"{dropped} more result{'s' if dropped > 1 else ''} left out to stay within maxTokens {max_tokens}: "
            "raise maxTokens, or read a session with get_session_memories"
        )
    return answer


def blame_answer(store, path: str, limit: int) -> dict:
    """The sessions that edited or created a file, newest first, each by its card line with the
    turns that changed it, its commands (with their exit status) and its commits: `blame`."""
    found = store.facts.blame(path, limit)
    accounts = store.cards.accounts([s["session_id"] for s in found])
    results = [
        compact(
            {
                "sessionId": s["session_id"],
                "line": short((accounts.get(s["session_id"]) or {}).get("line"), LINE_CHARS),
                "lastActivity": iso(s["last_ms"]),
                "paths": s["paths"],
                "changed": [cite(s["session_id"], t["turn_id"]) for t in s["turns"][:5]],
                "commands": [short(c["value"] + (f" → {c['detail']}" if c["detail"] else ""), 120) for c in s["commands"][-5:]],
                "commits": [short(f"{c['value'][:7]} {c['detail'] or ''}".strip(), 120) for c in s["commits"]],
            }
        )
        for s in found
    ]  # fmt: skip
    answer = {"path": path, "count": len(results), "results": results}
    if not results:
        answer["why"] = (
            f"no session edited or created a file whose path is or ends with {path!r} (reads are not counted)"
        )
    return answer


def why_answer(store, commit: str) -> dict:
    """The sessions whose turns made or showed a commit (by its hash's first digits), else the
    turns that name it in their text: `why`."""
    made = store.facts.commits(commit)
    found = [
        {"sessionId": c["session_id"], "cite": cite(c["session_id"], c["turn_id"]), "how": "made or showed",
         "commit": short(f"{c['value']} {c['detail'] or ''}".strip(), 160), "when": iso(c["ts_ms"])}
        for c in made
    ]  # fmt: skip
    if not found:
        named = store.search.turns(commit.strip(), limit=5)
        found = [
            {"sessionId": t.session_id, "cite": cite(t.session_id, t.turn_id), "how": "named", "snippet": short(t.snippet)}
            for t in named
        ]  # fmt: skip
    accounts = store.cards.accounts(list(dict.fromkeys(f["sessionId"] for f in found)))
    for f in found:
        f["line"] = short((accounts.get(f["sessionId"]) or {}).get("line"), LINE_CHARS)
    answer = {"commit": commit, "count": len(found), "results": [compact(f) for f in found]}
    if not found:
        answer["why"] = (
            f"no turn made, showed or named a commit {commit!r} (the search index holds what it has indexed)"
        )
    return answer


# --- what a search reads: the search index, or the store while none is built ---------------------------


def index_figures(source) -> tuple[int, int]:
    """The store's sessions and those the index has not taken in: the index's last refresh's, or
    the store's own (a store, for `get_all_summaries`, or while no index is built)."""
    from resources.store.search_reads import SearchIndex

    if isinstance(source, SearchIndex):
        state = source.state()
        sessions = state.get("sessions")
        return (source.session_count() if sessions is None else sessions), state.get("behind") or 0
    with source.file.connect() as con:
        sessions = con.execute("SELECT count(*) FROM sessions").fetchone()[0]
    return sessions, (source.search.behind() if sessions else 0)


def accounts_of(source, session_ids: list[str]) -> dict[str, dict]:
    """Sessions' accounts (`session_accounts` rows) from the index, or the store."""
    from resources.store.search_reads import SearchIndex

    return source.accounts(session_ids) if isinstance(source, SearchIndex) else source.cards.accounts(session_ids)


def turn_rows_of(source, turn_ids: list[str]) -> dict[str, dict]:
    """Turns' rows by id from the index (their texts' heads, with their lengths), or the store."""
    from resources.store.search_reads import SearchIndex

    if isinstance(source, SearchIndex):
        return source.turn_rows(turn_ids)
    return {r["id"]: r for r in source.sessions.turns_by_id(turn_ids)}


def iso(ms: int | None) -> str | None:
    """A time as JavaScript's `toISOString` writes it, as the Memory Core's timestamps are."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
