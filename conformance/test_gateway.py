"""Certifies class `gateway` (gateway.md): a chat gateway's durable state, opened
by location through the store under test.  It checks the unscoped shape and the
absence of any clock; opening, closing and the exclusive per-location lock (in
one process always, across processes where the harness can start a child that
opens the location, and the release on the holder's death through the harness's
crash hook and through a real child killed with SIGKILL); atomic deduplication
by (channel, message id) for the row's whole life; the pending → replied → done
transitions with done terminal; both queues, their paging and their order by
receipt instant then insertion; pruning of old done rows only; per-channel
offsets; conversation selection; and the upstream unit tests' properties
together with the deviations the spec decides.  The crash machine and the
concurrent machine (cortex_spec.stateful) check GW-CRASH and GW-RACE under
generated histories.  At the end: the examples this module gives the scope
and common suites (``EXAMPLES``: a gateway opened through the
``cortex_open_gateway`` fixture, its calls and its view).
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import attrs
import pytest

from cortex_spec import Context, Scope, ids
from cortex_spec.clock import EPOCH
from cortex_spec.errors import InvalidArgument, StoreClosed, StoreError, StoreLocked
from cortex_spec.gateway import InboundMessage, InboxItem, ItemStatus, rfc3339_nano
from cortex_spec.gateway_child import GatewayChild
from cortex_spec.testing import (
    FAR_FUTURE, ZERO, clause, ctx, expect, expect_false, expect_is, expect_op, expect_raises, expect_strict,
    expect_that, expect_true, race, Said, shorten,
)
from cortex_spec.gateway import gateway_view, make_message
from cortex_spec.validation import MAX_ENTITY_BYTES

from .examples import HOME, Examples, Site

UTC = timezone.utc
T0 = EPOCH + timedelta(days=3)
MS = timedelta(milliseconds=1)

#: contexts that must all be ignored (GW-SCOPE-2)
CONTEXTS = [
    ZERO,
    ctx("ws=w1"),
    ctx("ws=w1/proj=p1/env=e1"),
    Context(Scope(), partition="node-b", principal="mallory"),
    ctx("org=w1", partition="p9", principal="root"),
]

MESSAGE_FIELDS = ("channel", "message_id", "conversation", "principal", "text", "trusted",
                  "agent", "project")


def expected_item(msg: InboundMessage, now: datetime, status=ItemStatus.PENDING, reply="") -> InboxItem:
    return InboxItem(**{f: getattr(msg, f) for f in MESSAGE_FIELDS}, status=status, reply=reply,
                     received_at=now)


def assert_item(clause_id: str, actual: Any, expected: InboxItem, what: str = "item") -> None:
    """Field by field, with exact types (a bool stays a bool, a str a str);
    a difference is charged to ``clause_id``."""
    expect_that(clause_id, isinstance(actual, InboxItem), f"{what} is an InboxItem",
                Said("an InboxItem"), actual)
    for f in attrs.fields(InboxItem):
        got, want = getattr(actual, f.name), getattr(expected, f.name)
        if f.name == "status":
            expect(clause_id, got, want, f"{what}.status")
            expect_that(clause_id, isinstance(got, str), f"{what}.status is a str", Said("a str"), type(got))
        elif f.name == "received_at":
            expect(clause_id, got, want, f"{what}.received_at")
            expect(clause_id, got.utcoffset(), timedelta(0), f"{what}.received_at's offset from UTC")
        else:
            expect_strict(clause_id, got, want, f"{what}.{f.name}")


def keys_of(items: list[InboxItem]) -> list[tuple[str, str]]:
    return [(i.channel, i.message_id) for i in items]


def raises_nothing_written(clause_id: str, gateway, call, exc=InvalidArgument, keys=(), channels=(),
                           conversations=()) -> None:
    """``call()`` raises ``exc`` and writes nothing (both charged to ``clause_id``)."""
    before = gateway_view(gateway, keys, channels, conversations)
    expect_raises(clause_id, exc, call, "a call refused with " + exc.__name__)
    expect(clause_id, gateway_view(gateway, keys, channels, conversations), before,
           "the rows, offsets and selections after a refused call")


def _populate(gw) -> dict[str, Any]:
    """One row of each status, an offset and a selection; returns what was written."""
    p = make_message("tg", "p1", text="pending one")
    r = make_message("tg", "r1", text="replied one", agent="", project="")
    d = make_message("sms", "d1", text="done one", trusted=False)
    expect_is("GW-ACC-2", gw.accept(ZERO, p, T0), True, "accept of a new key (tg, p1)")
    expect_is("GW-ACC-2", gw.accept(ZERO, r, T0 + MS), True, "accept of a new key (tg, r1)")
    expect_is("GW-ACC-2", gw.accept(ZERO, d, T0 + 2 * MS), True, "accept of a new key (sms, d1)")
    expect_is("GW-ST-2", gw.set_replied(ZERO, "tg", "r1", "the reply"), True, "set_replied on a pending row")
    expect_is("GW-ST-6", gw.mark_done(ZERO, "sms", "d1"), True, "mark_done on a pending row")
    gw.set_offset(ZERO, "tg", 41)
    gw.set_conversation_agent(ZERO, "tg", "chat-1", "researcher")
    gw.set_conversation_project(ZERO, "tg", "chat-1", "proj-x")
    return {
        "items": {
            ("tg", "p1"): expected_item(p, T0),
            ("tg", "r1"): expected_item(r, T0 + MS, ItemStatus.REPLIED, "the reply"),
            ("sms", "d1"): expected_item(d, T0 + 2 * MS, ItemStatus.DONE),
        },
        "offsets": {"tg": 41, "sms": 0},
        "selections": {("tg", "chat-1"): ("researcher", "proj-x"), ("tg", "chat-2"): ("", "")},
    }


def _assert_populated(clause_id: str, gw, written: dict[str, Any]) -> None:
    """``gw`` holds what :func:`_populate` wrote (a difference is charged to ``clause_id``)."""
    for key, item in written["items"].items():
        assert_item(clause_id, gw.get_item(ZERO, *key), item, f"row {key}")
    expect(clause_id, keys_of(gw.pending(ZERO)), [("tg", "p1")], "the pending queue")
    expect(clause_id, keys_of(gw.pending_replies(ZERO)), [("tg", "r1")], "the pending_replies queue")
    for channel, value in written["offsets"].items():
        expect(clause_id, gw.offset(ZERO, channel), value, f"offset({channel!r})")
    for key, value in written["selections"].items():
        expect(clause_id, gw.conversation(ZERO, *key), value, f"conversation{key}")


# ===========================================================================
# Shape, scope and time (GW-SCOPE)
# ===========================================================================


@pytest.mark.clause("GW-SCOPE-1", "GW-SCOPE-2", "GW-ORD-1", "GW-ST-3")
def test_every_method_ignores_the_context(gateway):
    """Whatever the caller's scope, partition and principal (the zero scope
    included), every method sees and changes the same rows; NoScope never
    comes."""
    writers = CONTEXTS
    for i, c in enumerate(writers):
        expect_is("GW-SCOPE-2", gateway.accept(c, make_message("tg", f"m{i}"), T0 + i * MS), True,
                  'gateway.accept(c, make_message("tg", f"m{i}"), T0 + i * MS)')
    for i, c in enumerate(writers):
        # a key accepted under another context is a duplicate under this one
        expect_is("GW-SCOPE-2", gateway.accept(c, make_message("tg", f"m{(i + 1) % len(writers)}"), T0), False,
                  'gateway.accept(c, make_message("tg", f"m{(i + 1) % len(writers)}"), T0)')
    reference = gateway.pending(ZERO)
    with clause("GW-ORD-1", what="pending() after accepts 1 ms apart"):
        expect("GW-ORD-1", [i.message_id for i in reference], [f"m{i}" for i in range(len(writers))],
               "[i.message_id for i in reference]")
    for c in writers:
        expect("GW-SCOPE-2", gateway.pending(c), reference, "gateway.pending(c)")
        expect("GW-SCOPE-2", gateway.get_item(c, "tg", "m0"), reference[0], 'gateway.get_item(c, "tg", "m0")')
    expect_is("GW-SCOPE-2", gateway.set_replied(CONTEXTS[1], "tg", "m0", "r"), True,
              'gateway.set_replied(CONTEXTS[1], "tg", "m0", "r")')
    with clause("GW-ST-3", what="a second set_replied, under another context"):
        expect_is("GW-ST-3", gateway.set_replied(CONTEXTS[3], "tg", "m0", "other"), False,
                  'gateway.set_replied(CONTEXTS[3], "tg", "m0", "other")')
    for c in writers:
        expect("GW-SCOPE-2", keys_of(gateway.pending_replies(c)), [("tg", "m0")], "keys_of(gateway.pending_replies(c))")
    expect_is("GW-SCOPE-2", gateway.mark_done(CONTEXTS[4], "tg", "m0"), True,
              'gateway.mark_done(CONTEXTS[4], "tg", "m0")')
    expect_is("GW-SCOPE-2", gateway.mark_done(CONTEXTS[2], "tg", "m0"), False,
              'gateway.mark_done(CONTEXTS[2], "tg", "m0")')
    gateway.set_offset(CONTEXTS[1], "tg", 7)
    gateway.set_conversation_agent(CONTEXTS[2], "tg", "c", "a")
    gateway.set_conversation_project(CONTEXTS[3], "tg", "c", "p")
    for c in writers:
        expect("GW-SCOPE-2", gateway.offset(c, "tg"), 7, 'gateway.offset(c, "tg")')
        expect("GW-SCOPE-2", gateway.conversation(c, "tg", "c"), ("a", "p"), 'gateway.conversation(c, "tg", "c")')
    expect("GW-SCOPE-2", gateway.prune_done(CONTEXTS[3], T0 + timedelta(days=1)), 1,
           "gateway.prune_done(CONTEXTS[3], T0 + timedelta(days=1))")
    expect_is("GW-SCOPE-2", gateway.get_item(ZERO, "tg", "m0"), None, 'gateway.get_item(ZERO, "tg", "m0")')


@pytest.mark.clause("GW-SCOPE-1")
def test_items_carry_no_scope_or_partition(gateway):
    """An inbox row has no scope, partition or principal of the caller: the
    item type has no such fields, and a row accepted with a scoped,
    partitioned context reads back with only the message's own fields."""
    names = {f.name for f in attrs.fields(InboxItem)}
    expect_false("GW-SCOPE-1", names & {"scope", "partition"}, 'names & {"scope", "partition"}')
    msg = make_message("tg", "m1", principal="user:bob")
    expect_true("GW-SCOPE-1", gateway.accept(Context(Scope.parse("ws=w1"), partition="p1", principal="svc"), msg, T0),
                'gateway.accept(Context(Scope.parse("ws=w1"), partition="p1", principal="svc"), msg, T0)')
    item = gateway.get_item(ZERO, "tg", "m1")
    expect("GW-SCOPE-1", item.principal, "user:bob", "item.principal")  # the message's principal, not the caller's
    assert_item("GW-SCOPE-1", item, expected_item(msg, T0))


@pytest.mark.clause("GW-SCOPE-3")
def test_locations_are_isolated(open_gateway, other_location):
    """Two locations are open at the same time (their locks are separate) and
    share no row, offset or selection."""
    a = open_gateway()
    b = open_gateway(other_location)
    expect_is("GW-SCOPE-3", a.accept(ZERO, make_message("tg", "m1"), T0), True,
              'a.accept(ZERO, make_message("tg", "m1"), T0)')
    a.set_offset(ZERO, "tg", 5)
    a.set_conversation_agent(ZERO, "tg", "c", "agent-a")
    expect_is("GW-SCOPE-3", b.get_item(ZERO, "tg", "m1"), None, 'b.get_item(ZERO, "tg", "m1")')
    expect("GW-SCOPE-3", b.pending(ZERO), [], "b.pending(ZERO)")
    expect("GW-SCOPE-3", b.pending_replies(ZERO), [], "b.pending_replies(ZERO)")
    expect("GW-SCOPE-3", b.offset(ZERO, "tg"), 0, 'b.offset(ZERO, "tg")')
    expect("GW-SCOPE-3", b.conversation(ZERO, "tg", "c"), ("", ""), 'b.conversation(ZERO, "tg", "c")')
    # the same key is fresh in the other location, and stays independent
    expect_is("GW-SCOPE-3", b.accept(ZERO, make_message("tg", "m1", text="other"), T0 + MS), True,
              'b.accept(ZERO, make_message("tg", "m1", text="other"), T0 + MS)')
    expect_is("GW-SCOPE-3", b.mark_done(ZERO, "tg", "m1"), True, 'b.mark_done(ZERO, "tg", "m1")')
    expect("GW-SCOPE-3", a.get_item(ZERO, "tg", "m1").status, ItemStatus.PENDING, 'a.get_item(ZERO, "tg", "m1").status')
    expect("GW-SCOPE-3", b.prune_done(ZERO, T0 + timedelta(days=1)), 1, "b.prune_done(ZERO, T0 + timedelta(days=1))")
    expect_op("GW-SCOPE-3", a.get_item(ZERO, "tg", "m1"), "is not", None, 'a.get_item(ZERO, "tg", "m1")')


