"""The model ledger: every model call's attempt and every friction event, written as it happens
(the friction report and the sweep's time estimate read them): `Attempts` is the store's table of
them, `RunLedger` one run's writes to it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from digest.attempts import IN_FLIGHT, INTERRUPTED, MINI_SUMMARY_STAGE, SUMMARY_STAGE, TRUNCATION_RATIO, Attempt
from digest.circuit import CONSUMER as HOSTS_CONSUMER
from digest.circuit import CircuitPolicy, host_symptom, opened_note
from digest.friction import EmissionPoint, FrictionEvent
from digest.graph import Chunk, GraphExtraction
from digest.scheduling import now_ms
from resources.store.cache import mark_staged_attempts_recorded
from resources.store.connection import Repository, now, record, records

if TYPE_CHECKING:
    from resources.store import DigestStore

DEFAULT_CIRCUIT = CircuitPolicy()  # the settings' defaults (DIGEST_HOST_*)


class Attempts(Repository):
    def start_attempt(self, attempt: Attempt, run_id: str | None = None) -> int:
        """The call's row before the call (outcome `in-flight`, `created_at` its start): one short
        write, committed before the model is asked, so a kill during the call leaves it. Its id."""
        with self.file.connect() as con:
            return _insert(con, attempt, run_id)

    def record_attempt(self, attempt: Attempt, run_id: str | None = None, started: int | None = None) -> None:
        """The call as it ended: the row `start_attempt` wrote (`started`) finished, else a new row."""
        with self.file.transaction() as con:
            if attempt.stage == SUMMARY_STAGE and not attempt.cached and attempt.outcome == "ok":
                mark_staged_attempts_recorded(con, attempt.session_id)
            if started is None:
                _insert(con, attempt, run_id)
                return
            con.execute(
                """UPDATE attempts SET outcome = ?, duration_s = ?, prompt_tokens = ?, completion_tokens = ?,
                   suspected_truncation = ?, cached = ?, error_text = ?, host = ?, first_token_s = ?
                   WHERE attempt_id = ?""",
                [
                    attempt.outcome, attempt.duration_s, attempt.prompt_tokens, attempt.completion_tokens,
                    attempt.suspected_truncation, attempt.cached, attempt.error_text, attempt.host,
                    attempt.first_token_s, started,
                ],
            )  # fmt: skip

    def summary_cost_rows(self, session_id: str, run_id: str) -> tuple[list[dict], list[dict]]:
        """What `digest.cost.summary_cost` reads: the run's summary calls for the session, and the
        session's mini-summary calls (any run: they are made before the summary, by other runs;
        the ledger keeps no turn revision for them)."""
        columns = "stage, outcome, duration_s, cached, first_token_s, prompt_tokens, completion_tokens, host, model"
        with self.file.connect() as con:
            summary = records(
                con,
                f"SELECT {columns} FROM attempts WHERE session_id = ? AND run_id = ? AND stage = '{SUMMARY_STAGE}' "
                "ORDER BY attempt_id",
                [session_id, run_id],
            )
            minis = records(
                con,
                f"SELECT {columns} FROM attempts WHERE session_id = ? AND stage = '{MINI_SUMMARY_STAGE}' "
                f"AND outcome <> '{IN_FLIGHT}' ORDER BY attempt_id",
                [session_id],
            )
        return summary, minis

    def close_in_flight(self, run_ids: list[str]) -> int:
        """The calls these dead runs left in flight, finished. A summary call whose reply was staged
        before the kill was answered: `ok`, with the reply's counts and duration, and the staged reply
        is then a plain replay. Any other is `interrupted`, having spent the time from its start to
        now at most its deadline (when the run died is not known: an upper bound). How many rows."""
        if not run_ids:
            return 0
        marks = ", ".join("?" * len(run_ids))
        with self.file.transaction() as con:
            rows = records(
                con,
                f"""SELECT attempt_id, session_id, stage, created_at FROM attempts
                    WHERE outcome = '{IN_FLIGHT}' AND run_id IN ({marks}) ORDER BY attempt_id""",
                list(run_ids),
            )
            for row in rows:
                reply = None
                if row["stage"] == SUMMARY_STAGE:
                    reply = record(
                        con,
                        """SELECT request_key, prompt_tokens, completion_tokens, duration_s FROM response_cache
                           WHERE session_id = ? AND attempt_recorded = false AND created_at >= ?
                           ORDER BY created_at LIMIT 1""",
                        [row["session_id"], row["created_at"]],
                    )
                if reply is not None:
                    con.execute(
                        """UPDATE attempts SET outcome = 'ok', duration_s = ?, prompt_tokens = ?, completion_tokens = ?,
                           suspected_truncation = coalesce(? < ? * tokens_estimate, false),
                           error_text = 'its run died after the reply was staged; the rerun used the reply'
                           WHERE attempt_id = ?""",
                        [reply["duration_s"], reply["prompt_tokens"], reply["completion_tokens"],
                         reply["prompt_tokens"], TRUNCATION_RATIO, row["attempt_id"]],
                    )  # fmt: skip
                    con.execute(
                        "UPDATE response_cache SET attempt_recorded = NULL WHERE request_key = ?",
                        [reply["request_key"]],
                    )
                    continue
                con.execute(
                    f"""UPDATE attempts SET outcome = '{INTERRUPTED}',
                        duration_s = least(epoch(now() - created_at), coalesce(deadline_s, epoch(now() - created_at))),
                        error_text = 'its run died during the call (killed); the time is an upper bound'
                        WHERE attempt_id = ?""",
                    [row["attempt_id"]],
                )
        return len(rows)

    def record_friction(self, event: FrictionEvent, run_id: str | None = None) -> None:
        with self.file.connect() as con:
            con.execute(
                """INSERT INTO friction_events (occurred_at, asset_ref, consumer, model, symptom, emission_point,
                   suggestion_kind, input_bytes, input_tokens_estimate, context_limit_tokens, safe_limit_tokens,
                   raw_cap_tokens, service_domain, note, error_text, run_id, bound)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [
                    now(), event.asset_ref, event.consumer, event.model, event.symptom, event.emission_point,
                    event.suggestion_kind, event.input_bytes, event.input_tokens_estimate, event.context_limit_tokens,
                    event.safe_limit_tokens, event.raw_cap_tokens, event.service_domain, event.note, event.error_text,
                    run_id, event.bound,
                ],
            )  # fmt: skip


