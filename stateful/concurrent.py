"""The concurrent machine: racing branches, recorded histories, and the
linearizability check against the reference (MACH-LIN-1/2).

A :class:`Scenario` is drawn up front as data: a :class:`~.plugin.World` of a
few rows (each class of the scenario draws its own, see
:class:`~.plugin.ClassMachines`), a sequential prefix that creates them, and
2–4 branches of racing calls.  Each branch runs in its own thread and all
are released by one barrier; every call is recorded with monotonic invoke
and response times.  The clock is fixed while the branches race.

The machine runs per class (``focus``), on the rows and calls of that class
and of the classes it requires.  Its *mixed* family draws either a storm
(every branch contends for one row: the claim races) or a mix of any calls
on one or two rows; before its random search it races every storm kind of
the class on a world where the claim can still win (:func:`storm_census`),
so no claim race is left to chance.  A class may add families of its own
(:attr:`~.plugin.ClassMachines.families`).

Each scenario is executed ``profile.concurrent_rounds`` times on fresh storage
(thread schedules differ from run to run) and every history is checked.  On
a violation Hypothesis shrinks the scenario; the failure shows the minimal
scenario as runnable Python, the history as a per-branch timeline, which
results no order explains, how many runs failed, and the seed to replay.

Run it against your own store::

    from cortex_spec.stateful import check_concurrent
    check_concurrent(my_factory)
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from datetime import timedelta
from typing import Any

import attrs
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from cortex_spec.clock import EPOCH, ManualClock, to_millis
from cortex_spec.harness import Harness
from cortex_spec.profiles import Profile, hypothesis_settings, reproduction_notes

from .classes import (
    classes_with_targets,
    close_session,
    machine_classes,
    open_session,
    plugin,
    plugins_for,
)
from .history import Call, Recorder, render_timeline, timeline_data
from .linearizability import Verdict, check
from .model import ReferenceModel
from .ops import Bindings, Op, Outcome
from .plugin import Race, World, storm_clauses
from .stats import MachineStats
from .world import Script, Tick, sampled

__all__ = [
    "CALL_TIMEOUT",
    "T0",
    "Scenario",
    "ScenarioFailure",
    "Script",
    "Tick",
    "World",
    "execute",
    "run_concurrent",
    "scenarios",
]

#: Seconds a racing call may take before it counts as hung (MACH-LIN-2).
CALL_TIMEOUT = 30.0
#: The instant the branches race at.
T0 = EPOCH + timedelta(days=1)

LaneStep = Op | Script


@attrs.frozen
class Scenario:
    family: str
    world: World
    prefix: tuple[Op | Tick, ...]
    branches: tuple[tuple[LaneStep, ...], ...]
    #: clauses this scenario exercises besides the run's (a family's races)
    clauses: tuple[str, ...] = ()

    def targets(self) -> frozenset[str]:
        """Targets (opened objects such as the gateway) the scenario's calls use."""
        steps = list(self.prefix) + [s for branch in self.branches for s in branch]
        return frozenset(s.target for s in steps if isinstance(s, Op) and s.target)

    def render(self) -> str:
        """The scenario as a runnable Python function of a store and a clock."""
        scripts = [step for branch in self.branches for step in branch if isinstance(step, Script)]
        targets = sorted(self.targets())
        lines = [
            "from datetime import datetime, timedelta, timezone",
            "from cortex_spec import *",
            "from cortex_spec.testing import ctx, race",
        ]
        if scripts:
            lines.append("from cortex_spec.stateful.ops import outcome_of")
            lines += sorted({s.imports for s in scripts if s.imports})
        lines += [
            "",
            "def T(ms):",
            "    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)",
            "",
            "def scenario(store, clock" + "".join(f", {t}" for t in targets) + "):",
            *(f"    # {t}: store.open_{t}(<a fresh location>)" for t in targets),
            f"    clock.set(T({to_millis(self.world.t0)}))",
        ]
        if any(isinstance(op, Op) and op.binds for op in self.prefix):
            lines.append("    held = {}  # opaque values the setup got (claim tokens), by row id")
        for op in self.prefix:
            if isinstance(op, Op) and op.binds:
                lines.append(f"    held[{op.args[0]!r}] = {op.render()}.{op.binds}")
            else:
                lines.append(f"    {op.render()}")
        if any(isinstance(op, Tick) for op in self.prefix):
            lines.append(f"    clock.set(T({to_millis(self.world.t0)}))")
        if scripts:
            lines.append("    call = lambda op: outcome_of(lambda: op(store))")
        lines.append("    return race([")
        for branch in self.branches:
            lines.append(f"        lambda: ({', '.join(step.render() for step in branch)},),")
        lines.append("    ])")
        return "\n".join(lines)


