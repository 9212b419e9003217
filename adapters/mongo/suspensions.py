"""Class ``suspensions`` on MongoDB: the suspension lives on the run's document.

The design decision (SUSP-CLAIM-9)
----------------------------------

Both claims must decide, in one atomic step, three things: the suspension
exists and is visible, its deadline is on the claim's side of the partition
(SUSP-PART-1), and the run is visible and ``paused`` — and then flip the run.
The Go Mongo store keeps the suspension in its own collection, reads it,
checks the deadline in application code and then runs a ``FindOneAndUpdate``
on the run: between the read and the write the clock moves, so a resume and
a sweep can disagree about the instant (and a suspension deleted in between
is still "claimed").  The contract forbids that window.

MongoDB makes exactly one kind of operation atomic without a transaction: an
operation on one document.  So this store keeps **one document per run id**
(the *run slot*, in the ``runs`` collection) holding both the run (``run``)
and its suspension (``susp``), and a claim is a single
``find_one_and_update`` whose filter is the whole decision::

    {"_id": run_id,
     "susp.scope...": <visible to ctx.scope>,
     "$or": [{"susp.expires_at": None}, {"susp.expires_at": {"$gt": now}}],
     "run.scope...": <visible to ctx.scope>,
     "run.state": "paused"}
    -> {"$set": {"run.state": "running", "run.updated_at": now}, "$inc": {"run.revision": 1}}

(the sweep claim uses ``{"susp.expires_at": {"$ne": None, "$lte": now}}``).
The server evaluates the filter and applies the write to the one document
atomically, so the deadline, the suspension's existence and the run's state
are all judged at the same instant, against the same ``now``.

Why not the alternatives:

* *A copy of the deadline on the run document, the suspension in its own
  collection*: the copy must be written and removed together with the
  suspension, and a suspension may exist before its run (SUSP-CREATE-4) —
  two documents changing together is a multi-document transaction again.
* *A multi-document transaction*: needs a replica set (a standalone server
  has none), is not available on mongomock, and under snapshot isolation a
  claim that reads the suspension and writes the run does not conflict with
  a delete that writes only the suspension (write skew) unless extra writes
  are added.  The single-document design needs no transaction anywhere, so
  the store works the same on a standalone server, a replica set and
  mongomock.

Consequences, each handled by one single-document operation:

* ``create_suspension`` before the run exists inserts a slot with only a
  ``susp`` part; ``create_run`` later fills the ``run`` part of that slot.
  Both are ``update_one({"_id": id, part: {"$exists": False}}, {"$set":
  {part: ...}}, upsert=True)``: one per run id (SUSP-CREATE-2) because the
  slot's ``_id`` is the run id, suspension ids unique through a partial
  unique index on ``susp.id`` (SUSP-CREATE-3).
* ``delete_suspension`` is ``$unset`` of ``susp`` filtered on its
  visibility: it never touches the run part (SUSP-DEL-2).  A slot left with
  neither part is removed by a conditional delete (it matches only a slot
  that is still empty).
* A refused claim is classified from one read of the slot taken after the
  refused update (a refusal writes nothing, so it takes effect at that read).
  If that read shows a claimable slot — the slot changed between the two
  operations — the claim starts again; it never reports an error that its
  own snapshot does not justify.

Limit: a run and its suspension share one document, and a MongoDB server
refuses documents over 16 MiB.  A run and a suspension that are each close
to the 8 MiB entity limit (RSC-GEN-8) cannot both be stored for the same run
on a real server (``StoreError``); mongomock has no such limit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from cortex_spec import ids
from cortex_spec.context import Context, require_context, require_scope
from cortex_spec.entities import detach
from cortex_spec.errors import AlreadyExists, CortexError, NotSuspended, StoreError, SuspensionExpired
from cortex_spec.runs import RunState
from cortex_spec.scope import Scope
from cortex_spec.suspensions import (
    PendingCall,
    Suspension,
    SuspensionReason,
    resume_eligible,
    sweep_eligible,
    validate_new_suspension,
)
from cortex_spec.validation import check_instant, check_page

from .runs import RunsMixin
from .store import decode, dt_in, dt_out, json_in, json_out, opt_dt_in, scope_filter, scope_in, scope_out

__all__ = ["SuspensionsMixin", "susp_doc", "susp_from_doc"]

#: how often a claim starts again when its slot changed between its update
#: and the read that classifies a refusal (each retry needs a concurrent write)
_RETRIES = 100


def susp_doc(s: Suspension) -> dict[str, Any]:
    return {
        "id": s.id,
        "scope": scope_out(s.scope),
        "reason": SuspensionReason(s.reason).value,
        "pending": [{"id": p.id, "name": p.name, "arguments": p.arguments} for p in s.pending],
        "continuation": json_out(s.continuation),
        "expires_at": dt_out(s.expires_at),
        "created_at": dt_out(s.created_at),
        "updated_at": dt_out(s.updated_at),
    }


def susp_from_doc(run_id: str, doc: dict[str, Any]) -> Suspension:
    return decode(f"the stored suspension of run {run_id}", lambda: Suspension(
        id=doc["id"],
        run_id=run_id,
        scope=scope_in(doc["scope"]),
        reason=SuspensionReason(doc["reason"]),
        pending=tuple(
            PendingCall(id=p["id"], name=p["name"], arguments=p["arguments"])
            for p in doc["pending"]
        ),
        continuation=json_in(doc["continuation"]),
        expires_at=opt_dt_in(doc["expires_at"]),
        created_at=dt_in(doc["created_at"]),
        updated_at=dt_in(doc["updated_at"]),
    ))


def _resume_side(now: datetime) -> dict[str, Any]:
    """SUSP-PART-1, resume side, as a query: no deadline, or one after ``now``."""
    return {"$or": [{"susp.expires_at": None}, {"susp.expires_at": {"$gt": dt_out(now)}}]}


def _sweep_side(cutoff: datetime) -> dict[str, Any]:
    """SUSP-PART-1, sweep side, as a query: a deadline at or before ``cutoff``."""
    return {"susp.expires_at": {"$ne": None, "$lte": dt_out(cutoff)}}


def _expired_query(cutoff: datetime, scope: Scope | None) -> dict[str, Any]:
    query = _sweep_side(cutoff)
    if scope is not None:
        query.update(scope_filter("susp.scope", scope))
    return query


class SuspensionsMixin(RunsMixin):
    def _on_duplicate(self, part: str, doc: dict[str, Any]) -> None:
        if part == "susp" and self._runs.find_one({"susp.id": doc["id"]}, projection={"_id": 1}):
            raise AlreadyExists(f"suspension {doc['id']} already exists")  # SUSP-CREATE-3

    def create_suspension(self, ctx: Context, suspension: Suspension) -> Suspension:
        require_scope(ctx)
        with self._guard():
            stored = validate_new_suspension(suspension, ctx, self._now())
            # SUSP-CREATE-2/4: fill the slot's suspension part, whether or
            # not the run exists; taken → the run already has one.
            self._fill_slot(
                stored.run_id, "susp", susp_doc(stored),
                f"run {stored.run_id} already has a suspension",
            )
            return detach(stored)

    def get_suspension(self, ctx: Context, run_id: str) -> Suspension:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._guard():
            slot = self._runs.find_one(
                {"_id": run_id, **scope_filter("susp.scope", scope)}, projection={"susp": 1}
            )
            if slot is None:
                raise NotSuspended(f"run {run_id} has no suspension")  # SUSP-GET-1
            return susp_from_doc(run_id, slot["susp"])

    # -- the two claims ------------------------------------------------------------------

    def _claim(self, scope: Scope, run_id: str, side: dict[str, Any], clock_now: datetime,
               classify: Callable[[dict[str, Any] | None], CortexError | None]) -> Suspension:
        """One atomic decision-and-flip; a refusal classified from one read."""
        from pymongo import ReturnDocument

        decision = {
            "_id": run_id,
            **scope_filter("susp.scope", scope),
            **side,
            **scope_filter("run.scope", scope),
            "run.state": RunState.PAUSED.value,
        }
        flip = {"$set": {"run.state": RunState.RUNNING.value, "run.updated_at": dt_out(clock_now)},
                "$inc": {"run.revision": 1}}  # RUN-REV-2, in the same operation
        for _ in range(_RETRIES):
            before = self._runs.find_one_and_update(
                decision, flip, projection={"susp": 1}, return_document=ReturnDocument.BEFORE
            )
            if before is not None:
                # SUSP-CLAIM-3/4: the suspension part is untouched; return it
                return susp_from_doc(run_id, before["susp"])
            slot = self._runs.find_one({"_id": run_id})
            error = classify(slot)
            if error is not None:
                try:
                    raise error
                finally:
                    del error  # no cycle through this frame: the traceback keeps it
        raise StoreError(f"the claim of run {run_id} kept racing concurrent writes")

    @staticmethod
    def _visible_part(slot: dict[str, Any] | None, part: str, scope: Scope) -> dict[str, Any] | None:
        if slot is None or part not in slot:
            return None
        doc = slot[part]
        return doc if scope.covers(scope_in(doc["scope"])) else None

    def _run_paused(self, slot: dict[str, Any] | None, scope: Scope) -> bool:
        run = self._visible_part(slot, "run", scope)
        return run is not None and run.get("state") == RunState.PAUSED.value

    def claim_suspension(self, ctx: Context, run_id: str) -> Suspension:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._guard():
            now = self._now()

            def classify(slot: dict[str, Any] | None) -> CortexError | None:
                susp = self._visible_part(slot, "susp", scope)
                if susp is None:
                    return NotSuspended(f"run {run_id} has no suspension")  # SUSP-CLAIM-5
                if not resume_eligible(opt_dt_in(susp["expires_at"]), now):
                    # SUSP-CLAIM-6: whatever the run's state
                    return SuspensionExpired(f"the suspension of run {run_id} has expired")
                if not self._run_paused(slot, scope):
                    return NotSuspended(f"run {run_id} is not paused")  # SUSP-CLAIM-7
                return None  # claimable now: the slot changed under us, go again

            return self._claim(scope, run_id, _resume_side(now), now, classify)

    def claim_expired_suspension(self, ctx: Context, run_id: str, now: datetime) -> Suspension:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        cutoff = check_instant(now, "now")
        with self._guard():
            clock_now = self._now()

            def classify(slot: dict[str, Any] | None) -> CortexError | None:
                susp = self._visible_part(slot, "susp", scope)
                if susp is None:
                    return NotSuspended(f"run {run_id} has no suspension")
                if not sweep_eligible(opt_dt_in(susp["expires_at"]), cutoff):
                    return NotSuspended(f"the suspension of run {run_id} is not expired")
                if not self._run_paused(slot, scope):
                    return NotSuspended(f"run {run_id} is not paused")
                return None

            # SUSP-XCLAIM-2: compared with `now`, stamped with clock now
            return self._claim(scope, run_id, _sweep_side(cutoff), clock_now, classify)

    # -- delete and lists --------------------------------------------------------------------

    def delete_suspension(self, ctx: Context, run_id: str) -> None:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        with self._guard():
            result = self._runs.update_one(
                {"_id": run_id, **scope_filter("susp.scope", scope)}, {"$unset": {"susp": ""}}
            )
            if result.matched_count == 0:
                raise NotSuspended(f"run {run_id} has no suspension")  # SUSP-DEL-1
            # A slot with neither a run nor a suspension holds nothing: remove
            # it, but only while it is still empty (never a run, SUSP-DEL-2).
            self._runs.delete_one(
                {"_id": run_id, "run": {"$exists": False}, "susp": {"$exists": False}}
            )

    def list_expired(self, ctx: Context, now: datetime, limit: int = 0) -> list[Suspension]:
        scope = require_scope(ctx)
        cutoff = check_instant(now, "now")
        limit, _ = check_page(limit)
        return self._list_expired(_expired_query(cutoff, scope), limit)

    def list_expired_across_scopes(
        self, ctx: Context, now: datetime, limit: int = 0
    ) -> list[Suspension]:
        require_context(ctx)  # SCOPE-XS-2: a zero scope is fine
        cutoff = check_instant(now, "now")
        limit, _ = check_page(limit)
        return self._list_expired(_expired_query(cutoff, None), limit)

    def _list_expired(self, query: dict[str, Any], limit: int) -> list[Suspension]:
        with self._guard():
            slots = self._find(
                self._runs,
                query,
                projection={"susp": 1},
                sort=[("susp.expires_at", 1), ("susp.id", 1)],  # SUSP-LIST-3
                limit=limit,
            )
            return [susp_from_doc(s["_id"], s["susp"]) for s in slots]
