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


# -- class gateway --------------------------------------------------------------------------

GW_CRASH = tuple(f"GW-CRASH-{i}" for i in range(1, 11))


@pytest.mark.clause(*GW_CRASH, "GW-OPEN-6")
@pytest.mark.cortex_requires("gateway-crash")
def test_gateway_crash(request, cortex_harness, cortex_profile):
    """The gateway driver model (accept, ack the provider, run the job,
    set_replied, send, mark_done) with its holder crashed between and during
    calls through the harness's crash hook: nothing acknowledged is lost, a
    finished job never runs again, only delivery is retried."""
    from cortex_spec.stateful.crash import run_gateway_crash

    _run(request, "gateway-crash",
         lambda stats: run_gateway_crash(cortex_harness, cortex_profile, stats))


@pytest.mark.clause(*GW_CRASH, "GW-OPEN-6")
@pytest.mark.cortex_requires("cross-process")
def test_gateway_crash_killed_process(request, cortex_harness, cortex_profile):
    """The same driver model with the store held by a real child process that
    is killed with SIGKILL, between calls and while a write is in flight."""
    from cortex_spec.stateful.crash import run_gateway_crash

    _run(request, "gateway-crash-child",
         lambda stats: run_gateway_crash(cortex_harness, cortex_profile, stats, child=True))


GW_RACES = tuple(f"GW-RACE-{i}" for i in range(1, 9))


@pytest.mark.clause(*GW_RACES, "GW-SCOPE-6", "GW-ACC-5", "GW-ST-8", "GW-SEL-6", "MACH-LIN-1",
                    "MACH-LIN-2")
def test_gateway_races(request, cortex_harness, cortex_profile):
    """The GW-RACE families: accept storms, accept against prune, set_replied
    against mark_done, competing replies, mark_done against prune, selection
    setters, offsets, and queue reads against transitions; every history is
    linearizable against the reference."""
    import attrs

    from cortex_spec.stateful.gateway import RACE_IDS, race_clauses

    # every race gets its share of the profile's scenarios
    share = attrs.evolve(cortex_profile,
                         concurrent_examples=max(6, cortex_profile.concurrent_examples // len(RACE_IDS)))

    def body(stats):
        for race in RACE_IDS:
            run_concurrent(cortex_harness, share, {"gateway"}, f"gateway:{race}", stats,
                           clauses=race_clauses)

    _run(request, "gateway-races", body)


def _double_open_rounds(harness, profile, contenders):
    from cortex_spec.clock import ManualClock
    from cortex_spec.errors import StoreLocked

    from cortex_spec.stateful.gateway import double_open_round

    location_store = harness.new_location()
    opener = harness.open(location_store, ManualClock())
    location = harness.new_gateway_location()
    try:
        for round_ in range(profile.race_rounds):
            results = double_open_round(opener, location, contenders)
            winners = [r for r in results if not isinstance(r, BaseException)]
            losers = [r for r in results if isinstance(r, BaseException)]
            assert len(winners) == 1, f"round {round_}: {len(winners)} opens of one location succeeded"
            assert all(isinstance(e, StoreLocked) for e in losers), losers
            winners[0].close()
    finally:
        opener.close()
        harness.discard_gateway_location(location)
        harness.discard(location_store)


@pytest.mark.clause("GW-RACE-9", "GW-OPEN-2", "GW-OPEN-3")
@pytest.mark.cortex_classes("gateway")
def test_gateway_double_open(cortex_harness, cortex_profile):
    """Two threads, then `race_threads` threads, open one location at once:
    exactly one gets the store, the others StoreLocked; repeated."""
    _double_open_rounds(cortex_harness, cortex_profile, 2)
    _double_open_rounds(cortex_harness, cortex_profile, cortex_profile.race_threads)


@pytest.mark.clause("GW-RACE-9", "GW-OPEN-2")
@pytest.mark.cortex_requires("cross-process")
def test_gateway_double_open_across_processes(cortex_harness):
    """Two child processes and this one open one location at once: exactly
    one of the three holds it."""
    from cortex_spec.clock import ManualClock
    from cortex_spec.errors import StoreLocked
    from cortex_spec.gateway_child import GatewayChild

    location_store = cortex_harness.new_location()
    opener = cortex_harness.open(location_store, ManualClock())
    location = cortex_harness.new_gateway_location()
    try:
        for round_ in range(3):
            children = [GatewayChild(*cortex_harness.gateway_child(location)) for _ in range(2)]
            try:
                for child in children:  # both requests in flight before either answers
                    child.send({"op": "open", "target": child.target, "args": child.args,
                                "path": list(__import__("sys").path)})
                try:
                    mine = opener.open_gateway(location)
                except StoreLocked:
                    mine = None
                answers = [child.receive() for child in children]
                won = [a for a in answers if "error" not in a]
                assert all(a.get("error") == "StoreLocked" for a in answers if "error" in a), answers
                assert len(won) + (mine is not None) == 1, (
                    f"round {round_}: {len(won)} children and {int(mine is not None)} parent hold "
                    "the location")
                if mine is not None:
                    mine.close()
            finally:
                for child in children:
                    child.kill()
    finally:
        opener.close()
        cortex_harness.discard_gateway_location(location)
        cortex_harness.discard(location_store)