# -- generation -------------------------------------------------------------------------


def _world(draw: Any, classes: Iterable[str], size: int, live: bool) -> World:
    """The rows of every class of ``classes`` that draws a world, each class
    after the classes it requires (catalogue order)."""
    world = World(T0)
    for machines in plugins_for(classes):
        if machines.world is not None:
            world = world.with_rows(machines.name, machines.world(draw, world, size, live))
    return world


def _setup(world: World) -> tuple[Op | Tick, ...]:
    """The calls that create the world's rows, class by class."""
    prefix: list[Op | Tick] = []
    for machines in plugins_for(world.rows):
        if machines.setup is not None:
            prefix += machines.setup(world)
    return tuple(prefix)


@st.composite
def _mixed(draw: Any, classes: frozenset[str], focus: str, census: int | None = None) -> Scenario:
    """Either a *storm* (2–4 branches making one kind of call of the focus
    class on one row: the claim races of SUSP-CLAIM-10, CP-RESOLVE-4,
    RUN-UPD-6, …) or a *mix* (each branch 1–3 calls of any of the classes
    on one or two rows).

    ``census=k`` always gives the focus class's ``k``-th storm, on a world
    where a claim can still win (see :func:`storm_census`)."""
    storm = census is not None or draw(sampled((True, True, False)))  # storms find lost races fastest
    n_rows = 1 if storm else draw(st.integers(1, 2))
    world = _world(draw, classes, n_rows, live=census is not None)
    lanes = draw(st.integers(2, 4))
    if storm:
        storms = plugin(focus).storm_ops(world) if plugin(focus).storm_ops else []
        if not storms:  # a class with nothing to storm: mix instead
            storm = False
        else:
            build = storms[census if census is not None else draw(st.integers(0, len(storms) - 1))]
            branches = tuple((build(draw),) for _ in range(lanes))
    if not storm:
        racers = [b for m in plugins_for(classes) if m.racing_ops for b in m.racing_ops(world)]
        pick = st.integers(0, len(racers) - 1)
        branches = tuple(
            tuple(racers[draw(pick)](draw) for _ in range(draw(st.integers(1, 3))))
            for _ in range(lanes)
        )
    clauses = storm_clauses(build) if storm else ()
    return Scenario("storm" if storm else "mixed", world, _setup(world), branches, clauses)


@st.composite
def _family(draw: Any, classes: frozenset[str], focus: str, name: str,
            declared: frozenset[str]) -> Scenario:
    """One scenario of a family of the focus class: its own races on the
    class's world (or on a world the family draws itself); a violation fails
    the clauses the scenario names too."""
    family = next(f for f in plugin(focus).families if f.name == name)
    world = _world(draw, classes, 1, live=False)
    race: Race = family.draw(draw, world, declared)
    world = race.world or world
    return Scenario(name, world, _setup(world), race.branches, tuple(race.clauses))


