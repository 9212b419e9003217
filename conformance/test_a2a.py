"""Certifies class `a2a` (a2a.md): the library functions (addresses, the 22
performatives and their routing classes, envelope validation), and, against
the store under test, envelopes and atomic hop admission, conversations and
their peer pairing, deliveries with claim-token fencing, single-use run
binding and stale reclaim, the inbox and read marks, pending asks and their
sweep lists — each with scope and partition isolation, bad input refused
with nothing written, total list orders, and threaded races with several
contenders for every claim and admission (the A2A-RACE clauses are also
exercised by the concurrent machine).  At the end: the examples this module
gives the scope and common suites (``EXAMPLES``).
"""

from __future__ import annotations

import functools
import inspect
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, Callable

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cortex_spec import Context, Scope, ids
from cortex_spec.a2a import (
    A2AStore,
    Address,
    Conversation,
    ConversationStatus,
    Delivery,
    DeliveryState,
    Envelope,
    PendingAsk,
    Performative,
    RoutingClass,
    answers_ask,
    format_address,
    parse_address,
    performative_class,
    validate_envelope,
)
from cortex_spec.clock import EPOCH
from cortex_spec.errors import (
    AlreadyExists,
    AskAlreadyClaimed,
    AskNotFound,
    ConversationClosed,
    ConversationNotFound,
    DeliveryAlreadyBound,
    DeliveryAlreadyClaimed,
    DeliveryClaimLost,
    DeliveryNotFound,
    HopCeilingExceeded,
    InvalidArgument,
    InvalidPerformative,
    InvalidState,
    MessageNotFound,
    NoReceivers,
    NoScope,
    NoSender,
    SelfAddressed,
)
from cortex_spec.profiles import library_settings
from cortex_spec.testing import (
    FAR_FUTURE, ZERO, clause, ctx, expect, expect_false, expect_is, expect_op, expect_raises,
    expect_strict, expect_that, expect_true, race, Said, shorten, state_view,
)
from cortex_spec.a2a import make_ask, make_conversation, make_delivery, make_envelope
from cortex_spec.validation import MAX_ENTITY_BYTES, entity_size

from .examples import (
    FAR,
    PAST,
    XS_NOW,
    XS_SCOPES,
    ByIdOp,
    Examples,
    Keyed,
    Kind,
    Site,
    XsMethod,
    long_call,
    long_check,
    long_ids,
    long_scope_of,
)
from .helpers import assert_scope

UTC = timezone.utc
MS = timedelta(milliseconds=1)
HOME = "ws=w1/proj=p1"
A2A = pytest.mark.cortex_classes("a2a")

pytestmark = A2A  # (every clause here is of class a2a anyway)

S = Scope.parse


def _raise(fn: Callable[[], Any], exc: type[BaseException]) -> BaseException:
    with pytest.raises(exc) as info:
        fn()
    return info.value


# -- building blocks -----------------------------------------------------------------------


class World:
    """A store plus handy creators, all at one context by default."""

    def __init__(self, store: Any, clock: Any, where: str | Context = HOME) -> None:
        self.s = store
        self.clock = clock
        self.c = where if isinstance(where, Context) else ctx(where)
        self.deliveries: list[str] = []
        self.asks: list[str] = []
        self.conversations: list[str] = []

    def at(self, where: str | Context) -> "World":
        w = World(self.s, self.clock, where)
        w.deliveries, w.asks, w.conversations = self.deliveries, self.asks, self.conversations
        return w

    def conv(self, **fields: Any) -> Conversation:
        c = self.s.create_conversation(self.c, make_conversation(**fields))
        self.conversations.append(c.id)
        return c

    def send(self, conversation_id: str, **fields: Any) -> Envelope:
        return self.s.record_message(self.c, make_envelope(conversation_id, **fields))

    def queued(self, **fields: Any) -> Delivery:
        d = self.s.create_delivery(self.c, make_delivery(**fields))
        self.deliveries.append(d.id)
        return d

    def claimed(self, **fields: Any) -> Delivery:
        return self.s.claim_delivery(self.c, self.queued(**fields).id)

    def delivered(self, **fields: Any) -> Delivery:
        d = self.claimed(**fields)
        return self.s.finish_delivery(self.c, d.id, d.claim_token, DeliveryState.DELIVERED)

    def ask(self, **fields: Any) -> PendingAsk:
        a = self.s.create_pending_ask(self.c, make_ask(**fields))
        self.asks.append(a.reply_with)
        return a

    def view(self, *scopes: str | Context) -> dict:
        contexts = [s if isinstance(s, Context) else ctx(s) for s in (scopes or (self.c,))]
        return state_view(self.s, contexts, delivery_ids=self.deliveries, reply_withs=self.asks,
                          conversation_ids=self.conversations, classes={"a2a"})


# the fixture ``w`` (a World on the test's store and clock) is the plugin's


VIEW = [HOME, "ws=w1", "ws=w1/proj=p2", ctx(HOME, "orch-1")]


def unchanged(w: World, before: dict, *scopes: Any) -> None:
    after = w.view(*(scopes or VIEW))
    expect("A2A-GEN-11", after, before, "the store after a refused call")


# ===========================================================================================
# Library: addresses, performatives, envelope validation (no store)
# ===========================================================================================

@pytest.mark.clause("A2A-ADDR-1")
def test_address_equality_is_exact_on_agent_and_node():
    expect("A2A-ADDR-1", Address("worker"), Address("worker", ""), 'Address("worker")')
    expect("A2A-ADDR-1", Address("worker", "peer"), Address("worker", "peer"), 'Address("worker", "peer")')
    for other in [Address("Worker"), Address("worker", "peer"), Address("worker "), Address("worke"),
                  Address("", "worker")]:
        expect_op("A2A-ADDR-1", Address("worker"), "!=", other, 'Address("worker")')
    expect_op("A2A-ADDR-1", Address("worker", "peer"), "!=", Address("worker", "PEER"), 'Address("worker", "peer")')
    expect_op("A2A-ADDR-1", Address("worker", "peer"), "!=", Address("worker", "pee"), 'Address("worker", "peer")')
    expect_op("A2A-ADDR-1", Address("worker", "peer"), "!=", Address("worker"), 'Address("worker", "peer")')
    expect_op("A2A-ADDR-1", Address("w\u00e9"), "!=", Address("we\u0301"), 'Address("w\\u00e9")')
    expect("A2A-ADDR-1", len({Address("a"), Address("a", ""), Address("a", "n")}), 2,
           'len({Address("a"), Address("a", ""), Address("a", "n")})')


@pytest.mark.clause("A2A-ADDR-2")
@pytest.mark.parametrize("address, text", [
    (Address("worker"), "worker"),
    (Address("worker", "peer.example"), "worker@peer.example"),
    (Address("a@b", "node"), "a@b@node"),
    (Address("", "node"), "@node"),
    (Address("agent with spaces"), "agent with spaces"),
])
def test_format_address(address, text):
    expect("A2A-ADDR-2", format_address(address), text, "format_address(address)")


@pytest.mark.clause("A2A-ADDR-3")
@pytest.mark.parametrize("text, address", [
    ("worker", Address("worker")),
    ("worker@peer.example", Address("worker", "peer.example")),
    ("a@b@node", Address("a@b", "node")),
    ("x@@node", Address("x@", "node")),
    ("Worker@Peer", Address("Worker", "Peer")),
    (" w @ n ", Address(" w ", " n ")),
])
def test_parse_address_splits_at_the_last_at(text, address):
    got = parse_address(text)
    expect("A2A-ADDR-3", got, address, "got")
    expect_is("A2A-ADDR-3", type(got.agent), str, "type(got.agent)")
    expect_is("A2A-ADDR-3", type(got.node), str, "type(got.node)")


@pytest.mark.clause("A2A-ADDR-4")
@pytest.mark.parametrize("text", ["", "@", "worker@", "@node", "a@b@", "@@", None, 5, b"worker",
                                  Address("worker"), "w\x00", "w\ud800", "w" * 256])
def test_parse_address_refuses_empty_parts_and_bad_text(text):
    with pytest.raises(InvalidArgument):
        parse_address(text)


@pytest.mark.clause("A2A-ADDR-5")
@pytest.mark.parametrize("address", [Address("a@b"), Address("a", "n@m"), Address("a@b", "n@m"),
                                     Address("@", "")])
def test_format_refuses_an_address_that_is_not_well_formed(address):
    with pytest.raises(InvalidArgument):
        format_address(address)
    with pytest.raises(InvalidArgument):
        format_address("worker")


@st.composite
def _addresses(draw):
    text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12)
    node = draw(st.one_of(st.just(""), text.filter(lambda s: "@" not in s)))
    agent = draw(text if node else text.filter(lambda s: "@" not in s))
    return Address(agent, node)


@pytest.mark.clause("A2A-ADDR-6", "A2A-ADDR-2", "A2A-ADDR-3")
@library_settings()  # the address codec, no store: the profile's library-level budget
@given(_addresses())
def test_parse_inverts_format(address):
    expect("A2A-ADDR-6", parse_address(format_address(address)), address, "parse_address(format_address(address))")


ALL_22 = [
    "accept-proposal", "agree", "cancel", "cfp", "confirm", "disconfirm", "failure", "inform",
    "inform-if", "inform-ref", "not-understood", "propagate", "propose", "proxy", "query-if",
    "query-ref", "refuse", "reject-proposal", "request", "request-when", "request-whenever", "subscribe",
]
DIRECTIVE = {"request", "request-when", "request-whenever", "query-if", "query-ref", "cfp", "propose",
             "accept-proposal"}
INFORMATIVE = {"inform", "inform-if", "inform-ref", "confirm", "disconfirm", "agree", "refuse", "failure",
               "not-understood", "reject-proposal", "subscribe", "proxy", "propagate"}
ANSWERS = {"inform", "inform-if", "inform-ref", "confirm", "disconfirm", "refuse", "failure",
           "not-understood", "reject-proposal", "propose"}


@pytest.mark.clause("A2A-PERF-1")
def test_exactly_22_lowercase_performatives():
    expect("A2A-PERF-1", sorted(p.value for p in Performative), sorted(ALL_22), "sorted(p.value for p in Performative)")
    expect("A2A-PERF-1", len(set(ALL_22)), 22, "len(set(ALL_22))")
    for name in ALL_22:
        performative_class(name)
        performative_class(Performative(name))
        for variant in (name.upper(), name.capitalize(), f" {name}", f"{name} ", name.replace("-", "_")):
            if variant != name:
                with pytest.raises(InvalidPerformative):
                    performative_class(variant)


@pytest.mark.clause("A2A-PERF-2", "A2A-PERF-3", "A2A-PERF-4")
@pytest.mark.parametrize("name", ALL_22)
def test_routing_class_of_each_performative(name):
    expected = (RoutingClass.DIRECTIVE if name in DIRECTIVE else
                RoutingClass.INFORMATIVE if name in INFORMATIVE else RoutingClass.CONTROL)
    rule = {RoutingClass.DIRECTIVE: "A2A-PERF-2", RoutingClass.INFORMATIVE: "A2A-PERF-3",
            RoutingClass.CONTROL: "A2A-PERF-4"}[expected]
    expect(rule, performative_class(name), expected, f"performative_class({name!r})")
    expect(rule, performative_class(Performative(name)), expected, f"performative_class(Performative({name!r}))")
    if expected == RoutingClass.CONTROL:
        expect("A2A-PERF-4", name, "cancel", "name")


@pytest.mark.clause("A2A-PERF-2", "A2A-PERF-3", "A2A-PERF-4")
def test_routing_classes_partition_the_performatives():
    expect("A2A-PERF-2", DIRECTIVE | INFORMATIVE | {"cancel"}, set(ALL_22), 'DIRECTIVE | INFORMATIVE | {"cancel"}')
    expect_false("A2A-PERF-2", DIRECTIVE & INFORMATIVE, "DIRECTIVE & INFORMATIVE")
    expect("A2A-PERF-2", len(DIRECTIVE), 8, "len(DIRECTIVE)")
    expect("A2A-PERF-3", len(INFORMATIVE), 13, "len(INFORMATIVE)")


@pytest.mark.clause("A2A-PERF-5")
@pytest.mark.parametrize("bad", ["", "inform_if", "INFORM", "Inform", "tell", "ask", "inform ", None, 3,
                                 b"inform", RoutingClass.CONTROL, ["inform"]])
def test_performative_class_refuses_anything_else(bad):
    err = _raise(lambda: performative_class(bad), InvalidPerformative)
    expect_that("A2A-PERF-5", isinstance(err, InvalidArgument), "err", Said("an instance of InvalidArgument"), err)
    with pytest.raises(InvalidPerformative):
        answers_ask(bad)


@pytest.mark.clause("A2A-PERF-6")
@pytest.mark.parametrize("name", ALL_22)
def test_answers_ask(name):
    expect_is("A2A-PERF-6", answers_ask(name), name in ANSWERS, "answers_ask(name)")
    expect_is("A2A-PERF-6", answers_ask(Performative(name)), name in ANSWERS, "answers_ask(Performative(name))")
    if name == "agree":
        expect_is("A2A-PERF-6", answers_ask(name), False, "answers_ask(name)")


def _env(**fields: Any) -> Envelope:
    fields.setdefault("sender", Address("planner"))
    fields.setdefault("receivers", (Address("worker"),))
    return Envelope(id=ids.new_id(ids.MESSAGE), conversation_id=ids.new_id(ids.CONVERSATION), **fields)


@pytest.mark.clause("A2A-ENV-1")
@pytest.mark.parametrize("fields, error", [
    (dict(performative="bogus", sender=Address(""), receivers=()), InvalidPerformative),
    (dict(performative="Inform", sender=Address("a"), receivers=(Address("a"),)), InvalidPerformative),
    (dict(sender=Address(""), receivers=()), NoSender),
    (dict(sender=Address("", "node"), receivers=(Address("w"),)), NoSender),
    (dict(sender=Address(""), receivers=(Address(""),)), NoSender),
    (dict(receivers=()), NoReceivers),
    (dict(receivers=[]), NoReceivers),
    (dict(receivers=(Address("w"), Address(""))), NoReceivers),
    (dict(receivers=(Address("planner"), Address("", "n"))), NoReceivers),
    (dict(receivers=(Address("w"), Address("planner"))), SelfAddressed),
    (dict(sender=Address("p", "n"), receivers=(Address("p", "n"),)), SelfAddressed),
])
def test_validate_envelope_checks_in_order(fields, error):
    err = _raise(lambda: validate_envelope(_env(**fields)), error)
    expect_that("A2A-ENV-1", isinstance(err, InvalidArgument), "err", Said("an instance of InvalidArgument"), err)
    for other in (InvalidPerformative, NoSender, NoReceivers, SelfAddressed):
        if other is not error:
            expect_false("A2A-ENV-1", isinstance(err, other), "isinstance(err, other)")


@pytest.mark.clause("A2A-ENV-1")
def test_validate_envelope_accepts_a_valid_envelope():
    for p in ALL_22:
        validate_envelope(_env(performative=p))
    # same agent, another node: not the sender
    validate_envelope(_env(sender=Address("worker"), receivers=(Address("worker", "peer"),)))
    validate_envelope(_env(receivers=[Address("w"), Address("w")]))


# ===========================================================================================
# General rules (A2A-GEN) and partitions (A2A-PART)
# ===========================================================================================


def _seed(w: World) -> dict:
    """One row of each kind at HOME, plus an in-flight and a delivered delivery."""
    conv = w.conv()
    msg = w.send(conv.id)
    q = w.queued(message_id=msg.id)
    cl = w.claimed(message_id=msg.id)
    dl = w.delivered(message_id=msg.id)
    ask = w.ask(conversation_id=conv.id, message_id=msg.id, deadline=EPOCH - timedelta(hours=1))
    return dict(conv=conv, msg=msg, queued=q, claimed=cl, delivered=dl, ask=ask)


def _every_call(w: World, r: dict) -> dict[str, Callable[[Context], Any]]:
    """A call of every a2a method with valid arguments addressing the seeded rows."""
    s = w.s
    return {
        "record_message": lambda c: s.record_message(c, make_envelope(r["conv"].id)),
        "get_message": lambda c: s.get_message(c, r["msg"].id),
        "list_messages": lambda c: s.list_messages(c),
        "create_conversation": lambda c: s.create_conversation(c, make_conversation()),
        "get_conversation": lambda c: s.get_conversation(c, r["conv"].id),
        "get_conversation_by_peer_context": lambda c: s.get_conversation_by_peer_context(c, "n", "x"),
        "update_conversation": lambda c: s.update_conversation(c, attrs.evolve(r["conv"], protocol="p2")),
        "list_conversations": lambda c: s.list_conversations(c),
        "create_delivery": lambda c: s.create_delivery(c, make_delivery()),
        "get_delivery": lambda c: s.get_delivery(c, r["queued"].id),
        "claim_delivery": lambda c: s.claim_delivery(c, r["queued"].id),
        "bind_delivery_run": lambda c: s.bind_delivery_run(c, r["claimed"].id, r["claimed"].claim_token,
                                                           ids.new_id(ids.RUN)),
        "finish_delivery": lambda c: s.finish_delivery(c, r["claimed"].id, r["claimed"].claim_token,
                                                       "failed", "boom"),
        "list_inbox": lambda c: s.list_inbox(c, "worker"),
        "mark_delivery_read": lambda c: s.mark_delivery_read(c, r["delivered"].id),
        "list_queued_deliveries": lambda c: s.list_queued_deliveries(c),
        "reclaim_stale_deliveries": lambda c: s.reclaim_stale_deliveries(c, FAR_FUTURE),
        "create_pending_ask": lambda c: s.create_pending_ask(c, make_ask()),
        "get_pending_ask": lambda c: s.get_pending_ask(c, r["ask"].reply_with),
        "claim_pending_ask": lambda c: s.claim_pending_ask(c, r["ask"].reply_with),
        "list_expired_asks": lambda c: s.list_expired_asks(c, FAR_FUTURE),
        "list_expired_asks_across_scopes": lambda c: s.list_expired_asks_across_scopes(c, FAR_FUTURE),
        "list_pending_asks_by_conversation": lambda c: s.list_pending_asks_by_conversation(c, r["conv"].id),
    }


XS = {"list_queued_deliveries", "reclaim_stale_deliveries", "list_expired_asks_across_scopes"}


@pytest.mark.clause("A2A-GEN-1", "A2A-GEN-11")
def test_every_scoped_method_refuses_the_zero_scope(w):
    r = _seed(w)
    calls = _every_call(w, r)
    methods = {n for n, _ in inspect.getmembers(A2AStore, inspect.isfunction) if not n.startswith("_")}
    if set(calls) != methods:  # the test's own table, not the store's rule
        raise TypeError(f"_every_call misses or adds methods: {sorted(set(calls) ^ methods)}")
    before = w.view(*VIEW)
    for name, call in calls.items():
        if name in XS:
            continue
        for zero in (ZERO, Context(Scope(), "orch-1", "alice")):
            _raise(lambda: call(zero), NoScope)
    unchanged(w, before)


@pytest.mark.clause("A2A-GEN-1")
def test_zero_scope_is_refused_before_storage_is_touched(store, w):
    r = _seed(w)
    calls = _every_call(w, r)
    store.close()
    for name, call in calls.items():
        if name not in XS:
            _raise(lambda: call(ZERO), NoScope)


@pytest.mark.clause("A2A-GEN-2", "A2A-QUEUE-1", "A2A-ASK-12", "A2A-RCL-1")
def test_scope_ignoring_methods_take_any_scope_and_return_rows_with_their_own(w):
    scopes = ["ws=w1", HOME, "ws=w10", "org=w1", "a=1/b=2/c=3"]
    queued, stale, asks = {}, {}, {}
    for sc in scopes:
        here = w.at(sc)
        queued[here.queued().id] = S(sc)
        stale[here.claimed().id] = S(sc)
        asks[here.ask(deadline=EPOCH).reply_with] = S(sc)
    callers = [ZERO, Context(Scope(), "", "sweeper"), ctx("unrelated=zz"), ctx("ws=w1"), ctx("a=1/b=2/c=3")]
    first_q = w.s.list_queued_deliveries(ZERO)
    first_a = w.s.list_expired_asks_across_scopes(ZERO, EPOCH)
    expect("A2A-QUEUE-1", {d.id: d.scope for d in first_q}, queued, "the queued deliveries of every scope")
    expect("A2A-ASK-12", {a.reply_with: a.scope for a in first_a}, asks,
           "the asks due at the instant, listed as expired across scopes at it")
    for c in callers:
        expect_strict("A2A-GEN-2", w.s.list_queued_deliveries(c), first_q, f"queue from {c.scope!r}")
        expect_strict("A2A-GEN-2", w.s.list_expired_asks_across_scopes(c, EPOCH), first_a,
                      "w.s.list_expired_asks_across_scopes(c, EPOCH)")
    expect("A2A-RCL-1", w.s.reclaim_stale_deliveries(ctx("unrelated=zz"), EPOCH + MS), len(stale),
           'w.s.reclaim_stale_deliveries(ctx("unrelated=zz"), EPOCH + MS)')
    expect("A2A-QUEUE-1", {d.id for d in w.s.list_queued_deliveries(ZERO)}, set(queued) | set(stale),
           "{d.id for d in w.s.list_queued_deliveries(ZERO)}")
    for did, sc in stale.items():
        got = w.s.get_delivery(Context(sc), did)
        expect("A2A-RCL-1", got.state, DeliveryState.QUEUED, "got.state")
        expect("A2A-GEN-2", got.scope, sc, "got.scope")


