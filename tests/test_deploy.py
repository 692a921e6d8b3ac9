"""The deployment of issue 15 as a user runs it: the Dagster instance on a real PostgreSQL server
(tests/postgres.py), the real `dagster-daemon run`, and its sensors taking an export from the
inbox to ingest to one summary run per session, against local model servers that answer after a
delay so runs overlap. Nothing is lost, summarized twice or left running; no run fails on the
DuckDB file's lock; the run queue keeps to the limits the project wrote in dagster.yaml."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg2
import yaml

from digest.tags import MODEL_HOST_TAG
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns, project_free_environ
from tests.model_server import Behaviour, ModelServer
from tests.postgres import postgres_server
from tests.synthetic_export import write_export

REPO_ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CLI = [sys.executable, "-m", "app.cli"]
SESSIONS = 16
DELAY_S = 1.5  # each model reply: long enough that runs overlap, short enough for a bounded test
CONCURRENCY = 2  # calls at once, per host: two hosts, four runs at once
LAUNCH_S = 90.0  # the most the first replies wait for the other runs to start
DEADLINE_S = 480
POLL_S = 2.0
# The daemon's sensors this test does not exercise: their runs would compete for the same slots.
STOPPED_SENSORS = ("digest_sensor", "mini_summary_sensor")
# DuckDB's "Could not set lock on file", and any other lock failure; not Dagster's "blocked".
LOCK = re.compile(r"\block", re.I)
FINISHED = ("SUCCESS", "FAILURE", "CANCELED")


def _env(home: Path, pg_url: str, url: str, **extra: str) -> dict[str, str]:
    kept = project_free_environ()
    return {
        **kept,
        "DAGSTER_HOME": str(home / "dagster"),
        "DIGEST_HOME": str(home),
        # SQLAlchemy's name for the driver the project installs (psycopg2).
        "DIGEST_DAGSTER_PG_URL": pg_url.replace("postgresql://", "postgresql+psycopg2://", 1),
        "DIGEST_MODEL_PROVIDER": "openai",
        "DIGEST_MODEL_URL": url,
        "DIGEST_RESPONSE_CACHE": "off",  # a repeated call reaches the model, and the ledger
        "DIGEST_SWEEP_MAX_SESSIONS": str(SESSIONS),  # one summary-sensor tick launches them all
        **extra,
    }


def _hosts_file(path: Path, servers: dict[str, ModelServer]) -> Path:
    path.write_text(
        "".join(
            f'[[hosts]]\nname = "{name}"\nprovider = "openai"\nurl = "{server.url}"\nmodel = "fake"\n'
            f"context_limit_tokens = 32768\nraw_cap_tokens = 8192\nconcurrency = {CONCURRENCY}\n"
            for name, server in servers.items()
        )
    )
    return path


def _dagster(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    """A Dagster command over the project's workspace, in its own process group (its code server
    and run workers with it), its output in a file."""
    with log.open("w") as out:
        return subprocess.Popen(
            [str(BIN / args[0]), *args[1:], "-w", "workspace.yaml"],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(process: subprocess.Popen) -> None:
    """Its whole process group: SIGTERM, then SIGKILL for whatever is left (a code server that
    lingers after its daemon, a run worker)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            continue
        time.sleep(1)  # the group's other processes end with it, or get the SIGKILL


def _runs(pg_url: str) -> list[tuple[str, str, str]]:
    """(run id, job, status) of every run in PostgreSQL's `runs` table."""
    with psycopg2.connect(pg_url) as con, con.cursor() as cur:
        cur.execute("SELECT run_id, pipeline_name, status FROM runs")
        return cur.fetchall()


