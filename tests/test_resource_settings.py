"""The settings as the Dagster definitions' resources carry them: each setting one resource field,
bound to its env var, and what a resource hands a run. Integration: these build the project's
definitions and initialize its resources (Dagster imported, an ephemeral instance per resource),
which the unit tier does not (docs/testing.md)."""

from __future__ import annotations

import dataclasses
import json

from digest.model_api import StreamBounds
from digest.settings import SETTINGS, load_settings
from pipelines.definitions import build_definitions


def _shown(resource) -> dict:
    """The resource's configured values as the UI's Resources page shows them."""
    return json.loads(resource.get_resource_definition().config_schema.default_value_as_json_str)


def test_every_resource_field_is_one_setting(tmp_path):
    resources = build_definitions(load_settings({"DIGEST_HOME": str(tmp_path)})).resources
    configured = []
    for key, resource in resources.items():
        for name, field in type(resource).model_fields.items():
            env = field.json_schema_extra["env"]
            (setting,) = [s for s in SETTINGS if s.env == env and s.field == name]  # the same name
            assert setting.policy in (None, key), (key, name)
            assert field.description == f"{env}: {setting.doc}"  # the UI's Resources page shows it
            configured.append((env, name))
    assert len(set(configured)) == len(configured)
    # Every setting but the data folder and the Dagster instance's URL configures one resource field.
    unbound = {(s.env, s.field) for s in SETTINGS} - set(configured)
    assert unbound == {("DIGEST_HOME", "home"), ("DIGEST_DAGSTER_PG_URL", "dagster_pg_url")}
    # What `Settings` and the model resource share is named once, as `ModelSettings`.
    from digest.settings_fleet import ModelSettings

    assert set(ModelSettings.__annotations__) == set(type(resources["model"]).model_fields) - {"response_cache"}


def test_set_variables_are_bound_as_env_vars_and_resolve_to_the_loaded_values(tmp_path, monkeypatch):
    for name, value in {
        "DIGEST_HOME": str(tmp_path),
        "DIGEST_MODEL_PROVIDER": "openai",
        "DIGEST_MODEL_URL": "http://127.0.0.1:9",
        "DIGEST_SWEEP_MAX_SESSIONS": "7",
        "DIGEST_GRAPH_MAX_CHUNKS": "12",
        "DIGEST_MINI_SUMMARY_PRIORITY": "newest-first",
        "DIGEST_RAW_CAP_TOKENS": "off",  # Dagster cannot read `off` as a number: the value is shown
        "DIGEST_GRAPH_BUDGET_S": "90",  # nor any float
        "DIGEST_CONTEXT_LIMIT_TOKENS": " 65536",  # nor text that is not the value's own
    }.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    resources = build_definitions(settings).resources
    assert _shown(resources["model"])["model_url"] == {"env": "DIGEST_MODEL_URL"}
    assert _shown(resources["model"])["provider"] == {"env": "DIGEST_MODEL_PROVIDER"}
    assert _shown(resources["model"])["raw_cap_tokens"] is None
    assert _shown(resources["model"])["context_limit_tokens"] == 65536
    assert _shown(resources["sweep"])["max_sessions"] == {"env": "DIGEST_SWEEP_MAX_SESSIONS"}
    assert _shown(resources["graph"])["max_chunks"] == {"env": "DIGEST_GRAPH_MAX_CHUNKS"}
    assert _shown(resources["graph"])["budget_s"] == 90.0
    assert _shown(resources["mini_summaries"])["priority"] == {"env": "DIGEST_MINI_SUMMARY_PRIORITY"}
    # What a run sees: the same values as the settings loaded.
    assert resources["sweep"].process_config_and_initialize().policy() == settings.sweep
    assert resources["graph"].process_config_and_initialize().policy() == settings.graph
    assert resources["mini_summaries"].process_config_and_initialize().policy() == settings.mini_summaries
    with resources["model"].process_config_and_initialize_cm() as model:
        assert (model.model_url, model.provider, model.raw_cap_tokens) == ("http://127.0.0.1:9", "openai", None)


def test_a_value_other_than_the_env_var_is_not_bound_to_it(tmp_path, monkeypatch):
    """Settings changed in code (the CLI points the model at the server it started) win over the variable."""
    monkeypatch.setenv("DIGEST_MODEL_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("DIGEST_MODEL_NAME", "from-env")
    settings = load_settings({"DIGEST_HOME": str(tmp_path)})
    changed = dataclasses.replace(settings, model_url="http://127.0.0.1:8", model_name="in-code")
    with build_definitions(changed).resources["model"].process_config_and_initialize_cm() as model:
        assert (model.model_url, model.model_name) == ("http://127.0.0.1:8", "in-code")


def test_the_stream_bounds_are_settings_the_model_resource_hands_its_clients(tmp_path):
    env = {
        "DIGEST_HOME": str(tmp_path),
        "DIGEST_MODEL_PROVIDER": "ollama",
        "DIGEST_STREAM_EVENT_MAX_BYTES": "262144",
        "DIGEST_CALL_MAX_BYTES": "8388608",
    }
    with build_definitions(load_settings(env)).resources["model"].process_config_and_initialize_cm() as model:
        assert model.hosts.client().bounds == StreamBounds(event_max_bytes=262144, call_max_bytes=8388608)
