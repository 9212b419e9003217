"""Suite classes: certify a store from a test module of your own.

Subclass :class:`StoreSuite` (every test a certification runs: the clause
suite of every class, the cross-class suites and the state machines) or one
class's suite (:data:`SUITES`, e.g. :class:`CheckpointsSuite`: only the
module of that class, for a store being written), and point it at your
store with ``factory`` or ``harness``::

    # tests/test_certify.py
    from cortex_spec.suite import CheckpointsSuite, StoreSuite

    from mystore import make_store


    class TestMyStore(StoreSuite):
        factory = make_store            # factory(clock) -> store, or a generator
        skip_tests = {"test_resolve_race": "threads not supported yet (#12)"}

A ``factory`` may ``yield`` its store and clean up after the ``yield`` (see
:class:`cortex_spec.harness.FactoryHarness`); ``harness`` takes a
:class:`~cortex_spec.harness.Harness` subclass or instance (servers,
reopening, the gateway hooks).  ``skip_tests`` maps a test's name (or
``module::name``, e.g. ``test_checkpoints::test_x``, where two modules share
a name) to the reason it is skipped: it is reported *skipped* with that
reason, never passed.  A test the subclass defines again replaces the
suite's and keeps the clauses of the one it replaces::

    class TestMyCheckpoints(CheckpointsSuite):
        factory = make_store

        def test_count_pending_total(self, store):   # checked my way
            ...

In a flat suite (:data:`SUITES`) the tests are attributes of the class; in
:class:`StoreSuite` they sit in one nested class per module
(``TestMyStore::TestCheckpoints::test_x``).  The report, the verdict and
the exit status are the ones ``cortex-spec certify`` gives for the same
store (``--cortex-report-dir`` or ``cortex_report_dir`` in the ini file
writes the report).  A session certifies one store: the report describes
the first backend a test started.

The other route needs no class: star-import a suite module
(``from cortex_spec.conformance.test_checkpoints import *``) and name the
store with ``--cortex-store`` or ``cortex_store`` in ``[tool.pytest.ini_options]``,
or override the ``cortex_harness`` fixture in a ``conftest.py``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from .harness import Harness, as_harness

__all__ = ["StoreSuite", "SUITES", "MODULES"]

def _suite_modules() -> dict[str, str]:
    """Every test module of the two packages a certification runs
    (``--pyargs cortex_spec.conformance cortex_spec.stateful``), by short name."""
    import pkgutil

    out: dict[str, str] = {}
    for package in ("cortex_spec.conformance", "cortex_spec.stateful"):
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
            if info.name.startswith("test_"):
                out[info.name.removeprefix("test_")] = f"{package}.{info.name}"
    return out


#: The suite modules a certification runs, by short name.
MODULES: dict[str, str] = _suite_modules()

#: marks a suite test keeps when a subclass replaces it
_KEPT_MARKS = ("clause", "cortex_classes", "cortex_requires", "cortex_cost")


def _suite_tests(module: Any) -> dict[str, Callable[..., Any]]:
    """The test functions a suite module defines (not those it imports)."""
    return {
        name: obj
        for name, obj in vars(module).items()
        if name.startswith("test_") and callable(obj) and getattr(obj, "__module__", None) == module.__name__
    }


class _Tests:
    """What every suite class shares: the store it certifies and the rules
    of replacing or skipping one of its tests."""

    #: ``factory(clock) -> store`` (or a generator yielding the store)
    factory: ClassVar[Callable[..., Any] | None] = None
    #: a Harness subclass or instance, instead of ``factory``
    harness: ClassVar[type[Harness] | Harness | None] = None
    #: test name (or ``module::name``) -> the reason it is skipped
    skip_tests: ClassVar[dict[str, str]] = {}
    #: the suite module whose tests the class holds (None: nested classes)
    cortex_suite: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            original = _inherited_test(cls, name)
            if original is None or not callable(value) or isinstance(value, staticmethod):
                continue
            # a replaced test keeps the clauses (and class needs) of the suite's
            if not any(m.name == "clause" for m in getattr(value, "pytestmark", [])):
                for mark in getattr(original, "pytestmark", []):
                    if mark.name in _KEPT_MARKS:
                        pytest.MarkDecorator(mark)(value)
        unknown = sorted(key for key in vars(cls).get("skip_tests", {}) if not _names_a_test(cls, key))
        if unknown:
            raise TypeError(f"{cls.__qualname__}.skip_tests names no test of the suite: {', '.join(unknown)}")


def _names_a_test(cls: type, key: str) -> bool:
    """Whether ``key`` (``name`` or ``module::name``) names a test of the
    suite class ``cls`` or of one of its nested suite classes."""
    module, _, name = key.rpartition("::")
    holders = [cls] + [v for k in dir(cls) if k.startswith("Test") and isinstance(v := getattr(cls, k), type)]
    return any(
        isinstance(inspect.getattr_static(holder, name, None), staticmethod)
        and (not module or str(getattr(holder, "cortex_suite", "")).rsplit(".", 1)[-1] == module)
        for holder in holders
    )


def _inherited_test(cls: type, name: str) -> Callable[..., Any] | None:
    if not name.startswith("test_"):
        return None
    for base in cls.__mro__[1:]:
        found = vars(base).get(name)
        if isinstance(found, staticmethod):
            return found.__func__
    return None


def _suite_owner(request: pytest.FixtureRequest) -> type[_Tests]:
    """The outermost suite class of the requesting test (the one the author
    wrote, holding ``factory``/``harness``)."""
    owner = None
    node: Any = request.node
    while node is not None:
        obj = getattr(node, "obj", None)
        if isinstance(obj, type) and issubclass(obj, _Tests):
            owner = obj
        node = node.parent
    if owner is None:  # pragma: no cover - the fixture is only visible inside suite classes
        raise RuntimeError("cortex_spec.suite: a suite fixture outside a suite class")
    return owner


def _harness_of(owner: type[_Tests]) -> Harness:
    """The harness of a suite class, made once per class (and per process)."""
    made = owner.__dict__.get("_cortex_harness")
    if isinstance(made, Harness):
        return made
    if owner.harness is not None:
        harness = as_harness(owner.harness)
    elif owner.factory is not None:
        harness = as_harness(owner.factory)
    else:
        raise pytest.UsageError(
            f"{owner.__qualname__}: a suite class names its store: set factory = make_store "
            "(factory(clock) -> store) or harness = MyHarness"
        )
    owner._cortex_harness = harness  # type: ignore[attr-defined]
    return harness


class _Fixtures:
    """The fixture a suite class overrides: its own store's harness."""

    @pytest.fixture(scope="class")
    def cortex_harness(self, request: pytest.FixtureRequest) -> Harness:
        """The started harness of this suite class's ``factory`` or ``harness``."""
        harness = _harness_of(_suite_owner(request))
        request.config._cortex.start_backend(harness)  # type: ignore[attr-defined]
        return harness

    @pytest.fixture(autouse=True)
    def _cortex_suite_skips(self, request: pytest.FixtureRequest, _cortex_claim_gate: None) -> None:
        """Skip (reported *skipped*, never passed) what ``skip_tests`` names,
        once the claim gate let the test through."""
        owner = _suite_owner(request)
        function = getattr(request.node, "function", None)
        name = getattr(function, "__name__", request.node.name.split("[", 1)[0])
        module = str(getattr(function, "__module__", "")).rsplit(".", 1)[-1]
        reason = owner.skip_tests.get(f"{module}::{name}") or owner.skip_tests.get(name)
        if reason:
            pytest.skip(reason)


