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
from cortex_spec.testing import FAR_FUTURE, ZERO, assert_strict_equal, clause, ctx, expect, race
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


def assert_item(actual: Any, expected: InboxItem, what: str = "item") -> None:
    """Field by field, with exact types (a bool stays a bool, a str a str)."""
    assert isinstance(actual, InboxItem), f"{what} is a {type(actual).__name__}"
    for f in attrs.fields(InboxItem):
        got, want = getattr(actual, f.name), getattr(expected, f.name)
        if f.name == "status":
            assert got == want and isinstance(got, str), f"{what}.status: {got!r} != {want!r}"
        elif f.name == "received_at":
            assert got == want and got.utcoffset() == timedelta(0), f"{what}.received_at: {got!r} != {want!r}"
        else:
            assert_strict_equal(got, want, f"{what}.{f.name}")


def keys_of(items: list[InboxItem]) -> list[tuple[str, str]]:
    return [(i.channel, i.message_id) for i in items]


def raises_nothing_written(gateway, call, exc=InvalidArgument, keys=(), channels=(), conversations=()):
    before = gateway_view(gateway, keys, channels, conversations)
    with pytest.raises(exc):
        call()
    assert gateway_view(gateway, keys, channels, conversations) == before


def _populate(gw) -> dict[str, Any]:
    """One row of each status, an offset and a selection; returns what was written."""
    p = make_message("tg", "p1", text="pending one")
    r = make_message("tg", "r1", text="replied one", agent="", project="")
    d = make_message("sms", "d1", text="done one", trusted=False)
    assert gw.accept(ZERO, p, T0) and gw.accept(ZERO, r, T0 + MS) and gw.accept(ZERO, d, T0 + 2 * MS)
    assert gw.set_replied(ZERO, "tg", "r1", "the reply")
    assert gw.mark_done(ZERO, "sms", "d1")
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


def _assert_populated(gw, written: dict[str, Any]) -> None:
    for key, item in written["items"].items():
        assert_item(gw.get_item(ZERO, *key), item, f"row {key}")
    assert keys_of(gw.pending(ZERO)) == [("tg", "p1")]
    assert keys_of(gw.pending_replies(ZERO)) == [("tg", "r1")]
    for channel, value in written["offsets"].items():
        assert gw.offset(ZERO, channel) == value
    for key, value in written["selections"].items():
        assert gw.conversation(ZERO, *key) == value


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
        assert gateway.accept(c, make_message("tg", f"m{i}"), T0 + i * MS) is True
    for i, c in enumerate(writers):
        # a key accepted under another context is a duplicate under this one
        assert gateway.accept(c, make_message("tg", f"m{(i + 1) % len(writers)}"), T0) is False
    reference = gateway.pending(ZERO)
    with clause("GW-ORD-1", what="pending() after accepts 1 ms apart"):
        assert [i.message_id for i in reference] == [f"m{i}" for i in range(len(writers))]
    for c in writers:
        assert gateway.pending(c) == reference
        assert gateway.get_item(c, "tg", "m0") == reference[0]
    assert gateway.set_replied(CONTEXTS[1], "tg", "m0", "r") is True
    with clause("GW-ST-3", what="a second set_replied, under another context"):
        assert gateway.set_replied(CONTEXTS[3], "tg", "m0", "other") is False
    for c in writers:
        assert keys_of(gateway.pending_replies(c)) == [("tg", "m0")]
    assert gateway.mark_done(CONTEXTS[4], "tg", "m0") is True
    assert gateway.mark_done(CONTEXTS[2], "tg", "m0") is False
    gateway.set_offset(CONTEXTS[1], "tg", 7)
    gateway.set_conversation_agent(CONTEXTS[2], "tg", "c", "a")
    gateway.set_conversation_project(CONTEXTS[3], "tg", "c", "p")
    for c in writers:
        assert gateway.offset(c, "tg") == 7
        assert gateway.conversation(c, "tg", "c") == ("a", "p")
    assert gateway.prune_done(CONTEXTS[3], T0 + timedelta(days=1)) == 1
    assert gateway.get_item(ZERO, "tg", "m0") is None


@pytest.mark.clause("GW-SCOPE-1")
def test_items_carry_no_scope_or_partition(gateway):
    """An inbox row has no scope, partition or principal of the caller: the
    item type has no such fields, and a row accepted with a scoped,
    partitioned context reads back with only the message's own fields."""
    names = {f.name for f in attrs.fields(InboxItem)}
    assert not names & {"scope", "partition"}
    msg = make_message("tg", "m1", principal="user:bob")
    assert gateway.accept(Context(Scope.parse("ws=w1"), partition="p1", principal="svc"), msg, T0)
    item = gateway.get_item(ZERO, "tg", "m1")
    assert item.principal == "user:bob"  # the message's principal, not the caller's
    assert_item(item, expected_item(msg, T0))


@pytest.mark.clause("GW-SCOPE-3")
def test_locations_are_isolated(open_gateway, other_location):
    """Two locations are open at the same time (their locks are separate) and
    share no row, offset or selection."""
    a = open_gateway()
    b = open_gateway(other_location)
    assert a.accept(ZERO, make_message("tg", "m1"), T0) is True
    a.set_offset(ZERO, "tg", 5)
    a.set_conversation_agent(ZERO, "tg", "c", "agent-a")
    assert b.get_item(ZERO, "tg", "m1") is None
    assert b.pending(ZERO) == [] and b.pending_replies(ZERO) == []
    assert b.offset(ZERO, "tg") == 0
    assert b.conversation(ZERO, "tg", "c") == ("", "")
    # the same key is fresh in the other location, and stays independent
    assert b.accept(ZERO, make_message("tg", "m1", text="other"), T0 + MS) is True
    assert b.mark_done(ZERO, "tg", "m1") is True
    assert a.get_item(ZERO, "tg", "m1").status == ItemStatus.PENDING
    assert b.prune_done(ZERO, T0 + timedelta(days=1)) == 1
    assert a.get_item(ZERO, "tg", "m1") is not None


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
        _assert_populated(second, written)
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
        assert gateway.accept(ZERO, make_message("tg", mid), given) is True
        assert gateway.get_item(ZERO, "tg", mid).received_at == stored
    clock.advance(timedelta(days=400))
    for mid, (_, stored) in cases.items():
        got = gateway.get_item(ZERO, "tg", mid).received_at
        assert got == stored and got.utcoffset() == timedelta(0)


