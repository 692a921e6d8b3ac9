"""The Dagster resources: thin typed wrappers that hand the assets a store, a model client and the
policies, configured from the settings table (`digest.settings.SETTINGS`)."""

import dataclasses
import os
import typing
from pathlib import Path
from typing import Any, ClassVar

from dagster import ConfigurableResource, EnvVar, InitResourceContext
from pydantic import Field, PrivateAttr

from digest.circuit import CircuitPolicy
from digest.graph import GraphPolicy
from digest.hosts import Fleet, HostSpec
from digest.mini_summaries import MiniSummaryPolicy
from digest.model_api import ChatClient
from digest.pacing import Pacer, PacingPolicy
from digest.scheduling import SweepPolicy
from digest.settings import SETTINGS, Settings, build_fleet, single_host
from digest.synthesis import Limits
from pipelines.interrupted_runs import worker_tags
from resources.embedded_server import MODEL_ALIAS, EmbeddedServer
from resources.model_clients import OllamaChatClient, OpenAIChatClient
from resources.response_cache import CachedChatClient
from resources.store import DigestStore


class DigestStoreResource(ConfigurableResource):
    """The DuckDB file (`DIGEST_DB_PATH`) and the inbox folder export bundles are dropped into."""

    db_path: str
    inbox: str

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # Which process runs this run, so a run whose process dies can be told apart and closed.
        if context.run is not None and context.instance is not None:
            context.instance.add_run_tags(context.run.run_id, worker_tags())

    def store(self) -> DigestStore:
        store = DigestStore(self.db_path)
        store.migrate_once()  # every sensor tick and check calls this: no write transaction each time
        return store


class ChatModelResource(ConfigurableResource):
    """The model hosts and the bounds every call is held to.

    `hosts_file` (DIGEST_MODEL_HOSTS) declares several hosts; without it the fields below are the
    one host. The file is read at each use, so a host added to it is seen by the next sensor tick.
    An embedded host with no `url` gets a SmolLM2 llama.cpp server on loopback when the run first
    asks for its client, stopped when the run ends.
    """

    hosts_file: str | None = None
    provider: str
    url: str | None = None
    model: str
    context_limit_tokens: int
    safe_limit_tokens: int
    raw_cap_tokens: int | None
    raw_cap_auto: bool = False  # DIGEST_RAW_CAP_TOKENS=auto: the cap follows the host's measured speed
    raw_call_target_s: float = 120.0
    call_ceiling_s: float = 900.0
    bytes_per_token: float | None
    summary_timeout_s: float
    summary_max_output_tokens: int
    response_cache: bool = True  # DIGEST_RESPONSE_CACHE: reuse replies stored in DuckDB

    _servers: dict[str, EmbeddedServer] = PrivateAttr(default_factory=dict)

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers.clear()

    def fleet(self) -> Fleet:
        return build_fleet(self.hosts_file, single_host(self, self.url, self.model), self)

    def limits(self, host: str | None = None, store: DigestStore | None = None) -> Limits:
        """The bounds of a call to `host` (None: the first declared); given the store, with the
        bytes per token the host's ledger measures (when the host's is not pinned)."""
        fleet = self.fleet()
        return fleet.limits(host) if store is None else fleet.measured_limits(store, host)

    def pacer(self, store: DigestStore, host: str | None, first_timeout_s: float) -> Pacer:
        """One run's call deadlines on `host`, from its measured speed (`digest.pacing`);
        `first_timeout_s`, the stage's configured timeout, where nothing is measured yet."""
        spec = self.fleet().host(host)
        policy = PacingPolicy(ceiling_s=self.call_ceiling_s, raw_call_target_s=self.raw_call_target_s)
        return Pacer.for_host(policy, first_timeout_s, store.speed.host_samples(spec.name, spec.model))

    def client(
        self, store: DigestStore | None = None, session: tuple[str, str] | None = None, host: str | None = None
    ) -> ChatClient:
        """The client of `host` (None: the first declared); given the store, behind the response
        cache. `session`: the (session id, input revision) a summary's replies are staged for, so a
        rerun after a crash finishes from them even with reuse off."""
        spec = self.fleet().host(host)
        inner = self._provider_client(spec)
        if store is None:
            return inner
        # What the server sees besides the model, prompt, schema and output cap (added per call).
        wire = {"provider": spec.provider}
        if spec.provider == "ollama":
            wire["num_ctx"] = spec.context_limit_tokens
        return CachedChatClient(inner, store.cache, wire, reuse=self.response_cache, session=session)

    def _provider_client(self, spec: HostSpec) -> ChatClient:
        if spec.provider == "ollama":
            return OllamaChatClient(spec.url or "http://127.0.0.1:11434", spec.model, num_ctx=spec.context_limit_tokens)
        if spec.provider == "embedded":
            # Started on first use, so a run or sensor that never calls the model starts nothing.
            if not spec.url and spec.name not in self._servers:
                self._servers[spec.name] = EmbeddedServer(n_ctx=spec.context_limit_tokens).start()
            url = spec.url or self._servers[spec.name].url
            # llama-cpp-python's server takes the schema only in the json_object form.
            return OpenAIChatClient(url, MODEL_ALIAS, schema_style="json_object")
        return OpenAIChatClient(spec.url or "http://127.0.0.1:8080", spec.model)


