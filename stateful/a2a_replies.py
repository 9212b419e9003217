"""Machine operations of class ``a2a_replies``: differential rules for the
commit, the receipt and deferred-recipient discovery; views of the
receipts; a scenario world of bound deliveries of one request; racing
commits against their own retries, late workers (a changed commit, a finish
under the same token, a worker whose claim was reclaimed) and the stale
reclaim, with the readers of what a commit writes (the A2A-REPLY-RACE
family); and a worker that dies between its commit and the acknowledgment
(MACH-CRASH-3, A2A-REPLY-CRASH-1).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Callable

import attrs
from hypothesis import strategies as st

from cortex_spec import ids
from cortex_spec.a2a import Address, Conversation, Delivery, Envelope
from cortex_spec.a2a_replies import ReplyCommit
from cortex_spec.context import Context
from cortex_spec.scope import Scope

from .a2a import OTHER_PARTITION, RUNS, _ctx, _exact, _known, _role, conv_key, dlv_key, msg_key
from .a2a import home_views, page_known, race_family, read_known
from .ops import HeldToken, Op
from .plugin import ClassMachines, Family, Redo, World
from .world import Tick, fixed_id, make_op, optional, sampled

NAME = "a2a_replies"
PLANNER, WORKER, CRITIC = Address("planner"), Address("worker"), Address("critic")
CONTENTS = ("done", "", "rés 😀")


# -- differential rules -------------------------------------------------------------------------


def _delivery_homes(m: Any) -> list[tuple[str, Context]]:
    return [(key, c) for kind, key, c in m.known.get("a2a-home", []) if kind == "delivery"]


def _reply_ids(m: Any, data: Any) -> tuple[str, str]:
    """Fresh reply ids mostly; sometimes ids already taken."""
    if data.draw(st.integers(0, 4), "fresh reply ids") or not m.known.get("message"):
        n = m.next_id
        m.next_id += 1
        return fixed_id(ids.MESSAGE, 60_000 + n), fixed_id(ids.DELIVERY, 60_000 + n)
    return (data.draw(sampled(m.known["message"]), "taken message id"),
            data.draw(sampled([d for d, _ in _delivery_homes(m)] or [fixed_id(ids.DELIVERY, 1)]),
                      "taken delivery id"))


def _bound_run(m: Any, did: str, home: Context | None) -> str | None:
    if home is None:
        return None
    got = m.reference_outcome(make_op("get_delivery", home, did, keys=None))
    return got.raw.run_id if got.ok else None


def r_commit(m: Any, data: Any) -> Op:
    held = _known(m, "a2a-held")
    homes = dict(_delivery_homes(m))
    if held and data.draw(st.integers(0, 4), "a held claim"):
        did, token = data.draw(sampled(held), "claim")
    else:
        did = data.draw(m.id_choice("delivery"), "delivery_id")
        token = data.draw(sampled([t for _, t in held] + ["never-issued"]), "token")
    home = homes.get(did)
    run = _bound_run(m, did, home)
    if run is None or not data.draw(st.integers(0, 4), "the bound run"):
        run = data.draw(sampled(RUNS), "run_id")
    mid, rdid = _reply_ids(m, data)
    commit = ReplyCommit(run_id=run, reply_message_id=mid, reply_delivery_id=rdid,
                         content=data.draw(sampled(CONTENTS), "content"),
                         failed=data.draw(st.booleans(), "failed"))
    c = home if home is not None and data.draw(st.integers(0, 3), "at home") else _ctx(m, data)
    return make_op("commit_reserved_reply", c, did, token, commit, keys=None)


def _prepare(m: Any, data: Any, ceiling: int = 8) -> tuple[Context, str, str, str]:
    """A conversation, a request on it and a claimed delivery of it bound to a
    run, created on both stores: ``(ctx, delivery id, backend token, run)``."""
    n = m.next_id
    m.next_id += 1
    c = _ctx(m, data)
    conv, src, did, run = (fixed_id(ids.CONVERSATION, 70_000 + n), fixed_id(ids.MESSAGE, 70_000 + n),
                           fixed_id(ids.DELIVERY, 70_000 + n), RUNS[n % 2])
    m.both(make_op("create_conversation", c, Conversation(id=conv, initiator=PLANNER, hop_ceiling=ceiling),
                   keys=None))
    m.both(make_op("record_message", c, Envelope(id=src, conversation_id=conv, performative="request",
                                                 sender=PLANNER, receivers=(WORKER,), reply_with=f"rw-{n}"),
                   keys=None))
    m.both(make_op("create_delivery", c, Delivery(id=did, message_id=src, receiver=WORKER), keys=None))
    for mid in (conv, src, did):
        m.remember({"conv": "conversation", "msg": "message", "dlv": "delivery"}[mid.split("_")[0]], mid)
    token = m.both(make_op("claim_delivery", c, did, keys=None)).raw.claim_token
    m.both(make_op("bind_delivery_run", c, did, token, run, keys=None))
    return c, did, token, run


def r_commit_bound(m: Any, data: Any) -> Op:
    """A commit of a freshly bound delivery (so that commits land often)."""
    c, did, token, run = _prepare(m, data, ceiling=data.draw(sampled((2, 8)), "ceiling"))
    mid, rdid = _reply_ids(m, data)
    return make_op("commit_reserved_reply", c, did, token,
                   ReplyCommit(run_id=run, reply_message_id=mid, reply_delivery_id=rdid,
                               content=data.draw(sampled(CONTENTS), "content")), keys=None)


def r_get_reserved_reply(m: Any, data: Any) -> Op:
    return read_known(m, data, _delivery_homes(m), "get_reserved_reply", m.id_choice("delivery"))


def r_list_deferred_recipients(m: Any, data: Any) -> Op:
    return page_known(m, data, _delivery_homes(m), "list_deferred_recipients",
                      optional(m.id_choice("delivery")))


RULES = {
    "commit_reserved_reply": r_commit,
    "commit_reserved_reply_bound": r_commit_bound,
    "get_reserved_reply": r_get_reserved_reply,
    "list_deferred_recipients": r_list_deferred_recipients,
}


def views(ctxs: list, known: dict[str, list]) -> dict[str, Op]:
    homes = [(key, c) for kind, key, c in known.get("a2a-home", [])[:12] if kind == "delivery"]
    return home_views(NAME, homes, "get_reserved_reply", "list_deferred_recipients", "deferred", None)


# -- concurrent scenarios: the world -----------------------------------------------------------


@attrs.frozen
class ReplyWorld:
    """A conversation with ``left`` hops after its request, two deliveries of
    the request bound to runs, one claimed two seconds before the race and
    unbound (stale for a cut after it), and the ids replies may take."""

    t0: datetime
    conv: str
    left: int
    source: str
    bound: tuple[str, str]
    stale: str
    replies: tuple[str, ...]
    reply_deliveries: tuple[str, ...]

    def run_of(self, did: str) -> str:
        return RUNS[self.bound.index(did)] if did in self.bound else RUNS[0]


def world(draw: Any, w: World, size: int, live: bool) -> ReplyWorld:
    return ReplyWorld(
        t0=w.t0,
        conv=fixed_id(ids.CONVERSATION, 500),
        left=draw(st.integers(1, 3)),
        source=fixed_id(ids.MESSAGE, 500),
        bound=(fixed_id(ids.DELIVERY, 500), fixed_id(ids.DELIVERY, 501)),
        stale=fixed_id(ids.DELIVERY, 502),
        replies=tuple(fixed_id(ids.MESSAGE, 550 + i) for i in range(4)),
        reply_deliveries=tuple(fixed_id(ids.DELIVERY, 550 + i) for i in range(4)),
    )


def setup(world_: World) -> list:
    w: ReplyWorld = world_[NAME]
    e = _exact()
    steps: list = [Tick(w.t0 - timedelta(seconds=2))]
    steps.append(make_op("create_conversation", e, Conversation(id=w.conv, initiator=PLANNER, hop_ceiling=1 + w.left),
                         keys=[conv_key(w.conv)]))
    steps.append(make_op("record_message", e, Envelope(id=w.source, conversation_id=w.conv, performative="request",
                                                       sender=PLANNER, receivers=(WORKER, CRITIC), reply_with="rw-src"),
                         keys=[conv_key(w.conv), msg_key(w.source)]))
    for did, receiver in zip((*w.bound, w.stale), (WORKER, CRITIC, WORKER)):
        steps.append(make_op("create_delivery", e, Delivery(id=did, message_id=w.source, receiver=receiver),
                             keys=[dlv_key(did)]))
    steps.append(make_op("claim_delivery", e, w.stale, keys=[dlv_key(w.stale)], binds="claim_token"))
    steps.append(Tick(w.t0))
    for did, run in zip(w.bound, RUNS):
        steps.append(make_op("claim_delivery", e, did, keys=[dlv_key(did)], binds="claim_token"))
        steps.append(make_op("bind_delivery_run", e, did, HeldToken(did), run, keys=[dlv_key(did)]))
    return steps


# -- concurrent scenarios: calls -----------------------------------------------------------------


def _commit(draw: Any, w: ReplyWorld, did: str, i: int | None = None, label: str = "", run: str | None = None,
            content: str = "done", c: Context | None = None) -> Op:
    i = draw(st.integers(0, len(w.replies) - 1)) if i is None else i
    commit = ReplyCommit(run_id=run or w.run_of(did), reply_message_id=w.replies[i],
                         reply_delivery_id=w.reply_deliveries[i], content=content)
    return make_op("commit_reserved_reply", c or _exact(), did, HeldToken(did), commit,
                   keys=[dlv_key(did), conv_key(w.conv), msg_key(w.replies[i]), dlv_key(w.reply_deliveries[i])],
                   label=label)


def _reader(draw: Any, w: ReplyWorld, label: str = "") -> Op:
    which = draw(st.integers(0, 4))
    did = draw(sampled((*w.bound, w.stale)))
    if which == 0:
        return make_op("list_deferred_recipients", _exact(), None, 256, keys=None, label=label)
    if which == 1:
        return make_op("get_reserved_reply", _role(draw), did, keys=[dlv_key(did)], label=label)
    if which == 2:
        return make_op("get_conversation", _role(draw), w.conv, keys=[conv_key(w.conv)], label=label)
    if which == 3:
        return make_op("list_queued_deliveries", Context(Scope()), 0, keys=None, label=label)
    return make_op("get_delivery", _role(draw), did, keys=[dlv_key(did)], label=label)


def _reclaim(draw: Any, w: ReplyWorld, label: str = "") -> Op:
    older_than = draw(sampled((w.t0 - timedelta(seconds=2), w.t0 - timedelta(seconds=2) +
                                       timedelta(milliseconds=1), w.t0)))
    return make_op("reclaim_stale_deliveries", Context(Scope()), older_than, 0, keys=None, label=label)


def racing_ops(world_: World) -> list[Callable[[Any], Op]]:
    w: ReplyWorld | None = world_.get(NAME)
    if w is None:
        return []
    return [
        lambda draw: _commit(draw, w, draw(sampled(w.bound))),
        lambda draw: _commit(draw, w, w.bound[0], 0),
        lambda draw: make_op("bind_delivery_run", _exact(), w.stale, HeldToken(w.stale), RUNS[0],
                             keys=[dlv_key(w.stale)]),
        lambda draw: _commit(draw, w, w.stale, run=RUNS[0]),
        lambda draw: make_op("finish_delivery", _exact(), (d := draw(sampled(w.bound))), HeldToken(d),
                             "delivered", "", keys=[dlv_key(d)]),
        lambda draw: _reclaim(draw, w),
        lambda draw: _reader(draw, w),
    ]


def storm_ops(world_: World) -> list[Callable[[Any], Op]]:
    """Storms: a worker and its retries commit one request; commits of one
    delivery with different requests."""
    w: ReplyWorld | None = world_.get(NAME)
    if w is None:
        return []
    return [
        lambda draw: _commit(draw, w, w.bound[0], 0, "retry"),
        lambda draw: _commit(draw, w, w.bound[0]),
    ]


def _race1(draw: Any, w: ReplyWorld) -> list:
    lanes = [(_commit(draw, w, w.bound[0], 0, "worker"),), (_commit(draw, w, w.bound[0], 0, "retry"),)]
    if draw(st.booleans()):
        lanes.append((_reader(draw, w, "reader"), _reader(draw, w, "reader")))
    return lanes


def _race2(draw: Any, w: ReplyWorld) -> list:
    did = w.bound[0]
    late = {
        "changed": (_commit(draw, w, did, 1, "changed", content="other"),),
        "finish": (make_op("finish_delivery", _exact(), did, HeldToken(did), "failed", "late",
                           keys=[dlv_key(did)], label="finish"),),
        # the setup's claim on the stale row is reclaimed and claimed again;
        # its holder commits with the dead token
        "reclaimed": (make_op("bind_delivery_run", _exact(), w.stale, HeldToken(w.stale), RUNS[0],
                              keys=[dlv_key(w.stale)], label="late worker"),
                      _commit(draw, w, w.stale, 2, "late worker", run=RUNS[0])),
        "reclaimer": (_reclaim(draw, w, "reclaimer"),
                      make_op("claim_delivery", _exact(), w.stale, keys=[dlv_key(w.stale)], label="reclaimer")),
    }
    names = draw(st.lists(sampled(sorted(late)), min_size=1, max_size=3, unique=True))
    return [(_commit(draw, w, did, 0, "worker"),)] + [late[n] for n in names]


def _race3(draw: Any, w: ReplyWorld) -> list:
    worker = (make_op("bind_delivery_run", _exact(), w.stale, HeldToken(w.stale), RUNS[1], keys=[dlv_key(w.stale)],
                      label="worker"), _commit(draw, w, w.stale, 0, "worker", run=RUNS[1]))
    lanes = [worker, (_reclaim(draw, w, "reclaim"),)]
    if draw(st.booleans()):
        lanes.append((make_op("list_deferred_recipients", _exact(), None, 256, keys=None, label="discovery"),))
    return lanes


def _race4(draw: Any, w: ReplyWorld) -> list:
    lanes = [(_commit(draw, w, w.bound[0], 0, "first"),), (_commit(draw, w, w.bound[1], 1, "second"),)]
    lanes.append(tuple(_reader(draw, w, "reader") for _ in range(draw(st.integers(1, 3)))))
    if draw(st.booleans()):
        lanes.append((make_op("record_message", _exact(), Envelope(
            id=w.replies[3], conversation_id=w.conv, performative="inform", sender=CRITIC, receivers=(PLANNER,)),
            keys=[conv_key(w.conv), msg_key(w.replies[3])], label="send"),))
    if draw(st.booleans()):  # a contender in the other partition sees nothing
        lanes.append((_commit(draw, w, w.bound[0], 2, "elsewhere", c=_exact(OTHER_PARTITION)),))
    return lanes


RACES: dict[str, Callable[[Any, ReplyWorld], list]] = {
    "A2A-REPLY-RACE-1": _race1,
    "A2A-REPLY-RACE-2": _race2,
    "A2A-REPLY-RACE-3": _race3,
    "A2A-REPLY-RACE-4": _race4,
}


races = race_family(NAME, RACES)


RACE_CLAUSES = (*RACES, "A2A-REPLY-6", "A2A-REPLY-7", "A2A-HOP-10", "MACH-LIN-2")


# -- crash faults ----------------------------------------------------------------------------------


def _committer(m: Any, data: Any) -> Op:
    """A commit of a freshly bound delivery (the worker that dies after it)."""
    c, did, token, run = _prepare(m, data)
    n = m.next_id
    m.next_id += 1
    return make_op("commit_reserved_reply", c, did, token,
                   ReplyCommit(run_id=run, reply_message_id=fixed_id(ids.MESSAGE, 80_000 + n),
                               reply_delivery_id=fixed_id(ids.DELIVERY, 80_000 + n),
                               content=data.draw(sampled(CONTENTS), "content"),
                               failed=data.draw(st.booleans(), "failed")), keys=None)


MACHINES = ClassMachines(
    name=NAME,
    rules=RULES,
    views=views,
    seed_rules=("commit_reserved_reply_bound",),
    world=world,
    setup=setup,
    racing_ops=racing_ops,
    storm_ops=storm_ops,
    families=(Family("a2a-reply-races", races, RACE_CLAUSES, weight=0.5, cost=3.0),),
    redos=(Redo("reserved-reply", _committer, ("A2A-REPLY-CRASH-1", "A2A-REPLY-7")),),
    weight=0.4,
    cost=4.0,
)

__all__ = ["MACHINES", "ReplyWorld"]
