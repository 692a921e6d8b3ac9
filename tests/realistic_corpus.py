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
                        f'        raise ValueError(f"{r.choice(_WORDS)} {{{r.choice(self.names)}}} out of range")',
                        f'    url = f"http://{{host}}:{{port}}/{r.choice(_WORDS)}/{r.randint(1, 99)}"',
                        f"    return {r.choice(self.names)}({r.choice(_WORDS)}, timeout={r.randint(1, 60)})",
                        f'    logger.info("{r.choice(_WORDS)} {r.choice(_WORDS)} done in %s ms", elapsed)',
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
        lines.append(
            f"E   AssertionError: expected {r.randint(0, 99)} got {r.randint(0, 99)} at {r.choice(self.paths)}"
        )
        lines.append(f"{r.randint(1, 200)} passed, {r.randint(0, 9)} failed in {r.uniform(0.5, 90):.2f}s")
        return "\n".join(lines)

    def _diff(self) -> str:
        r, path = self.rng, self.rng.choice(self.paths)
        lines = [
            f"diff --git a/{path} b/{path}",
            f"--- a/{path}",
            f"+++ b/{path}",
            f"@@ -{r.randint(1, 400)},7 +{r.randint(1, 400)},9 @@",
        ]
        for _ in range(r.randint(4, 40)):
            sign = r.choice(["+", "-", " "])
            lines.append(
                f"{sign}    {r.choice(self.names)} = {r.choice(self.names)}({r.choice(_WORDS)}={r.randint(0, 99)})"
            )
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

    def steps(self, size: int) -> list[Step]:
        """An agent response of at least `size` bytes in the plain rendering, step by step."""
        steps, length = [], 0
        while length < size:
            step = (self._prose(), self.rng.choice(_TOOLS), self.block())
            steps.append(step)
            length += len(plain_step(step)) + len(STEP_SEPARATOR)
        return steps


Step = tuple[str, str, str]  # (prose, tool, tool output)
_TOOLS = ["read_file", "bash", "edit", "search"]
STEP_SEPARATOR = "\n\n"


def plain_step(step: Step) -> str:
    prose, tool, output = step
    return f"{prose}\n[tool: {tool}]\n{output}"


def fit_steps(steps: list[Step], size: int) -> list[Step]:
    """The steps, the last output cut so that their plain rendering is `size` characters (the text
    is ASCII: bytes), or the first steps alone when cutting an output cannot get there."""
    rendered = len(STEP_SEPARATOR.join(plain_step(s) for s in steps))
    while steps and rendered > size:
        prose, tool, output = steps[-1]
        over = rendered - size
        if len(output) >= over:
            steps[-1] = (prose, tool, output[: len(output) - over])
            break
        rendered -= len(plain_step(steps[-1])) + (len(STEP_SEPARATOR) if len(steps) > 1 else 0)
        steps = steps[:-1]
    return steps


@dataclass(frozen=True)
class GeneratedTurn:
    id: str
    at: datetime
    prompt: str
    steps: list[Step]

    @property
    def response(self) -> str:
        return STEP_SEPARATOR.join(plain_step(s) for s in self.steps)


@dataclass(frozen=True)
class GeneratedSession:
    plan: SessionPlan
    agent: str  # also the harness format `--harness` writes it in
    model: str
    turns: list[GeneratedTurn]


def generate_session(plan: SessionPlan, seed: int, index: int) -> GeneratedSession:
    rng = _rng(seed, -1 - index)
    text = _Text(rng)
    agent, model = rng.choice(_AGENTS)
    started = START + timedelta(minutes=rng.randint(0, 60 * 24 * 60))
    turns = []
    for n, size in enumerate(plan.turn_bytes):
        prompt = text.prompt()
        room = max(1, size - len(prompt))
        steps = fit_steps(text.steps(room), room)
        turns.append(GeneratedTurn(f"{plan.session_id}-t{n:03d}", started + timedelta(seconds=40 * n), prompt, steps))
    return GeneratedSession(plan, agent, model, turns)


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def plain_rows(session: GeneratedSession) -> list[dict]:
    """The session's turns as plain JSONL rows (docs/ingest.md): a prompt and a response each."""
    return [
        {"id": t.id, "session_id": session.plan.session_id, "timestamp": _iso(t.at), "prompt": t.prompt,
         "response": t.response, "agent": session.agent, "model": session.model, "tool_calls": len(t.steps)}
        for t in session.turns
    ]  # fmt: skip


def session_turns(plan: SessionPlan, seed: int, index: int) -> list[dict]:
    return plain_rows(generate_session(plan, seed, index))


# --- the harness formats (what docs/ingest.md says each reader takes) ----------------------------


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in rows)


def claude_code_log(s: GeneratedSession) -> tuple[str, str]:
    """A Claude Code session log: the user's event, then per step the assistant's text and tool_use
    and the user event holding the tool_result."""
    sid, rows, parent = s.plan.session_id, [], None

    def event(kind: str, at: datetime, message: dict) -> None:
        nonlocal parent
        uuid = f"{sid}-e{len(rows):05d}"
        rows.append({"parentUuid": parent, "isSidechain": False, "userType": "external", "sessionId": sid,
                     "cwd": "/home/dev/project", "version": "2.0.14", "type": kind, "message": message,
                     "uuid": uuid, "timestamp": _iso(at)})  # fmt: skip
        parent = uuid

    for t in s.turns:
        event("user", t.at, {"role": "user", "content": t.prompt})
        for n, (prose, tool, output) in enumerate(t.steps):
            call = f"toolu_{t.id}-{n}"
            content = [{"type": "text", "text": prose},
                       {"type": "tool_use", "id": call, "name": tool, "input": {"command": tool}}]  # fmt: skip
            event("assistant", t.at, {"role": "assistant", "model": s.model, "content": content})
            result = [{"type": "tool_result", "tool_use_id": call, "content": output}]
            event("user", t.at, {"role": "user", "content": result})
    return f"{sid}.jsonl", _jsonl(rows)


