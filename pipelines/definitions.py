"""The code location: `dagster dev` (or `session-digest ui`) loads `defs` from here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dagster import (
    AssetSelection,
    ConfigurableResource,
    DefaultScheduleStatus,
    Definitions,
    EnvVar,
    ScheduleDefinition,
    define_asset_job,
    in_process_executor,
)

from assets.backlog import backlog, backlog_not_stalled
from assets.friction_report import friction_report
from assets.graph import session_graph
from assets.mini_summaries import turn_mini_summaries
from assets.search_index import search_index, search_index_current
from assets.sessions import raw_sessions, raw_turns, session_summaries
from digest.settings import Settings, load_settings, setting_of
from pipelines.checks import junk_checks, quality_checks, store_checks
from pipelines.jobs import digest_job, fill_mini_summaries_job, ingest_job, summarize_job
from pipelines.resummary import request_resummaries_job
from pipelines.sensors import (
    digest_sensor,
    inbox_sensor,
    interrupted_runs_sensor,
    mini_summary_sensor,
    search_index_sensor,
    summary_sensor,
)
from resources.bindings import (
    ChatModelResource,
    CircuitPolicyResource,
    DigestStoreResource,
    EmbeddingResource,
    GraphPolicyResource,
    MiniSummaryPolicyResource,
    SweepPolicyResource,
)

RESOURCES: dict[str, type[ConfigurableResource]] = {
    "store": DigestStoreResource,
    "model": ChatModelResource,
    "sweep": SweepPolicyResource,
    "mini_summaries": MiniSummaryPolicyResource,
    "graph": GraphPolicyResource,
    "circuit": CircuitPolicyResource,
    "embeddings": EmbeddingResource,
}

# The friction report and the store's checks, hourly: no model call, a few DuckDB reads.
report_job = define_asset_job(
    "report_friction",
    # The fidelity warnings are not in its all-must-pass set.
    selection=AssetSelection.assets("friction_report").without_checks()
    | AssetSelection.checks(*store_checks, *junk_checks),
    description="Write the friction report and check the store's invariants.",
)
report_schedule = ScheduleDefinition(
    name="hourly_friction_report",
    job=report_job,
    cron_schedule="0 * * * *",
    default_status=DefaultScheduleStatus.RUNNING,
    description="Every hour: the friction report (friction-report.html beside the DuckDB file) and the store's "
    "invariant checks.",
)


def bound(env: str, value: Any) -> Any:
    """`EnvVar(env)` where the variable is set and Dagster reads its text as this same value, so the
    UI's Resources page shows where the value comes from; else the value itself. Dagster reads a
    variable as text or a whole number only: a float, `on`/`off`, a value the setting normalised
    (`off`, a relative path) or one changed in code (the CLI's embedded server URL) is the value."""
    text = os.environ.get(env)
    if text is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int) and text == str(value):
        return EnvVar.int(env)
    if isinstance(value, str) and text == value:
        return EnvVar(env)
    return value


def resource_config(settings: Settings, resource_type: type[ConfigurableResource]) -> dict[str, Any]:
    """The resource's fields, each bound to the setting of the same name (`resources.bindings.configured_by`)."""
    config = {}
    for name, field in resource_type.model_fields.items():
        env = field.json_schema_extra["env"]
        value = settings.value(setting_of(env, name))
        config[name] = bound(env, str(value) if isinstance(value, Path) else value)
    return config


def build_resources(settings: Settings) -> dict[str, ConfigurableResource]:
    return {key: resource_type(**resource_config(settings, resource_type)) for key, resource_type in RESOURCES.items()}


def build_definitions(settings: Settings) -> Definitions:
    return Definitions(
        assets=[
            raw_turns,
            raw_sessions,
            turn_mini_summaries,
            session_summaries,
            session_graph,
            friction_report,
            backlog,
            search_index,
        ],
        asset_checks=store_checks + junk_checks + quality_checks + [backlog_not_stalled, search_index_current],
        jobs=[ingest_job, summarize_job, fill_mini_summaries_job, report_job, digest_job, request_resummaries_job],
        schedules=[report_schedule],
        sensors=[
            inbox_sensor,
            summary_sensor,
            mini_summary_sensor,
            digest_sensor,
            interrupted_runs_sensor,
            search_index_sensor,
        ],
        resources=build_resources(settings),
        # Every job's, the UI's runs of assets (`__ASSET_JOB`, a backfill's) included: one process per
        # run, as DuckDB takes one writer per file and per-step processes buy nothing here.
        executor=in_process_executor,
    )


defs = build_definitions(load_settings())
