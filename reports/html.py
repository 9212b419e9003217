"""A self-contained HTML rendering of a report: the page a person reads.

Failures first: the verdict, a per-class table, every clause not passed with
its rule (rendered from the spec's Markdown), the failed check, expected
versus observed and a replay command; then every clause in a table that can
be filtered by outcome, class and text and sorted by any column; the state
machines, each violation drawn as a timeline in the manner of Porcupine's
(one row per call, grouped by lane, a bar from invocation to response, calls
no legal order explains in red) with the call and its result written beside
the bar, wrapped, never clipped; and the store and environment as a table.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from .model import NOT_PASSED, OUTCOMES
from .text import _COLUMNS, machine_figures, per_class

__all__ = ["markdown_inline", "render_html", "timeline_html", "write_html"]

_COLOURS = {
    "passed": "#1a7f37",
    "failed": "#cf222e",
    "untested": "#9a6700",
    "skipped": "#9a6700",
    "waived": "#8250df",
    "not claimed": "#6e7781",
}
assert set(_COLOURS) == set(OUTCOMES), "a colour per outcome of the schema"

_e = html.escape


def markdown_inline(text: str) -> str:
    """The spec's Markdown (inline code, bold, emphasis, links' text, and
    paragraphs) as HTML; everything else is escaped."""
    out = []
    for paragraph in re.split(r"\n\s*\n", text.strip()):
        parts = re.split(r"(`[^`]*`)", " ".join(paragraph.split()))
        rendered = []
        for part in parts:
            if part.startswith("`") and part.endswith("`") and len(part) >= 2:
                rendered.append(f"<code>{_e(part[1:-1])}</code>")
                continue
            piece = _e(part)
            piece = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", piece)
            piece = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", piece)
            piece = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", piece)
            rendered.append(piece)
        out.append("".join(rendered))
    return "<br>".join(out)


def timeline_html(picture: dict[str, Any]) -> str:
    """A recorded history (see ``stateful.history.timeline_data``) as rows:
    lane, a bar placed by time, and the call with its result beside it."""
    calls = picture["calls"]
    lanes = picture["lanes"]
    if not calls:
        return "<p>(empty history)</p>"
    end = max((c["end_us"] if c["end_us"] is not None else c["start_us"]) for c in calls) or 1
    rows = []
    for lane, name in enumerate(lanes):
        for c in (c for c in calls if c["lane"] == lane):
            stop = c["end_us"] if c["end_us"] is not None else end
            left = 100 * c["start_us"] / end
            width = max(100 * (stop - c["start_us"]) / end, 0.8)
            width = min(width, 100 - left) if left < 100 else 0.8
            kind = "bad" if c["unexplained"] else ("ok" if c["end_us"] is not None else "open")
            mark = "✗ " if c["unexplained"] else ""
            rows.append(
                f'<div class="tl-row {kind}"><div class="tl-lane">{_e(name)}</div>'
                f'<div class="tl-track"><div class="tl-bar" style="left:{left:.2f}%;width:{width:.2f}%"></div></div>'
                f'<div class="tl-label" title="{_e(c["call"])} {_e(c["outcome"])}">{mark}#{c["index"]} '
                f'<code>{_e(c["call"])}</code> <span class="tl-outcome">{_e(c["outcome"])}</span></div></div>'
            )
    return (
        '<div class="timeline"><div class="tl-row tl-head"><div>lane</div><div>time →</div>'
        '<div>call and result (✗: no order explains it)</div></div>' + "".join(rows) + "</div>"
    )


def _kv_table(rows: list[tuple[str, Any]]) -> str:
    cells = "".join(f"<tr><th>{_e(str(k))}</th><td>{_e(str(v))}</td></tr>" for k, v in rows if v not in (None, ""))
    return f"<table class=kv>{cells}</table>"


def _failure_block(failure: dict[str, Any]) -> str:
    parts = [f"<div class=test>test <code>{_e(failure['test'])}</code>"
             + (f" at <code>{_e(failure['where'])}</code>" if failure.get("where") else "") + "</div>"]
    if failure.get("check"):
        parts.append(f"<div>checked <code>{_e(failure['check'])}</code></div>")
    if failure.get("expected") or failure.get("observed"):
        parts.append(
            "<table class=eo><tr><th>expected</th><td><code>" + _e(failure.get("expected", "")) + "</code></td></tr>"
            "<tr><th>observed</th><td><code>" + _e(failure.get("observed", "")) + "</code></td></tr></table>"
        )
    else:
        parts.append(f"<div class=summary>{_e(failure['summary'])}</div>")
    if failure.get("replay"):
        parts.append(f"<div class=replay>replay <code>{_e(failure['replay'])}</code></div>")
    parts.append(f"<details><summary>whole message</summary><pre>{_e(failure['message'])}</pre></details>")
    return "<div class=failure>" + "".join(parts) + "</div>"


def _clause_detail(clause: dict[str, Any]) -> str:
    body = [f"<div class=rule>{markdown_inline(clause['text'])}</div>"]
    body += [_failure_block(f) for f in clause.get("failures", [])[:3]]
    body += [f"<div class=note>{_e(n)}</div>" for n in clause.get("notes", [])[:5]]
    if clause.get("waiver"):
        w = clause["waiver"]
        body.append(f"<div class=note>waiver: {_e(w['reason'])} (until {_e(w['expires'])})</div>")
    return "".join(body)


def render_html(report: dict[str, Any]) -> str:
    store = report["store"]
    rank = {o: i for i, o in enumerate(OUTCOMES)}
    clauses = sorted(report["clauses"], key=lambda c: rank[c["outcome"]])  # failures first (stable)
    verdict_class = "ok" if report["certified"] else ("warn" if report["gate"] == "pass" else "bad")

    class_rows = []
    for cls, row in per_class(report).items():
        status = report["classes"].get(cls, "applies to every claimed class")
        class_rows.append(f"<tr><td>{_e(cls)}</td><td>{_e(status)}</td>"
                          + "".join(f"<td class=num>{row[c] or ''}</td>" for c in _COLUMNS) + "</tr>")

    bad = [c for c in clauses if c["outcome"] in NOT_PASSED]
    unsettled = [c for c in bad if c["outcome"] != "failed"]
    failures = "".join(
        f"<section class='clause-failure' id='f-{_e(c['id'])}'><h3><span class='badge o-{c['outcome'].replace(' ', '-')}'>"
        f"{_e(c['outcome'])}</span> <code>{_e(c['id'])}</code> <small>{_e(c['class'])}</small></h3>"
        f"{_clause_detail(c)}</section>"
        for c in bad[:50] if c["outcome"] == "failed"
    ) or "<p>No clause failed.</p>"
    if unsettled:
        failures += (f"<h3>Not established ({len(unsettled)})</h3><ul class=unsettled>" + "".join(
            f"<li><span class='badge o-{c['outcome']}'>{_e(c['outcome'])}</span> <code>{_e(c['id'])}</code>: "
            f"{_e((c.get('notes') or ['no test of it ran'])[0])}</li>" for c in unsettled) + "</ul>")

    rows = []
    for i, c in enumerate(clauses):
        outcome = c["outcome"]
        detail = _clause_detail(c) if outcome not in ("passed",) else f"<div class=rule>{markdown_inline(c['text'])}</div>"
        rows.append(
            f"<tr class=clause data-outcome='{_e(outcome)}' data-class='{_e(c['class'])}' data-id='{_e(c['id'])}'"
            f" data-rank='{rank[outcome]}' data-order='{i}'>"
            f"<td><code>{_e(c['id'])}</code></td><td>{_e(c['class'])}</td>"
            f"<td><span class='badge o-{outcome.replace(' ', '-')}'>{_e(outcome)}</span></td>"
            f"<td>{detail}</td></tr>"
        )

    machines = []
    for name, figures in (report.get("machines") or {}).items():
        machines.append(f"<li><b>{_e(name)}</b>: {_e(machine_figures(figures))}</li>")
    pictures = []
    for name, figures in (report.get("machines") or {}).items():
        picture = figures.get("violation")
        if picture:
            pictures.append(
                f"<section class=violation><h3>{_e(name)}: violation of {_e(str(picture.get('clauses', '')))}</h3>"
                + timeline_html(picture)
                + "<details open><summary>minimal scenario (runnable)</summary><pre>"
                + _e(picture.get("scenario", "")) + "</pre></details></section>"
            )

    env_rows: list[tuple[str, Any]] = [(k, v) for k, v in store.items() if not isinstance(v, (dict, list))]
    env_rows += [(k, ", ".join(map(str, v))) for k, v in store.items() if isinstance(v, list)]
    env_rows += list(report["environment"].items())
    run = report["run"]
    env_rows += [("command", run["command"]), ("seed", f"{run['seed']} ({run.get('seed_source', '?')})"),
                 ("workers", run["workers"]), ("started", report["started_at"]),
                 ("duration", f"{report['duration_s']:.1f}s"), ("waiver file", report["waivers"]["file"])]

    waiver_rows = []
    for kind, label in (("expired", "expired: fails the run"), ("applied", "waived"),
                        ("stale", "stale: the clause passes, remove the waiver")):
        for w in report["waivers"][kind]:
            waiver_rows.append(f"<tr><td><code>{_e(w['clause'])}</code></td><td>{_e(label)}</td>"
                               f"<td>{_e(w.get('outcome', ''))}</td><td>{_e(w['reason'])}</td><td>{_e(w['expires'])}</td></tr>")
    waivers = ("<h2>Waivers</h2><table><tr><th>clause</th><th>waiver</th><th>outcome</th><th>reason</th>"
               "<th>expires</th></tr>" + "".join(waiver_rows) + "</table>") if waiver_rows else ""

    outcome_options = "".join(f"<label><input type=checkbox class=f-outcome value='{_e(o)}' checked> "
                              f"<span class='badge o-{o.replace(' ', '-')}'>{_e(o)}</span> "
                              f"{report['counts'].get(o, 0)}</label> " for o in OUTCOMES)
    class_options = "".join(f"<option value='{_e(c)}'>{_e(c)}</option>" for c in per_class(report))
    badge_css = "".join(f".o-{o.replace(' ', '-')} {{ background: {col} }}\n" for o, col in _COLOURS.items())
    return f"""<!doctype html>
