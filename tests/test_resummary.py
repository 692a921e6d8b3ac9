"""Issue 30, item 2: planned re-summaries. `plan --resummarize` selects current summaries by model,
host, code version, tier, verdict or fidelity and prices them; `sweep --resummarize` records the
requests and the sweeps (the CLI's, the summary sensor's ticks) make them after new work, keeping
the previous summary in `summary_history`; a junk re-summary never replaces an ok summary; the
friction report shows before and after per model. The CLI in process over a real DuckDB file and a
real Dagster instance, the local model test server."""

from __future__ import annotations

import json

import duckdb
import pytest
from dagster import DagsterInstance, build_sensor_context

from app.cli import main
from digest.prompts import SUMMARY_CODE_VERSION
from digest.resummary import ANY_JUNK, KEPT_PREVIOUS, NOT_CURRENT, REPLACED, ResummaryCriteria, before_after
from digest.scheduling import now_ms
from digest.settings import load_settings
from digest.tags import RESUMMARY_TAG
from digest.turns import canonical_order, input_revision
from pipelines.definitions import build_definitions
from pipelines.jobs import default_run_config, requested_job
from resources.store import DigestStore
from tests.bundles import write_bundle
from tests.conftest import make_turns
from tests.model_server import FAITHFUL_SUMMARY, TEMPLATE_SUMMARY, Behaviour, ModelServer
from tests.test_imported_summaries import exported_summary, write_summaries

# Names one of the two files the sessions touch: ok, with a lower fidelity than FAITHFUL_SUMMARY.
PARTIAL_SUMMARY = {**FAITHFUL_SUMMARY, "summary": "The agent refactored the grid row in src/grid/Row.mjs."}


def _server(replies: dict[str, dict]) -> ModelServer:
    """Each model's summary reply (by the request's model name); mini summaries as plain text."""

    def script(received):
        if "response_format" not in received.body:
            return Behaviour.mini(received)
        return Behaviour.reply(replies[received.body["model"]])

    return ModelServer(script)


class Cli:
    """`session-digest` in process, with `--json`, over one DIGEST_HOME and Dagster instance."""

    def __init__(self, tmp_path, monkeypatch, capsys, url: str):
        self.tmp_path, self.monkeypatch, self.capsys = tmp_path, monkeypatch, capsys
        for key, value in {
            "DIGEST_HOME": str(tmp_path / "home"),
            "DAGSTER_HOME": str(tmp_path / "dagster"),
            "DIGEST_MODEL_PROVIDER": "openai",
            "DIGEST_MODEL_URL": url,
            "DIGEST_MODEL_NAME": "model-a",
        }.items():
            monkeypatch.setenv(key, value)
        self.store = DigestStore(tmp_path / "home" / "digest.duckdb")

    def __call__(self, *argv: str) -> dict:
        main([*argv, "--json"])
        return json.loads(self.capsys.readouterr().out)

    def model(self, name: str) -> None:
        self.monkeypatch.setenv("DIGEST_MODEL_NAME", name)

    def ingest(self, *sessions: str) -> None:
        turns = [t for s in sessions for t in make_turns(s, 3)]
        self(*["ingest", str(write_bundle(self.tmp_path / "bundles" / "-".join(sessions), turns))])

    def rows(self, sql: str) -> list[dict]:
        with duckdb.connect(str(self.store.path), read_only=True) as con:
            cursor = con.execute(sql)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def summaries(self) -> dict[str, dict]:
        return {r["session_id"]: r for r in self.rows("SELECT * FROM session_summaries")}

    def sensor_sweep(self) -> dict[str, dict]:
        """One summary sensor tick, its runs executed as the daemon would: by partition, the request's
        tags and whether the run materialized a summary."""
        definitions = build_definitions(load_settings())
        instance = DagsterInstance.get()
        with build_sensor_context(instance=instance, resources=definitions.resources) as context:
            result = definitions.resolve_sensor_def("summary_sensor")(context)
        job = definitions.resolve_job_def("summarize_sessions")
        done = {}
        for request in result.run_requests:
            run = requested_job(job, request)
            key = request.partition_key
            ran = run.execute_in_process(
                default_run_config(run, key), instance=instance, partition_key=key, tags=request.tags
            )
            assert ran.success
            done[key] = {
                "tags": request.tags,
                "materialized": bool(ran.asset_materializations_for_node("session_summaries")),
            }
        return done


