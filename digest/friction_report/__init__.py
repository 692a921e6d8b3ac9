"""The friction report: what the store says an operator should tune, as Markdown and as an HTML file.

`compute` holds the figures (and the rules behind them), `render` their sections and the two
renderers, the HTML page through the autoescaped template `templates/report.html`. The public
names are re-exported here.
"""

from digest.friction_report.compute import (
    Bucket,
    CurvePoint,
    FrictionGroup,
    FrictionReport,
    ModelCalibration,
    PreRoutes,
    SymptomRollup,
    activity_series,
    build_report,
    calibrate,
    calibrate_model,
    first_summary_curve,
    group_friction,
    percentile,
    pre_routes,
    rollup_by_symptom,
    seconds_to_share,
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
    "CurvePoint",
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
    "first_summary_curve",
    "degraded_against_raw",
    "fidelity_rows",
    "group_friction",
    "junk_rows",
    "percentile",
    "pre_routes",
    "render_html",
    "render_markdown",
    "rollup_by_symptom",
    "seconds_to_share",
    "sections",
    "surfaced_at",
]
