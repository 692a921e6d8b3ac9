"""The assets' work (`assets/work/`) called directly, with no Dagster run: a real DuckDB store and
the local model server. And how often a run opens the store file: once before its model call and
once after, never holding it while the model answers."""

from __future__ import annotations

import dataclasses

import duckdb
import pytest
from dagster import instance_for_test

from assets.work.graph import digest_partition
from assets.work.mini_summaries import fill_partition
from assets.work.runs import RunFacts
from assets.work.sessions import describe_partition, summarize_partition
from digest.attempts import in_flight_attempt
from digest.ingest import ingest_paths
from digest.scheduling import now_ms
from digest.settings import load_settings
from digest.tags import SWEEP_TAG
from pipelines.definitions import build_definitions, build_resources
from pipelines.sensors import register_partitions
from resources.model_hosts import ModelHosts
from resources.store import DigestStore, RunLedger
from tests.bundles import write_bundle
from tests.conftest import make_limits, make_turns
from tests.model_server import Behaviour, ModelServer
from tests.test_graph import script

SWEPT = {SWEEP_TAG: "sensor"}


class Opens:
    """The DuckDB connections this process opened, and how many are open now."""

    def __init__(self):
        self.count = 0
        self.open = 0
        self.open_during_calls: list[int] = []  # at each request the model server received

    def answering(self, answer):
        """A server script that notes the connections open when the model is asked."""

        def noted(received):
            self.open_during_calls.append(self.open)
            return answer(received)

        return noted


@pytest.fixture
def opens(monkeypatch) -> Opens:
    counted, real = Opens(), duckdb.connect

    class Counted:
        def __init__(self, con):
            self._con = con

        def __getattr__(self, name):
            return getattr(self._con, name)

        def close(self):
            counted.open -= 1
            self._con.close()

    def connect(*args, **kwargs):
        con = real(*args, **kwargs)
        counted.count += 1
        counted.open += 1
        return Counted(con)

    monkeypatch.setattr(duckdb, "connect", connect)
    return counted


def _settings(tmp_path, url: str, **env):
    settings = load_settings(
        {
            "DIGEST_HOME": str(tmp_path / "home"),
            "DIGEST_MODEL_PROVIDER": "openai",
            "DIGEST_CONTEXT_LIMIT_TOKENS": "8192",
            "DIGEST_RAW_CAP_TOKENS": "2000",
            **env,
        }
    )
    return dataclasses.replace(settings, model_url=url)


def _store(tmp_path, turns) -> DigestStore:
    store = DigestStore(tmp_path / "home" / "digest.duckdb")
    store.migrate()
    ingest_paths([write_bundle(tmp_path / "bundle", turns)], store)
    return store


def _summarize(store, resources, run: RunFacts, key: str, **kwargs):
    policies = resources["sweep"].policy(), resources["circuit"].policy()
    return summarize_partition(store, ModelHosts(resources["model"]), run, key, *policies, **kwargs)


def test_a_summary_partition_run_opens_the_store_once_before_its_model_call_and_once_after(tmp_path, opens):
    """The `summarize_sessions` job over a session within the cap (no mini summary to make), after a
    warm-up run: its three steps read before the model call, one connection each, and the summary
    step writes after it on one more. 34 opens before the held connection (the cache off)."""
    turns = make_turns("warm", 3) + make_turns("counted", 3)
    with ModelServer(opens.answering(lambda received: Behaviour.reply())) as server, instance_for_test() as instance:
        settings = _settings(tmp_path, server.url, DIGEST_RESPONSE_CACHE="off")
        store = _store(tmp_path, turns)
        register_partitions(instance, store)
        job = build_definitions(settings).resolve_job_def("summarize_sessions")
        assert job.execute_in_process(instance=instance, partition_key="warm").success
        before = opens.count
        assert job.execute_in_process(instance=instance, partition_key="counted").success
    # raw_sessions 1, turn_mini_summaries 1, session_summaries 1 before its call and 1 after.
    assert opens.count - before <= 4
    assert opens.open_during_calls == [0, 0]  # no connection open while the model answered
    assert store.summaries.summary_row("counted")["source_tier"] == "raw"


def test_summarize_partition_writes_the_summary_then_a_sweep_finds_nothing_to_do(tmp_path, opens):
    with ModelServer(opens.answering(lambda received: Behaviour.reply())) as server:
        resources = build_resources(_settings(tmp_path, server.url))
        store = _store(tmp_path, make_turns("s1", 3))
        before = opens.count
        made = _summarize(store, resources, RunFacts("run-1"), "s1")
        assert opens.count - before == 2  # one connection before the call, one after
        again = _summarize(store, resources, RunFacts("run-2", SWEPT), "s1")
    assert made.row["run_id"] == "run-1" and made.row["source_tier"] == "raw" and made.failure is None
    assert again.row is None and again.skipped.startswith("already summarized at its current turns")
    assert opens.open_during_calls == [0]
    assert store.query("SELECT count(*) AS n FROM summary_leases")["n"][0] == 0  # released


