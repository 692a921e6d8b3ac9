"""A real user's export at scale, the way the daemon takes it: the `ingest` job (as the inbox
sensor's run executes it, registering every session as a partition), then a summary-sensor tick on
a real instance. 3,000 sessions of 3
turns, all idle for days, 1,000 of them with a current summary in `summaries-backup`."""

from __future__ import annotations

import dataclasses

from dagster import AssetKey, build_sensor_context, instance_for_test

from assets.partitions import sessions_partitions
from digest.settings import load_settings
from pipelines.definitions import build_definitions
from pipelines.sensors import summary_sensor
from resources.store import DigestStore
from tests.synthetic_export import write_export

SESSIONS = 3_000


def test_a_3000_session_export_registers_queues_only_what_is_owed_and_launches_from_the_first_tick(tmp_path):
    facts = write_export(tmp_path / "export", SESSIONS, turns_per_session=3, summarized_share=1 / 3)
    settings = load_settings({"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai"})
    defs = build_definitions(dataclasses.replace(settings, model_url="http://127.0.0.1:9"))
    with instance_for_test() as instance:
        ingest = defs.resolve_job_def("ingest")
        config = {"ops": {"raw_turns": {"config": {"paths": [str(facts.folder)]}}}}
        assert ingest.execute_in_process(run_config=config, instance=instance).success

        store = DigestStore(settings.db_path)
        status = store.reports.status()
        assert status["sessions"] == SESSIONS and status["turns"] == facts.turns
        # Every exported summary is current (its dreamInputRevision is the original's): no model call owed.
        assert status["pending_summaries"] == SESSIONS - len(facts.summarized)
        imported = store.query("SELECT session_id FROM session_summaries WHERE origin = 'imported'")
        assert sorted(imported["session_id"]) == sorted(facts.summarized)

        # The ingest run registered every session itself; the imported summaries show as materialized.
        assert len(instance.get_dynamic_partitions(sessions_partitions.name)) == SESSIONS
        adopted = instance.get_materialized_partitions(AssetKey("session_summaries"))
        assert len(adopted) == len(facts.summarized)
        with build_sensor_context(instance=instance, resources=defs.resources) as context:
            result = summary_sensor(context)
        assert result.run_requests, "the first tick launched nothing"
        for run in result.run_requests:
            assert store.sessions.session_by_partition(run.partition_key)["session_id"] not in facts.summarized
