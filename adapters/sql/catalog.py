"""Class ``catalog`` on SQL (spec: catalog.md): the generic operations of
its stored kinds and the overlay reads
(:class:`cortex_spec.catalog.CatalogMethods`) on the SQL storage of
:mod:`.kinds` — one table per kind, names unique per exact scope by a
unique index on (scope digest, name), one overlay per (agent, exact scope)
likewise."""

from __future__ import annotations

from cortex_spec.catalog import CatalogMethods

from .store import SqlStoreBase

__all__ = ["CatalogMixin"]


class CatalogMixin(CatalogMethods, SqlStoreBase):
    pass
