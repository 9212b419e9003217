"""Certification reports: build, write, render and compare.

A report is a plain JSON-able ``dict`` described by the JSON Schema shipped
beside this module (``report.schema.json``, see :func:`report_schema`): the
store and its environment (versions of cortex-spec, Python, pytest,
Hypothesis and the drivers, the server), the profile, the seed and command
line of the run, one entry per clause of the catalogue with its outcome and
its failures (rule, test, check, expected, observed, replay command), the
counts, the state machines' figures and the waivers.

Clause outcomes (the schema's ``clause_outcome``): ``passed`` (every test
naming it passed), ``failed`` (a check of it failed), ``not claimed`` (its
class is not declared or not selected), ``skipped`` (its tests were skipped
for another stated reason, or failed on another clause), ``untested`` (its
class is declared but no test of it ran) and ``waived`` (not passed, and a
waiver in force covers it).  Only a report in which every clause of every
claimed class passed is certified; the gate also passes when every clause
not passed is waived.

Renderings (:data:`FORMATS`): ``text`` (the CLI's table), ``markdown`` (a
CI job summary or pull-request comment), ``junit`` (one test case per
clause), ``github`` (workflow annotations), ``html`` (the page a person
reads) and ``json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .diff import CATEGORIES, diff_reports, render_diff
from .github import render_annotations
from .html import markdown_inline, render_html, timeline_html, write_html
from .junit import render_junit
from .markdown import render_markdown
from .model import (
    NOT_PASSED,
    OUTCOMES,
    SCHEMA,
    TEST_OUTCOMES,
    ReportError,
    TestRecord,
    build_report,
    environment,
    read_report,
    report_schema,
    validate_report,
    write_report,
)
from .text import render_failures, render_summary
from .waivers import Waiver, WaiverError, load_waivers, parse_waivers


def _json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


#: every rendering of a report, by format name
FORMATS: dict[str, Callable[[dict[str, Any]], str]] = {
    "text": lambda report: render_summary(report) + "\n",
    "markdown": render_markdown,
    "junit": render_junit,
    "github": lambda report: render_annotations(report) + "\n",
    "html": render_html,
    "json": _json,
}

__all__ = [
    "CATEGORIES",
    "FORMATS",
    "NOT_PASSED",
    "OUTCOMES",
    "SCHEMA",
    "TEST_OUTCOMES",
    "ReportError",
    "TestRecord",
    "Waiver",
    "WaiverError",
    "build_report",
    "diff_reports",
    "environment",
    "load_waivers",
    "markdown_inline",
    "parse_waivers",
    "read_report",
    "render_annotations",
    "render_diff",
    "render_failures",
    "render_html",
    "render_junit",
    "render_markdown",
    "render_summary",
    "report_schema",
    "timeline_html",
    "validate_report",
    "write_html",
    "write_report",
]