@pytest.mark.clause("GW-SCOPE-4", "GW-OPEN-5")
def test_location_outlives_the_stores_opened_on_it(open_gateway, gateway_location, cortex_open, clock):
    """The state belongs to the location, not to the store object that opened
    it: after close, another opener of the same backend reopens it with
    everything acknowledged."""
    first = open_gateway()
    written = _populate(first)
    first.close()
    second_opener = cortex_open(clock)
    second = second_opener.open_gateway(gateway_location)
    try:
        _assert_populated("GW-SCOPE-4", second, written)
    finally:
        second.close()


@pytest.mark.clause("GW-SCOPE-5", "RSC-GEN-2")
def test_received_at_is_the_now_argument_not_the_clock(gateway, clock):
    """The store's clock is never read: `received_at` is the `now` given,
    converted to UTC and truncated to whole milliseconds, whatever the clock
    says, and moving the clock changes nothing."""
    clock.set(datetime(2001, 1, 1, tzinfo=UTC))
    plus2 = timezone(timedelta(hours=2))
    cases = {
        "a": (datetime(2030, 5, 1, 12, 0, 0, 123999, tzinfo=UTC), datetime(2030, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)),
        "b": (datetime(2030, 5, 1, 14, 0, 0, 999, tzinfo=plus2), datetime(2030, 5, 1, 12, 0, 0, 0, tzinfo=UTC)),
        "c": (datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), datetime(1999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)),
    }
    for mid, (given, stored) in cases.items():
        expect_is("GW-SCOPE-5", gateway.accept(ZERO, make_message("tg", mid), given), True,
                  'gateway.accept(ZERO, make_message("tg", mid), given)')
        expect("GW-SCOPE-5", gateway.get_item(ZERO, "tg", mid).received_at, stored,
               'gateway.get_item(ZERO, "tg", mid).received_at')
    clock.advance(timedelta(days=400))
    for mid, (_, stored) in cases.items():
        got = gateway.get_item(ZERO, "tg", mid).received_at
        expect("RSC-GEN-2", got, stored, "got")
        expect("RSC-GEN-2", got.utcoffset(), timedelta(0), "got.utcoffset()")


@pytest.mark.clause("GW-SCOPE-5", "GW-PRUNE-1")
def test_prune_compares_with_before_not_the_clock(gateway, clock):
    """The cutoff is the argument: a clock far in the future does not make a
    recent done row old, a clock in the past does not protect an old one, and
    `before` is truncated to milliseconds before it is compared."""
    expect_true("GW-SCOPE-5", gateway.accept(ZERO, make_message("tg", "old"), T0),
                'gateway.accept(ZERO, make_message("tg", "old"), T0)')
    expect_true("GW-SCOPE-5", gateway.mark_done(ZERO, "tg", "old"), 'gateway.mark_done(ZERO, "tg", "old")')
    clock.set(T0 + timedelta(days=3650))
    expect("GW-PRUNE-1", gateway.prune_done(ZERO, T0), 0, "gateway.prune_done(ZERO, T0)")  # strictly before: not the row itself
    # T0 + 0.9 ms truncates to T0: still not strictly earlier
    expect("GW-PRUNE-1", gateway.prune_done(ZERO, T0 + timedelta(microseconds=900)), 0,
           "gateway.prune_done(ZERO, T0 + timedelta(microseconds=900))")
    clock.set(T0 - timedelta(days=3650))
    expect("GW-PRUNE-1", gateway.prune_done(ZERO, T0 + MS), 1, "gateway.prune_done(ZERO, T0 + MS)")


@pytest.mark.clause("GW-SCOPE-5", "RSC-GEN-2", "GW-ACC-6")
@pytest.mark.parametrize("bad", [datetime(2026, 1, 1), "2026-01-01T00:00:00Z", 1767225600, None],
                         ids=["naive", "text", "epoch-int", "none"])
def test_instants_must_be_aware_datetimes(gateway, bad):
    """A naive or non-datetime `now` or `before` is InvalidArgument and writes nothing."""
    expect_true("GW-SCOPE-5", gateway.accept(ZERO, make_message("tg", "kept"), T0),
                'gateway.accept(ZERO, make_message("tg", "kept"), T0)')
    expect_true("GW-SCOPE-5", gateway.mark_done(ZERO, "tg", "kept"), 'gateway.mark_done(ZERO, "tg", "kept")')
    keys = [("tg", "kept"), ("tg", "new")]
    raises_nothing_written("GW-SCOPE-5", gateway, lambda: gateway.accept(ZERO, make_message("tg", "new"), bad), keys=keys)
    raises_nothing_written("GW-SCOPE-5", gateway, lambda: gateway.prune_done(ZERO, bad), keys=keys)


@pytest.mark.clause("GW-SCOPE-6", "RSC-GEN-12")
def test_one_store_serves_many_threads(gateway, profile):
    """Threads using one open store at once, each on its own keys, channels and
    conversations, with queue reads in between: every call succeeds and the
    final state holds every write."""
    n = profile.race_threads

    def worker(i: int) -> None:
        ch = f"ch{i}"
        for j in range(4):
            expect_true("GW-SCOPE-6", gateway.accept(ZERO, make_message(ch, f"m{j}"), T0 + j * MS),
                        'gateway.accept(ZERO, make_message(ch, f"m{j}"), T0 + j * MS)')
            gateway.pending(ZERO)
        expect_true("GW-SCOPE-6", gateway.set_replied(ZERO, ch, "m0", f"reply {i}"),
                    'gateway.set_replied(ZERO, ch, "m0", f"reply {i}")')
        expect_true("GW-SCOPE-6", gateway.mark_done(ZERO, ch, "m1"), 'gateway.mark_done(ZERO, ch, "m1")')
        gateway.set_offset(ZERO, ch, i)
        gateway.set_conversation_agent(ZERO, ch, "c", f"a{i}")
        gateway.set_conversation_project(ZERO, ch, "c", f"p{i}")
        gateway.pending_replies(ZERO)

    for outcome in race([lambda i=i: worker(i) for i in range(n)]):
        expect_is("GW-SCOPE-6", outcome.error, None, "the error raised by the racing call outcome")
    expect("GW-SCOPE-6", len(gateway.pending(ZERO)), 2 * n, "len(gateway.pending(ZERO))")
    expect("GW-SCOPE-6", sorted(i.channel for i in gateway.pending_replies(ZERO)), sorted(f"ch{i}" for i in range(n)),
           "sorted(i.channel for i in gateway.pending_replies(ZERO))")
    for i in range(n):
        expect("GW-SCOPE-6", gateway.get_item(ZERO, f"ch{i}", "m0").reply, f"reply {i}",
               'gateway.get_item(ZERO, f"ch{i}", "m0").reply')
        expect("GW-SCOPE-6", gateway.get_item(ZERO, f"ch{i}", "m1").status, ItemStatus.DONE,
               'gateway.get_item(ZERO, f"ch{i}", "m1").status')
        expect("GW-SCOPE-6", gateway.offset(ZERO, f"ch{i}"), i, 'gateway.offset(ZERO, f"ch{i}")')
        expect("GW-SCOPE-6", gateway.conversation(ZERO, f"ch{i}", "c"), (f"a{i}", f"p{i}"),
               'gateway.conversation(ZERO, f"ch{i}", "c")')


# ===========================================================================
# Open, close and the lock (GW-OPEN)
# ===========================================================================


@pytest.mark.clause("GW-OPEN-1")
def test_open_creates_an_empty_location_and_holds_its_lock(store, gateway_location):
    gw = store.open_gateway(gateway_location)
    try:
        expect("GW-OPEN-1", gw.pending(ZERO), [], "gw.pending(ZERO)")
        expect("GW-OPEN-1", gw.pending_replies(ZERO), [], "gw.pending_replies(ZERO)")
        expect_is("GW-OPEN-1", gw.get_item(ZERO, "tg", "m1"), None, 'gw.get_item(ZERO, "tg", "m1")')
        expect("GW-OPEN-1", gw.offset(ZERO, "tg"), 0, 'gw.offset(ZERO, "tg")')
        expect("GW-OPEN-1", gw.conversation(ZERO, "tg", "c"), ("", ""), 'gw.conversation(ZERO, "tg", "c")')
        expect_is("GW-OPEN-1", gw.accept(ZERO, make_message("tg", "m1"), T0), True,
                  'gw.accept(ZERO, make_message("tg", "m1"), T0)')
        with pytest.raises(StoreLocked):
            store.open_gateway(gateway_location)
    finally:
        gw.close()


@pytest.mark.clause("GW-OPEN-2", "GW-OPEN-4")
def test_second_open_in_the_same_process_is_refused(open_gateway, gateway_location, cortex_open, clock):
    """Through the same opener and through another opener object of the same
    backend, a held location raises StoreLocked; the refusal writes nothing and
    the holder keeps working."""
    holder = open_gateway()
    written = _populate(holder)
    view_keys = list(written["items"])
    before = gateway_view(holder, view_keys, ["tg", "sms"], list(written["selections"]))
    other_opener = cortex_open(clock)
    for opener in (None, other_opener):
        for _ in range(3):
            with pytest.raises(StoreLocked):
                if opener is None:
                    open_gateway()
                else:
                    opener.open_gateway(gateway_location)
    expect("GW-OPEN-4", gateway_view(holder, view_keys, ["tg", "sms"], list(written["selections"])), before,
           'gateway_view(holder, view_keys, ["tg", "sms"], list(written["selections"]))')
    expect_is("GW-OPEN-2", holder.accept(ZERO, make_message("tg", "after"), T0 + timedelta(seconds=1)), True,
              'holder.accept(ZERO, make_message("tg", "after"), T0 + timedelta(seconds=1))')


@pytest.mark.clause("GW-OPEN-3")
def test_refused_open_neither_waits_nor_retries(open_gateway, store, gateway_location):
    """The refused open returns while the holder still holds the lock (it did
    not wait for a release that never comes), and it left nothing behind that
    grabs the lock later: once the holder closes, a new open succeeds."""
    holder = open_gateway()
    done = threading.Event()
    box: list[BaseException | None] = []

    def refused() -> None:
        try:
            store.open_gateway(gateway_location).close()
            box.append(None)
        except BaseException as exc:  # noqa: BLE001 - the outcome is the data
            box.append(exc)
        done.set()

    t = threading.Thread(target=refused, daemon=True)
    t.start()
    expect_true("GW-OPEN-3", done.wait(30), "the refused open is still waiting for the lock")
    expect_that("GW-OPEN-3", isinstance(box[0], StoreLocked), "box[0]" + ": " + shorten(box),
                Said("an instance of StoreLocked"), box[0])
    expect("GW-OPEN-3", holder.pending(ZERO), [], "holder.pending(ZERO)")  # the holder was not disturbed
    holder.close()
    again = store.open_gateway(gateway_location)
    try:
        expect("GW-OPEN-3", again.pending(ZERO), [], "again.pending(ZERO)")
    finally:
        again.close()


@pytest.mark.clause("GW-OPEN-5", "GW-CRASH-4", "GW-CRASH-1")
def test_close_releases_the_lock_and_reopen_sees_everything(store, gateway_location):
    """The upstream's reopen tests: pending and replied rows (with the reply),
    done rows, offsets and selections survive close and reopen, repeatedly."""
    gw = store.open_gateway(gateway_location)
    written = _populate(gw)
    gw.close()
    for _ in range(3):
        gw = store.open_gateway(gateway_location)
        try:
            _assert_populated("GW-OPEN-5", gw, written)
            expect_is("GW-OPEN-5", gw.accept(ZERO, make_message("tg", "p1"), T0), False,
                      'gw.accept(ZERO, make_message("tg", "p1"), T0)')
        finally:
            gw.close()


