"""Certifies conformance class ``suspensions`` (spec: suspensions.md): the
suspension row a runtime writes when it pauses a run, its exact round trip,
one suspension per run across all scopes, the resume claim and the sweep
claim with their exact deadline partition (the deadline instant belongs to
the sweeper), the rule that a refused claim writes nothing, prefix
visibility of every by-run method, the expired lists (scoped and across
scopes) with their total order and limit, threaded claim races with exactly
one winner, and the four engine writers (resume, rejected checkpoint, expiry
sweep, cancel) racing on one paused run (FOUR-1..6; FOUR-7 is checked by the
linearizability machine).  After the helpers: the examples this module gives the
scope and common suites (``EXAMPLES``) and the suspension tests those suites
held (one suspension per run over all scopes, an invisible run, claims racing
from look-alike scopes, one clock read per claim, truncated instants, the
clock written and never the ``now`` argument, id tie-breaks).
"""

from __future__ import annotations

import functools
from datetime import date, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, Callable

import attrs
import pytest

from cortex_spec import ids
from cortex_spec.checkpoints import CheckpointFilter, CheckpointState
from cortex_spec.clock import EPOCH
from cortex_spec.context import Context
from cortex_spec.errors import (
    AlreadyExists,
    InvalidArgument,
    InvalidState,
    NoScope,
    NotSuspended,
    RunNotFound,
    SuspensionExpired,
)
from cortex_spec.runs import RunState
from cortex_spec.scope import Scope
from cortex_spec.suspensions import PendingCall, SuspensionReason
from cortex_spec.testing import (
    FAR_FUTURE, ZERO, clause, ctx, expect, expect_false, expect_is, expect_op, expect_strict,
    expect_that, expect_true, race, Said, shorten, state_view,
)
from cortex_spec.checkpoints import approve, make_checkpoint, reject
from cortex_spec.runs import make_run
from cortex_spec.suspensions import make_suspension

from .examples import (
    FAR,
    HOME,
    ID_CALLERS,
    OUTSIDERS_OF_HOME,
    PAST,
    SITE_VIEW_SCOPES,
    XS_NOW,
    XS_SCOPES,
    ByIdOp,
    Examples,
    Kind,
    Site,
    StateError,
    XsMethod,
    long_call,
    long_check,
    long_ids,
    long_scope_of,
)
from .helpers import (
    MINUS_0800,
    PLUS_0530,
    T1,
    T2,
    T3,
    US,
    UTC,
    RawClock,
    assert_instant,
    assert_scope,
    crafted,
    raises,
    ms as _ms,
)

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

NON_PAUSED = ("created", "running", "completed", "failed", "cancelled")


# -- helpers -----------------------------------------------------------------------


def _run(store: Any, scope: str, state: str = "paused", **fields: Any):
    return store.create_run(ctx(scope), make_run(state=state, **fields))


def _suspend(store: Any, scope: str, run_id: str, expires_at: datetime | None = None, **fields: Any):
    return store.create_suspension(
        ctx(scope), make_suspension(run_id, expires_at=expires_at, **fields)
    )


def _paused(store: Any, scope: str = W1, expires_at: datetime | None = None, s_scope: str | None = None):
    """A paused run and its suspension (in ``s_scope`` when given)."""
    run = _run(store, scope)
    sus = _suspend(store, s_scope or scope, run.id, expires_at)
    return run, sus


def _view(store: Any, run_ids=(), scopes=ROOTS) -> dict:
    return state_view(store, scopes, run_ids=list(run_ids), classes={"suspensions"})


def _suspension_or_none(store: Any, scope: str, run_id: str):
    try:
        return store.get_suspension(ctx(scope), run_id)
    except NotSuspended:
        return None


def _ids(rows) -> list[str]:
    return [r.id for r in rows]


def _sorted_ids(prefix: str, n: int) -> list[str]:
    return sorted(ids.new_id(prefix) for _ in range(n))


# -- SUSP-ENT: the entity ---------------------------------------------------------------

RICH_CONTINUATION = {
    "step": 3,
    "big": 2**63 - 1,
    "small": -(2**63),
    "ratio": 0.25,
    "one_float": 1.0,
    "flag": True,
    "off": False,
    "nothing": None,
    "text": "résumé ✓ 😀 \n\t \"quoted\"",
    "list": [1, 1.0, True, None, "1", [], {}],
    "nested": {"deeper": {"deepest": [{"k": "v"}, [2, 3.5]]}},
    "": "empty key",
    "ключ": "значение",
}

RICH_PENDING = (
    PendingCall(id="call_z", name="deploy", arguments='{"env":  "prod" ,"n":1}  '),
    PendingCall(id="call_a", name="ask_human", arguments="not json at all {"),
    PendingCall(id="call_m", name="noop", arguments=""),
    PendingCall(id="call_u", name="écrire", arguments="ligne 1\nligne 2\t😀"),
)


# ===========================================================================
# What this class gives the scope and common suites (conformance/examples.py),
# and the suspension tests those suites held
# ===========================================================================

S = Scope.parse


def _shared() -> SimpleNamespace:
    """The run and step the whole-state view of one scope test reads."""
    return SimpleNamespace(run_id=ids.new_id(ids.RUN), step_id=ids.new_id(ids.STEP))


def _examples_seed(store: Any, fixture: Any) -> SimpleNamespace:
    """A paused run and its suspension at HOME, its deadline passed."""
    c = ctx(HOME)
    w = SimpleNamespace(run_id=ids.new_id(ids.RUN), step_id=ids.new_id(ids.STEP))
    store.create_run(c, make_run(id=w.run_id, state=RunState.PAUSED))
    store.create_suspension(c, make_suspension(w.run_id, expires_at=PAST))
    w.view = dict(run_ids=[w.run_id], step_ids=[w.step_id])
    return w


#: A call of each method with valid arguments addressing the seeded rows.
_GOOD_CALLS: dict[str, Callable[[Any, Any, SimpleNamespace], Any]] = {
    "create_suspension": lambda s, c, w: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN))),
    "get_suspension": lambda s, c, w: s.get_suspension(c, w.run_id),
    "claim_suspension": lambda s, c, w: s.claim_suspension(c, w.run_id),
    "claim_expired_suspension": lambda s, c, w: s.claim_expired_suspension(c, w.run_id, EPOCH),
    "delete_suspension": lambda s, c, w: s.delete_suspension(c, w.run_id),
    "list_expired": lambda s, c, w: s.list_expired(c, FAR_FUTURE),
    "list_expired_across_scopes": lambda s, c, w: s.list_expired_across_scopes(c, FAR_FUTURE),
}

#: A call of each method whose other arguments are garbage (InvalidArgument
#: under a valid context).
_BAD_CALLS: dict[str, Callable[[Any, Any, SimpleNamespace], Any]] = {
    "create_suspension": lambda s, c, w: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), reason="bogus")),
    "get_suspension": lambda s, c, w: s.get_suspension(c, None),
    "claim_suspension": lambda s, c, w: s.claim_suspension(c, ids.new_id(ids.SUSPENSION)),
    "claim_expired_suspension": lambda s, c, w: s.claim_expired_suspension(c, w.run_id, datetime(2026, 1, 1)),
    "delete_suspension": lambda s, c, w: s.delete_suspension(c, 3.5),
    "list_expired": lambda s, c, w: s.list_expired(c, "2026-01-01T00:00:00Z"),
    "list_expired_across_scopes": lambda s, c, w: s.list_expired_across_scopes(c, datetime(2026, 1, 1)),
}


def _invalid_before_not_found(store: Any, w: SimpleNamespace) -> list[Callable[[Context], Any]]:
    """Calls with a bad argument that address a row the caller cannot reach
    or that does not exist; InvalidArgument must win over the NotFound."""
    missing_run = ids.new_id(ids.RUN)
    return [
        lambda c: store.claim_expired_suspension(c, w.run_id, datetime(2026, 1, 1)),
        lambda c: store.claim_expired_suspension(c, missing_run, "now"),
    ]


def _expired_resume_claim(store: Any) -> tuple[Callable[[Context], Any], Callable[[Any], dict]]:
    """A resume claim of a suspension whose deadline has passed (SuspensionExpired)."""
    c = ctx(HOME)
    run_id = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
    store.create_suspension(c, make_suspension(run_id, expires_at=PAST))  # deadline passed
    return (lambda cc: store.claim_suspension(cc, run_id)), (lambda scopes: state_view(store, scopes, run_ids=[run_id]))


def _new_suspension(sh: SimpleNamespace, **fields: Any) -> Any:
    fields.setdefault("expires_at", PAST)
    return make_suspension(fields.pop("run_id", ids.new_id(ids.RUN)), **fields)


def _suspension_reads(store: Any, c: Context, obj: Any, sh: SimpleNamespace) -> list[tuple[str, Any]]:
    store.create_run(c, make_run(id=obj.run_id, state=RunState.PAUSED))
    out = [("claim_expired", store.claim_expired_suspension(c, obj.run_id, EPOCH).scope)]
    out.append(("run", store.get_run(c, obj.run_id).scope))
    return out


_KINDS = (
    Kind(
        "suspension", "suspensions",
        new=_new_suspension,
        create=lambda s, c, o: s.create_suspension(c, o),
        get=lambda s, c, o: s.get_suspension(c, o.run_id),
        lists=(lambda s, c, sh: s.list_expired(c, FAR_FUTURE),),
        across=lambda s, sh: s.list_expired_across_scopes(ZERO, FAR_FUTURE),
        not_found=NotSuspended,
        vary=lambda o: attrs.evolve(o, run_id=ids.new_id(ids.RUN), continuation={"impostor": True}),
        reads=_suspension_reads,
        shared=_shared,
        view=lambda s, sh, o, scopes: state_view(s, scopes, run_ids=[sh.run_id, o.run_id], step_ids=[sh.step_id]),
        clauses={"ids": ("SUSP-CREATE-3",)},
    ),
)


def _setup_suspension(deadline: datetime | None) -> Callable[[Any, Context], str]:
    def setup(store: Any, c: Context) -> str:
        run_id = ids.new_id(ids.RUN)
        store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
        store.create_suspension(c, make_suspension(run_id, expires_at=deadline))
        return run_id
    return setup


def _done_read(store: Any, c: Context, key: str) -> None:
    assert_scope(store.get_suspension(c, key).scope, c.scope)


def _done_run_resumed(store: Any, c: Context, key: str) -> None:
    run = store.get_run(c, key)
    expect("SCOPE-BYID-1", run.state, RunState.RUNNING, "the run's state after the by-id claim")
    assert_scope(run.scope, c.scope)
    assert_scope(store.get_suspension(c, key).scope, c.scope)


def _done_deleted(store: Any, c: Context, key: str) -> None:
    raises(lambda: store.get_suspension(c, key), NotSuspended)
    run = store.get_run(c, key)
    expect("SCOPE-BYID-1", run.state, RunState.PAUSED, "the run's state after the by-id delete")
    assert_scope(run.scope, c.scope)


def _run_view(store: Any, key: str, scopes: Any) -> dict:
    return state_view(store, scopes, run_ids=[key])


def _byid(name: str, setup: Callable, call: Callable, done: Callable) -> ByIdOp:
    return ByIdOp(name, "suspensions", NotSuspended, setup, call, done, missing=lambda: ids.new_id(ids.RUN),
                  view=_run_view)


_BYID = (
    _byid("get_suspension", _setup_suspension(None), lambda s, c, k: s.get_suspension(c, k), _done_read),
    _byid("claim_suspension", _setup_suspension(None), lambda s, c, k: s.claim_suspension(c, k),
          _done_run_resumed),
    _byid("claim_expired_suspension", _setup_suspension(PAST),
          lambda s, c, k: s.claim_expired_suspension(c, k, EPOCH), _done_run_resumed),
    _byid("delete_suspension", _setup_suspension(None), lambda s, c, k: s.delete_suspension(c, k),
          _done_deleted),
)


def _seed_xs_suspensions(store: Any) -> dict[str, Scope]:
    """Per scope: an expired suspension (selected) and a future one (not); returns id -> scope."""
    expected = {}
    for i, sc in enumerate(XS_SCOPES):
        c = ctx(sc)
        for deadline, selected in ((PAST + timedelta(milliseconds=i), True), (XS_NOW + timedelta(days=1), False)):
            run_id = ids.new_id(ids.RUN)
            store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
            s = store.create_suspension(c, make_suspension(run_id, expires_at=deadline))
            if selected:
                expected[s.id] = S(sc)
    return expected


def _act_on_suspension(store: Any, row: Any) -> None:
    store.claim_expired_suspension(Context(row.scope), row.run_id, XS_NOW)
    expect("SCOPE-XS-4", store.get_run(Context(row.scope), row.run_id).state, RunState.RUNNING,
           "the run's state after the claim made under the listed row's scope")
    store.delete_suspension(Context(row.scope), row.run_id)


_XS = {
    "list_expired_across_scopes": XsMethod(
        "list_expired_across_scopes", "suspensions",
        seed=_seed_xs_suspensions,
        call=lambda s, c: s.list_expired_across_scopes(c, XS_NOW),
        act=_act_on_suspension,
        scoped_twin=lambda s, c: s.list_expired(c, XS_NOW),
        bad=(
            lambda s, c: s.list_expired_across_scopes(c, datetime(2026, 1, 1)),
            lambda s, c: s.list_expired_across_scopes(c, None),
            lambda s, c: s.list_expired_across_scopes(c, "2026-01-01T00:00:00+00:00"),
            lambda s, c: s.list_expired_across_scopes(c, 1767225600),
            lambda s, c: s.list_expired_across_scopes(c, XS_NOW, limit="1"),
            lambda s, c: s.list_expired_across_scopes(c, XS_NOW, limit=True),
            lambda s, c: s.list_expired_across_scopes(c, XS_NOW, limit=1.5),
        ),
    ),
}


