"""The session summary row, defined once: `session_summaries`' DDL, the summary writer's and the
imported summary's column lists, and the plain entries of the partition's materialization metadata
are all derived from `SUMMARY_ROW`.

The model-generated columns are `SessionSummaryOutput`'s fields (their SQL type follows the Python
type), so a model field is added in `digest/summary_output.py` and nowhere here. A pipeline column
(one the run or the store fills) is a `Column` below. Either way an older store gets it from a
numbered migration (`resources/store/migrations.py`, `summary_column(name)`).
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Literal, Union, get_args, get_origin

from digest.summary_output import SessionSummaryOutput


@dataclass(frozen=True)
class Column:
    name: str
    sql: str  # its type and constraint, as in CREATE TABLE
    comment: str = ""
    # Its value when an export's summary is adopted, as SQL over `i` (imported_summaries), `s`
    # (sessions), `minis` and the parameter `?` (now); None: the adoption leaves it as it was.
    imported: str | None = None
    shown: bool = False  # a plain entry of the partition's materialization metadata
    none_as: str = ""  # how that entry shows NULL (Dagster's metadata takes no None)


def _sql_type(annotation) -> str:
    origin = get_origin(annotation)
    if origin is Literal or annotation is str:
        return "VARCHAR"
    if origin in (Union, types.UnionType):
        return _sql_type(next(a for a in get_args(annotation) if a is not type(None)))
    if origin is list:
        return f"{_sql_type(get_args(annotation)[0])}[]"
    return {int: "INTEGER", float: "DOUBLE", bool: "BOOLEAN"}[annotation]


_ZERO = {"VARCHAR": "''", "INTEGER": "0", "DOUBLE": "0", "BOOLEAN": "false"}


def _model_column(name: str, field) -> Column:
    sql = _sql_type(field.annotation)
    zero = "[]" if sql.endswith("[]") else _ZERO[sql]
    # An exported summary's field of the same name (imported_summaries has the original's eight).
    imported = "i.summary" if name == "summary" else f"coalesce(i.{name}, {zero})" if name in _IMPORTED else zero
    return Column(name, f"{sql} NOT NULL", field.description or "", imported=imported)


_IMPORTED = {"title", "category", "quality", "productivity", "impact", "complexity", "technologies"}

MODEL_COLUMNS = tuple(_model_column(n, f) for n, f in SessionSummaryOutput.model_fields.items())

_TIER = "coalesce(i.source_tier, 'raw')"
# An adopted summary is current for the session's turns as they are: it covers every one of them.
_EVERY_TURN = "(SELECT list(t.id ORDER BY t.ts_ms NULLS FIRST, t.id) FROM turns t WHERE t.session_id = s.session_id)"
PIPELINE_COLUMNS = (
    Column("source_tier", "VARCHAR NOT NULL", "raw | miniSummary | turnCards | truncatedRaw", _TIER, shown=True),
    Column("degraded", "BOOLEAN NOT NULL", "", f"coalesce(i.degraded, {_TIER} <> 'raw')", shown=True),
    Column("raw_canonical", "BOOLEAN NOT NULL", "", "coalesce(i.raw_canonical, true)", shown=True),
    Column("memory_count", "INTEGER NOT NULL", "", "s.turn_count", shown=True),
    Column("mini_summary_count", "INTEGER NOT NULL", "", "coalesce(minis.n, 0)"),
    Column(
        "mini_summary_coverage", "DOUBLE",
        "share of the turn lines of a degraded input that were mini summaries (NULL: raw input, or imported)",
        "NULL", shown=True, none_as="none",
    ),
    Column(
        "coverage_step", "INTEGER",
        "the mini-summary coverage step a degraded summary was made at: 0 under half, 1 from half, 2 none left "
        "to make (NULL: raw input, or imported); a higher step since makes it again",
        "NULL", shown=True, none_as="none",
    ),
    Column("input_revision", "VARCHAR NOT NULL", "", "s.input_revision", shown=True),
    Column("model", "VARCHAR NOT NULL", "", "''", shown=True),
    Column("raw_tokens_estimate", "INTEGER NOT NULL", "", "0", shown=True),
    Column("prompt_tokens_estimate", "INTEGER NOT NULL", "", "0", shown=True),
    Column("raw_cap_tokens", "INTEGER", "NULL: the cap was off", "NULL", shown=True, none_as="off"),
    Column(
        "raw_cap_source", "VARCHAR", "where that cap came from: pinned | off | auto | auto-unmeasured (NULL: imported)",
        "NULL", shown=True,
    ),
    Column(
        "route_reason", "VARCHAR NOT NULL", "within-cap | over-raw-cap | over-safe-band | raw-timeout | raw-junk",
        "'imported'", shown=True,
    ),
    Column("first_activity_ms", "BIGINT", "", "s.first_activity_ms"),
    Column("last_activity_ms", "BIGINT", "", "s.last_activity_ms"),
    Column("participating_agents", "VARCHAR[] NOT NULL", "", "coalesce(i.participating_agents, [])"),
    Column("models", "VARCHAR[] NOT NULL", "", "coalesce(i.models, [])"),
    Column("total_tool_calls", "INTEGER NOT NULL", "", "coalesce(i.total_tool_calls, 0)"),
    Column("tools_used", "VARCHAR[] NOT NULL", "", "coalesce(i.tools_used, [])"),
    Column("source_agent_identities", "VARCHAR[] NOT NULL", "", "coalesce(i.source_agent_identities, [])"),
    Column("run_id", "VARCHAR", "", "NULL"),
    Column("created_at", "TIMESTAMPTZ NOT NULL", "", "?"),
    Column(
        "origin", "VARCHAR DEFAULT 'generated'", "generated | imported (an export's summary, current for the turns)",
        "'imported'", shown=True,
    ),
    Column("host", "VARCHAR", "the model host that made it (NULL: imported, or made before hosts)", shown=True),
    Column("host_reason", "VARCHAR", "why the sweep sent it to that host", shown=True),
    Column(
        "raw_tokens_source", "VARCHAR",
        "what the route was decided on: tokenizer | pinned | ledger | default (bytes/token)", shown=True,
    ),
    Column(
        "raw_tokens_counted", "INTEGER",
        "the host tokenizer's count of the raw prompt + the chat template margin; NULL: none", shown=True,
    ),
    Column("fidelity", "DOUBLE", "0-1, digest/fidelity.py; NULL: no text to score", shown=True, none_as="none"),
    Column("fidelity_found", "VARCHAR[]", "the top identifiers of the session the summary names"),
    Column("fidelity_missed", "VARCHAR[]", "those it does not"),
    Column(
        "verdict", "VARCHAR",
        "ok | echo | fabricated | template | content-free | empty | too-long, digest/verdict.py; NULL: not judged yet",
        shown=True, none_as="none",
    ),
    Column("verdict_evidence", "VARCHAR", "JSON: what the verdict measured (fragments, unknown identifiers, ...)"),
    Column(
        "covered_turn_ids", "VARCHAR[]",
        "the turns its prompt carried, in prompt order (imported: every turn of the session); NULL: made before",
        _EVERY_TURN,
    ),
    Column(
        "mini_turn_ids", "VARCHAR[]",
        "of those, the ones carried by their mini summary (a degraded summary's others went truncated raw)", "NULL",
    ),
    Column(
        "code_version", "VARCHAR",
        "the summary code version it was made under (digest/prompts.py); NULL: imported, or made before", "NULL",
    ),
)  # fmt: skip

KEY = Column("session_id", "VARCHAR PRIMARY KEY", imported="s.session_id", shown=True)
SUMMARY_ROW: tuple[Column, ...] = (KEY, *MODEL_COLUMNS, *PIPELINE_COLUMNS)
COLUMNS = {c.name: c for c in SUMMARY_ROW}


def summary_ddl() -> str:
    """`session_summaries`' CREATE TABLE (idempotent), in the row's order."""
    lines = ",\n".join(f"    {c.name} {c.sql}" + (f"  -- {c.comment}" if c.comment else "") for c in SUMMARY_ROW)
    # A comment ends its line, so the comma goes before it.
    lines = "\n".join(_comma_before_comment(line) for line in lines.split("\n"))
    return f"CREATE TABLE IF NOT EXISTS session_summaries (\n{lines}\n);"


def _comma_before_comment(line: str) -> str:
    if "  -- " in line and line.endswith(","):
        body, comment = line[:-1].split("  -- ", 1)
        return f"{body},  -- {comment}"
    return line


def summary_column(name: str) -> str:
    """The migration that adds a column of the row to an older store (nullable: DuckDB adds no
    column with a constraint; the writers always fill it)."""
    return f"ALTER TABLE session_summaries ADD COLUMN IF NOT EXISTS {name} {COLUMNS[name].sql.replace(' NOT NULL', '')}"


def adopt_columns() -> list[Column]:
    """The columns an adopted export's summary sets."""
    return [c for c in SUMMARY_ROW if c.imported is not None]
