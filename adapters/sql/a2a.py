"""Class ``a2a`` on SQL (spec: a2a.md).

Every row is visible through its scope columns *and* its partition
(A2A-GEN-3): each statement below filters ``partition = :w_part`` next to
the scope levels.  How each promise is kept:

* **Hop admission** (A2A-HOP-8/10) is one transaction: the conversation row
  is read with ``FOR UPDATE`` (PostgreSQL; SQLite's ``BEGIN IMMEDIATE``
  already holds the write lock), the checks of A2A-HOP-2 run against that
  row, then the charge (``UPDATE ... WHERE hops_used = :old``) and the
  envelope ``INSERT`` commit together.  Two senders on one conversation
  queue on its row lock, so each sees the other's charge: no admission can
  pass the ceiling, and ``UNIQUE (conversation_id, hops)`` backs A2A-HOP-11.
  An identical retry (A2A-HOP-3) queues on the same lock and then finds the
  stored envelope; a reused id with other fields is the primary key's
  ``AlreadyExists``.
* **Claims** (delivery claim, bind, finish, read mark, ask claim) are one
  conditional ``UPDATE ... RETURNING`` whose ``WHERE`` holds the whole
  decision — state, claim token, ``run_id IS NULL``, ``claimed_at IS NULL``
  … — run as one statement without an explicit transaction (atomic on its
  own); the row it returns is the row the claim wrote (A2A-DLV-5).  A claim
  that matched nothing wrote nothing and is classified by a read of the row
  (a later snapshot); if that read finds the claim possible after all (the
  row changed between the two statements), the ``UPDATE`` runs again.  On
  SQLite the read comes first and the ``UPDATE`` only when it finds the
  claim possible (:meth:`.store.SqlStoreBase._contended`: a lost claim takes
  no write lock).  (Measured, issue 14: the former transaction — UPDATE,
  read, COMMIT — was four round trips on PostgreSQL where this is one, and
  held SQLite's write lock across the Python between its statements.)
* **Stale reclaim** (A2A-RCL-5) selects the candidates (id and claim token)
  in one read, then moves each with its own ``UPDATE ... WHERE id = :id AND
  claim_token = :token AND state = 'delivering' AND run_id IS NULL AND
  claimed_at < :cutoff``: a row claimed again, bound or finished since the
  selection does not match and is not counted.
* **Peer pairs** (A2A-PEER-3) are unique through ``peer_key``, a hash of
  (exact scope, partition, node, context), NULL without a pair.
* **Inbox with a conversation** (A2A-INBOX-4) is one SELECT with an
  ``EXISTS`` on the (visible) message: one statement, one snapshot.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from datetime import datetime
import functools
from functools import cache
from typing import Any, TypeVar

import sqlalchemy as sa

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
    CortexError,
    AskAlreadyClaimed,
    AskNotFound,
    ConversationClosed,
    ConversationNotFound,
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
)

from .dialect import Dialect
from .schema import a2a_asks, a2a_conversations, a2a_deliveries, a2a_messages, runs, suspensions
from .store import (
    Members,
    SqlStoreBase,
    db_int,
    decode,
    dump_json,
    instant,
    load_json,
    ms,
    read_scope,
    scope_binds,
    scope_params,
    scope_values,
    visible,
)

__all__ = ["A2AMixin", "SqlA2ARows"]

#: A claim whose classifying read keeps finding it possible gives up after
#: this many UPDATEs (only under sustained concurrent writes to the row).
_ATTEMPTS = 50

_QUEUED, _DELIVERING, _DELIVERED = (DeliveryState.QUEUED.value, DeliveryState.DELIVERING.value,
                                    DeliveryState.DELIVERED.value)


# -- codecs ----------------------------------------------------------------------------------


def _addresses_out(addresses: tuple[Address, ...]) -> str:
    return dump_json([[a.agent, a.node] for a in addresses])


def _addresses_in(text: str) -> tuple[Address, ...]:
    return tuple(Address(agent, node) for agent, node in load_json(text))


def _peer_key(scope: Scope, partition: str, node: str, context: str) -> str | None:
    """A2A-PEER-3's unique key: NULL without a pair (NULLs never collide)."""
    if node == "":
        return None
    text = json.dumps([scope.canonical(), partition, node, context], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _message_row(e: Envelope) -> dict[str, Any]:
    return {
        "id": e.id,
        "conversation_id": e.conversation_id,
        **scope_values(e.scope),
        "partition": e.partition,
        "performative": Performative(e.performative).value,
        "sender_agent": e.sender.agent,
        "sender_node": e.sender.node,
        "receivers": _addresses_out(e.receivers),
        "reply_to": _addresses_out(e.reply_to),
        "content": e.content,
        "language": e.language,
        "encoding": e.encoding,
        "ontology": e.ontology,
        "protocol": e.protocol,
        "reply_with": e.reply_with,
        "in_reply_to": e.in_reply_to,
        "reply_by": ms(e.reply_by),
        "origin_run_id": e.origin_run_id,
        "metadata": dump_json(e.metadata),
        "hops": e.hops,
        "created_at": ms(e.created_at),
    }


def _message_from_row(row: Any) -> Envelope:
    return decode("message", lambda: Envelope(
        id=row.id,
        conversation_id=row.conversation_id,
        performative=Performative(row.performative),
        sender=Address(row.sender_agent, row.sender_node),
        receivers=_addresses_in(row.receivers),
        reply_to=_addresses_in(row.reply_to),
        content=row.content,
        language=row.language,
        encoding=row.encoding,
        ontology=row.ontology,
        protocol=row.protocol,
        reply_with=row.reply_with,
        in_reply_to=row.in_reply_to,
        reply_by=instant(row.reply_by),
        origin_run_id=row.origin_run_id,
        metadata=load_json(row.metadata),
        scope=read_scope(row),
        partition=row.partition,
        hops=int(row.hops),
        created_at=instant(row.created_at),
    ))


def _conversation_row(c: Conversation) -> dict[str, Any]:
    return {
        "id": c.id,
        **scope_values(c.scope),
        "partition": c.partition,
        "protocol": c.protocol,
        "initiator_agent": c.initiator.agent,
        "initiator_node": c.initiator.node,
        "participants": _addresses_out(c.participants),
        "status": ConversationStatus(c.status).value,
        "hop_ceiling": c.hop_ceiling,
        "hops_used": c.hops_used,
        "deadline": ms(c.deadline),
        "peer_node": c.peer_node,
        "peer_context": c.peer_context,
        "peer_key": _peer_key(c.scope, c.partition, c.peer_node, c.peer_context),
        "created_at": ms(c.created_at),
        "updated_at": ms(c.updated_at),
    }


def _conversation_from_row(row: Any) -> Conversation:
    return decode("conversation", lambda: Conversation(
        id=row.id,
        protocol=row.protocol,
        initiator=Address(row.initiator_agent, row.initiator_node),
        participants=_addresses_in(row.participants),
        status=ConversationStatus(row.status),
        hop_ceiling=int(row.hop_ceiling),
        hops_used=int(row.hops_used),
        deadline=instant(row.deadline),
        peer_node=row.peer_node,
        peer_context=row.peer_context,
        scope=read_scope(row),
        partition=row.partition,
        created_at=instant(row.created_at),
        updated_at=instant(row.updated_at),
    ))


def _delivery_row(d: Delivery) -> dict[str, Any]:
    return {
        "id": d.id,
        "message_id": d.message_id,
        "receiver_agent": d.receiver.agent,
        "receiver_node": d.receiver.node,
        **scope_values(d.scope),
        "partition": d.partition,
        "state": DeliveryState(d.state).value,
        "error": d.error,
        "claim_token": d.claim_token,
        "claimed_at": ms(d.claimed_at),
        "delivered_at": ms(d.delivered_at),
        "read_at": ms(d.read_at),
        "run_id": d.run_id,
        "created_at": ms(d.created_at),
        "updated_at": ms(d.updated_at),
    }


_DELIVERY_STATES = Members(DeliveryState)


def _delivery_from_row(row: Any) -> Delivery:
    return decode("delivery", lambda: Delivery(
        id=row.id,
        message_id=row.message_id,
        receiver=Address(row.receiver_agent, row.receiver_node),
        state=_DELIVERY_STATES[row.state],
        error=row.error,
        claim_token=row.claim_token,
        claimed_at=instant(row.claimed_at),
        delivered_at=instant(row.delivered_at),
        read_at=instant(row.read_at),
        run_id=row.run_id,
        scope=read_scope(row),
        partition=row.partition,
        created_at=instant(row.created_at),
        updated_at=instant(row.updated_at),
    ))


def _ask_row(a: PendingAsk) -> dict[str, Any]:
    return {
        "reply_with": a.reply_with,
        "conversation_id": a.conversation_id,
        "message_id": a.message_id,
        "asker_run_id": a.asker_run_id,
        "asker_agent": a.asker_agent,
        "tool_call_id": a.tool_call_id,
        "expected_agent": a.expected.agent,
        "expected_node": a.expected.node,
        "deadline": ms(a.deadline),
        "claimed_at": ms(a.claimed_at),
        **scope_values(a.scope),
        "partition": a.partition,
        "created_at": ms(a.created_at),
        "updated_at": ms(a.updated_at),
    }


def _ask_from_row(row: Any) -> PendingAsk:
    return decode("pending ask", lambda: PendingAsk(
        reply_with=row.reply_with,
        conversation_id=row.conversation_id,
        message_id=row.message_id,
        asker_run_id=row.asker_run_id,
        asker_agent=row.asker_agent,
        tool_call_id=row.tool_call_id,
        expected=Address(row.expected_agent, row.expected_node),
        deadline=instant(row.deadline),
        claimed_at=instant(row.claimed_at),
        scope=read_scope(row),
        partition=row.partition,
        created_at=instant(row.created_at),
        updated_at=instant(row.updated_at),
    ))


# -- statements (built once per shape, cached) ---------------------------------------------------

T = TypeVar("T")

_PART: sa.BindParameter[str] = sa.bindparam("w_part")


def _seen(table: sa.Table, depth: int, exact: bool = False) -> sa.ColumnElement[bool]:
    """A2A-GEN-3: the caller's partition and scope (prefix, or exact)."""
    return sa.and_(table.c.partition == _PART, visible(table, depth, exact))


def _paged(stmt: sa.Select[Any], offset: bool, limit: bool) -> sa.Select[Any]:
    if offset:
        stmt = stmt.offset(sa.bindparam("w_offset", type_=sa.BigInteger))
    if limit:
        stmt = stmt.limit(sa.bindparam("w_limit", type_=sa.BigInteger))
    return stmt


def _page_params(params: dict[str, Any], limit: int, offset: int = 0) -> tuple[bool, bool]:
    if offset > 0:
        params["w_offset"] = db_int(offset)
    if limit > 0:
        params["w_limit"] = db_int(limit)
    return offset > 0, limit > 0


@cache
def _by_key(table_name: str, depth: int, lock: Dialect | None = None) -> sa.Select[Any]:
    table = _TABLES[table_name]
    key = table.c.reply_with if table is a2a_asks else table.c.id
    stmt = sa.select(table).where(key == sa.bindparam("w_id"), _seen(table, depth))
    return lock.row_lock(stmt) if lock is not None else stmt


_TABLES = {t.name: t for t in (a2a_messages, a2a_conversations, a2a_deliveries, a2a_asks)}
_MESSAGE_BY_ID = sa.select(a2a_messages).where(a2a_messages.c.id == sa.bindparam("w_id"))
_INSERT = {name: sa.insert(table) for name, table in _TABLES.items()}
_CHARGE = (
    sa.update(a2a_conversations)
    .where(a2a_conversations.c.id == sa.bindparam("w_id"),
           a2a_conversations.c.hops_used == sa.bindparam("w_old"))
    .values(hops_used=sa.bindparam("w_hops"), participants=sa.bindparam("w_participants"),
            updated_at=sa.bindparam("w_now"))
)
_UPDATE_CONVERSATION = (
    sa.update(a2a_conversations)
    .where(a2a_conversations.c.id == sa.bindparam("w_id"))
    .values(
        protocol=sa.bindparam("w_protocol"),
        status=sa.bindparam("w_status"),
        hop_ceiling=sa.bindparam("w_ceiling"),
        deadline=sa.bindparam("w_deadline"),
        peer_node=sa.bindparam("w_node"),
        peer_context=sa.bindparam("w_context"),
        peer_key=sa.bindparam("w_peer_key"),
        updated_at=sa.bindparam("w_now"),
    )
)


@cache
def _list_messages(depth: int, exact: bool, conv: bool, offset: bool, limit: bool) -> sa.Select[Any]:
    t = a2a_messages
    conds = [_seen(t, depth, exact)]
    if conv:
        conds.append(t.c.conversation_id == sa.bindparam("w_conv"))
    return _paged(sa.select(t).where(*conds).order_by(t.c.created_at, t.c.id), offset, limit)


@cache
def _list_conversations(depth: int, exact: bool, status: bool, offset: bool, limit: bool) -> sa.Select[Any]:
    t = a2a_conversations
    conds = [_seen(t, depth, exact)]
    if status:
        conds.append(t.c.status == sa.bindparam("w_status"))
    stmt = sa.select(t).where(*conds).order_by(t.c.created_at.desc(), t.c.id.desc())
    return _paged(stmt, offset, limit)


@cache
def _by_peer(depth: int) -> sa.Select[Any]:
    t = a2a_conversations
    return (
        sa.select(t)
        .where(_seen(t, depth), t.c.peer_node == sa.bindparam("w_node"),
               t.c.peer_context == sa.bindparam("w_context"))
        .order_by(t.c.scope_depth, t.c.created_at, t.c.id)  # A2A-PEER-4
        .limit(1)
    )


@cache
def _inbox(depth: int, unread: bool, conv: bool, offset: bool, limit: bool) -> sa.Select[Any]:
    d, m = a2a_deliveries, a2a_messages
    conds = [
        _seen(d, depth),
        d.c.receiver_agent == sa.bindparam("w_agent"),
        d.c.receiver_node == "",  # A2A-INBOX-1: local receivers only
        d.c.state == _DELIVERED,  # A2A-INBOX-2
    ]
    if unread:
        conds.append(d.c.read_at.is_(None))
    if conv:  # A2A-INBOX-4: through the visible message
        conds.append(sa.exists().where(
            m.c.id == d.c.message_id, m.c.conversation_id == sa.bindparam("w_conv"), _seen(m, depth)
        ))
    return _paged(sa.select(d).where(*conds).order_by(d.c.created_at, d.c.id), offset, limit)


@cache
def _queued(limit: bool) -> sa.Select[Any]:
    d = a2a_deliveries
    stmt = sa.select(d).where(d.c.partition == _PART, d.c.state == _QUEUED).order_by(d.c.created_at, d.c.id)
    return _paged(stmt, False, limit)


def _stale(d: sa.Table) -> sa.ColumnElement[bool]:
    """A2A-RCL-2, against ``:w_cut``."""
    return sa.and_(d.c.partition == _PART, d.c.state == _DELIVERING, d.c.run_id.is_(None),
                   d.c.claimed_at < sa.bindparam("w_cut", type_=sa.BigInteger))


@cache
def _reclaim_candidates(limit: bool) -> sa.Select[Any]:
    d = a2a_deliveries
    stmt = sa.select(d.c.id, d.c.claim_token).where(_stale(d)).order_by(d.c.claimed_at, d.c.id)
    return _paged(stmt, False, limit)


_RECLAIM_ONE = (
    sa.update(a2a_deliveries)
    .where(a2a_deliveries.c.id == sa.bindparam("w_id"),
           a2a_deliveries.c.claim_token == sa.bindparam("w_token"), _stale(a2a_deliveries))
    .values(state=_QUEUED, claim_token=None, claimed_at=None, updated_at=sa.bindparam("w_now"))
)


@cache
def _expired_asks(depth: int | None, limit: bool) -> sa.Select[Any]:
    a = a2a_asks
    conds = [a.c.partition == _PART] if depth is None else [_seen(a, depth)]
    conds += [a.c.claimed_at.is_(None), a.c.deadline.is_not(None),
              a.c.deadline <= sa.bindparam("w_now", type_=sa.BigInteger)]
    stmt = sa.select(a).where(*conds).order_by(a.c.deadline, a.c.reply_with)  # A2A-ASK-8
    return _paged(stmt, False, limit)


@cache
def _pending_by_conversation(depth: int) -> sa.Select[Any]:
    a = a2a_asks
    return (
        sa.select(a)
        .where(_seen(a, depth), a.c.claimed_at.is_(None), a.c.conversation_id == sa.bindparam("w_conv"))
        .order_by(a.c.created_at, a.c.reply_with)  # A2A-ASK-13
    )


@cache
def _conditional_update(table_name: str, depth: int, what: str) -> sa.Update:
    """The claims: one UPDATE whose WHERE is the whole decision, returning
    the row as it wrote it."""
    t = _TABLES[table_name]
    return _conditional_update_of(t, depth, what).returning(*t.c)


def _conditional_update_of(t: sa.Table, depth: int, what: str) -> sa.Update:
    key = t.c.reply_with if t is a2a_asks else t.c.id
    mine = [key == sa.bindparam("w_id"), _seen(t, depth)]
    now: sa.BindParameter[Any] = sa.bindparam("w_now")
    if what == "claim":  # A2A-DLV-5
        return sa.update(t).where(*mine, t.c.state == _QUEUED).values(
            state=_DELIVERING, claim_token=sa.bindparam("w_token"), claimed_at=now, updated_at=now)
    if what == "bind":  # A2A-BIND-1
        return sa.update(t).where(
            *mine, t.c.state == _DELIVERING, t.c.claim_token == sa.bindparam("w_token"), t.c.run_id.is_(None)
        ).values(run_id=sa.bindparam("w_run"), updated_at=now)
    if what == "finish":  # A2A-DLV-11
        return sa.update(t).where(
            *mine, t.c.state == _DELIVERING, t.c.claim_token == sa.bindparam("w_token")
        ).values(state=sa.bindparam("w_state"), error=sa.bindparam("w_error"),
                 delivered_at=sa.bindparam("w_delivered"), updated_at=now)
    if what == "read":  # A2A-READ-1
        return sa.update(t).where(*mine, t.c.state == _DELIVERED, t.c.read_at.is_(None)).values(
            read_at=now, updated_at=now)
    if what == "ask":  # A2A-ASK-3
        return sa.update(t).where(*mine, t.c.claimed_at.is_(None)).values(claimed_at=now, updated_at=now)
    raise ValueError(what)


@cache
def _classify_read(table_name: str, depth: int, what: str) -> sa.Select[Any]:
    """The read that classifies a lost claim ``what``: the row, or only the
    column the refusal depends on where a loss is never a repeat (the
    delivery claim: ``state``; the ask claim: ``claimed_at``)."""
    t = _TABLES[table_name]
    column = {"claim": "state", "ask": "claimed_at"}.get(what)
    if column is None:
        return _by_key(table_name, depth)
    key = t.c.reply_with if t is a2a_asks else t.c.id
    return sa.select(t.c[column]).where(key == sa.bindparam("w_id"), _seen(t, depth))


@cache
def _transition(table_name: str, depth: int, what: str) -> tuple[sa.Update, sa.Select[Any]]:
    """The two statements of a claim ``what`` (one cache lookup a call)."""
    return _conditional_update(table_name, depth, what), _classify_read(table_name, depth, what)


def _rowcount(stmt: sa.Executable, params: dict[str, Any], conn: sa.Connection) -> int:
    """How many rows ``stmt`` changed (one re-checking step of a reclaim)."""
    return int(conn.execute(stmt, params).rowcount)


def _new_token() -> dict[str, str]:
    """A2A-DLV-6: the parameters of a claim's fresh, random token."""
    return {"w_token": secrets.token_hex(16)}


#: Internal: a claim's classifying read found the call a repeat; the row is the answer.
_REPEAT = object()


# -- the rows of the exactly-once classes (cortex_spec.a2a.A2ARows) -----------------------------


@cache
def _row_of(table_name: str, lock: Dialect | None) -> sa.Select[Any]:
    """One row by its key, over every scope and partition; ``lock``: ``FOR
    UPDATE`` (the rows a step decides on stay as read until it commits)."""
    t = _ROW_TABLES[table_name]
    key = t.c.reply_with if t is a2a_asks else (t.c.run_id if t is suspensions else t.c.id)
    stmt = sa.select(t).where(key == sa.bindparam("w_id"))
    return lock.row_lock(stmt) if lock is not None else stmt


_ROW_TABLES = {**_TABLES, runs.name: runs, suspensions.name: suspensions}
_PUT_ASK = (sa.update(a2a_asks).where(a2a_asks.c.reply_with == sa.bindparam("w_id"))
            .values(claimed_at=sa.bindparam("w_claimed"), updated_at=sa.bindparam("w_now")))
_PUT_CHARGE = (sa.update(a2a_conversations).where(a2a_conversations.c.id == sa.bindparam("w_id"))
               .values(hops_used=sa.bindparam("w_hops"), participants=sa.bindparam("w_participants"),
                       updated_at=sa.bindparam("w_now")))
_PUT_FINISH = (sa.update(a2a_deliveries).where(a2a_deliveries.c.id == sa.bindparam("w_id"))
               .values(state=sa.bindparam("w_state"), error=sa.bindparam("w_error"),
                       delivered_at=sa.bindparam("w_delivered"), updated_at=sa.bindparam("w_now")))


@cache
def _deferred(depth: int, after: bool) -> sa.Select[Any]:
    """A2A-DEFER-1/2: one SELECT of ids."""
    d = a2a_deliveries
    conds = [_seen(d, depth, exact=True), d.c.state == _DELIVERING, d.c.run_id.is_not(None)]
    if after:
        conds.append(d.c.id > sa.bindparam("w_after"))
    return sa.select(d.c.id).where(*conds).order_by(d.c.id).limit(sa.bindparam("w_limit", type_=sa.BigInteger))


@cache
def _agent_reply_runs(depth: int, after: bool) -> sa.Select[Any]:
    """A2A-AREPLY-1/2: one SELECT (one snapshot) over runs, suspensions and
    the resolutions of class a2a_resolutions."""
    from cortex_spec.a2a_resolutions import RESOLUTIONS
    from cortex_spec.runs import RunState
    from cortex_spec.suspensions import SuspensionReason

    from .schema import KIND_TABLES

    r, s, res = runs, suspensions, KIND_TABLES[RESOLUTIONS.name]
    pause = sa.exists().where(s.c.run_id == r.c.id)
    saved = sa.exists().where(s.c.run_id == r.c.id, visible(s, depth, exact=True),
                              s.c.reason == SuspensionReason.AGENT_REPLY.value)
    resolved = sa.exists().where(res.c.asker_run_id == r.c.id, visible(res, depth, exact=True),
                                 res.c.partition == _PART)
    conds = [visible(r, depth, exact=True), sa.or_(
        sa.and_(r.c.state == RunState.PAUSED.value, saved),
        sa.and_(r.c.state == RunState.RUNNING.value, ~pause, resolved),
    )]
    if after:
        conds.append(r.c.id > sa.bindparam("w_after"))
    return sa.select(r.c.id).where(*conds).order_by(r.c.id).limit(sa.bindparam("w_limit", type_=sa.BigInteger))


class SqlA2ARows:
    """:class:`cortex_spec.a2a.A2ARows` on SQL: with ``conn``, the statements
    of one open transaction, whose reads are ``SELECT … FOR UPDATE`` on
    PostgreSQL (SQLite's transaction holds the write lock from ``BEGIN
    IMMEDIATE``); without, each read is one statement of its own."""

    def __init__(self, store: A2AMixin, conn: sa.Connection | None = None) -> None:
        self.store = store
        self.conn = conn

    def _run(self, fn: Callable[[sa.Connection], T], write: bool = False) -> T:
        if self.conn is not None:
            return fn(self.conn)
        return self.store._write1(fn) if write else self.store._read(fn)

    def _get(self, table: sa.Table, key: str, decode_row: Callable[[Any], T]) -> T | None:
        stmt = _row_of(table.name, self.store._dialect if self.conn is not None else None)
        row = self._run(lambda conn: conn.execute(stmt, {"w_id": key}).one_or_none())
        return None if row is None else decode_row(row)

    def ask(self, reply_with: str) -> PendingAsk | None:
        return self._get(a2a_asks, reply_with, _ask_from_row)

    def put_ask(self, ask: PendingAsk) -> None:
        self._run(lambda conn: conn.execute(_PUT_ASK, {"w_id": ask.reply_with, "w_claimed": ms(ask.claimed_at),
                                                       "w_now": ms(ask.updated_at)}), write=True)

    def message(self, message_id: str) -> Envelope | None:
        return self._get(a2a_messages, message_id, _message_from_row)

    def conversation(self, conversation_id: str) -> Conversation | None:
        return self._get(a2a_conversations, conversation_id, _conversation_from_row)

    def admit(self, conversation: Conversation, envelope: Envelope) -> None:
        def write(conn: sa.Connection) -> None:
            conn.execute(_PUT_CHARGE, {"w_id": conversation.id, "w_hops": conversation.hops_used,
                                       "w_participants": _addresses_out(conversation.participants),
                                       "w_now": ms(conversation.updated_at)})
            conn.execute(_INSERT[a2a_messages.name], _message_row(envelope))  # a taken id: AlreadyExists

        self._run(write, write=True)

    def delivery(self, delivery_id: str) -> Delivery | None:
        return self._get(a2a_deliveries, delivery_id, _delivery_from_row)

    def put_delivery(self, delivery: Delivery) -> None:
        self._run(lambda conn: conn.execute(_PUT_FINISH, {
            "w_id": delivery.id, "w_state": DeliveryState(delivery.state).value, "w_error": delivery.error,
            "w_delivered": ms(delivery.delivered_at), "w_now": ms(delivery.updated_at)}), write=True)

    def insert_delivery(self, delivery: Delivery) -> None:
        self._run(lambda conn: conn.execute(_INSERT[a2a_deliveries.name], _delivery_row(delivery)), write=True)

    def run(self, run_id: str) -> Any:
        from .runs import run_from_row

        return self._get(runs, run_id, run_from_row)

    def suspension(self, run_id: str) -> Any:
        from .suspensions import _suspension_from_row

        return self._get(suspensions, run_id, _suspension_from_row)

    def _ids(self, stmt: sa.Select[Any], scope: Scope, partition: str, after: str | None, limit: int) -> list[str]:
        params = {"w_part": partition, **scope_params(scope), "w_limit": db_int(limit)}
        if after is not None:
            params["w_after"] = after
        return self._run(lambda conn: [str(row.id) for row in conn.execute(stmt, params)])

    def deferred(self, scope: Scope, partition: str, after: str | None, limit: int) -> list[str]:
        return self._ids(_deferred(scope.depth, after is not None), scope, partition, after, limit)

    def agent_reply_runs(self, scope: Scope, partition: str, after: str | None, limit: int) -> list[str]:
        return self._ids(_agent_reply_runs(scope.depth, after is not None), scope, partition, after, limit)


class A2AMixin(SqlStoreBase):
    # -- helpers -------------------------------------------------------------------------

    def _a2a_rows(self, storage: Any = None) -> SqlA2ARows:
        """The a2a rows of the exactly-once classes, in the transaction of
        ``storage`` (a :class:`.kinds.SqlStorage` of ``Storage.atomic``)."""
        return SqlA2ARows(self, getattr(storage, "conn", None))

    @staticmethod
    def _a2a_params(ctx: Context, **extra: Any) -> dict[str, Any]:
        return {"w_part": ctx.partition, **scope_binds(ctx.scope), **extra}

    def _a2a_get(self, table: sa.Table, ctx: Context, key: str, decode_row: Callable[[Any], T],
                 not_found: type[CortexError], what: str) -> T:
        return self._read_one(_by_key(table.name, ctx.scope.depth), self._a2a_params(ctx, w_id=key),
                              decode_row, lambda: not_found(f"{what} {key} not found"))

    def _a2a_claim(self, table: sa.Table, ctx: Context, key: str, what: str, params: dict[str, Any],
                   decode_row: Callable[[Any], T], classify: Callable[[Any], object],
                   fresh: Callable[[], dict[str, Any]] | None = None) -> T:
        """Run the conditional ``UPDATE ... RETURNING`` ``what`` (one statement,
        no explicit transaction); on a win return the row as written.  A loss
        is ``classify(row or None)`` of the row read afresh (raw columns: a
        refusal decodes nothing): the refusal to raise, ``_REPEAT`` (give the
        row back decoded), or None (possible after all: attempt again).  On
        SQLite the read comes first, and the UPDATE only on None
        (:meth:`.store.SqlStoreBase._contended`, which also takes ``fresh``)."""
        update, read = _transition(table.name, ctx.scope.depth, what)
        params = self._a2a_params(ctx, w_id=key, **params)
        won, row, verdict = self._contended(update, read, params, classify, f"the {what} of {{}}", key,
                                            _ATTEMPTS, fresh)
        if won or verdict is _REPEAT:
            return decode_row(row)  # A2A-DLV-5: the row as the claim wrote it; or the repeat's
        if isinstance(verdict, CortexError):
            try:
                raise verdict
            finally:
                del verdict  # no cycle through this frame (see store.SqlStoreBase._contended)
        raise StoreError(f"the {what} of {key} was classified as {verdict!r}")

    # -- messages (A2A-ENV, A2A-HOP) -----------------------------------------------------------

    def record_message(self, ctx: Context, envelope: Envelope) -> Envelope:
        require_scope(ctx)
        now = self._now()
        candidate = validate_new_envelope(envelope, ctx, now)  # A2A-ENV-2, before storage
        lock = _by_key(a2a_conversations.name, ctx.scope.depth, self._dialect)
        params = self._a2a_params(ctx, w_id=candidate.conversation_id)

        def admission(conn: sa.Connection) -> Envelope:
            row = conn.execute(lock, params).one_or_none()  # the conversation, row-locked
            if row is None:
                raise ConversationNotFound(f"conversation {candidate.conversation_id} not found")
            existing = conn.execute(_MESSAGE_BY_ID, {"w_id": candidate.id}).one_or_none()
            if existing is not None:
                stored = _message_from_row(existing)
                if same_envelope(stored, candidate):
                    return stored  # A2A-HOP-3: nothing written
                raise AlreadyExists(f"message {candidate.id} already exists")  # A2A-HOP-4
            conversation = _conversation_from_row(row)
            if conversation.status != ConversationStatus.OPEN:
                raise ConversationClosed(f"conversation {conversation.id} is not open")
            if conversation.hops_used + 1 > conversation.hop_ceiling:
                raise HopCeilingExceeded(
                    f"conversation {conversation.id} used its {conversation.hop_ceiling} hops")
            charged, stored = admit(conversation, candidate, now)  # A2A-HOP-8
            charge = conn.execute(_CHARGE, {
                "w_id": conversation.id, "w_old": conversation.hops_used, "w_hops": charged.hops_used,
                "w_participants": _addresses_out(charged.participants), "w_now": ms(now),
            })
            if charge.rowcount != 1:
                raise StoreError(f"conversation {conversation.id} changed under its row lock")
            conn.execute(_INSERT[a2a_messages.name], _message_row(stored))
            return stored

        return self._tx(admission)

    def get_message(self, ctx: Context, message_id: str) -> Envelope:
        require_scope(ctx)
        ids.check_id(message_id, ids.MESSAGE, "message_id")
        return self._a2a_get(a2a_messages, ctx, message_id, _message_from_row, MessageNotFound, "message")

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
        params = self._a2a_params(ctx, w_conv=conv)
        has_offset, has_limit = _page_params(params, limit, offset)
        stmt = _list_messages(ctx.scope.depth, exact, conv is not None, has_offset, has_limit)
        return self._read(lambda conn: [_message_from_row(r) for r in conn.execute(stmt, params)])

    # -- conversations (A2A-CONV, A2A-PEER) -------------------------------------------------------

    def create_conversation(self, ctx: Context, conversation: Conversation) -> Conversation:
        require_scope(ctx)
        stored = validate_new_conversation(conversation, ctx, self._now())
        row = _conversation_row(stored)
        # A2A-CONV-1 / A2A-PEER-3: the primary key and the unique peer_key
        self._write1(lambda conn: conn.execute(_INSERT[a2a_conversations.name], row))
        return stored

    def get_conversation(self, ctx: Context, conversation_id: str) -> Conversation:
        require_scope(ctx)
        ids.check_id(conversation_id, ids.CONVERSATION, "conversation_id")
        return self._a2a_get(a2a_conversations, ctx, conversation_id, _conversation_from_row,
                         ConversationNotFound, "conversation")

    def get_conversation_by_peer_context(self, ctx: Context, node: str, peer_context: str) -> Conversation:
        require_scope(ctx)
        check_short_str(node, "node")
        check_short_str(peer_context, "peer_context")
        if node == "" or peer_context == "":  # A2A-PEER-1: no storage access
            raise ConversationNotFound("no conversation for an empty peer thread")
        params = self._a2a_params(ctx, w_node=node, w_context=peer_context)
        return self._read_one(_by_peer(ctx.scope.depth), params, _conversation_from_row,
                              lambda: ConversationNotFound("no conversation for this peer thread"))

    def update_conversation(self, ctx: Context, conversation: Conversation) -> Conversation:
        require_scope(ctx)
        conversation_id, fields = validate_conversation_update(conversation)
        now = self._now()
        lock = _by_key(a2a_conversations.name, ctx.scope.depth, self._dialect)
        params = self._a2a_params(ctx, w_id=conversation_id)

        def update(conn: sa.Connection) -> Conversation:
            row = conn.execute(lock, params).one_or_none()
            if row is None:
                raise ConversationNotFound(f"conversation {conversation_id} not found")
            current = _conversation_from_row(row)
            if current.status != ConversationStatus.OPEN and fields["status"] != current.status:
                raise InvalidState(f"conversation {conversation_id} is {ConversationStatus(current.status).value}")  # A2A-CONV-7
            updated = updated_conversation(current, fields, now)  # RSC-GEN-13, under the row lock
            conn.execute(_UPDATE_CONVERSATION, {
                "w_id": conversation_id,
                "w_protocol": updated.protocol,
                "w_status": ConversationStatus(updated.status).value,
                "w_ceiling": updated.hop_ceiling,
                "w_deadline": ms(updated.deadline),
                "w_node": updated.peer_node,
                "w_context": updated.peer_context,
                "w_peer_key": _peer_key(updated.scope, updated.partition, updated.peer_node,
                                        updated.peer_context),
                "w_now": ms(now),
            })  # a pair taken by another conversation: the unique peer_key, AlreadyExists
            return updated

        return self._tx(update)

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
        params = self._a2a_params(ctx, w_status=None if wanted is None else wanted.value)
        has_offset, has_limit = _page_params(params, limit, offset)
        stmt = _list_conversations(ctx.scope.depth, exact, wanted is not None, has_offset, has_limit)
        return self._read(lambda conn: [_conversation_from_row(r) for r in conn.execute(stmt, params)])

    # -- deliveries (A2A-DLV, A2A-BIND, A2A-READ) ---------------------------------------------------

    def create_delivery(self, ctx: Context, delivery: Delivery) -> Delivery:
        require_scope(ctx)
        stored = validate_new_delivery(delivery, ctx, self._now())
        row = _delivery_row(stored)
        self._write1(lambda conn: conn.execute(_INSERT[a2a_deliveries.name], row))
        return stored

    def get_delivery(self, ctx: Context, delivery_id: str) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        return self._a2a_get(a2a_deliveries, ctx, delivery_id, _delivery_from_row, DeliveryNotFound, "delivery")

    def claim_delivery(self, ctx: Context, delivery_id: str) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        now = self._now_ms()

        def classify(d: Any) -> object:
            if d is None:
                return DeliveryNotFound(f"delivery {delivery_id} not found")  # A2A-DLV-8
            if d.state != _QUEUED:
                return DeliveryAlreadyClaimed(f"delivery {delivery_id} is not queued")  # A2A-DLV-7
            return None

        # A2A-DLV-6: a fresh, random token for every claim (made only to write it)
        return self._a2a_claim(a2a_deliveries, ctx, delivery_id, "claim", {"w_now": now}, _delivery_from_row,
                               classify, _new_token)

    def bind_delivery_run(self, ctx: Context, delivery_id: str, claim_token: str, run_id: str) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        check_claim_token(claim_token)
        ids.check_id(run_id, ids.RUN, "run_id")
        now = ms(self._now())

        def classify(d: Any) -> object:
            if d is None:
                return DeliveryNotFound(f"delivery {delivery_id} not found")
            if d.state != _DELIVERING or d.claim_token != claim_token:
                return DeliveryClaimLost(f"the claim on delivery {delivery_id} is lost")  # A2A-BIND-3
            if d.run_id == run_id:
                return _REPEAT  # A2A-BIND-4: a repeat
            if d.run_id is not None:
                return DeliveryAlreadyBound(f"delivery {delivery_id} is bound to another run")
            return None

        return self._a2a_claim(a2a_deliveries, ctx, delivery_id, "bind",
                           {"w_now": now, "w_token": claim_token, "w_run": run_id}, _delivery_from_row,
                           classify)

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
        now = ms(self._now())

        def classify(d: Any) -> object:
            if d is None:
                return DeliveryNotFound(f"delivery {delivery_id} not found")
            if d.claim_token == claim_token and d.state == state.value and d.error == error:
                return _REPEAT  # A2A-DLV-12: a repeat
            if d.state != _DELIVERING or d.claim_token != claim_token:
                return DeliveryClaimLost(f"the claim on delivery {delivery_id} is lost")  # A2A-DLV-13
            return None

        params = {"w_now": now, "w_token": claim_token, "w_state": state.value, "w_error": error,
                  "w_delivered": now if state == DeliveryState.DELIVERED else None}
        return self._a2a_claim(a2a_deliveries, ctx, delivery_id, "finish", params, _delivery_from_row, classify)

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
        params = self._a2a_params(ctx, w_agent=agent, w_conv=conv)
        has_offset, has_limit = _page_params(params, limit, offset)
        stmt = _inbox(ctx.scope.depth, unread_only, conv is not None, has_offset, has_limit)
        return self._read(lambda conn: [_delivery_from_row(r) for r in conn.execute(stmt, params)])

    def mark_delivery_read(self, ctx: Context, delivery_id: str) -> Delivery:
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        now = ms(self._now())

        def classify(d: Any) -> object:
            if d is None:
                return DeliveryNotFound(f"delivery {delivery_id} not found")
            if d.state != _DELIVERED:
                return InvalidState(f"delivery {delivery_id} is {d.state}, not delivered")
            if d.read_at is not None:
                return _REPEAT  # A2A-READ-2: the first read time stays
            return None

        return self._a2a_claim(a2a_deliveries, ctx, delivery_id, "read", {"w_now": now}, _delivery_from_row,
                           classify)

    def list_queued_deliveries(self, ctx: Context, limit: int = 0) -> list[Delivery]:
        require_context(ctx)  # A2A-GEN-2: any scope, zero included
        limit, _ = check_page(limit)
        params = {"w_part": ctx.partition}
        _, has_limit = _page_params(params, limit)
        stmt = _queued(has_limit)
        return self._read(lambda conn: [_delivery_from_row(r) for r in conn.execute(stmt, params)])

    def reclaim_stale_deliveries(self, ctx: Context, older_than: datetime, limit: int = 0) -> int:
        require_context(ctx)  # A2A-RCL-1: scope ignored, partition kept
        cutoff = ms(check_instant(older_than, "older_than"))
        limit, _ = check_page(limit)
        now = ms(self._now())
        params = {"w_part": ctx.partition, "w_cut": cutoff}
        _, has_limit = _page_params(params, limit)
        select = _reclaim_candidates(has_limit)
        candidates = self._read(lambda conn: [(r.id, r.claim_token) for r in conn.execute(select, params)])
        # A2A-RCL-5: one atomic, re-checking step per row
        return self._a2a_move_each(_RECLAIM_ONE, [
            {"w_part": ctx.partition, "w_cut": cutoff, "w_id": delivery_id, "w_token": token, "w_now": now}
            for delivery_id, token in candidates])

    def _a2a_move_each(self, move: sa.Executable, steps: list[dict[str, Any]]) -> int:
        """Run the reclaim's ``move`` once per candidate's parameters, each its
        own atomic statement; how many rows they moved.  A step that fails
        (a lost connection: that step happened entirely or not at all) ends
        the call with ``StoreError`` saying how many earlier steps stand
        (A2A-RCL-8: the batch is not one atomic step)."""
        moved = 0
        for done, params in enumerate(steps):
            try:
                moved += self._write1(functools.partial(_rowcount, move, params))
            except StoreError as exc:
                if done == 0:
                    raise
                raise StoreError(f"{exc} (that step only: {done} earlier steps of this reclaim stand, "
                                 f"having moved {moved} of its {len(steps)} candidates)") from exc
        return moved

    # -- pending asks (A2A-ASK) -------------------------------------------------------------------

    def create_pending_ask(self, ctx: Context, ask: PendingAsk) -> PendingAsk:
        require_scope(ctx)
        stored = validate_new_pending_ask(ask, ctx, self._now())
        row = _ask_row(stored)
        self._write1(lambda conn: conn.execute(_INSERT[a2a_asks.name], row))  # A2A-ASK-1
        return stored

    def get_pending_ask(self, ctx: Context, reply_with: str) -> PendingAsk:
        require_scope(ctx)
        check_reply_with(reply_with)
        return self._a2a_get(a2a_asks, ctx, reply_with, _ask_from_row, AskNotFound, "pending ask")

    def claim_pending_ask(self, ctx: Context, reply_with: str) -> PendingAsk:
        require_scope(ctx)
        check_reply_with(reply_with)
        now = ms(self._now())

        def classify(a: Any) -> object:
            if a is None:
                return AskNotFound(f"pending ask {reply_with} not found")  # A2A-ASK-5
            if a.claimed_at is not None:
                return AskAlreadyClaimed(f"the ask {reply_with} is already claimed")  # A2A-ASK-4
            return None

        return self._a2a_claim(a2a_asks, ctx, reply_with, "ask", {"w_now": now}, _ask_from_row, classify)

    def _a2a_expired_asks(self, ctx: Context, now: object, limit: object, depth: int | None) -> list[PendingAsk]:
        cutoff = ms(check_instant(now, "now"))
        limit, _ = check_page(limit)
        params = {"w_part": ctx.partition, "w_now": cutoff}
        if depth is not None:
            params.update(scope_params(ctx.scope))
        _, has_limit = _page_params(params, limit)
        stmt = _expired_asks(depth, has_limit)
        return self._read(lambda conn: [_ask_from_row(r) for r in conn.execute(stmt, params)])

    def list_expired_asks(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        require_scope(ctx)
        return self._a2a_expired_asks(ctx, now, limit, ctx.scope.depth)

    def list_expired_asks_across_scopes(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        require_context(ctx)  # A2A-ASK-12: no scope check, no scope filter
        return self._a2a_expired_asks(ctx, now, limit, None)

    def list_pending_asks_by_conversation(self, ctx: Context, conversation_id: str) -> list[PendingAsk]:
        require_scope(ctx)
        ids.check_id(conversation_id, ids.CONVERSATION, "conversation_id")
        stmt = _pending_by_conversation(ctx.scope.depth)
        params = self._a2a_params(ctx, w_conv=conversation_id)
        return self._read(lambda conn: [_ask_from_row(r) for r in conn.execute(stmt, params)])
