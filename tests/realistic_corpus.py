"""A seeded corpus of agent sessions with the sizes of real transcripts (issue 28), for the
`bench/real_transcripts.py` benchmark and its tests.

    write_corpus(folder, sessions=290, seed=28)
    python tests/realistic_corpus.py OUT_DIR [--sessions 290] [--seed 28]

The targets were measured on 290 public transcripts of 6 harnesses (issue 28): turns per session
median 8, upper quartile 28, max 388, 57 single-turn sessions (20%) and 15 of 100+ turns (5%); raw
bytes per session median 54 KB, upper quartile 180 KB, max 2.06 MB; single turns up to 200 KB; about
20% of the bytes in lines of 40+ characters already seen earlier in the same session.

The distribution fitted to them (a grid search over draws; `python tests/realistic_corpus.py`
prints the corpus's figures beside `TARGETS`):
- turns: 1 with probability 0.197, else round(exp(N(2.5, 1.4))) clipped to [2, 388]: median 8,
  upper quartile 24 (a lognormal cannot give 28 and 5% of 100+ turns together; 5% was kept);
- bytes: exp(9.3 + 0.8 ln(turns) + N(0, 1.1)), at most 2.06 MB, shared among the turns by
  lognormal(0, 1.2) weights, each turn at most 200 KB: more turns, more bytes, fewer per turn;
- text: a short user prompt, then an agent response of tool calls and their outputs (file dumps of
  code, test logs, diffs, shell output with paths and URLs, `http://` alone in f-strings); a block
  re-prints one the session printed before (a file read again, a log shown again) with probability
  `REPEAT_PROBABILITY`, which puts about 20% of the bytes in repeated 40+ character lines.
Standard library only; the same seed writes the same bytes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

# The measured targets (issue 28) the generator is fitted to.
TARGETS = {
    "turns_median": 8,
    "turns_q3": 28,
    "turns_max": 388,
    "single_turn_share": 0.20,
    "hundred_plus_share": 0.05,
    "bytes_median": 54_000,
    "bytes_q3": 180_000,
    "bytes_max": 2_060_000,
    "turn_bytes_max": 200_000,
    "repeated_share": 0.20,
}
SINGLE_TURN_P = 0.197
TURNS_MU, TURNS_SIGMA = 2.5, 1.4
BYTES_A, BYTES_B, BYTES_SIGMA = 9.3, 0.8, 1.1
TURN_WEIGHT_SIGMA = 1.2
REPEAT_PROBABILITY = 0.21
MIN_TURN_BYTES = 120
START = datetime(2026, 9, 1, tzinfo=UTC)

_WORDS = (
    "cache store router worker config parser session token buffer index query schema batch "
    "handler client server request reply stream retry budget ledger partition sensor summary"
).split()
_DIRS = ["src", "lib", "app", "pkg", "core", "tests", "scripts", "services", "internal"]
_EXTS = [".py", ".ts", ".go", ".rs", ".mjs", ".java"]
_HOSTS = ["github.com", "docs.python.org", "pypi.org", "example.com", "localhost:8080", "api.internal"]
_AGENTS = [
    ("claude-code", "claude-sonnet-4"),
    ("codex-cli", "gpt-5-codex"),
    ("aider", "deepseek-chat"),
    ("swe-agent", "gpt-4o"),
]
_ASKS = [
    "Fix the failing test in {path}.",
    "Why does {name} time out under load? Look at {path} and the logs.",
    "Add retry with backoff to the {name} client in {path}, with tests.",
    "Refactor {path}: split {name} into smaller functions, keep behaviour.",
    "The CI job fails on {path}; find out why and fix it.",
    "Review the diff for {name} and tell me what could break.",
    "continue",
    "Run the tests again.",
]


@dataclass
class SessionPlan:
    """One session's size: its turns' byte targets (their sum the session's raw bytes)."""

    session_id: str
    turn_bytes: list[int] = field(default_factory=list)


def _rng(seed: int, index: int) -> random.Random:
    return random.Random(f"{seed}:{index}")  # a string seed is hashed the same in every run


def draw_turns(rng: random.Random) -> int:
    if rng.random() < SINGLE_TURN_P:
        return 1
    return min(TARGETS["turns_max"], max(2, round(math.exp(rng.gauss(TURNS_MU, TURNS_SIGMA)))))


def draw_plan(seed: int, index: int) -> SessionPlan:
    """The sizes of session `index` of the corpus of `seed`: no text, so a test can draw thousands."""
    rng = _rng(seed, index)
    turns = draw_turns(rng)
    total = math.exp(BYTES_A + BYTES_B * math.log(turns) + rng.gauss(0, BYTES_SIGMA))
    total = min(total, TARGETS["bytes_max"])
    weights = [math.exp(rng.gauss(0, TURN_WEIGHT_SIGMA)) for _ in range(turns)]
    scale = total / sum(weights)
    sizes = [max(MIN_TURN_BYTES, min(TARGETS["turn_bytes_max"], round(w * scale))) for w in weights]
    excess = sum(sizes) - TARGETS["bytes_max"]  # the rounding and the smallest turns' floor can overshoot
    if excess > 0:
        largest = sizes.index(max(sizes))
        sizes[largest] -= excess
    return SessionPlan(f"rt-{seed}-{index:05d}", sizes)


def quantile(values: list[float], q: float) -> float:
    """The q-quantile by the nearest rank below (as the targets were counted)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def size_figures(plans: list[SessionPlan]) -> dict[str, float]:
    """The corpus's figures under the names of `TARGETS` (the repeated share is the text's)."""
    turns = [len(p.turn_bytes) for p in plans]
    sizes = [sum(p.turn_bytes) for p in plans]
    return {
        "turns_median": quantile(turns, 0.5),
        "turns_q3": quantile(turns, 0.75),
        "turns_max": max(turns),
        "single_turn_share": sum(t == 1 for t in turns) / len(turns),
        "hundred_plus_share": sum(t >= 100 for t in turns) / len(turns),
        "bytes_median": quantile(sizes, 0.5),
        "bytes_q3": quantile(sizes, 0.75),
        "bytes_max": max(sizes),
        "turn_bytes_max": max(max(p.turn_bytes) for p in plans),
    }


# --- text ---------------------------------------------------------------------------------------


class _Text:
    """One session's vocabulary and what it has printed, for blocks printed again."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.names = [f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}" for _ in range(12)]
        self.paths = [
            f"{rng.choice(_DIRS)}/{rng.choice(_WORDS)}/{rng.choice(self.names)}{rng.choice(_EXTS)}" for _ in range(8)
        ]
        self.printed: list[str] = []

    def _code(self) -> str:
        r, name = self.rng, self.rng.choice(self.names)
        lines = [f"# {self.rng.choice(self.paths)}", f"def {name}(request, retries={r.randint(1, 9)}):"]
        for _ in range(r.randint(8, 60)):
            lines.append(
                r.choice(
                    [
                        f"    {r.choice(self.names)} = {r.choice(self.names)}.get({r.choice(_WORDS)!r}, {r.randint(0, 999)})",
                        f"    if {r.choice(self.names)} is None or len({r.choice(_WORDS)}) > {r.randint(2, 4096)}:",
                        f"        raise ValueError(f\"{r.choice(_WORDS)} {{{r.choice(self.names)}}} out of range\")",
                        f'    url = f"http://{{host}}:{{port}}/{r.choice(_WORDS)}/{r.randint(1, 99)}"',
                        f"    return {r.choice(self.names)}({r.choice(_WORDS)}, timeout={r.randint(1, 60)})",
                        f"    logger.info(\"{r.choice(_WORDS)} {r.choice(_WORDS)} done in %s ms\", elapsed)",
                    ]
                )
            )
        return "\n".join(lines)

    def _test_log(self) -> str:
        r = self.rng
        lines = [f"$ pytest {r.choice(self.paths)} -q", "=" * 30 + " test session starts " + "=" * 30]
        for _ in range(r.randint(5, 80)):
            path, name = r.choice(self.paths), r.choice(self.names)
            outcome = r.choice(["PASSED", "PASSED", "PASSED", "FAILED", "SKIPPED"])
            lines.append(f"{path}::test_{name}_{r.choice(_WORDS)}[{r.randint(0, 500)}] {outcome} [{r.randint(1, 99)}%]")
        lines.append(f"E   AssertionError: expected {r.randint(0, 99)} got {r.randint(0, 99)} at {r.choice(self.paths)}")
        lines.append(f"{r.randint(1, 200)} passed, {r.randint(0, 9)} failed in {r.uniform(0.5, 90):.2f}s")
        return "\n".join(lines)

    def _diff(self) -> str:
        r, path = self.rng, self.rng.choice(self.paths)
        lines = [f"diff --git a/{path} b/{path}", f"--- a/{path}", f"+++ b/{path}", f"@@ -{r.randint(1, 400)},7 +{r.randint(1, 400)},9 @@"]
        for _ in range(r.randint(4, 40)):
            sign = r.choice(["+", "-", " "])
            lines.append(f"{sign}    {r.choice(self.names)} = {r.choice(self.names)}({r.choice(_WORDS)}={r.randint(0, 99)})")
        return "\n".join(lines)

    def _shell(self) -> str:
        r = self.rng
        lines = [f"$ {r.choice(['grep -rn', 'ls -la', 'git log --oneline', 'curl -s'])} {r.choice(self.paths)}"]
        for _ in range(r.randint(2, 30)):
            lines.append(
                r.choice(
                    [
                        f"{r.choice(self.paths)}:{r.randint(1, 900)}: {r.choice(self.names)}({r.choice(_WORDS)})",
                        f"https://{r.choice(_HOSTS)}/{r.choice(_WORDS)}/{r.choice(self.names)}#L{r.randint(1, 500)}",
                        f"{r.randrange(16**7):07x} {r.choice(_WORDS)}: {r.choice(_WORDS)} the {r.choice(self.names)}",
                        f"-rw-r--r-- 1 dev dev {r.randint(100, 99999):>6} Nov {r.randint(1, 30):>2} {r.choice(self.paths)}",
                    ]
                )
            )
        return "\n".join(lines)

    def _prose(self) -> str:
        r = self.rng
        return (
            f"I'll look at {r.choice(self.paths)} first: {r.choice(self.names)} calls {r.choice(self.names)} "
            f"with the {r.choice(_WORDS)} before the {r.choice(_WORDS)} is ready, so the {r.choice(_WORDS)} "
            f"goes stale. Next I change {r.choice(self.names)} and run the tests."
        )

    def block(self) -> str:
        if self.printed and self.rng.random() < REPEAT_PROBABILITY:
            return self.rng.choice(self.printed)  # a file read again, an output shown again
        kind = self.rng.choices([self._code, self._test_log, self._diff, self._shell, self._prose], [3, 2, 2, 2, 1])[0]
        text = kind()
        if kind is not self._prose:
            self.printed.append(text)
        return text

    def prompt(self) -> str:
        return self.rng.choice(_ASKS).format(path=self.rng.choice(self.paths), name=self.rng.choice(self.names))

    def response(self, size: int) -> str:
        parts, length = [], 0
        while length < size:
            call = f"[tool: {self.rng.choice(['read_file', 'bash', 'edit', 'search'])}]"
            text = f"{self._prose()}\n{call}\n{self.block()}"
            parts.append(text)
            length += len(text.encode("utf-8")) + 2
        return "\n\n".join(parts).encode("utf-8")[:size].decode("utf-8", "ignore")


