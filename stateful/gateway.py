"""Machine operations of class ``gateway``, and the gateway driver model of
the crash machine.

Class module (see :mod:`.classes`).  Gateway methods live on the object
``open_gateway(location)`` returns, not on the store, so every op built here
has ``target = "gateway"`` and runs on the session's gateway
(:class:`.ops.Session`); :class:`GatewayHandle` opens it on a fresh location
of the harness and reopens it after a restart, and :func:`reference_target`
gives the reference model's gateway, which keeps its tables on the same
:class:`MemoryMedium` as the rest of the reference state (so the
linearizability model clones and fingerprints them like any other table).

* ``RULES`` / ``views``: every gateway method for the differential machine,
  with channels, message ids and conversations from small pools (case
  look-alikes included), contexts from the whole pool plus the zero scope
  (GW-SCOPE-2), and instants around the ones already used;
* ``world`` / ``setup`` / ``storm_ops`` / ``racing_ops``: the
  GW-RACE families of the concurrent machine — one inbox key in a drawn
  status and receipt time, and a drawn race kind (accept storms, accept
  against prune, set_replied against mark_done, two replies, mark_done
  against prune, queue reads against transitions), a selection key and an
  offset channel;
* :class:`GatewayDriverMachine`: the crash machine's model gateway
  (GW-CRASH-1..10), run by :func:`cortex_spec.stateful.crash.run_gateway_crash`.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from datetime import datetime, timedelta
from typing import Any, Callable

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from cortex_spec.clock import EPOCH
from cortex_spec.context import Context
from cortex_spec.errors import StoreLocked
from cortex_spec.gateway import InboundMessage, InboxItem, ItemStatus
from cortex_spec.harness import Harness
from cortex_spec.scope import Scope

from .ops import Op, Outcome, normalize, outcome_of
from .stats import MachineStats
from .world import instants_around, make_op

NAME = "gateway"
#: the session target gateway ops run on
TARGET = "gateway"
#: the gateway invents no TypeIDs: keys are provider strings
ID_KINDS: dict[str, str] = {}

ZERO = Context(Scope())
CHANNELS = ("tg", "sms", "TG")
MESSAGE_IDS = ("m1", "m2", "M1", "m1 ")
CONVERSATIONS = ("c1", "c2")
NAMES = ("", "a1", "a2")
TEXTS = ("hi", "hello there", "", "ünïcode ✓")
REPLIES = ("r1", "r2", "")


def gw_op(method: str, ctx: Context, *args: Any, keys: Any, label: str = "") -> Op:
    return make_op(method, ctx, *args, keys=keys, label=label, target=TARGET)


def item_key(channel: str, message_id: str) -> tuple[str, str, str]:
    return ("gw-item", channel, message_id)


def offset_key(channel: str) -> tuple[str, str]:
    return ("gw-off", channel)


def selection_key(channel: str, conversation: str) -> tuple[str, str, str]:
    return ("gw-sel", channel, conversation)


# -- session targets ----------------------------------------------------------------------


class GatewayHandle:
    """The gateway a machine session opened: a fresh location of the
    harness, opened through the session's store."""

    def __init__(self, harness: Harness, opener: Any) -> None:
        self.harness = harness
        self.location = harness.new_gateway_location()
        self.obj = opener.open_gateway(self.location)

    def close(self, discard: bool = True) -> None:
        try:
            self.obj.close()
        finally:
            if discard:
                self.harness.discard_gateway_location(self.location)

    def reopen(self, opener: Any) -> None:
        """After ``close(discard=False)``: open the same location again."""
        self.obj = opener.open_gateway(self.location)


class _Fixed:
    """A handle that only holds an object (the reference model's gateway)."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def close(self, discard: bool = True) -> None:
        pass

    def reopen(self, opener: Any) -> None:
        pass


def open_target(harness: Harness, store: Any) -> GatewayHandle:
    return GatewayHandle(harness, store)


def reference_target(store: Any) -> _Fixed:
    """The reference's gateway on the reference store's own medium."""
    from cortex_spec.reference import MemoryGateway

    return _Fixed(MemoryGateway.on_medium(store.medium))


# -- differential rules ---------------------------------------------------------------------


@st.composite
def messages(draw: Any, channel: str, message_id: str) -> InboundMessage:
    return InboundMessage(
        channel=channel,
        message_id=message_id,
        conversation=draw(st.sampled_from(CONVERSATIONS)),
        principal=draw(st.sampled_from(("u1", "u2"))),
        text=draw(st.sampled_from(TEXTS)),
        trusted=draw(st.booleans()),
        agent=draw(st.sampled_from(NAMES)),
        project=draw(st.sampled_from(NAMES)),
    )


def _key(m: Any, data: Any, allow_empty: bool = True) -> tuple[str, str]:
    mids = MESSAGE_IDS + (("",) if allow_empty else ())
    known = [k for k in m.known.get("gw-key", [])]
    fresh = st.tuples(st.sampled_from(CHANNELS), st.sampled_from(mids))
    choice = st.one_of(st.sampled_from(known), fresh) if known else fresh
    return data.draw(choice, "key")


def r_accept(m, data):
    channel, mid = _key(m, data)
    if mid:
        m.remember("gw-key", (channel, mid))
    now = data.draw(m.instant_choice(), "now")
    m.remember_instant(now)
    msg = data.draw(messages(channel, mid), "message")
    return gw_op("accept", data.draw(m.ctx_choice(zero=True), "ctx"), msg, now,
                 keys=[item_key(channel, mid)])


def _by_key(method: str, *extra: Callable[[Any], Any]) -> Callable:
    def rule_(m, data):
        channel, mid = _key(m, data)
        args = [data.draw(strategy, f"arg{i}") for i, strategy in enumerate(extra)]
        return gw_op(method, data.draw(m.ctx_choice(zero=True), "ctx"), channel, mid, *args,
                     keys=[item_key(channel, mid)])

    rule_.__name__ = f"r_{method}"
    return rule_


def _queue(method: str) -> Callable:
    def rule_(m, data):
        limit = data.draw(st.sampled_from([0, 0, 1, 2, -1]), "limit")
        offset = data.draw(st.sampled_from([0, 0, 1, -2]), "offset")
        return gw_op(method, data.draw(m.ctx_choice(zero=True), "ctx"), limit, offset, keys=None)

    rule_.__name__ = f"r_{method}"
    return rule_


def r_prune_done(m, data):
    before = data.draw(m.instant_choice(), "before")
    return gw_op("prune_done", data.draw(m.ctx_choice(zero=True), "ctx"), before, keys=None)


def r_offset(m, data):
    channel = data.draw(st.sampled_from(CHANNELS), "channel")
    return gw_op("offset", data.draw(m.ctx_choice(zero=True), "ctx"), channel, keys=[offset_key(channel)])


def r_set_offset(m, data):
    channel = data.draw(st.sampled_from(CHANNELS), "channel")
    value = data.draw(st.sampled_from([0, 1, 7, -3, 2**63 - 1, 2**63]), "value")
    return gw_op("set_offset", data.draw(m.ctx_choice(zero=True), "ctx"), channel, value,
                 keys=[offset_key(channel)])


def r_conversation(m, data):
    channel = data.draw(st.sampled_from(CHANNELS), "channel")
    conv = data.draw(st.sampled_from(CONVERSATIONS), "conversation")
    return gw_op("conversation", data.draw(m.ctx_choice(zero=True), "ctx"), channel, conv,
                 keys=[selection_key(channel, conv)])


def _set_selection(method: str) -> Callable:
    def rule_(m, data):
        channel = data.draw(st.sampled_from(CHANNELS[:2]), "channel")
        conv = data.draw(st.sampled_from(CONVERSATIONS), "conversation")
        value = data.draw(st.sampled_from(NAMES), "value")
        return gw_op(method, data.draw(m.ctx_choice(zero=True), "ctx"), channel, conv, value,
                     keys=[selection_key(channel, conv)])

    rule_.__name__ = f"r_{method}"
    return rule_


def _one_of(name: str, *rules: Callable) -> Callable:
    """One machine rule that makes one of several calls: the gateway's twelve
    methods come as six rules, so that they do not crowd out the other
    classes' rules in the shared machines."""

    def rule_(m, data):
        return data.draw(st.sampled_from(rules), name)(m, data)

    rule_.__name__ = f"r_{name}"
    return rule_


