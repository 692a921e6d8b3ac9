"""How long a model call may take on a busy CPU host: deadlines from the host's measured speed.

A fixed number of seconds cannot tell a slow host from a stuck one. A streamed call shows which it
is: nothing arrives while the prompt is evaluated, then the answer comes piece by piece. So each
call gets two bounds (`CallPlan`):
- a stall window: a streamed call that receives nothing for this long is stuck and given up. It is
  the prompt's expected evaluation time at the host's measured rate, times `margin`, plus a floor;
  where nothing is measured yet, the stage's configured timeout (`DIGEST_*_TIMEOUT_S`);
- a ceiling (`DIGEST_CALL_CEILING_S`): no call runs longer, however it progresses (a trickle).
A call that is not streamed (a server that refused to) shows no progress: its deadline is the
whole call's expected time, times the margin, plus the floor, within the ceiling.

A call given up is not sent again at the same deadline: each give-up in a run doubles the run's
windows (up to the ceiling), since the host has shown itself slower than the run assumed.

The host's speed comes from its own ledger (`HostSpeed.from_samples`): the prompt rate is prompt
tokens over the time to the first piece, the answer rate the answer tokens over the rest, each the
median over the host's recent calls, so a few loaded minutes do not swing it. The raw-synthesis cap
can follow that speed (`auto_raw_cap`): the largest raw prompt one call evaluates and answers in
`DIGEST_RAW_CALL_TARGET_S`.

No Dagster or DuckDB here: the store reads the samples, the callers plan and observe their calls.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from digest.circuit import is_host_failure
from digest.model_api import ChatReply, ModelStalled, ModelTimeout

# Calls of a host (newest first) its speed is measured over, and the fewest that make a measurement.
RECENT_CALLS = 50
MIN_SAMPLES = 3
# The calls "now" is judged by against the host's earlier speed, and how much slower is "slow".
NOW_CALLS = 10
SLOW_FACTOR = 2.0
# Below these a sample's interval is timer noise (a cached or a trivially short call).
MIN_INTERVAL_S = 0.05
MIN_ANSWER_TOKENS = 8
# The auto cap: never below this (a cap of a few tokens degrades every session), and it moves only
# when the freshly computed cap differs from the one in force by more than `CAP_HYSTERESIS`.
MIN_AUTO_CAP_TOKENS = 512
CAP_HYSTERESIS = 0.25
# The answer a raw summary call leaves room for: this quantile of the host's recent summary answers.
ANSWER_QUANTILE = 0.9


@dataclass(frozen=True)
class PacingPolicy:
    margin: float = 4.0  # expected seconds times this, before a call is given up
    floor_s: float = 10.0  # added to every window: a model load, a scheduler hiccup
    ceiling_s: float = 900.0  # DIGEST_CALL_CEILING_S: no call runs longer
    raw_call_target_s: float = 120.0  # DIGEST_RAW_CALL_TARGET_S: what the auto cap sizes one raw call to


@dataclass(frozen=True)
class Sample:
    """One finished call of the host, as its attempt row holds it."""

    prompt_tokens: int
    completion_tokens: int
    duration_s: float
    first_token_s: float | None  # None: not streamed


def _prompt_rate(sample: Sample) -> float | None:
    if sample.first_token_s is None or sample.first_token_s < MIN_INTERVAL_S or sample.prompt_tokens <= 0:
        return None
    return sample.prompt_tokens / sample.first_token_s


def _answer_rate(sample: Sample) -> float | None:
    if sample.first_token_s is None or sample.completion_tokens < MIN_ANSWER_TOKENS:
        return None
    answering = sample.duration_s - sample.first_token_s
    return sample.completion_tokens / answering if answering >= MIN_INTERVAL_S else None


def _blended_rate(sample: Sample) -> float | None:
    """Tokens in and out per second of a call that was not streamed: the two rates are not separable."""
    tokens = sample.prompt_tokens + sample.completion_tokens
    return tokens / sample.duration_s if sample.duration_s >= MIN_INTERVAL_S and tokens > 0 else None


@dataclass(frozen=True)
class HostSpeed:
    prompt_tps: float  # prompt tokens evaluated per second
    answer_tps: float  # answer tokens generated per second
    samples: int
    separable: bool  # measured from streamed calls; False: one blended rate from unstreamed ones

    @classmethod
    def from_samples(cls, samples: Iterable[Sample]) -> HostSpeed | None:
        """The median rates over these calls; None under `MIN_SAMPLES` usable ones."""
        samples = list(samples)
        prompt = [r for s in samples if (r := _prompt_rate(s)) is not None]
        answer = [r for s in samples if (r := _answer_rate(s)) is not None]
        if len(prompt) >= MIN_SAMPLES and len(answer) >= MIN_SAMPLES:
            return cls(statistics.median(prompt), statistics.median(answer), len(prompt), separable=True)
        blended = [r for s in samples if (r := _blended_rate(s)) is not None]
        if len(blended) >= MIN_SAMPLES:
            rate = statistics.median(blended)
            return cls(rate, rate, len(blended), separable=False)
        return None

    def prompt_s(self, prompt_tokens: int) -> float:
        return prompt_tokens / self.prompt_tps

    def expected_s(self, prompt_tokens: int, output_tokens: int) -> float:
        return self.prompt_s(prompt_tokens) + output_tokens / self.answer_tps


@dataclass(frozen=True)
class Slowdown:
    """The host now against its own earlier calls: how many times slower its calls take."""

    now: HostSpeed
    before: HostSpeed
    factor: float  # > 1: slower now

    @property
    def slow(self) -> bool:
        return self.factor >= SLOW_FACTOR


def slowdown(newest_first: list[Sample]) -> Slowdown | None:
    """The last `NOW_CALLS` calls against the ones before them; None without enough of both."""
    now = HostSpeed.from_samples(newest_first[:NOW_CALLS])
    before = HostSpeed.from_samples(newest_first[NOW_CALLS:])
    if now is None or before is None:
        return None
    # Judged on a typical call: the median prompt and answer of these samples.
    prompt = statistics.median(s.prompt_tokens for s in newest_first)
    answer = statistics.median(s.completion_tokens for s in newest_first)
    factor = now.expected_s(prompt, answer) / before.expected_s(prompt, answer)
    return Slowdown(now, before, factor)


def slowdown_status(slow: Slowdown) -> dict:
    """A host's slowdown as `session-digest status` shows it."""
    return {
        "state": "slow" if slow.slow else "as before",
        "slower_by": round(slow.factor, 2),
        "prompt_tps_now": round(slow.now.prompt_tps, 1),
        "answer_tps_now": round(slow.now.answer_tps, 1),
        "prompt_tps_before": round(slow.before.prompt_tps, 1),
        "answer_tps_before": round(slow.before.answer_tps, 1),
    }


