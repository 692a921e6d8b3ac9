"""Secret redaction at ingest (issue 35): the curated pattern set (`digest.redact`) beside Yelp's
detect-secrets (PyPI 1.5.0, every plugin and its default filters), on the same text in one run.

Run: PYTHONPATH=. .venv/bin/python bench/redaction.py [--sessions 60] [--seed 28] [--baseline FILE]
(`--baseline` adds another version of `digest/redact.py` as an arm, measured beside this one:
`git show main:digest/redact.py > /tmp/redact_main.py` and `--baseline /tmp/redact_main.py`.)
(detect-secrets is not a project dependency: `.venv/bin/pip install detect-secrets==1.5.0` first,
else its rows say it is missing.)

1. the labelled sample, `tests/fixtures/secrets/labelled.jsonl`: secrets in the formats agents
   print (tool output, `.env` dumps, curl commands, connection strings, JSON and YAML configs,
   code) and ordinary text that must come through unchanged (hex hashes, UUIDs, base64 test data,
   long identifiers, paths, commit hashes, `password=` in docs, `KEY=${VAR}`): recall (the planted
   secrets no longer in the text) and false positives (ordinary cases changed), apart for the cases
   written with the patterns and for each held-out set (`heldout` 1: written after issue 35's
   patterns, 7/11 caught then; 2: written before the patterns for set 1's misses, 3/19 caught
   then; both tuned on since);
2. ordinary transcripts, `tests/realistic_corpus.py` (no planted secret): the replacements each
   makes there (all false), and its cost per MB of turn text;
3. the ingest: `digest.ingest.ingest_paths` of that corpus as plain JSONL into a fresh store with
   redaction on and off, its cost per MB of log.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from digest.ingest import ingest_paths  # noqa: E402
from digest.redact import redact  # noqa: E402
from resources.store import DigestStore  # noqa: E402
from tests.realistic_corpus import write_corpus  # noqa: E402

LABELLED = ROOT / "tests" / "fixtures" / "secrets" / "labelled.jsonl"
OUT = Path(__file__).resolve().parent / "out"
# The held-out sets tuned on after they were measured blind (docs/ingest.md gives their first figure).
TUNED_ON = {1, 2}


# A redactor takes texts and gives them back redacted, in order.
Redactor = Callable[[list[str]], list[str]]


def curated(texts: list[str]) -> list[str]:
    return [redact(t) for t in texts]


def baseline(path: Path) -> Redactor:
    """Another version of `digest/redact.py` (main's, say), loaded from its file."""
    spec = importlib.util.spec_from_file_location("redact_baseline", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return lambda texts: [module.redact(t) for t in texts]


def detect_secrets_arms() -> dict[str, Redactor | None]:
    """detect-secrets two ways: as its CLI scans a repository (the texts written to one file, every
    plugin with its default filters, `SecretsCollection.scan_file`), and as it scans a string
    (`scan_line`, its `scan --string` mode); each secret value it reports is replaced in its line.
    None: not installed."""
    try:
        from detect_secrets import SecretsCollection
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings
    except ImportError:
        return {"detect-secrets, file scan": None, "detect-secrets, string scan": None}

    def replaced(line: str, values: list[tuple[str, str]]) -> str:
        for kind, value in values:
            if value:
                line = line.replace(value, f"[REDACTED:{kind}]")
        return line

    def file_scan(texts: list[str]) -> list[str]:
        lines = [line for t in texts for line in t.split("\n")]
        with tempfile.TemporaryDirectory() as tmp, default_settings():
            path = Path(tmp) / "transcript.txt"
            path.write_text("\n".join(lines), encoding="utf-8")
            found = SecretsCollection()
            found.scan_file(str(path))
            by_line: dict[int, list[tuple[str, str]]] = {}
            for _, secret in found:
                by_line.setdefault(secret.line_number - 1, []).append((secret.type, secret.secret_value))
        lines = [replaced(line, by_line.get(i, [])) for i, line in enumerate(lines)]
        out, at = [], 0
        for t in texts:
            n = t.count("\n") + 1
            out.append("\n".join(lines[at : at + n]))
            at += n
        return out

    def string_scan(texts: list[str]) -> list[str]:
        with default_settings():
            return [
                "\n".join(replaced(line, [(s.type, s.secret_value) for s in scan_line(line)]) for line in t.split("\n"))
                for t in texts
            ]

    return {"detect-secrets, file scan": file_scan, "detect-secrets, string scan": string_scan}


def leaked(secret: str, text: str) -> bool:
    """Whether 8 characters of the secret in a row are still in the text: a redactor that replaced
    only a token's prefix (detect-secrets reports `ghp` as a GitHub token's value) leaked it."""
    return any(secret[i : i + 8] in text for i in range(max(1, len(secret) - 7)))


def labelled(redactor: Redactor, heldout: int) -> dict:
    """Recall and false positives on the sample's cases written with the patterns (`heldout` 0),
    or on one held-out set of them (written before the patterns they test, never tuned against)."""
    cases = [json.loads(line) for line in LABELLED.read_text(encoding="utf-8").splitlines()]
    cases = [c for c in cases if c.get("heldout", 0) == heldout]
    planted = found = ordinary = eaten = 0
    missed, false = [], []
    for case, out in zip(cases, [redactor([c["text"]])[0] for c in cases]):
        if case["secrets"]:
            for secret in case["secrets"]:
                planted += 1
                if leaked(secret, out):
                    missed.append(case["where"])
                else:
                    found += 1
        else:
            ordinary += 1
            if out != case["text"]:
                eaten += 1
                false.append(case["where"])
    return {"planted": planted, "found": found, "ordinary": ordinary, "eaten": eaten, "missed": missed, "false": false}


def corpus_texts(folder: Path) -> list[str]:
    texts = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            texts += [row.get(k) or "" for k in ("prompt", "thought", "response")]
    return texts


def timed(redactor: Redactor, texts: list[str]) -> tuple[float, int]:
    """Seconds to redact every text, and the texts it changed."""
    start = time.perf_counter()
    outs = redactor(texts)
    return time.perf_counter() - start, sum(a != b for a, b in zip(texts, outs))


def ingest_seconds(folder: Path, redact_secrets: bool, work: Path) -> float:
    store = DigestStore(work / f"{'on' if redact_secrets else 'off'}.duckdb")
    store.migrate()
    start = time.perf_counter()
    ingest_paths([folder], store, redact_secrets=redact_secrets)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--baseline", type=Path, help="another digest/redact.py to measure beside this one")
    args = parser.parse_args()

    arms: dict[str, Redactor | None] = {"curated (digest.redact)": curated}
    if args.baseline:
        arms["curated, --baseline"] = baseline(args.baseline)
    arms |= detect_secrets_arms()
    print("1. Labelled sample (tests/fixtures/secrets/labelled.jsonl)")
    sets = sorted({json.loads(line).get("heldout", 0) for line in LABELLED.read_text(encoding="utf-8").splitlines()})
    for heldout in sets:
        tuned = "tuned on since" if heldout in TUNED_ON else "not tuned on"
        print(f"held-out cases, set {heldout} ({tuned})" if heldout else "cases written with the patterns")
        print(f"{'arm':<30} {'recall':>14} {'false positives':>18}")
        results = {}
        for name, redactor in arms.items():
            if redactor is None:
                print(f"{name:<30} {'not installed':>14}")
                continue
            r = results[name] = labelled(redactor, heldout)
            print(f"{name:<30} {r['found']:>4}/{r['planted']:<3} {r['found'] / r['planted']:>5.0%} "
                  f"{r['eaten']:>6}/{r['ordinary']:<3} {r['eaten'] / r['ordinary']:>6.0%}")  # fmt: skip
        for name, r in results.items():
            print(f"  {name}: missed {sorted(set(r['missed'])) or 'none'}; ate {r['false'] or 'none'}")

    with tempfile.TemporaryDirectory(dir=OUT if OUT.exists() else None) as tmp:
        work = Path(tmp)
        folder = work / "corpus"
        folder.mkdir()
        write_corpus(folder, sessions=args.sessions, seed=args.seed)
        texts = corpus_texts(folder)
        megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        print(f"\n2. Ordinary transcripts: {args.sessions} sessions of tests/realistic_corpus.py, "
              f"{len(texts)} texts, {megabytes:.2f} MB, no planted secret")  # fmt: skip
        print(f"{'arm':<30} {'texts changed':>14} {'s per MB':>10} {'MB/s':>8}")
        seconds = {}
        for name, redactor in arms.items():
            if redactor is None:
                continue
            s, changed = timed(redactor, texts)
            seconds[name] = s
            print(f"{name:<30} {changed:>14} {s / megabytes:>10.3f} {megabytes / s:>8.1f}")
        ours = seconds.pop("curated (digest.redact)")
        for name, other in seconds.items():
            print(f"{name} / curated time: {other / ours:.1f}x")

        log_mb = sum(p.stat().st_size for p in folder.glob("*.jsonl")) / 1e6
        off = ingest_seconds(folder, False, work)
        on = ingest_seconds(folder, True, work)
        print(f"\n3. Ingest of the corpus as plain JSONL ({log_mb:.2f} MB of log)")
        print(f"redaction off: {off:.2f} s ({off / log_mb:.3f} s per MB)")
        print(f"redaction on:  {on:.2f} s ({on / log_mb:.3f} s per MB)")
        print(
            f"ingest with redaction / without: {on / off:.2f}x; redaction's own cost {(on - off) / log_mb:+.3f} s per MB"
        )


if __name__ == "__main__":
    main()
