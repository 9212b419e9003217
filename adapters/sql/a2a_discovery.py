"""Class ``a2a_discovery`` on SQL (spec: a2a_discovery.md): the three
background passes of class ``a2a`` at exactly ``ctx.scope``.

Each is its twin's statement with the exact-scope condition added
(``scope_depth = :depth`` next to the level equalities, SCOPE-EXACT-1): the
queue and the expired asks are one SELECT; the reclaim selects its
candidates in one SELECT and moves each with its own conditional UPDATE
that re-checks staleness, the token, the partition and the exact scope
(A2A-ROUTE-3, as A2A-RCL-5).
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from cortex_spec.a2a import Delivery, PendingAsk
from cortex_spec.context import Context, require_scope
from cortex_spec.validation import check_instant, check_page

from .a2a import (
    _QUEUED,
    A2AMixin,
    _ask_from_row,
    _delivery_from_row,
    _page_params,
    _paged,
    _seen,
    _stale,
)
from .schema import a2a_asks, a2a_deliveries
from .store import ms, visible

__all__ = ["DiscoveryMixin"]


@lru_cache(maxsize=None)
def _queued_in_scope(depth: int, limit: bool) -> sa.Select[Any]:
    d = a2a_deliveries
    stmt = sa.select(d).where(_seen(d, depth, exact=True), d.c.state == _QUEUED).order_by(d.c.created_at, d.c.id)
    return _paged(stmt, False, limit)


@lru_cache(maxsize=None)
def _stale_in_scope(depth: int, limit: bool) -> sa.Select[Any]:
    d = a2a_deliveries
    stmt = (sa.select(d.c.id, d.c.claim_token).where(_stale(d), visible(d, depth, exact=True))
            .order_by(d.c.claimed_at, d.c.id))
    return _paged(stmt, False, limit)


@lru_cache(maxsize=None)
def _reclaim_one_in_scope(depth: int) -> sa.Update:
    d = a2a_deliveries
    return (
        sa.update(d)
        .where(d.c.id == sa.bindparam("w_id"), d.c.claim_token == sa.bindparam("w_token"), _stale(d),
               visible(d, depth, exact=True))
        .values(state=_QUEUED, claim_token=None, claimed_at=None, updated_at=sa.bindparam("w_now"))
    )


@lru_cache(maxsize=None)
def _expired_in_scope(depth: int, limit: bool) -> sa.Select[Any]:
    a = a2a_asks
    stmt = (
        sa.select(a)
        .where(_seen(a, depth, exact=True), a.c.claimed_at.is_(None), a.c.deadline.is_not(None),
               a.c.deadline <= sa.bindparam("w_now", type_=sa.BigInteger))
        .order_by(a.c.deadline, a.c.reply_with)  # A2A-ASK-8's order
    )
    return _paged(stmt, False, limit)


class DiscoveryMixin(A2AMixin):
    def list_queued_deliveries_in_scope(self, ctx: Context, limit: int = 0) -> list[Delivery]:
        require_scope(ctx)  # A2A-ROUTE-1
        limit, _ = check_page(limit)
        params = self._a2a_params(ctx)
        _, has_limit = _page_params(params, limit)
        stmt = _queued_in_scope(ctx.scope.depth, has_limit)
        return self._read(lambda conn: [_delivery_from_row(r) for r in conn.execute(stmt, params)])

    def reclaim_stale_deliveries_in_scope(self, ctx: Context, older_than: datetime, limit: int = 0) -> int:
        require_scope(ctx)
        cutoff = ms(check_instant(older_than, "older_than"))
        limit, _ = check_page(limit)
        now = ms(self._now())
        params = self._a2a_params(ctx, w_cut=cutoff)
        _, has_limit = _page_params(params, limit)
        select = _stale_in_scope(ctx.scope.depth, has_limit)
        candidates = self._read(lambda conn: [(r.id, r.claim_token) for r in conn.execute(select, params)])
        move = _reclaim_one_in_scope(ctx.scope.depth)
        # A2A-ROUTE-3: one re-checking step per row
        return self._a2a_move_each(move, [
            self._a2a_params(ctx, w_cut=cutoff, w_id=delivery_id, w_token=token, w_now=now)
            for delivery_id, token in candidates])

    def list_expired_asks_in_scope(self, ctx: Context, now: datetime, limit: int = 0) -> list[PendingAsk]:
        require_scope(ctx)
        cutoff = ms(check_instant(now, "now"))
        limit, _ = check_page(limit)
        params = self._a2a_params(ctx, w_now=cutoff)
        _, has_limit = _page_params(params, limit)
        stmt = _expired_in_scope(ctx.scope.depth, has_limit)
        return self._read(lambda conn: [_ask_from_row(r) for r in conn.execute(stmt, params)])
