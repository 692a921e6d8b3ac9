"""Write the sample Neo.mjs Memory Core export bundle into samples/bundle/.

    .venv/bin/python samples/generate.py

Deterministic: everything comes from `random.Random(7)` and the text pools in samples/prose.json,
so re-running overwrites the same files byte for byte. No network; the turn documents and input
revisions are the ingest's own (`digest.turns`), so it runs in the project's environment.

The bundle holds six sessions: four small ones (raw synthesis), one large session whose turns all
carry graph mini summaries (degraded tier `miniSummary`) and one large session without any
(degraded tier `truncatedRaw`). Five malformed rows at the end of the memory file exercise the
ingest's rejects.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import uuid
from datetime import UTC, datetime
from pathlib import Path

from digest.turns import Turn, canonical_order, compose_document, input_revision

SAMPLES = Path(__file__).resolve().parent
BUNDLE = SAMPLES / "bundle"
STAMP = "2026-11-20T09-00-00.000Z"


# ================================ session content ================================

# The prose of the sessions, in samples/prose.json (keys are the names below, lower-cased):
# - the four small sessions' scripts, each turn (prompt, thought, response, mini summary or null):
#   S1 grid selection bug (#13904), S2 config system guide (a session id with a comma and a colon),
#   S3 VDOM test flake, S4 Python backup rotation (issue-12819);
# - the two large sessions, L1 worker messaging refactor (#13870, 40 turns, a mini summary on each)
#   and L2 big-data grid blank rows and jank (#13911, 35 turns, none): each beat (phase, prompt,
#   outcome sentence = the turn's mini summary, file, symbol); per phase the thoughts, details and
#   code aligned with the phase's beats in order (code may be null: the turn then gets a test log or
#   a diffstat instead); per phase the notes; the test names for the run logs (the turn from which
#   the test exists, 0-based, name);
# - the shared filler pools: thoughts and caveats for turns that change code, and for turns that
#   only read, measure or plan; follow-ups and openers;
# - the exported summaries: per session key (title, scores, text).
PROSE = json.loads((SAMPLES / "prose.json").read_text(encoding="utf-8"))
GRID_SELECTION = PROSE["grid_selection"]
CONFIG_DOCS = PROSE["config_docs"]
VDOM_FLAKE = PROSE["vdom_flake"]
BACKUP_ROTATION = PROSE["backup_rotation"]
WORKER_BEATS = PROSE["worker_beats"]
WORKER_PHASES = PROSE["worker_phases"]
WORKER_NOTES = PROSE["worker_notes"]
WORKER_TESTS = PROSE["worker_tests"]
GRID_BEATS = PROSE["grid_beats"]
GRID_PHASES = PROSE["grid_phases"]
GRID_NOTES = PROSE["grid_notes"]
GRID_TESTS = PROSE["grid_tests"]
CHANGE_THOUGHTS = PROSE["change_thoughts"]
CHANGE_CAVEATS = PROSE["change_caveats"]
READ_THOUGHTS = PROSE["read_thoughts"]
READ_CAVEATS = PROSE["read_caveats"]
FOLLOWUPS = PROSE["followups"]
OPENERS = PROSE["openers"]
SUMMARY_TEXT = PROSE["summary_text"]

AGENTS = {
    "@neo-opus-ada": {"agent": "claude-code", "model": "claude-opus-4"},
    "@neo-sonnet-linus": {"agent": "claude-code", "model": "claude-sonnet-4-5"},
    "@neo-gemini-grace": {"agent": "antigravity", "model": "gemini-3-pro"},
}

TOOLS = {
    "read": [
        "read_file",
        "read_file",
        "read_file",
        "search_file_content",
        "list_directory",
        "glob",
        "query_raw_memories",
    ],
    "write": ["read_file", "read_file", "replace", "replace", "write_file", "run_shell_command", "search_file_content"],
    "test": ["run_shell_command", "run_shell_command", "read_file", "replace", "search_file_content"],
}

# Phases whose turns change code (they get test evidence and diffstats); the others read and measure.
CHANGE_PHASES = {"registry", "migrate", "errors", "lifecycle", "tests", "docs", "fix", "colvirt", "cleanup"}
TEST_PHASES = {"tests", "registry", "migrate", "errors", "lifecycle", "fix", "colvirt"}

LARGE_MIN, LARGE_MAX = 1500, 2500
SMALL_MIN, SMALL_MAX = 400, 1500


# --- helpers ---------------------------------------------------------------------------------------


def nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


def fill(text: str, values: dict) -> str:
    for key, value in values.items():
        text = text.replace(f"<<{key}>>", value)
    return text


def iso(ms: int) -> str:
    stamp = datetime.fromtimestamp(ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{ms % 1000:03d}Z"


def epoch_ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def seeded_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def embedding(rng: random.Random) -> list[float]:
    return [round(rng.uniform(-1.0, 1.0), 6) for _ in range(8)]


class Deck:
    """Draws without replacement, reshuffling when empty, so fillers rarely repeat back to back."""

    def __init__(self, rng: random.Random, items: list[str]):
        self.rng, self.items, self.pool = rng, list(items), []

    def draw(self) -> str:
        if not self.pool:
            self.pool = self.items[:]
            self.rng.shuffle(self.pool)
        return self.pool.pop()


def tool_calls(rng: random.Random, kind: str, low: int, high: int) -> tuple[int, str]:
    names = [rng.choice(TOOLS[kind]) for _ in range(rng.randint(low, high))]
    return len(names), json.dumps([{"name": n} for n in names], separators=(",", ":"))


def evidence(rng: random.Random, ctx: dict, turn_index: int) -> str:
    """A test run, naming only tests that exist by this turn of the session."""
    available = [name for first, name in ctx["tests"] if first <= turn_index]
    total = ctx["base_tests"] + 3 * (len(available) - 4)
    if rng.random() < 0.5:
        return f"Checked with `npx playwright test {ctx['test_dir']}`: {total} passed, 0 failed ({rng.randint(4, 40)}.{rng.randint(0, 9)}s)."
    lines = [f"$ npx playwright test {ctx['test_dir']} --project chromium", f"Running {total} tests using 4 workers"]
    lines += [f"  ok  {name} ({rng.randint(4, 900)}ms)" for name in rng.sample(available, 3)]
    lines += ["  ...", f"  {total} passed ({rng.randint(4, 40)}.{rng.randint(0, 9)}s)"]
    return "```\n" + "\n".join(lines) + "\n```"


def diffstat(rng: random.Random, ctx: dict, file: str) -> str:
    """`git diff --stat` for the turn's file, sometimes with one related file of the session."""
    files = [file] if "." in file.rsplit("/", 1)[-1] and not file.endswith(".md") else []
    extra = rng.choice(ctx["files"])
    if extra not in files and (not files or rng.random() < 0.4):
        files.append(extra)
    width = max(len(f) for f in files)
    rows, ins, dels = [], 0, 0
    for f in files:
        plus, minus = rng.randint(2, 28), rng.randint(0, 16)
        ins, dels = ins + plus, dels + minus
        rows.append(f" {f.ljust(width)} | {plus + minus:>3} {'+' * plus}{'-' * minus}")
    rows.append(f" {len(files)} file{'s' if len(files) > 1 else ''} changed, {ins} insertions(+), {dels} deletions(-)")
    return "```\n$ git diff --stat\n" + "\n".join(rows) + "\n```"


