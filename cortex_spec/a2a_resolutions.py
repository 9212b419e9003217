"""Conformance class ``a2a_resolutions``: ask resolutions (spec: a2a_resolutions.md).

The seed's ``AskResolutionStore``: a seal claims a pending ask and keeps the
exact outcome it was claimed for, in one commit; an equal retry returns the
retained resolution, a competing outcome is ``AskAlreadyClaimed``.

Resolutions are an internal stored kind (:data:`RESOLUTIONS`, keyed by the
ask's ``reply_with``).  The methods are written once
(:class:`ResolutionMethods`) over a backend's kinds storage and its
:class:`~cortex_spec.a2a.A2ARows`; the seal is one
:meth:`~cortex_spec.kinds.Storage.atomic` step: a transaction on SQL and
MongoDB, one hold of the lock in the reference.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import attrs

from . import ids
from .a2a import (
    Address,
    PendingAsk,
    Performative,
    check_address,
    check_page_size,
    check_performative,
    check_reply_with,
    digest,
    e_visible,
    instant_ms,
)
from .context import Context, require_scope
from .entities import entity, replace
from .errors import AskAlreadyClaimed, AskNotFound, AskResolutionConflict, AskResolutionNotFound, InvalidArgument
from .kinds import Id, Instant, Optional, Query, Short, Table, Text, check_protocol, created, field, scope_field
from .scope import Scope
from .validation import check_bool, check_entity_size, check_optional_instant, check_short_str, check_str

__all__ = [
    "AskReplyItem",
    "AskReply",
    "AskResolution",
    "AskResolutionPage",
    "StoredResolution",
    "RESOLUTIONS",
    "TABLES",
    "SCHEMA_VERSION",
    "CURSOR_PREFIX",
    "ResolutionMethods",
    "AskResolutionStore",
    "reply_payload",
    "ask_identity",
    "binding_digest",
]

#: The ``schema_version`` of every resolution this contract describes.
SCHEMA_VERSION = 1
#: A2A-RES-13: how a store makes a cursor (``"v1." + reply_with``).
CURSOR_PREFIX = "v1."


@attrs.frozen
class AskReplyItem:
    """One peer's answer (the seed's ``AskReplyItem``); positional, like
    :class:`~cortex_spec.a2a.Address`."""

    performative: Performative | str
    sender: str
    content: str = ""
    conversation_id: str = ""


@attrs.frozen
class AskReply:
    """What the asking run is resumed with: the answers, and whether every
    peer answered (``AskReply((), False)``: the deadline's answer)."""

    replies: tuple[AskReplyItem, ...] = ()
    complete: bool = False


@entity
class AskResolution:
    """A sealed ask and the exact outcome it was sealed with (A2A-RES-6);
    ``fresh`` is true only on the acknowledgment of the sealing call."""

    schema_version: int
    resolution_id: str
    ask: PendingAsk
    payload: str
    binding_digest: str
    outcome_digest: str
    sealed_at: datetime
    fresh: bool = False


@entity
class AskResolutionPage:
    """A page of resolutions (A2A-RES-12/13); ``next`` is ``""`` at the end."""

    resolutions: tuple[AskResolution, ...] = ()
    next: str = ""


@entity
class StoredResolution:
    """A resolution as stored: the sealed ask's identity, the payload and the
    digests; its key is the ask's ``reply_with``, ``created_at`` its
    ``sealed_at`` (and the claim's ``claimed_at``)."""

    id: str = field(Short(nonempty=True), default="", role="key")
    scope: Scope = scope_field()
    partition: str = field(Short(), default="")
    conversation_id: str = field(Id(ids.CONVERSATION), default="")
    message_id: str = field(Id(ids.MESSAGE), default="")
    asker_run_id: str = field(Id(ids.RUN), default="")
    asker_agent: str = field(Short(), default="")
    tool_call_id: str = field(Short(), default="")
    expected_agent: str = field(Short(), default="")
    expected_node: str = field(Short(), default="")
    deadline: datetime | None = field(Optional(Instant()), default=None)
    ask_created_at: datetime | None = field(Optional(Instant()), default=None)
    payload: str = field(Text(), default="")
    binding_digest: str = field(Short(), default="")
    outcome_digest: str = field(Short(), default="")
    created_at: datetime | None = created()


RESOLUTIONS = Table(StoredResolution, "a2a_resolutions", "a2a_resolutions", AskResolutionNotFound,
                    "ask resolution", "ask resolutions", ops=(), internal=True)

#: Every stored kind of the class.
TABLES = (RESOLUTIONS,)


# -- the encodings (A2A-RES-3/4) ---------------------------------------------------------------


def reply_payload(reply: object) -> str:
    """A2A-RES-3: the canonical JSON of a valid reply (else ``InvalidArgument``
    / ``InvalidPerformative``)."""
    from .a2a import canonical_json

    if not isinstance(reply, AskReply):
        raise InvalidArgument(f"reply must be an AskReply, got {type(reply).__name__}")
    items = reply.replies
    if not isinstance(items, (tuple, list)):
        raise InvalidArgument(f"reply.replies must be a tuple, got {type(items).__name__}")
    out = []
    for i, item in enumerate(items):
        where = f"reply.replies[{i}]"
        if not isinstance(item, AskReplyItem):
            raise InvalidArgument(f"{where} must be an AskReplyItem, got {type(item).__name__}")
        out.append({
            "performative": check_performative(item.performative).value,
            "sender": check_short_str(item.sender, f"{where}.sender"),
            "content": check_str(item.content, f"{where}.content"),
            "conversation_id": ids.check_id(item.conversation_id, ids.CONVERSATION, f"{where}.conversation_id"),
        })
    return canonical_json({"replies": out, "complete": check_bool(reply.complete, "reply.complete")})


def ask_identity(ask: object) -> PendingAsk:
    """A2A-RES-4/5: the identity fields of a seal's ``ask`` argument, checked
    (the rest of the argument is ignored)."""
    if not isinstance(ask, PendingAsk):
        raise InvalidArgument(f"ask must be a PendingAsk, got {type(ask).__name__}")
    if not isinstance(ask.scope, Scope):
        raise InvalidArgument(f"ask.scope must be a Scope, got {type(ask.scope).__name__}")
    return PendingAsk(
        reply_with=check_reply_with(ask.reply_with, "ask.reply_with"),
        conversation_id=ids.check_id(ask.conversation_id, ids.CONVERSATION, "ask.conversation_id"),
        message_id=ids.check_id(ask.message_id, ids.MESSAGE, "ask.message_id"),
        asker_run_id=ids.check_id(ask.asker_run_id, ids.RUN, "ask.asker_run_id"),
        asker_agent=check_short_str(ask.asker_agent, "ask.asker_agent"),
        tool_call_id=check_short_str(ask.tool_call_id, "ask.tool_call_id"),
        expected=check_address(ask.expected, "ask.expected"),
        deadline=check_optional_instant(ask.deadline, "ask.deadline"),
        scope=ask.scope,
        partition=check_short_str(ask.partition, "ask.partition"),
    )


def binding_digest(ask: PendingAsk) -> str:
    """A2A-RES-4: the digest of an ask's identity."""
    return digest(["cortex.ask-binding/1", ask.scope.canonical(), ask.partition, ask.reply_with,
                   ask.conversation_id, ask.message_id, ask.asker_run_id, ask.asker_agent, ask.tool_call_id,
                   [ask.expected.agent, ask.expected.node], instant_ms(ask.deadline)])


def resolution_id(binding: str, outcome: str) -> str:
    """A2A-RES-4: the content address of a resolution."""
    return digest(["cortex.ask-resolution/1", binding, outcome])


def _payload_digest(payload: str) -> str:
    import hashlib

    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _stored(ask: PendingAsk, payload: str, now: datetime) -> StoredResolution:
    row = StoredResolution(
        id=ask.reply_with, scope=ask.scope, partition=ask.partition, conversation_id=ask.conversation_id,
        message_id=ask.message_id, asker_run_id=ask.asker_run_id, asker_agent=ask.asker_agent,
        tool_call_id=ask.tool_call_id, expected_agent=ask.expected.agent, expected_node=ask.expected.node,
        deadline=ask.deadline, ask_created_at=ask.created_at, payload=payload,
        binding_digest=binding_digest(ask), outcome_digest=_payload_digest(payload), created_at=now,
    )
    check_entity_size(row, "ask resolution")  # RSC-GEN-8: the payload is the caller's
    return row


def resolution_of(row: StoredResolution, fresh: bool = False) -> AskResolution:
    """The resolution a stored row holds (its ask as the seal left it)."""
    sealed = row.created_at
    assert sealed is not None
    ask = PendingAsk(
        reply_with=row.id, conversation_id=row.conversation_id, message_id=row.message_id,
        asker_run_id=row.asker_run_id, asker_agent=row.asker_agent, tool_call_id=row.tool_call_id,
        expected=Address(row.expected_agent, row.expected_node), deadline=row.deadline, claimed_at=sealed,
        scope=row.scope, partition=row.partition, created_at=row.ask_created_at, updated_at=sealed,
    )
    return AskResolution(
        schema_version=SCHEMA_VERSION, resolution_id=resolution_id(row.binding_digest, row.outcome_digest),
        ask=ask, payload=row.payload, binding_digest=row.binding_digest, outcome_digest=row.outcome_digest,
        sealed_at=sealed, fresh=fresh,
    )


def _check_cursor(cursor: object) -> str | None:
    """A2A-RES-13: ``""`` (the start), else a cursor this contract makes."""
    text = check_str(cursor, "cursor")
    if text == "":
        return None
    if not text.startswith(CURSOR_PREFIX):
        raise InvalidArgument("cursor was not made by this store")
    return check_reply_with(text[len(CURSOR_PREFIX):], "cursor")


def _where(ctx: Context) -> tuple[tuple[str, Any], ...]:
    return (("partition", ctx.partition),)


# -- the methods, once for every backend -------------------------------------------------------


class ResolutionMethods:
    """The class's methods on ``self._crud`` (kinds storage) and
    ``self._a2a_rows(storage)`` (the backend's a2a rows in that step)."""

    _crud: Any
    #: ``_a2a_rows(storage=None)``: the backend's :class:`~cortex_spec.a2a.A2ARows`
    #: in the atomic step of ``storage`` (None: outside any step)
    _a2a_rows: Any

    def read_pending_ask(self, ctx: Context, reply_with: str) -> PendingAsk:
        """A2A-RES-2: the E-visible ask, claimed or not."""
        require_scope(ctx)
        rw = check_reply_with(reply_with)
        ask = self._a2a_rows().ask(rw)
        if ask is None or not e_visible(ctx, ask):
            raise AskNotFound(f"pending ask {rw} not found")
        return ask  # type: ignore[no-any-return]

    def seal_ask_resolution(self, ctx: Context, ask: PendingAsk, reply: AskReply) -> AskResolution:
        """A2A-RES-5..10: claim the ask and keep its outcome, in one step."""
        require_scope(ctx)
        identity = ask_identity(ask)
        payload = reply_payload(reply)
        now = self._crud.now()
        _stored(identity, payload, now)  # the size limit, before storage (InvalidArgument first)
        wanted = binding_digest(identity)

        def step(storage: Any) -> AskResolution:
            rows = self._a2a_rows(storage)
            stored = rows.ask(identity.reply_with)
            if stored is None or not e_visible(ctx, stored):
                raise AskNotFound(f"pending ask {identity.reply_with} not found")
            if binding_digest(stored) != wanted:
                raise AskResolutionConflict(f"the ask {identity.reply_with} is not the ask the seal names")
            kept = storage.select(RESOLUTIONS, Query(None, where=(("id", stored.reply_with),)))
            if kept:
                if kept[0].outcome_digest == _payload_digest(payload):
                    return resolution_of(kept[0])  # A2A-RES-7: an equal retry
                raise AskAlreadyClaimed(f"the ask {stored.reply_with} was sealed with another outcome")
            if stored.claimed_at is not None:  # A2A-RES-8: a legacy claim is never adopted
                raise AskAlreadyClaimed(f"the ask {stored.reply_with} is already claimed")
            rows.put_ask(replace(stored, claimed_at=now, updated_at=now))
            row = _stored(stored, payload, now)
            storage.insert(RESOLUTIONS, row)
            return resolution_of(row, fresh=True)

        return self._crud.storage.atomic(step)  # type: ignore[no-any-return]

    def get_ask_resolution(self, ctx: Context, reply_with: str) -> AskResolution:
        """A2A-RES-11."""
        scope = require_scope(ctx)
        rw = check_reply_with(reply_with)
        rows = self._crud.storage.select(RESOLUTIONS, Query(scope, exact=True, where=(("id", rw), *_where(ctx))))
        if not rows:
            raise AskResolutionNotFound(f"no resolution for the ask {rw}")
        return resolution_of(rows[0])

    def list_ask_resolutions(self, ctx: Context, cursor: str, limit: int) -> AskResolutionPage:
        """A2A-RES-12/13: one page in ``reply_with`` order."""
        scope = require_scope(ctx)
        after = _check_cursor(cursor)
        limit = check_page_size(limit)
        query = Query(scope, exact=True, where=_where(ctx), order=(("id", False),), limit=limit + 1,
                      after=None if after is None else ("id", after))
        rows = self._crud.storage.select(RESOLUTIONS, query)
        page = tuple(resolution_of(r) for r in rows[:limit])
        more = len(rows) > limit
        return AskResolutionPage(resolutions=page, next=CURSOR_PREFIX + page[-1].ask.reply_with if more else "")


@runtime_checkable
class AskResolutionStore(Protocol):
    """What a store of class ``a2a_resolutions`` provides (a2a_resolutions.md)."""

    def read_pending_ask(self, ctx: Context, reply_with: str) -> PendingAsk: ...
    def seal_ask_resolution(self, ctx: Context, ask: PendingAsk, reply: AskReply) -> AskResolution: ...
    def get_ask_resolution(self, ctx: Context, reply_with: str) -> AskResolution: ...
    def list_ask_resolutions(self, ctx: Context, cursor: str, limit: int) -> AskResolutionPage: ...


check_protocol(AskResolutionStore, (), ResolutionMethods)
