"""Certifies conformance class ``checkpoints`` (spec: checkpoints.md): the
approval checkpoint's two shapes, creation (scope and times stamped, only
``pending`` without a decision accepted, ids unique across scopes, run and
agent never checked), prefix visibility of get and resolve, the one-time
resolve (decision time stamped by the store, a second resolve refused with
the first decision kept, exactly one winner among concurrent resolves),
``list_pending``/``count_pending`` with their total order and paging, and the
cross-scope cursor ``list_pending_across_scopes``. The class stands alone:
every test uses checkpoint methods only, except CP-RESOLVE-6, which checks
that resolve leaves runs and suspensions alone, and SCOPE-ID-3's check that a
checkpoint naming an invisible run does not reveal it.  After the helpers: the
examples this module gives the scope and common suites (``EXAMPLES``) and the
checkpoint tests those suites held (stamps from one clock read, the state
enumeration, id order and cursor, a resolve never seen half applied).
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, Callable

import attrs
import pytest

from cortex_spec import ids
from cortex_spec.checkpoints import Checkpoint, CheckpointFilter, CheckpointState, Decision
from cortex_spec.clock import EPOCH
from cortex_spec.context import Context
from cortex_spec.errors import (
    AlreadyExists,
    CheckpointNotFound,
    InvalidArgument,
    InvalidState,
    NoScope,
    RunNotFound,
)
from cortex_spec.runs import RunState
from cortex_spec.scope import Scope
from cortex_spec.testing import (
    FAR_FUTURE, ZERO, clause, ctx, expect, expect_false, expect_is, expect_op, expect_raises,
    expect_strict, expect_that, race, Said, shorten, state_view,
)
from cortex_spec.checkpoints import approve, make_checkpoint, reject
from cortex_spec.runs import make_run
from cortex_spec.suspensions import make_suspension

from .examples import (
    HOME,
    XS_SCOPES,
    ByIdOp,
    Examples,
    Kind,
    Site,
    StateError,
    XsMethod,
    expect_invalid,
    long_call,
    long_check,
    long_ids,
    long_scope_of,
)
from .helpers import T1, T2, RawClock, assert_instant, assert_scope, crafted, raises
from .helpers import ms as _ms

MS = timedelta(milliseconds=1)

W1 = "ws=w1"
W1P1 = "ws=w1/proj=p1"
W1P2 = "ws=w1/proj=p2"
W2 = "ws=w2"
W10 = "ws=w10"
W1X = "ws=w1x"
ORG_W1 = "org=w1"
#: every scope a test writes to lies at or below one of these, so a
#: state_view from them observes every stored row
ROOTS = (W1, W2, W10, W1X, ORG_W1)


# -- helpers -------------------------------------------------------------------------


def _cp(store: Any, scope: str, run_id: str | None = None, **fields: Any) -> Checkpoint:
    return store.create_checkpoint(ctx(scope), make_checkpoint(run_id, **fields))


def _get_or_error(store: Any, scope: str, cp_id: str) -> Any:
    try:
        return store.get_checkpoint(ctx(scope), cp_id)
    except CheckpointNotFound:
        return "<CheckpointNotFound>"


def _view(store: Any, cp_ids=(), scopes=ROOTS) -> dict:
    """Everything observable about checkpoints: the pending lists of every
    scope and of all scopes, plus each named checkpoint as seen by get."""
    view = state_view(store, scopes, classes={"checkpoints"})
    for cid in cp_ids:
        for s in scopes:
            view[f"checkpoint[{cid}]@{s}"] = _get_or_error(store, s, cid)
    return view


def _ids(rows) -> list[str]:
    return [r.id for r in rows]


def _sorted_ids(n: int) -> list[str]:
    return sorted(ids.new_id(ids.CHECKPOINT) for _ in range(n))


def _fields(d: Decision) -> tuple:
    return (d.approved, d.decided_by, d.reason)


RICH_METADATA = {
    "n": 1,
    "f": 1.0,
    "b": True,
    "z": None,
    "big": 2**63 - 1,
    "neg": -(2**63),
    "s": "naïve ✓ 😀\n",
    "l": [1, 1.0, False, None, "x", [], {}],
    "d": {"inner": {"k": [0.5, {"deep": "yes"}]}},
    "": "",
}


# ===========================================================================
# What this class gives the scope and common suites (conformance/examples.py),
# and the checkpoint tests those suites held
# ===========================================================================

S = Scope.parse


def _shared() -> SimpleNamespace:
    """The run every checkpoint of one scope test refers to (and a step the
    whole-state view reads)."""
    return SimpleNamespace(run_id=ids.new_id(ids.RUN), step_id=ids.new_id(ids.STEP))


def _examples_seed(store: Any, fixture: Any) -> SimpleNamespace:
    """A pending checkpoint at HOME (``cp`` is the one a site resolves)."""
    c = ctx(HOME)
    w = SimpleNamespace(run_id=ids.new_id(ids.RUN), checkpoint_id=ids.new_id(ids.CHECKPOINT))
    store.create_checkpoint(c, make_checkpoint(w.run_id, id=w.checkpoint_id))
    w.cp = w.checkpoint_id
    return w


#: A call of each hand-written method with valid arguments addressing the
#: seeded rows (those of the generated create, get and pending listing come
#: from the description, conformance/examples.py).
_GOOD_CALLS: dict[str, Callable[[Any, Any, SimpleNamespace], Any]] = {
    "resolve": lambda s, c, w: s.resolve(c, w.checkpoint_id, approve()),
    "list_pending_across_scopes": lambda s, c, w: s.list_pending_across_scopes(c),
}

#: A call of each hand-written method whose other arguments are garbage
#: (InvalidArgument under a valid context).
_BAD_CALLS: dict[str, Callable[[Any, Any, SimpleNamespace], Any]] = {
    "resolve": lambda s, c, w: s.resolve(c, w.checkpoint_id, "approved"),
    "list_pending_across_scopes": lambda s, c, w: s.list_pending_across_scopes(c, after_id=ids.new_id(ids.RUN)),
}


def _invalid_before_not_found(store: Any, w: SimpleNamespace) -> list[Callable[[Context], Any]]:
    """Calls with a bad argument that address a row the caller cannot reach
    or that does not exist; InvalidArgument must win over the NotFound."""
    return [
        lambda c: store.resolve(c, w.checkpoint_id, "yes"),
        lambda c: store.resolve(c, ids.new_id(ids.CHECKPOINT), Decision(approved="yes")),
    ]


def _second_resolve(store: Any) -> tuple[Callable[[Context], Any], Callable[[Any], dict]]:
    """A resolve of a checkpoint already resolved (InvalidState)."""
    c = ctx(HOME)
    cp = store.create_checkpoint(c, make_checkpoint(ids.new_id(ids.RUN)))
    store.resolve(c, cp.id, approve())
    return (lambda cc: store.resolve(cc, cp.id, approve(by="mallory"))), (lambda scopes: state_view(store, scopes))


def _checkpoint_reads(store: Any, c: Context, obj: Any, sh: SimpleNamespace) -> list[tuple[str, Any]]:
    out = [("resolve", store.resolve(c, obj.id, approve()).scope)]
    out.append(("get after resolve", store.get_checkpoint(c, obj.id).scope))
    return out


_KINDS = (
    Kind(
        "checkpoint", "checkpoints",
        new=lambda sh, **f: make_checkpoint(sh.run_id, **f),
        create=lambda s, c, o: s.create_checkpoint(c, o),
        get=lambda s, c, o: s.get_checkpoint(c, o.id),
        lists=(
            lambda s, c, sh: s.list_pending(c),
            lambda s, c, sh: s.list_pending(c, CheckpointFilter(run_id=sh.run_id)),
        ),
        counts=(
            lambda s, c, sh: s.count_pending(c),
            lambda s, c, sh: s.count_pending(c, CheckpointFilter(run_id=sh.run_id, limit=1)),
        ),
        page=lambda s, c, sh, start, size: s.list_pending(c, CheckpointFilter(offset=start, limit=size)),
        across=lambda s, sh: s.list_pending_across_scopes(ZERO),
        not_found=CheckpointNotFound,
        vary=lambda o: attrs.evolve(o, reason="impostor"),
        reads=_checkpoint_reads,
        shared=_shared,
        view=lambda s, sh, o, scopes: state_view(s, scopes, run_ids=[sh.run_id], step_ids=[sh.step_id]),
        # checkpoints of one run at several scopes
        same_reference={},
        clauses={"ids": ("CP-CREATE-3",), "same_reference": ("CP-CREATE-4",)},
    ),
)


def _setup_checkpoint(store: Any, c: Context) -> str:
    return store.create_checkpoint(c, make_checkpoint()).id


def _done_resolved(store: Any, c: Context, key: str) -> None:
    cp = store.get_checkpoint(c, key)
    expect("SCOPE-BYID-1", cp.state, CheckpointState.RESOLVED, "the checkpoint's state after the by-id resolve")
    assert_scope(cp.scope, c.scope)


#: resolve by id (get_checkpoint's entry is generated from the description)
_BYID = (
    ByIdOp("resolve", "checkpoints", CheckpointNotFound, _setup_checkpoint,
           lambda s, c, k: s.resolve(c, k, approve()), _done_resolved, missing=lambda: ids.new_id(ids.CHECKPOINT)),
)


def _seed_xs_checkpoints(store: Any) -> dict[str, Scope]:
    """Per scope: a pending checkpoint (selected) and a resolved one (not)."""
    expected = {}
    for sc in XS_SCOPES:
        c = ctx(sc)
        pending = store.create_checkpoint(c, make_checkpoint())
        done = store.create_checkpoint(c, make_checkpoint())
        store.resolve(c, done.id, approve())
        expected[pending.id] = S(sc)
    return expected


def _act_on_checkpoint(store: Any, row: Any) -> None:
    store.resolve(Context(row.scope), row.id, approve())
    expect("SCOPE-XS-4", store.get_checkpoint(Context(row.scope), row.id).state, CheckpointState.RESOLVED,
           "the checkpoint's state after the resolve made under the listed row's scope")


_XS = {
    "list_pending_across_scopes": XsMethod(
        "list_pending_across_scopes", "checkpoints",
        seed=_seed_xs_checkpoints,
        call=lambda s, c: s.list_pending_across_scopes(c),
        act=_act_on_checkpoint,
        scoped_twin=lambda s, c: s.list_pending(c),
        bad=(
            lambda s, c: s.list_pending_across_scopes(c, after_id="bad"),
            lambda s, c: s.list_pending_across_scopes(c, after_id=ids.new_id(ids.RUN)),
            lambda s, c: s.list_pending_across_scopes(c, after_id=5),
            lambda s, c: s.list_pending_across_scopes(c, after_id="acp_" + "8" * 26),
            lambda s, c: s.list_pending_across_scopes(c, limit="x"),
            lambda s, c: s.list_pending_across_scopes(c, limit=True),
        ),
    ),
}


def _every_write(store: Any, row: str, callers: list[str]) -> tuple[SimpleNamespace, Callable[[], None]]:
    """Every write method of the class from each of ``callers`` on rows
    stored at ``row``, and a check that every row still reads back at ``row``."""
    home = ctx(row)
    cps = [store.create_checkpoint(home, make_checkpoint()) for _ in callers]
    for cp, caller in zip(cps, callers):
        store.resolve(ctx(caller), cp.id, approve())

    def check() -> None:
        for cp in cps:
            got = store.get_checkpoint(home, cp.id)
            expect("SCOPE-IMM-4", got.state, CheckpointState.RESOLVED, "a checkpoint's state after a resolve from an ancestor")
            assert_scope(got.scope, S(row))
    return SimpleNamespace(), check


def _hidden(store: Any, c: Context, written: SimpleNamespace) -> None:
    """An outsider of the written rows sees no pending checkpoint."""
    expect("SCOPE-IMM-4", store.list_pending(c), [], "list_pending from an outsider of the written rows")
    expect("SCOPE-IMM-4", store.count_pending(c), 0, "count_pending from an outsider of the written rows")


def _prep_checkpoint(store: Any, c: Context, w: SimpleNamespace) -> None:
    w.cp = store.create_checkpoint(c, make_checkpoint()).id


def _id_site(name: str, cls: str, prefix: str, call: Callable, optional: bool = False, prepare=None) -> Site:
    return Site(name, cls, call, prefix=prefix, optional=optional, prepare=prepare)


#: Where values go, per rule of the common suite (see conformance/examples.py).
_SITES: dict[str, tuple[Site, ...]] = {
    "create": (
        Site("create_checkpoint", "checkpoints", lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(**v)),
             read=lambda s, c, w, r: s.get_checkpoint(c, r.id), clauses=("CP-CREATE-1",)),
    ),
    "id": (
        _id_site("create_checkpoint.checkpoint.id", "checkpoints", ids.CHECKPOINT,
                 lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(id=v))),
        _id_site("create_checkpoint.checkpoint.run_id", "checkpoints", ids.RUN,
                 lambda s, c, w, v: s.create_checkpoint(
                     c, Checkpoint(id=ids.new_id(ids.CHECKPOINT), run_id=v, agent_id=ids.new_id(ids.AGENT)))),
        _id_site("create_checkpoint.checkpoint.agent_id", "checkpoints", ids.AGENT,
                 lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(agent_id=v))),
        _id_site("get_checkpoint.checkpoint_id", "checkpoints", ids.CHECKPOINT, lambda s, c, w, v: s.get_checkpoint(c, v)),
        _id_site("resolve.checkpoint_id", "checkpoints", ids.CHECKPOINT, lambda s, c, w, v: s.resolve(c, v, approve())),
        _id_site("list_pending.filter.run_id", "checkpoints", ids.RUN,
                 lambda s, c, w, v: s.list_pending(c, CheckpointFilter(run_id=v)), optional=True),
        _id_site("count_pending.filter.run_id", "checkpoints", ids.RUN,
                 lambda s, c, w, v: s.count_pending(c, CheckpointFilter(run_id=v)), optional=True),
        _id_site("list_pending_across_scopes.after_id", "checkpoints", ids.CHECKPOINT,
                 lambda s, c, w, v: s.list_pending_across_scopes(ZERO, after_id=v), optional=True),
    ),
    "short": (
        Site("decision.decided_by", "checkpoints",
             lambda s, c, w, v: s.resolve(c, w.cp, Decision(approved=True, decided_by=v)),
             read=lambda s, c, w, r: s.get_checkpoint(c, w.cp).decision.decided_by, prepare=_prep_checkpoint),
    ),
    "text": (
        Site("checkpoint.reason", "checkpoints", lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(reason=v)),
             read=lambda s, c, w, r: s.get_checkpoint(c, r.id).reason),
        Site("checkpoint.metadata.nested-key", "checkpoints",
             lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(metadata={"a": {"b": {v: True}}})),
             read=lambda s, c, w, r: next(iter(s.get_checkpoint(c, r.id).metadata["a"]["b"]))),
        Site("decision.decided_by", "checkpoints",
             lambda s, c, w, v: s.resolve(c, w.cp, Decision(approved=False, decided_by=v[:255])),
             read=lambda s, c, w, r: s.get_checkpoint(c, w.cp).decision.decided_by, prepare=_prep_checkpoint),
        Site("decision.reason", "checkpoints",
             lambda s, c, w, v: s.resolve(c, w.cp, Decision(approved=True, reason=v)),
             read=lambda s, c, w, r: s.get_checkpoint(c, w.cp).decision.reason, prepare=_prep_checkpoint),
    ),
    "json": (
        Site("checkpoint.metadata", "checkpoints", lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(metadata=v)),
             read=lambda s, c, w, r: s.get_checkpoint(c, r.id).metadata),
    ),
    "counter": (
        Site("checkpoint.step_index", "checkpoints",
             lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(step_index=v)),
             read=lambda s, c, w, r: s.get_checkpoint(c, r.id).step_index),
    ),
    # RSC-GEN-8/13 (test_sizes.py): a resolve is measured on the row after the change
    "size": (
        Site("create_checkpoint.reason", "checkpoints",
             lambda s, c, w, t: s.create_checkpoint(c, make_checkpoint(reason=t)),
             read=lambda s, c, w, r: s.get_checkpoint(c, r.id)),
        Site("resolve.decision.reason", "checkpoints",
             lambda s, c, w, t: s.resolve(c, w.cp, Decision(approved=True, decided_by="alice", reason=t)),
             read=lambda s, c, w, r: s.get_checkpoint(c, w.cp), prepare=_prep_checkpoint,
             clauses=("CP-RESOLVE-7",)),
    ),
}


def _long_scopes(store: Any, c: Context, up: Context) -> None:
    """SCOPE-CANON-6: every writing method at the long scope ``c``, the rows
    read back from ``c`` and from its parent ``up`` (test_long_scopes.py)."""
    cp = long_call("create_checkpoint", lambda: store.create_checkpoint(c, make_checkpoint()))
    long_scope_of("a created checkpoint", cp, c.scope)
    for who in (c, up):
        long_check(f"list_pending from depth {who.scope.depth}", cp.id in long_ids(store.list_pending(who)), True)
    resolved = long_call("resolve", lambda: store.resolve(c, cp.id, approve()))
    long_scope_of("a resolved checkpoint", resolved, c.scope)
    long_scope_of("get_checkpoint", store.get_checkpoint(up, cp.id), c.scope)


EXAMPLES = Examples(
    "checkpoints",
    long_scopes=_long_scopes,
    seed=_examples_seed,
    good=_GOOD_CALLS,
    bad=_BAD_CALLS,
    kinds=_KINDS,
    byid=_BYID,
    byid_methods=frozenset({"get_checkpoint", "resolve"}),
    xs=_XS,
    precedence=_invalid_before_not_found,
    state_errors=(StateError("resolve", "checkpoints", _second_resolve, CheckpointNotFound, InvalidState,
                             clauses=("CP-RESOLVE-3",)),),
    every_write=_every_write,
    hidden=_hidden,
    sites=_SITES,
    size_methods=frozenset({"create_checkpoint", "resolve"}),
)


# -- common clauses of checkpoints (held by the common suite until it read the examples) -----


@pytest.mark.clause("RSC-GEN-1", "RSC-GEN-4", "CP-RESOLVE-1")
@pytest.mark.cortex_classes("checkpoints")
def test_checkpoint_stamps_use_one_truncated_clock_read(cortex_open):
    clock = RawClock(T1, tick=MS)
    store = cortex_open(clock)
    c = ctx(HOME)
    cp = store.create_checkpoint(c, make_checkpoint())
    assert_instant(cp.created_at, _ms(T1), "checkpoint.created_at")
    assert_instant(cp.updated_at, _ms(T1), "checkpoint.updated_at")
    clock.set(T2)
    resolved = store.resolve(c, cp.id, approve())
    for got in (resolved, store.get_checkpoint(c, cp.id)):
        assert_instant(got.decision.decided_at, _ms(T2), "decision.decided_at")
        assert_instant(got.updated_at, _ms(T2), "checkpoint.updated_at")
        assert_instant(got.created_at, _ms(T1), "checkpoint.created_at")


@pytest.mark.clause("RSC-GEN-4", "CP-RESOLVE-1", "CP-RESOLVE-3")
@pytest.mark.cortex_classes("checkpoints")
def test_checkpoint_updated_at_changes_only_on_resolve(store, clock):
    c = ctx(HOME)
    cp = store.create_checkpoint(c, make_checkpoint())
    clock.advance(seconds=1)
    store.get_checkpoint(c, cp.id)
    store.list_pending(c)
    expect_strict("RSC-GEN-4", store.get_checkpoint(c, cp.id), cp, "checkpoint after reads")
    clock.advance(seconds=1)
    resolved_at = clock.now()
    store.resolve(c, cp.id, Decision(approved=True, decided_at=FAR_FUTURE))
    clock.advance(seconds=1)
    expect_raises("CP-RESOLVE-3", InvalidState, lambda: store.resolve(c, cp.id, approve()),
                  "a second resolve of the checkpoint")
    got = store.get_checkpoint(c, cp.id)
    assert_instant(got.created_at, EPOCH, "created_at")
    assert_instant(got.updated_at, resolved_at, "updated_at")
    assert_instant(got.decision.decided_at, resolved_at, "decided_at")


@pytest.mark.clause("RSC-GEN-10", "CP-CREATE-2")
@pytest.mark.cortex_classes("checkpoints")
def test_checkpoint_state_enumeration(store, request):
    site = Site("checkpoint.state", "checkpoints",
                lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(state=v)))
    expect_invalid(store, request.getfixturevalue, site, ["bogus", "PENDING", " pending", "", None, 1,
                                                          RunState.CREATED])
    for good in (CheckpointState.PENDING, "pending"):
        cp = store.create_checkpoint(ctx(HOME), make_checkpoint(state=good))
        expect("CP-CREATE-2", store.get_checkpoint(ctx(HOME), cp.id).state,
               CheckpointState.PENDING, "store.get_checkpoint(ctx(HOME), cp.id).state")


@pytest.mark.clause("RSC-GEN-11", "CP-LIST-2", "CP-XLIST-1", "CP-XLIST-2", "CP-XLIST-4")
@pytest.mark.cortex_classes("checkpoints")
def test_id_order_and_cursor_use_code_point_order_checkpoints(store):
    cp_ids = crafted(ids.CHECKPOINT)
    scopes = ["ws=w1", "ws=w1/proj=p1", "ws=w2"]
    for i, cid in enumerate(cp_ids):
        store.create_checkpoint(ctx(scopes[i % 3]), make_checkpoint(id=cid))
    ordered = sorted(cp_ids)
    expect("RSC-GEN-11", [c.id for c in store.list_pending_across_scopes(ZERO)],
           ordered, "[c.id for c in store.list_pending_across_scopes(ZERO)]")
    expect("RSC-GEN-11", [c.id for c in store.list_pending_across_scopes(ZERO, after_id=ordered[3])],
           ordered[4:], "[c.id for c in store.list_pending_across_scopes(ZERO, after_id=ordered[3])]")
    # a cursor that names no stored checkpoint, between "...0a" and "...10"
    cursor = "acp_0000000000000000000000000b"
    expect("RSC-GEN-11", [c.id for c in store.list_pending_across_scopes(ZERO, after_id=cursor)],
           [i for i in ordered if i > cursor], "[c.id for c in store.list_pending_across_scopes(ZERO, after_id=cursor)]")
    pages, after = [], None
    while True:
        page = store.list_pending_across_scopes(ZERO, after_id=after, limit=3)
        if not page:
            break
        pages += [c.id for c in page]
        after = page[-1].id
    expect("RSC-GEN-11", pages, ordered, "pages")
    mine = [cid for i, cid in enumerate(cp_ids) if scopes[i % 3] != "ws=w2"]
    expect("RSC-GEN-11", [c.id for c in store.list_pending(ctx("ws=w1"))],
           sorted(mine), "[c.id for c in store.list_pending(ctx('ws=w1'))]")
    expect("RSC-GEN-11", [c.id for c in store.list_pending(ctx("ws=w1"), CheckpointFilter(offset=1, limit=2))],
           sorted(mine)[1:3], "[c.id for c in store.list_pending(ctx('ws=w1'), CheckpointFilter(offset=1, limit=2))]")


@pytest.mark.clause("RSC-GEN-12", "CP-RESOLVE-4", "CP-ENT-1")
@pytest.mark.cortex_classes("checkpoints")
def test_concurrent_resolve_is_never_seen_half_applied(store, profile):
    """Resolvers race on one pending checkpoint while readers read it: each
    read is either pending without decision or resolved with the winner's
    complete decision, and a reader never goes back to pending."""
    c = ctx(HOME)
    resolvers = profile.race_threads
    readers = max(2, profile.race_threads // 2)
    decisions = [Decision(approved=i % 2 == 0, decided_by=f"judge-{i}", reason=f"reason {i} " * 50)
                 for i in range(resolvers)]
    for _ in range(profile.race_rounds):
        cp = store.create_checkpoint(c, make_checkpoint())

        def read() -> list:
            out = []
            for _ in range(20):
                got = store.get_checkpoint(c, cp.id)
                out.append((got.state, got.decision, got.updated_at))
            return out

        outcomes = race([functools.partial(store.resolve, c, cp.id, d) for d in decisions] + [read] * readers)
        winners = [i for i, o in enumerate(outcomes[:resolvers]) if o.ok]
        expect("CP-RESOLVE-4", len(winners), 1, "len(winners)")
        for o in outcomes[:resolvers]:
            with clause("CP-RESOLVE-4"):
                expect_that("CP-RESOLVE-4", o.ok or isinstance(o.error, InvalidState), "a losing resolve",
                            Said("success or InvalidState"), o.error)
        win = decisions[winners[0]]
        final = store.get_checkpoint(c, cp.id)
        expect("CP-RESOLVE-4", (final.decision.approved, final.decision.decided_by, final.decision.reason),
               ( win.approved, win.decided_by, win.reason), "(final.decision.approved, final.decision.decided_by, final.decision.reason)")
        for o in outcomes[resolvers:]:
            with clause("RSC-GEN-12"):
                expect_is("RSC-GEN-12", o.error, None, "the error raised by the racing call o")
            resolved_seen = False
            for state, decision, updated_at in o.value:
                if state == CheckpointState.PENDING:
                    expect("CP-ENT-1", decision, None, "the decision of a pending read")
                    with clause("RSC-GEN-12", what="a reader went back to pending after seeing resolved"):
                        expect_false("RSC-GEN-12", resolved_seen, "resolved_seen")
                    expect("RSC-GEN-12", updated_at, cp.updated_at, "updated_at")
                else:
                    resolved_seen = True
                    expect_strict("CP-RESOLVE-4", decision, final.decision, "decision seen by a reader")
                    expect("RSC-GEN-12", updated_at, final.updated_at, "updated_at")


# -- scope clauses of checkpoints (held by the scope suite until it read the examples) -------


@pytest.mark.clause("SCOPE-ID-3", "CP-CREATE-4")
@pytest.mark.cortex_classes("checkpoints", "runs")
def test_checkpoint_referencing_an_invisible_run_does_not_reveal_it(store):
    run = store.create_run(ctx("ws=w1"), make_run())
    cp = store.create_checkpoint(ctx("ws=w2"), make_checkpoint(run.id))
    raises(lambda: store.get_run(ctx("ws=w2"), run.id), RunNotFound)
    expect("SCOPE-ID-3", store.list_runs(ctx("ws=w2")), [], "store.list_runs(ctx('ws=w2'))")
    expect("CP-CREATE-4", [c.id for c in store.list_pending(ctx("ws=w2"), CheckpointFilter(run_id=run.id))],
           [cp.id], "[c.id for c in store.list_pending(ctx('ws=w2'), CheckpointFilter(run_id=run.id))]")
    expect("SCOPE-ID-3", store.list_pending(ctx("ws=w1"), CheckpointFilter(run_id=run.id)),
           [], "store.list_pending(ctx('ws=w1'), CheckpointFilter(run_id=run.id))")


# -- CP-ENT / CP-CREATE -------------------------------------------------------------------


@pytest.mark.clause("CP-CREATE-1", "CP-ENT-1", "SCOPE-IMM-1", "RSC-GEN-4", "RSC-GEN-7", "SCOPE-CANON-5")
@pytest.mark.parametrize(
    "passed_scope",
    [Scope(), Scope.parse(W2), Scope.parse(W1P1), Scope.parse(W1)],
    ids=["zero", "unrelated", "descendant", "same"],
)
def test_create_stamps_scope_and_clock_and_round_trips(store, clock, passed_scope):
    clock.advance(milliseconds=321)
    now = clock.now()
    run_id, agent_id = ids.new_id(ids.RUN), ids.new_id(ids.AGENT)
    created = store.create_checkpoint(
        ctx(W1),
        make_checkpoint(
            run_id,
            agent_id=agent_id,
            scope=passed_scope,
            reason="r" * 300 + " — approve the deploy? ✓",
            step_index=7,
            metadata=RICH_METADATA,
            state="pending",
            created_at=now - timedelta(days=9),
            updated_at=now + timedelta(days=9),
        ),
    )
    got = store.get_checkpoint(ctx(W1), created.id)
    expect_strict("RSC-GEN-4", got, created, "get after create")
    for row in (created, got):
        expect("SCOPE-IMM-1", row.scope, Scope.parse(W1), "row.scope")
        expect("RSC-GEN-4", row.created_at, now, "row.created_at")
        expect("RSC-GEN-4", row.updated_at, now, "row.updated_at")
        expect("CP-CREATE-1", row.run_id, run_id, "row.run_id")
        expect("CP-CREATE-1", row.agent_id, agent_id, "row.agent_id")
        expect("CP-CREATE-1", row.reason, "r" * 300 + " — approve the deploy? ✓", "row.reason")
        expect_strict("CP-CREATE-1", row.step_index, 7, "step_index")
        expect_strict("CP-CREATE-1", row.metadata, RICH_METADATA, "metadata")
        expect("CP-ENT-1", row.state, CheckpointState.PENDING, "row.state")
        expect("CP-ENT-1", row.decision, None, "row.decision")  # CP-ENT-1
    expect_strict("CP-CREATE-1", store.list_pending(ctx(W1)), [created], "list_pending")


@pytest.mark.clause("CP-ENT-1", "CP-RESOLVE-1")
def test_every_read_shows_one_of_the_two_shapes(store, clock):
    c = ctx(W1)
    rows = [_cp(store, W1) for _ in range(4)]
    clock.advance(milliseconds=2)
    store.resolve(c, rows[0].id, approve())
    store.resolve(c, rows[2].id, reject())
    reads = [store.get_checkpoint(c, r.id) for r in rows]
    reads += store.list_pending(c) + store.list_pending_across_scopes(ZERO)
    for cp in reads:
        if cp.state == CheckpointState.PENDING:
            expect("CP-ENT-1", cp.decision, None, "cp.decision")
        else:
            expect("CP-ENT-1", cp.state, CheckpointState.RESOLVED, "cp.state")
            with clause("CP-ENT-1", what="a resolved checkpoint carries a Decision"):
                expect_that("CP-ENT-1", isinstance(cp.decision, Decision), "cp.decision",
                            Said("an instance of Decision"), cp.decision)
            expect("CP-RESOLVE-1", cp.decision.decided_at, clock.now(), "decision.decided_at")
    expect("CP-RESOLVE-1", [r.state for r in reads[:4]],
           ["resolved", "pending", "resolved", "pending"], "[r.state for r in reads[:4]]")


def _bad_checkpoints() -> list:
    def with_(**fields: Any) -> Callable[[], Any]:
        return lambda: make_checkpoint(**fields)

    cases = [
        ("id_wrong_prefix", with_(id=ids.new_id(ids.SUSPENSION))),
        ("id_malformed", with_(id="acp_123")),
        ("id_none", with_(id=None)),
        ("id_int", with_(id=7)),
        ("run_id_wrong_prefix", lambda: make_checkpoint(ids.new_id(ids.AGENT))),
        ("run_id_malformed", lambda: make_checkpoint("arun_")),
        ("agent_id_wrong_prefix", with_(agent_id=ids.new_id(ids.RUN))),
        ("agent_id_none", with_(agent_id=None)),
        ("reason_nul", with_(reason="ok\x00")),
        ("reason_surrogate", with_(reason="\ud800")),
        ("reason_none", with_(reason=None)),
        ("reason_int", with_(reason=3)),
        ("step_index_negative", with_(step_index=-1)),
        ("step_index_bool", with_(step_index=True)),
        ("step_index_float", with_(step_index=1.0)),
        ("step_index_str", with_(step_index="1")),
        ("step_index_too_big", with_(step_index=2**63)),
        ("metadata_none", with_(metadata=None)),
        ("metadata_list", with_(metadata=[1])),
        ("metadata_set", with_(metadata={"k": {1}})),
        ("metadata_tuple", with_(metadata={"k": (1, 2)})),
        ("metadata_datetime", with_(metadata={"k": datetime(2026, 1, 1, tzinfo=timezone.utc)})),
        ("metadata_nan", with_(metadata={"k": float("nan")})),
        ("metadata_int_too_big", with_(metadata={"k": [2**63]})),
        ("metadata_non_str_key", with_(metadata={("a",): 1})),
        ("metadata_nul_key", with_(metadata={"a\x00": 1})),
        ("metadata_surrogate_value", with_(metadata={"k": {"j": "\udfff"}})),
        ("over_8_mib", with_(metadata={"blob": "y" * (8 * 1024 * 1024)})),
        ("not_a_checkpoint_none", lambda: None),
        ("not_a_checkpoint_dict", lambda: {"id": ids.new_id(ids.CHECKPOINT)}),
        ("not_a_checkpoint_run", lambda: make_run()),
    ]
    return [pytest.param(build, id=name) for name, build in cases]


@pytest.mark.clause("CP-CREATE-1", "RSC-GEN-5", "RSC-GEN-6", "RSC-GEN-7", "RSC-GEN-8", "RSC-GEN-9")
@pytest.mark.parametrize("build", _bad_checkpoints())
def test_create_refuses_invalid_field(store, clock, build):
    existing = _cp(store, W1)
    bad = build()
    before = _view(store, [existing.id])
    with pytest.raises(InvalidArgument):
        store.create_checkpoint(ctx(W1), bad)
    expect("CP-CREATE-1", _view(store, [existing.id]), before, "the stored state, _view(store, [existing.id])")
    expect("CP-CREATE-1", store.count_pending(ctx(W1)), 1, "store.count_pending(ctx(W1))")


@pytest.mark.clause("CP-CREATE-2", "CP-ENT-1", "RSC-GEN-10")
@pytest.mark.parametrize(
    "state, decision",
    [
        ("resolved", None),
        (CheckpointState.RESOLVED, None),
        ("resolved", Decision(approved=True, decided_by="a", decided_at=datetime(2026, 1, 1, tzinfo=timezone.utc))),
        ("pending", Decision(approved=True, decided_by="a")),
        (CheckpointState.PENDING, Decision(approved=False)),
        ("PENDING", None),
        ("Pending", None),
        ("bogus", None),
        ("", None),
        (None, None),
        (0, None),
    ],
    ids=[
        "resolved", "resolved_enum", "resolved_with_decision", "pending_with_decision",
        "pending_enum_with_decision", "upper_case", "title_case", "unknown", "empty", "none", "int",
    ],
)
def test_create_accepts_only_pending_without_decision(store, clock, state, decision):
    cp = make_checkpoint(state=state, decision=decision)
    before = _view(store, [cp.id])
    with pytest.raises(InvalidArgument):
        store.create_checkpoint(ctx(W1), cp)
    expect("CP-CREATE-2", _view(store, [cp.id]), before, "the stored state, _view(store, [cp.id])")
    with pytest.raises(CheckpointNotFound):
        store.get_checkpoint(ctx(W1), cp.id)
    # the same id is still free for a proper pending checkpoint
    ok = store.create_checkpoint(ctx(W1), attrs.evolve(cp, state=CheckpointState.PENDING, decision=None))
    expect("CP-CREATE-2", ok.state, CheckpointState.PENDING, "ok.state")
    expect("CP-CREATE-2", ok.decision, None, "ok.decision")


@pytest.mark.clause("CP-CREATE-3", "SCOPE-ID-1")
@pytest.mark.parametrize("second_scope", [W1P1, W1, W1P2, W2, W10], ids=["same", "ancestor", "sibling", "unrelated", "lookalike"])
@pytest.mark.parametrize("first_resolved", [False, True], ids=["first_pending", "first_resolved"])
def test_duplicate_id_is_refused_in_any_scope(store, clock, second_scope, first_resolved):
    first = _cp(store, W1P1)
    if first_resolved:
        first = store.resolve(ctx(W1P1), first.id, reject())
    clock.advance(milliseconds=8)
    before = _view(store, [first.id])
    with pytest.raises(AlreadyExists):
        store.create_checkpoint(ctx(second_scope), make_checkpoint(id=first.id, reason="intruder"))
    expect("CP-CREATE-3", _view(store, [first.id]), before, "the stored state, _view(store, [first.id])")
    expect_strict("CP-CREATE-3", store.get_checkpoint(ctx(W1P1), first.id), first, "first checkpoint")


@pytest.mark.clause("CP-CREATE-4", "CP-LIST-1", "CP-LIST-3")
def test_run_and_agent_are_not_checked_and_a_run_may_have_several_pending(store, clock):
    run_id = ids.new_id(ids.RUN)  # no such run exists anywhere
    made = []
    for i in range(3):
        made.append(_cp(store, W1, run_id, agent_id=ids.new_id(ids.AGENT), step_index=i))
        clock.advance(milliseconds=1)
    other = _cp(store, W1)
    flt = CheckpointFilter(run_id=run_id)
    expect("CP-CREATE-4", _ids(store.list_pending(ctx(W1), flt)),
           _ids(made), "_ids(store.list_pending(ctx(W1), flt))")
    expect("CP-LIST-3", store.count_pending(ctx(W1), flt), 3, "store.count_pending(ctx(W1), flt)")
    expect("CP-LIST-3", store.count_pending(ctx(W1)), 4, "store.count_pending(ctx(W1))")
    with clause("CP-LIST-1"):
        expect_op("CP-LIST-1", other.id, "in", _ids(store.list_pending(ctx(W1))), "other.id")


# -- CP-GET --------------------------------------------------------------------------------

# (row scope, caller scope, visible?)
VISIBILITY = [
    pytest.param(W1P1, W1P1, True, id="own"),
    pytest.param(W1P1, W1, True, id="ancestor"),
    pytest.param(W1P1, "ws=w1/proj=p1/env=e1", False, id="descendant"),
    pytest.param(W1P1, W1P2, False, id="sibling"),
    pytest.param(W1P1, W2, False, id="unrelated"),
    pytest.param(W1P1, "ws=w1/proj=p10", False, id="lookalike_p10_caller"),
    pytest.param("ws=w1/proj=p10", W1P1, False, id="lookalike_p10_row"),
    pytest.param(W10, W1, False, id="lookalike_w10_row"),
    pytest.param(W1X, W1, False, id="lookalike_w1x_row"),
    pytest.param(W1, W10, False, id="lookalike_w10_caller"),
    pytest.param(W1P1, "org=w1/proj=p1", False, id="positional_lookalike"),
    pytest.param(W1P1, "proj=p1/ws=w1", False, id="swapped_levels"),
]


@pytest.mark.clause("CP-GET-1", "SCOPE-VIS-1", "SCOPE-BYID-1", "SCOPE-BYID-2", "SCOPE-VIS-4", "SCOPE-VIS-5")
@pytest.mark.parametrize("resolved", [False, True], ids=["pending", "resolved"])
@pytest.mark.parametrize("row, caller, visible", VISIBILITY)
def test_get_follows_visibility(store, clock, row, caller, visible, resolved):
    cp = _cp(store, row)
    if resolved:
        cp = store.resolve(ctx(row), cp.id, approve())
    before = _view(store, [cp.id])
    if visible:
        expect_strict("CP-GET-1", store.get_checkpoint(ctx(caller), cp.id), cp, "checkpoint")
    else:
        with pytest.raises(CheckpointNotFound):
            store.get_checkpoint(ctx(caller), cp.id)
    expect("CP-GET-1", _view(store, [cp.id]), before, "the stored state, _view(store, [cp.id])")


@pytest.mark.clause("CP-GET-1", "RSC-GEN-5")
def test_get_absent_and_bad_ids(store, clock):
    _cp(store, W1)
    with pytest.raises(CheckpointNotFound):
        store.get_checkpoint(ctx(W1), ids.new_id(ids.CHECKPOINT))
    for bad in (None, 5, "", "acp_1", ids.new_id(ids.RUN)):
        with pytest.raises(InvalidArgument):
            store.get_checkpoint(ctx(W1), bad)


# -- CP-RESOLVE -----------------------------------------------------------------------------


@pytest.mark.clause("CP-RESOLVE-1", "CP-ENT-1", "SCOPE-IMM-4", "RSC-GEN-3", "RSC-GEN-4")
@pytest.mark.parametrize("caller", [W1P1, W1], ids=["own", "ancestor"])
@pytest.mark.parametrize(
    "decision",
    [
        approve(by="alice", reason="ship it"),
        reject(by="bob", reason="not today ✗"),
        Decision(approved=True, decided_by="carol", reason="x", decided_at=datetime(2001, 1, 1, tzinfo=timezone.utc)),
        Decision(approved=False, decided_by="", reason="", decided_at=FAR_FUTURE),
    ],
    ids=["approve", "reject", "decided_at_past_ignored", "decided_at_future_ignored"],
)
def test_resolve_stamps_decision_time_from_the_clock(store, clock, caller, decision):
    cp = _cp(store, W1P1, metadata={"k": 1}, step_index=3)
    clock.advance(seconds=42)
    now = clock.now()
    resolved = store.resolve(ctx(caller), cp.id, decision)
    got = store.get_checkpoint(ctx(W1P1), cp.id)
    expect_strict("CP-RESOLVE-1", resolved, got, "resolve result vs get")
    expected = attrs.evolve(
        cp,
        state=CheckpointState.RESOLVED,
        decision=attrs.evolve(decision, decided_at=now),
        updated_at=now,
    )
    expect_strict("CP-RESOLVE-1", got, expected, "resolved checkpoint")
    expect("SCOPE-IMM-4", got.scope, Scope.parse(W1P1), "scope after resolve")
    expect("CP-RESOLVE-1", got.created_at, cp.created_at, "created_at after resolve")
    with clause("CP-LIST-1"):
        expect_op("CP-LIST-1", cp.id, "not in", _ids(store.list_pending(ctx(W1))), "cp.id")


@pytest.mark.clause("CP-RESOLVE-2", "SCOPE-BYID-2", "SCOPE-VIS-5")
@pytest.mark.parametrize("row, caller, visible", [p for p in VISIBILITY if not p.values[2]])
def test_resolve_beyond_reach_is_not_found_and_stays_pending(store, clock, row, caller, visible):
    cp = _cp(store, row)
    clock.advance(milliseconds=30)
    before = _view(store, [cp.id])
    with pytest.raises(CheckpointNotFound):
        store.resolve(ctx(caller), cp.id, approve())
    expect("CP-RESOLVE-2", _view(store, [cp.id]), before, "the stored state, _view(store, [cp.id])")
    expect_strict("CP-RESOLVE-2", store.get_checkpoint(ctx(row), cp.id), cp, "checkpoint")
    with clause("CP-RESOLVE-2"):
        expect_op("CP-RESOLVE-2", cp.id, "in", _ids(store.list_pending(ctx(row))), "cp.id")
    with clause("CP-RESOLVE-2"):
        expect_op("CP-RESOLVE-2", cp.id, "in", _ids(store.list_pending_across_scopes(ZERO)), "cp.id")


@pytest.mark.clause("CP-RESOLVE-2")
def test_resolve_of_an_absent_checkpoint(store, clock):
    cp = _cp(store, W1)
    before = _view(store, [cp.id])
    with pytest.raises(CheckpointNotFound):
        store.resolve(ctx(W1), ids.new_id(ids.CHECKPOINT), approve())
    expect("CP-RESOLVE-2", _view(store, [cp.id]), before, "the stored state, _view(store, [cp.id])")


@pytest.mark.clause("CP-RESOLVE-3", "SCOPE-ZERO-3")
@pytest.mark.parametrize(
    "second",
    [approve(by="alice"), reject(by="mallory", reason="override"), approve(by="alice", reason="looks good")],
    ids=["other_decision", "opposite_decision", "identical_decision"],
)
@pytest.mark.parametrize("caller", [W1P1, W1], ids=["own", "ancestor"])
def test_second_resolve_is_invalid_state_and_keeps_the_first(store, clock, second, caller):
    cp = _cp(store, W1P1)
    clock.advance(milliseconds=10)
    first = store.resolve(ctx(W1P1), cp.id, approve(by="alice", reason="looks good"))
    clock.advance(seconds=5)
    before = _view(store, [cp.id])
    with pytest.raises(InvalidState):
        store.resolve(ctx(caller), cp.id, second)
    expect("CP-RESOLVE-3", _view(store, [cp.id]), before, "the stored state, _view(store, [cp.id])")
    got = store.get_checkpoint(ctx(W1P1), cp.id)
    expect_strict("CP-RESOLVE-3", got, first, "checkpoint")
    with clause("CP-RESOLVE-3"):
        expect("CP-RESOLVE-3", got.decision.decided_at, first.decision.decided_at, "got.decision.decided_at")
        expect("CP-RESOLVE-3", first.decision.decided_at, got.updated_at, "first.decision.decided_at")
        expect("CP-RESOLVE-3", got.updated_at, cp.created_at + 10 * MS, "got.updated_at")
    # precedence: unreachable beats resolved, a bad argument beats both
    with pytest.raises(CheckpointNotFound):
        store.resolve(ctx(W2), cp.id, second)
    with pytest.raises(InvalidArgument):
        store.resolve(ctx(caller), cp.id, {"approved": True})
    expect_strict("CP-RESOLVE-3", store.get_checkpoint(ctx(W1P1), cp.id), first, "checkpoint")


@pytest.mark.clause("CP-RESOLVE-4", "CP-RESOLVE-1", "CP-RESOLVE-3", "RSC-GEN-12")
def test_concurrent_resolves_have_exactly_one_winner(store, clock, profile):
    """race_threads resolves with different decisions on one pending
    checkpoint: one succeeds, the others raise InvalidState, the stored
    decision is the winner's. Repeated on fresh checkpoints."""
    c = ctx(W1)
    for r in range(profile.race_rounds):
        cp = _cp(store, W1)
        clock.advance(milliseconds=3)
        now = clock.now()
        decisions = [
            Decision(approved=i % 2 == 0, decided_by=f"judge-{r}-{i}", reason=f"verdict {i}")
            for i in range(profile.race_threads)
        ]
        outcomes = race([lambda d=d: store.resolve(c, cp.id, d) for d in decisions])
        won = [i for i, o in enumerate(outcomes) if o.ok]
        expect("CP-RESOLVE-4", len(won), 1,
               f"resolves that succeeded of {len(outcomes)} racing on one pending checkpoint (round {r})")
        losers = [type(o.error).__name__ for i, o in enumerate(outcomes) if i != won[0]]
        expect("CP-RESOLVE-4", losers, ["InvalidState"] * len(losers), "the errors of the resolves that lost")
        got = store.get_checkpoint(c, cp.id)
        expect("CP-RESOLVE-4", (got.state, _fields(got.decision)),
               (CheckpointState.RESOLVED, _fields(decisions[won[0]])), "the stored state and decision: the winner's")
        expect("CP-RESOLVE-1", (got.decision.decided_at, got.updated_at), (now, now),
               "decided_at and updated_at after the race: clock now")
        expect_strict("CP-RESOLVE-4", outcomes[won[0]].value, got, "winner's result")