def _peak_overlap(pg_url: str, job: str, host: str | None = None) -> int:
    """The most runs of `job` (on model host `host`) in progress at once, from the event log: from
    the queue's launch (RUN_STARTING) to the run's end, inside the span the queue counts the run."""
    with psycopg2.connect(pg_url) as con, con.cursor() as cur:
        cur.execute(
            """SELECT min(e.timestamp) FILTER (WHERE e.dagster_event_type = 'PIPELINE_STARTING'),
                      min(e.timestamp) FILTER (WHERE e.dagster_event_type IN %s)
               FROM event_logs e JOIN runs r USING (run_id)
               WHERE r.pipeline_name = %s AND (%s IS NULL OR r.run_id IN
                 (SELECT run_id FROM run_tags WHERE key = %s AND value = %s))
               GROUP BY e.run_id""",
            [("PIPELINE_SUCCESS", "PIPELINE_FAILURE", "PIPELINE_CANCELED"), job, host, MODEL_HOST_TAG, host],
        )
        spans = cur.fetchall()
    assert spans and all(start and end for start, end in spans), spans
    level, peak = 0, 0
    # An end and a start at the same instant: the end first (False sorts before True).
    for _, starts in sorted([(start, True) for start, _ in spans] + [(end, False) for _, end in spans]):
        level += 1 if starts else -1
        peak = max(peak, level)
    return peak


