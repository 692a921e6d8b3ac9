"""What orchestration costs: a sweep of N sessions against a local server that answers at once.

Run: .venv/bin/python bench/orchestration.py [--sessions 50]

Side by side, on the same store contents and the same server:
- bare loop: the routing, prompt and DuckDB work of each session (`summarize_session` + writes),
  no Dagster;
- one run per session: the `summarize_sessions` job, in process, once per partition (what the
  sensor and `session-digest sweep` launch);
- one run for the batch: a single Dagster run whose one op loops over all sessions.
Every turn carries an imported mini summary, so the job's mini-summary step makes no model call
and the three sides do the same model work.
"""

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from dagster import OpExecutionContext, instance_for_test, job, op

# The local model server lives in tests/, which is not an installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from digest.ingest import ingest_paths  # noqa: E402
from digest.settings import load_settings  # noqa: E402
from digest.synthesis import summarize_session  # noqa: E402
from pipelines.definitions import build_definitions  # noqa: E402
from pipelines.sensors import register_partitions  # noqa: E402
from resources.model_clients import OpenAIChatClient  # noqa: E402
from resources.store import DigestStore, RunLedger  # noqa: E402
from tests.bundles import write_bundle  # noqa: E402
from tests.conftest import make_turns  # noqa: E402
from tests.model_server import ModelServer  # noqa: E402


def fresh_store(root: Path, sessions: int) -> DigestStore:
    turns = [t for i in range(sessions) for t in make_turns(f"bench-{i:03d}", 4, doc_bytes=600, minis=4)]
    folder = write_bundle(root / "bundle", turns)
    store = DigestStore(root / "digest.duckdb")
    store.migrate()
    ingest_paths([folder], store)
    return store


def summarize_all(store: DigestStore, client, limits, run_id: str) -> None:
    for key in store.sessions.partition_keys():
        session_id = store.sessions.session_by_partition(key)["session_id"]
        result = summarize_session(store.sessions.load_turns([session_id]), client, limits, RunLedger(store, run_id))
        store.summaries.write_summary(result.summary, run_id=run_id)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=50)
    args = parser.parse_args()
    n = args.sessions
    timings: dict[str, float] = {}
    with ModelServer() as server, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        settings = dataclasses.replace(
            # The response cache off: the sessions' prompts are alike, and the bare loop and the batch
            # call the model for each of them; the Dagster runs must too, for the same model work.
            load_settings(
                {"DIGEST_HOME": str(root / "home"), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_RESPONSE_CACHE": "off"}
            ),
            model_url=server.url,
        )
        client = OpenAIChatClient(server.url, "bench", schema_style="json_object")
        limits = settings.limits()

        store = fresh_store(root / "bare", n)
        started = time.perf_counter()
        summarize_all(store, client, limits, "bare")
        timings["bare loop"] = time.perf_counter() - started

        with instance_for_test() as instance:
            store = fresh_store(root / "home", n)
            register_partitions(instance, store)
            summarize = build_definitions(settings).resolve_job_def("summarize_sessions")
            started = time.perf_counter()
            for key in store.sessions.partition_keys():
                assert summarize.execute_in_process(instance=instance, partition_key=key).success
            timings["one run per session"] = time.perf_counter() - started

            store = fresh_store(root / "batch", n)

            @op
            def summarize_batch(context: OpExecutionContext) -> None:
                summarize_all(store, client, limits, context.run.run_id)

            @job
            def batch_job():
                summarize_batch()

            started = time.perf_counter()
            assert batch_job.execute_in_process(instance=instance).success
            timings["one run for the batch"] = time.perf_counter() - started
        assert len(server.chat_requests()) == 3 * n

    bare = timings["bare loop"]
    print(f"{n} sessions, local server answering at once")
    print(f"{'side':<24} {'total s':>8} {'ms/session':>11} {'x bare':>7}")
    for name, seconds in timings.items():
        print(f"{name:<24} {seconds:>8.2f} {seconds / n * 1000:>11.0f} {seconds / bare:>7.1f}")
    per_run = (timings["one run per session"] - bare) / n * 1000
    print(f"Dagster overhead of one run per session: {per_run:.0f} ms per session")


if __name__ == "__main__":
    main()
