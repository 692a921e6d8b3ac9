"""Every deployment setting, in one place: its env var, its default, and how it is parsed.

`SETTINGS` is the one definition of each setting: env var, its field (of `Settings`, or of one of
its policies), its default, how its text is read and validated (`digest.settings_parse`), and its
doc. A Dagster resource field configured by a setting has the same name (`resources.bindings`), and
the settings tables of `docs/settings.md` and the README are written from `SETTINGS`
(`python -m digest.settings`). Settings are read once, when the definitions load. A malformed value
raises `SettingsError` naming the variable and the reason, so a bad deployment fails loudly at load
instead of running with a silently substituted default.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from digest.circuit import CircuitPolicy
from digest.embeddings import DEFAULT_EMBED_URLS, EMBED_PROVIDERS, EMBEDDED_EMBED_MODEL, default_embed_provider
from digest.graph.policy import (
    MIN_CHUNK_CONTENT_BYTES,
    GraphPolicy,
    chunk_content_budget_bytes,
    graph_limits,
    prompt_window_tokens,
)
from digest.hosts import (
    DEFAULT_HOST,
    Fleet,
    HostsError,
    HostSpec,
    load_hosts_file,
)
from digest.mini_summaries import PRIORITIES as MINI_SUMMARY_PRIORITIES
from digest.mini_summaries import MiniSummaryPolicy
from digest.scheduling import SweepPolicy
from digest.settings_fleet import DEFAULT_MODEL_NAMES, EMBEDDED_CONTEXT_TOKENS, MODEL_SETTINGS, build_fleet
from digest.settings_parse import (
    Parse,
    Setting,
    SettingsError,
    on_off,
    one_of,
    path,
    positive,
    postgres_url,
    share,
    text,
    watch_list,
    whole,
)
from digest.synthesis import Limits

# The reference's graph output limit is 8192 tokens for a 131072-token context. On a small context
# (the embedded SmolLM2's is 8192) that would leave no room for a prompt, so the default is an eighth
# of the context when that is less: 1024 for 8192, enough for 8 entities and 8 relations, and the
# safe band (6144) stays the bound on the prompt.
REFERENCE_GRAPH_OUTPUT_LIMIT_TOKENS = 8192


@dataclass(frozen=True)
class Settings:
    home: Path
    db_path: Path
    inbox: Path
    watch: str | None  # DIGEST_WATCH as written: `digest.walk.watch_folders` reads its folders
    hosts_file: Path | None  # several model hosts (digest.hosts); None: the single-host settings
    provider: str
    model_url: str | None
    model_name: str
    context_limit_tokens: int
    safe_limit_tokens: int
    raw_cap_tokens: int | None  # None: the cap is off (high-context hosts); auto: the cap until measured
    raw_cap_auto: bool  # the cap follows the host's measured speed (`digest.pacing`)
    raw_call_target_s: float  # what an auto cap sizes one raw call to
    call_ceiling_s: float  # no model call runs longer
    bytes_per_token: float | None  # pinned; None: measured from the ledger, else 3.0
    summary_timeout_s: float
    summary_max_output_tokens: int
    event_max_bytes: int  # one event of a streamed reply holds at most this (`digest.model_api.StreamBounds`)
    call_max_bytes: int  # one model call reads at most this off the wire
    sweep: SweepPolicy
    mini_summaries: MiniSummaryPolicy
    graph: GraphPolicy
    circuit: CircuitPolicy
    response_cache: bool  # reuse model replies from DuckDB (staging for crash safety stays either way)
    junk_share_max: float  # the junk check fails above this share of the summaries written since it last ran
    search_lag_max_s: float  # the search index's check fails when a change waits longer for it
    redact: bool  # secrets in the logs' text replaced at ingest (`digest.redact`)
    dagster_pg_url: str | None  # the Dagster instance on PostgreSQL; None: SQLite under DAGSTER_HOME
    embed_provider: str  # off | ollama | openai | embedded: what makes the search index's embeddings
    embed_url: str | None
    embed_model: str | None
    embed_batch_documents: int  # documents one index refresh embeds at most
    embed_threads: int  # the threads `embedded` embeds on

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @property
    def vector_model(self) -> str | None:
        """The model the search index's vectors are made by; None when embeddings are off."""
        return None if self.embed_provider == "off" else self.embed_model

    @functools.cached_property
    def fleet(self) -> Fleet:
        return build_fleet(self)

    def limits(self) -> Limits:
        """The first host's bounds (the single host's, without a hosts file)."""
        return self.fleet.limits()

    def value(self, setting: Setting) -> Any:
        """The setting's value: a field of these settings, or of one of their policies."""
        owner = self if setting.policy is None else getattr(self, setting.policy)
        return getattr(owner, setting.field)


