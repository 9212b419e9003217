"""Conformance class ``a2a``: agent-to-agent messaging (spec: a2a.md).

Envelopes (immutable FIPA-ACL messages), conversations with a hop budget,
deliveries (one row per receiver, claimed by workers and fenced by a claim
token) and pending asks (keyed by their ``reply_with`` token).  Every a2a row
also belongs to a *partition* (``ctx.partition``): a row is visible to a
caller when its partition equals ``ctx.partition`` and ``ctx.scope`` covers
its scope (A2A-GEN-3).

This module holds the entities, the performative table, address parsing,
envelope validation, the store-side validation functions (each returns the
entity exactly as a store must write it, or raises ``InvalidArgument``) and
the :class:`A2AStore` protocol.  Clause ids (``A2A-…``) refer to
``cortex_spec/spec/a2a.md``.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Protocol, Sequence, runtime_checkable

import attrs

from . import ids
from .clock import to_millis
from .context import Context
from .entities import entity, replace
from .errors import (
    InvalidArgument,
    InvalidPerformative,
    NoReceivers,
    NoSender,
    SelfAddressed,
)
from .scope import Scope
from .validation import (
    INT64_MAX,
    check_bool,
    check_count,
    check_entity_size,
    check_enum,
    check_json_object,
    check_nonempty_short_str,
    check_optional_instant,
    check_page,
    check_short_str,
    check_str,
)
from .views import FAR_FUTURE, Refs, attempt

__all__ = [
    "Address",
    "Performative",
    "RoutingClass",
    "ConversationStatus",
    "DeliveryState",
    "Envelope",
    "Conversation",
    "Delivery",
    "PendingAsk",
    "A2AStore",
    "PERFORMATIVES",
    "parse_address",
    "format_address",
    "is_well_formed",
    "performative_class",
    "answers_ask",
    "validate_envelope",
    "validate_new_envelope",
    "same_envelope",
    "admit",
    "updated_conversation",
    "validate_new_conversation",
    "validate_conversation_update",
    "validate_new_delivery",
    "validate_new_pending_ask",
    "check_claim_token",
    "check_delivery_error",
    "check_reply_with",
    "check_finish_state",
    "check_status_filter",
    "visible",
    "is_stale",
    "ask_expired",
    "peer_order_key",
    "ENVELOPE_CALLER_FIELDS",
    "CONVERSATION_UPDATE_FIELDS",
]


# -- addresses (A2A-ADDR) ----------------------------------------------------------


@attrs.frozen
class Address:
    """One messaging endpoint; ``node == ""`` is an agent of this engine.

    ``Address("worker")``, ``Address("worker", "peer.example")``: positional
    (unlike the entities), hashable, compared by value (A2A-ADDR-1)."""

    agent: str
    node: str = ""


def is_well_formed(address: Address) -> bool:
    """A2A-ADDR-5: no ``@`` in the node, nor in the agent of a local address."""
    if "@" in address.node:
        return False
    return address.node != "" or "@" not in address.agent


def _check_address(value: object, field: str, *, need_agent: bool = False) -> Address:
    """A well-formed :class:`Address` of short strings, or ``InvalidArgument``."""
    if not isinstance(value, Address):
        raise InvalidArgument(f"{field} must be an Address, got {type(value).__name__}")
    agent = check_short_str(value.agent, f"{field}.agent")
    node = check_short_str(value.node, f"{field}.node")
    address = Address(agent=agent, node=node)
    if not is_well_formed(address):
        raise InvalidArgument(f"{field} {format_text(address)!r} is not a well-formed address")
    if need_agent and agent == "":
        raise InvalidArgument(f"{field} has an empty agent")
    return address


def _check_addresses(value: object, field: str) -> tuple[Address, ...]:
    if not isinstance(value, (tuple, list)):
        raise InvalidArgument(f"{field} must be a tuple of Address, got {type(value).__name__}")
    return tuple(_check_address(a, f"{field}[{i}]") for i, a in enumerate(value))


def format_text(address: Address) -> str:
    """``agent`` or ``agent@node``, without any check (for messages)."""
    return address.agent if address.node == "" else f"{address.agent}@{address.node}"


def format_address(address: object) -> str:
    """A2A-ADDR-2: ``agent`` for a local address, else ``agent@node``.

    An argument that is not an :class:`Address`, or an address that is not
    well-formed (A2A-ADDR-5), is refused with ``InvalidArgument``: its text
    would parse back as a different address.
    """
    return format_text(_check_address(address, "address"))


def parse_address(text: object) -> Address:
    """A2A-ADDR-3/4: split at the last ``@``; ``""`` and empty parts refused.

    >>> parse_address("worker@peer.example")
    Address(agent='worker', node='peer.example')
    >>> parse_address("a@b@node")
    Address(agent='a@b', node='node')
    """
    check_str(text, "address")
    assert isinstance(text, str)
    if text == "":
        raise InvalidArgument("an empty address names nobody")
    agent, at, node = text.rpartition("@")
    if not at:
        agent, node = text, ""
    elif agent == "" or node == "":
        raise InvalidArgument(f"address {text!r} has an empty agent or node")
    return _check_address(Address(agent=agent, node=node), "address")


# -- performatives (A2A-PERF) ----------------------------------------------------------


class Performative(str, Enum):
    """A2A-PERF-1: the 22 FIPA-ACL performatives."""

    ACCEPT_PROPOSAL = "accept-proposal"
    AGREE = "agree"
    CANCEL = "cancel"
    CFP = "cfp"
    CONFIRM = "confirm"
    DISCONFIRM = "disconfirm"
    FAILURE = "failure"
    INFORM = "inform"
    INFORM_IF = "inform-if"
    INFORM_REF = "inform-ref"
    NOT_UNDERSTOOD = "not-understood"
    PROPAGATE = "propagate"
    PROPOSE = "propose"
    PROXY = "proxy"
    QUERY_IF = "query-if"
    QUERY_REF = "query-ref"
    REFUSE = "refuse"
    REJECT_PROPOSAL = "reject-proposal"
    REQUEST = "request"
    REQUEST_WHEN = "request-when"
    REQUEST_WHENEVER = "request-whenever"
    SUBSCRIBE = "subscribe"

    def __str__(self) -> str:
        return self.value


class RoutingClass(str, Enum):
    """How the bus routes a performative on arrival (A2A-PERF-2..4)."""

    DIRECTIVE = "directive"
    INFORMATIVE = "informative"
    CONTROL = "control"

    def __str__(self) -> str:
        return self.value


P = Performative
_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
#: Every valid performative (A2A-PERF-1).
PERFORMATIVES: tuple[Performative, ...] = tuple(Performative)

_CLASS_OF: dict[Performative, RoutingClass] = {
    **{p: RoutingClass.DIRECTIVE for p in (
        P.REQUEST, P.REQUEST_WHEN, P.REQUEST_WHENEVER, P.QUERY_IF, P.QUERY_REF, P.CFP,
        P.PROPOSE, P.ACCEPT_PROPOSAL)},
    **{p: RoutingClass.INFORMATIVE for p in (
        P.INFORM, P.INFORM_IF, P.INFORM_REF, P.CONFIRM, P.DISCONFIRM, P.AGREE, P.REFUSE,
        P.FAILURE, P.NOT_UNDERSTOOD, P.REJECT_PROPOSAL, P.SUBSCRIBE, P.PROXY, P.PROPAGATE)},
    P.CANCEL: RoutingClass.CONTROL,
}

_ANSWERS = frozenset({
    P.INFORM, P.INFORM_IF, P.INFORM_REF, P.CONFIRM, P.DISCONFIRM, P.REFUSE, P.FAILURE,
    P.NOT_UNDERSTOOD, P.REJECT_PROPOSAL, P.PROPOSE,
})


def _performative(value: object) -> Performative:
    """The member for a valid performative (a member or its exact string)."""
    if isinstance(value, Performative):
        return value
    if isinstance(value, str) and not isinstance(value, Enum):
        try:
            return Performative(value)
        except ValueError:
            pass
    shown = value if not isinstance(value, str) or len(value) <= 40 else value[:37] + "..."
    raise InvalidPerformative(f"{shown!r} is not one of the 22 FIPA-ACL performatives")


def performative_class(p: object) -> RoutingClass:
    """A2A-PERF-2..5: the routing class, or ``InvalidPerformative``."""
    return _CLASS_OF[_performative(p)]


def answers_ask(p: object) -> bool:
    """A2A-PERF-6: whether a reply with ``p`` answers a waiting ask
    (``agree`` does not: the peer is still working)."""
    return _performative(p) in _ANSWERS


# -- enums of the entities ----------------------------------------------------------------


class ConversationStatus(str, Enum):
    OPEN = "open"
    CLOSED = "closed"
    EXPIRED = "expired"

    def __str__(self) -> str:
        return self.value


class DeliveryState(str, Enum):
    QUEUED = "queued"
    DELIVERING = "delivering"
    DELIVERED = "delivered"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


# -- entities --------------------------------------------------------------------------------


@entity
class Envelope:
    """One FIPA-ACL message; immutable once recorded (A2A-ENV-3).

    ``scope``, ``partition``, ``hops`` and ``created_at`` are the store's.
    """

    id: str
    conversation_id: str
    performative: Performative | str = Performative.INFORM
    sender: Address = Address(agent="")
    receivers: tuple[Address, ...] = ()
    reply_to: tuple[Address, ...] = ()
    content: str = ""
    language: str = ""
    encoding: str = ""
    ontology: str = ""
    protocol: str = ""
    reply_with: str = ""
    in_reply_to: str = ""
    reply_by: datetime | None = None
    origin_run_id: str | None = None
    metadata: dict[str, Any] = attrs.Factory(dict)
    scope: Scope = Scope()
    partition: str = ""
    hops: int = 0
    created_at: datetime | None = None


@entity
class Conversation:
    """A thread of messages and its hop budget (A2A-CONV, A2A-HOP)."""

    id: str
    protocol: str = ""
    initiator: Address = Address(agent="")
    participants: tuple[Address, ...] = ()
    status: ConversationStatus | str = ConversationStatus.OPEN
    hop_ceiling: int = 8
    hops_used: int = 0
    deadline: datetime | None = None
    peer_node: str = ""
    peer_context: str = ""
    scope: Scope = Scope()
    partition: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None


@entity
class Delivery:
    """One envelope's arrival at one receiver (A2A-DLV)."""

    id: str
    message_id: str
    receiver: Address
    state: DeliveryState | str = DeliveryState.QUEUED
    error: str = ""
    claim_token: str | None = None
    claimed_at: datetime | None = None
    delivered_at: datetime | None = None
    read_at: datetime | None = None
    run_id: str | None = None
    scope: Scope = Scope()
    partition: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None


