"""Machine operations of class ``gateway`` (see :mod:`.plugin`).

Gateway methods live on the object ``open_gateway(location)`` returns, not
on the store, so every op built here has ``target = "gateway"`` and runs on
the session's gateway (:class:`.ops.StoreSession`); :class:`GatewayHandle` opens
it on a fresh location of the harness and reopens it after a restart, and
the reference model's gateway keeps its tables on the same
:class:`MemoryMedium` as the rest of the reference state (so the
linearizability model clones and fingerprints them like any other table).

* ``RULES`` / ``views``: every gateway method for the differential machine,
  with channels, message ids and conversations from small pools (case
  look-alikes included), contexts from the whole pool plus the zero scope
  (GW-SCOPE-2), and instants around the ones already used;
* ``world`` / ``setup`` / ``storm_ops`` / ``racing_ops``: scenarios of the
  concurrent machine — one inbox key in a drawn status and receipt time, and
  a drawn race kind (accept storms, accept against prune, set_replied
  against mark_done, two replies, mark_done against prune, queue reads
  against transitions), a selection key and an offset channel;
* the GW-RACE families (one per race, :mod:`.gateway_races`), and the
  driver model of the crash machine with the double opens
  (:mod:`.gateway_driver`) as the class's own tests.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Callable

import attrs
from hypothesis import strategies as st

from cortex_spec.context import Context
from cortex_spec.gateway import InboundMessage
from cortex_spec.harness import Harness
from cortex_spec.scope import Scope

from .ops import Op
from .plugin import ClassMachines, Family, MachineTest, Target, World
from .world import instants_around, make_op, sampled

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
        conversation=draw(sampled(CONVERSATIONS)),
        principal=draw(sampled(("u1", "u2"))),
        text=draw(sampled(TEXTS)),
        trusted=draw(st.booleans()),
        agent=draw(sampled(NAMES)),
        project=draw(sampled(NAMES)),
    )


def _key(m: Any, data: Any, allow_empty: bool = True) -> tuple[str, str]:
    mids = MESSAGE_IDS + (("",) if allow_empty else ())
    known = [k for k in m.known.get("gw-key", [])]
    fresh = st.tuples(sampled(CHANNELS), sampled(mids))
    choice = st.one_of(sampled(known), fresh) if known else fresh
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
        limit = data.draw(sampled((0, 0, 1, 2, -1)), "limit")
        offset = data.draw(sampled((0, 0, 1, 2, -2)), "offset")
        return gw_op(method, data.draw(m.ctx_choice(zero=True), "ctx"), limit, offset, keys=None)

    rule_.__name__ = f"r_{method}"
    return rule_


def r_prune_done(m, data):
    before = data.draw(m.instant_choice(), "before")
    return gw_op("prune_done", data.draw(m.ctx_choice(zero=True), "ctx"), before, keys=None)


def r_offset(m, data):
    channel = data.draw(sampled(CHANNELS), "channel")
    return gw_op("offset", data.draw(m.ctx_choice(zero=True), "ctx"), channel, keys=[offset_key(channel)])


def r_set_offset(m, data):
    channel = data.draw(sampled(CHANNELS), "channel")
    value = data.draw(sampled((0, 1, 7, -3, 2**63 - 1, 2**63)), "value")
    return gw_op("set_offset", data.draw(m.ctx_choice(zero=True), "ctx"), channel, value,
                 keys=[offset_key(channel)])


def r_conversation(m, data):
    channel = data.draw(sampled(CHANNELS), "channel")
    conv = data.draw(sampled(CONVERSATIONS), "conversation")
    return gw_op("conversation", data.draw(m.ctx_choice(zero=True), "ctx"), channel, conv,
                 keys=[selection_key(channel, conv)])


def _set_selection(method: str) -> Callable:
    def rule_(m, data):
        channel = data.draw(sampled(CHANNELS[:2]), "channel")
        conv = data.draw(sampled(CONVERSATIONS), "conversation")
        value = data.draw(sampled(NAMES), "value")
        return gw_op(method, data.draw(m.ctx_choice(zero=True), "ctx"), channel, conv, value,
                     keys=[selection_key(channel, conv)])

    rule_.__name__ = f"r_{method}"
    return rule_


def _one_of(name: str, *rules: Callable) -> Callable:
    """One machine rule that makes one of several calls: the gateway's twelve
    methods come as six rules, so that they do not crowd out the other
    classes' rules in the shared machines."""

    def rule_(m, data):
        return data.draw(sampled(rules), name)(m, data)

    rule_.__name__ = f"r_{name}"
    return rule_


#: rules the machine runs a few times before anything else (``populate``):
#: inbox rows accepted at one instant, so insertion order decides ties
SEED_RULES = ("gw_accept",)

RULES = {
    "gw_accept": r_accept,
    "gw_set_replied_or_mark_done": _one_of(
        "transition", _by_key("set_replied", sampled(REPLIES)), _by_key("mark_done")),
    "read_gw": _one_of("read", _by_key("get_item"), _queue("pending"), _queue("pending_replies")),
    "gw_prune_done": r_prune_done,
    "gw_offset": _one_of("offsets", r_offset, r_set_offset),
    "gw_selection": _one_of("selection", r_conversation, _set_selection("set_conversation_agent"),
                            _set_selection("set_conversation_project")),
}


def views(ctxs: list, known: dict[str, list]) -> dict[str, Op]:
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


