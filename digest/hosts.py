"""Model hosts: the servers model calls go to, and which one a session's summary goes to.

A deployment declares its hosts in a TOML file (`DIGEST_MODEL_HOSTS`), one `[[hosts]]` table each;
without one, the single-host settings (`DIGEST_MODEL_PROVIDER`, `DIGEST_MODEL_URL`, ...) are the one
host, named `default`. Each host has its own context, raw-synthesis cap and number of calls at once.

The routing rule across hosts: a session goes raw to a host whose raw cap and prompt bounds admit
its raw prompt; only a session that no host can take raw is degraded. Among the hosts that can
take it the same way, the one that would finish it first wins: the model time already queued on it
(per call slot) plus this session's estimate at that host's measured speed.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, ValidationError, model_validator

from digest.scheduling import Candidate, PlannedSession, plan_session
from digest.synthesis import Limits, Route
from digest.tokens import resolve_bytes_per_token

DEFAULT_HOST = "default"  # the one host of the single-host settings
PROVIDERS = ("embedded", "openai", "ollama")
# A raw call must finish inside DIGEST_SUMMARY_TIMEOUT_S (180 s) on a CPU host. Prompt evaluation
# runs at roughly 50 tokens/s for a 4B-active or 7B Q4 model on a few CPU cores, so 8192 prompt
# tokens cost about 165 s: the most that fits the timeout with room for the answer. An auto cap
# starts here until its host's speed is measured.
DEFAULT_RAW_CAP_TOKENS = 8192
# Host names go into run tags and pool limits: keep them to what Dagster's tag values take.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
# Every number of a host is bounded by what holds it: token counts land in the store's INT32 columns
# (and a prompt's bytes, up to 32 a token, too) and no served model has a context past 2**24 tokens
# (16.7 M); a host's call slots are its run limit; a token is at least a byte under byte-level BPE.
MAX_CONTEXT_TOKENS = 2**24
MAX_CONCURRENCY = 64
MIN_BYTES_PER_TOKEN, MAX_BYTES_PER_TOKEN = 0.5, 32.0


class HostsError(ValueError):
    """The hosts file cannot be used; the message names the file, the host and the field."""


@dataclass(frozen=True)
class HostSpec:
    name: str
    provider: str  # embedded | openai | ollama
    url: str | None  # None: the provider's local default (embedded: a server started on loopback)
    model: str
    context_limit_tokens: int
    safe_limit_tokens: int
    raw_cap_tokens: int | None  # None: no raw cap on this host (a long-context GPU box)
    concurrency: int  # model calls at once: the host's run limit
    bytes_per_token: float | None  # pinned; None: measured from the host's ledger, else 3.0
    raw_cap_auto: bool = False  # the cap follows the host's measured speed; `raw_cap_tokens` until measured


def _off_auto_or_count(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in ("off", "auto"):
        return value.strip().lower()
    return value


def _not_a_boolean(value: Any) -> Any:
    """TOML's `true` is Python's 1: refused where a number is meant, not taken as one."""
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is a boolean, not a number")
    return value


Tokens = Annotated[StrictInt, Field(ge=1, le=MAX_CONTEXT_TOKENS)]


class _HostEntry(BaseModel):
    """One `[[hosts]]` table, validated; unknown keys are refused (a typo is not a default)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    provider: Literal["embedded", "openai", "ollama"]
    url: str | None = Field(default=None, pattern=r"^https?://[^\s/]+(/\S*)?$")
    model: str | None = Field(default=None, min_length=1)
    context_limit_tokens: Annotated[StrictInt, Field(ge=256, le=MAX_CONTEXT_TOKENS)]
    safe_limit_tokens: Tokens | None = None
    raw_cap_tokens: Annotated[Tokens | Literal["off", "auto"] | None, BeforeValidator(_off_auto_or_count)] = None
    concurrency: Annotated[StrictInt, Field(ge=1, le=MAX_CONCURRENCY)] = 1
    bytes_per_token: Annotated[
        float | None,
        BeforeValidator(_not_a_boolean),
        Field(ge=MIN_BYTES_PER_TOKEN, le=MAX_BYTES_PER_TOKEN, allow_inf_nan=False),
    ] = None

    @model_validator(mode="after")
    def _bounds(self) -> _HostEntry:
        if self.safe_limit_tokens is not None and self.safe_limit_tokens > self.context_limit_tokens:
            raise ValueError(
                f"safe_limit_tokens {self.safe_limit_tokens} is above context_limit_tokens {self.context_limit_tokens}"
            )
        return self


