"""Class ``progress`` on MongoDB (spec: progress.md): the methods of
:class:`cortex_spec.progress.ProgressMethods` on the Mongo storage of
:mod:`.kinds` — one collection, ``<prefix>progress``, one document per (run,
exact scope) keyed by its digest; every step is one single-document
operation (the class needs no transactions)."""

from __future__ import annotations

from cortex_spec.progress import ProgressMethods

from .store import MongoStoreBase

__all__ = ["ProgressMixin"]


class ProgressMixin(ProgressMethods, MongoStoreBase):
    pass
