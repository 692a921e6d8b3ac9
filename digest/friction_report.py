"""The friction report: what the store says an operator should tune, as Markdown and as an HTML file.

Pure: it takes rows already read from the store (plain dicts) and returns numbers and text, so the
surfacing rule, the calibration arithmetic and the rendering are tested without Dagster or DuckDB.

- Friction is grouped by (asset, consumer, symptom) as the original's aggregator keys it, with the
  original's surfacing rule (reference §3.3): deterministic symptoms surface on their first
  occurrence, probabilistic ones on the third within one hour.
- Calibration reads the server's own token counts in the attempt ledger: the bytes per token the
  router applies (the conservative quantile of `digest.tokens`, the same number), the prompt and
  answer rates (`digest.pacing`, the ones the deadlines use), and the raw cap that fits one raw call
  in `DIGEST_RAW_CALL_TARGET_S`: the cap `DIGEST_RAW_CAP_TOKENS=auto` puts in force.
- Pre-routes are read from the friction the router records when it keeps a raw prompt from the
  model, so one whose degraded call then failed (no summary row) still counts; against what they
  saved stand what the degraded path spent and what its given-up calls threw away.
"""

from __future__ import annotations

import html
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from digest.circuit import CircuitPolicy, CircuitState, HostCircuit
from digest.friction import DETERMINISTIC_SYMPTOMS
from digest.pacing import MIN_SAMPLES, RECENT_CALLS, HostSpeed, Sample, Slowdown, answer_room, computed_raw_cap
from digest.settings import ModelSettings
from digest.tokens import (
    CALIBRATION_MIN_PROMPT_BYTES,
    CALIBRATION_MIN_SAMPLES,
    CALIBRATION_QUANTILE,
    CALIBRATION_RECENT,
    conservative_bytes_per_token,
    is_calibration_sample,
)

PROBABILISTIC_SURFACE_COUNT = 3
SURFACING_WINDOW = timedelta(hours=1)
MARKDOWN_ROWS = 15  # the UI's metadata preview stays readable
HTML_ROWS = 200
SLOWEST_CALLS = 10
ERROR_CHARS = 160  # of the provider's error text, per friction group


def _utc(stamp: datetime) -> datetime:
    return stamp.astimezone(UTC)


def _when(stamp: datetime | None) -> str:
    return _utc(stamp).strftime("%Y-%m-%d %H:%MZ") if stamp else ""


# --- friction groups and the surfacing rule ----------------------------------------------------


def surfaced_at(symptom: str, occurred: list[datetime]) -> datetime | None:
    """When a group surfaced: a deterministic symptom at its first occurrence, a probabilistic one
    at its third occurrence inside one window; None if it never did."""
    stamps = sorted(occurred)
    if not stamps:
        return None
    if symptom in DETERMINISTIC_SYMPTOMS:
        return stamps[0]
    span = PROBABILISTIC_SURFACE_COUNT - 1
    for i in range(span, len(stamps)):
        if stamps[i] - stamps[i - span] <= SURFACING_WINDOW:
            return stamps[i]
    return None


@dataclass(frozen=True)
class FrictionGroup:
    asset_ref: str
    consumer: str
    symptom: str
    suggestion_kind: str
    count: int
    first_seen: datetime
    last_seen: datetime
    surfaced_at: datetime | None
    latest_note: str | None
    latest_error: str | None

    @property
    def surfaced(self) -> bool:
        return self.surfaced_at is not None


def group_friction(events: list[dict]) -> list[FrictionGroup]:
    """Events grouped by (asset_ref, consumer, symptom): surfaced groups first, latest first."""
    by_key: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for event in events:
        by_key[(event["asset_ref"], event["consumer"], event["symptom"])].append(event)
    groups = []
    for (asset_ref, consumer, symptom), rows in by_key.items():
        rows.sort(key=lambda r: r["occurred_at"])
        latest = rows[-1]
        groups.append(
            FrictionGroup(
                asset_ref=asset_ref,
                consumer=consumer,
                symptom=symptom,
                suggestion_kind=latest["suggestion_kind"],
                count=len(rows),
                first_seen=rows[0]["occurred_at"],
                last_seen=latest["occurred_at"],
                surfaced_at=surfaced_at(symptom, [r["occurred_at"] for r in rows]),
                latest_note=latest.get("note"),
                latest_error=latest.get("error_text"),
            )
        )
    groups.sort(key=lambda g: (not g.surfaced, -g.last_seen.timestamp(), g.asset_ref, g.symptom))
    return groups


@dataclass(frozen=True)
class SymptomRollup:
    symptom: str
    suggestion_kind: str
    events: int
    groups: int
    surfaced_groups: int
    last_seen: datetime


def rollup_by_symptom(groups: list[FrictionGroup]) -> list[SymptomRollup]:
    by_symptom: dict[str, list[FrictionGroup]] = defaultdict(list)
    for group in groups:
        by_symptom[group.symptom].append(group)
    rollups = [
        SymptomRollup(
            symptom=symptom,
            suggestion_kind=members[0].suggestion_kind,
            events=sum(g.count for g in members),
            groups=len(members),
            surfaced_groups=sum(g.surfaced for g in members),
            last_seen=max(g.last_seen for g in members),
        )
        for symptom, members in by_symptom.items()
    ]
    return sorted(rollups, key=lambda r: (-r.events, r.symptom))


