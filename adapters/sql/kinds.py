"""The SQL interpreter of stored kinds (:mod:`cortex_spec.kinds`).

Each stored kind has one table (:func:`.schema.kind_table`): a column per
field typed by its kind, the scope's level columns and its digest.  This
module is the codec between entities and rows, and the five primitives of
:class:`cortex_spec.kinds.Storage`, each one database step:

* ``insert`` — one INSERT; the primary key and the unique indexes refuse a
  taken key (``AlreadyExists``, SCOPE-ID-1, CAT-GEN-2);
* ``select`` / ``count`` — one SELECT: visibility as whole-value equality
  per scope level (never ``LIKE``), the filters, the search as a literal
  substring of the ASCII-folded field (``instr``/``strpos`` of
  :meth:`.dialect.Dialect.ascii_lower`), the listing's total order;
* ``update`` — one transaction: ``UPDATE … WHERE id AND visible [AND the
  call's conditions] RETURNING``,
  then the size check of the row as stored (an oversized row rolls back); a
  unique index refuses a rename into a taken name;
* ``delete`` — one DELETE on the visible row.

Statements are built once per shape (table, scope depth, filters, order,
paging) and cached; only their parameters change per call.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from functools import lru_cache
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa

from cortex_spec import kinds as k
from cortex_spec.clock import from_millis, to_millis
from cortex_spec.errors import StoreError
from cortex_spec.kinds import Query, Table, ascii_fold, check_size
from cortex_spec.scope import Scope

from .schema import KIND_TABLES
from .store import db_int, decode, dump_json, load_json, read_scope, scope_params, scope_values, visible

__all__ = ["SqlStorage", "encode", "decode_value", "cells", "row_of", "entity_of"]

T = TypeVar("T")


# -- the codec ----------------------------------------------------------------------------


def _json_of(kind: k.FieldKind, value: Any) -> Any:
    """A field value inside JSON text (nested records, tuples)."""
    if value is None:
        return None
    if isinstance(kind, k.Optional):
        return _json_of(kind.inner, value)
    if isinstance(kind, k.Instant):
        return to_millis(value)
    if isinstance(kind, k.Choice):
        return value.value
    if isinstance(kind, k.Strings):
        return [_json_of(kind.item, v) for v in value]
    if isinstance(kind, k.Records):
        return [_record_json(r) for r in value]
    if isinstance(kind, k.Record):
        return _record_json(value)
    return value


def _record_json(record: Any) -> dict[str, Any]:
    return {name: _json_of(spec.kind, getattr(record, name)) for name, spec in k.specs(type(record)).items()}


@lru_cache(maxsize=None)
def _json_decoder(kind: k.FieldKind) -> Callable[[Any], Any]:
    """A value inside JSON text back as the field's value (``None`` stays),
    for one kind: its cases decided once, since a row is decoded field by
    field for every row of every listing."""
    convert: Callable[[Any], Any]
    if isinstance(kind, k.Optional):
        return _json_decoder(kind.inner)
    if isinstance(kind, k.Instant):
        convert = from_millis
    elif isinstance(kind, k.Choice):
        convert = kind.enum
    elif isinstance(kind, k.Strings):
        item = _json_decoder(kind.item)
        convert = lambda v: tuple(item(x) for x in v)  # noqa: E731
    elif isinstance(kind, k.Records):
        record = _record_decoder(kind.record)
        convert = lambda v: tuple(record(x) for x in v)  # noqa: E731
    elif isinstance(kind, k.Record):
        convert = _record_decoder(kind.record)
    elif isinstance(kind, (k.Json, k.FloatMap)):
        convert = _json_object
    else:
        return _same
    return lambda v: None if v is None else convert(v)


def _same(value: Any) -> Any:
    return value


def _json_object(value: Any) -> Any:
    if not isinstance(value, dict):
        raise ValueError("a stored JSON object is not an object")
    return value


def _record_decoder(record: type) -> Callable[[dict[str, Any]], Any]:
    fields = tuple((name, _json_decoder(spec.kind)) for name, spec in k.specs(record).items())
    return lambda doc: record(**{name: convert(doc[name]) for name, convert in fields})


_JSON_TEXT = (k.Json, k.JsonValue, k.FloatMap, k.Strings, k.Records, k.Record)


def encode(kind: k.FieldKind, value: Any) -> Any:
    """A field value as its column holds it (a JSON value ``None`` is the
    JSON text ``null``: the column is never NULL for it)."""
    if isinstance(kind, k.JsonValue):
        return dump_json(value)
    if value is None:
        return None
    inner = kind.inner if isinstance(kind, k.Optional) else kind
    if isinstance(inner, _JSON_TEXT):
        return dump_json(_json_of(inner, value))
    if isinstance(inner, k.Instant):
        return to_millis(value)
    if isinstance(inner, k.Choice):
        return value.value
    return value


def decode_value(kind: k.FieldKind, raw: Any) -> Any:
    """A column value back as the field's value (types kept)."""
    return _column_decoder(kind)(raw)


