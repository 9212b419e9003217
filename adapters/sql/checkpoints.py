"""Class ``checkpoints`` on SQL (spec: checkpoints.md): the methods of
:class:`cortex_spec.checkpoints.CheckpointsMethods` on the SQL storage of
:mod:`.kinds`, on the table that predates the description
(``cortex_checkpoints``, :data:`.schema.LAID_OUT`: the decision spread over
its columns).  ``resolve``'s write is one ``UPDATE … WHERE id = :id AND
<visible> AND state = 'pending' RETURNING …``: of concurrent resolves
exactly one matches the row (CP-RESOLVE-4)."""

from __future__ import annotations

from cortex_spec.checkpoints import CheckpointsMethods

from .store import SqlStoreBase

__all__ = ["CheckpointsMixin"]


class CheckpointsMixin(CheckpointsMethods, SqlStoreBase):
    pass
