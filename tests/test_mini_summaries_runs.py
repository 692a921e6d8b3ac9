"""Runs of mini summaries: the budget that stops one, the batch order, the pending sessions' priority and
backoff, the settings, and a run through Dagster. Real HTTP to tests/model_server.py, a real DuckDB file."""

from __future__ import annotations

import dataclasses

import pytest
from dagster import instance_for_test

from digest.mini_summaries import MiniSummaryPolicy, PendingTurn, batch_order
from digest.settings import SettingsError, load_settings
from pipelines.definitions import build_definitions
from resources.store import DigestStore
from tests.conftest import make_limits
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer
from tests.test_mini_summaries import T0, _add, _fill, _policy, _rows, _session

# --- budget, order, priority, backoff -----------------------------------------------------------


def test_the_budget_stops_the_run(store):
    _add(store, _session("s1", 6))
    slow = Behaviour(content="A line.", delay_s=1.0)
    with ModelServer(lambda received: slow) as server:
        report = _fill(store, "s1", server.url, _policy(budget_s=1.9))
    # 1 s a call against a 1.9 s budget (wide margins on a loaded machine): a second turn is
    # started, a third is not.
    assert report.attempted == 2 and len(server.chat_requests()) == 2
    assert report.budget_exhausted and report.left_for_later == 4
    assert report.model_seconds >= 1.9
    assert len(store.mini_summaries.pending_mini_summary_turns("s1")) == 4


def test_the_batch_takes_a_fresh_reserve_of_the_newest_then_the_oldest(store):
    _add(store, _session("s1", 6))
    with ModelServer(lambda received: Behaviour.text("A line.")) as server:
        _fill(store, "s1", server.url, _policy(fresh_reserve=2))
    order = [r.prompt.split("User: Prompt ")[1].split(":")[0] for r in server.chat_requests()]
    assert order == ["5", "4", "0", "1", "2", "3"]


def test_batch_order_with_no_reserve_or_a_reserve_larger_than_the_batch():
    turns = [PendingTurn(f"t{i}", "s", T0 + i, "p", "r", "d") for i in range(4)]
    assert [t.id for t in batch_order(turns, 0)] == ["t0", "t1", "t2", "t3"]
    assert [t.id for t in batch_order(turns, 10)] == ["t3", "t2", "t1", "t0"]


def test_pending_sessions_come_degraded_first_by_default_and_respect_the_backoff(store):
    big_old = _session("big-old", 30, response_bytes=900)  # over the 2000-token cap
    small_new = [dict(r, ts_ms=r["ts_ms"] + 10**9) for r in _session("small-new", 2)]
    _add(store, big_old + small_new)
    limits, now = make_limits(raw_cap_tokens=2000), T0 + 2 * 10**9
    assert store.mini_summaries.pending_mini_summary_keys(limits, "degraded-first", now) == ["big-old", "small-new"]
    assert store.mini_summaries.pending_mini_summary_keys(limits, "newest-first", now) == ["small-new", "big-old"]
    assert store.mini_summaries.pending_mini_summary_keys(limits, "degraded-first", now, limit=1) == ["big-old"]
    # A run that made no progress backs its session off for ten minutes.
    store.mini_summaries.record_backfill_run(
        "big-old", attempted=3, generated=0, backoff_until_ms=now + 600_000, run_id="r1"
    )
    assert store.mini_summaries.pending_mini_summary_keys(limits, "degraded-first", now) == ["small-new"]
    assert store.mini_summaries.pending_mini_summary_keys(limits, "degraded-first", now + 600_000) == [
        "big-old",
        "small-new",
    ]


