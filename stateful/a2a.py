"""Machine operations of class ``a2a``: differential rules, whole-state views,
a scenario world, racing calls, the A2A-RACE scenario family, and the split
model of ``reclaim_stale_deliveries``.

Claim tokens are opaque and differ between the backend and the reference
(A2A-DLV-6).  Three devices deal with that (see ``ops.py`` and ``model.py``):
the differential machine maps backend tokens to reference tokens
(:data:`OPAQUE_FIELDS`); concurrent scenarios name a worker's token with a
:class:`~cortex_spec.stateful.ops.HeldToken` placeholder resolved at call
time; the linearizability model adopts the token a backend reported.

``reclaim_stale_deliveries`` is atomic per moved row only (A2A-RCL-8), so the
linearizability model splits it (:class:`ReclaimSplit`): one selection step
(the first ``limit`` stale rows with the tokens they hold at that instant),
then one step per candidate that moves it only if it is still stale and
still holds that token (A2A-RCL-5).  The checker places each step anywhere
inside the call's interval, with other calls in between; the observed count
must equal the number of moves.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Callable, Hashable

import attrs
from hypothesis import strategies as st

from cortex_spec import ids
from cortex_spec.a2a import Address, Conversation, Delivery, Envelope, PendingAsk
from cortex_spec.context import Context
from cortex_spec.scope import Scope

from .ops import HeldToken, Op, Outcome
from .plugin import Claim, ClassMachines, Family, Race, Sweep, World
from .world import ROLES, Tick, ctx_of, fixed_id, instants_around, json_objects, make_op, optional, sampled, short_texts

NAME = "a2a"

ID_KINDS = {"message": ids.MESSAGE, "conversation": ids.CONVERSATION, "delivery": ids.DELIVERY}

#: Values that differ between any two stores and are compared through a
#: bijection by the differential machine.
OPAQUE_FIELDS = ("claim_token",)

#: The second partition of the scenarios (A2A-RACE-14).
OTHER_PARTITION = "orch-2"

PLANNER, WORKER, CRITIC, REMOTE = Address("planner"), Address("worker"), Address("critic"), Address("worker", "peer")
ADDRESSES = (PLANNER, WORKER, CRITIC, REMOTE)
RUNS = (fixed_id(ids.RUN, 901), fixed_id(ids.RUN, 902))
PEERS = (("", ""), ("", ""), ("node-a", "t1"), ("node-b", "t1"), ("node-a", "t2"), ("node-a", ""))
REPLY_WITHS = ("rw-1", "rw-2", "rw-3", "rw-4")


# -- object keys (P-compositionality of the checker) -----------------------------------


def conv_key(cid: str) -> tuple[str, str]:
    return ("conv", cid)


def msg_key(mid: str) -> tuple[str, str]:
    return ("msg", mid)


def dlv_key(did: str) -> tuple[str, str]:
    return ("dlv", did)


def ask_key(rw: str) -> tuple[str, str]:
    return ("ask", rw)


def peer_keys(node: str, context: str) -> list[Hashable]:
    """A conversation with a peer pair also touches every other one with the
    same pair (A2A-PEER-3 is a uniqueness across rows)."""
    return [("peer", node, context)] if node and context else []


# -- differential rules --------------------------------------------------------------------


def _partition(data: Any) -> str:
    return data.draw(sampled(("", "", "", "orch-1")), "partition")


def _ctx(m: Any, data: Any, zero: bool = False) -> Context:
    base = data.draw(m.ctx_choice(zero=zero), "ctx")
    return Context(base.scope, _partition(data))


def _known(m: Any, kind: str) -> list:
    return m.known.setdefault(kind, [])


def _deadline(m: Any, data: Any, label: str) -> datetime | None:
    value = data.draw(optional(m.instant_choice()), label)
    if value is not None:
        m.remember_instant(value)
    return value


def _addresses(data: Any, label: str, min_size: int = 0) -> tuple[Address, ...]:
    return tuple(data.draw(st.lists(sampled(ADDRESSES), min_size=min_size, max_size=3), label))


def r_record_message(m, data):
    sent = _known(m, "a2a-sent")
    if sent and data.draw(st.integers(0, 3), "retry") == 0:
        c, env = data.draw(sampled(sent), "earlier envelope")
        if data.draw(st.booleans(), "changed"):
            env = attrs.evolve(env, content=env.content + "!")
        return make_op("record_message", c, env, keys=[conv_key(env.conversation_id), msg_key(env.id)])
    mid = data.draw(m.id_choice("message", fresh=True), "message_id")
    m.remember("message", mid)
    cid = data.draw(m.id_choice("conversation"), "conversation_id")
    env = Envelope(
        id=mid,
        conversation_id=cid,
        performative=data.draw(sampled(("request", "inform", "agree", "cancel", "propose", "Inform")),
                               "performative"),
        sender=data.draw(sampled(ADDRESSES + (Address(""),)), "sender"),
        receivers=_addresses(data, "receivers"),
        reply_to=_addresses(data, "reply_to"),
        content=data.draw(short_texts(), "content"),
        reply_with=data.draw(sampled(("", "rw-1")), "reply_with"),
        reply_by=_deadline(m, data, "reply_by"),
        origin_run_id=data.draw(sampled((None, RUNS[0])), "origin_run_id"),
        metadata=data.draw(json_objects(), "metadata"),
        hops=data.draw(sampled((0, 5)), "hops"),
    )
    c = _ctx(m, data)
    sent.append((c, env))
    return make_op("record_message", c, env, keys=[conv_key(cid), msg_key(mid)])


def r_get_message(m, data):
    mid = data.draw(m.id_choice("message"), "message_id")
    return make_op("get_message", _ctx(m, data), mid, keys=[msg_key(mid)])


def r_list_messages(m, data):
    kwargs = dict(
        conversation_id=data.draw(optional(m.id_choice("conversation")), "conversation_id"),
        exact=data.draw(st.booleans(), "exact"),
        limit=data.draw(sampled((0, 1, 2, -1)), "limit"),
        offset=data.draw(sampled((0, 1, 2)), "offset"),
    )
    return make_op("list_messages", _ctx(m, data), keys=None, kwargs=kwargs)


def _conversation(m: Any, data: Any, cid: str) -> Conversation:
    node, context = data.draw(sampled(PEERS), "peer pair")
    return Conversation(
        id=cid,
        protocol=data.draw(sampled(("", "fipa-request")), "protocol"),
        initiator=data.draw(sampled(ADDRESSES), "initiator"),
        participants=_addresses(data, "participants"),
        status=data.draw(sampled(("open", "open", "open", "closed", "expired")), "status"),
        hop_ceiling=data.draw(sampled((1, 2, 3, 8, 0)), "hop_ceiling"),
        deadline=_deadline(m, data, "deadline"),
        peer_node=node,
        peer_context=context,
    )


def r_create_conversation(m, data):
    cid = data.draw(m.id_choice("conversation", fresh=True), "conversation_id")
    m.remember("conversation", cid)
    conv = _conversation(m, data, cid)
    return make_op("create_conversation", _ctx(m, data), conv,
                   keys=[conv_key(cid), *peer_keys(conv.peer_node, conv.peer_context)])


def r_get_conversation(m, data):
    cid = data.draw(m.id_choice("conversation"), "conversation_id")
    return make_op("get_conversation", _ctx(m, data), cid, keys=[conv_key(cid)])


def r_get_conversation_by_peer_context(m, data):
    node, context = data.draw(sampled(PEERS + (("", "t1"),)), "peer pair")
    return make_op("get_conversation_by_peer_context", _ctx(m, data), node, context, keys=None)


def r_update_conversation(m, data):
    cid = data.draw(m.id_choice("conversation"), "conversation_id")
    conv = _conversation(m, data, cid)
    # fields update ignores: garbage is fine (A2A-CONV-6)
    conv = attrs.evolve(conv, hops_used=data.draw(sampled((0, -3)), "hops_used"))
    return make_op("update_conversation", _ctx(m, data), conv,
                   keys=[conv_key(cid), *peer_keys(conv.peer_node, conv.peer_context)])


def r_list_conversations(m, data):
    kwargs = dict(
        status=data.draw(sampled((None, "open", "closed", "expired")), "status"),
        exact=data.draw(st.booleans(), "exact"),
        limit=data.draw(sampled((0, 1, 2)), "limit"),
        offset=data.draw(sampled((0, 1, 2)), "offset"),
    )
    return make_op("list_conversations", _ctx(m, data), keys=None, kwargs=kwargs)


def r_create_delivery(m, data):
    did = data.draw(m.id_choice("delivery", fresh=True), "delivery_id")
    m.remember("delivery", did)
    d = Delivery(
        id=did,
        message_id=data.draw(m.id_choice("message"), "message_id"),
        receiver=data.draw(sampled(ADDRESSES + (Address(""),)), "receiver"),
    )
    return make_op("create_delivery", _ctx(m, data), d, keys=[dlv_key(did)])


def _by_delivery(method: str) -> Callable:
    def rule(m, data):
        did = data.draw(m.id_choice("delivery"), "delivery_id")
        return make_op(method, _ctx(m, data), did, keys=[dlv_key(did)])

    rule.__name__ = f"r_{method}"
    return rule


def _held(m: Any, data: Any) -> tuple[str, str]:
    """A (delivery, token) pair: mostly one the backend issued for that row,
    sometimes a token of another row, an old one, or one never issued."""
    held = _known(m, "a2a-held")
    if held and data.draw(st.integers(0, 3), "held pair") > 0:
        return data.draw(sampled(held), "held")
    did = data.draw(m.id_choice("delivery"), "delivery_id")
    tokens = [t for _, t in held] + ["never-issued"]
    return did, data.draw(sampled(tokens), "token")


def r_bind_delivery_run(m, data):
    did, token = _held(m, data)
    run = data.draw(sampled(RUNS), "run_id")
    return make_op("bind_delivery_run", _ctx(m, data), did, token, run, keys=[dlv_key(did)])


def r_finish_delivery(m, data):
    did, token = _held(m, data)
    state = data.draw(sampled(("delivered", "delivered", "failed", "queued")), "state")
    error = data.draw(sampled(("", "boom")), "error")
    return make_op("finish_delivery", _ctx(m, data), did, token, state, error, keys=[dlv_key(did)])


def r_list_inbox(m, data):
    kwargs = dict(
        unread_only=data.draw(st.booleans(), "unread_only"),
        conversation_id=data.draw(optional(m.id_choice("conversation")), "conversation_id"),
        limit=data.draw(sampled((0, 1, 2)), "limit"),
        offset=data.draw(sampled((0, 1, 2)), "offset"),
    )
    agent = data.draw(sampled(("worker", "critic", "planner")), "agent")
    return make_op("list_inbox", _ctx(m, data), agent, keys=None, kwargs=kwargs)


def r_list_queued_deliveries(m, data):
    return make_op("list_queued_deliveries", _ctx(m, data, zero=True),
                   data.draw(sampled((0, 1, 2)), "limit"), keys=None)


def r_reclaim_stale_deliveries(m, data):
    return make_op("reclaim_stale_deliveries", _ctx(m, data, zero=True),
                   data.draw(m.instant_choice(), "older_than"),
                   data.draw(sampled((0, 1, 2)), "limit"), keys=None)


def _reply_with(m: Any, data: Any) -> str:
    return data.draw(sampled(REPLY_WITHS + tuple(_known(m, "ask"))), "reply_with")


def r_create_pending_ask(m, data):
    rw = _reply_with(m, data)
    m.remember("ask", rw)
    ask = PendingAsk(
        reply_with=rw,
        conversation_id=data.draw(m.id_choice("conversation"), "conversation_id"),
        message_id=data.draw(m.id_choice("message"), "message_id"),
        asker_run_id=data.draw(sampled(RUNS), "asker_run_id"),
        asker_agent="planner",
        tool_call_id=data.draw(sampled(("call_1", "call_2")), "tool_call_id"),
        expected=data.draw(sampled(ADDRESSES), "expected"),
        deadline=_deadline(m, data, "deadline"),
    )
    return make_op("create_pending_ask", _ctx(m, data), ask, keys=[ask_key(rw)])


def _by_ask(method: str) -> Callable:
    def rule(m, data):
        rw = _reply_with(m, data)
        return make_op(method, _ctx(m, data), rw, keys=[ask_key(rw)])

    rule.__name__ = f"r_{method}"
    return rule


def r_list_expired_asks(m, data):
    return make_op("list_expired_asks", _ctx(m, data), data.draw(m.instant_choice(), "now"),
                   data.draw(sampled((0, 1, 2)), "limit"), keys=None)


def r_list_expired_asks_across_scopes(m, data):
    return make_op("list_expired_asks_across_scopes", _ctx(m, data, zero=True),
                   data.draw(m.instant_choice(), "now"), data.draw(sampled((0, 1, 2)), "limit"),
                   keys=None)


def r_list_pending_asks_by_conversation(m, data):
    cid = data.draw(m.id_choice("conversation"), "conversation_id")
    return make_op("list_pending_asks_by_conversation", _ctx(m, data), cid, keys=None)


#: rules the machine runs a few times before anything else (``populate``):
#: rows created at one instant, so ties in every list order are live
SEED_RULES = ("create_conversation", "record_message", "create_delivery", "create_pending_ask")

RULES = {
    "record_message": r_record_message,
    "get_message": r_get_message,
    "list_messages": r_list_messages,
    "create_conversation": r_create_conversation,
    "get_conversation": r_get_conversation,
    "get_conversation_by_peer_context": r_get_conversation_by_peer_context,
    "update_conversation": r_update_conversation,
    "list_conversations": r_list_conversations,
    "create_delivery": r_create_delivery,
    "get_delivery": _by_delivery("get_delivery"),
    "claim_delivery": _by_delivery("claim_delivery"),
    "bind_delivery_run": r_bind_delivery_run,
    "finish_delivery": r_finish_delivery,
    "list_inbox": r_list_inbox,
    "mark_delivery_read": _by_delivery("mark_delivery_read"),
    "list_queued_deliveries": r_list_queued_deliveries,
    "reclaim_stale_deliveries": r_reclaim_stale_deliveries,
    "create_pending_ask": r_create_pending_ask,
    "get_pending_ask": _by_ask("get_pending_ask"),
    "claim_pending_ask": _by_ask("claim_pending_ask"),
    "list_expired_asks": r_list_expired_asks,
    "list_expired_asks_across_scopes": r_list_expired_asks_across_scopes,
    "list_pending_asks_by_conversation": r_list_pending_asks_by_conversation,
}

_HOMES = {"create_conversation": "conversation", "create_delivery": "delivery",
          "create_pending_ask": "ask", "record_message": "message"}


def observe(m: Any, op: Op, got: Outcome) -> None:
    """Remember what the backend returned: the tokens it issued (for later
    binds and finishes) and where each created row lives (for the views)."""
    if not got.ok:
        return
    raw = got.raw
    token = getattr(raw, "claim_token", None)
    if isinstance(token, str):
        pair = (raw.id, token)
        held = _known(m, "a2a-held")
        if pair not in held:
            held.append(pair)
    kind = _HOMES.get(op.method)
    if kind is not None:
        key = raw.reply_with if kind == "ask" else raw.id
        homes = _known(m, "a2a-home")
        if (kind, key) not in {(k, x) for k, x, _ in homes}:
            homes.append((kind, key, op.ctx))


_GETTERS = {"conversation": "get_conversation", "delivery": "get_delivery", "ask": "get_pending_ask",
            "message": "get_message"}


def views(ctxs: list, known: dict[str, list]) -> dict[str, Op]:
    """Whole-state views (MACH-DIFF-2): the lists from the pool's roots, the
    scope-ignoring lists of both partitions, and every created row read back
    by key from where it was created (which shows in-flight deliveries and
    their tokens)."""
    from cortex_spec.testing import FAR_FUTURE

    out: dict[str, Op] = {}
    for c in ctxs:
        scope = c.scope.canonical()
        out[f"a2a.list_messages@{scope}"] = make_op("list_messages", c, keys=None)
        out[f"a2a.list_conversations@{scope}"] = make_op("list_conversations", c, keys=None)
    for root in ("ws=w1", "ws=w10"):
        out[f"a2a.list_inbox@{root}"] = make_op("list_inbox", ctx_of(root), "worker", keys=None)
    for partition in ("", "orch-1"):
        anywhere = Context(Scope(), partition)
        out[f"a2a.list_queued_deliveries#{partition}"] = make_op("list_queued_deliveries", anywhere, keys=None)
        out[f"a2a.list_expired_asks_across_scopes#{partition}"] = make_op(
            "list_expired_asks_across_scopes", anywhere, FAR_FUTURE, keys=None)
    for kind, key, c in known.get("a2a-home", [])[:10]:
        out[f"a2a.{_GETTERS[kind]}[{key}]"] = make_op(_GETTERS[kind], c, key, keys=None)
    return out


# -- the split model of reclaim (A2A-RCL-8) ---------------------------------------------------


class ReclaimSplit:
    """``reclaim_stale_deliveries`` as a selection step and one step per
    candidate (see the module docstring).  Progress: ``(candidates, next
    index, moved so far)`` with candidates ``((id, token), ...)``."""

    def first(self, store: Any, op: Op) -> Hashable:
        candidates = store._select_stale(op.ctx, *op.args, **dict(op.kwargs))
        return (tuple(candidates), 0, 0)

    def next(self, store: Any, op: Op, progress: Any) -> Hashable:
        candidates, i, moved = progress
        delivery_id, token = candidates[i]
        moved += int(store._move_stale(op.ctx, op.args[0], delivery_id, token))
        return (candidates, i + 1, moved)

    def done(self, progress: Any) -> bool:
        return progress[1] == len(progress[0])

    def result(self, progress: Any) -> int:
        return progress[2]

    def viable(self, progress: Any, observed: Outcome) -> bool:
        count = observed.raw if observed.ok else None
        if not isinstance(count, int) or isinstance(count, bool):
            return False
        candidates, i, moved = progress
        return moved <= count <= moved + len(candidates) - i


SPLITS = {"reclaim_stale_deliveries": ReclaimSplit()}


# -- concurrent scenarios: the world -------------------------------------------------------------


@attrs.frozen
class A2AWorld:
    """The a2a rows of a scenario (ids are deterministic)."""

    t0: datetime
    #: the conversation senders race on: ``ceiling`` hops, ``used`` spent by the setup
    conv: str
    ceiling: int
    used: tuple[str, ...]
    #: a conversation paired with peer thread ("node-a", "t1")
    conv_peer: str
    spare_convs: tuple[str, str]
    #: message ids the races may record
    msgs: tuple[str, ...]
    #: deliveries: queued; claimed at t0 - 2 s (stale for a cut after it);
    #: claimed at t0; delivered; and one of the other partition, claimed at t0 - 2 s
    queued: str
    stale: str
    fresh: str
    done: str
    foreign: str
    spare_delivery: str
    #: asks: deadline exactly t0; a drawn deadline; none; one of the other partition
    ask_due: str
    ask_other: str
    other_deadline: datetime | None
    ask_none: str
    foreign_ask: str
    spare_ask: str

    @property
    def older_thans(self) -> list[datetime]:
        stale_at = self.t0 - timedelta(seconds=2)
        return [stale_at - timedelta(days=1), stale_at, stale_at + timedelta(milliseconds=1), self.t0,
                self.t0 + timedelta(milliseconds=1)]


OTHER_DEADLINES = (None, -timedelta(days=1), -timedelta(milliseconds=1), timedelta(0),
                   timedelta(milliseconds=1), timedelta(seconds=5))


def world(draw: Any, w: World, size: int, live: bool) -> A2AWorld:
    t0 = w.t0
    ceiling = draw(st.integers(1, 3))
    used = draw(st.integers(0, ceiling - 1))
    offset = draw(sampled(OTHER_DEADLINES))
    return A2AWorld(
        t0=t0,
        conv=fixed_id(ids.CONVERSATION, 300),
        ceiling=ceiling,
        used=tuple(fixed_id(ids.MESSAGE, 300 + i) for i in range(used)),
        conv_peer=fixed_id(ids.CONVERSATION, 301),
        spare_convs=(fixed_id(ids.CONVERSATION, 398), fixed_id(ids.CONVERSATION, 399)),
        msgs=tuple(fixed_id(ids.MESSAGE, 350 + i) for i in range(4)),
        queued=fixed_id(ids.DELIVERY, 300),
        stale=fixed_id(ids.DELIVERY, 301),
        fresh=fixed_id(ids.DELIVERY, 302),
        done=fixed_id(ids.DELIVERY, 303),
        foreign=fixed_id(ids.DELIVERY, 304),
        spare_delivery=fixed_id(ids.DELIVERY, 399),
        ask_due="rw-due",
        ask_other="rw-other",
        other_deadline=None if offset is None else t0 + offset,
        ask_none="rw-none",
        foreign_ask="rw-foreign",
        spare_ask="rw-spare",
    )


def _exact(partition: str = "") -> Context:
    return Context(Scope.parse(ROLES["exact"]), partition)


def _envelope(w: A2AWorld, mid: str, sender: Address = PLANNER) -> Envelope:
    return Envelope(id=mid, conversation_id=w.conv, performative="request", sender=sender,
                    receivers=(WORKER,), content="do it", metadata={"n": 1})


def _ask(rw: str, w: A2AWorld, deadline: datetime | None) -> PendingAsk:
    return PendingAsk(reply_with=rw, conversation_id=w.conv, message_id=fixed_id(ids.MESSAGE, 300),
                      asker_run_id=RUNS[0], asker_agent="planner", tool_call_id="call_1",
                      expected=WORKER, deadline=deadline)


def setup(world_: World) -> list:
    """The setup of a scenario's a2a rows (with clock ticks: claims at
    t0 - 2 s and at t0)."""
    w: A2AWorld = world_[NAME]
    e, f = _exact(), _exact(OTHER_PARTITION)
    steps: list = [Tick(w.t0 - timedelta(seconds=2))]
    steps.append(make_op("create_conversation", e,
                         Conversation(id=w.conv, initiator=PLANNER, participants=(PLANNER,),
                                      hop_ceiling=w.ceiling), keys=[conv_key(w.conv)]))
    steps.append(make_op("create_conversation", e,
                         Conversation(id=w.conv_peer, peer_node="node-a", peer_context="t1"),
                         keys=[conv_key(w.conv_peer), *peer_keys("node-a", "t1")]))
    for mid in w.used:
        steps.append(make_op("record_message", e, _envelope(w, mid), keys=[conv_key(w.conv), msg_key(mid)]))
    message = fixed_id(ids.MESSAGE, 300)
    for did in (w.queued, w.stale, w.fresh, w.done):
        steps.append(make_op("create_delivery", e, Delivery(id=did, message_id=message, receiver=WORKER),
                             keys=[dlv_key(did)]))
    steps.append(make_op("claim_delivery", e, w.stale, keys=[dlv_key(w.stale)], binds="claim_token"))
    steps.append(make_op("claim_delivery", e, w.done, keys=[dlv_key(w.done)], binds="claim_token"))
    steps.append(make_op("finish_delivery", e, w.done, HeldToken(w.done), "delivered", keys=[dlv_key(w.done)]))
    for rw, deadline in ((w.ask_due, w.t0), (w.ask_other, w.other_deadline), (w.ask_none, None)):
        steps.append(make_op("create_pending_ask", e, _ask(rw, w, deadline), keys=[ask_key(rw)]))
    steps.append(make_op("create_delivery", f, Delivery(id=w.foreign, message_id=message, receiver=WORKER),
                         keys=[dlv_key(w.foreign)]))
    steps.append(make_op("claim_delivery", f, w.foreign, keys=[dlv_key(w.foreign)], binds="claim_token"))
    steps.append(make_op("create_pending_ask", f, _ask(w.foreign_ask, w, w.t0 - timedelta(days=1)),
                         keys=[ask_key(w.foreign_ask)]))
    steps.append(Tick(w.t0))
    steps.append(make_op("claim_delivery", e, w.fresh, keys=[dlv_key(w.fresh)], binds="claim_token"))
    return steps


# -- concurrent scenarios: calls ------------------------------------------------------------------


def _role(draw: Any, roles: tuple[str, ...] = ("exact", "exact", "ancestor")) -> Context:
    return ctx_of(ROLES[draw(sampled(roles))])


def _claim(draw, w, did, label="", roles=("exact", "exact", "ancestor")):
    return make_op("claim_delivery", _role(draw, roles), did, keys=[dlv_key(did)], label=label)


def _finish(draw, w, did, label="", c=None):
    state = draw(sampled(("delivered", "failed")))
    return make_op("finish_delivery", c or _role(draw), did, HeldToken(did), state, "",
                   keys=[dlv_key(did)], label=label)


def _bind(draw, w, did, run, label="", c=None):
    return make_op("bind_delivery_run", c or _role(draw), did, HeldToken(did), run, keys=[dlv_key(did)],
                   label=label)


def _reclaim(draw, w, label="", partition=""):
    return make_op("reclaim_stale_deliveries", Context(Scope(), partition),
                   draw(sampled(w.older_thans)), draw(sampled((0, 1))), keys=None, label=label)


def _send(draw, w, label="", mid=None):
    mid = mid or draw(sampled(w.msgs))
    return make_op("record_message", _role(draw), _envelope(w, mid), keys=[conv_key(w.conv), msg_key(mid)],
                   label=label)


def _claim_ask(draw, w, rw, label="", roles=("exact", "exact", "ancestor")):
    return make_op("claim_pending_ask", _role(draw, roles), rw, keys=[ask_key(rw)], label=label)


def _instants(w: A2AWorld) -> st.SearchStrategy[datetime]:
    points = [w.t0] + ([w.other_deadline] if w.other_deadline is not None else [])
    return instants_around(points)


def _expired_list(draw, w, label=""):
    now = draw(_instants(w))
    if draw(st.booleans()):
        return make_op("list_expired_asks_across_scopes", ctx_of(ROLES["other"]), now, 0, keys=None, label=label)
    return make_op("list_expired_asks", _role(draw), now, 0, keys=None, label=label)


def _mark_read(draw, w, label=""):
    return make_op("mark_delivery_read", _role(draw), w.done, keys=[dlv_key(w.done)], label=label)


def _inbox(draw, w, label=""):
    kwargs = {"unread_only": draw(st.booleans())}
    if draw(st.booleans()):  # through the messages (A2A-INBOX-4): one snapshot of two tables
        kwargs["conversation_id"] = w.conv
    return make_op("list_inbox", _role(draw), "worker", keys=None, label=label, kwargs=kwargs)


def _conversation_state(draw, w, label=""):
    """A reader of what an admission changes: the conversation's charge, or
    the envelopes (a torn admission shows one without the other)."""
    if draw(st.booleans()):
        return make_op("get_conversation", _role(draw), w.conv, keys=[conv_key(w.conv)], label=label)
    return make_op("list_messages", _role(draw), keys=None, label=label, kwargs={"conversation_id": w.conv})


def _queue(draw, w, label="", partition=""):
    return make_op("list_queued_deliveries", Context(Scope(), partition), 0, keys=None, label=label)


def racing_ops(world_: World) -> list[Callable[[Any], Op]]:
    """Calls for mixed scenarios: claims, finishes and binds under held
    tokens, reclaims, ask claims and sweeps, sends, read marks, queue and
    inbox reads.  Each builder takes Hypothesis' ``draw``."""
    w: A2AWorld | None = world_.get(NAME)
    if w is None:
        return []
    deliveries = (w.queued, w.stale, w.fresh)
    return [
        lambda draw: _claim(draw, w, draw(sampled(deliveries))),
        lambda draw: _finish(draw, w, draw(sampled((w.stale, w.fresh)))),
        lambda draw: _bind(draw, w, draw(sampled((w.stale, w.fresh))), draw(sampled(RUNS))),
        lambda draw: _reclaim(draw, w),
        lambda draw: _claim_ask(draw, w, draw(sampled((w.ask_due, w.ask_other)))),
        lambda draw: _expired_list(draw, w),
        lambda draw: _send(draw, w),
        lambda draw: _conversation_state(draw, w),
        lambda draw: _mark_read(draw, w),
        lambda draw: _queue(draw, w) if draw(st.booleans()) else _inbox(draw, w),
    ]


