"""The MongoDB backend's own tests: why the faithful wrapper matters, and how
the mongo harnesses refuse to start.

* Raw mongomock is not atomic: threads claiming the same documents with
  ``find_one_and_update`` double-claim.
* Through the faithful wrapper each call is atomic: exactly one winner per
  document — and a ``MongoStore`` claim race has exactly one winner per run.
* The wrapper holds no lock across two calls: a store whose claim reads the
  slot and then writes it (``mongo_mutants.ReadThenWriteStore``) still
  double-claims through the wrapper, and certifying it on faithful mongomock
  fails the claim-race clauses.
* ``mongo-url`` without ``CORTEX_SPEC_MONGO_URL``, with an unreachable URL,
  and ``mongo-docker`` without a Docker engine each refuse in one line, and a
  certification run on them ends NOT CERTIFIED with exit status 3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections import OrderedDict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

mongomock = pytest.importorskip("mongomock", reason="the mongo extra is not installed")

from bson import ObjectId, Timestamp  # noqa: E402
from bson.son import SON  # noqa: E402

from cortex_spec import ManualClock, RunState  # noqa: E402
from cortex_spec.adapters.mongo import MongoStore  # noqa: E402
from cortex_spec.adapters.mongo.faithful import FaithfulClient, MaterializedCursor  # noqa: E402
from cortex_spec.adapters.mongo.harness import (  # noqa: E402
    URL_ENV,
    MongoDockerHarness,
    MongoHarness,
    MongomockHarness,
    MongoUrlHarness,
    redact_url,
)
from cortex_spec.errors import (  # noqa: E402
    BackendUnavailable,
    NotSuspended,
    SuspensionExpired,
)
from cortex_spec.testing import ctx, race  # noqa: E402
from cortex_spec.runs import make_run  # noqa: E402
from cortex_spec.suspensions import make_suspension  # noqa: E402
from mongo_mutants import ReadThenWriteStore  # noqa: E402

THREADS = 8
#: bounded repeats for "this race shows up at least once"
ROUNDS = 6


@pytest.fixture
def busy_scheduler():
    """Switch threads often, so that racing threads really interleave."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def claim_race(collection, n: int) -> int:
    """THREADS threads each try to claim documents 0..n-1; total winners."""
    collection.delete_many({})
    collection.insert_many([{"_id": i, "state": "paused"} for i in range(n)])
    wins = [0] * THREADS
    barrier = threading.Barrier(THREADS)

    def worker(k: int) -> None:
        barrier.wait()
        for i in range(n):
            got = collection.find_one_and_update(
                {"_id": i, "state": "paused"}, {"$set": {"state": "running"}}
            )
            if got is not None:
                wins[k] += 1

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(wins)


# -- the wrapper ------------------------------------------------------------------------


_IDS = st.sampled_from(["a", "b", "c", "missing"])
_FILTERS = st.fixed_dictionaries({"_id": _IDS | st.sampled_from([1, {"$in": ["a", "b"]}])}, optional={
    "state": st.sampled_from(["paused", "running", {"$in": ["paused", "done"]}]),
    "scope.ws": st.sampled_from(["w1", "w2"]),
    "n": st.sampled_from([{"$gt": 1}, 2, {"$exists": False}]),
})
_OPS = st.lists(st.tuples(st.sampled_from(["find", "find_one", "count", "update_one", "claim", "delete_one",
                                           "insert_one"]), _FILTERS), max_size=12)


@settings(max_examples=150, deadline=None)
@given(docs=st.lists(st.fixed_dictionaries({
    "state": st.sampled_from(["paused", "running", "done"]), "scope": st.fixed_dictionaries(
        {"ws": st.sampled_from(["w1", "w2"])}), "n": st.integers(0, 3)}), max_size=4), ops=_OPS)
