"""Machine operations of class ``orchestration``: its kinds' generated rules,
views, world and storms (:mod:`.kinds`), and by hand the continuation claim
and child admission with the ORCH-RACE families — claims racing claims and
status updates, links of different children and of one child again, links
racing a stop or a claim."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import strategies as st

from cortex_spec import ids
from cortex_spec.orchestration import TABLES, TEAM_RUNS, OrchestrationStatus

from .kinds import KindRows, class_machines
from .ops import Op
from .plugin import Family, Race, World
from .world import ROLES, ctx_of, fixed_id, make_op, sampled

NAME = "orchestration"

#: children a link names (a small pool, so that repeats are frequent)
CHILDREN = tuple(fixed_id(ids.RUN, 700 + n) for n in range(4))
KEYS = [("table", TEAM_RUNS.name)]


def _claim(c: Any, team: str) -> Op:
    return make_op("claim_orchestration_continuation", c, team, keys=KEYS)


def _link(c: Any, team: str, child: str) -> Op:
    return make_op("link_orchestration_child", c, team, child, keys=KEYS)


def r_claim(m: Any, data: Any) -> Op:
    return _claim(data.draw(m.ctx_choice(), "ctx"), data.draw(m.id_choice(TEAM_RUNS.name), "team_id"))


def r_link(m: Any, data: Any) -> Op:
    return _link(data.draw(m.ctx_choice(), "ctx"), data.draw(m.id_choice(TEAM_RUNS.name), "team_id"),
                 data.draw(sampled(CHILDREN), "child_run_id"))


RULES = {"claim_orchestration_continuation": r_claim, "link_orchestration_child": r_link}


# -- concurrent scenarios ---------------------------------------------------------------------


def _first_team(w: World) -> Any:
    return w[NAME].rows[TEAM_RUNS.name][0]


def _with_first_team(w: World, status: OrchestrationStatus) -> World:
    """The world with its first team run created in ``status``, no children."""
    rows: KindRows = w[NAME]
    teams = rows.rows[TEAM_RUNS.name]
    first = attrs.evolve(teams[0], status=status, child_run_ids=())
    return w.with_rows(NAME, attrs.evolve(rows, rows={**rows.rows, TEAM_RUNS.name: (first,) + teams[1:]}))


def _update(team: Any, status: OrchestrationStatus) -> Op:
    return make_op("update_orchestration_run", ctx_of(ROLES["exact"]), attrs.evolve(team, status=status), keys=KEYS)


def racing_ops(w: World) -> list[Any]:
    teams = tuple(t.id for t in w[NAME].rows[TEAM_RUNS.name])
    roles = sampled(("exact", "exact", "ancestor", "sibling"))

    def claim(draw: Any) -> Op:
        return _claim(ctx_of(ROLES[draw(roles)]), draw(sampled(teams)))

    def link(draw: Any) -> Op:
        return _link(ctx_of(ROLES[draw(roles)]), draw(sampled(teams)), draw(sampled(CHILDREN)))

    return [claim, link]


def _claims(draw: Any, w: World, declared: frozenset[str]) -> Race:
    """ORCH-RACE-1: 2–4 continuation claims on one waiting team run."""
    w = _with_first_team(w, OrchestrationStatus.WAITING)
    team = _first_team(w).id
    n = draw(st.integers(2, 4))
    return Race(("ORCH-RACE-1", "ORCH-CLAIM-4"), tuple((_claim(ctx_of(ROLES["exact"]), team),) for _ in range(n)),
                world=w)


def _claim_vs_update(draw: Any, w: World, declared: frozenset[str]) -> Race:
    """ORCH-RACE-2: a claim (or two) against an update of the status."""
    w = _with_first_team(w, OrchestrationStatus.WAITING)
    team = _first_team(w)
    status = draw(sampled(list(OrchestrationStatus)))
    claims = tuple((_claim(ctx_of(ROLES["exact"]), team.id),) for _ in range(draw(st.integers(1, 2))))
    return Race(("ORCH-RACE-2", "ORCH-CLAIM-2"), claims + ((_update(team, status),),), world=w)


def _links(draw: Any, w: World, declared: frozenset[str]) -> Race:
    """ORCH-RACE-3: links of different children, and of one child again, on a
    running team run."""
    w = _with_first_team(w, OrchestrationStatus.RUNNING)
    team = _first_team(w).id
    kids = draw(st.lists(sampled(CHILDREN), min_size=2, max_size=4))
    return Race(("ORCH-RACE-3", "ORCH-LINK-6", "ORCH-LINK-3"),
                tuple((_link(ctx_of(ROLES["exact"]), team, k),) for k in kids), world=w)


def _link_vs_stop(draw: Any, w: World, declared: frozenset[str]) -> Race:
    """ORCH-RACE-4: links against an update to waiting or completed, or
    against the claim of a waiting team run."""
    if draw(st.booleans()):
        w = _with_first_team(w, OrchestrationStatus.RUNNING)
        other = _update(_first_team(w), draw(sampled((OrchestrationStatus.WAITING,
                                                                OrchestrationStatus.COMPLETED))))
    else:
        w = _with_first_team(w, OrchestrationStatus.WAITING)
        other = _claim(ctx_of(ROLES["exact"]), _first_team(w).id)
    team = _first_team(w).id
    links = tuple((_link(ctx_of(ROLES["exact"]), team, CHILDREN[i]),) for i in range(draw(st.integers(1, 2))))
    return Race(("ORCH-RACE-4", "ORCH-LINK-4", "ORCH-LINK-5"), links + ((other,),), world=w)


FAMILIES = (
    Family("claims", _claims, ("ORCH-RACE-1", "ORCH-CLAIM-4"), weight=0.3),
    Family("claim-vs-update", _claim_vs_update, ("ORCH-RACE-2", "ORCH-CLAIM-2"), weight=0.3),
    Family("links", _links, ("ORCH-RACE-3", "ORCH-LINK-6", "ORCH-LINK-3"), weight=0.3),
    Family("link-vs-stop", _link_vs_stop, ("ORCH-RACE-4", "ORCH-LINK-4", "ORCH-LINK-5"), weight=0.3),
)

MACHINES = class_machines(NAME, TABLES, rules=RULES, racing_ops=racing_ops, families=FAMILIES,
                          weight=0.5, cost=4.0)
