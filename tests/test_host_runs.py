"""Several model hosts in real Dagster runs: the summary sensor places each session on a host (a
run tag), the run sends its calls there, and the summary says which host made it and why."""

from __future__ import annotations

from dagster import build_sensor_context, instance_for_test

from digest import settings_fleet
from digest.settings import load_settings
from digest.tags import MODEL_HOST_REASON_TAG, MODEL_HOST_TAG
from pipelines.definitions import build_definitions
from pipelines.jobs import default_run_config, requested_job
from pipelines.sensors import register_partitions, summary_sensor
from resources import model_hosts
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
        rows = {row["session_id"]: row for row in store.reports.summary_rows()}
        assert (rows["big"]["source_tier"], rows["big"]["degraded"], rows["big"]["host"]) == ("raw", False, "gpu")
        assert rows["big"]["host_reason"] == placed["big"][MODEL_HOST_REASON_TAG]
        assert {key: row["host"] for key, row in rows.items()} == {k: t[MODEL_HOST_TAG] for k, t in placed.items()}
        hosts_of_attempts = store.query("SELECT session_id, host FROM attempts ORDER BY session_id")
        assert dict(zip(hosts_of_attempts.session_id, hosts_of_attempts.host)) == {
            k: t[MODEL_HOST_TAG] for k, t in placed.items()
        }


def _ingested_on_two_hosts(tmp_path, folder, cpu_url: str, gpu_url: str, instance):
    """(settings, definitions) of a home whose hosts file names the two servers, `folder` ingested."""
    settings = load_settings(
        {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_HOSTS": str(_hosts(tmp_path, cpu_url, gpu_url))}
    )
    definitions = build_definitions(settings)
    config = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
    assert definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance).success
    return settings, definitions


def test_a_run_asked_for_by_hand_places_itself_as_the_sweep_would(tmp_path):
    folder = write_bundle(tmp_path / "bundle", make_turns("big", 40, doc_bytes=400))
    with ModelServer() as cpu, ModelServer() as gpu, instance_for_test() as instance:
        settings, definitions = _ingested_on_two_hosts(tmp_path, folder, cpu.url, gpu.url, instance)
        store = DigestStore(settings.db_path)
        register_partitions(instance, store)
        job = definitions.resolve_job_def("summarize_sessions")
        # No host tag, then a tag naming a host the file no longer declares.
        assert job.execute_in_process(instance=instance, partition_key="big").success
        assert store.summaries.summary_row("big")["host_reason"].endswith("(placed by the run)")
        assert job.execute_in_process(instance=instance, partition_key="big", tags={MODEL_HOST_TAG: "gone"}).success
        row = store.summaries.summary_row("big")
        assert row["host"] == "gpu" and row["source_tier"] == "raw"
        assert row["host_reason"].endswith("(the run's host 'gone' is not declared)")
        # No mini summaries on the CPU host: on the GPU host the session is not headed for degraded.
        # The second run's reply is the response cache's (the same prompt to the same model).
        assert len(cpu.requests) == 0 and len(gpu.requests) == 1


class Calls:
    """A function that counts its calls, then does what it wraps."""

    def __init__(self, monkeypatch, module, name: str):
        self.count, real = 0, getattr(module, name)

        def counted(*args, **kwargs):
            self.count += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)


