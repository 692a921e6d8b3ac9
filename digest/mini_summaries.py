"""Per-turn mini summaries: the one-line digests that make a degraded session summary worth reading.

The reference backfill (`memory-summary-backfill`), made per session and budgeted:
- a pending turn (no mini summary, not archived) gets one model call whose prompt carries the user
  prompt and the agent response, never the agent's thought, and not the long lines an earlier
  turn of the batch already showed (`without_repeats`);
- the reply is whitespace-collapsed and cut to 280 characters;
- every call is an attempt paced by the host's measured speed (`digest.pacing`: a stall window and
  a ceiling; the configured inner timeout where nothing is measured yet), with an outer backstop
  past the ceiling whatever the client does, and its failure cause is tallied; a turn with no
  content is archived at once, one that fails `max_attempts` times is archived too, and archived
  turns are never picked again until un-archived;
- a run stops picking turns when its budget of model time is spent, and takes a fresh reserve of
  the newest turns before the oldest, so new work is served and old work does not starve.

No Dagster here: the asset wires in a client and a store.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from digest.attempts import MINI_SUMMARY_STAGE, Attempt, call_attempt, in_flight_attempt, ledgered_call
from digest.friction import Symptom, classify_error
from digest.model_api import ChatClient, ChatReply, ModelTimeout, ProviderError
from digest.pacing import CallPlan, Pacer, is_given_up
from digest.prompts import MINI_SUMMARY_HEAD, MINI_SUMMARY_MIDDLE
from digest.repeats import MARKER_PATTERN, drop_repeated_lines
from digest.synthesis import Limits, Route, estimate_raw_tokens, raw_route
from digest.turns import compose_document, split_document
from digest.verdict import judge_mini

MAX_CHARS = 280
# 280 characters are 70-90 tokens of prose: room for the line, and a ramble is cut short on the server.
MAX_OUTPUT_TOKENS = 128
# A run that attempted turns and generated none waits this long before the cadence picks it again.
NO_PROGRESS_BACKOFF_S = 600.0

# A failed call's cause is its symptom as a summary call's (`digest.friction.classify_error`), the
# timeouts saying which deadline and an absent server or model `no-model`.
CAUSES = (
    "timeout-inner",
    "timeout-outer",
    "no-model",
    "empty-output",
    "provider-error",
    "context-overflow",
    "token-budget-exceeded",
    "runaway",
    "unspecified",
)
ARCHIVE_NO_CONTENT = "no-content"
ARCHIVE_GENERATION_TIMEOUT = "generation-timeout"  # the reference's name, whatever the failures were
# A reply judged junk (`digest.verdict.judge_mini`) is not kept: the turn is archived under this
# reason and its own text stands for it. Asked again, the same model writes the same.
ARCHIVE_JUNK = "junk-output"
PRIORITIES = ("degraded-first", "newest-first")


@dataclass(frozen=True)
class MiniSummaryPolicy:
    budget_s: float  # model time one run may spend
    timeout_s: float  # inner: the client's own deadline
    outer_timeout_s: float  # outer: wall-clock per turn, whatever the client does
    max_attempts: int
    fresh_reserve: int
    priority: str = "degraded-first"


@dataclass(frozen=True)
class PendingTurn:
    """A turn that has no mini summary and is not archived. It carries no thought on purpose."""

    id: str
    session_id: str
    ts_ms: int | None
    prompt: str | None
    response: str | None
    document: str


@dataclass(frozen=True)
class PendingSession:
    partition_key: str
    session_id: str
    raw_bytes: int
    turn_count: int
    last_activity_ms: int | None


class MiniSummaryStore(Protocol):
    """Where results go as they happen (DuckDB in production: short writes, none during a call);
    its attempts as `digest.synthesis.Ledger` writes them."""

    def start_attempt(self, attempt: Attempt) -> int | None: ...

    def record_attempt(self, attempt: Attempt, started: int | None = None) -> None: ...

    def save_mini_summary(self, turn: PendingTurn, text: str, model: str) -> None: ...

    def record_failure(self, turn: PendingTurn, cause: str, max_attempts: int) -> bool:
        """Count one failed attempt; True if that was the last one allowed and the turn is archived."""
        ...

    def archive(self, turn: PendingTurn, reason: str) -> None: ...

    def still_pending(self, turn: PendingTurn) -> bool:
        """False when another run has given the turn its mini summary (or archived it) meanwhile."""
        ...


@dataclass
class FillReport:
    pending: int = 0
    attempted: int = 0
    generated: list[tuple[str, str]] = field(default_factory=list)  # (turn id, text)
    failed: int = 0
    archived_no_content: list[str] = field(default_factory=list)
    archived_after_failures: list[str] = field(default_factory=list)
    archived_junk: list[str] = field(default_factory=list)  # replies judged junk: the turn archived
    causes: Counter = field(default_factory=Counter)
    model_seconds: float = 0.0
    left_for_later: int = 0  # turns with content the budget did not reach
    done_by_another_run: int = 0  # pending when this run started, not any more when their turn came
    cut_at_output_cap: int = 0  # replies cut at the output cap, their first 280 characters kept
    host_out_of_rotation: bool = False  # the host's circuit opened: the rest handed back, no backoff

    @property
    def budget_exhausted(self) -> bool:
        return self.left_for_later > 0 and not self.host_out_of_rotation

    @property
    def made_no_progress(self) -> bool:
        return self.attempted > 0 and not self.generated and not self.archived_junk

    def cause_tally(self) -> dict[str, int]:
        return {cause: self.causes.get(cause, 0) for cause in CAUSES}

    def backoff_until_ms(self, now_ms: int) -> int | None:
        """A run that attempted turns and generated none backs off instead of spinning."""
        if self.host_out_of_rotation:  # the host's fault, not the session's
            return None
        return now_ms + int(NO_PROGRESS_BACKOFF_S * 1000) if self.made_no_progress else None


# --- the prompt ---------------------------------------------------------------------------------


def turn_text(turn: PendingTurn) -> tuple[str, str] | None:
    """The turn's (prompt, response): its split fields, else parsed from its document; None if empty."""
    if (turn.prompt or "").strip() or (turn.response or "").strip():
        prompt, response = turn.prompt or "", turn.response or ""
    else:
        prompt, response = split_document(turn.document or "")
    prompt, response = prompt.strip(), response.strip()
    return (prompt, response) if prompt or response else None


