"""`store.cards`: each session's card (`session_cards`, `digest.card`), made again in the
transaction that changes what it is made of (its turns and their facts at an ingest or a restore,
its `ok` summary's title when a summary is written), and each session's account
(`session_accounts`: its `ok` summary, else its card)."""

from __future__ import annotations

import duckdb

from digest.card import CARD_VERSION, PROMPT_CHARS, REPLY_CHARS, SOURCE_TIER, CardTurn, SessionCard, build_card
from digest.settings_fleet import EMBEDDED_MODEL
from digest.turns import id_sort_key
from resources.store.connection import Repository, batch_source, records

# Sessions whose cards are made per batch when every card is made again (a migration).
BATCH_SESSIONS = 200
_IDS = "(SELECT unnest(?::VARCHAR[]))"
COLUMNS = [
    "session_id", "input_revision", "title", "title_source", "line", "text", "card", "source_tier", "degraded",
    "raw_canonical", "summary_at", "card_version",
]  # fmt: skip


def leads(summary: dict | None) -> bool:
    """Whether this `session_summaries` row leads its session's account, as `leading_summaries`
    (views.sql) has it: judged ok, and not the embedded model's."""
    return bool(summary) and summary.get("verdict") == "ok" and summary.get("model") != EMBEDDED_MODEL


def refresh_cards(con: duckdb.DuckDBPyConnection, session_ids: list[str]) -> int:
    """The cards of these sessions made again from what the store holds now (a session gone loses
    its card); in the caller's transaction. Returns the cards written."""
    ids = sorted(set(session_ids))
    if not ids:
        return 0
    sessions = records(
        con,
        f"""SELECT s.session_id, s.turn_count, s.first_activity_ms, s.last_activity_ms, s.project, s.git_branch,
                   s.input_revision, x.title AS summary_title, x.created_at AS summary_at,
                   (SELECT mode(t.agent) FROM turns t WHERE t.session_id = s.session_id) AS harness
            FROM sessions s LEFT JOIN session_summaries x
                 ON x.session_id = s.session_id AND x.session_id IN (SELECT session_id FROM leading_summaries)
            WHERE s.session_id IN {_IDS}""",
        [ids],
    )
    turns: dict[str, list[dict]] = {s["session_id"]: [] for s in sessions}
    for row in records(
        con,
        f"SELECT id, session_id, ts_ms, substr(prompt, 1, {PROMPT_CHARS}) AS prompt FROM turns WHERE session_id IN {_IDS}",
        [ids],
    ):
        turns[row["session_id"]].append(row)
    for rows in turns.values():
        rows.sort(key=lambda t: (t["ts_ms"] or 0, id_sort_key(t["id"]), t["id"]))
    last_ids = [rows[-1]["id"] for rows in turns.values() if rows]
    tails = dict(
        con.execute(f"SELECT id, right(response, {REPLY_CHARS}) FROM turns WHERE id IN {_IDS}", [last_ids]).fetchall()
    )
    facts: dict[str, list[dict]] = {s["session_id"]: [] for s in sessions}
    for row in records(
        con,
        f"SELECT session_id, turn_id, kind, value, detail FROM turn_facts WHERE session_id IN {_IDS} ORDER BY rowid",
        [ids],
    ):
        facts[row["session_id"]].append(row)
    con.execute(f"DELETE FROM session_cards WHERE session_id IN {_IDS}", [ids])
    rows = []
    for session in sessions:
        sid = session["session_id"]
        ordered = [
            CardTurn(t["id"], n, t["prompt"] or "", (tails.get(t["id"]) or "") if n == len(turns[sid]) else "")
            for n, t in enumerate(turns[sid], 1)
        ]
        card = build_card(session, ordered, facts[sid], session["summary_title"])
        rows.append(
            [
                sid, session["input_revision"], card.title, card.title_source, card.line(), card.text(),
                card.to_json(), SOURCE_TIER, True, False, session["summary_at"], CARD_VERSION,
            ]
        )  # fmt: skip
    if rows:
        with batch_source(con, "cards_batch", COLUMNS, rows) as (source, params):
            con.execute(f"INSERT INTO session_cards ({', '.join(COLUMNS)}) SELECT * FROM {source}", params)
    return len(rows)


def refresh_all_cards(con: duckdb.DuckDBPyConnection) -> int:
    """Every session's card made again, in batches (a migration, a new `CARD_VERSION`)."""
    ids = [r[0] for r in con.execute("SELECT session_id FROM sessions ORDER BY session_id").fetchall()]
    con.execute("DELETE FROM session_cards")
    return sum(refresh_cards(con, ids[i : i + BATCH_SESSIONS]) for i in range(0, len(ids), BATCH_SESSIONS))


class Cards(Repository):
    def refresh(self, session_ids: list[str] | None = None) -> int:
        """Make these sessions' cards again (None: every session's)."""
        with self.file.transaction() as con:
            return refresh_all_cards(con) if session_ids is None else refresh_cards(con, session_ids)

    def card(self, session_id: str) -> SessionCard | None:
        with self.file.connect() as con:
            row = con.execute("SELECT card FROM session_cards WHERE session_id = ?", [session_id]).fetchone()
        return SessionCard.from_json(row[0]) if row else None

    def accounts(self, session_ids: list[str]) -> dict[str, dict]:
        """The accounts of these sessions (`session_accounts`), by session id."""
        with self.file.connect() as con:
            rows = records(con, f"SELECT * FROM session_accounts WHERE session_id IN {_IDS}", [session_ids])
        return {r["session_id"]: r for r in rows}

    def account_page(self, limit: int, offset: int = 0, category: str | None = None) -> tuple[int, list[dict]]:
        """How many sessions have an account (of `category`, if given: a card has none), and `limit`
        of them from `offset`, newest first, each with its session's activity times."""
        where, params = ("WHERE a.category = ?", [category]) if category is not None else ("", [])
        with self.file.connect() as con:
            total = con.execute(f"SELECT count(*) FROM session_accounts a {where}", params).fetchone()[0]
            rows = records(
                con,
                f"""SELECT a.*, s.turn_count, s.first_activity_ms AS session_first_ms, s.last_activity_ms AS session_last_ms
                    FROM session_accounts a JOIN sessions s USING (session_id) {where}
                    ORDER BY s.last_activity_ms DESC NULLS LAST, a.session_id LIMIT ? OFFSET ?""",
                [*params, limit, offset],
            )
        return total, rows
