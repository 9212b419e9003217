"""The cortex-spec pytest plugin (registered through the ``pytest11`` entry point).

Options::

    --cortex-store NAME|module:factory   the store to certify (default: reference)
    --cortex-profile quick|full          how hard to push (default: quick)
    --cortex-postgres-url URL            the server of ``--cortex-store postgres``
    --cortex-report PATH                 write the JSON certification report here
    --cortex-report-dir DIR              ... or as DIR/<store>-<profile>.json

Fixtures: ``cortex_harness`` (session; the started backend),
``cortex_clock`` (a fresh :class:`~cortex_spec.ManualClock` per test),
``cortex_store`` (a fresh, empty store on that clock, closed afterwards),
``cortex_location`` / ``cortex_open`` (reopen the same storage), and
``cortex_profile``.

Markers: ``@pytest.mark.clause("SUSP-CLAIM-1", ...)`` names the clauses a test
checks; ``@pytest.mark.cortex_classes("runs")`` names classes a test needs
beyond those of its clauses.  A test that needs a class the store does not
declare is reported as *not claimed* (a skip with that reason), never as
passed or failed.

The plugin is inert for tests that use none of this: no backend starts unless
a test asks for it.
"""

from __future__ import annotations

import os
import re
import sys
import time
from datetime import datetime, timezone
from typing import Any, Iterator

import pytest

from .classes import CLASSES, closure
from .clauses import GENERAL_CLASSES, UnknownClause, catalogue
from .clock import ManualClock
from .errors import BackendUnavailable
from .harness import Harness, HarnessError, effective_classes, resolve_harness
from .profiles import PROFILES, Profile, profile_from_env

NOT_CLAIMED = "cortex-spec: not claimed"
#: Exit status of a run whose backend could not start.
EXIT_NOT_CERTIFIED = 3

