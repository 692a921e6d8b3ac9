"""What a summary cost, from the attempts ledger's rows: the model-seconds of its calls split into
prompt and generation, the calls given up, its turns' mini summaries, and whether the reply was a
replay from the response cache (no model call). The ledger's totals by model, host and day are
`store.reports.cost_totals`.

The split: a streamed call's first piece marks the end of the prompt (`first_token_s`), the rest
is generation. An unstreamed call is split in proportion to its token counts at the host's
measured prompt and answer rates, when those are measured apart (`HostSpeed.separable`); else its
seconds stay unsplit (`unsplit_s`), since guessing a ratio would make the figures look measured."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from digest.pacing import HostSpeed

# The host's measured speed for (host, model); None when not measured.
Rates = Callable[[str | None, str], HostSpeed | None]


def _no_rates(host: str | None, model: str) -> HostSpeed | None:
    return None


def split_seconds(row: dict, rates: Rates = _no_rates) -> tuple[float, float] | None:
    """A finished call's (prompt, generation) seconds; None when nothing honest splits it."""
    duration = row["duration_s"] or 0.0
    first = row.get("first_token_s")
    if first is not None:
        prompt = min(first, duration)
        return prompt, duration - prompt
    speed = rates(row.get("host"), row["model"])
    if speed is None or not speed.separable or not row.get("prompt_tokens") or row.get("completion_tokens") is None:
        return None
    prompt_share = speed.prompt_s(row["prompt_tokens"])
    generation_share = row["completion_tokens"] / speed.answer_tps
    total = prompt_share + generation_share
    prompt = duration * prompt_share / total if total else 0.0
    return prompt, duration - prompt


@dataclass(frozen=True)
class SummaryCost:
    """A summary run's cost. `model_s` = `prompt_s` + `generation_s` + `unsplit_s` + `given_up_s`:
    every second the host spent on the summary's calls in the run; `mini_summaries_s` beside it."""

    prompt_s: float = 0.0
    generation_s: float = 0.0
    unsplit_s: float = 0.0  # answered calls with no first piece and no measured rates to split them
    given_up_s: float = 0.0  # calls that failed or were given up (timeout, stall, bad reply)
    mini_summaries_s: float = 0.0  # the model calls that made its turns' mini summaries, any run
    calls: int = 0  # model calls of the summary in the run (a replay is none)
    mini_summary_calls: int = 0
    cached: bool = False  # the reply was replayed from the response cache: no model call

    @property
    def model_s(self) -> float:
        return self.prompt_s + self.generation_s + self.unsplit_s + self.given_up_s

    def metadata(self) -> dict:
        """Numeric entries the UI plots, and the cache flag."""
        return {
            "cost_model_s": round(self.model_s, 3),
            "cost_prompt_s": round(self.prompt_s, 3),
            "cost_generation_s": round(self.generation_s, 3),
            "cost_unsplit_s": round(self.unsplit_s, 3),
            "cost_given_up_s": round(self.given_up_s, 3),
            "cost_mini_summaries_s": round(self.mini_summaries_s, 3),
            "cost_calls": self.calls,
            "cached": self.cached,
        }

    def log_line(self) -> str:
        """One line for the run log."""
        if self.cached and self.calls == 0:
            call = "reply from the cache, no model call"
        elif self.calls == 0:
            call = "no model call"
        else:
            call = f"model call{'s' if self.calls > 1 else ''} ({self.calls}): {self.prompt_s:.1f} s prompt, "
            call += f"{self.generation_s:.1f} s generation"
            if self.unsplit_s:
                call += f", {self.unsplit_s:.1f} s unsplit (not streamed, host speed not measured)"
            if self.given_up_s:
                call += f", {self.given_up_s:.1f} s given up"
            if self.cached:
                call += "; the reply used came from the cache"
        if self.mini_summary_calls:
            call += f"; its turns' mini summaries took {self.mini_summaries_s:.1f} s ({self.mini_summary_calls} calls)"
        return call


def summary_cost(summary_calls: Iterable[dict], mini_calls: Iterable[dict], rates: Rates = _no_rates) -> SummaryCost:
    """The cost of one summary from the ledger: `summary_calls`, its run's summary-stage attempts
    for the session; `mini_calls`, the session's mini-summary attempts. Rows carry `attempts`'
    columns (`outcome`, `duration_s`, `cached`, `first_token_s`, token counts, `host`, `model`)."""
    prompt = generation = unsplit = given_up = 0.0
    calls, cached = 0, False
    for row in summary_calls:
        if row["cached"]:
            cached = cached or row["outcome"] == "ok"
            continue
        calls += 1
        if row["outcome"] != "ok":
            given_up += row["duration_s"] or 0.0
            continue
        split = split_seconds(row, rates)
        if split is None:
            unsplit += row["duration_s"] or 0.0
        else:
            prompt, generation = prompt + split[0], generation + split[1]
    minis = [row for row in mini_calls if not row["cached"]]
    return SummaryCost(
        prompt_s=prompt,
        generation_s=generation,
        unsplit_s=unsplit,
        given_up_s=given_up,
        mini_summaries_s=sum(row["duration_s"] or 0.0 for row in minis),
        calls=calls,
        mini_summary_calls=len(minis),
        cached=cached,
    )
