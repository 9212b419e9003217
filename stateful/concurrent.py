"""The concurrent machine: racing branches, recorded histories, and the
linearizability check against the reference (MACH-LIN-1/2, FOUR-7).

A :class:`Scenario` is drawn up front as data: a :class:`World` of a few
rows (paused runs, their suspensions with deadlines around the race instant,
pending checkpoints), a sequential prefix that creates them, and 2–4
branches of racing calls — or, in the ``four-writers`` family, the four
writer scripts of a paused run.  Each branch runs in its own thread and all
are released by one barrier; every call is recorded with monotonic invoke
and response times.  The clock is fixed while the branches race.  Before
its random search, the mixed family races every storm kind of runs,
suspensions and checkpoints on a world where the claim can still win
(:func:`storm_census`), so no claim race is left to chance; a2a and gateway
race in families of their own.

Each scenario is executed ``profile.concurrent_runs`` times on fresh storage
(thread schedules differ from run to run) and every history is checked.  On
a violation Hypothesis shrinks the scenario; the failure shows the minimal
scenario as runnable Python, the history as a per-branch timeline, which
results no order explains, how many runs failed, and the seed to replay.

Run it against your own store::

    from cortex_spec.stateful import check_concurrent
    check_concurrent(my_factory)
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable

import attrs
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from cortex_spec import ids
from cortex_spec.checkpoints import Checkpoint
from cortex_spec.clock import EPOCH, ManualClock, to_millis
from cortex_spec.context import Context
from cortex_spec.harness import Harness
from cortex_spec.profiles import Profile
from cortex_spec.runs import Run, RunState
from cortex_spec.suspensions import Suspension

from . import suspensions as susp_ops
from .classes import MODULES, close_session, modules_for, open_session
from .history import Call, Recorder, render_timeline, timeline_data
from .linearizability import Verdict, check
from .model import ReferenceModel
from .ops import Bindings, Op, Outcome, py
from .runs import AGENTS, run_key
from .checkpoints import cp_key
from .stats import MachineStats
from .world import ROLES, ctx_of, fixed_id, make_op

__all__ = [
    "World",
    "Tick",
    "Script",
    "Scenario",
    "scenarios",
    "execute",
    "ScenarioFailure",
    "run_concurrent",
    "CALL_TIMEOUT",
]

#: Seconds a racing call may take before it counts as hung (MACH-LIN-2).
CALL_TIMEOUT = 30.0
#: The instant the branches race at.
T0 = EPOCH + timedelta(days=1)
#: Deadline offsets from T0 a world's suspensions may have (None: no deadline).
DEADLINE_OFFSETS: tuple[timedelta | None, ...] = (
    None,
    -timedelta(days=1),
    -timedelta(milliseconds=1),
    timedelta(0),
    timedelta(milliseconds=1),
    timedelta(seconds=5),
)


@attrs.frozen
class World:
    """The rows a scenario works on (ids are deterministic)."""

    t0: datetime
    agent: str
    runs: tuple[str, ...]
    spare_run: str
    deadlines: dict[str, datetime | None] = attrs.field(hash=False)
    suspensions: tuple[str, ...]
    spare_suspensions: tuple[str, str]
    checkpoints: tuple[str, ...]
    spare_checkpoint: str
    #: rows of other classes, by class name (``world(draw, t0)`` of its module)
    extras: dict[str, Any] = attrs.field(factory=dict, hash=False)


@attrs.frozen
class Tick:
    """A setup step that sets the clock (rows claimed "at various times")."""

    at: datetime

    def render(self) -> str:
        return f"clock.set(T({to_millis(self.at)}))"


@attrs.frozen
class Script:
    """A writer script (FOUR-*): store calls with control flow between them."""

    name: str
    ctx: Context
    run_id: str
    checkpoint_id: str | None
    now: datetime

    def run(self, call: Callable[[Op], Outcome]) -> None:
        susp_ops.WRITERS[self.name](call, self.ctx, self.run_id, self.checkpoint_id, self.now)

    def render(self) -> str:
        return (
            f"writer_{self.name}(call, {py(self.ctx)}, {self.run_id!r}, "
            f"{self.checkpoint_id!r}, {py(self.now)})"
        )


Step = Op | Script


@attrs.frozen
class Scenario:
    family: str
    world: World
    prefix: tuple[Op | Tick, ...]
    branches: tuple[tuple[Step, ...], ...]
    #: clauses this scenario exercises besides the run's (a class family's races)
    clauses: tuple[str, ...] = ()

    def targets(self) -> frozenset[str]:
        """Targets (opened objects such as the gateway) the scenario's calls use."""
        steps = list(self.prefix) + [s for branch in self.branches for s in branch]
        return frozenset(s.target for s in steps if isinstance(s, Op) and s.target)

    def render(self) -> str:
        """The scenario as a runnable Python function of a store and a clock."""
        scripted = any(isinstance(step, Script) for branch in self.branches for step in branch)
        targets = sorted(self.targets())
        lines = [
            "from datetime import datetime, timedelta, timezone",
            "from cortex_spec import *",
            "from cortex_spec.testing import ctx, race",
        ]
        if scripted:
            lines += [
                "from cortex_spec.stateful.ops import outcome_of",
                "from cortex_spec.stateful.suspensions import "
                "writer_resume, writer_reject, writer_sweep, writer_cancel",
            ]
        lines += [
            "",
            "def T(ms):",
            "    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)",
            "",
            "def scenario(store, clock" + "".join(f", {t}" for t in targets) + "):",
            *(f"    # {t}: store.open_{t}(<a fresh location>)" for t in targets),
            f"    clock.set(T({to_millis(self.world.t0)}))",
        ]
        if any(isinstance(op, Op) and op.method == "claim_delivery" for op in self.prefix):
            lines.append("    held = {}  # claim tokens the setup got, by delivery id")
        for op in self.prefix:
            if isinstance(op, Op) and op.method == "claim_delivery":
                lines.append(f"    held[{op.args[0]!r}] = {op.render()}.claim_token")
            else:
                lines.append(f"    {op.render()}")
        if any(isinstance(op, Tick) for op in self.prefix):
            lines.append(f"    clock.set(T({to_millis(self.world.t0)}))")
        if scripted:
            lines.append("    call = lambda op: outcome_of(lambda: op(store))")
        lines.append("    return race([")
        for branch in self.branches:
            lines.append(f"        lambda: ({', '.join(step.render() for step in branch)},),")
        lines.append("    ])")
        return "\n".join(lines)


