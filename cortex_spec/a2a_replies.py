"""Conformance class ``a2a_replies``: reserved replies and deferred
recipients (spec: a2a_replies.md).

The seed's ``ReservedReplyStore``: one commit finishes a bound delivery,
records its reply envelope, charges the conversation a hop and queues the
reply's delivery, and keeps a receipt, so that a retry after a lost
acknowledgment returns the receipt instead of charging and queueing again.
And its ``RecipientDiscoveryStore``: the bound deliveries whose reply is
still owed.

Receipts are an internal stored kind (:data:`RECEIPTS`, keyed by the
delivery id).  The methods are written once (:class:`ReplyMethods`) over a
backend's kinds storage and its :class:`~cortex_spec.a2a.A2ARows`; the
commit is one :meth:`~cortex_spec.kinds.Storage.atomic` step.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from . import ids
from .a2a import (
    ConversationStatus,
    Delivery,
    DeliveryState,
    Envelope,
    Performative,
    admit,
    check_claim_token,
    check_page_size,
    digest,
    e_visible,
    validate_new_envelope,
    visible,
)
from .context import Context, require_scope
from .entities import entity, replace
from .errors import (
    AlreadyExists,
    ConversationClosed,
    ConversationNotFound,
    DeliveryClaimLost,
    DeliveryNotFound,
    HopCeilingExceeded,
    InvalidArgument,
    MessageNotFound,
    ReplyCommitConflict,
    ReplyCommitNotFound,
)
from .kinds import Id, Query, Short, Table, check_protocol, created, field, scope_field
from .scope import Scope
from .validation import check_bool, check_str

__all__ = [
    "ReplyCommit",
    "ReservedReply",
    "StoredReceipt",
    "RECEIPTS",
    "TABLES",
    "SCHEMA_VERSION",
    "ReplyMethods",
    "ReservedReplyStore",
    "request_digest",
]

#: The ``schema_version`` of every receipt this contract describes.
SCHEMA_VERSION = 1


@entity
class ReplyCommit:
    """The request of ``commit_reserved_reply``: the bound run, the ids the
    caller chose for the reply envelope and its delivery, the run's result."""

    run_id: str
    reply_message_id: str
    reply_delivery_id: str
    content: str = ""
    failed: bool = False


@entity
class ReservedReply:
    """The receipt of a commit (the seed's ``ReservedReply``); ``fresh`` is
    true only on the committing call's acknowledgment."""

    schema_version: int
    scope: Scope
    orchestration_id: str
    delivery_id: str
    run_id: str
    reply_message_id: str
    reply_delivery_id: str
    request_digest: str
    committed_at: datetime
    fresh: bool = False


@entity
class StoredReceipt:
    """A receipt as stored, keyed by the delivery id; ``created_at`` is its
    ``committed_at``."""

    id: str = field(Id(ids.DELIVERY), default="", role="key")
    scope: Scope = scope_field()
    partition: str = field(Short(), default="")
    run_id: str = field(Id(ids.RUN), default="")
    reply_message_id: str = field(Id(ids.MESSAGE), default="")
    reply_delivery_id: str = field(Id(ids.DELIVERY), default="")
    request_digest: str = field(Short(), default="")
    created_at: datetime | None = created()


RECEIPTS = Table(StoredReceipt, "a2a_reply_receipts", "a2a_replies", ReplyCommitNotFound,
                 "reply receipt", "reply receipts", ops=(), internal=True)

#: Every stored kind of the class.
TABLES = (RECEIPTS,)


def _check_commit(commit: object) -> ReplyCommit:
    if not isinstance(commit, ReplyCommit):
        raise InvalidArgument(f"commit must be a ReplyCommit, got {type(commit).__name__}")
    return ReplyCommit(
        run_id=ids.check_id(commit.run_id, ids.RUN, "commit.run_id"),
        reply_message_id=ids.check_id(commit.reply_message_id, ids.MESSAGE, "commit.reply_message_id"),
        reply_delivery_id=ids.check_id(commit.reply_delivery_id, ids.DELIVERY, "commit.reply_delivery_id"),
        content=check_str(commit.content, "commit.content"),
        failed=check_bool(commit.failed, "commit.failed"),
    )


def request_digest(ctx: Context, delivery_id: str, commit: ReplyCommit) -> str:
    """A2A-REPLY-2 (the claim token is not part of it)."""
    return digest(["cortex.reserved-reply/1", ctx.scope.canonical(), ctx.partition, delivery_id,
                   commit.run_id, commit.reply_message_id, commit.reply_delivery_id, commit.content,
                   commit.failed])


def receipt_of(row: StoredReceipt, fresh: bool = False) -> ReservedReply:
    assert row.created_at is not None
    return ReservedReply(
        schema_version=SCHEMA_VERSION, scope=row.scope, orchestration_id=row.partition, delivery_id=row.id,
        run_id=row.run_id, reply_message_id=row.reply_message_id, reply_delivery_id=row.reply_delivery_id,
        request_digest=row.request_digest, committed_at=row.created_at, fresh=fresh,
    )


def reply_envelope(ctx: Context, delivery: Delivery, source: Envelope, commit: ReplyCommit,
                   now: datetime) -> Envelope:
    """A2A-REPLY-5 (a): the reply envelope, validated as ``record_message``
    validates one (before admission assigns its hop)."""
    performative = Performative.FAILURE if commit.failed else Performative.INFORM
    return validate_new_envelope(Envelope(
        id=commit.reply_message_id, conversation_id=source.conversation_id, performative=performative,
        sender=delivery.receiver, receivers=(source.sender,), content=commit.content,
        in_reply_to=source.reply_with, origin_run_id=delivery.run_id,
    ), ctx, now)