def _sweep(env: str, field: str, parse: Parse, default: Any, doc: str) -> Setting:
    return Setting(env, field, parse, default, doc, policy="sweep")


def _mini(env: str, field: str, parse: Parse, default: Any, doc: str) -> Setting:
    return Setting(env, field, parse, default, doc, policy="mini_summaries")


def _graph(env: str, field: str, parse: Parse, default: Any, doc: str, default_doc: str | None = None) -> Setting:
    return Setting(env, field, parse, default, doc, policy="graph", default_doc=default_doc)


def _circuit(env: str, field: str, parse: Parse, default: Any, doc: str) -> Setting:
    return Setting(env, field, parse, default, doc, policy="circuit")


def _graph_output_default(known: Mapping[str, Any]) -> int:
    """An eighth of the smallest context a graph call may go to, at most the reference's 8192."""
    contexts = [known["context_limit_tokens"]]
    if known["hosts_file"]:
        try:
            contexts = [h.context_limit_tokens for h in load_hosts_file(known["hosts_file"], DEFAULT_MODEL_NAMES)]
        except HostsError as exc:
            raise SettingsError(str(exc)) from None
    return min(REFERENCE_GRAPH_OUTPUT_LIMIT_TOKENS, min(contexts) // 8)


# In reading order: a default may depend on the settings above it.
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "DIGEST_HOME",
        "home",
        path,
        lambda known: Path(".digest").resolve(),
        "data folder: the DuckDB file, the inbox, the Dagster instance",
        default_doc="`./.digest`",
    ),
    Setting(
        "DIGEST_DB_PATH",
        "db_path",
        path,
        lambda known: (known["home"] / "digest.duckdb").resolve(),
        "the DuckDB file",
        default_doc="`$DIGEST_HOME/digest.duckdb`",
    ),
    Setting(
        "DIGEST_INBOX",
        "inbox",
        path,
        lambda known: (known["home"] / "inbox").resolve(),
        "where the `raw_turns` asset looks for bundles when given no paths",
        default_doc="`$DIGEST_HOME/inbox`",
    ),
    Setting(
        "DIGEST_WATCH",
        "watch",
        watch_list,
        None,
        "folders of agent logs the inbox sensor also watches and `session-digest ingest` with no path reads, "
        "walked down their sub-folders and read on as their files grow, separated by `:` (`os.pathsep`); `~` "
        "and `$VAR` expanded; e.g. `~/.claude/projects:~/.codex/sessions` ([ingest](ingest.md#harness-homes)); "
        "unset: the sensor watches the inbox alone, and `ingest` reads the harness homes that exist",
        default_doc="none",
    ),
    *MODEL_SETTINGS,
    _sweep(
        "DIGEST_SWEEP_MAX_SESSIONS",
        "max_sessions",
        whole(),
        5,
        "sessions one sweep (sensor tick or `session-digest sweep`) launches at most",
    ),
    _sweep("DIGEST_SWEEP_MODEL_SECONDS", "model_seconds", positive, 1800.0, "estimated model time one sweep may queue"),
    _sweep(
        "DIGEST_IDLE_WINDOW_S",
        "idle_window_s",
        positive,
        600.0,
        "a session active more recently than this waits (churn gate)",
    ),
    _sweep(
        "DIGEST_SWEEP_OLDEST_SHARE",
        "oldest_share",
        whole(0),
        1,
        "of a sweep's slots, those kept for the oldest pending sessions (0 or more)",
    ),
    _sweep(
        "DIGEST_BACKOFF_BASE_S",
        "backoff_base_s",
        positive,
        1800.0,
        "a session's failure backoff after its first failure, doubling per failure up to `DIGEST_BACKOFF_MAX_S`",
    ),
    _sweep("DIGEST_BACKOFF_MAX_S", "backoff_max_s", positive, 86400.0, "the longest failure backoff"),
    _sweep(
        "DIGEST_BACKLOG_REFRESH_S",
        "backlog_refresh_s",
        positive,
        300.0,
        "the summary sensor refreshes the `backlog` asset (pending, drain, ETA) at most this often; "
        "`session-digest sweep` at each sweep ([sweeps](sweeps.md#the-backlog))",
    ),
    _sweep(
        "DIGEST_BACKLOG_STALL_S",
        "backlog_stall_s",
        positive,
        3600.0,
        "the `backlog` asset's check fails (a stalled backlog) when sessions wait, a model host is in rotation "
        "and no summary has finished for this long",
    ),
    # Defaults as the reference backfill: 600 s a run, 20 s inner and 30 s outer per turn, 5 tries.
    _mini(
        "DIGEST_MINI_SUMMARY_BUDGET_S",
        "budget_s",
        positive,
        600.0,
        "model time one `turn_mini_summaries` run may spend; it starts no turn after that",
    ),
    _mini(
        "DIGEST_MINI_SUMMARY_TIMEOUT_S",
        "timeout_s",
        positive,
        20.0,
        "the stall window of one mini summary call while the host's speed is not measured yet",
    ),
    _mini(
        "DIGEST_MINI_SUMMARY_OUTER_TIMEOUT_S",
        "outer_timeout_s",
        positive,
        30.0,
        "with the inner timeout: the outer backstop per turn, whatever the client does, is the call's ceiling "
        "times their ratio; at least the inner one",
    ),
    _mini(
        "DIGEST_MINI_SUMMARY_MAX_ATTEMPTS",
        "max_attempts",
        whole(),
        5,
        "failed attempts after which a turn is archived (`generation-timeout`)",
    ),
    _mini(
        "DIGEST_MINI_SUMMARY_FRESH_RESERVE",
        "fresh_reserve",
        whole(0),
        10,
        "a run takes this many of the newest pending turns first, then the oldest (0 or more)",
    ),
    _mini(
        "DIGEST_MINI_SUMMARY_PRIORITY",
        "priority",
        one_of(MINI_SUMMARY_PRIORITIES),
        "degraded-first",
        "order of sessions with pending turns: `degraded-first` (sessions whose raw prompt is over the cap or the "
        "safe band, then newest activity) or `newest-first`",
    ),
    # Defaults as the reference's `localModels.chat` leaves: 50000-token chunks, 8192 output tokens
    # (less on a small context), 3 attempts; a chunk's call waits up to 600 s; a session needing more
    # than 64 chunk calls is not tried. A run spends up to 1800 s of model time, as a sweep may
    # (`DIGEST_SWEEP_MODEL_SECONDS`), so one session does not hold the `model` pool for longer.
    _graph(
        "DIGEST_GRAPH_CHUNK_LIMIT_TOKENS",
        "chunk_limit_tokens",
        whole(),
        50000,
        "the graph chunk limit: one extraction prompt is at most min(this, the raw cap when on, the safe band, "
        "the context − the graph output limit)",
    ),
    _graph(
        "DIGEST_GRAPH_OUTPUT_LIMIT_TOKENS",
        "output_limit_tokens",
        whole(64),
        _graph_output_default,
        "output cap of one extraction call (at least 64); the reference's 8192 would fill an 8192-token context "
        "such as SmolLM2's",
        default_doc=f"{REFERENCE_GRAPH_OUTPUT_LIMIT_TOKENS}, or an eighth of the context if less "
        f"({EMBEDDED_CONTEXT_TOKENS // 8} for `embedded`)",
    ),
    _graph(
        "DIGEST_GRAPH_MAX_ATTEMPTS",
        "max_attempts",
        whole(),
        3,
        "failed digests (at the same turns) after which a session is undigestible",
    ),
    _graph(
        "DIGEST_GRAPH_TIMEOUT_S",
        "timeout_s",
        positive,
        600.0,
        "the stall window of one extraction call while the host's speed is not measured yet",
    ),
    _graph(
        "DIGEST_GRAPH_MAX_CHUNKS",
        "max_chunks",
        whole(),
        64,
        "a session that needs more extraction calls is undigestible at once (the size pre-check)",
    ),
    _graph("DIGEST_GRAPH_BATCH_SESSIONS", "batch_sessions", whole(), 10, "sessions one digest sensor tick launches"),
    _graph(
        "DIGEST_GRAPH_FRESH_RESERVE",
        "fresh_reserve",
        whole(0),
        2,
        "of those, how many are the newest (the rest: the oldest; 0 or more)",
    ),
    _graph(
        "DIGEST_GRAPH_BUDGET_S",
        "budget_s",
        positive,
        1800.0,
        "model time one `digest_sessions` run may spend; it starts no chunk after that, and the next run goes on "
        "from the chunks done",
    ),
    Setting(
        "DIGEST_RESPONSE_CACHE",
        "response_cache",
        on_off,
        True,
        "`off`: model replies are not reused (a summary's reply is still staged until its summary is written, "
        "for crash safety)",
    ),
    Setting(
        "DIGEST_REDACT",
        "redact",
        on_off,
        True,
        "`off`: the logs' text is stored as read. On, each secret found (provider keys and tokens, JWTs, "
        "private-key blocks, passwords in URLs, connection strings and password flags, `.netrc`, `.pgpass` and "
        "`.npmrc` lines, Telegram bot tokens, Docker `config.json` auths, secret `KEY=value` lines and "
        "`KEY=value command` prefixes, auth and API-key headers) is replaced by `[REDACTED:<kind>]` at ingest, "
        "before anything is stored; placeholders, defaults and names are kept; the log files are only read "
        "([ingest](ingest.md#projects-and-secrets)). Migrations 13, 17 and 18 redact what a store held before, "
        "unless off",
    ),
    Setting(
        "DIGEST_JUNK_SHARE_MAX",
        "junk_share_max",
        share,
        0.25,
        "the asset check `junk_share_since_last_check` fails when more than this share (0 to 1) of the summaries "
        "written since it last ran has a junk verdict ([routing](routing.md#junk))",
    ),
    Setting(
        "DIGEST_SEARCH_LAG_MAX_S",
        "search_lag_max_s",
        positive,
        900.0,
        "the asset check `search_index_current` fails when a session's turns, summary or mini summaries changed "
        "longer ago than this and the search index has not taken the change in ([search](search.md))",
    ),
    _circuit(
        "DIGEST_HOST_FAILURE_THRESHOLD",
        "failure_threshold",
        whole(),
        3,
        "host failures in a row that open a model host's circuit (take it out of rotation): a timeout, a server "
        "unreachable or breaking off, an HTTP 5xx that is not a context overflow, a reply that breaks the wire "
        "protocol. A context overflow, a reply cut at its output cap or that does not parse, and a 4xx say "
        "nothing of the host",
    ),
    _circuit(
        "DIGEST_HOST_RETRY_S",
        "retry_base_s",
        positive,
        60.0,
        "an open circuit's backoff, doubling with each re-open up to `DIGEST_HOST_RETRY_MAX_S`; after it one probe "
        "run may go to the host, and its success closes the circuit",
    ),
    _circuit(
        "DIGEST_HOST_RETRY_MAX_S",
        "retry_max_s",
        positive,
        1800.0,
        "an open circuit's longest backoff (at least `DIGEST_HOST_RETRY_S`)",
    ),
    Setting(
        "DIGEST_EMBED_PROVIDER",
        "embed_provider",
        one_of(("off", *EMBED_PROVIDERS)),
        lambda known: default_embed_provider(),
        "what makes embeddings for search, fused with keyword results once they cover what a search covers "
        "([search](search.md#vectors)): `embedded` (multilingual-e5-small in this process, from the `embeddings` "
        "extra: no host), `ollama` (native `/api/embed`), `openai` (any `/v1/embeddings` server), `off` (keyword "
        "search only)",
        default_doc="`embedded` where the `embeddings` extra is installed (`setup.sh` installs it), else `off`",
    ),
    Setting(
        "DIGEST_EMBED_URL",
        "embed_url",
        text,
        lambda known: DEFAULT_EMBED_URLS.get(known["embed_provider"]),
        "the embeddings server's base URL",
        default_doc="`http://127.0.0.1:11434` for `ollama`, `http://127.0.0.1:8080` for `openai`",
    ),
    Setting(
        "DIGEST_EMBED_MODEL",
        "embed_model",
        text,
        lambda known: {"ollama": "nomic-embed-text", "openai": "default", "embedded": EMBEDDED_EMBED_MODEL}.get(
            known["embed_provider"]
        ),
        "the embedding model; it is stamped into the index, and a change re-embeds the index in budgeted batches "
        "while the previous model's vectors keep serving",
        default_doc=f"`nomic-embed-text` / `default` / `{EMBEDDED_EMBED_MODEL}` (the only one `embedded` runs)",
    ),
    Setting(
        "DIGEST_EMBED_BATCH_DOCUMENTS",
        "embed_batch_documents",
        whole(1),
        512,
        "document chunks (cards and summaries first, then mini summaries and turns) one refresh of the search "
        "index embeds at most, within two minutes; the rest wait for the next refresh, as the `backlog` shows",
    ),
    Setting(
        "DIGEST_EMBED_THREADS",
        "embed_threads",
        whole(1),
        1,
        "threads `embedded` embeds on (its engine would take every core): the rest are left to the chat model's "
        "server, which runs beside an embedding pass",
    ),
    # Read by Dagster from the environment (dagster.yaml names the variable): no resource, no copy.
    Setting(
        "DIGEST_DAGSTER_PG_URL",
        "dagster_pg_url",
        postgres_url,
        None,
        "a PostgreSQL URL, `postgresql+psycopg2://user:password@host:5432/db` (SQLAlchemy 2.1 would open a bare "
        "`postgresql://` with psycopg 3, which is not installed; the load says so): the Dagster instance (runs, "
        "event log, schedules) lives there, through `dagster-postgres`, so the webserver, the daemon and the runs "
        "can restart or move apart; `dagster.yaml` names the variable, never its value",
        default_doc="none (SQLite under `DAGSTER_HOME`)",
    ),
)