<html lang=en><head><meta charset="utf-8"><meta name=viewport content="width=device-width, initial-scale=1">
<title>cortex-spec: {_e(str(store.get('name')))}: {_e(report['verdict'])}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #1f2328; max-width: 100%; box-sizing: border-box }}
* {{ box-sizing: border-box }}
table {{ border-collapse: collapse; width: 100%; table-layout: auto }}
td, th {{ border-bottom: 1px solid #d0d7de; padding: 4px 8px; vertical-align: top; text-align: left;
          overflow-wrap: anywhere }}
td.num {{ text-align: right }}
code {{ font-family: ui-monospace, monospace; font-size: 12px; background: #f6f8fa; padding: 0 3px;
        overflow-wrap: anywhere; white-space: pre-wrap }}
pre {{ background: #f6f8fa; padding: 1em; white-space: pre-wrap; overflow-wrap: anywhere; font-size: 12px }}
.badge {{ color: white; border-radius: 10px; padding: 1px 8px; font-size: 12px; white-space: nowrap }}
{badge_css}
.verdict {{ font-size: 1.3em; font-weight: bold; padding: .5em; border-radius: 6px }}
.verdict.ok {{ background: #dafbe1 }} .verdict.bad {{ background: #ffebe9 }} .verdict.warn {{ background: #fbefff }}
.clause-failure {{ border-left: 4px solid #cf222e; padding: .2em 1em; margin: 1em 0; background: #fffafa }}
.failure {{ margin: .5em 0; padding: .4em; border: 1px solid #eaeef2; border-radius: 4px }}
table.eo th {{ width: 7em; white-space: nowrap; overflow-wrap: normal }} table.kv th {{ width: 14em }}
.note {{ color: #57606a; font-size: 13px }}
.filters {{ position: sticky; top: 0; background: white; padding: .5em 0; border-bottom: 1px solid #d0d7de; z-index: 1 }}
th.sort {{ cursor: pointer; text-decoration: underline dotted }}
.timeline {{ width: 100%; font-size: 12px; border: 1px solid #d0d7de }}
.tl-row {{ display: grid; grid-template-columns: minmax(5em, 10em) minmax(8em, 1fr) minmax(12em, 2fr);
           gap: 8px; align-items: center; border-bottom: 1px solid #f0f0f0; padding: 2px 4px }}
.tl-head {{ font-weight: bold; background: #f6f8fa }}
.tl-track {{ position: relative; height: 14px; background: #f6f8fa }}
.tl-bar {{ position: absolute; top: 1px; height: 12px; border-radius: 3px; background: #0969da }}
.tl-row.bad .tl-bar {{ background: #cf222e }} .tl-row.open .tl-bar {{ background: #8c959f }}
.tl-row.bad .tl-label {{ color: #cf222e; font-weight: bold }}
.tl-label {{ overflow-wrap: anywhere; min-width: 0 }}
</style></head><body>
<h1>cortex-spec certification: {_e(str(store.get('name')))}</h1>
<p class="verdict {verdict_class}" id=verdict>{_e(report['verdict'])}</p>
<p>profile {_e(report['profile'])} · {report['duration_s']:.1f}s · seed {run['seed']} · started {_e(report['started_at'])}</p>
<h2>Classes</h2>
<table id=classes><tr><th>class</th><th>status</th>{''.join(f'<th>{_e(c)}</th>' for c in _COLUMNS)}</tr>
{''.join(class_rows)}</table>
<h2>Clauses not passed ({len(bad)})</h2>
{failures}
{waivers}
<h2>State machines</h2><ul>{''.join(machines) or '<li>none ran</li>'}</ul>
{''.join(pictures)}
<h2>Every clause</h2>
<div class=filters>
<span>outcome:</span> {outcome_options}
<label>class <select id=f-class><option value=''>every class</option>{class_options}</select></label>
<label>text <input id=f-text type=search placeholder="clause id or words"></label>
<span id=f-count></span>
</div>
<table id=clauses><thead><tr><th class=sort data-key=id>clause</th><th class=sort data-key=class>class</th>
<th class=sort data-key=rank>outcome</th><th>rule</th></tr></thead>
<tbody>{''.join(rows)}</tbody></table>
<h2>Store and environment</h2>
{_kv_table(env_rows)}
<script>
(function () {{
  const rows = Array.from(document.querySelectorAll('#clauses tbody tr.clause'));
  const boxes = Array.from(document.querySelectorAll('.f-outcome'));
  const cls = document.getElementById('f-class'), text = document.getElementById('f-text');
  function apply() {{
    const outcomes = new Set(boxes.filter(b => b.checked).map(b => b.value));
    const want = cls.value, words = text.value.toLowerCase();
    let shown = 0;
    for (const r of rows) {{
      const ok = outcomes.has(r.dataset.outcome) && (!want || r.dataset.class === want)
        && (!words || r.textContent.toLowerCase().includes(words));
      r.style.display = ok ? '' : 'none';
      if (ok) shown++;
    }}
    document.getElementById('f-count').textContent = shown + ' of ' + rows.length + ' clauses';
  }}
  boxes.forEach(b => b.addEventListener('change', apply));
  cls.addEventListener('change', apply);
  text.addEventListener('input', apply);
  let last = 'rank', dir = 1;
  document.querySelectorAll('th.sort').forEach(th => th.addEventListener('click', () => {{
    const key = th.dataset.key;
    dir = key === last ? -dir : 1; last = key;
    const body = document.querySelector('#clauses tbody');
    const value = r => key === 'rank' ? Number(r.dataset.rank) : r.dataset[key];
    rows.sort((a, b) => (value(a) > value(b) ? 1 : value(a) < value(b) ? -1
                         : Number(a.dataset.order) - Number(b.dataset.order)) * dir);
    rows.forEach(r => body.appendChild(r));
  }}));
  apply();
}})();
</script>
</body></html>
"""


def write_html(report: dict[str, Any], path: str | Path) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_html(report), encoding="utf-8")
    return target
