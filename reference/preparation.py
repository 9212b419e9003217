"""Reference semantics of class ``preparation`` (spec: preparation.md): a
capture reads under one hold of the store's lock, so every read of it sees
one state (:meth:`.kinds.MemoryStorage.snapshot`)."""

from __future__ import annotations

from cortex_spec.preparation import PreparationMethods

from .store import StoreBase

__all__ = ["PreparationMixin"]


class PreparationMixin(PreparationMethods, StoreBase):
    pass