def test_reads_by_id_find_what_mongomock_finds(docs, ops):
    """A filter with a string ``_id`` is tested on the document under that key
    alone (``faithful._read_by_key``): every read, count, update, claim and
    delete finds and changes what raw mongomock's scan of the whole
    collection does, with other documents, absent keys, non-string ``_id``
    values and operators beside it."""
    faithful = FaithfulClient()["db"]["c"]
    raw = mongomock.MongoClient()["db"]["c"]
    for i, doc in enumerate(docs):
        faithful.insert_one({"_id": "abc"[i] if i < 3 else i, **doc})
        raw.insert_one({"_id": "abc"[i] if i < 3 else i, **doc})

    def apply(collection, op, flt):
        if op == "find":
            return list(collection.find(flt, sort=[("_id", 1)]))
        if op == "find_one":
            return collection.find_one(flt)
        if op == "count":
            return collection.count_documents(flt)
        if op == "update_one":
            return collection.update_one(flt, {"$inc": {"n": 1}}).modified_count
        if op == "claim":
            return collection.find_one_and_update(flt, {"$set": {"state": "running"}}, return_document=True)
        if op == "delete_one":
            return collection.delete_one(flt).deleted_count
        try:  # insert_one of the filter's _id: a duplicate key or a new document
            return collection.insert_one({"_id": flt["_id"], "state": "paused"}).inserted_id
        except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
            return type(exc).__name__

    for op, flt in ops:
        if op == "insert_one" and not isinstance(flt["_id"], (str, int)):
            continue
        assert apply(faithful, op, flt) == apply(raw, op, flt), (op, flt)
    assert list(faithful.find({}, sort=[("_id", 1)])) == list(raw.find({}, sort=[("_id", 1)]))


def _installed(module, name):
    """The function the wrapper put in mongomock at ``module.name``, and
    mongomock's own (recursing into itself, as before the install)."""
    FaithfulClient()  # installs it
    made = getattr(module, name)

    def original(*args):
        setattr(module, name, made.original)
        try:
            return made.original(*args)
        finally:
            setattr(module, name, made)

    return made, original


def _datetime_walks():
    from mongomock import helpers

    return _installed(helpers, "patch_datetime_awareness_in_document")


