"""Certifies class `a2a_held` (a2a_held.md): the release of a held question
against its pinned pause (the receipt, the queued deliveries in receiver
order, nothing else changed), identical retries after the pause moved on,
every refusal in its order with nothing written (the asker, a claimed ask,
the question and its marker, the receiver count, the run's state and
revision, the suspension's id and reason, taken ids), threaded releases
against each other and against run updates, the agent-reply runs (saved
pauses and resumed askers, paging), and the writers that answer a waiting
ask racing each other: one seal wins and the run is resumed once.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import attrs
import pytest

from cortex_spec import Context, ids
from cortex_spec.a2a import Address
from cortex_spec.a2a_held import HELD_ASK_METADATA, HeldAskReceipt, HeldAskRequest
from cortex_spec.a2a_resolutions import AskReply, AskReplyItem
from cortex_spec.errors import (
    AlreadyExists,
    AskAlreadyClaimed,
    AskNotFound,
    HeldAskConflict,
    HeldAskNotFound,
    InvalidArgument,
    MessageNotFound,
    NoScope,
    NotSuspended,
    RunNotFound,
)
from cortex_spec.runs import RunState
from cortex_spec.testing import (
    FAR_FUTURE, clause, ClauseViolation, ctx, expect, expect_raises, expect_result, expect_that, expect_true, race, Said,
    shorten,
    state_view,
)
from cortex_spec.a2a import make_ask, make_delivery, make_envelope
from cortex_spec.runs import make_run
from cortex_spec.suspensions import make_suspension

from .a2a_world import HOME, OUTSIDERS, ConversationWorld, place, read_each, view_places
from .examples import Examples, Fixture, long_call

RECEIVERS = (Address("worker"), Address("critic"), Address("worker"))
HELD = {HELD_ASK_METADATA: True, "n": 1}


class W(ConversationWorld):
    """A conversation at ``where``; held questions, paused askers."""

    def __init__(self, store: Any, where: str | Context = HOME) -> None:
        super().__init__(store, where)
        self.runs: list[str] = []
        self.asks: list[str] = []
        self.deliveries: list[str] = []

    def pause(self, reason: str = "agent_reply", state: str = "paused") -> tuple[Any, Any]:
        run = self.s.create_run(self.c, make_run(state=state))
        sus = self.s.create_suspension(self.c, make_suspension(run.id, reason=reason))
        self.runs.append(run.id)
        return run, sus

    def question(self, run_id: str, metadata: Any = None, receivers: tuple = RECEIVERS,
                 **ask: Any) -> tuple[Any, Any]:
        q = self.s.record_message(self.c, make_envelope(self.conv, receivers=receivers,
                                                        metadata=HELD if metadata is None else metadata))
        a = self.s.create_pending_ask(self.c, make_ask(self.conv, message_id=q.id, asker_run_id=run_id, **ask))
        self.asks.append(a.reply_with)
        return q, a

    def held(self) -> tuple[Any, Any, Any, HeldAskRequest]:
        run, sus = self.pause()
        q, a = self.question(run.id)
        return run, sus, q, self.request(run, sus, a, len(q.receivers))

    def request(self, run: Any, sus: Any, a: Any, n: int, **over: Any) -> HeldAskRequest:
        dids = tuple(ids.new_id(ids.DELIVERY) for _ in range(n))
        self.deliveries += dids
        fields = dict(run_id=run.id, suspension_id=sus.id, run_revision=run.revision, reply_with=a.reply_with,
                      delivery_ids=dids)
        fields.update(over)
        return HeldAskRequest(**fields)

    def view(self) -> dict:
        return _view(self.s, self.c, self.runs, self.asks, self.deliveries)


def _view(store: Any, c: Context, run_ids: list, reply_withs: list, delivery_ids: list) -> dict:
    places = view_places(c)
    view = state_view(store, places, run_ids=run_ids, reply_withs=reply_withs, delivery_ids=delivery_ids,
                      classes={"a2a_held"})
    for sc in places:
        view[f"agent_reply_runs@{place(sc)}"] = store.list_agent_reply_runs(sc, None, 256)
    return read_each(view, "release", places, reply_withs, store.get_held_ask_release, HeldAskNotFound)


# -- EXAMPLES for the cross-class suites ------------------------------------------------------


def _seed(store: Any, fixture: Fixture) -> SimpleNamespace:
    w = W(store)
    _, _, _, released = w.held()
    store.release_held_ask(w.c, released)
    _, _, _, pending = w.held()
    return SimpleNamespace(held_released=released, held_pending=pending,
                           view={"run_ids": w.runs, "reply_withs": w.asks, "delivery_ids": w.deliveries})


def _examples_view(store: Any, w: SimpleNamespace, scopes: Any) -> dict:
    v = getattr(w, "view", {})
    out = state_view(store, scopes, classes={"a2a_held"}, **v)
    for sc in scopes:
        c = sc if isinstance(sc, Context) else ctx(sc)
        out[f"agent_reply_runs@{place(c)}"] = store.list_agent_reply_runs(c, None, 256)
    return out


def _long_scopes(store: Any, c: Context, up: Context) -> None:
    """SCOPE-CANON-6: every writing method at the long scope ``c``, the rows
    read back from ``c`` and from its parent ``up`` (test_long_scopes.py)."""
    w = W(store, c)
    request = long_call("a held ask", w.held)[3]
    long_call("release_held_ask", lambda: store.release_held_ask(c, request))
    long_call("get_held_ask_release", lambda: store.get_held_ask_release(c, request.reply_with))
    long_call("list_agent_reply_runs", lambda: store.list_agent_reply_runs(c, None, 10))


EXAMPLES = Examples(
    "a2a_held",
    long_scopes=_long_scopes,
    seed=_seed,
    view=_examples_view,
    good={
        "release_held_ask": lambda s, c, w: s.release_held_ask(c, w.held_pending),
        "get_held_ask_release": lambda s, c, w: s.get_held_ask_release(c, w.held_released.reply_with),
        "list_agent_reply_runs": lambda s, c, w: s.list_agent_reply_runs(c, None, 10),
    },
    bad={
        "release_held_ask": lambda s, c, w: s.release_held_ask(c, attrs.evolve(w.held_pending, run_revision=-1)),
        "get_held_ask_release": lambda s, c, w: s.get_held_ask_release(c, 3),
        "list_agent_reply_runs": lambda s, c, w: s.list_agent_reply_runs(c, ids.new_id(ids.DELIVERY), 10),
    },
)


# -- the release (A2A-HELD) -----------------------------------------------------------------------


@pytest.mark.clause("A2A-HELD-6", "A2A-HELD-8", "A2A-HELD-9", "A2A-DLV-1", "A2A-ENV-6")
def test_a_release_queues_the_question_once_per_receiver_and_keeps_a_receipt(store, clock):
    w = W(store)
    run, sus, q, req = w.held()
    ask = store.get_pending_ask(w.c, req.reply_with)
    clock.advance(seconds=1)
    now = clock.now()
    got = store.release_held_ask(w.c, req)
    want = HeldAskReceipt(schema_version=1, scope=w.c.scope, orchestration_id="", request=req, message_id=q.id,
                          deliveries=req.delivery_ids, committed_at=now, fresh=True)
    expect("A2A-HELD-6", got, want, "the receipt of a fresh release")
    for did, receiver in zip(req.delivery_ids, q.receivers):
        with clause("A2A-HELD-6", "A2A-DLV-1", what=f"the queued delivery {did}"):
            d = store.get_delivery(w.c, did)
            expect(("A2A-HELD-6", "A2A-DLV-1"), (d.message_id, d.receiver, d.state, d.scope, d.partition, d.created_at, d.claim_token), (
                q.id, receiver, "queued", w.c.scope, "", now, None), "(d.message_id, d.receiver, d.state, d.scope, d.partition, d.created_at, d.claim_token)" + ": " + shorten(d))
    expect_result("A2A-HELD-6", lambda: [d.id for d in store.list_queued_deliveries(Context.of(""))],
                  sorted(req.delivery_ids, key=lambda i: (now, i)), "the queue after the release")
    expect_result("A2A-HELD-6", lambda: (store.get_pending_ask(w.c, req.reply_with), store.get_run(w.c, run.id),
                                         store.get_suspension(w.c, run.id)), (ask, run, sus),
                  "the ask, the run and its suspension after the release")
    expect_result("A2A-HELD-9", lambda: store.get_held_ask_release(w.c, req.reply_with),
                  attrs.evolve(want, fresh=False), "get_held_ask_release")


@pytest.mark.clause("A2A-HELD-2", "A2A-HELD-8", "A2A-RES-6", "RUN-REV-2")
def test_an_identical_retry_returns_the_receipt_after_the_pause_moved_on(store, clock):
    """Retried after the run was updated, resumed, its suspension deleted,
    the ask answered and the run completed: the original receipt, and the
    question is still queued once; another request is a conflict."""
    w = W(store)
    run, sus, q, req = w.held()
    first = store.release_held_ask(w.c, req)
    steps = [
        lambda: store.update_run(w.c, attrs.evolve(run, output="thinking")),
        lambda: store.seal_ask_resolution(w.c, store.read_pending_ask(w.c, req.reply_with),
                                          AskReply((AskReplyItem("inform", "worker", "42", w.conv),), True)),
        lambda: store.claim_suspension(w.c, run.id),
        lambda: store.delete_suspension(w.c, run.id),
        lambda: store.update_run(w.c, attrs.evolve(run, state=RunState.COMPLETED)),
    ]
    for i, step in enumerate(steps):
        step()
        clock.advance(seconds=1)
        before = w.view()
        expect_result("A2A-HELD-2", lambda: store.release_held_ask(w.c, req), attrs.evolve(first, fresh=False),
                      f"an identical retry after step {i}")
        expect("A2A-HELD-8", w.view(), before, f"the store after the retry (step {i})")
    for change in (dict(run_revision=run.revision + 1), dict(delivery_ids=tuple(reversed(req.delivery_ids))),
                   dict(suspension_id=ids.new_id(ids.SUSPENSION)), dict(run_id=ids.new_id(ids.RUN))):
        expect_raises("A2A-HELD-2", HeldAskConflict, lambda change=change: store.release_held_ask(
            w.c, attrs.evolve(req, **change)), f"a release of the released question with {change}")


#: Each refusal by the clause that states it: the ask and its question
#: (A2A-HELD-3), the run and its revision (A2A-HELD-4), the suspension
#: (A2A-HELD-5), a taken delivery id (A2A-HELD-6).
REFUSED_BY = {
    **dict.fromkeys(["asker", "claimed", "sealed", "no-message", "message-elsewhere", "unmarked",
                     "marked-string", "count"], "A2A-HELD-3"),
    **dict.fromkeys(["no-run", "run-elsewhere", "running", "updated", "revision-ahead", "claimed-pause"],
                    "A2A-HELD-4"),
    **dict.fromkeys(["no-suspension", "other-suspension", "approval"], "A2A-HELD-5"),
    "delivery-taken": "A2A-HELD-6",
}
REFUSALS = list(REFUSED_BY)


def _refused(store: Any, case: str) -> tuple[W, HeldAskRequest, type]:
    w = W(store)
    run, sus = w.pause()
    q, a = w.question(run.id)
    req = w.request(run, sus, a, len(q.receivers))
    error: type = HeldAskConflict
    if case == "asker":
        other, _ = w.pause()
        req = attrs.evolve(req, run_id=other.id)
    elif case == "claimed":
        store.claim_pending_ask(w.c, a.reply_with)
        error = AskAlreadyClaimed
    elif case == "sealed":
        store.seal_ask_resolution(w.c, a, AskReply((), False))
        error = AskAlreadyClaimed
    elif case in ("no-message", "message-elsewhere"):
        where = W(store, "ws=w1/proj=p2")
        mid = ids.new_id(ids.MESSAGE) if case == "no-message" else where.question(run.id)[0].id
        a = store.create_pending_ask(w.c, make_ask(w.conv, message_id=mid, asker_run_id=run.id))
        w.asks.append(a.reply_with)
        req, error = attrs.evolve(req, reply_with=a.reply_with), MessageNotFound
    elif case in ("unmarked", "marked-string", "count"):
        meta = {"unmarked": {"n": 1}, "marked-string": {HELD_ASK_METADATA: "true"}, "count": None}[case]
        q2, a2 = w.question(run.id, metadata=meta)
        n = len(q2.receivers) - (1 if case == "count" else 0)
        req = w.request(run, sus, a2, n)
    elif case == "no-run":
        store.delete_suspension(w.c, run.id)
        ghost = ids.new_id(ids.RUN)
        gsus = store.create_suspension(w.c, make_suspension(ghost, reason="agent_reply"))
        q2, a2 = w.question(ghost)
        req, error = attrs.evolve(w.request(run, gsus, a2, len(q2.receivers)), run_id=ghost), RunNotFound
    elif case == "run-elsewhere":
        far = W(store, "ws=w1")
        frun, fsus = far.pause()
        q2, a2 = w.question(frun.id)
        req, error = w.request(frun, fsus, a2, len(q2.receivers)), RunNotFound
        w.runs.append(frun.id)
    elif case == "running":
        r2 = store.create_run(w.c, make_run(state="running"))
        s2 = store.create_suspension(w.c, make_suspension(r2.id, reason="agent_reply"))
        q2, a2 = w.question(r2.id)
        req = w.request(r2, s2, a2, len(q2.receivers))
        w.runs.append(r2.id)
    elif case == "updated":
        store.update_run(w.c, attrs.evolve(run, output="still paused"))
    elif case == "revision-ahead":
        req = attrs.evolve(req, run_revision=run.revision + 1)
    elif case == "claimed-pause":
        # resumed and paused again on the same suspension: the pinned revision is stale
        store.claim_suspension(w.c, run.id)
        store.update_run(w.c, attrs.evolve(run, state="paused"))
    elif case == "no-suspension":
        store.delete_suspension(w.c, run.id)
        error = NotSuspended
    elif case == "other-suspension":
        store.delete_suspension(w.c, run.id)
        store.create_suspension(w.c, make_suspension(run.id, reason="agent_reply"))
    elif case == "approval":
        store.delete_suspension(w.c, run.id)
        s2 = store.create_suspension(w.c, make_suspension(run.id, reason="approval"))
        req = attrs.evolve(req, suspension_id=s2.id)
    elif case == "delivery-taken":
        taken = store.create_delivery(w.c, make_delivery(q.id))
        w.deliveries.append(taken.id)
        req, error = attrs.evolve(req, delivery_ids=req.delivery_ids[:-1] + (taken.id,)), AlreadyExists
    return w, req, error


@pytest.mark.clause("A2A-HELD-2", "A2A-HELD-3", "A2A-HELD-4", "A2A-HELD-5", "A2A-HELD-6", "A2A-HELD-7", "RUN-REV-2")
@pytest.mark.parametrize("case", REFUSALS)
def test_each_refusal_writes_nothing(store, case):
    w, req, error = _refused(store, case)
    before = w.view()
    expect_raises(REFUSED_BY[case], error, lambda: store.release_held_ask(w.c, req), f"a release when {case}")
    expect("A2A-HELD-7", w.view(), before, f"the store after the refused release ({case})")
    expect_raises("A2A-HELD-7", HeldAskNotFound, lambda: store.get_held_ask_release(w.c, req.reply_with),
                  f"the receipt after the refused release ({case})")


@pytest.mark.clause("A2A-HELD-1", "A2A-HELD-2", "A2A-HELD-9")
def test_outsiders_and_bad_requests_are_refused_first(store):
    w = W(store)
    run, sus, q, req = w.held()
    before = w.view()
    for outsider in OUTSIDERS:
        expect_raises("A2A-HELD-2", AskNotFound, lambda outsider=outsider: store.release_held_ask(outsider, req),
                      f"a release from {outsider.scope.canonical()} partition {outsider.partition!r}")
    dup = req.delivery_ids[0]
    bad = ["request", attrs.evolve(req, run_id=ids.new_id(ids.SUSPENSION)),
           attrs.evolve(req, suspension_id=run.id), attrs.evolve(req, run_revision=-1),
           attrs.evolve(req, run_revision=True), attrs.evolve(req, run_revision=1.0),
           attrs.evolve(req, reply_with=""), attrs.evolve(req, delivery_ids=()),
           attrs.evolve(req, delivery_ids="dlv"), attrs.evolve(req, delivery_ids=(dup, ids.new_id(ids.DELIVERY), dup)),
           attrs.evolve(req, delivery_ids=(ids.new_id(ids.MESSAGE),))]
    for b in bad:
        expect_raises("A2A-HELD-1", InvalidArgument, lambda b=b: store.release_held_ask(w.c, b),
                      f"a release with a bad request {b!r:.80}")
        expect_raises("A2A-HELD-1", InvalidArgument, lambda b=b: store.release_held_ask(ctx("ws=w9"), b),
                      "a bad request from a scope that sees nothing (checked first)")
        expect_raises("A2A-HELD-1", NoScope, lambda b=b: store.release_held_ask(Context.of(""), b), "the zero scope")
    expect("A2A-HELD-1", w.view(), before, "the store after the refused calls")
    store.release_held_ask(w.c, req)
    for outsider in OUTSIDERS:
        expect_raises("A2A-HELD-9", HeldAskNotFound,
                      lambda outsider=outsider: store.get_held_ask_release(outsider, req.reply_with),
                      f"get_held_ask_release from {outsider.scope.canonical()} {outsider.partition!r}")


@pytest.mark.clause("A2A-HELD-7", "A2A-HELD-4", "RUN-REV-2")
@pytest.mark.parametrize("kind", ["releases", "against-update", "against-claim"])
def test_concurrent_releases(store, profile, kind):
    """``releases``: identical releases at once: one fresh, every other the
    same receipt, the question queued once.  ``against-update`` /
    ``against-claim``: a release against a write of its run: the release
    lands whole or not at all, and the run's write always lands."""
    for rnd in range(profile.race_rounds):
        w = W(store)
        run, sus, q, req = w.held()
        n = profile.race_threads
        calls = [lambda: store.release_held_ask(w.c, req) for _ in range(n if kind == "releases" else 1)]
        if kind == "against-update":
            calls.append(lambda: store.update_run(w.c, attrs.evolve(run, output="moved")))
        elif kind == "against-claim":
            calls.append(lambda: store.claim_suspension(w.c, run.id))
        outcomes = race(calls)
        releases = outcomes[:len(calls) - (0 if kind == "releases" else 1)]
        fresh = [o.value for o in releases if o.ok and o.value.fresh]
        seen = [o.value if o.ok else type(o.error).__name__ for o in outcomes]
        queued = [d.id for d in store.list_queued_deliveries(Context.of("")) if d.id in req.delivery_ids]
        with clause("A2A-HELD-7", what=f"round {rnd}: {kind}: {seen}"):
            if kind == "releases":
                expect("A2A-HELD-7", len(fresh), 1, "len(fresh)" + ": " + shorten(seen))
                expect_true("A2A-HELD-7", all(o.ok and attrs.evolve(o.value, fresh=False) == attrs.evolve(
                    fresh[0], fresh=False) for o in releases), "all(o.ok and attrs.evolve(o.value, fresh=False) == attrs.evolve( fresh[0], fresh=False) for o in releases)" + ": " + shorten(seen))
            else:
                expect_true("A2A-HELD-7", outcomes[-1].ok, "outcomes[-1].ok" + ": " + shorten(seen))
                expect_that("A2A-HELD-7", fresh or isinstance(releases[0].error, HeldAskConflict),
                            "the release that lost to the claim: " + shorten(seen), Said("a HeldAskConflict"),
                            releases[0].error)
            expect("A2A-HELD-7", sorted(queued), sorted(req.delivery_ids) if fresh else [],
                   "sorted(queued)" + ": " + shorten(queued))
            expect("A2A-HELD-7", store.get_run(w.c, run.id).revision, run.revision + (0 if kind == "releases" else 1),
                   "store.get_run(w.c, run.id).revision")


