"""The mutant zoo: realistic bugs a backend author could write.

Each mutant is the reference store with one bug (concurrency.md §4 and the
upstream mutants table).  ``tests/test_zoo.py`` certifies every one and
asserts that certification rejects it, recording which clause or machine
caught it first and how long that took.  A mutant the suite lets through is
a bug in the suite.

Every mutant is usable as a store: ``--cortex-store mutants:<name>`` (with
``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import attrs

from cortex_spec.a2a import (
    MAX_PAGE,
    Address,
    ConversationStatus,
    DeliveryState,
    admit,
    ask_expired,
    check_claim_token,
    check_finish_state,
    check_reply_with,
    same_envelope,
    validate_new_envelope,
    visible,
)
from cortex_spec.checkpoints import CheckpointState
from cortex_spec.clock import to_instant
from cortex_spec.context import require_context, require_scope
from cortex_spec.entities import detach, replace
from cortex_spec.errors import (
    AlreadyExists,
    AskAlreadyClaimed,
    AskResolutionConflict,
    AskResolutionNotFound,
    CheckpointNotFound,
    ConversationClosed,
    ConversationNotFound,
    DeliveryAlreadyClaimed,
    DeliveryClaimLost,
    HopCeilingExceeded,
    InvalidState,
    LeaseHeld,
    NotSuspended,
    SuspensionExpired,
)
from cortex_spec.errors import InvalidArgument, OverlayNotFound, StoreError
from cortex_spec.kinds import BY_NAME_ORDER, Crud, Query, listing_query, sort_rows, update_fields
from cortex_spec.reference import MemoryMedium, MemoryStore
from cortex_spec.reference.a2a import MemoryA2ARows
from cortex_spec.reference.kinds import MemoryStorage
from cortex_spec.reference.harness import ReferenceHarness
from cortex_spec.runs import RUNS, RunFilter, RunState
from cortex_spec.suspensions import resume_eligible
from cortex_spec import ids
from cortex_spec.checkpoints import validate_decision
from cortex_spec.validation import check_bool, check_instant, check_page, page
from cortex_spec.gateway import (
    ItemStatus,
    check_cutoff,
    check_key,
    check_queue_page,
    check_reply,
    check_reply_fits,
    rfc3339_nano,
)
from cortex_spec.reference import MemoryGateway
from cortex_spec.reference import gateway as refgw

#: the gap a read-then-write bug leaves between its read and its write
GAP = 0.002


class ReadThenWriteClaim(MemoryStore):
    """claim_suspension checks the run, lets go of the lock, then writes."""

    def claim_suspension(self, ctx, run_id):
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._tx() as t:
            now = self._now()
            s = self._visible_suspension(t, scope, run_id)
            if not resume_eligible(s.expires_at, now):
                raise SuspensionExpired("expired")
            run = t.runs.get(run_id)
            if run is None or not scope.covers(run.scope) or run.state != RunState.PAUSED:
                raise NotSuspended("not paused")
        time.sleep(GAP)
        with self._tx() as t:
            run = t.runs.get(run_id)
            if run is not None:  # (deleted meanwhile: the bug writes nothing)
                t.runs[run_id] = replace(run, state=RunState.RUNNING, updated_at=now, revision=run.revision + 1)
            return detach(s)


class DeadlineOnResumeSide(MemoryStore):
    """At the deadline instant the resume claim still wins (``<`` for ``<=``)."""

    def claim_suspension(self, ctx, run_id):
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._tx() as t:
            now = self._now()
            s = self._visible_suspension(t, scope, run_id)
            if s.expires_at is not None and s.expires_at < now:
                raise SuspensionExpired("expired")
            self._move_paused_run(t, scope, run_id, now)
            return detach(s)

    def claim_expired_suspension(self, ctx, run_id, now):
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        cutoff = check_instant(now, "now")
        with self._tx() as t:
            s = self._visible_suspension(t, scope, run_id)
            if s.expires_at is None or s.expires_at >= cutoff:
                raise NotSuspended("not expired")
            self._move_paused_run(t, scope, run_id, self._now())
            return detach(s)


class _HandListedRuns(MemoryStore):
    """list_runs/count_runs by hand over the medium's runs (the listing's
    own query: visibility, filters, order, page), for mutants that change
    one part of it (``_selects``, the order)."""

    def _selects(self, query, run):
        return query.scope.covers(run.scope) and (not query.exact or run.scope == query.scope)

    def _select_runs(self, ctx, flt):
        query = listing_query(RUNS, RUNS.listing("list_runs"), ctx, {}, flt)
        with self._tx() as t:
            rows = [r for r in t.runs.values() if self._selects(query, r)
                    and all(getattr(r, n) == v for n, v in query.where)]
        return rows, query

    def list_runs(self, ctx, filter=None):
        rows, query = self._select_runs(ctx, filter)
        return [detach(r) for r in page(sort_rows(rows, query.order), query.limit, query.offset)]

    def count_runs(self, ctx, filter=None):
        return len(self._select_runs(ctx, filter)[0])


class PrefixConfusion(_HandListedRuns):
    """Lists match scopes as strings: ``ws=w1`` also sees ``ws=w10`` (a SQL
    ``LIKE canonical || '%'``)."""

    def _selects(self, query, run):
        return run.scope.canonical().startswith(query.scope.canonical()) and (
            not query.exact or run.scope == query.scope)


class ExactPagedBeforeExactFilter(MemoryStore):
    """list_runs with ``exact=True`` pages the prefix-visible matching runs,
    then keeps those at exactly the caller's scope: offset and limit count
    the descendants' runs."""

    def list_runs(self, ctx, filter=None):
        scope = require_scope(ctx)
        if not isinstance(filter, RunFilter) or filter.exact is not True:
            return super().list_runs(ctx, filter)
        return [r for r in super().list_runs(ctx, attrs.evolve(filter, exact=False)) if r.scope == scope]


class UpdateRewritesScope(MemoryStore):
    """update_run writes the object's scope too (when it has one)."""

    def update_run(self, ctx, run):
        stored = super().update_run(ctx, run)
        if isinstance(run.scope, type(ctx.scope)) and not run.scope.is_zero:
            with self._tx() as t:
                t.runs[run.id] = replace(t.runs[run.id], scope=run.scope)
                return detach(t.runs[run.id])
        return stored


class UpdateWidensScope(MemoryStore):
    """An update from an ancestor moves the row up to the caller's scope."""

    def update_run(self, ctx, run):
        super().update_run(ctx, run)
        with self._tx() as t:
            t.runs[run.id] = replace(t.runs[run.id], scope=ctx.scope)
            return detach(t.runs[run.id])


class FlipThenReject(MemoryStore):
    """The claim moves the run to running before it checks the deadline, and
    leaves it there when it then refuses (the Go Mongo comment's hazard)."""

    def claim_suspension(self, ctx, run_id):
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._tx() as t:
            now = self._now()
            s = self._visible_suspension(t, scope, run_id)
            self._move_paused_run(t, scope, run_id, now)
            if not resume_eligible(s.expires_at, now):
                raise SuspensionExpired("expired")
            return detach(s)


class NoTieBreak(_HandListedRuns):
    """list_runs orders by created_at only; ties come out in table order."""

    def list_runs(self, ctx, filter=None):
        rows, query = self._select_runs(ctx, filter)
        rows.sort(key=lambda r: r.created_at, reverse=True)
        return [detach(r) for r in page(rows, query.limit, query.offset)]


class ResolveReadThenWrite(MemoryStore):
    """resolve checks 'pending', lets go, then writes: two deciders both win."""

    def resolve(self, ctx, checkpoint_id, decision):
        scope = require_scope(ctx)
        ids.check_id(checkpoint_id, ids.CHECKPOINT, "checkpoint_id")
        decision = validate_decision(decision)
        with self._tx() as t:
            cp = t.kind_checkpoints.get(checkpoint_id)
            if cp is None or not scope.covers(cp.scope):
                raise CheckpointNotFound("not found")
            if cp.state != CheckpointState.PENDING:
                raise InvalidState("resolved")
            now = self._now()
        time.sleep(GAP)
        with self._tx() as t:
            cp = t.kind_checkpoints[checkpoint_id]
            resolved = replace(cp, state=CheckpointState.RESOLVED,
                               decision=replace(decision, decided_at=now), updated_at=now)
            t.kind_checkpoints[checkpoint_id] = resolved
            return detach(resolved)


class CheckpointScopeIndexedWhole(MemoryStore):
    """create_checkpoint indexes the whole canonical scope, as a btree with
    an entry limit would (SCOPE-CANON-6): a row at a long valid scope is
    refused with a storage error."""

    def create_checkpoint(self, ctx, cp):
        scope = require_scope(ctx)
        if len(scope.canonical().encode("utf-8")) > 2704:
            raise StoreError("index row size exceeds btree version 4 maximum 2704")
        return super().create_checkpoint(ctx, cp)


class CheckpointStepIndexOffByOne(MemoryStore):
    """create_checkpoint bounds step_index with an exclusive 2**63 - 1 (an
    off-by-one): the largest 64-bit counter is refused."""

    def create_checkpoint(self, ctx, checkpoint):
        require_scope(ctx)
        if getattr(checkpoint, "step_index", None) == 2**63 - 1:
            raise InvalidArgument("checkpoint.step_index must be below 2**63 - 1")
        return super().create_checkpoint(ctx, checkpoint)


class ResolveOverwrites(MemoryStore):
    """resolve is unconditional, as upstream: a second decision replaces the first."""

    def resolve(self, ctx, checkpoint_id, decision):
        scope = require_scope(ctx)
        ids.check_id(checkpoint_id, ids.CHECKPOINT, "checkpoint_id")
        decision = validate_decision(decision)
        with self._tx() as t:
            cp = t.kind_checkpoints.get(checkpoint_id)
            if cp is None or not scope.covers(cp.scope):
                raise CheckpointNotFound("not found")
            now = self._now()
            resolved = replace(cp, state=CheckpointState.RESOLVED,
                               decision=replace(decision, decided_at=now), updated_at=now)
            t.kind_checkpoints[checkpoint_id] = resolved
            return detach(resolved)