@pytest.mark.clause("GW-OPEN-6", "GW-CRASH-9", "GW-CRASH-1", "GW-CRASH-8")
@pytest.mark.cortex_requires("gateway-crash")
def test_death_of_the_holder_releases_the_lock(store, gateway_location, cortex_harness):
    """The harness's crash hook stands in for the death of the holding
    process: the next open succeeds (a lease backend may refuse it only until
    its declared lease has run out) and sees everything acknowledged."""
    gw = store.open_gateway(gateway_location)
    written = _populate(gw)
    cortex_harness.crash_gateway(gw)
    try:
        again = store.open_gateway(gateway_location)
    except StoreLocked:
        expect_op("GW-OPEN-6", cortex_harness.gateway_lease, "is not", None,
                  "the lock of a dead holder kept the next open out, and the backend declares no lease")
        cortex_harness.expire_gateway_lease(gateway_location)
        again = store.open_gateway(gateway_location)
    try:
        _assert_populated("GW-CRASH-1", again, written)
    finally:
        again.close()


@pytest.mark.clause("GW-OPEN-7")
def test_close_is_idempotent_and_every_method_then_raises_store_closed(gateway):
    gateway.accept(ZERO, make_message("tg", "m1"), T0)
    gateway.close()
    gateway.close()
    calls = {
        "accept": lambda: gateway.accept(ZERO, make_message("tg", "m2"), T0),
        "get_item": lambda: gateway.get_item(ZERO, "tg", "m1"),
        "pending": lambda: gateway.pending(ZERO),
        "set_replied": lambda: gateway.set_replied(ZERO, "tg", "m1", "r"),
        "pending_replies": lambda: gateway.pending_replies(ZERO),
        "mark_done": lambda: gateway.mark_done(ZERO, "tg", "m1"),
        "prune_done": lambda: gateway.prune_done(ZERO, T0),
        "offset": lambda: gateway.offset(ZERO, "tg"),
        "set_offset": lambda: gateway.set_offset(ZERO, "tg", 1),
        "conversation": lambda: gateway.conversation(ZERO, "tg", "c"),
        "set_conversation_agent": lambda: gateway.set_conversation_agent(ZERO, "tg", "c", "a"),
        "set_conversation_project": lambda: gateway.set_conversation_project(ZERO, "tg", "c", "p"),
    }
    from cortex_spec.gateway import GATEWAY_METHODS

    if set(calls) != set(GATEWAY_METHODS):  # the test's own table, not the store's rule
        raise TypeError(f"calls misses or adds methods: {sorted(set(calls) ^ set(GATEWAY_METHODS))}")
    for name, call in calls.items():
        with pytest.raises(StoreClosed):
            call()
    gateway.close()


@pytest.mark.clause("GW-OPEN-7", "GW-OPEN-5")
def test_closed_store_wrote_nothing_after_close(store, gateway_location):
    """Calls refused with StoreClosed left no trace: the reopened location has
    only what was acknowledged before the close."""
    gw = store.open_gateway(gateway_location)
    expect_true("GW-OPEN-7", gw.accept(ZERO, make_message("tg", "m1"), T0),
                'gw.accept(ZERO, make_message("tg", "m1"), T0)')
    gw.close()
    for call in (lambda: gw.accept(ZERO, make_message("tg", "m2"), T0),
                 lambda: gw.set_replied(ZERO, "tg", "m1", "late"),
                 lambda: gw.set_offset(ZERO, "tg", 9)):
        with pytest.raises(StoreClosed):
            call()
    again = store.open_gateway(gateway_location)
    try:
        expect("GW-OPEN-7", keys_of(again.pending(ZERO)), [("tg", "m1")], "keys_of(again.pending(ZERO))")
        expect("GW-OPEN-7", again.get_item(ZERO, "tg", "m1").reply, "", 'again.get_item(ZERO, "tg", "m1").reply')
        expect("GW-OPEN-7", again.offset(ZERO, "tg"), 0, 'again.offset(ZERO, "tg")')
    finally:
        again.close()


@pytest.mark.clause("GW-OPEN-8")
@pytest.mark.cortex_requires("unusable-location")
def test_failed_open_is_store_error_and_leaves_no_lock(store, cortex_harness):
    """A location whose storage cannot be used fails to open with StoreError
    (repeatedly: the failed open left no lock behind), and once repaired it
    opens."""
    location, repair = cortex_harness.unusable_gateway_location()
    try:
        for _ in range(2):
            with pytest.raises(StoreError):
                store.open_gateway(location)
        repair()
        gw = store.open_gateway(location)
        try:
            expect_is("GW-OPEN-8", gw.accept(ZERO, make_message("tg", "m1"), T0), True,
                      'gw.accept(ZERO, make_message("tg", "m1"), T0)')
        finally:
            gw.close()
    finally:
        cortex_harness.discard_gateway_location(location)


@pytest.mark.clause("GW-OPEN-8")
@pytest.mark.parametrize("bad", [object(), 3.5, b"\x00"], ids=["object", "float", "bytes-nul"])
def test_location_of_no_backend_type_is_invalid_argument(store, bad):
    """A location value no backend defines is refused as bad input."""
    with pytest.raises(InvalidArgument):
        store.open_gateway(bad)


# -- across processes ------------------------------------------------------------------


def _child(harness, location) -> GatewayChild:
    target, args = harness.gateway_child(location)
    return GatewayChild(target, args)


@pytest.mark.clause("GW-OPEN-2", "GW-OPEN-3", "GW-OPEN-4")
@pytest.mark.cortex_requires("cross-process")
def test_lock_keeps_out_another_process(store, gateway_location, cortex_harness):
    """A child process holding the location keeps this process out, and this
    process holding it keeps a child out; each refusal is immediate and writes
    nothing."""
    with _child(cortex_harness, gateway_location) as child:
        expect_is("GW-OPEN-2", child.open(), None, "child.open()")
        expect("GW-OPEN-2", child.call("accept", make_message("tg", "from-child"), T0), ("ok", True),
               'child.call("accept", make_message("tg", "from-child"), T0)')
        for _ in range(2):
            with pytest.raises(StoreLocked):
                store.open_gateway(gateway_location)
        expect("GW-OPEN-2", child.call("pending") [1][0].message_id, "from-child",
               'child.call("pending") [1][0].message_id')
        child.close()
    gw = store.open_gateway(gateway_location)
    try:
        expect("GW-OPEN-2", keys_of(gw.pending(ZERO)), [("tg", "from-child")], "keys_of(gw.pending(ZERO))")
        before = gateway_view(gw, [("tg", "from-child")], ["tg"])
        with _child(cortex_harness, gateway_location) as other:
            expect("GW-OPEN-2", other.open(), "StoreLocked", "other.open()")
        expect("GW-OPEN-4", gateway_view(gw, [("tg", "from-child")], ["tg"]), before,
               'gateway_view(gw, [("tg", "from-child")], ["tg"])')
        expect_is("GW-OPEN-2", gw.accept(ZERO, make_message("tg", "parent"), T0 + MS), True,
                  'gw.accept(ZERO, make_message("tg", "parent"), T0 + MS)')
    finally:
        gw.close()


@pytest.mark.clause("GW-OPEN-6", "GW-CRASH-9", "GW-CRASH-1", "GW-CRASH-3", "GW-CRASH-8")
@pytest.mark.cortex_requires("cross-process")
def test_killed_holder_process_releases_the_lock(store, gateway_location, cortex_harness):
    """A child process opens the location, writes, and is killed with SIGKILL
    while holding the lock: no cleanup code runs, yet this process opens the
    location at once and finds every acknowledged write."""
    child = _child(cortex_harness, gateway_location)
    try:
        expect_is("GW-OPEN-6", child.open(), None, "child.open()")
        msg = make_message("tg", "k1")
        expect("GW-CRASH-1", child.call("accept", msg, T0), ("ok", True), 'child.call("accept", msg, T0)')
        expect("GW-CRASH-1", child.call("accept", make_message("tg", "k2"), T0 + MS), ("ok", True),
               'child.call("accept", make_message("tg", "k2"), T0 + MS)')
        expect("GW-CRASH-3", child.call("set_replied", "tg", "k1", "answer"), ("ok", True),
               'child.call("set_replied", "tg", "k1", "answer")')
        expect("GW-CRASH-8", child.call("set_offset", "tg", 99), ("ok", None), 'child.call("set_offset", "tg", 99)')
        expect("GW-CRASH-8", child.call("set_conversation_project", "tg", "c", "px"), ("ok", None),
               'child.call("set_conversation_project", "tg", "c", "px")')
    finally:
        child.kill()
    try:
        gw = store.open_gateway(gateway_location)
    except StoreLocked:  # a server-side release gets its declared bound (GW-OPEN-6)
        expect_op("GW-OPEN-6", cortex_harness.gateway_lease, "is not", None,
                  "the killed holder's lock kept the open out")
        cortex_harness.expire_gateway_lease(gateway_location)
        gw = store.open_gateway(gateway_location)
    try:
        assert_item("GW-CRASH-1", gw.get_item(ZERO, "tg", "k1"), expected_item(msg, T0, ItemStatus.REPLIED, "answer"))
        expect("GW-CRASH-3", keys_of(gw.pending(ZERO)), [("tg", "k2")], "keys_of(gw.pending(ZERO))")
        expect("GW-CRASH-3", keys_of(gw.pending_replies(ZERO)), [("tg", "k1")], "keys_of(gw.pending_replies(ZERO))")
        expect("GW-CRASH-8", gw.offset(ZERO, "tg"), 99, 'gw.offset(ZERO, "tg")')
        expect("GW-CRASH-8", gw.conversation(ZERO, "tg", "c"), ("", "px"), 'gw.conversation(ZERO, "tg", "c")')
        expect_is("GW-CRASH-1", gw.accept(ZERO, msg, T0), False, "gw.accept(ZERO, msg, T0)")  # GW-CRASH-2 after a real death
    finally:
        gw.close()


# ===========================================================================
# Accept and deduplication (GW-ACC)
# ===========================================================================


@pytest.mark.clause("GW-ACC-2", "GW-ACC-8")
def test_accept_stores_a_pending_row_with_every_field(gateway):
    msg = make_message("telegram", "1001", conversation="chat-9", principal="user:7",
                       text="héllo 👋\nsecond line", trusted=True, agent="writer", project="p-1")
    expect_is("GW-ACC-2", gateway.accept(ZERO, msg, T0), True, "gateway.accept(ZERO, msg, T0)")
    assert_item("GW-ACC-2", gateway.get_item(ZERO, "telegram", "1001"), expected_item(msg, T0))
    plain = InboundMessage(channel="telegram", message_id="1002")
    expect_is("GW-ACC-2", gateway.accept(ZERO, plain, T0), True, "gateway.accept(ZERO, plain, T0)")
    assert_item("GW-ACC-2", gateway.get_item(ZERO, "telegram", "1002"), expected_item(plain, T0))


@pytest.mark.clause("GW-ACC-2", "RSC-GEN-8")
def test_large_text_round_trips(gateway):
    text = "ü" * (1024 * 1024)
    expect_true("GW-ACC-2", gateway.accept(ZERO, make_message("tg", "big", text=text), T0),
                'gateway.accept(ZERO, make_message("tg", "big", text=text), T0)')
    expect("GW-ACC-2", gateway.get_item(ZERO, "tg", "big").text, text, 'gateway.get_item(ZERO, "tg", "big").text')
    expect("GW-ACC-2", gateway.pending(ZERO)[0].text, text, "gateway.pending(ZERO)[0].text")


