"""Per-turn mini summaries: real HTTP to tests/model_server.py, results in a real DuckDB file."""

from __future__ import annotations

import dataclasses

import pytest

from digest.mini_summaries import (
    ARCHIVE_JUNK,
    MAX_CHARS,
    MiniSummaryPolicy,
    build_prompt,
    fill_mini_summaries,
    mini_summary_limits,
    split_document,
)
from digest.prompts import MINI_SUMMARY_INSTRUCTION
from digest.scheduling import upgrade_due
from digest.summary_output import SessionSummaryOutput, SourceTier
from digest.synthesis import Route, SessionSummary
from digest.turns import compose_document
from resources.model_clients import OpenAIChatClient
from resources.store import DigestStore, MiniSummaryLedger
from resources.store.mini_summaries import judge_stored_mini_summaries, owe_upgrades_of_summaries_from_junk
from tests.conftest import make_limits
from tests.model_server import GOOD_SUMMARY, Behaviour, ModelServer

T0 = 1_760_000_000_000
SECRET = "SECRET-THOUGHT-7f3a"


def _row(turn_id, session_id, i, prompt="", thought="", response="", document=None, archived_at=None) -> dict:
    return {
        "id": turn_id,
        "session_id": session_id,
        "ts_ms": T0 + i * 60_000,
        "type": "agent-interaction",
        "prompt": prompt,
        "thought": thought,
        "response": response,
        "document": document if document is not None else compose_document(prompt, thought, response),
        "document_rebuilt": document is None,
        "agent": "claude-code",
        "agent_identity": "@neo-opus-ada",
        "model": "claude-opus-4",
        "user_id": None,
        "amount_tool_calls": None,
        "tools_used": None,
        "archived_at": archived_at,
        "archived_reason": "generation-timeout" if archived_at else None,
        "source_file": "test.jsonl",
        "source_line": i,
    }


def _session(session_id: str, count: int, response_bytes: int = 120) -> list[dict]:
    rows = []
    for i in range(count):
        response = (f"Step {i}: changed src/grid/Row.mjs so selection keeps record ids. " * 40)[:response_bytes]
        rows.append(
            _row(f"{session_id}-t{i:03d}", session_id, i, f"Prompt {i}: fix the grid", f"{SECRET} {i}", response)
        )
    return rows


def _add(store: DigestStore, rows: list[dict]) -> None:
    store.ingest.write_turns(rows)
    store.ingest.refresh_sessions({r["session_id"] for r in rows})


def _policy(**overrides) -> MiniSummaryPolicy:
    values = dict(budget_s=60.0, timeout_s=5.0, outer_timeout_s=10.0, max_attempts=5, fresh_reserve=10)
    values.update(overrides)
    return MiniSummaryPolicy(**values)


def _client(url: str) -> OpenAIChatClient:
    return OpenAIChatClient(url, "fake-model", schema_style="json_object")


def _fill(store: DigestStore, session_id: str, url: str, policy: MiniSummaryPolicy | None = None):
    return _fill_by(store, session_id, _client(url), policy)


def _fill_by(store: DigestStore, session_id: str, client, policy: MiniSummaryPolicy | None = None):
    """The session's pending mini summaries filled by `client` (any protocol's)."""
    return fill_mini_summaries(
        store.mini_summaries.pending_mini_summary_turns(session_id),
        client,
        make_limits(),
        policy or _policy(),
        MiniSummaryLedger(store, "test-run"),
    )


def _rows(store, sql):
    return store.query(sql).to_dict("records")


# --- generation ---------------------------------------------------------------------------------


def test_a_turn_another_run_summarized_meanwhile_costs_no_call(store):
    """Two fills of one session overlap when the model pool has room, each with the pending turns it
    read at its start: a turn the other run has done by the time it comes up is not asked again."""
    _add(store, _session("s1", 3))
    pending = store.mini_summaries.pending_mini_summary_turns("s1")
    other = MiniSummaryLedger(store, "other-run")

    def script(received):
        # While this run's first call is out, the other run does the rest.
        for turn in pending:
            if turn.prompt not in received.prompt:
                other.save_mini_summary(turn, "Changed src/grid/Row.mjs (the other run)", "m")
        return Behaviour.text("Changed src/grid/Row.mjs (this run)")

    with ModelServer(script) as server:
        report = _fill(store, "s1", server.url)
    assert len(server.chat_requests()) == 1 and report.attempted == 1 and report.done_by_another_run == 2
    texts = store.query("SELECT text, count(*) AS n FROM mini_summaries GROUP BY 1 ORDER BY 1").to_dict("records")
    assert texts == [
        {"text": "Changed src/grid/Row.mjs (the other run)", "n": 2},
        {"text": "Changed src/grid/Row.mjs (this run)", "n": 1},
    ]