def _every_write(store: Any, row: str, callers: list[str]) -> tuple[SimpleNamespace, Callable[[], None]]:
    """Every write method of the class from each of ``callers`` on rows
    stored at ``row``, and a check that every row still reads back at ``row``."""
    home = ctx(row)
    kept, dropped = ids.new_id(ids.RUN), ids.new_id(ids.RUN)
    for run_id in (kept, dropped):
        store.create_run(home, make_run(id=run_id, state=RunState.PAUSED))
        store.create_suspension(home, make_suspension(run_id, expires_at=EPOCH + timedelta(minutes=1)))
    for caller in callers:
        store.claim_suspension(ctx(caller), kept)
        store.update_run(ctx(caller), make_run(id=kept, state=RunState.PAUSED))
    with clause("SUSP-PART-2", what="the sweep claim from an ancestor with now at the deadline instant"):
        store.claim_expired_suspension(ctx(callers[-1]), kept, EPOCH + timedelta(minutes=1))
    store.delete_suspension(ctx(callers[-1]), dropped)

    def check() -> None:
        for run_id in (kept, dropped):
            assert_scope(store.get_run(home, run_id).scope, S(row))
        assert_scope(store.get_suspension(home, kept).scope, S(row))
        raises(lambda: store.get_suspension(home, dropped), NotSuspended)
        expect("SCOPE-IMM-4", [s.scope for s in store.list_expired_across_scopes(ZERO, FAR_FUTURE)], [S(row)],
               "the scopes of the expired suspensions after writes from ancestors")
    return SimpleNamespace(run_ids=[kept, dropped]), check


def _hidden(store: Any, c: Context, written: SimpleNamespace) -> None:
    """An outsider of the written rows sees no suspension."""
    expect("SCOPE-IMM-4", store.list_expired(c, FAR_FUTURE), [], "list_expired from an outsider of the written rows")
    for run_id in getattr(written, "run_ids", ()):
        raises(lambda: store.get_suspension(c, run_id), NotSuspended)


def _susp_with(**fields: Any) -> Callable:
    return lambda s, c, w, v: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), **{
        k: (f(v) if callable(f) else f) for k, f in fields.items()}))


def _id_site(name: str, cls: str, prefix: str, call: Callable, optional: bool = False, prepare=None) -> Site:
    return Site(name, cls, call, prefix=prefix, optional=optional, prepare=prepare)


#: Where values go, per rule of the common suite (see conformance/examples.py).
_SITES: dict[str, tuple[Site, ...]] = {
    "instant": (
        Site("suspension.expires_at", "suspensions",
             lambda s, c, w, v: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), expires_at=v)),
             read=lambda s, c, w, r: s.get_suspension(c, r.run_id).expires_at),
        Site("claim_expired_suspension.now", "suspensions",
             lambda s, c, w, v: s.claim_expired_suspension(c, w.run_id, v)),
        Site("list_expired.now", "suspensions", lambda s, c, w, v: s.list_expired(c, v)),
        Site("list_expired_across_scopes.now", "suspensions",
             lambda s, c, w, v: s.list_expired_across_scopes(ZERO, v)),
    ),
    "create": (
        Site("create_suspension", "suspensions",
             lambda s, c, w, v: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), **v)),
             read=lambda s, c, w, r: s.get_suspension(c, r.run_id), clauses=("SUSP-CREATE-1",)),
    ),
    "id": (
        _id_site("create_suspension.suspension.id", "suspensions", ids.SUSPENSION,
                 lambda s, c, w, v: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), id=v))),
        _id_site("create_suspension.suspension.run_id", "suspensions", ids.RUN,
                 lambda s, c, w, v: s.create_suspension(c, make_suspension(v))),
        _id_site("get_suspension.run_id", "suspensions", ids.RUN, lambda s, c, w, v: s.get_suspension(c, v)),
        _id_site("claim_suspension.run_id", "suspensions", ids.RUN, lambda s, c, w, v: s.claim_suspension(c, v)),
        _id_site("claim_expired_suspension.run_id", "suspensions", ids.RUN,
                 lambda s, c, w, v: s.claim_expired_suspension(c, v, FAR_FUTURE)),
        _id_site("delete_suspension.run_id", "suspensions", ids.RUN, lambda s, c, w, v: s.delete_suspension(c, v)),
    ),
    "short": (
        Site("pending.id", "suspensions",
             lambda s, c, w, v: s.create_suspension(
                 c, make_suspension(ids.new_id(ids.RUN), pending=(PendingCall(id=v, name="n"),))),
             read=lambda s, c, w, r: s.get_suspension(c, r.run_id).pending[0].id),
        Site("pending.name", "suspensions",
             lambda s, c, w, v: s.create_suspension(
                 c, make_suspension(ids.new_id(ids.RUN), pending=(PendingCall(id="i", name=v),))),
             read=lambda s, c, w, r: s.get_suspension(c, r.run_id).pending[0].name),
    ),
    "text": (
        Site("pending.arguments", "suspensions",
             _susp_with(pending=lambda v: (PendingCall(id="i", name="n", arguments=v),)),
             read=lambda s, c, w, r: s.get_suspension(c, r.run_id).pending[0].arguments),
        Site("pending.id", "suspensions", _susp_with(pending=lambda v: (PendingCall(id=v[:255], name="n"),)),
             read=lambda s, c, w, r: s.get_suspension(c, r.run_id).pending[0].id),
        Site("pending.name", "suspensions", _susp_with(pending=lambda v: (PendingCall(id="i", name=v[:255]),)),
             read=lambda s, c, w, r: s.get_suspension(c, r.run_id).pending[0].name),
        Site("continuation.nested-key", "suspensions", _susp_with(continuation=lambda v: {"s": [{v: 1}]}),
             read=lambda s, c, w, r: next(iter(s.get_suspension(c, r.run_id).continuation["s"][0]))),
        Site("continuation.value", "suspensions", _susp_with(continuation=lambda v: {"token": v}),
             read=lambda s, c, w, r: s.get_suspension(c, r.run_id).continuation["token"]),
    ),
    "json": (
        Site("suspension.continuation", "suspensions",
             lambda s, c, w, v: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), continuation=v)),
             read=lambda s, c, w, r: s.get_suspension(c, r.run_id).continuation),
    ),
    "enum": (
        Site("suspension.reason", "suspensions",
             lambda s, c, w, v: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), reason=v)),
             read=lambda s, c, w, r: s.get_suspension(c, r.run_id).reason,
             enum=SuspensionReason, invalid=(RunState.PAUSED, CheckpointState.PENDING)),
    ),
    # RSC-GEN-8/13 (test_sizes.py)
    "size": (
        Site("create_suspension.continuation", "suspensions",
             lambda s, c, w, t: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), continuation={"p": t})),
             read=lambda s, c, w, r: s.get_suspension(c, r.run_id)),
    ),
}


def _long_scopes(store: Any, c: Context, up: Context) -> None:
    """SCOPE-CANON-6: every writing method at the long scope ``c``, the rows
    read back from ``c`` and from its parent ``up`` (test_long_scopes.py)."""
    run = long_call("create_run", lambda: store.create_run(c, make_run(state=RunState.PAUSED)))
    susp = long_call("create_suspension",
                     lambda: store.create_suspension(c, make_suspension(run.id, expires_at=PAST)))
    long_scope_of("a created suspension", susp, c.scope)
    long_scope_of("get_suspension", store.get_suspension(up, run.id), c.scope)
    for who in (c, up):
        long_check(f"list_expired from depth {who.scope.depth}",
                   susp.id in long_ids(store.list_expired(who, FAR)), True)
    claimed = long_call("claim_expired_suspension", lambda: store.claim_expired_suspension(c, run.id, EPOCH))
    long_scope_of("a claimed suspension", claimed, c.scope)
    long_call("delete_suspension", lambda: store.delete_suspension(c, run.id))


EXAMPLES = Examples(
    "suspensions",
    long_scopes=_long_scopes,
    seed=_examples_seed,
    good=_GOOD_CALLS,
    bad=_BAD_CALLS,
    kinds=_KINDS,
    byid=_BYID,
    byid_methods=frozenset({"get_suspension", "claim_suspension", "claim_expired_suspension", "delete_suspension"}),
    xs=_XS,
    precedence=_invalid_before_not_found,
    state_errors=(StateError("claim_suspension", "suspensions", _expired_resume_claim, NotSuspended,
                             SuspensionExpired, clauses=("SUSP-CLAIM-5", "SUSP-CLAIM-6")),),
    every_write=_every_write,
    hidden=_hidden,
    sites=_SITES,
    size_methods=frozenset({"create_suspension"}),
)


# -- common clauses of suspensions (held by the common suite until it read the examples) -----


@pytest.mark.clause("RSC-GEN-1", "RSC-GEN-4", "SUSP-CLAIM-2", "SUSP-XCLAIM-2", "SUSP-PART-2")
@pytest.mark.cortex_classes("suspensions")
def test_suspension_claims_compare_and_write_one_clock_read(cortex_open):
    """The resume claim compares the deadline with the same clock value it
    writes: with the clock at 0.6 ms before the deadline and moving 1 ms per
    read, the claim succeeds and stamps the run with deadline - 1 ms (a second
    read would give the deadline itself)."""
    clock = RawClock(T1, tick=MS)
    store = cortex_open(clock)
    c = ctx(HOME)
    deadline = datetime(2026, 3, 4, 6, 0, 0, tzinfo=UTC)
    run_id = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
    clock.set(T2)
    s = store.create_suspension(c, make_suspension(run_id, expires_at=deadline))
    assert_instant(s.created_at, _ms(T2), "suspension.created_at")
    assert_instant(s.updated_at, _ms(T2), "suspension.updated_at")
    clock.set(deadline - timedelta(microseconds=600))
    store.claim_suspension(c, run_id)
    run = store.get_run(c, run_id)
    expect("SUSP-CLAIM-2", run.state, RunState.RUNNING, "run.state")
    assert_instant(run.updated_at, deadline - MS, "run.updated_at after the resume claim")
    assert_instant(store.get_suspension(c, run_id).updated_at, _ms(T2), "suspension.updated_at")
    # the sweep claim: updated_at from the (truncated) clock read
    other = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=other, state=RunState.PAUSED))
    store.create_suspension(c, make_suspension(other, expires_at=deadline))
    clock.set(T3)
    with clause("SUSP-PART-2", what="the sweep claim with now at the deadline instant"):
        store.claim_expired_suspension(c, other, deadline)
    assert_instant(store.get_run(c, other).updated_at, _ms(T3), "run.updated_at after the sweep claim")


D = EPOCH + timedelta(seconds=10)


_PLUS_0200 = timezone(timedelta(hours=2))


TRUNCATION_CASES = [
    ("now-half-ms-past-deadline", D, D + 500 * US, True),
    ("sub-ms-deadline-now-at-its-ms", D + 700 * US, D, True),
    ("now-half-ms-before-deadline", D, D - 500 * US, False),  # rounding up would wrongly make it eligible
    ("both-sub-ms-in-one-ms", D + 700 * US, D + 300 * US, True),
    ("now-in-plus-0530-at-deadline", D, D.astimezone(PLUS_0530), True),
    ("now-in-minus-0800-just-before", D, (D - 100 * US).astimezone(MINUS_0800), False),
    ("deadline-in-plus-0200-sub-ms", (D + 500 * US).astimezone(_PLUS_0200), D, True),
    ("deadline-one-ms-after-now", D + MS, D + 900 * US, False),
]


@pytest.mark.clause("RSC-GEN-2", "SUSP-XCLAIM-1", "SUSP-XCLAIM-3", "SUSP-PART-2")
@pytest.mark.cortex_classes("suspensions")
@pytest.mark.parametrize("case, deadline, now, eligible", TRUNCATION_CASES, ids=[t[0] for t in TRUNCATION_CASES])
def test_sweep_claim_compares_truncated_utc_instants(store, case, deadline, now, eligible):
    """Both the stored deadline and `now` are truncated to the millisecond (in
    UTC) before they are compared: `deadline <= now` on the truncated values."""
    c = ctx(HOME)
    run_id = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
    store.create_suspension(c, make_suspension(run_id, expires_at=deadline))
    before = state_view(store, [HOME], run_ids=[run_id])
    if eligible:
        store.claim_expired_suspension(c, run_id, now)
        expect("SUSP-XCLAIM-1", store.get_run(c, run_id).state, RunState.RUNNING, "store.get_run(c, run_id).state")
    else:
        with pytest.raises(NotSuspended):
            store.claim_expired_suspension(c, run_id, now)
        expect("SUSP-XCLAIM-3", state_view(store, [HOME], run_ids=[run_id]),
               before, "the stored state, state_view(store, [HOME], run_ids=[run_id])")


@pytest.mark.clause("RSC-GEN-2", "SUSP-LIST-1", "SUSP-XLIST-1")
@pytest.mark.cortex_classes("suspensions")
@pytest.mark.parametrize("case, deadline, now, eligible", TRUNCATION_CASES, ids=[t[0] for t in TRUNCATION_CASES])
def test_expired_lists_compare_truncated_utc_instants(store, case, deadline, now, eligible):
    c = ctx(HOME)
    s = store.create_suspension(c, make_suspension(ids.new_id(ids.RUN), expires_at=deadline))
    with clause("SUSP-LIST-1"):
        expect_is("SUSP-LIST-1", s.id in {x.id for x in store.list_expired(c, now)}, eligible,
                  "s.id in {x.id for x in store.list_expired(c, now)}")
    with clause("SUSP-XLIST-1"):
        expect_is("SUSP-XLIST-1", s.id in {x.id for x in store.list_expired_across_scopes(ZERO, now)}, eligible,
                  "s.id in {x.id for x in store.list_expired_across_scopes(ZERO, now)}")


