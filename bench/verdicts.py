"""The verdicts (docs/verdicts.md) against the hand-labelled set, tests/fixtures/verdicts.jsonl:
precision and recall per class, the confusion of labels, fidelity by label (copying and invented
names must not outscore a faithful summary), and the judge's cost per summary.

Run: PYTHONPATH=. .venv/bin/python bench/verdicts.py [--json] [--blind]
`--blind` scores the held-out set instead, bench/data/verdict_blind.jsonl (issue 36.4): the embedded
model's summaries of sessions the rules were not written beside (`bench/verdict_blind.py` writes
them), each labelled by reading it against its session before any verdict was run on it.
     PYTHONPATH=. .venv/bin/python bench/verdicts.py --sweep OUT.jsonl
`--sweep` asks the embedded SmolLM2-135M for a summary of every session of the set, with the
project's own prompt, raw and as a degraded prompt of the first 280 characters of each turn
(minutes on 2 cores), and writes the replies unlabelled: the set's `smollm2` rows came from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from digest.fidelity import fidelity  # noqa: E402
from tests.verdict_cases import (  # noqa: E402
    blind_sessions,
    confusion,
    judged,
    junk_against_ok,
    per_class,
    sessions,
)


def evaluate(blind: bool = False, batch: int | None = None) -> dict:
    rows = [r for r in judged(blind) if batch is None or r.get("batch") == batch]
    if blind:
        documents = blind_sessions()
    else:
        documents = {name: [t.document for t in turns] for name, turns in sessions().items()}
    junk_precision, junk_recall = junk_against_ok(rows)
    return {
        "summaries": len(rows),
        "by_source": dict(Counter(r["source"] for r in rows)),
        "accuracy": round(sum(r["verdict"] == r["label"] for r in rows) / len(rows), 3),
        "junk_precision": junk_precision,
        "junk_recall": junk_recall,
        "per_class": per_class(rows),
        "confusion": confusion(rows),
        "fidelity_by_label": fidelity_by_label(rows, documents),
        "cpu_ms_per_summary": round(sum(r["cpu_ms"] for r in rows) / len(rows), 2),
    }


def fidelity_by_label(rows: list[dict], documents: dict[str, list[str]]) -> dict:
    """The mean fidelity of the summaries of each label (one store of one session: tf alone)."""
    scores = defaultdict(list)
    for r in rows:
        score = fidelity(documents[r["session"]], r["title"], r["summary"]).score
        scores[r["label"]].append(score or 0.0)
    return {label: round(sum(v) / len(v), 3) for label, v in sorted(scores.items())}


def sweep(out: Path) -> None:
    """The embedded model's summary of every session, raw and from a degraded prompt."""
    from digest.model_api import ModelError
    from digest.prompts import compact_line
    from digest.summary_output import OutputParseError, parse_summary_output, response_json_schema
    from digest.synthesis import FALLBACK_CHARS, build_prompt, raw_content
    from resources.embedded_server import EmbeddedServer
    from resources.model_clients import OpenAIChatClient

    with EmbeddedServer() as server, out.open("w", encoding="utf-8") as f:
        client = OpenAIChatClient(server.url, "smollm2")
        for name, turns in sessions().items():
            degraded = "\n".join(
                compact_line(i, " ".join(t.document[:FALLBACK_CHARS].split())) for i, t in enumerate(turns, 1)
            )
            for route, content in (("raw", raw_content(turns)), ("degraded", degraded)):
                prompt = build_prompt(content, turns)
                if len(prompt) > 24_000:  # over the raw cap: the model sees this session degraded only
                    continue
                try:
                    reply = client.chat(prompt, schema=response_json_schema(), max_output_tokens=512, timeout_s=900)
                    output = parse_summary_output(reply.text)
                    row = {"title": output.title, "summary": output.summary}
                except (ModelError, OutputParseError) as exc:  # no summary; kept to see what it was
                    row = {"title": "", "summary": "", "error": str(exc)[:300]}
                f.write(json.dumps({"session": name, "route": route, **row}, ensure_ascii=False) + "\n")
                f.flush()
                print(name, route, row.get("title") or row.get("error"), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--blind", action="store_true", help="score the held-out set (bench/data/verdict_blind.jsonl)")
    parser.add_argument("--batch", type=int, help="with --blind: that batch alone (1 was tuned on, 2 was not)")
    parser.add_argument("--sweep", type=Path, help="write the embedded model's summaries of the set's sessions here")
    args = parser.parse_args()
    if args.sweep:
        sweep(args.sweep)
        return
    figures = evaluate(args.blind, args.batch)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"{figures['summaries']} {'held-out' if args.blind else 'labelled'} summaries {figures['by_source']}, accuracy {figures['accuracy']}"
    )
    print(f"junk (any class) against ok: precision {figures['junk_precision']}, recall {figures['junk_recall']}")
    print(f"{'verdict':<14}{'labelled':>9}{'judged':>8}{'precision':>11}{'recall':>8}")
    for label, c in figures["per_class"].items():
        print(f"{label:<14}{c['labelled']:>9}{c['judged']:>8}{c['precision']!s:>11}{c['recall']!s:>8}")
    print("misjudged:", figures["confusion"] or "none")
    print("mean fidelity by label:", figures["fidelity_by_label"])
    print(f"judge cost: {figures['cpu_ms_per_summary']} ms CPU per summary")


if __name__ == "__main__":
    main()
