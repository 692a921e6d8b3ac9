"""The readers of every format the ingest takes, each a module of its own, and which one a file
is for: by name for Neo.mjs export bundles (as the original's import routes them), else by its
content (`file_kind`), so a harness's log is read whatever it is called. A harness reader declares
what the ingest knows of its harness once, as its `HARNESS` (`digest.readers.harness.Harness`),
listed in `HARNESSES` below.

- `neo`: Neo.mjs export bundles (`memory-backup-*`, `graph-backup-*`, `summaries-backup-*`,
  `temporal-summary-backup-*` `.jsonl`), a row a line;
- `plain`: the plain JSONL turn format (any other `.jsonl`), a turn a line;
- `claude_code`, `codex`: Claude Code session logs and Codex CLI rollouts, JSONL events grouped
  into turns (and the Codex TypeScript CLI's `.json` rollout document);
- `aider`: aider chat histories (Markdown);
- `trajectory`: SWE-agent and mini-SWE-agent trajectories (one JSON document).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from digest.readers import aider, claude_code, codex, trajectory
from digest.readers.common import BOM, Lines, Read, excerpt
from digest.readers.harness import Harness, Head
from digest.readers.neo import NAME_PREFIXES

# Every harness, by the registration in its reader module; a file is told by the first whose
# sniff holds, in this order (the byte checks before the JSON lines).
HARNESSES: tuple[Harness, ...] = (aider.HARNESS, trajectory.HARNESS, claude_code.HARNESS, codex.HARNESS)

# How much of a file its kind is told from: a harness log says what it is in its first lines.
SNIFF_BYTES = 1 << 20
# The files a folder is searched for: every `.jsonl`, and these when their content is a known log.
LOG_SUFFIXES = tuple(dict.fromkeys(suffix for harness in HARNESSES for suffix in harness.suffixes))
UNKNOWN = "unknown"

# The harness readers: each reads a file's lines itself and says what each became.
HARNESS_READERS = {harness.kind: harness.read for harness in HARNESSES}
_KNOWN = ", ".join(["Neo.mjs bundle", "JSONL turns", *(h.title for h in HARNESSES[:-1])]) + f" or {HARNESSES[-1].title}"


def _unreadable(lines: Lines, source: str) -> Iterator[Read]:
    """A file no reader knows: its first line is the reject, the others folded into it."""
    for line_no, raw in lines:
        if line_no == 1:
            yield Read("reject", line_no, reason=f"unknown-format: not a {_KNOWN} log", excerpt=excerpt(raw))
        else:
            yield Read("fold", line_no)


# Every reader that reads a file's lines itself: the harness logs', and the unknown file's.
READERS = {**HARNESS_READERS, UNKNOWN: _unreadable}
# The kinds whose rows are turns.
TURN_KINDS = frozenset({"memory", "turns", *HARNESS_READERS})


def file_kind(path: Path) -> str:
    """The reader a file is for: a Neo.mjs bundle by its name, else a harness log by its content,
    else the plain turn format for a `.jsonl`; `unknown` for any other file."""
    for prefix, kind in NAME_PREFIXES:
        if path.name.startswith(prefix):
            return kind
    with path.open("rb") as handle:
        head = Head(handle.read(SNIFF_BYTES).removeprefix(BOM))
    for harness in HARNESSES:
        if harness.sniff(head):
            return harness.kind
    return "turns" if path.suffix == ".jsonl" else UNKNOWN


def is_log(path: Path) -> bool:
    """Whether a folder's file is one to ingest: every `.jsonl`, and a `.md`, `.traj` or `.json`
    whose content is a known harness log (a README beside the logs is not)."""
    if path.suffix == ".jsonl":
        return True
    return path.name.endswith(LOG_SUFFIXES) and file_kind(path) in HARNESS_READERS
