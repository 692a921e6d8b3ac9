"""Can the embedded model write what the card cannot say? The session card of each session of the
card corpus's tune split (never the blind one) and the end of its last reply go to the embedded
SmolLM2, which is asked for two things only: the outcome in one or two sentences and the category,
under a JSON schema. Prints each session's card line beside the model's reply, and writes them as a
sheet to label (BENCHMARKS.md §28 gives the reading).

    python bench/outcome_ask.py [--sessions 12] [--sheet bench/out/outcome_ask.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cards import build, split_sessions  # noqa: E402
from digest.summary_output import CATEGORIES  # noqa: E402
from resources.embedded_server import MODEL_ALIAS, EmbeddedServer  # noqa: E402

LAST_REPLY_CHARS = 1_500
OUTPUT_TOKENS = 160
SCHEMA = {
    "type": "object",
    "properties": {
        "outcome": {"type": "string", "maxLength": 300},
        "category": {"type": "string", "enum": list(CATEGORIES)},
    },
    "required": ["outcome", "category"],
}
ASK = (
    "Below is the account of an AI-agent work session, made from its log, and the end of its last reply. "
    'Reply with one JSON object: "outcome": in one or two sentences, what the session achieved and how it '
    'ended; "category": one of ' + ", ".join(CATEGORIES) + "."
)


def outcome_prompt(card_text: str, last_reply: str) -> str:
    return f"{ASK}\n\n{card_text}\n\n--- End of the last reply ---\n{last_reply[-LAST_REPLY_CHARS:]}"


def ask(url: str, prompt: str) -> tuple[str, float]:
    started = time.monotonic()
    reply = httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "model": MODEL_ALIAS,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": OUTPUT_TOKENS,
            "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "outcome", "schema": SCHEMA}},
        },
        timeout=600,
    )
    reply.raise_for_status()
    return reply.json()["choices"][0]["message"]["content"], time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=12, help="of the tune split, in manifest order")
    parser.add_argument("--sheet", type=Path, help="write the card lines and replies here, to label")
    args = parser.parse_args()
    store, _ = build(Path(tempfile.mkdtemp(prefix="outcome-ask-")))
    rows = []
    with EmbeddedServer(threads=2) as server:
        for session_id in list(split_sessions("tune"))[: args.sessions]:
            card = store.cards.card(session_id)
            if card is None:
                continue
            _, turns = store.sessions.turn_page(session_id, 0, 10_000)
            text, seconds = ask(server.url, outcome_prompt(card.text(), turns[-1]["response"] or ""))
            try:
                reply = json.loads(text)
            except json.JSONDecodeError:
                reply = {"outcome": text, "category": None}
            rows.append({"session": session_id, "seconds": round(seconds, 1), "card": card.line(), **reply})
            print(f"{session_id}  {seconds:5.1f} s\n  card:    {card.line()}\n  outcome: {reply.get('outcome')!r}"
                  f"  category: {reply.get('category')}", flush=True)  # fmt: skip
    print(f"sessions asked: {len(rows)}; model seconds per session, median: "
          f"{statistics.median(r['seconds'] for r in rows):.1f}")  # fmt: skip
    if args.sheet:
        args.sheet.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"## {r['session']}\n\n- card: {r['card']}\n- outcome: {r['outcome']}\n- category: {r['category']}\n"
                 for r in rows]  # fmt: skip
        args.sheet.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
