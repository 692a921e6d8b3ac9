"""The old arm of a benchmark: the code at a commit, as a detached git worktree under bench/out/.

Not a benchmark itself (tests/test_bench_smoke.py runs every bench/*.py but the ones named `_*`).
"""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"


def worktree(ref: str, path: Path | None = None) -> Path:
    """The code at `ref` in `path` (default bench/out/old-REF), made if missing. One at a time: the
    test suite runs benchmarks side by side, and two `git worktree add` at once can fail ("failed to
    read .git/worktrees/.../commondir")."""
    path = (path or OUT / f"old-{ref}").resolve()
    OUT.mkdir(parents=True, exist_ok=True)
    with (OUT / ".worktrees.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / "digest").is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), ref], check=True)
    return path
