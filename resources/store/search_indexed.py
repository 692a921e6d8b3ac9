"""What each session was indexed at, kept in the search index's folder (`indexed.jsonl`) so that it
goes with the index: a rebuild or a deleted folder takes it along, a restored store is compared
with what the index really holds.

A line a change, appended and synced to disk: before a commit of the index, each session of the
batch as pending (known to the index, current at no figures); after the commit, each session's
figures (its input revision, its summary's time and verdict, its mini summaries' count and latest
time), its documents and when; or its removal. A session's last line wins. A crash between a commit
and the line after it leaves the session pending or at its earlier figures: it is indexed again (or
dropped, when the store has it no more), never taken as current. A line cut short by a crash is
dropped, and the writer writes the log again whole when it has one, or when dead lines outnumber
the live ones.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

LOG_FILE = "indexed.jsonl"
SLACK_LINES = 256  # dead lines a log may carry before it is written again whole


class IndexedSessions:
    """The log read: `sessions` maps a session to its last line (`at`: its figures, None when
    pending; `documents`; `indexed_at`)."""

    def __init__(self, folder: Path):
        self.path = folder / LOG_FILE
        self.sessions: dict[str, dict] = {}
        self.lines = 0
        self.torn = False  # a line that does not read (cut short by a crash)
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        *lines, tail = data.split(b"\n")
        self.torn = tail != b""
        for line in lines:
            try:
                entry = json.loads(line)
                session_id = entry["session"]
            except (ValueError, KeyError, TypeError):
                self.torn = True
                continue
            self.lines += 1
            if entry.get("removed"):
                self.sessions.pop(session_id, None)
            else:
                self.sessions[session_id] = entry

    def current(self, session_id: str) -> list | None:
        """The figures the session was indexed at; None when never indexed or pending."""
        entry = self.sessions.get(session_id)
        return None if entry is None else entry.get("at")

    def documents(self) -> int:
        return sum(e.get("documents", 0) for e in self.sessions.values())

    def last_indexed(self) -> str | None:
        return max((e["indexed_at"] for e in self.sessions.values() if e.get("indexed_at")), default=None)

    # --- the writer's (under the index's writer lock) --------------------------------------------------

    def tidy(self) -> None:
        """The log written again whole when a line was cut short (an append would join it) or dead
        lines outnumber the live ones."""
        if self.torn or self.lines > 2 * len(self.sessions) + SLACK_LINES:
            part = self.path.with_name(f"{LOG_FILE}.part")
            with open(part, "w") as out:
                out.writelines(json.dumps(e) + "\n" for e in self.sessions.values())
                out.flush()
                os.fsync(out.fileno())
            os.replace(part, self.path)
            self.lines, self.torn = len(self.sessions), False

    def pending(self, session_ids: list[str]) -> None:
        """Before a commit that writes these sessions: known to the index, current at nothing."""
        self._append([{"session": s, "at": None} for s in session_ids])

    def indexed(self, figures: dict[str, list], documents: dict[str, int]) -> None:
        """After the commit that wrote these sessions: the figures they were indexed at."""
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._append(
            [{"session": s, "at": f, "documents": documents.get(s, 0), "indexed_at": at} for s, f in figures.items()]
        )

    def removed(self, session_ids: list[str]) -> None:
        """After the commit that dropped these sessions."""
        self._append([{"session": s, "removed": True} for s in session_ids])

    def _append(self, entries: list[dict]) -> None:
        with open(self.path, "a") as out:
            out.writelines(json.dumps(e) + "\n" for e in entries)
            out.flush()
            os.fsync(out.fileno())
        self.lines += len(entries)
        for entry in entries:
            if entry.get("removed"):
                self.sessions.pop(entry["session"], None)
            else:
                self.sessions[entry["session"]] = entry