def storm_ops(world_: World) -> list[Callable[[Any], Op]]:
    """Storms: every branch claims the queued delivery, claims one ask, sends
    on the small conversation, or marks the delivered row read."""
    w: A2AWorld | None = world_.get(NAME)
    if w is None:
        return []
    return [
        lambda draw: _claim(draw, w, w.queued),
        lambda draw: _claim_ask(draw, w, w.ask_due),
        lambda draw: _send(draw, w),
        lambda draw: _mark_read(draw, w),
    ]


# -- the A2A-RACE family ------------------------------------------------------------------------------


def _lanes(draw: Any, low: int = 2, high: int = 4) -> int:
    return draw(st.integers(low, high))


def _race1(draw, w):
    roles = ("exact", "exact", "ancestor", "sibling")
    return [(_claim(draw, w, w.queued, "RACE-1", roles),) for _ in range(_lanes(draw))]


def _race2(draw, w):
    lanes = [(_finish(draw, w, w.stale, "RACE-2"),), (_reclaim(draw, w, "RACE-2"),)]
    if draw(st.booleans()):
        lanes.append((make_op("get_delivery", _role(draw), w.stale, keys=[dlv_key(w.stale)], label="RACE-2"),))
    return lanes


def _race3(draw, w):
    worker = (_claim(draw, w, w.stale, "RACE-3"), _claim(draw, w, w.stale, "RACE-3"),
              _finish(draw, w, w.stale, "RACE-3"))
    return [(_reclaim(draw, w, "RACE-3"),), (_reclaim(draw, w, "RACE-3"),), worker]


