"""Bounded session-summary synthesis: the routing rule, the prompts and the degraded input.

For each session, in canonical turn order:
1. build the raw prompt from every turn document and estimate its tokens; near the bound, ask the
   host's tokenizer when it has one (`digest.tokens`), and route on its count;
2. over the raw-synthesis cap (or the safe band): no raw call at all, a `size-precheck-skip`
   friction event, then the degraded path;
3. otherwise one raw call, bounded by a wall-clock deadline; a timeout falls through to the
   degraded path, any other failure (a reply cut at the output cap included: `token-budget-exceeded`)
   records friction and yields no summary;
4. degraded input: one line per turn, its mini summary, else the first 280 characters of the raw
   document, fitted to the same bounds before it is sent.

No Dagster here: the asset wires a client and a ledger in, so this runs and is tested anywhere.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from digest.attempts import SUMMARY_STAGE, Ledger, call_attempt, in_flight_attempt, ledgered_call
from digest.friction import EmissionPoint, FrictionEvent, Symptom, classify_error
from digest.model_api import ChatClient, ChatReply, ModelError, OutputLimitExceeded
from digest.pacing import Pacer
from digest.prompts import TURN_SEPARATOR, compact_line, summary_prompt
from digest.summary_output import (
    OutputParseError,
    SessionSummaryOutput,
    parse_summary_output,
    response_json_schema,
)
from digest.tokens import CHAT_TEMPLATE_MARGIN_TOKENS, TokenCount, count_prompt
from digest.turns import Turn, canonical_order, input_revision
from digest.verdict import judge

# The junk verdicts (`digest.verdict`) a raw summary is retried for on the degraded route: the shape
# of the reply (text copied from the long raw input, the prompt's fields or placeholders, nothing,
# more than it was given), which a short line per turn changes. A fabricated or content-free one is
# kept with its verdict: with less of the session to go on a model names less and invents more.
RETRIED_VERDICTS = frozenset({"echo", "template", "empty", "too-long"})

CONSUMER = "session_summaries"
FALLBACK_CHARS = 280
TOOL_ID_CHARS = 50
# The session's metadata in a prompt (agents, models, tools): this many names, this long, at most.
METADATA_NAMES = 20
METADATA_CHARS = 100
# When the compact input must shrink to fit, no turn line is cut below this many characters.
MIN_COMPACT_CHARS = 40
# The estimate assumes 3 bytes a token; real prose runs 3.5-4.6, so a server that counted under


class Route(StrEnum):
    """A summary's `route_reason`: why its raw prompt was or was not sent."""

    WITHIN_CAP = "within-cap"
    OVER_RAW_CAP = "over-raw-cap"
    OVER_SAFE_BAND = "over-safe-band"
    RAW_TIMEOUT = "raw-timeout"  # within the cap, but the raw call timed out: degraded instead
    RAW_JUNK = "raw-junk"  # within the cap, but the raw summary was junk of a kind a retry can fix: degraded instead


class SourceTier(StrEnum):
    """What a summary's prompt was made of (`source_tier`, the original's names)."""

    RAW = "raw"  # every turn document
    MINI_SUMMARY = "miniSummary"  # a line per turn, its mini summary where it has one
    TRUNCATED_RAW = "truncatedRaw"  # a line per turn, its document cut, no turn having a mini summary


