"""A small write's CPU (`store.ingest.write_turns` of a few turns of a new session: the turns, their
facts, the session's row, card and fidelity terms, one transaction) in two checkouts side by side:
each run writes in the old tree then in the new, alternately, and prints the CPU a write took there;
then the medians and the ratio new / old.

    python bench/small_writes.py --old /path/to/old/checkout [--new .] [--runs 3] [--writes 40] [--turns 2]

Each arm is a process of this interpreter with its tree first on PYTHONPATH, on a migrated store of
its own held by one connection (as an ingest's files are); the first writes warm it and are not
counted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARM_WRITES = 5
T0 = 1_760_000_000_000


def turn(session_id: str, n: int) -> dict:
    prompt = f"fix the ReconnectLoop in src/net/ws_client.py, see https://github.com/acme/app/issues/{n + 30}"
    response = "ran `pytest tests/test_ws.py -q`: 12 passed; edited src/net/ws_client.py"
    return {
        "id": f"{session_id}-t{n:03d}", "session_id": session_id, "ts_ms": T0 + n * 60_000,
        "type": "agent-interaction", "prompt": prompt, "response": response,
        "document": f"User Prompt: {prompt}\nAgent Response: {response}", "document_rebuilt": False,
        "source_file": "f.jsonl", "source_line": n + 1,
    }  # fmt: skip


def arm(writes: int, turns: int) -> dict:
    """In this process's tree: the CPU ms of each write after the warm ones."""
    from resources.store import DigestStore

    with tempfile.TemporaryDirectory() as folder:
        store = DigestStore(Path(folder) / "digest.duckdb")
        store.migrate()
        cpu_ms = []
        with store.file.held():
            for n in range(WARM_WRITES + writes):
                rows = [turn(f"s{n}", t) for t in range(turns)]
                before = resource.getrusage(resource.RUSAGE_SELF)
                store.ingest.write_turns(rows)
                after = resource.getrusage(resource.RUSAGE_SELF)
                if n >= WARM_WRITES:
                    cpu_ms.append(1000 * (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime))
    return {"cpu_ms": statistics.median(cpu_ms)}


def run_arm(tree: Path, writes: int, turns: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    load = os.getloadavg()[0]
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--arm", "--writes", str(writes), "--turns", str(turns)],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the writes failed in {tree}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "load": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, help="the checkout to compare against")
    parser.add_argument("--new", type=Path, default=ROOT, help="the checkout measured (default: this one)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each arm, alternating (default 3)")
    parser.add_argument("--writes", type=int, default=40, help="writes counted a run (default 40)")
    parser.add_argument("--turns", type=int, default=2, help="turns a write (default 2)")
    parser.add_argument("--arm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(arm(args.writes, args.turns)))
        return
    if args.old is None:
        parser.error("--old is required")
    arms = {"old": args.old.resolve(), "new": args.new.resolve()}
    results: dict[str, list[dict]] = {name: [] for name in arms}
    print(f"small writes: {args.writes} writes of {args.turns} turns a run, {args.runs} runs an arm, alternating")
    print(f"{'run':>4} {'arm':>4} {'ms CPU a write':>15} {'load':>6}")
    for run in range(1, args.runs + 1):
        for name, tree in arms.items():
            result = run_arm(tree, args.writes, args.turns)
            results[name].append(result)
            print(f"{run:>4} {name:>4} {result['cpu_ms']:>15.1f} {result['load']:>6.2f}", flush=True)
    medians = {name: statistics.median(r["cpu_ms"] for r in rows) for name, rows in results.items()}
    for name in arms:
        print(f"median {name}: {medians[name]:.1f} ms CPU a write")
    print(f"ratio new / old: CPU {medians['new'] / medians['old']:.2f}")


if __name__ == "__main__":
    main()
