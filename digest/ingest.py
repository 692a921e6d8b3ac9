"""Streaming ingest of agent session logs: Neo.mjs export bundles, the plain JSONL turn format,
and the logs of Claude Code, Codex CLI, aider and SWE-agent / mini-SWE-agent, each read by its own
module in `digest.readers` (which one a file is for: `digest.readers.file_kind`).

Files are read line by line, so memory stays bounded whatever the file size (a trajectory, one
JSON document, is read whole). A bad line becomes a reject with its reason and line number, and
the rest of the file goes on; so does a turn some derived value cannot be computed for
(`digest.readers.common.check_derivable`).

Every physical line (split on `\n` only, a leading UTF-8 BOM dropped) is accounted for in the
file's report as exactly one of: kept (`rows`: a row, or the line a harness log's turn starts
on), rejected, superseded, skipped (blank, or an event a harness reader leaves out by design) or
folded (read into a turn or a session's metadata counted at another line). A turn id (or a graph
node or edge id) seen again in the same ingest: the later one wins, as a later ingest updates a
stored turn or graph row (the original's merge import keeps the first; one rule for both cases is
easier to trust), and the earlier line is `superseded`, stored in `rejects` with a reason naming
the line that won. Finding repeats holds each id of the ingest in memory, little beside the lines
it reads.

Folders are walked (`digest.walk`), and a file read before is read on from where its last read
stopped when it only grew (`digest.manifest`): an unchanged file costs a stat.

Every row passes `digest.redact` between the reader and the store (`_redacted`), unless
`DIGEST_REDACT` is off: secrets are replaced before anything is stored, and counted by kind, file
and session. The files themselves are only read.
"""

from __future__ import annotations

import collections
import hashlib
import json
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from digest import manifest
from digest.manifest import APPENDABLE, FileState, Start
from digest.readers import READERS, TURN_KINDS, file_kind
from digest.readers.common import (
    BOM,
    EXCERPT_CHARS,
    Reject,
    check_derivable,
    decode,
    excerpt,
    load,
    reason_of,
    text_field,
)
from digest.readers.neo import embedding_text, parse_graph_line, parse_graph_row, parse_memory_row, parse_summary_row
from digest.readers.plain import parse_simple_turn
from digest.redact import REDACTED_TEXT, redact_fields
from digest.walk import VANISHED, walk

# Rows and line bytes per write: large, since each is one transaction, but bounded (memory).
BATCH_ROWS = 20_000
BATCH_BYTES = 64 << 20
# An ingest's batches share one held connection for this many line bytes, then let it go: the store
# is checkpointed then (`Ingest.write_turns`), and each checkpoint rewrites the last, partly filled
# row group (at most `ROW_GROUP_ROWS` turns, resources/store/connection.py), while a writer that
# never let go would keep other processes waiting the whole ingest (they wait up to the store's
# LOCK_WAIT_S; BENCHMARKS.md §3 times a hold of this size well within it).
HOLD_BYTES = 512 << 20
# Between files the connection is let go once held this long: other processes write in between
# while a folder of many small logs is read, and each checkpoint serves many files, not one.
HOLD_SECONDS = 5.0
MAX_VECTOR_PROBLEMS = 20
READ_BUFFER_BYTES = 1 << 20
_JSON_WHITESPACE = b" \t\r\n"


class Sink(Protocol):
    """Where a file's rows are written (the store's `ingest` repository)."""

    def write_turns(self, rows: list[dict]) -> list[str]: ...  # the sessions turns moved out of
    def write_imported_mini_summaries(self, rows: list[dict]) -> None: ...
    def write_imported_summaries(self, rows: list[dict]) -> None: ...
    def write_imported_graph(self, nodes: list[dict], edges: list[dict]) -> None: ...
    def write_rejects(self, rows: list[dict]) -> None: ...
    def clear_rejects(self, source_file: str, line_nos: list[int]) -> None: ...  # lines now kept
    def file_states(self, paths: list[str]) -> dict[str, FileState]: ...  # the manifest's rows of these files
    def record_file(self, state: FileState, lines: int) -> None: ...  # the file as read, `lines` long


class SessionRows(Protocol):
    def session_rows(self, session_ids: Iterable[str]) -> list[dict]: ...


class HeldFile(Protocol):
    def held(self) -> AbstractContextManager[None]: ...  # one connection for the writes inside
    def released(self) -> AbstractContextManager[None]: ...  # that connection let go (checkpointed)


