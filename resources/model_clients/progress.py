"""A long model call's progress in the run log: the pieces received so far and the seconds, every
`every_s` while a call is out, so a call minutes long is not silent in the run log."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# The run log hears of a call at most this often (the first line once it has gone this long).
PROGRESS_LOG_S = 30.0


class CallProgress:
    """Counted by the client's `Deadline` (`begin`, `piece`, `end`), read by `ticking`'s thread,
    which logs a line through `log` (the asset's `context.log.info`). Plain counters: one writer,
    and a stale read only shifts a line by a piece."""

    def __init__(self, log: Callable[[str], None], every_s: float = PROGRESS_LOG_S):
        self.log = log
        self.every_s = every_s
        self.pieces = 0
        self.first_piece_s: float | None = None
        self._started: float | None = None  # None: no call out
        self._logged: float | None = None

    def begin(self) -> None:
        self.pieces, self.first_piece_s = 0, None
        self._started = self._logged = time.monotonic()

    def piece(self) -> None:
        if self._started is not None and self.first_piece_s is None:
            self.first_piece_s = time.monotonic() - self._started
        self.pieces += 1

    def end(self) -> None:
        self._started = None

    def line(self, now: float) -> str | None:
        """The line due at `now`: once a call is out `every_s` past the last line, else None."""
        started, logged = self._started, self._logged
        if started is None or logged is None or now - logged < self.every_s:
            return None
        self._logged = now
        seconds = now - started
        if self.pieces == 0:
            return f"model call in progress: {seconds:.0f} s, no piece received yet"
        return (
            f"model call in progress: {seconds:.0f} s, {self.pieces} pieces received "
            f"(the first after {self.first_piece_s:.1f} s)"
        )

    @contextmanager
    def ticking(self) -> Iterator[CallProgress]:
        """A thread that logs the due line while the block runs."""
        done = threading.Event()

        def tick() -> None:
            while not done.wait(min(self.every_s, 5.0)):
                if (text := self.line(time.monotonic())) is not None:
                    self.log(text)

        thread = threading.Thread(target=tick, name="model-call-progress", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            done.set()
            thread.join()