@pytest.mark.clause("CP-RESOLVE-5", "RSC-GEN-6", "SCOPE-ZERO-3")
@pytest.mark.parametrize(
    "decision",
    [
        None,
        True,
        {"approved": True, "decided_by": "a", "reason": ""},
        Decision(approved="yes"),
        Decision(approved=1),
        Decision(approved=None),
        Decision(approved=True, decided_by="d" * 256),
        Decision(approved=True, decided_by="a\x00"),
        Decision(approved=True, decided_by=None),
        Decision(approved=True, decided_by=5),
        Decision(approved=False, reason="\ud800"),
        Decision(approved=False, reason="a\x00b"),
        Decision(approved=False, reason=None),
    ],
    ids=[
        "none", "bool", "dict", "approved_str", "approved_int", "approved_none", "decided_by_256",
        "decided_by_nul", "decided_by_none", "decided_by_int", "reason_surrogate", "reason_nul", "reason_none",
    ],
)
def test_resolve_refuses_a_badly_shaped_decision(store, clock, decision):
    cp = _cp(store, W1)
    clock.advance(milliseconds=4)
    before = _view(store, [cp.id])
    with pytest.raises(InvalidArgument):
        store.resolve(ctx(W1), cp.id, decision)
    with pytest.raises(InvalidArgument):  # before the NotFound check
        store.resolve(ctx(W1), ids.new_id(ids.CHECKPOINT), decision)
    expect("CP-RESOLVE-5", _view(store, [cp.id]), before, "the stored state, _view(store, [cp.id])")
    expect_strict("CP-RESOLVE-5", store.get_checkpoint(ctx(W1), cp.id), cp, "checkpoint")


