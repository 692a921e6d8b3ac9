"""The old arm of a benchmark: the code at a commit, as a detached git worktree under bench/out/,
or exported from git into a folder (nothing registered in the repository).

Not a benchmark itself (tests/test_bench_smoke.py runs every bench/*.py but the ones named `_*`).
"""

from __future__ import annotations

import fcntl
import io
import subprocess
import tarfile
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


def exported(ref: str, path: Path) -> Path:
    """The code at `ref` in `path`, exported with `git archive` if `path` holds none yet."""
    if not (path / "digest").is_dir():
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
        path.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(path, filter="data")
    return path
