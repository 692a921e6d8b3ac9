"""Mini summaries that fail: each failure tallied by its cause, the fifth one archiving its turn, an
empty turn or one archived in the export never sent, and a fault server's replies classified as a
summary call's. Real HTTP to tests/model_server.py and tests/fault_server.py, a real DuckDB file."""

from __future__ import annotations

import json
import socket

import pytest

from digest.mini_summaries import MAX_CHARS, fill_mini_summaries
from digest.synthesis import build_prompt as build_session_prompt
from digest.synthesis import raw_content
from digest.turns import canonical_order, compose_document
from resources.store import MiniSummaryLedger
from tests.conftest import make_limits
from tests.model_server import Behaviour, ModelServer
from tests.test_mini_summaries import SECRET, _add, _client, _fill, _fill_by, _policy, _row, _rows, _session


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


# --- failures and the archive -------------------------------------------------------------------


def test_a_timeout_is_counted_and_the_fifth_failure_archives_the_turn(store):
    _add(store, _session("s1", 1))
    policy = _policy(timeout_s=0.2, outer_timeout_s=5.0)
    with ModelServer(lambda received: Behaviour.hang(1.0)) as server:
        reports = [_fill(store, "s1", server.url, policy) for _ in range(6)]
    for run, report in enumerate(reports[:5], start=1):
        assert report.attempted == 1 and report.cause_tally()["timeout-inner"] == 1
        assert report.made_no_progress
        assert report.archived_after_failures == (["s1-t000"] if run == 5 else [])
    assert reports[5].pending == 0 and reports[5].attempted == 0, "an archived turn was tried again"
    assert len(server.chat_requests()) == 5
    state = _rows(store, "SELECT attempts, last_cause, archived_reason FROM mini_summary_state")
    assert state == [{"attempts": 5, "last_cause": "timeout-inner", "archived_reason": "generation-timeout"}]
    attempts = _rows(store, "SELECT outcome, error_text FROM attempts")
    assert [a["outcome"] for a in attempts] == ["timeout-inner"] * 5
    assert attempts[0]["error_text"].startswith("turn s1-t000: model call timed out")
    # Archived, the turn keeps its text and stays in the raw summary input.
    turns = canonical_order(store.sessions.load_turns(["s1"]))
    assert SECRET in build_session_prompt(raw_content(turns), turns)
    # Un-archived, it gets its five attempts back.
    assert store.mini_summaries.unarchive_turns(session_id="s1") == ["s1-t000"]
    assert [t.id for t in store.mini_summaries.pending_mini_summary_turns("s1")] == ["s1-t000"]
    assert _rows(store, "SELECT attempts, archived_at IS NULL AS live FROM mini_summary_state") == [
        {"attempts": 0, "live": True}
    ]


def _script_for(cause: str):
    return {
        "timeout-outer": lambda received: Behaviour.hang(1.0),
        "empty-output": lambda received: Behaviour.text(" \n\t "),
        "provider-error": lambda received: Behaviour.server_error(),
        "no-model": lambda received: Behaviour(status=404, error_body={"error": "model 'qwen3' not found"}),
    }[cause]


@pytest.mark.parametrize("cause", ["timeout-outer", "empty-output", "provider-error", "no-model"])
def test_each_failure_is_tallied_by_its_cause(store, cause):
    _add(store, _session("s1", 1))
    # The outer (wall-clock) timeout under the inner one here, so the outer one fires.
    policy = _policy(timeout_s=5.0, outer_timeout_s=0.3)
    with ModelServer(_script_for(cause)) as server:
        report = _fill(store, "s1", server.url, policy)
    assert report.cause_tally() == {c: int(c == cause) for c in report.cause_tally()}
    assert _rows(store, "SELECT outcome FROM attempts") == [{"outcome": cause}]
    assert _rows(store, "SELECT attempts, last_cause FROM mini_summary_state") == [{"attempts": 1, "last_cause": cause}]