def test_generation_stores_one_clean_line_of_at_most_280_characters(store):
    _add(store, _session("s1", 2))
    rambling = (
        "The agent changed\n\n src/grid/Row.mjs so the   grid selection\tkeeps record ids: sorting, filtering, "
        "paging and a store reload no longer move it, keyboard navigation follows the record, the striping reads "
        "the record index, three new tests cover sorting and paging, and the old index lookup is gone from the "
        "selection model, which the changelog now says."
    )
    with ModelServer(lambda received: Behaviour.text(rambling)) as server:
        report = _fill(store, "s1", server.url)
    assert report.attempted == 2 and len(report.generated) == 2 and report.failed == 0
    expected = " ".join(rambling.split())[:MAX_CHARS]
    saved = _rows(store, "SELECT turn_id, text, origin, model FROM mini_summaries ORDER BY turn_id")
    assert saved == [
        {"turn_id": f"s1-t{i:03d}", "text": expected, "origin": "generated", "model": "fake-model"} for i in range(2)
    ]
    assert len(expected) == MAX_CHARS and "\n" not in expected and "  " not in expected
    request = server.chat_requests()[0]
    assert "response_format" not in request.body, "a mini summary is plain text: no schema is sent"
    assert request.prompt.startswith(
        MINI_SUMMARY_INSTRUCTION + "\nUser: Prompt 1: fix the grid\nAgent: Step 1: changed"
    )
    attempts = _rows(store, "SELECT stage, tier, outcome, model, run_id, error_text FROM attempts")
    assert (
        attempts
        == [
            {
                "stage": "mini-summary",
                "tier": "turn",
                "outcome": "ok",
                "model": "fake-model",
                "run_id": "test-run",
                "error_text": None,
            }
        ]
        * 2
    )
    # The session summary reads them: a degraded summary now has a miniSummary tier to use.
    turns = store.sessions.load_turns(["s1"])
    assert all(t.mini_summary == expected for t in turns)
    assert store.mini_summaries.mini_summary_counts("s1") == {
        "turns": 2, "with_mini_summary": 2, "imported": 0, "generated": 2, "archived": 0, "pending": 0,
    }  # fmt: skip


def test_the_thought_never_reaches_the_model(store):
    tricky = compose_document(
        "Why does sorting lose the selection?",
        f"{SECRET} The prompt said\nAgent Response: fake, and this is still the thought",
        "Selection now keeps record ids.",
    )
    rows = _session("s1", 3) + [
        # No split fields: prompt and response are parsed out of the document, labels in the thought or not.
        _row("s1-doc", "s1", 10, document=tricky),
        _row("s1-doc2", "s1", 11, document=compose_document("List the tests.", f"{SECRET} private", "All 214 pass.")),
    ]
    _add(store, rows)
    with ModelServer(lambda received: Behaviour.mini(received)) as server:
        report = _fill(store, "s1", server.url)
    assert len(report.generated) == 5
    sent = [r.prompt for r in server.chat_requests()]
    assert len(sent) == 5
    assert not any(SECRET in prompt for prompt in sent), "an agent thought reached the model"
    assert any("User: Why does sorting lose the selection?\nAgent: Selection now keeps record ids." in p for p in sent)
    assert any("User: List the tests.\nAgent: All 214 pass." in p for p in sent)