def setting_of(env: str, field: str | None = None) -> Setting:
    """The setting of the variable `env` (of its field `field`, where a variable sets two)."""
    for setting in SETTINGS:
        if setting.env == env and field in (None, setting.field):
            return setting
    raise KeyError(f"no setting {env}" + (f" of field {field!r}" if field else ""))


def _check(settings: Settings) -> None:
    """What no single setting can check alone."""
    if settings.safe_limit_tokens > settings.context_limit_tokens:
        raise SettingsError(
            f"DIGEST_SAFE_LIMIT_TOKENS={settings.safe_limit_tokens} is above "
            f"DIGEST_CONTEXT_LIMIT_TOKENS={settings.context_limit_tokens}"
        )
    mini = settings.mini_summaries
    if mini.outer_timeout_s < mini.timeout_s:
        raise SettingsError(
            f"DIGEST_MINI_SUMMARY_OUTER_TIMEOUT_S={mini.outer_timeout_s:g} is below "
            f"DIGEST_MINI_SUMMARY_TIMEOUT_S={mini.timeout_s:g}: the outer timeout is the backstop of the inner one"
        )
    if settings.circuit.retry_max_s < settings.circuit.retry_base_s:
        raise SettingsError(
            f"DIGEST_HOST_RETRY_MAX_S={settings.circuit.retry_max_s:g} is below "
            f"DIGEST_HOST_RETRY_S={settings.circuit.retry_base_s:g}"
        )
    try:
        fleet = settings.fleet
    except HostsError as exc:
        raise SettingsError(str(exc)) from None
    for host in fleet.hosts:
        _check_graph_window(settings, fleet, host)


