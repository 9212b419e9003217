"""Class ``preparation`` on SQL (spec: preparation.md): a capture's reads
run in one read transaction that sees one snapshot and locks nothing —
``REPEATABLE READ READ ONLY`` on PostgreSQL, a deferred ``BEGIN`` on SQLite
(WAL: the first read fixes the snapshot the others see)."""

from __future__ import annotations

from cortex_spec.preparation import PreparationMethods

from .store import SqlStoreBase

__all__ = ["PreparationMixin"]


class PreparationMixin(PreparationMethods, SqlStoreBase):
    pass