@pytest.mark.clause("GW-SCOPE-5", "GW-PRUNE-1")
def test_prune_compares_with_before_not_the_clock(gateway, clock):
    """The cutoff is the argument: a clock far in the future does not make a
    recent done row old, a clock in the past does not protect an old one, and
    `before` is truncated to milliseconds before it is compared."""
    assert gateway.accept(ZERO, make_message("tg", "old"), T0)
    assert gateway.mark_done(ZERO, "tg", "old")
    clock.set(T0 + timedelta(days=3650))
    assert gateway.prune_done(ZERO, T0) == 0  # strictly before: not the row itself
    # T0 + 0.9 ms truncates to T0: still not strictly earlier
    assert gateway.prune_done(ZERO, T0 + timedelta(microseconds=900)) == 0
    clock.set(T0 - timedelta(days=3650))
    assert gateway.prune_done(ZERO, T0 + MS) == 1


@pytest.mark.clause("GW-SCOPE-5", "RSC-GEN-2", "GW-ACC-6")
@pytest.mark.parametrize("bad", [datetime(2026, 1, 1), "2026-01-01T00:00:00Z", 1767225600, None],
                         ids=["naive", "text", "epoch-int", "none"])
def test_instants_must_be_aware_datetimes(gateway, bad):
    """A naive or non-datetime `now` or `before` is InvalidArgument and writes nothing."""
    assert gateway.accept(ZERO, make_message("tg", "kept"), T0)
    assert gateway.mark_done(ZERO, "tg", "kept")
    keys = [("tg", "kept"), ("tg", "new")]
    raises_nothing_written(gateway, lambda: gateway.accept(ZERO, make_message("tg", "new"), bad), keys=keys)
    raises_nothing_written(gateway, lambda: gateway.prune_done(ZERO, bad), keys=keys)


@pytest.mark.clause("GW-SCOPE-6", "RSC-GEN-12")
def test_one_store_serves_many_threads(gateway, profile):
    """Threads using one open store at once, each on its own keys, channels and
    conversations, with queue reads in between: every call succeeds and the
    final state holds every write."""
    n = profile.race_threads

    def worker(i: int) -> None:
        ch = f"ch{i}"
        for j in range(4):
            assert gateway.accept(ZERO, make_message(ch, f"m{j}"), T0 + j * MS)
            gateway.pending(ZERO)
        assert gateway.set_replied(ZERO, ch, "m0", f"reply {i}")
        assert gateway.mark_done(ZERO, ch, "m1")
        gateway.set_offset(ZERO, ch, i)
        gateway.set_conversation_agent(ZERO, ch, "c", f"a{i}")
        gateway.set_conversation_project(ZERO, ch, "c", f"p{i}")
        gateway.pending_replies(ZERO)

    for outcome in race([lambda i=i: worker(i) for i in range(n)]):
        assert outcome.ok, outcome.error
    assert len(gateway.pending(ZERO)) == 2 * n
    assert sorted(i.channel for i in gateway.pending_replies(ZERO)) == sorted(f"ch{i}" for i in range(n))
    for i in range(n):
        assert gateway.get_item(ZERO, f"ch{i}", "m0").reply == f"reply {i}"
        assert gateway.get_item(ZERO, f"ch{i}", "m1").status == ItemStatus.DONE
        assert gateway.offset(ZERO, f"ch{i}") == i
        assert gateway.conversation(ZERO, f"ch{i}", "c") == (f"a{i}", f"p{i}")


# ===========================================================================
# Open, close and the lock (GW-OPEN)
# ===========================================================================


@pytest.mark.clause("GW-OPEN-1")
def test_open_creates_an_empty_location_and_holds_its_lock(store, gateway_location):
    gw = store.open_gateway(gateway_location)
    try:
        assert gw.pending(ZERO) == [] and gw.pending_replies(ZERO) == []
        assert gw.get_item(ZERO, "tg", "m1") is None
        assert gw.offset(ZERO, "tg") == 0
        assert gw.conversation(ZERO, "tg", "c") == ("", "")
        assert gw.accept(ZERO, make_message("tg", "m1"), T0) is True
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
    assert gateway_view(holder, view_keys, ["tg", "sms"], list(written["selections"])) == before
    assert holder.accept(ZERO, make_message("tg", "after"), T0 + timedelta(seconds=1)) is True


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
    assert done.wait(30), "the refused open is still waiting for the lock"
    assert isinstance(box[0], StoreLocked), box
    assert holder.pending(ZERO) == []  # the holder was not disturbed
    holder.close()
    again = store.open_gateway(gateway_location)
    try:
        assert again.pending(ZERO) == []
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
            _assert_populated(gw, written)
            assert gw.accept(ZERO, make_message("tg", "p1"), T0) is False
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
        assert cortex_harness.gateway_lease is not None, (
            "the lock of a dead holder kept the next open out, and the backend declares no lease"
        )
        cortex_harness.expire_gateway_lease(gateway_location)
        again = store.open_gateway(gateway_location)
    try:
        _assert_populated(again, written)
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

    assert set(calls) == set(GATEWAY_METHODS)
    for name, call in calls.items():
        with pytest.raises(StoreClosed):
            call()
    gateway.close()


