"""The session assets: each maps its work's outcome (`assets/work/`) to what Dagster records."""

import contextlib
from collections.abc import Iterator

import duckdb
from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.partitions import add_new_partitions, sessions_partitions, summary_metadata
from assets.summary_view import Markdown
from assets.work.runs import RunFacts
from assets.work.sessions import describe_partition, record_run_error, summarize_partition
from assets.work.views import facts_view, ingest_view, made_summary_view
from digest.cost import SummaryCost
from digest.ingest import ingest_paths
from digest.prompts import SUMMARY_CODE_VERSION
from digest.summary_output import SourceTier
from resources.bindings import ChatModelResource, CircuitPolicyResource, DigestStoreResource, SweepPolicyResource
from resources.model_clients.progress import CallProgress

# The asset between a session's turns and its degraded summary (`assets.mini_summaries`).
MINI_SUMMARIES_KEY = AssetKey("turn_mini_summaries")
# Dagster's tag on the runs of a backfill (`dagster._core.storage.tags.BACKFILL_ID_TAG`).
BACKFILL_TAG = "dagster/backfill"


class SummaryConfig(Config):
    # A current imported summary is kept (no model call) unless a run asks to replace it.
    replace_imported: bool = False


class IngestConfig(Config):
    paths: list[str] = []  # files or folders; empty: the inbox (DIGEST_INBOX) and DIGEST_WATCH's folders


@asset(group_name="ingest", kinds={"duckdb"})
def raw_turns(context: AssetExecutionContext, config: IngestConfig, store: DigestStoreResource) -> MaterializeResult:
    """Export bundles streamed into DuckDB `turns`; bad lines go to `rejects` with their reason,
    as do lines superseded by a later line with the same turn id.

    New sessions become `sessions` partitions in the same run, whoever launched it (the CLI, the
    inbox sensor, the UI), so they show as Missing with the summary sensor off too.
    """
    # No paths (a run launched from the UI): the inbox and the watched folders that exist.
    paths = config.paths or [folder for folder in store.watched() if folder.is_dir()]
    db = store.open()
    report = ingest_paths(paths, db, redact_secrets=store.redact)
    return MaterializeResult(metadata=view_metadata(ingest_view(report, add_new_partitions(context.instance, db))))


def view_metadata(view: dict) -> dict:
    """A plain view (`assets.work.views`) as Dagster's metadata: a `Markdown` as Markdown, a dict as JSON."""
    return {
        k: MetadataValue.md(v.value) if isinstance(v, Markdown) else MetadataValue.json(v) if isinstance(v, dict) else v
        for k, v in view.items()
    }


def materialized(context: AssetExecutionContext, metadata: dict) -> MaterializeResult:
    """The materialization, its metadata on it alone: metadata given to `MaterializeResult` is the
    step output's as well, a second copy in the run's `STEP_OUTPUT` event."""
    context.add_asset_metadata(metadata)
    return MaterializeResult()


def run_facts(context: AssetExecutionContext) -> RunFacts:
    """The run as its work sees it; a lease holder is ended when Dagster knows it as finished."""

    def ended(run_id: str) -> bool:
        holder = context.instance.get_run_by_id(run_id)
        return holder is not None and holder.is_finished

    return RunFacts(context.run.run_id, context.run.tags, ended)


def not_done(
    context: AssetExecutionContext, session_id: str, what: str, reason: str, **metadata
) -> MaterializeResult | None:
    """Why the run made nothing (`what`: not summarized, ...), in its log and, as an observation, on
    the partition: its latest materialization stays the one that made the summary or graph.

    In a backfill's run (the UI's Materialize of several partitions) a materialization instead, its
    `not_done` saying why: since dagster 1.13.22 a backfill marks failed every partition that a
    successful run did not materialize (dagster-io/dagster#34219)."""
    context.log.info(f"session {session_id!r} {what}: {reason}")
    if BACKFILL_TAG in context.run.tags:
        return materialized(context, {"session_id": session_id, **metadata, "not_done": f"{what}: {reason}"})
    context.log_event(
        AssetObservation(
            asset_key=context.asset_key,
            partition=context.partition_key,
            metadata={"session_id": session_id, **metadata, "reason": reason},
        )
    )
    return None


@contextlib.contextmanager
def run_errors_recorded(context: AssetExecutionContext, db, sweep: SweepPolicyResource) -> Iterator[None]:
    """A summary run's step that raises on its session's data fails with the reason, the session's
    failure counted with its backoff and a friction event (`record_run_error`): not a bare traceback
    on every sweep. The store's file failing (full, read-only) is not the session's fault: it goes up as it is."""
    try:
        yield
    except (Failure, OSError, duckdb.IOException):
        raise
    except Exception as exc:
        reason = record_run_error(db, context.partition_key, context.run.run_id, exc, sweep.policy())
        raise Failure(description=reason, metadata={"symptom": "run-error", "error": f"{type(exc).__name__}"}) from exc


