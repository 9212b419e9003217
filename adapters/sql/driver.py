"""Running the store's Core statements as driver SQL.

The mixins write every statement once with SQLAlchemy Core, and the store
runs it on the pooled DBAPI connection (``sqlite3`` / ``psycopg``) as the
exact SQL text SQLAlchemy compiles it to, rendered **once** per statement
and engine (:class:`Prepared`).  What a call then costs in Python is what a
hand-written driver call costs: merging the call's parameters with the
statement's constants, one ``cursor.execute`` on SQLite (one prepared
libpq execution on PostgreSQL, see :class:`Libpq`), the rows as named
tuples.

Why — measured with ``benchmarks/claim_throughput.py``, cProfile and a
sampler of the 8 racing threads (issue 14; a 2-core machine shared with
other work, so single figures vary by ±50 %):

* through ``Connection.execute`` one cached statement cost 65–85 µs of
  Python against 7–8 µs for the same SQL on the ``sqlite3`` cursor, and
  checking out a ``Connection`` and running ``begin``/``commit`` with the
  store's ``begin`` hook another 160 µs: a resume claim spent ~540 µs in
  SQLAlchemy for ~40 µs of database work.  SQLAlchemy's statement cache
  (``compiled_cache``) already avoided recompilation; the cost was the
  execution machinery around each statement (execution context, parameter
  processing, result metadata, event dispatch), which this module leaves
  out;
* after that, the pool's checkout and checkin (~11 µs a call), positional
  parameter lists (a SQLite claim binds ~70 values; SQLite statements are
  now compiled with named placeholders and take the call's dict), a new
  psycopg cursor per call (~5 µs; the cursor itself has since given way to
  :class:`Libpq`) and psycopg's ``cursor.description`` (rebuilt on every
  access) were the largest Python costs;
* under 8 threads the Python is not only slower but *in the way*: while a
  winning SQLite claim holds the write lock between its first step and the
  fetch that finishes it, its thread must take the GIL back, and every
  other claimant sleeps in SQLite's busy handler (1, 2, 5, 10 … ms).  The
  less Python the other threads run, the shorter that window (measured on
  delivery claims: 330 µs on average, 1.1 ms at p90, through the store
  against 150 µs and 0.56 ms through the driver).  That is why the store's
  p99 stays above the driver's although its claims are the same statements.
  Measured again in the claims7 pass, with each attempt split at
  ``DriverConnection.execute``: the slowest 1 % of racing delivery claims
  spend 4.3–6.8 ms inside the ``sqlite3`` call and 0.03–0.04 ms outside it.
  An in-process writer queue (one ``threading.Lock`` per database file
  around one writing statement or one ``BEGIN IMMEDIATE``..``COMMIT``,
  in place of polling in the busy handler) measured worse: 8,300–8,600
  against 12,900–15,000 attempts/s, p50 0.6 against 0.02 ms, p99 6.3–8.3
  against 1.3–1.5 ms.  It was not kept (``benchmarks/README.md``, claims7).
  Since 2026-12-06 a claim on SQLite reads before it writes
  (:attr:`.dialect.Dialect.probe_first`), so a plainly lost claim takes no
  write lock at all.  What is left of the store's tail is mostly the busy
  handler's sleeps of the claims that do write (wins, and UPDATEs that lose
  the race while they wait): 87–95 % of the slowest 1 %'s time is inside
  UPDATEs, and the reads that wait to take the GIL back as a ``sqlite3``
  call returns decide where its last attempts fall (``benchmarks/README.md``,
  "what the SQLite tail is made of").  Both grow steeply with the Python
  every attempt runs: ``claim_throughput.py --spin US`` shows it on the
  driver path itself;
* and those sleeps chain (sixth pass, counted with perf tracepoints): a
  writer that finds the lock taken sleeps 1, 2, 5 … 100 ms, retrying each
  time against a lock the running threads keep taking; one race had a
  thread asleep for 430 ms in one statement.  A gate letting two store
  calls run at once took the store's p99 to the driver path's, but only
  because the threads holding the turns kept them: it starved a writer in
  the SQLite certification (PREP-2).  A gate that hands a turn to a call
  that has waited cost throughput and the gateway's p99.  Neither was
  kept (``benchmarks/README.md``, issue 14, sixth pass).

Result, same machine, 1,000 rows, 8 threads, medians of three interleaved
repeats (``benchmarks/claim_throughput.py``; the driver runs the store's
statements): SQLite resume claims 5,150/s (0.60 of the driver), delivery
claims 4,900/s (0.63), gateway accepts 4,640/s (0.66); PostgreSQL 1,190/s
(0.82), 1,780/s (0.72), 1,690/s (0.82).  Before this module the resume
claim ran 1,580–1,800/s on SQLite and 500–820/s on PostgreSQL under the same
conditions (0.15–0.20 and 0.41–0.53 of the former driver transaction).
Measured again on de8e0c6 (1,000 rows, 5 repeats, three runs, loads 2–8;
``benchmarks/README.md``, claims7 pass): SqlStore/driver medians SQLite 1.00,
0.82, 0.99 and PostgreSQL 0.89, 0.91, 0.94; the SQLite p99 is within 3× of
the driver's in every run for gateway accepts, not in every run for the
claims (up to 5.8× and 7.6×).

What is kept from SQLAlchemy: the statements (Core, compiled by the
engine's dialect, with its bind casts and schema translation), the bind and
result processors of the column types (e.g. SQLite's booleans), the pool
(its checkout hooks, and :class:`IdleConnections` in front of it), and its
exception classes: a driver error is wrapped with
:meth:`sqlalchemy.exc.DBAPIError.instance` exactly as ``Connection`` wraps
it, so the store maps it the same way.

Statements this path refuses, with a clear error when first prepared:
expanding ``IN`` lists and other post-compile parameters, and client-side
column defaults (the schema has none); a missing parameter is the
driver's error when run.  A statement must be built once and reused (the mixins cache them):
the prepared form is cached by the statement object itself.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import keyword
import logging
import re
from collections import namedtuple
from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cortex_spec.errors import StoreError

__all__ = ["Bound", "DriverConnection", "IdleConnections", "Libpq", "Prepared", "Result", "Statements", "idle_of",
           "install_idle", "named_dialect"]

#: An engine's prepared statements stop growing past this many (a statement
#: built per call is a bug, not something to cache forever).
_MAX_PREPARED = 4096
#: where an engine keeps its :class:`Statements`
_STATEMENTS = "_cortex_statements"


def named_dialect(dialect: Any) -> Any:
    """``dialect`` compiling named parameters: SQLite's ``?`` becomes ``:name``
    (``sqlite3`` takes a dict), so a call's parameters are its dict, merged
    with the statement's constants, instead of a list built name by name (a
    claim repeats its parameters dozens of times).  PostgreSQL's
    ``%(name)s`` already is."""
    if not dialect.positional:
        return dialect
    if dialect.name != "sqlite":
        raise StoreError(f"the driver path supports SQLite and PostgreSQL, not {dialect.name!r}")
    named = copy.copy(dialect)  # shares the type caches; only the placeholders differ
    named.paramstyle, named.positional = "named", False
    return named


def _result_processor(type_: Any, dialect: Any) -> Callable[[Any], Any] | None:
    """The column's result processor, computed once per statement.  A float
    column without ``asdecimal`` needs none (every driver returns a Python
    float), and PostgreSQL's numeric processors would need the driver's type
    code, which a statement prepared ahead of its first execution lacks."""
    if isinstance(type_, sa.Float) and not type_.asdecimal:
        return None
    return type_.dialect_impl(dialect).result_processor(dialect, None)  # type: ignore[no-any-return]


class Prepared:
    """One Core statement rendered for one engine: SQL text, how to build its
    parameters from the call's dict, and how to build its rows."""

    __slots__ = (
        "checked",
        "column_names",
        "defaults",
        "make_row",
        "merge_only",
        "passthrough",
        "pg_names",
        "pg_query",
        "processors",
        "reads_only",
        "result_processors",
        "returns_rows",
        "row_type",
        "sql",
        "writes",
    )

    def __init__(self, stmt: Any, engine: Engine, keys: tuple[str, ...] | None,
                 dialect: Any = None) -> None:
        dialect = dialect if dialect is not None else named_dialect(engine.dialect)
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
        if getattr(compiled, "escaped_bind_names", None) or compiled.positional:
            raise StoreError(f"statement not supported on the driver path (escaped or positional "
                             f"parameters): {compiled.string}")
        self.sql: str = compiled.string
        #: a plain SELECT (no data-modifying WITH): it never changes a row
        self.reads_only = isinstance(stmt, sa.Select) and self.sql.lstrip()[:4].upper() != "WITH"
        self.writes = not self.reads_only
        binds = {name: bind for bind, name in compiled.bind_names.items()}
        #: the statement's own values (constants, literals); a call's
        #: parameter of the same name wins, as with SQLAlchemy
        self.defaults: dict[str, Any] = {
            n: b.effective_value for n, b in binds.items() if not b.required}
        processors = ((n, b.type.dialect_impl(dialect).bind_processor(dialect)) for n, b in binds.items())
        self.processors: tuple[tuple[str, Callable[[Any], Any]], ...] = tuple(
            (n, p) for n, p in processors if p is not None)
        columns = list(getattr(stmt, "exported_columns", ()) or ())
        self.returns_rows = bool(columns)
        self.column_names = tuple(_field_name(c, i) for i, c in enumerate(columns))
        result = [_result_processor(c.type, dialect) for c in columns]
        self.result_processors = tuple(result) if any(p is not None for p in result) else None
        self.row_type: Any = _row_type(self.column_names) if columns else None
        #: one row from the driver's tuple (``tuple.__new__``: ``_make`` is a
        #: Python function, and the column count is checked once, see
        #: :func:`_check_columns`)
        self.make_row: Callable[[Any], Any] = (
            _no_rows if self.row_type is None else functools.partial(tuple.__new__, self.row_type))
        #: the driver's result columns were compared with the statement's once
        self.checked = False
        #: a call's parameters are the driver's as they are (nothing to merge
        #: or convert)
        self.passthrough = not self.defaults and not self.processors
        #: a call's parameters only need the statement's constants under them
        self.merge_only = bool(self.defaults) and not self.processors
        #: PostgreSQL: the statement as libpq prepares it (``$1``, ``$2``, …)
        #: and the parameter names in their order (see :class:`Libpq`)
        self.pg_query: bytes | None = None
        self.pg_names: tuple[str, ...] = ()
        if dialect.name == "postgresql":
            self.pg_query, self.pg_names = dollar_parameters(self.sql)

    def parameters(self, params: dict[str, Any] | None) -> dict[str, Any]:
        """The driver's parameters: the call's, over the statement's own."""
        if params is None:
            params = {}
        # a missing required parameter is the driver's clear error ("You did
        # not supply a value for binding parameter :w_id" / "query parameter
        # missing: w_id"), wrapped as StoreError: not checked here as well
        merged = {**self.defaults, **params} if self.defaults or self.processors else params
        for name, process in self.processors:
            value = merged.get(name)
            if value is not None:
                merged[name] = process(value)
        return merged

    def bind(self, params: dict[str, Any] | None) -> Bound:
        """:meth:`parameters`, made ahead of the call that runs the statement
        (e.g. before a transaction begins: less Python while it holds the
        write lock); :meth:`DriverConnection.execute` takes them as they are."""
        return Bound(self.parameters(params))

    def rows(self, fetched: list[tuple[Any, ...]]) -> list[Any]:
        make = self.make_row
        if self.result_processors is None:
            return list(map(make, fetched))
        procs = self.result_processors
        return [make(v if p is None else p(v) for p, v in zip(procs, r)) for r in fetched]


