"""What `status`, the friction report and the asset checks read: counts, the ledger's rows, the
stored summaries, and a session's raw text beside its graph."""

from __future__ import annotations

import json
from datetime import datetime

from digest.attempts import IN_FLIGHT
from digest.circuit import circuit_status
from digest.scheduling import now_ms
from digest.verdict import JUNK
from resources.store.connection import Repository, records
from resources.store.hosts import read_circuits
from resources.store.summaries import PENDING_SUMMARY_SESSIONS

# The ledger's model time by (model, host, UTC day): a replay from the response cache is no call
# and took no model time, so it is only counted; a given-up call is any that did not end "ok"
# (an interrupted one included); a call still in flight is not counted yet.
COST_TOTALS = f"""
    SELECT model, host, strftime(timezone('UTC', created_at), '%Y-%m-%d') AS day,
           round(coalesce(sum(duration_s) FILTER (NOT cached), 0), 3) AS model_seconds,
           count(*) FILTER (NOT cached) AS calls,
           count(*) FILTER (NOT cached AND outcome <> 'ok') AS given_up,
           round(coalesce(sum(duration_s) FILTER (NOT cached AND outcome <> 'ok'), 0), 3) AS given_up_seconds,
           count(*) FILTER (cached) AS cached
    FROM attempts WHERE created_at >= now() - to_days(?) AND outcome <> '{IN_FLIGHT}'
    GROUP BY ALL ORDER BY day, model, host NULLS FIRST"""


