"""Everything that differs between SQLite and PostgreSQL, in one place.

The store, the schema and the class mixins are written once against
SQLAlchemy Core.  What they cannot say portably lives here:

* building the engine: drivers, pool (no reset on return: the store ends
  every transaction itself; idle connections kept checked out, see
  :class:`.driver.IdleConnections`), SQLite pragmas (WAL, busy timeout,
  synchronous), SQLite's ``BEGIN IMMEDIATE`` for write transactions, the
  PostgreSQL isolation level and the dead-connection check at checkout;
* beginning, committing and leaving autocommit on the DBAPI connection for
  the store's driver path (:mod:`.driver`);
* the column type of ids and other ordered text (binary collation:
  ``COLLATE "C"`` on PostgreSQL, SQLite's default ``BINARY``);
* the lock a schema creation takes, the one statement that claims a run
  and returns its suspension (:meth:`Dialect.claim_returning`), and whether
  a claim reads before it writes (:attr:`Dialect.probe_first`);
* classifying driver errors: unique violation, lock contention to retry,
  lost connection.

Anything not listed here is the same SQL on both dialects.
"""

from __future__ import annotations

import enum
import select
import weakref
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url

from .driver import Libpq

__all__ = [
    "POSTGRES",
    "SNAPSHOT_OPTION",
    "SQLITE",
    "WRITE_OPTION",
    "Dialect",
    "ErrorKind",
    "create_engine",
    "dialect_of",
    "id_type",
    "normalize_url",
    "prepare_engine",
]

#: Execution option set on a connection whose transaction will write.
WRITE_OPTION = "cortex_write"
#: Execution option set on a connection whose transaction is one snapshot read.
SNAPSHOT_OPTION = "cortex_snapshot"

#: A key well out of the way of applications' own advisory locks
#: (``pg_advisory_xact_lock``), taken while the schema is created.
_SCHEMA_LOCK_KEY = 0x636F72746578  # "cortex"


class ErrorKind(enum.Enum):
    """How the store reacts to a driver error."""

    UNIQUE = "unique"  # a unique key was reused -> AlreadyExists
    BUSY = "busy"  # lock contention: the transaction rolled back, retry it
    DISCONNECT = "disconnect"  # the connection died: retry unless committing
    OTHER = "other"  # -> StoreError


def id_type(length: int = 64) -> sa.types.TypeEngine[str]:
    """Ids and other text that is ordered or range-compared.

    RSC-GEN-11: comparisons are by code point.  SQLite's default collation
    (BINARY) already is; PostgreSQL's depends on the database locale, so the
    column is declared ``COLLATE "C"`` (byte order, which for UTF-8 is code
    point order).
    """
    return sa.String(length).with_variant(sa.String(length, collation="C"), "postgresql")


def normalize_url(url: str | URL) -> URL:
    """Pick the driver this adapter is written for.

    ``postgresql://`` and ``postgres://`` mean psycopg 3; ``sqlite://``
    means the standard library's ``sqlite3``.
    """
    if isinstance(url, str) and url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    u = make_url(url)
    if u.drivername in ("postgresql", "postgresql+psycopg"):
        return u.set(drivername="postgresql+psycopg")
    if u.drivername in ("sqlite", "sqlite+pysqlite"):
        if not u.database or u.database == ":memory:":
            raise ValueError(
                "the SQL store needs a SQLite database file (several connections "
                "share it); ':memory:' is not supported"
            )
        return u.set(drivername="sqlite+pysqlite")
    raise ValueError(f"unsupported database URL scheme {u.drivername!r} (use sqlite or postgresql)")


