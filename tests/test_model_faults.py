"""Every fault a model server can commit, in both wire protocols, through the summary call path
the `session_summaries` asset uses (the resource's client behind the response cache, the routing
rule, the ledger in a real DuckDB file): each call ends within its deadline, leaves an attempt row,
files the right symptom, and no unusable reply becomes a summary or a cached reply."""

from __future__ import annotations

import dataclasses
import time

import pytest
from dagster import instance_for_test

from assets.work.sessions import nothing_to_summarize
from digest.graph import GraphPolicy, after_failure, digest_session
from digest.hosts import DEFAULT_HOST
from digest.settings import load_settings
from digest.synthesis import summarize_session
from digest.tags import SWEEP_TAG
from digest.turns import input_revision
from pipelines.definitions import build_definitions
from pipelines.sensors import register_partitions
from resources.bindings import ChatModelResource
from resources.model_hosts import ModelHosts
from resources.store import DigestStore, RunLedger
from tests.bundles import write_bundle
from tests.conftest import make_limits, make_turns
from tests.fault_server import FAULTS, FaultServer

TIMEOUT_S = 2.0
# What a call may take past its deadline: the timer, the socket shutdown, a loaded 2-core machine.
SLACK_S = 1.5
PROTOCOLS = ("openai", "ollama")  # the providers, each its own wire protocol
TIMEOUTS = ("hang", "trickle-body", "trickle-headers")
SYMPTOM = {
    **{fault: "timeout" for fault in TIMEOUTS},
    "server-error": "provider-error",
    "context-overflow": "context-overflow",
    "reset": "provider-error",
    "malformed-json": "provider-error",
    "content-object": "provider-error",
    "no-choices": "provider-error",
    "bad-counts": None,  # usable: the counts are dropped, the summary is kept
    "length-cut": "token-budget-exceeded",
    "huge": "token-budget-exceeded",
    "mentions-timeout": "parse-failure",
    "mentions-context": "parse-failure",
}
assert set(SYMPTOM) == set(FAULTS)


def _hosts(provider: str, url: str) -> ModelHosts:
    limits = make_limits(timeout_s=TIMEOUT_S)
    resource = ChatModelResource(
        provider=provider,
        model_url=url,
        model_name="fake-model",
        context_limit_tokens=limits.context_limit_tokens,
        safe_limit_tokens=limits.safe_limit_tokens,
        raw_cap_tokens=limits.raw_cap_tokens,
        bytes_per_token=limits.bytes_per_token,
        summary_timeout_s=limits.timeout_s,
        summary_max_output_tokens=limits.max_output_tokens,
    )
    return ModelHosts(resource)


def _rows(store, sql):
    return store.query(sql).to_dict("records")


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_fault_is_bounded_ledgered_and_classified(store, protocol, fault):
    turns = make_turns(f"{protocol}-{fault}", 3, minis=1)
    expected = SYMPTOM[fault]
    with FaultServer(fault) as server:
        model = _hosts(protocol, server.url)
        client = model.client(store, session=(turns[0].session_id, input_revision(turns)))
        started = time.monotonic()
        result = summarize_session(turns, client, model.limits(), RunLedger(store, "fault-run"))
        elapsed = time.monotonic() - started
    attempts = _rows(
        store, "SELECT tier, outcome, duration_s, prompt_tokens, completion_tokens FROM attempts ORDER BY attempt_id"
    )
    friction = [r["symptom"] for r in _rows(store, "SELECT symptom FROM friction_events ORDER BY event_id")]
    cached = _rows(store, "SELECT prompt_tokens, completion_tokens FROM response_cache")

    # Bounded: every call within its deadline, as the ledger recorded it and as measured around it.
    assert attempts, "no attempt row"
    assert all(a["duration_s"] <= TIMEOUT_S + SLACK_S for a in attempts), attempts
    assert elapsed <= len(attempts) * (TIMEOUT_S + SLACK_S)

    if expected is None:
        assert [(a["tier"], a["outcome"]) for a in attempts] == [("raw", "ok")]
        assert (attempts[0]["prompt_tokens"], attempts[0]["completion_tokens"]) == (None, None)
        assert result.summary.source_tier == "raw" and friction == []
        assert cached == [{"prompt_tokens": None, "completion_tokens": None}]
        store.summaries.write_summary(result.summary, run_id="fault-run")
        return

    assert result.summary is None and result.failure == expected
    assert cached == [], "an unusable reply was cached"
    if fault in TIMEOUTS:
        # A raw timeout falls back to the degraded summary, which meets the same server.
        assert [(a["tier"], a["outcome"]) for a in attempts] == [("raw", "timeout"), ("miniSummary", "timeout")]
        assert all(a["duration_s"] >= TIMEOUT_S for a in attempts)
        assert friction == ["timeout", "timeout"] and result.route_reason == "raw-timeout"
        assert len(server.requests) == 2
    else:
        assert [(a["tier"], a["outcome"]) for a in attempts] == [("raw", expected)]
        assert friction == [expected] and result.route_reason == "within-cap"