# -- agent-reply runs (A2A-AREPLY) --------------------------------------------------------------


@pytest.mark.clause("A2A-AREPLY-1", "A2A-AREPLY-2", "A2A-AREPLY-3")
def test_agent_reply_runs_are_saved_pauses_and_resumed_askers(store):
    w = W(store)
    saved = [w.pause()[0] for _ in range(3)]
    approval, _ = w.pause(reason="approval")
    bare = store.create_run(w.c, make_run(state="paused"))
    resumed = []
    for _ in range(2):
        run, _ = w.pause()
        _, a = w.question(run.id)
        store.seal_ask_resolution(w.c, a, AskReply((), False))
        store.claim_suspension(w.c, run.id)
        store.delete_suspension(w.c, run.id)
        resumed.append(run)
    # running with its pause still there, resolved elsewhere, completed, unresolved
    still, _ = w.pause(state="running")
    _, a = w.question(still.id)
    store.seal_ask_resolution(w.c, a, AskReply((), False))
    done, _ = w.pause()
    _, a = w.question(done.id)
    store.seal_ask_resolution(w.c, a, AskReply((), False))
    store.claim_suspension(w.c, done.id)
    store.delete_suspension(w.c, done.id)
    store.update_run(w.c, attrs.evolve(done, state="completed"))
    unresolved = store.create_run(w.c, make_run(state="running"))
    other = W(store, Context.of(HOME, "orch-1"))
    elsewhere = store.create_run(w.c, make_run(state="running"))
    _, a = other.question(elsewhere.id)
    store.seal_ask_resolution(other.c, a, AskReply((), False))
    for where in ("ws=w1", "ws=w1/proj=p1/env=e1", "ws=w1/proj=p2"):
        W(store, where).pause()
    wanted = sorted(r.id for r in saved + resumed)
    expect_result("A2A-AREPLY-1", lambda: store.list_agent_reply_runs(w.c, None, 256), wanted,
                  "saved pauses and resumed askers at the exact scope, in id order")
    expect_result("A2A-AREPLY-2", lambda: store.list_agent_reply_runs(other.c, None, 256),
                  sorted([elsewhere.id] + [r.id for r in saved]),
                  "the same scope in partition orch-1: its own resolution, and the saved pauses")
    for size in (1, 2, 4, 5, 6):
        seen, after = [], None
        while True:
            page = store.list_agent_reply_runs(w.c, after, size)
            seen += page
            if len(page) < size:
                break
            after = page[-1]
        expect("A2A-AREPLY-2", seen, wanted, f"a walk with pages of {size}")
    expect_result("A2A-AREPLY-2", lambda: store.list_agent_reply_runs(w.c, wanted[2], 256), wanted[3:],
                  "strictly after an id")
    _ = (approval, bare, unresolved)
    for bad in ((None, 0), (None, 257), (None, "2"), (ids.new_id(ids.DELIVERY), 2), ("", 2)):
        expect_raises("A2A-AREPLY-2", InvalidArgument, lambda bad=bad: store.list_agent_reply_runs(w.c, *bad),
                      f"list_agent_reply_runs{bad}")