def _race4(draw, w):
    return [(_bind(draw, w, w.stale, RUNS[0], "RACE-4"),), (_reclaim(draw, w, "RACE-4"),)]


def _race5(draw, w):
    did = draw(sampled((w.fresh, w.stale)))
    lanes = [(_bind(draw, w, did, RUNS[0], "RACE-5"),), (_bind(draw, w, did, RUNS[1], "RACE-5"),)]
    if draw(st.booleans()):
        lanes.append((_reclaim(draw, w, "RACE-5"),))
    return lanes


def _race6(draw, w):
    n = _lanes(draw)
    lanes = [(_send(draw, w, "RACE-6", w.msgs[i]),) for i in range(n)]
    if draw(st.booleans()):
        lanes.append((_conversation_state(draw, w, "RACE-6"), _conversation_state(draw, w, "RACE-6")))
    return lanes


def _race7(draw, w):
    close = make_op("update_conversation", _role(draw),
                    Conversation(id=w.conv, initiator=PLANNER, status="closed", hop_ceiling=w.ceiling),
                    keys=[conv_key(w.conv)], label="RACE-7")
    return [(close,), (_send(draw, w, "RACE-7", w.msgs[0]),), (_send(draw, w, "RACE-7", w.msgs[1]),)][
        : _lanes(draw, 2, 3)]