def _same(a, b) -> bool:
    """Equal, and of the same type at every level (a dict is not an
    OrderedDict, a list not a tuple, an aware datetime not a naive one)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, datetime):
        return a == b and a.tzinfo == b.tzinfo
    return bool(a == b)


_ZONES = st.none() | st.builds(timezone, st.timedeltas(min_value=timedelta(hours=-23),
                                                       max_value=timedelta(hours=23)))
_LEAVES = (st.text(max_size=5) | st.integers() | st.booleans() | st.none()
           | st.floats(allow_nan=False) | st.binary(max_size=3)
           | st.datetimes(timezones=_ZONES)
           | st.builds(Timestamp, st.integers(1, 2**31), st.integers(0, 2**31))
           | st.builds(ObjectId))


def _containers(children):
    keyed = st.dictionaries(st.text(max_size=3), children, max_size=3)
    return (keyed | keyed.map(OrderedDict) | keyed.map(SON) | st.lists(children, max_size=3)
            | st.lists(children, max_size=3).map(tuple))


@settings(max_examples=300, deadline=None)
@given(value=st.recursive(_LEAVES, _containers, max_leaves=12))
def test_the_datetime_walk_gives_what_mongomocks_own_gives(value):
    """mongomock turns every filter and written document's datetimes into
    naive UTC ones of millisecond precision; the walk the wrapper installs
    in its place (``faithful._datetime_walk``) gives an equal value
    of the same types at every level, for plain and ordered dicts, SON,
    lists, tuples, naive and aware datetimes, timestamps and scalars."""
    walk, original = _datetime_walks()
    got, want = walk(value), original(value)
    assert _same(got, want), (value, got, want)


def _copy_walks():
    from mongomock import collection

    return _installed(collection, "_copy_field")


def _shares_a_container(a, b) -> bool:
    """Whether the copy ``a`` of ``b`` shares a dict or list with it (so that
    changing the copy would change the original)."""
    if isinstance(b, (dict, list)) and a is b:
        return True
    if isinstance(b, dict) and isinstance(a, dict):
        return any(_shares_a_container(a[k], b[k]) for k in b if k in a)
    if isinstance(b, list) and isinstance(a, list):
        return any(_shares_a_container(x, y) for x, y in zip(a, b))
    return False


@settings(max_examples=300, deadline=None)
@given(value=st.recursive(_LEAVES, _containers, max_leaves=12), ordered=st.booleans())
def test_the_copy_walk_gives_what_mongomocks_own_gives(value, ordered):
    """mongomock copies every document it returns; the copy the wrapper
    installs (``faithful._copy_walk``) gives an equal value of the
    same types at every level, into the container asked for, and shares no
    dict or list with the stored document."""
    walk, original = _copy_walks()
    container = OrderedDict if ordered else dict
    got, want = walk(value, container), original(value, container)
    assert _same(got, want), (value, got, want)
    assert not _shares_a_container(got, value), (value, got)


_PATHS = st.sampled_from(["a", "a.b"]) | st.sampled_from(["b", "a.c", "a.b.c", "_id", "a.", "a.0", "$comment"])
_WANTED = (st.text(alphabet="xy", max_size=2) | st.integers(-2, 2) | st.sampled_from([None, True, False, 1.0, 1.5])
           | st.builds(lambda op, bound: {op: bound}, st.sampled_from(["$gt", "$gte", "$lt", "$lte"]),
                       st.integers(-2, 2) | st.sampled_from([1.5, "x", None, True]))
           | st.sampled_from([{"$ne": "x"}, {"$ne": None}, {"$ne": 1}, {"$nin": ["x"]}, {"$exists": False},
                              {"$exists": 0}, {"$exists": True}, {"$in": ["x", 1]}, {"$in": [None]}, {"$in": "x"},
                              {"$eq": 1}, {"$eq": None}, {"$gte": 0, "$lt": 2}, {"$ne": None, "$lte": 1},
                              {"$ne": None, "$lte": datetime(2026, 1, 1)}, {"$lt": datetime(2027, 1, 1)},
                              {"$ne": 1, "b": 2}, {"$all": ["x"]}, {"$all": ["x"], "b": 1}, {"$regex": "x"}, {"$not": {"$eq": 1}},
                              {}, {"$bogus": 1}, {"b": 1}, {"b": "x"}]))
_FOUND = (st.text(alphabet="xy", max_size=2) | st.integers(-2, 2)
          | st.sampled_from([None, True, False, 0.5, 1.0, datetime(2026, 1, 1), b"x"]))


def _found_docs(children):
    keyed = st.dictionaries(st.sampled_from(["a", "b", "c", "_id", "0"]), children, max_size=3)
    return keyed | keyed.map(OrderedDict) | st.lists(children, max_size=2) | st.lists(children, max_size=2).map(tuple)


@settings(max_examples=1000, deadline=None)
@given(flt=st.dictionaries(_PATHS, _WANTED, max_size=3),
       doc=st.fixed_dictionaries({"a": _FOUND | st.fixed_dictionaries({"b": _FOUND}, optional={"c": _FOUND})
                                        | st.recursive(_FOUND, _found_docs, max_leaves=6)},
                                 optional={"b": _FOUND, "_id": _FOUND}))
def test_the_filter_shortcut_decides_what_mongomocks_matcher_decides(flt, doc):
    """The shortcut the wrapper installs for mongomock's matcher
    (``faithful._filter_shortcut``) gives the matcher's answer, or
    raises its error, on filters of plain values, ranges, other operators
    and malformed keys, against documents with nested dicts, ordered dicts,
    lists, tuples, missing fields and values of every type on the path."""
    from mongomock import collection as module

    from cortex_spec.adapters.mongo import faithful

    FaithfulClient()  # installs it
    shortcut = faithful._FILTER_SHORTCUT
    assert module.filter_applies is shortcut

    def outcome(fn):
        try:
            return ("value", fn(flt, doc))
        except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
            return ("error", type(exc).__name__, str(exc))

    assert outcome(shortcut) == outcome(shortcut.original), (flt, doc)


def test_faithful_clients_use_the_installed_walk():
    """Made once per process: a filter's and a written document's datetime
    reach the storage as mongomock's own walk leaves them."""
    from mongomock import collection as module
    from mongomock import helpers

    from cortex_spec.adapters.mongo import faithful

    FaithfulClient()
    installed = (helpers.patch_datetime_awareness_in_document, module._copy_field, module.filter_applies)
    assert installed == (faithful._DATETIME_WALK, faithful._COPY_WALK, faithful._FILTER_SHORTCUT)
    assert None not in installed and all(hasattr(f, "original") for f in installed)
    collection = FaithfulClient()["db"]["c"]
    aware = datetime(2026, 12, 5, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    collection.insert_one({"_id": "a", "at": aware, "list": [aware]})
    stored = collection.find_one({"at": aware})
    expected = datetime(2026, 12, 5, 8, 0, 0, 123000)
    assert stored == {"_id": "a", "at": expected, "list": [expected]}, stored
    stored["list"].append(1)  # the caller's copy: the storage keeps its own
    assert collection.find_one({"_id": "a"})["list"] == [expected]


def test_raw_mongomock_double_claims(busy_scheduler):
    raw = mongomock.MongoClient()["db"]["claims"]
    n = 200
    winners = [claim_race(raw, n) for _ in range(1)]
    for _ in range(ROUNDS - 1):
        if winners[-1] > n:
            break
        winners.append(claim_race(raw, n))
    assert max(winners) > n, (
        f"raw mongomock never double-claimed in {len(winners)} rounds: {winners}"
    )


def test_faithful_wrapper_gives_one_winner_per_document(busy_scheduler):
    coll = FaithfulClient()["db"]["claims"]
    for _ in range(3):
        assert claim_race(coll, 200) == 200


def test_wrapper_materialises_cursors_and_refuses_sessions():
    coll = FaithfulClient()["db"]["c"]
    coll.insert_many([{"_id": i} for i in range(5)])
    cur = coll.find({}, sort=[("_id", -1)], skip=1, limit=2)
    assert isinstance(cur, MaterializedCursor)
    coll.delete_many({})  # the rows were read inside the lock, before this
    assert [d["_id"] for d in cur] == [3, 2]
    with pytest.raises(NotImplementedError):
        coll.find({}).sort("_id")
    with pytest.raises(NotImplementedError):
        coll.find_one({}, session=object())
    client = FaithfulClient()
    with client.start_session() as s:  # a session outside a transaction: refused
        with pytest.raises(NotImplementedError):
            client["db"]["c"].find_one({}, session=s)


def test_emulated_snapshot_session_reads_one_point_in_time_and_only_reads():
    client = FaithfulClient()
    coll = client["db"]["s"]
    coll.insert_many([{"_id": 1, "n": 0}, {"_id": 2, "n": 0}])
    writer_done = threading.Event()

    def writer() -> None:
        coll.update_many({}, {"$inc": {"n": 1}})  # waits for the session's end
        writer_done.set()

    with client.start_session(snapshot=True) as s:
        first = coll.find_one({"_id": 1}, session=s)
        t = threading.Thread(target=writer)
        t.start()
        writer_done.wait(0.2)
        second = coll.find_one({"_id": 2}, session=s)
        assert (first["n"], second["n"]) == (0, 0) and not writer_done.is_set()
        with pytest.raises(NotImplementedError):
            coll.update_one({"_id": 1}, {"$set": {"n": 5}}, session=s)  # a snapshot only reads
        with pytest.raises(NotImplementedError):
            s.start_transaction()
    t.join(5)
    assert writer_done.is_set() and coll.find_one({"_id": 1})["n"] == 1


def test_emulated_transaction_is_atomic_and_all_or_nothing():
    client = FaithfulClient()
    coll = client["db"]["t"]
    coll.insert_one({"_id": 1, "n": 0})
    seen: list = []

    def reader():
        seen.append(coll.find_one({"_id": 1})["n"])

    def body(s):
        coll.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=s)
        t = threading.Thread(target=reader)
        t.start()
        t.join(0.05)
        assert t.is_alive(), "another client ran inside the transaction"
        coll.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=s)
        return t

    with client.start_session() as s:
        t = s.with_transaction(body)
    t.join(5)
    assert seen == [2]  # never the half-done 1

    def failing(s):
        coll.update_one({"_id": 1}, {"$set": {"n": 99}}, session=s)
        coll.insert_one({"_id": 2}, session=s)
        raise RuntimeError("abort")

    with client.start_session() as s:
        with pytest.raises(RuntimeError):
            s.with_transaction(failing)
    assert list(coll.find({})) == [{"_id": 1, "n": 2}]

    def forgetful(s):
        coll.find_one({"_id": 1})  # no session=: would run outside the transaction

    with client.start_session() as s:
        with pytest.raises(NotImplementedError):
            s.with_transaction(forgetful)
    coll.insert_one({"_id": 3})  # the lock was released