@pytest.mark.clause("RSC-GEN-1", "RSC-GEN-2", "SUSP-CLAIM-1", "SUSP-CLAIM-6", "SUSP-CLAIM-8")
@pytest.mark.cortex_classes("suspensions")
@pytest.mark.parametrize(
    "deadline, clock_at, resumes",
    [
        (D, D - 500 * US, True),  # clock truncates down to D - 1 ms: before the deadline
        (D + 900 * US, D + 500 * US, False),  # both truncate to D: at the deadline
        (D, D + 500 * US, False),
        (D + MS, D + 999 * US, True),
    ],
    ids=["clock-half-ms-before", "same-ms", "clock-half-ms-after", "one-ms-apart"],
)
def test_resume_claim_compares_truncated_clock_with_truncated_deadline(cortex_open, deadline, clock_at, resumes):
    clock = RawClock(EPOCH)
    store = cortex_open(clock)
    c = ctx(HOME)
    run_id = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
    store.create_suspension(c, make_suspension(run_id, expires_at=deadline))
    clock.set(clock_at)
    if resumes:
        store.claim_suspension(c, run_id)
        expect("SUSP-CLAIM-1", store.get_run(c, run_id).state, RunState.RUNNING, "store.get_run(c, run_id).state")
        assert_instant(store.get_run(c, run_id).updated_at, _ms(clock_at), "run.updated_at")
    else:
        before = state_view(store, [HOME], run_ids=[run_id])
        with pytest.raises(SuspensionExpired):
            store.claim_suspension(c, run_id)
        with clause("SUSP-CLAIM-8", what="the stored state after the refused claim"):
            expect("SUSP-CLAIM-8", state_view(store, [HOME], run_ids=[run_id]), before,
                   "state_view(store, [HOME], run_ids=[run_id])")


@pytest.mark.clause("RSC-GEN-3", "SUSP-XCLAIM-2", "SUSP-ENT-1")
@pytest.mark.cortex_classes("suspensions")
@pytest.mark.parametrize(
    "now",
    [FAR_FUTURE, PAST + timedelta(minutes=30), (PAST + timedelta(minutes=1)).astimezone(PLUS_0530), PAST],
    ids=["far-future", "before-the-clock", "other-offset", "exactly-the-deadline"],
)
def test_sweep_claim_writes_clock_now_whatever_the_now_argument(store, clock, now):
    c = ctx(HOME)
    run_id = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
    created = store.create_suspension(c, make_suspension(run_id, expires_at=PAST))
    clock.advance(seconds=5, milliseconds=7)
    returned = store.claim_expired_suspension(c, run_id, now)
    run = store.get_run(c, run_id)
    expect("SUSP-XCLAIM-2", run.state, RunState.RUNNING, "run.state")
    assert_instant(run.updated_at, clock.now(), "run.updated_at")
    expect_strict("SUSP-ENT-1", store.get_suspension(c, run_id), created, "suspension after the sweep claim")
    expect_strict("SUSP-ENT-1", returned, created, "suspension returned by the sweep claim")


@pytest.mark.clause("RSC-GEN-3")
@pytest.mark.cortex_classes("suspensions")
def test_expired_lists_write_nothing(store, clock):
    w = _examples_seed(store, None)
    view = EXAMPLES.viewer()
    before = view(store, w, SITE_VIEW_SCOPES)
    clock.advance(seconds=3)
    for now in (FAR_FUTURE, PAST, EPOCH):
        store.list_expired(ctx(HOME), now)
        store.list_expired_across_scopes(ZERO, now)
    expect("RSC-GEN-3", view(store, w, SITE_VIEW_SCOPES), before, "the stored state, view(store, w, SITE_VIEW_SCOPES)")


@pytest.mark.clause("RSC-GEN-4", "SUSP-ENT-1", "SUSP-CLAIM-2", "SUSP-CLAIM-3")
@pytest.mark.cortex_classes("suspensions")
def test_suspension_updated_at_never_changes(store, clock):
    """No method rewrites a suspension: its stamps stay those of its creation
    across reads and claims, while the claimed run gets clock now."""
    c = ctx(HOME)
    run_id = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
    s = store.create_suspension(c, make_suspension(run_id))
    clock.advance(seconds=2)
    store.claim_suspension(c, run_id)
    expect_strict("SUSP-ENT-1", store.get_suspension(c, run_id), s, "suspension after the claim")
    assert_instant(store.get_run(c, run_id).updated_at, clock.now(), "run.updated_at after the claim")


@pytest.mark.clause("RSC-GEN-11", "SUSP-LIST-3", "SUSP-XLIST-1")
@pytest.mark.cortex_classes("suspensions")
def test_id_tie_breaks_use_code_point_order_suspensions(store):
    sus_ids = crafted(ids.SUSPENSION)
    scopes = ["ws=w1", "ws=w1/proj=p1", "ws=w2"]
    for i, sid in enumerate(sus_ids):
        store.create_suspension(ctx(scopes[i % 3]), make_suspension(ids.new_id(ids.RUN), id=sid, expires_at=PAST))
    expect("RSC-GEN-11", [s.id for s in store.list_expired_across_scopes(ZERO, EPOCH)],
           sorted(sus_ids), "[s.id for s in store.list_expired_across_scopes(ZERO, EPOCH)]")
    expect("RSC-GEN-11", [s.id for s in store.list_expired_across_scopes(ZERO, EPOCH, limit=3)],
           sorted(sus_ids)[:3], "[s.id for s in store.list_expired_across_scopes(ZERO, EPOCH, limit=3)]")
    mine = [sid for i, sid in enumerate(sus_ids) if scopes[i % 3] != "ws=w2"]
    expect("RSC-GEN-11", [s.id for s in store.list_expired(ctx("ws=w1"), EPOCH)],
           sorted(mine), "[s.id for s in store.list_expired(ctx('ws=w1'), EPOCH)]")


# -- scope clauses of suspensions (held by the scope suite until it read the examples) -------


@pytest.mark.clause("SCOPE-ID-2", "SUSP-CREATE-2")
@pytest.mark.cortex_classes("suspensions")
def test_suspension_run_id_uniqueness_is_global_not_per_scope(store):
    """The one uniqueness rule on a non-id field here (one suspension per run)
    is counted over all scopes, not per scope: an ancestor, a descendant or a
    sibling cannot add a second suspension for the same run."""
    run_id = ids.new_id(ids.RUN)
    store.create_suspension(ctx(HOME), make_suspension(run_id))
    before = state_view(store, ID_CALLERS, run_ids=[run_id])
    for caller in ID_CALLERS:
        raises(lambda: store.create_suspension(ctx(caller), make_suspension(run_id)), AlreadyExists)
    expect("SUSP-CREATE-2", state_view(store, ID_CALLERS, run_ids=[run_id]),
           before, "the stored state, state_view(store, ID_CALLERS, run_ids=[run_id])")


@pytest.mark.clause("SCOPE-ID-3", "SUSP-CREATE-4", "SUSP-CLAIM-7")
@pytest.mark.cortex_classes("suspensions")
def test_suspension_referencing_an_invisible_run_does_not_reveal_it(store):
    run = store.create_run(ctx("ws=w1"), make_run(state=RunState.PAUSED))
    store.create_suspension(ctx("ws=w2"), make_suspension(run.id))
    before = state_view(store, ["ws=w1", "ws=w2"], run_ids=[run.id])
    raises(lambda: store.get_run(ctx("ws=w2"), run.id), RunNotFound)
    raises(lambda: store.claim_suspension(ctx("ws=w2"), run.id), NotSuspended)
    expect("SUSP-CLAIM-8", state_view(store, ["ws=w1", "ws=w2"], run_ids=[run.id]),
           before, "the stored state, state_view(store, ['ws=w1', 'ws=w2'], run_ids=[run.id])")
    expect("SUSP-CLAIM-8", store.get_run(ctx("ws=w1"), run.id).state,
           RunState.PAUSED, "store.get_run(ctx('ws=w1'), run.id).state")


@pytest.mark.clause("SCOPE-BYID-2", "SUSP-CLAIM-5", "SCOPE-VIS-3", "SCOPE-VIS-5", "SCOPE-IMM-4")
@pytest.mark.cortex_classes("suspensions")
def test_race_exact_claimer_against_sibling_and_lookalike_claimers(store, profile):
    """A claim from the row's own scope races claims from siblings and
    look-alike scopes: the outsiders always get NotSuspended, the exact-scope
    claimer always wins, and the run and suspension keep their scope."""
    outsiders = [o for o in OUTSIDERS_OF_HOME if o != "ws=w1/proj=p1/env=e1"] + ["ws=w1/proj=p1/env=e1"]
    n_out = max(profile.race_threads - 1, 1)
    for _ in range(profile.race_rounds):
        run_id = ids.new_id(ids.RUN)
        store.create_run(ctx(HOME), make_run(id=run_id, state=RunState.PAUSED))
        store.create_suspension(ctx(HOME), make_suspension(run_id))
        contenders = [HOME] + [outsiders[i % len(outsiders)] for i in range(n_out)]
        outcomes = race([functools.partial(store.claim_suspension, ctx(sc), run_id) for sc in contenders])
        with clause("SUSP-CLAIM-1"):
            expect_true("SUSP-CLAIM-1", outcomes[0].ok, "outcomes[0].ok" + ": " + shorten(repr(outcomes[0].error)))
        expect("SUSP-CLAIM-4", outcomes[0].value.run_id, run_id, "outcomes[0].value.run_id")
        assert_scope(outcomes[0].value.scope, S(HOME))
        for sc, o in zip(contenders[1:], outcomes[1:]):
            with clause("SUSP-CLAIM-5"):
                expect_that("SUSP-CLAIM-5", isinstance(o.error, NotSuspended), "o.error" + ": " + shorten((sc, o)),
                            Said("an instance of NotSuspended"), o.error)
        run = store.get_run(ctx(HOME), run_id)
        expect("SUSP-CLAIM-2", run.state, RunState.RUNNING, "run.state")
        assert_scope(run.scope, S(HOME))
        assert_scope(store.get_suspension(ctx(HOME), run_id).scope, S(HOME))


@pytest.mark.clause("SUSP-ENT-2", "SUSP-CREATE-1", "SCOPE-CANON-5", "RSC-GEN-7")
def test_pending_and_continuation_round_trip_everywhere(store, clock):
    """pending (order and verbatim arguments) and a full continuation read back
    identically from create, get, both expired lists and the claim."""
    c = ctx(W1P1)
    run = _run(store, W1P1)
    created = store.create_suspension(
        c,
        make_suspension(
            run.id,
            pending=RICH_PENDING,
            continuation=RICH_CONTINUATION,
            expires_at=clock.now() + timedelta(hours=1),
            reason="external_tool",
        ),
    )
    reads = [
        created,
        store.get_suspension(c, run.id),
        store.get_suspension(ctx(W1), run.id),
        store.list_expired(c, FAR_FUTURE)[0],
        store.list_expired_across_scopes(ZERO, FAR_FUTURE)[0],
        store.claim_suspension(c, run.id),
    ]
    for got in reads:
        expect_strict("SUSP-ENT-2", got.pending, RICH_PENDING, "pending")
        expect_strict("SUSP-ENT-2", got.continuation, RICH_CONTINUATION, "continuation")
        expect("SCOPE-CANON-5", got.scope, Scope.parse(W1P1), "got.scope")
        expect_strict("SUSP-ENT-2", got.reason, SuspensionReason.EXTERNAL_TOOL, "reason")
    expect("SUSP-ENT-2", [p.id for p in reads[1].pending],
           ["call_z", "call_a", "call_m", "call_u"], "[p.id for p in reads[1].pending]")


@pytest.mark.clause("SUSP-ENT-1", "SUSP-CLAIM-3", "SUSP-XCLAIM-2")
def test_no_method_modifies_a_suspension(store, clock):
    """Claims (won and refused), lists and a re-pause leave the stored row
    exactly as created; only delete_suspension makes it go away."""
    c = ctx(W1)
    deadline = clock.now() + timedelta(minutes=10)
    run, sus = _paused(store, W1, expires_at=deadline)

    def unchanged():
        expect_strict("SUSP-ENT-1", store.get_suspension(c, run.id), sus, "suspension")
        expect_strict("SUSP-ENT-1", store.list_expired_across_scopes(ZERO, FAR_FUTURE), [sus], "expired list")

    clock.advance(milliseconds=5)
    store.claim_suspension(c, run.id)  # won
    unchanged()
    clock.advance(milliseconds=5)
    with pytest.raises(NotSuspended):
        store.claim_suspension(c, run.id)  # refused: run running
    unchanged()
    store.update_run(c, attrs.evolve(run, state="paused"))
    clock.advance(milliseconds=5)
    store.claim_expired_suspension(c, run.id, deadline)  # won
    unchanged()
    clock.set(deadline + timedelta(minutes=1))
    with pytest.raises(SuspensionExpired):
        store.claim_suspension(c, run.id)
    with pytest.raises(NotSuspended):
        store.claim_expired_suspension(c, run.id, clock.now())
    store.list_expired(c, clock.now())
    unchanged()
    store.delete_suspension(c, run.id)
    with pytest.raises(NotSuspended):
        store.get_suspension(c, run.id)
    expect("SUSP-ENT-1", store.list_expired_across_scopes(ZERO, FAR_FUTURE),
           [], "store.list_expired_across_scopes(ZERO, FAR_FUTURE)")


# -- SUSP-CREATE ------------------------------------------------------------------------------


@pytest.mark.clause("SUSP-CREATE-1", "SCOPE-IMM-1", "RSC-GEN-4", "RSC-GEN-2")
@pytest.mark.parametrize(
    "passed_scope",
    [Scope(), Scope.parse(W2), Scope.parse(W1P1), Scope.parse(W1)],
    ids=["zero", "unrelated", "descendant", "same"],
)
def test_create_stamps_scope_and_clock(store, clock, passed_scope):
    """scope comes from ctx, created_at/updated_at from clock now (whatever
    the object carried); expires_at is stored in UTC truncated to ms."""
    clock.advance(milliseconds=1234)
    now = clock.now()
    run_id = ids.new_id(ids.RUN)
    plus_two = timezone(timedelta(hours=2))
    expires = datetime(2026, 3, 1, 14, 30, 15, 987654, tzinfo=plus_two)
    created = store.create_suspension(
        ctx(W1),
        make_suspension(
            run_id,
            scope=passed_scope,
            expires_at=expires,
            created_at=now - timedelta(days=400),
            updated_at=now + timedelta(days=400),
            reason="agent_reply",
        ),
    )
    want_expires = datetime(2026, 3, 1, 12, 30, 15, 987000, tzinfo=timezone.utc)
    got = store.get_suspension(ctx(W1), run_id)
    for row in (created, got):
        expect("SCOPE-IMM-1", row.scope, Scope.parse(W1), "row.scope")
        expect("RSC-GEN-4", row.created_at, now, "row.created_at")
        expect("RSC-GEN-4", row.updated_at, now, "row.updated_at")
        expect("RSC-GEN-2", row.expires_at, want_expires, "row.expires_at")
        expect("RSC-GEN-2", row.expires_at.utcoffset(), timedelta(0), "row.expires_at.utcoffset()")
        expect("SUSP-CREATE-1", row.run_id, run_id, "row.run_id")
        expect_strict("SUSP-CREATE-1", row.reason, SuspensionReason.AGENT_REPLY, "reason")
    expect_strict("RSC-GEN-4", got, created, "get after create")


