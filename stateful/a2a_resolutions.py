"""Machine operations of class ``a2a_resolutions``: differential rules for the
four methods, whole-state views of the resolutions, racing seals on the
asks of the a2a world (a reply, the deadline sweep, a cancel, a legacy claim
and a worker's retry), the A2A-RES-RACE family, a worker that dies holding a
seal (MACH-CRASH-1) and one that dies before its seal is acknowledged
(MACH-CRASH-3).

A seal names the ask it decided about by value: the rules read it from the
reference (where the ask was created) so the argument is the ask as the
caller read it, sometimes with one identity field changed (A2A-RES-5).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

import attrs
from hypothesis import strategies as st

from cortex_spec import ids
from cortex_spec.a2a import Address, PendingAsk
from cortex_spec.a2a_resolutions import AskReply, AskReplyItem
from cortex_spec.context import Context
from cortex_spec.scope import Scope

from .a2a import OTHER_PARTITION, A2AWorld, _ask, _ctx, _exact, _role, ask_key, home_views, page_known, race_family
from .ops import Op
from .plugin import Claim, ClassMachines, Family, Redo, World
from .world import ROLES, fixed_id, make_op, sampled

NAME = "a2a_resolutions"
A2A = "a2a"

#: the outcomes the writers choose (A2A-PAUSE): a reply, the deadline's, a cancel's
OUTCOMES = ("reply", "other-reply", "timeout", "cancel")


def outcome(kind: str, conversation_id: str) -> AskReply:
    if kind == "reply":
        return AskReply((AskReplyItem("inform", "worker", "42", conversation_id),), True)
    if kind == "other-reply":
        return AskReply((AskReplyItem("refuse", "worker", "no", conversation_id),), True)
    if kind == "timeout":
        return AskReply((), False)
    return AskReply((AskReplyItem("failure", "bus", "cancelled", conversation_id),), False)


# -- differential rules -------------------------------------------------------------------------


def _ask_homes(m: Any) -> list[tuple[str, Context]]:
    return [(key, c) for kind, key, c in m.known.get("a2a-home", []) if kind == "ask"]


def _read_ask(m: Any, data: Any) -> tuple[PendingAsk, Context]:
    """An ask as a caller read it (from the reference, at its home), or a
    made-up one."""
    homes = _ask_homes(m)
    if homes and data.draw(st.integers(0, 5), "a known ask") > 0:
        rw, home = data.draw(sampled(homes), "ask")
        got = m.reference_outcome(make_op("get_pending_ask", home, rw, keys=None))
        if got.ok:
            return got.raw, home
    c = _ctx(m, data)
    return PendingAsk(reply_with=data.draw(sampled(("rw-1", "rw-9")), "reply_with"),
                      conversation_id=fixed_id(ids.CONVERSATION, 1), message_id=fixed_id(ids.MESSAGE, 1),
                      asker_run_id=fixed_id(ids.RUN, 901), scope=c.scope, partition=c.partition), c


def _where(m: Any, data: Any, home: Context) -> Context:
    """Mostly the ask's own context; sometimes anywhere in the pool."""
    return home if data.draw(st.integers(0, 3), "at home") else _ctx(m, data)


def r_seal(m: Any, data: Any) -> Op:
    ask, home = _read_ask(m, data)
    change = data.draw(sampled(("none", "none", "none", "tool_call_id", "deadline", "scope")), "identity")
    if change == "tool_call_id":
        ask = attrs.evolve(ask, tool_call_id=ask.tool_call_id + "x")
    elif change == "deadline":
        ask = attrs.evolve(ask, deadline=None if ask.deadline is not None else m.clock.now())
    elif change == "scope":
        ask = attrs.evolve(ask, scope=Scope.parse("ws=w1"))
    reply = outcome(data.draw(sampled(OUTCOMES), "outcome"), ask.conversation_id)
    return make_op("seal_ask_resolution", _where(m, data, home), ask, reply, keys=[ask_key(ask.reply_with)])


def _by_token(method: str) -> Callable[[Any, Any], Op]:
    def rule(m: Any, data: Any) -> Op:
        ask, home = _read_ask(m, data)
        return make_op(method, _where(m, data, home), ask.reply_with, keys=[ask_key(ask.reply_with)])

    rule.__name__ = f"r_{method}"
    return rule


