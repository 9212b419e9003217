"""The cortex-spec pytest plugin (registered through the ``pytest11`` entry point).

Options::

    --cortex-store NAME|module:factory   the store to certify (default: reference)
    --cortex-profile quick|full          how hard to push (default: quick)
    --cortex-postgres-url URL            the server of ``--cortex-store postgres``
    --cortex-classes a,b                 certify only these declared classes
    --cortex-report PATH                 write the JSON certification report here
    --cortex-report-dir DIR              ... or as DIR/<store>-<profile>.json
    --cortex-output FORMAT=PATH          also as markdown, junit, github, html, text
    --cortex-waivers FILE                TOML waivers of known failures
    --hypothesis-seed N                  the seed of the state machines (replays a run)
    --hypothesis-profile cortex-quick|cortex-full   the profile, as Hypothesis names it

A failure is charged to the clause whose check failed (see
:mod:`cortex_spec.attribution`) and its text leads with that clause's rule,
expected and observed, and a command that replays the test.

``--cortex-store``, ``--cortex-profile``, ``--cortex-classes``,
``--cortex-waivers`` and ``--cortex-report-dir`` may also be set in the
environment (``CORTEX_SPEC_STORE``, ...) or in the ini file
(``[tool.pytest.ini_options]``: ``cortex_store = "mypkg.store:make_store"``,
``cortex_profile``, ``cortex_classes``, ``cortex_waivers``,
``cortex_report_dir``); the command line wins, then the environment.

Fixtures: ``cortex_harness`` (the started backend: ``--cortex-store``'s,
for the session; a module, class or conftest overrides it to certify
another store, see :mod:`cortex_spec.suite`), ``cortex_declared`` (the
classes certified), ``cortex_clock`` (a fresh
:class:`~cortex_spec.ManualClock` per test), ``cortex_store`` (a fresh,
empty store on that clock, closed afterwards), ``cortex_location`` /
``cortex_open`` (reopen the same storage), ``cortex_profile``, and for class
``gateway`` ``cortex_gateway_location`` (a fresh location),
``cortex_open_gateway`` (open a gateway store through the test's store) and
``cortex_gateway`` (one open on the fresh location).  The suites use them
under short names, provided here too so that an author's own test module
can star-import a suite (``from cortex_spec.conformance.test_checkpoints
import *``): ``store``, ``clock``, ``profile``, ``gateway_location``,
``open_gateway``, ``gateway``, ``other_location`` (a second gateway
location) and ``w`` (an a2a ``World`` on ``store`` and ``clock``).

Markers: ``@pytest.mark.clause("SUSP-CLAIM-1", ...)`` names the clauses a test
checks; ``@pytest.mark.cortex_classes("runs")`` names classes a test needs
beyond those of its clauses.  A test that needs a class the store does not
declare is reported as *not claimed* (a skip with that reason), never as
passed or failed.

The plugin is inert for tests that use none of this: no backend starts unless
a test asks for it.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from .classes import CLASSES, closure
from .clauses import GENERAL_CLASSES, UnknownClause, catalogue
from .clock import ManualClock
from .errors import BackendUnavailable
from .harness import Harness, HarnessError, auto_workers, effective_classes, resolve_harness
from .profiles import (
    HYPOTHESIS_PREFIX,
    PROFILES,
    Profile,
    activate,
    profile_from_env,
    register_hypothesis_profiles,
    reproduction_notes,
)

# registered on import, before Hypothesis' own plugin loads --hypothesis-profile
register_hypothesis_profiles()

NOT_CLAIMED = "cortex-spec: not claimed"
#: Exit status of a run whose backend could not start.
EXIT_NOT_CERTIFIED = 3

_CLAUSES_KEY = "cortex_clauses"
_BACKEND_KEY = "cortex_backend"
_MACHINE_KEY = "cortex_machine"
_FAILURE_KEY = "cortex_failure"
_DROPPED_KEY = "cortex_dropped"
#: where the suites' modules live when they are imported from a checkout
#: (``conformance.test_runs``) rather than from the installed package
_SUITE_PACKAGES = ("conformance", "stateful")
_REFUTED_KEY = "cortex_refuted"
#: where a test's time is charged in the report's ``timings`` (see :func:`unit_of`)
_UNIT_KEY = "cortex_unit"
#: seconds the process that ran a test spent collecting (an xdist worker's own)
_COLLECTED_KEY = "cortex_collected_s"


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
    group.addoption(
        "--cortex-classes",
        default=None,
        help="certify only these declared classes (comma-separated, with the classes they "
        "require); the others are reported not claimed (env CORTEX_SPEC_CLASSES)",
    )
    group.addoption("--cortex-report", default=None, help="write the JSON report to this file")
    group.addoption(
        "--cortex-report-dir",
        default=None,
        help="write the JSON report to DIR/<store>-<profile>.json (env CORTEX_SPEC_REPORT_DIR)",
    )
    group.addoption(
        "--cortex-waivers",
        default=None,
        help="TOML file of known failures (clause, reason, expires): a waived clause is reported "
        "waived, never passed; an expired waiver fails the run (env CORTEX_SPEC_WAIVERS)",
    )
    group.addoption(
        "--cortex-output",
        action="append",
        default=[],
        metavar="FORMAT=PATH",
        help="also write the report as FORMAT (" + ", ".join(_formats()) + ") to PATH; repeatable. "
        "With GITHUB_STEP_SUMMARY set the Markdown summary is appended to it, and under GitHub "
        "Actions the failed clauses are printed as annotations",
    )
    for name, (_, env, text) in _OPTIONS.items():
        parser.addini(name, f"{text} (the --{name.replace('_', '-')} option; env {env})", default=None)


#: Options that may also come from the environment or from the ini file
#: (``[tool.pytest.ini_options]``), in that order after the command line:
#: ini name -> (command-line option, environment variable, help).
_OPTIONS = {
    "cortex_store": ("--cortex-store", "CORTEX_SPEC_STORE", "store to certify"),
    "cortex_profile": ("--cortex-profile", "CORTEX_SPEC_PROFILE", "certification profile"),
    "cortex_classes": ("--cortex-classes", "CORTEX_SPEC_CLASSES", "classes to certify"),
    "cortex_waivers": ("--cortex-waivers", "CORTEX_SPEC_WAIVERS", "waiver file"),
    "cortex_report_dir": ("--cortex-report-dir", "CORTEX_SPEC_REPORT_DIR", "directory of the JSON report"),
}


def _formats() -> list[str]:
    from cortex_spec.reports import FORMATS

    return sorted(FORMATS)


def parse_outputs(values: list[str]) -> list[tuple[str, str]]:
    """``FORMAT=PATH`` pairs of ``--cortex-output`` (a usage error otherwise)."""
    out = []
    for value in values:
        fmt, sep, path = value.partition("=")
        if not sep or not path or fmt not in _formats():
            raise pytest.UsageError(
                f"--cortex-output {value!r}: expected FORMAT=PATH with FORMAT one of {', '.join(_formats())}"
            )
        out.append((fmt, path))
    return out


def option(config: pytest.Config, name: str) -> str | None:
    """An option of :data:`_OPTIONS`: the command line, else the environment,
    else the ini file, else None."""
    flag, env, _ = _OPTIONS[name]
    value = config.getoption(flag) or os.environ.get(env) or config.getini(name)
    return value or None


def selected_classes(config: pytest.Config) -> frozenset[str] | None:
    """The classes ``--cortex-classes`` selects, with the classes they
    require; None when no selection was made (every declared class)."""
    text = option(config, "cortex_classes")
    if not text:
        return None
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = sorted(names - set(CLASSES))
    if unknown or not names:
        raise pytest.UsageError(
            f"--cortex-classes: unknown class(es) {', '.join(unknown) or repr(text)}; "
            f"the classes are {', '.join(CLASSES)}"
        )
    return closure(names)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(*ids): the spec clauses this test checks")
    config.addinivalue_line(
        "markers", "cortex_classes(*names): conformance classes this test needs"
    )
    config.addinivalue_line(
        "markers",
        "cortex_cost(seconds): roughly how long the test takes on the reference store (state "
        "machines), so that pytest-xdist workers get equal shares",
    )
    config.addinivalue_line(
        "markers",
        "cortex_requires(*features): harness features this test needs (reopen, "
        "kill-connection, gateway-crash, unusable-location, cross-process)",
    )
    pg_url = config.getoption("--cortex-postgres-url")
    if pg_url:
        os.environ["CORTEX_SPEC_POSTGRES_URL"] = pg_url  # read by the postgres harness
    run = CertificationRun(config)
    config._cortex = run  # type: ignore[attr-defined]
    config.pluginmanager.register(run, "cortex-spec-certification")
    run.selected = selected_classes(config)  # a bad selection is a usage error too
    run.outputs = parse_outputs(config.getoption("--cortex-output") or [])
    run.load_waivers()
    run.choose_seed()
    try:
        activate(_profile(config))  # the library-level properties' budget, read at import
    except pytest.UsageError:
        pass  # reported where the profile is used
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # the workers' embedded servers are found through the run's id: the
        # controller starts the backend first, so it takes the id now
        if getattr(config.option, "testrunuid", None) is None:
            config.option.testrunuid = uuid.uuid4().hex
        os.environ["PYTEST_XDIST_TESTRUNUID"] = config.option.testrunuid
    if option(config, "cortex_store"):
        run.resolve()  # a bad --cortex-store is a usage error before collection


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` of a certification (``--cortex-store`` given): the
    workers of :func:`~cortex_spec.harness.auto_workers`; otherwise (a run of
    other tests, or ``PYTEST_XDIST_AUTO_NUM_WORKERS`` set) pytest-xdist's
    own count."""
    if not option(config, "cortex_store") or os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return auto_workers()


