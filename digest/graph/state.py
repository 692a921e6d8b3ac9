"""A session's digest state and its transitions: digested, undigested, undigestible, and the gate."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from digest.friction import DETERMINISTIC_SYMPTOMS, Symptom


class DigestStatus(StrEnum):
    DIGESTED = "digested"
    UNDIGESTED = "undigested"
    UNDIGESTIBLE = "undigestible"


class DeferReason(StrEnum):
    """Why a session is not digested (yet): the original's reasons, and ours."""

    SKIP_OVER_BAND = "skip-over-band"
    WALL_CLOCK_TIMEOUT = "wall-clock-timeout"
    SCHEMA_FAILURE = "schema-failure"
    PROVIDER_ERROR = "provider-error"  # ours: the original files it under schema-failure
    UNDER_BAND_CHOKE = "under-band-choke"  # context-overflow and anything else, as the original
    OPERATOR_RESET = "operator-reset"


DEFER_REASONS = {
    Symptom.SIZE_PRECHECK_SKIP: DeferReason.SKIP_OVER_BAND,
    Symptom.TIMEOUT: DeferReason.WALL_CLOCK_TIMEOUT,
    Symptom.PARSE_FAILURE: DeferReason.SCHEMA_FAILURE,
    Symptom.PROVIDER_ERROR: DeferReason.PROVIDER_ERROR,
}


@dataclass(frozen=True)
class DigestState:
    digest_state: DigestStatus
    attempts: int  # failed attempts at `revision`
    defer_reason: DeferReason | None
    revision: str


def after_success(revision: str) -> DigestState:
    return DigestState(DigestStatus.DIGESTED, 0, None, revision)


def after_failure(previous: DigestState | None, revision: str, symptom: Symptom, max_attempts: int) -> DigestState:
    """Count the failure (from 1 again when the turns changed); undigestible at once for a
    deterministic symptom (a size pre-check, a context overflow: the same input fails the same
    way, so retrying only costs model time), after `max_attempts` for anything else."""
    attempts = (previous.attempts if previous and previous.revision == revision else 0) + 1
    terminal = symptom in DETERMINISTIC_SYMPTOMS or attempts >= max_attempts
    return DigestState(
        DigestStatus.UNDIGESTIBLE if terminal else DigestStatus.UNDIGESTED,
        attempts,
        DEFER_REASONS.get(symptom, DeferReason.UNDER_BAND_CHOKE),
        revision,
    )


def after_reset(previous: DigestState) -> DigestState:
    """An operator's reset: back in the cadence with its attempts restored."""
    return DigestState(DigestStatus.UNDIGESTED, 0, DeferReason.OPERATOR_RESET, previous.revision)


def reset_undigestible(previous: DigestState | None) -> DigestState | None:
    """`reset-digest`: only an undigestible session is reset; None for any other (no change)."""
    if previous is None or previous.digest_state != DigestStatus.UNDIGESTIBLE:
        return None
    return after_reset(previous)


def digest_gate(current_revision: str, summary: dict | None, state: DigestState | None) -> str | None:
    """Why this session must not be digested now, or None. The summary must describe the turns
    as they are (the revision contract), and an undigestible verdict holds until the turns change
    or an operator resets it."""
    if summary is None:
        return "no summary yet: summarize the session first"
    if summary["input_revision"] != current_revision:
        return "turns changed since the summary (input revision mismatch): pending a new summary"
    if state is not None and state.digest_state == DigestStatus.UNDIGESTIBLE and state.revision == current_revision:
        return f"undigestible ({state.defer_reason}, {state.attempts} attempts): `session-digest reset-digest` to retry"
    return None
