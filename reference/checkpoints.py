"""Reference semantics of class ``checkpoints`` (spec: checkpoints.md): the
methods of :class:`cortex_spec.checkpoints.CheckpointsMethods` on the
reference storage (the stored kind ``kind_checkpoints``), each primitive one
hold of the store's lock."""

from __future__ import annotations

from cortex_spec.checkpoints import CheckpointsMethods

from .store import StoreBase

__all__ = ["CheckpointsMixin"]


class CheckpointsMixin(CheckpointsMethods, StoreBase):
    pass
