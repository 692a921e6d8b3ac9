"""What extracting each turn's facts at ingest (`digest/facts.py`, issue 34) costs, side by side in
one run: the realistic corpus (tests/realistic_corpus.py) in its harnesses' own log formats,
ingested into a fresh store with the facts and again with their extraction off; then the
extraction alone over every stored turn (its throughput, its slowest turn) and what it found.

    .venv/bin/python bench/facts.py [--sessions 120] [--seed 28]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ (the generator) is not installed

from digest.facts import extract_facts  # noqa: E402
from digest.ingest import ingest_paths  # noqa: E402
from resources.store import DigestStore  # noqa: E402
from tests.realistic_corpus import write_corpus  # noqa: E402


def ingest_seconds(corpus: Path, store_path: Path, facts: bool) -> tuple[float, DigestStore]:
    store = DigestStore(store_path)
    store.migrate()
    started = time.perf_counter()
    if facts:
        ingest_paths([corpus], store)
    else:
        with mock.patch("resources.store.ingest.replace_turn_facts", lambda con, rows: 0):
            ingest_paths([corpus], store)
    return time.perf_counter() - started, store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=120)
    parser.add_argument("--seed", type=int, default=28)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        write_corpus(corpus, sessions=args.sessions, seed=args.seed, harness=True)
        corpus_bytes = sum(p.stat().st_size for p in corpus.iterdir())
        # Off first, then on: the second run finds the files in the page cache either way.
        ingest_seconds(corpus, Path(tmp) / "warm.duckdb", facts=False)
        off, _ = ingest_seconds(corpus, Path(tmp) / "off.duckdb", facts=False)
        on, store = ingest_seconds(corpus, Path(tmp) / "on.duckdb", facts=True)
        with store.file.connect() as con:
            turns = con.execute("SELECT prompt, response, agent FROM turns").fetchall()
            stored = dict(con.execute("SELECT kind, count(*) FROM turn_facts GROUP BY 1").fetchall())
        per_turn, found = [], Counter()
        started = time.perf_counter()
        for prompt, response, agent in turns:
            at = time.perf_counter()
            facts = extract_facts(prompt, response, agent)
            per_turn.append(time.perf_counter() - at)
            found.update(f.kind for f in facts)
        alone = time.perf_counter() - started
    text_mb = sum(len(p or "") + len(r or "") for p, r, _ in turns) / 1e6
    print(
        f"corpus: {args.sessions} sessions, {len(turns):,} turns, {corpus_bytes / 1e6:.1f} MB of logs (seed {args.seed})"
    )
    print(f"ingest without facts:  {off:7.2f} s")
    print(f"ingest with facts:     {on:7.2f} s")
    print(f"ratio (with / without): {on / off:.2f}")
    print(
        f"extraction alone: {alone:.2f} s for {text_mb:.1f} MB of turn text ({text_mb / alone:.1f} MB/s, "
        f"{len(turns) / alone:,.0f} turns/s); per turn median {statistics.median(per_turn) * 1e3:.2f} ms, "
        f"max {max(per_turn) * 1e3:.1f} ms"
    )
    print("facts stored by kind: " + ", ".join(f"{k} {n:,}" for k, n in sorted(stored.items())))
    assert sum(stored.values()) == sum(found.values()), "the stored facts are the extraction's"


if __name__ == "__main__":
    main()
