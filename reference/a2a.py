"""Reference semantics of class ``a2a`` (spec: a2a.md).

Every method is one step under the store's lock, so every claim and the hop
admission are atomic by construction.  ``reclaim_stale_deliveries`` is one
step too — a legal linearization of the per-row moves A2A-RCL-8 allows — and
is written as *select the candidates, then move each one if its re-check
passes* so that the linearizability model can replay the same two halves as
separate steps (:meth:`A2AMixin._select_stale` and :meth:`A2AMixin._move_stale`).

Claim tokens come from :attr:`A2AMixin.token_source` (random by default).
The linearizability model replaces it to *adopt* the token a backend issued;
every token the store takes is checked to be fresh for its delivery
(A2A-DLV-6), so a backend that re-issues an old token is caught even then.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any, Callable, TypeVar

from cortex_spec import ids
from cortex_spec.a2a import (
    Address,
    Conversation,
    ConversationStatus,
    Delivery,
    DeliveryState,
    Envelope,
    PendingAsk,
    admit,
    ask_expired,
    check_claim_token,
    check_delivery_error,
    check_finish_state,
    check_list_args,
    check_reply_with,
    check_status_filter,
    is_stale,
    peer_order_key,
    same_envelope,
    updated_conversation,
    validate_conversation_update,
    validate_new_conversation,
    validate_new_delivery,
    validate_new_envelope,
    validate_new_pending_ask,
    visible,
)
from cortex_spec.context import Context, require_context, require_scope
from cortex_spec.entities import detach, replace
from cortex_spec.errors import (
    AlreadyExists,
    AskAlreadyClaimed,
    AskNotFound,
    ConversationClosed,
    ConversationNotFound,
    CortexError,
    DeliveryAlreadyBound,
    DeliveryAlreadyClaimed,
    DeliveryClaimLost,
    DeliveryNotFound,
    HopCeilingExceeded,
    InvalidArgument,
    InvalidState,
    MessageNotFound,
    StoreError,
)
from cortex_spec.scope import Scope
from cortex_spec.validation import (
    check_bool,
    check_instant,
    check_page,
    check_short_str,
    page,
)

from .store import MemoryMedium, StoreBase

__all__ = ["A2AMixin", "MemoryA2ARows", "random_token"]


def random_token() -> str:
    """A fresh, opaque claim token."""
    return secrets.token_hex(16)


T = TypeVar("T")


def _page(rows: list[T], limit: int, offset: int = 0) -> list[T]:
    return [detach(r) for r in page(rows, limit, offset)]


def _detached(row: T | None) -> T | None:
    return None if row is None else detach(row)


class MemoryA2ARows:
    """:class:`cortex_spec.a2a.A2ARows` on the reference medium: every call
    under the store's (re-entrant) lock, which an atomic step holds from its
    start to its end; a step that raises puts every table back."""

    def __init__(self, store: "A2AMixin") -> None:
        self.store = store

    def ask(self, reply_with: str) -> PendingAsk | None:
        with self.store._tx() as t:
            return _detached(t.a2a_asks.get(reply_with))

    def put_ask(self, ask: PendingAsk) -> None:
        with self.store._tx() as t:
            stored = t.a2a_asks[ask.reply_with]
            t.a2a_asks[ask.reply_with] = replace(stored, claimed_at=ask.claimed_at, updated_at=ask.updated_at)

    def message(self, message_id: str) -> Envelope | None:
        with self.store._tx() as t:
            return _detached(t.a2a_messages.get(message_id))

    def conversation(self, conversation_id: str) -> Conversation | None:
        with self.store._tx() as t:
            return _detached(t.a2a_conversations.get(conversation_id))

    def admit(self, conversation: Conversation, envelope: Envelope) -> None:
        with self.store._tx() as t:
            if envelope.id in t.a2a_messages:
                raise AlreadyExists(f"message {envelope.id} already exists")
            stored = t.a2a_conversations[conversation.id]
            t.a2a_conversations[conversation.id] = replace(
                stored, hops_used=conversation.hops_used, participants=conversation.participants,
                updated_at=conversation.updated_at)
            t.a2a_messages[envelope.id] = detach(envelope)

    def delivery(self, delivery_id: str) -> Delivery | None:
        with self.store._tx() as t:
            return _detached(t.a2a_deliveries.get(delivery_id))

    def put_delivery(self, delivery: Delivery) -> None:
        with self.store._tx() as t:
            stored = t.a2a_deliveries[delivery.id]
            t.a2a_deliveries[delivery.id] = replace(
                stored, state=delivery.state, error=delivery.error, delivered_at=delivery.delivered_at,
                updated_at=delivery.updated_at)

    def insert_delivery(self, delivery: Delivery) -> None:
        with self.store._tx() as t:
            if delivery.id in t.a2a_deliveries:
                raise AlreadyExists(f"delivery {delivery.id} already exists")
            t.a2a_deliveries[delivery.id] = delivery

    def run(self, run_id: str) -> Any:
        with self.store._tx() as t:
            return _detached(t.runs.get(run_id))

    def suspension(self, run_id: str) -> Any:
        with self.store._tx() as t:
            return _detached(t.suspensions.get(run_id))

    def deferred(self, scope: Scope, partition: str, after: str | None, limit: int) -> list[str]:
        """A2A-DEFER-1/2."""
        with self.store._tx() as t:
            found = sorted(
                d.id for d in t.a2a_deliveries.values()
                if d.partition == partition and d.scope == scope and d.state == DeliveryState.DELIVERING
                and d.run_id is not None and (after is None or d.id > after)
            )
        return found[:limit]

    def agent_reply_runs(self, scope: Scope, partition: str, after: str | None, limit: int) -> list[str]:
        """A2A-AREPLY-1/2: saved pauses, and running askers of a resolved ask
        whose pause was removed — read under one hold of the lock."""
        from cortex_spec.a2a_resolutions import RESOLUTIONS
        from cortex_spec.runs import Run, RunState
        from cortex_spec.suspensions import SuspensionReason

        from .kinds import medium_table_name

        with self.store._tx() as t:
            resolved = {r.asker_run_id for r in getattr(t, medium_table_name(RESOLUTIONS)).values()
                        if r.scope == scope and r.partition == partition}

            def listed(run: Run) -> bool:
                pause = t.suspensions.get(run.id)
                if run.state == RunState.PAUSED:
                    return (pause is not None and pause.scope == scope
                            and pause.reason == SuspensionReason.AGENT_REPLY)
                return run.state == RunState.RUNNING and pause is None and run.id in resolved

            found = sorted(r.id for r in t.runs.values()
                           if r.scope == scope and (after is None or r.id > after) and listed(r))
        return found[:limit]


class A2AMixin(StoreBase):
    #: ``() -> str``: where claim tokens come from (see the module docstring).
    token_source: Callable[[], str] = staticmethod(random_token)

    def _a2a_rows(self, storage: object = None) -> MemoryA2ARows:
        """The a2a rows of the exactly-once classes (any storage: the lock
        is the reference's one atomic step)."""
        return MemoryA2ARows(self)

    # -- helpers ---------------------------------------------------------------------

    @staticmethod
    def _visible_row(table: dict[str, T], ctx: Context, key: str, not_found: type[CortexError], what: str) -> T:
        row = table.get(key)
        if row is None or not visible(ctx, row):
            raise not_found(f"{what} {key} not found")
        return row

    def _fresh_token(self, t: MemoryMedium, delivery_id: str) -> str:
        token = self.token_source()
        issued = t.a2a_tokens.get(delivery_id, ())
        if not isinstance(token, str) or token == "" or token in issued:
            raise StoreError(f"claim token {token!r} is not fresh for delivery {delivery_id}")
        t.a2a_tokens[delivery_id] = issued + (token,)
        return token

    # -- messages (A2A-ENV, A2A-HOP) -----------------------------------------------------

    def record_message(self, ctx: Context, envelope: Envelope) -> Envelope:
        require_scope(ctx)
        with self._tx() as t:
            now = self._now()
            candidate = validate_new_envelope(envelope, ctx, now)  # A2A-ENV-2
            conversation = self._visible_row(  # A2A-HOP-5
                t.a2a_conversations, ctx, candidate.conversation_id,
                ConversationNotFound, "conversation",
            )
            existing = t.a2a_messages.get(candidate.id)
            if existing is not None:
                if same_envelope(existing, candidate):
                    return detach(existing)  # A2A-HOP-3: free retry
                raise AlreadyExists(f"message {candidate.id} already exists")  # A2A-HOP-4
            if conversation.status != ConversationStatus.OPEN:
                raise ConversationClosed(f"conversation {conversation.id} is not open")
            if conversation.hops_used + 1 > conversation.hop_ceiling:
                raise HopCeilingExceeded(
                    f"conversation {conversation.id} used its {conversation.hop_ceiling} hops"
                )
            charged, stored = admit(conversation, candidate, now)  # A2A-HOP-8
            t.a2a_conversations[charged.id] = charged
            t.a2a_messages[stored.id] = detach(stored)
            return detach(stored)

    def get_message(self, ctx: Context, message_id: str) -> Envelope:
        require_scope(ctx)
        ids.check_id(message_id, ids.MESSAGE, "message_id")
        with self._tx() as t:
            return detach(self._visible_row(t.a2a_messages, ctx, message_id, MessageNotFound, "message"))

    def list_messages(
        self,
        ctx: Context,
        *,
        conversation_id: str | None = None,
        exact: bool = False,
        limit: int = 0,
        offset: int = 0,
    ) -> list[Envelope]:
        require_scope(ctx)
        conv = ids.check_optional_id(conversation_id, ids.CONVERSATION, "conversation_id")
        limit, offset, exact = check_list_args(limit, offset, exact)
        with self._tx() as t:
            rows = [
                m for m in t.a2a_messages.values()
                if visible(ctx, m)
                and (not exact or m.scope == ctx.scope)
                and (conv is None or m.conversation_id == conv)
            ]
            rows.sort(key=lambda m: (m.created_at, m.id))  # A2A-ENV-5
            return _page(rows, limit, offset)

    # -- conversations (A2A-CONV, A2A-PEER) -------------------------------------------------

    @staticmethod
    def _peer_taken(t: MemoryMedium, c: Conversation) -> bool:
        """A2A-PEER-3: another conversation holds c's non-empty peer pair in
        c's exact scope and partition."""
        if c.peer_node == "":
            return False
        return any(
            o.id != c.id and o.scope == c.scope and o.partition == c.partition
            and o.peer_node == c.peer_node and o.peer_context == c.peer_context
            for o in t.a2a_conversations.values()
        )

    def create_conversation(self, ctx: Context, conversation: Conversation) -> Conversation:
        require_scope(ctx)
        with self._tx() as t:
            stored = validate_new_conversation(conversation, ctx, self._now())
            if stored.id in t.a2a_conversations:
                raise AlreadyExists(f"conversation {stored.id} already exists")
            if self._peer_taken(t, stored):
                raise AlreadyExists("a conversation for this peer thread already exists here")
            t.a2a_conversations[stored.id] = detach(stored)
            return stored

    def get_conversation(self, ctx: Context, conversation_id: str) -> Conversation:
        require_scope(ctx)
        ids.check_id(conversation_id, ids.CONVERSATION, "conversation_id")
        with self._tx() as t:
            return detach(self._visible_row(
                t.a2a_conversations, ctx, conversation_id, ConversationNotFound, "conversation"))

    def get_conversation_by_peer_context(self, ctx: Context, node: str, peer_context: str) -> Conversation:
        require_scope(ctx)
        check_short_str(node, "node")
        check_short_str(peer_context, "peer_context")
        if node == "" or peer_context == "":  # A2A-PEER-1: no storage access
            raise ConversationNotFound("no conversation for an empty peer thread")
        with self._tx() as t:
            matches = [
                c for c in t.a2a_conversations.values()
                if visible(ctx, c) and c.peer_node == node and c.peer_context == peer_context
            ]
            if not matches:
                raise ConversationNotFound("no conversation for this peer thread")
            return detach(min(matches, key=peer_order_key))  # A2A-PEER-4

    def update_conversation(self, ctx: Context, conversation: Conversation) -> Conversation:
        require_scope(ctx)
        conversation_id, fields = validate_conversation_update(conversation)
        with self._tx() as t:
            current = self._visible_row(
                t.a2a_conversations, ctx, conversation_id, ConversationNotFound, "conversation")
            if current.status != ConversationStatus.OPEN and fields["status"] != current.status:
                raise InvalidState(f"conversation {conversation_id} is {ConversationStatus(current.status).value}")
            updated = updated_conversation(current, fields, self._now())  # RSC-GEN-13
            if self._peer_taken(t, updated):
                raise AlreadyExists("a conversation for this peer thread already exists here")
            t.a2a_conversations[conversation_id] = updated
            return detach(updated)

    def list_conversations(
        self,
        ctx: Context,
        *,
        status: ConversationStatus | str | None = None,
        exact: bool = False,
        limit: int = 0,
        offset: int = 0,
    ) -> list[Conversation]:
        require_scope(ctx)
        wanted = check_status_filter(status)
        limit, offset, exact = check_list_args(limit, offset, exact)
        with self._tx() as t:
            rows = [
                c for c in t.a2a_conversations.values()
                if visible(ctx, c)
                and (not exact or c.scope == ctx.scope)
                and (wanted is None or c.status == wanted)
            ]
            rows.sort(key=lambda c: (c.created_at, c.id), reverse=True)  # A2A-CONV-10
            return _page(rows, limit, offset)

    # -- deliveries (A2A-DLV, A2A-BIND, A2A-READ) --------------------------------------------

    def create_delivery(self, ctx: Context, delivery: Delivery) -> Delivery:
        require_scope(ctx)
        with self._tx() as t:
            stored = validate_new_delivery(delivery, ctx, self._now())
            if stored.id in t.a2a_deliveries:
                raise AlreadyExists(f"delivery {stored.id} already exists")
            t.a2a_deliveries[stored.id] = stored
            return detach(stored)

    def _delivery(self, t: MemoryMedium, ctx: Context, delivery_id: str) -> Delivery:
        return self._visible_row(t.a2a_deliveries, ctx, delivery_id, DeliveryNotFound, "delivery")

    def get_delivery(self, ctx: Context, delivery_id: str) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        with self._tx() as t:
            return detach(self._delivery(t, ctx, delivery_id))

    def claim_delivery(self, ctx: Context, delivery_id: str) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        with self._tx() as t:
            now = self._now()
            d = self._delivery(t, ctx, delivery_id)
            if d.state != DeliveryState.QUEUED:
                raise DeliveryAlreadyClaimed(f"delivery {delivery_id} is not queued")
            claimed = replace(
                d, state=DeliveryState.DELIVERING, claim_token=self._fresh_token(t, delivery_id),
                claimed_at=now, updated_at=now,
            )
            t.a2a_deliveries[delivery_id] = claimed
            return detach(claimed)

    def bind_delivery_run(self, ctx: Context, delivery_id: str, claim_token: str, run_id: str) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        check_claim_token(claim_token)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._tx() as t:
            d = self._delivery(t, ctx, delivery_id)
            if d.state != DeliveryState.DELIVERING or d.claim_token != claim_token:
                raise DeliveryClaimLost(f"the claim on delivery {delivery_id} is lost")  # BIND-3
            if d.run_id == run_id:
                return detach(d)  # A2A-BIND-4
            if d.run_id is not None:
                raise DeliveryAlreadyBound(f"delivery {delivery_id} is bound to another run")
            bound = replace(d, run_id=run_id, updated_at=self._now())
            t.a2a_deliveries[delivery_id] = bound
            return detach(bound)

    def finish_delivery(
        self,
        ctx: Context,
        delivery_id: str,
        claim_token: str,
        state: DeliveryState | str,
        error: str = "",
    ) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        check_claim_token(claim_token)
        state = check_finish_state(state)
        check_delivery_error(error)
        with self._tx() as t:
            d = self._delivery(t, ctx, delivery_id)
            if d.claim_token == claim_token and d.state == state and d.error == error:
                return detach(d)  # A2A-DLV-12: a repeat
            if d.state != DeliveryState.DELIVERING or d.claim_token != claim_token:
                raise DeliveryClaimLost(f"the claim on delivery {delivery_id} is lost")
            now = self._now()
            finished = replace(
                d, state=state, error=error, updated_at=now,
                delivered_at=now if state == DeliveryState.DELIVERED else None,
            )
            t.a2a_deliveries[delivery_id] = finished
            return detach(finished)

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
        require_scope(ctx)
        agent = check_short_str(agent, "agent")
        if agent == "":
            raise InvalidArgument("agent must not be empty")
        unread_only = check_bool(unread_only, "unread_only")
        conv = ids.check_optional_id(conversation_id, ids.CONVERSATION, "conversation_id")
        limit, offset = check_page(limit, offset)
        me = Address(agent=agent, node="")
        with self._tx() as t:

            def in_conversation(d: Delivery) -> bool:
                m = t.a2a_messages.get(d.message_id)
                return m is not None and visible(ctx, m) and m.conversation_id == conv

            rows = [
                d for d in t.a2a_deliveries.values()
                if visible(ctx, d)
                and d.receiver == me  # A2A-INBOX-1: local receivers only
                and d.state == DeliveryState.DELIVERED  # A2A-INBOX-2
                and (not unread_only or d.read_at is None)
                and (conv is None or in_conversation(d))
            ]
            rows.sort(key=lambda d: (d.created_at, d.id))  # A2A-INBOX-5
            return _page(rows, limit, offset)

    def mark_delivery_read(self, ctx: Context, delivery_id: str) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        with self._tx() as t:
            d = self._delivery(t, ctx, delivery_id)
            if d.state != DeliveryState.DELIVERED:
                raise InvalidState(f"delivery {delivery_id} is {DeliveryState(d.state).value}, not delivered")
            if d.read_at is not None:
                return detach(d)  # A2A-READ-2: the first read time stays
            now = self._now()
            read = replace(d, read_at=now, updated_at=now)
            t.a2a_deliveries[delivery_id] = read
            return detach(read)

    def list_queued_deliveries(self, ctx: Context, limit: int = 0) -> list[Delivery]:
        require_context(ctx)  # A2A-GEN-2: any scope, zero included
        limit, _ = check_page(limit)
        with self._tx() as t:
            rows = [
                d for d in t.a2a_deliveries.values()
                if d.partition == ctx.partition and d.state == DeliveryState.QUEUED
            ]
            rows.sort(key=lambda d: (d.created_at, d.id))  # A2A-QUEUE-1
            return _page(rows, limit)

    # -- stale reclaim (A2A-RCL) ----------------------------------------------------------------

    @staticmethod
    def _reclaim_args(ctx: Context, older_than: datetime, limit: int) -> tuple[datetime, int]:
        require_context(ctx)  # A2A-RCL-1: scope ignored
        cutoff = check_instant(older_than, "older_than")
        limit, _ = check_page(limit)
        return cutoff, limit

    @staticmethod
    def _candidates(
        t: MemoryMedium, partition: str, cutoff: datetime, limit: int, scope: Scope | None = None
    ) -> list[tuple[str, str]]:
        """A2A-RCL-4: ``(id, token)`` of the first ``limit`` stale rows (of
        exactly ``scope`` when given, A2A-ROUTE-2)."""
        rows = [
            d for d in t.a2a_deliveries.values()
            if d.partition == partition and is_stale(d, cutoff) and (scope is None or d.scope == scope)
        ]
        rows.sort(key=lambda d: (d.claimed_at, d.id))
        # a delivering row holds its claim's token (A2A-DLV-6)
        return [(d.id, d.claim_token) for d in page(rows, limit, 0) if d.claim_token is not None]

    def _move(
        self, t: MemoryMedium, partition: str, cutoff: datetime, delivery_id: str, token: str, now: datetime,
        scope: Scope | None = None,
    ) -> bool:
        """A2A-RCL-5: move one candidate iff it is still stale and still holds
        the token it was selected with (and is of exactly ``scope`` when
        given, A2A-ROUTE-3)."""
        d = t.a2a_deliveries.get(delivery_id)
        if d is None or d.partition != partition or d.claim_token != token or not is_stale(d, cutoff):
            return False  # A2A-RCL-6: skipped, not counted
        if scope is not None and d.scope != scope:
            return False
        t.a2a_deliveries[delivery_id] = replace(
            d, state=DeliveryState.QUEUED, claim_token=None, claimed_at=None, updated_at=now,
        )
        return True

    def reclaim_stale_deliveries(self, ctx: Context, older_than: datetime, limit: int = 0) -> int:
        cutoff, limit = self._reclaim_args(ctx, older_than, limit)
        with self._tx() as t:
            now = self._now()
            candidates = self._candidates(t, ctx.partition, cutoff, limit)
            return sum(self._move(t, ctx.partition, cutoff, i, tok, now) for i, tok in candidates)

    # The two halves as separate steps, for the linearizability model (A2A-RCL-8).

    def _select_stale(self, ctx: Context, older_than: datetime, limit: int = 0) -> tuple[tuple[str, str], ...]:
        cutoff, limit = self._reclaim_args(ctx, older_than, limit)
        with self._tx() as t:
            return tuple(self._candidates(t, ctx.partition, cutoff, limit))

    def _move_stale(self, ctx: Context, older_than: datetime, delivery_id: str, token: str) -> bool:
        cutoff = check_instant(older_than, "older_than")
        with self._tx() as t:
            return self._move(t, ctx.partition, cutoff, delivery_id, token, self._now())

    # -- pending asks (A2A-ASK) --------------------------------------------------------------------

    def create_pending_ask(self, ctx: Context, ask: PendingAsk) -> PendingAsk:
        require_scope(ctx)
        with self._tx() as t:
            stored = validate_new_pending_ask(ask, ctx, self._now())
            if stored.reply_with in t.a2a_asks:
                raise AlreadyExists(f"a pending ask with reply_with {stored.reply_with!r} exists")
            t.a2a_asks[stored.reply_with] = stored
            return detach(stored)

    def _ask(self, t: MemoryMedium, ctx: Context, reply_with: str) -> PendingAsk:
        return self._visible_row(t.a2a_asks, ctx, reply_with, AskNotFound, "pending ask")

    def get_pending_ask(self, ctx: Context, reply_with: str) -> PendingAsk:
        require_scope(ctx)
        check_reply_with(reply_with)
        with self._tx() as t:
            return detach(self._ask(t, ctx, reply_with))

    def claim_pending_ask(self, ctx: Context, reply_with: str) -> PendingAsk:
        require_scope(ctx)
        check_reply_with(reply_with)
        with self._tx() as t:
            a = self._ask(t, ctx, reply_with)
            if a.claimed_at is not None:
                raise AskAlreadyClaimed(f"the ask {reply_with!r} is already claimed")
            now = self._now()
            claimed = replace(a, claimed_at=now, updated_at=now)
            t.a2a_asks[reply_with] = claimed
            return detach(claimed)

    @staticmethod
    def _expired(rows: list[PendingAsk], cutoff: datetime, limit: int) -> list[PendingAsk]:
        rows = [a for a in rows if ask_expired(a, cutoff)]
        rows.sort(key=lambda a: (a.deadline, a.reply_with))  # A2A-ASK-8
        return _page(rows, limit)

    def list_expired_asks(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        require_scope(ctx)
        cutoff = check_instant(now, "now")
        limit, _ = check_page(limit)
        with self._tx() as t:
            return self._expired([a for a in t.a2a_asks.values() if visible(ctx, a)], cutoff, limit)

    def list_expired_asks_across_scopes(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        require_context(ctx)  # A2A-ASK-12: no scope check
        cutoff = check_instant(now, "now")
        limit, _ = check_page(limit)
        with self._tx() as t:
            rows = [a for a in t.a2a_asks.values() if a.partition == ctx.partition]
            return self._expired(rows, cutoff, limit)

    def list_pending_asks_by_conversation(self, ctx: Context, conversation_id: str) -> list[PendingAsk]:
        require_scope(ctx)
        ids.check_id(conversation_id, ids.CONVERSATION, "conversation_id")
        with self._tx() as t:
            rows = [
                a for a in t.a2a_asks.values()
                if visible(ctx, a) and a.claimed_at is None and a.conversation_id == conversation_id
            ]
            rows.sort(key=lambda a: (a.created_at, a.reply_with))  # A2A-ASK-13
            return [detach(a) for a in rows]