def test_reopen_shares_storage_and_lock():
    client = FaithfulClient()
    client["db"]["c"].insert_one({"_id": 1})
    other = client.reopen()
    assert other["db"]["c"].find_one({"_id": 1}) == {"_id": 1}
    before = client.gate_calls
    other["db"]["c"].count_documents({})
    assert client.gate_calls == before + 1


# -- the store through the wrapper --------------------------------------------------------


def paused_runs(store: MongoStore, c, n: int) -> list[str]:
    run_ids = []
    for _ in range(n):
        run = store.create_run(c, make_run(state=RunState.PAUSED))
        store.create_suspension(c, make_suspension(run.id))
        run_ids.append(run.id)
    return run_ids


def store_claim_race(store: MongoStore, c, run_ids: list[str]) -> dict[str, int]:
    """THREADS claimers race for every run; winners per run."""
    wins = {rid: 0 for rid in run_ids}
    lock = threading.Lock()

    def claimer() -> None:
        for rid in run_ids:
            try:
                store.claim_suspension(c, rid)
            except (NotSuspended, SuspensionExpired):
                continue
            with lock:
                wins[rid] += 1

    outcomes = race([claimer] * THREADS)
    errors = [o.error for o in outcomes if not o.ok]
    assert not errors, errors
    return wins


