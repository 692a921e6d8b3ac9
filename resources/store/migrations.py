"""The store's schema and its numbered migrations, applied in order from `schema_meta.version` by
`migrate`; `ensure_current` migrates a file once per process (`open_store` calls it).

A fresh store is created at the latest shape (`schema.sql`, and `session_summaries` from
`summary_row.py`) and recorded at the latest version; an older store runs every migration past its
version, each in the one transaction of `migrate`, and records each version it reached.

To add a migration (a column, say):
1. write the column in `schema.sql` (or, for `session_summaries`, in `summary_row.py`);
2. append `N: [add_column("table", "name TYPE")],` below, N the last number + 1
   (`summary_column("name")` for a column of the summary row);
3. name the column in `docs/schema.md` (`tests/test_schema.py` fails until you do).
A migration's steps must be idempotent (`ADD COLUMN IF NOT EXISTS`): a table created since the
store's version by `schema.sql` already has the column. A step is a SQL statement, or a function of
the connection for what SQL alone cannot do (converting values).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib.resources import files

import duckdb

from digest.settings_fleet import EMBEDDED_MODEL
from resources.store.cards import refresh_all_cards
from resources.store.connection import StoreFile, now
from resources.store.facts import refresh_turn_facts
from resources.store.fidelity import refresh_fidelity, refresh_turn_terms
from resources.store.mini_summaries import judge_stored_mini_summaries, owe_upgrades_of_summaries_from_junk
from resources.store.redaction import redact_stored, redact_stored_since_13
from resources.store.summary_row import summary_column, summary_ddl
from resources.store.vectors import migrate_text_vectors

SCHEMA = files(__package__).joinpath("schema.sql").read_text(encoding="utf-8") + "\n" + summary_ddl()
VIEWS = files(__package__).joinpath("views.sql").read_text(encoding="utf-8").replace("{embedded_model}", EMBEDDED_MODEL)


def judge_summaries_again(con: duckdb.DuckDBPyConnection) -> None:
    """Every stored summary judged and scored again (`digest.verdict` changed)."""
    sessions = [r[0] for r in con.execute("SELECT session_id FROM session_summaries ORDER BY 1").fetchall()]
    for start in range(0, len(sessions), 500):
        refresh_fidelity(con, sessions[start : start + 500])


def add_column(table: str, definition: str) -> str:
    """DuckDB adds no column with a constraint: an added column is nullable, its writers fill it."""
    return f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {definition.replace(' NOT NULL', '')}"


# Each turn's terms (`resources.store.fidelity`): 19 moves them into the turn's row; the redactions of
# 13 and 18 extract them again, so a store older than either gets the columns there.
TURN_TERM_COLUMNS = [add_column("turns", "terms MAP(VARCHAR, INTEGER)"), add_column("turns", "terms_words BOOLEAN")]

MIGRATIONS: dict[int, list[str | Callable[[duckdb.DuckDBPyConnection], object]]] = {
    # 1: the first stores. 2: the 23 columns added while every store stayed at version 1.
    2: [
        summary_column("origin"),
        add_column("friction_events", "bound VARCHAR"),
        add_column("turns", "embedding VARCHAR"),
        add_column("imported_summaries", "metadata JSON"),
        add_column("imported_summaries", "embedding VARCHAR"),
        add_column("attempts", "host VARCHAR"),
        *[summary_column(c) for c in ("host", "host_reason", "raw_tokens_source", "raw_tokens_counted")],
        *[
            add_column("imported_summaries", column)
            for column in (
                "category VARCHAR", "quality INTEGER", "productivity INTEGER", "impact INTEGER", "complexity INTEGER",
                "technologies VARCHAR[]", "degraded BOOLEAN", "raw_canonical BOOLEAN", "participating_agents VARCHAR[]",
                "models VARCHAR[]", "total_tool_calls INTEGER", "tools_used VARCHAR[]",
                "source_agent_identities VARCHAR[]",
            )
        ],
    ],
    # 3: a streamed call's time to its first piece (the host's prompt rate, `digest.pacing`).
    3: [add_column("attempts", "first_token_s DOUBLE")],
    # 4: vectors as numbers: `embedding_f32`, the text vectors of float32 origin converted.
    4: [migrate_text_vectors],
    # 5: where a summary's raw cap came from (an auto cap follows its host's speed, `digest.pacing`).
    5: [summary_column("raw_cap_source")],
    # 6: a staged reply carries whether its call is in the ledger yet (a kill between them, issue 22).
    6: [add_column("response_cache", "attempt_recorded BOOLEAN")],
    # 7: each summary's fidelity score, and the identifiers it names and misses (`digest.fidelity`).
    7: [summary_column("fidelity"), summary_column("fidelity_found"), summary_column("fidelity_missed")],
    # 8: a call's attempt is written before the call (`in-flight`); its deadline bounds the time an
    # interrupted call spent (issue 31).
    8: [add_column("attempts", "deadline_s DOUBLE")],
    # 9: how much of a degraded summary's input was mini summaries, and the coverage step it was made
    # at: a sweep makes it again when its session's coverage crosses the next step (issue 28).
    9: [summary_column("mini_summary_coverage"), summary_column("coverage_step")],
    # 10: each summary's verdict, ok or the kind of junk, and its evidence (`digest.verdict`, issue 29).
    10: [summary_column("verdict"), summary_column("verdict_evidence")],
    # 11: the turns each summary covered, and which went by their mini summary (issue 29). A summary at
    # its session's current turns that is raw or imported covered every one of them.
    11: [
        summary_column("covered_turn_ids"),
        summary_column("mini_turn_ids"),
        """UPDATE session_summaries x
           SET covered_turn_ids = (SELECT list(t.id ORDER BY t.ts_ms NULLS FIRST, t.id) FROM turns t
                                   WHERE t.session_id = x.session_id),
               mini_turn_ids = CASE WHEN x.origin = 'imported' THEN NULL ELSE [] END
           FROM sessions s
           WHERE s.session_id = x.session_id AND s.input_revision = x.input_revision
             AND x.covered_turn_ids IS NULL AND (x.source_tier = 'raw' OR x.origin = 'imported')""",
    ],
    # 12: the summary code version each summary was made under; the tables of re-summaries asked for
    # and of replaced summaries are `schema.sql`'s (`resummary_requests`, `summary_history`).
    12: [summary_column("code_version")],
    # 13: each session's project, branch and source file (issue 35), and the secrets in the stored
    # text redacted (`resources.store.redaction`: the revisions move with the text, no summary is owed).
    13: [
        add_column("turns", "project VARCHAR"),
        add_column("turns", "git_branch VARCHAR"),
        add_column("turns", "redactions VARCHAR"),
        add_column("sessions", "project VARCHAR"),
        add_column("sessions", "git_branch VARCHAR"),
        add_column("sessions", "source_path VARCHAR"),
        *TURN_TERM_COLUMNS,
        """UPDATE sessions s SET source_path = t.source_path
           FROM (SELECT session_id, arg_max(source_file, (coalesce(ts_ms, 0), id)) AS source_path
                 FROM turns GROUP BY session_id) t
           WHERE t.session_id = s.session_id AND s.source_path IS NULL""",
        redact_stored,
    ],
    # 14: each turn's facts (files, commands and exit status, errors, commits, issues and PRs) for
    # the turns stored before `turn_facts` (issue 34); batched, so memory stays bounded.
    14: [refresh_turn_facts],
    # 15: each turn's identifiers (then in a `turn_terms` table) for the turns stored before: a
    # session's fidelity terms are their sum, so a refresh no longer reads every turn document. 19
    # extracts them now, into the turns.
    15: [],
    # 16: the facts read again (tool calls written as text, test runs, the errors a session ends on),
    # then each session's card from them (`session_cards`); every session is indexed again, its card with it.
    16: [refresh_turn_facts, refresh_all_cards, "DROP TABLE IF EXISTS search_index_state"],
    # 17: the rejects' reasons and excerpts, the imported summaries' metadata and the imported graph's
    # properties redacted as the ingest now redacts them (`resources.store.redaction`).
    17: [redact_stored_since_13],
    # 18: the stored text redacted again, for the kinds added since (a Telegram bot token, a Docker
    # `config.json` auth); each turn's counts grow by what is found.
    18: [*TURN_TERM_COLUMNS, redact_stored],  # the terms' columns first: the redaction refreshes them
    # 19: each turn's terms in its own row (`turns.terms`, `terms_words`), not a row a term with the
    # turn's id and session again in `turn_terms` (BENCHMARKS §29); batched.
    19: [*TURN_TERM_COLUMNS, refresh_turn_terms, "DROP TABLE IF EXISTS turn_terms"],
    # 20: the search index moves to a Tantivy index beside the store (`<store>.search/`), which readers
    # open without the store's lock: the postings tables go, every session is indexed there again.
    20: [
        "DROP TABLE IF EXISTS search_postings",
        "DROP TABLE IF EXISTS search_postings_new",
        "DROP TABLE IF EXISTS search_documents",
        "DROP SEQUENCE IF EXISTS search_doc_ids",
        "DROP TABLE IF EXISTS search_index_state",
    ],
    # 21: every summary judged again: a summary caught in a loop (a phrase said three times or more
    # over a third of it) is an echo now; the cards follow the verdicts (an ok summary's title).
    21: [judge_summaries_again, refresh_all_cards],
    # 22: what each session was indexed at moves into the index's folder, with the index it describes
    # (`search_indexed.py`): an index with no such record is cleared, every session indexed again.
    # 16 and 20 emptied the table to the same end; they drop it now that `schema.sql` makes none.
    22: ["DROP TABLE IF EXISTS search_index_state"],
    # 23: every summary judged again: its claims (the technologies it lists or names, the code and
    # messages it quotes) are checked against its turns, and one of invented facts is fabricated;
    # the cards follow the verdicts (the search index, which records each verdict, follows too).
    23: [judge_summaries_again, refresh_all_cards],
    # 24: the generated mini summaries judged (`digest.verdict.judge_mini`) and cleaned as a reply is
    # from now on: a junk one goes and its turn is archived (`junk-output`); a kept one loses the repeat
    # markers it copied from its prompt.
    24: [judge_stored_mini_summaries],
    # 25: a degraded summary made from a mini summary 24 judged junk is owed its upgrade (coverage step
    # 0): the sweep makes it again with that turn's own text.
    25: [owe_upgrades_of_summaries_from_junk],
}  # fmt: skip

SCHEMA_VERSION = max(MIGRATIONS)

# Store files this process has found at this code's schema or migrated, by (path, device, inode): a
# file replaced or deleted since is another file and is looked at again.
_current: set[tuple[str, int, int] | None] = set()
_current_lock = threading.Lock()


def migrate(file: StoreFile) -> None:
    """Create what is missing, then run the numbered migrations past the store's version; idempotent."""
    with file.transaction() as con:
        had_meta = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_meta'"
        ).fetchone()[0]
        current = con.execute("SELECT max(version) FROM schema_meta").fetchone()[0] if had_meta else None
        con.execute(SCHEMA)
        if current is None:  # a fresh store: created at the latest shape
            con.execute("INSERT INTO schema_meta VALUES (?, ?)", [SCHEMA_VERSION, now()])
        elif current > SCHEMA_VERSION:
            raise RuntimeError(f"{file.path} has schema version {current}, newer than this code's {SCHEMA_VERSION}")
        else:
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for step in MIGRATIONS[version]:
                    con.execute(step) if isinstance(step, str) else step(con)
                con.execute("INSERT INTO schema_meta VALUES (?, ?)", [version, now()])
        con.execute(VIEWS)
        # Pre-routes recorded before `bound` was a column name it in their note (rows restored
        # from an older bundle too, at the next migrate); a row set here is not matched again.
        pre_route = r"^pre-routed to the degraded summary: .* > (over-raw-cap|over-safe-band) "
        con.execute(
            "UPDATE friction_events SET bound = regexp_extract(note, ?, 1) WHERE bound IS NULL "
            "AND symptom = 'size-precheck-skip' AND consumer = 'session_summaries' AND regexp_matches(note, ?)",
            [pre_route, pre_route],
        )


def ensure_current(file: StoreFile) -> None:
    """The file at this code's schema, looked at once per process: a migration is a write transaction,
    and a sensor tick, a check or a command that only reads should not wait for the writer each time.
    A read-only `file` at the current schema is only read; missing or older, a writable open of the
    same path migrates it."""
    with _current_lock:
        if _identity(file) in _current:
            return
        if not (file.read_only and _at_current_schema(file)):
            migrate(StoreFile(file.path, lock_wait_s=file.lock_wait_s) if file.read_only else file)
        _current.add(_identity(file))


def _at_current_schema(file: StoreFile) -> bool:
    if not file.path.is_file():
        return False
    try:
        with file.connect() as con:
            return con.execute("SELECT max(version) FROM schema_meta").fetchone()[0] == SCHEMA_VERSION
    except duckdb.Error:
        return False  # no schema yet, or a writer holding the file past the wait: the migration says which


def _identity(file: StoreFile) -> tuple[str, int, int] | None:
    try:
        stat = file.path.stat()
    except FileNotFoundError:
        return None
    return str(file.path.resolve()), stat.st_dev, stat.st_ino
