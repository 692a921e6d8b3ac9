"""The circuit breaker per model host (issue 15.3): the state machine on a clock the test passes in,
the errors a real client raises over real HTTP told apart (the host's fault or the prompt's), and
the circuit kept in a real DuckDB file through the ledgers the assets write with."""

from __future__ import annotations

import io
import re
import socket
import threading
from contextlib import contextmanager

import pytest
from rich.console import Console

from app.console import RENDER
from digest.circuit import (
    CircuitPolicy,
    CircuitState,
    HostCircuit,
    after_outcome,
    after_probe,
    is_host_failure,
)
from digest.friction_report import build_report, render_markdown
from digest.graph import GraphPolicy, digest_session
from digest.ingest import ingest_paths
from digest.mini_summaries import MiniSummaryPolicy, fill_mini_summaries
from digest.model_api import ModelError
from digest.settings import load_settings
from digest.synthesis import summarize_session
from digest.turns import input_revision
from resources.model_clients import OllamaChatClient, OpenAIChatClient
from resources.response_cache import CachedChatClient
from resources.store import MiniSummaryLedger, RunLedger
from tests.bundles import write_bundle
from tests.conftest import make_limits, make_turns
from tests.fault_server import FaultServer
from tests.model_server import Behaviour, ModelServer

POLICY = CircuitPolicy(failure_threshold=3, retry_base_s=60.0, retry_max_s=1800.0)
HOST = "gpu-box"
HANG_TIMEOUT_S = 0.1  # the hang fault's calls end at their deadline; other calls get 5 s


