"""The embedded server's files and life (issue 22, defect 10): its log under DIGEST_HOME, never in
TMPDIR, and a SIGKILL of the process that started it ends it within seconds, even mid-request."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

pytestmark = pytest.mark.embedded

PARENT = """
import json, sys
from resources.embedded_server import EmbeddedServer
server = EmbeddedServer(threads=1).start()
print(json.dumps({"pid": server._process.pid, "url": server.url}), flush=True)
sys.stdin.read()  # until killed
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes: its parent (killed) can no longer reap it until init does.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


def test_a_sigkilled_parent_takes_the_embedded_server_with_it_and_leaves_no_temp_file(tmp_path):
    tmp, home = tmp_path / "tmp", tmp_path / "home"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "DIGEST_HOME": str(home)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        started = json.loads(parent.stdout.readline())
        pid, url = started["pid"], started["url"]
        assert _alive(pid)
        # A session of its own (issue 36): a Ctrl-C at the terminal reaches the sweep, not the server.
        assert os.getsid(pid) == pid != os.getsid(parent.pid)
        assert list(tmp.iterdir()) == []  # the log is not in TMPDIR
        logs = list((home / "logs").glob("embedded-server-*.log"))
        assert len(logs) == 1, list(home.rglob("*"))

        # A long request in flight: the server would finish it before exiting on a SIGTERM.
        body = {
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Write a very long story about a grid. " * 20}],
            "max_tokens": 2000,
        }

        def long_request() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the server is killed under it, as meant
                httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)

        threading.Thread(target=long_request, daemon=True).start()
        time.sleep(2.0)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 5.0
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), "the embedded server outlived its killed parent"
        assert list(tmp.iterdir()) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        try:
            os.kill(started["pid"], signal.SIGKILL)
        except (ProcessLookupError, NameError, UnboundLocalError):
            pass


def test_a_stopped_server_removes_its_log_and_a_dead_servers_leftover_goes_at_the_next_start(tmp_path, monkeypatch):
    from resources.embedded_server import EmbeddedServer

    monkeypatch.setenv("DIGEST_HOME", str(tmp_path / "home"))
    logs = tmp_path / "home" / "logs"
    logs.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    leftover = logs / f"embedded-server-{dead.pid}-1234.log"
    leftover.write_text("a killed sweep's server")
    with EmbeddedServer(threads=1) as server:
        assert not leftover.exists()
        assert [p.name for p in logs.iterdir()] == [f"embedded-server-{os.getpid()}-{server.port}.log"]
    assert list(logs.iterdir()) == []
