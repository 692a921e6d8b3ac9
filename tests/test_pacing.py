"""Deadlines from the host's measured speed (`digest.pacing`): the rates, each call's plan, the
stretch after a give-up, the circuit's rule that slow is not down, and the auto raw cap with its
hysteresis on a ledger in a real DuckDB file."""

from __future__ import annotations

import dataclasses

import pytest

from assets.sessions import summary_metadata
from digest.attempts import Attempt
from digest.hosts import Fleet, HostSpec
from digest.model_api import ModelStalled, ModelTimeout, ProviderError
from digest.pacing import (
    CAP_HYSTERESIS,
    MIN_AUTO_CAP_TOKENS,
    CallPlan,
    HostSpeed,
    Pacer,
    PacingPolicy,
    Sample,
    computed_raw_cap,
    next_auto_cap,
    slowdown,
)
from digest.synthesis import summarize_session
from resources.model_clients import OpenAIChatClient
from resources.store import RunLedger
from tests.conftest import make_turns
from tests.model_server import Behaviour, ModelServer

POLICY = PacingPolicy(margin=4.0, floor_s=10.0, ceiling_s=900.0, raw_call_target_s=120.0)


def streamed(prompt_tokens=1000, answer_tokens=100, prompt_tps=100.0, answer_tps=10.0) -> Sample:
    first = prompt_tokens / prompt_tps
    return Sample(prompt_tokens, answer_tokens, first + answer_tokens / answer_tps, first)


def server_error(status: int) -> ProviderError:
    error = ProviderError(f"HTTP {status}")
    error.status = status
    return error


def timeout(progressing: bool) -> ModelTimeout:
    error = ModelTimeout("cut at the ceiling")
    error.progressing = progressing
    return error


# --- the measured rates ---------------------------------------------------------------------------


def test_streamed_calls_separate_the_prompt_rate_from_the_answer_rate():
    speed = HostSpeed.from_samples([streamed(prompt_tps=200.0, answer_tps=8.0)] * 3)
    assert speed.separable and speed.samples == 3
    assert speed.prompt_tps == pytest.approx(200.0) and speed.answer_tps == pytest.approx(8.0)
    assert speed.expected_s(2000, 80) == pytest.approx(10.0 + 10.0)


def test_the_median_keeps_one_loaded_call_from_swinging_the_rates():
    calls = [streamed(prompt_tps=100.0)] * 4 + [streamed(prompt_tps=5.0)]
    assert HostSpeed.from_samples(calls).prompt_tps == pytest.approx(100.0)


def test_unstreamed_calls_give_one_blended_rate_and_too_few_give_none():
    blind = [Sample(900, 100, 10.0, None)] * 3
    speed = HostSpeed.from_samples(blind)
    assert not speed.separable and speed.prompt_tps == speed.answer_tps == pytest.approx(100.0)
    assert HostSpeed.from_samples(blind[:2]) is None


def test_a_host_slower_than_its_own_earlier_calls_is_slow():
    newest_first = [streamed(prompt_tps=20.0, answer_tps=2.0)] * 10 + [streamed()] * 20
    slow = slowdown(newest_first)
    assert slow.slow and slow.factor == pytest.approx(5.0)
    assert not slowdown([streamed()] * 30).slow
    assert slowdown([streamed()] * 10) is None  # nothing earlier to compare with


# --- one call's plan ------------------------------------------------------------------------------


def test_unmeasured_a_streamed_call_stalls_at_the_configured_timeout_under_the_ceiling():
    plan = Pacer(POLICY, first_timeout_s=20.0).plan(400, 128, streaming=True)
    assert plan == CallPlan(timeout_s=900.0, stall_s=20.0, measured=False, at_ceiling=True)


def test_measured_the_stall_window_is_the_prompts_expected_time_times_the_margin_plus_the_floor():
    pacer = Pacer.for_host(POLICY, 20.0, [streamed(prompt_tps=100.0)] * 5)
    plan = pacer.plan(500, 128, streaming=True)
    assert plan.stall_s == pytest.approx(4.0 * 5.0 + 10.0) and plan.timeout_s == 900.0


def test_measured_an_unstreamed_call_gets_the_whole_calls_expected_time():
    pacer = Pacer.for_host(POLICY, 20.0, [streamed(prompt_tps=100.0, answer_tps=10.0)] * 5)
    plan = pacer.plan(500, 100, streaming=False)
    assert plan.stall_s is None and plan.timeout_s == pytest.approx(4.0 * (5.0 + 10.0) + 10.0)
    assert not plan.at_ceiling


