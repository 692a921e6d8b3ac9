"""Sessions of real transcripts' sizes (issue 28): ingest, routes, repeats, and the backlog's model
time against the floor, with the embedded model, in one run.

Run: PYTHONPATH=. .venv/bin/python bench/real_transcripts.py [--sessions 290] [--seed 28]
                                                              [--sample-seconds 600]

1. the corpus: `tests/realistic_corpus.py` (the size distribution measured on 290 public
   transcripts), its figures beside the targets, and the bytes in repeated 40+ character lines
   (`digest.repeats`);
2. ingest: `session-digest ingest` of the corpus in a child process, its wall time and peak RSS;
3. routes: every session through the project's routing (`digest.synthesis`, the estimate at 3
   bytes a token) at the default 8192-token cap on a large-context host, and at the embedded
   host's bound (the cap, its 6144-token safe band): raw, over the bound (mini summaries owed),
   and compact prompts whose lines must be cut to fit;
4. the host: the embedded SmolLM2 server's prompt rate (tokens/s) and bytes a token measured on the
   corpus's own text, and its answer rate; the **floor** is the corpus's bytes at that bytes a
   token, over that prompt rate: the time to read every session once;
5. the sample: sessions of the corpus (alternately within and over the bound, in a seeded order) whose
   predicted model time fits `--sample-seconds`, ingested into a store of their own and drained as
   `session-digest demo` does (`app.drain.drain`, one Dagster run per session or backfill:
   first summaries, the mini-summary backfill, the upgrades) until nothing is left: model seconds per
   session by route and tier, the sample's backlog against its floor, and the measured early-summary
   curve (share of sessions with a summary over model time, from the attempts ledger);
6. the projection: each call's seconds fitted on the sample (a + b x prompt tokens, per stage) and
   applied to every session of the corpus as its route would call the model: the backlog's model
   time against the corpus's floor, once with a session's calls in the order before issue 28.4 (mini
   summaries, then one summary), once in the order since (every first summary, then the backfill
   and up to two upgrades a session), with that order's curve.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ (the generator) is not installed

import httpx  # noqa: E402

from digest.attempts import MINI_SUMMARY_STAGE, SUMMARY_STAGE  # noqa: E402
from digest.friction_report import first_summary_curve, seconds_to_share  # noqa: E402
from digest.mini_summaries import MAX_OUTPUT_TOKENS, split_document  # noqa: E402
from digest.mini_summaries import build_prompt as mini_prompt  # noqa: E402
from digest.repeats import drop_repeated_lines, repeated_bytes  # noqa: E402
from digest.scheduling import UPGRADE_COVERAGE  # noqa: E402
from digest.settings import load_settings  # noqa: E402
from digest.synthesis import (  # noqa: E402
    COMPACT_LINE_OVERHEAD,
    FALLBACK_CHARS,
    Route,
    build_prompt,
    compact_content,
    compact_entries,
    raw_content,
    raw_route,
)
from digest.turns import canonical_order  # noqa: E402
from resources.store import DigestStore  # noqa: E402
from tests.realistic_corpus import TARGETS, size_figures, write_corpus  # noqa: E402

# A probe of the prompt rate: a few thousand bytes of the corpus's text (a second or two on a quiet
# host, a few minutes on a busy one).
PROBE_BYTES = 3000
CHILD_INGEST = """
import resource, sys
from app.cli import main
try:
    main(["ingest", sys.argv[1], "--json"])
finally:
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)
"""


def home_env(home: Path, **extra: str) -> dict[str, str]:
    return {"DIGEST_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), **extra}


def ingest_child(home: Path, corpus: Path) -> tuple[float, float]:
    """`session-digest ingest` in a child process: its wall time and its own peak RSS in MB."""
    (home / "dagster").mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD_INGEST, str(corpus)],
        env={**os.environ, **home_env(home), "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"ingest failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - started, float(done.stderr.strip().splitlines()[-1])


def limits_of(**env: str):
    """The default host's limits under these settings (nothing measured: 3 bytes a token)."""
    return load_settings({**home_env(Path("/nonexistent")), **env}).fleet.limits()