def test_a_mini_summary_calls_attempt_is_its_in_flight_row_finished(store):
    """The row written before the call is the row finished (`digest.attempts.call_attempt`, as a
    summary's): one row per call, under the in-flight row's id, keeping what it said before the call
    (its deadline, the outer backstop, included), whatever the call's end."""
    _add(store, _session("s1", 3))

    class Watching(MiniSummaryLedger):
        def __init__(self, *args):
            super().__init__(*args)
            self.started, self.finished = [], []

        def start_attempt(self, attempt):
            self.started.append((super().start_attempt(attempt), attempt))
            return self.started[-1][0]

        def record_attempt(self, attempt, started=None):
            self.finished.append((started, attempt))
            super().record_attempt(attempt, started)

    def script(received):
        if "Prompt 0:" in received.prompt:
            return Behaviour.text("Kept record ids in Row.mjs.")
        return Behaviour.text(" ") if "Prompt 1:" in received.prompt else Behaviour.hang(1.0)

    ledger = Watching(store, "test-run")
    # The outer backstop (0.3 s) under the inner timeout, so the third call is abandoned.
    with ModelServer(script) as server:
        fill_mini_summaries(
            store.mini_summaries.pending_mini_summary_turns("s1"),
            _client(server.url),
            make_limits(),
            _policy(timeout_s=5.0, outer_timeout_s=0.3),
            ledger,
        )
    assert [started for started, _ in ledger.finished] == [started for started, _ in ledger.started]
    before = ("session_id", "stage", "tier", "prompt_bytes", "tokens_estimate", "model", "deadline_s")
    for (_, in_flight), (_, attempt) in zip(ledger.started, ledger.finished, strict=True):
        assert in_flight.outcome == "in-flight" and in_flight.deadline_s == pytest.approx(0.3)
        assert {f: getattr(attempt, f) for f in before} == {f: getattr(in_flight, f) for f in before}
    rows = _rows(
        store,
        "SELECT attempt_id, outcome, deadline_s, duration_s, coalesce(error_text, '') AS error_text FROM attempts ORDER BY 1",
    )
    assert [r["attempt_id"] for r in rows] == [started for started, _ in ledger.started]
    assert all(r["deadline_s"] == pytest.approx(0.3) for r in rows)
    by_outcome = {r["outcome"]: r for r in rows}
    assert set(by_outcome) == {"ok", "empty-output", "timeout-outer"}
    assert by_outcome["ok"]["error_text"] == ""
    assert by_outcome["empty-output"]["error_text"] == "turn s1-t001: the reply was empty"
    # An abandoned call is charged the time the run waited for it.
    assert by_outcome["timeout-outer"]["error_text"].startswith("turn s1-t002: no reply within the outer timeout")
    assert by_outcome["timeout-outer"]["duration_s"] >= 0.3


def test_a_server_that_is_not_there_is_no_model(store):
    _add(store, _session("s1", 2))
    report = _fill(store, "s1", _closed_port_url())
    assert report.cause_tally()["no-model"] == 2 and report.made_no_progress


def test_a_turn_with_no_content_is_archived_at_once_without_a_model_call(store):
    empty = _row("s1-empty", "s1", 5, document=compose_document("", f"{SECRET} only a thought", "  "))
    _add(store, _session("s1", 1) + [empty])
    with ModelServer(lambda received: Behaviour.mini(received)) as server:
        report = _fill(store, "s1", server.url)
    assert report.archived_no_content == ["s1-empty"]
    assert report.attempted == 1 and len(server.chat_requests()) == 1
    state = _rows(store, "SELECT turn_id, attempts, archived_reason FROM mini_summary_state")
    assert state == [{"turn_id": "s1-empty", "attempts": 0, "archived_reason": "no-content"}]
    assert store.mini_summaries.pending_mini_summary_turns("s1") == []
    assert {t.id for t in store.sessions.load_turns(["s1"])} == {"s1-t000", "s1-empty"}, (
        "archived turns stay in the raw input"
    )


