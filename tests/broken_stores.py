"""Deliberately broken stores for the plugin's own tests.

Each is the reference with one realistic bug; certification must reject it
and name the clause it breaks.  (The full mutant zoo is ``tests/mutants.py``.)
"""

from __future__ import annotations

import time

from cortex_spec.context import require_scope
from cortex_spec.entities import detach, replace
from cortex_spec.errors import BackendUnavailable, NotSuspended, SuspensionExpired
from cortex_spec.harness import Harness
from cortex_spec.reference import MemoryStore
from cortex_spec.reference.harness import ReferenceHarness
from cortex_spec.runs import RunState


class ReadThenWriteClaim(MemoryStore):
    """claim_suspension checks under the lock, lets go, then writes: two
    racing claimers can both win."""

    def claim_suspension(self, ctx, run_id):
        scope = require_scope(ctx)
        with self._tx() as t:
            now = self._now()
            s = self._visible_suspension(t, scope, run_id)
            if s.expires_at is not None and s.expires_at <= now:
                raise SuspensionExpired(f"the suspension of run {run_id} has expired")
            run = t.runs.get(run_id)
            if run is None or not scope.covers(run.scope) or run.state != RunState.PAUSED:
                raise NotSuspended(f"run {run_id} is not paused")
        time.sleep(0.002)  # the gap between the read and the write
        with self._tx() as t:
            t.runs[run_id] = replace(t.runs[run_id], state=RunState.RUNNING, updated_at=now)
            return detach(s)


class DeadlineOnResumeSide(MemoryStore):
    """The deadline instant goes to the resume claim instead of the sweeper."""

    def claim_suspension(self, ctx, run_id):
        scope = require_scope(ctx)
        with self._tx() as t:
            now = self._now()
            s = self._visible_suspension(t, scope, run_id)
            if s.expires_at is not None and s.expires_at < now:  # should be <=
                raise SuspensionExpired(f"the suspension of run {run_id} has expired")
            self._move_paused_run(t, scope, run_id, now)
            return detach(s)


def read_then_write(clock):
    return ReadThenWriteClaim(clock)


def deadline_on_resume_side(clock):
    return DeadlineOnResumeSide(clock)


class ReadThenWriteHarness(ReferenceHarness):
    name = "read-then-write"

    def open(self, location, clock):
        return ReadThenWriteClaim(clock, medium=location)


class ServerThatWontStart(Harness):
    name = "dead-server"

    def start(self):
        raise BackendUnavailable("could not connect to postgresql://127.0.0.1:1/x: connection refused")