def session_facts(store: DigestStore, limits_by_name: dict) -> list[dict]:
    """Per session: its documents' bytes, repeats, and its route under each named limits."""
    rows = store.query("SELECT session_id, last_activity_ms FROM sessions ORDER BY session_id").values.tolist()
    ids, activity = [r[0] for r in rows], {r[0]: r[1] for r in rows}
    facts = []
    for start in range(0, len(ids), 50):
        turns = store.sessions.load_turns(ids[start : start + 50])
        by_session: dict[str, list] = {}
        for t in turns:
            by_session.setdefault(t.session_id, []).append(t)
        for session_id, group in by_session.items():
            ordered = canonical_order(group)
            raw_prompt = build_prompt(raw_content(ordered), ordered)
            repeated, total = repeated_bytes(t.document for t in ordered)
            fact = {
                "session_id": session_id,
                "last_activity_ms": activity[session_id] or 0,
                "turns": len(ordered),
                "bytes": sum(len(t.document.encode("utf-8")) for t in ordered),
                "raw_prompt_bytes": len(raw_prompt.encode("utf-8")),
                "repeated": repeated,
                "repeat_total": total,
                "routes": {},
            }
            for name, limits in limits_by_name.items():
                route = raw_route(limits.estimate_tokens(raw_prompt), limits)
                fact["routes"][name] = route
                if route != Route.WITHIN_CAP:
                    compact = build_prompt(compact_content(compact_entries(ordered).entries), ordered)
                    fact[f"{name}_compact_cut"] = limits.estimate_tokens(compact) > limits.prompt_budget_tokens
                    # The first summary's prompt: truncated lines, no mini summary yet, cut to the budget.
                    budget_bytes = limits.prompt_budget_tokens * limits.bytes_per_token
                    fact[f"{name}_first_compact_bytes"] = min(len(compact.encode("utf-8")), budget_bytes)
            # A mini summary's prompt as `fill_mini_summaries` builds it, held to its budget.
            mini = dataclasses.replace(limits_by_name["embedded"], max_output_tokens=MAX_OUTPUT_TOKENS)
            mini_budget = int(mini.prompt_budget_tokens * mini.bytes_per_token)
            texts = [split_document(t.document) for t in ordered]
            fact["mini_prompt_bytes_all"] = [len(mini_prompt(*t, max_bytes=mini_budget).encode()) for t in texts]
            seen: set[str] = set()  # as `without_repeats` sends them: what an earlier turn showed, left out
            kept = [(drop_repeated_lines(p, seen), drop_repeated_lines(r, seen)) for p, r in texts]
            fact["mini_prompt_bytes"] = [len(mini_prompt(*t, max_bytes=mini_budget).encode()) for t in kept]
            facts.append(fact)
    return facts


def chat(url: str, text: str, max_tokens: int) -> tuple[int, int, float]:
    started = time.perf_counter()
    reply = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "smollm2", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens},
        timeout=600,
    )
    reply.raise_for_status()
    usage = reply.json()["usage"]
    return usage["prompt_tokens"], usage["completion_tokens"], time.perf_counter() - started


def host_rates(url: str, corpus: Path, probes: int) -> dict:
    """Prompt tokens/s and bytes a token on the corpus's own text (distinct texts: no prompt cache
    helps), and the answer's tokens/s."""
    longest: dict[str, str] = {}
    with corpus.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            if len(row["response"]) > len(longest.get(row["session_id"], "")):
                longest[row["session_id"]] = row["response"]
    texts = [
        t.encode("utf-8")[:PROBE_BYTES].decode("utf-8", "ignore") for t in sorted(longest.values(), key=len)[-probes:]
    ]
    tokens = seconds = size = 0
    for text in texts:
        prompt_tokens, _, took = chat(url, text, 1)
        tokens, seconds, size = tokens + prompt_tokens, seconds + took, size + len(text.encode("utf-8"))
    short_tokens, answer_tokens, took = chat(url, "Tell a long story about a lighthouse keeper.", 48)
    return {
        "prompt_tps": tokens / seconds,
        "bytes_per_token": size / tokens,
        "answer_tps": answer_tokens / max(0.01, took - short_tokens / (tokens / seconds)),
    }