@pytest.mark.clause("A2A-GEN-3", "A2A-PART-3", "A2A-PART-4", "A2A-ENV-5", "A2A-CONV-10")
def test_lists_show_exactly_the_visible_rows(w):
    rows = ["ws=w1", HOME, "ws=w1/proj=p1/env=e1", "ws=w1/proj=p2", "ws=w10", "ws=w1x", "org=w1"]
    partitions = ["", "orch-1", "orch-10", "Orch-1"]
    made: dict[str, tuple[Scope, str]] = {}
    msgs: dict[str, tuple[Scope, str]] = {}
    for sc in rows:
        for p in partitions:
            here = w.at(ctx(sc, p))
            conv = here.conv()
            made[conv.id] = (S(sc), p)
            msgs[here.send(conv.id).id] = (S(sc), p)
    for caller in ["ws=w1", HOME, "ws=w1/proj=p1/env=e1", "ws=w10", "ws=w2", "org=w1"]:
        for p in partitions:
            c = ctx(caller, p)
            vis = {k for k, (sc, pp) in made.items() if pp == p and c.scope.covers(sc)}
            exact = {k for k, (sc, pp) in made.items() if pp == p and sc == c.scope}
            expect("A2A-CONV-10", {x.id for x in w.s.list_conversations(c)}, vis,
                   "{x.id for x in w.s.list_conversations(c)}" + ": " + shorten((caller, p)))
            expect("A2A-CONV-10", {x.id for x in w.s.list_conversations(c, exact=True)}, exact,
                   "{x.id for x in w.s.list_conversations(c, exact=True)}")
            vis_m = {k for k, (sc, pp) in msgs.items() if pp == p and c.scope.covers(sc)}
            exact_m = {k for k, (sc, pp) in msgs.items() if pp == p and sc == c.scope}
            expect("A2A-ENV-5", {x.id for x in w.s.list_messages(c)}, vis_m, "{x.id for x in w.s.list_messages(c)}")
            expect("A2A-ENV-5", {x.id for x in w.s.list_messages(c, exact=True)}, exact_m,
                   "{x.id for x in w.s.list_messages(c, exact=True)}")
            for k, (sc, pp) in msgs.items():
                if k in vis_m:
                    expect("A2A-GEN-3", w.s.get_message(c, k).id, k, "w.s.get_message(c, k).id")
                else:
                    _raise(lambda: w.s.get_message(c, k), MessageNotFound)


def _invisible_callers() -> list[Context]:
    return [ctx("ws=w1/proj=p1/env=e1"), ctx("ws=w1/proj=p2"), ctx("ws=w10/proj=p1"), ctx("org=w1/proj=p1"),
            ctx(HOME, "orch-1"), ctx("ws=w1", "orch-1"), ctx(HOME, " ")]


def _by_key_calls(w: World, r: dict) -> dict[str, tuple[Callable[[Context, bool], Any], type]]:
    """By-key methods: (call(ctx, missing), NotFound class)."""
    s = w.s
    other = lambda prefix: ids.new_id(prefix)  # noqa: E731
    tok = r["claimed"].claim_token
    return {
        "get_message": (lambda c, m: s.get_message(c, other(ids.MESSAGE) if m else r["msg"].id), MessageNotFound),
        "record_message": (lambda c, m: s.record_message(c, make_envelope(
            other(ids.CONVERSATION) if m else r["conv"].id)), ConversationNotFound),
        "get_conversation": (lambda c, m: s.get_conversation(c, other(ids.CONVERSATION) if m else r["conv"].id),
                             ConversationNotFound),
        "update_conversation": (lambda c, m: s.update_conversation(c, attrs.evolve(
            r["conv"], id=other(ids.CONVERSATION) if m else r["conv"].id, status="closed")), ConversationNotFound),
        "get_delivery": (lambda c, m: s.get_delivery(c, other(ids.DELIVERY) if m else r["queued"].id),
                         DeliveryNotFound),
        "claim_delivery": (lambda c, m: s.claim_delivery(c, other(ids.DELIVERY) if m else r["queued"].id),
                           DeliveryNotFound),
        "bind_delivery_run": (lambda c, m: s.bind_delivery_run(
            c, other(ids.DELIVERY) if m else r["claimed"].id, tok, ids.new_id(ids.RUN)), DeliveryNotFound),
        "finish_delivery": (lambda c, m: s.finish_delivery(
            c, other(ids.DELIVERY) if m else r["claimed"].id, tok, "delivered"), DeliveryNotFound),
        "mark_delivery_read": (lambda c, m: s.mark_delivery_read(
            c, other(ids.DELIVERY) if m else r["delivered"].id), DeliveryNotFound),
        "get_pending_ask": (lambda c, m: s.get_pending_ask(c, "rw-missing" if m else r["ask"].reply_with),
                            AskNotFound),
        "claim_pending_ask": (lambda c, m: s.claim_pending_ask(c, "rw-missing" if m else r["ask"].reply_with),
                              AskNotFound),
    }


@pytest.mark.clause("A2A-GEN-4", "A2A-PART-3", "A2A-PART-5", "A2A-ASK-5", "A2A-DLV-8", "A2A-CONV-4",
                    "A2A-CONV-8", "A2A-HOP-5", "A2A-ENV-4", "A2A-DLV-3", "A2A-DLV-13", "A2A-BIND-2",
                    "A2A-READ-3", "A2A-ASK-2")
def test_invisible_rows_read_as_missing_and_nothing_is_written(w):
    r = _seed(w)
    before = w.view(*VIEW)
    for name, (call, not_found) in _by_key_calls(w, r).items():
        for c in _invisible_callers():
            err = _raise(lambda: call(c, False), not_found)
            missing = _raise(lambda: call(c, True), not_found)
            expect_is("A2A-GEN-4", type(err), type(missing), "type(err)" + ": " + shorten((name, c)))
    unchanged(w, before)
    # the row's own context still reaches every row
    for name, (call, _) in _by_key_calls(w, r).items():
        if name not in ("record_message", "update_conversation"):
            call(w.c, False)


@pytest.mark.clause("A2A-GEN-5", "A2A-PART-2", "A2A-PART-1")
def test_create_stamps_scope_partition_and_times(w, clock):
    clock.advance(seconds=5)
    now = clock.now()
    c = ctx(HOME, "orch-1")
    bogus = dict(scope=S("ws=elsewhere"), partition="orch-9", created_at=EPOCH - timedelta(days=9))
    conv = w.s.create_conversation(c, make_conversation(updated_at=EPOCH, **bogus))
    msg = w.s.record_message(c, make_envelope(conv.id, **bogus))
    dlv = w.s.create_delivery(c, make_delivery(updated_at=EPOCH, **bogus))
    ask = w.s.create_pending_ask(c, make_ask(updated_at=EPOCH, **bogus))
    for row, get in [(conv, lambda: w.s.get_conversation(c, conv.id)), (msg, lambda: w.s.get_message(c, msg.id)),
                     (dlv, lambda: w.s.get_delivery(c, dlv.id)), (ask, lambda: w.s.get_pending_ask(c, ask.reply_with))]:
        for got in (row, get()):
            expect("A2A-GEN-5", got.scope, S(HOME), "got.scope")
            expect("A2A-GEN-5", got.partition, "orch-1", "got.partition")
            expect("A2A-GEN-5", got.created_at, now, "got.created_at")
            if hasattr(got, "updated_at"):
                expect("A2A-GEN-5", got.updated_at, now, "got.updated_at")
    # global traffic is the empty partition and is a partition of its own
    g = w.s.create_delivery(ctx(HOME), make_delivery())
    expect("A2A-PART-1", g.partition, "", "g.partition")
    expect("A2A-PART-2", [d.id for d in w.s.list_queued_deliveries(ZERO)], [g.id],
           "[d.id for d in w.s.list_queued_deliveries(ZERO)]")
    expect("A2A-PART-2", [d.id for d in w.s.list_queued_deliveries(Context(Scope(), "orch-1"))], [dlv.id],
           '[d.id for d in w.s.list_queued_deliveries(Context(Scope(), "orch-1"))]')


@pytest.mark.clause("A2A-GEN-6", "SCOPE-IMM-4")
def test_no_method_moves_a_row_to_another_scope_or_partition(w, clock):
    row = ctx("ws=w1/proj=p1/env=e1", "orch-1")
    here = w.at(row)
    conv = here.conv(hop_ceiling=10)
    ask = here.ask(conversation_id=conv.id)
    d1, d2, d3 = here.queued(), here.queued(), here.queued()
    for caller in ("ws=w1/proj=p1", "ws=w1"):
        up = ctx(caller, "orch-1")
        w.s.record_message(up, make_envelope(conv.id))
        w.s.update_conversation(up, attrs.evolve(conv, protocol=caller, scope=S(caller), partition=""))
    up = ctx("ws=w1", "orch-1")
    w.s.claim_pending_ask(up, ask.reply_with)
    t1 = w.s.claim_delivery(up, d1.id)
    w.s.bind_delivery_run(up, d1.id, t1.claim_token, ids.new_id(ids.RUN))
    w.s.finish_delivery(up, d1.id, t1.claim_token, "delivered")
    w.s.mark_delivery_read(up, d1.id)
    t2 = w.s.claim_delivery(up, d2.id)
    w.s.reclaim_stale_deliveries(Context(Scope(), "orch-1"), FAR_FUTURE)
    w.s.claim_delivery(up, d3.id)
    for got in [w.s.get_conversation(row, conv.id), w.s.get_pending_ask(row, ask.reply_with),
                *[w.s.get_delivery(row, d) for d in (d1.id, d2.id, d3.id)],
                *w.s.list_messages(row)]:
        expect("A2A-GEN-6", got.scope, S("ws=w1/proj=p1/env=e1"), "got.scope")
        expect("A2A-GEN-6", got.partition, "orch-1", "got.partition")
    expect("A2A-GEN-6", t2.scope, S("ws=w1/proj=p1/env=e1"), "t2.scope")
    expect("A2A-GEN-6", w.s.list_conversations(ctx("ws=w1")), [], 'w.s.list_conversations(ctx("ws=w1"))')
    expect("A2A-GEN-6", w.s.list_messages(ctx("ws=w1/proj=p1/env=e1")), [],
           'w.s.list_messages(ctx("ws=w1/proj=p1/env=e1"))')


NAIVE = datetime(2026, 1, 1)


@pytest.mark.clause("A2A-GEN-7", "A2A-GEN-11")
def test_naive_instants_are_refused_everywhere(w):
    r = _seed(w)
    before = w.view(*VIEW)
    s, c = w.s, w.c
    calls = [
        lambda: s.record_message(c, make_envelope(r["conv"].id, reply_by=NAIVE)),
        lambda: s.create_conversation(c, make_conversation(deadline=NAIVE)),
        lambda: s.update_conversation(c, attrs.evolve(r["conv"], deadline=NAIVE)),
        lambda: s.create_pending_ask(c, make_ask(deadline=NAIVE)),
        lambda: s.reclaim_stale_deliveries(c, NAIVE),
        lambda: s.reclaim_stale_deliveries(c, "2026-01-01T00:00:00Z"),
        lambda: s.list_expired_asks(c, NAIVE),
        lambda: s.list_expired_asks(c, None),
        lambda: s.list_expired_asks_across_scopes(c, NAIVE),
        lambda: s.list_expired_asks_across_scopes(ZERO, 1767225600),
    ]
    for call in calls:
        _raise(call, InvalidArgument)
    unchanged(w, before)


@pytest.mark.clause("A2A-GEN-7")
def test_instants_are_stored_and_compared_in_whole_milliseconds(w):
    plus2 = timezone(timedelta(hours=2))
    odd = datetime(2026, 1, 1, 2, 0, 0, 1999, tzinfo=plus2)  # 00:00:00.001999 UTC
    cut = datetime(2026, 1, 1, 0, 0, 0, 1000, tzinfo=UTC)
    conv = w.conv(deadline=odd)
    expect("A2A-GEN-7", conv.deadline, cut, "conv.deadline")
    expect("A2A-GEN-7", w.s.get_conversation(w.c, conv.id).deadline, cut, "w.s.get_conversation(w.c, conv.id).deadline")
    expect("A2A-GEN-7", w.s.get_conversation(w.c, conv.id).deadline.utcoffset(), timedelta(0),
           "w.s.get_conversation(w.c, conv.id).deadline.utcoffset()")
    msg = w.send(conv.id, reply_by=odd)
    expect("A2A-GEN-7", msg.reply_by, cut, "msg.reply_by")
    expect("A2A-GEN-7", w.s.get_message(w.c, msg.id).reply_by, cut, "w.s.get_message(w.c, msg.id).reply_by")
    ask = w.ask(deadline=odd)
    expect("A2A-GEN-7", ask.deadline, cut, "ask.deadline")
    # `now` 999 µs past the truncated deadline is the same millisecond: expired
    expect("A2A-GEN-7", [a.reply_with for a in w.s.list_expired_asks(w.c, cut + timedelta(microseconds=999))],
           [ask.reply_with], "[a.reply_with for a in w.s.list_expired_asks(w.c, cut + timedelta(microseconds=999))]")
    expect("A2A-GEN-7", w.s.list_expired_asks(w.c, cut - timedelta(microseconds=1)), [],
           "w.s.list_expired_asks(w.c, cut - timedelta(microseconds=1))")
    # older_than is cut too: a claim at exactly the cut instant is not older
    w.clock.set(cut)
    d = w.claimed()
    expect("A2A-GEN-7", w.s.reclaim_stale_deliveries(w.c, cut + timedelta(microseconds=999)), 0,
           "w.s.reclaim_stale_deliveries(w.c, cut + timedelta(microseconds=999))")
    expect("A2A-GEN-7", w.s.reclaim_stale_deliveries(w.c, cut + MS), 1, "w.s.reclaim_stale_deliveries(w.c, cut + MS)")
    expect("A2A-GEN-7", w.s.get_delivery(w.c, d.id).state, DeliveryState.QUEUED, "w.s.get_delivery(w.c, d.id).state")


@pytest.mark.clause("A2A-GEN-8", "A2A-GEN-11")
def test_malformed_or_wrong_prefix_ids_are_refused(w):
    r = _seed(w)
    before = w.view(*VIEW)
    s, c = w.s, w.c
    wrong = ids.new_id(ids.RUN)
    bad = [
        lambda: s.record_message(c, make_envelope(r["conv"].id, id=wrong)),
        lambda: s.record_message(c, make_envelope(wrong)),
        lambda: s.record_message(c, make_envelope(r["conv"].id, origin_run_id=ids.new_id(ids.MESSAGE))),
        lambda: s.record_message(c, make_envelope(r["conv"].id, id="msg_not-a-typeid")),
        lambda: s.get_message(c, r["conv"].id),
        lambda: s.get_message(c, None),
        lambda: s.list_messages(c, conversation_id=r["msg"].id),
        lambda: s.create_conversation(c, make_conversation(id=ids.new_id(ids.MESSAGE))),
        lambda: s.get_conversation(c, "conv_"),
        lambda: s.update_conversation(c, attrs.evolve(r["conv"], id=wrong)),
        lambda: s.create_delivery(c, make_delivery(id=ids.new_id(ids.MESSAGE))),
        lambda: s.create_delivery(c, make_delivery(message_id=ids.new_id(ids.DELIVERY))),
        lambda: s.get_delivery(c, r["msg"].id),
        lambda: s.claim_delivery(c, 42),
        lambda: s.bind_delivery_run(c, r["claimed"].id, r["claimed"].claim_token, ids.new_id(ids.AGENT)),
        lambda: s.bind_delivery_run(c, r["claimed"].id, r["claimed"].claim_token, "arun_x"),
        lambda: s.finish_delivery(c, "dlv_" + "8" * 26, r["claimed"].claim_token, "delivered"),
        lambda: s.mark_delivery_read(c, r["delivered"].id.upper()),
        lambda: s.list_inbox(c, "worker", conversation_id=wrong),
        lambda: s.create_pending_ask(c, make_ask(conversation_id=wrong)),
        lambda: s.create_pending_ask(c, make_ask(message_id=wrong)),
        lambda: s.create_pending_ask(c, make_ask(asker_run_id=ids.new_id(ids.MESSAGE))),
        lambda: s.list_pending_asks_by_conversation(c, wrong),
    ]
    for call in bad:
        _raise(call, InvalidArgument)
    unchanged(w, before)


@pytest.mark.clause("A2A-GEN-9", "A2A-CONV-1", "A2A-DLV-1", "A2A-ASK-1", "A2A-GEN-11")
def test_keys_are_unique_over_every_scope_and_partition(w):
    r = _seed(w)
    before = w.view(*VIEW)
    for caller in [w.c, ctx("ws=w1"), ctx("ws=w2"), ctx(HOME, "orch-1"), ctx("ws=w9", "orch-2")]:
        _raise(lambda: w.s.create_conversation(caller, make_conversation(id=r["conv"].id, protocol="x")),
               AlreadyExists)
        _raise(lambda: w.s.create_delivery(caller, make_delivery(id=r["queued"].id)), AlreadyExists)
        _raise(lambda: w.s.create_pending_ask(caller, make_ask(reply_with=r["ask"].reply_with)), AlreadyExists)
    # an envelope id reused with other content, from a scope that sees the conversation
    _raise(lambda: w.s.record_message(ctx("ws=w1"), make_envelope(r["conv"].id, id=r["msg"].id)), AlreadyExists)
    unchanged(w, before)


@pytest.mark.clause("A2A-GEN-10", "A2A-ENV-4")
def test_returned_entities_are_detached(w):
    conv = w.conv()
    msg = w.send(conv.id, metadata={"nested": {"list": [1, 2]}})
    msg.metadata["nested"]["list"].append(3)
    msg.metadata["new"] = True
    again = w.s.get_message(w.c, msg.id)
    expect_strict("A2A-ENV-4", again.metadata, {"nested": {"list": [1, 2]}}, "again.metadata")
    again.metadata.clear()
    expect("A2A-ENV-4", w.s.list_messages(w.c)[0].metadata, {"nested": {"list": [1, 2]}},
           "w.s.list_messages(w.c)[0].metadata")
    expect_that("A2A-GEN-10", isinstance(again.receivers, tuple), "again.receivers", Said("an instance of tuple"),
                again.receivers)
    expect_true("A2A-GEN-10", isinstance(w.s.get_conversation(w.c, conv.id).participants, tuple),
                "isinstance(w.s.get_conversation(w.c, conv.id).participants, tuple)")


@pytest.mark.clause("A2A-GEN-10", "A2A-ENV-5", "A2A-CONV-10", "A2A-INBOX-1", "A2A-INBOX-2", "A2A-INBOX-5",
                    "A2A-QUEUE-1", "A2A-ASK-8")
def test_limit_and_offset_apply_after_ordering(w, clock):
    """Every page of every list, with rows the list must skip interleaved
    (another conversation, other receivers, a look-alike scope, another
    partition): a store that pages before it filters returns short pages.
    Limits run over 0, 1, n - 1, exactly n and beyond."""
    conv, other_conv = w.conv(), w.conv()
    msgs, convs, inbox, queue, asks, unread = [], [conv.id, other_conv.id], [], [], [], []
    lookalike, elsewhere = w.at("ws=w1/proj=p10"), w.at(ctx(HOME, "orch-1"))
    for i in range(4):
        clock.advance(milliseconds=1)
        w.send(other_conv.id)  # skipped by the conversation filter
        msgs.append(w.send(conv.id, sender=Address(("planner", "critic")[i % 2])).id)
        convs.append(w.conv().id)
        lookalike.conv(), elsewhere.conv()  # a look-alike scope and another partition: never listed
        w.delivered(receiver=Address("worker", "peer"))  # not local: not worker's (A2A-INBOX-1)
        w.delivered(receiver=Address("critic"))
        lookalike.delivered()
        elsewhere.delivered()
        elsewhere.queued()
        d = w.delivered(message_id=msgs[-1])
        inbox.append(d.id)
        if i % 2:
            w.s.mark_delivery_read(w.c, d.id)
        else:
            unread.append(d.id)
        queue.append(w.queued().id)
        asks.append(w.ask(deadline=EPOCH + i * MS).reply_with)
        elsewhere.ask(deadline=EPOCH + i * MS)
    convs.reverse()  # newest first
    cases = [
        (lambda **k: w.s.list_messages(w.c, conversation_id=conv.id, **k), msgs, "A2A-ENV-5"),
        (lambda **k: w.s.list_conversations(w.c, **k), convs, "A2A-CONV-10"),
        (lambda **k: w.s.list_inbox(w.c, "worker", **k), inbox, "A2A-INBOX-2"),
        (lambda **k: w.s.list_inbox(w.c, "worker", conversation_id=conv.id, **k), inbox, "A2A-INBOX-4"),
        (lambda **k: w.s.list_inbox(w.c, "worker", unread_only=True, **k), unread, "A2A-INBOX-3"),
    ]
    n = len(msgs)
    expect("A2A-INBOX-1", {x.receiver for x in w.s.list_inbox(w.c, "worker")}, {Address("worker")},
           "the receivers of worker's inbox, with mail for worker@peer and critic stored")
    for call, order, listed in cases:
        with clause(listed, what="which rows the list returns"):
            expect(listed, sorted(x.id for x in call()), sorted(order), "the ids the list returns, in any order")
        with clause("A2A-GEN-10", what="each page of the filtered, ordered rows"):
            expect("A2A-GEN-10", [x.id for x in call()], order, "[x.id for x in call()]")
            for limit in (-1, 0, 1, 2, len(order) - 1, len(order), 10):
                for offset in (-3, 0, 1, 3, len(order), 9):
                    want = order[max(offset, 0):]
                    want = want[:limit] if limit > 0 else want
                    got = [x.id for x in call(limit=limit, offset=offset)]
                    expect("A2A-GEN-10", got, want, "got" + ": " + shorten((listed, limit, offset, got, want)))
    with clause("A2A-GEN-10", what="the limit of the scope-ignoring lists at 0, 1, n - 1, n and beyond"):
        for limit in (-1, 0, 1, n - 1, n, n + 1):
            want = queue if limit <= 0 else queue[:limit]
            expect("A2A-GEN-10", [d.id for d in w.s.list_queued_deliveries(ZERO, limit)], want,
                   "[d.id for d in w.s.list_queued_deliveries(ZERO, limit)]" + ": " + shorten(("queue", limit)))
            want = asks if limit <= 0 else asks[:limit]
            expect("A2A-GEN-10", [a.reply_with for a in w.s.list_expired_asks(w.c, FAR_FUTURE, limit)], want,
                   "[a.reply_with for a in w.s.list_expired_asks(w.c, FAR_FUTURE, limit)]" + ": " + shorten(("asks", limit)))
            expect("A2A-GEN-10", [a.reply_with for a in w.s.list_expired_asks_across_scopes(ZERO, FAR_FUTURE, limit)], want, "[a.reply_with for a in w.s.list_expired_asks_across_scopes(ZERO, FAR_FUTURE, limit)]" + ": " + shorten((
                "asks across scopes", limit)))
    for bad in ("1", True, 1.0, None):
        _raise(lambda: w.s.list_messages(w.c, limit=bad), InvalidArgument)
        _raise(lambda: w.s.list_conversations(w.c, offset=bad), InvalidArgument)
        _raise(lambda: w.s.list_inbox(w.c, "worker", limit=bad), InvalidArgument)
        _raise(lambda: w.s.list_queued_deliveries(ZERO, bad), InvalidArgument)
        _raise(lambda: w.s.reclaim_stale_deliveries(ZERO, FAR_FUTURE, bad), InvalidArgument)
        _raise(lambda: w.s.list_expired_asks(w.c, FAR_FUTURE, bad), InvalidArgument)


