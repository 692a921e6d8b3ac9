"""The friction report: the surfacing rule, the calibration arithmetic, rendering, and the asset."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from dagster import instance_for_test

from digest.friction_report import (
    activity_series,
    build_report,
    calibrate,
    calibrate_model,
    first_summary_curve,
    group_friction,
    percentile,
    pre_routes,
    render_html,
    render_markdown,
    seconds_to_share,
    surfaced_at,
)
from digest.settings import load_settings
from pipelines.definitions import build_definitions
from pipelines.sensors import register_partitions
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.model_server import FAITHFUL_SUMMARY, Behaviour, ModelServer

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
SETTINGS = load_settings({"DIGEST_MODEL_PROVIDER": "openai"})


def event(symptom: str, minutes: float, asset_ref: str = "s1", consumer: str = "session_summaries", note: str = "n",
          model: str = "qwen", input_bytes: int = 3000, bound: str | None = None) -> dict:  # fmt: skip
    return {
        "occurred_at": T0 + timedelta(minutes=minutes),
        "asset_ref": asset_ref,
        "consumer": consumer,
        "model": model,
        "symptom": symptom,
        "suggestion_kind": "unknown",
        "input_bytes": input_bytes,
        "input_tokens_estimate": input_bytes // 3,
        "note": note,
        "error_text": None,
        "bound": bound,
    }


def pre_route(minutes: float, input_bytes: int, bound: str = "over-raw-cap", model: str = "qwen") -> dict:
    """The event `digest.synthesis` records when it keeps a raw prompt from the model."""
    note = f"pre-routed to the degraded summary: raw estimate {input_bytes // 3} tokens > {bound} 8192"
    return event("size-precheck-skip", minutes, note=note, model=model, input_bytes=input_bytes, bound=bound)


def attempt(prompt_tokens, completion_tokens, seconds, model="qwen", outcome="ok", minutes=0.0, **extra) -> dict:
    row = {
        "session_id": "s1",
        "stage": "session-summary",
        "tier": "raw",
        "model": model,
        "prompt_bytes": round((prompt_tokens or 100) * 4.6),
        "tokens_estimate": round((prompt_tokens or 100) * 4.6 / 3),
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "duration_s": seconds,
        "outcome": outcome,
        "suspected_truncation": False,
        "created_at": T0 + timedelta(minutes=minutes),
        "first_token_s": None,
    }
    row.update(extra)
    return row


# --- the surfacing rule -------------------------------------------------------------------------


@pytest.mark.parametrize("symptom", ["size-precheck-skip", "context-overflow"])
def test_deterministic_symptoms_surface_on_their_first_occurrence(symptom):
    assert surfaced_at(symptom, [T0]) == T0
    assert surfaced_at(symptom, [T0 + timedelta(hours=5), T0]) == T0


def test_probabilistic_symptoms_surface_on_the_third_within_one_hour():
    minutes = lambda *ms: [T0 + timedelta(minutes=m) for m in ms]  # noqa: E731
    assert surfaced_at("timeout", minutes(0, 10)) is None
    assert surfaced_at("timeout", minutes(0, 10, 59)) == T0 + timedelta(minutes=59)
    assert surfaced_at("timeout", minutes(0, 10, 60)) == T0 + timedelta(minutes=60)  # the window is inclusive
    assert surfaced_at("parse-failure", minutes(0, 40, 80, 120, 160)) is None  # never three in one hour
    # The window slides: the first occurrence is too old, but the next three fit.
    assert surfaced_at("provider-error", minutes(0, 70, 100, 110)) == T0 + timedelta(minutes=110)


def test_events_group_by_asset_consumer_and_symptom():
    events = [
        event("timeout", 0, note="first"),
        event("timeout", 30, note="second"),
        event("timeout", 5, asset_ref="s2"),
        event("size-precheck-skip", 1, asset_ref="s3"),
        event("parse-failure", 2, consumer="turn_mini_summaries"),
    ]
    groups = group_friction(events)
    assert len(groups) == 4
    assert (groups[0].asset_ref, groups[0].symptom) == ("s3", "size-precheck-skip")  # surfaced groups first
    assert not any(g.surfaced for g in groups[1:])
    s1_timeouts = next(g for g in groups if g.asset_ref == "s1" and g.symptom == "timeout")
    assert (s1_timeouts.count, s1_timeouts.first_seen, s1_timeouts.last_seen) == (2, T0, T0 + timedelta(minutes=30))
    assert s1_timeouts.latest_note == "second"


def test_a_group_shows_the_providers_own_error_text():
    overflow = event("context-overflow", 0, note="tier=raw")
    overflow["error_text"] = "Requested tokens (9000) exceed context window of 8192"
    markdown = render_markdown(build_report([overflow], [], [], SETTINGS, SETTINGS.circuit))
    assert "| tier=raw; Requested tokens (9000) exceed context window of 8192 |" in markdown


# --- calibration --------------------------------------------------------------------------------


def test_calibration_recovers_the_rates_of_a_streamed_ledger_with_known_counts():
    # 50 prompt tokens/s and 10 answer tokens/s exactly, the first piece after the prompt; 4.6 bytes a token.
    calls = [(1000, 100), (2000, 200), (4000, 150), (3000, 50)]
    ledger = [attempt(p, c, p / 50 + c / 10, first_token_s=p / 50) for p, c in calls]
    ledger += [
        attempt(500, 10, 500 / 50 + 10 / 10, outcome="parse-failure", first_token_s=10.0),  # the server finished it
        attempt(None, None, 180.0, outcome="timeout"),  # no server counts: not a measurement
        attempt(800, 80, 1.0, model="other"),  # another model, too few calls
    ]
    calibrations = calibrate(ledger, load_settings({}))
    assert calibrations["other"] is None
    qwen = calibrations["qwen"]
    assert qwen.calls == 5
    assert qwen.mean_bytes_per_token == pytest.approx(4.6, abs=0.001)
    # The 4 good calls are too few for the bytes per token the router applies: the default stays.
    assert (qwen.bytes_per_token, qwen.bytes_per_token_samples) == (None, 4)
    assert qwen.prompt_tokens_per_s == pytest.approx(50.0)
    assert qwen.completion_tokens_per_s == pytest.approx(10.0)
    # The 90th percentile of the good summary answers (50, 100, 150, 200) is 185 tokens.
    assert qwen.answer_tokens == 185
    # 120 s (the raw-call target) less 18.5 s of answer leaves 101.5 s at 50 tokens/s: 5075 tokens.
    assert qwen.raw_cap_tokens == 5075


def test_calibration_without_streamed_calls_blends_the_rates():
    # Not streamed: prompt and answer costs cannot be told apart; one rate of tokens in and out.
    calls = [(1000, 100, 11.0), (2000, 200, 22.0), (3000, 300, 33.0)]
    calibration = calibrate_model("qwen", [attempt(p, c, t) for p, c, t in calls], 120.0, 6144, 1024)
    assert calibration.completion_tokens_per_s is None
    assert calibration.prompt_tokens_per_s == pytest.approx(100.0)
    # 120 s less 280 answer tokens at 100 a second leaves 117.2 s: 11720 tokens, held to the bound.
    assert calibration.raw_cap_tokens == 6144


def test_pre_routes_price_the_raw_prompts_never_sent_against_the_degraded_path():
    ledger = [attempt(p, 0, p / 100) for p in (1000, 2000, 3000)]  # 100 tokens/s, 4.6 bytes a token
    calibrations = calibrate(ledger, load_settings({}))
    events = [
        # 3000 real tokens: 30 s, and the answer room (half the 1024-token cap, no summary answer seen) 5.12 s.
        pre_route(0, input_bytes=13800),
        pre_route(1, input_bytes=2760000, bound="over-safe-band"),  # 6000 s, but a call ends at the 900 s ceiling
        pre_route(2, input_bytes=27000, model="unmeasured"),
        # A compact prompt over budget, another consumer's pre-check, a failed raw call: not pre-routes.
        event("size-precheck-skip", 3, note="tier=miniSummary: compact input over the prompt budget 6144"),
        event("size-precheck-skip", 4, consumer="session_graph", note="no graph call: 70 chunks"),
        event("timeout", 5, note="tier=raw"),
    ]
    # The pre-routed session's degraded path: two mini summaries, one given up, and the compact call.
    degraded = [
        attempt(300, 40, 4.0, session_id="s1", stage="mini-summary", tier="turn"),
        attempt(None, None, 20.0, session_id="s1", stage="mini-summary", tier="turn", outcome="timeout-inner"),
        attempt(800, 200, 12.0, session_id="s1", tier="miniSummary"),
        attempt(800, 200, 50.0, session_id="other", tier="miniSummary"),  # not a pre-routed session
    ]
    routes = pre_routes(events, ledger + degraded, calibrations, ceiling_s=900.0)
    assert routes.count == 3
    assert routes.by_reason == {"over-raw-cap": 2, "over-safe-band": 1}
    assert routes.tokens_avoided == (13800 + 2760000 + 27000) // 3
    assert routes.model_seconds_avoided == pytest.approx(35.12 + 900.0)
    assert routes.unpriced == 1
    assert (routes.degraded_calls, routes.degraded_seconds, routes.discarded_seconds) == (2, 16.0, 20.0)
    assert routes.net_seconds == pytest.approx(935.12 - 16.0 - 20.0)


def test_a_degraded_path_that_cost_more_than_it_saved_says_so():
    ledger = [attempt(p, 0, p / 100) for p in (1000, 2000, 3000)]
    events = [pre_route(0, input_bytes=4600)]  # 1000 tokens and the 512-token answer room: 15.12 s
    cut = [attempt(None, None, 20.0, session_id="s1", stage="mini-summary", tier="turn", outcome="timeout-inner")] * 3
    settings = load_settings({})
    report = build_report(events, ledger + cut, [], settings, settings.circuit)
    assert report.pre_routes.net_seconds == pytest.approx(15.12 - 60.0)
    assert "net lost 44.9 s" in render_markdown(report)
    assert "the degraded path cost more model time than the cap saved" in render_markdown(report)


def test_percentile_interpolates_linearly():
    assert percentile([], 95) == 0.0
    assert percentile([4.0], 95) == 4.0
    assert percentile([float(v) for v in range(1, 101)], 95) == pytest.approx(95.05)


# --- time to first summary ---------------------------------------------------------------------


def test_the_first_summary_curve_counts_every_call_and_each_sessions_first_summary_once():
    attempts = [
        attempt(None, None, 5.0, minutes=3, session_id="a", stage="mini-summary", tier="turn"),
        attempt(None, None, 20.0, minutes=2, session_id="a", tier="truncatedRaw"),  # a's first, ledger out of order
        attempt(None, None, 30.0, minutes=4, session_id="b", outcome="timeout"),  # spent, summarizes nothing
        attempt(None, None, 10.0, minutes=5, session_id="a", tier="miniSummary"),  # an upgrade: not a first
        attempt(None, None, 15.0, minutes=6, session_id="b", tier="truncatedRaw"),
    ]
    summaries = [{"session_id": "a"}, {"session_id": "b"}, {"session_id": "imported"}]
    curve = first_summary_curve(attempts, summaries, sessions=4)
    assert [(p.model_seconds, p.summarized, p.share) for p in curve] == [
        (0.0, 1, 0.25),  # the imported summary, at no model time
        (20.0, 2, 0.5),
        (80.0, 3, 0.75),  # 20 + 5 + 30 + 10 + 15
    ]
    assert seconds_to_share(curve, 0.5) == 20.0 and seconds_to_share(curve, 0.6) == 80.0
    assert seconds_to_share(curve, 1.0) is None  # the fourth session has none yet
    # Without the store's count, the sessions the rows name are the whole.
    assert first_summary_curve(attempts, summaries)[-1].share == 1.0
    assert first_summary_curve([], []) == [first_summary_curve([], [])[0]] and first_summary_curve([], [])[0].share == 0


# --- rendering ----------------------------------------------------------------------------------


def test_the_report_renders_with_no_events():
    report = build_report(
        [], [], [], SETTINGS, SETTINGS.circuit, mini_coverage={"turns": 0, "imported": 0, "generated": 0}
    )
    numbers = report.numbers()
    assert numbers["degraded_share"] == 0.0 and numbers["pre_routes"] == 0 and numbers["timeouts"] == 0
    assert numbers["p95_call_seconds"] == 0.0 and numbers["tokens_avoided"] == 0
    markdown = render_markdown(report)
    assert "No friction recorded yet." in markdown
    assert "None yet: no turn has a mini summary." in markdown
    assert "No calibration to adopt yet." in markdown
    page = render_html(report)
    assert "No friction events or model calls yet." in page and "<svg" not in page


def test_the_report_renders_with_many_events():
    symptoms = ["timeout", "parse-failure", "size-precheck-skip", "provider-error"]
    events = [event(symptoms[i % 4], minutes=i * 7, asset_ref=f"s{i % 37}", note="a | b") for i in range(600)]
    events += [pre_route(i * 400, input_bytes=27000) for i in range(10)]
    calls = [(1000 + 10 * i, 100 + i % 50) for i in range(300)]  # at 50 prompt and 10 answer tokens/s
    attempts = [attempt(p, c, p / 50 + c / 10, minutes=i * 14) for i, (p, c) in enumerate(calls)]
    attempts.append(attempt(None, None, 180.0, outcome="timeout", minutes=5))
    attempts.append(attempt(None, None, 30.0, outcome="timeout-outer", minutes=5, stage="mini-summary", tier="turn"))
    attempts.append(attempt(100, 5, 1.0, minutes=6, suspected_truncation=True, tokens_estimate=900))
    summaries = [
        {"session_id": f"s{i}", "source_tier": "raw" if i % 3 else "miniSummary", "degraded": not i % 3,
         "route_reason": "within-cap" if i % 3 else "over-raw-cap"}
        for i in range(30)
    ]  # fmt: skip
    report = build_report(
        events,
        attempts,
        summaries,
        SETTINGS,
        SETTINGS.circuit,
        mini_coverage={"turns": 200, "imported": 50, "generated": 30},
        undigestible=[{"session_id": "s7", "reason": "skip-over-band", "attempts": 1, "updated_at": T0}],
    )
    numbers = report.numbers()
    assert numbers["friction_events"] == 610 and numbers["summaries"] == 30
    assert numbers["degraded_share"] == pytest.approx(10 / 30, abs=1e-4)
    assert numbers["pre_routes"] == 10 and numbers["tokens_avoided"] == 10 * 9000
    assert numbers["timeouts"] == 2 and numbers["suspected_truncations"] == 1
    assert numbers["p95_call_seconds"] > 20
    markdown = render_markdown(report)
    assert len(report.groups) == 148  # every (session, symptom) pair that occurs
    assert "… and 133 more rows" in markdown.split("### Pre-routes")[0]  # 15 shown in the UI's preview
    assert "a \\| b" in markdown  # a pipe in a note does not break the table
    assert "80 of 200 turns have a mini summary (40%): 50 imported, 30 generated." in markdown
    assert "| s7 | skip-over-band | 1 | 2026-11-20 09:00Z |" in markdown
    # The bytes per token the router applies, shown; only the cap is to set.
    assert "| 4.60 (p10 of 300) |" in markdown
    assert re.search(r"```sh\nDIGEST_RAW_CAP_TOKENS=\d+\n```", markdown) and "DIGEST_BYTES_PER_TOKEN=" not in markdown
    page = render_html(report)
    # 70 hours of activity over four calendar days: one bar a day.
    assert page.count('<rect class="friction"') == len(report.series) == 4
    assert "<td>a | b</td>" in page and "more rows" not in page.split("Friction groups")[1].split("<h2>")[0]


def test_the_series_buckets_by_hour_for_a_short_span():
    attempts = [attempt(10, 1, 2.5, minutes=70), attempt(None, None, 20.0, outcome="timeout", minutes=75)]
    series = activity_series([event("timeout", 0), event("timeout", 150)], attempts)
    assert [(b.friction_events, b.spent_seconds, b.discarded_seconds) for b in series] == [
        (1, 0.0, 0.0),
        (0, 2.5, 20.0),
        (1, 0.0, 0.0),
    ]


# --- the asset, over a store the real jobs filled ------------------------------------------------


def test_the_asset_writes_the_report_file_and_plots_its_numbers(tmp_path):
    settings = load_settings(
        {"DIGEST_HOME": str(tmp_path / "home"), "DIGEST_MODEL_PROVIDER": "openai", "DIGEST_RAW_CAP_TOKENS": "2000"}
    )
    folder = write_bundle(tmp_path / "bundle", make_turns("small", 3) + make_turns("big", 40, doc_bytes=400, minis=40))
    # A summary that names the sessions' files: ok, so the junk check passes with the others.
    with instance_for_test() as instance, ModelServer(lambda received: Behaviour.reply(FAITHFUL_SUMMARY)) as server:
        definitions = build_definitions(dataclasses.replace(settings, model_url=server.url))
        config = {"ops": {"raw_turns": {"config": {"paths": [str(folder)]}}}}
        assert definitions.resolve_job_def("ingest").execute_in_process(run_config=config, instance=instance).success
        register_partitions(instance, DigestStore(settings.db_path))
        summarize = definitions.resolve_job_def("summarize_sessions")
        for key in ("small", "big"):
            assert summarize.execute_in_process(instance=instance, partition_key=key).success
        result = definitions.resolve_job_def("report_friction").execute_in_process(instance=instance)
    assert result.success
    meta = {k: v.value for k, v in result.asset_materializations_for_node("friction_report")[0].metadata.items()}
    big = DigestStore(settings.db_path).query(
        "SELECT raw_tokens_estimate FROM session_summaries WHERE session_id = 'big'"
    )
    assert meta["pre_routes"] == 1 and meta["tokens_avoided"] == int(big["raw_tokens_estimate"][0])
    assert meta["degraded_share"] == 0.5 and meta["timeouts"] == 0 and meta["friction_events"] == 1
    assert meta["p95_call_seconds"] > 0  # the two summary calls were timed
    assert "size-precheck-skip" in meta["report"]
    report_file = Path(meta["report_path"])
    assert report_file == settings.db_path.parent / "friction-report.html"
    assert "<svg" in report_file.read_text() and "Pre-routes" in report_file.read_text()
    assert all(e.passed for e in result.get_asset_check_evaluations())


def test_the_pre_route_bound_is_a_column_and_older_rows_get_it_from_their_note(tmp_path):
    """The report counts pre-routes by the stored `bound`; a store from before the column names it
    in the note only, and the migration fills the column from there, for pre-routes alone."""
    from digest.friction import FrictionEvent

    store = DigestStore(tmp_path / "digest.duckdb")
    store.migrate()
    with store.file.connect() as con:
        con.execute("ALTER TABLE friction_events DROP COLUMN bound")  # the older store
        con.execute("DELETE FROM schema_meta")  # ... from before the numbered migrations
        con.execute("INSERT INTO schema_meta VALUES (1, now())")
        for asset_ref, consumer, note in [
            (
                "old",
                "session_summaries",
                "pre-routed to the degraded summary: raw estimate 9000 tokens > over-raw-cap 8192",
            ),
            ("compact", "session_summaries", "tier=miniSummary: compact input over the prompt budget 6144"),
            ("graph", "session_graph", "pre-routed to the degraded summary: raw estimate 9 tokens > over-raw-cap 1"),
        ]:
            con.execute(
                "INSERT INTO friction_events (occurred_at, asset_ref, consumer, model, symptom, emission_point, "
                "suggestion_kind, input_bytes, input_tokens_estimate, context_limit_tokens, safe_limit_tokens, "
                "service_domain, note) VALUES (now(), ?, ?, 'qwen', 'size-precheck-skip', 'pre-invocation', "
                "'compress-payload', 30, 10, 8192, 6144, 'memory-core', ?)",
                [asset_ref, consumer, note],
            )
    store.migrate()
    store.attempts.record_friction(
        FrictionEvent(
            "new",
            "session_summaries",
            "qwen",
            "size-precheck-skip",
            "pre-invocation",
            30,
            10,
            8192,
            6144,
            None,
            "words the report does not read",
            bound="over-safe-band",
        )  # fmt: skip
    )
    with store.file.connect() as con:
        bounds = dict(con.execute("SELECT asset_ref, bound FROM friction_events").fetchall())
    assert bounds == {"old": "over-raw-cap", "compact": None, "graph": None, "new": "over-safe-band"}
    routes = pre_routes(store.reports.friction_report_rows()["events"], [], {}, ceiling_s=900.0)
    assert routes.count == 2 and routes.by_reason == {"over-raw-cap": 1, "over-safe-band": 1}


def test_calls_interrupted_by_their_runs_death_are_counted_as_thrown_away_not_as_timeouts():
    """Issue 31, defect 6: a call whose run was killed during it is in the ledger as `interrupted`;
    the report counts it and its seconds apart from the timeouts, as model time thrown away."""
    attempts = [
        attempt(1000, 100, 20.0),
        attempt(None, None, 42.0, outcome="interrupted", minutes=1),
        attempt(None, None, 8.0, outcome="interrupted", minutes=2, stage="mini-summary", tier="turn"),
        attempt(None, None, 180.0, outcome="timeout", minutes=3),
    ]
    report = build_report([], attempts, [], SETTINGS, SETTINGS.circuit)
    numbers = report.numbers()
    assert (numbers["interrupted_calls"], numbers["model_seconds_interrupted"]) == (2, 50.0)
    assert (numbers["timeouts"], numbers["model_seconds_discarded"]) == (1, 180.0)
    [bucket] = report.series
    assert (bucket.spent_seconds, bucket.discarded_seconds) == (20.0, 230.0)
    assert "2 calls interrupted (the run killed or stopped during the call" in render_markdown(report)