#: rules the machine runs a few times before anything else (``populate``):
#: inbox rows accepted at one instant, so insertion order decides ties
SEED_RULES = ("gw_accept",)

RULES = {
    "gw_accept": r_accept,
    "gw_set_replied_or_mark_done": _one_of(
        "transition", _by_key("set_replied", st.sampled_from(REPLIES)), _by_key("mark_done")),
    "gw_read": _one_of("read", _by_key("get_item"), _queue("pending"), _queue("pending_replies")),
    "gw_prune_done": r_prune_done,
    "gw_offset": _one_of("offsets", r_offset, r_set_offset),
    "gw_selection": _one_of("selection", r_conversation, _set_selection("set_conversation_agent"),
                            _set_selection("set_conversation_project")),
}


def views(store: Any, ctxs: list, known: dict[str, list]) -> dict[str, Op]:
    """Both queues, every key used so far, the offsets and the selections."""
    out: dict[str, Op] = {
        "gateway.pending": gw_op("pending", ZERO, 0, 0, keys=None),
        "gateway.pending_replies": gw_op("pending_replies", ZERO, 0, 0, keys=None),
    }
    # the queues already show every pending and replied row; done rows only
    # show through get_item
    for channel, mid in known.get("gw-key", [])[:5]:
        out[f"gateway.get_item[{channel!r},{mid!r}]"] = gw_op("get_item", ZERO, channel, mid, keys=None)
    for channel in CHANNELS[:2]:
        out[f"gateway.offset[{channel}]"] = gw_op("offset", ZERO, channel, keys=None)
    for conv in CONVERSATIONS:
        out[f"gateway.conversation[tg,{conv}]"] = gw_op("conversation", ZERO, "tg", conv, keys=None)
    return out


# -- concurrent scenarios (GW-RACE-1..8) ------------------------------------------------------

#: The race kinds a scenario's inbox key is contended by.
RACES = ("accepts", "accept-prune", "reply-done", "replies", "done-prune", "reads")
STATUSES = ("absent", "pending", "replied", "done")
KEY = ("tg", "m1")
OTHER_KEY = ("sms", "m1")
SEL = ("tg", "c1")


@attrs.frozen
class GatewayWorld:
    """The gateway part of a scenario's world (see module docstring)."""

    race: str
    status: str
    received: datetime
    other_status: str
    offset: int | None
    selection: tuple[str, str]


def world(draw: Any, t0: datetime) -> GatewayWorld:
    """The gateway rows a mixed scenario starts from (``world.extras["gateway"]``)."""
    return GatewayWorld(
        race=draw(st.sampled_from(RACES)),
        status=draw(st.sampled_from(STATUSES)),
        received=draw(st.sampled_from([t0 - timedelta(days=1), t0 - timedelta(milliseconds=1), t0])),
        other_status=draw(st.sampled_from(STATUSES)),
        offset=draw(st.sampled_from([None, 5])),
        selection=draw(st.sampled_from([("", ""), ("a0", ""), ("", "p0")])),
    )


def _setup_key(key: tuple[str, str], status: str, received: datetime) -> list[Op]:
    if status == "absent":
        return []
    ops = [gw_op("accept", ZERO, InboundMessage(channel=key[0], message_id=key[1], text="seed",
                                                  agent="a0", project="p0"),
                 received, keys=[item_key(*key)])]
    if status in ("replied", "done"):
        ops.append(gw_op("set_replied", ZERO, *key, "seeded reply", keys=[item_key(*key)]))
    if status == "done":
        ops.append(gw_op("mark_done", ZERO, *key, keys=[item_key(*key)]))
    return ops


def setup(world_: Any) -> list[Op]:
    g: GatewayWorld | None = world_.extras.get(NAME)
    if g is None:
        return []
    ops = _setup_key(KEY, g.status, g.received) + _setup_key(OTHER_KEY, g.other_status, g.received)
    if g.offset is not None:
        ops.append(gw_op("set_offset", ZERO, "tg", g.offset, keys=[offset_key("tg")]))
    agent, project = g.selection
    if agent:
        ops.append(gw_op("set_conversation_agent", ZERO, *SEL, agent, keys=[selection_key(*SEL)]))
    if project:
        ops.append(gw_op("set_conversation_project", ZERO, *SEL, project, keys=[selection_key(*SEL)]))
    return ops


def _contexts() -> st.SearchStrategy[Context]:
    return st.sampled_from([ZERO, Context(Scope.parse("ws=w1/proj=p1")), Context(Scope(), "node-b", "bob")])


