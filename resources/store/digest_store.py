"""`DigestStore`: one DuckDB file and its repositories (the package's docstring lists them), and
`open_store`, the one way in."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from resources.store.archive import Archive
from resources.store.backlog import BacklogReads
from resources.store.cache import Cache
from resources.store.cards import Cards
from resources.store.connection import LOCK_WAIT_S, StoreFile
from resources.store.facts import Facts
from resources.store.graph import Graph
from resources.store.hosts import Hosts
from resources.store.ingest import Ingest
from resources.store.ledger import Attempts
from resources.store.migrations import ensure_current, migrate
from resources.store.mini_summaries import MiniSummaries
from resources.store.projects import Projects
from resources.store.reports import Reports
from resources.store.resummaries import Resummaries
from resources.store.search import Search
from resources.store.search_vectors import SearchVectors
from resources.store.sessions import Sessions
from resources.store.speed import Speed
from resources.store.summaries import Summaries
from resources.store.tokens import Tokens


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
        migrate(self.file)

    def query(self, sql: str, params: list | None = None) -> pd.DataFrame:
        return self.file.query(sql, params)


def open_store(path: str | Path, read_only: bool = False, lock_wait_s: float = LOCK_WAIT_S) -> DigestStore:
    """The store at `path`, brought to this code's schema once per process (`ensure_current`): how
    the resource, the CLI, the MCP server and the run coordinator open it. `read_only`: every
    connection read-only, so a command that only reads needs no writable disk and, the store current,
    takes no write lock."""
    file = StoreFile(path, read_only, lock_wait_s)
    ensure_current(file)
    return DigestStore(file)