def _spec(entry: _HostEntry, default_models: Mapping[str, str]) -> HostSpec:
    return HostSpec(
        name=entry.name,
        provider=entry.provider,
        url=entry.url.rstrip("/") if entry.url else None,
        model=entry.model or default_models[entry.provider],
        context_limit_tokens=entry.context_limit_tokens,
        safe_limit_tokens=entry.safe_limit_tokens or entry.context_limit_tokens * 3 // 4,
        raw_cap_tokens=(
            DEFAULT_RAW_CAP_TOKENS if entry.raw_cap_tokens == "auto" else None if entry.raw_cap_tokens == "off"
            else entry.raw_cap_tokens
        ),
        concurrency=entry.concurrency,
        bytes_per_token=entry.bytes_per_token,
        raw_cap_auto=entry.raw_cap_tokens == "auto",
    )  # fmt: skip


def load_hosts_file(path: Path, default_models: Mapping[str, str]) -> tuple[HostSpec, ...]:
    """The hosts the file declares, validated: a `HostsError` names the file, the host (by name
    and position) and the field at fault. `raw_cap_tokens` is a count, "off" or "auto" (it follows
    the host's measured speed); when a table leaves it out the host has no cap (say
    `raw_cap_tokens = 8192`, or "auto", for a CPU host)."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise HostsError(f"DIGEST_MODEL_HOSTS={str(path)!r}: cannot read it: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise HostsError(f"DIGEST_MODEL_HOSTS={str(path)!r} is not valid TOML: {exc}") from None
    extra = sorted(set(document) - {"hosts"})
    if extra:
        raise HostsError(f"{path}: unknown top-level key(s) {', '.join(extra)}: declare each host as a [[hosts]] table")
    tables = document.get("hosts")
    if not isinstance(tables, list) or not tables:
        raise HostsError(f"{path}: no [[hosts]] table: declare at least one host")
    hosts: list[HostSpec] = []
    for position, table in enumerate(tables, start=1):
        label = f"host {table.get('name')!r} ([[hosts]] #{position})" if isinstance(table, dict) else f"#{position}"
        try:
            entry = _HostEntry.model_validate(table)
        except ValidationError as exc:
            problems = "; ".join(
                f"field {'.'.join(map(str, e['loc'])) or '(table)'}: {e['msg']}" for e in exc.errors()[:3]
            )
            raise HostsError(f"{path}: {label}: {problems}") from None
        if any(h.name == entry.name for h in hosts):
            raise HostsError(f"{path}: {label}: field name: another host is already named {entry.name!r}")
        hosts.append(_spec(entry, default_models))
    return tuple(hosts)


@dataclass(frozen=True)
class Fleet:
    """The declared hosts, with the bounds every summary call shares (output cap, deadline, and
    the seconds an auto raw cap sizes one raw call to)."""

    hosts: tuple[HostSpec, ...]
    max_output_tokens: int
    timeout_s: float
    raw_call_target_s: float = 120.0

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    @property
    def total_concurrency(self) -> int:
        return sum(h.concurrency for h in self.hosts)

    def host(self, name: str | None = None) -> HostSpec:
        """The host named `name`; None: the first declared."""
        if name is None:
            return self.hosts[0]
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"no model host is named {name!r} (declared: {', '.join(self.names)})")

    def limits(
        self, name: str | None = None, calibrated: tuple[float, int] | None = None, auto_cap: int | None = None
    ) -> Limits:
        """The host's bounds. Its bytes per token: pinned, else `calibrated` (measured in its
        ledger: `DigestStore.calibrated_bytes_per_token`), else the default. Its raw cap: pinned,
        off, or (auto) `auto_cap` as its speed measures it, else the default until measured."""
        host = self.host(name)
        bytes_per_token, source = resolve_bytes_per_token(host.bytes_per_token, calibrated)
        if host.raw_cap_auto:
            cap, cap_source = (auto_cap, "auto") if auto_cap is not None else (host.raw_cap_tokens, "auto-unmeasured")
        else:
            cap, cap_source = host.raw_cap_tokens, "pinned" if host.raw_cap_tokens is not None else "off"
        return Limits(
            context_limit_tokens=host.context_limit_tokens,
            safe_limit_tokens=host.safe_limit_tokens,
            raw_cap_tokens=cap,
            bytes_per_token=bytes_per_token,
            bytes_per_token_source=source,
            max_output_tokens=self.max_output_tokens,
            timeout_s=self.timeout_s,
            raw_cap_source=cap_source,
        )

    def measured_limits(self, store: Any, name: str | None = None) -> Limits:
        """The host's bounds with the bytes per token its ledger in `store` measures, and its raw
        cap when that follows its speed."""
        host = self.host(name)
        auto_cap = None
        if host.raw_cap_auto:
            bound = min(host.safe_limit_tokens, host.context_limit_tokens - self.max_output_tokens)
            # Until the host's summaries say how long they run, room for half the output cap.
            measured = store.auto_raw_cap(
                host.name, host.model, self.raw_call_target_s, self.max_output_tokens // 2, bound
            )
            auto_cap = measured.cap_tokens if measured is not None else None
        return self.limits(host.name, store.calibrated_bytes_per_token(host.name, host.model), auto_cap)


@dataclass(frozen=True)
class HostView:
    """What the assignment knows of one available host at a tick."""

    spec: HostSpec
    limits: Limits
    seconds_per_token: float
    queued_s: float = 0.0  # estimated model seconds already queued or running on it


@dataclass(frozen=True)
class Assignment:
    planned: PlannedSession  # the route, tier and cost on the chosen host
    host: str
    reason: str

    # A planned session's fields, on the host it goes to.
    candidate = property(lambda self: self.planned.candidate)
    route = property(lambda self: self.planned.route)
    tier = property(lambda self: self.planned.tier)
    prompt_tokens_estimate = property(lambda self: self.planned.prompt_tokens_estimate)
    model_seconds_estimate = property(lambda self: self.planned.model_seconds_estimate)


def _finish_s(view: HostView, planned: PlannedSession) -> float:
    return view.queued_s / view.spec.concurrency + planned.model_seconds_estimate


def assign_host(candidate: Candidate, views: Sequence[HostView]) -> Assignment | None:
    """The host this session's summary goes to, and why; None when no host is available.

    Raw wherever some host admits the raw prompt; degraded only when none does. Ties go to the
    host declared first."""
    if not views:
        return None
    plans = [(view, plan_session(candidate, view.limits, view.seconds_per_token)) for view in views]
    raw = [(view, planned) for view, planned in plans if planned.route == Route.WITHIN_CAP]
    pool = raw or plans
    view, planned = min(pool, key=lambda pair: _finish_s(*pair))
    if raw and len(raw) == len(plans):
        reason = f"raw; earliest finish of {len(plans)} host(s)" if len(plans) > 1 else "raw; the only host"
    elif raw:
        others = ", ".join(f"{v.spec.name} {p.route}" for v, p in plans if p.route != Route.WITHIN_CAP)
        reason = f"raw; {len(raw)} of {len(plans)} host(s) admit it raw ({others})"
    else:
        caps = [v.spec.raw_cap_tokens for v, _ in plans]
        widest = "off" if None in caps else max(caps)
        reason = f"degraded; no host admits it raw (widest raw cap {widest}); earliest finish of {len(plans)}"
    return Assignment(planned=planned, host=view.spec.name, reason=reason)


def assign_batch(
    candidates: Sequence[Candidate], views: Sequence[HostView], at_most: Mapping[str, int] | None = None
) -> list[Assignment]:
    """Each candidate's host, in order, each one's estimate added to its host's queue before the
    next. `at_most`: hosts that take at most that many (a half-open host: its one probe run)."""
    queued = {view.spec.name: view.queued_s for view in views}
    left = dict(at_most or {})
    out = []
    for candidate in candidates:
        current = [
            HostView(v.spec, v.limits, v.seconds_per_token, queued[v.spec.name])
            for v in views
            if left.get(v.spec.name, 1) > 0
        ]
        assignment = assign_host(candidate, current)
        if assignment is None:
            break
        queued[assignment.host] += assignment.planned.model_seconds_estimate
        if assignment.host in left:
            left[assignment.host] -= 1
        out.append(assignment)
    return out


def estimated_seconds(tag_value: str | None) -> float:
    """A run's `digest/estimated_s` tag as seconds (0 when absent or not a number)."""
    try:
        value = float(tag_value or 0)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) and value > 0 else 0.0
