"""The machines as certification tests (``pytest --pyargs cortex_spec.stateful``).

Every machine runs per conformance class (see :mod:`.plugin`): for each
class that has machines there is a differential, a concurrent, a durability
and a connection-fault test, a crash test where the class or one it requires
has a claim or a sweep, one test per scenario family of the class and the
class's own tests.  Each runs with the class's share of the profile's budget
and records its figures in the report.  A class the store does not declare
is reported *not claimed*, like every other test of it.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from cortex_spec.pytest_plugin import record_machine
from cortex_spec.stateful.classes import plugins
from cortex_spec.stateful.concurrent import run_concurrent
from cortex_spec.stateful.crash import has_faults, run_crash
from cortex_spec.stateful.differential import run_differential
from cortex_spec.stateful.stats import MachineStats


def _run(request: Any, name: str, body: Callable[[MachineStats], Any]) -> None:
    stats = MachineStats(name)
    try:
        body(stats)
    finally:
        record_machine(request, stats.figures())


def _params(clauses: tuple[str, ...], cost: float, requires: tuple[str, ...] = (),
            only: Callable[[str], bool] = lambda name: True,
            own: Callable[[Any], tuple[str, ...]] = lambda machines: ()) -> list:
    """One parameter per class with machines (that ``only`` accepts): its
    clause (``clauses`` and the class's ``own(machines)``), class, feature
    and cost marks (the cost scales with the class's weight and
    differential cost)."""
    out = []
    for name, machines in plugins().items():
        if not only(name):
            continue
        marks = [pytest.mark.clause(*clauses, *own(machines)), pytest.mark.cortex_classes(name),
                 pytest.mark.cortex_cost(round(cost * machines.cost * machines.weight, 1))]
        if requires:
            marks.append(pytest.mark.cortex_requires(*requires))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.mark.parametrize("cls", _params(("MACH-DIFF-1", "MACH-DIFF-2"), 1.0))
def test_differential(request, cls, cortex_harness, cortex_profile, cortex_declared):
    """Every call of the class (and of the classes it requires) agrees with
    the reference, and so do the whole-state views every few steps."""
    _run(request, "differential", lambda stats: run_differential(
        cortex_harness, cortex_profile, cortex_declared, stats, focus={cls}))


@pytest.mark.parametrize("cls", _params(("MACH-LIN-1", "MACH-LIN-2"), 0.7,
                                        own=lambda machines: machines.race_clauses))
def test_concurrent(request, cls, cortex_harness, cortex_profile, cortex_declared):
    """Racing claims, sweeps, deletes, updates, creates and reads of the class:
    every storm kind first, then random scenarios; every history is
    linearizable against the reference and no call hangs."""
    _run(request, "concurrent", lambda stats: run_concurrent(
        cortex_harness, cortex_profile, cortex_declared, "mixed", stats, focus={cls}))


@pytest.mark.parametrize("cls", _params(("MACH-CRASH-1", "MACH-CRASH-2"), 0.6, only=has_faults))
def test_crash(request, cls, cortex_harness, cortex_profile, cortex_declared):
    """Workers that claim and die, clock jumps and sweeps, in between ordinary
    traffic compared with the reference (for the classes with a claim or a
    sweep, theirs or of a class they require)."""
    _run(request, "crash", lambda stats: run_crash(
        cortex_harness, cortex_profile, cortex_declared, stats=stats, focus={cls}))


@pytest.mark.parametrize("cls", _params(("MACH-DUR-1",), 0.6, ("reopen",)))
def test_durability(request, cls, cortex_harness, cortex_profile, cortex_declared):
    """Restarts (close and reopen on the same storage) lose nothing acknowledged."""
    _run(request, "durability", lambda stats: run_crash(
        cortex_harness, cortex_profile, cortex_declared, faults={"restart"}, stats=stats, focus={cls}))


@pytest.mark.parametrize("cls", _params(("MACH-DUR-2",), 0.6, ("kill-connection",)))
def test_connection_faults(request, cls, cortex_harness, cortex_profile, cortex_declared):
    """Writes whose server connection is killed happen entirely or not at all."""
    _run(request, "connection-faults", lambda stats: run_crash(
        cortex_harness, cortex_profile, cortex_declared, faults={"kill"}, stats=stats, focus={cls}))


def _family_params() -> list:
    out = []
    for name, machines in plugins().items():
        for family in machines.families:
            marks = [pytest.mark.clause(*family.clauses, "MACH-LIN-1"), pytest.mark.cortex_classes(name),
                     pytest.mark.cortex_cost(family.cost)]
            out.append(pytest.param(name, family.name, marks=marks, id=f"{name}:{family.name}"))
    return out


@pytest.mark.parametrize("cls, family", _family_params())
def test_family(request, cls, family, cortex_harness, cortex_profile, cortex_declared):
    """A scenario family of the class (the A2A-RACE list, the four writers of
    a paused run, each GW-RACE): every history is linearizable against the
    reference; a violation fails the race's own clause and MACH-LIN-1."""
    machine = next(f.machine or f.name for f in plugins()[cls].families if f.name == family)
    _run(request, machine, lambda stats: run_concurrent(
        cortex_harness, cortex_profile, cortex_declared, family, stats,
        clauses=("MACH-LIN-1",), focus={cls}))


def _test_params() -> list:
    out = []
    for name, machines in plugins().items():
        for spec in machines.tests:
            marks = [pytest.mark.clause(*spec.clauses), pytest.mark.cortex_classes(name),
                     pytest.mark.cortex_cost(spec.cost)]
            if spec.requires:
                marks.append(pytest.mark.cortex_requires(*spec.requires))
            out.append(pytest.param(name, spec, marks=marks, id=f"{name}:{spec.name}"))
    return out


@pytest.mark.parametrize("cls, spec", _test_params())
def test_class_machine(request, cls, spec, cortex_harness, cortex_profile, cortex_declared):
    """A certification test of the class's own (the gateway's driver model
    under crashes, double opens of one location)."""
    _run(request, spec.machine or spec.name,
         lambda stats: spec.run(cortex_harness, cortex_profile, cortex_declared, stats))
