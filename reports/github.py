"""GitHub Actions workflow commands: one annotation per clause not passed.

``::error title=CP-RESOLVE-3 (checkpoints)::…`` for a failed clause and an
expired waiver, ``::warning`` for a claimed clause not established
(untested, skipped) and a waived one, ``::notice`` for a stale waiver.  Printed to standard output
by the pytest plugin when ``GITHUB_ACTIONS`` is ``true``, and by
``cortex-spec report --format github``.
"""

from __future__ import annotations

from typing import Any

from cortex_spec.words import clip

from .model import NOT_PASSED
from .text import rule_text

__all__ = ["annotation", "render_annotations"]


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, title: str, message: str) -> str:
    """One workflow command (``level`` error, warning or notice)."""
    return f"::{level} title={_prop(title)}::{_data(message)}"


def render_annotations(report: dict[str, Any], *, limit: int = 50) -> str:
    lines = []
    for clause in report["clauses"]:
        outcome = clause["outcome"]
        if outcome not in (*NOT_PASSED, "waived"):
            continue
        body = [f"{clause['id']} {outcome}: {rule_text(clause, 300)}"]
        for failure in clause.get("failures", [])[:1]:
            body.append(f"test: {failure['test']}")
            for key in ("expected", "observed"):
                if failure.get(key):
                    body.append(f"{key}: {clip(failure[key], 300)}")
            if not failure.get("observed"):
                body.append(clip(failure["summary"], 300))
            if failure.get("replay"):
                body.append(f"replay: {failure['replay']}")
        if outcome == "waived":
            w = clause.get("waiver", {})
            body.append(f"waived until {w.get('expires')}: {w.get('reason')}")
        level = "error" if outcome == "failed" else "warning"
        lines.append(annotation(level, f"{clause['id']} ({clause['class']})", "\n".join(body)))
    waivers = report.get("waivers", {})
    for w in waivers.get("expired", []):
        lines.append(annotation("error", f"expired waiver {w['clause']}",
                                f"the waiver of {w['clause']} expired on {w['expires']}: {w['reason']}"))
    for w in waivers.get("stale", []):
        lines.append(annotation("notice", f"stale waiver {w['clause']}",
                                f"{w['clause']} is {w.get('outcome')}: remove its waiver ({w['reason']})"))
    lines.sort(key=lambda ln: not ln.startswith("::error "))  # the failures first: GitHub shows ten
    if len(lines) > limit:  # GitHub shows at most 10 errors per step anyway
        lines = lines[:limit] + [annotation("error", "cortex-spec", f"… and {len(lines) - limit} more")]
    if not report["certified"] and report["gate"] == "fail" and not lines:
        lines.append(annotation("error", "cortex-spec", report["verdict"]))
    return "\n".join(lines)
