"""Class ``a2a`` on MongoDB (spec: a2a.md).

Four collections (``a2a_messages``, ``a2a_conversations``,
``a2a_deliveries``, ``a2a_asks``), one document per entity, keyed by its id
(a pending ask by its ``reply_with``).  Every query carries the caller's
partition next to the scope levels (A2A-GEN-3).

Atomicity, decision by decision:

* **Hop admission** (A2A-HOP-8/10) changes two documents: the conversation
  (charge, participants) and the new envelope.  MongoDB makes that atomic
  only in a multi-document transaction, so ``record_message`` runs in one
  (``session.with_transaction``): read the conversation and any envelope
  with the id, decide (A2A-HOP-2), charge the conversation with an update
  conditioned on the ``hops_used`` it read, insert the envelope.  On a
  replica set two admissions on one conversation write the same document,
  so one of them hits a write conflict and is retried from the start; the
  faithful mongomock emulates the transaction by holding its lock for the
  whole of it (see :mod:`.faithful`).  A server without transactions (a
  standalone ``mongod``) cannot keep this promise: the store then does not
  declare class ``a2a`` (it is reported *not claimed*), never a silent
  non-atomic fallback.
* **Every claim** (delivery claim, bind, finish, read mark, ask claim) and
  every conversation update is one ``find_one_and_update`` whose filter is
  the whole decision; a refusal is classified from one read taken
  afterwards (a refusal writes nothing, so it takes effect at that read),
  and if that read shows the call possible after all, it starts again.
* **Stale reclaim** (A2A-RCL-5) selects candidates (id and token), then
  moves each with its own ``update_one`` filtered on the same token and on
  staleness: a row claimed again, bound or finished meanwhile is skipped.
* **Peer pairs** (A2A-PEER-3): a unique *sparse* index on ``peer_key``, a
  hash of (exact scope, partition, node, context), absent without a pair.
* **Reads spanning collections** (the inbox filtered by conversation) run
  in one read-only transaction: one snapshot.
"""

from __future__ import annotations

import hashlib
import json
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
    Performative,
    admit,
    check_claim_token,
    check_delivery_error,
    check_finish_state,
    check_list_args,
    check_reply_with,
    check_status_filter,
    same_envelope,
    updated_conversation,
    validate_conversation_update,
    validate_new_conversation,
    validate_new_delivery,
    validate_new_envelope,
    validate_new_pending_ask,
)
from cortex_spec.context import Context, require_context, require_scope
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
from cortex_spec.validation import check_bool, check_instant, check_page, check_short_str

from .store import (
    MongoStoreBase,
    create_missing_indexes,
    decode,
    dt_in,
    dt_out,
    json_in,
    json_out,
    opt_dt_in,
    scope_filter,
    scope_in,
    scope_out,
)

__all__ = ["A2AMixin", "MongoA2ARows", "A2A_COLLECTIONS"]

#: a2a collection names, after the store's prefix
A2A_COLLECTIONS = {
    "messages": "a2a_messages",
    "conversations": "a2a_conversations",
    "deliveries": "a2a_deliveries",
    "asks": "a2a_asks",
}

#: a refusal whose classifying read keeps finding the call possible gives up
_RETRIES = 100

T = TypeVar("T")

_QUEUED, _DELIVERING, _DELIVERED = (DeliveryState.QUEUED.value, DeliveryState.DELIVERING.value,
                                    DeliveryState.DELIVERED.value)


# -- codecs ---------------------------------------------------------------------------------


def _addr_out(a: Address) -> dict[str, str]:
    return {"agent": a.agent, "node": a.node}


def _addr_in(doc: Any) -> Address:
    return Address(doc["agent"], doc["node"])