# --- calibration --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelCalibration:
    model: str
    calls: int
    # What the router applies unpinned: the conservative quantile over the calibration samples
    # (`digest.tokens`); None under the minimum number, when the default 3.0 applies.
    bytes_per_token: float | None
    bytes_per_token_samples: int
    mean_bytes_per_token: float  # the expected count of a prompt never sent, to price it
    speed: HostSpeed  # the median rates of `digest.pacing`, the ones the deadlines and an auto cap use
    answer_tokens: int  # the answer a raw call leaves room for (`digest.pacing.answer_room`)
    raw_cap_tokens: int  # the largest raw prompt one call evaluates and answers in the raw-call target

    @property
    def prompt_tokens_per_s(self) -> float:
        return self.speed.prompt_tps

    @property
    def completion_tokens_per_s(self) -> float | None:
        """None when no streamed call separates the answer's rate from the prompt's."""
        return self.speed.answer_tps if self.speed.separable else None

    def raw_call_s(self, prompt_tokens: float) -> float:
        """What a raw call of this many real prompt tokens costs at the measured rates."""
        return self.speed.expected_s(prompt_tokens, self.answer_tokens)


def calibrate_model(
    model: str, attempts: list[dict], target_s: float, bound_tokens: int, max_output_tokens: int
) -> ModelCalibration | None:
    """The calibration of one model from its recent calls that carry the server's counts: the same
    rates and the same cap arithmetic an auto raw cap uses (`digest.pacing`), so the cap it prints
    is the one `DIGEST_RAW_CAP_TOKENS=auto` would put in force."""
    newest_first = sorted((a for a in attempts if a["model"] == model), key=lambda a: a["created_at"], reverse=True)
    measured = [a for a in newest_first if a.get("prompt_tokens") and a["duration_s"] > 0]
    samples = [
        Sample(a["prompt_tokens"], a.get("completion_tokens") or 0, a["duration_s"], a.get("first_token_s"))
        for a in measured[:RECENT_CALLS]
    ]
    speed = HostSpeed.from_samples(samples)
    if speed is None:
        return None
    summary_answers = [
        a.get("completion_tokens") or 0 for a in measured if a["stage"] == "session-summary" and a["outcome"] == "ok"
    ][:RECENT_CALLS]
    answer_tokens = answer_room(summary_answers, max_output_tokens // 2)
    bytes_samples = [
        (a["prompt_bytes"], a["prompt_tokens"])
        for a in newest_first
        if is_calibration_sample(a["outcome"], a.get("cached", False), a["prompt_bytes"], a.get("prompt_tokens"))
    ][:CALIBRATION_RECENT]
    applied = conservative_bytes_per_token(bytes_samples)
    return ModelCalibration(
        model=model,
        calls=len(measured),
        bytes_per_token=applied[0] if applied else None,
        bytes_per_token_samples=len(bytes_samples),
        mean_bytes_per_token=sum(a["prompt_bytes"] for a in measured) / sum(a["prompt_tokens"] for a in measured),
        speed=speed,
        answer_tokens=answer_tokens,
        raw_cap_tokens=computed_raw_cap(speed, target_s, answer_tokens, bound_tokens),
    )


def calibrate(attempts: list[dict], settings: ModelSettings) -> dict[str, ModelCalibration | None]:
    """Every model in the ledger, with its calibration or None when it has too few measured calls."""
    bound = min(settings.safe_limit_tokens, settings.context_limit_tokens - settings.summary_max_output_tokens)
    return {
        model: calibrate_model(model, attempts, settings.raw_call_target_s, bound, settings.summary_max_output_tokens)
        for model in sorted({a["model"] for a in attempts})
    }


def adopt_lines(calibration: ModelCalibration) -> str:
    """The setting that adopts a calibration: the cap, in real tokens. The bytes per token needs
    none: unpinned, the router applies the ledger's by itself, the number the report shows."""
    return f"DIGEST_RAW_CAP_TOKENS={calibration.raw_cap_tokens}"


def bytes_per_token_words(calibration: ModelCalibration) -> str:
    if calibration.bytes_per_token is None:
        return f"3.0 default ({calibration.bytes_per_token_samples} of {CALIBRATION_MIN_SAMPLES} calls)"
    return f"{calibration.bytes_per_token:.2f} (p{round(CALIBRATION_QUANTILE * 100)} of {calibration.bytes_per_token_samples})"


# --- the other figures --------------------------------------------------------------------------


def is_timeout(attempt: dict) -> bool:
    """Summary calls say `timeout`; mini-summary calls say which deadline: `timeout-inner` or `-outer`."""
    return attempt["outcome"].startswith("timeout")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile with linear interpolation (numpy's default); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class PreRoutes:
    """Raw summary prompts routed to the degraded summary before any model call, and what the
    degraded path cost against what it saved."""

    count: int
    by_reason: dict[str, int]
    tokens_avoided: int  # the raw estimates never sent
    model_seconds_avoided: float  # what those raw calls would have cost, each at most the call ceiling
    unpriced: int  # pre-routes whose model has no calibration yet, left out of the seconds
    degraded_seconds: float = 0.0  # the pre-routed sessions' mini-summary and compact calls that finished
    degraded_calls: int = 0
    discarded_seconds: float = 0.0  # the pre-routed sessions' calls given up: model time thrown away

    @property
    def net_seconds(self) -> float:
        """Saved less spent less thrown away: negative when the degraded path cost more than it saved."""
        return self.model_seconds_avoided - self.degraded_seconds - self.discarded_seconds


def is_pre_route(event: dict) -> bool:
    """`bound` is set on the router keeping a raw summary prompt from the model, on no other
    friction (a compact prompt over budget included): `over-raw-cap` or `over-safe-band`."""
    return bool(event.get("bound"))


def pre_route_seconds(event: dict, calibrations: dict[str, ModelCalibration | None], ceiling_s: float) -> float | None:
    """What the raw call a pre-route kept from the model would have cost; None: its model is uncalibrated."""
    calibration = calibrations.get(event["model"])
    if calibration is None:
        return None
    # The prompt's bytes at the measured bytes per token: the tokens the server would have counted.
    real_tokens = event["input_bytes"] / calibration.mean_bytes_per_token
    # A raw call that ran longer than the ceiling would have been cut off there.
    return min(calibration.raw_call_s(real_tokens), ceiling_s)


def pre_routes(
    events: list[dict], attempts: list[dict], calibrations: dict[str, ModelCalibration | None], ceiling_s: float
) -> PreRoutes:
    routed = [e for e in events if is_pre_route(e)]
    priced = [pre_route_seconds(e, calibrations, ceiling_s) for e in routed]
    sessions = {e["asset_ref"] for e in routed}
    degraded = [
        a for a in attempts
        if a["session_id"] in sessions and (a["stage"] == "mini-summary" or (a["stage"] == "session-summary" and a["tier"] != "raw"))
    ]  # fmt: skip
    return PreRoutes(
        count=len(routed),
        by_reason=dict(Counter(e["bound"] for e in routed)),
        tokens_avoided=sum(e["input_tokens_estimate"] for e in routed),
        model_seconds_avoided=sum(seconds for seconds in priced if seconds is not None),
        unpriced=sum(seconds is None for seconds in priced),
        degraded_seconds=sum(a["duration_s"] for a in degraded if not is_timeout(a)),
        degraded_calls=sum(not is_timeout(a) for a in degraded),
        discarded_seconds=sum(a["duration_s"] for a in degraded if is_timeout(a)),
    )


@dataclass(frozen=True)
class Bucket:
    start: datetime
    friction_events: int
    spent_seconds: float  # model time of the calls that finished, well or not
    discarded_seconds: float  # model time of the calls given up: thrown away
    saved_seconds: float = 0.0  # what the raw calls pre-routed then would have cost

    @property
    def model_seconds(self) -> float:
        return self.spent_seconds + self.discarded_seconds


def bucket_width(span: timedelta) -> timedelta:
    """Hours for two days of activity, days for two months, weeks beyond: a chart of tens of bars."""
    if span <= timedelta(days=2):
        return timedelta(hours=1)
    if span <= timedelta(days=60):
        return timedelta(days=1)
    return timedelta(weeks=1)


def _bucket_start(stamp: datetime, width: timedelta) -> datetime:
    stamp = _utc(stamp).replace(minute=0, second=0, microsecond=0)
    if width >= timedelta(days=1):
        stamp = stamp.replace(hour=0)
    if width >= timedelta(weeks=1):
        stamp -= timedelta(days=stamp.weekday())
    return stamp


def activity_series(
    events: list[dict],
    attempts: list[dict],
    calibrations: dict[str, ModelCalibration | None] | None = None,
    ceiling_s: float = 0.0,
) -> list[Bucket]:
    """Friction events, and model seconds spent, thrown away and saved, per time bucket, empty
    buckets included."""
    stamps = [e["occurred_at"] for e in events] + [a["created_at"] for a in attempts]
    if not stamps:
        return []
    width = bucket_width(max(stamps) - min(stamps))
    first, last = _bucket_start(min(stamps), width), _bucket_start(max(stamps), width)
    friction: Counter = Counter(_bucket_start(e["occurred_at"], width) for e in events)
    spent: defaultdict = defaultdict(float)
    discarded: defaultdict = defaultdict(float)
    saved: defaultdict = defaultdict(float)
    for attempt in attempts:
        (discarded if is_timeout(attempt) else spent)[_bucket_start(attempt["created_at"], width)] += attempt[
            "duration_s"
        ]
    for event in events:
        if is_pre_route(event):
            saved[_bucket_start(event["occurred_at"], width)] += (
                pre_route_seconds(event, calibrations or {}, ceiling_s) or 0.0
            )
    buckets, start = [], first
    while start <= last:
        buckets.append(Bucket(start, friction[start], spent[start], discarded[start], saved[start]))
        start += width
    return buckets


# --- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrictionReport:
    generated_at: datetime
    settings: ModelSettings
    circuit: CircuitPolicy
    groups: list[FrictionGroup]
    symptoms: list[SymptomRollup]
    calibrations: dict[str, ModelCalibration | None]
    current_model: str | None  # the model of the latest call: the one to calibrate the cap for
    pre_routes: PreRoutes
    timeouts: list[dict]  # newest first
    truncations: list[dict]  # newest first
    slowest: list[dict]
    summaries: int
    degraded: int
    tiers: dict[str, int]
    route_reasons: dict[str, int]
    mini_coverage: dict | None  # {"turns", "imported", "generated"}; None: no mini summaries yet
    undigestible: list[dict]  # {"session_id", "reason", "attempts", "updated_at"}
    host_circuits: list[HostCircuit]  # hosts that have failed since they last succeeded, or did once
    series: list[Bucket]
    slowdowns: dict[str, Slowdown]  # by host: its recent calls against its earlier ones
    auto_caps: dict[str, dict]  # by host: the auto raw cap in force (`host_raw_caps` rows)
    call_seconds: list[float] = field(repr=False)
    summary_rows: list[dict] = field(default_factory=list, repr=False)  # tier, route, origin, host, fidelity

    @property
    def degraded_share(self) -> float:
        return self.degraded / self.summaries if self.summaries else 0.0

    @property
    def p95_call_seconds(self) -> float:
        return percentile(self.call_seconds, 95)

    def host_state(self, circuit: HostCircuit) -> CircuitState:
        return circuit.state(int(self.generated_at.timestamp() * 1000))

    def numbers(self) -> dict[str, int | float]:
        """The numeric metadata the Dagster UI plots across materializations."""
        return {
            "degraded_share": round(self.degraded_share, 4),
            "pre_routes": self.pre_routes.count,
            "timeouts": len(self.timeouts),
            "p95_call_seconds": round(self.p95_call_seconds, 3),
            "tokens_avoided": self.pre_routes.tokens_avoided,
            "model_seconds_avoided": round(self.pre_routes.model_seconds_avoided, 1),
            "summaries": self.summaries,
            "friction_events": sum(g.count for g in self.groups),
            "surfaced_groups": sum(g.surfaced for g in self.groups),
            "suspected_truncations": len(self.truncations),
            "model_calls": len(self.call_seconds),
            "hosts_out_of_rotation": sum(self.host_state(c) == CircuitState.OPEN for c in self.host_circuits),
            "slow_hosts": sum(d.slow for d in self.slowdowns.values()),
            "model_seconds_discarded": round(sum(a["duration_s"] for a in self.timeouts), 1),
            "degraded_path_seconds": round(self.pre_routes.degraded_seconds, 1),
            "pre_route_net_seconds": round(self.pre_routes.net_seconds, 1),
        }


def build_report(
    events: list[dict],
    attempts: list[dict],
    summaries: list[dict],
    settings: ModelSettings,
    circuit: CircuitPolicy,
    mini_coverage: dict | None = None,
    undigestible: list[dict] = (),
    host_circuits: list[HostCircuit] = (),
    slowdowns: dict[str, Slowdown] | None = None,
    auto_caps: dict[str, dict] | None = None,
) -> FrictionReport:
    groups = group_friction(events)
    calibrations = calibrate(attempts, settings)
    newest_first = sorted(attempts, key=lambda a: a["created_at"], reverse=True)
    return FrictionReport(
        generated_at=datetime.now(UTC),
        settings=settings,
        circuit=circuit,
        groups=groups,
        symptoms=rollup_by_symptom(groups),
        calibrations=calibrations,
        current_model=newest_first[0]["model"] if newest_first else None,
        pre_routes=pre_routes(events, attempts, calibrations, settings.call_ceiling_s),
        timeouts=[a for a in newest_first if is_timeout(a)],
        truncations=[a for a in newest_first if a["suspected_truncation"]],
        slowest=sorted(attempts, key=lambda a: a["duration_s"], reverse=True)[:SLOWEST_CALLS],
        summaries=len(summaries),
        degraded=sum(1 for s in summaries if s["degraded"]),
        tiers=dict(sorted(Counter(s["source_tier"] for s in summaries).items())),
        route_reasons=dict(sorted(Counter(s["route_reason"] for s in summaries).items())),
        mini_coverage=mini_coverage
        if mini_coverage and mini_coverage["imported"] + mini_coverage["generated"]
        else None,
        undigestible=list(undigestible),
        host_circuits=list(host_circuits),
        series=activity_series(events, attempts, calibrations, settings.call_ceiling_s),
        slowdowns=dict(slowdowns or {}),
        auto_caps=dict(auto_caps or {}),
        call_seconds=[a["duration_s"] for a in attempts],
        summary_rows=list(summaries),
    )


# --- rendering: one list of sections, two renderers --------------------------------------------


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    table: Table | None = None
    after_table: str | None = None  # e.g. how many rows were left out
    code: str | None = None  # settings to copy, shown verbatim


def _limited(rows: list[list[str]], limit: int) -> tuple[list[list[str]], str | None]:
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], f"… and {len(rows) - limit} more rows (the report file lists up to {HTML_ROWS})."


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value >= 10 else f"{value:.2f} s"


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "n/a"


def _cap(value: int | None) -> str:
    return "off" if value is None else str(value)


def _attempt_tokens(attempt: dict) -> str:
    counted = attempt.get("prompt_tokens")
    estimate = f"est. {attempt['tokens_estimate']}"
    return f"{counted} ({estimate})" if counted is not None else estimate


def _clipped(error: str | None) -> str:
    error = " ".join((error or "").split())
    return f"{error[:ERROR_CHARS]}{'…' if len(error) > ERROR_CHARS else ''}"


def _latest_words(group: FrictionGroup) -> str:
    """The latest note, and the provider's own error text when there is one (the original lost it)."""
    note = group.latest_note or ""
    if group.latest_error:
        note += f"; {_clipped(group.latest_error)}"
    return note


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def fidelity_rows(summaries: list[dict]) -> list[list[str]]:
    """Mean fidelity (docs/fidelity.md) by source tier, route and origin."""
    groups: dict[tuple, list[float]] = {}
    for s in summaries:
        if s.get("fidelity") is not None:
            key = (s["source_tier"], s["route_reason"], s.get("origin") or "generated")
            groups.setdefault(key, []).append(s["fidelity"])
    return [[*key, str(len(v)), f"{_mean(v):.2f}"] for key, v in sorted(groups.items())]


def degraded_against_raw(summaries: list[dict]) -> list[list[str]]:
    """Per model host, the generated degraded summaries' mean fidelity against the raw ones': the
    price of the cap in quality, beside its saving in seconds (the pre-routes above)."""
    hosts: dict[str, dict[bool, list[float]]] = {}
    for s in summaries:
        if s.get("fidelity") is not None and s.get("origin", "generated") == "generated":
            hosts.setdefault(s.get("host") or "—", {True: [], False: []})[bool(s["degraded"])].append(s["fidelity"])
    rows = []
    for host, by in sorted(hosts.items()):
        raw, degraded = _mean(by[False]), _mean(by[True])
        gap = f"{degraded - raw:+.2f}" if raw is not None and degraded is not None else "—"
        rows.append([host, f"{len(by[False])}", f"{raw:.2f}" if raw is not None else "—", f"{len(by[True])}",
                     f"{degraded:.2f}" if degraded is not None else "—", gap])  # fmt: skip
    return rows


def _table_section(
    title: str, headers: list[str], rows: list[list[str]], limit: int, lead: list[str], empty: str
) -> Section:
    if not rows:
        return Section(title, lead + [empty])
    shown, more = _limited(rows, limit)
    return Section(title, lead, Table(headers, shown), after_table=more)


def sections(report: FrictionReport, max_rows: int) -> list[Section]:
    s = report.settings
    friction_events = sum(g.count for g in report.groups)
    overview = Section(
        "Overview",
        [
            f"Generated {_when(report.generated_at)}. {_count(report.summaries, 'summary', 'summaries')}, "
            f"{report.degraded} degraded ({report.degraded_share:.0%}); {_count(friction_events, 'friction event')} "
            f"in {_count(len(report.groups), 'group')}, {sum(g.surfaced for g in report.groups)} surfaced; "
            f"{_count(len(report.call_seconds), 'model call')}, p95 {_seconds(report.p95_call_seconds)}.",
            f"Settings in force: raw cap {_cap(s.raw_cap_tokens)} tokens, safe band {s.safe_limit_tokens} tokens "
            f"(context {s.context_limit_tokens}), "
            f"{f'{s.bytes_per_token:g} bytes per token (pinned)' if s.bytes_per_token else 'bytes per token measured per host'}, summary timeout "
            f"{s.summary_timeout_s:g} s.",
        ],
    )
    rule = {True: "at once", False: f"at {PROBABILISTIC_SURFACE_COUNT} within 1 h"}
    by_symptom = _table_section(
        "Friction by symptom",
        ["symptom", "suggestion", "surfaces", "events", "groups", "surfaced", "last seen"],
        [
            [r.symptom, r.suggestion_kind, rule[r.symptom in DETERMINISTIC_SYMPTOMS], str(r.events), str(r.groups),
             str(r.surfaced_groups), _when(r.last_seen)]
            for r in report.symptoms
        ],
        max_rows,
        [],
        "No friction recorded yet.",
    )  # fmt: skip
    groups = _table_section(
        "Friction groups",
        ["asset", "consumer", "symptom", "count", "first seen", "last seen", "suggestion", "surfaced", "latest note; error"],
        [
            [g.asset_ref, g.consumer, g.symptom, str(g.count), _when(g.first_seen), _when(g.last_seen),
             g.suggestion_kind, _when(g.surfaced_at) if g.surfaced else "not yet", _latest_words(g)]
            for g in report.groups
        ],
        max_rows,
        ["Grouped by (asset, consumer, symptom). Deterministic symptoms (size-precheck-skip, context-overflow) "
         "surface on their first occurrence, probabilistic ones on the third within one hour."],
        "None yet.",
    )  # fmt: skip
    routes = report.pre_routes
    reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(routes.by_reason.items())) or "none"
    pre_route = Section(
        "Pre-routes",
        [
            f"{_count(routes.count, 'raw summary prompt')} routed to the degraded summary before any model call "
            f"({reasons}); {routes.tokens_avoided} prompt tokens (estimated) never reached the model, about "
            f"{_seconds(routes.model_seconds_avoided)} of model time at the measured rates "
            f"(each capped at the {s.call_ceiling_s:g} s call ceiling)"
            + (f"; {routes.unpriced} with an uncalibrated model are not priced." if routes.unpriced else "."),
            f"Against that, the degraded path of those sessions spent {_seconds(routes.degraded_seconds)} in "
            f"{_count(routes.degraded_calls, 'call')} (their mini summaries and compact summaries), and their "
            f"given-up calls threw away {_seconds(routes.discarded_seconds)}: net "
            f"{'saved' if routes.net_seconds >= 0 else 'lost'} {_seconds(abs(routes.net_seconds))}."
            + (
                " On this host the degraded path cost more model time than the cap saved."
                if routes.net_seconds < 0
                else ""
            ),
        ],
    )
    lost = sum(a["duration_s"] for a in report.timeouts)
    timeouts_lead = (
        f"{_count(len(report.timeouts), 'call')} given up (stalled, or cut at a deadline or the ceiling), "
        f"{_seconds(lost)} of model time thrown away."
    )
    timeouts = _table_section(
        "Timeouts",
        ["when", "session", "stage", "tier", "model", "prompt tokens", "seconds"],
        [[_when(a["created_at"]), a["session_id"], a["stage"], a["tier"], a["model"], _attempt_tokens(a),
          _seconds(a["duration_s"])]
         for a in report.timeouts],
        max_rows,
        [timeouts_lead] if report.timeouts else [],
        "None.",
    )  # fmt: skip
    truncations = _table_section(
        "Suspected silent truncation",
        ["when", "session", "model", "estimate", "server counted", "ratio"],
        [[_when(a["created_at"]), a["session_id"], a["model"], str(a["tokens_estimate"]), str(a["prompt_tokens"]),
          f"{a['prompt_tokens'] / a['tokens_estimate']:.0%}" if a["tokens_estimate"] else ""]
         for a in report.truncations],
        max_rows,
        ["Calls whose server counted under 40% of the estimated prompt tokens: the server most likely cut the prompt."],
        "None.",
    )  # fmt: skip
    undigestible = _table_section(
        "Undigestible sessions",
        ["session", "defer reason", "attempts", "since"],
        [[u["session_id"], u["reason"] or "", str(u["attempts"]), _when(u["updated_at"])] for u in report.undigestible],
        max_rows,
        ["Out of the graph cadence at their current turns, until an operator runs session-digest reset-digest."],
        "None.",
    )
    hosts = _table_section(
        "Model hosts",
        ["host", "circuit", "failures in a row", "opens", "retry at", "last error"],
        [[c.host, report.host_state(c), str(c.failures), str(c.opens),
          _when(datetime.fromtimestamp(c.retry_at_ms / 1000, UTC)) if c.retry_at_ms is not None else "",
          _clipped(c.last_error)]
         for c in report.host_circuits],
        max_rows,
        [f"A host's circuit opens after {report.circuit.failure_threshold} host failures in a row (timeouts, unreachable, "
         "5xx, a broken wire protocol): it is out of rotation until the retry time, then one probe run may go to it; "
         "its success closes the circuit. Opens count since the host last succeeded."],
        "No host has failed.",
    )  # fmt: skip
    speeds = _table_section(
        "Host speed",
        ["host", "now prompt tok/s", "now answer tok/s", "before prompt tok/s", "before answer tok/s", "slower by", "state"],
        [[host, f"{d.now.prompt_tps:.1f}", f"{d.now.answer_tps:.1f}", f"{d.before.prompt_tps:.1f}",
          f"{d.before.answer_tps:.1f}", f"{d.factor:.2f}x", "slow" if d.slow else "as before"]
         for host, d in sorted(report.slowdowns.items())],
        max_rows,
        ["Each host's last 10 calls against its earlier ones (medians). A slow host is not a failing one: its "
         "calls are paced by its measured speed and stay in rotation; only stalls, refusals, 5xx and broken "
         "replies count on its circuit."],
        "Not enough calls yet to compare.",
    )  # fmt: skip
    tiers = ", ".join(f"{n} {tier}" for tier, n in report.tiers.items()) or "no summaries yet"
    reasons_made = ", ".join(f"{n} {reason}" for reason, n in report.route_reasons.items()) or "none"
    degraded = Section(
        "Degraded share",
        [f"{_share(report.degraded, report.summaries)} of {report.summaries} summaries are degraded. "
         f"Source tiers: {tiers}. Routes: {reasons_made}."],
    )  # fmt: skip
    fidelity = _table_section(
        "Fidelity",
        ["source tier", "route", "origin", "summaries", "mean fidelity"],
        fidelity_rows(report.summary_rows),
        max_rows,
        ["The share of each session's salient identifiers its summary names (docs/fidelity.md): it rewards naming "
         "things, not understanding them."],
        "No summary is scored yet.",
    )  # fmt: skip
    by_host = degraded_against_raw(report.summary_rows)
    if by_host:
        fidelity = Section(
            fidelity.title,
            fidelity.paragraphs,
            fidelity.table,
            after_table="Degraded against raw on the same host (generated): "
            + "; ".join(f"{h}: raw {r} ({nr}), degraded {d} ({nd}), {g}" for h, nr, r, nd, d, g in by_host),
        )
    coverage = report.mini_coverage
    if coverage is None:
        mini = Section("Mini-summary coverage", ["None yet: no turn has a mini summary."])
    else:
        with_mini = coverage["imported"] + coverage["generated"]
        mini = Section(
            "Mini-summary coverage",
            [f"{with_mini} of {coverage['turns']} turns have a mini summary ({_share(with_mini, coverage['turns'])}): "
             f"{coverage['imported']} imported, {coverage['generated']} generated."],
        )  # fmt: skip
    slowest = _table_section(
        "Slowest calls",
        ["when", "session", "stage", "tier", "model", "prompt tokens", "seconds", "outcome"],
        [[_when(a["created_at"]), a["session_id"], a["stage"], a["tier"], a["model"], _attempt_tokens(a),
          _seconds(a["duration_s"]), a["outcome"]]
         for a in report.slowest],
        max_rows,
        [],
        "No model calls yet.",
    )  # fmt: skip
    return [overview, by_symptom, groups, hosts, speeds, pre_route, timeouts, truncations, undigestible, degraded, fidelity,
            mini, slowest, calibration_section(report, max_rows)]  # fmt: skip


