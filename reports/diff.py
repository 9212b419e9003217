"""Comparing two reports: what a pull request changed against main's report.

A *regression* is a clause not passed (failed, untested, skipped) in the new
report that was not so in the base report (passed, waived, not claimed, or
absent); only regressions fail ``cortex-spec diff``.  The comparison also
lists clauses newly passing, newly claimed or unclaimed, newly waived or no
longer waived, and those still not passed.
"""

from __future__ import annotations

from typing import Any

from .markdown import code
from .model import NOT_PASSED

__all__ = ["CATEGORIES", "diff_reports", "render_diff"]

#: the diff's categories, in the order they are shown; only the first fails
CATEGORIES = {
    "regressions": "newly not passed (regressions)",
    "newly_passing": "newly passing",
    "newly_claimed": "newly claimed",
    "newly_unclaimed": "newly not claimed",
    "newly_waived": "newly waived",
    "no_longer_waived": "no longer waived",
    "still_not_passed": "still not passed",
}


def diff_reports(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The clauses whose outcome changed, by category (see :data:`CATEGORIES`)."""
    before = {c["id"]: c["outcome"] for c in base["clauses"]}
    out: dict[str, list[dict[str, str]]] = {k: [] for k in CATEGORIES}
    for clause in new["clauses"]:
        cid, now = clause["id"], clause["outcome"]
        was = before.get(cid, "absent")
        row = {"clause": cid, "class": clause["class"], "base": was, "new": now}
        if now in NOT_PASSED:
            out["still_not_passed" if was in NOT_PASSED else "regressions"].append(row)
        elif now == "passed" and was != "passed":
            out["newly_passing"].append(row)
        if (was == "not claimed") != (now == "not claimed") and "absent" not in (was,):
            out["newly_unclaimed" if now == "not claimed" else "newly_claimed"].append(row)
        if (was == "waived") != (now == "waived"):
            out["newly_waived" if now == "waived" else "no_longer_waived"].append(row)
    notes = []
    for key in ("spec", "name"):
        a, b = base["store"].get(key), new["store"].get(key)
        if a != b:
            notes.append(f"the reports certify different stores ({key} {a!r} and {b!r})")
            break
    if base["profile"] != new["profile"]:
        notes.append(f"the reports use different profiles ({base['profile']} and {new['profile']})")
    return {"base": base["verdict"], "new": new["verdict"], "notes": notes, **out}


def render_diff(diff: dict[str, Any], fmt: str = "text") -> str:
    """The diff as text or Markdown (a pull-request comment)."""
    md = fmt == "markdown"
    lines = []
    n = len(diff["regressions"])
    head = (f"{n} regression(s)" if n else "no regression")
    lines.append(f"### cortex-spec diff: {head}" if md else f"cortex-spec diff: {head}")
    lines += ["", f"base: {diff['base']}", f"new:  {diff['new']}"] if not md else [
        "", f"- base: {diff['base']}", f"- new: {diff['new']}"]
    for note in diff["notes"]:
        lines.append(f"- note: {note}" if md else f"note: {note}")
    for key, title in CATEGORIES.items():
        rows = diff[key]
        if not rows:
            continue
        lines += ["", f"#### {title} ({len(rows)})" if md else f"{title} ({len(rows)}):"]
        for r in rows:
            ident = code(r["clause"]) if md else r["clause"]
            lines.append(f"{'-' if md else ' '} {ident} ({r['class']}): {r['base']} → {r['new']}")
    return "\n".join(lines) + "\n"