@pytest.mark.clause("GW-OPEN-7", "GW-OPEN-5")
def test_closed_store_wrote_nothing_after_close(store, gateway_location):
    """Calls refused with StoreClosed left no trace: the reopened location has
    only what was acknowledged before the close."""
    gw = store.open_gateway(gateway_location)
    assert gw.accept(ZERO, make_message("tg", "m1"), T0)
    gw.close()
    for call in (lambda: gw.accept(ZERO, make_message("tg", "m2"), T0),
                 lambda: gw.set_replied(ZERO, "tg", "m1", "late"),
                 lambda: gw.set_offset(ZERO, "tg", 9)):
        with pytest.raises(StoreClosed):
            call()
    again = store.open_gateway(gateway_location)
    try:
        assert keys_of(again.pending(ZERO)) == [("tg", "m1")]
        assert again.get_item(ZERO, "tg", "m1").reply == ""
        assert again.offset(ZERO, "tg") == 0
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
            assert gw.accept(ZERO, make_message("tg", "m1"), T0) is True
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
        assert child.open() is None
        assert child.call("accept", make_message("tg", "from-child"), T0) == ("ok", True)
        for _ in range(2):
            with pytest.raises(StoreLocked):
                store.open_gateway(gateway_location)
        assert child.call("pending") [1][0].message_id == "from-child"
        child.close()
    gw = store.open_gateway(gateway_location)
    try:
        assert keys_of(gw.pending(ZERO)) == [("tg", "from-child")]
        before = gateway_view(gw, [("tg", "from-child")], ["tg"])
        with _child(cortex_harness, gateway_location) as other:
            assert other.open() == "StoreLocked"
        assert gateway_view(gw, [("tg", "from-child")], ["tg"]) == before
        assert gw.accept(ZERO, make_message("tg", "parent"), T0 + MS) is True
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
        assert child.open() is None
        msg = make_message("tg", "k1")
        assert child.call("accept", msg, T0) == ("ok", True)
        assert child.call("accept", make_message("tg", "k2"), T0 + MS) == ("ok", True)
        assert child.call("set_replied", "tg", "k1", "answer") == ("ok", True)
        assert child.call("set_offset", "tg", 99) == ("ok", None)
        assert child.call("set_conversation_project", "tg", "c", "px") == ("ok", None)
    finally:
        child.kill()
    try:
        gw = store.open_gateway(gateway_location)
    except StoreLocked:  # a server-side release gets its declared bound (GW-OPEN-6)
        assert cortex_harness.gateway_lease is not None, "the killed holder's lock kept the open out"
        cortex_harness.expire_gateway_lease(gateway_location)
        gw = store.open_gateway(gateway_location)
    try:
        assert_item(gw.get_item(ZERO, "tg", "k1"), expected_item(msg, T0, ItemStatus.REPLIED, "answer"))
        assert keys_of(gw.pending(ZERO)) == [("tg", "k2")]
        assert keys_of(gw.pending_replies(ZERO)) == [("tg", "k1")]
        assert gw.offset(ZERO, "tg") == 99
        assert gw.conversation(ZERO, "tg", "c") == ("", "px")
        assert gw.accept(ZERO, msg, T0) is False  # GW-CRASH-2 after a real death
    finally:
        gw.close()


# ===========================================================================
# Accept and deduplication (GW-ACC)
# ===========================================================================


@pytest.mark.clause("GW-ACC-2", "GW-ACC-8")
def test_accept_stores_a_pending_row_with_every_field(gateway):
    msg = make_message("telegram", "1001", conversation="chat-9", principal="user:7",
                       text="héllo 👋\nsecond line", trusted=True, agent="writer", project="p-1")
    assert gateway.accept(ZERO, msg, T0) is True
    assert_item(gateway.get_item(ZERO, "telegram", "1001"), expected_item(msg, T0))
    plain = InboundMessage(channel="telegram", message_id="1002")
    assert gateway.accept(ZERO, plain, T0) is True
    assert_item(gateway.get_item(ZERO, "telegram", "1002"), expected_item(plain, T0))


@pytest.mark.clause("GW-ACC-2", "RSC-GEN-8")
def test_large_text_round_trips(gateway):
    text = "ü" * (1024 * 1024)
    assert gateway.accept(ZERO, make_message("tg", "big", text=text), T0)
    assert gateway.get_item(ZERO, "tg", "big").text == text
    assert gateway.pending(ZERO)[0].text == text


@pytest.mark.clause("GW-ACC-1", "GW-ACC-3")
def test_dedup_key_is_channel_and_message_id_exactly(gateway):
    """The upstream TestAcceptDedup and more: the same id on another channel,
    and keys differing only in case, whitespace or Unicode normalisation, are
    different keys."""
    assert gateway.accept(ZERO, make_message("telegram", "m1"), T0) is True
    assert gateway.accept(ZERO, make_message("telegram", "m1"), T0) is False
    distinct = [("slack", "m1"), ("Telegram", "m1"), ("telegram", "M1"), ("telegram", "m1 "),
                ("telegram ", "m1"), ("telegram", "é"), ("telegram", "e\u0301"), ("telegramm", "1")]
    for i, (channel, mid) in enumerate(distinct):
        assert gateway.accept(ZERO, make_message(channel, mid), T0 + i * MS) is True, (channel, mid)
    for channel, mid in distinct:
        assert gateway.accept(ZERO, make_message(channel, mid), T0) is False
    assert len(gateway.pending(ZERO)) == 1 + len(distinct)


