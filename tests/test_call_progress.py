"""A long model call's progress line for the run log (`resources/model_clients/progress.py`): the
pieces a real streamed call receives over HTTP are counted, and the line is due every `every_s`."""

from __future__ import annotations

import math
import time

import pytest

from resources.model_clients import OllamaChatClient, OpenAIChatClient
from resources.model_clients.progress import CallProgress
from tests.model_server import Behaviour, ModelServer

PROTOCOLS = ("openai", "ollama")


def _client(protocol: str, url: str, progress: CallProgress):
    client = (
        OpenAIChatClient(url, "m", schema_style="json_object")
        if protocol == "openai"
        else OllamaChatClient(url, "m", num_ctx=4096)
    )
    client.progress = progress
    return client


def test_the_line_is_due_every_period_and_says_pieces_and_seconds():
    progress = CallProgress(lambda line: None, every_s=30.0)
    assert progress.line(time.monotonic() + 100) is None  # no call out
    progress.begin()
    start = time.monotonic()
    assert progress.line(start + 10) is None
    assert progress.line(start + 31) == "model call in progress: 31 s, no piece received yet"
    assert progress.line(start + 40) is None  # 9 s after the last line
    progress.first_piece_s, progress.pieces = 35.0, 120
    assert progress.line(start + 62) == "model call in progress: 62 s, 120 pieces received (the first after 35.0 s)"
    progress.end()
    assert progress.line(start + 200) is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_streamed_call_counts_its_pieces_and_logs_while_it_waits(protocol):
    lines: list[str] = []
    progress = CallProgress(lines.append, every_s=0.05)
    behaviour = Behaviour.reply()
    behaviour.first_piece_s = 0.3  # the prompt's time: the progress thread logs meanwhile
    with ModelServer(lambda received: behaviour) as server, progress.ticking():
        reply = _client(protocol, server.url, progress).chat(
            "Summarize.", schema=None, max_output_tokens=256, timeout_s=30.0, stall_s=None
        )
    assert progress.pieces == math.ceil(len(reply.text) / behaviour.piece_chars)
    assert progress.first_piece_s is not None and progress.first_piece_s >= 0.3
    assert lines and "no piece received yet" in lines[0]
    assert progress.line(time.monotonic() + 100) is None  # the call has ended: nothing more to say
