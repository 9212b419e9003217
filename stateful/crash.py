"""The crash and fault machine (MACH-CRASH-1/2, MACH-DUR-1/2).

It is the differential machine with the faults a real deployment adds, for
the claims and sweeps the classes declare (:attr:`~.plugin.ClassMachines.claims`,
:attr:`~.plugin.ClassMachines.sweeps`):

* ``worker_commits_and_dies`` — a worker commits an exactly-once write
  and dies before the acknowledgment: the retry returns the record with
  ``fresh`` false and nothing happens twice (MACH-CRASH-3);
* ``worker_claims_and_dies`` — a worker (its own store object on the same
  storage where the harness can reopen, else the shared one) wins a claim
  and is abandoned without finishing; no second claim of that row may
  succeed while the dead worker's claim stands (MACH-CRASH-1);
* ``clock_jumps_and_sweeper_passes`` — the clock jumps past every instant the
  machine has used, or lands exactly on one of them (a deadline) or 1 ms
  either side, and a sweeper runs: it lists what is due across scopes
  and acts on each row under its own scope, and must take exactly what is
  due (MACH-CRASH-2);
* ``restart`` (harness feature ``reopen``) — the store is closed and opened
  again on the same storage; everything acknowledged must still be there
  (MACH-DUR-1);
* ``connection_killed_mid_call`` (harness feature ``kill-connection``) — a
  write runs while the harness kills the store's server connections; it must
  have happened entirely or not at all, and the store keeps working
  (MACH-DUR-2).  Where the harness offers kill points
  (``arm_connection_kill``/``disarm_connection_kill``: the postgres one), the
  kill is as often set off by the call itself at a drawn statement or
  COMMIT, before it is sent or after it ran with its reply lost, so that a
  finding replays from its seed.  A call atomic only per part (a split of
  the linearizability model: a reclaim, A2A-RCL-8) may also have happened
  as a prefix of its parts; a write that committed although its reply was
  lost issued its opaque values (a claim's token) to nobody, so the views
  pair them.

Every rule still compares the backend with the reference, so a fault that
makes the backend drift is caught by the next comparison too.  The ordinary
traffic between faults is the *write* rules of the machine's classes (reads
gain nothing here: the whole-state views after every step read everything,
and the differential machine runs every read rule anyway).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from cortex_spec.classes import closure
from cortex_spec.harness import Harness
from cortex_spec.profiles import Profile
from cortex_spec.reference import MemoryMedium, MemoryStore

from .classes import machine_classes, plugins_for, reference_session, reopen_session
from .differential import DifferentialMachineBase, Mismatch, build_differential, compare, machine_settings
from .ops import Op, Outcome, outcome_of
from .world import instants_around, sampled
from .stats import MachineStats

__all__ = ["run_crash", "CrashMachineBase", "has_faults"]


class CrashMachineBase(DifferentialMachineBase):
    """Fault rules on top of the differential machine."""

    faults: frozenset[str] = frozenset()

    @property
    def claims(self) -> list[Any]:
        return [c for m in self.plugins for c in m.claims]

    @property
    def sweeps(self) -> list[Any]:
        return [s for m in self.plugins for s in m.sweeps]

    # -- MACH-CRASH-1 ---------------------------------------------------------------------

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data())
    def worker_claims_and_dies(self, data: st.DataObject) -> None:
        self.stats.rules["worker_claims_and_dies"] += 1
        claim = data.draw(sampled(tuple(self.claims)), "claim")
        op = attrs.evolve(claim.make(self, data), at=self.clock.now())
        worker = self.sut
        own = "reopen" in self.harness.features
        if own:
            worker = self.harness.open(self.location, self.clock)
        got = outcome_of(lambda: op(worker))
        want = outcome_of(lambda: op(self.ref))
        if got.ok and want.ok:
            self.opaque.bind(got.value, want.value)
        for observe in self.observers:
            observe(self, op, got)
        self.stats.operations += 1
        compare(op, self.opaque.translate_outcome(got), want, "the dying worker's claim",
                clause="MACH-CRASH-1")
        if own:
            worker.close()  # the worker is gone; it never finishes what it claimed
        if not got.ok:
            return
        if claim.died is not None:
            claim.died(self, op, got)
        # MACH-CRASH-1: the abandoned claim stays in force for everybody
        for retry in claim.retries(self, op, got):
            outcome = self.both(retry)
            if outcome.ok:
                raise Mismatch(
                    f"MACH-CRASH-1: {retry.render()} succeeded although a worker that then died "
                    f"already holds the claim it made with {op.render()}", "MACH-CRASH-1"
                )

    # -- MACH-CRASH-3 ---------------------------------------------------------------------

    @property
    def redos(self) -> list[Any]:
        return [r for m in self.plugins for r in m.redos]

    @precondition(lambda self: bool(self.redos))
    @rule(data=st.data())
    def worker_commits_and_dies(self, data: st.DataObject) -> None:
        self.stats.rules["worker_commits_and_dies"] += 1
        redo = data.draw(sampled(tuple(self.redos)), "exactly-once write")
        op = attrs.evolve(redo.make(self, data), at=self.clock.now())
        clauses = ("MACH-CRASH-3", *redo.clauses)
        worker = self.sut
        own = "reopen" in self.harness.features
        if own:
            worker = self.harness.open(self.location, self.clock)
        got = outcome_of(lambda: op(worker))  # committed; its acknowledgment is lost
        if own:
            worker.close()  # the worker is gone before it learned of its commit
        ref_op = self.opaque.translate_op(op)
        want = outcome_of(lambda: ref_op(self.ref))
        if got.ok and want.ok:
            self.opaque.bind(got.value, want.value)
        self.stats.operations += 1
        compare(op, self.opaque.translate_outcome(got), want, "the dying worker's commit", clause=clauses[0])
        # the recovery: the same request again, at a later instant
        self.clock.advance(milliseconds=1)
        retry = attrs.evolve(op, at=self.clock.now())
        again, expected = self.run_both(retry)
        self.stats.operations += 1
        if again != expected:
            raise Mismatch(f"MACH-CRASH-3: the retry of a commit whose acknowledgment was lost differs from "
                           f"the reference:\n  call:      {retry.render()}\n  backend:   {again.describe()}\n"
                           f"  reference: {expected.describe()}", *clauses)
        try:
            self.whole_state_views_agree()
        except Mismatch as exc:
            raise Mismatch(f"MACH-CRASH-3: after a commit and its retry the store differs from the reference "
                           f"after one commit:\n{exc}", *clauses) from None

    # -- MACH-CRASH-2 ---------------------------------------------------------------------

    @precondition(lambda self: bool(self.sweeps))
    @rule(data=st.data())
    def clock_jumps_and_sweeper_passes(self, data: st.DataObject) -> None:
        self.stats.rules["clock_jumps_and_sweeper_passes"] += 1
        sweep = data.draw(sampled(tuple(self.sweeps)), "sweeper")
        if data.draw(st.booleans(), "onto an instant"):
            # exactly onto a deadline (or another instant the rows use) or 1 ms either
            # side: the rows due at it are taken, those due 1 ms later are not
            self.clock.set(data.draw(instants_around(self.instants), "instant"))
        else:
            jump = data.draw(sampled(sweep.jumps), "jump")
            self.clock.set(max(self.instants + [self.clock.now()]) + jump)
        sweep.run(self)

    # -- MACH-DUR-1 -----------------------------------------------------------------------

    @precondition(lambda self: "restart" in self.faults)
    @rule()
    def restart(self) -> None:
        self.stats.rules["restart"] += 1
        self.sut = reopen_session(self.sut, lambda: self.harness.open(self.location, self.clock))
        try:
            self.whole_state_views_agree()
        except Mismatch as exc:
            raise Mismatch(f"MACH-DUR-1: after close and reopen the store lost or changed "
                           f"acknowledged data:\n{exc}", "MACH-DUR-1") from None

    # -- MACH-DUR-2 -----------------------------------------------------------------------

    @precondition(lambda self: "kill" in self.faults)
    @rule(data=st.data())
    def connection_killed_mid_call(self, data: st.DataObject) -> None:
        self.stats.rules["connection_killed_mid_call"] += 1
        writers = [n for m in self.plugins for n in m.rules if _is_write(n)]
        name = data.draw(sampled(sorted(writers)), "write")
        generate = next(m.rules[name] for m in self.plugins if name in m.rules)
        op = generate(self, data)
        if op is None:
            return
        arm = getattr(self.harness, "arm_connection_kill", None)
        if arm is None or data.draw(st.booleans(), "a racing kill"):
            self.call_with_connection_killed(op, lambda: self.harness.kill_connections(self.sut.store))
            return
        # the harness's kill points: the call itself sets the kill off, at a
        # drawn statement or COMMIT (or a drawn one of those that write: the
        # first is where most writes commit), before it is sent or after it
        # ran with its reply lost -- where it lands is part of the example, so
        # a finding replays (a racing kill lands where the threads' timing puts it)
        writes_only = data.draw(st.booleans(), "counting writes and COMMITs only")
        index = data.draw(st.integers(0, 1) | st.integers(0, KILL_POINTS - 1), "statement or COMMIT")
        lost_reply = data.draw(st.booleans(), "after it ran, its reply lost")
        arm(self.sut.store, index, lost_reply, writes_only)
        try:
            self.call_with_connection_killed(op, lambda: None)
        finally:
            self.harness.disarm_connection_kill(self.sut.store)

    @property
    def splits(self) -> dict[str, Any]:
        """The calls atomic only per part (:attr:`~.plugin.ClassMachines.splits`)."""
        return {k: v for m in self.plugins for k, v in m.splits.items()}

    def call_with_connection_killed(self, op: Any, kill: Callable[[], Any]) -> None:
        """MACH-DUR-2: run ``op`` on the backend in a thread while ``kill()``
        kills its connections (or arms a kill that the call itself sets off),
        then judge what the call did against the reference."""
        op = attrs.evolve(op, at=self.clock.now())
        box: list[Any] = []
        worker = threading.Thread(target=lambda: box.append(outcome_of(lambda: op(self.sut))))
        worker.start()
        kill()
        worker.join(60)
        if worker.is_alive():
            raise Mismatch(f"MACH-DUR-2: {op.render()} hung after its connection was killed",
                           "MACH-DUR-2")
        got = box[0]
        self.stats.operations += 1
        before = self.ref.medium.clone()
        ref_op = self.opaque.translate_op(op)
        want = outcome_of(lambda: ref_op(self.ref))
        if got.ok and want.ok:
            self.opaque.bind(got.value, want.value)
        got = self.opaque.translate_outcome(got)
        if got.kind == "crash":
            raise Mismatch(f"MACH-DUR-2: a killed connection surfaced as a non-contract "
                           f"exception from {op.render()}: {got.value}", "MACH-DUR-2")
        if got == want:
            return
        if got.kind == "error" and got.value == "StoreError":
            # the call failed: it must not have happened at all, or happened
            # whole -- or, for a call atomic only per part, as a prefix of its parts
            with_call = self.ref
            short = [reference_session(MemoryStore(self.clock, medium=m))
                     for m in self._in_doubt_states(ref_op, before)]
            saved = self._pairs()
            agreeing = []
            seen: dict[str, tuple[Op, Outcome]] = {}  # the backend's views, read once for every candidate
            for candidate in (*short, with_call):
                self.ref = candidate
                if self._views_agree_pairing_unseen(seen):
                    agreeing.append((candidate, self._pairs()))
                self._restore_pairs(saved)
            if not agreeing:
                self.ref = with_call
                raise Mismatch(f"MACH-DUR-2: after its connection was killed, {op.render()} "
                               "left a state that is neither before nor after the call"
                               + (" nor after a prefix of its parts" if ref_op.method in self.splits else ""),
                               "MACH-DUR-2")
            if len(agreeing) > 1:
                agreeing = self._repeat_to_tell(op, agreeing)
            self.ref, pairs = agreeing[0]
            self._restore_pairs(pairs)
            return
        compare(op, got, want, "a call whose connection was killed", clause="MACH-DUR-2")

    def _repeat_to_tell(self, op: Any, agreeing: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """The views agree with more than one state the failed call may have
        left (what it wrote is in none of them: a row under a parent no view
        lists), yet later calls would tell them apart.  The same call again
        tells now (a create refused as taken, a claim as claimed, a reclaim
        moving fewer rows): the states whose outcome of it is the backend's,
        and whose views then still agree, are kept; none kept is MACH-DUR-2
        broken."""
        op = attrs.evolve(op, at=self.clock.now())
        again = outcome_of(lambda: op(self.sut))
        self.stats.operations += 1
        kept = []
        expected = []
        seen: dict[str, tuple[Op, Outcome]] = {}  # the backend's views after the repeated call, read once
        for candidate, pairs in agreeing:
            self.ref = candidate
            self._restore_pairs(pairs)
            ref_op = self.opaque.translate_op(op)
            want = outcome_of(lambda: ref_op(candidate))
            if again.ok and want.ok:
                self.opaque.bind(again.value, want.value)
            expected.append(want.describe())
            if self.opaque.translate_outcome(again) == want and self._views_agree_pairing_unseen(seen):
                kept.append((candidate, self._pairs()))
        if not kept:
            raise Mismatch(f"MACH-DUR-2: after its connection was killed, {op.render()} left a state "
                           "whose views agree with before and after the call, but the same call again "
                           f"answered {again.describe()}, where those states answer "
                           f"{' or '.join(expected)}", "MACH-DUR-2")
        return kept

    def _pairs(self) -> tuple[dict[str, str], dict[str, str]]:
        return dict(self.opaque.to_ref), dict(self.opaque.to_sut)

    def _restore_pairs(self, pairs: tuple[dict[str, str], dict[str, str]]) -> None:
        self.opaque.to_ref, self.opaque.to_sut = dict(pairs[0]), dict(pairs[1])

    def _views_agree_pairing_unseen(self, seen: dict[str, tuple[Op, Outcome]]) -> bool:
        """Whether the whole-state views of both stores agree, once the
        opaque values they show that no outcome paired are paired: a write
        that committed although its call failed (the reply was lost with the
        connection) issued its values -- a claim's token -- to nobody.  The
        pairs are kept only when the views agree.

        ``seen`` holds the backend's raw view outcomes by name (filled on
        the first call): the caller weighs several reference states against
        one backend state, which calls nothing on the backend in between, so
        each backend view is read once, not twice per candidate."""
        saved = self._pairs()
        now = self.clock.now()
        for machines in self.plugins:
            for name, view in machines.views(self.view_contexts, self.known).items():
                op = attrs.evolve(view, at=now)
                got, want = self.backend_view(name, op, seen), outcome_of(lambda: op(self.ref))
                if got.ok and want.ok:
                    self.opaque.bind(got.value, want.value)
        try:
            self.whole_state_views_agree(seen=seen)
            return True
        except Mismatch:
            self._restore_pairs(saved)
            return False

    def _in_doubt_states(self, op: Any, before: MemoryMedium) -> list[MemoryMedium]:
        """The states short of the whole call that a failed call may leave
        (MACH-DUR-2): none of it; and for a call atomic only per part (a
        split, A2A-RCL-8: each row a reclaim moves is a step of its own), the
        state after each proper prefix of its parts, as the reference takes
        them one by one from ``before``."""
        states = [before]
        split = self.splits.get(op.method)
        if split is None:
            return states
        medium = before.clone()
        store = MemoryStore(self.clock, medium=medium)
        selected = outcome_of(lambda: split.first(store, op))
        if not selected.ok:
            return states  # refused: one step that wrote nothing
        partial = selected.raw
        while not split.done(partial):
            partial = split.next(store, op, partial)
            if not split.done(partial):
                states.append(medium.clone())
        return states


#: how many statements and COMMITs of a killed call the kill points cover
#: (the longest write of a class, a transaction of a few reads and writes and
#: its COMMIT, makes about six; a point past the call's end kills nothing, so
#: half the draws take one of the first two, where most writes end)
KILL_POINTS = 8


#: rules named so only read (every other rule writes, or may)
READ_RULES = ("get", "list", "count", "read")


def _is_write(rule_name: str) -> bool:
    """The crash machine's ordinary traffic: rules that write (or claim)."""
    return not rule_name.startswith(READ_RULES)