class Dialect:
    """Base: the behaviour both dialects share."""

    name = "generic"

    def engine_kwargs(self, *, pool_size: int, busy_timeout: float, synchronous: str,
                      application_name: str) -> dict[str, Any]:
        raise NotImplementedError

    def configure(self, engine: Engine, *, synchronous: str) -> None:
        """Install the engine's event hooks."""

    def prepare_single(self, conn: sa.Connection) -> None:
        """Set up a connection for one statement that is atomic on its own
        (every read of the store, and the writes that are one statement)."""

    def prepare_snapshot(self, conn: sa.Connection) -> None:
        """Set up a connection whose transaction is one read of several
        statements, all seeing one snapshot (class preparation)."""
        conn.execution_options(**{SNAPSHOT_OPTION: True})

    #: How the driver path begins a transaction that writes, and one whose
    #: statements all see one snapshot and take no locks (class preparation).
    begin_sql = "BEGIN"
    snapshot_sql = "BEGIN"

    #: Whether a claim reads before it writes (:meth:`.store.SqlStoreBase._contended`):
    #: the read that classifies a lost claim runs first, and the conditional
    #: write only when that read finds the claim possible.  The write alone
    #: still decides a win.  Worth it where a losing write costs every other
    #: writer: on SQLite a writing statement takes the database's one write
    #: lock even when it matches no row, so in a race the losers (all callers
    #: but one) would each make the others wait; a read takes no lock in WAL.
    #: Not on PostgreSQL, where a losing UPDATE locks nothing and the read
    #: would cost every winner a round trip.
    probe_first = False

    def driver_usable(self, dbapi_conn: Any) -> bool:
        """Whether an idle connection kept checked out may serve a call (what
        the engine's checkout event checks, see :class:`.driver.IdleConnections`)."""
        return True

    def lock_schema(self, conn: sa.Connection) -> None:
        """Serialise concurrent schema creation (inside a write transaction)."""

    def row_lock(self, stmt: sa.Select[Any]) -> sa.Select[Any]:
        """``stmt`` that also locks the selected rows for update until the
        transaction ends, so a decision read and the write it leads to see
        one state (no-op where the write lock already serialises writers)."""
        return stmt

    def claim_returning(self, claim: sa.Update, read: sa.Select[Any]) -> sa.Executable:
        """One statement that runs the conditional UPDATE ``claim`` and, when
        it changed a row, returns the row ``read`` selects (at most one row,
        of another table) as it is when the statement commits, which no
        concurrent statement can delete before then.  No row returned: the
        claim changed nothing."""
        raise NotImplementedError

    def classify(self, exc: sa.exc.DBAPIError) -> ErrorKind:
        if exc.connection_invalidated:
            return ErrorKind.DISCONNECT
        return ErrorKind.OTHER

    def ascii_lower(self, expr: Any) -> Any:
        """``expr`` with A–Z folded to a–z and nothing else (MC-GEN-10)."""
        raise NotImplementedError

    def binary(self, expr: Any) -> Any:
        """``expr`` compared and ordered by code point (RSC-GEN-11)."""
        return expr

    def contains(self, haystack: Any, needle: Any) -> Any:
        """True where ``needle`` is a literal substring of ``haystack`` (no
        ``LIKE``: ``%`` and ``_`` are characters like any other)."""
        raise NotImplementedError


class _Sqlite(Dialect):
    """SQLite through ``sqlite3``.

    * WAL, so that readers never block the writer and vice versa;
    * a busy timeout (the driver's ``timeout``): a connection waits that
      long for the write lock before SQLite reports "database is locked";
    * the driver's own transaction handling is switched off
      (``isolation_level = None``) and the store emits ``BEGIN IMMEDIATE``
      for every transaction that will write, so the write lock is taken
      first and a transaction never upgrades from reader to writer (which
      is where SQLite returns SQLITE_BUSY without waiting); a read is one
      SELECT, which SQLite runs as its own snapshot transaction;
    * a pooled connection is used by one thread at a time; a call checks
      one out for its whole transaction, so concurrent calls run on
      separate connections (``check_same_thread`` is off only because the
      pool hands a connection to different threads over time).
    """

    name = "sqlite"

    def engine_kwargs(self, *, pool_size: int, busy_timeout: float, synchronous: str,
                      application_name: str) -> dict[str, Any]:
        return {
            "poolclass": sa.pool.QueuePool,
            "pool_size": pool_size,
            "max_overflow": pool_size,
            "pool_timeout": 60,
            # the store ends every transaction itself (commit, rollback or a
            # discarded connection): no ROLLBACK on every return to the pool
            "pool_reset_on_return": None,
            "connect_args": {"timeout": busy_timeout, "check_same_thread": False},
        }

    def configure(self, engine: Engine, *, synchronous: str) -> None:
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # the store emits BEGIN itself
            cur = dbapi_conn.cursor()
            try:
                cur.execute("PRAGMA journal_mode=WAL")
                cur.fetchall()
                cur.execute(f"PRAGMA synchronous={synchronous.upper()}")
            finally:
                cur.close()

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn: sa.Connection) -> None:
            # a write takes the write lock first; a read is one SELECT, which
            # SQLite runs as its own (snapshot) transaction
            options = conn.get_execution_options()
            if options.get(WRITE_OPTION, False):
                conn.exec_driver_sql(self.begin_sql)
            elif options.get(SNAPSHOT_OPTION, False):
                conn.exec_driver_sql(self.snapshot_sql)

    def ascii_lower(self, expr: Any) -> Any:
        return sa.func.lower(expr)  # SQLite's built-in lower() folds A-Z only

    def contains(self, haystack: Any, needle: Any) -> Any:
        return sa.func.instr(haystack, needle) > 0

    #: the connection is in autocommit (``isolation_level`` None): a statement
    #: outside BEGIN is its own transaction.  A write takes the write lock
    #: first; a snapshot is a deferred read transaction: in WAL mode its
    #: first read fixes the snapshot every later read of it sees, and it
    #: blocks no writer
    begin_sql = "BEGIN IMMEDIATE"
    snapshot_sql = "BEGIN"
    probe_first = True  # see Dialect.probe_first

    def claim_returning(self, claim: sa.Update, read: sa.Select[Any]) -> sa.Executable:
        # UPDATE ... RETURNING (SELECT col FROM other ...) per column: one
        # statement holds the write lock from its start to its commit, so the
        # row read is the row at the claim's instant
        return claim.returning(*[
            read.with_only_columns(col).scalar_subquery().label(col.key)
            for col in read.selected_columns
        ])

    def classify(self, exc: sa.exc.DBAPIError) -> ErrorKind:
        orig = exc.orig
        name = getattr(orig, "sqlite_errorname", "") or ""
        text = str(orig).lower()
        if isinstance(exc, sa.exc.IntegrityError) and (
            name in ("SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY")
            or "unique constraint failed" in text
        ):
            return ErrorKind.UNIQUE
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or (
            "database is locked" in text
            or "database table is locked" in text
            or "database schema is locked" in text
        ):
            return ErrorKind.BUSY
        return super().classify(exc)


