"""The graph's bounds: its policy, and the prompt window and chunk budget they leave on a host."""

from __future__ import annotations

from dataclasses import dataclass, replace

from digest.graph.extraction import build_extraction_prompt
from digest.synthesis import Limits

# A chunk with less room than this for turn text is not worth a model call: the window is misconfigured.
MIN_CHUNK_CONTENT_BYTES = 512


@dataclass(frozen=True)
class GraphPolicy:
    """The graph's own bounds; the context, safe band and token estimate are the model's (`Limits`)."""

    chunk_limit_tokens: int = 50000
    output_limit_tokens: int = 8192
    max_attempts: int = 3
    timeout_s: float = 600.0
    max_chunks: int = 64  # more chunk calls than this for one session: undigestible (size pre-check)
    batch_sessions: int = 10  # sessions one digest sensor tick launches at most
    fresh_reserve: int = 2  # of those, the newest; the rest are the oldest, so nothing starves
    budget_s: float = 1800.0  # model time one digest run may spend; it starts no chunk after that


def graph_limits(model: Limits, policy: GraphPolicy) -> Limits:
    """The model's context, safe band, raw cap and estimate, with the graph's output cap and timeout.
    The raw cap stays: it is the host's largest prompt that finishes in time, whatever the call."""
    return replace(model, max_output_tokens=policy.output_limit_tokens, timeout_s=policy.timeout_s)


def prompt_window_tokens(model: Limits, policy: GraphPolicy) -> int:
    """The largest extraction prompt: min(graph chunk limit, raw cap when on, safe band, context −
    graph output limit)."""
    return min(policy.chunk_limit_tokens, graph_limits(model, policy).prompt_budget_tokens)


def chunk_content_budget_bytes(model: Limits, policy: GraphPolicy) -> int:
    """Bytes of turn text one chunk may carry: the window less the prompt's own size. Counted in
    bytes, so `estimate_tokens` of any chunk's prompt stays within the window."""
    window_bytes = int(prompt_window_tokens(model, policy) * model.bytes_per_token)
    return window_bytes - len(build_extraction_prompt("").encode("utf-8"))