def _race8(draw, w):
    c = _role(draw)
    op = make_op("record_message", c, _envelope(w, w.msgs[0]), keys=[conv_key(w.conv), msg_key(w.msgs[0])],
                 label="RACE-8")
    lanes = [(op,) for _ in range(_lanes(draw, 2, 3))]
    if draw(st.booleans()):
        lanes.append((_conversation_state(draw, w, "RACE-8"), _conversation_state(draw, w, "RACE-8")))
    return lanes


def _race9(draw, w):
    rw = draw(sampled((w.ask_due, w.ask_other, w.ask_none)))
    roles = ("exact", "exact", "ancestor", "sibling")
    if draw(st.booleans()):
        return [(_claim_ask(draw, w, rw, "RACE-9", roles),) for _ in range(_lanes(draw))]
    # the three writers of a waiting ask: a reply claims it; the deadline
    # sweep lists expired asks, then claims; a cancel lists the
    # conversation's pending asks, then claims
    reply = (_claim_ask(draw, w, rw, "reply"),)
    sweep = (make_op("list_expired_asks_across_scopes", Context(Scope()), w.t0, 0, keys=None, label="sweep"),
             _claim_ask(draw, w, rw, "sweep"))
    cancel = (make_op("list_pending_asks_by_conversation", _role(draw), w.conv, keys=None, label="cancel"),
              _claim_ask(draw, w, rw, "cancel"))
    return [reply, sweep, cancel]


