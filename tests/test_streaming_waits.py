"""Streamed model calls that wait out a window: a steady call longer than its stall window, stalls
before and after the first piece, keep-alive pings, chunks without text, a trickle cut at its ceiling. They run on the
real clock (0.5-1.2 s windows), so they sit in the integration tier; the rest of the streaming
tests are in test_streaming.py."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from digest.model_api import ModelStalled, ModelTimeout
from digest.pacing import CallPlan, was_progressing
from tests.fault_server import FaultServer
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer
from tests.test_streaming import PROTOCOLS, STALL_S, _caught, _chat, _client

# What a give-up may take past its window: the watchdog, the socket shutdown, a loaded 2-core host.
SLACK_S = 0.8


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_slow_but_steady_call_longer_than_its_stall_window_succeeds(protocol):
    # The prompt takes 0.4 s, each piece 0.05 s: about 1 s in all, twice the stall window.
    steady = dataclasses.replace(Behaviour.reply(), first_piece_s=0.4, piece_gap_s=0.05, piece_chars=12)
    with ModelServer(lambda received: steady) as server:
        reply = _chat(_client(protocol, server.url), stall_s=STALL_S)
    assert json.loads(reply.text) == GOOD_SUMMARY
    assert reply.duration_s > STALL_S


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_stall_before_the_first_piece_is_given_up_at_the_stall_window(protocol):
    with FaultServer("stream-stall-first") as server:
        error = _caught(lambda: _chat(_client(protocol, server.url), timeout_s=10.0))
        time.sleep(0.1)
    assert type(error) is ModelStalled and isinstance(error, ModelTimeout)
    assert STALL_S <= error.duration_s < STALL_S + SLACK_S
    assert error.first_token_s is None
    # The client closed the connection at the stall point: the server saw it go.
    [gone] = server.gone_after_s
    assert gone is not None and gone < STALL_S + SLACK_S


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_stall_mid_stream_is_given_up_and_the_stream_closed(protocol):
    with FaultServer("stream-stall-mid") as server:
        error = _caught(lambda: _chat(_client(protocol, server.url), timeout_s=10.0))
        time.sleep(0.1)
    assert type(error) is ModelStalled
    assert STALL_S <= error.duration_s < STALL_S + SLACK_S
    assert error.first_token_s is not None and error.first_token_s < STALL_S
    assert server.gone_after_s[0] is not None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_keep_alive_pings_alone_are_no_progress(protocol):
    with FaultServer("stream-pings", gap_s=0.1) as server:
        error = _caught(lambda: _chat(_client(protocol, server.url), timeout_s=10.0))
        time.sleep(0.1)
    assert type(error) is ModelStalled and error.duration_s < STALL_S + SLACK_S
    assert server.gone_after_s[0] is not None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_chunks_without_text_are_no_progress(protocol):
    """SSE `{"choices": [{"delta": {}}]}` / Ollama `{"done": false}` with empty content, forever: the
    call stalls at its window (it ran to the ceiling, "still progressing", sparing its host), and
    counts against its host."""
    with FaultServer("stream-empty", gap_s=0.05) as server:
        error = _caught(lambda: _chat(_client(protocol, server.url), timeout_s=10.0))
        time.sleep(0.1)
    assert type(error) is ModelStalled and not was_progressing(error)
    assert STALL_S <= error.duration_s < STALL_S + SLACK_S
    assert error.first_token_s is None
    assert CallPlan(10.0, STALL_S, measured=True, at_ceiling=True).host_failure(error)
    assert server.gone_after_s[0] is not None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_trickle_is_cut_at_the_ceiling_as_progressing(protocol):
    with FaultServer("stream-trickle", gap_s=0.15) as server:
        error = _caught(lambda: _chat(_client(protocol, server.url), timeout_s=1.2, stall_s=STALL_S))
        time.sleep(0.1)
    assert type(error) is ModelTimeout and error.progressing
    assert 1.2 <= error.duration_s < 1.2 + SLACK_S
    assert error.first_token_s is not None
    assert server.gone_after_s[0] is not None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_without_a_stall_window_a_stall_runs_to_the_ceiling_not_progressing(protocol):
    with FaultServer("stream-stall-first") as server:
        error = _caught(lambda: _chat(_client(protocol, server.url), timeout_s=0.8, stall_s=None))
    assert type(error) is ModelTimeout and not error.progressing
    assert 0.8 <= error.duration_s < 0.8 + SLACK_S