@pytest.mark.parametrize("fault", ["mentions-timeout", "mentions-context"])
def test_a_graph_reply_naming_context_or_timeout_is_a_parse_failure_and_retried(store, fault):
    """The reply's words once made a graph session undigestible after one try ("context")."""
    turns = make_turns(f"graph-{fault}", 2)
    policy = GraphPolicy(timeout_s=TIMEOUT_S, output_limit_tokens=1024)
    with FaultServer(fault) as server:
        client = _hosts("openai", server.url).client()
        summary = {"input_revision": input_revision(turns)}
        result = digest_session(turns, summary, client, make_limits(), policy, RunLedger(store, "graph-run"))
    assert result.graph is None and result.failure == "parse-failure"
    assert after_failure(None, input_revision(turns), result.failure, max_attempts=3).digest_state == "undigested"
    assert [r["outcome"] for r in _rows(store, "SELECT outcome FROM attempts")] == ["parse-failure"]


def _summarize_through_the_asset(tmp_path, fault: str, protocol: str):
    """One `summarize_sessions` run of session "typed" against a server committing `fault`: the run's
    result and the store."""
    folder = write_bundle(tmp_path / "bundle", make_turns("typed", 2))
    with FaultServer(fault) as server, instance_for_test() as instance:
        settings = load_settings(
            {
                "DIGEST_HOME": str(tmp_path / "home"),
                "DIGEST_MODEL_PROVIDER": protocol,
                "DIGEST_CONTEXT_LIMIT_TOKENS": "8192",
                "DIGEST_RAW_CAP_TOKENS": "2000",
            }
        )
        definitions = build_definitions(dataclasses.replace(settings, model_url=server.url))
        ingest = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
        assert definitions.resolve_job_def("ingest").execute_in_process(run_config=ingest, instance=instance).success
        store = DigestStore(definitions.resources["store"].db_path)
        register_partitions(instance, store)
        result = definitions.resolve_job_def("summarize_sessions").execute_in_process(
            instance=instance, partition_key="typed", raise_on_error=False
        )
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert store.query("SELECT count(*) AS n FROM session_summaries")["n"][0] == 0
    return failure.event_specific_data.error.message, store


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_badly_typed_reply_fails_the_asset_run_as_its_hosts_failure_with_no_backoff(tmp_path, protocol):
    """Through the real asset: content that is an object once crashed the run with no record. It
    breaks the wire protocol, so it is the host's failure: counted on the host's circuit, and the
    session is not backed off (the next sweep gives it to another host)."""
    message, store = _summarize_through_the_asset(tmp_path, "content-object", protocol)
    assert f"host {DEFAULT_HOST} failed: provider-error on session 'typed'" in message
    assert "the session goes to another host" in message
    assert _rows(store, "SELECT outcome, host FROM attempts") == [{"outcome": "provider-error", "host": DEFAULT_HOST}]
    assert _rows(store, "SELECT consumer, symptom FROM friction_events") == [
        {"consumer": "session_summaries", "symptom": "provider-error"}
    ]
    assert _rows(store, "SELECT * FROM summary_state") == []
    assert (
        nothing_to_summarize(store.summaries.summary_standing("typed"), {SWEEP_TAG: "true"}, int(time.time() * 1000))
        is None
    )
    circuit = store.hosts.host_circuits()[DEFAULT_HOST]
    assert circuit.failures == 1 and circuit.retry_at_ms is None  # under the threshold: still in rotation


def test_a_reply_that_does_not_parse_fails_the_asset_run_and_backs_the_session_off(tmp_path):
    """The session's failure, not the host's: the session waits out its backoff, the host's circuit is untouched."""
    message, store = _summarize_through_the_asset(tmp_path, "mentions-timeout", "openai")
    assert "no summary for session 'typed': parse-failure" in message and "backing off" in message
    [state] = _rows(store, "SELECT failures, backoff_until_ms FROM summary_state")
    assert state["failures"] == 1 and state["backoff_until_ms"] > time.time() * 1000
    skip = nothing_to_summarize(store.summaries.summary_standing("typed"), {SWEEP_TAG: "true"}, int(time.time() * 1000))
    assert "in failure backoff" in skip
    assert store.hosts.host_circuits() == {}