_CLAUSES_KEY = "cortex_clauses"
_BACKEND_KEY = "cortex_backend"
_MACHINE_KEY = "cortex_machine"
_REFUTED_KEY = "cortex_refuted"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cortex-spec", "cortex-spec store certification")
    group.addoption(
        "--cortex-store",
        default=None,
        help="store to certify: a built-in name (reference, ...) or module:factory "
        "(env CORTEX_SPEC_STORE; default reference)",
    )
    group.addoption(
        "--cortex-profile",
        default=None,
        choices=sorted(PROFILES),
        help="quick (pull-request gate, default) or full (env CORTEX_SPEC_PROFILE)",
    )
    group.addoption(
        "--cortex-postgres-url",
        default=None,
        help="PostgreSQL server of --cortex-store postgres (sets CORTEX_SPEC_POSTGRES_URL; "
        "default: an embedded server)",
    )
    group.addoption("--cortex-report", default=None, help="write the JSON report to this file")
    group.addoption(
        "--cortex-report-dir",
        default=None,
        help="write the JSON report to DIR/<store>-<profile>.json",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(*ids): the spec clauses this test checks")
    config.addinivalue_line(
        "markers", "cortex_classes(*names): conformance classes this test needs"
    )
    config.addinivalue_line(
        "markers",
        "cortex_requires(*features): harness features this test needs (reopen, kill-connection)",
    )
    pg_url = config.getoption("--cortex-postgres-url")
    if pg_url:
        os.environ["CORTEX_SPEC_POSTGRES_URL"] = pg_url  # read by the postgres harness
    run = CertificationRun(config)
    config._cortex = run  # type: ignore[attr-defined]
    config.pluginmanager.register(run, "cortex-spec-certification")
    if config.getoption("--cortex-store") or os.environ.get("CORTEX_SPEC_STORE"):
        run.resolve()  # a bad --cortex-store is a usage error before collection


def _store_spec(config: pytest.Config) -> str:
    return config.getoption("--cortex-store") or os.environ.get("CORTEX_SPEC_STORE") or "reference"


def _profile(config: pytest.Config) -> Profile:
    return PROFILES[config.getoption("--cortex-profile") or profile_from_env()]


def required_classes(item: pytest.Item) -> tuple[tuple[str, ...], frozenset[str]]:
    """(clause ids, conformance classes) a test needs, from its markers."""
    cat = catalogue()
    clause_ids: list[str] = []
    for mark in item.iter_markers("clause"):
        clause_ids.extend(mark.args)
    classes: set[str] = set()
    for cid in clause_ids:
        try:
            cls = cat[cid].cls
        except UnknownClause:
            raise pytest.UsageError(f"{item.nodeid} names unknown clause {cid!r}") from None
        if cls not in GENERAL_CLASSES:
            classes.add(cls)
    for mark in item.iter_markers("cortex_classes"):
        classes.update(mark.args)
    return tuple(dict.fromkeys(clause_ids)), closure(classes)


class CertificationRun:
    """Per-session state: the harness, the records, the report."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.harness: Harness | None = None
        self.resolved: Harness | None = None
        self.declared: frozenset[str] | None = None
        self.backend_info: dict[str, Any] = {}
        self.unavailable: str | None = None
        self.records: dict[str, Any] = {}
        self.machines: dict[str, dict[str, Any]] = {}
        self.started = time.monotonic()
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.first_failure: dict[str, Any] | None = None

    # -- backend ---------------------------------------------------------------

    def resolve(self) -> Harness:
        """The (not yet started) harness of ``--cortex-store``."""
        if self.resolved is None:
            try:
                self.resolved = resolve_harness(_store_spec(self.config))
            except HarnessError as exc:
                raise pytest.UsageError(str(exc)) from None
        return self.resolved

    def start_backend(self) -> Harness:
        if self.harness is not None:
            return self.harness
        if self.unavailable is not None:
            pytest.exit(self.unavailable, returncode=EXIT_NOT_CERTIFIED)
        spec = _store_spec(self.config)
        harness = self.resolve()
        try:
            harness.start()
            declared = harness.probe_capabilities(ManualClock())
        except BackendUnavailable as exc:
            self._unavailable(harness, spec, str(exc))
        except Exception as exc:  # noqa: BLE001 - any start failure is "not certified"
            self._unavailable(harness, spec, f"{type(exc).__name__}: {exc}")
        unknown = sorted(declared - set(CLASSES))
        self.harness = harness
        self.declared = effective_classes(declared & set(CLASSES))
        self.backend_info = dict(harness.describe())
        self.backend_info["declared"] = sorted(declared)
        if unknown:
            self.backend_info["unknown_classes"] = unknown
        missing = sorted(declared & set(CLASSES) - self.declared)
        if missing:
            self.backend_info["unmet_requirements"] = missing
        return harness

    def _unavailable(self, harness: Harness, spec: str, reason: str) -> None:
        try:
            harness.stop()
        except Exception:  # noqa: BLE001
            pass
        self.unavailable = reason
        self.backend_info = {"name": getattr(harness, "name", spec)}
        line = f"cortex-spec: store {spec!r} could not start: {reason} -- NOT CERTIFIED"
        sys.stderr.write(line + "\n")
        pytest.exit(line, returncode=EXIT_NOT_CERTIFIED)

    def stop_backend(self) -> None:
        if self.harness is not None:
            self.harness.stop()

    # -- records ------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            clause_ids, classes = required_classes(item)
            if clause_ids or classes:
                item.user_properties.append((_CLAUSES_KEY, clause_ids))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        """A failure whose exception names the clauses it refutes
        (``exc.cortex_clauses``) fails only those clauses of the test."""
        outcome = yield
        report = outcome.get_result()
        if call.excinfo is not None:
            refuted = getattr(call.excinfo.value, "cortex_clauses", None)
            if refuted:
                report.user_properties = list(report.user_properties) + [
                    (_REFUTED_KEY, tuple(refuted))
                ]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        if _CLAUSES_KEY not in props:
            return
        if _BACKEND_KEY in props and not self.backend_info:
            self.backend_info = props[_BACKEND_KEY]["info"]
            self.declared = frozenset(props[_BACKEND_KEY]["declared"])
        if report.when == "call":  # later phases carry the same properties
            for key, value in report.user_properties:
                if key == _MACHINE_KEY:
                    self.record_machine(value)
        clause_ids = tuple(props[_CLAUSES_KEY])
        previous = self.records.get(report.nodeid)
        outcome, message = _outcome_of(report)
        if outcome is None:
            return
        # the worst phase wins: a teardown error fails a test that passed
        if previous is not None and _RANK[previous[0]] >= _RANK[outcome]:
            return
        refuted = tuple(props.get(_REFUTED_KEY, ()))
        clause_ids += tuple(c for c in refuted if c not in clause_ids)
        self.records[report.nodeid] = (outcome, message, clause_ids, report.duration, refuted)
        if outcome == "failed" and self.first_failure is None:
            self.first_failure = {
                "test": report.nodeid,
                "clauses": list(refuted or clause_ids),
                "after_s": round(time.monotonic() - self.started, 3),
            }

    def record_machine(self, figures: dict[str, Any]) -> None:
        name = figures["machine"]
        total = self.machines.setdefault(name, {})
        for key, value in figures.items():
            if key == "machine":
                continue
            if key == "violation":
                total.setdefault(key, value)  # keep the first picture
            elif key.startswith("longest") or key.startswith("max"):
                total[key] = max(total.get(key, 0), value)
            elif isinstance(value, (int, float)):
                total[key] = round(total.get(key, 0) + value, 3)
            else:
                total[key] = value

    # -- report ---------------------------------------------------------------------

    def report_path(self) -> str | None:
        path = self.config.getoption("--cortex-report")
        if path:
            return path
        directory = self.config.getoption("--cortex-report-dir")
        if directory:
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", _store_spec(self.config))
            return os.path.join(directory, f"{name}-{_profile(self.config).name}.json")
        return None

    def build(self) -> dict[str, Any]:
        from cortex_spec.reports import TestRecord, build_report

        records = [
            TestRecord(nodeid, outcome, clauses, message, duration, refuted)
            for nodeid, (outcome, message, clauses, duration, refuted) in self.records.items()
        ]
        store = dict(self.backend_info) or {"name": _store_spec(self.config)}
        store.setdefault("spec", _store_spec(self.config))
        return build_report(
            catalogue(),
            records,
            store=store,
            declared=self.declared,
            profile=_profile(self.config).name,
            started_at=self.started_at,
            duration_s=time.monotonic() - self.started,
            machines=self.machines,
            unavailable=self.unavailable,
            first_failure=self.first_failure,
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller reports
            self.stop_backend()
            return
        self.stop_backend()
        path = self.report_path()
        if path is None or (not self.records and self.unavailable is None):
            return
        from cortex_spec.reports import write_html, write_report

        report = self.build()
        self.report = report
        write_report(report, path)
        write_html(report, os.path.splitext(path)[0] + ".html")
        self.report_written = path
        if not report["certified"] and session.exitstatus == 0:
            session.exitstatus = 1 if self.unavailable is None else EXIT_NOT_CERTIFIED
        if self.unavailable is not None:
            session.exitstatus = EXIT_NOT_CERTIFIED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        report = getattr(self, "report", None)
        if report is None:
            return
        terminalreporter.write_sep("=", "cortex-spec")
        terminalreporter.write_line(report["verdict"])
        terminalreporter.write_line(f"report: {self.report_written}")


_RANK = {"not claimed": 0, "skipped": 1, "passed": 2, "failed": 3}


def _outcome_of(report: pytest.TestReport) -> tuple[str | None, str]:
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr)[-500:]
        if report.when != "call":
            message = f"error in {report.when}: {message}"
        return "failed", message.strip()
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if reason.startswith(NOT_CLAIMED):
            return "not claimed", reason
        return "skipped", reason
    if report.when == "call":
        return "passed", ""
    return None, ""


def record_machine(request: pytest.FixtureRequest, figures: dict[str, Any]) -> None:
    """Attach a machine's figures to the current test (they reach the report)."""
    request.node.user_properties.append((_MACHINE_KEY, dict(figures)))


# -- fixtures -------------------------------------------------------------------


def _run(config: pytest.Config) -> CertificationRun:
    return config._cortex  # type: ignore[attr-defined,no-any-return]


@pytest.fixture(scope="session")
def cortex_harness(pytestconfig: pytest.Config) -> Harness:
    """The started backend harness of ``--cortex-store``."""
    return _run(pytestconfig).start_backend()


@pytest.fixture(scope="session")
def cortex_profile(pytestconfig: pytest.Config) -> Profile:
    return _profile(pytestconfig)


@pytest.fixture(autouse=True)
def _cortex_claim_gate(request: pytest.FixtureRequest) -> None:
    """Skip as *not claimed* a test the store or its harness cannot take:
    one needing a class the store does not declare, or a harness feature
    (``cortex_requires``) the harness does not provide."""
    item = request.node
    if not any(p[0] == _CLAUSES_KEY for p in item.user_properties):
        return
    _, classes = required_classes(item)
    features = {f for mark in item.iter_markers("cortex_requires") for f in mark.args}
    if not classes and not features and "cortex_harness" not in item.fixturenames:
        return  # a library-level clause (e.g. Scope validation): no store needed
    run = _run(request.config)
    harness = run.start_backend()
    assert run.declared is not None
    item.user_properties.append(
        (_BACKEND_KEY, {"info": run.backend_info, "declared": sorted(run.declared)})
    )
    missing = sorted(classes - run.declared)
    if missing:
        pytest.skip(f"{NOT_CLAIMED}: the store does not declare {', '.join(missing)}")
    lacking = sorted(features - harness.features)
    if lacking:
        pytest.skip(
            f"{NOT_CLAIMED}: the {harness.name!r} harness does not provide {', '.join(lacking)}"
        )


@pytest.fixture
def cortex_clock() -> ManualClock:
    """A manual clock at 2026-01-01T00:00:00Z; move it with ``advance``/``set``."""
    return ManualClock()


@pytest.fixture
def cortex_location(cortex_harness: Harness) -> Iterator[Any]:
    """Fresh, empty storage of the backend, discarded after the test."""
    location = cortex_harness.new_location()
    yield location
    cortex_harness.discard(location)


@pytest.fixture
def cortex_open(cortex_harness: Harness, cortex_location: Any) -> Iterator[Any]:
    """``cortex_open(clock)`` opens a store on the test's location; every store
    it opened is closed after the test."""
    opened: list[Any] = []

    def open_store(clock: Any) -> Any:
        store = cortex_harness.open(cortex_location, clock)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


@pytest.fixture
def cortex_store(cortex_open: Any, cortex_clock: ManualClock) -> Any:
    """A fresh, empty store of the backend, reading ``cortex_clock``."""
    return cortex_open(cortex_clock)