def calibration_section(report: FrictionReport, max_rows: int) -> Section:
    s = report.settings
    headers = ["model", "calls", "bytes/token", "prompt tok/s", "answer tok/s", "answer tokens", "cap for the target"]
    rows = []
    for model, c in report.calibrations.items():
        if c is None:
            rows.append([model, "", "", "", "", "", f"fewer than {MIN_SAMPLES} measured calls"])
            continue
        per_s = c.completion_tokens_per_s
        rows.append(
            [model, str(c.calls), bytes_per_token_words(c), f"{c.prompt_tokens_per_s:.1f}",
             f"{per_s:.1f}" if per_s else "not separable (no streamed call)", str(c.answer_tokens),
             str(c.raw_cap_tokens)]
        )  # fmt: skip
    lead = [
        "From the server's own token counts in the attempt ledger (every call the server finished). Bytes per token: "
        f"the {CALIBRATION_QUANTILE:.0%} quantile of prompt bytes / prompt tokens over the last {CALIBRATION_RECENT} "
        f"good calls of at least {CALIBRATION_MIN_PROMPT_BYTES} bytes (few bytes a token: the estimate errs toward "
        f"more tokens), what the router applies unless DIGEST_BYTES_PER_TOKEN pins a value; under "
        f"{CALIBRATION_MIN_SAMPLES} such calls, the default 3.0. "
        f"Rates: the medians over the last {RECENT_CALLS} calls, prompt tokens over the time to the first streamed "
        "piece and answer tokens over the rest (docs/pacing.md). "
        f"The cap is the largest raw prompt that, with the answer room (the 90th percentile of the summary answers), "
        f"fits one raw call in {s.raw_call_target_s:g} s (DIGEST_RAW_CALL_TARGET_S): the cap "
        "DIGEST_RAW_CAP_TOKENS=auto puts in force."
    ]
    for host, cap in sorted(report.auto_caps.items()):
        lead.append(
            f"Host {host} ({cap['model']}): auto raw cap in force {cap['cap_tokens']} tokens (last computed "
            f"{cap['computed_tokens']}; it moves past a 25% change), from {cap['prompt_tps']:.1f} prompt and "
            f"{cap['answer_tps']:.1f} answer tokens a second."
        )
    current = report.calibrations.get(report.current_model) if report.current_model else None
    if current is None:
        return _table_section("Calibration", headers, rows, max_rows, lead + ["No calibration to adopt yet."],
                              "No model calls yet.")  # fmt: skip
    advice = (
        f"To pin it for {current.model} (the model of the latest call), set the cap, in real tokens; or let it "
        "follow the host with DIGEST_RAW_CAP_TOKENS=auto."
    )
    if current.raw_cap_tokens >= s.safe_limit_tokens:
        advice += f" The safe band ({s.safe_limit_tokens}) binds first on this host, so DIGEST_RAW_CAP_TOKENS=off does as well."
    section = _table_section("Calibration", headers, rows, max_rows, lead + [advice], "")
    return replace(section, code=adopt_lines(current))