def reading_note(rng: random.Random, ctx: dict, file: str) -> str:
    others = [f for f in rng.sample(ctx["files"], 3) if f != file][:2]
    return "Files read for this step: " + ", ".join(f"`{f}`" for f in [file, *others]) + "."


def recap(history: list[str], rng: random.Random) -> str | None:
    """A short 'where we stand' list from the outcomes of the previous turns."""
    if len(history) < 2:
        return None
    recent = history[-rng.randint(2, 3) :]
    return "Where we stand:\n" + "\n".join(f"- {o}" for o in recent)


# --- turn composition ------------------------------------------------------------------------------


def large_turn(
    rng: random.Random, ctx: dict, beat: tuple, index_in_phase: int, turn_index: int, history: list[str], decks: dict
) -> dict:
    phase, prompt, outcome, file, sym = beat
    pool = ctx["phases"][phase]
    values = {"file": file, "sym": sym}
    changes = phase in CHANGE_PHASES and not prompt.endswith("?")  # a question gets an answer, not a diff
    kind = "change" if changes else "read"
    thoughts = [fill(pool["thoughts"][index_in_phase], values)]
    head = rng.choice(OPENERS) + outcome
    body = [fill(pool["details"][index_in_phase], values)]
    code = pool["code"][index_in_phase]
    if code:
        body.append(fill(code, values))

    candidates = [
        ("thought", decks[kind + "_thought"].draw()),
        ("caveat", decks[kind + "_caveat"].draw()),
        ("followup", decks["followup"].draw()),
        ("thought", decks[kind + "_thought"].draw()),
        ("note", decks["notes"][phase].draw()),
    ]
    if phase in TEST_PHASES:
        candidates.append(("evidence", evidence(rng, ctx, turn_index)))
    if changes:
        candidates.append(("diffstat", diffstat(rng, ctx, file)))
    else:
        candidates.append(("reading", reading_note(rng, ctx, file)))
    summary = recap(history, rng)
    if summary:
        candidates.append(("recap", summary))
    rng.shuffle(candidates)

    chosen: list[tuple[str, str]] = []

    def render(extra: list[tuple[str, str]]) -> tuple[str, str]:
        picked = chosen + extra
        thought = " ".join(thoughts + [t for k, t in picked if k == "thought"])
        order = ["note", "reading", "evidence", "diffstat", "recap", "caveat", "followup"]
        tail = [t for key in order for k, t in picked if k == key]
        return thought, "\n\n".join([head, *body, *tail])

    def size(extra):
        return nbytes(compose_document(prompt, *render(extra)))

    target = rng.randint(1550, 1950)
    for cand in candidates:
        if size([]) >= target:
            break
        if size([cand]) <= LARGE_MAX - 40:
            chosen.append(cand)
    note = next(t for k, t in candidates if k == "note")
    extra_note = decks["notes"][phase].draw()
    while extra_note == note:
        extra_note = decks["notes"][phase].draw()
    candidates += [("note", extra_note), ("thought", decks[kind + "_thought"].draw())]
    for cand in candidates:  # still short of the floor: take anything that fits
        if size([]) >= LARGE_MIN + 60:
            break
        if cand not in chosen and size([cand]) <= LARGE_MAX - 40:
            chosen.append(cand)
    assert size([]) >= LARGE_MIN, f"turn too short even with every filler: {prompt}"
    thought, response = render([])
    return {"prompt": prompt, "thought": thought, "response": response, "mini": outcome, "phase": phase}


