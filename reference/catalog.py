"""Reference semantics of class ``catalog`` (spec: catalog.md): the generic
operations of its stored kinds and the overlay reads
(:class:`cortex_spec.catalog.CatalogMethods`) on the reference storage."""

from __future__ import annotations

from cortex_spec.catalog import CatalogMethods

from .store import StoreBase

__all__ = ["CatalogMixin"]


class CatalogMixin(CatalogMethods, StoreBase):
    pass