@pytest.mark.clause("GW-ACC-3", "GW-ACC-7")
@pytest.mark.parametrize("status", ["pending", "replied", "done"])
def test_duplicate_accept_changes_nothing(gateway, status):
    """Whatever the row's status, a redelivery with different text, principal,
    trust flag, conversation and snapshot and a later receipt time returns
    False and the row keeps its first values."""
    first = make_message("tg", "m1", text="first", principal="a", trusted=False, agent="x", project="y")
    assert gateway.accept(ZERO, first, T0)
    reply = ""
    if status in ("replied", "done"):
        reply = "the answer"
        assert gateway.set_replied(ZERO, "tg", "m1", reply)
    if status == "done":
        assert gateway.mark_done(ZERO, "tg", "m1")
    want = expected_item(first, T0, ItemStatus(status), reply)
    before = gateway_view(gateway, [("tg", "m1")])
    second = make_message("tg", "m1", text="second", principal="b", trusted=True,
                          conversation="other", agent="z", project="w")
    for when in (T0, T0 + timedelta(hours=1), T0 - timedelta(hours=1)):
        assert gateway.accept(ZERO, second, when) is False
    assert_item(gateway.get_item(ZERO, "tg", "m1"), want)
    assert gateway_view(gateway, [("tg", "m1")]) == before


@pytest.mark.clause("GW-ACC-4", "GW-PRUNE-1")
def test_dedup_lasts_until_the_row_is_pruned(gateway):
    """The upstream TestPruneDone: a done row still deduplicates until a prune
    deletes it; a prune whose cutoff does not reach it changes nothing; after
    the row is gone the key is fresh and stores the new delivery."""
    assert gateway.accept(ZERO, make_message("tg", "old", text="v1"), T0)
    assert gateway.accept(ZERO, make_message("tg", "recent", text="v1"), T0 + timedelta(hours=2))
    for mid in ("old", "recent"):
        assert gateway.mark_done(ZERO, "tg", mid)
        assert gateway.accept(ZERO, make_message("tg", mid, text="v2"), T0) is False
    assert gateway.prune_done(ZERO, T0) == 0
    assert gateway.accept(ZERO, make_message("tg", "old", text="v2"), T0) is False
    assert gateway.prune_done(ZERO, T0 + timedelta(hours=1)) == 1
    assert gateway.get_item(ZERO, "tg", "old") is None
    assert gateway.accept(ZERO, make_message("tg", "recent", text="v2"), T0) is False
    later = T0 + timedelta(hours=3)
    new = make_message("tg", "old", text="v2")
    assert gateway.accept(ZERO, new, later) is True
    assert_item(gateway.get_item(ZERO, "tg", "old"), expected_item(new, later))
    assert gateway.accept(ZERO, new, later) is False


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
        assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
        winners = [i for i, o in enumerate(outcomes) if o.value is True]
        assert len(winners) == 1, f"round {round_}: {len(winners)} accepts returned True"
        assert all(o.value is False for i, o in enumerate(outcomes) if i != winners[0])
        assert gateway.get_item(ZERO, "tg", mid).text == f"copy {winners[0]}"
    assert len(gateway.pending(ZERO)) == profile.race_rounds


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
    assert gateway.accept(ZERO, make_message("tg", "other"), T0)
    raises_nothing_written(gateway, lambda: gateway.accept(ZERO, BAD_MESSAGES[case](), T0),
                           keys=[("tg", "m1"), ("tg", "other")])


BAD_KEYS = [("", "m1"), ("tg", ""), ("", ""), ("c" * 256, "m1"), ("tg", "m" * 256), ("t\x00g", "m1"),
            ("tg", "m\ud800"), (None, "m1"), ("tg", 7), (b"tg", "m1")]


@pytest.mark.clause("GW-ACC-6")
@pytest.mark.parametrize("channel, message_id", BAD_KEYS)
def test_key_methods_refuse_bad_keys(gateway, channel, message_id):
    """`get_item`, `set_replied` and `mark_done` refuse an empty, oversized,
    NUL- or surrogate-bearing or non-str key part; nothing is written."""
    assert gateway.accept(ZERO, make_message("tg", "m1"), T0)
    keys = [("tg", "m1")]
    raises_nothing_written(gateway, lambda: gateway.get_item(ZERO, channel, message_id), keys=keys)
    raises_nothing_written(gateway, lambda: gateway.set_replied(ZERO, channel, message_id, "r"), keys=keys)
    raises_nothing_written(gateway, lambda: gateway.mark_done(ZERO, channel, message_id), keys=keys)


@pytest.mark.clause("GW-ACC-6", "RSC-GEN-6", "RSC-GEN-8")
@pytest.mark.parametrize("reply", [None, 42, b"r", "a\x00b", "\ud800", "x" * MAX_ENTITY_BYTES],
                         ids=["none", "int", "bytes", "nul", "surrogate", "oversized"])
def test_set_replied_refuses_bad_replies(gateway, reply):
    assert gateway.accept(ZERO, make_message("tg", "m1"), T0)
    raises_nothing_written(gateway, lambda: gateway.set_replied(ZERO, "tg", "m1", reply),
                           keys=[("tg", "m1")])
    assert gateway.set_replied(ZERO, "tg", "m1", "fine") is True


