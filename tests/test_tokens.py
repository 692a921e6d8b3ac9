"""Exact token counts near the cap: the tokenizer endpoints over real HTTP, the ledger's bytes per
token in a real DuckDB file, and the routing on the host's count."""

from __future__ import annotations

import socket

import pytest

from assets.summary_view import summary_view
from digest.attempts import Attempt
from digest.friction_report import calibrate
from digest.invariants import raw_cap_problems
from digest.settings import load_settings
from digest.synthesis import build_prompt, raw_content, summarize_session
from digest.tokens import (
    CHAT_TEMPLATE_MARGIN_TOKENS,
    DEFAULT_BYTES_PER_TOKEN,
    NEAR_CAP_HIGH,
    NEAR_CAP_LOW,
    TokenCount,
    conservative_bytes_per_token,
    near_bound,
    resolve_bytes_per_token,
)
from digest.turns import canonical_order
from resources.model_clients import OllamaChatClient, OpenAIChatClient
from resources.response_cache import CachedChatClient
from resources.store import RunLedger
from tests.conftest import make_limits, make_turns
from tests.model_server import Behaviour, ModelServer, fake_token_count

TEXT = "The grid's row selection breaks after sorting: selected rows jump to other records. " * 5


def _client(server: ModelServer) -> OpenAIChatClient:
    return OpenAIChatClient(server.url, "fake-model", schema_style="json_object")


def _paths(server: ModelServer) -> list[str]:
    return [r.path for r in server.tokenize_requests()]


# --- the tokenizer endpoints --------------------------------------------------------------------


def test_llama_cpp_servers_tokenize_is_asked_first_and_remembered():
    with ModelServer(tokenizers=("/tokenize",)) as server:
        client = _client(server)
        assert client.count_tokens(TEXT) == fake_token_count(TEXT)
        assert client.count_tokens("short") == fake_token_count("short")
    assert _paths(server) == ["/tokenize", "/tokenize"]
    assert server.tokenize_requests()[0].body == {"content": TEXT}


def test_llama_cpp_pythons_extras_tokenize_is_found_after_a_404_and_remembered():
    with ModelServer(tokenizers=("/extras/tokenize",)) as server:
        client = _client(server)
        assert client.count_tokens(TEXT) == fake_token_count(TEXT)
        assert client.count_tokens(TEXT) == fake_token_count(TEXT)
    # /tokenize answered 404 once; from then on only /extras/tokenize is asked.
    assert [r.path for r in server.requests] == ["/tokenize", "/extras/tokenize", "/extras/tokenize"]
    assert server.tokenize_requests()[1].body == {"input": TEXT, "model": "fake-model"}


def test_a_server_with_no_tokenizer_is_asked_once_then_never():
    with ModelServer(tokenizers=()) as server:
        client = _client(server)
        assert client.count_tokens(TEXT) is None
        assert client.count_tokens(TEXT) is None
    assert [r.path for r in server.requests] == ["/tokenize", "/extras/tokenize"]


def test_a_server_error_gives_none_and_the_next_count_asks_again():
    failing = {"on": True}

    def script(received):
        return Behaviour.server_error() if failing["on"] else Behaviour.reply()

    with ModelServer(script=script, tokenizers=("/tokenize",)) as server:
        client = _client(server)
        assert client.count_tokens(TEXT) is None  # a 5xx fails this count only: not remembered
        failing["on"] = False
        assert client.count_tokens(TEXT) == fake_token_count(TEXT)
    assert _paths(server) == ["/tokenize", "/tokenize"]


def test_an_unreachable_server_gives_none():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again at once: nothing listens there
    assert OpenAIChatClient(f"http://127.0.0.1:{port}", "m").count_tokens(TEXT) is None


def test_ollama_has_no_tokenizer_and_the_cache_delegates(store):
    with ModelServer() as server:
        assert OllamaChatClient(server.url, "llama3.2", num_ctx=8192).count_tokens(TEXT) is None
        cached = CachedChatClient(_client(server), store.cache, {"provider": "openai"})
        assert cached.count_tokens(TEXT) == fake_token_count(TEXT)
    assert _paths(server) == ["/tokenize"]


@pytest.mark.embedded
def test_the_embedded_server_tokenizes_at_extras_tokenize_within_the_chat_margin():
    from resources.embedded_server import MODEL_ALIAS, EmbeddedServer

    with EmbeddedServer() as server:
        client = OpenAIChatClient(server.url, MODEL_ALIAS, schema_style="json_object")
        counted = client.count_tokens(TEXT)
        reply = client.chat(TEXT, schema=None, max_output_tokens=1, timeout_s=120)
    assert counted is not None and counted > 0
    # The chat template's tokens: what the server counts beyond the prompt's text.
    assert 0 <= reply.prompt_tokens - counted <= CHAT_TEMPLATE_MARGIN_TOKENS