class _Hold:
    """The ingest's held connection, let go after HOLD_BYTES of lines, and between files after
    HOLD_SECONDS: one connection for each file made every file pay DuckDB's attach and a checkpoint."""

    def __init__(self, file: HeldFile):
        self.file = file
        self.bytes, self.since = 0, time.monotonic()

    def wrote(self, line_bytes: int) -> None:
        self.bytes += line_bytes
        if self.bytes >= HOLD_BYTES:
            self._let_go()

    def file_done(self) -> None:
        if time.monotonic() - self.since >= HOLD_SECONDS:
            self._let_go()

    def _let_go(self) -> None:
        with self.file.released():  # other processes write in between; the next write opens again
            self.bytes, self.since = 0, time.monotonic()


class IngestStore(Protocol):
    """What an ingest uses of the store: its writes, the file they share a connection of, and the
    sessions' rows read back after them."""

    ingest: Sink
    file: HeldFile
    sessions: SessionRows


@dataclass
class FileReport:
    path: str
    kind: str
    lines: int = 0  # physical lines: rows + rejects + superseded + skipped + folded
    rows: int = 0
    rejects: int = 0
    superseded: int = 0
    skipped: int = 0
    folded: int = 0  # lines read into a turn (or a session's metadata) counted at another line
    skip_reasons: dict[str, int] = field(default_factory=dict)  # why lines were skipped, when a reader says
    # Vector rows: embeddings kept, and those dropped as malformed (their turn or summary is kept).
    # A file's vectors have one length, its first kept vector's (`dimensions`).
    dimensions: int | None = None
    vectors: int = 0
    vectors_dropped: int = 0
    vector_problems: list[str] = field(default_factory=list)  # "line N: reason", the first few
    # Secrets replaced in the file's text before it was stored (`digest.redact`): by kind, and the
    # turns' by session.
    redactions: Counter = field(default_factory=Counter)
    redacted_sessions: Counter = field(default_factory=Counter)
    read: str = manifest.NEW  # how: new, appended (from `from_line` on), or read whole again and why
    from_line: int = 1


@dataclass
class IngestReport:
    files: list[FileReport] = field(default_factory=list)
    sessions: list[dict] = field(default_factory=list)  # the refreshed `sessions` rows
    emptied: list[str] = field(default_factory=list)  # sessions all of whose turns moved away
    unchanged: int = 0  # files unchanged since their last read: not read
    skipped: dict[str, int] = field(default_factory=dict)  # what the folders' walk passed over, by reason
    skipped_examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def turns(self) -> int:
        return sum(f.rows for f in self.files if f.kind in TURN_KINDS)

    @property
    def rejects(self) -> int:
        return sum(f.rejects for f in self.files)

    @property
    def superseded(self) -> int:
        return sum(f.superseded for f in self.files)

    @property
    def vectors(self) -> int:
        return sum(f.vectors for f in self.files)

    @property
    def vectors_dropped(self) -> int:
        return sum(f.vectors_dropped for f in self.files)

    def vector_problems(self) -> list[str]:
        return [f"{f.path}: {p}" for f in self.files for p in f.vector_problems]

    @property
    def redactions(self) -> Counter:
        return sum((f.redactions for f in self.files), Counter())

    @property
    def redacted_sessions(self) -> Counter:
        return sum((f.redacted_sessions for f in self.files), Counter())


class _Progress:
    """Where a read has got to: each recent line's offset (back to the turn open last), the end of
    the last complete line, and the hash of the bytes up to it."""

    def __init__(self, start: Start, kind: str):
        self.context_of = APPENDABLE.get(kind)
        self.offset = start.offset
        # (line_no, offset) of the lines since the last turn's first, for a reader that groups turns.
        self.offsets: collections.deque[tuple[int, int]] | None = collections.deque() if self.context_of else None
        self.hasher = start.hasher or hashlib.sha256()
        self.hashed = start.verified
        self.complete_bytes = start.offset
        self.complete_lines = start.line_no - 1
        self.open_turn: tuple[int, dict] | None = None  # (line_no, row) of the last turn read
        self.last_line = start.line_no - 1  # the last line read, complete or not

    def line(self, line_no: int, raw: bytes) -> None:
        if self.offsets is not None:
            self.offsets.append((line_no, self.offset))
        end = self.offset + len(raw)
        if raw.endswith(b"\n"):
            if end > self.hashed:  # a resumed read's lines before the old end are hashed already
                self.hasher.update(raw[max(0, self.hashed - self.offset) :])
                self.hashed = end
            self.complete_bytes, self.complete_lines = end, line_no
        self.offset, self.last_line = end, line_no

    def turn(self, line_no: int, row: dict) -> None:
        if self.offsets is None:
            return
        if self.open_turn is None or line_no >= self.open_turn[0]:
            self.open_turn = (line_no, row)
        while self.offsets and self.offsets[0][0] < line_no:
            self.offsets.popleft()

    def resume_point(self) -> tuple[int, int, dict | None]:
        """(offset, lines before it, the reader's context there) for the next read."""
        if self.offsets is None:  # a row a line (or a format read whole): nothing open at the end
            return self.complete_bytes, self.complete_lines, None
        if self.open_turn is None:  # no turn yet: what the head said is read again with it
            return 0, 0, None
        line_no, row = self.open_turn
        offset = next((o for n, o in self.offsets if n == line_no), None)
        if offset is None:  # a reader that reported its turns out of order: read it whole next time
            return 0, 0, None
        return offset, line_no - 1, self.context_of(row)