def test_the_daemon_on_postgres_summarizes_an_export_once_each_within_the_run_limits(tmp_path):
    home = tmp_path / "home"
    facts = write_export(home / "inbox", SESSIONS, turns_per_session=3, summarized_share=0, mini_summary_share=1)
    servers: dict[str, ModelServer] = {}
    all_busy = threading.Event()

    def reply(received) -> Behaviour:
        """After DELAY_S; the first replies wait (up to LAUNCH_S) until both hosts are answering as
        many calls as they take: the daemon launches runs one by one, slowly on a busy machine, and
        the test asks whether the queue lets them all run at once, not how fast it launches."""
        if sum(server.concurrent_chats for server in servers.values()) >= 2 * CONCURRENCY:
            all_busy.set()
        all_busy.wait(timeout=LAUNCH_S)
        return Behaviour(content=Behaviour.reply().content, delay_s=DELAY_S)

    servers.update({name: ModelServer(reply) for name in ("cpu-1", "cpu-2")})
    logs = tmp_path / "logs"
    logs.mkdir()
    processes: list[subprocess.Popen] = []
    with postgres_server() as pg_url, servers["cpu-1"], servers["cpu-2"]:
        hosts_file = _hosts_file(tmp_path / "hosts.toml", servers)
        env = _env(home, pg_url, "http://127.0.0.1:9", DIGEST_MODEL_HOSTS=str(hosts_file))
        # Any CLI command writes dagster.yaml from the settings, as a user's first command does.
        done = subprocess.run(CLI + ["instance-config", "--json"], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        written = (home / "dagster" / "dagster.yaml").read_text()
        assert "127.0.0.1" not in written  # the URL (a password, in a real one) stays in the environment
        assert yaml.safe_load(written)["storage"] == {"postgres": {"postgres_url": {"env": "DIGEST_DAGSTER_PG_URL"}}}
        limits = json.loads(done.stdout)
        assert limits["host_run_limits"] == {"cpu-1": CONCURRENCY, "cpu-2": CONCURRENCY}
        try:
            # The instance's tables made once, as a deployment does before it starts its processes: the
            # daemon and the stop commands below would otherwise all create them at once on an empty
            # database, and one of them fails on a type another has just made ("jobs" already exists).
            migrate = subprocess.run(
                [str(BIN / "dagster"), "instance", "migrate"], env=env, capture_output=True, text=True
            )
            assert migrate.returncode == 0, migrate.stderr[-3000:]
            daemon = _dagster(["dagster-daemon", "run"], env, logs / "daemon.log")
            processes.append(daemon)
            # As a user stops them, while the daemon runs: long before their second tick (300 s,
            # 120 s); their first finds nothing to do (no summary yet, every turn has its mini summary).
            stops = [_dagster(["dagster", "sensor", "stop", s], env, logs / f"{s}.log") for s in STOPPED_SENSORS]
            processes.extend(stops)
            for stop, name in zip(stops, STOPPED_SENSORS, strict=True):
                assert stop.wait(timeout=120) == 0, (logs / f"{name}.log").read_text()[-3000:]
            deadline = time.monotonic() + DEADLINE_S
            while True:
                runs = _runs(pg_url)
                summaries = [status for _, job, status in runs if job == "summarize_sessions"]
                settled = runs and all(status in FINISHED for _, _, status in runs)
                if settled and len(summaries) >= SESSIONS:
                    break
                assert daemon.poll() is None, (logs / "daemon.log").read_text()[-3000:]
                assert time.monotonic() < deadline, f"not done in {DEADLINE_S}s: {Counter(s for *_, s in runs)}"
                time.sleep(POLL_S)
        finally:
            for process in processes:
                _stop(process)
        runs = _runs(pg_url)
        with psycopg2.connect(pg_url) as con, con.cursor() as cur:
            cur.execute("SELECT event FROM event_logs WHERE run_id <> ''")
            events = [row[0] for row in cur.fetchall()]
            cur.execute(
                "SELECT DISTINCT step_key FROM event_logs JOIN runs USING (run_id) "
                "WHERE pipeline_name = 'summarize_sessions' AND dagster_event_type = 'STEP_START'"
            )
            summary_steps = {row[0] for row in cur.fetchall()}
        summary_peak = _peak_overlap(pg_url, "summarize_sessions")
        host_peaks = {name: _peak_overlap(pg_url, "summarize_sessions", name) for name in servers}

    # The instance lived in PostgreSQL: every run and its events there, no SQLite run storage.
    assert not (home / "dagster" / "history").exists()
    assert {job for _, job, _ in runs} >= {"ingest", "summarize_sessions"} and events
    # Nothing failed, nothing left queued or running, and no run met the DuckDB lock.
    assert Counter(status for *_, status in runs) == Counter({"SUCCESS": len(runs)})
    assert [e for e in events if LOCK.search(e)] == []
    # Raw sessions all: the sensor's runs leave the mini-summary step out and run no check (issue 20).
    assert summary_steps == {"raw_sessions", "session_summaries"}, summary_steps
    # Every session summarized, once: one summary row and one ok model attempt each.
    store = DigestStore(home / "digest.duckdb")
    sessions = set(store.query("SELECT session_id FROM sessions")["session_id"])
    assert len(sessions) == facts.sessions
    assert Counter(row["session_id"] for row in store.reports.summary_rows()) == Counter(dict.fromkeys(sessions, 1))
    ledger = store.query(
        "SELECT session_id, outcome, host FROM attempts WHERE stage = 'session-summary' AND NOT cached"
    ).to_dict("records")
    assert Counter(r["session_id"] for r in ledger if r["outcome"] == "ok") == Counter(dict.fromkeys(sessions, 1))
    # Both hosts worked, neither got more calls or runs at once than it takes, and the queue ran
    # as many summaries at once as the two take together, never more.
    assert {r["host"] for r in ledger} == set(servers)
    for name, server in servers.items():
        assert server.chat_requests(), name
        assert server.peak_concurrent_chats <= CONCURRENCY, (name, server.peak_concurrent_chats)
    assert all(peak <= CONCURRENCY for peak in host_peaks.values()), host_peaks
    assert summary_peak == 2 * CONCURRENCY, (summary_peak, host_peaks)
    assert summary_peak < limits["max_concurrent_runs"]  # the one more is ingest's


def test_the_clis_runs_go_to_postgres_and_a_bare_postgresql_url_is_refused_with_the_reason(tmp_path):
    home = tmp_path / "home"
    bundle = write_bundle(tmp_path / "bundle", make_turns("small", 2))
    with postgres_server() as pg_url, ModelServer() as model:
        env = _env(home, pg_url, model.url)
        done = subprocess.run(CLI + ["ingest", str(bundle), "--json"], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        assert [(job, status) for _, job, status in _runs(pg_url)] == [("ingest", "SUCCESS")]
        assert not (home / "dagster" / "history").exists()
        # SQLAlchemy 2.1 opens a bare postgresql:// with psycopg 3, which is not installed.
        bare = {**env, "DIGEST_DAGSTER_PG_URL": "postgresql://digest:s3cret@127.0.0.1:5432/dagster"}
        refused = subprocess.run(CLI + ["status"], env=bare, capture_output=True, text=True)
        assert refused.returncode != 0
        assert "DIGEST_DAGSTER_PG_URL='postgresql://digest:***@127.0.0.1:5432/dagster'" in refused.stderr
        assert "postgresql+psycopg2://" in refused.stderr and "s3cret" not in refused.stderr
