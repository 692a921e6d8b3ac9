from dagster import DynamicPartitionsDefinition

# One partition per session, keyed by `digest.turns.partition_key` (the original id stays in DuckDB).
sessions_partitions = DynamicPartitionsDefinition(name="sessions")
