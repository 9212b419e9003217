"""Class ``memory`` on SQL (spec: memory.md): the methods of
:class:`cortex_spec.memory.MemoryMethods` on the SQL storage of
:mod:`.kinds`.  Each multi-row step is one transaction that first locks the
session it decides on (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite's
``BEGIN IMMEDIATE`` takes the write lock): concurrent saves, clears and
deletes of one session run one after the other, so the counters always
equal the stored messages (MEM-CONV-11)."""

from __future__ import annotations

from cortex_spec.memory import MemoryMethods

from .store import SqlStoreBase

__all__ = ["MemoryMixin"]


class MemoryMixin(MemoryMethods, SqlStoreBase):
    pass