BAD_TEXT = ["a\x00b", "\ud800", "x\udfffy"]
LONG = "x" * 256


def _bad_inputs(w: World, r: dict) -> list[tuple[str, Callable[[], Any]]]:
    s, c, conv = w.s, w.c, r["conv"]
    out: list[tuple[str, Callable[[], Any]]] = []
    for i, text in enumerate(BAD_TEXT + [LONG]):
        long = text == LONG
        for field in ("language", "encoding", "ontology", "protocol", "reply_with", "in_reply_to"):
            out.append((f"envelope.{field}#{i}", lambda f=field, t=text: s.record_message(
                c, make_envelope(conv.id, **{f: t}))))
        if not long:
            out.append((f"envelope.content#{i}", lambda t=text: s.record_message(c, make_envelope(conv.id, content=t))))
            out.append((f"envelope.metadata#{i}", lambda t=text: s.record_message(
                c, make_envelope(conv.id, metadata={"k": [t]}))))
            out.append((f"finish.error#{i}", lambda t=text: s.finish_delivery(
                c, r["claimed"].id, r["claimed"].claim_token, "failed", t)))
            out.append((f"token#{i}", lambda t=text: s.finish_delivery(c, r["claimed"].id, t, "failed")))
        out.append((f"sender.agent#{i}", lambda t=text: s.record_message(
            c, make_envelope(conv.id, sender=Address(t)))))
        out.append((f"receiver.node#{i}", lambda t=text: s.record_message(
            c, make_envelope(conv.id, receivers=(Address("w", t),)))))
        out.append((f"conversation.protocol#{i}", lambda t=text: s.create_conversation(
            c, make_conversation(protocol=t))))
        out.append((f"conversation.peer#{i}", lambda t=text: s.create_conversation(
            c, make_conversation(peer_node="n", peer_context=t))))
        out.append((f"update.protocol#{i}", lambda t=text: s.update_conversation(c, attrs.evolve(conv, protocol=t))))
        out.append((f"delivery.receiver#{i}", lambda t=text: s.create_delivery(c, make_delivery(receiver=Address(t)))))
        out.append((f"ask.reply_with#{i}", lambda t=text: s.create_pending_ask(c, make_ask(reply_with=t))))
        out.append((f"ask.tool_call_id#{i}", lambda t=text: s.create_pending_ask(c, make_ask(tool_call_id=t))))
        out.append((f"ask.asker_agent#{i}", lambda t=text: s.create_pending_ask(c, make_ask(asker_agent=t))))
        out.append((f"inbox.agent#{i}", lambda t=text: s.list_inbox(c, t)))
        out.append((f"get_pending_ask#{i}", lambda t=text: s.get_pending_ask(c, t)))
        out.append((f"claim_pending_ask#{i}", lambda t=text: s.claim_pending_ask(c, t)))
        out.append((f"peer_lookup#{i}", lambda t=text: s.get_conversation_by_peer_context(c, "n", t)))
    for j, value in enumerate([{1, 2}, (1, 2), EPOCH, float("nan"), float("inf"), 2**63, -(2**63) - 1, b"x"]):
        out.append((f"metadata#{j}", lambda v=value: s.record_message(c, make_envelope(conv.id, metadata={"k": v}))))
    out += [
        ("metadata-not-dict", lambda: s.record_message(c, make_envelope(conv.id, metadata=[1]))),
        ("metadata-key", lambda: s.record_message(c, make_envelope(conv.id, metadata={1: "x"}))),
        ("content-int", lambda: s.record_message(c, make_envelope(conv.id, content=5))),
        ("receivers-str", lambda: s.record_message(c, make_envelope(conv.id, receivers="worker"))),
        ("receivers-item", lambda: s.record_message(c, make_envelope(conv.id, receivers=("worker",)))),
        ("sender-str", lambda: s.record_message(c, make_envelope(conv.id, sender="planner"))),
        ("reply_to", lambda: s.record_message(c, make_envelope(conv.id, reply_to=(Address("x@y"),)))),
        ("envelope-type", lambda: s.record_message(c, make_conversation())),
        ("conversation-type", lambda: s.create_conversation(c, make_envelope(conv.id))),
        ("ceiling-bool", lambda: s.create_conversation(c, make_conversation(hop_ceiling=True))),
        ("ceiling-float", lambda: s.create_conversation(c, make_conversation(hop_ceiling=2.0))),
        ("ceiling-big", lambda: s.create_conversation(c, make_conversation(hop_ceiling=2**63))),
        ("hops_used-bool", lambda: s.create_conversation(c, make_conversation(hops_used=False))),
        ("participants", lambda: s.create_conversation(c, make_conversation(participants=(Address("a"), "b")))),
        ("initiator", lambda: s.create_conversation(c, make_conversation(initiator=None))),
        ("delivery-type", lambda: s.create_delivery(c, make_ask())),
        ("receiver-none", lambda: s.create_delivery(c, make_delivery(receiver=None))),
        ("ask-type", lambda: s.create_pending_ask(c, make_delivery())),
        ("ask-expected", lambda: s.create_pending_ask(c, make_ask(expected="worker"))),
        ("ask-reply_with-int", lambda: s.create_pending_ask(c, make_ask(reply_with=7))),
        ("status-filter", lambda: s.list_conversations(c, status="opened")),
        ("exact-int", lambda: s.list_messages(c, exact=1)),
        ("exact-none", lambda: s.list_conversations(c, exact=None)),
        ("unread-int", lambda: s.list_inbox(c, "worker", unread_only=1)),
        ("inbox-agent-none", lambda: s.list_inbox(c, None)),
        ("peer-node-int", lambda: s.get_conversation_by_peer_context(c, 5, "x")),
        ("finish-error-int", lambda: s.finish_delivery(c, r["claimed"].id, r["claimed"].claim_token, "failed", 5)),
        ("too-big", lambda: s.record_message(c, make_envelope(conv.id, content="x" * (8 * 1024 * 1024)))),
    ]
    return out


@pytest.mark.clause("A2A-GEN-12", "A2A-GEN-11")
def test_bad_input_is_refused_and_nothing_is_written(w):
    r = _seed(w)
    before = w.view(*VIEW)
    for name, call in _bad_inputs(w, r):
        try:
            call()
        except InvalidArgument:
            continue
        except Exception as exc:  # noqa: BLE001 - report which input
            pytest.fail(f"{name}: raised {type(exc).__name__}: {exc}")
        pytest.fail(f"{name}: accepted")
    unchanged(w, before)


@pytest.mark.clause("A2A-GEN-12", "RSC-GEN-8")
def test_entities_just_under_the_size_limit_are_stored(w):
    conv = w.conv()
    msg = w.send(conv.id, content="x" * (8 * 1024 * 1024 - 4096))
    expect("RSC-GEN-8", len(w.s.get_message(w.c, msg.id).content), 8 * 1024 * 1024 - 4096,
           "len(w.s.get_message(w.c, msg.id).content)")


@pytest.mark.clause("A2A-PART-4", "A2A-PART-5", "A2A-PART-3", "A2A-RCL-1", "A2A-QUEUE-1", "A2A-ASK-12")
def test_partitions_compare_as_exact_strings(w):
    home = w.at(ctx(HOME, "orch-1"))
    conv = home.conv(peer_node="n", peer_context="x")
    msg = home.send(conv.id)
    q = home.queued(message_id=msg.id)
    stale = home.claimed()
    dl = home.delivered(message_id=msg.id)
    ask = home.ask(conversation_id=conv.id, deadline=EPOCH)
    before = w.view(*VIEW)
    for p in ["", "orch-10", "orch-", "Orch-1", "orch-1 ", " orch-1", "orch-1\t"]:
        c = ctx("ws=w1", p)
        anywhere = Context(Scope(), p)
        expect("A2A-PART-4", w.s.list_conversations(c), [], "w.s.list_conversations(c)")
        expect("A2A-PART-4", w.s.list_messages(c), [], "w.s.list_messages(c)")
        expect("A2A-PART-4", w.s.list_inbox(c, "worker"), [], 'w.s.list_inbox(c, "worker")')
        expect("A2A-PART-4", w.s.list_expired_asks(c, FAR_FUTURE), [], "w.s.list_expired_asks(c, FAR_FUTURE)")
        expect("A2A-QUEUE-1", w.s.list_queued_deliveries(anywhere), [], "w.s.list_queued_deliveries(anywhere)")
        expect("A2A-ASK-12", w.s.list_expired_asks_across_scopes(anywhere, FAR_FUTURE), [],
               "w.s.list_expired_asks_across_scopes(anywhere, FAR_FUTURE)")
        expect("A2A-PART-4", w.s.list_pending_asks_by_conversation(c, conv.id), [],
               "w.s.list_pending_asks_by_conversation(c, conv.id)")
        expect("A2A-RCL-1", w.s.reclaim_stale_deliveries(anywhere, FAR_FUTURE), 0,
               "w.s.reclaim_stale_deliveries(anywhere, FAR_FUTURE)")
        _raise(lambda: w.s.get_conversation_by_peer_context(c, "n", "x"), ConversationNotFound)
        _raise(lambda: w.s.get_delivery(c, q.id), DeliveryNotFound)
        _raise(lambda: w.s.claim_delivery(c, q.id), DeliveryNotFound)
        _raise(lambda: w.s.finish_delivery(c, stale.id, stale.claim_token, "delivered"), DeliveryNotFound)
        _raise(lambda: w.s.bind_delivery_run(c, stale.id, stale.claim_token, ids.new_id(ids.RUN)), DeliveryNotFound)
        _raise(lambda: w.s.mark_delivery_read(c, dl.id), DeliveryNotFound)
        _raise(lambda: w.s.claim_pending_ask(c, ask.reply_with), AskNotFound)
        _raise(lambda: w.s.record_message(c, make_envelope(conv.id)), ConversationNotFound)
        _raise(lambda: w.s.get_message(c, msg.id), MessageNotFound)
    unchanged(w, before)
    # and the partition itself sees everything
    c = ctx("ws=w1", "orch-1")
    expect("A2A-QUEUE-1", [d.id for d in w.s.list_queued_deliveries(Context(Scope(), "orch-1"))], [q.id],
           '[d.id for d in w.s.list_queued_deliveries(Context(Scope(), "orch-1"))]')
    expect("A2A-RCL-1", w.s.reclaim_stale_deliveries(Context(Scope(), "orch-1"), FAR_FUTURE), 1,
           'w.s.reclaim_stale_deliveries(Context(Scope(), "orch-1"), FAR_FUTURE)')
    expect_op("A2A-PART-3", w.s.claim_pending_ask(c, ask.reply_with).claimed_at, "is not", None,
              "w.s.claim_pending_ask(c, ask.reply_with).claimed_at")


# ===========================================================================================
# Envelopes (A2A-ENV) and hop admission (A2A-HOP)
# ===========================================================================================


@pytest.mark.clause("A2A-ENV-2", "A2A-HOP-2", "A2A-GEN-11")
def test_record_message_validates_before_it_looks_anything_up(w):
    conv = w.conv()
    before = w.view(*VIEW)
    missing = ids.new_id(ids.CONVERSATION)
    s, c = w.s, w.c
    # zero scope first, whatever else is wrong
    _raise(lambda: s.record_message(ZERO, make_envelope(missing, id="bad", performative="bogus")), NoScope)
    # well-formedness before validate_envelope: a malformed field beats a bad performative
    for bad in [dict(id="msg_bad"), dict(sender=Address("a@b")), dict(metadata={"k": {1}}),
                dict(receivers=(Address("w", "n@m"),)), dict(content="\x00")]:
        err = _raise(lambda: s.record_message(c, make_envelope(conv.id, performative="bogus", **bad)),
                     InvalidArgument)
        expect_false("A2A-ENV-2", isinstance(err, InvalidPerformative),
                     "isinstance(err, InvalidPerformative)" + ": " + shorten(bad))
    # validate_envelope before the conversation is looked up, in its own order
    for fields, error in [
        (dict(performative="bogus", sender=Address("")), InvalidPerformative),
        (dict(sender=Address(""), receivers=()), NoSender),
        (dict(receivers=()), NoReceivers),
        (dict(receivers=(Address("planner"),)), SelfAddressed),
    ]:
        for conv_id in (missing, conv.id):
            _raise(lambda: s.record_message(c, make_envelope(conv_id, **fields)), error)
    unchanged(w, before)


@pytest.mark.clause("A2A-ENV-3", "A2A-ENV-4", "A2A-HOP-8")
def test_envelope_round_trip_and_immutability(w, clock):
    conv = w.conv(hop_ceiling=5)
    sent = make_envelope(
        conv.id, performative="query-ref", sender=Address("planner", ""),
        receivers=(Address("worker"), Address("critic", "peer.example")),
        reply_to=[Address("planner"), Address("archive", "n2")], content="line1\nline2 ✓ é",
        language="en", encoding="utf-8", ontology="tasks", protocol="fipa-query", reply_with="rw-1",
        in_reply_to="rw-0", reply_by=EPOCH + timedelta(minutes=5), origin_run_id=ids.new_id(ids.RUN),
        metadata={"i": 1, "f": 1.0, "b": True, "n": None, "s": "x", "l": [1, 1.5, "a"], "d": {"k": False}},
    )
    stored = w.s.record_message(w.c, sent)
    got = w.s.get_message(w.c, sent.id)
    for e in (stored, got):
        expect_false("A2A-ENV-3", hasattr(e, "updated_at"), 'hasattr(e, "updated_at")')
        for f in ("id", "conversation_id", "sender", "content", "language", "encoding", "ontology", "protocol",
                  "reply_with", "in_reply_to", "reply_by", "origin_run_id"):
            expect("A2A-ENV-3", getattr(e, f), getattr(sent, f), "getattr(e, f)" + ": " + shorten(f))
        expect("A2A-ENV-3", e.performative, Performative.QUERY_REF, "e.performative")
        expect("A2A-ENV-3", e.receivers, tuple(sent.receivers), "e.receivers")
        expect_that("A2A-ENV-3", isinstance(e.receivers, tuple), "e.receivers", Said("an instance of tuple"),
                    e.receivers)
        expect("A2A-ENV-3", e.reply_to, tuple(sent.reply_to), "e.reply_to")
        expect_that("A2A-ENV-3", isinstance(e.reply_to, tuple), "e.reply_to", Said("an instance of tuple"), e.reply_to)
        expect_strict("A2A-ENV-4", e.metadata, sent.metadata, "metadata")
        expect("A2A-HOP-8", e.hops, 1, "e.hops")
        expect("A2A-HOP-8", e.created_at, EPOCH, "e.created_at")
        expect("A2A-ENV-4", e.scope, S(HOME), "e.scope")
        expect("A2A-ENV-4", e.partition, "", "e.partition")
    # later traffic, a close and time passing change nothing about it
    clock.advance(seconds=3)
    w.send(conv.id)
    w.s.update_conversation(w.c, attrs.evolve(conv, status="closed"))
    expect_strict("A2A-ENV-4", w.s.get_message(w.c, sent.id), got, "envelope after later writes")


@pytest.mark.clause("A2A-ENV-5", "A2A-GEN-10")
def test_message_list_order_is_created_at_then_id(w, clock):
    conv, other = w.conv(hop_ceiling=20), w.conv()
    # ids deliberately out of creation order within one millisecond
    base = ids.new_id(ids.MESSAGE)
    made = [f"msg_{base[4:-1]}{ch}" for ch in "zab"]
    for mid in made:
        w.send(conv.id, id=mid)
    clock.advance(milliseconds=1)
    later = w.send(conv.id).id
    w.send(other.id)
    expect("A2A-ENV-5", [m.id for m in w.s.list_messages(w.c, conversation_id=conv.id)], sorted(made) + [later],
           "[m.id for m in w.s.list_messages(w.c, conversation_id=conv.id)]")
    expect("A2A-ENV-5", len(w.s.list_messages(w.c)), 5, "len(w.s.list_messages(w.c))")
    expect("A2A-ENV-5", w.s.list_messages(w.c, conversation_id=ids.new_id(ids.CONVERSATION)), [],
           "w.s.list_messages(w.c, conversation_id=ids.new_id(ids.CONVERSATION))")


@pytest.mark.clause("A2A-ENV-6", "A2A-HOP-8")
def test_duplicate_receivers_are_kept_and_counted_once_as_participants(w, clock):
    conv = w.conv(participants=(Address("planner"), Address("critic")), hop_ceiling=5)
    clock.advance(seconds=1)
    e = w.send(conv.id, sender=Address("boss"),
               receivers=(Address("worker"), Address("critic"), Address("worker"), Address("worker", "peer")))
    expect("A2A-ENV-6", e.receivers,
           (Address("worker"), Address("critic"), Address("worker"), Address("worker", "peer")), "e.receivers")
    got = w.s.get_conversation(w.c, conv.id)
    expect("A2A-ENV-6", got.participants, (Address("planner"), Address("critic"), Address("boss"), Address("worker"),
                                Address("worker", "peer")), "got.participants")
    expect("A2A-HOP-8", got.hops_used, 1, "got.hops_used")
    expect("A2A-HOP-8", got.updated_at, clock.now(), "got.updated_at")
    expect("A2A-HOP-8", got.created_at, EPOCH, "got.created_at")


@pytest.mark.clause("A2A-HOP-1", "A2A-DLV-2")
def test_record_message_is_the_only_way_to_store_an_envelope(w):
    takes_envelope = [
        n for n, fn in inspect.getmembers(A2AStore, inspect.isfunction)
        if not n.startswith("_") and "envelope" in inspect.signature(fn).parameters
    ]
    expect("A2A-HOP-1", takes_envelope, ["record_message"], "takes_envelope")
    # a delivery or an ask naming a message id does not make that message exist
    mid = ids.new_id(ids.MESSAGE)
    w.queued(message_id=mid)
    w.ask(message_id=mid)
    _raise(lambda: w.s.get_message(w.c, mid), MessageNotFound)
    expect("A2A-HOP-1", w.s.list_messages(w.c), [], "w.s.list_messages(w.c)")


@pytest.mark.clause("A2A-HOP-3", "A2A-HOP-2")
def test_identical_retry_is_free_even_after_close_or_budget(w):
    conv = w.conv(hop_ceiling=2)
    first = make_envelope(conv.id, metadata={"n": 1, "f": 2.5})
    stored = w.s.record_message(w.c, first)
    w.send(conv.id)  # budget now spent
    for _ in range(2):
        again = w.s.record_message(w.c, attrs.evolve(first, hops=77, created_at=FAR_FUTURE))
        expect_strict("A2A-HOP-3", again, stored, "identical retry")
    w.s.update_conversation(w.c, attrs.evolve(conv, status="closed"))
    expect_strict("A2A-HOP-3", w.s.record_message(w.c, first), stored, "w.s.record_message(w.c, first)")
    got = w.s.get_conversation(w.c, conv.id)
    expect("A2A-HOP-3", got.hops_used, 2, "got.hops_used")
    # a list given where the tuple was stored is the same value
    expect_strict("A2A-HOP-3", w.s.record_message(w.c, attrs.evolve(first, receivers=list(first.receivers))), stored,
                  "w.s.record_message(w.c, attrs.evolve(first, receivers=list(first.receivers)))")
    expect("A2A-HOP-3", len(w.s.list_messages(w.c)), 2, "len(w.s.list_messages(w.c))")


@pytest.mark.clause("A2A-HOP-4", "A2A-HOP-3", "A2A-GEN-11")
def test_an_id_reused_with_any_difference_is_already_exists(w, clock):
    conv = w.conv(hop_ceiling=10)
    first = make_envelope(conv.id, metadata={"n": 1})
    w.s.record_message(w.c, first)
    before = w.view(*VIEW)
    clock.advance(seconds=1)
    variants = [
        attrs.evolve(first, content="other"),
        attrs.evolve(first, metadata={"n": 1.0}),
        attrs.evolve(first, metadata={"n": True}),
        attrs.evolve(first, receivers=(Address("worker"), Address("worker"))),
        attrs.evolve(first, performative="inform"),
        attrs.evolve(first, reply_by=EPOCH),
        attrs.evolve(first, sender=Address("planner", "n")),
    ]
    for v in variants:
        _raise(lambda: w.s.record_message(w.c, v), AlreadyExists)
    # the same fields from another scope that sees the conversation: a different envelope
    _raise(lambda: w.s.record_message(ctx("ws=w1"), first), AlreadyExists)
    unchanged(w, before)


