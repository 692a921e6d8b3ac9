"""The Dagster instance the project configures stays small (issue 20): no compute logs, one SQLite
event log, tick retention; and a summary run's materialization, metadata and status still read
back from it, as the UI reads them."""

from __future__ import annotations

import yaml
from dagster import AssetKey, DagsterInstance, DagsterRunStatus
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import TickStatus

from assets.partitions import sessions_partitions
from digest.ingest import ingest_paths
from digest.settings import load_settings
from pipelines.definitions import build_definitions
from pipelines.instance import instance_yaml, write_instance_config
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.model_server import ModelServer


def test_the_written_dagster_yaml_keeps_the_instance_small(tmp_path):
    settings = load_settings({"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai"})
    config = yaml.safe_load(instance_yaml(settings))
    assert config["compute_logs"] == {
        "module": "dagster._core.storage.noop_compute_log_manager",
        "class": "NoOpComputeLogManager",
    }
    assert config["event_log_storage"]["class"] == "ConsolidatedSqliteEventLogStorage"
    assert config["event_log_storage"]["config"] == {"base_dir": {"env": "DAGSTER_HOME"}}
    assert config["retention"]["sensor"]["purge_after_days"] == {
        "skipped": 1,
        "success": 14,
        "failure": 30,
        "started": 14,
    }
    # On PostgreSQL the storage is the database's: no event log file, the rest the same.
    on_pg = yaml.safe_load(
        instance_yaml(
            load_settings({**settings_env(tmp_path), "DIGEST_DAGSTER_PG_URL": "postgresql+psycopg2://x@h/db"})
        )
    )
    assert "event_log_storage" not in on_pg and on_pg["compute_logs"] == config["compute_logs"]
    # An instance that already keeps an event log file per run keeps it: switching would hide its history.
    old_home = tmp_path / "old-dagster"
    (old_home / "history" / "runs").mkdir(parents=True)
    (old_home / "history" / "runs" / "index.db").write_bytes(b"")
    write_instance_config(old_home, settings)
    kept = yaml.safe_load((old_home / "dagster.yaml").read_text())
    assert "event_log_storage" not in kept and kept["compute_logs"] == config["compute_logs"]


def settings_env(tmp_path) -> dict:
    return {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai"}


def test_a_real_run_on_that_instance_is_still_readable(tmp_path, monkeypatch):
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    with ModelServer() as server:
        env = {**settings_env(tmp_path), "DAGSTER_HOME": str(dagster_home), "DIGEST_MODEL_URL": server.url}
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        settings = load_settings()
        write_instance_config(dagster_home, settings)
        store = DigestStore(settings.db_path)
        store.migrate()
        turns = [t for s in ("s-one", "s-two") for t in make_turns(s, 3, minis=3)]
        ingest_paths([write_bundle(tmp_path / "bundle", turns)], store)
        keys = store.sessions.partition_keys()
        job = build_definitions(settings).resolve_job_def("summarize_sessions")
        with DagsterInstance.get() as instance:
            assert type(instance.compute_log_manager).__name__ == "NoOpComputeLogManager"
            assert type(instance.event_log_storage).__name__ == "ConsolidatedSqliteEventLogStorage"
            retention = instance.get_tick_retention_settings(InstigatorType.SENSOR)
            assert retention[TickStatus.SKIPPED] == 1 and retention[TickStatus.SUCCESS] == 14
            instance.add_dynamic_partitions(sessions_partitions.name, keys)
            results = [job.execute_in_process(instance=instance, partition_key=key) for key in keys]
            assert all(r.success for r in results)

        # A fresh instance from the same home, as the webserver opens it.
        with DagsterInstance.get() as instance:
            summaries = AssetKey("session_summaries")
            assert instance.get_materialized_partitions(summaries) == set(keys)
            for result in results:
                assert instance.get_run_by_id(result.run_id).status == DagsterRunStatus.SUCCESS
            event = instance.get_latest_materialization_event(summaries)
            metadata = event.asset_materialization.metadata
            assert metadata["session_id"].value in ("s-one", "s-two")
            assert {"source_tier", "route_reason", "input_revision", "summary"} <= set(metadata)
            assert not list((dagster_home / "history" / "runs").glob("*.db"))  # no file per run
            assert (dagster_home / "event_log.db").exists()
