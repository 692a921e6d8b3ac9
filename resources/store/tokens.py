"""The bytes per token a host's own ledger measures: what a token estimate uses when no value is pinned."""

from __future__ import annotations

from digest.tokens import (
    CALIBRATION_MIN_PROMPT_BYTES,
    CALIBRATION_RECENT,
    conservative_bytes_per_token,
    plausible_count_sql,
)
from resources.store.connection import Repository


class Tokens(Repository):
    def calibrated_bytes_per_token(self, host: str, model: str) -> tuple[float, int] | None:
        """A conservative low quantile of prompt bytes / the server's prompt tokens over the recent
        good calls of `model` on `host` (`digest.tokens.conservative_bytes_per_token`), and how
        many calls it is over; None under the minimum.

        The tokenizer is the model's, so only that model's calls count; among them, those on this
        host and those with no host, recorded before hosts were named (one host then). A host whose
        model changed starts again from the new model's calls."""
        with self.file.connect() as con:
            rows = con.execute(
                f"""SELECT prompt_bytes, prompt_tokens FROM attempts
                   -- the rule of digest.tokens.is_calibration_sample
                   WHERE outcome = 'ok' AND NOT cached AND prompt_tokens > 0 AND prompt_bytes >= ?
                     AND {plausible_count_sql()} AND model = ? AND (host = ? OR host IS NULL)
                   ORDER BY attempt_id DESC LIMIT ?""",
                [CALIBRATION_MIN_PROMPT_BYTES, model, host, CALIBRATION_RECENT],
            ).fetchall()
        return conservative_bytes_per_token(rows)
