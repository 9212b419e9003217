"""Certifies conformance class ``leases`` (spec: leases.md): holds, renewals
and takeovers with the expiry instant and one millisecond either side,
counted takeovers, leases dropped when a run leaves ``running``, the two
across-scope listings over every scope with pages and boundaries, the
notification marks that only move forward, and threaded races of holders,
renewals, updates and marks.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, Callable

import attrs
import pytest

from cortex_spec import Context, Lease, RunState, Scope, ids
from cortex_spec.clock import EPOCH
from cortex_spec.errors import (
    InvalidArgument,
    InvalidState,
    LeaseHeld,
    NotSuspended,
    RunNotFound,
)
from cortex_spec.runs import Run, RunFilter
from cortex_spec.testing import (
    clause, ctx, expect, expect_is, expect_op, expect_raises, expect_that, expect_true, race, Said, shorten,
    state_view,
)
from cortex_spec.runs import make_run
from cortex_spec.suspensions import make_suspension

from .examples import (
    FAR,
    HOME,
    OUTSIDERS_OF_HOME,
    PAST,
    XS_NOW,
    XS_SCOPES,
    ByIdOp,
    Examples,
    StateError,
    XsMethod,
    long_call,
    long_check,
    long_scope_of,
)
from .helpers import PLUS_0530, assert_scope

MS = timedelta(milliseconds=1)
#: owners: two is the least that tells a per-owner rule from a per-run one
OWNERS = ("worker-a", "worker-b", "worker-c", "worker-d")
#: owners that are not worker-a although a collation might say so: another
#: case, a trailing space, worker-a as a prefix
NEAR_OWNERS = ("Worker-A", "WORKER-A", "worker-a ", "worker-aa")
#: scopes of rows of the across-scope listings, look-alikes and a deep one among them
SCOPES = ("ws=w1", HOME, "ws=w10", "ws=w1x/proj=p1", "org=w1", "a=1/b=2/c=3")


def _running(store: Any, scope: str = HOME, **fields: Any) -> Run:
    return store.create_run(ctx(scope), make_run(RunState.RUNNING, **fields))


def _lease(owner: str, expires_at: datetime) -> Lease:
    return Lease(owner=owner, expires_at=expires_at)


def _ids(runs: list[Run]) -> list[str]:
    return [r.id for r in runs]


def _writable(run: Run) -> dict[str, Any]:
    """What a lease write must leave alone (LEASE-GEN-1)."""
    return {f: getattr(run, f) for f in ("state", "updated_at", "input", "output", "metadata", "step_count")}


# -- holding (LEASE-HOLD) ------------------------------------------------------------------


@pytest.mark.clause("LEASE-HOLD-1", "LEASE-HOLD-5", "LEASE-HOLD-6", "LEASE-GEN-1", "LEASE-RECLAIM-1")
def test_an_owner_takes_renews_shortens_and_lets_go(store, clock):
    run = _running(store)
    now = clock.now()
    store.hold_lease(ctx(HOME), run.id, _lease("worker-a", now + timedelta(seconds=30)))
    got = store.get_run(ctx(HOME), run.id)
    expect("LEASE-HOLD-1", got.lease, _lease("worker-a", now + timedelta(seconds=30)), "the lease after a first hold")
    expect("LEASE-HOLD-6", got.reclaim_count, 0, "reclaim_count after taking an unleased run")
    expect("LEASE-GEN-1", _writable(got), _writable(run), "the run's own fields after a hold")
    clock.advance(seconds=5)
    for expiry in (clock.now() + timedelta(minutes=5), clock.now() + MS, clock.now()):
        store.hold_lease(ctx(HOME), run.id, _lease("worker-a", expiry))
        expect("LEASE-HOLD-5", store.get_run(ctx(HOME), run.id).lease.expires_at, expiry,
               "the owner's own renewal, longer or shorter")
    # at its own expiry instant the lease has lapsed: the owner re-takes it, uncounted
    store.hold_lease(ctx(HOME), run.id, _lease("worker-a", clock.now() + timedelta(seconds=1)))
    got = store.get_run(ctx(HOME), run.id)
    expect("LEASE-HOLD-6", got.reclaim_count, 0, "reclaim_count after the owner re-took its lapsed lease")
    expect("LEASE-GEN-1", _writable(got), _writable(run), "the run's own fields after renewals")
    # from an ancestor scope too (SCOPE-BYID): the run is visible there
    store.hold_lease(ctx("ws=w1"), run.id, _lease("worker-a", clock.now() + timedelta(seconds=2)))
    expect("LEASE-HOLD-1", store.get_run(ctx(HOME), run.id).lease.expires_at, clock.now() + timedelta(seconds=2),
           "a renewal from the run's ancestor scope")


@pytest.mark.clause("LEASE-HOLD-2", "LEASE-HOLD-3", "LEASE-HOLD-4", "LEASE-EXCL-1")
def test_refused_holds_change_nothing(store, clock):
    run = _running(store)
    expiry = clock.now() + timedelta(seconds=10)
    store.hold_lease(ctx(HOME), run.id, _lease("worker-a", expiry))
    before = store.get_run(ctx(HOME), run.id)
    for outsider in OUTSIDERS_OF_HOME:
        expect_raises("LEASE-HOLD-2", RunNotFound,
                      lambda: store.hold_lease(ctx(outsider), run.id, _lease("worker-a", expiry)),
                      f"a hold from {outsider}, which cannot see the run")
    expect_raises("LEASE-HOLD-2", RunNotFound,
                  lambda: store.hold_lease(ctx(HOME), ids.new_id(ids.RUN), _lease("worker-a", expiry)),
                  "a hold of a run that does not exist")
    # one millisecond before the expiry the lease is live for everyone but its owner
    clock.advance(seconds=10)
    clock.set(expiry - MS)
    for owner in OWNERS[1:] + NEAR_OWNERS:
        expect_raises("LEASE-HOLD-4", LeaseHeld,
                      lambda: store.hold_lease(ctx(HOME), run.id, _lease(owner, expiry + timedelta(hours=1))),
                      f"{owner!r}'s hold 1 ms before worker-a's lease expires")
    expect("LEASE-EXCL-1", store.get_run(ctx(HOME), run.id), before, "the run after refused holds")
    for state in (RunState.CREATED, RunState.PAUSED, RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED):
        other = store.create_run(ctx(HOME), make_run(state))
        expect_raises("LEASE-HOLD-3", InvalidState,
                      lambda: store.hold_lease(ctx(HOME), other.id, _lease("worker-a", expiry)),
                      f"a hold of a {state.value} run")
        expect("LEASE-HOLD-3", store.get_run(ctx(HOME), other.id), other, f"the {state.value} run after the refusal")


@pytest.mark.clause("LEASE-HOLD-6", "LEASE-HOLD-1", "LEASE-HOLD-4", "LEASE-RECLAIM-1", "LEASE-GEN-1")
def test_a_lapsed_foreign_lease_is_taken_over_and_counted(store, clock):
    run = _running(store, "ws=w1/proj=p1/env=e1")
    where = ctx("ws=w1/proj=p1/env=e1")
    expiry = clock.now() + timedelta(seconds=10)
    store.hold_lease(where, run.id, _lease("worker-a", expiry))
    clock.set(expiry)  # the expiry instant belongs to the taker
    store.hold_lease(where, run.id, _lease("worker-b", expiry + timedelta(seconds=10)))
    got = store.get_run(where, run.id)
    expect("LEASE-HOLD-1", got.lease.owner, "worker-b", "the owner after a takeover at the expiry instant")
    expect("LEASE-HOLD-6", got.reclaim_count, 1, "reclaim_count after one takeover")
    expect("LEASE-GEN-1", _writable(got), _writable(run), "the run's own fields after a takeover")
    # the old owner comes back: the lease is worker-b's now, and live
    expect_raises("LEASE-HOLD-4", LeaseHeld,
                  lambda: store.hold_lease(where, run.id, _lease("worker-a", expiry + timedelta(minutes=1))),
                  "the previous owner's renewal after the takeover")
    store.hold_lease(where, run.id, _lease("worker-b", expiry + timedelta(seconds=20)))
    expect("LEASE-HOLD-6", store.get_run(where, run.id).reclaim_count, 1, "reclaim_count after the new owner renewed")
    # worker-b lets go (a lease at now), worker-c takes over: counted; then a takeover 1 ms late
    store.hold_lease(where, run.id, _lease("worker-b", clock.now()))
    store.hold_lease(where, run.id, _lease("worker-c", clock.now() + timedelta(seconds=5)))
    clock.set(clock.now() + timedelta(seconds=5) + MS)
    store.hold_lease(where, run.id, _lease("worker-d", clock.now() + timedelta(seconds=5)))
    got = store.get_run(where, run.id)
    expect("LEASE-RECLAIM-1", (got.lease.owner, got.reclaim_count), ("worker-d", 3),
           "owner and reclaim_count after three takeovers and two renewals")


@pytest.mark.clause("LEASE-HOLD-7", "LEASE-CONT-4", "LEASE-NOTIFY-4", "RSC-GEN-2")
def test_bad_arguments_are_refused_and_write_nothing(store, clock):
    run = _running(store)
    good = clock.now() + timedelta(seconds=1)
    naive = datetime(2030, 1, 1)
    for bad, what in ((_lease("", good), "an empty owner"), (_lease("x" * 256, good), "a 256-character owner"),
                      (_lease("worker-a", naive), "a naive expiry"), (("worker-a", good), "a tuple, not a Lease"),
                      (None, "no lease"), (_lease(7, good), "an owner that is not a str")):  # type: ignore[arg-type]
        expect_raises("LEASE-HOLD-7", InvalidArgument, lambda: store.hold_lease(ctx(HOME), run.id, bad), what)
    expect_raises("LEASE-HOLD-7", InvalidArgument, lambda: store.hold_lease(ctx(HOME), "arun", _lease("a", good)),
                  "a run id that is not a TypeID")
    expect("LEASE-HOLD-7", store.get_run(ctx(HOME), run.id), run, "the run after refused holds")
    expect_raises("LEASE-NOTIFY-4", InvalidArgument, lambda: store.mark_notified(ctx(HOME), run.id, naive),
                  "a naive mark")
    expect_raises("LEASE-CONT-4", InvalidArgument,
                  lambda: store.list_continuable_across_scopes(ctx(HOME), naive), "a naive notified_before")
    expect_raises("RSC-GEN-2", InvalidArgument, lambda: store.list_lapsed_across_scopes(ctx(HOME), naive),
                  "a naive now")
    for bad_limit in ("1", 1.0, True):
        expect_raises("LEASE-LAPSED-2", InvalidArgument,
                      lambda: store.list_lapsed_across_scopes(ctx(HOME), good, bad_limit), f"limit={bad_limit!r}")
    expect("LEASE-NOTIFY-4", store.get_run(ctx(HOME), run.id), run, "the run after refused marks")


# -- leases and the run's state (LEASE-CLEAR, LEASE-INV) ------------------------------------------


@pytest.mark.clause("LEASE-CLEAR-1", "LEASE-CLEAR-2", "LEASE-INV-1")
def test_a_run_leaving_running_drops_its_lease(store, clock):
    for target in (RunState.PAUSED, RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED, RunState.CREATED):
        run = _running(store)
        expiry = clock.now() + timedelta(minutes=1)
        store.hold_lease(ctx(HOME), run.id, _lease("worker-a", clock.now()))  # a lease that lapsed ...
        store.hold_lease(ctx(HOME), run.id, _lease("worker-b", expiry))  # ... taken over: count 1
        store.mark_notified(ctx(HOME), run.id, clock.now())
        held = store.get_run(ctx(HOME), run.id)
        # an update that stays running keeps the lease, whatever the object carries
        for carried in (None, _lease("intruder", expiry + timedelta(days=1))):
            kept = store.update_run(ctx(HOME), attrs.evolve(held, output="more", lease=carried))
            expect("LEASE-CLEAR-2", kept.lease, _lease("worker-b", expiry),
                   f"the lease after a running → running update carrying {carried}")
        left = store.update_run(ctx(HOME), attrs.evolve(held, state=target, lease=held.lease))
        expect("LEASE-CLEAR-1", (left.lease, left.reclaim_count, left.notified_at), (None, 1, clock.now()),
               f"lease, reclaim_count and notified_at returned by running → {target.value}")
        expect("LEASE-INV-1", store.get_run(ctx(HOME), run.id).lease, None, f"the stored lease of a {target.value} run")
        clock.advance(milliseconds=3)


@pytest.mark.clause("LEASE-CLEAR-3", "LEASE-INV-1")
def test_a_resumed_run_is_unleased(store, clock):
    for claim in ("resume", "sweep"):
        run = _running(store)
        store.hold_lease(ctx(HOME), run.id, _lease("worker-a", clock.now() + timedelta(hours=1)))
        paused = store.update_run(ctx(HOME), attrs.evolve(store.get_run(ctx(HOME), run.id), state=RunState.PAUSED))
        deadline = clock.now() + timedelta(seconds=1) if claim == "sweep" else None
        store.create_suspension(ctx(HOME), make_suspension(run.id, expires_at=deadline))
        if claim == "resume":
            store.claim_suspension(ctx(HOME), run.id)
        else:
            store.claim_expired_suspension(ctx(HOME), run.id, deadline)
        got = store.get_run(ctx(HOME), run.id)
        expect("LEASE-CLEAR-3", (got.state, got.lease), (RunState.RUNNING, None), f"the run after the {claim} claim")
        expect("LEASE-CLEAR-3", got.reclaim_count, paused.reclaim_count, "reclaim_count across the claim")


# -- the lapsed listing (LEASE-LAPSED) -------------------------------------------------------------


@pytest.mark.clause("LEASE-LAPSED-1", "LEASE-LAPSED-2", "LEASE-LAPSED-3", "SCOPE-XS-1", "SCOPE-XS-3")
def test_lapsed_runs_of_every_scope_by_expiry_then_id(store, clock):
    cutoff = clock.now() + timedelta(minutes=10)
    want: list[tuple[datetime, str]] = []
    for i, scope in enumerate(SCOPES):
        # per scope: expired 1 ms before, exactly at, and 1 ms after the cutoff, and two
        # runs sharing one expiry (the id decides)
        for offset in (-MS, timedelta(0), MS, -timedelta(seconds=i), -timedelta(seconds=i)):
            run = _running(store, scope)
            store.hold_lease(ctx(scope), run.id, _lease(OWNERS[i % 2], cutoff + offset))
            if offset <= timedelta(0):
                want.append((cutoff + offset, run.id))
        _running(store, scope)  # running, never leased: not lapsed
        paused = store.create_run(ctx(scope), make_run(RunState.PAUSED))
        store.mark_notified(ctx(scope), paused.id, clock.now())
    want.sort()
    order = [rid for _, rid in want]
    for caller in ("", "ws=w1", "zz=unrelated"):
        expect("LEASE-LAPSED-1", _ids(store.list_lapsed_across_scopes(ctx(caller), cutoff)), order,
               f"every lapsed run, by expiry then id, asked from {caller or 'the zero scope'}")
    for limit in (1, 2, len(order) - 1, len(order), len(order) + 5, 0, -1):
        want_page = order if limit <= 0 else order[:limit]
        expect("LEASE-LAPSED-2", _ids(store.list_lapsed_across_scopes(ctx(HOME), cutoff, limit)), want_page,
               f"limit={limit}")
    expect("LEASE-LAPSED-1", store.list_lapsed_across_scopes(ctx(HOME), cutoff - timedelta(days=1)), [],
           "nothing has lapsed a day before")
    got = store.list_lapsed_across_scopes(ctx(HOME), cutoff)
    with clause("LEASE-LAPSED-3", what="the listing wrote nothing (the runs read back as listed)"):
        for r in got:
            expect("LEASE-LAPSED-3", store.get_run(ctx(r.scope), r.id), r,
                   "store.get_run(ctx(r.scope), r.id)" + ": " + shorten(r.id))


# -- the continuable listing (LEASE-CONT) ----------------------------------------------------------


@pytest.mark.clause("LEASE-CONT-1", "LEASE-CONT-2", "LEASE-CONT-3", "LEASE-NOTIFY-5", "SCOPE-XS-1")
def test_continuable_runs_are_ready_or_lapsed_and_not_marked_since(store, clock):
    now = clock.now()
    before = now - timedelta(minutes=1)
    want = []
    #: what one more millisecond changes: deadlines at now + 1 ms pass, leases to now + 1 ms lapse
    ends, lapses = set(), set()
    for i, scope in enumerate(SCOPES):
        c = ctx(scope)
        cases = {
            # paused, with a suspension a resume could claim: ready
            "no deadline": (RunState.PAUSED, None, True),
            "deadline 1 ms after now": (RunState.PAUSED, now + MS, True),
            # the deadline instant belongs to the expiry sweeper
            "deadline at now": (RunState.PAUSED, now, False),
            "deadline 1 ms before now": (RunState.PAUSED, now - MS, False),
        }
        for what, (state, deadline, ready) in cases.items():
            run = store.create_run(c, make_run(state))
            # the suspension may live in another scope than the run: "in any scope"
            where = ctx(SCOPES[(i + 1) % len(SCOPES)]) if what == "no deadline" else c
            store.create_suspension(where, make_suspension(run.id, expires_at=deadline))
            if ready:
                want.append(run.id)
            if deadline == now + MS:
                ends.add(run.id)
        store.create_run(c, make_run(RunState.PAUSED))  # paused, no suspension: not ready
        lapsed = _running(store, scope)
        store.hold_lease(c, lapsed.id, _lease(OWNERS[i % 3], now))  # lapsed at now
        want.append(lapsed.id)
        held = _running(store, scope)
        store.hold_lease(c, held.id, _lease("worker-d", now + MS))  # live: not continuable
        lapses.add(held.id)
        _running(store, scope)  # never leased: not continuable
        # marks: before `before` stays in; at `before` or later is left out (LEASE-NOTIFY-5)
        for mark, kept in ((before - MS, True), (before, False), (before + MS, False)):
            marked = _running(store, scope)
            store.hold_lease(c, marked.id, _lease("worker-a", now - timedelta(seconds=1)))
            store.mark_notified(c, marked.id, mark)
            if kept:
                want.append(marked.id)
        done = store.create_run(c, make_run(RunState.COMPLETED))
        store.create_suspension(c, make_suspension(done.id))  # a suspension of a finished run: not ready
    want.sort()
    for caller in ("", HOME, "ws=w2"):
        expect("LEASE-CONT-1", _ids(store.list_continuable_across_scopes(ctx(caller), before)), want,
               f"continuable runs by id, asked from {caller or 'the zero scope'}")
    for limit in (1, 3, len(want), len(want) + 1, 0):
        expect("LEASE-CONT-2", _ids(store.list_continuable_across_scopes(ctx(HOME), before, limit)),
               want if limit <= 0 else want[:limit], f"limit={limit}")
    # the listing compares with clock now: a millisecond later the deadline-after-now runs are not ready
    clock.advance(milliseconds=1)
    expect("LEASE-CONT-1", _ids(store.list_continuable_across_scopes(ctx(HOME), before)),
           sorted((set(want) - ends) | lapses),
           "one millisecond later: deadlines at the old now + 1 ms passed, leases to it lapsed")
    with clause("LEASE-CONT-3", what="the listing wrote nothing"):
        expect("LEASE-CONT-3", store.list_continuable_across_scopes(ctx(HOME), before), store.list_continuable_across_scopes(
            ctx("ws=w1"), before), "store.list_continuable_across_scopes(ctx(HOME), before)")


# -- notification marks (LEASE-NOTIFY) ------------------------------------------------------------


@pytest.mark.clause("LEASE-NOTIFY-1", "LEASE-NOTIFY-2", "LEASE-NOTIFY-3", "LEASE-NOTIFY-5", "LEASE-GEN-1", "RSC-GEN-2")
def test_marks_only_move_forward(store, clock):
    t = clock.now()
    for state in RunState:
        run = store.create_run(ctx(HOME), make_run(state))
        store.mark_notified(ctx(HOME), run.id, t + timedelta(seconds=5))
        got = store.get_run(ctx(HOME), run.id)
        expect("LEASE-NOTIFY-3", got.notified_at, t + timedelta(seconds=5), f"the mark of a {state.value} run")
        expect("LEASE-GEN-1", _writable(got), _writable(run), f"the {state.value} run's own fields after a mark")
        for earlier in (t + timedelta(seconds=5), t + timedelta(seconds=5) - MS, t - timedelta(days=3)):
            store.mark_notified(ctx("ws=w1"), run.id, earlier)
            expect("LEASE-NOTIFY-1", store.get_run(ctx(HOME), run.id).notified_at, t + timedelta(seconds=5),
                   f"after a mark at {earlier.isoformat()}, not after the stored one")
        store.mark_notified(ctx(HOME), run.id, t + timedelta(seconds=5) + MS)
        expect("LEASE-NOTIFY-1", store.get_run(ctx(HOME), run.id).notified_at, t + timedelta(seconds=5) + MS,
               "after a mark 1 ms later")
    for outsider in OUTSIDERS_OF_HOME:
        expect_raises("LEASE-NOTIFY-2", RunNotFound, lambda: store.mark_notified(ctx(outsider), run.id, t),
                      f"a mark from {outsider}")
    expect_raises("LEASE-NOTIFY-2", RunNotFound, lambda: store.mark_notified(ctx(HOME), ids.new_id(ids.RUN), t),
                  "a mark of a run that does not exist")
    # LEASE-NOTIFY-5 at the boundary
    ready = store.create_run(ctx(HOME), make_run(RunState.PAUSED))
    store.create_suspension(ctx(HOME), make_suspension(ready.id))
    at = t + timedelta(minutes=1)
    store.mark_notified(ctx(HOME), ready.id, at)
    # notified_before is truncated to the millisecond before it is compared (RSC-GEN-2):
    # at + 0.5 ms and at + 1 ms - 1 us are the mark's own millisecond, in any offset
    within = (at + timedelta(microseconds=500), (at + MS - timedelta(microseconds=1)).astimezone(PLUS_0530))
    for nb, listed in ((at - MS, False), (at, False), *((t, False) for t in within), (at + MS, True)):
        expect("RSC-GEN-2" if nb in within else "LEASE-NOTIFY-5",
               ready.id in _ids(store.list_continuable_across_scopes(ctx(HOME), nb)), listed,
               f"a run marked at {at.isoformat()}, listed with notified_before {nb.isoformat()}")


# -- threaded races (LEASE-RACE) ------------------------------------------------------------------


@pytest.mark.clause("LEASE-HOLD-8", "LEASE-RACE-1", "LEASE-RACE-3", "LEASE-EXCL-1", "LEASE-RECLAIM-1")
def test_racing_holders_one_wins_and_a_takeover_counts_once(store, clock, profile):
    n = min(max(profile.race_threads, 2), len(OWNERS))
    for round_ in range(max(profile.race_rounds // 2, 1)):
        run = _running(store)
        lapsed_first = round_ % 2 == 1
        if lapsed_first:  # a dead worker's lease, lapsed at now
            store.hold_lease(ctx(HOME), run.id, _lease("dead-worker", clock.now()))
        expiry = clock.now() + timedelta(seconds=30)
        owners = OWNERS[:n]
        outcomes = race([functools.partial(store.hold_lease, ctx(HOME), run.id, _lease(o, expiry)) for o in owners])
        won = [o for o, out in zip(owners, outcomes) if out.ok]
        rule = "LEASE-RACE-3" if lapsed_first else "LEASE-RACE-1"
        expect(rule, len(won), 1, f"winners among {n} racing holders")
        with clause("LEASE-HOLD-8", what="every loser of the race"):
            expect_true("LEASE-HOLD-8", all(isinstance(out.error, LeaseHeld) for out in outcomes if not out.ok), "all(isinstance(out.error, LeaseHeld) for out in outcomes if not out.ok)" + ": " + shorten([
                repr(out.error) for out in outcomes if not out.ok]))
        got = store.get_run(ctx(HOME), run.id)
        expect("LEASE-EXCL-1", got.lease.owner, won[0], "the owner after the race")
        expect("LEASE-RECLAIM-1", got.reclaim_count, 1 if lapsed_first else 0, "reclaim_count after the race")


@pytest.mark.clause("LEASE-RACE-2", "LEASE-EXCL-1", "LEASE-RECLAIM-1")
def test_a_renewal_races_a_takeover_around_the_expiry(store, clock, profile):
    """1 ms before the expiry only the owner's renewal can win; at the expiry
    and 1 ms after exactly one of the two wins, and a foreign win counts."""
    for round_ in range(max(profile.race_rounds // 2, 1)):
        for offset in (-MS, timedelta(0), MS):
            run = _running(store)
            expiry = clock.now() + timedelta(seconds=10)
            store.hold_lease(ctx(HOME), run.id, _lease("worker-a", expiry))
            clock.set(expiry + offset)
            later = expiry + timedelta(seconds=10)
            calls = [functools.partial(store.hold_lease, ctx(HOME), run.id, _lease(owner, later))
                     for owner in ("worker-a", "worker-b")]
            flip = round_ % 2 == 1  # which thread the barrier lets go first varies too
            outcomes = race(calls[::-1] if flip else calls)
            renew, takeover = outcomes[::-1] if flip else outcomes
            got = store.get_run(ctx(HOME), run.id)
            where = f"clock now = expiry {offset.total_seconds() * 1000:+.0f} ms"
            for out in (renew, takeover):
                if not out.ok:
                    with clause("LEASE-RACE-2", what=f"the loser, {where}"):
                        expect_that("LEASE-RACE-2", isinstance(out.error, LeaseHeld),
                                    "out.error" + ": " + shorten(repr(out.error)), Said("an instance of LeaseHeld"),
                                    out.error)
            if offset < timedelta(0):
                expect("LEASE-RACE-2", (renew.ok, takeover.ok, got.lease.owner), (True, False, "worker-a"),
                       f"renewal against takeover, {where}")
            else:
                expect("LEASE-EXCL-1", sorted((renew.ok, takeover.ok)), [False, True],
                       f"winners of renewal against takeover, {where}")
                expect("LEASE-RACE-2", got.lease.owner, "worker-a" if renew.ok else "worker-b",
                       f"the owner after renewal against takeover, {where}")
            expect("LEASE-RECLAIM-1", got.reclaim_count, 1 if got.lease.owner == "worker-b" else 0,
                   f"reclaim_count, {where}")
            clock.set(clock.now() + timedelta(seconds=1))


@pytest.mark.clause("LEASE-RACE-4", "LEASE-INV-1", "LEASE-CLEAR-1", "LEASE-CLEAR-3")
def test_holds_racing_updates_and_claims_never_lease_a_stopped_run(store, clock, profile):
    for round_ in range(max(profile.race_rounds // 2, 1)):
        run = _running(store)
        target = (RunState.PAUSED, RunState.COMPLETED)[round_ % 2]
        calls = [functools.partial(store.hold_lease, ctx(HOME), run.id, _lease(o, clock.now() + timedelta(seconds=9)))
                 for o in OWNERS[:2]]
        calls.insert(round_ % 3, functools.partial(store.update_run, ctx(HOME), attrs.evolve(run, state=target)))
        outcomes = race(calls)
        for out in outcomes:
            if not out.ok:
                with clause("LEASE-RACE-4", what="a hold that lost"):
                    expect_that("LEASE-RACE-4", isinstance(out.error, (LeaseHeld, InvalidState)),
                                "out.error" + ": " + shorten(repr(out.error)),
                                Said("an instance of (LeaseHeld, InvalidState)"), out.error)
        got = store.get_run(ctx(HOME), run.id)
        expect("LEASE-INV-1", (got.state, got.lease), (target, None), f"the run after holds raced an update to {target.value}")
        # a paused run with a suspension: holds race the resume claim
        paused = store.create_run(ctx(HOME), make_run(RunState.PAUSED))
        store.create_suspension(ctx(HOME), make_suspension(paused.id))
        calls = [functools.partial(store.hold_lease, ctx(HOME), paused.id, _lease("worker-a", clock.now() + timedelta(seconds=9))),
                 functools.partial(store.claim_suspension, ctx(HOME), paused.id)]
        if round_ % 2:
            calls.reverse()
        outcomes = race(calls)
        hold = outcomes[0] if not round_ % 2 else outcomes[1]
        got = store.get_run(ctx(HOME), paused.id)
        with clause("LEASE-RACE-4", what="a hold racing the resume claim"):
            expect("LEASE-RACE-4", got.state, RunState.RUNNING, "got.state" + ": " + shorten(got.state))
            if hold.ok:  # ordered after the claim: the resumed run is leased
                expect_op("LEASE-RACE-4", got.lease, "is not", None, "got.lease" + ": " + shorten(got.lease))
                expect("LEASE-RACE-4", got.lease.owner, "worker-a", "got.lease.owner" + ": " + shorten(got.lease))
            else:  # ordered before: the run was paused
                expect_that("LEASE-RACE-4", isinstance(hold.error, InvalidState),
                            "hold.error" + ": " + shorten((hold, got.lease)), Said("an instance of InvalidState"),
                            hold.error)
                expect_is("LEASE-RACE-4", got.lease, None, "got.lease" + ": " + shorten((hold, got.lease)))
        expect_raises("LEASE-CLEAR-3", NotSuspended, lambda: store.claim_suspension(ctx(HOME), paused.id),
                      "a second claim of the resumed run")


@pytest.mark.clause("LEASE-RACE-5", "LEASE-NOTIFY-1")
def test_racing_marks_keep_the_latest(store, clock, profile):
    n = max(profile.race_threads, 2)
    for round_ in range(max(profile.race_rounds // 2, 1)):
        run = _running(store)
        instants = [clock.now() + timedelta(seconds=(i * 7) % n) + i * MS for i in range(n)]
        race([functools.partial(store.mark_notified, ctx(HOME), run.id, at) for at in instants])
        expect("LEASE-RACE-5", store.get_run(ctx(HOME), run.id).notified_at, max(instants),
               f"notified_at after {n} racing marks")


# ===========================================================================
# What this class gives the scope and common suites (conformance/examples.py)
# ===========================================================================

#: a lease long enough to outlive every test
_LONG = EPOCH + timedelta(days=1)


def _examples_seed(store: Any, fixture: Any) -> SimpleNamespace:
    """A running run at HOME, leased by worker-a (the one every call addresses)."""
    run = _running(store)
    store.hold_lease(ctx(HOME), run.id, _lease("worker-a", _LONG))
    return SimpleNamespace(lease_run=run.id, view={"run_ids": [run.id]})


def _setup_running(store: Any, c: Context) -> str:
    return store.create_run(c, make_run(RunState.RUNNING)).id


def _done_held(store: Any, c: Context, key: str) -> None:
    run = store.get_run(c, key)
    expect("LEASE-HOLD-1", run.lease, _lease("worker-b", _LONG), "the lease, read from the run's own scope")
    assert_scope(run.scope, c.scope, "the held run's scope")


def _done_marked(store: Any, c: Context, key: str) -> None:
    run = store.get_run(c, key)
    expect("LEASE-NOTIFY-1", run.notified_at, EPOCH, "the mark, read from the run's own scope")
    assert_scope(run.scope, c.scope, "the marked run's scope")


def _run_view(store: Any, key: str, scopes: Any) -> dict:
    return state_view(store, scopes, run_ids=[key])


def _byid(name: str, call: Callable[[Any, Context, str], Any], done: Callable[[Any, Context, str], None]) -> ByIdOp:
    return ByIdOp(name, "leases", RunNotFound, _setup_running, call, done,
                  missing=lambda: ids.new_id(ids.RUN), view=_run_view)


def _seed_xs_lapsed(store: Any) -> dict[str, Scope]:
    """Per scope a lapsed run (selected) and a live-leased one (not)."""
    expected = {}
    for i, sc in enumerate(XS_SCOPES):
        for expiry, selected in ((PAST + timedelta(milliseconds=i), True), (_LONG, False)):
            run = _running(store, sc)
            store.hold_lease(ctx(sc), run.id, _lease(f"worker-{i}", expiry))
            if selected:
                expected[run.id] = Scope.parse(sc)
    return expected


def _take_over(store: Any, row: Run) -> None:
    store.hold_lease(Context(row.scope), row.id, _lease("sweeper", _LONG))
    expect("LEASE-HOLD-6", store.get_run(Context(row.scope), row.id).reclaim_count, 1,
           "a lapsed run taken over under its own scope")


def _mark(store: Any, row: Run) -> None:
    store.mark_notified(Context(row.scope), row.id, EPOCH)


_NAIVE = datetime(2026, 1, 1)


def _xs(name: str, seed: Callable, call: Callable, act: Callable, bad_instant: Callable) -> XsMethod:
    return XsMethod(
        name, "leases", seed=seed, call=call, act=act,
        scoped_twin=lambda s, c: s.list_runs(c, RunFilter(state=RunState.RUNNING)),
        bad=(lambda s, c: bad_instant(s, c, _NAIVE), lambda s, c: bad_instant(s, c, None),
             lambda s, c: bad_instant(s, c, "2026-01-01T00:00:00+00:00"),
             lambda s, c: getattr(s, name)(c, XS_NOW, limit="1"),
             lambda s, c: getattr(s, name)(c, XS_NOW, limit=True)),
    )


_XS = {
    "list_lapsed_across_scopes": _xs(
        "list_lapsed_across_scopes", _seed_xs_lapsed, lambda s, c: s.list_lapsed_across_scopes(c, XS_NOW),
        _take_over, lambda s, c, v: s.list_lapsed_across_scopes(c, v)),
    # at the store's clock (EPOCH) the seeded lapsed runs are continuable until marked at EPOCH
    "list_continuable_across_scopes": _xs(
        "list_continuable_across_scopes", _seed_xs_lapsed,
        lambda s, c: s.list_continuable_across_scopes(c, EPOCH), _mark,
        lambda s, c, v: s.list_continuable_across_scopes(c, v)),
}


def _paused_leaseless(store: Any) -> tuple[Callable[[Context], Any], Callable[[Any], dict]]:
    run = store.create_run(ctx(HOME), make_run(RunState.PAUSED))
    return (lambda c: store.hold_lease(c, run.id, _lease("worker-a", _LONG)),
            lambda scopes: state_view(store, scopes, run_ids=[run.id]))


def _every_write(store: Any, row: str, callers: list[str]) -> tuple[SimpleNamespace, Callable[[], None]]:
    """hold_lease and mark_notified from each of ``callers`` on a run stored at ``row``."""
    run = _running(store, row)
    for i, caller in enumerate(callers):
        store.hold_lease(ctx(caller), run.id, _lease("worker-a", _LONG + timedelta(milliseconds=i)))
        store.mark_notified(ctx(caller), run.id, EPOCH + timedelta(milliseconds=i))

    def check() -> None:
        assert_scope(store.get_run(ctx(row), run.id).scope, Scope.parse(row), "the leased run's scope")
    return SimpleNamespace(run_ids=[run.id]), check


def _long_scopes(store: Any, c: Context, up: Context) -> None:
    """SCOPE-CANON-6: every writing method at the long scope ``c``, the rows
    read back from ``c`` and from its parent ``up`` (test_long_scopes.py)."""
    run = long_call("create_run", lambda: store.create_run(c, make_run(RunState.RUNNING)))
    long_call("hold_lease", lambda: store.hold_lease(c, run.id, Lease(owner="worker-a", expires_at=EPOCH)))
    long_scope_of("a held run", store.get_run(up, run.id), c.scope)
    lapsed = store.list_lapsed_across_scopes(Context(Scope()), FAR)
    long_check("list_lapsed_across_scopes", [r.scope for r in lapsed if r.id == run.id], [c.scope])
    long_call("mark_notified", lambda: store.mark_notified(c, run.id, EPOCH))


EXAMPLES = Examples(
    "leases",
    long_scopes=_long_scopes,
    seed=_examples_seed,
    good={
        "hold_lease": lambda s, c, w: s.hold_lease(c, w.lease_run, _lease("worker-a", _LONG)),
        "mark_notified": lambda s, c, w: s.mark_notified(c, w.lease_run, EPOCH),
        "list_lapsed_across_scopes": lambda s, c, w: s.list_lapsed_across_scopes(c, XS_NOW),
        "list_continuable_across_scopes": lambda s, c, w: s.list_continuable_across_scopes(c, EPOCH),
    },
    bad={
        "hold_lease": lambda s, c, w: s.hold_lease(c, w.lease_run, ("worker-a", _LONG)),
        "mark_notified": lambda s, c, w: s.mark_notified(c, w.lease_run, _NAIVE),
        "list_lapsed_across_scopes": lambda s, c, w: s.list_lapsed_across_scopes(c, _NAIVE),
        "list_continuable_across_scopes": lambda s, c, w: s.list_continuable_across_scopes(c, _NAIVE),
    },
    byid=(
        _byid("hold_lease", lambda s, c, k: s.hold_lease(c, k, _lease("worker-b", _LONG)), _done_held),
        _byid("mark_notified", lambda s, c, k: s.mark_notified(c, k, EPOCH), _done_marked),
    ),
    byid_methods=frozenset({"hold_lease", "mark_notified"}),
    xs=_XS,
    precedence=lambda s, w: [
        lambda c: s.hold_lease(c, w.lease_run, _lease("", _LONG)),
        lambda c: s.hold_lease(c, ids.new_id(ids.RUN), _lease("worker-a", _NAIVE)),
        lambda c: s.mark_notified(c, ids.new_id(ids.RUN), _NAIVE),
    ],
    state_errors=(StateError("hold_lease", "leases", _paused_leaseless, RunNotFound, InvalidState,
                             clauses=("LEASE-HOLD-3",)),),
    every_write=_every_write,
)
