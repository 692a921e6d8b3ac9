"""The readers of every format the ingest takes, each a module of its own, and which one a file
is for: by name for Neo.mjs export bundles (as the original's import routes them), else by its
content (`file_kind`), so a harness's log is read whatever it is called.

- `neo`: Neo.mjs export bundles (`memory-backup-*`, `graph-backup-*`, `summaries-backup-*`,
  `temporal-summary-backup-*` `.jsonl`), a row a line;
- `plain`: the plain JSONL turn format (any other `.jsonl`), a turn a line;
- `claude_code`, `codex`: Claude Code session logs and Codex CLI rollouts, JSONL events grouped
  into turns (and the Codex TypeScript CLI's `.json` rollout document);
- `aider`: aider chat histories (Markdown);
- `trajectory`: SWE-agent and mini-SWE-agent trajectories (one JSON document).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from digest.readers import aider, claude_code, codex, trajectory
from digest.readers.common import BOM, Lines, Read, Reject, excerpt, load_json
from digest.readers.neo import NAME_PREFIXES

# How much of a file its kind is told from: a harness log says what it is in its first lines.
SNIFF_BYTES = 1 << 20
SNIFF_LINES = 50
# The files a folder is searched for: every `.jsonl`, and these when their content is a known log.
LOG_SUFFIXES = (".md", ".traj", ".json")
UNKNOWN = "unknown"

# The harness readers: each reads a file's lines itself and says what each became.
HARNESS_READERS: dict[str, Callable[[Lines, str], Iterator[Read]]] = {
    claude_code.KIND: claude_code.read,
    codex.KIND: codex.read,
    aider.KIND: aider.read,
    trajectory.KIND: trajectory.read,
}


def _unreadable(lines: Lines, source: str) -> Iterator[Read]:
    """A file no reader knows: its first line is the reject, the others folded into it."""
    for line_no, raw in lines:
        if line_no == 1:
            reason = "unknown-format: not a Neo.mjs bundle, JSONL turns, Claude Code, Codex, aider or trajectory log"
            yield Read("reject", line_no, reason=reason, excerpt=excerpt(raw))
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
        head = handle.read(SNIFF_BYTES)
    head = head.removeprefix(BOM)
    if aider.sniff(head):
        return aider.KIND
    if trajectory.sniff(head):
        return trajectory.KIND
    if codex.sniff_document(head):
        return codex.KIND
    objs = _json_lines(head)
    if claude_code.sniff(objs):
        return claude_code.KIND
    if codex.sniff(objs):
        return codex.KIND
    return "turns" if path.suffix == ".jsonl" else UNKNOWN


def _json_lines(head: bytes) -> list[dict]:
    """The JSON objects among the first lines (a cut last line, or any bad one, left out)."""
    objs = []
    for raw in head.split(b"\n")[:SNIFF_LINES]:
        if not raw.strip():
            continue
        try:
            objs.append(load_json(raw.decode("utf-8")))
        except (Reject, UnicodeDecodeError):  # not a JSON object line: it tells nothing
            continue
    return objs


def is_log(path: Path) -> bool:
    """Whether a folder's file is one to ingest: every `.jsonl`, and a `.md`, `.traj` or `.json`
    whose content is a known harness log (a README beside the logs is not)."""
    if path.suffix == ".jsonl":
        return True
    return path.name.endswith(LOG_SUFFIXES) and file_kind(path) in HARNESS_READERS
