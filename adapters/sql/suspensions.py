"""Class ``suspensions`` on SQL (spec: suspensions.md).

The two claims are each **one conditional UPDATE** on the run whose WHERE
holds every condition of the claim, the suspension's included::

    UPDATE cortex_runs SET state = 'running', updated_at = :clock_now
     WHERE id = :run_id AND state = 'paused' AND <run visible>
       AND EXISTS (SELECT 1 FROM cortex_suspensions s
                    WHERE s.run_id = :run_id AND <s visible>
                      AND (s.expires_at IS NULL OR s.expires_at > :now))

(the sweep claim has ``s.expires_at IS NOT NULL AND s.expires_at <= :now``).
A win is never decided by a separate, earlier read: the deadline is checked
in the UPDATE itself (SUSP-CLAIM-9).

The UPDATE and the read of the suspension a winner returns are **one
statement**, run without an explicit transaction
(:meth:`.dialect.Dialect.claim_returning`): on SQLite ``UPDATE ...
RETURNING`` with the suspension's columns as subqueries (the statement holds
the write lock from its start to its commit); on PostgreSQL ``WITH read AS
(SELECT ... FOR SHARE), claim AS (UPDATE ... RETURNING 1) SELECT read.*``,
which share-locks the suspension before the UPDATE, so a concurrent delete
waits for the claim's commit (and one committed first leaves nothing to
claim).  A row returned is a win, with the suspension as it is at the
claim's commit (SUSP-CLAIM-3/4); none is a loss, and nothing was written.

A loss is classified by one more SELECT (one snapshot, after the claim's):
no visible suspension → ``NotSuspended``; a visible one on the other side of
the deadline → ``SuspensionExpired`` for the resume claim (at or past it),
``NotSuspended`` for the sweep claim; otherwise, if the run is not visible
and paused → ``NotSuspended``.  If that read finds the claim *would* now
succeed (rows changed between the two statements), the claim statement is
simply run again.  On SQLite that SELECT runs *first*, and the UPDATE only
when it finds the claim possible (:meth:`.store.SqlStoreBase._contended`):
an UPDATE takes SQLite's one write lock even when it matches nothing, and in
a race nearly every attempt loses.  Every outcome is therefore the one the
reference gives at one instant inside the call.

Measured (benchmarks/claim_throughput.py, issue 14): the former shape — a
transaction of UPDATE, then the read, then COMMIT — cost four round trips on
PostgreSQL for every attempt, and on SQLite held the write lock across
three statements' worth of Python; a refused claim also ended in ROLLBACK,
which psycopg answers by discarding the connection's prepared statements.
One statement is one round trip (two for a loss) and holds SQLite's write
lock only while SQLite runs it.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

import sqlalchemy as sa

from cortex_spec import ids
from cortex_spec.clock import to_millis
from cortex_spec.context import Context, require_context, require_scope
from cortex_spec.entities import detach
from cortex_spec.errors import CortexError, NotSuspended, SuspensionExpired
from cortex_spec.runs import RunState
from cortex_spec.scope import Scope
from cortex_spec.suspensions import (
    PendingCall,
    Suspension,
    SuspensionReason,
    validate_new_suspension,
)
from cortex_spec.validation import check_instant, check_page

from .dialect import Dialect
from .schema import runs, suspensions
from .store import (
    SqlStoreBase,
    db_int,
    decode,
    dump_json,
    instant,
    Members,
    load_json,
    ms,
    read_scope,
    scope_binds,
    scope_params,
    scope_values,
    visible,
)

__all__ = ["SuspensionsMixin"]

#: A claim whose follow-up read keeps finding it claimable gives up after this
#: many UPDATEs (only reachable under sustained concurrent writes).
_CLAIM_ATTEMPTS = 50


def _suspension_row(s: Suspension) -> dict[str, Any]:
    return {
        "id": s.id,
        "run_id": s.run_id,
        **scope_values(s.scope),
        "reason": SuspensionReason(s.reason).value,
        "pending": dump_json([[p.id, p.name, p.arguments] for p in s.pending]),
        "continuation": dump_json(s.continuation),
        "expires_at": ms(s.expires_at),
        "created_at": ms(s.created_at),
        "updated_at": ms(s.updated_at),
    }


_REASONS = Members(SuspensionReason)


def _suspension_from_row(row: Any) -> Suspension:
    return decode("suspension", lambda: Suspension(
        id=row.id,
        run_id=row.run_id,
        scope=read_scope(row),
        reason=_REASONS[row.reason],
        pending=tuple(
            PendingCall(id=pid, name=name, arguments=arguments)
            for pid, name, arguments in load_json(row.pending)
        ),
        continuation=load_json(row.continuation),
        expires_at=instant(row.expires_at),
        created_at=instant(row.created_at),
        updated_at=instant(row.updated_at),
    ))


def _eligible(side: str) -> sa.ColumnElement[bool]:
    """SUSP-PART-1: the deadline predicate of one side, against ``:w_now``.

    Resume side: no deadline, or the deadline is after now.  Sweep side: a
    deadline at or before now.  The instant itself belongs to the sweeper.
    """
    cutoff = sa.bindparam("w_now", type_=sa.BigInteger)
    if side == "resume":
        return sa.or_(suspensions.c.expires_at.is_(None), suspensions.c.expires_at > cutoff)
    return sa.and_(suspensions.c.expires_at.is_not(None), suspensions.c.expires_at <= cutoff)


_INSERT = sa.insert(suspensions)


def _mine(depth: int) -> sa.ColumnElement[bool]:
    return sa.and_(suspensions.c.run_id == sa.bindparam("w_run"), visible(suspensions, depth))


@cache
def _get(depth: int) -> sa.Select[Any]:
    return sa.select(suspensions).where(_mine(depth))


@cache
def _delete(depth: int) -> sa.Delete:
    return sa.delete(suspensions).where(_mine(depth))


@cache
def _claim_statements(depth: int, side: str, dialect: Dialect) -> tuple[sa.Executable, sa.Select[Any]]:
    """The two statements of a claim (see the module docstring)."""
    eligible = _eligible(side)
    claim = (
        sa.update(runs)
        .where(
            runs.c.id == sa.bindparam("w_run"),
            runs.c.state == RunState.PAUSED.value,
            visible(runs, depth),
            sa.exists().where(_mine(depth), eligible),
        )
        # SUSP-CLAIM-2 / SUSP-XCLAIM-2: only state, updated_at and the
        # revision (RUN-REV-2) change
        .values(state=RunState.RUNNING.value, updated_at=sa.bindparam("w_clock"),
                revision=runs.c.revision + 1)
    )
    claimed = dialect.claim_returning(claim, sa.select(suspensions).where(_mine(depth), eligible))

    # the loser's view, read by one statement (one snapshot): is there a
    # visible suspension, is it on this claim's side of the deadline, and is
    # the visible run paused?
    def count(table: sa.Table, *conds: sa.ColumnElement[bool]) -> sa.ScalarSelect[Any]:
        return sa.select(sa.func.count()).select_from(table).where(*conds).scalar_subquery()

    probe = sa.select(
        count(suspensions, _mine(depth)).label("has_s"),
        count(suspensions, _mine(depth), eligible).label("eligible"),
        count(runs, runs.c.id == sa.bindparam("w_run"), visible(runs, depth),
              runs.c.state == RunState.PAUSED.value).label("paused"),
    )
    return claimed, probe


@cache
def _expired(depth: int | None, limit: bool) -> sa.Select[Any]:
    conds = [] if depth is None else [visible(suspensions, depth)]
    stmt = (
        sa.select(suspensions)
        .where(*conds, _eligible("sweep"))
        .order_by(suspensions.c.expires_at, suspensions.c.id)  # SUSP-LIST-3
    )
    if limit:
        stmt = stmt.limit(sa.bindparam("w_limit", type_=sa.BigInteger))
    return stmt


class SuspensionsMixin(SqlStoreBase):
    def create_suspension(self, ctx: Context, suspension: Suspension) -> Suspension:
        require_scope(ctx)
        stored = validate_new_suspension(suspension, ctx, self._now())
        row = _suspension_row(stored)
        # SUSP-CREATE-2/3: the run_id unique constraint and the primary key
        self._write1(lambda conn: conn.execute(_INSERT, row))
        return detach(stored)

    def get_suspension(self, ctx: Context, run_id: str) -> Suspension:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        params = {"w_run": run_id, **scope_params(scope)}
        return self._read_one(_get(scope.depth), params, _suspension_from_row,
                              lambda: NotSuspended(f"run {run_id} has no suspension"))  # SUSP-GET-1

    # -- the claims ------------------------------------------------------------------

    def _claim(self, scope: Scope, run_id: str, side: str, cutoff_ms: int,
               clock_now_ms: int) -> Suspension | CortexError:
        """Both claims; ``side`` is ``"resume"`` or ``"sweep"``.  The claimed
        suspension, or the refusal for the public method to raise: an
        exception raised here would unwind one frame more, about 0.6 µs of a
        refused claim's 12 (``benchmarks/README.md``, issue 14; races are
        mostly refusals).  The public method drops its reference as it
        raises: a frame that keeps the exception it raised in a local is a
        reference cycle (exception, traceback, frame), left to the cyclic
        collector with everything the frame holds (``SqlStoreBase._contended``)."""
        claimed, probe = _claim_statements(scope.depth, side, self._dialect)
        params = {"w_run": run_id, "w_now": cutoff_ms, "w_clock": clock_now_ms, **scope_binds(scope)}

        def judge(verdict: Any) -> CortexError | None:
            """The probe's verdict: the claim's refusal, or None (it can be won)."""
            if not verdict.has_s:
                return NotSuspended(f"run {run_id} has no suspension")  # SUSP-CLAIM-5
            if not verdict.eligible:
                if side == "resume":  # SUSP-CLAIM-6, whatever the run's state
                    return SuspensionExpired(f"the suspension of run {run_id} has expired")
                return NotSuspended(f"the suspension of run {run_id} is not expired")
            if not verdict.paused:
                return NotSuspended(f"run {run_id} is not paused")  # SUSP-CLAIM-7
            return None

        won, row, refusal = self._contended(claimed, probe, params, judge, "the claim on run {}", run_id,
                                            _CLAIM_ATTEMPTS)
        return _suspension_from_row(row) if won else refusal  # SUSP-CLAIM-3/4: S untouched

    def claim_suspension(self, ctx: Context, run_id: str) -> Suspension:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        now_ms = self._now_ms()
        claimed = self._claim(scope, run_id, "resume", now_ms, now_ms)
        if isinstance(claimed, CortexError):
            try:
                raise claimed
            finally:
                del claimed  # no cycle through this frame (see _claim)
        return claimed

    def claim_expired_suspension(self, ctx: Context, run_id: str, now: datetime) -> Suspension:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        cutoff = to_millis(check_instant(now, "now"))
        clock_now_ms = self._now_ms()  # SUSP-XCLAIM-2: updated_at is clock now
        claimed = self._claim(scope, run_id, "sweep", cutoff, clock_now_ms)
        if isinstance(claimed, CortexError):
            try:
                raise claimed
            finally:
                del claimed  # no cycle through this frame (see _claim)
        return claimed

    # -- the rest -----------------------------------------------------------------------

    def delete_suspension(self, ctx: Context, run_id: str) -> None:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        params = {"w_run": run_id, **scope_params(scope)}

        def delete(conn: Any) -> None:
            if conn.execute(_delete(scope.depth), params).rowcount != 1:
                raise NotSuspended(f"run {run_id} has no suspension")  # SUSP-DEL-1

        self._write1(delete)

    def _list_expired(
        self, depth: int | None, params: dict[str, Any], cutoff: datetime, limit: int
    ) -> list[Suspension]:
        params["w_now"] = ms(cutoff)
        if limit > 0:
            params["w_limit"] = db_int(limit)
        stmt = _expired(depth, limit > 0)
        return self._read(
            lambda conn: [_suspension_from_row(r) for r in conn.execute(stmt, params)]
        )

    def list_expired(self, ctx: Context, now: datetime, limit: int = 0) -> list[Suspension]:
        scope = require_scope(ctx)
        cutoff = check_instant(now, "now")
        limit, _ = check_page(limit)
        return self._list_expired(scope.depth, scope_params(scope), cutoff, limit)

    def list_expired_across_scopes(
        self, ctx: Context, now: datetime, limit: int = 0
    ) -> list[Suspension]:
        require_context(ctx)  # SCOPE-XS-2: a zero scope is fine
        cutoff = check_instant(now, "now")
        limit, _ = check_page(limit)
        return self._list_expired(None, {}, cutoff, limit)