# -- the writers of a waiting ask (A2A-PAUSE) -------------------------------------------------------


def _writer(store: Any, w: W, name: str, run: Any, ask: Any, log: list) -> Any:
    def script() -> str:
        if name == "sweep":
            due = [x for x in store.list_expired_asks_across_scopes(Context.of(""), FAR_FUTURE)
                   if x.reply_with == ask.reply_with]
            if not due:
                return "nothing due"
            reply = AskReply((), False)
        elif name == "cancel":
            if ask.reply_with not in {x.reply_with for x in store.list_pending_asks_by_conversation(w.c, w.conv)}:
                return "nothing pending"
            reply = AskReply((AskReplyItem("failure", "bus", "cancelled", w.conv),), False)
        else:
            reply = AskReply((AskReplyItem("inform", "worker", "42", w.conv),), True)
        try:
            sealed = store.seal_ask_resolution(w.c, ask, reply)
        except AskAlreadyClaimed:
            return "lost"
        if not sealed.fresh:
            return "not fresh"
        store.claim_suspension(w.c, run.id)  # A2A-PAUSE-1: only after a fresh seal
        log.append(name)
        if name == "cancel":
            store.update_run(w.c, attrs.evolve(run, state=RunState.CANCELLED))
        store.delete_suspension(w.c, run.id)
        return "won"

    return script


