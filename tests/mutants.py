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

import time
from typing import Any

import attrs

from cortex_spec.checkpoints import CheckpointState
from cortex_spec.clock import to_instant
from cortex_spec.context import require_context, require_scope
from cortex_spec.entities import detach, replace
from cortex_spec.errors import InvalidState, NotSuspended, SuspensionExpired, CheckpointNotFound
from cortex_spec.reference import MemoryMedium, MemoryStore
from cortex_spec.reference.harness import ReferenceHarness
from cortex_spec.runs import RunState, validate_run_filter, validate_run_update
from cortex_spec.suspensions import resume_eligible
from cortex_spec import ids
from cortex_spec.checkpoints import validate_decision
from cortex_spec.validation import check_instant, check_page, page
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
                t.runs[run_id] = replace(run, state=RunState.RUNNING, updated_at=now)
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


class PrefixConfusion(MemoryStore):
    """Lists match scopes as strings: ``ws=w1`` also sees ``ws=w10`` (a SQL
    ``LIKE canonical || '%'``)."""

    def _select_runs(self, ctx, flt):
        scope = require_scope(ctx)
        flt = validate_run_filter(flt)
        prefix = scope.canonical()
        with self._tx() as t:
            rows = [
                r for r in t.runs.values()
                if r.scope.canonical().startswith(prefix)
                and (not flt.exact or r.scope == scope)
                and (flt.agent_id is None or r.agent_id == flt.agent_id)
                and (flt.state is None or r.state == flt.state)
            ]
        return rows, flt


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


class NoTieBreak(MemoryStore):
    """list_runs orders by created_at only; ties come out in table order."""

    def list_runs(self, ctx, filter=None):
        rows, flt = self._select_runs(ctx, filter)
        rows.sort(key=lambda r: r.created_at, reverse=True)
        return [detach(r) for r in page(rows, flt.limit, flt.offset)]


class ResolveReadThenWrite(MemoryStore):
    """resolve checks 'pending', lets go, then writes: two deciders both win."""

    def resolve(self, ctx, checkpoint_id, decision):
        scope = require_scope(ctx)
        ids.check_id(checkpoint_id, ids.CHECKPOINT, "checkpoint_id")
        decision = validate_decision(decision)
        with self._tx() as t:
            cp = t.checkpoints.get(checkpoint_id)
            if cp is None or not scope.covers(cp.scope):
                raise CheckpointNotFound("not found")
            if cp.state != CheckpointState.PENDING:
                raise InvalidState("resolved")
            now = self._now()
        time.sleep(GAP)
        with self._tx() as t:
            cp = t.checkpoints[checkpoint_id]
            resolved = replace(cp, state=CheckpointState.RESOLVED,
                               decision=replace(decision, decided_at=now), updated_at=now)
            t.checkpoints[checkpoint_id] = resolved
            return detach(resolved)


class ResolveOverwrites(MemoryStore):
    """resolve is unconditional, as upstream: a second decision replaces the first."""

    def resolve(self, ctx, checkpoint_id, decision):
        scope = require_scope(ctx)
        ids.check_id(checkpoint_id, ids.CHECKPOINT, "checkpoint_id")
        decision = validate_decision(decision)
        with self._tx() as t:
            cp = t.checkpoints.get(checkpoint_id)
            if cp is None or not scope.covers(cp.scope):
                raise CheckpointNotFound("not found")
            now = self._now()
            resolved = replace(cp, state=CheckpointState.RESOLVED,
                               decision=replace(decision, decided_at=now), updated_at=now)
            t.checkpoints[checkpoint_id] = resolved
            return detach(resolved)


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
        run_id, fields = validate_run_update(run)
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


@attrs.frozen
class Mutant:
    name: str
    bug: str
    #: clauses the upstream table (or our own reasoning) expects to catch it
    expected: tuple[str, ...]
    harness: Any


def _harness(store_cls: type) -> type[ReferenceHarness]:
    return type(
        f"{store_cls.__name__}Harness",
        (ReferenceHarness,),
        {"name": store_cls.__name__, "open": lambda self, location, clock: store_cls(clock, medium=location)},
    )


def _m(name: str, store_cls: type, expected: tuple[str, ...]) -> Mutant:
    return Mutant(name, (store_cls.__doc__ or "").strip().splitlines()[0], expected, _harness(store_cls))


MUTANTS: list[Mutant] = [
    _m("read-then-write-claim", ReadThenWriteClaim, ("SUSP-CLAIM-10", "MACH-LIN-1")),
    _m("deadline-on-wrong-side", DeadlineOnResumeSide, ("SUSP-PART-2", "SUSP-CLAIM-6")),
    _m("prefix-confusion", PrefixConfusion, ("SCOPE-VIS-5",)),
    _m("update-rewrites-scope", UpdateRewritesScope, ("SCOPE-IMM-2",)),
    _m("update-widens-scope", UpdateWidensScope, ("SCOPE-IMM-3",)),
    _m("flip-then-reject", FlipThenReject, ("SUSP-CLAIM-8", "SUSP-CLAIM-9")),
    _m("list-without-total-order", NoTieBreak, ("RUN-LIST-2",)),
    _m("resolve-read-then-write", ResolveReadThenWrite, ("CP-RESOLVE-4", "MACH-LIN-1")),
    _m("resolve-overwrites", ResolveOverwrites, ("CP-RESOLVE-3",)),
    _m("suspension-unique-per-scope", SuspensionPerScope, ("SUSP-CREATE-2",)),
    _m("no-ms-truncation", NoMillisecondTruncation, ("RSC-GEN-1",)),
    _m("sweep-sees-caller-scope", SweepSeesCallerScope, ("SCOPE-XS-3", "SUSP-XLIST-1")),
    _m("torn-update", TornUpdate, ("RUN-UPD-6", "RSC-GEN-12")),
    Mutant("amnesia", Amnesia.__doc__.strip().splitlines()[0], ("MACH-DUR-1",), AmnesiaHarness),
    _m("gw-dedup-check-then-insert", _opener(DedupCheckThenInsert), ("GW-ACC-5", "GW-RACE-1")),
    _m("gw-done-resurrected", _opener(DoneResurrected), ("GW-ST-4",)),
    _m("gw-prune-deletes-replied", _opener(PruneDeletesReplied), ("GW-PRUNE-2",)),
    _m("gw-order-by-formatted-text", _opener(OrderByFormattedText), ("GW-ORD-1",)),
    _m("gw-reply-overwritten", _opener(ReplyOverwritten), ("GW-ST-3",)),
    _m("gw-replies-without-snapshot", _opener(RepliesWithoutSnapshot), ("GW-Q-2",)),
    _m("gw-tie-break-by-key", _opener(TieBreakByKey), ("GW-ORD-2",)),
    _m("gw-selection-read-then-write", _opener(SelectionReadThenWrite), ("GW-SEL-6", "GW-RACE-6")),
    _m("gw-reply-not-durable", _opener(ReplyNotDurable), ("GW-CRASH-3", "GW-CRASH-4", "GW-OPEN-5")),
    _m("gw-lock-left-by-dead-holder", _opener(LockLeftByDeadHolder), ("GW-OPEN-6", "GW-CRASH-9")),
    _m("gw-no-lock", NoLockStore, ("GW-OPEN-2", "GW-RACE-9")),
]

BY_NAME = {m.name: m for m in MUTANTS}

# ``--cortex-store mutants:<ClassName>Harness`` works for each of them.
globals().update({m.harness.__name__: m.harness for m in MUTANTS})