def _inbox_builders(g: GatewayWorld, t0: datetime) -> dict[str, Callable[[Any], Op]]:
    cutoffs = instants_around([g.received])
    times = st.sampled_from([t0, t0 + timedelta(milliseconds=1)])

    def accept(draw):
        msg = InboundMessage(channel=KEY[0], message_id=KEY[1],
                             text=draw(st.sampled_from(("copy 1", "copy 2", "copy 3"))),
                             agent=draw(st.sampled_from(NAMES)))
        return gw_op("accept", draw(_contexts()), msg, draw(times), keys=[item_key(*KEY)])

    def prune(draw):
        return gw_op("prune_done", draw(_contexts()), draw(cutoffs), keys=None)

    def set_replied(draw):
        return gw_op("set_replied", draw(_contexts()), *KEY, draw(st.sampled_from(("ra", "rb", "rc"))),
                     keys=[item_key(*KEY)])

    def mark_done(draw):
        return gw_op("mark_done", draw(_contexts()), *KEY, keys=[item_key(*KEY)])

    def read(draw):
        method = draw(st.sampled_from(("pending", "pending_replies", "get_item")))
        if method == "get_item":
            return gw_op("get_item", draw(_contexts()), *KEY, keys=[item_key(*KEY)])
        return gw_op(method, draw(_contexts()), 0, 0, keys=None)

    return {"accept": accept, "prune": prune, "set_replied": set_replied, "mark_done": mark_done,
            "read": read}


#: Which calls contend for the inbox key in each race kind.
RACE_CALLS = {
    "accepts": ("accept",),                                  # GW-RACE-1
    "accept-prune": ("accept", "prune"),                     # GW-RACE-2
    "reply-done": ("set_replied", "mark_done"),              # GW-RACE-3
    "replies": ("set_replied",),                             # GW-RACE-4
    "done-prune": ("mark_done", "prune"),                    # GW-RACE-5
    "reads": ("read", "set_replied", "mark_done"),           # GW-RACE-8
}


def storm_ops(world: Any) -> list[Callable[[Any], Op]]:
    """Storms: every branch contends for the inbox key (the world's race
    kind), for one selection key (GW-RACE-6) or one offset (GW-RACE-7)."""
    g: GatewayWorld | None = world.extras.get(NAME)
    if g is None:
        return []
    builders = _inbox_builders(g, world.t0)
    calls = RACE_CALLS[g.race]

    def inbox(draw):
        return builders[draw(st.sampled_from(calls))](draw)

    def selection(draw):
        value = draw(st.sampled_from(("x1", "x2", "")))
        method = draw(st.sampled_from(("set_conversation_agent", "set_conversation_project",
                                       "set_conversation_agent", "conversation")))
        if method == "conversation":
            return gw_op(method, draw(_contexts()), *SEL, keys=[selection_key(*SEL)])
        return gw_op(method, draw(_contexts()), *SEL, value, keys=[selection_key(*SEL)])

    def offsets(draw):
        if draw(st.integers(0, 3)) == 0:
            return gw_op("offset", draw(_contexts()), "tg", keys=[offset_key("tg")])
        return gw_op("set_offset", draw(_contexts()), "tg", draw(st.sampled_from((1, 2, 3, -1))),
                     keys=[offset_key("tg")])

    return [inbox, selection, offsets]


def racing_ops(world: Any) -> list[Callable[[Any], Op]]:
    """Any gateway call on the scenario's keys."""
    g: GatewayWorld | None = world.extras.get(NAME)
    if g is None:
        return []
    b = _inbox_builders(g, world.t0)
    storms = storm_ops(world)

    def other(draw):
        method = draw(st.sampled_from(("set_replied", "mark_done", "get_item")))
        args = (*OTHER_KEY, "ro") if method == "set_replied" else OTHER_KEY
        return gw_op(method, draw(_contexts()), *args, keys=[item_key(*OTHER_KEY)])

    return [b["accept"], b["prune"], b["set_replied"], b["mark_done"], b["read"], other,
            storms[1], storms[2]]


# -- the gateway driver model of the crash machine (GW-CRASH-1..10) --------------------------


class CrashViolation(AssertionError):
    """A crash property broke; ``cortex_clauses`` names which."""

    def __init__(self, message: str, *clauses: str) -> None:
        super().__init__(message)
        self.cortex_clauses = clauses


def open_gateway_after_death(harness: Harness, open_: Callable[[], Any], location: Any) -> Any:
    """Open ``location`` whose holder died: at once, or — only for a lease
    lock — after the declared lease has run out (GW-OPEN-6, GW-CRASH-9)."""
    try:
        return open_()
    except StoreLocked:
        if harness.gateway_lease is None:
            raise CrashViolation(
                "GW-CRASH-9: the lock of a crashed holder kept the next open out, and the "
                "backend declares no lease", "GW-CRASH-9", "GW-OPEN-6") from None
        harness.expire_gateway_lease(location)
        try:
            return open_()
        except StoreLocked:
            raise CrashViolation(
                "GW-CRASH-9: the lock of a crashed holder still kept the next open out after its "
                f"declared lease ({harness.gateway_lease}s) ran out", "GW-CRASH-9", "GW-OPEN-6") from None


def _outcome(value: Any) -> Outcome:
    return Outcome("ok", normalize(value), raw=value)


class InProcessWorker:
    """The model gateway's store in this process; a crash is the harness's
    crash hook (the reference's medium hook, a closed lock file, ...)."""

    kind = "in-process"

    def __init__(self, harness: Harness, opener: Any, location: Any) -> None:
        self.harness = harness
        self.opener = opener
        self.location = location
        self.gw = open_gateway_after_death(harness, lambda: opener.open_gateway(location), location)

    def call(self, method: str, *args: Any) -> Outcome:
        return outcome_of(lambda: getattr(self.gw, method)(ZERO, *args))

    def crash(self) -> None:
        self.harness.crash_gateway(self.gw)

    def crash_during(self, method: str, *args: Any) -> Outcome:
        """The call and the crash at the same time; the call's thread is
        joined before anything reopens the location."""
        box: list[Outcome] = []
        t = threading.Thread(target=lambda: box.append(self.call(method, *args)), daemon=True)
        t.start()
        time.sleep(random.random() * 0.001)
        self.crash()
        t.join(60)
        if t.is_alive():
            raise CrashViolation(f"{method} hung after its holder crashed", "GW-CRASH-7")
        return box[0]

    def reopen(self) -> "InProcessWorker":
        return InProcessWorker(self.harness, self.opener, self.location)

    def close(self) -> None:
        self.gw.close()


