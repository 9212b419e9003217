"""Swarm rule selection at one choice a step (``cortex_spec.stateful.swarm``).

The machines keep Hypothesis' swarm testing — each example switches a random
subset of the rules off — while a step writes one choice for its rule
instead of one for every switch it consults.  These tests check what the
machines rely on: it is in use, every rule still runs, examples dwell on a
subset, preconditions hold, a step costs a bounded number of choices, and a
failure still shrinks to its minimal program and prints it.
"""

from __future__ import annotations

import collections

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from cortex_spec.harness import FactoryHarness
from cortex_spec.reference import MemoryStore
from cortex_spec.stateful.differential import build_differential
from cortex_spec.stateful.swarm import install, installed

RULES = 12
STEPS = 30


def _machine(record: list, fail_on: tuple[str, str] | None = None) -> type:
    """A machine of RULES rules (``r0`` … ``r11``); ``gated`` runs only after
    ``r0`` has; ``record`` gets each example's rule sequence."""

    class Machine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            install(self)
            self.ran: list[str] = []
            record.append(self.ran)

        @precondition(lambda self: "r0" in self.ran)
        @rule(n=st.integers(0, 3))
        def gated(self, n: int) -> None:
            self.ran.append("gated")

    for i in range(RULES):
        def step(self: "Machine", i: int = i) -> None:
            name = f"r{i}"
            if fail_on is not None and name == fail_on[1] and fail_on[0] in self.ran:
                raise AssertionError(f"{fail_on[1]} after {fail_on[0]}")
            self.ran.append(name)
        step.__name__ = f"r{i}"
        setattr(Machine, f"r{i}", rule()(step))
    return Machine


def _run(machine: type, examples: int = 200) -> None:
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=STEPS, database=None, derandomize=True,
        deadline=None, suppress_health_check=list(HealthCheck)))


def test_the_machines_select_their_rules_by_swarm():
    machine = build_differential(FactoryHarness(lambda clock: MemoryStore(clock)), ["runs"])()
    try:
        assert installed(machine)
    finally:
        machine.teardown()


def test_every_rule_runs_and_examples_dwell_on_a_subset():
    record: list[list[str]] = []
    _run(_machine(record))
    counts = collections.Counter(name for ran in record for name in ran)
    assert set(counts) == {f"r{i}" for i in range(RULES)} | {"gated"}, counts
    full = [ran for ran in record if len(ran) == STEPS]
    assert full, "no example ran its every step"
    # swarm testing: some examples ran at most a quarter of the rules over all their steps
    assert any(len(set(ran)) <= (RULES + 1) // 4 for ran in full), [sorted(set(r)) for r in full]
    # and some ran most of them
    assert any(len(set(ran)) >= RULES * 2 // 3 for ran in full)


def test_a_rule_runs_only_while_its_precondition_holds():
    record: list[list[str]] = []
    _run(_machine(record))
    for ran in record:
        if "gated" in ran:
            assert "r0" in ran[:ran.index("gated")], ran


def test_a_step_costs_a_bounded_number_of_choices():
    sizes: list[int] = []

    class Counting(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            install(self)
            self.steps = 0

        def teardown(self) -> None:
            from hypothesis.control import current_build_context

            data = current_build_context().data
            if self.steps == STEPS:
                sizes.append(len(data.choices))

    for i in range(40):
        def step(self: Counting) -> None:
            self.steps += 1
        step.__name__ = f"r{i}"
        setattr(Counting, f"r{i}", rule()(step))
    _run(Counting, examples=100)
    assert sizes
    # the switches once (a probability and 40 booleans), then per step at
    # most the stop decision and the rule's index: Hypothesis' own
    # selection consults up to every switch on a step
    assert max(sizes) <= 1 + 40 + 2 * STEPS + 2, max(sizes)


def test_a_failure_shrinks_to_its_minimal_program_and_prints_it():
    record: list[list[str]] = []
    with pytest.raises(AssertionError, match="r7 after r3") as caught:
        run_state_machine_as_test(_machine(record, fail_on=("r3", "r7")), settings=settings(
            max_examples=500, stateful_step_count=STEPS, database=None, deadline=None,
            suppress_health_check=list(HealthCheck)))
    printed = "\n".join(getattr(caught.value, "__notes__", []))
    steps = [line.strip() for line in printed.splitlines() if line.strip().startswith("state.")]
    assert steps == ["state.r3()", "state.r7()", "state.teardown()"], printed