def _bad_suspensions() -> list:
    big = "x" * (8 * 1024 * 1024)
    naive = datetime(2026, 1, 2, 3, 4, 5)

    def with_(**fields: Any) -> Callable[[str], Any]:
        return lambda run_id: make_suspension(run_id, **fields)

    def pending_of(**call: Any) -> Callable[[str], Any]:
        base = {"id": "call_1", "name": "deploy", "arguments": "{}"}
        base.update(call)
        return with_(pending=(PendingCall(**base),))

    cases = [
        ("id_wrong_prefix", with_(id=ids.new_id(ids.RUN))),
        ("id_malformed", with_(id="sus_123")),
        ("id_not_str", with_(id=5)),
        ("id_none", with_(id=None)),
        ("run_id_wrong_prefix", lambda run_id: make_suspension(ids.new_id(ids.SUSPENSION))),
        ("run_id_malformed", lambda run_id: make_suspension("arun_xyz")),
        ("run_id_none", lambda run_id: make_suspension(None)),
        ("reason_unknown", with_(reason="paused")),
        ("reason_wrong_case", with_(reason="APPROVAL")),
        ("reason_empty", with_(reason="")),
        ("reason_none", with_(reason=None)),
        ("reason_int", with_(reason=1)),
        ("pending_none", with_(pending=None)),
        ("pending_str", with_(pending="call_1")),
        ("pending_element_dict", with_(pending=({"id": "c", "name": "n", "arguments": ""},))),
        ("pending_id_empty", pending_of(id="")),
        ("pending_name_empty", pending_of(name="")),
        ("pending_name_256", pending_of(name="n" * 256)),
        ("pending_id_256", pending_of(id="i" * 256)),
        ("pending_id_nul", pending_of(id="call\x00")),
        ("pending_name_surrogate", pending_of(name="de\ud800ploy")),
        ("pending_arguments_bytes", pending_of(arguments=b"{}")),
        ("pending_arguments_none", pending_of(arguments=None)),
        ("pending_arguments_nul", pending_of(arguments='{"a":"\x00"}')),
        ("pending_arguments_surrogate", pending_of(arguments="\ud800")),
        ("continuation_list", with_(continuation=[1, 2])),
        ("continuation_none", with_(continuation=None)),
        ("continuation_set", with_(continuation={"k": {1, 2}})),
        ("continuation_tuple", with_(continuation={"k": (1, 2)})),
        ("continuation_datetime", with_(continuation={"k": datetime(2026, 1, 1, tzinfo=timezone.utc)})),
        ("continuation_nan", with_(continuation={"k": float("nan")})),
        ("continuation_inf", with_(continuation={"k": [float("inf")]})),
        ("continuation_int_too_big", with_(continuation={"k": 2**63})),
        ("continuation_int_too_small", with_(continuation={"k": -(2**63) - 1})),
        ("continuation_non_str_key", with_(continuation={1: "x"})),
        ("continuation_nul_key", with_(continuation={"k\x00": 1})),
        ("continuation_nul_value", with_(continuation={"k": {"n": "a\x00b"}})),
        ("continuation_surrogate", with_(continuation={"k": ["\ud800"]})),
        ("expires_at_naive", with_(expires_at=naive)),
        ("expires_at_str", with_(expires_at="2026-01-02T00:00:00Z")),
        ("expires_at_int", with_(expires_at=0)),
        ("expires_at_date", with_(expires_at=date(2026, 1, 2))),
        ("over_8_mib", with_(continuation={"blob": big})),
        ("not_a_suspension_none", lambda run_id: None),
        ("not_a_suspension_dict", lambda run_id: {"id": ids.new_id(ids.SUSPENSION), "run_id": run_id}),
        ("not_a_suspension_run", lambda run_id: make_run(id=run_id)),
    ]
    return [pytest.param(build, id=name) for name, build in cases]


@pytest.mark.clause("SUSP-CREATE-1", "RSC-GEN-2", "RSC-GEN-5", "RSC-GEN-6", "RSC-GEN-7", "RSC-GEN-8", "RSC-GEN-10")
@pytest.mark.parametrize("build", _bad_suspensions())
def test_create_refuses_invalid_field(store, clock, build):
    run = _run(store, W1)
    bad = build(run.id)
    before = _view(store, [run.id])
    with pytest.raises(InvalidArgument):
        store.create_suspension(ctx(W1), bad)
    expect("SUSP-CREATE-1", _view(store, [run.id]), before, "the stored state, _view(store, [run.id])")
    # the run can still be suspended: the refused call reserved nothing
    _suspend(store, W1, run.id)


@pytest.mark.clause("SUSP-CREATE-2", "SCOPE-ID-1")
@pytest.mark.parametrize("second_scope", [W1, W2, W1P1, W10], ids=["same", "sibling", "descendant", "lookalike"])
@pytest.mark.parametrize("first_scope", [W1, W1P1], ids=["first_w1", "first_w1p1"])
def test_second_suspension_for_a_run_is_refused_in_any_scope(store, clock, first_scope, second_scope):
    run = _run(store, W1)
    first = _suspend(store, first_scope, run.id, clock.now() + timedelta(hours=1))
    clock.advance(milliseconds=3)
    before = _view(store, [run.id])
    second = make_suspension(run.id, expires_at=clock.now())
    with pytest.raises(AlreadyExists):
        store.create_suspension(ctx(second_scope), second)
    expect("SUSP-CREATE-2", _view(store, [run.id]), before, "the stored state, _view(store, [run.id])")
    expect_strict("SUSP-CREATE-2", store.get_suspension(ctx(first_scope), run.id), first, "first suspension")
    # the refused row's id was not taken: it can suspend another run
    other = _run(store, W1)
    store.create_suspension(ctx(W1), attrs.evolve(second, run_id=other.id))


@pytest.mark.clause("SUSP-CREATE-2")
def test_concurrent_creates_for_one_run_have_one_winner(store, clock, profile):
    """race_threads creates for one run id, from several scopes, released
    together: exactly one stores its row, every other gets AlreadyExists."""
    scopes = [W1, W2, W1P1, W10, W1X, ORG_W1, W1P2]
    for _ in range(profile.race_rounds):
        run_id = ids.new_id(ids.RUN)
        expired = clock.now() - timedelta(seconds=1)
        attempts = [
            (scopes[i % len(scopes)], make_suspension(run_id, expires_at=expired))
            for i in range(profile.race_threads)
        ]
        outcomes = race(
            [lambda s=s, sus=sus: store.create_suspension(ctx(s), sus) for s, sus in attempts]
        )
        won = [i for i, o in enumerate(outcomes) if o.ok]
        with clause("SUSP-CREATE-2"):
            expect("SUSP-CREATE-2", len(won), 1, "len(won)" + ": " + shorten(outcomes))
        for i, o in enumerate(outcomes):
            if i != won[0]:
                with clause("SUSP-CREATE-2"):
                    expect_that("SUSP-CREATE-2", isinstance(o.error, AlreadyExists),
                                "o.error" + ": " + shorten(o.error), Said("an instance of AlreadyExists"), o.error)
        scope, sus = attempts[won[0]]
        rows = [r for r in store.list_expired_across_scopes(ZERO, FAR_FUTURE) if r.run_id == run_id]
        expect("SUSP-CREATE-2", [(r.id, r.scope) for r in rows],
               [(sus.id, Scope.parse(scope))], "[(r.id, r.scope) for r in rows]")
        expect_strict("SUSP-CREATE-2", store.get_suspension(ctx(scope), run_id), outcomes[won[0]].value, "stored")


@pytest.mark.clause("SUSP-CREATE-3", "SCOPE-ID-1")
@pytest.mark.parametrize("second_scope", [W1, W2, W1P1], ids=["same", "sibling", "descendant"])
def test_duplicate_suspension_id_is_refused_in_any_scope(store, clock, second_scope):
    run_a = _run(store, W1)
    run_b = _run(store, W1)
    first = _suspend(store, W1, run_a.id)
    before = _view(store, [run_a.id, run_b.id])
    with pytest.raises(AlreadyExists):
        store.create_suspension(ctx(second_scope), make_suspension(run_b.id, id=first.id))
    expect("SUSP-CREATE-3", _view(store, [run_a.id, run_b.id]), before, "the stored state, _view(store, [run_a.id, run_b.id])")
    expect("SUSP-CREATE-3", _suspension_or_none(store, second_scope, run_b.id),
           None, "_suspension_or_none(store, second_scope, run_b.id)")
    expect_strict("SUSP-CREATE-3", store.get_suspension(ctx(W1), run_a.id), first, "first suspension")


@pytest.mark.clause("SUSP-CREATE-4")
@pytest.mark.parametrize(
    "run_setup",
    ["absent", "invisible_sibling", "invisible_ancestor"] + ["state_" + s for s in ("paused",) + NON_PAUSED],
)
def test_create_does_not_check_the_run(store, clock, run_setup):
    run_id = ids.new_id(ids.RUN)
    if run_setup == "invisible_sibling":
        _run(store, W2, id=run_id)
    elif run_setup == "invisible_ancestor":
        _run(store, W1, id=run_id)
    elif run_setup.startswith("state_"):
        _run(store, W1P1, state=run_setup.removeprefix("state_"), id=run_id)
    runs_before = {s: store.list_runs(ctx(s)) for s in ROOTS}
    created = _suspend(store, W1P1, run_id)
    expect_strict("SUSP-CREATE-4", store.get_suspension(ctx(W1P1), run_id), created, "suspension")
    expect("SUSP-CREATE-4", {s: store.list_runs(ctx(s)) for s in ROOTS},
           runs_before, "{s: store.list_runs(ctx(s)) for s in ROOTS}")


@pytest.mark.clause("SUSP-CREATE-5", "SUSP-DEL-1")
def test_a_run_can_be_suspended_again_after_delete(store, clock):
    run, first = _paused(store, W1)
    store.claim_suspension(ctx(W1), run.id)
    store.delete_suspension(ctx(W1), run.id)
    store.update_run(ctx(W1), attrs.evolve(run, state="paused"))
    clock.advance(milliseconds=10)
    second = _suspend(store, W1P1, run.id, clock.now() + timedelta(minutes=1))
    if second.id == first.id:
        raise RuntimeError("test setup: the second suspension reuses the first one's id")
    expect_strict("SUSP-CREATE-5", store.get_suspension(ctx(W1), run.id), second, "second suspension")
    expect("SUSP-CREATE-5", store.claim_suspension(ctx(W1), run.id).id,
           second.id, "store.claim_suspension(ctx(W1), run.id).id")


@pytest.mark.clause("SUSP-CREATE-6", "SUSP-LIST-1", "SUSP-CLAIM-6")
def test_deadline_already_past_is_accepted(store, clock):
    now = clock.now()
    run = _run(store, W1)
    sus = _suspend(store, W1, run.id, expires_at=now - timedelta(days=3))
    expect("SUSP-CREATE-6", sus.expires_at, now - timedelta(days=3), "sus.expires_at")
    expect("SUSP-LIST-1", _ids(store.list_expired(ctx(W1), now)), [sus.id], "_ids(store.list_expired(ctx(W1), now))")
    with pytest.raises(SuspensionExpired):
        store.claim_suspension(ctx(W1), run.id)
    expect("SUSP-CREATE-6", store.claim_expired_suspension(ctx(W1), run.id, now).id,
           sus.id, "store.claim_expired_suspension(ctx(W1), run.id, now).id")


# -- SUSP-GET ----------------------------------------------------------------------------

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


@pytest.mark.clause("SUSP-GET-1", "SCOPE-VIS-1", "SCOPE-BYID-1", "SCOPE-BYID-2")
@pytest.mark.parametrize("row, caller, visible", VISIBILITY)
def test_get_follows_visibility_and_writes_nothing(store, clock, row, caller, visible):
    run, sus = _paused(store, row, expires_at=clock.now() + timedelta(minutes=5))
    clock.advance(milliseconds=5)
    before = _view(store, [run.id])
    if visible:
        expect_strict("SUSP-GET-1", store.get_suspension(ctx(caller), run.id), sus, "suspension")
    else:
        with pytest.raises(NotSuspended):
            store.get_suspension(ctx(caller), run.id)
    expect("SUSP-GET-1", _view(store, [run.id]), before, "the stored state, _view(store, [run.id])")


@pytest.mark.clause("SUSP-GET-1")
def test_get_without_a_suspension_is_not_suspended(store, clock):
    run = _run(store, W1)
    with pytest.raises(NotSuspended):
        store.get_suspension(ctx(W1), run.id)
    with pytest.raises(NotSuspended):
        store.get_suspension(ctx(W1), ids.new_id(ids.RUN))


@pytest.mark.clause("RSC-GEN-5")
@pytest.mark.cortex_classes("suspensions")
@pytest.mark.parametrize(
    "bad_run_id",
    [None, 17, "", "arun_xyz", "ARUN_01m8ndjptte62t9wamc3yt2ac5", "sus_01m8ndjptte62t9wamc3yt2ac5"],
    ids=["none", "int", "empty", "malformed", "upper", "wrong_prefix"],
)
@pytest.mark.parametrize(
    "method", ["get_suspension", "claim_suspension", "claim_expired_suspension", "delete_suspension"]
)
def test_by_run_methods_refuse_a_bad_run_id(store, clock, method, bad_run_id):
    run, _ = _paused(store, W1, expires_at=clock.now())
    before = _view(store, [run.id])
    args = (clock.now(),) if method == "claim_expired_suspension" else ()
    with pytest.raises(InvalidArgument):
        getattr(store, method)(ctx(W1), bad_run_id, *args)
    expect("RSC-GEN-5", _view(store, [run.id]), before, "the stored state, _view(store, [run.id])")