def has_faults(focus: str) -> bool:
    """Whether the machines of class ``focus`` (with the classes it requires)
    have any claim or sweep to fault."""
    return any(m.claims or m.sweeps or m.redos for m in plugins_for(closure({focus})))


def run_crash(
    harness: Harness | Callable[..., Any],
    profile: Profile | None = None,
    declared: Iterable[str] | None = None,
    faults: Iterable[str] = (),
    stats: MachineStats | None = None,
    focus: Iterable[str] | None = None,
) -> MachineStats:
    """Run the crash machine for each class of ``focus`` (default: every
    declared class); ``faults`` adds ``"restart"`` and/or ``"kill"`` to the
    claims and sweeps of the machine's classes."""
    from .runner import as_harness, declared_of, default_profile, limit_shrinking, run_machine, share

    harness = as_harness(harness)
    profile = profile or default_profile()
    limit_shrinking(profile.shrink_seconds)
    declared = frozenset(declared) if declared is not None else declared_of(harness)
    faults = frozenset(faults)
    unknown = faults - {"restart", "kill"}
    if unknown:
        raise ValueError(f"unknown faults {sorted(unknown)}")
    if "restart" in faults and "reopen" not in harness.features:
        raise ValueError(f"the {harness.name!r} harness cannot reopen storage")
    if "kill" in faults and "kill-connection" not in harness.features:
        raise ValueError(f"the {harness.name!r} harness cannot kill connections")
    stats = stats or MachineStats("crash")
    for machines in plugins_for(declared if focus is None else frozenset(focus) & declared):
        classes = machine_classes(machines.name, declared)
        machine = build_differential(harness, classes, stats, base=CrashMachineBase,
                                     view_every=profile.view_every, rule_filter=_is_write)
        machine.faults = faults
        skip = set()
        if "restart" not in faults:
            skip.add("restart")
        if "kill" not in faults:
            skip.add("connection_killed_mid_call")
        plugged = plugins_for(classes)
        if not any(m.claims for m in plugged):
            skip.add("worker_claims_and_dies")
        if not any(m.redos for m in plugged):
            skip.add("worker_commits_and_dies")
        if not any(m.sweeps for m in plugged):
            skip.add("clock_jumps_and_sweeper_passes")
        budget = share(profile.crash_examples, machines.weight)
        # a kill racing a call makes the machine's steps depend on timing
        run_machine(machine, machine_settings(budget, profile.crash_steps, profile), stats, skip,
                    nondeterministic="kill" in faults)
    return stats
