"""Runs whose process died are told apart from live ones and closed, on a real Dagster instance."""

from __future__ import annotations

import os
import time

from dagster import DagsterRunStatus, build_sensor_context, instance_for_test

from digest.attempts import in_flight_attempt
from digest.ingest import ingest_paths
from digest.settings import load_settings
from digest.synthesis import summarize_session
from digest.tags import HOST_TAG, PID_STARTED_TAG, PID_TAG
from pipelines.definitions import build_definitions
from pipelines.sensors import interrupted_runs_sensor
from resources.model_clients import OpenAIChatClient
from resources.response_cache import CachedChatClient
from resources.store import RunLedger
from resources.worker import _process_start_ticks, worker_tags
from tests.bundles import write_bundle
from tests.conftest import dead_pid, make_limits, make_turns
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer

POOL = {"concurrency": {"pools": {"default_limit": 1}}}


def _definitions(tmp_path, url="http://127.0.0.1:9"):
    env = {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_MODEL_URL": url}
    return build_definitions(load_settings(env))


def test_a_run_is_tagged_with_the_process_that_runs_it(tmp_path):
    defs = _definitions(tmp_path)
    with instance_for_test() as instance:
        result = defs.resolve_job_def("report_friction").execute_in_process(instance=instance)
        tags = instance.get_run_by_id(result.run_id).tags
    assert result.success
    assert tags[PID_TAG] == str(os.getpid())
    assert tags[PID_STARTED_TAG] == _process_start_ticks(os.getpid())


def test_the_sensor_closes_the_runs_whose_process_died_and_leaves_live_ones(tmp_path):
    defs = _definitions(tmp_path)
    defs.resources["store"].open()  # an empty store
    live = worker_tags()
    recycled = {**live, PID_STARTED_TAG: str(int(live[PID_STARTED_TAG]) + 1)}  # our pid, another process's start
    dead = {HOST_TAG: live[HOST_TAG], PID_TAG: str(dead_pid())}
    with instance_for_test(overrides=POOL) as instance:
        runs = {}
        for name, job, tags in [
            ("live", "summarize_sessions", live),
            ("recycled", "summarize_sessions", recycled),
            ("dead", "digest_sessions", dead),
            ("other host", "digest_sessions", {**dead, HOST_TAG: "elsewhere"}),
        ]:
            runs[name] = instance.create_run_for_job(
                defs.resolve_job_def(job), tags=tags, status=DagsterRunStatus.STARTED
            )
        instance.event_log_storage.initialize_concurrency_limit_to_default("model")
        instance.event_log_storage.claim_concurrency_slot("model", runs["dead"].run_id, "session_graph")
        store = defs.resources["store"].open()
        for session, name in (("a", "live"), ("b", "dead"), ("c", "recycled")):  # held for an hour
            store.summaries.claim_summary_lease(session, runs[name].run_id, int(time.time() * 1000), ttl_s=3600)

        with build_sensor_context(instance=instance, resources=defs.resources) as context:
            tick = interrupted_runs_sensor(context)

        status = {name: instance.get_run_by_id(run.run_id).status for name, run in runs.items()}
        assert status == {
            "live": DagsterRunStatus.STARTED,
            "recycled": DagsterRunStatus.FAILURE,
            "dead": DagsterRunStatus.FAILURE,
            "other host": DagsterRunStatus.STARTED,  # not ours to judge
        }
        assert instance.event_log_storage.get_concurrency_info("model").active_slot_count == 0
        # The dead runs' leases go with them, so their sessions are not held for the rest of the hour.
        assert store.query("SELECT run_id FROM summary_leases")["run_id"].tolist() == [runs["live"].run_id]
        assert "closed 2 run(s)" in tick.skip_message
        with build_sensor_context(instance=instance, resources=defs.resources) as context:
            assert interrupted_runs_sensor(context).skip_message.startswith("no run lost its process")


def test_a_summary_a_killed_run_wrote_is_recorded_when_its_run_is_closed(tmp_path):
    """The run died after DuckDB had its summary and before Dagster heard of it."""
    turns = make_turns("s1", 2, minis=2)
    with ModelServer(lambda r: Behaviour.reply(GOOD_SUMMARY)) as server:
        defs = _definitions(tmp_path, server.url)
        store = defs.resources["store"].open()
        ingest_paths([write_bundle(tmp_path / "bundle", turns)], store)
        with instance_for_test(overrides=POOL) as instance:
            instance.add_dynamic_partitions("sessions", ["s1"])
            job = defs.resolve_job_def("summarize_sessions")
            done = job.execute_in_process(instance=instance, partition_key="s1")
            assert done.success
            # The same summary, as if a run killed before its materialization event had written it.
            killed = instance.create_run_for_job(
                job,
                tags={"dagster/partition": "s1", HOST_TAG: worker_tags()[HOST_TAG], PID_TAG: str(dead_pid())},
                status=DagsterRunStatus.STARTED,
            )
            with store.file.connect() as con:
                con.execute("UPDATE session_summaries SET run_id = ? WHERE session_id = 's1'", [killed.run_id])
            with build_sensor_context(instance=instance, resources=defs.resources) as context:
                interrupted_runs_sensor(context)
            latest = instance.get_latest_materialization_event(defs.resolve_assets_def("session_summaries").key)
            assert "whose process died" in latest.asset_materialization.description
            assert instance.get_run_by_id(killed.run_id).status == DagsterRunStatus.FAILURE


def test_the_model_calls_a_dead_run_left_in_flight_are_closed(tmp_path):
    """Issue 31, defect 6. A run killed during a call left its attempt `in-flight`: closed with the
    run, `interrupted`, with the time from its start, at most its deadline. One killed after its reply
    was staged was answered: `ok`, with the reply's counts and duration, and its rerun's replay is
    `cached`, so the call is in the ledger once. Neither touches the host's circuit."""
    turns = make_turns("answered", 2)
    with ModelServer(lambda r: Behaviour.reply(GOOD_SUMMARY)) as server:
        defs = _definitions(tmp_path, server.url)
        store = defs.resources["store"].open()
        ingest_paths([write_bundle(tmp_path / "bundle", turns + make_turns("hung", 2))], store)
        with instance_for_test(overrides=POOL) as instance:
            dead = instance.create_run_for_job(
                defs.resolve_job_def("summarize_sessions"),
                tags={HOST_TAG: worker_tags()[HOST_TAG], PID_TAG: str(dead_pid())},
                status=DagsterRunStatus.STARTED,
            )
            ledger = RunLedger(store, dead.run_id, host="h1")
            # Killed during a call that had run a minute against a 5 s deadline.
            ledger.start_attempt(in_flight_attempt("hung", "session-summary", "raw", "p", make_limits(), "m", 5.0))
            with store.file.connect() as con:
                con.execute("UPDATE attempts SET created_at = created_at - INTERVAL 60 SECOND")

            class KilledAfterTheReply(RunLedger):
                def record_attempt(self, attempt, started=None):
                    raise KeyboardInterrupt("SIGKILL between the staged reply and the attempt")

            revision = store.sessions.session_by_partition("answered")["input_revision"]
            client = OpenAIChatClient(server.url, "m", schema_style="json_object")
            staging = CachedChatClient(client, store.cache, {"provider": "openai"}, session=("answered", revision))
            try:
                summarize_session(turns, staging, make_limits(), KilledAfterTheReply(store, dead.run_id, host="h1"))
            except KeyboardInterrupt:
                pass
            assert store.query("SELECT outcome FROM attempts")["outcome"].tolist() == ["in-flight", "in-flight"]

            with build_sensor_context(instance=instance, resources=defs.resources) as context:
                interrupted_runs_sensor(context)
            rows = {
                r["session_id"]: r
                for r in store.query(
                    "SELECT session_id, outcome, duration_s, prompt_tokens, completion_tokens, error_text FROM attempts"
                ).to_dict("records")
            }
            assert rows["hung"]["outcome"] == "interrupted" and rows["hung"]["duration_s"] == 5.0
            staged = store.query(
                "SELECT prompt_tokens, duration_s, attempt_recorded IS NULL AS recorded FROM response_cache"
            ).iloc[0]
            assert rows["answered"]["outcome"] == "ok" and rows["answered"]["duration_s"] == staged["duration_s"]
            assert rows["answered"]["prompt_tokens"] == staged["prompt_tokens"] > 0
            assert staged["recorded"]  # its call is in the ledger: a replay of it is no call

            # The rerun finishes from the staged reply: a replay, not a second call.
            again = summarize_session(turns, staging, make_limits(), RunLedger(store, "rerun", host="h1"))
            assert again.summary is not None and len(server.chat_requests()) == 1
    ledger_rows = store.query("SELECT cached FROM attempts WHERE session_id = 'answered' ORDER BY attempt_id")
    assert ledger_rows["cached"].tolist() == [False, True]
    assert store.query("SELECT count(*) AS n FROM host_circuits WHERE failures > 0")["n"][0] == 0