@functools.lru_cache(maxsize=1024)
def _row_type(names: tuple[str, ...]) -> Any:
    """The row class of statements returning columns ``names``, one per list
    of names: the statements of one table return the same columns, and a
    namedtuple class costs about a fifth of a statement's preparing."""
    return namedtuple("Row", names, rename=True)


def _no_rows(_row: Any) -> Any:
    raise StoreError("a statement without result columns returned a row")


class Bound(dict[str, Any]):
    """A statement's parameters as the driver takes them (:meth:`Prepared.bind`)."""


def _field_name(column: Any, i: int) -> str:
    name = getattr(column, "key", None) or getattr(column, "name", None)
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) \
            or name.startswith("_"):
        return f"c{i}"
    return name


class Statements:
    """An engine's prepared statements, by statement object (and, for an
    INSERT or UPDATE whose columns come from the call's parameters, by the
    parameter names, which decide the columns written — as SQLAlchemy's
    ``column_keys``).

    One set per engine (:meth:`of`), shared by every store opened on it: a
    prepared statement is SQL text and parameter handling, which depend on
    the engine's dialect and schema translation only, not on a store or a
    connection.  A store reopened on the same engine (a restart, a test
    harness that keeps its engines) prepares nothing again; preparing is
    SQLAlchemy's compilation, several milliseconds a statement.

    Engines made by :func:`.dialect.create_engine` also share them with
    each other (:data:`_SHARED`), by dialect class, server version and
    schema translation: a test harness makes an engine per database file
    and a gateway one per location, and compiling every statement again
    for each was 2-3 % of a SQLite certification's processor time (py-spy,
    issue 13)."""

    @classmethod
    def of(cls, engine: Engine) -> Statements:
        """The statements of ``engine`` (made on first use)."""
        found: Statements | None = engine.__dict__.get(_STATEMENTS)
        if found is None:
            # two stores racing here each make one; the last one stays, and
            # the other's few statements are prepared again: harmless
            found = engine.__dict__[_STATEMENTS] = cls(engine)
        return found

    def __init__(self, engine: Engine) -> None:
        from .dialect import MADE_HERE

        self.engine = engine
        self.dialect = named_dialect(engine.dialect)
        self._plain: dict[Any, Prepared] = {}  # by statement
        self._keyed: dict[tuple[Any, tuple[str, ...]], Prepared] = {}  # by statement and names
        #: what the SQL and parameter handling depend on, for sharing them
        #: with the other engines made here (None: an engine made elsewhere)
        self._share: tuple[Any, ...] | None = None
        if engine in MADE_HERE:
            translate = engine.get_execution_options().get("schema_translate_map") or {}
            self._share = (type(engine.dialect), self.dialect.paramstyle, tuple(sorted(translate.items())))

    def get(self, stmt: Any, params: dict[str, Any] | None) -> Prepared:
        prepared = self._plain.get(stmt)
        if prepared is not None:
            return prepared
        if not _columns_from_parameters(stmt) or not params:
            prepared = self._plain[stmt] = self._prepare(stmt, None)
            return prepared
        keys = tuple(sorted(params))
        prepared = self._keyed.get((stmt, keys))
        if prepared is None:
            prepared = self._keyed[(stmt, keys)] = self._prepare(stmt, keys)
        return prepared

    def _prepare(self, stmt: Any, keys: tuple[str, ...] | None) -> Prepared:
        if len(self._plain) + len(self._keyed) >= _MAX_PREPARED:
            self._plain.clear()
            self._keyed.clear()
        if self._share is None:
            return Prepared(stmt, self.engine, keys, self.dialect)
        # the server version is known by now (a statement is prepared on its
        # first execution, on a connected engine)
        shared = (*self._share, self.engine.dialect.server_version_info, stmt, keys)
        prepared = _SHARED.get(shared)
        if prepared is None:
            if len(_SHARED) >= 4 * _MAX_PREPARED:
                _SHARED.clear()
            prepared = _SHARED[shared] = Prepared(stmt, self.engine, keys, self.dialect)
        return prepared


