"""Sessions by project (`sessions.project`): the sessions a `--project` filter names,
the counts `status --project` shows, and the friction report's table by project."""

from __future__ import annotations

import duckdb

from digest.projects import matching_projects
from resources.store.connection import Repository, records
from resources.store.redaction import redaction_counts
from resources.store.summaries import PENDING_SUMMARY_SESSIONS

NO_PROJECT = "(unknown)"


def project_session_ids(con: duckdb.DuckDBPyConnection, wanted: str) -> tuple[list[str], list[str]]:
    """The projects `wanted` names, and their sessions' ids."""
    known = [r[0] for r in con.execute("SELECT DISTINCT project FROM sessions WHERE project IS NOT NULL").fetchall()]
    projects = sorted(matching_projects(known, wanted))
    rows = con.execute(
        "SELECT session_id FROM sessions WHERE project IN (SELECT unnest(?::VARCHAR[])) ORDER BY session_id",
        [projects],
    ).fetchall()
    return projects, [r[0] for r in rows]


class Projects(Repository):
    def session_ids(self, wanted: str) -> tuple[list[str], list[str]]:
        with self.file.connect() as con:
            return project_session_ids(con, wanted)

    def partition_keys(self, wanted: str) -> set[str]:
        with self.file.connect() as con:
            _, ids = project_session_ids(con, wanted)
            rows = con.execute(
                "SELECT partition_key FROM sessions WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [ids]
            ).fetchall()
        return {r[0] for r in rows}

    def pending_summaries(self, wanted: str) -> int:
        with self.file.connect() as con:
            _, ids = project_session_ids(con, wanted)
            return con.execute(
                f"SELECT count(*) FROM ({PENDING_SUMMARY_SESSIONS}) WHERE session_id IN (SELECT unnest(?::VARCHAR[]))",
                [ids],
            ).fetchone()[0]

    def status(self, wanted: str) -> dict:
        """`status --project`: the store's counts for the sessions of the projects `wanted` names."""
        with self.file.connect() as con:
            projects, ids = project_session_ids(con, wanted)

            def scalar(sql: str) -> int:
                return con.execute(sql, [ids]).fetchone()[0]

            in_ids = "session_id IN (SELECT unnest(?::VARCHAR[]))"
            verdicts = dict(
                con.execute(
                    f"SELECT coalesce(verdict, 'unjudged'), count(*) FROM session_summaries WHERE {in_ids} "
                    "GROUP BY 1 ORDER BY 1",
                    [ids],
                ).fetchall()
            )
            return {
                "database": str(self.file.path),
                "project": wanted,
                "projects": projects,
                "sessions": len(ids),
                "turns": scalar(f"SELECT count(*) FROM turns WHERE {in_ids}"),
                "summaries": scalar(f"SELECT count(*) FROM session_summaries WHERE {in_ids}"),
                "summaries_by_verdict": verdicts,
                "pending_summaries": scalar(f"SELECT count(*) FROM ({PENDING_SUMMARY_SESSIONS}) WHERE {in_ids}"),
                "redactions": redaction_counts(con, ids),
            }

    def redactions(self, session_ids: list[str] | None = None) -> dict:
        with self.file.connect() as con:
            return redaction_counts(con, session_ids)

    def sessions_by_project(self) -> dict[str, int]:
        """How many sessions each project has, most first (`(unknown)`: no turn said)."""
        with self.file.connect() as con:
            rows = con.execute(
                f"SELECT coalesce(project, '{NO_PROJECT}'), count(*) FROM sessions GROUP BY 1 ORDER BY 2 DESC, 1"
            ).fetchall()
        return dict(rows)

    def project_rows(self) -> list[dict]:
        """The friction report's table by project: sessions, summaries (degraded, junk), the model
        calls made for them and their seconds, and the secrets redacted in their turns."""
        with self.file.connect() as con:
            return records(
                con,
                f"""
                WITH s AS (SELECT session_id, coalesce(project, '{NO_PROJECT}') AS project FROM sessions),
                calls AS (SELECT session_id, count(*) AS calls, sum(duration_s) AS seconds FROM attempts
                          WHERE NOT cached AND outcome <> 'in-flight' GROUP BY 1),
                red AS (SELECT session_id, count(*) AS turns FROM turns WHERE redactions IS NOT NULL GROUP BY 1)
                SELECT s.project, count(*) AS sessions, count(x.session_id) AS summaries,
                       count(*) FILTER (x.degraded) AS degraded,
                       count(*) FILTER (x.verdict IS NOT NULL AND x.verdict <> 'ok') AS junk,
                       coalesce(sum(c.calls), 0)::BIGINT AS calls, coalesce(sum(c.seconds), 0.0) AS model_seconds,
                       coalesce(sum(r.turns), 0)::BIGINT AS redacted_turns
                FROM s LEFT JOIN session_summaries x USING (session_id) LEFT JOIN calls c USING (session_id)
                LEFT JOIN red r USING (session_id)
                GROUP BY 1 ORDER BY model_seconds DESC, sessions DESC, 1
                """,
            )