@pytest.mark.clause("A2A-HOP-5", "A2A-HOP-2")
def test_conversation_must_be_visible(w):
    conv = w.conv()
    before = w.view(*VIEW)
    for c in [ctx("ws=w1/proj=p2"), ctx("ws=w10/proj=p1"), ctx(HOME, "orch-1"), ctx("ws=w1/proj=p1/env=e1")]:
        _raise(lambda: w.s.record_message(c, make_envelope(conv.id)), ConversationNotFound)
    _raise(lambda: w.s.record_message(w.c, make_envelope(ids.new_id(ids.CONVERSATION))), ConversationNotFound)
    unchanged(w, before)
    expect("A2A-HOP-5", w.s.record_message(ctx("ws=w1"), make_envelope(conv.id)).scope, S("ws=w1"),
           'w.s.record_message(ctx("ws=w1"), make_envelope(conv.id)).scope')


@pytest.mark.clause("A2A-HOP-6", "A2A-HOP-2", "A2A-GEN-11")
@pytest.mark.parametrize("status", ["closed", "expired"])
def test_a_conversation_that_is_not_open_admits_nothing(w, status):
    conv = w.conv(hop_ceiling=1)
    w.s.update_conversation(w.c, attrs.evolve(conv, status=status))
    _raise(lambda: w.s.record_message(w.c, make_envelope(conv.id)), ConversationClosed)
    full = w.conv(hop_ceiling=1)
    w.send(full.id)
    w.s.update_conversation(w.c, attrs.evolve(full, status=status))
    before = w.view(*VIEW)
    # closed and out of budget: the status check comes first
    _raise(lambda: w.s.record_message(w.c, make_envelope(full.id)), ConversationClosed)
    unchanged(w, before)


@pytest.mark.clause("A2A-HOP-7", "A2A-HOP-10", "A2A-HOP-11", "A2A-GEN-11")
def test_hop_ceiling_is_enforced_at_the_boundary(w):
    # the budget is the conversation's, whoever sends: three senders spend it
    # (a count per sender would still see two hops left for each)
    senders = [Address("planner"), Address("critic"), Address("judge", "peer")]
    conv = w.conv(hop_ceiling=3)
    hops = [w.send(conv.id, sender=sender).hops for sender in senders]
    expect("A2A-HOP-7", hops, [1, 2, 3], "hops")
    before = w.view(*VIEW)
    for sender in senders + [Address("newcomer")]:
        _raise(lambda s=sender: w.send(conv.id, sender=s), HopCeilingExceeded)
    unchanged(w, before)
    expect("A2A-HOP-10", w.s.get_conversation(w.c, conv.id).hops_used, 3,
           "w.s.get_conversation(w.c, conv.id).hops_used")
    # raising the ceiling admits again; lowering it below hops_used admits nothing
    w.s.update_conversation(w.c, attrs.evolve(conv, hop_ceiling=4))
    expect("A2A-HOP-10", w.send(conv.id).hops, 4, "w.send(conv.id).hops")
    w.s.update_conversation(w.c, attrs.evolve(conv, hop_ceiling=1))
    _raise(lambda: w.send(conv.id), HopCeilingExceeded)
    expect("A2A-HOP-10", w.s.get_conversation(w.c, conv.id).hops_used, 4,
           "w.s.get_conversation(w.c, conv.id).hops_used")
    expect("A2A-HOP-7", sorted(m.hops for m in w.s.list_messages(w.c)), [1, 2, 3, 4],
           "sorted(m.hops for m in w.s.list_messages(w.c))")


@pytest.mark.clause("A2A-HOP-8", "A2A-HOP-9")
def test_admission_charges_the_conversation_in_one_step(w, clock):
    conv = w.conv(participants=(Address("planner"),), hop_ceiling=8)
    clock.advance(minutes=1)
    e = w.send(conv.id, hops=42, sender=Address("worker"), receivers=(Address("planner"), Address("critic")))
    expect("A2A-HOP-8", e.hops, 1, "e.hops")
    expect("A2A-HOP-8", e.created_at, clock.now(), "e.created_at")
    got = w.s.get_conversation(w.c, conv.id)
    expect("A2A-HOP-8", got.hops_used, 1, "got.hops_used")
    expect("A2A-HOP-8", got.updated_at, clock.now(), "got.updated_at")
    expect("A2A-HOP-8", got.created_at, EPOCH, "got.created_at")
    expect("A2A-HOP-8", got.participants, (Address("planner"), Address("worker"), Address("critic")),
           "got.participants")
    clock.advance(minutes=1)
    e2 = w.send(conv.id, hops=1, sender=Address("critic"), receivers=(Address("judge"),))
    expect("A2A-HOP-8", e2.hops, 2, "e2.hops")
    expect("A2A-HOP-8", w.s.get_conversation(w.c, conv.id).participants[-1], Address("judge"),
           "w.s.get_conversation(w.c, conv.id).participants[-1]")
    expect("A2A-HOP-8", w.s.get_message(w.c, e.id).hops, 1, "w.s.get_message(w.c, e.id).hops")


# ===========================================================================================
# Conversations (A2A-CONV, A2A-PEER)
# ===========================================================================================


@pytest.mark.clause("A2A-CONV-1", "A2A-GEN-11")
def test_create_conversation_checks_status_ceiling_and_hops(w):
    for status in ("open", "closed", "expired", ConversationStatus.CLOSED):
        expect("A2A-CONV-1", w.conv(status=status).status, ConversationStatus(status), "w.conv(status=status).status")
    expect("A2A-CONV-1", w.conv(hop_ceiling=1).hop_ceiling, 1, "w.conv(hop_ceiling=1).hop_ceiling")
    before = w.view(*VIEW)
    for bad in [dict(status="Open"), dict(status="done"), dict(status=None), dict(hop_ceiling=0),
                dict(hop_ceiling=-1), dict(hops_used=1), dict(hops_used=-1), dict(hops_used=None)]:
        _raise(lambda: w.s.create_conversation(w.c, make_conversation(**bad)), InvalidArgument)
    unchanged(w, before)


@pytest.mark.clause("A2A-CONV-2")
def test_participants_are_deduplicated_in_first_order(w):
    c = w.conv(participants=[Address("b"), Address("a"), Address("b"), Address("a", "n"), Address("a")])
    expect("A2A-CONV-2", c.participants, (Address("b"), Address("a"), Address("a", "n")), "c.participants")
    expect("A2A-CONV-2", w.s.get_conversation(w.c, c.id).participants, c.participants,
           "w.s.get_conversation(w.c, c.id).participants")


@pytest.mark.clause("A2A-CONV-3", "A2A-GEN-11")
def test_peer_pair_is_both_empty_or_both_set(w):
    conv = w.conv()
    before = w.view(*VIEW)
    for node, context in [("n", ""), ("", "x")]:
        _raise(lambda: w.s.create_conversation(w.c, make_conversation(peer_node=node, peer_context=context)),
               InvalidArgument)
        _raise(lambda: w.s.update_conversation(w.c, attrs.evolve(conv, peer_node=node, peer_context=context)),
               InvalidArgument)
    unchanged(w, before)
    expect("A2A-CONV-3", w.conv(peer_node="n", peer_context="x").peer_context, "x",
           'w.conv(peer_node="n", peer_context="x").peer_context')


@pytest.mark.clause("A2A-CONV-4")
def test_get_conversation(w):
    conv = w.conv(deadline=EPOCH + timedelta(hours=1), peer_node="node-a", peer_context="ctx-1",
                  initiator=Address("planner", "n1"))
    for c in (w.c, ctx("ws=w1")):
        got = w.s.get_conversation(c, conv.id)
        expect("A2A-CONV-4", got, conv, "got")
    _raise(lambda: w.s.get_conversation(w.c, ids.new_id(ids.CONVERSATION)), ConversationNotFound)


@pytest.mark.clause("A2A-CONV-5", "A2A-CONV-6")
def test_update_replaces_exactly_the_six_fields(w, clock):
    conv = w.conv(participants=(Address("planner"),), hop_ceiling=4)
    w.send(conv.id)
    charged = w.s.get_conversation(w.c, conv.id)
    clock.advance(seconds=7)
    arg = attrs.evolve(
        conv, protocol="fipa-contract-net", status="expired", hop_ceiling=9, deadline=EPOCH + timedelta(days=1),
        peer_node="peer", peer_context="thread-9",
        # ignored without being checked:
        initiator=Address("x@y"), participants=("junk",), hops_used=-5, created_at="yesterday",
        scope=S("ws=zz"), partition="orch-9", updated_at=None,
    )
    updated = w.s.update_conversation(ctx("ws=w1"), arg)
    stored = w.s.get_conversation(w.c, conv.id)
    expect("A2A-CONV-5", updated, stored, "updated")
    expect("A2A-CONV-5", (stored.protocol, stored.status, stored.hop_ceiling, stored.deadline, stored.peer_node,
            stored.peer_context), ("fipa-contract-net", ConversationStatus.EXPIRED, 9,
                                     EPOCH + timedelta(days=1), "peer", "thread-9"), "(stored.protocol, stored.status, stored.hop_ceiling, stored.deadline, stored.peer_node, stored.peer_context)")
    expect("A2A-CONV-5", stored.updated_at, clock.now(), "stored.updated_at")
    for f in ("id", "scope", "partition", "initiator", "participants", "hops_used", "created_at"):
        expect("A2A-CONV-6", getattr(stored, f), getattr(charged, f), "getattr(stored, f)" + ": " + shorten(f))


@pytest.mark.clause("A2A-CONV-7", "A2A-GEN-11")
@pytest.mark.parametrize("final", ["closed", "expired"])
def test_closed_and_expired_are_final(w, final):
    conv = w.conv()
    w.s.update_conversation(w.c, attrs.evolve(conv, status=final))
    before = w.view(*VIEW)
    for other in {"open", "closed", "expired"} - {final}:
        _raise(lambda: w.s.update_conversation(w.c, attrs.evolve(conv, status=other)), InvalidState)
    unchanged(w, before)
    # keeping the status while changing other fields is allowed
    got = w.s.update_conversation(w.c, attrs.evolve(conv, status=final, protocol="later", hop_ceiling=2))
    expect("A2A-CONV-7", got.status, ConversationStatus(final), "got.status")
    expect("A2A-CONV-7", got.protocol, "later", "got.protocol")
    # open may go anywhere
    for target in ("open", "closed"):
        fresh = w.conv()
        expect("A2A-CONV-7", w.s.update_conversation(w.c, attrs.evolve(fresh, status=target)).status,
               ConversationStatus(target), "w.s.update_conversation(w.c, attrs.evolve(fresh, status=target)).status")


@pytest.mark.clause("A2A-CONV-8", "A2A-GEN-11", "A2A-PEER-3")
def test_update_refusals_come_in_order(w):
    conv = w.conv(peer_node="n", peer_context="a")
    closed = w.conv(peer_node="n", peer_context="b")
    w.s.update_conversation(w.c, attrs.evolve(closed, status="closed"))
    before = w.view(*VIEW)
    missing = ids.new_id(ids.CONVERSATION)
    # invalid fields beat not found
    _raise(lambda: w.s.update_conversation(w.c, attrs.evolve(conv, id=missing, hop_ceiling=0)), InvalidArgument)
    _raise(lambda: w.s.update_conversation(ctx("ws=w2"), attrs.evolve(conv, status="bogus")), InvalidArgument)
    # not found beats the state
    _raise(lambda: w.s.update_conversation(ctx("ws=w2"), attrs.evolve(closed, status="open")), ConversationNotFound)
    # the state beats the peer pair
    _raise(lambda: w.s.update_conversation(w.c, attrs.evolve(closed, status="open", peer_context="a")), InvalidState)
    _raise(lambda: w.s.update_conversation(w.c, attrs.evolve(conv, peer_context="b")), AlreadyExists)
    unchanged(w, before)


@pytest.mark.clause("A2A-CONV-9")
def test_a_passed_deadline_does_not_expire_a_conversation(w, clock):
    conv = w.conv(deadline=EPOCH + MS)
    clock.advance(days=3)
    expect("A2A-CONV-9", w.s.get_conversation(w.c, conv.id).status, ConversationStatus.OPEN,
           "w.s.get_conversation(w.c, conv.id).status")
    expect("A2A-CONV-9", w.send(conv.id).hops, 1, "w.send(conv.id).hops")
    expect("A2A-CONV-9", [c.id for c in w.s.list_conversations(w.c, status="open")], [conv.id],
           '[c.id for c in w.s.list_conversations(w.c, status="open")]')


@pytest.mark.clause("A2A-CONV-10", "A2A-GEN-3")
def test_conversation_list_order_status_filter_and_exact(w, clock):
    base = ids.new_id(ids.CONVERSATION)
    same_ms = [w.conv(id=f"conv_{base[5:-1]}{ch}").id for ch in "qaz"]
    clock.advance(milliseconds=1)
    newest = w.conv(status="closed").id
    clock.advance(milliseconds=1)
    deeper = w.at("ws=w1/proj=p1/env=e1").conv(status="expired").id
    expect("A2A-CONV-10", [c.id for c in w.s.list_conversations(w.c)], [deeper, newest] + sorted(same_ms, reverse=True),
           "[c.id for c in w.s.list_conversations(w.c)]")
    expect("A2A-CONV-10", [c.id for c in w.s.list_conversations(w.c, exact=True)],
           [newest] + sorted(same_ms, reverse=True), "[c.id for c in w.s.list_conversations(w.c, exact=True)]")
    expect("A2A-CONV-10", [c.id for c in w.s.list_conversations(w.c, status="closed")], [newest],
           '[c.id for c in w.s.list_conversations(w.c, status="closed")]')
    expect("A2A-CONV-10", [c.id for c in w.s.list_conversations(w.c, status=ConversationStatus.EXPIRED)], [deeper],
           "[c.id for c in w.s.list_conversations(w.c, status=ConversationStatus.EXPIRED)]")
    expect("A2A-CONV-10", [c.id for c in w.s.list_conversations(w.c, status="expired", exact=True)], [],
           '[c.id for c in w.s.list_conversations(w.c, status="expired", exact=True)]')
    expect("A2A-CONV-10", len(w.s.list_conversations(w.c, status="open")), 3,
           'len(w.s.list_conversations(w.c, status="open"))')


@pytest.mark.clause("A2A-PEER-1")
def test_empty_peer_pair_is_not_found_without_reading_storage(store, w):
    w.conv()
    for node, context in [("", "x"), ("n", ""), ("", "")]:
        _raise(lambda: w.s.get_conversation_by_peer_context(w.c, node, context), ConversationNotFound)
    _raise(lambda: w.s.get_conversation_by_peer_context(ZERO, "", "x"), NoScope)
    store.close()
    for node, context in [("", "x"), ("n", "")]:
        _raise(lambda: store.get_conversation_by_peer_context(ctx(HOME), node, context), ConversationNotFound)


@pytest.mark.clause("A2A-PEER-2", "A2A-GEN-4")
def test_peer_lookup_matches_node_and_context_together(w):
    conv = w.conv(peer_node="node-a", peer_context="ctx-1")
    expect("A2A-PEER-2", w.s.get_conversation_by_peer_context(w.c, "node-a", "ctx-1").id, conv.id,
           'w.s.get_conversation_by_peer_context(w.c, "node-a", "ctx-1").id')
    expect("A2A-PEER-2", w.s.get_conversation_by_peer_context(ctx("ws=w1"), "node-a", "ctx-1").id, conv.id,
           'w.s.get_conversation_by_peer_context(ctx("ws=w1"), "node-a", "ctx-1").id')
    for c, node, context in [(w.c, "node-b", "ctx-1"), (w.c, "node-a", "ctx-2"), (w.c, "Node-a", "ctx-1"),
                             (w.c, "node-a", "ctx-1 "), (ctx("ws=w1/proj=p2"), "node-a", "ctx-1"),
                             (ctx(HOME, "orch-1"), "node-a", "ctx-1"), (ctx(HOME + "/env=e"), "node-a", "ctx-1")]:
        _raise(lambda: w.s.get_conversation_by_peer_context(c, node, context), ConversationNotFound)


@pytest.mark.clause("A2A-PEER-3", "A2A-GEN-11")
def test_peer_pair_is_unique_per_exact_scope_and_partition(w):
    first = w.conv(peer_node="n", peer_context="x")
    before = w.view(*VIEW)
    _raise(lambda: w.conv(peer_node="n", peer_context="x"), AlreadyExists)
    unchanged(w, before)
    other = w.conv(peer_node="n", peer_context="y")
    _raise(lambda: w.s.update_conversation(w.c, attrs.evolve(other, peer_context="x")), AlreadyExists)
    expect("A2A-PEER-3", w.s.get_conversation(w.c, other.id).peer_context, "y",
           "w.s.get_conversation(w.c, other.id).peer_context")
    # the same pair at another exact scope, or another partition, is allowed
    w.at("ws=w1").conv(peer_node="n", peer_context="x")
    w.at(ctx(HOME + "/env=e1")).conv(peer_node="n", peer_context="x")
    w.at(ctx(HOME, "orch-1")).conv(peer_node="n", peer_context="x")
    # an update keeping its own pair is fine; a closed one still holds it
    w.s.update_conversation(w.c, attrs.evolve(first, status="closed"))
    _raise(lambda: w.conv(peer_node="n", peer_context="x"), AlreadyExists)


@pytest.mark.clause("A2A-PEER-4")
def test_peer_lookup_prefers_the_shallowest_then_oldest_then_smallest_id(w, clock):
    deep = w.at("ws=w1/proj=p1/env=e1").conv(peer_node="n", peer_context="x")
    clock.advance(seconds=1)
    mid = w.at("ws=w1/proj=p1").conv(peer_node="n", peer_context="x")
    expect("A2A-PEER-4", w.s.get_conversation_by_peer_context(ctx("ws=w1"), "n", "x").id, mid.id,
           'w.s.get_conversation_by_peer_context(ctx("ws=w1"), "n", "x").id')
    expect("A2A-PEER-4", w.s.get_conversation_by_peer_context(ctx("ws=w1/proj=p1/env=e1"), "n", "x").id, deep.id,
           'w.s.get_conversation_by_peer_context(ctx("ws=w1/proj=p1/env=e1"), "n", "x").id')
    # two at the same depth: the older wins, then the smaller id
    clock.advance(seconds=1)
    a = w.at("ws=w2/proj=b").conv(peer_node="n", peer_context="y")
    clock.advance(seconds=1)
    w.at("ws=w2/proj=a").conv(peer_node="n", peer_context="y")
    expect("A2A-PEER-4", w.s.get_conversation_by_peer_context(ctx("ws=w2"), "n", "y").id, a.id,
           'w.s.get_conversation_by_peer_context(ctx("ws=w2"), "n", "y").id')
    base = ids.new_id(ids.CONVERSATION)
    big, small = f"conv_{base[5:-1]}z", f"conv_{base[5:-1]}a"
    w.at("ws=w3/proj=b").conv(id=big, peer_node="n", peer_context="z")
    w.at("ws=w3/proj=a").conv(id=small, peer_node="n", peer_context="z")
    expect("A2A-PEER-4", w.s.get_conversation_by_peer_context(ctx("ws=w3"), "n", "z").id, small,
           'w.s.get_conversation_by_peer_context(ctx("ws=w3"), "n", "z").id')


# ===========================================================================================
# Deliveries (A2A-DLV), binding (A2A-BIND), reclaim (A2A-RCL)
# ===========================================================================================


@pytest.mark.clause("A2A-DLV-1", "A2A-GEN-11")
def test_create_delivery_stores_a_queued_row(w, clock):
    clock.advance(seconds=1)
    d = w.queued(receiver=Address("worker", "peer"))
    for got in (d, w.s.get_delivery(w.c, d.id)):
        expect("A2A-DLV-1", got.state, DeliveryState.QUEUED, "got.state")
        expect("A2A-DLV-1", got.error, "", "got.error")
        expect("A2A-DLV-1", (got.claim_token, got.claimed_at, got.delivered_at, got.read_at, got.run_id), (None,) * 5,
               "(got.claim_token, got.claimed_at, got.delivered_at, got.read_at, got.run_id)")
        expect("A2A-DLV-1", got.created_at, got.updated_at, "got.created_at")
        expect("A2A-DLV-1", got.updated_at, clock.now(), "got.updated_at")
        expect("A2A-DLV-1", got.receiver, Address("worker", "peer"), "got.receiver")
    before = w.view(*VIEW)
    for field, value in [("state", "delivering"), ("state", "delivered"), ("state", "bogus"), ("error", "x"),
                         ("error", None), ("claim_token", "t"), ("claim_token", ""), ("claimed_at", EPOCH),
                         ("delivered_at", EPOCH), ("read_at", EPOCH), ("run_id", ids.new_id(ids.RUN))]:
        _raise(lambda: w.s.create_delivery(w.c, make_delivery(**{field: value})), InvalidArgument)
    _raise(lambda: w.s.create_delivery(w.c, make_delivery(id=d.id)), AlreadyExists)
    unchanged(w, before)


@pytest.mark.clause("A2A-DLV-2", "A2A-ADDR-5", "A2A-GEN-11")
def test_delivery_receiver_must_be_well_formed_with_an_agent(w):
    before = w.view(*VIEW)
    for receiver in [Address(""), Address("", "node"), Address("a@b"), Address("a", "n@m")]:
        _raise(lambda: w.s.create_delivery(w.c, make_delivery(receiver=receiver)), InvalidArgument)
    unchanged(w, before)
    expect("A2A-ADDR-5", w.queued(receiver=Address("a@b", "node")).receiver, Address("a@b", "node"),
           'w.queued(receiver=Address("a@b", "node")).receiver')
    expect("A2A-DLV-2", w.queued(message_id=ids.new_id(ids.MESSAGE)).state, DeliveryState.QUEUED,
           "w.queued(message_id=ids.new_id(ids.MESSAGE)).state")