def _store_spec(config: pytest.Config) -> str:
    return option(config, "cortex_store") or "reference"


def _profile(config: pytest.Config) -> Profile:
    # the command line first (--cortex-profile, then --hypothesis-profile
    # cortex-NAME), then the environment and the ini file
    name = (config.getoption("--cortex-profile") or _hypothesis_profile(config)
            or option(config, "cortex_profile") or profile_from_env())
    if name not in PROFILES:
        raise pytest.UsageError(f"unknown cortex-spec profile {name!r}; use one of {', '.join(PROFILES)}")
    return PROFILES[name]


def _hypothesis_profile(config: pytest.Config) -> str | None:
    """The certification profile ``--hypothesis-profile cortex-NAME`` names, if any."""
    given = config.getoption("hypothesis_profile", None)
    prefix = HYPOTHESIS_PREFIX
    if isinstance(given, str) and given.startswith(prefix):
        return given.removeprefix(prefix)
    return None


def unit_of(item: pytest.Item, classes: frozenset[str]) -> str:
    """The unit of work a test's time is charged to in the report's
    ``timings``: ``machine:<test>`` for a state machine, else
    ``suite:<class>`` for the class whose clauses it checks (the one among
    its required classes that no other of them requires; ``general`` for
    library-level clauses that need no store)."""
    function = getattr(item, "function", None)
    module = getattr(function, "__module__", None) or item.nodeid.split("::", 1)[0].removesuffix(".py")
    if module.rsplit(".", 1)[-1].rsplit("/", 1)[-1] == "test_machines":
        return f"machine:{item.name.removeprefix('test_')}"
    needed = {c for c in classes if c in CLASSES}
    top = sorted(c for c in needed if not any(c in closure({o}) - {o} for o in needed))
    return "suite:" + ("+".join(top) if top else "general")


