"""The friction report in words: its sections, rendered as Markdown (the UI) and as an HTML page (a Jinja2 template)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from jinja2 import Environment, PackageLoader, StrictUndefined

from digest.backlog import Backlog, backlog_line
from digest.friction import DETERMINISTIC_SYMPTOMS
from digest.friction_report.compute import (
    PROBABILISTIC_SURFACE_COUNT,
    Bucket,
    FrictionGroup,
    FrictionReport,
    adopt_lines,
    bytes_per_token_words,
    seconds_to_share,
)
from digest.pacing import MIN_SAMPLES, RECENT_CALLS
from digest.tokens import (
    CALIBRATION_MIN_PROMPT_BYTES,
    CALIBRATION_MIN_SAMPLES,
    CALIBRATION_QUANTILE,
    CALIBRATION_RECENT,
    MAX_COUNTED_BYTES_PER_TOKEN,
    MIN_COUNTED_BYTES_PER_TOKEN,
)

MARKDOWN_ROWS = 15  # the UI's metadata preview stays readable
HTML_ROWS = 200
ERROR_CHARS = 160  # of the provider's error text, per friction group
# Autoescaped: the page shows notes, errors and session ids as the store holds them.
TEMPLATES = Environment(
    loader=PackageLoader("digest.friction_report"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    undefined=StrictUndefined,
)


def _when(stamp: datetime | None) -> str:
    return stamp.astimezone(UTC).strftime("%Y-%m-%d %H:%MZ") if stamp else ""


# --- one list of sections, two renderers ---------------------------------------------------------


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


def junk_rows(summaries: list[dict]) -> list[list[str]]:
    """By model and host, the judged summaries, how many are junk and of which kinds (docs/routing.md#junk)."""
    groups: dict[tuple[str, str], Counter] = {}
    for s in summaries:
        if s.get("verdict") is not None:
            key = (s.get("model") or s.get("origin") or "—", s.get("host") or "—")
            groups.setdefault(key, Counter())[s["verdict"]] += 1
    rows = []
    for (model, host), verdicts in sorted(groups.items()):
        judged, junk = sum(verdicts.values()), sum(n for v, n in verdicts.items() if v != "ok")
        kinds = ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items()) if v != "ok") or "none"
        rows.append([model, host, str(judged), str(junk), _share(junk, judged), kinds])
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
    interrupted_lead = (
        f"{_count(len(report.interrupted), 'call')} interrupted (the run killed or stopped during the call; not "
        f"the host's failure), at most {_seconds(sum(a['duration_s'] for a in report.interrupted))} thrown away."
    )
    timeouts = _table_section(
        "Timeouts",
        ["when", "session", "stage", "tier", "model", "prompt tokens", "seconds"],
        [[_when(a["created_at"]), a["session_id"], a["stage"], a["tier"], a["model"], _attempt_tokens(a),
          _seconds(a["duration_s"])]
         for a in report.timeouts],
        max_rows,
        [timeouts_lead] * bool(report.timeouts) + [interrupted_lead] * bool(report.interrupted),
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
    implausible = _table_section(
        "Server counts ignored",
        ["when", "session", "model", "prompt bytes", "server counted", "bytes per token"],
        [[_when(a["created_at"]), a["session_id"], a["model"], str(a["prompt_bytes"]), str(a["prompt_tokens"]),
          f"{a['prompt_bytes'] / a['prompt_tokens']:.1f}" if a["prompt_tokens"] else "-"]
         for a in report.implausible_counts],
        max_rows,
        [f"Calls whose server's prompt count is past belief for the prompt's bytes (outside "
         f"{MIN_COUNTED_BYTES_PER_TOKEN}-{MAX_COUNTED_BYTES_PER_TOKEN} bytes a token, the chat template aside): kept in the "
         "ledger as sent, left out of the host's speed, the bytes per token and the cap."],
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
    junk = _table_section(
        "Junk",
        ["model", "host", "summaries", "junk", "share", "kinds"],
        junk_rows(report.summary_rows),
        max_rows,
        ["Summaries whose verdict is not ok (echo, fabricated, template, content-free, empty, too-long; "
         "docs/routing.md#junk), by the model and host that wrote them (an imported one's model is `imported`)."],
        "No summary is judged yet.",
    )  # fmt: skip
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
    backlog = [backlog_section(report.backlog)] if report.backlog else []
    return [overview, *backlog, by_symptom, groups, hosts, speeds, pre_route, timeouts, truncations, implausible, undigestible,
            degraded, fidelity,
            junk, resummary_section(report, max_rows), mini, first_summary_section(report), cost_section(report, max_rows), project_section(report, max_rows), slowest,
            calibration_section(report, max_rows)]  # fmt: skip


def resummary_section(report: FrictionReport, max_rows: int) -> Section:
    """Finished re-summaries (`sweep --resummarize`) by (previous model → new model): were the new
    summaries worth more?"""

    def fidelity(value: float | None) -> str:
        return "—" if value is None else f"{value:.2f}"

    return _table_section(
        "Re-summaries: before and after",
        ["previous model", "new model", "re-summaries", "mean fidelity before", "after", "ok before", "ok after",
         "junk, previous kept"],
        [[g.previous_model, g.new_model, str(g.count), fidelity(g.fidelity_before), fidelity(g.fidelity_after),
          f"{g.ok_before:.0%}", f"{g.ok_after:.0%}", str(g.kept_previous)]
         for g in report.resummaries],
        max_rows,
        ["The summaries made again on request, against the ones they were asked to replace. A new one judged junk "
         "is not stored (the previous ok summary stands): it counts as not ok, with no fidelity."],
        "No re-summary has finished.",
    )  # fmt: skip


def cost_section(report: FrictionReport, max_rows: int) -> Section:
    """Model time by model, host and day, newest day first: what the backlog cost, from the ledger."""
    return _table_section(
        "Model time by model, host and day",
        ["day (UTC)", "model", "host", "model seconds", "calls", "given up", "given-up seconds", "from the cache"],
        [[t["day"], t["model"], t["host"] or "", _seconds(t["model_seconds"]), str(t["calls"]), str(t["given_up"]),
          _seconds(t["given_up_seconds"]), str(t["cached"])]
         for t in reversed(report.cost_totals)],
        max_rows,
        ["Every model call's seconds from the attempts ledger, given-up calls (any that did not end ok) among them; "
         "a reply replayed from the response cache is no call and is only counted."],
        "No model calls in the period.",
    )  # fmt: skip


def project_section(report: FrictionReport, max_rows: int) -> Section:
    """The store by project (`session-digest status --project P` narrows the counts to one)."""
    return _table_section(
        "By project",
        ["project", "sessions", "summaries", "degraded", "junk", "model calls", "model seconds", "turns redacted"],
        [[p["project"], str(p["sessions"]), str(p["summaries"]), str(p["degraded"]), str(p["junk"]), str(p["calls"]),
          _seconds(p["model_seconds"]), str(p["redacted_turns"])]
         for p in report.projects],
        max_rows,
        ["Each session's project is the working directory or repository its harness recorded; `(unknown)`: "
         "its log names none (an export bundle, the plain turn format without `project`)."],
        "No sessions yet.",
    )  # fmt: skip


# The shares of sessions the time-to-first-summary table reads the curve at.
CURVE_SHARES = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


def first_summary_section(report: FrictionReport) -> Section:
    """The share of sessions with a summary (any tier) against the model-seconds spent, all calls
    counted: a backlog that summarizes every session early reaches its top share early."""
    curve, spent = report.first_summaries, report.model_seconds
    title = "Time to first summary"
    if len(curve) < 2:
        return Section(title, ["No session has a summary yet."])
    last = curve[-1]
    lead = [
        f"{last.share:.0%} of the sessions have a summary of any tier ({last.summarized}); the model calls so far "
        f"took {_seconds(spent)}. When each share of the sessions had its first summary, in model-seconds spent by "
        "then (every call counted, mini summaries and upgrades included; an imported summary at 0 s):"
    ]
    rows = []
    for share in CURVE_SHARES:
        seconds = seconds_to_share(curve, share)
        if seconds is not None:
            rows.append([f"{share:.0%}", _seconds(seconds), _share(round(seconds * 1000), round(spent * 1000))])
    return Section(title, lead, Table(["sessions with a summary", "model-seconds by then", "of all spent"], rows))


def backlog_section(backlog: Backlog) -> Section:
    """Pending, the oldest's age, the drain in the last hour and day, and the ETA (the `backlog`
    asset plots the same figures across its materializations)."""
    placed = [
        f"{what}: " + ", ".join(f"{n} {key}" for key, n in counts.items())
        for what, counts in (("by route", backlog.by_route), ("by host", backlog.by_host))
        if counts
    ]
    line = backlog_line(backlog)
    lines = [line[0].upper() + line[1:] + "."]
    if placed:
        lines.append("Pending as a sweep would place them now, " + "; ".join(placed) + ".")
    return Section("Backlog", lines)


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


# --- the HTML page --------------------------------------------------------------------------------

CHART_WIDTH, CHART_HEIGHT, CHART_PAD = 760, 240, 44


# The model-seconds lines of the chart: (Bucket field, CSS class, colour, legend).
SECONDS_LINES = (
    ("spent_seconds", "spent", "#2b6cb0", "spent"),
    ("discarded_seconds", "discarded", "#c53030", "thrown away"),
    ("saved_seconds", "saved", "#2f855a", "saved by pre-routes"),
)


@dataclass(frozen=True)
class ChartBar:
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass(frozen=True)
class ChartLine:
    css: str
    colour: str
    label: str
    points: str  # the polyline's "x,y x,y ..."
    legend_x: int


@dataclass(frozen=True)
class Chart:
    """The SVG's geometry: friction events per bucket as bars (left axis), and model seconds spent,
    thrown away by given-up calls, and saved by pre-routes as three lines (right axis)."""

    width: int
    height: int
    pad: int
    plot_w: int
    plot_h: int
    bars: list[ChartBar]
    lines: list[ChartLine]
    max_events: int
    max_seconds: float
    first: str
    last: str


def chart(series: list[Bucket]) -> Chart | None:
    """The chart of the activity series; None when there is no activity."""
    if not series:
        return None
    width, height, pad = CHART_WIDTH, CHART_HEIGHT, CHART_PAD
    plot_w, plot_h = width - 2 * pad, height - 2 * pad
    max_events = max(b.friction_events for b in series) or 1
    max_seconds = max(getattr(b, name) for b in series for name, *_ in SECONDS_LINES) or 1.0
    step = plot_w / len(series)
    bars = []
    for i, bucket in enumerate(series):
        bar_h = plot_h * bucket.friction_events / max_events
        title = (
            f"{_when(bucket.start)}: {bucket.friction_events} friction events; model seconds "
            f"{bucket.spent_seconds:.1f} spent, {bucket.discarded_seconds:.1f} thrown away, "
            f"{bucket.saved_seconds:.1f} saved"
        )
        bars.append(ChartBar(pad + i * step + step * 0.15, pad + plot_h - bar_h, step * 0.7, bar_h, title))
    lines, legend_x = [], pad + 140
    for name, css, colour, label in SECONDS_LINES:
        points = " ".join(
            f"{pad + (i + 0.5) * step:.1f},{pad + plot_h - plot_h * getattr(b, name) / max_seconds:.1f}"
            for i, b in enumerate(series)
        )
        lines.append(ChartLine(css, colour, label, points, legend_x))
        legend_x += 60 + 7 * len(label)
    return Chart(
        width, height, pad, plot_w, plot_h, bars, lines, max_events, max_seconds, _when(series[0].start),
        _when(series[-1].start),
    )  # fmt: skip


def render_html(report: FrictionReport, max_rows: int = HTML_ROWS) -> str:
    return TEMPLATES.get_template("report.html").render(chart=chart(report.series), sections=sections(report, max_rows))
