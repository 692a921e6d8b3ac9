"""The work of each asset as a plain function: the store's reads and writes and the model calls of
one partition's run, returning an outcome that the asset maps to a `MaterializeResult`, an
observation or a `Failure` (`describe_partition` for `raw_sessions`, `summarize_partition`,
`fill_partition` for `turn_mini_summaries`, `digest_partition` for `session_graph`).

No Dagster here: tests call these with a DuckDB store and the local model server, no run. They sit
beside the assets because each is one asset's body and changes with it; not in `digest/`, the
policy layer, which does no I/O, nor in `pipelines/`, which launches runs (jobs, sensors, the CLI)
rather than doing one. Each function holds one store connection for its reads and writes
(`Connection.held`), let go for every model call: a run opens the file once before its first call
and once after each.
"""
