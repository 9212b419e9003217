"""Reference semantics of class ``runs`` (spec: runs.md)."""

from __future__ import annotations

from cortex_spec import ids
from cortex_spec.context import Context, require_scope
from cortex_spec.entities import detach
from cortex_spec.errors import AlreadyExists, RunNotFound
from cortex_spec.runs import (
    Run,
    RunFilter,
    RunsMethods,
    apply_run_update,
    validate_new_run,
    validate_run_filter,
    validate_run_update,
)
from cortex_spec.scope import Scope
from cortex_spec.validation import page

from .store import StoreBase

__all__ = ["RunsMixin"]


def _selects(scope: Scope, flt: RunFilter, run: Run) -> bool:
    """RUN-LIST-1: visibility (prefix or exact) plus the filter fields."""
    if flt.exact:
        if run.scope != scope:
            return False
    elif not scope.covers(run.scope):
        return False
    if flt.agent_id is not None and run.agent_id != flt.agent_id:
        return False
    if flt.state is not None and run.state != flt.state:
        return False
    return True


class RunsMixin(RunsMethods, StoreBase):
    """Runs by hand; steps and tool calls are the generated methods of
    :data:`cortex_spec.runs.TABLES` on the reference storage."""

    def create_run(self, ctx: Context, run: Run) -> Run:
        require_scope(ctx)
        with self._tx() as t:
            stored = validate_new_run(run, ctx, self._now())
            if stored.id in t.runs:
                raise AlreadyExists(f"run {stored.id} already exists")  # RUN-CREATE-2
            t.runs[stored.id] = detach(stored)
            return stored

    def get_run(self, ctx: Context, run_id: str) -> Run:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._tx() as t:
            run = t.runs.get(run_id)
            if run is None or not scope.covers(run.scope):
                raise RunNotFound(f"run {run_id} not found")
            return detach(run)

    def update_run(self, ctx: Context, run: Run) -> Run:
        scope = require_scope(ctx)
        run_id, fields = validate_run_update(run)
        with self._tx() as t:
            stored = t.runs.get(run_id)
            if stored is None or not scope.covers(stored.scope):
                raise RunNotFound(f"run {run_id} not found")  # RUN-UPD-1
            # RUN-UPD-2/3/5: unconditional, whole, only the mutable fields.
            # RUN-UPD-4 / LEASE-CLEAR-1/2: apply_run_update keeps the lease only while running.
            updated = apply_run_update(stored, detach(fields), self._now())
            t.runs[run_id] = updated
            return detach(updated)

    def _select_runs(self, ctx: Context, flt: RunFilter | None) -> tuple[list[Run], RunFilter]:
        scope = require_scope(ctx)
        flt = validate_run_filter(flt)
        with self._tx() as t:
            rows = [r for r in t.runs.values() if _selects(scope, flt, r)]
        return rows, flt

    def list_runs(self, ctx: Context, filter: RunFilter | None = None) -> list[Run]:
        rows, flt = self._select_runs(ctx, filter)
        rows.sort(key=lambda r: (r.created_at, r.id), reverse=True)  # RUN-LIST-2
        return [detach(r) for r in page(rows, flt.limit, flt.offset)]

    def count_runs(self, ctx: Context, filter: RunFilter | None = None) -> int:
        rows, _ = self._select_runs(ctx, filter)
        return len(rows)  # RUN-LIST-4: the page is ignored