@pytest.fixture
def cli_of(tmp_path, monkeypatch, capsys):
    return lambda server: Cli(tmp_path, monkeypatch, capsys, server.url)


def _partitions(result: dict) -> list[str]:
    return sorted(item["partition"] for item in result["all_of_them"]["sessions_detail"])


def test_plan_resummarize_selects_exactly_by_each_filter_and_prices_as_plan_does(cli_of):
    with _server({"model-a": FAITHFUL_SUMMARY, "model-b": PARTIAL_SUMMARY}) as server:
        cli = cli_of(server)
        cli.ingest("a1", "a2")
        assert cli("sweep")["summarized"] == 2
        cli.model("model-b")
        cli.ingest("b1")
        assert cli("sweep")["summarized"] == 1
    # Set apart by what the filters read: a tier, a verdict, a code version from before it was recorded.
    with duckdb.connect(str(cli.store.path)) as con:
        con.execute("UPDATE session_summaries SET source_tier = 'truncatedRaw' WHERE session_id = 'a2'")
        con.execute("UPDATE session_summaries SET verdict = 'echo' WHERE session_id = 'b1'")
        con.execute("UPDATE session_summaries SET code_version = NULL WHERE session_id = 'a1'")
    rows = cli.summaries()
    assert rows["a2"]["code_version"] == rows["b1"]["code_version"] == SUMMARY_CODE_VERSION
    assert rows["a1"]["fidelity"] > rows["b1"]["fidelity"]  # the partial summary names fewer files

    def plan(*filters: str) -> dict:
        return cli("plan", "--resummarize", *filters)

    assert _partitions(plan("--model", "model-a")) == ["a1", "a2"]
    assert _partitions(plan("--host", "default")) == ["a1", "a2", "b1"]
    assert _partitions(plan("--host", "elsewhere")) == []
    assert _partitions(plan("--code-version")) == ["a1"]  # NULL: not current
    assert _partitions(plan("--code-version", SUMMARY_CODE_VERSION)) == ["a2", "b1"]
    assert _partitions(plan("--tier", "truncatedRaw")) == ["a2"]
    assert _partitions(plan("--verdict", ANY_JUNK)) == ["b1"]
    assert _partitions(plan("--verdict", "ok")) == ["a1", "a2"]
    below = (rows["a1"]["fidelity"] + rows["b1"]["fidelity"]) / 2
    assert _partitions(plan("--fidelity-below", str(below))) == ["b1"]
    assert _partitions(plan("--model", "model-a", "--tier", "raw")) == ["a1"]  # every filter holds

    # Priced as `plan` prices a sweep: each on a host, by route and host, tokens and model seconds.
    priced = plan("--model", "model-a")
    price = priced["all_of_them"]
    assert priced["matching"] == 2 and priced["resummarize"] == {"model": "model-a"}
    assert price["by_host"] == {"default": 2} and price["by_route"] == {"raw": 2}
    detail = {item["partition"]: item for item in price["sessions_detail"]}
    assert price["estimated_prompt_tokens"] == sum(i["prompt_tokens_estimate"] for i in detail.values()) > 0
    # The local server is quick: its measured speed makes the seconds small, the sum of each one's.
    assert price["estimated_model_seconds"] == pytest.approx(
        sum(i["model_seconds_estimate"] for i in detail.values()), abs=0.1
    )
    assert detail["a1"]["was"]["model"] == "model-a" and detail["a1"]["was"]["code_version"] is None
    # The same sizing as the sweep's: a session made pending again is planned at the same estimate.
    with duckdb.connect(str(cli.store.path)) as con:
        con.execute("DELETE FROM session_summaries WHERE session_id = 'a1'")
    [planned] = [i for i in cli("plan")["next_sweep"]["sessions_detail"] if i["partition"] == "a1"]
    assert planned["prompt_tokens_estimate"] == detail["a1"]["prompt_tokens_estimate"]
    assert planned["model_seconds_estimate"] == detail["a1"]["model_seconds_estimate"]
    # Nothing recorded by a plan.
    assert cli.rows("SELECT count(*) AS n FROM resummary_requests") == [{"n": 0}]


