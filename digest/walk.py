"""Which files an ingest reads: the files named, and the logs found in the folders named, walked
down to MAX_DEPTH folders deep; and the harness homes an ingest with no path reads.

Every file or folder the walk passes over is counted with its reason (`Walk.skipped`), so a folder
of logs that yields nothing says why. A symlink is followed only when its target is inside the
folder walked (a link out of the tree could reach the whole disk, or loop); the file it points at
is read once however many links name it.

The order is the one the readers rely on: in each folder its files (a sub-agent's `agent-*` file
last) come before its sub-folders, so a Claude Code session `<session>.jsonl` is read before its
`<session>/subagents/agent-*.jsonl`, and an older CLI's flat `agent-*.jsonl` after the sessions
beside it.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from digest.readers import HARNESSES, LOG_SUFFIXES, is_log

# Claude Code's deepest layout is projects/<project>/<session>/subagents/agent-*.jsonl (3 below
# the home) and Codex's sessions/YYYY/MM/DD/rollout-*.jsonl (3): room for a home named higher up.
MAX_DEPTH = 8
# Kept beside the sub-agent logs (its type and description): not a log.
SUBAGENT_META_SUFFIX = ".meta.json"
EXAMPLES = 3  # paths kept per skip reason, for the message
_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")

# The reasons a walk passes over a file or folder.
TOO_DEEP = "too-deep"
SYMLINK_OUT = "symlink-out-of-tree"
SUBAGENT_META = "subagent-meta"  # quietly: it is not a log, by design
NOT_A_LOG_NAME = "not-a-log-by-name"
NOT_A_LOG_CONTENT = "not-a-log-by-content"
EMPTY = "empty"
UNREADABLE = "unreadable"
SPECIAL = "not-a-regular-file"
VANISHED = "vanished"  # listed by the walk, gone before its read (`digest.ingest.ingest_paths`)
# An archive bundle's store tables (`session-digest archive`): `restore` reads them, an ingest reads
# only the bundle's export files beside them.
ARCHIVE_TABLES = "archive-tables"


@dataclass
class Walk:
    files: list[Path] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # reason -> how many files or folders
    examples: dict[str, list[str]] = field(default_factory=dict)  # reason -> the first few paths

    def skip(self, reason: str, path: Path) -> None:
        self.skipped[reason] += 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < EXAMPLES:
            shown.append(str(path))

    def summary(self) -> str:
        """`reason: n (e.g. path)`, one a reason, or an empty string."""
        return "; ".join(
            f"{reason}: {count} (e.g. {self.examples[reason][0]})" for reason, count in sorted(self.skipped.items())
        )


def walk(paths: Iterable[str | Path], max_depth: int = MAX_DEPTH) -> Walk:
    """The files as given (whatever their name), and the logs inside each given folder (every
    non-empty `*.jsonl`, and each `.md`, `.traj` or `.json` whose content is a known harness log:
    `digest.readers.is_log`), each once, in the readers' order (above)."""
    found = Walk()
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            root = path.resolve()
            _walk_folder(root, root, 1, max_depth, found, seen)
        elif path.is_file():
            resolved = path.resolve()
            if resolved not in seen:
                seen.add(resolved)
                found.files.append(resolved)
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")
    return found


def _order(entry: os.DirEntry) -> tuple:
    """Files before folders; a sub-agent's flat `agent-*` file after the sessions beside it."""
    is_dir = entry.is_dir(follow_symlinks=False)
    return (is_dir, not is_dir and entry.name.startswith("agent-"), entry.name)


def walk_order(path: str | Path) -> tuple:
    """A sort key giving files named by path the walk's order: in each folder its files (a
    sub-agent's `agent-*` last) before its sub-folders."""
    *folders, name = Path(path).parts
    return (*((1, part) for part in folders), (0, name.startswith("agent-"), name))


def _walk_folder(root: Path, folder: Path, depth: int, max_depth: int, found: Walk, seen: set[Path]) -> None:
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=_order)
    except OSError:
        found.skip(UNREADABLE, folder)
        return
    for entry in entries:
        path = Path(entry.path)
        try:
            if entry.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(root):
                    found.skip(SYMLINK_OUT, path)
                    continue
                if target.is_dir():
                    continue  # inside the tree: walked where it is, never through the link (no loop)
                path = target
            elif entry.is_dir(follow_symlinks=False):
                if entry.name == "tables" and (folder / "manifest.json").is_file():
                    found.skip(ARCHIVE_TABLES, path)
                elif depth >= max_depth:
                    found.skip(TOO_DEEP, path)
                else:
                    _walk_folder(root, path, depth + 1, max_depth, found, seen)
                continue
            _consider(path, found, seen)
        except OSError:
            found.skip(UNREADABLE, path)


def _consider(path: Path, found: Walk, seen: set[Path]) -> None:
    if path in seen:
        return
    if not path.is_file():
        found.skip(SPECIAL, path)
        return
    if path.name.endswith(SUBAGENT_META_SUFFIX):
        found.skip(SUBAGENT_META, path)
        return
    if not path.name.endswith((".jsonl", *LOG_SUFFIXES)):
        found.skip(NOT_A_LOG_NAME, path)
        return
    if path.stat().st_size == 0:
        found.skip(EMPTY, path)  # a harness creates its file before the first line: read once it has one
        return
    if not is_log(path):
        found.skip(NOT_A_LOG_CONTENT, path)
        return
    seen.add(path)
    found.files.append(path)


# --- the harness homes ---------------------------------------------------------------------------


def harness_homes(env: Mapping[str, str] | None = None) -> list[Path]:
    """Where the harnesses that have a home keep their sessions (Claude Code's
    `${CLAUDE_CONFIG_DIR:-~/.claude}/projects`, Codex CLI's `${CODEX_HOME:-~/.codex}/sessions`),
    whether they exist or not."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    return [harness.home(env, home) for harness in HARNESSES if harness.home]


def watch_folders(text: str, env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """`DIGEST_WATCH`'s folders: separated by `os.pathsep` (`:` on POSIX, as in PATH; a comma may be
    part of a folder's name), each with a leading `~` and `$VAR` / `${VAR}` expanded from `env`
    (an unset variable is left as written, so the folder is reported missing by its own name)."""
    env = os.environ if env is None else env

    def expand(part: str) -> Path:
        part = _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), part)
        if part == "~" or part.startswith("~/"):
            part = str(env.get("HOME") or Path.home()) + part[1:]
        return Path(part)

    return tuple(expand(part.strip()) for part in text.split(os.pathsep) if part.strip())
