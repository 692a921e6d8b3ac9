"""The DuckDB store: the system of record for turns, sessions, summaries, the graph and the model
ledger. `DigestStore` is one file (`StoreFile`) shared by a repository per feature, each a module
with its SQL beside its code, in the order one session passes through them:

- `connection.py`     `StoreFile`: the path, connections that wait out another process's lock, a
                      run's held connection, transactions; `Repository`, the base of the modules below
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
- `search.py`         `store.search`: the search index (summaries, cards, mini summaries, turns) brought
                      up to date from the store, and its queries
- `search_index.py`   the search index's files: a Tantivy index beside the store (`<store>.search/`)
- `search_reads.py`   the search index read without the store (`SearchIndex`: never waits for a writer)
- `vector_coverage.py` which sessions the vectors cover (`<store>.vectors.json`), read without the store
- `vector_snapshot.py` the vectors as files a search maps (`<store>.vectors/`), read without the store
- `migrations.py`     the schema (`schema.sql`) and the numbered migrations `migrate` runs past a
                      store's version (how to add one); `ensure_current`: once per process
- `digest_store.py`   `DigestStore`, the repositories above over one `StoreFile`; `open_store`, the one
                      way in (read-only or writing)

Decisions are `digest/`'s pure functions (the order mini summaries are made in, when a failing turn
is archived, how failures count, the digest states, a host's circuit); a repository applies them
inside the transaction that reads and writes their rows, so no decision is split across two
connections. The store itself keeps only what is the file's: `path`, `migrate`, `query` (and
`store.file` for a caller's own connection).
"""

from __future__ import annotations

from importlib import import_module

# The package's names, each imported when first used: a search reads the index beside the store
# (`search_reads`) without loading DuckDB, pandas and every repository.
_EXPORTS = {
    "DigestStore": "digest_store", "MiniSummaryLedger": "mini_summaries", "NOT_ARCHIVED": "archive",
    "RESTORE_MODES": "archive", "RunLedger": "ledger", "SCHEMA_VERSION": "migrations", "StoreFile": "connection",
    "StoreUnreadable": "connection", "open_store": "digest_store",
}  # fmt: skip
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
