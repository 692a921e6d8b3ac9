"""The trajectory reader on SWE-agent 0.7 and 1.1 and mini-SWE-agent 1.x and 2.0 files
(tests/fixtures/harnesses/swe-agent/, mini-swe-agent/): the demonstration is not the task, a file
of `history` alone and a bare message list are read, and mini-SWE-agent 2's message times are kept."""

from __future__ import annotations

import json

from digest.card import CardTurn, build_card
from digest.facts import turn_fact_rows
from digest.ingest import discover
from digest.readers import file_kind
from tests.harness_fixtures import FIXTURES, read_file, turns

SWE = FIXTURES / "swe-agent"
MINI = FIXTURES / "mini-swe-agent"
ISSUE = "TimeSeries: misleading exception when required column check fails"


def test_the_demonstration_is_skipped_and_the_issue_is_the_task():
    got = turns(SWE / "0.7" / "astropy__astropy-13033.traj")
    assert len(got) == 3 and ISSUE in got[0]["prompt"]
    assert "demonstration" not in " ".join(t["document"] for t in got)  # 20 KB of another task
    assert got[0]["model"] == "gpt4" and got[0]["project"] == "astropy/astropy"
    assert {t["agent"] for t in got} == {"swe-agent"}


def test_a_trajectory_of_history_alone_is_read_from_it():
    path = SWE / "1.1-history-only" / "astropy__astropy-13033.traj"
    assert file_kind(path) == "trajectory" and discover([path.parent]) == [path]
    first, second = turns(path)
    assert ISSUE in first["prompt"] and "demonstration" not in first["document"]
    assert (
        first["thought"] == "Let me look at the check."
        and "[tool open] open astropy/timeseries/core.py 77" in first["response"]
    )
    assert "(103 lines total)" in first["response"] and second["response"].endswith("[output] File updated.")
    assert json.loads(second["tools_used"]) == ["edit"] and second["prompt"] == ""
    assert first["model"] == "claude-sonnet-4-20250514" and first["project"] == "https://github.com/astropy/astropy"
    assert first["agent"] == "swe-agent" and first["ts_ms"] is None


def test_a_bare_message_list_is_read_as_mini_swe_agents():
    path = MINI / "1.x-bare-list" / "requests-4498.traj.json"
    assert file_kind(path) == "trajectory" and discover([path.parent]) == [path]
    got = turns(path)
    assert len(got) == 2 and "IndexError instead of InvalidURL" in got[0]["prompt"]
    assert "string index out of range" in got[0]["response"] and {t["agent"] for t in got} == {"mini-swe-agent"}
    assert "helpful assistant" not in got[0]["document"] and [t["ts_ms"] for t in got] == [None, None]


def test_mini_swe_agent_2s_message_times_are_the_turns_times():
    got = turns(MINI / "2.0" / "requests-4498.traj.json")
    assert [t["ts_ms"] for t in got] == [1_761_000_000_250, 1_761_000_060_250]  # epoch seconds, read as such
    assert got[0]["model"] == "gpt-5-mini" and got[0]["project"] is None
    assert got[1]["response"].endswith("[exit] diff --git a/requests/models.py b/requests/models.py")


def test_a_run_that_ends_before_any_reply_keeps_its_exit_as_the_outcome_not_the_prompt():
    """mini-SWE-agent 2 ends a run whose model call failed with an `exit` message of the error's
    text: the harness's words, kept as how the run ended (`[exit]`, as a finished run's), never the task's."""
    [turn] = turns(MINI / "2.0" / "requests-4498-timeout.traj.json")
    assert turn["prompt"].endswith("raises IndexError instead of InvalidURL.")
    assert turn["response"] == (
        "[exit] litellm.Timeout: APITimeoutError - Request timed out. Error_str: Request timed out."
    )
    # Its card asks what the task asked, and ends on the harness's error.
    card = build_card({"session_id": turn["session_id"]}, [CardTurn(turn["id"], 1, turn["prompt"], turn["response"])],
                      turn_fact_rows([turn]))  # fmt: skip
    assert [a.text for a in card.asks] and "litellm" not in " ".join(a.text for a in card.asks)
    assert "litellm.Timeout" in card.outcome.text


def test_a_message_time_out_of_range_rejects_the_file_with_its_reason(tmp_path):
    doc = json.loads((MINI / "2.0" / "requests-4498.traj.json").read_text())
    doc["messages"][2]["extra"]["timestamp"] = 253_402_300_800  # 10000-01-01 in epoch seconds
    path = tmp_path / "late.traj.json"
    path.write_text(json.dumps(doc, indent=2))
    [reject] = [r for r in read_file(path) if r.outcome == "reject"]
    assert reject.reason.startswith(
        "bad-timestamp: messages[2].extra.timestamp: timestamp 253402300800 is out of range"
    )