@dataclass(frozen=True)
class Limits:
    context_limit_tokens: int
    safe_limit_tokens: int
    raw_cap_tokens: int | None
    bytes_per_token: float
    max_output_tokens: int
    timeout_s: float
    bytes_per_token_source: str = "default"  # "pinned" | "ledger" | "default" (`resolve_bytes_per_token`)
    # Where the raw cap comes from: "pinned" | "off" | "auto" (the host's measured speed) |
    # "auto-unmeasured" (auto, the default until the speed is measured).
    raw_cap_source: str = "pinned"

    def estimate_tokens(self, text: str) -> int:
        return math.ceil(len(text.encode("utf-8")) / self.bytes_per_token)

    @property
    def raw_bound_tokens(self) -> int:
        """The bound `raw_route` checks a raw prompt against: the lower of the cap and the safe band."""
        bounds = [self.safe_limit_tokens, self.context_limit_tokens - self.max_output_tokens]
        if self.raw_cap_tokens is not None:
            bounds.append(self.raw_cap_tokens)
        return min(bounds)

    @property
    def prompt_budget_tokens(self) -> int:
        """The largest prompt any call may carry: the cap, the safe band and the context less the answer."""
        bounds = [self.safe_limit_tokens, self.context_limit_tokens - self.max_output_tokens]
        if self.raw_cap_tokens is not None:
            bounds.append(self.raw_cap_tokens)
        return max(1, min(bounds))

    def record_friction(self, event: FrictionEvent) -> None: ...


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    output: SessionSummaryOutput
    source_tier: SourceTier
    degraded: bool
    raw_canonical: bool
    memory_count: int
    mini_summary_count: int
    input_revision: str
    model: str
    raw_tokens_estimate: int
    prompt_tokens_estimate: int
    raw_cap_tokens: int | None
    route_reason: Route
    first_activity_ms: int | None
    last_activity_ms: int | None
    participating_agents: list[str]
    models: list[str]
    total_tool_calls: int
    tools_used: list[str]
    source_agent_identities: list[str]
    raw_tokens_source: str = "default"  # what `route_reason` was decided on: "tokenizer", else the bytes/token's source
    raw_tokens_counted: int | None = None  # the host's count of the raw prompt plus the chat template margin
    raw_cap_source: str = "pinned"  # where `raw_cap_tokens` came from (`Limits.raw_cap_source`)
    # The turns its prompt carried, in prompt order, and of those the ones carried by their mini
    # summary (a degraded summary's other turns went as truncated raw text).
    covered_turn_ids: list[str] = field(default_factory=list)
    mini_turn_ids: list[str] = field(default_factory=list)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True)
class SynthesisResult:
    summary: SessionSummary | None
    route_reason: Route
    failure: Symptom | None  # the symptom that left the session without a summary
    host_failure: bool = False  # that failure was the host's (`digest.circuit`): not the session's fault
    # The host went out of rotation (its circuit opened) before a call: none was sent, the session is
    # handed back for another host, with no failure of its own.
    host_out_of_rotation: bool = False


# --- prompt building ---------------------------------------------------------------------------


def _distinct(values) -> list[str]:
    seen: dict[str, None] = {}
    for v in values:
        if v:
            seen.setdefault(v, None)
    return list(seen)


def session_tools(turns: list[Turn]) -> list[str]:
    """The session's distinct tool identifiers, in first-use order. Turns often repeat one
    `toolsUsed` text, and an export's can be megabytes: each distinct text is parsed once."""
    return _distinct(n for text in _distinct(t.tools_used for t in turns) for n in tool_identifiers(text))


def tool_identifiers(tools_used: str | None) -> list[str]:
    """`toolsUsed` is a JSON array (elements may be JSON strings themselves) of tool records."""
    if not tools_used:
        return []
    try:
        items = json.loads(tools_used)
    except (TypeError, ValueError):
        return [tools_used[:TOOL_ID_CHARS]]
    if not isinstance(items, list):
        items = [items]
    names = []
    for item in items:
        if isinstance(item, str):
            try:
                item = json.loads(item)
            except ValueError:
                names.append(item[:TOOL_ID_CHARS])
                continue
        if isinstance(item, dict):
            name = item.get("name") or item.get("toolAction") or item.get("toolSummary") or "unknown_tool"
        else:
            name = str(item)
        names.append(str(name)[:TOOL_ID_CHARS])
    return names


def _names(values: list[str]) -> str:
    """At most `METADATA_NAMES` names of at most `METADATA_CHARS` characters each, and how many more:
    an export's metadata is not bounded, and uncut it would crowd out the turns themselves."""
    cut = [v if len(v) <= METADATA_CHARS else v[: METADATA_CHARS - 1] + "…" for v in values[:METADATA_NAMES]]
    more = f" and {len(values) - METADATA_NAMES} more" if len(values) > METADATA_NAMES else ""
    return ", ".join(cut) + more


def build_prompt(content: str, turns: list[Turn]) -> str:
    agents = _names(_distinct(t.agent for t in turns))
    models = _names(_distinct(t.model for t in turns))
    tools = _names(session_tools(turns))
    return summary_prompt(content, agents, models, sum(t.amount_tool_calls or 0 for t in turns), tools)


COMPACT_LINE_OVERHEAD = compact_line(1000, "") + "\n"


def raw_content(turns: list[Turn]) -> str:
    return TURN_SEPARATOR.join(t.document for t in turns)