def test_a_summary_run_reads_the_hosts_file_and_places_its_session_once(tmp_path, monkeypatch):
    """Each step of the run (the route, the mini summaries, the summary) asks where the session goes:
    the run's hosts answer from one reading of the file and one placement. A sensor tick reads the
    file once too, its backlog's measure and its selection alike."""
    folder = write_bundle(tmp_path / "bundle", make_turns("big", 40, doc_bytes=400) + make_turns("small", 2))
    with ModelServer() as cpu, ModelServer() as gpu, instance_for_test() as instance:
        settings, definitions = _ingested_on_two_hosts(tmp_path, folder, cpu.url, gpu.url, instance)
        register_partitions(instance, DigestStore(settings.db_path))
        reads = Calls(monkeypatch, settings_fleet, "load_hosts_file")
        placements = Calls(monkeypatch, model_hosts, "place_session")
        job = definitions.resolve_job_def("summarize_sessions")
        # Asked for by hand: three steps, the session placed by the run itself.
        assert job.execute_in_process(instance=instance, partition_key="big").success
        assert (reads.count, placements.count) == (1, 1)
        assert DigestStore(settings.db_path).summaries.summary_row("big")["host"] == "gpu"

        with build_sensor_context(instance=instance, resources=definitions.resources) as context:
            (request,) = summary_sensor(context).run_requests
        assert request.partition_key == "small" and reads.count == 2 and placements.count == 1
        # A sweep's run, its host named by its tag: the two steps of `SWEEP_RUN_ASSETS`.
        sweep_job = requested_job(job, request)
        assert sweep_job.execute_in_process(
            instance=instance,
            partition_key="small",
            tags=request.tags,
            run_config=default_run_config(sweep_job, "small"),
        ).success
        assert (reads.count, placements.count) == (3, 2)


def test_near_the_cap_the_run_routes_on_the_hosts_own_token_count(tmp_path):
    """The estimate (3 bytes a token) puts the session over the 2000-token cap; the server's
    tokenizer (3.5 bytes a token) counts it within: the run asks it, and the session goes raw."""
    from digest.synthesis import build_prompt, raw_content
    from digest.tokens import CHAT_TEMPLATE_MARGIN_TOKENS
    from digest.turns import canonical_order
    from tests.model_server import fake_token_count

    def raw_prompt(turns):
        ordered = canonical_order(turns)
        return build_prompt(raw_content(ordered), ordered)

    turns = next(
        t
        for n in range(2, 60)
        if (t := make_turns("near", n, doc_bytes=200)) and len(raw_prompt(t).encode()) / 3 > 2000
    )
    assert fake_token_count(raw_prompt(turns)) + CHAT_TEMPLATE_MARGIN_TOKENS <= 2000
    folder = write_bundle(tmp_path / "bundle", turns)
    with ModelServer() as server, instance_for_test() as instance:
        settings = load_settings(
            {
                "DIGEST_HOME": str(tmp_path / "home"),
                "DIGEST_MODEL_PROVIDER": "openai",
                "DIGEST_MODEL_URL": server.url,
                "DIGEST_RAW_CAP_TOKENS": "2000",
            }
        )
        definitions = build_definitions(settings)
        config = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
        assert definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance).success
        store = DigestStore(settings.db_path)
        register_partitions(instance, store)
        assert (
            definitions.resolve_job_def("summarize_sessions")
            .execute_in_process(instance=instance, partition_key="near")
            .success
        )
        row = store.summaries.summary_row("near")
        assert (row["source_tier"], row["route_reason"], row["raw_tokens_source"]) == ("raw", "within-cap", "tokenizer")
        assert row["raw_tokens_counted"] == fake_token_count(raw_prompt(turns)) + CHAT_TEMPLATE_MARGIN_TOKENS
        assert len(server.tokenize_requests()) == 1


def _two_cpu_hosts(tmp_path, a_url: str, b_url: str):
    path = tmp_path / "hosts2.toml"
    path.write_text(
        "".join(
            f'[[hosts]]\nname = "{name}"\nprovider = "openai"\nurl = "{url}"\ncontext_limit_tokens = 8192\n'
            "raw_cap_tokens = 2000\n\n"
            for name, url in (("a", a_url), ("b", b_url))
        )
    )
    return path


