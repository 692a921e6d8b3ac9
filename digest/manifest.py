"""Reading a growing file incrementally: what the store's manifest (`ingest_files`) keeps of each
file as last read, and where the next read of it starts.

A log a harness appends to (Claude Code, Codex, and the JSONL formats: a row a line) is read on
from where the last read stopped, once its read part is known to be intact (the SHA-256 of the
bytes read, up to the end of the last complete line, matches). A harness reader groups lines into
turns, and the turn open at the end of the last read may receive more events: the next read starts
at that turn's first line, so the reader sees it whole again and the store's upsert by turn id
replaces it (`resume_bytes`). What a reader needs from before that line (Codex: the session id of
the head's `session_meta`, the model, the turns counted) is the reader's `resume_context` of the
turn's row, kept in the manifest. A torn last line (no newline yet) is read, and rejected, as any
line; the offset stays before it, so the next read takes it again.

Anything else is read whole: a new file, one that shrank or whose read part changed, and the
formats that are rewritten rather than appended to (an aider history may be edited, a trajectory
or any `.json` log is one JSON document its harness rewrites after each step).

The stat (size and mtime) decides alone only when it can: a file modified within RACY_NS of its
last read may have changed again within the file system's timestamp granularity (some ms) with
the same size and mtime, so its read part is checked by its hash instead (git's "racily clean").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from digest.readers import HARNESSES

HASH_CHUNK = 1 << 20
RACY_NS = 2_000_000_000
# The kinds a writer appends lines to, and each reader's context to go on from a turn's first line
# (a function of that turn's row; None: a row a line, nothing open at the end).
APPENDABLE: dict[str, Callable[[dict], dict] | None] = {
    **{harness.kind: harness.resume_context for harness in HARNESSES if harness.resume_context},
    "memory": None,
    "turns": None,
    "graph": None,
    "summaries": None,
}

# How a file was read (`FileReport.read`).
NEW = "new"
UNCHANGED = "unchanged"
APPENDED = "appended"
SHRANK = "shrank"
CHANGED = "changed"  # its read part is not what was read: read again whole
REWRITTEN = "rewritten"  # a format rewritten whole (aider, trajectories): read again whole


@dataclass
class FileState:
    """A file as its last read left it: the `ingest_files` row."""

    path: str
    kind: str
    size: int
    mtime_ns: int
    read_bytes: int  # the end of the last complete line read
    read_lines: int  # complete lines up to read_bytes
    read_hash: str  # SHA-256 of the bytes [0, read_bytes)
    resume_bytes: int  # where the next read starts: the first line of the turn open at read_bytes
    resume_lines: int  # lines before resume_bytes
    resume_context: dict | None  # the reader's context at resume_bytes
    read_at_ns: int  # when the read began (wall clock), for the racy check
    sessions: list[str]  # the sessions whose turns the file holds
    grown_ms: int | None  # its mtime when a read found it grown (the churn gate's); None: read whole since


@dataclass
class Start:
    """Where a read starts, and the hash of the bytes before `verified` (None: from 0)."""

    offset: int = 0
    line_no: int = 1  # the number of the line at `offset`
    context: dict | None = None
    hasher: object | None = None  # hashlib's sha256 over [0, verified)
    verified: int = 0
    sessions: tuple[str, ...] = ()  # the sessions of the lines before `offset`


def unchanged(size: int, mtime_ns: int, state: FileState | None) -> bool:
    """Whether the stat alone says the file is as last read (the cheap check, before its kind)."""
    return (
        state is not None
        and size == state.size
        and mtime_ns == state.mtime_ns
        and state.mtime_ns + RACY_NS <= state.read_at_ns
    )


def plan(path: Path, kind: str, size: int, mtime_ns: int, state: FileState | None) -> tuple[str, Start | None]:
    """How to read a file the stat did not clear (`unchanged`), and where from (None: its read part
    and size are as last read: nothing to read)."""
    if state is None or state.kind != kind:
        return NEW, Start()
    if kind not in APPENDABLE or path.suffix != ".jsonl":  # a `.json` document (an older Codex rollout) is rewritten
        return REWRITTEN, Start()
    if size < state.read_bytes:
        return SHRANK, Start()
    digest, hasher = prefix_hash(path, state.read_bytes)
    if digest != state.read_hash:
        return CHANGED, Start()
    if size == state.size == state.read_bytes and mtime_ns == state.mtime_ns:
        return UNCHANGED, None
    return APPENDED, Start(
        state.resume_bytes,
        state.resume_lines + 1,
        state.resume_context,
        hasher,
        state.read_bytes,
        tuple(state.sessions),
    )


def prefix_hash(path: Path, length: int, hasher=None) -> tuple[str, object]:
    """The SHA-256 of the file's first `length` bytes, and the hasher (to go on from there)."""
    hasher = hasher or hashlib.sha256()
    left = length
    with path.open("rb") as handle:
        while left > 0:
            chunk = handle.read(min(HASH_CHUNK, left))
            if not chunk:
                break
            hasher.update(chunk)
            left -= len(chunk)
    return hasher.copy().hexdigest(), hasher
