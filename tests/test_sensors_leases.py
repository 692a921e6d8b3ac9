"""Runs that overlap: in-flight sessions not requested again, leases that stop a second run and expire,
reruns that recheck under the lease, and two processes writing one DuckDB file. A real Dagster instance
over real DuckDB."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

from dagster import AssetRecordsFilter, DagsterRunStatus

import tests.test_sensors
from pipelines.definitions import build_definitions
from pipelines.sensors import register_partitions
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.model_server import Behaviour, ModelServer
from tests.test_sensors import HOUR_MS, _ingested, _requested, _resources, _seed_sessions, _settings, _tick

instance = tests.test_sensors.instance  # the fixture of tests/test_sensors.py: pytest finds it here by this name


def test_in_flight_sessions_are_not_requested_again_and_a_rerun_after_restore_is(tmp_path, instance):
    settings = _settings(tmp_path)
    store = DigestStore(settings.db_path)
    store.migrate()
    _seed_sessions(store, 2, int(time.time() * 1000) - 2 * HOUR_MS)
    resources = _resources(settings)
    register_partitions(instance, store)
    job = build_definitions(settings).resolve_job_def("summarize_sessions")
    run = instance.create_run_for_job(job, tags={"dagster/partition": "s000000"}, status=DagsterRunStatus.NOT_STARTED)
    assert _requested(_tick(instance, resources)) == ["s000001"]
    instance.report_run_canceled(run)
    # The run ended without a summary (or a restore rolled the store back): asked for again.
    assert "s000000" in _requested(_tick(instance, resources))


def test_leases_stop_a_second_run_and_an_expired_one_is_reclaimed(tmp_path, instance):
    store = DigestStore(tmp_path / "d.duckdb")
    store.migrate()
    now = int(time.time() * 1000)
    assert store.summaries.claim_summary_lease("s", "run-a", now, ttl_s=60) is None
    assert store.summaries.claim_summary_lease("s", "run-b", now + 1000, ttl_s=60) == "run-a"
    assert store.summaries.claim_summary_lease("s", "run-b", now + 61_000, ttl_s=60) is None  # run-a crashed
    store.summaries.release_summary_lease("s", "run-a")  # a late release by the old holder changes nothing
    assert store.summaries.claim_summary_lease("s", "run-c", now + 62_000, ttl_s=60) == "run-b"
    store.summaries.release_summary_lease("s", "run-b")
    assert store.summaries.claim_summary_lease("s", "run-c", now + 63_000, ttl_s=60) is None
    # A killed run's lease on a session nobody claims again does not stay: any claim drops it.
    assert store.summaries.claim_summary_lease("t", "run-d", now + 64_000, ttl_s=1) is None
    store.summaries.claim_summary_lease("u", "run-e", now + 66_000, ttl_s=60)
    assert store.query("SELECT session_id FROM summary_leases ORDER BY 1")["session_id"].tolist() == ["s", "u"]


def test_a_leased_session_is_not_summarized_twice(tmp_path, instance):
    settings = _settings(tmp_path)
    folder = write_bundle(tmp_path / "bundle", make_turns("busy", 2))
    with ModelServer() as server:
        definitions, store = _ingested(settings, server.url, folder, instance)
        store.summaries.claim_summary_lease("busy", "other-run", int(time.time() * 1000), ttl_s=600)
        result = definitions.resolve_job_def("summarize_sessions").execute_in_process(
            instance=instance, partition_key="busy", raise_on_error=False
        )
        # A sweep's run leaves it to the holder: a concurrent sweep's run is on it.
        swept = definitions.resolve_job_def("summarize_sessions").execute_in_process(
            instance=instance, partition_key="busy", tags={"digest/sweep": "cli"}, raise_on_error=False
        )
    assert not result.success
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "being summarized by run other-run" in failure.event_specific_data.error.message
    assert swept.success and swept.asset_materializations_for_node("session_summaries") == []
    (observation,) = swept.asset_observations_for_node("session_summaries")
    assert "being summarized by run other-run" in observation.metadata["reason"].value
    assert not any("AI-agent work session" in r.prompt for r in server.chat_requests())
    assert store.query("SELECT run_id FROM summary_leases")["run_id"].tolist() == ["other-run"]


def test_a_swept_run_rechecks_under_the_lease_what_other_runs_did_meanwhile(tmp_path, instance):
    """A sweep queued the session, and by the time its run holds the lease another run has summarized
    it, failed it into backoff, or an archive retired it: no model call, nothing materialized, an
    observation says why. A run asked for by hand (after a prompt change, say) summarizes it again."""
    settings = _settings(tmp_path, DIGEST_RESPONSE_CACHE="off")  # every summary is a model call
    flaky = [dataclasses.replace(t, document=t.document + " flaky") for t in make_turns("flaky", 2)]
    folder = write_bundle(tmp_path / "bundle", make_turns("done", 2) + flaky)
    swept = {"digest/sweep": "cli", "digest/route": "raw"}

    def script(received):
        # The session's own failure (a reply that does not parse): a host's failure would not back it off.
        return Behaviour.text("no json here") if "flaky" in received.prompt else Behaviour.reply()

    with ModelServer(script) as server:
        definitions, store = _ingested(settings, server.url, folder, instance)
        job = definitions.resolve_job_def("summarize_sessions")
        key = definitions.resolve_assets_def("session_summaries").key

        def run(partition, tags):
            calls = len(server.chat_requests())
            result = job.execute_in_process(instance=instance, partition_key=partition, tags=tags, raise_on_error=False)
            observed = [e.metadata["reason"].value for e in result.asset_observations_for_node("session_summaries")]
            return result, len(server.chat_requests()) - calls, observed

        def materializations(partition):
            return len(
                instance.fetch_materializations(
                    AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=10
                ).records
            )

        first, calls, _ = run("done", swept)
        assert first.success and calls == 1 and materializations("done") == 1
        again, calls, (reason,) = run("done", swept)  # a second sweep had queued it too
        assert again.success and calls == 0 and materializations("done") == 1
        assert reason.startswith("already summarized at its current turns") and first.run_id in reason
        assert store.reports.summary_rows()[0]["run_id"] == first.run_id
        by_hand, calls, _ = run("done", {})
        assert by_hand.success and calls == 1 and materializations("done") == 2

        failed, calls, _ = run("flaky", swept)
        assert not failed.success and calls == 1
        backing_off, calls, (reason,) = run("flaky", swept)
        assert backing_off.success and calls == 0 and "in failure backoff" in reason
        assert not run("flaky", {})[0].success  # by hand: tried again, as a rerun from the UI is
        assert run("flaky", {**swept, "digest/route": "staged"})[1] == 1  # a staged route finishes whatever the backoff

        store.archive.write_archive(tmp_path / "archives", ["done"], retire=True)
        retired, calls, (reason,) = run("done", {})
        assert retired.success and calls == 0 and reason.startswith("the session is retired")
    assert store.query("SELECT count(*) AS n FROM summary_leases")["n"][0] == 0


WRITER = """
import sys
from digest.attempts import Attempt
from resources.store import DigestStore
store = DigestStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    store.attempts.record_attempt(Attempt(sys.argv[2], "session-summary", "raw", 10, 4, "ok", 0.1, "m"))
"""


def test_two_processes_writing_one_duckdb_file_both_succeed(tmp_path):
    path = tmp_path / "shared.duckdb"
    DigestStore(path).migrate()
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, "150"], stderr=subprocess.PIPE, text=True)
        for name in ("writer-a", "writer-b")
    ]
    for writer in writers:
        assert writer.wait(timeout=240) == 0, writer.stderr.read()
    counts = DigestStore(path).query("SELECT session_id, count(*) AS n FROM attempts GROUP BY 1 ORDER BY 1")
    assert counts.to_dict("records") == [{"session_id": "writer-a", "n": 150}, {"session_id": "writer-b", "n": 150}]
