"""What the raw-synthesis cap saves, on the real embedded model (SmolLM2 under llama.cpp).

Run: .venv/bin/python bench/raw_cap.py [--cap 2048] [--sessions 16]   # --smoke: one small session, for the test suite

One seeded corpus with a heavy-tailed size distribution (most sessions small, a few over the
cap, one near the context limit), summarized three times by the same server:
- no cap: raw whenever the context allows (the prompt fits the context less the answer);
- safe band: the original's only bound, 75% of the context;
- cap: this project's raw-synthesis cap (`--cap`, in estimated tokens).
Model seconds are the durations of the calls in the attempt ledger; the headline is the ratio
of model seconds, no cap / cap.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import tempfile
from pathlib import Path

from digest.settings import load_settings
from digest.synthesis import summarize_session
from digest.turns import Turn, compose_document
from resources.embedded_server import MODEL_ALIAS, EmbeddedServer
from resources.model_clients import OpenAIChatClient
from resources.store import DigestStore, RunLedger

WORDS = (
    "the grid row selection store record worker message bus refactor test flaky vdom config "
    "docs component render update sort filter index cache session agent model token summary "
    "fixed changed added removed because when then after before failing passing build review"
).split()


LARGE_TOKENS = (3000, 4500, 5800, 6700)
# The smoke's one session, over its cap (raw on the other arms), its answers cut at 256 tokens: it
# shows that the bench runs, not what the cap saves (SmolLM2 often writes to the 1,024-token cap,
# 40 s a call on a busy machine, and the model's time is most of the test suite's).
SMOKE_SIZES, SMOKE_CAP, SMOKE_OUTPUT_TOKENS = (900,), 700, 256


def corpus(sessions: int, seed: int = 5, large: tuple[int, ...] = LARGE_TOKENS) -> list[list[Turn]]:
    """Session sizes in estimated tokens: mostly 300-1500, then the `large` ones (by default a few
    3000-6000, one near 7000)."""
    rng = random.Random(seed)
    return sessions_of([rng.randint(400, 1500) for _ in range(sessions - len(large))] + list(large), rng)


def sessions_of(sizes: list[int], rng: random.Random) -> list[list[Turn]]:
    """A session of each size (estimated tokens); every other one has its turns' mini summaries."""
    out = []
    for s, tokens in enumerate(sizes):
        turns, budget, i = [], tokens * 3 - 1200, 0  # 3 bytes a token, less the prompt's own ~1.2 KB
        while budget > 0 or not turns:
            words = rng.randint(40, 160)
            response = " ".join(rng.choice(WORDS) for _ in range(words))
            doc = compose_document(f"step {i}: " + " ".join(rng.choice(WORDS) for _ in range(12)), "plan", response)
            mini = f"Step {i}: {' '.join(rng.choice(WORDS) for _ in range(10))}." if s % 2 else None
            turns.append(
                Turn(id=f"s{s:02d}-t{i:03d}", session_id=f"s{s:02d}", document=doc, ts_ms=i, mini_summary=mini)
            )
            budget -= len(doc) + 7
            i += 1
        out.append(turns)
    return out


def run_policy(name: str, limits, sessions, client, root: Path) -> dict:
    store = DigestStore(root / f"{name}.duckdb")
    store.migrate()
    routes: dict[str, int] = {}
    for turns in sessions:
        result = summarize_session(turns, client, limits, RunLedger(store, name))
        tier = result.summary.source_tier if result.summary else f"failed:{result.failure}"
        routes[tier] = routes.get(tier, 0) + 1
    ledger = store.query("SELECT sum(duration_s) AS total, max(duration_s) AS longest FROM attempts").iloc[0]
    degraded = sum(v for k, v in routes.items() if k in ("miniSummary", "turnCards", "truncatedRaw"))
    return {
        "model_s": float(ledger["total"]),
        "longest_s": float(ledger["longest"]),
        "routes": routes,
        "degraded_share": degraded / len(sessions),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cap", type=int, default=2048)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--smoke", action="store_true", help="one small session over the cap, for the test suite")
    args = parser.parse_args()
    base = load_settings({"DIGEST_MODEL_PROVIDER": "embedded"}).limits()
    if args.smoke:
        args.cap, base = SMOKE_CAP, dataclasses.replace(base, max_output_tokens=SMOKE_OUTPUT_TOKENS)
    output = base.max_output_tokens
    policies = {
        "no cap": dataclasses.replace(base, raw_cap_tokens=None, safe_limit_tokens=base.context_limit_tokens - output),
        "safe band": dataclasses.replace(base, raw_cap_tokens=None),
        f"cap {args.cap}": dataclasses.replace(base, raw_cap_tokens=args.cap),
    }
    sessions = sessions_of(list(SMOKE_SIZES), random.Random(5)) if args.smoke else corpus(args.sessions)
    results = {}
    with EmbeddedServer() as server, tempfile.TemporaryDirectory() as tmp:
        client = OpenAIChatClient(server.url, MODEL_ALIAS, schema_style="json_object")
        for name, limits in policies.items():
            results[name] = run_policy(name.replace(" ", "-"), limits, sessions, client, Path(tmp))
    print(f"{len(sessions)} sessions, SmolLM2-135M on {base.context_limit_tokens}-token context")
    print(f"{'policy':<12} {'model s':>8} {'longest s':>10} {'degraded':>9}  routes")
    for name, r in results.items():
        routes = ", ".join(f"{k} {v}" for k, v in sorted(r["routes"].items()))
        print(f"{name:<12} {r['model_s']:>8.1f} {r['longest_s']:>10.1f} {r['degraded_share']:>9.0%}  {routes}")
    capped = results[f"cap {args.cap}"]["model_s"]
    print(f"model seconds, no cap / cap: {results['no cap']['model_s'] / capped:.2f}")
    print(f"model seconds, safe band / cap: {results['safe band']['model_s'] / capped:.2f}")


if __name__ == "__main__":
    main()