# --- the policy ---------------------------------------------------------------------------------


def test_resolve_bytes_per_token_prefers_the_pin_then_the_ledger_then_the_default():
    assert resolve_bytes_per_token(3.2, (4.1, 40)) == (3.2, "pinned")
    assert resolve_bytes_per_token(None, (4.1, 40)) == (4.1, "ledger")
    assert resolve_bytes_per_token(None, None) == (DEFAULT_BYTES_PER_TOKEN, "default")
    with pytest.raises(ValueError, match="positive"):
        resolve_bytes_per_token(0.0, None)
    with pytest.raises(ValueError, match="source"):
        TokenCount(10, "guess")


def test_the_band_edges():
    bound = 2000
    assert near_bound(int(NEAR_CAP_LOW * bound), bound) and not near_bound(int(NEAR_CAP_LOW * bound) - 1, bound)
    assert near_bound(int(NEAR_CAP_HIGH * bound), bound) and not near_bound(int(NEAR_CAP_HIGH * bound) + 1, bound)


def test_the_quantile_is_low_and_needs_ten_samples():
    assert conservative_bytes_per_token([(4000, 1000)] * 9) is None
    # Ratios 3.0, 3.1, ..., 4.9: the 10th percentile of 20 is the 2nd lowest (rank floor(0.1 * 19) = 1).
    samples = [(round((3.0 + i / 10) * 1000), 1000) for i in range(20)]
    assert conservative_bytes_per_token(reversed(samples)) == (pytest.approx(3.1), 20)


# --- the ledger's bytes per token -------------------------------------------------------------


def _attempt(prompt_bytes, prompt_tokens, model="smollm2", host=None, outcome="ok", cached=False) -> Attempt:
    return Attempt(
        session_id="s", stage="session-summary", tier="raw", prompt_bytes=prompt_bytes,
        tokens_estimate=prompt_bytes // 3, outcome=outcome, duration_s=1.0, model=model,
        prompt_tokens=prompt_tokens, completion_tokens=10, cached=cached, host=host,
    )  # fmt: skip


def test_the_ledgers_bytes_per_token_is_the_hosts_low_quantile_of_good_calls(store):
    # Eleven good calls on host "cpu" at 4.0-5.0 bytes a token, and one old row with no host at 3.5.
    for i in range(11):
        store.attempts.record_attempt(_attempt(8000 + 200 * i, 2000, host="cpu"))
    store.attempts.record_attempt(_attempt(7000, 2000, host=None))
    # None of these counts, each at 2 bytes a token that would pull the quantile down: another host,
    # another model, a failure, a cache replay, a short prompt; nor a call with no count.
    store.attempts.record_attempt(_attempt(8000, 4000, host="gpu"))
    store.attempts.record_attempt(_attempt(8000, 4000, model="qwen", host="cpu"))
    store.attempts.record_attempt(_attempt(8000, 4000, host="cpu", outcome="parse-failure"))
    store.attempts.record_attempt(_attempt(8000, 4000, host="cpu", cached=True))
    store.attempts.record_attempt(_attempt(4000, 2000, host="cpu"))  # under 4 KiB
    store.attempts.record_attempt(_attempt(8000, None, host="cpu"))
    store.attempts.record_attempt(_attempt(8000, 0, host="cpu"))
    value, samples = store.tokens.calibrated_bytes_per_token("cpu", "smollm2")
    # 12 samples (3.5, 4.0, ..., 5.0): rank floor(0.1 * 11) = 1, the second lowest.
    assert (value, samples) == (pytest.approx(4.0), 12)
    assert store.tokens.calibrated_bytes_per_token("gpu", "smollm2") is None  # its one call and the hostless one
    assert store.tokens.calibrated_bytes_per_token("cpu", "qwen") is None


def test_the_ledger_reads_only_the_recent_calls(store):
    # 500 calls at 3.0 bytes a token, then 500 at 4.5: only the last 500 count.
    with store.file.connect() as con:
        con.execute(
            """INSERT INTO attempts (session_id, stage, tier, model, prompt_bytes, tokens_estimate, prompt_tokens,
                   completion_tokens, duration_s, outcome, suspected_truncation, cached, created_at, host)
               SELECT 's', 'session-summary', 'raw', 'smollm2', CASE WHEN i < 500 THEN 6000 ELSE 9000 END, 2000,
                   2000, 10, 1.0, 'ok', false, false, TIMESTAMPTZ '2026-11-20 09:00:00+00' + to_seconds(i), 'cpu'
               FROM range(1000) r(i) ORDER BY i"""
        )
    assert store.tokens.calibrated_bytes_per_token("cpu", "smollm2") == (pytest.approx(4.5), 500)
    # The friction report shows the number the router applies (3.0 would be the mean's neighbour).
    report = calibrate(store.reports.friction_report_rows()["attempts"], load_settings({}))
    assert (report["smollm2"].bytes_per_token, report["smollm2"].bytes_per_token_samples) == (pytest.approx(4.5), 500)


