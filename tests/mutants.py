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
]

BY_NAME = {m.name: m for m in MUTANTS}

# ``--cortex-store mutants:<ClassName>Harness`` works for each of them.
globals().update({m.harness.__name__: m.harness for m in MUTANTS})
