"""The session-card corpus's manifest: every session the project's ingest made of
`bench/data/cards/`, where it came from, its size, its language, and its split.

Run (after the ingest; the store is opened read-only):

    DIGEST_HOME=/tmp/blind-home session-digest ingest bench/data/cards/raw bench/data/cards/plain
    DIGEST_HOME=/tmp/blind-home PYTHONPATH=. python bench/cards_manifest.py

It reads `bench/data/cards/sources.json` (a raw file's repository, path and commit) and the store's
`turns` and `rejects` tables, and writes `bench/data/cards/manifest.json`.

The split is mechanical, made before any card or summary exists: the sessions of each harness, in
the order of their ids, are shuffled by one `random.Random(40)` (harnesses in name order), and each
harness gives `tune` its share of TUNE sessions (largest remainders); the rest is `blind`.
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
CARDS = ROOT / "bench" / "data" / "cards"
SEED = 40
TUNE = 20
HARNESS = {  # sources.json's format → the harness its sessions are stratified by
    "aider": "aider",
    "specstory": "cursor-specstory",
    "claude-code-transcript-md": "claude-code",
    "claude-code-export-text": "claude-code",
    "claude-code-jsonl": "claude-code",
    "swe-agent": "swe-agent",
    "mini-swe-agent": "mini-swe-agent",
}


def text_language(text: str) -> str:
    """One text's language: a script's share of its letters, then common words for the
    Latin-script languages (English when nothing else shows)."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)  # code is not language
    letters = len(re.findall(r"[^\W\d_]", text)) or 1
    share = lambda pattern: len(re.findall(pattern, text)) / letters  # noqa: E731
    if share(r"[\u3040-\u30ff]") > 0.05:
        return "ja"
    if share(r"[\u4e00-\u9fff]") > 0.1:
        return "zh"
    if share(r"[\u0400-\u04ff]") > 0.2:
        return "uk" if re.search(r"[їієґЇІЄҐ]", text) and not re.search(r"[ыэъЫЭЪ]", text) else "ru"
    words = Counter(re.findall(r"[a-záéíóúãõçěščřžýůťďň]+", text.lower()))
    scores = {
        "cs": sum(
            words[w] for w in ("je", "se", "na", "že", "jsem", "jak", "pro", "také", "není", "bude", "když", "aby")
        ),
        "es": sum(words[w] for w in ("que", "el", "los", "las", "para", "una", "por", "con", "del", "es", "quiero")),
        "pt": sum(words[w] for w in ("que", "não", "para", "uma", "com", "os", "do", "da", "você", "é", "isso")),
        "id": sum(words[w] for w in ("yang", "dan", "di", "ini", "saya", "untuk", "dengan", "ada", "coba", "apakah")),
        "en": sum(words[w] for w in ("the", "and", "to", "is", "of", "in", "that", "it", "for", "this", "please")),
    }
    best = max(scores, key=scores.get)
    return best if scores[best] > scores["en"] else "en"


def language(prompts: list[str], responses: str) -> str:
    """The language a session is mostly held in: its prompts' vote, each prompt judged by its first
    400 characters (a pasted log or code after them does not count); the replies when the prompts
    have too few letters to tell."""
    votes = Counter(text_language(p[:400]) for p in prompts if len(re.findall(r"[^\W\d_]", p[:400])) >= 12)
    if not votes:
        return text_language(responses)
    top = votes.most_common()
    if len(top) > 1 and top[0][1] == top[1][1] and "en" in (top[0][0], top[1][0]):
        return next(lang for lang, _ in top[:2] if lang != "en")  # a tie: the other language
    return top[0][0]


def aider_session_bytes(path: Path) -> dict[str, int]:
    """An aider history's sessions' bytes, by their start (the digits its session ids begin with)."""
    out = {}
    for part in re.split(rb"(?m)^(?=# aider chat started at )", path.read_bytes())[1:]:
        start = re.match(rb"# aider chat started at (.*)", part)[1].decode()
        out[re.sub(r"\D", "", start)] = len(part)
    return out


