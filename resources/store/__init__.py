"""The DuckDB store: the system of record for turns, sessions, summaries, the graph and the model
ledger. `DigestStore` is one file (`StoreFile`) shared by a repository per feature, each a module
with its SQL beside its code, in the order one session passes through them:

- `connection.py`     `StoreFile`: the path, connections that wait out another process's lock, a
                      run's held connection, transactions, `migrate` (the tables are `schema.sql`);
                      `Repository`, the base of the modules below
- `migrations.py`     the numbered migrations `migrate` runs past a store's version (how to add one)
- `summary_row.py`    the one definition of the `session_summaries` row: its DDL, column lists, metadata
- `ingest.py`         `store.ingest`: bundle → turns: the export's turns, mini summaries, summaries
                      and rejected lines
- `facts.py`          `store.facts`: each turn's facts (files, commands, errors, commits, issues),
                      written with its turns; a session's, and the sessions that touched a file
- `sessions.py`       `store.sessions`: turns read back, and the `sessions` rows derived from them
- `mini_summaries.py` `store.mini_summaries`: turns → mini summaries: pending turns in priority order,
                      failed attempts, archive, backoff
- `cards.py`          `store.cards`: each session's card (its account from its facts, no model call),
                      made again with its turns and its summary; `session_accounts`
- `summaries.py`      `store.summaries`: turns → summary: pending sessions, the sweep's queue, failure
                      backoff, leases, a summary written or an export's adopted (with its graph rows)
- `graph.py`          `store.graph`: summary → graph: nodes and edges, finished chunks, digest state,
                      the cadence
- `ledger.py`         `store.attempts`: every model call's attempt and friction event (`RunLedger`
                      for one run)
- `hosts.py`          `store.hosts`: each model host's circuit: call outcomes, the hosts a run may go to
- `cache.py`          `store.cache`: the response cache and staged replies
- `tokens.py`         `store.tokens`: the bytes per token measured in a host's ledger
- `speed.py`          `store.speed`: a host's measured rates and seconds per token, its auto raw cap
- `reports.py`        `store.reports`: what `status`, the friction report and the asset checks read
- `resummaries.py`    `store.resummaries`: re-summaries asked for, their queue, the replaced summaries
- `backlog.py`        `store.backlog`: the pending sessions' sizes and the drain's figures (`backlog` asset)
- `archive.py`        `store.archive`: archive bundles written and restored
- `search_vectors.py` `store.search_vectors`: the search index's vectors and the model they are stamped with
- `search.py`         `store.search`: the search index (summaries, mini summaries, turns) and its queries

Decisions are `digest/`'s pure functions (the order mini summaries are made in, when a failing turn
is archived, how failures count, the digest states, a host's circuit); a repository applies them
inside the transaction that reads and writes their rows, so no decision is split across two
connections. The store itself keeps only what is the file's: `path`, `migrate`, `migrate_once`,
`query` (and `store.file` for a caller's own connection).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from resources.store.archive import NOT_ARCHIVED, RESTORE_MODES, Archive
from resources.store.backlog import BacklogReads
from resources.store.cache import Cache
from resources.store.cards import Cards
from resources.store.connection import SCHEMA_VERSION, StoreFile, StoreUnreadable
from resources.store.facts import Facts
from resources.store.graph import Graph
from resources.store.hosts import Hosts
from resources.store.ingest import Ingest
from resources.store.ledger import Attempts, RunLedger
from resources.store.mini_summaries import MiniSummaries, MiniSummaryLedger
from resources.store.projects import Projects
from resources.store.reports import Reports
from resources.store.resummaries import Resummaries
from resources.store.search import Search
from resources.store.search_vectors import SearchVectors
from resources.store.sessions import Sessions
from resources.store.speed import Speed
from resources.store.summaries import Summaries
from resources.store.tokens import Tokens

__all__ = [
    "DigestStore", "MiniSummaryLedger", "NOT_ARCHIVED", "RESTORE_MODES", "RunLedger", "SCHEMA_VERSION",
    "StoreFile", "StoreUnreadable",
]  # fmt: skip


class DigestStore:
    """The store of one DuckDB file: its repositories over the one shared `StoreFile` (see the
    module list above). `path` may be a `StoreFile` already (one that counts its connections, say)."""

    def __init__(self, path: str | Path | StoreFile, read_only: bool = False):
        self.file = path if isinstance(path, StoreFile) else StoreFile(path, read_only)
        self.ingest = Ingest(self.file)
        self.sessions = Sessions(self.file)
        self.facts = Facts(self.file)
        self.mini_summaries = MiniSummaries(self.file)
        self.summaries = Summaries(self.file)
        self.cards = Cards(self.file)
        self.graph = Graph(self.file)
        self.attempts = Attempts(self.file)
        self.hosts = Hosts(self.file)
        self.cache = Cache(self.file)
        self.tokens = Tokens(self.file)
        self.speed = Speed(self.file)
        self.reports = Reports(self.file)
        self.resummaries = Resummaries(self.file)
        self.backlog = BacklogReads(self.file)
        self.archive = Archive(self.file)
        self.search_vectors = SearchVectors(self.file)
        self.search = Search(self.file)
        self.projects = Projects(self.file)

    @property
    def path(self) -> Path:
        return self.file.path

    def migrate(self) -> None:
        self.file.migrate()

    def migrate_once(self) -> None:
        self.file.migrate_once()

    def query(self, sql: str, params: list | None = None) -> pd.DataFrame:
        return self.file.query(sql, params)