def _pending_rows(store, ctx, flt, keep):
    """The pending-list query with its selection split: ``keep(scope, run_id,
    cp)`` says which rows the mutant's query selects before it pages; the
    rest of the selection (run filter, visibility, state) is applied to the
    page."""
    from cortex_spec.checkpoints import CHECKPOINTS
    from cortex_spec.kinds import listing_query

    query = listing_query(CHECKPOINTS, CHECKPOINTS.listing("list_pending"), ctx, {}, flt)
    scope, run_id = query.scope, dict(query.where).get("run_id")
    with store._tx() as t:
        rows = sorted((cp for cp in t.kind_checkpoints.values() if keep(scope, run_id, cp)),
                      key=lambda cp: (cp.created_at, cp.id))
    return [detach(cp) for cp in page(rows, query.limit, query.offset)
            if cp.state == CheckpointState.PENDING and scope.covers(cp.scope)
            and (run_id is None or cp.run_id == run_id)]


class PendingPagedBeforeRunFilter(MemoryStore):
    """list_pending pages the visible pending rows of every run, then keeps
    the filter's run: a page from offset 1 of one run's checkpoints is short
    or wrong when other runs' rows sit between them."""

    def list_pending(self, ctx, filter=None):
        return _pending_rows(self, ctx, filter,
                             lambda scope, run_id, cp: cp.state == CheckpointState.PENDING and scope.covers(cp.scope))


class PendingPagedOverResolved(MemoryStore):
    """list_pending pages the visible rows of both states, then drops the
    resolved ones: offset and limit count resolved checkpoints too."""

    def list_pending(self, ctx, filter=None):
        return _pending_rows(self, ctx, filter, lambda scope, run_id, cp: scope.covers(cp.scope)
                             and (run_id is None or cp.run_id == run_id))


class SuspensionPerScope(MemoryStore):
    """One suspension per run *per scope* (upstream's partial index, misread)."""

    def create_suspension(self, ctx, suspension):
        require_scope(ctx)
        with self._tx() as t:
            run_id = getattr(suspension, "run_id", None)
            existing = t.suspensions.get(run_id) if isinstance(run_id, str) else None
            if existing is not None and existing.scope != ctx.scope:
                del t.suspensions[existing.run_id]  # the new row shadows the other scope's
                del t.suspension_ids[existing.id]
        return super().create_suspension(ctx, suspension)


class NoMillisecondTruncation(MemoryStore):
    """Stores the clock's microseconds (a PostgreSQL timestamp column)."""

    def _now(self):
        return to_instant(self.clock.now()).replace(microsecond=self.clock.now().microsecond)


class SweepSeesCallerScope(MemoryStore):
    """list_expired_across_scopes filters by the caller's scope after all."""

    def list_expired_across_scopes(self, ctx, now, limit=0):
        rows = super().list_expired_across_scopes(ctx, now, 0)
        scope = require_context(ctx).scope
        rows = [r for r in rows if scope.is_zero or scope.covers(r.scope)]
        limit, _ = check_page(limit)
        return page(rows, limit, 0)


class TornUpdate(MemoryStore):
    """update_run writes field by field, letting go of the lock in between."""

    def update_run(self, ctx, run):
        scope = require_scope(ctx)
        run_id, fields = update_fields(RUNS, run)
        with self._tx() as t:
            stored = t.runs.get(run_id)
            if stored is None or not scope.covers(stored.scope):
                return super().update_run(ctx, run)
            now = self._now()
        for name, value in fields.items():
            with self._tx() as t:
                t.runs[run_id] = replace(t.runs[run_id], **{name: detach(value)}, updated_at=now)
            time.sleep(GAP / 10)
        return self.get_run(ctx, run_id)


class _PaddedToolNameStorage(MemoryStorage):
    def insert(self, table, entity):
        if table.name == "tool_calls":  # CHAR semantics: trailing spaces are padding
            entity = attrs.evolve(entity, tool_name=entity.tool_name.rstrip(" "))
        super().insert(table, entity)


class ToolNameInPaddedColumn(MemoryStore):
    """A tool call's name is kept in a space-padded column: it reads back
    without its trailing spaces (create still returns the name as given)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._crud = Crud(_PaddedToolNameStorage(self), self._now)


class ExpiredLimitBeforeScope(MemoryStore):
    """list_expired takes the first ``limit`` expired rows of every scope and
    keeps the visible ones: the limit counts rows the caller cannot see."""

    def list_expired(self, ctx, now, limit=0):
        scope = require_scope(ctx)
        return [s for s in super().list_expired_across_scopes(ctx, now, limit) if scope.covers(s.scope)]


class ClaimStampsPrincipal(MemoryStore):
    """Both suspension claims write the claimer's ``ctx.principal`` into the
    run they resume (the run's principal is the creator's, never written)."""

    def claim_suspension(self, ctx, run_id):
        require_scope(ctx)  # the zero scope and a bad id are refused before the storage is touched
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._tx() as t:
            s = super().claim_suspension(ctx, run_id)
            t.runs[run_id] = replace(t.runs[run_id], principal=ctx.principal)
            return s

    def claim_expired_suspension(self, ctx, run_id, now):
        require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        check_instant(now, "now")
        with self._tx() as t:
            s = super().claim_expired_suspension(ctx, run_id, now)
            t.runs[run_id] = replace(t.runs[run_id], principal=ctx.principal)
            return s


# -- class a2a -------------------------------------------------------------------------


class HopCheckThenWrite(MemoryStore):
    """record_message checks the hop budget, lets go of the lock, then writes
    the envelope and a plain conversation update (the upstream bus)."""

    def record_message(self, ctx, envelope):
        require_scope(ctx)
        with self._tx() as t:
            now = self._now()
            candidate = validate_new_envelope(envelope, ctx, now)
            conv = self._visible_row(t.a2a_conversations, ctx, candidate.conversation_id,
                                     ConversationNotFound, "conversation")
            existing = t.a2a_messages.get(candidate.id)
            if existing is not None:
                if same_envelope(existing, candidate):
                    return detach(existing)
                raise AlreadyExists("message exists")
            if conv.status != ConversationStatus.OPEN:
                raise ConversationClosed("closed")
            if conv.hops_used + 1 > conv.hop_ceiling:
                raise HopCeilingExceeded("no hops left")
            charged, stored = admit(conv, candidate, now)
        time.sleep(GAP)
        with self._tx() as t:
            t.a2a_conversations[charged.id] = charged  # the count read before the gap
            t.a2a_messages[stored.id] = stored
            return detach(stored)


class ReclaimWithoutRecheck(MemoryStore):
    """reclaim selects the stale rows, lets go, then moves each one that is
    still delivering, without re-checking its token or staleness (upstream)."""

    def reclaim_stale_deliveries(self, ctx, older_than, limit=0):
        cutoff, limit = self._reclaim_args(ctx, older_than, limit)
        with self._tx() as t:
            candidates = self._candidates(t, ctx.partition, cutoff, limit)
        time.sleep(GAP)
        moved = 0
        for delivery_id, _token in candidates:
            with self._tx() as t:
                d = t.a2a_deliveries[delivery_id]
                if d.state == DeliveryState.DELIVERING:
                    t.a2a_deliveries[delivery_id] = replace(
                        d, state=DeliveryState.QUEUED, claim_token=None, claimed_at=None,
                        updated_at=self._now())
                    moved += 1
        return moved


class AskClaimReadThenWrite(MemoryStore):
    """claim_pending_ask checks 'unclaimed', lets go, then writes: a reply and
    the deadline sweep both resume the run."""

    def claim_pending_ask(self, ctx, reply_with):
        require_scope(ctx)
        check_reply_with(reply_with)
        with self._tx() as t:
            ask = self._ask(t, ctx, reply_with)
            if ask.claimed_at is not None:
                raise AskAlreadyClaimed("claimed")
            now = self._now()
        time.sleep(GAP)
        with self._tx() as t:
            claimed = replace(t.a2a_asks[reply_with], claimed_at=now, updated_at=now)
            t.a2a_asks[reply_with] = claimed
            return detach(claimed)


class InboxShowsQueued(MemoryStore):
    """list_inbox filters by receiver only: queued and in-flight rows show up
    before they were delivered."""

    def list_inbox(self, ctx, agent, *, unread_only=False, conversation_id=None, limit=0, offset=0):
        rows = super().list_inbox(ctx, agent, unread_only=unread_only, conversation_id=conversation_id)
        me = Address(agent, "")
        with self._tx() as t:
            extra = [d for d in t.a2a_deliveries.values()
                     if visible(ctx, d) and d.receiver == me
                     and d.state in (DeliveryState.QUEUED, DeliveryState.DELIVERING)
                     and conversation_id is None]
        rows = sorted(rows + [detach(d) for d in extra], key=lambda d: (d.created_at, d.id))
        limit, offset = check_page(limit, offset)
        return page(rows, limit, offset)


class DeliveryClaimReadThenWrite(MemoryStore):
    """claim_delivery checks 'queued', lets go, then writes: two workers both
    carry the directive."""

    def claim_delivery(self, ctx, delivery_id):
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        with self._tx() as t:
            d = self._delivery(t, ctx, delivery_id)
            if d.state != DeliveryState.QUEUED:
                raise DeliveryAlreadyClaimed("claimed")
            now = self._now()
        time.sleep(GAP)
        with self._tx() as t:
            claimed = replace(t.a2a_deliveries[delivery_id], state=DeliveryState.DELIVERING,
                              claim_token=self._fresh_token(t, delivery_id), claimed_at=now, updated_at=now)
            t.a2a_deliveries[delivery_id] = claimed
            return detach(claimed)


class ReadMarkRestamps(MemoryStore):
    """mark_delivery_read stamps read_at again on every call (upstream Mongo)."""

    def mark_delivery_read(self, ctx, delivery_id):
        first = super().mark_delivery_read(ctx, delivery_id)
        with self._tx() as t:
            now = self._now()
            again = replace(t.a2a_deliveries[first.id], read_at=now, updated_at=now)
            t.a2a_deliveries[first.id] = again
            return detach(again)


class InboxIgnoresNode(MemoryStore):
    """list_inbox compares the receiver's agent only: mail for worker@peer
    lands in the local worker's inbox (upstream)."""

    def list_inbox(self, ctx, agent, *, unread_only=False, conversation_id=None, limit=0, offset=0):
        super().list_inbox(ctx, agent, unread_only=unread_only, conversation_id=conversation_id)  # validation
        limit, offset = check_page(limit, offset)
        with self._tx() as t:
            rows = [d for d in t.a2a_deliveries.values()
                    if visible(ctx, d) and d.receiver.agent == agent and d.state == DeliveryState.DELIVERED
                    and (not unread_only or d.read_at is None)
                    and (conversation_id is None
                         or getattr(t.a2a_messages.get(d.message_id), "conversation_id", None) == conversation_id)]
            rows.sort(key=lambda d: (d.created_at, d.id))
            return [detach(d) for d in page(rows, limit, offset)]


