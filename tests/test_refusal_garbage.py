"""A refused call leaves nothing for the cyclic garbage collector, on every store.

An exception kept in a local variable of the frame that raises it is a
reference cycle (the exception, its traceback, the frame, the local), and so
is everything the frame holds: only the cyclic collector frees them.  A
claim race is mostly refusals; the SQL store raised its claims' refusals
that way, six objects a refusal, and a run of
``benchmarks/claim_throughput.py`` (8 threads, 8,000 attempts a race) made
36-47 young collections a race and two full ones in six races, of 35 and
99 ms with the GIL held, every thread stalled meanwhile
(``benchmarks/README.md``, issue 14).

Each refusal is made as a caller makes it, the refusal caught and dropped,
with the collector off; then one collection counts what was left.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from cortex_spec import ManualClock, errors, ids
from cortex_spec.a2a import make_delivery
from cortex_spec.harness import resolve_harness
from cortex_spec.runs import Lease, make_run
from cortex_spec.suspensions import make_suspension
from cortex_spec.testing import ctx

#: refusals of each kind made before one collection
TIMES = 30


@pytest.fixture(params=["reference", "sqlite", "postgres", "mongo"])
def store(request: pytest.FixtureRequest) -> Iterator[tuple[Any, ManualClock]]:
    """A store of each built-in backend, opened by its harness (the SQL ones
    are the session's, so PostgreSQL starts once)."""
    if request.param in ("sqlite", "postgres"):
        harness, own = request.getfixturevalue(f"{request.param}_harness"), False
    else:
        if request.param == "mongo":
            pytest.importorskip("mongomock", reason="the mongo extra is not installed")
        harness, own = resolve_harness(request.param), True
        harness.start()
    clock = ManualClock()
    location = harness.new_location()
    s = harness.open(location, clock)
    try:
        yield s, clock
    finally:
        s.close()
        harness.discard(location)
        if own:
            harness.stop()


def _refusals(s: Any, clock: ManualClock) -> dict[str, tuple[Callable[[], Any], type[errors.CortexError]]]:
    """A refused call of each claim (and two plain refusals), with the
    refusal it must raise."""
    c = ctx("ws=w1")
    run = s.create_run(c, make_run(state="paused"))
    s.create_suspension(c, make_suspension(run.id, expires_at=clock.now() + timedelta(hours=1)))
    s.claim_suspension(c, run.id)  # the run is running now; its suspension stays
    s.hold_lease(c, run.id, Lease(owner="a", expires_at=clock.now() + timedelta(minutes=5)))
    delivery = s.create_delivery(c, make_delivery())
    s.claim_delivery(c, delivery.id)
    later = clock.now() + timedelta(minutes=1)
    return {
        "claim_suspension (not paused)": (lambda: s.claim_suspension(c, run.id), errors.NotSuspended),
        "claim_expired_suspension (not expired)": (
            lambda: s.claim_expired_suspension(c, run.id, clock.now()), errors.NotSuspended),
        "claim_delivery (claimed)": (lambda: s.claim_delivery(c, delivery.id), errors.DeliveryAlreadyClaimed),
        "hold_lease (another owner's)": (
            lambda: s.hold_lease(c, run.id, Lease(owner="b", expires_at=later)), errors.LeaseHeld),
        "create_run (its id taken)": (lambda: s.create_run(c, make_run(id=run.id)), errors.AlreadyExists),
        "get_run (none)": (lambda: s.get_run(c, ids.new_id(ids.RUN)), errors.RunNotFound),
    }


def _garbage(call: Callable[[], Any], refusal: type[errors.CortexError]) -> int:
    """Objects the collector finds after ``TIMES`` refused calls."""
    gc.collect()
    gc.disable()
    try:
        for _ in range(TIMES):
            try:
                call()
            except refusal:
                pass
        return gc.collect()
    finally:
        gc.enable()


def test_a_refused_call_leaves_no_reference_cycle(store: tuple[Any, ManualClock]) -> None:
    s, clock = store
    left = {}
    for name, (call, refusal) in _refusals(s, clock).items():
        with pytest.raises(refusal):  # the call is refused (and one refusal warms its path)
            call()
        # judged on a second batch: the first may free, once, what an earlier
        # test left (after a test that killed PostgreSQL connections, 40-47
        # objects of psycopg's came free during the first batch of
        # create_run, none in later batches); a cycle per refusal shows in
        # every batch
        _garbage(call, refusal)
        left[name] = _garbage(call, refusal)
    # another thread of the process (a pool, a server harness) may leave a
    # little garbage meanwhile; a cycle per refusal leaves several objects each
    cycles = {name: found for name, found in left.items() if found >= TIMES}
    assert not cycles, (
        f"refusals left reference cycles (objects the collector found after {TIMES} refused calls): "
        f"{cycles}; every count: {left}")