class ChildWorker:
    """The model gateway's store in a child process; a crash is SIGKILL."""

    kind = "child"

    def __init__(self, harness: Harness, location: Any) -> None:
        from cortex_spec.gateway_child import take_child

        self.harness = harness
        self.location = location
        target, args = harness.gateway_child(location)
        self.child = take_child(target, args)
        error = self.child.open()
        if error == "StoreLocked" and harness.gateway_lease is not None:
            harness.expire_gateway_lease(location)  # the declared bound (GW-OPEN-6)
            error = self.child.open()
        if error == "StoreLocked":
            self.child.kill()
            raise CrashViolation("GW-CRASH-9: the lock of a killed child kept the next open out"
                                 + (" past the declared lease" if harness.gateway_lease else ""),
                                 "GW-CRASH-9", "GW-OPEN-6")
        if error is not None:
            self.child.kill()
            raise CrashViolation(f"the child could not open the location: {error}", "GW-OPEN-1")

    def call(self, method: str, *args: Any) -> Outcome:
        kind, value = self.child.call(method, *args)
        if kind == "error":
            return Outcome("error", value)
        return _outcome(value)

    def crash(self) -> None:
        self.child.kill()

    def crash_during(self, method: str, *args: Any) -> Outcome:
        """Send the call and kill the child a moment later: the call may have
        happened or not (the outcome is unknown)."""
        self.child.send(self.child.call_request(method, *args))
        time.sleep(random.random() * 0.003)
        self.child.kill()
        return Outcome("unknown")

    def reopen(self) -> "ChildWorker":
        return ChildWorker(self.harness, self.location)

    def close(self) -> None:
        try:
            self.child.close()
        except Exception:  # noqa: BLE001
            self.child.kill()


@attrs.define
class Life:
    """One life of a key's row, from a fresh accept to its pruning."""

    message: InboundMessage
    received_at: datetime
    number: int
    #: True once accept's True reached the worker (else: adopted after a
    #: killed accept turned out to have happened)
    runs: int = 0
    replied_acked: bool = False
    #: the reply the row holds once replied (known: computed by the job)
    reply: str | None = None
    done_acked: bool = False
    sends: int = 0
    sent_unconfirmed: bool = False
    duplicate_send_allowed: bool = False

    def expected_reply(self) -> str:
        return f"reply to {self.message.channel}/{self.message.message_id} (life {self.number})"


def _step(fn: Callable) -> Callable:
    """Mark a rule in progress, so that teardown knows whether the example
    ended with a violation (then it must not drain and mask it)."""

    @functools.wraps(fn)
    def step(self: "GatewayDriverMachine", *args: Any, **kwargs: Any) -> None:
        self.in_step = True
        fn(self, *args, **kwargs)
        self.in_step = False

    return step


