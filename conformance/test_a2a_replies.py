"""Certifies class `a2a_replies` (a2a_replies.md): the reserved-reply commit
(the receipt and its request digest computed here, the reply envelope, the
hop charge, the finished delivery and the queued reply, failed and
successful runs), equal and changed retries, every refusal in its order
with nothing written (a lost claim, an unbound or foreign binding, a
finished or reclaimed delivery, a missing source, a closed or spent
conversation, taken ids), threaded commits of one request and of
deliveries competing for the last hop, and deferred-recipient discovery
(bound and delivering only, id order, cursors, bounds), each isolated from
other scopes and partitions.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import attrs
import pytest

from cortex_spec import Context, ids
from cortex_spec.a2a import Address, Delivery, DeliveryState, Envelope, Performative
from cortex_spec.a2a_replies import ReplyCommit, ReservedReply
from cortex_spec.errors import (
    AlreadyExists,
    ConversationClosed,
    DeliveryClaimLost,
    DeliveryNotFound,
    HopCeilingExceeded,
    InvalidArgument,
    MessageNotFound,
    NoScope,
    ReplyCommitConflict,
    ReplyCommitNotFound,
)
from cortex_spec.testing import (
    clause, ClauseViolation, ctx, expect, expect_is, expect_op, expect_raises, expect_result, expect_that,
    expect_true, race, Said, shorten, state_view,
)
from cortex_spec.a2a import make_conversation, make_delivery, make_envelope

from .a2a_world import HOME, OUTSIDERS, ConversationWorld, place, read_each, view_places
from .examples import Examples, Fixture, long_call, long_check

PLANNER, WORKER = Address("planner"), Address("worker")


class W(ConversationWorld):
    """A conversation at ``where``, a request on it, and deliveries of it."""

    def __init__(self, store: Any, where: str | Context = HOME, ceiling: int = 8) -> None:
        super().__init__(store, where, hop_ceiling=ceiling)
        self.source = store.record_message(self.c, make_envelope(self.conv, reply_with="rw-src",
                                                                 receivers=(WORKER, Address("critic"))))
        self.deliveries: list[str] = []

    def queued(self, receiver: Address = WORKER) -> Delivery:
        d = self.s.create_delivery(self.c, make_delivery(self.source.id, receiver=receiver))
        self.deliveries.append(d.id)
        return d

    def claimed(self, receiver: Address = WORKER) -> Delivery:
        return self.s.claim_delivery(self.c, self.queued(receiver).id)

    def bound(self, receiver: Address = WORKER) -> tuple[Delivery, str]:
        d = self.claimed(receiver)
        run = ids.new_id(ids.RUN)
        return self.s.bind_delivery_run(self.c, d.id, d.claim_token, run), run

    def view(self, *extra: str) -> dict:
        return _view(self.s, self.c, self.deliveries + list(extra), [self.conv])


def _commit(run: str, **fields: Any) -> ReplyCommit:
    fields.setdefault("reply_message_id", ids.new_id(ids.MESSAGE))
    fields.setdefault("reply_delivery_id", ids.new_id(ids.DELIVERY))
    fields.setdefault("content", "the summary")
    return ReplyCommit(run_id=run, **fields)


def _view(store: Any, c: Context, delivery_ids: list[str], conversation_ids: list[str]) -> dict:
    places = view_places(c)
    view = state_view(store, places, delivery_ids=delivery_ids, conversation_ids=conversation_ids, classes={"a2a"})
    for sc in places:
        view[f"deferred@{place(sc)}"] = store.list_deferred_recipients(sc, None, 256)
    return read_each(view, "receipt", places, delivery_ids, store.get_reserved_reply, ReplyCommitNotFound)


def _digest(c: Context, delivery_id: str, commit: ReplyCommit) -> str:
    text = json.dumps(["cortex.reserved-reply/1", c.scope.canonical(), c.partition, delivery_id, commit.run_id,
                       commit.reply_message_id, commit.reply_delivery_id, commit.content, commit.failed],
                      ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- EXAMPLES for the cross-class suites ------------------------------------------------------


def _seed(store: Any, fixture: Fixture) -> SimpleNamespace:
    w = W(store)
    done, done_run = w.bound()
    done_commit = _commit(done_run)
    store.commit_reserved_reply(w.c, done.id, done.claim_token, done_commit)
    bound, run = w.bound()
    return SimpleNamespace(rp_done=done, rp_bound=bound, rp_run=run,
                           view={"delivery_ids": [done.id, bound.id, done_commit.reply_delivery_id],
                                 "conversation_ids": [w.conv]})


def _long_scopes(store: Any, c: Context, up: Context) -> None:
    """SCOPE-CANON-6: every writing method at the long scope ``c``, the rows
    read back from ``c`` and from its parent ``up`` (test_long_scopes.py)."""
    w = W(store, c)
    delivery, run = long_call("a bound delivery", w.bound)
    long_check("list_deferred_recipients", len(store.list_deferred_recipients(c, None, 10)), 1)
    long_call("commit_reserved_reply",
              lambda: store.commit_reserved_reply(c, delivery.id, delivery.claim_token, _commit(run)))
    long_call("get_reserved_reply", lambda: store.get_reserved_reply(c, delivery.id))


EXAMPLES = Examples(
    "a2a_replies",
    long_scopes=_long_scopes,
    seed=_seed,
    good={
        "commit_reserved_reply": lambda s, c, w: s.commit_reserved_reply(c, w.rp_bound.id, w.rp_bound.claim_token,
                                                                         _commit(w.rp_run)),
        "get_reserved_reply": lambda s, c, w: s.get_reserved_reply(c, w.rp_done.id),
        "list_deferred_recipients": lambda s, c, w: s.list_deferred_recipients(c, None, 10),
    },
    bad={
        "commit_reserved_reply": lambda s, c, w: s.commit_reserved_reply(c, w.rp_bound.id, "", _commit(w.rp_run)),
        "get_reserved_reply": lambda s, c, w: s.get_reserved_reply(c, w.rp_run),
        "list_deferred_recipients": lambda s, c, w: s.list_deferred_recipients(c, None, 257),
    },
)


# -- the commit (A2A-REPLY-1..8) ---------------------------------------------------------------


@pytest.mark.clause("A2A-REPLY-2", "A2A-REPLY-5", "A2A-REPLY-7", "A2A-REPLY-8", "A2A-HOP-8", "A2A-DLV-11")
@pytest.mark.parametrize("failed", [False, True], ids=["succeeded", "failed"])
def test_a_commit_finishes_records_charges_queues_and_keeps_a_receipt(store, clock, failed):
    w = W(store)
    d, run = w.bound(Address("critic"))
    before_conv = store.get_conversation(w.c, w.conv)
    commit = _commit(run, content="résumé 😀\nline two", failed=failed)
    clock.advance(seconds=2)
    now = clock.now()
    got = store.commit_reserved_reply(w.c, d.id, d.claim_token, commit)
    want = ReservedReply(schema_version=1, scope=w.c.scope, orchestration_id="", delivery_id=d.id, run_id=run,
                         reply_message_id=commit.reply_message_id, reply_delivery_id=commit.reply_delivery_id,
                         request_digest=_digest(w.c, d.id, commit), committed_at=now, fresh=True)
    expect("A2A-REPLY-5", got, want, "the receipt of a fresh commit")
    expect_result("A2A-REPLY-8", lambda: store.get_reserved_reply(w.c, d.id), attrs.evolve(want, fresh=False),
                  "get_reserved_reply")
    reply = Envelope(id=commit.reply_message_id, conversation_id=w.conv,
                     performative=Performative.FAILURE if failed else Performative.INFORM,
                     sender=Address("critic"), receivers=(PLANNER,), content=commit.content,
                     in_reply_to="rw-src", origin_run_id=run, metadata={}, scope=w.c.scope,
                     hops=before_conv.hops_used + 1, created_at=now)
    expect_result("A2A-REPLY-5", lambda: store.get_message(w.c, commit.reply_message_id), reply, "the reply envelope")
    expect_result("A2A-HOP-8", lambda: store.get_conversation(w.c, w.conv),
                  attrs.evolve(before_conv, hops_used=before_conv.hops_used + 1, updated_at=now, participants=(
                      before_conv.participants + tuple(a for a in (Address("critic"), PLANNER)
                                                       if a not in before_conv.participants))),
                  "the conversation after the charge")
    state = DeliveryState.FAILED if failed else DeliveryState.DELIVERED
    expect_result("A2A-DLV-11", lambda: store.get_delivery(w.c, d.id),
                  attrs.evolve(d, state=state, error="", delivered_at=None if failed else now, updated_at=now),
                  "the finished delivery (token and run kept)")
    queued = Delivery(id=commit.reply_delivery_id, message_id=commit.reply_message_id, receiver=PLANNER,
                      scope=w.c.scope, created_at=now, updated_at=now)
    expect_result("A2A-REPLY-5", lambda: store.get_delivery(w.c, commit.reply_delivery_id), queued,
                  "the queued reply delivery")
    expect_result("A2A-REPLY-5", lambda: [x.id for x in store.list_queued_deliveries(Context.of(""))],
                  [commit.reply_delivery_id], "the queue")
    # A2A-REPLY-7: retries later, from the same claim, change nothing and return the receipt
    w.deliveries.append(commit.reply_delivery_id)
    before = w.view()
    for _ in range(3):
        clock.advance(seconds=1)
        expect_result("A2A-REPLY-7", lambda: store.commit_reserved_reply(w.c, d.id, d.claim_token, commit),
                      attrs.evolve(want, fresh=False), "an equal retry")
    expect("A2A-REPLY-7", w.view(), before, "the store after the retries: one hop, one reply delivery")


@pytest.mark.clause("A2A-REPLY-3", "A2A-REPLY-7")
@pytest.mark.parametrize("change", ["content", "failed", "run", "message-id", "delivery-id", "token"])
def test_a_changed_retry_is_refused(store, change):
    w = W(store)
    d, run = w.bound()
    commit = _commit(run)
    store.commit_reserved_reply(w.c, d.id, d.claim_token, commit)
    before = w.view(commit.reply_delivery_id)
    token = d.claim_token
    changed = {"content": attrs.evolve(commit, content=commit.content + "!"),
               "failed": attrs.evolve(commit, failed=True),
               "run": attrs.evolve(commit, run_id=ids.new_id(ids.RUN)),
               "message-id": attrs.evolve(commit, reply_message_id=ids.new_id(ids.MESSAGE)),
               "delivery-id": attrs.evolve(commit, reply_delivery_id=ids.new_id(ids.DELIVERY)),
               "token": commit}[change]
    if change == "token":
        token = "not-the-token"
    error = DeliveryClaimLost if change == "token" else ReplyCommitConflict
    expect_raises("A2A-REPLY-3", error, lambda: store.commit_reserved_reply(w.c, d.id, token, changed),
                  f"a retry with another {change}")
    expect("A2A-REPLY-3", w.view(commit.reply_delivery_id), before, "the store after the refused retry")


def _refusal(store: Any, case: str) -> tuple[W, Delivery, str, ReplyCommit, type]:
    w = W(store, ceiling=2)
    d, run = w.bound()
    commit = _commit(run)
    token = d.claim_token
    error: type = ReplyCommitConflict
    if case == "missing":
        d, error = attrs.evolve(d, id=ids.new_id(ids.DELIVERY)), DeliveryNotFound
    elif case == "queued":
        d, error = w.queued(), DeliveryClaimLost
        token = "never-issued"
    elif case == "unbound":
        d = w.claimed()
        token = d.claim_token
    elif case == "other-run":
        commit = _commit(ids.new_id(ids.RUN))
    elif case == "finished":
        store.finish_delivery(w.c, d.id, token, "delivered")
        error = DeliveryClaimLost
    elif case == "reclaimed":
        d = w.claimed()
        token = d.claim_token
        store.reclaim_stale_deliveries(Context.of(""), d.claimed_at + timedelta(milliseconds=1))
        store.claim_delivery(w.c, d.id)  # claimed again: the old token is dead
        commit, error = _commit(ids.new_id(ids.RUN)), DeliveryClaimLost
    elif case == "no-source":
        alone = store.create_delivery(w.c, make_delivery(ids.new_id(ids.MESSAGE)))
        claimed = store.claim_delivery(w.c, alone.id)
        d = store.bind_delivery_run(w.c, alone.id, claimed.claim_token, run)
        token, error = claimed.claim_token, MessageNotFound
        w.deliveries.append(d.id)
    elif case == "source-elsewhere":
        other = W(store, "ws=w1/proj=p2")
        alone = store.create_delivery(w.c, make_delivery(other.source.id))
        claimed = store.claim_delivery(w.c, alone.id)
        d = store.bind_delivery_run(w.c, alone.id, claimed.claim_token, run)
        token, error = claimed.claim_token, MessageNotFound
        w.deliveries.append(d.id)
    elif case == "closed":
        store.update_conversation(w.c, make_conversation(id=w.conv, status="closed", hop_ceiling=2))
        error = ConversationClosed
    elif case == "spent":
        store.record_message(w.c, make_envelope(w.conv))
        error = HopCeilingExceeded
    elif case == "message-taken":
        commit, error = attrs.evolve(commit, reply_message_id=w.source.id), AlreadyExists
    elif case == "delivery-taken":
        commit, error = attrs.evolve(commit, reply_delivery_id=w.deliveries[0]), AlreadyExists
        d, run = w.bound()
        commit, token = attrs.evolve(commit, run_id=run), d.claim_token
    return w, d, token, commit, error


@pytest.mark.clause("A2A-REPLY-3", "A2A-REPLY-4", "A2A-REPLY-6", "A2A-REPLY-9", "A2A-RCL-9")
@pytest.mark.parametrize("case", ["missing", "queued", "unbound", "other-run", "finished", "reclaimed", "no-source",
                                  "source-elsewhere", "closed", "spent", "message-taken", "delivery-taken"])
def test_each_refusal_writes_nothing(store, case):
    w, d, token, commit, error = _refusal(store, case)
    before = w.view(commit.reply_delivery_id)
    expect_raises("A2A-REPLY-4", error, lambda: store.commit_reserved_reply(w.c, d.id, token, commit),
                  f"a commit of a delivery that is {case}")
    expect("A2A-REPLY-6", w.view(commit.reply_delivery_id), before, f"the store after the refused commit ({case})")
    expect_raises("A2A-REPLY-6", ReplyCommitNotFound, lambda: store.get_reserved_reply(w.c, d.id),
                  f"the receipt after the refused commit ({case})")


@pytest.mark.clause("A2A-REPLY-1")
def test_outsiders_and_bad_arguments_are_refused_first(store):
    w = W(store)
    d, run = w.bound()
    commit = _commit(run)
    before = w.view()
    for outsider in OUTSIDERS:
        where = f"from {outsider.scope.canonical()} partition {outsider.partition!r}"
        expect_raises("A2A-REPLY-1", DeliveryNotFound,
                      lambda outsider=outsider: store.commit_reserved_reply(outsider, d.id, d.claim_token, commit),
                      f"a commit {where}")
    bad = [(ids.new_id(ids.MESSAGE), d.claim_token, commit), (d.id, "", commit), (d.id, 7, commit),
           (d.id, d.claim_token, "commit"), (d.id, d.claim_token, attrs.evolve(commit, run_id=ids.new_id(ids.MESSAGE))),
           (d.id, d.claim_token, attrs.evolve(commit, reply_message_id=ids.new_id(ids.DELIVERY))),
           (d.id, d.claim_token, attrs.evolve(commit, reply_delivery_id="dlv_bad")),
           (d.id, d.claim_token, attrs.evolve(commit, content="a\x00")),
           (d.id, d.claim_token, attrs.evolve(commit, content=None)),
           (d.id, d.claim_token, attrs.evolve(commit, failed=0))]
    for args in bad:
        expect_raises("A2A-REPLY-1", InvalidArgument, lambda args=args: store.commit_reserved_reply(w.c, *args),
                      f"commit_reserved_reply{args[1:2]} with a bad argument")
        expect_raises("A2A-REPLY-1", InvalidArgument,
                      lambda args=args: store.commit_reserved_reply(ctx("ws=w9"), *args),
                      "a bad argument from a scope that sees nothing (checked first)")
        expect_raises("A2A-REPLY-1", NoScope, lambda args=args: store.commit_reserved_reply(Context.of(""), *args),
                      "the zero scope")
    expect("A2A-REPLY-1", w.view(), before, "the store after the refused calls")
    store.commit_reserved_reply(w.c, d.id, d.claim_token, commit)
    for outsider in OUTSIDERS:
        expect_raises("A2A-REPLY-8", ReplyCommitNotFound,
                      lambda outsider=outsider: store.get_reserved_reply(outsider, d.id),
                      f"get_reserved_reply from {outsider.scope.canonical()} {outsider.partition!r}")
    for bad_id in (ids.new_id(ids.RUN), None, ""):
        expect_raises("A2A-REPLY-1", InvalidArgument, lambda bad_id=bad_id: store.get_reserved_reply(w.c, bad_id),
                      f"get_reserved_reply({bad_id!r})")


@pytest.mark.clause("A2A-REPLY-6", "A2A-REPLY-7", "A2A-HOP-10")
@pytest.mark.parametrize("kind", ["one-request", "last-hop"])
def test_concurrent_commits(store, profile, kind):
    """``one-request``: a worker and its retries commit one request at once:
    one fresh receipt, every other the same receipt, one hop, one reply.
    ``last-hop``: commits of different deliveries on a conversation with
    one hop left: exactly one lands, the rest get HopCeilingExceeded."""
    for rnd in range(profile.race_rounds):
        n = profile.race_threads
        w = W(store, ceiling=2 if kind == "last-hop" else 64)
        if kind == "one-request":
            d, run = w.bound()
            commit = _commit(run)
            calls = [lambda: store.commit_reserved_reply(w.c, d.id, d.claim_token, commit) for _ in range(n)]
        else:
            bound = [w.bound() for _ in range(n)]
            calls = [lambda d=d, run=run: store.commit_reserved_reply(w.c, d.id, d.claim_token, _commit(run))
                     for d, run in bound]
        outcomes = race(calls)
        fresh = [o.value for o in outcomes if o.ok and o.value.fresh]
        seen = [o.value if o.ok else type(o.error).__name__ for o in outcomes]
        if len(fresh) != 1:
            raise ClauseViolation("A2A-REPLY-6", f"round {rnd}: {n} concurrent commits ({kind})", "one fresh commit",
                                  seen)
        with clause("A2A-REPLY-7", "A2A-HOP-10", what=f"round {rnd}: the losers and the charge ({kind})"):
            for o in outcomes:
                if kind == "one-request":
                    expect_is(("A2A-REPLY-7", "A2A-HOP-10"), o.error, None, "o.ok" + ": " + shorten(seen))
                    expect(("A2A-REPLY-7", "A2A-HOP-10"), attrs.evolve(o.value, fresh=False),
                           attrs.evolve(fresh[0], fresh=False),
                           "attrs.evolve(o.value, fresh=False)" + ": " + shorten(seen))
                elif not (o.ok and o.value.fresh):
                    expect_that(("A2A-REPLY-7", "A2A-HOP-10"), isinstance(o.error, HopCeilingExceeded),
                                "o.error" + ": " + shorten(seen), Said("an instance of HopCeilingExceeded"), o.error)
            expect(("A2A-REPLY-7", "A2A-HOP-10"), store.get_conversation(w.c, w.conv).hops_used, 2, "hops_used")
            expect(("A2A-REPLY-7", "A2A-HOP-10"), len(store.list_messages(w.c, conversation_id=w.conv)), 2, "envelopes")
            expect(("A2A-REPLY-7", "A2A-HOP-10"), [x.id for x in store.list_queued_deliveries(Context.of(""))
                    if x.id == fresh[0].reply_delivery_id], [fresh[0].reply_delivery_id], "the reply queued once")


# -- deferred recipients (A2A-DEFER) -----------------------------------------------------------


@pytest.mark.clause("A2A-DEFER-1", "A2A-DEFER-2", "A2A-DEFER-3", "A2A-DEFER-4", "A2A-RCL-3")
def test_deferred_recipients_are_the_bound_deliveries_still_owed(store, clock):
    w = W(store)
    bound = [w.bound()[0] for _ in range(6)]
    queued, unbound = w.queued(), w.claimed()
    finished = w.bound()[0]
    store.finish_delivery(w.c, finished.id, finished.claim_token, "failed", "boom")
    committed, run = w.bound()
    store.commit_reserved_reply(w.c, committed.id, committed.claim_token, _commit(run))
    for where in ("ws=w1", "ws=w1/proj=p1/env=e1", "ws=w1/proj=p2", Context.of(HOME, "orch-1")):
        W(store, where).bound()  # bound rows elsewhere: never listed here
    wanted = sorted(d.id for d in bound)
    before = w.view()
    expect_result("A2A-DEFER-1", lambda: store.list_deferred_recipients(w.c, None, 256), wanted,
                  "every bound, delivering delivery at the exact scope and partition, in id order")
    for size in (1, 2, 5, 6, 7):
        seen, after = [], None
        while True:
            page = store.list_deferred_recipients(w.c, after, size)
            with clause("A2A-DEFER-2", what=f"a page of {size} after {after}"):
                expect_op("A2A-DEFER-2", len(page), "<=", size, "len(page)" + ": " + shorten(page))
                expect_true("A2A-DEFER-2", all(after is None or i > after for i in page),
                            "all(after is None or i > after for i in page)" + ": " + shorten(page))
            seen += page
            if len(page) < size:
                break
            after = page[-1]
        expect("A2A-DEFER-2", seen, wanted, f"a walk with pages of {size}")
    between = ids.new_id(ids.DELIVERY)  # an id no delivery has
    expect_result("A2A-DEFER-2", lambda: store.list_deferred_recipients(w.c, between, 256),
                  [i for i in wanted if i > between], "after an id no delivery has")
    expect("A2A-DEFER-3", w.view(), before, "the store after the reads")
    # the stale reclaim cannot take a bound row; the unbound one leaves through it and is never listed
    clock.advance(days=1)
    store.reclaim_stale_deliveries(Context.of(""), clock.now())
    expect_result("A2A-DEFER-4", lambda: store.list_deferred_recipients(w.c, None, 256), wanted,
                  "after a stale reclaim")
    store.finish_delivery(w.c, bound[0].id, bound[0].claim_token, "delivered")
    expect_result("A2A-DEFER-4", lambda: store.list_deferred_recipients(w.c, None, 256),
                  sorted(d.id for d in bound[1:]), "after one of them was finished")
    _ = (queued, unbound)


@pytest.mark.clause("A2A-DEFER-2", "A2A-REPLY-1")
@pytest.mark.parametrize("after, limit", [
    (None, 0), (None, 257), (None, -1), (None, True), (None, "3"), (None, None),
    ("msg_01m8s3m6jde0n9x5jnjvqv2mtp", 3), ("dlv_bad", 3), (3, 3), ("", 3),
])
def test_bad_discovery_arguments_are_invalid(store, after, limit):
    w = W(store)
    w.bound()
    expect_raises("A2A-DEFER-2", InvalidArgument, lambda: store.list_deferred_recipients(w.c, after, limit),
                  f"list_deferred_recipients({after!r}, {limit!r})")
    expect_raises("A2A-REPLY-1", NoScope, lambda: store.list_deferred_recipients(Context.of(""), after, limit),
                  "the zero scope comes first")
