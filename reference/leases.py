"""Reference semantics of class ``leases`` (spec: leases.md): each method is
one hold of the store's lock, and the rules are the functions of
:mod:`cortex_spec.leases` applied to the run as stored."""

from __future__ import annotations

from datetime import datetime

from cortex_spec.context import Context, require_context, require_scope
from cortex_spec.entities import detach, replace
from cortex_spec.errors import InvalidState, LeaseHeld, RunNotFound
from cortex_spec.leases import (
    Hold,
    check_lease,
    check_run_id,
    continuable,
    hold_decision,
    lapsed,
)
from cortex_spec.runs import Lease, Run, RunState
from cortex_spec.validation import check_instant, check_page, page

from .store import MemoryMedium, StoreBase

__all__ = ["LeasesMixin"]


class LeasesMixin(StoreBase):
    def _visible_run(self, t: MemoryMedium, ctx: Context, run_id: str) -> Run:
        run = t.runs.get(run_id)
        if run is None or not ctx.scope.covers(run.scope):
            raise RunNotFound(f"run {run_id} not found")  # LEASE-HOLD-2, LEASE-NOTIFY-2
        return run

    def hold_lease(self, ctx: Context, run_id: str, lease: Lease) -> None:
        require_scope(ctx)
        run_id = check_run_id(run_id)
        lease = check_lease(lease)
        with self._tx() as t:
            now = self._now()
            run = self._visible_run(t, ctx, run_id)
            if run.state != RunState.RUNNING:
                raise InvalidState(f"run {run_id} is {run.state}, not running")  # LEASE-HOLD-3
            decision = hold_decision(run.lease, lease.owner, now)
            if decision is Hold.HELD:
                raise LeaseHeld(f"run {run_id} is leased to another owner")  # LEASE-HOLD-4
            # LEASE-HOLD-6 / LEASE-GEN-1: the lease and the count, nothing else
            t.runs[run_id] = replace(run, lease=lease,
                                     reclaim_count=run.reclaim_count + (decision is Hold.RECLAIM))

    def list_lapsed_across_scopes(self, ctx: Context, now: datetime, limit: int = 0) -> list[Run]:
        require_context(ctx)  # LEASE-LAPSED-3: a zero scope is fine
        cutoff = check_instant(now, "now")
        limit, _ = check_page(limit)
        with self._tx() as t:
            found = [(r.lease.expires_at, r) for r in t.runs.values() if r.lease is not None and lapsed(r, cutoff)]
        found.sort(key=lambda e: (e[0], e[1].id))  # LEASE-LAPSED-2
        return [detach(r) for _, r in page(found, limit, 0)]

    def list_continuable_across_scopes(self, ctx: Context, notified_before: datetime,
                                       limit: int = 0) -> list[Run]:
        require_context(ctx)  # LEASE-CONT-3
        before = check_instant(notified_before, "notified_before")  # LEASE-CONT-4
        limit, _ = check_page(limit)
        with self._tx() as t:
            now = self._now()
            rows = [r for r in t.runs.values() if continuable(r, t.suspensions.get(r.id), now, before)]
        rows.sort(key=lambda r: r.id)  # LEASE-CONT-2
        return [detach(r) for r in page(rows, limit, 0)]

    def mark_notified(self, ctx: Context, run_id: str, at: datetime) -> None:
        require_scope(ctx)
        run_id = check_run_id(run_id)
        at = check_instant(at, "at")  # LEASE-NOTIFY-4
        with self._tx() as t:
            run = self._visible_run(t, ctx, run_id)
            if run.notified_at is None or run.notified_at < at:  # LEASE-NOTIFY-1: only forward
                t.runs[run_id] = replace(run, notified_at=at)
