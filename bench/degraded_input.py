"""The degraded route's input, old beside new, on the embedded model: for sessions of at least 4 turns of the card
corpus's blind split (`bench/data/cards/`, never tuned on), the summary SmolLM2 writes from a line per
turn of the first 280 characters of each turn (`truncatedRaw`, the old input) and from each turn's
card (`turnCards`: the ask, files, commands and their status, errors, the reply's gist), both through
the project's own compact prompt and schema, with model seconds per call.

Run: PYTHONPATH=. .venv/bin/python bench/degraded_input.py --sessions 12 --out bench/out/degraded_input
     PYTHONPATH=. .venv/bin/python bench/degraded_input.py --score

The run writes `replies.jsonl` (each reply with its arm) and `sheet.md`: per session its card and
its two replies as A and B in a seeded random order, the arm hidden, and `labels.jsonl` to fill in
(useful / partly / junk per reply) before anything is scored. `--score` reads the run of
BENCHMARKS.md §35 (`bench/data/degraded_input_replies.jsonl` and `degraded_input_labels.jsonl`) and
prints the table: labels by arm, model seconds, and the verdict (claims checked) beside each label.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cards import build, split_sessions  # noqa: E402
from digest.settings import load_settings  # noqa: E402
from digest.summary_output import (  # noqa: E402
    OutputParseError,
    SourceTier,  # noqa: E402
    parse_summary_output,
    response_json_schema,
)
from digest.synthesis import FALLBACK_CHARS, compact_entries, fit_compact_prompt  # noqa: E402
from digest.turns import canonical_order  # noqa: E402
from digest.verdict import judge  # noqa: E402

SEED = 35
MIN_TURNS = 4
ARMS = ("truncatedRaw", "turnCards")
LABELS = ROOT / "bench" / "data" / "degraded_input_labels.jsonl"
REPLIES = ROOT / "bench" / "data" / "degraded_input_replies.jsonl"


def arm_entries(turns, arm: str) -> list[str]:
    if arm == "turnCards":
        compact = compact_entries(turns)
        if compact.tier == SourceTier.TURN_CARDS:
            return compact.entries
    return [" ".join(t.document[:FALLBACK_CHARS].split()) for t in turns if t.document[:FALLBACK_CHARS].strip()]


def run(out: Path, sessions: int, threads: int) -> None:
    from resources.embedded_server import MODEL_ALIAS, EmbeddedServer
    from resources.model_clients import OpenAIChatClient

    out.mkdir(parents=True, exist_ok=True)
    limits = dataclasses.replace(load_settings({"DIGEST_MODEL_PROVIDER": "embedded"}).limits(), timeout_s=900)
    store, _ = build(Path(tempfile.mkdtemp(prefix="degraded-input-")))
    chosen = sorted(split_sessions("blind"))
    random.Random(SEED).shuffle(chosen)
    replies_file = out / "replies.jsonl"
    done = {json.loads(line)["session"] for line in replies_file.open()} if replies_file.exists() else set()
    with EmbeddedServer(threads=threads) as server, replies_file.open("a", encoding="utf-8") as written:
        client = OpenAIChatClient(server.url, MODEL_ALIAS, schema_style="json_object")
        # Sessions of a few turns at least: the degraded route is for long sessions.
        picked = [sid for sid in chosen if len(store.sessions.load_turns([sid])) >= MIN_TURNS][:sessions]
        for sid in picked:
            if sid in done:  # a resumed run
                continue
            turns = canonical_order(store.sessions.load_turns([sid]))
            replies = {}
            for arm in ARMS:
                prompt = fit_compact_prompt(turns, arm_entries(turns, arm), limits)
                if prompt is None:
                    continue
                started = time.monotonic()
                try:
                    reply = client.chat(
                        prompt, schema=response_json_schema(), max_output_tokens=limits.max_output_tokens, timeout_s=900
                    )
                    output = parse_summary_output(reply.text)
                    found = {"title": output.title, "summary": output.summary, "technologies": output.technologies,
                             "category": output.category}  # fmt: skip
                except (OutputParseError, Exception) as exc:  # kept, to see what it was
                    found = {"title": "", "summary": "", "technologies": [], "error": str(exc)[:300]}
                seconds = round(time.monotonic() - started, 1)
                replies[arm] = {"session": sid, "arm": arm, "seconds": seconds, "prompt_chars": len(prompt), **found}
                print(sid, arm, f"{seconds} s", repr(found.get("title") or found.get("error")), flush=True)
            order = list(replies)
            random.Random(f"{SEED}:{sid}").shuffle(order)
            for letter, arm in zip("AB", order, strict=False):
                written.write(json.dumps({**replies[arm], "letter": letter}, ensure_ascii=False) + "\n")
            written.flush()
    write_sheet(out, store)


def write_sheet(out: Path, store) -> None:
    """Per session its card and its replies as A and B, the arm hidden; and the labels to fill in."""
    rows = [json.loads(line) for line in (out / "replies.jsonl").open()]
    sheet, labels = [], []
    for sid in dict.fromkeys(r["session"] for r in rows):
        card = store.cards.card(sid)
        parts = [f"# {sid}\n\n```\n{card.text() if card else '(no card)'}\n```\n"]
        for r in sorted((r for r in rows if r["session"] == sid), key=lambda r: r["letter"]):
            parts.append(f"**{r['letter']}** title: {r['title']}\n\nsummary: {r['summary']}\n\n"
                         f"technologies: {r['technologies']}\n")  # fmt: skip
            labels.append({"session": sid, "letter": r["letter"], "label": None, "note": ""})
        sheet.append("\n".join(parts))
    (out / "sheet.md").write_text("\n\n".join(sheet), "utf-8")
    if not (out / "labels.jsonl").exists():
        (out / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels), "utf-8")


def inputs(store) -> None:
    """With no model: how much of each session's card the two inputs carry, on every blind session of
    `MIN_TURNS` turns or more (the files edited and created, the commands, the errors, the commits:
    each item found in the prompt as the card writes it, its first 40 characters), and their size."""
    limits = load_settings({"DIGEST_MODEL_PROVIDER": "embedded"}).limits()
    carried: dict[str, list[float]] = {arm: [] for arm in ARMS}
    chars: dict[str, list[int]] = {arm: [] for arm in ARMS}
    for sid in sorted(split_sessions("blind")):
        turns = canonical_order(store.sessions.load_turns([sid]))
        card = store.cards.card(sid)
        if len(turns) < MIN_TURNS or card is None:
            continue
        items = [i.text for i in card.edited + card.created] + [c.text.split(" → ")[0] for c in card.commands]
        items += [i.text for i in card.errors + card.commits]
        keys = [" ".join(i.split())[:40].rstrip("…") for i in items if i.strip()]
        for arm in ARMS:
            prompt = fit_compact_prompt(turns, arm_entries(turns, arm), limits) or ""
            chars[arm].append(len(prompt))
            if keys:
                flat = " ".join(prompt.split())
                carried[arm].append(sum(k in flat for k in keys) / len(keys))
    sessions = len(chars[ARMS[0]])
    print(f"inputs of {sessions} blind sessions of {MIN_TURNS}+ turns (no model call):")
    print(f"{'arm':<14}{'card items carried, mean':>26}{'prompt characters, median':>28}")
    for arm in ARMS:
        mean = statistics.mean(carried[arm]) if carried[arm] else 0.0
        print(f"{arm:<14}{mean:>26.0%}{statistics.median(chars[arm]):>28,.0f}")


def score() -> None:
    """The labelled run (`REPLIES`, `LABELS`) by arm."""
    replies = {(r["session"], r["letter"]): r for r in map(json.loads, REPLIES.open())}
    labels_file = LABELS
    store, _ = build(Path(tempfile.mkdtemp(prefix="degraded-input-")))
    inputs(store)
    by_arm: dict[str, Counter] = {arm: Counter() for arm in ARMS}
    verdicts: dict[str, Counter] = {arm: Counter() for arm in ARMS}
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    shown = Counter()
    for label in map(json.loads, labels_file.open()):
        r = replies[(label["session"], label["letter"])]
        documents = [t.document for t in canonical_order(store.sessions.load_turns([r["session"]]))]
        verdict = judge(documents, r["title"], r["summary"], technologies=r.get("technologies") or [])
        by_arm[r["arm"]][label["label"]] += 1
        verdicts[r["arm"]][f"{label['label']} → {verdict.label}"] += 1
        seconds[r["arm"]].append(r["seconds"])
        if verdict.label == "ok" and label["label"] == "junk":
            shown[r["arm"]] += 1
    print(f"{'arm':<14}{'useful':>7}{'partly':>7}{'junk':>6}{'model s median':>16}{'junk judged ok':>16}")
    for arm in ARMS:
        c = by_arm[arm]
        median = statistics.median(seconds[arm]) if seconds[arm] else 0
        print(f"{arm:<14}{c['useful']:>7}{c['partly']:>7}{c['junk']:>6}{median:>16.1f}{shown[arm]:>16}")
    for arm in ARMS:
        print(arm, "label → verdict:", dict(sorted(verdicts[arm].items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=12, help="of the blind split, in a seeded order")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "degraded_input")
    parser.add_argument("--threads", type=int, default=2, help="the llama.cpp server's threads")
    parser.add_argument("--score", action="store_true", help="score the labelled run in bench/data/")
    args = parser.parse_args()
    if args.score:
        score()
    else:
        run(args.out, args.sessions, args.threads)


if __name__ == "__main__":
    main()