def test_filters_without_resummarize_and_resummarize_without_a_filter_are_refused(cli_of, capsys):
    with _server({}) as server:
        cli = cli_of(server)
        for argv in (["plan", "--model", "m"], ["sweep", "--resummarize"]):
            with pytest.raises(SystemExit) as refused:
                cli(*argv)
            assert refused.value.code == 2
        assert "--resummarize needs at least one filter" in capsys.readouterr().err


def test_sweep_resummarize_after_a_model_change_goes_after_new_work_and_keeps_the_previous_summaries(cli_of):
    with _server({"model-a": PARTIAL_SUMMARY, "model-b": FAITHFUL_SUMMARY}) as server:
        cli = cli_of(server)
        cli.ingest("old1", "old2")
        assert cli("sweep")["summarized"] == 2
        before = cli.summaries()
        assert {r["model"] for r in before.values()} == {"model-a"}

        # The model changes; new sessions arrive; the old summaries are asked for again.
        cli.model("model-b")
        cli.ingest("new1", "new2")
        swept = cli("sweep", "--resummarize", "--model", "model-a", "--limit", "2")
        assert swept["resummary_requests"] == {
            "criteria": {"model": "model-a"}, "matching": 2, "recorded": 2, "already_requested": 0,
        }  # fmt: skip
        # The budget of 2 goes to the first summaries: the re-summaries wait.
        assert sorted(r["partition"] for r in swept["runs"]) == ["new1", "new2"] and swept["resummaries"] == 0
        assert {k: r["model"] for k, r in cli.summaries().items()} == {
            "old1": "model-a", "old2": "model-a", "new1": "model-b", "new2": "model-b",
        }  # fmt: skip
        assert cli("status")["resummary_queue"] == {
            "requested": 2, "done": 0, "replaced": 0, "kept_previous": 0, "waiting": 2,
        }  # fmt: skip
        # The backlog counts them apart from the sessions that wait for a summary.
        drain = cli.store.backlog.drain(now_ms(), idle_window_s=0)
        assert (drain.pending, drain.resummaries_waiting) == (0, 2)
        # Asked again: the open requests are not doubled.
        assert cli("plan", "--resummarize", "--model", "model-a")["requests_waiting"] == 2
        again = cli.store.resummaries.record_requests(ResummaryCriteria(model="model-a"), ["old1", "old2", "old1"])
        assert again == {"recorded": 0, "already_requested": 2}

        # The summary sensor's next tick takes the requests, tagged as re-summaries.
        runs = cli.sensor_sweep()
        assert sorted(runs) == ["old1", "old2"]
        assert all(r["tags"][RESUMMARY_TAG] == "requested" and r["materialized"] for r in runs.values())
        assert cli.sensor_sweep() == {}  # done: nothing left to take

    after = cli.summaries()
    for session in ("old1", "old2"):
        assert after[session]["model"] == "model-b" and after[session]["code_version"] == SUMMARY_CODE_VERSION
        assert after[session]["run_id"] != before[session]["run_id"]
        [kept] = cli.store.resummaries.history(session)
        for field in ("title", "summary", "model", "host", "source_tier", "verdict", "fidelity", "run_id"):
            assert kept[field] == before[session][field], field
        assert kept["replaced_by_run"] == after[session]["run_id"]
    requests = cli.rows("SELECT * FROM resummary_requests ORDER BY session_id")
    assert [(r["session_id"], r["outcome"], r["new_model"]) for r in requests] == [
        ("old1", REPLACED, "model-b"), ("old2", REPLACED, "model-b"),
    ]  # fmt: skip
    assert all(r["run_id"] == after[r["session_id"]]["run_id"] and r["done_at"] is not None for r in requests)
    assert cli("status")["resummary_queue"]["waiting"] == 0
    assert cli.store.backlog.drain(now_ms(), idle_window_s=0).resummaries_waiting == 0

    # The friction report: before and after, model-a → model-b.
    report = cli("friction-report")
    [group] = before_after(cli.store.resummaries.finished())
    assert (group.previous_model, group.new_model, group.count) == ("model-a", "model-b", 2)
    assert group.fidelity_after > group.fidelity_before
    assert group.fidelity_before == pytest.approx(sum(before[s]["fidelity"] for s in before) / 2, abs=1e-3)
    assert (group.ok_before, group.ok_after, group.kept_previous) == (1.0, 1.0, 0)
    html = (cli.store.path.parent / "friction-report.html").read_text()
    assert "Re-summaries: before and after" in html and "model-a" in html
    assert report["run_id"]