def r_list_ask_resolutions(m: Any, data: Any) -> Op:
    homes = _ask_homes(m)
    cursors = ["", "", "v1.rw-2", "rw-1", "v1."] + ["v1." + rw for rw, _ in homes[:4]]
    return page_known(m, data, homes, "list_ask_resolutions", sampled(cursors))


RULES = {
    "read_pending_ask": _by_token("read_pending_ask"),
    "seal_ask_resolution": r_seal,
    "get_ask_resolution": _by_token("get_ask_resolution"),
    "list_ask_resolutions": r_list_ask_resolutions,
}


def views(ctxs: list, known: dict[str, list]) -> dict[str, Op]:
    """The resolutions seen from every ask's home: each by key, and the
    home's whole page (MACH-DIFF-2)."""
    homes = [(key, c) for kind, key, c in known.get("a2a-home", []) if kind == "ask"]
    return home_views(NAME, homes, "get_ask_resolution", "list_ask_resolutions", "list", "")


# -- concurrent scenarios ------------------------------------------------------------------------


def stored_ask(w: A2AWorld, rw: str) -> PendingAsk:
    """The ask of the a2a world's setup as a caller reads it (its identity)."""
    deadline = {w.ask_due: w.t0, w.ask_other: w.other_deadline}.get(rw)
    return attrs.evolve(_ask(rw, w, deadline), scope=Scope.parse(ROLES["exact"]), partition="")


def _seal(draw: Any, w: A2AWorld, rw: str, kind: str | None = None, label: str = "",
          c: Context | None = None) -> Op:
    kind = kind or draw(sampled(OUTCOMES))
    return make_op("seal_ask_resolution", c or _exact(), stored_ask(w, rw), outcome(kind, w.conv),
                   keys=[ask_key(rw)], label=label or kind)


def _reader(draw: Any, w: A2AWorld, rw: str, label: str = "") -> Op:
    which = draw(st.integers(0, 4))
    if which == 0:
        return make_op("get_ask_resolution", _role(draw, ("exact", "exact", "ancestor")), rw, keys=[ask_key(rw)],
                       label=label)
    if which == 1:
        return make_op("list_ask_resolutions", _exact(), "", 256, keys=None, label=label)
    if which == 2:
        return make_op("get_pending_ask", _role(draw), rw, keys=[ask_key(rw)], label=label)
    if which == 3:
        return make_op("read_pending_ask", _exact(), rw, keys=[ask_key(rw)], label=label)
    return make_op("list_expired_asks_across_scopes", Context(Scope()), w.t0, 0, keys=None, label=label)


def _asks(w: A2AWorld) -> tuple[str, ...]:
    return (w.ask_due, w.ask_other, w.ask_none)


def racing_ops(world_: World) -> list[Callable[[Any], Op]]:
    w: A2AWorld | None = world_.get(A2A)
    if w is None:
        return []
    return [
        lambda draw: _seal(draw, w, draw(sampled(_asks(w)))),
        lambda draw: _seal(draw, w, draw(sampled(_asks(w))), "reply"),
        lambda draw: _reader(draw, w, draw(sampled(_asks(w)))),
        lambda draw: make_op("claim_pending_ask", _exact(), w.ask_due, keys=[ask_key(w.ask_due)], label="legacy"),
    ]


def storm_ops(world_: World) -> list[Callable[[Any], Op]]:
    """Storms: every branch seals one ask, with an outcome of its own, or
    all with the same one (a worker and its retries)."""
    w: A2AWorld | None = world_.get(A2A)
    if w is None:
        return []
    return [
        lambda draw: _seal(draw, w, w.ask_due),
        lambda draw: _seal(draw, w, w.ask_due, "reply"),
    ]


def _lanes(draw: Any, low: int = 2, high: int = 4) -> int:
    return draw(st.integers(low, high))


def _res_race1(draw: Any, w: A2AWorld) -> list:
    """A reply, the deadline sweep, a cancel and a legacy claim on one ask."""
    rw = draw(sampled(_asks(w)))
    writers = {
        "reply": (_seal(draw, w, rw, "reply", "reply"),),
        "sweep": (make_op("list_expired_asks_across_scopes", Context(Scope()), w.t0, 0, keys=None, label="sweep"),
                  _seal(draw, w, rw, "timeout", "sweep")),
        "cancel": (make_op("list_pending_asks_by_conversation", _exact(), w.conv, keys=None, label="cancel"),
                   _seal(draw, w, rw, "cancel", "cancel")),
        "legacy": (make_op("claim_pending_ask", _exact(), rw, keys=[ask_key(rw)], label="legacy"),),
        "other": (_seal(draw, w, rw, "other-reply", "other reply"),),
    }
    names = draw(st.lists(sampled(sorted(writers)), min_size=2, max_size=4, unique=True))
    return [writers[n] for n in names]


