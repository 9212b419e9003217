"""Certifies class `a2a_discovery` (a2a_discovery.md): queue discovery,
stale reclaim and ask expiry at exactly one scope — against rows of the
exact scope, its ancestor, a descendant, a sibling, look-alike scopes and
another partition — each selecting what its across-scope twin selects,
filtered to the exact scope, in the twin's order and page; the deadline
and staleness boundaries; the zero scope and bad arguments refused first.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from cortex_spec import Context, ids
from cortex_spec.errors import InvalidArgument, NoScope
from cortex_spec.testing import (
    FAR_FUTURE, clause, ctx, expect, expect_raises, expect_result, expect_true, shorten, state_view,
)
from cortex_spec.a2a import make_ask, make_delivery

from .a2a_world import HOME, MS
from .examples import FAR, PAST, Examples, Fixture, long_call, long_check

PLACES = [ctx(HOME), ctx("ws=w1"), ctx("ws=w1/proj=p1/env=e1"), ctx("ws=w1/proj=p2"), ctx("ws=w10/proj=p1"),
          ctx("ws=w1/proj=p10"), ctx(HOME, "orch-1")]


def _mine(c: Context, rows: list) -> list:
    return [r for r in rows if r.scope == c.scope and r.partition == c.partition]


def _populate(store: Any, clock: Any) -> dict[str, Any]:
    """At every place: two queued deliveries, a stale claim (two seconds
    old), a fresh claim, a bound stale claim, an overdue ask, an ask due
    exactly now and one due a millisecond later."""
    out: dict[str, Any] = {"stale": [], "deliveries": [], "asks": []}
    t0 = clock.now()
    for c in PLACES:
        clock.set(t0 - timedelta(seconds=2))
        stale = store.claim_delivery(c, store.create_delivery(c, make_delivery()).id)
        bound = store.claim_delivery(c, store.create_delivery(c, make_delivery()).id)
        store.bind_delivery_run(c, bound.id, bound.claim_token, ids.new_id(ids.RUN))
        clock.set(t0)
        queued = [store.create_delivery(c, make_delivery()).id for _ in range(2)]
        fresh = store.claim_delivery(c, store.create_delivery(c, make_delivery()).id)
        out["stale"].append(stale)
        out["deliveries"] += [stale.id, bound.id, fresh.id, *queued]
        for offset in (-timedelta(days=1), timedelta(0), MS):
            out["asks"].append(store.create_pending_ask(c, make_ask(deadline=t0 + offset)).reply_with)
    return out


def _view(store: Any, rows: dict[str, Any]) -> dict:
    return state_view(store, PLACES, delivery_ids=rows["deliveries"], reply_withs=rows["asks"], classes={"a2a"})


# -- EXAMPLES for the cross-class suites ------------------------------------------------------


def _seed(store: Any, fixture: Fixture) -> SimpleNamespace:
    c = ctx(HOME)
    d = store.create_delivery(c, make_delivery())
    a = store.create_pending_ask(c, make_ask(deadline=FAR_FUTURE - timedelta(days=1)))
    return SimpleNamespace(view={"delivery_ids": [d.id], "reply_withs": [a.reply_with]})


def _long_scopes(store: Any, c: Context, up: Context) -> None:
    """SCOPE-CANON-6: every writing method at the long scope ``c``, the rows
    read back from ``c`` and from its parent ``up`` (test_long_scopes.py)."""
    delivery = long_call("create_delivery", lambda: store.create_delivery(c, make_delivery()))
    long_check("list_queued_deliveries_in_scope",
               [d.id for d in store.list_queued_deliveries_in_scope(c)], [delivery.id])
    long_call("reclaim_stale_deliveries_in_scope", lambda: store.reclaim_stale_deliveries_in_scope(c, FAR))
    ask = long_call("create_pending_ask", lambda: store.create_pending_ask(c, make_ask(deadline=PAST)))
    long_check("list_expired_asks_in_scope",
               [a.reply_with for a in store.list_expired_asks_in_scope(c, FAR)], [ask.reply_with])


EXAMPLES = Examples(
    "a2a_discovery",
    long_scopes=_long_scopes,
    seed=_seed,
    good={
        "list_queued_deliveries_in_scope": lambda s, c, w: s.list_queued_deliveries_in_scope(c),
        "reclaim_stale_deliveries_in_scope": lambda s, c, w: s.reclaim_stale_deliveries_in_scope(c, FAR_FUTURE),
        "list_expired_asks_in_scope": lambda s, c, w: s.list_expired_asks_in_scope(c, FAR_FUTURE),
    },
    bad={
        "list_queued_deliveries_in_scope": lambda s, c, w: s.list_queued_deliveries_in_scope(c, limit="1"),
        "reclaim_stale_deliveries_in_scope": lambda s, c, w: s.reclaim_stale_deliveries_in_scope(c, "soon"),
        "list_expired_asks_in_scope": lambda s, c, w: s.list_expired_asks_in_scope(c, FAR_FUTURE, limit=1.5),
    },
)


@pytest.mark.clause("A2A-ROUTE-2", "A2A-ROUTE-4", "A2A-QUEUE-1", "A2A-ASK-8", "A2A-ASK-9")
def test_the_lists_select_what_their_twins_select_at_exactly_the_scope(store, clock):
    rows = _populate(store, clock)
    before = _view(store, rows)
    now = clock.now()
    for c in PLACES:
        where = f"at {c.scope.canonical()} partition {c.partition!r}"
        twin = _mine(c, store.list_queued_deliveries(Context.of("", c.partition)))
        for limit in (0, 1, 2, 3):
            expect_result("A2A-ROUTE-2", lambda c=c, limit=limit: store.list_queued_deliveries_in_scope(c, limit),
                          twin[:limit] if limit else twin, f"the queue {where}, limit {limit}")
        with clause("A2A-ROUTE-4", what=f"the queued rows {where}"):
            expect_true("A2A-ROUTE-4", all((d.scope, d.partition) == (c.scope, c.partition) for d in twin),
                        "all((d.scope, d.partition) == (c.scope, c.partition) for d in twin)")
            expect("A2A-ROUTE-4", len(twin), 2, "len(twin)")
        for at in (now - MS, now, now + MS, FAR_FUTURE):
            twin_asks = _mine(c, store.list_expired_asks_across_scopes(Context.of("", c.partition), at))
            for limit in (0, 1, 2, 3, 4):  # up to exactly the three asks of a place, and beyond
                expect_result("A2A-ROUTE-2", lambda c=c, at=at, limit=limit: store.list_expired_asks_in_scope(
                    c, at, limit), twin_asks[:limit] if limit else twin_asks,
                    f"the expired asks {where} at {at}, limit {limit}")
    expect("A2A-ROUTE-2", len(store.list_expired_asks_in_scope(ctx(HOME), now)), 2,
           "the overdue ask and the one due exactly now (A2A-ASK-9)")
    expect("A2A-ROUTE-4", _view(store, rows), before, "the store after the lists")


@pytest.mark.clause("A2A-ROUTE-2", "A2A-ROUTE-3", "A2A-RCL-2", "A2A-RCL-3", "A2A-RCL-4", "A2A-RCL-7")
@pytest.mark.parametrize("cut", ["at-claim", "after-claim", "far"])
def test_the_reclaim_moves_only_stale_rows_of_exactly_the_scope(store, clock, cut):
    rows = _populate(store, clock)
    stale_at = clock.now() - timedelta(seconds=2)
    older_than = {"at-claim": stale_at, "after-claim": stale_at + MS, "far": FAR_FUTURE}[cut]
    expect_result("A2A-ROUTE-2", lambda: store.reclaim_stale_deliveries_in_scope(ctx("ws=w9"), FAR_FUTURE), 0,
                  "a reclaim at a scope without rows")
    for c in PLACES:
        where = f"at {c.scope.canonical()} partition {c.partition!r}"
        others = {d.id: store.get_delivery(o, d.id) for o, d in zip(PLACES, rows["stale"]) if o != c}
        moved = store.reclaim_stale_deliveries_in_scope(c, older_than)
        # the claim made exactly at older_than is not stale (A2A-RCL-2); the fresh one is stale only for "far"
        want = {"at-claim": 0, "after-claim": 1, "far": 2}[cut]
        expect("A2A-ROUTE-3", moved, want, f"the rows moved {where} (older_than {cut})")
        with clause("A2A-ROUTE-2", what=f"rows of other places after the reclaim {where}"):
            for o, d in zip(PLACES, rows["stale"]):
                if o != c:
                    expect("A2A-ROUTE-2", store.get_delivery(o, d.id), others[d.id],
                           "store.get_delivery(o, d.id)" + ": " + shorten(d.id))
        expect_result("A2A-ROUTE-3", lambda c=c: store.reclaim_stale_deliveries_in_scope(c, older_than), 0,
                      f"a second reclaim {where}")
    with clause("A2A-RCL-3", what="the bound rows"):
        expect_true("A2A-RCL-3", all(d.run_id is None for d in store.list_queued_deliveries(Context.of(""))),
                    'all(d.run_id is None for d in store.list_queued_deliveries(Context.of("")))')


@pytest.mark.clause("A2A-ROUTE-3", "A2A-RCL-4", "A2A-RCL-8")
def test_the_reclaim_takes_the_first_limit_candidates_in_claim_order(store, clock):
    c = ctx(HOME)
    claimed = []
    for i in range(4):
        clock.advance(milliseconds=1)
        claimed.append(store.claim_delivery(c, store.create_delivery(c, make_delivery()).id))
    clock.advance(seconds=1)
    for limit, want in ((1, [claimed[0].id]), (2, [claimed[1].id, claimed[2].id]), (0, [claimed[3].id])):
        before = {d.id for d in store.list_queued_deliveries_in_scope(c)}
        expect_result("A2A-ROUTE-3", lambda limit=limit: store.reclaim_stale_deliveries_in_scope(c, clock.now(), limit),
                      len(want), f"a reclaim with limit {limit}")
        expect("A2A-RCL-4", sorted({d.id for d in store.list_queued_deliveries_in_scope(c)} - before), sorted(want),
               f"the rows a reclaim with limit {limit} moved")


@pytest.mark.clause("A2A-ROUTE-1")
def test_zero_scope_and_bad_arguments_are_refused_first(store, clock):
    rows = _populate(store, clock)
    before = _view(store, rows)
    calls = {
        "list_queued_deliveries_in_scope": [lambda c: store.list_queued_deliveries_in_scope(c, "1"),
                                            lambda c: store.list_queued_deliveries_in_scope(c, True)],
        "reclaim_stale_deliveries_in_scope": [lambda c: store.reclaim_stale_deliveries_in_scope(c, "now"),
                                              lambda c: store.reclaim_stale_deliveries_in_scope(c, FAR_FUTURE, 1.5),
                                              lambda c: store.reclaim_stale_deliveries_in_scope(
                                                  c, FAR_FUTURE.replace(tzinfo=None))],
        "list_expired_asks_in_scope": [lambda c: store.list_expired_asks_in_scope(c, None),
                                       lambda c: store.list_expired_asks_in_scope(c, FAR_FUTURE, "2")],
    }
    good = {
        "list_queued_deliveries_in_scope": lambda c: store.list_queued_deliveries_in_scope(c),
        "reclaim_stale_deliveries_in_scope": lambda c: store.reclaim_stale_deliveries_in_scope(c, FAR_FUTURE),
        "list_expired_asks_in_scope": lambda c: store.list_expired_asks_in_scope(c, FAR_FUTURE),
    }
    for name, bads in calls.items():
        for zero in (Context.of(""), Context.of("", "orch-1")):
            expect_raises("A2A-ROUTE-1", NoScope, lambda: good[name](zero), f"{name} with the zero scope")
            for bad in bads:
                expect_raises("A2A-ROUTE-1", NoScope, lambda bad=bad: bad(zero), f"{name}: the zero scope first")
        for bad in bads:
            expect_raises("A2A-ROUTE-1", InvalidArgument, lambda bad=bad: bad(ctx(HOME)), f"{name} with a bad argument")
    expect("A2A-ROUTE-1", _view(store, rows), before, "the store after the refused calls")