def storm_census(focus: str, classes: Iterable[str]) -> list[int]:
    """The storm kinds of class ``focus`` (``storm_ops`` gives as many
    builders whatever the world, so one drawn world counts them): the mixed
    family races each of them before its random search, so no storm is left
    to chance.  With a dozen storm kinds, sixty random scenarios miss a given
    one often enough to let a lost claim race through now and then."""
    machines = plugin(focus)
    if machines.storm_ops is None:
        return []
    counted: list[int] = []

    @settings(max_examples=1, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def count(data: st.DataObject) -> None:
        counted.append(len(machines.storm_ops(_world(data.draw, classes, 1, live=True))))

    count()
    return list(range(counted[0]))


def scenarios(declared: Iterable[str], focus: str, family: str = "mixed") -> st.SearchStrategy[Scenario]:
    """Scenarios of class ``focus`` (with the classes it requires, all in
    ``declared``): the mixed family, or one of the class's own families."""
    declared = frozenset(declared)
    classes = machine_classes(focus, declared)
    if family == "mixed":
        return _mixed(classes, focus)
    return _family(classes, focus, family, declared)


# -- execution --------------------------------------------------------------------------


@attrs.frozen
class Execution:
    calls: list[Call]
    lanes: list[str]
    hung: list[str]


def execute(harness: Harness, scenario: Scenario, timeout: float = CALL_TIMEOUT) -> Execution:
    """Run the scenario once on fresh storage and record the history."""
    clock = ManualClock(scenario.world.t0)
    location = harness.new_location()
    store = harness.open(location, clock)
    targets = scenario.targets()
    if targets:
        try:
            store = open_session(harness, store, classes_with_targets(targets))
        except BaseException:
            store.close()
            raise
    recorder = Recorder()
    bindings = Bindings()  # claim tokens seen, for HeldToken placeholders

    def call(op: Op, index: int) -> Outcome:
        op = bindings.fill(attrs.evolve(op, at=clock.now()), index)
        outcome = recorder.call(store, op, index)
        bindings.observe(outcome, index)
        return outcome

    hung: list[str] = []
    try:
        for op in scenario.prefix:
            if isinstance(op, Tick):
                clock.set(op.at)
            else:
                call(op, 0)
        clock.set(scenario.world.t0)
        barrier = threading.Barrier(len(scenario.branches))

        def lane(index: int, steps: tuple[LaneStep, ...]) -> None:
            barrier.wait()
            for step in steps:
                if isinstance(step, Script):
                    step.run(lambda op: call(op, index))
                else:
                    call(step, index)

        threads = [
            threading.Thread(target=lane, args=(i + 1, b), daemon=True, name=f"cortex-branch-{i + 1}")
            for i, b in enumerate(scenario.branches)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
        hung = [t.name for t in threads if t.is_alive()]
    finally:
        if not hung:
            close_session(store)
            harness.discard(location)
    lanes = ["setup"] + [_lane_name(b) for b in scenario.branches]
    return Execution(recorder.snapshot(), lanes, hung)


def history_shape(calls: Sequence[Call], opaque: frozenset[str] = frozenset()) -> Hashable:
    """What the linearizability verdict on a history of one scenario depends
    on: every call's lane, method, instant and outcome (the scenario fixes
    the rest of each call: a lane's calls follow from its steps and the
    outcomes before them), and the order of the invocations and responses
    (which call ended before which began).  Two executions of a scenario
    with the same shape get the same verdict, so a round that repeats an
    earlier round's history is not checked again; on a fast store most
    rounds do (the threads run their calls in the same order).

    Values of the ``opaque`` fields (claim tokens, new in every execution)
    are named by their first appearance: the checker compares them only
    for equality (the model adopts the token the backend reported), and a
    call naming one got it from an earlier outcome of its own execution."""
    events = sorted([(c.start, 1, c.index) for c in calls]
                    + [(c.end, 0, c.index) for c in calls if c.end is not None])
    # events at one instant form one group (a tie is neither order)
    order = tuple(frozenset((kind, index) for _, kind, index in group)
                  for _, group in itertools.groupby(events, key=lambda e: e[0]))
    names: dict[str, str] = {}
    outcomes = [c.outcome if not opaque or not c.outcome.ok
                else (c.outcome.kind, _rename(c.outcome.value, opaque, names)) for c in calls]
    return tuple((c.lane, c.op.method, c.op.at, o, c.end is None) for c, o in zip(calls, outcomes)), order


def _rename(value: Any, opaque: frozenset[str], names: dict[str, str]) -> Any:
    """A normalised value with the strings of its ``opaque`` fields replaced
    by ``#1``, ``#2`` ... in order of first appearance (in ``names``)."""
    if type(value) is not tuple:
        return value
    if len(value) == 2 and type(value[1]) is str and value[0] in opaque:
        name = names.get(value[1])
        if name is None:
            name = names[value[1]] = f"#{len(names) + 1}"
        return value[0], name
    # (leaves are returned as they are without a call: most of a value)
    return tuple([_rename(v, opaque, names) if type(v) is tuple else v for v in value])


def _lane_name(branch: tuple[LaneStep, ...]) -> str:
    first = branch[0]
    return first.name if isinstance(first, Script) else "branch"


# -- checking and reporting --------------------------------------------------------------


class ScenarioFailure(AssertionError):
    """A scenario broke a clause; ``cortex_clauses`` names which."""

    def __init__(self, text: str, clauses: tuple[str, ...]) -> None:
        super().__init__(text)
        self.cortex_clauses = clauses
        #: the report's expected and observed: the results no order explains
        lines = text.splitlines()
        after = lines[lines.index("Results no order explains:") + 1:] if "Results no order explains:" in lines else []
        unexplained = [ln.strip() for ln in itertools.takewhile(lambda ln: ln.startswith("  #"), after)]
        self.expected = "; ".join(u.split("; the reference would give ", 1)[-1] for u in unexplained
                                  if "; the reference would give " in u)
        self.observed = "; ".join(u.split("; the reference would give ", 1)[0] for u in unexplained)
        if self.expected:
            self.expected = "the reference would give " + self.expected
        if not unexplained:
            self.observed = lines[0] if lines else ""


def _explain(scenario: Scenario, ex: Execution, verdict: Verdict | None,
             clauses: tuple[str, ...], store_name: str, seed_value: int) -> str:
    crashed = [c for c in ex.calls if c.outcome.kind == "crash"]
    if verdict is None and ex.hung:
        headline = (f"MACH-LIN-2: racing calls did not return within {CALL_TIMEOUT}s "
                    f"({', '.join(ex.hung)})")
    elif verdict is None:
        headline = "MACH-LIN-2: calls raised exceptions outside the contract: " + "; ".join(
            f"#{c.index} {c.op.short()}: {c.outcome.value}" for c in crashed
        )
    elif verdict.result == "unknown":
        headline = (f"{', '.join(clauses)}: the checker ran out of its budget after "
                    f"{verdict.steps} steps (verdict unknown, which is not a pass)")
    else:
        headline = f"{', '.join(clauses)}: no order of the calls explains the observed results"
    lines = [
        headline,
        "{replay}",
        "",
        "Minimal scenario (runnable):",
        "",
        *("    " + line for line in scenario.render().splitlines()),
        "",
        "History of a failing run (one lane per branch; ✗ marks calls no order explains):",
    ]
    highlight = {u.call for u in verdict.unexplained} if verdict else set()
    calls = ex.calls if verdict is None or not verdict.calls else [
        c for c in ex.calls if c.index in set(verdict.calls)
    ]
    lines.append(render_timeline(calls, ex.lanes, highlight))
    if verdict is not None and verdict.result == "violation":
        order = " ".join(f"#{i}" for i in verdict.best_order) or "(none)"
        lines += ["", f"Longest legal prefix found: {order}", "Results no order explains:"]
        for u in verdict.unexplained:
            lines.append(f"  #{u.call}: observed {u.observed}; the reference would give {u.expected}")
        if not verdict.unexplained:
            lines.append("  (every call fits somewhere, but no single order fits them all)")
    lines += [
        "",
        f"Seed {seed_value} (--hypothesis-seed={seed_value} or CORTEX_SPEC_SEED replays it; the "
        "certification report prints the whole command)",
    ]
    return "\n".join(lines)


def run_concurrent(
    harness: Harness | Callable[..., Any],
    profile: Profile | None = None,
    declared: Iterable[str] | None = None,
    family: str = "mixed",
    stats: MachineStats | None = None,
    clauses: tuple[str, ...] = ("MACH-LIN-1",),
    focus: Iterable[str] | None = None,
) -> MachineStats:
    """Generate scenarios of each class of ``focus`` (default: every declared
    class), race them, check every history (raises on a violation).

    ``family`` is ``"mixed"`` (the census of the class's storms, then its
    random search) or the name of one of the class's own families; each
    class gets its share (its weight, or the family's) of the profile's
    scenarios.  A violation refutes ``clauses`` and the clauses the scenario
    names."""
    from .runner import (
        as_harness,
        declared_of,
        default_profile,
        limit_shrinking,
        phases,
        session_seed,
        share,
    )

    harness = as_harness(harness)
    profile = profile or default_profile()
    limit_shrinking(profile.shrink_seconds)
    declared = frozenset(declared) if declared is not None else declared_of(harness)
    stats = stats or MachineStats("concurrent")
    rounds = profile.concurrent_rounds
    splits = {k: v for m in plugins_for(declared) for k, v in m.splits.items()}
    opaque = frozenset(f for m in plugins_for(declared) for f in m.opaque_fields)

    def model() -> ReferenceModel:
        return ReferenceModel(splits=splits)
    seed_value = session_seed()
    remembered: dict[str, tuple[Scenario, str, tuple[str, ...]]] = {}
    last: list[str] = []
    pictures: dict[str, dict[str, Any]] = {}

    def check_scenario(scenario: Scenario) -> None:
        stats.examples += 1
        key = scenario.render()
        failures: list[tuple[Execution, Verdict | None]] = []
        passed: set[Hashable] = set()  # the shapes of this scenario's histories found linearizable
        for _ in range(rounds):
            ex = execute(harness, scenario)
            stats.histories += 1
            stats.operations += len(ex.calls)
            stats.longest_history = max(stats.longest_history, len(ex.calls))
            if ex.hung or any(c.outcome.kind == "crash" for c in ex.calls):
                failures.append((ex, None))
                break
            shape = history_shape(ex.calls, opaque)
            if shape in passed:
                continue  # the same history as a round already checked: the same verdict
            verdict = check(model(), ex.calls, profile.checker_budget)
            if verdict.ok:
                passed.add(shape)
            stats.check_seconds += verdict.seconds
            if verdict.result == "unknown":
                stats.unknown_verdicts += 1
            if not verdict.ok:
                failures.append((ex, verdict))
                break  # one failing run decides; the final replay counts k of N
        if failures:
            stats.violations += 1
            ex, verdict = failures[0]
            if verdict is None:
                refuted: tuple[str, ...] = ("MACH-LIN-2",)
            else:
                refuted = tuple(dict.fromkeys(scenario.clauses + tuple(clauses)))
            report = _explain(scenario, ex, verdict, refuted, harness.name, seed_value)
            remembered[key] = (scenario, report, refuted)
            highlight = {u.call for u in verdict.unexplained} if verdict else set()
            pictures[key] = {
                "clauses": ", ".join(refuted),
                "scenario": scenario.render(),
                "unexplained": [attrs.asdict(u) for u in verdict.unexplained] if verdict else [],
                **timeline_data(ex.calls, ex.lanes, highlight),
            }
            last.append(key)
            raise ScenarioFailure(report, refuted)
        if key in remembered:
            # Hypothesis replays the shrunk example once more; a race need not
            # reproduce on demand, so the failure already observed stands.
            last.append(key)
            raise ScenarioFailure(remembered[key][1], remembered[key][2])

    def replay(key: str) -> ScenarioFailure:
        """Re-run the minimal scenario and say in how many runs it fails."""
        scenario, report, refuted = remembered[key]
        n = max(2 * rounds, 8)
        stats.violation = pictures.get(key)
        k = 0
        for _ in range(n):
            ex = execute(harness, scenario)
            if (ex.hung or any(c.outcome.kind == "crash" for c in ex.calls)
                    or not check(model(), ex.calls, profile.checker_budget).ok):
                k += 1
        note = (f"Replayed {n} times: {k} of {n} executions failed"
                + ("" if k else " (the race did not recur, but the violation above was observed)"))
        return ScenarioFailure(report.replace("{replay}", note), refuted)

    def search(strategy: st.SearchStrategy[Scenario], examples: int) -> None:
        @seed(seed_value)
        @hypothesis_settings(profile, max_examples=examples, phases=phases())
        @given(strategy)
        def race_scenarios(scenario: Scenario) -> None:
            check_scenario(scenario)

        race_scenarios()

    try:
        for machines in plugins_for(declared if focus is None else frozenset(focus) & declared):
            classes = machine_classes(machines.name, declared)
            if family == "mixed":
                for census in storm_census(machines.name, classes):
                    search(_mixed(classes, machines.name, census), profile.census_examples)
                weight = machines.weight
            else:
                found = [f for f in machines.families if f.name == family]
                if not found:
                    continue
                weight = found[0].weight
            search(scenarios(declared, machines.name, family),
                   share(profile.concurrent_examples, weight))
    except (ScenarioFailure, Flaky) as exc:
        if not last:
            raise
        failure = replay(last[-1])
        for note in reproduction_notes(exc):  # Hypothesis' blob, kept on the replayed failure
            failure.add_note(note)
        raise failure from None if isinstance(exc, ScenarioFailure) else exc
    return stats