def test_a_run_placed_on_a_host_whose_circuit_opens_hands_its_session_back(tmp_path):
    """Issue 22, defect 2: a run re-checks its host's circuit before each call. A session over the
    cap placed on host b, which answers 5xx: its mini summaries' third failure opens b's circuit, and
    the run makes no further call (not the 5 remaining turns, not the summary); the session is not
    backed off, its lease is free, and the next tick places it on host a, where it is summarized."""
    from digest.circuit import CircuitState
    from digest.scheduling import now_ms
    from tests.model_server import Behaviour

    turns = make_turns("big", 8, doc_bytes=1200)  # ~3,300 tokens: over both hosts' 2,000-token cap
    folder = write_bundle(tmp_path / "bundle", turns)
    with (
        ModelServer() as a,
        ModelServer(lambda received: Behaviour.server_error()) as b,
        instance_for_test() as instance,
    ):
        settings = load_settings(
            {
                "DIGEST_HOME": str(tmp_path / "home"),
                "DIGEST_MODEL_HOSTS": str(_two_cpu_hosts(tmp_path, a.url, b.url)),
                "DIGEST_IDLE_WINDOW_S": "1",
                "DIGEST_HOST_FAILURE_THRESHOLD": "3",
            }
        )
        definitions = build_definitions(settings)
        config = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
        assert definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance).success
        store = DigestStore(settings.db_path)
        register_partitions(instance, store)
        job = definitions.resolve_job_def("summarize_sessions")
        # Placed on b by the sweep (a run tag), before b's circuit opened.
        tags = {MODEL_HOST_TAG: "b", MODEL_HOST_REASON_TAG: "placed by the test", "digest/sweep": "test"}
        result = job.execute_in_process(instance=instance, partition_key="big", tags=tags)
        assert result.success
        assert len(b.requests) == 3, [r.prompt[:50] for r in b.requests]  # the threshold's calls, no more
        assert len(a.requests) == 0
        assert store.hosts.host_circuits()["b"].state(now_ms()) == CircuitState.OPEN
        [observed] = result.asset_observations_for_node("session_summaries")
        assert "went out of rotation" in observed.metadata["reason"].value
        assert not result.asset_materializations_for_node("session_summaries")
        # Handed back: no failure or backoff of the session, no lease held, no mini-summary backoff.
        standing = store.summaries.summary_standing("big")
        assert standing["summary_revision"] is None and not standing["failures"]
        assert store.query("SELECT count(*) AS n FROM summary_leases").n[0] == 0
        assert store.mini_summaries.mini_summary_backoff_until_ms("big") is None
        states = store.query("SELECT attempts, archived_at FROM mini_summary_state")
        assert list(states.attempts) == [1, 1, 1] and states.archived_at.isna().all()

        # The next tick: b is out of rotation, the session goes to a, which summarizes it.
        with build_sensor_context(instance=instance, resources=definitions.resources) as context:
            [request] = summary_sensor(context).run_requests
        assert (request.partition_key, request.tags[MODEL_HOST_TAG]) == ("big", "a")
        assert job.execute_in_process(instance=instance, partition_key="big", tags=request.tags).success
        assert len(b.requests) == 3
        row = store.summaries.summary_row("big")
        assert (row["host"], row["source_tier"]) == ("a", "miniSummary")


def test_a_run_whose_host_is_out_of_rotation_before_its_first_call_calls_nothing(tmp_path):
    """A raw session placed on b; b's circuit opens (another run's failures) before this run's call."""
    from digest.circuit import CircuitPolicy
    from digest.scheduling import now_ms

    folder = write_bundle(tmp_path / "bundle", make_turns("small", 3))
    with ModelServer() as a, ModelServer() as b, instance_for_test() as instance:
        settings = load_settings(
            {
                "DIGEST_HOME": str(tmp_path / "home"),
                "DIGEST_MODEL_HOSTS": str(_two_cpu_hosts(tmp_path, a.url, b.url)),
            }
        )
        definitions = build_definitions(settings)
        config = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
        assert definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance).success
        store = DigestStore(settings.db_path)
        register_partitions(instance, store)
        for _ in range(3):
            store.hosts.record_host_outcome("b", True, "HTTP 503", now_ms(), CircuitPolicy())
        tags = {MODEL_HOST_TAG: "b", MODEL_HOST_REASON_TAG: "placed by the test", "digest/sweep": "test"}
        result = definitions.resolve_job_def("summarize_sessions").execute_in_process(
            instance=instance, partition_key="small", tags=tags
        )
        assert result.success and len(b.requests) == 0 and len(a.requests) == 0
        assert (
            store.summaries.summary_row("small") is None and not store.summaries.summary_standing("small")["failures"]
        )
        assert store.query("SELECT count(*) AS n FROM attempts").n[0] == 0
