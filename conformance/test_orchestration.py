"""Certifies conformance class ``orchestration`` (spec: orchestration.md)
beyond what the description of its two kinds generates (``test_kinds.py``):
team-run statuses and children at creation, updates that never touch the
children, the continuation claim and child admission at exactly the team's
scope in every status, and threaded races of claims, links and status
updates.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import attrs
import pytest

from cortex_spec import ids
from cortex_spec.errors import InvalidArgument, InvalidState, OrchestrationRunNotFound
from cortex_spec.orchestration import TABLES, OrchestrationRun, OrchestrationStatus
from cortex_spec.testing import (
    clause, ctx, expect, expect_is, expect_raises, expect_that, expect_true, race, Said, shorten,
)

from .examples import HOME, OUTSIDERS_OF_HOME, Examples, table_long_scopes

S = OrchestrationStatus
#: where a team run may be asked for by id but not driven: above it (SCOPE-BYID allows reads there)
ABOVE = ("ws=w1",)


def _team(store: Any, status: S | str = S.RUNNING, scope: str = HOME, **fields: Any) -> OrchestrationRun:
    return store.create_orchestration_run(ctx(scope), OrchestrationRun(id=ids.new_id(ids.ORCHESTRATION_RUN),
                                                                       status=status, **fields))


def _children(n: int) -> tuple[str, ...]:
    return tuple(ids.new_id(ids.RUN) for _ in range(n))


# -- team runs (ORCH-RUN) ---------------------------------------------------------------------


@pytest.mark.clause("ORCH-RUN-1", "ORCH-RUN-2")
def test_statuses_and_first_children_at_creation(store):
    kids = _children(3)
    for status in S:
        run = _team(store, status, child_run_ids=kids)
        expect("ORCH-RUN-2", (run.status, run.child_run_ids), (status, kids), f"a run created {status.value}")
        expect("ORCH-RUN-2", store.get_orchestration_run(ctx(HOME), run.id), run, "the run read back")
    for bad in ("paused", "created", "cancelled", "RUNNING", "", 3):
        expect_raises("ORCH-RUN-1", InvalidArgument, lambda: _team(store, bad), f"status {bad!r}")
    for bad_kids, what in (((kids[0], kids[0]), "a child given twice"), (("arun",), "a child id that is not a TypeID"),
                           ((ids.new_id(ids.AGENT),), "an agent id for a child"), ([kids[0], 7], "a child that is no str")):
        expect_raises("ORCH-RUN-2", InvalidArgument, lambda: _team(store, child_run_ids=bad_kids), what)
    expect("ORCH-RUN-2", store.count_orchestration_runs(ctx(HOME)), len(S), "runs stored after the refused creates")


@pytest.mark.clause("ORCH-RUN-6", "ORCH-RUN-5", "ORCH-LINK-7")
def test_updates_never_touch_the_children(store, clock):
    run = _team(store, child_run_ids=_children(2))
    store.link_orchestration_child(ctx(HOME), run.id, (extra := ids.new_id(ids.RUN)))
    clock.advance(milliseconds=5)
    for carried in ((), _children(4), run.child_run_ids[::-1], ("not-even-an-id",)):
        got = store.update_orchestration_run(ctx("ws=w1"), attrs.evolve(run, output="x", child_run_ids=carried))
        expect("ORCH-RUN-6", got.child_run_ids, run.child_run_ids + (extra,),
               f"children after an update carrying {carried!r}")
        expect("ORCH-RUN-5", (got.output, got.updated_at), ("x", clock.now()), "the written fields")


# -- the continuation claim (ORCH-CLAIM) ------------------------------------------------------


@pytest.mark.clause("ORCH-CLAIM-1", "ORCH-CLAIM-2", "ORCH-CLAIM-3")
def test_the_claim_moves_a_waiting_run_at_its_own_scope(store, clock):
    run = _team(store, S.WAITING, child_run_ids=_children(1), input="plan")
    clock.advance(milliseconds=7)
    for caller in ABOVE + tuple(OUTSIDERS_OF_HOME):
        expect_raises("ORCH-CLAIM-1", OrchestrationRunNotFound,
                      lambda: store.claim_orchestration_continuation(ctx(caller), run.id),
                      f"a claim from {caller}, not the team's own scope")
    expect_raises("ORCH-CLAIM-1", OrchestrationRunNotFound,
                  lambda: store.claim_orchestration_continuation(ctx(HOME), ids.new_id(ids.ORCHESTRATION_RUN)),
                  "a claim of a run that does not exist")
    expect("ORCH-CLAIM-1", store.get_orchestration_run(ctx(HOME), run.id), run, "the run after refused claims")
    got = store.claim_orchestration_continuation(ctx(HOME), run.id)
    expect("ORCH-CLAIM-2", got, attrs.evolve(run, status=S.RUNNING, updated_at=clock.now()),
           "the claimed run (status and updated_at changed, nothing else)")
    expect("ORCH-CLAIM-2", store.get_orchestration_run(ctx(HOME), run.id), got, "the claimed run read back")
    for status in (S.RUNNING, S.COMPLETED, S.FAILED):
        other = _team(store, status)
        expect_raises("ORCH-CLAIM-3", InvalidState, lambda: store.claim_orchestration_continuation(ctx(HOME), other.id),
                      f"a claim of a {status.value} run")
        expect("ORCH-CLAIM-3", store.get_orchestration_run(ctx(HOME), other.id), other, f"the {status.value} run after it")
    expect_raises("ORCH-CLAIM-1", InvalidArgument, lambda: store.claim_orchestration_continuation(ctx(HOME), "orch"),
                  "a team id that is not a TypeID")


# -- child admission (ORCH-LINK) --------------------------------------------------------------


@pytest.mark.clause("ORCH-LINK-1", "ORCH-LINK-2", "ORCH-LINK-3", "ORCH-LINK-4", "ORCH-LINK-5", "ORCH-LINK-7")
def test_children_are_admitted_only_while_running(store, clock):
    first = _children(2)
    run = _team(store, S.RUNNING, child_run_ids=first)
    kid = ids.new_id(ids.RUN)
    for caller in ABOVE + tuple(OUTSIDERS_OF_HOME):
        expect_raises("ORCH-LINK-1", OrchestrationRunNotFound,
                      lambda: store.link_orchestration_child(ctx(caller), run.id, kid), f"a link from {caller}")
    for bad in ("arun", ids.new_id(ids.AGENT), None, run.id):
        expect_raises("ORCH-LINK-2", InvalidArgument, lambda: store.link_orchestration_child(ctx(HOME), run.id, bad),
                      f"child_run_id {bad!r}")
    clock.advance(milliseconds=3)
    store.link_orchestration_child(ctx(HOME), run.id, kid)  # the child need not exist
    got = store.get_orchestration_run(ctx(HOME), run.id)
    expect("ORCH-LINK-4", (got.child_run_ids, got.updated_at), (first + (kid,), clock.now()), "after a link")
    clock.advance(milliseconds=3)
    for again in (kid, first[0]):
        store.link_orchestration_child(ctx(HOME), run.id, again)
        expect("ORCH-LINK-3", store.get_orchestration_run(ctx(HOME), run.id), got, f"after linking {again} again")
    for status in (S.WAITING, S.COMPLETED, S.FAILED):
        stopped = store.update_orchestration_run(ctx(HOME), attrs.evolve(got, status=status))
        expect_raises("ORCH-LINK-5", InvalidState,
                      lambda: store.link_orchestration_child(ctx(HOME), run.id, ids.new_id(ids.RUN)),
                      f"a new child of a {status.value} run")
        store.link_orchestration_child(ctx(HOME), run.id, kid)  # a retried link is still safe
        expect("ORCH-LINK-7", store.get_orchestration_run(ctx(HOME), run.id), stopped,
               f"the {status.value} run after a refused and a retried link")


# -- threaded races (ORCH-RACE) ----------------------------------------------------------------


@pytest.mark.clause("ORCH-CLAIM-4", "ORCH-RACE-1", "ORCH-RACE-2")
def test_one_claim_wins_even_against_status_updates(store, profile):
    n = max(profile.race_threads, 2)
    for round_ in range(max(profile.race_rounds // 2, 1)):
        run = _team(store, S.WAITING)
        outcomes = race([functools.partial(store.claim_orchestration_continuation, ctx(HOME), run.id)
                         for _ in range(n)])
        expect("ORCH-RACE-1", sum(o.ok for o in outcomes), 1, f"winners among {n} racing claims")
        with clause("ORCH-CLAIM-4", what="the losers of the claim race"):
            expect_true("ORCH-CLAIM-4", all(isinstance(o.error, InvalidState) for o in outcomes if not o.ok),
                        "all(isinstance(o.error, InvalidState) for o in outcomes if not o.ok)")
        # a claim against an update moving the status away
        run = _team(store, S.WAITING)
        target = (S.COMPLETED, S.FAILED, S.RUNNING)[round_ % 3]
        calls = [functools.partial(store.claim_orchestration_continuation, ctx(HOME), run.id),
                 functools.partial(store.update_orchestration_run, ctx(HOME), attrs.evolve(run, status=target))]
        claim, update = race(calls if round_ % 2 else calls[::-1])[:: 1 if round_ % 2 else -1]
        final = store.get_orchestration_run(ctx(HOME), run.id)
        with clause("ORCH-RACE-2", what=f"a claim racing an update to {target.value}"):
            expect_is("ORCH-RACE-2", update.error, None, "update.ok" + ": " + shorten(update))
            if claim.ok:  # the claim came first; the update wrote its status after it
                expect("ORCH-RACE-2", final.status, target, "final.status" + ": " + shorten(final.status))
            else:  # the update came first: the run was not waiting any more
                expect_that("ORCH-RACE-2", isinstance(claim.error, InvalidState),
                            "claim.error" + ": " + shorten((claim, final.status)), Said("an instance of InvalidState"),
                            claim.error)
                expect("ORCH-RACE-2", final.status, target, "final.status" + ": " + shorten((claim, final.status)))


@pytest.mark.clause("ORCH-LINK-6", "ORCH-RACE-3", "ORCH-LINK-3")
def test_racing_links_all_land_once(store, profile):
    n = max(profile.race_threads, 2)
    for _ in range(max(profile.race_rounds // 2, 1)):
        run = _team(store, child_run_ids=_children(1))
        kids = _children(n)
        calls = [functools.partial(store.link_orchestration_child, ctx(HOME), run.id, k) for k in kids]
        calls += [functools.partial(store.link_orchestration_child, ctx(HOME), run.id, kids[0])] * 2
        outcomes = race(calls)
        with clause("ORCH-RACE-3", what="racing links of a running team"):
            expect_true("ORCH-RACE-3", all(o.ok for o in outcomes),
                        "all(o.ok for o in outcomes)" + ": " + shorten([o.error for o in outcomes if not o.ok]))
        got = store.get_orchestration_run(ctx(HOME), run.id).child_run_ids
        expect("ORCH-LINK-6", (got[0], sorted(got[1:])), (run.child_run_ids[0], sorted(kids)),
               f"children after {len(calls)} racing links ({n} distinct)")


@pytest.mark.clause("ORCH-RACE-4", "ORCH-LINK-4", "ORCH-LINK-5")
def test_a_link_racing_a_stop_or_a_claim_lands_only_while_running(store, profile):
    for round_ in range(max(profile.race_rounds // 2, 1)):
        kid = ids.new_id(ids.RUN)
        if round_ % 2:
            run = _team(store, S.RUNNING)
            target = (S.WAITING, S.COMPLETED)[round_ % 4 // 2]
            other = functools.partial(store.update_orchestration_run, ctx(HOME), attrs.evolve(run, status=target))
            what = f"a link racing an update to {target.value}"
        else:
            run = _team(store, S.WAITING)
            other = functools.partial(store.claim_orchestration_continuation, ctx(HOME), run.id)
            what = "a link racing the continuation claim of a waiting run"
        link, done = race([functools.partial(store.link_orchestration_child, ctx(HOME), run.id, kid), other])
        final = store.get_orchestration_run(ctx(HOME), run.id)
        with clause("ORCH-RACE-4", what=what):
            expect_is("ORCH-RACE-4", done.error, None, "done.ok" + ": " + shorten(done))
            if link.ok:
                expect("ORCH-RACE-4", final.child_run_ids, (kid,),
                       "final.child_run_ids" + ": " + shorten(final.child_run_ids))
            else:
                expect_that("ORCH-RACE-4", isinstance(link.error, InvalidState),
                            "link.error" + ": " + shorten((link, final)), Said("an instance of InvalidState"),
                            link.error)
                expect("ORCH-RACE-4", final.child_run_ids, (), "final.child_run_ids" + ": " + shorten((link, final)))


# ===========================================================================
# What this class gives the scope and common suites (conformance/examples.py;
# the two kinds' generated methods come from their description)
# ===========================================================================


def _examples_seed(store: Any, fixture: Any) -> SimpleNamespace:
    """A waiting and a running team run at HOME (the claim's and the link's)."""
    return SimpleNamespace(waiting_team=_team(store, S.WAITING).id, running_team=_team(store, S.RUNNING).id)


def _examples_view(store: Any, w: SimpleNamespace, scopes: Any) -> dict:
    out: dict = {}
    for sc in scopes:
        c = sc if not isinstance(sc, str) else ctx(sc)
        out[f"orchestration_runs@{c.scope.canonical()}"] = store.list_orchestration_runs(c)
    return out


EXAMPLES = Examples(
    "orchestration",
    long_scopes=table_long_scopes(TABLES),  # SCOPE-CANON-6 on every stored kind (test_long_scopes.py)
    seed=_examples_seed,
    view=_examples_view,
    good={
        "claim_orchestration_continuation": lambda s, c, w: s.claim_orchestration_continuation(c, w.waiting_team),
        "link_orchestration_child": lambda s, c, w: s.link_orchestration_child(c, w.running_team,
                                                                              ids.new_id(ids.RUN)),
    },
    bad={
        "claim_orchestration_continuation": lambda s, c, w: s.claim_orchestration_continuation(
            c, ids.new_id(ids.RUN)),
        "link_orchestration_child": lambda s, c, w: s.link_orchestration_child(c, w.running_team,
                                                                              ids.new_id(ids.AGENT)),
    },
    # a bad argument wins over a team run that is missing or out of reach (SCOPE-ZERO-3)
    precedence=lambda s, w: [
        lambda c: s.claim_orchestration_continuation(c, "orch_"),
        lambda c: s.link_orchestration_child(c, w.running_team, "arun"),
        lambda c: s.link_orchestration_child(c, ids.new_id(ids.ORCHESTRATION_RUN), None),
    ],
)