# -- generation -------------------------------------------------------------------------


#: The deadline offsets at which a resume claim can still win (a census world).
LIVE_OFFSETS = tuple(off for off in DEADLINE_OFFSETS if off is None or off > timedelta(0))


def _world(draw: Any, n_runs: int, n_checkpoints: int, declared: frozenset[str] = frozenset(),
           offsets: tuple[timedelta | None, ...] = DEADLINE_OFFSETS) -> World:
    """Rows of runs, suspensions and checkpoints, plus those of every declared
    class whose machine module draws a world of its own (``world(draw, t0)``)."""
    runs = tuple(fixed_id(ids.RUN, 100 + i) for i in range(n_runs))
    deadlines = {
        r: (None if off is None else T0 + off)
        for r, off in zip(runs, [draw(st.sampled_from(offsets)) for _ in runs])
    }
    return World(
        t0=T0,
        agent=AGENTS[0],
        runs=runs,
        spare_run=fixed_id(ids.RUN, 199),
        deadlines=deadlines,
        suspensions=tuple(fixed_id(ids.SUSPENSION, 100 + i) for i in range(n_runs)),
        spare_suspensions=(fixed_id(ids.SUSPENSION, 198), fixed_id(ids.SUSPENSION, 199)),
        checkpoints=tuple(fixed_id(ids.CHECKPOINT, 100 + i) for i in range(n_checkpoints)),
        spare_checkpoint=fixed_id(ids.CHECKPOINT, 199),
        extras={m.NAME: m.world(draw, T0) for m in modules_for(declared) if hasattr(m, "world")},
    )


def _setup(world: World, declared: frozenset[str]) -> list[Op | Tick]:
    exact = ctx_of(ROLES["exact"])
    prefix: list[Op] = []
    if "runs" in declared:
        for run_id in world.runs:
            prefix.append(make_op("create_run", exact, Run(id=run_id, agent_id=world.agent,
                                  state=RunState.PAUSED), keys=[run_key(run_id)]))
    if "suspensions" in declared:
        for run_id, sus_id in zip(world.runs, world.suspensions):
            prefix.append(make_op(
                "create_suspension", exact,
                Suspension(id=sus_id, run_id=run_id, expires_at=world.deadlines[run_id]),
                keys=[run_key(run_id), ("sus", sus_id)],
            ))
    if "checkpoints" in declared:
        for cp_id in world.checkpoints:
            prefix.append(make_op("create_checkpoint", exact,
                                  Checkpoint(id=cp_id, run_id=world.runs[0], agent_id=world.agent),
                                  keys=[cp_key(cp_id)]))
    for m in modules_for(declared):
        if hasattr(m, "setup") and m.NAME in world.extras:
            prefix += m.setup(world)
    return prefix