#: seconds a test is assumed to take when it carries no ``cortex_cost`` mark
_DEFAULT_COST = 0.02


def _cost(item: pytest.Item) -> float:
    mark = item.get_closest_marker("cortex_cost")
    return float(mark.args[0]) if mark is not None else _DEFAULT_COST


def balance(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """Order tests for pytest-xdist's work stealing over ``workers`` workers.

    Work stealing hands worker *i* the *i*-th of ``workers`` equal-sized
    contiguous blocks of the collection and lets an idle worker steal from
    the tail of the longest queue.  Long tests (the state machines, marked
    ``cortex_cost(seconds)``) cannot be split, so they are spread over the
    blocks first, longest first, each to the block with the least work, and
    put at the head of their block; the short tests fill the blocks up to
    equal sizes in collection order, so what is stolen is short.
    """
    heavy = sorted((i for i in items if _cost(i) > 1.0), key=_cost, reverse=True)
    heavy_ids = {id(i) for i in heavy}
    light = [i for i in items if id(i) not in heavy_ids]
    size = -(-len(items) // workers)
    blocks: list[list[pytest.Item]] = [[] for _ in range(workers)]
    work = [0.0] * workers
    for item in heavy:
        open_blocks = [b for b in range(workers) if len(blocks[b]) < size] or list(range(workers))
        b = min(open_blocks, key=lambda k: work[k])
        blocks[b].append(item)
        work[b] += _cost(item)
    light_iter = iter(light)
    for block in blocks:
        while len(block) < size:
            nxt = next(light_iter, None)
            if nxt is None:
                break
            block.append(nxt)
    return [item for block in blocks for item in block] + list(light_iter)


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
        #: every started backend: id(harness) -> see :meth:`backend`
        self.backends: dict[int, tuple[Harness, frozenset[str], dict[str, Any], float]] = {}
        #: True once ``--cortex-store``'s own harness started
        self.default_started = False
        self.declared: frozenset[str] | None = None
        #: the classes --cortex-classes selects (with what they require), or None
        self.selected: frozenset[str] | None = None
        self.backend_info: dict[str, Any] = {}
        self.unavailable: str | None = None
        self.records: dict[str, Any] = {}
        self.machines: dict[str, dict[str, Any]] = {}
        self.started = time.monotonic()
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.first_failure: dict[str, Any] | None = None
        #: seconds each test took, every phase (setup, call, teardown) summed
        self.durations: dict[str, float] = {}
        self.units: dict[str, str] = {}
        #: the longest collection and backend start of any process of the run
        self.collection_s = 0.0
        self.backend_start_s = 0.0
        #: True once the session got past pytest_sessionstart
        self.collected = False
        self.outputs: list[tuple[str, str]] = []
        #: every failed test of the session, certification test or not
        self.failed_tests: set[str] = set()
        #: tests --cortex-classes left out: (node id, clauses, reason); an
        #: xdist worker sends them with its first report
        self.dropped: list[tuple[str, tuple[str, ...], str]] = []
        self.waivers: list[Any] = []
        self.waiver_file: str | None = None
        self.seed = 0
        self.seed_source = "random"
        #: the items of the session, by node id (for replay commands)
        self.report: dict[str, Any] | None = None
        self.report_written: str | None = None
        #: the collector's thresholds before :meth:`tune_gc` (None: not tuned)
        self._gc_thresholds: tuple[int, int, int] | None = None

    def load_waivers(self) -> None:
        """Read ``--cortex-waivers`` (a missing or malformed file is a usage error)."""
        path = option(self.config, "cortex_waivers")
        if not path:
            return
        from cortex_spec.reports import WaiverError, load_waivers

        try:
            self.waivers = load_waivers(path, catalogue())
        except WaiverError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.waiver_file = path

    def choose_seed(self) -> None:
        """The seed of the state machines, chosen once per run: pytest's
        ``--hypothesis-seed``, else ``CORTEX_SPEC_SEED``, else a random one.
        It is put in the environment, so that pytest-xdist workers (started
        later) and :func:`cortex_spec.stateful.runner.session_seed` use it."""
        import random

        given = self.config.getoption("hypothesis_seed", None)
        env = os.environ.get("CORTEX_SPEC_SEED")
        try:
            if given not in (None, ""):
                self.seed, self.seed_source = int(given), "--hypothesis-seed"
            elif env:
                self.seed, self.seed_source = int(env), "CORTEX_SPEC_SEED"
            else:
                self.seed = random.SystemRandom().randrange(2**32)
        except ValueError:
            raise pytest.UsageError(
                f"the seed must be an integer (--hypothesis-seed {given!r}, CORTEX_SPEC_SEED {env!r})"
            ) from None
        self._seed_env = env
        os.environ["CORTEX_SPEC_SEED"] = str(self.seed)
        try:
            from cortex_spec.stateful import runner
        except ImportError:  # pragma: no cover - the stateful package is optional
            return
        runner.reset_seed()

    def replay(self, item: pytest.Item) -> str:
        """One complete command that runs ``item`` again: the store, the
        profile, the class selection and the seed of this run."""
        import shlex

        if getattr(getattr(item, "cls", None), "cortex_suite", None) is not None:
            # a suite class (cortex_spec.suite) names its own store
            args = ["pytest", "-p", "no:cacheprovider", item.nodeid,
                    "--cortex-profile", _profile(self.config).name, f"--hypothesis-seed={self.seed}"]
            return " ".join(shlex.quote(a) for a in args)
        module = getattr(getattr(item, "module", None), "__name__", None)
        if module and module.split(".", 1)[0] in _SUITE_PACKAGES:
            module = f"cortex_spec.{module}"
        target = f"{module}::{item.nodeid.split('::', 1)[1]}" if module and "::" in item.nodeid else item.nodeid
        args = ["pytest", "-p", "no:cacheprovider", "--pyargs", target,
                "--cortex-store", self.store_spec(), "--cortex-profile", _profile(self.config).name]
        if self.selected is not None:
            args += ["--cortex-classes", option(self.config, "cortex_classes") or ""]
        args.append(f"--hypothesis-seed={self.seed}")
        return " ".join(shlex.quote(a) for a in args)

    # -- backend ---------------------------------------------------------------

    def resolve(self) -> Harness:
        """The (not yet started) harness of ``--cortex-store``."""
        if self.resolved is None:
            try:
                self.resolved = resolve_harness(_store_spec(self.config))
            except HarnessError as exc:
                raise pytest.UsageError(str(exc)) from None
        return self.resolved

    def store_spec(self) -> str:
        """What the report names as the store: ``--cortex-store``, else the
        name of the first backend a test started (a suite class's)."""
        given = option(self.config, "cortex_store")
        if given:
            return given
        return str(self.backend_info.get("spec") or self.backend_info.get("name") or "reference")

    def start_backend(self, harness: Harness | None = None) -> Harness:
        """Start ``harness`` (by default ``--cortex-store``'s) once and read
        the classes its store declares.  The first backend started is the one
        the report describes; a suite class or an overridden
        ``cortex_harness`` fixture brings its own (see :mod:`cortex_spec.suite`)."""
        if harness is None:
            if self.default_started:
                return self.resolve()
            harness, spec = self.resolve(), _store_spec(self.config)
        else:
            if id(harness) in self.backends:
                return harness
            spec = harness.name
        if self.unavailable is not None:
            pytest.exit(self.unavailable, returncode=EXIT_NOT_CERTIFIED)
        started = time.monotonic()
        try:
            harness.start()
            declared = harness.probe_capabilities(ManualClock())
        except BackendUnavailable as exc:
            self._unavailable(harness, spec, str(exc))
        except Exception as exc:  # noqa: BLE001 - any start failure is "not certified"
            self._unavailable(harness, spec, f"{type(exc).__name__}: {exc}")
        start_s = time.monotonic() - started
        unknown = sorted(declared - set(CLASSES))
        certified = declared & set(CLASSES)
        if self.selected is not None:
            certified &= self.selected
        effective = effective_classes(certified)
        info = dict(harness.describe())
        info.setdefault("spec", spec)
        info["declared"] = sorted(declared)
        if self.selected is not None:
            info["selected"] = sorted(self.selected)
        if unknown:
            info["unknown_classes"] = unknown
        missing = sorted(declared & set(CLASSES) - effective)
        if missing:
            info["unmet_requirements"] = missing
        self.backends[id(harness)] = (harness, effective, info, round(start_s, 3))
        if harness is self.resolved:
            self.default_started = True
        if self.harness is None:  # the report's store
            self.harness, self.declared, self.backend_info = harness, effective, info
            self.backend_start_s = start_s
        return harness

    def backend(self, harness: Harness) -> tuple[Harness, frozenset[str], dict[str, Any], float]:
        """(harness, classes certified, what the report shows, start seconds)
        of a started backend (started now if it was not)."""
        self.start_backend(harness)
        return self.backends[id(harness)]

    def _unavailable(self, harness: Harness, spec: str, reason: str) -> None:
        try:
            harness.stop()
        except Exception:  # noqa: BLE001
            pass
        self.unavailable = reason
        self.backend_info = {"name": getattr(harness, "name", spec)}
        line = f"cortex-spec: store {spec!r} could not start: {reason} -- NOT CERTIFIED"
        sys.stderr.write(line + "\n")
        if not self.collected:  # before collection pytest runs no sessionfinish: report now
            self.write_report()
        pytest.exit(line, returncode=EXIT_NOT_CERTIFIED)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Put ``CORTEX_SPEC_SEED`` and the collector's thresholds back as
        they were (pytester runs sessions in one process).

        Where :meth:`tune_gc` ran, the heap is also collected once here and
        what survives frozen: pytest's own clean-up after this hook collects
        five times over (to report exceptions raised in finalizers), and
        over the heap a certification leaves that was 0.2 s a collection, a
        second at the end of every worker (py-spy, issue 13).  The garbage
        is still collected, with pytest's hook for those exceptions still in
        place; its five collections then see only what finalizers left."""
        if self._gc_thresholds is not None:
            gc.set_threshold(*self._gc_thresholds)
            gc.collect()
            gc.freeze()
        previous: str | None = getattr(self, "_seed_env", None)
        if previous is None:
            os.environ.pop("CORTEX_SPEC_SEED", None)
        else:
            os.environ["CORTEX_SPEC_SEED"] = previous

    def stop_backend(self) -> None:
        """Stop every started backend (the last started first)."""
        for harness, *_ in reversed(list(self.backends.values())):
            harness.stop()
        self.backends.clear()

    # -- records ------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        collected = round(time.monotonic() - self.started, 3)
        self.collection_s = max(self.collection_s, collected)
        kept, dropped = [], []
        for item in items:
            clause_ids, classes = required_classes(item)
            if self.selected is not None and not classes <= self.selected:
                # a class --cortex-classes leaves out: not run, reported not claimed
                left_out = ", ".join(sorted(classes - self.selected))
                dropped.append(item)
                self.dropped.append((item.nodeid, clause_ids, f"{NOT_CLAIMED}: --cortex-classes leaves out {left_out}"))
                continue
            kept.append(item)
            if clause_ids or classes:
                item.user_properties.append((_CLAUSES_KEY, clause_ids))
                item.user_properties.append((_UNIT_KEY, unit_of(item, classes)))
                item.user_properties.append((_COLLECTED_KEY, collected))
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        if not hasattr(config, "workerinput"):
            self.record_dropped(self.dropped)
        workers = getattr(config, "workerinput", {}).get("workercount", 1)
        items[:] = balance(kept, workers) if workers > 1 else kept
        if any(item.get_closest_marker("clause") for item in kept):
            self.tune_gc()

    #: The cyclic garbage collector's thresholds while certification tests
    #: run (see :meth:`tune_gc`); Python's own are (700, 10, 10).
    GC_THRESHOLDS = (20_000, 20, 20)

    def tune_gc(self) -> None:
        """Once collected: freeze what is alive (modules, the collected
        tests, the backend: alive until the process ends) so that no
        collection scans it again, and collect the young generations less
        often.  A certification allocates many short-lived containers
        (Hypothesis' choices and spans, rows, entities) while a large heap
        stays alive; with Python's thresholds a PostgreSQL worker spent
        9.5–9.9 s of its ~85 s of processor time collecting, 6.1–6.8 s of it
        in full collections, and 5.2–5.9 s (0.2 s full) frozen with these
        thresholds (one certification each, three workers; the reference's
        differential and concurrent machines alone: 4.9 s against 2.6 s).
        Garbage is still collected: only less often and over fewer objects.
        The thresholds are put back at the end of the session (the frozen
        objects stay frozen: they live until the process ends anyway)."""
        if self._gc_thresholds is None:
            self._gc_thresholds = before = gc.get_threshold()
            gc.collect()
            gc.freeze()
            gc.set_threshold(*(max(a, b) for a, b in zip(self.GC_THRESHOLDS, before)))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """Work stealing, which :func:`balance` orders the tests for, unless
        the command line chose a distribution mode (``--dist``)."""
        args = config.invocation_params.args
        if any(a == "--dist" or a.startswith(("--dist=", "-d")) for a in args):
            return None
        from xdist.scheduler import WorkStealingScheduling

        return WorkStealingScheduling(config, log)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
        """A failure is charged to the clause whose check failed (see
        :mod:`cortex_spec.attribution`); the report's text leads with that
        clause's rule, what was expected and observed, and a replay command,
        before a short traceback of the test's own lines."""
        outcome = yield
        report = outcome.get_result()
        if self.dropped and hasattr(self.config, "workerinput"):
            report.user_properties = list(report.user_properties) + [(_DROPPED_KEY, self.dropped)]
            self.dropped = []
        props: dict[str, Any] = dict(item.user_properties)
        if call.excinfo is None or _CLAUSES_KEY not in props or not report.failed:
            return
        from .attribution import attribute

        clause_ids = tuple(props[_CLAUSES_KEY])
        try:
            failure = attribute(item, call.excinfo, clause_ids, call.when)
        except Exception as exc:  # noqa: BLE001 - attribution must never hide the failure
            failure = {"attribution": "test", "clauses": list(clause_ids),
                       "message": f"{call.excinfo.exconly()}\n(attribution failed: {exc!r})"}
        failure["replay"] = self.replay(item)
        for note in reproduction_notes(call.excinfo.value):  # a machine's Hypothesis blob
            if note not in failure["message"]:
                failure["message"] += "\n" + note
        charged = tuple(failure.pop("clauses"))
        report.user_properties = list(report.user_properties) + [
            (_REFUTED_KEY, charged), (_FAILURE_KEY, failure)]
        report.longrepr = (failure["message"] + f"\nreplay: {failure['replay']}\n\n"
                           + _short_traceback(item, call.excinfo))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed_tests.add(report.nodeid)
        props: dict[str, Any] = dict(report.user_properties)
        if _DROPPED_KEY in props:
            self.record_dropped(props[_DROPPED_KEY])
        if _CLAUSES_KEY not in props:
            return
        if _BACKEND_KEY in props:
            if not self.backend_info:
                self.backend_info = props[_BACKEND_KEY]["info"]
                self.declared = frozenset(props[_BACKEND_KEY]["declared"])
            self.backend_start_s = max(self.backend_start_s, props[_BACKEND_KEY].get("start_s", 0.0))
        self.collection_s = max(self.collection_s, props.get(_COLLECTED_KEY, 0.0))
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration
        self.units[report.nodeid] = props.get(_UNIT_KEY, "suite:general")
        if report.when == "call":  # later phases carry the same properties
            for key, value in report.user_properties:
                if key == _MACHINE_KEY:
                    self.record_machine(dict(value))  # type: ignore[call-overload]
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
        failure = props.get(_FAILURE_KEY) if outcome == "failed" else None
        if failure is not None:
            message = failure["message"]
        self.records[report.nodeid] = (outcome, message, clause_ids, report.duration, refuted, failure)
        if outcome == "failed" and self.first_failure is None:
            self.first_failure = {
                "test": report.nodeid,
                "clauses": list(refuted or clause_ids),
                "after_s": round(time.monotonic() - self.started, 3),
            }

    def record_dropped(self, dropped: list[Any]) -> None:
        for nodeid, clause_ids, reason in dropped:
            if clause_ids and nodeid not in self.records:
                self.records[nodeid] = ("not claimed", reason, tuple(clause_ids), 0.0, (), None)

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
            return str(path)
        directory = option(self.config, "cortex_report_dir")
        if directory:
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.store_spec())
            return os.path.join(directory, f"{name}-{_profile(self.config).name}.json")
        return None

    def build(self) -> dict[str, Any]:
        from cortex_spec.reports import TestRecord, build_report

        records = [
            TestRecord(nodeid, outcome, clauses, message, duration, refuted, failure)
            for nodeid, (outcome, message, clauses, duration, refuted, failure) in self.records.items()
        ]
        store = dict(self.backend_info) or {"name": self.store_spec()}
        store.setdefault("spec", self.store_spec())
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
            timings=self.timings(),
            run={"command": self.command(), "seed": self.seed, "seed_source": self.seed_source,
                 "workers": self.timings()["workers"]},
            waivers=self.waivers,
            waiver_file=self.waiver_file,
        )

    def command(self) -> str:
        """The run's command line, shell-quoted (``CORTEX_SPEC_COMMAND``, set
        by ``cortex-spec certify``, else pytest's own arguments)."""
        import shlex

        given = os.environ.get("CORTEX_SPEC_COMMAND")
        if given:
            return given
        program = os.path.basename(sys.argv[0]) or "pytest"
        if program == "__main__.py":  # python -m pytest
            program = "python -m pytest"
        args = [*program.split(), *self.config.invocation_params.args]
        return " ".join(shlex.quote(str(a)) for a in args)

    def timings(self) -> dict[str, Any]:
        """Where the run's time went: wall time, collection and backend start
        (the slowest process's), and the seconds of each unit of work (see
        :func:`unit_of`), slowest first.  Under pytest-xdist ``work_s``, the
        sum of every test's time, exceeds the wall time."""
        units: dict[str, float] = {}
        for nodeid, seconds in self.durations.items():
            unit = self.units.get(nodeid, "suite:general")
            units[unit] = units.get(unit, 0.0) + seconds
        n = getattr(self.config.option, "numprocesses", None)
        return {
            "wall_s": round(time.monotonic() - self.started, 3),
            "collection_s": round(self.collection_s, 3),
            "backend_start_s": round(self.backend_start_s, 3),
            "workers": n if isinstance(n, int) and n > 0 else 1,
            "work_s": round(sum(self.durations.values()), 3),
            "units": {u: round(s, 3) for u, s in sorted(units.items(), key=lambda kv: -kv[1])},
        }

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """A certification run (``--cortex-store`` given, on the command line,
        in the environment or the ini file) starts its backend before
        collecting anything, so a backend that cannot start is reported at
        once (exit status 3), and under pytest-xdist before any worker
        starts; the workers then find an embedded server the controller
        started through the run's id."""
        if not hasattr(self.config, "workerinput") and option(self.config, "cortex_store"):
            self.start_backend()
        self.collected = True

    def write_report(self) -> dict[str, Any] | None:
        """Write the JSON report (and the HTML page beside it, and every
        ``--cortex-output``), if a path is set; append the Markdown summary
        to ``$GITHUB_STEP_SUMMARY`` when that is set."""
        path = self.report_path()
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if (path is None and not self.outputs and not summary) or (not self.records and self.unavailable is None):
            return None
        from cortex_spec.reports import FORMATS, write_html, write_report

        report = self.build()
        self.report = report
        if path is not None:
            write_report(report, path)
            write_html(report, os.path.splitext(path)[0] + ".html")
            self.report_written = path
        for fmt, target in self.outputs:
            os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
            with open(target, "w", encoding="utf-8") as fh:
                fh.write(FORMATS[fmt](report))
        if summary:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(FORMATS["markdown"](report) + "\n")
        return report

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller reports
            self.stop_backend()
            return
        self.stop_backend()
        report = self.write_report()
        if report is None:
            return
        if report["gate"] == "fail" and session.exitstatus == 0:
            session.exitstatus = 1
        elif report["gate"] == "pass" and session.exitstatus == 1 and self.only_waived_failures(report):
            session.exitstatus = 0  # every failure is charged to a waived clause
        if self.unavailable is not None:
            session.exitstatus = EXIT_NOT_CERTIFIED

    def only_waived_failures(self, report: dict[str, Any]) -> bool:
        """Whether every failed test of the session is a certification test
        whose failure is charged only to clauses the report shows waived (a
        failure of any other test keeps pytest's exit status)."""
        waived = {c["id"] for c in report["clauses"] if c["outcome"] == "waived"}
        for nodeid in self.failed_tests:
            record = self.records.get(nodeid)
            if record is None or record[0] != "failed":
                return False
            charged = record[4] or record[2]
            if not set(charged) <= waived:
                return False
        return True

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        report = self.report
        if report is None:
            return
        from cortex_spec.reports import render_annotations, render_failures

        terminalreporter.write_sep("=", "cortex-spec")
        for line in render_failures(report).splitlines():
            terminalreporter.write_line(line)
        terminalreporter.write_line(report["verdict"])
        if self.report_written:
            terminalreporter.write_line(f"report: {self.report_written}")
        if os.environ.get("GITHUB_ACTIONS") == "true":
            for line in render_annotations(report).splitlines():
                terminalreporter.write_line(line)


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


def _short_traceback(item: pytest.Item, excinfo: Any, limit: int = 12) -> str:
    """The test's own frames (file:line, function, source line) and the
    error, without the library frames in between."""
    from .attribution import source_path

    lines = ["traceback (the test's lines):"]
    path = str(source_path(item))
    entries = list(excinfo.traceback)
    own = [e for e in entries if str(e.path) == path]
    if entries and (not own or own[-1] is not entries[-1]):
        own.append(entries[-1])  # where the error was raised
    for entry in own[-limit:]:
        try:
            source = str(entry.statement).strip().splitlines()[0]
        except Exception:  # noqa: BLE001 - a frame without source
            source = "?"
        lines.append(f"  {os.path.basename(str(entry.path))}:{entry.lineno + 1} in {entry.name}")
        lines.append(f"      {source}")
    lines.append(excinfo.exconly().splitlines()[0] if excinfo.exconly() else type(excinfo.value).__name__)
    return "\n".join(lines)


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


@pytest.fixture
def cortex_declared(cortex_harness: Harness, pytestconfig: pytest.Config) -> frozenset[str]:
    """The classes certified in this run: those the store of
    ``cortex_harness`` declares (with what they require), narrowed by
    ``--cortex-classes``."""
    return _run(pytestconfig).backend(cortex_harness)[1]


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
    harness, certified, info, start_s = run.backend(request.getfixturevalue("cortex_harness"))
    item.user_properties.append(
        (_BACKEND_KEY, {"info": info, "declared": sorted(certified), "start_s": start_s})
    )
    missing = sorted(classes - certified)
    if missing:
        declared = set(info.get("declared", ()))
        if run.selected is not None and set(missing) <= declared:
            pytest.skip(f"{NOT_CLAIMED}: --cortex-classes leaves out {', '.join(missing)}")
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


@pytest.fixture
def cortex_gateway_location(cortex_harness: Harness) -> Iterator[Any]:
    """A fresh gateway location of the backend, discarded after the test."""
    location = cortex_harness.new_gateway_location()
    yield location
    cortex_harness.discard_gateway_location(location)


@pytest.fixture
def cortex_open_gateway(cortex_store: Any, cortex_gateway_location: Any) -> Iterator[Any]:
    """``cortex_open_gateway(location=None)`` opens a gateway store through the
    test's store (the backend's opener) on the test's gateway location, or on
    ``location``; every gateway store it opened is closed after the test."""
    opened: list[Any] = []

    def open_gateway(location: Any = None) -> Any:
        target = cortex_gateway_location if location is None else location
        gateway = cortex_store.open_gateway(target)
        opened.append(gateway)
        return gateway

    yield open_gateway
    for gateway in reversed(opened):
        try:
            gateway.close()
        except Exception:  # noqa: BLE001 - a crashed or broken store: best effort
            pass


@pytest.fixture
def cortex_gateway(cortex_open_gateway: Any) -> Any:
    """An open gateway store on a fresh location."""
    return cortex_open_gateway()


# -- the suites' short names ------------------------------------------------------


@pytest.fixture
def store(cortex_store: Any) -> Any:
    """A fresh, empty store of the backend under certification."""
    return cortex_store


@pytest.fixture
def clock(cortex_clock: ManualClock) -> ManualClock:
    """The manual clock ``store`` reads."""
    return cortex_clock


@pytest.fixture
def profile(cortex_profile: Profile) -> Profile:
    """The certification profile (how hard the suites push)."""
    return cortex_profile


@pytest.fixture
def gateway_location(cortex_gateway_location: Any) -> Any:
    """A fresh gateway location of the backend under certification."""
    return cortex_gateway_location


@pytest.fixture
def open_gateway(cortex_open_gateway: Any) -> Any:
    """``open_gateway(location=None)``: open a gateway store through ``store``."""
    return cortex_open_gateway


@pytest.fixture
def gateway(cortex_gateway: Any) -> Any:
    """An open gateway store on a fresh location."""
    return cortex_gateway


@pytest.fixture
def other_location(cortex_harness: Harness) -> Iterator[Any]:
    """A second fresh gateway location, discarded after the test."""
    location = cortex_harness.new_gateway_location()
    yield location
    cortex_harness.discard_gateway_location(location)


@pytest.fixture
def w(store: Any, clock: ManualClock) -> Any:
    """Class a2a's building blocks (``World``) on ``store`` and ``clock``."""
    from cortex_spec.conformance.test_a2a import World

    return World(store, clock)
