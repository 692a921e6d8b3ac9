"""The search index's vectors as files beside the store (`<store>.vectors/`), which a hybrid search
reads without opening the store: no DuckDB, no lock, so it never waits for a writer.

The embedding pass publishes them (`resources.embedding_pass`): each pass appends a segment of the
vectors it made since the last one (`<name>.npy`, float32 rows of unit length, read memory-mapped;
`<name>.json`, each row's doc_key, session, turn, kind and text hash; `<name>.texts` with
`<name>.offsets.npy`, the text a vector-only hit's snippet is cut from). A later segment supersedes
a document's earlier row, and `live-<generation>.npy` marks the rows still current (a document gone
from the store has none). `manifest.json` names the generation's files and is replaced last and
whole, so a reader sees the old snapshot or the new one, never half. Segment files are never
changed once written; when superseded rows or segments pass a bound, the live rows are copied into
one segment. The files of the generation before are kept, so a reader that read the old manifest
can still open them; an open memory map outlives its file's removal.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from digest.embeddings import EmbeddingStamp

MANIFEST = "manifest.json"
# Segments past this many, or superseded rows past this share of all rows, are copied into one.
MAX_SEGMENTS = 12
MAX_DEAD_SHARE = 0.25
_META_COLUMNS = ("doc_key", "session_id", "turn_id", "kind", "text_hash")
_held: dict[Path, VectorSnapshot] = {}  # the generation each folder's searches read, kept between searches


class SnapshotUnavailable(Exception):
    """No snapshot can be read: none is published yet, or its files are missing or torn (the reason)."""


@dataclass(frozen=True)
class VectorHit:
    doc_key: str
    session_id: str
    turn_id: str | None
    kind: str
    similarity: float


@dataclass(frozen=True)
class SnapshotRow:
    doc_key: str
    session_id: str
    turn_id: str | None
    kind: str
    text_hash: str
    text: str


def snapshot_dir(db_path: str | Path) -> Path:
    return Path(f"{db_path}.vectors")


class VectorSnapshot:
    """One published generation, read-only: its segments memory-mapped, the live rows marked."""

    def __init__(self, folder: Path, manifest: dict):
        self.folder = folder
        self.id: str = manifest["id"]
        self.generation: int = manifest["generation"]
        self.stamp = EmbeddingStamp(manifest["model"], manifest["dim"])
        self.segments: list[str] = [s["name"] for s in manifest["segments"]]
        # Mapped now, so a snapshot in use keeps reading its files after a later publish removes them.
        self.matrices = [np.load(folder / f"{name}.npy", mmap_mode="r") for name in self.segments]
        self.offsets = [np.load(folder / f"{name}.offsets.npy", mmap_mode="r") for name in self.segments]
        self.blobs = [_mapped_bytes(folder / f"{name}.texts") for name in self.segments]
        metas = [json.loads((folder / f"{name}.json").read_text()) for name in self.segments]
        self.meta = {column: [value for m in metas for value in m[column]] for column in _META_COLUMNS}
        self.starts = np.cumsum([0] + [len(m) for m in self.matrices])
        self.live = np.load(folder / manifest["live"]) if manifest["live"] else np.zeros(0, dtype=bool)
        if len(self.live) != self.starts[-1] or any(len(v) != self.starts[-1] for v in self.meta.values()):
            raise SnapshotUnavailable(f"{folder}: generation {self.generation}'s files disagree on their rows")
        self._sessions: np.ndarray | None = None  # made at the first search by session
        self._live_rows: dict[str, int] | None = None  # made at the first text asked for

    @classmethod
    def open(cls, db_path: str | Path) -> VectorSnapshot:
        """The newest published generation (the one this process opened last, while it is the newest);
        `SnapshotUnavailable` with the reason when there is none. A manifest replaced while its files
        were being opened is read again."""
        folder = snapshot_dir(db_path)
        for attempt in range(3):
            try:
                manifest = json.loads((folder / MANIFEST).read_text())
            except FileNotFoundError:
                raise SnapshotUnavailable(f"no vectors' snapshot is published yet ({folder})") from None
            except (OSError, ValueError) as exc:
                raise SnapshotUnavailable(f"{folder / MANIFEST} is unreadable ({exc})") from None
            held = _held.get(folder)
            if held is not None and held.id == manifest.get("id"):
                return held
            try:
                _held[folder] = cls(folder, manifest)
                return _held[folder]
            except FileNotFoundError as exc:
                if attempt == 2:
                    raise SnapshotUnavailable(f"{folder}: a file of the snapshot is missing ({exc})") from None
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise SnapshotUnavailable(f"{folder}: the snapshot is torn ({type(exc).__name__}: {exc})") from None
        raise AssertionError("unreachable")

    @property
    def rows(self) -> int:
        return int(self.live.sum())

    def live_hashes(self) -> dict[str, str]:
        """doc_key → the text hash its live row was embedded from."""
        keys, hashes = self.meta["doc_key"], self.meta["text_hash"]
        return {keys[i]: hashes[i] for i in np.flatnonzero(self.live)}

    def nearest(
        self, model: str, query: list[float], limit: int, session_ids: list[str] | None = None
    ) -> list[VectorHit]:
        """The live documents nearest the query by cosine similarity, best first (a scan: exact)."""
        self.stamp.refuse_other(model, len(query))
        wanted = np.asarray(query, dtype=np.float32)
        norm = float(np.linalg.norm(wanted))
        if not len(self.live) or norm == 0.0:
            return []
        scores = np.concatenate([m @ (wanted / norm) for m in self.matrices])
        keep = self.live.copy()
        if session_ids is not None:
            if self._sessions is None:
                self._sessions = np.asarray(self.meta["session_id"], dtype=object)
            keep &= np.isin(self._sessions, np.asarray(list(session_ids), dtype=object))
        candidates = np.flatnonzero(keep)
        if len(candidates) > limit:
            candidates = candidates[np.argpartition(-scores[candidates], limit - 1)[:limit]]
        keys = self.meta["doc_key"]
        ordered = sorted(candidates.tolist(), key=lambda i: (-float(scores[i]), keys[i]))
        return [
            VectorHit(keys[i], self.meta["session_id"][i], self.meta["turn_id"][i], self.meta["kind"][i], float(scores[i]))
            for i in ordered
        ]  # fmt: skip

    def texts(self, doc_keys: list[str]) -> dict[str, str]:
        """The text each live document was embedded from."""
        if self._live_rows is None:
            keys = self.meta["doc_key"]
            self._live_rows = {keys[i]: i for i in np.flatnonzero(self.live).tolist()}
        found: dict[str, str] = {}
        for key in doc_keys:
            if (i := self._live_rows.get(key)) is not None:
                segment = int(np.searchsorted(self.starts, i, side="right")) - 1
                found[key] = self._text(segment, int(i - self.starts[segment]))
        return found

    def _text(self, segment: int, row: int) -> str:
        offsets = self.offsets[segment]
        return bytes(self.blobs[segment][int(offsets[row]) : int(offsets[row + 1])]).decode()


def publish(
    db_path: str | Path,
    stamp: EmbeddingStamp,
    old: VectorSnapshot | None,
    rows: list[SnapshotRow],
    vectors,
    removed: list[str],
) -> int:
    """A new generation: `old` (the snapshot as it was; None when unreadable or of another model, and
    `rows` then every row) with `rows` (their `vectors`) replacing their documents' rows and
    `removed` documents gone; its number. Copied into one segment when the old rows are mostly
    superseded or the segments too many."""
    folder = snapshot_dir(db_path)
    folder.mkdir(parents=True, exist_ok=True)
    previous = _read_manifest(folder)
    generation = (previous or {}).get("generation", 0) + 1
    matrix = _unit_rows(vectors, stamp.dim)
    live = old.live.copy() if old is not None else np.zeros(0, dtype=bool)
    if old is not None:
        gone = {r.doc_key for r in rows} | set(removed)
        live &= ~np.isin(np.asarray(old.meta["doc_key"], dtype=object), np.asarray(list(gone), dtype=object))
    segments = list(old.segments) if old is not None else []
    total = len(live) + len(rows)
    dead = len(live) - int(live.sum())
    if old is not None and (len(segments) + 1 > MAX_SEGMENTS or dead > MAX_DEAD_SHARE * total):
        rows, matrix = _kept(old, live) + rows, np.concatenate([_kept_matrix(old, live), matrix])
        segments, live = [], np.zeros(0, dtype=bool)
    if rows:
        name = f"s{generation:06d}"
        _write_segment(folder, name, rows, matrix)
        segments.append(name)
        live = np.concatenate([live, np.ones(len(rows), dtype=bool)])
    live_name = f"live-{generation:06d}.npy"
    _save(folder / live_name, live)
    manifest = {
        "id": uuid.uuid4().hex, "generation": generation, "model": stamp.model, "dim": stamp.dim, "live": live_name,
        "segments": [{"name": name} for name in segments],
    }  # fmt: skip
    part = folder / f"{MANIFEST}.part"
    part.write_text(json.dumps(manifest))
    os.replace(part, folder / MANIFEST)
    _remove_unnamed(folder, manifest, previous)
    return generation


def _mapped_bytes(path: Path):
    """The file's bytes, memory-mapped (an empty file, which cannot be, as empty bytes)."""
    return np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size else b""


