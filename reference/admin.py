"""Reference semantics of class ``admin`` (spec: admin.md).

The medium's layout version is ``medium.schema["version"]``; every other
method refuses a medium of another version (``StoreBase._tx``), these four
work whatever it holds (``StoreBase._admin_tx``).  A stored scope is the
row's ``scope`` attribute: a :class:`~cortex_spec.Scope` (judged by its
levels) or, for a row written behind the store's back, anything else
(judged as stored text).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cortex_spec.admin import Inspection, ScopeIssue, check_visitor, schema_mismatch
from cortex_spec.context import Context, require_context
from cortex_spec.scope import Scope

from .store import SCHEMA_VERSION, MemoryMedium, StoreBase

__all__ = ["AdminMixin", "scoped_tables"]


def scoped_tables(medium: MemoryMedium) -> dict[str, dict[Any, Any]]:
    """The medium's tables of entities (rows that carry a scope), by storage
    name (the SQL table names without their prefix: ``kind_agents`` is
    ``agents``); the bookkeeping tables (the layout version, claim tokens,
    suspension ids, the gateway's) hold no scopes."""
    out = {}
    for name, table in medium.tables().items():
        if name in ("schema", "a2a_tokens", "suspension_ids") or name.startswith("gw_"):
            continue
        out[name.removeprefix("kind_")] = table
    return out


class AdminMixin(StoreBase):
    schema_version = SCHEMA_VERSION

    def ping(self, ctx: Context) -> None:
        require_context(ctx)
        with self._admin_tx():  # ADMIN-PING-1/2: a closed store refuses
            return

    def get_schema_version(self, ctx: Context) -> int:
        require_context(ctx)
        with self._admin_tx() as t:
            return t.schema["version"]  # ADMIN-MIG-1

    def migrate(self, ctx: Context) -> int:
        require_context(ctx)
        with self._admin_tx() as t:
            found = t.schema["version"]
            if found > SCHEMA_VERSION:
                raise schema_mismatch(found, SCHEMA_VERSION)  # ADMIN-MIG-4: nothing changes
            if found < SCHEMA_VERSION:
                # ADMIN-MIG-3: the reference has had one layout; an older
                # medium holds the same tables, only its version moves
                t.schema = {"version": SCHEMA_VERSION}
            return SCHEMA_VERSION

    def inspect_scopes(self, ctx: Context, visit: Callable[[ScopeIssue], object]) -> int:
        check_visitor(ctx, visit)
        with self._admin_tx() as t:  # what is stored now; visited outside the lock
            rows = [(kind, getattr(row, "id", key), row.scope)
                    for kind, table in scoped_tables(t).items() for key, row in table.items()
                    if hasattr(row, "scope")]

        def scan(inspection: Inspection) -> None:
            for kind, key, scope in rows:
                if isinstance(scope, Scope):
                    inspection.offer(kind, key, None, scope.levels)
                else:
                    inspection.offer(kind, key, scope)

        return Inspection(visit).run(scan)