@st.composite
def _mixed(draw: Any, declared: frozenset[str], census: tuple[str, int] | None = None) -> Scenario:
    """Either a *storm* (2–4 branches making the same kind of call on one
    row: the claim races of SUSP-CLAIM-10, CP-RESOLVE-4, RUN-UPD-6, …) or a
    *mix* (each branch 1–3 calls of any kind on one or two rows).

    ``census=(class, k)`` always gives the ``k``-th storm of that class, on a
    world where a resume claim can still win (see :func:`storm_census`)."""
    storm = census is not None or draw(st.sampled_from([True, True, False]))  # storms find lost races fastest
    n_rows = 1 if storm else draw(st.integers(1, 2))
    offsets = LIVE_OFFSETS if census is not None else DEADLINE_OFFSETS
    world = _world(draw, n_rows, n_rows, declared, offsets)
    lanes = draw(st.integers(2, 4))
    if census is not None:
        build = MODULES[census[0]].storm_ops(world)[census[1]]
        branches = tuple((build(draw),) for _ in range(lanes))
    elif storm:
        storms = [build for m in modules_for(declared) for build in m.storm_ops(world)]
        build = storms[draw(st.integers(0, len(storms) - 1))]
        branches = tuple((build(draw),) for _ in range(lanes))
    else:
        racers = [build for m in modules_for(declared) for build in m.racing_ops(world)]
        pick = st.integers(0, len(racers) - 1)
        branches = tuple(
            tuple(racers[draw(pick)](draw) for _ in range(draw(st.integers(1, 3))))
            for _ in range(lanes)
        )
    return Scenario("storm" if storm else "mixed", world, tuple(_setup(world, declared)), branches)


@st.composite
def _four_writers(draw: Any, declared: frozenset[str]) -> Scenario:
    with_cp = "checkpoints" in declared and draw(st.booleans())
    world = _world(draw, 1, 1 if with_cp else 0)
    run_id = world.runs[0]
    names = draw(st.lists(st.sampled_from(sorted(susp_ops.WRITERS)), min_size=2, max_size=4,
                          unique=True))
    exact = ctx_of(ROLES["exact"])
    cp = world.checkpoints[0] if with_cp else None
    branches = tuple((Script(n, exact, run_id, cp, world.t0),) for n in names)
    setup = _setup(world, declared if with_cp else declared - {"checkpoints"})
    return Scenario("four-writers", world, tuple(setup), branches)


@st.composite
def _gateway_races(draw: Any, declared: frozenset[str], race: str | None = None) -> Scenario:
    """One GW-RACE per scenario (``race``, or drawn; see stateful/gateway.py)."""
    from . import gateway as gateway_ops

    if race is None:
        race = draw(st.sampled_from(gateway_ops.RACE_IDS))
    world = _world(draw, 1, 1)
    world = attrs.evolve(world, extras={"gateway": gateway_ops.race_world(draw, world, race)})
    branches = gateway_ops.race_branches(draw, world, race)
    return Scenario("gateway", world, tuple(_setup(world, declared & {"gateway"})), branches)


@st.composite
def _class_family(draw: Any, declared: frozenset[str], family: str) -> Scenario:
    """A family a class module defines (``FAMILIES[name](draw, world)`` ->
    ``(clauses, branches)``): its own races on a world with only that class's
    rows; a violation fails the clauses the scenario names too."""
    module = next(m for m in modules_for(declared) if family in getattr(m, "FAMILIES", {}))
    world = _world(draw, 0, 0, frozenset({module.NAME}))
    clauses, branches = module.FAMILIES[family](draw, world)
    return Scenario(family, world, tuple(_setup(world, frozenset({module.NAME}))), branches,
                    tuple(clauses))


def storm_census(declared: Iterable[str]) -> list[tuple[str, int]]:
    """Every storm of the classes whose storms need no world of their own
    (runs, suspensions, checkpoints; a2a and gateway race in families of
    their own), as ``(class, index)``.  The mixed family races each of them
    before its random search, so no storm is left to chance: with a dozen
    storm kinds, sixty random scenarios miss a given one often enough to let
    a lost claim race through now and then."""
    plain = _world(lambda strategy: None, 1, 1)
    return [(m.NAME, k) for m in modules_for(frozenset(declared))
            for k in range(len(m.storm_ops(plain)))]


def scenarios(declared: Iterable[str], family: str = "mixed") -> st.SearchStrategy[Scenario]:
    declared = frozenset(declared)
    if family == "four-writers":
        return _four_writers(declared)
    if family == "gateway":  # the GW-RACE families on their own
        return _gateway_races(declared)
    if family.startswith("gateway:"):  # one of them: "gateway:GW-RACE-3"
        return _gateway_races(declared, family.split(":", 1)[1])
    if family != "mixed":
        return _class_family(declared, family)
    return _mixed(declared)


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
            store = open_session(harness, store, targets)
        except BaseException:
            store.close()
            raise
    recorder = Recorder()
    bindings = Bindings()  # claim tokens seen, for HeldToken placeholders

    def call(op: Op, index: int) -> Outcome:
        op = bindings.resolve(attrs.evolve(op, at=clock.now()), index)
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

        def lane(index: int, steps: tuple[Step, ...]) -> None:
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


