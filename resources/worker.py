"""The process a run works in, as its run's tags say it (`worker_tags`: the store resource adds them
when the run starts; the CLI sets them already when it creates its in-process runs), so a run whose
process died can be told apart and closed (`pipelines.interrupted_runs`)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from digest.tags import HOST_TAG, PID_STARTED_TAG, PID_TAG


def _process_start_ticks(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat: clock ticks after boot. None where there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; the fields after its closing paren do not.
    return stat.rsplit(")", 1)[1].split()[19]


def worker_tags() -> dict[str, str]:
    pid = os.getpid()
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(pid)}
    started = _process_start_ticks(pid)
    if started is not None:
        tags[PID_STARTED_TAG] = started
    return tags


def process_alive(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        pass
    return started is None or _process_start_ticks(pid) == started