def large_session(rng: random.Random, ctx: dict) -> list[dict]:
    decks = {
        "change_thought": Deck(rng, CHANGE_THOUGHTS),
        "change_caveat": Deck(rng, CHANGE_CAVEATS),
        "read_thought": Deck(rng, READ_THOUGHTS),
        "read_caveat": Deck(rng, READ_CAVEATS),
        "followup": Deck(rng, FOLLOWUPS),
        "notes": {phase: Deck(rng, notes) for phase, notes in ctx["notes"].items()},
    }
    seen: dict[str, int] = {}
    turns, history = [], []
    for turn_index, beat in enumerate(ctx["beats"]):
        k = seen.get(beat[0], 0)
        seen[beat[0]] = k + 1
        turns.append(large_turn(rng, ctx, beat, k, turn_index, history, decks))
        history.append(beat[2])
    return turns


def small_session(script: list[tuple]) -> list[dict]:
    return [{"prompt": p, "thought": t, "response": r, "mini": m, "phase": "small"} for p, t, r, m in script]


# --- sessions --------------------------------------------------------------------------------------


def build_sessions(rng: random.Random) -> list[dict]:
    """The six sessions in file order, with ids, agents, start times and composed turns."""
    sessions = [
        {
            "key": "worker-messaging",
            "size": "large",
            "minis": "all",
            "identity": "@neo-opus-ada",
            "start": "2026-11-17T08:12:05.000Z",
            "tools": "write",
            "ctx": {
                "beats": WORKER_BEATS,
                "phases": WORKER_PHASES,
                "notes": WORKER_NOTES,
                "tests": WORKER_TESTS,
                "test_dir": "test/playwright/unit/worker",
                "base_tests": 58,
                "files": [
                    "src/worker/Base.mjs",
                    "src/worker/Manager.mjs",
                    "src/worker/Message.mjs",
                    "src/worker/PendingRequests.mjs",
                    "src/worker/mixin/RemoteMethodAccess.mjs",
                    "src/worker/App.mjs",
                    "src/worker/Data.mjs",
                    "src/worker/ErrorSerializer.mjs",
                ],
            },
        },
        {
            "key": "grid-selection",
            "size": "small",
            "minis": "two",
            "identity": "@neo-opus-ada",
            "start": "2026-11-18T09:30:41.000Z",
            "tools": "write",
            "script": GRID_SELECTION,
        },
        {
            "key": "grid-big-data",
            "size": "large",
            "minis": "none",
            "identity": "@neo-gemini-grace",
            "start": "2026-11-18T13:05:12.000Z",
            "tools": "write",
            "ctx": {
                "beats": GRID_BEATS,
                "phases": GRID_PHASES,
                "notes": GRID_NOTES,
                "tests": GRID_TESTS,
                "test_dir": "test/playwright/component/grid",
                "base_tests": 182,
                "files": [
                    "src/grid/Body.mjs",
                    "src/grid/ScrollManager.mjs",
                    "src/grid/header/Toolbar.mjs",
                    "src/selection/grid/RowModel.mjs",
                    "src/util/VdomHelper.mjs",
                    "src/data/Store.mjs",
                    "examples/grid/bigData/MainContainer.mjs",
                    "examples/grid/bigData/ControlsContainer.mjs",
                ],
            },
        },
        {
            "key": "vdom-test-flake",
            "size": "small",
            "minis": "none",
            "identity": "@neo-sonnet-linus",
            "start": "2026-11-19T07:45:03.000Z",
            "tools": "test",
            "script": VDOM_FLAKE,
        },
        {
            "key": "config-guide",
            "size": "small",
            "minis": "none",
            "identity": "@neo-gemini-grace",
            "start": "2026-11-19T10:20:27.000Z",
            "tools": "write",
            "script": CONFIG_DOCS,
            "session_id": "chat:2026-11-19,ws-7",
        },
        {
            "key": "backup-rotation",
            "size": "small",
            "minis": "none",
            "identity": "@neo-gemini-grace",
            "start": "2026-11-19T16:02:58.000Z",
            "tools": "write",
            "script": BACKUP_ROTATION,
        },
    ]
    for s in sessions:
        s["session_id"] = s.get("session_id") or seeded_uuid(rng)
    for s in sessions:
        turns = large_session(rng, s["ctx"]) if s["size"] == "large" else small_session(s["script"])
        ts = epoch_ms(s["start"])
        for turn in turns:
            turn["id"] = seeded_uuid(rng)
            turn["ts"] = ts
            ts += rng.randint(60_000, 300_000)
            turn["document"] = compose_document(turn["prompt"], turn["thought"], turn["response"])
            low, high = (1, 6) if s["size"] == "large" else (1, 4)
            kind = (
                "read"
                if turn["phase"] in ("explore", "design", "perf", "repro", "profile", "rootcause")
                else s["tools"]
            )
            turn["amount"], turn["tools_used"] = tool_calls(rng, kind, low, high)
            turn["embedding"] = embedding(rng)
            if s["minis"] != "all" and not (s["minis"] == "two" and turn["mini"]):
                turn["mini"] = None
        s["turns"] = turns
    # About one turn in eight carries no `document`: the ingest rebuilds it from the three fields.
    every = [t for s in sessions for t in s["turns"]]
    omitted = {t["id"] for t in rng.sample(every, round(len(every) / 8))}
    for t in every:
        t["omit_document"] = t["id"] in omitted
    return sessions


