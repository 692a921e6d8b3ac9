"""The Dagster instance's `dagster.yaml`, written by the project from its settings: where the
instance lives (PostgreSQL through dagster-postgres when `DIGEST_DAGSTER_PG_URL` is set, else
Dagster's SQLite default under DAGSTER_HOME) and how many runs and model steps go at once, per
model host. Every CLI start rewrites a file that carries `MARKER`; a file without it is the user's
own and is left alone."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from digest.settings import Settings
from digest.tags import MODEL_HOST_TAG

MARKER = "# Written by session-digest."
PG_URL_ENV = "DIGEST_DAGSTER_PG_URL"
POOL = "model"  # the pool of the three assets that call a model
# The keys that keep the instance small, left out of a file written before it.
SIZE_KEYS = ("compute_logs", "event_log_storage", "retention")
# Steps' stdout and stderr are not kept: the event log (each step's events, `context.log` messages,
# errors with their stack traces) has what the UI shows of a run; a step's prints are not.
COMPUTE_LOGS = {"module": "dagster._core.storage.noop_compute_log_manager", "class": "NoOpComputeLogManager"}
# One SQLite event log for every run, instead of a SQLite file per run (some 250 KB each, mostly
# the empty tables and indexes each file carries): $DAGSTER_HOME/event_log.db.
EVENT_LOG_STORAGE = {
    "module": "dagster._core.storage.event_log",
    "class": "ConsolidatedSqliteEventLogStorage",
    "config": {"base_dir": {"env": "DAGSTER_HOME"}},
}
# Dagster's run queue, which places a model run submitted without a model host (the UI's, a
# backfill's) on one as the sensors would, so the per-host limit below holds it too.
RUN_COORDINATOR = {"module": "pipelines.run_coordinator", "class": "HostPlacingRunCoordinator"}
# Sensor ticks (a tick a minute per sensor): Dagster keeps skipped ones 7 days and the others for
# ever; runs, their status and the materializations are not ticks and are kept.
RETENTION = {
    "sensor": {"purge_after_days": {"skipped": 1, "success": 14, "failure": 30, "started": 14}},
    "schedule": {"purge_after_days": {"skipped": 1, "success": 14, "failure": 30, "started": 14}},
}

_HEADER = f"""\
{MARKER}
# Rewritten from the settings at each `session-digest` start: delete the line above to keep
# your own edits (then keep a run limit per model host, as below). A model host's runs (tag
# {MODEL_HOST_TAG}) go at most its concurrency at once, with one more run for ingest and
# reports; the `{POOL}` pool admits as many model steps as all hosts together.
"""
_TELEMETRY_NOTE = """\
# Dagster sends anonymous usage statistics (https://docs.dagster.io/about/telemetry) unless
# (kept when this file is rewritten):
# telemetry:
#   enabled: false
"""


def per_run_event_logs(dagster_home: Path | None) -> bool:
    """Whether this SQLite instance already keeps its event log a file per run (Dagster's default,
    as this project's instances once did): switching it to the consolidated file would
    hide every earlier run's events and materializations, so such an instance keeps its layout."""
    if dagster_home is None:
        return False
    home = Path(dagster_home)
    return (home / "history" / "runs" / "index.db").exists() and not (home / "event_log.db").exists()


def instance_config(settings: Settings, telemetry: dict | None = None, dagster_home: Path | None = None) -> dict:
    """dagster.yaml's content. The PostgreSQL URL is named by its env var, never written down: it
    may carry a password. SQLite is Dagster's default storage, so it is not written either; its
    event log is one file (`EVENT_LOG_STORAGE`) unless `dagster_home` already has one per run."""
    hosts = settings.fleet.hosts
    total = settings.fleet.total_concurrency
    config: dict = {}
    if settings.dagster_pg_url:
        config["storage"] = {"postgres": {"postgres_url": {"env": PG_URL_ENV}}}
    elif not per_run_event_logs(dagster_home):
        # The home's own path where it is known (an instance opened from its folder alone, without
        # DAGSTER_HOME set, reads it too); a moved home gets the file rewritten at the next start.
        base_dir = str(Path(dagster_home).resolve()) if dagster_home is not None else {"env": "DAGSTER_HOME"}
        config["event_log_storage"] = {**EVENT_LOG_STORAGE, "config": {"base_dir": base_dir}}
    config["compute_logs"] = COMPUTE_LOGS
    config["retention"] = RETENTION
    config["run_coordinator"] = RUN_COORDINATOR
    config["concurrency"] = {
        "pools": {"default_limit": total},
        "runs": {
            "max_concurrent_runs": total + 1,
            "tag_concurrency_limits": [
                {"key": MODEL_HOST_TAG, "value": host.name, "limit": host.concurrency} for host in hosts
            ],
        },
    }
    if telemetry is not None:
        config["telemetry"] = telemetry
    return config


def instance_yaml(settings: Settings, telemetry: dict | None = None, dagster_home: Path | None = None) -> str:
    body = yaml.safe_dump(instance_config(settings, telemetry, dagster_home), sort_keys=False)
    return _HEADER + body + ("" if telemetry is not None else _TELEMETRY_NOTE)


def _missing_host_limits(config: object, settings: Settings) -> list[str]:
    """The model hosts that a user's dagster.yaml gives no run limit."""
    try:
        limits = config["concurrency"]["runs"]["tag_concurrency_limits"] or []
    except (TypeError, KeyError):
        limits = []
    limited = {limit.get("value") for limit in limits if isinstance(limit, dict) and limit.get("key") == MODEL_HOST_TAG}
    return [host.name for host in settings.fleet.hosts if host.name not in limited]


def write_instance_config(dagster_home: Path, settings: Settings) -> str | None:
    """Writes `dagster_home/dagster.yaml` unless it is the user's own; returns a one-line warning
    when the user's own file leaves a model host without its run limit."""
    path = Path(dagster_home) / "dagster.yaml"
    telemetry, text = None, None
    if path.exists():
        text = path.read_text()
        try:
            existing = yaml.safe_load(text)
        except yaml.YAMLError:
            return None  # Dagster names the file and the line when it loads the instance
        if MARKER not in text:
            missing = _missing_host_limits(existing, settings)
            if not missing:
                return None
            return (
                f"session-digest: {path} is your own (no '{MARKER}' line) and gives model host(s) "
                f"{', '.join(missing)} no run limit: add them to concurrency.runs.tag_concurrency_limits "
                f"(key {MODEL_HOST_TAG}), or delete the file to have it written"
            )
        if isinstance(existing, dict):
            telemetry = existing.get("telemetry")  # the one block a user is told to edit here
    content = instance_yaml(settings, telemetry, dagster_home)
    if text == content:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    # Whole or not at all: another CLI, the daemon or the webserver may be reading it right now.
    partial = path.with_name(f".dagster.yaml.{os.getpid()}")
    partial.write_text(content)
    os.replace(partial, path)
    return None


def describe(dagster_home: Path) -> dict:
    """What the dagster.yaml in force says (the project's or the user's), for `session-digest instance-config`."""
    path = Path(dagster_home) / "dagster.yaml"
    text = path.read_text() if path.exists() else ""
    config = yaml.safe_load(text) or {}
    concurrency = config.get("concurrency") or {}
    runs = concurrency.get("runs") or {}
    return {
        "path": str(path),
        "written_by": "session-digest" if MARKER in text else "you",
        "storage": next(iter(config.get("storage") or {"sqlite": None})),
        "event_log_storage": (config.get("event_log_storage") or {}).get("class", "Dagster's default"),
        "compute_logs": (config.get("compute_logs") or {}).get("class", "LocalComputeLogManager"),
        "run_coordinator": (config.get("run_coordinator") or {}).get("class", "QueuedRunCoordinator"),
        "max_concurrent_runs": runs.get("max_concurrent_runs"),
        "model_pool_limit": (concurrency.get("pools") or {}).get("default_limit"),
        "host_run_limits": {
            limit["value"]: limit["limit"]
            for limit in runs.get("tag_concurrency_limits") or []
            if limit.get("key") == MODEL_HOST_TAG
        },
    }