def _lane_name(branch: tuple[Step, ...]) -> str:
    first = branch[0]
    return f"writer {first.name}" if isinstance(first, Script) else "branch"


# -- checking and reporting --------------------------------------------------------------


class ScenarioFailure(AssertionError):
    """A scenario broke a clause; ``cortex_clauses`` names which."""

    def __init__(self, message: str, clauses: tuple[str, ...]) -> None:
        super().__init__(message)
        self.cortex_clauses = clauses


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
        f"Replay: CORTEX_SPEC_SEED={seed_value} pytest --pyargs cortex_spec.stateful "
        f"-k concurrent --cortex-store {store_name}",
    ]
    return "\n".join(lines)


def run_concurrent(
    harness: Harness | Callable[..., Any],
    profile: Profile | None = None,
    declared: Iterable[str] | None = None,
    family: str = "mixed",
    stats: MachineStats | None = None,
    clauses: tuple[str, ...] | Callable[[Scenario], tuple[str, ...]] = ("MACH-LIN-1",),
) -> MachineStats:
    """Generate scenarios, race them, check every history (raises on a violation)."""
    from .runner import as_harness, declared_of, default_profile, limit_shrinking, phases, session_seed

    harness = as_harness(harness)
    profile = profile or default_profile()
    limit_shrinking(profile.shrink_seconds)
    declared = frozenset(declared) if declared is not None else declared_of(harness)
    stats = stats or MachineStats("concurrent")
    runs = profile.concurrent_runs
    splits = {k: v for m in modules_for(declared) for k, v in getattr(m, "SPLITS", {}).items()}

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
        for _ in range(runs):
            ex = execute(harness, scenario)
            stats.histories += 1
            stats.operations += len(ex.calls)
            stats.longest_history = max(stats.longest_history, len(ex.calls))
            if ex.hung or any(c.outcome.kind == "crash" for c in ex.calls):
                failures.append((ex, None))
                break
            verdict = check(model(), ex.calls, profile.checker_budget)
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
                named = clauses(scenario) if callable(clauses) else clauses
                refuted = tuple(dict.fromkeys(scenario.clauses + tuple(named)))
            message = _explain(scenario, ex, verdict, refuted, harness.name, seed_value)
            remembered[key] = (scenario, message, refuted)
            highlight = {u.call for u in verdict.unexplained} if verdict else set()
            pictures[key] = {
                "clauses": ", ".join(refuted),
                "scenario": scenario.render(),
                "unexplained": [attrs.asdict(u) for u in verdict.unexplained] if verdict else [],
                **timeline_data(ex.calls, ex.lanes, highlight),
            }
            last.append(key)
            raise ScenarioFailure(message, refuted)
        if key in remembered:
            # Hypothesis replays the shrunk example once more; a race need not
            # reproduce on demand, so the failure already observed stands.
            last.append(key)
            raise ScenarioFailure(remembered[key][1], remembered[key][2])

    def replay(key: str) -> ScenarioFailure:
        """Re-run the minimal scenario and say in how many runs it fails."""
        scenario, message, refuted = remembered[key]
        n = max(2 * runs, 8)
        stats.violation = pictures.get(key)
        k = 0
        for _ in range(n):
            ex = execute(harness, scenario)
            if (ex.hung or any(c.outcome.kind == "crash" for c in ex.calls)
                    or not check(model(), ex.calls, profile.checker_budget).ok):
                k += 1
        note = (f"Replayed {n} times: {k} of {n} runs failed"
                + ("" if k else " (the race did not recur, but the violation above was observed)"))
        return ScenarioFailure(message.replace("{replay}", note), refuted)

    def search(strategy: st.SearchStrategy[Scenario], examples: int) -> None:
        @seed(seed_value)
        @settings(
            max_examples=examples,
            phases=phases(),
            report_multiple_bugs=False,
            deadline=None,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(strategy)
        def race_scenarios(scenario: Scenario) -> None:
            check_scenario(scenario)

        race_scenarios()

    try:
        if family == "mixed":
            for census in storm_census(declared):
                search(_mixed(declared, census), profile.census_examples)
        search(scenarios(declared, family), profile.concurrent_examples)
    except (ScenarioFailure, Flaky) as exc:
        if not last:
            raise
        raise replay(last[-1]) from None if isinstance(exc, ScenarioFailure) else exc
    return stats