# --- files -----------------------------------------------------------------------------------------


def memory_row(s: dict, turn: dict) -> dict:
    identity = s["identity"]
    row = {
        "id": turn["id"],
        "embedding": turn["embedding"],
        "metadata": {
            "prompt": turn["prompt"],
            "thought": turn["thought"],
            "response": turn["response"],
            "sessionId": s["session_id"],
            "timestamp": turn["ts"],
            "type": "agent-interaction",
            "agentIdentity": identity,
            "agent": AGENTS[identity]["agent"],
            "model": AGENTS[identity]["model"],
            "userId": "tobiu",
            "amountToolCalls": turn["amount"],
            "toolsUsed": turn["tools_used"],
        },
        "document": turn["document"],
    }
    if turn["omit_document"]:
        del row["document"]
    return row


def bad_lines(rng: random.Random, sessions: list[dict]) -> list[str]:
    """Five malformed rows the ingest must reject, each for a different reason."""
    flake, rotation = sessions[3], sessions[5]
    base_ts = flake["turns"][-1]["ts"] + 600_000

    def meta(session_id, prompt, thought, response, ts):
        m = {"prompt": prompt, "thought": thought, "response": response}
        if session_id is not None:
            m["sessionId"] = session_id
        m.update(
            {
                "timestamp": ts,
                "type": "agent-interaction",
                "agentIdentity": "@neo-sonnet-linus",
                "agent": "claude-code",
                "model": "claude-sonnet-4-5",
                "userId": "tobiu",
                "amountToolCalls": 1,
                "toolsUsed": json.dumps([{"name": "run_shell_command"}], separators=(",", ":")),
            }
        )
        return m

    p1, t1, r1 = (
        "Re-run the VDOM specs once more on CI.",
        "CI is the environment that flaked, so that's the real check.",
        "Triggered the unit workflow on the branch; all 3 spec files green on the first run.",
    )
    p2, t2, r2 = (
        "Can you also check the Safari run?",
        "WebKit is only run nightly; I'll start it manually.",
        "Started the nightly WebKit job by hand; VdomHelper.spec.mjs passed 50 of 50 repeats.",
    )
    p3, t3, r3 = (
        "",
        "The previous answer covered everything; nothing new to do.",
        "Nothing to change; waiting for input.",
    )
    p4, t4, r4 = (
        "Add the dry-run flag to the README of buildScripts/ai.",
        "One line in the usage section is enough.",
        "Documented `--apply` in buildScripts/ai/README.md under Usage.",
    )
    rows = [
        {
            "embedding": embedding(rng),
            "metadata": meta(flake["session_id"], p1, t1, r1, base_ts),
            "document": compose_document(p1, t1, r1),
        },
        {
            "id": seeded_uuid(rng),
            "embedding": embedding(rng),
            "metadata": meta(None, p2, t2, r2, base_ts + 120_000),
            "document": compose_document(p2, t2, r2),
        },
        {
            "id": seeded_uuid(rng),
            "embedding": embedding(rng),
            "metadata": meta(flake["session_id"], p3, t3, r3, base_ts + 240_000),
        },
        {
            "id": seeded_uuid(rng),
            "embedding": embedding(rng),
            "metadata": meta(rotation["session_id"], p4, t4, r4, [1, 2]),
            "document": compose_document(p4, t4, r4),
        },
    ]
    return ['{"id": "broken'] + [json.dumps(r, ensure_ascii=False) for r in rows]


