from __future__ import annotations

import pytest

from digest.settings import (
    DEFAULT_RAW_CAP_TOKENS,
    POLICIES,
    SETTINGS,
    SettingsError,
    load_settings,
    settings_table,
    table_envs,
)


def test_defaults_for_the_embedded_model(tmp_path):
    settings = load_settings({"DIGEST_HOME": str(tmp_path)})
    assert settings.provider == "embedded"
    assert settings.context_limit_tokens == 8192  # SmolLM2's own context
    assert settings.safe_limit_tokens == 6144  # 75% of the context
    assert settings.raw_cap_tokens == DEFAULT_RAW_CAP_TOKENS == 8192
    assert settings.bytes_per_token is None  # not pinned: measured from the ledger, else 3.0
    assert settings.limits().bytes_per_token == 3.0
    assert settings.summary_timeout_s == 180.0
    assert settings.db_path == tmp_path / "digest.duckdb"
    assert settings.inbox == tmp_path / "inbox"


def test_remote_providers_default_to_the_reference_context():
    settings = load_settings({"DIGEST_MODEL_PROVIDER": "ollama"})
    assert settings.context_limit_tokens == 131072
    assert settings.safe_limit_tokens == 98304


def test_env_overrides():
    settings = load_settings(
        {
            "DIGEST_RAW_CAP_TOKENS": "20000",
            "DIGEST_CONTEXT_LIMIT_TOKENS": "65536",
            "DIGEST_SAFE_LIMIT_TOKENS": "40000",
            "DIGEST_BYTES_PER_TOKEN": "4.5",
            "DIGEST_SUMMARY_TIMEOUT_S": "30",
            "DIGEST_MODEL_PROVIDER": "openai",
            "DIGEST_MODEL_URL": "http://127.0.0.1:9999",
        }
    )
    assert settings.raw_cap_tokens == 20000
    assert (settings.context_limit_tokens, settings.safe_limit_tokens) == (65536, 40000)
    assert settings.bytes_per_token == 4.5 and settings.summary_timeout_s == 30.0
    assert settings.model_url == "http://127.0.0.1:9999"


@pytest.mark.parametrize("value", ["off", "OFF", " off "])
def test_raw_cap_off(value):
    assert load_settings({"DIGEST_RAW_CAP_TOKENS": value}).raw_cap_tokens is None


@pytest.mark.parametrize(
    "env, message",
    [
        ({"DIGEST_RAW_CAP_TOKENS": "8k"}, "DIGEST_RAW_CAP_TOKENS='8k' is neither"),
        ({"DIGEST_RAW_CAP_TOKENS": "0"}, "must be at least 1"),
        ({"DIGEST_RAW_CAP_TOKENS": "-5"}, "must be at least 1"),
        ({"DIGEST_CONTEXT_LIMIT_TOKENS": "lots"}, "DIGEST_CONTEXT_LIMIT_TOKENS='lots'"),
        ({"DIGEST_BYTES_PER_TOKEN": "0"}, "positive finite"),
        ({"DIGEST_BYTES_PER_TOKEN": "nan"}, "positive finite"),
        ({"DIGEST_BYTES_PER_TOKEN": "fast"}, "DIGEST_BYTES_PER_TOKEN='fast' is not a number"),
        ({"DIGEST_JUNK_SHARE_MAX": "most"}, "DIGEST_JUNK_SHARE_MAX='most' is not a number"),
        ({"DIGEST_JUNK_SHARE_MAX": "1.5"}, "must be a share from 0 to 1"),
        ({"DIGEST_MODEL_PROVIDER": "gemini"}, "not one of embedded, openai, ollama"),
        ({"DIGEST_SAFE_LIMIT_TOKENS": "9000"}, "above DIGEST_CONTEXT_LIMIT_TOKENS=8192"),
        # Issue 22, defect 8: past what the store's INT32 columns hold, refused at load.
        ({"DIGEST_CONTEXT_LIMIT_TOKENS": str(2**70)}, "must be at most 16777216"),
        ({"DIGEST_RAW_CAP_TOKENS": str(2**31)}, "must be at most 16777216"),
        ({"DIGEST_SUMMARY_MAX_OUTPUT_TOKENS": str(2**40)}, "must be at most 2147483647"),
    ],
)
def test_invalid_values_fail_loudly(env, message):
    with pytest.raises(SettingsError, match=message):
        load_settings(env)


# --- the resources, from the settings table -------------------------------------------------------


def _shown(resource) -> dict:
    """The resource's configured values as the UI's Resources page shows them."""
    import json

    return json.loads(resource.get_resource_definition().config_schema.default_value_as_json_str)


def test_every_resource_field_is_one_setting(tmp_path):
    from pipelines.definitions import build_definitions

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
    from pipelines.definitions import build_definitions

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
    import dataclasses

    from pipelines.definitions import build_definitions

    monkeypatch.setenv("DIGEST_MODEL_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("DIGEST_MODEL_NAME", "from-env")
    settings = load_settings({"DIGEST_HOME": str(tmp_path)})
    changed = dataclasses.replace(settings, model_url="http://127.0.0.1:8", model_name="in-code")
    with build_definitions(changed).resources["model"].process_config_and_initialize_cm() as model:
        assert (model.model_url, model.model_name) == ("http://127.0.0.1:8", "in-code")


def test_a_policy_default_is_its_setting_default():
    """The policy dataclasses keep defaults of their own, for the code that builds one without
    settings: they are the settings' constant defaults."""
    import dataclasses

    for setting in SETTINGS:
        if setting.policy is not None and not callable(setting.default):
            (field,) = [f for f in dataclasses.fields(POLICIES[setting.policy]) if f.name == setting.field]
            assert field.default in (dataclasses.MISSING, setting.default), setting.env


def test_the_settings_page_lists_every_setting_and_no_other():
    import re
    from pathlib import Path

    page = (Path(__file__).parent.parent / "docs" / "settings.md").read_text()
    first_cells = [line.split("|")[1] for line in page.splitlines() if line.startswith("| `")]
    assert set(re.findall(r"`(DIGEST_[A-Z_]+)`", "\n".join(first_cells))) == {s.env for s in SETTINGS}


def test_the_settings_tables_are_written_from_the_settings():
    """A setting added, or its default or doc changed, without `python -m digest.settings` fails here."""
    from pathlib import Path

    root = Path(__file__).parent.parent
    assert settings_table() in (root / "docs" / "settings.md").read_text()
    readme = (root / "README.md").read_text()
    assert settings_table(table_envs(readme), docs="docs/") in readme
