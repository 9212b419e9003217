"""Class ``checkpoints`` on MongoDB (spec: checkpoints.md): the methods of
:class:`cortex_spec.checkpoints.CheckpointsMethods` on the Mongo storage of
:mod:`.kinds` — one document per checkpoint in the ``checkpoints``
collection, keyed by its id, the decision a sub-document.  ``resolve``'s
write is one ``find_one_and_update`` filtered on ``state: "pending"``: of
concurrent resolves exactly one matches (CP-RESOLVE-4), without a
multi-document transaction where the deployment has none."""

from __future__ import annotations

from cortex_spec.checkpoints import CheckpointsMethods

from .store import MongoStoreBase

__all__ = ["CheckpointsMixin"]


class CheckpointsMixin(CheckpointsMethods, MongoStoreBase):
    pass
