"""JUnit XML with one test case per clause, for CI dashboards.

A failed clause is a ``<failure>`` carrying its rule, the failed test,
expected and observed, and the replay command; a claimed clause that is
untested or not established is a ``<failure>`` of that type; a clause not
claimed or waived is ``<skipped>`` with its reason; a passed clause is an
empty test case.  One ``<testsuite>`` per class.
"""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET

from cortex_spec.words import clip

from .text import rule_text

__all__ = ["render_junit"]


def _failure_text(clause: dict[str, Any]) -> str:
    lines = [f"{clause['id']}: {rule_text(clause, 2000)}"]
    for failure in clause.get("failures", [])[:3]:
        lines += ["", f"test: {failure['test']}"]
        for key in ("check", "expected", "observed", "replay"):
            if failure.get(key):
                lines.append(f"{key}: {failure[key]}")
        if not failure.get("observed"):
            lines.append(clip(failure["message"], 4000))
    lines += [""] + clause.get("notes", [])[:3]
    return "\n".join(lines).strip()


def render_junit(report: dict[str, Any]) -> str:
    suites = ET.Element("testsuites", name="cortex-spec", time=f"{report['duration_s']:.3f}")
    by_class: dict[str, list[dict[str, Any]]] = {}
    for clause in report["clauses"]:
        by_class.setdefault(clause["class"], []).append(clause)
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for cls, clauses in by_class.items():
        suite = ET.SubElement(suites, "testsuite", name=f"cortex-spec.{cls}")
        props = ET.SubElement(suite, "properties")
        for key, value in (("store", report["store"].get("spec", "")), ("profile", report["profile"]),
                           ("seed", str(report["run"]["seed"])), ("verdict", report["verdict"])):
            ET.SubElement(props, "property", name=key, value=value)
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        for clause in clauses:
            case = ET.SubElement(suite, "testcase", classname=f"cortex-spec.{cls}", name=clause["id"])
            counts["tests"] += 1
            outcome = clause["outcome"]
            if outcome == "failed":
                first = (clause.get("failures") or [{}])[0]
                element = ET.SubElement(case, "failure", type="failed",
                                        message=clip(first.get("summary", "failed"), 300))
                element.text = _failure_text(clause)
                counts["failures"] += 1
            elif outcome in ("untested", "skipped"):
                reason = ("no test of this claimed clause ran" if outcome == "untested"
                          else "not established by this run")
                element = ET.SubElement(case, "failure", type="not established" if outcome == "skipped" else outcome,
                                        message=f"{outcome}: {reason}")
                element.text = _failure_text(clause)
                counts["failures"] += 1
            elif outcome == "waived":
                w = clause.get("waiver", {})
                ET.SubElement(case, "skipped", message=clip(
                    f"waived until {w.get('expires')}: {w.get('reason')}", 300))
                counts["skipped"] += 1
            elif outcome == "not claimed":
                note = (clause.get("notes") or [f"its class {cls} is not claimed by the store"])[0]
                ET.SubElement(case, "skipped", message=clip("not claimed: " + note, 300))
                counts["skipped"] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("errors", "0")
    for key, value in totals.items():
        suites.set(key, str(value))
    suites.set("errors", "0")
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