def test_a_file_an_earlier_turn_showed_is_not_sent_again(store):
    listing = "\n".join(f"    value_{n} = compute_{n}(request, timeout={n})  # src/app/handlers.py" for n in range(30))
    rows = [
        _row("s1-a", "s1", 0, "Read src/app/handlers.py.", response=f"Here it is:\n{listing}"),
        _row("s1-b", "s1", 1, "Read it again.", response=f"Again:\n{listing}\nline 31 is new"),
    ]
    _add(store, rows)
    line = "Read src/app/handlers.py: value_7 = compute_7(request, timeout=7) among thirty such lines."
    with ModelServer(lambda received: Behaviour.text(line)) as server:
        report = _fill(store, "s1", server.url)
    assert len(report.generated) == 2
    sent = {r.prompt.split("\n")[1]: r.prompt for r in server.chat_requests()}
    assert "value_7 = compute_7" in sent["User: Read src/app/handlers.py."]
    again = sent["User: Read it again."]
    # The 30 lines the first turn showed are one marker; what is new is sent.
    assert "value_7" not in again and "[30 lines shown earlier in the session]" in again and "line 31 is new" in again


def test_split_document_takes_the_prompt_and_the_response_and_leaves_the_thought():
    assert split_document(compose_document("p", "t", "r")) == ("p", "r")
    # A response label quoted inside the thought: the response starts after the last label.
    assert split_document(compose_document("p", "t1\nAgent Response: t2", "r")) == ("p", "r")
    # A thought label quoted inside the prompt: the prompt is cut short, the thought stays out.
    assert split_document(compose_document("p1\nAgent Thought: p2", "t", "r")) == ("p1", "r")
    # An unlabelled document (another harness) holds no thought to strip: it is all response.
    assert split_document("free text from another harness") == ("", "free text from another harness")


def test_an_oversized_turn_is_cut_to_the_prompt_budget():
    limits = mini_summary_limits(make_limits(raw_cap_tokens=2000), _policy())
    max_bytes = int(limits.prompt_budget_tokens * limits.bytes_per_token)
    prompt = build_prompt("short question", "x" * 100_000, max_bytes=max_bytes)
    assert len(prompt.encode("utf-8")) <= max_bytes
    assert "User: short question\nAgent: xxx" in prompt and prompt.endswith("…")
    assert build_prompt("q", "a", max_bytes=max_bytes) == f"{MINI_SUMMARY_INSTRUCTION}\nUser: q\nAgent: a"


def test_imported_mini_summaries_are_kept_and_never_regenerated(store):
    _add(store, _session("s1", 3))
    store.ingest.write_imported_mini_summaries(
        [{"turn_id": "s1-t000", "session_id": "s1", "text": "Imported from Neo."}]
    )
    with ModelServer(lambda received: Behaviour.mini(received)) as server:
        report = _fill(store, "s1", server.url)
        again = _fill(store, "s1", server.url)
    assert report.pending == 2 and len(report.generated) == 2
    assert again.pending == 0 and again.attempted == 0
    assert len(server.chat_requests()) == 2
    assert not any("Prompt 0:" in r.prompt for r in server.chat_requests())
    saved = _rows(store, "SELECT turn_id, text, origin FROM mini_summaries ORDER BY turn_id")
    assert saved[0] == {"turn_id": "s1-t000", "text": "Imported from Neo.", "origin": "imported"}
    assert [r["origin"] for r in saved[1:]] == ["generated", "generated"]
    # A generated line written late (a concurrent run) never replaces an imported one.
    store.mini_summaries.save_generated_mini_summary("s1-t000", "s1", "late", "fake-model")
    assert _rows(store, "SELECT text FROM mini_summaries WHERE turn_id = 's1-t000'") == [{"text": "Imported from Neo."}]


