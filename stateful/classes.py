"""Where each conformance class plugs into the machines.

A class contributes one module (``stateful/<class>.py``) with:

* ``RULES``: ``name -> rule(machine, data) -> Op`` for the differential and
  crash machines;
* ``ID_KINDS``: the id kinds its rules create (for the id pools);
* ``views(store, contexts, known)``: the whole-state views (MACH-DIFF-2);
* ``racing_ops(world)`` and ``storm_ops(world)``: builders ``build(draw) ->
  Op`` of calls for concurrent scenarios (a mix of anything, and storms
  where every branch contends for one row).

Adding a class is adding its module to :data:`MODULES`.
"""

from __future__ import annotations

from types import ModuleType

from cortex_spec.classes import CLASSES

from . import a2a, checkpoints, runs, suspensions

__all__ = ["MODULES", "modules_for"]

MODULES: dict[str, ModuleType] = {
    "runs": runs,
    "suspensions": suspensions,
    "checkpoints": checkpoints,
    "a2a": a2a,
}


def modules_for(declared: frozenset[str]) -> list[ModuleType]:
    """The machine modules of the declared classes, in catalogue order."""
    return [MODULES[name] for name in CLASSES if name in declared and name in MODULES]