@pytest.mark.clause("CP-RESOLVE-6")
@pytest.mark.cortex_classes("runs", "suspensions")
@pytest.mark.parametrize("decision", [approve(), reject()], ids=["approve", "reject"])
def test_resolve_never_changes_runs_or_suspensions(store, clock, decision):
    c = ctx(W1)
    run = store.create_run(c, make_run(state="paused"))
    sus = store.create_suspension(c, make_suspension(run.id, expires_at=clock.now() + timedelta(minutes=1)))
    other = store.create_run(c, make_run(state="running"))
    cp = _cp(store, W1, run.id)
    clock.advance(seconds=3)
    before = state_view(store, ROOTS, run_ids=[run.id, other.id])
    store.resolve(c, cp.id, decision)
    after = state_view(store, ROOTS, run_ids=[run.id, other.id])
    for key in before:
        if not key.startswith("pending@"):
            with clause("CP-RESOLVE-6"):
                expect("CP-RESOLVE-6", after[key], before[key], "after[key]" + ": " + shorten(key))
    expect_strict("CP-RESOLVE-6", store.get_run(c, run.id), run, "run")
    expect_strict("CP-RESOLVE-6", store.get_run(c, other.id), other, "other run")
    expect_strict("CP-RESOLVE-6", store.get_suspension(c, run.id), sus, "suspension")


