"""`dg check defs`, Dagster's own check of the code location, passes from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_dg_check_defs_loads_the_code_location(tmp_path):
    dg = Path(sys.executable).parent / "dg"
    env = {
        **os.environ,
        "DIGEST_HOME": str(tmp_path / "home"),
        "DAGSTER_HOME": str(tmp_path / "dagster"),
        "VIRTUAL_ENV": sys.prefix,  # the project's env, as an activated shell has it
    }
    (tmp_path / "dagster").mkdir()
    done = subprocess.run([str(dg), "check", "defs"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "All definitions loaded successfully." in done.stdout + done.stderr
