"""What a `session-digest` command costs as a process, in an old checkout and in this one side by side:
each command run in the old tree then in the new, alternately, several times, with the child's CPU
(user + system, from `RUSAGE_CHILDREN`) and its wall time; then the medians and the ratios new / old.

    PYTHONPATH=. python bench/cli_startup.py [--runs 5] [--scenarios sweep status search ingest]

The scenarios, each on homes of its arm's own:
- `sweep`: `sweep` on a home with nothing to do (the store and the instance made by a first sweep);
- `status`, `search`: on a home holding the bundled samples (ingested once per arm);
- `ingest`: the bundled samples into a new, empty home (a new home each run, as a test makes one).

The old arm is the tree of `--old-ref` read from git (`git archive`) into bench/out/. Both arms run
this interpreter (the lead's venv), each with its own tree alone on PYTHONPATH, with bytecode written
(a first run of each command, not counted, writes it): they differ only in the project's code. No
model is called: the model's URL is a closed port, and the samples' home has no search vectors.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _old_code import exported

ROOT = Path(__file__).resolve().parents[1]
OLD_REF = "27dc842"  # before the sweep's bookkeeping held one connection a phase
SAMPLES = ROOT / "samples" / "bundle"
SCENARIOS = ("sweep", "status", "search", "ingest")
QUERY = ["grid", "selection", "after", "sort", "--limit", "3"]


def arm_env(tree: Path, home: Path, embed: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIGEST_", "DAGSTER_"))}
    return {
        **env,
        "PYTHONPATH": str(tree),
        "PYTHONDONTWRITEBYTECODE": "",
        "DIGEST_HOME": str(home),
        "DIGEST_MODEL_PROVIDER": "openai",
        "DIGEST_MODEL_URL": "http://127.0.0.1:9",
        # The samples' home embeds nothing (vectors for them are a minute of CPU, not what is measured);
        # the empty home keeps the default, as a user's does.
        **({} if embed else {"DIGEST_EMBED_PROVIDER": "off"}),
    }


def run_cli(tree: Path, args: list[str], home: Path, embed: bool) -> dict:
    """One CLI process: its CPU s (user + system) and wall s."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=tree,
        env=arm_env(tree, home, embed),
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"`session-digest {' '.join(args)}` failed in {tree}:\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu": cpu, "wall": wall}


class Arm:
    """One tree and its homes under `work`."""

    def __init__(self, name: str, tree: Path, work: Path):
        self.name, self.tree, self.work = name, tree, work / name
        self.empty, self.samples = self.work / "empty", self.work / "samples"
        self.fresh = 0

    def prepare(self, scenarios: list[str]) -> None:
        if {"status", "search"} & set(scenarios):
            run_cli(self.tree, ["ingest", str(SAMPLES)], self.samples, embed=False)

    def run(self, scenario: str) -> dict:
        if scenario == "sweep":
            return run_cli(self.tree, ["sweep"], self.empty, embed=True)
        if scenario == "status":
            return run_cli(self.tree, ["status"], self.samples, embed=False)
        if scenario == "search":
            return run_cli(self.tree, ["search", *QUERY], self.samples, embed=False)
        self.fresh += 1
        home = self.work / f"ingest-{self.fresh}"
        try:
            return run_cli(self.tree, ["ingest", str(SAMPLES)], home, embed=False)
        finally:
            shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="counted runs of each command an arm (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="runs of each command an arm first, not counted")
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--old-ref", default=OLD_REF)
    parser.add_argument("--old-tree", type=Path, help=f"default: bench/out/old-cli-{OLD_REF}")
    parser.add_argument("--new", type=Path, default=ROOT, help="the checkout measured (default: this one)")
    args = parser.parse_args()
    old = exported(args.old_ref, args.old_tree or ROOT / "bench" / "out" / f"old-cli-{args.old_ref}")
    work = Path(tempfile.mkdtemp(prefix="cli-startup-"))
    try:
        arms = [Arm("old", old.resolve(), work), Arm("new", args.new.resolve(), work)]
        for arm in arms:
            arm.prepare(args.scenarios)
        load = [os.getloadavg()[0]]
        results = {(arm.name, s): [] for arm in arms for s in args.scenarios}
        print(
            f"CLI start-up: {args.runs} runs a command an arm, alternating; old {args.old_ref} ({old}), new {arms[1].tree}"
        )
        print(f"{'run':>4} {'command':>8} {'arm':>4} {'cpu s':>7} {'wall s':>7} {'load':>6}")
        for run in range(-args.warmup + 1, args.runs + 1):
            for scenario in args.scenarios:
                for arm in arms:
                    load.append(os.getloadavg()[0])
                    result = arm.run(scenario)
                    if run <= 0:
                        continue  # a warm-up: bytecode written, the empty home's store and instance made
                    results[(arm.name, scenario)].append(result)
                    print(
                        f"{run:>4} {scenario:>8} {arm.name:>4} {result['cpu']:>7.2f} {result['wall']:>7.2f} "
                        f"{load[-1]:>6.2f}",
                        flush=True,
                    )
        print("\n| command | CPU s old | CPU s new | CPU new / old | wall s old | wall s new | wall new / old |")
        print("|---|---|---|---|---|---|---|")
        for scenario in args.scenarios:
            cpu, wall = (
                {arm.name: statistics.median(r[key] for r in results[(arm.name, scenario)]) for arm in arms}
                for key in ("cpu", "wall")
            )
            print(
                f"| {scenario} | {cpu['old']:.2f} | {cpu['new']:.2f} | {cpu['new'] / cpu['old']:.2f} | "
                f"{wall['old']:.2f} | {wall['new']:.2f} | {wall['new'] / wall['old']:.2f} |"
            )
        print(f"\nmedians of {args.runs} runs; load average {min(load):.1f}-{max(load):.1f} over the runs")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
