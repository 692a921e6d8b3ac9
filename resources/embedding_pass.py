"""One budgeted pass of the search index's embedding backlog: the pending documents, cards and
summaries first, a batch a call, until the budget's documents or seconds are spent or a call fails.

Each batch's vectors are committed before the next is embedded, so a process killed mid-pass loses
at most the batch it was embedding. A failed call ends the pass and is reported, never raised: the
keyword index is what search needs, and its vectors catch up on a later refresh. The pass ends by
publishing the vectors' snapshot that searches read without the store (`vector_snapshot`: what
changed since the last, compared by text hash, so a pass killed before it is caught up by the next),
then which sessions the vectors now cover (`vector_coverage`), which decides when a search fuses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from digest.model_api import ModelError
from resources.model_clients.embeddings import EmbeddingClient
from resources.store.search_vectors import SearchVectors
from resources.store.vector_coverage import write_coverage
from resources.store.vector_snapshot import SnapshotUnavailable, VectorSnapshot, publish

# Documents one call embeds: a batch is committed whole, and on the embedded model 8 chunks are a
# few seconds of CPU, all a crash can lose.
BATCH_DOCUMENTS = 8


@dataclass
class EmbeddingPass:
    embedded: int = 0
    calls: int = 0
    seconds: float = 0.0
    pending_after: int = 0
    error: str | None = None


def embed_pending(
    vectors: SearchVectors,
    client: EmbeddingClient,
    max_documents: int,
    max_seconds: float,
    batch: int = BATCH_DOCUMENTS,
) -> EmbeddingPass:
    report = EmbeddingPass()
    started = time.monotonic()
    while report.embedded < max_documents and time.monotonic() - started < max_seconds:
        documents = vectors.pending(client.model, min(batch, max_documents - report.embedded))
        if not documents:
            break
        try:
            with vectors.file.released():  # a held connection is let go for the model's call
                made = client.embed([d.text for d in documents])
            vectors.write(client.model, documents, made)
        except (ModelError, ValueError) as exc:
            report.error = f"{type(exc).__name__}: {exc}"[:300]
            break
        report.calls += 1
        report.embedded += len(documents)
    vectors.prune()
    generation = publish_snapshot(vectors)
    write_coverage(vectors.file.path, client.model, vectors.coverage(client.model), generation)
    report.seconds = round(time.monotonic() - started, 3)
    report.pending_after = vectors.counts(client.model)["pending"]
    return report


def publish_snapshot(vectors: SearchVectors) -> int | None:
    """Publish what the stamped model's vectors changed since the snapshot (all of them when it is of
    another model); the generation searches should read, None while no vector is stamped."""
    stamp = vectors.stamp()
    if stamp is None:
        return None
    try:
        snapshot = VectorSnapshot.open(vectors.file.path)
    except SnapshotUnavailable:
        snapshot = None
    if snapshot is not None and snapshot.stamp != stamp:
        snapshot = None  # another model's vectors: every row of this one is published anew
    published = snapshot.live_hashes() if snapshot is not None else {}
    current = vectors.hashes(stamp.model)
    changed = [key for key, text_hash in current.items() if published.get(key) != text_hash]
    removed = [key for key in published if key not in current]
    if snapshot is not None and not changed and not removed:
        return snapshot.generation
    rows, made = vectors.snapshot_rows(stamp, changed)
    return publish(vectors.file.path, stamp, snapshot, rows, made, removed)
