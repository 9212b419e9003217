"""Machine operations of class ``suspensions``: rules, racing calls, the four
writer scripts of a paused run (FOUR-1..7)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

from hypothesis import strategies as st

from cortex_spec import ids
from cortex_spec.checkpoints import CheckpointFilter, Decision
from cortex_spec.entities import replace
from cortex_spec.runs import Run, RunState
from cortex_spec.suspensions import PendingCall, Suspension, SuspensionReason

from .ops import Op, Outcome
from .runs import run_key
from .world import ROLES, ctx_of, fixed_id, instants_around, json_objects, make_op

NAME = "suspensions"

ID_KINDS = {"suspension": ids.SUSPENSION}


def suspension_entity(data: Any, sus_id: str, run_id: str, expires_at: Any) -> Suspension:
    return Suspension(
        id=sus_id,
        run_id=run_id,
        reason=data.draw(st.sampled_from(list(SuspensionReason)), "reason"),
        pending=data.draw(
            st.sampled_from([(), (PendingCall(id="c1", name="deploy", arguments='{"a": 1}'),)]),
            "pending",
        ),
        continuation=data.draw(json_objects(), "continuation"),
        expires_at=expires_at,
    )


def _deadline_choices(m: Any) -> st.SearchStrategy:
    now = m.clock.now()
    return st.one_of(st.none(), instants_around([now, now + timedelta(seconds=1)]))


def r_create_suspension(m, data):
    sus_id = data.draw(m.id_choice("suspension", fresh=True), "suspension_id")
    m.remember("suspension", sus_id)
    run_id = data.draw(m.id_choice("run"), "run_id")
    expires = data.draw(_deadline_choices(m), "expires_at")
    if expires is not None:
        m.remember_instant(expires)
    return make_op(
        "create_suspension", data.draw(m.ctx_choice(), "ctx"),
        suspension_entity(data, sus_id, run_id, expires),
        keys=[run_key(run_id), ("sus", sus_id)],
    )


def _by_run(method: str) -> Callable:
    def rule(m, data):
        run_id = data.draw(m.id_choice("run"), "run_id")
        return make_op(method, data.draw(m.ctx_choice(), "ctx"), run_id, keys=[run_key(run_id)])

    rule.__name__ = f"r_{method}"
    return rule


def r_claim_expired_suspension(m, data):
    run_id = data.draw(m.id_choice("run"), "run_id")
    now = data.draw(m.instant_choice(), "now")
    return make_op("claim_expired_suspension", data.draw(m.ctx_choice(), "ctx"), run_id, now,
                   keys=[run_key(run_id)])


def r_list_expired(m, data):
    return make_op(
        "list_expired", data.draw(m.ctx_choice(), "ctx"),
        data.draw(m.instant_choice(), "now"), data.draw(st.sampled_from([0, 1, 2, -3]), "limit"),
        keys=None,
    )


def r_list_expired_across_scopes(m, data):
    return make_op(
        "list_expired_across_scopes", data.draw(m.ctx_choice(zero=True), "ctx"),
        data.draw(m.instant_choice(), "now"), data.draw(st.sampled_from([0, 1, 2]), "limit"),
        keys=None,
    )


#: rules the machine runs a few times before anything else (``populate``)
SEED_RULES = ("create_suspension",)

RULES = {
    "create_suspension": r_create_suspension,
    "get_suspension": _by_run("get_suspension"),
    "claim_suspension": _by_run("claim_suspension"),
    "claim_expired_suspension": r_claim_expired_suspension,
    "delete_suspension": _by_run("delete_suspension"),
    "list_expired": r_list_expired,
    "list_expired_across_scopes": r_list_expired_across_scopes,
}


def views(store: Any, ctxs: list, known: dict[str, list[str]]) -> dict[str, Any]:
    from cortex_spec.testing import FAR_FUTURE, ZERO

    out: dict[str, Any] = {}
    for c in ctxs:
        out[f"list_expired@{c.scope.canonical()}"] = ("list_expired", c, (FAR_FUTURE, 0))
    out["list_expired_across_scopes"] = ("list_expired_across_scopes", ZERO, (FAR_FUTURE, 0))
    root = ctx_of("ws=w1")
    for run_id in known.get("run", [])[:6]:
        out[f"get_suspension[{run_id}]"] = ("get_suspension", root, (run_id,))
    return out


# -- concurrent scenarios ------------------------------------------------------------


def racing_ops(world: Any) -> list[Callable[[Any], Op]]:
    """Claims of both kinds from every role, deletes, re-creates, lists and
    state changes of the run.  Each builder takes Hypothesis' ``draw``."""
    roles = st.sampled_from(["exact", "exact", "ancestor", "sibling", "lookalike"])
    runs = st.sampled_from(world.runs)
    instants = instants_around([world.t0] + [d for d in world.deadlines.values() if d is not None])

    def claim(draw):
        run_id = draw(runs)
        return make_op("claim_suspension", ctx_of(ROLES[draw(roles)]), run_id, keys=[run_key(run_id)])

    def sweep(draw):
        run_id = draw(runs)
        return make_op("claim_expired_suspension", ctx_of(ROLES[draw(roles)]), run_id,
                       draw(instants), keys=[run_key(run_id)])

    def delete(draw):
        run_id = draw(runs)
        return make_op("delete_suspension", ctx_of(ROLES[draw(roles)]), run_id, keys=[run_key(run_id)])

    def get(draw):
        run_id = draw(runs)
        return make_op("get_suspension", ctx_of(ROLES[draw(roles)]), run_id, keys=[run_key(run_id)])

    def recreate(draw):
        run_id = draw(runs)
        sus_id = world.spare_suspensions[draw(st.integers(0, 1))]
        role = draw(st.sampled_from(["exact", "sibling"]))
        return make_op("create_suspension", ctx_of(ROLES[role]),
                       Suspension(id=sus_id, run_id=run_id, expires_at=None),
                       keys=[run_key(run_id), ("sus", sus_id)])

    def listing(draw):
        now = draw(instants)
        if draw(st.booleans()):
            return make_op("list_expired_across_scopes", ctx_of(ROLES["other"]), now, 0, keys=None)
        return make_op("list_expired", ctx_of(ROLES[draw(roles)]), now, 0, keys=None)

    def set_state(draw):
        # an update of the run racing the claims (pausing again, or failing it)
        run_id = draw(runs)
        state = draw(st.sampled_from([RunState.PAUSED, RunState.FAILED]))
        return make_op("update_run", ctx_of(ROLES["exact"]),
                       Run(id=run_id, agent_id=world.agent, state=state), keys=[run_key(run_id)])

    return [claim, claim, sweep, delete, get, recreate, listing, set_state]


