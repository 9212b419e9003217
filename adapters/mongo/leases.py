"""Class ``leases`` on MongoDB (spec: leases.md).

A run's lease is the ``run.lease`` sub-document of its slot (see
:mod:`.runs`), with ``run.reclaim_count`` and ``run.notified_at``.  A hold
is one of two conditional single-document updates whose filters split the
rule of LEASE-HOLD-1 into disjoint halves:

* *take* — the run is visible and running and its lease is absent or the
  caller's own: ``$set`` the lease;
* *take over* — the run is visible and running and another owner's lease
  expired at or before the call's now: ``$set`` the lease and ``$inc``
  ``reclaim_count`` in the same update (LEASE-HOLD-6).

Each is atomic on its own document, so of racing holds exactly one matches
(LEASE-HOLD-8), and a hold takes effect at the update that matched.  One
that matched neither is classified from one read of the slot; if that read
shows a run the hold could now take, the updates run again.  A mark is one
conditional update (only forward); each listing is one query on the runs
collection, whose slots carry the suspension beside the run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cortex_spec.context import Context, require_context, require_scope
from cortex_spec.errors import InvalidState, LeaseHeld, RunNotFound, StoreError
from cortex_spec.leases import Hold, check_lease, check_run_id, hold_decision
from cortex_spec.runs import Lease, Run, RunState
from cortex_spec.validation import check_instant, check_page

from .runs import lease_out, run_from_doc
from .store import MongoStoreBase, dt_in, dt_out, scope_filter

__all__ = ["LeasesMixin"]

_ATTEMPTS = 100
_RUNNING = RunState.RUNNING.value


def _lapsed(now: datetime) -> dict[str, Any]:
    """LEASE-LAPSED-1 as a query."""
    return {"run.state": _RUNNING, "run.lease": {"$ne": None}, "run.lease.expires_at": {"$lte": dt_out(now)}}


class LeasesMixin(MongoStoreBase):
    def hold_lease(self, ctx: Context, run_id: str, lease: Lease) -> None:
        scope = require_scope(ctx)
        run_id = check_run_id(run_id)
        lease = check_lease(lease)
        with self._guard():
            now = self._now()
            base = {"_id": run_id, **scope_filter("run.scope", scope), "run.state": _RUNNING}
            take = {**base, "$or": [{"run.lease": None}, {"run.lease.owner": lease.owner}]}
            takeover = {**base, "run.lease": {"$ne": None}, "run.lease.owner": {"$ne": lease.owner},
                        "run.lease.expires_at": {"$lte": dt_out(now)}}
            written = {"$set": {"run.lease": lease_out(lease)}}
            for _ in range(_ATTEMPTS):
                if self._runs.update_one(take, written).matched_count == 1:
                    return
                if self._runs.update_one(takeover, {**written, "$inc": {"run.reclaim_count": 1}}).matched_count:
                    return
                slot = self._runs.find_one({"_id": run_id, **scope_filter("run.scope", scope)},
                                           projection={"run.state": 1, "run.lease": 1})
                if slot is None:
                    raise RunNotFound(f"run {run_id} not found")  # LEASE-HOLD-2
                run = slot["run"]
                if run["state"] != _RUNNING:
                    raise InvalidState(f"run {run_id} is {run['state']}, not running")  # LEASE-HOLD-3
                held = run.get("lease")
                current = None if held is None else Lease(owner=held["owner"], expires_at=dt_in(held["expires_at"]))
                if hold_decision(current, lease.owner, now) is Hold.HELD:
                    raise LeaseHeld(f"run {run_id} is leased to another owner")  # LEASE-HOLD-4
                # holdable now: the slot changed between the statements
            raise StoreError(f"the hold on run {run_id} kept racing concurrent writes")

    def mark_notified(self, ctx: Context, run_id: str, at: datetime) -> None:
        scope = require_scope(ctx)
        run_id = check_run_id(run_id)
        at = check_instant(at, "at")  # LEASE-NOTIFY-4
        with self._guard():
            visible = {"_id": run_id, **scope_filter("run.scope", scope)}
            earlier = {"$or": [{"run.notified_at": None}, {"run.notified_at": {"$lt": dt_out(at)}}]}
            if self._runs.update_one({**visible, **earlier}, {"$set": {"run.notified_at": dt_out(at)}}).matched_count:
                return
            # marked at or after `at` already, or not there at all (runs are never deleted)
            if self._runs.find_one(visible, projection={"_id": 1}) is None:
                raise RunNotFound(f"run {run_id} not found")  # LEASE-NOTIFY-2

    def list_lapsed_across_scopes(self, ctx: Context, now: datetime, limit: int = 0) -> list[Run]:
        require_context(ctx)  # LEASE-LAPSED-3
        cutoff = check_instant(now, "now")
        limit, _ = check_page(limit)
        with self._guard():
            slots = self._find(self._runs, _lapsed(cutoff), projection={"run": 1},
                               sort=[("run.lease.expires_at", 1), ("_id", 1)], limit=limit)  # LEASE-LAPSED-2
            return [run_from_doc(s["_id"], s["run"]) for s in slots]

    def list_continuable_across_scopes(self, ctx: Context, notified_before: datetime,
                                       limit: int = 0) -> list[Run]:
        require_context(ctx)  # LEASE-CONT-3
        before = check_instant(notified_before, "notified_before")  # LEASE-CONT-4
        limit, _ = check_page(limit)
        with self._guard():
            now = self._now()
            ready = {"run.state": RunState.PAUSED.value, "susp": {"$exists": True},
                     "$or": [{"susp.expires_at": None}, {"susp.expires_at": {"$gt": dt_out(now)}}]}
            query = {"$and": [
                {"$or": [ready, _lapsed(now)]},
                {"$or": [{"run.notified_at": None}, {"run.notified_at": {"$lt": dt_out(before)}}]},
            ]}
            slots = self._find(self._runs, query, projection={"run": 1}, sort=[("_id", 1)],
                               limit=limit)  # LEASE-CONT-2
            return [run_from_doc(s["_id"], s["run"]) for s in slots]