# -- CP-LIST -------------------------------------------------------------------------------


def _list_fixture(store, clock):
    rows = {}
    for name, scope in [
        ("w1", W1), ("w1p1", W1P1), ("w1p2", W1P2), ("w2", W2),
        ("w10", W10), ("w1x", W1X), ("org", ORG_W1),
    ]:
        rows[name] = _cp(store, scope)
        clock.advance(milliseconds=1)
    done = _cp(store, W1P1)
    store.resolve(ctx(W1P1), done.id, approve())
    return rows, done


@pytest.mark.clause("CP-LIST-1", "CP-LIST-3", "SCOPE-VIS-1", "SCOPE-VIS-2", "SCOPE-VIS-3", "SCOPE-VIS-5", "SCOPE-VIS-6")
@pytest.mark.parametrize(
    "caller, expected",
    [
        (W1, ["w1", "w1p1", "w1p2"]),
        (W1P1, ["w1p1"]),
        (W1P2, ["w1p2"]),
        ("ws=w1/proj=p1/env=e1", []),
        (W2, ["w2"]),
        (W10, ["w10"]),
        (W1X, ["w1x"]),
        (ORG_W1, ["org"]),
        ("ws=w3", []),
    ],
    ids=["w1", "w1p1", "w1p2", "descendant", "w2", "w10", "w1x", "org_w1", "empty"],
)
def test_list_pending_selects_visible_pending(store, clock, caller, expected, ):
    rows, done = _list_fixture(store, clock)
    got = store.list_pending(ctx(caller))
    expect("CP-LIST-1", _ids(got), [rows[n].id for n in expected], "_ids(got)")
    with clause("CP-LIST-1"):
        expect_op("CP-LIST-1", done.id, "not in", _ids(got), "done.id")
    for g in got:
        expect_strict("CP-LIST-1", g, next(r for r in rows.values() if r.id == g.id), "row")
    expect("CP-LIST-3", store.count_pending(ctx(caller)), len(expected), "store.count_pending(ctx(caller))")
    expect_strict("CP-LIST-1", store.list_pending(ctx(caller), None), got, "filter=None")
    expect_strict("CP-LIST-1", store.list_pending(ctx(caller), CheckpointFilter()), got, "default filter")


