"""The DuckDB store: the system of record for turns, sessions, summaries, the graph and the model
ledger. One module per feature, each with its SQL beside its code, in the order one session
passes through them:

- `connection.py`     the file: connections that wait out another process's lock, a run's held
                      connection, transactions, `migrate` (the tables are `schema.sql`)
- `migrations.py`     the numbered migrations `migrate` runs past a store's version (how to add one)
- `summary_row.py`    the one definition of the `session_summaries` row: its DDL, column lists, metadata
- `ingest.py`         bundle → turns: the export's turns, mini summaries, summaries and rejected lines
- `sessions.py`       turns read back, and the `sessions` rows derived from them
- `mini_summaries.py` turns → mini summaries: pending turns, failed attempts, archive, backoff
- `summaries.py`      turns → summary: pending sessions, the sweep's queue, failure backoff, leases,
                      a summary written or an export's adopted (with its summary-time graph rows)
- `graph.py`          summary → graph: nodes and edges, finished chunks, digest state, the cadence
- `ledger.py`         every model call's attempt and friction event (`RunLedger` for one run)
- `hosts.py`          each model host's circuit: call outcomes, the hosts a run may go to
- `cache.py`          the response cache and staged replies
- `tokens.py`         the bytes per token measured in a host's ledger
- `speed.py`          a host's prompt and answer rates measured in its ledger, and its auto raw cap
- `reports.py`        what `status`, the friction report and the asset checks read
- `archive.py`        archive bundles written and restored

`DigestStore` is all of them over one file. Decisions stay in `digest/` (the order mini summaries
are made in, when a failing turn is archived, how failures count, the digest states): the
feature modules only read and write, and `DigestStore` below is where a decision is applied.
"""

from __future__ import annotations

from collections.abc import Callable

from digest.graph import DigestState, SessionGraph, after_failure, after_success, reset_undigestible
from digest.mini_summaries import archive_reason_after, order_sessions
from digest.scheduling import failures_after
from digest.synthesis import Limits
from resources.store.archive import NOT_ARCHIVED, RESTORE_MODES, Archive
from resources.store.cache import Cache
from resources.store.connection import SCHEMA_VERSION, StoreUnreadable
from resources.store.graph import Graph
from resources.store.hosts import Hosts
from resources.store.ingest import Ingest
from resources.store.ledger import Ledger, RunLedger
from resources.store.mini_summaries import MiniSummaries, MiniSummaryLedger
from resources.store.reports import Reports
from resources.store.sessions import Sessions
from resources.store.speed import Speed
from resources.store.summaries import Summaries
from resources.store.tokens import Tokens

__all__ = [
    "DigestStore", "MiniSummaryLedger", "NOT_ARCHIVED", "RESTORE_MODES", "RunLedger", "SCHEMA_VERSION",
    "StoreUnreadable",
]  # fmt: skip


class DigestStore(
    Ingest, Sessions, MiniSummaries, Summaries, Graph, Ledger, Hosts, Tokens, Speed, Cache, Reports, Archive
):
    """The store of one DuckDB file: every feature's reads and writes (see the module list above)."""

    # --- where a decision of digest/ is applied to what the store holds ---------------------

    def pending_mini_summary_keys(
        self, limits: Limits, priority: str, now_ms: int, limit: int | None = None
    ) -> list[str]:
        """Sessions with turns that need a mini summary and no backoff in force, in priority order."""
        ordered = order_sessions(self.pending_mini_summary_sessions(now_ms), limits, priority)
        return [s.partition_key for s in ordered[:limit]]

    def record_mini_summary_failure(self, turn_id: str, session_id: str, cause: str, max_attempts: int) -> bool:
        """Count a failed attempt; at `max_attempts` the turn is archived. True if it was."""
        return self.count_mini_summary_failure(
            turn_id, session_id, cause, lambda n: archive_reason_after(n, max_attempts)
        )

    def record_summary_failure(
        self, session_id: str, revision: str, symptom: str, now_ms: int, backoff_s: Callable[[int], float]
    ) -> int:
        """Count a failure (from 1 again when the turns changed) and back the session off;
        returns the failure count. `backoff_s(failures)` gives the wait."""
        return self.count_summary_failure(
            session_id, revision, symptom, now_ms, lambda previous: failures_after(previous, revision), backoff_s
        )

    def write_graph(self, graph: SessionGraph, run_id: str | None = None) -> None:
        """Replace the session's graph and mark it digested at its revision, in one transaction."""
        self.replace_graph(graph, run_id, after_success(graph.input_revision))

    def record_digest_failure(self, session_id: str, revision: str, symptom: str, max_attempts: int) -> DigestState:
        """Count a failed digest; the session's last good graph, if any, stays. Returns the new state."""
        _, state = self.transition_digest_state(
            session_id, lambda previous: after_failure(previous, revision, symptom, max_attempts)
        )
        return state

    def reset_digest(self, session_id: str) -> DigestState | None:
        """An operator's reset of an undigestible session; returns the state it had, or None if it
        was not undigestible (nothing changed)."""
        previous, state = self.transition_digest_state(session_id, reset_undigestible)
        return previous if state is not None else None