@pytest.mark.clause("GW-ACC-1", "GW-ACC-3")
def test_dedup_key_is_channel_and_message_id_exactly(gateway):
    """The upstream TestAcceptDedup and more: the same id on another channel,
    and keys differing only in case, whitespace or Unicode normalisation, are
    different keys."""
    expect_is("GW-ACC-3", gateway.accept(ZERO, make_message("telegram", "m1"), T0), True,
              'gateway.accept(ZERO, make_message("telegram", "m1"), T0)')
    expect_is("GW-ACC-3", gateway.accept(ZERO, make_message("telegram", "m1"), T0), False,
              'gateway.accept(ZERO, make_message("telegram", "m1"), T0)')
    distinct = [("slack", "m1"), ("Telegram", "m1"), ("telegram", "M1"), ("telegram", "m1 "),
                ("telegram ", "m1"), ("telegram", "é"), ("telegram", "e\u0301"), ("telegramm", "1")]
    for i, (channel, mid) in enumerate(distinct):
        expect_is("GW-ACC-1", gateway.accept(ZERO, make_message(channel, mid), T0 + i * MS), True,
                  "gateway.accept(ZERO, make_message(channel, mid), T0 + i * MS)" + ": " + shorten((channel, mid)))
    for channel, mid in distinct:
        expect_is("GW-ACC-3", gateway.accept(ZERO, make_message(channel, mid), T0), False,
                  "gateway.accept(ZERO, make_message(channel, mid), T0)")
    expect("GW-ACC-1", len(gateway.pending(ZERO)), 1 + len(distinct), "len(gateway.pending(ZERO))")


@pytest.mark.clause("GW-ACC-3", "GW-ACC-7")
@pytest.mark.parametrize("status", ["pending", "replied", "done"])
def test_duplicate_accept_changes_nothing(gateway, status):
    """Whatever the row's status, a redelivery with different text, principal,
    trust flag, conversation and snapshot and a later receipt time returns
    False and the row keeps its first values."""
    first = make_message("tg", "m1", text="first", principal="a", trusted=False, agent="x", project="y")
    expect_true("GW-ACC-3", gateway.accept(ZERO, first, T0), "gateway.accept(ZERO, first, T0)")
    reply = ""
    if status in ("replied", "done"):
        reply = "the answer"
        expect_true("GW-ACC-3", gateway.set_replied(ZERO, "tg", "m1", reply),
                    'gateway.set_replied(ZERO, "tg", "m1", reply)')
    if status == "done":
        expect_true("GW-ACC-3", gateway.mark_done(ZERO, "tg", "m1"), 'gateway.mark_done(ZERO, "tg", "m1")')
    want = expected_item(first, T0, ItemStatus(status), reply)
    before = gateway_view(gateway, [("tg", "m1")])
    second = make_message("tg", "m1", text="second", principal="b", trusted=True,
                          conversation="other", agent="z", project="w")
    for when in (T0, T0 + timedelta(hours=1), T0 - timedelta(hours=1)):
        expect_is("GW-ACC-3", gateway.accept(ZERO, second, when), False, "gateway.accept(ZERO, second, when)")
    assert_item("GW-ACC-3", gateway.get_item(ZERO, "tg", "m1"), want)
    expect("GW-ACC-3", gateway_view(gateway, [("tg", "m1")]), before, 'gateway_view(gateway, [("tg", "m1")])')


@pytest.mark.clause("GW-ACC-4", "GW-PRUNE-1")
def test_dedup_lasts_until_the_row_is_pruned(gateway):
    """The upstream TestPruneDone: a done row still deduplicates until a prune
    deletes it; a prune whose cutoff does not reach it changes nothing; after
    the row is gone the key is fresh and stores the new delivery."""
    expect_true("GW-ACC-4", gateway.accept(ZERO, make_message("tg", "old", text="v1"), T0),
                'gateway.accept(ZERO, make_message("tg", "old", text="v1"), T0)')
    expect_true("GW-ACC-4", gateway.accept(ZERO, make_message("tg", "recent", text="v1"), T0 + timedelta(hours=2)),
                'gateway.accept(ZERO, make_message("tg", "recent", text="v1"), T0 + timedelta(hours=2))')
    for mid in ("old", "recent"):
        expect_true("GW-ACC-4", gateway.mark_done(ZERO, "tg", mid), 'gateway.mark_done(ZERO, "tg", mid)')
        expect_is("GW-ACC-4", gateway.accept(ZERO, make_message("tg", mid, text="v2"), T0), False,
                  'gateway.accept(ZERO, make_message("tg", mid, text="v2"), T0)')
    expect("GW-PRUNE-1", gateway.prune_done(ZERO, T0), 0, "gateway.prune_done(ZERO, T0)")
    expect_is("GW-ACC-4", gateway.accept(ZERO, make_message("tg", "old", text="v2"), T0), False,
              'gateway.accept(ZERO, make_message("tg", "old", text="v2"), T0)')
    expect("GW-PRUNE-1", gateway.prune_done(ZERO, T0 + timedelta(hours=1)), 1,
           "gateway.prune_done(ZERO, T0 + timedelta(hours=1))")
    expect_is("GW-PRUNE-1", gateway.get_item(ZERO, "tg", "old"), None, 'gateway.get_item(ZERO, "tg", "old")')
    expect_is("GW-ACC-4", gateway.accept(ZERO, make_message("tg", "recent", text="v2"), T0), False,
              'gateway.accept(ZERO, make_message("tg", "recent", text="v2"), T0)')
    later = T0 + timedelta(hours=3)
    new = make_message("tg", "old", text="v2")
    expect_is("GW-ACC-4", gateway.accept(ZERO, new, later), True, "gateway.accept(ZERO, new, later)")
    assert_item("GW-ACC-4", gateway.get_item(ZERO, "tg", "old"), expected_item(new, later))
    expect_is("GW-ACC-4", gateway.accept(ZERO, new, later), False, "gateway.accept(ZERO, new, later)")


@pytest.mark.clause("GW-ACC-5", "GW-SCOPE-6")
def test_concurrent_accepts_of_one_key_have_exactly_one_winner(gateway, profile):
    """`race_threads` deliveries of one key, each with its own text: exactly
    one returns True, every other False, and the stored row is the winner's.
    Repeated on fresh keys."""
    n = profile.race_threads
    for round_ in range(profile.race_rounds):
        mid = f"race-{round_}"
        msgs = [make_message("tg", mid, text=f"copy {i}") for i in range(n)]
        outcomes = race([lambda m=m: gateway.accept(ZERO, m, T0 + round_ * MS) for m in msgs])
        expect_true("GW-ACC-5", all(o.ok for o in outcomes),
                    "all(o.ok for o in outcomes)" + ": " + shorten([o.error for o in outcomes if not o.ok]))
        winners = [i for i, o in enumerate(outcomes) if o.value is True]
        expect("GW-ACC-5", len(winners), 1, f"round {round_}: {len(winners)} accepts returned True")
        expect_true("GW-ACC-5", all(o.value is False for i, o in enumerate(outcomes) if i != winners[0]),
                    "all(o.value is False for i, o in enumerate(outcomes) if i != winners[0])")
        expect("GW-ACC-5", gateway.get_item(ZERO, "tg", mid).text, f"copy {winners[0]}",
               'gateway.get_item(ZERO, "tg", mid).text')
    expect("GW-ACC-5", len(gateway.pending(ZERO)), profile.race_rounds, "len(gateway.pending(ZERO))")


BAD_MESSAGES = {
    "empty-channel": lambda: make_message("", "m1"),
    "empty-message-id": lambda: make_message("tg", ""),
    "long-channel": lambda: make_message("c" * 256, "m1"),
    "long-message-id": lambda: make_message("tg", "m" * 256),
    "long-conversation": lambda: make_message("tg", "m1", conversation="c" * 256),
    "long-principal": lambda: make_message("tg", "m1", principal="p" * 256),
    "long-agent": lambda: make_message("tg", "m1", agent="a" * 256),
    "long-project": lambda: make_message("tg", "m1", project="p" * 256),
    "nul-channel": lambda: make_message("t\x00g", "m1"),
    "nul-message-id": lambda: make_message("tg", "m\x001"),
    "nul-text": lambda: make_message("tg", "m1", text="a\x00b"),
    "surrogate-text": lambda: make_message("tg", "m1", text="a\ud800b"),
    "surrogate-principal": lambda: make_message("tg", "m1", principal="\udfff"),
    "nul-agent": lambda: make_message("tg", "m1", agent="\x00"),
    "int-message-id": lambda: make_message("tg", 42),
    "none-channel": lambda: make_message(None, "m1"),
    "bytes-text": lambda: make_message("tg", "m1", text=b"hi"),
    "none-text": lambda: make_message("tg", "m1", text=None),
    "int-trusted": lambda: make_message("tg", "m1", trusted=1),
    "str-trusted": lambda: make_message("tg", "m1", trusted="yes"),
    "none-project": lambda: make_message("tg", "m1", project=None),
    "oversized": lambda: make_message("tg", "m1", text="x" * MAX_ENTITY_BYTES),
    "not-a-message": lambda: {"channel": "tg", "message_id": "m1"},
    "an-item": lambda: InboxItem(channel="tg", message_id="m1", received_at=T0),
}


@pytest.mark.clause("GW-ACC-6", "RSC-GEN-6", "RSC-GEN-8")
@pytest.mark.parametrize("case", sorted(BAD_MESSAGES))
def test_accept_refuses_bad_messages(gateway, case):
    expect_true("GW-ACC-6", gateway.accept(ZERO, make_message("tg", "other"), T0),
                'gateway.accept(ZERO, make_message("tg", "other"), T0)')
    raises_nothing_written("GW-ACC-6", gateway, lambda: gateway.accept(ZERO, BAD_MESSAGES[case](), T0),
                           keys=[("tg", "m1"), ("tg", "other")])


BAD_KEYS = [("", "m1"), ("tg", ""), ("", ""), ("c" * 256, "m1"), ("tg", "m" * 256), ("t\x00g", "m1"),
            ("tg", "m\ud800"), (None, "m1"), ("tg", 7), (b"tg", "m1")]


@pytest.mark.clause("GW-ACC-6")
@pytest.mark.parametrize("channel, message_id", BAD_KEYS)
def test_key_methods_refuse_bad_keys(gateway, channel, message_id):
    """`get_item`, `set_replied` and `mark_done` refuse an empty, oversized,
    NUL- or surrogate-bearing or non-str key part; nothing is written."""
    expect_true("GW-ACC-6", gateway.accept(ZERO, make_message("tg", "m1"), T0),
                'gateway.accept(ZERO, make_message("tg", "m1"), T0)')
    keys = [("tg", "m1")]
    raises_nothing_written("GW-ACC-6", gateway, lambda: gateway.get_item(ZERO, channel, message_id), keys=keys)
    raises_nothing_written("GW-ACC-6", gateway, lambda: gateway.set_replied(ZERO, channel, message_id, "r"), keys=keys)
    raises_nothing_written("GW-ACC-6", gateway, lambda: gateway.mark_done(ZERO, channel, message_id), keys=keys)


@pytest.mark.clause("GW-ACC-6", "RSC-GEN-6", "RSC-GEN-8")
@pytest.mark.parametrize("reply", [None, 42, b"r", "a\x00b", "\ud800", "x" * MAX_ENTITY_BYTES],
                         ids=["none", "int", "bytes", "nul", "surrogate", "oversized"])
def test_set_replied_refuses_bad_replies(gateway, reply):
    expect_true("GW-ACC-6", gateway.accept(ZERO, make_message("tg", "m1"), T0),
                'gateway.accept(ZERO, make_message("tg", "m1"), T0)')
    raises_nothing_written("GW-ACC-6", gateway, lambda: gateway.set_replied(ZERO, "tg", "m1", reply),
                           keys=[("tg", "m1")])
    expect_is("GW-ACC-6", gateway.set_replied(ZERO, "tg", "m1", "fine"), True,
              'gateway.set_replied(ZERO, "tg", "m1", "fine")')