def turn_document(turn: PendingTurn) -> str:
    """The turn's whole text, as a mini summary is judged against it (lines shown by an earlier turn
    included: naming what they hold is not naming what the turn lacks)."""
    prompt, response = turn_text(turn) or ("", "")
    return compose_document(prompt, "", response)


def _shorten_to_bytes(text: str, max_bytes: int) -> str:
    """`text` in at most `max_bytes` UTF-8 bytes, an ellipsis where it was cut."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[: max_bytes - 3].decode("utf-8", "ignore") + "…" if max_bytes >= 3 else ""


def build_prompt(prompt: str, response: str, max_bytes: int | None = None) -> str:
    """The reference prompt, held to `max_bytes`: each field keeps up to half the room, and the
    longer one takes what the shorter leaves."""
    head, middle = MINI_SUMMARY_HEAD, MINI_SUMMARY_MIDDLE
    if max_bytes is not None:
        room = max(0, max_bytes - len((head + middle).encode("utf-8")))
        prompt_bytes, response_bytes = len(prompt.encode("utf-8")), len(response.encode("utf-8"))
        if prompt_bytes + response_bytes > room:
            prompt_share = min(prompt_bytes, max(room // 2, room - response_bytes))
            prompt, response = _shorten_to_bytes(prompt, prompt_share), _shorten_to_bytes(response, room - prompt_share)
    return f"{head}{prompt}{middle}{response}"


def without_repeats(turns: list[PendingTurn], texts: dict[str, tuple[str, str] | None]) -> dict:
    """The turns' (prompt, response) with the lines an earlier turn of the batch (in time order)
    or an earlier line already showed left out, a marker in their place (`digest.repeats`): a file
    read again or a log printed again is not paid for twice. A batch is the session's pending turns,
    so a line shown only in a turn summarized earlier is sent again."""
    seen: set[str] = set()
    kept = dict(texts)
    for turn in sorted(turns, key=lambda t: (t.ts_ms or 0, t.id)):
        if kept[turn.id] is not None:
            prompt, response = kept[turn.id]
            kept[turn.id] = (drop_repeated_lines(prompt, seen), drop_repeated_lines(response, seen))
    return kept


def clean_output(text: str) -> str:
    """One line: the prompt's repeat markers a model copied left out (they mean nothing in a summary),
    whitespace collapsed, cut to 280 characters."""
    return " ".join(MARKER_PATTERN.sub(" ", text).split())[:MAX_CHARS]


def mini_summary_limits(limits: Limits, policy: MiniSummaryPolicy) -> Limits:
    """The session limits with a mini summary's output cap and timeout: its prompt budget follows."""
    return dataclasses.replace(limits, max_output_tokens=MAX_OUTPUT_TOKENS, timeout_s=policy.timeout_s)