def _lines(path: Path, start: Start, progress: _Progress) -> Iterator[tuple[int, bytes]]:
    """Physical lines as bytes from `start`, split on `\n` only: a raw CR (JSON whitespace between
    tokens, invalid inside a string) must not split a line and shift the line numbers after it."""
    # A buffer larger than the default 8 KiB: a vector row's line is some 50 KB.
    with path.open("rb", buffering=READ_BUFFER_BYTES) as handle:
        handle.seek(start.offset)
        for line_no, line in enumerate(handle, start=start.line_no):
            progress.line(line_no, line)
            yield line_no, line[len(BOM) :] if line_no == 1 and line.startswith(BOM) else line


@dataclass
class _Batch:
    """One write's worth of a file's rows, as read and checked."""

    turns: list[dict] = field(default_factory=list)
    minis: list[dict] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)
    graph: dict[str, list[dict]] = field(default_factory=lambda: {"node": [], "edge": []})
    rejects: list[dict] = field(default_factory=list)
    # Line numbers kept: a reject of one from an earlier read (a half-written line) no longer stands.
    kept: list[int] = field(default_factory=list)
    line_bytes: int = 0

    def rows(self) -> int:
        return sum(map(len, (self.turns, *self.by_table().values())))

    def by_table(self) -> dict[str, list[dict]]:
        """The rows besides the turns, by the table they are written to."""
        return {
            "mini_summaries": self.minis,
            "imported_summaries": self.summaries,
            "imported_graph_nodes": self.graph["node"],
            "imported_graph_edges": self.graph["edge"],
            "rejects": self.rejects,
        }


def _read_ahead(batches: Iterator[_Batch]) -> Iterator[_Batch]:
    """`batches`, produced in a second thread while the caller writes the one before: DuckDB lets go
    of the GIL while it executes, so reading and checking batch n+1 overlaps writing batch n on a
    second core. At most two batches exist at a time (the one being written, the one being read),
    so memory stays bounded by the batch. An error of either side ends both; the reader's is
    raised here."""
    ready: queue.Queue = queue.Queue()
    slots = threading.Semaphore(2)
    stop = threading.Event()
    done = object()

    def read() -> None:
        try:
            while True:
                slots.acquire()
                if stop.is_set():
                    return
                batch = next(batches, done)
                ready.put(batch)
                if batch is done:
                    return
        except BaseException as exc:  # handed to the writing thread, which raises it
            ready.put(exc)

    reader = threading.Thread(target=read, name="ingest-read-ahead", daemon=True)
    reader.start()
    try:
        while (batch := ready.get()) is not done:
            if isinstance(batch, BaseException):
                raise batch
            yield batch
            slots.release()
    finally:
        stop.set()
        slots.release()
        reader.join()


