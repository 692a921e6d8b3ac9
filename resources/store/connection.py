"""The store's file: short-lived connections that wait out another process's lock, and
transactions. The schema and its numbered migrations are `migrations.py`'s.

DuckDB allows one writer per file across processes, so every method opens a connection, does a
short piece of work and closes it: no connection is ever held across a model call. Opening
retries while another process holds the lock, so concurrent runs wait instead of failing.

A run's phase holds one connection instead (`held`): an open costs about 90 ms here (the close
checkpoints), a statement on an open connection a few, and a summary run used to open the file
some 35 times. The held connection is let go around each model call (`released`), so other
processes write while the model works.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd

from digest.backoff import doubling_backoff_s

LOCK_WAIT_S = 120.0
# Rows a row group of the store holds (DuckDB's default is 122,880). A checkpoint rewrites each
# table's last, partly filled row group, vectors and all, and leaves the old copy's blocks free in
# the file: with 16 KB of vector a turn the default made every checkpoint of an ingest rewrite all
# the turns so far, up to 1.9 GB (BENCHMARKS §3.2). DuckDB keeps no row group size in the file: it
# applies to what is written through an ATTACH naming it, hence `_attach`.
ROW_GROUP_ROWS = 2048

# This process's opens and closes of one file, one at a time: DuckDB refuses an open that races
# the close of the file's last connection ("Unique file handle conflict"), which would read as a
# damaged store to a sensor tick in one thread while another closes. By resolved path.
_open_close_locks: dict[str, threading.Lock] = {}
_open_close_locks_lock = threading.Lock()


def _open_close_lock(path: Path) -> threading.Lock:
    with _open_close_locks_lock:
        return _open_close_locks.setdefault(str(path.resolve()), threading.Lock())


def now() -> datetime:
    return datetime.now(UTC)


def upsert_sql(table: str, columns: list[str], key: list[str], source: str, keep: Iterable[str] = ()) -> str:
    """INSERT ... ON CONFLICT DO UPDATE of every column but the key and those in `keep`, from
    `source` (what `batch_source` yields to select from)."""
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key and c not in keep)
    action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(columns)} FROM {source} "
        f"ON CONFLICT ({', '.join(key)}) {action}"
    )


# A batch of at most this many rows goes to DuckDB as one list a column, each a parameter of the
# statement (`batch_source`): registering a pandas frame costs more than a small write's statement
# whatever the frame's size (DuckDB reads each column's type through pandas); from some hundreds of
# rows on, the frame's scan is the cheaper (docs/testing.md, the unit tier).
LIST_BATCH_ROWS = 200


@contextmanager
def batch_source(
    con: duckdb.DuckDBPyConnection, name: str, columns: list[str], rows: list[dict] | list[tuple]
) -> Iterator[tuple[str, list | None]]:
    """`rows` (dicts by column name, a missing key NULL, or sequences in `columns`' order) as a
    table for the statements of the block: yields what to select them FROM and the parameters
    those statements take. A large batch is the pandas frame registered as `name` (no parameter)."""
    if len(rows) > LIST_BATCH_ROWS:
        con.register(name, pd.DataFrame(rows, columns=columns))
        try:
            yield name, None
        finally:
            con.unregister(name)
        return
    values = [[row.get(c) for c in columns] for row in rows] if rows and isinstance(rows[0], dict) else rows
    by_column = [list(column) for column in zip(*values, strict=True)] if values else [[] for _ in columns]
    selects = ", ".join(f"unnest(${n}) AS {column}" for n, column in enumerate(columns, 1))
    yield f"(SELECT {selects})", by_column


def records(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict]:
    """Rows as dicts of plain Python values (a NULL stays None, not pandas' NaN)."""
    cursor = con.execute(sql, params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def record(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> dict | None:
    """The first row as a dict, or None."""
    cursor = con.execute(sql, params)
    row = cursor.fetchone()
    return dict(zip([d[0] for d in cursor.description], row)) if row else None


# What the OS says when a write cannot happen, as DuckDB and SQLite quote it.
DISK_CAUSES = ("No space left on device", "Read-only file system", "Disk quota exceeded", "Permission denied")


def disk_cause(exc: BaseException) -> str | None:
    """The disk's reason a write failed (full, read-only, ...) if `exc` says one, else None."""
    text = str(exc)
    return next((cause for cause in DISK_CAUSES if cause in text), None)


class StoreUnreadable(RuntimeError):
    def __init__(self, path: Path, cause: Exception):
        super().__init__(
            f"cannot open the store {path}: {cause}\n"
            "If the file is damaged, move it (and its .wal) aside and restore your latest bundle into a fresh "
            "store with `session-digest restore BUNDLE`; a bundle holds the turns, summaries, graph, attempts "
            "and friction (`session-digest archive` writes one)."
        )


def _commit(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("COMMIT")
    except duckdb.Error:
        # A commit that fails (a write conflict) leaves its transaction aborted: end it, so a held
        # connection takes the next statement.
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # DuckDB ended it already
        raise


@dataclass
class _Held:
    """One thread's held connection: opened at its first use, closed when let go."""

    open_close: threading.Lock  # the file's (`_open_close_lock`)
    con: duckdb.DuckDBPyConnection | None = None
    in_transaction: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)

    def close(self) -> None:
        if self.con is not None:
            with self.open_close:
                self.con.close()
            self.con = None


class StoreFile:
    """The store's DuckDB file: its path, its short-lived connections and transactions, and its
    schema. Every repository of `DigestStore` reads and writes through the one shared instance."""

    def __init__(self, path: str | Path, read_only: bool = False, lock_wait_s: float = LOCK_WAIT_S):
        self.path = Path(path)
        # How long an open waits out another process's lock before it raises.
        self.lock_wait_s = lock_wait_s
        self._open_close = _open_close_lock(self.path)
        # Every connection read-only: a command that only reads (`status`) needs no writable disk.
        self.read_only = read_only
        # By thread: a DuckDB connection is not for two threads at once, so another thread's
        # methods open their own short connections while this one holds.
        self._held: dict[int, _Held] = {}

    @contextmanager
    def held(self) -> Iterator[None]:
        """Within this scope, this thread's `connect` and `transaction` share one connection,
        opened at the first use and closed at the end (or by `released`). A scope inside another
        is the outer one's. Never hold one across a model call: `released` lets it go for one."""
        thread = threading.get_ident()
        if thread in self._held:
            yield
            return
        self._held[thread] = held = _Held(self._open_close)
        try:
            yield
        finally:
            del self._held[thread]
            held.close()

    @contextmanager
    def released(self) -> Iterator[None]:
        """No connection held for the scope (a model call), so other processes can write meanwhile;
        the next use opens one again. Every thread's held connection is let go: a mini-summary call
        runs in a worker thread while the holding thread waits for it."""
        for held in list(self._held.values()):
            if held.in_transaction:
                raise RuntimeError("a transaction cannot be held open across a model call")
            with held.lock:  # not while its thread is in a statement
                held.close()
        yield

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived connection, or the held one (see `held`; it reads and writes alike);
        waits (with backoff) while another process holds the file."""
        held = self._held.get(threading.get_ident())
        if held is not None:
            with held.lock:
                if held.con is None:
                    held.con = self._open(self.read_only)
                yield held.con
            return
        con = self._open(read_only or self.read_only)
        try:
            yield con
        finally:
            with self._open_close:
                con.close()

    def _open(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.lock_wait_s
        retries = 0
        while True:
            try:
                with self._open_close:
                    return self._attach(read_only)
            except duckdb.IOException as exc:
                # Another process holds the file: "Could not set lock on file ...: Conflicting lock ...".
                if "could not set lock" not in str(exc).lower():
                    if disk_cause(exc):
                        raise  # a full or read-only disk: not a damaged file
                    raise StoreUnreadable(self.path, exc) from exc
                if time.monotonic() > deadline:
                    raise
                retries += 1
                time.sleep(doubling_backoff_s(retries, 0.05, 2.0))
            except duckdb.Error as exc:  # a damaged file: DuckDB raises its base error
                raise StoreUnreadable(self.path, exc) from exc

    def _attach(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        """A connection with the file attached as `store` (and in use) at `ROW_GROUP_ROWS`. The
        in-memory database is named after the file, so this process's connections to it share one
        attachment, as they shared one database instance when opened by path; the file is let go
        (and checkpointed) when the last of them closes."""
        mode = "read-only" if read_only else "read-write"
        con = duckdb.connect(f":memory:{mode}:{self.path.resolve()}", config={"temp_directory": f"{self.path}.tmp"})
        try:
            options = f"ROW_GROUP_SIZE {ROW_GROUP_ROWS}" + (", READ_ONLY" if read_only else "")
            path = str(self.path).replace("'", "''")
            con.execute(f"ATTACH IF NOT EXISTS '{path}' AS store ({options})")
            con.execute("USE store")
        except BaseException:
            con.close()
            raise
        return con

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One transaction. On the held connection one inside another joins it (DuckDB nests
        none), and a failed one is rolled back, leaving the connection usable."""
        held = self._held.get(threading.get_ident())
        with self.connect() as con:
            if held is not None and held.in_transaction:
                yield con
                return
            con.execute("BEGIN TRANSACTION")
            if held is not None:
                held.in_transaction = True
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            else:
                _commit(con)
            finally:
                if held is not None:
                    held.in_transaction = False

    def query(self, sql: str, params: list | None = None) -> pd.DataFrame:
        with self.connect() as con:
            return con.execute(sql, params or []).df()


class Repository:
    """One feature's reads and writes (`store.summaries`, `store.graph`, ...), over the shared file."""

    def __init__(self, file: StoreFile):
        self.file = file