@pytest.mark.clause("GW-ACC-6", "RSC-GEN-8")
def test_reply_that_makes_the_row_too_large_is_refused(gateway):
    """The row with its reply must fit RSC-GEN-8, whatever the row's status."""
    text = "t" * (MAX_ENTITY_BYTES // 2)
    reply = "r" * (MAX_ENTITY_BYTES // 2)
    for mid in ("p", "d"):
        assert gateway.accept(ZERO, make_message("tg", mid, text=text), T0)
    assert gateway.mark_done(ZERO, "tg", "d")
    keys = [("tg", "p"), ("tg", "d")]
    raises_nothing_written(gateway, lambda: gateway.set_replied(ZERO, "tg", "p", reply), keys=keys)
    raises_nothing_written(gateway, lambda: gateway.set_replied(ZERO, "tg", "d", reply), keys=keys)
    assert gateway.set_replied(ZERO, "tg", "p", reply[:1000]) is True


@pytest.mark.clause("GW-ACC-7", "GW-Q-1", "GW-Q-2")
def test_snapshot_is_kept_whatever_the_selection_does(gateway):
    """The upstream TestInboxSnapshotsAgentAndProject, extended: the agent and
    project stored at accept stay, through both queues and into done, while the
    conversation's selection is changed and cleared."""
    msg = make_message("tg", "m1", conversation="c", agent="persona-a", project="proj-a")
    gateway.set_conversation_agent(ZERO, "tg", "c", "persona-a")
    assert gateway.accept(ZERO, msg, T0)
    gateway.set_conversation_agent(ZERO, "tg", "c", "persona-b")
    gateway.set_conversation_project(ZERO, "tg", "c", "proj-b")
    expect("GW-Q-1", [(i.agent, i.project) for i in gateway.pending(ZERO)], [("persona-a", "proj-a")],
           "the pending row's agent and project after the selection changed")
    assert gateway.set_replied(ZERO, "tg", "m1", "r")
    gateway.set_conversation_agent(ZERO, "tg", "c", "")
    expect("GW-Q-2", [(i.agent, i.project) for i in gateway.pending_replies(ZERO)], [("persona-a", "proj-a")],
           "the replied row's agent and project in pending_replies after the selection was cleared")
    assert gateway.mark_done(ZERO, "tg", "m1")
    gateway.set_conversation_project(ZERO, "tg", "c", "proj-c")
    item = gateway.get_item(ZERO, "tg", "m1")
    expect("GW-ACC-7", (item.agent, item.project), ("persona-a", "proj-a"), "the done row's agent and project")
    assert gateway.conversation(ZERO, "tg", "c") == ("", "proj-c")


@pytest.mark.clause("GW-ACC-8")
def test_get_item_follows_the_row_and_writes_nothing(gateway):
    assert gateway.get_item(ZERO, "tg", "m1") is None
    msg = make_message("tg", "m1")
    gateway.accept(ZERO, msg, T0)
    assert_item(gateway.get_item(ZERO, "tg", "m1"), expected_item(msg, T0))
    gateway.set_replied(ZERO, "tg", "m1", "r")
    assert_item(gateway.get_item(ZERO, "tg", "m1"), expected_item(msg, T0, ItemStatus.REPLIED, "r"))
    before = gateway_view(gateway, [("tg", "m1"), ("tg", "nope")])
    for _ in range(3):
        gateway.get_item(ZERO, "tg", "m1")
        assert gateway.get_item(ZERO, "tg", "nope") is None
    assert gateway_view(gateway, [("tg", "m1"), ("tg", "nope")]) == before
    gateway.mark_done(ZERO, "tg", "m1")
    assert_item(gateway.get_item(ZERO, "tg", "m1"), expected_item(msg, T0, ItemStatus.DONE, "r"))
    gateway.prune_done(ZERO, T0 + MS)
    assert gateway.get_item(ZERO, "tg", "m1") is None


@pytest.mark.clause("GW-ACC-8")
def test_returned_items_are_detached(gateway):
    """Items are values: what one read returned does not change when the row
    changes later."""
    gateway.accept(ZERO, make_message("tg", "m1"), T0)
    first = gateway.get_item(ZERO, "tg", "m1")
    queued = gateway.pending(ZERO)
    gateway.set_replied(ZERO, "tg", "m1", "r")
    assert first.status == ItemStatus.PENDING and first.reply == ""
    assert queued[0].status == ItemStatus.PENDING


# ===========================================================================
# Status transitions (GW-ST)
# ===========================================================================


@pytest.mark.clause("GW-ST-2", "GW-ST-6", "GW-Q-1", "GW-Q-2", "GW-Q-3")
def test_reply_queue_lifecycle(gateway):
    """The upstream TestReplyQueueDurability: pending → replied → done moves
    the row from one queue to the other and then out of both."""
    msg = make_message("tg", "m1")
    gateway.accept(ZERO, msg, T0)
    assert keys_of(gateway.pending(ZERO)) == [("tg", "m1")] and gateway.pending_replies(ZERO) == []
    assert gateway.set_replied(ZERO, "tg", "m1", "the answer") is True
    assert gateway.pending(ZERO) == []
    [item] = gateway.pending_replies(ZERO)
    assert_item(item, expected_item(msg, T0, ItemStatus.REPLIED, "the answer"))
    assert gateway.mark_done(ZERO, "tg", "m1") is True
    assert gateway.pending(ZERO) == [] and gateway.pending_replies(ZERO) == []
    assert_item(gateway.get_item(ZERO, "tg", "m1"), expected_item(msg, T0, ItemStatus.DONE, "the answer"))


@pytest.mark.clause("GW-ST-6", "GW-Q-1", "GW-ORD-1")
def test_pending_and_done(gateway):
    """The upstream TestPendingAndDone: oldest first; marking a pending row
    done takes it out of the queue."""
    gateway.accept(ZERO, make_message("tg", "b"), T0 + timedelta(seconds=5))
    gateway.accept(ZERO, make_message("tg", "a"), T0)
    assert keys_of(gateway.pending(ZERO)) == [("tg", "a"), ("tg", "b")]
    assert gateway.mark_done(ZERO, "tg", "a") is True
    assert keys_of(gateway.pending(ZERO)) == [("tg", "b")]
    item = gateway.get_item(ZERO, "tg", "a")
    assert item.status == ItemStatus.DONE and item.reply == ""


@pytest.mark.clause("GW-ST-3")
def test_second_set_replied_keeps_the_first_reply(gateway):
    gateway.accept(ZERO, make_message("tg", "m1"), T0)
    assert gateway.set_replied(ZERO, "tg", "m1", "first") is True
    before = gateway_view(gateway, [("tg", "m1")])
    for other in ("second", "", "first"):
        assert gateway.set_replied(ZERO, "tg", "m1", other) is False
    assert gateway_view(gateway, [("tg", "m1")]) == before
    assert gateway.pending_replies(ZERO)[0].reply == "first"


@pytest.mark.clause("GW-ST-4", "GW-ST-1")
def test_done_is_terminal(gateway):
    """Upstream moved a done row back to replied; here `set_replied` on a done
    row returns False and the row is untouched, with or without an earlier
    reply, and it never reappears in a queue."""
    gateway.accept(ZERO, make_message("tg", "plain"), T0)
    gateway.accept(ZERO, make_message("tg", "answered"), T0 + MS)
    gateway.set_replied(ZERO, "tg", "answered", "sent once")
    for mid in ("plain", "answered"):
        assert gateway.mark_done(ZERO, "tg", mid) is True
    keys = [("tg", "plain"), ("tg", "answered")]
    before = gateway_view(gateway, keys)
    for mid in ("plain", "answered"):
        assert gateway.set_replied(ZERO, "tg", mid, "resurrected") is False
        assert gateway.mark_done(ZERO, "tg", mid) is False
        assert gateway.accept(ZERO, make_message("tg", mid), T0) is False
    assert gateway_view(gateway, keys) == before
    assert gateway.pending(ZERO) == [] and gateway.pending_replies(ZERO) == []
    assert gateway.get_item(ZERO, "tg", "answered").reply == "sent once"


@pytest.mark.clause("GW-ST-5")
def test_set_replied_on_unknown_key_creates_nothing(gateway):
    assert gateway.set_replied(ZERO, "tg", "ghost", "r") is False
    assert gateway.get_item(ZERO, "tg", "ghost") is None
    assert gateway.pending(ZERO) == [] and gateway.pending_replies(ZERO) == []
    # and the key is still fresh
    assert gateway.accept(ZERO, make_message("tg", "ghost"), T0) is True
    assert gateway.get_item(ZERO, "tg", "ghost").status == ItemStatus.PENDING


@pytest.mark.clause("GW-ST-6")
def test_mark_done_keeps_the_reply(gateway):
    gateway.accept(ZERO, make_message("tg", "m1"), T0)
    gateway.set_replied(ZERO, "tg", "m1", "keep me")
    assert gateway.mark_done(ZERO, "tg", "m1") is True
    item = gateway.get_item(ZERO, "tg", "m1")
    assert item.status == ItemStatus.DONE and item.reply == "keep me"


@pytest.mark.clause("GW-ST-7")
def test_mark_done_on_done_or_unknown_changes_nothing(gateway):
    assert gateway.mark_done(ZERO, "tg", "ghost") is False
    assert gateway.get_item(ZERO, "tg", "ghost") is None
    gateway.accept(ZERO, make_message("tg", "m1"), T0)
    assert gateway.mark_done(ZERO, "tg", "m1") is True
    before = gateway_view(gateway, [("tg", "m1"), ("tg", "ghost")])
    assert gateway.mark_done(ZERO, "tg", "m1") is False
    assert gateway_view(gateway, [("tg", "m1"), ("tg", "ghost")]) == before


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
    assert gateway.pending(ZERO) == []
    assert gateway.get_item(ZERO, "tg", "r").status == ItemStatus.REPLIED
    assert gateway.get_item(ZERO, "tg", "d").status == ItemStatus.DONE


@pytest.mark.clause("GW-ST-8", "GW-ST-3")
def test_concurrent_set_replied_has_one_winner(gateway, profile):
    n = profile.race_threads
    for round_ in range(profile.race_rounds):
        mid = f"m{round_}"
        gateway.accept(ZERO, make_message("tg", mid), T0)
        outcomes = race([lambda i=i: gateway.set_replied(ZERO, "tg", mid, f"reply {i}") for i in range(n)])
        assert all(o.ok for o in outcomes)
        winners = [i for i, o in enumerate(outcomes) if o.value is True]
        assert len(winners) == 1, f"round {round_}: {len(winners)} set_replied returned True"
        assert gateway.get_item(ZERO, "tg", mid).reply == f"reply {winners[0]}"


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
        assert all(o.ok for o in outcomes)
        replied = [o.value[0] for o in outcomes if o.value[0] != "done" and o.value[1]]
        done = [o for o in outcomes if o.value[0] == "done" and o.value[1]]
        assert len(replied) <= 1 and len(done) == 1
        item = gateway.get_item(ZERO, "tg", mid)
        assert item.status == ItemStatus.DONE
        assert item.reply == (replied[0] if replied else "")


@pytest.mark.clause("GW-ST-8", "GW-ST-7")
def test_concurrent_mark_done_has_one_winner(gateway, profile):
    n = profile.race_threads
    for round_ in range(profile.race_rounds):
        mid = f"m{round_}"
        gateway.accept(ZERO, make_message("tg", mid), T0)
        if round_ % 2:
            gateway.set_replied(ZERO, "tg", mid, "r")
        outcomes = race([lambda: gateway.mark_done(ZERO, "tg", mid) for _ in range(n)])
        assert sum(1 for o in outcomes if o.value is True) == 1
        assert all(o.ok and o.value in (True, False) for o in outcomes)
        assert gateway.get_item(ZERO, "tg", mid).reply == ("r" if round_ % 2 else "")


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
    assert [i.message_id for i in pending] == ["a", "c", "f"]
    assert [i.message_id for i in replies] == ["b"]
    for item in pending:
        assert_item(item, expected_item(msgs[item.message_id], T0 + "abcdef".index(item.message_id) * MS))
    assert_item(replies[0], expected_item(msgs["b"], T0 + MS, ItemStatus.REPLIED, "reply-b"))
    assert not set(keys_of(pending)) & set(keys_of(replies))


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
        assert gateway.accept(ZERO, make_message(*key), T0 + i * MS)
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
        expect("GW-Q-3", keys_of(method(ZERO)), everything, f"the whole {status} queue, in receipt order")
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
        raises_nothing_written(gateway, lambda: method(ZERO, limit, offset), keys=[("tg", "m1")])


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
    assert texts != sorted(times, key=lambda k: times[k])  # the trap is real
    for mid in ("half", "next", "whole", "123", "tenth"):
        gateway.accept(ZERO, make_message("tg", mid), times[mid])
    want = ["whole", "tenth", "123", "half", "next"]
    assert [i.message_id for i in gateway.pending(ZERO)] == want
    for mid in want:
        gateway.set_replied(ZERO, "tg", mid, "r")
    assert [i.message_id for i in gateway.pending_replies(ZERO)] == want


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
    assert [i.message_id for i in gateway.pending(ZERO)] == ["a", "b", "c"]
    for mid in "abc":
        assert gateway.get_item(ZERO, "tg", mid).received_at.utcoffset() == timedelta(0)


@pytest.mark.clause("GW-ORD-2")
def test_equal_receipt_times_keep_insertion_order(gateway):
    """Rows with one `received_at` come in the order their accepts succeeded,
    not by key; a refused duplicate does not take a place."""
    order = ["zeta", "alpha", "Mid", "beta", "10", "9"]
    channels = ["tg", "sms", "tg", "a-channel", "tg", "tg"]
    for mid, channel in zip(order, channels):
        assert gateway.accept(ZERO, make_message(channel, mid), T0)
        assert gateway.accept(ZERO, make_message("tg", "zeta"), T0) is False
    assert [i.message_id for i in gateway.pending(ZERO)] == order
    for mid, channel in zip(order, channels):
        gateway.set_replied(ZERO, channel, mid, "r")
    assert [i.message_id for i in gateway.pending_replies(ZERO)] == order
    # sub-millisecond differences truncate to a tie: insertion order decides
    gateway.accept(ZERO, make_message("x", "later-in-time"), T0 + timedelta(microseconds=900))
    gateway.accept(ZERO, make_message("x", "earlier-in-time"), T0 + timedelta(microseconds=100))
    assert [i.message_id for i in gateway.pending(ZERO)] == ["later-in-time", "earlier-in-time"]


@pytest.mark.clause("GW-ORD-3", "GW-ACC-4")
def test_reaccepted_key_gets_a_new_place(gateway):
    """A pruned key accepted again at the same instant sorts after the rows
    already there (a new sequence number), and by its new time otherwise."""
    for mid in ("a", "b", "c"):
        gateway.accept(ZERO, make_message("tg", mid), T0)
    gateway.mark_done(ZERO, "tg", "a")
    assert gateway.prune_done(ZERO, T0 + MS) == 1
    assert gateway.accept(ZERO, make_message("tg", "a"), T0) is True
    assert [i.message_id for i in gateway.pending(ZERO)] == ["b", "c", "a"]
    gateway.mark_done(ZERO, "tg", "c")
    assert gateway.prune_done(ZERO, T0 + MS) == 1
    assert gateway.accept(ZERO, make_message("tg", "c"), T0 - timedelta(seconds=1)) is True
    assert [i.message_id for i in gateway.pending(ZERO)] == ["c", "b", "a"]


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
    assert gateway.prune_done(ZERO, cutoff) == 3
    survivors = {mid for mid in rows if gateway.get_item(ZERO, "tg", mid) is not None}
    assert survivors == {"at", "after"}
    assert gateway.prune_done(ZERO, cutoff) == 0
    assert gateway.prune_done(ZERO, datetime(2999, 1, 1, tzinfo=UTC)) == 2


@pytest.mark.clause("GW-PRUNE-2")
def test_prune_never_deletes_pending_or_replied_rows(gateway):
    ancient = datetime(1990, 1, 1, tzinfo=UTC)
    gateway.accept(ZERO, make_message("tg", "pending"), ancient)
    gateway.accept(ZERO, make_message("tg", "replied"), ancient)
    gateway.set_replied(ZERO, "tg", "replied", "r")
    gateway.accept(ZERO, make_message("tg", "done"), ancient)
    gateway.mark_done(ZERO, "tg", "done")
    assert gateway.prune_done(ZERO, datetime(2999, 1, 1, tzinfo=UTC)) == 1
    assert keys_of(gateway.pending(ZERO)) == [("tg", "pending")]
    assert keys_of(gateway.pending_replies(ZERO)) == [("tg", "replied")]
    assert gateway.get_item(ZERO, "tg", "done") is None


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
    assert gateway.prune_done(ZERO, old + MS) == 1
    assert gateway.get_item(ZERO, "tg", "received-old") is None
    assert gateway.get_item(ZERO, "tg", "received-new") is not None


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
    assert gateway.prune_done(ZERO, T0 + timedelta(seconds=1)) == 3
    assert gateway_view(gateway, keys, ["tg"]) == before


# ===========================================================================
# Poll offsets (GW-OFF)
# ===========================================================================


@pytest.mark.clause("GW-OFF-1", "GW-OFF-2", "GW-OFF-3")
def test_offset_round_trip(gateway):
    """The upstream TestOffsetRoundTrip: unset 0; set; overwrite."""
    assert gateway.offset(ZERO, "telegram") == 0
    gateway.set_offset(ZERO, "telegram", 100)
    assert gateway.offset(ZERO, "telegram") == 100
    gateway.set_offset(ZERO, "telegram", 250)
    assert gateway.offset(ZERO, "telegram") == 250


@pytest.mark.clause("GW-OFF-2", "GW-OFF-4")
def test_offset_may_go_anywhere_in_64_bits(gateway):
    for value in (10, 3, 0, -1, 2**63 - 1, -(2**63), 0):
        gateway.set_offset(ZERO, "tg", value)
        got = gateway.offset(ZERO, "tg")
        assert got == value and type(got) is int


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
        assert gateway.offset(ZERO, channel) == value
    assert gateway.offset(ZERO, "t") == 0


@pytest.mark.clause("GW-OFF-4")
@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, True, False, 1.0, "5", None],
                         ids=["too-big", "too-small", "true", "false", "float", "str", "none"])