class GatewayDriverMachine(RuleBasedStateMachine):
    """A model gateway driving the store under crashes.

    The provider keeps every message of each channel under increasing update
    ids and redelivers whatever lies past the offset the gateway last
    acknowledged.  The worker polls (``offset`` then ``accept``), acks the
    provider by ``set_offset`` only after ``accept`` returned (GW-CRASH-10),
    runs the first pending job (an effect in the outside world, counted),
    records its reply with ``set_replied``, sends the first pending reply
    (counted) and calls ``mark_done``.  Any of these steps may be followed by
    a crash (the holder dies; the worker's memory is lost) or be killed
    mid-call; every crash reopens the location and checks the stored state
    against what was acknowledged.  At the end everything is drained and
    every message the provider saw acknowledged must have had its job run and
    its reply sent.
    """

    harness: Harness
    stats: MachineStats
    use_child: bool = False

    def __init__(self) -> None:
        super().__init__()
        from cortex_spec.clock import ManualClock

        self.stats.examples += 1
        self.calls = 0
        self.location_store = self.harness.new_location()
        self.opener = self.harness.open(self.location_store, ManualClock())
        self.location = self.harness.new_gateway_location()
        self.worker = self._open()
        self.t = EPOCH + timedelta(days=10)
        #: the provider's messages per channel (update id = index + 1)
        self.provider: dict[str, list[InboundMessage]] = {"tg": [], "sms": []}
        #: the offset acknowledged per channel (the provider's view)
        self.acked_offset: dict[str, int] = {"tg": 0, "sms": 0}
        #: the selection acknowledged per key
        self.selections: dict[tuple[str, str], tuple[str, str]] = {}
        #: live row lives by key
        self.lives: dict[tuple[str, str], Life] = {}
        #: every life ever (the outside world's logs)
        self.history: list[Life] = []
        self.next_life = 1
        # worker memory, lost on every crash
        self.to_ack: dict[str, int] = {}
        self.job: tuple[tuple[str, str], str] | None = None
        self.sending: tuple[str, str] | None = None
        #: True while a rule runs: still True in teardown after a violation
        self.in_step = False
        self.crashes = 0
        self.calls_at_restart = 0

    # -- plumbing -----------------------------------------------------------------------

    def _open(self) -> Any:
        if self.use_child:
            return ChildWorker(self.harness, self.location)
        return InProcessWorker(self.harness, self.opener, self.location)

    def call(self, method: str, *args: Any, clause: str = "GW-CRASH-1") -> Outcome:
        outcome = self.worker.call(method, *args)
        self.calls += 1
        self.stats.operations += 1
        if outcome.kind != "ok":
            raise CrashViolation(f"{method}{args!r} failed on an open store: {outcome.describe()}",
                                 clause, "GW-SCOPE-6")
        return outcome

    def forget_worker_memory(self) -> None:
        self.to_ack.clear()
        self.job = None
        if self.sending is not None:
            life = self.lives.get(self.sending)
            if life is not None and life.sent_unconfirmed:
                life.duplicate_send_allowed = True  # GW-CRASH-5: crash between send and done
        self.sending = None
        for life in self.lives.values():
            if life.sent_unconfirmed:
                life.duplicate_send_allowed = True

    def new_life(self, msg: InboundMessage, received_at: datetime) -> Life:
        life = Life(message=msg, received_at=received_at, number=self.next_life)
        self.next_life += 1
        self.lives[(msg.channel, msg.message_id)] = life
        self.history.append(life)
        return life

    # -- provider and worker rules ---------------------------------------------------------

    @rule(channel=st.sampled_from(["tg", "sms"]), text=st.sampled_from(TEXTS),
          agent=st.sampled_from(NAMES), trusted=st.booleans())
    def provider_receives(self, channel: str, text: str, agent: str, trusted: bool) -> None:
        """A user writes: the provider holds a new message with the next update id."""
        self.stats.rules["provider_receives"] += 1
        n = len(self.provider[channel]) + 1
        self.provider[channel].append(InboundMessage(
            channel=channel, message_id=str(n), conversation="c1", principal="user",
            text=f"{text} #{n}", trusted=trusted, agent=agent, project="p"))

    @rule(channel=st.sampled_from(["tg", "sms"]), step=st.sampled_from([0, 0, 1, 1000]),
          text=st.sampled_from(TEXTS), ack_now=st.booleans())
    @_step
    def poll_and_accept(self, channel: str, step: int, text: str, ack_now: bool) -> None:
        """Poll from the stored offset and accept the next message (a user
        writes one first when nothing waits); the ack waits for a later step
        (a crash in between means redelivery)."""
        self.stats.rules["poll_and_accept"] += 1
        stored = self.call("offset", channel, clause="GW-CRASH-8").raw
        if stored != self.acked_offset[channel]:
            raise CrashViolation(f"GW-CRASH-8: offset of {channel!r} is {stored}, acknowledged "
                                 f"{self.acked_offset[channel]}", "GW-CRASH-8")
        start = max(stored, self.to_ack.get(channel, 0))
        if start >= len(self.provider[channel]):
            self.provider_receives(channel, text, "", True)
        msg = self.provider[channel][start]
        self.t += timedelta(milliseconds=step)
        self.accept(msg)
        self.to_ack[channel] = start + 1
        if ack_now:  # ack what was accepted on the channel, only after accept returned;
            self.ack_provider_now(channel)  # until then a crash means redelivery (GW-CRASH-10)

    def accept(self, msg: InboundMessage) -> None:
        key = (msg.channel, msg.message_id)
        fresh = self.call("accept", msg, self.t, clause="GW-CRASH-2").raw
        live = self.lives.get(key)
        if fresh and live is not None:
            raise CrashViolation(
                f"GW-CRASH-2: accept of {key} returned True although its row (life "
                f"{live.number}) was stored and never pruned", "GW-CRASH-2", "GW-ACC-4")
        if not fresh and live is None:
            raise CrashViolation(f"accept of {key} returned False but no row of it should exist",
                                 "GW-CRASH-1", "GW-ACC-2")
        if fresh:
            self.new_life(msg, self.t)

    @precondition(lambda self: self.job is None)
    @rule()
    @_step
    def run_job(self) -> None:
        """Run the oldest pending job (an effect outside the store)."""
        self.stats.rules["run_job"] += 1
        pending = self.call("pending", 1, 0, clause="GW-CRASH-3").raw
        if not pending:
            return
        item: InboxItem = pending[0]
        key = (item.channel, item.message_id)
        life = self.lives.get(key)
        if life is None:
            raise CrashViolation(f"pending holds {key}, which has no row in the model", "GW-CRASH-1")
        self.check_item(item, life, "a pending row")
        if life.replied_acked:
            raise CrashViolation(
                f"GW-CRASH-3/5: the job of {key} is about to run again although its set_replied "
                "was acknowledged (a finished job must never run twice)", "GW-CRASH-3", "GW-CRASH-5")
        life.runs += 1  # GW-CRASH-6: a second run is legal while set_replied was never acked
        self.job = (key, life.expected_reply())

    @precondition(lambda self: self.job is not None)
    @rule()
    @_step
    def record_reply(self) -> None:
        """``set_replied`` with the finished job's reply."""
        self.stats.rules["record_reply"] += 1
        assert self.job is not None
        key, reply = self.job
        self.job = None
        changed = self.call("set_replied", *key, reply, clause="GW-CRASH-3").raw
        life = self.lives[key]
        if changed:
            life.replied_acked = True
            life.reply = reply

    @precondition(lambda self: self.sending is None)
    @rule()
    @_step
    def send_reply(self) -> None:
        """Send the oldest pending reply (an effect outside the store)."""
        self.stats.rules["send_reply"] += 1
        replies = self.call("pending_replies", 1, 0, clause="GW-CRASH-4").raw
        if not replies:
            return
        item: InboxItem = replies[0]
        key = (item.channel, item.message_id)
        life = self.lives.get(key)
        if life is None:
            raise CrashViolation(f"pending_replies holds {key}, which has no row", "GW-CRASH-1")
        self.check_item(item, life, "a replied row")
        if life.sends and not life.duplicate_send_allowed:
            raise CrashViolation(
                f"GW-CRASH-5: the reply of {key} is sent a second time although no crash came "
                "between its send and mark_done", "GW-CRASH-5", "GW-CRASH-4")
        life.sends += 1
        life.sent_unconfirmed = True
        self.sending = key

    @precondition(lambda self: self.sending is not None)
    @rule()
    @_step
    def confirm_sent(self) -> None:
        """``mark_done`` after the send."""
        self.stats.rules["confirm_sent"] += 1
        assert self.sending is not None
        key = self.sending
        self.sending = None
        changed = self.call("mark_done", *key, clause="GW-CRASH-4").raw
        life = self.lives[key]
        life.sent_unconfirmed = False
        if changed:
            life.done_acked = True

    @rule(field=st.sampled_from(["agent", "project"]), conv=st.sampled_from(CONVERSATIONS),
          value=st.sampled_from(NAMES))
    @_step
    def select(self, field: str, conv: str, value: str) -> None:
        """A conversation's agent or project selection changes."""
        self.stats.rules["select"] += 1
        self.call(f"set_conversation_{field}", "tg", conv, value, clause="GW-CRASH-8")
        agent, project = self.selections.get(("tg", conv), ("", ""))
        self.selections[("tg", conv)] = (value, project) if field == "agent" else (agent, value)

    @rule(back=st.sampled_from([timedelta(0), timedelta(milliseconds=1), timedelta(seconds=2)]))
    @_step
    def prune(self, back: timedelta) -> None:
        """Prune done rows received before a cutoff near the model's now."""
        self.stats.rules["prune"] += 1
        before = self.t - back
        count = self.call("prune_done", before, clause="GW-CRASH-1").raw
        doomed = [k for k, life in self.lives.items()
                  if life.done_acked and life.received_at < before]
        unsure = [k for k, life in self.lives.items()
                  if not life.done_acked and life.received_at < before]
        if not len(doomed) <= count <= len(doomed) + len(unsure):
            raise CrashViolation(f"prune_done deleted {count} rows; {len(doomed)} done rows were due",
                                 "GW-CRASH-1", "GW-PRUNE-1")
        for key in doomed:
            del self.lives[key]
        if count > len(doomed):
            self.resync("prune")

    # -- crashes ----------------------------------------------------------------------------

    def may_crash(self) -> bool:
        """Crash again only after the worker got some work done since the last
        restart, and only a few times per history (a restart of a child
        process costs a process start)."""
        return (self.crashes < (4 if self.use_child else 8)
                and self.calls - self.calls_at_restart >= 3)

    @precondition(lambda self: self.may_crash() and not (self.use_child and self.crashes % 3))
    @rule()
    @_step
    def crash(self) -> None:
        """The holding process dies between two calls; the gateway restarts."""
        self.stats.rules["crash"] += 1
        self.worker.crash()
        self.restart()

    @precondition(lambda self: self.may_crash())
    @rule(what=st.sampled_from(["accept", "set_replied", "mark_done", "select", "set_offset"]))
    @_step
    def crash_during_call(self, what: str) -> None:
        """The holder dies while a write is in flight (GW-CRASH-7)."""
        self.stats.rules["crash_during_call"] += 1
        if what == "accept":
            channel = "tg"
            start = max(self.acked_offset[channel], self.to_ack.get(channel, 0))
            if start >= len(self.provider[channel]):
                self.provider_receives(channel, "late", "", False)
            msg = self.provider[channel][start]
            self.t += timedelta(milliseconds=1)
            self.pending_call = ("accept", msg, self.t)
            self.worker.crash_during("accept", msg, self.t)
        elif what == "set_replied" and self.job is not None:
            key, reply = self.job
            self.pending_call = ("set_replied", key, reply)
            self.worker.crash_during("set_replied", *key, reply)
        elif what == "mark_done" and self.sending is not None:
            self.pending_call = ("mark_done", self.sending)
            self.worker.crash_during("mark_done", *self.sending)
        elif what == "select":
            old = self.selections.get(("tg", "c1"), ("", ""))
            self.pending_call = ("select", old)
            self.worker.crash_during("set_conversation_agent", "tg", "c1", "killed")
        elif what == "set_offset" and "tg" in self.to_ack:
            old, value = self.acked_offset["tg"], self.to_ack["tg"]
            self.pending_call = ("set_offset", old, value)
            self.worker.crash_during("set_offset", "tg", value)
        else:
            self.pending_call = None
            self.worker.crash()
        self.restart()

    def restart(self) -> None:
        self.crashes += 1
        self.forget_worker_memory()
        self.worker = self._open()  # GW-CRASH-9: the dead holder's lock is gone
        self.resolve_killed_call()
        self.check_after_restart()
        self.calls_at_restart = self.calls

    def resolve_killed_call(self) -> None:
        """Learn whether the killed call happened; it must have happened
        entirely or not at all (GW-CRASH-7)."""
        pending, self.pending_call = getattr(self, "pending_call", None), None
        if pending is None:
            return
        kind = pending[0]
        if kind == "accept":
            _, msg, now = pending
            key = (msg.channel, msg.message_id)
            item = self.call("get_item", *key, clause="GW-CRASH-7").raw
            live = self.lives.get(key)
            if item is not None and live is None:
                if (item.received_at != now or item.status != ItemStatus.PENDING
                        or any(getattr(item, f) != getattr(msg, f) for f in _FIELDS)):
                    raise CrashViolation(f"GW-CRASH-7: a killed accept left a partial row {item!r}",
                                         "GW-CRASH-7")
                self.new_life(msg, now)  # it happened; never acked to the provider
        elif kind == "set_replied":
            _, key, reply = pending
            item = self.call("get_item", *key, clause="GW-CRASH-7").raw
            life = self.lives[key]
            if item is not None and item.status == ItemStatus.REPLIED and not life.replied_acked:
                if item.reply != reply:
                    raise CrashViolation(f"GW-CRASH-7: a killed set_replied left reply {item.reply!r}",
                                         "GW-CRASH-7")
                life.replied_acked = True  # it happened: the job is finished for good
                life.reply = reply
        elif kind == "mark_done":
            _, key = pending
            item = self.call("get_item", *key, clause="GW-CRASH-7").raw
            life = self.lives[key]
            if item is not None and item.status == ItemStatus.DONE:
                life.done_acked = True
                life.sent_unconfirmed = False
        elif kind == "select":
            _, old = pending
            got = self.call("conversation", "tg", "c1", clause="GW-CRASH-7").raw
            if got not in (old, ("killed", old[1])):
                raise CrashViolation(f"GW-CRASH-7: a killed selection setter left {got!r} "
                                     f"(before: {old!r})", "GW-CRASH-7")
            self.selections[("tg", "c1")] = got
        elif kind == "set_offset":
            _, old, value = pending
            got = self.call("offset", "tg", clause="GW-CRASH-7").raw
            if got not in (old, value):
                raise CrashViolation(f"GW-CRASH-7: a killed set_offset left {got!r}", "GW-CRASH-7")
            self.acked_offset["tg"] = got  # if it happened, the provider saw the ack

    def resync(self, why: str) -> None:
        """Drop lives whose rows are gone (after a prune that took rows whose
        mark_done outcome was unknown)."""
        for key, life in list(self.lives.items()):
            item = self.call("get_item", *key).raw
            if item is None:
                if not (life.done_acked or life.sends):
                    raise CrashViolation(f"GW-CRASH-1: the row of {key} vanished ({why}) before "
                                         "its reply was sent", "GW-CRASH-1", "GW-PRUNE-2")
                del self.lives[key]

    def check_item(self, item: InboxItem, life: Life, what: str) -> None:
        wrong = [f for f in _FIELDS if getattr(item, f) != getattr(life.message, f)]
        if wrong or item.received_at != life.received_at:
            raise CrashViolation(f"GW-CRASH-1/7: {what} lost fields {wrong or ['received_at']}: "
                                 f"{item!r}", "GW-CRASH-1", "GW-CRASH-7")
        if item.status == ItemStatus.REPLIED and item.reply != life.expected_reply():
            raise CrashViolation(f"GW-CRASH-7: a replied row holds reply {item.reply!r}, expected "
                                 f"{life.expected_reply()!r}", "GW-CRASH-7", "GW-CRASH-4")

    def check_after_restart(self) -> None:
        pending = {(i.channel, i.message_id): i for i in self.call("pending").raw}
        replies = {(i.channel, i.message_id): i for i in self.call("pending_replies").raw}
        for key, life in self.lives.items():
            item = self.call("get_item", *key, clause="GW-CRASH-1").raw
            if item is None:
                raise CrashViolation(f"GW-CRASH-1: the accepted row {key} is gone after a crash",
                                     "GW-CRASH-1")
            self.check_item(item, life, f"row {key} after a crash")
            if life.done_acked:
                want = ItemStatus.DONE
            elif life.replied_acked:
                want = ItemStatus.REPLIED
            else:
                want = item.status if item.status != ItemStatus.DONE else None
            if item.status != want:
                clause = "GW-CRASH-3" if life.replied_acked and item.status == ItemStatus.PENDING else "GW-CRASH-4"
                raise CrashViolation(f"{clause}: after a crash row {key} is {item.status}; "
                                     f"acknowledged: replied={life.replied_acked} "
                                     f"done={life.done_acked}", clause, "GW-CRASH-1")
            if item.status == ItemStatus.REPLIED:
                life.replied_acked = True  # adopt: it is replied for good now
                life.reply = item.reply
            in_pending, in_replies = key in pending, key in replies
            if in_pending != (item.status == ItemStatus.PENDING) or in_replies != (item.status == ItemStatus.REPLIED):
                raise CrashViolation(f"GW-CRASH-3/4: row {key} ({item.status}) is in the wrong "
                                     "queue after a crash", "GW-CRASH-3", "GW-CRASH-4")
        extra = (set(pending) | set(replies)) - set(self.lives)
        if extra:
            raise CrashViolation(f"rows {sorted(extra)} appeared after a crash", "GW-CRASH-7")
        # GW-CRASH-2: a redelivery of a stored key is still a duplicate
        for key, life in list(self.lives.items())[:3]:
            if self.call("accept", life.message, self.t, clause="GW-CRASH-2").raw:
                raise CrashViolation(f"GW-CRASH-2: re-accepting {key} after a restart returned True",
                                     "GW-CRASH-2")
        for channel, value in self.acked_offset.items():
            got = self.call("offset", channel, clause="GW-CRASH-8").raw
            if got != value:
                raise CrashViolation(f"GW-CRASH-8: offset {channel!r} is {got} after a crash, "
                                     f"acknowledged {value}", "GW-CRASH-8")
        for key, value in self.selections.items():
            got = self.call("conversation", *key, clause="GW-CRASH-8").raw
            if tuple(got) != value:
                raise CrashViolation(f"GW-CRASH-8: selection {key} is {got!r} after a crash, "
                                     f"acknowledged {value!r}", "GW-CRASH-8")

    # -- the end: drain and check that nothing was lost ----------------------------------------

    def drain(self, send: bool = True) -> None:
        """Work until nothing is left: deliver and accept every message, run
        every job, record its reply and (``send``) send every reply."""
        for _ in range(10_000):
            progressed = False
            for channel in ("tg", "sms"):
                if self.to_ack.get(channel):
                    self.ack_provider_now(channel)
                    progressed = True
                start = self.acked_offset[channel]
                if start < len(self.provider[channel]):
                    self.accept(self.provider[channel][start])  # GW-CRASH-10: redelivery
                    self.to_ack[channel] = start + 1
                    progressed = True
            if self.sending is not None and send:
                self.confirm_sent()
                progressed = True
            if self.job is not None:
                self.record_reply()
                progressed = True
            if self.call("pending", 1, 0).raw:
                self.run_job()
                progressed = True
            elif send and self.call("pending_replies", 1, 0).raw:
                self.send_reply()
                progressed = True
            if not progressed:
                return
        raise CrashViolation("the gateway never drained", "GW-CRASH-10")

    def ack_provider_now(self, channel: str) -> None:
        value = self.to_ack.pop(channel)
        self.call("set_offset", channel, value, clause="GW-CRASH-8")
        self.acked_offset[channel] = value

    def check_nothing_lost(self) -> None:
        by_key: dict[tuple[str, str], list[Life]] = {}
        for life in self.history:
            by_key.setdefault((life.message.channel, life.message.message_id), []).append(life)
        for channel, msgs in self.provider.items():
            for msg in msgs[: self.acked_offset[channel]]:
                lives = by_key.get((channel, msg.message_id), [])
                if not lives or not any(life.runs for life in lives):
                    raise CrashViolation(
                        f"GW-CRASH-10: message {channel}/{msg.message_id} was acknowledged to the "
                        "provider but its job never ran (lost between ack and run)",
                        "GW-CRASH-10", "GW-CRASH-1")
                if not any(life.sends for life in lives):
                    raise CrashViolation(
                        f"GW-CRASH-4: the reply of {channel}/{msg.message_id} was never sent",
                        "GW-CRASH-4")

    def teardown(self) -> None:
        self.stats.histories += 1
        self.stats.longest_history = max(self.stats.longest_history, self.calls)
        try:
            if not self.in_step:  # a rule failed: keep its violation, do not drain
                # Every history ends with a crash (the restart of whatever state
                # it reached is checked), runs every job, crashes again while
                # the replies wait to be sent (finished jobs must stay
                # finished, GW-CRASH-3/4), and then sends everything.
                for send in (False, True):
                    self.worker.crash()
                    self.restart()
                    self.drain(send=send)
                self.check_nothing_lost()
        finally:
            try:
                self.worker.close()
            finally:
                try:
                    self.opener.close()
                finally:
                    self.harness.discard_gateway_location(self.location)
                    self.harness.discard(self.location_store)


