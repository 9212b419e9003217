"""Plain-text rendering of a report: the summary table the CLI prints."""

from __future__ import annotations

from typing import Any

__all__ = ["render_summary"]

_COLUMNS = ("passed", "failed", "untested", "skipped", "not claimed")


def render_summary(report: dict[str, Any], *, max_failures: int = 40) -> str:
    """A per-class table of clause outcomes, the failures, and the verdict."""
    per_class: dict[str, dict[str, int]] = {}
    for clause in report["clauses"]:
        row = per_class.setdefault(clause["class"], {c: 0 for c in _COLUMNS})
        row[clause["outcome"]] += 1

    name_w = max([len("class")] + [len(c) for c in per_class])
    header = "  ".join([f"{'class':<{name_w}}"] + [f"{c:>11}" for c in _COLUMNS])
    lines = [
        f"cortex-spec certification of {report['store'].get('name', '?')} "
        f"(profile {report['profile']}, {report['duration_s']:.1f}s)",
        "",
        header,
        "-" * len(header),
    ]
    for cls, row in per_class.items():
        status = report["classes"].get(cls)
        label = cls if status != "not claimed" else f"{cls}"
        lines.append("  ".join([f"{label:<{name_w}}"] + [f"{row[c]:>11}" for c in _COLUMNS]))
    total = {c: sum(r[c] for r in per_class.values()) for c in _COLUMNS}
    lines.append("-" * len(header))
    lines.append("  ".join([f"{'total':<{name_w}}"] + [f"{total[c]:>11}" for c in _COLUMNS]))

    failed = [c for c in report["clauses"] if c["outcome"] in ("failed", "untested", "skipped")]
    if failed:
        lines += ["", "Clauses not passed:"]
        for clause in failed[:max_failures]:
            lines.append(f"  {clause['id']} [{clause['outcome']}] {clause['text'][:100]}")
            for msg in clause.get("messages", [])[:2]:
                lines.append(f"      {msg[:160]}")
        if len(failed) > max_failures:
            lines.append(f"  … and {len(failed) - max_failures} more (see the JSON report)")

    machines = report.get("machines") or {}
    if machines:
        lines += ["", "State machines:"]
        for name, figures in machines.items():
            shown = ", ".join(f"{k} {v}" for k, v in figures.items())
            lines.append(f"  {name}: {shown}")

    lines += ["", report["verdict"]]
    return "\n".join(lines)