def storm_ops(world: Any) -> list[Callable[[Any], Op]]:
    """Builders for storms: every branch contends for the first run's pause
    (SUSP-CLAIM-10, the deadline partition, duplicate suspensions)."""
    run_id = world.runs[0]
    visible = st.sampled_from(["exact", "exact", "ancestor"])
    deadline = world.deadlines[run_id]
    instants = instants_around([world.t0] + ([deadline] if deadline is not None else []))

    def claim(draw):
        return make_op("claim_suspension", ctx_of(ROLES[draw(visible)]), run_id, keys=[run_key(run_id)])

    def claim_or_sweep(draw):
        if draw(st.booleans()):
            return claim(draw)
        return make_op("claim_expired_suspension", ctx_of(ROLES[draw(visible)]), run_id,
                       draw(instants), keys=[run_key(run_id)])

    def create_twice(draw):
        sus_id = world.spare_suspensions[draw(st.integers(0, 1))]
        role = draw(st.sampled_from(["exact", "sibling", "other"]))
        return make_op("create_suspension", ctx_of(ROLES[role]),
                       Suspension(id=sus_id, run_id=world.spare_run),
                       keys=[run_key(world.spare_run), ("sus", sus_id)])

    return [claim, claim_or_sweep, create_twice]


# -- the four writers on a paused run (FOUR-1..7) -------------------------------------
#
# Each writer is a script of store calls made through ``call(op) -> Outcome``;
# a writer that loses its claim stops.  ``cp`` is the pending checkpoint P of
# an approval pause, or None.

