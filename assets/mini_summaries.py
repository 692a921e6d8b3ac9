"""The `turn_mini_summaries` asset: maps its work's outcome (`assets/work/mini_summaries.py`) to what
Dagster records."""

from dagster import AssetExecutionContext, Config, Failure, MaterializeResult, MetadataValue, asset

from assets.partitions import sessions_partitions
from assets.sessions import materialized, raw_sessions, run_facts
from assets.work.mini_summaries import MiniSummaryOutcome, coverage_metadata, fill_partition, iso
from digest.mini_summaries import FillReport
from digest.prompts import MINI_SUMMARY_CODE_VERSION
from resources.bindings import ChatModelResource, CircuitPolicyResource, DigestStoreResource, MiniSummaryPolicyResource

PREVIEW_ROWS = 20


class MiniSummaryConfig(Config):
    # A session in its no-progress backoff is skipped (a summary run then goes on with what it has);
    # set this to try it anyway, e.g. after fixing the model server.
    ignore_backoff: bool = False
    # Set by the summary job: a session within the cap is summarized raw, so mini summaries would
    # cost model time there and change nothing; the mini-summary backfill fills them later.
    only_if_degraded: bool = False


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _preview(report: FillReport) -> str:
    lines = []
    if report.generated:
        lines += ["| turn | mini summary |", "|---|---|"]
        lines += [f"| `{turn_id}` | {_cell(text)} |" for turn_id, text in report.generated[:PREVIEW_ROWS]]
        if len(report.generated) > PREVIEW_ROWS:
            lines.append(f"\n… and {len(report.generated) - PREVIEW_ROWS} more")
    for label, ids in (
        ("archived (no content)", report.archived_no_content),
        ("archived (attempts exhausted)", report.archived_after_failures),
        ("archived (reply judged junk)", report.archived_junk),
    ):
        if ids:
            lines.append(f"\n**{label}**: " + ", ".join(f"`{i}`" for i in ids[:PREVIEW_ROWS]))
    return "\n".join(lines) or "nothing generated in this run"


@asset(
    partitions_def=sessions_partitions,
    deps=[raw_sessions],
    group_name="sessions",
    kinds={"duckdb"},
    pool="model",
    code_version=MINI_SUMMARY_CODE_VERSION,
)
def turn_mini_summaries(
    context: AssetExecutionContext,
    config: MiniSummaryConfig,
    store: DigestStoreResource,
    model: ChatModelResource,
    mini_summaries: MiniSummaryPolicyResource,
    circuit: CircuitPolicyResource,
) -> MaterializeResult:
    """One line per turn (at most 280 characters) from the user prompt and the agent response, never
    the thought, for the session's turns that have none. Imported mini summaries are kept.

    Budgeted in model time; the newest turns first (a fresh reserve), then the oldest. A turn with
    no content, or that failed its last allowed attempt, is archived: it keeps its text and stays in
    the raw summary input, but is not tried again until un-archived.
    """
    policy = mini_summaries.policy()
    outcome = fill_partition(
        store.open(), model.hosts, run_facts(context), context.partition_key, policy, circuit.policy(),
        only_if_degraded=config.only_if_degraded, ignore_backoff=config.ignore_backoff, log=context.log.info,
    )  # fmt: skip
    if outcome.failure:
        raise Failure(outcome.failure)
    return materialized(context, _metadata(outcome, policy.budget_s))


def _metadata(outcome: MiniSummaryOutcome, budget_s: float) -> dict:
    report = outcome.report
    return {
        "session_id": outcome.session_id,
        "host": outcome.host,
        "pending_at_start": report.pending,
        "attempted": report.attempted,
        "generated": len(report.generated),
        "failed": report.failed,
        "archived_no_content": len(report.archived_no_content),
        "archived_generation_timeout": len(report.archived_after_failures),
        "archived_junk": len(report.archived_junk),
        "causes": MetadataValue.json(report.cause_tally()),
        "model_seconds": round(report.model_seconds, 2),
        "budget_s": budget_s,
        "budget_exhausted": report.budget_exhausted,
        "left_for_later": report.left_for_later,
        "done_by_another_run": report.done_by_another_run,
        "cut_at_output_cap": report.cut_at_output_cap,
        "backoff_until": iso(outcome.backoff_until_ms) if outcome.backoff_until_ms else "none",
        **coverage_metadata(outcome.counts),
        "preview": MetadataValue.md(_preview(report)),
    }
