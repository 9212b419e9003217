"""Class ``gateway`` on SQL: SQLite (the natural home of a gateway's private
file) and PostgreSQL (spec: gateway.md).

Locations and locks (GW-SCOPE-4, GW-OPEN-*):

* **SQLite** — a location is a **directory**.  It holds the gateway's own
  database file ``gateway.db`` (WAL) and a lock file ``gateway.lock`` held
  with ``fcntl.flock(LOCK_EX | LOCK_NB)`` for as long as the store is open.
  ``flock`` refuses a second open at once, from this process (another open
  file description) or any other (GW-OPEN-2/3), and the kernel releases it
  when the holding process dies, with no cleanup (GW-OPEN-6).  The lock is
  taken before the database file is touched (GW-OPEN-4).
* **PostgreSQL** — a location is a **namespace**: a schema (lower-case
  identifier) of the opener's gateway database — by default the database
  of the store's own engine.  The lock is a session-level advisory lock,
  ``pg_try_advisory_lock(class, crc32(namespace))``, held by a dedicated
  connection taken out of the pool (``close`` unlocks it and keeps the
  connection, then holding no lock, for the engine's next open); the
  server releases it when that session ends, which the death of the
  holding process ends — as soon as
  the server notices the closed connection, normally within milliseconds.
  That release is the server's, so this backend declares a bound for it
  (GW-OPEN-6): the certification harness uses 5 seconds.  Before every
  call the store polls that connection's socket (a local poll, no round
  trip): a session the server closed means the lock is gone, and the store
  takes it again on a new connection or, if another store holds it now,
  refuses every call with ``StoreError``.

Atomicity comes from the database, never from a Python lock:

* ``accept`` is one transaction: ``INSERT INTO gw_items ... SELECT ...,
  last_seq + 1 FROM gw_meta WHERE id = 1 FOR UPDATE ON CONFLICT DO NOTHING
  RETURNING seq`` (SQLite takes the write lock with ``BEGIN IMMEDIATE`` and
  has no ``FOR UPDATE``; PostgreSQL locks the counter row, reading its
  latest value, until commit) and then, if a row was inserted, ``UPDATE
  gw_meta SET last_seq = :seq``.  Accepts are serialised on the counter, so
  insertion numbers follow the order in which accepts commit (GW-ORD-2) and
  are never reused (GW-ORD-3); the primary key ``(channel, message_id)`` is
  the deduplication (GW-ACC-5).  A duplicate changes no row, and its
  transaction ends.  (Measured, issue 14: the former order — bump the
  counter, insert, roll back a duplicate — cost a duplicate one statement
  more, and on PostgreSQL the ROLLBACK made psycopg discard the
  connection's prepared statements.)
* ``set_replied`` is one transaction: the row is read (``FOR UPDATE`` on
  PostgreSQL) to check the size of the row with its reply (RSC-GEN-8), then
  ``UPDATE ... WHERE status = 'pending'``; ``mark_done`` is one conditional
  ``UPDATE``; ``prune_done`` one ``DELETE``; offsets and both selection
  setters one upsert each, the setters writing only their own column
  (GW-SEL-6).
* Queues are one ``SELECT ... ORDER BY received_at, seq`` — ``received_at``
  is BIGINT milliseconds, an instant, never text (GW-ORD-1).

The gateway reads no clock (GW-SCOPE-5).  Child processes open locations
with :func:`open_sqlite_gateway` and :func:`open_postgres_gateway` (harness
feature ``cross-process``).
"""

from __future__ import annotations

import contextlib
import fcntl
import operator
import os
import re
import select
import threading
import zlib
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cortex_spec.context import Context, require_context
from cortex_spec.errors import (
    CortexError,
    InvalidArgument,
    StoreClosed,
    StoreError,
    StoreLocked,
)
from cortex_spec.gateway import (
    GatewayStore,
    InboundMessage,
    InboxItem,
    ItemStatus,
    check_channel,
    check_cutoff,
    check_key,
    check_offset_value,
    check_queue_page,
    check_reply,
    check_reply_fits,
    check_selection_key,
    check_selection_value,
    validate_message,
)

