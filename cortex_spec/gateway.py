"""Conformance class ``gateway`` (spec: gateway.md): a chat gateway's durable state.

A gateway store keeps, for one *location*, the inbox of accepted inbound
messages (deduplicated by ``(channel, message_id)``, moving pending →
replied → done), a poll offset per channel, the agent/project selection per
conversation, and an exclusive lock on the location.  It is unscoped
(GW-SCOPE-1/2) and reads no clock (GW-SCOPE-5): every instant it stores or
compares is an argument.

How a gateway store is obtained.  A store that declares ``gateway`` in its
``capabilities`` is the backend's *opener*: it provides
``open_gateway(location) -> GatewayStore`` (:class:`GatewayOpener`).  What a
location is belongs to the backend (GW-SCOPE-4):

* reference — a name (non-empty short string) in a process-wide registry of
  media that survives ``close`` and re-open; its crash hook
  (:func:`cortex_spec.reference.gateway.crash`) abandons an open store and
  releases its lock, standing in for the death of the holding process;
* SQLite — a directory holding the gateway's private database file and a
  lock file held with ``fcntl.flock`` (the kernel releases it when the
  process dies);
* PostgreSQL — a namespace (a schema of the opener's database) and a
  session-level advisory lock held by a dedicated connection (the server
  releases it when the connection's process dies);
* MongoDB — a database name and a lock document kept as a lease, renewed
  while the store is open; the lease length is declared (GW-OPEN-6).

The certification harness hands out fresh locations
(:meth:`cortex_spec.harness.Harness.new_gateway_location`); the clause suite
never invents one.

This module holds the contract every backend shares: the entities, the
argument checks (so that every backend refuses the same input with
``InvalidArgument`` before touching storage) and the two protocols.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import Enum
from typing import Any, Protocol, Sequence, runtime_checkable

from . import ids
from .context import Context, require_context
from .entities import entity, replace
from .errors import InvalidArgument
from .scope import Scope
from .validation import (
    INT64_MAX,
    INT64_MIN,
    MAX_ENTITY_BYTES,
    check_bool,
    check_entity_size,
    check_instant,
    check_nonempty_short_str,
    check_page,
    check_short_str,
    check_str,
)

__all__ = [
    "ItemStatus",
    "InboundMessage",
    "InboxItem",
    "GatewayStore",
    "GatewayOpener",
    "GATEWAY_METHODS",
    "validate_message",
    "check_key",
    "check_reply",
    "check_reply_fits",
    "check_offset_value",
    "check_channel",
    "check_selection_key",
    "check_selection_value",
    "check_cutoff",
    "check_queue_page",
    "queue_of",
    "rfc3339_nano",
]


class ItemStatus(str, Enum):
    """Where a row is in its life (GW-ST-1)."""

    PENDING = "pending"
    REPLIED = "replied"
    DONE = "done"

    def __str__(self) -> str:
        return self.value


@entity
class InboundMessage:
    """What ``accept`` takes: one message as the chat provider delivered it,
    with the conversation's selection (``agent``, ``project``) snapshotted at
    receipt."""

    channel: str
    message_id: str
    conversation: str = ""
    principal: str = ""
    text: str = ""
    trusted: bool = False
    agent: str = ""
    project: str = ""


@entity
class InboxItem:
    """A stored inbox row: the message, its status, its reply and its
    receipt time (the ``now`` its accept was given)."""

    channel: str
    message_id: str
    conversation: str = ""
    principal: str = ""
    text: str = ""
    trusted: bool = False
    agent: str = ""
    project: str = ""
    status: ItemStatus = ItemStatus.PENDING
    reply: str = ""
    received_at: datetime | None = None


#: The methods of a gateway store that take ``ctx`` (all but ``close``).
GATEWAY_METHODS = (
    "accept",
    "get_item",
    "pending",
    "set_replied",
    "pending_replies",
    "mark_done",
    "prune_done",
    "offset",
    "set_offset",
    "conversation",
    "set_conversation_agent",
    "set_conversation_project",
)


# -- argument checks (GW-ACC-6, GW-OFF-4, GW-SCOPE-5, GW-Q-4) ---------------------------


def check_key(channel: object, message_id: object) -> tuple[str, str]:
    """An inbox key: two non-empty short strings (GW-ACC-1, GW-ACC-6)."""
    return (
        check_nonempty_short_str(channel, "channel"),
        check_nonempty_short_str(message_id, "message_id"),
    )


def validate_message(ctx: object, message: object, now: object) -> InboxItem:
    """GW-ACC-2/6: the row ``accept`` would store, or ``InvalidArgument``.

    Checks ``ctx`` first (SCOPE-ZERO-3; the scope is ignored, GW-SCOPE-2),
    then the message's fields, ``now`` (aware, truncated to ms) and the size
    of the row (RSC-GEN-8).
    """
    require_context(ctx)
    if not isinstance(message, InboundMessage):
        raise InvalidArgument(f"message must be an InboundMessage, got {type(message).__name__}")
    channel, message_id = check_key(message.channel, message.message_id)
    item = InboxItem(
        channel=channel,
        message_id=message_id,
        conversation=check_short_str(message.conversation, "message.conversation"),
        principal=check_short_str(message.principal, "message.principal"),
        text=check_str(message.text, "message.text"),
        trusted=check_bool(message.trusted, "message.trusted"),
        agent=check_short_str(message.agent, "message.agent"),
        project=check_short_str(message.project, "message.project"),
        status=ItemStatus.PENDING,
        reply="",
        received_at=check_instant(now, "now"),
    )
    check_entity_size(item, "inbox item")
    return item


def _json_bytes(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8"))


def check_reply(reply: object) -> str:
    """A reply: any ``str`` without U+0000 or lone surrogates, not by itself
    larger than an entity may be (RSC-GEN-6/8)."""
    check_str(reply, "reply")
    assert isinstance(reply, str)
    if _json_bytes(reply) > MAX_ENTITY_BYTES:
        raise InvalidArgument(f"reply is larger than {MAX_ENTITY_BYTES} bytes")
    return reply


def check_reply_fits(item: InboxItem, reply: str) -> None:
    """RSC-GEN-8 for ``set_replied``: the key's row, with ``reply`` stored,
    must still fit.  Checked whenever the row exists, whatever its status
    (the answer to bad input does not depend on the row's state)."""
    check_entity_size(replace(item, reply=reply, status=ItemStatus.REPLIED), "inbox item")


def check_offset_value(value: object) -> int:
    """GW-OFF-4: an ``int`` (never a ``bool``) in the signed 64-bit range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"offset must be an int, got {type(value).__name__}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise InvalidArgument(f"offset {value} is outside the signed 64-bit range")
    return value


def check_channel(channel: object) -> str:
    """The channel of an offset: a short string (may be empty)."""
    return check_short_str(channel, "channel")


def check_selection_key(channel: object, conversation: object) -> tuple[str, str]:
    """GW-SEL-5: (channel, conversation), short strings (may be empty)."""
    return check_short_str(channel, "channel"), check_short_str(conversation, "conversation")


def check_selection_value(value: object, field: str) -> str:
    """An agent or project of a selection: a short string; ``""`` clears."""
    return check_short_str(value, field)


def check_cutoff(before: object) -> datetime:
    """``prune_done``'s cutoff: aware, truncated to ms (GW-SCOPE-5)."""
    return check_instant(before, "before")


def check_queue_page(limit: object, offset: object) -> tuple[int, int]:
    """GW-Q-4: ``int`` page arguments; ``<= 0`` means none."""
    return check_page(limit, offset)


def queue_of(status: ItemStatus) -> str | None:
    """GW-Q-3: the queue a row of ``status`` belongs to."""
    if status == ItemStatus.PENDING:
        return "pending"
    if status == ItemStatus.REPLIED:
        return "pending_replies"
    return None


def rfc3339_nano(instant: datetime) -> str:
    """Go's ``time.RFC3339Nano`` text of ``instant`` in its own offset:
    fraction digits with trailing zeros trimmed, ``Z`` for UTC.

    Only here to explain GW-ORD-1 (the upstream sorted this text, which is
    wrong within one second and across offsets) and for the mutant that does
    the same; no conforming store orders by it.
    """
    base = instant.strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{instant.microsecond:06d}".rstrip("0")
    if frac:
        base += "." + frac
    offset = instant.utcoffset()
    if offset is None or offset.total_seconds() == 0:
        return base + "Z"
    total = int(offset.total_seconds())
    sign = "+" if total >= 0 else "-"
    total = abs(total)
    return f"{base}{sign}{total // 3600:02d}:{total % 3600 // 60:02d}"


# -- protocols ------------------------------------------------------------------------


@runtime_checkable
class GatewayStore(Protocol):
    """What ``open_gateway`` returns (GW-*).  Every method but ``close``
    takes ``ctx`` first and ignores its scope (GW-SCOPE-2); after ``close``
    they raise ``StoreClosed`` (GW-OPEN-7)."""

    def close(self) -> None:
        """Release the location's lock; idempotent (GW-OPEN-5, GW-OPEN-7)."""
        ...

    def accept(self, ctx: Context, message: InboundMessage, now: datetime) -> bool:
        """Store the message as a pending row unless its key has a row
        (GW-ACC-2..5); True when this call stored it.  Atomic."""
        ...

    def get_item(self, ctx: Context, channel: str, message_id: str) -> InboxItem | None:
        """The key's row, or None (GW-ACC-8)."""
        ...

    def pending(self, ctx: Context, limit: int = 0, offset: int = 0) -> list[InboxItem]:
        """Pending rows, by ``received_at`` then insertion (GW-Q-1, GW-ORD-*)."""
        ...

    def set_replied(self, ctx: Context, channel: str, message_id: str, reply: str) -> bool:
        """pending → replied with ``reply``; True when it changed the row
        (GW-ST-2..5).  One atomic conditional write."""
        ...

    def pending_replies(self, ctx: Context, limit: int = 0, offset: int = 0) -> list[InboxItem]:
        """Replied rows with their reply and snapshot (GW-Q-2, GW-ORD-*)."""
        ...

    def mark_done(self, ctx: Context, channel: str, message_id: str) -> bool:
        """pending or replied → done; True when it changed the row
        (GW-ST-6/7).  One atomic conditional write."""
        ...

    def prune_done(self, ctx: Context, before: datetime) -> int:
        """Delete done rows received strictly before ``before``; the count
        (GW-PRUNE-*)."""
        ...

    def offset(self, ctx: Context, channel: str) -> int:
        """The channel's poll offset, 0 when never set (GW-OFF-1)."""
        ...

    def set_offset(self, ctx: Context, channel: str, value: int) -> None:
        """Overwrite the channel's offset (GW-OFF-2)."""
        ...

    def conversation(self, ctx: Context, channel: str, conversation: str) -> tuple[str, str]:
        """``(agent, project)``, ``("", "")`` when unset (GW-SEL-1)."""
        ...

    def set_conversation_agent(self, ctx: Context, channel: str, conversation: str, agent: str) -> None:
        """Set the agent, keep the project (GW-SEL-2, GW-SEL-6)."""
        ...

    def set_conversation_project(
        self, ctx: Context, channel: str, conversation: str, project: str
    ) -> None:
        """Set the project, keep the agent (GW-SEL-3, GW-SEL-6)."""
        ...


@runtime_checkable
class GatewayOpener(Protocol):
    """What a store declaring ``gateway`` provides (GW-OPEN-*)."""

    def open_gateway(self, location: Any) -> GatewayStore:
        """Open (creating if needed) the gateway state at ``location`` and take
        its exclusive lock: ``StoreLocked`` at once when another open store
        holds it (GW-OPEN-2/3), ``StoreError`` for any other failure, with no
        lock left held (GW-OPEN-8)."""
        ...


# -- builders for tests ------------------------------------------------------------------------
# A valid inbound message (fresh id, the fields given) and what a gateway shows;
# cortex_spec.testing re-exports them.


#: A context for the gateway's calls (its rows carry no scope, GW-SCOPE-1).
_ANY = Context(Scope())


def make_message(channel: str = "telegram", message_id: str | None = None, **fields: Any) -> InboundMessage:
    """An :class:`InboundMessage` with every field set to something distinct."""
    if message_id is None:
        message_id = ids.new_id(ids.MESSAGE)
    fields.setdefault("conversation", "chat-42")
    fields.setdefault("principal", "user:alice")
    fields.setdefault("text", "deploy the staging branch, please")
    fields.setdefault("trusted", True)
    fields.setdefault("agent", "helper")
    fields.setdefault("project", "proj-7")
    return InboundMessage(channel=channel, message_id=message_id, **fields)


def gateway_view(
    gateway: Any,
    keys: Sequence[tuple[str, str]] = (),
    channels: Sequence[str] = (),
    conversations: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """Everything observable through a gateway store: both queues, the row of
    each of ``keys``, the offset of each of ``channels`` and the selection of
    each of ``conversations``.  Compare views before and after a call to
    prove it wrote nothing."""
    view: dict[str, Any] = {
        "pending": gateway.pending(_ANY),
        "pending_replies": gateway.pending_replies(_ANY),
    }
    for channel, message_id in keys:
        view[f"item[{channel!r},{message_id!r}]"] = gateway.get_item(_ANY, channel, message_id)
    for channel in channels:
        view[f"offset[{channel!r}]"] = gateway.offset(_ANY, channel)
    for channel, conversation in conversations:
        view[f"selection[{channel!r},{conversation!r}]"] = gateway.conversation(_ANY, channel, conversation)
    return view


#: The builders of this module (:mod:`cortex_spec.testing` re-exports them).
BUILDERS: tuple[str, ...] = ("make_message", "gateway_view")
__all__ += BUILDERS