# --- one call's bounds --------------------------------------------------------------------------


def is_given_up(error: BaseException | None) -> bool:
    """A call the client gave up on: stalled, or cut at its deadline or ceiling."""
    return isinstance(error, ModelTimeout)


def was_progressing(error: BaseException | None) -> bool:
    """A streamed call still receiving its answer when its ceiling came: slow, not stuck."""
    return isinstance(error, ModelTimeout) and not isinstance(error, ModelStalled) and error.progressing


def first_token_of(reply: ChatReply | None, error: BaseException | None) -> float | None:
    """When the call's first piece came (a streamed call's prompt time), from its reply or its error."""
    if reply is not None:
        return reply.first_token_s
    return getattr(error, "first_token_s", None)


@dataclass(frozen=True)
class CallPlan:
    timeout_s: float  # the wall-clock ceiling handed to the client
    stall_s: float | None  # a streamed call's stall window; None for a call that is not streamed
    measured: bool  # from the host's measured speed; False: the stage's configured timeout
    at_ceiling: bool  # `timeout_s` is the policy's ceiling: the call could be given no longer

    @property
    def give_up_s(self) -> float:
        """When a call that shows no progress is given up."""
        return self.stall_s if self.stall_s is not None else self.timeout_s

    def host_failure(self, error: BaseException | None) -> bool:
        """Whether the call's failure says its host is bad (`digest.circuit`): slow is not down.

        A streamed call that stalled is stuck; one still progressing at its ceiling is slow. A call
        that was not streamed and was cut at a deadline short of the ceiling was only slower than
        the run assumed (the run stretches its windows); cut at the ceiling, it is stuck."""
        if was_progressing(error):
            return False
        if isinstance(error, ModelTimeout) and not isinstance(error, ModelStalled) and not self.at_ceiling:
            return False
        return is_host_failure(error)


