"""The `backlog` asset and its check: thin over `digest.backlog`, downstream of the sessions it
measures. The summary sensor records a materialization of it every `DIGEST_BACKLOG_REFRESH_S` and
`session-digest sweep` one after each sweep (`backlog_events`, no run), so its Plots tab draws the
backlog's curve; materializing it from the UI does the same in a run."""

from __future__ import annotations

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    AssetMaterialization,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)

from assets.sessions import raw_sessions, session_summaries
from assets.work.backlog import measure
from digest.backlog import Backlog, backlog_metadata, stalled
from digest.scheduling import SweepPolicy, now_ms
from resources.bindings import (
    ChatModelResource,
    CircuitPolicyResource,
    DigestStoreResource,
    EmbeddingResource,
    SweepPolicyResource,
)

BACKLOG_KEY = AssetKey("backlog")
STALL_CHECK = "backlog_not_stalled"


def _metadata(measured: Backlog) -> dict:
    metadata = backlog_metadata(measured)
    return {**metadata, "summary": MetadataValue.text(str(metadata["summary"]))}


def _check_metadata(measured: Backlog, reason: str | None) -> dict:
    return {
        "waiting": measured.waiting,
        "hosts_in_rotation": len(measured.hosts_in_rotation),
        # Why it failed; passed, the backlog in one sentence.
        "finding": MetadataValue.text(reason or backlog_metadata(measured)["summary"]),
    }


@asset(deps=[raw_sessions, session_summaries], group_name="reports", kinds={"duckdb"})
def backlog(
    store: DigestStoreResource,
    model: ChatModelResource,
    circuit: CircuitPolicyResource,
    sweep: SweepPolicyResource,
    embeddings: EmbeddingResource,
) -> MaterializeResult:
    """What waits for a summary and how fast it drains: pending by route, host and tier (as a sweep
    would place them now), the oldest pending session's age, sessions and model-seconds finished in
    the last hour and day, the ETA at the hosts' measured speeds, and the summaries by tier (and
    verdict); where embeddings are configured, the search chunks still waiting for a vector. No model
    call. The summary sensor refreshes it every `DIGEST_BACKLOG_REFRESH_S`."""
    measured = measure(
        store.open(), model.hosts.fleet, circuit.policy(), sweep.policy(), now_ms(), embeddings.embedded_model()
    )
    return MaterializeResult(metadata=_metadata(measured))


def stall_result(backlog_now: Backlog, policy: SweepPolicy) -> tuple[bool, dict]:
    reason = stalled(backlog_now, policy.backlog_stall_s)
    return reason is None, _check_metadata(backlog_now, reason)


@asset_check(
    asset=backlog,
    name=STALL_CHECK,
    description="Fails on a stalled backlog: sessions wait, a model host is in rotation, and no summary has "
    "finished for DIGEST_BACKLOG_STALL_S.",
)
def backlog_not_stalled(
    store: DigestStoreResource, model: ChatModelResource, circuit: CircuitPolicyResource, sweep: SweepPolicyResource
) -> AssetCheckResult:
    backlog_now = measure(store.open(), model.hosts.fleet, circuit.policy(), sweep.policy(), now_ms())
    passed, metadata = stall_result(backlog_now, sweep.policy())
    return AssetCheckResult(passed=passed, metadata=metadata, severity=AssetCheckSeverity.ERROR)


def backlog_events(backlog_now: Backlog, policy: SweepPolicy) -> list:
    """The runless materialization and check result a sensor tick or a CLI sweep records."""
    passed, metadata = stall_result(backlog_now, policy)
    return [
        AssetMaterialization(asset_key=BACKLOG_KEY, metadata=_metadata(backlog_now)),
        AssetCheckEvaluation(
            asset_key=BACKLOG_KEY,
            check_name=STALL_CHECK,
            passed=passed,
            metadata=metadata,
            severity=AssetCheckSeverity.ERROR,
        ),
    ]