@pytest.mark.clause("GW-ACC-6", "RSC-GEN-8")
def test_reply_that_makes_the_row_too_large_is_refused(gateway):
    """The row with its reply must fit RSC-GEN-8, whatever the row's status."""
    text = "t" * (MAX_ENTITY_BYTES // 2)
    reply = "r" * (MAX_ENTITY_BYTES // 2)
    for mid in ("p", "d"):
        expect_true("GW-ACC-6", gateway.accept(ZERO, make_message("tg", mid, text=text), T0),
                    'gateway.accept(ZERO, make_message("tg", mid, text=text), T0)')
    expect_true("GW-ACC-6", gateway.mark_done(ZERO, "tg", "d"), 'gateway.mark_done(ZERO, "tg", "d")')
    keys = [("tg", "p"), ("tg", "d")]
    raises_nothing_written("RSC-GEN-8", gateway, lambda: gateway.set_replied(ZERO, "tg", "p", reply), keys=keys)
    raises_nothing_written("RSC-GEN-8", gateway, lambda: gateway.set_replied(ZERO, "tg", "d", reply), keys=keys)
    expect_is("GW-ACC-6", gateway.set_replied(ZERO, "tg", "p", reply[:1000]), True,
              'gateway.set_replied(ZERO, "tg", "p", reply[:1000])')


@pytest.mark.clause("GW-ACC-7", "GW-Q-1", "GW-Q-2")
def test_snapshot_is_kept_whatever_the_selection_does(gateway):
    """The upstream TestInboxSnapshotsAgentAndProject, extended: the agent and
    project stored at accept stay, through both queues and into done, while the
    conversation's selection is changed and cleared."""
    msg = make_message("tg", "m1", conversation="c", agent="persona-a", project="proj-a")
    gateway.set_conversation_agent(ZERO, "tg", "c", "persona-a")
    expect_true("GW-ACC-7", gateway.accept(ZERO, msg, T0), "gateway.accept(ZERO, msg, T0)")
    gateway.set_conversation_agent(ZERO, "tg", "c", "persona-b")
    gateway.set_conversation_project(ZERO, "tg", "c", "proj-b")
    expect("GW-Q-1", [(i.agent, i.project) for i in gateway.pending(ZERO)], [("persona-a", "proj-a")],
           "the pending row's agent and project after the selection changed")
    expect_true("GW-ACC-7", gateway.set_replied(ZERO, "tg", "m1", "r"), 'gateway.set_replied(ZERO, "tg", "m1", "r")')
    gateway.set_conversation_agent(ZERO, "tg", "c", "")
    expect("GW-Q-2", [(i.agent, i.project) for i in gateway.pending_replies(ZERO)], [("persona-a", "proj-a")],
           "the replied row's agent and project in pending_replies after the selection was cleared")
    expect_true("GW-ACC-7", gateway.mark_done(ZERO, "tg", "m1"), 'gateway.mark_done(ZERO, "tg", "m1")')
    gateway.set_conversation_project(ZERO, "tg", "c", "proj-c")
    item = gateway.get_item(ZERO, "tg", "m1")
    expect("GW-ACC-7", (item.agent, item.project), ("persona-a", "proj-a"), "the done row's agent and project")
    expect("GW-ACC-7", gateway.conversation(ZERO, "tg", "c"), ("", "proj-c"), 'gateway.conversation(ZERO, "tg", "c")')


@pytest.mark.clause("GW-ACC-8")
def test_get_item_follows_the_row_and_writes_nothing(gateway):
    expect_is("GW-ACC-8", gateway.get_item(ZERO, "tg", "m1"), None, 'gateway.get_item(ZERO, "tg", "m1")')
    msg = make_message("tg", "m1")
    gateway.accept(ZERO, msg, T0)
    assert_item("GW-ACC-8", gateway.get_item(ZERO, "tg", "m1"), expected_item(msg, T0))
    gateway.set_replied(ZERO, "tg", "m1", "r")
    assert_item("GW-ACC-8", gateway.get_item(ZERO, "tg", "m1"), expected_item(msg, T0, ItemStatus.REPLIED, "r"))
    before = gateway_view(gateway, [("tg", "m1"), ("tg", "nope")])
    for _ in range(3):
        gateway.get_item(ZERO, "tg", "m1")
        expect_is("GW-ACC-8", gateway.get_item(ZERO, "tg", "nope"), None, 'gateway.get_item(ZERO, "tg", "nope")')
    expect("GW-ACC-8", gateway_view(gateway, [("tg", "m1"), ("tg", "nope")]), before,
           'gateway_view(gateway, [("tg", "m1"), ("tg", "nope")])')
    gateway.mark_done(ZERO, "tg", "m1")
    assert_item("GW-ACC-8", gateway.get_item(ZERO, "tg", "m1"), expected_item(msg, T0, ItemStatus.DONE, "r"))
    gateway.prune_done(ZERO, T0 + MS)
    expect_is("GW-ACC-8", gateway.get_item(ZERO, "tg", "m1"), None, 'gateway.get_item(ZERO, "tg", "m1")')


@pytest.mark.clause("GW-ACC-8")
def test_returned_items_are_detached(gateway):
    """Items are values: what one read returned does not change when the row
    changes later."""
    gateway.accept(ZERO, make_message("tg", "m1"), T0)
    first = gateway.get_item(ZERO, "tg", "m1")
    queued = gateway.pending(ZERO)
    gateway.set_replied(ZERO, "tg", "m1", "r")
    expect("GW-ACC-8", first.status, ItemStatus.PENDING, "first.status")
    expect("GW-ACC-8", first.reply, "", "first.reply")
    expect("GW-ACC-8", queued[0].status, ItemStatus.PENDING, "queued[0].status")


# ===========================================================================
# Status transitions (GW-ST)
# ===========================================================================


@pytest.mark.clause("GW-ST-2", "GW-ST-6", "GW-Q-1", "GW-Q-2", "GW-Q-3")
def test_reply_queue_lifecycle(gateway):
    """The upstream TestReplyQueueDurability: pending → replied → done moves
    the row from one queue to the other and then out of both."""
    msg = make_message("tg", "m1")
    gateway.accept(ZERO, msg, T0)
    expect("GW-Q-1", keys_of(gateway.pending(ZERO)), [("tg", "m1")], "keys_of(gateway.pending(ZERO))")
    expect("GW-Q-3", gateway.pending_replies(ZERO), [], "gateway.pending_replies(ZERO)")
    expect_is("GW-ST-2", gateway.set_replied(ZERO, "tg", "m1", "the answer"), True,
              'gateway.set_replied(ZERO, "tg", "m1", "the answer")')
    expect("GW-Q-3", gateway.pending(ZERO), [], "gateway.pending(ZERO)")
    [item] = gateway.pending_replies(ZERO)
    assert_item("GW-Q-2", item, expected_item(msg, T0, ItemStatus.REPLIED, "the answer"))
    expect_is("GW-ST-6", gateway.mark_done(ZERO, "tg", "m1"), True, 'gateway.mark_done(ZERO, "tg", "m1")')
    expect("GW-Q-3", gateway.pending(ZERO), [], "gateway.pending(ZERO)")
    expect("GW-Q-3", gateway.pending_replies(ZERO), [], "gateway.pending_replies(ZERO)")
    assert_item("GW-ST-6", gateway.get_item(ZERO, "tg", "m1"), expected_item(msg, T0, ItemStatus.DONE, "the answer"))


@pytest.mark.clause("GW-ST-6", "GW-Q-1", "GW-ORD-1")
def test_pending_and_done(gateway):
    """The upstream TestPendingAndDone: oldest first; marking a pending row
    done takes it out of the queue."""
    gateway.accept(ZERO, make_message("tg", "b"), T0 + timedelta(seconds=5))
    gateway.accept(ZERO, make_message("tg", "a"), T0)
    expect("GW-ST-6", keys_of(gateway.pending(ZERO)), [("tg", "a"), ("tg", "b")], "keys_of(gateway.pending(ZERO))")
    expect_is("GW-ST-6", gateway.mark_done(ZERO, "tg", "a"), True, 'gateway.mark_done(ZERO, "tg", "a")')
    expect("GW-ST-6", keys_of(gateway.pending(ZERO)), [("tg", "b")], "keys_of(gateway.pending(ZERO))")
    item = gateway.get_item(ZERO, "tg", "a")
    expect("GW-ST-6", item.status, ItemStatus.DONE, "item.status")
    expect("GW-ST-6", item.reply, "", "item.reply")


@pytest.mark.clause("GW-ST-3")
def test_second_set_replied_keeps_the_first_reply(gateway):
    gateway.accept(ZERO, make_message("tg", "m1"), T0)
    expect_is("GW-ST-3", gateway.set_replied(ZERO, "tg", "m1", "first"), True,
              'gateway.set_replied(ZERO, "tg", "m1", "first")')
    before = gateway_view(gateway, [("tg", "m1")])
    for other in ("second", "", "first"):
        expect_is("GW-ST-3", gateway.set_replied(ZERO, "tg", "m1", other), False,
                  'gateway.set_replied(ZERO, "tg", "m1", other)')
    expect("GW-ST-3", gateway_view(gateway, [("tg", "m1")]), before, 'gateway_view(gateway, [("tg", "m1")])')
    expect("GW-ST-3", gateway.pending_replies(ZERO)[0].reply, "first", "gateway.pending_replies(ZERO)[0].reply")


@pytest.mark.clause("GW-ST-4", "GW-ST-1")
def test_done_is_terminal(gateway):
    """Upstream moved a done row back to replied; here `set_replied` on a done
    row returns False and the row is untouched, with or without an earlier
    reply, and it never reappears in a queue."""
    gateway.accept(ZERO, make_message("tg", "plain"), T0)
    gateway.accept(ZERO, make_message("tg", "answered"), T0 + MS)
    gateway.set_replied(ZERO, "tg", "answered", "sent once")
    for mid in ("plain", "answered"):
        expect_is("GW-ST-4", gateway.mark_done(ZERO, "tg", mid), True, 'gateway.mark_done(ZERO, "tg", mid)')
    keys = [("tg", "plain"), ("tg", "answered")]
    before = gateway_view(gateway, keys)
    for mid in ("plain", "answered"):
        expect_is("GW-ST-4", gateway.set_replied(ZERO, "tg", mid, "resurrected"), False,
                  'gateway.set_replied(ZERO, "tg", mid, "resurrected")')
        expect_is("GW-ST-1", gateway.mark_done(ZERO, "tg", mid), False, 'gateway.mark_done(ZERO, "tg", mid)')
        expect_is("GW-ST-1", gateway.accept(ZERO, make_message("tg", mid), T0), False,
                  'gateway.accept(ZERO, make_message("tg", mid), T0)')
    expect("GW-ST-1", gateway_view(gateway, keys), before, "gateway_view(gateway, keys)")
    expect("GW-ST-1", gateway.pending(ZERO), [], "gateway.pending(ZERO)")
    expect("GW-ST-1", gateway.pending_replies(ZERO), [], "gateway.pending_replies(ZERO)")
    expect("GW-ST-4", gateway.get_item(ZERO, "tg", "answered").reply, "sent once",
           'gateway.get_item(ZERO, "tg", "answered").reply')


@pytest.mark.clause("GW-ST-5")
def test_set_replied_on_unknown_key_creates_nothing(gateway):
    expect_is("GW-ST-5", gateway.set_replied(ZERO, "tg", "ghost", "r"), False,
              'gateway.set_replied(ZERO, "tg", "ghost", "r")')
    expect_is("GW-ST-5", gateway.get_item(ZERO, "tg", "ghost"), None, 'gateway.get_item(ZERO, "tg", "ghost")')
    expect("GW-ST-5", gateway.pending(ZERO), [], "gateway.pending(ZERO)")
    expect("GW-ST-5", gateway.pending_replies(ZERO), [], "gateway.pending_replies(ZERO)")
    # and the key is still fresh
    expect_is("GW-ST-5", gateway.accept(ZERO, make_message("tg", "ghost"), T0), True,
              'gateway.accept(ZERO, make_message("tg", "ghost"), T0)')
    expect("GW-ST-5", gateway.get_item(ZERO, "tg", "ghost").status, ItemStatus.PENDING,
           'gateway.get_item(ZERO, "tg", "ghost").status')


@pytest.mark.clause("GW-ST-6")
def test_mark_done_keeps_the_reply(gateway):
    gateway.accept(ZERO, make_message("tg", "m1"), T0)
    gateway.set_replied(ZERO, "tg", "m1", "keep me")
    expect_is("GW-ST-6", gateway.mark_done(ZERO, "tg", "m1"), True, 'gateway.mark_done(ZERO, "tg", "m1")')
    item = gateway.get_item(ZERO, "tg", "m1")
    expect("GW-ST-6", item.status, ItemStatus.DONE, "item.status")
    expect("GW-ST-6", item.reply, "keep me", "item.reply")


@pytest.mark.clause("GW-ST-7")
def test_mark_done_on_done_or_unknown_changes_nothing(gateway):
    expect_is("GW-ST-7", gateway.mark_done(ZERO, "tg", "ghost"), False, 'gateway.mark_done(ZERO, "tg", "ghost")')
    expect_is("GW-ST-7", gateway.get_item(ZERO, "tg", "ghost"), None, 'gateway.get_item(ZERO, "tg", "ghost")')
    gateway.accept(ZERO, make_message("tg", "m1"), T0)
    expect_is("GW-ST-7", gateway.mark_done(ZERO, "tg", "m1"), True, 'gateway.mark_done(ZERO, "tg", "m1")')
    before = gateway_view(gateway, [("tg", "m1"), ("tg", "ghost")])
    expect_is("GW-ST-7", gateway.mark_done(ZERO, "tg", "m1"), False, 'gateway.mark_done(ZERO, "tg", "m1")')
    expect("GW-ST-7", gateway_view(gateway, [("tg", "m1"), ("tg", "ghost")]), before,
           'gateway_view(gateway, [("tg", "m1"), ("tg", "ghost")])')


@pytest.mark.clause("GW-ST-1")
def test_nothing_moves_a_row_back_to_pending(gateway):
    """After a row left pending, no call of any method brings it back."""
    gateway.accept(ZERO, make_message("tg", "r"), T0)
    gateway.accept(ZERO, make_message("tg", "d"), T0)
    gateway.set_replied(ZERO, "tg", "r", "x")
    gateway.mark_done(ZERO, "tg", "d")
    for mid in ("r", "d"):
        gateway.accept(ZERO, make_message("tg", mid), T0 + MS)
        gateway.set_replied(ZERO, "tg", mid, "y")
        gateway.prune_done(ZERO, T0)
        gateway.set_offset(ZERO, "tg", 0)
        gateway.set_conversation_agent(ZERO, "tg", "chat-42", "a")
    expect("GW-ST-1", gateway.pending(ZERO), [], "gateway.pending(ZERO)")
    expect("GW-ST-1", gateway.get_item(ZERO, "tg", "r").status, ItemStatus.REPLIED,
           'gateway.get_item(ZERO, "tg", "r").status')
    expect("GW-ST-1", gateway.get_item(ZERO, "tg", "d").status, ItemStatus.DONE,
           'gateway.get_item(ZERO, "tg", "d").status')


@pytest.mark.clause("GW-ST-8", "GW-ST-3")
def test_concurrent_set_replied_has_one_winner(gateway, profile):
    n = profile.race_threads
    for round_ in range(profile.race_rounds):
        mid = f"m{round_}"
        gateway.accept(ZERO, make_message("tg", mid), T0)
        outcomes = race([lambda i=i: gateway.set_replied(ZERO, "tg", mid, f"reply {i}") for i in range(n)])
        expect_true("GW-ST-8", all(o.ok for o in outcomes), "all(o.ok for o in outcomes)")
        winners = [i for i, o in enumerate(outcomes) if o.value is True]
        expect("GW-ST-8", len(winners), 1, f"round {round_}: {len(winners)} set_replied returned True")
        expect("GW-ST-3", gateway.get_item(ZERO, "tg", mid).reply, f"reply {winners[0]}",
               'gateway.get_item(ZERO, "tg", mid).reply')


@pytest.mark.clause("GW-ST-8")
def test_set_replied_racing_mark_done_agrees_with_one_order(gateway, profile):
    """Half the racers record a reply, half mark the row done: at most one of
    each succeeds, the row ends done, and it holds a reply exactly when a
    set_replied won, which is only possible if it came first."""
    n = max(2, profile.race_threads)
    for round_ in range(profile.race_rounds):
        mid = f"m{round_}"
        gateway.accept(ZERO, make_message("tg", mid), T0)
        calls = []
        for i in range(n):
            if i % 2:
                calls.append(lambda i=i: ("done", gateway.mark_done(ZERO, "tg", mid)))
            else:
                calls.append(lambda i=i: (f"reply {i}", gateway.set_replied(ZERO, "tg", mid, f"reply {i}")))
        outcomes = race(calls)
        expect_true("GW-ST-8", all(o.ok for o in outcomes), "all(o.ok for o in outcomes)")
        replied = [o.value[0] for o in outcomes if o.value[0] != "done" and o.value[1]]
        done = [o for o in outcomes if o.value[0] == "done" and o.value[1]]
        expect_op("GW-ST-8", len(replied), "<=", 1, "len(replied)")
        expect("GW-ST-8", len(done), 1, "len(done)")
        item = gateway.get_item(ZERO, "tg", mid)
        expect("GW-ST-8", item.status, ItemStatus.DONE, "item.status")
        expect("GW-ST-8", item.reply, replied[0] if replied else "", "item.reply")


@pytest.mark.clause("GW-ST-8", "GW-ST-7")
def test_concurrent_mark_done_has_one_winner(gateway, profile):
    n = profile.race_threads
    for round_ in range(profile.race_rounds):
        mid = f"m{round_}"
        gateway.accept(ZERO, make_message("tg", mid), T0)
        if round_ % 2:
            gateway.set_replied(ZERO, "tg", mid, "r")
        outcomes = race([lambda: gateway.mark_done(ZERO, "tg", mid) for _ in range(n)])
        expect("GW-ST-8", sum(1 for o in outcomes if o.value is True), 1, "sum(1 for o in outcomes if o.value is True)")
        expect_true("GW-ST-8", all(o.ok and o.value in (True, False) for o in outcomes),
                    "all(o.ok and o.value in (True, False) for o in outcomes)")
        expect("GW-ST-8", gateway.get_item(ZERO, "tg", mid).reply, "r" if round_ % 2 else "",
               'gateway.get_item(ZERO, "tg", mid).reply')


# ===========================================================================
# Queues and order (GW-Q, GW-ORD)
# ===========================================================================


@pytest.mark.clause("GW-Q-1", "GW-Q-2", "GW-Q-3")
def test_each_row_is_in_the_queue_of_its_status(gateway):
    msgs = {mid: make_message("tg", mid, agent=f"a-{mid}", project=f"p-{mid}") for mid in "abcdef"}
    for i, (mid, msg) in enumerate(msgs.items()):
        gateway.accept(ZERO, msg, T0 + i * MS)
    for mid in "bd":
        gateway.set_replied(ZERO, "tg", mid, f"reply-{mid}")
    for mid in "de":
        gateway.mark_done(ZERO, "tg", mid)
    pending = gateway.pending(ZERO)
    replies = gateway.pending_replies(ZERO)
    expect("GW-Q-1", [i.message_id for i in pending], ["a", "c", "f"], "[i.message_id for i in pending]")
    expect("GW-Q-2", [i.message_id for i in replies], ["b"], "[i.message_id for i in replies]")
    for item in pending:
        assert_item("GW-Q-1", item, expected_item(msgs[item.message_id], T0 + "abcdef".index(item.message_id) * MS))
    assert_item("GW-Q-2", replies[0], expected_item(msgs["b"], T0 + MS, ItemStatus.REPLIED, "reply-b"))
    expect_false("GW-Q-3", set(keys_of(pending)) & set(keys_of(replies)),
                 "set(keys_of(pending)) & set(keys_of(replies))")


@pytest.mark.clause("GW-Q-4", "GW-Q-3")
def test_queues_page_after_ordering(gateway):
    """Each queue pages its own rows: the rows of the other status and done
    rows are received in between, on two channels that share message ids,
    and accepted out of time order; every page at offsets 0, 1, 3, n and
    beyond and limits 0, 1, 2, n - 1, n and beyond."""
    statuses = (ItemStatus.PENDING, ItemStatus.REPLIED, ItemStatus.DONE)
    want: dict[str, list[tuple[str, str]]] = {s: [] for s in statuses}
    order = [i for i in range(18) if i % 2] + [i for i in range(18) if not i % 2]  # accepts out of time order
    for i in order:
        key = (("tg", "sms")[i % 2], f"m{i // 2}")
        expect_true("GW-Q-4", gateway.accept(ZERO, make_message(*key), T0 + i * MS),
                    "gateway.accept(ZERO, make_message(*key), T0 + i * MS)")
    for i in range(18):
        key = (("tg", "sms")[i % 2], f"m{i // 2}")
        status = statuses[i % 3]  # the three statuses interleaved, each on both channels
        want[status].append(key)
        if status != ItemStatus.PENDING:
            gateway.set_replied(ZERO, *key, f"r{i}")
        if status == ItemStatus.DONE:
            gateway.mark_done(ZERO, *key)
    for method, status in ((gateway.pending, ItemStatus.PENDING), (gateway.pending_replies, ItemStatus.REPLIED)):
        everything = want[status]
        n = len(everything)
        expect("GW-Q-4", keys_of(method(ZERO)), everything, f"the whole {status} queue, in receipt order")
        for limit in (-1, 0, 1, 2, n - 1, n, n + 3):
            for offset in (-5, 0, 1, 3, n - 1, n, n + 2):
                page = everything[max(offset, 0):]
                page = page[:limit] if limit > 0 else page
                expect("GW-Q-4", keys_of(method(ZERO, limit, offset)), page,
                       f"the {status} queue with limit {limit} and offset {offset}")


@pytest.mark.clause("GW-Q-4", "RSC-GEN-9")
@pytest.mark.parametrize("limit, offset", [(True, 0), (0, False), (1.0, 0), ("1", 0), (None, 0), (0, None), (0, 2.5)])
def test_queue_page_arguments_must_be_ints(gateway, limit, offset):
    gateway.accept(ZERO, make_message("tg", "m1"), T0)
    for method in (gateway.pending, gateway.pending_replies):
        raises_nothing_written("GW-Q-4", gateway, lambda: method(ZERO, limit, offset), keys=[("tg", "m1")])


@pytest.mark.clause("GW-ORD-1")
def test_order_is_by_instant_within_one_second(gateway):
    """Go's RFC 3339 text trims trailing zeros, so `…:00Z` sorts after
    `…:00.5Z` and `.123` after `.1`; the queues order instants."""
    base = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    times = {
        "whole": base,
        "tenth": base + timedelta(milliseconds=100),
        "123": base + timedelta(milliseconds=123),
        "half": base + timedelta(milliseconds=500),
        "next": base + timedelta(seconds=1),
    }
    texts = sorted(times, key=lambda k: rfc3339_nano(times[k]))
    expect_op("GW-ORD-1", texts, "!=", sorted(times, key=lambda k: times[k]), "texts")  # the trap is real
    for mid in ("half", "next", "whole", "123", "tenth"):
        gateway.accept(ZERO, make_message("tg", mid), times[mid])
    want = ["whole", "tenth", "123", "half", "next"]
    expect("GW-ORD-1", [i.message_id for i in gateway.pending(ZERO)], want,
           "[i.message_id for i in gateway.pending(ZERO)]")
    for mid in want:
        gateway.set_replied(ZERO, "tg", mid, "r")
    expect("GW-ORD-1", [i.message_id for i in gateway.pending_replies(ZERO)], want,
           "[i.message_id for i in gateway.pending_replies(ZERO)]")


@pytest.mark.clause("GW-ORD-1", "GW-SCOPE-5")
def test_order_is_by_instant_across_offsets(gateway):
    """`now` given with different UTC offsets: 10:00+02:00 is 08:00Z, before
    09:00Z, though its text sorts after."""
    plus2 = timezone(timedelta(hours=2))
    minus5 = timezone(timedelta(hours=-5))
    given = {
        "a": datetime(2026, 3, 1, 10, 0, tzinfo=plus2),   # 08:00Z
        "b": datetime(2026, 3, 1, 9, 0, tzinfo=UTC),      # 09:00Z
        "c": datetime(2026, 3, 1, 5, 30, tzinfo=minus5),  # 10:30Z
    }
    for mid in ("c", "b", "a"):
        gateway.accept(ZERO, make_message("tg", mid), given[mid])
    expect("GW-ORD-1", [i.message_id for i in gateway.pending(ZERO)], ["a", "b", "c"],
           "[i.message_id for i in gateway.pending(ZERO)]")
    for mid in "abc":
        expect("GW-SCOPE-5", gateway.get_item(ZERO, "tg", mid).received_at.utcoffset(), timedelta(0),
               'gateway.get_item(ZERO, "tg", mid).received_at.utcoffset()')


@pytest.mark.clause("GW-ORD-2")
def test_equal_receipt_times_keep_insertion_order(gateway):
    """Rows with one `received_at` come in the order their accepts succeeded,
    not by key; a refused duplicate does not take a place."""
    order = ["zeta", "alpha", "Mid", "beta", "10", "9"]
    channels = ["tg", "sms", "tg", "a-channel", "tg", "tg"]
    for mid, channel in zip(order, channels):
        expect_true("GW-ORD-2", gateway.accept(ZERO, make_message(channel, mid), T0),
                    "gateway.accept(ZERO, make_message(channel, mid), T0)")
        expect_is("GW-ORD-2", gateway.accept(ZERO, make_message("tg", "zeta"), T0), False,
                  'gateway.accept(ZERO, make_message("tg", "zeta"), T0)')
    expect("GW-ORD-2", [i.message_id for i in gateway.pending(ZERO)], order,
           "[i.message_id for i in gateway.pending(ZERO)]")
    for mid, channel in zip(order, channels):
        gateway.set_replied(ZERO, channel, mid, "r")
    expect("GW-ORD-2", [i.message_id for i in gateway.pending_replies(ZERO)], order,
           "[i.message_id for i in gateway.pending_replies(ZERO)]")
    # sub-millisecond differences truncate to a tie: insertion order decides
    gateway.accept(ZERO, make_message("x", "later-in-time"), T0 + timedelta(microseconds=900))
    gateway.accept(ZERO, make_message("x", "earlier-in-time"), T0 + timedelta(microseconds=100))
    expect("GW-ORD-2", [i.message_id for i in gateway.pending(ZERO)], ["later-in-time", "earlier-in-time"],
           "[i.message_id for i in gateway.pending(ZERO)]")


@pytest.mark.clause("GW-ORD-3", "GW-ACC-4")
def test_reaccepted_key_gets_a_new_place(gateway):
    """A pruned key accepted again at the same instant sorts after the rows
    already there (a new sequence number), and by its new time otherwise."""
    for mid in ("a", "b", "c"):
        gateway.accept(ZERO, make_message("tg", mid), T0)
    gateway.mark_done(ZERO, "tg", "a")
    expect("GW-ACC-4", gateway.prune_done(ZERO, T0 + MS), 1, "gateway.prune_done(ZERO, T0 + MS)")
    expect_is("GW-ORD-3", gateway.accept(ZERO, make_message("tg", "a"), T0), True,
              'gateway.accept(ZERO, make_message("tg", "a"), T0)')
    expect("GW-ORD-3", [i.message_id for i in gateway.pending(ZERO)], ["b", "c", "a"],
           "[i.message_id for i in gateway.pending(ZERO)]")
    gateway.mark_done(ZERO, "tg", "c")
    expect("GW-ACC-4", gateway.prune_done(ZERO, T0 + MS), 1, "gateway.prune_done(ZERO, T0 + MS)")
    expect_is("GW-ORD-3", gateway.accept(ZERO, make_message("tg", "c"), T0 - timedelta(seconds=1)), True,
              'gateway.accept(ZERO, make_message("tg", "c"), T0 - timedelta(seconds=1))')
    expect("GW-ORD-3", [i.message_id for i in gateway.pending(ZERO)], ["c", "b", "a"],
           "[i.message_id for i in gateway.pending(ZERO)]")


# ===========================================================================
# Pruning (GW-PRUNE)
# ===========================================================================


@pytest.mark.clause("GW-PRUNE-1")
def test_prune_boundary_is_strict_and_count_is_returned(gateway):
    cutoff = T0 + timedelta(seconds=10)
    rows = {"before-2ms": cutoff - 2 * MS, "before-1ms": cutoff - MS, "at": cutoff,
            "after": cutoff + MS, "long-ago": T0 - timedelta(days=30)}
    for mid, when in rows.items():
        gateway.accept(ZERO, make_message("tg", mid), when)
        gateway.mark_done(ZERO, "tg", mid)
    expect("GW-PRUNE-1", gateway.prune_done(ZERO, cutoff), 3, "gateway.prune_done(ZERO, cutoff)")
    survivors = {mid for mid in rows if gateway.get_item(ZERO, "tg", mid) is not None}
    expect("GW-PRUNE-1", survivors, {"at", "after"}, "survivors")
    expect("GW-PRUNE-1", gateway.prune_done(ZERO, cutoff), 0, "gateway.prune_done(ZERO, cutoff)")
    expect("GW-PRUNE-1", gateway.prune_done(ZERO, datetime(2999, 1, 1, tzinfo=UTC)), 2,
           "gateway.prune_done(ZERO, datetime(2999, 1, 1, tzinfo=UTC))")


@pytest.mark.clause("GW-PRUNE-2")
def test_prune_never_deletes_pending_or_replied_rows(gateway):
    ancient = datetime(1990, 1, 1, tzinfo=UTC)
    gateway.accept(ZERO, make_message("tg", "pending"), ancient)
    gateway.accept(ZERO, make_message("tg", "replied"), ancient)
    gateway.set_replied(ZERO, "tg", "replied", "r")
    gateway.accept(ZERO, make_message("tg", "done"), ancient)
    gateway.mark_done(ZERO, "tg", "done")
    expect("GW-PRUNE-2", gateway.prune_done(ZERO, datetime(2999, 1, 1, tzinfo=UTC)), 1,
           "gateway.prune_done(ZERO, datetime(2999, 1, 1, tzinfo=UTC))")
    expect("GW-PRUNE-2", keys_of(gateway.pending(ZERO)), [("tg", "pending")], "keys_of(gateway.pending(ZERO))")
    expect("GW-PRUNE-2", keys_of(gateway.pending_replies(ZERO)), [("tg", "replied")],
           "keys_of(gateway.pending_replies(ZERO))")
    expect_is("GW-PRUNE-2", gateway.get_item(ZERO, "tg", "done"), None, 'gateway.get_item(ZERO, "tg", "done")')


@pytest.mark.clause("GW-PRUNE-3")
def test_prune_compares_with_receipt_time_not_done_time(gateway, clock):
    """A message received long ago but finished just now is pruned by a
    cutoff after its receipt; one received after the cutoff is kept, however
    long ago it was finished."""
    old = T0 - timedelta(days=7)
    gateway.accept(ZERO, make_message("tg", "received-old"), old)
    gateway.accept(ZERO, make_message("tg", "received-new"), T0)
    gateway.mark_done(ZERO, "tg", "received-new")
    clock.advance(timedelta(days=30))
    gateway.mark_done(ZERO, "tg", "received-old")
    expect("GW-PRUNE-3", gateway.prune_done(ZERO, old + MS), 1, "gateway.prune_done(ZERO, old + MS)")
    expect_is("GW-PRUNE-3", gateway.get_item(ZERO, "tg", "received-old"), None,
              'gateway.get_item(ZERO, "tg", "received-old")')
    expect_op("GW-PRUNE-3", gateway.get_item(ZERO, "tg", "received-new"), "is not", None,
              'gateway.get_item(ZERO, "tg", "received-new")')


@pytest.mark.clause("GW-PRUNE-4")
def test_prune_leaves_survivors_and_order_alone(gateway):
    for i in range(8):
        gateway.accept(ZERO, make_message("tg", f"m{i}", text=f"t{i}"), T0 + (i % 3) * MS)
    for i in (1, 4, 6):
        gateway.set_replied(ZERO, "tg", f"m{i}", f"r{i}")
    for i in (2, 5, 7):
        gateway.mark_done(ZERO, "tg", f"m{i}")
    keys = [("tg", f"m{i}") for i in range(8) if i not in (2, 5, 7)]
    before = gateway_view(gateway, keys, ["tg"])
    expect("GW-PRUNE-4", gateway.prune_done(ZERO, T0 + timedelta(seconds=1)), 3,
           "gateway.prune_done(ZERO, T0 + timedelta(seconds=1))")
    expect("GW-PRUNE-4", gateway_view(gateway, keys, ["tg"]), before, 'gateway_view(gateway, keys, ["tg"])')


# ===========================================================================
# Poll offsets (GW-OFF)
# ===========================================================================


@pytest.mark.clause("GW-OFF-1", "GW-OFF-2", "GW-OFF-3")
def test_offset_round_trip(gateway):
    """The upstream TestOffsetRoundTrip: unset 0; set; overwrite."""
    expect("GW-OFF-1", gateway.offset(ZERO, "telegram"), 0, 'gateway.offset(ZERO, "telegram")')
    gateway.set_offset(ZERO, "telegram", 100)
    expect("GW-OFF-2", gateway.offset(ZERO, "telegram"), 100, 'gateway.offset(ZERO, "telegram")')
    gateway.set_offset(ZERO, "telegram", 250)
    expect("GW-OFF-2", gateway.offset(ZERO, "telegram"), 250, 'gateway.offset(ZERO, "telegram")')


@pytest.mark.clause("GW-OFF-2", "GW-OFF-4")
def test_offset_may_go_anywhere_in_64_bits(gateway):
    for value in (10, 3, 0, -1, 2**63 - 1, -(2**63), 0):
        gateway.set_offset(ZERO, "tg", value)
        got = gateway.offset(ZERO, "tg")
        expect("GW-OFF-2", got, value, "got")
        expect_is("GW-OFF-2", type(got), int, "type(got)")


@pytest.mark.clause("GW-OFF-3")
def test_offsets_are_per_exact_channel_and_untouched_by_the_inbox(gateway):
    channels = {"tg": 1, "TG": 2, "tg ": 3, "": 4, "slack": 5}
    for channel, value in channels.items():
        gateway.set_offset(ZERO, channel, value)
    gateway.accept(ZERO, make_message("tg", "m1"), T0)
    gateway.set_replied(ZERO, "tg", "m1", "r")
    gateway.mark_done(ZERO, "tg", "m1")
    gateway.prune_done(ZERO, T0 + MS)
    gateway.set_conversation_agent(ZERO, "tg", "c", "a")
    for channel, value in channels.items():
        expect("GW-OFF-3", gateway.offset(ZERO, channel), value, "gateway.offset(ZERO, channel)")
    expect("GW-OFF-3", gateway.offset(ZERO, "t"), 0, 'gateway.offset(ZERO, "t")')


@pytest.mark.clause("GW-OFF-4")
@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, True, False, 1.0, "5", None],
                         ids=["too-big", "too-small", "true", "false", "float", "str", "none"])
