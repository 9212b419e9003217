"""Reference semantics of class ``gateway`` (spec: gateway.md).

Locations.  A reference gateway location is a name (a non-empty short
string).  A process-wide registry maps each name to a :class:`MemoryMedium`
that outlives the stores opened on it, so ``close`` and a later open is a
faithful restart (GW-SCOPE-4, GW-OPEN-5), and to the store currently holding
the location's lock.  Opening a held location raises ``StoreLocked`` at once
and touches nothing (GW-OPEN-2..4).

Crashes.  An in-memory store cannot have its process killed by a test, so
:func:`crash` stands in for the death of the holding process: it abandons the
open store (any later call on it raises ``StoreClosed``, as a dead process
makes no calls) and releases the location's lock without ``close`` having
run (GW-OPEN-6, GW-CRASH-9).  Every method is one step under the medium's
lock, so a crash always falls between two calls: what was acknowledged is in
the medium, what was not never started (GW-CRASH-1, GW-CRASH-7).

Rows.  The inbox lives in the medium's ``gw_items`` table as
:class:`GatewayRow` (the item and its insertion number).  Insertion numbers
come from the medium's ``gw_sequence`` and are never handed out twice, even
after the row they were given to is pruned (GW-ORD-2/3).  Queues are ordered
by ``(received_at, seq)``: instants, never text (GW-ORD-1).  Rows are
immutable and replaced, never mutated (MemoryMedium.clone relies on it).

The gateway reads no clock (GW-SCOPE-5): ``accept`` stores the ``now`` it is
given, ``prune_done`` compares with ``before``.
"""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Iterator

from cortex_spec.context import Context, require_context
from cortex_spec.entities import detach, entity, replace
from cortex_spec.errors import StoreClosed, StoreError, StoreLocked
from cortex_spec.gateway import (
    GatewayStore,
    InboundMessage,
    InboxItem,
    ItemStatus,
    check_channel,
    check_cutoff,
    check_key,
    check_offset_value,
    check_queue_page,
    check_reply,
    check_reply_fits,
    check_selection_key,
    check_selection_value,
    validate_message,
)
from cortex_spec.validation import check_nonempty_short_str, page

from .store import MemoryMedium, StoreBase

__all__ = [
    "GatewayRow",
    "MemoryGateway",
    "GatewayMixin",
    "open_location",
    "crash",
    "new_location_name",
    "discard_location",
    "break_location",
    "repair_location",
    "is_held",
]


@entity
class GatewayRow:
    """A stored inbox row and its insertion number."""

    item: InboxItem
    seq: int


class _Location:
    """One registered location: its medium and the store holding its lock."""

    __slots__ = ("name", "medium", "holder", "broken")

    def __init__(self, name: str) -> None:
        self.name = name
        self.medium = MemoryMedium()
        self.holder: MemoryGateway | None = None
        #: a test hook: the storage is unusable, so opens fail (GW-OPEN-8)
        self.broken = False


_REGISTRY: dict[str, _Location] = {}
_REGISTRY_LOCK = threading.Lock()


def check_location(location: object) -> str:
    """A reference location is a non-empty short string (else InvalidArgument)."""
    return check_nonempty_short_str(location, "location")


def open_location(location: object, cls: type[MemoryGateway] | None = None) -> MemoryGateway:
    """Open the named location, creating it if needed (GW-OPEN-1).

    ``cls`` is the class of the store to open (a subclass of
    :class:`MemoryGateway`; the mutant zoo uses it)."""
    name = check_location(location)
    with _REGISTRY_LOCK:
        loc = _REGISTRY.get(name)
        if loc is not None and loc.holder is not None:
            # GW-OPEN-2/3/4: refused at once, nothing read or written
            raise StoreLocked(f"gateway location {name!r} is held by another open store")
        if loc is not None and loc.broken:
            raise StoreError(f"the storage of gateway location {name!r} is unusable")  # GW-OPEN-8
        if loc is None:
            loc = _REGISTRY[name] = _Location(name)
        store = (cls or MemoryGateway)(loc.medium, loc)
        loc.holder = store
        return store