def _read_manifest(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def _unit_rows(vectors, dim: int) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32).reshape(-1, dim)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)


def _kept(old: VectorSnapshot, live: np.ndarray) -> list[SnapshotRow]:
    """The live rows of `old`, with their texts (each segment's read once)."""
    kept = []
    for segment in range(len(old.segments)):
        start = int(old.starts[segment])
        rows = np.flatnonzero(live[start : old.starts[segment + 1]])
        if not len(rows):
            continue
        blob, offsets = bytes(old.blobs[segment]), old.offsets[segment]
        for row in rows.tolist():
            text = blob[offsets[row] : offsets[row + 1]].decode()
            kept.append(SnapshotRow(**{c: old.meta[c][start + row] for c in _META_COLUMNS}, text=text))
    return kept


def _kept_matrix(old: VectorSnapshot, live: np.ndarray) -> np.ndarray:
    whole = np.concatenate([np.asarray(m) for m in old.matrices]) if old.matrices else np.zeros((0, old.stamp.dim))
    return whole[live].astype(np.float32)


def _write_segment(folder: Path, name: str, rows: list[SnapshotRow], matrix: np.ndarray) -> None:
    """A segment's files, each written whole before the manifest names them."""
    encoded = [r.text.encode() for r in rows]
    offsets = np.cumsum([0] + [len(t) for t in encoded], dtype=np.int64)
    (folder / f"{name}.texts").write_bytes(b"".join(encoded))
    _save(folder / f"{name}.offsets.npy", offsets)
    (folder / f"{name}.json").write_text(json.dumps({c: [getattr(r, c) for r in rows] for c in _META_COLUMNS}))
    _save(folder / f"{name}.npy", matrix)


def _save(path: Path, array: np.ndarray) -> None:
    with path.open("wb") as f:
        np.save(f, array)
        f.flush()
        os.fsync(f.fileno())


def _remove_unnamed(folder: Path, manifest: dict, previous: dict | None) -> None:
    """Files named by neither this generation nor the one before (a reader may still open those)."""
    named = {MANIFEST}
    for m in (manifest, previous or {}):
        if m.get("live"):
            named.add(m["live"])
        for s in m.get("segments", []):
            named |= {f"{s['name']}{ext}" for ext in (".npy", ".json", ".texts", ".offsets.npy")}
    for path in folder.iterdir():
        if path.name not in named:
            path.unlink(missing_ok=True)
