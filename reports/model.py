"""Building the certification report from per-test records.

The report's vocabulary (clause and test outcomes, class statuses, the
schema version) is defined once, in ``report.schema.json`` beside this
module; the constants below are read from it.
"""

from __future__ import annotations

import functools
import json
import os
import platform
from collections.abc import Iterable, Sequence
from datetime import date
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import attrs

from cortex_spec.clauses import GENERAL_CLASSES, Catalogue

from .waivers import Waiver

__all__ = [
    "NOT_PASSED",
    "OUTCOMES",
    "SCHEMA",
    "TEST_OUTCOMES",
    "ReportError",
    "TestRecord",
    "build_report",
    "environment",
    "read_report",
    "report_schema",
    "validate_report",
    "write_report",
]


@functools.cache
def report_schema() -> dict[str, Any]:
    """The JSON Schema of a report (shipped as ``report.schema.json``)."""
    text = resources.files(__package__).joinpath("report.schema.json").read_text(encoding="utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


_DEFS = report_schema()["$defs"]
#: Clause outcomes, worst first.
OUTCOMES: tuple[str, ...] = tuple(_DEFS["clause_outcome"]["enum"])
#: Test outcomes.
TEST_OUTCOMES: tuple[str, ...] = tuple(_DEFS["test_outcome"]["enum"])
#: The outcomes that keep a claimed clause from being certified (a waiver may cover them).
NOT_PASSED = ("failed", "untested", "skipped")
SCHEMA: int = report_schema()["properties"]["schema"]["const"]
assert set(NOT_PASSED) < set(OUTCOMES) and "waived" in OUTCOMES


class ReportError(ValueError):
    """A file that is not a cortex-spec report (a usage error: one line says why)."""


@attrs.frozen
class TestRecord:
    """One test's result as the report sees it."""

    __test__ = False  # not a pytest test class

    nodeid: str
    #: one of TEST_OUTCOMES
    outcome: str
    clauses: tuple[str, ...]
    message: str = ""
    duration: float = 0.0
    #: when a failing test says which of its clauses its failed check
    #: belongs to, only those fail; the others are "skipped" (not
    #: established by this run)
    failed_clauses: tuple[str, ...] = ()
    #: the failed check, structured (see the schema's ``failure``)
    failure: dict[str, Any] | None = None

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


def _failure_of(test: TestRecord) -> dict[str, Any]:
    failure = dict(test.failure or {})
    failure.setdefault("message", test.message)
    failure.setdefault("attribution", "test")
    failure["test"] = test.nodeid
    failure.setdefault("summary", failure["message"].split("\n", 1)[0])
    return failure


def environment(extra: Iterable[str] = ("pytest-xdist", "sqlalchemy", "pymongo", "psycopg")) -> dict[str, str | None]:
    """Versions of what runs the certification: cortex-spec, Python, the
    platform, pytest and Hypothesis, and the drivers of ``extra`` (None when
    a package is not installed)."""

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    from cortex_spec import __version__

    env: dict[str, str | None] = {
        "cortex_spec": __version__,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(terse=True),
        "pytest": version("pytest"),
        "hypothesis": version("hypothesis"),
    }
    for name in extra:
        env[name.replace("-", "_")] = version(name)
    return env


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
    env: dict[str, str | None] | None = None,
    run: dict[str, Any] | None = None,
    waivers: Sequence[Waiver] = (),
    waiver_file: str | None = None,
    today: date | None = None,
) -> dict[str, Any]:
    """Aggregate test records into the report (see ``report.schema.json``).

    ``declared`` is the set of classes the store claims (already closed over
    requirements), or ``None`` when the backend never started.  ``waivers``
    turn clauses not passed into *waived* while in force (``today``, by
    default the current date, is on or before their expiry date).
    """
    today = today or date.today()
    records = list(records)
    by_clause: dict[str, list[TestRecord]] = {}
    for rec in records:
        for cid in rec.clauses:
            by_clause.setdefault(cid, []).append(rec)

    conformance_classes = [c for c in catalogue.classes if c not in GENERAL_CLASSES]
    claimed = frozenset(declared or ())
    classes = {c: ("claimed" if c in claimed else "not claimed") for c in conformance_classes}
    waiver_of = {w.clause: w for w in waivers}
    applied: list[dict[str, Any]] = []
    expired: list[dict[str, Any]] = []
    stale: list[dict[str, Any]] = []

    clauses = []
    counts = {o: 0 for o in OUTCOMES}
    for clause in catalogue:
        is_claimed = bool(claimed) and (
            clause.cls in GENERAL_CLASSES or clause.cls in claimed
        )
        tests = by_clause.get(clause.id, [])
        outcome = _clause_outcome(clause.id, tests, is_claimed)
        entry: dict[str, Any] = {
            "id": clause.id,
            "class": clause.cls,
            "text": clause.text,
            "outcome": outcome,
            "tests": {o: sum(1 for t in tests if t.outcome_for(clause.id) == o) for o in TEST_OUTCOMES},
        }
        if clause.provenance:
            entry["provenance"] = clause.provenance
        failures = [_failure_of(t) for t in tests if t.outcome_for(clause.id) == "failed"]
        note_of = "skipped" if outcome == "skipped" else "not claimed"
        reasons: dict[str, list[str]] = {}
        for t in tests:
            if t.outcome_for(clause.id) == note_of:
                reason = (t.message if t.outcome != "failed" else
                          f"not established: the test failed on {', '.join(t.failed_clauses)}")
                reasons.setdefault(reason.removeprefix("cortex-spec: not claimed: "), []).append(t.nodeid)
        notes = [f"{r} ({nodes[0]})" if len(nodes) == 1 else f"{r} ({len(nodes)} tests, e.g. {nodes[0]})"
                 for r, nodes in reasons.items()]
        if failures:
            entry["failures"] = failures[:10]
        if notes and outcome in ("skipped", "not claimed"):
            entry["notes"] = notes[:10]
        waiver = waiver_of.get(clause.id)
        if waiver is not None:
            entry["waiver"] = waiver.as_json()
            if outcome not in NOT_PASSED:
                stale.append(waiver.as_json(outcome))
            elif waiver.expired(today):
                expired.append(waiver.as_json(outcome))
            else:
                applied.append(waiver.as_json(outcome))
                outcome = entry["outcome"] = "waived"
        counts[outcome] += 1
        clauses.append(entry)

    unknown = sorted({cid for cid in by_clause if cid not in catalogue})
    test_counts = {o: sum(1 for r in records if r.outcome == o) for o in TEST_OUTCOMES}

    if unavailable is not None:
        gate = False
        verdict = f"NOT CERTIFIED: backend could not start: {unavailable}"
    elif not claimed:
        gate = False
        verdict = "NOT CERTIFIED: the store claims no conformance class"
    else:
        problems = []
        for outcome in NOT_PASSED:
            if counts[outcome]:
                problems.append(f"{counts[outcome]} clause(s) {outcome}")
        if test_counts["failed"] and not counts["failed"] and not counts["waived"]:
            problems.append(f"{test_counts['failed']} test(s) failed")
        if unknown:
            problems.append(f"tests name unknown clause ids {', '.join(unknown)}")
        if expired:
            problems.append(f"{len(expired)} waiver(s) expired ({', '.join(w['clause'] for w in expired)})")
        gate = not problems
        if problems:
            if counts["waived"]:
                problems.append(f"{counts['waived']} clause(s) waived")
            verdict = "NOT CERTIFIED: " + "; ".join(problems)
        elif counts["waived"]:
            verdict = (f"NOT CERTIFIED: {counts['waived']} clause(s) waived, every other clause "
                       "passed (the gate passes)")
        else:
            verdict = f"CERTIFIED for {', '.join(sorted(claimed))}"
    certified = gate and not counts["waived"]

    return {
        "schema": SCHEMA,
        "store": store,
        "profile": profile,
        "certified": certified,
        "gate": "pass" if gate else "fail",
        "verdict": verdict,
        "classes": classes,
        "clauses": clauses,
        "counts": counts,
        "tests": test_counts,
        "machines": machines or {},
        "first_failure": first_failure,
        "started_at": started_at,
        "duration_s": round(duration_s, 3),
        "timings": timings or {},
        "environment": env if env is not None else environment(),
        "run": run or {"command": "", "seed": 0, "workers": 1},
        "waivers": {"file": waiver_file, "applied": applied, "expired": expired, "stale": stale},
    }


