"""MongoStore specifics: the stored forms and the run slot, against the reference.

The clause suite and the machines certify the store; these tests pin what is
particular to the MongoDB design: JSON objects whose keys MongoDB could not
hold, scope values full of query and regex metacharacters, a suspension
created before its run (one document holds both), codec options of the
caller's client, unreadable stored data, and driver errors never leaking.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

pytest.importorskip("mongomock", reason="the mongo extra is not installed")

from cortex_spec import Context, ManualClock, RunState, Scope  # noqa: E402
from cortex_spec.adapters.mongo import MongoStore  # noqa: E402
from cortex_spec.adapters.mongo.faithful import FaithfulClient  # noqa: E402
from cortex_spec.errors import (  # noqa: E402
    AlreadyExists,
    InvalidArgument,
    NoScope,
    NotSuspended,
    RunNotFound,
    StoreClosed,
    StoreError,
    SuspensionExpired,
)
from cortex_spec.reference import MemoryStore  # noqa: E402
from cortex_spec.testing import assert_strict_equal, ctx, state_view  # noqa: E402
from cortex_spec.checkpoints import approve, make_checkpoint  # noqa: E402
from cortex_spec.runs import make_run  # noqa: E402
from cortex_spec.suspensions import make_suspension  # noqa: E402


def outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the class is the observation
        return type(exc)


@pytest.fixture
def pair():
    """A MongoStore and a reference store on one manual clock."""
    clock = ManualClock()
    client = FaithfulClient()
    store = MongoStore(client["cortex"], clock)
    yield store, MemoryStore(clock), clock
    store.close()
    client.close()


def both(pair, method, *args):
    mongo, ref, _ = pair
    got, want = outcome(getattr(mongo, method), *args), outcome(getattr(ref, method), *args)
    if isinstance(want, type):
        assert got is want, f"{method}: mongo gave {got!r}, the reference {want.__name__}"
    else:
        assert_strict_equal(got, want, method)
    return got


AWKWARD_JSON = {
    "a.b": 1,
    "$where": 1.0,
    "": True,
    "$": None,
    "x": [1, 1.0, True, None, "s", {"y.z": {"$gt": 2**63 - 1}}],
    "neg": -(2**63),
    "big": 1e308,
    "tiny": 5e-324,
    "zero": -0.0,
    "nested": {"": {"": []}},
    "unicode": "é\U0001f600\u2028",
}


def test_json_objects_round_trip_type_exact(pair):
    c = ctx("ws=w1")
    run = make_run(metadata=AWKWARD_JSON, reply_route={"$set": {"a": 1}})
    both(pair, "create_run", c, run)
    got = both(pair, "get_run", c, run.id)
    assert_strict_equal(got.metadata, AWKWARD_JSON)
    s = make_suspension(run.id, continuation=AWKWARD_JSON)
    both(pair, "create_suspension", c, s)
    both(pair, "get_suspension", c, run.id)
    cp = make_checkpoint(run.id, metadata=AWKWARD_JSON)
    both(pair, "create_checkpoint", c, cp)
    both(pair, "get_checkpoint", c, cp.id)


METACHARACTERS = [".*", "$gt", "a|b", "^x$", "(", "[", "\\", "ws1", "ws10", "ws1x", "a=b", " ", "ÉE"]


def test_scope_visibility_is_whole_string_with_metacharacters(pair):
    scopes = [Scope(("k", v)) for v in METACHARACTERS]
    scopes += [Scope(("k", v), ("p", "1")) for v in METACHARACTERS[:4]]
    scopes += [Scope((".*", "v")), Scope(("$ne", "v")), Scope(("k.k", "v"))]
    run_ids = []
    for s in scopes:
        c = Context(s)
        run = make_run(state=RunState.PAUSED)
        run_ids.append(run.id)
        both(pair, "create_run", c, run)
        both(pair, "create_suspension", c, make_suspension(run.id))
        both(pair, "create_checkpoint", c, make_checkpoint(run.id))
    mongo, ref, _ = pair
    for s in scopes:
        c = Context(s)
        assert_strict_equal(
            state_view(mongo, [c], run_ids=run_ids), state_view(ref, [c], run_ids=run_ids), str(s)
        )
        for rid in run_ids:
            both(pair, "get_run", c, rid)
        both(pair, "count_runs", c, None)


def test_suspension_before_its_run_then_claim_and_delete(pair):
    mongo, _, clock = pair
    c = ctx("ws=w1")
    run = make_run(state=RunState.PAUSED)
    s = make_suspension(run.id, expires_at=clock.now() + timedelta(seconds=5))
    both(pair, "create_suspension", c, s)  # SUSP-CREATE-4: no run yet
    both(pair, "claim_suspension", c, run.id)  # NotSuspended: no run
    both(pair, "get_run", c, run.id)  # RunNotFound: the slot holds no run
    both(pair, "list_runs", c, None)
    both(pair, "count_runs", c, None)
    both(pair, "create_run", c, run)  # fills the same slot
    both(pair, "create_run", c, run)  # AlreadyExists
    both(pair, "create_suspension", ctx("other=x"), make_suspension(run.id))  # AlreadyExists
    clock.advance(seconds=5)
    both(pair, "claim_suspension", c, run.id)  # SuspensionExpired at the instant
    both(pair, "claim_expired_suspension", c, run.id, clock.now())
    both(pair, "claim_expired_suspension", c, run.id, clock.now())  # not paused now
    both(pair, "delete_suspension", c, run.id)
    both(pair, "delete_suspension", c, run.id)  # NotSuspended
    both(pair, "get_run", c, run.id)  # the run stays (SUSP-DEL-2)
    both(pair, "create_suspension", c, make_suspension(run.id))  # SUSP-CREATE-5


def test_an_emptied_slot_is_removed_and_can_be_refilled(pair):
    mongo, _, _ = pair
    c = ctx("ws=w1")
    run = make_run()
    s = make_suspension(run.id)
    both(pair, "create_suspension", c, s)
    both(pair, "delete_suspension", c, run.id)
    assert mongo._runs.count_documents({"_id": run.id}) == 0
    both(pair, "create_suspension", c, make_suspension(run.id, id=s.id))  # its id is free again
    both(pair, "create_run", c, run)
    assert mongo._runs.count_documents({"_id": run.id}) == 1


def test_suspension_ids_are_unique_across_runs_and_scopes(pair):
    c1, c2 = ctx("ws=w1"), ctx("ws=w2")
    s = make_suspension(make_run().id)
    both(pair, "create_suspension", c1, s)
    both(pair, "create_suspension", c2, make_suspension(make_run().id, id=s.id))


def test_duplicate_ids_are_already_exists_everywhere(pair):
    c = ctx("ws=w1")
    run = make_run()
    for method, entity in (("create_run", run), ("create_checkpoint", make_checkpoint()),):
        both(pair, method, c, entity)
        both(pair, method, ctx("ws=w2"), entity)
    from cortex_spec.runs import make_step, make_tool_call

    step, tc = make_step(run.id), make_tool_call()
    for method, entity in (("create_step", step), ("create_tool_call", tc)):
        both(pair, method, c, entity)
        assert outcome(getattr(pair[0], method), ctx("ws=w2"), entity) is AlreadyExists


@pytest.mark.parametrize("tz_aware", [False, True])
def test_instants_read_back_aware_utc_under_either_codec(tz_aware):
    clock = ManualClock(datetime(2026, 3, 1, 12, 0, 0, 123000, tzinfo=timezone.utc))
    store = MongoStore(FaithfulClient(tz_aware=tz_aware)["cortex"], clock)
    c = ctx("ws=w1")
    plus2 = timezone(timedelta(hours=2))
    started = datetime(1969, 7, 20, 22, 56, 15, 999999, tzinfo=plus2)
    run = store.create_run(c, make_run(started_at=started))
    got = store.get_run(c, run.id)
    assert got == run
    assert got.started_at == datetime(1969, 7, 20, 20, 56, 15, 999000, tzinfo=timezone.utc)
    assert got.started_at.tzinfo is timezone.utc and got.created_at == clock.now()


def test_closed_store_refuses_after_the_same_checks_as_the_reference(pair):
    mongo, ref, _ = pair
    mongo.close()
    ref.close()
    mongo.close()  # idempotent
    c = ctx("ws=w1")
    for args in (
        ("get_run", c, "bad"),  # InvalidArgument before StoreClosed
        ("get_run", c, make_run().id),
        ("create_run", c, make_run(metadata={"x": object()})),  # StoreClosed first
        ("create_run", Context(Scope()), make_run()),  # NoScope first
        ("list_expired_across_scopes", Context(Scope()), datetime(2026, 1, 1)),  # naive
        ("list_pending_across_scopes", Context(Scope()), None, 0),
    ):
        both(pair, *args)
    assert outcome(mongo.get_run, c, make_run().id) is StoreClosed


def test_no_scope_and_bad_arguments_before_the_database(pair):
    mongo, _, _ = pair
    zero = Context(Scope())
    assert outcome(mongo.claim_suspension, zero, make_run().id) is NoScope
    assert outcome(mongo.claim_suspension, ctx("ws=w"), "sus_x") is InvalidArgument


def test_unreadable_stored_scope_is_a_store_error(pair):
    mongo, _, _ = pair
    c = ctx("ws=w1")
    run = mongo.create_run(c, make_run())
    mongo._runs.update_one({"_id": run.id}, {"$set": {"run.scope.k1": "x", "run.scope.n": 2}})
    assert outcome(mongo.get_run, ctx("ws=w1"), run.id) is StoreError  # 'v1' missing
    mongo._runs.update_one({"_id": run.id}, {"$set": {"run.scope.v1": "a/b"}})
    assert outcome(mongo.list_runs, c, None) is StoreError  # '/' cannot be rebuilt


def test_driver_errors_are_store_errors(pair):
    mongo, _, _ = pair

    class Boom:
        def __getattr__(self, name):
            from pymongo.errors import AutoReconnect

            def fail(*_a, **_k):
                raise AutoReconnect("connection reset")

            return fail

    mongo._runs = Boom()
    with pytest.raises(StoreError) as info:
        mongo.get_run(ctx("ws=w1"), make_run().id)
    assert type(info.value.__cause__).__name__ == "AutoReconnect"


def test_claim_refusals_change_nothing(pair):
    mongo, ref, clock = pair
    c = ctx("ws=w1/p=1")
    run = make_run(state=RunState.RUNNING)
    both(pair, "create_run", c, run)
    both(pair, "create_suspension", c, make_suspension(run.id, expires_at=clock.now()))
    before = state_view(mongo, [c], run_ids=[run.id])
    assert outcome(mongo.claim_suspension, c, run.id) is SuspensionExpired
    assert outcome(mongo.claim_expired_suspension, c, run.id, clock.now()) is NotSuspended
    assert outcome(mongo.claim_suspension, ctx("ws=w1/p=10"), run.id) is NotSuspended
    assert outcome(mongo.update_run, ctx("ws=w10"), run) is RunNotFound
    assert state_view(mongo, [c], run_ids=[run.id]) == before
    both(pair, "resolve", c, make_checkpoint().id, approve())


def test_indexes_are_created_idempotently():
    client = FaithfulClient()
    db = client["cortex"]
    MongoStore(db, ManualClock())
    first = db["cortex_runs"].index_information()
    MongoStore(db, ManualClock())
    assert db["cortex_runs"].index_information() == first
    assert first["susp_id_unique"]["unique"] is True
    assert "partialFilterExpression" in first["susp_id_unique"]


def test_reopening_a_store_with_many_slots_keeps_its_indexes():
    # mongomock re-validates a unique index on create_index and ignores its
    # partial filter: slots without a suspension all looked like susp.id=None
    client = FaithfulClient()
    clock = ManualClock()
    store = MongoStore(client["cortex"], clock)
    c = ctx("ws=w1")
    runs = [store.create_run(c, make_run()) for _ in range(3)]
    for _ in range(2):
        store.close()
        store = MongoStore(client.reopen()["cortex"], clock)
        assert [store.get_run(c, r.id) for r in runs] == runs
    other = make_suspension(runs[0].id)
    store.create_suspension(c, other)
    with pytest.raises(AlreadyExists):
        store.create_suspension(c, make_suspension(runs[1].id, id=other.id))


def test_a_raw_mongomock_database_works_single_threaded():
    import mongomock

    store = MongoStore(mongomock.MongoClient()["cortex"], ManualClock())
    assert store._snapshot_reads is False
    c = ctx("ws=w1")
    run = store.create_run(c, make_run(state=RunState.PAUSED))
    store.create_suspension(c, make_suspension(run.id))
    assert store.claim_suspension(c, run.id).run_id == run.id
    assert store.list_runs(c)[0].state == RunState.RUNNING


class _Recording:
    """A collection that records the sessions its calls are given."""

    def __init__(self, collection, seen):
        self._collection, self._seen = collection, seen

    @property
    def name(self):
        return self._collection.name

    def __getattr__(self, name):
        fn = getattr(self._collection, name)

        def call(*args, session=None, **kwargs):
            self._seen.append((name, session))
            return fn(*args, **kwargs)

        return call


class _FakeReplicaSet:
    """A database whose client says it is a MongoDB 7 replica set member."""

    def __init__(self, database, seen, hello):
        self._database, self._seen = database, seen
        self.name = database.name
        outer = self

        class Client:
            class admin:  # noqa: N801
                @staticmethod
                def command(name):
                    assert name == "hello"
                    return hello

            @staticmethod
            def start_session(snapshot=False):
                from contextlib import nullcontext

                assert snapshot is True
                outer._seen.append(("start_session", "snapshot"))
                return nullcontext("snapshot-session")

        self.client = Client()

    def __getitem__(self, name):
        return _Recording(self._database[name], self._seen)

    def list_collection_names(self):
        return self._database.list_collection_names()  # the layout version (ADMIN-MIG), at open


@pytest.mark.parametrize(
    "hello,snapshot",
    [
        ({"setName": "rs0", "maxWireVersion": 21}, True),
        ({"msg": "isdbgrid", "maxWireVersion": 21}, True),
        ({"setName": "rs0", "maxWireVersion": 12}, False),  # 4.4: no snapshot reads
        ({"maxWireVersion": 21}, False),  # standalone
    ],
)
def test_list_reads_use_a_snapshot_session_where_the_server_has_them(hello, snapshot):
    seen: list = []
    store = MongoStore(_FakeReplicaSet(FaithfulClient()["cortex"], seen, hello), ManualClock())
    assert store._snapshot_reads is snapshot
    c = ctx("ws=w1")
    run = store.create_run(c, make_run())
    seen.clear()
    store.get_run(c, run.id)
    assert seen == [("find_one", None)]  # one document: no session needed
    seen.clear()
    assert store.list_runs(c) == [run] and store.count_runs(c) == 1
    store.list_expired_across_scopes(Context(Scope()), datetime(2030, 1, 1, tzinfo=timezone.utc))
    store.list_pending(c)
    if snapshot:
        assert seen == [
            ("start_session", "snapshot"), ("find", "snapshot-session"),
            ("start_session", "snapshot"), ("count_documents", "snapshot-session"),
            ("start_session", "snapshot"), ("find", "snapshot-session"),
            ("start_session", "snapshot"), ("find", "snapshot-session"),
        ]
    else:
        assert seen == [("find", None), ("count_documents", None), ("find", None), ("find", None)]


# -- class a2a -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hello,declared",
    [
        ({"setName": "rs0", "maxWireVersion": 21}, True),
        ({"msg": "isdbgrid", "maxWireVersion": 21}, True),
        ({"maxWireVersion": 21}, False),  # standalone: no transactions
    ],
)
def test_a2a_is_declared_only_where_transactions_exist(hello, declared):
    import mongomock

    store = MongoStore(_FakeReplicaSet(FaithfulClient()["cortex"], [], hello), ManualClock())
    assert ("a2a" in store.capabilities) is declared
    assert {"runs", "suspensions", "checkpoints"} <= store.capabilities
    assert "a2a" in MongoStore(FaithfulClient()["cortex"], ManualClock()).capabilities  # emulated
    assert "a2a" not in MongoStore(mongomock.MongoClient()["cortex"], ManualClock()).capabilities


def test_hop_admission_is_all_or_nothing(pair):
    """The envelope insert fails after the conversation was charged: the
    transaction puts the charge back, nothing is written."""
    from pymongo.errors import PyMongoError

    from cortex_spec.a2a import make_conversation, make_envelope

    mongo, _, _ = pair
    c = ctx("ws=w1")
    conv = mongo.create_conversation(c, make_conversation(hop_ceiling=3))
    real = mongo._a2a_messages

    class FailingInsert:
        def __getattr__(self, name):
            return getattr(real, name)

        def insert_one(self, *args, **kwargs):
            raise PyMongoError("the disk is full")

    mongo._a2a_messages = FailingInsert()
    with pytest.raises(StoreError):
        mongo.record_message(c, make_envelope(conv.id))
    mongo._a2a_messages = real
    assert mongo.get_conversation(c, conv.id) == conv  # hops_used and participants as before
    assert mongo.list_messages(c) == []
    assert mongo.record_message(c, make_envelope(conv.id)).hops == 1


def test_driver_errors_become_the_contracts_and_a_closed_store_refuses_first():
    """A store call's driver work runs in one context (``_guard``): a
    duplicate key comes out as AlreadyExists and any other driver error as
    StoreError, each with the driver's error as its cause; the contract's
    own errors and others pass as they are; a closed store refuses before
    any work."""
    from pymongo.errors import DuplicateKeyError, PyMongoError

    store = MongoStore(FaithfulClient()["cortex"], ManualClock())
    raised = {}
    for name, error in (("duplicate", DuplicateKeyError("E11000")), ("driver", PyMongoError("the disk is full")),
                        ("contract", RunNotFound("gone")), ("other", KeyError("k"))):
        try:
            with store._guard():
                raise error
        except BaseException as exc:  # noqa: BLE001 - what came out is what is checked
            raised[name] = (type(exc), exc.__cause__)
    assert raised == {"duplicate": (AlreadyExists, raised["duplicate"][1]),
                      "driver": (StoreError, raised["driver"][1]),
                      "contract": (RunNotFound, None), "other": (KeyError, None)}, raised
    assert isinstance(raised["duplicate"][1], DuplicateKeyError)
    assert isinstance(raised["driver"][1], PyMongoError)
    with store._guard():
        pass  # nothing raised: nothing comes out
    store.close()
    with pytest.raises(StoreClosed):
        with store._guard():
            raise AssertionError("a closed store ran the block")