@entity
class PendingAsk:
    """A run paused on an ask, keyed by its ``reply_with`` token (A2A-ASK)."""

    reply_with: str
    conversation_id: str
    message_id: str
    asker_run_id: str
    asker_agent: str = ""
    tool_call_id: str = ""
    expected: Address = Address(agent="")
    deadline: datetime | None = None
    claimed_at: datetime | None = None
    scope: Scope = Scope()
    partition: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None


# -- envelope validation (A2A-ENV) ---------------------------------------------------------------


def validate_envelope(e: object) -> None:
    """A2A-ENV-1: performative, sender, receivers, self-addressing — in that
    order; the first failure is raised."""
    if not isinstance(e, Envelope):
        raise InvalidArgument(f"envelope must be an Envelope, got {type(e).__name__}")
    _performative(e.performative)
    if not isinstance(e.sender, Address) or e.sender.agent == "":
        raise NoSender("the envelope has no sender")
    receivers = e.receivers
    if not isinstance(receivers, (tuple, list)) or not receivers:
        raise NoReceivers("the envelope addresses nobody")
    for r in receivers:
        if not isinstance(r, Address) or r.agent == "":
            raise NoReceivers("the envelope has a receiver with an empty agent")
    for r in receivers:
        if r == e.sender:
            raise SelfAddressed(f"the sender {format_text(e.sender)!r} is among the receivers")