def _check_graph_window(settings: Settings, fleet: Fleet, host: HostSpec) -> None:
    # The raw cap, when on, bounds every chunk's prompt too.
    model = graph_limits(fleet.limits(host.name), settings.graph)
    room = chunk_content_budget_bytes(model, settings.graph)
    if room < MIN_CHUNK_CONTENT_BYTES:
        where = "" if host.name == DEFAULT_HOST else f"on model host {host.name!r}: "
        raise SettingsError(
            f"{where}the graph prompt window, min(DIGEST_GRAPH_CHUNK_LIMIT_TOKENS, DIGEST_RAW_CAP_TOKENS (when on), "
            f"DIGEST_SAFE_LIMIT_TOKENS, DIGEST_CONTEXT_LIMIT_TOKENS - DIGEST_GRAPH_OUTPUT_LIMIT_TOKENS) = "
            f"{prompt_window_tokens(model, settings.graph)} "
            f"tokens, leaves {room} bytes for turn text after the extraction prompt; at least "
            f"{MIN_CHUNK_CONTENT_BYTES} are needed"
        )


POLICIES = {
    "sweep": SweepPolicy,
    "mini_summaries": MiniSummaryPolicy,
    "graph": GraphPolicy,
    "circuit": CircuitPolicy,
}


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    fields: dict[str, Any] = {}  # also what the defaults depend on: the settings read so far
    parts: dict[str, dict[str, Any]] = {name: {} for name in POLICIES}
    for setting in SETTINGS:
        (fields if setting.policy is None else parts[setting.policy])[setting.field] = setting.read(env, fields)
    settings = Settings(**fields, **{name: POLICIES[name](**part) for name, part in parts.items()})
    _check(settings)
    return settings


