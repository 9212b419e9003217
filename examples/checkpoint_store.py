"""A tiny third-party store, certified through ``module:factory``.

It implements one conformance class, ``checkpoints``, with a dict and a
lock — the smallest honest store.  Certify it from the repository root::

    cortex-spec certify examples.checkpoint_store:make_store

The report shows ``checkpoints`` certified and every other class as
*not claimed*.  It reuses the contract's validation helpers so that bad input
is refused exactly as the reference refuses it.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from cortex_spec import CheckpointState, ids
from cortex_spec.checkpoints import (
    Checkpoint,
    CheckpointFilter,
    Decision,
    resolved,
    validate_checkpoint_filter,
    validate_decision,
    validate_new_checkpoint,
)
from cortex_spec.clock import Clock, truncate_ms
from cortex_spec.context import Context, require_context, require_scope
from cortex_spec.errors import AlreadyExists, CheckpointNotFound, InvalidState
from cortex_spec.validation import check_page, page


class DictCheckpointStore:
    capabilities = frozenset({"checkpoints"})

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._rows: dict[str, Checkpoint] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        pass

    def _visible(self, scope: Any, checkpoint_id: str) -> Checkpoint:
        row = self._rows.get(checkpoint_id)
        if row is None or not scope.covers(row.scope):
            raise CheckpointNotFound(f"checkpoint {checkpoint_id} not found")
        return row

    def create_checkpoint(self, ctx: Context, checkpoint: Checkpoint) -> Checkpoint:
        require_scope(ctx)
        with self._lock:
            row = validate_new_checkpoint(checkpoint, ctx, truncate_ms(self.clock.now()))
            if row.id in self._rows:
                raise AlreadyExists(f"checkpoint {row.id} already exists")
            self._rows[row.id] = row
            return copy.deepcopy(row)

    def get_checkpoint(self, ctx: Context, checkpoint_id: str) -> Checkpoint:
        scope = require_scope(ctx)
        ids.check_id(checkpoint_id, ids.CHECKPOINT, "checkpoint_id")
        with self._lock:
            return copy.deepcopy(self._visible(scope, checkpoint_id))

    def resolve(self, ctx: Context, checkpoint_id: str, decision: Decision) -> Checkpoint:
        scope = require_scope(ctx)
        ids.check_id(checkpoint_id, ids.CHECKPOINT, "checkpoint_id")
        decision = validate_decision(decision)
        with self._lock:
            row = self._visible(scope, checkpoint_id)
            if row.state != CheckpointState.PENDING:
                raise InvalidState(f"checkpoint {checkpoint_id} is already resolved")
            # the resolved checkpoint as it will be stored, measured first
            # (CP-RESOLVE-7, RSC-GEN-13): over 8 MiB, InvalidArgument and no write
            row = resolved(row, decision, truncate_ms(self.clock.now()))
            self._rows[checkpoint_id] = row
            return copy.deepcopy(row)

    def _pending(self, ctx: Context, flt: CheckpointFilter | None) -> tuple[list[Checkpoint], CheckpointFilter]:
        scope = require_scope(ctx)
        flt = validate_checkpoint_filter(flt)
        with self._lock:
            rows = [
                r for r in self._rows.values()
                if r.state == CheckpointState.PENDING and scope.covers(r.scope)
                and (flt.run_id is None or r.run_id == flt.run_id)
            ]
        rows.sort(key=lambda r: (r.created_at, r.id))
        return rows, flt

    def list_pending(self, ctx: Context, filter: CheckpointFilter | None = None) -> list[Checkpoint]:
        rows, flt = self._pending(ctx, filter)
        return copy.deepcopy(page(rows, flt.limit, flt.offset))

    def count_pending(self, ctx: Context, filter: CheckpointFilter | None = None) -> int:
        return len(self._pending(ctx, filter)[0])

    def list_pending_across_scopes(
        self, ctx: Context, after_id: str | None = None, limit: int = 0
    ) -> list[Checkpoint]:
        require_context(ctx)
        after = ids.check_optional_id(after_id, ids.CHECKPOINT, "after_id")
        limit, _ = check_page(limit)
        with self._lock:
            rows = sorted(
                (r for r in self._rows.values()
                 if r.state == CheckpointState.PENDING and (after is None or r.id > after)),
                key=lambda r: r.id,
            )
        return copy.deepcopy(page(rows, limit, 0))


def make_store(clock: Clock) -> DictCheckpointStore:
    """The factory ``--cortex-store examples.checkpoint_store:make_store`` calls."""
    return DictCheckpointStore(clock)
