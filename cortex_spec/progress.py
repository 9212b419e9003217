"""Conformance class ``progress``: a run's progress snapshot at one exact
scope (spec: progress.md).

A snapshot is what an engine needs to pick a run up where it stopped — the
index of the last step done and a JSON object of its own.  The seed names
only the reads (``GetProgress``, ``DeleteProgress``, both at the exact
context scope); the writer is designed here (design decision 1 of
progress.md): ``save_progress`` replaces the run's snapshot at exactly the
caller's scope, or makes it.  A run has at most one snapshot per exact
scope, and snapshots of one run id at two scopes are two snapshots, as
working memory is (MEM-WORK).

The snapshot is stored as an internal row of a stored kind
(:mod:`.kinds`), keyed by a digest of (run, exact scope), so every backend
stores it with the primitives it already has; the methods are written
once, here (:class:`ProgressMethods`).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from . import ids
from .context import Context, require_scope
from .entities import entity
from .errors import AlreadyExists, InvalidArgument, ProgressNotFound
from .kinds import (
    Count,
    Id,
    Json,
    Query,
    Short,
    Table,
    check_protocol,
    created,
    field,
    scope_field,
    updated,
)
from .scope import Scope
from .validation import check_entity_size

__all__ = [
    "PROGRESS",
    "TABLES",
    "Progress",
    "ProgressMethods",
    "ProgressStore",
    "StoredProgress",
    "progress_key",
    "stored_row",
]


@entity
class Progress:
    """A run's progress snapshot (PROG-ENT-1): ``scope`` is stamped from the
    caller's context, the instants from the store's clock."""

    run_id: str = field(Id(ids.RUN), default="")
    scope: Scope = scope_field()
    #: the index of the last step the run finished (a counter, RSC-GEN-9)
    step_index: int = field(Count(), default=0)
    #: the engine's own state, a JSON object (RSC-GEN-7)
    snapshot: dict[str, Any] = field(Json(), factory=dict)
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


@entity
class StoredProgress:
    """A snapshot as stored: the row of (run, exact scope), keyed by
    :func:`progress_key`.  Its size is what RSC-GEN-8 measures (PROG-SAVE-5)."""

    id: str = field(Short(), default="", role="key")
    scope: Scope = scope_field()
    run_id: str = field(Id(ids.RUN), default="")
    step_index: int = field(Count(), default=0, update=True)
    snapshot: dict[str, Any] = field(Json(), factory=dict, update=True)
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


PROGRESS = Table(StoredProgress, "progress", "progress", ProgressNotFound, "progress", "progress",
                 ops=(), internal=True)

#: Every stored kind of the class.
TABLES = (PROGRESS,)


def progress_key(run_id: str, scope: Scope) -> str:
    """The key of a run's snapshot at exactly ``scope``: a digest, so that a
    key is short whatever the scope's length (SCOPE-CANON-6)."""
    text = f"{run_id}\x00{scope.canonical()}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stored_row(progress: Progress) -> StoredProgress:
    """The row a (stored) snapshot is kept in."""
    return StoredProgress(id=progress_key(progress.run_id, progress.scope), scope=progress.scope,
                          run_id=progress.run_id, step_index=progress.step_index, snapshot=progress.snapshot,
                          created_at=progress.created_at, updated_at=progress.updated_at)


def _public(row: StoredProgress) -> Progress:
    return Progress(run_id=row.run_id, scope=row.scope, step_index=row.step_index, snapshot=row.snapshot,
                    created_at=row.created_at, updated_at=row.updated_at)


def _check_progress(obj: object) -> tuple[str, int, dict[str, Any]]:
    """PROG-SAVE-5: the fields a save takes; the object's scope and instants
    are ignored without being checked (PROG-SAVE-1)."""
    if not isinstance(obj, Progress):
        raise InvalidArgument(f"progress must be a Progress, got {type(obj).__name__}")
    return (Id(ids.RUN).check(obj.run_id, "progress.run_id"), Count().check(obj.step_index, "progress.step_index"),
            Json().check(obj.snapshot, "progress.snapshot"))


#: How often a save that lost a race for its row (a first save against a
#: delete) goes again.
_RETRIES = 100


class ProgressMethods:
    """The class's store methods on ``self._crud`` (a :class:`~.kinds.Crud`
    over the backend's storage).  A backend's progress mixin inherits this."""

    _crud: Any

    def save_progress(self, ctx: Context, progress: Progress) -> Progress:
        """PROG-SAVE-1..5: the run's snapshot at exactly ``ctx.scope``, made
        or replaced (its ``created_at`` kept) in one atomic step."""
        scope = require_scope(ctx)
        run, step, snapshot = _check_progress(progress)
        now = self._crud.now()
        row = StoredProgress(id=progress_key(run, scope), scope=scope, run_id=run, step_index=step,
                             snapshot=snapshot, created_at=now, updated_at=now)
        check_entity_size(row, "progress")
        storage = self._crud.storage
        for _ in range(_RETRIES):
            try:
                storage.insert(PROGRESS, row)
                return _public(row)
            except AlreadyExists:
                pass  # the run has a snapshot here: replace it (unless it is deleted meanwhile)
            # the row's other fields are its key, scope, run and creation time:
            # the storage measures the replaced row as stored (RSC-GEN-13)
            stored = storage.update(PROGRESS, row.id, scope, {"step_index": step, "snapshot": snapshot}, now)
            if stored is not None:
                return _public(stored)
        raise AlreadyExists(f"the progress of run {run} kept changing under the save")

    def get_progress(self, ctx: Context, run_id: str) -> Progress:
        """PROG-GET-1: the run's snapshot stored at exactly ``ctx.scope``."""
        scope = require_scope(ctx)
        run = Id(ids.RUN).check(run_id, "run_id")
        rows = self._crud.storage.select(PROGRESS, Query(scope, exact=True,
                                                         where=(("id", progress_key(run, scope)),)))
        if not rows:
            raise ProgressNotFound(f"no progress of run {run} at this scope")
        return _public(rows[0])

    def delete_progress(self, ctx: Context, run_id: str) -> None:
        """PROG-DEL-1/2: the run's snapshot at exactly ``ctx.scope`` removed;
        none there is not an error."""
        scope = require_scope(ctx)
        run = Id(ids.RUN).check(run_id, "run_id")
        self._crud.storage.delete(PROGRESS, progress_key(run, scope), scope)


@runtime_checkable
class ProgressStore(Protocol):
    """What a store of class ``progress`` provides (progress.md)."""

    def save_progress(self, ctx: Context, progress: Progress) -> Progress: ...
    def get_progress(self, ctx: Context, run_id: str) -> Progress: ...
    def delete_progress(self, ctx: Context, run_id: str) -> None: ...


check_protocol(ProgressStore, (), ProgressMethods)