def test_turns_archived_in_the_export_are_skipped_until_unarchived(store, monkeypatch, tmp_path, capsys):
    _add(store, [_row("s1-old", "s1", 0, "p", "t", "r", archived_at="2026-01-01T00:00:00Z")] + _session("s1", 1))
    assert [t.id for t in store.mini_summaries.pending_mini_summary_turns("s1")] == ["s1-t000"]
    # The CLI, in process, over the same DuckDB file.
    from app.cli import main

    monkeypatch.setenv("DIGEST_HOME", str(tmp_path))
    monkeypatch.setenv("DIGEST_DB_PATH", str(store.path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    main(["unarchive-turns", "s1-old", "s1-t000", "--json"])
    assert json.loads(capsys.readouterr().out) == {"unarchived": 1, "turn_ids": ["s1-old"]}
    assert sorted(t.id for t in store.mini_summaries.pending_mini_summary_turns("s1")) == ["s1-old", "s1-t000"]


# --- a fault server's replies -------------------------------------------------------------------


def _protocol_client(protocol: str, url: str):
    """The OpenAI-compatible client (`_client`) or Ollama's, at `url`."""
    from resources.model_clients import OllamaChatClient

    return _client(url) if protocol == "openai" else OllamaChatClient(url, "fake-model", 8192)


@pytest.mark.parametrize("protocol", ["openai", "ollama"])
def test_a_mini_summary_cut_at_the_output_cap_keeps_its_line_and_says_it_was_cut(store, protocol):
    """Unlike a summary's JSON, a line cut at the cap is still a line: thrown away, its model time
    would be lost (a ramble of SmolLM2 past 128 tokens is common); kept, the attempt says so."""
    from tests.fault_server import FaultServer

    # The fault server's reply is a summary of a token refresh in auth.py: this turn is that work.
    _add(
        store,
        [_row("s1-t000", "s1", 0, "Fix the token refresh in auth.py.", response="Fixed it; added a regression test.")],
    )
    with FaultServer("length-cut") as server:
        client = _protocol_client(protocol, server.url)
        report = _fill_by(store, "s1", client)
    assert len(report.generated) == 1 and report.cut_at_output_cap == 1
    assert 0 < len(report.generated[0][1]) <= MAX_CHARS
    (attempt,) = _rows(store, "SELECT outcome, error_text FROM attempts")
    assert attempt["outcome"] == "ok" and "cut at the output cap" in attempt["error_text"]


# Issue 22 (minor): a mini summary's failed call is classified as a summary call's is
# (`digest.friction.classify_error`); only the timeouts say which deadline and an absent server `no-model`.
@pytest.mark.parametrize("protocol", ["openai", "ollama"])
@pytest.mark.parametrize(
    ("fault", "outcome"),
    [
        ("huge", "token-budget-exceeded"),  # a 50 MB reply: was `unspecified`
        ("context-overflow", "context-overflow"),  # was `provider-error`
        ("server-error", "provider-error"),
    ],
)
def test_a_mini_summary_call_fails_with_the_summary_stages_classification(store, protocol, fault, outcome):
    from digest.friction import classify_error
    from digest.model_api import ModelError
    from tests.fault_server import FaultServer
    from tests.test_model_faults import SYMPTOM

    assert SYMPTOM[fault] == outcome  # what the summary stage files for the same fault
    _add(store, _session("s1", 1))
    with FaultServer(fault) as server:
        client = _protocol_client(protocol, server.url)
        # The summary stage's own path: the client raises a typed error, or flags the reply as cut.
        try:
            reply = client.chat("p", schema=None, max_output_tokens=128, timeout_s=10.0)
            assert reply.finish_reason == "length"
        except ModelError as error:
            assert classify_error(error) == outcome
        report = _fill_by(store, "s1", client)
    assert report.generated == [] and report.cause_tally()[outcome] == 1
    assert _rows(store, "SELECT outcome FROM attempts") == [{"outcome": outcome}]
    assert _rows(store, "SELECT last_cause FROM mini_summary_state") == [{"last_cause": outcome}]
    assert _rows(store, "SELECT count(*) AS n FROM mini_summaries") == [{"n": 0}]
