"""Harnesses: how certification obtains stores of one backend.

A :class:`Harness` starts a backend once per test session and then hands out
fresh, empty stores wired to a given clock.  Backend authors either write a
``Harness`` subclass or, for the common case, pass a plain factory
``factory(clock) -> store``; :func:`resolve_harness` accepts both::

    pytest --pyargs cortex_spec.conformance --cortex-store mypkg.store:make_store
    cortex-spec certify mypkg.store:make_store

Durability (a store closed and opened again on the same storage sees
everything acknowledged) is only checked for harnesses that say
``reopenable = True`` and implement :meth:`Harness.new_location` /
:meth:`Harness.open`; for the others those checks are reported as not
claimed, never as passed.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any, Callable

from .classes import closure, declared_classes
from .clock import Clock
from .errors import BackendUnavailable

__all__ = [
    "Harness",
    "FactoryHarness",
    "BUILTIN_HARNESSES",
    "resolve_harness",
    "HarnessError",
]


class HarnessError(Exception):
    """The ``--cortex-store`` value cannot be resolved to a harness."""


class Harness:
    """Base class of every backend harness.

    Subclasses set :attr:`name` and implement :meth:`new_location` and
    :meth:`open` (and :meth:`start`/:meth:`stop` when a server is involved).
    """

    #: Shown in reports and progress lines.
    name: str = "custom"
    #: True when ``open(location)`` after ``close()`` sees the same data.
    reopenable: bool = False
    #: True when :meth:`kill_connections` really kills server connections.
    can_kill_connections: bool = False

    def start(self) -> None:
        """Start servers, check drivers; raise ``BackendUnavailable`` on failure."""

    def stop(self) -> None:
        """Stop whatever :meth:`start` started.  Must be safe after a failed start."""

    def describe(self) -> dict[str, Any]:
        """What the report shows about the backend (versions, server, URL)."""
        return {"name": self.name}

    def new_location(self) -> Any:
        """Fresh, empty storage (a medium, a file, a database)."""
        raise NotImplementedError

    def open(self, location: Any, clock: Clock) -> Any:
        """A store on ``location`` that reads ``clock``."""
        raise NotImplementedError

    def discard(self, location: Any) -> None:
        """Remove a location once its test is over (best effort)."""

    def kill_connections(self, store: Any) -> bool:
        """Server backends: kill the store's server connections from outside.

        Returns False when the backend has no such notion (the default).
        """
        return False

    # -- derived ---------------------------------------------------------------

    @property
    def features(self) -> frozenset[str]:
        """What tests marked ``@pytest.mark.cortex_requires(...)`` may need:
        ``"reopen"`` and ``"kill-connection"``."""
        out = set()
        if self.reopenable:
            out.add("reopen")
        if self.can_kill_connections:
            out.add("kill-connection")
        return frozenset(out)

    def probe_capabilities(self, clock: Clock) -> frozenset[str]:
        """Open one store and read its declared classes."""
        location = self.new_location()
        store = self.open(location, clock)
        try:
            return declared_classes(store)
        finally:
            store.close()
            self.discard(location)


class FactoryHarness(Harness):
    """Wraps a plain ``factory(clock) -> store`` (each call a fresh store)."""

    reopenable = False

    def __init__(self, factory: Callable[[Clock], Any], name: str) -> None:
        self.factory = factory
        self.name = name

    def new_location(self) -> None:
        return None

    def open(self, location: None, clock: Clock) -> Any:
        return self.factory(clock)


#: Built-in backends by name (``--cortex-store NAME``).
BUILTIN_HARNESSES: dict[str, str] = {
    "reference": "cortex_spec.reference.harness:ReferenceHarness",
    "sqlite": "cortex_spec.adapters.sql.harness:SqliteHarness",
    "postgres": "cortex_spec.adapters.sql.harness:PostgresHarness",
    "mongo": "cortex_spec.adapters.mongo.harness:MongoHarness",
    "mongo-url": "cortex_spec.adapters.mongo.harness:MongoUrlHarness",
    "mongo-docker": "cortex_spec.adapters.mongo.harness:MongoDockerHarness",
}


def _import(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise HarnessError(f"{target!r} is not of the form 'module:factory'")
    cwd = os.getcwd()
    if cwd not in sys.path:
        # `module:factory` names the user's own code, usually in the current
        # directory; appended so that it never shadows an installed package.
        sys.path.append(cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise HarnessError(f"cannot import {module_name!r} for --cortex-store: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise HarnessError(f"{module_name!r} has no attribute {attr!r}") from None
    return obj


def resolve_harness(spec: str) -> Harness:
    """``NAME`` of a built-in backend, or ``module:obj`` where ``obj`` is a
    :class:`Harness` subclass or instance, or a ``factory(clock)``."""
    if ":" not in spec:
        if spec not in BUILTIN_HARNESSES:
            known = ", ".join(sorted(BUILTIN_HARNESSES))
            raise HarnessError(
                f"unknown store {spec!r}: use one of {known}, or 'module:factory' "
                "naming your own factory(clock) -> store"
            )
        target = BUILTIN_HARNESSES[spec]
    else:
        target = spec
    obj = _import(target)
    if inspect.isclass(obj) and issubclass(obj, Harness):
        return obj()
    if isinstance(obj, Harness):
        return obj
    if callable(obj):
        return FactoryHarness(obj, name=spec)
    raise HarnessError(f"{target!r} is neither a Harness nor a callable factory(clock)")


def effective_classes(declared: frozenset[str]) -> frozenset[str]:
    """Declared classes whose required classes are declared too."""
    return frozenset(c for c in declared if closure({c}) <= declared)


__all__ += ["effective_classes", "BackendUnavailable"]
