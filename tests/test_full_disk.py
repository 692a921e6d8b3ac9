"""A full or read-only DIGEST_HOME (issue 22, defect 3): every command ends with the CLI's one line
naming the file and the cause, never a traceback, and the read-only ones (`status`) need no write.
The disk is a real small tmpfs (the test needs to be allowed `mount`; skipped otherwise)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

import pytest

from tests.bundles import write_bundle
from tests.conftest import make_turns, project_free_environ
from tests.model_server import ModelServer

CLI = [sys.executable, "-m", "app.cli"]


@contextlib.contextmanager
def _small_disk(path, size: str = "48m"):
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(disk) -> None:
    with open(disk / "filler", "wb") as out, contextlib.suppress(OSError):
        block = b"\0" * 2**20
        while True:
            out.write(block)
            out.flush()


def _cli(args, env) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + args, env=env, capture_output=True, text=True, timeout=300)


def _one_line_refusal(done: subprocess.CompletedProcess, cause: str) -> str:
    assert done.returncode not in (0, None), done.stdout[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if line.strip() and "usage statistics" not in line]
    assert len(said) == 1 and said[0].startswith("session-digest: "), done.stderr[-3000:]
    assert cause in said[0], said[0]
    return said[0]


def test_a_full_then_read_only_home_gives_one_line_and_status_still_reads(tmp_path):
    with _small_disk(tmp_path / "disk") as disk, ModelServer() as server:
        home = disk / "home"
        kept = project_free_environ()
        env = {**kept, "DIGEST_HOME": str(home), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_MODEL_URL": server.url}
        first = write_bundle(tmp_path / "first", make_turns("one", 3))
        assert _cli(["ingest", str(first), "--json"], env).returncode == 0
        assert _cli(["sweep", "--json"], env).returncode == 0
        later = write_bundle(tmp_path / "later", make_turns("two", 3) + make_turns("three", 2))
        _fill(disk)

        status = _cli(["status", "--json"], env)
        assert status.returncode == 0, status.stderr[-3000:]
        assert json.loads(status.stdout)["sessions"] == 1
        for args in (["ingest", str(later)], ["sweep"], ["archive"], ["friction-report"]):
            line = _one_line_refusal(_cli(args, env), "No space left on device")
            assert str(home) in line or str(disk) in line, line

        (disk / "filler").unlink()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        status = _cli(["status", "--json"], env)
        assert status.returncode == 0, status.stderr[-3000:]
        for args in (["ingest", str(later)], ["sweep"], ["archive"]):
            _one_line_refusal(_cli(args, env), "Read-only file system")