def _read_batches(
    path: Path, kind: str, report: FileReport, seen: dict, start: Start, progress: _Progress
) -> Iterator[_Batch]:
    """The file's rows and rejects from `start` on, in batches of at most BATCH_ROWS rows or
    BATCH_BYTES of lines, the last one possibly empty; counts them in `report`."""
    source = str(path)
    batch = _Batch()
    line_no = 0

    def vector(cut: str | None) -> str | None:
        if cut is None:
            return None
        try:
            text = embedding_text(cut)
            # No empty element (checked): one more number than commas.
            length = text.count(",") + 1
            if report.dimensions is None:
                report.dimensions = length
            elif length != report.dimensions:
                raise Reject(f"wrong-length: {length} numbers, the file's vectors have {report.dimensions}")
        except Reject as reason:
            report.vectors_dropped += 1
            if len(report.vector_problems) < MAX_VECTOR_PROBLEMS:
                report.vector_problems.append(f"line {line_no}: {reason}")
            return None
        report.vectors += 1
        return text

    def supersede(key, what: str, line: int) -> None:
        earlier = seen.get(key)
        if earlier is not None:
            earlier_report, earlier_line = earlier
            earlier_report.rows -= 1
            earlier_report.superseded += 1
            batch.rejects.append(
                {
                    "source_file": earlier_report.path,
                    "line_no": earlier_line,
                    "reason": f"superseded: {what} comes again at line {line} of {source}, which is kept",
                    "excerpt": None,
                }
            )
        seen[key] = (report, line)

    def keep_turn(row: dict, line: int) -> None:
        supersede(row["id"], f"turn id {row['id']!r}", line)
        batch.turns.append(row)

    def reject(line: int, reason: Reject | str, text: str | None) -> None:
        report.rejects += 1
        batch.rejects.append({"source_file": source, "line_no": line, "reason": str(reason), "excerpt": text})

    def counted() -> Iterator[tuple[int, bytes]]:
        for numbered in _lines(path, start, progress):
            report.lines += 1
            batch.line_bytes += len(numbered[1])
            yield numbered

    if kind in READERS:
        # A harness log's reader groups lines into turns and says what each line became.
        resume = {"resume": start.context} if start.context else {}
        for read in READERS[kind](counted(), source, **resume):
            if read.outcome == "reject":
                reject(read.line_no, read.reason, read.excerpt)
            else:
                if read.outcome == "turn":
                    keep_turn(read.row, read.line_no)
                    progress.turn(read.line_no, read.row)
                    report.rows += 1
                elif read.outcome == "skip":
                    report.skipped += 1
                    if read.reason:
                        report.skip_reasons[read.reason] = report.skip_reasons.get(read.reason, 0) + 1
                else:
                    report.folded += 1
                batch.kept.append(read.line_no)
            if batch.rows() >= BATCH_ROWS or batch.line_bytes >= BATCH_BYTES:
                yield batch
                batch = _Batch()
        yield batch
        return

    for line_no, raw in counted():
        if not raw.strip(_JSON_WHITESPACE):
            report.skipped += 1
            continue
        try:
            obj, cut = load(decode(raw))
            if kind == "memory":
                row = parse_memory_row(obj, source, line_no)
                check_derivable(row)
                keep_turn({**row, "embedding": vector(cut)}, line_no)
            elif kind == "turns":
                row, mini = parse_simple_turn(obj, source, line_no)
                # Where the session ran, when the line says (`sessions.project`, `git_branch`).
                row["project"] = text_field(obj, "project", "") or None
                row["git_branch"] = text_field(obj, "git_branch", "") or None
                check_derivable(row)
                keep_turn(row, line_no)
                if mini:
                    batch.minis.append({"turn_id": row["id"], "session_id": row["session_id"], "text": mini})
            elif kind == "graph":
                graph_kind, row = parse_graph_row(obj, source, line_no)
                mini = parse_graph_line(obj)
                # A turn and its AGENT_MEMORY node share the id: graph rows are keyed apart.
                supersede((graph_kind, row["id"]), f"{graph_kind} id {row['id']!r}", line_no)
                batch.graph[graph_kind].append(row)
                if mini is not None:
                    batch.minis.append(mini)
            else:
                batch.summaries.append({**parse_summary_row(obj, source), "embedding": vector(cut)})
            report.rows += 1
            batch.kept.append(line_no)
        except Exception as exc:  # any content: this line's reject, never the run's end
            reject(line_no, reason_of(exc), excerpt(raw))
        if batch.rows() >= BATCH_ROWS or batch.line_bytes >= BATCH_BYTES:
            yield batch
            batch = _Batch()
    yield batch


def _redacted(batches: Iterator[_Batch], report: FileReport) -> Iterator[_Batch]:
    """The batches with the secrets in their text replaced (`digest.redact`), counted in `report`:
    every row passes here between the reader and the store, each table's text fields those of
    `REDACTED_TEXT`, a reject's reason and the line around its excerpt too. A turn row records its
    own counts (`redactions`, JSON by kind) for `status`."""
    for batch in batches:
        for i, row in enumerate(batch.turns):
            redacted, counts = redact_fields(row, REDACTED_TEXT["turns"])
            if counts:
                # Added to those the line says were redacted before (an archive's turn).
                before = Counter(json.loads(row["redactions"])) if row.get("redactions") else Counter()
                redacted["redactions"] = json.dumps(dict(sorted((before + counts).items())))
                report.redactions.update(counts)
                report.redacted_sessions[row["session_id"]] += counts.total()
            batch.turns[i] = redacted
        for table, rows in batch.by_table().items():
            for i, row in enumerate(rows):
                rows[i], counts = redact_fields(row, REDACTED_TEXT[table])
                report.redactions.update(counts)
        yield batch


