"""Reference semantics of class ``progress`` (spec: progress.md): the
methods of :class:`cortex_spec.progress.ProgressMethods` on the reference
storage — each one hold of the store's lock per step."""

from __future__ import annotations

from cortex_spec.progress import ProgressMethods

from .store import StoreBase

__all__ = ["ProgressMixin"]


class ProgressMixin(ProgressMethods, StoreBase):
    pass
