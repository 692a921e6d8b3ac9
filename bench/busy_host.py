"""A busy CPU host (issue 23.6): the old fixed deadlines against the new pacing, on the real
embedded model while a load generator keeps the cores busy, in one run.

Run: .venv/bin/python bench/busy_host.py [--load 4] [--sessions 12] [--corpora demo,synthetic]
     .venv/bin/python bench/busy_host.py --smoke      # a tiny size, for the test suite

- Old: the code at `--old-ref` (957c233, before the pacing work), checked out as a detached git
  worktree (`--old-tree`, made if missing); new: this checkout. Each arm runs as a subprocess with
  its own tree as cwd and PYTHONPATH, so each imports its own code from the same virtualenv. The
  old code imports PyICU (`.venv/bin/pip install pyicu`, which compiles); without it that arm fails
  at its import and the new arm runs alone.
- Each arm drives the CLI's own path: `app.runs.ingest`, then `app.runs.sweep` until a
  sweep has nothing to run, exactly what `session-digest demo` does (less its friction report),
  in one process, so every session is a real Dagster run with its mini-summary and summary steps.
  DIGEST_HOME is a fresh temp folder per arm and corpus.
- Model: a fresh embedded SmolLM2 server (`resources.embedded_server.EmbeddedServer`, this
  checkout's, the same settings for both arms) per arm and corpus, passed as DIGEST_MODEL_URL.
- Corpora: the bundled samples (samples/bundle, as `demo` ingests them) and a seeded synthetic one
  (tests/synthetic_export.py, one export per session) with log-normal turn counts, a few sessions
  far over the raw cap.
- Load: `--load` busy-loop processes, started before the loaded arms and stopped after; the old
  and the new arm run one after the other under it, per corpus. The new arm also runs once without
  the load. The model's own slowdown under the load is the time of the same fixed short
  completions (`--probe-calls`) with and without it.
- Stuck servers: a local server that accepts and never answers, and one that sends a few streamed
  pieces (or, to a call that is not streamed, the first bytes of its body) and then nothing; each
  arm's own client is held to that arm's bounds for a mini-summary call and a summary call (the new
  arm's from the host speed its loaded run measured), and the time it takes to give up is timed.
Figures from each arm's DuckDB file (attempts, session_summaries, friction_events).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from _old_code import worktree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ (the export generator) is not installed

import duckdb  # noqa: E402
import httpx  # noqa: E402

from resources.embedded_server import MODEL_ALIAS, EmbeddedServer  # noqa: E402
from tests.local_http import LocalServer, QuietHandler  # noqa: E402
from tests.synthetic_export import write_export  # noqa: E402

OLD_REF = "957c233"
# A client still waiting on a stuck server after this long has not detected it (the old summary
# deadline is 180 s; the new ceiling, 900 s, is not waited out).
DETECT_LIMIT_S = 300.0
SAMPLES = ROOT / "samples" / "bundle"
RESULT_MARK = "BUSY_HOST_RESULT "
# A heavy tail: turns per session log-normal around this median, a few far over the raw cap.
PROBE_PROMPT = (
    "Summarize in one sentence what the agent did.\nUser: fix the flaky grid sort test in "
    "src/grid/Body.mjs, then run the suite and check the diff.\nAgent: "
    + "I changed the comparator so ties keep their order, ran the suite and it passed. "
    * 12
)

# --- one arm's work, run in the arm's own tree ---------------------------------------------------

ARM_DRIVER = r"""
import json, sys, time
from digest.settings import load_settings
try:
    from app import cli
    from app import runs as cli_runs
    from app.console import Output
except ImportError:  # a tree from before the front doors had their floor: its CLI module ran the runs
    from pipelines import cli
    from pipelines import cli as cli_runs
    from pipelines.console import Output

paths, max_sweeps = json.loads(sys.argv[1]), int(sys.argv[2])
settings = load_settings()
cli._prepare_home(settings)
output = Output(as_json=True)
started = time.monotonic()
ingested = cli_runs.ingest(settings, paths)
runs, sweeps = [], 0
while sweeps < max_sweeps:
    batch = cli_runs.sweep(settings, None, output)["runs"]
    if not batch:
        break
    runs.extend(batch)
    sweeps += 1