def world(draw: Any, w: World, size: int, live: bool) -> GatewayWorld:
    """The gateway rows a mixed scenario starts from."""
    t0 = w.t0
    return GatewayWorld(
        race=draw(sampled(RACES)),
        status=draw(sampled(STATUSES)),
        received=draw(sampled((t0 - timedelta(days=1), t0 - timedelta(milliseconds=1), t0))),
        other_status=draw(sampled(STATUSES)),
        offset=draw(sampled((None, 5))),
        selection=draw(sampled((("", ""), ("a0", ""), ("", "p0")))),
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


def setup(world_: World) -> list[Op]:
    g: GatewayWorld | None = world_.get(NAME)
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
    return sampled((ZERO, Context(Scope.parse("ws=w1/proj=p1")), Context(Scope(), "node-b", "bob")))


def _inbox_builders(g: GatewayWorld, t0: datetime) -> dict[str, Callable[[Any], Op]]:
    cutoffs = instants_around([g.received])
    times = sampled((t0, t0 + timedelta(milliseconds=1)))

    def accept(draw):
        msg = InboundMessage(channel=KEY[0], message_id=KEY[1],
                             text=draw(sampled(("copy 1", "copy 2", "copy 3"))),
                             agent=draw(sampled(NAMES)))
        return gw_op("accept", draw(_contexts()), msg, draw(times), keys=[item_key(*KEY)])

    def prune(draw):
        return gw_op("prune_done", draw(_contexts()), draw(cutoffs), keys=None)

    def set_replied(draw):
        return gw_op("set_replied", draw(_contexts()), *KEY, draw(sampled(("ra", "rb", "rc"))),
                     keys=[item_key(*KEY)])

    def mark_done(draw):
        return gw_op("mark_done", draw(_contexts()), *KEY, keys=[item_key(*KEY)])

    def read(draw):
        method = draw(sampled(("pending", "pending_replies", "get_item")))
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


def storm_ops(world: World) -> list[Callable[[Any], Op]]:
    """Storms: every branch contends for the inbox key (the world's race
    kind), for one selection key (GW-RACE-6) or one offset (GW-RACE-7)."""
    g: GatewayWorld | None = world.get(NAME)
    if g is None:
        return []
    builders = _inbox_builders(g, world.t0)
    calls = RACE_CALLS[g.race]

    def inbox(draw):
        return builders[draw(sampled(calls))](draw)

    def selection(draw):
        value = draw(sampled(("x1", "x2", "")))
        method = draw(sampled(("set_conversation_agent", "set_conversation_project",
                                       "set_conversation_agent", "conversation")))
        if method == "conversation":
            return gw_op(method, draw(_contexts()), *SEL, keys=[selection_key(*SEL)])
        return gw_op(method, draw(_contexts()), *SEL, value, keys=[selection_key(*SEL)])

    def offsets(draw):
        if draw(st.integers(0, 3)) == 0:
            return gw_op("offset", draw(_contexts()), "tg", keys=[offset_key("tg")])
        return gw_op("set_offset", draw(_contexts()), "tg", draw(sampled((1, 2, 3, -1))),
                     keys=[offset_key("tg")])

    return [inbox, selection, offsets]


def racing_ops(world: World) -> list[Callable[[Any], Op]]:
    """Any gateway call on the scenario's keys."""
    g: GatewayWorld | None = world.get(NAME)
    if g is None:
        return []
    b = _inbox_builders(g, world.t0)
    storms = storm_ops(world)

    def other(draw):
        method = draw(sampled(("set_replied", "mark_done", "get_item")))
        args = (*OTHER_KEY, "ro") if method == "set_replied" else OTHER_KEY
        return gw_op(method, draw(_contexts()), *args, keys=[item_key(*OTHER_KEY)])

    return [b["accept"], b["prune"], b["set_replied"], b["mark_done"], b["read"], other,
            storms[1], storms[2]]


# -- the class's own tests (the driver model, double opens, the GW-RACE families) ------------

GW_CRASH = tuple(f"GW-CRASH-{i}" for i in range(1, 11))


def _run(name: str) -> Callable[..., Any]:
    """A test body of :mod:`.gateway_driver` or :mod:`.gateway_races`, imported when run."""

    def run(*args: Any) -> Any:
        from . import gateway_driver

        return getattr(gateway_driver, name)(*args)

    run.__name__ = name
    return run


def _families() -> tuple[Family, ...]:
    from .gateway_races import FAMILIES

    return FAMILIES


MACHINES = ClassMachines(
    name=NAME,
    rules=RULES,
    views=views,
    id_kinds=ID_KINDS,
    seed_rules=SEED_RULES,
    target=Target(TARGET, GatewayHandle, reference_target),
    world=world,
    setup=setup,
    racing_ops=racing_ops,
    storm_ops=storm_ops,
    families=_families(),
    tests=(
        MachineTest("driver", GW_CRASH + ("GW-OPEN-6",), _run("run_driver"),
                    requires=("gateway-crash",), machine="gateway-crash", cost=3.0),
        MachineTest("driver-killed-process", GW_CRASH + ("GW-OPEN-6",), _run("run_driver_in_child"),
                    requires=("cross-process",), machine="gateway-crash-child", cost=8.0),
        MachineTest("double-open", ("GW-RACE-9", "GW-OPEN-2", "GW-OPEN-3"), _run("run_double_open"),
                    machine="gateway-double-open", cost=1.0),
        MachineTest("double-open-across-processes", ("GW-RACE-9", "GW-OPEN-2", "GW-OPEN-3"),
                    _run("run_double_open_across_processes"), requires=("cross-process",),
                    machine="gateway-double-open-child", cost=4.0),
    ),
    weight=0.5,
    cost=2.0,
)