def validate_report(report: dict[str, Any]) -> None:
    """Raise :class:`ReportError` unless ``report`` follows the schema (the
    full JSON Schema when ``jsonschema`` is installed, else its required
    top-level fields and schema version)."""
    schema = report_schema()
    if not isinstance(report, dict):
        raise ReportError(f"a report is a JSON object, not {type(report).__name__}")
    if report.get("schema") != SCHEMA:
        raise ReportError(f"not a cortex-spec report of schema {SCHEMA} (schema: {report.get('schema')!r})")
    try:
        import jsonschema
    except ImportError:
        missing = [k for k in schema["required"] if k not in report]
        if missing:
            raise ReportError(f"the report lacks {', '.join(missing)}") from None
        return
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(report))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ReportError(f"the report does not follow the schema at {where}: {error.message}")


def write_report(report: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``report`` as indented JSON (atomically: a temp file, then rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(target)
    return target


def read_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A report read from ``path``; :class:`ReportError` (one line) for a
    missing file, a file that is not JSON, or JSON that is not a report."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"{os.fspath(path)}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{os.fspath(path)}: not JSON ({exc.msg} at line {exc.lineno})") from None
    try:
        validate_report(data)
    except ReportError as exc:
        raise ReportError(f"{os.fspath(path)}: {exc}") from None
    return data  # type: ignore[no-any-return]
