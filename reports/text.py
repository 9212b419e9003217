"""Plain-text rendering of a report: the summary table the CLI prints, and
the failures the terminal summary leads with."""

from __future__ import annotations

from typing import Any

from cortex_spec.words import clip

from .model import NOT_PASSED, OUTCOMES

__all__ = ["machine_figures", "per_class", "render_failures", "render_summary", "rule_text"]

#: the table's columns: every clause outcome, the good ones first
_COLUMNS = ("passed", *[o for o in OUTCOMES if o != "passed"])


def rule_text(clause: dict[str, Any], limit: int = 200) -> str:
    """A clause's rule on one line, Markdown backticks dropped, clipped at a word."""
    return clip(" ".join(clause["text"].replace("`", "").split()), limit)


def per_class(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Clause outcomes counted per class, in the catalogue's order."""
    table: dict[str, dict[str, int]] = {}
    for clause in report["clauses"]:
        row = table.setdefault(clause["class"], {c: 0 for c in _COLUMNS})
        row[clause["outcome"]] += 1
    return table


def machine_figures(figures: dict[str, Any]) -> str:
    """A machine's figures on one line (its violation picture is not a figure)."""
    shown = ", ".join(f"{k} {v}" for k, v in figures.items() if not isinstance(v, (dict, list)))
    violation = figures.get("violation")
    if isinstance(violation, dict):
        shown += f"; violation of {violation.get('clauses', '?')} (see the HTML report)"
    return shown


def render_failures(report: dict[str, Any], *, max_clauses: int = 20) -> str:
    """Every clause not passed, rule first, with its first failure's check,
    expected, observed and replay command: what the terminal leads with."""
    lines: list[str] = []
    rank = {o: i for i, o in enumerate(OUTCOMES)}
    bad = sorted((c for c in report["clauses"] if c["outcome"] in (*NOT_PASSED, "waived")),
                 key=lambda c: rank[c["outcome"]])
    for clause in bad[:max_clauses]:
        lines.append(f"{clause['outcome'].upper()} {clause['id']} ({clause['class']}): {rule_text(clause)}")
        for failure in clause.get("failures", [])[:1]:
            lines.append(f"    test:     {failure['test']}")
            for key in ("check", "expected", "observed"):
                if failure.get(key):
                    lines.append(f"    {key + ':':<9} {clip(failure[key], 300)}")
            if not failure.get("observed"):
                lines.append(f"    message:  {clip(failure['summary'], 300)}")
            if failure.get("replay"):
                lines.append(f"    replay:   {failure['replay']}")
        for note in clause.get("notes", [])[:1]:
            lines.append(f"    {clip(note, 300)}")
        if clause.get("waiver"):
            w = clause["waiver"]
            lines.append(f"    waiver:   {w['reason']} (until {w['expires']})")
    if len(bad) > max_clauses:
        lines.append(f"… and {len(bad) - max_clauses} more clause(s) not passed (see the report)")
    for key, what in (("expired", "EXPIRED WAIVER"), ("stale", "stale waiver (remove it)")):
        for w in report.get("waivers", {}).get(key, []):
            lines.append(f"{what}: {w['clause']} ({w.get('outcome', '?')}): {w['reason']} (expires {w['expires']})")
    return "\n".join(lines)


def render_summary(report: dict[str, Any], *, max_failures: int = 40) -> str:
    """A per-class table of clause outcomes, the failures, and the verdict."""
    if not any(report["tests"].values()):  # e.g. the backend could not start
        head = f"cortex-spec certification of {report['store'].get('name', '?')} (profile {report['profile']})"
        return "\n".join([f"{head}: no test ran", "", report["verdict"]])
    table = per_class(report)
    name_w = max([len("class")] + [len(c) for c in table])
    header = "  ".join([f"{'class':<{name_w}}"] + [f"{c:>11}" for c in _COLUMNS])
    lines = [
        (f"cortex-spec certification of {report['store'].get('name', '?')} "
         f"(profile {report['profile']}, {report['duration_s']:.1f}s)"),
        "",
        header,
        "-" * len(header),
    ]
    for cls, row in table.items():
        lines.append("  ".join([f"{cls:<{name_w}}"] + [f"{row[c]:>11}" for c in _COLUMNS]))
    total = {c: sum(r[c] for r in table.values()) for c in _COLUMNS}
    lines.append("-" * len(header))
    lines.append("  ".join([f"{'total':<{name_w}}"] + [f"{total[c]:>11}" for c in _COLUMNS]))

    failures = render_failures(report, max_clauses=max_failures)
    if failures:
        lines += ["", "Clauses not passed:", failures]

    machines = report.get("machines") or {}
    if machines:
        lines += ["", "State machines:"]
        for name, figures in machines.items():
            lines.append(f"  {name}: {machine_figures(figures)}")

    lines += ["", report["verdict"]]
    return "\n".join(lines)
