from dagster import AssetSelection, define_asset_job, in_process_executor

from assets.graph import session_graph
from assets.mini_summaries import turn_mini_summaries
from assets.sessions import raw_sessions, raw_turns, session_summaries

ingest_job = define_asset_job("ingest", selection=[raw_turns], description="Ingest export bundles into DuckDB.")
summarize_job = define_asset_job(
    "summarize_sessions",
    # Without the store's checks: each reads every summary, so after each of thousands of one-session
    # runs it would recheck the whole store, and its steps' events were half of a run's record in the
    # Dagster instance (issue 20). The hourly report job runs them, and the asset's Checks tab on demand.
    selection=AssetSelection.assets(raw_sessions, turn_mini_summaries, session_summaries).without_checks(),
    # One process per run: DuckDB takes one writer per file, and per-step processes buy nothing here.
    executor_def=in_process_executor,
    config={"ops": {"turn_mini_summaries": {"config": {"only_if_degraded": True}}}},
    description="Summarize one session: raw under the raw-synthesis cap; over it, fill the missing mini "
    "summaries first, then the degraded summary.",
)
fill_mini_summaries_job = define_asset_job(
    "fill_mini_summaries",
    selection=[turn_mini_summaries],
    executor_def=in_process_executor,
    description="The mini-summary backfill: one session's missing mini summaries, within the run budget.",
)
# Its own job, not a step of `summarize_sessions`: a digest is one model call per chunk (dozens for a
# large session on a small context), retried and marked undigestible on its own terms, and run on
# its own cadence as the original's REM pass is; inside the summary runs it would blow their budget.
digest_job = define_asset_job(
    "digest_sessions",
    selection=AssetSelection.assets(session_graph).without_checks(),  # as summarize_sessions
    executor_def=in_process_executor,
    description="Digest one summarized session into the graph: provenance nodes and the entities and "
    "relations extracted from its raw turns, chunk by chunk.",
)