def test_mongo_store_claim_race_has_one_winner_per_run(busy_scheduler):
    store = MongoStore(FaithfulClient()["cortex"], ManualClock())
    c = ctx("ws=w1")
    for _ in range(2):
        run_ids = paused_runs(store, c, 25)
        wins = store_claim_race(store, c, run_ids)
        assert set(wins.values()) == {1}, wins
        assert all(store.get_run(c, rid).state == RunState.RUNNING for rid in run_ids)


def test_resume_and_sweep_at_the_deadline_never_both_win(busy_scheduler):
    clock = ManualClock()
    store = MongoStore(FaithfulClient()["cortex"], clock)
    c = ctx("ws=w1")
    deadline = clock.now() + timedelta(seconds=10)
    for offset_ms in (-1, 0, 1):
        clock.set(deadline + timedelta(milliseconds=offset_ms))
        run = store.create_run(c, make_run(state=RunState.PAUSED))
        store.create_suspension(c, make_suspension(run.id, expires_at=deadline))
        calls = [lambda: store.claim_suspension(c, run.id)] * 4 + [
            lambda: store.claim_expired_suspension(c, run.id, clock.now())
        ] * 4
        outcomes = race(calls)
        resume_wins = sum(o.ok for o in outcomes[:4])
        sweep_wins = sum(o.ok for o in outcomes[4:])
        # SUSP-PART-1/2/3: exactly one side is eligible; one winner in all
        assert resume_wins + sweep_wins == 1, (offset_ms, outcomes)
        assert (sweep_wins == 1) == (offset_ms >= 0)


def test_read_then_write_adapter_still_races_through_the_wrapper(busy_scheduler):
    """The mutant of mongo_mutants.py, raced directly: some run gets two winners."""
    store = ReadThenWriteStore(FaithfulClient()["cortex"], ManualClock())
    c = ctx("ws=w1")
    rounds = []
    for _ in range(ROUNDS):
        wins = store_claim_race(store, c, paused_runs(store, c, 25))
        rounds.append(max(wins.values()))
        if rounds[-1] > 1:
            break
    assert max(rounds) > 1, (
        "the faithful wrapper hid a read-then-write race: it must not hold its "
        f"lock across two operations (most winners per run, by round: {rounds})"
    )


