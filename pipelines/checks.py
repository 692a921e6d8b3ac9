"""Asset checks on the store's invariants, over the whole store.

Each check is a plain rule on one row (or one session's graph), tested on its own, wrapped in an
`@asset_check` that reads the store and lists the violations. Dagster runs them in the hourly
`report_friction` job and on demand from the Checks tab; not in one-session runs (each check reads
the whole store, and a run's check steps were half of its record in the Dagster instance, issue 20).
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
from pydantic import ValidationError

from assets.friction_report import friction_report
from digest.fidelity import FLOOR as FIDELITY_FLOOR
from digest.graph import RAW_EVIDENCE, grounded
from digest.summary_output import SessionSummaryOutput
from digest.synthesis import Route, SourceTier
from digest.verdict import JUNK
from resources.bindings import DigestStoreResource

SOURCE_TIERS = tuple(SourceTier)
ROUTE_REASONS = tuple(Route)
OUTPUT_FIELDS = tuple(SessionSummaryOutput.model_fields)
EXAMPLES = 20  # violations listed in the check's metadata
# What `digest.graph` builds from stored rows rather than from extraction: the summary, session,
# turns, agents and issues, and the edges between them. Everything else is evidence.
PROVENANCE_LABELS = frozenset({"SESSION_SUMMARY", "SESSION", "AGENT_MEMORY", "AGENT", "ISSUE"})
PROVENANCE_EDGES = frozenset({"ORIGINATES_IN", "AUTHORED_BY", "DISCUSSED_IN", "SESSION_COMPLETED", "SPAWNED_MEMORY"})


def provenance_problems(row: dict) -> list[str]:
    """What is missing or contradictory in a summary's account of how it was made."""
    problems = []
    tier = row.get("source_tier")
    if tier not in SOURCE_TIERS:
        problems.append(f"source_tier {tier!r} is not one of {', '.join(SOURCE_TIERS)}")
    if row.get("degraded") is None or (tier in SOURCE_TIERS and row["degraded"] != (tier != SourceTier.RAW)):
        problems.append(f"degraded={row.get('degraded')} contradicts source_tier {tier!r}")
    if row.get("raw_canonical") is not True:
        problems.append("raw_canonical is not true")
    if not str(row.get("input_revision") or "").startswith("sha256:"):
        problems.append("input_revision is not a sha256 revision")
    if row.get("origin") == "imported":
        # An export's summary: no run, route, model or mini summary count of ours made it.
        return problems
    reason = row.get("route_reason")
    if reason not in ROUTE_REASONS:
        problems.append(f"route_reason {reason!r} is not one of {', '.join(ROUTE_REASONS)}")
    elif (tier == SourceTier.RAW) != (reason == Route.WITHIN_CAP):
        problems.append(f"route_reason {reason!r} contradicts source_tier {tier!r}")
    if not row.get("model"):
        problems.append("model is empty")
    if not row.get("run_id"):
        problems.append("run_id is empty: no run made it")
    memory_count, mini_count = row.get("memory_count") or 0, row.get("mini_summary_count")
    if memory_count < 1:
        problems.append("memory_count is below 1")
    if mini_count is None or not 0 <= mini_count <= memory_count:
        problems.append(f"mini_summary_count {mini_count} is outside 0..memory_count")
    elif tier == SourceTier.MINI_SUMMARY and mini_count == 0:
        problems.append("source_tier miniSummary with no mini summary")
    elif tier == SourceTier.TRUNCATED_RAW and mini_count > 0:
        problems.append("source_tier truncatedRaw although turns had mini summaries")
    return problems


def raw_cap_problems(row: dict) -> list[str]:
    """A raw summary whose raw prompt was over the cap in force when it was made: the one rule. The
    tokens are the host tokenizer's count when the route was decided on one, else the estimate."""
    cap, counted = row.get("raw_cap_tokens"), row.get("raw_tokens_counted")
    tokens, how = (counted, "counted") if counted is not None else (row.get("raw_tokens_estimate"), "estimated")
    if row.get("source_tier") == SourceTier.RAW and cap is not None and tokens is not None and tokens > cap:
        return [f"raw prompt of {tokens} {how} tokens was sent over the raw cap {cap}"]
    return []