@pytest.mark.clause("A2A-ADDR-5", "A2A-GEN-11")
def test_entity_address_fields_must_be_well_formed(w):
    conv = w.conv()
    before = w.view(*VIEW)
    bad = [Address("a@b"), Address("x", "n@m")]
    for a in bad:
        _raise(lambda: w.s.create_conversation(w.c, make_conversation(initiator=a)), InvalidArgument)
        _raise(lambda: w.s.create_conversation(w.c, make_conversation(participants=(a,))), InvalidArgument)
        _raise(lambda: w.s.create_pending_ask(w.c, make_ask(expected=a)), InvalidArgument)
        for fields in (dict(sender=a), dict(receivers=(Address("w"), a)), dict(reply_to=(a,))):
            err = _raise(lambda: w.s.record_message(w.c, make_envelope(conv.id, **fields)), InvalidArgument)
            expect_false("A2A-ADDR-5", isinstance(err, (NoSender, NoReceivers, SelfAddressed)),
                         "isinstance(err, (NoSender, NoReceivers, SelfAddressed))")
    unchanged(w, before)


@pytest.mark.clause("A2A-DLV-3", "A2A-DLV-5")
def test_claim_returns_the_row_as_written_with_a_token(w, clock):
    d = w.queued()
    clock.advance(seconds=2)
    claimed = w.s.claim_delivery(w.c, d.id)
    expect("A2A-DLV-5", claimed.state, DeliveryState.DELIVERING, "claimed.state")
    expect_that("A2A-DLV-5", isinstance(claimed.claim_token, str), "claimed.claim_token", Said("an instance of str"),
                claimed.claim_token)
    expect_op("A2A-DLV-5", claimed.claim_token, "!=", "", "claimed.claim_token")
    expect("A2A-DLV-5", claimed.claimed_at, claimed.updated_at, "claimed.claimed_at")
    expect("A2A-DLV-5", claimed.updated_at, clock.now(), "claimed.updated_at")
    expect("A2A-DLV-5", claimed.created_at, d.created_at, "claimed.created_at")
    expect("A2A-DLV-5", claimed.receiver, d.receiver, "claimed.receiver")
    clock.advance(seconds=1)
    expect("A2A-DLV-3", w.s.get_delivery(w.c, d.id), claimed, "w.s.get_delivery(w.c, d.id)")
    expect("A2A-DLV-3", w.s.get_delivery(ctx("ws=w1"), d.id).claim_token, claimed.claim_token,
           'w.s.get_delivery(ctx("ws=w1"), d.id).claim_token')


@pytest.mark.clause("A2A-DLV-6", "A2A-RCL-9")
def test_every_claim_gets_a_fresh_token(w, clock):
    d = w.queued()
    tokens = []
    for _ in range(6):
        tokens.append(w.s.claim_delivery(w.c, d.id).claim_token)
        clock.advance(seconds=1)
        expect("A2A-RCL-9", w.s.reclaim_stale_deliveries(ZERO, clock.now()), 1,
               "w.s.reclaim_stale_deliveries(ZERO, clock.now())")
    expect("A2A-DLV-6", len(set(tokens)), len(tokens), "len(set(tokens))")
    expect_true("A2A-DLV-6", all(isinstance(t, str) and t for t in tokens),
                "all(isinstance(t, str) and t for t in tokens)")
    others = [w.claimed().claim_token for _ in range(3)]
    expect_true("A2A-DLV-6", all(isinstance(t, str) and t for t in others),
                "all(isinstance(t, str) and t for t in others)")


@pytest.mark.clause("A2A-DLV-7", "A2A-DLV-4", "A2A-GEN-11")
def test_claim_of_a_row_that_is_not_queued(w):
    rows = [w.claimed(), w.delivered()]
    failed = w.claimed()
    rows.append(w.s.finish_delivery(w.c, failed.id, failed.claim_token, "failed", "boom"))
    before = w.view(*VIEW)
    for d in rows:
        for c in (w.c, ctx("ws=w1")):
            _raise(lambda: w.s.claim_delivery(c, d.id), DeliveryAlreadyClaimed)
    unchanged(w, before)


@pytest.mark.clause("A2A-DLV-8")
def test_claim_of_a_missing_row(w):
    w.queued()
    _raise(lambda: w.s.claim_delivery(w.c, ids.new_id(ids.DELIVERY)), DeliveryNotFound)


@pytest.mark.clause("A2A-DLV-4", "A2A-BIND-6", "A2A-GEN-11")
def test_delivered_and_failed_are_final(w, clock):
    for final, error in (("delivered", ""), ("failed", "no such agent")):
        d = w.claimed()
        run = ids.new_id(ids.RUN)
        w.s.bind_delivery_run(w.c, d.id, d.claim_token, run)
        done = w.s.finish_delivery(w.c, d.id, d.claim_token, final, error)
        clock.advance(days=1)
        before = w.view(*VIEW)
        _raise(lambda: w.s.claim_delivery(w.c, d.id), DeliveryAlreadyClaimed)
        other = "failed" if final == "delivered" else "delivered"
        _raise(lambda: w.s.finish_delivery(w.c, d.id, d.claim_token, other), DeliveryClaimLost)
        _raise(lambda: w.s.bind_delivery_run(w.c, d.id, d.claim_token, ids.new_id(ids.RUN)), DeliveryClaimLost)
        expect("A2A-DLV-4", w.s.reclaim_stale_deliveries(ZERO, FAR_FUTURE), 0,
               "w.s.reclaim_stale_deliveries(ZERO, FAR_FUTURE)")
        unchanged(w, before)
        got = w.s.get_delivery(w.c, d.id)
        expect("A2A-BIND-6", got, done, "got")
        expect("A2A-BIND-6", got.run_id, run, "got.run_id")


@pytest.mark.clause("A2A-DLV-10", "A2A-GEN-11")
def test_finish_requires_a_final_state_and_a_token(w):
    d = w.claimed()
    before = w.view(*VIEW)
    for state in ("queued", "delivering", "bogus", None, DeliveryState.QUEUED, 1):
        _raise(lambda: w.s.finish_delivery(w.c, d.id, d.claim_token, state), InvalidArgument)
    for token in ("", None, 7, b"t"):
        _raise(lambda: w.s.finish_delivery(w.c, d.id, token, "delivered"), InvalidArgument)
        _raise(lambda: w.s.finish_delivery(ctx("ws=w2"), ids.new_id(ids.DELIVERY), token, "delivered"),
               InvalidArgument)
    unchanged(w, before)


@pytest.mark.clause("A2A-DLV-11")
@pytest.mark.parametrize("state", ["delivered", "failed", DeliveryState.DELIVERED])
def test_finish_sets_state_error_and_times_and_keeps_the_claim(w, clock, state):
    d = w.claimed()
    run = ids.new_id(ids.RUN)
    w.s.bind_delivery_run(w.c, d.id, d.claim_token, run)
    clock.advance(seconds=3)
    done = w.s.finish_delivery(ctx("ws=w1"), d.id, d.claim_token, state, "note")
    expect("A2A-DLV-11", done, w.s.get_delivery(w.c, d.id), "done")
    expect("A2A-DLV-11", done.state, DeliveryState(state), "done.state")
    expect("A2A-DLV-11", done.error, "note", "done.error")
    expect("A2A-DLV-11", done.delivered_at, clock.now() if DeliveryState(state) == DeliveryState.DELIVERED else None,
           "done.delivered_at")
    expect("A2A-DLV-11", done.updated_at, clock.now(), "done.updated_at")
    expect("A2A-DLV-11", (done.claim_token, done.claimed_at, done.run_id), (d.claim_token, d.claimed_at, run),
           "(done.claim_token, done.claimed_at, done.run_id)")


@pytest.mark.clause("A2A-DLV-12")
def test_a_repeated_finish_returns_the_row_unchanged(w, clock):
    d = w.claimed()
    done = w.s.finish_delivery(w.c, d.id, d.claim_token, "failed", "timeout")
    clock.advance(minutes=5)
    for _ in range(2):
        expect("A2A-DLV-12", w.s.finish_delivery(w.c, d.id, d.claim_token, "failed", "timeout"), done,
               'w.s.finish_delivery(w.c, d.id, d.claim_token, "failed", "timeout")')
        expect("A2A-DLV-12", w.s.finish_delivery(w.c, d.id, d.claim_token, DeliveryState.FAILED, "timeout"), done,
               'w.s.finish_delivery(w.c, d.id, d.claim_token, DeliveryState.FAILED, "timeout")')
    expect("A2A-DLV-12", w.s.get_delivery(w.c, d.id), done, "w.s.get_delivery(w.c, d.id)")


@pytest.mark.clause("A2A-DLV-13", "A2A-DLV-14", "A2A-GEN-11")
def test_every_other_finish_is_claim_lost(w):
    q = w.queued()
    d = w.claimed()
    done = w.claimed()
    w.s.finish_delivery(w.c, done.id, done.claim_token, "delivered")
    before = w.view(*VIEW)
    cases = [
        (q.id, "some-token", "delivered", ""),
        (d.id, d.claim_token + "x", "delivered", ""),
        (d.id, "x" + d.claim_token, "failed", ""),
        (done.id, done.claim_token, "failed", ""),
        (done.id, done.claim_token, "delivered", "other error"),
        (done.id, "stranger", "delivered", ""),
    ]
    for did, token, state, error in cases:
        _raise(lambda: w.s.finish_delivery(w.c, did, token, state, error), DeliveryClaimLost)
    _raise(lambda: w.s.finish_delivery(w.c, ids.new_id(ids.DELIVERY), d.claim_token, "delivered"),
           DeliveryNotFound)
    unchanged(w, before)


@pytest.mark.clause("A2A-DLV-14", "A2A-RCL-9", "A2A-BIND-3")
def test_a_late_worker_is_fenced_off_after_a_reclaim(w, clock):
    d = w.claimed()
    late = d.claim_token
    clock.advance(minutes=20)
    expect("A2A-RCL-9", w.s.reclaim_stale_deliveries(ZERO, clock.now()), 1,
           "w.s.reclaim_stale_deliveries(ZERO, clock.now())")
    fresh = w.s.claim_delivery(w.c, d.id)
    expect_op("A2A-RCL-9", fresh.claim_token, "!=", late, "fresh.claim_token")
    before = w.view(*VIEW)
    _raise(lambda: w.s.finish_delivery(w.c, d.id, late, "delivered"), DeliveryClaimLost)
    _raise(lambda: w.s.bind_delivery_run(w.c, d.id, late, ids.new_id(ids.RUN)), DeliveryClaimLost)
    unchanged(w, before)
    expect("A2A-RCL-9", w.s.finish_delivery(w.c, d.id, fresh.claim_token, "delivered").state, DeliveryState.DELIVERED,
           'w.s.finish_delivery(w.c, d.id, fresh.claim_token, "delivered").state')
    # the protocol offers no other way to change a claimed row
    writers = {n for n, fn in inspect.getmembers(A2AStore, inspect.isfunction)
               if "delivery_id" in inspect.signature(fn).parameters}
    expect("A2A-DLV-14", writers, {"get_delivery", "claim_delivery", "bind_delivery_run", "finish_delivery",
                       "mark_delivery_read"}, "writers")
    for name in ("bind_delivery_run", "finish_delivery"):
        expect_op("A2A-DLV-14", "claim_token", "in", inspect.signature(getattr(A2AStore, name)).parameters,
                  '"claim_token"')


@pytest.mark.clause("A2A-BIND-1", "A2A-BIND-4", "A2A-BIND-6")
def test_bind_sets_the_run_once(w, clock):
    d = w.claimed()
    run = ids.new_id(ids.RUN)
    clock.advance(seconds=1)
    bound = w.s.bind_delivery_run(ctx("ws=w1"), d.id, d.claim_token, run)
    expect("A2A-BIND-1", bound, w.s.get_delivery(w.c, d.id), "bound")
    expect("A2A-BIND-1", bound.run_id, run, "bound.run_id")
    expect("A2A-BIND-1", bound.updated_at, clock.now(), "bound.updated_at")
    expect("A2A-BIND-1", bound.state, DeliveryState.DELIVERING, "bound.state")
    expect("A2A-BIND-1", (bound.claim_token, bound.claimed_at), (d.claim_token, d.claimed_at),
           "(bound.claim_token, bound.claimed_at)")
    clock.advance(seconds=1)
    expect("A2A-BIND-4", w.s.bind_delivery_run(w.c, d.id, d.claim_token, run), bound,
           "w.s.bind_delivery_run(w.c, d.id, d.claim_token, run)")  # a repeat
    done = w.s.finish_delivery(w.c, d.id, d.claim_token, "delivered")
    expect("A2A-BIND-6", done.run_id, run, "done.run_id")


@pytest.mark.clause("A2A-BIND-2", "A2A-GEN-11")
def test_bind_argument_checks_come_first(w):
    d = w.claimed()
    before = w.view(*VIEW)
    for token, run in [("", ids.new_id(ids.RUN)), (None, ids.new_id(ids.RUN)), (d.claim_token, "run-1"),
                       (d.claim_token, ids.new_id(ids.MESSAGE)), (d.claim_token, None)]:
        _raise(lambda: w.s.bind_delivery_run(w.c, d.id, token, run), InvalidArgument)
        _raise(lambda: w.s.bind_delivery_run(w.c, ids.new_id(ids.DELIVERY), token, run), InvalidArgument)
    _raise(lambda: w.s.bind_delivery_run(w.c, ids.new_id(ids.DELIVERY), d.claim_token, ids.new_id(ids.RUN)),
           DeliveryNotFound)
    unchanged(w, before)


@pytest.mark.clause("A2A-BIND-3", "A2A-BIND-2", "A2A-GEN-11")
def test_bind_needs_the_current_claim(w):
    q = w.queued()
    d = w.claimed()
    done = w.delivered()
    before = w.view(*VIEW)
    run = ids.new_id(ids.RUN)
    for did, token in [(q.id, "t"), (d.id, "not-the-token"), (done.id, done.claim_token)]:
        _raise(lambda: w.s.bind_delivery_run(w.c, did, token, run), DeliveryClaimLost)
    unchanged(w, before)


@pytest.mark.clause("A2A-BIND-5", "A2A-BIND-2", "A2A-GEN-11")
def test_bind_to_another_run_is_already_bound(w):
    d = w.claimed()
    first = ids.new_id(ids.RUN)
    w.s.bind_delivery_run(w.c, d.id, d.claim_token, first)
    before = w.view(*VIEW)
    err = _raise(lambda: w.s.bind_delivery_run(w.c, d.id, d.claim_token, ids.new_id(ids.RUN)),
                 DeliveryAlreadyBound)
    expect_that("A2A-BIND-5", isinstance(err, InvalidState), "err", Said("an instance of InvalidState"), err)
    # claim lost comes before already bound
    _raise(lambda: w.s.bind_delivery_run(w.c, d.id, "wrong", ids.new_id(ids.RUN)), DeliveryClaimLost)
    unchanged(w, before)
    expect("A2A-GEN-11", w.s.get_delivery(w.c, d.id).run_id, first, "w.s.get_delivery(w.c, d.id).run_id")


@pytest.mark.clause("A2A-RCL-2", "A2A-RCL-3", "A2A-RCL-7", "A2A-RCL-5")
def test_what_is_stale(w, clock):
    t0 = clock.now()
    at_cut = w.claimed()
    clock.advance(milliseconds=1)
    after = w.claimed()
    clock.set(t0 - MS)
    before_cut = w.claimed()
    bound = w.claimed()
    w.s.bind_delivery_run(w.c, bound.id, bound.claim_token, ids.new_id(ids.RUN))
    queued = w.queued()
    done = w.delivered()
    clock.set(t0 + timedelta(hours=1))
    expect("A2A-RCL-2", w.s.reclaim_stale_deliveries(w.c, t0), 1, "w.s.reclaim_stale_deliveries(w.c, t0)")
    moved = w.s.get_delivery(w.c, before_cut.id)
    expect("A2A-RCL-5", moved.state, DeliveryState.QUEUED, "moved.state")
    expect("A2A-RCL-5", (moved.claim_token, moved.claimed_at, moved.updated_at), (None, None, clock.now()),
           "(moved.claim_token, moved.claimed_at, moved.updated_at)")
    expect("A2A-RCL-2", w.s.get_delivery(w.c, at_cut.id), at_cut, "w.s.get_delivery(w.c, at_cut.id)")  # exactly at the cut: not stale
    expect("A2A-RCL-2", w.s.get_delivery(w.c, after.id), after, "w.s.get_delivery(w.c, after.id)")
    expect("A2A-RCL-3", w.s.get_delivery(w.c, bound.id).state, DeliveryState.DELIVERING,
           "w.s.get_delivery(w.c, bound.id).state")
    expect("A2A-RCL-5", w.s.get_delivery(w.c, queued.id), queued, "w.s.get_delivery(w.c, queued.id)")
    expect("A2A-RCL-2", w.s.get_delivery(w.c, done.id), done, "w.s.get_delivery(w.c, done.id)")
    expect("A2A-RCL-2", w.s.reclaim_stale_deliveries(w.c, FAR_FUTURE), 2,
           "w.s.reclaim_stale_deliveries(w.c, FAR_FUTURE)")  # at_cut and after; never the bound one
    expect("A2A-RCL-3", w.s.get_delivery(w.c, bound.id).state, DeliveryState.DELIVERING,
           "w.s.get_delivery(w.c, bound.id).state")


@pytest.mark.clause("A2A-RCL-4", "A2A-RCL-8", "A2A-RCL-6", "A2A-RCL-7")
def test_reclaim_takes_the_oldest_claims_first_up_to_the_limit(w, clock):
    base = ids.new_id(ids.DELIVERY)
    names = [f"dlv_{base[4:-1]}{ch}" for ch in "zyx"]
    made = {}
    for i, did in enumerate(names):
        made[did] = w.queued(id=did)
    # claim z first (oldest), then y and x in the same millisecond
    w.s.claim_delivery(w.c, names[0])
    clock.advance(milliseconds=1)
    w.s.claim_delivery(w.c, names[1])
    w.s.claim_delivery(w.c, names[2])
    clock.advance(seconds=1)
    expected_order = [names[0], names[2], names[1]]  # claimed_at, then id
    expect("A2A-RCL-4", w.s.reclaim_stale_deliveries(w.c, clock.now(), 2), 2,
           "w.s.reclaim_stale_deliveries(w.c, clock.now(), 2)")
    states = {did: w.s.get_delivery(w.c, did).state for did in names}
    expect("A2A-RCL-4", [did for did in expected_order if states[did] == DeliveryState.QUEUED], expected_order[:2],
           "[did for did in expected_order if states[did] == DeliveryState.QUEUED]")
    expect("A2A-RCL-4", w.s.reclaim_stale_deliveries(w.c, clock.now(), 2), 1,
           "w.s.reclaim_stale_deliveries(w.c, clock.now(), 2)")
    expect("A2A-RCL-4", w.s.reclaim_stale_deliveries(w.c, clock.now(), 0), 0,
           "w.s.reclaim_stale_deliveries(w.c, clock.now(), 0)")
    for limit in (0, -1):
        for did in names:
            w.s.claim_delivery(w.c, did)
        clock.advance(seconds=1)
        expect("A2A-RCL-4", w.s.reclaim_stale_deliveries(w.c, clock.now(), limit), 3,
               "w.s.reclaim_stale_deliveries(w.c, clock.now(), limit)")


@pytest.mark.clause("A2A-RCL-9", "A2A-DLV-5", "A2A-QUEUE-1")
def test_reclaimed_row_is_back_in_the_queue_and_claimable(w, clock):
    """Upstream G17: a fresh claim survives an older cutoff; a later cutoff
    reclaims it; the row is queued again and can be claimed with a new token."""
    d = w.claimed()
    expect("A2A-RCL-9", w.s.reclaim_stale_deliveries(ZERO, clock.now() - timedelta(minutes=1)), 0,
           "w.s.reclaim_stale_deliveries(ZERO, clock.now() - timedelta(minutes=1))")
    expect("A2A-RCL-9", w.s.get_delivery(w.c, d.id).state, DeliveryState.DELIVERING,
           "w.s.get_delivery(w.c, d.id).state")
    clock.advance(minutes=16)
    expect("A2A-RCL-9", w.s.reclaim_stale_deliveries(ZERO, clock.now() - timedelta(minutes=15)), 1,
           "w.s.reclaim_stale_deliveries(ZERO, clock.now() - timedelta(minutes=15))")
    expect("A2A-QUEUE-1", [q.id for q in w.s.list_queued_deliveries(ZERO)], [d.id],
           "[q.id for q in w.s.list_queued_deliveries(ZERO)]")
    again = w.s.claim_delivery(w.c, d.id)
    expect_op("A2A-DLV-5", again.claim_token, "not in", (None, d.claim_token), "again.claim_token")
    expect("A2A-DLV-5", again.claimed_at, clock.now(), "again.claimed_at")


# ===========================================================================================
# Inbox, read marks, queue (A2A-INBOX, A2A-READ, A2A-QUEUE)
# ===========================================================================================