wall = time.monotonic() - started
result = {"wall_s": wall, "sweeps": sweeps, "runs": len(runs), "failed_runs": sum(not r["success"] for r in runs),
          "db_path": str(settings.db_path), "sessions_ingested": ingested.get("new_partitions")}
print("BUSY_HOST_RESULT " + json.dumps(result, default=str), flush=True)
"""

DETECT_DRIVER = r"""
import json, sys, time
from digest.settings import load_settings
from resources.embedded_server import MODEL_ALIAS
from resources.model_clients import OpenAIChatClient

url, stage = sys.argv[1], sys.argv[2]
settings = load_settings()
client = OpenAIChatClient(url, MODEL_ALIAS, schema_style="json_object")
if stage == "mini":
    prompt = "Summarize in one sentence what the agent did.\nUser: " + "fix the grid sort test. " * 40 + "\nAgent: " + "ran the suite. " * 40
    schema, output_tokens, first_timeout = None, 128, settings.mini_summaries.timeout_s
else:
    from digest.summary_output import response_json_schema
    prompt = "Summarize this session as JSON.\n" + "turn: fixed the grid sort, ran the suite, checked the diff. " * 300
    schema, output_tokens, first_timeout = response_json_schema(), settings.summary_max_output_tokens, settings.summary_timeout_s
kwargs = {"timeout_s": first_timeout}
bound, measured, streaming = first_timeout, False, bool(getattr(client, "streaming", False))
try:
    from digest.pacing import Pacer, PacingPolicy
except ImportError:  # the old code: one fixed deadline per stage
    Pacer = None
if Pacer is not None:
    from resources.store import DigestStore
    host = settings.fleet.hosts[0]
    store = DigestStore(settings.db_path)
    store.migrate()
    policy = PacingPolicy(ceiling_s=settings.call_ceiling_s, raw_call_target_s=settings.raw_call_target_s)
    pacer = Pacer.for_host(policy, first_timeout, store.speed.host_samples(host.name, host.model))
    plan = pacer.plan(settings.limits().estimate_tokens(prompt), output_tokens, streaming)
    kwargs = {"timeout_s": plan.timeout_s}
    if plan.stall_s is not None:
        kwargs["stall_s"] = plan.stall_s
    bound, measured = plan.give_up_s, plan.measured
started = time.monotonic()
try:
    client.chat(prompt, schema=schema, max_output_tokens=output_tokens, **kwargs)
    error = None
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"[:200]
detected = time.monotonic() - started
print("BUSY_HOST_RESULT " + json.dumps({"detected_s": detected, "bound_s": bound, "measured": measured,
      "streaming": streaming, "error": error}), flush=True)
"""


def arm_env(tree: Path, home: Path, model_url: str | None, extra: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIGEST_", "DAGSTER_"))}
    env.update(
        {
            "PYTHONPATH": str(tree),
            "DIGEST_HOME": str(home),
            "DIGEST_MODEL_PROVIDER": "embedded",
            "DAGSTER_HOME": str(home / "dagster"),
        }
    )
    if model_url:
        env["DIGEST_MODEL_URL"] = model_url
    env.update(extra or {})
    return env


def run_driver(code: str, args: list[str], tree: Path, env: dict, timeout_s: float) -> dict:
    """`code` in a fresh interpreter with `tree` as cwd and first on sys.path; its result line."""
    process = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        stdout, stderr = process.communicate()
        return {"error": f"killed after {timeout_s:g}s", "stderr": stderr[-2000:]}
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK) :])
    return {"error": f"exit {process.returncode}", "stderr": stderr[-3000:]}


# --- the corpora ---------------------------------------------------------------------------------


def synthetic_corpus(root: Path, sessions: int, seed: int = 23, turn_bytes: int = 1400) -> list[Path]:
    """`sessions` seeded exports of one session each: turn counts log-normal (median 4), and one
    session in six (at least one) set over the demo's raw bound (its safe band, 6144 estimated
    tokens: 14 turns of 1400 bytes), so it takes the degraded path's mini summaries."""
    rng = random.Random(seed)
    turns = sorted(max(2, min(10, round(rng.lognormvariate(math.log(4), 0.6)))) for _ in range(sessions))
    for i in range(1, max(1, sessions // 6) + 1):
        turns[-i] = 12 + 2 * i
    folders = []
    for i, count in enumerate(turns):
        folder = root / f"export-{i:02d}"
        write_export(
            folder, 1, count, summarized_share=0.0, mini_summary_share=0.1, turn_bytes=turn_bytes, seed=seed + i
        )
        folders.append(folder)
    return folders


# --- the load and the model's own slowdown -------------------------------------------------------


class Load:
    """`n` busy-loop processes, started by `start` and stopped (by their pids) by `stop`."""

    def __init__(self, n: int):
        self.n = n
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        code = "while True:\n    pass"
        self.processes = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(self.n)]
        time.sleep(1.0)

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()
        self.processes = []


def probe(url: str, calls: int) -> list[float]:
    """Seconds of each of `calls` identical short completions (after one warm-up)."""
    body = {
        "model": MODEL_ALIAS,
        "messages": [{"role": "user", "content": PROBE_PROMPT}],
        "max_tokens": 48,
        "temperature": 0.0,
        "seed": 7,
    }
    seconds = []
    for i in range(calls + 1):
        started = time.monotonic()
        httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600).raise_for_status()
        if i:
            seconds.append(time.monotonic() - started)
    return seconds