def _race10(draw, w):
    return [(_claim_ask(draw, w, w.ask_due, "RACE-10"),), (_expired_list(draw, w, "RACE-10"),),
            (_expired_list(draw, w, "RACE-10"),)]


def _race11(draw, w):
    lanes = [(_mark_read(draw, w, "RACE-11"),) for _ in range(_lanes(draw, 2, 3))]
    lanes.append((make_op("list_inbox", _role(draw), "worker", keys=None, label="RACE-11",
                          kwargs={"unread_only": True}),))
    return lanes


def _race12(draw, w):
    return [(_claim(draw, w, w.queued, "RACE-12"),), (_queue(draw, w, "RACE-12"),),
            (_finish(draw, w, w.fresh, "RACE-12"),), (_inbox(draw, w, "RACE-12"),)]


def _race13(draw, w):
    if draw(st.booleans()):
        scopes = draw(st.lists(sampled(("exact", "sibling", "other", "lookalike")), min_size=2,
                               max_size=3))
        return [(make_op("create_pending_ask", ctx_of(ROLES[r]), _ask(w.spare_ask, w, None),
                         keys=[ask_key(w.spare_ask)], label="RACE-13"),) for r in scopes]
    return [(make_op("create_conversation", _exact(), Conversation(id=cid, peer_node="node-b", peer_context="t9"),
                     keys=[conv_key(cid), *peer_keys("node-b", "t9")], label="RACE-13"),)
            for cid in w.spare_convs]


