"""Several model hosts in real Dagster runs: the summary sensor places each session on a host (a
run tag), the run sends its calls there, and the summary says which host made it and why."""

from __future__ import annotations

from dagster import build_sensor_context, instance_for_test

from digest.hosts import MODEL_HOST_REASON_TAG, MODEL_HOST_TAG
from digest.settings import load_settings
from pipelines.definitions import build_definitions
from pipelines.sensors import register_partitions, summary_sensor
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.model_server import ModelServer


def _hosts(tmp_path, cpu_url: str, gpu_url: str):
    path = tmp_path / "hosts.toml"
    path.write_text(
        f"""
[[hosts]]
name = "cpu"
provider = "openai"
url = "{cpu_url}"
context_limit_tokens = 8192
raw_cap_tokens = 2000

[[hosts]]
name = "gpu"
provider = "openai"
url = "{gpu_url}"
context_limit_tokens = 131072
raw_cap_tokens = "off"
concurrency = 2
"""
    )
    return path


def test_a_session_over_the_cpu_hosts_cap_is_summarized_raw_on_the_long_context_host(tmp_path):
    # 16 KB (~5,500 tokens): over the CPU host's 2000-token cap; the small ones fit both.
    turns = make_turns("big", 40, doc_bytes=400) + [
        t for i in range(4) for t in make_turns(f"small{i}", 2, doc_bytes=200 + 10 * i)
    ]
    folder = write_bundle(tmp_path / "bundle", turns)
    with ModelServer() as cpu, ModelServer() as gpu, instance_for_test() as instance:
        settings = load_settings(
            {
                "DIGEST_HOME": str(tmp_path / "home"),
                "DIGEST_MODEL_HOSTS": str(_hosts(tmp_path, cpu.url, gpu.url)),
                "DIGEST_IDLE_WINDOW_S": "1",
            }
        )
        definitions = build_definitions(settings)
        ingest = definitions.resolve_job_def("ingest")
        assert ingest.execute_in_process(
            run_config={"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}, instance=instance
        ).success
        store = DigestStore(settings.db_path)
        register_partitions(instance, store)

        with build_sensor_context(instance=instance, resources=definitions.resources) as context:
            requests = summary_sensor(context).run_requests
        placed = {r.partition_key: r.tags for r in requests}
        assert set(placed) == {"big", "small0", "small1", "small2", "small3"}
        assert placed["big"][MODEL_HOST_TAG] == "gpu"
        assert placed["big"][MODEL_HOST_REASON_TAG] == "raw; 1 of 2 host(s) admit it raw (cpu over-raw-cap)"
        assert {tags[MODEL_HOST_TAG] for tags in placed.values()} == {"cpu", "gpu"}  # the small ones spread

        job = definitions.resolve_job_def("summarize_sessions")
        for key, tags in placed.items():
            assert job.execute_in_process(instance=instance, partition_key=key, tags=tags).success

        # Each host got exactly its own sessions' calls, and the big one went raw, not degraded.
        chats = {"cpu": len(cpu.requests), "gpu": len(gpu.requests)}
        assert chats == {h: sum(t[MODEL_HOST_TAG] == h for t in placed.values()) for h in ("cpu", "gpu")}
        assert max(len(r.prompt) for r in gpu.requests) > 16_000  # the big session's raw prompt
        assert max(len(r.prompt) for r in cpu.requests) < 6_000
        rows = {row["session_id"]: row for row in store.summary_rows()}
        assert (rows["big"]["source_tier"], rows["big"]["degraded"], rows["big"]["host"]) == ("raw", False, "gpu")
        assert rows["big"]["host_reason"] == placed["big"][MODEL_HOST_REASON_TAG]
        assert {key: row["host"] for key, row in rows.items()} == {k: t[MODEL_HOST_TAG] for k, t in placed.items()}
        hosts_of_attempts = store.query("SELECT session_id, host FROM attempts ORDER BY session_id")
        assert dict(zip(hosts_of_attempts.session_id, hosts_of_attempts.host)) == {
            k: t[MODEL_HOST_TAG] for k, t in placed.items()
        }


def test_a_run_asked_for_by_hand_places_itself_as_the_sweep_would(tmp_path):
    folder = write_bundle(tmp_path / "bundle", make_turns("big", 40, doc_bytes=400))
    with ModelServer() as cpu, ModelServer() as gpu, instance_for_test() as instance:
        settings = load_settings(
            {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_HOSTS": str(_hosts(tmp_path, cpu.url, gpu.url))}
        )
        definitions = build_definitions(settings)
        config = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
        assert definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance).success
        store = DigestStore(settings.db_path)
        register_partitions(instance, store)
        job = definitions.resolve_job_def("summarize_sessions")
        # No host tag, then a tag naming a host the file no longer declares.
        assert job.execute_in_process(instance=instance, partition_key="big").success
        assert store.summary_row("big")["host_reason"].endswith("(placed by the run)")
        assert job.execute_in_process(instance=instance, partition_key="big", tags={MODEL_HOST_TAG: "gone"}).success
        row = store.summary_row("big")
        assert row["host"] == "gpu" and row["source_tier"] == "raw"
        assert row["host_reason"].endswith("(the run's host 'gone' is not declared)")
        # No mini summaries on the CPU host: on the GPU host the session is not headed for degraded.
        # The second run's reply is the response cache's (the same prompt to the same model).
        assert len(cpu.requests) == 0 and len(gpu.requests) == 1
