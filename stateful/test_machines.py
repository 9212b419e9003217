"""The machines as certification tests (``pytest --pyargs cortex_spec.stateful``).

Each test runs one machine against the backend under certification with the
profile's budget and records the machine's figures in the report.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from cortex_spec.pytest_plugin import record_machine
from cortex_spec.stateful.concurrent import run_concurrent
from cortex_spec.stateful.crash import run_crash
from cortex_spec.stateful.differential import run_differential
from cortex_spec.stateful.runner import declared_of
from cortex_spec.stateful.stats import MachineStats


def _run(request: Any, name: str, body: Callable[[MachineStats], Any]) -> None:
    stats = MachineStats(name)
    try:
        body(stats)
    finally:
        record_machine(request, stats.figures())


@pytest.mark.clause("MACH-DIFF-1", "MACH-DIFF-2")
def test_differential(request, cortex_harness, cortex_profile):
    """Every call of the declared classes agrees with the reference, and so do
    the whole-state views after every step."""
    declared = declared_of(cortex_harness)
    _run(request, "differential",
         lambda stats: run_differential(cortex_harness, cortex_profile, declared, stats))


@pytest.mark.clause("MACH-LIN-1", "MACH-LIN-2")
def test_concurrent(request, cortex_harness, cortex_profile):
    """Racing claims, sweeps, deletes, resolves, updates, creates and reads:
    every history is linearizable against the reference and no call hangs."""
    declared = declared_of(cortex_harness)
    _run(request, "concurrent",
         lambda stats: run_concurrent(cortex_harness, cortex_profile, declared, "mixed", stats))


@pytest.mark.clause("FOUR-7", "MACH-LIN-1")
def test_four_writers_linearizable(request, cortex_harness, cortex_profile):
    """The four writer scripts of a paused run, raced: every store call they
    make is linearizable against the reference (FOUR-7)."""
    declared = declared_of(cortex_harness)
    _run(request, "four-writers",
         lambda stats: run_concurrent(cortex_harness, cortex_profile, declared, "four-writers",
                                      stats, clauses=("FOUR-7", "MACH-LIN-1")))


@pytest.mark.clause(
    "A2A-RACE-1", "A2A-RACE-2", "A2A-RACE-3", "A2A-RACE-4", "A2A-RACE-5", "A2A-RACE-6", "A2A-RACE-7",
    "A2A-RACE-8", "A2A-RACE-9", "A2A-RACE-10", "A2A-RACE-11", "A2A-RACE-12", "A2A-RACE-13", "A2A-RACE-14",
    "A2A-RCL-8", "MACH-LIN-1", "MACH-LIN-2",
)
@pytest.mark.cortex_classes("a2a")
def test_a2a_races(request, cortex_harness, cortex_profile):
    """The A2A-RACE scenarios (claims against reclaims and late workers, ask
    claims against sweeps, senders against a hop ceiling, read marks against
    inbox reads, contenders split over partitions): every history is
    linearizable against the reference, reclaims split into per-row steps
    (A2A-RCL-8) and backend claim tokens adopted by the model.  A violation
    fails the race's own clause and MACH-LIN-1."""
    declared = declared_of(cortex_harness)
    _run(request, "a2a-races",
         lambda stats: run_concurrent(cortex_harness, cortex_profile, declared, "a2a", stats))


@pytest.mark.clause("MACH-CRASH-1", "MACH-CRASH-2")
@pytest.mark.cortex_classes("suspensions")
def test_crash(request, cortex_harness, cortex_profile):
    """Workers that claim and die, clock jumps and sweeps, in between ordinary
    traffic compared with the reference."""
    declared = declared_of(cortex_harness)
    _run(request, "crash", lambda stats: run_crash(cortex_harness, cortex_profile, declared,
                                                   stats=stats))


@pytest.mark.clause("MACH-DUR-1")
@pytest.mark.cortex_requires("reopen")
def test_durability(request, cortex_harness, cortex_profile):
    """Restarts (close and reopen on the same storage) lose nothing acknowledged."""
    declared = declared_of(cortex_harness)
    _run(request, "durability", lambda stats: run_crash(cortex_harness, cortex_profile, declared,
                                                        faults={"restart"}, stats=stats))


@pytest.mark.clause("MACH-DUR-2")
@pytest.mark.cortex_requires("kill-connection")
def test_connection_faults(request, cortex_harness, cortex_profile):
    """Writes whose server connection is killed happen entirely or not at all."""
    declared = declared_of(cortex_harness)
    _run(request, "connection-faults", lambda stats: run_crash(
        cortex_harness, cortex_profile, declared, faults={"kill"}, stats=stats))
