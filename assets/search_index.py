"""The `search_index` asset and its check: thin over `store.search` (resources/store/search.py),
downstream of the turns, mini summaries and summaries it indexes. A refresh indexes again only the
sessions that changed since they were indexed. `session-digest sweep` and `ingest` record one after
their work, and the search sensor whenever sessions are behind (`search_index_events`, no run);
materializing it from the UI does the same in a run."""

from __future__ import annotations

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    AssetMaterialization,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)

from assets.mini_summaries import turn_mini_summaries
from assets.sessions import raw_turns, session_summaries
from resources.bindings import DigestStoreResource, EmbeddingResource
from resources.embedding_pass import EmbeddingPass, embed_pending
from resources.model_clients.embeddings import EmbeddingClient
from resources.store.search import RefreshReport

SEARCH_INDEX_KEY = AssetKey("search_index")
CURRENT_CHECK = "search_index_current"
# Sessions a sensor tick indexes at most: a first index of a large store goes over several ticks.
TICK_SESSIONS = 500
# Seconds one refresh spends embedding at most, where a host serves embeddings: the rest of the
# backlog waits for the next refresh, as a sweep's summaries do. A sensor tick's pass is shorter:
# Dagster gives a tick 60 s in all.
EMBED_PASS_S = 120.0
TICK_EMBED_S = 30.0


def embed_step(
    db, client: EmbeddingClient | None, max_documents: int, max_seconds: float = EMBED_PASS_S
) -> EmbeddingPass | None:
    """The vectors' budgeted pass after a refresh (None: no host serves embeddings)."""
    if client is None:
        return None
    return embed_pending(db.search_vectors, client, max_documents, max_seconds)


def vector_metadata(client: EmbeddingClient | None, done: EmbeddingPass | None) -> dict:
    if client is None or done is None:
        return {}
    return {
        "embed_model": client.model,
        "vectors_embedded": done.embedded,
        "vectors_pending": done.pending_after,
        "vectors_seconds": round(done.seconds, 3),
        **({"vectors_error": MetadataValue.text(done.error)} if done.error else {}),
    }


def index_metadata(report: RefreshReport, status: dict) -> dict:
    return {
        "documents": status["documents"],
        "sessions": status["sessions"],
        "size_bytes": MetadataValue.int(status["size_bytes"]),
        "sessions_behind": status["behind"],
        "lag_s": round(status["lag_s"], 1),
        "sessions_indexed": report.sessions_indexed,
        "sessions_removed": report.sessions_removed,
        "documents_written": report.documents,
        "seconds": round(report.seconds, 3),
        "rebuilt": report.rebuilt,  # the index beside the store was built again from nothing
        "writer_busy": report.busy,  # another process was writing it: its work left to the next refresh
    }


def current_result(status: dict, lag_max_s: float) -> tuple[bool, dict]:
    """Passes unless a change has waited for the index longer than `lag_max_s`."""
    passed = status["lag_s"] <= lag_max_s
    finding = (
        f"{status['behind']} session(s) behind the store; the oldest change waits {status['lag_s']:.0f} s"
        f" (at most {lag_max_s:.0f} s, DIGEST_SEARCH_LAG_MAX_S)"
    )
    return passed, {
        "sessions_behind": status["behind"],
        "lag_s": round(status["lag_s"], 1),
        "finding": MetadataValue.text(finding),
    }


@asset(
    deps=[raw_turns, turn_mini_summaries, session_summaries],
    group_name="reports",
    kinds={"duckdb"},
)
def search_index(store: DigestStoreResource, embeddings: EmbeddingResource) -> MaterializeResult:
    """BM25 search over each session's summary, card, mini summaries and turns (`session-digest search`,
    the MCP tools), a Tantivy index beside the store brought up to date: only the sessions whose turns,
    summary or mini summaries changed since they were indexed are indexed again. No chat-model call; where a host serves
    embeddings (`DIGEST_EMBED_PROVIDER`), a budgeted pass embeds the documents still without a vector."""
    db = store.open()
    report = db.search.refresh()
    client = embeddings.client()
    done = embed_step(db, client, embeddings.embed_batch_documents)
    return MaterializeResult(metadata={**index_metadata(report, db.search.status()), **vector_metadata(client, done)})


@asset_check(
    asset=search_index,
    name=CURRENT_CHECK,
    description="Fails when a session's turns, summary or mini summaries changed more than DIGEST_SEARCH_LAG_MAX_S "
    "ago and the search index has not taken the change in.",
)
def search_index_current(store: DigestStoreResource) -> AssetCheckResult:
    passed, metadata = current_result(store.open().search.status(), store.search_lag_max_s)
    return AssetCheckResult(passed=passed, metadata=metadata, severity=AssetCheckSeverity.WARN)


def search_index_events(
    db,
    lag_max_s: float,
    limit: int | None = None,
    client: EmbeddingClient | None = None,
    embed_documents: int = 0,
    embed_seconds: float = TICK_EMBED_S,
) -> list:
    """Refresh the index (at most `limit` sessions) and embed within the pass's budget (a sensor
    tick's unless told), then the runless materialization and check result a sensor tick or a CLI
    sweep or ingest records. Its reads and writes share one connection, let go around each embedding call."""
    with db.file.held():
        report = db.search.refresh(limit)
        done = embed_step(db, client, embed_documents, embed_seconds)
        status = db.search.status()
    passed, metadata = current_result(status, lag_max_s)
    return [
        AssetMaterialization(
            asset_key=SEARCH_INDEX_KEY, metadata={**index_metadata(report, status), **vector_metadata(client, done)}
        ),
        AssetCheckEvaluation(
            asset_key=SEARCH_INDEX_KEY,
            check_name=CURRENT_CHECK,
            passed=passed,
            metadata=metadata,
            severity=AssetCheckSeverity.WARN,
        ),
    ]
