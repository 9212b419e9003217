"""Harnesses: how certification obtains stores of one backend.

A :class:`Harness` starts a backend once per test session and then hands out
fresh, empty stores wired to a given clock.  Backend authors either write a
``Harness`` subclass or, for the common case, pass a plain factory
``factory(clock) -> store`` (or a generator that yields the store and cleans up
after the ``yield``); :func:`resolve_harness` accepts both::

    pytest --pyargs cortex_spec.conformance --cortex-store mypkg.store:make_store
    cortex-spec certify mypkg.store:make_store

A package may also register a backend *name* for ``--cortex-store NAME`` in
the entry-point group ``cortex_spec.stores`` (:data:`ENTRY_POINT_GROUP`)::

    [project.entry-points."cortex_spec.stores"]
    mystore = "mypkg.store:make_store"

Durability (a store closed and opened again on the same storage sees
everything acknowledged) is only checked for harnesses that say
``reopenable = True`` and implement :meth:`Harness.new_location` /
:meth:`Harness.open`; for the others those checks are reported as not
claimed, never as passed.

Class ``gateway`` is opened by location, not made by the factory: a store
declaring it provides ``open_gateway(location)``, and the harness hands out
fresh locations (:meth:`Harness.new_gateway_location`, by default a unique
name).  Its crash clauses need a way to stand in for the death of the
holding process (:meth:`Harness.crash_gateway`, feature ``gateway-crash``),
GW-OPEN-8 needs a location that cannot be opened
(:meth:`Harness.unusable_gateway_location`, feature ``unusable-location``),
and the cross-process lock clauses need a location a child process can open
(:meth:`Harness.gateway_child`, feature ``cross-process``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
import sys
import uuid
from collections.abc import Callable, Generator
from typing import Any

from .classes import closure, declared_classes
from .clock import Clock
from .errors import BackendUnavailable

__all__ = [
    "Harness",
    "FactoryHarness",
    "BUILTIN_HARNESSES",
    "ENTRY_POINT_GROUP",
    "registered_stores",
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
    #: Seconds within which a dead holder's gateway lock is released, for a
    #: backend whose server releases it (a lease that runs out, or a session
    #: the server must notice has ended; GW-OPEN-6); None when the lock is
    #: gone the moment the holding process is.
    gateway_lease: float | None = None

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

    # -- class gateway ---------------------------------------------------------------

    def new_gateway_location(self) -> Any:
        """A fresh, unused gateway location for the stores of this harness
        (GW-SCOPE-4).  The default, a unique name, suits backends whose
        locations are names; override it otherwise."""
        return f"cortex-spec-gw-{uuid.uuid4().hex[:16]}"

    def discard_gateway_location(self, location: Any) -> None:
        """Remove a gateway location once its test is over (best effort)."""

    def crash_gateway(self, gateway: Any) -> None:
        """Stand in for the death of the process holding ``gateway``: abandon
        it without ``close`` so that its lock is released the way the
        backend releases the lock of a dead process (feature
        ``gateway-crash``).  Needed by GW-OPEN-6 and the crash machine."""
        raise NotImplementedError

    def expire_gateway_lease(self, location: Any) -> None:
        """For a server-released lock (``gateway_lease``): let the dead
        holder's lock of ``location`` go — move a lease clock past the lease,
        or wait (within ``gateway_lease``) for the server to end the dead
        session.  Nothing to do otherwise."""

    def unusable_gateway_location(self) -> tuple[Any, Callable[[], None]]:
        """A location whose storage exists but cannot be opened (the open
        raises ``StoreError``, GW-OPEN-8), and a function that repairs it
        (feature ``unusable-location``)."""
        raise NotImplementedError

    def store_child(self, location: Any) -> tuple[str, list[Any]]:
        """For a backend a second process can open (feature ``kill-writer``):
        ``("module:function", args)`` with JSON ``args`` such that
        ``function(*args)``, called in a fresh Python process, returns a store
        on ``location`` reading the system clock.  The crash machine kills
        such a process with SIGKILL while it writes (a batch of messages, a
        delete of a session) and checks what the storage kept."""
        raise NotImplementedError

    def gateway_child(self, location: Any) -> tuple[str, list[Any]]:
        """For a backend a second process can open (feature
        ``cross-process``): ``("module:function", args)`` with JSON ``args``
        such that ``function(*args)``, called in a fresh Python process,
        returns an open gateway store on ``location``."""
        raise NotImplementedError

    # -- class admin ---------------------------------------------------------------

    def corrupt_scope(self, location: Any, kind: str, key: str, problem: str) -> bool:
        """Stand in for a row written by another program or by hand: change,
        through the backend's own driver and behind the store's back, the
        stored scope of the row ``key`` of stored kind ``kind`` at
        ``location`` so that it has ``problem`` (a
        :class:`cortex_spec.admin.ScopeProblem` value: ``zero``,
        ``unreadable``, ``inconsistent``).  True when the row now has it;
        False when the backend cannot store that problem (the reference keeps
        one form of a scope: nothing of it can disagree).  Feature
        ``corrupt-scope`` (ADMIN-INSPECT)."""
        raise NotImplementedError

    def plant_schema_version(self, location: Any, version: int) -> bool:
        """Make the storage at ``location`` hold layout ``version`` through
        the backend's own driver: the real layout of an older version the
        backend had, or only the version number of a newer one it cannot
        know.  False when the backend never had that version.  Feature
        ``plant-schema`` (ADMIN-MIG-3/4); the location is discarded after
        the test as usual."""
        raise NotImplementedError

    # -- derived ---------------------------------------------------------------

    def _overrides(self, name: str) -> bool:
        return getattr(type(self), name) is not getattr(Harness, name)

    @property
    def features(self) -> frozenset[str]:
        """What tests marked ``@pytest.mark.cortex_requires(...)`` may need:
        ``"reopen"``, ``"kill-connection"``, ``"kill-writer"`` (a store held
        by a child process that is killed while it writes), for class
        gateway ``"gateway-crash"``, ``"unusable-location"`` and
        ``"cross-process"``, and for class admin ``"corrupt-scope"`` and
        ``"plant-schema"``."""
        out = set()
        if self.reopenable:
            out.add("reopen")
        if self.can_kill_connections:
            out.add("kill-connection")
        if self._overrides("crash_gateway"):
            out.add("gateway-crash")
        if self._overrides("unusable_gateway_location"):
            out.add("unusable-location")
        if self._overrides("gateway_child"):
            out.add("cross-process")
        if self._overrides("store_child"):
            out.add("kill-writer")
        if self._overrides("corrupt_scope"):
            out.add("corrupt-scope")
        if self._overrides("plant_schema_version"):
            out.add("plant-schema")
        return frozenset(out)

    def probe_capabilities(self, clock: Clock) -> frozenset[str]:
        """Open one store and read its declared classes."""
        location = self.new_location()
        store = self.open(location, clock)
        try:
            declared = declared_classes(store)
            if not callable(getattr(store, "close", None)):
                raise TypeError(
                    f"{type(store).__name__} has no close() method: every store provides "
                    "close(), which releases its connections and locks and may do nothing "
                    "(cortex_spec.Store)"
                )
            return declared
        finally:
            close = getattr(store, "close", None)
            if callable(close):
                close()
            self.discard(location)


class FactoryHarness(Harness):
    """Wraps a plain ``factory(clock) -> store`` (each call a fresh store).

    A factory may instead be a generator that yields one store: the code
    after its ``yield`` runs once the test is over, after the store's
    ``close()`` (when the test's storage is discarded), e.g. to delete a
    temporary database::

        def make_store(clock):
            path = tempfile.mkdtemp()
            yield MyStore(path, clock)
            shutil.rmtree(path)
    """

    reopenable = False

    def __init__(self, factory: Callable[[Clock], Any], name: str | None = None) -> None:
        self.factory = factory
        self.name = name or factory_name(factory)
        #: cleanups of stores opened without a location of this harness
        self._pending: list[Generator[Any, None, None]] = []

    def new_location(self) -> list[Generator[Any, None, None]]:
        """The cleanups still to run for the stores opened on this location."""
        return []

    def open(self, location: Any, clock: Clock) -> Any:
        made = self.factory(clock)
        if not inspect.isgenerator(made):
            return made
        try:
            store = next(made)
        except StopIteration:
            raise TypeError(f"the store factory {self.name!r} returned without yielding a store") from None
        (location if isinstance(location, list) else self._pending).append(made)  # type: ignore[arg-type]
        return store

    def discard(self, location: Any) -> None:
        if isinstance(location, list):
            _finish(self.name, location)

    def stop(self) -> None:
        _finish(self.name, self._pending)


def _finish(name: str, generators: list[Generator[Any, None, None]]) -> None:
    """Run the code after the ``yield`` of each generator factory (in reverse
    order of opening); a factory that yields twice is an error."""
    while generators:
        gen = generators.pop()
        try:
            next(gen)
        except StopIteration:
            continue
        gen.close()
        raise TypeError(f"the store factory {name!r} yielded more than one store")


def factory_name(factory: Callable[..., Any]) -> str:
    """``module:qualname`` of a factory (the spelling ``--cortex-store`` takes)."""
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None) or type(factory).__qualname__
    return f"{module}:{qualname}" if module else qualname


#: Built-in backends by name (``--cortex-store NAME``).
BUILTIN_HARNESSES: dict[str, str] = {
    "reference": "cortex_spec.reference.harness:ReferenceHarness",
    "sqlite": "cortex_spec.adapters.sql.harness:SqliteHarness",
    "postgres": "cortex_spec.adapters.sql.harness:PostgresHarness",
    "mongo": "cortex_spec.adapters.mongo.harness:MongoHarness",
    "mongo-url": "cortex_spec.adapters.mongo.harness:MongoUrlHarness",
    "mongo-docker": "cortex_spec.adapters.mongo.harness:MongoDockerHarness",
}

#: The entry-point group through which a package registers backend names:
#: ``name = "module:factory"`` (or ``"module:HarnessClass"``).
ENTRY_POINT_GROUP = "cortex_spec.stores"


def registered_stores() -> dict[str, str]:
    """Every backend name ``--cortex-store`` takes -> its ``module:obj``: the
    built-in ones and those packages register in :data:`ENTRY_POINT_GROUP`
    (a built-in name cannot be taken over)."""
    out: dict[str, str] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        out.setdefault(ep.name, ep.value)
    out.update(BUILTIN_HARNESSES)
    return out


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
        known = registered_stores()
        if spec not in known:
            raise HarnessError(
                f"unknown store {spec!r}: use one of {', '.join(sorted(known))}, or 'module:factory' "
                f"naming your own factory(clock) -> store (a package registers a name in the "
                f"{ENTRY_POINT_GROUP!r} entry-point group)"
            )
        target = known[spec]
    else:
        target = spec
    obj = _import(target)
    return as_harness(obj, spec, target)


def as_harness(obj: Any, name: str | None = None, target: str | None = None) -> Harness:
    """A :class:`Harness` from a harness class or instance, or a factory
    ``factory(clock) -> store`` (or a generator factory) wrapped as one."""
    if inspect.isclass(obj) and issubclass(obj, Harness):
        return obj()
    if isinstance(obj, Harness):
        return obj
    if callable(obj):
        return FactoryHarness(obj, name=name)
    target = target or repr(obj)
    raise HarnessError(f"{target!r} is neither a Harness nor a callable factory(clock)")


def auto_workers(cores: int | None = None) -> int:
    """pytest-xdist workers of a certification (``-n auto`` and ``cortex-spec
    certify``): one per core, at most four, and one more; 0, one process, on
    a single core, where a worker would only add start-up.

    The extra worker: a worker leaves its core idle while it waits (on a
    database server, on the controller, for its last test while the other
    worker has finished); three workers beat two on two cores for every
    store measured (benchmarks/README.md, "how many workers")."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2:
        return 0
    return min(cores, 4) + 1


def effective_classes(declared: frozenset[str]) -> frozenset[str]:
    """Declared classes whose required classes are declared too."""
    return frozenset(c for c in declared if closure({c}) <= declared)


__all__ += ["auto_workers", "effective_classes", "BackendUnavailable"]
