"""The friction report's figures: what the store says an operator should tune, computed from its rows.

Pure: it takes rows already read from the store (plain dicts) and returns numbers, so the surfacing
rule and the calibration arithmetic are tested without Dagster or DuckDB (`render` words them).

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

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from digest.attempts import INTERRUPTED, MINI_SUMMARY_STAGE, SUMMARY_STAGE
from digest.backlog import Backlog
from digest.circuit import CircuitPolicy, CircuitState, HostCircuit
from digest.friction import DETERMINISTIC_SYMPTOMS
from digest.pacing import RECENT_CALLS, HostSpeed, Sample, Slowdown, answer_room, computed_raw_cap
from digest.resummary import BeforeAfter, before_after
from digest.settings_fleet import ModelSettings
from digest.tokens import (
    CALIBRATION_MIN_SAMPLES,
    CALIBRATION_QUANTILE,
    CALIBRATION_RECENT,
    conservative_bytes_per_token,
    is_calibration_sample,
    plausible_prompt_tokens,
)

PROBABILISTIC_SURFACE_COUNT = 3
SURFACING_WINDOW = timedelta(hours=1)
SLOWEST_CALLS = 10


def _utc(stamp: datetime) -> datetime:
    return stamp.astimezone(UTC)


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


def counted_plausibly(attempt: dict) -> bool:
    """The server counted the call's prompt, and believably for its bytes (`digest.tokens`)."""
    return bool(attempt.get("prompt_tokens")) and plausible_prompt_tokens(
        attempt["prompt_bytes"], attempt["prompt_tokens"]
    )


