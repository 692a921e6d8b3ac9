"""How a prompt's tokens are known: the host's own tokenizer near a bound, else bytes / bytes-per-token.

The bytes per token is, in order: the pinned value (DIGEST_BYTES_PER_TOKEN), else the host's own
from its attempt ledger (`calibrated_bytes_per_token`), else 3.0. The ledger's value is a low
quantile of prompt bytes / the server's `prompt_tokens`, not the mean: fewer bytes a token means
more tokens, the direction in which an estimate never lets a prompt overflow.

Pure: the store reads the ledger, the clients ask the tokenizer, this module decides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

TOKEN_SOURCES = ("tokenizer", "ledger", "pinned", "default")
DEFAULT_BYTES_PER_TOKEN = 3.0

# The ledger's calibration: the last CALIBRATION_RECENT good model calls (not cache replays) of at
# least CALIBRATION_MIN_PROMPT_BYTES, whose server counted the prompt; under CALIBRATION_MIN_SAMPLES
# there is none. It is applied where a bound binds, on long prompts, so it is measured on long ones:
# a short prompt runs fewer bytes a token (the chat template's fixed tokens, instructions, paths),
# and a floor that lets the short mini-summary calls in keeps needless degradations (BENCHMARKS.md §8).
CALIBRATION_RECENT = 500
CALIBRATION_MIN_PROMPT_BYTES = 4096
CALIBRATION_MIN_SAMPLES = 10
CALIBRATION_QUANTILE = 0.10

# A tokenizer counts the prompt's text; the server counts its chat request, which the chat template
# wraps in role markers and, for SmolLM2, a default system prompt (docs/pacing.md has its count).
# Twice SmolLM2's leaves room for templates with a longer preamble.
CHAT_TEMPLATE_MARGIN_TOKENS = 64

# A server's prompt count is believed only within this band of the prompt's UTF-8 bytes: a token
# holds at least one byte (a byte-level tokenizer's fallback) and, in text or code, rarely over 8
# (SmolLM2 measures 3.3-4.6 on summary prompts, BENCHMARKS.md), and the server counts the chat
# template's tokens besides. A count outside it measures nothing of the prompt: a server that
# misreports (`prompt_tokens: 1` for 5.5 KB drove an auto cap to its floor), or one that cut the
# prompt. It is kept in the ledger as the server sent it, and left out of the host's rates and the
# bytes per token (`plausible_prompt_tokens`; the store's SQL applies the same rule).
MIN_COUNTED_BYTES_PER_TOKEN = 1
MAX_COUNTED_BYTES_PER_TOKEN = 8

# The tokenizer is asked only when the estimate lies in [NEAR_CAP_LOW, NEAR_CAP_HIGH] x the bound
# it is checked against: elsewhere no plausible count changes the route. The band covers the
# estimate over-counting long prose and under-counting short prompts (the derivation:
# docs/routing.md#exact-token-counts).
NEAR_CAP_LOW = 0.6
NEAR_CAP_HIGH = 1.6


@dataclass(frozen=True)
class TokenCount:
    """A prompt's tokens as routing compares them with the bounds, and how they were made."""

    tokens: int
    source: str  # one of TOKEN_SOURCES: "tokenizer" (the host's count), else the bytes/token's source

    def __post_init__(self) -> None:
        if self.source not in TOKEN_SOURCES:
            raise ValueError(f"token count source {self.source!r} is not one of {', '.join(TOKEN_SOURCES)}")


def resolve_bytes_per_token(pinned: float | None, calibrated: tuple[float, int] | None) -> tuple[float, str]:
    """The bytes per token an estimate uses, and its source: the pin, else the host's ledger
    (`calibrated`: (value, samples) from `calibrated_bytes_per_token`), else the default."""
    if pinned is not None:
        if not pinned > 0:
            raise ValueError(f"a pinned bytes per token must be positive, not {pinned!r}")
        return float(pinned), "pinned"
    if calibrated is not None:
        return float(calibrated[0]), "ledger"
    return DEFAULT_BYTES_PER_TOKEN, "default"


def plausible_prompt_tokens(prompt_bytes: int, prompt_tokens: int | None) -> bool:
    """Is a server's count of a prompt of `prompt_bytes` one to measure by? False for no count."""
    if prompt_tokens is None:
        return False
    low = prompt_bytes / MAX_COUNTED_BYTES_PER_TOKEN
    return low <= prompt_tokens <= prompt_bytes / MIN_COUNTED_BYTES_PER_TOKEN + CHAT_TEMPLATE_MARGIN_TOKENS


def plausible_count_sql(bytes_column: str = "prompt_bytes", tokens_column: str = "prompt_tokens") -> str:
    """`plausible_prompt_tokens` as a SQL condition over an attempts row (NULL for no count)."""
    low, high = MAX_COUNTED_BYTES_PER_TOKEN, MIN_COUNTED_BYTES_PER_TOKEN
    return (
        f"({tokens_column} >= {bytes_column} / {low} "
        f"AND {tokens_column} <= {bytes_column} / {high} + {CHAT_TEMPLATE_MARGIN_TOKENS})"
    )


def is_calibration_sample(outcome: str, cached: bool, prompt_bytes: int, prompt_tokens: int | None) -> bool:
    """Does a ledger attempt measure bytes per token? (The store's SQL applies the same rule.)"""
    return (
        outcome == "ok"
        and not cached
        and prompt_tokens is not None
        and prompt_tokens > 0
        and prompt_bytes >= CALIBRATION_MIN_PROMPT_BYTES
        and plausible_prompt_tokens(prompt_bytes, prompt_tokens)
    )


def conservative_bytes_per_token(samples: Iterable[tuple[int, int]]) -> tuple[float, int] | None:
    """The CALIBRATION_QUANTILE of prompt bytes / prompt tokens over (bytes, tokens) samples, and
    their number; None under CALIBRATION_MIN_SAMPLES. The lower of the two ratios around the
    quantile's rank, never an interpolation above it."""
    ratios = sorted(b / t for b, t in samples)
    if len(ratios) < CALIBRATION_MIN_SAMPLES:
        return None
    return ratios[math.floor(CALIBRATION_QUANTILE * (len(ratios) - 1))], len(ratios)


def near_bound(estimate: int, bound: int) -> bool:
    """Is the estimate close enough to the bound that the host's own count may route otherwise?"""
    return NEAR_CAP_LOW * bound <= estimate <= NEAR_CAP_HIGH * bound


def count_prompt(
    prompt: str, estimate: TokenCount, bound: int, count_tokens: Callable[[str], int | None] | None
) -> TokenCount:
    """The prompt's tokens to route on: near the bound, the host's count of the text plus the chat
    template's margin (the server's count of the chat request); else, with no tokenizer or when it
    fails, the estimate."""
    if count_tokens is None or not near_bound(estimate.tokens, bound):
        return estimate
    counted = count_tokens(prompt)
    if counted is None:
        return estimate
    return TokenCount(counted + CHAT_TEMPLATE_MARGIN_TOKENS, "tokenizer")
