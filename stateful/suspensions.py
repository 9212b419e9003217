"""Machine operations of class ``suspensions``: rules, racing calls, the four
writer scripts of a paused run (FOUR-1..7)."""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any, Callable

import attrs
from hypothesis import strategies as st

from cortex_spec import ids
from cortex_spec.checkpoints import CheckpointFilter, Decision
from cortex_spec.entities import replace
from cortex_spec.runs import Run, RunState
from cortex_spec.suspensions import PendingCall, Suspension, SuspensionReason

from cortex_spec.context import Context
from cortex_spec.scope import Scope

from .ops import Op, Outcome
from .plugin import Claim, ClassMachines, Family, Race, Sweep, World
from .runs import AGENTS, run_key
from .world import PRINCIPALS, ROLES, Script, ctx_of, fixed_id, instants_around, json_objects, make_op, optional, sampled

NAME = "suspensions"

ID_KINDS = {"suspension": ids.SUSPENSION}


def suspension_entity(data: Any, sus_id: str, run_id: str, expires_at: Any) -> Suspension:
    return Suspension(
        id=sus_id,
        run_id=run_id,
        reason=data.draw(sampled(list(SuspensionReason)), "reason"),
        pending=data.draw(
            sampled(((), (PendingCall(id="c1", name="deploy", arguments='{"a": 1}'),))),
            "pending",
        ),
        continuation=data.draw(json_objects(), "continuation"),
        expires_at=expires_at,
    )


def _deadline_choices(m: Any) -> st.SearchStrategy:
    now = m.clock.now()
    return optional(instants_around([now, now + timedelta(seconds=1)]))


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


def _by_run(method: str, actors: bool = False) -> Callable:
    """A rule calling ``method(ctx, run_id)``; ``actors``: the caller acts for
    a drawn principal (a claim writes the run, never its principal)."""

    def rule(m, data):
        run_id = data.draw(m.id_choice("run"), "run_id")
        return make_op(method, data.draw(m.ctx_choice(actors=actors), "ctx"), run_id, keys=[run_key(run_id)])

    rule.__name__ = f"r_{method}"
    return rule


def r_claim_expired_suspension(m, data):
    run_id = data.draw(m.id_choice("run"), "run_id")
    now = data.draw(m.instant_choice(), "now")
    return make_op("claim_expired_suspension", data.draw(m.ctx_choice(actors=True), "ctx"), run_id, now,
                   keys=[run_key(run_id)])


def r_list_expired(m, data):
    return make_op(
        "list_expired", data.draw(m.ctx_choice(), "ctx"),
        data.draw(m.instant_choice(), "now"), data.draw(sampled((0, 1, 2, -3)), "limit"),
        keys=None,
    )


def r_list_expired_across_scopes(m, data):
    return make_op(
        "list_expired_across_scopes", data.draw(m.ctx_choice(zero=True), "ctx"),
        data.draw(m.instant_choice(), "now"), data.draw(sampled((0, 1, 2)), "limit"),
        keys=None,
    )


#: rules the machine runs a few times before anything else (``populate``)
SEED_RULES = ("create_suspension",)

RULES = {
    "create_suspension": r_create_suspension,
    "get_suspension": _by_run("get_suspension"),
    "claim_suspension": _by_run("claim_suspension", actors=True),
    "claim_expired_suspension": r_claim_expired_suspension,
    "delete_suspension": _by_run("delete_suspension"),
    "list_expired": r_list_expired,
    "list_expired_across_scopes": r_list_expired_across_scopes,
}


def views(ctxs: list, known: dict[str, list[str]]) -> dict[str, Op]:
    from cortex_spec.testing import FAR_FUTURE, ZERO

    out: dict[str, Op] = {}
    for c in ctxs:
        out[f"list_expired@{c.scope.canonical()}"] = make_op("list_expired", c, FAR_FUTURE, 0, keys=None)
    out["list_expired_across_scopes"] = make_op("list_expired_across_scopes", ZERO, FAR_FUTURE, 0, keys=None)
    root = ctx_of("ws=w1")
    for run_id in known.get("run", [])[:6]:
        out[f"get_suspension[{run_id}]"] = make_op("get_suspension", root, run_id, keys=None)
    return out


# -- concurrent scenarios ------------------------------------------------------------

#: Deadline offsets from the race instant a world's suspensions may have (None: no deadline).
DEADLINE_OFFSETS: tuple[timedelta | None, ...] = (
    None,
    -timedelta(days=1),
    -timedelta(milliseconds=1),
    timedelta(0),
    timedelta(milliseconds=1),
    timedelta(seconds=5),
)
#: The offsets at which a resume claim can still win (a census world).
LIVE_OFFSETS = tuple(off for off in DEADLINE_OFFSETS if off is None or off > timedelta(0))


