"""Reference semantics of class ``runs`` (spec: runs.md)."""

from __future__ import annotations

from cortex_spec import ids
from cortex_spec.context import Context, require_scope
from cortex_spec.entities import detach
from cortex_spec.errors import AlreadyExists, RunNotFound
from cortex_spec.runs import (
    Run,
    RunFilter,
    Step,
    ToolCall,
    apply_run_update,
    validate_new_run,
    validate_new_step,
    validate_new_tool_call,
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


class RunsMixin(StoreBase):
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

    def create_step(self, ctx: Context, step: Step) -> Step:
        require_scope(ctx)
        with self._tx() as t:
            stored = validate_new_step(step, ctx, self._now())
            if stored.id in t.steps:
                raise AlreadyExists(f"step {stored.id} already exists")  # STEP-2
            t.steps[stored.id] = detach(stored)
            return stored

    def list_steps(self, ctx: Context, run_id: str) -> list[Step]:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._tx() as t:
            rows: list[Step] = [
                s for s in t.steps.values() if s.run_id == run_id and scope.covers(s.scope)
            ]
            rows.sort(key=lambda s: (s.index, s.id))  # STEP-4
            return [detach(s) for s in rows]

    def create_tool_call(self, ctx: Context, tool_call: ToolCall) -> ToolCall:
        require_scope(ctx)
        with self._tx() as t:
            stored = validate_new_tool_call(tool_call, ctx, self._now())
            if stored.id in t.tool_calls:
                raise AlreadyExists(f"tool call {stored.id} already exists")  # TCALL-1
            t.tool_calls[stored.id] = detach(stored)
            return stored

    def list_tool_calls(self, ctx: Context, step_id: str) -> list[ToolCall]:
        scope = require_scope(ctx)
        ids.check_id(step_id, ids.STEP, "step_id")
        with self._tx() as t:
            rows: list[ToolCall] = [
                c for c in t.tool_calls.values()
                if c.step_id == step_id and scope.covers(c.scope)
            ]
            rows.sort(key=lambda c: (c.created_at, c.id))  # TCALL-2
            return [detach(c) for c in rows]
