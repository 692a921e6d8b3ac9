"""The friction report asset: thin; the report itself is `digest.friction_report`."""

import os
from pathlib import Path

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from assets.graph import session_graph
from assets.mini_summaries import turn_mini_summaries
from assets.sessions import session_summaries
from assets.work.backlog import measure
from digest.friction_report import build_report, render_html, render_markdown
from digest.scheduling import now_ms
from resources.bindings import ChatModelResource, CircuitPolicyResource, DigestStoreResource, SweepPolicyResource

REPORT_FILE = "friction-report.html"
REPORT_COST_DAYS = 30  # the days of model time by model, host and day the report shows


def _write_atomically(path: Path, text: str) -> None:
    """Readers (a browser tab, a second run) see the old file or the new one, never half of one."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


# It reads what these three leave in the ledger: attempts, friction, coverage, digest state.
@asset(deps=[turn_mini_summaries, session_summaries, session_graph], group_name="reports", kinds={"duckdb", "html"})
def friction_report(
    context: AssetExecutionContext,
    store: DigestStoreResource,
    model: ChatModelResource,
    circuit: CircuitPolicyResource,
    sweep: SweepPolicyResource,
) -> MaterializeResult:
    """Friction grouped by (asset, consumer, symptom) with the surfacing rule, the pre-routes and
    the model time they saved against what the degraded path spent and threw away, given-up
    calls, suspected truncation, the degraded share, mini-summary coverage, the time to each
    session's first summary, the re-summaries' before and after by model, the model hosts' circuits and speed, the slowest calls, and the raw cap calibrated on this host's own calls.

    Also written as an HTML file with a chart beside the DuckDB file (`report_path`).
    """
    # The model resource gives the settings in force and the hosts; it starts no server unless a
    # client is asked for.
    db = store.open()
    rows = db.reports.friction_report_rows()
    report = build_report(
        rows["events"],
        rows["attempts"],
        rows["summaries"],
        model,
        circuit.policy(),
        mini_coverage=rows["mini_coverage"],
        undigestible=rows["undigestible"],
        host_circuits=rows["host_circuits"],
        slowdowns=db.speed.host_slowdowns([(h.name, h.model) for h in model.hosts.fleet.hosts]),
        auto_caps=db.speed.auto_caps(),
        cost_totals=db.reports.cost_totals(REPORT_COST_DAYS),
        sessions=rows["sessions"],
        backlog=measure(db, model.hosts.fleet, circuit.policy(), sweep.policy(), now_ms()),
        resummaries=db.resummaries.finished(),
        projects=db.projects.project_rows(),
    )
    path = db.path.parent / REPORT_FILE
    _write_atomically(path, render_html(report))
    context.log.info(f"friction report written to {path}")
    return MaterializeResult(
        metadata={
            **report.numbers(),
            "report_path": MetadataValue.path(str(path)),
            "report": MetadataValue.md(render_markdown(report)),
        }
    )
