"""The Dagster resources: thin typed wrappers that hand the assets a store, a model client and the
policies. Each field is one setting of `digest.settings.SETTINGS`, under the setting's field name,
declared with `configured_by` (its variable, and its doc for the UI's Resources page); the values
are bound where the definitions are built (`pipelines.definitions`)."""

from pathlib import Path
from typing import Any

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr

from digest.circuit import CircuitPolicy
from digest.graph import GraphPolicy
from digest.mini_summaries import MiniSummaryPolicy
from digest.scheduling import SweepPolicy
from digest.settings import setting_of
from digest.walk import watch_folders
from resources.model_clients.embeddings import EmbeddingClient, embedding_client
from resources.model_hosts import ModelHosts
from resources.store import DigestStore, open_store
from resources.worker import worker_tags


def configured_by(env: str, field: str | None = None) -> Any:
    """A resource field set by the variable `env` (its field `field`, where a variable sets two), with
    the setting's default where that is a constant (one computed from other settings is required)."""
    setting = setting_of(env, field)
    default = ... if callable(setting.default) else setting.default
    return Field(default, description=f"{env}: {setting.doc}", json_schema_extra={"env": env})


class DigestStoreResource(ConfigurableResource):
    """The DuckDB file and the inbox folder export bundles are dropped into."""

    db_path: str = configured_by("DIGEST_DB_PATH")
    inbox: str = configured_by("DIGEST_INBOX")
    watch: str | None = configured_by("DIGEST_WATCH")
    junk_share_max: float = configured_by("DIGEST_JUNK_SHARE_MAX")  # read by the junk check
    search_lag_max_s: float = configured_by("DIGEST_SEARCH_LAG_MAX_S")  # read by the search index's check
    redact: bool = configured_by("DIGEST_REDACT")  # read by the ingest

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # Which process runs this run, so a run whose process dies can be told apart and closed.
        if context.run is not None and context.instance is not None:
            context.instance.add_run_tags(context.run.run_id, worker_tags())

    def watched(self) -> list[Path]:
        """The inbox, then `DIGEST_WATCH`'s folders (the inbox sensor's, and an ingest's with no paths)."""
        return [Path(self.inbox), *(watch_folders(self.watch) if self.watch else ())]

    def open(self) -> DigestStore:
        """The store, migrated once per process (every sensor tick and check opens it)."""
        return open_store(self.db_path)


class ChatModelResource(ConfigurableResource):
    """The model hosts and the bounds every call is held to (`digest.settings_fleet.ModelSettings`).

    `hosts_file` declares several hosts; without it the fields below are the one host. Each run and
    each sensor tick sets the resource up, and so gets its own `hosts` (`resources.model_hosts`):
    the hosts file is read once for it, and a host added to the file is seen by the next tick.
    """

    hosts_file: str | None = configured_by("DIGEST_MODEL_HOSTS")
    provider: str = configured_by("DIGEST_MODEL_PROVIDER")
    model_url: str | None = configured_by("DIGEST_MODEL_URL")
    model_name: str = configured_by("DIGEST_MODEL_NAME")
    context_limit_tokens: int = configured_by("DIGEST_CONTEXT_LIMIT_TOKENS")
    safe_limit_tokens: int = configured_by("DIGEST_SAFE_LIMIT_TOKENS")
    raw_cap_tokens: int | None = configured_by("DIGEST_RAW_CAP_TOKENS")
    raw_cap_auto: bool = configured_by("DIGEST_RAW_CAP_TOKENS", "raw_cap_auto")
    raw_call_target_s: float = configured_by("DIGEST_RAW_CALL_TARGET_S")
    call_ceiling_s: float = configured_by("DIGEST_CALL_CEILING_S")
    bytes_per_token: float | None = configured_by("DIGEST_BYTES_PER_TOKEN")
    summary_timeout_s: float = configured_by("DIGEST_SUMMARY_TIMEOUT_S")
    summary_max_output_tokens: int = configured_by("DIGEST_SUMMARY_MAX_OUTPUT_TOKENS")
    response_cache: bool = configured_by("DIGEST_RESPONSE_CACHE")
    event_max_bytes: int = configured_by("DIGEST_STREAM_EVENT_MAX_BYTES")
    call_max_bytes: int = configured_by("DIGEST_CALL_MAX_BYTES")

    _hosts: ModelHosts | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._hosts = ModelHosts(self)

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._hosts is not None:
            self._hosts.stop()

    @property
    def hosts(self) -> ModelHosts:
        """The model hosts of this run or tick."""
        if self._hosts is None:
            raise RuntimeError(
                "the model resource has no hosts until a run or a sensor tick sets it up; "
                "outside one, make them from the settings: resources.model_hosts.ModelHosts(settings)"
            )
        return self._hosts