def _excerpts_cut(batches: Iterator[_Batch]) -> Iterator[_Batch]:
    """Each reject's excerpt cut to what `rejects` keeps, once redacted: the redaction reads the
    line around it, so a secret the cut would split is found whole."""
    for batch in batches:
        for row in batch.rejects:
            row["excerpt"] = row["excerpt"] and row["excerpt"][:EXCERPT_CHARS]
        yield batch


def ingest_file(
    path: Path,
    sink: Sink,
    hold: _Hold,
    touched: set[str],
    seen: dict,
    start: Start | None = None,
    kind: str | None = None,
    how: str = manifest.NEW,
    redact_secrets: bool = True,
) -> FileReport:
    """The file read from `start` (default: whole), and recorded in the manifest as read (`how`).
    `seen`: each turn id (and each graph row as `(kind, id)`) kept so far in this ingest, with its
    file's report and line. `redact_secrets` (`DIGEST_REDACT`): secrets are replaced before
    anything is stored; the file itself is only read."""
    read_at_ns = time.time_ns()
    # Before the read: a line appended while it reads makes the next read see a change.
    stat = path.stat()
    kind = kind or file_kind(path)
    start = start or Start()
    report = FileReport(path=str(path), kind=kind, read=how, from_line=start.line_no)
    sessions = set(start.sessions)
    progress = _Progress(start, kind)
    batches = _read_batches(path, kind, report, seen, start, progress) if kind != "temporal" else iter(())
    if redact_secrets:
        batches = _redacted(batches, report)
    for batch in _read_ahead(_excerpts_cut(batches)):
        sessions.update(r["session_id"] for r in batch.turns)
        touched.update(r["session_id"] for r in batch.turns)
        touched.update(sink.write_turns(batch.turns))
        sink.write_imported_mini_summaries(batch.minis)
        sink.write_imported_summaries(batch.summaries)
        sink.write_imported_graph(batch.graph["node"], batch.graph["edge"])
        sink.clear_rejects(str(path), batch.kept)  # before this batch's rejects: one may supersede a kept line
        sink.write_rejects(batch.rejects)
        hold.wrote(batch.line_bytes)
    offset, lines, context = progress.resume_point()
    state = FileState(
        path=str(path), kind=kind, size=stat.st_size, mtime_ns=stat.st_mtime_ns,
        read_bytes=progress.complete_bytes, read_lines=progress.complete_lines,
        read_hash=progress.hasher.copy().hexdigest(), resume_bytes=offset, resume_lines=lines,
        resume_context=context, read_at_ns=read_at_ns, sessions=sorted(sessions),
        grown_ms=stat.st_mtime_ns // 1_000_000 if how == manifest.APPENDED else None,
    )  # fmt: skip
    # Recorded once the file's rows are: a read that stops part-way is done again from the old state.
    sink.record_file(state, progress.last_line)
    return report


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """The files an ingest of `paths` reads (`digest.walk.walk`)."""
    return walk(paths).files


def ingest_paths(paths: Iterable[str | Path], store: IngestStore, redact_secrets: bool = True) -> IngestReport:
    """The files named and the logs in the folders named, each read from where its last read
    stopped (`digest.manifest`); an unchanged file is only stat'ed."""
    found = walk(paths)  # before anything is written: a missing path fails the ingest whole
    report = IngestReport(skipped=dict(found.skipped), skipped_examples=found.examples)
    touched: set[str] = set()
    seen: dict = {}
    states = store.ingest.file_states([str(p) for p in found.files])
    with store.file.held():
        hold = _Hold(store.file)
        for path in found.files:
            try:
                stat = path.stat()
            except FileNotFoundError:  # gone since the walk (a harness deletes old transcripts): its rows stay
                report.skipped[VANISHED] = report.skipped.get(VANISHED, 0) + 1
                continue
            state = states.get(str(path))
            if manifest.unchanged(stat.st_size, stat.st_mtime_ns, state):
                report.unchanged += 1
                continue
            kind = file_kind(path)
            how, start = manifest.plan(path, kind, stat.st_size, stat.st_mtime_ns, state)
            if start is None:
                report.unchanged += 1
                continue
            report.files.append(ingest_file(path, store.ingest, hold, touched, seen, start, kind, how, redact_secrets))
            hold.file_done()
    # Each batch of turns brought its sessions' rows up to date as it was written: read them back.
    report.sessions = store.sessions.session_rows(touched)
    report.emptied = sorted(touched - {s["session_id"] for s in report.sessions})
    return report
