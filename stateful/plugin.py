"""What one conformance class contributes to the state machines.

The machines (:mod:`.differential`, :mod:`.concurrent`, :mod:`.crash`) know
no class by name.  Each class that has machine behaviour keeps one module
``cortex_spec.stateful.<class>`` defining ``MACHINES``, a
:class:`ClassMachines`; :mod:`.classes` finds them through
:data:`cortex_spec.CLASSES`.  Every machine runs once *per class*, on the
rules of that class and of the classes it requires (a suspension claim moves
a run, so the ``suspensions`` machines also make ``runs`` calls), with the
class's share (:attr:`ClassMachines.weight`) of the profile's budget.

What a class gives, and which machine uses it:

* ``rules`` — ``name -> rule(machine, data) -> Op | None``: one store call
  with drawn arguments, for the differential machine (every rule) and the
  crash machine (the rules that write).  ``machine`` offers
  ``id_choice(kind)``, ``ctx_choice(zero=False, actors=False)`` (``actors``:
  contexts acting for one of several principals), ``instant_choice()``,
  ``remember(kind, id)`` and ``known``; ``seed_rules`` run a few times
  when an example starts, at one instant, so that ties are live.
* ``views(contexts, known) -> {name: Op}`` — the whole-state views compared
  after every few steps (MACH-DIFF-2).
* ``id_kinds`` — the id pools the rules draw from (kind -> TypeID prefix).
* ``opaque_fields`` / ``observe`` — values that differ between any two
  stores (claim tokens), mapped by a bijection; a hook that sees every
  backend outcome.
* ``splits`` — calls atomic only per part, modelled as several steps by the
  linearizability checker (see :class:`.model.Split`).
* ``target`` — for a class whose methods live on an object the store opens
  (the gateway): how a session opens it and where the reference keeps it.
* ``world`` / ``setup`` / ``racing_ops`` / ``storm_ops`` — the concurrent
  machine's scenarios: the rows a scenario starts from, the calls that
  create them, and builders ``build(draw) -> Op`` of racing calls (a *mix*
  of anything, or a *storm* where every branch contends for one row).
* ``families`` — scenario families of the class's own (the A2A-RACE list,
  the four writers of a paused run, one GW-RACE each), each certified by a
  test of its own.
* ``claims`` / ``redos`` / ``sweeps`` — the crash machine's faults: a
  worker that wins a claim and dies (no second claim may succeed while it
  stands, MACH-CRASH-1), a worker that dies between a commit and its
  acknowledgment (the retry returns the record, nothing happens twice,
  MACH-CRASH-3), and a clock that jumps past every deadline before a
  sweeper runs (it takes exactly what is due, MACH-CRASH-2).
* ``tests`` — certification tests of the class's own that are neither
  (the gateway's driver model and its double opens).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import attrs

if TYPE_CHECKING:
    from cortex_spec.harness import Harness
    from cortex_spec.profiles import Profile

    from .ops import Op, Outcome
    from .stats import MachineStats

__all__ = [
    "ClassMachines",
    "Target",
    "World",
    "Race",
    "Family",
    "Claim",
    "Redo",
    "Sweep",
    "MachineTest",
    "Builder",
    "storm",
    "storm_clauses",
]

#: ``build(draw) -> Op``: one racing call, drawn with a Hypothesis ``draw``.
Builder = Callable[[Any], "Op"]


def storm(build: Builder, *clauses: str) -> Builder:
    """``build`` as a storm of ``clauses``: a storm scenario made of it
    refutes them when it fails (and the class's concurrent test names them,
    :attr:`ClassMachines.race_clauses`)."""
    build.clauses = tuple(c for c in clauses if c)  # type: ignore[attr-defined]
    return build


def storm_clauses(build: Builder) -> tuple[str, ...]:
    return getattr(build, "clauses", ())


@attrs.frozen
class World:
    """The rows a concurrent scenario works on: ``rows[class]`` is whatever
    that class's ``world`` drew (ids are deterministic); ``t0`` is the
    instant the branches race at."""

    t0: datetime
    rows: Mapping[str, Any] = attrs.field(factory=dict, hash=False)

    def __getitem__(self, name: str) -> Any:
        return self.rows[name]

    def get(self, name: str) -> Any:
        return self.rows.get(name)

    def with_rows(self, name: str, rows: Any) -> "World":
        return attrs.evolve(self, rows={**self.rows, name: rows})


@attrs.frozen
class Race:
    """One scenario of a family: its branches (each a tuple of steps), the
    clauses it exercises (a violation refutes them too), and optionally a
    world of its own (else the family's class world is used)."""

    clauses: tuple[str, ...]
    branches: tuple[tuple[Any, ...], ...]
    world: World | None = None


@attrs.frozen
class Family:
    """A scenario family: ``draw(draw, world, declared) -> Race``; its test
    names ``clauses`` (what any of its scenarios may refute) and gets
    ``weight`` of the profile's concurrent budget."""

    name: str
    draw: Callable[[Any, World, frozenset[str]], Race]
    clauses: tuple[str, ...]
    weight: float = 1.0
    #: seconds the family's test takes on the reference (pytest-xdist balance)
    cost: float = 3.0
    #: the figures' machine name in the report (default: ``name``)
    machine: str = ""


@attrs.frozen
class Target:
    """An object the store opens for the class (``open(harness, store)`` and
    ``reference(reference_store)`` return a handle with ``obj``, ``close``
    and ``reopen``); ops with ``target=name`` run on it."""

    name: str
    open: Callable[["Harness", Any], Any]
    reference: Callable[[Any], Any]


@attrs.frozen
class Claim:
    """A claim a worker may win and then die holding (MACH-CRASH-1).

    ``make(machine, data)`` returns the claim call (creating a claimable row
    through ``machine.both`` first when it likes); after the dying worker
    won it, ``died(machine, op, outcome)`` records what the later checks
    need and ``retries(machine, op, outcome)`` gives calls none of which may
    succeed while the dead worker's claim stands.
    """

    name: str
    make: Callable[[Any, Any], "Op"]
    retries: Callable[[Any, "Op", "Outcome"], Sequence["Op"]]
    died: Callable[[Any, "Op", "Outcome"], None] | None = None


@attrs.frozen
class Redo:
    """An exactly-once write whose worker dies after the commit and before
    its acknowledgment (MACH-CRASH-3).

    ``make(machine, data)`` returns the write (creating what it needs
    through ``machine.both`` first); the crash machine commits it on a
    worker's own store, loses the result, closes the worker, and retries
    the same call: the retry must equal the reference's retry (the recorded
    result with ``fresh`` false), and the whole-state views must equal the
    reference's after one commit.  A violation fails ``clauses`` too."""

    name: str
    make: Callable[[Any, Any], "Op"]
    clauses: tuple[str, ...] = ()


@attrs.frozen
class Sweep:
    """A sweeper that runs after the clock jumped by one of ``jumps`` past
    every instant the machine has used: ``run(machine)`` lists what is due
    across scopes, acts on each row under its own scope and raises
    ``Mismatch(..., "MACH-CRASH-2")`` when it takes anything not due."""

    name: str
    jumps: tuple[timedelta, ...]
    run: Callable[[Any], None]


@attrs.frozen
class MachineTest:
    """A certification test of a class's own: ``run(harness, profile,
    declared, stats)`` raises on a violation."""

    name: str
    clauses: tuple[str, ...]
    run: Callable[["Harness", "Profile", frozenset[str], "MachineStats"], Any]
    #: harness features it needs (``cortex_requires``)
    requires: tuple[str, ...] = ()
    #: the figures' machine name in the report
    machine: str = ""
    cost: float = 3.0


@attrs.frozen(kw_only=True)
class ClassMachines:
    """Everything one class gives the machines (see the module docstring)."""

    name: str
    rules: Mapping[str, Callable[[Any, Any], "Op | None"]]
    views: Callable[[Sequence[Any], Mapping[str, list]], dict[str, "Op"]]
    id_kinds: Mapping[str, str] = attrs.field(factory=dict)
    seed_rules: tuple[str, ...] = ()
    opaque_fields: tuple[str, ...] = ()
    observe: Callable[[Any, "Op", "Outcome"], None] | None = None
    splits: Mapping[str, Any] = attrs.field(factory=dict)
    target: Target | None = None
    #: ``world(draw, world, size, live) -> rows``: ``world`` holds the rows
    #: of the classes this one requires; ``size`` is how many rows of each
    #: kind (1 for a storm); ``live`` asks for rows a claim can still win
    world: Callable[[Any, World, int, bool], Any] | None = None
    #: ``setup(world) -> [Op | Tick]``: the calls that create the rows
    setup: Callable[[World], list] | None = None
    racing_ops: Callable[[World], list[Builder]] | None = None
    storm_ops: Callable[[World], list[Builder]] | None = None
    families: tuple[Family, ...] = ()
    claims: tuple[Claim, ...] = ()
    #: exactly-once writes whose worker dies between commit and acknowledgment
    redos: tuple[Redo, ...] = ()
    sweeps: tuple[Sweep, ...] = ()
    tests: tuple[MachineTest, ...] = ()
    #: the clauses the class's storms exercise (see :func:`storm`): its
    #: concurrent test names them
    race_clauses: tuple[str, ...] = ()
    #: the class's share of each machine budget of the profile
    weight: float = 1.0
    #: seconds its differential machine takes on the reference at weight 1
    #: (the other machines' costs are derived; pytest-xdist balance only)
    cost: float = 4.0
