"""A busy CPU host, end to end over real HTTP: a host slower than the configured timeout costs at
most a give-up or two, not a turn each, and stays in rotation (issue: slow is not stuck)."""

from __future__ import annotations

import pytest

from digest.circuit import CircuitPolicy, CircuitState
from digest.mini_summaries import fill_mini_summaries
from digest.scheduling import now_ms
from resources.bindings import ChatModelResource
from resources.model_hosts import ModelHosts
from resources.store import MiniSummaryLedger
from tests.conftest import make_limits
from tests.model_server import Behaviour, ModelServer
from tests.test_mini_summaries import _add, _policy, _rows, _session

TURNS = 5
ANSWER_S = 3.0  # every call takes this long, over the configured 2 s


def _hosts(provider: str, url: str) -> ModelHosts:
    limits = make_limits()
    resource = ChatModelResource(
        provider=provider, model_url=url, model_name="fake-model", context_limit_tokens=limits.context_limit_tokens,
        safe_limit_tokens=limits.safe_limit_tokens, raw_cap_tokens=limits.raw_cap_tokens,
        bytes_per_token=limits.bytes_per_token, summary_timeout_s=limits.timeout_s,
        summary_max_output_tokens=limits.max_output_tokens,
    )  # fmt: skip
    return ModelHosts(resource)


# Nothing at all for 3 s, then the whole answer: the hardest case for a stall window of 2 s.
SLOW = {
    "streamed": Behaviour(
        content="Changed src/grid/Row.mjs so the selection keeps record ids.", first_piece_s=ANSWER_S
    ),
    "not streamed": Behaviour(
        content="Changed src/grid/Row.mjs so the selection keeps record ids.", delay_s=ANSWER_S, streams=False
    ),
}


@pytest.mark.parametrize("provider", ["openai", "ollama"])
@pytest.mark.parametrize("mode", list(SLOW))
def test_a_host_slower_than_the_configured_timeout_fills_a_session_with_at_most_two_give_ups(store, provider, mode):
    _add(store, _session("s1", TURNS))
    policy = _policy(timeout_s=2.0, outer_timeout_s=3.0, budget_s=600.0)
    circuit = CircuitPolicy(failure_threshold=2)  # two host failures in a row would open it
    with ModelServer(lambda received: SLOW[mode]) as server:
        model = _hosts(provider, server.url)
        report = fill_mini_summaries(
            store.mini_summaries.pending_mini_summary_turns("s1"),
            model.client(),
            model.limits(),
            policy,
            MiniSummaryLedger(store, "busy", host="default", circuit=circuit),
            pacer=model.pacer(store, None, policy.timeout_s),
        )
    given_up = [a for a in _rows(store, "SELECT outcome FROM attempts") if a["outcome"].startswith("timeout")]
    assert len(report.generated) == TURNS, report.cause_tally()
    assert len(given_up) <= 2, given_up
    assert store.mini_summaries.pending_mini_summary_turns("s1") == []
    circuits = store.hosts.host_circuits()
    assert "default" not in circuits or circuits["default"].state(now_ms()) == CircuitState.CLOSED
    # The ledger measured the host: the next run paces by it from its first call.
    assert model.pacer(store, None, policy.timeout_s).speed is not None
