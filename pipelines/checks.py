"""Asset checks on the store's invariants, over every stored summary.

Each check is a plain rule on one summary row (tested on its own) wrapped in an `@asset_check`
that reads the rows and reports the violations. They run in the hourly `report_friction` job and
on demand from the UI, not in the per-session runs, where a whole-store scan would repeat per run.
"""

from __future__ import annotations

from typing import Callable

from dagster import AssetCheckResult, MetadataValue, asset_check
from pydantic import ValidationError

from assets.sessions import session_summaries
from digest.summary_output import SessionSummaryOutput
from resources.bindings import DigestStoreResource

SOURCE_TIERS = ("raw", "miniSummary", "truncatedRaw")
ROUTE_REASONS = ("within-cap", "over-raw-cap", "over-safe-band", "raw-timeout")
OUTPUT_FIELDS = tuple(SessionSummaryOutput.model_fields)
EXAMPLES = 20  # violations listed in the check's metadata


def provenance_problems(row: dict) -> list[str]:
    """What is missing or contradictory in a summary's account of how it was made."""
    problems = []
    tier = row.get("source_tier")
    if tier not in SOURCE_TIERS:
        problems.append(f"source_tier {tier!r} is not one of {', '.join(SOURCE_TIERS)}")
    if row.get("degraded") is None or (tier in SOURCE_TIERS and row["degraded"] != (tier != "raw")):
        problems.append(f"degraded={row.get('degraded')} contradicts source_tier {tier!r}")
    if row.get("raw_canonical") is not True:
        problems.append("raw_canonical is not true")
    reason = row.get("route_reason")
    if reason not in ROUTE_REASONS:
        problems.append(f"route_reason {reason!r} is not one of {', '.join(ROUTE_REASONS)}")
    elif (tier == "raw") != (reason == "within-cap"):
        problems.append(f"route_reason {reason!r} contradicts source_tier {tier!r}")
    if not str(row.get("input_revision") or "").startswith("sha256:"):
        problems.append("input_revision is not a sha256 revision")
    if not row.get("model"):
        problems.append("model is empty")
    if not row.get("run_id"):
        problems.append("run_id is empty: no run made it")
    memory_count, mini_count = row.get("memory_count") or 0, row.get("mini_summary_count")
    if memory_count < 1:
        problems.append("memory_count is below 1")
    if mini_count is None or not 0 <= mini_count <= memory_count:
        problems.append(f"mini_summary_count {mini_count} is outside 0..memory_count")
    elif tier == "miniSummary" and mini_count == 0:
        problems.append("source_tier miniSummary with no mini summary")
    elif tier == "truncatedRaw" and mini_count > 0:
        problems.append("source_tier truncatedRaw although turns had mini summaries")
    return problems


def raw_cap_problems(row: dict) -> list[str]:
    """A raw summary whose raw prompt was over the cap in force when it was made: the one rule."""
    cap, estimate = row.get("raw_cap_tokens"), row.get("raw_tokens_estimate")
    if row.get("source_tier") == "raw" and cap is not None and estimate is not None and estimate > cap:
        return [f"raw prompt of {estimate} estimated tokens was sent over the raw cap {cap}"]
    return []


def schema_problems(row: dict) -> list[str]:
    """The stored output fields, validated again by the model that validated the reply."""
    try:
        SessionSummaryOutput.model_validate({name: row.get(name) for name in OUTPUT_FIELDS})
    except ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    return []


def check_rows(rows: list[dict], rule: Callable[[dict], list[str]]) -> AssetCheckResult:
    violations = [(row["session_id"], problems) for row in rows if (problems := rule(row))]
    table = "\n".join(
        f"| {session_id} | {'; '.join(problems).replace('|', '/')} |" for session_id, problems in violations[:EXAMPLES]
    )
    more = f"\n\n… and {len(violations) - EXAMPLES} more" if len(violations) > EXAMPLES else ""
    return AssetCheckResult(
        passed=not violations,
        metadata={
            "summaries_checked": len(rows),
            "violations": len(violations),
            "examples": MetadataValue.md(
                f"| session | problems |\n|---|---|\n{table}{more}" if violations else "no violations"
            ),
        },
    )


@asset_check(asset=session_summaries, description="Every summary says which path made it, consistently.")
def summaries_have_complete_provenance(store: DigestStoreResource) -> AssetCheckResult:
    return check_rows(store.store().summary_rows(), provenance_problems)


@asset_check(
    asset=session_summaries,
    description="No summary with source_tier=raw whose raw estimate exceeded the raw cap in force when it was made.",
)
def no_raw_summary_over_its_cap(store: DigestStoreResource) -> AssetCheckResult:
    return check_rows(store.store().summary_rows(), raw_cap_problems)


@asset_check(asset=session_summaries, description="Every stored summary validates against the output schema.")
def summaries_match_output_schema(store: DigestStoreResource) -> AssetCheckResult:
    return check_rows(store.store().summary_rows(), schema_problems)


store_checks = [summaries_have_complete_provenance, no_raw_summary_over_its_cap, summaries_match_output_schema]
