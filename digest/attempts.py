"""A model call's row in the ledger (`attempts`): what it sent, how it ended, and how long it took;
written before the call, so a run killed during it still leaves the call, and finished after it.
Summaries, mini summaries and graph chunks all record their calls this way."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from digest.circuit import is_host_failure
from digest.friction import classify_error
from digest.model_api import ChatReply
from digest.pacing import CallPlan, Sample, first_token_of
from digest.tokens import plausible_prompt_tokens

# 40% of the estimate most likely cut the prompt (Ollama truncates silently).
TRUNCATION_RATIO = 0.4
# The stage a call belongs to (`attempts.stage`).
SUMMARY_STAGE = "session-summary"
MINI_SUMMARY_STAGE = "mini-summary"
GRAPH_STAGE = "graph"
# An attempt's outcome while its call runs: the row is written before the call, so a run killed
# during it leaves the call in the ledger.
IN_FLIGHT = "in-flight"
# The call's run died or was stopped during it. Not a host failure: a kill says nothing of the host.
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Attempt:
    session_id: str
    stage: str
    tier: str
    prompt_bytes: int
    tokens_estimate: int
    outcome: str  # "ok" or the friction symptom
    duration_s: float
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error_text: str | None = None
    cached: bool = False  # a replay from the response cache, not a model call
    host: str | None = None  # the model host that answered (DIGEST_MODEL_HOSTS names them)
    host_failure: bool = False  # the error says the host is bad, not the prompt (`digest.circuit`)
    first_token_s: float | None = None  # a streamed call's time to its first piece: the prompt's time
    deadline_s: float | None = None  # the longest the call may run: an interrupted call spent at most this

    @property
    def suspected_truncation(self) -> bool:
        return self.prompt_tokens is not None and self.prompt_tokens < TRUNCATION_RATIO * self.tokens_estimate

    def speed_sample(self) -> Sample | None:
        """The call's figures as a measure of its host's speed; None for a failure or a replay from
        the response cache."""
        if self.outcome != "ok" or self.cached:
            return None
        # A server that sends no counts: the estimate (an over-count, so the rate errs slow) and
        # no answer rate (its time is charged to the prompt). A count past belief for the prompt's
        # bytes is no count (`digest.tokens.plausible_prompt_tokens`).
        counted = self.prompt_tokens if plausible_prompt_tokens(self.prompt_bytes, self.prompt_tokens) else None
        return Sample(counted or self.tokens_estimate, self.completion_tokens or 0, self.duration_s, self.first_token_s)


class Ledger(Protocol):
    """Where attempts and friction go as they happen (DuckDB in production, short writes)."""

    def start_attempt(self, attempt: Attempt) -> int | None:
        """Write a call's attempt before the call (outcome `in-flight`); its row's id, for `record_attempt`."""
        ...

    def record_attempt(self, attempt: Attempt, started: int | None = None) -> None:
        """Write a call's attempt as it ended: the row `start_attempt` wrote, finished; else a new row."""
        ...


class Estimator(Protocol):
    """What sizes a prompt in tokens (`digest.synthesis.Limits`)."""

    def estimate_tokens(self, text: str) -> int: ...


def in_flight_attempt(
    session_id: str, stage: str, tier: str, prompt: str, limits: Estimator, model: str, deadline_s: float
) -> Attempt:
    """A call's attempt as written before the call: what it sends and the longest it may run."""
    return Attempt(
        session_id=session_id,
        stage=stage,
        tier=tier,
        prompt_bytes=len(prompt.encode("utf-8")),
        tokens_estimate=limits.estimate_tokens(prompt),
        outcome=IN_FLIGHT,
        duration_s=0.0,
        model=model,
        deadline_s=deadline_s,
    )


@contextmanager
def ledgered_call(ledger: Ledger, in_flight: Attempt) -> Iterator[int | None]:
    """The call's attempt in the ledger before the call, so a run killed during it leaves the row
    (closed as `interrupted` once the run is found dead, `pipelines/interrupted_runs.py`). Yields the
    row's id, for `record_attempt`. Anything the caller does not catch (the run terminated from the
    UI, a bug) finishes the row as `interrupted` with the time spent, then goes on up."""
    started = ledger.start_attempt(in_flight)
    began = time.monotonic()
    try:
        yield started
    except BaseException as exc:
        stopped = dataclasses.replace(
            in_flight,
            outcome=INTERRUPTED,
            duration_s=time.monotonic() - began,
            error_text=f"the run stopped during the call: {type(exc).__name__}: {exc}"[:2000],
        )
        ledger.record_attempt(stopped, started)
        raise


def call_attempt(
    in_flight: Attempt,
    reply: ChatReply | None,
    error: BaseException | None,
    where: str = "",
    plan: CallPlan | None = None,
    *,
    outcome: str | None = None,
    note: str | None = None,
) -> Attempt:
    """The ledger row of one model call, whatever its end (a reply, a bad reply, or no reply): the
    row written before the call (`in_flight_attempt`), finished. `where` prefixes the error text
    (e.g. which chunk); `plan`, the call's pacing, decides whether a failure is the host's (without
    one, by the error alone). A caller that names the outcome more finely than `classify_error`
    (a mini summary's causes) passes it, and `note` is the row's text when no error says more (a
    reply that came empty, or cut but kept)."""
    said = error if error is not None else note
    return dataclasses.replace(
        in_flight,
        outcome=outcome or ("ok" if error is None else classify_error(error)),
        duration_s=reply.duration_s if reply else getattr(error, "duration_s", 0.0),
        prompt_tokens=reply.prompt_tokens if reply else None,
        completion_tokens=reply.completion_tokens if reply else None,
        cached=reply is not None and reply.cached,
        error_text=None if said is None else f"{where}{said}"[:2000],
        host_failure=plan.host_failure(error) if plan is not None else is_host_failure(error),
        first_token_s=first_token_of(reply, error),
    )