_FIELDS = ("channel", "message_id", "conversation", "principal", "text", "trusted", "agent", "project")


def build_driver(harness: Harness, stats: MachineStats, use_child: bool = False) -> type[GatewayDriverMachine]:
    return type("GatewayDriverMachine", (GatewayDriverMachine,),
                {"harness": harness, "stats": stats, "use_child": use_child})


# -- which GW-RACE a scenario is -------------------------------------------------------------


def race_clauses(scenario: Any) -> tuple[str, ...]:
    """The GW-RACE clauses a concurrent scenario's branches exercise (a
    violation refutes these and MACH-LIN-1)."""
    calls = [s for branch in scenario.branches for s in branch if isinstance(s, Op) and s.target]
    methods = [c.method for c in calls]
    on_key = [c.method for c in calls if c.keys and item_key(*KEY) in c.keys]
    found: list[str] = []
    if on_key.count("accept") >= 2:
        found.append("GW-RACE-1")
    if "accept" in on_key and "prune_done" in methods:
        found.append("GW-RACE-2")
    if "set_replied" in on_key and "mark_done" in on_key:
        found.append("GW-RACE-3")
    if on_key.count("set_replied") >= 2:
        found.append("GW-RACE-4")
    if "mark_done" in on_key and "prune_done" in methods:
        found.append("GW-RACE-5")
    if {"set_conversation_agent", "set_conversation_project"} <= set(methods):
        found.append("GW-RACE-6")
    if methods.count("set_offset") >= 2:
        found.append("GW-RACE-7")
    if {"pending", "pending_replies"} & set(methods) and {"set_replied", "mark_done"} & set(on_key):
        found.append("GW-RACE-8")
    return tuple(found) + ("MACH-LIN-1",)


