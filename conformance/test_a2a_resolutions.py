"""Certifies class `a2a_resolutions` (a2a_resolutions.md): reading an ask at
its exact scope, sealing it with an outcome in one commit (the payload and
digests computed here from their definitions, every identity field changed
one at a time, legacy claims, equal and competing retries), reading and
paging resolutions (code-point order, page bounds, cursors, the end of a
walk), isolation from ancestor, descendant, sibling and look-alike scopes and
from other partitions, bad input refused with nothing written, and threaded
races of seals with each other and with the legacy claim.
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
from cortex_spec.a2a import Address, PendingAsk
from cortex_spec.a2a_resolutions import AskReply, AskReplyItem, AskResolution
from cortex_spec.clock import to_millis
from cortex_spec.errors import (
    AskAlreadyClaimed,
    AskNotFound,
    AskResolutionConflict,
    AskResolutionNotFound,
    InvalidArgument,
    InvalidPerformative,
)
from cortex_spec.testing import (
    FAR_FUTURE, clause, ClauseViolation, ctx, expect, expect_op, expect_raises, expect_result, expect_true, race,
    shorten, state_view,
)
from cortex_spec.a2a import make_ask

from .a2a_world import HOME, MS, OUTSIDERS, ConversationWorld, place, read_each, view_places
from .examples import Examples, Fixture, long_call, long_check

def _reply(conversation_id: str, *contents: str, complete: bool = True, performative: str = "inform") -> AskReply:
    return AskReply(tuple(AskReplyItem(performative, f"worker-{i}", c, conversation_id)
                          for i, c in enumerate(contents)), complete)


class W(ConversationWorld):
    """A conversation at ``where`` and asks on it."""

    def ask(self, **fields: Any) -> PendingAsk:
        return self.s.create_pending_ask(self.c, make_ask(self.conv, **fields))

    def reply(self, *contents: str, complete: bool = True) -> AskReply:
        return _reply(self.conv, *contents, complete=complete)


def _view(store: Any, c: Context, reply_withs: list[str]) -> dict:
    view = state_view(store, view_places(c), reply_withs=reply_withs, classes={"a2a"})
    places = (c, ctx(HOME, "orch-1"))
    for sc in places:
        view[f"page@{place(sc)}"] = store.list_ask_resolutions(sc, "", 256)
    return read_each(view, "res", places, reply_withs, store.get_ask_resolution, AskResolutionNotFound)


# -- the definitions, computed here (A2A-RES-3/4) -------------------------------------------


def _canon(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _payload(reply: AskReply) -> str:
    return _canon({"replies": [{"performative": str(i.performative), "sender": i.sender, "content": i.content,
                                "conversation_id": i.conversation_id} for i in reply.replies],
                   "complete": reply.complete})


def _binding(a: PendingAsk) -> str:
    deadline = None if a.deadline is None else to_millis(a.deadline)
    return _sha(_canon(["cortex.ask-binding/1", a.scope.canonical(), a.partition, a.reply_with, a.conversation_id,
                        a.message_id, a.asker_run_id, a.asker_agent, a.tool_call_id,
                        [a.expected.agent, a.expected.node], deadline]))


def _fresh_off(r: AskResolution) -> AskResolution:
    return attrs.evolve(r, fresh=False)


# -- EXAMPLES for the cross-class suites ------------------------------------------------------


def _seed(store: Any, fixture: Fixture) -> SimpleNamespace:
    w = W(store)
    sealed = w.ask()
    store.seal_ask_resolution(w.c, sealed, w.reply("yes"))
    open_ask = w.ask()
    return SimpleNamespace(res_conv=w.conv, res_sealed=sealed, res_open=open_ask,
                           view={"reply_withs": [sealed.reply_with, open_ask.reply_with]})


def _examples_view(store: Any, w: SimpleNamespace, scopes: Any) -> dict:
    out = state_view(store, scopes, classes={"a2a"}, **getattr(w, "view", {}))
    for sc in scopes:
        c = sc if isinstance(sc, Context) else ctx(sc)
        out[f"resolutions@{c.scope.canonical()}#{c.partition}"] = store.list_ask_resolutions(c, "", 256)
    return out


def _long_scopes(store: Any, c: Context, up: Context) -> None:
    """SCOPE-CANON-6: every writing method at the long scope ``c``, the rows
    read back from ``c`` and from its parent ``up`` (test_long_scopes.py)."""
    w = W(store, c)
    ask = long_call("create_pending_ask", w.ask)
    long_call("read_pending_ask", lambda: store.read_pending_ask(c, ask.reply_with))
    long_call("seal_ask_resolution", lambda: store.seal_ask_resolution(c, ask, w.reply("yes")))
    long_call("get_ask_resolution", lambda: store.get_ask_resolution(c, ask.reply_with))
    long_check("list_ask_resolutions",
               [r.ask.reply_with for r in store.list_ask_resolutions(c, "", 10).resolutions], [ask.reply_with])


EXAMPLES = Examples(
    "a2a_resolutions",
    long_scopes=_long_scopes,
    seed=_seed,
    view=_examples_view,
    good={
        "read_pending_ask": lambda s, c, w: s.read_pending_ask(c, w.res_open.reply_with),
        "seal_ask_resolution": lambda s, c, w: s.seal_ask_resolution(c, w.res_open, _reply(w.res_conv, "ok")),
        "get_ask_resolution": lambda s, c, w: s.get_ask_resolution(c, w.res_sealed.reply_with),
        "list_ask_resolutions": lambda s, c, w: s.list_ask_resolutions(c, "", 10),
    },
    bad={
        "read_pending_ask": lambda s, c, w: s.read_pending_ask(c, ""),
        "seal_ask_resolution": lambda s, c, w: s.seal_ask_resolution(c, w.res_open, "not a reply"),
        "get_ask_resolution": lambda s, c, w: s.get_ask_resolution(c, None),
        "list_ask_resolutions": lambda s, c, w: s.list_ask_resolutions(c, "", 0),
    },
)


# -- A2A-RES-1/2 ------------------------------------------------------------------------------------


@pytest.mark.clause("A2A-RES-1", "A2A-RES-2", "A2A-RES-11", "A2A-RES-12")
def test_every_method_sees_only_its_exact_scope_and_partition(store):
    """A sealed and an open ask at HOME are answered as missing from an
    ancestor, a descendant, a sibling, look-alikes and other partitions —
    by every method — and nothing is written; the zero scope is NoScope."""
    from cortex_spec.errors import NoScope

    w = W(store)
    sealed, open_ask = w.ask(), w.ask()
    store.seal_ask_resolution(w.c, sealed, w.reply("yes"))
    before = _view(store, w.c, [sealed.reply_with, open_ask.reply_with])
    for outsider in OUTSIDERS:
        where = f"from {outsider.scope.canonical()} partition {outsider.partition!r}"
        for a in (sealed, open_ask):
            expect_raises("A2A-RES-1", AskNotFound, lambda a=a: store.read_pending_ask(outsider, a.reply_with),
                          f"read_pending_ask {where}")
            expect_raises("A2A-RES-1", AskNotFound,
                          lambda a=a: store.seal_ask_resolution(outsider, attrs.evolve(a, scope=outsider.scope,
                                                                                       partition=outsider.partition),
                                                                w.reply("yes")),
                          f"a seal {where} of an ask stored at {HOME}")
            expect_raises("A2A-RES-1", AskResolutionNotFound,
                          lambda a=a: store.get_ask_resolution(outsider, a.reply_with), f"get_ask_resolution {where}")
        expect_result("A2A-RES-1", lambda: store.list_ask_resolutions(outsider, "", 256).resolutions, (),
                      f"list_ask_resolutions {where}")
    for call in (lambda c: store.read_pending_ask(c, open_ask.reply_with),
                 lambda c: store.seal_ask_resolution(c, open_ask, w.reply("x")),
                 lambda c: store.get_ask_resolution(c, sealed.reply_with),
                 lambda c: store.list_ask_resolutions(c, "", 1)):
        expect_raises("A2A-RES-1", NoScope, lambda call=call: call(Context.of("")), "a zero-scope call")
    expect("A2A-RES-1", _view(store, w.c, [sealed.reply_with, open_ask.reply_with]), before,
           "the store after the outsiders' calls")
    got = store.read_pending_ask(w.c, open_ask.reply_with)
    expect("A2A-RES-2", got, open_ask, "read_pending_ask of an unclaimed ask")
    claimed = store.claim_pending_ask(w.c, open_ask.reply_with)
    expect_result("A2A-RES-2", lambda: store.read_pending_ask(w.c, open_ask.reply_with), claimed,
                  "read_pending_ask of a claimed ask")
    expect_raises("A2A-RES-2", AskNotFound, lambda: store.read_pending_ask(w.c, "rw-never"), "a missing ask")


# -- A2A-RES-3..7 -----------------------------------------------------------------------------------


@pytest.mark.clause("A2A-RES-3", "A2A-RES-4", "A2A-RES-6", "A2A-RES-10", "A2A-RES-9", "A2A-ASK-10")
@pytest.mark.parametrize("shape", ["one", "several", "none", "unicode"])
def test_a_fresh_seal_claims_the_ask_and_keeps_the_exact_outcome(store, clock, shape):
    w = W(store)
    a = w.ask(deadline=clock.now() + timedelta(hours=1), expected=Address("worker", "peer.example"))
    reply = {"one": w.reply("42"), "several": w.reply("b", "a", "", complete=False),
             "none": AskReply((), False),
             "unicode": AskReply((AskReplyItem("refuse", "wörker@n", "nö 😀 \"q\"\n", w.conv),), True)}[shape]
    clock.advance(seconds=3)
    now = clock.now()
    got = store.seal_ask_resolution(w.c, store.read_pending_ask(w.c, a.reply_with), reply)
    expect("A2A-RES-6", got.fresh, True, "fresh on the sealing call")
    expect("A2A-RES-3", got.payload, _payload(reply), "the payload")
    expect("A2A-RES-3", got.outcome_digest, _sha(_payload(reply)), "the outcome digest")
    expect("A2A-RES-4", got.binding_digest, _binding(a), "the binding digest")
    expect("A2A-RES-4", got.resolution_id, _sha(_canon(["cortex.ask-resolution/1", _binding(a), got.outcome_digest])),
           "the resolution id")
    claimed = attrs.evolve(a, claimed_at=now, updated_at=now)
    expect("A2A-RES-6", (got.schema_version, got.sealed_at, got.ask), (1, now, claimed), "version, sealed_at, ask")
    expect_result("A2A-RES-6", lambda: store.get_pending_ask(w.c, a.reply_with), claimed, "the ask after the seal")
    expect_result("A2A-RES-10", lambda: store.get_ask_resolution(w.c, a.reply_with), _fresh_off(got),
                  "get_ask_resolution after the seal")
    expect_result("A2A-RES-10", lambda: store.list_ask_resolutions(w.c, "", 5).resolutions, (_fresh_off(got),),
                  "the page after the seal")
    with clause("A2A-RES-9", "A2A-ASK-10", what="the sealed ask in the expired lists"):
        expect_op(("A2A-RES-9", "A2A-ASK-10"), a.reply_with, "not in",
                  {x.reply_with for x in store.list_expired_asks(w.c, FAR_FUTURE)}, "a.reply_with")
        expect_op(("A2A-RES-9", "A2A-ASK-10"), a.reply_with, "not in",
                  {x.reply_with for x in store.list_expired_asks_across_scopes(w.c, FAR_FUTURE)}, "a.reply_with")


@pytest.mark.clause("A2A-RES-7", "A2A-RES-10")
def test_an_equal_retry_returns_the_retained_resolution_and_a_competing_one_is_refused(store, clock):
    w = W(store)
    a = w.ask()
    first = store.seal_ask_resolution(w.c, a, w.reply("yes", "no"))
    before = _view(store, w.c, [a.reply_with])
    for _ in range(2):
        clock.advance(seconds=5)
        # the argument as read before the seal and as read after it: both the same identity
        for arg in (a, store.read_pending_ask(w.c, a.reply_with)):
            again = store.seal_ask_resolution(w.c, arg, w.reply("yes", "no"))
            expect("A2A-RES-7", again, _fresh_off(first), "an equal retry (fresh false, sealed_at kept)")
    for other in (w.reply("no", "yes"), w.reply("yes", "no", complete=False), w.reply("yes"), AskReply((), False),
                  _reply(w.conv, "yes", "no", performative="confirm")):
        expect_raises("A2A-RES-7", AskAlreadyClaimed, lambda other=other: store.seal_ask_resolution(w.c, a, other),
                      f"a competing outcome {other}")
    expect("A2A-RES-7", _view(store, w.c, [a.reply_with]), before, "the store after the retries")


@pytest.mark.clause("A2A-RES-5", "A2A-RES-4")
@pytest.mark.parametrize("field, value", [
    ("reply_with", "rw-other"),
    ("conversation_id", None), ("message_id", None), ("asker_run_id", None),
    ("asker_agent", "critic"), ("tool_call_id", "call_2"), ("expected", Address("worker", "peer")),
    ("deadline", "later"), ("deadline", "earlier"), ("deadline", "none"), ("scope", "ws=w1"), ("partition", "orch-1"),
])
def test_a_seal_naming_another_identity_is_a_conflict(store, clock, field, value):
    """Every identity field changed alone: AskResolutionConflict (or, for
    the key, the missing ask), and nothing is written."""
    from cortex_spec.scope import Scope

    w = W(store)
    a = w.ask(deadline=clock.now() + timedelta(hours=1))
    fresh_ids = {"conversation_id": ids.CONVERSATION, "message_id": ids.MESSAGE, "asker_run_id": ids.RUN}
    if field in fresh_ids:
        value = ids.new_id(fresh_ids[field])
    elif field == "deadline":
        value = {"none": None, "later": a.deadline + MS, "earlier": a.deadline - MS}[value]
    elif field == "scope":
        value = Scope.parse(value)
    before = _view(store, w.c, [a.reply_with])
    changed = attrs.evolve(a, **{field: value})
    error = AskNotFound if field == "reply_with" else AskResolutionConflict
    expect_raises("A2A-RES-5", error, lambda: store.seal_ask_resolution(w.c, changed, w.reply("yes")),
                  f"a seal whose ask has another {field}")
    expect("A2A-RES-5", _view(store, w.c, [a.reply_with]), before, "the store after the refused seal")
    # the stamps are not identity: a seal with changed stamps is the ask's own
    stamped = attrs.evolve(a, created_at=a.created_at - timedelta(days=1), updated_at=None, claimed_at=FAR_FUTURE)
    expect_result("A2A-RES-4", lambda: store.seal_ask_resolution(w.c, stamped, w.reply("yes")).fresh, True,
                  "a seal whose ask differs only in created_at, updated_at and claimed_at")


@pytest.mark.clause("A2A-RES-4", "A2A-GEN-7")
def test_the_identity_deadline_is_compared_in_whole_milliseconds(store, clock):
    """The ask's deadline given with sub-millisecond digits is the same
    instant (the same ask, a fresh seal); one millisecond either side is
    another question (A2A-RES-5, in the conflict test)."""
    w = W(store)
    a = w.ask(deadline=clock.now() + timedelta(hours=1))
    noisy = attrs.evolve(a, deadline=a.deadline + timedelta(microseconds=999))
    expect_result("A2A-RES-4", lambda: store.seal_ask_resolution(w.c, noisy, w.reply("yes")).fresh, True,
                  "a seal naming the ask's deadline with sub-millisecond digits")
    expect_result("A2A-RES-4", lambda: store.get_ask_resolution(w.c, a.reply_with).ask.deadline, a.deadline,
                  "the sealed identity's deadline, in whole milliseconds")


@pytest.mark.clause("A2A-RES-5", "A2A-RES-1")
@pytest.mark.parametrize("bad", ["not-an-ask", "bad-id", "reply-type", "replies-type", "item-type", "performative",
                                 "sender", "content", "conversation", "complete", "too-big"])
def test_bad_seal_arguments_are_refused_before_storage(store, bad):
    from cortex_spec.validation import MAX_ENTITY_BYTES

    w = W(store)
    a = w.ask()
    ok = w.reply("yes")
    args = {
        "not-an-ask": ("x", ok), "bad-id": (attrs.evolve(a, message_id="msg_bad"), ok),
        "reply-type": (a, "yes"), "replies-type": (a, AskReply("yes", True)),
        "item-type": (a, AskReply(("yes",), True)),
        "performative": (a, _reply(w.conv, "yes", performative="Inform")),
        "sender": (a, AskReply((AskReplyItem("inform", 7, "x", w.conv),), True)),
        "content": (a, AskReply((AskReplyItem("inform", "w", "a\x00b", w.conv),), True)),
        "conversation": (a, AskReply((AskReplyItem("inform", "w", "x", ids.new_id(ids.MESSAGE)),), True)),
        "complete": (a, AskReply((), 1)),
        "too-big": (a, AskReply((AskReplyItem("inform", "w", "x" * (MAX_ENTITY_BYTES + 1), w.conv),), True)),
    }[bad]
    before = _view(store, w.c, [a.reply_with])
    error = InvalidPerformative if bad == "performative" else InvalidArgument
    expect_raises("A2A-RES-5", error, lambda: store.seal_ask_resolution(w.c, *args), f"a seal with {bad}")
    # the arguments are judged before the ask is looked up
    expect_raises("A2A-RES-5", error, lambda: store.seal_ask_resolution(ctx("ws=w9"), *args),
                  f"a seal with {bad} from a scope that sees no ask")
    expect("A2A-RES-5", _view(store, w.c, [a.reply_with]), before, "the store after the refused seals")


@pytest.mark.clause("A2A-RES-8")
def test_a_legacy_claim_is_never_adopted(store):
    w = W(store)
    a = w.ask()
    store.claim_pending_ask(w.c, a.reply_with)
    before = _view(store, w.c, [a.reply_with])
    for reply in (w.reply("yes"), AskReply((), False)):
        expect_raises("A2A-RES-8", AskAlreadyClaimed, lambda reply=reply: store.seal_ask_resolution(w.c, a, reply),
                      "a seal of an ask claimed by claim_pending_ask")
    expect("A2A-RES-8", _view(store, w.c, [a.reply_with]), before, "the store after the refused seals")
    expect_raises("A2A-RES-8", AskResolutionNotFound, lambda: store.get_ask_resolution(w.c, a.reply_with),
                  "the resolution of a legacy claim")


# -- A2A-RES-9: races --------------------------------------------------------------------------------


@pytest.mark.clause("A2A-RES-9", "A2A-RES-7", "A2A-ASK-6")
@pytest.mark.parametrize("kind", ["competing", "equal", "with-legacy-claim"])
def test_concurrent_seals_have_one_fresh_winner(store, profile, kind):
    for rnd in range(profile.race_rounds):
        w = W(store)
        a = w.ask()
        n = profile.race_threads
        replies = [w.reply("same") if kind == "equal" else w.reply(f"answer {i}") for i in range(n)]
        calls = [lambda r=r: store.seal_ask_resolution(w.c, a, r) for r in replies]
        if kind == "with-legacy-claim":
            calls[0] = lambda: store.claim_pending_ask(w.c, a.reply_with)
        outcomes = race(calls)
        wins = [(i, o.value) for i, o in enumerate(outcomes)
                if o.ok and (isinstance(o.value, PendingAsk) or o.value.fresh)]
        if len(wins) != 1:
            raise ClauseViolation("A2A-RES-9", f"round {rnd}: {n} concurrent seals ({kind})", "one winner",
                                  [o.value if o.ok else type(o.error).__name__ for o in outcomes])
        winner, won = wins[0]
        for i, o in enumerate(outcomes):
            if i == winner:
                continue
            if kind == "equal":
                if not o.ok or o.value != _fresh_off(won):
                    raise ClauseViolation("A2A-RES-7", f"round {rnd}: a seal equal to the winner's", _fresh_off(won),
                                          o.value if o.ok else o.error)
            elif o.ok or not isinstance(o.error, AskAlreadyClaimed):
                raise ClauseViolation("A2A-RES-9", f"round {rnd}: a loser of the race", "AskAlreadyClaimed",
                                      o.value if o.ok else o.error)
        if isinstance(won, PendingAsk):  # the legacy claim won: nothing was resolved
            expect_raises("A2A-RES-9", AskResolutionNotFound, lambda: store.get_ask_resolution(w.c, a.reply_with),
                          f"round {rnd}: the resolution after the legacy claim won")
        else:
            expect_result("A2A-RES-9", lambda: store.get_ask_resolution(w.c, a.reply_with), _fresh_off(won),
                          f"round {rnd}: the retained resolution is the winner's")


# -- A2A-RES-11..13: reads and pages -------------------------------------------------------------


@pytest.mark.clause("A2A-RES-12", "A2A-RES-13", "A2A-RES-11")
def test_pages_walk_every_resolution_once_in_code_point_order(store):
    """Resolutions whose tokens sort differently by code point than by
    case or length, between rows of an ancestor, a descendant and another
    partition; walked with every page size from 1 to past the end."""
    w = W(store)
    tokens = ["rw-B", "rw-a", "rw-é", "rw-10", "rw-9", "rw-a0", "RW", "rw-\U0001f600"]
    for t in tokens:
        store.seal_ask_resolution(w.c, w.ask(reply_with=t), w.reply(t))
    for where in ("ws=w1", "ws=w1/proj=p1/env=e1", Context.of(HOME, "orch-1")):
        o = W(store, where)
        store.seal_ask_resolution(o.c, o.ask(reply_with=f"rw-x{ids.new_id('x')}"), o.reply("noise"))
    store.create_pending_ask(w.c, make_ask(w.conv, reply_with="rw-open"))  # unsealed: not listed
    wanted = sorted(tokens)
    for size in (1, 2, 3, len(tokens), len(tokens) + 1, 256):
        seen: list[str] = []
        cursor, pages = "", 0
        while True:
            page = store.list_ask_resolutions(w.c, cursor, size)
            pages += 1
            got = [r.ask.reply_with for r in page.resolutions]
            with clause("A2A-RES-12", what=f"a page of {size} after {cursor!r}"):
                expect_op("A2A-RES-12", len(got), "<=", size, "len(got)" + ": " + shorten(got))
                expect_true("A2A-RES-12", all(r.fresh is False for r in page.resolutions),
                            "all(r.fresh is False for r in page.resolutions)")
            seen += got
            if not page.next:
                break
            with clause("A2A-RES-13", what=f"the cursor of a full page of {size}"):
                expect("A2A-RES-13", len(got), size, "len(got)" + ": " + shorten((got, page.next)))
                expect("A2A-RES-13", page.next, "v1." + got[-1], "page.next" + ": " + shorten((got, page.next)))
            cursor = page.next
            if pages > len(tokens) + 2:
                raise ClauseViolation("A2A-RES-13", f"a walk with pages of {size}", "an end", "no end")
        expect("A2A-RES-13", seen, wanted, f"every resolution, once, in order (pages of {size})")
    for t in tokens:
        expect_result("A2A-RES-11", lambda t=t: store.get_ask_resolution(w.c, t).ask.reply_with, t,
                      f"get_ask_resolution of {t!r}")
    # a cursor past a token no resolution has: strictly after it
    expect_result("A2A-RES-13", lambda: [r.ask.reply_with for r in store.list_ask_resolutions(w.c, "v1.rw-9z", 256)
                                         .resolutions], [t for t in wanted if t > "rw-9z"], "a page after 'rw-9z'")
    expect_result("A2A-RES-13", lambda: store.list_ask_resolutions(w.c, "v1." + wanted[-1], 3),
                  store.list_ask_resolutions(ctx("ws=w9"), "", 3), "the page after the last resolution")


@pytest.mark.clause("A2A-RES-12", "A2A-RES-13")
@pytest.mark.parametrize("cursor, limit", [
    ("", 0), ("", 257), ("", -1), ("", True), ("", "2"), ("", None), ("", 2.0),
    ("rw-a", 2), ("v2.rw-a", 2), ("v1.", 2), (None, 2), (7, 2), ("v1.a\x00", 2),
])
def test_bad_page_arguments_are_invalid(store, cursor, limit):
    w = W(store)
    store.seal_ask_resolution(w.c, w.ask(reply_with="rw-a"), w.reply("a"))
    expect_raises("A2A-RES-12", InvalidArgument, lambda: store.list_ask_resolutions(w.c, cursor, limit),
                  f"list_ask_resolutions({cursor!r}, {limit!r})")
    expect_result("A2A-RES-12", lambda: len(store.list_ask_resolutions(w.c, "", 256).resolutions), 1,
                  "the largest page")
