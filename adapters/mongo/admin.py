"""Class ``admin`` on MongoDB (spec: admin.md): ping, the layout version and
its migrations, and the scope inspection.

The version is the ``schema`` document of the ``<prefix>meta`` collection
(:data:`.store.SCHEMA_VERSION`).  A database with the store's collections
but no such document was made before versions were stored: version 0, the
same collections and documents; ``migrate`` creates what is missing (every
index the store relies on) and then stores version 1 — with ``$max``, so
concurrent migrations all end at 1 and none goes back (ADMIN-MIG-5).  No
step rewrites a document.

The inspection reads every collection whose documents carry a scope, in
``_id`` order, 500 documents per query, and calls the operator's ``visit``
between queries.  A run slot holds two entities: the run (``run.scope``,
kind ``runs``) and, when paused, its suspension (``susp.scope``, kind
``suspensions``, keyed by the suspension's id).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from cortex_spec.admin import Inspection, ScopeIssue, check_visitor, schema_mismatch
from cortex_spec.context import Context, require_context
from cortex_spec.scope import MAX_DEPTH

from .store import SCHEMA_VERSION, MongoStoreBase

__all__ = ["AdminMixin", "stored_scope"]

_PAGE = 500


def stored_scope(doc: Any) -> tuple[Any, Any, Any]:
    """(canonical text, levels, depth) of a stored scope sub-document, as
    found (``None`` for what is missing)."""
    if not isinstance(doc, dict):
        return doc, None, None
    depth = doc.get("n")
    levels = None
    if isinstance(depth, int) and not isinstance(depth, bool) and 0 <= depth <= MAX_DEPTH:
        levels = [(doc.get(f"k{i}"), doc.get(f"v{i}")) for i in range(depth)]
    return doc.get("c"), levels, depth


class AdminMixin(MongoStoreBase):
    def ping(self, ctx: Context) -> None:
        require_context(ctx)
        with self._driver_guard():  # ADMIN-PING-2: closed, or a driver error
            self.database.command("ping")

    def get_schema_version(self, ctx: Context) -> int:
        require_context(ctx)
        with self._driver_guard():
            found = self._read_version()
            if found is None:  # an empty database: this store makes the current layout
                self._schema_found = found = self._open_schema()
            return int(found)  # ADMIN-MIG-1

    def migrate(self, ctx: Context) -> int:
        require_context(ctx)
        with self._driver_guard():
            found = self._read_version()
            if found is not None and found > SCHEMA_VERSION:
                raise schema_mismatch(found, SCHEMA_VERSION)  # ADMIN-MIG-4: nothing changes
            if found != SCHEMA_VERSION:
                self.ensure_indexes()  # 0 -> 1: what the versioned layout has and version 0 may lack
                self._write_version()
            self._schema_found = SCHEMA_VERSION
            return SCHEMA_VERSION

    # -- the inspection ------------------------------------------------------------------

    def _scoped_collections(self) -> Iterator[tuple[str, Any]]:
        from cortex_spec.classes import CLASSES

        prefix = self.collection_prefix
        for name in ("a2a_messages", "a2a_conversations", "a2a_deliveries", "a2a_asks"):
            yield name, self.database[prefix + name]
        from .kinds import part_of

        for cls in CLASSES.values():
            for table in cls.tables:
                if part_of(table) is None:  # a slot's part: the slots are scanned apart
                    yield table.name, self.database[prefix + table.name]

    def inspect_scopes(self, ctx: Context, visit: Callable[[ScopeIssue], object]) -> int:
        check_visitor(ctx, visit)

        def scan(inspection: Inspection) -> None:
            for doc in self._pages(self._runs, {"run.scope": 1, "susp.id": 1, "susp.scope": 1}):
                if "run" in doc:
                    inspection.offer("runs", doc["_id"], *stored_scope(doc["run"].get("scope")))
                susp = doc.get("susp")
                if isinstance(susp, dict) and "id" in susp:
                    inspection.offer("suspensions", susp["id"], *stored_scope(susp.get("scope")))
            for kind, collection in self._scoped_collections():
                for doc in self._pages(collection, {"scope": 1}):
                    inspection.offer(kind, doc["_id"], *stored_scope(doc.get("scope")))

        return Inspection(visit).run(scan)

    def _pages(self, collection: Any, projection: dict[str, int]) -> Iterator[dict[str, Any]]:
        """Every document, ``_id`` ascending, one query per page (the
        operator's ``visit`` runs between queries)."""
        after = None
        while True:
            query: dict[str, Any] = {} if after is None else {"_id": {"$gt": after}}
            with self._driver_guard():
                docs = list(collection.find(query, projection=projection, sort=[("_id", 1)], limit=_PAGE))
            yield from docs
            if len(docs) < _PAGE:
                return
            after = docs[-1]["_id"]