def test_imported_summaries_are_selected_for_a_resummary_only_when_asked_and_then_replaced(cli_of):
    """Issue 36: an imported summary is the export's word, left out of a re-summary unless the filters
    ask for its origin; then the sweep makes it again and keeps the export's in `summary_history`."""
    turns = make_turns("exported", 3)
    revision = input_revision(canonical_order(turns))
    with _server({"model-a": FAITHFUL_SUMMARY}) as server:
        cli = cli_of(server)
        folder = write_bundle(cli.tmp_path / "bundles" / "exported", turns)
        write_summaries(folder, [exported_summary("exported", memoryCount=3, dreamInputRevision=revision)])
        cli("ingest", str(folder))
        assert cli.summaries()["exported"]["origin"] == "imported"
        assert cli("plan", "--resummarize", "--tier", "raw")["matching"] == 0  # generated ones only
        assert _partitions(cli("plan", "--resummarize", "--origin", "imported")) == ["exported"]
        assert _partitions(cli("plan", "--resummarize", "--origin", "any", "--tier", "raw")) == ["exported"]
        swept = cli("sweep", "--resummarize", "--origin", "imported")
        assert swept["resummary_requests"]["recorded"] == 1
        assert [r["partition"] for r in swept["runs"]] == ["exported"] and swept["resummaries"] == 1
    row = cli.summaries()["exported"]
    assert (row["origin"], row["model"], row["title"]) == ("generated", "model-a", FAITHFUL_SUMMARY["title"])
    [kept] = cli.store.resummaries.history("exported")
    assert (kept["origin"], kept["summary"], kept["replaced_by_run"]) == (
        "imported",
        "Summary of exported.",
        row["run_id"],
    )
    [request] = cli.rows("SELECT outcome FROM resummary_requests")
    assert request["outcome"] == REPLACED


def test_a_junk_resummary_keeps_the_ok_summary_and_marks_the_request(cli_of):
    with _server({"model-a": FAITHFUL_SUMMARY, "model-b": TEMPLATE_SUMMARY}) as server:
        cli = cli_of(server)
        cli.ingest("s1")
        assert cli("sweep")["summarized"] == 1
        before = cli.summaries()["s1"]
        assert before["verdict"] == "ok"

        # Asked for from the UI's Launchpad: the request job, its filters as run config.
        cli.model("model-b")
        definitions = build_definitions(load_settings())
        ran = definitions.resolve_job_def("request_resummaries").execute_in_process(
            run_config={"ops": {"record_resummary_requests": {"config": {"code_version": SUMMARY_CODE_VERSION}}}},
            instance=DagsterInstance.get(),
        )
        assert ran.success and ran.output_for_node("record_resummary_requests") == 1

        swept = cli("sweep")
        assert swept["resummaries"] == 1
        [run] = swept["runs"]
        # The run made its summary (a model call) and did not store it: the partition says why.
        assert run["success"] and "does not replace the current ok generated one" in run["nothing_to_do"]

    # The template reply is junk: the ok summary stands, nothing went to the history.
    assert cli.summaries()["s1"] == before
    assert cli.store.resummaries.history("s1") == []
    [request] = cli.rows("SELECT * FROM resummary_requests")
    assert request["outcome"] == KEPT_PREVIOUS and request["run_id"] == run["run_id"]
    assert "does not replace the current ok generated one" in request["outcome_detail"]
    assert (request["previous_verdict"], request["new_model"], request["new_verdict"]) == ("ok", "model-b", "template")
    assert json.loads(request["criteria"]) == {"code_version": SUMMARY_CODE_VERSION}
    assert cli("status")["resummary_queue"] == {
        "requested": 1, "done": 1, "replaced": 0, "kept_previous": 1, "waiting": 0,
    }  # fmt: skip
    [group] = before_after(cli.store.resummaries.finished())
    assert (group.count, group.ok_before, group.ok_after, group.kept_previous) == (1, 1.0, 0.0, 1)
    assert group.fidelity_after is None and group.fidelity_before == pytest.approx(before["fidelity"], abs=1e-3)


def test_the_request_job_refuses_no_filter(tmp_path):
    settings = load_settings({"DIGEST_HOME": str(tmp_path / "home")})
    ran = (
        build_definitions(settings)
        .resolve_job_def("request_resummaries")
        .execute_in_process(run_config={}, raise_on_error=False)
    )
    assert not ran.success
    [failure] = [e for e in ran.all_events if e.is_step_failure]
    assert "at least one criterion" in str(failure.event_specific_data.error)


