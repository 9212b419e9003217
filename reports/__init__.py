"""Certification reports: build, write and render.

A report is a plain JSON-able ``dict`` (schema version 1)::

    {
      "schema": 1,
      "store": {"name": ..., "version": ..., ...},      # what was certified
      "profile": "quick",
      "certified": false,
      "verdict": "NOT CERTIFIED: 2 clauses failed",
      "classes": {"runs": "claimed", "leases": "not claimed", ...},
      "clauses": [{"id", "class", "text", "outcome", "tests", "messages"}, ...],
      "counts": {"passed": .., "failed": .., "not claimed": .., ...},
      "tests": {"passed": .., "failed": .., "skipped": ..},
      "machines": {...},                                    # stateful figures
      "first_failure": {"test", "clauses", "after_s"} | None,
      "started_at": ..., "duration_s": ...
    }

Clause outcomes: ``passed`` (every test naming it passed), ``failed`` (at
least one failed; messages say why), ``not claimed`` (its class is not
declared), ``skipped`` (its tests were skipped for another stated reason)
and ``untested`` (its class is declared but no test of it ran).

Next to every JSON report the plugin writes an HTML page (same name,
``.html``) with the clause table and a timeline picture of every machine
violation.  Only a
report in which every clause of every claimed class passed is certified.
"""

from .model import (
    OUTCOMES,
    TestRecord,
    build_report,
    read_report,
    write_report,
)
from .html import render_html, timeline_svg, write_html
from .text import render_summary

__all__ = [
    "OUTCOMES",
    "TestRecord",
    "build_report",
    "read_report",
    "write_report",
    "render_summary",
    "render_html",
    "write_html",
    "timeline_svg",
]