def crash(store: "MemoryGateway") -> None:
    """The crash hook: the process holding ``store`` died.

    The store is abandoned (never closed) and the location's lock is
    released, as the death of a process releases an OS lock (GW-OPEN-6).
    """
    store._abandon()


def new_location_name(prefix: str = "gateway") -> str:
    """A name no registered location has."""
    return f"{prefix}-{uuid.uuid4().hex}"


def discard_location(location: str) -> None:
    """Forget a location and its data (test hygiene); abandons a holder."""
    with _REGISTRY_LOCK:
        loc = _REGISTRY.pop(location, None)
    if loc is not None and loc.holder is not None:
        loc.holder._abandon()


def break_location(location: str) -> None:
    """Make opens of ``location`` fail with ``StoreError`` (GW-OPEN-8 tests)."""
    with _REGISTRY_LOCK:
        loc = _REGISTRY.get(location)
        if loc is None:
            loc = _REGISTRY[location] = _Location(location)
        loc.broken = True


def repair_location(location: str) -> None:
    with _REGISTRY_LOCK:
        loc = _REGISTRY.get(location)
        if loc is not None:
            loc.broken = False


def is_held(location: str) -> bool:
    with _REGISTRY_LOCK:
        loc = _REGISTRY.get(location)
        return loc is not None and loc.holder is not None


def _order(rows: list[GatewayRow]) -> list[GatewayRow]:
    return sorted(rows, key=lambda r: (r.item.received_at, r.seq))  # GW-ORD-1/2