# --- order --------------------------------------------------------------------------------------


def batch_order(turns: list[PendingTurn], fresh_reserve: int) -> list[PendingTurn]:
    """The `fresh_reserve` newest turns (newest first), then the rest oldest first."""
    oldest_first = sorted(turns, key=lambda t: (t.ts_ms or 0, t.id))
    split = max(0, len(oldest_first) - fresh_reserve)
    return list(reversed(oldest_first[split:])) + oldest_first[:split]


def headed_for_degraded(raw_bytes: int, turn_count: int, limits: Limits) -> bool:
    """Whether the session's raw prompt is over the cap or the safe band, estimated from its size."""
    return raw_route(estimate_raw_tokens(raw_bytes, turn_count, limits), limits) != Route.WITHIN_CAP


def order_sessions(sessions: list[PendingSession], limits: Limits, priority: str) -> list[PendingSession]:
    """Newest activity first; with `degraded-first`, sessions headed for the degraded path before all.

    A mini summary only reaches a session summary on the degraded path: for a session within the
    cap the raw prompt is sent and its mini summaries change nothing there.
    """
    if priority not in PRIORITIES:
        raise ValueError(f"unknown mini summary priority {priority!r}")
    newest = sorted(sessions, key=lambda s: (-(s.last_activity_ms or 0), s.session_id))
    if priority == "newest-first":
        return newest
    return sorted(newest, key=lambda s: not headed_for_degraded(s.raw_bytes, s.turn_count, limits))


def archive_reason_after(attempts: int, max_attempts: int) -> str | None:
    """Why a turn that has failed `attempts` times leaves generation, or None: it is tried again."""
    return ARCHIVE_GENERATION_TIMEOUT if attempts >= max_attempts else None


# --- one call -----------------------------------------------------------------------------------


class OuterTimeout(ModelTimeout):
    """The turn's wall-clock timeout ran out before the client returned."""


def cause_of(error: BaseException) -> str:
    """The symptom `classify_error` gives a summary call's error, with which deadline a timeout
    was, and `no-model` for a provider error that is nothing listening or an unknown model name.
    Not a model error: `unspecified` (a mini summary's reply is not parsed)."""
    symptom = classify_error(error)
    if symptom == Symptom.TIMEOUT:
        return "timeout-outer" if isinstance(error, OuterTimeout) else "timeout-inner"
    if symptom == Symptom.PROVIDER_ERROR:
        text = str(error)
        # Nothing listening, or a server that does not serve the model name it was given.
        if isinstance(error, ProviderError) and ("unreachable" in text or text.startswith("HTTP 404")):
            return "no-model"
        return str(symptom)
    if symptom == Symptom.PARSE_FAILURE:
        return "unspecified"
    return str(symptom)  # context-overflow, token-budget-exceeded, runaway


def call_with_deadline(
    client: ChatClient, prompt: str, plan: CallPlan, backstop_s: float
) -> tuple[ChatReply | None, BaseException | None, float]:
    """One call under its plan (the client's own ceiling and stall window), abandoned at the outer
    backstop `backstop_s`; (reply, error, seconds).

    An abandoned call ends on its own when its ceiling fires; nothing it returns is used.
    """
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["reply"] = client.chat(
                prompt,
                schema=None,
                max_output_tokens=MAX_OUTPUT_TOKENS,
                timeout_s=plan.timeout_s,
                stall_s=plan.stall_s,
            )
        except Exception as error:  # carried to the caller, who tallies it
            outcome["error"] = error

    started = time.monotonic()
    worker = threading.Thread(target=run, name="mini-summary-call", daemon=True)
    worker.start()
    worker.join(backstop_s)
    seconds = time.monotonic() - started
    if worker.is_alive():
        abandoned = OuterTimeout(f"no reply within the outer timeout of {backstop_s:g}s")
        abandoned.duration_s = seconds
        return None, abandoned, seconds
    return outcome.get("reply"), outcome.get("error"), seconds


# --- the run ------------------------------------------------------------------------------------