def _res_race2(draw: Any, w: A2AWorld) -> list:
    kind = draw(sampled(OUTCOMES))
    return [(_seal(draw, w, w.ask_due, kind, "retry"),) for _ in range(_lanes(draw, 2, 3))]


def _res_race3(draw: Any, w: A2AWorld) -> list:
    rw = draw(sampled(_asks(w)))
    lanes = [(_seal(draw, w, rw),), (_reader(draw, w, rw, "reader"), _reader(draw, w, rw, "reader"))]
    if draw(st.booleans()):
        lanes.append((_seal(draw, w, rw),))
    return lanes


def _res_race4(draw: Any, w: A2AWorld) -> list:
    far = Context(Scope.parse(ROLES[draw(sampled(("ancestor", "sibling", "descendant")))]))
    return [(_seal(draw, w, w.ask_due),),
            (_seal(draw, w, w.ask_due, c=_exact(OTHER_PARTITION), label="other partition"),),
            (_seal(draw, w, w.ask_due, c=far, label="other scope"),),
            (make_op("seal_ask_resolution", _exact(OTHER_PARTITION),
                     attrs.evolve(stored_ask(w, w.ask_due), reply_with=w.foreign_ask, partition=OTHER_PARTITION,
                                  deadline=w.t0 - timedelta(days=1)),
                     outcome("reply", w.conv), keys=[ask_key(w.foreign_ask)], label="foreign"),)]


RACES: dict[str, Callable[[Any, A2AWorld], list]] = {
    "A2A-RES-RACE-1": _res_race1,
    "A2A-RES-RACE-2": _res_race2,
    "A2A-RES-RACE-3": _res_race3,
    "A2A-RES-RACE-4": _res_race4,
}


races = race_family(A2A, RACES)


RACE_CLAUSES = (*RACES, "A2A-RES-9", "A2A-RES-7", "MACH-LIN-2")


# -- crash faults ---------------------------------------------------------------------------------


def _fresh_ask(m: Any, data: Any) -> tuple[PendingAsk, Context]:
    """A new unclaimed ask, created on both stores."""
    rw = f"rw-crash-{m.next_id}"
    m.next_id += 1
    c = _ctx(m, data)
    op = make_op("create_pending_ask", c, PendingAsk(
        reply_with=rw, conversation_id=fixed_id(ids.CONVERSATION, 1), message_id=fixed_id(ids.MESSAGE, 1),
        asker_run_id=fixed_id(ids.RUN, 901), expected=Address("worker")), keys=None)
    return m.both(op).raw, c


def _sealer(m: Any, data: Any) -> Op:
    ask, c = _fresh_ask(m, data)
    return make_op("seal_ask_resolution", c, ask, outcome(data.draw(sampled(OUTCOMES), "outcome"),
                                                          ask.conversation_id), keys=None)


def _other_seals(m: Any, op: Op, got: Any) -> list[Op]:
    ask, reply = op.args
    others = [k for k in OUTCOMES if outcome(k, ask.conversation_id) != reply]
    return [make_op("seal_ask_resolution", op.ctx, ask, outcome(others[0], ask.conversation_id), keys=None),
            make_op("claim_pending_ask", op.ctx, ask.reply_with, keys=None)]


MACHINES = ClassMachines(
    name=NAME,
    rules=RULES,
    views=views,
    seed_rules=("seal_ask_resolution",),
    racing_ops=racing_ops,
    storm_ops=storm_ops,
    families=(Family("a2a-resolution-races", races, RACE_CLAUSES, weight=0.5, cost=3.0),),
    claims=(Claim("ask-seal", _sealer, _other_seals),),
    redos=(Redo("ask-seal", _sealer, ("A2A-RES-7", "A2A-RES-10")),),
    weight=0.4,
    cost=4.0,
)

__all__ = ["MACHINES", "outcome", "stored_ask"]