#: The fields of an envelope its caller supplies (compared by A2A-HOP-3).
ENVELOPE_CALLER_FIELDS = (
    "id", "conversation_id", "performative", "sender", "receivers", "reply_to", "content",
    "language", "encoding", "ontology", "protocol", "reply_with", "in_reply_to", "reply_by",
    "origin_run_id", "metadata",
)


def validate_new_envelope(e: object, ctx: Context, now: datetime) -> Envelope:
    """A2A-ENV-2: well-formedness (A2A-GEN-8/12, A2A-ADDR-5), then
    :func:`validate_envelope`.  Returns the envelope as it will be stored,
    with ``hops = 0`` until admission assigns it (A2A-HOP-9)."""
    if not isinstance(e, Envelope):
        raise InvalidArgument(f"envelope must be an Envelope, got {type(e).__name__}")
    stored = Envelope(
        id=ids.check_id(e.id, ids.MESSAGE, "envelope.id"),
        conversation_id=ids.check_id(e.conversation_id, ids.CONVERSATION, "envelope.conversation_id"),
        performative=e.performative,  # judged by validate_envelope only (A2A-ENV-2)
        sender=_check_address(e.sender, "envelope.sender"),
        receivers=_check_addresses(e.receivers, "envelope.receivers"),
        reply_to=_check_addresses(e.reply_to, "envelope.reply_to"),
        content=check_str(e.content, "envelope.content"),
        language=check_short_str(e.language, "envelope.language"),
        encoding=check_short_str(e.encoding, "envelope.encoding"),
        ontology=check_short_str(e.ontology, "envelope.ontology"),
        protocol=check_short_str(e.protocol, "envelope.protocol"),
        reply_with=check_short_str(e.reply_with, "envelope.reply_with"),
        in_reply_to=check_short_str(e.in_reply_to, "envelope.in_reply_to"),
        reply_by=check_optional_instant(e.reply_by, "envelope.reply_by"),
        origin_run_id=ids.check_optional_id(e.origin_run_id, ids.RUN, "envelope.origin_run_id"),
        metadata=check_json_object(e.metadata, "envelope.metadata"),
        scope=ctx.scope,
        partition=ctx.partition,
        hops=0,
        created_at=now,
    )
    validate_envelope(stored)
    stored = replace(stored, performative=_performative(stored.performative))
    check_entity_size(stored, "envelope")
    return stored


