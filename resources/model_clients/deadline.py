"""The wall-clock ceiling and the stall window of one model call, kept by a watchdog thread."""

from __future__ import annotations

import socket
import threading
import time

from digest.model_api import ModelError, ModelStalled, ModelTimeout
from resources.model_clients.progress import CallProgress

# Without a stall window, a call cut at its ceiling counts as progressing when its last piece is
# this recent: a few token gaps of a slow CPU host.
PROGRESS_WINDOW_S = 5.0


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


class Deadline:
    """The wall-clock ceiling of one `chat` call, all its requests, and the stall window of each
    streamed one.

    httpx's timeouts bound each socket operation, so a server that sends a byte a second never
    trips one, and a stall is only a read that waits. A watchdog thread shuts the call's sockets
    down at the ceiling, or when a streamed request has received no piece for `stall_s`; that
    ends a read blocked in the kernel at once (and closes the stream, so the server can stop),
    and the call reports a timeout.
    """

    def __init__(self, timeout_s: float, stall_s: float | None = None, progress: CallProgress | None = None):
        self.timeout_s = timeout_s
        self.progress = progress  # the run log's view of the call (`progress.py`); None: not watched
        self.stall_s = stall_s
        self.started = time.monotonic()
        self.expired = False  # the sockets were shut: by the ceiling, or by the stall window
        self.stalled = False
        self.first_token_s: float | None = None  # of the request being answered
        self._sent = self.started  # when the current request was sent
        self._last_piece: float | None = None  # of the whole call
        self._quiet_since: float | None = None  # the stall window's start; None: not watching
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._finished = False
        self._wake = threading.Condition()  # a request's start or end moves the watchdog's next check
        self._watchdog = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Deadline:
        self._watchdog.start()
        if self.progress is not None:
            self.progress.begin()
        return self

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.end()
        with self._wake:
            self._finished = True
            self._wake.notify()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def sending(self, streamed: bool) -> None:
        """A request goes out: its stall window starts now (the wait for its first piece counts)."""
        with self._wake:
            self._sent = time.monotonic()
            self.first_token_s = None
            self._quiet_since = self._sent if streamed and self.stall_s is not None else None
            self._wake.notify()

    def piece(self) -> None:
        """A piece of generated text arrived (the answer's, or a thinking model's reasoning): the
        only progress. A chunk without text (a role delta, `{"done": false}` with no content, a
        keep-alive) moves neither the stall window nor the call's last piece."""
        now = time.monotonic()
        self._last_piece = now
        if self._quiet_since is not None:
            self._quiet_since = now
        if self.first_token_s is None:
            self.first_token_s = now - self._sent
        if self.progress is not None:
            self.progress.piece()

    def quiet(self) -> None:
        """The stream has ended, or a whole body is read: no stall window."""
        with self._wake:
            self._quiet_since = None
            self._wake.notify()

    def trace(self, event: str, info: dict) -> None:
        """httpx's `trace` request extension: keep each socket the call opens."""
        if event != "connection.connect_tcp.complete":
            return
        sock = info["return_value"].get_extra_info("socket")
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shutdown(sock)

    def _watch(self) -> None:
        # One thread per call, woken at the nearer of the ceiling and the stall point; a piece only
        # moves the stall point (no lock, no wake-up), so it wakes about once a window, not a piece.
        ceiling = self.started + self.timeout_s
        with self._wake:
            while not self._finished:
                now = time.monotonic()
                stall_at = None if self._quiet_since is None else self._quiet_since + self.stall_s
                if now >= ceiling:
                    break
                if stall_at is not None and now >= stall_at:
                    self.stalled = True
                    break
                self._wake.wait(min(ceiling, stall_at or ceiling) - now)
            else:
                return
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)

    def error(self, kind: type[ModelError], message: str) -> ModelError:
        error = kind(message)
        error.duration_s = self.elapsed
        return error

    def timeout(self) -> ModelTimeout:
        if self.stalled:
            message = f"model call stalled: nothing received for {self.stall_s:g}s"
            error = self.error(ModelStalled, message)
        else:
            error = self.error(ModelTimeout, f"model call timed out after {self.timeout_s:g}s (wall-clock deadline)")
            window = self.stall_s if self.stall_s is not None else PROGRESS_WINDOW_S
            error.progressing = self._last_piece is not None and time.monotonic() - self._last_piece <= window
        error.first_token_s = self.first_token_s
        return error