@pytest.mark.clause("CP-LIST-1", "CP-LIST-3")
def test_list_pending_run_filter_and_resolved_rows(store, clock):
    run_a, run_b = ids.new_id(ids.RUN), ids.new_id(ids.RUN)
    a1 = _cp(store, W1, run_a)
    b1 = _cp(store, W1P1, run_b)
    a2 = _cp(store, W1P1, run_a)
    a_hidden = _cp(store, W2, run_a)
    a_done = _cp(store, W1, run_a)
    store.resolve(ctx(W1), a_done.id, reject())
    fa = CheckpointFilter(run_id=run_a)
    expect("CP-LIST-1", _ids(store.list_pending(ctx(W1), fa)),
           [a1.id, a2.id], "_ids(store.list_pending(ctx(W1), fa))")
    expect("CP-LIST-3", store.count_pending(ctx(W1), fa), 2, "store.count_pending(ctx(W1), fa)")
    expect("CP-LIST-1", _ids(store.list_pending(ctx(W1P1), fa)), [a2.id], "_ids(store.list_pending(ctx(W1P1), fa))")
    expect("CP-LIST-1", _ids(store.list_pending(ctx(W2), fa)), [a_hidden.id], "_ids(store.list_pending(ctx(W2), fa))")
    expect("CP-LIST-1", _ids(store.list_pending(ctx(W1), CheckpointFilter(run_id=run_b))),
           [b1.id], "_ids(store.list_pending(ctx(W1), CheckpointFilter(run_id=run_b)))")
    nobody = CheckpointFilter(run_id=ids.new_id(ids.RUN))
    expect("CP-LIST-1", store.list_pending(ctx(W1), nobody), [], "list_pending for a run with no checkpoint")
    expect("CP-LIST-3", store.count_pending(ctx(W1), nobody), 0, "count_pending for a run with no checkpoint")
    store.resolve(ctx(W1), a1.id, approve())
    expect("CP-LIST-1", _ids(store.list_pending(ctx(W1), fa)), [a2.id], "_ids(store.list_pending(ctx(W1), fa))")
    expect("CP-LIST-3", store.count_pending(ctx(W1), fa), 1, "store.count_pending(ctx(W1), fa)")


