"""Friction: what went wrong between a consumer and the model, classified as the original does.

Kept durable in DuckDB (the original held it in process memory for an hour). One addition to the
original's symptoms: `provider-error` for a server that is down, answers 5xx or breaks its wire
protocol, which the original would misfile as `parse-failure`. The original classified by regexes
over the error message; that message quotes the model's reply, so a reply mentioning "timeout"
passed for a timeout. Here the error's type decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from digest.model_api import ContextOverflow, ModelError, ModelTimeout, OutputLimitExceeded

SYMPTOMS = (
    "context-overflow",
    "parse-failure",
    "token-budget-exceeded",
    "semantic-confusion",
    "timeout",
    "size-precheck-skip",
    "provider-error",
)
DETERMINISTIC_SYMPTOMS = frozenset({"size-precheck-skip", "context-overflow"})
SUGGESTION_KIND = {
    "size-precheck-skip": "compress-payload",
    "context-overflow": "compress-payload",
    "token-budget-exceeded": "compress-payload",
    "parse-failure": "schema-repair",
    "semantic-confusion": "extract-anchor",
    "timeout": "unknown",
    "provider-error": "unknown",
}


def classify_error(error: BaseException) -> str:
    """The symptom of a failed call, from what failed: the error's type, which the client chose
    from the HTTP status and the server's error code or error message (see
    `resources.model_clients`). Never from the words of a model's reply: a reply that does not
    parse is a `parse-failure` whatever it says, "timeout" and "context" included.

    Anything that is not a typed model error is the caller failing to parse or validate the reply.
    """
    if isinstance(error, ModelTimeout):
        return "timeout"
    if isinstance(error, ContextOverflow):
        return "context-overflow"
    if isinstance(error, OutputLimitExceeded):
        return "token-budget-exceeded"
    if isinstance(error, ModelError):
        return "provider-error"
    return "parse-failure"


@dataclass(frozen=True)
class FrictionEvent:
    asset_ref: str  # the session id
    consumer: str  # e.g. "session_summaries"
    model: str
    symptom: str
    emission_point: str  # "pre-invocation" | "post-invocation-failure"
    input_bytes: int
    input_tokens_estimate: int
    context_limit_tokens: int
    safe_limit_tokens: int
    raw_cap_tokens: int | None
    note: str
    error_text: str | None = None
    service_domain: str = "memory-core"

    def __post_init__(self) -> None:
        if self.symptom not in SYMPTOMS:
            raise ValueError(f"unknown friction symptom {self.symptom!r}")
        if self.emission_point not in ("pre-invocation", "post-invocation-failure"):
            raise ValueError(f"unknown emission point {self.emission_point!r}")

    @property
    def suggestion_kind(self) -> str:
        return SUGGESTION_KIND[self.symptom]