#: The prepared statements of the engines made by :func:`.dialect.create_engine`,
#: by what they depend on (see :class:`Statements`); a race prepares one twice.
_SHARED: dict[tuple[Any, ...], Prepared] = {}


def _columns_from_parameters(stmt: Any) -> bool:
    """An INSERT or UPDATE without ``.values()`` (nor ``from_select``) takes
    its columns from the parameters it is executed with."""
    return (isinstance(stmt, sa.sql.dml.ValuesBase) and not stmt._values
            and getattr(stmt, "select", None) is None)


class IdleConnections:
    """Pooled connections kept checked out between calls, last in first out,
    each as the :class:`DriverConnection` that ran its last call (its cursor
    and state reused: nothing is built per call).

    Checking a connection out of SQLAlchemy's ``QueuePool`` and back in
    (``_ConnectionFairy``, the queue's condition variable, the weak
    reference, the reset) cost about 11 µs a call, a quarter of a refused
    claim's Python; taking it from this list is a ``list.pop``.  It lives on
    the pool object (so every store on an engine shares it, and a disposed
    pool's connections are never reused), holds at most ``limit``
    connections (the pool's ``pool_size``: the overflow stays available to
    the engine's other users), and is only installed on engines the store
    configured itself (:func:`.dialect.create_engine`), whose only checkout
    event is the one ``usable`` repeats: PostgreSQL's local socket poll that
    refuses a connection the server closed (None: every valid connection is
    usable, SQLite's case).  A lost connection empties it (as it invalidates
    the pool).
    """

    def __init__(self, limit: int, usable: Callable[[Any], bool] | None) -> None:
        self.limit = limit
        self.usable = usable
        #: the idle connections, the most recently used last (the store's
        #: call loop pops and appends here itself: see :meth:`get`, :meth:`put`)
        self.conns: list[DriverConnection] = []

    def get(self) -> DriverConnection | None:
        """An idle checked-out connection that is still usable (its pool
        connection still valid and usable), or None; one that is not is
        discarded."""
        while True:
            try:
                conn = self.conns.pop()
            except IndexError:
                return None
            # (``dbapi_connection is not None`` is the fairy's ``is_valid``)
            if conn.fairy.dbapi_connection is not None and (self.usable is None or self.usable(conn.dbapi)):
                return conn
            conn.close()
            _discard(conn.fairy)

    def put(self, conn: DriverConnection) -> bool:
        """Keep ``conn`` for the next call; False: full, close it instead."""
        if len(self.conns) >= self.limit or conn.fairy.dbapi_connection is None:
            return False
        self.conns.append(conn)
        return True

    def drain(self, discard: bool = False) -> None:
        """Give every idle connection back to the pool (``discard``: close them)."""
        while True:
            try:
                conn = self.conns.pop()
            except IndexError:
                return
            if discard:
                conn.close()
                _discard(conn.fairy)
            else:
                conn.fairy.close()


