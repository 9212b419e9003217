"""Small shared pieces: harness coercion, seeds, rule coverage."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

from cortex_spec.clock import ManualClock
from cortex_spec.harness import FactoryHarness, Harness, effective_classes
from cortex_spec.profiles import PROFILES, Profile, profile_from_env

from .stats import MachineStats

__all__ = [
    "REGENERATIONS",
    "as_harness",
    "check_rules_ran",
    "declared_of",
    "default_profile",
    "limit_shrinking",
    "phases",
    "replay_note",
    "reset_seed",
    "run_machine",
    "session_seed",
    "share",
]


def share(examples: int, weight: float, floor: int = 4) -> int:
    """A class's share of a profile's example budget: ``examples`` scaled by
    the class's weight, never below ``floor``."""
    return max(floor, round(examples * weight))


def limit_shrinking(seconds: int) -> None:
    """Bound the time Hypothesis spends shrinking one failure.

    Hypothesis reads this bound from a module constant of its engine (5
    minutes by default, with no setting for it); a certification gate wants
    a readable counterexample within a minute more than a perfectly minimal
    one, so the profile sets it.  If a Hypothesis version drops the
    constant, its own default applies.
    """
    try:
        from hypothesis.internal.conjecture import engine
    except ImportError:  # pragma: no cover
        return
    if hasattr(engine, "MAX_SHRINKING_SECONDS"):
        engine.MAX_SHRINKING_SECONDS = seconds


def phases() -> tuple:
    """Hypothesis phases: all of them, unless ``CORTEX_SPEC_SHRINK=0`` asks to
    skip shrinking (the mutant zoo does, to learn *whether* a bug is caught
    quickly; a counterexample is then reported unshrunk)."""
    from hypothesis import Phase

    if os.environ.get("CORTEX_SPEC_SHRINK", "1") == "0":
        return (Phase.explicit, Phase.reuse, Phase.generate)
    return tuple(Phase)


def as_harness(obj: Harness | Callable[..., Any]) -> Harness:
    """A :class:`Harness`, or a plain ``factory(clock)`` wrapped as one."""
    if isinstance(obj, Harness):
        return obj
    if isinstance(obj, type) and issubclass(obj, Harness):
        return obj()
    if callable(obj):
        return FactoryHarness(obj, name=getattr(obj, "__qualname__", "factory"))
    raise TypeError(f"expected a Harness or a factory(clock), got {obj!r}")


def declared_of(harness: Harness) -> frozenset[str]:
    return effective_classes(harness.probe_capabilities(ManualClock()))


def default_profile() -> Profile:
    return PROFILES[profile_from_env()]


_SEED: int | None = None


def reset_seed() -> None:
    """Forget the chosen seed: the next :func:`session_seed` reads
    ``CORTEX_SPEC_SEED`` again (the pytest plugin sets it per run)."""
    global _SEED
    _SEED = None


def session_seed() -> int:
    """The seed of this process's machines: ``CORTEX_SPEC_SEED`` (the pytest
    plugin sets it from ``--hypothesis-seed``, or to a random seed it
    chose, so every xdist worker shares it) or a random one, chosen once and
    printed with every failure so it can be replayed."""
    global _SEED
    if _SEED is None:
        env = os.environ.get("CORTEX_SPEC_SEED")
        _SEED = int(env) if env else random.SystemRandom().randrange(2**32)
    return _SEED


