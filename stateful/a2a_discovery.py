"""Machine operations of class ``a2a_discovery``: differential rules and views
of the three in-scope passes, and scenarios racing them against claims,
finishes, binds, ask claims and seals of rows in the exact scope, a
descendant scope and the other partition, and against their across-scope
twins (A2A-ROUTE-RACE-1).  ``reclaim_stale_deliveries_in_scope`` is
linearizable per moved row, so the model splits it as it splits its twin
(A2A-ROUTE-3, A2A-RCL-8)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Hashable

from hypothesis import strategies as st

from cortex_spec.context import Context
from cortex_spec.scope import Scope

from .a2a import OTHER_PARTITION, RUNS, A2AWorld, ReclaimSplit, _bind, _claim, _claim_ask, _ctx, _finish
from .ops import Op
from .plugin import ClassMachines, Family, Race, World
from .world import ROLES, make_op, sampled

NAME = "a2a_discovery"
MS = timedelta(milliseconds=1)
A2A = "a2a"


def _where(m: Any, data: Any) -> Context:
    homes = [c for _, _, c in m.known.get("a2a-home", [])]
    if homes and data.draw(st.booleans(), "at a home"):
        return data.draw(sampled(homes), "where")
    return _ctx(m, data)


def r_queued(m: Any, data: Any) -> Op:
    return make_op("list_queued_deliveries_in_scope", _where(m, data), data.draw(sampled((0, 1, 2)), "limit"),
                   keys=None)


def r_reclaim(m: Any, data: Any) -> Op:
    return make_op("reclaim_stale_deliveries_in_scope", _where(m, data), data.draw(m.instant_choice(), "older_than"),
                   data.draw(sampled((0, 1, 2)), "limit"), keys=None)


def r_expired(m: Any, data: Any) -> Op:
    return make_op("list_expired_asks_in_scope", _where(m, data), data.draw(m.instant_choice(), "now"),
                   data.draw(sampled((0, 1, 2)), "limit"), keys=None)


RULES = {
    "list_queued_deliveries_in_scope": r_queued,
    "reclaim_stale_deliveries_in_scope": r_reclaim,
    "list_expired_asks_in_scope": r_expired,
}


def views(ctxs: list, known: dict[str, list]) -> dict[str, Op]:
    from cortex_spec.testing import FAR_FUTURE

    out: dict[str, Op] = {}
    homes = {(c.scope.canonical(), c.partition): c for _, _, c in known.get("a2a-home", [])}
    for (scope, partition), c in list(homes.items())[:8]:
        out[f"a2a_discovery.queued@{scope}#{partition}"] = make_op("list_queued_deliveries_in_scope", c, keys=None)
        out[f"a2a_discovery.expired@{scope}#{partition}"] = make_op("list_expired_asks_in_scope", c, FAR_FUTURE,
                                                                    keys=None)
    return out


class InScopeReclaimSplit(ReclaimSplit):
    """A2A-ROUTE-3: the in-scope reclaim as a selection and one move per
    candidate, each re-checking the exact scope too."""

    def first(self, store: Any, op: Op) -> Hashable:
        return (tuple(store._select_stale_in_scope(op.ctx, *op.args, **dict(op.kwargs))), 0, 0)

    def next(self, store: Any, op: Op, progress: Any) -> Hashable:
        candidates, i, moved = progress
        delivery_id, token = candidates[i]
        moved += int(store._move_stale_in_scope(op.ctx, op.args[0], delivery_id, token))
        return (candidates, i + 1, moved)


SPLITS = {"reclaim_stale_deliveries_in_scope": InScopeReclaimSplit()}


def _pass(draw: Any, w: A2AWorld, label: str = "") -> Op:
    role = draw(sampled(("exact", "exact", "ancestor", "descendant")))
    partition = draw(sampled(("", "", OTHER_PARTITION)))
    c = Context(Scope.parse(ROLES[role]), partition)
    which = draw(st.integers(0, 2))
    if which == 0:
        return make_op("list_queued_deliveries_in_scope", c, 0, keys=None, label=label)
    if which == 1:
        return make_op("reclaim_stale_deliveries_in_scope", c, draw(sampled(w.older_thans)),
                       draw(sampled((0, 1))), keys=None, label=label)
    return make_op("list_expired_asks_in_scope", c, draw(sampled((w.t0, w.t0 - MS, w.t0 + MS))), 0,
                   keys=None, label=label)


def _twin(draw: Any, w: A2AWorld, label: str = "") -> Op:
    partition = draw(sampled(("", OTHER_PARTITION)))
    anywhere = Context(Scope(), partition)
    which = draw(st.integers(0, 2))
    if which == 0:
        return make_op("list_queued_deliveries", anywhere, 0, keys=None, label=label)
    if which == 1:
        return make_op("reclaim_stale_deliveries", anywhere, draw(sampled(w.older_thans)), 0, keys=None,
                       label=label)
    return make_op("list_expired_asks_across_scopes", anywhere, w.t0, 0, keys=None, label=label)


def _writer(draw: Any, w: A2AWorld, label: str = "") -> Op:
    which = draw(st.integers(0, 3))
    if which == 0:
        return _claim(draw, w, draw(sampled((w.queued, w.stale))), label)
    if which == 1:
        return _finish(draw, w, draw(sampled((w.stale, w.fresh))), label)
    if which == 2:
        return _bind(draw, w, w.stale, RUNS[0], label)
    return _claim_ask(draw, w, draw(sampled((w.ask_due, w.ask_other))), label)


def racing_ops(world_: World) -> list[Callable[[Any], Op]]:
    w: A2AWorld | None = world_.get(A2A)
    if w is None:
        return []
    return [lambda draw: _pass(draw, w), lambda draw: _twin(draw, w), lambda draw: _writer(draw, w)]


def _route_race(draw: Any, world_: World, declared: frozenset[str]) -> Race:
    w: A2AWorld = world_[A2A]
    lanes = [(_pass(draw, w, "in scope"),), (_pass(draw, w, "in scope"), _pass(draw, w, "in scope")),
             (_writer(draw, w, "writer"), _writer(draw, w, "writer"))]
    if draw(st.booleans()):
        lanes.append((_twin(draw, w, "twin"),))
    return Race(("A2A-ROUTE-RACE-1",), tuple(lanes))


MACHINES = ClassMachines(
    name=NAME,
    rules=RULES,
    views=views,
    splits=SPLITS,
    racing_ops=racing_ops,
    families=(Family("a2a-route-races", _route_race, ("A2A-ROUTE-RACE-1", "A2A-ROUTE-2", "A2A-ROUTE-3",
                                                       "MACH-LIN-2"), weight=0.4, cost=3.0),),
    weight=0.3,
    cost=4.0,
)

__all__ = ["MACHINES"]
