"""Redaction that takes secrets and leaves words: today's patterns (`digest/redact.py` at `--old-ref`,
read with `git show` into a module) beside this checkout's, in one run, on the same texts.

Run: PYTHONPATH=. .venv/bin/python bench/redaction_words.py [--sessions 60] [--rounds 5] [--smoke] [--tune-only]

1. Look-alikes, `bench/data/redaction_lookalikes.jsonl`: non-secret text in the forms code, READMEs,
   configs and transcripts use (key names with plain values, header names as values, type names,
   example configs and defaults, env var names in docs, JSON-escaped commands), each either `tune`
   (the patterns were changed while looking at these) or `heldout` (written with them, before the
   patterns changed, and scored only at the end; `--tune-only` leaves them out). A look-alike counts
   as a false positive when the redactor changes it at all.
2. Secrets, `tests/fixtures/secrets/labelled.jsonl`, the sets `bench/redaction.py` keeps: recall (no 8
   characters of a planted secret in a row left) and false positives on its ordinary cases.
3. Cost: `tests/realistic_corpus.py`'s ordinary turns redacted by each arm in turn, the best of
   `--rounds`, CPU seconds per MB.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from digest.redact import redact  # noqa: E402
from tests.realistic_corpus import write_corpus  # noqa: E402

LOOKALIKES = ROOT / "bench" / "data" / "redaction_lookalikes.jsonl"
LABELLED = ROOT / "tests" / "fixtures" / "secrets" / "labelled.jsonl"
# The last commit on main that changed digest/redact.py before the look-alikes were measured.
OLD_REF = "931b0ad"

Redactor = Callable[[str], str]


def old_redactor(ref: str, work: Path) -> Redactor | None:
    """`digest/redact.py` as it was at `ref`, loaded as a module of its own; None without git."""
    try:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{ref}:digest/redact.py"], check=True, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = work / f"redact_{ref}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"redact_{ref}", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module.redact


def leaked(secret: str, text: str) -> bool:
    return any(secret[i : i + 8] in text for i in range(max(1, len(secret) - 7)))


def lookalikes(arms: dict[str, Redactor], parts: tuple[str, ...]) -> None:
    rows = [json.loads(line) for line in LOOKALIKES.read_text(encoding="utf-8").splitlines()]
    forms = len({r["form"] for r in rows})
    print(f"1. Look-alikes ({LOOKALIKES.relative_to(ROOT)}: {len(rows)} texts of {forms} forms)")
    print(f"{'arm':<8} {'part':<8} {'texts':>6} {'changed':>8} {'false positives':>16}")
    for part in parts:
        texts = [r for r in rows if r["part"] == part]
        for name, redactor in arms.items():
            eaten = [r for r in texts if redactor(r["text"]) != r["text"]]
            print(f"{name:<8} {part:<8} {len(texts):>6} {len(eaten):>8} {len(eaten) / len(texts):>16.1%}")
            by_form = Counter(r["form"] for r in eaten)
            for r in eaten:
                print(f"    {name} ate ({r['form']}): {r['text'][:90]!r} -> {redactor(r['text'])[:90]!r}")
            if by_form:
                print(f"    {name} by form: {dict(sorted(by_form.items()))}")


def secrets(arms: dict[str, Redactor]) -> None:
    cases = [json.loads(line) for line in LABELLED.read_text(encoding="utf-8").splitlines()]
    print(f"\n2. Secrets ({LABELLED.relative_to(ROOT)}: sets by `heldout`, 0 written with the patterns)")
    print(f"{'arm':<8} {'set':>4} {'recall':>14} {'false positives':>18}")
    for heldout in sorted({c.get("heldout", 0) for c in cases}):
        subset = [c for c in cases if c.get("heldout", 0) == heldout]
        for name, redactor in arms.items():
            planted = found = ordinary = eaten = 0
            missed = []
            for case in subset:
                out = redactor(case["text"])
                if case["secrets"]:
                    for secret in case["secrets"]:
                        planted += 1
                        found += not leaked(secret, out)
                        if leaked(secret, out):
                            missed.append(case["where"])
                else:
                    ordinary += 1
                    eaten += out != case["text"]
            print(f"{name:<8} {heldout:>4} {found:>4}/{planted:<3} {found / planted:>5.0%} "
                  f"{eaten:>6}/{ordinary:<3} {eaten / ordinary:>6.0%}")  # fmt: skip
            if missed:
                print(f"    {name} missed: {sorted(set(missed))}")


def cost(arms: dict[str, Redactor], sessions: int, rounds: int, work: Path) -> None:
    folder = work / "corpus"
    folder.mkdir()
    write_corpus(folder, sessions=sessions, seed=28)
    texts = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            texts += [row.get(k) or "" for k in ("prompt", "thought", "response")]
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    print(f"\n3. Cost: {sessions} sessions of tests/realistic_corpus.py, {len(texts)} texts, {megabytes:.2f} MB")
    print(f"{'arm':<8} {'texts changed':>14} {'CPU s per MB':>13}")
    seconds = dict.fromkeys(arms, float("inf"))
    changed = {}
    for _ in range(rounds):  # the arms in turn, the best round of each: the machine is shared
        for name, redactor in arms.items():
            start = time.process_time()  # CPU time: a busy neighbour costs it less than the wall clock
            outs = [redactor(t) for t in texts]
            seconds[name] = min(seconds[name], time.process_time() - start)
            changed[name] = sum(a != b for a, b in zip(texts, outs))
    for name in arms:
        print(f"{name:<8} {changed[name]:>14} {seconds[name] / megabytes:>13.3f}")
    if "old" in seconds:
        print(f"new / old CPU time: {seconds['new'] / seconds['old']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the cost, the arms in turn")
    parser.add_argument("--old-ref", default=OLD_REF)
    parser.add_argument("--smoke", action="store_true", help="2 sessions and 1 round for the cost")
    parser.add_argument("--tune-only", action="store_true", help="leave the held-out look-alikes out")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        arms: dict[str, Redactor] = {}
        old = old_redactor(args.old_ref, work)
        if old is None:
            print(f"old arm: digest/redact.py at {args.old_ref} not readable (needs a git checkout); new arm alone")
        else:
            arms["old"] = old
        arms["new"] = redact
        print(f"old: digest/redact.py at {args.old_ref}; new: this checkout\n")
        lookalikes(arms, ("tune",) if args.tune_only else ("tune", "heldout"))
        secrets(arms)
        cost(arms, 2 if args.smoke else args.sessions, 1 if args.smoke else args.rounds, work)


if __name__ == "__main__":
    main()
