"""Reference semantics of class ``suspensions`` (spec: suspensions.md).

Both claims are one step under the store's lock: the suspension's
visibility and deadline are checked and the run is moved in the same atomic
step (SUSP-CLAIM-9), and a refused claim writes nothing (SUSP-CLAIM-8).
"""

from __future__ import annotations

from datetime import datetime

from cortex_spec import ids
from cortex_spec.context import Context, require_context, require_scope
from cortex_spec.entities import detach, replace
from cortex_spec.errors import AlreadyExists, NotSuspended, SuspensionExpired
from cortex_spec.runs import RunState
from cortex_spec.scope import Scope
from cortex_spec.suspensions import (
    Suspension,
    resume_eligible,
    sweep_eligible,
    validate_new_suspension,
)
from cortex_spec.validation import check_instant, check_page, page

from .store import MemoryMedium, StoreBase

__all__ = ["SuspensionsMixin"]


def _by_deadline(rows: list[Suspension]) -> list[Suspension]:
    return sorted(rows, key=lambda s: (s.expires_at, s.id))  # SUSP-LIST-3


class SuspensionsMixin(StoreBase):
    def create_suspension(self, ctx: Context, suspension: Suspension) -> Suspension:
        require_scope(ctx)
        with self._tx() as t:
            stored = validate_new_suspension(suspension, ctx, self._now())
            if stored.run_id in t.suspensions:  # SUSP-CREATE-2, any scope
                raise AlreadyExists(f"run {stored.run_id} already has a suspension")
            if stored.id in t.suspension_ids:  # SUSP-CREATE-3
                raise AlreadyExists(f"suspension {stored.id} already exists")
            t.suspensions[stored.run_id] = detach(stored)
            t.suspension_ids[stored.id] = stored.run_id
            return stored

    def _visible_suspension(self, t: MemoryMedium, scope: Scope, run_id: str) -> Suspension:
        s = t.suspensions.get(run_id)
        if s is None or not scope.covers(s.scope):
            raise NotSuspended(f"run {run_id} has no suspension")
        return s

    def get_suspension(self, ctx: Context, run_id: str) -> Suspension:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._tx() as t:
            return detach(self._visible_suspension(t, scope, run_id))

    def _move_paused_run(self, t: MemoryMedium, scope: Scope, run_id: str, now: datetime) -> None:
        """The run half of both claims: visible and paused → running."""
        run = t.runs.get(run_id)
        if run is None or not scope.covers(run.scope) or run.state != RunState.PAUSED:
            raise NotSuspended(f"run {run_id} is not paused")  # SUSP-CLAIM-7
        # SUSP-CLAIM-2: only state, updated_at and the revision (RUN-REV-2) change.
        t.runs[run_id] = replace(run, state=RunState.RUNNING, updated_at=now, revision=run.revision + 1)

    def claim_suspension(self, ctx: Context, run_id: str) -> Suspension:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._tx() as t:
            now = self._now()
            s = self._visible_suspension(t, scope, run_id)  # SUSP-CLAIM-5
            if not resume_eligible(s.expires_at, now):
                raise SuspensionExpired(f"the suspension of run {run_id} has expired")
            self._move_paused_run(t, scope, run_id, now)
            return detach(s)  # SUSP-CLAIM-3/4: the row is untouched

    def claim_expired_suspension(self, ctx: Context, run_id: str, now: datetime) -> Suspension:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        cutoff = check_instant(now, "now")
        with self._tx() as t:
            clock_now = self._now()
            s = self._visible_suspension(t, scope, run_id)
            if not sweep_eligible(s.expires_at, cutoff):
                raise NotSuspended(f"the suspension of run {run_id} is not expired")
            self._move_paused_run(t, scope, run_id, clock_now)  # SUSP-XCLAIM-2
            return detach(s)

    def delete_suspension(self, ctx: Context, run_id: str) -> None:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._tx() as t:
            s = self._visible_suspension(t, scope, run_id)  # SUSP-DEL-1
            del t.suspensions[run_id]
            del t.suspension_ids[s.id]

    def list_expired(self, ctx: Context, now: datetime, limit: int = 0) -> list[Suspension]:
        scope = require_scope(ctx)
        cutoff = check_instant(now, "now")
        limit, _ = check_page(limit)
        with self._tx() as t:
            rows = [
                s for s in t.suspensions.values()
                if scope.covers(s.scope) and sweep_eligible(s.expires_at, cutoff)
            ]
            return [detach(s) for s in page(_by_deadline(rows), limit, 0)]

    def list_expired_across_scopes(
        self, ctx: Context, now: datetime, limit: int = 0
    ) -> list[Suspension]:
        require_context(ctx)  # SCOPE-XS-2: a zero scope is fine
        cutoff = check_instant(now, "now")
        limit, _ = check_page(limit)
        with self._tx() as t:
            rows = [s for s in t.suspensions.values() if sweep_eligible(s.expires_at, cutoff)]
            return [detach(s) for s in page(_by_deadline(rows), limit, 0)]
