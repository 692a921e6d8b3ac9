from dagster import define_asset_job, in_process_executor

from assets.sessions import raw_sessions, raw_turns, session_summaries

ingest_job = define_asset_job("ingest", selection=[raw_turns], description="Ingest export bundles into DuckDB.")
summarize_job = define_asset_job(
    "summarize_sessions",
    selection=[raw_sessions, session_summaries],
    # One process per run: DuckDB takes one writer per file, and per-step processes buy nothing here.
    executor_def=in_process_executor,
    description="Summarize one session: raw under the raw-synthesis cap, degraded over it.",
)
