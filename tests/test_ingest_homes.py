"""The harness homes, as a user meets them: `session-digest ingest DIR` and `ingest` with no path
in a subprocess over nested Claude Code and Codex layouts, and the inbox sensor watching them
(`DIGEST_WATCH`) in a real Dagster instance, picking up a new file and an appended turn."""

from __future__ import annotations

import os
import subprocess
import time

from digest.walk import SUBAGENT_META, SYMLINK_OUT
from pipelines.definitions import build_definitions
from pipelines.sensors import inbox_sensor
from resources.store import DigestStore
from tests.harness_homes import claude_home, claude_turn, codex_home, write_lines
from tests.test_cli import CLI, _cli_env, _run
from tests.test_ingest import rows
from tests.test_sensors import _resources, _settings, _tick, instance  # noqa: F401 (fixture)
from tests.test_sensors_inbox import _launch


def _stored(home) -> list[str]:
    store = DigestStore(home / "digest.duckdb")
    return sorted(r["id"] for r in rows(store, "SELECT id FROM turns"))


def test_ingest_dir_walks_both_homes_and_reports_what_it_skipped(tmp_path):
    claude_home(tmp_path)
    codex_home(tmp_path)
    outside = write_lines(tmp_path / "elsewhere" / "x.jsonl", claude_turn("outside", 1))
    (tmp_path / ".claude" / "projects" / "link.jsonl").symlink_to(outside)
    env = _cli_env(tmp_path / "digest", "http://127.0.0.1:9")
    result = _run(["ingest", str(tmp_path / ".claude" / "projects"), str(tmp_path / ".codex" / "sessions")], env)
    assert result["files"] == 5 and result["turns"] == 4 + 3
    assert result["skipped"] == {SUBAGENT_META: 1, SYMLINK_OUT: 1}
    assert not any(i.startswith("outside") for i in _stored(tmp_path / "digest"))
    # Again: nothing changed, nothing read.
    again = _run(["ingest", str(tmp_path / ".claude" / "projects"), str(tmp_path / ".codex" / "sessions")], env)
    assert again["files"] == 0 and again["files_unchanged"] == 5


def test_ingest_with_no_path_reads_the_harness_homes_that_exist_and_says_so(tmp_path):
    env = {**_cli_env(tmp_path / "digest", "http://127.0.0.1:9"), "HOME": str(tmp_path)}
    env.pop("CLAUDE_CONFIG_DIR", None), env.pop("CODEX_HOME", None)
    # None exists: a clear message, not a silent 0.
    done = subprocess.run(CLI + ["ingest"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and ".claude/projects" in done.stderr and "DIGEST_WATCH" in done.stderr
    codex_home(tmp_path)
    result = _run(["ingest"], env)
    assert result["read_from"].startswith("the harness homes") and ".codex/sessions" in result["read_from"]
    assert ".claude" not in result["read_from"] and result["turns"] == 3
    # DIGEST_WATCH names the folders instead.
    claude_home(tmp_path / "other")
    watched = {**env, "DIGEST_WATCH": f"~/other/.claude/projects{os.pathsep}$HOME/nowhere"}
    result = _run(["ingest"], watched)
    assert result["read_from"] == f"DIGEST_WATCH: {tmp_path / 'other' / '.claude' / 'projects'}"
    assert result["files"] == 3


def _settle(*paths) -> None:
    settled = time.time() - 60
    for path in paths:
        os.utime(path, (settled, settled))


def test_the_sensor_watches_the_homes_and_picks_up_a_new_file_and_an_appended_turn(tmp_path, instance):  # noqa: F811
    homes = tmp_path / "user"
    claude = claude_home(homes)
    settings = _settings(tmp_path, DIGEST_WATCH=f"{homes / '.claude' / 'projects'}{os.pathsep}{homes / '.codex'}")
    resources, definitions = _resources(settings), build_definitions(settings)
    _settle(*claude.values())
    first = _tick(instance, resources, inbox_sensor)
    (request,) = first.run_requests
    assert sorted(request.run_config["ops"]["raw_turns"]["config"]["paths"]) == sorted(
        str(claude[k]) for k in ("main", "subagent", "flat")
    )
    assert _launch(instance, definitions, request).success
    done = _tick(instance, resources, inbox_sensor, cursor=first.cursor)
    assert done.run_requests == [] and "no new or grown files" in done.skip_reason.skip_message
    # A Codex home appears with a rollout, and the session grows by a turn.
    codex = codex_home(homes)
    write_lines(claude["main"], claude_turn("5f1c2d3e-0000-4000-8000-000000000001", 9), mode="a")
    _settle(claude["main"], *codex.values())
    grown = _tick(instance, resources, inbox_sensor, cursor=done.cursor)
    (request,) = grown.run_requests
    assert sorted(request.run_config["ops"]["raw_turns"]["config"]["paths"]) == sorted(
        [str(claude["main"]), *map(str, codex.values())]
    )
    result = _launch(instance, definitions, request)
    assert result.success
    (materialization,) = result.asset_materializations_for_node("raw_turns")
    preview = materialization.metadata["files_preview"].value
    assert "| appended from line " in preview and preview.count("| new |") == 2
    assert "5f1c2d3e-0000-4000-8000-000000000001-00009-p" in _stored(settings.home)
    assert materialization.metadata["skipped"].value == {}  # the sensor names the files: nothing passed over
    # A run launched with no paths (the UI's Materialize): the inbox (not there) and the watched folders.
    unnamed = definitions.resolve_job_def("ingest").execute_in_process(instance=instance, raise_on_error=False)
    assert unnamed.success
    (materialization,) = unnamed.asset_materializations_for_node("raw_turns")
    assert materialization.metadata["files_unchanged"].value == 5
    assert materialization.metadata["skipped"].value == {SUBAGENT_META: 1}
