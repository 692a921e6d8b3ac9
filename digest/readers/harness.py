"""What the ingest knows of one harness, declared once beside its reader (each harness reader
module's `HARNESS`) and collected in `digest.readers.HARNESSES`: how its log is told from its first
bytes, how it is read, whether its harness appends to it, where the harness keeps its logs, and the
names its tool calls carry (`digest.facts` reads a turn's files and commands by them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from digest.readers.common import Read, Reject, load_json

SNIFF_LINES = 50  # a harness log says what it is in its first lines


class Head:
    """A file's first bytes, and the JSON objects among its first lines (read when a sniff asks)."""

    def __init__(self, data: bytes):
        self.data = data

    @cached_property
    def objects(self) -> list[dict]:
        """The JSON objects among the first lines (a cut last line, or any bad one, left out)."""
        objs = []
        for raw in self.data.split(b"\n")[:SNIFF_LINES]:
            if not raw.strip():
                continue
            try:
                objs.append(load_json(raw.decode("utf-8")))
            except (Reject, UnicodeDecodeError):  # not a JSON object line: it tells nothing
                continue
        return objs


@dataclass(frozen=True)
class Harness:
    kind: str  # the reader's name for its files (`ingest_files.kind`)
    title: str  # its logs as a person names them, in the reason a file no reader knows is rejected
    read: Callable[..., Iterator[Read]]  # (lines, source[, resume]): what each line became
    sniff: Callable[[Head], bool]  # whether a file's first bytes are its log
    suffixes: tuple[str, ...] = ()  # besides `.jsonl`, the names a folder's file is read by content for
    # Set for a log its harness appends to: the reader's context to go on from a turn's row
    # (`digest.manifest`). None: the harness rewrites its log, which is read again whole.
    resume_context: Callable[[dict], dict] | None = None
    # Where the harness keeps its logs, from the environment and the user's home: read by an ingest
    # given no path.
    home: Callable[[Mapping[str, str], Path], Path] | None = None
    # Its tools that read, edit or create a file: the fact's kind and the argument naming the file.
    file_tools: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    shell_tools: frozenset[str] = frozenset()  # its tools whose arguments are a shell command
    patch_tools: frozenset[str] = frozenset()  # its tools whose arguments are a patch naming its files
