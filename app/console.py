"""What the CLI shows a person, drawn with rich: tables, and a sweep's progress bar with the plan's
time left. On a pipe or a file (tests, CI) rich draws no bar and no colours, and each finished
session is one plain line. `--json` prints what scripts read instead, as before. Dagster's event
stream goes to the instance (the UI shows it) and to a log file, never to the terminal."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import logging.handlers
import os
import sys
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

# --- Dagster's event stream: to a file ---


@functools.cache
def _file_logger(path: str, level: str) -> logging.Logger:
    """One open file per process for all its runs."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    log = logging.Logger("session-digest", level=level)  # unregistered: nothing propagates to the root logger
    # Bounded; processes sharing the file may lose a line at a rollover, the instance keeps every event.
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=10 * 2**20, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s - %(levelname)s - %(message)s"))
    log.addHandler(handler)
    return log


@functools.cache
def run_log_file():
    """The logger definition (built on first use: `status` and `plan` need not import Dagster)."""
    from dagster import Field, LoggerDefinition

    return LoggerDefinition(
        lambda init_context: _file_logger(init_context.logger_config["path"], init_context.logger_config["log_level"]),
        config_schema={"path": Field(str), "log_level": Field(str, is_required=False, default_value="DEBUG")},
        description="Dagster's event stream of a run, appended to a file instead of printed on the console.",
    )


def run_log_config(path: Path) -> dict:
    """Run config selecting `run_log_file` alone: a run that names a logger gets no console logger."""
    return {"loggers": {"run_log_file": {"config": {"path": str(path)}}}}


# --- the terminal ---