def _race14(draw, w):
    f = _exact(OTHER_PARTITION)
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return [(_claim(draw, w, w.queued, "RACE-14"),),
                (make_op("claim_delivery", f, w.queued, keys=[dlv_key(w.queued)], label="RACE-14"),),
                (_reclaim(draw, w, "RACE-14", OTHER_PARTITION),), (_queue(draw, w, "RACE-14", OTHER_PARTITION),)]
    if kind == 1:
        return [(_claim_ask(draw, w, w.ask_due, "RACE-14"),),
                (make_op("claim_pending_ask", f, w.ask_due, keys=[ask_key(w.ask_due)], label="RACE-14"),),
                (make_op("claim_pending_ask", f, w.foreign_ask, keys=[ask_key(w.foreign_ask)], label="RACE-14"),),
                (make_op("list_expired_asks_across_scopes", Context(Scope(), OTHER_PARTITION), w.t0, 0, keys=None,
                         label="RACE-14"),)]
    return [(_reclaim(draw, w, "RACE-14"),), (_finish(draw, w, w.foreign, "RACE-14", c=f),),
            (_reclaim(draw, w, "RACE-14", OTHER_PARTITION),)]


def _inbox_vs_read(draw, w):
    """The issue's 'inbox reads vs mark-read' (A2A-RACE-11, A2A-INBOX-3)."""
    return [(_mark_read(draw, w, "RACE-11"),), (_inbox(draw, w, "RACE-11"),), (_inbox(draw, w, "RACE-11"),)]


