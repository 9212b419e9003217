"""Reference semantics of class ``memory`` (spec: memory.md): the methods of
:class:`cortex_spec.memory.MemoryMethods` on the reference storage, each
multi-row step one hold of the store's lock (and all of it undone when the
step raises)."""

from __future__ import annotations

from cortex_spec.memory import MemoryMethods

from .store import StoreBase

__all__ = ["MemoryMixin"]


class MemoryMixin(MemoryMethods, StoreBase):
    pass
