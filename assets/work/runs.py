"""What every run's work shares: the facts of its Dagster run, its session, and the model host it
goes to with that host's bounds."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from digest.hosts import HostSpec, assign_host
from digest.scheduling import now_ms
from digest.synthesis import Limits
from digest.tags import MODEL_HOST_REASON_TAG, MODEL_HOST_TAG, SWEEP_TAG
from resources.host_views import host_views
from resources.store import DigestStore

if TYPE_CHECKING:
    from resources.bindings import ChatModelResource, RunHost


def _never_ended(run_id: str) -> bool:
    return False


@dataclass(frozen=True)
class RunFacts:
    """What the work knows of its run: its id, its tags, and whether another run (a lease holder)
    is finished as the Dagster instance knows it (one it does not know is presumed alive)."""

    run_id: str
    tags: Mapping[str, str] = field(default_factory=dict)
    ended: Callable[[str], bool] = _never_ended

    @property
    def swept(self) -> bool:
        """Launched by a sweep (the sensors, the CLI), not asked for by hand."""
        return SWEEP_TAG in self.tags


@dataclass(frozen=True)
class Placement:
    spec: HostSpec  # the host, as the fleet the placement read declares it
    reason: str  # why the run goes there
    limits: Limits  # the host's bounds, with what its ledger measures

    @property
    def host(self) -> str:
        return self.spec.name


def unknown_partition(partition_key: str) -> str:
    return f"no session has partition key {partition_key!r}: ingest its bundle first"


def place_run(store: DigestStore, model: ChatModelResource, run: RunFacts, session_id: str) -> Placement:
    """The model host the run's `digest/model_host` tag names, and why it was chosen. A run without one
    (asked for by hand), or naming a host no longer declared, is placed now the way a sweep would
    place it: raw on a host that admits it, else the earliest finish. The host's measured figures
    are read once here and go with the placement."""
    fleet = model.fleet()
    tagged = run.tags.get(MODEL_HOST_TAG)
    if tagged in fleet.names:
        reason = run.tags.get(MODEL_HOST_REASON_TAG, "named by the run's tag")
        return Placement(fleet.host(tagged), reason, fleet.measured_limits(store, tagged))
    views, _ = host_views(store, fleet, fleet.names, {})
    assignment = assign_host(store.summaries.summary_candidate(session_id), views)
    why = f"the run's host {tagged!r} is not declared" if tagged else "placed by the run"
    view = next(view for view in views if view.spec.name == assignment.host)
    return Placement(view.spec, f"{assignment.reason} ({why})", view.limits)


def tagged_host(store: DigestStore, model: ChatModelResource, run: RunFacts, first_timeout_s: float) -> RunHost:
    """The host a graph run's tag names (the sensors place those runs), else the first declared,
    resolved once for the run: its bounds with what its ledger measures, its client, its pacer."""
    fleet = model.fleet()
    tagged = run.tags.get(MODEL_HOST_TAG)
    spec = fleet.host(tagged if tagged in fleet.names else None)
    return model.run_host(store, spec, fleet.measured_limits(store, spec.name), first_timeout_s=first_timeout_s)


def host_check(store: DigestStore, host: str) -> Callable[[], bool]:
    """What a run placed on `host` asks before each model call: is the host still in rotation (its
    circuit not opened since the run was placed)? A run that hears no hands its session back."""
    return lambda: store.hosts.host_in_rotation(host, now_ms())


def out_of_rotation_reason(host: str) -> str:
    return f"model host {host!r} went out of rotation (its circuit opened): the session is handed back for another host"
