"""The code location: `dagster dev` (or `session-digest ui`) loads `defs` from here."""

from __future__ import annotations

import dataclasses
import os

from dagster import Definitions, EnvVar

from assets.sessions import raw_sessions, raw_turns, session_summaries
from digest.settings import Settings, load_settings
from pipelines.jobs import ingest_job, summarize_job
from pipelines.sensors import inbox_sensor, summary_sensor
from resources.bindings import ChatModelResource, DigestStoreResource, SweepPolicyResource

def _env_or(name: str, value):
    """Bind to the env var when it is set (the UI then shows the binding), else the default."""
    return EnvVar(name) if os.environ.get(name, "").strip() else value


def build_definitions(settings: Settings) -> Definitions:
    return Definitions(
        assets=[raw_turns, raw_sessions, session_summaries],
        jobs=[ingest_job, summarize_job],
        sensors=[inbox_sensor, summary_sensor],
        resources={
            "store": DigestStoreResource(
                db_path=str(settings.db_path),
                inbox=str(settings.inbox),
            ),
            "model": ChatModelResource(
                provider=settings.provider,
                url=_env_or("DIGEST_MODEL_URL", settings.model_url),
                model=_env_or("DIGEST_MODEL_NAME", settings.model_name),
                context_limit_tokens=settings.context_limit_tokens,
                safe_limit_tokens=settings.safe_limit_tokens,
                raw_cap_tokens=settings.raw_cap_tokens,
                bytes_per_token=settings.bytes_per_token,
                summary_timeout_s=settings.summary_timeout_s,
                summary_max_output_tokens=settings.summary_max_output_tokens,
            ),
            "sweep": SweepPolicyResource(**dataclasses.asdict(settings.sweep)),
        },
    )


defs = build_definitions(load_settings())