@lru_cache(maxsize=None)
def _column_decoder(kind: k.FieldKind) -> Callable[[Any], Any]:
    """:func:`decode_value` of one kind, its cases decided once: a JSON
    value's column is JSON text, never NULL; a NULL column is ``None``."""
    if isinstance(kind, k.JsonValue):
        return load_json
    inner = kind.inner if isinstance(kind, k.Optional) else kind
    convert: Callable[[Any], Any]
    if isinstance(inner, _JSON_TEXT):
        nested = _json_decoder(inner)
        convert = lambda raw: nested(load_json(raw))  # noqa: E731
    elif isinstance(inner, k.Instant):
        convert = from_millis
    elif isinstance(inner, k.Choice):
        convert = inner.enum
    elif isinstance(inner, (k.Count, k.Int)):
        convert = int
    elif isinstance(inner, k.Float):
        convert = float
    elif isinstance(inner, k.Bool):
        convert = bool
    else:
        return _same
    return lambda raw: None if raw is None else convert(raw)


def scope_key(scope: Scope) -> str:
    """The digest unique keys "within one exact scope" index."""
    return hashlib.sha256(scope.canonical().encode("utf-8")).hexdigest()


@lru_cache(maxsize=None)
def _has_scope_key(tname: str) -> bool:
    """Whether the table holds the scope digest (a layout that predates the
    description, :data:`.schema.LAID_OUT`, has none)."""
    return "scope_key" in KIND_TABLES[tname].c


@lru_cache(maxsize=None)
def _spread(tname: str, name: str, kind: k.FieldKind) -> tuple[tuple[str, str, k.FieldKind], ...]:
    """``(column key, sub-field, kind)`` of a nested record a laid-out table
    spreads over one column per field, keyed ``<field>_<sub-field>`` (the
    checkpoint's decision); ``()`` for a field in a column of its own."""
    inner = kind.inner if isinstance(kind, k.Optional) else kind
    if name in KIND_TABLES[tname].c or not isinstance(inner, k.Record):
        return ()
    return tuple((f"{name}_{sub}", sub, spec.kind) for sub, spec in k.specs(inner.record).items())


def cells(table: Table, name: str, value: Any) -> dict[str, Any]:
    """The columns (by key) that hold field ``name`` at ``value``: its own
    column, or those of a spread record (all NULL for ``None``)."""
    kind = table.fields[name].kind
    spread = _spread(table.name, name, kind)
    if not spread:
        return {name: encode(kind, value)}
    return {col: None if value is None else encode(sub_kind, getattr(value, sub)) for col, sub, sub_kind in spread}


def _field_decoder(table: Table, name: str, kind: k.FieldKind) -> Callable[[Any], Any]:
    """The value of field ``name`` from a row: its own column (by key), or
    the columns of a spread record (``None`` when all of them are NULL)."""
    spread = _spread(table.name, name, kind)
    if not spread:
        column = _column_decoder(kind)
        return lambda row: column(getattr(row, name))
    inner = kind.inner if isinstance(kind, k.Optional) else kind
    assert isinstance(inner, k.Record)
    record = inner.record
    parts = tuple((col, sub, _column_decoder(sub_kind)) for col, sub, sub_kind in spread)

    def read(row: Any) -> Any:
        raw = [getattr(row, col) for col, _, _ in parts]
        if all(v is None for v in raw):
            return None
        return record(**{sub: convert(v) for (_, sub, convert), v in zip(parts, raw)})

    return read


def row_of(table: Table, entity: Any) -> dict[str, Any]:
    """The row of a (validated) entity, by column key (the field's name)."""
    row: dict[str, Any] = {}
    for name, spec in table.fields.items():
        value = getattr(entity, name)
        if spec.role == k.SCOPE:
            row.update(scope_values(value))
            if _has_scope_key(table.name):
                row["scope_key"] = scope_key(value)
        else:
            row.update(cells(table, name, value))
    return row


def entity_of(table: Table, row: Any) -> Any:
    """The entity a row holds; a row that does not fit is ``StoreError``."""
    build = _row_decoder(table)
    return decode(table.singular, lambda: build(row))


#: id(table) -> (table, its row decoder); the table is kept, so its id is
#: never another's
_ROW_DECODERS: dict[int, tuple[Table, Callable[[Any], Any]]] = {}


