"""The held-out verdict set (issue 36.4): real summaries by the embedded model of sessions nobody
tuned the verdict on, written here unlabelled; a person then labels each row by reading it against
its session, before the verdict is run on it (`bench/verdicts.py --blind` scores it).

Run: PYTHONPATH=. .venv/bin/python bench/verdict_blind.py OUT.jsonl [--seed 36] [--within 36] [--over 10]
     PYTHONPATH=. .venv/bin/python bench/verdict_blind.py --smoke   # one short session, to a scratch file

The sessions: `--within` sessions of the realistic corpus (`tests/realistic_corpus.py`, written in
its agents' own log formats with `--seed`) whose raw prompt is short (under `SHORT_PROMPT` bytes,
so a call takes seconds on 2 cores), `--over` of it over the embedded host's raw bound (the degraded
path, at most `OVER_TURNS` turns), and the harness samples (`samples/harnesses/`; the bundle's sessions
are in the labelled set already), all ingested by the project's readers into a scratch store. Each goes through `summarize_session` with
the embedded SmolLM2 (the sweep's prompts, routing and junk retry), one call at a time (a run resumes: the sessions already in `OUT` are skipped); every reply
the model gives is a row (a raw reply the retry replaced too, as `replaced`). The turns of each
session go to `OUT` with `.jsonl` replaced by `_sessions.json`, so the set is judged without the corpus.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ (the corpus generator) is not installed

from digest.ingest import ingest_paths  # noqa: E402
from digest.settings import load_settings  # noqa: E402
from digest.summary_output import OutputParseError, parse_summary_output  # noqa: E402
from digest.synthesis import Route, build_prompt, raw_content, raw_route, summarize_session  # noqa: E402
from digest.turns import canonical_order  # noqa: E402
from resources.embedded_server import MODEL_ALIAS, EmbeddedServer  # noqa: E402
from resources.model_clients import OpenAIChatClient  # noqa: E402
from resources.store import DigestStore, RunLedger  # noqa: E402
from tests.realistic_corpus import write_corpus  # noqa: E402

SHORT_PROMPT = 6_000  # bytes of raw prompt: about 1,300 tokens, seconds of SmolLM2 on a quiet 2-core machine
OVER_TURNS = 16  # an over-bound session of at most this many turns: a compact prompt of seconds too
CORPUS_SESSIONS = 160


class Recording:
    """The client, keeping the text of every reply it gives (the one a junk retry replaces too)."""

    def __init__(self, client):
        self.client = client
        self.replies: list[str] = []

    def __getattr__(self, name):
        return getattr(self.client, name)

    def chat(self, prompt, **kwargs):
        reply = self.client.chat(prompt, **kwargs)
        self.replies.append(reply.text)
        return reply


def pick(store: DigestStore, limits, samples: list[str], within: int, over: int, seed: int) -> list[tuple[str, str]]:
    """(session id, source) of the sessions to summarize: the corpus's short ones
    and over-bound ones, interleaved in a seeded order, then the samples'."""
    rows = store.query("SELECT session_id FROM sessions ORDER BY 1")["session_id"].tolist()
    turns = {}
    for turn in canonical_order(store.sessions.load_turns(rows)):
        turns.setdefault(turn.session_id, []).append(turn)
    short, long = [], []
    for sid, ts in turns.items():
        if sid in samples:
            continue
        prompt = build_prompt(raw_content(ts), ts)
        route = raw_route(limits.estimate_tokens(prompt), limits)
        if route == Route.WITHIN_CAP and len(prompt.encode()) <= SHORT_PROMPT:
            short.append((sid, "corpus-raw"))
        elif route != Route.WITHIN_CAP and len(ts) <= OVER_TURNS:
            long.append((sid, "corpus-over"))
    rng = random.Random(seed)
    rng.shuffle(short)
    rng.shuffle(long)
    chosen = short[:within] + long[:over]
    rng.shuffle(chosen)
    return chosen + [(sid, "sample") for sid in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--within", type=int, default=36)
    parser.add_argument("--over", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="the llama.cpp server's threads")
    parser.add_argument("--smoke", action="store_true", help="one short session of a small corpus, no samples")
    args = parser.parse_args()
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            write_set(Path(tmp) / "smoke.jsonl", args.seed, 1, 0, args.threads, corpus_sessions=20, samples=False)
        return
    if args.out is None:
        parser.error("OUT is needed unless --smoke")
    write_set(args.out, args.seed, args.within, args.over, args.threads)


def write_set(
    out_path: Path,
    seed: int,
    within: int,
    over: int,
    threads: int,
    corpus_sessions: int = CORPUS_SESSIONS,
    samples: bool = True,
) -> None:
    """The summaries of the chosen sessions, a row per reply, appended to `out_path`."""
    limits = load_settings({"DIGEST_MODEL_PROVIDER": "embedded"}).limits()
    limits = dataclasses.replace(limits, timeout_s=900)  # a shared, loaded machine: no call cut short
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        write_corpus(corpus, corpus_sessions, seed, harness=True)
        store = DigestStore(Path(tmp) / "digest.duckdb")
        store.migrate()
        report = ingest_paths([ROOT / "samples" / "harnesses"] if samples else [], store)
        sample_ids = sorted(s["session_id"] for s in report.sessions)
        report = ingest_paths([corpus], store)
        print(f"ingested {len(sample_ids)} sample sessions, {len(report.sessions)} of the corpus", flush=True)
        chosen = pick(store, limits, sample_ids, within, over, seed)
        sessions_file = out_path.with_name(out_path.stem + "_sessions.json")
        documents = json.loads(sessions_file.read_text(encoding="utf-8")) if sessions_file.exists() else {}
        for sid, _ in chosen:  # a second batch (another seed) adds its sessions to the first's
            documents[sid] = [t.document for t in canonical_order(store.sessions.load_turns([sid]))]
        sessions_file.write_text(json.dumps(documents, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
        done = set()
        if out_path.exists():  # a resumed run: the sessions already written are not asked again
            done = {json.loads(line)["session"] for line in out_path.read_text(encoding="utf-8").splitlines()}
        # One thread: on a shared, loaded machine two threads wait on each other at every layer.
        with EmbeddedServer(threads=threads) as server, out_path.open("a", encoding="utf-8") as out:
            client = OpenAIChatClient(server.url, MODEL_ALIAS, schema_style="json_object")
            written = 0
            for n, (sid, source) in enumerate(chosen):
                if sid in done:
                    continue
                recording = Recording(client)
                turns = store.sessions.load_turns([sid])
                result = summarize_session(
                    turns, recording, limits, RunLedger(store, f"blind-{n}"), count_tokens=client.count_tokens
                )
                final = result.summary.output if result.summary else None
                for i, text in enumerate(recording.replies):
                    try:
                        output = parse_summary_output(text)
                    except OutputParseError as exc:
                        print(sid, "unparsed reply:", str(exc)[:120], flush=True)
                        continue
                    kept = final is not None and output.title == final.title and output.summary == final.summary
                    row = {
                        "session": sid,
                        "source": source,
                        "route": str(result.route_reason),
                        "tier": str(result.summary.source_tier) if kept else "raw",
                        "call": i,
                        "replaced": not kept,
                        "title": output.title,
                        "summary": output.summary,
                    }
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")
                    out.flush()
                    print(n, sid, row["tier"], repr(output.title)[:80], flush=True)
                    written += 1
        print(f"{written} replies of {len(chosen) - len(done)} sessions written to {out_path}")


if __name__ == "__main__":
    main()
