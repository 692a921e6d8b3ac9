"""The search index's vectors as files beside the store (`<store>.vectors/`), which a hybrid search
reads without opening the store: no DuckDB, no lock, so it never waits for a writer.

The embedding pass publishes them (`resources.embedding_pass`): each pass appends a segment of the
vectors it made since the last one, every file of it memory-mapped by a reader: `<name>.npy`, float32
rows of unit length; `<name>.codes.npy`, each row's session and kind as numbers into `<name>.json`'s
lists (a search by session is a mask over them); `<name>.keys` (each row's doc_key, turn and text
hash) and `<name>.texts` (the text a vector-only hit's snippet is cut from), each with its rows'
byte offsets, so a search decodes only the rows it shows. A later segment supersedes a document's
earlier row, and `live-<generation>.npy` marks the rows still current (a document gone from the
store has none). `manifest.json` names the generation's files and is replaced last and whole, so a
reader sees the old snapshot or the new one, never half. Segment files are never changed once
written; when superseded rows or segments pass a bound, the live rows are copied into one segment.
The files of the generation before are kept, so a reader that read the old manifest can still open
them; an open memory map outlives its file's removal.
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
_SEGMENT_FILES = (".npy", ".codes.npy", ".json", ".keys", ".keys.npy", ".texts", ".texts.npy")
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


class _Segment:
    """One segment's files, mapped (so a snapshot in use keeps reading them after a later publish
    removes them)."""

    def __init__(self, folder: Path, name: str):
        self.name = name
        self.matrix = np.load(folder / f"{name}.npy", mmap_mode="r")
        self.codes = np.load(folder / f"{name}.codes.npy", mmap_mode="r")
        names = json.loads((folder / f"{name}.json").read_text())
        self.sessions, self.kinds = names["sessions"], names["kinds"]
        self.keys = _Strings(folder / f"{name}.keys")
        self.texts = _Strings(folder / f"{name}.texts")
        if not len(self.codes) == len(self.keys) == len(self.texts) == len(self.matrix):
            raise ValueError(f"segment {name}'s files disagree on their rows")

    def row(self, i: int) -> tuple[str, str, str | None, str, str]:
        """(doc_key, session, turn, kind, text hash) of row `i`."""
        doc_key, turn_id, text_hash = self.keys[i].split("\x1f")
        session, kind = self.codes[i]
        return doc_key, self.sessions[session], turn_id or None, self.kinds[kind], text_hash


class _Strings:
    """Strings stored one after another (`path`) with their byte offsets (`path.npy`), mapped."""

    def __init__(self, path: Path):
        self.offsets = np.load(path.with_name(path.name + ".npy"), mmap_mode="r")
        self.blob = np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size else b""

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:
        return bytes(self.blob[int(self.offsets[i]) : int(self.offsets[i + 1])]).decode()

    def all(self) -> list[str]:
        raw, bounds = bytes(self.blob), self.offsets.tolist()
        return [raw[a:b].decode() for a, b in zip(bounds, bounds[1:])]

    @staticmethod
    def write(path: Path, strings: list[str]) -> None:
        encoded = [s.encode() for s in strings]
        path.write_bytes(b"".join(encoded))
        _save(path.with_name(path.name + ".npy"), np.cumsum([0] + [len(e) for e in encoded], dtype=np.int64))


class VectorSnapshot:
    """One published generation, read-only: its segments memory-mapped, the live rows marked."""

    def __init__(self, folder: Path, manifest: dict):
        self.folder = folder
        self.id: str = manifest["id"]
        self.generation: int = manifest["generation"]
        self.stamp = EmbeddingStamp(manifest["model"], manifest["dim"])
        self.segments = [_Segment(folder, s["name"]) for s in manifest["segments"]]
        self.starts = np.cumsum([0] + [len(s.matrix) for s in self.segments])
        self.live = np.load(folder / manifest["live"])
        if len(self.live) != self.starts[-1]:
            raise ValueError(f"generation {self.generation}'s live rows are {len(self.live)}, not {self.starts[-1]}")
        self._rows: dict[str, int] = {}  # doc_key → its live row, for the rows a search has shown
        self._index: dict[str, tuple[int, str]] | None = None  # every live row's, made when first asked

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

    def _row(self, i: int) -> tuple[str, str, str | None, str, str]:
        segment = int(np.searchsorted(self.starts, i, side="right")) - 1
        return self.segments[segment].row(i - int(self.starts[segment]))

    def live_index(self) -> dict[str, tuple[int, str]]:
        """doc_key → (its live row, the text hash it was embedded from): every key decoded once, for
        the pass that publishes the next generation (a search decodes only the rows it shows)."""
        if self._index is None:
            index = {}
            for segment, start in zip(self.segments, self.starts.tolist()):
                keys = segment.keys.all()
                for i in np.flatnonzero(self.live[start : start + len(segment.matrix)]).tolist():
                    doc_key, _, text_hash = keys[i].split("\x1f")
                    index[doc_key] = (start + i, text_hash)
            self._index = index
        return self._index

    def live_hashes(self) -> dict[str, str]:
        """doc_key → the text hash its live row was embedded from."""
        return {doc_key: text_hash for doc_key, (_, text_hash) in self.live_index().items()}

    def nearest(
        self, model: str, query: list[float], limit: int, session_ids: list[str] | None = None
    ) -> list[VectorHit]:
        """The live documents nearest the query by cosine similarity, best first (a scan: exact)."""
        self.stamp.refuse_other(model, len(query))
        wanted = np.asarray(query, dtype=np.float32)
        norm = float(np.linalg.norm(wanted))
        if not len(self.live) or norm == 0.0 or limit < 1:
            return []
        scores = np.concatenate([s.matrix @ (wanted / norm) for s in self.segments])
        keep = self.live.copy()
        if session_ids is not None:
            allowed = set(session_ids)
            for segment, start in zip(self.segments, self.starts):
                codes = [n for n, session in enumerate(segment.sessions) if session in allowed]
                keep[start : start + len(segment.matrix)] &= np.isin(segment.codes[:, 0], codes)
        candidates = np.flatnonzero(keep)
        if len(candidates) > limit:
            candidates = candidates[np.argpartition(-scores[candidates], limit - 1)[:limit]]
        rows = {i: self._row(i) for i in candidates.tolist()}
        self._rows.update({row[0]: i for i, row in rows.items()})
        ordered = sorted(rows, key=lambda i: (-float(scores[i]), rows[i][0]))
        return [VectorHit(*rows[i][:4], float(scores[i])) for i in ordered]

    def texts(self, doc_keys: list[str]) -> dict[str, str]:
        """The text each live document was embedded from (found at once for those `nearest` gave)."""
        found = {}
        for key in doc_keys:
            i = self._rows.get(key)
            if i is None and key in self.live_index():
                i = self._index[key][0]
            if i is not None:
                segment = int(np.searchsorted(self.starts, i, side="right")) - 1
                found[key] = self.segments[segment].texts[i - int(self.starts[segment])]
        return found


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
    # Names no other publisher can take, should two passes ever publish at once: the last manifest wins whole.
    tag = f"{generation:06d}-{uuid.uuid4().hex[:8]}"
    matrix = _unit_rows(vectors, stamp.dim)
    live, segments = np.zeros(0, dtype=bool), []
    if old is not None:
        index = old.live_index()
        live = old.live.copy()
        live[[index[key][0] for key in {r.doc_key for r in rows} | set(removed) if key in index]] = False
        segments = [segment.name for segment in old.segments]
        dead = len(live) - int(live.sum())
        if len(segments) + 1 > MAX_SEGMENTS or dead > MAX_DEAD_SHARE * (len(live) + len(rows)):
            rows, matrix = _kept(old, live) + rows, np.concatenate([_kept_matrix(old, live), matrix])
            live, segments = np.zeros(0, dtype=bool), []
    if rows:
        name = f"s{tag}"
        _write_segment(folder, name, rows, matrix)
        segments.append(name)
        live = np.concatenate([live, np.ones(len(rows), dtype=bool)])
    live_name = f"live-{tag}.npy"
    _save(folder / live_name, live)
    manifest = {
        "id": tag, "generation": generation, "model": stamp.model, "dim": stamp.dim, "live": live_name,
        "segments": [{"name": name} for name in segments],
    }  # fmt: skip
    part = folder / f"{MANIFEST}.{tag}.part"
    part.write_text(json.dumps(manifest))
    os.replace(part, folder / MANIFEST)
    _remove_unnamed(folder, manifest, previous)
    return generation


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
    """The live rows of `old`, with their texts (each segment's decoded once)."""
    kept = []
    for segment, start in zip(old.segments, old.starts.tolist()):
        rows = np.flatnonzero(live[start : start + len(segment.matrix)]).tolist()
        if not rows:
            continue
        keys, texts = segment.keys.all(), segment.texts.all()
        for i in rows:
            doc_key, turn_id, text_hash = keys[i].split("\x1f")
            session, kind = segment.codes[i]
            kept.append(
                SnapshotRow(
                    doc_key, segment.sessions[session], turn_id or None, segment.kinds[kind], text_hash, texts[i]
                )
            )
    return kept


def _kept_matrix(old: VectorSnapshot, live: np.ndarray) -> np.ndarray:
    whole = [np.asarray(s.matrix) for s in old.segments] or [np.zeros((0, old.stamp.dim), dtype=np.float32)]
    return np.concatenate(whole)[live]


def _write_segment(folder: Path, name: str, rows: list[SnapshotRow], matrix: np.ndarray) -> None:
    """A segment's files, each written whole before the manifest names them."""
    sessions = list(dict.fromkeys(r.session_id for r in rows))
    kinds = list(dict.fromkeys(r.kind for r in rows))
    session_code, kind_code = {s: n for n, s in enumerate(sessions)}, {k: n for n, k in enumerate(kinds)}
    codes = np.array([[session_code[r.session_id], kind_code[r.kind]] for r in rows], dtype=np.int32).reshape(-1, 2)
    _save(folder / f"{name}.codes.npy", codes)
    (folder / f"{name}.json").write_text(json.dumps({"sessions": sessions, "kinds": kinds}))
    _Strings.write(folder / f"{name}.keys", [f"{r.doc_key}\x1f{r.turn_id or ''}\x1f{r.text_hash}" for r in rows])
    _Strings.write(folder / f"{name}.texts", [r.text for r in rows])
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
            named |= {f"{s['name']}{ext}" for ext in _SEGMENT_FILES}
    for path in folder.iterdir():
        if path.name not in named:
            try:
                path.unlink(missing_ok=True)
            except OSError:  # still mapped, where the system keeps such a file: the next publish retries
                pass
