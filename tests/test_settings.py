from __future__ import annotations

import pytest

from digest.settings import DEFAULT_RAW_CAP_TOKENS, SettingsError, load_settings


def test_defaults_for_the_embedded_model(tmp_path):
    settings = load_settings({"DIGEST_HOME": str(tmp_path)})
    assert settings.provider == "embedded"
    assert settings.context_limit_tokens == 8192  # SmolLM2's own context
    assert settings.safe_limit_tokens == 6144  # 75% of the context
    assert settings.raw_cap_tokens == DEFAULT_RAW_CAP_TOKENS == 8192
    assert settings.bytes_per_token == 3.0
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
        ({"DIGEST_MODEL_PROVIDER": "gemini"}, "not one of embedded, openai, ollama"),
        ({"DIGEST_SAFE_LIMIT_TOKENS": "9000"}, "above DIGEST_CONTEXT_LIMIT_TOKENS=8192"),
    ],
)
def test_invalid_values_fail_loudly(env, message):
    with pytest.raises(SettingsError, match=message):
        load_settings(env)


def test_an_invalid_cap_fails_the_code_location_load(tmp_path):
    import subprocess
    import sys

    env = {"DIGEST_HOME": str(tmp_path), "DIGEST_RAW_CAP_TOKENS": "lots", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", "import pipelines.definitions"], env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "DIGEST_RAW_CAP_TOKENS='lots'" in done.stderr