class UnfencedFinish(MemoryStore):
    """finish_delivery does not check the claim token (upstream UpdateDelivery):
    a late worker overwrites a newer claim."""

    def finish_delivery(self, ctx, delivery_id, claim_token, state, error=""):
        require_scope(ctx)
        ids.check_id(delivery_id, ids.DELIVERY, "delivery_id")
        check_claim_token(claim_token)
        state = check_finish_state(state)
        with self._tx() as t:
            d = self._delivery(t, ctx, delivery_id)
            if d.state != DeliveryState.DELIVERING:
                if d.state == state and d.error == error:
                    return detach(d)
                raise DeliveryClaimLost("not delivering")
            now = self._now()
            done = replace(d, state=state, error=error, updated_at=now,
                           delivered_at=now if state == DeliveryState.DELIVERED else None)
            t.a2a_deliveries[delivery_id] = done
            return detach(done)


class AskDeadlineOnClaimSide(MemoryStore):
    """The expired-ask lists take ``deadline < now``: at the deadline instant
    the sweep does not see the ask."""

    def _expired(self, rows, cutoff, limit):
        rows = [a for a in rows if ask_expired(a, cutoff) and a.deadline < cutoff]
        rows.sort(key=lambda a: (a.deadline, a.reply_with))
        return [detach(a) for a in page(rows, limit, 0)]


# (issue 18 item 4, a2a: bugs that hide behind one sender, a first page, a short limit)


class HopCeilingPerSender(MemoryStore):
    """record_message checks the hop ceiling against the messages of the
    envelope's sender (a per-sender budget): with several senders a
    conversation goes past its ceiling."""

    def record_message(self, ctx, envelope):
        require_scope(ctx)
        with self._tx() as t:
            conv = t.a2a_conversations.get(getattr(envelope, "conversation_id", None))
            if conv is None or not visible(ctx, conv):
                return super().record_message(ctx, envelope)
            sent = sum(1 for m in t.a2a_messages.values()
                       if m.conversation_id == conv.id and m.sender == envelope.sender)
            # the sender's own count is what the ceiling is held against
            t.a2a_conversations[conv.id] = replace(conv, hop_ceiling=conv.hops_used + conv.hop_ceiling - sent)
            try:
                return super().record_message(ctx, envelope)
            finally:
                now = t.a2a_conversations[conv.id]
                t.a2a_conversations[conv.id] = replace(now, hop_ceiling=conv.hop_ceiling)


class InboxPagesBeforeUnreadFilter(MemoryStore):
    """list_inbox pages the delivered rows and drops the read ones
    afterwards (the unread filter applied to the page): with read mail
    interleaved, an unread page after the first comes out short or
    shifted."""

    def list_inbox(self, ctx, agent, *, unread_only=False, conversation_id=None, limit=0, offset=0):
        require_scope(ctx)
        unread_only = check_bool(unread_only, "unread_only")
        rows = super().list_inbox(ctx, agent, conversation_id=conversation_id, limit=limit, offset=offset)
        return [d for d in rows if d.read_at is None] if unread_only else rows


class QueueDropsLookAhead(MemoryStore):
    """list_queued_deliveries reads ``limit + 1`` rows to learn whether more
    follow and drops the last one read even when it was not the extra one:
    a limit of exactly the number of queued rows, or more, loses a row."""

    def list_queued_deliveries(self, ctx, limit=0):
        rows = super().list_queued_deliveries(ctx, 0)
        limit, _ = check_page(limit)
        if limit <= 0:
            return rows
        return rows[:limit + 1][:-1] if len(rows) > limit else rows[:-1]


class Amnesia(MemoryStore):
    """Keeps everything in the store object, not in the storage: a restart
    loses every acknowledged write."""


class AmnesiaHarness(ReferenceHarness):
    name = "amnesia"

    def open(self, location, clock):
        return Amnesia(clock, medium=MemoryMedium())


# -- class gateway ------------------------------------------------------------------------


def _opener(gateway_cls: type) -> type:
    """A reference store whose gateways are ``gateway_cls``."""
    return type(f"{gateway_cls.__name__}Store", (MemoryStore,), {"gateway_class": gateway_cls,
                                                                "__doc__": gateway_cls.__doc__})


class DedupCheckThenInsert(MemoryGateway):
    """accept looks the key up, lets go of the lock, then inserts: two
    deliveries of one message both come back fresh."""

    def accept(self, ctx, message, now):
        from cortex_spec.gateway import validate_message

        item = validate_message(ctx, message, now)
        key = (item.channel, item.message_id)
        with self._tx() as t:
            if key in t.gw_items:
                return False
        time.sleep(GAP)
        with self._tx() as t:
            seq = t.gw_sequence.get("last", 0) + 1
            t.gw_sequence["last"] = seq
            t.gw_items[key] = refgw.GatewayRow(item=item, seq=seq)  # upsert
            return True


class DoneResurrected(MemoryGateway):
    """set_replied on a done row moves it back to replied (the upstream
    UPDATE without a status condition)."""

    def set_replied(self, ctx, channel, message_id, reply):
        require_context(ctx)
        key = check_key(channel, message_id)
        reply = check_reply(reply)
        with self._tx() as t:
            row = t.gw_items.get(key)
            if row is not None and row.item.status == ItemStatus.DONE:
                check_reply_fits(row.item, reply)
                t.gw_items[key] = replace(row, item=replace(row.item, status=ItemStatus.REPLIED,
                                                            reply=reply))
                return True
        return super().set_replied(ctx, channel, message_id, reply)


class PruneDeletesReplied(MemoryGateway):
    """prune_done deletes every row that is not pending (``status <> 'pending'``)."""

    def prune_done(self, ctx, before):
        require_context(ctx)
        cutoff = check_cutoff(before)
        with self._tx() as t:
            doomed = [k for k, r in t.gw_items.items()
                      if r.item.status != ItemStatus.PENDING and r.item.received_at < cutoff]
            for k in doomed:
                del t.gw_items[k]
            return len(doomed)


class OrderByFormattedText(MemoryGateway):
    """The receipt time is kept as Go's RFC 3339 text of the given ``now``
    (its own offset, trailing zeros trimmed) and the queues and the prune
    compare that text: wrong within one second and across offsets."""

    def accept(self, ctx, message, now):
        fresh = super().accept(ctx, message, now)
        if fresh:
            with self._tx() as t:
                texts = t.__dict__.setdefault("gw_text", {})
                texts[(message.channel, message.message_id)] = _text_of(now)
        return fresh

    def _queue(self, ctx, status, limit, offset):
        require_context(ctx)
        limit, offset = check_queue_page(limit, offset)
        with self._tx() as t:
            texts = t.__dict__.get("gw_text", {})
            rows = [r for r in t.gw_items.values() if r.item.status == status]
            rows.sort(key=lambda r: (texts.get((r.item.channel, r.item.message_id), ""), r.seq))
            return [detach(r.item) for r in page(rows, limit, offset)]

    def prune_done(self, ctx, before):
        require_context(ctx)
        check_cutoff(before)  # validated like the reference; compared as text below
        with self._tx() as t:
            texts = t.__dict__.get("gw_text", {})
            doomed = [k for k, r in t.gw_items.items()
                      if r.item.status == ItemStatus.DONE and texts.get(k, "") < _text_of(before)]
            for k in doomed:
                del t.gw_items[k]
            return len(doomed)


def _text_of(instant):
    """The instant as given (its own offset), truncated to milliseconds."""
    return rfc3339_nano(instant.replace(microsecond=instant.microsecond - instant.microsecond % 1000))


class PendingPagesOpenRows(MemoryGateway):
    """pending pages every row that is not done and keeps the pending ones
    afterwards (one query of the open rows): with replied rows received in
    between, a page after the first comes out short or shifted."""

    def pending(self, ctx, limit=0, offset=0):
        require_context(ctx)
        limit, offset = check_queue_page(limit, offset)
        with self._tx() as t:
            rows = [r for r in t.gw_items.values() if r.item.status != ItemStatus.DONE]
            return [detach(r.item) for r in page(refgw._order(rows), limit, offset)
                    if r.item.status == ItemStatus.PENDING]


class ReplyMeasuredAlone(MemoryGateway):
    """set_replied measures the reply alone, not the item row it is stored
    in (RSC-GEN-8): a reply that fits by itself takes the row over 8 MiB."""

    def set_replied(self, ctx, channel, message_id, reply):
        require_context(ctx)
        key = check_key(channel, message_id)
        reply = check_reply(reply)
        with self._tx() as t:
            row = t.gw_items.get(key)
            if row is None or row.item.status != ItemStatus.PENDING:
                return False
            t.gw_items[key] = replace(row, item=replace(row.item, status=ItemStatus.REPLIED, reply=reply))
            return True


class ReplyOverwritten(MemoryGateway):
    """A second set_replied replaces the reply (the upstream behaviour)."""

    def set_replied(self, ctx, channel, message_id, reply):
        require_context(ctx)
        key = check_key(channel, message_id)
        reply = check_reply(reply)
        with self._tx() as t:
            row = t.gw_items.get(key)
            if row is not None and row.item.status == ItemStatus.REPLIED:
                t.gw_items[key] = replace(row, item=replace(row.item, reply=reply))
                return True
        return super().set_replied(ctx, channel, message_id, reply)


class RepliesWithoutSnapshot(MemoryGateway):
    """pending_replies does not read agent and project (the upstream SELECT)."""

    def pending_replies(self, ctx, limit=0, offset=0):
        return [replace(i, agent="", project="") for i in super().pending_replies(ctx, limit, offset)]


class TieBreakByKey(MemoryGateway):
    """Equal receipt times are ordered by (channel, message_id), the primary
    key, instead of by insertion."""

    def _queue(self, ctx, status, limit, offset):
        require_context(ctx)
        limit, offset = check_queue_page(limit, offset)
        with self._tx() as t:
            rows = [r for r in t.gw_items.values() if r.item.status == status]
            rows.sort(key=lambda r: (r.item.received_at, r.item.channel, r.item.message_id))
            return [detach(r.item) for r in page(rows, limit, offset)]


class SelectionReadThenWrite(MemoryGateway):
    """A selection setter reads the current pair, lets go, then writes both
    fields back: a concurrent setter of the other field is lost."""

    def _set_selection(self, ctx, channel, conversation, value, field):
        from cortex_spec.gateway import check_selection_value

        check_selection_value(value, field)
        agent, project = self.conversation(ctx, channel, conversation)
        time.sleep(GAP)
        with self._tx() as t:
            from cortex_spec.gateway import check_selection_key

            key = check_selection_key(channel, conversation)
            pair = (value, project) if field == "agent" else (agent, value)
            if pair == ("", ""):
                t.gw_selections.pop(key, None)
            else:
                t.gw_selections[key] = pair


