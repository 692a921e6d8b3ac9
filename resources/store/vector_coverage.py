"""Which sessions the search index's vectors cover, in a small file beside the store
(`<store>.vectors.json`) that a search reads without opening the store: with no vectors yet, or too
few, a search stays keyword alone and loads neither DuckDB nor the embedding model.

The embedding pass writes it at its end (`store.search_vectors.coverage`), so it lags the store by
at most one pass: a session ingested since is not in it, hence not covered, and a search over it
says so instead of ranking it below the sessions the vectors find. It names the generation of the
vectors' snapshot (`vector_snapshot`) published just before it: a search reading an older one says
so rather than fuse vectors that miss what the coverage counts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


def coverage_path(db_path: str | Path) -> Path:
    return Path(f"{db_path}.vectors.json")


@dataclass(frozen=True)
class VectorCoverage:
    model: str | None  # the model whose vectors the counts are of
    accounts: frozenset[str]  # sessions whose card and summary have current vectors
    turns: frozenset[str]  # sessions whose every document has
    snapshot: int | None = None  # the vectors' snapshot generation these counts are of


def read_coverage(db_path: str | Path) -> VectorCoverage | None:
    """What the last embedding pass wrote; None before the first, or when the file is unreadable."""
    try:
        data = json.loads(coverage_path(db_path).read_text())
        return VectorCoverage(
            data["model"], frozenset(data["accounts"]), frozenset(data["turns"]), data.get("snapshot")
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_coverage(db_path: str | Path, model: str, coverage: dict, snapshot: int | None) -> None:
    """Replace the file whole (a reader sees the old or the new, never half)."""
    path = coverage_path(db_path)
    part = path.with_name(path.name + ".part")
    counts = {"accounts": coverage["accounts"], "turns": coverage["turns"], "snapshot": snapshot}
    part.write_text(json.dumps({"model": model, **counts}))
    os.replace(part, path)