# -- the methods, once for every backend -------------------------------------------------------


class ReplyMethods:
    """The class's methods on ``self._crud`` and ``self._a2a_rows(storage)``."""

    _crud: Any
    #: ``_a2a_rows(storage=None)``: the backend's :class:`~cortex_spec.a2a.A2ARows`
    #: in the atomic step of ``storage`` (None: outside any step)
    _a2a_rows: Any

    def commit_reserved_reply(self, ctx: Context, delivery_id: str, claim_token: str,
                              commit: ReplyCommit) -> ReservedReply:
        """A2A-REPLY-3..7: finish, record, charge, queue and keep a receipt,
        in one step; an equal retry returns the receipt."""
        require_scope(ctx)
        did = ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        token = check_claim_token(claim_token)
        request = _check_commit(commit)
        wanted = request_digest(ctx, did, request)
        now = self._crud.now()

        def step(storage: Any) -> ReservedReply:
            rows = self._a2a_rows(storage)
            d = rows.delivery(did)
            if d is None or not e_visible(ctx, d):
                raise DeliveryNotFound(f"delivery {did} not found")
            if d.claim_token != token:
                raise DeliveryClaimLost(f"the claim on delivery {did} is lost")
            kept = storage.select(RECEIPTS, Query(None, where=(("id", did),)))
            if kept:
                if kept[0].request_digest == wanted:
                    return receipt_of(kept[0])  # A2A-REPLY-3: an equal retry
                raise ReplyCommitConflict(f"another reply was committed for delivery {did}")
            if d.state != DeliveryState.DELIVERING:
                raise DeliveryClaimLost(f"the claim on delivery {did} is lost")
            if d.run_id != request.run_id:
                raise ReplyCommitConflict(f"delivery {did} is not bound to run {request.run_id}")
            source = rows.message(d.message_id)
            if source is None or not visible(ctx, source):
                raise MessageNotFound(f"message {d.message_id} not found")
            conversation = rows.conversation(source.conversation_id)
            if conversation is None or not visible(ctx, conversation):
                raise ConversationNotFound(f"conversation {source.conversation_id} not found")
            if conversation.status != ConversationStatus.OPEN:
                raise ConversationClosed(f"conversation {conversation.id} is not open")
            if conversation.hops_used + 1 > conversation.hop_ceiling:
                raise HopCeilingExceeded(f"conversation {conversation.id} used its {conversation.hop_ceiling} hops")
            if rows.message(request.reply_message_id) is not None:
                raise AlreadyExists(f"message {request.reply_message_id} already exists")
            charged, envelope = admit(conversation, reply_envelope(ctx, d, source, request, now), now)
            rows.admit(charged, envelope)
            delivered = not request.failed
            rows.put_delivery(replace(
                d, state=DeliveryState.DELIVERED if delivered else DeliveryState.FAILED, error="",
                delivered_at=now if delivered else None, updated_at=now))
            rows.insert_delivery(Delivery(
                id=request.reply_delivery_id, message_id=request.reply_message_id, receiver=source.sender,
                state=DeliveryState.QUEUED, scope=ctx.scope, partition=ctx.partition, created_at=now,
                updated_at=now))
            row = StoredReceipt(id=did, scope=ctx.scope, partition=ctx.partition, run_id=request.run_id,
                                reply_message_id=request.reply_message_id,
                                reply_delivery_id=request.reply_delivery_id, request_digest=wanted, created_at=now)
            storage.insert(RECEIPTS, row)
            return receipt_of(row, fresh=True)

        return self._crud.storage.atomic(step)  # type: ignore[no-any-return]

    def get_reserved_reply(self, ctx: Context, delivery_id: str) -> ReservedReply:
        """A2A-REPLY-8."""
        scope = require_scope(ctx)
        did = ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        rows = self._crud.storage.select(RECEIPTS, Query(scope, exact=True, where=(
            ("id", did), ("partition", ctx.partition))))
        if not rows:
            raise ReplyCommitNotFound(f"no reply was committed for delivery {did}")
        return receipt_of(rows[0])

    def list_deferred_recipients(self, ctx: Context, after: str | None, limit: int) -> list[str]:
        """A2A-DEFER-1..4: ids of the bound, delivering E-visible deliveries."""
        scope = require_scope(ctx)
        start = ids.check_optional_id(after, ids.DELIVERY, "after")
        limit = check_page_size(limit)
        return self._a2a_rows().deferred(scope, ctx.partition, start, limit)  # type: ignore[no-any-return]


@runtime_checkable
class ReservedReplyStore(Protocol):
    """What a store of class ``a2a_replies`` provides (a2a_replies.md)."""

    def commit_reserved_reply(self, ctx: Context, delivery_id: str, claim_token: str,
                              commit: ReplyCommit) -> ReservedReply: ...
    def get_reserved_reply(self, ctx: Context, delivery_id: str) -> ReservedReply: ...
    def list_deferred_recipients(self, ctx: Context, after: str | None, limit: int) -> list[str]: ...


check_protocol(ReservedReplyStore, (), ReplyMethods)

__all__ += ["receipt_of", "reply_envelope"]