def schema_problems(row: dict) -> list[str]:
    """The stored output fields, validated again by the model that validated the reply."""
    try:
        SessionSummaryOutput.model_validate({name: row.get(name) for name in OUTPUT_FIELDS})
    except ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    return []


def fidelity_problems(row: dict) -> list[str]:
    """A summary that names under FLOOR (weighted) of its session's salient identifiers."""
    score = row.get("fidelity")
    if score is None or score >= FIDELITY_FLOOR:
        return []
    return [f"fidelity {score:.2f} < {FIDELITY_FLOOR} ({row['origin']}, {row['source_tier']}): {row['title']!r}"]


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
    """When this check's previous completed evaluation (another run's) was planned: the summaries
    written after it are this one's to count (one written while that check ran is counted twice
    rather than never)."""
    key = context.check_specs[0].key
    history = context.instance.event_log_storage.get_asset_check_execution_history(
        key, limit=5, status=COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES
    )
    previous = next((r for r in history if r.run_id != context.run.run_id), None)
    return datetime.fromtimestamp(previous.create_timestamp, UTC) if previous else None


def graph_evidence_problems(graph: dict) -> list[str]:
    """Entities and relations of one session's graph that its raw turns do not ground: each must say
    it came from the raw turns and, for an entity, be named there (the rule `digest.graph` applies
    when it builds the graph), so a word found only in the summary text is caught."""
    raw_folded = graph["raw_text"].casefold()
    problems = []
    for node in graph["nodes"]:
        if node["label"] in PROVENANCE_LABELS:
            continue
        name, evidence = str(node["properties"].get("name") or ""), node["properties"].get("evidence")
        if evidence != RAW_EVIDENCE:
            problems.append(f"{node['label']} {name!r} has evidence {evidence!r}")
        elif not grounded(name, raw_folded):
            problems.append(f"{node['label']} {name!r} is named nowhere in the raw turns")
    for edge in graph["edges"]:
        evidence = edge["properties"].get("evidence")
        if edge["type"] not in PROVENANCE_EDGES and evidence != RAW_EVIDENCE:
            problems.append(f"edge {edge['id']} has evidence {evidence!r}")
    return problems


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
    return check_rows(store.store().reports.summary_rows(), provenance_problems)


@asset_check(
    asset=friction_report,
    description="No summary with source_tier=raw whose raw estimate exceeded the raw cap in force when it was made.",
)
def no_raw_summary_over_its_cap(store: DigestStoreResource) -> AssetCheckResult:
    return check_rows(store.store().reports.summary_rows(), raw_cap_problems)


@asset_check(asset=friction_report, description="Every stored summary validates against the output schema.")
def summaries_match_output_schema(store: DigestStoreResource) -> AssetCheckResult:
    return check_rows(store.store().reports.summary_rows(), schema_problems)


@asset_check(
    asset=friction_report,
    description=f"Warns on summaries whose fidelity (docs/fidelity.md) is under the floor {FIDELITY_FLOOR}.",
)
def summaries_over_the_fidelity_floor(store: DigestStoreResource) -> AssetCheckResult:
    result = check_rows(store.store().reports.summary_rows(), fidelity_problems)
    return AssetCheckResult(passed=result.passed, metadata=result.metadata, severity=AssetCheckSeverity.WARN)


@asset_check(
    asset=friction_report,
    description="Fails when more than DIGEST_JUNK_SHARE_MAX of the summaries written since this check last ran have "
    "a junk verdict (docs/routing.md#junk).",
)
def junk_share_since_last_check(context, store: DigestStoreResource) -> AssetCheckResult:
    since = last_check_started(context)
    return junk_share_result(store.store().reports.summaries_since(since), store.junk_share_max, since)


@asset_check(
    asset=friction_report,
    description="No graph evidence drawn from a degraded summary's text: every entity and relation in the graph "
    "of a session with a degraded summary is grounded in its raw turns.",
)
def graph_evidence_from_raw_turns_only(store: DigestStoreResource) -> AssetCheckResult:
    db = store.store()
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