def _discard(fairy: Any) -> None:
    try:
        fairy.invalidate()
    finally:
        fairy.close()


_IDLE = "_cortex_idle_connections"


def install_idle(engine: Engine, usable: Callable[[Any], bool] | None) -> None:
    """Give ``engine``'s pool (now, and after every ``dispose``) an
    :class:`IdleConnections`; a disposed pool's idle connections are closed."""
    def attach() -> None:
        size = engine.pool.size() if isinstance(engine.pool, sa.pool.QueuePool) else 0
        if size > 0:
            setattr(engine.pool, _IDLE, IdleConnections(size, usable))

    attach()
    old: list[Any] = [engine.pool]

    @sa.event.listens_for(engine, "engine_disposed")
    def _on_dispose(_engine: Any) -> None:
        cache = getattr(old[0], _IDLE, None)
        if cache is not None:
            cache.drain(discard=True)
        old[0] = engine.pool
        attach()


def idle_of(engine: Engine) -> IdleConnections | None:
    """The idle connections of ``engine``'s pool (None: not installed)."""
    return getattr(engine.pool, _IDLE, None)


#: :meth:`Result.one_or_none`'s and :meth:`DriverConnection.attempt`'s complaint.
_SEVERAL = "a statement expected to find at most one row found several"

#: The rows of a statement that returns none (never changed: Result copies in ``all``).
_NO_ROWS: list[Any] = []