def session_revision(s: dict, turns: list[dict]) -> str:
    """The original's `computeSessionTurnInputRevision` of these turns, as the ingest computes it."""
    ids = {"agent_identity": s["identity"], "user_id": "tobiu"}
    return input_revision(
        canonical_order([Turn(t["id"], s["session_id"], t["document"], t["ts"], **ids) for t in turns])
    )


def summary_rows(rng: random.Random, sessions: list[dict]) -> list[dict]:
    rows = []
    for s in sessions:
        if s["key"] not in SUMMARY_TEXT:
            continue
        title, scores, text = SUMMARY_TEXT[s["key"]]
        drift = s["key"] == "vdom-test-flake"  # summarized before its last turn arrived
        count = len(s["turns"]) - 1 if drift else len(s["turns"])
        ts = s["turns"][count - 1]["ts"] + rng.randint(20_000, 50_000)
        rows.append(
            {
                "id": f"summary_{s['session_id']}",
                "embedding": embedding(rng),
                "metadata": {
                    "sessionId": s["session_id"],
                    "memoryCount": count,
                    "dreamInputRevision": session_revision(s, s["turns"][:count]),
                    "title": title,
                    **scores,
                    "sourceTier": "raw",
                    "degraded": False,
                    "rawCanonical": True,
                    "timestamp": ts,
                },
                "document": text,
            }
        )
    return rows


def graph_lines(sessions: list[dict]) -> list[str]:
    nodes, edges, identities = [], [], []
    for s in sessions:
        for turn in s["turns"]:
            props = {
                "name": f"Memory: {iso(turn['ts'])}",
                "sessionId": s["session_id"],
                "timestamp": iso(turn["ts"]),
                "agentIdentity": s["identity"],
            }
            if turn["mini"]:
                props["miniSummary"] = turn["mini"]
            nodes.append({"type": "node", "data": {"id": turn["id"], "label": "AGENT_MEMORY", "properties": props}})
            edges.append(
                {
                    "type": "edge",
                    "data": {
                        "id": f"{turn['id']}->{s['identity']}:AUTHORED_BY",
                        "source": turn["id"],
                        "target": s["identity"],
                        "type": "AUTHORED_BY",
                        "properties": {"weight": 1.0},
                    },
                }
            )
        if s["identity"] not in identities:
            identities.append(s["identity"])
    for identity in identities:
        nodes.append(
            {"type": "node", "data": {"id": identity, "label": "AGENT_IDENTITY", "properties": {"name": identity}}}
        )
    return [json.dumps(x, ensure_ascii=False) for x in nodes + edges]


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8", newline="\n")


