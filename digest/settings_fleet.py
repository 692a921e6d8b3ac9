"""The model hosts of a deployment: the single-host model settings, and the fleet built from them
or from a hosts file (`digest.hosts`)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from digest.hosts import DEFAULT_HOST, Fleet, HostSpec, load_hosts_file

# The name the embedded SmolLM2 is served and recorded under.
EMBEDDED_MODEL = "smollm2"
DEFAULT_MODEL_NAMES = {"embedded": EMBEDDED_MODEL, "openai": "default", "ollama": "llama3.2"}


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