def test_offset_value_out_of_range_or_type_is_refused(gateway, value):
    gateway.set_offset(ZERO, "tg", 7)
    raises_nothing_written("GW-OFF-4", gateway, lambda: gateway.set_offset(ZERO, "tg", value), channels=["tg"])


@pytest.mark.clause("GW-OFF-3", "GW-ACC-6")
@pytest.mark.parametrize("channel", [None, 5, "c" * 256, "a\x00", "\ud800"])
def test_offset_channel_must_be_a_short_string(gateway, channel):
    raises_nothing_written("GW-ACC-6", gateway, lambda: gateway.offset(ZERO, channel), channels=["tg"])
    raises_nothing_written("GW-ACC-6", gateway, lambda: gateway.set_offset(ZERO, channel, 1), channels=["tg"])


# ===========================================================================
# Conversation selection (GW-SEL)
# ===========================================================================


@pytest.mark.clause("GW-SEL-1", "GW-SEL-2", "GW-SEL-3")
def test_conversation_selection(gateway):
    """The upstream TestConversationSelection: unset → empty; agent then
    project, both kept; and the other order."""
    expect("GW-SEL-1", gateway.conversation(ZERO, "tg", "c1"), ("", ""), 'gateway.conversation(ZERO, "tg", "c1")')
    gateway.set_conversation_agent(ZERO, "tg", "c1", "researcher")
    expect("GW-SEL-2", gateway.conversation(ZERO, "tg", "c1"), ("researcher", ""),
           'gateway.conversation(ZERO, "tg", "c1")')
    gateway.set_conversation_project(ZERO, "tg", "c1", "proj-1")
    expect("GW-SEL-3", gateway.conversation(ZERO, "tg", "c1"), ("researcher", "proj-1"),
           'gateway.conversation(ZERO, "tg", "c1")')
    gateway.set_conversation_agent(ZERO, "tg", "c1", "writer")
    expect("GW-SEL-2", gateway.conversation(ZERO, "tg", "c1"), ("writer", "proj-1"),
           'gateway.conversation(ZERO, "tg", "c1")')
    gateway.set_conversation_project(ZERO, "tg", "c2", "proj-2")
    expect("GW-SEL-3", gateway.conversation(ZERO, "tg", "c2"), ("", "proj-2"), 'gateway.conversation(ZERO, "tg", "c2")')
    gateway.set_conversation_agent(ZERO, "tg", "c2", "coder")
    expect("GW-SEL-2", gateway.conversation(ZERO, "tg", "c2"), ("coder", "proj-2"),
           'gateway.conversation(ZERO, "tg", "c2")')


