"""``run_machine`` and a machine whose steps depend on timing.

The connection-fault machine kills a store's connections from another
thread while a call runs; what the call did depends on where the kill
lands, and the machine follows the store, so the draws after it can differ
between two runs of the same choices.  Hypothesis then stops the run with
"Inconsistent data generation" (``FlakyStrategyDefinition``), which says
nothing about the store (a CI run of d5fe1b9 charged one to MACH-DUR-2 on
PostgreSQL).  Such a machine's round starts again under another seed, a
bounded number of times, counted in its figures; every other error still
ends the run at once.  The machine test is replaced by a stand-in that
raises on cue, so each case is exact.
"""

from __future__ import annotations

from typing import Any

import hypothesis.stateful
import pytest
from hypothesis.errors import FlakyStrategyDefinition

from cortex_spec.stateful.runner import REGENERATIONS, replay_note, run_machine
from cortex_spec.stateful.stats import MachineStats


class _NoRules:
    """A machine class without rules (``run_machine`` checks that every rule ran)."""


def _stand_in(monkeypatch: pytest.MonkeyPatch, failures: list[BaseException]) -> list[int]:
    """Replace the machine test: its n-th run raises ``failures[n]`` (if
    any); returns the seeds the runs were given."""
    seeds: list[int] = []

    def get_state_machine_test(machine: type, settings: Any = None) -> Any:
        def test() -> None:
            seeds.append(test._hypothesis_internal_use_seed)  # type: ignore[attr-defined]
            if len(seeds) <= len(failures):
                raise failures[len(seeds) - 1]

        return test

    monkeypatch.setattr(hypothesis.stateful, "get_state_machine_test", get_state_machine_test)
    return seeds


def test_inconsistent_draws_of_a_timing_dependent_machine_start_the_round_again(monkeypatch):
    seeds = _stand_in(monkeypatch, [FlakyStrategyDefinition("Inconsistent data generation!")])
    stats = MachineStats("connection-faults")
    run_machine(_NoRules, None, stats, nondeterministic=True)
    assert stats.regenerated == 1, f"expected one start again, counted {stats.regenerated}"
    assert len(seeds) == 2 and seeds[0] != seeds[1], f"expected two runs under two seeds, got {seeds}"
    assert stats.figures()["regenerated"] == 1, f"the figures do not show it: {stats.figures()}"


def test_starting_again_is_bounded(monkeypatch):
    failures = [FlakyStrategyDefinition(f"Inconsistent data generation! ({i})") for i in range(REGENERATIONS + 1)]
    seeds = _stand_in(monkeypatch, failures)
    stats = MachineStats("connection-faults")
    with pytest.raises(FlakyStrategyDefinition) as raised:
        run_machine(_NoRules, None, stats, nondeterministic=True)
    assert len(seeds) == REGENERATIONS + 1, f"expected {REGENERATIONS + 1} runs, got {len(seeds)}"
    notes = " ".join(getattr(raised.value, "__notes__", []))
    assert "inconsistent" in notes, f"the error does not say why it was not started again: {notes!r}"


def test_a_deterministic_machine_gets_no_second_run(monkeypatch):
    seeds = _stand_in(monkeypatch, [FlakyStrategyDefinition("Inconsistent data generation!")])
    stats = MachineStats("differential")
    with pytest.raises(FlakyStrategyDefinition):
        run_machine(_NoRules, None, stats)
    assert (len(seeds), stats.regenerated) == (1, 0), f"runs {len(seeds)}, counted {stats.regenerated}"
    assert "regenerated" not in stats.figures(), f"a figure of zero shown: {stats.figures()}"


def test_a_finding_is_never_run_again(monkeypatch):
    seeds = _stand_in(monkeypatch, [AssertionError("MACH-DUR-2: the store lost a write")])
    stats = MachineStats("connection-faults")
    with pytest.raises(AssertionError, match="lost a write") as raised:
        run_machine(_NoRules, None, stats, nondeterministic=True)
    assert (len(seeds), stats.regenerated) == (1, 0), f"runs {len(seeds)}, counted {stats.regenerated}"
    notes = " ".join(getattr(raised.value, "__notes__", []))
    assert "--hypothesis-seed=" in notes, f"the finding lost its replay note: {notes!r}"


def test_a_finding_after_a_start_again_names_the_run_it_was_found_in(monkeypatch):
    """A finding in a round that started again ran under another seed than the
    session's: its note says so and names that seed, not the session seed alone."""
    seeds = _stand_in(monkeypatch, [FlakyStrategyDefinition("Inconsistent data generation!"),
                                    AssertionError("MACH-DUR-2: the store lost a write")])
    stats = MachineStats("connection-faults")
    with pytest.raises(AssertionError, match="lost a write") as raised:
        run_machine(_NoRules, None, stats, nondeterministic=True)
    notes = " ".join(getattr(raised.value, "__notes__", []))
    assert len(seeds) == 2, f"expected two runs, got {seeds}"
    assert f"--hypothesis-seed={seeds[0]}" in notes, f"the session seed is not named: {notes!r}"
    assert f"Hypothesis seed {seeds[1]}" in notes and "after 1 start(s) again" in notes, (
        f"the note does not name the run the finding ran in (seed {seeds[1]}): {notes!r}")


def test_the_replay_note_names_a_later_round_and_its_seed():
    first = replay_note(41, 0, 0)
    assert "--hypothesis-seed=41" in first and "Hypothesis seed" not in first, (
        f"a finding in the first run needs only the session seed: {first!r}")
    later = replay_note(41, 2, 0)
    assert "round 3" in later and "Hypothesis seed 43" in later and "start(s) again" not in later, (
        f"a finding in round 3 under seed 43 is not described: {later!r}")
    both = replay_note(41, 1, 2)
    assert "round 2" in both and "after 2 start(s) again" in both and "Hypothesis seed 2042" in both, (
        f"round 2 after two starts again (seed 41 + 1 + 2000) is not described: {both!r}")


def test_the_differential_reference_image_sees_a_row_replaced_by_an_equal_value():
    """MACH-DIFF-2 reads the reference's side of a view again only when the
    reference's image changed.  A working value saved as 1.0 over 1 is a new
    row equal to the old one (1 == 1.0): the image must still change, or the
    view read before the save is compared with the backend's new value (a
    PostgreSQL certification failed on this at seed 1317647516, the
    reference store as well)."""
    from cortex_spec.harness import FactoryHarness
    from cortex_spec.reference import MemoryStore
    from cortex_spec.stateful.differential import build_differential
    from cortex_spec.stateful.ops import Op
    from cortex_spec.testing import ctx

    machine = build_differential(FactoryHarness(lambda clock: MemoryStore(clock)), ["memory"])()
    try:
        c, run = ctx("ws=w1"), "arun_00000000000000000000000001"
        images = []
        for value in (1, 1.0, True, 1):
            machine.both(Op("save_working", c, (run, "k", value)))
            images.append(machine._reference_image())
            machine.whole_state_views_agree()
        for before, after in zip(images, images[1:]):
            assert before != after, "a replaced row that compares equal left the reference image unchanged"
    finally:
        machine.teardown()