def test_offset_value_out_of_range_or_type_is_refused(gateway, value):
    gateway.set_offset(ZERO, "tg", 7)
    raises_nothing_written(gateway, lambda: gateway.set_offset(ZERO, "tg", value), channels=["tg"])


@pytest.mark.clause("GW-OFF-3", "GW-ACC-6")
@pytest.mark.parametrize("channel", [None, 5, "c" * 256, "a\x00", "\ud800"])
def test_offset_channel_must_be_a_short_string(gateway, channel):
    raises_nothing_written(gateway, lambda: gateway.offset(ZERO, channel), channels=["tg"])
    raises_nothing_written(gateway, lambda: gateway.set_offset(ZERO, channel, 1), channels=["tg"])


# ===========================================================================
# Conversation selection (GW-SEL)
# ===========================================================================


@pytest.mark.clause("GW-SEL-1", "GW-SEL-2", "GW-SEL-3")
def test_conversation_selection(gateway):
    """The upstream TestConversationSelection: unset → empty; agent then
    project, both kept; and the other order."""
    assert gateway.conversation(ZERO, "tg", "c1") == ("", "")
    gateway.set_conversation_agent(ZERO, "tg", "c1", "researcher")
    assert gateway.conversation(ZERO, "tg", "c1") == ("researcher", "")
    gateway.set_conversation_project(ZERO, "tg", "c1", "proj-1")
    assert gateway.conversation(ZERO, "tg", "c1") == ("researcher", "proj-1")
    gateway.set_conversation_agent(ZERO, "tg", "c1", "writer")
    assert gateway.conversation(ZERO, "tg", "c1") == ("writer", "proj-1")
    gateway.set_conversation_project(ZERO, "tg", "c2", "proj-2")
    assert gateway.conversation(ZERO, "tg", "c2") == ("", "proj-2")
    gateway.set_conversation_agent(ZERO, "tg", "c2", "coder")
    assert gateway.conversation(ZERO, "tg", "c2") == ("coder", "proj-2")