def predicted_s(fact: dict, rates: dict, limits) -> float:
    """A rough model time of one session, to pick a sample that fits its budget."""
    per_token = 1 / (rates["bytes_per_token"] * rates["prompt_tps"])
    answer = 150 / rates["answer_tps"]
    if fact["routes"]["embedded"] == Route.WITHIN_CAP:
        return fact["raw_prompt_bytes"] * per_token + answer
    minis = sum(b * per_token + 60 / rates["answer_tps"] for b in fact["mini_prompt_bytes"])
    compact = min(fact["turns"] * 220 + 800, limits.prompt_budget_tokens * limits.bytes_per_token)
    first = fact["embedded_first_compact_bytes"] * per_token + answer  # the first summary, truncated lines
    return first + minis + compact * per_token + answer


def pick_sample(facts: list[dict], rates: dict, limits, budget_s: float, seed: int) -> list[dict]:
    """The quickest session within the bound and the quickest over it, whatever the budget, then
    more in a seeded order, alternately within and over the bound, while the budget lasts. A budget
    of 0: the quickest session alone (the smoke test's)."""
    if budget_s <= 0:
        return [min(facts, key=lambda f: predicted_s(f, rates, limits))]
    order = sorted(facts, key=lambda f: f["session_id"])
    random.Random(seed).shuffle(order)
    pools = {
        True: [f for f in order if f["routes"]["embedded"] == Route.WITHIN_CAP],
        False: [f for f in order if f["routes"]["embedded"] != Route.WITHIN_CAP],
    }
    chosen = []
    for pool in pools.values():
        if pool:
            quickest = min(pool, key=lambda f: predicted_s(f, rates, limits))
            chosen.append(quickest)
            pool.remove(quickest)
    spent = sum(predicted_s(f, rates, limits) for f in chosen)
    raw_turn = True
    while True:
        fitting = [f for f in pools[raw_turn] if spent + predicted_s(f, rates, limits) <= budget_s]
        if not fitting:
            raw_turn = not raw_turn
            fitting = [f for f in pools[raw_turn] if spent + predicted_s(f, rates, limits) <= budget_s]
            if not fitting:
                return chosen
        chosen.append(fitting[0])
        spent += predicted_s(fitting[0], rates, limits)
        pools[raw_turn].remove(fitting[0])
        raw_turn = not raw_turn


def sweep_sample(home: Path, corpus: Path, sample: list[dict], url: str) -> DigestStore:
    """The sample's sessions ingested and drained as `session-digest demo` does (`app.drain.drain`): first
    summaries, then the mini-summary backfill in runs of the default budget, then the upgrades."""
    keep = {f["session_id"] for f in sample}
    folder = home / "in"
    folder.mkdir(parents=True)
    with corpus.open(encoding="utf-8") as lines, (folder / "sample.jsonl").open("w", encoding="utf-8") as out:
        for line in lines:
            if json.loads(line)["session_id"] in keep:
                out.write(line)
    os.environ.update(
        home_env(
            home,
            DIGEST_MODEL_PROVIDER="embedded",
            DIGEST_MODEL_URL=url,
            DIGEST_RESPONSE_CACHE="off",
            # Generous first deadlines: a shared 2-core host; a call's time is the same either way.
            DIGEST_SUMMARY_TIMEOUT_S="600",
            DIGEST_MINI_SUMMARY_TIMEOUT_S="300",
            DIGEST_MINI_SUMMARY_OUTER_TIMEOUT_S="450",
        )
    )
    (home / "dagster").mkdir(parents=True, exist_ok=True)
    from app import runs
    from app.console import Output
    from app.drain import drain
    from pipelines.instance import write_instance_config

    settings = load_settings(dict(os.environ))
    write_instance_config(home / "dagster", settings)
    with contextlib.redirect_stdout(io.StringIO()):
        runs.ingest(settings, [str(folder)])
        drain(settings, Output(as_json=True))
    return DigestStore(settings.db_path)