def _terminal(stream):
    """stderr (the terminal, or a pipe), as a handle of its own: while a run executes, Dagster points file descriptors 1
    and 2 at the run's compute log files, so through them the bar would stop redrawing (no longer a
    terminal) or land in those logs."""
    return os.fdopen(os.dup(stream.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")


def _stderr_console() -> Console:
    """The person's lines on a handle of stderr's own (`_terminal`), so the progress line of a run
    still going reaches them, not the run's compute log; plain stderr where it has no file descriptor."""
    try:
        return Console(file=_terminal(sys.stderr), highlight=False)
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return Console(stderr=True, highlight=False)


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class PlanTimeLeft(ProgressColumn):
    """The plan's estimate of model time still to come: the estimates of the sessions not started,
    and what is left of the running one's (never below zero when it overruns)."""

    def render(self, task) -> Text:
        if task.fields.get("after_current") is None:
            return Text("")
        running = max(0.0, task.fields["current_estimate"] - (time.monotonic() - task.fields["current_started"]))
        return Text(f"~{_duration(task.fields['after_current'] + running)} left (plan)", style="progress.remaining")


def session_line(outcome: dict) -> str:
    """One finished session: partition, route, tier, seconds (or why it needed no run, or how it failed)."""
    key = outcome["partition"]
    if "nothing_to_do" in outcome:
        return f"- {key}  nothing to do: {outcome['nothing_to_do']}"
    if outcome.get("interrupted") and not outcome["success"]:
        return f"✗ {key}  interrupted by {outcome['interrupted']} after {outcome['seconds']}s (run {outcome['run_id']})"
    if not outcome["success"]:
        why = outcome.get("error") or "see `session-digest ui` for its logs"
        return f"✗ {key}  failed in {outcome['seconds']}s (run {outcome['run_id']}): {why}"
    parts = [outcome.get(k) for k in ("route_reason", "source_tier") if outcome.get(k)]
    if outcome.get("verdict") not in (None, "ok", "none"):
        parts.append(f"junk: {outcome['verdict']}")
    if "mini_summaries" in outcome:
        parts.append(f"{outcome['mini_summaries']} mini summaries")
    elif "nodes" in outcome:
        parts.append(f"{outcome['nodes']} nodes, {outcome['edges']} edges")
    elif not parts:
        parts.append("no graph yet (part-done or gated)")
    if "run_ended" in outcome:  # stopped after its summary was written (`app.runs`)
        parts.append(f"({outcome['run_ended']}, run {outcome['run_id']})")
    return f"✓ {key}  {'  '.join(parts)}  {outcome['seconds']}s"


# Off a terminal, a run still going says so this often: a long model call is not a hang.
PROGRESS_EVERY_S = 60.0


class Ticker:
    """A line every `every_s` while one run runs: its session, what it does, how long so far."""

    def __init__(self, output: Output, title: str, key: str, estimate: float | None, every_s: float):
        self.output, self.title, self.key, self.estimate = output, title, key, estimate
        self.started, self.done = time.monotonic(), threading.Event()
        self.thread = threading.Thread(target=self._tick, args=(every_s,), name="run-progress", daemon=True)
        self.thread.start()

    def _tick(self, every_s: float) -> None:
        while not self.done.wait(every_s):
            planned = f" (plan ~{_duration(self.estimate)})" if self.estimate else ""
            elapsed = _duration(time.monotonic() - self.started)
            self.output.note(f"… {self.key}  {self.title}, {elapsed} so far{planned}")

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


class Sessions:
    """A sweep's sessions as they finish: a JSON line each (--json, as before), a plain line each (not
    a terminal) with a progress line while a long run runs, or a line each above a bar with the
    plan's time left (a terminal)."""

    def __init__(self, output: Output, estimates: list[float | None], title: str = "running"):
        self.output, self.estimates, self.index, self.title = output, estimates, 0, title
        self.progress, self.task, self.ticker = None, None, None

    def starting(self, key: str) -> None:
        if self.progress is None:
            if not self.output.as_json:
                estimate = self.estimates[self.index] if self.index < len(self.estimates) else None
                self.ticker = Ticker(self.output, self.title, key, estimate, self.output.progress_every_s)
            return
        estimate = self.estimates[self.index]
        planned = None if estimate is None else sum(e or 0.0 for e in self.estimates[self.index + 1 :])
        self.progress.update(
            self.task,
            description=key,
            after_current=planned,
            current_estimate=estimate or 0.0,
            current_started=time.monotonic(),
        )

    def stop_ticker(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()
            self.ticker = None

    def finished(self, outcome: dict) -> None:
        self.stop_ticker()
        self.index += 1
        if self.output.as_json:
            print(json.dumps(outcome), file=sys.stderr, flush=True)
        elif self.progress is None:
            self.output.err.print(session_line(outcome), markup=False, highlight=False, soft_wrap=True)
        else:
            self.progress.console.print(session_line(outcome), markup=False, highlight=False, soft_wrap=True)
            self.progress.advance(self.task)


class Output:
    """Where and how one command prints: chosen once, from `--json` and whether stderr is a terminal."""

    def __init__(self, as_json: bool, progress_every_s: float = PROGRESS_EVERY_S):
        self.as_json, self.progress_every_s = as_json, progress_every_s
        self.out = Console(highlight=False)
        self.err = _stderr_console()

    def note(self, text: str) -> None:
        """A line for the person (not for --json readers, whose stdout stays JSON)."""
        if not self.as_json:
            self.err.print(text, markup=False, highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def sessions(self, title: str, estimates: list[float | None]):
        """`estimates`: the plan's model seconds of each session in run order (None: no estimate)."""
        reporter = Sessions(self, estimates, title)
        if self.as_json or not self.err.is_terminal or not estimates:
            try:
                yield reporter
            finally:  # a run that raised (a second Ctrl-C) leaves no ticker behind
                reporter.stop_ticker()
            return
        columns = [
            SpinnerColumn(),
            TextColumn(f"{title} [bold]{{task.description}}"),
            BarColumn(),
            MofNCompleteColumn(),
        ]
        # Dagster's step capture swaps fds 1 and 2 meanwhile: rich must not swap sys.stdout/stderr too.
        progress = Progress(
            *columns,
            TimeElapsedColumn(),
            PlanTimeLeft(),
            console=self.err,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        with progress:
            reporter.progress, reporter.task = progress, progress.add_task("", total=len(estimates), after_current=None)
            yield reporter

    def result(self, command: str, result: dict) -> None:
        if self.as_json:
            print(json.dumps(result, indent=2, default=str))
            return
        RENDER.get(command, _render_fields)(self.out, result)


# --- results as tables ---


def _value(value, limit: int = 10) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in value.items()) or "none"
    if isinstance(value, list):
        shown = ", ".join(_value(v) for v in value[:limit])
        return (shown + f", … ({len(value) - limit} more; --json lists all)" if len(value) > limit else shown) or "none"
    return str(value)


def _fields(result: dict, title: str | None = None, skip: tuple = ()) -> Table:
    table = Table(
        title=title, show_header=False, box=None, title_justify="left", title_style="bold", padding=(0, 2, 0, 0)
    )
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in result.items():
        if key not in skip:
            table.add_row(key.replace("_", " "), _value(value))
    return table


def _render_fields(console: Console, result: dict) -> None:
    console.print(_fields(result))


def _render_status(console: Console, result: dict) -> None:
    console.print(_fields(result, "Store", skip=("host_circuits", "host_speed")))
    speeds = result.get("host_speed") or {}
    if speeds:
        table = Table(
            title="Host speed (last 10 calls against the earlier ones)", title_justify="left", title_style="bold"
        )
        for name in (
            "host",
            "state",
            "slower by",
            "prompt tok/s now",
            "answer tok/s now",
            "prompt before",
            "answer before",
        ):
            table.add_column(name, no_wrap=True)
        for host, speed in speeds.items():
            table.add_row(
                host, speed["state"], f"{speed['slower_by']:.2f}x", f"{speed['prompt_tps_now']:.1f}",
                f"{speed['answer_tps_now']:.1f}", f"{speed['prompt_tps_before']:.1f}", f"{speed['answer_tps_before']:.1f}",
            )  # fmt: skip
        console.print()
        console.print(table)
    hosts = result.get("host_circuits") or {}
    if not hosts:
        return
    table = Table(title="Model hosts", title_justify="left", title_style="bold")
    for name in ("host", "circuit", "failures", "opens", "retry at"):
        table.add_column(name, no_wrap=True)
    table.add_column("last error", overflow="fold")
    for host, circuit in hosts.items():
        retry = circuit["retry_at_ms"]
        table.add_row(
            host,
            circuit["state"] + (" (probe out)" if circuit["probe_out"] else ""),
            str(circuit["consecutive_failures"]),
            str(circuit["opens"]),
            time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(retry / 1000)) if retry is not None else "—",
            circuit["last_error"] or "—",
        )
    console.print()
    console.print(table)


def _render_plan(console: Console, result: dict) -> None:
    if "resummarize" in result:
        return _render_resummary_plan(console, result)
    held = result["held_back"]
    held = f"{held['active_within_idle_window']} active within the idle window, {held['in_failure_backoff']} in failure backoff"
    console.print(_fields({**result, "held_back": held}, "Next sweep (planned, no model call)", skip=("next_sweep",)))
    sweep = result["next_sweep"]
    estimate = (
        f"{_duration(sweep['estimated_model_seconds'])} of model time, {sweep['estimated_prompt_tokens']} prompt tokens"
    )
    console.print()
    console.print(
        _fields(
            {
                "sessions": sweep["sessions"],
                "upgrades": sweep["upgrades"],
                "re-summaries": sweep["resummaries"],
                "by tier": sweep["by_route"],
                "by host": sweep["by_host"],
                "estimated": estimate,
            }
        )
    )
    if sweep["sessions_detail"]:
        table = Table()
        table.add_column("partition", overflow="fold")  # whole: it is what `archive --sessions` takes
        table.add_column("host", no_wrap=True)
        table.add_column("why this host", overflow="fold")
        for name in ("tier", "route", "prompt tokens", "model seconds"):
            table.add_column(name, justify="right" if name.endswith(("tokens", "seconds")) else "left", no_wrap=True)
        for item in sweep["sessions_detail"]:
            table.add_row(
                item["partition"],
                item["host"],
                item["host_reason"],
                item["tier"],
                item["route"],
                str(item["prompt_tokens_estimate"]),
                str(item["model_seconds_estimate"]),
            )
        console.print(table)


def _render_resummary_plan(console: Console, result: dict) -> None:
    """`plan --resummarize`: the summaries selected, what each was made with, what remaking it costs."""
    price = result["all_of_them"]
    estimate = (
        f"{_duration(price['estimated_model_seconds'])} of model time, {price['estimated_prompt_tokens']} prompt tokens"
    )
    summary = {**result, "by tier": price["by_route"], "by host": price["by_host"], "estimated": estimate}
    console.print(_fields(summary, "Re-summaries (planned, no model call)", skip=("all_of_them",)))
    if price["sessions_detail"]:
        table = Table()
        table.add_column("partition", overflow="fold")
        table.add_column("made with (model on host, code version, verdict fidelity)", overflow="fold")
        table.add_column("goes to", overflow="fold")
        for name in ("prompt tokens", "model seconds"):
            table.add_column(name, justify="right")
        for item in price["sessions_detail"]:
            was = item["was"]
            fidelity = "—" if was["fidelity"] is None else f"{was['fidelity']:.2f}"
            made = f"{was['model']} on {was['host'] or '—'}, {was['code_version'] or 'unrecorded'}, {_value(was['verdict'])} {fidelity}"
            table.add_row(
                item["partition"], made, f"{item['host']}, {item['tier']}",
                str(item["prompt_tokens_estimate"]), str(item["model_seconds_estimate"]),
            )  # fmt: skip
        console.print(table)


def _render_sweep(console: Console, result: dict) -> None:
    # Each run had its line as it finished: a drain's lists are counted here.
    counted = {k: len(v) if k in ("summary_runs", "mini_summary_runs") else v for k, v in result.items()}
    console.print(_fields(counted, skip=("runs",)))


def _render_demo(console: Console, result: dict) -> None:
    ingest = {
        k: result["ingest"][k] for k in ("files", "turns", "rejects", "sessions_touched") if k in result["ingest"]
    }
    console.print(
        _fields(
            {
                **ingest,
                "summary runs": len(result["summary_runs"]),
                "mini-summary runs": len(result["mini_summary_runs"]),
                "seconds": result["seconds"],
            },
            "Demo",
        )
    )
    console.print()
    console.print(_fields(result["status"], "Store"))
    examples = result.get("fidelity_examples") or []
    if examples:
        console.print(
            "\n[bold]Fidelity[/bold] (the share of the session's identifiers a summary names, docs/fidelity.md)"
        )
        for e in examples:
            label = f"{e['origin']} {e['source_tier']}" + (" (the reference)" if e["origin"] == "imported" else "")
            junk = f" ({e['junk']} of {e['summaries']} judged junk)" if e["junk"] else ""
            if e["title"] is None:
                console.print(f"{label}: no summary that is not junk{junk}", markup=False, soft_wrap=True)
            else:
                console.print(f"{label}: {e['fidelity']:.2f} {e['title']}{junk}", markup=False, soft_wrap=True)
    accounts = result.get("accounts") or []
    if accounts:
        junk = result.get("junk") or 0
        replaced = f"; {junk} model summar{'y' if junk == 1 else 'ies'} judged junk not shown" if junk else ""
        console.print(
            f"\n[bold]Accounts[/bold] (each session's ok summary, else its card from the session's facts; the "
            f"embedded model's summaries never lead{replaced}; `session-digest show ID` has the rest)"
        )
        for a in accounts:
            told = a["title"] if a["account"] == "summary" else a["line"]
            console.print(f"{a['session_id']} [{a['account']} {a['source_tier']}] {told}", markup=False, soft_wrap=True)
    console.print("\n[bold]Where to look[/bold]")
    for label, text in result["where_to_look"].items():  # whole lines, so a command copies as one
        console.print(f"{label}: {text}", markup=False, soft_wrap=True)


RENDER = {
    "status": _render_status,
    "plan": _render_plan,
    "sweep": _render_sweep,
    "digest": _render_sweep,
    "demo": _render_demo,
}
