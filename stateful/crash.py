"""The crash and fault machine (MACH-CRASH-1/2, MACH-DUR-1/2).

It is the differential machine with the rules a real deployment adds:

* ``worker_claims_and_dies`` — a worker (its own store object on the same
  storage where the harness can reopen, else the shared one) wins a claim and
  is abandoned without finishing; no second claim of that pause may succeed
  (MACH-CRASH-1);
* ``clock_jumps_and_sweeper_runs`` — the clock jumps past every deadline and a
  sweeper lists expired rows across scopes and sweep-claims each under its
  own scope; it must take exactly the due rows of paused runs (MACH-CRASH-2);
* ``delivery_worker_claims_and_dies`` (class ``a2a``) — a carrier claims a
  delivery and is abandoned; no second claim of the row succeeds while that
  claim stands (MACH-CRASH-1);
* ``clock_jumps_and_reclaim_runs`` (class ``a2a``) — the clock jumps past the
  claim TTL and the dispatcher reclaims stale deliveries in every partition;
  it moves exactly what the reference moves, and a dead carrier's token no
  longer finishes a reclaimed row (MACH-CRASH-2);
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
makes the backend drift is caught by the next comparison too.  The ordinary
traffic between faults is the *write* rules of the declared classes (reads
gain nothing here: the whole-state views after every step read everything,
and the differential machine runs every read rule anyway).
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, Callable, Iterable

import attrs
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
from .ops import outcome_of
from .stats import MachineStats
from .world import make_op

__all__ = ["run_crash", "run_gateway_crash", "CrashMachineBase"]

ZERO = Context(Scope())


class CrashMachineBase(DifferentialMachineBase):
    """Fault rules on top of the differential machine."""

    faults: frozenset[str] = frozenset()

    def __init__(self) -> None:
        super().__init__()
        #: (delivery id, its context, token) of carriers that claimed and died
        self.dead_carriers: list[tuple[str, Context, str]] = []

    # -- MACH-CRASH-1 ---------------------------------------------------------------------

    @precondition(lambda self: "suspensions" in self.declared)
    @rule(data=st.data())
    def worker_claims_and_dies(self, data: st.DataObject) -> None:
        self.stats.rules["worker_claims_and_dies"] += 1
        c = data.draw(self.ctx_choice(), "ctx")
        if not self.known.get("run"):
            # nothing paused yet: pause a run here first, so the fault always has a target
            self._pause_a_run(data.draw(self.ctx_choice(), "where"))
        run_id = data.draw(st.sampled_from(self.known["run"]), "run_id")
        worker = self.sut
        own = "reopen" in self.harness.features
        if own:
            worker = self.harness.open(self.location, self.clock)
        op = make_op("claim_suspension", c, run_id, keys=None)
        op = attrs.evolve(op, at=self.clock.now())
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

    def _pause_a_run(self, c: Context) -> None:
        from cortex_spec.runs import Run, RunState
        from cortex_spec.suspensions import Suspension

        from .runs import AGENTS
        from .world import fixed_id

        run_id = fixed_id("arun", 50_000 + self.next_id)
        sus_id = fixed_id("sus", 50_000 + self.next_id)
        self.next_id += 1
        self.remember("run", run_id)
        self.both(make_op("create_run", c, Run(id=run_id, agent_id=AGENTS[0], state=RunState.PAUSED), keys=None))
        self.both(make_op("create_suspension", c, Suspension(id=sus_id, run_id=run_id), keys=None))

    # -- MACH-CRASH-1/2 for deliveries (class a2a) --------------------------------------------

    def _delivery_homes(self) -> list[tuple[str, Context]]:
        return [(key, c) for kind, key, c in self.known.get("a2a-home", []) if kind == "delivery"]

    @precondition(lambda self: "a2a" in self.declared)
    @rule(data=st.data())
    def delivery_worker_claims_and_dies(self, data: st.DataObject) -> None:
        self.stats.rules["delivery_worker_claims_and_dies"] += 1
        if not self._delivery_homes() or data.draw(st.booleans(), "another delivery"):
            from cortex_spec.a2a import Address, Delivery

            from .world import fixed_id

            fresh = fixed_id("dlv", 50_000 + self.next_id)
            self.next_id += 1
            self.remember("delivery", fresh)
            self.both(make_op("create_delivery", data.draw(self.ctx_choice(), "where"),
                              Delivery(id=fresh, message_id=fixed_id("msg", 1), receiver=Address("worker")),
                              keys=None))
        delivery_id, c = data.draw(st.sampled_from(self._delivery_homes()), "delivery")
        worker = self.sut
        own = "reopen" in self.harness.features
        if own:
            worker = self.harness.open(self.location, self.clock)
        op = attrs.evolve(make_op("claim_delivery", c, delivery_id, keys=None), at=self.clock.now())
        got = outcome_of(lambda: op(worker))
        want = outcome_of(lambda: op(self.ref))
        if got.ok and want.ok:
            self.opaque.bind(got.value, want.value)
        for observe in self.observers:
            observe(self, op, got)
        self.stats.operations += 1
        compare(op, self.opaque.translate_outcome(got), want, "the dying carrier's claim",
                clause="MACH-CRASH-1")
        if own:
            worker.close()  # the carrier is gone; it never finishes the delivery
        if got.ok:
            self.dead_carriers.append((delivery_id, c, got.raw.claim_token))
            again = self.both(make_op("claim_delivery", c, delivery_id, keys=None))
            if again.ok:
                raise Mismatch(f"MACH-CRASH-1: a second claim of delivery {delivery_id} succeeded "
                               "while the claim of a carrier that died still stands", "MACH-CRASH-1")

    @precondition(lambda self: "a2a" in self.declared)
    @rule(jump=st.sampled_from([timedelta(minutes=16), timedelta(days=1)]))
    def clock_jumps_and_reclaim_runs(self, jump: timedelta) -> None:
        self.stats.rules["clock_jumps_and_reclaim_runs"] += 1
        self.clock.set(max(self.instants + [self.clock.now()]) + jump)
        cutoff = self.clock.now() - timedelta(minutes=15)
        for partition in ("", "orch-1"):
            op = attrs.evolve(make_op("reclaim_stale_deliveries", Context(Scope(), partition), cutoff, 0,
                                      keys=None), at=self.clock.now())
            got, want = self.run_both(op)
            self.stats.operations += 1
            compare(op, got, want, "the reclaim after the clock jumped", clause="MACH-CRASH-2")
        for delivery_id, c, token in self.dead_carriers:
            row = self.both(make_op("get_delivery", c, delivery_id, keys=None))
            if row.ok and row.raw.claim_token != token:  # reclaimed (and maybe claimed again)
                late = attrs.evolve(make_op("finish_delivery", c, delivery_id, token, "delivered", keys=None),
                                    at=self.clock.now())
                got, want = self.run_both(late)
                compare(late, got, want, "a dead carrier's late finish", clause="MACH-CRASH-2")
                if got.ok:
                    raise Mismatch(f"MACH-CRASH-2: the token of a reclaimed claim still finished "
                                   f"delivery {delivery_id}", "MACH-CRASH-2")

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
        op = generate(self, data)
        if op is None:
            return
        op = attrs.evolve(op, at=self.clock.now())
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


def _is_write(rule_name: str) -> bool:
    """The crash machine's ordinary traffic: rules that write (or claim)."""
    return not rule_name.startswith(("get", "list", "count"))


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
                                 view_every=profile.view_every, rule_filter=_is_write)
    machine.faults = faults
    skip = set()
    if "restart" not in faults:
        skip.add("restart")
    if "kill" not in faults:
        skip.add("connection_killed_mid_call")
    if "suspensions" not in declared:
        skip |= {"worker_claims_and_dies", "clock_jumps_and_sweeper_runs"}
    if "a2a" not in declared:
        skip |= {"delivery_worker_claims_and_dies", "clock_jumps_and_reclaim_runs"}
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