def say_curve(name: str, curve: list, model_s: float, say) -> None:
    """The share of sessions with a summary at 10/25/50/75/100% of the model time, and the half-time point."""
    shares = (0.1, 0.25, 0.5, 0.75, 1.0)
    at = [max((p.share for p in curve if p.model_seconds <= share * model_s + 1e-9), default=0.0) for share in shares]
    points = ", ".join(f"{share:.0%}: {a:.0%}" for share, a in zip(shares, at, strict=True))
    say(name, f"sessions with a summary at a share of the model time: {points}")
    full = seconds_to_share(curve, 1.0)
    say("  half-time point", f"{at[2]:.0%} of sessions summarized at half the model time; all at "
        + (f"{full:.0f} s = {full / model_s:.0%} of it" if full is not None else "never"))  # fmt: skip


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares y = a + b x (a mean when x does not vary)."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    if var == 0:
        return my, 0.0
    b = sum((x - mx) * (y - my) for x, y in points) / var
    return my - b * mx, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=290)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--sample-seconds", type=float, default=600.0, help="predicted model time of the sample")
    parser.add_argument("--probes", type=int, default=2, help="calls that measure the prompt rate")
    args = parser.parse_args()
    load_start = os.getloadavg()

    def say(name: str, value: str) -> None:
        print(f"{name:<34}  {value}", flush=True)

    (ROOT / "bench" / "out").mkdir(exist_ok=True)  # never committed
    root = Path(tempfile.mkdtemp(dir=ROOT / "bench" / "out"))
    try:
        measure(args, root, say)
    except BaseException:
        print(f"failed; its corpus and stores are kept in {root}", file=sys.stderr)
        raise
    shutil.rmtree(root)
    ends = os.getloadavg()
    say("load average", f"{load_start[0]:.2f} at the start, {ends[0]:.2f} at the end (1 min; 15 min: {ends[2]:.2f})")