@contextmanager
def closed_port():
    """A loopback address that refuses connections: a socket bound but not listening holds the port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def _fail(circuit: HostCircuit, now_ms: int, times: int = 1):
    transition = None
    for _ in range(times):
        circuit, transition = after_outcome(circuit, True, "HTTP 503: busy", now_ms, POLICY)
    return circuit, transition


# --- the state machine --------------------------------------------------------------------------


def test_the_threshold_opens_the_circuit_and_the_backoff_makes_it_half_open():
    circuit, transition = _fail(HostCircuit(HOST), 1_000, times=2)
    assert transition is None and circuit.state(1_000) == CircuitState.CLOSED and circuit.failures == 2
    circuit, transition = _fail(circuit, 2_000)
    assert transition.before == CircuitState.CLOSED and transition.opened and transition.retry_in_s == 60
    assert circuit.retry_at_ms == 62_000 and circuit.opens == 1 and circuit.last_error == "HTTP 503: busy"
    assert circuit.state(61_999) == CircuitState.OPEN and not circuit.available(61_999)
    assert circuit.state(62_000) == CircuitState.HALF_OPEN and circuit.available(62_000)


def test_a_success_between_failures_starts_the_count_again():
    circuit, _ = _fail(HostCircuit(HOST), 1_000, times=2)
    circuit, transition = after_outcome(circuit, False, None, 1_500, POLICY)
    assert transition is None and circuit.failures == 0
    circuit, _ = _fail(circuit, 2_000, times=2)
    assert circuit.state(2_000) == CircuitState.CLOSED


def test_a_failed_probe_opens_it_again_for_twice_as_long_up_to_the_max():
    circuit, _ = _fail(HostCircuit(HOST), 0, times=3)
    now = circuit.retry_at_ms
    for opens, backoff_s in [(2, 120), (3, 240), (4, 480), (5, 960), (6, 1800), (7, 1800)]:
        probing = after_probe(circuit, now, POLICY)
        assert not probing.available(now), "a second run went to a half-open host"
        circuit, transition = _fail(probing, now + 10)
        assert transition.before == CircuitState.HALF_OPEN and transition.opened
        assert (circuit.opens, transition.retry_in_s) == (opens, backoff_s)
        now = circuit.retry_at_ms


def test_the_backoff_stays_at_the_max_however_often_the_circuit_reopens():
    assert POLICY.backoff_s(5000) == 1800


def test_a_probe_that_never_reports_is_given_up_after_another_backoff():
    circuit, _ = _fail(HostCircuit(HOST), 0, times=3)
    probing = after_probe(circuit, 60_000, POLICY)
    assert probing.state(119_999) == CircuitState.HALF_OPEN and not probing.available(119_999)
    assert probing.available(120_000)


def test_a_success_closes_an_open_or_half_open_circuit():
    opened, _ = _fail(HostCircuit(HOST), 0, times=3)
    for now in (30_000, 60_000):  # a call started before it opened; the probe
        circuit, transition = after_outcome(after_probe(opened, now, POLICY), False, None, now, POLICY)
        assert transition.before != CircuitState.CLOSED and transition.after == CircuitState.CLOSED
        assert (circuit.failures, circuit.opens, circuit.retry_at_ms, circuit.probe_until_ms) == (0, 0, None, None)
        # The next trouble starts from the first backoff again.
        _, transition = _fail(circuit, now, times=3)
        assert transition.retry_in_s == 60


def test_failures_while_open_are_counted_but_do_not_move_the_retry():
    circuit, _ = _fail(HostCircuit(HOST), 0, times=3)
    circuit, transition = _fail(circuit, 10_000, times=2)
    assert transition is None and circuit.failures == 5 and circuit.retry_at_ms == 60_000


# --- what the host's fault is, as a real client raises it over real HTTP ------------------------


def _error(client, timeout_s: float = 5.0) -> ModelError:
    with pytest.raises(ModelError) as caught:
        client.chat("hello", schema=None, max_output_tokens=64, timeout_s=timeout_s)
    return caught.value


@pytest.mark.parametrize("protocol", ["openai", "ollama"])
@pytest.mark.parametrize(
    "fault, host_failure",
    [
        ("hang", True),  # no answer by the deadline
        ("server-error", True),  # a 500
        ("reset", True),  # the connection broken off mid-reply
        ("malformed-json", True),  # a 200 that breaks the wire protocol
        ("no-choices", True),
        ("context-overflow", False),  # the prompt's fault
        ("length-cut", False),  # the reply reached its output cap: not an error of the client
        ("huge", False),  # over the bytes read for the output cap
    ],
)
def test_a_client_error_says_whether_the_host_is_at_fault(protocol, fault, host_failure):
    with FaultServer(fault) as server:
        if protocol == "openai":
            client = OpenAIChatClient(server.url, "fake-model", schema_style="json_object")
        else:
            client = OllamaChatClient(server.url, "fake-model", num_ctx=8192)
        if fault == "length-cut":
            reply = client.chat("hello", schema=None, max_output_tokens=64, timeout_s=5.0)
            assert reply.finish_reason == "length"
            return
        assert is_host_failure(_error(client, HANG_TIMEOUT_S if fault == "hang" else 5.0)) is host_failure


@pytest.mark.parametrize(
    "behaviour, host_failure",
    [
        (Behaviour(status=503, error_body={"error": {"message": "loading model", "type": "unavailable"}}), True),
        (Behaviour(status=502, error_body={"error": "bad gateway"}), True),
        (Behaviour(status=404, error_body={"error": {"message": "model 'x' not found"}}), False),
        (Behaviour(status=429, error_body={"error": {"message": "too many requests"}}), False),
        (Behaviour.overflow(), False),
        # Ollama's overflow has come as a 500: the server's message makes it the prompt's fault.
        (Behaviour(status=500, error_body={"error": "the input length exceeds the context length"}), False),
    ],
)
def test_a_5xx_is_the_hosts_fault_and_a_4xx_or_an_overflow_is_not(behaviour, host_failure):
    with ModelServer(lambda received: behaviour) as server:
        error = _error(OllamaChatClient(server.url, "fake-model", num_ctx=8192))
    assert error.status == behaviour.status
    assert is_host_failure(error) is host_failure


def test_a_host_nothing_listens_on_is_at_fault():
    with closed_port() as url:
        error = _error(OpenAIChatClient(url, "fake-model"))
    assert error.status is None and "unreachable" in str(error) and is_host_failure(error)


def test_a_reply_that_does_not_parse_is_not_the_hosts_fault(store):
    """The words of a bad reply never decide: a reply naming a timeout is the reply's failure."""
    with FaultServer("mentions-timeout") as server:
        client = OpenAIChatClient(server.url, "fake-model", schema_style="json_object")
        ledger = RunLedger(store, "run", host=HOST, circuit=POLICY)
        results = [summarize_session(make_turns(f"s{i}", 2), client, make_limits(), ledger) for i in range(4)]
    assert {(r.failure, r.host_failure) for r in results} == {("parse-failure", False)}
    assert store.hosts.host_circuits() == {} and _host_friction(store) == []


# --- the circuit in the store, through the ledgers ----------------------------------------------


def _host_friction(store) -> list[dict]:
    return store.query(
        "SELECT asset_ref, symptom, emission_point, note, run_id FROM friction_events WHERE consumer = 'model-hosts'"
    ).to_dict("records")


@contextmanager
def _failing_host(kind: str):
    """A server URL whose every call fails the host's way: refused, a 500, or no answer in time."""
    if kind == "refused":
        with closed_port() as url:
            yield url
    else:
        with FaultServer({"5xx": "server-error", "timeout": "hang"}[kind]) as server:
            yield server.url