@pytest.mark.clause("A2A-INBOX-1", "A2A-GEN-11")
def test_inbox_holds_local_receivers_only(w):
    mine = w.delivered(receiver=Address("worker"))
    w.delivered(receiver=Address("worker", "peer"))
    w.delivered(receiver=Address("Worker"))
    w.delivered(receiver=Address("worker2"))
    expect("A2A-INBOX-1", [d.id for d in w.s.list_inbox(w.c, "worker")], [mine.id],
           '[d.id for d in w.s.list_inbox(w.c, "worker")]')
    expect("A2A-INBOX-1", w.s.list_inbox(w.c, "peer"), [], 'w.s.list_inbox(w.c, "peer")')
    expect("A2A-INBOX-1", [d.receiver for d in w.s.list_inbox(w.c, "Worker")], [Address("Worker")],
           '[d.receiver for d in w.s.list_inbox(w.c, "Worker")]')
    _raise(lambda: w.s.list_inbox(w.c, ""), InvalidArgument)


@pytest.mark.clause("A2A-INBOX-2", "A2A-DLV-11")
def test_inbox_shows_delivered_rows_only(w):
    """Upstream G12: a queued delivery is not in the inbox; claim and deliver
    make it appear."""
    q = w.queued()
    expect("A2A-INBOX-2", w.s.list_inbox(w.c, "worker"), [], 'w.s.list_inbox(w.c, "worker")')
    d = w.s.claim_delivery(w.c, q.id)
    expect("A2A-INBOX-2", w.s.list_inbox(w.c, "worker"), [], 'w.s.list_inbox(w.c, "worker")')
    f = w.claimed()
    w.s.finish_delivery(w.c, f.id, f.claim_token, "failed", "x")
    expect("A2A-INBOX-2", w.s.list_inbox(w.c, "worker"), [], 'w.s.list_inbox(w.c, "worker")')
    done = w.s.finish_delivery(w.c, d.id, d.claim_token, "delivered")
    expect("A2A-INBOX-2", w.s.list_inbox(w.c, "worker"), [done], 'w.s.list_inbox(w.c, "worker")')


@pytest.mark.clause("A2A-INBOX-3", "A2A-READ-1")
def test_unread_only(w, clock):
    a, b = w.delivered(), w.delivered()
    clock.advance(seconds=1)
    read = w.s.mark_delivery_read(w.c, a.id)
    expect("A2A-READ-1", read.read_at, read.updated_at, "read.read_at")
    expect("A2A-READ-1", read.updated_at, clock.now(), "read.updated_at")
    expect("A2A-INBOX-3", [d.id for d in w.s.list_inbox(w.c, "worker", unread_only=True)], [b.id],
           '[d.id for d in w.s.list_inbox(w.c, "worker", unread_only=True)]')
    expect("A2A-INBOX-3", [d.id for d in w.s.list_inbox(w.c, "worker")], [a.id, b.id],
           '[d.id for d in w.s.list_inbox(w.c, "worker")]')


@pytest.mark.clause("A2A-INBOX-4")
def test_inbox_conversation_filter_goes_through_the_message(w):
    conv, other = w.conv(), w.conv()
    m1, m2 = w.send(conv.id), w.send(other.id)
    in_conv = w.delivered(message_id=m1.id)
    w.delivered(message_id=m2.id)
    w.delivered(message_id=ids.new_id(ids.MESSAGE))  # its message does not exist
    hidden = w.at("ws=w9").send(w.at("ws=w9").conv().id)  # a message the caller cannot see
    w.delivered(message_id=hidden.id)
    expect("A2A-INBOX-4", [d.id for d in w.s.list_inbox(w.c, "worker", conversation_id=conv.id)], [in_conv.id],
           '[d.id for d in w.s.list_inbox(w.c, "worker", conversation_id=conv.id)]')
    expect("A2A-INBOX-4", w.s.list_inbox(w.c, "worker", conversation_id=hidden.conversation_id), [],
           'w.s.list_inbox(w.c, "worker", conversation_id=hidden.conversation_id)')
    expect("A2A-INBOX-4", w.s.list_inbox(w.c, "worker", conversation_id=ids.new_id(ids.CONVERSATION)), [],
           'w.s.list_inbox(w.c, "worker", conversation_id=ids.new_id(ids.CONVERSATION))')
    expect("A2A-INBOX-4", len(w.s.list_inbox(w.c, "worker")), 4, 'len(w.s.list_inbox(w.c, "worker"))')


@pytest.mark.clause("A2A-INBOX-5")
def test_inbox_order_is_created_at_then_id(w, clock):
    base = ids.new_id(ids.DELIVERY)
    names = [f"dlv_{base[4:-1]}{ch}" for ch in "mza"]
    for did in names:
        w.delivered(id=did)
    clock.advance(milliseconds=1)
    last = w.delivered().id
    expect("A2A-INBOX-5", [d.id for d in w.s.list_inbox(w.c, "worker")], sorted(names) + [last],
           '[d.id for d in w.s.list_inbox(w.c, "worker")]')


@pytest.mark.clause("A2A-READ-2")
def test_first_read_time_is_kept(w, clock):
    d = w.delivered()
    clock.advance(seconds=1)
    first = w.s.mark_delivery_read(w.c, d.id)
    for _ in range(2):
        clock.advance(seconds=1)
        expect("A2A-READ-2", w.s.mark_delivery_read(ctx("ws=w1"), d.id), first,
               'w.s.mark_delivery_read(ctx("ws=w1"), d.id)')
    expect("A2A-READ-2", w.s.get_delivery(w.c, d.id).read_at, first.read_at, "w.s.get_delivery(w.c, d.id).read_at")


@pytest.mark.clause("A2A-READ-3", "A2A-GEN-11")
def test_only_delivered_rows_can_be_marked_read(w):
    q, c = w.queued(), w.claimed()
    f = w.claimed()
    w.s.finish_delivery(w.c, f.id, f.claim_token, "failed")
    before = w.view(*VIEW)
    for d in (q, c, f):
        _raise(lambda: w.s.mark_delivery_read(w.c, d.id), InvalidState)
    _raise(lambda: w.s.mark_delivery_read(w.c, ids.new_id(ids.DELIVERY)), DeliveryNotFound)
    unchanged(w, before)


@pytest.mark.clause("A2A-QUEUE-1", "A2A-GEN-2")
def test_queue_lists_queued_rows_of_every_scope_in_order(w, clock):
    base = ids.new_id(ids.DELIVERY)
    names = [f"dlv_{base[4:-1]}{ch}" for ch in "kbx"]
    for did, sc in zip(names, ["ws=w1", "ws=w10", "org=w1"]):
        w.at(sc).queued(id=did)
    clock.advance(milliseconds=1)
    last = w.at("ws=w2/proj=p").queued().id
    w.claimed()
    w.delivered()
    got = w.s.list_queued_deliveries(ctx("zz=top"))
    expect("A2A-QUEUE-1", [d.id for d in got], sorted(names) + [last], "[d.id for d in got]")
    expect("A2A-QUEUE-1", [d.scope for d in got][-1], S("ws=w2/proj=p"), "[d.scope for d in got][-1]")
    expect("A2A-QUEUE-1", [d.id for d in w.s.list_queued_deliveries(ZERO, 2)], sorted(names)[:2],
           "[d.id for d in w.s.list_queued_deliveries(ZERO, 2)]")


# ===========================================================================================
# Pending asks (A2A-ASK)
# ===========================================================================================


@pytest.mark.clause("A2A-ASK-1", "A2A-ASK-2", "A2A-GEN-11")
def test_create_and_get_pending_ask(w, clock):
    clock.advance(seconds=1)
    a = w.ask(deadline=EPOCH + timedelta(minutes=5), expected=Address("worker", "peer"))
    mine = w.s.get_pending_ask(w.c, a.reply_with)
    expect("A2A-ASK-2", mine, a, "get_pending_ask of the ask just created, from its own scope")
    expect("A2A-ASK-2", w.s.get_pending_ask(ctx("ws=w1"), a.reply_with), mine, "get_pending_ask from an ancestor scope")
    expect_is("A2A-ASK-1", a.claimed_at, None, "a.claimed_at")
    expect("A2A-ASK-1", a.created_at, a.updated_at, "a.created_at")
    expect("A2A-ASK-1", a.updated_at, clock.now(), "a.updated_at")
    before = w.view(*VIEW)
    for bad in (dict(reply_with=""), dict(claimed_at=EPOCH)):
        _raise(lambda: w.s.create_pending_ask(w.c, make_ask(**bad)), InvalidArgument)
    _raise(lambda: w.s.get_pending_ask(w.c, "rw-nobody"), AskNotFound)
    unchanged(w, before)
    # claimed or not, get still returns it
    w.s.claim_pending_ask(w.c, a.reply_with)
    expect("A2A-ASK-2", w.s.get_pending_ask(w.c, a.reply_with).claimed_at, clock.now(),
           "w.s.get_pending_ask(w.c, a.reply_with).claimed_at")


@pytest.mark.clause("A2A-ASK-3", "A2A-ASK-4", "A2A-GEN-11")
def test_claim_pending_ask_once(w, clock):
    a = w.ask()
    clock.advance(seconds=1)
    claimed = w.s.claim_pending_ask(ctx("ws=w1"), a.reply_with)
    expect("A2A-ASK-3", claimed.claimed_at, claimed.updated_at, "claimed.claimed_at")
    expect("A2A-ASK-3", claimed.updated_at, clock.now(), "claimed.updated_at")
    expect("A2A-ASK-3", claimed, w.s.get_pending_ask(w.c, a.reply_with), "claimed")
    before = w.view(*VIEW)
    clock.advance(seconds=1)
    for c in (w.c, ctx("ws=w1")):
        _raise(lambda: w.s.claim_pending_ask(c, a.reply_with), AskAlreadyClaimed)
    unchanged(w, before)


@pytest.mark.clause("A2A-ASK-5", "A2A-GEN-4")
def test_claim_of_an_ask_elsewhere_is_not_found(w):
    """Upstream G16: a cross-scope ask claim is 'ask not found'."""
    a = w.ask()
    before = w.view(*VIEW)
    for c in [ctx("ws=w2"), ctx("ws=w1/proj=p2"), ctx(HOME + "/env=e1"), ctx(HOME, "orch-1")]:
        _raise(lambda: w.s.claim_pending_ask(c, a.reply_with), AskNotFound)
        _raise(lambda: w.s.get_pending_ask(c, a.reply_with), AskNotFound)
    _raise(lambda: w.s.claim_pending_ask(w.c, "rw-missing"), AskNotFound)
    unchanged(w, before)
    expect("A2A-ASK-5", w.s.claim_pending_ask(w.c, a.reply_with).reply_with, a.reply_with,
           "w.s.claim_pending_ask(w.c, a.reply_with).reply_with")


@pytest.mark.clause("A2A-ASK-7", "A2A-ASK-1")
def test_a_claim_is_permanent(w, clock):
    a = w.ask(deadline=EPOCH, conversation_id=w.conv().id)
    w.s.claim_pending_ask(w.c, a.reply_with)
    names = {n for n, _ in inspect.getmembers(A2AStore, inspect.isfunction)}
    expect_false("A2A-ASK-7",
                 {n for n in names if "ask" in n and n.startswith(("delete", "release", "unclaim", "update"))},
                 '{n for n in names if "ask" in n and n.startswith(("delete", "release", "unclaim", "update"))}')
    clock.advance(days=1)
    w.s.reclaim_stale_deliveries(ZERO, FAR_FUTURE)
    _raise(lambda: w.s.create_pending_ask(w.c, make_ask(reply_with=a.reply_with)), AlreadyExists)
    expect("A2A-ASK-7", w.s.get_pending_ask(w.c, a.reply_with).claimed_at, EPOCH,
           "w.s.get_pending_ask(w.c, a.reply_with).claimed_at")
    expect("A2A-ASK-7", w.s.list_pending_asks_by_conversation(w.c, a.conversation_id), [],
           "w.s.list_pending_asks_by_conversation(w.c, a.conversation_id)")


@pytest.mark.clause("A2A-ASK-8", "A2A-ASK-9", "A2A-ASK-10", "A2A-ASK-11")
def test_expired_asks(w):
    """Upstream G15: only the overdue ask is listed; a claimed one disappears."""
    d = EPOCH + timedelta(minutes=10)
    due = w.ask(deadline=d)
    early = w.ask(deadline=d - MS)
    late = w.ask(deadline=d + MS)
    w.ask(deadline=None)
    other = w.at("ws=w2").ask(deadline=d - timedelta(days=1))
    got = [a.reply_with for a in w.s.list_expired_asks(w.c, d)]
    expect("A2A-ASK-8", got, [early.reply_with, due.reply_with], "got")  # deadline == now belongs to the sweep
    expect("A2A-ASK-8", [a.reply_with for a in w.s.list_expired_asks(w.c, d - MS)], [early.reply_with],
           "[a.reply_with for a in w.s.list_expired_asks(w.c, d - MS)]")
    expect("A2A-ASK-8", [a.reply_with for a in w.s.list_expired_asks(w.c, d, 1)], [early.reply_with],
           "[a.reply_with for a in w.s.list_expired_asks(w.c, d, 1)]")
    w.s.claim_pending_ask(w.c, due.reply_with)
    expect("A2A-ASK-8", [a.reply_with for a in w.s.list_expired_asks(w.c, FAR_FUTURE)], [early.reply_with,
                                                                              late.reply_with], "[a.reply_with for a in w.s.list_expired_asks(w.c, FAR_FUTURE)]")
    expect("A2A-ASK-8", [a.reply_with for a in w.s.list_expired_asks_across_scopes(ZERO, d)], [other.reply_with,
                                                                                   early.reply_with], "[a.reply_with for a in w.s.list_expired_asks_across_scopes(ZERO, d)]")
    # sweeping the backlog twice: the second pass finds nothing
    for a in w.s.list_expired_asks_across_scopes(ZERO, FAR_FUTURE):
        w.s.claim_pending_ask(Context(a.scope), a.reply_with)
    expect("A2A-ASK-8", w.s.list_expired_asks_across_scopes(ZERO, FAR_FUTURE), [],
           "w.s.list_expired_asks_across_scopes(ZERO, FAR_FUTURE)")
    expect("A2A-ASK-8", w.s.list_expired_asks(w.c, FAR_FUTURE), [], "w.s.list_expired_asks(w.c, FAR_FUTURE)")


@pytest.mark.clause("A2A-ASK-8")
def test_expired_asks_order_deadline_then_reply_with(w):
    for rw in ("rw-c", "rw-a", "rw-b"):
        w.ask(reply_with=rw, deadline=EPOCH)
    w.ask(reply_with="rw-0", deadline=EPOCH + MS)
    w.at("ws=w1/proj=p1/env=e1").ask(reply_with="rw-B", deadline=EPOCH)
    want = ["rw-B", "rw-a", "rw-b", "rw-c", "rw-0"]  # code point order: "B" < "a"
    expect("A2A-ASK-8", [a.reply_with for a in w.s.list_expired_asks(w.c, FAR_FUTURE)], want,
           "[a.reply_with for a in w.s.list_expired_asks(w.c, FAR_FUTURE)]")
    expect("A2A-ASK-8", [a.reply_with for a in w.s.list_expired_asks_across_scopes(ZERO, FAR_FUTURE)], want,
           "[a.reply_with for a in w.s.list_expired_asks_across_scopes(ZERO, FAR_FUTURE)]")


@pytest.mark.clause("A2A-ASK-12", "A2A-GEN-2")
def test_sweeper_lists_expired_asks_of_every_scope_from_no_scope(w):
    made = {}
    for sc in ["ws=w1", "ws=w10/proj=p", "org=w1"]:
        made[w.at(sc).ask(deadline=EPOCH).reply_with] = S(sc)
    w.at(ctx("ws=w1", "orch-1")).ask(deadline=EPOCH)
    for c in (ZERO, ctx("ws=w1"), ctx("zz=1")):
        got = w.s.list_expired_asks_across_scopes(c, EPOCH)
        expect("A2A-ASK-12", {a.reply_with: a.scope for a in got}, made, "{a.reply_with: a.scope for a in got}")
    expect("A2A-ASK-12", len(w.s.list_expired_asks_across_scopes(Context(Scope(), "orch-1"), EPOCH)), 1,
           'len(w.s.list_expired_asks_across_scopes(Context(Scope(), "orch-1"), EPOCH))')


@pytest.mark.clause("A2A-ASK-13")
def test_pending_asks_by_conversation(w, clock):
    conv = w.conv()
    a = w.ask(conversation_id=conv.id, reply_with="rw-z")
    b = w.ask(conversation_id=conv.id, reply_with="rw-a")
    clock.advance(milliseconds=1)
    c = w.ask(conversation_id=conv.id, reply_with="rw-0", deadline=EPOCH)
    w.ask(conversation_id=w.conv().id)
    w.at("ws=w2").ask(conversation_id=conv.id)
    deep = w.at(HOME + "/env=e1").ask(conversation_id=conv.id, reply_with="rw-m")
    expect("A2A-ASK-13", [x.reply_with for x in w.s.list_pending_asks_by_conversation(w.c, conv.id)], [
        b.reply_with, a.reply_with, c.reply_with, deep.reply_with], "[x.reply_with for x in w.s.list_pending_asks_by_conversation(w.c, conv.id)]")
    w.s.claim_pending_ask(w.c, b.reply_with)
    expect("A2A-ASK-13", [x.reply_with for x in w.s.list_pending_asks_by_conversation(w.c, conv.id)], [
        a.reply_with, c.reply_with, deep.reply_with], "[x.reply_with for x in w.s.list_pending_asks_by_conversation(w.c, conv.id)]")


# ===========================================================================================
# Upstream round trip and scope isolation (G12, G16)
# ===========================================================================================


@pytest.mark.clause("A2A-ENV-4", "A2A-HOP-8", "A2A-CONV-5", "A2A-CONV-6", "A2A-INBOX-2", "A2A-DLV-5",
                    "A2A-DLV-11", "A2A-INBOX-1", "A2A-READ-1", "A2A-INBOX-3")
def test_round_trip(w):
    conv = w.conv(hop_ceiling=8)
    msg = w.send(conv.id, performative="inform", receivers=(Address("worker"),))
    got = w.s.get_conversation(w.c, conv.id)
    expect("A2A-HOP-8", got.hops_used, 1, "got.hops_used")
    expect_op("A2A-HOP-8", Address("worker"), "in", got.participants, 'Address("worker")')
    updated = w.s.update_conversation(w.c, attrs.evolve(got, protocol="fipa-request", hops_used=0,
                                                        participants=()))
    expect("A2A-CONV-6", updated.hops_used, 1, "updated.hops_used")
    expect("A2A-CONV-6", updated.participants, got.participants, "updated.participants")
    d = w.queued(message_id=msg.id)
    expect("A2A-INBOX-2", w.s.list_inbox(w.c, "worker"), [], 'w.s.list_inbox(w.c, "worker")')
    claimed = w.s.claim_delivery(w.c, d.id)
    w.s.finish_delivery(w.c, d.id, claimed.claim_token, "delivered")
    expect("A2A-INBOX-3", [x.id for x in w.s.list_inbox(w.c, "worker", unread_only=True)], [d.id],
           '[x.id for x in w.s.list_inbox(w.c, "worker", unread_only=True)]')
    w.s.mark_delivery_read(w.c, d.id)
    expect("A2A-INBOX-3", w.s.list_inbox(w.c, "worker", unread_only=True), [],
           'w.s.list_inbox(w.c, "worker", unread_only=True)')
    expect("A2A-ENV-4", w.s.get_message(w.c, msg.id).content, msg.content, "w.s.get_message(w.c, msg.id).content")


@pytest.mark.clause("A2A-GEN-3", "A2A-GEN-4", "A2A-ENV-4", "A2A-ENV-5", "A2A-CONV-4", "A2A-INBOX-1",
                    "A2A-ASK-5")
def test_scope_isolation(w):
    a, b = w.at("ws=a"), w.at("ws=b")
    conv = a.conv()
    msg = a.send(conv.id)
    a.delivered(message_id=msg.id)
    ask = a.ask(conversation_id=conv.id)
    _raise(lambda: w.s.get_message(b.c, msg.id), MessageNotFound)
    _raise(lambda: w.s.get_conversation(b.c, conv.id), ConversationNotFound)
    expect("A2A-INBOX-1", w.s.list_inbox(b.c, "worker"), [], 'w.s.list_inbox(b.c, "worker")')
    expect("A2A-ENV-5", w.s.list_messages(b.c), [], "w.s.list_messages(b.c)")
    _raise(lambda: w.s.claim_pending_ask(b.c, ask.reply_with), AskNotFound)
    expect("A2A-INBOX-1", len(w.s.list_inbox(a.c, "worker")), 1, 'len(w.s.list_inbox(a.c, "worker"))')
    expect("A2A-ENV-5", len(w.s.list_messages(a.c)), 1, "len(w.s.list_messages(a.c))")


# ===========================================================================================
# Races (example-based; the concurrent machine runs them too)
# ===========================================================================================


def _one_winner(clause_id: str, outcomes, loser: type) -> Any:
    """The one racing call that succeeded; every other raised ``loser``
    (both charged to ``clause_id``, the race's clause)."""
    winners = [o for o in outcomes if o.ok]
    expect(clause_id, len(winners), 1, "how many racing calls succeeded; the errors: "
           + shorten([o.error for o in outcomes]))
    for o in outcomes:
        if not o.ok:
            expect_that(clause_id, isinstance(o.error, loser), "the error of a losing call",
                        Said(f"a {loser.__name__}"), o.error)
    return winners[0].value


@pytest.mark.clause("A2A-RACE-1", "A2A-DLV-9", "A2A-DLV-5", "A2A-DLV-7")
def test_race_claims_of_one_delivery(w, profile):
    """Upstream G14 with `race_threads` contenders instead of two."""
    for _ in range(profile.race_rounds):
        d = w.queued()
        callers = [w.c, ctx("ws=w1")]
        won = _one_winner("A2A-RACE-1", race([functools.partial(w.s.claim_delivery, callers[i % 2], d.id)
                                for i in range(profile.race_threads)]), DeliveryAlreadyClaimed)
        expect("A2A-RACE-1", w.s.get_delivery(w.c, d.id), won, "w.s.get_delivery(w.c, d.id)")