#: pages of one run's checkpoints: offset 0, 1 and past the end; limit 0, 1,
#: exactly the rows left and beyond
RUN_PAGES = [(0, 1), (1, 1), (1, 2), (2, 0), (1, 3), (1, 9), (3, 1), (4, 0), (0, 4), (0, 0)]


#: two agents: whose checkpoint it is never decides what a list selects
AGENT_A, AGENT_B = ids.new_id(ids.AGENT), ids.new_id(ids.AGENT)


def _runs_interleaved(store, clock):
    """Run A's four pending checkpoints visible from W1, created one per
    millisecond and interleaved (in the list order) with the rows a page must
    skip: run B's, A's own resolved one, and A's in the look-alike scopes W10
    and W1X and in W2.  Returns A's run id, its visible pending rows in list
    order and B's run id."""
    run_a, run_b = ids.new_id(ids.RUN), ids.new_id(ids.RUN)
    want = []
    for i, scope in enumerate((W1, W1P1, W1P2, W1)):
        _cp(store, W10 if i % 2 else W1X, run_a)  # a look-alike's row of run A, just before
        _cp(store, (W1, W1P1)[i % 2], run_b)  # another run's row, same instant
        want.append(_cp(store, scope, run_a, agent_id=(AGENT_A, AGENT_B)[i % 2]))
        done = _cp(store, scope, run_a)
        store.resolve(ctx(scope), done.id, reject())  # run A's, resolved
        _cp(store, W2, run_a)  # an unrelated tenant's row of run A
        clock.advance(milliseconds=1)
    want.sort(key=lambda r: (r.created_at, r.id))
    return run_a, want, run_b