# -- harnesses: URL handling and clear refusals --------------------------------------------


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text, repr(text)
    return text


def test_redact_url():
    assert redact_url("mongodb://u:secret@h:1/db") == "mongodb://u:***@h:1/db"
    assert redact_url("mongodb+srv://u:p@x.example/") == "mongodb+srv://u:***@x.example/"
    assert redact_url("mongodb://h:27017/?replicaSet=rs0") == "mongodb://h:27017/?replicaSet=rs0"


def test_url_harness_without_url_refuses_in_one_line(monkeypatch):
    monkeypatch.delenv(URL_ENV, raising=False)
    with pytest.raises(BackendUnavailable) as info:
        MongoUrlHarness().start()
    assert URL_ENV in one_line(info.value)


def test_url_harness_with_unreachable_server_refuses_in_one_line():
    url = "mongodb://u:hunter2@127.0.0.1:1/?serverSelectionTimeoutMS=300"
    harness = MongoUrlHarness(url)
    with pytest.raises(BackendUnavailable) as info:
        harness.start()
    text = one_line(info.value)
    assert "cannot reach MongoDB" in text and "hunter2" not in text
    harness.stop()  # safe after a failed start


def test_url_harness_with_malformed_url_refuses():
    with pytest.raises(BackendUnavailable) as info:
        MongoUrlHarness("http://not-mongo").start()
    assert "bad MongoDB URL" in one_line(info.value)


def test_docker_harness_without_engine_refuses_in_one_line(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/cortex-spec-docker.sock")
    harness = MongoDockerHarness()
    with pytest.raises(BackendUnavailable) as info:
        harness.start()
    text = one_line(info.value)
    assert "Docker" in text or "docker" in text
    harness.stop()


def test_mongo_harness_picks_the_url_when_set(monkeypatch):
    monkeypatch.delenv(URL_ENV, raising=False)
    assert isinstance(MongoHarness().impl, MongomockHarness)
    monkeypatch.setenv(URL_ENV, "mongodb://127.0.0.1:1/")
    harness = MongoHarness()
    assert isinstance(harness.impl, MongoUrlHarness) and harness.name == "mongo"


def test_mongomock_harness_describes_the_server_and_reopens():
    harness = MongomockHarness()
    harness.start()
    info = harness.describe()
    assert info["server"] == f"mongomock {mongomock.__version__} (faithful wrapper)"
    location = harness.new_location()
    clock = ManualClock()
    store = harness.open(location, clock)
    c = ctx("ws=w1")
    run = store.create_run(c, make_run())
    store.close()
    store.close()  # idempotent
    again = harness.open(location, clock)
    assert again.get_run(c, run.id) == run
    again.close()
    harness.discard(location)


CLAUSE_TEST = textwrap.dedent(
    """
    import pytest

    @pytest.mark.clause("RUN-GET-1")
    def test_needs_a_store(cortex_store):
        assert cortex_store is not None
    """
)


@pytest.mark.parametrize(
    "store,env",
    [
        ("mongo-url", {}),
        ("mongo-url", {URL_ENV: "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=500"}),
        ("mongo", {URL_ENV: "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=500"}),
        ("mongo-docker", {"DOCKER_HOST": "unix:///nonexistent/cortex-spec-docker.sock"}),
    ],
)
def test_certification_on_an_unavailable_server_is_not_certified(tmp_path, store, env):
    (tmp_path / "test_clause.py").write_text(CLAUSE_TEST)
    report = tmp_path / "report.json"
    environ = {k: v for k, v in os.environ.items() if k != URL_ENV}
    environ.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_clause.py",
         "--cortex-store", store, "--cortex-report", str(report)],
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 3, output
    lines = [ln for ln in output.splitlines() if "NOT CERTIFIED" in ln and "could not start" in ln]
    assert lines, output
    data = json.loads(report.read_text())
    assert data["certified"] is False
    assert "NOT CERTIFIED" in data["verdict"]


