"""Class ``checkpoints`` on SQL (spec: checkpoints.md).

``resolve`` reads the checkpoint (no visible row → ``CheckpointNotFound``,
a resolved one → ``InvalidState``), measures the checkpoint it would store
(CP-RESOLVE-7: over the size limit ``InvalidArgument``, nothing written),
then runs one conditional ``UPDATE ... WHERE id = :id AND <visible> AND
state = 'pending' RETURNING ...`` as one statement without an explicit
transaction: of concurrent resolves exactly one matches the row
(CP-RESOLVE-4), and it returns the row as written.  A pending checkpoint
changes only by a resolve, so the row written is the row measured; a loser
wrote nothing and goes round again, where the read finds it resolved.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import sqlalchemy as sa

from cortex_spec import ids
from cortex_spec.checkpoints import (
    Checkpoint,
    CheckpointFilter,
    CheckpointState,
    Decision,
    resolved,
    validate_checkpoint_filter,
    validate_decision,
    validate_new_checkpoint,
)
from cortex_spec.context import Context, require_context, require_scope
from cortex_spec.entities import detach
from cortex_spec.errors import CheckpointNotFound, InvalidState, StoreError
from cortex_spec.scope import Scope
from cortex_spec.validation import check_page

from .schema import checkpoints
from .store import (
    SqlStoreBase,
    db_int,
    decode,
    dump_json,
    instant,
    load_json,
    ms,
    read_scope,
    scope_params,
    scope_values,
    visible,
)

__all__ = ["CheckpointsMixin"]

_PENDING = CheckpointState.PENDING.value
_RESOLVED = CheckpointState.RESOLVED.value


def _checkpoint_row(cp: Checkpoint) -> dict[str, Any]:
    return {
        "id": cp.id,
        "run_id": cp.run_id,
        "agent_id": cp.agent_id,
        **scope_values(cp.scope),
        "reason": cp.reason,
        "step_index": cp.step_index,
        "state": _PENDING,
        "decision_approved": None,
        "decided_by": None,
        "decision_reason": None,
        "decided_at": None,
        "metadata": dump_json(cp.metadata),
        "created_at": ms(cp.created_at),
        "updated_at": ms(cp.updated_at),
    }


def _checkpoint_from_row(row: Any) -> Checkpoint:
    def build() -> Checkpoint:
        state = CheckpointState(row.state)
        decision = None
        if state is CheckpointState.RESOLVED:
            decision = Decision(
                approved=bool(row.decision_approved),
                decided_by=row.decided_by,
                reason=row.decision_reason,
                decided_at=instant(row.decided_at),
            )
        return Checkpoint(
            id=row.id,
            run_id=row.run_id,
            agent_id=row.agent_id,
            scope=read_scope(row),
            reason=row.reason,
            step_index=int(row.step_index),
            state=state,
            decision=decision,
            metadata=load_json(row.metadata),
            created_at=instant(row.created_at),
            updated_at=instant(row.updated_at),
        )

    return decode("checkpoint", build)


_RESOLVE_ATTEMPTS = 50

_INSERT = sa.insert(checkpoints)


def _mine(depth: int) -> sa.ColumnElement[bool]:
    return sa.and_(checkpoints.c.id == sa.bindparam("w_id"), visible(checkpoints, depth))


@cache
def _get(depth: int) -> sa.Select[Any]:
    return sa.select(checkpoints).where(_mine(depth))


@cache
def _resolve_statements(depth: int) -> tuple[sa.Update, sa.Select[Any]]:
    resolve = (
        sa.update(checkpoints)
        .where(_mine(depth), checkpoints.c.state == _PENDING)
        .values(
            state=_RESOLVED,
            decision_approved=sa.bindparam("w_approved"),
            decided_by=sa.bindparam("w_by"),
            decision_reason=sa.bindparam("w_reason"),
            decided_at=sa.bindparam("w_clock"),  # CP-RESOLVE-1: the passed value is ignored
            updated_at=sa.bindparam("w_clock"),
        )
        .returning(checkpoints)
    )
    row = sa.select(checkpoints).where(_mine(depth))
    return resolve, row


def _pending_conds(depth: int | None, run: bool) -> list[sa.ColumnElement[bool]]:
    conds = [checkpoints.c.state == _PENDING]
    if depth is not None:
        conds.append(visible(checkpoints, depth))
    if run:
        conds.append(checkpoints.c.run_id == sa.bindparam("w_run"))
    return conds


@cache
def _list_pending(depth: int, run: bool, offset: bool, limit: bool) -> sa.Select[Any]:
    stmt = (
        sa.select(checkpoints)
        .where(*_pending_conds(depth, run))
        .order_by(checkpoints.c.created_at, checkpoints.c.id)  # CP-LIST-2
    )
    if offset:
        stmt = stmt.offset(sa.bindparam("w_offset", type_=sa.BigInteger))
    if limit:
        stmt = stmt.limit(sa.bindparam("w_limit", type_=sa.BigInteger))
    return stmt


@cache
def _count_pending(depth: int, run: bool) -> sa.Select[Any]:
    return sa.select(sa.func.count()).select_from(checkpoints).where(*_pending_conds(depth, run))


@cache
def _across_scopes(after: bool, limit: bool) -> sa.Select[Any]:
    stmt = sa.select(checkpoints).where(*_pending_conds(None, False))
    if after:
        # binary collation on both dialects (id_type)
        stmt = stmt.where(checkpoints.c.id > sa.bindparam("w_after"))
    stmt = stmt.order_by(checkpoints.c.id)  # CP-XLIST-2
    if limit:
        stmt = stmt.limit(sa.bindparam("w_limit", type_=sa.BigInteger))
    return stmt


class CheckpointsMixin(SqlStoreBase):
    def create_checkpoint(self, ctx: Context, checkpoint: Checkpoint) -> Checkpoint:
        require_scope(ctx)
        stored = validate_new_checkpoint(checkpoint, ctx, self._now())
        row = _checkpoint_row(stored)
        # CP-CREATE-3: the primary key refuses an id of any scope
        self._write1(lambda conn: conn.execute(_INSERT, row))
        return detach(stored)

    def get_checkpoint(self, ctx: Context, checkpoint_id: str) -> Checkpoint:
        scope = require_scope(ctx)
        ids.check_id(checkpoint_id, ids.CHECKPOINT, "checkpoint_id")
        params = {"w_id": checkpoint_id, **scope_params(scope)}
        return self._read_one(_get(scope.depth), params, _checkpoint_from_row,  # CP-GET-1
                              lambda: CheckpointNotFound(f"checkpoint {checkpoint_id} not found"))

    def resolve(self, ctx: Context, checkpoint_id: str, decision: Decision) -> Checkpoint:
        scope = require_scope(ctx)
        ids.check_id(checkpoint_id, ids.CHECKPOINT, "checkpoint_id")
        decision = validate_decision(decision)
        now = self._now()
        params = {
            "w_id": checkpoint_id,
            "w_approved": decision.approved,
            "w_by": decision.decided_by,
            "w_reason": decision.reason,
            "w_clock": ms(now),
            **scope_params(scope),
        }
        resolve, read_row = _resolve_statements(scope.depth)

        def attempt(conn: Any) -> Any:
            return conn.execute(resolve, params).one_or_none()

        for _ in range(_RESOLVE_ATTEMPTS):
            found = self._read(lambda conn: conn.execute(read_row, params).one_or_none())
            if found is None:
                raise CheckpointNotFound(f"checkpoint {checkpoint_id} not found")  # CP-RESOLVE-2
            if found.state != _PENDING:
                # CP-RESOLVE-3: the first decision stays
                raise InvalidState(f"checkpoint {checkpoint_id} is already resolved")
            # CP-RESOLVE-7: the checkpoint as it would be stored, measured first
            resolved(_checkpoint_from_row(found), decision, now)
            row = self._write1(attempt)
            if row is not None:
                return _checkpoint_from_row(row)  # the winner: as stored
            # resolved (or deleted with its run) between the two statements: read again
        raise StoreError(f"resolving checkpoint {checkpoint_id} kept racing concurrent writes")

    def _pending_query(
        self, ctx: Context, filter: CheckpointFilter | None
    ) -> tuple[Scope, CheckpointFilter, dict[str, Any]]:
        scope = require_scope(ctx)
        flt = validate_checkpoint_filter(filter)
        params = scope_params(scope)
        if flt.run_id is not None:
            params["w_run"] = flt.run_id
        return scope, flt, params

    def list_pending(self, ctx: Context, filter: CheckpointFilter | None = None) -> list[Checkpoint]:
        scope, flt, params = self._pending_query(ctx, filter)
        if flt.offset > 0:
            params["w_offset"] = db_int(flt.offset)
        if flt.limit > 0:
            params["w_limit"] = db_int(flt.limit)
        stmt = _list_pending(scope.depth, flt.run_id is not None, flt.offset > 0, flt.limit > 0)
        return self._read(
            lambda conn: [_checkpoint_from_row(r) for r in conn.execute(stmt, params)]
        )

    def count_pending(self, ctx: Context, filter: CheckpointFilter | None = None) -> int:
        scope, flt, params = self._pending_query(ctx, filter)
        stmt = _count_pending(scope.depth, flt.run_id is not None)  # CP-LIST-3
        return self._read(lambda conn: int(conn.execute(stmt, params).scalar_one()))

    def list_pending_across_scopes(
        self, ctx: Context, after_id: str | None = None, limit: int = 0
    ) -> list[Checkpoint]:
        require_context(ctx)  # SCOPE-XS-2
        after = ids.check_optional_id(after_id, ids.CHECKPOINT, "after_id")
        limit, _ = check_page(limit)
        params: dict[str, Any] = {}
        if after is not None:
            params["w_after"] = after
        if limit > 0:
            params["w_limit"] = db_int(limit)
        stmt = _across_scopes(after is not None, limit > 0)
        return self._read(
            lambda conn: [_checkpoint_from_row(r) for r in conn.execute(stmt, params)]
        )