def fill_mini_summaries(
    turns: list[PendingTurn],
    client: ChatClient,
    limits: Limits,
    policy: MiniSummaryPolicy,
    store: MiniSummaryStore,
    pacer: Pacer | None = None,
    host_available: Callable[[], bool] | None = None,
) -> FillReport:
    """Generate mini summaries for these pending turns until done or the budget is spent, or until
    `host_available` (asked before each call) says the host went out of rotation.

    Turns with no content are archived first (they cost no model time). A turn is started only
    while model time is left, so a run overruns its budget by at most one call. Each call is paced
    by `pacer` (`digest.pacing`; default: the configured timeout, fixed): a turn whose call was
    given up goes to the back of the run's queue and is tried again at the stretched window, while
    that window is still under the ceiling and the turn has attempts left.
    """
    pacer = pacer or Pacer.fixed(policy.timeout_s)
    limits = mini_summary_limits(limits, policy)
    max_prompt_bytes = int(limits.prompt_budget_tokens * limits.bytes_per_token)
    # The outer timeout is to the inner one what the backstop is to the call's ceiling.
    backstop_ratio = policy.outer_timeout_s / policy.timeout_s
    report = FillReport(pending=len(turns))
    texts = without_repeats(turns, {turn.id: turn_text(turn) for turn in turns})
    for turn in turns:
        if texts[turn.id] is None:
            store.archive(turn, ARCHIVE_NO_CONTENT)
            report.archived_no_content.append(turn.id)
    queue = deque(batch_order([t for t in turns if texts[t.id] is not None], policy.fresh_reserve))
    while queue:
        if report.model_seconds >= policy.budget_s:
            report.left_for_later = len(queue)
            break
        turn = queue.popleft()
        if not store.still_pending(turn):  # runs of one session can overlap when the model pool allows
            report.done_by_another_run += 1
            continue
        if host_available is not None and not host_available():
            report.host_out_of_rotation = True
            report.left_for_later = len(queue) + 1  # this turn and the rest
            break
        prompt = build_prompt(*texts[turn.id], max_bytes=max_prompt_bytes)
        tokens_estimate = limits.estimate_tokens(prompt)
        plan = pacer.plan(tokens_estimate, MAX_OUTPUT_TOKENS, client.streaming)
        backstop_s = plan.timeout_s * backstop_ratio
        in_flight = in_flight_attempt(
            turn.session_id, MINI_SUMMARY_STAGE, "turn", prompt, limits, client.model, backstop_s
        )
        with ledgered_call(store, in_flight) as started:
            reply, error, seconds = call_with_deadline(client, prompt, plan, backstop_s)
        report.model_seconds += seconds
        report.attempted += 1
        note = None
        if reply is not None:
            text = clean_output(reply.text)
            cause = "ok" if text else "empty-output"
            if not text:
                note = "the reply was empty"
            elif reply.finish_reason == "length":
                # Unlike a summary's JSON, a line cut at the cap is still a line: its first 280
                # characters are kept, as the reference keeps them; the attempt says it was cut.
                note = (
                    f"reply cut at the output cap of {MAX_OUTPUT_TOKENS} tokens; its first {MAX_CHARS} characters kept"
                )
                report.cut_at_output_cap += 1
        else:
            text, cause = "", cause_of(error)
        # Judged as the model wrote it: a reply of the prompt's markers alone is junk, not an empty reply.
        said = " ".join(reply.text.split())[:MAX_CHARS] if reply is not None else ""
        verdict = judge_mini(turn_document(turn), said) if said else None
        if verdict is not None and verdict.junk:  # the call did its part: its outcome stands, its words kept
            note = f"judged junk ({verdict.label}: {verdict.evidence['reason']}): {said}"
        attempt = call_attempt(in_flight, reply, error, f"turn {turn.id}: ", plan, outcome=cause, note=note)
        store.record_attempt(attempt, started)
        pacer.observe(attempt.speed_sample(), error)
        if verdict is not None and verdict.junk:
            store.archive(turn, ARCHIVE_JUNK)
            report.archived_junk.append(turn.id)
            continue
        if cause == "ok":
            store.save_mini_summary(turn, text, client.model)
            report.generated.append((turn.id, text))
            continue
        report.failed += 1
        report.causes[cause] += 1
        if store.record_failure(turn, cause, policy.max_attempts):
            report.archived_after_failures.append(turn.id)
        elif (
            is_given_up(error)
            and pacer.plan(tokens_estimate, MAX_OUTPUT_TOKENS, client.streaming).give_up_s > plan.give_up_s
        ):
            queue.append(turn)  # the host is slower than the run assumed: again, at the longer window
    return report
