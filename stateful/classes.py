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

Optional: ``STANDALONE = True`` (the class shares no rows with any other, so
the differential and crash machines run it in a machine of its own, which
keeps Hypothesis' rule choice spread over fewer rules); ``OPAQUE_FIELDS``,
``observe``, ``SPLITS``, ``world``/``setup`` and ``FAMILIES`` (see
``a2a.py``, the module that uses them).

Adding a class is adding its module to :data:`MODULES`.
"""

from __future__ import annotations

from types import ModuleType

from cortex_spec.classes import CLASSES

from . import a2a, checkpoints, runs, suspensions

__all__ = ["MODULES", "modules_for", "machine_groups"]

MODULES: dict[str, ModuleType] = {
    "runs": runs,
    "suspensions": suspensions,
    "checkpoints": checkpoints,
    "a2a": a2a,
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
