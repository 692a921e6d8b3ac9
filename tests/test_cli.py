"""The front door, as a user runs it: `session-digest` in a subprocess, runs recorded in DAGSTER_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dagster import DagsterInstance

from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.model_server import Behaviour, ModelServer

CLI = [sys.executable, "-m", "pipelines.cli"]


def _run(args, env) -> dict:
    done = subprocess.run(CLI + args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


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
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DIGEST_", "DAGSTER_"))},
            "DIGEST_HOME": str(home),
            "DIGEST_MODEL_PROVIDER": "openai",
            "DIGEST_MODEL_URL": server.url,
            "DIGEST_RAW_CAP_TOKENS": "2000",
        }
        ingested = _run(["ingest", str(folder)], env)
        assert ingested["turns"] == 43 and ingested["rejects"] == 2 and ingested["new_partitions"] == 2
        swept = _run(["sweep", "--limit", "1"], env)
        assert swept["pending"] == 2 and swept["summarized"] == 1
        swept = _run(["sweep"], env)
        assert swept["pending"] == 1 and swept["summarized"] == 1
        status = _run(["status"], env)
        plan = _run(["plan"], env)
        digested = _run(["digest", "--limit", "1"], env)
        report = _run(["friction-report"], env)
    assert status["sessions"] == 2 and status["summaries"] == 2 and status["pending_summaries"] == 0
    assert status["summaries_by_source_tier"] == {"miniSummary": 1, "raw": 1}
    assert status["rejects"] == 2
    assert status["friction_by_symptom"] == {"size-precheck-skip": 1}
    # The CLI's runs live in the instance under DIGEST_HOME/dagster, which `session-digest ui` serves.
    instance = DagsterInstance.from_config(str(Path(home) / "dagster"))
    try:
        jobs = sorted(run.job_name for run in instance.get_runs())
    finally:
        instance.dispose()
    assert jobs == ["digest_sessions", "ingest", "report_friction", "summarize_sessions", "summarize_sessions"]
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
