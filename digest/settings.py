"""Every deployment setting, in one place: its env var, its default, and how it is parsed.

Settings are read once, when the definitions load. A malformed value raises `SettingsError`
naming the variable, so a bad deployment fails loudly at load instead of running with a
silently substituted default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from digest.graph import MIN_CHUNK_CONTENT_BYTES, GraphPolicy, chunk_content_budget_bytes, prompt_window_tokens
from digest.mini_summaries import PRIORITIES as MINI_SUMMARY_PRIORITIES, MiniSummaryPolicy
from digest.scheduling import SweepPolicy
from digest.synthesis import Limits

# The embedded SmolLM2 GGUF was trained with an 8192-token context; the server is started with it.
EMBEDDED_CONTEXT_TOKENS = 8192
PROVIDERS = ("embedded", "openai", "ollama")


class SettingsError(ValueError):
    """A setting's env var holds a value that cannot be used."""


@dataclass(frozen=True)
class Settings:
    home: Path
    db_path: Path
    inbox: Path
    provider: str
    model_url: str | None
    model_name: str
    context_limit_tokens: int
    safe_limit_tokens: int
    raw_cap_tokens: int | None  # None: the cap is off (high-context hosts)
    bytes_per_token: float
    summary_timeout_s: float
    summary_max_output_tokens: int
    sweep: SweepPolicy
    mini_summaries: MiniSummaryPolicy
    graph: GraphPolicy
    response_cache: bool  # reuse model replies from DuckDB (staging for crash safety stays either way)

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    def limits(self) -> Limits:
        return Limits(
            context_limit_tokens=self.context_limit_tokens,
            safe_limit_tokens=self.safe_limit_tokens,
            raw_cap_tokens=self.raw_cap_tokens,
            bytes_per_token=self.bytes_per_token,
            max_output_tokens=self.summary_max_output_tokens,
            timeout_s=self.summary_timeout_s,
        )


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a whole number") from None
    if value < minimum:
        raise SettingsError(f"{name}={raw!r} must be at least {minimum}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise SettingsError(f"{name}={raw!r} must be a positive finite number")
    return value


def _on_off(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in ("on", "off"):
        raise SettingsError(f"{name}={raw!r} is neither 'on' nor 'off'")
    return raw == "on"


# A raw call must finish inside DIGEST_SUMMARY_TIMEOUT_S (180 s) on a CPU host. Prompt evaluation
# runs at roughly 50 tokens/s for a 4B-active or 7B Q4 model on a few CPU cores, so 8192 prompt
# tokens cost about 165 s: the most that fits the timeout with room for the answer.
DEFAULT_RAW_CAP_TOKENS = 8192


def parse_raw_cap(raw: str | None) -> int | None:
    """`DIGEST_RAW_CAP_TOKENS`: a positive token count, `off` (no cap), or empty for the default."""
    text = (raw or "").strip()
    if not text:
        return DEFAULT_RAW_CAP_TOKENS
    if text.lower() == "off":
        return None
    try:
        value = int(text)
    except ValueError:
        raise SettingsError(
            f"DIGEST_RAW_CAP_TOKENS={text!r} is neither a whole number of tokens nor 'off'"
        ) from None
    if value < 1:
        raise SettingsError(f"DIGEST_RAW_CAP_TOKENS={text!r} must be at least 1 (or 'off')")
    return value


def _mini_summary_policy(env: Mapping[str, str]) -> MiniSummaryPolicy:
    """Defaults as the reference backfill: 600 s a run, 20 s inner and 30 s outer per turn, 5 tries."""
    inner = _float(env, "DIGEST_MINI_SUMMARY_TIMEOUT_S", 20.0)
    outer = _float(env, "DIGEST_MINI_SUMMARY_OUTER_TIMEOUT_S", 30.0)
    if outer < inner:
        raise SettingsError(
            f"DIGEST_MINI_SUMMARY_OUTER_TIMEOUT_S={outer:g} is below DIGEST_MINI_SUMMARY_TIMEOUT_S={inner:g}: "
            "the outer timeout is the backstop of the inner one"
        )
    priority = env.get("DIGEST_MINI_SUMMARY_PRIORITY", "").strip().lower() or "degraded-first"
    if priority not in MINI_SUMMARY_PRIORITIES:
        raise SettingsError(
            f"DIGEST_MINI_SUMMARY_PRIORITY={priority!r} is not one of {', '.join(MINI_SUMMARY_PRIORITIES)}"
        )
    return MiniSummaryPolicy(
        budget_s=_float(env, "DIGEST_MINI_SUMMARY_BUDGET_S", 600.0),
        timeout_s=inner,
        outer_timeout_s=outer,
        max_attempts=_int(env, "DIGEST_MINI_SUMMARY_MAX_ATTEMPTS", 5),
        fresh_reserve=_int(env, "DIGEST_MINI_SUMMARY_FRESH_RESERVE", 10, minimum=0),
        priority=priority,
    )


# The reference's graph output limit is 8192 tokens for a 131072-token context. On a small context
# (the embedded SmolLM2's is 8192) that would leave no room for a prompt, so the default is an eighth
# of the context when that is less: 1024 for 8192, enough for 8 entities and 8 relations, and the
# safe band (6144) stays the bound on the prompt.
REFERENCE_GRAPH_OUTPUT_LIMIT_TOKENS = 8192


def _graph_policy(env: Mapping[str, str], context: int, safe: int, raw_cap: int | None) -> GraphPolicy:
    """Defaults as the reference's `localModels.chat` leaves: 50000-token chunks, 8192 output tokens
    (less on a small context), 3 attempts; a chunk's call waits up to 600 s; a session needing more
    than 64 chunk calls is not tried. The raw cap, when on, bounds every chunk's prompt too. A run
    spends up to 1800 s of model time, as a sweep may (`DIGEST_SWEEP_MODEL_SECONDS`), so one
    session does not hold the `model` pool for longer."""
    default_output = min(REFERENCE_GRAPH_OUTPUT_LIMIT_TOKENS, context // 8)
    policy = GraphPolicy(
        chunk_limit_tokens=_int(env, "DIGEST_GRAPH_CHUNK_LIMIT_TOKENS", 50000),
        output_limit_tokens=_int(env, "DIGEST_GRAPH_OUTPUT_LIMIT_TOKENS", default_output, minimum=64),
        max_attempts=_int(env, "DIGEST_GRAPH_MAX_ATTEMPTS", 3),
        timeout_s=_float(env, "DIGEST_GRAPH_TIMEOUT_S", 600.0),
        max_chunks=_int(env, "DIGEST_GRAPH_MAX_CHUNKS", 64),
        batch_sessions=_int(env, "DIGEST_GRAPH_BATCH_SESSIONS", 10),
        fresh_reserve=_int(env, "DIGEST_GRAPH_FRESH_RESERVE", 2, minimum=0),
        budget_s=_float(env, "DIGEST_GRAPH_BUDGET_S", 1800.0),
    )
    model = Limits(
        context_limit_tokens=context,
        safe_limit_tokens=safe,
        raw_cap_tokens=raw_cap,
        bytes_per_token=_float(env, "DIGEST_BYTES_PER_TOKEN", 3.0),
        max_output_tokens=policy.output_limit_tokens,
        timeout_s=policy.timeout_s,
    )
    room = chunk_content_budget_bytes(model, policy)
    if room < MIN_CHUNK_CONTENT_BYTES:
        raise SettingsError(
            f"the graph prompt window, min(DIGEST_GRAPH_CHUNK_LIMIT_TOKENS, DIGEST_RAW_CAP_TOKENS (when on), "
            f"DIGEST_SAFE_LIMIT_TOKENS, DIGEST_CONTEXT_LIMIT_TOKENS - DIGEST_GRAPH_OUTPUT_LIMIT_TOKENS) = "
            f"{prompt_window_tokens(model, policy)} "
            f"tokens, leaves {room} bytes for turn text after the extraction prompt; at least "
            f"{MIN_CHUNK_CONTENT_BYTES} are needed"
        )
    return policy


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    home = Path(env.get("DIGEST_HOME", "").strip() or ".digest").resolve()
    provider = env.get("DIGEST_MODEL_PROVIDER", "").strip().lower() or "embedded"
    if provider not in PROVIDERS:
        raise SettingsError(f"DIGEST_MODEL_PROVIDER={provider!r} is not one of {', '.join(PROVIDERS)}")
    default_context = EMBEDDED_CONTEXT_TOKENS if provider == "embedded" else 131072
    context = _int(env, "DIGEST_CONTEXT_LIMIT_TOKENS", default_context, minimum=256)
    safe = _int(env, "DIGEST_SAFE_LIMIT_TOKENS", (context * 3) // 4)
    if safe > context:
        raise SettingsError(
            f"DIGEST_SAFE_LIMIT_TOKENS={safe} is above DIGEST_CONTEXT_LIMIT_TOKENS={context}"
        )
    default_name = {"embedded": "smollm2", "openai": "default", "ollama": "llama3.2"}[provider]
    raw_cap = parse_raw_cap(env.get("DIGEST_RAW_CAP_TOKENS"))
    return Settings(
        home=home,
        db_path=Path(env.get("DIGEST_DB_PATH", "").strip() or home / "digest.duckdb").resolve(),
        inbox=Path(env.get("DIGEST_INBOX", "").strip() or home / "inbox").resolve(),
        provider=provider,
        model_url=env.get("DIGEST_MODEL_URL", "").strip() or None,
        model_name=env.get("DIGEST_MODEL_NAME", "").strip() or default_name,
        context_limit_tokens=context,
        safe_limit_tokens=safe,
        raw_cap_tokens=raw_cap,
        bytes_per_token=_float(env, "DIGEST_BYTES_PER_TOKEN", 3.0),
        summary_timeout_s=_float(env, "DIGEST_SUMMARY_TIMEOUT_S", 180.0),
        summary_max_output_tokens=_int(env, "DIGEST_SUMMARY_MAX_OUTPUT_TOKENS", 1024, minimum=64),
        sweep=SweepPolicy(
            max_sessions=_int(env, "DIGEST_SWEEP_MAX_SESSIONS", 5),
            model_seconds=_float(env, "DIGEST_SWEEP_MODEL_SECONDS", 1800.0),
            idle_window_s=_float(env, "DIGEST_IDLE_WINDOW_S", 600.0),
            oldest_share=_int(env, "DIGEST_SWEEP_OLDEST_SHARE", 1, minimum=0),
            backoff_base_s=_float(env, "DIGEST_BACKOFF_BASE_S", 1800.0),
            backoff_max_s=_float(env, "DIGEST_BACKOFF_MAX_S", 86400.0),
        ),
        mini_summaries=_mini_summary_policy(env),
        graph=_graph_policy(env, context, safe, raw_cap),
        response_cache=_on_off(env, "DIGEST_RESPONSE_CACHE", True),
    )
