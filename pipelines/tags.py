"""The keys of the tags this project puts on Dagster runs (tag values are plain text)."""

# Set on the runs a sweep launches (the sensors, the CLI), never on one asked for by hand: its value
# says which (`cli`, `sensor`, `inbox`, `mini-summaries`, `graph`).
SWEEP_TAG = "digest/sweep"
ROUTE_TAG = "digest/route"  # a summary run's planned source tier, `staged` for a replay, `graph` for a digest run
# A summary run that makes a session's current degraded summary again, its mini-summary coverage
# having crossed a step: the step that summary was made at.
UPGRADE_TAG = "digest/upgrade_from_step"
# A summary run of a session named by hand (`session-digest sweep --session`): no failure backoff.
EXPLICIT_TAG = "digest/explicit"
BUDGET_TAG = "digest/budget"  # the sweep's budget, for the UI
PRIORITY_TAG = "digest/priority"  # the mini-summary sweep's order
ESTIMATED_S_TAG = "digest/estimated_s"  # a summary run's estimated model seconds
MODEL_HOST_TAG = "digest/model_host"  # the model host a run's calls go to; the run queue limits on it
MODEL_HOST_REASON_TAG = "digest/model_host_reason"
INBOX_BATCH_TAG = "digest/inbox_batch"  # an ingest run's inbox batch, so the next tick can tell which files went in
FILES_TAG = "digest/files"  # an ingest run's number of inbox files
HOST_TAG = "digest/host"  # the machine of the process that runs the run
PID_TAG = "digest/pid"
# The process's start time, so a recycled pid is not mistaken for the run's own process.
PID_STARTED_TAG = "digest/pid_started"
