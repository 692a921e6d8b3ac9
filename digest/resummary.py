"""Planned re-summaries: which current summaries a user asks to have made again (after a model or
prompt change), and whether the new ones came out better, by (previous model → new model).

The criteria are the same for `session-digest plan --resummarize`, `sweep --resummarize` and the
UI's `request_resummaries` job; the store turns them into SQL (`resources.store.resummaries`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

# `code_version`: any summary code version but the running code's (a summary from before the store
# recorded it, NULL, counts as not current).
NOT_CURRENT = "not-current"
# `verdict`: any judged verdict but ok (echo, template, ...: `digest.verdict`).
ANY_JUNK = "junk"
# `origin`: what a re-summary may replace. Without it, generated summaries alone: an imported one is
# the export's word, made again only when asked for by `imported` (or `any`).
ORIGINS = ("generated", "imported", "any")


@dataclass(frozen=True)
class ResummaryCriteria:
    """What selects a current summary for a re-summary (generated, unless `origin` says otherwise);
    every given criterion must hold."""

    model: str | None = None
    host: str | None = None
    code_version: str | None = None  # a version, or `NOT_CURRENT`
    tier: str | None = None  # source_tier: raw | miniSummary | turnCards | truncatedRaw
    verdict: str | None = None  # a verdict, or `ANY_JUNK`
    fidelity_below: float | None = None
    origin: str | None = None  # one of `ORIGINS`; None: generated

    def __post_init__(self) -> None:
        if self.origin is not None and self.origin not in ORIGINS:
            raise ValueError(f"origin {self.origin!r} is not one of {', '.join(ORIGINS)}")

    @classmethod
    def of(cls, values: dict) -> ResummaryCriteria:
        """From a mapping (parsed arguments, run config): blank values are no criterion."""
        given = {f.name: values.get(f.name) for f in fields(cls)}
        return cls(**{k: v for k, v in given.items() if v not in (None, "")})

    @property
    def given(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def to_json(self) -> str:
        return json.dumps(self.given, sort_keys=True)

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.given.items()) or "no criterion"


@dataclass(frozen=True)
class BeforeAfter:
    """Finished re-summaries of one (previous model → new model): how many, and the mean fidelity and
    share of ok verdicts before and after (a junk one that was not stored counts as not ok, with no
    fidelity)."""

    previous_model: str
    new_model: str
    count: int
    fidelity_before: float | None
    fidelity_after: float | None
    ok_before: float
    ok_after: float
    kept_previous: int  # of `count`, judged junk and not stored: the previous summary stands


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def before_after(done: list[dict]) -> list[BeforeAfter]:
    """`done`: finished requests with `previous_*` and `new_*` model, verdict, fidelity and
    `outcome`; grouped by (previous model → new model), most re-summaries first."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in done:
        key = (row["previous_model"] or "?", row["new_model"] or "?")
        groups.setdefault(key, []).append(row)
    out = []
    for (previous, new), rows in groups.items():
        n = len(rows)
        out.append(
            BeforeAfter(
                previous,
                new,
                n,
                _mean([r["previous_fidelity"] for r in rows if r["previous_fidelity"] is not None]),
                _mean([r["new_fidelity"] for r in rows if r["new_fidelity"] is not None]),
                round(sum(r["previous_verdict"] == "ok" for r in rows) / n, 3),
                round(sum(r["new_verdict"] == "ok" for r in rows) / n, 3),
                sum(r["outcome"] == KEPT_PREVIOUS for r in rows),
            )
        )
    return sorted(out, key=lambda g: (-g.count, g.previous_model, g.new_model))


# A request's outcome: its session's summary replaced by the new one, or the new one judged junk and
# the previous ok summary kept (`resources.store.summaries.write_summary`).
REPLACED = "replaced"
KEPT_PREVIOUS = "kept-previous"
