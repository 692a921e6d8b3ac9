"""The Dagster resources: thin typed wrappers that hand the assets a store and a model client."""


from typing import Optional

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from digest.graph import GraphPolicy
from digest.mini_summaries import MiniSummaryPolicy
from digest.model_api import ChatClient
from digest.scheduling import SweepPolicy
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
    """The chat model and the bounds every summary call is held to.

    With `provider="embedded"` and no `url`, a SmolLM2 llama.cpp server is started on loopback
    when the run first asks for a client, and stopped when the run ends.
    """

    provider: str
    url: Optional[str] = None
    model: str
    context_limit_tokens: int
    safe_limit_tokens: int
    raw_cap_tokens: Optional[int]
    bytes_per_token: float
    summary_timeout_s: float
    summary_max_output_tokens: int
    response_cache: bool = True  # DIGEST_RESPONSE_CACHE: reuse replies stored in DuckDB

    _server: Optional[EmbeddedServer] = PrivateAttr(default=None)

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def limits(self) -> Limits:
        return Limits(
            context_limit_tokens=self.context_limit_tokens,
            safe_limit_tokens=self.safe_limit_tokens,
            raw_cap_tokens=self.raw_cap_tokens,
            bytes_per_token=self.bytes_per_token,
            max_output_tokens=self.summary_max_output_tokens,
            timeout_s=self.summary_timeout_s,
        )

    def client(self, store: Optional[DigestStore] = None, session: Optional[tuple[str, str]] = None) -> ChatClient:
        """The provider's client; given the store, behind the response cache. `session`: the
        (session id, input revision) a summary's replies are staged for, so a rerun after a crash
        finishes from them even with reuse off."""
        inner = self._provider_client()
        if store is None:
            return inner
        # What the server sees besides the model, prompt, schema and output cap (added per call).
        wire = {"provider": self.provider}
        if self.provider == "ollama":
            wire["num_ctx"] = self.context_limit_tokens
        return CachedChatClient(inner, store, wire, reuse=self.response_cache, session=session)

    def _provider_client(self) -> ChatClient:
        if self.provider == "ollama":
            return OllamaChatClient(self.url or "http://127.0.0.1:11434", self.model, num_ctx=self.context_limit_tokens)
        if self.provider == "embedded":
            # Started on first use, so a run or sensor that never calls the model starts nothing.
            if not self.url and self._server is None:
                self._server = EmbeddedServer(n_ctx=self.context_limit_tokens).start()
            url = self.url or self._server.url
            # llama-cpp-python's server takes the schema only in the json_object form.
            return OpenAIChatClient(url, MODEL_ALIAS, schema_style="json_object")
        return OpenAIChatClient(self.url or "http://127.0.0.1:8080", self.model)


class SweepPolicyResource(ConfigurableResource):
    """How sweeps pick sessions (count and model-time budget, churn gate) and back failures off."""

    max_sessions: int
    model_seconds: float
    idle_window_s: float
    oldest_share: int
    backoff_base_s: float
    backoff_max_s: float

    def policy(self) -> SweepPolicy:
        return SweepPolicy(**self.model_dump())


class MiniSummaryPolicyResource(ConfigurableResource):
    """How per-turn mini summaries are generated: the run's budget, timeouts, attempts and order."""

    budget_s: float
    timeout_s: float
    outer_timeout_s: float
    max_attempts: int
    fresh_reserve: int
    priority: str

    def policy(self) -> MiniSummaryPolicy:
        return MiniSummaryPolicy(**self.model_dump())


class GraphPolicyResource(ConfigurableResource):
    """The session graph's bounds: chunk and output limits, call timeout, attempts, chunk count,
    the sensor's batch, and the model time one run may spend."""

    chunk_limit_tokens: int
    output_limit_tokens: int
    max_attempts: int
    timeout_s: float
    max_chunks: int
    batch_sessions: int
    fresh_reserve: int
    budget_s: float

    def policy(self) -> GraphPolicy:
        return GraphPolicy(**self.model_dump())