class _Postgres(Dialect):
    """PostgreSQL through psycopg 3.

    READ COMMITTED (the server default, set explicitly): a conditional
    UPDATE that waits on a row lock re-evaluates its WHERE against the
    committed row, so ``UPDATE ... WHERE state = 'paused'`` with a
    row-count check is an atomic claim.  The store's statements run on
    libpq directly, each prepared on the server on its first use
    (:class:`.driver.Libpq`); reads and single-statement writes run on an
    idle connection, each its own transaction (one round trip).  A pooled connection that the
    server closed is refused at checkout by a local poll of its socket; a
    connection lost in the middle of a call invalidates the pool and the
    store retries on a fresh connection whatever never reached COMMIT.
    """

    name = "postgresql"

    def engine_kwargs(self, *, pool_size: int, busy_timeout: float, synchronous: str,
                      application_name: str) -> dict[str, Any]:
        return {
            "pool_size": pool_size,
            "max_overflow": pool_size,
            "pool_timeout": 60,
            "pool_reset_on_return": None,  # see the SQLite engine
            "isolation_level": "READ COMMITTED",
            "connect_args": {"application_name": application_name, "connect_timeout": 10},
        }

    def configure(self, engine: Engine, *, synchronous: str) -> None:
        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # the connection's libpq path, from its first statement on: it
            # turns psycopg's own preparation off, which psycopg's rollback
            # would answer by deallocating the path's statements too
            Libpq.of(dbapi_conn)

        @sa.event.listens_for(engine, "checkout")
        def _on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
            # A pooled connection the server has closed (killed backend,
            # restart) has its socket readable while idle: refuse it here and
            # the pool connects afresh, instead of failing the next statement.
            # A local poll, not a round trip (unlike a pre-ping).
            if not self.driver_usable(dbapi_conn):
                raise sa.exc.DisconnectionError("the server closed this pooled connection")

    def driver_usable(self, dbapi_conn: Any) -> bool:
        return not (dbapi_conn.closed or _socket_readable(dbapi_conn))

    def prepare_single(self, conn: sa.Connection) -> None:
        # one statement needs no BEGIN/COMMIT round trips
        conn.execution_options(isolation_level="AUTOCOMMIT")

    def prepare_snapshot(self, conn: sa.Connection) -> None:
        # one snapshot for every statement of the transaction, taking no row
        # locks: writers are never blocked by a capture
        conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)

    #: READ COMMITTED (see above); a snapshot is REPEATABLE READ READ ONLY:
    #: the transaction's first statement fixes the snapshot every later one
    #: sees, and it takes no row locks
    begin_sql = "BEGIN ISOLATION LEVEL READ COMMITTED"
    snapshot_sql = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

    def lock_schema(self, conn: sa.Connection) -> None:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK_KEY})

    def ascii_lower(self, expr: Any) -> Any:
        # lower() would fold every letter by the database's locale
        return sa.func.translate(expr, _UPPER, _UPPER.lower())

    def contains(self, haystack: Any, needle: Any) -> Any:
        return sa.func.strpos(haystack, needle) > 0

    def binary(self, expr: Any) -> Any:
        return expr.collate("C")

    def share_lock(self, stmt: sa.Select[Any]) -> sa.Select[Any]:
        return stmt.with_for_update(read=True)  # FOR SHARE

    def claim_returning(self, claim: sa.Update, read: sa.Select[Any]) -> sa.Executable:
        # WITH read AS (SELECT ... FOR SHARE), claim AS (UPDATE ... AND
        # EXISTS (SELECT FROM read) RETURNING 1) SELECT read.* WHERE EXISTS
        # (SELECT FROM claim): the read row is share-locked before the UPDATE
        # (a concurrent DELETE waits for the commit; one that committed first
        # leaves "read" empty, and then the UPDATE matches nothing)
        locked = read.with_for_update(read=True).cte("cortex_read")
        changed = claim.where(sa.exists().select_from(locked)).returning(sa.literal(1)).cte(
            "cortex_claim")
        return sa.select(*locked.c).where(sa.exists().select_from(changed))

    def row_lock(self, stmt: sa.Select[Any]) -> sa.Select[Any]:
        return stmt.with_for_update()  # FOR UPDATE: waits, then reads the committed row

    def classify(self, exc: sa.exc.DBAPIError) -> ErrorKind:
        if exc.connection_invalidated:
            return ErrorKind.DISCONNECT
        code = getattr(exc.orig, "sqlstate", None)
        if code == "23505":  # unique_violation
            return ErrorKind.UNIQUE
        if code in ("40001", "40P01", "55P03"):  # serialization, deadlock, lock timeout
            return ErrorKind.BUSY
        if code is not None and code.startswith(("08", "57P")):  # connection, admin shutdown
            return ErrorKind.DISCONNECT
        if code is None and isinstance(exc, sa.exc.OperationalError):
            # psycopg's own connection failures carry no SQLSTATE ("consuming
            # input failed: server closed the connection unexpectedly", "the
            # connection is closed"): the connection is gone, nothing the
            # server answered
            return ErrorKind.DISCONNECT
        return ErrorKind.OTHER