def test_docker_harness_removes_its_container_when_the_server_never_answers(monkeypatch):
    docker = pytest.importorskip("docker", reason="the docker extra is not installed")
    removed = []

    class FakeContainer:
        ports = {"27017/tcp": [{"HostIp": "127.0.0.1", "HostPort": "1"}]}

        def reload(self):
            pass

        def remove(self, force=False):
            removed.append(force)

    class FakeEngine:
        class containers:  # noqa: N801 - mirrors docker's attribute
            @staticmethod
            def run(image, **kwargs):
                assert kwargs["command"][:2] == ["--replSet", "rs0"]
                assert kwargs["ports"] == {"27017/tcp": ("127.0.0.1", None)}
                return FakeContainer()

        def ping(self):
            return True

    monkeypatch.setattr(docker, "from_env", lambda: FakeEngine())
    harness = MongoDockerHarness()
    harness.start_timeout_s = 0.5
    with pytest.raises(BackendUnavailable) as info:
        harness.start()
    one_line(info.value)
    assert removed == [True] and harness.container is None
    harness.stop()  # nothing left to remove
    assert removed == [True]


#: a test of the certified suite that runs this long has hung: pytest's
#: faulthandler then prints every thread's stack (shown if the run times out)
_HUNG_TEST_S = 240


def _certify_mutant(tmp_path: Path, suite: str, harness: str) -> dict:
    """Run ``suite`` against ``mongo_mutants:<harness>`` in a fresh process;
    the report, after checking that the run failed (exit status 1)."""
    report = tmp_path / "report.json"
    # only the tests folder on the path: the source tree must not shadow the
    # installed package
    environ = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
               f"faulthandler_timeout={_HUNG_TEST_S}", "--pyargs", suite,
               "--cortex-store", f"mongo_mutants:{harness}", "--cortex-report", str(report)]
    try:
        proc = subprocess.run(command, cwd=tmp_path, env=environ, capture_output=True, text=True,
                              timeout=2 * _HUNG_TEST_S + 120)
    except subprocess.TimeoutExpired as exc:
        def tail(out: bytes | str | None, n: int) -> str:
            text = out.decode(errors="replace") if isinstance(out, bytes) else (out or "")
            return text[-n:]
        raise AssertionError(f"{suite} against {harness} did not finish in {exc.timeout} s; "
                             f"the stacks of a hung test follow (stderr):\n{tail(exc.stderr, 20000)}\n"
                             f"stdout:\n{tail(exc.output, 3000)}") from None
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads(report.read_text())


def test_certification_catches_a_read_then_write_adapter_on_faithful_mongomock(tmp_path):
    """The clause suite, through the wrapper, fails the mutant's claim races."""
    data = _certify_mutant(tmp_path, "cortex_spec.conformance.test_suspensions", "ReadThenWriteHarness")
    outcomes = {c["id"]: c["outcome"] for c in data["clauses"]}
    assert data["certified"] is False
    assert outcomes["SUSP-CLAIM-10"] == "failed"  # two resume claims both won
    # the four-writers race catches it too, by whichever check the thread
    # schedule breaks first: two winners (FOUR-1), or a loser that saw the
    # second winner's write (FOUR-5; the race's later clauses are then not
    # established); which one varies from run to run
    four = {c: outcomes[c] for c in ("FOUR-1", "FOUR-5")}
    assert "failed" in four.values(), four
    assert outcomes["SUSP-CREATE-1"] == "passed"  # what the bug does not touch


def test_certification_catches_an_a2a_admission_without_a_transaction(tmp_path):
    """Conditional charge, then a separate insert: the budget holds, but an
    identical retry racing the first call is charged twice (A2A-HOP-3)."""
    data = _certify_mutant(tmp_path, "cortex_spec.conformance.test_a2a", "NoTransactionAdmissionHarness")
    outcomes = {c["id"]: c["outcome"] for c in data["clauses"]}
    assert data["certified"] is False
    assert outcomes["A2A-RACE-8"] == "failed"  # one envelope, two hop charges
    assert outcomes["A2A-DLV-9"] == "passed"  # what the bug does not touch
