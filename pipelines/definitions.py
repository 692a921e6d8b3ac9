"""The code location: `dagster dev` (or `session-digest ui`) loads `defs` from here."""

from __future__ import annotations

import dataclasses
import os

from dagster import AssetSelection, DefaultScheduleStatus, Definitions, EnvVar, ScheduleDefinition, define_asset_job

from assets.friction_report import build_friction_report_asset
from assets.graph import session_graph
from assets.mini_summaries import turn_mini_summaries
from assets.sessions import raw_sessions, raw_turns, session_summaries
from digest.settings import Settings, load_settings
from pipelines.checks import store_checks
from pipelines.jobs import digest_job, fill_mini_summaries_job, ingest_job, summarize_job
from pipelines.sensors import digest_sensor, inbox_sensor, interrupted_runs_sensor, mini_summary_sensor, summary_sensor
from resources.bindings import (
    ChatModelResource,
    DigestStoreResource,
    GraphPolicyResource,
    MiniSummaryPolicyResource,
    SweepPolicyResource,
)

# The friction report and the store's checks, hourly: no model call, a few DuckDB reads.
report_job = define_asset_job(
    "report_friction",
    selection=AssetSelection.assets("friction_report") | AssetSelection.checks(*store_checks),
    description="Write the friction report and check the store's invariants.",
)
report_schedule = ScheduleDefinition(
    name="hourly_friction_report",
    job=report_job,
    cron_schedule="0 * * * *",
    default_status=DefaultScheduleStatus.RUNNING,
)


def _env_or(name: str, value):
    """Bind to the env var when it is set (the UI then shows the binding), else the default."""
    return EnvVar(name) if os.environ.get(name, "").strip() else value


def build_definitions(settings: Settings) -> Definitions:
    return Definitions(
        assets=[
            raw_turns,
            raw_sessions,
            turn_mini_summaries,
            session_summaries,
            session_graph,
            build_friction_report_asset(settings),
        ],
        asset_checks=store_checks,
        jobs=[ingest_job, summarize_job, fill_mini_summaries_job, report_job, digest_job],
        schedules=[report_schedule],
        sensors=[inbox_sensor, summary_sensor, mini_summary_sensor, digest_sensor, interrupted_runs_sensor],
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
                response_cache=settings.response_cache,
            ),
            "sweep": SweepPolicyResource(**dataclasses.asdict(settings.sweep)),
            "mini_summaries": MiniSummaryPolicyResource(**dataclasses.asdict(settings.mini_summaries)),
            "graph": GraphPolicyResource(**dataclasses.asdict(settings.graph)),
        },
    )


defs = build_definitions(load_settings())