def test_summarize_partition_leaves_a_leased_session_to_its_holder_and_takes_over_a_dead_one(tmp_path):
    with ModelServer() as server:
        resources = build_resources(_settings(tmp_path, server.url))
        store = _store(tmp_path, make_turns("s1", 3))
        assert store.summaries.claim_summary_lease("s1", "holder", now_ms(), 600) is None
        swept = _summarize(store, resources, RunFacts("run-1", SWEPT), "s1")
        by_hand = _summarize(store, resources, RunFacts("run-2"), "s1")
        assert len(server.chat_requests()) == 0
        # The holder died during its model call (on another machine, or marked failed in the UI).
        in_flight = in_flight_attempt("s1", "session-summary", "raw", "prompt", make_limits(), "m", 60.0)
        RunLedger(store, "holder").start_attempt(in_flight)
        taken = _summarize(store, resources, RunFacts("run-3", ended=lambda run_id: run_id == "holder"), "s1")
    assert swept.skipped == "session 's1' is being summarized by run holder" and swept.row is None
    assert by_hand.failure == "session 's1' is being summarized by run holder; not summarizing it twice"
    assert taken.row["run_id"] == "run-3"
    ledger = store.query("SELECT run_id, outcome FROM attempts ORDER BY attempt_id").to_dict("records")
    assert ledger == [{"run_id": "holder", "outcome": "interrupted"}, {"run_id": "run-3", "outcome": "ok"}]


def test_summarize_partition_counts_a_failure_and_backs_the_session_off(tmp_path):
    with ModelServer(lambda received: Behaviour.text("no json here")) as server:
        resources = build_resources(_settings(tmp_path, server.url))
        store = _store(tmp_path, make_turns("s1", 2))
        failed = _summarize(store, resources, RunFacts("run-1"), "s1")
        unknown = _summarize(store, resources, RunFacts("run-2"), "nobody")
    assert failed.failure.startswith("no summary for session 's1': parse-failure") and "backing off" in failed.failure
    assert failed.failure_metadata == {"symptom": "parse-failure", "route_reason": "within-cap", "failures": 1}
    assert store.query("SELECT failures FROM summary_state")["failures"].tolist() == [1]
    assert unknown.failure == "no session has partition key 'nobody': ingest its bundle first"


def test_describe_partition_gives_the_route_over_the_cap(tmp_path):
    with ModelServer() as server:
        resources = build_resources(_settings(tmp_path, server.url))
        store = _store(tmp_path, make_turns("big", 40, doc_bytes=400))
        described = describe_partition(store, ModelHosts(resources["model"]), RunFacts("run-1"), "big")
    assert described.metadata["predicted_route"] == "over-raw-cap"
    assert described.metadata["turn_count"] == 40 and described.metadata["raw_cap_tokens"] == 2000


def test_fill_partition_makes_the_mini_summaries_with_no_connection_held_during_a_call(tmp_path, opens):
    """A mini-summary call runs in a worker thread: the run's held connection is let go all the same."""
    with ModelServer(opens.answering(lambda received: Behaviour.mini(received))) as server:
        resources = build_resources(_settings(tmp_path, server.url))
        store = _store(tmp_path, make_turns("s1", 3))
        filled = fill_partition(
            store, ModelHosts(resources["model"]), RunFacts("run-1"), "s1", resources["mini_summaries"].policy(),
            resources["circuit"].policy(),
        )  # fmt: skip
    assert len(filled.report.generated) == 3 and filled.counts["pending"] == 0
    assert opens.open_during_calls and set(opens.open_during_calls) == {0}


def test_digest_partition_waits_for_the_summary_then_writes_the_graph(tmp_path):
    with ModelServer(script()) as server:
        resources = build_resources(_settings(tmp_path, server.url))
        store = _store(tmp_path, make_turns("s1", 3))
        model, policies = ModelHosts(resources["model"]), (resources["graph"].policy(), resources["circuit"].policy())
        waiting = digest_partition(store, model, RunFacts("run-1"), "s1", *policies)
        _summarize(store, resources, RunFacts("run-2"), "s1")
        digested = digest_partition(store, model, RunFacts("run-3"), "s1", *policies)
        again = digest_partition(store, model, RunFacts("run-4", SWEPT), "s1", *policies)
    assert waiting.not_digested and waiting.graph is None
    assert digested.graph is not None and digested.metadata["entities"] > 0
    assert store.graph.digest_state("s1").digest_state == "digested"
    assert again.not_digested.startswith("already digested at its current turns")
