"""Machine operations of class ``leases``: rules and views, a world of
running runs leased around the race instant (and the paused runs of the
suspensions world), the LEASE-RACE families, and the lease driver of
LEASE-CRASH-1 — workers that hold and renew leases and die holding them, a
sweeper that finds the lapsed runs and other workers that take them over.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import attrs
from hypothesis import strategies as st

from cortex_spec import ids
from cortex_spec.context import Context
from cortex_spec.runs import Lease, Run, RunState
from cortex_spec.scope import Scope

from .ops import Op
from .plugin import ClassMachines, Family, MachineTest, Race, World, storm
from .runs import AGENTS, run_key
from .world import ROLES, ctx_of, instants_around, make_op, sampled

NAME = "leases"

#: lease owners; "worker-a" holds the world's leases (the others take over)
OWNERS = ("worker-a", "worker-b", "worker-c")
MS = timedelta(milliseconds=1)
ZERO = Context(Scope())
#: offsets from the race instant of a world lease's expiry (None: unleased)
EXPIRY_OFFSETS: tuple[timedelta | None, ...] = (None, -timedelta(days=1), -MS, timedelta(0), MS,
                                                timedelta(seconds=5))
#: the offsets at which a foreign hold can still win (a census world)
OPEN_OFFSETS = tuple(o for o in EXPIRY_OFFSETS if o is None or o <= timedelta(0))


def _lease(data: Any, m: Any) -> Lease:
    return Lease(owner=data.draw(sampled(OWNERS), "owner"), expires_at=data.draw(m.instant_choice(), "expires"))


# -- differential rules -------------------------------------------------------------------------


def r_hold_lease(m: Any, data: Any) -> Op:
    run_id = data.draw(m.id_choice("run"), "run_id")
    lease = _lease(data, m)
    m.remember_instant(lease.expires_at)
    # the holder's principal is not the lease's owner: both vary, neither is written elsewhere
    return make_op("hold_lease", data.draw(m.ctx_choice(actors=True), "ctx"), run_id, lease, keys=[run_key(run_id)])


def r_mark_notified(m: Any, data: Any) -> Op:
    run_id = data.draw(m.id_choice("run"), "run_id")
    at = data.draw(m.instant_choice(), "at")
    m.remember_instant(at)  # later cut-offs (and clock steps) land on the mark and 1 ms either side
    return make_op("mark_notified", data.draw(m.ctx_choice(actors=True), "ctx"), run_id, at,
                   keys=[run_key(run_id)])


def r_list_lapsed(m: Any, data: Any) -> Op:
    return make_op("list_lapsed_across_scopes", data.draw(m.ctx_choice(zero=True), "ctx"),
                   data.draw(m.instant_choice(), "now"), data.draw(sampled((0, 1, 2, -1)), "limit"),
                   keys=None)


def r_list_continuable(m: Any, data: Any) -> Op:
    return make_op("list_continuable_across_scopes", data.draw(m.ctx_choice(zero=True), "ctx"),
                   data.draw(m.instant_choice(), "notified_before"),
                   data.draw(sampled((0, 1, 3)), "limit"), keys=None)


RULES = {
    "hold_lease": r_hold_lease,
    # holds are what this class is about: twice the weight of the rest
    "hold_lease_again": r_hold_lease,
    "mark_notified": r_mark_notified,
    "list_lapsed_across_scopes": r_list_lapsed,
    "list_continuable_across_scopes": r_list_continuable,
}


def views(ctxs: list, known: dict[str, list[str]]) -> dict[str, Op]:
    from cortex_spec.clock import EPOCH
    from cortex_spec.testing import FAR_FUTURE

    return {
        "list_lapsed_across_scopes": make_op("list_lapsed_across_scopes", ZERO, FAR_FUTURE, 0, keys=None),
        "list_continuable_across_scopes@far": make_op("list_continuable_across_scopes", ZERO, FAR_FUTURE, 0,
                                                      keys=None),
        "list_continuable_across_scopes@epoch": make_op("list_continuable_across_scopes", ZERO, EPOCH, 0,
                                                        keys=None),
    }


# -- concurrent scenarios ------------------------------------------------------------------------


@attrs.frozen
class LeaseRows:
    """The world's runs: ``running`` ones (moved to running in the setup,
    some leased to ``worker-a`` with an expiry around the race instant) and
    ``paused`` ones (with the suspensions world's suspensions)."""

    t0: datetime
    agent: str
    running: tuple[str, ...]
    paused: tuple[str, ...]
    expiries: dict[str, datetime | None] = attrs.field(hash=False)
    #: each run's agent (the runs world's: two agents alternate)
    agents: dict[str, str] = attrs.field(factory=dict, hash=False)

    def agent_of(self, run_id: str) -> str:
        return self.agents.get(run_id, self.agent)


def world(draw: Any, w: World, size: int, live: bool) -> LeaseRows:
    runs = w["runs"].runs
    offsets = OPEN_OFFSETS if live else EXPIRY_OFFSETS
    running = runs[::2]
    expiries = {}
    for run_id in running:
        off = draw(sampled(offsets))
        expiries[run_id] = None if off is None else w.t0 + off
    return LeaseRows(w.t0, w["runs"].agent, running, runs[1::2], expiries,
                     {run_id: w["runs"].agent_of(run_id) for run_id in runs})


def setup(w: World) -> list[Op]:
    rows: LeaseRows = w[NAME]
    exact = ctx_of(ROLES["exact"])
    out = []
    for run_id in rows.running:
        out.append(make_op("update_run", exact, Run(id=run_id, agent_id=rows.agent_of(run_id), state=RunState.RUNNING),
                           keys=[run_key(run_id)]))
        if rows.expiries[run_id] is not None:
            out.append(make_op("hold_lease", exact, run_id, Lease(owner="worker-a", expires_at=rows.expiries[run_id]),
                               keys=[run_key(run_id)]))
    return out


def _instants(rows: LeaseRows) -> st.SearchStrategy[datetime]:
    return instants_around([rows.t0] + [e for e in rows.expiries.values() if e is not None])


def _hold_op(run_id: str, role: str, owner: str, expires: datetime) -> Op:
    return make_op("hold_lease", ctx_of(ROLES[role]), run_id, Lease(owner=owner, expires_at=expires),
                   keys=[run_key(run_id)])


def racing_ops(w: World) -> list[Callable[[Any], Op]]:
    """Holds from every role and owner, marks, both listings, and updates
    that take a run out of ``running``."""
    rows: LeaseRows = w[NAME]
    every = rows.running + rows.paused
    roles = sampled(("exact", "exact", "ancestor", "sibling", "lookalike"))
    later = sampled((rows.t0 + timedelta(seconds=10), rows.t0 + MS, rows.t0))

    def hold(draw):
        return _hold_op(draw(sampled(every)), draw(roles), draw(sampled(OWNERS)), draw(later))

    def mark(draw):
        run_id = draw(sampled(every))
        return make_op("mark_notified", ctx_of(ROLES[draw(roles)]), run_id, draw(_instants(rows)),
                       keys=[run_key(run_id)])

    def listing(draw):
        # all rows, or the first one or two: a limit must count only the rows selected
        limit = draw(sampled((0, 1, 2)))
        if draw(st.booleans()):
            return make_op("list_lapsed_across_scopes", ctx_of(ROLES["other"]), draw(_instants(rows)), limit,
                           keys=None)
        return make_op("list_continuable_across_scopes", ZERO, draw(_instants(rows)), limit, keys=None)

    def stop(draw):
        run_id = draw(sampled(rows.running))
        state = draw(sampled((RunState.PAUSED, RunState.COMPLETED, RunState.RUNNING)))
        return make_op("update_run", ctx_of(ROLES["exact"]), Run(id=run_id, agent_id=rows.agent_of(run_id), state=state),
                       keys=[run_key(run_id)])

    return [hold, hold, mark, listing, stop]


def storm_ops(w: World) -> list[Callable[[Any], Op]]:
    """Every branch contends for the first running run: holds by any owner,
    the owner's renewal against takeovers, marks."""
    rows: LeaseRows = w[NAME]
    run_id = rows.running[0]
    visible = sampled(("exact", "exact", "ancestor"))

    def hold(draw):
        return _hold_op(run_id, draw(visible), draw(sampled(OWNERS)), rows.t0 + timedelta(seconds=10))

    def mark(draw):
        return make_op("mark_notified", ctx_of(ROLES[draw(visible)]), run_id, draw(_instants(rows)),
                       keys=[run_key(run_id)])

    return [storm(b, *c) for b, c in zip((hold, mark), STORM_CLAUSES, strict=True)]


#: the clauses of the storms above, in their order
STORM_CLAUSES = (("LEASE-RACE-1", "LEASE-HOLD-8"), ("LEASE-RACE-5",))


def _holders(draw: Any, w: World, declared: frozenset[str]) -> Race:
    """LEASE-RACE-1/3, LEASE-HOLD-8: 2–4 holders, each a different owner, on
    one running run that is unleased or whose lease has lapsed."""
    rows: LeaseRows = w[NAME]
    run_id = rows.running[0]
    offset = draw(sampled((None, -timedelta(days=1), -MS, timedelta(0))))
    w = w.with_rows(NAME, attrs.evolve(rows, expiries={**rows.expiries,
                                                       run_id: None if offset is None else rows.t0 + offset}))
    owners = draw(st.lists(sampled(("worker-b", "worker-c", "worker-d", "worker-e")), min_size=2,
                           max_size=4, unique=True))
    role = draw(sampled(("exact", "ancestor")))
    branches = tuple((_hold_op(run_id, role, o, rows.t0 + timedelta(seconds=10)),) for o in owners)
    return Race(("LEASE-RACE-1", "LEASE-RACE-3", "LEASE-HOLD-8", "LEASE-EXCL-1"), branches, world=w)


def _renewal(draw: Any, w: World, declared: frozenset[str]) -> Race:
    """LEASE-RACE-2: the owner's renewal against one or two foreign holds,
    the race instant at the lease's expiry or one millisecond either side."""
    rows: LeaseRows = w[NAME]
    run_id = rows.running[0]
    offset = draw(sampled((-MS, timedelta(0), MS)))
    w = w.with_rows(NAME, attrs.evolve(rows, expiries={**rows.expiries, run_id: rows.t0 - offset}))
    renew = (_hold_op(run_id, "exact", "worker-a", rows.t0 + timedelta(seconds=10)),)
    foreign = tuple((_hold_op(run_id, "exact", o, rows.t0 + timedelta(seconds=10)),)
                    for o in OWNERS[1:draw(st.integers(2, 3))])
    return Race(("LEASE-RACE-2", "LEASE-EXCL-1", "LEASE-HOLD-6"), (renew,) + foreign, world=w)


def _stops(draw: Any, w: World, declared: frozenset[str]) -> Race:
    """LEASE-RACE-4: holds against an update that takes the run out of
    ``running``, and against the resume claim of a paused run."""
    rows: LeaseRows = w[NAME]
    if rows.paused and draw(st.booleans()):
        run_id = rows.paused[0]
        claim = (make_op("claim_suspension", ctx_of(ROLES["exact"]), run_id, keys=[run_key(run_id)]),)
        holds = tuple((_hold_op(run_id, "exact", o, rows.t0 + timedelta(seconds=10)),)
                      for o in OWNERS[:draw(st.integers(1, 2))])
        return Race(("LEASE-RACE-4", "LEASE-CLEAR-3", "LEASE-INV-1"), (claim,) + holds)
    run_id = rows.running[0]
    state = draw(sampled((RunState.PAUSED, RunState.COMPLETED, RunState.FAILED)))
    stop = (make_op("update_run", ctx_of(ROLES["exact"]), Run(id=run_id, agent_id=rows.agent_of(run_id), state=state),
                    keys=[run_key(run_id)]),)
    holds = tuple((_hold_op(run_id, "exact", o, rows.t0 + timedelta(seconds=10)),)
                  for o in OWNERS[:draw(st.integers(1, 3))])
    return Race(("LEASE-RACE-4", "LEASE-CLEAR-1", "LEASE-INV-1"), (stop,) + holds)


def _marks(draw: Any, w: World, declared: frozenset[str]) -> Race:
    """LEASE-RACE-5: 2–4 marks of one run with different instants."""
    rows: LeaseRows = w[NAME]
    run_id = draw(sampled(rows.running + rows.paused))
    offsets = draw(st.lists(st.integers(-3, 3), min_size=2, max_size=4, unique=True))
    branches = tuple((make_op("mark_notified", ctx_of(ROLES["exact"]), run_id, rows.t0 + o * MS,
                              keys=[run_key(run_id)]),) for o in offsets)
    return Race(("LEASE-RACE-5", "LEASE-NOTIFY-1"), branches)


def _discovery(draw: Any, w: World, declared: frozenset[str]) -> Race:
    """LEASE-RACE-6: both listings while holds, takeovers, marks, claims and
    suspension deletes run."""
    rows: LeaseRows = w[NAME]
    writers: list[Op] = [_hold_op(rows.running[0], "exact", draw(sampled(OWNERS[1:])), rows.t0 + MS)]
    if rows.paused:
        paused = rows.paused[0]
        writers.append(draw(sampled((
            make_op("claim_suspension", ctx_of(ROLES["exact"]), paused, keys=[run_key(paused)]),
            make_op("delete_suspension", ctx_of(ROLES["exact"]), paused, keys=[run_key(paused)]),
            make_op("mark_notified", ctx_of(ROLES["exact"]), paused, rows.t0, keys=[run_key(paused)]),
        ))))
    listers = (make_op("list_lapsed_across_scopes", ZERO, rows.t0, 0, keys=None),
               make_op("list_continuable_across_scopes", ZERO, rows.t0 + MS, 0, keys=None))
    branches = tuple((op,) for op in writers) + tuple((op,) for op in listers[:draw(st.integers(1, 2))])
    return Race(("LEASE-RACE-6", "LEASE-LAPSED-1", "LEASE-CONT-1"), branches)


FAMILIES = (
    Family("holders", _holders, ("LEASE-RACE-1", "LEASE-RACE-3", "LEASE-HOLD-8", "LEASE-EXCL-1"), weight=0.4),
    Family("renewal-vs-takeover", _renewal, ("LEASE-RACE-2", "LEASE-EXCL-1", "LEASE-HOLD-6"), weight=0.4),
    Family("hold-vs-stop", _stops, ("LEASE-RACE-4", "LEASE-CLEAR-1", "LEASE-CLEAR-3", "LEASE-INV-1"),
           weight=0.3),
    Family("marks", _marks, ("LEASE-RACE-5", "LEASE-NOTIFY-1"), weight=0.2),
    Family("discovery", _discovery, ("LEASE-RACE-6", "LEASE-LAPSED-1", "LEASE-CONT-1"), weight=0.3),
)


# -- the lease driver (LEASE-CRASH-1) -------------------------------------------------------------
#
# A worker repeatedly holds (and so renews) the leases of the runs it is
# given, each run given to two workers; it writes one line before each call
# ("hold <run> <owner> <expires_ms> <t_before_ms>") and one after it
# ("held ..." / "refused ..." with <t_after_ms>).  Workers are child processes
# killed with SIGKILL where the harness offers a second process on the
# storage (feature ``kill-writer``), else threads of this process that stop.

LEASE_SECONDS = 30


def _ms(t: datetime) -> int:
    from cortex_spec.clock import to_millis

    return to_millis(t)


def lease_worker(store: Any, clock: Any, owner: str, runs: list[tuple[str, str]], out: Any,
                 stop: Callable[[], bool]) -> None:
    """Hold and renew the leases of ``runs`` (``(run_id, scope)`` pairs: each
    held under its own scope) until ``stop()``; one line before and after
    every call (see above).  Expiries only grow."""
    from cortex_spec.clock import from_millis
    from cortex_spec.errors import LeaseHeld

    last = 0
    while not stop():
        for run_id, scope in runs:
            c = ctx_of(scope)
            before = _ms(clock.now())
            expires = max(last + 1, before + LEASE_SECONDS * 1000)
            last = expires
            out(f"hold {run_id} {owner} {expires} {before}")
            try:
                store.hold_lease(c, run_id, Lease(owner=owner, expires_at=from_millis(expires)))
                word = "held"
            except LeaseHeld:
                word = "refused"
            out(f"{word} {run_id} {owner} {expires} {_ms(clock.now())}")


def lease_worker_main(spec_json: str) -> None:
    """A worker process: ``spec`` names the store (``target``, ``args``), the
    owner and the runs with their scopes; it runs until killed."""
    import sys

    from cortex_spec.clock import SystemClock
    from cortex_spec.harness import _import

    spec = json.loads(spec_json)
    store = _import(spec["target"])(*spec["args"])

    def out(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    lease_worker(store, SystemClock(), spec["owner"], [tuple(r) for r in spec["runs"]], out, lambda: False)


@attrs.frozen
class _Line:
    word: str
    run: str
    owner: str
    expires: int
    at: int


def _parse(lines: list[str]) -> list[_Line]:
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 5 and parts[0] in ("hold", "held", "refused"):
            out.append(_Line(parts[0], parts[1], parts[2], int(parts[3]), int(parts[4])))
    return out


def check_worker_phase(store: Any, log: list[_Line], runs: dict[str, str]) -> None:
    """While the workers lived: never two live owners (LEASE-EXCL-1), and the
    stored lease is the last acknowledged hold of the run or one begun after
    it (nothing acknowledged lost)."""
    from .differential import Mismatch

    def fail(what: str) -> None:
        raise Mismatch(f"LEASE-CRASH-1: {what}", "LEASE-CRASH-1")

    begun = {(x.run, x.owner, x.expires): x.at for x in log if x.word == "hold"}
    held = [x for x in log if x.word == "held"]
    for b in held:
        started = begun.get((b.run, b.owner, b.expires))
        if started is None:
            continue
        for a in held:
            # a's lease was certainly live during all of b's call: a returned before b began
            # and a's expiry is after b returned
            if a.run == b.run and a.owner != b.owner and a.at < started and a.expires > b.at:
                fail(f"run {b.run}: {b.owner}'s hold succeeded while {a.owner}'s lease "
                     f"(until {a.expires}) was live")
    for run_id, scope in runs.items():
        got = store.get_run(ctx_of(scope), run_id)
        acked = [x for x in held if x.run == run_id]
        if not acked:
            if got.lease is not None and (run_id, got.lease.owner, _ms(got.lease.expires_at)) not in begun:
                fail(f"run {run_id} has a lease nobody asked for: {got.lease}")
            continue
        last = max(acked, key=lambda x: x.expires)
        if got.lease is None:
            fail(f"run {run_id} lost its lease: {last.owner}'s hold until {last.expires} had returned")
        stored = (run_id, got.lease.owner, _ms(got.lease.expires_at))
        if stored not in begun or (got.lease.owner == last.owner and stored[2] < last.expires):
            fail(f"run {run_id}: the stored lease {got.lease} is neither the last acknowledged hold "
                 f"({last.owner} until {last.expires}) nor one begun after it")



def _workers_in_processes(harness: Any, location: Any, plan: list, wanted: int) -> list[str]:
    """Run the plan's workers as child processes on ``location`` until they
    wrote ``wanted`` lines (or a minute passed), then SIGKILL them all; every
    line they wrote."""
    import os
    import select
    import signal
    import time

    from cortex_spec.gateway_child import start_python

    target, args = harness.store_child(location)
    children = [start_python("cortex_spec.stateful.leases:lease_worker_main",
                             json.dumps({"target": target, "args": args, "owner": owner, "runs": mine}),
                             preload=[target.partition(":")[0]]) for owner, mine in plan]
    lines: list[str] = []
    deadline = time.monotonic() + 60
    pipes = {ch.stdout: ch for ch in children}
    while len(lines) < wanted and time.monotonic() < deadline and pipes:
        ready, _, _ = select.select(list(pipes), [], [], 1.0)
        for pipe in ready:
            line = pipe.readline()
            if line:
                lines.append(line.strip())
                continue
            child = pipes.pop(pipe)
            child.wait()
            if child.returncode:
                raise AssertionError(f"a lease worker failed: {child.stderr.read()[-2000:]}")
    for child in children:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait()
        lines += [line.strip() for line in child.stdout.read().splitlines()]
    return lines


def _workers_in_threads(store: Any, clock: Any, plan: list, wanted: int) -> list[str]:
    """Run the plan's workers as threads on ``store`` until they wrote
    ``wanted`` lines, then stop them (each after the call it is in)."""
    lines: list[str] = []
    lock = threading.Lock()
    stopped = threading.Event()

    def out(line: str) -> None:
        with lock:
            lines.append(line)
            if len(lines) >= wanted:
                stopped.set()

    threads = [threading.Thread(target=lease_worker, args=(store, clock, owner, mine, out, stopped.is_set),
                                daemon=True) for owner, mine in plan]
    for t in threads:
        t.start()
    stopped.wait(60)
    stopped.set()
    for t in threads:
        t.join(60)
    return lines


def run_lease_driver(harness: Any, profile: Any, declared: frozenset[str], stats: Any) -> None:
    """LEASE-CRASH-1 (see the module docstring)."""
    import random

    from cortex_spec.clock import ManualClock, SystemClock, from_millis, truncate_ms
    from cortex_spec.errors import LeaseHeld
    from cortex_spec.testing import race

    from .differential import Mismatch
    from .runner import session_seed

    rng = random.Random(session_seed())
    processes = "kill-writer" in harness.features
    stats.rules["killed processes" if processes else "stopped threads"] += 0
    scopes = (ROLES["exact"], ROLES["sibling"], ROLES["lookalike"])
    for round_ in range(max(2, profile.crash_examples // 7)):
        location = harness.new_location()
        clock = ManualClock(truncate_ms(SystemClock().now()))
        store = harness.open(location, clock)
        try:
            runs: dict[str, str] = {}
            for i in range(rng.randint(2, 5)):
                run_id = ids.new_id(ids.RUN)
                runs[run_id] = scopes[i % len(scopes)]
                store.create_run(ctx_of(runs[run_id]), Run(id=run_id, agent_id=AGENTS[i % 2], state=RunState.RUNNING))
            # two workers, each given every run (in its own order): they contend for each
            pairs = list(runs.items())
            plan = [(f"w{round_}-{j}", pairs if j == 0 else pairs[::-1]) for j in range(2)]
            wanted = rng.randint(4, 60)
            if processes:
                store.close()
                lines = _workers_in_processes(harness, location, plan, wanted)
                store = harness.open(location, clock)
                stats.rules["killed processes"] += len(plan)
            else:
                lines = _workers_in_threads(store, clock, plan, wanted)
                stats.rules["stopped threads"] += len(plan)
            log = _parse(lines)
            stats.examples += 1
            stats.histories += 1
            stats.operations += len(log) // 2
            check_worker_phase(store, log, runs)

            def fail(what: str) -> None:
                raise Mismatch(f"LEASE-CRASH-1: {what}", "LEASE-CRASH-1")

            # the clock moves past every expiry anyone asked for; a sweeper lists the lapsed runs
            leased = {r: store.get_run(ctx_of(s), r) for r, s in runs.items()}
            leased = {r: run for r, run in leased.items() if run.lease is not None}
            latest = max([x.expires for x in log] + [_ms(clock.now())])
            clock.set(from_millis(latest) + MS)
            listed = store.list_lapsed_across_scopes(ZERO, clock.now())
            listed_ids = [r.id for r in listed if r.id in runs]
            want = sorted(leased, key=lambda r: (leased[r].lease.expires_at, r))
            if listed_ids != want:
                fail(f"past every expiry the sweeper listed {listed_ids}, not the leased runs {want} by expiry")
            # other workers take each one over: exactly one of them, counted once
            for run in listed:
                if run.id not in runs:
                    continue
                takers = [f"taker-{round_}-{i}" for i in range(3)]
                outcomes = race([functools.partial(store.hold_lease, Context(run.scope), run.id,
                                                   Lease(owner=t, expires_at=clock.now() + timedelta(minutes=5)))
                                 for t in takers])
                won = [t for t, o in zip(takers, outcomes) if o.ok]
                lost = [o.error for o in outcomes if not o.ok]
                if len(won) != 1 or not all(isinstance(e, LeaseHeld) for e in lost):
                    fail(f"the takeover of {run.id}: winners {won}, losers {lost!r}")
                got = store.get_run(Context(run.scope), run.id)
                if (got.lease.owner, got.reclaim_count) != (won[0], run.reclaim_count + 1):
                    fail(f"after {won[0]} took {run.id} over: owner {got.lease.owner}, reclaim_count "
                         f"{got.reclaim_count} (was {run.reclaim_count})")
                stats.rules["takeover"] += 1
            # restart: every acknowledged takeover is still there
            after = {r: store.get_run(ctx_of(s), r) for r, s in runs.items()}
            if harness.reopenable:
                store.close()
                store = harness.open(location, clock)
                stats.rules["reopen"] += 1
                for r, s in runs.items():
                    again = store.get_run(ctx_of(s), r)
                    if (again.lease, again.reclaim_count) != (after[r].lease, after[r].reclaim_count):
                        fail(f"after a restart run {r} reads {again.lease}/{again.reclaim_count}, "
                             f"not {after[r].lease}/{after[r].reclaim_count}")
            if [r.id for r in store.list_lapsed_across_scopes(ZERO, clock.now()) if r.id in runs]:
                fail("runs just taken over are listed as lapsed")
        finally:
            store.close()
            harness.discard(location)


MACHINES = ClassMachines(
    name=NAME,
    rules=RULES,
    views=views,
    world=world,
    setup=setup,
    racing_ops=racing_ops,
    storm_ops=storm_ops,
    families=FAMILIES,
    race_clauses=tuple(c for clauses in STORM_CLAUSES for c in clauses),
    tests=(MachineTest("lease-driver", ("LEASE-CRASH-1", "LEASE-EXCL-1", "LEASE-HOLD-6", "LEASE-LAPSED-1"),
                       run_lease_driver, machine="leases-driver", cost=8.0),),
    weight=0.6,
    cost=3.0,
)