from . import dialect as dialects
from .dialect import id_type
from .driver import Libpq
from .store import READ, TX, WRITE1, Members, SqlStoreBase, db_int, instant, ms

__all__ = [
    "GATEWAY_SCHEMA_VERSION",
    "GatewayOpenerMixin",
    "SqlGateway",
    "check_directory",
    "check_namespace",
    "gateway_metadata",
    "open_postgres_gateway",
    "open_sqlite_gateway",
]

#: Version of the gateway tables (row ``gw_meta.id = 1``).
GATEWAY_SCHEMA_VERSION = 1
#: First key of the advisory lock: "gate" (the second is the namespace's CRC-32).
_LOCK_CLASS = 0x67617465 - 2**32 if 0x67617465 >= 2**31 else 0x67617465

T = TypeVar("T")

_PENDING, _REPLIED, _DONE = ItemStatus.PENDING.value, ItemStatus.REPLIED.value, ItemStatus.DONE.value
_FIELDS = ("channel", "message_id", "conversation", "principal", "text", "trusted", "agent", "project")
#: the accept's parameter names of :data:`_FIELDS`, and the fields' values of an item
_FIELD_PARAMS = tuple(f"w_{f}" for f in _FIELDS)
_FIELD_VALUES = operator.attrgetter(*_FIELDS)

gateway_metadata = sa.MetaData()

gw_meta = sa.Table(
    "gw_meta",
    gateway_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.Integer, nullable=False),
    # the last insertion number handed out (never reused, GW-ORD-2/3)
    sa.Column("last_seq", sa.BigInteger, nullable=False),
)