def test_a_reply_judged_junk_archives_its_turn_at_once_and_keeps_its_words_in_the_attempt(store):
    """A junk line (SmolLM2's "I'm ready to continue ...") is not stored: the turn's own text stands for
    it everywhere a mini summary would, and the same model is not asked again."""
    _add(store, _session("s1", 2))
    junk = "I'm ready to continue with the next step. Please go ahead and continue with the next step."

    def script(received):
        return Behaviour.text(junk) if "Prompt 0:" in received.prompt else Behaviour.mini(received)

    with ModelServer(script) as server:
        report = _fill(store, "s1", server.url)
        again = _fill(store, "s1", server.url)
    assert report.archived_junk == ["s1-t000"] and [t for t, _ in report.generated] == ["s1-t001"]
    assert not report.made_no_progress and again.attempted == 0 and len(server.chat_requests()) == 2
    assert _rows(store, "SELECT turn_id FROM mini_summaries") == [{"turn_id": "s1-t001"}]
    assert _rows(store, "SELECT turn_id, archived_reason FROM mini_summary_state WHERE archived_at IS NOT NULL") == [
        {"turn_id": "s1-t000", "archived_reason": ARCHIVE_JUNK}
    ]
    (kept,) = _rows(store, "SELECT outcome, error_text FROM attempts WHERE error_text IS NOT NULL")
    assert kept["outcome"] == "ok" and kept["error_text"] == "turn s1-t000: judged junk (content-free: " + (
        "no identifier of the turn, 0 of its words): " + junk
    )
    # Un-archived (a better model configured), the turn is asked again.
    assert store.mini_summaries.unarchive_turns(turn_ids=["s1-t000"]) == ["s1-t000"]


def test_a_reply_of_the_prompts_markers_alone_is_junk_not_an_empty_reply(store):
    """Cleaned of the markers it copied, such a reply is empty; judged as written, it is junk: the
    turn is archived at once instead of being asked four more times."""
    _add(store, _session("s1", 1))
    markers = "[1 line shown earlier in the session] [2 lines shown earlier in the session]"
    with ModelServer(lambda received: Behaviour.text(markers)) as server:
        report = _fill(store, "s1", server.url)
    assert report.archived_junk == ["s1-t000"] and report.failed == 0 and not report.generated
    assert _rows(store, "SELECT count(*) AS n FROM mini_summaries") == [{"n": 0}]
    (attempt,) = _rows(store, "SELECT error_text FROM attempts")
    assert (
        attempt["error_text"]
        == f"turn s1-t000: judged junk (empty: fewer than 2 words besides the prompt's markers): {markers}"
    )


def test_the_stored_junk_mini_summaries_go_and_their_turns_are_archived(store):
    """Migration 24: the generated mini summaries stored before the verdict are judged once, the kept
    ones cleaned of the markers they copied; imported ones are the export's and stay."""
    _add(store, _session("s1", 3))
    store.ingest.write_imported_mini_summaries([{"turn_id": "s1-t002", "session_id": "s1", "text": "``` ```"}])
    ledger = MiniSummaryLedger(store, "r")
    pending = {t.id: t for t in store.mini_summaries.pending_mini_summary_turns("s1")}
    ledger.save_mini_summary(pending["s1-t000"], "[1 line shown earlier in the session] ``` ```", "m")
    ledger.save_mini_summary(
        pending["s1-t001"], "Prompt 1, fix [1 line shown earlier in the session] src/grid/Row.mjs", "m"
    )
    with store.file.transaction() as con:
        assert judge_stored_mini_summaries(con) == 1
    assert _rows(store, "SELECT turn_id, origin, text FROM mini_summaries ORDER BY 1") == [
        {"turn_id": "s1-t001", "origin": "generated", "text": "Prompt 1, fix src/grid/Row.mjs"},
        {"turn_id": "s1-t002", "origin": "imported", "text": "``` ```"},
    ]
    assert _rows(store, "SELECT turn_id, archived_reason FROM mini_summary_state WHERE archived_at IS NOT NULL") == [
        {"turn_id": "s1-t000", "archived_reason": ARCHIVE_JUNK}
    ]
    assert store.mini_summaries.pending_mini_summary_turns("s1") == []


def _degraded_summary(session_id: str, revision: str) -> SessionSummary:
    """A summary of a session over the raw cap, from a line a turn, as a run would have written it."""
    return SessionSummary(
        session_id=session_id, output=SessionSummaryOutput(**GOOD_SUMMARY), source_tier=SourceTier.MINI_SUMMARY,
        degraded=True, raw_canonical=False, memory_count=3, mini_summary_count=1, input_revision=revision,
        model="m", raw_tokens_estimate=9000, prompt_tokens_estimate=900, raw_cap_tokens=2000,
        route_reason=Route.OVER_RAW_CAP, first_activity_ms=None, last_activity_ms=None, participating_agents=[],
        models=[], total_tool_calls=0, tools_used=[], source_agent_identities=[],
    )  # fmt: skip