def _prompt_header_bytes() -> int:
    """The prompt around the content, naming no agents or tools: a few dozen bytes short at most."""
    return len(build_prompt("", []).encode("utf-8"))


def estimate_raw_tokens(raw_bytes: int, turn_count: int, limits: Limits) -> int:
    """The raw prompt's estimate from the session's size alone, without reading its turns."""
    separators = len(TURN_SEPARATOR) * max(0, turn_count - 1)
    return math.ceil((_prompt_header_bytes() + separators + raw_bytes) / limits.bytes_per_token)


def estimate_compact_tokens(compact_bytes: int, turn_count: int, limits: Limits) -> int:
    """The degraded prompt's estimate from the summed entry sizes, as sent: within the budget."""
    lines = len(COMPACT_LINE_OVERHEAD) * turn_count
    tokens = math.ceil((_prompt_header_bytes() + lines + compact_bytes) / limits.bytes_per_token)
    return min(tokens, limits.prompt_budget_tokens)


@dataclass(frozen=True)
class CompactInput:
    """The degraded input: one entry per turn with text (its mini summary, else the first 280
    characters), the turns they come from, and those whose entry is their mini summary."""

    tier: SourceTier
    entries: list[str]
    turn_ids: list[str]
    mini_turn_ids: list[str]


def compact_entries(turns: list[Turn]) -> CompactInput:
    tier = SourceTier.MINI_SUMMARY if any(t.mini_summary for t in turns) else SourceTier.TRUNCATED_RAW
    entries, ids, minis = [], [], []
    for t in turns:
        text = (t.mini_summary or t.document[:FALLBACK_CHARS]).strip()
        if text:
            entries.append(" ".join(text.split()))
            ids.append(t.id)
            if t.mini_summary:
                minis.append(t.id)
    return CompactInput(tier, entries, ids, minis)


def compact_content(entries: list[str], max_chars_per_entry: int = FALLBACK_CHARS) -> str:
    lines = []
    for i, entry in enumerate(entries, start=1):
        text = entry if len(entry) <= max_chars_per_entry else entry[: max_chars_per_entry - 1].rstrip() + "…"
        lines.append(compact_line(i, text))
    return "\n".join(lines)