def main() -> None:
    home = Path(os.environ.get("DIGEST_HOME", "/tmp/blind-home"))
    con = duckdb.connect(str(home / "digest.duckdb"), read_only=True)
    sources = {s["raw"]: s for s in json.loads((CARDS / "sources.json").read_text())}
    rows = con.execute(
        "SELECT session_id, source_file, count(*), list(prompt ORDER BY id),"
        " string_agg(left(response, 4000), '\n' ORDER BY id), min(agent), min(model)"
        " FROM turns GROUP BY session_id, source_file ORDER BY session_id"
    ).fetchall()
    rejects = con.execute("SELECT source_file, line_no, reason FROM rejects ORDER BY 1, 2").fetchall()
    sessions = []
    for session_id, source_file, turns, prompts, responses, agent, model in rows:
        file = Path(source_file).resolve().relative_to(CARDS)
        if file.parts[0] == "plain":  # a conversion: its source is the raw file it was made from
            kind, owner, name, stem = file.stem.split("__", 3)
            raw = f"raw/{kind}/{owner}__{name}/{stem}.md"
        else:
            raw = str(file)
        source = sources[raw]
        entry = {
            "session_id": session_id,
            "file": str(file),
            "raw": raw,
            "repo": source["repo"],
            "path": source["path"],
            "commit": source["commit"],
            "harness": HARNESS[source["format"]],
            "format": source["format"],
            "agent": agent,
            "model": model,
            "language": language([p or "" for p in prompts], responses or ""),
            "turns": turns,
            "bytes": (CARDS / file).stat().st_size,
        }
        if source["format"] == "aider":
            entry["bytes"] = aider_session_bytes(CARDS / file).get(session_id.split("-")[1], entry["bytes"])
        for key in ("redacted_by_hand", "upstream_resolved", "upstream_resolved_from", "kept_sessions"):
            if key in source:
                entry[key] = source[key]
        sessions.append(entry)

    by_harness = defaultdict(list)
    for entry in sessions:
        by_harness[entry["harness"]].append(entry)
    rng = random.Random(SEED)
    shuffled = {}
    for harness in sorted(by_harness):
        order = sorted(by_harness[harness], key=lambda e: e["session_id"])
        rng.shuffle(order)
        shuffled[harness] = order
    quota = {h: TUNE * len(v) / len(sessions) for h, v in shuffled.items()}
    counts = {h: int(q) for h, q in quota.items()}
    for h in sorted(quota, key=lambda h: (-(quota[h] - counts[h]), h))[: TUNE - sum(counts.values())]:
        counts[h] += 1
    for harness, order in shuffled.items():
        for i, entry in enumerate(order):
            entry["split"] = "tune" if i < counts[harness] else "blind"

    turns = sorted(e["turns"] for e in sessions)
    manifest = {
        "description": "Real agent work sessions from public repositories, for measuring session cards blind (README.md).",
        "ingest": "DIGEST_HOME=/tmp/blind-home session-digest ingest bench/data/cards/raw bench/data/cards/plain",
        "split": {"seed": SEED, "stratified_by": "harness", "tune_target": TUNE, "tune_per_harness": counts},
        "splits": {s: sorted(e["session_id"] for e in sessions if e["split"] == s) for s in ("tune", "blind")},
        "figures": {
            "sessions": len(sessions),
            "files": len({e["file"] for e in sessions}),
            "repositories": len({e["repo"] for e in sessions}),
            "per_harness": dict(sorted(Counter(e["harness"] for e in sessions).items())),
            "per_language": dict(Counter(e["language"] for e in sessions).most_common()),
            "turns": {
                "total": sum(turns),
                "median": statistics.median(turns),
                "p90": turns[min(len(turns) - 1, int(0.9 * len(turns)))],
                "max": turns[-1],
            },
            "bytes": {
                "sessions_total": sum(e["bytes"] for e in sessions),
                "folder_total": sum(p.stat().st_size for p in CARDS.rglob("*") if p.is_file()),
            },
            "rejects": len(rejects),
        },
        "rejects": [{"file": str(Path(f).resolve().relative_to(CARDS)), "line": n, "reason": r} for f, n, r in rejects],
        "sessions": sorted(sessions, key=lambda e: (e["harness"], e["repo"], e["file"], e["session_id"])),
    }
    (CARDS / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    json.dump(manifest["figures"] | {"split": manifest["split"]}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