@pytest.mark.clause("GW-SEL-4")
def test_empty_clears_a_field(gateway):
    gateway.set_conversation_agent(ZERO, "tg", "c", "a")
    gateway.set_conversation_project(ZERO, "tg", "c", "p")
    gateway.set_conversation_agent(ZERO, "tg", "c", "")
    assert gateway.conversation(ZERO, "tg", "c") == ("", "p")
    gateway.set_conversation_project(ZERO, "tg", "c", "")
    assert gateway.conversation(ZERO, "tg", "c") == ("", "")
    assert gateway.conversation(ZERO, "tg", "c") == gateway.conversation(ZERO, "tg", "never")
    gateway.set_conversation_project(ZERO, "tg", "c", "p2")
    assert gateway.conversation(ZERO, "tg", "c") == ("", "p2")
    gateway.set_conversation_agent(ZERO, "tg", "fresh", "")
    assert gateway.conversation(ZERO, "tg", "fresh") == ("", "")


@pytest.mark.clause("GW-SEL-5")
def test_selection_key_is_channel_and_conversation_exactly(gateway):
    keys = [("tg", "c"), ("TG", "c"), ("tg", "C"), ("tg", "c "), ("", "c"), ("tg", ""), ("slack", "c")]
    for i, key in enumerate(keys):
        gateway.set_conversation_agent(ZERO, *key, f"a{i}")
    for i, key in enumerate(keys):
        assert gateway.conversation(ZERO, *key) == (f"a{i}", "")
    assert gateway.conversation(ZERO, "tgc", "") == ("", "")