@pytest.mark.clause("CP-LIST-1", "CP-LIST-2", "CP-LIST-3")
@pytest.mark.parametrize("offset, limit", RUN_PAGES, ids=[f"offset{o}-limit{n}" for o, n in RUN_PAGES])
def test_list_pending_pages_one_runs_checkpoints_among_others(store, clock, offset, limit):
    """The run filter, visibility and the pending state select first; offset
    and limit then page what they selected (never the rows of other runs,
    other scopes or resolved rows)."""
    run_a, want, run_b = _runs_interleaved(store, clock)
    flt = CheckpointFilter(run_id=run_a, offset=offset, limit=limit)
    page = want[offset:]
    page = page[:limit] if limit > 0 else page
    expect("CP-LIST-2", _ids(store.list_pending(ctx(W1), flt)), _ids(page),
           f"run A's pending checkpoints from {W1}, offset={offset} limit={limit}, among other runs, "
           "look-alike scopes and resolved rows")
    expect("CP-LIST-3", store.count_pending(ctx(W1), flt), len(want),
           f"count_pending of run A from {W1} with offset={offset} limit={limit}")
    expect("CP-LIST-3", store.count_pending(ctx(W1), CheckpointFilter(run_id=run_b, offset=offset, limit=1)), 4,
           "count_pending of run B")


def _ordering_fixture(store, clock):
    """Eight pending rows over three instants, several per instant, created
    so that neither creation order nor id order alone gives the answer."""
    s = _sorted_ids(8)
    plan = [[6, 4], [7, 1, 3], [0, 5, 2]]  # id indexes created at T1, T2, T3
    scopes = [W1, W1P1, W1P2]
    rows = []
    for group in plan:
        for j, k in enumerate(group):
            rows.append(store.create_checkpoint(ctx(scopes[(k + j) % 3]), make_checkpoint(id=s[k])))
        clock.advance(milliseconds=1)
    done = store.create_checkpoint(ctx(W1), make_checkpoint())
    store.resolve(ctx(W1), done.id, approve())
    _cp(store, W2)  # invisible to W1
    ordered = sorted(rows, key=lambda r: (r.created_at, r.id))
    expect("RSC-GEN-4", [r.id for r in ordered], [s[4], s[6], s[1], s[3], s[7], s[0], s[2], s[5]],
           "the (created_at, id) order of the rows create_checkpoint returned (created_at is clock now)")
    return ordered


@pytest.mark.clause("CP-LIST-2", "CP-LIST-3", "RSC-GEN-11")
@pytest.mark.parametrize(
    "offset, limit",
    [(0, 0), (-1, -1), (-5, 0), (0, 3), (0, 8), (0, 20), (2, 0), (2, 3), (6, 5), (7, 2), (8, 0), (100, 1)],
)
def test_list_pending_order_then_offset_then_limit(store, clock, offset, limit):
    ordered = _ordering_fixture(store, clock)
    want = ordered[max(offset, 0):]
    if limit > 0:
        want = want[:limit]
    flt = CheckpointFilter(offset=offset, limit=limit)
    got = store.list_pending(ctx(W1), flt)
    expect("CP-LIST-2", _ids(got), _ids(want), "_ids(got)")
    expect_strict("CP-LIST-2", got, want, "rows")
    expect("CP-LIST-3", store.count_pending(ctx(W1), flt), 8, "store.count_pending(ctx(W1), flt)")  # CP-LIST-3: the page is ignored


@pytest.mark.clause("CP-LIST-2")
def test_list_pending_pages_cover_everything_once(store, clock):
    ordered = _ordering_fixture(store, clock)
    pages = [store.list_pending(ctx(W1), CheckpointFilter(offset=o, limit=3)) for o in (0, 3, 6, 9)]
    expect("CP-LIST-2", [len(p) for p in pages], [3, 3, 2, 0], "[len(p) for p in pages]")
    expect("CP-LIST-2", _ids([r for p in pages for r in p]), _ids(ordered), "_ids([r for p in pages for r in p])")


@pytest.mark.clause("CP-LIST-1", "CP-LIST-2", "CP-LIST-3", "RSC-GEN-5", "RSC-GEN-9")
@pytest.mark.parametrize("method", ["list_pending", "count_pending"])
@pytest.mark.parametrize(
    "flt",
    [
        CheckpointFilter(limit=True),
        CheckpointFilter(offset=False),
        CheckpointFilter(limit="3"),
        CheckpointFilter(offset=1.0),
        CheckpointFilter(run_id=ids.new_id(ids.CHECKPOINT)),
        CheckpointFilter(run_id="arun_nope"),
        CheckpointFilter(run_id=5),
        {"run_id": None},
        "pending",
    ],
    ids=["limit_bool", "offset_bool", "limit_str", "offset_float", "run_id_wrong_prefix",
         "run_id_malformed", "run_id_int", "dict_filter", "str_filter"],
)
def test_pending_lists_refuse_a_bad_filter(store, clock, method, flt):
    cp = _cp(store, W1)
    before = _view(store, [cp.id])
    with pytest.raises(InvalidArgument):
        getattr(store, method)(ctx(W1), flt)
    expect("CP-LIST-3" if method == "count_pending" else "CP-LIST-1", _view(store, [cp.id]), before,
           f"the stored state after {method} refused a bad filter")


# -- CP-XLIST ------------------------------------------------------------------------------


