"""Friction: what went wrong between a consumer and the model, classified as the original does.

Kept durable in DuckDB (the original held it in process memory for an hour). One addition to the
original's symptoms: `provider-error` for a server that is down, answers 5xx or breaks its wire
protocol, which the original would misfile as `parse-failure`. The original classified by regexes
over the error message; that message quotes the model's reply, so a reply mentioning "timeout"
passed for a timeout. Here the error's type decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from digest.model_api import ContextOverflow, ModelError, ModelTimeout, OutputLimitExceeded, RunawayReply


class Symptom(StrEnum):
    CONTEXT_OVERFLOW = "context-overflow"
    PARSE_FAILURE = "parse-failure"
    TOKEN_BUDGET_EXCEEDED = "token-budget-exceeded"
    SEMANTIC_CONFUSION = "semantic-confusion"
    TIMEOUT = "timeout"
    SIZE_PRECHECK_SKIP = "size-precheck-skip"
    PROVIDER_ERROR = "provider-error"
    RUNAWAY = "runaway"  # ours: a streamed reply past its output cap, which the server ignored
    # Ours: a summary run raised on its session's data (a bug, or data the readers let through),
    # not a model call's failure: the same data fails the same way on every sweep.
    RUN_ERROR = "run-error"


class EmissionPoint(StrEnum):
    PRE_INVOCATION = "pre-invocation"  # the prompt was kept from the model
    POST_INVOCATION_FAILURE = "post-invocation-failure"


# The same input fails the same way: surfaced at once in the report, and undigestible at once.
DETERMINISTIC_SYMPTOMS = frozenset({Symptom.SIZE_PRECHECK_SKIP, Symptom.CONTEXT_OVERFLOW})
SUGGESTION_KIND = {
    Symptom.SIZE_PRECHECK_SKIP: "compress-payload",
    Symptom.CONTEXT_OVERFLOW: "compress-payload",
    Symptom.TOKEN_BUDGET_EXCEEDED: "compress-payload",
    Symptom.PARSE_FAILURE: "schema-repair",
    Symptom.SEMANTIC_CONFUSION: "extract-anchor",
    Symptom.TIMEOUT: "unknown",
    Symptom.PROVIDER_ERROR: "unknown",
    Symptom.RUNAWAY: "unknown",
    Symptom.RUN_ERROR: "unknown",
}


def classify_error(error: BaseException) -> Symptom:
    """The symptom of a failed call, from what failed: the error's type, which the client chose
    from the HTTP status and the server's error code or error message (see
    `resources.model_clients`). Never from the words of a model's reply: a reply that does not
    parse is a `parse-failure` whatever it says, "timeout" and "context" included.

    Anything that is not a typed model error is the caller failing to parse or validate the reply.
    """
    if isinstance(error, ModelTimeout):
        return Symptom.TIMEOUT
    if isinstance(error, ContextOverflow):
        return Symptom.CONTEXT_OVERFLOW
    if isinstance(error, RunawayReply):
        return Symptom.RUNAWAY
    if isinstance(error, OutputLimitExceeded):
        return Symptom.TOKEN_BUDGET_EXCEEDED
    if isinstance(error, ModelError):
        return Symptom.PROVIDER_ERROR
    return Symptom.PARSE_FAILURE


@dataclass(frozen=True)
class FrictionEvent:
    asset_ref: str  # the session id
    consumer: str  # e.g. "session_summaries"
    model: str
    symptom: Symptom
    emission_point: EmissionPoint
    input_bytes: int
    input_tokens_estimate: int
    context_limit_tokens: int
    safe_limit_tokens: int
    raw_cap_tokens: int | None
    note: str
    error_text: str | None = None
    service_domain: str = "memory-core"
    # A raw summary prompt kept from the model (size-precheck-skip): the route it was over,
    # `over-raw-cap` or `over-safe-band` (`digest.synthesis.Route`). Stored for the friction report.
    bound: str | None = None

    def __post_init__(self) -> None:
        # By value: a plain string is as good as the member.
        if self.symptom not in tuple(Symptom):
            raise ValueError(f"unknown friction symptom {self.symptom!r}")
        if self.emission_point not in tuple(EmissionPoint):
            raise ValueError(f"unknown emission point {self.emission_point!r}")

    @property
    def suggestion_kind(self) -> str:
        return SUGGESTION_KIND[self.symptom]
