"""What happens to junk (issue 29): a raw summary whose verdict a retry can fix is tried once more on
the degraded route, a junk summary never replaces a current ok one, and the verdict shows on the
partition, in status, the friction report, the demo's lines and a failing asset check. Real HTTP to
the local model server (answering an echo or a template), a real DuckDB file, a real Dagster instance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import AssetKey, instance_for_test
from rich.console import Console

from app.console import _render_demo
from digest.archive_read import validate_bundle
from digest.circuit import CircuitPolicy
from digest.friction_report import build_report, junk_rows, render_markdown
from digest.ingest import ingest_paths
from digest.settings import load_settings
from digest.synthesis import RETRIED_VERDICTS, Route, summarize_session
from digest.turns import input_revision
from resources.model_clients import OpenAIChatClient
from resources.store import DigestStore, RunLedger
from tests.bundles import write_bundle
from tests.conftest import make_limits, make_turns
from tests.model_server import FAITHFUL_SUMMARY, GOOD_SUMMARY, TEMPLATE_SUMMARY, Behaviour, ModelServer
from tests.test_imported_summaries import exported_summary, write_summaries
from tests.test_pipeline import _defs, _ingest

FAITHFUL = FAITHFUL_SUMMARY


def _store(tmp_path, turns) -> DigestStore:
    store = DigestStore(tmp_path / "digest.duckdb")
    store.migrate()
    ingest_paths([write_bundle(tmp_path / "bundle", turns)], store)
    return store


def _summarize(store: DigestStore, session_id: str, script, run_id: str = "r1"):
    with ModelServer(script) as server:
        client = OpenAIChatClient(server.url, "fake-model", schema_style="json_object")
        result = summarize_session(
            store.sessions.load_turns([session_id]), client, make_limits(), RunLedger(store, run_id)
        )
    return result, server


def _first_echo_then(reply: dict):
    """An echo of the raw prompt, then `reply` to anything else (the degraded retry)."""
    return lambda received: (
        Behaviour.echo(received) if "\n---\nUser Prompt:" in received.prompt else Behaviour.reply(reply)
    )


# --- the retry ---------------------------------------------------------------------------------


def test_an_echoed_raw_summary_is_retried_once_on_the_degraded_route(tmp_path):
    store = _store(tmp_path, make_turns("small", 3))
    result, server = _summarize(store, "small", _first_echo_then(FAITHFUL))
    assert len(server.chat_requests()) == 2
    summary = result.summary
    assert (summary.route_reason, summary.source_tier, summary.degraded) == (Route.RAW_JUNK, "turnCards", True)
    assert summary.output.title == FAITHFUL["title"]
    friction = store.query("SELECT symptom, note FROM friction_events").to_dict("records")
    assert friction == [
        {"symptom": "semantic-confusion", "note": "tier=raw: a junk summary (echo); retried once on the degraded route"}
    ]
    store.summaries.write_summary(summary, run_id="r1")
    row = store.summaries.summary_row("small")
    assert (row["verdict"], row["route_reason"]) == ("ok", "raw-junk")


def test_a_retry_that_is_junk_too_is_kept_with_its_verdict_and_never_tried_a_third_time(tmp_path):
    store = _store(tmp_path, make_turns("small", 3))
    result, server = _summarize(store, "small", lambda received: Behaviour.reply(TEMPLATE_SUMMARY))
    assert len(server.chat_requests()) == 2  # the raw call and one retry
    store.summaries.write_summary(result.summary, run_id="r1")
    row = store.summaries.summary_row("small")
    assert (row["verdict"], row["route_reason"], row["source_tier"]) == ("template", "raw-junk", "turnCards")
    assert json.loads(row["verdict_evidence"])["placeholders"] == ["[action]", "[file_name]"]
    # Stored at the session's turns: not pending, so no sweep retries it again at this revision.
    assert store.summaries.pending_summary_keys() == []


def test_a_retry_that_fails_keeps_the_raw_junk_with_its_verdict(tmp_path):
    store = _store(tmp_path, make_turns("small", 3))

    def script(received):
        return Behaviour.echo(received) if "\n---\nUser Prompt:" in received.prompt else Behaviour.server_error()

    result, _ = _summarize(store, "small", script)
    assert (result.summary.route_reason, result.summary.source_tier) == (Route.WITHIN_CAP, "raw")
    store.summaries.write_summary(result.summary, run_id="r1")
    assert store.summaries.summary_row("small")["verdict"] == "echo"


@pytest.mark.parametrize("kind", ["fabricated", "content-free"])
def test_a_fabricated_or_content_free_raw_summary_is_not_retried(tmp_path, kind):
    assert kind not in RETRIED_VERDICTS
    reply = (
        GOOD_SUMMARY
        if kind == "fabricated"
        else {**GOOD_SUMMARY, "summary": "The user asked for a summary.", "technologies": []}
    )
    store = _store(tmp_path, make_turns("small", 3))
    result, server = _summarize(store, "small", lambda received: Behaviour.reply(reply))
    assert len(server.chat_requests()) == 1 and result.summary.route_reason == Route.WITHIN_CAP
    store.summaries.write_summary(result.summary, run_id="r1")
    assert store.summaries.summary_row("small")["verdict"] == kind


# --- a junk summary never replaces a current ok one ------------------------------------------


def test_a_junk_summary_does_not_replace_a_current_ok_generated_one(tmp_path):
    store = _store(tmp_path, make_turns("small", 3))
    good, _ = _summarize(store, "small", lambda received: Behaviour.reply(FAITHFUL))
    assert store.summaries.write_summary(good.summary, run_id="good").kept is None
    junk, _ = _summarize(store, "small", lambda received: Behaviour.reply(TEMPLATE_SUMMARY), run_id="junk")
    written = store.summaries.write_summary(junk.summary, run_id="junk")
    assert written.verdict.label == "template"
    assert written.kept == "a template summary does not replace the current ok generated one (made by run good)"
    row = store.summaries.summary_row("small")
    assert (row["run_id"], row["verdict"], row["title"]) == ("good", "ok", FAITHFUL["title"])


def test_a_junk_summary_does_not_replace_a_current_ok_imported_one(tmp_path):
    turns = make_turns("imp", 3)
    folder = write_bundle(tmp_path / "bundle", turns)
    line = exported_summary(
        "imp", memoryCount=3, dreamInputRevision=input_revision(turns), title="Refactor the grid row"
    )
    write_summaries(folder, [{**line, "document": FAITHFUL["summary"]}])
    store = DigestStore(tmp_path / "digest.duckdb")
    store.migrate()
    ingest_paths([folder], store)
    assert store.summaries.summary_row("imp")["verdict"] == "ok"
    junk, _ = _summarize(store, "imp", lambda received: Behaviour.reply(GOOD_SUMMARY))  # fabricated
    assert "current ok imported one" in store.summaries.write_summary(junk.summary, run_id="junk").kept
    assert store.summaries.summary_row("imp")["origin"] == "imported"


def test_a_junk_summary_replaces_a_junk_one_and_an_ok_one_of_older_turns(tmp_path):
    store = _store(tmp_path, make_turns("small", 3))
    first, _ = _summarize(store, "small", lambda received: Behaviour.reply(GOOD_SUMMARY))  # fabricated
    store.summaries.write_summary(first.summary, run_id="first")
    junk, _ = _summarize(store, "small", lambda received: Behaviour.reply(TEMPLATE_SUMMARY), run_id="second")
    assert store.summaries.write_summary(junk.summary, run_id="second").kept is None
    assert store.summaries.summary_row("small")["run_id"] == "second"
    # An ok summary of other turns is not current: the junk one of these turns stands (counted as junk).
    with store.file.connect() as con:
        con.execute("UPDATE session_summaries SET verdict = 'ok', input_revision = 'sha256:old'")
    assert store.summaries.write_summary(junk.summary, run_id="third").kept is None


def test_a_run_asked_for_by_hand_keeps_the_current_ok_summary_and_says_why(tmp_path):
    folder = write_bundle(tmp_path / "bundle", make_turns("small", 3))
    with instance_for_test() as instance:
        with ModelServer(lambda received: Behaviour.reply(FAITHFUL)) as server:
            definitions = _defs(tmp_path, server.url)
            _ingest(definitions, instance, folder)
            job = definitions.resolve_job_def("summarize_sessions")
            first = job.execute_in_process(instance=instance, partition_key="small")
        DigestStore(tmp_path / "home" / "digest.duckdb").cache.clear_response_cache()  # the model is asked again
        with ModelServer(lambda received: Behaviour.reply(GOOD_SUMMARY)) as server:
            definitions = _defs(tmp_path, server.url)
            second = definitions.resolve_job_def("summarize_sessions").execute_in_process(
                instance=instance, partition_key="small"
            )
        assert first.success and second.success
        meta = first.asset_materializations_for_node("session_summaries")[0].metadata
        assert meta["verdict"].value == "ok" and "**verdict** `ok`" in meta["verdict_evidence"].value
        assert second.asset_materializations_for_node("session_summaries") == []
        observed = [e for e in second.all_events if e.event_type_value == "ASSET_OBSERVATION"]
        observation = observed[-1].event_specific_data.asset_observation.metadata
        assert observation["verdict"].value == "fabricated"
        assert "does not replace the current ok generated one" in observation["reason"].value
        latest = instance.get_latest_materialization_event(AssetKey("session_summaries"))
        assert latest.run_id == first.run_id
    store = DigestStore(tmp_path / "home" / "digest.duckdb")
    assert store.summaries.summary_row("small")["run_id"] == first.run_id


def test_the_partition_shows_a_junk_verdict_with_its_evidence(tmp_path):
    folder = write_bundle(tmp_path / "bundle", make_turns("small", 3))
    with instance_for_test() as instance, ModelServer(lambda received: Behaviour.reply(GOOD_SUMMARY)) as server:
        definitions = _defs(tmp_path, server.url)
        _ingest(definitions, instance, folder)
        result = definitions.resolve_job_def("summarize_sessions").execute_in_process(
            instance=instance, partition_key="small"
        )
    meta = result.asset_materializations_for_node("session_summaries")[0].metadata
    assert meta["verdict"].value == "fabricated"
    evidence = meta["verdict_evidence"].value
    assert "**verdict** `fabricated`" in evidence and "**identifiers no turn has**: `auth.py`" in evidence
    # The session's account on the partition is its card, shown beside the junk summary.
    assert meta["account"].value == "card" and meta["card"].value.startswith("### ")


# --- the asset check ---------------------------------------------------------------------------


def _check_evaluation(result):
    (evaluation,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "junk_share_since_last_check"]
    return evaluation


def test_the_junk_check_fails_over_its_share_of_what_was_written_since_it_last_ran(tmp_path):
    # Turn counts differ so no prompt is another's (the response cache would answer it).
    turns = make_turns("good", 3) + make_turns("bad", 4) + make_turns("later", 5)
    folder = write_bundle(tmp_path / "bundle", turns)

    replies = {"good": FAITHFUL, "bad": GOOD_SUMMARY, "later": FAITHFUL}  # bad: fabricated, not retried
    with instance_for_test() as instance:
        for key in ("good", "bad"):
            with ModelServer(lambda received, key=key: Behaviour.reply(replies[key])) as server:
                definitions = _defs(tmp_path, server.url)
                if key == "good":
                    _ingest(definitions, instance, folder)
                job = definitions.resolve_job_def("summarize_sessions")
                assert job.execute_in_process(instance=instance, partition_key=key).success
        report = definitions.resolve_job_def("report_friction")
        first = report.execute_in_process(instance=instance)
        assert first.success  # a failed check fails no run: it is recorded, and shown red
        evaluation = _check_evaluation(first)
        meta = {k: v.value for k, v in evaluation.metadata.items()}
        assert not evaluation.passed
        assert (meta["summaries_written"], meta["junk"], meta["junk_share"], meta["junk_share_max"]) == (
            2,
            1,
            0.5,
            0.25,
        )
        assert meta["by_verdict"] == {"fabricated": 1, "ok": 1}
        assert "| bad | fabricated | generated raw |" in meta["examples"]
        # Nothing written since: nothing to hold against the model.
        second = _check_evaluation(report.execute_in_process(instance=instance))
        assert second.passed and second.metadata["summaries_written"].value == 0
        with ModelServer(lambda received: Behaviour.reply(replies["later"])) as server:
            definitions = _defs(tmp_path, server.url)
            job = definitions.resolve_job_def("summarize_sessions")
            assert job.execute_in_process(instance=instance, partition_key="later").success
        third = _check_evaluation(definitions.resolve_job_def("report_friction").execute_in_process(instance=instance))
        assert third.passed and third.metadata["summaries_written"].value == 1


# --- where the verdict shows: status, the friction report, the demo's lines, the export ------


@pytest.fixture
def judged(tmp_path) -> DigestStore:
    """Three generated summaries by a real run of the synthesis: two ok, one fabricated."""
    store = _store(tmp_path, make_turns("good", 3) + make_turns("bad", 4) + make_turns("fine", 5))
    for session_id, reply in (("good", FAITHFUL), ("bad", GOOD_SUMMARY), ("fine", FAITHFUL)):
        result, _ = _summarize(store, session_id, lambda received, reply=reply: Behaviour.reply(reply))
        store.summaries.write_summary(result.summary, run_id=session_id, host="gpu-1")
    return store


def test_status_counts_summaries_by_verdict_then_by_model_and_tier(judged):
    status = judged.reports.status()
    assert status["summaries_by_verdict"] == {"fabricated": 1, "ok": 2}
    assert status["accounts"] == {"card": 1, "summary": 2}  # the junk one's session is told by its card
    assert status["verdicts_by_model_and_tier"] == {"fake-model": {"raw": {"summaries": 3, "junk": 1, "fabricated": 1}}}


def test_the_friction_report_has_junk_by_model_and_host(judged):
    rows = judged.reports.friction_report_rows()
    assert junk_rows(rows["summaries"]) == [["fake-model", "gpu-1", "3", "1", "33%", "fabricated 1"]]
    report = build_report(rows["events"], rows["attempts"], rows["summaries"], load_settings({}), CircuitPolicy())
    assert report.numbers()["junk_share"] == 0.3333
    markdown = render_markdown(report)
    assert "## Junk" in markdown and "| fake-model | gpu-1 | 3 | 1 | 33% | fabricated 1 |" in markdown


def test_the_demo_never_shows_junk_as_a_tier_best_nor_as_an_account(judged):
    with judged.file.connect() as con:  # the fabricated one scores highest: it must still not be shown as best
        con.execute("UPDATE session_summaries SET fidelity = CASE session_id WHEN 'bad' THEN 0.9 ELSE 0.4 END")
    examples = judged.reports.fidelity_examples()
    assert examples == [
        {
            "origin": "generated",
            "source_tier": "raw",
            "title": FAITHFUL["title"],
            "fidelity": 0.4,
            "summaries": 3,
            "junk": 1,
        }
    ]
    result = {
        "ingest": {}, "summary_runs": [], "mini_summary_runs": [], "seconds": 1.0, "status": {}, "fidelity_examples": examples,
        "junk": len(judged.reports.junk_summaries()), "accounts": judged.cards.account_page(20)[1], "where_to_look": {},
    }  # fmt: skip
    console = Console(record=True, width=300)
    _render_demo(console, result)
    text = console.export_text()
    assert f"generated raw: 0.40 {FAITHFUL['title']} (1 of 3 judged junk)" in text
    # Every session's account, the junk one's by its card: the junk title is never shown.
    assert "1 model summary judged junk not shown" in text and GOOD_SUMMARY["title"] not in text
    card = judged.cards.card("bad")
    assert f"bad [card facts] {card.line()}" in text and f"good [summary raw] {FAITHFUL['title']}" in text


def test_a_junk_summary_is_exported_with_its_verdict_and_without_the_count_the_originals_sweep_trusts(judged, tmp_path):
    bundle = Path(judged.archive.write_archive(tmp_path / "archives")["path"])
    lines = {
        line["metadata"]["sessionId"]: line["metadata"]
        for line in map(json.loads, next(bundle.glob("summaries-backup-*.jsonl")).read_text().splitlines())
    }
    assert lines["good"]["memoryCount"] == 3 and "summaryVerdict" not in lines["good"]
    assert "memoryCount" not in lines["bad"] and lines["bad"]["summaryVerdict"] == "fabricated"
    assert json.loads(lines["bad"]["summaryVerdictEvidence"])["unknown_identifiers"] == ["auth.py"]
    # Our own ingest of the bundle brings it back (by its revision), judged the same from the turns,
    # and counts no drift for a line with no count.
    fresh = DigestStore(tmp_path / "fresh" / "digest.duckdb")
    fresh.migrate()
    ingest_paths([bundle], fresh)
    assert fresh.summaries.summary_row("bad")["verdict"] == "fabricated"
    assert fresh.reports.status()["drifted_from_export"] == 0
    # A restore brings back the exact row, verdict and all.
    restored = DigestStore(tmp_path / "restored" / "digest.duckdb")
    restored.migrate()
    restored.archive.restore_archive(validate_bundle(bundle), "merge")
    row = restored.summaries.summary_row("bad")
    assert (row["verdict"], row["origin"], row["run_id"]) == ("fabricated", "generated", "bad")
    # The turns it covered too: they go in tables/session_summaries.jsonl, not in the original's line.
    assert row["covered_turn_ids"] == judged.summaries.summary_row("bad")["covered_turn_ids"] != []
    assert "coveredTurnIds" not in lines["bad"] and "covered_turn_ids" not in lines["bad"]