class PolicyResource(ConfigurableResource):
    """A policy dataclass as a resource: its fields are the resource's config (see `policy_resource`)."""

    policy_type: ClassVar[type]

    def policy(self):
        return self.policy_type(**self.model_dump())


def policy_resource(policy_type: type, key: str, doc: str) -> type[PolicyResource]:
    """The resource class of a policy dataclass: one field per dataclass field, of its type, with
    the doc of the setting that configures it (resource key `key`), for the UI's Resources page."""
    hints = typing.get_type_hints(policy_type)
    docs = {s.resource_field_name: f"{s.env}: {s.doc}" for s in SETTINGS if s.resource_key == key}
    namespace = {
        "__module__": __name__,
        "__qualname__": f"{policy_type.__name__}Resource",
        "__doc__": doc,
        "__annotations__": {f.name: hints[f.name] for f in dataclasses.fields(policy_type)},
        "policy_type": policy_type,
        **{f.name: Field(description=docs[f.name]) for f in dataclasses.fields(policy_type)},
    }
    return type(namespace["__qualname__"], (PolicyResource,), namespace)


SweepPolicyResource = policy_resource(
    SweepPolicy, "sweep", "How sweeps pick sessions (count and model-time budget, churn gate) and back failures off."
)
MiniSummaryPolicyResource = policy_resource(
    MiniSummaryPolicy,
    "mini_summaries",
    "How per-turn mini summaries are generated: the run's budget, timeouts, attempts and order.",
)
GraphPolicyResource = policy_resource(
    GraphPolicy,
    "graph",
    "The session graph's bounds: chunk and output limits, call timeout, attempts, chunk count, the "
    "sensor's batch, and the model time one run may spend.",
)
CircuitPolicyResource = policy_resource(
    CircuitPolicy,
    "circuit",
    "Each model host's circuit breaker: the host failures in a row that take a host out of rotation, "
    "and the backoff before it is tried again.",
)


def _bound(env_var: str, value: Any) -> Any:
    """`EnvVar` when the variable is set and Dagster reads its text as this same value, so the UI's
    Resources page shows where the value comes from; else the value. Dagster reads env vars as text
    or whole numbers only, so floats, on/off and normalised text (`off`, a relative path) stay values."""
    text = os.environ.get(env_var)
    if text is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int) and text == str(value):
        return EnvVar.int(env_var)
    if isinstance(value, str) and text == value:
        return EnvVar(env_var)
    return value


def resource_config(settings: Settings, key: str) -> dict[str, Any]:
    """The fields of the resource `key` (e.g. "model", "sweep"), from the settings table."""
    config = {}
    for setting in SETTINGS:
        if setting.resource_key == key:
            value = settings.value(setting)
            config[setting.resource_field_name] = _bound(setting.env, str(value) if isinstance(value, Path) else value)
    return config


def build_resources(settings: Settings) -> dict[str, ConfigurableResource]:
    return {
        "store": DigestStoreResource(**resource_config(settings, "store")),
        "model": ChatModelResource(**resource_config(settings, "model")),
        "sweep": SweepPolicyResource(**resource_config(settings, "sweep")),
        "mini_summaries": MiniSummaryPolicyResource(**resource_config(settings, "mini_summaries")),
        "graph": GraphPolicyResource(**resource_config(settings, "graph")),
        "circuit": CircuitPolicyResource(**resource_config(settings, "circuit")),
    }