# -- SUSP-CLAIM: the resume claim -------------------------------------------------------------


#: the claimer's principal per case of the claim tests below (the run's is "alice")
CLAIMERS = {"none": "bob", "ahead_1h": None, "ahead_1ms": "alice"}
SWEEPERS = {"at_deadline": "sweeper", "after_deadline": None, "far_future": "alice"}


@pytest.mark.clause("SUSP-CLAIM-1", "SUSP-CLAIM-2", "SUSP-CLAIM-3", "SUSP-CLAIM-4", "SUSP-ENT-1", "RUN-REV-2")
@pytest.mark.parametrize("deadline", ["none", "ahead_1h", "ahead_1ms"])
def test_claim_moves_run_to_running_and_returns_the_suspension(store, clock, deadline):
    # the run is alice's; who claims varies with the case (another principal,
    # none, its own): no claimer's principal is written (SUSP-CLAIM-2)
    c = ctx(W1P1, principal=CLAIMERS[deadline])
    run = store.create_run(
        ctx(W1P1, principal="alice"),
        make_run(
            state="paused",
            input="hello",
            output="partial",
            error="",
            step_count=4,
            tokens_used=1234,
            started_at=clock.now() - timedelta(minutes=1),
            persona_ref="persona-1",
            metadata={"k": [1, 1.0, True], "n": None},
        ),
    )
    claim_at = clock.now() + timedelta(seconds=7)
    expires = {"none": None, "ahead_1h": claim_at + timedelta(hours=1), "ahead_1ms": claim_at + MS}[deadline]
    _suspend(store, W1P1, run.id, expires, continuation=RICH_CONTINUATION)
    clock.set(claim_at)
    seen = store.get_suspension(c, run.id)
    claimed = store.claim_suspension(c, run.id)
    expect_strict("SUSP-CLAIM-4", claimed, seen, "claim result")  # SUSP-CLAIM-4
    expect_strict("SUSP-CLAIM-4", store.get_suspension(c, run.id), seen, "stored suspension")  # CLAIM-3
    after = store.get_run(c, run.id)
    expect("SUSP-CLAIM-2", after.principal, "alice",
           f"the principal of alice's run after a claim by {CLAIMERS[deadline]!r}")
    expect_strict("SUSP-CLAIM-2", after, attrs.evolve(run, state=RunState.RUNNING, updated_at=claim_at,
                                            revision=run.revision + 1), "run")


@pytest.mark.clause("SUSP-CLAIM-10", "SUSP-CLAIM-1", "SUSP-CLAIM-2", "SUSP-CLAIM-3", "SUSP-CLAIM-7", "SUSP-CLAIM-8", "RSC-GEN-12")
@pytest.mark.parametrize("deadline", ["none", "ahead_1ms"])
def test_concurrent_resume_claims_have_exactly_one_winner(store, clock, profile, deadline):
    """race_threads claim_suspension calls on one paused run: one wins, every
    other raises NotSuspended and gets no object; the run is running, the
    suspension survives and a later claim fails. Repeated on fresh runs."""
    c = ctx(W1)
    for _ in range(profile.race_rounds):
        clock.advance(milliseconds=10)
        now = clock.now()
        run, sus = _paused(store, W1, expires_at=None if deadline == "none" else now + MS)
        outcomes = race([lambda: store.claim_suspension(c, run.id)] * profile.race_threads)
        winners = [o for o in outcomes if o.ok]
        with clause("SUSP-CLAIM-10"):
            expect("SUSP-CLAIM-10", len(winners), 1, "len(winners)" + ": " + shorten(outcomes))
        expect_strict("SUSP-CLAIM-10", winners[0].value, sus, "winner's suspension")
        for o in outcomes:
            if not o.ok:
                with clause("SUSP-CLAIM-7"):
                    expect_that("SUSP-CLAIM-7", isinstance(o.error, NotSuspended), "o.error" + ": " + shorten(o.error),
                                Said("an instance of NotSuspended"), o.error)
                expect("SUSP-CLAIM-7", o.value, None, "o.value")
        expect_strict("SUSP-CLAIM-2", store.get_run(c, run.id),
                      attrs.evolve(run, state=RunState.RUNNING, updated_at=now, revision=run.revision + 1), "run")
        expect_strict("SUSP-CLAIM-10", store.get_suspension(c, run.id), sus, "suspension")
        with pytest.raises(NotSuspended):
            store.claim_suspension(c, run.id)


@pytest.mark.clause(
    "SUSP-CLAIM-10", "SUSP-CLAIM-9", "SUSP-CLAIM-6", "SUSP-PART-1", "SUSP-PART-2", "SUSP-PART-3",
    "SUSP-XCLAIM-1", "SUSP-XCLAIM-3", "RSC-GEN-12",
)
@pytest.mark.parametrize("when", ["at_deadline", "one_ms_before", "long_after"])
def test_mixed_resume_and_sweep_race(store, clock, profile, when):
    """Resume and sweep claims released together on one paused run, the clock
    fixed and the sweep's now equal to it: only the eligible side can win,
    exactly once; the run ends running."""
    c = ctx(W1)
    n = profile.race_threads
    for _ in range(profile.race_rounds):
        deadline = clock.now() + timedelta(seconds=1)
        run, sus = _paused(store, W1, expires_at=deadline)
        t = {"at_deadline": deadline, "one_ms_before": deadline - MS, "long_after": deadline + timedelta(days=1)}[when]
        clock.set(t)
        kinds = ["resume" if i % 2 == 0 else "sweep" for i in range(n)]
        calls = [
            (lambda: store.claim_suspension(c, run.id))
            if k == "resume"
            else (lambda: store.claim_expired_suspension(c, run.id, clock.now()))
            for k in kinds
        ]
        outcomes = race(calls)
        sweep_side = when != "one_ms_before"
        winner_kind = "sweep" if sweep_side else "resume"
        won = [k for k, o in zip(kinds, outcomes) if o.ok]
        with clause("SUSP-CLAIM-10"):
            expect("SUSP-CLAIM-10", won, [winner_kind], "won" + ": " + shorten(list(zip(kinds, outcomes))))
        for k, o in zip(kinds, outcomes):
            if o.ok:
                expect_strict("SUSP-CLAIM-10", o.value, sus, "winner's suspension")
            elif k == "resume" and sweep_side:
                with clause("SUSP-CLAIM-6"):
                    expect_that("SUSP-CLAIM-6", isinstance(o.error, SuspensionExpired),
                                "o.error" + ": " + shorten(o.error), Said("an instance of SuspensionExpired"), o.error)
            else:
                with clause("SUSP-CLAIM-10"):
                    expect_that("SUSP-CLAIM-10", isinstance(o.error, NotSuspended), "o.error" + ": " + shorten(o.error),
                                Said("an instance of NotSuspended"), o.error)
        expect_strict("SUSP-CLAIM-10", store.get_run(c, run.id),
                      attrs.evolve(run, state=RunState.RUNNING, updated_at=t, revision=run.revision + 1), "run")
        expect_strict("SUSP-CLAIM-10", store.get_suspension(c, run.id), sus, "suspension")
        clock.advance(seconds=2)


def _claim_case(name, s_scope, r_scope, r_state, caller, deadline, error):
    return pytest.param(s_scope, r_scope, r_state, caller, deadline, error, id=name)


# (s_scope or None, r_scope or None, r_state, caller, deadline, expected error)
CLAIM_REFUSALS = [
    _claim_case("no_suspension", None, W1, "paused", W1, None, NotSuspended),
    _claim_case("sibling_caller", W1, W1, "paused", W2, "ahead", NotSuspended),
    _claim_case("lookalike_w10_caller", W1, W1, "paused", W10, None, NotSuspended),
    _claim_case("lookalike_w1x_caller", W1, W1, "paused", W1X, "ahead", NotSuspended),
    _claim_case("positional_lookalike_caller", W1, W1, "paused", ORG_W1, None, NotSuspended),
    _claim_case("lookalike_w10_row", W10, W10, "paused", W1, None, NotSuspended),
    _claim_case("lookalike_w1x_row", W1X, W1X, "paused", W1, "ahead", NotSuspended),
    _claim_case("lookalike_p10_row", "ws=w1/proj=p10", W1P1, "paused", W1P1, None, NotSuspended),
    _claim_case("descendant_caller", W1, W1, "paused", W1P1, "ahead", NotSuspended),
    _claim_case("suspension_invisible", W2, W1, "paused", W1, "ahead", NotSuspended),
    _claim_case("run_absent", W1, None, None, W1, "ahead", NotSuspended),
    _claim_case("run_invisible", W1, W2, "paused", W1, None, NotSuspended),
    _claim_case("run_at_lookalike", W1, W10, "paused", W1, "ahead", NotSuspended),
    _claim_case("run_invisible_descendant_caller", W1P1, W1, "paused", W1P1, None, NotSuspended),
    *[_claim_case(f"run_{s}", W1, W1, s, W1, "ahead", NotSuspended) for s in NON_PAUSED],
    _claim_case("expired_run_paused", W1, W1, "paused", W1, "past", SuspensionExpired),
    _claim_case("expired_at_instant_run_paused", W1, W1, "paused", W1, "at", SuspensionExpired),
    _claim_case("expired_long_ago_run_paused", W1, W1, "paused", W1, "far_past", SuspensionExpired),
    _claim_case("expired_run_absent", W1, None, None, W1, "past", SuspensionExpired),
    _claim_case("expired_run_invisible", W1, W2, "paused", W1, "past", SuspensionExpired),
    *[_claim_case(f"expired_run_{s}", W1, W1, s, W1, "at", SuspensionExpired) for s in NON_PAUSED],
    _claim_case("expired_but_invisible", W2, W1, "paused", W1, "past", NotSuspended),
    _claim_case("expired_sibling_caller", W1, W1, "paused", W2, "past", NotSuspended),
]

DEADLINE_OFFSETS = {
    None: None,
    "ahead": timedelta(hours=1),
    "ahead_1ms": MS,
    "at": timedelta(0),
    "past": -MS,
    "far_past": -timedelta(days=30),
}


def _setup_claim_case(store, clock, s_scope, r_scope, r_state, deadline):
    """Create the rows at clock now, move the clock 5 ms on (to the claim
    instant, which the deadline is relative to) and return (run_id, t)."""
    run_id = ids.new_id(ids.RUN)
    t = clock.now() + timedelta(milliseconds=5)
    if r_scope is not None:
        _run(store, r_scope, state=r_state, id=run_id)
    if s_scope is not None:
        offset = DEADLINE_OFFSETS[deadline]
        _suspend(store, s_scope, run_id, None if offset is None else t + offset)
    clock.set(t)
    return run_id, t


def _unchanged_after(store, call, error, run_id, s_scope, r_scope, rule):
    """Make the refused ``call`` and prove it wrote nothing at all (a write is
    charged to ``rule``, the clause saying the refusal writes nothing)."""
    run = store.get_run(ctx(r_scope), run_id) if r_scope else None
    sus = store.get_suspension(ctx(s_scope), run_id) if s_scope else None
    before = _view(store, [run_id])
    with pytest.raises(error) as info:
        call()
    if run is not None:
        after = store.get_run(ctx(r_scope), run_id)
        expect(rule, after.state, run.state, "run state after the refused claim")
        expect(rule, after.updated_at, run.updated_at, "run updated_at after the refused claim")
        with clause(rule, what="the run after the refused claim"):
            expect_strict(rule, after, run, "run")
    if sus is not None:
        with clause(rule, what="the suspension after the refused claim"):
            expect_strict(rule, store.get_suspension(ctx(s_scope), run_id), sus, "suspension")
    expect(rule, _view(store, [run_id]), before, "the stored state after the refused claim")
    return info.value


@pytest.mark.clause(
    "SUSP-CLAIM-1", "SUSP-CLAIM-5", "SUSP-CLAIM-6", "SUSP-CLAIM-7", "SUSP-CLAIM-8",
    "SUSP-PART-2", "SCOPE-BYID-2", "SCOPE-VIS-5", "SCOPE-VIS-4",
)
@pytest.mark.parametrize("s_scope, r_scope, r_state, caller, deadline, error", CLAIM_REFUSALS)
def test_refused_resume_claim_raises_and_writes_nothing(store, clock, s_scope, r_scope, r_state, caller, deadline, error):
    run_id, _ = _setup_claim_case(store, clock, s_scope, r_scope, r_state, deadline)
    exc = _unchanged_after(
        store, lambda: store.claim_suspension(ctx(caller), run_id), error, run_id, s_scope, r_scope,
        "SUSP-CLAIM-8",
    )
    # NotSuspended and SuspensionExpired are distinct outcomes
    other = SuspensionExpired if error is NotSuspended else NotSuspended
    with clause("SUSP-CLAIM-6" if error is SuspensionExpired else "SUSP-CLAIM-7",
                what=f"the refused claim raised {error.__name__}, not also {other.__name__}"):
        expect_false("SUSP-CLAIM-8", isinstance(exc, other), "isinstance(exc, other)")


@pytest.mark.clause("SUSP-CLAIM-11", "SCOPE-IMM-4", "SCOPE-BYID-1")
@pytest.mark.parametrize("r_scope", [W1P1, W1P2], ids=["same_descendant", "other_descendant"])
def test_claim_from_a_common_ancestor(store, clock, r_scope):
    run = _run(store, r_scope)
    sus = _suspend(store, W1P1, run.id, clock.now() + timedelta(minutes=1))
    clock.advance(milliseconds=9)
    claimed = store.claim_suspension(ctx(W1), run.id)
    expect_strict("SUSP-CLAIM-11", claimed, sus, "claimed")
    after_run = store.get_run(ctx(r_scope), run.id)
    expect("SCOPE-IMM-4", after_run.scope, Scope.parse(r_scope), "after_run.scope")
    expect("SUSP-CLAIM-11", after_run.state, RunState.RUNNING, "after_run.state")
    expect("SUSP-CLAIM-11", after_run.updated_at, clock.now(), "after_run.updated_at")
    after_sus = store.get_suspension(ctx(W1P1), run.id)
    expect("SCOPE-IMM-4", after_sus.scope, Scope.parse(W1P1), "after_sus.scope")
    expect_strict("SUSP-CLAIM-11", after_sus, sus, "suspension")


