"""Running the store's Core statements as driver SQL.

The mixins write every statement once with SQLAlchemy Core, and the store
runs it on the pooled DBAPI connection (``sqlite3`` / ``psycopg``) as the
exact SQL text SQLAlchemy compiles it to, rendered **once** per statement
and engine (:class:`Prepared`).  What a call then costs in Python is what a
hand-written driver call costs: building the parameter list, one
``cursor.execute``, the rows as named tuples.

Why (measured with ``benchmarks/claim_throughput.py`` and cProfile, issue
14): through ``Connection.execute`` one cached statement cost 65–85 µs of
Python on the benchmark machine against 7–8 µs for the same SQL on the
``sqlite3`` cursor, and checking out a ``Connection`` and running
``begin``/``commit`` with the store's ``begin`` hook another 160 µs — a
resume claim spent about 540 µs in SQLAlchemy for 40 µs of database work.
Under 8 threads that Python runs while the claim holds SQLite's write lock
and competes for the GIL with the lock's holder, which is why the adapter
reached 0.11–0.67 of the driver's throughput.  SQLAlchemy's statement cache
(``compiled_cache``) already avoided recompilation; the cost was the
execution machinery around each statement (execution context, parameter
processing, result metadata, event dispatch), which this module leaves out.

What is kept from SQLAlchemy: the statements (Core, compiled by the
engine's dialect, with its parameter style, bind casts and schema
translation), the bind and result processors of the column types (e.g.
SQLite's booleans), the pool (checkout hooks included), and its exception
classes: a driver error is wrapped with :meth:`sqlalchemy.exc.DBAPIError.instance`
exactly as ``Connection`` wraps it, so the store maps it the same way.

Statements this path refuses, with a clear error when first prepared:
expanding ``IN`` lists and other post-compile parameters, and client-side
column defaults (the schema has none).  A statement must be built once and
reused (the mixins cache them): the prepared form is cached by the
statement object itself.
"""

from __future__ import annotations

import keyword
from collections import namedtuple
from typing import Any, Callable, Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cortex_spec.errors import StoreError

__all__ = ["Prepared", "Statements", "DriverConnection", "Result"]

#: A store's prepared statements stop growing past this many (a statement
#: built per call is a bug, not something to cache forever).
_MAX_PREPARED = 4096


class Prepared:
    """One Core statement rendered for one engine: SQL text, how to build its
    parameters from the call's dict, and how to build its rows."""

    __slots__ = ("sql", "names", "defaults", "processors", "positional", "returns_rows",
                 "column_names", "result_processors", "row_type", "reads_only")

    def __init__(self, stmt: Any, engine: Engine, keys: tuple[str, ...] | None) -> None:
        dialect = engine.dialect
        translate = engine.get_execution_options().get("schema_translate_map")
        kwargs: dict[str, Any] = {}
        if keys is not None:
            kwargs["column_keys"] = list(keys)
        if translate:
            kwargs.update(schema_translate_map=translate, render_schema_translate=True)
        compiled = stmt.compile(dialect=dialect, **kwargs)
        if getattr(compiled, "post_compile_params", None) or getattr(
                compiled, "literal_execute_params", None):
            raise StoreError(f"statement not supported on the driver path (expanding or literal-execute "
                             f"parameters): {compiled.string}")
        if getattr(compiled, "insert_prefetch", None) or getattr(compiled, "update_prefetch", None):
            raise StoreError(f"statement not supported on the driver path (client-side column "
                             f"defaults): {compiled.string}")
        if getattr(compiled, "escaped_bind_names", None):
            raise StoreError(f"statement not supported on the driver path (escaped parameter "
                             f"names): {compiled.string}")
        self.sql: str = compiled.string
        #: a plain SELECT (no data-modifying WITH): it never changes a row
        self.reads_only = isinstance(stmt, sa.Select) and self.sql.lstrip()[:4].upper() != "WITH"
        binds = {name: bind for bind, name in compiled.bind_names.items()}
        self.positional = bool(dialect.positional)
        if self.positional:
            names = list(compiled.positiontup or ())
        else:
            names = list(dict.fromkeys(compiled.bind_names.values()))
        self.names: tuple[str, ...] = tuple(names)
        self.defaults: tuple[Any, ...] = tuple(binds[n].effective_value for n in names)
        processors = [binds[n].type.dialect_impl(dialect).bind_processor(dialect) for n in names]
        self.processors: tuple[Callable[[Any], Any] | None, ...] | None = (
            tuple(processors) if any(p is not None for p in processors) else None)
        columns = list(getattr(stmt, "exported_columns", ()) or ())
        self.returns_rows = bool(columns)
        self.column_names = tuple(_field_name(c, i) for i, c in enumerate(columns))
        result = [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns]
        self.result_processors = tuple(result) if any(p is not None for p in result) else None
        self.row_type: Any = namedtuple("Row", self.column_names, rename=True) if columns else None

    def parameters(self, params: dict[str, Any] | None) -> Any:
        """The driver's parameters (a list for ``?``, a dict for ``%(name)s``)."""
        if params is None:
            params = {}
        values = [params.get(n, d) for n, d in zip(self.names, self.defaults)]
        if self.processors is not None:
            values = [v if p is None or v is None else p(v) for p, v in zip(self.processors, values)]
        if self.positional:
            return values
        return dict(zip(self.names, values))

    def rows(self, fetched: list[tuple]) -> list[Any]:
        make = self.row_type._make
        if self.result_processors is None:
            return [make(r) for r in fetched]
        procs = self.result_processors
        return [make(v if p is None else p(v) for p, v in zip(procs, r)) for r in fetched]


