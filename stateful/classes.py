"""Where each conformance class plugs into the machines.

A class with machine behaviour keeps one module ``cortex_spec.stateful.<class>``
(the class's name) that defines ``MACHINES``, a
:class:`~.plugin.ClassMachines`.  This module finds them for the classes of
:data:`cortex_spec.CLASSES`, in catalogue order, and opens the objects their
targets name; nothing here (or in the machines) names a class.  Adding a
class to the machines is adding its module.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, Iterable

from cortex_spec.classes import CLASSES, closure

from .ops import StoreSession
from .plugin import ClassMachines

__all__ = [
    "plugins",
    "plugin",
    "plugins_for",
    "machine_classes",
    "classes_with_targets",
    "open_session",
    "close_session",
    "reopen_session",
    "reference_session",
]


@functools.cache
def plugins() -> dict[str, ClassMachines]:
    """Every class's machines, by class name, in catalogue order."""
    found: dict[str, ClassMachines] = {}
    for name in CLASSES:
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{name}":
                raise
            continue
        machines = getattr(module, "MACHINES", None)
        if not isinstance(machines, ClassMachines) or machines.name != name:
            raise TypeError(f"{module.__name__}.MACHINES must be the ClassMachines of class {name!r}")
        found[name] = machines
    return found


def plugin(name: str) -> ClassMachines:
    return plugins()[name]


def plugins_for(classes: Iterable[str]) -> list[ClassMachines]:
    """The machines of ``classes``, in catalogue order."""
    chosen = frozenset(classes)
    return [m for name, m in plugins().items() if name in chosen]


def machine_classes(focus: str, declared: frozenset[str]) -> frozenset[str]:
    """The classes whose rules the machines of class ``focus`` run: the class
    and the classes it requires (all of them declared, or ``focus`` would not
    be certified)."""
    return closure({focus}) & frozenset(declared)


def classes_with_targets(targets: Iterable[str]) -> frozenset[str]:
    """The classes whose target is one of ``targets``."""
    wanted = frozenset(targets)
    return frozenset(m.name for m in plugins().values() if m.target is not None and m.target.name in wanted)


def open_session(harness: Any, store: Any, classes: Iterable[str]) -> StoreSession:
    """``store`` with the objects the classes' targets open on it."""
    handles = {}
    try:
        for machines in plugins_for(classes):
            if machines.target is not None:
                handles[machines.target.name] = machines.target.open(harness, store)
    except BaseException:
        for handle in handles.values():
            handle.close()
        raise
    return StoreSession(store, handles)


def close_session(opened: Any) -> None:
    """Close what :func:`open_session` opened (discarding its locations) and the store."""
    try:
        for handle in getattr(opened, "handles", {}).values():
            handle.close()
    finally:
        opened.close()


def reopen_session(opened: StoreSession, open_store: Callable[[], Any]) -> StoreSession:
    """A restart: close the targets and the store, open a new store with
    ``open_store()`` and reopen every target on the same location."""
    for handle in opened.handles.values():
        handle.close(discard=False)
    opened.store.close()
    store = open_store()
    for handle in opened.handles.values():
        handle.reopen(store)
    return StoreSession(store, opened.handles)


def reference_session(store: Any) -> StoreSession:
    """A reference store with every class's target on its own medium."""
    handles = {
        m.target.name: m.target.reference(store) for m in plugins().values() if m.target is not None
    }
    return StoreSession(store, handles)
