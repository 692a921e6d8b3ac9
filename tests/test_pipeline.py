"""The assets and jobs in a real Dagster instance, over a real DuckDB file and real HTTP."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from dagster import Definitions, instance_for_test

from digest.ingest import ingest_paths
from digest.settings import load_settings
from digest.turns import partition_key
from pipelines.definitions import build_definitions, defs
from pipelines.sensors import register_partitions
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


def _defs(tmp_path, url: str) -> Definitions:
    settings = load_settings(
        {
            "DIGEST_HOME": str(tmp_path / "home"),
            "DIGEST_MODEL_PROVIDER": "openai",
            "DIGEST_CONTEXT_LIMIT_TOKENS": "8192",
            "DIGEST_RAW_CAP_TOKENS": "2000",
        }
    )
    return build_definitions(dataclasses.replace(settings, model_url=url))


def _ingest(definitions: Definitions, instance, folder, register: bool = True) -> None:
    config = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
    result = definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance)
    assert result.success
    if register:
        register_partitions(instance, DigestStore(definitions.resources["store"].db_path))


def test_definitions_load():
    Definitions.validate_loadable(defs)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"raw_turns", "raw_sessions", "session_summaries"} <= keys


def test_new_sessions_become_partitions_with_dagster_safe_keys(tmp_path, instance):
    turns = make_turns("chat:2026,ws-7", 3) + make_turns("plain-session", 2)
    folder = write_bundle(tmp_path / "bundle", turns)
    with ModelServer() as server:
        definitions = _defs(tmp_path, server.url)
        _ingest(definitions, instance, folder)
        _ingest(definitions, instance, folder)  # again: nothing new
    keys = instance.get_dynamic_partitions("sessions")
    assert sorted(keys) == sorted([partition_key("chat:2026,ws-7"), "plain-session"])
    assert all("," not in k and ":" not in k for k in keys)


def test_summary_run_materializes_with_provenance_metadata(tmp_path, instance):
    small = make_turns("small", 3)
    big = make_turns("big", 40, doc_bytes=400, minis=40)
    folder = write_bundle(tmp_path / "bundle", small + big)
    with ModelServer() as server:
        definitions = _defs(tmp_path, server.url)
        _ingest(definitions, instance, folder)
        job = definitions.resolve_job_def("summarize_sessions")
        results = {key: job.execute_in_process(instance=instance, partition_key=key) for key in ("small", "big")}
    for key, tier in (("small", "raw"), ("big", "miniSummary")):
        assert results[key].success
        meta = results[key].asset_materializations_for_node("session_summaries")[0].metadata
        assert meta["source_tier"].value == tier
        assert meta["degraded"].value == (tier != "raw")
        assert meta["raw_canonical"].value is True
        assert meta["raw_cap_tokens"].value == 2000
    big_meta = results["big"].asset_materializations_for_node("raw_sessions")[0].metadata
    assert big_meta["predicted_route"].value == "over-raw-cap"
    assert big_meta["mini_summary_coverage"].value == 1.0
    store = DigestStore(tmp_path / "home" / "digest.duckdb")
    rows = store.query("SELECT session_id, source_tier, degraded, run_id FROM session_summaries ORDER BY 1")
    assert rows["source_tier"].tolist() == ["miniSummary", "raw"]
    assert rows["run_id"].tolist() == [results["big"].run_id, results["small"].run_id]
    assert store.summaries.pending_summary_keys() == []


def test_a_failed_summary_fails_the_partition_and_writes_nothing(tmp_path, instance):
    folder = write_bundle(tmp_path / "bundle", make_turns("s1", 2))
    with ModelServer(lambda received: Behaviour.text("no json here")) as server:
        definitions = _defs(tmp_path, server.url)
        _ingest(definitions, instance, folder)
        result = definitions.resolve_job_def("summarize_sessions").execute_in_process(
            instance=instance, partition_key="s1", raise_on_error=False
        )
    assert not result.success
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "parse-failure" in failure.event_specific_data.error.message
    store = DigestStore(tmp_path / "home" / "digest.duckdb")
    assert store.query("SELECT count(*) AS n FROM session_summaries")["n"][0] == 0
    assert store.query("SELECT symptom FROM friction_events")["symptom"].tolist() == ["parse-failure"]
    assert store.summaries.pending_summary_keys() == ["s1"]


def test_a_summary_run_stores_its_fidelity_and_shows_it_in_the_metadata(tmp_path, instance):
    folder = write_bundle(tmp_path / "bundle", make_turns("small", 3))
    naming_row = {**GOOD_SUMMARY, "summary": "Fixed the grid row in Row.mjs."}
    with ModelServer(lambda received: Behaviour.reply(naming_row)) as server:
        definitions = _defs(tmp_path, server.url)
        _ingest(definitions, instance, folder)
        result = definitions.resolve_job_def("summarize_sessions").execute_in_process(
            instance=instance, partition_key="small"
        )
    meta = result.asset_materializations_for_node("session_summaries")[0].metadata
    store = DigestStore(tmp_path / "home" / "digest.duckdb")
    row = store.summaries.summary_row("small")
    assert 0 < row["fidelity"] < 1 and meta["fidelity"].value == row["fidelity"]
    assert "row" in row["fidelity_found"] and "manager" in row["fidelity_missed"]
    assert "`row`" in meta["fidelity_identifiers"].value and "**missed**" in meta["fidelity_identifiers"].value
    # New turns change the score with no new summary: the summary no longer covers them.
    more = make_turns("small", 4)[3:]
    more[0] = dataclasses.replace(more[0], document="User Prompt: also fix ColumnBuffer.scrollTo() and #4711")
    ingest_paths([write_bundle(tmp_path / "later", more, stamp="2026-11-21T09-00-00.000Z")], store)
    assert store.summaries.summary_row("small")["fidelity"] < row["fidelity"]


def test_the_session_partitions_show_the_facts_of_its_tool_calls(tmp_path, instance):
    """What the session's tool calls did (`digest.facts`), on `raw_sessions` and on the summary."""
    samples = tmp_path / "logs"
    samples.mkdir()
    claude = "0b6c3f1e-5a2d-4c8e-9f41-7d2e8a1c5b90"
    source = Path(__file__).resolve().parent.parent / "samples" / "harnesses" / f"{claude}.jsonl"
    (samples / source.name).write_bytes(source.read_bytes())
    with ModelServer() as server:
        definitions = _defs(tmp_path, server.url)
        _ingest(definitions, instance, samples)
        result = definitions.resolve_job_def("summarize_sessions").execute_in_process(
            instance=instance, partition_key=partition_key(claude)
        )
    assert result.success
    for node in ("raw_sessions", "session_summaries"):
        shown = result.asset_materializations_for_node(node)[0].metadata["facts"].value
        assert "**Files edited or created** (2)" in shown and "`/home/dev/webapp/server.py` (edited)" in shown
        assert "- `python -m pytest tests/test_server.py -q`" in shown
        assert "Also: 1 files read, 1 issues." in shown