def test_an_older_store_gets_the_code_version_column_null_which_counts_as_not_current(tmp_path):
    store = DigestStore(tmp_path / "old.duckdb")
    store.migrate()
    # A store as version 11 left it: no code version, no re-summary tables, a summary in it.
    with duckdb.connect(str(store.path)) as con:
        con.execute("DROP TABLE resummary_requests")
        con.execute("DROP TABLE summary_history")
        con.execute("ALTER TABLE session_summaries DROP COLUMN code_version")
        con.execute("UPDATE schema_meta SET version = 11")
        con.execute(
            "INSERT INTO sessions (session_id, partition_key, turn_count, raw_bytes, input_revision, updated_at) VALUES ('s', 's', 1, 10, 'r', now())"
        )
        con.execute(
            """INSERT INTO session_summaries (session_id, summary, title, category, quality, productivity, impact,
               complexity, technologies, source_tier, degraded, raw_canonical, memory_count, mini_summary_count,
               input_revision, model, raw_tokens_estimate, prompt_tokens_estimate, route_reason, participating_agents,
               models, total_tool_calls, tools_used, source_agent_identities, created_at)
               VALUES ('s', 'x', 't', 'c', 1, 1, 1, 1, [], 'raw', false, true, 1, 0, 'r', 'm', 1, 1, 'within-cap',
               [], [], 0, [], [], now())"""
        )
    DigestStore(store.path).migrate()
    assert store.summaries.summary_row("s")["code_version"] is None
    assert [r["session_id"] for r in store.resummaries.matching(ResummaryCriteria(code_version=NOT_CURRENT), "v")] == [
        "s"
    ]
    assert store.resummaries.matching(ResummaryCriteria(code_version="v"), "v") == []
    assert store.resummaries.queue_counts()["requested"] == 0


def test_before_after_groups_by_previous_and_new_model():
    def done(previous, new, fb, fa, vb, va, outcome=REPLACED):
        return {
            "previous_model": previous, "new_model": new, "previous_fidelity": fb, "new_fidelity": fa,
            "previous_verdict": vb, "new_verdict": va, "outcome": outcome,
        }  # fmt: skip

    groups = before_after(
        [
            done("a", "b", 0.2, 0.6, "ok", "ok"),
            done("a", "b", 0.4, None, "echo", "template", KEPT_PREVIOUS),
            done("c", "b", 0.5, 0.5, "ok", "ok"),
        ]
    )
    assert [(g.previous_model, g.new_model, g.count) for g in groups] == [("a", "b", 2), ("c", "b", 1)]
    assert (groups[0].fidelity_before, groups[0].fidelity_after) == (0.3, 0.6)
    assert (groups[0].ok_before, groups[0].ok_after, groups[0].kept_previous) == (0.5, 0.5, 1)


def test_every_replace_keeps_the_previous_summary_and_closes_the_sessions_open_request(tmp_path):
    from tests.test_sensors import _seed_sessions, _summary

    store = DigestStore(tmp_path / "digest.duckdb")
    store.migrate()
    _seed_sessions(store, 1, 1_760_000_000_000)
    [session] = store.query("SELECT session_id, turn_count, input_revision FROM sessions").to_dict("records")
    first = _summary(session["session_id"], session["turn_count"], session["input_revision"])
    store.summaries.write_summary(first, run_id="r1", host="cpu", code_version="summary-v0")
    assert store.resummaries.history(session["session_id"]) == []  # nothing replaced
    store.resummaries.record_requests(ResummaryCriteria(code_version=NOT_CURRENT), [session["session_id"]])

    # Made again by any run (here one with no request of its own in mind): the first one is kept.
    store.summaries.write_summary(first, run_id="r2", host="gpu", code_version=SUMMARY_CODE_VERSION)
    [kept] = store.resummaries.history(session["session_id"])
    assert (kept["run_id"], kept["host"], kept["code_version"], kept["replaced_by_run"]) == (
        "r1", "cpu", "summary-v0", "r2",
    )  # fmt: skip
    assert kept["replaced_at"] is not None and kept["title"] == first.output.title
    [request] = store.resummaries.finished()
    assert (request["run_id"], request["outcome"]) == ("r2", REPLACED)
