"""The code location: `dagster dev` (or `session-digest ui`) loads `defs` from here."""

from __future__ import annotations

from dagster import AssetSelection, DefaultScheduleStatus, Definitions, ScheduleDefinition, define_asset_job

from assets.friction_report import build_friction_report_asset
from assets.graph import session_graph
from assets.mini_summaries import turn_mini_summaries
from assets.sessions import raw_sessions, raw_turns, session_summaries
from digest.settings import Settings, load_settings
from pipelines.checks import quality_checks, store_checks
from pipelines.jobs import digest_job, fill_mini_summaries_job, ingest_job, summarize_job
from pipelines.sensors import digest_sensor, inbox_sensor, interrupted_runs_sensor, mini_summary_sensor, summary_sensor
from resources.bindings import build_resources

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
        asset_checks=store_checks + quality_checks,
        jobs=[ingest_job, summarize_job, fill_mini_summaries_job, report_job, digest_job],
        schedules=[report_schedule],
        sensors=[inbox_sensor, summary_sensor, mini_summary_sensor, digest_sensor, interrupted_runs_sensor],
        resources=build_resources(settings),
    )


defs = build_definitions(load_settings())