class Result:
    """The outcome of one statement: its rows (fetched at once, so the
    statement is finished and, outside a transaction, committed) and its
    row count.  The accessors are the few of SQLAlchemy's ``Result`` the
    mixins use.

    ``make``, when given, builds a row from the driver's tuple as it is
    read: a statement's rows are built by what reads them, not all first in
    a list of their own (most statements are read for one row, or none:
    the list and its ``map`` cost about 0.3 µs of a refused claim's 11)."""

    __slots__ = ("_make", "_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int,
                 make: Callable[[Any], Any] | None = None) -> None:
        self._rows = rows
        self.rowcount = rowcount
        self._make = make

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows) if self._make is None else map(self._make, self._rows)

    def all(self) -> list[Any]:
        return list(self._rows) if self._make is None else list(map(self._make, self._rows))

    def one_or_none(self) -> Any:
        rows = self._rows
        if len(rows) > 1:
            raise StoreError(_SEVERAL)
        if not rows:
            return None
        return rows[0] if self._make is None else self._make(rows[0])

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


#: The result of a statement that found no row (shared: a Result never changes).
_EMPTY = Result(_NO_ROWS, 0)


def _check_columns(prepared: Prepared, columns: int) -> None:
    """Once a statement: its result has the statement's ``columns``."""
    if columns != len(prepared.column_names):
        raise StoreError(f"unexpected result columns from: {prepared.sql}")
    prepared.checked = True


_PYFORMAT = re.compile(r"%(?:%|\(([^)]+)\)s|)")


def dollar_parameters(sql: str) -> tuple[bytes, tuple[str, ...]]:
    """A statement compiled for psycopg (``%(name)s`` placeholders, ``%%``
    for ``%``) as libpq prepares it: ``$n`` placeholders, a name used twice
    being one parameter, and the names in their order."""
    names: dict[str, int] = {}

    def placeholder(match: re.Match[str]) -> str:
        text, name = match.group(0), match.group(1)
        if text == "%%":
            return "%"
        if name is None:
            raise StoreError(f"statement not supported on the driver path (a placeholder other than "
                             f"%(name)s): {sql}")
        return f"${names.setdefault(name, len(names) + 1)}"

    query = _PYFORMAT.sub(placeholder, sql)
    return query.encode(), tuple(names)


#: A connection's prepared statements stop growing past this many (they are
#: all deallocated and prepared again as they are used).
_MAX_SERVER_PREPARED = 4096