# --- a stuck server ------------------------------------------------------------------------------


class StuckServer(LocalServer):
    """OpenAI-protocol chat that never finishes. `hang`: reads the request, sends nothing.
    `stall`: a streamed call gets its SSE headers and three pieces, then nothing; a call that is
    not streamed gets its headers and the first bytes of its body, then nothing."""

    def __init__(self, mode: str):
        self.mode = mode
        self._stop = threading.Event()
        outer = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                try:
                    outer._serve(self, bool(body.get("stream")))
                except OSError:
                    pass  # the client gave up and closed

        super().__init__(Handler)

    def _serve(self, handler: BaseHTTPRequestHandler, stream: bool) -> None:
        if self.mode == "stall":
            handler.send_response(200)
            if stream:
                handler.send_header("Content-Type", "text/event-stream")
                handler.send_header("Transfer-Encoding", "chunked")
                handler.end_headers()
                for piece in ('{"sum', "mary", '": "'):
                    chunk = {
                        "id": "chatcmpl-stall",
                        "object": "chat.completion.chunk",
                        "model": MODEL_ALIAS,
                        "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
                    }
                    data = f"data: {json.dumps(chunk)}\n\n".encode()
                    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    handler.wfile.flush()
                    self._stop.wait(0.2)
            else:
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", "4096")
                handler.end_headers()
                handler.wfile.write(b'{"id": "chatcmpl-stall", "choices": [{"index": 0, "message": {"role": "assi')
                handler.wfile.flush()
        self._stop.wait(3600)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        super().__exit__(*exc)


def detect(
    trees: dict[str, Path], homes: dict[str, Path], stages: list[str], extra: dict[str, str], results: dict
) -> None:
    """Every (arm, server, stage) at once, into `results`: each only waits on its stuck server."""
    with StuckServer("hang") as hang, StuckServer("stall") as stall:
        jobs = []
        for arm, tree in trees.items():
            for server in (hang, stall):
                for stage in stages:
                    env = arm_env(tree, homes[arm], server.url, extra)
                    key = (arm, server.mode, stage)

                    def job(key=key, env=env, url=server.url, stage=stage, tree=tree):
                        results[key] = run_driver(DETECT_DRIVER, [url, stage], tree, env, DETECT_LIMIT_S)

                    jobs.append(threading.Thread(target=job))
        for thread in jobs:
            thread.start()
        for thread in jobs:
            thread.join()


# --- the figures of one arm ----------------------------------------------------------------------


