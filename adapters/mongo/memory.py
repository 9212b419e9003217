"""Class ``memory`` on MongoDB (spec: memory.md): the methods of
:class:`cortex_spec.memory.MemoryMethods` on the Mongo storage of
:mod:`.kinds`.  Each multi-row step is one multi-document transaction (a
server aborts one of two conflicting transactions and ``with_transaction``
retries it); a deployment without transactions does not declare the
class."""

from __future__ import annotations

from cortex_spec.memory import MemoryMethods

from .store import MongoStoreBase

__all__ = ["MemoryMixin"]


class MemoryMixin(MemoryMethods, MongoStoreBase):
    pass
