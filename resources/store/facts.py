"""`store.facts`: the facts of each turn (`turn_facts`: files read, edited and created, commands and
their exit status, errors, commits, issue and PR references; `digest.facts`), written with the turns
they come from, and read back by session and by file."""

from __future__ import annotations

import duckdb

from digest.facts import FILE_KINDS, turn_fact_rows
from resources.store.connection import Repository, records
from resources.store.turn_rows import refresh_turn_rows, replace_turn_rows

FACT_COLUMNS = ["turn_id", "session_id", "kind", "value", "detail"]


def replace_turn_facts(con: duckdb.DuckDBPyConnection, rows: list[dict]) -> int:
    """The facts of these turns (`turns` rows with `id`, `session_id`, `prompt`, `response`,
    `agent`), in place of any they had; returns the facts written. In the caller's transaction."""
    if not rows:
        return 0
    return replace_turn_rows(con, "turn_facts", FACT_COLUMNS, turn_fact_rows(rows), [r["id"] for r in rows])


def refresh_turn_facts(con: duckdb.DuckDBPyConnection, session_ids: list[str] | None = None) -> int:
    """Extract the facts of stored turns again: these sessions' (None: every turn); returns the
    facts written."""
    columns = ["id", "session_id", "prompt", "response", "agent"]
    return refresh_turn_rows(con, "turn_facts", columns, replace_turn_facts, session_ids)


def touched_file_sql(path: str, kinds: tuple[str, ...] = FILE_KINDS) -> tuple[str, list]:
    """A condition on a `turn_facts` row `f`, and its parameters: a fact of a file read, edited or
    created (of `kinds`), named by `path` whole or as the tail of its stored path on a `/`
    (`settings.py` finds `src/app/settings.py`, not `mysettings.py`). ValueError for an empty path."""
    path = path.strip().removeprefix("./")
    if not path:
        raise ValueError("an empty path finds nothing: name a file, e.g. settings.py or src/app/settings.py")
    return "f.kind IN (SELECT unnest(?::VARCHAR[])) AND (f.value = ? OR ends_with(f.value, '/' || ?))", [
        list(kinds), path, path,
    ]  # fmt: skip


class Facts(Repository):
    def for_session(self, session_id: str) -> list[dict]:
        """The session's facts, in turn order (then as found): dicts of `turn_id`, `ts_ms`, `kind`,
        `value`, `detail`."""
        with self.file.connect() as con:
            return records(
                con,
                """SELECT f.turn_id, t.ts_ms, f.kind, f.value, f.detail
                   FROM turn_facts f LEFT JOIN turns t ON t.id = f.turn_id
                   WHERE f.session_id = ?
                   ORDER BY t.ts_ms NULLS FIRST, f.turn_id, f.rowid""",
                [session_id],
            )

    def sessions_by_file(self, path: str, limit: int = 10, kinds: tuple[str, ...] = FILE_KINDS) -> list[dict]:
        """The sessions that read, edited or created a file (`touched_file_sql`, facts of `kinds`),
        newest first. Each: `session_id`, `last_ms` (its latest such turn), `paths` (as stored),
        `kinds`, `turns` (list of {`turn_id`, `ts_ms`, `kind`, `path`}, oldest first)."""
        touched, params = touched_file_sql(path, kinds)
        with self.file.connect() as con:
            rows = records(
                con,
                f"""WITH hits AS (
                       SELECT f.session_id, f.turn_id, t.ts_ms, f.kind, f.value
                       FROM turn_facts f LEFT JOIN turns t ON t.id = f.turn_id
                       WHERE {touched})
                   SELECT session_id, max(ts_ms) AS last_ms,
                          list(DISTINCT value ORDER BY value) AS paths,
                          list(DISTINCT kind ORDER BY kind) AS kinds,
                          list({{'turn_id': turn_id, 'ts_ms': ts_ms, 'kind': kind, 'path': value}}
                               ORDER BY ts_ms NULLS FIRST, turn_id, kind) AS turns
                   FROM hits GROUP BY session_id
                   ORDER BY last_ms DESC NULLS LAST, session_id
                   LIMIT ?""",
                [*params, max(1, int(limit))],
            )
        return rows

    def blame(self, path: str, limit: int = 10) -> list[dict]:
        """The sessions that edited or created a file, newest first, as `sessions_by_file` gives
        them, each with its `commands` (`value`, `detail`: its exit status) and `commits` (`value`:
        the hash, `detail`: the subject), in turn order."""
        found = self.sessions_by_file(path, limit, kinds=("file-edit", "file-create"))
        done = self._of_kinds([s["session_id"] for s in found], ("command", "commit"))
        return [
            {
                **s,
                **{
                    k: [f for f in done.get(s["session_id"], []) if f["kind"] == k[:-1]]
                    for k in ("commands", "commits")
                },
            }
            for s in found
        ]

    def commits(self, commit: str) -> list[dict]:
        """The commits a turn made or showed whose hash starts with `commit` (4 hex digits or more),
        newest first: `session_id`, `turn_id`, `ts_ms`, `value` (the hash), `detail` (the subject)."""
        commit = commit.strip().lower()
        if len(commit) < 4 or any(c not in "0123456789abcdef" for c in commit):
            raise ValueError(f"{commit!r} is no commit hash: give 4 hex digits or more, e.g. 6bc7616")
        with self.file.connect() as con:
            return records(
                con,
                """SELECT f.session_id, f.turn_id, t.ts_ms, f.value, f.detail
                   FROM turn_facts f LEFT JOIN turns t ON t.id = f.turn_id
                   WHERE f.kind = 'commit' AND starts_with(lower(f.value), ?)
                   ORDER BY t.ts_ms DESC NULLS LAST, f.session_id, f.turn_id""",
                [commit],
            )

    def _of_kinds(self, session_ids: list[str], kinds: tuple[str, ...]) -> dict[str, list[dict]]:
        with self.file.connect() as con:
            rows = records(
                con,
                """SELECT f.session_id, f.turn_id, f.kind, f.value, f.detail
                   FROM turn_facts f LEFT JOIN turns t ON t.id = f.turn_id
                   WHERE f.session_id IN (SELECT unnest(?::VARCHAR[])) AND f.kind IN (SELECT unnest(?::VARCHAR[]))
                   ORDER BY t.ts_ms NULLS FIRST, f.turn_id, f.rowid""",
                [session_ids, list(kinds)],
            )
        out: dict[str, list[dict]] = {}
        for row in rows:
            out.setdefault(row.pop("session_id"), []).append(row)
        return out