def _peer_key(scope: Scope, partition: str, node: str, context: str) -> str | None:
    if node == "":
        return None
    text = json.dumps([scope.canonical(), partition, node, context], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _message_doc(e: Envelope) -> dict[str, Any]:
    return {
        "_id": e.id,
        "conversation_id": e.conversation_id,
        "scope": scope_out(e.scope),
        "partition": e.partition,
        "performative": Performative(e.performative).value,
        "sender": _addr_out(e.sender),
        "receivers": [_addr_out(a) for a in e.receivers],
        "reply_to": [_addr_out(a) for a in e.reply_to],
        "content": e.content,
        "language": e.language,
        "encoding": e.encoding,
        "ontology": e.ontology,
        "protocol": e.protocol,
        "reply_with": e.reply_with,
        "in_reply_to": e.in_reply_to,
        "reply_by": dt_out(e.reply_by),
        "origin_run_id": e.origin_run_id,
        "metadata": json_out(e.metadata),
        "hops": e.hops,
        "created_at": dt_out(e.created_at),
    }


def _message_in(doc: Any) -> Envelope:
    return decode("a stored message", lambda: Envelope(
        id=doc["_id"],
        conversation_id=doc["conversation_id"],
        performative=Performative(doc["performative"]),
        sender=_addr_in(doc["sender"]),
        receivers=tuple(_addr_in(a) for a in doc["receivers"]),
        reply_to=tuple(_addr_in(a) for a in doc["reply_to"]),
        content=doc["content"],
        language=doc["language"],
        encoding=doc["encoding"],
        ontology=doc["ontology"],
        protocol=doc["protocol"],
        reply_with=doc["reply_with"],
        in_reply_to=doc["in_reply_to"],
        reply_by=opt_dt_in(doc["reply_by"]),
        origin_run_id=doc["origin_run_id"],
        metadata=json_in(doc["metadata"]),
        scope=scope_in(doc["scope"]),
        partition=doc["partition"],
        hops=int(doc["hops"]),
        created_at=dt_in(doc["created_at"]),
    ))


def _conversation_doc(c: Conversation) -> dict[str, Any]:
    doc = {
        "_id": c.id,
        "scope": scope_out(c.scope),
        "partition": c.partition,
        "protocol": c.protocol,
        "initiator": _addr_out(c.initiator),
        "participants": [_addr_out(a) for a in c.participants],
        "status": ConversationStatus(c.status).value,
        "hop_ceiling": c.hop_ceiling,
        "hops_used": c.hops_used,
        "deadline": dt_out(c.deadline),
        "peer_node": c.peer_node,
        "peer_context": c.peer_context,
        "created_at": dt_out(c.created_at),
        "updated_at": dt_out(c.updated_at),
    }
    key = _peer_key(c.scope, c.partition, c.peer_node, c.peer_context)
    if key is not None:
        doc["peer_key"] = key  # absent without a pair: the index is sparse
    return doc


def _conversation_in(doc: Any) -> Conversation:
    return decode("a stored conversation", lambda: Conversation(
        id=doc["_id"],
        protocol=doc["protocol"],
        initiator=_addr_in(doc["initiator"]),
        participants=tuple(_addr_in(a) for a in doc["participants"]),
        status=ConversationStatus(doc["status"]),
        hop_ceiling=int(doc["hop_ceiling"]),
        hops_used=int(doc["hops_used"]),
        deadline=opt_dt_in(doc["deadline"]),
        peer_node=doc["peer_node"],
        peer_context=doc["peer_context"],
        scope=scope_in(doc["scope"]),
        partition=doc["partition"],
        created_at=dt_in(doc["created_at"]),
        updated_at=dt_in(doc["updated_at"]),
    ))


def _delivery_doc(d: Delivery) -> dict[str, Any]:
    return {
        "_id": d.id,
        "message_id": d.message_id,
        "receiver": _addr_out(d.receiver),
        "scope": scope_out(d.scope),
        "partition": d.partition,
        "state": DeliveryState(d.state).value,
        "error": d.error,
        "claim_token": d.claim_token,
        "claimed_at": dt_out(d.claimed_at),
        "delivered_at": dt_out(d.delivered_at),
        "read_at": dt_out(d.read_at),
        "run_id": d.run_id,
        "created_at": dt_out(d.created_at),
        "updated_at": dt_out(d.updated_at),
    }


def _delivery_in(doc: Any) -> Delivery:
    return decode("a stored delivery", lambda: Delivery(
        id=doc["_id"],
        message_id=doc["message_id"],
        receiver=_addr_in(doc["receiver"]),
        state=DeliveryState(doc["state"]),
        error=doc["error"],
        claim_token=doc["claim_token"],
        claimed_at=opt_dt_in(doc["claimed_at"]),
        delivered_at=opt_dt_in(doc["delivered_at"]),
        read_at=opt_dt_in(doc["read_at"]),
        run_id=doc["run_id"],
        scope=scope_in(doc["scope"]),
        partition=doc["partition"],
        created_at=dt_in(doc["created_at"]),
        updated_at=dt_in(doc["updated_at"]),
    ))


def _ask_doc(a: PendingAsk) -> dict[str, Any]:
    return {
        "_id": a.reply_with,
        "conversation_id": a.conversation_id,
        "message_id": a.message_id,
        "asker_run_id": a.asker_run_id,
        "asker_agent": a.asker_agent,
        "tool_call_id": a.tool_call_id,
        "expected": _addr_out(a.expected),
        "deadline": dt_out(a.deadline),
        "claimed_at": dt_out(a.claimed_at),
        "scope": scope_out(a.scope),
        "partition": a.partition,
        "created_at": dt_out(a.created_at),
        "updated_at": dt_out(a.updated_at),
    }


def _ask_in(doc: Any) -> PendingAsk:
    return decode("a stored pending ask", lambda: PendingAsk(
        reply_with=doc["_id"],
        conversation_id=doc["conversation_id"],
        message_id=doc["message_id"],
        asker_run_id=doc["asker_run_id"],
        asker_agent=doc["asker_agent"],
        tool_call_id=doc["tool_call_id"],
        expected=_addr_in(doc["expected"]),
        deadline=opt_dt_in(doc["deadline"]),
        claimed_at=opt_dt_in(doc["claimed_at"]),
        scope=scope_in(doc["scope"]),
        partition=doc["partition"],
        created_at=dt_in(doc["created_at"]),
        updated_at=dt_in(doc["updated_at"]),
    ))


def _seen(ctx: Context, exact: bool = False) -> dict[str, Any]:
    """A2A-GEN-3: the caller's partition and scope (prefix, or exact)."""
    return {"partition": ctx.partition, **scope_filter("scope", ctx.scope, exact=exact)}


def _page_kwargs(limit: int, offset: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if offset > 0:
        out["skip"] = offset
    if limit > 0:
        out["limit"] = limit
    return out


class MongoA2ARows:
    """:class:`cortex_spec.a2a.A2ARows` on MongoDB: with ``session``, the
    operations of one multi-document transaction; without, each read is one
    operation of its own.

    Inside a transaction a document the step decides on is read with a
    write (``$inc`` of a private ``_lk`` counter that no codec reads): a
    server then makes any concurrent write of it conflict with the
    transaction until it ends (``with_transaction`` retries the loser), so
    the step's writes are decided on what it read even where it writes
    nothing else to that document (the ask and the run slot of a release).
    Messages are immutable and read plainly."""

    def __init__(self, store: "A2AMixin", session: Any = None) -> None:
        self.store = store
        self.session = session

    def _s(self) -> dict[str, Any]:
        return {} if self.session is None else {"session": self.session}

    def _locked(self, collection: Any, key: str) -> Any:
        from pymongo import ReturnDocument

        with self.store._guard():
            if self.session is None:
                return collection.find_one({"_id": key})
            return collection.find_one_and_update({"_id": key}, {"$inc": {"_lk": 1}},
                                                  return_document=ReturnDocument.AFTER, session=self.session)

    def ask(self, reply_with: str) -> PendingAsk | None:
        doc = self._locked(self.store._a2a_asks, reply_with)
        return None if doc is None else _ask_in(doc)

    def put_ask(self, ask: PendingAsk) -> None:
        with self.store._guard():
            self.store._a2a_asks.update_one({"_id": ask.reply_with}, {"$set": {
                "claimed_at": dt_out(ask.claimed_at), "updated_at": dt_out(ask.updated_at)}}, **self._s())

    def message(self, message_id: str) -> Envelope | None:
        with self.store._guard():
            doc = self.store._a2a_messages.find_one({"_id": message_id}, **self._s())
        return None if doc is None else _message_in(doc)

    def conversation(self, conversation_id: str) -> Conversation | None:
        doc = self._locked(self.store._a2a_conversations, conversation_id)
        return None if doc is None else _conversation_in(doc)

    def admit(self, conversation: Conversation, envelope: Envelope) -> None:
        with self.store._guard():
            self.store._a2a_conversations.update_one({"_id": conversation.id}, {"$set": {
                "hops_used": conversation.hops_used,
                "participants": [_addr_out(a) for a in conversation.participants],
                "updated_at": dt_out(conversation.updated_at)}}, **self._s())
            self.store._a2a_messages.insert_one(_message_doc(envelope), **self._s())  # a taken id: AlreadyExists

    def delivery(self, delivery_id: str) -> Delivery | None:
        doc = self._locked(self.store._a2a_deliveries, delivery_id)
        return None if doc is None else _delivery_in(doc)

    def put_delivery(self, delivery: Delivery) -> None:
        with self.store._guard():
            self.store._a2a_deliveries.update_one({"_id": delivery.id}, {"$set": {
                "state": DeliveryState(delivery.state).value, "error": delivery.error,
                "delivered_at": dt_out(delivery.delivered_at), "updated_at": dt_out(delivery.updated_at)}},
                **self._s())

    def insert_delivery(self, delivery: Delivery) -> None:
        with self.store._guard():
            self.store._a2a_deliveries.insert_one(_delivery_doc(delivery), **self._s())

    def _slot(self, run_id: str) -> Any:
        return self._locked(self.store._runs, run_id)

    def run(self, run_id: str) -> Any:
        from .runs import run_from_doc

        slot = self._slot(run_id)
        return None if slot is None or "run" not in slot else run_from_doc(run_id, slot["run"])

    def suspension(self, run_id: str) -> Any:
        from .suspensions import susp_from_doc

        slot = self._slot(run_id)
        return None if slot is None or "susp" not in slot else susp_from_doc(run_id, slot["susp"])

    def deferred(self, scope: Scope, partition: str, after: str | None, limit: int) -> list[str]:
        query: dict[str, Any] = {"partition": partition, **scope_filter("scope", scope, exact=True),
                                 "state": _DELIVERING, "run_id": {"$ne": None}}
        if after is not None:
            query["_id"] = {"$gt": after}
        with self.store._guard():
            docs = self.store._find(self.store._a2a_deliveries, query, projection={"_id": 1}, sort=[("_id", 1)],
                                    limit=limit)
        return [d["_id"] for d in docs]

    def agent_reply_runs(self, scope: Scope, partition: str, after: str | None, limit: int) -> list[str]:
        """A2A-AREPLY-1/2 in one read-only transaction (one snapshot of the
        run slots and the resolutions)."""
        from cortex_spec.a2a_resolutions import RESOLUTIONS
        from cortex_spec.runs import RunState
        from cortex_spec.suspensions import SuspensionReason

        resolutions = self.store.database[self.store.collection_prefix + RESOLUTIONS.name]

        def read(session: Any) -> list[str]:
            resolved = sorted({d["asker_run_id"] for d in resolutions.find(
                {**scope_filter("scope", scope, exact=True), "partition": partition},
                projection={"asker_run_id": 1}, session=session)})
            query: dict[str, Any] = {**scope_filter("run.scope", scope, exact=True), "$or": [
                {"run.state": RunState.PAUSED.value, "susp.reason": SuspensionReason.AGENT_REPLY.value,
                 **scope_filter("susp.scope", scope, exact=True)},
                {"run.state": RunState.RUNNING.value, "susp": {"$exists": False}, "_id": {"$in": resolved}},
            ]}
            if after is not None:
                query["_id"] = {"$gt": after}
            docs = self.store._runs.find(query, projection={"_id": 1}, sort=[("_id", 1)], limit=limit,
                                         session=session)
            return [d["_id"] for d in docs]

        with self.store._guard():
            return self.store._txn(read)


class A2AMixin(MongoStoreBase):
    def _a2a_rows(self, storage: Any = None) -> MongoA2ARows:
        """The a2a rows of the exactly-once classes, in the transaction of
        ``storage`` (a :class:`.kinds.MongoStorage` of ``Storage.atomic``)."""
        return MongoA2ARows(self, getattr(storage, "session", None))

    def __init__(self, database: Any, clock: Any = None, **options: Any) -> None:
        prefix = options.get("collection_prefix", "cortex_")
        self._a2a_messages = database[prefix + A2A_COLLECTIONS["messages"]]
        self._a2a_conversations = database[prefix + A2A_COLLECTIONS["conversations"]]
        self._a2a_deliveries = database[prefix + A2A_COLLECTIONS["deliveries"]]
        self._a2a_asks = database[prefix + A2A_COLLECTIONS["asks"]]
        super().__init__(database, clock, **options)
        if not self._transactions:
            # hop admission needs a multi-document transaction: no a2a here,
            # nor any class that requires it (their commits are transactions too)
            from cortex_spec.classes import CLASSES, closure

            needs = {name for name in CLASSES if "a2a" in closure({name})}
            self.capabilities = frozenset(type(self).capabilities - needs)

    def ensure_indexes(self) -> None:
        super().ensure_indexes()
        wanted = [
            (self._a2a_messages, [("conversation_id", 1), ("hops", 1)], "a2a_message_hop",
             {"unique": True}),  # A2A-HOP-11, whatever the application does
            (self._a2a_messages, [("created_at", 1), ("_id", 1)], "a2a_messages_created", {}),
            (self._a2a_conversations, [("peer_key", 1)], "a2a_peer_unique",
             {"unique": True, "sparse": True}),  # A2A-PEER-3
            (self._a2a_conversations, [("created_at", -1), ("_id", -1)], "a2a_conversations_created", {}),
            (self._a2a_deliveries, [("partition", 1), ("state", 1), ("created_at", 1), ("_id", 1)],
             "a2a_queue", {}),
            (self._a2a_deliveries, [("partition", 1), ("state", 1), ("claimed_at", 1), ("_id", 1)],
             "a2a_claimed", {}),
            (self._a2a_deliveries, [("receiver.agent", 1), ("state", 1), ("created_at", 1), ("_id", 1)],
             "a2a_inbox", {}),
            (self._a2a_asks, [("deadline", 1), ("_id", 1)], "a2a_asks_expired", {}),
            (self._a2a_asks, [("conversation_id", 1), ("created_at", 1), ("_id", 1)],
             "a2a_asks_conversation", {}),
        ]
        create_missing_indexes(wanted)

    def _a2a_decide(self, collection: Any, key: str, ctx: Context, decision: dict[str, Any],
                    update: dict[str, Any], decode: Callable[[dict[str, Any]], T],
                    classify: Callable[[T | None], T | None]) -> T:
        """One ``find_one_and_update`` whose filter is the decision; a refusal
        is classified from one read (``classify(row or None)`` returns the
        value to give back, raises, or returns ``None`` to try again)."""
        from pymongo import ReturnDocument

        mine = {"_id": key, **_seen(ctx)}
        with self._guard():
            for _ in range(_RETRIES):
                doc = collection.find_one_and_update({**mine, **decision}, update,
                                                     return_document=ReturnDocument.AFTER)
                if doc is not None:
                    return decode(doc)  # the row as this step wrote it
                row = collection.find_one(mine)
                verdict = classify(None if row is None else decode(row))
                if verdict is not None:
                    return verdict
            raise StoreError(f"the call on {key} kept racing concurrent writes")

    def _a2a_get(self, collection: Any, ctx: Context, key: str, decode: Callable[[dict[str, Any]], T],
                 not_found: type[CortexError], what: str) -> T:
        with self._guard():
            doc = collection.find_one({"_id": key, **_seen(ctx)})
            if doc is None:
                raise not_found(f"{what} {key} not found")
            return decode(doc)

    # -- messages (A2A-ENV, A2A-HOP) ---------------------------------------------------------

    def record_message(self, ctx: Context, envelope: Envelope) -> Envelope:
        require_scope(ctx)
        now = self._now()
        candidate = validate_new_envelope(envelope, ctx, now)  # A2A-ENV-2, before storage
        cid = candidate.conversation_id

        def admission(session: Any) -> Envelope:
            conv_doc = self._a2a_conversations.find_one({"_id": cid, **_seen(ctx)}, session=session)
            if conv_doc is None:
                raise ConversationNotFound(f"conversation {cid} not found")  # A2A-HOP-5
            existing = self._a2a_messages.find_one({"_id": candidate.id}, session=session)
            if existing is not None:
                stored = _message_in(existing)
                if same_envelope(stored, candidate):
                    return stored  # A2A-HOP-3
                raise AlreadyExists(f"message {candidate.id} already exists")  # A2A-HOP-4
            conversation = _conversation_in(conv_doc)
            if conversation.status != ConversationStatus.OPEN:
                raise ConversationClosed(f"conversation {cid} is not open")  # A2A-HOP-6
            if conversation.hops_used + 1 > conversation.hop_ceiling:
                raise HopCeilingExceeded(f"conversation {cid} used its {conversation.hop_ceiling} hops")
            charged, stored = admit(conversation, candidate, now)  # A2A-HOP-8
            charge = self._a2a_conversations.update_one(
                {"_id": cid, "hops_used": conversation.hops_used},
                {"$set": {"hops_used": charged.hops_used,
                          "participants": [_addr_out(a) for a in charged.participants],
                          "updated_at": dt_out(now)}},
                session=session,
            )
            if charge.matched_count != 1:
                raise StoreError(f"conversation {cid} changed inside the transaction")
            self._a2a_messages.insert_one(_message_doc(stored), session=session)
            return stored

        with self._guard():
            return self._txn(admission)

    def get_message(self, ctx: Context, message_id: str) -> Envelope:
        require_scope(ctx)
        ids.check_id(message_id, ids.MESSAGE, "message_id")
        return self._a2a_get(self._a2a_messages, ctx, message_id, _message_in, MessageNotFound, "message")

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
        query = _seen(ctx, exact)
        if conv is not None:
            query["conversation_id"] = conv
        with self._guard():
            docs = self._find(self._a2a_messages, query, sort=[("created_at", 1), ("_id", 1)],
                              **_page_kwargs(limit, offset))  # A2A-ENV-5
            return [_message_in(d) for d in docs]

    # -- conversations (A2A-CONV, A2A-PEER) -----------------------------------------------------

    def create_conversation(self, ctx: Context, conversation: Conversation) -> Conversation:
        require_scope(ctx)
        stored = validate_new_conversation(conversation, ctx, self._now())
        with self._guard():
            # duplicate id or peer pair: DuplicateKeyError -> AlreadyExists (A2A-CONV-1, A2A-PEER-3)
            self._a2a_conversations.insert_one(_conversation_doc(stored))
        return stored

    def get_conversation(self, ctx: Context, conversation_id: str) -> Conversation:
        require_scope(ctx)
        ids.check_id(conversation_id, ids.CONVERSATION, "conversation_id")
        return self._a2a_get(self._a2a_conversations, ctx, conversation_id, _conversation_in,
                             ConversationNotFound, "conversation")

    def get_conversation_by_peer_context(self, ctx: Context, node: str, peer_context: str) -> Conversation:
        require_scope(ctx)
        check_short_str(node, "node")
        check_short_str(peer_context, "peer_context")
        if node == "" or peer_context == "":  # A2A-PEER-1: no storage access
            raise ConversationNotFound("no conversation for an empty peer thread")
        with self._guard():
            docs = self._find(
                self._a2a_conversations, {**_seen(ctx), "peer_node": node, "peer_context": peer_context},
                sort=[("scope.n", 1), ("created_at", 1), ("_id", 1)], limit=1,  # A2A-PEER-4
            )
            if not docs:
                raise ConversationNotFound("no conversation for this peer thread")
            return _conversation_in(docs[0])

    def update_conversation(self, ctx: Context, conversation: Conversation) -> Conversation:
        require_scope(ctx)
        conversation_id, fields = validate_conversation_update(conversation)
        now = self._now()
        status = fields["status"].value
        values = {
            "protocol": fields["protocol"], "status": status, "hop_ceiling": fields["hop_ceiling"],
            "deadline": dt_out(fields["deadline"]), "peer_node": fields["peer_node"],
            "peer_context": fields["peer_context"], "updated_at": dt_out(now),
        }

        def update_for(scope: Scope, partition: str) -> dict[str, Any]:
            key = _peer_key(scope, partition, fields["peer_node"], fields["peer_context"])
            if key is None:
                return {"$set": values, "$unset": {"peer_key": ""}}
            return {"$set": {**values, "peer_key": key}}

        def classify(current: Conversation | None) -> Conversation | None:
            if current is None:
                raise ConversationNotFound(f"conversation {conversation_id} not found")
            current_status = ConversationStatus(current.status).value
            if current_status != ConversationStatus.OPEN.value and current_status != status:
                raise InvalidState(f"conversation {conversation_id} is {current_status}")  # A2A-CONV-7
            return None  # updatable now: go again

        from pymongo import ReturnDocument

        mine = {"_id": conversation_id, **_seen(ctx)}
        # A2A-CONV-7 in the filter: open, or keeping its (final) status
        decision = {"$or": [{"status": ConversationStatus.OPEN.value}, {"status": status}]}
        with self._guard():
            for _ in range(_RETRIES):
                row = self._a2a_conversations.find_one(mine)
                if row is None:
                    classify(None)
                current = _conversation_in(row)
                classify(current)
                # RSC-GEN-13: measured from this read.  The row's scope and
                # partition never change, so the peer key computed from it is
                # the key of the update below; its participants change only
                # with its hops, which the update's filter holds as read.
                updated_conversation(current, fields, now)
                doc = self._a2a_conversations.find_one_and_update(
                    {**mine, **decision, "hops_used": current.hops_used},
                    update_for(current.scope, current.partition),
                    return_document=ReturnDocument.AFTER)  # a taken pair: AlreadyExists
                if doc is not None:
                    return _conversation_in(doc)
                row = self._a2a_conversations.find_one(mine)
                classify(None if row is None else _conversation_in(row))
            raise StoreError(f"the update of conversation {conversation_id} kept racing")

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
        query = _seen(ctx, exact)
        if wanted is not None:
            query["status"] = wanted.value
        with self._guard():
            docs = self._find(self._a2a_conversations, query, sort=[("created_at", -1), ("_id", -1)],
                              **_page_kwargs(limit, offset))  # A2A-CONV-10
            return [_conversation_in(d) for d in docs]

    # -- deliveries (A2A-DLV, A2A-BIND, A2A-READ) -----------------------------------------------

    def create_delivery(self, ctx: Context, delivery: Delivery) -> Delivery:
        require_scope(ctx)
        stored = validate_new_delivery(delivery, ctx, self._now())
        with self._guard():
            self._a2a_deliveries.insert_one(_delivery_doc(stored))  # duplicate id: AlreadyExists
        return stored

    def get_delivery(self, ctx: Context, delivery_id: str) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        return self._a2a_get(self._a2a_deliveries, ctx, delivery_id, _delivery_in, DeliveryNotFound, "delivery")

    def claim_delivery(self, ctx: Context, delivery_id: str) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        now = dt_out(self._now())

        def classify(d: Delivery | None) -> Delivery | None:
            if d is None:
                raise DeliveryNotFound(f"delivery {delivery_id} not found")  # A2A-DLV-8
            if d.state != DeliveryState.QUEUED:
                raise DeliveryAlreadyClaimed(f"delivery {delivery_id} is not queued")  # A2A-DLV-7
            return None

        update = {"$set": {"state": _DELIVERING, "claim_token": secrets.token_hex(16),  # A2A-DLV-6
                           "claimed_at": now, "updated_at": now}}
        return self._a2a_decide(self._a2a_deliveries, delivery_id, ctx, {"state": _QUEUED}, update,
                                _delivery_in, classify)

    def bind_delivery_run(self, ctx: Context, delivery_id: str, claim_token: str, run_id: str) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        check_claim_token(claim_token)
        ids.check_id(run_id, ids.RUN, "run_id")
        now = dt_out(self._now())

        def classify(d: Delivery | None) -> Delivery | None:
            if d is None:
                raise DeliveryNotFound(f"delivery {delivery_id} not found")
            if d.state != DeliveryState.DELIVERING or d.claim_token != claim_token:
                raise DeliveryClaimLost(f"the claim on delivery {delivery_id} is lost")  # A2A-BIND-3
            if d.run_id == run_id:
                return d  # A2A-BIND-4: a repeat
            if d.run_id is not None:
                raise DeliveryAlreadyBound(f"delivery {delivery_id} is bound to another run")
            return None

        decision = {"state": _DELIVERING, "claim_token": claim_token, "run_id": None}
        return self._a2a_decide(self._a2a_deliveries, delivery_id, ctx, decision,
                                {"$set": {"run_id": run_id, "updated_at": now}}, _delivery_in, classify)

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
        now = dt_out(self._now())

        def classify(d: Delivery | None) -> Delivery | None:
            if d is None:
                raise DeliveryNotFound(f"delivery {delivery_id} not found")
            if d.claim_token == claim_token and d.state == state and d.error == error:
                return d  # A2A-DLV-12: a repeat
            if d.state != DeliveryState.DELIVERING or d.claim_token != claim_token:
                raise DeliveryClaimLost(f"the claim on delivery {delivery_id} is lost")  # A2A-DLV-13
            return None

        update = {"$set": {"state": state.value, "error": error, "updated_at": now,
                           "delivered_at": now if state == DeliveryState.DELIVERED else None}}
        return self._a2a_decide(self._a2a_deliveries, delivery_id, ctx,
                                {"state": _DELIVERING, "claim_token": claim_token}, update, _delivery_in, classify)

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
        query: dict[str, Any] = {
            **_seen(ctx), "receiver.agent": agent, "receiver.node": "",  # A2A-INBOX-1
            "state": _DELIVERED,  # A2A-INBOX-2
        }
        if unread_only:
            query["read_at"] = None
        order = [("created_at", 1), ("_id", 1)]  # A2A-INBOX-5
        with self._guard():
            if conv is None:
                docs = self._find(self._a2a_deliveries, query, sort=order, **_page_kwargs(limit, offset))
                return [_delivery_in(d) for d in docs]

            def read(session: Any) -> list[Delivery]:  # A2A-INBOX-4: one snapshot
                rows = list(self._a2a_deliveries.find(query, sort=order, session=session))
                wanted = {r["message_id"] for r in rows}
                in_conv = {m["_id"] for m in self._a2a_messages.find(
                    {"_id": {"$in": sorted(wanted)}, "conversation_id": conv, **_seen(ctx)},
                    projection={"_id": 1}, session=session)}
                rows = [r for r in rows if r["message_id"] in in_conv]
                rows = rows[offset:] if offset > 0 else rows
                rows = rows[:limit] if limit > 0 else rows
                return [_delivery_in(d) for d in rows]

            return self._txn(read)

    def mark_delivery_read(self, ctx: Context, delivery_id: str) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        now = dt_out(self._now())

        def classify(d: Delivery | None) -> Delivery | None:
            if d is None:
                raise DeliveryNotFound(f"delivery {delivery_id} not found")
            if d.state != DeliveryState.DELIVERED:
                raise InvalidState(f"delivery {delivery_id} is {DeliveryState(d.state).value}, not delivered")
            if d.read_at is not None:
                return d  # A2A-READ-2: the first read time stays
            return None

        return self._a2a_decide(self._a2a_deliveries, delivery_id, ctx, {"state": _DELIVERED, "read_at": None},
                                {"$set": {"read_at": now, "updated_at": now}}, _delivery_in, classify)

    def list_queued_deliveries(self, ctx: Context, limit: int = 0) -> list[Delivery]:
        require_context(ctx)  # A2A-GEN-2
        return self._queued({"partition": ctx.partition}, limit)

    def _queued(self, where: dict[str, Any], limit: object) -> list[Delivery]:
        """The queued deliveries ``where`` selects, oldest first (A2A-QUEUE-1);
        ``where``: the partition, or the exact scope too (class a2a_discovery)."""
        limit, _ = check_page(limit)
        with self._guard():
            docs = self._find(self._a2a_deliveries, {**where, "state": _QUEUED},
                              sort=[("created_at", 1), ("_id", 1)], **_page_kwargs(limit))
            return [_delivery_in(d) for d in docs]

    def reclaim_stale_deliveries(self, ctx: Context, older_than: datetime, limit: int = 0) -> int:
        require_context(ctx)  # A2A-RCL-1
        return self._reclaim_stale({"partition": ctx.partition}, older_than, limit)

    def _reclaim_stale(self, where: dict[str, Any], older_than: object, limit: object) -> int:
        """Requeue the stale deliveries ``where`` selects (A2A-RCL-2), each
        with its own re-checking step (A2A-RCL-5); ``where``: the partition,
        or the exact scope too (class a2a_discovery, A2A-ROUTE-3)."""
        cutoff = dt_out(check_instant(older_than, "older_than"))
        limit, _ = check_page(limit)
        now = dt_out(self._now())
        stale = {**where, "state": _DELIVERING, "run_id": None,
                 "claimed_at": {"$ne": None, "$lt": cutoff}}  # A2A-RCL-2
        with self._guard():
            candidates = self._find(self._a2a_deliveries, stale, projection={"claim_token": 1},
                                    sort=[("claimed_at", 1), ("_id", 1)], **_page_kwargs(limit))
            moved = 0
            for doc in candidates:  # A2A-RCL-5: one atomic, re-checking step per row
                result = self._a2a_deliveries.update_one(
                    {"_id": doc["_id"], "claim_token": doc["claim_token"], **stale},
                    {"$set": {"state": _QUEUED, "claim_token": None, "claimed_at": None, "updated_at": now}},
                )
                moved += result.modified_count
            return moved

    # -- pending asks (A2A-ASK) -------------------------------------------------------------------

    def create_pending_ask(self, ctx: Context, ask: PendingAsk) -> PendingAsk:
        require_scope(ctx)
        stored = validate_new_pending_ask(ask, ctx, self._now())
        with self._guard():
            self._a2a_asks.insert_one(_ask_doc(stored))  # a used reply_with: AlreadyExists (A2A-ASK-1)
        return stored

    def get_pending_ask(self, ctx: Context, reply_with: str) -> PendingAsk:
        require_scope(ctx)
        check_reply_with(reply_with)
        return self._a2a_get(self._a2a_asks, ctx, reply_with, _ask_in, AskNotFound, "pending ask")

    def claim_pending_ask(self, ctx: Context, reply_with: str) -> PendingAsk:
        require_scope(ctx)
        check_reply_with(reply_with)
        now = dt_out(self._now())

        def classify(a: PendingAsk | None) -> PendingAsk | None:
            if a is None:
                raise AskNotFound(f"pending ask {reply_with} not found")  # A2A-ASK-5
            if a.claimed_at is not None:
                raise AskAlreadyClaimed(f"the ask {reply_with} is already claimed")  # A2A-ASK-4
            return None

        return self._a2a_decide(self._a2a_asks, reply_with, ctx, {"claimed_at": None},
                                {"$set": {"claimed_at": now, "updated_at": now}}, _ask_in, classify)

    def _a2a_expired(self, query: dict[str, Any], now: Any, limit: Any) -> list[PendingAsk]:
        cutoff = dt_out(check_instant(now, "now"))
        limit, _ = check_page(limit)
        query = {**query, "claimed_at": None, "deadline": {"$ne": None, "$lte": cutoff}}  # A2A-ASK-8/9
        with self._guard():
            docs = self._find(self._a2a_asks, query, sort=[("deadline", 1), ("_id", 1)], **_page_kwargs(limit))
            return [_ask_in(d) for d in docs]

    def list_expired_asks(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        require_scope(ctx)
        return self._a2a_expired(_seen(ctx), now, limit)

    def list_expired_asks_across_scopes(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        require_context(ctx)  # A2A-ASK-12: no scope check, no scope filter
        return self._a2a_expired({"partition": ctx.partition}, now, limit)

    def list_pending_asks_by_conversation(self, ctx: Context, conversation_id: str) -> list[PendingAsk]:
        require_scope(ctx)
        ids.check_id(conversation_id, ids.CONVERSATION, "conversation_id")
        with self._guard():
            docs = self._find(self._a2a_asks, {**_seen(ctx), "claimed_at": None, "conversation_id": conversation_id},
                              sort=[("created_at", 1), ("_id", 1)])  # A2A-ASK-13
            return [_ask_in(d) for d in docs]