def test_mini_summary_settings_and_their_validation():
    policy = load_settings({}).mini_summaries
    assert policy == MiniSummaryPolicy(600.0, 20.0, 30.0, 5, 10, "degraded-first")
    env = {
        "DIGEST_MINI_SUMMARY_BUDGET_S": "120",
        "DIGEST_MINI_SUMMARY_TIMEOUT_S": "10",
        "DIGEST_MINI_SUMMARY_OUTER_TIMEOUT_S": "15",
        "DIGEST_MINI_SUMMARY_MAX_ATTEMPTS": "3",
        "DIGEST_MINI_SUMMARY_FRESH_RESERVE": "0",
        "DIGEST_MINI_SUMMARY_PRIORITY": "newest-first",
    }
    assert load_settings(env).mini_summaries == MiniSummaryPolicy(120.0, 10.0, 15.0, 3, 0, "newest-first")
    with pytest.raises(SettingsError, match="DIGEST_MINI_SUMMARY_OUTER_TIMEOUT_S"):
        load_settings({"DIGEST_MINI_SUMMARY_OUTER_TIMEOUT_S": "5"})
    with pytest.raises(SettingsError, match="DIGEST_MINI_SUMMARY_PRIORITY"):
        load_settings({"DIGEST_MINI_SUMMARY_PRIORITY": "random"})


# --- through Dagster ----------------------------------------------------------------------------


def test_a_truncated_raw_session_becomes_mini_summary_once_its_turns_are_filled(tmp_path):
    settings = load_settings(
        {
            "DIGEST_HOME": str(tmp_path / "home"),
            "DIGEST_MODEL_PROVIDER": "openai",
            "DIGEST_CONTEXT_LIMIT_TOKENS": "8192",
            "DIGEST_RAW_CAP_TOKENS": "2000",
        }
    )
    store = DigestStore(settings.db_path)
    store.migrate()
    _add(store, _session("big", 30, response_bytes=900))  # ~30 KB: over the cap, no mini summaries
    mini_summaries_work = {"on": False}

    def script(received):
        if "response_format" in received.body:  # the session summary
            return Behaviour.reply(GOOD_SUMMARY)
        return (
            Behaviour.text("Kept the grid selection on record ids.")
            if mini_summaries_work["on"]
            # A refusal of the request (4xx), not of the host: a 5xx would open the host's circuit
            # and hand the session back before its summary (issue 22, defect 2).
            else Behaviour(status=400, error_body={"error": {"message": "refused"}})
        )

    with instance_for_test() as instance, ModelServer(script) as server:
        instance.add_dynamic_partitions("sessions", ["big"])
        job = build_definitions(dataclasses.replace(settings, model_url=server.url)).resolve_job_def(
            "summarize_sessions"
        )

        def run(**config):
            run_config = {"ops": {"turn_mini_summaries": {"config": config}}} if config else None
            result = job.execute_in_process(instance=instance, partition_key="big", run_config=run_config)
            assert result.success
            return {
                node: result.asset_materializations_for_node(node)[0].metadata
                for node in ("turn_mini_summaries", "session_summaries")
            }

        first = run()  # the model refuses mini summaries: the summary falls to truncated raw snippets
        mini_summaries_work["on"] = True
        held = run()  # the session made no progress last time: it is in backoff, nothing is attempted
        filled = run(ignore_backoff=True)

    assert first["turn_mini_summaries"]["attempted"].value == 30
    assert first["turn_mini_summaries"]["causes"].value["provider-error"] == 30
    assert first["turn_mini_summaries"]["backoff_until"].value != "none"
    assert first["session_summaries"]["source_tier"].value == "turnCards"
    assert first["session_summaries"]["mini_summary_coverage"].value == 0.0

    assert held["turn_mini_summaries"]["attempted"].value == 0
    assert held["session_summaries"]["source_tier"].value == "turnCards"

    assert filled["turn_mini_summaries"]["generated"].value == 30
    assert filled["turn_mini_summaries"]["mini_summary_coverage"].value == 1.0
    assert filled["turn_mini_summaries"]["backoff_until"].value == "none"
    assert "Kept the grid selection" in filled["turn_mini_summaries"]["preview"].value
    summary = filled["session_summaries"]
    assert (summary["source_tier"].value, summary["degraded"].value) == ("miniSummary", True)
    assert summary["mini_summary_coverage"].value == 1.0
    assert _rows(store, "SELECT source_tier, mini_summary_count FROM session_summaries") == [
        {"source_tier": "miniSummary", "mini_summary_count": 30}
    ]
