"""Class ``a2a_discovery`` on MongoDB (spec: a2a_discovery.md): the three
background passes of class ``a2a`` at exactly ``ctx.scope``.

Each is its twin's query with the exact-scope filter added (``scope.n``
equal to the caller's depth next to the level equalities, SCOPE-EXACT-1);
the reclaim moves each candidate with its own ``update_one`` filtered on the
same token, on staleness, the partition and the exact scope (A2A-ROUTE-3).
"""

from __future__ import annotations

from datetime import datetime

from cortex_spec.a2a import Delivery, PendingAsk
from cortex_spec.context import Context, require_scope
from cortex_spec.validation import check_instant, check_page

from .a2a import _DELIVERING, _QUEUED, A2AMixin, _delivery_in, _page_kwargs, _seen
from .store import dt_out

__all__ = ["DiscoveryMixin"]


class DiscoveryMixin(A2AMixin):
    def list_queued_deliveries_in_scope(self, ctx: Context, limit: int = 0) -> list[Delivery]:
        require_scope(ctx)  # A2A-ROUTE-1
        limit, _ = check_page(limit)
        with self._guard():
            docs = self._find(self._a2a_deliveries, {**_seen(ctx, exact=True), "state": _QUEUED},
                              sort=[("created_at", 1), ("_id", 1)], **_page_kwargs(limit))
            return [_delivery_in(d) for d in docs]

    def reclaim_stale_deliveries_in_scope(self, ctx: Context, older_than: datetime, limit: int = 0) -> int:
        require_scope(ctx)
        cutoff = dt_out(check_instant(older_than, "older_than"))
        limit, _ = check_page(limit)
        now = dt_out(self._now())
        stale = {**_seen(ctx, exact=True), "state": _DELIVERING, "run_id": None,
                 "claimed_at": {"$ne": None, "$lt": cutoff}}  # A2A-RCL-2 at the exact scope
        with self._guard():
            candidates = self._find(self._a2a_deliveries, stale, projection={"claim_token": 1},
                                    sort=[("claimed_at", 1), ("_id", 1)], **_page_kwargs(limit))
            moved = 0
            for doc in candidates:  # A2A-ROUTE-3: one atomic, re-checking step per row
                result = self._a2a_deliveries.update_one(
                    {"_id": doc["_id"], "claim_token": doc["claim_token"], **stale},
                    {"$set": {"state": _QUEUED, "claim_token": None, "claimed_at": None, "updated_at": now}},
                )
                moved += result.modified_count
            return moved

    def list_expired_asks_in_scope(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        require_scope(ctx)
        return self._a2a_expired(_seen(ctx, exact=True), now, limit)