def _xlist_fixture(store, clock, n=9):
    """n pending checkpoints spread over many scopes, created in an order
    unrelated to their ids, plus a resolved one; returns them by id."""
    s = _sorted_ids(n + 1)
    scopes = [W1, W2, W1P1, W10, ORG_W1, "a=1/b=2/c=3", W1X]
    order = [(k * 5) % n for k in range(n)]  # a permutation of 0..n-1 (n=9)
    if sorted(order) != list(range(n)):
        raise RuntimeError(f"test setup: the creation order is not a permutation of 0..{n - 1}")
    rows = {}
    for j, k in enumerate(order):
        rows[s[k]] = store.create_checkpoint(ctx(scopes[j % len(scopes)]), make_checkpoint(id=s[k]))
    done = store.create_checkpoint(ctx(W2), make_checkpoint(id=s[n]))
    store.resolve(ctx(W2), done.id, approve())
    return [rows[k] for k in sorted(rows)], done


@pytest.mark.clause("CP-XLIST-1", "CP-XLIST-2", "SCOPE-XS-4", "RSC-GEN-11")
@pytest.mark.parametrize("limit", [0, -3, 1, 4, 9, 30])
def test_across_scopes_lists_every_scope_in_id_order(store, clock, limit):
    ordered, done = _xlist_fixture(store, clock)
    got = store.list_pending_across_scopes(ZERO, None, limit)
    want = ordered if limit <= 0 else ordered[:limit]
    expect("CP-XLIST-2", _ids(got), _ids(want), "_ids(got)")
    expect_strict("CP-XLIST-1", got, want, "rows (with their own scopes)")
    with clause("CP-XLIST-1"):
        expect_op("CP-XLIST-1", done.id, "not in", _ids(store.list_pending_across_scopes(ZERO)), "done.id")


@pytest.mark.clause("CP-XLIST-1", "CP-XLIST-2")
def test_across_scopes_after_id_is_an_exclusive_bound(store, clock):
    ordered, done = _xlist_fixture(store, clock)
    all_ids = _ids(ordered)
    for i, cp in enumerate(ordered):
        expect("CP-XLIST-2", _ids(store.list_pending_across_scopes(ZERO, cp.id)),
               all_ids[i + 1:], "_ids(store.list_pending_across_scopes(ZERO, cp.id))")
        expect("CP-XLIST-2", _ids(store.list_pending_across_scopes(ZERO, cp.id, 2)),
               all_ids[i + 1:i + 3], "_ids(store.list_pending_across_scopes(ZERO, cp.id, 2))")
    # the resolved checkpoint's id and ids naming no checkpoint are valid cursors
    expect("CP-XLIST-2", _ids(store.list_pending_across_scopes(ZERO, done.id)),
           [x for x in all_ids if x > done.id], "_ids(store.list_pending_across_scopes(ZERO, done.id))")
    lowest = "acp_" + "0" * 26
    expect("CP-XLIST-2", _ids(store.list_pending_across_scopes(ZERO, lowest)),
           all_ids, "_ids(store.list_pending_across_scopes(ZERO, lowest))")
    highest = "acp_7" + "z" * 25
    expect("CP-XLIST-2", store.list_pending_across_scopes(ZERO, highest),
           [], "store.list_pending_across_scopes(ZERO, highest)")
    fresh = ids.new_id(ids.CHECKPOINT)  # generated after all of them: no stored id above it
    expect("CP-XLIST-2", store.list_pending_across_scopes(ZERO, fresh),
           [], "store.list_pending_across_scopes(ZERO, fresh)")


@pytest.mark.clause("CP-XLIST-1", "CP-XLIST-2", "SCOPE-XS-5", "RSC-GEN-5", "RSC-GEN-9")
@pytest.mark.parametrize(
    "after_id, limit",
    [
        (ids.new_id(ids.RUN), 0),
        ("acp_123", 0),
        ("", 0),
        (5, 0),
        (b"acp_00000000000000000000000000", 0),
        (None, True),
        (None, "2"),
        (None, 1.5),
    ],
    ids=["run_id", "malformed", "empty", "int", "bytes", "limit_bool", "limit_str", "limit_float"],
)
def test_across_scopes_refuses_bad_arguments(store, clock, after_id, limit):
    _cp(store, W1)
    with pytest.raises(InvalidArgument):
        store.list_pending_across_scopes(ZERO, after_id, limit)


@pytest.mark.clause("CP-XLIST-3", "SCOPE-XS-2", "SCOPE-XS-3", "SCOPE-ZERO-1")
def test_across_scopes_ignores_the_callers_scope(store, clock):
    ordered, _ = _xlist_fixture(store, clock)
    callers = [ZERO, ctx(W1), ctx(W2), ctx("zz=nobody"), ctx("ws=w1/proj=p1/env=e1"), Context(Scope(), "part", "me")]
    for after, limit in [(None, 0), (ordered[2].id, 3), (None, 1)]:
        results = [store.list_pending_across_scopes(c, after, limit) for c in callers]
        for r in results[1:]:
            expect_strict("SCOPE-XS-3", r, results[0], "result")
        with clause("CP-XLIST-1"):
            expect_op("CP-XLIST-1", len(results[0]), ">", 0, "len(results[0])")
    with pytest.raises(InvalidArgument):
        store.list_pending_across_scopes(Scope.parse(W1))
    with pytest.raises(NoScope):  # the scoped list refuses what the cross-scope one accepts
        store.list_pending(ZERO)


@pytest.mark.clause("CP-XLIST-4", "CP-XLIST-1", "CP-XLIST-2")
@pytest.mark.parametrize("page_size", [1, 2, 4])
def test_across_scopes_paging_is_a_cursor_over_ids(store, clock, page_size):
    """Paging with the last id of each page: no checkpoint twice, every one
    pending throughout appears; one resolved between pages is simply not
    returned, one created between pages with an id above the cursor is
    returned, one created with an id below the cursor is not."""
    s = _sorted_ids(12)
    late_low, late_high = s[0], s[11]  # late_low is below every cursor
    initial = s[1:11]  # 10 ids, created in a scrambled order
    scopes = [W1, W2, W1P1, W10, ORG_W1]
    for j, k in enumerate([7, 0, 4, 9, 2, 5, 8, 1, 6, 3]):
        store.create_checkpoint(ctx(scopes[j % len(scopes)]), make_checkpoint(id=initial[k]))
    to_resolve = initial[-2]  # pending at the start, far enough to be on a later page

    seen: list[str] = []
    after = None
    pages = 0
    while True:
        page = store.list_pending_across_scopes(ctx("any=caller"), after, page_size)
        with clause("CP-XLIST-2"):
            expect_op("CP-XLIST-2", len(page), "<=", page_size, "len(page)")
        if not page:
            break
        seen += _ids(page)
        after = page[-1].id
        pages += 1
        if pages == 1:
            with clause("CP-XLIST-4"):
                expect_op("CP-XLIST-4", to_resolve, "not in", seen, "to_resolve")
            owner = next(c for c in store.list_pending_across_scopes(ZERO) if c.id == to_resolve)
            store.resolve(Context(scope=owner.scope), to_resolve, reject())
            store.create_checkpoint(ctx(W2), make_checkpoint(id=late_low))
            store.create_checkpoint(ctx(W1P1), make_checkpoint(id=late_high))
        with clause("CP-XLIST-4"):
            expect_op("CP-XLIST-4", pages, "<=", 20, "pages")
    with clause("CP-XLIST-4"):
        expect("CP-XLIST-4", len(seen), len(set(seen)), "a checkpoint appeared on two pages")
    expect("CP-XLIST-2", seen, sorted(seen), "seen")
    stayed_pending = [x for x in initial if x != to_resolve]
    expect("CP-XLIST-4", [x for x in seen if x in stayed_pending],
           stayed_pending, "[x for x in seen if x in stayed_pending]")
    with clause("CP-XLIST-4"):
        expect_op("CP-XLIST-4", to_resolve, "not in", seen, "to_resolve")
    with clause("CP-XLIST-4"):
        expect_op("CP-XLIST-4", late_high, "in", seen, "late_high")
    with clause("CP-XLIST-4"):
        expect_op("CP-XLIST-4", late_low, "not in", seen, "late_low")
    expect("CP-XLIST-4", seen[-1], late_high, "seen[-1]")


@pytest.mark.clause("CP-XLIST-4", "CP-XLIST-1")
def test_across_scopes_paging_from_a_starting_cursor(store, clock):
    ordered, _ = _xlist_fixture(store, clock)
    start = ordered[3].id
    seen, after = [], start
    for _ in range(len(ordered) + 1):  # bounded: a cursor that never moves must not hang
        page = store.list_pending_across_scopes(ZERO, after, 2)
        if not page:
            break
        seen += _ids(page)
        after = page[-1].id
    expect("CP-XLIST-4", seen, _ids(ordered[4:]), "seen")