@attrs.frozen
class SuspensionRows:
    """One suspension per paused run of the world (deadlines around the race
    instant), and spare suspension ids."""

    t0: datetime
    agent: str
    runs: tuple[str, ...]
    spare_run: str
    suspensions: tuple[str, ...]
    deadlines: dict[str, datetime | None] = attrs.field(hash=False)
    spare_suspensions: tuple[str, str]
    #: each run's agent (the runs world's: two agents alternate)
    agents: dict[str, str] = attrs.field(factory=dict, hash=False)

    def agent_of(self, run_id: str) -> str:
        return self.agents.get(run_id, self.agent)


def world(draw: Any, w: World, size: int, live: bool) -> SuspensionRows:
    runs = w["runs"]
    offsets = LIVE_OFFSETS if live else DEADLINE_OFFSETS
    deadlines = {}
    for run_id in runs.runs:
        off = draw(sampled(offsets))
        deadlines[run_id] = None if off is None else w.t0 + off
    return SuspensionRows(
        t0=w.t0,
        agent=runs.agent,
        runs=runs.runs,
        spare_run=runs.spare,
        suspensions=tuple(fixed_id(ids.SUSPENSION, 100 + i) for i in range(len(runs.runs))),
        deadlines=deadlines,
        spare_suspensions=(fixed_id(ids.SUSPENSION, 198), fixed_id(ids.SUSPENSION, 199)),
        agents={run_id: runs.agent_of(run_id) for run_id in runs.runs},
    )


def setup(w: World) -> list[Op]:
    rows: SuspensionRows = w[NAME]
    exact = ctx_of(ROLES["exact"])
    return [make_op("create_suspension", exact,
                    Suspension(id=sus_id, run_id=run_id, expires_at=rows.deadlines[run_id]),
                    keys=[run_key(run_id), ("sus", sus_id)])
            for run_id, sus_id in zip(rows.runs, rows.suspensions)]