@pytest.mark.clause("A2A-PAUSE-1", "A2A-PAUSE-2", "A2A-PAUSE-3", "A2A-RES-9")
@pytest.mark.parametrize("writers", [("reply", "sweep", "cancel"), ("reply", "reply"), ("sweep", "cancel")])
def test_the_writers_of_a_waiting_ask_resume_its_run_once(store, clock, profile, writers):
    for rnd in range(profile.race_rounds):
        w = W(store)
        run, sus = w.pause()
        _, a = w.question(run.id, deadline=clock.now())
        log: list[str] = []
        outcomes = race([_writer(store, w, n, run, a, log) for n in writers])
        if not all(o.ok for o in outcomes):
            raise ClauseViolation("A2A-PAUSE-2", f"round {rnd}: the writers {writers}", "no writer fails",
                                  [o.error for o in outcomes if not o.ok])
        results = [o.value for o in outcomes]
        won = [n for n, r in zip(writers, results) if r == "won"]
        with clause("A2A-PAUSE-2", what=f"round {rnd}: {dict(zip(writers, results))}"):
            expect("A2A-PAUSE-2", len(won), 1, "len(won)" + ": " + shorten((won, log)))
            expect("A2A-PAUSE-2", log, won, "log" + ": " + shorten((won, log)))
        winner = won[0]
        with clause("A2A-PAUSE-3", what=f"round {rnd}: the end state after {winner} won"):
            res = store.get_ask_resolution(w.c, a.reply_with)
            expect_true("A2A-PAUSE-3",
                        res.payload.startswith('{"replies":[]' if winner == "sweep" else '{"replies":[{'),
                        'res.payload.startswith(\'{"replies":[]\' if winner == "sweep" else \'{"replies":[{\')' + ": " + shorten(res.payload))
            final = store.get_run(w.c, run.id)
            expect("A2A-PAUSE-3", final.state, RunState.CANCELLED if winner == "cancel" else RunState.RUNNING,
                   "final.state" + ": " + shorten(final.state))
            with pytest.raises(NotSuspended):
                store.get_suspension(w.c, run.id)
            listed = run.id in store.list_agent_reply_runs(w.c, None, 256)
            expect("A2A-PAUSE-3", listed, winner != "cancel", "listed" + ": " + shorten(listed))
