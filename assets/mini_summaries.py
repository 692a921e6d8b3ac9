"""The `turn_mini_summaries` asset: thin over `digest.mini_summaries` (policy) and the store."""

from datetime import UTC, datetime

from dagster import AssetExecutionContext, Config, MaterializeResult, MetadataValue, asset

from assets.partitions import sessions_partitions
from assets.sessions import host_check, out_of_rotation_reason, raw_sessions, run_host, session_or_fail
from digest.mini_summaries import FillReport, fill_mini_summaries, headed_for_degraded
from digest.scheduling import now_ms
from resources.bindings import ChatModelResource, CircuitPolicyResource, DigestStoreResource, MiniSummaryPolicyResource
from resources.store import MiniSummaryLedger

# Bump when the prompt or the output cleaning changes.
MINI_SUMMARY_CODE_VERSION = "mini-summary-v1"
PREVIEW_ROWS = 20


class MiniSummaryConfig(Config):
    # A session in its no-progress backoff is skipped (a summary run then goes on with what it has);
    # set this to try it anyway, e.g. after fixing the model server.
    ignore_backoff: bool = False
    # Set by the summary job: a session within the cap is summarized raw, so mini summaries would
    # cost model time there and change nothing; the mini-summary backfill fills them later.
    only_if_degraded: bool = False


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


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
    db = store.store()
    session = session_or_fail(db, context.partition_key)
    session_id = session["session_id"]
    policy = mini_summaries.policy()
    # The summary's host: whether the session is headed for the degraded path depends on it.
    host, _ = run_host(context, db, model, session_id)

    backoff_until_ms = db.mini_summaries.mini_summary_backoff_until_ms(session_id)
    if config.only_if_degraded and not headed_for_degraded(
        session["raw_bytes"], session["turn_count"], model.limits(host, db)
    ):
        context.log.info(f"session {session_id!r} is within the raw cap: its summary needs no mini summaries")
        report = FillReport()
    elif backoff_until_ms is not None and backoff_until_ms > now_ms() and not config.ignore_backoff:
        context.log.info(
            f"session {session_id!r} made no progress last time; backing off until {_iso(backoff_until_ms)}"
        )
        report = FillReport()
    else:
        report = fill_mini_summaries(
            db.mini_summaries.pending_mini_summary_turns(session_id),
            model.client(db, host=host),
            model.limits(host, db),
            policy,
            MiniSummaryLedger(db, context.run.run_id, host=host, circuit=circuit.policy()),
            pacer=model.pacer(db, host, policy.timeout_s),
            host_available=host_check(db, host),
        )
        if report.host_out_of_rotation:
            context.log.info(f"{out_of_rotation_reason(host)}; {report.left_for_later} turn(s) left for later")
        backoff_until_ms = report.backoff_until_ms(now_ms())
        db.mini_summaries.record_backfill_run(
            session_id, report.attempted, len(report.generated), backoff_until_ms, context.run.run_id
        )

    counts = db.mini_summaries.mini_summary_counts(session_id)
    return MaterializeResult(
        metadata={
            "session_id": session_id,
            "host": host,
            "pending_at_start": report.pending,
            "attempted": report.attempted,
            "generated": len(report.generated),
            "failed": report.failed,
            "archived_no_content": len(report.archived_no_content),
            "archived_generation_timeout": len(report.archived_after_failures),
            "causes": MetadataValue.json(report.cause_tally()),
            "model_seconds": round(report.model_seconds, 2),
            "budget_s": policy.budget_s,
            "budget_exhausted": report.budget_exhausted,
            "left_for_later": report.left_for_later,
            "done_by_another_run": report.done_by_another_run,
            "cut_at_output_cap": report.cut_at_output_cap,
            "backoff_until": _iso(backoff_until_ms) if backoff_until_ms else "none",
            "turns": counts["turns"],
            "mini_summaries_imported": counts["imported"],
            "mini_summaries_generated": counts["generated"],
            "turns_archived": counts["archived"],
            "turns_pending": counts["pending"],
            "mini_summary_coverage": counts["with_mini_summary"] / counts["turns"] if counts["turns"] else 0.0,
            "preview": MetadataValue.md(_preview(report)),
        }
    )