# --- checks and report -----------------------------------------------------------------------------


def check(sessions: list[dict]) -> None:
    for s in sessions:
        sizes = [nbytes(t["document"]) for t in s["turns"]]
        low, high = (LARGE_MIN, LARGE_MAX) if s["size"] == "large" else (SMALL_MIN, SMALL_MAX)
        bad = [(i, n) for i, n in enumerate(sizes, 1) if not low <= n <= high]
        assert not bad, f"{s['key']}: turns outside {low}-{high} bytes: {bad}"
        for t in s["turns"]:
            assert t["prompt"].strip() and t["thought"].strip() and t["response"].strip()
            assert "<<" not in t["document"], f"{s['key']}: unfilled placeholder in {t['document'][:80]}"
            if t["mini"]:
                assert len(t["mini"]) <= 280 and "\n" not in t["mini"]
        stamps = [t["ts"] for t in s["turns"]]
        assert all(60_000 <= b - a <= 300_000 for a, b in zip(stamps, stamps[1:]))
    counts = {s["key"]: len(s["turns"]) for s in sessions}
    assert counts["worker-messaging"] == 40 and counts["grid-big-data"] == 35
    assert sum(bool(t["mini"]) for t in sessions[0]["turns"]) == 40
    assert sum(bool(t["mini"]) for s in sessions[1:] for t in s["turns"]) == 2
    assert sum(nbytes(t["document"]) for t in sessions[0]["turns"]) > 60_000
    assert sum(nbytes(t["document"]) for t in sessions[2]["turns"]) > 55_000
    for s in sessions:
        if s["size"] == "small":
            assert 3 <= len(s["turns"]) <= 8 and sum(nbytes(t["document"]) for t in s["turns"]) < 20_000


def report(sessions: list[dict], paths: list[Path]) -> None:
    """Per session: turns, document bytes (total and per turn), the raw content's token estimate at
    3 bytes a token (without the instruction header), turns without `document`, mini summaries."""
    print(
        f"{'session id':38} {'kind':42} {'turns':>5} {'doc bytes':>9} {'per turn':>11} {'~tokens':>8} {'no doc':>6} {'minis':>5}"
    )
    for s in sessions:
        sizes = [nbytes(t["document"]) for t in s["turns"]]
        raw = nbytes("\n\n---\n\n".join(t["document"] for t in s["turns"]))
        kind = (
            {"all": "large, mini summaries", "none": "large, no mini summaries"}[s["minis"]]
            if s["size"] == "large"
            else "small"
        )
        print(
            f"{s['session_id']:38} {s['key'] + ' (' + kind + ')':42} {len(sizes):>5} {sum(sizes):>9} "
            f"{min(sizes):>5}-{max(sizes):<5} {math.ceil(raw / 3):>8} {sum(t['omit_document'] for t in s['turns']):>6} "
            f"{sum(bool(t['mini']) for t in s['turns']):>5}"
        )
    for path in paths:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        print(f"{path.relative_to(SAMPLES.parent)}  {path.stat().st_size:>7} bytes  sha256 {digest[:16]}")


def main() -> None:
    rng = random.Random(7)
    sessions = build_sessions(rng)
    check(sessions)
    BUNDLE.mkdir(parents=True, exist_ok=True)
    memory = BUNDLE / f"memory-backup-{STAMP}.jsonl"
    graph = BUNDLE / f"graph-backup-{STAMP}.jsonl"
    summaries = BUNDLE / f"summaries-backup-{STAMP}.jsonl"
    rows = [json.dumps(memory_row(s, t), ensure_ascii=False) for s in sessions for t in s["turns"]]
    write_lines(memory, rows + bad_lines(rng, sessions))
    write_lines(graph, graph_lines(sessions))
    write_lines(summaries, [json.dumps(r, ensure_ascii=False) for r in summary_rows(rng, sessions)])
    report(sessions, [memory, graph, summaries])


if __name__ == "__main__":
    main()
