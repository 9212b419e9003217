"""Class ``a2a_discovery`` on MongoDB (spec: a2a_discovery.md): the three
background passes of class ``a2a`` at exactly ``ctx.scope``.

Each is its twin's query (the same method of :class:`.a2a.A2AMixin`) with the
exact-scope filter in place of the partition alone (``scope.n`` equal to the
caller's depth next to the level equalities, SCOPE-EXACT-1); the reclaim
moves each candidate with its own ``update_one`` filtered on the same token,
on staleness, the partition and the exact scope (A2A-ROUTE-3).
"""

from __future__ import annotations

from datetime import datetime

from cortex_spec.a2a import Delivery, PendingAsk
from cortex_spec.context import Context, require_scope

from .a2a import A2AMixin, _seen

__all__ = ["DiscoveryMixin"]


class DiscoveryMixin(A2AMixin):
    def list_queued_deliveries_in_scope(self, ctx: Context, limit: int = 0) -> list[Delivery]:
        require_scope(ctx)  # A2A-ROUTE-1
        return self._queued(_seen(ctx, exact=True), limit)

    def reclaim_stale_deliveries_in_scope(self, ctx: Context, older_than: datetime, limit: int = 0) -> int:
        require_scope(ctx)
        return self._reclaim_stale(_seen(ctx, exact=True), older_than, limit)

    def list_expired_asks_in_scope(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        require_scope(ctx)
        return self._a2a_expired(_seen(ctx, exact=True), now, limit)
