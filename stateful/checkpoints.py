"""Machine operations of class ``checkpoints``: rules, racing calls, keys."""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from cortex_spec import ids
from cortex_spec.checkpoints import Checkpoint, CheckpointFilter, Decision

from .ops import Op
from .runs import AGENTS
from .world import ROLES, ctx_of, json_objects, make_op, short_texts

NAME = "checkpoints"

ID_KINDS = {"checkpoint": ids.CHECKPOINT}


def cp_key(cp_id: str) -> tuple[str, str]:
    return ("cp", cp_id)


def decisions() -> st.SearchStrategy[Decision]:
    return st.builds(
        Decision,
        approved=st.booleans(),
        decided_by=st.sampled_from(["alice", "bob"]),
        reason=short_texts(),
    )


DECISIONS = decisions()


def r_create_checkpoint(m, data):
    cp_id = data.draw(m.id_choice("checkpoint", fresh=True), "checkpoint_id")
    m.remember("checkpoint", cp_id)
    cp = Checkpoint(
        id=cp_id,
        run_id=data.draw(m.id_choice("run"), "run_id"),
        agent_id=AGENTS[0],
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
    return make_op("resolve", data.draw(m.ctx_choice(), "ctx"), cp_id,
                   data.draw(DECISIONS, "decision"), keys=[cp_key(cp_id)])


def _filter(m, data) -> CheckpointFilter | None:
    if data.draw(st.booleans(), "no filter"):
        return None
    return CheckpointFilter(
        run_id=data.draw(st.one_of(st.none(), m.id_choice("run")), "run_id"),
        limit=data.draw(st.sampled_from([0, 1, 2]), "limit"),
        offset=data.draw(st.sampled_from([0, 1]), "offset"),
    )


def r_list_pending(m, data):
    return make_op("list_pending", data.draw(m.ctx_choice(), "ctx"), _filter(m, data), keys=None)


def r_count_pending(m, data):
    return make_op("count_pending", data.draw(m.ctx_choice(), "ctx"), _filter(m, data), keys=None)


def r_list_pending_across_scopes(m, data):
    after = data.draw(st.one_of(st.none(), m.id_choice("checkpoint")), "after_id")
    return make_op("list_pending_across_scopes", data.draw(m.ctx_choice(zero=True), "ctx"),
                   after, data.draw(st.sampled_from([0, 1, 2]), "limit"), keys=None)


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


def views(store: Any, ctxs: list, known: dict[str, list[str]]) -> dict[str, Any]:
    from cortex_spec.testing import ZERO

    out: dict[str, Any] = {}
    for c in ctxs:
        out[f"list_pending@{c.scope.canonical()}"] = ("list_pending", c, (None,))
    out["list_pending_across_scopes"] = ("list_pending_across_scopes", ZERO, (None, 0))
    root = ctx_of("ws=w1")
    for cp_id in known.get("checkpoint", [])[:6]:
        out[f"get_checkpoint[{cp_id}]"] = ("get_checkpoint", root, (cp_id,))
    return out


def racing_ops(world: Any) -> list[Callable[[Any], Op]]:
    """Resolves with different decisions, reads, lists and duplicate creates.
    Each builder takes Hypothesis' ``draw``."""
    roles = st.sampled_from(["exact", "exact", "ancestor", "sibling", "lookalike"])
    cps = st.sampled_from(world.checkpoints)

    def resolve(draw):
        cp_id = draw(cps)
        return make_op("resolve", ctx_of(ROLES[draw(roles)]), cp_id, draw(DECISIONS),
                       keys=[cp_key(cp_id)])

    def get(draw):
        cp_id = draw(cps)
        return make_op("get_checkpoint", ctx_of(ROLES[draw(roles)]), cp_id, keys=[cp_key(cp_id)])

    def listing(draw):
        kind = draw(st.sampled_from(["pending", "count", "across"]))
        if kind == "across":
            return make_op("list_pending_across_scopes", ctx_of(ROLES["other"]), None, 0, keys=None)
        method = "list_pending" if kind == "pending" else "count_pending"
        return make_op(method, ctx_of(ROLES[draw(roles)]), None, keys=None)

    def create(draw):
        cp_id = draw(st.sampled_from(world.checkpoints + (world.spare_checkpoint,)))
        role = draw(st.sampled_from(["exact", "sibling"]))
        return make_op("create_checkpoint", ctx_of(ROLES[role]),
                       Checkpoint(id=cp_id, run_id=world.runs[0], agent_id=AGENTS[0]),
                       keys=[cp_key(cp_id)])

    return [resolve, resolve, get, listing, create]


def storm_ops(world: Any) -> list[Callable[[Any], Op]]:
    """Builders for storms: concurrent resolves of one pending checkpoint
    (CP-RESOLVE-4) and duplicate creates."""
    cp_id = world.checkpoints[0]

    def resolve(draw):
        role = draw(st.sampled_from(["exact", "exact", "ancestor"]))
        return make_op("resolve", ctx_of(ROLES[role]), cp_id, draw(DECISIONS), keys=[cp_key(cp_id)])

    def create_twice(draw):
        role = draw(st.sampled_from(["exact", "sibling", "other"]))
        return make_op("create_checkpoint", ctx_of(ROLES[role]),
                       Checkpoint(id=world.spare_checkpoint, run_id=world.runs[0], agent_id=AGENTS[0]),
                       keys=[cp_key(world.spare_checkpoint)])

    return [resolve, create_twice]
