"""Reference semantics of class ``checkpoints`` (spec: checkpoints.md)."""

from __future__ import annotations

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
from cortex_spec.errors import AlreadyExists, CheckpointNotFound, InvalidState
from cortex_spec.validation import check_page, page

from .store import StoreBase

__all__ = ["CheckpointsMixin"]


class CheckpointsMixin(StoreBase):
    def create_checkpoint(self, ctx: Context, checkpoint: Checkpoint) -> Checkpoint:
        require_scope(ctx)
        with self._tx() as t:
            stored = validate_new_checkpoint(checkpoint, ctx, self._now())
            if stored.id in t.checkpoints:
                raise AlreadyExists(f"checkpoint {stored.id} already exists")  # CP-CREATE-3
            t.checkpoints[stored.id] = detach(stored)
            return stored

    def get_checkpoint(self, ctx: Context, checkpoint_id: str) -> Checkpoint:
        scope = require_scope(ctx)
        ids.check_id(checkpoint_id, ids.CHECKPOINT, "checkpoint_id")
        with self._tx() as t:
            cp = t.checkpoints.get(checkpoint_id)
            if cp is None or not scope.covers(cp.scope):
                raise CheckpointNotFound(f"checkpoint {checkpoint_id} not found")
            return detach(cp)

    def resolve(self, ctx: Context, checkpoint_id: str, decision: Decision) -> Checkpoint:
        scope = require_scope(ctx)
        ids.check_id(checkpoint_id, ids.CHECKPOINT, "checkpoint_id")
        decision = validate_decision(decision)
        with self._tx() as t:
            cp = t.checkpoints.get(checkpoint_id)
            if cp is None or not scope.covers(cp.scope):
                raise CheckpointNotFound(f"checkpoint {checkpoint_id} not found")
            if cp.state != CheckpointState.PENDING:
                raise InvalidState(f"checkpoint {checkpoint_id} is already resolved")
            done = resolved(cp, decision, self._now())  # CP-RESOLVE-7: measured before it is stored
            t.checkpoints[checkpoint_id] = done
            return detach(done)

    def _select_pending(
        self, ctx: Context, flt: CheckpointFilter | None
    ) -> tuple[list[Checkpoint], CheckpointFilter]:
        scope = require_scope(ctx)
        flt = validate_checkpoint_filter(flt)
        with self._tx() as t:
            rows = [
                cp for cp in t.checkpoints.values()
                if cp.state == CheckpointState.PENDING
                and scope.covers(cp.scope)
                and (flt.run_id is None or cp.run_id == flt.run_id)
            ]
        return rows, flt

    def list_pending(self, ctx: Context, filter: CheckpointFilter | None = None) -> list[Checkpoint]:
        rows, flt = self._select_pending(ctx, filter)
        rows.sort(key=lambda cp: (cp.created_at, cp.id))  # CP-LIST-2
        return [detach(cp) for cp in page(rows, flt.limit, flt.offset)]

    def count_pending(self, ctx: Context, filter: CheckpointFilter | None = None) -> int:
        rows, _ = self._select_pending(ctx, filter)
        return len(rows)

    def list_pending_across_scopes(
        self, ctx: Context, after_id: str | None = None, limit: int = 0
    ) -> list[Checkpoint]:
        require_context(ctx)  # SCOPE-XS-2
        after = ids.check_optional_id(after_id, ids.CHECKPOINT, "after_id")
        limit, _ = check_page(limit)
        with self._tx() as t:
            rows = [
                cp for cp in t.checkpoints.values()
                if cp.state == CheckpointState.PENDING and (after is None or cp.id > after)
            ]
            rows.sort(key=lambda cp: cp.id)  # CP-XLIST-2
            return [detach(cp) for cp in page(rows, limit, 0)]
