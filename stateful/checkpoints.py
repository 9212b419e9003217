"""Machine operations of class ``checkpoints``: rules, racing calls, keys."""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from cortex_spec import ids
from cortex_spec.checkpoints import Checkpoint, CheckpointFilter, Decision

import attrs

from .ops import Op
from .plugin import ClassMachines, World
from .runs import AGENTS
from .world import ROLES, ctx_of, fixed_id, json_objects, make_op, optional, sampled, short_texts

NAME = "checkpoints"

#: run ids are drawn too (a checkpoint names a run; no run is checked)
ID_KINDS = {"checkpoint": ids.CHECKPOINT, "run": ids.RUN}


def cp_key(cp_id: str) -> tuple[str, str]:
    return ("cp", cp_id)


def decisions() -> st.SearchStrategy[Decision]:
    return st.builds(
        Decision,
        approved=st.booleans(),
        decided_by=sampled(("alice", "bob")),
        reason=short_texts(),
    )


DECISIONS = decisions()


def r_create_checkpoint(m, data):
    cp_id = data.draw(m.id_choice("checkpoint", fresh=True), "checkpoint_id")
    m.remember("checkpoint", cp_id)
    cp = Checkpoint(
        id=cp_id,
        run_id=data.draw(m.id_choice("run"), "run_id"),
        agent_id=data.draw(sampled(AGENTS), "agent_id"),
        reason=data.draw(short_texts(), "reason"),
        step_index=data.draw(st.integers(0, 3), "step_index"),
        metadata=data.draw(json_objects(), "metadata"),
    )
    return make_op("create_checkpoint", data.draw(m.ctx_choice(), "ctx"), cp, keys=[cp_key(cp_id)])


def r_get_checkpoint(m, data):
    cp_id = data.draw(m.id_choice("checkpoint"), "checkpoint_id")
    return make_op("get_checkpoint", data.draw(m.ctx_choice(), "ctx"), cp_id, keys=[cp_key(cp_id)])


def r_resolve(m, data):
    cp_id = data.draw(m.id_choice("checkpoint"), "checkpoint_id")
    return make_op("resolve", data.draw(m.ctx_choice(actors=True), "ctx"), cp_id,
                   data.draw(DECISIONS, "decision"), keys=[cp_key(cp_id)])


def _filter(m, data) -> CheckpointFilter | None:
    if data.draw(st.booleans(), "no filter"):
        return None
    return CheckpointFilter(
        run_id=data.draw(optional(m.id_choice("run")), "run_id"),
        limit=data.draw(sampled((0, 1, 2)), "limit"),
        offset=data.draw(sampled((0, 1)), "offset"),
    )


def r_list_pending(m, data):
    return make_op("list_pending", data.draw(m.ctx_choice(), "ctx"), _filter(m, data), keys=None)


def r_count_pending(m, data):
    return make_op("count_pending", data.draw(m.ctx_choice(), "ctx"), _filter(m, data), keys=None)


def r_list_pending_across_scopes(m, data):
    after = data.draw(optional(m.id_choice("checkpoint")), "after_id")
    return make_op("list_pending_across_scopes", data.draw(m.ctx_choice(zero=True), "ctx"),
                   after, data.draw(sampled((0, 1, 2)), "limit"), keys=None)


#: rules the machine runs a few times before anything else (``populate``)
SEED_RULES = ("create_checkpoint",)

RULES = {
    "create_checkpoint": r_create_checkpoint,
    "get_checkpoint": r_get_checkpoint,
    "resolve": r_resolve,
    "list_pending": r_list_pending,
    "count_pending": r_count_pending,
    "list_pending_across_scopes": r_list_pending_across_scopes,
}


def views(ctxs: list, known: dict[str, list[str]]) -> dict[str, Op]:
    from cortex_spec.testing import ZERO

    out: dict[str, Op] = {}
    for c in ctxs:
        out[f"list_pending@{c.scope.canonical()}"] = make_op("list_pending", c, None, keys=None)
    out["list_pending_across_scopes"] = make_op("list_pending_across_scopes", ZERO, None, 0, keys=None)
    root = ctx_of("ws=w1")
    for cp_id in known.get("checkpoint", [])[:6]:
        out[f"get_checkpoint[{cp_id}]"] = make_op("get_checkpoint", root, cp_id, keys=None)
    return out


