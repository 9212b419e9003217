"""The crash and fault machine (MACH-CRASH-1/2, MACH-DUR-1/2).

It is the differential machine with the rules a real deployment adds:

* ``worker_claims_and_dies`` — a worker (its own store object on the same
  storage where the harness can reopen, else the shared one) wins a claim and
  is abandoned without finishing; no second claim of that pause may succeed
  (MACH-CRASH-1);
* ``clock_jumps_and_sweeper_runs`` — the clock jumps past every deadline and a
  sweeper lists expired rows across scopes and sweep-claims each under its
  own scope; it must take exactly the due rows of paused runs (MACH-CRASH-2);
* ``restart`` (harness feature ``reopen``) — the store is closed and opened
  again on the same storage; everything acknowledged must still be there
  (MACH-DUR-1);
* ``connection_killed_mid_call`` (harness feature ``kill-connection``) — a
  write runs while the harness kills the store's server connections; it must
  have happened entirely or not at all, and the store keeps working
  (MACH-DUR-2).

Class ``gateway`` adds a machine of its own, :func:`run_gateway_crash`: the
gateway driver model of :mod:`.gateway` (a model gateway that accepts,
acknowledges the provider, runs jobs, records and sends replies) whose
holder is crashed between and during calls — through the harness's crash
hook, or as a real child process killed with SIGKILL — with the GW-CRASH
checks after every restart and a drain at the end.

Every rule still compares the backend with the reference, so a fault that
makes the backend drift is caught by the next comparison too.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import attrs
from typing import Any, Callable, Iterable

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from cortex_spec.context import Context
from cortex_spec.harness import Harness
from cortex_spec.profiles import Profile
from cortex_spec.reference import MemoryStore
from cortex_spec.scope import Scope
from cortex_spec.testing import FAR_FUTURE

from .classes import reference_session, reopen_session
from .differential import DifferentialMachineBase, Mismatch, build_differential, compare, machine_settings
from .ops import Op, outcome_of
from .stats import MachineStats
from .world import make_op

__all__ = ["run_crash", "run_gateway_crash", "CrashMachineBase"]

ZERO = Context(Scope())


class CrashMachineBase(DifferentialMachineBase):
    """Fault rules on top of the differential machine."""

    faults: frozenset[str] = frozenset()

    # -- MACH-CRASH-1 ---------------------------------------------------------------------

    @precondition(lambda self: "suspensions" in self.declared and bool(self.known.get("run")))
    @rule(data=st.data())
    def worker_claims_and_dies(self, data: st.DataObject) -> None:
        self.stats.rules["worker_claims_and_dies"] += 1
        run_id = data.draw(st.sampled_from(self.known["run"]), "run_id")
        c = data.draw(self.ctx_choice(), "ctx")
        worker = self.sut
        own = "reopen" in self.harness.features
        if own:
            worker = self.harness.open(self.location, self.clock)
        op = make_op("claim_suspension", c, run_id, keys=None)
        op = Op(op.method, op.ctx, op.args, self.clock.now())
        got = outcome_of(lambda: op(worker))
        want = outcome_of(lambda: op(self.ref))
        self.stats.operations += 1
        compare(op, got, want, "the dying worker's claim", clause="MACH-CRASH-1")
        if own:
            worker.close()  # the worker is gone; it never finishes its run
        if got.ok:
            # MACH-CRASH-1: the abandoned claim stays in force for everybody
            for retry in (
                make_op("claim_suspension", c, run_id, keys=None),
                make_op("claim_expired_suspension", c, run_id, FAR_FUTURE, keys=None),
            ):
                outcome = self.both(retry)
                if outcome.ok:
                    raise Mismatch(
                        f"MACH-CRASH-1: {retry.render()} succeeded although a worker that "
                        f"then died already holds the claim of run {run_id}", "MACH-CRASH-1"
                    )

    # -- MACH-CRASH-2 ---------------------------------------------------------------------

    @precondition(lambda self: "suspensions" in self.declared)
    @rule(jump=st.sampled_from([timedelta(seconds=2), timedelta(days=2)]))
    def clock_jumps_and_sweeper_runs(self, jump: timedelta) -> None:
        self.stats.rules["clock_jumps_and_sweeper_runs"] += 1
        latest = max(self.instants + [self.clock.now()])
        self.clock.set(latest + jump)
        now = self.clock.now()
        listed = self.both(make_op("list_expired_across_scopes", ZERO, now, 0, keys=None))
        assert listed.ok, "list_expired_across_scopes failed"
        for row in listed.raw:
            if row.expires_at is None or row.expires_at > now:
                raise Mismatch(f"MACH-CRASH-2: the sweeper listed {row.run_id} whose deadline "
                               f"{row.expires_at} is not due at {now}", "MACH-CRASH-2")
            claim = self.both(make_op("claim_expired_suspension", Context(row.scope), row.run_id,
                                      now, keys=None))
            run = outcome_of(lambda: self.ref.get_run(Context(row.scope), row.run_id))
            if claim.ok and not (run.ok and run.raw.state.value == "running"):
                raise Mismatch(f"MACH-CRASH-2: the sweep claim of {row.run_id} succeeded but "
                               "the run is not running afterwards", "MACH-CRASH-2")

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
        reads = ("get", "list", "count", "gw_read")
        writers = [n for m in self.modules for n in m.RULES if not n.startswith(reads)]
        name = data.draw(st.sampled_from(sorted(writers)), "write")
        generate = next(m.RULES[name] for m in self.modules if name in m.RULES)
        op = attrs.evolve(generate(self, data), at=self.clock.now())
        box: list[Any] = []
        worker = threading.Thread(target=lambda: box.append(outcome_of(lambda: op(self.sut))))
        worker.start()
        self.harness.kill_connections(self.sut.store)
        worker.join(60)
        if worker.is_alive():
            raise Mismatch(f"MACH-DUR-2: {op.render()} hung after its connection was killed",
                           "MACH-DUR-2")
        got = box[0]
        self.stats.operations += 1
        before = self.ref.medium.clone()
        want = outcome_of(lambda: op(self.ref))
        if got.kind == "crash":
            raise Mismatch(f"MACH-DUR-2: a killed connection surfaced as a non-contract "
                           f"exception from {op.render()}: {got.value}", "MACH-DUR-2")
        if got == want:
            return
        if got.kind == "error" and got.value == "StoreError":
            # the call failed: it must not have happened at all, or happened whole
            with_call = self.ref
            without = reference_session(MemoryStore(self.clock, medium=before))
            for candidate in (without, with_call):
                self.ref = candidate
                try:
                    self.whole_state_views_agree()
                    return
                except Mismatch:
                    continue
            raise Mismatch(f"MACH-DUR-2: after its connection was killed, {op.render()} "
                           "left a state that is neither before nor after the call", "MACH-DUR-2")
        compare(op, got, want, "a call whose connection was killed", clause="MACH-DUR-2")


def run_crash(
    harness: Harness | Callable[..., Any],
    profile: Profile | None = None,
    declared: Iterable[str] | None = None,
    faults: Iterable[str] = (),
    stats: MachineStats | None = None,
) -> MachineStats:
    """Run the crash machine; ``faults`` adds ``"restart"`` and/or ``"kill"``."""
    from .runner import as_harness, declared_of, default_profile, limit_shrinking, run_machine

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
    machine = build_differential(harness, declared, stats, base=CrashMachineBase,
                                 view_every=profile.view_every)
    machine.faults = faults
    skip = set()
    if "restart" not in faults:
        skip.add("restart")
    if "kill" not in faults:
        skip.add("connection_killed_mid_call")
    if "suspensions" not in declared:
        skip |= {"worker_claims_and_dies", "clock_jumps_and_sweeper_runs"}
    run_machine(machine, machine_settings(profile.crash_examples, profile.crash_steps),
                stats, skip)
    return stats



def run_gateway_crash(
    harness: Harness | Callable[..., Any],
    profile: Profile | None = None,
    stats: MachineStats | None = None,
    child: bool = False,
) -> MachineStats:
    """Run the gateway driver model (GW-CRASH-1..10).

    ``child=False`` crashes the holder through ``harness.crash_gateway``
    (feature ``gateway-crash``); ``child=True`` holds the location in a child
    process and kills it with SIGKILL, mid-call too (feature
    ``cross-process``).  Child processes are slow to start, so that variant
    runs a fifth of the profile's crash examples, with shorter histories.
    """
    from .gateway import build_driver
    from .runner import as_harness, default_profile, limit_shrinking, run_machine

    harness = as_harness(harness)
    profile = profile or default_profile()
    limit_shrinking(profile.shrink_seconds)
    stats = stats or MachineStats("gateway-crash-child" if child else "gateway-crash")
    feature = "cross-process" if child else "gateway-crash"
    if feature not in harness.features:
        raise ValueError(f"the {harness.name!r} harness does not provide {feature}")
    machine = build_driver(harness, stats, use_child=child)
    examples = max(4, profile.crash_examples // 5) if child else profile.crash_examples
    steps = min(profile.crash_steps, 20) if child else profile.crash_steps
    try:
        run_machine(machine, machine_settings(examples, steps), stats)
    finally:
        if child:
            from cortex_spec.gateway_child import kill_spares

            kill_spares()
    return stats