# -- SUSP-XCLAIM: the sweep claim -----------------------------------------------------------------


@pytest.mark.clause("SUSP-XCLAIM-1", "SUSP-XCLAIM-2", "SUSP-ENT-1", "RSC-GEN-3", "RUN-REV-2")
@pytest.mark.parametrize("cutoff", ["at_deadline", "after_deadline", "far_future"])
def test_sweep_claim_writes_clock_now_not_the_now_argument(store, clock, cutoff):
    # a sweeper acting for another principal (or none) writes no principal (SUSP-XCLAIM-2)
    c = ctx(W1, principal=SWEEPERS[cutoff])
    run = store.create_run(ctx(W1, principal="alice"), make_run(state="paused", input="x", metadata={"a": 1}))
    deadline = clock.now() + timedelta(hours=1)
    sus = _suspend(store, W1, run.id, deadline)
    clock.advance(milliseconds=25)  # clock still before the deadline
    now_arg = {"at_deadline": deadline, "after_deadline": deadline + MS, "far_future": FAR_FUTURE}[cutoff]
    claimed = store.claim_expired_suspension(c, run.id, now_arg)
    expect_strict("SUSP-ENT-1", claimed, sus, "claimed")
    expect_strict("SUSP-ENT-1", store.get_suspension(c, run.id), sus, "suspension")
    after = store.get_run(c, run.id)
    expect("SUSP-XCLAIM-2", after.principal, "alice",
           f"the principal of alice's run after a sweep claim by {SWEEPERS[cutoff]!r}")
    expect("RSC-GEN-3", after.updated_at, clock.now(), "run.updated_at after the sweep claim")
    if clock.now() == now_arg:
        raise RuntimeError("test setup: the clock must differ from the now argument")
    expect_strict("SUSP-XCLAIM-2", after, attrs.evolve(run, state=RunState.RUNNING, updated_at=clock.now(),
                                            revision=run.revision + 1), "run")


@pytest.mark.clause("SUSP-XCLAIM-1", "SUSP-XCLAIM-3", "SUSP-PART-2")
def test_sweep_claim_compares_the_now_argument_not_the_clock(store, clock):
    """The clock past the deadline does not help a sweep whose now is before
    it; the now argument at the deadline wins although the clock is earlier."""
    c = ctx(W1)
    deadline = clock.now() + timedelta(minutes=1)
    run, sus = _paused(store, W1, expires_at=deadline)
    clock.set(deadline + timedelta(minutes=1))
    before = _view(store, [run.id])
    with pytest.raises(NotSuspended):
        store.claim_expired_suspension(c, run.id, deadline - MS)
    expect("SUSP-XCLAIM-3", _view(store, [run.id]), before, "the stored state, _view(store, [run.id])")
    clock.set(deadline - timedelta(seconds=30))
    expect("SUSP-XCLAIM-1", store.claim_expired_suspension(c, run.id, deadline).id,
           sus.id, "store.claim_expired_suspension(c, run.id, deadline).id")
    expect("SUSP-XCLAIM-1", store.get_run(c, run.id).state, RunState.RUNNING, "store.get_run(c, run.id).state")


@pytest.mark.clause("SUSP-XCLAIM-1", "SCOPE-IMM-4", "SCOPE-BYID-1")
def test_sweep_claim_from_an_ancestor_keeps_scopes(store, clock):
    run = _run(store, W1P2)
    sus = _suspend(store, W1P1, run.id, clock.now())
    clock.advance(milliseconds=4)
    expect_strict("SUSP-XCLAIM-1", store.claim_expired_suspension(ctx(W1), run.id, clock.now()), sus, "claimed")
    after = store.get_run(ctx(W1P2), run.id)
    expect("SCOPE-IMM-4", after.scope, Scope.parse(W1P2), "run scope after the sweep claim from an ancestor")
    expect("SUSP-XCLAIM-1", after.state, RunState.RUNNING, "run state after the sweep claim from an ancestor")
    expect("SCOPE-IMM-4", store.get_suspension(ctx(W1P1), run.id).scope,
           Scope.parse(W1P1), "store.get_suspension(ctx(W1P1), run.id).scope")


# (s_scope, r_scope, r_state, caller, deadline relative to the now argument)
XCLAIM_REFUSALS = [
    _claim_case("no_suspension", None, W1, "paused", W1, None, NotSuspended),
    _claim_case("sibling_caller", W1, W1, "paused", W2, "past", NotSuspended),
    _claim_case("lookalike_w10_caller", W1, W1, "paused", W10, "past", NotSuspended),
    _claim_case("lookalike_w1x_caller", W1, W1, "paused", W1X, "at", NotSuspended),
    _claim_case("positional_lookalike_caller", W1, W1, "paused", ORG_W1, "past", NotSuspended),
    _claim_case("lookalike_w10_row", W10, W10, "paused", W1, "past", NotSuspended),
    _claim_case("lookalike_w1x_row", W1X, W1, "paused", W1, "at", NotSuspended),
    _claim_case("descendant_caller", W1, W1, "paused", W1P1, "past", NotSuspended),
    _claim_case("suspension_invisible", W2, W1, "paused", W1, "past", NotSuspended),
    _claim_case("no_deadline", W1, W1, "paused", W1, None, NotSuspended),
    _claim_case("deadline_1ms_ahead", W1, W1, "paused", W1, "ahead_1ms", NotSuspended),
    _claim_case("deadline_ahead", W1, W1, "paused", W1, "ahead", NotSuspended),
    _claim_case("run_absent", W1, None, None, W1, "past", NotSuspended),
    _claim_case("run_invisible", W1, W2, "paused", W1, "at", NotSuspended),
    _claim_case("run_at_lookalike", W1, W1X, "paused", W1, "past", NotSuspended),
    _claim_case("run_invisible_descendant_caller", W1P1, W1, "paused", W1P1, "past", NotSuspended),
    *[_claim_case(f"run_{s}", W1, W1, s, W1, "past", NotSuspended) for s in NON_PAUSED],
]


@pytest.mark.clause("SUSP-XCLAIM-1", "SUSP-XCLAIM-3", "SUSP-PART-3", "SUSP-PART-4", "SCOPE-BYID-2", "SCOPE-VIS-5")
@pytest.mark.parametrize("s_scope, r_scope, r_state, caller, deadline, error", XCLAIM_REFUSALS)
def test_refused_sweep_claim_raises_not_suspended_and_writes_nothing(
    store, clock, s_scope, r_scope, r_state, caller, deadline, error
):
    run_id, t = _setup_claim_case(store, clock, s_scope, r_scope, r_state, deadline)
    exc = _unchanged_after(
        store,
        lambda: store.claim_expired_suspension(ctx(caller), run_id, t),
        error,
        run_id,
        s_scope,
        r_scope,
        "SUSP-XCLAIM-3",
    )
    with clause("SUSP-XCLAIM-3"):
        expect_false("SUSP-XCLAIM-3", isinstance(exc, SuspensionExpired), "isinstance(exc, SuspensionExpired)")


@pytest.mark.clause("SUSP-XCLAIM-4", "SCOPE-ZERO-1", "SCOPE-ZERO-3")
def test_sweep_claim_with_zero_scope_raises_no_scope(store, clock):
    run, _ = _paused(store, W1, expires_at=clock.now())
    before = _view(store, [run.id])
    with pytest.raises(NoScope):
        store.claim_expired_suspension(ZERO, run.id, clock.now())
    with pytest.raises(NoScope):  # NoScope comes before the argument checks
        store.claim_expired_suspension(ZERO, "not-an-id", datetime(2026, 1, 1))
    with pytest.raises(InvalidArgument):  # a non-Context comes first of all
        store.claim_expired_suspension(Scope.parse(W1), run.id, clock.now())
    expect("SUSP-XCLAIM-4", _view(store, [run.id]), before, "the stored state, _view(store, [run.id])")
    expect("SUSP-XCLAIM-4", store.get_run(ctx(W1), run.id).state,
           RunState.PAUSED, "store.get_run(ctx(W1), run.id).state")


@pytest.mark.clause("SUSP-XCLAIM-1", "RSC-GEN-2")
@pytest.mark.parametrize(
    "now_arg",
    [datetime(2030, 1, 1), "2030-01-01T00:00:00Z", 0, None, date(2030, 1, 1)],
    ids=["naive", "str", "int", "none", "date"],
)
def test_sweep_claim_refuses_a_bad_now(store, clock, now_arg):
    run, _ = _paused(store, W1, expires_at=clock.now())
    before = _view(store, [run.id])
    with pytest.raises(InvalidArgument):
        store.claim_expired_suspension(ctx(W1), run.id, now_arg)
    expect("RSC-GEN-2", _view(store, [run.id]), before, "the stored state, _view(store, [run.id])")


@pytest.mark.clause("SUSP-XCLAIM-1", "RSC-GEN-2")
def test_sweep_now_argument_is_truncated_to_milliseconds(store, clock):
    deadline = clock.now() + timedelta(seconds=1)
    run, sus = _paused(store, W1, expires_at=deadline)
    with pytest.raises(NotSuspended):  # truncated to deadline - 1 ms
        store.claim_expired_suspension(ctx(W1), run.id, deadline - timedelta(microseconds=1))
    # deadline + 0.999 ms is truncated to the deadline itself, in another zone
    later = (deadline + timedelta(microseconds=999)).astimezone(timezone(timedelta(hours=-5)))
    expect("RSC-GEN-2", store.claim_expired_suspension(ctx(W1), run.id, later).id,
           sus.id, "store.claim_expired_suspension(ctx(W1), run.id, later).id")


# -- SUSP-PART: the deadline partition --------------------------------------------------------------

PARTITION = [
    pytest.param(-timedelta(days=365), id="far_past"),
    pytest.param(-MS, id="minus_1ms"),
    pytest.param(timedelta(0), id="at_deadline"),
    pytest.param(MS, id="plus_1ms"),
    pytest.param(timedelta(days=365), id="far_future"),
    pytest.param(None, id="no_deadline"),
]


@pytest.mark.clause(
    "SUSP-PART-1", "SUSP-PART-2", "SUSP-PART-3", "SUSP-PART-4", "SUSP-CLAIM-1", "SUSP-CLAIM-6",
    "SUSP-CLAIM-8", "SUSP-XCLAIM-1", "SUSP-XCLAIM-3", "SUSP-LIST-1",
)
@pytest.mark.parametrize("offset", PARTITION)
def test_deadline_partition_exactly_one_side_is_eligible(store, clock, offset):
    """At instant t (clock now and the sweep's now), with the run paused: the
    ineligible side is refused and changes nothing, the eligible side then
    succeeds; list_expired agrees with the sweep side."""
    c = ctx(W1)
    t = clock.now() + timedelta(seconds=10)
    run, sus = _paused(store, W1, expires_at=None if offset is None else t + offset)
    clock.set(t)
    resume_side = offset is None or offset > timedelta(0)
    with clause("SUSP-LIST-1"):
        expect_is("SUSP-LIST-1", sus.id in _ids(store.list_expired(c, t)), not resume_side,
                  "sus.id in _ids(store.list_expired(c, t))")
    with clause("SUSP-XLIST-1"):
        expect_is("SUSP-XLIST-1", sus.id in _ids(store.list_expired_across_scopes(ZERO, t)), not resume_side,
                  "sus.id in _ids(store.list_expired_across_scopes(ZERO, t))")
    before = _view(store, [run.id])
    if resume_side:
        with pytest.raises(NotSuspended):
            store.claim_expired_suspension(c, run.id, t)
    else:
        with pytest.raises(SuspensionExpired):
            store.claim_suspension(c, run.id)
    refusal = "SUSP-XCLAIM-3" if resume_side else "SUSP-CLAIM-8"  # the refused side writes nothing
    expect(refusal, _view(store, [run.id]), before, "the stored state after the refused claim")
    expect(refusal, store.get_run(c, run.id).state, RunState.PAUSED, "run state after the refused claim")
    if resume_side:
        claimed = store.claim_suspension(c, run.id)
    else:
        claimed = store.claim_expired_suspension(c, run.id, t)
    expect_strict("SUSP-PART-4", claimed, sus, "claimed")
    expect_strict("SUSP-CLAIM-8", store.get_run(c, run.id),
                  attrs.evolve(run, state=RunState.RUNNING, updated_at=t, revision=run.revision + 1), "run")


@pytest.mark.clause("SUSP-PART-4", "SUSP-XCLAIM-3", "SUSP-LIST-1")
def test_no_deadline_is_never_swept(store, clock):
    c = ctx(W1)
    run, sus = _paused(store, W1, expires_at=None)
    for t in (clock.now(), clock.now() + timedelta(days=3650), FAR_FUTURE, datetime(2999, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)):
        clock.set(t)
        with pytest.raises(NotSuspended):
            store.claim_expired_suspension(c, run.id, t)
        expect("SUSP-LIST-1", store.list_expired(c, t), [], "store.list_expired(c, t)")
        expect("SUSP-LIST-1", store.list_expired_across_scopes(ZERO, t),
               [], "store.list_expired_across_scopes(ZERO, t)")
    expect("SUSP-XCLAIM-3", store.get_run(c, run.id).state, RunState.PAUSED, "store.get_run(c, run.id).state")
    expect_strict("SUSP-PART-4", store.claim_suspension(c, run.id), sus, "claimed")