def _flat(key: str, module_name: str) -> type:
    """A class holding the tests of ``module_name`` (as static methods: they
    take fixtures, not ``self``)."""
    module = importlib.import_module(module_name)
    body: dict[str, Any] = {name: staticmethod(test) for name, test in _suite_tests(module).items()}
    body.update(cortex_suite=module_name, __module__=__name__,
                __doc__=f"The tests of ``{module_name}`` (see :mod:`cortex_spec.suite`).")
    return type("Test" + _class_name(key).removesuffix("Suite"), (_Tests,), body)


def _class_name(key: str) -> str:
    return "".join(part.capitalize() for part in key.replace("-", "_").split("_")) + "Suite"


class StoreSuite(_Fixtures, _Tests):
    """Every test a certification runs, in one nested class per suite module
    (``TestCheckpoints``, ..., ``TestMachines``); subclass it and set
    ``factory`` or ``harness`` (see the module docstring)."""


def _build() -> dict[str, type]:
    suites: dict[str, type] = {}
    for key, module_name in MODULES.items():
        tests = _flat(key, module_name)
        # nested in StoreSuite, whose subclass (the author's) holds the fixtures
        setattr(StoreSuite, "Test" + _class_name(key).removesuffix("Suite"), tests)
        suites[key] = type(_class_name(key), (_Fixtures, tests),
                           {"__module__": __name__, "__doc__": tests.__doc__})
    return suites


#: One flat suite class per suite module: ``RunsSuite``, ``CheckpointsSuite``,
#: ..., ``ScopeSuite``, ``CommonSuite``, ``KindsSuite``, ``MachinesSuite``.
SUITES: dict[str, type] = _build()
__all__ += [suite.__name__ for suite in SUITES.values()]

if TYPE_CHECKING:  # what the loop makes, spelt out for type checkers
    class RunsSuite(_Fixtures, _Tests): ...
    class SuspensionsSuite(_Fixtures, _Tests): ...
    class LeasesSuite(_Fixtures, _Tests): ...
    class CheckpointsSuite(_Fixtures, _Tests): ...
    class A2aSuite(_Fixtures, _Tests): ...
    class MemorySuite(_Fixtures, _Tests): ...
    class CatalogSuite(_Fixtures, _Tests): ...
    class OrchestrationSuite(_Fixtures, _Tests): ...
    class GatewaySuite(_Fixtures, _Tests): ...
    class ScopeSuite(_Fixtures, _Tests): ...
    class CommonSuite(_Fixtures, _Tests): ...
    class KindsSuite(_Fixtures, _Tests): ...
    class MachinesSuite(_Fixtures, _Tests): ...
else:
    globals().update({suite.__name__: suite for suite in SUITES.values()})
