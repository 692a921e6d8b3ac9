"""The front door, as a user runs it: `session-digest` in a subprocess, runs recorded in DAGSTER_HOME."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml
from dagster import AssetCheckKey, AssetKey, DagsterEventType, DagsterInstance

from tests.bundles import write_bundle
from tests.conftest import make_turns, project_free_environ
from tests.model_server import Behaviour, ModelServer

CLI = [sys.executable, "-m", "app.cli"]


def _cli_env(home, url: str, **extra: str) -> dict[str, str]:
    """The CLI's environment: this process's, less any DIGEST_/DAGSTER_ setting, on a test server."""
    kept = project_free_environ()
    return {**kept, "DIGEST_HOME": str(home), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_MODEL_URL": url, **extra}


def _text(args, env) -> subprocess.CompletedProcess:
    """As a person runs it, though not on a terminal (a pipe): tables and plain lines."""
    done = subprocess.run(CLI + args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _run(args, env) -> dict:
    return json.loads(_text(args + ["--json"], env).stdout)


def _row(text: str, label: str) -> str:
    """The value of a table row `label  value`."""
    found = re.search(rf"^{re.escape(label)}  +(.+?)\s*$", text, re.M)
    assert found, f"no row {label!r} in:\n{text}"
    return found.group(1)


# Dagster's console logger prints lines like `2026-... - dagster - DEBUG - ingest - <run id> - ...`.
DAGSTER_LOG_LINE = re.compile(r" - (DEBUG|INFO) - ")


def test_ingest_sweep_status_and_the_ui_instance_agree(tmp_path):
    home = tmp_path / "home"
    folder = write_bundle(tmp_path / "bundle", make_turns("small", 3) + make_turns("big", 40, doc_bytes=400, minis=40))
    (folder / "turns-extra.jsonl").write_text('{"id": "x1"}\nnot json\n')
    extraction = {"entities": [{"name": "Grid", "type": "CONCEPT", "description": "the grid"}], "relations": []}

    def script(received):
        if received.prompt.startswith("Extract a knowledge graph"):
            return Behaviour.reply(extraction)
        return Behaviour.reply()

    with ModelServer(script) as server:
        env = _cli_env(home, server.url, DIGEST_RAW_CAP_TOKENS="2000")
        first = _text(["ingest", str(folder), "--json"], env)
        ingested = json.loads(first.stdout)
        assert ingested["turns"] == 43 and ingested["rejects"] == 2 and ingested["new_partitions"] == 2
        # The first run on a new instance: one line on Dagster's telemetry instead of its banner.
        assert "Welcome to Dagster" not in first.stderr and "usage statistics" in first.stderr
        assert "telemetry: {enabled: false}" in first.stderr
        assert (home / "dagster" / ".telemetry" / "id.yaml").is_file()
        swept_text = _text(["sweep", "--limit", "1"], env)
        assert _row(swept_text.stdout, "pending") == "2" and _row(swept_text.stdout, "summarized") == "1"
        # The sweep recorded the backlog asset after its runs (no run of its own), and says it in a line.
        assert _row(swept_text.stdout, "backlog").startswith("1 pending, the oldest waiting")
        # One plain line for the finished session (no bar, no colours on a pipe), no Dagster events.
        [line] = swept_text.stderr.splitlines()
        # The test server's summary names auth.py, which no turn has: the line says it is junk.
        pattern = r"✓ (small|big)  (within-cap|over-raw-cap)  (raw|miniSummary)  junk: fabricated  [0-9.]+s"
        assert re.fullmatch(pattern, line), line
        assert "\x1b[" not in swept_text.stderr + swept_text.stdout
        swept = _run(["sweep"], env)
        assert swept["pending"] == 1 and swept["summarized"] == 1
        assert swept["backlog"].startswith("nothing pending; 2 finished in the last hour")
        status = _run(["status"], env)
        status_text = _text(["status"], env)
        plan = _run(["plan"], env)
        plan_text = _text(["plan"], env)
        digested = _run(["digest", "--limit", "1"], env)
        report = _run(["friction-report"], env)
    assert status["sessions"] == 2 and status["summaries"] == 2 and status["pending_summaries"] == 0
    assert status["summaries_by_source_tier"] == {"miniSummary": 1, "raw": 1}
    assert status["rejects"] == 2
    assert status["friction_by_symptom"] == {"size-precheck-skip": 1}
    assert _row(status_text.stdout, "sessions") == "2" and _row(status_text.stdout, "pending summaries") == "0"
    assert _row(status_text.stdout, "summaries by source tier") == "miniSummary 1, raw 1"
    assert _row(status_text.stdout, "friction by symptom") == "size-precheck-skip 1"
    assert _row(plan_text.stdout, "skipped") == "no session needs a summary"
    for done in (first, swept_text, status_text, plan_text):
        assert not DAGSTER_LOG_LINE.search(done.stderr + done.stdout), done.stderr[-3000:]
        assert "Welcome to Dagster" not in done.stderr
    # The CLI's runs live in the instance under DIGEST_HOME/dagster, which `session-digest ui` serves.
    instance = DagsterInstance.from_config(str(Path(home) / "dagster"))
    try:
        runs = instance.get_runs()
        backlogs = instance.fetch_materializations(AssetKey("backlog"), limit=10).records
        stall_checks = instance.event_log_storage.get_asset_check_execution_history(
            AssetCheckKey(AssetKey("backlog"), "backlog_not_stalled"), limit=10
        )
        jobs = sorted(run.job_name for run in runs)
        # Each run's events are in the instance, for the UI, as well as in the CLI's log file.
        logged = {
            run.run_id: {e.dagster_event_type for e in instance.all_logs(run.run_id) if e.is_dagster_event}
            for run in runs
        }
    finally:
        instance.dispose()
    assert jobs == ["digest_sessions", "ingest", "report_friction", "summarize_sessions", "summarize_sessions"]
    assert [r.asset_materialization.metadata["pending"].value for r in backlogs] == [0, 1]  # newest first
    assert len(stall_checks) == 2
    log = (home / "logs" / "session-digest.log").read_text()
    for run_id, events in logged.items():
        assert DagsterEventType.RUN_SUCCESS in events
        assert re.search(rf" - DEBUG - \w+ - {run_id} - \d+ - RUN_SUCCESS - ", log), run_id
    assert plan["pending"] == 0 and plan["skipped"] == "no session needs a summary"
    assert digested["digested"] == 1 and digested["runs"][0]["nodes"] > 0
    assert Path(report["report_path"]).is_file() and report["pre_routes"] == 1


def test_an_invalid_setting_stops_the_cli_with_the_reason(tmp_path):
    env = {**os.environ, "DIGEST_HOME": str(tmp_path), "DIGEST_RAW_CAP_TOKENS": "sometimes"}
    done = subprocess.run(CLI + ["status"], env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "DIGEST_RAW_CAP_TOKENS='sometimes'" in done.stderr


def test_a_damaged_store_stops_the_cli_with_the_file_and_the_way_back(tmp_path):
    env = {**os.environ, "DIGEST_HOME": str(tmp_path)}
    _run(["status"], env)  # creates the store
    db = tmp_path / "digest.duckdb"
    with open(db, "r+b") as f:  # scribble over the first block (the catalog) after the file headers
        f.seek(12288 + 64)
        f.write(os.urandom(4096))
    done = subprocess.run(CLI + ["status"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"cannot open the store {db}" in done.stderr
    assert "session-digest restore BUNDLE" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_sweep_on_a_terminal_redraws_a_bar_with_the_plans_time_left_while_runs_run(tmp_path):
    home = tmp_path / "home"
    folder = write_bundle(tmp_path / "bundle", make_turns("small", 3) + make_turns("other", 4))
    drawn = bytearray()
    drawn_during_calls = []

    def script(received):
        # While the run waits on the model, Dagster has fds 1 and 2 captured: the bar still redraws.
        before = len(drawn)
        time.sleep(1.0)
        drawn_during_calls.append(len(drawn) - before)
        return Behaviour.reply()

    with ModelServer(script) as server:
        env = _cli_env(home, server.url, TERM="xterm-256color", COLUMNS="160")
        _run(["ingest", str(folder)], env)
        leader, follower = pty.openpty()  # stderr is a terminal, stdout a pipe

        def drain():
            with contextlib.suppress(OSError):  # EIO once the sweep has exited
                while chunk := os.read(leader, 65536):
                    drawn.extend(chunk)

        reader = threading.Thread(target=drain)
        reader.start()
        try:
            done = subprocess.run(
                CLI + ["sweep"], env=env, stdout=subprocess.PIPE, stderr=follower, text=True, timeout=300
            )
        finally:
            os.close(follower)
            reader.join(timeout=30)
            os.close(leader)
    screen = drawn.decode("utf-8", "replace")
    assert done.returncode == 0, screen[-3000:]
    assert _row(done.stdout, "summarized") == "2"
    assert "left (plan)" in screen and "━" in screen and "\x1b[" in screen
    assert drawn_during_calls and all(drawn_during_calls), drawn_during_calls
    assert re.search(r"✓ small  within-cap  raw  junk: fabricated  [0-9.]+s", screen)
    assert re.search(r"✓ other  within-cap  raw", screen)
    assert not DAGSTER_LOG_LINE.search(screen)
    # Dagster would mirror fds 1 and 2 into each run's compute logs: the instance keeps none
    # (NoOpComputeLogManager, issue 20), and none that exists carries the bar.
    assert "NoOpComputeLogManager" in (home / "dagster" / "dagster.yaml").read_text()
    compute_logs = [p for p in (home / "dagster" / "storage").rglob("compute_logs/*") if p.suffix in (".err", ".out")]
    assert not any("left (plan)" in p.read_text(errors="replace") for p in compute_logs)


# As the CLI wrote dagster.yaml before issue 15, with its telemetry block uncommented by the user.
OLD_INSTANCE_CONFIG = """\
# Written by session-digest.
concurrency:
  pools:
    default_limit: 1
