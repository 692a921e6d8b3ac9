"""A circuit breaker per model host: a host that keeps failing is taken out of rotation.

A host failure is what says the host is bad, not the prompt: no answer by the deadline, a server
that cannot be reached or breaks off, an HTTP 5xx (or an error inside a 200 stream) that is not the
server's context overflow, a 200 that breaks the wire protocol, a stream that runs past the output
cap it was sent (a runaway: the server ignores `max_tokens` / `num_predict`, on every call). A prompt over the context, a reply cut at its output cap, a reply
that does not parse or a 4xx say nothing about the host and leave its circuit as it is.

States, by the clock the caller passes in (milliseconds):
- closed: calls go to the host; `failure_threshold` host failures in a row open the circuit;
- open: no calls until `retry_at_ms` (now + the backoff: `retry_base_s`, doubling with each
  re-open since the host last succeeded, up to `retry_max_s`);
- half-open: the backoff has passed; one probe run may go to the host (`probe_until_ms` marks it
  taken; a probe that never reports is presumed lost after another backoff). A success closes the
  circuit, a failure opens it again with the doubled backoff.

No Dagster or DuckDB here: the store applies `after_outcome` and `after_probe` in a transaction.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

from digest.backoff import doubling_backoff_s
from digest.model_api import HostUnreachable, MalformedReply, ModelTimeout, ProviderError, RunawayReply

CONSUMER = "model-hosts"  # the friction events' consumer, their asset_ref the host's name
ERROR_CHARS = 500  # of the last failure's text kept on the circuit


def is_host_failure(error: BaseException | None) -> bool:
    """Whether a failed call says its host is bad (see the module doc); False for no error."""
    if isinstance(error, (ModelTimeout, HostUnreachable, MalformedReply, RunawayReply)):
        return True
    # A 5xx that is the server's context overflow is a `ContextOverflow`, not a `ProviderError`.
    return isinstance(error, ProviderError) and error.status is not None and error.status >= 500


@dataclass(frozen=True)
class CircuitPolicy:
    failure_threshold: int = 3  # host failures in a row that open the circuit
    retry_base_s: float = 60.0  # the first backoff; it doubles with each re-open
    retry_max_s: float = 1800.0  # the longest backoff

    def backoff_s(self, opens: int) -> float:
        """The backoff after the `opens`-th opening since the host last succeeded (1 = the first)."""
        return doubling_backoff_s(opens, self.retry_base_s, self.retry_max_s)


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass(frozen=True)
class HostCircuit:
    host: str
    failures: int = 0  # host failures in a row
    opens: int = 0  # openings since the host last succeeded: the backoff doubles with each
    retry_at_ms: int | None = None  # None: closed
    probe_until_ms: int | None = None  # a half-open probe is out until then
    last_error: str | None = None
    changed_at_ms: int | None = None  # of the last outcome or probe

    def state(self, now_ms: int) -> CircuitState:
        if self.retry_at_ms is None:
            return CircuitState.CLOSED
        return CircuitState.OPEN if now_ms < self.retry_at_ms else CircuitState.HALF_OPEN

    def probe_out(self, now_ms: int) -> bool:
        return self.probe_until_ms is not None and now_ms < self.probe_until_ms

    def available(self, now_ms: int) -> bool:
        """Closed, or half-open with no probe out: a run may go to the host."""
        state = self.state(now_ms)
        return state == CircuitState.CLOSED or (state == CircuitState.HALF_OPEN and not self.probe_out(now_ms))


@dataclass(frozen=True)
class Transition:
    """A change of state an outcome made: the circuit opened (again) or closed."""

    before: CircuitState
    circuit: HostCircuit
    now_ms: int

    @property
    def after(self) -> CircuitState:
        return self.circuit.state(self.now_ms)

    @property
    def opened(self) -> bool:
        return self.after == CircuitState.OPEN

    @property
    def retry_in_s(self) -> float:
        return (self.circuit.retry_at_ms - self.now_ms) / 1000 if self.circuit.retry_at_ms is not None else 0.0


def after_outcome(
    circuit: HostCircuit, failed: bool, error_text: str | None, now_ms: int, policy: CircuitPolicy
) -> tuple[HostCircuit, Transition | None]:
    """The circuit after one call's outcome, and the transition it made (None: same state).

    A success closes the circuit whatever its state. A failure counts; closed, it opens the circuit
    at the threshold; half-open (the probe's, or any call's once the backoff passed), it opens it
    again with the doubled backoff; open, it only counts (a call started before the circuit opened).
    """
    before = circuit.state(now_ms)
    if not failed:
        closed = HostCircuit(circuit.host, last_error=circuit.last_error, changed_at_ms=now_ms)
        return closed, (Transition(before, closed, now_ms) if before != CircuitState.CLOSED else None)
    failures = circuit.failures + 1
    error = error_text[:ERROR_CHARS] if error_text else circuit.last_error
    counted = dataclasses.replace(circuit, failures=failures, last_error=error, changed_at_ms=now_ms)
    if before == CircuitState.OPEN or (before == CircuitState.CLOSED and failures < policy.failure_threshold):
        return counted, None
    opens = circuit.opens + 1
    opened = dataclasses.replace(
        counted, opens=opens, retry_at_ms=now_ms + int(policy.backoff_s(opens) * 1000), probe_until_ms=None
    )
    return opened, Transition(before, opened, now_ms)


def after_probe(circuit: HostCircuit, now_ms: int, policy: CircuitPolicy) -> HostCircuit:
    """A half-open circuit whose one probe run was handed out: no other run until it reports, or
    until another backoff has passed (a probe run that made no call reports nothing)."""
    until = now_ms + int(policy.backoff_s(max(1, circuit.opens)) * 1000)
    return dataclasses.replace(circuit, probe_until_ms=until, changed_at_ms=now_ms)


def opened_note(transition: Transition) -> str:
    circuit = transition.circuit
    again = " again" if transition.before == CircuitState.HALF_OPEN else ""
    return (
        f"circuit opened{again} for host {circuit.host} after {circuit.failures} consecutive failures; "
        f"next try after {transition.retry_in_s:g} s"
    )


def host_symptom(outcome: str) -> str:
    """The friction symptom of a host failure from its attempt's outcome: a host failure is a
    timeout (`timeout`, a mini summary's `timeout-inner`/`timeout-outer`), a runaway or a provider error."""
    if outcome == "runaway":
        return outcome
    return "timeout" if outcome.startswith("timeout") else "provider-error"


def circuit_status(circuit: HostCircuit, now_ms: int) -> dict:
    """A circuit as `session-digest status` shows it."""
    return {
        "state": str(circuit.state(now_ms)),
        "consecutive_failures": circuit.failures,
        "opens": circuit.opens,
        "retry_at_ms": circuit.retry_at_ms,
        "probe_out": circuit.probe_out(now_ms),
        "last_error": circuit.last_error,
    }
