"""Issue 28, item 4: every session gets a summary early, a better one later. An over-cap session's
first summary does not wait for its mini summaries; a sweep makes it again only when its coverage
crosses a step; new sessions go first. Real Dagster sensors and runs, real DuckDB, the local model
test server."""

from __future__ import annotations

import dataclasses

import pytest
from dagster import AssetKey, instance_for_test

from digest.ingest import ingest_paths
from digest.resummary import ResummaryCriteria
from digest.scheduling import COMPLETE_STEP, now_ms, upgrade_due
from digest.settings import load_settings
from digest.tags import UPGRADE_TAG
from pipelines.definitions import build_definitions
from pipelines.jobs import default_run_config, requested_job
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.model_server import FAITHFUL_SUMMARY, TEMPLATE_SUMMARY, Behaviour, ModelServer

SUMMARIES = AssetKey("session_summaries")

TURNS = 40  # of 400 bytes: about 5,500 tokens raw, over the 2,000 cap


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


class Backlog:
    """A store, a model server counting summary and mini-summary calls, and the sensors' ticks with
    their runs executed as the daemon would run them."""

    def __init__(self, tmp_path, instance, server):
        self.settings = load_settings(
            {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_RAW_CAP_TOKENS": "2000"}
        )
        self.settings = dataclasses.replace(self.settings, model_url=server.url)
        self.store = DigestStore(self.settings.db_path)
        self.store.migrate()
        self.definitions = build_definitions(self.settings)
        self.instance, self.tmp_path = instance, tmp_path

    def ingest(self, name: str, turns) -> None:
        ingest_paths([write_bundle(self.tmp_path / name, turns)], self.store)

    def tick(self, sensor: str = "summary_sensor"):
        from dagster import build_sensor_context

        with build_sensor_context(
            instance_ref=self.instance.get_ref(), definitions=self.definitions, resources=self.definitions.resources
        ) as context:
            data = self.definitions.resolve_sensor_def(sensor).evaluate_tick(context)
        for request in data.dynamic_partitions_requests:
            self.instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
        return data

    def sweep(self) -> dict[str, dict]:
        """One summary sensor tick, its runs executed: by partition, the request's tags and its
        summary's materialization metadata."""
        job = self.definitions.resolve_job_def("summarize_sessions")
        requested = {}
        for request in self.tick().run_requests:
            run = requested_job(job, request)
            key = request.partition_key
            result = run.execute_in_process(
                default_run_config(run, key), instance=self.instance, partition_key=key, tags=request.tags
            )
            assert result.success
            # The step also records a raw session's mini-summary partition (none needed): the summary's own.
            [materialization] = [
                e for e in result.asset_materializations_for_node("session_summaries") if e.asset_key == SUMMARIES
            ]
            requested[key] = {
                "tags": request.tags,
                "metadata": {k: v.value for k, v in materialization.metadata.items()},
            }
        return requested

    def add_mini_summaries(self, session_id: str, indices: range) -> None:
        for i in indices:
            self.store.mini_summaries.save_generated_mini_summary(
                f"{session_id}-t{i:03d}", session_id, f"Turn {i}: moved the grid row.", "m"
            )

    def row(self, session_id: str) -> dict:
        return self.store.summaries.summary_row(session_id)


def test_the_coverage_steps_are_half_then_none_left(tmp_path):
    """The step as the store computes it (`COVERAGE_STEP_SQL`, the one place the rule is written,
    over `digest.scheduling`'s constants), at its boundaries, in a real DuckDB file."""
    minis = {"n0": 0, "n19": 19, "n20": 20, "n39": 39, "n40": 40, "archived": 3, "unarchived": 3}
    store = DigestStore(tmp_path / "digest.duckdb")
    store.migrate()
    turns = [t for sid, n in minis.items() for t in make_turns(sid, 40, doc_bytes=100, minis=n)]
    ingest_paths([write_bundle(tmp_path / "bundle", turns)], store)
    for sid in ("archived", "unarchived"):
        for i in range(3, 40):
            store.mini_summaries.archive_turn(f"{sid}-t{i:03d}", sid, "generation-timeout")
    store.mini_summaries.unarchive_turns(session_id="unarchived")
    steps = store.summaries.coverage_steps(list(minis))
    # Half of 40 is the first step; none left for the backfill is the last, however few have one
    # (the rest archived); un-archived turns are left for it again.
    assert steps == dict(n0=0, n19=0, n20=1, n39=1, n40=COMPLETE_STEP, archived=COMPLETE_STEP, unarchived=0)
    assert all((steps[s] == COMPLETE_STEP) == (not store.mini_summaries.pending_mini_summary_turns(s)) for s in minis)
    assert upgrade_due(0, 1) and upgrade_due(1, COMPLETE_STEP) and not upgrade_due(1, 1)
    assert not upgrade_due(None, COMPLETE_STEP)  # raw or imported: never made again for coverage


def _server():
    calls = {"summary": 0, "mini-summary": 0}

    def script(received):
        kind = "summary" if "response_format" in received.body else "mini-summary"
        calls[kind] += 1
        return Behaviour.reply() if kind == "summary" else Behaviour.mini(received)

    return ModelServer(script), calls


def test_an_over_cap_session_is_summarized_at_once_then_again_only_at_each_coverage_step(tmp_path, instance):
    server, calls = _server()
    with server:
        backlog = Backlog(tmp_path, instance, server)
        backlog.ingest("big", make_turns("big", TURNS, doc_bytes=400))

        # Its first summary, before any mini summary: from truncated raw lines, and saying so.
        first = backlog.sweep()
        assert list(first) == ["big"] and UPGRADE_TAG not in first["big"]["tags"]
        row = backlog.row("big")
        assert calls == {"summary": 1, "mini-summary": 0}
        assert (row["source_tier"], row["degraded"], row["route_reason"]) == ("turnCards", True, "over-raw-cap")
        assert (row["mini_summary_count"], row["mini_summary_coverage"], row["coverage_step"]) == (0, 0.0, 0)
        shown = first["big"]["metadata"]
        assert (shown["source_tier"], shown["mini_summary_coverage"], shown["coverage_step"]) == (
            "turnCards",
            0.0,
            0,
        )

        # Just under half: no new summary, however many sweeps.
        backlog.add_mini_summaries("big", range(19))
        assert backlog.sweep() == {} and backlog.sweep() == {}
        assert calls["summary"] == 1 and backlog.row("big")["coverage_step"] == 0

        # Half: made again once, from 20 mini summaries and 20 truncated lines.
        backlog.add_mini_summaries("big", range(19, 20))
        upgrade = backlog.sweep()
        assert list(upgrade) == ["big"] and upgrade["big"]["tags"][UPGRADE_TAG] == "0"
        assert upgrade["big"]["metadata"]["mini_summary_coverage"] == 0.5
        row = backlog.row("big")
        assert calls["summary"] == 2
        assert (row["source_tier"], row["mini_summary_count"], row["mini_summary_coverage"], row["coverage_step"]) == (
            "miniSummary", 20, 0.5, 1,
        )  # fmt: skip
        assert backlog.sweep() == {}

        # All but one turn: still step 1. The last one archived (the backfill gave up on it): none is
        # left to make, the last step.
        backlog.add_mini_summaries("big", range(20, TURNS - 1))
        assert backlog.sweep() == {} and calls["summary"] == 2
        backlog.store.mini_summaries.archive_turn(f"big-t{TURNS - 1:03d}", "big", "generation-timeout")
        upgrade = backlog.sweep()
        assert upgrade["big"]["tags"][UPGRADE_TAG] == "1"
        row = backlog.row("big")
        assert calls == {"summary": 3, "mini-summary": 0}
        assert (row["mini_summary_count"], row["mini_summary_coverage"], row["coverage_step"]) == (39, 39 / 40, 2)
        assert backlog.sweep() == {} and calls["summary"] == 3


def test_first_summaries_go_before_mini_summaries_and_upgrades(tmp_path, instance):
    server, calls = _server()
    with server:
        backlog = Backlog(tmp_path, instance, server)
        backlog.ingest("big", make_turns("big", TURNS, doc_bytes=400))
        # While a session waits for its first summary, the backfill holds no model time.
        assert "1 session(s) wait for a summary" in backlog.tick("mini_summary_sensor").skip_message
        assert list(backlog.sweep()) == ["big"]
        (fill,) = backlog.tick("mini_summary_sensor").run_requests
        assert fill.partition_key == "big"

        # Its upgrade is due; a new session (another over the cap, one within) comes in: theirs first.
        backlog.add_mini_summaries("big", range(TURNS // 2))
        backlog.ingest("new", make_turns("new", TURNS, doc_bytes=400, minis=1) + make_turns("small", 3))
        assert "2 session(s) wait for a summary" in backlog.tick("mini_summary_sensor").skip_message
        first = backlog.sweep()
        assert sorted(first) == ["new", "small"] and not any(UPGRADE_TAG in r["tags"] for r in first.values())
        assert backlog.row("big")["coverage_step"] == 0  # not yet
        upgrade = backlog.sweep()
        assert list(upgrade) == ["big"] and upgrade["big"]["tags"][UPGRADE_TAG] == "0"
    # One mini summary makes a `miniSummary` tier: its coverage says how little of the input it was.
    new = backlog.row("new")
    assert (new["source_tier"], new["mini_summary_coverage"], new["coverage_step"]) == ("miniSummary", 1 / TURNS, 0)
    # Raw summaries carry no coverage: mini summaries make no difference to them.
    small = backlog.row("small")
    assert (small["source_tier"], small["mini_summary_coverage"], small["coverage_step"]) == ("raw", None, None)
    assert calls == {"summary": 4, "mini-summary": 0}


def test_an_upgrade_judged_junk_keeps_the_ok_summary_and_is_not_tried_again_at_its_step(tmp_path, instance):
    # The first summary is ok; the upgrade at half coverage answers template junk, which must not
    # replace it, and must not leave the upgrade due: the sweeps would ask for it again forever.
    replies = iter([FAITHFUL_SUMMARY])
    calls = {"summary": 0}

    def script(received):
        if "response_format" not in received.body:
            return Behaviour.mini(received)
        calls["summary"] += 1
        return Behaviour.reply(next(replies, TEMPLATE_SUMMARY))

    with ModelServer(script) as server:
        backlog = Backlog(tmp_path, instance, server)
        backlog.ingest("big", make_turns("big", TURNS, doc_bytes=400))
        backlog.sweep()
        first = backlog.row("big")
        assert (first["verdict"], first["coverage_step"], calls["summary"]) == ("ok", 0, 1)

        backlog.add_mini_summaries("big", range(20))
        job = backlog.definitions.resolve_job_def("summarize_sessions")
        [request] = backlog.tick().run_requests
        assert request.tags[UPGRADE_TAG] == "0"
        run = requested_job(job, request)
        config = default_run_config(run, request.partition_key)
        assert run.execute_in_process(
            config, instance=instance, partition_key=request.partition_key, tags=request.tags
        ).success
        kept = backlog.row("big")
        assert calls["summary"] == 2
        assert (kept["title"], kept["verdict"], kept["run_id"]) == (first["title"], "ok", first["run_id"])
        assert kept["coverage_step"] == 1  # the step its upgrade was tried at
        assert backlog.tick().run_requests == [] and calls["summary"] == 2


def test_the_summary_sensor_says_which_upgrades_and_resummaries_wait_behind_the_gates(tmp_path, instance):
    """Issue 36: with no first summary owed, a tick that launches nothing names the upgrades and
    re-summaries the idle window or a failure backoff holds back, not "no session needs a summary"."""
    server, _ = _server()
    with server:
        backlog = Backlog(tmp_path, instance, server)
        backlog.ingest("big", make_turns("big", TURNS, doc_bytes=400))
        backlog.ingest("other", make_turns("other", 2))
        assert sorted(backlog.sweep()) == ["big", "other"]
        backlog.add_mini_summaries("big", range(TURNS))  # every turn: its upgrade is due
        backlog.store.resummaries.record_requests(ResummaryCriteria(model="x"), ["other"])
        with backlog.store.file.connect() as con:  # big active again, other failed at its turns
            con.execute("UPDATE sessions SET last_activity_ms = ? WHERE session_id = 'big'", [now_ms()])
        revision = backlog.store.sessions.session_by_partition("other")["input_revision"]
        backlog.store.summaries.record_summary_failure("other", revision, "timeout", now_ms(), lambda n: 3600)
        data = backlog.tick()
    assert data.run_requests == []
    assert data.skip_message == (
        "no session needs a first summary; waiting behind the gates: "
        "1 re-summaries (0 active within the idle window, 1 in failure backoff); "
        "1 upgrades (1 active within the idle window, 0 in failure backoff)"
    )
