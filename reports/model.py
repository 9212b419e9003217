"""Building the certification report from per-test records."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

import attrs

from cortex_spec.clauses import GENERAL_CLASSES, Catalogue

__all__ = ["OUTCOMES", "TestRecord", "build_report", "write_report", "read_report"]

#: Clause outcomes, worst first.
OUTCOMES = ("failed", "untested", "skipped", "not claimed", "passed")

SCHEMA = 1


@attrs.frozen
class TestRecord:
    """One test's result as the report sees it."""

    nodeid: str
    #: "passed", "failed", "not claimed" or "skipped"
    outcome: str
    clauses: tuple[str, ...]
    message: str = ""
    duration: float = 0.0
    #: when a failing test says which of its clauses it refuted (an exception
    #: with ``cortex_clauses``), only those fail; the others are "skipped"
    #: (not established by this run)
    failed_clauses: tuple[str, ...] = ()

    def outcome_for(self, clause_id: str) -> str:
        if self.outcome == "failed" and self.failed_clauses and clause_id not in self.failed_clauses:
            return "skipped"
        return self.outcome


def _clause_outcome(clause_id: str, tests: list[TestRecord], claimed: bool) -> str:
    if not claimed:
        return "not claimed"
    outcomes = {t.outcome_for(clause_id) for t in tests}
    if "failed" in outcomes:
        return "failed"
    if "passed" in outcomes:
        # a clause tested for one declared class and not claimed for another
        # still passed; a test skipped for another reason makes it incomplete
        return "skipped" if "skipped" in outcomes else "passed"
    if "skipped" in outcomes:
        return "skipped"
    if outcomes == {"not claimed"}:
        return "not claimed"
    return "untested"


def build_report(
    catalogue: Catalogue,
    records: Iterable[TestRecord],
    *,
    store: dict[str, Any],
    declared: frozenset[str] | None,
    profile: str,
    started_at: str,
    duration_s: float,
    machines: dict[str, Any] | None = None,
    unavailable: str | None = None,
    first_failure: dict[str, Any] | None = None,
    timings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Aggregate test records into the report (see the package docstring).

    ``declared`` is the set of classes the store claims (already closed over
    requirements), or ``None`` when the backend never started.
    """
    records = list(records)
    by_clause: dict[str, list[TestRecord]] = {}
    for rec in records:
        for cid in rec.clauses:
            by_clause.setdefault(cid, []).append(rec)

    conformance_classes = [c for c in catalogue.classes if c not in GENERAL_CLASSES]
    claimed = frozenset(declared or ())
    classes = {c: ("claimed" if c in claimed else "not claimed") for c in conformance_classes}

    clauses = []
    counts = {o: 0 for o in OUTCOMES}
    for clause in catalogue:
        is_claimed = bool(claimed) and (
            clause.cls in GENERAL_CLASSES or clause.cls in claimed
        )
        tests = by_clause.get(clause.id, [])
        outcome = _clause_outcome(clause.id, tests, is_claimed)
        counts[outcome] += 1
        entry: dict[str, Any] = {
            "id": clause.id,
            "class": clause.cls,
            "text": clause.text,
            "outcome": outcome,
            "tests": {
                o: sum(1 for t in tests if t.outcome_for(clause.id) == o)
                for o in ("passed", "failed", "not claimed", "skipped")
            },
        }
        if clause.provenance:
            entry["provenance"] = clause.provenance
        failures = [f"{t.nodeid}: {t.message}" for t in tests if t.outcome_for(clause.id) == "failed"]
        skips = [
            f"{t.nodeid}: " + (t.message if t.outcome == "skipped" else
                               f"not established: the test failed on {', '.join(t.failed_clauses)}")
            for t in tests if t.outcome_for(clause.id) == "skipped"
        ]
        if failures:
            entry["messages"] = failures[:10]
        elif skips and outcome == "skipped":
            entry["messages"] = skips[:10]
        clauses.append(entry)

    unknown = sorted({cid for cid in by_clause if cid not in catalogue})
    tests = {o: sum(1 for r in records if r.outcome == o)
             for o in ("passed", "failed", "not claimed", "skipped")}

    if unavailable is not None:
        certified = False
        verdict = f"NOT CERTIFIED: backend could not start: {unavailable}"
    elif not claimed:
        certified = False
        verdict = "NOT CERTIFIED: the store claims no conformance class"
    else:
        problems = []
        for outcome in ("failed", "untested", "skipped"):
            if counts[outcome]:
                problems.append(f"{counts[outcome]} clause(s) {outcome}")
        if tests["failed"] and not counts["failed"]:
            problems.append(f"{tests['failed']} test(s) failed")
        if unknown:
            problems.append(f"tests name unknown clause ids {', '.join(unknown)}")
        certified = not problems
        verdict = "CERTIFIED" if certified else "NOT CERTIFIED: " + "; ".join(problems)
        if certified:
            verdict += f" for {', '.join(sorted(claimed))}"

    return {
        "schema": SCHEMA,
        "store": store,
        "profile": profile,
        "certified": certified,
        "verdict": verdict,
        "classes": classes,
        "clauses": clauses,
        "counts": counts,
        "tests": tests,
        "machines": machines or {},
        "first_failure": first_failure,
        "started_at": started_at,
        "duration_s": round(duration_s, 3),
        "timings": timings or {},
    }


def write_report(report: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``report`` as indented JSON (atomically: a temp file, then rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(target)
    return target


def read_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))