# -- GW-RACE-9: two opens of one location ------------------------------------------------------


def double_open_round(opener: Any, location: Any, contenders: int) -> list[Any]:
    """``contenders`` threads open ``location`` at once; returns what each
    got (an open store or the exception)."""
    barrier = threading.Barrier(contenders)
    results: list[Any] = [None] * contenders

    def contend(i: int) -> None:
        barrier.wait()
        try:
            results[i] = opener.open_gateway(location)
        except BaseException as exc:  # noqa: BLE001 - the outcome is the data
            results[i] = exc

    threads = [threading.Thread(target=contend, args=(i,), daemon=True) for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if any(t.is_alive() for t in threads):
        raise CrashViolation("an open of a held location did not return (GW-OPEN-3)", "GW-RACE-9",
                             "GW-OPEN-3")
    return results


# -- the GW-RACE family: one race per scenario, drawn evenly ----------------------------------

#: The races of gateway.md §10 that run as linearizability scenarios (GW-RACE-9,
#: two opens, has a test of its own).
RACE_IDS = tuple(f"GW-RACE-{i}" for i in range(1, 9))

#: the inbox key's status each race needs at the start
_RACE_STATUS = {
    "GW-RACE-1": ("absent", "absent", "pending", "done"),
    "GW-RACE-2": ("done",),
    "GW-RACE-3": ("pending",),
    "GW-RACE-4": ("pending",),
    "GW-RACE-5": ("pending", "replied", "done"),
    "GW-RACE-6": STATUSES,
    "GW-RACE-7": STATUSES,
    "GW-RACE-8": ("pending", "replied"),
}


def race_world(draw: Any, world: Any, race: str) -> GatewayWorld:
    """A gateway world fit for ``race`` (its key in a status the race needs;
    a receipt before the race instant, so a prune at it can take the row)."""
    t0 = world.t0
    return GatewayWorld(
        race="reads",
        status=draw(st.sampled_from(_RACE_STATUS[race])),
        received=draw(st.sampled_from([t0 - timedelta(days=1), t0 - timedelta(milliseconds=1)])),
        other_status=draw(st.sampled_from(STATUSES)),
        offset=draw(st.sampled_from([None, 5])),
        selection=("", "") if race == "GW-RACE-6" else draw(st.sampled_from([("", ""), ("a0", "")])),
    )


def race_branches(draw: Any, world: Any, race: str) -> tuple[tuple[Op, ...], ...]:
    """2–4 branches that make ``race`` happen; the branches beyond the two
    that define it repeat one of them or read."""
    g: GatewayWorld = world.extras[NAME]
    b = _inbox_builders(g, world.t0)
    cut = g.received + timedelta(milliseconds=draw(st.sampled_from([1, 1, 1000])))

    def prune(draw_: Any) -> Op:
        return gw_op("prune_done", draw_(_contexts()), cut, keys=None)

    def agent(draw_: Any) -> Op:
        return gw_op("set_conversation_agent", draw_(_contexts()), *SEL,
                     draw_(st.sampled_from(("x1", "x2"))), keys=[selection_key(*SEL)])

    def project(draw_: Any) -> Op:
        return gw_op("set_conversation_project", draw_(_contexts()), *SEL,
                     draw_(st.sampled_from(("y1", "y2"))), keys=[selection_key(*SEL)])

    def set_offset(draw_: Any) -> Op:
        return gw_op("set_offset", draw_(_contexts()), "tg", draw_(st.sampled_from((1, 2, 3, -1))),
                     keys=[offset_key("tg")])

    def read_offset(draw_: Any) -> Op:
        return gw_op("offset", draw_(_contexts()), "tg", keys=[offset_key("tg")])

    def queue_read(draw_: Any) -> Op:
        return gw_op(draw_(st.sampled_from(("pending", "pending_replies"))), draw_(_contexts()), 0, 0,
                     keys=None)

    def transition(draw_: Any) -> Op:
        return (b["set_replied"] if draw_(st.booleans()) else b["mark_done"])(draw_)

    defining: dict[str, tuple[Callable[[Any], Op], ...]] = {
        "GW-RACE-1": (b["accept"], b["accept"]),
        "GW-RACE-2": (b["accept"], prune),
        "GW-RACE-3": (b["set_replied"], b["mark_done"]),
        "GW-RACE-4": (b["set_replied"], b["set_replied"]),
        "GW-RACE-5": (b["mark_done"], prune),
        "GW-RACE-6": (agent, project),
        "GW-RACE-7": (set_offset, set_offset),
        "GW-RACE-8": (queue_read, transition),
    }
    extra: dict[str, tuple[Callable[[Any], Op], ...]] = {
        "GW-RACE-1": (b["accept"], b["read"]),
        "GW-RACE-2": (b["accept"], b["read"], prune),
        "GW-RACE-3": (b["set_replied"], b["mark_done"], b["read"]),
        "GW-RACE-4": (b["set_replied"], b["read"]),
        "GW-RACE-5": (b["mark_done"], prune, b["read"]),
        "GW-RACE-6": (agent, project),
        "GW-RACE-7": (set_offset, read_offset),
        "GW-RACE-8": (queue_read, transition),
    }
    lanes = [[build(draw)] for build in defining[race]]
    for _ in range(draw(st.integers(0, 2))):
        lanes.append([draw(st.sampled_from(extra[race]))(draw)])
    if race == "GW-RACE-8":  # a read lane may read twice, a writer may write twice
        for lane in lanes:
            if draw(st.booleans()):
                lane.append(draw(st.sampled_from((queue_read, transition)))(draw))
    # Writers that return nothing (the setters) show a lost update only in a
    # later read: each lane reads what it wrote (always for the selection,
    # sometimes elsewhere), so no order explains a write that vanished.
    def read_selection(draw_: Any) -> Op:
        return gw_op("conversation", draw_(_contexts()), *SEL, keys=[selection_key(*SEL)])

    trailing = {"GW-RACE-6": read_selection, "GW-RACE-7": read_offset}.get(race, b["read"])
    for lane in lanes:
        if race == "GW-RACE-6" or draw(st.booleans()):
            lane.append(trailing(draw))
    return tuple(tuple(lane) for lane in lanes)
