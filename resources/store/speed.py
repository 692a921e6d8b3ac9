"""Each model host's measured speed, from its own ledger: the rates and the raw cap that follows
them (`digest.pacing`), and the seconds per token a sweep estimates its runs by."""

from __future__ import annotations

import threading

from digest.attempts import SUMMARY_STAGE
from digest.pacing import (
    RECENT_CALLS,
    AutoCap,
    HostSpeed,
    Sample,
    Slowdown,
    answer_room,
    computed_raw_cap,
    next_auto_cap,
    slowdown,
)
from digest.tokens import plausible_count_sql
from resources.store.connection import Repository, now, records

# Of the host's calls, the many its slowdown is judged over (the recent ones against these).
HISTORY_CALLS = 200
_cap_lock = threading.Lock()
# The server's prompt count where it is plausible for the prompt's bytes, else the estimate.
_PROMPT_TOKENS = f"CASE WHEN {plausible_count_sql()} THEN prompt_tokens ELSE tokens_estimate END"  # this process's cap writes take turns (see `hosts.py`)


class Speed(Repository):
    def host_samples(self, host: str, model: str, limit: int = RECENT_CALLS) -> list[Sample]:
        """The host's finished calls of `model`, newest first, with the server's counts (else the
        estimate): every stage,
        since each measures the same prompt and answer rates (attempts from before hosts were named
        count for every host of the model)."""
        with self.file.connect() as con:
            rows = con.execute(
                # A server that sends no counts, or one past belief: the estimate, and no answer
                # from no count (`Attempt.speed_sample`).
                f"""SELECT {_PROMPT_TOKENS}, coalesce(completion_tokens, 0), duration_s,
                          first_token_s FROM attempts
                   WHERE outcome = 'ok' AND NOT cached AND {_PROMPT_TOKENS} > 0
                     AND model = ? AND (host = ? OR host IS NULL)
                   ORDER BY attempt_id DESC LIMIT ?""",
                [model, host, limit],
            ).fetchall()
        return [Sample(*row) for row in rows]

    def seconds_per_token(self, model: str, host: str | None = None, recent: int = 50) -> float | None:
        """Measured model seconds per estimated prompt token over the recent good calls of `model`
        on `host` (attempts from before hosts were recorded count for every host of the model)."""
        with self.file.connect() as con:
            row = con.execute(
                """SELECT sum(duration_s) / nullif(sum(tokens_estimate), 0) FROM (
                       SELECT duration_s, tokens_estimate FROM attempts
                       -- duration 0: a reply replayed from the response cache, which says nothing of the model's speed
                       WHERE outcome = 'ok' AND model = ? AND stage = ? AND NOT cached
                         AND (host IS NULL OR host = ? OR ? IS NULL)
                       ORDER BY attempt_id DESC LIMIT ?)""",
                [model, SUMMARY_STAGE, host, host, recent],
            ).fetchone()
        return row[0]

    def host_speed(self, host: str, model: str) -> HostSpeed | None:
        return HostSpeed.from_samples(self.host_samples(host, model))

    def host_slowdown(self, host: str, model: str) -> Slowdown | None:
        """The host's recent calls against its earlier ones: `status` and the friction report say slow."""
        return slowdown(self.host_samples(host, model, HISTORY_CALLS))

    def host_slowdowns(self, hosts: list[tuple[str, str]]) -> dict[str, Slowdown]:
        """Of these (host, model) pairs, the hosts with enough calls to compare, by host."""
        measured = {host: self.host_slowdown(host, model) for host, model in hosts}
        return {host: slow for host, slow in measured.items() if slow is not None}

    def summary_answers(self, host: str, model: str) -> list[int]:
        """The answer tokens of the host's recent good summary calls."""
        with self.file.connect() as con:
            rows = con.execute(
                """SELECT completion_tokens FROM attempts
                   WHERE outcome = 'ok' AND NOT cached AND stage = ? AND completion_tokens > 0
                     AND model = ? AND (host = ? OR host IS NULL)
                   ORDER BY attempt_id DESC LIMIT ?""",
                [SUMMARY_STAGE, model, host, RECENT_CALLS],
            ).fetchall()
        return [row[0] for row in rows]

    def auto_raw_cap(
        self, host: str, model: str, target_s: float, default_answer_tokens: int, bound_tokens: int
    ) -> AutoCap | None:
        """The raw cap in force on a host whose cap follows its speed: recomputed from its ledger,
        moved only past the hysteresis; None until its speed is measured."""
        speed = self.host_speed(host, model)
        if speed is None:
            return None
        answer = answer_room(self.summary_answers(host, model), default_answer_tokens)
        computed = computed_raw_cap(speed, target_s, answer, bound_tokens)
        with self.file.connect() as con:
            row = con.execute("SELECT cap_tokens, model FROM host_raw_caps WHERE host = ?", [host]).fetchone()
        in_force = row[0] if row is not None and row[1] == model else None
        cap = min(bound_tokens, next_auto_cap(in_force, computed))
        if cap != in_force:  # a write only when the cap moves
            with _cap_lock, self.file.transaction() as con:
                con.execute(
                    """INSERT OR REPLACE INTO host_raw_caps
                       (host, model, cap_tokens, computed_tokens, prompt_tps, answer_tps, samples, updated_at)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
                    [host, model, cap, computed, speed.prompt_tps, speed.answer_tps, speed.samples, now()],
                )
        return AutoCap(cap_tokens=cap, computed_tokens=computed, speed=speed)

    def auto_caps(self) -> dict[str, dict]:
        """The auto raw caps in force, by host: what the friction report shows beside its calibration."""
        with self.file.connect() as con:
            rows = records(con, "SELECT * FROM host_raw_caps ORDER BY host")
        return {row["host"]: row for row in rows}