# --- the settings tables of docs/settings.md (every setting) and the README (its choice) ---------

REPO = Path(__file__).resolve().parents[1]
TABLE_HEAD = "| env var | default | meaning |\n|---|---|---|\n"


def settings_table(envs: Iterable[str] | None = None, docs: str = "") -> str:
    """One row per variable (of `envs`; None: every one), in the order of `SETTINGS`. The docs'
    links are relative to docs/: `docs` is their folder as seen from the page (the README's "docs/")."""
    rows: dict[str, str] = {}
    for setting in SETTINGS:
        if envs is None or setting.env in envs:
            row = f"| `{setting.env}` | {setting.shown_default} | {setting.doc} |"
            rows.setdefault(setting.env, re.sub(r"\]\((?=[a-z-]+\.md)", f"]({docs}", row))
    return TABLE_HEAD + "\n".join(rows.values()) + "\n"


def table_envs(page: str) -> set[str]:
    """The variables a page's settings table has rows for."""
    start = page.index(TABLE_HEAD)
    table = page[start : page.index("\n\n", start)]
    return set(re.findall(r"^\| `(DIGEST_[A-Z_]+)`", table, re.MULTILINE))


def write_settings_table(page: Path, envs: Iterable[str] | None = None, docs: str = "") -> None:
    """Replace the page's table (its head down to the first blank line) with `settings_table(...)`."""
    text = page.read_text(encoding="utf-8")
    start = text.index(TABLE_HEAD)
    end = text.index("\n\n", start) + 1
    page.write_text(text[:start] + settings_table(envs, docs) + text[end:], encoding="utf-8")


if __name__ == "__main__":
    write_settings_table(REPO / "docs" / "settings.md")
    readme = REPO / "README.md"
    write_settings_table(readme, table_envs(readme.read_text(encoding="utf-8")), docs="docs/")