@pytest.mark.clause("GW-SEL-4")
def test_empty_clears_a_field(gateway):
    gateway.set_conversation_agent(ZERO, "tg", "c", "a")
    gateway.set_conversation_project(ZERO, "tg", "c", "p")
    gateway.set_conversation_agent(ZERO, "tg", "c", "")
    expect("GW-SEL-4", gateway.conversation(ZERO, "tg", "c"), ("", "p"), 'gateway.conversation(ZERO, "tg", "c")')
    gateway.set_conversation_project(ZERO, "tg", "c", "")
    expect("GW-SEL-4", gateway.conversation(ZERO, "tg", "c"), ("", ""), 'gateway.conversation(ZERO, "tg", "c")')
    expect("GW-SEL-4", gateway.conversation(ZERO, "tg", "c"), gateway.conversation(ZERO, "tg", "never"),
           'gateway.conversation(ZERO, "tg", "c")')
    gateway.set_conversation_project(ZERO, "tg", "c", "p2")
    expect("GW-SEL-4", gateway.conversation(ZERO, "tg", "c"), ("", "p2"), 'gateway.conversation(ZERO, "tg", "c")')
    gateway.set_conversation_agent(ZERO, "tg", "fresh", "")
    expect("GW-SEL-4", gateway.conversation(ZERO, "tg", "fresh"), ("", ""), 'gateway.conversation(ZERO, "tg", "fresh")')


