"""The `sessions` partitions, and their registration: every path that ingests (the `raw_turns` run,
whoever launched it) registers the store's new sessions; the summary sensor and the CLI also
bring the partition set in line with the store both ways (`pipelines.sensors`)."""

from collections.abc import Iterable

from dagster import AssetMaterialization, DynamicPartitionsDefinition, MetadataValue
from sqlalchemy.exc import IntegrityError

from assets.summary_view import Markdown, summary_view

# One partition per session, keyed by `digest.turns.partition_key` (the original id stays in DuckDB).
sessions_partitions = DynamicPartitionsDefinition(name="sessions")

# Partition keys registered per request: SQLite refuses very large single requests.
PARTITION_CHUNK = 1000


def registered_partitions(instance) -> set[str]:
    return set(instance.get_dynamic_partitions(sessions_partitions.name))


def unregistered_partition_keys(
    registered: set[str], stored: list[str], first: Iterable[str] = (), limit: int | None = PARTITION_CHUNK
) -> list[str]:
    """Sessions in DuckDB (`stored`, the store's partition keys) that are not yet partitions (new, or
    from a restore), `first` (the ones a tick is about to request) ahead of the rest, at most `limit`."""
    return [key for key in dict.fromkeys([*first, *stored]) if key not in registered][:limit]


def summary_metadata(row: dict) -> dict:
    """A stored summary as the UI shows it (`assets.summary_view`), its Markdown entries Dagster's."""
    return {k: MetadataValue.md(v.value) if isinstance(v, Markdown) else v for k, v in summary_view(row).items()}


def imported_materializations(store, keys: list[str]) -> list[AssetMaterialization]:
    """New partitions whose summary is a current export's are summarized already: recorded as
    materialized (origin imported, its provenance in the metadata), so the UI shows no Missing
    partition inviting a model call. A stale one stays missing."""
    return [
        AssetMaterialization(
            asset_key="session_summaries",
            partition=row["partition_key"],
            metadata={
                **summary_metadata(row),
                "provenance": f"imported from {row['source_file'] or 'an export'}, current at {row['input_revision']}",
            },
        )
        for row in (store.reports.current_imported_summaries(keys) if keys else [])
    ]


def add_new_partitions(instance, store, registered: set[str] | None = None, stored: list[str] | None = None) -> int:
    """The store's sessions that are not partitions yet, registered a chunk at a time, the current
    imported summaries among them recorded as materialized; how many were added. `registered`,
    `stored`: the partitions and the store's keys, when the caller has read them already."""
    registered = registered_partitions(instance) if registered is None else registered
    stored = store.sessions.partition_keys() if stored is None else stored
    keys = unregistered_partition_keys(registered, stored, limit=None)
    added = 0
    for start in range(0, len(keys), PARTITION_CHUNK):
        chunk = _add_partitions(instance, keys[start : start + PARTITION_CHUNK])
        for event in imported_materializations(store, chunk):
            instance.report_runless_asset_event(event)
        added += len(chunk)
    return added


def _add_partitions(instance, keys: list[str], tries: int = 3) -> list[str]:
    """`keys` registered; those this call added. A concurrent sweep or ingest may register some of
    them between the read and the insert, and the storage then refuses the whole request on its
    unique key: the keys still missing are read again and added."""
    for _ in range(tries - 1):
        try:
            instance.add_dynamic_partitions(sessions_partitions.name, keys)
            return keys
        except IntegrityError:
            registered = registered_partitions(instance)
            keys = [key for key in keys if key not in registered]
            if not keys:
                return []
    instance.add_dynamic_partitions(sessions_partitions.name, keys)
    return keys
