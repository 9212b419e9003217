"""Reference semantics of class ``a2a_discovery`` (spec: a2a_discovery.md):
the three background passes of class ``a2a`` at exactly ``ctx.scope``,
written with the same helpers as their across-scope twins.  The in-scope
reclaim is one step under the lock, as its twin, and offers the same two
halves (:meth:`_select_stale_in_scope`, :meth:`_move_stale_in_scope`) to the
linearizability model's split of A2A-ROUTE-3."""

from __future__ import annotations

from datetime import datetime

from cortex_spec.a2a import Delivery, DeliveryState, PendingAsk, e_visible
from cortex_spec.context import Context, require_scope
from cortex_spec.scope import Scope
from cortex_spec.validation import check_instant, check_page

from .a2a import A2AMixin, _page

__all__ = ["DiscoveryMixin"]


class DiscoveryMixin(A2AMixin):
    def list_queued_deliveries_in_scope(self, ctx: Context, limit: int = 0) -> list[Delivery]:
        require_scope(ctx)  # A2A-ROUTE-1
        limit, _ = check_page(limit)
        with self._tx() as t:
            rows = [d for d in t.a2a_deliveries.values() if e_visible(ctx, d) and d.state == DeliveryState.QUEUED]
            rows.sort(key=lambda d: (d.created_at, d.id))  # A2A-QUEUE-1's order
            return _page(rows, limit)

    def _reclaim_args_in_scope(self, ctx: Context, older_than: datetime, limit: int) -> tuple[Scope, datetime, int]:
        scope = require_scope(ctx)
        cutoff = check_instant(older_than, "older_than")
        limit, _ = check_page(limit)
        return scope, cutoff, limit

    def reclaim_stale_deliveries_in_scope(self, ctx: Context, older_than: datetime, limit: int = 0) -> int:
        scope, cutoff, limit = self._reclaim_args_in_scope(ctx, older_than, limit)
        with self._tx() as t:
            now = self._now()
            candidates = self._candidates(t, ctx.partition, cutoff, limit, scope)
            return sum(self._move(t, ctx.partition, cutoff, i, tok, now, scope) for i, tok in candidates)

    def _select_stale_in_scope(
        self, ctx: Context, older_than: datetime, limit: int = 0
    ) -> tuple[tuple[str, str], ...]:
        scope, cutoff, limit = self._reclaim_args_in_scope(ctx, older_than, limit)
        with self._tx() as t:
            return tuple(self._candidates(t, ctx.partition, cutoff, limit, scope))

    def _move_stale_in_scope(self, ctx: Context, older_than: datetime, delivery_id: str, token: str) -> bool:
        cutoff = check_instant(older_than, "older_than")
        with self._tx() as t:
            return self._move(t, ctx.partition, cutoff, delivery_id, token, self._now(), ctx.scope)

    def list_expired_asks_in_scope(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        require_scope(ctx)
        cutoff = check_instant(now, "now")
        limit, _ = check_page(limit)
        with self._tx() as t:
            return self._expired([a for a in t.a2a_asks.values() if e_visible(ctx, a)], cutoff, limit)