@asset(partitions_def=sessions_partitions, deps=[raw_turns], group_name="sessions", kinds={"duckdb"})
def raw_sessions(
    context: AssetExecutionContext, store: DigestStoreResource, model: ChatModelResource, sweep: SweepPolicyResource
) -> MaterializeResult:
    """One session's raw turns in canonical order, with the size and the route its summary will take."""
    db = store.open()
    # One connection for the run's reads, its facts' too: opening the store's file is the costly part.
    with db.file.held(), run_errors_recorded(context, db, sweep):
        described = describe_partition(db, model.hosts, run_facts(context), context.partition_key)
        if described.failure:
            raise Failure(described.failure)
        facts = facts_metadata(db, described.metadata["session_id"])
    return materialized(context, {**described.metadata, **facts})


def facts_metadata(db, session_id: str) -> dict:
    """What the session's tool calls did, and its card (`assets.work.views.facts_view`)."""
    return view_metadata(facts_view(db, session_id))


@asset(
    partitions_def=sessions_partitions,
    deps=[raw_sessions, MINI_SUMMARIES_KEY],
    group_name="sessions",
    kinds={"duckdb"},
    pool="model",
    code_version=SUMMARY_CODE_VERSION,
    output_required=False,
)
def session_summaries(
    context: AssetExecutionContext,
    config: SummaryConfig,
    store: DigestStoreResource,
    model: ChatModelResource,
    sweep: SweepPolicyResource,
    circuit: CircuitPolicyResource,
):
    """The session summary, raw when the session fits the raw-synthesis cap, else degraded.

    Over the cap the raw prompt is never sent: the summary is built from per-turn mini summaries
    (else truncated raw snippets) and says so in `source_tier`, `degraded` and `raw_canonical`.

    No summary is made when, under the lease, there is nothing to do (`nothing_to_summarize`), or
    when a run a sweep launched finds another run holding the lease: that run is doing it (`not_done`
    says what is on the partition then). Any other run finding the lease held fails: it was asked for.
    """
    # A long model call says how far it has come in the run log (pieces and seconds, every 30 s).
    db = store.open()
    # The connection the summary is written on also reads the session's facts and place (the model
    # call lets it go, `summarize_partition`).
    with db.file.held(), run_errors_recorded(context, db, sweep), CallProgress(context.log.info).ticking() as progress:
        outcome = summarize_partition(
            db, model.hosts, run_facts(context), context.partition_key, sweep.policy(), circuit.policy(),
            replace_imported=config.replace_imported, log=context.log.info, progress=progress,
        )  # fmt: skip
        shown = view_metadata(made_summary_view(db, outcome))
    if outcome.failure:
        raise Failure(description=outcome.failure, metadata=outcome.failure_metadata)
    if outcome.skipped:
        done = not_done(context, outcome.session_id, "not summarized, no model call", outcome.skipped, summarized=False)
        if done is not None:
            yield done
        return
    if outcome.kept:
        not_done(
            context, outcome.session_id, "summary not stored", outcome.kept, summarized=False, verdict=outcome.verdict
        )
        return
    # What the summary cost and whether its reply came from the cache (`digest.cost`).
    context.log.info(f"session {outcome.session_id!r}: {outcome.cost.log_line()}")
    yield materialized(context, {**summary_record_metadata(outcome.row, outcome.cost), **shown})
    record_no_mini_summaries_needed(context, db, outcome.row)  # after the summary's own, first in the log


def record_no_mini_summaries_needed(context: AssetExecutionContext, db, row: dict) -> None:
    """A raw summary read every turn whole: its session's `turn_mini_summaries` partition is what
    the summary needs as it stands. A run without that step (a sweep's, the UI's Materialize of the
    summary alone) records it as materialized, saying so and with the coverage it has in one line;
    else the partition looks Missing for ever and the launch dialog of the summary's rerun warns
    "Upstream data missing" (it checks that each upstream partition is materialized)."""
    if MINI_SUMMARIES_KEY in context.job_def.asset_layer.selected_asset_keys:
        return
    event = no_mini_summaries_needed(db, row, context.partition_key)
    if event is not None:
        context.log_event(event)


def no_mini_summaries_needed(db, row: dict, partition: str) -> AssetMaterialization | None:
    """The `turn_mini_summaries` materialization a raw summary makes its session's (None: not raw).
    One entry, no description: each metadata entry grows the Dagster instance on every raw run, and
    a description is copied into the event's messages twice more (BENCHMARKS §20)."""
    if row["source_tier"] != SourceTier.RAW:
        return None
    counts = db.mini_summaries.mini_summary_counts(row["session_id"])
    note = (
        f"no mini summary needed: the summary read the raw turns (route {row['route_reason']}), "
        f"{counts['turns']} turns, {counts['with_mini_summary']} mini summaries exist"
    )
    return AssetMaterialization(asset_key=MINI_SUMMARIES_KEY, partition=partition, metadata={"not_needed": note})


def summary_record_metadata(row: dict, cost: SummaryCost | None) -> dict:
    """A summary's materialization, whoever records it: its run, a restore that brought it back, the
    close of a run that died after writing it. The summary as the UI shows it, and what it cost and
    whether its reply came from the cache (`digest.cost`); `cost` None: not known (no call of its
    run in this store's ledger)."""
    if cost is None:
        return {**summary_metadata(row), "cost": f"not known: no call of run {row['run_id'] or 'none'} in the ledger"}
    return {**summary_metadata(row), **cost.metadata()}