@pytest.mark.clause("GW-SEL-5")
def test_selection_key_is_channel_and_conversation_exactly(gateway):
    keys = [("tg", "c"), ("TG", "c"), ("tg", "C"), ("tg", "c "), ("", "c"), ("tg", ""), ("slack", "c")]
    for i, key in enumerate(keys):
        gateway.set_conversation_agent(ZERO, *key, f"a{i}")
    for i, key in enumerate(keys):
        expect("GW-SEL-5", gateway.conversation(ZERO, *key), (f"a{i}", ""), "gateway.conversation(ZERO, *key)")
    expect("GW-SEL-5", gateway.conversation(ZERO, "tgc", ""), ("", ""), 'gateway.conversation(ZERO, "tgc", "")')


@pytest.mark.clause("GW-SEL-5", "GW-ACC-6")
@pytest.mark.parametrize("channel, conversation, value", [
    (None, "c", "a"), ("tg", 3, "a"), ("tg", "c", None), ("tg", "c", "a" * 256),
    ("c" * 256, "c", "a"), ("tg", "c\x00", "a"), ("tg", "c", "\ud800"),
])
def test_selection_refuses_bad_arguments(gateway, channel, conversation, value):
    gateway.set_conversation_agent(ZERO, "tg", "c", "kept")
    convs = [("tg", "c")]
    raises_nothing_written("GW-ACC-6", gateway, lambda: gateway.set_conversation_agent(ZERO, channel, conversation, value),
                           conversations=convs)
    raises_nothing_written("GW-ACC-6", gateway, lambda: gateway.set_conversation_project(ZERO, channel, conversation, value),
                           conversations=convs)
    if value == "a":
        raises_nothing_written("GW-ACC-6", gateway, lambda: gateway.conversation(ZERO, channel, conversation),
                               conversations=convs)


@pytest.mark.clause("GW-SEL-6")
def test_concurrent_agent_and_project_setters_both_survive(gateway, profile):
    for round_ in range(profile.race_rounds):
        conv = f"c{round_}"
        half = max(1, profile.race_threads // 2)
        calls = [lambda: gateway.set_conversation_agent(ZERO, "tg", conv, "agent-x") for _ in range(half)]
        calls += [lambda: gateway.set_conversation_project(ZERO, "tg", conv, "proj-y") for _ in range(half)]
        expect_true("GW-SEL-6", all(o.ok for o in race(calls)), "all(o.ok for o in race(calls))")
        expect("GW-SEL-6", gateway.conversation(ZERO, "tg", conv), ("agent-x", "proj-y"),
               'gateway.conversation(ZERO, "tg", conv)')


# ===========================================================================
# Crash safety through the harness's crash hook (GW-CRASH); the crash
# machine drives the same properties with a model gateway
# ===========================================================================


def _crash_and_reopen(harness, store, location, gw):
    harness.crash_gateway(gw)
    try:
        return store.open_gateway(location)
    except StoreLocked:
        if harness.gateway_lease is None:
            raise
        harness.expire_gateway_lease(location)
        return store.open_gateway(location)


@pytest.mark.clause("GW-CRASH-1", "GW-CRASH-2", "GW-CRASH-3", "GW-CRASH-4", "GW-CRASH-8")
@pytest.mark.cortex_requires("gateway-crash")
def test_acknowledged_state_survives_repeated_crashes(store, gateway_location, cortex_harness):
    """Crash after crash: accepted rows with every field, the replied row with
    its reply (never pending again), dedup, offsets and selections are all
    there after each reopen."""
    gw = store.open_gateway(gateway_location)
    written = _populate(gw)
    for _ in range(3):
        gw = _crash_and_reopen(cortex_harness, store, gateway_location, gw)
        _assert_populated("GW-CRASH-1", gw, written)
        for key in written["items"]:
            expect_is("GW-CRASH-2", gw.accept(ZERO, make_message(*key), T0), False,
                      "gw.accept(ZERO, make_message(*key), T0)")
        expect_op("GW-CRASH-3", ("tg", "r1"), "not in", keys_of(gw.pending(ZERO)), '("tg", "r1")')
    gw.close()


@pytest.mark.clause("GW-CRASH-7")
@pytest.mark.cortex_requires("gateway-crash")
def test_crash_between_calls_leaves_whole_rows(store, gateway_location, cortex_harness, profile):
    """While threads accept, reply and set selections, the holder crashes:
    afterwards every row is whole (a replied row has its reply, a pending row
    every field), and every selection holds both values or neither."""
    gw = store.open_gateway(gateway_location)
    msgs = {f"m{i}": make_message("tg", f"m{i}", text=f"text {i}") for i in range(profile.race_threads * 4)}
    stop = threading.Event()

    def worker(k: int) -> None:
        for i, (mid, msg) in enumerate(msgs.items()):
            if i % profile.race_threads != k or stop.is_set():
                continue
            try:
                gw.accept(ZERO, msg, T0)
                gw.set_replied(ZERO, "tg", mid, f"reply {mid}")
                gw.set_conversation_agent(ZERO, "tg", mid, "a")
                gw.set_conversation_project(ZERO, "tg", mid, "p")
            except StoreClosed:
                return

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(profile.race_threads)]
    for t in threads:
        t.start()
    cortex_harness.crash_gateway(gw)
    stop.set()
    for t in threads:
        t.join(30)
    try:
        again = store.open_gateway(gateway_location)
    except StoreLocked:
        cortex_harness.expire_gateway_lease(gateway_location)
        again = store.open_gateway(gateway_location)
    try:
        for mid, msg in msgs.items():
            item = again.get_item(ZERO, "tg", mid)
            if item is None:
                continue
            if item.status == ItemStatus.REPLIED:
                assert_item("GW-CRASH-7", item, expected_item(msg, T0, ItemStatus.REPLIED, f"reply {mid}"))
            else:
                assert_item("GW-CRASH-7", item, expected_item(msg, T0))
            sel = again.conversation(ZERO, "tg", mid)
            expect_op("GW-CRASH-7", sel, "in", (("", ""), ("a", ""), ("a", "p")), "sel" + ": " + shorten(sel))
    finally:
        again.close()


# ===========================================================================
# What this class gives the scope and common suites (conformance/examples.py)
# ===========================================================================


def _examples_seed(store: Any, fixture: Any) -> SimpleNamespace:
    """A gateway store opened on a fresh location (the class's methods live
    on it), with one row of each status, an offset and a selection; the
    rows carry no scope (GW-SCOPE-1)."""
    c = ctx(HOME)
    w = SimpleNamespace(gateway=fixture("cortex_open_gateway")())
    gw = w.gateway
    for mid in ("p", "r", "d"):
        gw.accept(c, make_message("tg", mid), EPOCH)
    gw.set_replied(c, "tg", "r", "reply")
    gw.mark_done(c, "tg", "d")
    gw.set_offset(c, "tg", 3)
    gw.set_conversation_agent(c, "tg", "chat", "a")
    return w


def _examples_view(store: Any, w: SimpleNamespace, scopes: Any) -> dict:
    """Everything observable through the gateway the world opened (with the
    item a size site writes, ``w.size_key``)."""
    keys = [*"prdx", *([w.size_key] if hasattr(w, "size_key") else [])]
    return {"gateway": gateway_view(w.gateway, [("tg", m) for m in keys], ["tg"], [("tg", "chat")])}


def _size_key(s: Any, c: Context, w: SimpleNamespace) -> None:
    w.size_key = ids.new_id(ids.MESSAGE)


def _size_accepted(s: Any, c: Context, w: SimpleNamespace) -> None:
    _size_key(s, c, w)
    w.gateway.accept(c, make_message("tg", w.size_key), EPOCH)


def _size_item(s: Any, c: Context, w: SimpleNamespace, r: Any) -> Any:
    return w.gateway.get_item(c, "tg", w.size_key)


#: RSC-GEN-8/13 (test_sizes.py): the item row a write stores, as stored.
_SIZE_SITES = (
    Site("accept.text", "gateway",
         lambda s, c, w, t: w.gateway.accept(c, make_message("tg", w.size_key, text=t), EPOCH),
         read=_size_item, prepare=_size_key),
    Site("set_replied.reply", "gateway", lambda s, c, w, t: w.gateway.set_replied(c, "tg", w.size_key, t),
         read=_size_item, prepare=_size_accepted),
)


#: A call of each method with valid arguments addressing the seeded rows.
_GOOD_CALLS: dict[str, Any] = {
    "accept": lambda s, c, w: w.gateway.accept(c, make_message("tg", "x"), EPOCH),
    "get_item": lambda s, c, w: w.gateway.get_item(c, "tg", "p"),
    "pending": lambda s, c, w: w.gateway.pending(c),
    "set_replied": lambda s, c, w: w.gateway.set_replied(c, "tg", "p", "reply"),
    "pending_replies": lambda s, c, w: w.gateway.pending_replies(c),
    "mark_done": lambda s, c, w: w.gateway.mark_done(c, "tg", "r"),
    "prune_done": lambda s, c, w: w.gateway.prune_done(c, FAR_FUTURE),
    "offset": lambda s, c, w: w.gateway.offset(c, "tg"),
    "set_offset": lambda s, c, w: w.gateway.set_offset(c, "tg", 4),
    "conversation": lambda s, c, w: w.gateway.conversation(c, "tg", "chat"),
    "set_conversation_agent": lambda s, c, w: w.gateway.set_conversation_agent(c, "tg", "chat", "b"),
    "set_conversation_project": lambda s, c, w: w.gateway.set_conversation_project(c, "tg", "chat", "p"),
}

#: A call of each method whose other arguments are garbage (InvalidArgument
#: under a valid context).
_BAD_CALLS: dict[str, Any] = {
    "accept": lambda s, c, w: w.gateway.accept(c, make_message("", "x"), EPOCH),
    "get_item": lambda s, c, w: w.gateway.get_item(c, "tg", ""),
    "pending": lambda s, c, w: w.gateway.pending(c, limit="all"),
    "set_replied": lambda s, c, w: w.gateway.set_replied(c, "tg", "p", None),
    "pending_replies": lambda s, c, w: w.gateway.pending_replies(c, offset=1.5),
    "mark_done": lambda s, c, w: w.gateway.mark_done(c, None, "r"),
    "prune_done": lambda s, c, w: w.gateway.prune_done(c, datetime(2026, 1, 1)),
    "offset": lambda s, c, w: w.gateway.offset(c, 7),
    "set_offset": lambda s, c, w: w.gateway.set_offset(c, "tg", 2**63),
    "conversation": lambda s, c, w: w.gateway.conversation(c, "tg", "c\x00"),
    "set_conversation_agent": lambda s, c, w: w.gateway.set_conversation_agent(c, "tg", "chat", "a" * 256),
    "set_conversation_project": lambda s, c, w: w.gateway.set_conversation_project(c, "tg", "chat", True),
}

EXAMPLES = Examples("gateway", seed=_examples_seed, good=_GOOD_CALLS, bad=_BAD_CALLS, view=_examples_view,
                    sites={"size": _SIZE_SITES}, size_methods=frozenset({"accept", "set_replied"}))
