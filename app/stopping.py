"""Stopping a CLI sweep or drain: SIGTERM and Ctrl-C (SIGINT) interrupt the run in hand and launch
nothing more. The run's model call is recorded `interrupted` (`digest.synthesis.ledgered_call`),
which says nothing of its host (no circuit failure), and the embedded server the sweep started is
stopped only after its last run (`app.runs.run_partitions`). A second signal stops the
process at once, as a plain Ctrl-C would.

While a run executes, Dagster holds both signals (`dagster._utils.interrupts`: SIGTERM goes where
SIGINT does) and raises them in the step's code, which fails the step as interrupted; between runs
this module's handler only notes them, and the sweep stops before its next run. Which signal came
is read from the wakeup file descriptor (`signal.set_wakeup_fd`: the C handler writes each
signal's number there, whichever Python handler then runs), so it is known in both cases."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The stop signals received while `stop_on_signals` is in force, in order, and the pipe they come by.
_received: list[int] = []
_wakeup: list[int] = []  # the pipe's read end, while in force


def _read_wakeup() -> None:
    if not _wakeup:
        return
    try:
        numbers = os.read(_wakeup[0], 512)
    except BlockingIOError:
        return
    _received.extend(n for n in numbers if n in SIGNALS)


def stop_requested() -> str | None:
    """The name of the signal that asked the sweep to stop (SIGINT, SIGTERM), else None."""
    _read_wakeup()
    return signal.Signals(_received[0]).name if _received else None


def exit_code() -> int:
    """A stopped command's exit code, as a shell reports a process ended by the signal: 128 + its
    number; 0 when no signal came."""
    _read_wakeup()
    return 128 + _received[0] if _received else 0


def _stop(signum: int, frame) -> None:
    """Between runs: noted (by the wakeup pipe), the sweep stops before its next run; a second signal
    stops the process now."""
    _read_wakeup()
    if len(_received) > 1:
        signal.default_int_handler(signum, frame)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM, for the command's life, ask its sweep to stop (`stop_requested`)."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    _wakeup.append(read)
    for signum in SIGNALS:
        signal.signal(signum, _stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_fd)
        _wakeup.clear()
        _received.clear()
        os.close(read)
        os.close(write)
