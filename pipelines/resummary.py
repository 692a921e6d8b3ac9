"""Planned re-summaries from every front door: `session-digest plan --resummarize` prices them,
`sweep --resummarize` and the UI's `request_resummaries` job record them, all over the same
criteria (`digest.resummary`). The sweeps (the CLI's, the summary sensor's ticks) then make them a
budget at a time, after new work (`pipelines.selection.next_summary_batch`)."""

from dagster import Config, Failure, OpExecutionContext, Output, job, op
from pydantic import Field

from digest.prompts import SUMMARY_CODE_VERSION
from digest.resummary import ANY_JUNK, NOT_CURRENT, ORIGINS, ResummaryCriteria
from resources.bindings import DigestStoreResource
from resources.store import DigestStore

CRITERIA_NAMES = "model, host, code_version, tier, verdict, fidelity_below, origin"


def selected(store: DigestStore, criteria: ResummaryCriteria) -> list[dict]:
    """The current summaries the criteria select (generated ones unless `origin` says otherwise); at
    least one criterion is needed, so a forgotten filter does not ask for every summary again."""
    if not criteria.given:
        raise ValueError(f"a re-summary needs at least one criterion ({CRITERIA_NAMES})")
    return store.resummaries.matching(criteria, SUMMARY_CODE_VERSION)


def record_resummaries(store: DigestStore, criteria: ResummaryCriteria) -> dict:
    """A request for each selected summary whose session has none open; what was recorded."""
    matching = selected(store, criteria)
    counts = store.resummaries.record_requests(criteria, [row["session_id"] for row in matching])
    return {"criteria": criteria.given, "matching": len(matching), **counts}


def plan_resummaries(store: DigestStore, fleet, criteria: ResummaryCriteria, available: list[str]) -> dict:
    """The selected summaries, each with what it was made with and what its re-summary would cost on
    the host it would go to (`pipelines.selection.batch_price`, as `plan` prices a sweep)."""
    from pipelines.selection import batch_price, priced_resummaries

    matching = {row["partition_key"]: row for row in selected(store, criteria)}
    selection = priced_resummaries(store, fleet, [row["session_id"] for row in matching.values()], available)
    price = batch_price(selection.batch)
    for item in price["sessions_detail"]:
        was = matching[item["partition"]]
        item["was"] = {
            k: was[k] for k in ("model", "host", "code_version", "source_tier", "verdict", "fidelity", "run_id")
        }
    waiting = store.resummaries.queue_counts()["waiting"]
    return {
        "resummarize": criteria.given,
        "current_code_version": SUMMARY_CODE_VERSION,
        "matching": len(matching),
        "requests_waiting": waiting,  # asked for already, any criteria: the sweeps take them after new work
        "seconds_per_token": {host: round(spt, 4) for host, spt in selection.seconds_per_token.items()},
        "hosts_out_of_rotation": selection.hosts_unavailable,
        "all_of_them": price,
    }


class ResummaryConfig(Config):
    """The filters of `session-digest sweep --resummarize`; every one given must hold."""

    model: str | None = Field(default=None, description="summaries made by this model")
    host: str | None = Field(default=None, description="summaries made on this model host")
    code_version: str | None = Field(
        default=None,
        description=f"summaries made under this summary code version, or `{NOT_CURRENT}`: any but the "
        f"current one ({SUMMARY_CODE_VERSION}), those from before versions were recorded included",
    )
    tier: str | None = Field(default=None, description="source tier: raw, miniSummary, turnCards or truncatedRaw")
    verdict: str | None = Field(
        default=None, description=f"a verdict (ok, echo, template, ...), or `{ANY_JUNK}`: any but ok"
    )
    fidelity_below: float | None = Field(default=None, description="fidelity under this score (0-1)")
    origin: str | None = Field(
        default=None,
        description=f"{', '.join(ORIGINS)}: summaries of this origin (unset: generated; an imported one is the "
        "export's word, made again only when asked for)",
    )


@op(description="Record a re-summary request for each current summary the filters select.")
def record_resummary_requests(context: OpExecutionContext, config: ResummaryConfig, store: DigestStoreResource):
    try:
        criteria = ResummaryCriteria.of(config.model_dump())
        recorded = record_resummaries(store.open(), criteria)
    except ValueError as exc:
        raise Failure(str(exc)) from None
    context.log.info(
        f"{recorded['recorded']} re-summaries requested ({recorded['matching']} summaries match "
        f"{criteria.describe()}, {recorded['already_requested']} were already "
        "requested); the summary sensor makes them after new work, a budget a tick"
    )
    return Output(recorded["recorded"], metadata={k: str(v) if isinstance(v, dict) else v for k, v in recorded.items()})


@job(
    name="request_resummaries",
    description="Ask for re-summaries (after a model or prompt change): the filters of `sweep --resummarize` as config.",
)
def request_resummaries_job():
    record_resummary_requests()