@pytest.mark.clause("A2A-RACE-2", "A2A-RCL-5", "A2A-DLV-13")
def test_race_finish_against_reclaim(w, clock, profile):
    for _ in range(profile.race_rounds * 2):
        d = w.claimed()
        clock.advance(milliseconds=5)
        cut = clock.now()
        finish, reclaim = race([
            lambda: w.s.finish_delivery(w.c, d.id, d.claim_token, "delivered"),
            lambda: w.s.reclaim_stale_deliveries(ZERO, cut),
        ])
        expect_is("A2A-RACE-2", reclaim.error, None, "the error raised by the racing call reclaim")
        got = w.s.get_delivery(w.c, d.id)
        if finish.ok:
            expect("A2A-RACE-2", reclaim.value, 0, "reclaim.value")
            expect("A2A-RACE-2", got.state, DeliveryState.DELIVERED, "got.state")
        else:
            expect_that("A2A-RACE-2", isinstance(finish.error, DeliveryClaimLost), "finish.error",
                        Said("an instance of DeliveryClaimLost"), finish.error)
            expect("A2A-RACE-2", reclaim.value, 1, "reclaim.value")
            expect("A2A-RCL-5", got.state, DeliveryState.QUEUED, "got.state")


def _claim_until_won(store: Any, c: Context, did: str, seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            return store.claim_delivery(c, did)
        except DeliveryAlreadyClaimed:
            time.sleep(0.0001)
    raise AssertionError("the row never came back to the queue")


@pytest.mark.clause("A2A-RACE-3", "A2A-RCL-5", "A2A-RCL-6")
def test_race_reclaims_never_push_back_a_fresh_claim(w, clock, profile):
    """A stale row; several reclaims and a worker that claims it as soon as it
    is queued again.  The clock stands still, so the worker's claim is not
    stale: whatever the interleaving, exactly one reclaim moves the row and
    the worker keeps its claim."""
    reclaimers = max(profile.race_threads - 1, 2)
    for _ in range(profile.race_rounds):
        d = w.claimed()
        clock.advance(seconds=1)
        cut = clock.now()
        outcomes = race([lambda: _claim_until_won(w.s, w.c, d.id)]
                        + [functools.partial(w.s.reclaim_stale_deliveries, ZERO, cut)] * reclaimers)
        worker, moves = outcomes[0], outcomes[1:]
        expect_is("A2A-RACE-3", worker.error, None, "the error raised by the racing call worker")
        expect_true("A2A-RCL-6", all(m.ok for m in moves),
                    "all(m.ok for m in moves)" + ": " + shorten([m.error for m in moves]))
        expect("A2A-RACE-3", sum(m.value for m in moves), 1, "sum(m.value for m in moves)")
        got = w.s.get_delivery(w.c, d.id)
        expect("A2A-RCL-5", got.state, DeliveryState.DELIVERING, "got.state")
        expect("A2A-RCL-5", got.claim_token, worker.value.claim_token, "got.claim_token")
        w.s.finish_delivery(w.c, d.id, got.claim_token, "delivered")  # out of the next round's way


@pytest.mark.clause("A2A-RACE-4", "A2A-RCL-3", "A2A-BIND-3")
def test_race_bind_against_reclaim(w, clock, profile):
    for _ in range(profile.race_rounds * 2):
        d = w.claimed()
        clock.advance(milliseconds=5)
        run = ids.new_id(ids.RUN)
        bind, reclaim = race([
            lambda: w.s.bind_delivery_run(w.c, d.id, d.claim_token, run),
            lambda: w.s.reclaim_stale_deliveries(ZERO, clock.now()),
        ])
        got = w.s.get_delivery(w.c, d.id)
        if bind.ok:
            expect("A2A-RACE-4", reclaim.value, 0, "reclaim.value")
            expect("A2A-RACE-4", got.run_id, run, "got.run_id")
            expect("A2A-RACE-4", got.state, DeliveryState.DELIVERING, "got.state")
        else:
            expect_that("A2A-RACE-4", isinstance(bind.error, DeliveryClaimLost), "bind.error",
                        Said("an instance of DeliveryClaimLost"), bind.error)
            expect("A2A-RACE-4", reclaim.value, 1, "reclaim.value")
            expect("A2A-RACE-4", got.state, DeliveryState.QUEUED, "got.state")
            expect_is("A2A-RACE-4", got.run_id, None, "got.run_id")


@pytest.mark.clause("A2A-RACE-5", "A2A-BIND-5")
def test_race_binds_of_different_runs(w, profile):
    for _ in range(profile.race_rounds):
        d = w.claimed()
        runs = [ids.new_id(ids.RUN) for _ in range(max(profile.race_threads // 2, 2))]
        won = _one_winner("A2A-RACE-5", race([functools.partial(w.s.bind_delivery_run, w.c, d.id, d.claim_token, r)
                                for r in runs]), DeliveryAlreadyBound)
        expect("A2A-RACE-5", w.s.get_delivery(w.c, d.id).run_id, won.run_id, "w.s.get_delivery(w.c, d.id).run_id")


@pytest.mark.clause("A2A-RACE-6", "A2A-HOP-10", "A2A-HOP-11", "A2A-HOP-7")
def test_race_senders_against_the_hop_ceiling(w, profile):
    senders = max(profile.race_threads, 3)
    for _ in range(profile.race_rounds):
        ceiling = senders - 2
        conv = w.conv(hop_ceiling=ceiling)
        w.send(conv.id)  # one hop used: ceiling - 1 left for `senders` senders
        outcomes = race([functools.partial(w.s.record_message, w.c, make_envelope(conv.id))
                         for _ in range(senders)])
        admitted = [o.value for o in outcomes if o.ok]
        expect("A2A-RACE-6", len(admitted), ceiling - 1, "len(admitted)" + ": " + shorten([o.error for o in outcomes]))
        for o in outcomes:
            if not o.ok:
                expect_that("A2A-RACE-6", isinstance(o.error, HopCeilingExceeded),
                            "o.error" + ": " + shorten(repr(o.error)), Said("an instance of HopCeilingExceeded"),
                            o.error)
        expect("A2A-RACE-6", sorted(e.hops for e in admitted), list(range(2, ceiling + 1)),
               "sorted(e.hops for e in admitted)")
        expect("A2A-RACE-6", w.s.get_conversation(w.c, conv.id).hops_used, ceiling,
               "w.s.get_conversation(w.c, conv.id).hops_used")
        stored = w.s.list_messages(w.c, conversation_id=conv.id)
        expect("A2A-RACE-6", sorted(m.hops for m in stored), list(range(1, ceiling + 1)),
               "sorted(m.hops for m in stored)")


@pytest.mark.clause("A2A-RACE-7", "A2A-HOP-6")
def test_race_send_against_close(w, profile):
    for _ in range(profile.race_rounds):
        conv = w.conv()
        outcomes = race([lambda: w.s.update_conversation(w.c, attrs.evolve(conv, status="closed"))]
                        + [functools.partial(w.s.record_message, w.c, make_envelope(conv.id))
                           for _ in range(3)])
        expect_true("A2A-RACE-7", outcomes[0].ok, "outcomes[0].ok" + ": " + shorten(repr(outcomes[0].error)))
        admitted = [o for o in outcomes[1:] if o.ok]
        for o in outcomes[1:]:
            if not o.ok:
                expect_that("A2A-RACE-7", isinstance(o.error, ConversationClosed),
                            "o.error" + ": " + shorten(repr(o.error)), Said("an instance of ConversationClosed"),
                            o.error)
        got = w.s.get_conversation(w.c, conv.id)
        expect("A2A-RACE-7", got.status, ConversationStatus.CLOSED, "got.status")
        expect("A2A-RACE-7", got.hops_used, len(admitted), "got.hops_used")
        expect("A2A-RACE-7", len(w.s.list_messages(w.c, conversation_id=conv.id)), len(admitted),
               "len(w.s.list_messages(w.c, conversation_id=conv.id))")


@pytest.mark.clause("A2A-RACE-8", "A2A-HOP-3")
def test_race_the_same_envelope_recorded_at_once(w, profile):
    for _ in range(profile.race_rounds):
        conv = w.conv()
        env = make_envelope(conv.id)
        outcomes = race([functools.partial(w.s.record_message, w.c, env)
                         for _ in range(max(profile.race_threads // 2, 2))])
        expect_true("A2A-RACE-8", all(o.ok for o in outcomes),
                    "all(o.ok for o in outcomes)" + ": " + shorten([o.error for o in outcomes]))
        first = outcomes[0].value
        for o in outcomes:
            expect_strict("A2A-RACE-8", o.value, first, "a racing retry")
        expect("A2A-RACE-8", first.hops, 1, "first.hops")
        expect("A2A-RACE-8", w.s.get_conversation(w.c, conv.id).hops_used, 1,
               "w.s.get_conversation(w.c, conv.id).hops_used")


@pytest.mark.clause("A2A-RACE-9", "A2A-ASK-6", "A2A-ASK-3", "A2A-ASK-4")
def test_race_claims_of_one_ask(w, profile):
    """Upstream G13 with `race_threads` contenders (reply, sweep, cancel)."""
    for _ in range(profile.race_rounds):
        a = w.ask(deadline=EPOCH)
        callers = [w.c, ctx("ws=w1")]
        won = _one_winner("A2A-RACE-9", race([functools.partial(w.s.claim_pending_ask, callers[i % 2], a.reply_with)
                                for i in range(profile.race_threads)]), AskAlreadyClaimed)
        expect("A2A-RACE-9", w.s.get_pending_ask(w.c, a.reply_with), won, "w.s.get_pending_ask(w.c, a.reply_with)")


@pytest.mark.clause("A2A-RACE-10", "A2A-ASK-10", "A2A-ASK-9")
def test_race_ask_claim_against_the_sweep_lists(w, clock, profile):
    for _ in range(profile.race_rounds):
        a = w.ask(deadline=clock.now())
        now = clock.now()
        outcomes = race([
            lambda: w.s.claim_pending_ask(w.c, a.reply_with),
            lambda: [x.reply_with for x in w.s.list_expired_asks(w.c, now)],
            lambda: [x.reply_with for x in w.s.list_expired_asks_across_scopes(ZERO, now)],
        ])
        expect_true("A2A-RACE-10", all(o.ok for o in outcomes), "all(o.ok for o in outcomes)")
        for listed in (outcomes[1].value, outcomes[2].value):
            expect_op("A2A-RACE-10", listed, "in", ([], [a.reply_with]), "listed")
        expect("A2A-RACE-10", w.s.list_expired_asks(w.c, now), [], "w.s.list_expired_asks(w.c, now)")
        expect("A2A-RACE-10", w.s.list_expired_asks_across_scopes(ZERO, now), [],
               "w.s.list_expired_asks_across_scopes(ZERO, now)")
        clock.advance(milliseconds=1)


@pytest.mark.clause("A2A-RACE-11", "A2A-READ-2")
def test_race_read_marks_keep_the_first_time(w, clock, profile):
    """Each contender moves the clock before marking, so a store that stamps
    again would return different read times."""
    for _ in range(profile.race_rounds):
        d = w.delivered()

        def mark() -> Any:
            clock.advance(milliseconds=1)
            return w.s.mark_delivery_read(w.c, d.id)

        outcomes = race([mark] * profile.race_threads)
        expect_true("A2A-RACE-11", all(o.ok for o in outcomes),
                    "all(o.ok for o in outcomes)" + ": " + shorten([o.error for o in outcomes]))
        times = {o.value.read_at for o in outcomes}
        expect("A2A-RACE-11", len(times), 1, "len(times)" + ": " + shorten(times))
        expect("A2A-RACE-11", w.s.get_delivery(w.c, d.id).read_at, times.pop(), "w.s.get_delivery(w.c, d.id).read_at")


@pytest.mark.clause("A2A-RACE-12", "A2A-QUEUE-1", "A2A-INBOX-2")
def test_race_claim_against_queue_and_finish_against_inbox(w, profile):
    for _ in range(profile.race_rounds):
        q = w.queued()
        f = w.claimed()
        outcomes = race([
            lambda: w.s.claim_delivery(w.c, q.id),
            lambda: [d.id for d in w.s.list_queued_deliveries(ZERO)],
            lambda: w.s.finish_delivery(w.c, f.id, f.claim_token, "delivered"),
            lambda: [d.id for d in w.s.list_inbox(w.c, "worker")],
        ])
        expect_true("A2A-RACE-12", all(o.ok for o in outcomes),
                    "all(o.ok for o in outcomes)" + ": " + shorten([o.error for o in outcomes]))
        expect_op("A2A-RACE-12", q.id, "not in", [d.id for d in w.s.list_queued_deliveries(ZERO)], "q.id")
        expect_op("A2A-RACE-12", f.id, "in", [d.id for d in w.s.list_inbox(w.c, "worker")], "f.id")
        for row in w.s.list_inbox(w.c, "worker"):
            expect("A2A-RACE-12", row.state, DeliveryState.DELIVERED, "row.state")
        expect_op("A2A-RACE-12", q.id, "not in", outcomes[3].value, "q.id")  # never delivered: never in any inbox read


@pytest.mark.clause("A2A-RACE-13", "A2A-ASK-1", "A2A-PEER-3", "A2A-GEN-9")
def test_race_duplicate_asks_and_peer_pairs(w, profile):
    scopes = ["ws=w1", "ws=w2", "ws=w10", "org=w1", HOME, "a=1", "b=2", "c=3"]
    for i in range(profile.race_rounds):
        rw = f"rw-race-{i}"
        won = _one_winner("A2A-RACE-13", race([functools.partial(w.s.create_pending_ask, ctx(sc), make_ask(reply_with=rw))
                                for sc in scopes[: profile.race_threads]]), AlreadyExists)
        expect("A2A-RACE-13", w.s.get_pending_ask(Context(won.scope), rw).scope, won.scope,
               "the scope of the ask that won")
        _one_winner("A2A-RACE-13", race([functools.partial(w.s.create_conversation, w.c,
                                            make_conversation(peer_node="n", peer_context=f"t{i}"))
                          for _ in range(max(profile.race_threads // 2, 2))]), AlreadyExists)
        expect("A2A-PEER-3", len([c for c in w.s.list_conversations(w.c, exact=True) if c.peer_context == f"t{i}"]), 1,
               'len([c for c in w.s.list_conversations(w.c, exact=True) if c.peer_context == f"t{i}"])')


@pytest.mark.clause("A2A-RACE-14", "A2A-PART-3", "A2A-PART-5")
def test_race_contenders_split_over_two_partitions(w, clock, profile):
    mine, theirs = w.at(ctx(HOME, "orch-1")), w.at(ctx(HOME, "orch-2"))
    for _ in range(profile.race_rounds):
        q = mine.queued()
        stale = mine.claimed()
        a = mine.ask()
        clock.advance(milliseconds=1)
        cut = clock.now()
        outcomes = race([
            lambda: w.s.claim_delivery(mine.c, q.id),
            lambda: w.s.claim_delivery(theirs.c, q.id),
            lambda: w.s.reclaim_stale_deliveries(Context(Scope(), "orch-2"), cut),
            lambda: w.s.claim_pending_ask(theirs.c, a.reply_with),
            lambda: w.s.claim_pending_ask(mine.c, a.reply_with),
            lambda: w.s.list_queued_deliveries(Context(Scope(), "orch-2")),
        ])
        expect_true("A2A-RACE-14", outcomes[0].ok, "outcomes[0].ok" + ": " + shorten([o.error for o in outcomes]))
        expect_true("A2A-RACE-14", outcomes[4].ok, "outcomes[4].ok" + ": " + shorten([o.error for o in outcomes]))
        expect_that("A2A-RACE-14", isinstance(outcomes[1].error, DeliveryNotFound), "outcomes[1].error",
                    Said("an instance of DeliveryNotFound"), outcomes[1].error)
        expect("A2A-RACE-14", outcomes[2].value, 0, "outcomes[2].value")
        expect_that("A2A-RACE-14", isinstance(outcomes[3].error, AskNotFound), "outcomes[3].error",
                    Said("an instance of AskNotFound"), outcomes[3].error)
        expect("A2A-RACE-14", outcomes[5].value, [], "outcomes[5].value")
        expect("A2A-RACE-14", w.s.get_delivery(mine.c, stale.id), stale, "w.s.get_delivery(mine.c, stale.id)")


# ===========================================================================
# What this class gives the scope and common suites (conformance/examples.py)
# ===========================================================================


def _shared() -> SimpleNamespace:
    """A run and a step the whole-state view of one scope test reads."""
    return SimpleNamespace(run_id=ids.new_id(ids.RUN), step_id=ids.new_id(ids.STEP))


def _examples_seed(store: Any, fixture: Any) -> SimpleNamespace:
    """A conversation with a message, a queued, an in-flight and a delivered
    delivery, and an overdue pending ask, at HOME."""
    c = ctx(HOME)
    w = SimpleNamespace()
    w.conv_id = store.create_conversation(c, make_conversation(peer_node="peer", peer_context="thread-1")).id
    w.msg_id = store.record_message(c, make_envelope(w.conv_id)).id
    w.delivery_id = store.create_delivery(c, make_delivery(w.msg_id)).id
    claimed = store.claim_delivery(c, store.create_delivery(c, make_delivery(w.msg_id)).id)
    w.claimed_id, w.claim_token = claimed.id, claimed.claim_token
    done = store.claim_delivery(c, store.create_delivery(c, make_delivery(w.msg_id)).id)
    w.delivered_id = store.finish_delivery(c, done.id, done.claim_token, DeliveryState.DELIVERED).id
    w.reply_with = store.create_pending_ask(c, make_ask(w.conv_id, deadline=PAST)).reply_with
    w.delivery_ids = [w.delivery_id, w.claimed_id, w.delivered_id]
    w.view = dict(delivery_ids=w.delivery_ids, reply_withs=[w.reply_with], conversation_ids=[w.conv_id])
    return w


#: A call of each method with valid arguments addressing the seeded rows.
_GOOD_CALLS: dict[str, Callable[[Any, Any, SimpleNamespace], Any]] = {
    "record_message": lambda s, c, w: s.record_message(c, make_envelope(w.conv_id)),
    "get_message": lambda s, c, w: s.get_message(c, w.msg_id),
    "list_messages": lambda s, c, w: s.list_messages(c),
    "create_conversation": lambda s, c, w: s.create_conversation(c, make_conversation()),
    "get_conversation": lambda s, c, w: s.get_conversation(c, w.conv_id),
    "get_conversation_by_peer_context": lambda s, c, w: s.get_conversation_by_peer_context(c, "peer", "thread-1"),
    "update_conversation": lambda s, c, w: s.update_conversation(c, make_conversation(id=w.conv_id, status="closed")),
    "list_conversations": lambda s, c, w: s.list_conversations(c),
    "create_delivery": lambda s, c, w: s.create_delivery(c, make_delivery()),
    "get_delivery": lambda s, c, w: s.get_delivery(c, w.delivery_id),
    "claim_delivery": lambda s, c, w: s.claim_delivery(c, w.delivery_id),
    "bind_delivery_run": lambda s, c, w: s.bind_delivery_run(c, w.claimed_id, w.claim_token, ids.new_id(ids.RUN)),
    "finish_delivery": lambda s, c, w: s.finish_delivery(c, w.claimed_id, w.claim_token, "delivered"),
    "list_inbox": lambda s, c, w: s.list_inbox(c, "worker"),
    "mark_delivery_read": lambda s, c, w: s.mark_delivery_read(c, w.delivered_id),
    "list_queued_deliveries": lambda s, c, w: s.list_queued_deliveries(c),
    "reclaim_stale_deliveries": lambda s, c, w: s.reclaim_stale_deliveries(c, FAR_FUTURE),
    "create_pending_ask": lambda s, c, w: s.create_pending_ask(c, make_ask()),
    "get_pending_ask": lambda s, c, w: s.get_pending_ask(c, w.reply_with),
    "claim_pending_ask": lambda s, c, w: s.claim_pending_ask(c, w.reply_with),
    "list_expired_asks": lambda s, c, w: s.list_expired_asks(c, FAR_FUTURE),
    "list_expired_asks_across_scopes": lambda s, c, w: s.list_expired_asks_across_scopes(c, FAR_FUTURE),
    "list_pending_asks_by_conversation": lambda s, c, w: s.list_pending_asks_by_conversation(c, w.conv_id),
}

#: A call of each method whose other arguments are garbage (InvalidArgument
#: under a valid context).
_BAD_CALLS: dict[str, Callable[[Any, Any, SimpleNamespace], Any]] = {
    "record_message": lambda s, c, w: s.record_message(c, make_envelope(w.conv_id, id="msg_bad")),
    "get_message": lambda s, c, w: s.get_message(c, w.conv_id),
    "list_messages": lambda s, c, w: s.list_messages(c, limit="x"),
    "create_conversation": lambda s, c, w: s.create_conversation(c, make_conversation(hop_ceiling=0)),
    "get_conversation": lambda s, c, w: s.get_conversation(c, "conv_bad"),
    "get_conversation_by_peer_context": lambda s, c, w: s.get_conversation_by_peer_context(c, None, "x"),
    "update_conversation": lambda s, c, w: s.update_conversation(c, make_conversation(id=w.conv_id, status="bogus")),
    "list_conversations": lambda s, c, w: s.list_conversations(c, status="bogus"),
    "create_delivery": lambda s, c, w: s.create_delivery(c, make_delivery(state="delivered")),
    "get_delivery": lambda s, c, w: s.get_delivery(c, w.msg_id),
    "claim_delivery": lambda s, c, w: s.claim_delivery(c, None),
    "bind_delivery_run": lambda s, c, w: s.bind_delivery_run(c, w.claimed_id, "", ids.new_id(ids.RUN)),
    "finish_delivery": lambda s, c, w: s.finish_delivery(c, w.claimed_id, w.claim_token, "queued"),
    "list_inbox": lambda s, c, w: s.list_inbox(c, ""),
    "mark_delivery_read": lambda s, c, w: s.mark_delivery_read(c, 7),
    "list_queued_deliveries": lambda s, c, w: s.list_queued_deliveries(c, limit=True),
    "reclaim_stale_deliveries": lambda s, c, w: s.reclaim_stale_deliveries(c, datetime(2026, 1, 1)),
    "create_pending_ask": lambda s, c, w: s.create_pending_ask(c, make_ask(reply_with="")),
    "get_pending_ask": lambda s, c, w: s.get_pending_ask(c, ""),
    "claim_pending_ask": lambda s, c, w: s.claim_pending_ask(c, None),
    "list_expired_asks": lambda s, c, w: s.list_expired_asks(c, "now"),
    "list_expired_asks_across_scopes": lambda s, c, w: s.list_expired_asks_across_scopes(c, datetime(2026, 1, 1)),
    "list_pending_asks_by_conversation": lambda s, c, w: s.list_pending_asks_by_conversation(c, w.msg_id),
}


def _create_delivered(store: Any, c: Context, d: Any) -> Any:
    """A delivery created, claimed and delivered (so that a scoped list, the
    inbox, shows it)."""
    d = store.claim_delivery(c, store.create_delivery(c, d).id)
    return store.finish_delivery(c, d.id, d.claim_token, DeliveryState.DELIVERED)


def _shared_view(store: Any, sh: SimpleNamespace, obj: Any, scopes: Any) -> dict:
    return state_view(store, scopes, run_ids=[sh.run_id], step_ids=[sh.step_id])


_KINDS = (
    Kind(
        "conversation", "a2a",
        new=lambda sh, **f: make_conversation(**f),
        create=lambda s, c, o: s.create_conversation(c, o),
        get=lambda s, c, o: s.get_conversation(c, o.id),
        lists=(
            lambda s, c, sh: s.list_conversations(c),
            lambda s, c, sh: s.list_conversations(c, status="open"),
        ),
        page=lambda s, c, sh, start, size: s.list_conversations(c, offset=start, limit=size),
        not_found=ConversationNotFound,
        vary=lambda o: attrs.evolve(o, protocol="impostor", hop_ceiling=3),
        partitioned=True,
        shared=_shared,
        view=_shared_view,
    ),
    Kind(
        "delivery", "a2a",
        new=lambda sh, **f: make_delivery(**f),
        create=lambda s, c, o: _create_delivered(s, c, o),
        get=lambda s, c, o: s.get_delivery(c, o.id),
        lists=(lambda s, c, sh: s.list_inbox(c, "worker"),),
        page=lambda s, c, sh, start, size: s.list_inbox(c, "worker", offset=start, limit=size),
        not_found=DeliveryNotFound,
        vary=lambda o: attrs.evolve(o, message_id=ids.new_id(ids.MESSAGE)),
        partitioned=True,
        shared=_shared,
        view=_shared_view,
    ),
)


def _setup_a2a(kind: str) -> Callable[[Any, Context], str]:
    """Setup of a by-id op: one row of ``kind`` at the given scope."""
    def setup(store: Any, c: Context) -> str:
        if kind == "message":
            conv = store.create_conversation(c, make_conversation())
            return store.record_message(c, make_envelope(conv.id)).id
        if kind == "conversation":
            return store.create_conversation(c, make_conversation()).id
        if kind == "queued":
            return store.create_delivery(c, make_delivery()).id
        if kind == "delivered":
            return _create_delivered(store, c, make_delivery()).id
        return store.create_pending_ask(c, make_ask(deadline=PAST)).reply_with
    return setup


def _done_a2a(getter: Callable, effect: Callable) -> Callable[[Any, Context, str], None]:
    def done(store: Any, c: Context, key: str) -> None:
        row = getter(store, c, key)
        expect_true("SCOPE-BYID-1", effect(row), "the by-id write took effect on the row: " + shorten(row))
        assert_scope(row.scope, c.scope)
        expect("A2A-PART-3", row.partition, c.partition, "the partition of the row written")
    return done


def _done_read(getter: Callable) -> Callable[[Any, Context, str], None]:
    def done(store: Any, c: Context, key: str) -> None:
        assert_scope(getter(store, c, key).scope, c.scope)
    return done


_BYID = (
    ByIdOp("get_message", "a2a", MessageNotFound, _setup_a2a("message"),
           lambda s, c, k: s.get_message(c, k), _done_read(lambda s, c, k: s.get_message(c, k)),
           missing=lambda: ids.new_id(ids.MESSAGE)),
    ByIdOp("get_conversation", "a2a", ConversationNotFound, _setup_a2a("conversation"),
           lambda s, c, k: s.get_conversation(c, k), _done_read(lambda s, c, k: s.get_conversation(c, k)),
           missing=lambda: ids.new_id(ids.CONVERSATION)),
    ByIdOp("update_conversation", "a2a", ConversationNotFound, _setup_a2a("conversation"),
           lambda s, c, k: s.update_conversation(
               c, make_conversation(id=k, protocol="changed", scope=S("ws=elsewhere"))),
           _done_a2a(lambda s, c, k: s.get_conversation(c, k), lambda r: r.protocol == "changed"),
           missing=lambda: ids.new_id(ids.CONVERSATION)),
    ByIdOp("get_delivery", "a2a", DeliveryNotFound, _setup_a2a("queued"),
           lambda s, c, k: s.get_delivery(c, k), _done_read(lambda s, c, k: s.get_delivery(c, k)),
           missing=lambda: ids.new_id(ids.DELIVERY)),
    ByIdOp("claim_delivery", "a2a", DeliveryNotFound, _setup_a2a("queued"),
           lambda s, c, k: s.claim_delivery(c, k),
           _done_a2a(lambda s, c, k: s.get_delivery(c, k), lambda r: r.state == DeliveryState.DELIVERING),
           missing=lambda: ids.new_id(ids.DELIVERY)),
    ByIdOp("mark_delivery_read", "a2a", DeliveryNotFound, _setup_a2a("delivered"),
           lambda s, c, k: s.mark_delivery_read(c, k),
           _done_a2a(lambda s, c, k: s.get_delivery(c, k), lambda r: r.read_at is not None),
           missing=lambda: ids.new_id(ids.DELIVERY)),
    ByIdOp("get_pending_ask", "a2a", AskNotFound, _setup_a2a("ask"),
           lambda s, c, k: s.get_pending_ask(c, k), _done_read(lambda s, c, k: s.get_pending_ask(c, k)),
           missing=lambda: "rw-missing-" + ids.new_id(ids.MESSAGE)[4:]),
    ByIdOp("claim_pending_ask", "a2a", AskNotFound, _setup_a2a("ask"),
           lambda s, c, k: s.claim_pending_ask(c, k),
           _done_a2a(lambda s, c, k: s.get_pending_ask(c, k), lambda r: r.claimed_at is not None),
           missing=lambda: "rw-missing-" + ids.new_id(ids.MESSAGE)[4:]),
)


def _seed_xs_queued(store: Any) -> dict[str, Scope]:
    """Per scope: a queued delivery (selected) and a claimed one (not)."""
    expected = {}
    for sc in XS_SCOPES:
        c = ctx(sc)
        expected[store.create_delivery(c, make_delivery()).id] = S(sc)
        store.claim_delivery(c, store.create_delivery(c, make_delivery()).id)
    return expected


def _seed_xs_stale(store: Any) -> dict[str, Scope]:
    """Per scope: a stale claim (selected), a bound one and a delivered one (not)."""
    expected = {}
    for sc in XS_SCOPES:
        c = ctx(sc)
        expected[store.claim_delivery(c, store.create_delivery(c, make_delivery()).id).id] = S(sc)
        bound = store.claim_delivery(c, store.create_delivery(c, make_delivery()).id)
        store.bind_delivery_run(c, bound.id, bound.claim_token, ids.new_id(ids.RUN))
        done = store.claim_delivery(c, store.create_delivery(c, make_delivery()).id)
        store.finish_delivery(c, done.id, done.claim_token, DeliveryState.DELIVERED)
    return expected


def _reclaim_and_restore(store: Any, c: Any) -> list:
    """Reclaim, list what was moved, then claim each moved row again (under
    its own scope) so the next caller finds the same stale rows."""
    moved = store.reclaim_stale_deliveries(c, XS_NOW)
    rows = store.list_queued_deliveries(c)
    expect("A2A-RCL-7", len(rows), moved, "the queued rows after reclaim_stale_deliveries, against the count it "
           "returned: " + shorten(rows))
    for row in rows:
        store.claim_delivery(Context(row.scope, row.partition), row.id)
    return sorted(rows, key=lambda r: r.id)


def _finish_claimed(store: Any, row: Any) -> None:
    c = Context(row.scope, row.partition)
    d = store.get_delivery(c, row.id)
    store.finish_delivery(c, d.id, d.claim_token, DeliveryState.DELIVERED)


def _seed_xs_asks(store: Any) -> dict[str, Scope]:
    """Per scope: an overdue ask (selected), a future one and a claimed one (not)."""
    expected = {}
    for i, sc in enumerate(XS_SCOPES):
        c = ctx(sc)
        expected[store.create_pending_ask(c, make_ask(deadline=PAST + timedelta(milliseconds=i))).reply_with] = S(sc)
        store.create_pending_ask(c, make_ask(deadline=XS_NOW + timedelta(days=1)))
        store.claim_pending_ask(c, store.create_pending_ask(c, make_ask(deadline=PAST)).reply_with)
    return expected


def _keyed_asks(rows: list) -> list:
    """Pending asks have no ``id``: keyed by ``reply_with``."""
    return [Keyed(a.reply_with, a.scope, a) for a in rows]


def _claim_ask(store: Any, row: Any) -> None:
    store.claim_pending_ask(Context(row.scope, row.row.partition), row.id)
    expect_op("A2A-ASK-3", store.get_pending_ask(Context(row.scope, row.row.partition), row.id).claimed_at, "is not",
              None, "claimed_at of an ask after claim_pending_ask")


#: These also work within ctx.partition (A2A-PART-3), so their callers keep
#: the rows' partition.
_XS = {
    "list_queued_deliveries": XsMethod(
        "list_queued_deliveries", "a2a",
        partitioned=True,
        seed=_seed_xs_queued,
        call=lambda s, c: s.list_queued_deliveries(c),
        act=lambda s, row: s.claim_delivery(Context(row.scope, row.partition), row.id),
        scoped_twin=lambda s, c: s.list_inbox(c, "worker"),
        bad=(
            lambda s, c: s.list_queued_deliveries(c, "1"),
            lambda s, c: s.list_queued_deliveries(c, True),
            lambda s, c: s.list_queued_deliveries(c, None),
        ),
    ),
    "reclaim_stale_deliveries": XsMethod(
        "reclaim_stale_deliveries", "a2a",
        partitioned=True,
        seed=_seed_xs_stale,
        call=_reclaim_and_restore,
        act=_finish_claimed,
        scoped_twin=lambda s, c: s.list_inbox(c, "worker"),
        bad=(
            lambda s, c: s.reclaim_stale_deliveries(c, datetime(2026, 1, 1)),
            lambda s, c: s.reclaim_stale_deliveries(c, None),
            lambda s, c: s.reclaim_stale_deliveries(c, "2026-01-01T00:00:00+00:00"),
            lambda s, c: s.reclaim_stale_deliveries(c, XS_NOW, limit=1.5),
        ),
    ),
    "list_expired_asks_across_scopes": XsMethod(
        "list_expired_asks_across_scopes", "a2a",
        partitioned=True,
        seed=_seed_xs_asks,
        call=lambda s, c: _keyed_asks(s.list_expired_asks_across_scopes(c, XS_NOW)),
        act=_claim_ask,
        scoped_twin=lambda s, c: s.list_expired_asks(c, XS_NOW),
        bad=(
            lambda s, c: s.list_expired_asks_across_scopes(c, datetime(2026, 1, 1)),
            lambda s, c: s.list_expired_asks_across_scopes(c, None),
            lambda s, c: s.list_expired_asks_across_scopes(c, XS_NOW, limit="2"),
        ),
    ),
}


def _size_conversation(s: Any, c: Context, w: SimpleNamespace) -> None:
    w.size_conv = s.create_conversation(c, make_conversation())


def _size_claimed(s: Any, c: Context, w: SimpleNamespace) -> None:
    """A claimed delivery of a fresh message, for the size of its finish."""
    _size_conversation(s, c, w)
    msg = s.record_message(c, make_envelope(w.size_conv.id))
    claimed = s.claim_delivery(c, s.create_delivery(c, make_delivery(msg.id)).id)
    w.size_delivery, w.size_token = claimed.id, claimed.claim_token


#: RSC-GEN-8/13 (test_sizes.py).  A finish is refused on ``error``'s own
#: bound before the row's (not exact); conversations grow by participants
#: the store adds, tested below (test_admitting_a_message_refuses_…).
_SIZE_SITES = (
    Site("record_message.content", "a2a",
         lambda s, c, w, t: s.record_message(c, make_envelope(w.size_conv.id, content=t)),
         read=lambda s, c, w, r: s.get_message(c, r.id), prepare=_size_conversation),
    Site("finish_delivery.error", "a2a",
         lambda s, c, w, t: s.finish_delivery(c, w.size_delivery, w.size_token, DeliveryState.FAILED, t),
         read=lambda s, c, w, r: s.get_delivery(c, w.size_delivery), prepare=_size_claimed, exact=False),
)


def _long_scopes(store: Any, c: Context, up: Context) -> None:
    """SCOPE-CANON-6: every writing method at the long scope ``c``, the rows
    read back from ``c`` and from its parent ``up`` (test_long_scopes.py)."""
    conv = long_call("create_conversation", lambda: store.create_conversation(
        c, make_conversation(peer_node="peer", peer_context="thread")))
    long_scope_of("a created conversation", conv, c.scope)
    long_scope_of("get_conversation_by_peer_context",
                  store.get_conversation_by_peer_context(up, "peer", "thread"), c.scope)
    msg = long_call("record_message", lambda: store.record_message(c, make_envelope(conv.id)))
    long_scope_of("a recorded message", msg, c.scope)
    for who in (c, up):
        long_check(f"list_messages from depth {who.scope.depth}", msg.id in long_ids(store.list_messages(who)), True)
        long_check(f"list_conversations from depth {who.scope.depth}",
                   conv.id in long_ids(store.list_conversations(who)), True)
    updated = long_call("update_conversation", lambda: store.update_conversation(
        c, attrs.evolve(store.get_conversation(c, conv.id), protocol="fipa-query")))
    long_scope_of("an updated conversation", updated, c.scope)
    dlv = long_call("create_delivery", lambda: store.create_delivery(c, make_delivery(msg.id)))
    claimed = long_call("claim_delivery", lambda: store.claim_delivery(c, dlv.id))
    long_call("bind_delivery_run",
              lambda: store.bind_delivery_run(c, dlv.id, claimed.claim_token, ids.new_id(ids.RUN)))
    done = long_call("finish_delivery", lambda: store.finish_delivery(c, dlv.id, claimed.claim_token,
                                                                      DeliveryState.DELIVERED))
    long_scope_of("a finished delivery", done, c.scope)
    long_check("list_inbox from the ancestor", dlv.id in long_ids(store.list_inbox(up, "worker")), True)
    long_call("mark_delivery_read", lambda: store.mark_delivery_read(c, dlv.id))
    ask = long_call("create_pending_ask", lambda: store.create_pending_ask(c, make_ask(conv.id, deadline=PAST)))
    long_scope_of("a created pending ask", ask, c.scope)
    long_check("list_expired_asks from the ancestor",
               ask.reply_with in long_ids(store.list_expired_asks(up, FAR), "reply_with"), True)
    long_check("list_pending_asks_by_conversation",
               [a.reply_with for a in store.list_pending_asks_by_conversation(up, conv.id)], [ask.reply_with])
    long_scope_of("a claimed pending ask",
                  long_call("claim_pending_ask", lambda: store.claim_pending_ask(c, ask.reply_with)), c.scope)


EXAMPLES = Examples(
    "a2a",
    long_scopes=_long_scopes,
    seed=_examples_seed,
    good=_GOOD_CALLS,
    bad=_BAD_CALLS,
    kinds=_KINDS,
    byid=_BYID,
    byid_methods=frozenset(op.name for op in _BYID),
    xs=_XS,
    exact=frozenset({"list_messages", "list_conversations"}),
    sites={"size": _SIZE_SITES},
    size_methods=frozenset({"record_message", "finish_delivery"}),
)


# -- sizes: the conversation rows the store grows (RSC-GEN-8/13; the other writes: test_sizes.py) --


#: the scopes whose views prove that a refused write wrote nothing
_SIZE_VIEW_SCOPES = [HOME, "ws=w1"]


def _text_of_bytes(n: int, lead: str) -> str:
    """At most 255 code points, ``n`` UTF-8 bytes (``lead`` first, ASCII)."""
    quads = max(0, -(-(n - 255) // 3))  # four-byte characters needed to stay within 255 code points
    text = lead + "\U0001F600" * quads
    return text + "n" * (n - len(text.encode("utf-8")))


def _conversation_of_size(store: Any, c: Context, target: int) -> Any:
    """A conversation whose stored size is exactly ``target`` bytes, grown
    with participants (its only field of unbounded size): a few thousand
    wide addresses, and a last one cut to fit."""
    def make(participants: tuple[Address, ...]) -> Any:
        return make_conversation(protocol="", participants=participants)

    def size(people: tuple[Address, ...]) -> int:
        return entity_size(attrs.evolve(make(people), scope=c.scope, created_at=EPOCH, updated_at=EPOCH))

    unit = (Address(_text_of_bytes(996, "00000000"), "n" * 255),)
    per = size(unit * 2) - size(unit)
    n = (target - size(()) - 60) // per
    people = tuple(Address(_text_of_bytes(996, f"{i:08d}"), "n" * 255) for i in range(n))
    rest = target - size(people) - 1 - len('{"agent":"","node":""}')  # one more address, after a comma
    agent = _text_of_bytes(min(rest - 1, 1017), "Z")
    people += (Address(agent, _text_of_bytes(rest - len(agent.encode("utf-8")), "")),)
    stored = store.create_conversation(c, make(people))
    with clause("RSC-GEN-8", what=f"a conversation grown to {target} bytes as stored"):
        expect("RSC-GEN-8", entity_size(stored), target,
               "entity_size(stored)" + ": " + shorten((entity_size(stored), target)))
    return stored


@pytest.mark.clause("RSC-GEN-13", "RSC-GEN-8", "A2A-HOP-8")
@pytest.mark.cortex_classes("a2a")
def test_admitting_a_message_refuses_a_conversation_grown_over_8_mib(store, clock):
    """A message whose sender or receivers are new to the conversation adds
    them to its participants (A2A-HOP-8); when that would take the stored
    conversation over the limit the message is refused (``InvalidArgument``)
    and neither it nor the hop charge is stored.  A message among the
    conversation's participants adds nothing and is admitted."""
    c = ctx(HOME)
    clock.set(EPOCH)
    conv = _conversation_of_size(store, c, MAX_ENTITY_BYTES - 8)
    insider, other = conv.participants[0], conv.participants[1]
    before = state_view(store, _SIZE_VIEW_SCOPES, conversation_ids=[conv.id], classes={"a2a"})
    newcomer = make_envelope(conv.id, sender=insider, receivers=(Address("a-newcomer-of-some-length"),))
    expect_raises("RSC-GEN-13", InvalidArgument, lambda: store.record_message(c, newcomer),
                  "a message whose receiver would take the conversation over 8 MiB")
    with clause("RSC-GEN-13", what="the conversation and messages after the refused message"):
        expect("RSC-GEN-13", state_view(store, _SIZE_VIEW_SCOPES, conversation_ids=[conv.id], classes={"a2a"}), before,
               'state_view(store, _SIZE_VIEW_SCOPES, conversation_ids=[conv.id], classes={"a2a"})')
    known = make_envelope(conv.id, sender=insider, receivers=(other,))
    with clause("A2A-HOP-8", what="a message among the participants, the conversation at its size"):
        store.record_message(c, known)
        expect("A2A-HOP-8", store.get_conversation(c, conv.id).hops_used, 1,
               "store.get_conversation(c, conv.id).hops_used")


@pytest.mark.clause("RSC-GEN-13", "RSC-GEN-8", "A2A-CONV-5")
@pytest.mark.cortex_classes("a2a")
def test_updating_a_conversation_refuses_a_row_over_8_mib(store, clock):
    """An update that makes the stored conversation one byte too large is
    refused and changes nothing; one that keeps it at the limit lands."""
    c = ctx(HOME)
    clock.set(EPOCH)
    conv = _conversation_of_size(store, c, MAX_ENTITY_BYTES - 1)
    before = store.get_conversation(c, conv.id)
    expect_raises("RSC-GEN-13", InvalidArgument,
                  lambda: store.update_conversation(c, attrs.evolve(conv, protocol="ab")),
                  "update_conversation taking the conversation to 8 MiB + 1")
    expect("RSC-GEN-13", store.get_conversation(c, conv.id), before, "the conversation after the refused update")
    with clause("RSC-GEN-13", "A2A-CONV-5", what="update_conversation taking it to exactly 8 MiB"):
        updated = store.update_conversation(c, attrs.evolve(conv, protocol="a"))
        expect(("RSC-GEN-13", "A2A-CONV-5"), entity_size(updated), MAX_ENTITY_BYTES, "entity_size(updated)")
        expect(("RSC-GEN-13", "A2A-CONV-5"), updated.protocol, "a", "updated.protocol")
