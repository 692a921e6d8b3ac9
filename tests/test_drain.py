"""Issue 36: the CLI drains like the sensors (`sweep --drain`), a run that fails the same way on
every sweep backs off and says so, and a sweep told to stop interrupts its run in hand and launches
nothing more. `session-digest` in subprocesses, real Dagster runs, real DuckDB, the local model
test server over real HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from digest.settings import load_settings
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns, project_free_environ
from tests.model_server import CHAT_PATHS, FAITHFUL_SUMMARY, Behaviour, ModelServer

CLI = [sys.executable, "-m", "app.cli"]
# Year 10000 as epoch milliseconds: data an older reader let through (issue 36, item 2).
YEAR_10000_MS = 253_402_300_800_000


def _env(home, url: str, **extra: str) -> dict[str, str]:
    kept = project_free_environ()
    return {**kept, "DIGEST_HOME": str(home), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_MODEL_URL": url, **extra}


def _cli(args: list[str], env: dict, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(CLI + args, env=env, capture_output=True, text=True, timeout=300)
    if ok:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def _store(home) -> DigestStore:
    return DigestStore(load_settings({"DIGEST_HOME": str(home)}).db_path)


def _kinds_server(summary: Behaviour, mini=Behaviour.mini):
    """A server answering summary calls (they ask for a JSON schema) and mini-summary calls apart, counting each."""
    calls = {"summary": 0, "mini-summary": 0}

    def script(received):
        if received.path not in CHAT_PATHS:
            return Behaviour()
        kind = "summary" if "response_format" in received.body else "mini-summary"
        calls[kind] += 1
        return summary if kind == "summary" else mini(received)

    return ModelServer(script), calls


def test_sweep_drain_brings_a_slow_hosts_over_cap_session_to_a_mini_summary_summary_with_all_its_mini_summaries(
    tmp_path,
):
    """On a slow host an over-cap session gets a truncated-raw summary first; `sweep` alone never made
    it better. `sweep --drain` runs the backfill and the upgrade too, a line per finished run."""
    slow = 0.4  # each call, summary or mini summary
    server, calls = _kinds_server(
        replace(Behaviour.reply(FAITHFUL_SUMMARY), delay_s=slow),
        lambda received: replace(Behaviour.mini(received), delay_s=slow),
    )
    home = tmp_path / "home"
    with server:
        env = _env(home, server.url, DIGEST_RAW_CAP_TOKENS="1000")
        _cli(["ingest", write_bundle(tmp_path / "bundle", make_turns("big", 8, doc_bytes=900))], env)
        done = _cli(["sweep", "--drain", "--json"], env)
    result = json.loads(done.stdout)
    row = _store(home).summaries.summary_row("big")
    assert (row["source_tier"], row["degraded"], row["route_reason"]) == ("miniSummary", True, "over-raw-cap")
    assert (row["mini_summary_count"], row["mini_summary_coverage"]) == (8, 1.0)
    # The sensors' order: the first summary (truncated raw), the backfill, the upgrade.
    assert [r.get("source_tier") for r in result["summary_runs"]] == ["turnCards", "miniSummary"]
    assert [r["mini_summaries"] for r in result["mini_summary_runs"]] == [8]
    assert calls["summary"] == 2 and calls["mini-summary"] >= 1  # the backfill batches turns in a call
    assert (result["summarized"], result["mini_summaries"], result["failed"]) == (2, 8, 0)
    assert result["stopped"].startswith("nothing left to do")
    # A line per finished run as it finished (JSON lines on stderr with --json).
    finished = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert [f["partition"] for f in finished] == ["big", "big", "big"]


def test_sweep_drain_keeps_to_its_limit_for_the_whole_drain(tmp_path):
    server, calls = _kinds_server(Behaviour.reply(FAITHFUL_SUMMARY))
    home = tmp_path / "home"
    with server:
        env = _env(home, server.url, DIGEST_RAW_CAP_TOKENS="1000")
        _cli(["ingest", write_bundle(tmp_path / "bundle", make_turns("big", 8, doc_bytes=900))], env)
        result = json.loads(_cli(["sweep", "--drain", "--limit", "2", "--json"], env).stdout)
    # Two runs in all: the first summary and the backfill; the upgrade waits for the next drain.
    assert (len(result["summary_runs"]), len(result["mini_summary_runs"])) == (1, 1)
    assert result["stopped"] == "the drain's limit of 2 runs is reached"
    assert _store(home).summaries.summary_row("big")["source_tier"] == "turnCards"


def test_a_summary_run_that_raises_on_its_sessions_data_backs_off_with_a_friction_event_and_the_sweep_says_so(
    tmp_path,
):
    """Data an older reader let through (a timestamp in year 10000) made the run raise on every
    sweep, unseen: no backoff, no friction event, exit 0. Now the failure is counted, backs off, and
    the sweep's line and exit code say so; the other session is summarized."""
    server, calls = _kinds_server(Behaviour.reply(FAITHFUL_SUMMARY))
    home = tmp_path / "home"
    with server:
        env = _env(home, server.url)
        turns = make_turns("bad", 2) + make_turns("good", 2)
        _cli(["ingest", write_bundle(tmp_path / "bundle", turns)], env)
        store = _store(home)
        with store.file.connect() as con:
            con.execute(f"UPDATE turns SET ts_ms = {YEAR_10000_MS} WHERE id = 'bad-t001'")
        first = _cli(["sweep"], env, ok=False)
        again = _cli(["sweep", "--json"], env)
    assert first.returncode == 1, first.stderr[-3000:]
    [line] = [line for line in first.stderr.splitlines() if line.startswith("✗ bad")]
    assert "no summary for session 'bad': the run raised" in line and "failure 1, backing off 1800s" in line
    assert "✓ good" in first.stderr
    state = store.query("SELECT failures, last_symptom FROM summary_state WHERE session_id = 'bad'")
    assert (state["failures"][0], state["last_symptom"][0]) == (1, "run-error")
    events = store.query("SELECT consumer, symptom, note FROM friction_events WHERE asset_ref = 'bad'")
    assert list(events["symptom"]) == ["run-error"] and list(events["consumer"]) == ["session_summaries"]
    # The next sweep leaves it in its backoff: no run fails again, and it says what waits.
    result = json.loads(again.stdout)
    assert result["runs"] == [] and (result["failed"], result["run_errors"]) == (0, 0)
    assert "1 in failure backoff" in result["skipped"]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_sweep_told_to_stop_interrupts_its_run_in_hand_and_launches_nothing_more(tmp_path, stop):
    """Three sessions, slow replies; the signal lands during the first run's model call. That call is
    recorded `interrupted` (not a host failure: the host's circuit stays closed), no run is launched
    after it, and the exit code says which signal stopped the sweep."""
    received = []

    def script(request):
        if request.path not in CHAT_PATHS:
            return Behaviour()
        received.append(time.monotonic())
        return replace(Behaviour.reply(FAITHFUL_SUMMARY), delay_s=30)

    home = tmp_path / "home"
    with ModelServer(script) as server:
        env = _env(home, server.url)
        turns = make_turns("s1", 2) + make_turns("s2", 2) + make_turns("s3", 2)
        _cli(["ingest", write_bundle(tmp_path / "bundle", turns)], env)
        sweep = subprocess.Popen(CLI + ["sweep", "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while not received and time.monotonic() < deadline and sweep.poll() is None:
                time.sleep(0.1)
            assert received, "no model call began"
            sweep.send_signal(stop)
            out, err = sweep.communicate(timeout=120)
        finally:
            if sweep.poll() is None:
                sweep.kill()
        calls = len(received)
    assert sweep.returncode == 128 + stop, err.decode()[-3000:]
    assert calls == 1  # nothing launched after the stop
    store = _store(home)
    attempts = store.query("SELECT outcome FROM attempts ORDER BY attempt_id")
    assert list(attempts["outcome"]) == ["interrupted"]  # no provider-error, no other call
    assert store.hosts.host_circuits() == {} or all(c.failures == 0 for c in store.hosts.host_circuits().values())
    result = json.loads(out)
    [run] = result["runs"]
    assert run["interrupted"] == stop.name and not run["success"]
    assert store.query("SELECT count(*) AS n FROM session_summaries")["n"][0] == 0