#: race templates by clause: ``template(draw, world) -> branches``
RACES: dict[str, Callable[[Any, A2AWorld], list]] = {
    "A2A-RACE-1": _race1,
    "A2A-RACE-2": _race2,
    "A2A-RACE-3": _race3,
    "A2A-RACE-4": _race4,
    "A2A-RACE-5": _race5,
    "A2A-RACE-6": _race6,
    "A2A-RACE-7": _race7,
    "A2A-RACE-8": _race8,
    "A2A-RACE-9": _race9,
    "A2A-RACE-10": _race10,
    "A2A-RACE-11": _race11,
    "A2A-RACE-12": _race12,
    "A2A-RACE-13": _race13,
    "A2A-RACE-14": _race14,
}
_TEMPLATES = list(RACES.items()) + [("A2A-RACE-11", _inbox_vs_read)]


def races(draw: Any, world_: World, declared: frozenset[str]) -> Race:
    """One A2A-RACE scenario: the clause it exercises and its branches."""
    w: A2AWorld = world_[NAME]
    clause, template = _TEMPLATES[draw(st.integers(0, len(_TEMPLATES) - 1))]
    return Race((clause,), tuple(tuple(lane) for lane in template(draw, w)))


#: what the A2A-RACE family's test names (any of its scenarios may refute one)
RACE_CLAUSES = tuple(RACES) + ("A2A-RCL-8", "MACH-LIN-2")


# -- crash faults ----------------------------------------------------------------------------------


def _delivery_homes(m: Any) -> list[tuple[str, Context]]:
    return [(key, c) for kind, key, c in m.known.get("a2a-home", []) if kind == "delivery"]