def measure(args, root: Path, say) -> None:
    started = time.perf_counter()
    plans = write_corpus(root / "corpus", args.sessions, args.seed)
    corpus = root / "corpus" / f"corpus-{args.seed}.jsonl"
    say("corpus written", f"{args.sessions} sessions, {corpus.stat().st_size / 1e6:.1f} MB, "
        f"{time.perf_counter() - started:.1f} s (seed {args.seed})")  # fmt: skip
    figures = size_figures(plans)
    for name, target in TARGETS.items():
        if name in figures:
            value = figures[name]
            say(
                f"  {name}", f"{value:,.0f}  (target {target:,})" if value >= 100 else f"{value:.3g}  (target {target})"
            )
    started = time.perf_counter()
    write_corpus(root / "harness", args.sessions, args.seed, harness=True)
    harness_mb = sum(p.stat().st_size for p in (root / "harness").iterdir()) / 1e6
    say("  in harness formats", f"{harness_mb:.1f} MB, {time.perf_counter() - started:.1f} s (Claude Code, Codex CLI, "
        "aider, SWE-agent: each session in its agent's)")  # fmt: skip

    turns = sum(len(p.turn_bytes) for p in plans)
    for name, path, size in (("plain JSONL", corpus, corpus.stat().st_size / 1e6),
                             ("harness logs", root / "harness", harness_mb)):  # fmt: skip
        seconds, peak_mb = ingest_child(root / f"home-{name.split()[0]}", path)
        say(f"ingest, {name}", f"{seconds:.1f} s, peak RSS {peak_mb:.0f} MB, {size / seconds:.2f} MB/s")
    say("  turns", f"{turns:,} in the plain corpus")

    limits = {"cap-8192": limits_of(DIGEST_MODEL_PROVIDER="openai"), "embedded": limits_of()}
    facts = session_facts(DigestStore(root / "home-plain" / "digest.duckdb"), limits)
    total_bytes = sum(f["bytes"] for f in facts)
    repeated = sum(f["repeated"] for f in facts) / sum(f["repeat_total"] for f in facts)
    say("repeated 40+ char lines", f"{repeated:.1%} of the bytes (target {TARGETS['repeated_share']:.0%})")
    for name, lim in limits.items():
        over = [f for f in facts if f["routes"][name] != Route.WITHIN_CAP]
        over_turns = sum(f["turns"] for f in over)
        cut = sum(f.get(f"{name}_compact_cut", False) for f in over)
        say(
            f"routes, {name} (bound {lim.raw_bound_tokens})",
            f"raw {1 - len(over) / len(facts):.0%}, over the bound {len(over) / len(facts):.0%} "
            f"({over_turns / turns:.0%} of the turns: {over_turns:,} mini summaries owed); "
            f"truncated-raw compact lines cut to fit in {cut} of {len(over)}",
        )

    from resources.embedded_server import EmbeddedServer

    with EmbeddedServer(n_ctx=limits["embedded"].context_limit_tokens) as server:
        rates = host_rates(server.url, corpus, args.probes)
        say("embedded host", f"prompt {rates['prompt_tps']:.0f} tokens/s, {rates['bytes_per_token']:.2f} bytes "
            f"a token on this text, answer {rates['answer_tps']:.1f} tokens/s")  # fmt: skip
        per_byte = 1 / (rates["bytes_per_token"] * rates["prompt_tps"])
        floor = total_bytes * per_byte
        say("floor (read every session once)", f"{total_bytes / 1e6:.1f} MB = "
            f"{total_bytes / rates['bytes_per_token'] / 1e6:.2f} M tokens: {floor / 3600:.1f} h")  # fmt: skip

        sample = pick_sample(facts, rates, limits["embedded"], args.sample_seconds, args.seed)
        started = time.perf_counter()
        store = sweep_sample(root / "sample", corpus, sample, server.url)
        wall = time.perf_counter() - started
    attempts = store.query(
        "SELECT session_id, stage, outcome, duration_s, prompt_tokens, prompt_bytes, created_at FROM attempts "
        "WHERE NOT cached ORDER BY created_at, attempt_id"
    ).values.tolist()
    summary_rows = store.query("SELECT session_id, route_reason, source_tier FROM session_summaries")
    summaries = {s: (r, t) for s, r, t in summary_rows.values.tolist()}
    model_s = sum(a[3] for a in attempts)
    sample_floor = sum(f["bytes"] for f in sample) * per_byte
    say(
        "sample (scale)",
        f"{len(sample)} of {len(facts)} sessions, {sum(f['turns'] for f in sample)} turns, "
        f"{sum(f['bytes'] for f in sample) / 1e3:.0f} KB; {len(summaries)} summarized, "
        f"{len(attempts)} calls, {model_s:.0f} model s, {wall:.0f} s wall",
    )
    groups: dict[tuple, list[float]] = {}
    for fact in sample:
        route, tier = summaries.get(fact["session_id"], ("none", "none"))
        spent = sum(a[3] for a in attempts if a[0] == fact["session_id"])
        groups.setdefault((route, tier), []).append(spent)
    for (route, tier), spent in sorted(groups.items()):
        say(f"  {route} / {tier}", f"{len(spent)} sessions, {sum(spent) / len(spent):.1f} model s a session")
    say(
        "sample: backlog / floor",
        f"{model_s:.0f} s / {sample_floor:.0f} s = {model_s / sample_floor:.2f}x (goal <= 1.5x)",
    )
    keys = ("session_id", "stage", "outcome", "duration_s", "created_at")
    curve = first_summary_curve(
        [dict(zip(keys, (a[0], a[1], a[2], a[3], a[6]), strict=True)) for a in attempts],
        [{"session_id": s} for s in summaries],
        len(sample),
    )
    say_curve("early-summary curve (measured)", curve, model_s, say)
    fits = {}
    for stage in (MINI_SUMMARY_STAGE, SUMMARY_STAGE):
        pts = [(a[4] or a[5] / rates["bytes_per_token"], a[3]) for a in attempts if a[1] == stage and a[2] == "ok"]
        if len({x for x, _ in pts}) >= 3:
            fits[stage] = fit_line(pts)
        else:  # too few sizes to fit a slope: the measured prompt rate's, and the calls' mean rest
            b = 1 / rates["prompt_tps"]
            fits[stage] = (sum(y - b * x for x, y in pts) / len(pts) if pts else 0.0, b)
        a, b = fits[stage]
        say(f"  fit {stage}", f"{a:.2f} s + {b * 1000:.2f} ms a prompt token ({len(pts)} calls)")
    mini_len = store.query("SELECT coalesce(avg(length(text)), 200) FROM mini_summaries").values[0][0]
    project(facts, fits, rates, limits["embedded"], float(mini_len), floor, total_bytes, say)
    budget_s = load_settings(home_env(root)).mini_summaries.budget_s  # the default, not the sample's
    project_curve(facts, fits, rates, limits["embedded"], float(mini_len), budget_s, floor, say)