def _row_decoder(table: Table) -> Callable[[Any], Any]:
    """The entity of a row of ``table``: one reader per field, built once."""
    known = _ROW_DECODERS.get(id(table))
    if known is not None and known[0] is table:
        return known[1]
    fields = tuple(
        (name, read_scope if spec.role == k.SCOPE else _field_decoder(table, name, spec.kind))
        for name, spec in table.fields.items()
    )
    entity = table.entity

    def build(row: Any) -> Any:
        return entity(**{name: read(row) for name, read in fields})

    _ROW_DECODERS[id(table)] = (table, build)
    return build


# -- statements ---------------------------------------------------------------------------


def _column(t: sa.Table, name: str, dialect: Any) -> Any:
    if name == k.SCOPE_DEPTH:
        return t.c.scope_depth
    if name == k.SCOPE_TEXT:
        return dialect.binary(t.c.scope)  # the canonical scope, by code point
    return t.c[name]


def _conditions(t: sa.Table, depth: int | None, exact: bool, where: tuple[str, ...],
                search: str | None, dialect: Any, after: str | None = None) -> list[Any]:
    conds: list[Any] = []
    if depth is not None:
        conds.append(visible(t, depth, exact))
    conds += [t.c[name] == sa.bindparam(f"w_{name}") for name in where]
    if after is not None:  # keyset paging: the column's binary collation orders by code point
        conds.append(t.c[after] > sa.bindparam("w_after"))
    if search is not None:
        conds.append(dialect.contains(dialect.ascii_lower(t.c[search]), sa.bindparam("w_search")))
    return conds


@lru_cache(maxsize=None)
def _select(tname: str, depth: int | None, exact: bool, where: tuple[str, ...], search: str | None,
            order: k.Order, offset: bool, limit: bool, count: bool, dialect: Any, lock: bool,
            after: str | None = None) -> Any:
    t = KIND_TABLES[tname]
    conds = _conditions(t, depth, exact, where, search, dialect, after)
    if count:
        return sa.select(sa.func.count()).select_from(t).where(*conds)
    stmt = sa.select(t).where(*conds).order_by(
        *(_column(t, name, dialect).desc() if desc else _column(t, name, dialect) for name, desc in order))
    if offset:
        stmt = stmt.offset(sa.bindparam("w_offset", type_=sa.BigInteger))
    if limit:
        stmt = stmt.limit(sa.bindparam("w_limit", type_=sa.BigInteger))
    return dialect.row_lock(stmt) if lock else stmt


@lru_cache(maxsize=None)
def _delete_where(tname: str, depth: int | None, exact: bool, where: tuple[str, ...], dialect: Any,
                  after: str | None = None) -> Any:
    t = KIND_TABLES[tname]
    return sa.delete(t).where(*_conditions(t, depth, exact, where, None, dialect, after))


@lru_cache(maxsize=None)
def _update(tname: str, depth: int, columns: tuple[str, ...], expect: tuple[str, ...] = (),
            advance: tuple[str, ...] = ()) -> Any:
    t = KIND_TABLES[tname]
    values: dict[str, Any] = {name: sa.bindparam(f"v_{name}") for name in columns}
    values["updated_at"] = sa.bindparam("v_updated_at")
    values.update({name: t.c[name] + 1 for name in advance})  # in the same statement
    return (sa.update(t).where(t.c.id == sa.bindparam("w_id"), visible(t, depth),
                               *(t.c[name] == sa.bindparam(f"x_{name}") for name in expect))
            .values(values).returning(t))


@lru_cache(maxsize=None)
def _delete(tname: str, depth: int) -> Any:
    t = KIND_TABLES[tname]
    return sa.delete(t).where(t.c.id == sa.bindparam("w_id"), visible(t, depth))


@lru_cache(maxsize=None)
def _insert(tname: str) -> Any:
    return sa.insert(KIND_TABLES[tname])


# -- the primitives -------------------------------------------------------------------------


