"""The unit tier's cost (`make test-fast`) in two checkouts side by side: each run of the tier in
the old tree then in the new, alternately, in the same minutes, with its wall time, its CPU (user +
system of the pytest process and its children) and the load average at its start; then the
medians and the ratios new / old.

    python bench/unit_tier.py --old /path/to/old/checkout [--new .] [--runs 3]

Each tree runs with itself first on PYTHONPATH and this interpreter (the lead's venv), so both arms
import the same packages and differ only in the project's code and tests.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `make test-fast`'s command, the cache provider off so neither arm's run leaves state for the next.
UNIT_TIER = [
    "-m",
    "pytest",
    "-m",
    "unit",
    "-q",
    "-p",
    "no:hypothesispytest",
    "-p",
    "no:anyio",
    "-p",
    "no:cacheprovider",
]


def run_tier(tree: Path, tests: list[str]) -> dict:
    """One run of the unit tier in `tree`: wall s, CPU s, load average at the start, the summary line."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": ""}
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *UNIT_TIER, *tests], cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0:
        raise SystemExit(f"the unit tier failed in {tree}:\n" + "\n".join(lines[-20:]) + done.stderr[-2000:])
    return {"wall": wall, "cpu": cpu, "load": load, "summary": lines[-1] if lines else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--new", type=Path, default=ROOT, help="the checkout measured (default: this one)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each arm, alternating (default 3)")
    parser.add_argument("--tests", nargs="*", default=[], help="test files to run instead of the whole tier")
    args = parser.parse_args()
    arms = {"old": args.old.resolve(), "new": args.new.resolve()}
    results: dict[str, list[dict]] = {name: [] for name in arms}
    print(f"unit tier: {args.runs} runs an arm, alternating; old {arms['old']}, new {arms['new']}")
    print(f"{'run':>4} {'arm':>4} {'wall s':>8} {'cpu s':>7} {'load':>6}  pytest")
    for run in range(1, args.runs + 1):
        for name, tree in arms.items():
            result = run_tier(tree, args.tests)
            results[name].append(result)
            print(
                f"{run:>4} {name:>4} {result['wall']:>8.2f} {result['cpu']:>7.2f} {result['load']:>6.2f}  "
                f"{result['summary']}",
                flush=True,
            )
    medians = {
        name: {k: statistics.median(r[k] for r in rows) for k in ("wall", "cpu")} for name, rows in results.items()
    }
    for name, median in medians.items():
        print(f"median {name}: {median['wall']:.2f} s wall, {median['cpu']:.2f} s CPU")
    print(
        f"ratio new / old: wall {medians['new']['wall'] / medians['old']['wall']:.2f}, "
        f"CPU {medians['new']['cpu'] / medians['old']['cpu']:.2f}"
    )


if __name__ == "__main__":
    main()
