"""Class ``progress`` on SQL (spec: progress.md): the methods of
:class:`cortex_spec.progress.ProgressMethods` on the SQL storage of
:mod:`.kinds` — one table, ``cortex_progress``, keyed by a digest of (run,
exact scope); a save is an INSERT, or an UPDATE … RETURNING of the row the
insert found taken."""

from __future__ import annotations

from cortex_spec.progress import ProgressMethods

from .store import SqlStoreBase

__all__ = ["ProgressMixin"]


class ProgressMixin(ProgressMethods, SqlStoreBase):
    pass