@pytest.mark.parametrize(
    "kind, symptom", [("refused", "provider-error"), ("5xx", "provider-error"), ("timeout", "timeout")]
)
def test_three_host_failures_of_summaries_open_the_circuit_with_one_friction_event(store, kind, symptom):
    limits = make_limits(timeout_s=HANG_TIMEOUT_S if kind == "timeout" else 5.0)
    ledger = RunLedger(store, "run-1", host=HOST, circuit=POLICY)
    with _failing_host(kind) as url:
        client = OpenAIChatClient(url, "fake-model", schema_style="json_object")
        results = [summarize_session(make_turns(f"s{i}", 2, minis=1), client, limits, ledger) for i in range(3)]
    assert {(r.failure, r.host_failure) for r in results} == {(symptom, True)}
    # A raw timeout falls back to the degraded call: two failures a session, the circuit open at the third.
    calls = 6 if kind == "timeout" else 3
    assert store.query("SELECT count(*) AS n FROM attempts WHERE host = ?", [HOST])["n"][0] == calls
    [event] = _host_friction(store)
    assert event == {
        "asset_ref": HOST,
        "symptom": symptom,
        "emission_point": "post-invocation-failure",
        "note": f"circuit opened for host {HOST} after 3 consecutive failures; next try after 60 s",
        "run_id": "run-1",
    }
    circuit = store.hosts.host_circuits()[HOST]
    assert circuit.failures == calls and circuit.opens == 1 and circuit.last_error
    assert store.hosts.available_hosts([HOST, "cpu-box"], circuit.changed_at_ms, POLICY) == ["cpu-box"]


def test_context_overflows_never_open_the_circuit(store):
    ledger = RunLedger(store, "run", host=HOST, circuit=POLICY)
    with FaultServer("context-overflow") as server:
        client = OpenAIChatClient(server.url, "fake-model", schema_style="json_object")
        results = [summarize_session(make_turns(f"s{i}", 2), client, make_limits(), ledger) for i in range(5)]
    assert {(r.failure, r.host_failure) for r in results} == {("context-overflow", False)}
    assert store.hosts.host_circuits() == {} and _host_friction(store) == []
    assert store.hosts.available_hosts([HOST], 0, POLICY) == [HOST]


def test_graph_calls_count_on_the_circuit(store):
    turns = make_turns("g", 2)
    policy = GraphPolicy(timeout_s=2.0, output_limit_tokens=1024, max_attempts=3)
    ledger = RunLedger(store, "graph-run", host=HOST, circuit=POLICY)
    with FaultServer("server-error") as server:
        client = OpenAIChatClient(server.url, "fake-model", schema_style="json_object")
        for _ in range(3):
            digest_session(turns, {"input_revision": input_revision(turns)}, client, make_limits(), policy, ledger)
    assert store.hosts.host_circuits()[HOST].opens == 1 and len(_host_friction(store)) == 1


def test_mini_summary_calls_count_on_the_circuit(store, tmp_path):
    ingest_paths([write_bundle(tmp_path / "bundle", make_turns("m", 4))], store)
    turns = store.mini_summaries.pending_mini_summary_turns("m")
    mini = MiniSummaryPolicy(budget_s=60, timeout_s=2.0, outer_timeout_s=3.0, max_attempts=5, fresh_reserve=0)
    with closed_port() as url:
        client = OpenAIChatClient(url, "fake-model")
        ledger = MiniSummaryLedger(store, "mini-run", host=HOST, circuit=POLICY)
        report = fill_mini_summaries(turns, client, make_limits(), mini, ledger)
    assert report.failed == 4
    assert store.query("SELECT DISTINCT host FROM attempts")["host"].tolist() == [HOST]
    circuit = store.hosts.host_circuits()[HOST]
    assert circuit.failures == 4 and circuit.opens == 1
    [event] = _host_friction(store)
    assert event["symptom"] == "provider-error" and event["run_id"] == "mini-run"


def test_a_replayed_reply_is_no_call_on_the_host(store):
    """A reply from the response cache made no call: it neither closes nor counts on the circuit."""
    for _ in range(3):
        store.hosts.record_host_outcome(HOST, True, "HTTP 500", 1_000, POLICY)
    turns = make_turns("c", 2)
    with ModelServer() as server:
        client = CachedChatClient(OpenAIChatClient(server.url, "fake-model"), store.cache, {"provider": "openai"})
        summarize_session(turns, client, make_limits(), RunLedger(store, "warm", host="other", circuit=POLICY))
        result = summarize_session(turns, client, make_limits(), RunLedger(store, "replay", host=HOST, circuit=POLICY))
    assert result.summary is not None and len(server.chat_requests()) == 1
    assert store.hosts.host_circuits()[HOST].state(2_000) == CircuitState.OPEN


