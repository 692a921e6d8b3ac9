from dagster import AssetSelection, JobDefinition, RunRequest, define_asset_job

from assets.graph import session_graph
from assets.mini_summaries import turn_mini_summaries
from assets.sessions import raw_sessions, raw_turns, session_summaries

ingest_job = define_asset_job("ingest", selection=[raw_turns], description="Ingest export bundles into DuckDB.")
summarize_job = define_asset_job(
    "summarize_sessions",
    # Without the store's checks: each reads every summary, so after each of thousands of one-session
    # runs it would recheck the whole store, and its steps' events were half of a run's record in the
    # Dagster instance. The hourly report job runs them, and the Checks tab on demand.
    selection=AssetSelection.assets(raw_sessions, turn_mini_summaries, session_summaries).without_checks(),
    config={"ops": {"turn_mini_summaries": {"config": {"only_if_degraded": True}}}},
    description="Summarize one session: raw under the raw-synthesis cap; over it, the degraded summary "
    "(a run asked for by hand fills the missing mini summaries first, within their budget; a sweep's run does not).",
)
# What a summary run a sweep launches materializes: not `turn_mini_summaries`. Within the cap it would
# do nothing but add a third of the run's events to the Dagster instance; over it, the
# session gets its first summary from the mini summaries it has (else truncated raw lines) now, and
# the mini-summary backfill fills the rest, after which a sweep makes the summary again at each
# coverage step (over-cap sessions hold most turns, and waiting for all their mini
# summaries left most sessions without any summary for most of a backlog).
SWEEP_RUN_ASSETS = (raw_sessions.key, session_summaries.key)


def requested_job(job: JobDefinition, request: RunRequest) -> JobDefinition:
    """`job` as the daemon runs `request`, for an in-process run (the CLI's): the subset of the
    assets and checks the request names. Run it with `default_run_config`."""
    if request.asset_selection is None:
        return job
    checks = None if request.asset_check_keys is None else set(request.asset_check_keys)
    return job.get_subset(asset_selection=set(request.asset_selection), asset_check_selection=checks)


def default_run_config(job: JobDefinition, partition_key: str | None) -> dict:
    """The config a run of `job` gets when it is given none (what a sensor's run request gets). Of a
    subset, its own steps' entries only: in process, a subset runs as a job of those steps alone,
    which refuses config for the others (the daemon's run of a subset ignores it)."""
    if job.partitioned_config is not None:
        config = dict(job.get_run_config_for_partition_key(partition_key)) if partition_key else {}
    else:
        config = dict(job.run_config or {})
    if "ops" in config:
        config["ops"] = {name: op for name, op in config["ops"].items() if job.graph.has_node_named(name)}
    return config


fill_mini_summaries_job = define_asset_job(
    "fill_mini_summaries",
    selection=[turn_mini_summaries],
    description="The mini-summary backfill: one session's missing mini summaries, within the run budget.",
)
# Its own job, not a step of `summarize_sessions`: a digest is one model call per chunk (dozens for a
# large session on a small context), retried and marked undigestible on its own terms, and run on
# its own cadence as the original's REM pass is; inside the summary runs it would blow their budget.
digest_job = define_asset_job(
    "digest_sessions",
    selection=AssetSelection.assets(session_graph).without_checks(),  # as summarize_sessions
    description="Digest one summarized session into the graph: provenance nodes and the entities and "
    "relations extracted from its raw turns, chunk by chunk.",
)
