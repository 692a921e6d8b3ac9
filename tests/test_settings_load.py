"""The settings as the code location loads them, in a fresh process: a bad value stops the load
with the variable named. (A subprocess importing Dagster: the integration tier; the settings' own
tests are in test_settings.py.)"""

from __future__ import annotations

import subprocess
import sys


def test_an_invalid_cap_fails_the_code_location_load(tmp_path):
    env = {"DIGEST_HOME": str(tmp_path), "DIGEST_RAW_CAP_TOKENS": "lots", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", "import pipelines.definitions"], env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "DIGEST_RAW_CAP_TOKENS='lots'" in done.stderr
