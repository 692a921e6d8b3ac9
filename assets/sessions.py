"""The session assets: thin wrappers over `digest` (policy) and `resources` (store, model)."""

from dagster import (
    AssetExecutionContext,
    AssetObservation,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.partitions import sessions_partitions
from digest.fidelity import Fidelity
from digest.hosts import assign_host
from digest.ingest import ingest_paths
from digest.scheduling import failure_backoff_s, now_ms
from digest.synthesis import build_prompt, raw_content, raw_route, summarize_session
from digest.turns import canonical_order
from pipelines.selection import host_views
from pipelines.tags import MODEL_HOST_REASON_TAG, MODEL_HOST_TAG, ROUTE_TAG, SWEEP_TAG
from resources.bindings import ChatModelResource, CircuitPolicyResource, DigestStoreResource, SweepPolicyResource
from resources.store import RunLedger
from resources.store.summary_row import MODEL_COLUMNS, SUMMARY_ROW

# Bump when a prompt or the routing rule changes, so the UI marks summaries as stale.
SUMMARY_CODE_VERSION = "summary-v1"


class SummaryConfig(Config):
    # A current imported summary is kept (no model call) unless a run asks to replace it.
    replace_imported: bool = False


class IngestConfig(Config):
    paths: list[str] = []  # files or folders; empty: the inbox (DIGEST_INBOX)


@asset(group_name="ingest", kinds={"duckdb"})
def raw_turns(config: IngestConfig, store: DigestStoreResource) -> MaterializeResult:
    """Export bundles streamed into DuckDB `turns`; bad lines go to `rejects` with their reason,
    as do lines superseded by a later line with the same turn id.

    The summary sensor (or the CLI) registers the sessions it touched as `sessions` partitions.
    """
    paths = config.paths or [store.inbox]
    report = ingest_paths(paths, store.store())
    table = "\n".join(
        f"| `{f.path}` | {f.kind} | {f.lines} | {f.rows} | {f.rejects} | {f.superseded} | {f.skipped} |"
        for f in report.files
    )
    return MaterializeResult(
        metadata={
            "files": len(report.files),
            "turns": report.turns,
            "rejects": report.rejects,
            "superseded": report.superseded,
            # Embeddings kept (archives write them back), and malformed ones dropped with where and why.
            "vectors": report.vectors,
            "vectors_dropped": report.vectors_dropped,
            **(
                {"vector_problems": MetadataValue.md("\n".join(f"- {p}" for p in problems))}
                if (problems := report.vector_problems())
                else {}
            ),
            "sessions_touched": len(report.sessions),
            "sessions_emptied": len(report.emptied),
            "files_preview": MetadataValue.md(
                "| file | kind | lines | rows | rejects | superseded | skipped |\n|---|---|---|---|---|---|---|\n"
                + table
                if table
                else "no files"
            ),
        }
    )


def _run_ended(instance, run_id: str) -> bool:
    """A lease holder that Dagster knows as finished. One it does not know is presumed alive."""
    run = instance.get_run_by_id(run_id)
    return run is not None and run.is_finished


def nothing_to_summarize(standing: dict | None, tags: dict, now: int) -> str | None:
    """Why a run has no summary to make, asked under the lease (and by the CLI's sweep just before
    the run): the selection that queued the run may be stale, e.g. a concurrent sweep summarized the
    session (or failed it) since. A run asked for by hand (a rerun from the UI after a prompt change)
    summarizes a current session again; it is left out of a gone or retired one too."""
    if standing is None:
        return "the session no longer exists (a replace-mode restore removed it)"
    if standing["retired_by"]:
        return f"the session is retired (archive {standing['retired_by']}): restore its bundle to summarize it"
    if SWEEP_TAG not in tags:
        return None
    revision = standing["input_revision"]
    if standing["summary_revision"] == revision:
        return f"already summarized at its current turns (revision {revision}) by run {standing['summary_run_id']}"
    # A staged reply finishes with no model call, whatever the backoff.
    backing_off = standing["failed_revision"] == revision and standing["backoff_until_ms"] > now
    if backing_off and tags.get(ROUTE_TAG) != "staged":
        return f"failed at its current turns since it was queued (failure {standing['failures']}): in failure backoff"
    return None


def _not_summarized(context: AssetExecutionContext, session_id: str, reason: str) -> None:
    """Said in the run's log and, as an observation, on the partition; nothing is materialized."""
    context.log.info(f"session {session_id!r} not summarized, no model call: {reason}")
    context.log_event(
        AssetObservation(
            asset_key=context.asset_key,
            partition=context.partition_key,
            metadata={"session_id": session_id, "summarized": False, "reason": reason},
        )
    )


def run_host(context: AssetExecutionContext, db, model: ChatModelResource, session_id: str) -> tuple[str, str]:
    """The model host the run's `digest/model_host` tag names, and why it was chosen. A run without one
    (asked for by hand), or naming a host no longer declared, is placed now the way a sweep would
    place it: raw on a host that admits it, else the earliest finish."""
    fleet = model.fleet()
    tagged = context.run.tags.get(MODEL_HOST_TAG)
    if tagged in fleet.names:
        return tagged, context.run.tags.get(MODEL_HOST_REASON_TAG, "named by the run's tag")
    views, _ = host_views(db, fleet, fleet.names, {})
    assignment = assign_host(db.summary_candidate(session_id), views)
    why = f"the run's host {tagged!r} is not declared" if tagged else "placed by the run"
    return assignment.host, f"{assignment.reason} ({why})"


def tagged_host(context: AssetExecutionContext, model: ChatModelResource) -> str:
    """The host a mini-summary or graph run's tag names (the sensors place those runs), else the
    first declared."""
    fleet = model.fleet()
    tagged = context.run.tags.get(MODEL_HOST_TAG)
    return tagged if tagged in fleet.names else fleet.host().name


def host_check(db, host: str):
    """What a run placed on `host` asks before each model call: is the host still in rotation (its
    circuit not opened since the run was placed)? A run that hears no hands its session back."""
    return lambda: db.host_in_rotation(host, now_ms())


def out_of_rotation_reason(host: str) -> str:
    return f"model host {host!r} went out of rotation (its circuit opened): the session is handed back for another host"


def session_or_fail(store, partition_key: str) -> dict:
    """The partition's `sessions` row; a partition with none fails its run with the reason."""
    session = store.session_by_partition(partition_key)
    if session is None:
        raise Failure(f"no session has partition key {partition_key!r}: ingest its bundle first")
    return session


@asset(partitions_def=sessions_partitions, deps=[raw_turns], group_name="sessions", kinds={"duckdb"})
def raw_sessions(
    context: AssetExecutionContext, store: DigestStoreResource, model: ChatModelResource
) -> MaterializeResult:
    """One session's raw turns in canonical order, with the size and the route its summary will take."""
    db = store.store()
    session_id = session_or_fail(db, context.partition_key)["session_id"]
    row = db.refresh_sessions([session_id])[0]
    turns = canonical_order(db.load_turns([session_id]))
    host, host_reason = run_host(context, db, model, session_id)
    limits = model.limits(host, db)
    raw_tokens = limits.estimate_tokens(build_prompt(raw_content(turns), turns))
    with_mini = sum(1 for t in turns if t.mini_summary)
    return MaterializeResult(
        metadata={
            "session_id": session_id,
            "host": host,
            "host_reason": host_reason,
            "turn_count": row["turn_count"],
            "raw_bytes": row["raw_bytes"],
            "raw_tokens_estimate": raw_tokens,
            "raw_cap_tokens": limits.raw_cap_tokens if limits.raw_cap_tokens is not None else "off",
            # pinned, off, or auto: the host's measured speed (auto-unmeasured: the default until then).
            "raw_cap_source": limits.raw_cap_source,
            # The estimate's ratio, and where it comes from: pinned, the host's ledger, or the default.
            "bytes_per_token": round(limits.bytes_per_token, 3),
            "bytes_per_token_source": limits.bytes_per_token_source,
            "predicted_route": str(raw_route(raw_tokens, limits)),  # Dagster's metadata takes plain text, no enum
            "mini_summary_coverage": with_mini / len(turns) if turns else 0.0,
            "input_revision": row["input_revision"],
        }
    )


@asset(
    partitions_def=sessions_partitions,
    deps=[raw_sessions, "turn_mini_summaries"],
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

    Nothing is materialized (an observation says why; the latest materialization stays the one that
    made the summary) when, under the lease, there is nothing to do (`nothing_to_summarize`), or
    when a run a sweep launched finds another run holding the lease: that run is doing it.
    """
    db = store.store()
    session = session_or_fail(db, context.partition_key)
    session_id, run_id = session["session_id"], context.run.run_id
    stored = db.summary_row(session_id)
    current_import = stored and stored["origin"] == "imported" and stored["input_revision"] == session["input_revision"]
    if current_import and not config.replace_imported:
        # The export's summary of these very turns: no model call is owed.
        context.log.info(
            f"session {session_id!r} keeps its imported summary (current for its turns, fidelity "
            f"{stored['fidelity']}); run with config replace_imported: true to have the model replace it"
        )
        yield MaterializeResult(metadata=summary_metadata(stored))
        return
    host, host_reason = run_host(context, db, model, session_id)
    limits = model.limits(host, db)
    # Held across the raw call and the degraded one, each up to the call ceiling, with room to write.
    lease_ttl_s = 2 * model.call_ceiling_s + 120
    holder = db.claim_summary_lease(session_id, run_id, now_ms(), lease_ttl_s)
    if holder is not None and _run_ended(context.instance, holder):
        # Its process died holding the lease (killed mid-run, marked failed since): take it over.
        db.release_summary_lease(session_id, holder)
        holder = db.claim_summary_lease(session_id, run_id, now_ms(), lease_ttl_s)
    if holder is not None:
        busy = f"session {session_id!r} is being summarized by run {holder}"
        if SWEEP_TAG not in context.run.tags:
            raise Failure(f"{busy}; not summarizing it twice")
        _not_summarized(context, session_id, busy)
        return
    try:
        skip = nothing_to_summarize(db.summary_standing(session_id), context.run.tags, now_ms())
        if skip:
            _not_summarized(context, session_id, skip)
            return
        turns = db.load_turns([session_id])
        # Each usable reply is staged in DuckDB before the summary is built from it: a run killed
        # before the write below is finished by the next one, from the reply, with no model call.
        client = model.client(db, session=(session_id, session["input_revision"]), host=host)
        context.log.info(f"session {session_id!r} goes to model host {host!r}: {host_reason}")
        # Near the bound, the host's own tokenizer (when it has one) counts the raw prompt.
        ledger = RunLedger(db, run_id, host=host, circuit=circuit.policy())
        result = summarize_session(
            turns, client, limits, ledger, count_tokens=client.count_tokens,
            pacer=model.pacer(db, host, limits.timeout_s), host_available=host_check(db, host),
        )  # fmt: skip
        if result.host_out_of_rotation:
            # No failure of the session's: no backoff, the lease released below, the next tick places it again.
            _not_summarized(context, session_id, out_of_rotation_reason(host))
            return
        if result.summary is None and result.host_failure:
            # The host's fault, counted on its circuit: no backoff of the session, which the next tick
            # gives to another host (or to this one, once its circuit closes).
            raise Failure(
                description=f"host {host} failed: {result.failure} on session {session_id!r} "
                f"(route {result.route_reason}); the session goes to another host",
                metadata={"symptom": str(result.failure), "route_reason": str(result.route_reason), "host": host},
            )
        if result.summary is None:
            failures = db.record_summary_failure(
                session_id, session["input_revision"], result.failure, now_ms(),
                lambda n: failure_backoff_s(n, sweep.policy()),
            )  # fmt: skip
            raise Failure(
                description=f"no summary for session {session_id!r}: {result.failure} (route {result.route_reason}); "
                f"failure {failures}, backing off {failure_backoff_s(failures, sweep.policy()):.0f}s",
                metadata={
                    "symptom": str(result.failure),
                    "route_reason": str(result.route_reason),
                    "failures": failures,
                },
            )
        summary = result.summary
        db.write_summary(summary, run_id=run_id, host=host, host_reason=host_reason)
        if not model.response_cache:
            db.drop_staged_replies(session_id)
        db.clear_summary_failures(session_id)
    finally:
        db.release_summary_lease(session_id, run_id)
    yield MaterializeResult(metadata=summary_metadata(db.summary_row(session_id)))


def summary_metadata(row: dict) -> dict:
    """A stored summary as the UI shows it, with where it came from (`origin`: generated by a run,
    or imported from an export, whose run-side figures are then 0 or empty). The plain entries are
    the row's `shown` columns (`resources/store/summary_row.py`), a NULL as the column says."""
    plain = {c.name: c.none_as if row[c.name] is None else row[c.name] for c in SUMMARY_ROW if c.shown}
    # The model's fields under the title: a choice in italics, a score with its name, a list named.
    fields = {c.name: row[c.name] for c in MODEL_COLUMNS if c.name not in ("title", "summary")}
    choices = [f"*{v}*" for v in fields.values() if isinstance(v, str)]
    scores = [f"{k} {v}" for k, v in fields.items() if isinstance(v, int | float) and not isinstance(v, bool)]
    lists = [f"{k}: {', '.join(v) or 'none'}" for k, v in fields.items() if isinstance(v, list)]
    return {
        **plain,
        "mini_summary_coverage": row["mini_summary_count"] / row["memory_count"],
        # What the fidelity score found named in the summary, and missed (docs/fidelity.md).
        "fidelity_identifiers": MetadataValue.md(
            Fidelity(row["fidelity"], row["fidelity_found"] or [], row["fidelity_missed"] or []).markdown()
        ),
        "summary": MetadataValue.md(
            f"### {row['title']}\n\n{row['summary']}\n\n"
            + " · ".join(choices + scores)
            + "".join(f"\n\n{line}" for line in lists)
            + f"\n\nsource tier **{row['source_tier']}** (degraded: {row['degraded']}, route: {row['route_reason']}, "
            f"{row['origin']}{', host ' + row['host'] if row['host'] else ''})"
        ),
    }