def fit_compact_prompt(turns: list[Turn], entries: list[str], limits: Limits) -> str | None:
    """The degraded prompt, with every line shortened evenly until it fits the prompt budget.

    A long session's compact prompt is itself too large for a small-context or CPU host, so its
    lines shrink first (docs/routing.md). None if even the shortest lines do not fit.
    """
    budget = limits.prompt_budget_tokens
    prompt = build_prompt(compact_content(entries), turns)
    if limits.estimate_tokens(prompt) <= budget:
        return prompt
    overhead = len(build_prompt(compact_content([""] * len(entries), 0), turns).encode("utf-8"))
    room = budget * limits.bytes_per_token - overhead
    per_entry = int(room // max(1, len(entries)))
    while per_entry >= MIN_COMPACT_CHARS:
        prompt = build_prompt(compact_content(entries, per_entry), turns)
        if limits.estimate_tokens(prompt) <= budget:
            return prompt
        per_entry -= max(1, per_entry // 10)
    return None


# --- the routing rule --------------------------------------------------------------------------


def _call(
    client: ChatClient, prompt: str, limits: Limits, ledger: Ledger, session_id: str, tier: str, pacer: Pacer
) -> tuple[SessionSummaryOutput | None, BaseException | None, bool]:
    """One model call, with its attempt recorded whatever happens; (output, error, host failure)."""
    reply: ChatReply | None = None
    output, error = None, None
    plan = pacer.plan(limits.estimate_tokens(prompt), limits.max_output_tokens, client.streaming)
    in_flight = in_flight_attempt(session_id, SUMMARY_STAGE, tier, prompt, limits, client.model, plan.timeout_s)
    with ledgered_call(ledger, in_flight) as started:
        try:
            reply = client.chat(
                prompt,
                schema=response_json_schema(),
                max_output_tokens=limits.max_output_tokens,
                timeout_s=plan.timeout_s,
                stall_s=plan.stall_s,
            )
            if reply.finish_reason == "length":
                # Cut at the output cap: even when what came parses, the summary did not end where the model meant.
                raise OutputLimitExceeded(
                    f"reply cut at the output cap of {limits.max_output_tokens} tokens (finish_reason=length)"
                )
            output = parse_summary_output(reply.text)
        except (ModelError, OutputParseError) as exc:
            error = exc
    attempt = call_attempt(in_flight, reply, error, plan=plan)
    ledger.record_attempt(attempt, started)
    pacer.observe(attempt.speed_sample(), error)
    return output, error, attempt.host_failure


def prompt_friction(
    consumer: str,
    session_id: str,
    client: ChatClient,
    limits: Limits,
    prompt: str,
    symptom: Symptom,
    point: EmissionPoint,
    note: str,
    error: BaseException | None = None,
    service_domain: str = "memory-core",
    bound: Route | None = None,
) -> FrictionEvent:
    """A friction event about one prompt, sized and bounded as the consumer saw it."""
    return FrictionEvent(
        asset_ref=session_id,
        consumer=consumer,
        model=client.model,
        symptom=symptom,
        emission_point=point,
        input_bytes=len(prompt.encode("utf-8")),
        input_tokens_estimate=limits.estimate_tokens(prompt),
        context_limit_tokens=limits.context_limit_tokens,
        safe_limit_tokens=limits.safe_limit_tokens,
        raw_cap_tokens=limits.raw_cap_tokens,
        note=note,
        error_text=str(error)[:2000] if error is not None else None,
        service_domain=service_domain,
        bound=bound,
    )


def _friction(session_id, client, limits, prompt, symptom, point, note, error=None, bound=None) -> FrictionEvent:
    return prompt_friction(CONSUMER, session_id, client, limits, prompt, symptom, point, note, error, bound=bound)


def raw_route(raw_tokens: int, limits: Limits) -> Route:
    """Why the raw prompt may or may not be sent: within the cap, over the raw cap or over the safe band."""
    if limits.raw_cap_tokens is not None and raw_tokens > limits.raw_cap_tokens:
        return Route.OVER_RAW_CAP
    if raw_tokens > min(limits.safe_limit_tokens, limits.context_limit_tokens - limits.max_output_tokens):
        return Route.OVER_SAFE_BAND
    return Route.WITHIN_CAP


def _raw_tokens_words(routed: TokenCount) -> str:
    if routed.source == "tokenizer":
        return (
            f"raw count {routed.tokens} tokens (host tokenizer + {CHAT_TEMPLATE_MARGIN_TOKENS} for the chat template)"
        )
    return f"raw estimate {routed.tokens} tokens"


def summarize_session(
    turns: list[Turn],
    client: ChatClient,
    limits: Limits,
    ledger: Ledger,
    count_tokens: Callable[[str], int | None] | None = None,
    pacer: Pacer | None = None,
    host_available: Callable[[], bool] | None = None,
) -> SynthesisResult:
    """`count_tokens`: the host's tokenizer (`count_tokens` of its client), asked for a raw prompt
    whose estimate is near the bound; with its count the route is decided on that count.
    `pacer`: each call's deadlines (`digest.pacing`); default `limits.timeout_s`, fixed.
    `host_available`: asked before each call; False (the host's circuit opened meanwhile) ends the
    synthesis with no call and `host_out_of_rotation`."""
    pacer = pacer or Pacer.fixed(limits.timeout_s)
    if not turns:
        raise ValueError("a session with no turns cannot be summarized")
    ordered = canonical_order(turns)
    session_id = ordered[0].session_id
    raw_prompt = build_prompt(raw_content(ordered), ordered)
    raw_tokens = limits.estimate_tokens(raw_prompt)
    routed = count_prompt(
        raw_prompt, TokenCount(raw_tokens, limits.bytes_per_token_source), limits.raw_bound_tokens, count_tokens
    )
    counted = routed.tokens if routed.source == "tokenizer" else None
    route = raw_route(routed.tokens, limits)

    def finish(
        output: SessionSummaryOutput, tier: SourceTier, prompt: str, reason: Route, compact: CompactInput | None = None
    ) -> SynthesisResult:
        stamps = [t.ts_ms for t in ordered if t.ts_ms is not None]
        summary = SessionSummary(
            session_id=session_id,
            output=output,
            source_tier=tier,
            degraded=tier != SourceTier.RAW,
            raw_canonical=True,
            memory_count=len(ordered),
            mini_summary_count=sum(1 for t in ordered if t.mini_summary),
            input_revision=input_revision(ordered),
            model=client.model,
            raw_tokens_estimate=raw_tokens,
            prompt_tokens_estimate=limits.estimate_tokens(prompt),
            raw_cap_tokens=limits.raw_cap_tokens,
            route_reason=reason,
            first_activity_ms=min(stamps) if stamps else None,
            last_activity_ms=max(stamps) if stamps else None,
            participating_agents=_distinct(t.agent for t in ordered),
            models=_distinct(t.model for t in ordered),
            total_tool_calls=sum(t.amount_tool_calls or 0 for t in ordered),
            tools_used=session_tools(ordered),
            source_agent_identities=_distinct(t.agent_identity for t in ordered),
            raw_tokens_source=routed.source,
            raw_tokens_counted=counted,
            raw_cap_source=limits.raw_cap_source,
            covered_turn_ids=compact.turn_ids if compact else [t.id for t in ordered],
            mini_turn_ids=compact.mini_turn_ids if compact else [],
        )
        return SynthesisResult(summary=summary, route_reason=reason, failure=None)

    def out_of_rotation(reason: Route) -> SynthesisResult | None:
        if host_available is None or host_available():
            return None
        return SynthesisResult(summary=None, route_reason=reason, failure=None, host_out_of_rotation=True)

    junk: SynthesisResult | None = None  # a raw summary of a retried verdict, kept if the retry makes none
    if route == Route.WITHIN_CAP:
        if handed_back := out_of_rotation(route):
            return handed_back
        output, error, host_failure = _call(client, raw_prompt, limits, ledger, session_id, SourceTier.RAW, pacer)
        if output is not None:
            verdict = judge([t.document for t in ordered], output.title, output.summary)
            if verdict.label not in RETRIED_VERDICTS:
                return finish(output, SourceTier.RAW, raw_prompt, route)
            junk = finish(output, SourceTier.RAW, raw_prompt, route)
            symptom, note, route = (
                Symptom.SEMANTIC_CONFUSION,
                f"tier=raw: a junk summary ({verdict.label}); retried once on the degraded route",
                Route.RAW_JUNK,
            )
        else:
            symptom, note = classify_error(error), "tier=raw"
        ledger.record_friction(
            _friction(
                session_id, client, limits, raw_prompt, symptom, EmissionPoint.POST_INVOCATION_FAILURE, note, error
            )
        )
        if junk is None and symptom != Symptom.TIMEOUT:
            return SynthesisResult(summary=None, route_reason=route, failure=symptom, host_failure=host_failure)
        if junk is None:
            route = Route.RAW_TIMEOUT
    else:
        bound = limits.raw_cap_tokens if route == Route.OVER_RAW_CAP else limits.safe_limit_tokens
        ledger.record_friction(
            _friction(
                session_id,
                client,
                limits,
                raw_prompt,
                Symptom.SIZE_PRECHECK_SKIP,
                EmissionPoint.PRE_INVOCATION,
                f"pre-routed to the degraded summary: {_raw_tokens_words(routed)} > {route} {bound}",
                bound=route,
            )
        )

    compact = compact_entries(ordered)
    tier, entries = compact.tier, compact.entries
    compact_prompt = fit_compact_prompt(ordered, entries, limits)
    if compact_prompt is None:
        oversized = build_prompt(compact_content(entries, MIN_COMPACT_CHARS), ordered)
        ledger.record_friction(
            _friction(
                session_id,
                client,
                limits,
                oversized,
                Symptom.SIZE_PRECHECK_SKIP,
                EmissionPoint.PRE_INVOCATION,
                f"tier={tier}: compact input over the prompt budget {limits.prompt_budget_tokens} even at "
                f"{MIN_COMPACT_CHARS} characters a turn",
            )
        )
        return junk or SynthesisResult(summary=None, route_reason=route, failure=Symptom.SIZE_PRECHECK_SKIP)
    if handed_back := out_of_rotation(route):
        return junk or handed_back
    output, error, host_failure = _call(client, compact_prompt, limits, ledger, session_id, tier, pacer)
    if output is not None:
        # The retry's summary stands, whatever its own verdict: `raw-junk` says the raw one was junk.
        return finish(output, tier, compact_prompt, route, compact)
    symptom = classify_error(error)
    ledger.record_friction(
        _friction(
            session_id,
            client,
            limits,
            compact_prompt,
            symptom,
            EmissionPoint.POST_INVOCATION_FAILURE,
            f"tier={tier}",
            error,
        )
    )
    return junk or SynthesisResult(summary=None, route_reason=route, failure=symptom, host_failure=host_failure)
