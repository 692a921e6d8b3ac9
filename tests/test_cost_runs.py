"""A summary's cost and cache flag on its materialization, in a real Dagster instance over a real
DuckDB file and real HTTP: the model call's prompt and generation seconds, then a rerun replayed
from the response cache with no model call, and the friction report's totals by model, host and day."""

from __future__ import annotations

import dataclasses
import json

import pytest
from dagster import instance_for_test

from digest.settings import load_settings
from pipelines.definitions import build_definitions
from pipelines.sensors import register_partitions
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


def _summarize(definitions, instance):
    result = definitions.resolve_job_def("summarize_sessions").execute_in_process(instance=instance, partition_key="s1")
    assert result.success
    meta = {k: v.value for k, v in result.asset_materializations_for_node("session_summaries")[0].metadata.items()}
    logs = [e.user_message for e in instance.all_logs(result.run_id) if "session 's1':" in e.user_message]
    return meta, logs


def test_the_summary_shows_its_cost_and_a_rerun_from_the_cache_says_so(tmp_path, instance):
    folder = write_bundle(tmp_path / "bundle", make_turns("s1", 3))
    # The first piece after 0.3 s: the prompt's time, as a streamed call measures it.
    behaviour = Behaviour(content=json.dumps(GOOD_SUMMARY), first_piece_s=0.3)
    with ModelServer(lambda received: behaviour) as server:
        settings = load_settings({"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai"})
        definitions = build_definitions(dataclasses.replace(settings, model_url=server.url))
        config = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
        assert definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance).success
        store = DigestStore(tmp_path / "home" / "digest.duckdb")
        register_partitions(instance, store)
        first, first_logs = _summarize(definitions, instance)
        calls_after_first = len(server.chat_requests())
        again, again_logs = _summarize(definitions, instance)  # by hand: summarized again, from the cache
        assert len(server.chat_requests()) == calls_after_first
        report = definitions.resolve_job_def("report_friction").execute_in_process(instance=instance)

    ledger = store.query("SELECT duration_s, first_token_s, cached FROM attempts ORDER BY attempt_id")
    assert ledger["cached"].tolist() == [False, True]
    assert first["cached"] is False
    assert first["cost_calls"] == 1
    assert first["cost_prompt_s"] == pytest.approx(ledger["first_token_s"][0], abs=1e-3)
    assert first["cost_prompt_s"] >= 0.3
    assert first["cost_model_s"] == pytest.approx(ledger["duration_s"][0], abs=1e-3)
    assert first["cost_generation_s"] == pytest.approx(first["cost_model_s"] - first["cost_prompt_s"], abs=2e-3)
    assert first["cost_given_up_s"] == first["cost_unsplit_s"] == first["cost_mini_summaries_s"] == 0
    assert "s prompt" in first_logs[-1] and "s generation" in first_logs[-1]

    assert again["cached"] is True
    assert again["cost_calls"] == 0 and again["cost_model_s"] == 0
    assert again_logs[-1].endswith("reply from the cache, no model call")

    # The friction report's totals by model, host and day: the one call, and the one replay.
    report_md = report.asset_materializations_for_node("friction_report")[0].metadata["report"].value
    section = report_md.split("Model time by model, host and day", 1)[1].split("\n#", 1)[0]
    day_rows = [line for line in section.splitlines() if line.startswith("| 20")]
    assert len(day_rows) == 1
    cells = [c.strip() for c in day_rows[0].strip("|").split("|")]
    assert cells[2:] == ["default", f"{first['cost_model_s']:.2f} s", "1", "0", "0.00 s", "1"]
