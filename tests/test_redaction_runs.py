"""Redaction and projects through the Dagster assets (issue 35): the ingest's materialization
counts the secrets by kind, file and session; a session's partitions show its project; and no model
call ever receives a secret the log held."""

from __future__ import annotations

import dataclasses
import json

import pytest
from dagster import instance_for_test

from digest.settings import load_settings
from pipelines.definitions import build_definitions
from pipelines.sensors import register_partitions
from resources.store import DigestStore
from tests.model_server import ModelServer

GH = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


def _definitions(tmp_path, url: str, redact: str):
    settings = load_settings(
        {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_REDACT": redact}
    )
    return build_definitions(dataclasses.replace(settings, model_url=url))


def _log(tmp_path):
    path = tmp_path / "logs" / "run.jsonl"
    path.parent.mkdir()
    lines = [
        {"id": "t1", "session_id": "s1", "timestamp": 1_760_000_000_000, "prompt": f"git push with {GH}",
         "response": "pushed", "project": "/home/ada/src/app", "git_branch": "main"},
        {"id": "t2", "session_id": "s1", "timestamp": 1_760_000_060_000, "prompt": "cat .env",
         "response": "DB_PASSWORD=hunter2hunter2\nDEBUG=true", "project": "/home/ada/src/app", "git_branch": "main"},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _ingest(definitions, instance, path):
    config = {"ops": {"raw_turns": {"config": {"paths": [str(path)]}}}}
    result = definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance)
    assert result.success
    register_partitions(instance, DigestStore(definitions.resources["store"].db_path))
    return result.asset_materializations_for_node("raw_turns")[0].metadata


def test_the_ingest_counts_secrets_the_partitions_show_the_project_and_no_model_call_sees_a_secret(tmp_path, instance):
    path = _log(tmp_path)
    with ModelServer() as server:
        definitions = _definitions(tmp_path, server.url, "on")
        meta = _ingest(definitions, instance, path)
        result = definitions.resolve_job_def("summarize_sessions").execute_in_process(
            instance=instance, partition_key="s1"
        )
    assert result.success
    assert meta["redactions"].value == 2
    assert meta["redactions_by_kind"].value == {"env-secret": 1, "github-token": 1}
    assert meta["sessions_redacted"].value == 1
    assert "| `s1` | 2 |" in meta["redactions_by_session"].value
    assert f"| `{path}` | turns |" in meta["files_preview"].value and meta["files_preview"].value.endswith("| 2 |")
    raw = result.asset_materializations_for_node("raw_sessions")[0].metadata
    assert (raw["project"].value, raw["git_branch"].value, raw["source_path"].value) == (
        "/home/ada/src/app", "main", str(path),
    )  # fmt: skip
    assert (raw["redactions"].value, raw["redactions_by_kind"].value) == (2, "env-secret 1, github-token 1")
    summary = result.asset_materializations_for_node("session_summaries")[0].metadata
    assert summary["project"].value == "/home/ada/src/app"
    prompts = [r.prompt for r in server.requests if r.body.get("messages")]
    assert prompts and all(GH not in p and "hunter2" not in p for p in prompts)
    assert any("[REDACTED:github-token]" in p for p in prompts)


def test_redaction_off_stores_and_sends_the_text_as_read(tmp_path, instance):
    with ModelServer() as server:
        definitions = _definitions(tmp_path, server.url, "off")
        meta = _ingest(definitions, instance, _log(tmp_path))
    assert meta["redactions"].value == 0 and "redactions_by_session" not in meta
    store = DigestStore(tmp_path / "home" / "digest.duckdb")
    assert GH in store.query("SELECT prompt FROM turns WHERE id = 't1'")["prompt"][0]