class ReplyNotDurable(MemoryGateway):
    """set_replied is kept in the open store's memory, not in the storage:
    after a crash or a restart the finished job is pending again."""

    def __init__(self, medium, location=None):
        super().__init__(medium, location)
        self._replies: dict = {}

    def _merge(self, item):
        if item is not None and item.status == ItemStatus.PENDING:
            reply = self._replies.get((item.channel, item.message_id))
            if reply is not None:
                return replace(item, status=ItemStatus.REPLIED, reply=reply)
        return item

    def get_item(self, ctx, channel, message_id):
        return self._merge(super().get_item(ctx, channel, message_id))

    def _queue(self, ctx, status, limit, offset):
        require_context(ctx)
        limit, offset = check_queue_page(limit, offset)
        with self._tx() as t:
            rows = sorted(t.gw_items.values(), key=lambda r: (r.item.received_at, r.seq))
            items = [self._merge(detach(r.item)) for r in rows]
            return page([i for i in items if i.status == status], limit, offset)

    def set_replied(self, ctx, channel, message_id, reply):
        require_context(ctx)
        key = check_key(channel, message_id)
        reply = check_reply(reply)
        item = self.get_item(ctx, channel, message_id)
        if item is None or item.status != ItemStatus.PENDING:
            return False
        self._replies[key] = reply
        return True

    def mark_done(self, ctx, channel, message_id):
        key = check_key(channel, message_id)
        reply = self._replies.pop(key, None)
        done = super().mark_done(ctx, channel, message_id)
        if done and reply is not None:
            with self._tx() as t:
                row = t.gw_items[key]
                t.gw_items[key] = replace(row, item=replace(row.item, reply=reply))
        return done

    def prune_done(self, ctx, before):
        return super().prune_done(ctx, before)


class LockLeftByDeadHolder(MemoryGateway):
    """The lock is a pid file created with O_EXCL: when the holder dies the
    file stays, and the location cannot be opened again."""

    def _abandon(self):
        with self.medium.lock:
            self._closed = True  # dead, but the lock is never released


class NoLockStore(MemoryStore):
    """open_gateway takes no lock (the upstream on platforms without flock):
    two gateways open one location."""

    def open_gateway(self, location):
        name = refgw.check_location(location)
        with refgw._REGISTRY_LOCK:
            loc = refgw._REGISTRY.get(name)
            if loc is None:
                loc = refgw._REGISTRY[name] = refgw._Location(name)
        return MemoryGateway(loc.medium, None)


# -- class catalog (stored kinds: the bugs live in the storage a backend writes) ----------


class _StorageMutant(MemoryStore):
    """A reference store on a storage class of its own (``storage``)."""

    storage: type = MemoryStorage

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._crud = Crud(self.storage(self), self._now)