def calibrate_model(
    model: str, attempts: list[dict], target_s: float, bound_tokens: int, max_output_tokens: int
) -> ModelCalibration | None:
    """The calibration of one model from its recent calls that carry the server's counts: the same
    rates and the same cap arithmetic an auto raw cap uses (`digest.pacing`), so the cap it prints
    is the one `DIGEST_RAW_CAP_TOKENS=auto` would put in force."""
    newest_first = sorted((a for a in attempts if a["model"] == model), key=lambda a: a["created_at"], reverse=True)
    measured = [a for a in newest_first if counted_plausibly(a) and a["duration_s"] > 0]
    samples = [
        Sample(a["prompt_tokens"], a.get("completion_tokens") or 0, a["duration_s"], a.get("first_token_s"))
        for a in measured[:RECENT_CALLS]
    ]
    speed = HostSpeed.from_samples(samples)
    if speed is None:
        return None
    summary_answers = [
        a.get("completion_tokens") or 0 for a in measured if a["stage"] == SUMMARY_STAGE and a["outcome"] == "ok"
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


def is_thrown_away(attempt: dict) -> bool:
    """A call whose model time bought nothing: given up, or its run killed or stopped during it."""
    return is_timeout(attempt) or attempt["outcome"] == INTERRUPTED


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
        if a["session_id"] in sessions and (a["stage"] == MINI_SUMMARY_STAGE or (a["stage"] == SUMMARY_STAGE and a["tier"] != "raw"))
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
        (discarded if is_thrown_away(attempt) else spent)[_bucket_start(attempt["created_at"], width)] += attempt[
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


# --- time to first summary ---------------------------------------------------------------------


@dataclass(frozen=True)
class CurvePoint:
    """The share of sessions with a summary (any tier) once this much model time was spent."""

    model_seconds: float  # cumulative duration_s of every model call up to this point
    summarized: int  # sessions with a summary by then
    share: float  # summarized / the sessions counted


def first_summary_curve(attempts: list[dict], summaries: list[dict], sessions: int | None = None) -> list[CurvePoint]:
    """The share of sessions with a summary against cumulative model-seconds, a point per session
    that gets its first summary (its first `session-summary` attempt with outcome `ok`).

    `attempts` are ledger rows (`session_id`, `stage`, `outcome`, `duration_s`, `created_at`; a call's
    row is written when it ends, so its own seconds count before its summary), in any order; every
    call counts, mini summaries and failures included. `summaries` are `session_summaries` rows: a
    session with one but no such attempt (an export's imported summary, a replay from the response
    cache) had it at no model time, the curve's first point. `sessions` is how many sessions there
    are (the store's count); None: those the rows name. Pure, so the benchmark reuses it."""
    ordered = sorted(attempts, key=lambda a: a["created_at"])
    first_at: dict[str, float] = {}
    spent = 0.0
    for attempt in ordered:
        spent += attempt["duration_s"]
        if attempt["stage"] == SUMMARY_STAGE and attempt["outcome"] == "ok":
            first_at.setdefault(attempt["session_id"], spent)
    for row in summaries:
        first_at.setdefault(row["session_id"], 0.0)
    named = len(first_at.keys() | {a["session_id"] for a in attempts})
    total = max(sessions if sessions is not None else named, len(first_at), 1)
    curve = [CurvePoint(0.0, 0, 0.0)]
    for count, seconds in enumerate(sorted(first_at.values()), start=1):
        # Sessions summarized at the same model time are one point (the imported ones at 0 s).
        if curve[-1].model_seconds == seconds:
            curve.pop()
        curve.append(CurvePoint(seconds, count, count / total))
    return curve


def seconds_to_share(curve: list[CurvePoint], share: float) -> float | None:
    """The model-seconds at which the curve first reaches `share` of the sessions; None: never."""
    return next((p.model_seconds for p in curve if p.share >= share), None)


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
    interrupted: list[dict]  # calls whose run died or was stopped during them, newest first
    truncations: list[dict]  # newest first
    implausible_counts: list[dict]  # newest first: calls whose server's prompt count was ignored
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
    summary_rows: list[dict] = field(default_factory=list, repr=False)  # tier, route, origin, host, fidelity, verdict
    # The ledger's model-seconds, calls, given-up calls and cache replays by model, host and UTC day.
    cost_totals: list[dict] = field(default_factory=list, repr=False)
    # The share of sessions with a summary (any tier) against cumulative model-seconds.
    first_summaries: list[CurvePoint] = field(default_factory=list, repr=False)
    # By project (`sessions.project`): sessions, summaries, degraded, junk, calls, model seconds, redacted turns.
    projects: list[dict] = field(default_factory=list, repr=False)

    @property
    def model_seconds(self) -> float:
        return sum(self.call_seconds)

    backlog: Backlog | None = None  # what waits for a summary and how fast it drains (`digest.backlog`)
    # Finished re-summaries by (previous model → new model), before and after (`digest.resummary`).
    resummaries: list[BeforeAfter] = field(default_factory=list, repr=False)

    @property
    def degraded_share(self) -> float:
        return self.degraded / self.summaries if self.summaries else 0.0

    @property
    def junk_share(self) -> float:
        """The share of the judged summaries whose verdict is junk."""
        judged = [s["verdict"] for s in self.summary_rows if s.get("verdict") is not None]
        return sum(v != "ok" for v in judged) / len(judged) if judged else 0.0

    @property
    def p95_call_seconds(self) -> float:
        return percentile(self.call_seconds, 95)

    def host_state(self, circuit: HostCircuit) -> CircuitState:
        return circuit.state(int(self.generated_at.timestamp() * 1000))

    def numbers(self) -> dict[str, int | float]:
        """The numeric metadata the Dagster UI plots across materializations."""
        return {
            "degraded_share": round(self.degraded_share, 4),
            "junk_share": round(self.junk_share, 4),
            "pre_routes": self.pre_routes.count,
            "timeouts": len(self.timeouts),
            "p95_call_seconds": round(self.p95_call_seconds, 3),
            "tokens_avoided": self.pre_routes.tokens_avoided,
            "model_seconds_avoided": round(self.pre_routes.model_seconds_avoided, 1),
            "summaries": self.summaries,
            "friction_events": sum(g.count for g in self.groups),
            "surfaced_groups": sum(g.surfaced for g in self.groups),
            "suspected_truncations": len(self.truncations),
            "implausible_counts": len(self.implausible_counts),
            "model_calls": len(self.call_seconds),
            "hosts_out_of_rotation": sum(self.host_state(c) == CircuitState.OPEN for c in self.host_circuits),
            "slow_hosts": sum(d.slow for d in self.slowdowns.values()),
            "model_seconds_discarded": round(sum(a["duration_s"] for a in self.timeouts), 1),
            "interrupted_calls": len(self.interrupted),
            "model_seconds_interrupted": round(sum(a["duration_s"] for a in self.interrupted), 1),
            "degraded_path_seconds": round(self.pre_routes.degraded_seconds, 1),
            "pre_route_net_seconds": round(self.pre_routes.net_seconds, 1),
            "summarized_share": self.first_summaries[-1].share if self.first_summaries else 0.0,
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
    cost_totals: list[dict] = (),
    sessions: int | None = None,
    backlog: Backlog | None = None,
    resummaries: list[dict] = (),
    projects: list[dict] = (),
) -> FrictionReport:
    """`sessions`: how many sessions the store holds, the time-to-first-summary curve's whole;
    `resummaries`: the finished re-summary requests with their before and after."""
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
        interrupted=[a for a in newest_first if a["outcome"] == INTERRUPTED],
        truncations=[a for a in newest_first if a["suspected_truncation"]],
        implausible_counts=[a for a in newest_first if a.get("prompt_tokens") is not None and not counted_plausibly(a)],
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
        cost_totals=list(cost_totals),
        first_summaries=first_summary_curve(attempts, summaries, sessions),
        backlog=backlog,
        resummaries=before_after(list(resummaries)),
        projects=list(projects),
    )
