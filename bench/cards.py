"""The session card measured blind: the cards of real sessions of several harnesses
(`bench/data/cards/`, its README says where they came from), each labelled useful / partly / junk by
a reader who saw the session and its card and nothing else, before any card rule was tuned on
them. The `tune` split is what the rules were written beside; the `blind` split was labelled once.

Run: PYTHONPATH=. .venv/bin/python bench/cards.py                 # the table, from the labels
     PYTHONPATH=. .venv/bin/python bench/cards.py --sheet DIR     # a label sheet for a reader
     PYTHONPATH=. .venv/bin/python bench/cards.py --smoke         # the tune split, no labels read

Each run ingests the corpus into a scratch store with the project's own readers and makes every
card again: a card that differs from the one labelled is counted as unlabelled, never scored under
another card's label. `--sheet` writes, per session of the split, its card (line and text) and its
turns (each cut to 1,500 characters) as Markdown, and an empty labels file to fill in.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from digest.ingest import ingest_paths  # noqa: E402
from resources.store import DigestStore  # noqa: E402

CORPUS = ROOT / "bench" / "data" / "cards"
LABELS = CORPUS / "labels.jsonl"
LABEL_VALUES = ("useful", "partly", "junk")
TURN_CHARS = 1_500


def split_sessions(split: str) -> dict[str, dict]:
    """The sessions of a split, each with its manifest entry (harness, language, source)."""
    sessions = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))["sessions"]
    return {s["session_id"]: s for s in sessions if s["split"] == split}


def build(store_dir: Path) -> tuple[DigestStore, float]:
    """The corpus ingested into a scratch store (its cards made with it); the seconds the cards took."""
    store = DigestStore(store_dir / "digest.duckdb")
    store.migrate()
    ingest_paths([p for p in (CORPUS / "raw", CORPUS / "plain") if p.exists()], store, redact_secrets=True)
    started = time.process_time()
    store.cards.refresh()
    return store, time.process_time() - started


def turns_markdown(store: DigestStore, session_id: str) -> str:
    total, turns = store.sessions.turn_page(session_id, 0, 10_000)
    parts = []
    for n, t in enumerate(turns, 1):
        for name in ("prompt", "response"):
            text = (t[name] or "").strip()
            cut = text[:TURN_CHARS] + (
                f" …[{len(text) - TURN_CHARS:,} more characters]" if len(text) > TURN_CHARS else ""
            )
            fenced = cut.replace("```", "ˋˋˋ")  # a fence inside the text would end the sheet's
            parts.append(f"**#{n} {name}**\n\n```\n{fenced}\n```")
    return "\n\n".join(parts)


def write_sheet(out: Path, split: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        store, _ = build(Path(scratch))
        sessions = split_sessions(split)
        rows = []
        for sid, entry in sorted(sessions.items()):
            card = store.cards.card(sid)
            if card is None:
                print(f"no card for {sid} ({entry['file']}): not ingested?", file=sys.stderr)
                continue
            page = out / f"{len(rows) + 1:03d}.md"
            page.write_text(
                f"# Session {sid} ({entry['harness']}, {entry.get('language', '?')})\n\n"
                f"## The card: line\n\n{card.line()}\n\n## The card: text\n\n```\n{card.text()}\n```\n\n"
                f"## The turns\n\n{turns_markdown(store, sid)}\n",
                encoding="utf-8",
            )
            rows.append({"session_id": sid, "page": page.name, "line": card.line(), "label": None, "note": ""})
    (out / "labels.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} sessions of the {split} split: {out}/NNN.md; label them in {out}/labels.jsonl")


def score(labels: list[dict], store: DigestStore, sessions: dict[str, dict]) -> dict:
    """The labelled cards that are still the cards made now, by label, harness and language."""
    by_label: Counter = Counter()
    by_harness: dict[str, Counter] = defaultdict(Counter)
    stale, worst = [], []
    for row in labels:
        sid = row["session_id"]
        card = store.cards.card(sid)
        if card is None or card.line() != row["line"]:
            stale.append(sid)
            continue
        by_label[row["label"]] += 1
        entry = sessions.get(sid, {})
        by_harness[entry.get("harness", "?")][row["label"]] += 1
        english = entry.get("language", "en") == "en"
        by_harness["other languages" if not english else "English"][row["label"]] += 1
        if row["label"] != "useful":
            worst.append((row["label"], sid, row.get("note", ""), card.line()))
    scored = sum(by_label.values())
    return {
        "scored": scored,
        "stale": stale,
        "by_label": dict(by_label),
        "useful_or_partly": round((by_label["useful"] + by_label["partly"]) / scored, 3) if scored else None,
        "by_harness": {k: dict(v) for k, v in sorted(by_harness.items())},
        "worst": sorted(worst, key=lambda w: LABEL_VALUES.index(w[0]), reverse=True),
    }


def report(smoke: bool) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        store, seconds = build(Path(scratch))
        with store.file.connect() as con:
            cards, lines = con.execute("SELECT count(*), list(length(line)) FROM session_cards").fetchone()
        print(f"corpus: {cards} sessions' cards made in {seconds * 1000 / max(1, cards):.1f} ms of CPU a card")
        print(f"card line: median {statistics.median(lines or [0]):.0f} characters, longest {max(lines or [0])}")
        splits = ("tune",) if smoke else ("tune", "blind")
        labelled = [] if smoke or not LABELS.exists() else [json.loads(x) for x in LABELS.read_text().splitlines() if x]
        for split in splits:
            sessions = split_sessions(split)
            rows = [r for r in labelled if r["session_id"] in sessions and r.get("label") in LABEL_VALUES]
            result = score(rows, store, sessions)
            print(f"\n{split}: {len(sessions)} sessions, {result['scored']} labelled cards scored")
            if not result["scored"]:
                continue
            print(f"  {'':<18} {'useful':>7} {'partly':>7} {'junk':>5}")
            for name, counts in [("all", result["by_label"]), *result["by_harness"].items()]:
                print(
                    f"  {name:<18} {counts.get('useful', 0):>7} {counts.get('partly', 0):>7} {counts.get('junk', 0):>5}"
                )
            print(f"  useful or partly: {result['useful_or_partly']:.1%} (goal 90%)")
            if result["stale"]:
                print(f"  {len(result['stale'])} labelled cards changed since they were labelled (not scored)")
            for label, sid, note, line in result["worst"][:5]:
                print(f"  {label}: {sid}: {note}\n      {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sheet", type=Path, help="write a label sheet of the split here")
    parser.add_argument("--split", default="blind", choices=("tune", "blind"))
    parser.add_argument("--smoke", action="store_true", help="the tune split's cards, no labels read")
    args = parser.parse_args()
    if args.sheet:
        write_sheet(args.sheet, args.split)
    else:
        report(args.smoke)


if __name__ == "__main__":
    main()
