"""The model hosts of a deployment: the single-host model settings (`MODEL_SETTINGS`, a part of
`digest.settings.SETTINGS`), and the fleet built from them or from a hosts file (`digest.hosts`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from digest.hosts import (
    DEFAULT_HOST,
    DEFAULT_RAW_CAP_TOKENS,
    MAX_CONTEXT_TOKENS,
    PROVIDERS,
    Fleet,
    HostSpec,
    load_hosts_file,
)
from digest.model_api import StreamBounds
from digest.settings_parse import Setting, is_auto, one_of, path, positive, raw_cap, text, whole
from digest.tokens import DEFAULT_BYTES_PER_TOKEN

# The name the embedded SmolLM2 is served and recorded under.
EMBEDDED_MODEL = "smollm2"
DEFAULT_MODEL_NAMES = {"embedded": EMBEDDED_MODEL, "openai": "default", "ollama": "llama3.2"}
# The embedded SmolLM2 GGUF was trained with an 8192-token context; the server is started with it.
EMBEDDED_CONTEXT_TOKENS = 8192


def _context_default(known: Mapping[str, Any]) -> int:
    return EMBEDDED_CONTEXT_TOKENS if known["provider"] == "embedded" else 131072


# The model host's settings, in reading order (a default may depend on the settings above it).
MODEL_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "DIGEST_MODEL_HOSTS",
        "hosts_file",
        path,
        None,
        "a TOML file declaring several model hosts, each with its own provider, URL, model, context, raw cap and "
        "calls at once ([deploy](deploy.md)); unset: the provider, URL, model name, context, safe band, raw cap and "
        "bytes per token settings are the one host, named `default`",
    ),
    Setting(
        "DIGEST_MODEL_PROVIDER",
        "provider",
        one_of(PROVIDERS),
        "embedded",
        "`embedded` (SmolLM2 under llama.cpp, started by the project), `openai` (any `/v1/chat/completions` "
        "server), `ollama` (native `/api/chat`)",
    ),
    Setting(
        "DIGEST_MODEL_URL",
        "model_url",
        text,
        None,
        "the server's base URL; `embedded` starts its own when unset, `openai` defaults to "
        "`http://127.0.0.1:8080`, `ollama` to `http://127.0.0.1:11434`",
    ),
    Setting(
        "DIGEST_MODEL_NAME",
        "model_name",
        text,
        lambda known: DEFAULT_MODEL_NAMES[known["provider"]],
        "the model name sent to the server (`embedded` always serves `smollm2`)",
        default_doc=" / ".join(f"`{name}`" for name in DEFAULT_MODEL_NAMES.values()),
    ),
    Setting(
        "DIGEST_CONTEXT_LIMIT_TOKENS",
        "context_limit_tokens",
        whole(256, MAX_CONTEXT_TOKENS),
        _context_default,
        "the model's context (at least 256); sent as `num_ctx` to Ollama",
        default_doc=f"{EMBEDDED_CONTEXT_TOKENS} for `embedded` (SmolLM2's own context), else 131072",
    ),
    Setting(
        "DIGEST_SAFE_LIMIT_TOKENS",
        "safe_limit_tokens",
        whole(1, MAX_CONTEXT_TOKENS),
        lambda known: known["context_limit_tokens"] * 3 // 4,
        "the safe band: no prompt over it is ever sent; at most the context",
        default_doc="75% of the context",
    ),
    Setting(
        "DIGEST_RAW_CAP_TOKENS",
        "raw_cap_tokens",
        raw_cap,
        DEFAULT_RAW_CAP_TOKENS,
        "the raw-synthesis cap, and the largest prompt of any model call (mini summaries, degraded summaries, "
        "graph chunks); `off` disables it (high-context hosts); `auto` makes it follow the host's measured speed "
        f"so one raw call fits `DIGEST_RAW_CALL_TARGET_S` ({DEFAULT_RAW_CAP_TOKENS} until measured; "
        "[pacing](pacing.md))",
    ),
    # The same variable: whether its text is `auto`.
    Setting(
        "DIGEST_RAW_CAP_TOKENS",
        "raw_cap_auto",
        is_auto,
        False,
        "`auto`: the raw cap follows the host's measured speed",
    ),
    Setting(
        "DIGEST_RAW_CALL_TARGET_S",
        "raw_call_target_s",
        positive,
        120.0,
        "with `DIGEST_RAW_CAP_TOKENS=auto`: the seconds one raw summary call, its prompt and its answer, is sized to",
    ),
    Setting(
        "DIGEST_BYTES_PER_TOKEN",
        "bytes_per_token",
        positive,
        None,
        "pins the token estimate, UTF-8 bytes / this; unset: the host's own ratio measured from its ledger, "
        f"else {DEFAULT_BYTES_PER_TOKEN:g}",
        default_doc=f"measured, else {DEFAULT_BYTES_PER_TOKEN:g}",
    ),
    Setting(
        "DIGEST_SUMMARY_TIMEOUT_S",
        "summary_timeout_s",
        positive,
        180.0,
        "the stall window of one summary call while the host's speed is not measured yet (a streamed call that "
        "receives nothing this long is given up); measured, the window follows the host ([pacing](pacing.md))",
    ),
    Setting(
        "DIGEST_CALL_CEILING_S",
        "call_ceiling_s",
        positive,
        900.0,
        "no model call runs longer, however it progresses: a trickling server is cut here (a call still "
        "progressing then does not count against its host)",
    ),
    Setting(
        "DIGEST_STREAM_EVENT_MAX_BYTES",
        "event_max_bytes",
        whole(4096),
        StreamBounds.event_max_bytes,
        "the most one event of a streamed reply (an SSE event, all its `data:` lines; an Ollama line) may hold; "
        "past it the stream is broken (a provider error, the host's failure) ([model clients](model-clients.md))",
        default_doc="1048576 (1 MiB)",
    ),
    Setting(
        "DIGEST_CALL_MAX_BYTES",
        "call_max_bytes",
        whole(65536),
        StreamBounds.call_max_bytes,
        "the most bytes one model call reads off the wire, all its requests (a flood of keep-alives or empty "
        "chunks included); past it the server is broken (a provider error, the host's failure)",
        default_doc="67108864 (64 MiB)",
    ),
    Setting(
        "DIGEST_SUMMARY_MAX_OUTPUT_TOKENS",
        "summary_max_output_tokens",
        whole(64),
        1024,
        "output cap of one summary call (`max_tokens` / `num_predict`); at least 64",
    ),
)


class ModelSettings(Protocol):
    """The single-host model settings and the bounds every summary call shares, under the same names
    in `Settings` and in the Dagster model resource (`resources.bindings.ChatModelResource`)."""

    hosts_file: str | Path | None
    provider: str
    model_url: str | None
    model_name: str
    context_limit_tokens: int
    safe_limit_tokens: int
    raw_cap_tokens: int | None
    raw_cap_auto: bool
    raw_call_target_s: float
    call_ceiling_s: float
    bytes_per_token: float | None
    summary_timeout_s: float
    summary_max_output_tokens: int
    event_max_bytes: int
    call_max_bytes: int


def build_fleet(model: ModelSettings) -> Fleet:
    """The hosts file's hosts, else the one host of the single-host settings; with the output cap,
    deadline and raw-call target every summary call shares."""
    if model.hosts_file:
        hosts = load_hosts_file(Path(model.hosts_file), DEFAULT_MODEL_NAMES)
    else:
        hosts = (
            HostSpec(
                name=DEFAULT_HOST,
                provider=model.provider,
                url=model.model_url,
                model=model.model_name,
                context_limit_tokens=model.context_limit_tokens,
                safe_limit_tokens=model.safe_limit_tokens,
                raw_cap_tokens=model.raw_cap_tokens,
                raw_cap_auto=model.raw_cap_auto,
                concurrency=1,
                bytes_per_token=model.bytes_per_token,
            ),
        )
    return Fleet(
        hosts,
        max_output_tokens=model.summary_max_output_tokens,
        timeout_s=model.summary_timeout_s,
        raw_call_target_s=model.raw_call_target_s,
    )