def project(facts: list[dict], fits: dict, rates: dict, lim, mini_len: float, floor: float, total_bytes: int, say):
    """The backlog's model time on the whole corpus: each session's calls as its route makes them,
    each call's seconds by its stage's fit, against the floor; with and without the repeats."""
    for key, words in (("mini_prompt_bytes", "repeats left out (this code)"),
                       ("mini_prompt_bytes_all", "repeats sent again")):  # fmt: skip
        projected, read = 0.0, 0
        for fact in facts:
            a, b = fits[SUMMARY_STAGE]
            if fact["routes"]["embedded"] == Route.WITHIN_CAP:
                projected += a + b * fact["raw_prompt_bytes"] / rates["bytes_per_token"]
                read += fact["raw_prompt_bytes"]
                continue
            am, bm = fits[MINI_SUMMARY_STAGE]
            projected += sum(am + bm * size / rates["bytes_per_token"] for size in fact[key])
            read += sum(fact[key])
            compact = min(
                fact["turns"] * (len(COMPACT_LINE_OVERHEAD) + min(mini_len, FALLBACK_CHARS)) + 800,
                lim.prompt_budget_tokens * lim.bytes_per_token,
            )
            projected += a + b * compact / rates["bytes_per_token"]
        say(
            f"corpus: backlog / floor, {words}",
            f"{projected / 3600:.1f} h / {floor / 3600:.1f} h = {projected / floor:.2f}x (goal <= 1.5x); "
            f"the prompts carry {read / total_bytes:.0%} of the corpus's bytes",
        )


def project_curve(facts: list[dict], fits: dict, rates: dict, lim, mini_len: float, budget_s: float, floor, say):
    """A projection of the whole corpus in the order the sensors work since issue 28.4, each call's
    seconds by its stage's fit: every session's first summary, newest first (a raw call within the
    bound, one compact call over truncated lines over it); then each over-bound session's mini
    summaries in backfill runs of `budget_s`, its compact call again after the run that brings half
    its turns a mini summary (`UPGRADE_COVERAGE`) and after the last. The curve is
    `first_summary_curve` over these calls; the upgrades change the total, not who has a summary."""
    a, b = fits[SUMMARY_STAGE]
    am, bm = fits[MINI_SUMMARY_STAGE]
    bpt = rates["bytes_per_token"]
    calls = []  # (session_id, stage, seconds) in order
    order = sorted(facts, key=lambda f: (-f["last_activity_ms"], f["session_id"]))
    for fact in order:
        within = fact["routes"]["embedded"] == Route.WITHIN_CAP
        size = fact["raw_prompt_bytes"] if within else fact["embedded_first_compact_bytes"]
        calls.append((fact["session_id"], SUMMARY_STAGE, a + b * size / bpt))
    upgrades = 0
    for fact in order:
        if fact["routes"]["embedded"] == Route.WITHIN_CAP:
            continue
        full = min(
            fact["turns"] * (len(COMPACT_LINE_OVERHEAD) + min(mini_len, FALLBACK_CHARS)) + 800,
            lim.prompt_budget_tokens * lim.bytes_per_token,
        )
        half = (full + fact["embedded_first_compact_bytes"]) / 2  # half the lines mini summaries
        minis = [am + bm * size / bpt for size in fact["mini_prompt_bytes"]]
        run_s, step = 0.0, 0
        for done, seconds in enumerate(minis, start=1):
            calls.append((fact["session_id"], MINI_SUMMARY_STAGE, seconds))
            run_s += seconds
            if done == len(minis):  # the complete step
                calls.append((fact["session_id"], SUMMARY_STAGE, a + b * full / bpt))
                upgrades += 1
            elif run_s >= budget_s:  # a run ends: the sweep after it upgrades at the half step
                run_s = 0.0
                if step == 0 and done >= UPGRADE_COVERAGE * len(minis):
                    step = 1
                    calls.append((fact["session_id"], SUMMARY_STAGE, a + b * half / bpt))
                    upgrades += 1
    attempts = [
        {"session_id": sid, "stage": stage, "outcome": "ok", "duration_s": seconds, "created_at": i}
        for i, (sid, stage, seconds) in enumerate(calls)
    ]
    total = sum(c[2] for c in calls)
    say_curve("corpus curve, new order (projected)", first_summary_curve(attempts, [], len(facts)), total, say)
    over = sum(f["routes"]["embedded"] != Route.WITHIN_CAP for f in facts)
    say(
        "corpus: backlog / floor, new order",
        f"{total / 3600:.1f} h / {floor / 3600:.1f} h = {total / floor:.2f}x (projected; {over} first compact "
        f"calls and {upgrades} upgrades over {over} over-bound sessions, backfill runs of {budget_s:.0f} s)",
    )


if __name__ == "__main__":
    main()