class SweepPolicyResource(ConfigurableResource):
    """How sweeps pick sessions (count and model-time budget, churn gate) and back failures off."""

    max_sessions: int = configured_by("DIGEST_SWEEP_MAX_SESSIONS")
    model_seconds: float = configured_by("DIGEST_SWEEP_MODEL_SECONDS")
    idle_window_s: float = configured_by("DIGEST_IDLE_WINDOW_S")
    oldest_share: int = configured_by("DIGEST_SWEEP_OLDEST_SHARE")
    backoff_base_s: float = configured_by("DIGEST_BACKOFF_BASE_S")
    backoff_max_s: float = configured_by("DIGEST_BACKOFF_MAX_S")
    backlog_refresh_s: float = configured_by("DIGEST_BACKLOG_REFRESH_S")
    backlog_stall_s: float = configured_by("DIGEST_BACKLOG_STALL_S")

    def policy(self) -> SweepPolicy:
        return SweepPolicy(**self.model_dump())


class MiniSummaryPolicyResource(ConfigurableResource):
    """How per-turn mini summaries are generated: the run's budget, timeouts, attempts and order."""

    budget_s: float = configured_by("DIGEST_MINI_SUMMARY_BUDGET_S")
    timeout_s: float = configured_by("DIGEST_MINI_SUMMARY_TIMEOUT_S")
    outer_timeout_s: float = configured_by("DIGEST_MINI_SUMMARY_OUTER_TIMEOUT_S")
    max_attempts: int = configured_by("DIGEST_MINI_SUMMARY_MAX_ATTEMPTS")
    fresh_reserve: int = configured_by("DIGEST_MINI_SUMMARY_FRESH_RESERVE")
    priority: str = configured_by("DIGEST_MINI_SUMMARY_PRIORITY")

    def policy(self) -> MiniSummaryPolicy:
        return MiniSummaryPolicy(**self.model_dump())


class GraphPolicyResource(ConfigurableResource):
    """The session graph's bounds: chunk and output limits, call timeout, attempts, chunk count, the
    sensor's batch, and the model time one run may spend."""

    chunk_limit_tokens: int = configured_by("DIGEST_GRAPH_CHUNK_LIMIT_TOKENS")
    output_limit_tokens: int = configured_by("DIGEST_GRAPH_OUTPUT_LIMIT_TOKENS")
    max_attempts: int = configured_by("DIGEST_GRAPH_MAX_ATTEMPTS")
    timeout_s: float = configured_by("DIGEST_GRAPH_TIMEOUT_S")
    max_chunks: int = configured_by("DIGEST_GRAPH_MAX_CHUNKS")
    batch_sessions: int = configured_by("DIGEST_GRAPH_BATCH_SESSIONS")
    fresh_reserve: int = configured_by("DIGEST_GRAPH_FRESH_RESERVE")
    budget_s: float = configured_by("DIGEST_GRAPH_BUDGET_S")

    def policy(self) -> GraphPolicy:
        return GraphPolicy(**self.model_dump())


class CircuitPolicyResource(ConfigurableResource):
    """Each model host's circuit breaker: the host failures in a row that take a host out of
    rotation, and the backoff before it is tried again."""

    failure_threshold: int = configured_by("DIGEST_HOST_FAILURE_THRESHOLD")
    retry_base_s: float = configured_by("DIGEST_HOST_RETRY_S")
    retry_max_s: float = configured_by("DIGEST_HOST_RETRY_MAX_S")

    def policy(self) -> CircuitPolicy:
        return CircuitPolicy(**self.model_dump())


class EmbeddingResource(ConfigurableResource):
    """The host that serves the search index's embeddings, if any (`off`: keyword search only)."""

    embed_provider: str = configured_by("DIGEST_EMBED_PROVIDER")
    embed_url: str | None = configured_by("DIGEST_EMBED_URL")
    embed_model: str | None = configured_by("DIGEST_EMBED_MODEL")
    embed_batch_documents: int = configured_by("DIGEST_EMBED_BATCH_DOCUMENTS")
    embed_threads: int = configured_by("DIGEST_EMBED_THREADS")

    def client(self) -> EmbeddingClient | None:
        return embedding_client(self.embed_provider, self.embed_url, self.embed_model, self.embed_threads)

    def embedded_model(self) -> str | None:
        """The model the index's vectors are made by; None when embeddings are off."""
        return None if self.embed_provider == "off" else self.embed_model