def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render_markdown(report: FrictionReport, max_rows: int = MARKDOWN_ROWS) -> str:
    out = ["## Friction report"]
    for section in sections(report, max_rows):
        out.append(f"\n### {section.title}\n")
        out.extend(f"{p}\n" for p in section.paragraphs)
        if section.table:
            out.append("| " + " | ".join(section.table.headers) + " |")
            out.append("|" + "---|" * len(section.table.headers))
            out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in section.table.rows)
        if section.after_table:
            out.append(f"\n{section.after_table}")
        if section.code:
            out.append(f"\n```sh\n{section.code}\n```")
    return "\n".join(out) + "\n"


CHART_WIDTH, CHART_HEIGHT, CHART_PAD = 760, 240, 44


# The model-seconds lines of the chart: (Bucket field, CSS class, colour, legend).
SECONDS_LINES = (
    ("spent_seconds", "spent", "#2b6cb0", "spent"),
    ("discarded_seconds", "discarded", "#c53030", "thrown away"),
    ("saved_seconds", "saved", "#2f855a", "saved by pre-routes"),
)


def render_chart(series: list[Bucket]) -> str:
    """An inline SVG: friction events per bucket as bars (left axis), and model seconds spent,
    thrown away by given-up calls, and saved by pre-routes as three lines (right axis)."""
    if not series:
        return '<p class="empty">No friction events or model calls yet.</p>'
    width, height, pad = CHART_WIDTH, CHART_HEIGHT, CHART_PAD
    plot_w, plot_h = width - 2 * pad, height - 2 * pad
    max_events = max(b.friction_events for b in series) or 1
    max_seconds = max(getattr(b, name) for b in series for name, *_ in SECONDS_LINES) or 1.0
    step = plot_w / len(series)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="Friction events, and model seconds spent, thrown away and saved, over time">',
        f'<line x1="{pad}" y1="{pad + plot_h}" x2="{pad + plot_w}" y2="{pad + plot_h}" stroke="#888"/>',
    ]
    for i, bucket in enumerate(series):
        bar_h = plot_h * bucket.friction_events / max_events
        x = pad + i * step + step * 0.15
        parts.append(
            f'<rect class="friction" x="{x:.1f}" y="{pad + plot_h - bar_h:.1f}" width="{step * 0.7:.1f}" '
            f'height="{bar_h:.1f}" fill="#d9822b"><title>{_when(bucket.start)}: {bucket.friction_events} friction '
            f"events; model seconds {bucket.spent_seconds:.1f} spent, {bucket.discarded_seconds:.1f} thrown away, "
            f"{bucket.saved_seconds:.1f} saved</title></rect>"
        )
    legend_x = pad + 140
    for name, css, colour, label in SECONDS_LINES:
        points = " ".join(
            f"{pad + (i + 0.5) * step:.1f},{pad + plot_h - plot_h * getattr(b, name) / max_seconds:.1f}"
            for i, b in enumerate(series)
        )
        parts += [
            f'<polyline class="{css}" points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>',
            f'<text x="{legend_x}" y="{pad / 2}" font-size="12" fill="{colour}">— {label}</text>',
        ]
        legend_x += 60 + 7 * len(label)
    parts += [
        f'<text x="{pad - 6}" y="{pad + 4}" text-anchor="end" font-size="11" fill="#d9822b">{max_events}</text>',
        f'<text x="{pad - 6}" y="{pad + plot_h}" text-anchor="end" font-size="11" fill="#d9822b">0</text>',
        f'<text x="{pad + plot_w + 6}" y="{pad + 4}" font-size="11" fill="#2b6cb0">{max_seconds:.0f} s</text>',
        f'<text x="{pad}" y="{height - pad / 2 + 6}" font-size="11">{_when(series[0].start)}</text>',
        f'<text x="{pad + plot_w}" y="{height - pad / 2 + 6}" text-anchor="end" font-size="11">'
        f"{_when(series[-1].start)}</text>",
        f'<text x="{pad}" y="{pad / 2}" font-size="12" fill="#d9822b">■ friction events</text>',
        "</svg>",
    ]
    return "\n".join(parts)


HTML_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
p { max-width: 72rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
td { white-space: nowrap; }
td:last-child { white-space: normal; min-width: 24rem; }
th { background: #f3f3f3; }
pre { background: #f6f6f6; padding: 0.75rem; }
.empty { color: #666; }
"""


def render_html(report: FrictionReport, max_rows: int = HTML_ROWS) -> str:
    esc = html.escape
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8"><title>Friction report</title>',
        f"<style>{HTML_STYLE}</style></head><body>",
        "<h1>Friction report</h1>",
        "<h2>Friction, and model time spent, thrown away and saved</h2>",
        render_chart(report.series),
    ]
    for section in sections(report, max_rows):
        out.append(f"<h2>{esc(section.title)}</h2>")
        out.extend(f"<p>{esc(p)}</p>" for p in section.paragraphs)
        if section.table:
            out.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in section.table.headers) + "</tr>")
            out.extend("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in section.table.rows)
            out.append("</table>")
        if section.after_table:
            out.append(f"<p>{esc(section.after_table)}</p>")
        if section.code:
            out.append(f"<pre>{esc(section.code)}</pre>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