class SqlStorage:
    """:class:`cortex_spec.kinds.Storage` on a :class:`.store.SqlStoreBase`;
    with ``conn``, the storage of one open transaction (:meth:`atomic`),
    whose reads lock the rows they read (``FOR UPDATE`` on PostgreSQL;
    SQLite's write transactions hold the write lock from ``BEGIN
    IMMEDIATE``)."""

    def __init__(self, store: Any, conn: sa.Connection | None = None, lock: bool = True) -> None:
        self.store = store
        self.conn = conn
        #: whether reads in ``conn``'s transaction lock what they read (not in a snapshot)
        self.lock = lock

    def _read(self, fn: Callable[[Any], T]) -> T:
        return fn(self.conn) if self.conn is not None else self.store._read(fn)

    def _write1(self, fn: Callable[[Any], T]) -> T:
        return fn(self.conn) if self.conn is not None else self.store._write1(fn)

    def _tx(self, fn: Any) -> Any:
        return fn(self.conn) if self.conn is not None else self.store._tx(fn)

    def atomic(self, body: Any) -> Any:
        if self.conn is not None:
            return body(self)
        return self.store._tx(lambda conn: body(SqlStorage(self.store, conn)))

    def snapshot(self, body: Any) -> Any:
        """``body``'s reads in one read transaction that sees one snapshot
        and locks nothing (:meth:`.store.SqlStoreBase._snapshot`)."""
        if self.conn is not None:
            return body(self)
        return self.store._snapshot(lambda conn: body(SqlStorage(self.store, conn, lock=False)))

    def delete_where(self, table: Table, query: Query) -> int:
        depth = None if query.scope is None else query.scope.depth
        params: dict[str, Any] = {} if query.scope is None else scope_params(query.scope)
        for name, value in query.where:
            params[f"w_{name}"] = encode(table.fields[name].kind, value)
        if query.after is not None:
            params["w_after"] = encode(table.fields[query.after[0]].kind, query.after[1])
        stmt = _delete_where(table.name, depth, query.exact, tuple(n for n, _ in query.where), self.store._dialect,
                             None if query.after is None else query.after[0])
        return int(self._write1(lambda conn: conn.execute(stmt, params).rowcount))

    def _query(self, table: Table, query: Query, count: bool) -> tuple[Any, dict[str, Any]]:
        depth = None if query.scope is None else query.scope.depth
        params: dict[str, Any] = {} if query.scope is None else scope_params(query.scope)
        for name, value in query.where:
            params[f"w_{name}"] = encode(table.fields[name].kind, value)
        search = None
        if query.search is not None:
            search, text = query.search
            params["w_search"] = ascii_fold(text)
        if query.after is not None:
            name, value = query.after
            params["w_after"] = encode(table.fields[name].kind, value)
        paged = not count
        if paged and query.offset > 0:
            params["w_offset"] = db_int(query.offset)
        if paged and query.limit > 0:
            params["w_limit"] = db_int(query.limit)
        stmt = _select(table.name, depth, query.exact, tuple(n for n, _ in query.where), search,
                       query.order, paged and query.offset > 0, paged and query.limit > 0, count,
                       self.store._dialect, self.conn is not None and self.lock and not count,
                       None if query.after is None else query.after[0])
        return stmt, params

    def insert(self, table: Table, entity: Any) -> None:
        row = row_of(table, entity)
        self._write1(lambda conn: conn.execute(_insert(table.name), row))

    def select(self, table: Table, query: Query) -> list[Any]:
        stmt, params = self._query(table, query, count=False)
        return self._read(lambda conn: [entity_of(table, r) for r in conn.execute(stmt, params)])

    def count(self, table: Table, query: Query) -> int:
        stmt, params = self._query(table, query, count=True)
        return self._read(lambda conn: int(conn.execute(stmt, params).scalar_one()))

    def update(self, table: Table, key: str, scope: Scope, fields: dict[str, Any],
               now: datetime, expect: tuple[tuple[str, Any], ...] = (),
               advance: tuple[str, ...] = ()) -> Any | None:
        written = {col: v for name in sorted(fields) for col, v in cells(table, name, fields[name]).items()}
        params = {f"v_{col}": v for col, v in written.items()}
        params.update({f"x_{n}": encode(table.fields[n].kind, v) for n, v in expect})
        params.update({"v_updated_at": to_millis(now), "w_id": key, **scope_params(scope)})
        stmt = _update(table.name, scope.depth, tuple(written), tuple(n for n, _ in expect), advance)

        def write(conn: sa.Connection) -> Any | None:
            row = conn.execute(stmt, params).one_or_none()
            if row is None:
                return None
            stored = entity_of(table, row)
            # RSC-GEN-8 of the row as stored: too big raises InvalidArgument
            # and the transaction rolls the update back
            check_size(stored, table)
            return stored

        return self._tx(write)

    def delete(self, table: Table, key: str, scope: Scope) -> bool:
        params = {"w_id": key, **scope_params(scope)}
        stmt = _delete(table.name, scope.depth)
        deleted = self._write1(lambda conn: conn.execute(stmt, params).rowcount)
        if deleted not in (0, 1):
            raise StoreError(f"a delete of {table.singular} {key} removed {deleted} rows")
        return bool(deleted)