def _field_name(column: Any, i: int) -> str:
    name = getattr(column, "key", None) or getattr(column, "name", None)
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) \
            or name.startswith("_"):
        return f"c{i}"
    return name


class Statements:
    """A store's prepared statements, by statement object (and, for INSERT
    and UPDATE, the parameter names, which decide the columns written)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._cache: dict[Any, Prepared] = {}

    def get(self, stmt: Any, params: dict[str, Any] | None) -> Prepared:
        if isinstance(stmt, sa.sql.dml.ValuesBase) and params:
            key: Any = (stmt, tuple(sorted(params)))
            keys: tuple[str, ...] | None = key[1]
        else:
            key, keys = stmt, None
        prepared = self._cache.get(key)
        if prepared is None:
            prepared = Prepared(stmt, self.engine, keys)
            if len(self._cache) >= _MAX_PREPARED:
                self._cache.clear()
            self._cache[key] = prepared
        return prepared


class Result:
    """The outcome of one statement: its rows (fetched at once, so the
    statement is finished and, outside a transaction, committed) and its
    row count.  The accessors are the few of SQLAlchemy's ``Result`` the
    mixins use."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> list[Any]:
        return list(self._rows)

    def one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise StoreError("a statement expected to find at most one row found several")
        return self._rows[0] if self._rows else None

    def one(self) -> Any:
        row = self.one_or_none()
        if row is None:
            raise StoreError("a statement expected to find one row found none")
        return row

    def scalar_one_or_none(self) -> Any:
        row = self.one_or_none()
        return None if row is None else row[0]

    def scalar_one(self) -> Any:
        return self.one()[0]


class DriverConnection:
    """What a store function gets for one call: ``execute(stmt, params)``
    on the call's pooled DBAPI connection.  Driver errors propagate raw;
    :meth:`.store.SqlStoreBase._run` wraps and maps them."""

    __slots__ = ("dbapi", "_statements", "_cursor", "_log", "last_sql", "last_params", "changed")

    def __init__(self, dbapi: Any, statements: Statements, log: Any = None) -> None:
        self.dbapi = dbapi
        self._statements = statements
        self._cursor: Any = None
        self._log = log
        #: the statement being run (for the wrapped error's message)
        self.last_sql: str | None = None
        self.last_params: Any = None
        #: whether a statement may have changed a row (a refused transaction
        #: that changed none is ended with COMMIT, see SqlStoreBase._run)
        self.changed = False

    def execute(self, stmt: Any, params: dict[str, Any] | None = None) -> Result:
        prepared = self._statements.get(stmt, params)
        args = prepared.parameters(params)
        self.last_sql, self.last_params = prepared.sql, args
        if self._log is not None:
            self._log.info("%s %r", prepared.sql, args)
        cursor = self._cursor
        if cursor is None:
            cursor = self._cursor = self.dbapi.cursor()
        cursor.execute(prepared.sql, args)
        if cursor.description is None:
            result = Result([], cursor.rowcount)
            fetched = None
        else:
            fetched = cursor.fetchall()
            result = Result([], len(fetched))
        if not prepared.reads_only and result.rowcount != 0:
            self.changed = True  # -1 (unknown) counts as a change
        if fetched is not None:
            if prepared.row_type is None or len(cursor.description) != len(prepared.column_names):
                raise StoreError(f"unexpected result columns from: {prepared.sql}")
            result._rows = prepared.rows(fetched)
        return result

    def close(self) -> None:
        cursor, self._cursor = self._cursor, None
        if cursor is not None:
            try:
                cursor.close()
            except Exception:  # noqa: BLE001 - a broken connection's cursor: nothing to release
                pass