def _carrier_claims(m: Any, data: Any) -> Op:
    """A carrier claims a delivery (a fresh one, or one created earlier)."""
    if not _delivery_homes(m) or data.draw(st.booleans(), "another delivery"):
        fresh = fixed_id(ids.DELIVERY, 50_000 + m.next_id)
        m.next_id += 1
        m.remember("delivery", fresh)
        m.both(make_op("create_delivery", data.draw(m.ctx_choice(), "where"),
                       Delivery(id=fresh, message_id=fixed_id(ids.MESSAGE, 1), receiver=WORKER), keys=None))
    delivery_id, c = data.draw(sampled(tuple(_delivery_homes(m))), "delivery")
    return make_op("claim_delivery", c, delivery_id, keys=None)


def _carrier_died(m: Any, op: Op, got: Outcome) -> None:
    m.known.setdefault("a2a-dead", []).append((op.args[0], op.ctx, got.raw.claim_token))


def _second_claim(m: Any, op: Op, got: Outcome) -> list[Op]:
    return [make_op("claim_delivery", op.ctx, op.args[0], keys=None)]


def _dispatcher_reclaims(m: Any) -> None:
    """The dispatcher reclaims stale deliveries in every partition: it moves
    exactly what the reference moves, and a dead carrier's token no longer
    finishes a reclaimed row."""
    from .differential import Mismatch, compare

    cutoff = m.clock.now() - timedelta(minutes=15)
    for partition in ("", "orch-1"):
        op = attrs.evolve(make_op("reclaim_stale_deliveries", Context(Scope(), partition), cutoff, 0,
                                  keys=None), at=m.clock.now())
        got, want = m.run_both(op)
        m.stats.operations += 1
        compare(op, got, want, "the reclaim after the clock jumped", clause="MACH-CRASH-2")
    for delivery_id, c, token in m.known.get("a2a-dead", []):
        row = m.both(make_op("get_delivery", c, delivery_id, keys=None))
        if row.ok and row.raw.claim_token != token:  # reclaimed (and maybe claimed again)
            late = attrs.evolve(make_op("finish_delivery", c, delivery_id, token, "delivered", keys=None),
                                at=m.clock.now())
            got, want = m.run_both(late)
            compare(late, got, want, "a dead carrier's late finish", clause="MACH-CRASH-2")
            if got.ok:
                raise Mismatch(f"MACH-CRASH-2: the token of a reclaimed claim still finished "
                               f"delivery {delivery_id}", "MACH-CRASH-2")


# -- shared by the machines of the exactly-once classes (a2a_resolutions, a2a_replies, a2a_held) --

#: the page sizes their listings are drawn with: one row, two, past every row, and 0 (refused)
PAGE_LIMITS = (1, 2, 256, 0)

Homes = list[tuple[str, Context]]


def home_or_any(m: Any, data: Any, homes: Homes) -> Context:
    """Half the time the home of a known row, else any caller of the pool."""
    if homes and data.draw(st.booleans(), "at a home"):
        return data.draw(sampled([h for _, h in homes]), "where")
    return _ctx(m, data)


def read_known(m: Any, data: Any, homes: Homes, method: str, fallback: Any) -> Op:
    """``method(ctx, key)`` of a known row at its home (mostly), or of a
    ``fallback`` key drawn anywhere."""
    if homes and data.draw(st.integers(0, 3), "a known row"):
        key, c = data.draw(sampled(homes), "known row")
    else:
        key, c = data.draw(fallback, "key"), _ctx(m, data)
    return make_op(method, c, key, keys=None)


def page_known(m: Any, data: Any, homes: Homes, method: str, cursor: Any) -> Op:
    """``method(ctx, cursor, limit)``: one page of a listing, at a home or anywhere."""
    c = home_or_any(m, data, homes)
    return make_op(method, c, data.draw(cursor, "cursor"), data.draw(sampled(PAGE_LIMITS), "limit"),
                   keys=None)


def home_views(cls: str, homes: Homes, get: str, listing: str, label: str, first: Any) -> dict[str, Op]:
    """Each known row by key at its home, and each home's whole listing
    (``listing(ctx, first, 256)``) as ``cls.label@scope#partition``."""
    out: dict[str, Op] = {}
    for key, c in homes:
        out[f"{cls}.{get}[{key}]"] = make_op(get, c, key, keys=None)
        out[f"{cls}.{label}@{c.scope.canonical()}#{c.partition}"] = make_op(listing, c, first, 256, keys=None)
    return out


def race_family(world_name: str, table: dict[str, Callable[[Any, Any], list]],
                extra: Callable[[str], tuple[str, ...]] = lambda clause: ()) -> Callable[..., Race]:
    """The ``races`` of a family: one clause of ``table`` drawn, its lanes
    built on the world ``world_name`` (with the ``extra`` clauses the race
    also checks)."""

    def races(draw: Any, world_: World, declared: frozenset[str]) -> Race:
        clause = draw(sampled(sorted(table)))
        return Race((clause, *extra(clause)), tuple(tuple(lane) for lane in table[clause](draw, world_[world_name])))

    return races


MACHINES = ClassMachines(
    name=NAME,
    rules=RULES,
    views=views,
    id_kinds=ID_KINDS,
    seed_rules=SEED_RULES,
    opaque_fields=OPAQUE_FIELDS,
    observe=observe,
    splits=SPLITS,
    world=world,
    setup=setup,
    racing_ops=racing_ops,
    storm_ops=storm_ops,
    families=(Family("a2a-races", races, RACE_CLAUSES, weight=1.0, cost=4.0),),
    claims=(Claim("delivery", _carrier_claims, _second_claim, _carrier_died),),
    sweeps=(Sweep("reclaim", (timedelta(minutes=16), timedelta(days=1)), _dispatcher_reclaims),),
    weight=1.0,
    cost=6.0,
)
