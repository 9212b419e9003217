"""Conformance class ``a2a_discovery``: scoped orchestration discovery (spec:
a2a_discovery.md).

The seed's ``SupportsScopedOrchestrationDiscovery``: queue discovery, stale
reclaim and ask expiry restricted to exactly ``ctx.scope`` (and, as every
a2a method, to ``ctx.partition``), for a bus bound to one team's roster.
Each backend writes them next to their across-scope twins of class ``a2a``
(they share the twins' predicates and orders and add the exact scope).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from .a2a import Delivery, PendingAsk
from .context import Context

__all__ = ["ScopedDiscoveryStore", "DISCOVERY_METHODS"]


@runtime_checkable
class ScopedDiscoveryStore(Protocol):
    """What a store of class ``a2a_discovery`` provides (a2a_discovery.md)."""

    def list_queued_deliveries_in_scope(self, ctx: Context, limit: int = 0) -> list[Delivery]:
        """A2A-QUEUE-1 at exactly ``ctx.scope`` (A2A-ROUTE-2)."""
        ...

    def reclaim_stale_deliveries_in_scope(self, ctx: Context, older_than: datetime, limit: int = 0) -> int:
        """A2A-RCL-1..9 at exactly ``ctx.scope`` (A2A-ROUTE-2/3)."""
        ...

    def list_expired_asks_in_scope(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        """A2A-ASK-8..11 at exactly ``ctx.scope`` (A2A-ROUTE-2)."""
        ...


#: The class's methods, in declaration order.
DISCOVERY_METHODS = ("list_queued_deliveries_in_scope", "reclaim_stale_deliveries_in_scope",
                     "list_expired_asks_in_scope")