def _like(pattern: str, value: str) -> bool:
    """SQL ``LIKE '%pattern%'`` as SQLite runs it: ``%`` and ``_`` are
    wildcards and ASCII letters fold."""
    import re

    regex = "".join(".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in pattern)
    return re.search(regex, value, re.IGNORECASE | re.DOTALL) is not None


class _LikeStorage(MemoryStorage):
    def select(self, table, query):
        if query.search is None:
            return super().select(table, query)
        field, text = query.search
        rows = super().select(table, attrs.evolve(query, search=None, limit=0, offset=0))
        rows = [r for r in rows if _like(text, getattr(r, field))]
        return page(rows, query.limit, query.offset)

    def count(self, table, query):
        if query.search is None:
            return super().count(table, query)
        return len(self.select(table, attrs.evolve(query, limit=0, offset=0)))


class UnescapedLikeSearch(_StorageMutant):
    """The name search is SQL LIKE with the search text pasted in: ``%`` and
    ``_`` match anything (the upstream SQL stores)."""

    storage = _LikeStorage


class _CaselessNameStorage(MemoryStorage):
    def select(self, table, query):
        if query.order is not BY_NAME_ORDER:
            return super().select(table, query)
        (field, value), = query.where
        rows = super().select(table, attrs.evolve(query, where=(), limit=0))
        rows = [r for r in rows if getattr(r, field).lower() == value.lower()]
        return rows[:1]


class CaseInsensitiveByName(_StorageMutant):
    """By-name reads compare names case-insensitively (a collation or a
    Mongo regex with the i flag)."""

    storage = _CaselessNameStorage


class _NewestByNameStorage(MemoryStorage):
    def select(self, table, query):
        if query.order is BY_NAME_ORDER:
            query = attrs.evolve(query, order=(("created_at", True), ("id", True)))
        return super().select(table, query)


class NewestByName(_StorageMutant):
    """A by-name read that sees several rows returns the newest one (ORDER BY
    created_at DESC LIMIT 1) instead of the shallowest scope's."""

    storage = _NewestByNameStorage


class _CreatedAtStorage(MemoryStorage):
    def update(self, table, key, scope, fields, now):
        return super().update(table, key, scope, dict(fields, created_at=now), now)


class UpdateWritesCreatedAt(_StorageMutant):
    """An update writes ``created_at`` too (the upstream SQL stores wrote it
    from the object; here it becomes the update's time)."""

    storage = _CreatedAtStorage


class OverlayClimbs(MemoryStore):
    """get_overlay_for_agent falls back to the nearest ancestor's overlay
    when the caller's scope holds none."""

    def _overlay_at(self, scope, agent):
        from cortex_spec.catalog import OVERLAYS
        from cortex_spec.kinds import Query

        while not scope.is_zero:
            rows = self._crud.storage.select(OVERLAYS, Query(scope, exact=True, where=(("agent_id", agent),)))
            if rows:
                return rows[0]
            scope = scope.parent()
        raise OverlayNotFound(f"no overlay of agent {agent}")


class OverlayFirstAtScope(MemoryStore):
    """get_overlay_for_agent reads the first overlay stored at the scope and
    then checks its agent (LIMIT 1 before the agent filter): with another
    agent's overlay there first, the agent's own is not found."""

    def _overlay_at(self, scope, agent):
        from cortex_spec.catalog import OVERLAYS
        from cortex_spec.kinds import Query

        rows = self._crud.storage.select(OVERLAYS, Query(scope, exact=True, order=(("created_at", False),
                                                                                    ("id", False)), limit=1))
        if rows and rows[0].agent_id == agent:
            return rows[0]
        raise OverlayNotFound(f"no overlay of agent {agent}")


class DeleteCascades(MemoryStore):
    """Deleting an agent deletes its overlays in every scope (the upstream
    PostgreSQL foreign keys)."""

    def delete_agent(self, ctx, agent_id):
        from cortex_spec.catalog import AGENTS, OVERLAYS

        self._crud.delete(AGENTS, ctx, agent_id)
        with self._tx() as t:
            rows = getattr(t, f"kind_{OVERLAYS.name}")
            for key in [k for k, o in rows.items() if o.agent_id == agent_id]:
                del rows[key]


class _GlobalNameStorage(MemoryStorage):
    def insert(self, table, entity):
        if table.by_name:
            with self.store._tx() as t:
                rows = self._rows(t, table)
                if any(getattr(r, table.by_name) == getattr(entity, table.by_name) for r in rows.values()):
                    raise AlreadyExists("name taken")
        super().insert(table, entity)


class NameUniqueEverywhere(_StorageMutant):
    """Names are unique over every scope, not per exact scope (a unique
    index on the name alone)."""

    storage = _GlobalNameStorage


# -- generic suites (varygen): stored kinds' pages, counts and by-name ties ------------------


class _CountDropsFlagsStorage(MemoryStorage):
    def count(self, table, query):
        kept = tuple((f, v) for f, v in query.where if not isinstance(v, bool))
        return super().count(table, attrs.evolve(query, where=kept))


class CountIgnoresFlagFilter(_StorageMutant):
    """A count drops the listing's boolean filters (``default_only``: the
    flag read as "the argument was given"), so it counts every row the
    list's other conditions select."""

    storage = _CountDropsFlagsStorage


class _FoldedPageStorage(MemoryStorage):
    def select(self, table, query):
        if query.scope is None or query.exact or not (query.limit or query.offset):
            return super().select(table, query)
        rows = super().select(table, attrs.evolve(query, scope=None, limit=0, offset=0))
        caller = query.scope.canonical().casefold() + "/"
        rows = [r for r in rows if (r.scope.canonical().casefold() + "/").startswith(caller)]
        return page(rows, query.limit, query.offset)


class PagesFoldScopeCase(_StorageMutant):
    """A paged list walks an index on the scope's case-folded text (a NOCASE
    collation the unpaged query does not use): a page shows rows at scopes
    that differ from the caller's only in case."""

    storage = _FoldedPageStorage


class _ByNameScopeTextStorage(MemoryStorage):
    def select(self, table, query):
        if query.order is BY_NAME_ORDER:
            query = attrs.evolve(query, order=(("scope", False), ("created_at", False),
                                               ("scope_text", False), ("id", False)))
        return super().select(table, query)


class ByNameTieByScopeText(_StorageMutant):
    """A by-name read that finds two rows at one depth created at one instant
    picks the one whose scope sorts first (ORDER BY depth, created_at, scope),
    not the smaller id."""

    storage = _ByNameScopeTextStorage


class _ByNameByIdStorage(MemoryStorage):
    def select(self, table, query):
        if query.order is BY_NAME_ORDER:
            query = attrs.evolve(query, order=(("scope", False), ("id", False)))
        return super().select(table, query)


class ByNameIgnoresCreatedAt(_StorageMutant):
    """A by-name read breaks a tie at one depth by the smaller id alone
    (TypeIDs are time-ordered, so "the oldest" looked redundant): a row
    created later under a smaller id wins."""

    storage = _ByNameByIdStorage


# -- class memory (the methods are written once: a mutant overrides one) ---------------------


class CountReadThenWrite(MemoryStore):
    """save_conversation appends the batch in one step and bumps
    ``message_count`` in a second one, from the count it read before."""

    def save_conversation(self, ctx, agent_id, session_id, messages):
        from cortex_spec import memory as mem

        scope = require_scope(ctx)
        ids.check_id(agent_id, ids.AGENT, "agent_id")
        ids.check_id(session_id, ids.SESSION, "session_id")
        batch = mem._check_messages(messages)
        if not batch:
            return
        now = self._now()
        storage = self._crud.storage

        def append(st):
            session = mem._own_session(st, scope, agent_id, session_id)
            last = st.select(mem.MESSAGES, Query(None, where=(("session_id", session_id),),
                                                 order=(("id", True),), limit=1))
            seq = last[0].seq if last else 0
            for i, m in enumerate(batch, start=1):
                st.insert(mem.MESSAGES, mem.StoredMessage(
                    id=mem._message_key(session_id, seq + i), scope=session.scope, agent_id=agent_id,
                    session_id=session_id, seq=seq + i, role=m.role, content=m.content,
                    tool_calls=m.tool_calls, metadata=m.metadata, timestamp=m.timestamp, created_at=now))
            return session

        session = storage.atomic(append)
        time.sleep(GAP)
        spoken = [m.content for m in batch if m.content]
        changes = {"message_count": session.message_count + len(batch)}
        if spoken:
            changes["last_message"] = spoken[-1]
        storage.update(mem.SESSIONS, session_id, scope, changes, now)


class LoadOldest(MemoryStore):
    """load_conversation with a limit returns the oldest ``limit`` messages
    (ORDER BY created_at LIMIT n) instead of the newest."""

    def load_conversation(self, ctx, agent_id, session_id, limit=0):
        everything = super().load_conversation(ctx, agent_id, session_id, 0)
        limit, _ = check_page(limit)
        return everything[:limit] if limit else everything


class OrderByTimestamp(MemoryStore):
    """load_conversation orders by each message's own ``timestamp`` (the
    caller's clock) instead of the order the store saved them in."""

    def load_conversation(self, ctx, agent_id, session_id, limit=0):
        everything = super().load_conversation(ctx, agent_id, session_id, 0)
        from datetime import datetime, timezone

        floor = datetime.min.replace(tzinfo=timezone.utc)
        everything.sort(key=lambda m: m.timestamp or floor)
        limit, _ = check_page(limit)
        return everything[-limit:] if limit else everything


# (issue 18 item 4, memory: bugs that hide behind one agent and one session)


class SummariesOfEveryAgent(MemoryStore):
    """load_summaries selects by scope only: the agent filter is lost, and
    every agent's summaries come back."""

    def load_summaries(self, ctx, agent_id):
        from cortex_spec import memory as mem

        super().load_summaries(ctx, agent_id)  # validation
        rows = self._crud.storage.select(mem.SUMMARIES, Query(require_scope(ctx),
                                                              order=(("created_at", False), ("id", False))))
        return [r.text for r in rows]


class NewestBeforeSessionFilter(MemoryStore):
    """load_conversation with a limit takes the agent's newest ``limit``
    messages and keeps those of the session afterwards: saves to the
    agent's other sessions push this one's messages out."""

    def load_conversation(self, ctx, agent_id, session_id, limit=0):
        from cortex_spec import memory as mem

        everything = super().load_conversation(ctx, agent_id, session_id, 0)
        limit, _ = check_page(limit)
        if not limit:
            return everything
        rows = self._crud.storage.select(mem.MESSAGES, Query(require_scope(ctx), where=(("agent_id", agent_id),),
                                                             order=mem._NEWEST_FIRST, limit=limit))
        return [mem.Message(role=r.role, content=r.content, tool_calls=r.tool_calls, metadata=r.metadata,
                            timestamp=r.timestamp) for r in reversed(rows) if r.session_id == session_id]


class DeleteLeavesMessages(MemoryStore):
    """delete_session deletes the session row only: its messages stay (no
    cascade, nothing in the same transaction)."""

    def delete_session(self, ctx, session_id):
        from cortex_spec.memory import SESSIONS

        self._crud.delete(SESSIONS, ctx, session_id)


class WorkingKeyedWithoutScope(MemoryStore):
    """Working memory is unique per (run, key): a save at one scope
    overwrites (and moves) the value another scope stored (an upsert on an
    index that forgot the scope)."""

    def save_working(self, ctx, run_id, key, value):
        from cortex_spec import memory as mem

        super().save_working(ctx, run_id, key, value)
        scope = require_scope(ctx)
        with self._tx() as t:
            rows = getattr(t, f"kind_{mem.WORKING.name}")
            mine = rows[mem._working_key(run_id, key, scope)]
            for k, row in list(rows.items()):
                if row.run_id == run_id and row.key == key and k != mine.id:
                    del rows[k]


class ClearKeepsLastMessage(MemoryStore):
    """clear_conversation deletes the messages and zeroes the count but
    leaves ``last_message`` as it was."""

    def clear_conversation(self, ctx, agent_id, session_id):
        from cortex_spec import memory as mem

        scope = require_scope(ctx)
        now = self._now()

        def step(st):
            mem._own_session(st, scope, agent_id, session_id)
            st.delete_where(mem.MESSAGES, Query(None, where=(("agent_id", agent_id), ("session_id", session_id))))
            st.update(mem.SESSIONS, session_id, scope, {"message_count": 0}, now)

        self._crud.storage.atomic(step)


class SaveIntoVisibleSession(MemoryStore):
    """A save (and a clear) accept any session the caller can see, not only
    one at exactly its scope: a parent writes into a child's conversation."""

    def save_conversation(self, ctx, agent_id, session_id, messages):
        from cortex_spec import memory as mem

        own = mem._own_session
        mem._own_session = _visible_session
        try:
            return super().save_conversation(ctx, agent_id, session_id, messages)
        finally:
            mem._own_session = own


def _visible_session(storage, scope, agent, sid):
    from cortex_spec.memory import SESSIONS

    rows = storage.select(SESSIONS, Query(scope, where=(("id", sid), ("agent_id", agent))))
    if not rows:
        from cortex_spec.errors import SessionNotFound

        raise SessionNotFound(f"session {sid} not found")
    return rows[0]


class UpdateWritesCounters(MemoryStore):
    """update_session writes ``message_count`` and ``last_message`` from the
    caller's object (upstream's UpdateSession): a stale object rolls them
    back."""

    def update_session(self, ctx, session):
        from cortex_spec.memory import SESSIONS

        stored = self._crud.update(SESSIONS, ctx, session)
        counters = {"message_count": session.message_count, "last_message": session.last_message}
        return self._crud.storage.update(SESSIONS, stored.id, require_scope(ctx), counters, self._now())


# -- class leases ------------------------------------------------------------------------------


def _decide_hold(store, t, ctx, run_id, lease, decide):
    """The reference's checks of a hold, deciding with ``decide``: the
    checked lease and the decision (``LeaseHeld`` when the run is held)."""
    from cortex_spec.leases import Hold, check_lease

    require_scope(ctx)
    ids.check_id(run_id, ids.RUN, "run_id")
    lease = check_lease(lease)
    run = store._visible_run(t, ctx, run_id)
    if run.state != RunState.RUNNING:
        raise InvalidState("not running")
    decision = decide(run.lease, lease.owner, store._now())
    if decision is Hold.HELD:
        raise LeaseHeld("held")
    return lease, decision


def _write_hold(t, run_id, lease, decision):
    from cortex_spec.leases import Hold

    run = t.runs[run_id]
    t.runs[run_id] = replace(run, lease=lease, reclaim_count=run.reclaim_count + (decision is Hold.RECLAIM))


class HoldReadThenWrite(MemoryStore):
    """hold_lease decides on the run it read, lets go of the lock, then
    writes: two holders both see an unleased run and both win."""

    def hold_lease(self, ctx, run_id, lease):
        from cortex_spec.leases import hold_decision

        with self._tx() as t:
            lease, decision = _decide_hold(self, t, ctx, run_id, lease, hold_decision)
        time.sleep(GAP)
        with self._tx() as t:
            _write_hold(t, run_id, lease, decision)


def _leases_with(decide):
    """A reference store whose hold decides with ``decide`` instead of
    :func:`cortex_spec.leases.hold_decision` (the rest as the reference)."""

    class Store(MemoryStore):
        def hold_lease(self, ctx, run_id, lease):
            with self._tx() as t:
                lease, decision = _decide_hold(self, t, ctx, run_id, lease, decide)
                _write_hold(t, run_id, lease, decision)

    return Store


def _strict_expiry(current, owner, now):
    from cortex_spec.leases import Hold

    if current is None or current.owner == owner:
        return Hold.TAKE
    return Hold.RECLAIM if current.expires_at < now else Hold.HELD


class ExpiryOnHolderSide(_leases_with(_strict_expiry)):
    """A lease compares its expiry with ``<``: at the expiry instant the dead
    owner still holds it and nobody can take the run over."""


def _uncounted(current, owner, now):
    from cortex_spec.leases import Hold, hold_decision

    decision = hold_decision(current, owner, now)
    return Hold.TAKE if decision is Hold.RECLAIM else decision


class TakeoverNotCounted(_leases_with(_uncounted)):
    """A takeover of a lapsed foreign lease leaves ``reclaim_count`` as it was."""


def _counts_renewals(current, owner, now):
    from cortex_spec.leases import Hold, hold_decision

    decision = hold_decision(current, owner, now)
    return Hold.RECLAIM if decision is Hold.TAKE and current is not None else decision


class RenewalCounted(_leases_with(_counts_renewals)):
    """Every hold that replaces a lease counts as a reclaim, the owner's own
    renewals included."""


def _owner_padded_caseless(current, owner, now):
    from cortex_spec.leases import hold_decision

    # owners compared as a case-insensitive, space-padded column compares them
    if current is not None and current.owner.rstrip().casefold() == owner.rstrip().casefold():
        owner = current.owner
    return hold_decision(current, owner, now)


class OwnerComparedCaseless(_leases_with(_owner_padded_caseless)):
    """hold_lease compares owners case-insensitively and ignoring trailing
    spaces (a SQL collation's equality): "Worker-A" renews worker-a's live
    lease as if it were its own."""


class LapsedExcludesTheInstant(MemoryStore):
    """list_lapsed_across_scopes compares ``expires_at < now``: a lease that
    expires exactly at ``now`` is not listed."""

    def list_lapsed_across_scopes(self, ctx, now, limit=0):
        rows = super().list_lapsed_across_scopes(ctx, now, 0)
        rows = [r for r in rows if r.lease.expires_at < check_instant(now, "now")]
        limit, _ = check_page(limit)
        return rows[:limit] if limit else rows


class ContinuableIgnoresMarks(MemoryStore):
    """list_continuable_across_scopes ignores ``notified_before``: a waiting
    run is announced again on every sweep."""

    def list_continuable_across_scopes(self, ctx, notified_before, limit=0):
        check_instant(notified_before, "notified_before")
        from cortex_spec.testing import FAR_FUTURE

        return super().list_continuable_across_scopes(ctx, FAR_FUTURE, limit)


class ContinuableIgnoresDeadline(MemoryStore):
    """A paused run counts as ready whenever it has a suspension, even one
    whose deadline has passed (which belongs to the expiry sweeper)."""

    def list_continuable_across_scopes(self, ctx, notified_before, limit=0):
        from cortex_spec.entities import detach
        from cortex_spec.leases import lapsed, notified_since

        require_context(ctx)
        before = check_instant(notified_before, "notified_before")
        limit, _ = check_page(limit)
        with self._tx() as t:
            now = self._now()
            rows = [r for r in t.runs.values()
                    if ((r.state == RunState.PAUSED and r.id in t.suspensions) or lapsed(r, now))
                    and not notified_since(r, before)]
        rows.sort(key=lambda r: r.id)
        return [detach(r) for r in page(rows, limit, 0)]


class ContinuableUntruncatedCutoff(MemoryStore):
    """list_continuable_across_scopes compares ``notified_at`` with
    ``notified_before`` as given, sub-millisecond digits included: a run marked
    at T is listed again with ``notified_before`` T + 0.5 ms."""

    def list_continuable_across_scopes(self, ctx, notified_before, limit=0):
        from datetime import timedelta

        before = check_instant(notified_before, "notified_before")
        if notified_before.microsecond % 1000:  # "notified_at < notified_before", untruncated
            before += timedelta(milliseconds=1)
        return super().list_continuable_across_scopes(ctx, before, limit)


class MarkMovesBack(MemoryStore):
    """mark_notified writes ``at`` unconditionally: a late sweeper moves the
    mark back and the run is announced again."""

    def mark_notified(self, ctx, run_id, at):
        require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        at = check_instant(at, "at")
        with self._tx() as t:
            run = self._visible_run(t, ctx, run_id)
            t.runs[run_id] = replace(run, notified_at=at)


class StoppedRunKeepsLease(MemoryStore):
    """update_run leaves the lease of a run that stops running (no clearing
    in the update statement)."""

    def update_run(self, ctx, run):
        run_id, _ = update_fields(RUNS, run)
        with self._tx() as t:
            before = t.runs.get(run_id)
            updated = super().update_run(ctx, run)
            if before is not None and before.lease is not None:
                t.runs[run_id] = replace(t.runs[run_id], lease=before.lease)
                updated = detach(t.runs[run_id])
            return updated


# -- class orchestration ---------------------------------------------------------------------


class ClaimIgnoresStatus(MemoryStore):
    """claim_orchestration_continuation moves any team run to running: a
    second driver re-starts a pass that is already running."""

    def claim_orchestration_continuation(self, ctx, team_id):
        from cortex_spec import orchestration as o

        scope = require_scope(ctx)
        ids.check_id(team_id, ids.ORCHESTRATION_RUN, "team_id")
        now = self._now()

        def step(st):
            o._own_team_run(st, scope, team_id)
            return st.update(o.TEAM_RUNS, team_id, scope, {"status": o.OrchestrationStatus.RUNNING}, now)

        return self._crud.storage.atomic(step)


class LinkReadThenWrite(MemoryStore):
    """link_orchestration_child reads the children, lets go, then writes the
    list it read plus its child: concurrent links lose children."""

    def link_orchestration_child(self, ctx, team_id, child_run_id):
        from cortex_spec import orchestration as o

        scope = require_scope(ctx)
        ids.check_id(team_id, ids.ORCHESTRATION_RUN, "team_id")
        ids.check_id(child_run_id, ids.RUN, "child_run_id")
        run = self._crud.storage.atomic(lambda st: o._own_team_run(st, scope, team_id))
        if child_run_id in run.child_run_ids:
            return
        if run.status != o.OrchestrationStatus.RUNNING:
            raise InvalidState("not running")
        time.sleep(GAP)
        self._crud.storage.update(o.TEAM_RUNS, team_id, scope, {"child_run_ids": run.child_run_ids + (child_run_id,)},
                                  self._now())


class UpdateWritesChildren(MemoryStore):
    """update_orchestration_run writes ``child_run_ids`` from the object
    (upstream's UpdateOrchestrationRun): children admitted meanwhile are lost."""

    def update_orchestration_run(self, ctx, orchestration_run):
        from cortex_spec.kinds import Strings
        from cortex_spec.orchestration import TEAM_RUNS

        stored = self._crud.update(TEAM_RUNS, ctx, orchestration_run)
        kids = Strings(unique=True).check(orchestration_run.child_run_ids, "child_run_ids")
        return self._crud.storage.update(TEAM_RUNS, stored.id, require_scope(ctx), {"child_run_ids": kids},
                                         self._now())


class ClaimFromAbove(MemoryStore):
    """The continuation claim accepts a team run any visible scope holds: an
    ancestor's driver takes over a descendant team's pass."""

    def claim_orchestration_continuation(self, ctx, team_id):
        from cortex_spec import orchestration as o

        own = o._own_team_run
        o._own_team_run = _visible_team_run
        try:
            return super().claim_orchestration_continuation(ctx, team_id)
        finally:
            o._own_team_run = own


def _visible_team_run(storage, scope, team):
    from cortex_spec.errors import OrchestrationRunNotFound
    from cortex_spec.orchestration import TEAM_RUNS

    rows = storage.select(TEAM_RUNS, Query(scope, where=(("id", team),)))
    if not rows:
        raise OrchestrationRunNotFound("not found")
    return rows[0]


class LinkWhileWaiting(MemoryStore):
    """A waiting team run still admits children (the check allows any
    status that is not terminal)."""

    def link_orchestration_child(self, ctx, team_id, child_run_id):
        from cortex_spec import orchestration as o

        scope = require_scope(ctx)
        ids.check_id(team_id, ids.ORCHESTRATION_RUN, "team_id")
        ids.check_id(child_run_id, ids.RUN, "child_run_id")
        now = self._now()

        def step(st):
            run = o._own_team_run(st, scope, team_id)
            if child_run_id in run.child_run_ids:
                return
            if run.status in (o.OrchestrationStatus.COMPLETED, o.OrchestrationStatus.FAILED):
                raise InvalidState("over")
            st.update(o.TEAM_RUNS, team_id, scope, {"child_run_ids": run.child_run_ids + (child_run_id,)}, now)

        self._crud.storage.atomic(step)


class RelinkAppends(MemoryStore):
    """A repeated link appends the child again instead of succeeding
    without a change."""

    def link_orchestration_child(self, ctx, team_id, child_run_id):
        from cortex_spec import orchestration as o

        scope = require_scope(ctx)
        ids.check_id(team_id, ids.ORCHESTRATION_RUN, "team_id")
        ids.check_id(child_run_id, ids.RUN, "child_run_id")
        now = self._now()

        def step(st):
            run = o._own_team_run(st, scope, team_id)
            if run.status != o.OrchestrationStatus.RUNNING:
                raise InvalidState("not running")
            st.update(o.TEAM_RUNS, team_id, scope, {"child_run_ids": run.child_run_ids + (child_run_id,)}, now)

        self._crud.storage.atomic(step)


# -- the exactly-once classes of a2a (a2a_resolutions, a2a_replies, a2a_held, a2a_discovery) --


class _Seeing(threading.local):
    """Per thread: whether the mutant's method is running (its rows then see
    through the mutant's eyes), and what it pinned."""

    inside = False
    pinned: Any = None


class _RowsMutant(MemoryStore):
    """A store whose exactly-once methods read the a2a rows through
    ``rows_cls`` (a :class:`MemoryA2ARows` with one bug)."""

    rows_cls: type = MemoryA2ARows

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._seeing = _Seeing()

    def _a2a_rows(self, storage=None):
        return self.rows_cls(self)

    def _inside(self, call, pinned=None):
        self._seeing.inside, self._seeing.pinned = True, pinned
        try:
            return call()
        finally:
            self._seeing.inside, self._seeing.pinned = False, None


class SealComparesRawDeadline(MemoryStore):
    """seal_ask_resolution compares the argument's deadline with the stored
    one as given, not truncated to whole milliseconds: the ask's own
    deadline with sub-millisecond digits is taken for another question."""

    def seal_ask_resolution(self, ctx, ask, reply):
        from cortex_spec.a2a import e_visible
        from cortex_spec.a2a_resolutions import ask_identity

        require_scope(ctx)
        ask_identity(ask)  # the argument checks
        with self._tx() as t:
            stored = t.a2a_asks.get(ask.reply_with)
            if stored is not None and e_visible(ctx, stored) and ask.deadline != stored.deadline:
                raise AskResolutionConflict("the deadline differs")
        return super().seal_ask_resolution(ctx, ask, reply)


class SealAcceptsCompeting(MemoryStore):
    """A seal of an ask that already has a resolution returns the retained
    resolution whatever its outcome: a competing answer is acknowledged as if
    it had won."""

    def seal_ask_resolution(self, ctx, ask, reply):
        try:
            return super().seal_ask_resolution(ctx, ask, reply)
        except AskAlreadyClaimed:
            try:
                return self.get_ask_resolution(ctx, ask.reply_with)
            except AskResolutionNotFound:
                pass
            raise


class _UnclaimedAsks(MemoryA2ARows):
    def ask(self, reply_with):
        found = super().ask(reply_with)
        if found is not None and self.store._seeing.inside:
            found = replace(found, claimed_at=None)
        return found


class SealAdoptsLegacyClaim(_RowsMutant):
    """A seal of an ask claimed without a resolution (claim_pending_ask)
    takes the claim over and stores its outcome."""

    rows_cls = _UnclaimedAsks

    def seal_ask_resolution(self, ctx, ask, reply):
        return self._inside(lambda: super(SealAdoptsLegacyClaim, self).seal_ask_resolution(ctx, ask, reply))


class RetryChargesHop(MemoryStore):
    """An equal retry of commit_reserved_reply returns the stored receipt but
    charges the conversation another hop."""

    def commit_reserved_reply(self, ctx, delivery_id, claim_token, commit):
        receipt = super().commit_reserved_reply(ctx, delivery_id, claim_token, commit)
        if not receipt.fresh:
            with self._tx() as t:
                message = t.a2a_messages[t.a2a_deliveries[delivery_id].message_id]
                conversation = t.a2a_conversations[message.conversation_id]
                t.a2a_conversations[conversation.id] = replace(conversation, hops_used=conversation.hops_used + 1)
        return receipt


class _PinnedRevision(MemoryA2ARows):
    def run(self, run_id):
        found = super().run(run_id)
        pinned = self.store._seeing.pinned
        if found is not None and self.store._seeing.inside and isinstance(pinned, int):
            found = replace(found, revision=pinned)
        return found


class ReleaseIgnoresRevision(_RowsMutant):
    """release_held_ask checks that the run is paused but not its revision:
    a release decided on a pause the run has left (or rewritten) since goes
    through."""

    rows_cls = _PinnedRevision

    def release_held_ask(self, ctx, request):
        return self._inside(lambda: super(ReleaseIgnoresRevision, self).release_held_ask(ctx, request),
                            getattr(request, "run_revision", None))


class _RepeatingCursor(MemoryA2ARows):
    def deferred(self, scope, partition, after, limit):
        with self.store._tx() as t:
            found = sorted(
                d.id for d in t.a2a_deliveries.values()
                if d.partition == partition and d.scope == scope and d.state == DeliveryState.DELIVERING
                and d.run_id is not None and (after is None or d.id >= after)
            )
        return found[:limit]


class DeferredCursorRepeats(_RowsMutant):
    """list_deferred_recipients pages from its cursor inclusively: the last
    id of a page comes again first on the next."""

    rows_cls = _RepeatingCursor


class _SavedPausesOnly(MemoryA2ARows):
    def agent_reply_runs(self, scope, partition, after, limit):
        with self.store._tx() as t:
            return [i for i in super().agent_reply_runs(scope, partition, after, MAX_PAGE)
                    if t.runs[i].state == RunState.PAUSED][:limit]


class AgentReplyRunsForgetAdmissions(_RowsMutant):
    """list_agent_reply_runs lists the saved pauses only: a running asker
    whose pause was removed after its ask was sealed is never found again."""

    rows_cls = _SavedPausesOnly


class InScopeQueueSeesDescendants(MemoryStore):
    """list_queued_deliveries_in_scope selects by the prefix rule (visible)
    instead of the exact scope: a roster-bound bus dispatches its
    descendants' traffic."""

    def list_queued_deliveries_in_scope(self, ctx, limit=0):
        require_scope(ctx)
        limit, _ = check_page(limit)
        with self._tx() as t:
            rows = [d for d in t.a2a_deliveries.values() if visible(ctx, d) and d.state == DeliveryState.QUEUED]
            rows.sort(key=lambda d: (d.created_at, d.id))
            return [detach(r) for r in page(rows, limit, 0)]



# -- classes progress, admin and preparation ----------------------------------------------


class ProgressReadFromAbove(MemoryStore):
    """get_progress finds the run's snapshot anywhere the caller sees (an
    ancestor reads a descendant's), not only at the exact scope."""

    def get_progress(self, ctx, run_id):
        from cortex_spec.errors import ProgressNotFound
        from cortex_spec.progress import PROGRESS, _public

        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        rows = self._crud.storage.select(PROGRESS, Query(scope, where=(("run_id", run_id),)))
        if not rows:
            raise ProgressNotFound(f"no progress of run {run_id}")
        return _public(rows[0])


class ProgressDeleteEveryRun(MemoryStore):
    """delete_progress removes every snapshot stored at exactly the caller's
    scope, other runs' too (the delete keyed by the scope alone)."""

    def delete_progress(self, ctx, run_id):
        from cortex_spec.progress import PROGRESS, progress_key

        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._tx():
            for row in self._crud.storage.select(PROGRESS, Query(scope, exact=True)):
                self._crud.storage.delete(PROGRESS, progress_key(row.run_id, scope), scope)


class InspectRepairs(MemoryStore):
    """inspect_scopes "repairs" what it reports: a row with the zero scope
    is deleted after its visit (the scan changes data)."""

    def inspect_scopes(self, ctx, visit):
        from cortex_spec import Scope
        from cortex_spec.reference.admin import scoped_tables

        found = super().inspect_scopes(ctx, visit)
        with self._admin_tx() as t:
            for table in scoped_tables(t).values():
                for key in [k for k, row in table.items() if getattr(row, "scope", None) == Scope()]:
                    del table[key]
        return found


class InspectSkipsCatalog(MemoryStore):
    """inspect_scopes scans the runs, suspensions, checkpoints and a2a rows
    but not the stored kinds' tables (agents, sessions, progress …)."""

    def inspect_scopes(self, ctx, visit):
        from cortex_spec import Scope
        from cortex_spec.admin import Inspection, check_visitor
        from cortex_spec.reference.admin import scoped_tables

        check_visitor(ctx, visit)
        with self._admin_tx() as t:
            kinds = {name.removeprefix("kind_") for name in t.tables() if name.startswith("kind_")}
            rows = [(kind, getattr(row, "id", key), row.scope)
                    for kind, table in scoped_tables(t).items() if kind not in kinds
                    for key, row in table.items() if hasattr(row, "scope")]

        def scan(inspection):
            for kind, key, scope in rows:
                if isinstance(scope, Scope):
                    inspection.offer(kind, key, None, scope.levels)
                else:
                    inspection.offer(kind, key, scope)

        return Inspection(visit).run(scan)


class _EachReadAlone(MemoryStorage):
    """Reads that each take the lock on their own, a gap before each."""

    def snapshot(self, body):
        return body(self)

    def select(self, table, query):
        time.sleep(GAP)
        return super().select(table, query)


class CaptureWithoutSnapshot(_StorageMutant):
    """capture_preparation reads each source on its own (no snapshot): a
    capture may see a newer persona next to the agent as it was before."""

    storage = _EachReadAlone


@attrs.frozen
class Mutant:
    name: str
    bug: str
    #: clauses the upstream table (or our own reasoning) expects to catch it
    expected: tuple[str, ...]
    harness: Any
    #: the classes the bug breaks: the zoo certifies only these (with what
    #: they require); by default the classes of the expected clauses
    classes: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        if not self.classes:
            from cortex_spec.clauses import GENERAL_CLASSES, catalogue

            found = tuple(dict.fromkeys(
                catalogue()[c].cls for c in self.expected if catalogue()[c].cls not in GENERAL_CLASSES))
            if not found:
                raise ValueError(f"mutant {self.name}: name the classes it breaks")
            object.__setattr__(self, "classes", found)


def _harness(store_cls: type) -> type[ReferenceHarness]:
    return type(
        f"{store_cls.__name__}Harness",
        (ReferenceHarness,),
        {"name": store_cls.__name__, "open": lambda self, location, clock: store_cls(clock, medium=location)},
    )


def _m(name: str, store_cls: type, expected: tuple[str, ...], classes: tuple[str, ...] = ()) -> Mutant:
    return Mutant(name, (store_cls.__doc__ or "").strip().splitlines()[0], expected, _harness(store_cls),
                  classes)


MUTANTS: list[Mutant] = [
    _m("read-then-write-claim", ReadThenWriteClaim, ("SUSP-CLAIM-10", "MACH-LIN-1")),
    _m("deadline-on-wrong-side", DeadlineOnResumeSide, ("SUSP-PART-2", "SUSP-CLAIM-6")),
    _m("prefix-confusion", PrefixConfusion, ("SCOPE-VIS-5", "RUN-LIST-1"), ("runs",)),
    _m("update-rewrites-scope", UpdateRewritesScope, ("SCOPE-IMM-2", "RUN-UPD-3"), ("runs",)),
    _m("update-widens-scope", UpdateWidensScope, ("SCOPE-IMM-3", "SCOPE-IMM-2"), ("runs",)),
    _m("flip-then-reject", FlipThenReject, ("SUSP-CLAIM-8", "SUSP-CLAIM-9")),
    _m("list-without-total-order", NoTieBreak, ("RUN-LIST-2", "RSC-GEN-11")),
    _m("resolve-read-then-write", ResolveReadThenWrite, ("CP-RESOLVE-4", "MACH-LIN-1", "RSC-GEN-12")),
    _m("resolve-overwrites", ResolveOverwrites, ("CP-RESOLVE-3",)),
    _m("suspension-unique-per-scope", SuspensionPerScope, ("SUSP-CREATE-2", "SCOPE-ID-2")),
    _m("no-ms-truncation", NoMillisecondTruncation, ("RSC-GEN-1",), ("runs",)),
    _m("sweep-sees-caller-scope", SweepSeesCallerScope, ("SCOPE-XS-3", "SUSP-XLIST-1")),
    _m("torn-update", TornUpdate, ("RUN-UPD-6", "RSC-GEN-12")),
    _m("a2a-hop-check-then-write", HopCheckThenWrite, ("A2A-HOP-10", "A2A-RACE-6")),
    _m("a2a-reclaim-without-recheck", ReclaimWithoutRecheck, ("A2A-RCL-5", "A2A-RACE-3")),
    _m("a2a-ask-claim-read-then-write", AskClaimReadThenWrite, ("A2A-ASK-6", "A2A-RACE-9")),
    _m("a2a-inbox-shows-queued", InboxShowsQueued, ("A2A-INBOX-2",)),
    _m("a2a-delivery-claim-read-then-write", DeliveryClaimReadThenWrite, ("A2A-DLV-9", "A2A-RACE-1")),
    _m("a2a-read-mark-restamps", ReadMarkRestamps, ("A2A-READ-2", "A2A-RACE-11")),
    _m("a2a-inbox-ignores-node", InboxIgnoresNode, ("A2A-INBOX-1",)),
    # without a token check, a token of the wrong type is not refused either (A2A-GEN-12)
    _m("a2a-unfenced-finish", UnfencedFinish, ("A2A-DLV-13", "A2A-DLV-14", "A2A-GEN-12")),
    _m("a2a-ask-deadline-on-claim-side", AskDeadlineOnClaimSide, ("A2A-ASK-9", "A2A-ASK-8", "A2A-ASK-12")),
    # a2a, issue 18 item 4 (varied actors, pages among look-alike rows, limits at n and beyond)
    _m("a2a-hop-ceiling-per-sender", HopCeilingPerSender, ("A2A-HOP-7", "A2A-HOP-10")),
    _m("a2a-inbox-pages-before-unread-filter", InboxPagesBeforeUnreadFilter, ("A2A-GEN-10", "A2A-INBOX-3")),
    _m("a2a-queue-drops-look-ahead", QueueDropsLookAhead, ("A2A-GEN-10", "A2A-QUEUE-1")),
    # a restart loses everything (MACH-DUR-1), and so does a worker's own
    # store opened on the same storage (MACH-CRASH-1): whichever comes first
    Mutant("amnesia", Amnesia.__doc__.strip().splitlines()[0], ("MACH-DUR-1", "MACH-CRASH-1"),
           AmnesiaHarness, ("suspensions",)),
    _m("gw-dedup-check-then-insert", _opener(DedupCheckThenInsert), ("GW-ACC-5", "GW-RACE-1")),
    _m("gw-done-resurrected", _opener(DoneResurrected), ("GW-ST-4",)),
    _m("gw-prune-deletes-replied", _opener(PruneDeletesReplied), ("GW-PRUNE-2",)),
    _m("gw-order-by-formatted-text", _opener(OrderByFormattedText), ("GW-ORD-1",)),
    _m("gw-reply-overwritten", _opener(ReplyOverwritten), ("GW-ST-3",)),
    _m("gw-replies-without-snapshot", _opener(RepliesWithoutSnapshot), ("GW-Q-2",)),
    _m("gw-tie-break-by-key", _opener(TieBreakByKey), ("GW-ORD-2",)),
    _m("gw-selection-read-then-write", _opener(SelectionReadThenWrite), ("GW-SEL-6", "GW-RACE-6")),
    _m("gw-reply-not-durable", _opener(ReplyNotDurable), ("GW-CRASH-3", "GW-CRASH-4", "GW-OPEN-5", "GW-SCOPE-4")),
    _m("gw-lock-left-by-dead-holder", _opener(LockLeftByDeadHolder), ("GW-OPEN-6", "GW-CRASH-9")),
    _m("gw-no-lock", NoLockStore, ("GW-OPEN-1", "GW-OPEN-2", "GW-RACE-9")),
    # gateway, issue 18 item 4 (a queue paged among the rows of the other statuses)
    _m("gw-pending-pages-open-rows", _opener(PendingPagesOpenRows), ("GW-Q-4",)),
    _m("catalog-unescaped-like", UnescapedLikeSearch, ("MC-GEN-10",), ("catalog",)),
    _m("catalog-caseless-by-name", CaseInsensitiveByName, ("CAT-GEN-5",)),
    _m("catalog-newest-by-name", NewestByName, ("CAT-GEN-5", "MC-GEN-9")),
    _m("catalog-update-writes-created-at", UpdateWritesCreatedAt, ("CAT-GEN-7", "CAT-OVL-7")),
    _m("catalog-overlay-climbs", OverlayClimbs, ("CAT-OVL-3",)),
    _m("catalog-delete-cascades", DeleteCascades, ("CAT-GEN-10",)),
    _m("catalog-name-unique-everywhere", NameUniqueEverywhere, ("CAT-GEN-2",)),
    # catalog, issue 18 item 4 (overlays of two agents at one scope)
    _m("catalog-overlay-first-at-scope", OverlayFirstAtScope, ("CAT-OVL-3", "CAT-OVL-6")),
    _m("memory-count-read-then-write", CountReadThenWrite, ("MEM-RACE-1", "MEM-CONV-11")),
    _m("memory-load-oldest", LoadOldest, ("MEM-CONV-6",)),
    _m("memory-order-by-timestamp", OrderByTimestamp, ("MEM-CONV-8", "MEM-CONV-6")),
    _m("memory-delete-leaves-messages", DeleteLeavesMessages, ("MEM-SES-9", "MEM-RACE-3")),
    _m("memory-working-without-scope", WorkingKeyedWithoutScope, ("MEM-WORK-3",)),
    _m("memory-clear-keeps-last-message", ClearKeepsLastMessage, ("MEM-CONV-9",)),
    _m("memory-save-into-visible-session", SaveIntoVisibleSession, ("MEM-CONV-2",)),
    _m("memory-update-writes-counters", UpdateWritesCounters, ("MEM-SES-6", "MEM-RACE-4")),
    # memory, issue 18 item 4 (two agents, two sessions of one agent)
    _m("memory-summaries-of-every-agent", SummariesOfEveryAgent, ("MEM-SUM-2",)),
    _m("memory-newest-before-session-filter", NewestBeforeSessionFilter, ("MEM-CONV-6",)),
    _m("leases-hold-read-then-write", HoldReadThenWrite, ("LEASE-RACE-1", "LEASE-HOLD-8", "LEASE-RACE-3",
                                                          "LEASE-EXCL-1", "MACH-LIN-1")),
    _m("leases-expiry-on-holder-side", ExpiryOnHolderSide, ("LEASE-HOLD-6", "LEASE-HOLD-1", "LEASE-HOLD-5")),
    _m("leases-takeover-not-counted", TakeoverNotCounted, ("LEASE-HOLD-6", "LEASE-RECLAIM-1")),
    _m("leases-renewal-counted", RenewalCounted, ("LEASE-HOLD-6", "LEASE-RECLAIM-1")),
    _m("leases-lapsed-excludes-the-instant", LapsedExcludesTheInstant, ("LEASE-LAPSED-1",)),
    _m("leases-continuable-ignores-marks", ContinuableIgnoresMarks, ("LEASE-CONT-1", "LEASE-NOTIFY-5")),
    _m("leases-continuable-ignores-deadline", ContinuableIgnoresDeadline, ("LEASE-CONT-1",)),
    _m("leases-mark-moves-back", MarkMovesBack, ("LEASE-NOTIFY-1", "LEASE-RACE-5")),
    _m("leases-stopped-run-keeps-lease", StoppedRunKeepsLease, ("LEASE-CLEAR-1", "LEASE-INV-1")),
    _m("orchestration-claim-ignores-status", ClaimIgnoresStatus, ("ORCH-CLAIM-3", "ORCH-CLAIM-4", "ORCH-RACE-1")),
    _m("orchestration-link-read-then-write", LinkReadThenWrite, ("ORCH-LINK-6", "ORCH-RACE-3", "MACH-LIN-1")),
    _m("orchestration-update-writes-children", UpdateWritesChildren, ("ORCH-RUN-6", "ORCH-LINK-7")),
    _m("orchestration-claim-from-above", ClaimFromAbove, ("ORCH-CLAIM-1",)),
    _m("orchestration-link-while-waiting", LinkWhileWaiting, ("ORCH-LINK-5", "ORCH-RACE-4")),
    _m("orchestration-relink-appends", RelinkAppends, ("ORCH-LINK-3", "ORCH-LINK-7", "ORCH-RACE-3")),
    _m("a2a-seal-accepts-competing", SealAcceptsCompeting, ("A2A-RES-7", "A2A-RES-RACE-1", "A2A-PAUSE-2")),
    _m("a2a-seal-adopts-legacy-claim", SealAdoptsLegacyClaim, ("A2A-RES-8",)),
    _m("a2a-reply-retry-charges-hop", RetryChargesHop, ("A2A-REPLY-3", "A2A-REPLY-7", "A2A-REPLY-RACE-1",
                                                        "A2A-REPLY-CRASH-1", "MACH-CRASH-3")),
    _m("a2a-release-ignores-revision", ReleaseIgnoresRevision, ("A2A-HELD-4", "A2A-HELD-RACE-1")),
    _m("a2a-deferred-cursor-repeats", DeferredCursorRepeats, ("A2A-DEFER-2",)),
    _m("a2a-agent-reply-runs-forget-admissions", AgentReplyRunsForgetAdmissions, ("A2A-AREPLY-1",)),
    _m("a2a-in-scope-queue-sees-descendants", InScopeQueueSeesDescendants, ("A2A-ROUTE-2",)),
    # a2a_resolutions, issue 18 item 4 (an identity instant at the millisecond and either side)
    _m("a2a-seal-compares-raw-deadline", SealComparesRawDeadline, ("A2A-RES-4",)),
    _m("progress-read-from-above", ProgressReadFromAbove, ("PROG-GET-1", "PROG-ENT-1")),
    # the inspection needs rows of other classes to plant broken scopes in
    _m("admin-inspect-repairs", InspectRepairs, ("ADMIN-INSPECT-3",), ("admin", "runs", "catalog")),
    _m("admin-inspect-skips-stored-kinds", InspectSkipsCatalog, ("ADMIN-INSPECT-1",), ("admin", "runs", "catalog")),
    _m("preparation-without-snapshot", CaptureWithoutSnapshot, ("PREP-2",)),
    # generic suites (varygen): pages, counts and by-name ties of stored kinds
    _m("kinds-pages-fold-scope-case", PagesFoldScopeCase, ("SCOPE-MODEL-4",), ("catalog",)),
    _m("kinds-count-ignores-flag-filter", CountIgnoresFlagFilter, ("MC-GEN-8",), ("memory",)),
    _m("kinds-by-name-tie-by-scope-text", ByNameTieByScopeText, ("CAT-GEN-5", "MC-GEN-9"), ("catalog",)),
    _m("kinds-by-name-ignores-created-at", ByNameIgnoresCreatedAt, ("CAT-GEN-5", "MC-GEN-9"), ("catalog",)),
    # -- varied actors, pages and instants (issue 18 item 4): runs, suspensions,
    # checkpoints, leases and the machines
    _m("claim-stamps-principal", ClaimStampsPrincipal, ("SUSP-CLAIM-2", "SUSP-XCLAIM-2")),
    _m("pending-paged-before-run-filter", PendingPagedBeforeRunFilter, ("CP-LIST-2",)),
    _m("pending-paged-over-resolved", PendingPagedOverResolved, ("CP-LIST-2",)),
    _m("runs-exact-paged-before-exact-filter", ExactPagedBeforeExactFilter, ("RUN-LIST-3", "RUN-LIST-1")),
    _m("expired-limit-before-scope", ExpiredLimitBeforeScope, ("SUSP-LIST-3", "SUSP-LIST-1")),
    _m("progress-delete-every-run", ProgressDeleteEveryRun, ("PROG-DEL-1",)),
    _m("leases-owner-compared-caseless", OwnerComparedCaseless, ("LEASE-HOLD-4",)),
    _m("leases-continuable-untruncated-cutoff", ContinuableUntruncatedCutoff, ("RSC-GEN-2",), ("leases",)),
    # runs on the stored-kind description (issue 10 item 4): steps and tool calls
    _m("runs-tool-name-padded", ToolNameInPaddedColumn, ("TCALL-1",), ("runs",)),
    # generic sizes and long scopes (issue 10: the class parts moved into each class's examples)
    _m("gw-reply-measured-alone", _opener(ReplyMeasuredAlone), ("GW-ACC-6", "RSC-GEN-8", "RSC-GEN-13"), ("gateway",)),
    _m("checkpoint-scope-indexed-whole", CheckpointScopeIndexedWhole, ("SCOPE-CANON-6",), ("checkpoints",)),
    # checkpoints on the stored-kind description (issue 10 item 4)
    _m("checkpoint-step-index-off-by-one", CheckpointStepIndexOffByOne, ("MC-GEN-12", "MC-GEN-2"), ("checkpoints",)),
]

BY_NAME = {m.name: m for m in MUTANTS}

# ``--cortex-store mutants:<ClassName>Harness`` works for each of them.
globals().update({m.harness.__name__: m.harness for m in MUTANTS})