def _strict_eq(a: Any, b: Any) -> bool:
    """Equality that keeps JSON types apart (``1``, ``1.0`` and ``True`` differ)."""
    if isinstance(a, Enum) or isinstance(b, Enum):
        return isinstance(a, str) and isinstance(b, str) and str.__eq__(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_strict_eq(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_strict_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if attrs.has(type(a)):
        return all(_strict_eq(getattr(a, f.name), getattr(b, f.name)) for f in attrs.fields(type(a)))
    return bool(a == b)


def same_envelope(stored: Envelope, candidate: Envelope) -> bool:
    """A2A-HOP-3: same exact scope and partition, every caller-supplied field
    equal (JSON types included).  Both must be validated envelopes."""
    if stored.scope != candidate.scope or stored.partition != candidate.partition:
        return False
    return all(
        _strict_eq(getattr(stored, f), getattr(candidate, f)) for f in ENVELOPE_CALLER_FIELDS
    )


def admit(conversation: Conversation, envelope: Envelope, now: datetime) -> tuple[Conversation, Envelope]:
    """A2A-HOP-8: the conversation and the envelope after one admission
    (the caller has checked A2A-HOP-6/7 against the same ``conversation``).
    The conversation grows by the addresses new to it: measured as it will
    be stored, ``InvalidArgument`` over the size limit (RSC-GEN-13)."""
    hops = conversation.hops_used + 1
    participants = list(conversation.participants)
    grown = False
    for a in (envelope.sender, *envelope.receivers):
        if a not in participants:
            participants.append(a)
            grown = True
    charged = replace(conversation, hops_used=hops, participants=tuple(participants), updated_at=now)
    if grown:
        check_entity_size(charged, "conversation")
    return charged, replace(envelope, hops=hops, created_at=now)


def updated_conversation(current: Conversation, fields: dict[str, Any], now: datetime) -> Conversation:
    """The conversation ``update_conversation`` stores: ``current`` with the
    fields of A2A-CONV-5, measured as stored (RSC-GEN-13)."""
    updated = replace(current, updated_at=now, **fields)
    check_entity_size(updated, "conversation")
    return updated


# -- conversations (A2A-CONV, A2A-PEER) --------------------------------------------------------------


def _check_ceiling(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"conversation.hop_ceiling must be an int, got {type(value).__name__}")
    if not 1 <= value <= INT64_MAX:
        raise InvalidArgument(f"conversation.hop_ceiling must be >= 1, got {value}")
    return value


def _check_peer(node: object, context: object) -> tuple[str, str]:
    node = check_short_str(node, "conversation.peer_node")
    context = check_short_str(context, "conversation.peer_context")
    if (node == "") != (context == ""):
        raise InvalidArgument("peer_node and peer_context must both be empty or both be set")
    return node, context


#: A2A-CONV-5: the fields ``update_conversation`` takes from its argument.
CONVERSATION_UPDATE_FIELDS = ("protocol", "status", "hop_ceiling", "deadline", "peer_node", "peer_context")


def _conversation_fields(c: Conversation) -> dict[str, Any]:
    peer_node, peer_context = _check_peer(c.peer_node, c.peer_context)
    return {
        "protocol": check_short_str(c.protocol, "conversation.protocol"),
        "status": check_enum(c.status, ConversationStatus, "conversation.status"),
        "hop_ceiling": _check_ceiling(c.hop_ceiling),
        "deadline": check_optional_instant(c.deadline, "conversation.deadline"),
        "peer_node": peer_node,
        "peer_context": peer_context,
    }


def validate_new_conversation(c: object, ctx: Context, now: datetime) -> Conversation:
    """A2A-CONV-1..3: the conversation as it will be stored."""
    if not isinstance(c, Conversation):
        raise InvalidArgument(f"conversation must be a Conversation, got {type(c).__name__}")
    conversation_id = ids.check_id(c.id, ids.CONVERSATION, "conversation.id")
    initiator = _check_address(c.initiator, "conversation.initiator")
    participants: list[Address] = []
    seen: set[tuple[str, str]] = set()
    for a in _check_addresses(c.participants, "conversation.participants"):
        if (a.agent, a.node) not in seen:  # a set: conversations of thousands of participants
            seen.add((a.agent, a.node))
            participants.append(a)  # A2A-CONV-2: first occurrences, in order
    if check_count(c.hops_used, "conversation.hops_used") != 0:
        raise InvalidArgument("a new conversation has hops_used == 0")
    stored = Conversation(
        id=conversation_id,
        initiator=initiator,
        participants=tuple(participants),
        hops_used=0,
        scope=ctx.scope,
        partition=ctx.partition,
        created_at=now,
        updated_at=now,
        **_conversation_fields(c),
    )
    check_entity_size(stored, "conversation")
    return stored


def validate_conversation_update(c: object) -> tuple[str, dict[str, Any]]:
    """A2A-CONV-5/6/8: ``(id, the six fields to write)``; the other fields of
    the argument are ignored without being checked."""
    if not isinstance(c, Conversation):
        raise InvalidArgument(f"conversation must be a Conversation, got {type(c).__name__}")
    return ids.check_id(c.id, ids.CONVERSATION, "conversation.id"), _conversation_fields(c)


def check_status_filter(status: object) -> ConversationStatus | None:
    """A2A-CONV-10: ``None`` or one of the three statuses."""
    return None if status is None else check_enum(status, ConversationStatus, "status")


def peer_order_key(c: Conversation) -> tuple[int, datetime | None, str]:
    """A2A-PEER-4: shallowest scope first, then oldest, then smallest id."""
    return (c.scope.depth, c.created_at, c.id)


# -- deliveries (A2A-DLV) ---------------------------------------------------------------------------


def validate_new_delivery(d: object, ctx: Context, now: datetime) -> Delivery:
    """A2A-DLV-1/2: the delivery as it will be stored (``queued``)."""
    if not isinstance(d, Delivery):
        raise InvalidArgument(f"delivery must be a Delivery, got {type(d).__name__}")
    delivery_id = ids.check_id(d.id, ids.DELIVERY, "delivery.id")
    message_id = ids.check_id(d.message_id, ids.MESSAGE, "delivery.message_id")
    receiver = _check_address(d.receiver, "delivery.receiver", need_agent=True)
    if check_enum(d.state, DeliveryState, "delivery.state") != DeliveryState.QUEUED:
        raise InvalidArgument("a new delivery is queued")
    if not isinstance(d.error, str) or d.error != "":
        raise InvalidArgument("a new delivery has error == ''")
    for name in ("claim_token", "claimed_at", "delivered_at", "read_at", "run_id"):
        if getattr(d, name) is not None:
            raise InvalidArgument(f"delivery.{name} belongs to the store: a new delivery has None")
    stored = Delivery(
        id=delivery_id,
        message_id=message_id,
        receiver=receiver,
        state=DeliveryState.QUEUED,
        scope=ctx.scope,
        partition=ctx.partition,
        created_at=now,
        updated_at=now,
    )
    check_entity_size(stored, "delivery")
    return stored


def check_claim_token(token: object) -> str:
    """A2A-DLV-10, A2A-BIND-2: a claim token argument is a non-empty string."""
    if not isinstance(token, str) or isinstance(token, Enum):
        raise InvalidArgument(f"claim_token must be a str, got {type(token).__name__}")
    check_str(token, "claim_token")
    if token == "":
        raise InvalidArgument("claim_token must not be empty")
    return token


def check_delivery_error(error: object) -> str:
    """``finish_delivery``'s ``error``: a ``str`` of any length (no U+0000, no
    lone surrogate), small enough that the finished row stays within the
    entity size limit (RSC-GEN-8).  The size is judged on a delivery whose
    every other field is as large as the contract allows, so the check does
    not depend on the stored row and comes before any lookup (SCOPE-ZERO-3)."""
    check_str(error, "error")
    widest = "x" * 255
    probe = Delivery(
        id=ids.DELIVERY + "_" + "0" * 26, message_id=ids.MESSAGE + "_" + "0" * 26,
        receiver=Address(widest, widest), state=DeliveryState.DELIVERED, error=str(error),
        claim_token="x" * 64, claimed_at=_EPOCH, delivered_at=_EPOCH, read_at=_EPOCH,
        run_id=ids.RUN + "_" + "0" * 26, scope=Scope(*((widest, widest),) * 3), partition=widest,
        created_at=_EPOCH, updated_at=_EPOCH,
    )
    check_entity_size(probe, "delivery")
    return error  # type: ignore[return-value]


def check_finish_state(state: object) -> DeliveryState:
    """A2A-DLV-10: ``delivered`` or ``failed``."""
    value = check_enum(state, DeliveryState, "state")
    if value not in (DeliveryState.DELIVERED, DeliveryState.FAILED):
        raise InvalidArgument(f"a delivery is finished as delivered or failed, not {value.value!r}")
    return value


def is_stale(d: Delivery, older_than: datetime) -> bool:
    """A2A-RCL-2: delivering, unbound, claimed strictly before ``older_than``."""
    return (
        d.state == DeliveryState.DELIVERING
        and d.run_id is None
        and d.claimed_at is not None
        and d.claimed_at < older_than
    )


# -- pending asks (A2A-ASK) ---------------------------------------------------------------------------


def check_reply_with(value: object, field: str = "reply_with") -> str:
    """A pending ask's key: a non-empty short string."""
    return check_nonempty_short_str(value, field)


def validate_new_pending_ask(a: object, ctx: Context, now: datetime) -> PendingAsk:
    """A2A-ASK-1: the ask as it will be stored (unclaimed)."""
    if not isinstance(a, PendingAsk):
        raise InvalidArgument(f"ask must be a PendingAsk, got {type(a).__name__}")
    stored = PendingAsk(
        reply_with=check_reply_with(a.reply_with, "ask.reply_with"),
        conversation_id=ids.check_id(a.conversation_id, ids.CONVERSATION, "ask.conversation_id"),
        message_id=ids.check_id(a.message_id, ids.MESSAGE, "ask.message_id"),
        asker_run_id=ids.check_id(a.asker_run_id, ids.RUN, "ask.asker_run_id"),
        asker_agent=check_short_str(a.asker_agent, "ask.asker_agent"),
        tool_call_id=check_short_str(a.tool_call_id, "ask.tool_call_id"),
        expected=_check_address(a.expected, "ask.expected"),
        deadline=check_optional_instant(a.deadline, "ask.deadline"),
        claimed_at=None,
        scope=ctx.scope,
        partition=ctx.partition,
        created_at=now,
        updated_at=now,
    )
    if a.claimed_at is not None:
        raise InvalidArgument("ask.claimed_at belongs to the store: a new ask has None")
    check_entity_size(stored, "pending ask")
    return stored


def ask_expired(a: PendingAsk, now: datetime) -> bool:
    """A2A-ASK-8..11: unclaimed, with a deadline at or before ``now``."""
    return a.claimed_at is None and a.deadline is not None and a.deadline <= now


# -- visibility --------------------------------------------------------------------------------------


def visible(ctx: Context, row: Any) -> bool:
    """A2A-GEN-3, A2A-PART-3: same partition, and ``ctx.scope`` covers the row."""
    return row.partition == ctx.partition and ctx.scope.covers(row.scope)


# -- the protocol ------------------------------------------------------------------------------------


@runtime_checkable
class A2AStore(Protocol):
    """What a store of class ``a2a`` provides.  Every method checks, in this
    order: ``ctx`` is a Context, the scope (A2A-GEN-1; not for the three
    scope-ignoring methods), the other arguments (``InvalidArgument``), then
    the entity's NotFound, then the state errors."""

    # -- messages --------------------------------------------------------------------

    def record_message(self, ctx: Context, envelope: Envelope) -> Envelope:
        """Hop admission (A2A-HOP-1..11): checks in the order of A2A-HOP-2; an
        identical retry returns the stored envelope (A2A-HOP-3); otherwise one
        atomic step stores the envelope with ``hops = hops_used + 1`` and
        charges the conversation (A2A-HOP-8/10)."""
        ...

    def get_message(self, ctx: Context, message_id: str) -> Envelope:
        """The visible envelope, else ``MessageNotFound`` (A2A-ENV-4)."""
        ...

    def list_messages(
        self,
        ctx: Context,
        *,
        conversation_id: str | None = None,
        exact: bool = False,
        limit: int = 0,
        offset: int = 0,
    ) -> list[Envelope]:
        """Visible (or exact) envelopes, ``created_at`` then ``id`` ASC (A2A-ENV-5)."""
        ...

    # -- conversations ---------------------------------------------------------------

    def create_conversation(self, ctx: Context, conversation: Conversation) -> Conversation:
        """A2A-CONV-1..3, A2A-PEER-3."""
        ...

    def get_conversation(self, ctx: Context, conversation_id: str) -> Conversation:
        """The visible conversation, else ``ConversationNotFound`` (A2A-CONV-4)."""
        ...

    def get_conversation_by_peer_context(self, ctx: Context, node: str, peer_context: str) -> Conversation:
        """A2A-PEER-1/2/4: shallowest visible match, else ``ConversationNotFound``."""
        ...

    def update_conversation(self, ctx: Context, conversation: Conversation) -> Conversation:
        """A2A-CONV-5..8: writes the six updatable fields; closed and expired
        are final; the peer pair stays unique (A2A-PEER-3)."""
        ...

    def list_conversations(
        self,
        ctx: Context,
        *,
        status: ConversationStatus | str | None = None,
        exact: bool = False,
        limit: int = 0,
        offset: int = 0,
    ) -> list[Conversation]:
        """Visible (or exact) conversations, ``created_at`` then ``id`` DESC (A2A-CONV-10)."""
        ...

    # -- deliveries ---------------------------------------------------------------------

    def create_delivery(self, ctx: Context, delivery: Delivery) -> Delivery:
        """A queued row (A2A-DLV-1/2)."""
        ...

    def get_delivery(self, ctx: Context, delivery_id: str) -> Delivery:
        """The visible row with its current token, else ``DeliveryNotFound`` (A2A-DLV-3)."""
        ...

    def claim_delivery(self, ctx: Context, delivery_id: str) -> Delivery:
        """Atomic queued → delivering with a fresh token (A2A-DLV-5..9)."""
        ...

    def bind_delivery_run(self, ctx: Context, delivery_id: str, claim_token: str, run_id: str) -> Delivery:
        """Token-fenced, single-use run binding (A2A-BIND-1..6)."""
        ...

    def finish_delivery(
        self,
        ctx: Context,
        delivery_id: str,
        claim_token: str,
        state: DeliveryState | str,
        error: str = "",
    ) -> Delivery:
        """Token-fenced delivering → delivered | failed (A2A-DLV-10..13)."""
        ...

    def list_inbox(
        self,
        ctx: Context,
        agent: str,
        *,
        unread_only: bool = False,
        conversation_id: str | None = None,
        limit: int = 0,
        offset: int = 0,
    ) -> list[Delivery]:
        """Delivered rows of the local receiver ``agent`` (A2A-INBOX-1..5)."""
        ...

    def mark_delivery_read(self, ctx: Context, delivery_id: str) -> Delivery:
        """First read time kept; only delivered rows (A2A-READ-1..3)."""
        ...

    def list_queued_deliveries(self, ctx: Context, limit: int = 0) -> list[Delivery]:
        """Queued rows of ``ctx.partition`` in every scope (A2A-QUEUE-1)."""
        ...

    def reclaim_stale_deliveries(self, ctx: Context, older_than: datetime, limit: int = 0) -> int:
        """Stale rows of ``ctx.partition`` back to queued, each by its own
        re-checking step (A2A-RCL-1..9); returns how many moved."""
        ...

    # -- pending asks ---------------------------------------------------------------------

    def create_pending_ask(self, ctx: Context, ask: PendingAsk) -> PendingAsk:
        """A2A-ASK-1."""
        ...

    def get_pending_ask(self, ctx: Context, reply_with: str) -> PendingAsk:
        """The visible ask, claimed or not, else ``AskNotFound`` (A2A-ASK-2)."""
        ...

    def claim_pending_ask(self, ctx: Context, reply_with: str) -> PendingAsk:
        """Atomic, permanent claim (A2A-ASK-3..7)."""
        ...

    def list_expired_asks(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        """Visible unclaimed asks with ``deadline <= now`` (A2A-ASK-8..11)."""
        ...

    def list_expired_asks_across_scopes(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        """The same over every scope of ``ctx.partition`` (A2A-ASK-12)."""
        ...

    def list_pending_asks_by_conversation(self, ctx: Context, conversation_id: str) -> list[PendingAsk]:
        """Visible unclaimed asks of the conversation (A2A-ASK-13)."""
        ...


def check_list_args(limit: object, offset: object = 0, exact: object = False) -> tuple[int, int, bool]:
    """``limit``/``offset`` (RSC-GEN-9) and ``exact`` (a bool)."""
    limit, offset = check_page(limit, offset)
    return limit, offset, check_bool(exact, "exact")


__all__ += ["check_list_args", "format_text"]


# -- exactly-once records (a2a.md, "Exactly-once records") ------------------------------------------
#
# The classes a2a_resolutions, a2a_replies and a2a_held write several a2a
# rows in one atomic step.  Their methods are written once
# (``cortex_spec.a2a_resolutions`` …) over two things a backend gives: the
# kinds storage of the step (``Storage.atomic``: the records they keep are
# stored kinds) and :class:`A2ARows`, the backend's access to the rows of
# class a2a (and of runs and suspensions) inside that same step.


def e_visible(ctx: Context, row: Any) -> bool:
    """*E-visible*: the row's partition is ``ctx.partition`` and its scope
    equals ``ctx.scope`` (exact, not the prefix rule)."""
    return bool(row.partition == ctx.partition and row.scope == ctx.scope)


def canonical_json(value: Any) -> str:
    """The canonical encoding of a value made of lists, strings, ints, bools
    and None (the caller turns instants into ms and scopes into their text)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def digest(value: Any) -> str:
    """The lowercase hex SHA-256 of the canonical encoding's UTF-8 bytes."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def instant_ms(value: datetime | None) -> int | None:
    """An instant as its canonical encoding holds it (ms since the epoch)."""
    return None if value is None else to_millis(value)


#: A2A-RES-12, A2A-DEFER-2, A2A-AREPLY-2: the most rows one page returns.
MAX_PAGE = 256


def check_page_size(limit: object) -> int:
    """A page bound: an ``int`` (not a ``bool``) from 1 to :data:`MAX_PAGE`."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidArgument(f"limit must be an int, got {type(limit).__name__}")
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"limit must be between 1 and {MAX_PAGE}, got {limit}")
    return limit


class A2ARows(Protocol):
    """A backend's rows of classes a2a, runs and suspensions inside one
    atomic step of the exactly-once methods (``store._a2a_rows(storage)``).

    Keys are looked up over every scope and partition: the methods decide
    visibility.  Inside a step, every read keeps what it read from changing
    until the step ends (``SELECT … FOR UPDATE`` on PostgreSQL, SQLite's
    write lock, a write of the document in a MongoDB transaction, the
    reference's lock), so the step's writes are decided on what it read.
    Outside a step each call is one atomic read."""

    def ask(self, reply_with: str) -> PendingAsk | None: ...

    def put_ask(self, ask: PendingAsk) -> None:
        """Write the ask's ``claimed_at`` and ``updated_at``."""

    def message(self, message_id: str) -> Envelope | None: ...

    def conversation(self, conversation_id: str) -> Conversation | None: ...

    def admit(self, conversation: Conversation, envelope: Envelope) -> None:
        """Write an admission of :func:`admit`: the conversation's
        ``hops_used``, ``participants`` and ``updated_at``, and the envelope
        (a taken id → ``AlreadyExists``)."""

    def delivery(self, delivery_id: str) -> Delivery | None: ...

    def put_delivery(self, delivery: Delivery) -> None:
        """Write a finish: ``state``, ``error``, ``delivered_at``, ``updated_at``."""

    def insert_delivery(self, delivery: Delivery) -> None:
        """Store a new delivery (a taken id → ``AlreadyExists``)."""

    def run(self, run_id: str) -> Any:
        """The run (a :class:`cortex_spec.runs.Run`) or None."""

    def suspension(self, run_id: str) -> Any:
        """The run's suspension (a :class:`cortex_spec.suspensions.Suspension`) or None."""

    def deferred(self, scope: Scope, partition: str, after: str | None, limit: int) -> list[str]:
        """A2A-DEFER-1/2: ids of the bound, delivering deliveries of exactly
        ``scope`` and ``partition``, after ``after``, in id order."""

    def agent_reply_runs(self, scope: Scope, partition: str, after: str | None, limit: int) -> list[str]:
        """A2A-AREPLY-1/2, as one snapshot."""


def check_address(value: object, field: str, *, need_agent: bool = False) -> Address:
    """A well-formed :class:`Address` of short strings (A2A-ADDR-5), or ``InvalidArgument``."""
    return _check_address(value, field, need_agent=need_agent)


def check_performative(value: object) -> Performative:
    """One of the 22 performatives (A2A-PERF-1), or ``InvalidPerformative``."""
    return _performative(value)


__all__ += ["check_address", "check_performative", "e_visible", "canonical_json", "digest", "instant_ms", "MAX_PAGE", "check_page_size", "A2ARows"]


# -- what the class shows (cortex_spec.views) ------------------------------------------------


def view(store: Any, contexts: Sequence[Context], refs: Refs) -> dict[str, Any]:
    """Each caller's messages, conversations, expired asks and inbox in its
    partition, and the deliveries, asks and conversations named in ``refs``."""
    out: dict[str, Any] = {}
    for c in contexts:
        key = f"{c.scope.canonical()}#{c.partition}"
        out[f"messages@{key}"] = store.list_messages(c)
        out[f"conversations@{key}"] = store.list_conversations(c)
        out[f"expired_asks@{key}"] = store.list_expired_asks(c, FAR_FUTURE)
        out[f"inbox@{key}"] = store.list_inbox(c, "worker")
        for did in refs.get("delivery_ids", ()):
            out[f"delivery[{did}]@{key}"] = attempt(store.get_delivery, c, did)
        for rw in refs.get("reply_withs", ()):
            out[f"ask[{rw}]@{key}"] = attempt(store.get_pending_ask, c, rw)
        for cid in refs.get("conversation_ids", ()):
            out[f"conversation[{cid}]@{key}"] = attempt(store.get_conversation, c, cid)
            out[f"pending_asks[{cid}]@{key}"] = store.list_pending_asks_by_conversation(c, cid)
    return out


def view_across(store: Any, contexts: Sequence[Context]) -> dict[str, Any]:
    """The scope-ignoring lists, for every partition of ``contexts`` and the global one."""
    out: dict[str, Any] = {}
    for partition in sorted({c.partition for c in contexts} | {""}):
        anywhere = Context(Scope(), partition)
        out[f"queued@*#{partition}"] = store.list_queued_deliveries(anywhere)
        out[f"expired_asks@*#{partition}"] = store.list_expired_asks_across_scopes(anywhere, FAR_FUTURE)
    return out


# -- builders for tests ------------------------------------------------------------------------
# A valid conversation, envelope, delivery or pending ask, fresh ids and the fields given; cortex_spec.testing re-exports them.


def make_conversation(**fields: Any) -> Conversation:
    """An open conversation between ``planner`` and ``worker`` (8 hops)."""
    fields.setdefault("id", ids.new_id(ids.CONVERSATION))
    fields.setdefault("protocol", "fipa-request")
    fields.setdefault("initiator", Address("planner"))
    fields.setdefault("participants", (Address("planner"),))
    return Conversation(**fields)


def make_envelope(conversation_id: str, **fields: Any) -> Envelope:
    """A request from ``planner`` to ``worker`` on ``conversation_id``."""
    fields.setdefault("id", ids.new_id(ids.MESSAGE))
    fields.setdefault("performative", Performative.REQUEST)
    fields.setdefault("sender", Address("planner"))
    fields.setdefault("receivers", (Address("worker"),))
    fields.setdefault("content", "summarise the report")
    fields.setdefault("metadata", {"priority": 1, "ratio": 0.5, "urgent": True})
    return Envelope(conversation_id=conversation_id, **fields)


def make_delivery(message_id: str | None = None, **fields: Any) -> Delivery:
    """A delivery of ``message_id`` (a fresh id by default) to local ``worker``."""
    fields.setdefault("id", ids.new_id(ids.DELIVERY))
    fields.setdefault("receiver", Address("worker"))
    return Delivery(message_id=message_id or ids.new_id(ids.MESSAGE), **fields)


def make_ask(conversation_id: str | None = None, **fields: Any) -> PendingAsk:
    """A pending ask with a fresh ``reply_with`` token and no deadline."""
    fields.setdefault("reply_with", "rw-" + ids.new_id(ids.MESSAGE)[4:])
    fields.setdefault("message_id", ids.new_id(ids.MESSAGE))
    fields.setdefault("asker_run_id", ids.new_id(ids.RUN))
    fields.setdefault("asker_agent", "planner")
    fields.setdefault("tool_call_id", "call_1")
    fields.setdefault("expected", Address("worker"))
    return PendingAsk(conversation_id=conversation_id or ids.new_id(ids.CONVERSATION), **fields)


#: The builders of this module (:mod:`cortex_spec.testing` re-exports them).
BUILDERS: tuple[str, ...] = ("make_conversation", "make_envelope", "make_delivery", "make_ask")
__all__ += BUILDERS