@attrs.frozen
class CheckpointRows:
    """Pending checkpoints of one run (which need not exist), and a spare id."""

    run: str
    checkpoints: tuple[str, ...]
    spare: str


def world(draw: Any, w: World, size: int, live: bool) -> CheckpointRows:
    return CheckpointRows(fixed_id(ids.RUN, 100),
                          tuple(fixed_id(ids.CHECKPOINT, 100 + i) for i in range(size)),
                          fixed_id(ids.CHECKPOINT, 199))


def setup(w: World) -> list[Op]:
    rows: CheckpointRows = w[NAME]
    exact = ctx_of(ROLES["exact"])
    return [make_op("create_checkpoint", exact, Checkpoint(id=cp_id, run_id=rows.run, agent_id=AGENTS[0]),
                    keys=[cp_key(cp_id)]) for cp_id in rows.checkpoints]


#: the pending-list filters of racing listings: none, and pages of the world's run
PAGES = (None, CheckpointFilter(offset=1, limit=1), CheckpointFilter(limit=1))


def racing_ops(w: World) -> list[Callable[[Any], Op]]:
    """Resolves with different decisions, reads, lists and duplicate creates.
    Each builder takes Hypothesis' ``draw``."""
    world: CheckpointRows = w[NAME]
    roles = sampled(("exact", "exact", "ancestor", "sibling", "lookalike"))
    cps = sampled(world.checkpoints)

    def resolve(draw):
        cp_id = draw(cps)
        return make_op("resolve", ctx_of(ROLES[draw(roles)]), cp_id, draw(DECISIONS),
                       keys=[cp_key(cp_id)])

    def get(draw):
        cp_id = draw(cps)
        return make_op("get_checkpoint", ctx_of(ROLES[draw(roles)]), cp_id, keys=[cp_key(cp_id)])

    def listing(draw):
        # whole lists and pages (offset 1, limit 1; a cursor after the first id)
        kind = draw(sampled(("pending", "count", "across")))
        if kind == "across":
            after = draw(sampled((None, world.checkpoints[0])))
            return make_op("list_pending_across_scopes", ctx_of(ROLES["other"]), after,
                           draw(sampled((0, 1))), keys=None)
        method = "list_pending" if kind == "pending" else "count_pending"
        return make_op(method, ctx_of(ROLES[draw(roles)]), draw(sampled(PAGES)), keys=None)

    def create(draw):
        cp_id = draw(sampled(world.checkpoints + (world.spare,)))
        role = draw(sampled(("exact", "sibling")))
        return make_op("create_checkpoint", ctx_of(ROLES[role]),
                       Checkpoint(id=cp_id, run_id=world.run, agent_id=AGENTS[0]),
                       keys=[cp_key(cp_id)])

    return [resolve, resolve, get, listing, create]


def storm_ops(w: World) -> list[Callable[[Any], Op]]:
    """Builders for storms: concurrent resolves of one pending checkpoint
    (CP-RESOLVE-4) and duplicate creates."""
    world: CheckpointRows = w[NAME]
    cp_id = world.checkpoints[0]

    def resolve(draw):
        role = draw(sampled(("exact", "exact", "ancestor")))
        return make_op("resolve", ctx_of(ROLES[role]), cp_id, draw(DECISIONS), keys=[cp_key(cp_id)])

    def create_twice(draw):
        role = draw(sampled(("exact", "sibling", "other")))
        return make_op("create_checkpoint", ctx_of(ROLES[role]),
                       Checkpoint(id=world.spare, run_id=world.run, agent_id=AGENTS[0]),
                       keys=[cp_key(world.spare)])

    return [resolve, create_twice]


MACHINES = ClassMachines(
    name=NAME,
    rules=RULES,
    views=views,
    id_kinds=ID_KINDS,
    seed_rules=SEED_RULES,
    world=world,
    setup=setup,
    racing_ops=racing_ops,
    storm_ops=storm_ops,
    weight=0.5,
    cost=2.0,
)
