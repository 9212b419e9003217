"""Class ``leases`` on SQL (spec: leases.md).

A hold is **one conditional UPDATE** whose WHERE holds the whole rule and
whose SET counts the takeover from the row it replaces::

    UPDATE cortex_runs
       SET lease_owner = :owner, lease_expires_at = :expires,
           reclaim_count = reclaim_count + CASE WHEN lease_owner IS NOT NULL
                                                 AND lease_owner <> :owner THEN 1 ELSE 0 END
     WHERE id = :run_id AND <visible> AND state = 'running'
       AND (lease_owner IS NULL OR lease_expires_at <= :now OR lease_owner = :owner)

(a row that passes the WHERE with another owner's lease has a lapsed one:
that is the takeover, LEASE-HOLD-6; SQL evaluates every SET expression on
the row as it was).  On PostgreSQL a concurrent hold waits for the row lock
and re-evaluates the WHERE on the row the winner committed, so of racing
holds exactly one matches (LEASE-HOLD-8).  A hold that matched nothing is
classified by one more read on the same connection; if that read finds the
hold would now succeed (the row changed between the two statements), the
UPDATE simply runs again.  On SQLite the read comes first, and the UPDATE
only when the read finds the hold possible
(:meth:`.store.SqlStoreBase._contended`).

A mark is one conditional UPDATE too (``notified_at IS NULL OR notified_at
< :at``); the two listings are one SELECT each, the continuable one with the
suspension as an ``EXISTS`` subquery, so each reads one snapshot.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

import sqlalchemy as sa

from cortex_spec.context import Context, require_context, require_scope
from cortex_spec.errors import CortexError, InvalidState, LeaseHeld, RunNotFound
from cortex_spec.leases import Hold, check_lease, check_run_id, hold_decision
from cortex_spec.runs import Lease, Run, RunState
from cortex_spec.validation import check_instant, check_page

from .runs import run_from_row
from .schema import runs, suspensions
from cortex_spec.clock import from_millis

from .store import SqlStoreBase, db_int, ms, scope_params, visible

__all__ = ["LeasesMixin"]

#: how often a hold runs again when the row changed between its two statements
_ATTEMPTS = 100

_RUNNING = RunState.RUNNING.value


def _lapsed(now: Any) -> sa.ColumnElement[bool]:
    """LEASE-LAPSED-1 on a run row."""
    return sa.and_(runs.c.state == _RUNNING, runs.c.lease_owner.is_not(None), runs.c.lease_expires_at <= now)


@cache
def _hold(depth: int) -> sa.Update:
    owner: sa.BindParameter[Any] = sa.bindparam("v_owner")
    now: sa.BindParameter[Any] = sa.bindparam("w_now")
    takeover = sa.case((sa.and_(runs.c.lease_owner.is_not(None), runs.c.lease_owner != owner), 1), else_=0)
    return (
        sa.update(runs)
        .where(
            runs.c.id == sa.bindparam("w_id"),
            visible(runs, depth),
            runs.c.state == _RUNNING,  # LEASE-HOLD-3
            sa.or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_at <= now, runs.c.lease_owner == owner),
        )
        # LEASE-GEN-1: the lease and its count, never updated_at
        .values(lease_owner=owner, lease_expires_at=sa.bindparam("v_expires"),
                reclaim_count=runs.c.reclaim_count + takeover)
    )


@cache
def _probe(depth: int) -> sa.Select[Any]:
    return sa.select(runs.c.state, runs.c.lease_owner, runs.c.lease_expires_at).where(
        runs.c.id == sa.bindparam("w_id"), visible(runs, depth))


@cache
def _mark(depth: int) -> sa.Update:
    at: sa.BindParameter[Any] = sa.bindparam("v_at")
    return (
        sa.update(runs)
        .where(runs.c.id == sa.bindparam("w_id"), visible(runs, depth),
               sa.or_(runs.c.notified_at.is_(None), runs.c.notified_at < at))  # LEASE-NOTIFY-1
        .values(notified_at=at)
    )


@cache
def _exists(depth: int) -> sa.Select[Any]:
    return sa.select(runs.c.id).where(runs.c.id == sa.bindparam("w_id"), visible(runs, depth))


@cache
def _list_lapsed(limit: bool) -> sa.Select[Any]:
    stmt = sa.select(runs).where(_lapsed(sa.bindparam("w_now"))).order_by(
        runs.c.lease_expires_at, runs.c.id)  # LEASE-LAPSED-2
    if limit:
        stmt = stmt.limit(sa.bindparam("w_limit", type_=sa.BigInteger))
    return stmt


@cache
def _list_continuable(limit: bool) -> sa.Select[Any]:
    now: sa.BindParameter[Any] = sa.bindparam("w_now")
    ready = sa.and_(
        runs.c.state == RunState.PAUSED.value,
        sa.exists().where(suspensions.c.run_id == runs.c.id,  # any scope
                          sa.or_(suspensions.c.expires_at.is_(None), suspensions.c.expires_at > now)),
    )
    not_marked = sa.or_(runs.c.notified_at.is_(None), runs.c.notified_at < sa.bindparam("w_before"))
    stmt = sa.select(runs).where(sa.or_(ready, _lapsed(now)), not_marked).order_by(runs.c.id)  # LEASE-CONT-2
    if limit:
        stmt = stmt.limit(sa.bindparam("w_limit", type_=sa.BigInteger))
    return stmt


class LeasesMixin(SqlStoreBase):
    def hold_lease(self, ctx: Context, run_id: str, lease: Lease) -> None:
        scope = require_scope(ctx)
        run_id = check_run_id(run_id)
        lease = check_lease(lease)
        now = self._now()
        params = {"w_id": run_id, "w_now": ms(now), "v_owner": lease.owner,
                  "v_expires": ms(lease.expires_at), **scope_params(scope)}
        hold, probe = _hold(scope.depth), _probe(scope.depth)

        def judge(loss: Any) -> CortexError | None:
            """The probe's verdict: the hold's refusal, or None (it can succeed)."""
            if loss is None:
                return RunNotFound(f"run {run_id} not found")  # LEASE-HOLD-2
            if loss.state != _RUNNING:
                return InvalidState(f"run {run_id} is {loss.state}, not running")  # LEASE-HOLD-3
            current = None if loss.lease_owner is None else Lease(owner=loss.lease_owner,
                                                                  expires_at=from_millis(loss.lease_expires_at))
            if hold_decision(current, lease.owner, now) is Hold.HELD:
                return LeaseHeld(f"run {run_id} is leased to another owner")  # LEASE-HOLD-4
            return None

        won, _row, refusal = self._contended(hold, probe, params, judge, "the hold on run {}", run_id,
                                             _ATTEMPTS)
        if not won:
            try:
                raise refusal
            finally:
                del refusal  # no cycle through this frame (see store.SqlStoreBase._contended)

    def mark_notified(self, ctx: Context, run_id: str, at: datetime) -> None:
        scope = require_scope(ctx)
        run_id = check_run_id(run_id)
        at = check_instant(at, "at")  # LEASE-NOTIFY-4
        params = {"w_id": run_id, "v_at": ms(at), **scope_params(scope)}
        mark, exists = _mark(scope.depth), _exists(scope.depth)

        def write(conn: Any) -> bool:
            if conn.execute(mark, params).rowcount == 1:
                return True
            # marked at or after `at` already, or not there at all (runs are never deleted)
            return conn.execute(exists, params).one_or_none() is not None

        if not self._write1(write):
            raise RunNotFound(f"run {run_id} not found")  # LEASE-NOTIFY-2

    def list_lapsed_across_scopes(self, ctx: Context, now: datetime, limit: int = 0) -> list[Run]:
        require_context(ctx)  # LEASE-LAPSED-3: a zero scope is fine
        cutoff = check_instant(now, "now")
        limit, _ = check_page(limit)
        params: dict[str, Any] = {"w_now": ms(cutoff)}
        if limit:
            params["w_limit"] = db_int(limit)
        stmt = _list_lapsed(limit > 0)
        return self._read(lambda conn: [run_from_row(r) for r in conn.execute(stmt, params)])

    def list_continuable_across_scopes(self, ctx: Context, notified_before: datetime,
                                       limit: int = 0) -> list[Run]:
        require_context(ctx)  # LEASE-CONT-3
        before = check_instant(notified_before, "notified_before")  # LEASE-CONT-4
        limit, _ = check_page(limit)
        params: dict[str, Any] = {"w_now": ms(self._now()), "w_before": ms(before)}
        if limit:
            params["w_limit"] = db_int(limit)
        stmt = _list_continuable(limit > 0)
        return self._read(lambda conn: [run_from_row(r) for r in conn.execute(stmt, params)])
