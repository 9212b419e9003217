"""Tests of the SQL adapter's gateway specifics (the clause suite certifies
the contract): the SQLite lock file is a real ``flock``, locations are
validated per dialect, and a PostgreSQL gateway whose lock session the
server ended takes the lock again — or, when another store took it
meanwhile, refuses every call."""

from __future__ import annotations

import fcntl
import os
import time

import pytest

pytest.importorskip("sqlalchemy", reason="the SQL adapter needs the 'sql' extra")

from cortex_spec.clock import EPOCH, ManualClock  # noqa: E402
from cortex_spec.errors import InvalidArgument, StoreError, StoreLocked  # noqa: E402
from cortex_spec.testing import ZERO  # noqa: E402
from cortex_spec.gateway import make_message  # noqa: E402


def _opener(harness):
    location = harness.new_location()
    return harness.open(location, ManualClock()), location


def test_sqlite_location_is_a_directory_with_a_flocked_lock_file(sqlite_harness):
    store, loc = _opener(sqlite_harness)
    where = sqlite_harness.new_gateway_location()
    try:
        gw = store.open_gateway(where)
        assert gw.accept(ZERO, make_message("tg", "m1"), EPOCH)
        assert sorted(n for n in os.listdir(where) if not n.endswith(("-wal", "-shm"))) == [
            "gateway.db", "gateway.lock"]
        fd = os.open(os.path.join(where, "gateway.lock"), os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            gw.close()
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once closed
            with pytest.raises(StoreLocked):  # ... and now held by this descriptor
                store.open_gateway(where)
        finally:
            os.close(fd)
        again = store.open_gateway(where)
        assert [i.message_id for i in again.pending(ZERO)] == ["m1"]
        again.close()
    finally:
        store.close()
        sqlite_harness.discard_gateway_location(where)
        sqlite_harness.discard(loc)


def _seqs(location):
    """The stored sequence numbers of a SQLite gateway's items."""
    import sqlite3

    db = sqlite3.connect(os.path.join(location, "gateway.db"))
    try:
        return [row[0] for row in db.execute("SELECT seq FROM gw_items ORDER BY seq")]
    finally:
        db.close()


def test_sqlite_gateway_locations_are_reused_empty_and_only_when_free(sqlite_harness):
    """The harness reuses a discarded gateway directory (its tables exist)
    only emptied, with its sequence back at the start, and only when nobody
    holds its lock and it holds nothing else; any other one is removed."""
    store, loc = _opener(sqlite_harness)
    try:
        first = sqlite_harness.new_gateway_location()
        gw = store.open_gateway(first)
        assert gw.accept(ZERO, make_message("tg", "m1"), EPOCH)
        gw.set_offset(ZERO, "tg", 7)
        gw.set_conversation_agent(ZERO, "tg", "c1", "agent-1")
        seq_before = _seqs(first)
        gw.close()
        sqlite_harness.discard_gateway_location(first)
        assert sqlite_harness.new_gateway_location() == first  # reused, not made anew
        again = store.open_gateway(first)
        try:
            assert again.pending(ZERO) == [] and again.get_item(ZERO, "tg", "m1") is None
            assert again.offset(ZERO, "tg") == 0 and again.conversation(ZERO, "tg", "c1") == ("", "")
            assert again.accept(ZERO, make_message("tg", "m2"), EPOCH)
            assert _seqs(first) == seq_before  # the sequence starts over
        finally:
            again.close()
        fd = os.open(os.path.join(first, "gateway.lock"), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as another process's open would
            sqlite_harness.discard_gateway_location(first)
            assert not os.path.exists(first)  # held: removed, never handed out again
        finally:
            os.close(fd)
        second = sqlite_harness.new_gateway_location()
        assert second != first
        store.open_gateway(second).close()
        with open(os.path.join(second, "stray"), "w"):
            pass
        sqlite_harness.discard_gateway_location(second)  # a file it does not know
        assert not os.path.exists(second) and sqlite_harness.new_gateway_location() not in (first, second)
    finally:
        store.close()
        sqlite_harness.discard(loc)


@pytest.mark.parametrize("bad", [b"/tmp/x", "", "a\x00b", 7])
def test_sqlite_location_must_be_a_path(sqlite_harness, bad):
    store, loc = _opener(sqlite_harness)
    try:
        with pytest.raises(InvalidArgument):
            store.open_gateway(bad)
    finally:
        store.close()
        sqlite_harness.discard(loc)


@pytest.mark.parametrize("bad", ["Upper", "has-dash", "1starts_with_digit", "x" * 64, "", 'q"uote'])
def test_postgres_namespace_must_be_an_identifier(postgres_harness, bad):
    store, loc = _opener(postgres_harness)
    try:
        with pytest.raises(InvalidArgument):
            store.open_gateway(bad)
    finally:
        store.close()
        postgres_harness.discard(loc)


def _terminate_lock_session(harness, gw):
    pid = gw._lock.dbapi.info.backend_pid
    with harness._admin.connect() as conn:
        conn.exec_driver_sql("SELECT pg_terminate_backend(%(p)s)", {"p": pid})
    deadline = time.monotonic() + 10
    while not gw._lock.lost():
        assert time.monotonic() < deadline, "the terminated lock session still looks alive"
        time.sleep(0.01)


def test_postgres_gateway_takes_a_lost_lock_again(postgres_harness):
    store, loc = _opener(postgres_harness)
    where = postgres_harness.new_gateway_location()
    try:
        gw = store.open_gateway(where)
        assert gw.accept(ZERO, make_message("tg", "m1"), EPOCH)
        _terminate_lock_session(postgres_harness, gw)
        # the next call notices, takes the lock again, and works
        assert [i.message_id for i in gw.pending(ZERO)] == ["m1"]
        assert not gw._lock.lost()
        with pytest.raises(StoreLocked):  # it really holds the lock again
            store.open_gateway(where)
        gw.close()
    finally:
        store.close()
        postgres_harness.discard_gateway_location(where)
        postgres_harness.discard(loc)


def test_postgres_gateway_that_lost_its_lock_to_another_store_refuses_calls(postgres_harness):
    store, loc = _opener(postgres_harness)
    where = postgres_harness.new_gateway_location()
    try:
        gw = store.open_gateway(where)
        _terminate_lock_session(postgres_harness, gw)
        postgres_harness.expire_gateway_lease(where)
        other = store.open_gateway(where)  # the lock was free: another store took it
        try:
            for call in (lambda: gw.pending(ZERO), lambda: gw.accept(ZERO, make_message("tg", "x"), EPOCH)):
                with pytest.raises(StoreError):
                    call()
            assert other.accept(ZERO, make_message("tg", "y"), EPOCH) is True
            assert other.get_item(ZERO, "tg", "x") is None  # the refused accept wrote nothing
        finally:
            other.close()
        gw.close()
    finally:
        store.close()
        postgres_harness.discard_gateway_location(where)
        postgres_harness.discard(loc)


def _advisory_locks_of(harness, pid):
    with harness._admin.connect() as conn:
        return conn.exec_driver_sql(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %(p)s", {"p": pid}).scalar_one()


def test_postgres_lock_sessions_are_kept_only_holding_nothing(postgres_harness):
    """A closed gateway's lock session, unlocked, serves the engine's next
    open (no new server session per open); one the server ended meanwhile
    is replaced by a new one; a crashed gateway's session is closed, never
    kept; and a namespace keeps one translated engine (its prepared
    statements) from open to open."""
    from cortex_spec.adapters.sql.gateway import _idle_sessions

    store, loc = _opener(postgres_harness)
    where = postgres_harness.new_gateway_location()
    try:
        gw = store.open_gateway(where)
        session = gw._lock.dbapi
        engine = gw.engine
        assert _advisory_locks_of(postgres_harness, session.info.backend_pid) == 1
        gw.close()
        assert session in _idle_sessions(engine) and not session.closed
        assert _advisory_locks_of(postgres_harness, session.info.backend_pid) == 0  # kept holding nothing
        again = store.open_gateway(where)
        assert again._lock.dbapi is session and again.engine is engine  # the same session and engine
        assert session not in _idle_sessions(engine)
        with pytest.raises(StoreLocked):
            store.open_gateway(where)  # held again, by the kept session
        again.close()
        with postgres_harness._admin.connect() as conn:  # the server ends the idle session
            conn.exec_driver_sql("SELECT pg_terminate_backend(%(p)s)", {"p": session.info.backend_pid})
        time.sleep(0.05)
        third = store.open_gateway(where)  # a new session takes the lock
        assert third._lock.dbapi is not session and not third._lock.lost()
        assert third.accept(ZERO, make_message("tg", "m1"), EPOCH) is True
        crashed = third._lock.dbapi
        postgres_harness.crash_gateway(third)
        assert crashed.closed and crashed not in _idle_sessions(engine)
    finally:
        store.close()
        postgres_harness.discard_gateway_location(where)
        postgres_harness.discard(loc)


def test_postgres_gateway_opens_on_pool_connections_given_back_inside_a_transaction(postgres_harness):
    """The pool does not reset a connection given back to it: another user of
    the engine may leave one inside a transaction.  The lock session taken
    from the pool ends it (as the store's call loop does) instead of failing
    the open with StoreError ("can't change 'autocommit' now")."""
    from psycopg.pq import TransactionStatus

    from cortex_spec.adapters.sql.gateway import _idle_sessions

    store, loc = _opener(postgres_harness)
    where = postgres_harness.new_gateway_location()
    try:
        engine = store.gateway_engine if store.gateway_engine is not None else store.engine
        for session in list(_idle_sessions(engine)):  # no kept lock session: one from the pool
            _idle_sessions(engine).remove(session)
            session.close()
        given_back = [engine.raw_connection() for _ in range(3)]
        left_open = [fairy.dbapi_connection for fairy in given_back]
        for fairy in given_back:
            fairy.dbapi_connection.pgconn.exec_(b"BEGIN")
            fairy.close()  # back to the pool inside its transaction
        try:
            gw = store.open_gateway(where)
            try:
                assert gw.accept(ZERO, make_message("tg", "m1"), EPOCH) is True
                with pytest.raises(StoreLocked):
                    store.open_gateway(where)
            finally:
                gw.close()
        finally:
            for dbapi in left_open:  # the ones still in the pool: end their transactions
                if not dbapi.closed and dbapi.pgconn.transaction_status != TransactionStatus.IDLE:
                    dbapi.pgconn.exec_(b"ROLLBACK")
    finally:
        store.close()
        postgres_harness.discard_gateway_location(where)
        postgres_harness.discard(loc)
