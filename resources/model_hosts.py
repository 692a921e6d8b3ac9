"""The model hosts, as one run or one sensor tick sees them: the fleet its settings declare (the
hosts file read once), each host's bounds with what its ledger measures, the host a run's session
goes to (placed once for the run), the clients and pacers its calls go through, and what the sweeps
read of the hosts in rotation (their views).

`ChatModelResource` makes one `ModelHosts` each time Dagster sets it up: once per run (the
in-process executor sets a run's resources up once for all its steps) and once per sensor tick.
The CLI and the run queue make their own from the loaded settings. What a host is and how a session
is assigned to one is `digest.hosts`; the settings that declare them, `digest.settings_fleet`."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Protocol

from digest.circuit import CircuitPolicy, CircuitState
from digest.hosts import Fleet, HostSpec, HostView, assign_host
from digest.model_api import ChatClient, StreamBounds
from digest.pacing import Pacer, PacingPolicy
from digest.scheduling import DEFAULT_SECONDS_PER_TOKEN
from digest.settings_fleet import ModelSettings, build_fleet
from digest.synthesis import Limits
from digest.tags import MODEL_HOST_REASON_TAG, MODEL_HOST_TAG
from resources.embedded_server import MODEL_ALIAS, EmbeddedServer
from resources.model_clients import OllamaChatClient, OpenAIChatClient
from resources.model_clients.progress import CallProgress
from resources.response_cache import CachedChatClient
from resources.store import DigestStore


class HostsConfig(ModelSettings, Protocol):
    """The model settings, and whether model replies are reused from the store's cache."""

    response_cache: bool


