"""The search index's files: a Tantivy index in a folder beside the store (`<store>.search/`), which
readers open without the store's lock, so a search never waits for a writer nor fails beside one.

The folder holds two Tantivy indexes and two files of state:
- `documents/`: a document per session's summary, card, mini summary and turn: its terms (made by
  `digest.search_text` and space-joined under Tantivy's whitespace tokenizer, so the terms and the
  BM25 are the project's), its session, kind and turn, the text its snippets are cut from, and a
  turn's row (time, agent, its texts' first `ROW_TEXT_CHARS` characters: a full MCP result).
- `sessions/`: a document per session: what a hit shows (its account, activity times) and what the
  filters match (the summary's category, last activity, the files its turns touched by every tail on
  a `/`, its project by its last components). Apart, so it weighs nothing in the documents' BM25.
- `state.json`: the format and tokenizer version the index was built with, its build, and the
  store's sessions and those left behind at the last refresh (what an empty answer says).
- `indexed.jsonl`: what each session was indexed at (`search_indexed.py`), which a refresh compares
  with the store to index again only what changed.

Derived from the store, never backed up: `IndexWriting` builds it again from nothing when it is
missing, unreadable by this Tantivy, or of another format or tokenizer version. One writer at a time
(Tantivy's writer lock, and `<store>.search.lock` around a rebuild); readers take no lock and see
each commit (`SearchIndex`: Tantivy reloads its searcher on commit). A writer is let go once the
merges its commits started have ended, so many one-commit refreshes keep the folder near a fresh
build's size; the files of merges cancelled before (by a crash, or an older writer's rollback)
are swept by the next writer.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from itertools import chain, repeat
from pathlib import Path

from digest.projects import project_keys
from digest.search_text import TOKENIZER_VERSION, term_counts
from resources.store.search_indexed import IndexedSessions

# Bumped when the index's fields change: every index of another format is built again.
INDEX_FORMAT = 1
STATE_FILE = "state.json"
# A turn row's texts (prompt, thought, response) are kept up to this many characters each, with
# their whole lengths: what a full MCP result shows of them.
ROW_TEXT_CHARS = 600
NO_TIME = -1  # a fast field's value for a time the row has not
WRITER_HEAP = 64_000_000
# A segment's file: its id (32 hex digits), then its kind (and a deletes file's commit).
SEGMENT_FILE = re.compile(r"([0-9a-f]{32})\.")


class IndexUnavailable(RuntimeError):
    """No index a reader can open: the one-line reason."""


class IndexBusy(RuntimeError):
    """Another process writes the index: its refresh leaves the work to the next one."""


def index_folder(db_path: str | Path) -> Path:
    return Path(f"{db_path}.search")


def session_key(session_id: str) -> int:
    """A session's 64-bit key: documents are grouped by it and filtered on it."""
    return int.from_bytes(hashlib.blake2b(session_id.encode(), digest_size=8).digest(), "little")


def file_keys(path: str) -> set[str]:
    """The terms a touched file is found by: its whole path and each tail after a `/`."""
    keys = {path} | {path[i + 1 :] for i, c in enumerate(path) if c == "/"}
    return {k for k in keys if k}


