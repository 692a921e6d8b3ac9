"""A server's token counts are checked against the prompt's bytes before they measure the host: a
server that says `prompt_tokens: 1` for a 5.5 KB prompt (or a million) is kept in the ledger as it
said, and left out of the host's speed, its bytes per token and the auto raw cap, which the friction
report says. Real summary calls, streamed and not, to a local server lying in the exact protocol."""

from __future__ import annotations

import dataclasses

import pytest

from digest.circuit import CircuitPolicy
from digest.friction_report import build_report, render_markdown
from digest.hosts import DEFAULT_HOST
from digest.pacing import MIN_AUTO_CAP_TOKENS
from digest.settings import load_settings
from digest.synthesis import summarize_session
from digest.tokens import CALIBRATION_MIN_SAMPLES, plausible_prompt_tokens
from resources.model_clients import OpenAIChatClient
from resources.store import RunLedger
from tests.conftest import make_limits, make_turns
from tests.model_server import Behaviour, ModelServer

CALLS = CALIBRATION_MIN_SAMPLES  # enough for a bytes per token, were the counts believed


def test_the_band_is_bytes_per_token_from_one_to_eight_the_chat_template_aside():
    assert plausible_prompt_tokens(5500, 5500 // 4)
    assert plausible_prompt_tokens(5504, 5504 // 8) and not plausible_prompt_tokens(5504, 5504 // 8 - 1)
    assert plausible_prompt_tokens(10, 40)  # a short prompt in a chat template
    assert not plausible_prompt_tokens(5500, 1) and not plausible_prompt_tokens(5500, 1_000_000)
    assert not plausible_prompt_tokens(5500, None)


@pytest.mark.parametrize(
    ("lie", "streams"), [(1, True), (1_000_000, False)], ids=["too-low-streamed", "too-high-whole"]
)
def test_a_server_lying_about_its_prompt_count_measures_nothing(store, tmp_path, lie, streams):
    limits = make_limits(raw_cap_tokens=8000)  # the raw path, no tokenizer asked
    with ModelServer() as server:
        server.script = lambda received: dataclasses.replace(
            Behaviour.reply(),
            prompt_tokens=lie,
            first_piece_s=0.03,
            piece_gap_s=0.002,
            piece_chars=16,
            delay_s=0.0 if streams else 0.05,  # a whole reply's time: what its one rate is measured over
            streams=streams,
        )
        client = OpenAIChatClient(server.url, "liar", schema_style="json_object")
        ledger = RunLedger(store, "lying-run", host=DEFAULT_HOST)
        for i in range(CALLS):
            result = summarize_session(make_turns(f"s{i}", 3, doc_bytes=1700), client, limits, ledger)
            assert result.summary is not None and result.summary.source_tier == "raw"

    attempts = store.query("SELECT prompt_bytes, prompt_tokens, tokens_estimate FROM attempts").to_dict("records")
    assert len(attempts) == CALLS and all(a["prompt_bytes"] > 5000 for a in attempts)
    assert {a["prompt_tokens"] for a in attempts} == {lie}  # the ledger keeps what the server said
    # The host's speed counts each prompt by its estimate; no bytes per token comes of the lies.
    samples = store.speed.host_samples(DEFAULT_HOST, "liar")
    assert sorted(s.prompt_tokens for s in samples) == sorted(a["tokens_estimate"] for a in attempts)
    assert store.tokens.calibrated_bytes_per_token(DEFAULT_HOST, "liar") is None
    # The auto cap follows the host's real speed (fast here), not a prompt rate of 1 token a call.
    cap = store.speed.auto_raw_cap(DEFAULT_HOST, "liar", 120.0, 512, 6144)
    assert cap is not None and cap.cap_tokens > MIN_AUTO_CAP_TOKENS

    rows = store.reports.friction_report_rows()
    settings = load_settings({"DIGEST_HOME": str(tmp_path / "home")})
    report = build_report(rows["events"], rows["attempts"], rows["summaries"], settings, CircuitPolicy())
    assert report.numbers()["implausible_counts"] == CALLS
    assert report.calibrations["liar"] is None or report.calibrations["liar"].bytes_per_token is None
    markdown = render_markdown(report)
    assert "Server counts ignored" in markdown and f"| {lie} |" in markdown