def figures(db_path: str) -> dict:
    con = duckdb.connect(db_path, read_only=True)
    try:
        columns = {
            r[0]
            for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'attempts'"
            ).fetchall()
        }
        first_token = "first_token_s" if "first_token_s" in columns else "NULL"
        calls, model_s, given_up, discarded_s, progressing, after_first = con.execute(
            f"""SELECT count(*), coalesce(sum(duration_s), 0),
                   count(*) FILTER (WHERE outcome LIKE 'timeout%'),
                   coalesce(sum(duration_s) FILTER (WHERE outcome LIKE 'timeout%'), 0),
                   count(*) FILTER (WHERE outcome LIKE 'timeout%' AND (error_text ILIKE '%progress%'
                                    OR error_text ILIKE '%ceiling%')),
                   count(*) FILTER (WHERE outcome LIKE 'timeout%' AND {first_token} IS NOT NULL)
                FROM attempts WHERE NOT cached"""
        ).fetchone()
        by_stage = dict(
            con.execute(
                "SELECT stage, count(*) FILTER (WHERE outcome LIKE 'timeout%') FROM attempts WHERE NOT cached GROUP BY stage"
            ).fetchall()
        )
        tiers = dict(con.execute("SELECT source_tier, count(*) FROM session_summaries GROUP BY 1").fetchall())
        mini, memory, worst, degraded = con.execute(
            """SELECT coalesce(sum(mini_summary_count), 0), coalesce(sum(memory_count), 0),
                      min(mini_summary_count / memory_count), count(*)
               FROM session_summaries WHERE degraded"""
        ).fetchone()
        sessions = con.execute("SELECT count(*) FROM sessions").fetchone()[0]
        opened = con.execute("SELECT count(*) FROM friction_events WHERE note LIKE 'circuit opened%'").fetchone()[0]
    finally:
        con.close()
    return {
        "calls": calls,
        "model_s": model_s,
        "given_up": given_up,
        "given_up_by_stage": by_stage,
        "discarded_s": discarded_s,
        "discarded_share": discarded_s / model_s if model_s else 0.0,
        "progressing_cut": progressing,
        "given_up_after_first_piece": after_first,
        "summaries": sum(tiers.values()),
        "tiers": tiers,
        "sessions": sessions,
        "degraded": degraded,
        "coverage": mini / memory if memory else None,
        "worst_coverage": worst,
        "circuit_opened": opened,
    }


def run_arm(name: str, tree: Path, corpus: list[Path], root: Path, extra: dict, timeout_s: float) -> dict:
    home = root / name
    with EmbeddedServer() as server:
        env = arm_env(tree, home, server.url, extra)
        load_before = os.getloadavg()[0]
        result = run_driver(ARM_DRIVER, [json.dumps([str(p) for p in corpus]), "40"], tree, env, timeout_s)
    result["load_avg"] = (load_before, os.getloadavg()[0])
    db = home / "digest.duckdb" if "db_path" not in result else Path(result["db_path"])
    if db.exists():
        result.update(figures(str(db)))
    result["home"] = str(home)
    print(f"  {name}: {json.dumps({k: v for k, v in result.items() if k != 'stderr'}, default=str)}", flush=True)
    if "stderr" in result:
        print(f"  {name} stderr: {result['stderr'][-1500:]}", flush=True)
    return result


# --- the report ----------------------------------------------------------------------------------


def fmt(value, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec)