# --- routing on the host's count ----------------------------------------------------------------


def _raw_bytes(turns) -> int:
    ordered = canonical_order(turns)
    return len(build_prompt(raw_content(ordered), ordered).encode("utf-8"))


def test_a_session_over_the_cap_by_estimate_that_fits_by_count_goes_raw(store):
    turns = make_turns("near", 14)  # 6.3 KB: 2113 estimated tokens at 3 bytes, 1811 counted at 3.5
    limits = make_limits(raw_cap_tokens=2000)
    text = "x" * _raw_bytes(turns)  # the same size: the estimate and the test tokenizer count bytes
    assert limits.estimate_tokens(text) > 2000 >= fake_token_count(text) + CHAT_TEMPLATE_MARGIN_TOKENS
    with ModelServer() as server:
        # Without a tokenizer: degraded on the estimate, as before.
        before = summarize_session(turns, _client(server), limits, RunLedger(store, "before"))
        assert (before.summary.source_tier, before.route_reason) == ("turnCards", "over-raw-cap")
        assert (before.summary.raw_tokens_source, before.summary.raw_tokens_counted) == ("default", None)
        assert _paths(server) == []
        client = _client(server)
        after = summarize_session(turns, client, limits, RunLedger(store, "after"), count_tokens=client.count_tokens)
    summary = after.summary
    assert (summary.source_tier, summary.route_reason) == ("raw", "within-cap")
    counted = fake_token_count(text) + CHAT_TEMPLATE_MARGIN_TOKENS
    assert (summary.raw_tokens_source, summary.raw_tokens_counted) == ("tokenizer", counted)
    assert summary.raw_tokens_estimate > 2000  # the estimate stays what it was
    # Stored and shown with the summary; the cap check reads the count it was routed on.
    store.summaries.write_summary(summary, run_id="after")
    row = store.summaries.summary_row("near")
    assert (row["raw_tokens_source"], row["raw_tokens_counted"]) == ("tokenizer", counted)
    metadata = summary_view(row)
    assert (metadata["raw_tokens_source"], metadata["raw_tokens_counted"]) == ("tokenizer", counted)
    assert raw_cap_problems(row) == []
    assert raw_cap_problems({**row, "raw_tokens_counted": 2001}) == [
        "raw prompt of 2001 counted tokens was sent over the raw cap 2000"
    ]


def test_a_session_within_the_cap_by_estimate_over_it_by_count_is_degraded(store):
    turns = make_turns("dense", 20)  # 8.7 KB: 1898 estimated at a calibrated 4.6 bytes, 2494 counted
    limits = make_limits(raw_cap_tokens=2000, bytes_per_token=4.6, bytes_per_token_source="ledger")
    with ModelServer() as server:
        client = _client(server)
        result = summarize_session(turns, client, limits, RunLedger(store, "r"), count_tokens=client.count_tokens)
    summary = result.summary
    assert summary.raw_tokens_estimate <= 2000
    assert (summary.source_tier, summary.route_reason, summary.raw_tokens_source) == (
        "turnCards",
        "over-raw-cap",
        "tokenizer",
    )
    assert all(t.document not in r.prompt for r in server.chat_requests() for t in turns)
    note = store.query("SELECT note, bound FROM friction_events").to_dict("records")
    assert note == [
        {
            "note": f"pre-routed to the degraded summary: raw count {summary.raw_tokens_counted} tokens (host "
            f"tokenizer + {CHAT_TEMPLATE_MARGIN_TOKENS} for the chat template) > over-raw-cap 2000",
            "bound": "over-raw-cap",
        }
    ]


def test_the_tokenizer_is_asked_only_near_the_bound_and_a_failure_routes_on_the_estimate(store):
    small = make_turns("small", 2)  # ~1 KB: 330 estimated tokens, under 0.6 x 2000
    near = make_turns("near", 14)
    limits = make_limits(raw_cap_tokens=2000, bytes_per_token_source="ledger")
    with ModelServer() as server:
        client = _client(server)
        result = summarize_session(small, client, limits, RunLedger(store, "r"), count_tokens=client.count_tokens)
        assert result.summary.raw_tokens_source == "ledger" and _paths(server) == []
    with ModelServer(tokenizers=()) as server:
        client = _client(server)
        result = summarize_session(near, client, limits, RunLedger(store, "r"), count_tokens=client.count_tokens)
    assert (result.summary.route_reason, result.summary.raw_tokens_source) == ("over-raw-cap", "ledger")
    assert result.summary.raw_tokens_counted is None