@pytest.mark.clause("SUSP-PART-5", "SUSP-CLAIM-6", "SUSP-XCLAIM-3", "SUSP-LIST-2")
def test_after_a_resume_the_sweeper_never_takes_the_run(store, clock):
    """Resumed before the deadline, the run stays running as the deadline goes
    by: every later sweep fails with NotSuspended and a later resume with
    SuspensionExpired, until the run is paused again."""
    c = ctx(W1)
    deadline = clock.now() + timedelta(seconds=1)
    run, sus = _paused(store, W1, expires_at=deadline)
    clock.set(deadline - MS)
    store.claim_suspension(c, run.id)
    resumed = store.get_run(c, run.id)
    for t in (deadline, deadline + MS, deadline + timedelta(days=2)):
        clock.set(t)
        with pytest.raises(NotSuspended):
            store.claim_expired_suspension(c, run.id, t)
        with pytest.raises(SuspensionExpired):
            store.claim_suspension(c, run.id)
        expect("SUSP-LIST-2", _ids(store.list_expired(c, t)), [sus.id], "_ids(store.list_expired(c, t))")
        expect_strict("SUSP-PART-5", store.get_run(c, run.id), resumed, "run")
    expect("SUSP-CLAIM-2", resumed.state, RunState.RUNNING, "resumed.state")
    expect("SUSP-CLAIM-2", resumed.updated_at, deadline - MS, "resumed.updated_at")
    # paused again, the sweep side can take it
    store.update_run(c, attrs.evolve(run, state="paused"))
    expect("SUSP-PART-5", store.claim_expired_suspension(c, run.id, clock.now()).id,
           sus.id, "store.claim_expired_suspension(c, run.id, clock.now()).id")


@pytest.mark.clause("SUSP-PART-5", "SUSP-CLAIM-6", "SUSP-CLAIM-7", "SUSP-XCLAIM-3")
def test_after_a_sweep_no_resume_succeeds(store, clock):
    """Swept (now = deadline while the clock is still earlier): a resume before
    the deadline raises NotSuspended, at or after it SuspensionExpired, and a
    second sweep NotSuspended; the run keeps the sweep's write."""
    c = ctx(W1)
    deadline = clock.now() + timedelta(seconds=1)
    run, sus = _paused(store, W1, expires_at=deadline)
    clock.set(deadline - MS)
    store.claim_expired_suspension(c, run.id, deadline)
    swept = store.get_run(c, run.id)
    expect("SUSP-XCLAIM-2", swept.state, RunState.RUNNING, "swept.state")
    expect("SUSP-XCLAIM-2", swept.updated_at, deadline - MS, "swept.updated_at")
    with pytest.raises(NotSuspended):
        store.claim_suspension(c, run.id)
    for t in (deadline, deadline + timedelta(hours=1)):
        clock.set(t)
        with pytest.raises(SuspensionExpired):
            store.claim_suspension(c, run.id)
        with pytest.raises(NotSuspended):
            store.claim_expired_suspension(c, run.id, t)
    expect_strict("SUSP-PART-5", store.get_run(c, run.id), swept, "run")
    expect_strict("SUSP-PART-5", store.get_suspension(c, run.id), sus, "suspension")


# -- SUSP-DEL ----------------------------------------------------------------------------------


@pytest.mark.clause("SUSP-DEL-1", "SCOPE-BYID-1", "SCOPE-BYID-2", "SCOPE-VIS-4", "SCOPE-VIS-5")
@pytest.mark.parametrize("row, caller, visible", VISIBILITY)
def test_delete_follows_visibility(store, clock, row, caller, visible):
    run, sus = _paused(store, row, expires_at=clock.now())
    if visible:
        expect("SUSP-DEL-1", store.delete_suspension(ctx(caller), run.id),
               None, "store.delete_suspension(ctx(caller), run.id)")
        for s in (row, caller):
            with pytest.raises(NotSuspended):
                store.get_suspension(ctx(s), run.id)
        expect("SUSP-DEL-1", store.list_expired_across_scopes(ZERO, FAR_FUTURE),
               [], "store.list_expired_across_scopes(ZERO, FAR_FUTURE)")
        with pytest.raises(NotSuspended):
            store.delete_suspension(ctx(caller), run.id)
    else:
        before = _view(store, [run.id])
        with pytest.raises(NotSuspended):
            store.delete_suspension(ctx(caller), run.id)
        expect("SUSP-DEL-1", _view(store, [run.id]), before, "the stored state, _view(store, [run.id])")
        expect_strict("SUSP-DEL-1", store.get_suspension(ctx(row), run.id), sus, "suspension")
        expect("SUSP-DEL-2", store.get_run(ctx(row), run.id).state,
               RunState.PAUSED, "store.get_run(ctx(row), run.id).state")


@pytest.mark.clause("SUSP-DEL-1")
def test_delete_of_a_missing_row_in_own_scope(store, clock):
    run = _run(store, W1)
    other, other_sus = _paused(store, W1)
    before = _view(store, [run.id, other.id])
    with pytest.raises(NotSuspended):
        store.delete_suspension(ctx(W1), run.id)
    with pytest.raises(NotSuspended):
        store.delete_suspension(ctx(W1), ids.new_id(ids.RUN))
    expect("SUSP-DEL-1", _view(store, [run.id, other.id]), before, "the stored state, _view(store, [run.id, other.id])")


@pytest.mark.clause("SUSP-DEL-2")
@pytest.mark.parametrize("state", ["paused", "running", "completed", "failed", "cancelled", "created"])
@pytest.mark.parametrize("caller", [W1P1, W1], ids=["own", "ancestor"])
def test_delete_never_changes_a_run(store, clock, state, caller):
    run = _run(store, W1P1, state=state, metadata={"x": 1})
    bystander = _run(store, W1P1)
    _suspend(store, W1P1, run.id, clock.now())
    clock.advance(milliseconds=50)
    runs_before = {s: store.list_runs(ctx(s)) for s in ROOTS}
    store.delete_suspension(ctx(caller), run.id)
    expect_strict("SUSP-DEL-2", store.get_run(ctx(W1P1), run.id), run, "run")
    expect_strict("SUSP-DEL-2", store.get_run(ctx(W1P1), bystander.id), bystander, "bystander")
    expect("SUSP-DEL-2", {s: store.list_runs(ctx(s)) for s in ROOTS},
           runs_before, "{s: store.list_runs(ctx(s)) for s in ROOTS}")


# -- SUSP-LIST / SUSP-XLIST ---------------------------------------------------------------------


def _expired_fixture(store, clock):
    """Rows in many scopes; returns (now, {name: suspension})."""
    now = clock.now() + timedelta(hours=1)
    rows = {}
    specs = [
        ("w1_past", W1, now - timedelta(minutes=5)),
        ("w1_at_now", W1, now),
        ("w1_future", W1, now + MS),
        ("w1_none", W1, None),
        ("w1p1_past", W1P1, now - timedelta(minutes=1)),
        ("w1p2_past", W1P2, now - timedelta(minutes=2)),
        ("w2_past", W2, now - timedelta(minutes=3)),
        ("w10_past", W10, now - timedelta(minutes=4)),
        ("w1x_past", W1X, now - timedelta(minutes=6)),
        ("org_past", ORG_W1, now - timedelta(minutes=7)),
    ]
    for name, scope, expires in specs:
        rows[name] = _suspend(store, scope, ids.new_id(ids.RUN), expires)
    return now, rows


@pytest.mark.clause("SUSP-LIST-1", "SUSP-LIST-3", "SCOPE-VIS-1", "SCOPE-VIS-2", "SCOPE-VIS-3", "SCOPE-VIS-5", "SCOPE-VIS-6")
@pytest.mark.parametrize(
    "caller, expected",
    [
        (W1, ["w1_past", "w1p2_past", "w1p1_past", "w1_at_now"]),
        (W1P1, ["w1p1_past"]),
        (W1P2, ["w1p2_past"]),
        (W2, ["w2_past"]),
        (W10, ["w10_past"]),
        (W1X, ["w1x_past"]),
        (ORG_W1, ["org_past"]),
        ("ws=w3", []),
    ],
    ids=["w1", "w1p1", "w1p2", "w2", "w10", "w1x", "org_w1", "empty_scope"],
)
def test_list_expired_selects_visible_rows_at_or_before_now(store, clock, caller, expected):
    now, rows = _expired_fixture(store, clock)
    got = store.list_expired(ctx(caller), now)
    expect("SUSP-LIST-1", _ids(got), [rows[n].id for n in expected], "_ids(got)")
    for g in got:
        expect_strict("SUSP-LIST-1", g, next(r for r in rows.values() if r.id == g.id), "row")


@pytest.mark.clause("SUSP-LIST-1", "RSC-GEN-2")
def test_list_expired_boundary_and_truncated_now(store, clock):
    c = ctx(W1)
    deadline = clock.now() + timedelta(seconds=3)
    run, sus = _paused(store, W1, expires_at=deadline)
    expect("SUSP-LIST-1", store.list_expired(c, deadline - MS), [], "store.list_expired(c, deadline - MS)")
    expect("RSC-GEN-2", store.list_expired(c, deadline - timedelta(microseconds=1)),
           [], "store.list_expired(c, deadline - timedelta(microseconds=1))")
    expect("SUSP-LIST-1", _ids(store.list_expired(c, deadline)), [sus.id], "_ids(store.list_expired(c, deadline))")
    expect("RSC-GEN-2", _ids(store.list_expired(c, deadline + timedelta(microseconds=999))),
           [sus.id], "_ids(store.list_expired(c, deadline + timedelta(microseconds=999)))")
    expect("SUSP-LIST-1", _ids(store.list_expired_across_scopes(ZERO, deadline)),
           [sus.id], "_ids(store.list_expired_across_scopes(ZERO, deadline))")
    expect("SUSP-LIST-1", store.list_expired_across_scopes(ZERO, deadline - MS),
           [], "store.list_expired_across_scopes(ZERO, deadline - MS)")


@pytest.mark.clause("SUSP-LIST-2", "SUSP-XLIST-1")
def test_list_expired_ignores_the_run(store, clock):
    """Suspensions whose run is paused, running, terminal, absent or in a
    scope the caller cannot see are all listed."""
    now = clock.now()
    expected = []
    for state in ("paused", "running", "completed", "failed", "cancelled", "created"):
        run = _run(store, W1, state=state)
        expected.append(_suspend(store, W1, run.id, now - timedelta(seconds=len(expected) + 1)))
    expected.append(_suspend(store, W1, ids.new_id(ids.RUN), now - timedelta(seconds=30)))  # absent
    hidden = _run(store, W2)
    expected.append(_suspend(store, W1, hidden.id, now - timedelta(seconds=40)))  # run invisible
    want = sorted(expected, key=lambda s: (s.expires_at, s.id))
    expect("SUSP-LIST-2", _ids(store.list_expired(ctx(W1), now)),
           _ids(want), "_ids(store.list_expired(ctx(W1), now))")
    expect("SUSP-XLIST-1", _ids(store.list_expired_across_scopes(ZERO, now)),
           _ids(want), "_ids(store.list_expired_across_scopes(ZERO, now))")


def _ordering_fixture(store, clock, scopes):
    """Eight expired rows with ties on expires_at, created in an order that is
    neither the id order nor the deadline order."""
    now = clock.now()
    d1, d2, d3 = now - timedelta(minutes=3), now - timedelta(minutes=2), now - MS
    sus_ids = _sorted_ids(ids.SUSPENSION, 8)
    plan = [  # (id index, deadline)
        (5, d2), (1, d3), (7, d1), (0, d2), (3, d1), (6, d3), (2, d2), (4, d1),
    ]
    rows = []
    for i, (k, d) in enumerate(plan):
        rows.append(
            store.create_suspension(
                ctx(scopes[i % len(scopes)]),
                make_suspension(ids.new_id(ids.RUN), id=sus_ids[k], expires_at=d),
            )
        )
        clock.advance(milliseconds=1)
    # a row past now and a row without a deadline are never listed
    _suspend(store, scopes[0], ids.new_id(ids.RUN), clock.now() + timedelta(days=1))
    _suspend(store, scopes[0], ids.new_id(ids.RUN), None)
    return now, sorted(rows, key=lambda s: (s.expires_at, s.id))


def _expired_elsewhere(store, now):
    """Expired rows the scoped list from W1 must skip: in the look-alike
    scopes W10 and W1X, in ORG_W1 and W2, with deadlines before, between and
    tied with the fixture's (a limit counts only what the caller sees)."""
    for i, scope in enumerate((W10, W1X, ORG_W1, W2)):
        for deadline in (now - timedelta(minutes=4), now - timedelta(minutes=2) - i * MS, now - MS, now):
            _suspend(store, scope, ids.new_id(ids.RUN), deadline)


@pytest.mark.clause("SUSP-LIST-3", "RSC-GEN-11", "SUSP-LIST-1")
@pytest.mark.parametrize("limit", [0, -1, -100, 1, 3, 8, 9, 50])
def test_list_expired_order_and_limit(store, clock, limit):
    now, ordered = _ordering_fixture(store, clock, [W1, W1P1, W1P2])
    _expired_elsewhere(store, now)
    got = store.list_expired(ctx(W1), now, limit)
    want = ordered if limit <= 0 else ordered[:limit]
    expect("SUSP-LIST-3", _ids(got), _ids(want),
           f"list_expired from {W1} with limit={limit}, expired rows of look-alike and other scopes present")
    expect_strict("SUSP-LIST-3", got, want, "rows")
    expect("SUSP-LIST-3", _ids(store.list_expired(ctx(W1), now)),
           _ids(ordered), "_ids(store.list_expired(ctx(W1), now))")  # default: no maximum


@pytest.mark.clause("SUSP-XLIST-1", "SUSP-LIST-3", "SCOPE-XS-1", "SCOPE-XS-3", "SCOPE-XS-4", "RSC-GEN-11")
@pytest.mark.parametrize("limit", [0, -5, 1, 4, 8, 20])
def test_list_expired_across_scopes_order_and_limit(store, clock, limit):
    now, ordered = _ordering_fixture(store, clock, [W1, W2, W10, ORG_W1])
    want = ordered if limit <= 0 else ordered[:limit]
    for caller in (ZERO, ctx(W1), ctx(W2), ctx("zz=unrelated"), ctx("ws=w1/proj=p1/env=e1")):
        got = store.list_expired_across_scopes(caller, now, limit)
        expect_strict("SUSP-XLIST-1", got, want, f"rows from {caller.scope!r}")


