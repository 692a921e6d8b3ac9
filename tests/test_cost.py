"""What a summary cost, from the ledger's rows (`digest.cost`), and the ledger's totals by model,
host and day over a real DuckDB file (`store.reports.cost_totals`, shown by `status`)."""

from __future__ import annotations

from digest.attempts import Attempt
from digest.cost import SummaryCost, split_seconds, summary_cost
from digest.pacing import HostSpeed


def _row(outcome="ok", duration_s=10.0, cached=False, first_token_s=None, prompt_tokens=1000, completion_tokens=100):
    return {
        "outcome": outcome, "duration_s": duration_s, "cached": cached, "first_token_s": first_token_s,
        "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "host": "gpu", "model": "m",
    }  # fmt: skip


def test_a_streamed_call_is_split_at_its_first_piece():
    assert split_seconds(_row(duration_s=10.0, first_token_s=7.5)) == (7.5, 2.5)


def test_an_unstreamed_call_is_split_at_the_hosts_measured_rates_else_left_unsplit():
    # 1,000 prompt tokens at 500/s (2 s) and 100 answer tokens at 25/s (4 s): a third is prompt.
    speed = HostSpeed(prompt_tps=500.0, answer_tps=25.0, samples=5, separable=True)
    prompt, generation = split_seconds(_row(duration_s=9.0), lambda host, model: speed)
    assert (round(prompt, 6), round(generation, 6)) == (3.0, 6.0)
    blended = HostSpeed(prompt_tps=100.0, answer_tps=100.0, samples=5, separable=False)
    assert split_seconds(_row(), lambda host, model: blended) is None
    assert split_seconds(_row()) is None


def test_the_cost_adds_up_the_runs_calls_given_up_ones_and_the_turns_mini_summaries():
    calls = [_row("timeout", duration_s=30.0), _row(duration_s=12.0, first_token_s=8.0), _row(duration_s=5.0)]
    minis = [_row(duration_s=1.5), _row(duration_s=2.5), _row(duration_s=0.0, cached=True)]
    cost = summary_cost(calls, minis)
    assert cost == SummaryCost(
        prompt_s=8.0, generation_s=4.0, unsplit_s=5.0, given_up_s=30.0, mini_summaries_s=4.0, calls=3,
        mini_summary_calls=2, cached=False,
    )  # fmt: skip
    assert cost.model_s == 47.0
    assert cost.metadata()["cost_model_s"] == 47.0
    line = cost.log_line()
    assert "8.0 s prompt, 4.0 s generation" in line and "30.0 s given up" in line and "5.0 s unsplit" in line


def test_a_replayed_reply_is_no_model_call():
    cost = summary_cost([_row(duration_s=0.0, cached=True)], [])
    assert cost.cached and cost.calls == 0 and cost.model_s == 0
    assert cost.metadata()["cached"] is True
    assert cost.log_line() == "reply from the cache, no model call"


def test_cost_totals_by_model_host_and_day(tmp_path, new_store):
    store = new_store(tmp_path / "digest.duckdb")

    def attempt(model, host, outcome="ok", duration_s=10.0, cached=False):
        a = Attempt("s1", "session-summary", "raw", 100, 25, outcome, duration_s, model, cached=cached, host=host)
        store.attempts.record_attempt(a, "run-1")

    attempt("small", "gpu")
    attempt("small", "gpu", outcome="timeout", duration_s=30.0)
    attempt("small", "gpu", duration_s=0.0, cached=True)
    attempt("small", "cpu", duration_s=4.0)
    attempt("big", "gpu", duration_s=60.0)
    store.query("UPDATE attempts SET created_at = created_at - INTERVAL 10 DAY WHERE model = 'big'")
    totals = store.reports.cost_totals(30)
    days = sorted({t["day"] for t in totals})
    assert len(days) == 2
    assert [(t["model"], t["host"], t["day"]) for t in totals] == [
        ("big", "gpu", days[0]), ("small", "cpu", days[1]), ("small", "gpu", days[1])
    ]  # fmt: skip
    gpu = totals[2]
    assert (gpu["model_seconds"], gpu["calls"], gpu["given_up"], gpu["given_up_seconds"], gpu["cached"]) == (
        40.0,
        2,
        1,
        30.0,
        1,
    )
    # status shows the last week: the 10-day-old calls are not in it.
    assert [t["model"] for t in store.reports.status()["cost_last_7_days"]] == ["small", "small"]