Call = Callable[[Op], Outcome]


def _update_state(call: Call, c: Any, run_id: str, state: RunState, label: str) -> None:
    got = call(make_op("get_run", c, run_id, keys=[run_key(run_id)], label=label))
    if got.ok:
        call(make_op("update_run", c, replace(got.raw, state=state), keys=[run_key(run_id)], label=label))


def _reject_pending(call: Call, c: Any, run_id: str, label: str) -> None:
    listed = call(make_op("list_pending", c, CheckpointFilter(run_id=run_id), keys=None, label=label))
    if listed.ok:
        for cp in listed.raw:
            call(make_op("resolve", c, cp.id, Decision(approved=False, decided_by=label),
                         keys=[("cp", cp.id)], label=label))


def writer_resume(call: Call, c: Any, run_id: str, cp: str | None, now: Any) -> None:
    """Approve: claim, delete the suspension, approve P."""
    if not call(make_op("claim_suspension", c, run_id, keys=[run_key(run_id)], label="resume")).ok:
        return
    call(make_op("delete_suspension", c, run_id, keys=[run_key(run_id)], label="resume"))
    if cp is not None:
        call(make_op("resolve", c, cp, Decision(approved=True, decided_by="resume"),
                     keys=[("cp", cp)], label="resume"))


def writer_reject(call: Call, c: Any, run_id: str, cp: str | None, now: Any) -> None:
    """Rejected checkpoint: claim, fail the run, delete, reject P."""
    if not call(make_op("claim_suspension", c, run_id, keys=[run_key(run_id)], label="reject")).ok:
        return
    _update_state(call, c, run_id, RunState.FAILED, "reject")
    call(make_op("delete_suspension", c, run_id, keys=[run_key(run_id)], label="reject"))
    if cp is not None:
        call(make_op("resolve", c, cp, Decision(approved=False, decided_by="reject"),
                     keys=[("cp", cp)], label="reject"))


def writer_sweep(call: Call, c: Any, run_id: str, cp: str | None, now: Any) -> None:
    """Expiry sweep: sweep claim, fail the run, delete, reject every pending P."""
    if not call(make_op("claim_expired_suspension", c, run_id, now, keys=[run_key(run_id)],
                        label="sweep")).ok:
        return
    _update_state(call, c, run_id, RunState.FAILED, "sweep")
    call(make_op("delete_suspension", c, run_id, keys=[run_key(run_id)], label="sweep"))
    if cp is not None:
        _reject_pending(call, c, run_id, "sweep")


def writer_cancel(call: Call, c: Any, run_id: str, cp: str | None, now: Any) -> None:
    """Cancel: claim, cancel the run, delete, reject every pending P."""
    if not call(make_op("claim_suspension", c, run_id, keys=[run_key(run_id)], label="cancel")).ok:
        return
    _update_state(call, c, run_id, RunState.CANCELLED, "cancel")
    call(make_op("delete_suspension", c, run_id, keys=[run_key(run_id)], label="cancel"))
    if cp is not None:
        _reject_pending(call, c, run_id, "cancel")


WRITERS = {
    "resume": writer_resume,
    "reject": writer_reject,
    "sweep": writer_sweep,
    "cancel": writer_cancel,
}

#: SUSP-PART-1 side of each writer's claim.
WRITER_SIDE = {"resume": "resume", "reject": "resume", "cancel": "resume", "sweep": "sweep"}


def fresh_suspension_ids(n: int, base: int) -> tuple[str, ...]:
    return tuple(fixed_id(ids.SUSPENSION, base + i) for i in range(n))
