"""The differential machine: the backend against the reference, step by step.

Every rule makes one store call of a declared class, runs it on the backend
under test and on a fresh reference :class:`MemoryStore` that read the same
:class:`ManualClock`, and compares the observable outcomes (MACH-DIFF-1).
After every step the whole-state views of both stores are compared
(MACH-DIFF-2).  Rules are selected by swarm testing (each example runs with
a random subset of rules switched off; ``swarm.py`` draws it as Hypothesis'
stateful runner would, at one choice a step); the machine counts how often
each rule ran and fails a run in which some rule never did.

Run it against your own store in one line::

    from cortex_spec.stateful import check_differential
    check_differential(my_factory)          # or a Harness instance
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import attrs
from cortex_spec.reference import MemoryStore
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from cortex_spec.clock import EPOCH, ManualClock
from cortex_spec.context import Context
from cortex_spec.harness import Harness
from cortex_spec.profiles import Profile
from cortex_spec.words import clip

from .classes import (
    close_session,
    machine_classes,
    open_session,
    plugins_for,
    reference_session,
)
from .ops import Op, OpaqueMap, Outcome, outcome_of
from .stats import MachineStats
from .swarm import install as install_swarm
from .world import RECORDS, contexts, ctx_of, fixed_id, instants_around, sampled

__all__ = ["DifferentialMachineBase", "Draws", "Mismatch", "build_differential", "run_differential"]

#: the root scopes of the pool: their lists see every row created in it
VIEW_SCOPES = ("ws=w1", "ws=w10", "ws=w1x", "org=w1", "ws=w2")


class Mismatch(AssertionError):
    """The backend and the reference disagreed, or a machine property broke.

    ``cortex_clauses`` names the clause(s) refuted (the certification report
    fails exactly those)."""

    def __init__(self, text: str, *clauses: str, expected: str = "", observed: str = "") -> None:
        super().__init__(text)
        self.cortex_clauses = clauses or ("MACH-DIFF-1",)
        #: what the reference gave and the backend gave (the report shows them)
        self.expected = expected
        self.observed = observed


def compare(op: Op, got: Outcome, want: Outcome, what: str = "", clause: str = "MACH-DIFF-1") -> None:
    if got == want:
        return
    lines = [
        f"{what or 'call'} differs from the reference ({clause}):",
        f"  call:      {op.render()}",
        f"  backend:   {got.describe()}",
        f"  reference: {want.describe()}",
    ]
    if got.ok and want.ok:
        lines.append(f"  backend value:   {got.raw!r}")
        lines.append(f"  reference value: {want.raw!r}")
    if got.kind == "crash":
        lines.append(f"  the backend raised a non-contract exception: {got.value}")
    elif got.kind == "error" and got.raw is not None and str(got.raw):
        lines.append(f"  the backend's error: {clip(' '.join(str(got.raw).split()), 400)}")
    raise Mismatch("\n".join(lines), clause, expected=f"{op.render()} {want.describe()}",
                   observed=f"{op.render()} {got.describe()}")


_SEED_COUNTS = st.integers(0, 3)
#: what ``st.sampled_from`` builds (see :meth:`Draws.draw`)
_SampledFrom = type(st.sampled_from((0, 1)))
#: what ``st.one_of`` of two strategies builds
_OneOf = type(st.one_of(st.none(), st.sampled_from((0, 1))))


class Draws:
    """What a rule draws its arguments from: ``draw(strategy, label)`` as on
    Hypothesis' ``st.data()`` object, at a fraction of its cost.

    ``DataObject.draw`` wraps every draw in bookkeeping for its report: a
    check that the strategy left the global ``random`` alone (two
    ``random.getstate()`` copies of the Mersenne state), an argument span,
    a label string; a differential step draws five to fifteen times, and on
    the reference that bookkeeping was about an eighth of the machine's
    time.  While Hypothesis generates and shrinks, the draw goes straight to
    the example's choice sequence (the same choices, so a failure replays
    and shrinks as before); when it prints a failing example (its final
    run, or verbose output), every draw goes through ``st.data()`` again, so
    the report lists each drawn value with its label as before."""

    __slots__ = ("_data", "_direct")

    def __init__(self, data: Any, noted: bool | None = None) -> None:
        self._data = data
        direct = getattr(data, "conjecture_data", None)
        if noted is None and direct is not None:
            from hypothesis.control import should_note

            noted = should_note()
        #: the example's ConjectureData, or None when the draws are printed
        self._direct = None if direct is None or noted else direct

    def draw(self, strategy: st.SearchStrategy[Any], label: Any = None) -> Any:
        direct = self._direct
        if direct is None:
            return self._data.draw(strategy, label)
        return _draw_direct(direct, strategy)


def _draw_direct(data: Any, strategy: st.SearchStrategy[Any]) -> Any:
    """``data.draw(strategy)`` on an example's ConjectureData, making the
    choices Hypothesis' own draw makes (so a printed replay through
    ``st.data()`` meets the same choice sequence), for the strategies the
    machines draw most, without Hypothesis' bookkeeping around each draw
    (validating a strategy on first sight, spans, argument labels, the
    records of calls it prints) — anything else is drawn by Hypothesis:

    * ``sampled_from`` (:func:`.world.sampled`), also with maps
      (:func:`.world.json_objects`): one integer choice, the element's index,
      then the maps.  A strategy new on most draws (the rows known so far
      change from step to step) was validated on each first sight: with the
      known ids drawn this way, validation under the reference's
      differential machines fell from 5.7 to 2.9 % of their samples.  A
      filter, or a Hypothesis without the ``_transformations`` attribute,
      takes the ordinary draw.
    * ``one_of`` of two branches or more (:func:`.world.optional`): one
      integer choice of the branch, then the branch (its filtered choice
      never rejects a branch that is not empty, and ``element_strategies``
      holds none that is).
    * the records of :func:`.world.record` (an entity's fields): each field,
      in order, then the record made of them (``tuples(...).map(...)``
      draws nothing else).

    These are Hypothesis' internals (6.155 to 6.170 measured): the test of
    this (``tests/test_machine_costs.py``) replays generated examples
    through them under whichever Hypothesis is installed.
    """
    kind = type(strategy)
    if kind is _SampledFrom:
        # (name, function) pairs, or (name, function, where) in later versions
        transformations = getattr(strategy, "_transformations", None)
        if transformations is not None and all(t[0] == "map" for t in transformations):
            elements = strategy.elements  # type: ignore[attr-defined]
            value = elements[data.draw_integer(0, len(elements) - 1)]
            for t in transformations:
                value = t[1](value)
            return value
    elif kind is _OneOf:
        branches = strategy.element_strategies  # type: ignore[attr-defined]
        if len(branches) > 1:  # (of one branch, some versions draw no index)
            return _draw_direct(data, branches[data.draw_integer(0, len(branches) - 1)])
    else:
        found = RECORDS.get(strategy)
        if found is not None:
            fields, make = found
            return make(tuple([_draw_direct(data, f) for f in fields]))
    return data.draw(strategy)


class DifferentialMachineBase(RuleBasedStateMachine):
    """Shared state and helpers; concrete machines get their rules added by
    :func:`build_differential`."""

    harness: Harness
    #: the classes whose rules this machine runs (a class and what it requires)
    declared: frozenset[str]
    #: their :class:`~.plugin.ClassMachines`
    plugins: list[Any]
    stats: MachineStats
    view_contexts: list[Context]
    #: fields whose values are opaque and differ by store (``OPAQUE_FIELDS``
    #: of the class modules, e.g. a2a's ``claim_token``)
    opaque_fields: frozenset[str] = frozenset()
    #: ``observe(machine, op, outcome)`` hooks of the class modules, called
    #: with the backend's outcome of every call (to remember what it returned)
    observers: tuple[Callable[..., None], ...] = ()

    def __init__(self) -> None:
        from hypothesis.control import should_note
        from hypothesis.errors import InvalidArgument as OutsideATest

        super().__init__()
        install_swarm(self)
        #: whether this example's draws are printed (its final run, or
        #: verbose output): asked once, not on every step (:class:`Draws`);
        #: None for a machine made outside a Hypothesis test (a driven one),
        #: whose draws ask themselves
        self.noted: bool | None
        try:
            self.noted = should_note()
        except OutsideATest:
            self.noted = None
        self.clock = ManualClock(EPOCH)
        self.location = self.harness.new_location()
        # a StoreSession: the store plus the objects it opened (the gateway)
        self.sut = open_session(self.harness, self.harness.open(self.location, self.clock),
                                self.declared)
        self.ref = reference_session(MemoryStore(self.clock))
        #: backend opaque values <-> the reference's (see ``ops.OpaqueMap``)
        self.opaque = OpaqueMap(self.opaque_fields)
        self.known: dict[str, list[str]] = {}
        self.instants: list[datetime] = [EPOCH]
        self.next_id = 1
        self._id_strategies: dict[tuple[str, bool], tuple[tuple[str, ...], Any]] = {}
        self.calls = 0
        self.steps_since_views = 0
        #: steps since the last view check that may have changed a store
        self.live_steps = 0
        #: whether this step's calls (through :meth:`both`) may have changed
        #: a store: None until one ran, False while every one raised on both
        self.step_live: bool | None = None
        #: the reference's view outcomes (name -> (op, outcome)) and the
        #: reference image they were read at
        self._ref_views: dict[str, tuple[Op, Outcome]] = {}
        self._ref_image: tuple[Any, ...] | None = None
        #: the reference image after the previous step
        self._step_image: tuple[Any, ...] | None = None
        self.stats.examples += 1

    # -- argument strategies used by the class modules' rules ------------------------

    def remember(self, kind: str, value: str) -> None:
        pool = self.known.setdefault(kind, [])
        if value not in pool:
            pool.append(value)
            if kind in self.id_prefixes and value == self._unknown_id(kind):
                self.next_id += 1  # the unknown id is known now: id_choice offers the next one

    def remember_instant(self, instant: datetime) -> None:
        if instant not in self.instants:
            self.instants.append(instant)

    def id_choice(self, kind: str, fresh: bool = False) -> st.SearchStrategy[str]:
        """A known id of ``kind``, or an unknown one; ``fresh`` favours new ids
        (shrinking goes towards the first choice)."""
        new = self._unknown_id(kind)
        known = self.known.get(kind, [])
        pool = (new, *known) if fresh else (*known, new)
        # The unknown id stays the same until it is remembered, so between
        # two new rows the pool, and the strategy drawing from it, is reused:
        # a machine draws ids thousands of times, and a new strategy costs
        # Hypothesis its validation on every draw.
        cached = self._id_strategies.get((kind, fresh))
        if cached is not None and cached[0] == pool:
            return cached[1]
        strategy = st.just(new) if not known else st.sampled_from(pool)
        self._id_strategies[(kind, fresh)] = (pool, strategy)
        return strategy

    def _unknown_id(self, kind: str) -> str:
        return fixed_id(self.id_prefixes[kind], 10_000 + self.next_id)

    def ctx_choice(self, zero: bool = False, actors: bool = False) -> st.SearchStrategy[Context]:
        """A context of the scope pool; ``actors``: acting for a drawn
        principal (the rules of calls that stamp or must not write one)."""
        return contexts(zero, actors)

    def instant_choice(self) -> st.SearchStrategy[datetime]:
        return instants_around(self.instants + [self.clock.now()])

    # -- running a call on both stores ------------------------------------------------

    def run_both(self, op: Op) -> tuple[Outcome, Outcome]:
        """Run ``op`` on the backend, then (its opaque arguments translated) on
        the reference; returns both outcomes, the backend's translated into
        the reference's opaque values, ready to compare."""
        got = outcome_of(lambda: op(self.sut))
        ref_op = self.opaque.translate_op(op)
        want = outcome_of(lambda: ref_op(self.ref))
        if got.ok and want.ok:
            self.opaque.bind(got.value, want.value)
        for observe in self.observers:
            observe(self, op, got)
        return self.opaque.translate_outcome(got), want

    def reference_outcome(self, op: Op) -> Outcome:
        """``op`` on the reference alone (a check reading the expected state)."""
        return outcome_of(lambda: op(self.ref))

    def both(self, op: Op) -> Outcome:
        op = attrs.evolve(op, at=self.clock.now())
        got, want = self.run_both(op)
        self.stats.operations += 1
        self.calls += 1
        compare(op, got, want)
        live = got.ok or want.ok
        self.step_live = live if self.step_live is None else self.step_live or live
        return got

    @initialize(data=st.data())
    def populate(self, data: st.DataObject) -> None:
        """Start every example with a few rows of each declared class, all
        created at the same instant (so ties in every list order are live)."""
        data = Draws(data, self.noted)  # type: ignore[assignment]
        for machines in self.plugins:
            for name in machines.seed_rules:
                for _ in range(data.draw(_SEED_COUNTS, f"{name} rows")):
                    op = machines.rules[name](self, data)
                    if op is not None:
                        self.both(op)

    @rule(step=sampled((
        timedelta(milliseconds=1), timedelta(seconds=1), timedelta(days=1), "deadline",
    )), data=st.data())
    def advance_clock(self, step: Any, data: st.DataObject) -> None:
        """Move the shared clock: by 1 ms, 1 s or a day, or onto (or 1 ms
        either side of) an instant a row cares about."""
        self.stats.rules["advance_clock"] += 1
        if step == "deadline":
            self.clock.set(data.draw(instants_around(self.instants), "instant"))
        else:
            self.clock.advance(step)

    @invariant()
    def views_agree_periodically(self) -> None:
        """MACH-DIFF-2, every ``profile.view_every`` steps that changed the
        reference or the clock (a divergence stays in the state, so it is
        still caught, a few steps later); the last check runs at teardown.
        A step that left the reference as it was (its calls raised, which
        writes nothing, or only read, or wrote what was already there) does
        not bring the check closer: what the backend may have written anyway
        stays in its state and is seen by the next check.  A step that calls
        nothing through :meth:`both` (a restart) counts.  (Counting the steps
        that read too made three checks where two now see the same: about
        half the steps of a machine read.)"""
        self.steps_since_views += 1
        image = self._reference_image()
        if self.step_live is None or image != self._step_image:
            self.live_steps += 1
        self._step_image = image
        self.step_live = None
        if self.live_steps >= self.view_every:
            self.whole_state_views_agree(image)

    def whole_state_views_agree(self, image: tuple[Any, ...] | None = None,
                                seen: dict[str, tuple[Op, Outcome]] | None = None) -> None:
        """MACH-DIFF-2: every whole-state view of both stores is equal.

        The reference's side of a view is read again only when the reference
        may have changed since it was last read: when its rows, the clock or
        the objects it opened differ (see :meth:`_reference_image`); the
        backend's side is read every time, except from ``seen``: the
        backend's raw outcomes of views already read (by name, with the op
        read), which a caller passes while the backend cannot have changed
        (the crash machine weighing several reference states against one
        backend state)."""
        self.steps_since_views = self.live_steps = 0
        if image is None:
            image = self._reference_image()
        if image != self._ref_image:
            self._ref_views.clear()
            self._ref_image = image
        now = self.clock.now()
        for machines in self.plugins:
            for name, view in machines.views(self.view_contexts, self.known).items():
                op = attrs.evolve(view, at=now)
                got = self.opaque.translate_outcome(self.backend_view(name, op, seen))
                cached = self._ref_views.get(name)
                if cached is None or cached[0] != op:
                    cached = self._ref_views[name] = (op, outcome_of(lambda: op(self.ref)))
                compare(op, got, cached[1], what=f"whole-state view {name}", clause="MACH-DIFF-2")

    def backend_view(self, name: str, op: Op, seen: dict[str, tuple[Op, Outcome]] | None) -> Outcome:
        """The backend's raw outcome of the view ``name`` (``op``); with
        ``seen``, read once: kept there by name with the op read, and taken
        from there while the op is the same."""
        if seen is None:
            return outcome_of(lambda: op(self.sut))
        read = seen.get(name)
        if read is None or read[0] != op:
            read = seen[name] = (op, outcome_of(lambda: op(self.sut)))
        return read[1]

    def _reference_image(self) -> tuple[Any, ...]:
        """What the reference's views depend on: the clock, every table's
        rows (the reference replaces a changed row, never mutates it, so
        comparing two images is mostly identity checks), and the state of
        the store and of the objects it opened (closed or not)."""
        ref = self.ref.store
        tables = ref.medium.tables()
        # the rows by identity: a changed row is a new object, and it may
        # compare equal to the one it replaced (a value of another JSON type:
        # 1 == 1.0 == True), which a comparison of the rows themselves would
        # take for no change, and keep a view read before it
        rows = tuple((name, tuple(table), tuple(map(id, table.values()))) for name, table in tables.items())
        kept = tuple(tuple(table.values()) for table in tables.values())  # (no id reused while kept)
        opened = tuple((name, tuple(vars(handle.obj).items())) for name, handle in self.ref.handles.items())
        return self.clock.now(), tuple(vars(ref).items()), opened, rows, kept

    def teardown(self) -> None:
        # the last view check, unless the example is already failing: its
        # own error is the finding, not a view its failure left behind
        # (teardown runs in Hypothesis' ``finally``)
        if self.steps_since_views and sys.exc_info()[1] is None:
            self.whole_state_views_agree()
        self.stats.histories += 1
        self.stats.longest_history = max(self.stats.longest_history, self.calls)
        try:
            close_session(self.sut)
        finally:
            self.harness.discard(self.location)


def _make_rule(name: str, generate: Callable[[Any, st.DataObject], Op | None]) -> Callable:
    @rule(data=st.data())
    def run_rule(self: DifferentialMachineBase, data: st.DataObject) -> None:
        op = generate(self, Draws(data, self.noted))
        self.stats.rules[name] += 1
        if op is not None:
            self.both(op)

    run_rule.__name__ = name
    run_rule.__qualname__ = name
    run_rule.__doc__ = f"{name} on the backend and on the reference"
    return run_rule


def build_differential(
    harness: Harness,
    classes: Iterable[str],
    stats: MachineStats | None = None,
    base: type[DifferentialMachineBase] = DifferentialMachineBase,
    extra_rules: dict[str, Callable] | None = None,
    rule_filter: Callable[[str], bool] | None = None,
    view_every: int = 1,
) -> type[DifferentialMachineBase]:
    """A machine class over the rules of ``classes`` (those whose name
    ``rule_filter`` accepts, when one is given)."""
    classes = frozenset(classes)
    chosen = plugins_for(classes)
    namespace: dict[str, Any] = {
        "harness": harness,
        "declared": classes,
        "plugins": chosen,
        "stats": stats or MachineStats("differential"),
        "view_contexts": [ctx_of(s) for s in VIEW_SCOPES],
        "opaque_fields": frozenset(f for m in chosen for f in m.opaque_fields),
        "observers": tuple(m.observe for m in chosen if m.observe is not None),
        "view_every": max(1, view_every),
        "id_prefixes": {kind: prefix for m in chosen for kind, prefix in m.id_kinds.items()},
    }
    for machines in chosen:
        for name, generate in machines.rules.items():
            if rule_filter is None or rule_filter(name):
                namespace[name] = _make_rule(name, generate)
    namespace.update(extra_rules or {})
    return type("DifferentialMachine", (base,), namespace)


def rule_names(machine: type) -> list[str]:
    return sorted(
        name for name in dir(machine)
        if getattr(getattr(machine, name), "hypothesis_stateful_rule", None) is not None
    )


def machine_settings(examples: int, steps: int, profile: Profile | None = None) -> settings:
    """The settings of one machine run: the registered Hypothesis profile
    ``cortex-<profile>`` (no deadline, ``@reproduce_failure`` printed, the
    example database of :func:`cortex_spec.profiles.examples_directory`)
    with this run's example and step budgets."""
    from cortex_spec.profiles import hypothesis_settings

    from .runner import phases

    return hypothesis_settings(profile, max_examples=examples, stateful_step_count=steps, phases=phases())  # type: ignore[no-any-return]


def run_differential(
    harness: Harness | Callable[..., Any],
    profile: Profile | None = None,
    declared: Iterable[str] | None = None,
    stats: MachineStats | None = None,
    focus: Iterable[str] | None = None,
) -> MachineStats:
    """Run the differential machine against ``harness`` (or a plain factory):
    one machine per class of ``focus`` (default: every declared class), on
    the rules of that class and of the classes it requires, each with the
    class's share of the profile's examples.

    Raises the first :class:`Mismatch` (after Hypothesis has shrunk it) and
    returns the machine figures otherwise.
    """
    from .runner import (
        as_harness,
        declared_of,
        default_profile,
        limit_shrinking,
        run_machine,
        share,
    )

    harness = as_harness(harness)
    profile = profile or default_profile()
    limit_shrinking(profile.shrink_seconds)
    declared = frozenset(declared) if declared is not None else declared_of(harness)
    stats = stats or MachineStats("differential")
    for machines in plugins_for(declared if focus is None else frozenset(focus) & declared):
        classes = machine_classes(machines.name, declared)
        budget = share(profile.differential_examples, machines.weight)
        machine = build_differential(harness, classes, stats, view_every=profile.view_every)
        run_machine(machine, machine_settings(budget, profile.differential_steps, profile), stats)
    return stats