class MemoryGateway:
    """The reference gateway store of one location.

    ``MemoryGateway.on_medium(medium)`` opens an unregistered store on a
    medium directly (no lock): the machines use it to run gateway calls on
    the reference model's medium.
    """

    def __init__(self, medium: MemoryMedium, location: _Location | None = None) -> None:
        self.medium = medium
        self._location = location
        self._closed = False

    @classmethod
    def on_medium(cls, medium: MemoryMedium) -> "MemoryGateway":
        return cls(medium, None)

    @property
    def location(self) -> str | None:
        return None if self._location is None else self._location.name

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"MemoryGateway({self.location!r})"

    # -- lifecycle ---------------------------------------------------------------------

    def _release(self) -> None:
        loc = self._location
        if loc is None:
            return
        with _REGISTRY_LOCK:
            if loc.holder is self:
                loc.holder = None

    def close(self) -> None:
        """Idempotent; releases the lock (GW-OPEN-5, GW-OPEN-7)."""
        with self.medium.lock:  # waits for a call in progress
            self._closed = True
        self._release()

    def _abandon(self) -> None:
        """What the death of the holding process does (see :func:`crash`)."""
        with self.medium.lock:
            self._closed = True
        self._release()

    @contextmanager
    def _tx(self) -> Iterator[MemoryMedium]:
        """One whole method under the medium's lock (GW-SCOPE-6)."""
        with self.medium.lock:
            if self._closed:
                raise StoreClosed("the gateway store is closed")
            yield self.medium

    # -- inbox -------------------------------------------------------------------------

    def accept(self, ctx: Context, message: InboundMessage, now: datetime) -> bool:
        item = validate_message(ctx, message, now)
        with self._tx() as t:
            key = (item.channel, item.message_id)
            if key in t.gw_items:
                return False  # GW-ACC-3: whatever its status, nothing changes
            seq = t.gw_sequence.get("last", 0) + 1  # GW-ORD-2: never reused
            t.gw_sequence["last"] = seq
            t.gw_items[key] = GatewayRow(item=item, seq=seq)
            return True

    def get_item(self, ctx: Context, channel: str, message_id: str) -> InboxItem | None:
        require_context(ctx)
        key = check_key(channel, message_id)
        with self._tx() as t:
            row = t.gw_items.get(key)
            return None if row is None else detach(row.item)

    def _queue(self, ctx: Context, status: ItemStatus, limit: int, offset: int) -> list[InboxItem]:
        require_context(ctx)
        limit, offset = check_queue_page(limit, offset)
        with self._tx() as t:
            rows = [r for r in t.gw_items.values() if r.item.status == status]
            return [detach(r.item) for r in page(_order(rows), limit, offset)]

    def pending(self, ctx: Context, limit: int = 0, offset: int = 0) -> list[InboxItem]:
        return self._queue(ctx, ItemStatus.PENDING, limit, offset)

    def pending_replies(self, ctx: Context, limit: int = 0, offset: int = 0) -> list[InboxItem]:
        return self._queue(ctx, ItemStatus.REPLIED, limit, offset)

    def set_replied(self, ctx: Context, channel: str, message_id: str, reply: str) -> bool:
        require_context(ctx)
        key = check_key(channel, message_id)
        reply = check_reply(reply)
        with self._tx() as t:
            row = t.gw_items.get(key)
            if row is None:
                return False  # GW-ST-5
            check_reply_fits(row.item, reply)
            if row.item.status != ItemStatus.PENDING:
                return False  # GW-ST-3/4: the first reply stays; done is terminal
            t.gw_items[key] = replace(
                row, item=replace(row.item, status=ItemStatus.REPLIED, reply=reply)
            )
            return True

    def mark_done(self, ctx: Context, channel: str, message_id: str) -> bool:
        require_context(ctx)
        key = check_key(channel, message_id)
        with self._tx() as t:
            row = t.gw_items.get(key)
            if row is None or row.item.status == ItemStatus.DONE:
                return False  # GW-ST-7
            t.gw_items[key] = replace(row, item=replace(row.item, status=ItemStatus.DONE))
            return True

    def prune_done(self, ctx: Context, before: datetime) -> int:
        require_context(ctx)
        cutoff = check_cutoff(before)
        with self._tx() as t:
            doomed = [
                key for key, row in t.gw_items.items()
                if row.item.status == ItemStatus.DONE
                and row.item.received_at is not None  # a stored row always has it (validate_message)
                and row.item.received_at < cutoff
            ]
            for key in doomed:
                del t.gw_items[key]
            return len(doomed)

    # -- offsets -----------------------------------------------------------------------

    def offset(self, ctx: Context, channel: str) -> int:
        require_context(ctx)
        channel = check_channel(channel)
        with self._tx() as t:
            return t.gw_offsets.get(channel, 0)

    def set_offset(self, ctx: Context, channel: str, value: int) -> None:
        require_context(ctx)
        channel = check_channel(channel)
        value = check_offset_value(value)
        with self._tx() as t:
            t.gw_offsets[channel] = value

    # -- selection ---------------------------------------------------------------------

    def conversation(self, ctx: Context, channel: str, conversation: str) -> tuple[str, str]:
        require_context(ctx)
        key = check_selection_key(channel, conversation)
        with self._tx() as t:
            return t.gw_selections.get(key, ("", ""))

    def _set_selection(self, ctx: Context, channel: str, conversation: str, value: str, field: str) -> None:
        require_context(ctx)
        key = check_selection_key(channel, conversation)
        value = check_selection_value(value, field)
        with self._tx() as t:
            agent, project = t.gw_selections.get(key, ("", ""))
            if field == "agent":
                agent = value
            else:
                project = value
            if agent == "" and project == "":
                t.gw_selections.pop(key, None)  # GW-SEL-4: same as never set
            else:
                t.gw_selections[key] = (agent, project)

    def set_conversation_agent(self, ctx: Context, channel: str, conversation: str, agent: str) -> None:
        self._set_selection(ctx, channel, conversation, agent, "agent")

    def set_conversation_project(
        self, ctx: Context, channel: str, conversation: str, project: str
    ) -> None:
        self._set_selection(ctx, channel, conversation, project, "project")


class GatewayMixin(StoreBase):
    """Makes :class:`MemoryStore` the reference's gateway opener."""

    #: the class of the gateway stores it opens
    gateway_class: type = MemoryGateway

    def open_gateway(self, location: Any) -> GatewayStore:
        """Open the named location (see the module docstring)."""
        if self._closed:
            raise StoreClosed("the store is closed")
        return open_location(location, self.gateway_class)