def documents_schema():
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("terms", tokenizer_name="whitespace", index_option="freq")
    builder.add_text_field("session", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_unsigned_field("session_key", indexed=True, fast=True)
    builder.add_text_field("kind", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("turn", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_integer_field("ts_ms", fast=True)  # the turn's time (a mini summary's: its turn's)
    builder.add_integer_field("last_ms", fast=True)  # the session's last activity: ties
    builder.add_bytes_field("text", stored=True)
    builder.add_bytes_field("row", stored=True)
    return builder.build()


def sessions_schema():
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("session", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_unsigned_field("session_key", indexed=True, fast=True)
    builder.add_text_field("category", tokenizer_name="raw", index_option="basic")
    builder.add_integer_field("last_ms", indexed=True, fast=True)
    builder.add_text_field("files", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("project", tokenizer_name="raw", index_option="basic")
    builder.add_bytes_field("meta", stored=True)
    return builder.build()


def read_state(folder: Path) -> dict | None:
    try:
        return json.loads((folder / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None


def _write_state(folder: Path, state: dict) -> None:
    """The state file replaced whole: a reader never sees half of it."""
    part = folder / f"{STATE_FILE}.part"
    part.write_text(json.dumps(state))
    os.replace(part, folder / STATE_FILE)


def unusable(folder: Path, state: dict | None) -> str | None:
    """Why the folder holds no index of this code's format and tokenizer, or None."""
    import tantivy

    if state is None:
        return f"no search index at {folder} yet"
    if state.get("format") != INDEX_FORMAT or state.get("tokenizer_version") != TOKENIZER_VERSION:
        return "the search index is of another version and is built again at the next refresh"
    for part in ("documents", "sessions"):
        try:
            if not tantivy.Index.exists(str(folder / part)) or not tantivy.Index.is_compatible(str(folder / part)):
                return f"the search index at {folder} is incomplete or of another Tantivy"
        except (OSError, ValueError) as exc:
            return f"the search index at {folder} cannot be read ({exc})"
    return None


def _json(value) -> bytes:
    return json.dumps(value, default=str, separators=(",", ":")).encode()


def _cut_row(row: dict) -> dict:
    """A turn's row as a search result shows it: its texts cut, with their whole lengths."""
    out = {k: v for k, v in row.items() if k not in ("prompt", "thought", "response")}
    for key in ("prompt", "thought", "response"):
        text = row.get(key)
        out[key] = None if text is None else text[:ROW_TEXT_CHARS]
        out[f"{key}_chars"] = 0 if text is None else len(text)
    return out


def document_rows(session_id: str, rows: list[tuple], last_ms: int | None):
    """Tantivy documents of a session's (kind, turn id, text, ts_ms, turn row | None) rows."""
    import tantivy

    key = session_key(session_id)
    for kind, turn_id, text, ts_ms, row in rows:
        doc = tantivy.Document()
        counts = term_counts(text)
        doc.add_text("terms", " ".join(chain.from_iterable(repeat(t, n) for t, n in counts.items())))
        doc.add_text("session", session_id)
        doc.add_unsigned("session_key", key)
        doc.add_text("kind", kind)
        doc.add_text("turn", turn_id or "")
        doc.add_integer("ts_ms", NO_TIME if ts_ms is None else int(ts_ms))
        doc.add_integer("last_ms", NO_TIME if last_ms is None else int(last_ms))
        doc.add_bytes("text", text.encode())
        if row is not None:
            doc.add_bytes("row", _json(_cut_row(row)))
        yield doc


def session_document(session_id: str, meta: dict, files: list[str]):
    """The session's own document: `meta` (its account, activity times, project) and its filters."""
    import tantivy

    doc = tantivy.Document()
    doc.add_text("session", session_id)
    doc.add_unsigned("session_key", session_key(session_id))
    if meta.get("summary_category"):
        doc.add_text("category", meta["summary_category"])
    doc.add_integer("last_ms", NO_TIME if meta.get("last_activity_ms") is None else int(meta["last_activity_ms"]))
    for key in sorted(set().union(*map(file_keys, files)) if files else ()):
        doc.add_text("files", key)
    for key in project_keys(meta.get("project")):
        doc.add_text("project", key)
    doc.add_bytes("meta", _json(meta))
    return doc


class IndexWriting:
    """The index's writers for one refresh: `with IndexWriting(folder) as w`. Raises `IndexBusy`
    when another process writes it. A folder that `unusable` rejects is built again from nothing,
    what it had indexed (`indexed`) with it."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.rebuilt = False
        self.committed = False  # since the state was last recorded

    def __enter__(self) -> IndexWriting:
        import tantivy

        self.folder.parent.mkdir(parents=True, exist_ok=True)
        self._lock = open(f"{self.folder}.lock", "a")  # noqa: SIM115 - held until __exit__
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise IndexBusy(f"another process writes the search index at {self.folder}") from None
        try:
            self.state = read_state(self.folder)
            if unusable(self.folder, self.state):
                self._rebuild()
            for part in ("documents", "sessions"):
                sweep_orphans(self.folder / part)
            self.documents = tantivy.Index.open(str(self.folder / "documents"))
            self.sessions = tantivy.Index.open(str(self.folder / "sessions"))
            self.indexed = IndexedSessions(self.folder)
            self.indexed.tidy()
        except BaseException:
            self._release()
            raise
        return self

    def _writers(self) -> tuple:
        """(the sessions' writer, the documents'), made at the first write: a refresh with nothing to
        do takes no Tantivy writer."""
        if "document_writer" not in self.__dict__:
            try:
                self.document_writer = self.documents.writer(heap_size=WRITER_HEAP, num_threads=1)
                self.session_writer = self.sessions.writer(heap_size=15_000_000, num_threads=1)
            except ValueError as exc:  # Tantivy's writer lock, held by a process that took no flock
                self._release_writers()
                raise IndexBusy(f"the search index's writer is held: {exc}") from None
        return self.session_writer, self.document_writer

    def _rebuild(self) -> None:
        import tantivy

        shutil.rmtree(self.folder, ignore_errors=True)
        for part, schema in (("documents", documents_schema()), ("sessions", sessions_schema())):
            (self.folder / part).mkdir(parents=True)
            tantivy.Index(schema, path=str(self.folder / part))
        self.state = {
            "format": INDEX_FORMAT, "tokenizer_version": TOKENIZER_VERSION, "build": uuid.uuid4().hex,
            "sessions": None, "behind": None, "refreshed_at": None,
        }  # fmt: skip
        _write_state(self.folder, self.state)
        self.rebuilt = True

    def document_count(self) -> int:
        self.documents.reload()
        return self.documents.searcher().num_docs

    def clear(self) -> None:
        for writer in self._writers():
            writer.delete_all_documents()

    def remove(self, session_ids: list[str]) -> None:
        for writer in self._writers():
            for session_id in session_ids:
                writer.delete_documents_by_term("session", session_id)

    def replace(self, session_id: str, meta: dict, files: list[str], rows: list[tuple]) -> int:
        """The session's documents in place of those it had; not committed. Returns how many."""
        self.remove([session_id])
        session_writer, document_writer = self._writers()
        session_writer.add_document(session_document(session_id, meta, files))
        written = 0
        for doc in document_rows(session_id, rows, meta.get("last_activity_ms")):
            document_writer.add_document(doc)
            written += 1
        return written

    def commit(self) -> None:
        """Publish what was written: the sessions' documents first (a hit's session is always there
        to show), then the documents."""
        for writer in self._writers():
            writer.commit()
        self.committed = True

    def record(self, store_sessions: int, behind: int) -> None:
        """The store's sessions and those left behind, for readers to explain an empty answer by
        (written when they changed, or a commit was made: readers reload when it changes)."""
        if (self.state.get("sessions"), self.state.get("behind")) == (store_sessions, behind) and not self.committed:
            return
        self.state = {
            **self.state, "sessions": store_sessions, "behind": behind,
            "refreshed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }  # fmt: skip
        _write_state(self.folder, self.state)
        self.committed = False

    def __exit__(self, *exc) -> None:
        self._release()

    def _release(self) -> None:
        self._release_writers()
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()

    def _release_writers(self) -> None:
        """Each writer let go, its lock with it, once the merges its commits started have finished:
        what it did not commit goes with it. Never a rollback, nor a writer dropped while it merges:
        either cancels the merges, and a cancelled merge leaves its segment's files in the folder
        and the small segments unmerged."""
        for name in ("session_writer", "document_writer"):
            writer = self.__dict__.pop(name, None)
            if writer is not None:
                writer.wait_merging_threads()


def sweep_orphans(part: Path) -> list[str]:
    """Delete the segment files that neither the index's last commit nor Tantivy's list of its own
    files names: those of merges cancelled before they ended, which Tantivy's garbage collection
    never deletes. No reader can want them: no commit ever named them. Taken under Tantivy's meta
    lock, as its own garbage collection is, and by the one writer. Returns the names deleted."""
    try:
        meta = json.loads((part / "meta.json").read_text())
        managed = set(json.loads((part / ".managed.json").read_text()))
    except (OSError, ValueError):
        return []  # a folder Tantivy has not written yet, or cannot read: left to Tantivy
    live = {segment["segment_id"].replace("-", "") for segment in meta.get("segments", [])}
    deleted = []
    with open(part / ".tantivy-meta.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for path in part.iterdir():
            segment = SEGMENT_FILE.match(path.name)
            if segment and segment[1] not in live and path.name not in managed:
                path.unlink(missing_ok=True)
                deleted.append(path.name)
    return deleted


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0
