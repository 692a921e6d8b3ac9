"""The session assets: thin wrappers over `digest` (policy) and `resources` (store, model)."""


from dagster import (
    AssetExecutionContext,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.partitions import sessions_partitions
from digest.ingest import ingest_paths
from digest.synthesis import build_prompt, raw_content, raw_route, summarize_session
from digest.turns import canonical_order
from resources.bindings import ChatModelResource, DigestStoreResource
from resources.store import RunLedger

# Bump when a prompt or the routing rule changes, so the UI marks summaries as stale.
SUMMARY_CODE_VERSION = "summary-v1"


class IngestConfig(Config):
    paths: list[str] = []  # files or folders; empty: the inbox (DIGEST_INBOX)


@asset(group_name="ingest", kinds={"duckdb"})
def raw_turns(context: AssetExecutionContext, config: IngestConfig, store: DigestStoreResource) -> MaterializeResult:
    """Export bundles streamed into DuckDB `turns`; bad lines go to `rejects` with their reason.

    Sessions seen for the first time become partitions of `sessions`.
    """
    paths = config.paths or [store.inbox]
    report = ingest_paths(paths, store.store())
    keys = [row["partition_key"] for row in report.sessions]
    known = set(context.instance.get_dynamic_partitions(sessions_partitions.name))
    new_keys = [k for k in keys if k not in known]
    if new_keys:
        context.instance.add_dynamic_partitions(sessions_partitions.name, new_keys)
    table = "\n".join(
        f"| `{f.path}` | {f.kind} | {f.lines} | {f.rows} | {f.rejects} |" for f in report.files
    )
    return MaterializeResult(
        metadata={
            "files": len(report.files),
            "turns": report.turns,
            "rejects": report.rejects,
            "sessions_touched": len(keys),
            "new_partitions": len(new_keys),
            "files_preview": MetadataValue.md(
                "| file | kind | lines | rows | rejects |\n|---|---|---|---|---|\n" + table if table else "no files"
            ),
        }
    )


def _session(store, partition_key: str) -> dict:
    session = store.session_by_partition(partition_key)
    if session is None:
        raise Failure(f"no session has partition key {partition_key!r}: ingest its bundle first")
    return session


@asset(partitions_def=sessions_partitions, deps=[raw_turns], group_name="sessions", kinds={"duckdb"})
def raw_sessions(context: AssetExecutionContext, store: DigestStoreResource, model: ChatModelResource) -> MaterializeResult:
    """One session's raw turns in canonical order, with the size and the route its summary will take."""
    db = store.store()
    session_id = _session(db, context.partition_key)["session_id"]
    row = db.refresh_sessions([session_id])[0]
    turns = canonical_order(db.load_turns([session_id]))
    limits = model.limits()
    raw_tokens = limits.estimate_tokens(build_prompt(raw_content(turns), turns))
    with_mini = sum(1 for t in turns if t.mini_summary)
    return MaterializeResult(
        metadata={
            "session_id": session_id,
            "turn_count": row["turn_count"],
            "raw_bytes": row["raw_bytes"],
            "raw_tokens_estimate": raw_tokens,
            "raw_cap_tokens": limits.raw_cap_tokens if limits.raw_cap_tokens is not None else "off",
            "predicted_route": raw_route(raw_tokens, limits),
            "mini_summary_coverage": with_mini / len(turns) if turns else 0.0,
            "input_revision": row["input_revision"],
        }
    )


@asset(
    partitions_def=sessions_partitions,
    deps=[raw_sessions],
    group_name="sessions",
    kinds={"duckdb"},
    pool="model",
    code_version=SUMMARY_CODE_VERSION,
)
def session_summaries(
    context: AssetExecutionContext, store: DigestStoreResource, model: ChatModelResource
) -> MaterializeResult:
    """The session summary, raw when the session fits the raw-synthesis cap, else degraded.

    Over the cap the raw prompt is never sent: the summary is built from per-turn mini summaries
    (else truncated raw snippets) and says so in `source_tier`, `degraded` and `raw_canonical`.
    """
    db = store.store()
    session_id = _session(db, context.partition_key)["session_id"]
    turns = db.load_turns([session_id])
    if not turns:
        raise Failure(f"session {session_id!r} has no turns")
    result = summarize_session(turns, model.client(), model.limits(), RunLedger(db, context.run.run_id))
    if result.summary is None:
        raise Failure(
            description=f"no summary for session {session_id!r}: {result.failure} (route {result.route_reason})",
            metadata={"symptom": result.failure, "route_reason": result.route_reason},
        )
    summary = result.summary
    db.write_summary(summary, run_id=context.run.run_id)
    out = summary.output
    coverage = summary.mini_summary_count / summary.memory_count
    return MaterializeResult(
        metadata={
            "session_id": session_id,
            "source_tier": summary.source_tier,
            "degraded": summary.degraded,
            "raw_canonical": summary.raw_canonical,
            "route_reason": summary.route_reason,
            "memory_count": summary.memory_count,
            "mini_summary_coverage": coverage,
            "raw_tokens_estimate": summary.raw_tokens_estimate,
            "prompt_tokens_estimate": summary.prompt_tokens_estimate,
            "raw_cap_tokens": summary.raw_cap_tokens if summary.raw_cap_tokens is not None else "off",
            "model": summary.model,
            "input_revision": summary.input_revision,
            "summary": MetadataValue.md(
                f"### {out.title}\n\n{out.summary}\n\n"
                f"*{out.category}* · quality {out.quality} · productivity {out.productivity} · "
                f"impact {out.impact} · complexity {out.complexity}\n\n"
                f"technologies: {', '.join(out.technologies) or 'none'}\n\n"
                f"source tier **{summary.source_tier}** (degraded: {summary.degraded}, route: {summary.route_reason})"
            ),
        }
    )
