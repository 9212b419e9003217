"""Unit tests of the reference store's own mechanics (its semantics are
certified by the clause suite like any backend's)."""

from __future__ import annotations

import threading

import pytest

from cortex_spec import ManualClock, RunFilter
from cortex_spec.errors import StoreClosed
from cortex_spec.reference import MemoryMedium, MemoryStore
from cortex_spec.testing import ctx
from cortex_spec.checkpoints import make_checkpoint
from cortex_spec.runs import make_run
from cortex_spec.suspensions import make_suspension

C = ctx("ws=a")


def test_reads_are_detached_copies():
    store = MemoryStore(ManualClock())
    run = store.create_run(C, make_run(metadata={"k": [1, {"x": 2}]}))
    run.metadata["k"][1]["x"] = 99  # mutate what create returned
    got = store.get_run(C, run.id)
    assert got.metadata == {"k": [1, {"x": 2}]}
    got.metadata["k"].append(3)  # mutate what a read returned
    assert store.get_run(C, run.id).metadata == {"k": [1, {"x": 2}]}


def test_passed_objects_are_not_kept_by_reference():
    store = MemoryStore(ManualClock())
    meta = {"a": 1}
    run = store.create_run(C, make_run(metadata=meta))
    meta["a"] = 2
    assert store.get_run(C, run.id).metadata == {"a": 1}


def test_medium_survives_close_and_reopen():
    clock = ManualClock()
    medium = MemoryMedium()
    first = MemoryStore(clock, medium=medium)
    run = first.create_run(C, make_run(state="paused"))
    first.create_suspension(C, make_suspension(run.id))
    first.create_checkpoint(C, make_checkpoint(run.id))
    first.close()
    first.close()  # idempotent
    with pytest.raises(StoreClosed):
        first.get_run(C, run.id)
    second = MemoryStore(clock, medium=medium)
    assert second.get_run(C, run.id) == run
    assert second.claim_suspension(C, run.id).run_id == run.id
    assert second.count_pending(C) == 1


def test_clone_is_independent():
    store = MemoryStore(ManualClock())
    run = store.create_run(C, make_run())
    twin = MemoryStore(ManualClock(), medium=store.medium.clone())
    twin.update_run(C, make_run(id=run.id, agent_id=run.agent_id, state="failed"))
    assert store.get_run(C, run.id).state == "created"
    assert twin.get_run(C, run.id).state == "failed"


def test_one_lock_makes_concurrent_creates_and_counts_consistent():
    store = MemoryStore(ManualClock())
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait()
        for _ in range(50):
            store.create_run(C, make_run())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.count_runs(C) == 400
    assert len(store.list_runs(C, RunFilter(limit=1000))) == 400


def test_clock_is_read_inside_the_call():
    clock = ManualClock()
    store = MemoryStore(clock)
    run = store.create_run(C, make_run())
    clock.advance(seconds=5)
    updated = store.update_run(C, make_run(id=run.id, agent_id=run.agent_id))
    assert updated.updated_at == clock.now() and updated.created_at == run.created_at
