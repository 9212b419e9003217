"""A broken MongoDB adapter, for proving the faithful wrapper keeps races.

``ReadThenWriteStore`` claims the way the Go Mongo store checks its
deadline, taken one step further: it reads the run slot, decides in Python,
then writes the run with a second, unconditional operation.  Through the
faithful mongomock wrapper every single call is atomic, yet two claimers can
both read "paused" before either writes, so both win.  Certify it with
``--cortex-store mongo_mutants:ReadThenWriteHarness`` (this folder on
``PYTHONPATH``): the claim-race clauses fail.
"""

from __future__ import annotations

from cortex_spec import RunState, ids
from cortex_spec.adapters.mongo import MongoStore
from cortex_spec.adapters.mongo.harness import MongomockHarness
from cortex_spec.adapters.mongo.store import dt_out
from cortex_spec.adapters.mongo.suspensions import susp_from_doc
from cortex_spec.context import require_scope
from cortex_spec.errors import NotSuspended, SuspensionExpired
from cortex_spec.suspensions import resume_eligible


class ReadThenWriteStore(MongoStore):
    """``claim_suspension`` as ``find_one`` + checks + ``update_one``."""

    def claim_suspension(self, ctx, run_id):
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._guard():
            now = self._now()
            slot = self._runs.find_one({"_id": run_id})
            susp = self._visible_part(slot, "susp", scope)
            if susp is None:
                raise NotSuspended(f"run {run_id} has no suspension")
            suspension = susp_from_doc(run_id, susp)
            if not resume_eligible(suspension.expires_at, now):
                raise SuspensionExpired(f"the suspension of run {run_id} has expired")
            if not self._run_paused(slot, scope):
                raise NotSuspended(f"run {run_id} is not paused")
            self._runs.update_one(  # the race: not conditional on "paused"
                {"_id": run_id},
                {"$set": {"run.state": RunState.RUNNING.value, "run.updated_at": dt_out(now)}},
            )
            return suspension


class ReadThenWriteHarness(MongomockHarness):
    """Faithful mongomock, opening :class:`ReadThenWriteStore`."""

    name = "mongo-read-then-write"

    def open(self, location, clock):
        return ReadThenWriteStore(location.reopen()["cortex"], clock, close_client=True)
