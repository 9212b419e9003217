"""Conformance class ``preparation``: the reads a run's preparation makes,
in one snapshot (spec: preparation.md).

Before a run starts, an engine reads what it is built from — the agent, its
persona, skills and traits, the overlay of its scope, the session it
continues.  Read one by one, those rows can come from different moments: a
persona updated just after the agent was read, next to the agent as it was
before.  ``capture_preparation(ctx, collect)`` calls ``collect`` once with
:class:`PreparationSources`, read methods of classes ``catalog`` and
``memory`` that all read one snapshot of the store, and returns what
``collect`` returns (PREP-1..6).

Written once for every backend on the storage primitive
:meth:`~.kinds.Storage.snapshot`: one hold of the lock (reference), a read
transaction at REPEATABLE READ (PostgreSQL) or a deferred read transaction
(SQLite, WAL), a snapshot session (MongoDB).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from .catalog import TABLES as CATALOG_TABLES
from .catalog import CatalogMethods
from .context import Context, require_scope
from .errors import CortexError, InvalidArgument, InvalidState
from .kinds import Crud, check_protocol
from .memory import SESSIONS, MemoryMethods

__all__ = ["SOURCE_METHODS", "PreparationMethods", "PreparationSources", "PreparationStore"]

T = TypeVar("T")


def _reads(tables: Any) -> list[str]:
    out = []
    for table in tables:
        for name, op in table.methods().items():
            if op in ("get", "get_by_name") or op.startswith(("list:", "count:")):
                out.append(name)
    return out


#: What the sources read (PREP-4): every read of classes ``catalog`` and
#: ``memory``, called without ``ctx`` (the capture's is used).
SOURCE_METHODS: tuple[str, ...] = tuple(
    _reads(CATALOG_TABLES) + ["get_overlay_for_agent", "get_overlay_for_agent_at"]
    + _reads((SESSIONS,)) + ["load_conversation", "load_working", "load_summaries"]
)


class _Reader(CatalogMethods, MemoryMethods):
    """The classes' read methods on one snapshot's storage."""

    def __init__(self, crud: Crud) -> None:
        self._crud = crud


class PreparationSources:
    """The reads of one capture (PREP-4): each method of
    :data:`SOURCE_METHODS`, with the arguments of the store method of that
    name after ``ctx``, reading the capture's snapshot with its ``ctx``.
    Usable only while ``collect`` runs (PREP-5)."""

    def __init__(self, ctx: Context, reader: _Reader) -> None:
        self._ctx = ctx
        self._reader = reader
        self._open = True

    def _read(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not self._open:
            raise InvalidState("the sources of a preparation are read only while its collect runs")
        try:
            return getattr(self._reader, name)(self._ctx, *args, **kwargs)
        except CortexError:
            raise  # the store method's own answer (PREP-3): collect may catch it
        except Exception as exc:  # noqa: BLE001 - the storage's failure, not collect's
            raise _Failed(exc) from None

    def __repr__(self) -> str:
        return f"PreparationSources({self._ctx.scope.canonical()!r}, open={self._open})"


def _source(name: str) -> Callable[..., Any]:
    def read(self: PreparationSources, *args: Any, **kwargs: Any) -> Any:
        return self._read(name, args, kwargs)

    read.__name__ = read.__qualname__ = name
    read.__doc__ = f"``store.{name}(ctx, ...)`` in the capture's snapshot."
    return read


for _name in SOURCE_METHODS:
    setattr(PreparationSources, _name, _source(_name))


class _Failed(BaseException):
    """A storage error of a read (a lost connection, a driver error), carried
    past ``collect`` (which catches ``Exception`` at most) to the backend's
    own error handling, which maps it and may retry the snapshot (PREP-1)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


class _Carried(BaseException):
    """An exception ``collect`` raised, carried unchanged through a backend's
    error handling (which wraps what it does not know) and its retries."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


class PreparationMethods:
    """The class's store method on ``self._crud``; a backend's preparation
    mixin inherits this."""

    _crud: Any

    def capture_preparation(self, ctx: Context, collect: Callable[[PreparationSources], T]) -> T:
        """PREP-1..6: ``collect(sources)`` on one snapshot; its result."""
        require_scope(ctx)
        if not callable(collect):
            raise InvalidArgument(f"collect must be callable, got {type(collect).__name__}")
        now = self._crud.now

        def body(storage: Any) -> Any:
            sources = PreparationSources(ctx, _Reader(Crud(storage, now)))
            try:
                return collect(sources)
            except _Failed as failed:
                raise failed.error from None  # to the backend: mapped, perhaps retried
            except BaseException as exc:  # noqa: BLE001 - collect's own error, re-raised below
                raise _Carried(exc) from None
            finally:
                sources._open = False

        try:
            return self._crud.storage.snapshot(body)  # type: ignore[no-any-return]
        except _Carried as carried:
            error = carried.error
            raise error from error.__cause__


@runtime_checkable
class PreparationStore(Protocol):
    """What a store of class ``preparation`` provides (preparation.md)."""

    def capture_preparation(self, ctx: Context, collect: Callable[[PreparationSources], T]) -> T: ...


check_protocol(PreparationStore, (), PreparationMethods)
