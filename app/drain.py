"""`session-digest sweep --drain` (and `demo`): what the sensors would do, run now, in their order:
every pending session's first summary, then the mini-summary backfill of the sessions headed for the
degraded path, then the upgrades their new coverage makes due and the re-summaries asked for; again
while the backfill makes progress. A line per finished run, and a progress line while a long one runs
(`app.console`). The count and the model-time budget hold for the whole drain, not a batch each."""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.console import Output
from app.runs import dagster_instance, model_served, refresh_backlog, run_errors, run_partitions, sweep
from app.stopping import stop_requested
from digest.scheduling import now_ms
from digest.settings import Settings
from resources.store import open_store


@dataclass
class DrainBudget:
    """What a drain may still launch: `runs` (None: no count) and `model_seconds` (None: no bound),
    charged with each run's measured seconds as it finishes (on a model host a run's time is its
    model's). A batch is chosen within what is left, and takes at least one session however large,
    so a session bigger than the budget is not starved for ever."""

    runs: int | None
    model_seconds: float | None
    spent_runs: int = 0
    spent_s: float = 0.0

    def runs_left(self) -> int | None:
        return None if self.runs is None else max(0, self.runs - self.spent_runs)

    def seconds_left(self) -> float | None:
        return None if self.model_seconds is None else max(0.0, self.model_seconds - self.spent_s)

    def spent(self) -> str | None:
        """Why nothing more may run, or None."""
        if self.runs_left() == 0:
            return f"the drain's limit of {self.runs} runs is reached"
        if self.seconds_left() == 0:
            return f"the drain's model-time budget of {self.model_seconds:.0f}s is spent"
        return None

    def charge(self, outcomes: list[dict]) -> None:
        launched = [o for o in outcomes if o.get("run_id")]
        self.spent_runs += len(launched)
        self.spent_s += sum(o.get("seconds", 0.0) for o in launched)


def fill_degraded_mini_summaries(settings: Settings, output: Output, budget: DrainBudget) -> list[dict]:
    """What `mini_summary_sensor` launches in turn, for the sessions headed for the degraded path
    (their mini summaries reach their summary; no backoff is ignored): one run each, each within its
    own model-time budget, while the drain's lasts."""
    from dagster import RunRequest

    store = open_store(settings.db_path)
    keys = store.mini_summaries.pending_degraded_mini_summary_keys(settings.fleet.measured_limits(store), now_ms())
    outcomes = []
    for key in keys:
        if budget.spent() or stop_requested():
            break
        ran = run_partitions(
            settings, dagster_instance(), store, "fill_mini_summaries", [RunRequest(partition_key=key)],
            "turn_mini_summaries", output, [settings.mini_summaries.budget_s],
        )  # fmt: skip
        budget.charge(ran)
        outcomes += ran
    return outcomes


def _sweeps(settings: Settings, output: Output, budget: DrainBudget, first_only: bool) -> list[dict]:
    """Budgeted sweeps, one after another, until one launches no run."""
    outcomes = []
    while not budget.spent() and not stop_requested():
        limit = budget.runs_left()
        swept = sweep(
            settings,
            settings.sweep.max_sessions if limit is None else min(limit, settings.sweep.max_sessions),
            output,
            model_seconds=budget.seconds_left(),
            first_only=first_only,
        )
        budget.charge(swept["runs"])
        outcomes += swept["runs"]
        if not any(o.get("run_id") for o in swept["runs"]):  # nothing launched (or nothing left to do)
            break
    return outcomes


def drain(settings: Settings, output: Output, limit: int | None = None, model_seconds: float | None = None) -> dict:
    """The backlog's runs now, in the sensors' order, until nothing is left, the budget is spent or a
    signal stops it (`app.stopping`): `limit` runs and `model_seconds` of model time in all."""
    started = time.monotonic()
    budget = DrainBudget(limit, model_seconds)
    summary_runs, mini_summary_runs = [], []
    # One embedded server for the whole drain (the sweeps and backfill runs in it find its URL set).
    with model_served(settings, output) as settings:
        summary_runs += _sweeps(settings, output, budget, first_only=True)
        while not budget.spent() and not stop_requested():
            filled = fill_degraded_mini_summaries(settings, output, budget)
            mini_summary_runs += filled
            # Upgrades the new coverage made due, then re-summaries asked for (and any session new since).
            later = _sweeps(settings, output, budget, first_only=False)
            summary_runs += later
            if not later and not any(run.get("mini_summaries") for run in filled):  # none left, or no progress
                break
    return {
        "backlog": refresh_backlog(settings, dagster_instance(), open_store(settings.db_path)),
        "summarized": sum(o["success"] and "source_tier" in o for o in summary_runs),
        "mini_summaries": sum(o.get("mini_summaries") or 0 for o in mini_summary_runs),
        "failed": sum(not o["success"] for o in summary_runs + mini_summary_runs),
        "run_errors": run_errors(summary_runs + mini_summary_runs),
        "stopped": stopped_by(budget),
        "seconds": round(time.monotonic() - started, 1),
        # Each run had its line as it finished.
        "summary_runs": summary_runs,
        "mini_summary_runs": mini_summary_runs,
    }


def stopped_by(budget: DrainBudget) -> str:
    """Why the drain ended: a signal, its budget, or nothing left to do now."""
    signal_name = stop_requested()
    if signal_name:
        return f"{signal_name}: the run in hand was interrupted, nothing more launched"
    return budget.spent() or "nothing left to do now (what waits is in `plan`)"