def test_each_give_up_doubles_the_windows_up_to_the_ceiling():
    pacer = Pacer(PacingPolicy(ceiling_s=50.0), first_timeout_s=20.0)
    windows = []
    for _ in range(3):
        windows.append(pacer.plan(400, 128, streaming=False).timeout_s)
        pacer.observe(None, ModelTimeout("cut"))
    assert windows == [20.0, 40.0, 50.0]
    assert pacer.plan(400, 128, streaming=False).at_ceiling


def test_a_call_progressing_at_its_ceiling_or_failing_otherwise_does_not_stretch():
    pacer = Pacer(POLICY, first_timeout_s=20.0)
    pacer.observe(None, timeout(progressing=True))
    pacer.observe(None, ProviderError("HTTP 500"))
    assert pacer.stretches == 0


def test_a_finished_call_measures_the_host_for_the_rest_of_the_run():
    pacer = Pacer(POLICY, first_timeout_s=2.0)
    assert not pacer.plan(400, 128, streaming=False).measured
    for _ in range(3):
        pacer.observe(Sample(400, 50, 3.0, None), None)
    plan = pacer.plan(400, 128, streaming=False)
    # 450 tokens in 3 s: 150 a second, so 400 + 128 tokens are expected in 3.52 s.
    assert plan.measured and plan.timeout_s == pytest.approx(4.0 * 528 / 150 + 10.0)


def test_the_fixed_pacer_is_the_configured_timeout_and_never_stretches():
    pacer = Pacer.fixed(5.0)
    pacer.observe(None, ModelTimeout("cut"))
    assert pacer.plan(400, 128, streaming=True) == CallPlan(5.0, 5.0, measured=False, at_ceiling=True)


def test_an_attempt_is_a_speed_sample_only_when_the_server_finished_it():
    ok = Attempt("s", "mini-summary", "turn", 1600, 40, "ok", 2.0, "m", 400, 50, first_token_s=0.5)
    assert ok.speed_sample() == Sample(400, 50, 2.0, 0.5)
    # A count past belief for 1600 bytes (1 token, or 4 a byte) is no count: the estimate stands in.
    for lie in (1, 6400):
        lying = dataclasses.replace(ok, prompt_tokens=lie)
        assert lying.speed_sample() == Sample(40, 50, 2.0, 0.5)
    assert Attempt("s", "mini-summary", "turn", 100, 40, "timeout", 2.0, "m").speed_sample() is None
    cached = Attempt("s", "mini-summary", "turn", 100, 40, "ok", 0.0, "m", 400, 50, cached=True)
    assert cached.speed_sample() is None
    # A server that sent no counts: the estimate stands in for the prompt, the answer is unknown.
    uncounted = Attempt("s", "mini-summary", "turn", 100, 40, "ok", 2.0, "m", first_token_s=0.5)
    assert uncounted.speed_sample() == Sample(40, 0, 2.0, 0.5)


# --- slow is not down -----------------------------------------------------------------------------


def test_slow_is_not_down():
    streaming = CallPlan(900.0, 30.0, measured=True, at_ceiling=True)
    assert streaming.host_failure(ModelStalled("nothing for 30 s"))
    assert not streaming.host_failure(timeout(progressing=True))
    assert streaming.host_failure(timeout(progressing=False))  # at the ceiling, and nothing coming
    assert streaming.host_failure(server_error(503))
    assert not streaming.host_failure(server_error(400))
    assert not streaming.host_failure(None)
    blind = CallPlan(60.0, None, measured=True, at_ceiling=False)
    assert not blind.host_failure(timeout(progressing=False)), "cut short of the ceiling: slower than assumed"
    assert CallPlan(900.0, None, measured=True, at_ceiling=True).host_failure(timeout(progressing=False))


# --- the auto raw cap -------------------------------------------------------------------------------


def test_the_auto_cap_fits_one_raw_call_in_the_target():
    speed = HostSpeed(prompt_tps=50.0, answer_tps=5.0, samples=10, separable=True)
    # 120 s less 300 answer tokens at 5 a second leaves 60 s of prompt: 3000 tokens.
    assert computed_raw_cap(speed, 120.0, 300, 6144) == 3000
    assert computed_raw_cap(speed, 120.0, 300, 2048) == 2048, "never above the safe band"
    assert computed_raw_cap(speed, 30.0, 300, 6144) == MIN_AUTO_CAP_TOKENS