@pytest.mark.clause("GW-SEL-5", "GW-ACC-6")
@pytest.mark.parametrize("channel, conversation, value", [
    (None, "c", "a"), ("tg", 3, "a"), ("tg", "c", None), ("tg", "c", "a" * 256),
    ("c" * 256, "c", "a"), ("tg", "c\x00", "a"), ("tg", "c", "\ud800"),
])
def test_selection_refuses_bad_arguments(gateway, channel, conversation, value):
    gateway.set_conversation_agent(ZERO, "tg", "c", "kept")
    convs = [("tg", "c")]
    raises_nothing_written(gateway, lambda: gateway.set_conversation_agent(ZERO, channel, conversation, value),
                           conversations=convs)
    raises_nothing_written(gateway, lambda: gateway.set_conversation_project(ZERO, channel, conversation, value),
                           conversations=convs)
    if value == "a":
        raises_nothing_written(gateway, lambda: gateway.conversation(ZERO, channel, conversation),
                               conversations=convs)


@pytest.mark.clause("GW-SEL-6")
def test_concurrent_agent_and_project_setters_both_survive(gateway, profile):
    for round_ in range(profile.race_rounds):
        conv = f"c{round_}"
        half = max(1, profile.race_threads // 2)
        calls = [lambda: gateway.set_conversation_agent(ZERO, "tg", conv, "agent-x") for _ in range(half)]
        calls += [lambda: gateway.set_conversation_project(ZERO, "tg", conv, "proj-y") for _ in range(half)]
        assert all(o.ok for o in race(calls))
        assert gateway.conversation(ZERO, "tg", conv) == ("agent-x", "proj-y")


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
        _assert_populated(gw, written)
        for key in written["items"]:
            assert gw.accept(ZERO, make_message(*key), T0) is False
        assert ("tg", "r1") not in keys_of(gw.pending(ZERO))
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
                assert_item(item, expected_item(msg, T0, ItemStatus.REPLIED, f"reply {mid}"))
            else:
                assert_item(item, expected_item(msg, T0))
            sel = again.conversation(ZERO, "tg", mid)
            assert sel in (("", ""), ("a", ""), ("a", "p")), sel
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
