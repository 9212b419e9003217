"""Class ``catalog`` on MongoDB (spec: catalog.md): the generic operations
of its stored kinds and the overlay reads
(:class:`cortex_spec.catalog.CatalogMethods`) on the Mongo storage of
:mod:`.kinds` — one collection per kind; a name is unique per exact scope
through a unique sparse index on a digest of (scope, name), and an overlay
per (agent, exact scope) likewise.  Every write is one single-document
operation: the class needs no transactions."""

from __future__ import annotations

from cortex_spec.catalog import CatalogMethods

from .store import MongoStoreBase

__all__ = ["CatalogMixin"]


class CatalogMixin(CatalogMethods, MongoStoreBase):
    pass
