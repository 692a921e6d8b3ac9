"""A throwaway PostgreSQL server for tests: Debian's `postgresql` binaries (`.ci/run` installs the
package), a fresh cluster in a temp folder on a free loopback port, trust auth on loopback,
stopped and removed after.

    with postgres_server() as url:  # postgresql://postgres@127.0.0.1:PORT/dagster

initdb refuses to run as root (CI runs as root): the server then runs as the `postgres` OS user
the Debian package creates, in a folder handed to it. Without the binaries the test is skipped,
except under CI (the env var CI set), where it fails.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

DATABASE = "dagster"
# Durability is of no use in a cluster thrown away after the test.
FAST = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"


def _bin_dir() -> Path | None:
    """The newest installed major version's binaries."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3]))
    return found[-1].parent if found else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    bin_dir = _bin_dir()
    if bin_dir is None:
        message = "no PostgreSQL server under /usr/lib/postgresql/*/bin (apt-get install postgresql)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    as_root = os.geteuid() == 0
    # Not under pytest's tmp_path: its parents are private to root, and the server may not be root.
    folder = Path(tempfile.mkdtemp(prefix="digest-pg-"))
    if as_root:
        owner = pwd.getpwnam("postgres")
        os.chown(folder, owner.pw_uid, owner.pw_gid)

    def run(*command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
        done = subprocess.run(prefix + list(command), capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log = folder / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stderr[-2000:]}{tail}")

    data, port = folder / "data", _free_port()
    started = False
    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8",
            "--locale=C")  # fmt: skip
        options = f"-h 127.0.0.1 -p {port} -k {folder} {FAST}"
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-o", options, "-w", "-t",
            "60", "start")  # fmt: skip
        started = True
        run(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", DATABASE)
        yield f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}"
    finally:
        if started:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)