def codex_rollout(s: GeneratedSession) -> tuple[str, str]:
    """A Codex CLI rollout: session_meta and turn_context, then per turn the user's message and per
    step the assistant's message, a shell function_call and its output."""
    sid, first = s.plan.session_id, s.turns[0].at

    def line(at: datetime, kind: str, payload: dict) -> dict:
        return {"timestamp": _iso(at), "type": kind, "payload": payload}

    def message(role: str, text: str) -> dict:
        part = "output_text" if role == "assistant" else "input_text"
        return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}

    meta = {"id": sid, "timestamp": _iso(first), "cwd": "/home/dev/project", "originator": "codex_cli_rs",
            "cli_version": "0.58.0", "source": "cli"}  # fmt: skip
    rows = [
        line(first, "session_meta", meta),
        line(first, "turn_context", {"cwd": "/home/dev/project", "model": s.model}),
    ]
    for t in s.turns:
        rows.append(line(t.at, "response_item", message("user", t.prompt)))
        for n, (prose, tool, output) in enumerate(t.steps):
            call = {"call_id": f"call_{t.id}-{n}"}
            arguments = json.dumps({"command": ["bash", "-lc", tool]})
            rows += [
                line(t.at, "response_item", message("assistant", prose)),
                line(t.at, "response_item", {"type": "function_call", "name": "shell", "arguments": arguments, **call}),
                line(t.at, "response_item", {"type": "function_call_output", "output": json.dumps({"output": output}), **call}),
            ]  # fmt: skip
    return f"rollout-{first.strftime('%Y-%m-%dT%H-%M-%S')}-{sid}.jsonl", _jsonl(rows)


def aider_block(s: GeneratedSession) -> str:
    """One `# aider chat started at` block of a history: `#### ` inputs, the reply, and the tool
    output as aider's `> ` lines."""
    out = [f"\n# aider chat started at {s.turns[0].at.strftime('%Y-%m-%d %H:%M:%S')}\n\n",
           f"> Main model: {s.model} with diff edit format\n\n"]  # fmt: skip
    for t in s.turns:
        out.append(f"#### {t.prompt}  \n\n")
        for prose, _, output in t.steps:
            out.append(f"{prose}\n\n" + "".join(f"> {line}  \n" for line in output.split("\n")) + "\n")
    return "".join(out)


def swe_agent_trajectory(s: GeneratedSession) -> tuple[str, str]:
    """A SWE-agent trajectory: the first prompt is the task, and every step of every turn a
    thought / action / observation step (the format has one task: later prompts open a thought)."""
    steps = []
    for t in s.turns:
        for n, (prose, tool, output) in enumerate(t.steps):
            thought = f"{t.prompt}\n{prose}" if n == 0 and t is not s.turns[0] else prose
            steps.append({"response": f"DISCUSSION\n{thought}\n\n```\n{tool}\n```", "thought": thought,
                          "action": tool, "observation": output, "execution_time": 0.4})  # fmt: skip
    history = [{"role": "system", "content": "SETTING: You are an autonomous programmer.", "agent": "primary"},
               {"role": "user", "content": s.turns[0].prompt, "agent": "primary"}]  # fmt: skip
    doc = {"environment": "swe_main", "trajectory": steps, "history": history, "info": {"exit_status": "submitted"},
           "replay_config": json.dumps({"agent": {"model": {"name": s.model}}})}  # fmt: skip
    return f"{s.plan.session_id}.traj", json.dumps(doc, indent=1) + "\n"


HARNESS_WRITERS = {"claude-code": claude_code_log, "codex-cli": codex_rollout, "swe-agent": swe_agent_trajectory}


def write_corpus(folder: Path, sessions: int = 290, seed: int = 28, harness: bool = False) -> list[SessionPlan]:
    """`sessions` sessions as one plain JSONL turn file, `corpus-<seed>.jsonl`; with `harness`, each
    in its agent's own log format instead (Claude Code, Codex CLI, aider, SWE-agent), files side by
    side in `folder` (the aider sessions in one `.aider.chat.history.md`). Their plans."""
    folder.mkdir(parents=True, exist_ok=True)
    plans = [draw_plan(seed, i) for i in range(sessions)]
    if not harness:
        with (folder / f"corpus-{seed}.jsonl").open("w", encoding="utf-8") as out:
            for i, plan in enumerate(plans):
                out.write(_jsonl(session_turns(plan, seed, i)))
        return plans
    with (folder / ".aider.chat.history.md").open("w", encoding="utf-8") as aider:
        for i, plan in enumerate(plans):
            session = generate_session(plan, seed, i)
            if session.agent == "aider":
                aider.write(aider_block(session))
                continue
            name, text = HARNESS_WRITERS[session.agent](session)
            (folder / name).write_text(text, encoding="utf-8")
    return plans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sessions", type=int, default=290)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--harness", action="store_true", help="each session in its agent's log format")
    args = parser.parse_args()
    plans = write_corpus(args.out, args.sessions, args.seed, args.harness)
    figures = size_figures(plans)
    for name, target in TARGETS.items():
        if name in figures:
            print(f"{name:<20} {figures[name]:>14,.3f}  target {target:,}")


if __name__ == "__main__":
    main()
