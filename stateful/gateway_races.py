"""The GW-RACE families of class ``gateway`` (gateway.md §10): one family
per race, each scenario on a world whose inbox key starts in a status the
race needs, its branches the two calls that define the race plus repeats
and reads (see :mod:`.gateway`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

from hypothesis import strategies as st

from .gateway import (
    KEY,
    NAME,
    SEL,
    STATUSES,
    GatewayWorld,
    _contexts,
    _inbox_builders,
    gw_op,
    item_key,
    offset_key,
    selection_key,
)
from .ops import Op
from .plugin import Family, Race, World
from .world import sampled

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


def race_world(draw: Any, world: World, race: str) -> GatewayWorld:
    """A gateway world fit for ``race`` (its key in a status the race needs;
    a receipt before the race instant, so a prune at it can take the row)."""
    t0 = world.t0
    return GatewayWorld(
        race="reads",
        status=draw(sampled(_RACE_STATUS[race])),
        received=draw(sampled((t0 - timedelta(days=1), t0 - timedelta(milliseconds=1)))),
        other_status=draw(sampled(STATUSES)),
        offset=draw(sampled((None, 5))),
        selection=("", "") if race == "GW-RACE-6" else draw(sampled((("", ""), ("a0", "")))),
    )


def race_branches(draw: Any, world: World, race: str) -> tuple[tuple[Op, ...], ...]:
    """2–4 branches that make ``race`` happen; the branches beyond the two
    that define it repeat one of them or read."""
    g: GatewayWorld = world[NAME]
    b = _inbox_builders(g, world.t0)
    cut = g.received + timedelta(milliseconds=draw(sampled((1, 1, 1000))))

    def prune(draw_: Any) -> Op:
        return gw_op("prune_done", draw_(_contexts()), cut, keys=None)

    def agent(draw_: Any) -> Op:
        return gw_op("set_conversation_agent", draw_(_contexts()), *SEL,
                     draw_(sampled(("x1", "x2"))), keys=[selection_key(*SEL)])

    def project(draw_: Any) -> Op:
        return gw_op("set_conversation_project", draw_(_contexts()), *SEL,
                     draw_(sampled(("y1", "y2"))), keys=[selection_key(*SEL)])

    def set_offset(draw_: Any) -> Op:
        return gw_op("set_offset", draw_(_contexts()), "tg", draw_(sampled((1, 2, 3, -1))),
                     keys=[offset_key("tg")])

    def read_offset(draw_: Any) -> Op:
        return gw_op("offset", draw_(_contexts()), "tg", keys=[offset_key("tg")])

    def queue_read(draw_: Any) -> Op:
        return gw_op(draw_(sampled(("pending", "pending_replies"))), draw_(_contexts()), 0, 0,
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
        lanes.append([draw(sampled(extra[race]))(draw)])
    if race == "GW-RACE-8":  # a read lane may read twice, a writer may write twice
        for lane in lanes:
            if draw(st.booleans()):
                lane.append(draw(sampled((queue_read, transition)))(draw))
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


def race_clauses(branches: Any) -> tuple[str, ...]:
    """The GW-RACE clauses a scenario's branches exercise (a violation
    refutes these and MACH-LIN-1)."""
    calls = [s for branch in branches for s in branch if isinstance(s, Op) and s.target]
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
    return tuple(found)


def _race_family(race: str) -> Family:
    def draw_race(draw: Any, world: World, declared: frozenset[str]) -> Race:
        world = world.with_rows(NAME, race_world(draw, world, race))
        branches = race_branches(draw, world, race)
        return Race(race_clauses(branches), branches, world=world)

    return Family(race, draw_race, (race, "GW-SCOPE-6", "GW-ACC-5", "GW-ST-8", "GW-SEL-6", "MACH-LIN-2"),
                  weight=1 / len(RACE_IDS), cost=1.0, machine="gateway-races")


#: one family per race, each with an eighth of the class's concurrent budget
FAMILIES = tuple(_race_family(race) for race in RACE_IDS)