def test_a_half_open_host_gets_one_probe_run_and_a_success_closes_it(store):
    for _ in range(3):
        store.hosts.record_host_outcome(HOST, True, "HTTP 500", 0, POLICY)
    assert store.hosts.available_hosts([HOST, "cpu-box"], 59_999, POLICY) == ["cpu-box"]
    # A look (the plan) takes no probe.
    assert store.hosts.available_hosts([HOST, "cpu-box"], 60_000, POLICY, probe=False) == [HOST, "cpu-box"]
    assert store.hosts.host_circuits()[HOST].probe_until_ms is None
    # The backoff has passed: the first tick takes the one probe; the next ticks get none.
    assert store.hosts.available_hosts([HOST, "cpu-box"], 60_000, POLICY) == [HOST, "cpu-box"]
    assert store.hosts.available_hosts([HOST, "cpu-box"], 60_001, POLICY) == ["cpu-box"]
    assert store.hosts.available_hosts([HOST], 70_000, POLICY) == []
    assert store.hosts.host_circuits()[HOST].state(70_000) == CircuitState.HALF_OPEN
    # The probe's summary, through the ledger, with real HTTP.
    with ModelServer() as server:
        client = OpenAIChatClient(server.url, "fake-model")
        ledger = RunLedger(store, "probe", host=HOST, circuit=POLICY)
        assert summarize_session(make_turns("p", 2), client, make_limits(), ledger).summary is not None
    circuit = store.hosts.host_circuits()[HOST]
    assert (circuit.state(70_000), circuit.failures, circuit.opens) == (CircuitState.CLOSED, 0, 0)
    assert store.hosts.available_hosts([HOST], 70_000, POLICY) == [HOST]


def test_status_and_the_friction_report_show_each_hosts_circuit(store, tmp_path):
    for _ in range(3):
        store.hosts.record_host_outcome(HOST, True, "model server unreachable at http://10.0.0.7:8080", 1_000, POLICY)
    store.hosts.record_host_outcome("cpu-box", True, "HTTP 500: busy", 1_000, POLICY)
    status = store.reports.status()["host_circuits"]
    # At the wall clock, long after the retry time: half-open.
    assert status[HOST] == {
        "state": "half-open",
        "consecutive_failures": 3,
        "opens": 1,
        "retry_at_ms": 61_000,
        "probe_out": False,
        "last_error": "model server unreachable at http://10.0.0.7:8080",
    }
    assert status["cpu-box"]["state"] == "closed" and status["cpu-box"]["consecutive_failures"] == 1
    rows = store.reports.friction_report_rows()
    settings = load_settings({"DIGEST_HOME": str(tmp_path)})
    report = build_report(
        rows["events"],
        rows["attempts"],
        rows["summaries"],
        settings,
        settings.circuit,
        host_circuits=rows["host_circuits"],
    )
    markdown = render_markdown(report)
    assert "### Model hosts" in markdown
    assert (
        f"| {HOST} | half-open | 3 | 1 | 1970-01-01 00:01Z | model server unreachable at http://10.0.0.7:8080 |"
        in markdown
    )
    assert "| cpu-box | closed | 1 | 0 |  | HTTP 500: busy |" in markdown


def test_concurrent_ticks_hand_out_one_probe(store):
    for _ in range(3):
        store.hosts.record_host_outcome(HOST, True, "HTTP 500", 0, POLICY)
    answers = []
    barrier = threading.Barrier(4)

    def tick() -> None:
        barrier.wait()
        answers.append(store.hosts.available_hosts([HOST, "cpu-box"], 60_000, POLICY))

    workers = [threading.Thread(target=tick) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(answers) == [["cpu-box"]] * 3 + [[HOST, "cpu-box"]]


def test_the_clis_status_table_lists_each_hosts_circuit(store):
    """`session-digest status` as a person reads it: a table of the hosts under the store's counts."""
    for _ in range(3):
        store.hosts.record_host_outcome(HOST, True, "HTTP 502: bad gateway", 1_000, POLICY)
    out = io.StringIO()
    RENDER["status"](Console(file=out, width=200), store.reports.status())
    text = out.getvalue()
    assert "host circuits" not in text  # not a row of the counts
    assert re.search(rf"{HOST}\s.*half-open\s.*3\s.*1\s.*1970-01-01 00:01:01Z\s.*HTTP 502: bad gateway", text), text
