from __future__ import annotations

import pytest

from digest.hosts import DEFAULT_RAW_CAP_TOKENS
from digest.settings import (
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
