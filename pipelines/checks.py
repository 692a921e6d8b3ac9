"""Asset checks on the store's invariants, over the whole store.

Each check is a plain rule on one row (or one session's graph), tested on its own, wrapped in an
`@asset_check` that reads the store and lists the violations. Dagster runs them in the hourly
`report_friction` job and on demand from the Checks tab; not in one-session runs (each check reads
the whole store, and a run's check steps were half of its record in the Dagster instance).
So they are the checks of `friction_report`, the store-wide asset, not of the per-session assets
they are about: Dagster adds every check of a selected asset to a run it was not told the checks
of, and a Materialize of sessions from the UI (a backfill) tells it none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from dagster import AssetCheckExecutionContext, AssetCheckResult, AssetCheckSeverity, MetadataValue, asset_check
from dagster._core.storage.asset_check_execution_record import COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES

from assets.friction_report import friction_report
from digest.fidelity import FLOOR as FIDELITY_FLOOR
from digest.invariants import (
    fidelity_problems,
    graph_evidence_problems,
    provenance_problems,
    raw_cap_problems,
    schema_problems,
)
from digest.verdict import JUNK
from resources.bindings import DigestStoreResource

EXAMPLES = 20  # violations listed in the check's metadata


def junk_share_result(rows: list[dict], share_max: float, since: datetime | None) -> AssetCheckResult:
    """Fails when more than `share_max` of these summaries (written since the last check) are junk."""
    junk = [r for r in rows if r["verdict"] in JUNK]
    share = len(junk) / len(rows) if rows else 0.0
    table = "\n".join(
        f"| {r['session_id']} | {r['verdict']} | {r['origin']} {r['source_tier']} | {r['title']!r} |".replace("\n", " ")
        for r in junk[:EXAMPLES]
    )
    more = f"\n\n… and {len(junk) - EXAMPLES} more" if len(junk) > EXAMPLES else ""
    return AssetCheckResult(
        passed=share <= share_max,
        metadata={
            "since": since.isoformat() if since else "the first check: every summary",
            "summaries_written": len(rows),
            "junk": len(junk),
            "junk_share": round(share, 4),
            "junk_share_max": share_max,
            "by_verdict": MetadataValue.json(dict(sorted(Counter(r["verdict"] for r in rows).items()))),
            "examples": MetadataValue.md(
                f"| session | verdict | made | title |\n|---|---|---|---|\n{table}{more}" if junk else "no junk"
            ),
        },
    )


def last_check_started(context: AssetCheckExecutionContext) -> datetime | None:
    """When the run of this check's previous completed evaluation (another run's) started: the
    summaries written after it are this one's to count (one written while that check ran is counted
    twice rather than never). The run's start, not the record's creation, which is kept in whole
    seconds: a summary written in the same second just before would be counted again."""
    key = context.check_specs[0].key
    history = context.instance.event_log_storage.get_asset_check_execution_history(
        key, limit=5, status=COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES
    )
    previous = next((r for r in history if r.run_id != context.run.run_id), None)
    if previous is None:
        return None
    run = context.instance.get_run_record_by_id(previous.run_id)
    started = run.start_time if run is not None and run.start_time else previous.create_timestamp
    return datetime.fromtimestamp(started, UTC)


def check_rows(rows: Iterable[dict], rule: Callable[[dict], list[str]], what: str = "summaries") -> AssetCheckResult:
    """The rule over every row (read one at a time), its violations listed by session."""
    checked, violations = 0, []
    for row in rows:
        checked += 1
        if problems := rule(row):
            violations.append((row["session_id"], problems))
    table = "\n".join(
        f"| {session_id} | {'; '.join(problems).replace('|', '/')} |" for session_id, problems in violations[:EXAMPLES]
    )
    more = f"\n\n… and {len(violations) - EXAMPLES} more" if len(violations) > EXAMPLES else ""
    return AssetCheckResult(
        passed=not violations,
        metadata={
            f"{what}_checked": checked,
            "violations": len(violations),
            "examples": MetadataValue.md(
                f"| session | problems |\n|---|---|\n{table}{more}" if violations else "no violations"
            ),
        },
    )


@asset_check(asset=friction_report, description="Every summary says which path made it, consistently.")
def summaries_have_complete_provenance(store: DigestStoreResource) -> AssetCheckResult:
    return check_rows(store.open().reports.summary_rows(), provenance_problems)


@asset_check(
    asset=friction_report,
    description="No summary with source_tier=raw whose raw estimate exceeded the raw cap in force when it was made.",
)
def no_raw_summary_over_its_cap(store: DigestStoreResource) -> AssetCheckResult:
    return check_rows(store.open().reports.summary_rows(), raw_cap_problems)


@asset_check(asset=friction_report, description="Every stored summary validates against the output schema.")
def summaries_match_output_schema(store: DigestStoreResource) -> AssetCheckResult:
    return check_rows(store.open().reports.summary_rows(), schema_problems)


@asset_check(
    asset=friction_report,
    description=f"Warns on summaries whose fidelity (docs/fidelity.md) is under the floor {FIDELITY_FLOOR}.",
)
def summaries_over_the_fidelity_floor(store: DigestStoreResource) -> AssetCheckResult:
    result = check_rows(store.open().reports.summary_rows(), fidelity_problems)
    return AssetCheckResult(passed=result.passed, metadata=result.metadata, severity=AssetCheckSeverity.WARN)


@asset_check(
    asset=friction_report,
    description="Fails when more than DIGEST_JUNK_SHARE_MAX of the summaries written since this check last ran have "
    "a junk verdict (docs/routing.md#junk).",
)
def junk_share_since_last_check(context, store: DigestStoreResource) -> AssetCheckResult:
    since = last_check_started(context)
    return junk_share_result(store.open().reports.summaries_since(since), store.junk_share_max, since)


@asset_check(
    asset=friction_report,
    description="No graph evidence drawn from a degraded summary's text: every entity and relation in the graph "
    "of a session with a degraded summary is grounded in its raw turns.",
)
def graph_evidence_from_raw_turns_only(store: DigestStoreResource) -> AssetCheckResult:
    db = store.open()
    graphs = ({"session_id": sid, **db.reports.graph_evidence(sid)} for sid in db.reports.degraded_graph_sessions())
    return check_rows(graphs, graph_evidence_problems, what="degraded_session_graphs")


store_checks = [
    summaries_have_complete_provenance,
    no_raw_summary_over_its_cap,
    summaries_match_output_schema,
    graph_evidence_from_raw_turns_only,
]
# What the model wrote lately, judged: in the hourly report job, where "since the last check" is an hour.
junk_checks = [junk_share_since_last_check]
# Warnings on what a summary is worth, not invariants: on the Checks tab, not in the
# hourly report's all-must-pass set.
quality_checks = [summaries_over_the_fidelity_floor]
