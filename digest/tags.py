"""The keys of the tags this project puts on Dagster runs (tag values are plain text).

The UI shows the tags a user filters runs by: who launched a run (`digest/sweep`), its route
and its model host (the run queue's per-host limit counts this one, so it stays a plain tag).
The plumbing the project's own code reads back goes under Dagster's hidden prefix (tag type
HIDDEN: "metadata used by Dagster for execution but isn't useful for users to see"), which the UI
leaves out; filters by tag (`RunsFilter(tags=...)`) match them all the same."""

HIDDEN = ".dagster/"  # Dagster's `HIDDEN_TAG_PREFIX`

# Set on the runs a sweep launches (the sensors, the CLI), never on one asked for by hand: its value
# says which (`cli`, `sensor`, `inbox`, `mini-summaries`, `graph`).
SWEEP_TAG = "digest/sweep"
ROUTE_TAG = "digest/route"  # a summary run's planned source tier, `staged` for a replay, `graph` for a digest run
# A summary run that makes a session's current degraded summary again, its mini-summary coverage
# having crossed a step: the step that summary was made at.
UPGRADE_TAG = f"{HIDDEN}digest_upgrade_from_step"
# A summary run that makes a current summary again because a re-summary was asked for
# (`sweep --resummarize`): a user filters the runs of a re-summary on it.
RESUMMARY_TAG = "digest/resummary"
# A summary run of a session named by hand (`session-digest sweep --session`): no failure backoff.
EXPLICIT_TAG = f"{HIDDEN}digest_explicit"
MODEL_HOST_TAG = "digest/model_host"  # the model host a run's calls go to; the run queue limits on it
BUDGET_TAG = f"{HIDDEN}digest_budget"  # the sweep's budget
PRIORITY_TAG = f"{HIDDEN}digest_priority"  # the mini-summary sweep's order
ESTIMATED_S_TAG = f"{HIDDEN}digest_estimated_s"  # a summary run's estimated model seconds
MODEL_HOST_REASON_TAG = f"{HIDDEN}digest_model_host_reason"  # why the sweep chose that host
# An ingest run's inbox batch, so the next tick can tell which files went in, and how many files.
INBOX_BATCH_TAG = f"{HIDDEN}digest_inbox_batch"
FILES_TAG = f"{HIDDEN}digest_files"
HOST_TAG = f"{HIDDEN}digest_host"  # the machine of the process that runs the run
PID_TAG = f"{HIDDEN}digest_pid"
# The process's start time, so a recycled pid is not mistaken for the run's own process.
PID_STARTED_TAG = f"{HIDDEN}digest_pid_started"