gw_items = sa.Table(
    "gw_items",
    gateway_metadata,
    sa.Column("channel", id_type(255), primary_key=True),
    sa.Column("message_id", id_type(255), primary_key=True),
    sa.Column("conversation", sa.Text, nullable=False),
    sa.Column("principal", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("trusted", sa.Boolean, nullable=False),
    sa.Column("agent", sa.Text, nullable=False),
    sa.Column("project", sa.Text, nullable=False),
    sa.Column("status", sa.String(8), nullable=False),
    sa.Column("reply", sa.Text, nullable=False),
    sa.Column("received_at", sa.BigInteger, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False, unique=True),
    sa.CheckConstraint("status IN ('pending', 'replied', 'done')", name="ck_gw_items_status"),
    sa.Index("ix_gw_items_queue", "status", "received_at", "seq"),
)

gw_offsets = sa.Table(
    "gw_offsets",
    gateway_metadata,
    sa.Column("channel", id_type(255), primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)

gw_selections = sa.Table(
    "gw_selections",
    gateway_metadata,
    sa.Column("channel", id_type(255), primary_key=True),
    sa.Column("conversation", id_type(255), primary_key=True),
    sa.Column("agent", sa.Text, nullable=False),
    sa.Column("project", sa.Text, nullable=False),
)

_NAMESPACE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def check_directory(location: object) -> str:
    """A SQLite gateway location: a directory path (``str`` or path-like)."""
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    if not isinstance(location, str):
        raise InvalidArgument(f"a SQLite gateway location is a directory path, got {type(location).__name__}")
    if not location or "\x00" in location:
        raise InvalidArgument(f"{location!r} is not a directory path")
    return location


def check_namespace(location: object) -> str:
    """A PostgreSQL gateway location: a lower-case identifier (a schema name)."""
    if not isinstance(location, str) or not _NAMESPACE.match(location):
        raise InvalidArgument(
            f"a PostgreSQL gateway location is a schema name matching [a-z_][a-z0-9_]*, got {location!r}")
    return location


def _insert(dialect_name: str) -> Callable[..., Any]:
    if dialect_name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert
    from sqlalchemy.dialects import sqlite

    return sqlite.insert


# -- statements (built once, per dialect where the upserts differ) ------------------------

_KEY = (gw_items.c.channel == sa.bindparam("w_channel"),
        gw_items.c.message_id == sa.bindparam("w_mid"))
_GET_ITEM = sa.select(gw_items).where(*_KEY)
_LOCK_ITEM = sa.select(gw_items).where(*_KEY).with_for_update()
_SET_REPLIED = sa.update(gw_items).where(*_KEY, gw_items.c.status == _PENDING).values(
    status=_REPLIED, reply=sa.bindparam("w_reply"))
_MARK_DONE = sa.update(gw_items).where(
    *_KEY, sa.or_(gw_items.c.status == _PENDING, gw_items.c.status == _REPLIED)).values(status=_DONE)
_PRUNE = sa.delete(gw_items).where(gw_items.c.status == _DONE,
                                   gw_items.c.received_at < sa.bindparam("w_cut", type_=sa.BigInteger))
_OFFSET = sa.select(gw_offsets.c.value).where(gw_offsets.c.channel == sa.bindparam("w_channel"))
_SELECTION = sa.select(gw_selections.c.agent, gw_selections.c.project).where(
    gw_selections.c.channel == sa.bindparam("w_channel"),
    gw_selections.c.conversation == sa.bindparam("w_conv"))
_BUMP = sa.update(gw_meta).where(gw_meta.c.id == 1, gw_meta.c.last_seq < sa.bindparam("w_seq")).values(
    last_seq=sa.bindparam("w_seq"))


@cache
def _accept(dialect_name: str) -> Any:
    """INSERT the item numbered ``last_seq + 1``, reading (and on PostgreSQL
    locking) the counter row in the same statement; nothing on a duplicate."""
    numbered = sa.select(
        *[sa.bindparam(p, type_=gw_items.c[f].type) for p, f in zip(_FIELD_PARAMS, _FIELDS)],
        sa.literal(_PENDING, type_=gw_items.c.status.type), sa.literal("", type_=sa.Text),
        sa.bindparam("w_received", type_=sa.BigInteger),
        gw_meta.c.last_seq + 1,
    ).where(gw_meta.c.id == 1).with_for_update()
    columns = [*_FIELDS, "status", "reply", "received_at", "seq"]
    return (_insert(dialect_name)(gw_items).from_select(columns, numbered)
            .on_conflict_do_nothing(index_elements=["channel", "message_id"])
            .returning(gw_items.c.seq))


@cache
def _queue(status: str, limit: bool, offset: bool) -> sa.Select[Any]:
    stmt = sa.select(gw_items).where(gw_items.c.status == status).order_by(
        gw_items.c.received_at, gw_items.c.seq)
    if limit:
        stmt = stmt.limit(sa.bindparam("w_limit", type_=sa.BigInteger))
    if offset:
        stmt = stmt.offset(sa.bindparam("w_offset", type_=sa.BigInteger))
    return stmt


@cache
def _set_offset(dialect_name: str) -> Any:
    stmt = _insert(dialect_name)(gw_offsets).values(
        channel=sa.bindparam("w_channel"), value=sa.bindparam("w_value", type_=sa.BigInteger))
    return stmt.on_conflict_do_update(index_elements=["channel"], set_={"value": stmt.excluded.value})


@cache
def _set_selection(dialect_name: str, field: str) -> Any:
    stmt = _insert(dialect_name)(gw_selections).values(
        channel=sa.bindparam("w_channel"), conversation=sa.bindparam("w_conv"),
        agent=sa.bindparam("w_agent"), project=sa.bindparam("w_project"))
    # one upsert that writes only this field (GW-SEL-2/3/6)
    return stmt.on_conflict_do_update(index_elements=["channel", "conversation"],
                                      set_={field: stmt.excluded[field]})


_STATUSES = Members(ItemStatus)


def _item_from_row(row: Any) -> InboxItem:
    try:
        return InboxItem(
            channel=row.channel,
            message_id=row.message_id,
            conversation=row.conversation,
            principal=row.principal,
            text=row.text,
            trusted=bool(row.trusted),
            agent=row.agent,
            project=row.project,
            status=_STATUSES[row.status],
            reply=row.reply,
            received_at=instant(row.received_at),
        )
    except (TypeError, ValueError) as exc:
        raise StoreError("a stored inbox row cannot be read") from exc


# -- locks ---------------------------------------------------------------------------------


class _FileLock:
    """``flock`` on ``<directory>/gateway.lock``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open the gateway lock file {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLocked(f"gateway location {os.path.dirname(self.path)!r} is held by "
                              "another open store") from None
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"cannot lock {self.path}: {exc}") from exc
        self.fd = fd

    def release(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def crash(self) -> None:
        """What the process's death does: the descriptor closes, no unlock runs."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def lost(self) -> bool:
        return False

    def reacquire(self) -> bool:
        return False


def advisory_keys(namespace: str) -> tuple[int, int]:
    """The two int4 keys of a namespace's advisory lock (``pg_locks`` shows
    them as ``classid``/``objid``, unsigned, with ``objsubid = 2``)."""
    crc = zlib.crc32(namespace.encode("utf-8"))
    return _LOCK_CLASS, crc - 2**32 if crc >= 2**31 else crc


#: Lock sessions kept idle per engine (see :func:`_idle_sessions`), at most.
_MAX_IDLE_SESSIONS = 4
#: Guards the idle sessions and the translated engines of every engine.
_SHARED = threading.Lock()


def _base(engine: Engine) -> Engine:
    """The engine ``engine`` was derived from by ``execution_options`` (itself
    when it was not): what a namespace's translated engine shares."""
    return getattr(engine, "_proxied", engine)


def _idle_sessions(engine: Engine) -> list[Any]:
    """The lock connections released stores left to ``engine``'s next opens
    (their sessions hold no lock): a PostgreSQL connection costs a server
    process and ~6 ms to make, and the certification opens a gateway per
    history.  Closed when the engine is disposed."""
    base = _base(engine)
    idle: list[Any] | None = base.__dict__.get("_cortex_lock_sessions")
    if idle is None:
        with _SHARED:
            idle = base.__dict__.get("_cortex_lock_sessions")
            if idle is None:
                idle = base.__dict__["_cortex_lock_sessions"] = []
                sa.event.listen(base, "engine_disposed", lambda _engine: _close_idle(idle))
    return idle


def _close_idle(idle: list[Any]) -> None:
    with _SHARED:
        sessions, idle[:] = list(idle), []
    for dbapi in sessions:
        with contextlib.suppress(Exception):
            dbapi.close()


def _translated(engine: Engine, namespace: str) -> Engine:
    """``engine`` with ``namespace`` as the schema of the gateway's tables:
    the same object for the same engine and namespace, for the last 64, so
    that the statements prepared for it (:mod:`.driver`, kept per engine)
    serve every open of the namespace."""
    with _SHARED:
        made: dict[str, Engine] = engine.__dict__.setdefault("_cortex_namespaces", {})
        translated = made.pop(namespace, None)  # (put back last: the most recent)
        if translated is None:
            translated = engine.execution_options(schema_translate_map={None: namespace})
            if len(made) >= 64:
                del made[next(iter(made))]
        made[namespace] = translated
    return translated


class _AdvisoryLock:
    """A session-level advisory lock held by a dedicated connection, taken out
    of the pool (its session, and so the lock, never serves anyone else
    while held).  A released lock's session, which then holds no lock, is
    kept for the engine's next lock (:func:`_idle_sessions`); a crashed
    one's is closed, as the process's death would."""

    def __init__(self, engine: Engine, namespace: str) -> None:
        self.engine = engine
        self.namespace = namespace
        self.keys = advisory_keys(namespace)
        self.dbapi: Any = None
        #: set by release/crash: the store is gone and never takes the lock again
        self.ended = False
        #: serialises taking and dropping the lock connection (not data work)
        self.mutex = threading.Lock()

    def _session(self) -> tuple[Any, bool]:
        """A connection for the lock, and whether it was kept idle (a session
        the server may have ended since): an idle one, else a new one."""
        idle = _idle_sessions(self.engine)
        with _SHARED:
            while idle:
                dbapi = idle.pop()
                if not dbapi.closed:
                    return dbapi, True
        fairy = self.engine.raw_connection()
        fairy.detach()
        # psycopg's connection (the DBAPI protocol has no autocommit); a detached fairy always has one
        fresh: Any = fairy.dbapi_connection
        if fresh is None:
            raise StoreError("the gateway's lock connection has no driver connection")
        try:
            # the pool does not reset a connection given back to it (see the
            # store's call loop): one given back inside a transaction by
            # another user of the engine would refuse autocommit below
            Libpq.of(fresh).rollback()
        except BaseException:
            fresh.close()
            raise
        return fresh, False

    def _try(self) -> Any:
        while True:
            dbapi, kept = self._session()
            try:
                dbapi.autocommit = True
                got = dbapi.execute("SELECT pg_try_advisory_lock(%s, %s)", self.keys).fetchone()[0]
            except Exception:
                dbapi.close()
                if kept:
                    continue  # the server ended the idle session: a new one
                raise
            except BaseException:
                dbapi.close()
                raise
            if not got:
                self._keep(dbapi)  # it holds nothing
                return None
            return dbapi

    def _keep(self, dbapi: Any) -> None:
        """Keep a session holding no lock for the engine's next lock, or close it."""
        from psycopg.pq import TransactionStatus

        idle = _idle_sessions(self.engine)
        if not dbapi.closed and dbapi.info.transaction_status == TransactionStatus.IDLE:
            with _SHARED:
                if len(idle) < _MAX_IDLE_SESSIONS:
                    idle.append(dbapi)
                    return
        dbapi.close()

    def acquire(self) -> None:
        try:
            dbapi = self._try()
        except Exception as exc:
            raise StoreError(f"cannot take the gateway lock of {self.namespace!r}: {exc}") from exc
        if dbapi is None:
            raise StoreLocked(f"gateway location {self.namespace!r} is held by another open store")
        self.dbapi = dbapi

    def release(self) -> None:
        with self.mutex:
            self.ended = True
            dbapi, self.dbapi = self.dbapi, None
        if dbapi is not None:
            try:
                # every advisory lock of the session (it took ours once, but
                # a lock taken twice would need two unlocks): then it holds
                # none, and serves the next lock
                dbapi.execute("SELECT pg_advisory_unlock_all()")
            except Exception:  # noqa: BLE001 - closing the session releases it anyway
                dbapi.close()
            else:
                self._keep(dbapi)

    def crash(self) -> None:
        """What the process's death does: the session's socket closes."""
        with self.mutex:
            self.ended = True
            dbapi, self.dbapi = self.dbapi, None
        if dbapi is not None:
            dbapi.close()

    def lost(self) -> bool:
        """True when the server closed the lock's session (a local poll)."""
        dbapi = self.dbapi
        if dbapi is None or dbapi.closed:
            return True
        try:
            poller = select.poll()
            poller.register(dbapi.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
            return bool(poller.poll(0))
        except Exception:  # noqa: BLE001 - anything odd: assume the session is gone
            return True

    def reacquire(self) -> bool:
        """After a lost session: take the lock again, if nobody else has (and
        the store was not closed or crashed meanwhile)."""
        with self.mutex:
            if self.ended:
                return False
            if self.dbapi is not None and not self.lost():
                return True  # another thread already took it again
            old, self.dbapi = self.dbapi, None
            if old is not None:
                old.close()
            try:
                self.dbapi = self._try()
            except Exception:  # noqa: BLE001
                return False
            return self.dbapi is not None


# -- the store ------------------------------------------------------------------------------


class _NoClock:
    """The gateway's clock: it reads none (GW-SCOPE-5), so a read is a bug."""

    def now(self) -> datetime:
        raise StoreError("the gateway reads no clock (GW-SCOPE-5)")


class SqlGateway(SqlStoreBase):
    """An open gateway store (see the module docstring).  Use
    :meth:`open_sqlite` / :meth:`open_postgres`, or a store's
    ``open_gateway``."""

    def __init__(self, engine: Engine, lock: Any, *, owns_engine: bool, namespace: str | None,
                 lock_timeout: float = 30.0) -> None:
        # SqlStoreBase's transaction loop without its schema or hooks: the
        # engine is already prepared (a store's, or one made here)
        self.clock = _NoClock()  # the gateway reads no clock (GW-SCOPE-5)
        self._engine = engine
        self._owns_engine = owns_engine
        self._dialect = dialects.dialect_of(engine)
        self._create_schema = True
        self._lock_timeout = lock_timeout
        self._schema_ready = False
        self._closed = False
        self._init_driver()
        self._lock = lock
        self._lost = False
        self.namespace = namespace

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def open_sqlite(cls, directory: object, *, synchronous: str = "FULL",
                    busy_timeout: float = 5.0, pool_size: int = 8) -> SqlGateway:
        path = check_directory(directory)
        try:
            os.makedirs(path, exist_ok=True)  # GW-OPEN-1: create the location
        except OSError as exc:
            raise StoreError(f"cannot create the gateway directory {path!r}: {exc}") from exc
        lock = _FileLock(os.path.join(path, "gateway.lock"))
        lock.acquire()  # GW-OPEN-2..4: before the database file is touched
        try:
            engine = dialects.create_engine(
                "sqlite:///" + os.path.abspath(os.path.join(path, "gateway.db")),
                pool_size=pool_size, busy_timeout=busy_timeout, synchronous=synchronous,
                application_name="cortex-spec gateway")
        except Exception as exc:
            lock.release()
            raise StoreError(f"cannot open the gateway database in {path!r}: {exc}") from exc
        return cls._finish(cls(engine, lock, owns_engine=True, namespace=None))

    @classmethod
    def open_postgres(cls, engine: Engine, namespace: object) -> SqlGateway:
        ns = check_namespace(namespace)
        translated = _translated(engine, ns)
        lock = _AdvisoryLock(translated, ns)
        lock.acquire()  # GW-OPEN-2..4: before the namespace is touched
        return cls._finish(cls(translated, lock, owns_engine=False, namespace=ns))

    @classmethod
    def _finish(cls, store: SqlGateway) -> SqlGateway:
        try:
            store.ensure_schema()
        except BaseException as exc:
            store._lock.release()  # GW-OPEN-8: no lock left held
            if store._owns_engine:
                store._engine.dispose()
            store._closed = True
            if isinstance(exc, CortexError):
                raise StoreError(f"cannot open the gateway location: {exc}") from exc
            raise
        return store

    def ensure_schema(self) -> None:
        """Create the gateway tables if missing; refuse another version."""
        if self._schema_ready:
            return
        ns = self.namespace

        def prepare(conn: sa.Connection) -> int:
            if ns is not None:
                conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{ns}"')
            gateway_metadata.create_all(conn, checkfirst=True)
            found = conn.execute(sa.select(gw_meta.c.version).where(gw_meta.c.id == 1)).scalar_one_or_none()
            if found is None:
                conn.execute(sa.insert(gw_meta).values(id=1, version=GATEWAY_SCHEMA_VERSION, last_seq=0))
                found = GATEWAY_SCHEMA_VERSION
            return found

        version = self._run_core(prepare, TX)
        if version != GATEWAY_SCHEMA_VERSION:
            raise StoreError(f"the gateway location has schema version {version}; "
                             f"this adapter reads version {GATEWAY_SCHEMA_VERSION}")
        self._schema_ready = True

    # -- closing -----------------------------------------------------------------------

    def close(self) -> None:
        """Idempotent: release the lock (GW-OPEN-5/7)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._lock.release()
        finally:
            if self._owns_engine:
                self._engine.dispose()

    def crash(self) -> None:
        """Stand in for the death of the holding process (the harness's crash
        hook): the lock's descriptor or session is closed without unlocking,
        as the kernel or the server would on the process's death."""
        self._closed = True
        self._lock.crash()
        if self._owns_engine:
            self._engine.dispose()

    def __repr__(self) -> str:
        where = self.namespace or self._engine.url.database
        return f"SqlGateway({where!r})"

    def _call(self, fn: Callable[[Any], T], mode: str) -> T:
        self._check_open()
        if self._lost:
            raise StoreError("the gateway lost its lock to another open store")
        if self._lock.lost() and not self._lock.reacquire():
            self._check_open()  # closed (or crashed) meanwhile: StoreClosed
            self._lost = True
            raise StoreError("the gateway's lock session ended and another store holds the lock now")
        return self._run(fn, mode)

    # -- inbox -------------------------------------------------------------------------

    def accept(self, ctx: Context, message: InboundMessage, now: datetime) -> bool:
        item = validate_message(ctx, message, now)
        params = dict(zip(_FIELD_PARAMS, _FIELD_VALUES(item)))
        params["w_received"] = ms(item.received_at)
        stmt = _accept(self._dialect.name)
        bound = self._statements.get(stmt, params).bind(params)  # before the transaction

        def insert(conn: Any) -> bool:
            seq = conn.execute(stmt, bound).scalar_one_or_none()
            if seq is None:
                return False  # the key has a row: nothing written (GW-ACC-5)
            if conn.execute(_BUMP, {"w_seq": seq}).rowcount != 1:
                raise StoreError("the gateway's insertion counter changed under its lock")
            return True

        return self._call(insert, TX)

    def get_item(self, ctx: Context, channel: str, message_id: str) -> InboxItem | None:
        require_context(ctx)
        channel, message_id = check_key(channel, message_id)
        params = {"w_channel": channel, "w_mid": message_id}

        def read(conn: Any) -> InboxItem | None:
            found = conn.execute(_GET_ITEM, params).one_or_none()
            return None if found is None else _item_from_row(found)

        return self._call(read, READ)

    def _queue(self, ctx: Context, status: str, limit: int, offset: int) -> list[InboxItem]:
        require_context(ctx)
        limit, offset = check_queue_page(limit, offset)
        params = {"w_limit": db_int(limit), "w_offset": db_int(offset)}
        stmt = _queue(status, limit > 0, offset > 0)
        return self._call(lambda conn: [_item_from_row(r) for r in conn.execute(stmt, params)], READ)

    def pending(self, ctx: Context, limit: int = 0, offset: int = 0) -> list[InboxItem]:
        return self._queue(ctx, _PENDING, limit, offset)

    def pending_replies(self, ctx: Context, limit: int = 0, offset: int = 0) -> list[InboxItem]:
        return self._queue(ctx, _REPLIED, limit, offset)

    def set_replied(self, ctx: Context, channel: str, message_id: str, reply: str) -> bool:
        require_context(ctx)
        channel, message_id = check_key(channel, message_id)
        reply = check_reply(reply)
        params = {"w_channel": channel, "w_mid": message_id, "w_reply": reply}

        def replied(conn: Any) -> bool:
            found = conn.execute(_LOCK_ITEM, params).one_or_none()
            if found is None:
                return False  # GW-ST-5
            check_reply_fits(_item_from_row(found), reply)
            return bool(conn.execute(_SET_REPLIED, params).rowcount == 1)  # GW-ST-2..4

        return self._call(replied, TX)

    def mark_done(self, ctx: Context, channel: str, message_id: str) -> bool:
        require_context(ctx)
        channel, message_id = check_key(channel, message_id)
        params = {"w_channel": channel, "w_mid": message_id}
        return self._call(lambda conn: bool(conn.execute(_MARK_DONE, params).rowcount == 1), WRITE1)

    def prune_done(self, ctx: Context, before: datetime) -> int:
        require_context(ctx)
        params = {"w_cut": ms(check_cutoff(before))}
        return self._call(lambda conn: int(conn.execute(_PRUNE, params).rowcount), WRITE1)

    # -- offsets -----------------------------------------------------------------------

    def offset(self, ctx: Context, channel: str) -> int:
        require_context(ctx)
        params = {"w_channel": check_channel(channel)}
        return self._call(lambda conn: int(conn.execute(_OFFSET, params).scalar_one_or_none() or 0), READ)

    def set_offset(self, ctx: Context, channel: str, value: int) -> None:
        require_context(ctx)
        channel = check_channel(channel)
        params = {"w_channel": channel, "w_value": check_offset_value(value)}
        stmt = _set_offset(self._dialect.name)
        self._call(lambda conn: conn.execute(stmt, params), WRITE1)

    # -- selection -----------------------------------------------------------------------

    def conversation(self, ctx: Context, channel: str, conversation: str) -> tuple[str, str]:
        require_context(ctx)
        channel, conversation = check_selection_key(channel, conversation)
        params = {"w_channel": channel, "w_conv": conversation}

        def read(conn: Any) -> tuple[str, str]:
            found = conn.execute(_SELECTION, params).one_or_none()
            return ("", "") if found is None else (found.agent, found.project)

        return self._call(read, READ)

    def _set_selection(self, ctx: Context, channel: str, conversation: str, value: str, field: str) -> None:
        require_context(ctx)
        channel, conversation = check_selection_key(channel, conversation)
        value = check_selection_value(value, field)
        params = {"w_channel": channel, "w_conv": conversation, "w_agent": "", "w_project": ""}
        params[f"w_{field}"] = value
        stmt = _set_selection(self._dialect.name, field)
        self._call(lambda conn: conn.execute(stmt, params), WRITE1)

    def set_conversation_agent(self, ctx: Context, channel: str, conversation: str, agent: str) -> None:
        self._set_selection(ctx, channel, conversation, agent, "agent")

    def set_conversation_project(
        self, ctx: Context, channel: str, conversation: str, project: str
    ) -> None:
        self._set_selection(ctx, channel, conversation, project, "project")


# -- openers ---------------------------------------------------------------------------------


class GatewayOpenerMixin:
    """Makes :class:`~cortex_spec.adapters.sql.SqlStore` a gateway opener.

    SQLite stores open a directory (``gateway_synchronous`` is the gateway
    file's ``PRAGMA synchronous``, default ``FULL``); PostgreSQL stores open
    a namespace in ``gateway_engine``'s database (default: the store's).
    """

    gateway_engine: Engine | None = None
    gateway_synchronous: str = "FULL"

    def open_gateway(self, location: Any) -> GatewayStore:
        if getattr(self, "_closed", False):
            raise StoreClosed("the store is closed")
        if self._dialect.name == "postgresql":  # type: ignore[attr-defined]
            engine = self.gateway_engine if self.gateway_engine is not None else self.engine  # type: ignore[attr-defined]
            return SqlGateway.open_postgres(engine, location)
        return SqlGateway.open_sqlite(location, synchronous=self.gateway_synchronous)


def open_sqlite_gateway(directory: str, synchronous: str = "FULL") -> SqlGateway:
    """A child process's opener (feature ``cross-process``)."""
    return SqlGateway.open_sqlite(directory, synchronous=synchronous)


def open_postgres_gateway(url: str, namespace: str) -> SqlGateway:
    """A child process's opener: its own engine on ``url`` (feature ``cross-process``)."""
    engine = dialects.create_engine(url, pool_size=4, application_name="cortex-spec gateway child")
    return SqlGateway.open_postgres(engine, namespace)
