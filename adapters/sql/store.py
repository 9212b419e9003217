"""The SQL store's core: engine, clock, transactions, error wrapping.

Every method of the class mixins validates its arguments with the
contract's validators first (so errors and their precedence match the
reference: ctx, then ``NoScope``, then ``InvalidArgument``), reads clock now
once, and then runs one function against the database in one of three ways:

* :meth:`SqlStoreBase._read` — one SELECT, atomic on its own (no
  BEGIN/COMMIT round trips);
* :meth:`SqlStoreBase._write1` — one writing statement (an INSERT, a
  DELETE, a conditional UPDATE), atomic on its own, possibly followed by
  reads that classify its outcome (each its own snapshot);
* :meth:`SqlStoreBase._tx` — several statements in one transaction that
  takes the write lock first where the dialect needs it (SQLite
  ``BEGIN IMMEDIATE``); committed on return, rolled back on any exception,
  so a call that raises writes nothing.

All three map driver errors the same way: a unique-key violation becomes
``AlreadyExists``; lock contention (SQLite "database is locked", PostgreSQL
serialization failures) is retried with backoff and, if it persists past
``lock_timeout``, raised as ``StoreError``; a lost connection is retried on
a fresh one when nothing can have been committed (a read, a write statement
that had not started and no earlier one that changed a row, a transaction
before ``COMMIT``), otherwise the call raises ``StoreError`` and the write
happened entirely or not at all; everything else is ``StoreError`` with the
driver error chained.  No raw driver exception ever leaves the store.

The statements run as driver SQL on the pooled DBAPI connection (see
:mod:`.driver` for why and what was measured): SQLite's busy handler (the
``busy_timeout``) does the waiting for its write lock; the Python back-off
below only retries what SQLite still reports locked after that.

A claim on SQLite makes its first attempt without the call loop, on an
idle connection (:meth:`SqlStoreBase._contended`), with the same rules
for a failure (:meth:`SqlStoreBase._failed`).

There is no Python lock around database work: atomicity comes from the
database (conditional statements and transactions).
"""

from __future__ import annotations

import json
import operator
import random
import time
import weakref
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import Enum
from functools import lru_cache
from typing import Any, Self, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from cortex_spec.admin import schema_mismatch
from cortex_spec.clock import Clock, SystemClock, from_millis, to_millis, truncate_ms
from cortex_spec.errors import (
    AlreadyExists,
    CortexError,
    InvalidArgument,
    StoreClosed,
    StoreError,
)
from cortex_spec.scope import Scope
from cortex_spec.validation import INT64_MAX

from . import dialect as dialects
from .dialect import WRITE_OPTION, ErrorKind
from .driver import DriverConnection, IdleConnections, Statements, idle_of
from .schema import SCHEMA_VERSION, SCOPE_LEVELS, metadata, schema_info

__all__ = ["SqlStoreBase"]

T = TypeVar("T")

#: Engines on which some store has already found (or made) the schema.
_SCHEMA_READY: weakref.WeakSet[Engine] = weakref.WeakSet()

class ControlFlow(Exception):
    """Base of a mixin's internal signals that :meth:`SqlStoreBase._run`
    lets through unwrapped (after rolling back)."""


def db_int(value: int) -> int:
    """A non-negative count or page size as the database can bind it.

    Python ints are unbounded; BIGINT is not.  A limit or offset beyond
    ``2**63 - 1`` means the same as ``2**63 - 1`` (no table holds more rows).
    """
    return min(value, INT64_MAX)


#: The kinds of database work (see SqlStoreBase._read/_write1/_tx/_snapshot).
READ, WRITE1, TX, SNAPSHOT = "read", "write1", "tx", "snapshot"

#: Key of a pooled connection's :class:`.driver.DriverConnection` (and so its
#: reused cursor) in its record's ``info``; it names the DBAPI connection it
#: belongs to, so a reconnected record never reuses a stale one.
_CONN = "cortex_driver_connection"