telemetry:
  enabled: false
"""


def test_the_instance_config_follows_the_settings_and_names_the_postgres_url_only_by_its_variable(tmp_path):
    from dagster import DagsterInstance

    from digest.settings import load_settings
    from pipelines.instance import MARKER, instance_yaml, write_instance_config

    env = {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai"}
    single = load_settings(env)
    text = instance_yaml(single)
    assert text.startswith(MARKER + "\n") and "# telemetry:\n#   enabled: false" in text
    config = yaml.safe_load(text)
    assert "storage" not in config  # SQLite: Dagster's default, under DAGSTER_HOME
    assert config["concurrency"] == {
        "pools": {"default_limit": 1},
        "runs": {
            "max_concurrent_runs": 2,
            "tag_concurrency_limits": [{"key": "digest/model_host", "value": "default", "limit": 1}],
        },
    }
    hosts = tmp_path / "hosts.toml"
    hosts.write_text(
        '[[hosts]]\nname = "cpu-1"\nprovider = "openai"\ncontext_limit_tokens = 32768\n'
        '[[hosts]]\nname = "gpu-1"\nprovider = "openai"\ncontext_limit_tokens = 131072\nconcurrency = 3\n'
    )
    two = yaml.safe_load(instance_yaml(load_settings({**env, "DIGEST_MODEL_HOSTS": str(hosts)})))["concurrency"]
    assert two["pools"] == {"default_limit": 4}
    assert two["runs"]["max_concurrent_runs"] == 5  # the hosts' 4, and one for ingest and reports
    assert two["runs"]["tag_concurrency_limits"] == [
        {"key": "digest/model_host", "value": "cpu-1", "limit": 1},
        {"key": "digest/model_host", "value": "gpu-1", "limit": 3},
    ]
    url = "postgresql+psycopg2://digest:s3cret@127.0.0.1:5432/dagster"
    on_postgres = instance_yaml(load_settings({**env, "DIGEST_DAGSTER_PG_URL": url}))
    assert yaml.safe_load(on_postgres)["storage"] == {"postgres": {"postgres_url": {"env": "DIGEST_DAGSTER_PG_URL"}}}
    assert "s3cret" not in on_postgres and "127.0.0.1" not in on_postgres

    # Dagster itself reads the file: the run queue and the pool as written, SQLite storage.
    write_instance_config(tmp_path / "dagster", single)
    instance = DagsterInstance.from_config(str(tmp_path / "dagster"))
    try:
        queue = instance.get_concurrency_config().run_queue_config
        assert queue.max_concurrent_runs == 2
        assert queue.tag_concurrency_limits == [{"key": "digest/model_host", "value": "default", "limit": 1}]
        assert instance.global_op_concurrency_default_limit == 1
        assert type(instance.run_storage).__name__ == "SqliteRunStorage"
    finally:
        instance.dispose()


def test_the_cli_rewrites_its_own_instance_config_keeping_telemetry_and_leaves_a_users_alone(tmp_path):
    from digest.settings import load_settings
    from pipelines.instance import write_instance_config

    settings = load_settings({"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai"})
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "dagster.yaml").write_text(OLD_INSTANCE_CONFIG)
    assert write_instance_config(ours, settings) is None
    rewritten = yaml.safe_load((ours / "dagster.yaml").read_text())
    assert rewritten["concurrency"]["runs"]["tag_concurrency_limits"][0]["value"] == "default"
    assert rewritten["telemetry"] == {"enabled": False}  # the user's one edit survives

    # A file without the marker is the user's: never rewritten; one line when a host has no limit.
    home = tmp_path / "home"
    (home / "dagster").mkdir(parents=True)
    own = "concurrency:\n  pools:\n    default_limit: 3\n"
    (home / "dagster" / "dagster.yaml").write_text(own)
    done = subprocess.run(
        CLI + ["instance-config", "--json"], env=_cli_env(home, "http://127.0.0.1:9"), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (home / "dagster" / "dagster.yaml").read_text() == own
    shown = json.loads(done.stdout)
    assert (shown["written_by"], shown["model_pool_limit"], shown["host_run_limits"]) == ("you", 3, {})
    [warning] = [line for line in done.stderr.splitlines() if "no run limit" in line]
    assert "model host(s) default" in warning and "digest/model_host" in warning
    limited = own + "  runs:\n    tag_concurrency_limits:\n    - {key: digest/model_host, value: default, limit: 2}\n"
    (home / "dagster" / "dagster.yaml").write_text(limited)
    assert write_instance_config(home / "dagster", settings) is None
    assert (home / "dagster" / "dagster.yaml").read_text() == limited


def test_a_cli_sweep_runs_what_the_sensor_requests_with_the_jobs_default_config(tmp_path):
    """The CLI's run config (its log-file logger) is merged with the summary job's own default
    (`only_if_degraded: True`), not put in its place: a raw session is one summary call, no mini
    summaries (issue 22, defect 1). And as the sensor requests it, every session's run leaves the
    mini-summary step out (issue 20; issue 28: a degraded one's first summary does not wait for it)."""
    home = tmp_path / "home"
    folder = write_bundle(tmp_path / "bundle", make_turns("small", 3) + make_turns("big", 40, doc_bytes=400, minis=40))
    with ModelServer() as server:
        env = _cli_env(home, server.url, DIGEST_RAW_CAP_TOKENS="2000")
        _run(["ingest", str(folder)], env)
        swept = _run(["sweep"], env)
        calls = len(server.requests)
    assert swept["summarized"] == 2
    assert calls == 2, [r.prompt[:60] for r in server.requests]  # big's mini summaries are the export's
    instance = DagsterInstance.from_config(str(home / "dagster"))
    try:
        runs = {r.tags["dagster/partition"]: r for r in instance.get_runs() if r.job_name == "summarize_sessions"}
        steps = {key: {s.step_key for s in instance.get_run_step_stats(r.run_id)} for key, r in runs.items()}
    finally:
        instance.dispose()
    assert steps == {key: {"raw_sessions", "session_summaries"} for key in ("small", "big")}
    assert all("turn_mini_summaries" not in r.run_config.get("ops", {}) for r in runs.values())
    assert all("run_log_file" in r.run_config["loggers"] for r in runs.values())


def test_sweep_session_summarizes_the_sessions_named_in_their_failure_backoff_and_names_an_unknown_one(tmp_path):
    """Issue 28, item 5: `sweep --session ID` (repeatable) as the reference's explicit single-session
    run: outside the budget and the failure backoff; a session summarized at its turns gets no run."""
    home = tmp_path / "home"
    folder = write_bundle(
        tmp_path / "bundle", make_turns("small", 3) + make_turns("big", 40, doc_bytes=400) + make_turns("other", 2)
    )
    replies = {"good": False}

    def script(received):
        return Behaviour.reply() if replies["good"] else Behaviour.text("no json here")

    with ModelServer(script) as server:
        env = _cli_env(home, server.url, DIGEST_RAW_CAP_TOKENS="2000")
        _run(["ingest", str(folder)], env)
        failed = _run(["sweep", "--session", "small"], env)  # a parse failure: small backs off 30 minutes
        assert [(r["partition"], r["success"]) for r in failed["runs"]] == [("small", False)]
        replies["good"] = True
        # A budgeted sweep takes the newest, big (over the cap: its first summary with no mini summary first).
        swept = _run(["sweep", "--limit", "1"], env)
        assert [(r["partition"], r["source_tier"]) for r in swept["runs"]] == [("big", "turnCards")]
        calls = len(server.requests)
        named = _run(["sweep", "--session", "small", "--session", "other"], env)
        assert sorted((r["partition"], r["success"], r.get("source_tier")) for r in named["runs"]) == [
            ("other", True, "raw"), ("small", True, "raw"),
        ]  # fmt: skip
        assert named["summarized"] == 2 and len(server.requests) == calls + 2
        again = _run(["sweep", "--session", "big"], env)
        assert again["summarized"] == 0 and "already summarized" in again["runs"][0]["nothing_to_do"]
        unknown = subprocess.run(
            CLI + ["sweep", "--session", "big", "--session", "no-such-session"], env=env, capture_output=True, text=True
        )
    assert unknown.returncode != 0 and "no such session: no-such-session" in unknown.stderr
    assert len(server.requests) == calls + 2
