"""Issue 36, item 6: off a terminal a long run is not silent. While a CLI sweep's run runs, a line a
period says which session, what it does and how long so far (`app.console.Ticker`); none
after the run's own line, none with --json (its stdout and stderr are for scripts)."""

from __future__ import annotations

import time

from app.console import Output


def _run(output: Output, seconds: float) -> None:
    with output.sessions("summarizing", [120.0]) as sessions:
        sessions.starting("s1")
        time.sleep(seconds)
        sessions.finished({"partition": "s1", "run_id": "r1", "success": True, "source_tier": "raw", "seconds": 1.0})


def test_a_run_still_going_says_so_a_line_a_period_then_its_own_line_ends_it(capfd):
    _run(Output(as_json=False, progress_every_s=0.05), 0.25)
    lines = capfd.readouterr().err.splitlines()
    ticks = [line for line in lines if line.startswith("… s1  summarizing, ")]
    assert ticks and all(line.endswith("so far (plan ~2m00s)") for line in ticks)
    assert lines[-1] == "✓ s1  raw  1.0s" and lines.index(ticks[-1]) < len(lines) - 1
    time.sleep(0.1)  # the ticker stopped with the run
    assert capfd.readouterr().err == ""


def test_no_progress_line_with_json(capfd):
    _run(Output(as_json=True, progress_every_s=0.05), 0.15)
    err = capfd.readouterr().err
    assert "so far" not in err and '"partition": "s1"' in err