class Libpq:
    """A psycopg 3 connection's statements, run on its libpq connection
    directly: every statement prepared on the server on its first use (by
    its SQL and parameter types) and executed by ``PQexecPrepared``, its
    parameters dumped and its rows loaded by psycopg's own adapters (the
    connection's ``Transformer``: the same Python values both ways as
    through a cursor), its errors raised as psycopg raises them.

    Why: psycopg's ``Cursor.execute`` drives libpq through a generator and
    its own wait loop, and decides per call whether to prepare; measured
    on one connection (``SELECT`` of one row by key, 3,000 calls, process
    CPU): 53–67 µs a call through a cursor against 25–30 µs through
    ``exec_prepared``, the server's CPU the same (25 µs); in a PostgreSQL
    certification the time inside the store's statements fell from 56 to
    33 s of processor time (issue 13).  The blocking libpq call releases
    the GIL while it waits for the server, as psycopg's wait does; unlike
    it, a statement waiting for a row lock is not interrupted by a signal
    (Ctrl-C) until it returns.

    Transactions are begun, committed and rolled back here too (plain
    ``BEGIN …``/``COMMIT``/``ROLLBACK``), so psycopg's own transaction
    handling is never used on the store's calls: a statement run while the
    connection is idle is its own transaction (autocommit), whatever the
    psycopg connection's ``autocommit`` says.  psycopg itself prepares
    nothing on these connections (``prepare_threshold = None``): it answers
    its own ``rollback()`` by deallocating every statement it prepared
    (``DEALLOCATE ALL``), which would take this path's statements with them.

    A connection class may define ``cortex_around(run, sql)``: then every
    statement (``sql`` its text) and COMMIT (``sql`` None) of this path
    runs by calling it (the PostgreSQL test harness kills connections
    there).
    """

    __slots__ = ("around", "dbapi", "encoding", "names", "pgconn", "tx")

    def __init__(self, dbapi: Any) -> None:
        from psycopg.adapt import Transformer

        if _AUTO is None:
            _import_libpq_constants()
        self.dbapi = dbapi
        self.pgconn = dbapi.pgconn
        self.tx = Transformer(dbapi)
        self.encoding: str = dbapi.info.encoding
        #: the statements prepared on this connection: (query, types) -> name
        self.names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self.around: Callable[[Callable[[], Any], str | None], Any] | None = getattr(dbapi, "cortex_around", None)
        dbapi.prepare_threshold = None

    @classmethod
    def of(cls, dbapi: Any) -> Libpq:
        """The path of ``dbapi`` (made on first use, kept on the connection)."""
        found: Libpq | None = getattr(dbapi, "_cortex_libpq", None)
        if found is None:
            found = cls(dbapi)
            dbapi._cortex_libpq = found
        return found

    def run(self, prepared: Prepared, args: dict[str, Any]) -> Any:
        """Run ``prepared`` with the call's parameters; its result (a
        ``PGresult`` whose status is OK)."""
        query = prepared.pg_query
        if query is None:
            raise StoreError(f"statement not prepared for PostgreSQL: {prepared.sql}")
        tx = self.tx
        order = prepared.pg_names
        key: tuple[bytes, tuple[int, ...]]
        if order:
            values: Any = tx.dump_sequence([args[name] for name in order], [_AUTO] * len(order))
            key, formats = (query, tx.types or ()), tx.formats
        else:
            values, key, formats = None, (query, ()), None
        name = self.names.get(key)
        if self.around is not None:
            return self.around(lambda: self._execute(key, name, values, formats), prepared.sql)
        return self._execute(key, name, values, formats)

    def _execute(self, key: tuple[bytes, tuple[int, ...]], name: bytes | None, values: Any,
                 formats: Any) -> Any:
        pgconn = self.pgconn
        if name is None:
            names = self.names
            if len(names) >= _MAX_SERVER_PREPARED:
                self._check(pgconn.exec_(b"DEALLOCATE ALL"))  # (a statement can run inside a transaction)
                names.clear()
            name = b"_cortex_%d" % len(names)
            self._check(pgconn.prepare(name, key[0], key[1]))
            names[key] = name
        return self._check(pgconn.exec_prepared(name, values, formats))

    def fetch(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of ``sql``, a statement without parameters (prepared on
        its first use; not through ``cortex_around``)."""
        key = (sql.encode(), ())
        return self.rows(self._execute(key, self.names.get(key), None, None), tuple)

    def rows(self, result: Any, make_row: Callable[[Any], Any]) -> list[Any]:
        """The rows of ``result``, each built by ``make_row`` from its values."""
        tx = self.tx
        tx.set_pgresult(result)
        return tx.load_rows(0, result.ntuples, make_row)

    def command(self, sql: bytes) -> None:
        """Run a statement without parameters or rows (``BEGIN …``, ``ROLLBACK``)."""
        self._check(self.pgconn.exec_(sql))

    def commit(self) -> None:
        """Commit the transaction, if one is open."""
        if self.pgconn.transaction_status != _PG_IDLE:
            if self.around is not None:
                self.around(lambda: self.command(b"COMMIT"), None)
            else:
                self.command(b"COMMIT")

    def rollback(self) -> None:
        """Roll back the transaction, if one is open."""
        if self.pgconn.transaction_status != _PG_IDLE:
            self.command(b"ROLLBACK")

    def _check(self, result: Any) -> Any:
        status = result.status
        if status == _TUPLES_OK or status == _COMMAND_OK:
            return result
        from psycopg import errors, pq

        if not result.error_field(pq.DiagnosticField.SQLSTATE):
            # libpq's own failure (the server closed the connection, a send
            # failed): what psycopg raises for it, a connection error
            raise errors.OperationalError(pq.error_message(result, encoding=self.encoding)
                                          or pq.error_message(self.pgconn, encoding=self.encoding))
        raise errors.error_from_result(result, encoding=self.encoding)


#: psycopg's constants this path compares with (imported with the first
#: connection: a store on SQLite never imports psycopg)
_TUPLES_OK: Any = None
_COMMAND_OK: Any = None
_PG_IDLE: Any = None
_AUTO: Any = None


def _import_libpq_constants() -> None:
    global _TUPLES_OK, _COMMAND_OK, _PG_IDLE, _AUTO
    from psycopg import pq
    from psycopg.adapt import PyFormat

    _TUPLES_OK, _COMMAND_OK = pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK
    _PG_IDLE, _AUTO = pq.TransactionStatus.IDLE, PyFormat.AUTO


class DriverConnection:
    """What a store function gets for one call: ``execute(stmt, params)``
    (and a claim's attempt, :meth:`attempt`) on the call's pooled
    DBAPI connection, and the call loop's ``begin``, ``commit`` and
    ``rollback``.  Driver errors propagate raw;
    :meth:`.store.SqlStoreBase._run` wraps and maps them.

    SQLite's statements run on a ``sqlite3`` cursor; PostgreSQL's on
    :class:`Libpq`.  One per pooled DBAPI connection, kept with it (in the
    idle list, or in its pool record's ``info`` while it is back in the
    pool) and reused from call to call with its cursor (the store's call
    loop resets the per-call state: ``log``, ``last_sql``, ``changed``,
    ``writing``)."""

    __slots__ = (
        "_cursor",
        "_plain",
        "changed",
        "dbapi",
        "fairy",
        "last_params",
        "last_sql",
        "libpq",
        "log",
        "statements",
        "writing",
    )

    def __init__(self, dbapi: Any, statements: Statements, log: Any = None, fairy: Any = None) -> None:
        self.dbapi = dbapi
        #: the pool's checked-out connection this one runs on (set per checkout)
        self.fairy = fairy
        #: the prepared statements of the engine the call runs for (a pool,
        #: and so this connection, may serve engines of several schema
        #: translations: the store's call loop sets them, see :meth:`use`)
        self.statements = statements
        self._plain = statements._plain  # the common lookup, without a call
        #: PostgreSQL: the connection's libpq path; None: a sqlite3 connection
        self.libpq: Libpq | None = None
        if statements.dialect.name == "postgresql":
            if not hasattr(dbapi, "pgconn"):
                raise StoreError(f"the PostgreSQL store runs on psycopg 3, not {type(dbapi).__module__}")
            self.libpq = Libpq.of(dbapi)
        #: SQLite: the connection's cursor, reused from call to call
        self._cursor: Any = None
        #: the engine's logger while it logs statements (INFO), else None
        self.log = log
        #: the statement being run (for the wrapped error's message)
        self.last_sql: str | None = None
        self.last_params: Any = None
        #: whether a statement may have changed a row (a statement that
        #: failed after one did may have been committed with it, see
        #: SqlStoreBase._run)
        self.changed = False
        #: whether the statement running (or the last one, if it failed) writes
        self.writing = False

    def execute(self, stmt: Any, params: dict[str, Any] | None = None) -> Result:
        prepared = self._plain.get(stmt) or self.statements.get(stmt, params)
        if params is not None and prepared.passthrough:
            args = params
        elif params is not None and prepared.merge_only:
            args = {**prepared.defaults, **params}  # (a Bound: the same values again)
        elif type(params) is Bound:
            args = params  # converted once, by Prepared.bind
        else:
            args = prepared.parameters(params)
        self.last_sql = sql = prepared.sql
        self.last_params = args
        if self.log is not None:
            self.log.info("%s %r", sql, args)
        writing = self.writing = prepared.writes
        libpq = self.libpq
        if libpq is not None:
            result = libpq.run(prepared, args)
            if not prepared.returns_rows:
                rowcount = result.command_tuples
                if rowcount is None:
                    rowcount = -1
            else:
                rowcount = result.ntuples
                if not prepared.checked:
                    _check_columns(prepared, result.nfields)
            self.writing = False
            if writing and rowcount != 0:
                self.changed = True  # -1 (unknown) counts as a change
            if not prepared.returns_rows:
                return Result(_NO_ROWS, rowcount)
            if not rowcount:
                return _EMPTY
            if prepared.result_processors is None:
                return Result(libpq.rows(result, prepared.make_row), rowcount)
            return Result(prepared.rows(libpq.rows(result, tuple)), rowcount)
        cursor = self._cursor
        if cursor is None:
            cursor = self._cursor = self.dbapi.cursor()
        cursor.execute(sql, args)
        if not prepared.returns_rows:
            rowcount = cursor.rowcount
            if writing and rowcount != 0:
                self.changed = True  # -1 (unknown) counts as a change
            self.writing = False
            return Result(_NO_ROWS, rowcount)
        fetched = cursor.fetchall()
        self.writing = False
        if writing and fetched:
            self.changed = True
        if not prepared.checked:
            _check_columns(prepared, len(cursor.description or ()))
        if not fetched:
            return _EMPTY
        if prepared.result_processors is None:
            return Result(fetched, len(fetched), prepared.make_row)
        return Result(prepared.rows(fetched), len(fetched))

    def start(self, statements: Statements, logger: Any) -> None:
        """A new call on this connection: ``statements`` are the engine's it
        runs for (a pool, and so this connection, may serve engines of
        several schema translations: a PostgreSQL gateway's namespaces),
        ``logger`` the engine's, which logs each statement while it is
        enabled for INFO; nothing run, nothing changed yet."""
        if self.statements is not statements:
            self.use(statements)
        self.log = logger if logger.isEnabledFor(logging.INFO) else None
        self.last_sql = self.last_params = None
        self.changed = self.writing = False

    def attempt(self, write: Any, probe: Any, params: dict[str, Any], judge: Callable[[Any], Any],
                fresh: Callable[[], dict[str, Any]] | None, probe_first: bool) -> tuple[bool, Any, Any]:
        """One attempt of a claim (:meth:`.store.SqlStoreBase._contended`):
        ``(True, row, None)`` when ``write`` changed a row (``row``: what it
        returned), else ``(False, seen, verdict)`` with the probe's row and
        ``judge(seen)``.

        The probe runs first when ``probe_first`` (SQLite: a claim plainly
        lost takes no write lock), and the write only when the judge finds
        the claim possible (None); after a lost write the probe runs, and
        its verdict is the answer (None: possible after all, for the caller
        to try again).  ``fresh()`` adds the parameters only the write binds.

        Each statement finds or changes at most one row (several are
        ``StoreError``).  On SQLite a statement that returns rows and has
        run before (its columns checked), with nothing logged, runs on the
        cursor here, without :class:`Result` and :meth:`execute`'s general
        parameter handling; any other runs through :meth:`execute`.  One
        loop makes both statements' steps, so that short way is written
        once: a race's tail follows the Python a claim runs, and this is
        most of a refused claim's (``benchmarks/README.md``, issue 14)."""
        plain = self._plain
        cursor = self._cursor
        stmt = probe if probe_first else write
        lost = False
        while True:
            args = params if stmt is probe or fresh is None else {**params, **fresh()}
            prepared = plain.get(stmt)
            if prepared is None or cursor is None or self.log is not None or not prepared.checked:
                # (``checked`` is only ever set for a statement that returns rows)
                result = self.execute(stmt, args)
                rowcount, row = result.rowcount, result.one_or_none()
                cursor = self._cursor
            else:
                # Prepared.parameters, and execute's flags, written out: a
                # refused claim took 0.2-0.3 us longer through the calls
                # (benchmarks/README.md, issue 14, fifth pass)
                if prepared.passthrough:
                    pass
                elif prepared.merge_only:
                    args = {**prepared.defaults, **args}
                else:
                    args = prepared.parameters(args)
                self.last_sql = sql = prepared.sql
                self.last_params = args
                if prepared.writes:
                    self.writing = True
                    fetched = cursor.execute(sql, args).fetchall()
                    self.writing = False
                    if fetched:
                        self.changed = True
                else:  # (``writing`` is False between statements)
                    fetched = cursor.execute(sql, args).fetchall()
                rowcount = len(fetched)
                if not fetched:
                    row = None
                elif rowcount > 1:
                    raise StoreError(_SEVERAL)
                elif prepared.result_processors is None:
                    row = prepared.make_row(fetched[0])
                else:
                    row = prepared.rows(fetched)[0]
            if stmt is write:
                if rowcount > 0:  # a claim is of one row, by its key
                    return True, row, None
                stmt = probe  # a loss wrote nothing: the probe tells why
                lost = True
                continue
            verdict = judge(row)
            if lost or verdict is not None:
                return False, row, verdict
            stmt = write

    def begin(self, sql: str) -> None:
        """Begin a transaction with ``sql`` (the dialect's ``BEGIN …``)."""
        if self.libpq is not None:
            self.libpq.command(sql.encode())
        else:
            self.dbapi.execute(sql)

    def commit(self) -> None:
        """Commit the transaction :meth:`begin` began."""
        if self.libpq is not None:
            self.libpq.commit()
        else:
            self.dbapi.commit()

    def rollback(self) -> None:
        """Roll back the transaction :meth:`begin` began (nothing if none is open)."""
        if self.libpq is not None:
            self.libpq.rollback()
        else:
            self.dbapi.rollback()

    def use(self, statements: Statements) -> None:
        """Run the statements of another engine on this connection."""
        self.statements = statements
        self._plain = statements._plain

    def __repr__(self) -> str:
        return f"DriverConnection({self.dbapi!r})"

    def close(self) -> None:
        """Close the cursor (the connection will not be reused)."""
        cursor, self._cursor = self._cursor, None
        if cursor is not None:
            with contextlib.suppress(Exception):  # a broken connection's cursor: nothing to release
                cursor.close()