@dataclass(frozen=True)
class Placement:
    """Where a run's session goes, made once for the run."""

    spec: HostSpec  # the host, as the fleet the placement read declares it
    reason: str  # why the run goes there
    limits: Limits  # the host's bounds, with what its ledger measures

    @property
    def host(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class RunHost:
    """The host one step's calls go to: the run's host and its bounds, the step's client and the
    pacer of the step's call deadlines."""

    spec: HostSpec
    limits: Limits
    client: ChatClient
    pacer: Pacer

    @property
    def name(self) -> str:
        return self.spec.name


def host_views(
    store: DigestStore, fleet: Fleet, available: list[str], queued_s: Mapping[str, float]
) -> tuple[list[HostView], dict[str, bool]]:
    """What the assignment knows of each available host: its bounds (with its measured bytes per
    token), its measured speed (seconds per estimated token over its recent calls, else the
    CPU-class default) and its queue."""
    views, measured = [], {}
    for name in available:
        speed = store.speed.seconds_per_token(fleet.host(name).model, host=name)
        measured[name] = speed is not None
        views.append(
            HostView(
                fleet.host(name),
                fleet.measured_limits(store, name),
                speed or DEFAULT_SECONDS_PER_TOKEN,
                queued_s.get(name, 0.0),
            )
        )
    return views, measured


def hosts_in_rotation(store: DigestStore, fleet: Fleet, policy: CircuitPolicy, now_ms: int):
    """(the hosts a run may go to now, those of them half-open): a host whose circuit is open is
    out of rotation; a half-open one is in for its one probe run (taken by `next_summary_batch`
    when it places a session there). Only reads."""
    available = store.hosts.available_hosts(fleet.names, now_ms, policy, probe=False)
    circuits = store.hosts.host_circuits()
    probing = [n for n in available if n in circuits and circuits[n].state(now_ms) == CircuitState.HALF_OPEN]
    return available, probing


def closed_hosts(store: DigestStore, fleet: Fleet, policy: CircuitPolicy, now_ms: int) -> list[str]:
    """The hosts whose circuit is closed: where mini-summary and graph runs go (a half-open host's
    one probe is the summary sensor's to take)."""
    available, probing = hosts_in_rotation(store, fleet, policy, now_ms)
    return [name for name in available if name not in probing]


def place_session(store: DigestStore, fleet: Fleet, tags: Mapping[str, str], session_id: str) -> Placement:
    """The model host the run's `digest/model_host` tag names, and why it was chosen. A run without one
    (asked for by hand), or naming a host no longer declared, is placed now the way a sweep would
    place it: raw on a host that admits it, else the earliest finish. The host's measured figures
    are read here and go with the placement."""
    tagged = tags.get(MODEL_HOST_TAG)
    if tagged in fleet.names:
        reason = tags.get(MODEL_HOST_REASON_TAG, "named by the run's tag")
        return Placement(fleet.host(tagged), reason, fleet.measured_limits(store, tagged))
    views, _ = host_views(store, fleet, fleet.names, {})
    assignment = assign_host(store.summaries.summary_candidate(session_id), views)
    why = f"the run's host {tagged!r} is not declared" if tagged else "placed by the run"
    view = next(view for view in views if view.spec.name == assignment.host)
    return Placement(view.spec, f"{assignment.reason} ({why})", view.limits)


class ModelHosts:
    """The model hosts of one run or tick. The hosts file is read at the first use of `fleet` and
    not again: a host added to the file is seen by the next run or tick. Each session is placed once
    (`place`); an embedded host with no URL gets a SmolLM2 llama.cpp server on loopback when its
    client is first asked for, stopped by `stop`."""

    def __init__(self, config: HostsConfig):
        self._config = config
        self.call_ceiling_s = config.call_ceiling_s
        self.response_cache = config.response_cache
        self._pacing = PacingPolicy(ceiling_s=config.call_ceiling_s, raw_call_target_s=config.raw_call_target_s)
        self._bounds = StreamBounds(event_max_bytes=config.event_max_bytes, call_max_bytes=config.call_max_bytes)
        self._servers: dict[str, EmbeddedServer] = {}
        self._placements: dict[tuple[str, str | None, str | None], Placement] = {}

    @functools.cached_property
    def fleet(self) -> Fleet:
        return build_fleet(self._config)

    def stop(self) -> None:
        """Stop the embedded servers this object started."""
        for server in self._servers.values():
            server.stop()
        self._servers.clear()

    def limits(self, host: str | None = None, store: DigestStore | None = None) -> Limits:
        """The bounds of a call to `host` (None: the first declared); given the store, with the
        bytes per token the host's ledger measures (when the host's is not pinned)."""
        return self.fleet.limits(host) if store is None else self.fleet.measured_limits(store, host)

    def place(self, store: DigestStore, tags: Mapping[str, str], session_id: str) -> Placement:
        """Where the run with these tags sends the session (`place_session`), placed at the first
        ask and the same for the run's later steps."""
        key = (session_id, tags.get(MODEL_HOST_TAG), tags.get(MODEL_HOST_REASON_TAG))
        if key not in self._placements:
            self._placements[key] = place_session(store, self.fleet, tags, session_id)
        return self._placements[key]

    def tagged(self, store: DigestStore, tags: Mapping[str, str], first_timeout_s: float) -> RunHost:
        """The host a graph run's tag names (the sensors place those runs), else the first declared:
        its bounds with what its ledger measures, its client, its pacer."""
        tagged = tags.get(MODEL_HOST_TAG)
        spec = self.fleet.host(tagged if tagged in self.fleet.names else None)
        return self._run_host(store, spec, self.fleet.measured_limits(store, spec.name), None, None, first_timeout_s)

    def run_host(
        self,
        store: DigestStore,
        placement: Placement,
        session: tuple[str, str] | None = None,
        progress: CallProgress | None = None,
        first_timeout_s: float | None = None,
    ) -> RunHost:
        """The placed host with its client behind the response cache (`session`, `progress`: as for
        `client`) and its pacer (`first_timeout_s`: the stage's configured timeout, default the
        bounds' own): nothing placed again."""
        return self._run_host(store, placement.spec, placement.limits, session, progress, first_timeout_s)

    def _run_host(
        self,
        store: DigestStore,
        spec: HostSpec,
        limits: Limits,
        session: tuple[str, str] | None,
        progress: CallProgress | None,
        first_timeout_s: float | None,
    ) -> RunHost:
        client = self._client(store, spec, session, progress)
        pacer = self._pacer(store, spec, limits.timeout_s if first_timeout_s is None else first_timeout_s)
        return RunHost(spec, limits, client, pacer)

    def pacer(self, store: DigestStore, host: str | None, first_timeout_s: float) -> Pacer:
        """One run's call deadlines on `host`, from its measured speed (`digest.pacing`);
        `first_timeout_s`, the stage's configured timeout, where nothing is measured yet."""
        return self._pacer(store, self.fleet.host(host), first_timeout_s)

    def _pacer(self, store: DigestStore, spec: HostSpec, first_timeout_s: float) -> Pacer:
        return Pacer.for_host(self._pacing, first_timeout_s, store.speed.host_samples(spec.name, spec.model))

    def client(
        self,
        store: DigestStore | None = None,
        session: tuple[str, str] | None = None,
        host: str | None = None,
        progress: CallProgress | None = None,
    ) -> ChatClient:
        """The client of `host` (None: the first declared); given the store, behind the response
        cache. `session`: the (session id, input revision) a summary's replies are staged for, so a
        rerun after a crash finishes from them even with reuse off. `progress`: where each call's
        pieces are counted for the run log."""
        spec = self.fleet.host(host)
        if store is None:
            return self._provider_client(spec, progress)
        return self._client(store, spec, session, progress)

    def _client(
        self, store: DigestStore, spec: HostSpec, session: tuple[str, str] | None, progress: CallProgress | None
    ) -> ChatClient:
        # Starting an embedded server takes seconds: not with a run's store connection held.
        starts_server = spec.provider == "embedded" and not spec.url and spec.name not in self._servers
        with store.file.released() if starts_server else nullcontext():
            inner = self._provider_client(spec, progress)
        # What the server sees besides the model, prompt, schema and output cap (added per call).
        wire = {"provider": spec.provider}
        if spec.provider == "ollama":
            wire["num_ctx"] = spec.context_limit_tokens
        return CachedChatClient(inner, store.cache, wire, reuse=self.response_cache, session=session)

    def _provider_client(self, spec: HostSpec, progress: CallProgress | None = None) -> ChatClient:
        client = self._new_provider_client(spec)
        client.progress = progress
        return client

    def _new_provider_client(self, spec: HostSpec) -> OllamaChatClient | OpenAIChatClient:
        if spec.provider == "ollama":
            url = spec.url or "http://127.0.0.1:11434"
            return OllamaChatClient(url, spec.model, num_ctx=spec.context_limit_tokens, bounds=self._bounds)
        if spec.provider == "embedded":
            # Started on first use, so a run or sensor that never calls the model starts nothing.
            if not spec.url and spec.name not in self._servers:
                self._servers[spec.name] = EmbeddedServer(n_ctx=spec.context_limit_tokens).start()
            url = spec.url or self._servers[spec.name].url
            # llama-cpp-python's server takes the schema only in the json_object form.
            return OpenAIChatClient(url, MODEL_ALIAS, schema_style="json_object", bounds=self._bounds)
        return OpenAIChatClient(spec.url or "http://127.0.0.1:8080", spec.model, bounds=self._bounds)