def test_the_cap_moves_only_past_the_hysteresis():
    assert next_auto_cap(None, 3000) == 3000
    assert next_auto_cap(3000, int(3000 * (1 + CAP_HYSTERESIS))) == 3000
    assert next_auto_cap(3000, 2000) == 2000


def _record(store, host, samples: list[Sample], stage="mini-summary"):
    for sample in samples:
        store.attempts.record_attempt(
            Attempt(
                "s", stage, "turn", sample.prompt_tokens * 4, sample.prompt_tokens, "ok", sample.duration_s,
                "qwen", sample.prompt_tokens, sample.completion_tokens, host=host, first_token_s=sample.first_token_s,
            )
        )  # fmt: skip


def _fleet(raw_cap_auto: bool = True) -> Fleet:
    host = HostSpec("cpu", "ollama", None, "qwen", 16384, 12288, 8192, 1, None, raw_cap_auto=raw_cap_auto)
    return Fleet((host,), max_output_tokens=1024, timeout_s=180.0, raw_call_target_s=120.0)


def test_an_auto_cap_follows_the_hosts_ledger_with_hysteresis(store):
    fleet = _fleet()
    limits = fleet.measured_limits(store, "cpu")
    assert (limits.raw_cap_tokens, limits.raw_cap_source) == (8192, "auto-unmeasured")

    _record(store, "cpu", [streamed(prompt_tps=50.0, answer_tps=5.0, answer_tokens=300)] * 5, stage="session-summary")
    limits = fleet.measured_limits(store, "cpu")
    # 120 s less 300 answer tokens at 5 a second leaves 60 s of prompt at 50 a second.
    assert limits.raw_cap_source == "auto" and limits.raw_cap_tokens == 3000

    # A few loaded calls: the median moves a little, the cap in force not at all.
    _record(store, "cpu", [streamed(prompt_tps=40.0, answer_tps=4.0, answer_tokens=300)] * 4, stage="session-summary")
    assert fleet.measured_limits(store, "cpu").raw_cap_tokens == 3000

    # The host is lastingly twice as slow: the cap follows.
    _record(store, "cpu", [streamed(prompt_tps=25.0, answer_tps=5.0, answer_tokens=300)] * 40, stage="session-summary")
    assert fleet.measured_limits(store, "cpu").raw_cap_tokens == 1500


def test_a_host_whose_server_sends_no_counts_is_measured_from_the_estimates(store):
    for _ in range(3):
        store.attempts.record_attempt(
            Attempt("s", "mini-summary", "turn", 1200, 400, "ok", 4.0, "qwen", host="cpu", first_token_s=2.0)
        )
    speed = store.speed.host_speed("cpu", "qwen")
    # No answer rate: the whole call is charged to the prompt, 400 tokens in 4 s.
    assert speed.prompt_tps == pytest.approx(100.0) and not speed.separable


def test_the_store_shows_a_host_slower_than_its_earlier_calls(store):
    _record(store, "cpu", [streamed(prompt_tps=100.0, answer_tps=10.0)] * 30)
    assert not store.speed.host_slowdown("cpu", "qwen").slow
    _record(store, "cpu", [streamed(prompt_tps=30.0, answer_tps=3.0)] * 10)
    assert store.speed.host_slowdown("cpu", "qwen").factor == pytest.approx(10 / 3)


def test_a_pinned_cap_ignores_the_ledger(store):
    _record(store, "cpu", [streamed(prompt_tps=50.0, answer_tps=5.0)] * 5)
    limits = _fleet(raw_cap_auto=False).measured_limits(store, "cpu")
    assert (limits.raw_cap_tokens, limits.raw_cap_source) == (8192, "pinned")


def test_a_summary_records_that_its_cap_followed_the_host(store):
    _record(store, "cpu", [streamed(prompt_tps=50.0, answer_tps=5.0, answer_tokens=300)] * 5, stage="session-summary")
    limits = _fleet().measured_limits(store, "cpu")
    with ModelServer(lambda received: Behaviour.reply()) as server:
        client = OpenAIChatClient(server.url, "qwen", schema_style="json_object")
        result = summarize_session(make_turns("auto-cap", 3), client, limits, RunLedger(store, "run"))
    store.summaries.write_summary(result.summary, run_id="run", host="cpu")
    row = store.summaries.summary_row(result.summary.session_id)
    assert (row["raw_cap_tokens"], row["raw_cap_source"]) == (3000, "auto")
    assert summary_metadata(row)["raw_cap_source"] == "auto"