#: How often a transaction that lost its connection is retried.
_DISCONNECT_RETRIES = 2


class SqlStoreBase:
    """Engine, clock and transaction handling shared by the class mixins."""

    capabilities: frozenset[str] = frozenset()

    #: The schema version this adapter writes and reads.
    schema_version: int = SCHEMA_VERSION

    #: How many times a call of this store was retried after the database
    #: stayed locked past the busy timeout (a diagnostic; the benchmark
    #: reports it beside the driver path's own retries).
    lock_retries: int = 0

    def __init__(
        self,
        url_or_engine: str | URL | Engine,
        clock: Clock | None = None,
        *,
        create_schema: bool = True,
        busy_timeout: float = 5.0,
        lock_timeout: float = 30.0,
        synchronous: str = "FULL",
        pool_size: int = 16,
        echo: bool = False,
        owns_engine: bool | None = None,
    ) -> None:
        """Open a store on a database.

        ``url_or_engine`` is a SQLAlchemy URL (``sqlite:////path/to.db``,
        ``postgresql://user@host/db``) or an ``Engine``.  An engine passed in
        is shared, not owned, unless ``owns_engine=True``: :meth:`close`
        disposes (closes the pooled connections of) an owned engine only.  An
        engine not made by :func:`.dialect.create_engine` gets the store's
        hooks installed (SQLite pragmas and ``BEGIN IMMEDIATE``).

        ``busy_timeout`` (seconds, SQLite) is how long one attempt waits for
        the write lock; ``lock_timeout`` is how long the store keeps retrying
        a transaction refused for lock contention before it raises
        ``StoreError``.  ``synchronous`` is SQLite's ``PRAGMA synchronous``
        (``FULL``: an acknowledged write survives a power loss).
        ``create_schema=False`` refuses a database without the tables instead
        of creating them.
        """
        self.clock: Clock = clock if clock is not None else SystemClock()
        if isinstance(url_or_engine, Engine):
            self._engine = url_or_engine
            self._owns_engine = bool(owns_engine)
        else:
            self._engine = dialects.create_engine(
                url_or_engine,
                pool_size=pool_size,
                busy_timeout=busy_timeout,
                synchronous=synchronous,
                echo=echo,
            )
            self._owns_engine = True if owns_engine is None else owns_engine
        self._dialect = dialects.prepare_engine(self._engine)
        self._init_driver()
        self._create_schema = create_schema
        self._lock_timeout = lock_timeout
        self._schema_ready = False
        self._closed = False
        from cortex_spec.kinds import Crud

        from .kinds import SqlStorage

        #: the generic operations of the stored kinds (cortex_spec.kinds)
        self._crud = Crud(SqlStorage(self), self._now)

    @classmethod
    def from_url(cls, url: str | URL, clock: Clock | None = None, **options: Any) -> Self:
        """``SqlStore.from_url("sqlite:////tmp/cortex.db", clock)``."""
        return cls(url, clock, **options)

    def _init_driver(self) -> None:
        """The driver path's state: prepared statements, the driver's errors."""
        self._statements = Statements.of(self._engine)
        self._dbapi_error: type[Exception] = self._engine.dialect.loaded_dbapi.Error

    # -- lifecycle -----------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def dialect_name(self) -> str:
        return self._dialect.name

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Idempotent.  Releases the engine's connections if the store owns it."""
        if self._closed:
            return
        self._closed = True
        idle = idle_of(self._engine)
        if idle is not None:
            idle.drain()  # idle connections go back to the pool
        if self._owns_engine:
            self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        url = self._engine.url.render_as_string(hide_password=True)
        return f"{type(self).__name__}({url!r}, clock={self.clock!r})"

    # -- clock ---------------------------------------------------------------------

    def _now(self) -> datetime:
        """Clock now, truncated to ms (RSC-GEN-1: read once per call)."""
        return truncate_ms(self.clock.now())

    def _now_ms(self) -> int:
        """``to_millis(self._now())`` (RSC-GEN-1: read once per call), without
        building the truncated instant: the whole milliseconds since the
        epoch of the clock's aware instant are what truncating keeps."""
        now = self.clock.now()
        if now.tzinfo is None:
            now = truncate_ms(now)  # (a naive instant: what _now makes of it)
        return (now - _EPOCH) // _ONE_MS

    # -- schema --------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the tables if they are missing (idempotent, safe to race).

        Called on first use; refuses a database whose schema version is not
        :data:`SCHEMA_VERSION` with ``SchemaMismatch`` (an older one until
        ``migrate`` has run, see :mod:`.admin`).
        """
        if self._schema_ready:
            return
        self._check_open()
        if self._engine in _SCHEMA_READY:
            self._schema_ready = True
            return

        def read_version(conn: sa.Connection) -> int | None:
            if not sa.inspect(conn).has_table(schema_info.name):
                return None
            return conn.execute(sa.select(schema_info.c.version)).scalar_one_or_none()

        version = self._run_core(read_version, READ)
        if version is None:
            if not self._create_schema:
                raise StoreError("the database has no cortex-spec schema (create_schema=False)")

            def create(conn: sa.Connection) -> int:
                self._dialect.lock_schema(conn)
                if sa.inspect(conn).has_table(schema_info.name):
                    stored = conn.execute(sa.select(schema_info.c.version)).scalar_one_or_none()
                    if stored is not None and stored != SCHEMA_VERSION:
                        return int(stored)  # another layout: refused below, left as it is (ADMIN-MIG-3/4)
                metadata.create_all(conn, checkfirst=True)
                found = conn.execute(sa.select(schema_info.c.version)).scalar_one_or_none()
                if found is None:
                    conn.execute(sa.insert(schema_info).values(id=1, version=SCHEMA_VERSION))
                    found = SCHEMA_VERSION
                return found

            version = self._run_core(create, TX)
        if version != SCHEMA_VERSION:
            # ADMIN-MIG-3/4: refused until migrate() (an older version) or a
            # newer store (a newer one); the version is read again next call
            raise schema_mismatch(version, SCHEMA_VERSION)
        self._schema_ready = True
        _SCHEMA_READY.add(self._engine)

    # -- transactions ----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")

    def _read(self, fn: Callable[[sa.Connection], T]) -> T:
        """``fn`` runs one SELECT, atomic on its own (no BEGIN/COMMIT).

        A read whose connection was lost is retried on a fresh one.
        """
        return self._call(fn, READ)

    def _read_one(self, stmt: Any, params: dict[str, Any], decode_row: Callable[[Any], T],
                  missing: Callable[[], CortexError]) -> T:
        """The one row ``stmt`` selects, decoded; ``missing()`` is raised when
        there is none (the by-id reads: not found, never visible)."""

        def read(conn: sa.Connection) -> T:
            row = conn.execute(stmt, params).one_or_none()
            if row is None:
                raise missing()
            return decode_row(row)

        return self._read(read)

    def _write1(self, fn: Callable[[sa.Connection], T]) -> T:
        """``fn`` runs exactly one writing statement, atomic on its own, and
        possibly reads after it (each its own snapshot).

        A lost connection during or after the writing statement is *not*
        retried (unless the statement changed no row): it may have committed
        before the connection died, so the call raises ``StoreError`` and the
        write happened entirely or not at all.  Reads before the writing
        statement may be retried (:meth:`_contended`).
        """
        return self._call(fn, WRITE1)

    def _contended(self, write: Any, probe: Any, params: dict[str, Any], judge: Callable[[Any], Any],
                   what: str, key: str, attempts: int,
                   fresh: Callable[[], dict[str, Any]] | None = None) -> tuple[bool, Any, Any]:
        """A claim, each attempt a :meth:`_write1`: ``write`` is the
        conditional statement that decides it (many callers may race for
        it, all but one lose), ``probe`` the read that tells a loss apart,
        and ``judge(seen)`` the caller's verdict on the probe's row (None: no
        row): None while the claim can still be won, else the refusal to
        raise (or the caller's own answer, such as a repeat).

        Returns ``(True, row, None)``: ``write`` changed a row (``row``: what
        it returned, None if it returns nothing); or ``(False, seen,
        verdict)``: it did not, or did not run, ``seen`` is the probe's row
        and ``verdict`` the judge's, not None.  A verdict of None after a
        lost write (possible after all: the rows changed between the
        statements) is another attempt; after ``attempts`` of them the claim
        raises ``StoreError`` (``what.format(key)`` names it, e.g. "the claim
        on run {}": formatted only then).  The
        judge returns its refusal rather than raising it: the caller raises
        it, outside the database call, and drops its own reference as it
        does (``try: raise refusal`` / ``finally: del refusal``).  A frame
        that keeps the exception it raised in a local is a reference cycle
        (exception, traceback, frame) that only the cyclic collector frees,
        with everything the frame holds: six objects a refused claim; in a
        run of ``benchmarks/claim_throughput.py``, 36-47 young collections
        a race and two full ones in six races, of 35 and 99 ms with the GIL
        held (``tests/test_refusal_garbage.py``).  ``fresh()``: parameters only
        ``write`` binds, made each time it runs (a claim's new token: none is
        made for a claim plainly lost).

        Where the dialect says :attr:`.dialect.Dialect.probe_first` (SQLite),
        the probe runs first and the write only when the judge finds the
        claim possible; a claim plainly lost, most attempts of a race, then
        takes no write lock.  There, the first attempt is made the short way
        when an idle connection is at hand (below: one more than
        ``attempts``).  Each attempt is
        :meth:`.driver.DriverConnection.attempt`.  A refusal is decided on
        a read either way (after a losing write, or instead of one): the
        outcome the reference gives at that read's instant.  Measured with
        ``benchmarks/claim_throughput.py`` (``benchmarks/README.md``, issue 14).
        """
        probe_first = self._dialect.probe_first
        if probe_first:
            # The first attempt the short way: on an idle connection, without
            # the call loop, with the loop's rules for a failure (_failed).
            # In a race most claims are refused by their first read, and the
            # loop's bookkeeping around it (the retry clock and counters, the
            # transaction mode, its closures and frames) is Python every
            # racing thread runs with the GIL held, which is what the SQLite
            # tail follows (benchmarks/README.md, issue 14).  The loop makes
            # the attempt (again) when there is no idle connection, the store
            # is closed or its schema not checked yet, a lost write finds the
            # claim possible after all, or an error is one to try again after.
            idle = idle_of(self._engine)
            if idle is not None and not self._closed and self._schema_ready and (conn := idle.get()) is not None:
                reusable = False
                try:
                    conn.start(self._statements, self._engine.logger)
                    won, row, verdict = conn.attempt(write, probe, params, judge, fresh, True)
                    reusable = True
                except (CortexError, ControlFlow):
                    reusable = True
                    raise
                except Exception as exc:
                    # raised as the loop raises it, or (returning) made again by the loop
                    self._failed(exc, conn.fairy, conn, idle, WRITE1, conn.writing or conn.changed,
                                 time.monotonic(), [0, 0])
                    won, verdict = False, None
                finally:
                    # (the common case without _give_back's call: measured,
                    # 0.1-0.3 us of a refused claim's 10; the list was just
                    # found full, or the call failed, so no idle list for it)
                    if not (reusable and idle.put(conn)):
                        _give_back(conn, None, reusable)
                if won or verdict is not None:
                    return won, row, verdict

        def attempt(conn: Any) -> tuple[bool, Any, Any]:
            return DriverConnection.attempt(conn, write, probe, params, judge, fresh, probe_first)

        for _ in range(attempts):
            won, row, verdict = self._call(attempt, WRITE1)
            if won or verdict is not None:
                return won, row, verdict
        raise StoreError(f"{what.format(key)} kept racing concurrent writes")

    def _tx(self, fn: Callable[[sa.Connection], T]) -> T:
        """``fn`` runs several statements in one transaction that takes the
        write lock first (SQLite ``BEGIN IMMEDIATE``); committed on return,
        rolled back on any exception.  Retried on a fresh connection if the
        connection was lost before ``COMMIT``."""
        return self._call(fn, TX)

    def _snapshot(self, fn: Callable[[sa.Connection], T]) -> T:
        """``fn`` runs several SELECTs in one read transaction that sees one
        snapshot (REPEATABLE READ READ ONLY on PostgreSQL, a deferred BEGIN
        on SQLite in WAL mode) and takes no locks; retried on a fresh
        connection when the connection was lost (it wrote nothing)."""
        return self._call(fn, SNAPSHOT)

    def _call(self, fn: Callable[[sa.Connection], T], mode: str) -> T:
        if self._closed:
            raise StoreClosed("the store is closed")
        if not self._schema_ready:
            self.ensure_schema()
        return self._run(fn, mode)

    def _run(self, fn: Callable[[Any], T], mode: str) -> T:
        """The driver-facing loop of :meth:`_read`, :meth:`_write1`, :meth:`_tx`.

        ``fn`` gets a :class:`.driver.DriverConnection` on a pooled DBAPI
        connection (see :mod:`.driver`): no SQLAlchemy ``Connection``, no
        execution events.  A transaction is begun with the dialect's
        ``begin_sql`` (a write: SQLite ``BEGIN IMMEDIATE``) or
        ``snapshot_sql`` (a read of one snapshot), then committed, or
        rolled back when ``fn`` raises (a refusal included); a single
        statement runs without one (SQLite's own statement transaction,
        PostgreSQL's on an idle connection).
        """
        started = time.monotonic()
        tries = [0, 0]  # lock contention, lost connections
        ops = self._dialect
        engine = self._engine
        logger = self._engine.logger
        idle = idle_of(engine)
        while True:
            committing = False
            reusable = False
            fairy: Any = None
            conn: DriverConnection | None = None
            try:
                conn = idle.get() if idle is not None else None
                pooled = conn is None
                if conn is None:
                    conn = self._checkout()
                fairy = conn.fairy
                conn.start(self._statements, logger)
                if pooled:
                    # the pool does not reset a connection given back to it:
                    # one given back inside a transaction (by another user of
                    # the engine) would run this call's statements in it,
                    # never committed.  A local check when there is none.  An
                    # idle connection needs none: only this loop gives one
                    # back, with its transaction ended.
                    conn.rollback()
                if mode == WRITE1 or mode == READ:
                    # no BEGIN: the statement is its own transaction (SQLite
                    # outside BEGIN, PostgreSQL on an idle connection)
                    try:
                        result = fn(conn)
                    except BaseException:
                        # a writing statement is its own commit: it may
                        # have happened if it was running, or changed a
                        # row earlier
                        committing = conn.writing or conn.changed
                        raise
                else:  # TX, SNAPSHOT
                    conn.begin(ops.begin_sql if mode == TX else ops.snapshot_sql)
                    try:
                        result = fn(conn)
                    except BaseException:
                        _rollback(conn)
                        raise
                    committing = mode == TX
                    try:
                        conn.commit()
                    except BaseException:
                        _rollback(conn)
                        raise
                reusable = True
                return result
            except (CortexError, ControlFlow):
                # a refusal from fn, or a mixin's internal signal: the
                # transaction was ended, the connection is fine
                reusable = True
                raise
            except Exception as exc:
                self._failed(exc, fairy, conn, idle, mode, committing, started, tries)
            finally:
                if conn is not None:
                    _give_back(conn, idle, reusable)

    def _failed(self, exc: Exception, fairy: Any, conn: DriverConnection | None, idle: IdleConnections | None,
                mode: str, committing: bool, started: float, tries: list[int]) -> None:
        """What a try of :meth:`_run` that raised ``exc`` means: return to try
        again (``tries`` counts the tries of each kind), or raise the store's
        error.  ``committing``: the try may have committed a write.

        A method of its own, not a clause of the loop: the wrapped error
        holds the driver's, whose traceback holds the loop's frame, so a
        local of the loop holding it would be a reference cycle, left to the
        cyclic collector with all the loop's frame holds, at every
        ``AlreadyExists`` (``tests/test_refusal_garbage.py``)."""
        if isinstance(exc, self._dbapi_error):
            wrapped = self._wrap(exc, fairy, conn)
            if wrapped.connection_invalidated and idle is not None:
                idle.drain()  # the pool was invalidated: so are these
            self._retry_or_raise(wrapped, mode, committing, started, tries)
        elif isinstance(exc, sa.exc.DBAPIError):  # the pool's own wrapping (connect errors)
            self._retry_or_raise(exc, mode, committing, started, tries)
        else:
            raise StoreError(f"database error: {type(exc).__name__}: {exc}") from exc

    def _checkout(self) -> DriverConnection:
        """A connection from the pool, as the :class:`.driver.DriverConnection`
        kept in its record (made anew for a new or reconnected DBAPI
        connection)."""
        fairy = self._engine.raw_connection()
        try:
            dbapi = fairy.dbapi_connection
            info = fairy.info
            conn: DriverConnection | None = info.get(_CONN)
            if conn is None or conn.dbapi is not dbapi:
                conn = info[_CONN] = DriverConnection(dbapi, self._statements)
        except BaseException:
            fairy.close()
            raise
        conn.fairy = fairy
        return conn

    def _run_core(self, fn: Callable[[sa.Connection], T], mode: str) -> T:
        """:meth:`_run` on a SQLAlchemy ``Connection``, for the work that needs
        one (creating the schema: inspection, ``create_all``)."""
        started = time.monotonic()
        tries = [0, 0]
        while True:
            committing = False
            try:
                with self._engine.connect() as conn:
                    if mode == TX:
                        conn.execution_options(**{WRITE_OPTION: True})
                    elif mode == SNAPSHOT:
                        self._dialect.prepare_snapshot(conn)
                    else:
                        self._dialect.prepare_single(conn)
                    with conn.begin():
                        if mode == WRITE1:
                            committing = True  # the statement is its own commit
                        result = fn(conn)
                        committing = True  # leaving the block commits
                    return result
            except CortexError:
                raise  # a refusal from fn: the transaction rolled back
            except sa.exc.DBAPIError as exc:
                self._retry_or_raise(exc, mode, committing, started, tries)
            except ControlFlow:
                raise  # internal signal of a mixin (the transaction rolled back)
            except Exception as exc:
                raise StoreError(f"database error: {type(exc).__name__}: {exc}") from exc

    def _wrap(self, raw: Exception, fairy: Any, conn: DriverConnection | None) -> sa.exc.DBAPIError:
        """A raw driver error as SQLAlchemy's ``Connection`` would raise it; a
        lost connection invalidates the pool, as ``Connection`` does."""
        dialect = self._engine.dialect
        dbapi = None if fairy is None else fairy.dbapi_connection
        try:
            # the driver's error class is the DBAPI module's, known only at run time
            lost = bool(dialect.is_disconnect(raw, dbapi, None))  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - cannot tell: treat as any other error
            lost = False
        if lost and fairy is not None and fairy.is_valid:
            self._engine.pool._invalidate(fairy, raw)
        wrapped = sa.exc.DBAPIError.instance(
            None if conn is None else conn.last_sql, None if conn is None else conn.last_params,
            raw, dialect.loaded_dbapi.Error, hide_parameters=self._engine.hide_parameters,
            connection_invalidated=lost, dialect=dialect)
        if not isinstance(wrapped, sa.exc.DBAPIError):  # never: every driver error is wrapped
            raise StoreError(f"database error: {raw}") from raw
        return wrapped

    def _retry_or_raise(self, exc: sa.exc.DBAPIError, mode: str, committing: bool,
                        started: float, tries: list[int]) -> None:
        """Map a driver error: return to retry the call, or raise."""
        kind = self._dialect.classify(exc)
        if kind is ErrorKind.UNIQUE:
            raise AlreadyExists("an entity with this key already exists") from exc
        if kind is ErrorKind.DISCONNECT:
            if committing and mode not in (READ, SNAPSHOT):
                raise StoreError(
                    "the database connection was lost while the write was being "
                    "committed; it happened entirely or not at all"
                ) from exc
            tries[1] += 1
            if tries[1] <= _DISCONNECT_RETRIES:
                return  # nothing was committed: retry on a fresh connection
            raise StoreError(f"the database connection keeps failing: {exc.orig}") from exc
        if kind is ErrorKind.BUSY:
            # SQLite: the busy handler already waited busy_timeout for the lock
            tries[0] += 1
            self.lock_retries += 1
            waited = time.monotonic() - started
            if waited < self._lock_timeout:
                delay = min(0.002 * 2 ** min(tries[0], 6), 0.1)
                time.sleep(delay * (0.5 + random.random()))
                return  # rolled back: retry the whole transaction
            raise StoreError(
                f"the database stayed locked for {waited:.1f}s "
                f"({tries[0]} attempts): {exc.orig}"
            ) from exc
        raise StoreError(f"database error: {exc.orig}") from exc


def _give_back(conn: DriverConnection, idle: IdleConnections | None, reusable: bool) -> None:
    """Return the connection a call ran on: to the idle list (or, when it is
    full, to the pool, with its DriverConnection); a connection that is not
    ``reusable`` (its call failed) goes back to the pool without it."""
    fairy = conn.fairy
    # (``dbapi_connection is not None`` is the fairy's ``is_valid``)
    if not reusable or fairy.dbapi_connection is None:
        conn.close()  # its cursor; the connection is not reused
        fairy.info.pop(_CONN, None)
        fairy.close()
    elif idle is None or not idle.put(conn):
        fairy.close()  # back to the pool, with its DriverConnection


def _rollback(conn: DriverConnection) -> None:
    """End a failed or refused transaction; a connection that cannot roll
    back is never reused."""
    try:
        conn.rollback()
    except Exception:  # noqa: BLE001 - the original error is what the caller sees
        conn.fairy.invalidate()


# -- row codecs shared by the mixins ----------------------------------------------------


def scope_values(scope: Scope) -> dict[str, Any]:
    """The scope columns of a row stamped with ``scope``."""
    row: dict[str, Any] = {"scope": scope.canonical(), "scope_depth": scope.depth}
    for i in range(1, SCOPE_LEVELS + 1):
        key: str | None = None
        value: str | None = None
        if i <= scope.depth:
            key, value = scope[i - 1]
        row[f"scope_k{i}"] = key
        row[f"scope_v{i}"] = value
    return row


def scope_params(scope: Scope) -> dict[str, Any]:
    """The bound parameters of :func:`visible` for the caller's ``scope``
    (a new dict: callers add their own)."""
    return dict(_scope_params(scope))


def scope_binds(scope: Scope) -> dict[str, Any]:
    """:func:`scope_params`, shared: never change it (``{**scope_binds(s), ...}``
    makes a call's parameters without copying it twice)."""
    return _scope_params(scope)


@lru_cache(maxsize=4096)
def _scope_params(scope: Scope) -> dict[str, Any]:
    params: dict[str, Any] = {"s_depth": scope.depth}
    for i, (key, value) in enumerate(scope.levels, start=1):
        params[f"s_k{i}"] = key
        params[f"s_v{i}"] = value
    return params


def visible(table: sa.Table, depth: int, exact: bool = False) -> sa.ColumnElement[bool]:
    """SCOPE-VIS-1 (the caller's scope covers the row) or SCOPE-EXACT-1
    (equal), for a caller scope of ``depth`` levels bound by
    :func:`scope_params`.

    Whole-value equality per level: no ``LIKE``, so values that look like
    prefixes of each other and ``%``/``_`` never match by accident.  Statements
    are built once per shape (depth, exact) and cached; only the parameters
    change per call.
    """
    if depth < 1:  # never reached: scoped methods refuse the zero scope first
        raise InvalidArgument("a zero scope sees nothing")
    conds: list[sa.ColumnElement[bool]] = []
    for i in range(1, depth + 1):
        conds.append(table.c[f"scope_k{i}"] == sa.bindparam(f"s_k{i}"))
        conds.append(table.c[f"scope_v{i}"] == sa.bindparam(f"s_v{i}"))
    if exact:
        conds.append(table.c.scope_depth == sa.bindparam("s_depth"))
    return sa.and_(*conds)


def read_scope(row: Any) -> Scope:
    """SCOPE-CANON-5: the stored scope, or ``StoreError`` if it cannot be rebuilt."""
    return _stored_scope(*_SCOPE_COLUMNS(row))


#: The scope columns of a row, in :func:`_stored_scope`'s order.
_SCOPE_COLUMNS = operator.attrgetter("scope", "scope_depth", *(
    f"scope_{kv}{i}" for i in range(1, SCOPE_LEVELS + 1) for kv in ("k", "v")))


@lru_cache(maxsize=4096)
def _stored_scope(text: Any, depth: Any, *columns: Any) -> Scope:
    """:func:`read_scope` of the scope columns (cached: a ``Scope`` is
    immutable and rows of one scope repeat; parsing and checking one cost a
    decoded row ~10 us)."""
    try:
        scope = Scope.parse(text)
    except (InvalidArgument, TypeError) as exc:
        raise StoreError(f"a stored scope cannot be parsed: {text!r}") from exc
    levels = []
    for i in range(SCOPE_LEVELS):
        key, value = columns[2 * i], columns[2 * i + 1]
        if key is None and value is None:
            break
        levels.append((key, value))
    if tuple(levels) != scope.levels or depth != scope.depth:
        raise StoreError(f"a stored scope is inconsistent with its level columns: {text!r}")
    return scope


def ms(instant: datetime | None) -> int | None:
    return None if instant is None else to_millis(instant)


_EPOCH = from_millis(0)
_ONE_MS = timedelta(milliseconds=1)


def instant(value: int | None) -> datetime | None:
    """:func:`~cortex_spec.clock.from_millis` of a stored instant (the same
    sum, with the ``timedelta`` built from positional arguments: every
    decoded row makes two to five of these)."""
    return None if value is None else _EPOCH + timedelta(0, 0, 0, value)


def dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


#: The JSON decoder's scanner: one value at an index, without ``json.loads``'
#: checks around it (a third of its time on the short texts rows hold).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def load_json(text: str | None) -> Any:
    if text is None:
        return None
    if type(text) is str:
        try:
            value, end = _SCAN(text, 0)
        except (StopIteration, ValueError):
            pass  # json.loads below words the error
        else:
            if end == len(text):
                return value  # the whole text was one value: what json.loads returns
    try:
        return json.loads(text)
    except ValueError as exc:
        raise StoreError("a stored JSON value cannot be decoded") from exc


class Members(dict[Any, Any]):
    """An enum's members by value: ``Members(E)[v]`` is ``E(v)`` for a stored
    value, one dict lookup where the enum's call costs ten times more; a
    value that is no member's raises as ``E(v)`` does (``ValueError``)."""

    def __init__(self, enum: type[Enum]) -> None:
        super().__init__((member.value, member) for member in enum)
        self.enum = enum

    def __missing__(self, value: Any) -> Any:
        return self.enum(value)


def decode(what: str, build: Callable[[], T]) -> T:
    """Build an entity from a row; a row that does not fit is ``StoreError``."""
    try:
        return build()
    except CortexError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise StoreError(f"a stored {what} cannot be read: {exc}") from exc
