"""Friction: what went wrong between a consumer and the model, classified as the original does.

Kept durable in DuckDB (the original held it in process memory for an hour). One addition to the
original's symptoms: `provider-error` for a server that is down or answers 5xx, which the original
would misfile as `parse-failure`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from digest.model_api import ContextOverflow, ModelTimeout, ProviderError

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

_OVERFLOW = re.compile(r"context|overflow|too large|maximum|exceed", re.IGNORECASE)
_TIMEOUT = re.compile(r"timeout|aborted|timed[ -]out", re.IGNORECASE)


def classify_error(error: BaseException) -> str:
    """The symptom of a failed call: typed errors first, then the original's message patterns.

    A provider error is typed before the patterns: "maximum slots exceeded" from a busy server
    is not a context overflow.
    """
    if isinstance(error, ModelTimeout):
        return "timeout"
    if isinstance(error, ContextOverflow):
        return "context-overflow"
    if isinstance(error, ProviderError):
        return "provider-error"
    message = str(error)
    if _OVERFLOW.search(message):
        return "context-overflow"
    if _TIMEOUT.search(message):
        return "timeout"
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