@pytest.mark.clause("SUSP-XLIST-1", "SCOPE-XS-2", "SCOPE-XS-3", "SCOPE-XS-4", "SCOPE-CANON-5")
def test_sweeper_reads_rows_of_every_scope_and_acts_with_their_scope(store, clock):
    """From any context (zero scope included) the cross-scope list returns
    the expired rows of every scope, each with its own stored scope; a
    sweeper claiming through Context(scope=row.scope) succeeds."""
    now = clock.now()
    made = {}
    for i, scope in enumerate([W1, W1P1, W2, W10, ORG_W1, "a=1/b=2/c=3"]):
        run = _run(store, scope)
        made[run.id] = (scope, _suspend(store, scope, run.id, now - timedelta(seconds=i + 1)))
    live = _run(store, W1)
    _suspend(store, W1, live.id, now + timedelta(minutes=1))
    results = [store.list_expired_across_scopes(c, now) for c in (ZERO, ctx(W1), ctx("q=nobody"))]
    with clause("SCOPE-XS-3"):
        expect("SCOPE-XS-3", results[0], results[1], "results[0]")
        expect("SCOPE-XS-3", results[1], results[2], "results[1]")
    rows = results[0]
    expect("SUSP-XLIST-1", {r.run_id for r in rows}, set(made), "{r.run_id for r in rows}")
    for row in rows:
        scope, sus = made[row.run_id]
        expect("SCOPE-XS-4", row.scope, Scope.parse(scope), "row.scope")
        expect_strict("SUSP-XLIST-1", row, sus, "row")
        expect("SCOPE-XS-4", store.claim_expired_suspension(Context(scope=row.scope), row.run_id, now).id,
               row.id, "store.claim_expired_suspension(Context(scope=row.scope), row.run_id, now).id")
        expect("SCOPE-XS-4", store.get_run(Context(scope=row.scope), row.run_id).state,
               RunState.RUNNING, "store.get_run(Context(scope=row.scope), row.run_id).state")
    expect("SUSP-XLIST-1", store.get_run(ctx(W1), live.id).state,
           RunState.PAUSED, "store.get_run(ctx(W1), live.id).state")


@pytest.mark.clause("SUSP-LIST-1", "SUSP-XLIST-1", "SCOPE-XS-5", "RSC-GEN-2", "RSC-GEN-9")
@pytest.mark.parametrize("method", ["list_expired", "list_expired_across_scopes"])
@pytest.mark.parametrize(
    "now_arg, limit",
    [
        (datetime(2030, 1, 1), 0),
        ("2030-01-01T00:00:00Z", 0),
        (None, 0),
        (FAR_FUTURE, True),
        (FAR_FUTURE, "5"),
        (FAR_FUTURE, 2.0),
    ],
    ids=["naive_now", "str_now", "none_now", "bool_limit", "str_limit", "float_limit"],
)
def test_expired_lists_refuse_bad_arguments(store, clock, method, now_arg, limit):
    _paused(store, W1, expires_at=clock.now())
    with pytest.raises(InvalidArgument):
        getattr(store, method)(ctx(W1), now_arg, limit)


@pytest.mark.clause("SUSP-XLIST-1", "SCOPE-XS-2", "SCOPE-ZERO-1", "SCOPE-ZERO-3")
def test_zero_scope_lists_across_scopes_but_not_scoped(store, clock):
    _, sus = _paused(store, W1, expires_at=clock.now())
    expect("SCOPE-XS-2", _ids(store.list_expired_across_scopes(ZERO, clock.now())),
           [sus.id], "_ids(store.list_expired_across_scopes(ZERO, clock.now()))")
    with pytest.raises(NoScope):
        store.list_expired(ZERO, clock.now())
    with pytest.raises(InvalidArgument):
        store.list_expired_across_scopes(None, clock.now())
    with pytest.raises(InvalidArgument):
        store.list_expired_across_scopes(Scope(), clock.now())


# -- the four writers ---------------------------------------------------------------------------------

RESUME_SIDE = ("resume", "reject", "cancel")
WINNER_STATE = {
    "resume": RunState.RUNNING,
    "reject": RunState.FAILED,
    "sweep": RunState.FAILED,
    "cancel": RunState.CANCELLED,
}
DECISIONS = {
    "resume": approve(by="resumer", reason="approved by a human"),
    "reject": reject(by="reviewer", reason="rejected by a human"),
    "sweep": reject(by="sweeper", reason="the pause expired"),
    "cancel": reject(by="canceller", reason="the run was cancelled"),
}
PARTICIPANTS = {
    "all_four": ("resume", "reject", "sweep", "cancel"),
    "resume_side_only": RESUME_SIDE,
    "sweep_only": ("sweep",),
}
FOUR_DEADLINES = {"ahead": MS, "at_instant": timedelta(0), "past": -MS, "none": None}


@attrs.frozen
class WriterResult:
    name: str
    won: bool
    error: BaseException | None = None


def writer_script(name: str, store: Any, clock: Any, c: Context, run: Any, checkpoint_id: str | None, with_checkpoints: bool):
    """One engine writer as a script of store calls (suspensions.md, "The
    four writers"); it stops as soon as it loses its claim."""

    def script() -> WriterResult:
        try:
            if name == "sweep":
                store.claim_expired_suspension(c, run.id, clock.now())
            else:
                store.claim_suspension(c, run.id)
        except (NotSuspended, SuspensionExpired) as exc:
            return WriterResult(name, False, exc)
        if name != "resume":
            store.update_run(c, attrs.evolve(run, state=WINNER_STATE[name]))
        store.delete_suspension(c, run.id)
        if name in ("resume", "reject"):
            if checkpoint_id is not None:
                store.resolve(c, checkpoint_id, DECISIONS[name])
        elif with_checkpoints:
            for cp in store.list_pending(c, CheckpointFilter(run_id=run.id)):
                store.resolve(c, cp.id, DECISIONS[name])
        return WriterResult(name, True)

    return script


def _decision_fields(d):
    return (d.approved, d.decided_by, d.reason)


@pytest.mark.clause("FOUR-1", "FOUR-2", "FOUR-3", "FOUR-5", "FOUR-6", "SUSP-CLAIM-10", "SUSP-PART-1")
@pytest.mark.parametrize(
    "with_p",
    [
        pytest.param(False, id="no_checkpoint"),
        pytest.param(
            True,
            id="with_checkpoint",
            marks=[pytest.mark.cortex_classes("checkpoints"), pytest.mark.clause("FOUR-4")],
        ),
    ],
)
@pytest.mark.parametrize("deadline", list(FOUR_DEADLINES))
@pytest.mark.parametrize("participants", list(PARTICIPANTS))
def test_four_writers_race(store, clock, profile, participants, deadline, with_p):
    """The writers of ``participants`` race on one paused run (one thread
    each, clock fixed, the sweep's now = clock now), repeated on fresh runs:
    exactly one winner iff a writer of the eligible side takes part; the run
    ends in the winner's state, S is gone, P carries the winner's decision
    once; losers saw only the allowed errors and changed nothing."""
    scope = W1P1
    c = ctx(scope)
    names = PARTICIPANTS[participants]
    offset = FOUR_DEADLINES[deadline]
    sweep_side = offset is not None and offset <= timedelta(0)
    eligible = [n for n in names if (n == "sweep") == sweep_side]

    # a bystander paused run in the same scope must never be touched
    b_run = _run(store, scope)
    b_sus = _suspend(store, scope, b_run.id, clock.now() + (offset if offset is not None else timedelta(0)))
    b_cp = store.create_checkpoint(c, make_checkpoint(b_run.id)) if with_p else None

    for _ in range(profile.race_rounds):
        run = _run(store, scope)
        clock.advance(milliseconds=7)
        t = clock.now()
        sus = _suspend(store, scope, run.id, None if offset is None else t + offset)
        p = store.create_checkpoint(c, make_checkpoint(run.id, step_index=2)) if with_p else None
        outcomes = race(
            [writer_script(n, store, clock, c, run, p.id if p else None, with_p) for n in names]
        )
        if clock.now() != t:
            raise RuntimeError("test setup: the clock moved during the race")
        unexpected = [o.error for o in outcomes if not o.ok]
        with clause("FOUR-5"):
            expect_false("FOUR-5", unexpected, "unexpected" + ": " + shorten(unexpected))  # only claim losses are expected, and they are caught
        results = [o.value for o in outcomes]
        winners = [r for r in results if r.won]

        # FOUR-1 / FOUR-2
        if eligible:
            with clause("FOUR-2"):
                expect("FOUR-2", len(winners), 1, "len(winners)" + ": " + shorten(results))
            with clause("FOUR-2"):
                expect_op("FOUR-2", winners[0].name, "in", eligible, "winners[0].name" + ": " + shorten(results))
        else:
            with clause("FOUR-2"):
                expect("FOUR-2", winners, [], "winners" + ": " + shorten(results))

        # FOUR-5: what the losers saw
        for r in results:
            if r.won:
                continue
            if r.name == "sweep" or not sweep_side:
                with clause("FOUR-5"):
                    expect_that("FOUR-5", isinstance(r.error, NotSuspended), "r.error" + ": " + shorten(r),
                                Said("an instance of NotSuspended"), r.error)
            elif winners:
                with clause("FOUR-5"):
                    expect_that("FOUR-5", isinstance(r.error, (NotSuspended, SuspensionExpired)),
                                "r.error" + ": " + shorten(r), Said("an instance of (NotSuspended, SuspensionExpired)"),
                                r.error)
            else:
                with clause("FOUR-5"):
                    expect_that("FOUR-5", isinstance(r.error, SuspensionExpired), "r.error" + ": " + shorten(r),
                                Said("an instance of SuspensionExpired"), r.error)

        after = store.get_run(c, run.id)
        if winners:
            w = winners[0].name
            # FOUR-3: the winner's state, S gone
            # RUN-REV-2: the claim, and the update of every winner but resume
            writes = 1 if w == "resume" else 2
            expect_strict("FOUR-3", after, attrs.evolve(run, state=WINNER_STATE[w], updated_at=t,
                                                    revision=run.revision + writes), "run")
            with pytest.raises(NotSuspended):
                store.get_suspension(c, run.id)
            with clause("FOUR-3"):
                expect_op("FOUR-3", sus.id, "not in", _ids(store.list_expired_across_scopes(ZERO, FAR_FUTURE)),
                          "sus.id")
            if p is not None:
                # FOUR-4: P decided once, by the winner
                got = store.get_checkpoint(c, p.id)
                expect("FOUR-4", got.state, CheckpointState.RESOLVED, "got.state")
                expect("FOUR-4", _decision_fields(got.decision),
                       _decision_fields(DECISIONS[w]), "_decision_fields(got.decision)")
                expect("FOUR-4", got.decision.decided_at, t, "got.decision.decided_at")
                expect("FOUR-4", got.updated_at, t, "got.updated_at")
                with clause("FOUR-4"):
                    expect_op("FOUR-4", p.id, "not in", _ids(store.list_pending(c)), "p.id")
                with pytest.raises(InvalidState):
                    store.resolve(c, p.id, approve(by="latecomer"))
                with pytest.raises(InvalidState):
                    store.resolve(c, p.id, reject(by="latecomer"))
                expect_strict("FOUR-1", store.get_checkpoint(c, p.id), got, "checkpoint after late resolves")
        else:
            # FOUR-2 / FOUR-6: nobody won, nothing moved
            expect("FOUR-6", after.state, RunState.PAUSED, "after.state")
            expect_strict("FOUR-3", after, run, "run")
            expect_strict("SUSP-CLAIM-10", store.get_suspension(c, run.id), sus, "suspension")
            if p is not None:
                expect_strict("FOUR-1", store.get_checkpoint(c, p.id), p, "checkpoint")
        # FOUR-6
        with clause("FOUR-6"):
            expect_that("FOUR-6", after.state != RunState.RUNNING or [r.name for r in winners] == ["resume"],
                        "the run is running only when resume alone won", Said("not running, or resume the only winner"),
                        (after.state, [r.name for r in winners]))
        clock.advance(milliseconds=3)

    expect_strict("FOUR-3", store.get_run(c, b_run.id), b_run, "bystander run")
    expect_strict("FOUR-5", store.get_suspension(c, b_run.id), b_sus, "bystander suspension")
    if b_cp is not None:
        expect_strict("FOUR-1", store.get_checkpoint(c, b_cp.id), b_cp, "bystander checkpoint")


@pytest.mark.clause("FOUR-4", "FOUR-3")
@pytest.mark.cortex_classes("checkpoints")
@pytest.mark.parametrize("name", ["sweep", "cancel"])
def test_sweep_and_cancel_writers_reject_every_pending_checkpoint(store, clock, name):
    """The sweep and cancel writers reject every pending checkpoint of R (and
    no checkpoint of another run); already resolved ones keep their decision."""
    c = ctx(W1)
    run = _run(store, W1)
    clock.advance(milliseconds=5)
    t = clock.now()
    _suspend(store, W1, run.id, t if name == "sweep" else None)
    pending = [store.create_checkpoint(c, make_checkpoint(run.id)) for _ in range(3)]
    done = store.create_checkpoint(c, make_checkpoint(run.id))
    done = store.resolve(c, done.id, approve(by="earlier"))
    other = store.create_checkpoint(c, make_checkpoint(ids.new_id(ids.RUN)))
    result = writer_script(name, store, clock, c, run, None, True)()
    with clause("FOUR-3"):
        expect_true("FOUR-3", result.won, "result.won")
    for cp in pending:
        got = store.get_checkpoint(c, cp.id)
        expect("FOUR-4", got.state, CheckpointState.RESOLVED, "got.state")
        expect("FOUR-4", _decision_fields(got.decision),
               _decision_fields(DECISIONS[name]), "_decision_fields(got.decision)")
    expect_strict("FOUR-4", store.get_checkpoint(c, done.id), done, "earlier decision")
    expect_strict("FOUR-3", store.get_checkpoint(c, other.id), other, "other run's checkpoint")
    expect("FOUR-3", store.get_run(c, run.id).state, WINNER_STATE[name], "store.get_run(c, run.id).state")
