"""A self-contained HTML rendering of a report, with history pictures.

Every clause is a row coloured by outcome; every machine violation is drawn
as a timeline in the manner of Porcupine's visualisation: one lane per
branch, one bar per call from invocation to response, calls no legal order
explains in red, and the runnable minimal scenario beside it.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

__all__ = ["render_html", "write_html", "timeline_svg"]

_COLOURS = {
    "passed": "#1a7f37",
    "failed": "#cf222e",
    "untested": "#9a6700",
    "skipped": "#9a6700",
    "not claimed": "#6e7781",
}


def timeline_svg(picture: dict[str, Any], width: int = 960) -> str:
    """An SVG timeline of one recorded history (see ``timeline_data``)."""
    calls = picture["calls"]
    lanes = picture["lanes"]
    if not calls:
        return "<p>(empty history)</p>"
    end = max((c["end_us"] if c["end_us"] is not None else c["start_us"]) for c in calls) or 1
    left, row_h, lane_gap = 120, 22, 10
    rows_per_lane = {i: [c for c in calls if c["lane"] == i] for i in range(len(lanes))}
    y = 10
    parts = []
    scale = (width - left - 20) / end
    for lane, name in enumerate(lanes):
        rows = rows_per_lane.get(lane, [])
        if not rows:
            continue
        height = row_h * len(rows)
        parts.append(
            f'<rect x="0" y="{y - 4}" width="{width}" height="{height + 8}" fill="#f6f8fa"/>'
            f'<text x="6" y="{y + 15}" font-size="12" font-weight="bold">{html.escape(name)}</text>'
        )
        for r, c in enumerate(rows):
            x0 = left + c["start_us"] * scale
            x1 = left + (c["end_us"] if c["end_us"] is not None else end) * scale
            colour = "#cf222e" if c["unexplained"] else ("#0969da" if c["end_us"] is not None else "#8c959f")
            title = html.escape(f'#{c["index"]} {c["call"]} {c["outcome"]}')
            label = html.escape(f'#{c["index"]} {c["call"]}  {c["outcome"]}')
            ry = y + r * row_h
            parts.append(
                f'<g><title>{title}</title>'
                f'<rect x="{x0:.1f}" y="{ry + 3}" width="{max(x1 - x0, 2):.1f}" height="14" rx="3" '
                f'fill="{colour}" opacity="0.85"/>'
                f'<text x="{x0 + 3:.1f}" y="{ry + 14}" font-size="11" fill="#1f2328" '
                f'style="paint-order:stroke" stroke="white" stroke-width="3">{label}</text></g>'
            )
        y += height + lane_gap + 8
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" '
        f'font-family="ui-monospace, monospace">{"".join(parts)}</svg>'
    )


def render_html(report: dict[str, Any]) -> str:
    e = html.escape
    store = report["store"]
    verdict_colour = "#1a7f37" if report["certified"] else "#cf222e"
    rows = []
    for c in report["clauses"]:
        colour = _COLOURS.get(c["outcome"], "#1f2328")
        msgs = "".join(f"<div class=msg>{e(m)}</div>" for m in c.get("messages", []))
        rows.append(
            f"<tr><td><code>{e(c['id'])}</code></td><td>{e(c['class'])}</td>"
            f"<td style='color:{colour};font-weight:bold'>{e(c['outcome'])}</td>"
            f"<td>{e(c['text'])}{msgs}</td></tr>"
        )
    machines = []
    for name, figures in (report.get("machines") or {}).items():
        shown = ", ".join(f"{k} {v}" for k, v in figures.items() if k != "violation")
        machines.append(f"<li><b>{e(name)}</b>: {e(shown)}</li>")
        picture = figures.get("violation")
        if picture:
            machines.append(
                f"<h3>{e(name)}: {e(picture.get('clauses', ''))} violation</h3>"
                + timeline_svg(picture)
                + "<details open><summary>minimal scenario</summary><pre>"
                + e(picture.get("scenario", ""))
                + "</pre></details>"
            )
    counts = ", ".join(f"{k} {v}" for k, v in report["counts"].items())
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>cortex-spec: {e(str(store.get('name')))}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #1f2328 }}
table {{ border-collapse: collapse; width: 100% }}
td, th {{ border-bottom: 1px solid #d0d7de; padding: 4px 8px; vertical-align: top; text-align: left }}
.msg {{ font-family: monospace; font-size: 12px; color: #cf222e; white-space: pre-wrap }}
pre {{ background: #f6f8fa; padding: 1em; overflow-x: auto }}
</style></head><body>
<h1>cortex-spec certification: {e(str(store.get('name')))}</h1>
<p style="font-size:1.3em;color:{verdict_colour};font-weight:bold">{e(report['verdict'])}</p>
<p>profile {e(report['profile'])} · {report['duration_s']:.1f}s · started {e(report['started_at'])}
· clauses: {e(counts)}</p>
<pre>{e(repr(store))}</pre>
<h2>State machines</h2><ul>{''.join(machines) or '<li>none ran</li>'}</ul>
<h2>Clauses</h2>
<table><tr><th>clause</th><th>class</th><th>outcome</th><th>rule</th></tr>
{''.join(rows)}
</table></body></html>
"""


def write_html(report: dict[str, Any], path: str | Path) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_html(report), encoding="utf-8")
    return target
