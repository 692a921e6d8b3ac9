"""The one backoff formula: a wait that doubles with each retry, up to a cap."""

from __future__ import annotations


def doubling_backoff_s(attempt: int, base_s: float, max_s: float) -> float:
    """The wait before retry number `attempt` (1 = the first): `base_s`, doubling each time, never
    more than `max_s`."""
    # The exponent bounded: weeks of retries would overflow a float, long after the max binds.
    return min(max_s, base_s * 2 ** min(max(0, attempt - 1), 64))
