"""Machine operations of class ``a2a_held``: differential rules for the
release (its request read from the reference, sometimes pinned to a stale
revision or another pause), the receipt and the agent-reply runs; a
scenario world of one paused asker and its held question; releases racing
each other and the writes of the run that move its revision (an update, a
claim of its pause), seals of the ask and the readers of what a release
writes; the writers that answer a waiting ask (A2A-PAUSE) as scripts; and
a worker that dies before its release is acknowledged (MACH-CRASH-3).
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, Callable

import attrs
from hypothesis import strategies as st

from cortex_spec import ids
from cortex_spec.a2a import Address, Conversation, Envelope, PendingAsk
from cortex_spec.a2a_held import HELD_ASK_METADATA, HeldAskRequest
from cortex_spec.context import Context
from cortex_spec.runs import Run, RunState
from cortex_spec.scope import Scope
from cortex_spec.suspensions import Suspension, SuspensionReason

from .a2a import OTHER_PARTITION, _ctx, _exact, ask_key, conv_key, msg_key
from .a2a import home_views, page_known, race_family, read_known
from .a2a_resolutions import outcome
from .ops import Op, Outcome
from .plugin import ClassMachines, Family, Redo, World
from .runs import AGENTS, run_key
from .world import Script, fixed_id, make_op, sampled

NAME = "a2a_held"
PLANNER, WORKER, CRITIC = Address("planner"), Address("worker"), Address("critic")
RECEIVERS = (WORKER, CRITIC)


# -- differential rules ----------------------------------------------------------------------


def _held_asks(m: Any) -> list[tuple[str, Context]]:
    return list(m.known.get("a2a-held-asks", []))


def _ref(m: Any, method: str, c: Context, *args: Any) -> Any:
    got = m.reference_outcome(make_op(method, c, *args, keys=None))
    return got.raw if got.ok else None


def r_pause_and_hold(m: Any, data: Any) -> Op:
    """A run paused on an agent reply, its held question and the question's
    pending ask (the last call is the rule's op)."""
    n = m.next_id
    m.next_id += 1
    c = _ctx(m, data)
    run, sus, conv, q = (fixed_id(ids.RUN, 90_000 + n), fixed_id(ids.SUSPENSION, 90_000 + n),
                         fixed_id(ids.CONVERSATION, 90_000 + n), fixed_id(ids.MESSAGE, 90_000 + n))
    reason = data.draw(sampled(("agent_reply", "agent_reply", "approval")), "reason")
    marker = data.draw(sampled((True, True, True, "true")), "marker")
    m.both(make_op("create_run", c, Run(id=run, agent_id=AGENTS[0], state=RunState.PAUSED), keys=None))
    m.both(make_op("create_suspension", c, Suspension(id=sus, run_id=run, reason=reason), keys=None))
    m.both(make_op("create_conversation", c, Conversation(id=conv, initiator=PLANNER), keys=None))
    m.both(make_op("record_message", c, Envelope(id=q, conversation_id=conv, performative="request", sender=PLANNER,
                                                 receivers=RECEIVERS[:data.draw(st.integers(1, 2), "receivers")],
                                                 metadata={HELD_ASK_METADATA: marker}), keys=None))
    rw = f"rw-held-{n}"
    m.known.setdefault("a2a-held-asks", []).append((rw, c))
    m.remember("message", q)
    return make_op("create_pending_ask", c, PendingAsk(reply_with=rw, conversation_id=conv, message_id=q,
                                                       asker_run_id=run, asker_agent="planner", expected=WORKER),
                   keys=None)


def _request(m: Any, data: Any) -> tuple[HeldAskRequest, Context]:
    held = _held_asks(m)
    if not held:
        c = _ctx(m, data)
        return HeldAskRequest(run_id=fixed_id(ids.RUN, 1), suspension_id=fixed_id(ids.SUSPENSION, 1), run_revision=1,
                              reply_with="rw-1", delivery_ids=(fixed_id(ids.DELIVERY, 1),)), c
    rw, c = data.draw(sampled(held), "held question")
    ask = _ref(m, "get_pending_ask", c, rw)
    run = _ref(m, "get_run", c, ask.asker_run_id) if ask is not None else None
    sus = _ref(m, "get_suspension", c, ask.asker_run_id) if ask is not None else None
    q = _ref(m, "get_message", c, ask.message_id) if ask is not None else None
    n = len(q.receivers) if q is not None else 1
    base = sum(ord(ch) for ch in rw) * 10  # the same question, the same ids: retries are identical
    req = HeldAskRequest(
        run_id=ask.asker_run_id if ask is not None else fixed_id(ids.RUN, 1),
        suspension_id=sus.id if sus is not None else fixed_id(ids.SUSPENSION, 1),
        run_revision=run.revision if run is not None else 1, reply_with=rw,
        delivery_ids=tuple(fixed_id(ids.DELIVERY, 95_000 + base + i) for i in range(n)))
    change = data.draw(sampled(("none", "none", "none", "revision", "ids", "count")), "request")
    if change == "revision":
        req = attrs.evolve(req, run_revision=req.run_revision - 1)
    elif change == "ids":
        req = attrs.evolve(req, delivery_ids=tuple(fixed_id(ids.DELIVERY, 96_000 + m.next_id + i) for i in range(n)))
        m.next_id += 1
    elif change == "count":
        req = attrs.evolve(req, delivery_ids=req.delivery_ids + (fixed_id(ids.DELIVERY, 97_000 + base),))
    return req, c


def r_release(m: Any, data: Any) -> Op:
    req, home = _request(m, data)
    c = home if data.draw(st.integers(0, 4), "at home") else _ctx(m, data)
    return make_op("release_held_ask", c, req, keys=None)


def r_move_the_run(m: Any, data: Any) -> Op | None:
    """A write of a held question's asker: an update that keeps it paused
    (its revision moves) or a claim of its pause."""
    held = _held_asks(m)
    if not held:
        return None
    rw, c = data.draw(sampled(held), "held question")
    ask = _ref(m, "get_pending_ask", c, rw)
    run = _ref(m, "get_run", c, ask.asker_run_id) if ask is not None else None
    if run is None:
        return None
    if data.draw(st.booleans(), "claim"):
        return make_op("claim_suspension", c, run.id, keys=None)
    return make_op("update_run", c, attrs.evolve(run, output=run.output + "."), keys=None)


def r_get_held_ask_release(m: Any, data: Any) -> Op:
    return read_known(m, data, _held_asks(m), "get_held_ask_release", st.just("rw-1"))


def r_list_agent_reply_runs(m: Any, data: Any) -> Op:
    return page_known(m, data, _held_asks(m), "list_agent_reply_runs",
                      sampled((None, fixed_id(ids.RUN, 90_001), fixed_id(ids.RUN, 5))))


RULES = {
    "pause_and_hold": r_pause_and_hold,
    "release_held_ask": r_release,
    "release_held_ask_retry": r_release,
    "move_the_asker": r_move_the_run,
    "get_held_ask_release": r_get_held_ask_release,
    "list_agent_reply_runs": r_list_agent_reply_runs,
}


def views(ctxs: list, known: dict[str, list]) -> dict[str, Op]:
    return home_views(NAME, known.get("a2a-held-asks", [])[:10], "get_held_ask_release", "list_agent_reply_runs",
                      "agent_reply_runs", None)


# -- concurrent scenarios: the world ----------------------------------------------------------


@attrs.frozen
class HeldWorld:
    """One asker run paused on an agent reply, its held question to two
    receivers and the question's pending ask (deadline exactly the race
    instant, so the deadline sweep lists it)."""

    t0: datetime
    run: str
    suspension: str
    conv: str
    question: str
    ask: str
    delivery_ids: tuple[str, ...]
    other_ids: tuple[str, ...]

    @property
    def request(self) -> HeldAskRequest:
        return HeldAskRequest(run_id=self.run, suspension_id=self.suspension, run_revision=1, reply_with=self.ask,
                              delivery_ids=self.delivery_ids)


def world(draw: Any, w: World, size: int, live: bool) -> HeldWorld:
    return HeldWorld(t0=w.t0, run=fixed_id(ids.RUN, 700), suspension=fixed_id(ids.SUSPENSION, 700),
                     conv=fixed_id(ids.CONVERSATION, 700), question=fixed_id(ids.MESSAGE, 700), ask="rw-held",
                     delivery_ids=(fixed_id(ids.DELIVERY, 700), fixed_id(ids.DELIVERY, 701)),
                     other_ids=(fixed_id(ids.DELIVERY, 702), fixed_id(ids.DELIVERY, 703)))


def _ask_entity(w: HeldWorld) -> PendingAsk:
    return PendingAsk(reply_with=w.ask, conversation_id=w.conv, message_id=w.question, asker_run_id=w.run,
                      asker_agent="planner", expected=WORKER, deadline=w.t0)


def setup(world_: World) -> list:
    w: HeldWorld = world_[NAME]
    e = _exact()
    return [
        make_op("create_run", e, Run(id=w.run, agent_id=AGENTS[0], state=RunState.PAUSED), keys=[run_key(w.run)]),
        make_op("create_suspension", e, Suspension(id=w.suspension, run_id=w.run, reason=SuspensionReason.AGENT_REPLY),
                keys=[run_key(w.run)]),
        make_op("create_conversation", e, Conversation(id=w.conv, initiator=PLANNER), keys=[conv_key(w.conv)]),
        make_op("record_message", e, Envelope(id=w.question, conversation_id=w.conv, performative="request",
                                              sender=PLANNER, receivers=RECEIVERS,
                                              metadata={HELD_ASK_METADATA: True}),
                keys=[conv_key(w.conv), msg_key(w.question)]),
        make_op("create_pending_ask", e, _ask_entity(w), keys=[ask_key(w.ask)]),
    ]


# -- concurrent scenarios: calls -------------------------------------------------------------------


def _keys(w: HeldWorld) -> list:
    """A release reads the ask, the question, the run and its pause, and
    writes the question's deliveries."""
    from .a2a import dlv_key

    return [ask_key(w.ask), run_key(w.run), msg_key(w.question), *(dlv_key(d) for d in w.delivery_ids + w.other_ids)]


def _release(w: HeldWorld, label: str = "release", other: bool = False, c: Context | None = None) -> Op:
    req = attrs.evolve(w.request, delivery_ids=w.other_ids) if other else w.request
    return make_op("release_held_ask", c or _exact(), req, keys=_keys(w), label=label)


def _update(w: HeldWorld, label: str = "update") -> Op:
    return make_op("update_run", _exact(), Run(id=w.run, agent_id=AGENTS[0], state=RunState.PAUSED, output="moved"),
                   keys=[run_key(w.run)], label=label)


def _seal(draw: Any, w: HeldWorld, kind: str, label: str = "") -> Op:
    stored = attrs.evolve(_ask_entity(w), scope=Scope.parse("ws=w1/proj=p1"))
    return make_op("seal_ask_resolution", _exact(), stored, outcome(kind, w.conv), keys=[ask_key(w.ask)],
                   label=label or kind)


def _reader(draw: Any, w: HeldWorld, label: str = "reader") -> Op:
    which = draw(st.integers(0, 2))
    if which == 0:
        return make_op("list_agent_reply_runs", _exact(), None, 256, keys=None, label=label)
    if which == 1:
        return make_op("list_queued_deliveries", Context(Scope()), 0, keys=None, label=label)
    return make_op("get_held_ask_release", _exact(), w.ask, keys=[ask_key(w.ask)], label=label)


def racing_ops(world_: World) -> list[Callable[[Any], Op]]:
    w: HeldWorld | None = world_.get(NAME)
    if w is None:
        return []
    return [
        lambda draw: _release(w),
        lambda draw: _release(w, other=True),
        lambda draw: _update(w),
        lambda draw: make_op("claim_suspension", _exact(), w.run, keys=[run_key(w.run)], label="claim"),
        lambda draw: _seal(draw, w, draw(sampled(("reply", "timeout")))),
        lambda draw: _reader(draw, w),
    ]


def storm_ops(world_: World) -> list[Callable[[Any], Op]]:
    """Storms: a worker and its retries release one question."""
    w: HeldWorld | None = world_.get(NAME)
    if w is None:
        return []
    return [lambda draw: _release(w)]


# -- the writers of a waiting ask (A2A-PAUSE), as scripts -----------------------------------------

Call = Callable[[Op], Outcome]


def pause_writer(name: str, call: Call, c: Context, run_id: str, ask: PendingAsk) -> None:
    """One writer of A2A-PAUSE: it seals the ask with its outcome (the sweep
    and the cancel only an ask their list returned) and resumes the run only
    after a fresh seal."""
    keys = [ask_key(ask.reply_with)]
    if name == "sweep":
        due = call(make_op("list_expired_asks_across_scopes", Context(Scope()), ask.deadline, 0, keys=None,
                           label=name))
        if not due.ok or ask.reply_with not in {a.reply_with for a in due.raw}:
            return
        kind = "timeout"
    elif name == "cancel":
        pending = call(make_op("list_pending_asks_by_conversation", c, ask.conversation_id, keys=None, label=name))
        if not pending.ok or ask.reply_with not in {a.reply_with for a in pending.raw}:
            return
        kind = "cancel"
    else:
        kind = "reply"
    sealed = call(make_op("seal_ask_resolution", c, ask, outcome(kind, ask.conversation_id), keys=keys, label=name))
    if not sealed.ok or not sealed.raw.fresh:
        return  # A2A-PAUSE-1: no resume without a fresh seal
    if not call(make_op("claim_suspension", c, run_id, keys=[run_key(run_id)], label=name)).ok:
        return
    if name == "cancel":
        run = call(make_op("get_run", c, run_id, keys=[run_key(run_id)], label=name))
        if run.ok:
            call(make_op("update_run", c, attrs.evolve(run.raw, state=RunState.CANCELLED), keys=[run_key(run_id)],
                         label=name))
    call(make_op("delete_suspension", c, run_id, keys=[run_key(run_id)], label=name))


def _writer(name: str, w: HeldWorld) -> Script:
    from .ops import py

    ask = attrs.evolve(_ask_entity(w), scope=Scope.parse("ws=w1/proj=p1"))
    return Script(name=f"writer {name}", run=functools.partial(_run_writer, name, w.run, ask),
                  source=f"pause_writer({name!r}, call, {py(_exact())}, {w.run!r}, {py(ask)})",
                  imports="from cortex_spec.stateful.a2a_held import pause_writer")


def _run_writer(name: str, run_id: str, ask: PendingAsk, call: Call) -> None:
    pause_writer(name, call, _exact(), run_id, ask)


def _held_race1(draw: Any, w: HeldWorld) -> list:
    lanes = [(_release(w),), (_update(w),)]
    extra = draw(st.lists(sampled(("claim", "retry", "reader")), max_size=2, unique=True))
    for e in extra:
        lanes.append({"claim": (make_op("claim_suspension", _exact(), w.run, keys=[run_key(w.run)], label="claim"),),
                      "retry": (_release(w, "retry"),), "reader": (_reader(draw, w), _reader(draw, w))}[e])
    return lanes


def _held_race2(draw: Any, w: HeldWorld) -> list:
    lanes = [(_release(w),), (_seal(draw, w, draw(sampled(("reply", "timeout")))),)]
    if draw(st.booleans()):
        lanes.append((make_op("claim_pending_ask", _exact(), w.ask, keys=[ask_key(w.ask)], label="legacy"),))
    return lanes


def _held_race3(draw: Any, w: HeldWorld) -> list:
    lanes = [(_release(w),), (_release(w, "retry"),), tuple(_reader(draw, w) for _ in range(draw(st.integers(1, 3))))]
    if draw(st.booleans()):
        lanes.append((_writer(draw(sampled(("reply", "sweep", "cancel"))), w),))
    if draw(st.booleans()):  # a contender in the other partition: the ask is not there
        lanes.append((_release(w, "elsewhere", c=_exact(OTHER_PARTITION)),))
    return lanes


def _held_race4(draw: Any, w: HeldWorld) -> list:
    names = draw(st.lists(sampled(("reply", "reply", "sweep", "cancel")), min_size=2, max_size=3))
    lanes = [(_writer(n, w),) for n in names]
    if draw(st.booleans()):
        lanes.append((_reader(draw, w), _reader(draw, w)))
    return lanes


RACES: dict[str, Callable[[Any, HeldWorld], list]] = {
    "A2A-HELD-RACE-1": _held_race1,
    "A2A-HELD-RACE-2": _held_race2,
    "A2A-HELD-RACE-3": _held_race3,
    "A2A-HELD-RACE-4": _held_race4,
}


races = race_family(NAME, RACES, lambda clause: ("A2A-PAUSE-1", "A2A-PAUSE-2") if clause == "A2A-HELD-RACE-4"
                    else ())


RACE_CLAUSES = (*RACES, "A2A-HELD-7", "A2A-HELD-4", "A2A-PAUSE-1", "A2A-PAUSE-2", "MACH-LIN-2")


# -- crash faults ------------------------------------------------------------------------------------


def _releaser(m: Any, data: Any) -> Op:
    """The release of a freshly held question (the worker that dies after it)."""
    create = r_pause_and_hold(m, data)
    m.both(create)
    ask = create.args[0]
    run = _ref(m, "get_run", create.ctx, ask.asker_run_id)
    sus = _ref(m, "get_suspension", create.ctx, ask.asker_run_id)
    q = _ref(m, "get_message", create.ctx, ask.message_id)
    n = m.next_id
    m.next_id += 1
    req = HeldAskRequest(run_id=run.id, suspension_id=sus.id, run_revision=run.revision, reply_with=ask.reply_with,
                         delivery_ids=tuple(fixed_id(ids.DELIVERY, 98_000 + 10 * n + i) for i in range(len(q.receivers))))
    return make_op("release_held_ask", create.ctx, req, keys=None)


MACHINES = ClassMachines(
    name=NAME,
    rules=RULES,
    views=views,
    seed_rules=("pause_and_hold",),
    world=world,
    setup=setup,
    racing_ops=racing_ops,
    storm_ops=storm_ops,
    families=(Family("a2a-held-races", races, RACE_CLAUSES, weight=0.5, cost=3.0),),
    redos=(Redo("held-release", _releaser, ("A2A-HELD-8", "A2A-HELD-2")),),
    weight=0.4,
    cost=4.0,
)

__all__ = ["MACHINES", "HeldWorld", "pause_writer"]
