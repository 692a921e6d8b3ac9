"""Streams that misbehave within the protocol, against the client before issue 31's fixes and now:
what one call holds, how long it runs, and how it is filed and counted against its host.

Run: .venv/bin/python bench/stream_faults.py [--smoke]   # --smoke: short windows, for the test suite

- Old: the code at `--old-ref` (bb7ca02, before the fixes), exported with `git archive` into
  `bench/out/stream-faults-<ref>` (made if missing); new: this checkout. Each call runs in a fresh
  interpreter of its arm, so its peak RSS is its own; the server is this checkout's
  `tests/fault_server.py`, on loopback, for both arms.
- flood: 64 KB `data:` lines with no event end (OpenAI protocol), stall window `--stall`;
  empty: well-formed chunks with no text every 50 ms; runaway: one-character pieces every 10 ms,
  output cap `--output-cap`; error: a 200 stream whose first chunk is llama.cpp's server_error object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from _old_code import exported

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fault_server import FaultServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OLD_REF = "bb7ca02"
RESULT_MARK = "RESULT "
SCENARIOS = (  # (name, fault, gap between pieces)
    ("flood", "stream-flood", 0.0),
    ("empty", "stream-empty", 0.05),
    ("runaway", "stream-runaway", 0.01),
    ("error", "stream-error", 0.0),
)

# One call in a fresh interpreter of an arm: its outcome, seconds and peak RSS.
DRIVER = """
import json, resource, sys, time
from digest.circuit import is_host_failure
from digest.friction import classify_error
from digest.model_api import ModelError
from resources.model_clients import OllamaChatClient, OpenAIChatClient
protocol, url, ceiling, stall, cap = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
if protocol == "openai":
    client = OpenAIChatClient(url, "m", schema_style="json_object")
else:
    client = OllamaChatClient(url, "m", num_ctx=4096)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.monotonic()
result = {}
try:
    client.chat("Summarize.", schema=None, max_output_tokens=cap, timeout_s=ceiling, stall_s=stall)
    result["outcome"] = "ok"
except ModelError as error:
    result = {
        "outcome": f"{type(error).__name__} ({classify_error(error)})",
        "host_failure": is_host_failure(error) and not getattr(error, "progressing", False),
    }
result["seconds"] = time.monotonic() - started
result["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
result["rss_before_mb"] = before / 1024
print("RESULT " + json.dumps(result))
"""


def one_call(tree: Path, protocol: str, url: str, ceiling_s: float, stall_s: float, cap: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    process = subprocess.run(
        [sys.executable, "-c", DRIVER, protocol, url, str(ceiling_s), str(stall_s), str(cap)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=ceiling_s + 60,
    )
    for line in reversed(process.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK) :])
    return {"outcome": f"exit {process.returncode}: {process.stderr[-300:]}", "seconds": 0.0, "rss_mb": 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ceiling", type=float, default=20.0, help="the call's wall-clock ceiling, seconds")
    parser.add_argument("--stall", type=float, default=5.0, help="the call's stall window, seconds")
    parser.add_argument("--output-cap", type=int, default=256, help="the call's max_tokens / num_predict")
    parser.add_argument("--old-ref", default=OLD_REF)
    parser.add_argument("--smoke", action="store_true", help="a 3 s ceiling, a 1 s stall window, an output cap of 32")
    args = parser.parse_args()
    ceiling_s, stall_s, cap = (3.0, 1.0, 32) if args.smoke else (args.ceiling, args.stall, args.output_cap)
    arms = {"old": exported(args.old_ref, ROOT / "bench" / "out" / f"stream-faults-{args.old_ref}"), "new": ROOT}
    print(
        f"ceiling {ceiling_s:g} s, stall window {stall_s:g} s, output cap {cap}; old = {args.old_ref}, new = this checkout"
    )
    header = (
        f"{'scenario':<9} {'protocol':<7} {'arm':<4} {'outcome':<44} {'host':>5} {'seconds':>8} {'peak RSS MB':>12}"
    )
    print(header)
    given_up: dict[str, dict[str, float]] = {}
    for name, fault, gap_s in SCENARIOS:
        for protocol in ("openai",) if name == "flood" else ("openai", "ollama"):
            for arm, tree in arms.items():
                with FaultServer(fault, gap_s=gap_s) as server:
                    r = one_call(tree, protocol, server.url, ceiling_s, stall_s, cap)
                given_up.setdefault(f"{name} {protocol}", {})[arm] = r["seconds"]
                host = "" if "host_failure" not in r else ("yes" if r["host_failure"] else "no")
                print(
                    f"{name:<9} {protocol:<7} {arm:<4} {r['outcome'][:44]:<44} {host:>5} {r['seconds']:>8.2f} "
                    f"{r['rss_mb']:>12.0f}"
                )
    print("time to give up, old / new:")
    for key, arms_s in given_up.items():
        if arms_s.get("new"):
            print(f"  {key:<16} {arms_s['old'] / arms_s['new']:6.1f}x  ({arms_s['old']:.2f} s / {arms_s['new']:.2f} s)")


if __name__ == "__main__":
    main()
