"""Needless degradations before and after exact token counts, against the real embedded server.

Run: .venv/bin/python bench/token_counts.py [--sessions 300] [--ledger-calls 24] [--held-out 48]

Ground truth is the server's own count of a summary call: SmolLM2's tokenizer under
llama-cpp-python (`POST /extras/tokenize`) plus the tokens its chat template adds, measured here
with a chat call (its `prompt_tokens` minus the tokenizer's count of the same prompt). Routing is
`digest.synthesis`'s own (`count_prompt`, then `raw_route`) at the demo's limits (embedded: context
8192, safe band 6144, raw cap 8192, answer 1024: a raw prompt is checked against 6144), on:
- the bundled samples (samples/bundle, every session);
- a synthetic corpus (tests/synthetic_export.py) whose raw prompts spread from about 0.5x to 2x the
  bound at 3 bytes a token.
Policies: "before" (3.0 bytes a token, no tokenizer), "tokenizer" (the same estimate, the host's
count near the bound), "ledger" (the bytes a token calibrated from a ledger, no tokenizer), and
both (what a host with a tokenizer and a ledger gets). The ledger holds (a) real chat calls (one
answer token each) on the samples' longest mini-summary prompts, recorded as the mini-summary run
records them, then (b) the summary calls of a held-out synthetic corpus (another seed) that fit
the bound, whose `prompt_tokens` are the tokenizer's count plus the template's tokens (the exact
`prompt_tokens` of a chat: checked on every call of (a)), as a summary run would record them. The
applied value is `calibrated_bytes_per_token` over it (the 4 KiB floor keeps the summary calls);
"1 KiB floor" is what the same quantile gives with the mini-summary calls in.
The samples are also routed at a 2048-token cap (bench/raw_cap.py's). A session is degraded NEEDLESSLY when
its route is degraded while the server's count fits the bound; UNSAFE when it goes raw while the
server's count does not fit (it would overflow or exceed the cap).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ (the export generator) is not installed

from digest.attempts import MINI_SUMMARY_STAGE, SUMMARY_STAGE, Attempt  # noqa: E402
from digest.ingest import ingest_paths  # noqa: E402
from digest.mini_summaries import build_prompt as mini_prompt  # noqa: E402
from digest.mini_summaries import split_document  # noqa: E402
from digest.settings import load_settings  # noqa: E402
from digest.synthesis import Route, build_prompt, raw_content, raw_route  # noqa: E402
from digest.tokens import (  # noqa: E402
    CHAT_TEMPLATE_MARGIN_TOKENS,
    TokenCount,
    conservative_bytes_per_token,
    count_prompt,
    resolve_bytes_per_token,
)
from digest.turns import Turn, canonical_order  # noqa: E402
from resources.embedded_server import MODEL_ALIAS, EmbeddedServer  # noqa: E402
from resources.model_clients import OpenAIChatClient  # noqa: E402
from resources.store import DigestStore  # noqa: E402
from tests.synthetic_export import write_export  # noqa: E402

SAMPLES = ROOT / "samples" / "bundle"
HOST = "embedded"


def load_sessions(store: DigestStore, folders: list[Path]) -> list[list[Turn]]:
    ingest_paths(folders, store)
    ids = store.query("SELECT session_id FROM sessions ORDER BY session_id")["session_id"].tolist()
    turns = store.sessions.load_turns(ids)
    by_session: dict[str, list[Turn]] = {}
    for turn in turns:
        by_session.setdefault(turn.session_id, []).append(turn)
    return [canonical_order(by_session[i]) for i in ids]


def synthetic_folders(root: Path, sessions: int, seed: int = 100) -> list[Path]:
    """Sessions of 14..57 turns of ~600 bytes: raw prompts of ~9-37 KB, 0.5x-2x the bound at 3 bytes,
    a few sessions at each length (the first `sessions` lengths alone when fewer)."""
    groups = min(44, sessions)
    folders = []
    for g in range(groups):
        folder = root / f"synthetic-{seed}-{g:02d}"
        turns = 14 + g
        write_export(
            folder, sessions=max(1, sessions // groups), turns_per_session=turns, turn_bytes=600, seed=seed + g
        )
        folders.append(folder)
    return folders


def template_tokens(client: OpenAIChatClient) -> int:
    prompt = "Summarize: the grid's row selection broke after sorting; fixed by keeping record ids."
    reply = client.chat(prompt, schema=None, max_output_tokens=1, timeout_s=120)
    return reply.prompt_tokens - client.count_tokens(prompt)


def mini_prompts(turns: list[Turn]) -> list[str]:
    return [mini_prompt(*split_document(t.document)) for t in turns if t.document]


def feed_ledger(store: DigestStore, client: OpenAIChatClient, prompts: list[str], overhead: int) -> dict:
    """Real chat calls, recorded as attempts; also checks the ground truth on each (count + overhead)."""
    mismatches, started = [], time.monotonic()
    for i, prompt in enumerate(prompts):
        reply = client.chat(prompt, schema=None, max_output_tokens=1, timeout_s=300)
        data = len(prompt.encode("utf-8"))
        mismatches.append(reply.prompt_tokens - (client.count_tokens(prompt) + overhead))
        store.attempts.record_attempt(
            Attempt(session_id=f"ledger-{i}", stage=MINI_SUMMARY_STAGE, tier="turn", prompt_bytes=data,
                    tokens_estimate=-(-data // 3), outcome="ok", duration_s=reply.duration_s, model=MODEL_ALIAS,
                    prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens, host=HOST)
        )  # fmt: skip
    return {"calls": len(prompts), "seconds": time.monotonic() - started, "max_truth_error": max(map(abs, mismatches))}


def summary_samples(sessions, limits, client, overhead) -> list[tuple[int, int]]:
    """(prompt bytes, the server's prompt tokens) of the raw summary calls these sessions would make."""
    prompts = [build_prompt(raw_content(turns), turns) for turns in sessions]
    counted = [(len(p.encode("utf-8")), client.count_tokens(p) + overhead) for p in prompts]
    return [(b, t) for b, t in counted if raw_route(t, limits) == Route.WITHIN_CAP]


def route_corpus(name, sessions, limits, ledgers, client, overhead) -> list[dict]:
    """`ledgers`: {name: bytes per token} of the calibrated policies."""
    rows = []
    prompts = [build_prompt(raw_content(turns), turns) for turns in sessions]
    truths = [client.count_tokens(p) + overhead for p in prompts]
    truth_routes = [raw_route(t, limits) for t in truths]
    fits = sum(r == Route.WITHIN_CAP for r in truth_routes)
    ratios = sorted(len(p.encode("utf-8")) / t for p, t in zip(prompts, truths, strict=True))
    spread = f"{ratios[len(ratios) // 10]:.2f} / {ratios[len(ratios) // 2]:.2f}"
    policies = {
        "before: 3.0 bytes/token": (limits, None),
        "after: tokenizer near the bound": (limits, client.count_tokens),
    }
    for ledger, value in ledgers.items():
        calibrated = dataclasses.replace(limits, bytes_per_token=value, bytes_per_token_source="ledger")
        policies[f"after: {ledger} ({value:.2f} bytes/token)"] = (calibrated, None)
    applied = dataclasses.replace(limits, bytes_per_token=ledgers["ledger"], bytes_per_token_source="ledger")
    policies["after: ledger + tokenizer"] = (applied, client.count_tokens)
    for policy, (policy_limits, count_tokens) in policies.items():
        asked = {"n": 0, "s": 0.0}

        def counting(text, count_tokens=count_tokens, asked=asked):
            started = time.monotonic()
            try:
                return count_tokens(text)
            finally:
                asked["n"] += 1
                asked["s"] += time.monotonic() - started

        degraded = needless = unsafe = 0
        for prompt, truth_route in zip(prompts, truth_routes, strict=True):
            estimate = TokenCount(policy_limits.estimate_tokens(prompt), policy_limits.bytes_per_token_source)
            routed = count_prompt(prompt, estimate, policy_limits.raw_bound_tokens, counting if count_tokens else None)
            route = raw_route(routed.tokens, policy_limits)
            degraded += route != Route.WITHIN_CAP
            needless += route != Route.WITHIN_CAP and truth_route == Route.WITHIN_CAP
            unsafe += route == Route.WITHIN_CAP and truth_route != Route.WITHIN_CAP
        rows.append(
            {"corpus": name, "sessions": len(sessions), "server bytes/token p10 / median": spread,
             "fit by the server's count": fits, "policy": policy,
             "degraded": degraded, "needless": needless, "unsafe": unsafe, "tokenizer calls (s)": f"{asked['n']} ({asked['s']:.1f})" if count_tokens else "0"}
        )  # fmt: skip
    return rows


def under_counts(prompts: list[str], client: OpenAIChatClient, overhead: int, bytes_per_token: float) -> dict:
    """How far the server's count runs over the estimate (positive: under-counted, the overflow side)."""
    over = []
    for prompt in prompts:
        data = len(prompt.encode("utf-8"))
        estimate = math.ceil(data / bytes_per_token)
        over.append((client.count_tokens(prompt) + overhead) / estimate - 1)
    return {"prompts": len(over), "under-counted": sum(o > 0 for o in over), "worst": max(over)}


def table(rows: list[dict]) -> str:
    headers = list(rows[0])
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(r[h]) for h in headers) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--ledger-calls", type=int, default=24)
    parser.add_argument("--held-out", type=int, default=48, help="sessions of the held-out corpus, the ledger's (b)")
    args = parser.parse_args()
    limits = load_settings({"DIGEST_MODEL_PROVIDER": "embedded"}).limits()  # the demo's
    print(f"bound: {limits.raw_bound_tokens} tokens (raw cap {limits.raw_cap_tokens}, safe {limits.safe_limit_tokens})")
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer() as server:
        root = Path(tmp)
        client = OpenAIChatClient(server.url, MODEL_ALIAS, schema_style="json_object")
        overhead = template_tokens(client)
        print(f"chat template: {overhead} tokens (margin {CHAT_TEMPLATE_MARGIN_TOKENS})")
        samples_store = DigestStore(root / "samples.duckdb")
        samples_store.migrate()
        samples = load_sessions(samples_store, [SAMPLES])
        synthetic_store = DigestStore(root / "synthetic.duckdb")
        synthetic_store.migrate()
        synthetic = load_sessions(synthetic_store, synthetic_folders(root, args.sessions))
        sample_minis = mini_prompts([t for turns in samples for t in turns])
        ledger_prompts = sorted(sample_minis, key=lambda p: len(p.encode("utf-8")), reverse=True)[: args.ledger_calls]
        ledger = DigestStore(root / "ledger.duckdb")
        ledger.migrate()
        fed = feed_ledger(ledger, client, ledger_prompts, overhead)
        value, source = resolve_bytes_per_token(None, ledger.tokens.calibrated_bytes_per_token(HOST, MODEL_ALIAS))
        print(
            f"ledger (a): {fed['calls']} real chat calls in {fed['seconds']:.0f} s (tokenizer count + template = "
            f"the chat's prompt_tokens within {fed['max_truth_error']} tokens on each); {value:.3f} bytes/token ({source})"
        )
        held_out_store = DigestStore(root / "held-out.duckdb")
        held_out_store.migrate()
        held_out = load_sessions(held_out_store, synthetic_folders(root, args.held_out, seed=900))
        summaries = summary_samples(held_out, limits, client, overhead)
        for i, (data, tokens) in enumerate(summaries):
            ledger.attempts.record_attempt(
                Attempt(session_id=f"summary-{i}", stage=SUMMARY_STAGE, tier="raw", prompt_bytes=data,
                        tokens_estimate=math.ceil(data / 3), outcome="ok", duration_s=tokens / 175, model=MODEL_ALIAS,
                        prompt_tokens=tokens, completion_tokens=200, host=HOST)
            )  # fmt: skip
        calibrated = ledger.tokens.calibrated_bytes_per_token(HOST, MODEL_ALIAS)
        everything = ledger.query("SELECT prompt_bytes, prompt_tokens FROM attempts WHERE prompt_bytes >= 1024")
        one_kib = conservative_bytes_per_token(everything.itertuples(index=False))
        ledgers = {"ledger": calibrated[0], "1 KiB floor": one_kib[0]}
        print(
            f"ledger (a) + (b): {len(summaries)} summary calls more; applied {calibrated[0]:.3f} bytes/token "
            f"({calibrated[1]} samples); at a 1 KiB floor {one_kib[0]:.3f} ({one_kib[1]} samples)"
        )
        rows = route_corpus("samples", samples, limits, ledgers, client, overhead)
        capped = dataclasses.replace(limits, raw_cap_tokens=2048)
        rows += route_corpus("samples, cap 2048", samples, capped, ledgers, client, overhead)
        rows += route_corpus("synthetic", synthetic, limits, ledgers, client, overhead)
        print(table(rows))
        minis = [
            {"corpus": name, "bytes/token": bpt, **under_counts(prompts, client, overhead, bpt)}
            for name, prompts in (
                ("samples' mini-summary prompts", sample_minis),
                ("synthetic mini-summary prompts (first 500)", mini_prompts([t for s in synthetic for t in s])[:500]),
            )
            for bpt in (3.0, *(round(v, 3) for v in ledgers.values()))
        ]
        for row in minis:
            row["worst"] = f"{row['worst']:+.1%}"
        print(table(minis))


if __name__ == "__main__":
    main()
