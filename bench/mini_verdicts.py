"""Mini summaries judged with no model call, against labels read blind.

Two sets of SmolLM2 mini summaries (the embedded default), each labelled `keep` (it tells what the
turn did, even in the turn's own words) or `junk` (it says nothing about the turn, loops, repeats
the prompt's scaffolding, or says what the turn never did) by a reader who saw the turn and the
mini summary and no verdict, before any rule was written:
- **tune**: the 35 the demo writes for the bundled grid session (`bench/data/mini_verdicts/tune.jsonl`);
- **held-out**: minis written by this script for turns of the card corpus's blind split
  (`bench/data/cards/`), labelled once, never tuned on (`held_out.jsonl`).

Run: PYTHONPATH=. .venv/bin/python bench/mini_verdicts.py                      # the table, from the labels
     PYTHONPATH=. .venv/bin/python bench/mini_verdicts.py --generate 40 --out DIR  # new minis to label
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT / "bench" / "data" / "mini_verdicts"
SETS = ("tune", "held_out")
SEED = 41
MAX_TURNS_A_SESSION = 6


def generate(out: Path, count: int, threads: int) -> None:
    """Mini summaries of turns of the card corpus's blind split, as the product makes them (its
    prompt, with the lines an earlier turn of the batch showed left out), into `out/minis.jsonl`
    and a sheet to label (`out/sheet.md`), the turn beside each."""
    from bench.cards import build, split_sessions
    from digest.mini_summaries import MAX_OUTPUT_TOKENS, build_prompt, clean_output, turn_text, without_repeats
    from digest.settings import load_settings
    from resources.embedded_server import MODEL_ALIAS, EmbeddedServer
    from resources.model_clients import OpenAIChatClient

    out.mkdir(parents=True, exist_ok=True)
    limits = load_settings({"DIGEST_MODEL_PROVIDER": "embedded"}).limits()
    max_bytes = int(limits.prompt_budget_tokens * limits.bytes_per_token)
    store, _ = build(Path(tempfile.mkdtemp(prefix="mini-verdicts-")))
    chosen = sorted(split_sessions("blind"))
    random.Random(SEED).shuffle(chosen)
    written = []
    with EmbeddedServer(threads=threads) as server:
        client = OpenAIChatClient(server.url, MODEL_ALIAS)
        for sid in chosen:
            turns = sorted(store.mini_summaries.pending_mini_summary_turns(sid), key=lambda t: (t.ts_ms or 0, t.id))
            turns = turns[:MAX_TURNS_A_SESSION]
            texts = without_repeats(turns, {t.id: turn_text(t) for t in turns})
            for turn in turns:
                if texts[turn.id] is None or len(written) >= count:
                    continue
                started = time.monotonic()
                reply = client.chat(
                    build_prompt(*texts[turn.id], max_bytes=max_bytes), schema=None,
                    max_output_tokens=MAX_OUTPUT_TOKENS, timeout_s=600,
                )  # fmt: skip
                prompt, response = turn_text(turn)
                row = {"set": "held_out", "turn_id": turn.id, "session_id": sid, "prompt": prompt,
                       "response": response, "mini": clean_output(reply.text),
                       "seconds": round(time.monotonic() - started, 1)}  # fmt: skip
                written.append(row)
                print(len(written), sid[:12], row["seconds"], repr(row["mini"][:100]), flush=True)
            if len(written) >= count:
                break
    with (out / "minis.jsonl").open("w", encoding="utf-8") as f:
        for row in written:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    with (out / "sheet.md").open("w", encoding="utf-8") as f:
        for n, row in enumerate(written):
            f.write(f"## {n} {row['turn_id']}\n\n**Prompt:** {row['prompt'][:1200]}\n\n")
            f.write(f"**Response:** {row['response'][:1500]}\n\n**Mini:** {row['mini']}\n\n")


def score() -> None:
    """The verdict beside each label, by set: how much junk it catches and how many kept lines it takes."""
    from digest.turns import compose_document
    from digest.verdict import judge_mini

    print(f"{'set':<9} {'minis':>5} {'junk':>4} {'caught':>9} {'keep lost':>9} {'CPU ms a mini':>13}  verdicts on junk")
    for name in SETS:
        rows = [json.loads(line) for line in (DATA / f"{name}.jsonl").open(encoding="utf-8")]
        started = time.process_time()
        verdicts = [judge_mini(compose_document(r["prompt"] or "", "", r["response"] or ""), r["mini"]) for r in rows]
        cpu_ms = (time.process_time() - started) * 1000 / len(rows)
        junk = [v for r, v in zip(rows, verdicts, strict=True) if r["label"] == "junk"]
        keep = [v for r, v in zip(rows, verdicts, strict=True) if r["label"] == "keep"]
        caught = sum(v.junk for v in junk)
        lost = sum(v.junk for v in keep)
        kinds = Counter(v.label for v in junk if v.junk)
        print(
            f"{name:<9} {len(rows):>5} {len(junk):>4} {caught:>4}/{len(junk):<4} {lost:>4}/{len(keep):<4} "
            f"{cpu_ms:>13.2f}  {dict(kinds.most_common())}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generate", type=int, help="write this many new minis to label")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "mini_verdicts")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.generate:
        generate(args.out, args.generate, args.threads)
    else:
        score()


if __name__ == "__main__":
    main()