@dataclass
class Pacer:
    """One run's deadlines on one host: its measured speed, updated by each call the run finishes,
    and how often the run has had to stretch its windows.

    `first_timeout_s`: the stage's configured timeout, the window where nothing is measured yet."""

    policy: PacingPolicy
    first_timeout_s: float
    speed: HostSpeed | None = None
    stretches: int = 0  # give-ups in this run: each doubles the windows
    _samples: list[Sample] = field(default_factory=list)  # newest first: the ledger's, then this run's

    @classmethod
    def fixed(cls, timeout_s: float) -> Pacer:
        """Every call at `timeout_s`, never stretched: the pacing of a caller that measures nothing."""
        return cls(PacingPolicy(ceiling_s=timeout_s), timeout_s)

    @classmethod
    def for_host(cls, policy: PacingPolicy, first_timeout_s: float, newest_first: list[Sample]) -> Pacer:
        pacer = cls(policy, first_timeout_s, _samples=list(newest_first[:RECENT_CALLS]))
        pacer.speed = HostSpeed.from_samples(pacer._samples)
        return pacer

    def _stretched(self, seconds: float) -> float:
        return min(self.policy.ceiling_s, seconds * 2 ** min(self.stretches, 32))

    def plan(self, prompt_tokens: int, output_tokens: int, streaming: bool) -> CallPlan:
        ceiling = self.policy.ceiling_s
        if self.speed is None:
            window = self._stretched(self.first_timeout_s)
            measured = False
        elif streaming:
            window = self._stretched(self.policy.margin * self.speed.prompt_s(prompt_tokens) + self.policy.floor_s)
            measured = True
        else:
            expected = self.speed.expected_s(prompt_tokens, output_tokens)
            window = self._stretched(self.policy.margin * expected + self.policy.floor_s)
            measured = True
        if streaming:
            return CallPlan(ceiling, window, measured, at_ceiling=True)
        return CallPlan(window, None, measured, at_ceiling=window >= ceiling)

    def observe(self, sample: Sample | None, error: BaseException | None) -> None:
        """A finished call's figures (None for a cached reply or a failure), or its error."""
        if sample is not None:
            self._samples = [sample, *self._samples][:RECENT_CALLS]
            self.speed = HostSpeed.from_samples(self._samples) or self.speed
        elif is_given_up(error) and not was_progressing(error):
            self.stretches += 1


# --- the raw cap that follows the host ------------------------------------------------------------


@dataclass(frozen=True)
class AutoCap:
    cap_tokens: int  # the cap in force
    computed_tokens: int  # what the speed measured now gives, before the hysteresis
    speed: HostSpeed


def answer_room(summary_answers: list[int], default_tokens: int) -> int:
    """The answer a raw summary call leaves room for: the `ANSWER_QUANTILE` of the host's recent
    summary answers (linear interpolation), else `default_tokens` until it has some."""
    answers = sorted(a for a in summary_answers if a > 0)
    if not answers:
        return default_tokens
    rank = (len(answers) - 1) * ANSWER_QUANTILE
    low, high = math.floor(rank), math.ceil(rank)
    return round(answers[low] + (answers[high] - answers[low]) * (rank - low))


def computed_raw_cap(speed: HostSpeed, target_s: float, answer_tokens: int, bound_tokens: int) -> int:
    """The largest raw prompt this host evaluates, and answers `answer_tokens`, in `target_s`;
    at least `MIN_AUTO_CAP_TOKENS`, never above `bound_tokens` (the safe band and the context)."""
    prompt_s = target_s - answer_tokens / speed.answer_tps
    cap = math.floor(max(0.0, prompt_s) * speed.prompt_tps)
    return max(MIN_AUTO_CAP_TOKENS, min(bound_tokens, cap))


def next_auto_cap(in_force: int | None, computed: int) -> int:
    """The cap in force after a fresh computation: it moves only when they differ by more than
    `CAP_HYSTERESIS` of the one in force, so a few loaded minutes do not swing it."""
    if in_force is None or abs(computed - in_force) > CAP_HYSTERESIS * in_force:
        return computed
    return in_force
