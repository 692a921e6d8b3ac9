"""The hand-labelled verdict set (tests/fixtures/verdicts.jsonl) and the sessions it refers to: the
bundled samples' (by session id) and the transcripts of tests/fixtures/verdict_sessions.json; and the
held-out set (bench/data/verdict_blind.jsonl, issue 36.4: the embedded model's summaries of sessions
the rules were not written beside, labelled before the verdict was run on them) with its sessions'
turns (bench/data/verdict_blind_sessions.json)."""

from __future__ import annotations

import json
import time
from collections import Counter
from functools import cache
from pathlib import Path

from digest.turns import Turn, canonical_order
from digest.verdict import VERDICTS, judge

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "fixtures" / "verdicts.jsonl"
TRANSCRIPTS = ROOT / "tests" / "fixtures" / "verdict_sessions.json"
BLIND = ROOT / "bench" / "data" / "verdict_blind.jsonl"
BLIND_SESSIONS = ROOT / "bench" / "data" / "verdict_blind_sessions.json"


@cache
def sessions() -> dict[str, list[Turn]]:
    """Every session of the set, by id: the samples ingested as the store ingests them (a real
    DuckDB file), the transcripts as plain turns."""
    from resources.store import DigestStore
    from tests.bundles import ingested_samples

    store = DigestStore(ingested_samples(), read_only=True)
    with store.file.held():  # one connection for the lot
        ids = store.query("SELECT session_id FROM sessions ORDER BY 1")["session_id"].tolist()
        turns = store.sessions.load_turns(ids)
    found: dict[str, list[Turn]] = {}
    for turn in canonical_order(turns):
        found.setdefault(turn.session_id, []).append(turn)
    for name, documents in json.loads(TRANSCRIPTS.read_text(encoding="utf-8")).items():
        found[name] = [Turn(id=f"{name}-{i}", session_id=name, document=d) for i, d in enumerate(documents)]
    return found


@cache
def blind_sessions() -> dict[str, list[str]]:
    """The held-out set's sessions: each one's turn documents, in canonical order."""
    return json.loads(BLIND_SESSIONS.read_text(encoding="utf-8"))


def cases(path: Path = CASES) -> list[dict]:
    """The labelled rows: session, title, summary, label, source (who wrote it), note."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def judged(blind: bool = False) -> list[dict]:
    """Each labelled row (of the held-out set with `blind`) with the verdict it gets (`verdict`) and
    the judge's CPU milliseconds."""
    if blind:
        documents = blind_sessions()
    else:
        documents = {name: [t.document for t in turns] for name, turns in sessions().items()}
    rows = []
    for case in cases(BLIND if blind else CASES):
        started = time.process_time()
        verdict = judge(documents[case["session"]], case["title"], case["summary"])
        rows.append({**case, "verdict": verdict.label, "cpu_ms": (time.process_time() - started) * 1000})
    return rows


def per_class(rows: list[dict]) -> dict[str, dict]:
    """Precision and recall of each verdict on the labelled rows (None: nothing to divide by)."""
    figures = {}
    for label in VERDICTS:
        predicted = sum(r["verdict"] == label for r in rows)
        actual = sum(r["label"] == label for r in rows)
        hits = sum(r["verdict"] == label == r["label"] for r in rows)
        figures[label] = {
            "labelled": actual,
            "judged": predicted,
            "precision": round(hits / predicted, 3) if predicted else None,
            "recall": round(hits / actual, 3) if actual else None,
        }
    return figures


def junk_against_ok(rows: list[dict]) -> tuple[float, float]:
    """Junk of any class told from ok: the precision and recall a caller deciding to keep or retry sees."""
    flagged = [r for r in rows if r["verdict"] != "ok"]
    junk = [r for r in rows if r["label"] != "ok"]
    hits = sum(r["label"] != "ok" for r in flagged)
    return round(hits / max(1, len(flagged)), 3), round(hits / max(1, len(junk)), 3)


def confusion(rows: list[dict]) -> dict[str, int]:
    return dict(Counter(f"{r['label']} -> {r['verdict']}" for r in rows if r["label"] != r["verdict"]))