class Reports(Repository):
    def cost_totals(self, days: int) -> list[dict]:
        """Model-seconds, calls, calls given up and replies from the cache by model, host and day,
        over the last `days` days: what `status` and the friction report show."""
        with self.file.connect() as con:
            return records(con, COST_TOTALS, [days])

    def status(self) -> dict:
        """Counts for `session-digest status`."""
        with self.file.connect() as con:

            def scalar(sql: str) -> int:
                return con.execute(sql).fetchone()[0]

            tiers = dict(
                con.execute("SELECT source_tier, count(*) FROM session_summaries GROUP BY 1 ORDER BY 1").fetchall()
            )
            origins = dict(
                con.execute("SELECT origin, count(*) FROM session_summaries GROUP BY 1 ORDER BY 1").fetchall()
            )
            friction = dict(
                con.execute("SELECT symptom, count(*) FROM friction_events GROUP BY 1 ORDER BY 1").fetchall()
            )
            fidelity: dict = {}
            for tier, origin, n, scored, mean in con.execute(
                """SELECT source_tier, origin, count(*), count(fidelity), avg(fidelity) FROM session_summaries
                   GROUP BY 1, 2 ORDER BY 1, 2"""
            ).fetchall():
                fidelity.setdefault(tier, {})[origin] = {
                    "summaries": n, "scored": scored, "mean": round(mean, 3) if mean is not None else None,
                }  # fmt: skip
            verdicts = dict(
                con.execute(
                    "SELECT coalesce(verdict, 'unjudged'), count(*) FROM session_summaries GROUP BY 1 ORDER BY 1"
                ).fetchall()
            )
            junk: dict = {}
            for model, tier, verdict, n in con.execute(
                """SELECT coalesce(nullif(model, ''), origin), source_tier, verdict, count(*) FROM session_summaries
                   WHERE verdict IS NOT NULL GROUP BY ALL ORDER BY ALL"""
            ).fetchall():
                counts = junk.setdefault(model, {}).setdefault(tier, {"summaries": 0, "junk": 0})
                counts["summaries"] += n
                if verdict in JUNK:
                    counts["junk"] += n
                    counts[verdict] = n
            now = now_ms()
            hosts = {host: circuit_status(circuit, now) for host, circuit in read_circuits(con).items()}
            result = {
                "database": str(self.file.path),
                "sessions": scalar("SELECT count(*) FROM sessions"),
                "turns": scalar("SELECT count(*) FROM turns"),
                "mini_summaries": scalar("SELECT count(*) FROM mini_summaries"),
                "summaries": scalar("SELECT count(*) FROM session_summaries"),
                "summaries_by_source_tier": tiers,
                # imported: an export's summary, current for the turns, so no model call was owed.
                "summaries_by_origin": origins,
                # The mean fidelity score (docs/fidelity.md) by source tier, then origin.
                "fidelity_by_tier": fidelity,
                # ok, or the kind of junk (docs/routing.md#junk); then by model (imported: the export's) and tier.
                "summaries_by_verdict": verdicts,
                # Each session's account: its ok summary, else its card (docs/cards.md); never a junk summary.
                "accounts": dict(
                    con.execute("SELECT account, count(*) FROM session_accounts GROUP BY 1 ORDER BY 1").fetchall()
                ),
                "verdicts_by_model_and_tier": junk,
                "pending_summaries": scalar(f"SELECT count(*) FROM ({PENDING_SUMMARY_SESSIONS})"),
                "attempts": scalar("SELECT count(*) FROM attempts"),
                "rejects": scalar("SELECT count(*) FROM rejects"),
                # Sessions whose exported summary counted another number of turns than we hold (one
                # that counts none, as a junk summary's line, says nothing of drift).
                "drifted_from_export": scalar(
                    "SELECT count(*) FROM imported_summaries i JOIN sessions s USING (session_id) "
                    "WHERE i.memory_count <> s.turn_count"
                ),
                "friction_by_symptom": friction,
                # Model hosts that have failed since they last succeeded, or did once (a host not
                # listed is closed): an open one is out of rotation until its retry time.
                "host_circuits": hosts,
            }
        # The last week's model time by model, host and day (the friction report shows more days).
        result["cost_last_7_days"] = self.cost_totals(7)
        return result

    def current_imported_summaries(self, partition_keys: list[str]) -> list[dict]:
        """The summary rows (with `partition_key`) of these partitions whose summary is an export's,
        current for the turns: partitions the store already knows as summarized."""
        with self.file.connect() as con:
            return records(
                con,
                """SELECT s.partition_key, x.*, i.source_file FROM session_summaries x
                   JOIN sessions s USING (session_id) LEFT JOIN imported_summaries i USING (session_id)
                   WHERE x.origin = 'imported' AND x.input_revision = s.input_revision
                     AND s.partition_key IN (SELECT unnest(?::VARCHAR[]))""",
                [partition_keys],
            )

    def fidelity_examples(self) -> list[dict]:
        """Per (origin, source tier) the best-scored summary that is not junk, its title and fidelity
        (None: every one is junk), and how many of the group are junk: the demo's closing lines."""
        with self.file.connect() as con:
            return records(
                con,
                """SELECT origin, source_tier,
                          arg_max(title, fidelity) FILTER (verdict = 'ok') AS title,
                          max(fidelity) FILTER (verdict = 'ok') AS fidelity,
                          count(*) AS summaries, count(*) FILTER (verdict <> 'ok') AS junk
                   FROM session_summaries WHERE fidelity IS NOT NULL GROUP BY 1, 2 ORDER BY origin, source_tier""",
            )

    def junk_summaries(self) -> list[dict]:
        """Every summary with a junk verdict: the demo names them."""
        with self.file.connect() as con:
            return records(
                con,
                """SELECT session_id, verdict, origin, source_tier, route_reason, title FROM session_summaries
                   WHERE verdict <> 'ok' ORDER BY origin, source_tier, session_id""",
            )

    def friction_report_rows(self) -> dict:
        """What the friction report reads, in one connection: events, attempts, summaries, mini-summary
        coverage, undigestible sessions and the model hosts' circuits."""
        with self.file.connect() as con:
            rows = {
                "events": records(
                    con,
                    "SELECT occurred_at, asset_ref, consumer, model, symptom, suggestion_kind, input_bytes, "
                    "input_tokens_estimate, note, error_text, bound FROM friction_events ORDER BY occurred_at",
                ),
                "attempts": records(
                    con,
                    "SELECT session_id, stage, tier, model, prompt_bytes, tokens_estimate, prompt_tokens, "
                    "completion_tokens, duration_s, outcome, suspected_truncation, created_at, first_token_s FROM attempts "
                    # A replay from the response cache is no model call; one in flight has not ended.
                    "WHERE NOT cached AND outcome <> 'in-flight'",
                ),
                "summaries": records(
                    con,
                    "SELECT session_id, source_tier, degraded, route_reason, origin, host, fidelity, model, verdict "
                    "FROM session_summaries",
                ),
                "mini_coverage": records(
                    con,
                    "SELECT count(*) AS turns, count(*) FILTER (m.origin = 'imported') AS imported, "
                    "count(*) FILTER (m.origin = 'generated') AS generated "
                    "FROM turns t LEFT JOIN mini_summaries m ON m.turn_id = t.id",
                )[0],
            }
            # The time-to-first-summary curve's whole: the sessions a sweep may summarize.
            rows["sessions"] = con.execute(
                "SELECT count(*) FROM sessions WHERE session_id NOT IN (SELECT session_id FROM retired_sessions)"
            ).fetchone()[0]
            # Undigestible at the session's current turns: new turns make a session digestible again.
            rows["undigestible"] = records(
                con,
                "SELECT d.session_id, d.defer_reason AS reason, d.attempts, d.updated_at FROM digest_state d "
                "JOIN sessions s ON s.session_id = d.session_id AND s.input_revision = d.revision "
                "WHERE d.digest_state = 'undigestible' ORDER BY d.updated_at DESC",
            )
            rows["host_circuits"] = list(read_circuits(con).values())
        return rows

    # --- the asset checks' reads ------------------------------------------------------------

    def summary_rows(self) -> list[dict]:
        """Every stored summary, every column: what the asset checks validate."""
        with self.file.connect() as con:
            return records(con, "SELECT * FROM session_summaries ORDER BY session_id")

    def summaries_since(self, since: datetime | None) -> list[dict]:
        """The judged summaries written (or adopted) after `since` (None: all), oldest first: what
        the junk check counts."""
        with self.file.connect() as con:
            return records(
                con,
                """SELECT session_id, verdict, origin, model, source_tier, title, created_at FROM session_summaries
                   WHERE verdict IS NOT NULL AND (?::TIMESTAMPTZ IS NULL OR created_at > ?::TIMESTAMPTZ)
                   ORDER BY created_at, session_id""",
                [since, since],
            )

    def degraded_graph_sessions(self) -> list[str]:
        """Sessions with a graph whose summary is degraded: where summary text could leak into it."""
        with self.file.connect() as con:
            rows = con.execute(
                "SELECT DISTINCT g.session_id FROM graph_nodes g JOIN session_summaries s USING (session_id) "
                "WHERE s.degraded ORDER BY 1"
            ).fetchall()
        return [r[0] for r in rows]

    def graph_evidence(self, session_id: str) -> dict:
        """One session's raw turn text and its graph's nodes and edges (properties parsed)."""
        with self.file.connect() as con:
            documents = con.execute("SELECT document FROM turns WHERE session_id = ?", [session_id]).fetchall()
            nodes = con.execute(
                "SELECT id, label, properties FROM graph_nodes WHERE session_id = ?", [session_id]
            ).fetchall()
            edges = con.execute(
                "SELECT id, type, properties FROM graph_edges WHERE session_id = ?", [session_id]
            ).fetchall()
        return {
            "raw_text": "\n".join(d[0] for d in documents),
            "nodes": [{"id": i, "label": label, "properties": json.loads(props)} for i, label, props in nodes],
            "edges": [{"id": i, "type": kind, "properties": json.loads(props)} for i, kind, props in edges],
        }