def never_ran(stats: MachineStats, machine: type, skip: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Rules of ``machine`` (other than ``skip``) that never ran."""
    names = [
        name for name in dir(machine)
        if getattr(getattr(machine, name, None), "hypothesis_stateful_rule", None) is not None
        and name not in skip
    ]
    return sorted(n for n in names if stats.rules.get(n, 0) == 0)


#: How many times one run of a machine whose steps may end differently for
#: the same choices is started again after Hypothesis found its draws
#: inconsistent (see :func:`run_machine`).
REGENERATIONS = 3


def _inconsistent_generation() -> tuple[type[BaseException], ...]:
    """Hypothesis' error for a test whose draws differed between two runs of
    the same choices (none in a Hypothesis too old to tell it apart from a
    failure that did not replay)."""
    from hypothesis import errors

    found = getattr(errors, "FlakyStrategyDefinition", None)
    return (found,) if found is not None else ()


def run_machine(machine: type, settings: Any, stats: MachineStats,
                skip: set[str] | frozenset[str] = frozenset(), top_ups: int = 6,
                nondeterministic: bool = False) -> None:
    """Run a rule machine under the session seed; while some rule never ran
    (swarm testing switches rules off per example, and a rule may need others
    to run first), run further rounds of examples (a round costs only while a
    rule is still unseen: with three, a machine of many rules and a small
    share, the preparation durability machine on postgres, once ended with
    one catalog count never run), then fail if one still never ran.  A failure carries a note with the seed that replays it.

    ``nondeterministic``: a step of the machine may end differently for the
    same choices (a kill racing a call lands where the threads' timing puts
    it, and the machine follows what the store did), so the draws after it
    may differ too, and Hypothesis, meeting choices it has run before,
    stops the run with "Inconsistent data generation"
    (``FlakyStrategyDefinition``).  That is the machine's doing, not a
    finding about the store: the round starts again under another seed, at
    most :data:`REGENERATIONS` times in all, each counted in
    ``stats.regenerated`` (the report's figures show it).  A finding — a
    failed check, or one that did not replay (``FlakyFailure``) — is raised
    as always."""
    from hypothesis import seed
    from hypothesis.stateful import get_state_machine_test

    seed_value = session_seed()
    inconsistent = _inconsistent_generation() if nondeterministic else ()
    for round_ in range(top_ups + 1):
        if round_ and not never_ran(stats, machine, skip):
            break
        while True:
            # another seed for each start again (the same one would likely
            # meet the same inconsistency)
            test = seed(seed_value + round_ + 1_000 * stats.regenerated)(
                get_state_machine_test(_factory(machine), settings=settings))
            try:
                test()
            except inconsistent as exc:
                if stats.regenerated >= REGENERATIONS:
                    exc.add_note(f"the {stats.machine} machine's draws were inconsistent {stats.regenerated + 1} "
                                 "times: a step that ends differently for the same choices is not "
                                 "only a racing kill's")
                    raise
                stats.regenerated += 1
                continue
            except Exception as exc:  # a finding, or Hypothesis' report of a flaky one
                exc.add_note(replay_note(seed_value, round_, stats.regenerated))
                raise
            break
    check_rules_ran(stats, machine, skip)


def _factory(machine: type) -> Callable[[], Any]:
    """``machine`` as the factory Hypothesis runs (it calls it for each
    example), named for its example database by the machine's module and
    name.  Hypothesis keys the database by a digest of the factory's source:
    for a class, ``inspect`` parses the whole module the class names to find
    it (and, for the machines built at run time, fails after that and falls
    back to the name), about 10 ms on every run of a machine; for this
    function the source is a few lines."""
    def factory() -> Any:
        return machine()

    factory.__name__ = factory.__qualname__ = machine.__name__
    factory._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
        f"{machine.__module__}.{machine.__qualname__}".encode())
    return factory


def replay_note(seed_value: int, round_: int, regenerated: int) -> str:
    """The note a finding of :func:`run_machine` carries: the session seed
    that replays it and, when the failing round was not the first run of
    the machine, which run it was and the Hypothesis seed it ran under
    (``seed_value + round_ + 1000 * regenerated``), so that a replay whose
    earlier runs end otherwise can be recognised."""
    note = (f"Seed {seed_value} (--hypothesis-seed={seed_value} or CORTEX_SPEC_SEED "
            "replays it; the certification report prints the whole command)")
    if not round_ and not regenerated:
        return note
    ran_under = seed_value + round_ + 1_000 * regenerated
    where = []
    if round_:
        where.append(f"in the machine's round {round_ + 1} (another round follows while a rule is still to be run)")
    if regenerated:
        where.append(f"after {regenerated} start(s) again on inconsistent draws (a step that depends on a "
                     "racing kill's timing; a replay starts again only where the same draws differ again)")
    return (f"{note}.  The failing examples ran {' and '.join(where)}, under Hypothesis seed {ran_under}: "
            "the seed above reaches it again when every earlier round ends the same way")


def check_rules_ran(stats: MachineStats, machine: type, skip: set[str] | frozenset[str] = frozenset()) -> None:
    """Fail a run in which some rule of the machine (other than ``skip``,
    rules whose precondition can never hold for this store) never ran."""
    never = never_ran(stats, machine, skip)
    if never:
        raise AssertionError(
            f"the {stats.machine} machine never ran rule(s) {', '.join(never)} in "
            f"{stats.examples} examples: raise the profile's example count"
        )
