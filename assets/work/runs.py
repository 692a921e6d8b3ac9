"""What every run's work shares: the facts of its Dagster run, and what it asks of the model host it
was placed on (`resources.model_hosts.ModelHosts.place`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from digest.scheduling import now_ms
from digest.tags import SWEEP_TAG
from resources.store import DigestStore


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


def unknown_partition(partition_key: str) -> str:
    return f"no session has partition key {partition_key!r}: ingest its bundle first"


def host_check(store: DigestStore, host: str) -> Callable[[], bool]:
    """What a run placed on `host` asks before each model call: is the host still in rotation (its
    circuit not opened since the run was placed)? A run that hears no hands its session back."""
    return lambda: store.hosts.host_in_rotation(host, now_ms())


def out_of_rotation_reason(host: str) -> str:
    return f"model host {host!r} went out of rotation (its circuit opened): the session is handed back for another host"
