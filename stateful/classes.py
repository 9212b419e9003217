"""Where each conformance class plugs into the machines.

A class contributes one module (``stateful/<class>.py``) with:

* ``RULES``: ``name -> rule(machine, data) -> Op`` for the differential and
  crash machines;
* ``ID_KINDS``: the id kinds its rules create (for the id pools);
* ``SEED_RULES``: creating rules run a few times when an example starts;
* ``views(store, contexts, known)``: the whole-state views (MACH-DIFF-2);
* ``racing_ops(world)`` and ``storm_ops(world)``: builders ``build(draw) ->
  Op`` of calls for concurrent scenarios (a mix of anything, and storms
  where every branch contends for one row).

Optional hooks:

* ``STANDALONE = True``: the class shares no rows with any other, so the
  differential and crash machines run it in a machine of its own, which
  keeps Hypothesis' rule choice spread over fewer rules;
* ``world(draw, t0)`` (stored in ``world.extras[NAME]``) and
  ``setup(world)``: rows of the class a concurrent scenario starts from;
* ``OPAQUE_FIELDS``, ``observe``, ``SPLITS`` and ``FAMILIES`` (see
  ``a2a.py``, the module that uses them);
* ``TARGET`` with ``open_target(harness, store)`` and
  ``reference_target(reference_store)``: for a class whose methods live on
  an object the store opens (``gateway``); its ops carry that target and run
  through a :class:`~.ops.Session` (see :func:`open_session`).

Adding a class is adding its module to :data:`MODULES`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

from cortex_spec.classes import CLASSES

from . import a2a, checkpoints, gateway, runs, suspensions
from .ops import Session

__all__ = ["MODULES", "modules_for", "machine_groups", "open_session", "close_session",
           "reopen_session", "reference_session"]

MODULES: dict[str, ModuleType] = {
    "runs": runs,
    "suspensions": suspensions,
    "checkpoints": checkpoints,
    "a2a": a2a,
    "gateway": gateway,
}


def modules_for(declared: frozenset[str]) -> list[ModuleType]:
    """The machine modules of the declared classes, in catalogue order."""
    return [MODULES[name] for name in CLASSES if name in declared and name in MODULES]


def machine_groups(declared: frozenset[str]) -> list[frozenset[str]]:
    """How the declared classes are split over sequential machines: each
    ``STANDALONE`` class alone, every other class together (they share rows:
    suspensions move runs)."""
    standalone = [m.NAME for m in modules_for(declared) if getattr(m, "STANDALONE", False)]
    rest = frozenset(declared) - set(standalone)
    return ([rest] if rest else []) + [frozenset({name}) for name in standalone]


def open_session(harness: Any, store: Any, declared: frozenset[str]) -> Session:
    """``store`` with the objects the declared classes' targets open on it."""
    handles = {}
    try:
        for module in modules_for(declared):
            target = getattr(module, "TARGET", None)
            if target:
                handles[target] = module.open_target(harness, store)
    except BaseException:
        for handle in handles.values():
            handle.close()
        raise
    return Session(store, handles)


def close_session(session: Any) -> None:
    """Close what :func:`open_session` opened (discarding its locations) and the store."""
    try:
        for handle in getattr(session, "handles", {}).values():
            handle.close()
    finally:
        session.close()


def reopen_session(session: Session, open_store: Callable[[], Any]) -> Session:
    """A restart: close the targets and the store, open a new store with
    ``open_store()`` and reopen every target on the same location."""
    for handle in session.handles.values():
        handle.close(discard=False)
    session.store.close()
    store = open_store()
    for handle in session.handles.values():
        handle.reopen(store)
    return Session(store, session.handles)


def reference_session(store: Any) -> Session:
    """A reference store with every target on its own medium."""
    handles = {
        module.TARGET: module.reference_target(store)
        for module in MODULES.values() if getattr(module, "TARGET", None)
    }
    return Session(store, handles)