def session_turns(plan: SessionPlan, seed: int, index: int) -> list[dict]:
    """The session's turns as plain JSONL rows (docs/ingest.md): a prompt and a response each."""
    rng = _rng(seed, -1 - index)
    text = _Text(rng)
    agent, model = rng.choice(_AGENTS)
    started = START + timedelta(minutes=rng.randint(0, 60 * 24 * 60))
    rows = []
    for n, size in enumerate(plan.turn_bytes):
        prompt = text.prompt()
        rows.append(
            {
                "id": f"{plan.session_id}-t{n:03d}",
                "session_id": plan.session_id,
                "timestamp": (started + timedelta(seconds=40 * n)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "prompt": prompt,
                "response": text.response(max(1, size - len(prompt))),
                "agent": agent,
                "model": model,
                "tool_calls": rng.randint(0, 6),
            }
        )
    return rows


def write_corpus(folder: Path, sessions: int = 290, seed: int = 28) -> list[SessionPlan]:
    """`sessions` sessions as one plain JSONL turn file, `corpus-<seed>.jsonl`; their plans."""
    folder.mkdir(parents=True, exist_ok=True)
    plans = [draw_plan(seed, i) for i in range(sessions)]
    with (folder / f"corpus-{seed}.jsonl").open("w", encoding="utf-8") as out:
        for i, plan in enumerate(plans):
            for row in session_turns(plan, seed, i):
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return plans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sessions", type=int, default=290)
    parser.add_argument("--seed", type=int, default=28)
    args = parser.parse_args()
    plans = write_corpus(args.out, args.sessions, args.seed)
    figures = size_figures(plans)
    for name, target in TARGETS.items():
        if name in figures:
            print(f"{name:<20} {figures[name]:>12,.3f}  target {target:,}")


if __name__ == "__main__":
    main()