def racing_ops(w: World) -> list[Callable[[Any], Op]]:
    """Claims of both kinds from every role, deletes, re-creates, lists and
    state changes of the run.  Each builder takes Hypothesis' ``draw``."""
    world: SuspensionRows = w[NAME]
    roles = sampled(("exact", "exact", "ancestor", "sibling", "lookalike"))
    runs = sampled(world.runs)
    instants = instants_around([world.t0] + [d for d in world.deadlines.values() if d is not None])

    def claimer(draw) -> Context:
        # claimers act for several principals: none is written into the run
        return attrs.evolve(ctx_of(ROLES[draw(roles)]), principal=draw(sampled(PRINCIPALS)))

    def claim(draw):
        run_id = draw(runs)
        return make_op("claim_suspension", claimer(draw), run_id, keys=[run_key(run_id)])

    def sweep(draw):
        run_id = draw(runs)
        return make_op("claim_expired_suspension", claimer(draw), run_id,
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
        role = draw(sampled(("exact", "sibling")))
        return make_op("create_suspension", ctx_of(ROLES[role]),
                       Suspension(id=sus_id, run_id=run_id, expires_at=None),
                       keys=[run_key(run_id), ("sus", sus_id)])

    def listing(draw):
        # at a deadline instant or 1 ms either side, all rows or the first one or two
        now = draw(instants)
        limit = draw(sampled((0, 1, 2)))
        if draw(st.booleans()):
            return make_op("list_expired_across_scopes", ctx_of(ROLES["other"]), now, limit, keys=None)
        return make_op("list_expired", ctx_of(ROLES[draw(roles)]), now, limit, keys=None)

    def set_state(draw):
        # an update of the run racing the claims (pausing again, or failing it)
        run_id = draw(runs)
        state = draw(sampled((RunState.PAUSED, RunState.FAILED)))
        return make_op("update_run", ctx_of(ROLES["exact"]),
                       Run(id=run_id, agent_id=world.agent_of(run_id), state=state), keys=[run_key(run_id)])

    return [claim, claim, sweep, delete, get, recreate, listing, set_state]


def storm_ops(w: World) -> list[Callable[[Any], Op]]:
    """Builders for storms: every branch contends for the first run's pause
    (SUSP-CLAIM-10, the deadline partition, duplicate suspensions)."""
    world: SuspensionRows = w[NAME]
    run_id = world.runs[0]
    visible = sampled(("exact", "exact", "ancestor"))
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
        role = draw(sampled(("exact", "sibling", "other")))
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


_WRITER_IMPORTS = ("from cortex_spec.stateful.suspensions import "
                   "writer_resume, writer_reject, writer_sweep, writer_cancel")


def writer(name: str, c: Context, run_id: str, cp: str | None, now: datetime) -> Script:
    """Writer ``name`` as a branch step."""
    from .ops import py

    return Script(
        name=f"writer {name}",
        run=functools.partial(_run_writer, name, c, run_id, cp, now),
        source=f"writer_{name}(call, {py(c)}, {run_id!r}, {cp!r}, {py(now)})",
        imports=_WRITER_IMPORTS,
    )


def _run_writer(name: str, c: Context, run_id: str, cp: str | None, now: datetime, call: Call) -> None:
    WRITERS[name](call, c, run_id, cp, now)


def four_writers(draw: Any, w: World, declared: frozenset[str]) -> Race:
    """2–4 of the four writers of one paused run, raced (FOUR-7); with a
    pending checkpoint P when the store declares ``checkpoints``."""
    rows: SuspensionRows = w[NAME]
    if "checkpoints" in declared and draw(st.booleans()):
        from .classes import plugin

        w = w.with_rows("checkpoints", plugin("checkpoints").world(draw, w, 1, False))
        cp = w["checkpoints"].checkpoints[0]
    else:
        cp = None
    names = draw(st.lists(sampled(tuple(sorted(WRITERS))), min_size=2, max_size=4, unique=True))
    exact = ctx_of(ROLES["exact"])
    branches = tuple((writer(n, exact, rows.runs[0], cp, rows.t0),) for n in names)
    return Race(("FOUR-7",), branches, world=w)


# -- crash faults ----------------------------------------------------------------------

ZERO = Context(Scope())


def _pause_a_run(m: Any, c: Context) -> str:
    """A paused run with a suspension, created on both stores; its id."""
    run_id = fixed_id(ids.RUN, 50_000 + m.next_id)
    sus_id = fixed_id(ids.SUSPENSION, 50_000 + m.next_id)
    m.next_id += 1
    m.remember("run", run_id)
    m.both(make_op("create_run", c, Run(id=run_id, agent_id=AGENTS[0], state=RunState.PAUSED), keys=None))
    m.both(make_op("create_suspension", c, Suspension(id=sus_id, run_id=run_id), keys=None))
    return run_id


def _claim(m: Any, data: Any) -> Op:
    c = data.draw(m.ctx_choice(), "ctx")
    if not m.known.get("run"):
        # nothing paused yet: pause a run here first, so the fault always has a target
        _pause_a_run(m, data.draw(m.ctx_choice(), "where"))
    run_id = data.draw(sampled(tuple(m.known["run"])), "run_id")
    return make_op("claim_suspension", c, run_id, keys=None)


def _retries(m: Any, op: Op, got: Outcome) -> list[Op]:
    """Neither claim may take a pause a dead worker holds."""
    from cortex_spec.testing import FAR_FUTURE

    c, run_id = op.ctx, op.args[0]
    return [make_op("claim_suspension", c, run_id, keys=None),
            make_op("claim_expired_suspension", c, run_id, FAR_FUTURE, keys=None)]


def _sweep(m: Any) -> None:
    """The expiry sweeper: list what is due across scopes, sweep-claim each
    row under its own scope; only due rows of paused runs may be taken."""
    from .differential import Mismatch

    now = m.clock.now()
    listed = m.both(make_op("list_expired_across_scopes", ZERO, now, 0, keys=None))
    if not listed.ok:
        raise Mismatch(f"MACH-CRASH-2: the sweeper's list_expired_across_scopes failed: {listed.describe()}",
                       "MACH-CRASH-2")
    for row in listed.raw:
        if row.expires_at is None or row.expires_at > now:
            raise Mismatch(f"MACH-CRASH-2: the sweeper listed {row.run_id} whose deadline "
                           f"{row.expires_at} is not due at {now}", "MACH-CRASH-2")
        claim = m.both(make_op("claim_expired_suspension", Context(row.scope), row.run_id, now, keys=None))
        run = m.reference_outcome(make_op("get_run", Context(row.scope), row.run_id, keys=None))
        if claim.ok and not (run.ok and run.raw.state == RunState.RUNNING):
            raise Mismatch(f"MACH-CRASH-2: the sweep claim of {row.run_id} succeeded but "
                           "the run is not running afterwards", "MACH-CRASH-2")


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
    families=(Family("four-writers", four_writers, ("FOUR-7",), weight=0.5, cost=2.0),),
    claims=(Claim("suspension", _claim, _retries),),
    sweeps=(Sweep("expiry", (timedelta(seconds=2), timedelta(days=2)), _sweep),),
    weight=1.0,
    cost=4.0,
)