_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _socket_readable(dbapi_conn: Any) -> bool:
    """True when an idle psycopg connection has data or EOF waiting (or has
    no usable socket).  ``poll``, not ``select``: no limit on the fd number."""
    try:
        poller = select.poll()
        poller.register(dbapi_conn.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    except Exception:  # noqa: BLE001 - no socket (closed, broken): not usable
        return True


SQLITE = _Sqlite()
POSTGRES = _Postgres()


def dialect_of(engine: Engine) -> Dialect:
    if engine.dialect.name == "sqlite":
        return SQLITE
    if engine.dialect.name == "postgresql":
        return POSTGRES
    raise ValueError(f"unsupported SQL dialect {engine.dialect.name!r} (use sqlite or postgresql)")


_CONFIGURED: weakref.WeakSet[Engine] = weakref.WeakSet()
#: the engines :func:`create_engine` made: their dialects differ by class and
#: server version only (the driver path shares their prepared statements)
MADE_HERE: weakref.WeakSet[Engine] = weakref.WeakSet()


def prepare_engine(engine: Engine, *, synchronous: str = "FULL") -> Dialect:
    """The dialect of ``engine``, with the store's hooks installed once.

    An engine from :func:`create_engine` already has them; one built
    elsewhere gets them here (on SQLite its idle connections are closed so
    that every connection gets the pragmas and the store's own BEGIN).
    """
    ops = dialect_of(engine)
    if engine not in _CONFIGURED:
        ops.configure(engine, synchronous=synchronous)
        _CONFIGURED.add(engine)
        if ops is SQLITE:
            engine.dispose()
    return ops


def create_engine(
    url: str | URL,
    *,
    pool_size: int = 16,
    busy_timeout: float = 5.0,
    synchronous: str = "FULL",
    application_name: str = "cortex-spec",
    echo: bool = False,
) -> Engine:
    """An engine configured for the store (see the dialect classes above)."""
    u = normalize_url(url)
    ops = SQLITE if u.get_backend_name() == "sqlite" else POSTGRES
    engine = sa.create_engine(
        u,
        echo=echo,
        **ops.engine_kwargs(
            pool_size=pool_size,
            busy_timeout=busy_timeout,
            synchronous=synchronous,
            application_name=application_name,
        ),
    )
    ops.configure(engine, synchronous=synchronous)
    _CONFIGURED.add(engine)
    MADE_HERE.add(engine)
    from .driver import install_idle  # the driver path's idle connections

    # SQLite's connections are always usable: no check per call
    install_idle(engine, None if type(ops).driver_usable is Dialect.driver_usable else ops.driver_usable)
    return engine