def table(rows: list[tuple[str, dict]]) -> None:
    head = (
        f"{'arm':<22} {'wall s':>7} {'calls':>5} {'model s':>8} {'given up':>8} {'discard s':>9} "
        f"{'discard':>7} {'prog cut':>8} {'circuit':>7} {'summ':>4} {'degr':>4} {'coverage':>8} {'worst':>5}  tiers"
    )
    print(head)
    for name, r in rows:
        if "calls" not in r:
            print(f"{name:<22} {r.get('error', 'no figures')}")
            continue
        tiers = ", ".join(f"{k} {v}" for k, v in sorted(r["tiers"].items())) or "-"
        print(
            f"{name:<22} {fmt(r.get('wall_s'), '7.1f')} {r['calls']:>5} {r['model_s']:>8.1f} {r['given_up']:>8} "
            f"{r['discarded_s']:>9.1f} {r['discarded_share']:>7.1%} {r['progressing_cut']:>8} {r['circuit_opened']:>7} "
            f"{r['summaries']:>2}/{r['sessions']:<1} {r['degraded']:>4} {fmt(r['coverage'], '8.2f')} "
            f"{fmt(r['worst_coverage'], '5.2f')}  {tiers}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--load", type=int, default=4, help="busy-loop processes during the loaded arms")
    parser.add_argument("--sessions", type=int, default=12, help="sessions of the synthetic corpus")
    parser.add_argument("--corpora", default="demo,synthetic")
    parser.add_argument("--probe-calls", type=int, default=5)
    parser.add_argument("--old-ref", default=OLD_REF)
    parser.add_argument("--old-tree", type=Path, default=ROOT / "bench" / "out" / f"old-{OLD_REF}")
    parser.add_argument("--arm-timeout", type=float, default=1500.0, help="seconds before an arm is killed")
    parser.add_argument("--no-quiet", action="store_true", help="skip the new arm's run without load")
    parser.add_argument("--smoke", action="store_true", help="a tiny size for the test suite")
    args = parser.parse_args()
    extra: dict[str, str] = {}
    stages = ["mini", "summary"]
    if args.smoke:
        # One tiny synthetic session, over a small raw cap; short configured timeouts so the
        # stuck-server waits are seconds; the mini-summary stage only; no load generator (the test
        # suite beside it is load enough, and a busy loop would take a core from it).
        args.sessions, args.corpora, args.load, args.probe_calls, args.no_quiet = 1, "synthetic", 0, 1, True
        extra = {"DIGEST_MINI_SUMMARY_TIMEOUT_S": "3", "DIGEST_RAW_CAP_TOKENS": "600"}
        stages = ["mini"]
    corpora = [c.strip() for c in args.corpora.split(",") if c.strip()]
    trees = {"old": worktree(args.old_ref, args.old_tree), "new": ROOT}
    started = time.monotonic()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="busy-host-") as tmp:
        root = Path(tmp)
        paths = {}
        if "demo" in corpora:
            paths["demo"] = [SAMPLES]
        if "synthetic" in corpora and args.smoke:  # one session of 3 turns, over the smoke's cap
            paths["synthetic"] = [root / "synthetic" / "export-00"]
            write_export(paths["synthetic"][0], 1, 3, summarized_share=0.0, mini_summary_share=0.0, turn_bytes=500)
        elif "synthetic" in corpora:
            paths["synthetic"] = synthetic_corpus(root / "synthetic", args.sessions)

        # The old arm's bounds are fixed: its stuck-server waits run meanwhile (they only wait).
        detection: dict = {}
        last = corpora[-1]
        homes = {"old": root / "old-detect", "new": root / f"{last}-new-loaded"}
        old_detect = threading.Thread(target=detect, args=({"old": trees["old"]}, homes, stages, extra, detection))
        old_detect.start()
        print(f"busy host: corpora {corpora}, load {args.load}, old {args.old_ref} ({trees['old']}), new {ROOT}")
        with EmbeddedServer() as server:
            quiet_probe = probe(server.url, args.probe_calls)
        print(f"  probe quiet: {[round(s, 2) for s in quiet_probe]} (load avg {os.getloadavg()[0]:.1f})", flush=True)
        if not args.no_quiet:
            for corpus in corpora:
                results[f"{corpus}/new quiet"] = run_arm(
                    f"{corpus}-new-quiet", ROOT, paths[corpus], root, extra, args.arm_timeout
                )

        load = Load(args.load)
        load.start()
        try:
            with EmbeddedServer() as server:
                loaded_probe = probe(server.url, args.probe_calls)
            print(
                f"  probe loaded: {[round(s, 2) for s in loaded_probe]} (load avg {os.getloadavg()[0]:.1f})", flush=True
            )
            for corpus in corpora:
                for arm in ("old", "new"):
                    name = f"{corpus}/{arm} loaded"
                    results[name] = run_arm(
                        f"{corpus}-{arm}-loaded", trees[arm], paths[corpus], root, extra, args.arm_timeout
                    )
            with EmbeddedServer() as server:
                loaded_probe += probe(server.url, args.probe_calls)
            print(f"  probe loaded again: {[round(s, 2) for s in loaded_probe]}", flush=True)
        finally:
            load.stop()

        # The new arm's bounds come from the host speed its loaded run measured (the last corpus's).
        detect({"new": ROOT}, homes, stages, extra, detection)
        old_detect.join()

    slowdown = statistics.median(loaded_probe) / statistics.median(quiet_probe)
    print()
    print(
        f"model slowdown under --load {args.load}: {slowdown:.2f}x (median of {len(quiet_probe)} quiet and {len(loaded_probe)} loaded identical calls: {statistics.median(quiet_probe):.2f} s vs {statistics.median(loaded_probe):.2f} s)"
    )
    print()
    table(list(results.items()))
    print()
    print("time to give up on a stuck server (s; bound: the arm's deadline or stall window):")
    print(
        f"{'server':<7} {'stage':<8} {'old s':>7} {'old bound':>9} {'new s':>7} {'new bound':>9} {'new/old':>7}  new how"
    )
    for server in ("hang", "stall"):
        for stage in stages:
            o, n = detection[("old", server, stage)], detection[("new", server, stage)]
            ratio = n["detected_s"] / o["detected_s"] if "detected_s" in n and o.get("detected_s") else None
            how = "measured" if n.get("measured") else "configured"
            how += ", streamed" if n.get("streaming") else ", not streamed"
            print(
                f"{server:<7} {stage:<8} {fmt(o.get('detected_s'), '7.1f')} {fmt(o.get('bound_s'), '9.1f')} "
                f"{fmt(n.get('detected_s'), '7.1f')} {fmt(n.get('bound_s'), '9.1f')} {fmt(ratio, '7.2f')}  {how}; {n.get('error') or o.get('error')}"
            )

    print()
    print("ratios, new / old under the same load:")
    goals: list[tuple[str, bool | None, str]] = []
    for corpus in corpora:
        old, new, quiet = (
            results.get(f"{corpus}/old loaded", {}),
            results.get(f"{corpus}/new loaded", {}),
            results.get(f"{corpus}/new quiet", {}),
        )
        if "calls" not in old or "calls" not in new:
            print(f"  {corpus}: an arm has no figures")
            goals.append((f"{corpus}: both arms finished", False, "see above"))
            continue
        for key in ("wall_s", "model_s", "given_up", "discarded_s"):
            o, n = old.get(key), new.get(key)  # a killed arm has no wall time
            ratio = n / o if o and n is not None else None
            print(f"  {corpus:<10} {key:<12} old {fmt(o, '>8.1f')}  new {fmt(n, '>8.1f')}  new/old {fmt(ratio, '.2f')}")
        goals.append(
            (
                f"{corpus}: no call given up while it was making progress (new)",
                new["progressing_cut"] == 0,
                f"{new['progressing_cut']} cut while progressing; {new['given_up_after_first_piece']} given up after their first piece; {new['given_up']} given up in all",
            )
        )
        goals.append(
            (
                f"{corpus}: < 5% of model seconds discarded (new)",
                new["discarded_share"] < 0.05,
                f"{new['discarded_share']:.1%} ({new['discarded_s']:.1f} of {new['model_s']:.1f} s; old {old['discarded_share']:.1%})",
            )
        )
        if "wall_s" in quiet and "wall_s" in new:
            bound = 1.5 * quiet["wall_s"] * slowdown
            goals.append(
                (
                    f"{corpus}: new wall under load <= 1.5 x quiet wall x model slowdown",
                    new["wall_s"] <= bound,
                    f"{new['wall_s']:.1f} s vs 1.5 x {quiet['wall_s']:.1f} x {slowdown:.2f} = {bound:.1f} s (ratio {new['wall_s'] / (quiet['wall_s'] * slowdown):.2f})",
                )
            )
    for server in ("hang", "stall"):
        for stage in stages:
            n = detection[("new", server, stage)]
            ok = "detected_s" in n and n["detected_s"] <= n["bound_s"] + 2.0
            goals.append(
                (
                    f"stuck server ({server}, {stage}) detected within its stall window (new)",
                    ok,
                    f"{fmt(n.get('detected_s'), '.1f')} s, window {fmt(n.get('bound_s'), '.1f')} s",
                )
            )
    print()
    for name, ok, detail in goals:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    print(f"\ntotal {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
