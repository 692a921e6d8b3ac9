"""The `search_index` asset and its check `search_index_current` in a real Dagster instance over a
real DuckDB file: materialized as the UI does, and kept up to date by its sensor."""

from __future__ import annotations

import dataclasses

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetMaterialization,
    AssetSelection,
    build_sensor_context,
    instance_for_test,
    materialize,
)

from assets.search_index import search_index, search_index_current
from digest.ingest import ingest_paths
from digest.settings import load_settings
from pipelines.definitions import build_definitions
from pipelines.sensors import search_index_sensor
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


def _setup(tmp_path, **env):
    base = {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai", **env}
    settings = load_settings(base)
    definitions = build_definitions(dataclasses.replace(settings, model_url="http://127.0.0.1:9"))
    store = DigestStore(settings.db_path)
    store.migrate()
    return definitions, store


def _ingest(tmp_path, store, turns, name="bundle"):
    write_bundle(tmp_path / name, turns)
    ingest_paths([tmp_path / name], store)


def test_the_asset_indexes_what_changed_and_its_check_passes(tmp_path, instance):
    definitions, store = _setup(tmp_path)
    _ingest(tmp_path, store, make_turns("a", 3) + make_turns("b", 2))
    result = materialize([search_index, search_index_current], instance=instance, resources=definitions.resources)
    assert result.success
    meta = {k: v.value for k, v in result.asset_materializations_for_node("search_index")[0].metadata.items()}
    assert meta["sessions_indexed"] == 2 and meta["sessions"] == 2 and meta["sessions_behind"] == 0
    assert meta["documents"] == 5 + 2 and meta["size_bytes"] > 0  # five turns, each session's card
    [check] = result.get_asset_check_evaluations()
    assert check.passed and check.metadata["sessions_behind"].value == 0
    assert [h.session_id for h in store.search.sessions("grid")] == ["a", "b"]
    # Again with one new session: only it is indexed.
    _ingest(tmp_path, store, make_turns("c", 4), name="more")
    result = materialize([search_index], instance=instance, resources=definitions.resources)
    meta = {k: v.value for k, v in result.asset_materializations_for_node("search_index")[0].metadata.items()}
    assert (meta["sessions_indexed"], meta["sessions"], meta["documents"]) == (1, 3, 9 + 3)


def test_the_check_fails_when_a_change_waits_past_the_lag(tmp_path, instance):
    definitions, store = _setup(tmp_path, DIGEST_SEARCH_LAG_MAX_S="600")
    _ingest(tmp_path, store, make_turns("a", 3))
    with store.file.connect() as con:  # ingested an hour ago, never indexed
        con.execute("UPDATE sessions SET updated_at = now() - INTERVAL 1 HOUR")
    # The check alone, as the UI's "Execute" of a check runs it.
    result = materialize(
        [search_index, search_index_current],
        instance=instance,
        resources=definitions.resources,
        selection=AssetSelection.checks(search_index_current),
    )
    [check] = result.get_asset_check_evaluations()
    assert not check.passed
    assert check.metadata["finding"].value.startswith("1 session(s) behind the store; the oldest change waits 36")


def test_the_sensor_indexes_changed_sessions_and_skips_when_none_changed(tmp_path, instance):
    definitions, store = _setup(tmp_path)
    _ingest(tmp_path, store, make_turns("a", 3))

    def tick():
        with build_sensor_context(instance=instance, resources=definitions.resources) as context:
            return search_index_sensor(context)

    result = tick()
    [materialization] = [e for e in result.asset_events if isinstance(e, AssetMaterialization)]
    [check] = [e for e in result.asset_events if isinstance(e, AssetCheckEvaluation)]
    assert materialization.metadata["sessions_indexed"].value == 1 and check.passed
    assert tick().skip_message == "the search index is up to date"