def test_a_degraded_summary_made_from_a_junk_mini_summary_is_owed_its_upgrade(store):
    """Migration 25: a summary that carried a mini summary 24 judged junk goes back to coverage step 0,
    so the sweep makes it again; one whose mini summaries all stay keeps its step."""
    for session_id in ("s1", "s2"):
        _add(store, _session(session_id, 3))
    ledger = MiniSummaryLedger(store, "r")
    pending = {t.id: t for s in ("s1", "s2") for t in store.mini_summaries.pending_mini_summary_turns(s)}
    ledger.save_mini_summary(pending["s1-t000"], "``` ``` ```", "m")
    for turn_id in ("s1-t001", "s2-t000"):
        ledger.save_mini_summary(pending[turn_id], "Prompt 1, fix src/grid/Row.mjs selection", "m")
    for session_id, minis in (("s1", ["s1-t000", "s1-t001"]), ("s2", ["s2-t000"])):
        revision = store.sessions.session_by_partition(session_id)["input_revision"]
        summary = dataclasses.replace(
            _degraded_summary(session_id, revision), mini_turn_ids=minis, covered_turn_ids=minis
        )
        store.summaries.write_summary(summary, run_id="r", coverage_step=2)
    with store.file.transaction() as con:
        assert judge_stored_mini_summaries(con) == 1
        assert owe_upgrades_of_summaries_from_junk(con) == 1
    steps = {r["session_id"]: r["coverage_step"] for r in _rows(store, "SELECT * FROM session_summaries")}
    assert steps == {"s1": 0, "s2": 2}
    # Every turn of s1 done (a mini summary, or archived without): made again, no junk line in it.
    ledger.save_mini_summary(pending["s1-t002"], "Prompt 2, fix src/grid/Row.mjs selection", "m")
    now_at = store.summaries.coverage_steps(["s1", "s2"])
    assert upgrade_due(steps["s1"], now_at["s1"]) and not upgrade_due(steps["s2"], now_at["s2"])


# --- the real model -----------------------------------------------------------------------------


@pytest.mark.embedded
def test_the_embedded_model_writes_a_mini_summary_for_a_real_turn(store):
    from resources.embedded_server import MODEL_ALIAS, EmbeddedServer

    _add(
        store,
        [
            _row(
                "grid-1",
                "grid-fix",
                0,
                "The grid's row selection breaks after sorting: selected rows jump to other records.",
                f"{SECRET} Selection is probably stored by row index instead of record id.",
                "Found it: RowSelectionModel keeps `selectedRows` as indexes. I changed it to keep record ids "
                "and map them back to rows in onStoreSort(); added a test that sorts and checks the selection.",
            )
        ],
    )
    with EmbeddedServer() as server:
        report = fill_mini_summaries(
            store.mini_summaries.pending_mini_summary_turns("grid-fix"),
            OpenAIChatClient(server.url, MODEL_ALIAS, schema_style="json_object"),
            make_limits(raw_cap_tokens=8192),
            _policy(timeout_s=120.0, outer_timeout_s=150.0),
            MiniSummaryLedger(store, "embedded"),
        )
    assert report.cause_tally() == dict.fromkeys(report.cause_tally(), 0), _rows(store, "SELECT * FROM attempts")
    (attempt,) = _rows(store, "SELECT outcome, error_text FROM attempts")
    assert attempt["outcome"] == "ok"
    if report.archived_junk:  # SmolLM2 writes junk more often than not (BENCHMARKS §40): its words are kept
        assert report.archived_junk == ["grid-1"] and not report.generated
        assert attempt["error_text"].startswith("turn grid-1: judged junk (")
        assert _rows(store, "SELECT count(*) AS n FROM mini_summaries") == [{"n": 0}]
    else:
        ((turn_id, text),) = report.generated
        assert turn_id == "grid-1" and 0 < len(text) <= MAX_CHARS and "\n" not in text
        assert _rows(store, "SELECT origin, model FROM mini_summaries") == [
            {"origin": "generated", "model": MODEL_ALIAS}
        ]