def record_host_outcome_of(store: DigestStore, attempt: Attempt, policy: CircuitPolicy, run_id: str | None) -> None:
    """A model call's outcome on its host's circuit (a replay from the response cache made no call);
    a circuit it opens is a friction event about the host."""
    if attempt.host is None or attempt.cached:
        return
    transition = store.hosts.record_host_outcome(
        attempt.host, attempt.host_failure, attempt.error_text, now_ms(), policy
    )
    if transition is None or not transition.opened:
        return
    event = FrictionEvent(
        asset_ref=attempt.host,
        consumer=HOSTS_CONSUMER,
        model=attempt.model,
        symptom=host_symptom(attempt.outcome),
        emission_point=EmissionPoint.POST_INVOCATION_FAILURE,
        input_bytes=attempt.prompt_bytes,  # of the call that opened it
        input_tokens_estimate=attempt.tokens_estimate,
        context_limit_tokens=0,  # about the host, not a prompt's bounds
        safe_limit_tokens=0,
        raw_cap_tokens=None,
        note=opened_note(transition),
        error_text=attempt.error_text,
    )
    store.attempts.record_friction(event, run_id)


class RunLedger:
    """The synthesis ledger for one run: each attempt and friction event written as it happens.
    `host`: the model host the run's calls go to, stamped on each attempt, whose outcome goes on
    the host's circuit under `circuit`."""

    def __init__(
        self, store: DigestStore, run_id: str | None, host: str | None = None, circuit: CircuitPolicy = DEFAULT_CIRCUIT
    ):
        self.store = store
        self.run_id = run_id
        self.host = host
        self.circuit = circuit

    def start_attempt(self, attempt: Attempt) -> int:
        return self.store.attempts.start_attempt(self._on_host(attempt), self.run_id)

    def record_attempt(self, attempt: Attempt, started: int | None = None) -> None:
        attempt = self._on_host(attempt)
        self.store.attempts.record_attempt(attempt, self.run_id, started)
        if attempt.outcome != INTERRUPTED:  # a kill or a stop says nothing of the host
            record_host_outcome_of(self.store, attempt, self.circuit, self.run_id)

    def _on_host(self, attempt: Attempt) -> Attempt:
        if self.host is not None and attempt.host is None:
            return dataclasses.replace(attempt, host=self.host)
        return attempt

    def record_friction(self, event: FrictionEvent) -> None:
        self.store.attempts.record_friction(event, self.run_id)

    # The graph's `ChunkStore`: a digest run's finished chunks, tagged with the run.
    def finished_chunks(self, session_id: str, revision: str) -> dict[tuple[int, str], tuple[GraphExtraction, bool]]:
        return self.store.graph.finished_graph_chunks(session_id, revision)

    def save_chunk(
        self, session_id: str, revision: str, chunk: Chunk, extraction: GraphExtraction, cut: bool, model: str
    ) -> None:
        self.store.graph.save_graph_chunk(session_id, revision, chunk, extraction, cut, model, self.run_id)


def _insert(con, attempt: Attempt, run_id: str | None) -> int:
    return con.execute(
        """INSERT INTO attempts (session_id, stage, tier, model, prompt_bytes, tokens_estimate, prompt_tokens,
           completion_tokens, duration_s, outcome, suspected_truncation, cached, error_text, run_id, created_at, host,
           first_token_s, deadline_s)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING attempt_id""",
        [
            attempt.session_id, attempt.stage, attempt.tier, attempt.model, attempt.prompt_bytes,
            attempt.tokens_estimate, attempt.prompt_tokens, attempt.completion_tokens, attempt.duration_s,
            attempt.outcome, attempt.suspected_truncation, attempt.cached, attempt.error_text, run_id, now(),
            attempt.host, attempt.first_token_s, attempt.deadline_s,
        ],
    ).fetchone()[0]  # fmt: skip
