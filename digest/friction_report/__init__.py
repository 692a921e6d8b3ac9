"""The friction report: what the store says an operator should tune, as Markdown and as an HTML file.

`compute` holds the figures (and the rules behind them), `render` their sections and the two
renderers, the HTML page through the autoescaped template `templates/report.html`. The public
names are re-exported here.
"""

from digest.friction_report.compute import (
    Bucket,
    FrictionGroup,
    FrictionReport,
    ModelCalibration,
    PreRoutes,
    SymptomRollup,
    activity_series,
    build_report,
    calibrate,
    calibrate_model,
    group_friction,
    percentile,
    pre_routes,
    rollup_by_symptom,
    surfaced_at,
)
from digest.friction_report.render import (
    Section,
    Table,
    chart,
    degraded_against_raw,
    fidelity_rows,
    junk_rows,
    render_html,
    render_markdown,
    sections,
)

__all__ = [
    "Bucket",
    "FrictionGroup",
    "FrictionReport",
    "ModelCalibration",
    "PreRoutes",
    "Section",
    "SymptomRollup",
    "Table",
    "activity_series",
    "build_report",
    "calibrate",
    "calibrate_model",
    "chart",
    "degraded_against_raw",
    "fidelity_rows",
    "group_friction",
    "junk_rows",
    "percentile",
    "pre_routes",
    "render_html",
    "render_markdown",
    "rollup_by_symptom",
    "sections",
    "surfaced_at",
]
