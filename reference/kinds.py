"""The reference interpreter of stored kinds (:mod:`cortex_spec.kinds`).

A table is a dict of frozen entities by key on the :class:`MemoryMedium`
(one per table of every class, ``kind_<name>``).  Each primitive runs inside
the store's one lock, so it is one atomic step; the generic operations
(:class:`cortex_spec.kinds.Crud`) and their error precedence are the
contract's, written once for every backend.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, TypeVar

import attrs

from cortex_spec.entities import detach
from cortex_spec.errors import AlreadyExists
from cortex_spec.kinds import Query, Table, _sort_value, check_size, matches_search, sort_rows, unique_conflict, visible
from cortex_spec.scope import Scope
from cortex_spec.validation import page

__all__ = ["MemoryStorage", "medium_table_name"]

T = TypeVar("T")


#: Tables whose medium dict predates the description keep its name (the
#: runs: the suspensions, leases and a2a code reads ``medium.runs``).
LAID_OUT = frozenset({"runs"})


def medium_table_name(table: Table) -> str:
    return table.name if table.name in LAID_OUT else f"kind_{table.name}"


def _matches(query: Query, row: Any) -> bool:
    if not visible(query.scope, query.exact, row.scope):
        return False
    if any(getattr(row, name) != value for name, value in query.where):
        return False
    if query.after is not None and not _sort_value(getattr(row, query.after[0])) > query.after[1]:
        return False
    if query.search is not None:
        name, text = query.search
        return matches_search(getattr(row, name), text)
    return True


class MemoryStorage:
    """The five primitives of :class:`cortex_spec.kinds.Storage` on the
    store's medium, each under the store's lock (``store._tx()``)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def _rows(self, medium: Any, table: Table) -> dict[str, Any]:
        return getattr(medium, medium_table_name(table))  # type: ignore[no-any-return]

    def insert(self, table: Table, entity: Any) -> None:
        with self.store._tx() as t:
            rows = self._rows(t, table)
            if entity.id in rows:  # the key is unique across every scope (SCOPE-ID-1)
                raise AlreadyExists(f"{table.singular} {entity.id} already exists")
            unique = unique_conflict(table, rows.values(), entity)
            if unique is not None:
                raise AlreadyExists(f"a {table.singular} with this {', '.join(unique.fields)} exists")
            rows[entity.id] = detach(entity)

    def select(self, table: Table, query: Query) -> list[Any]:
        with self.store._tx() as t:
            rows = [r for r in self._rows(t, table).values() if _matches(query, r)]
        return [detach(r) for r in page(sort_rows(rows, query.order), query.limit, query.offset)]

    def count(self, table: Table, query: Query) -> int:
        with self.store._tx() as t:
            return sum(1 for r in self._rows(t, table).values() if _matches(query, r))

    def update(self, table: Table, key: str, scope: Scope, fields: dict[str, Any],
               now: datetime, expect: tuple[tuple[str, Any], ...] = (),
               advance: tuple[str, ...] = ()) -> Any | None:
        with self.store._tx() as t:
            rows = self._rows(t, table)
            row = rows.get(key)
            if row is None or not scope.covers(row.scope) or any(getattr(row, n) != v for n, v in expect):
                return None
            new = attrs.evolve(row, updated_at=now, **detach(fields),
                               **{n: getattr(row, n) + 1 for n in advance})
            check_size(new, table)
            unique = unique_conflict(table, rows.values(), new)
            if unique is not None:
                raise AlreadyExists(f"a {table.singular} with this {', '.join(unique.fields)} exists")
            rows[key] = new
            return detach(new)

    def delete(self, table: Table, key: str, scope: Scope) -> bool:
        with self.store._tx() as t:
            rows = self._rows(t, table)
            row = rows.get(key)
            if row is None or not scope.covers(row.scope):
                return False
            del rows[key]
            return True

    def delete_where(self, table: Table, query: Query) -> int:
        with self.store._tx() as t:
            rows = self._rows(t, table)
            doomed = [key for key, row in rows.items() if _matches(query, row)]
            for key in doomed:
                del rows[key]
            return len(doomed)

    def atomic(self, body: Callable[["MemoryStorage"], T]) -> T:
        """``body`` under one hold of the lock (the primitives take it again:
        it is reentrant); a raise puts every table back as it was."""
        with self.store._tx() as t:
            saved = {name: dict(rows) for name, rows in t.tables().items()}
            try:
                return body(self)
            except BaseException:
                for name, rows in saved.items():
                    setattr(t, name, rows)
                raise

    def snapshot(self, body: Callable[["MemoryStorage"], T]) -> T:
        """``body`` under one hold of the lock: every read of it sees one
        state (class preparation); it writes nothing."""
        with self.store._tx():
            return body(self)
