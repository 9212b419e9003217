"""Certifies the rules of common.md (RSC-GEN-1..12) that every method of the
runs, suspensions and checkpoints classes obeys: the clock read once per call
and truncated to whole milliseconds, aware instants converted to UTC and
truncated before they are compared or stored, an explicit `now` only compared,
creates that stamp their own times, TypeID checks, short strings, NUL and lone
surrogates refused anywhere (JSON keys included), JSON objects that round-trip
with their exact types, the 8 MiB entity limit, counters, enumerations, binary
collation of ids in every order, and linearizable calls under concurrency.
Every refused input is checked to be `InvalidArgument` with nothing written.
"""

from __future__ import annotations

import functools
import threading
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from types import SimpleNamespace
from typing import Any, Callable

import attrs
import pytest

from cortex_spec import Context, Scope, ids
from cortex_spec.checkpoints import Checkpoint, CheckpointFilter, CheckpointState, Decision
from cortex_spec.clock import EPOCH
from cortex_spec.errors import InvalidArgument, InvalidState, NotSuspended, RunNotFound, SuspensionExpired
from cortex_spec.runs import RunFilter, RunState, Step, ToolCall
from cortex_spec.suspensions import PendingCall, SuspensionReason
from cortex_spec.testing import (
    FAR_FUTURE,
    ZERO,
    approve,
    assert_strict_equal,
    clause,
    ctx,
    make_checkpoint,
    make_run,
    make_step,
    make_suspension,
    make_tool_call,
    race,
    state_view,
    strict_equal,
)
from cortex_spec.validation import MAX_ENTITY_BYTES, entity_size

UTC = timezone.utc
MS = timedelta(milliseconds=1)
US = timedelta(microseconds=1)
PAST = EPOCH - timedelta(hours=1)
HOME = "ws=w1/proj=p1"
#: One ancestor of HOME sees every row these tests write (plus any written at
#: "ws=w1"); the across-scopes lists in the view see the rest.
VIEW_SCOPES = ["ws=w1"]


def classes(*names: str) -> pytest.MarkDecorator:
    return pytest.mark.cortex_classes(*names)


class RawClock:
    """A clock that hands out exactly the instant it holds, sub-millisecond
    digits included (a `ManualClock` truncates on `set`), and that can move by
    `tick` after every read, which exposes a call that reads it twice."""

    def __init__(self, start: datetime = EPOCH, tick: timedelta = timedelta(0)) -> None:
        self._lock = threading.Lock()
        self._now = start
        self._tick = tick

    def now(self) -> datetime:
        with self._lock:
            value = self._now
            self._now = value + self._tick
            return value

    def set(self, instant: datetime, tick: timedelta | None = None) -> None:
        with self._lock:
            self._now = instant
            if tick is not None:
                self._tick = tick


def _ms(instant: datetime) -> datetime:
    """The instant in UTC with its sub-millisecond part dropped."""
    instant = instant.astimezone(UTC)
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)


def _assert_instant(actual: object, expected: datetime, what: str) -> None:
    """An aware UTC datetime, whole milliseconds, equal to ``expected``."""
    assert isinstance(actual, datetime), f"{what} is {actual!r}"
    assert actual.utcoffset() == timedelta(0), f"{what} is not in UTC: {actual!r}"
    assert actual.microsecond % 1000 == 0, f"{what} keeps sub-millisecond digits: {actual!r}"
    assert actual == expected and actual.replace(tzinfo=None) == expected.astimezone(UTC).replace(tzinfo=None), (
        f"{what}: got {actual.isoformat()}, expected {expected.astimezone(UTC).isoformat()}"
    )


# -- the world each bad-input test runs against ----------------------------------


def _seed(store: Any, cls: str) -> SimpleNamespace:
    """Rows of ``cls`` at HOME that the call sites address."""
    c = ctx(HOME)
    w = SimpleNamespace(cls=cls, run_id=ids.new_id(ids.RUN), step_id=ids.new_id(ids.STEP), cp=None)
    if cls in ("runs", "suspensions"):
        store.create_run(c, make_run(id=w.run_id, state=RunState.PAUSED))
    if cls == "runs":
        store.create_step(c, make_step(w.run_id, id=w.step_id))
        store.create_tool_call(c, make_tool_call(w.step_id, w.run_id))
    if cls == "suspensions":
        store.create_suspension(c, make_suspension(w.run_id, expires_at=PAST))
    if cls == "checkpoints":
        w.cp = store.create_checkpoint(c, make_checkpoint(w.run_id)).id
    return w


def _view(store: Any, w: SimpleNamespace) -> dict:
    return state_view(store, VIEW_SCOPES, run_ids=[w.run_id], step_ids=[w.step_id], classes={w.cls})


def _prep_checkpoint(store: Any, c: Context, w: SimpleNamespace) -> None:
    w.cp = store.create_checkpoint(c, make_checkpoint()).id


@attrs.frozen
class Site:
    """One place a value goes: a field of an entity or an argument of a method.

    ``call(store, ctx, world, value)`` makes the call; ``read(store, ctx, world,
    result)`` reads the stored value back afresh (None when nothing is stored);
    ``prepare`` makes the rows one call consumes (a fresh pending checkpoint…).
    """

    name: str
    cls: str
    call: Callable[[Any, Context, SimpleNamespace, Any], Any]
    read: Callable[[Any, Context, SimpleNamespace, Any], Any] | None = None
    prepare: Callable[[Any, Context, SimpleNamespace], None] | None = None
    prefix: str = ""  # id sites: the TypeID prefix
    optional: bool = False  # None is a valid value


def _params(sites: list[Site]) -> list:
    return [pytest.param(s, marks=classes(s.cls), id=s.name) for s in sites]


def _expect_invalid(store: Any, site: Site, values: list, c: Context | None = None) -> None:
    """Each value raises InvalidArgument at ``site`` and writes nothing."""
    c = c or ctx(HOME)
    w = _seed(store, site.cls)
    if site.prepare is not None:
        site.prepare(store, c, w)  # a refused call consumes nothing: one preparation serves all
    before = _view(store, w)
    for value in values:
        try:
            site.call(store, c, w, value)
        except InvalidArgument:
            pass
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"{site.name}={value!r:.80} raised {type(exc).__name__}, not InvalidArgument")
        else:
            pytest.fail(f"{site.name}={value!r:.80} was accepted")
        assert _view(store, w) == before, f"{site.name}={value!r:.80} was refused but wrote something"


def _expect_stored(store: Any, site: Site, values: list, expect: Callable[[Any], Any] = lambda v: v) -> None:
    """Each value is accepted at ``site`` and reads back (types included) as ``expect(value)``."""
    c = ctx(HOME)
    w = _seed(store, site.cls)
    for value in values:
        if site.prepare is not None:
            site.prepare(store, c, w)
        result = site.call(store, c, w, value)
        if site.read is not None:
            assert_strict_equal(site.read(store, c, w, result), expect(value), f"{site.name} read back")


def _step_of(s, c, w, r):
    return next(x for x in s.list_steps(c, r.run_id) if x.id == r.id)


def _tool_call_of(s, c, w, r):
    return next(x for x in s.list_tool_calls(c, r.step_id) if x.id == r.id)


# ===========================================================================
# RSC-GEN-1: clock now read once, truncated to milliseconds
# ===========================================================================

T1 = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
T2 = datetime(2026, 3, 4, 5, 6, 8, 999999, tzinfo=UTC)
T3 = datetime(2026, 3, 4, 5, 6, 9, 500, tzinfo=UTC)


@pytest.mark.clause("RSC-GEN-1", "RSC-GEN-4")
@classes("runs")
def test_run_stamps_use_one_truncated_clock_read(cortex_open):
    """The clock returns sub-millisecond instants and moves 1 ms after every
    read: the stamps of each call are the first read, truncated (.123456 ->
    .123000), and created_at equals updated_at."""
    clock = RawClock(T1, tick=MS)
    store = cortex_open(clock)
    c = ctx(HOME)
    run = store.create_run(c, make_run())
    for got in (run, store.get_run(c, run.id)):
        _assert_instant(got.created_at, _ms(T1), "run.created_at")
        _assert_instant(got.updated_at, _ms(T1), "run.updated_at")
    clock.set(T2)
    updated = store.update_run(c, attrs.evolve(run, input="x"))
    for got in (updated, store.get_run(c, run.id)):
        _assert_instant(got.updated_at, _ms(T2), "updated run.updated_at")
        _assert_instant(got.created_at, _ms(T1), "updated run.created_at")
    clock.set(T3)
    step = store.create_step(c, make_step(run.id))
    clock.set(T2)
    tc = store.create_tool_call(c, make_tool_call(step.id, run.id))
    for got, t in ((step, T3), (store.list_steps(c, run.id)[0], T3), (tc, T2),
                   (store.list_tool_calls(c, step.id)[0], T2)):
        _assert_instant(got.created_at, _ms(t), "created_at")
        _assert_instant(got.updated_at, _ms(t), "updated_at")


@pytest.mark.clause("RSC-GEN-1", "RSC-GEN-4", "SUSP-CLAIM-2", "SUSP-XCLAIM-2", "SUSP-PART-2")
@classes("suspensions")
def test_suspension_claims_compare_and_write_one_clock_read(cortex_open):
    """The resume claim compares the deadline with the same clock value it
    writes: with the clock at 0.6 ms before the deadline and moving 1 ms per
    read, the claim succeeds and stamps the run with deadline - 1 ms (a second
    read would give the deadline itself)."""
    clock = RawClock(T1, tick=MS)
    store = cortex_open(clock)
    c = ctx(HOME)
    deadline = datetime(2026, 3, 4, 6, 0, 0, tzinfo=UTC)
    run_id = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
    clock.set(T2)
    s = store.create_suspension(c, make_suspension(run_id, expires_at=deadline))
    _assert_instant(s.created_at, _ms(T2), "suspension.created_at")
    _assert_instant(s.updated_at, _ms(T2), "suspension.updated_at")
    clock.set(deadline - timedelta(microseconds=600))
    store.claim_suspension(c, run_id)
    run = store.get_run(c, run_id)
    assert run.state == RunState.RUNNING
    _assert_instant(run.updated_at, deadline - MS, "run.updated_at after the resume claim")
    _assert_instant(store.get_suspension(c, run_id).updated_at, _ms(T2), "suspension.updated_at")
    # the sweep claim: updated_at from the (truncated) clock read
    other = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=other, state=RunState.PAUSED))
    store.create_suspension(c, make_suspension(other, expires_at=deadline))
    clock.set(T3)
    with clause("SUSP-PART-2", what="the sweep claim with now at the deadline instant"):
        store.claim_expired_suspension(c, other, deadline)
    _assert_instant(store.get_run(c, other).updated_at, _ms(T3), "run.updated_at after the sweep claim")


@pytest.mark.clause("RSC-GEN-1", "RSC-GEN-4", "CP-RESOLVE-1")
@classes("checkpoints")
def test_checkpoint_stamps_use_one_truncated_clock_read(cortex_open):
    clock = RawClock(T1, tick=MS)
    store = cortex_open(clock)
    c = ctx(HOME)
    cp = store.create_checkpoint(c, make_checkpoint())
    _assert_instant(cp.created_at, _ms(T1), "checkpoint.created_at")
    _assert_instant(cp.updated_at, _ms(T1), "checkpoint.updated_at")
    clock.set(T2)
    resolved = store.resolve(c, cp.id, approve())
    for got in (resolved, store.get_checkpoint(c, cp.id)):
        _assert_instant(got.decision.decided_at, _ms(T2), "decision.decided_at")
        _assert_instant(got.updated_at, _ms(T2), "checkpoint.updated_at")
        _assert_instant(got.created_at, _ms(T1), "checkpoint.created_at")


# ===========================================================================
# RSC-GEN-2: aware instants only, converted to UTC and truncated
# ===========================================================================

NAIVE_OR_NOT_INSTANTS = [
    datetime(2026, 1, 1),
    datetime(2026, 1, 1, 0, 0, 0, 123456),
    date(2026, 1, 1),
    "2026-01-01T00:00:00+00:00",
    1767225600,
    1767225600.0,
]

INSTANT_SITES = [
    Site("run.started_at", "runs", lambda s, c, w, v: s.create_run(c, make_run(started_at=v)),
         read=lambda s, c, w, r: s.get_run(c, r.id).started_at),
    Site("run.completed_at", "runs", lambda s, c, w, v: s.create_run(c, make_run(completed_at=v)),
         read=lambda s, c, w, r: s.get_run(c, r.id).completed_at),
    Site("update_run.started_at", "runs",
         lambda s, c, w, v: s.update_run(c, make_run(id=w.run_id, started_at=v)),
         read=lambda s, c, w, r: s.get_run(c, w.run_id).started_at),
    Site("update_run.completed_at", "runs",
         lambda s, c, w, v: s.update_run(c, make_run(id=w.run_id, completed_at=v)),
         read=lambda s, c, w, r: s.get_run(c, w.run_id).completed_at),
    Site("step.started_at", "runs", lambda s, c, w, v: s.create_step(c, make_step(w.run_id, started_at=v)),
         read=lambda s, c, w, r: _step_of(s, c, w, r).started_at),
    Site("step.completed_at", "runs", lambda s, c, w, v: s.create_step(c, make_step(w.run_id, completed_at=v)),
         read=lambda s, c, w, r: _step_of(s, c, w, r).completed_at),
    Site("tool_call.started_at", "runs",
         lambda s, c, w, v: s.create_tool_call(c, make_tool_call(w.step_id, w.run_id, started_at=v)),
         read=lambda s, c, w, r: _tool_call_of(s, c, w, r).started_at),
    Site("tool_call.completed_at", "runs",
         lambda s, c, w, v: s.create_tool_call(c, make_tool_call(w.step_id, w.run_id, completed_at=v)),
         read=lambda s, c, w, r: _tool_call_of(s, c, w, r).completed_at),
    Site("suspension.expires_at", "suspensions",
         lambda s, c, w, v: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), expires_at=v)),
         read=lambda s, c, w, r: s.get_suspension(c, r.run_id).expires_at),
    Site("claim_expired_suspension.now", "suspensions",
         lambda s, c, w, v: s.claim_expired_suspension(c, w.run_id, v)),
    Site("list_expired.now", "suspensions", lambda s, c, w, v: s.list_expired(c, v)),
    Site("list_expired_across_scopes.now", "suspensions",
         lambda s, c, w, v: s.list_expired_across_scopes(ZERO, v)),
]


@pytest.mark.clause("RSC-GEN-2")
@pytest.mark.parametrize("site", _params(INSTANT_SITES))
def test_naive_or_non_datetime_instant_refused(store, site):
    _expect_invalid(store, site, NAIVE_OR_NOT_INSTANTS)


_PLUS_0530 = timezone(timedelta(hours=5, minutes=30))
_MINUS_0800 = timezone(timedelta(hours=-8))
#: (given, expected as stored): other offsets converted to UTC, sub-ms dropped (never rounded up)
CONVERTED = [
    (datetime(2026, 1, 1, 5, 30, 0, 999999, tzinfo=_PLUS_0530), datetime(2026, 1, 1, 0, 0, 0, 999000, tzinfo=UTC)),
    (datetime(2025, 12, 31, 16, 0, 0, 123456, tzinfo=_MINUS_0800), datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)),
    (datetime(2026, 1, 1, 0, 0, 0, 999, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)),
    (datetime(2026, 1, 1, 0, 0, 0, 500, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)),
    (datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), datetime(1999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)),
]


@pytest.mark.clause("RSC-GEN-2")
@pytest.mark.parametrize("site", _params([s for s in INSTANT_SITES if s.read is not None]))
def test_aware_instant_stored_in_utc_truncated_to_ms(store, site):
    c = ctx(HOME)
    w = _seed(store, site.cls)
    for given, expected in CONVERTED:
        result = site.call(store, c, w, given)
        _assert_instant(getattr(result, site.name.split(".")[-1]), expected, f"{site.name} as returned")
        _assert_instant(site.read(store, c, w, result), expected, f"{site.name} read back")


D = EPOCH + timedelta(seconds=10)
_PLUS_0200 = timezone(timedelta(hours=2))
#: (case, stored deadline as given, `now` as given, sweep-eligible after truncation)
TRUNCATION_CASES = [
    ("now-half-ms-past-deadline", D, D + 500 * US, True),
    ("sub-ms-deadline-now-at-its-ms", D + 700 * US, D, True),
    ("now-half-ms-before-deadline", D, D - 500 * US, False),  # rounding up would wrongly make it eligible
    ("both-sub-ms-in-one-ms", D + 700 * US, D + 300 * US, True),
    ("now-in-plus-0530-at-deadline", D, D.astimezone(_PLUS_0530), True),
    ("now-in-minus-0800-just-before", D, (D - 100 * US).astimezone(_MINUS_0800), False),
    ("deadline-in-plus-0200-sub-ms", (D + 500 * US).astimezone(_PLUS_0200), D, True),
    ("deadline-one-ms-after-now", D + MS, D + 900 * US, False),
]


@pytest.mark.clause("RSC-GEN-2", "SUSP-XCLAIM-1", "SUSP-XCLAIM-3", "SUSP-PART-2")
@classes("suspensions")
@pytest.mark.parametrize("case, deadline, now, eligible", TRUNCATION_CASES, ids=[t[0] for t in TRUNCATION_CASES])
def test_sweep_claim_compares_truncated_utc_instants(store, case, deadline, now, eligible):
    """Both the stored deadline and `now` are truncated to the millisecond (in
    UTC) before they are compared: `deadline <= now` on the truncated values."""
    c = ctx(HOME)
    run_id = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
    store.create_suspension(c, make_suspension(run_id, expires_at=deadline))
    before = state_view(store, [HOME], run_ids=[run_id])
    if eligible:
        store.claim_expired_suspension(c, run_id, now)
        assert store.get_run(c, run_id).state == RunState.RUNNING
    else:
        with pytest.raises(NotSuspended):
            store.claim_expired_suspension(c, run_id, now)
        assert state_view(store, [HOME], run_ids=[run_id]) == before


@pytest.mark.clause("RSC-GEN-2", "SUSP-LIST-1", "SUSP-XLIST-1")
@classes("suspensions")
@pytest.mark.parametrize("case, deadline, now, eligible", TRUNCATION_CASES, ids=[t[0] for t in TRUNCATION_CASES])
def test_expired_lists_compare_truncated_utc_instants(store, case, deadline, now, eligible):
    c = ctx(HOME)
    s = store.create_suspension(c, make_suspension(ids.new_id(ids.RUN), expires_at=deadline))
    assert (s.id in {x.id for x in store.list_expired(c, now)}) is eligible
    assert (s.id in {x.id for x in store.list_expired_across_scopes(ZERO, now)}) is eligible


@pytest.mark.clause("RSC-GEN-1", "RSC-GEN-2", "SUSP-CLAIM-1", "SUSP-CLAIM-6", "SUSP-CLAIM-8")
@classes("suspensions")
@pytest.mark.parametrize(
    "deadline, clock_at, resumes",
    [
        (D, D - 500 * US, True),  # clock truncates down to D - 1 ms: before the deadline
        (D + 900 * US, D + 500 * US, False),  # both truncate to D: at the deadline
        (D, D + 500 * US, False),
        (D + MS, D + 999 * US, True),
    ],
    ids=["clock-half-ms-before", "same-ms", "clock-half-ms-after", "one-ms-apart"],
)
def test_resume_claim_compares_truncated_clock_with_truncated_deadline(cortex_open, deadline, clock_at, resumes):
    clock = RawClock(EPOCH)
    store = cortex_open(clock)
    c = ctx(HOME)
    run_id = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
    store.create_suspension(c, make_suspension(run_id, expires_at=deadline))
    clock.set(clock_at)
    if resumes:
        store.claim_suspension(c, run_id)
        assert store.get_run(c, run_id).state == RunState.RUNNING
        _assert_instant(store.get_run(c, run_id).updated_at, _ms(clock_at), "run.updated_at")
    else:
        before = state_view(store, [HOME], run_ids=[run_id])
        with pytest.raises(SuspensionExpired):
            store.claim_suspension(c, run_id)
        with clause("SUSP-CLAIM-8", what="the stored state after the refused claim"):
            assert state_view(store, [HOME], run_ids=[run_id]) == before


# ===========================================================================
# RSC-GEN-3: an explicit `now` is only compared, never written
# ===========================================================================


@pytest.mark.clause("RSC-GEN-3", "SUSP-XCLAIM-2", "SUSP-ENT-1")
@classes("suspensions")
@pytest.mark.parametrize(
    "now",
    [FAR_FUTURE, PAST + timedelta(minutes=30), (PAST + timedelta(minutes=1)).astimezone(_PLUS_0530), PAST],
    ids=["far-future", "before-the-clock", "other-offset", "exactly-the-deadline"],
)
def test_sweep_claim_writes_clock_now_not_the_now_argument(store, clock, now):
    c = ctx(HOME)
    run_id = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
    created = store.create_suspension(c, make_suspension(run_id, expires_at=PAST))
    clock.advance(seconds=5, milliseconds=7)
    returned = store.claim_expired_suspension(c, run_id, now)
    run = store.get_run(c, run_id)
    assert run.state == RunState.RUNNING
    _assert_instant(run.updated_at, clock.now(), "run.updated_at")
    assert_strict_equal(store.get_suspension(c, run_id), created, "suspension after the sweep claim")
    assert_strict_equal(returned, created, "suspension returned by the sweep claim")


@pytest.mark.clause("RSC-GEN-3")
@classes("suspensions")
def test_expired_lists_write_nothing(store, clock):
    w = _seed(store, "suspensions")
    before = _view(store, w)
    clock.advance(seconds=3)
    for now in (FAR_FUTURE, PAST, EPOCH):
        store.list_expired(ctx(HOME), now)
        store.list_expired_across_scopes(ZERO, now)
    assert _view(store, w) == before


# ===========================================================================
# RSC-GEN-4: creates stamp created_at and updated_at from the clock
# ===========================================================================

_BOGUS_STAMPS = dict(
    created_at=datetime(1999, 1, 2, 3, 4, 5, tzinfo=UTC),
    updated_at=datetime(2999, 1, 2, 3, 4, 5, tzinfo=_PLUS_0530),
)

CREATE_SITES = [
    Site("create_run", "runs", lambda s, c, w, v: s.create_run(c, make_run(**v)),
         read=lambda s, c, w, r: s.get_run(c, r.id)),
    Site("create_step", "runs", lambda s, c, w, v: s.create_step(c, make_step(w.run_id, **v)),
         read=_step_of),
    Site("create_tool_call", "runs",
         lambda s, c, w, v: s.create_tool_call(c, make_tool_call(w.step_id, w.run_id, **v)),
         read=_tool_call_of),
    Site("create_suspension", "suspensions",
         lambda s, c, w, v: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), **v)),
         read=lambda s, c, w, r: s.get_suspension(c, r.run_id)),
    Site("create_checkpoint", "checkpoints", lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(**v)),
         read=lambda s, c, w, r: s.get_checkpoint(c, r.id)),
]


@pytest.mark.clause("RSC-GEN-4", "RUN-CREATE-1", "STEP-1", "TCALL-1", "SUSP-CREATE-1", "CP-CREATE-1")
@pytest.mark.parametrize("site", _params(CREATE_SITES))
def test_create_ignores_passed_timestamps(store, clock, site):
    c = ctx(HOME)
    w = _seed(store, site.cls)
    clock.advance(seconds=1, milliseconds=234)
    for fields in (_BOGUS_STAMPS, {"created_at": clock.now() - timedelta(days=1)}, {}):
        result = site.call(store, c, w, dict(fields))
        for got in (result, site.read(store, c, w, result)):
            _assert_instant(got.created_at, clock.now(), f"{site.name} created_at")
            _assert_instant(got.updated_at, clock.now(), f"{site.name} updated_at")
        clock.advance(milliseconds=1)


@pytest.mark.clause("RSC-GEN-4", "RUN-UPD-2", "RUN-UPD-3")
@classes("runs")
def test_run_updated_at_changes_only_on_update(store, clock):
    """Reads and refused calls leave updated_at alone; update_run sets it to
    clock now whatever the object carries, and never touches created_at."""
    c = ctx(HOME)
    run = store.create_run(c, make_run())
    created = clock.now()
    clock.advance(seconds=1)
    store.get_run(c, run.id)
    store.list_runs(c)
    store.count_runs(c)
    with pytest.raises(InvalidArgument):
        store.update_run(c, attrs.evolve(run, step_count=-1))
    assert_strict_equal(store.get_run(c, run.id), run, "run after reads and a refused update")
    clock.advance(seconds=1)
    updated = store.update_run(c, attrs.evolve(run, input="new", **_BOGUS_STAMPS))
    for got in (updated, store.get_run(c, run.id)):
        _assert_instant(got.created_at, created, "created_at after update")
        _assert_instant(got.updated_at, clock.now(), "updated_at after update")


@pytest.mark.clause("RSC-GEN-4", "SUSP-ENT-1", "SUSP-CLAIM-2", "SUSP-CLAIM-3")
@classes("suspensions")
def test_suspension_updated_at_never_changes(store, clock):
    """No method rewrites a suspension: its stamps stay those of its creation
    across reads and claims, while the claimed run gets clock now."""
    c = ctx(HOME)
    run_id = ids.new_id(ids.RUN)
    store.create_run(c, make_run(id=run_id, state=RunState.PAUSED))
    s = store.create_suspension(c, make_suspension(run_id))
    clock.advance(seconds=2)
    store.claim_suspension(c, run_id)
    assert_strict_equal(store.get_suspension(c, run_id), s, "suspension after the claim")
    _assert_instant(store.get_run(c, run_id).updated_at, clock.now(), "run.updated_at after the claim")


@pytest.mark.clause("RSC-GEN-4", "CP-RESOLVE-1", "CP-RESOLVE-3")
@classes("checkpoints")
def test_checkpoint_updated_at_changes_only_on_resolve(store, clock):
    c = ctx(HOME)
    cp = store.create_checkpoint(c, make_checkpoint())
    clock.advance(seconds=1)
    store.get_checkpoint(c, cp.id)
    store.list_pending(c)
    assert_strict_equal(store.get_checkpoint(c, cp.id), cp, "checkpoint after reads")
    clock.advance(seconds=1)
    resolved_at = clock.now()
    store.resolve(c, cp.id, Decision(approved=True, decided_at=FAR_FUTURE))
    clock.advance(seconds=1)
    with pytest.raises(InvalidState):
        store.resolve(c, cp.id, approve())
    got = store.get_checkpoint(c, cp.id)
    _assert_instant(got.created_at, EPOCH, "created_at")
    _assert_instant(got.updated_at, resolved_at, "updated_at")
    _assert_instant(got.decision.decided_at, resolved_at, "decided_at")


# ===========================================================================
# RSC-GEN-5: TypeIDs
# ===========================================================================


def _bad_ids(prefix: str, optional: bool) -> list:
    valid = ids.new_id(prefix)
    suffix = valid.split("_", 1)[1]
    other = ids.new_id(ids.STEP if prefix == ids.RUN else ids.RUN)
    values: list = [
        other,  # a well-formed id of another entity
        f"{prefix}_notatypeid",
        f"{prefix}_{'8' * 26}",  # 130 bits: overflows a UUID
        f"{prefix}_{'0' * 25}",
        f"{prefix}_{'0' * 27}",
        f"{prefix}_{suffix.upper()}",
        f"{prefix.upper()}_{suffix}",
        f"{prefix}{suffix}",
        f"{prefix}-{suffix}",
        f"{prefix}_{suffix[:-1]}u",  # 'u' is not in the base32 alphabet
        " " + valid,
        valid + " ",
        valid + "\x00",
        "",
        42,
        3.5,
        valid.encode(),
        [valid],
    ]
    if not optional:
        values.append(None)
    return values


def _id_site(name: str, cls: str, prefix: str, call: Callable, optional: bool = False, prepare=None) -> Site:
    return Site(name, cls, call, prefix=prefix, optional=optional, prepare=prepare)


ID_SITES = [
    _id_site("create_run.run.id", "runs", ids.RUN, lambda s, c, w, v: s.create_run(c, make_run(id=v))),
    _id_site("create_run.run.agent_id", "runs", ids.AGENT, lambda s, c, w, v: s.create_run(c, make_run(agent_id=v))),
    _id_site("create_run.run.session_id", "runs", ids.SESSION,
             lambda s, c, w, v: s.create_run(c, make_run(session_id=v)), optional=True),
    _id_site("get_run.run_id", "runs", ids.RUN, lambda s, c, w, v: s.get_run(c, v)),
    _id_site("update_run.run.id", "runs", ids.RUN, lambda s, c, w, v: s.update_run(c, make_run(id=v))),
    _id_site("update_run.run.agent_id", "runs", ids.AGENT,
             lambda s, c, w, v: s.update_run(c, make_run(id=w.run_id, agent_id=v))),
    _id_site("update_run.run.session_id", "runs", ids.SESSION,
             lambda s, c, w, v: s.update_run(c, make_run(id=w.run_id, session_id=v)), optional=True),
    _id_site("list_runs.filter.agent_id", "runs", ids.AGENT,
             lambda s, c, w, v: s.list_runs(c, RunFilter(agent_id=v)), optional=True),
    _id_site("count_runs.filter.agent_id", "runs", ids.AGENT,
             lambda s, c, w, v: s.count_runs(c, RunFilter(agent_id=v)), optional=True),
    _id_site("create_step.step.id", "runs", ids.STEP, lambda s, c, w, v: s.create_step(c, Step(id=v, run_id=w.run_id))),
    _id_site("create_step.step.run_id", "runs", ids.RUN,
             lambda s, c, w, v: s.create_step(c, Step(id=ids.new_id(ids.STEP), run_id=v))),
    _id_site("list_steps.run_id", "runs", ids.RUN, lambda s, c, w, v: s.list_steps(c, v)),
    _id_site("create_tool_call.tool_call.id", "runs", ids.TOOL_CALL,
             lambda s, c, w, v: s.create_tool_call(c, ToolCall(id=v, step_id=w.step_id, run_id=w.run_id, tool_name="t"))),
    _id_site("create_tool_call.tool_call.step_id", "runs", ids.STEP,
             lambda s, c, w, v: s.create_tool_call(
                 c, ToolCall(id=ids.new_id(ids.TOOL_CALL), step_id=v, run_id=w.run_id, tool_name="t"))),
    _id_site("create_tool_call.tool_call.run_id", "runs", ids.RUN,
             lambda s, c, w, v: s.create_tool_call(
                 c, ToolCall(id=ids.new_id(ids.TOOL_CALL), step_id=w.step_id, run_id=v, tool_name="t"))),
    _id_site("list_tool_calls.step_id", "runs", ids.STEP, lambda s, c, w, v: s.list_tool_calls(c, v)),
    _id_site("create_suspension.suspension.id", "suspensions", ids.SUSPENSION,
             lambda s, c, w, v: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), id=v))),
    _id_site("create_suspension.suspension.run_id", "suspensions", ids.RUN,
             lambda s, c, w, v: s.create_suspension(c, make_suspension(v))),
    _id_site("get_suspension.run_id", "suspensions", ids.RUN, lambda s, c, w, v: s.get_suspension(c, v)),
    _id_site("claim_suspension.run_id", "suspensions", ids.RUN, lambda s, c, w, v: s.claim_suspension(c, v)),
    _id_site("claim_expired_suspension.run_id", "suspensions", ids.RUN,
             lambda s, c, w, v: s.claim_expired_suspension(c, v, FAR_FUTURE)),
    _id_site("delete_suspension.run_id", "suspensions", ids.RUN, lambda s, c, w, v: s.delete_suspension(c, v)),
    _id_site("create_checkpoint.checkpoint.id", "checkpoints", ids.CHECKPOINT,
             lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(id=v))),
    _id_site("create_checkpoint.checkpoint.run_id", "checkpoints", ids.RUN,
             lambda s, c, w, v: s.create_checkpoint(
                 c, Checkpoint(id=ids.new_id(ids.CHECKPOINT), run_id=v, agent_id=ids.new_id(ids.AGENT)))),
    _id_site("create_checkpoint.checkpoint.agent_id", "checkpoints", ids.AGENT,
             lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(agent_id=v))),
    _id_site("get_checkpoint.checkpoint_id", "checkpoints", ids.CHECKPOINT, lambda s, c, w, v: s.get_checkpoint(c, v)),
    _id_site("resolve.checkpoint_id", "checkpoints", ids.CHECKPOINT, lambda s, c, w, v: s.resolve(c, v, approve())),
    _id_site("list_pending.filter.run_id", "checkpoints", ids.RUN,
             lambda s, c, w, v: s.list_pending(c, CheckpointFilter(run_id=v)), optional=True),
    _id_site("count_pending.filter.run_id", "checkpoints", ids.RUN,
             lambda s, c, w, v: s.count_pending(c, CheckpointFilter(run_id=v)), optional=True),
    _id_site("list_pending_across_scopes.after_id", "checkpoints", ids.CHECKPOINT,
             lambda s, c, w, v: s.list_pending_across_scopes(ZERO, after_id=v), optional=True),
]


@pytest.mark.clause("RSC-GEN-5")
@pytest.mark.parametrize("site", _params(ID_SITES))
def test_bad_ids_refused(store, site):
    """Wrong prefix, malformed TypeIDs and non-`str` values are InvalidArgument
    and write nothing; a well-formed id of the right prefix is not refused."""
    _expect_invalid(store, site, _bad_ids(site.prefix, site.optional))
    w = _seed(store, site.cls)
    for good in [ids.new_id(site.prefix)] + ([None] if site.optional else []):
        try:
            site.call(store, ctx(HOME), w, good)
        except InvalidArgument as exc:
            pytest.fail(f"{site.name}: a well-formed {site.prefix}_ id was refused: {exc}")
        except Exception:  # noqa: BLE001 - NotFound and the like are fine here
            pass


# ===========================================================================
# RSC-GEN-6: short strings; no NUL and no lone surrogate anywhere
# ===========================================================================

SHORT_SITES = [
    Site("run.persona_ref", "runs", lambda s, c, w, v: s.create_run(c, make_run(persona_ref=v)),
         read=lambda s, c, w, r: s.get_run(c, r.id).persona_ref),
    Site("update_run.persona_ref", "runs", lambda s, c, w, v: s.update_run(c, make_run(id=w.run_id, persona_ref=v)),
         read=lambda s, c, w, r: s.get_run(c, w.run_id).persona_ref),
    Site("ctx.principal", "runs", lambda s, c, w, v: s.create_run(Context(c.scope, principal=v), make_run()),
         read=lambda s, c, w, r: s.get_run(c, r.id).principal),
    Site("ctx.partition", "runs", lambda s, c, w, v: s.create_run(Context(c.scope, partition=v), make_run())),
    Site("step.type", "runs", lambda s, c, w, v: s.create_step(c, make_step(w.run_id, type=v)),
         read=lambda s, c, w, r: _step_of(s, c, w, r).type),
    Site("tool_call.tool_name", "runs",
         lambda s, c, w, v: s.create_tool_call(c, make_tool_call(w.step_id, w.run_id, tool_name=v)),
         read=lambda s, c, w, r: _tool_call_of(s, c, w, r).tool_name),
    Site("pending.id", "suspensions",
         lambda s, c, w, v: s.create_suspension(
             c, make_suspension(ids.new_id(ids.RUN), pending=(PendingCall(id=v, name="n"),))),
         read=lambda s, c, w, r: s.get_suspension(c, r.run_id).pending[0].id),
    Site("pending.name", "suspensions",
         lambda s, c, w, v: s.create_suspension(
             c, make_suspension(ids.new_id(ids.RUN), pending=(PendingCall(id="i", name=v),))),
         read=lambda s, c, w, r: s.get_suspension(c, r.run_id).pending[0].name),
    Site("decision.decided_by", "checkpoints",
         lambda s, c, w, v: s.resolve(c, w.cp, Decision(approved=True, decided_by=v)),
         read=lambda s, c, w, r: s.get_checkpoint(c, w.cp).decision.decided_by, prepare=_prep_checkpoint),
]


@pytest.mark.clause("RSC-GEN-6")
@pytest.mark.parametrize("site", _params(SHORT_SITES))
def test_short_string_limit_is_255_code_points(store, site):
    """255 code points are accepted and read back exactly (astral characters
    count once each); 256 are refused and nothing is written."""
    _expect_stored(store, site, ["s" * 255, "😀" * 255, "é" * 254 + "x"])
    _expect_invalid(store, site, ["s" * 256, "😀" * 256, "s" * 1000])


BAD_TEXT = ["a\x00b", "\x00", "\ud800", "x\udfffy", "\udbff"]


def _susp_with(**fields: Any) -> Callable:
    return lambda s, c, w, v: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), **{
        k: (f(v) if callable(f) else f) for k, f in fields.items()}))


TEXT_SITES = [
    Site("run.input", "runs", lambda s, c, w, v: s.create_run(c, make_run(input=v)),
         read=lambda s, c, w, r: s.get_run(c, r.id).input),
    Site("run.output", "runs", lambda s, c, w, v: s.create_run(c, make_run(output=v)),
         read=lambda s, c, w, r: s.get_run(c, r.id).output),
    Site("run.error", "runs", lambda s, c, w, v: s.create_run(c, make_run(error=v)),
         read=lambda s, c, w, r: s.get_run(c, r.id).error),
    Site("run.persona_ref", "runs", lambda s, c, w, v: s.create_run(c, make_run(persona_ref=v[:255])),
         read=lambda s, c, w, r: s.get_run(c, r.id).persona_ref),
    Site("run.metadata.nested-key", "runs", lambda s, c, w, v: s.create_run(c, make_run(metadata={"o": {v: 1}})),
         read=lambda s, c, w, r: next(iter(s.get_run(c, r.id).metadata["o"]))),
    Site("run.metadata.nested-value", "runs",
         lambda s, c, w, v: s.create_run(c, make_run(metadata={"o": [1, {"k": v}]})),
         read=lambda s, c, w, r: s.get_run(c, r.id).metadata["o"][1]["k"]),
    Site("run.reply_route.value", "runs", lambda s, c, w, v: s.create_run(c, make_run(reply_route={"to": v})),
         read=lambda s, c, w, r: s.get_run(c, r.id).reply_route["to"]),
    Site("run.reply_route.key", "runs", lambda s, c, w, v: s.create_run(c, make_run(reply_route={v: "x"})),
         read=lambda s, c, w, r: next(iter(s.get_run(c, r.id).reply_route))),
    Site("update_run.input", "runs", lambda s, c, w, v: s.update_run(c, make_run(id=w.run_id, input=v)),
         read=lambda s, c, w, r: s.get_run(c, w.run_id).input),
    Site("update_run.metadata.key", "runs",
         lambda s, c, w, v: s.update_run(c, make_run(id=w.run_id, metadata={"a": [{v: None}]})),
         read=lambda s, c, w, r: next(iter(s.get_run(c, w.run_id).metadata["a"][0]))),
    Site("step.type", "runs", lambda s, c, w, v: s.create_step(c, make_step(w.run_id, type=v[:255])),
         read=lambda s, c, w, r: _step_of(s, c, w, r).type),
    Site("step.input", "runs", lambda s, c, w, v: s.create_step(c, make_step(w.run_id, input=v)),
         read=lambda s, c, w, r: _step_of(s, c, w, r).input),
    Site("step.output", "runs", lambda s, c, w, v: s.create_step(c, make_step(w.run_id, output=v)),
         read=lambda s, c, w, r: _step_of(s, c, w, r).output),
    Site("step.metadata.value", "runs", lambda s, c, w, v: s.create_step(c, make_step(w.run_id, metadata={"k": v})),
         read=lambda s, c, w, r: _step_of(s, c, w, r).metadata["k"]),
    Site("tool_call.arguments", "runs",
         lambda s, c, w, v: s.create_tool_call(c, make_tool_call(w.step_id, w.run_id, arguments=v)),
         read=lambda s, c, w, r: _tool_call_of(s, c, w, r).arguments),
    Site("tool_call.result", "runs",
         lambda s, c, w, v: s.create_tool_call(c, make_tool_call(w.step_id, w.run_id, result=v)),
         read=lambda s, c, w, r: _tool_call_of(s, c, w, r).result),
    Site("tool_call.error", "runs",
         lambda s, c, w, v: s.create_tool_call(c, make_tool_call(w.step_id, w.run_id, error=v)),
         read=lambda s, c, w, r: _tool_call_of(s, c, w, r).error),
    Site("tool_call.tool_name", "runs",
         lambda s, c, w, v: s.create_tool_call(c, make_tool_call(w.step_id, w.run_id, tool_name=v[:255])),
         read=lambda s, c, w, r: _tool_call_of(s, c, w, r).tool_name),
    Site("tool_call.metadata.key", "runs",
         lambda s, c, w, v: s.create_tool_call(c, make_tool_call(w.step_id, w.run_id, metadata={v: {"x": 1}})),
         read=lambda s, c, w, r: next(iter(_tool_call_of(s, c, w, r).metadata))),
    Site("pending.arguments", "suspensions",
         _susp_with(pending=lambda v: (PendingCall(id="i", name="n", arguments=v),)),
         read=lambda s, c, w, r: s.get_suspension(c, r.run_id).pending[0].arguments),
    Site("pending.id", "suspensions", _susp_with(pending=lambda v: (PendingCall(id=v[:255], name="n"),)),
         read=lambda s, c, w, r: s.get_suspension(c, r.run_id).pending[0].id),
    Site("pending.name", "suspensions", _susp_with(pending=lambda v: (PendingCall(id="i", name=v[:255]),)),
         read=lambda s, c, w, r: s.get_suspension(c, r.run_id).pending[0].name),
    Site("continuation.nested-key", "suspensions", _susp_with(continuation=lambda v: {"s": [{v: 1}]}),
         read=lambda s, c, w, r: next(iter(s.get_suspension(c, r.run_id).continuation["s"][0]))),
    Site("continuation.value", "suspensions", _susp_with(continuation=lambda v: {"token": v}),
         read=lambda s, c, w, r: s.get_suspension(c, r.run_id).continuation["token"]),
    Site("checkpoint.reason", "checkpoints", lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(reason=v)),
         read=lambda s, c, w, r: s.get_checkpoint(c, r.id).reason),
    Site("checkpoint.metadata.nested-key", "checkpoints",
         lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(metadata={"a": {"b": {v: True}}})),
         read=lambda s, c, w, r: next(iter(s.get_checkpoint(c, r.id).metadata["a"]["b"]))),
    Site("decision.decided_by", "checkpoints",
         lambda s, c, w, v: s.resolve(c, w.cp, Decision(approved=False, decided_by=v[:255])),
         read=lambda s, c, w, r: s.get_checkpoint(c, w.cp).decision.decided_by, prepare=_prep_checkpoint),
    Site("decision.reason", "checkpoints",
         lambda s, c, w, v: s.resolve(c, w.cp, Decision(approved=True, reason=v)),
         read=lambda s, c, w, r: s.get_checkpoint(c, w.cp).decision.reason, prepare=_prep_checkpoint),
    Site("ctx.principal", "runs", lambda s, c, w, v: s.create_run(Context(c.scope, principal=v[:255]), make_run()),
         read=lambda s, c, w, r: s.get_run(c, r.id).principal),
]

#: Unusual but valid text: control characters, separators, BOM, combining marks, quotes.
ODD_TEXT = "\x01\x1f\t\n\r\x7f\u2028\ufeff😀 e\u0301 \\ ' \" %_ <&> \u00a0"


@pytest.mark.clause("RSC-GEN-6", "RSC-GEN-7")
@pytest.mark.parametrize("site", _params(TEXT_SITES))
def test_nul_and_lone_surrogates_refused_everywhere(store, site):
    """A NUL or a lone surrogate anywhere (fields, nested JSON keys and values,
    pending calls, decisions, the context) is InvalidArgument with nothing
    written; other unusual characters are stored and read back exactly."""
    _expect_invalid(store, site, BAD_TEXT)
    _expect_stored(store, site, [ODD_TEXT])


@pytest.mark.clause("RSC-GEN-6")
@pytest.mark.parametrize("field", ["partition", "principal"])
def test_context_refuses_bad_short_strings(field):
    Context(Scope.parse(HOME), **{field: "p" * 255})
    for bad in ["p" * 256, "a\x00", "\ud800", 5, b"p"]:
        with pytest.raises(InvalidArgument):
            Context(Scope.parse(HOME), **{field: bad})


# ===========================================================================
# RSC-GEN-7: JSON objects
# ===========================================================================

GOOD_JSON = {
    "int": 1,
    "float": 1.0,
    "true": True,
    "false": False,
    "none": None,
    "zero": 0,
    "zero_float": 0.0,
    "neg": -7,
    "int64_max": 2**63 - 1,
    "int64_min": -(2**63),
    "big_float": 1.7976931348623157e308,
    "tiny_float": 5e-324,
    "tenth": 0.1,
    "float_big_int": 1e16,
    "str": "text",
    "empty": "",
    "unicode": "é😀\u2028",
    "list": [1, 1.0, True, None, "s", [], {}, [0, [0.0, False]]],
    "nested": {"a": {"b": {"c": [False, 0, 0.0, "0"]}}},
    "": "empty key",
    "a.b": "dotted key",
    "$x": "dollar key",
    "é😀": "unicode key",
    " ": "space key",
    "1": "numeric-looking key",
}

JSON_SITES = [
    Site("run.metadata", "runs", lambda s, c, w, v: s.create_run(c, make_run(metadata=v)),
         read=lambda s, c, w, r: s.get_run(c, r.id).metadata),
    Site("run.reply_route", "runs", lambda s, c, w, v: s.create_run(c, make_run(reply_route=v)),
         read=lambda s, c, w, r: s.get_run(c, r.id).reply_route),
    Site("update_run.metadata", "runs", lambda s, c, w, v: s.update_run(c, make_run(id=w.run_id, metadata=v)),
         read=lambda s, c, w, r: s.get_run(c, w.run_id).metadata),
    Site("step.metadata", "runs", lambda s, c, w, v: s.create_step(c, make_step(w.run_id, metadata=v)),
         read=lambda s, c, w, r: _step_of(s, c, w, r).metadata),
    Site("tool_call.metadata", "runs",
         lambda s, c, w, v: s.create_tool_call(c, make_tool_call(w.step_id, w.run_id, metadata=v)),
         read=lambda s, c, w, r: _tool_call_of(s, c, w, r).metadata),
    Site("suspension.continuation", "suspensions",
         lambda s, c, w, v: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), continuation=v)),
         read=lambda s, c, w, r: s.get_suspension(c, r.run_id).continuation),
    Site("checkpoint.metadata", "checkpoints", lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(metadata=v)),
         read=lambda s, c, w, r: s.get_checkpoint(c, r.id).metadata),
]

_FIELD = {"run.metadata": "metadata", "run.reply_route": "reply_route", "update_run.metadata": "metadata",
          "step.metadata": "metadata", "tool_call.metadata": "metadata",
          "suspension.continuation": "continuation", "checkpoint.metadata": "metadata"}


@pytest.mark.clause("RSC-GEN-7")
@pytest.mark.parametrize("site", _params(JSON_SITES))
def test_json_object_round_trips_with_exact_types(store, site):
    """1 stays an int, 1.0 a float, True a bool, the int64 bounds and extreme
    floats survive, lists and dicts nest, and any str is a key (empty, dotted,
    `$`-prefixed, unicode)."""
    c = ctx(HOME)
    w = _seed(store, site.cls)
    for value in (GOOD_JSON, {}, {"only": [1.0]}):
        result = site.call(store, c, w, value)
        assert_strict_equal(getattr(result, _FIELD[site.name]), value, f"{site.name} as returned")
        got = site.read(store, c, w, result)
        assert_strict_equal(got, value, f"{site.name} read back")


class _Dummy:
    pass


#: Content that is not JSON (or out of range), placed at the top level and nested.
BAD_JSON_CONTENT = [
    2**63, -(2**63) - 1, 10**30, float("nan"), float("inf"), float("-inf"),
    (1, 2), {1, 2}, frozenset(), b"bytes", bytearray(b"x"), datetime(2026, 1, 1, tzinfo=UTC),
    date(2026, 1, 1), Decimal("1.5"), 1 + 2j, _Dummy(), object, print,
]
BAD_JSON_KEYS = [1, None, (1, 2), True, 1.5, b"k"]


def _bad_json_objects() -> list:
    out: list = []
    for bad in BAD_JSON_CONTENT:
        out += [{"k": bad}, {"a": {"b": [1, {"c": bad}]}}]
    for key in BAD_JSON_KEYS:
        out += [{key: 1}, {"a": [{key: "v"}]}]
    out += [[], "{}", 1, (("k", 1),), {"k": [1, 2], 5: 2}]
    return out


@pytest.mark.clause("RSC-GEN-7")
@pytest.mark.parametrize("site", _params(JSON_SITES))
def test_non_json_content_refused(store, site):
    """Out-of-range ints, non-finite floats, tuples, sets, bytes, datetimes,
    Decimals, other objects and non-`str` keys, at the top or nested, and a
    field that is not a dict at all: InvalidArgument, nothing written."""
    bad = _bad_json_objects()
    if site.name != "run.reply_route":  # reply_route may be None
        bad.append(None)
    _expect_invalid(store, site, bad)


# ===========================================================================
# RSC-GEN-8: 8 MiB entities
# ===========================================================================


@pytest.mark.clause("RSC-GEN-8", "RUN-CREATE-3")
@classes("runs")
@pytest.mark.parametrize("over", [True, False], ids=["one-byte-over", "comfortably-under"])
def test_entity_size_limit(store, clock, over):
    """The run as it would be stored (scope, principal and stamps included) is
    measured with `cortex_spec`'s size function: one byte over 8 MiB is
    refused, 64 KiB under is accepted and read back whole."""
    c = ctx(HOME, principal="alice")
    base = make_run(metadata={"k": "v"})
    stored_form = attrs.evolve(base, scope=c.scope, principal=c.principal,
                               created_at=clock.now(), updated_at=clock.now())
    target = MAX_ENTITY_BYTES + 1 if over else MAX_ENTITY_BYTES - 64 * 1024
    text = "x" * (target - entity_size(stored_form))
    run = attrs.evolve(base, input=text)
    assert entity_size(attrs.evolve(stored_form, input=text)) == target
    if over:
        before = state_view(store, [HOME])
        with pytest.raises(InvalidArgument):
            store.create_run(c, run)
        assert state_view(store, [HOME]) == before
        with pytest.raises(RunNotFound):
            store.get_run(c, run.id)
    else:
        store.create_run(c, run)
        got = store.get_run(c, run.id)
        assert len(got.input) == len(text) and got.input == text


# ===========================================================================
# RSC-GEN-9: counters and indexes
# ===========================================================================

COUNTER_SITES = [
    Site("run.step_count", "runs", lambda s, c, w, v: s.create_run(c, make_run(step_count=v)),
         read=lambda s, c, w, r: s.get_run(c, r.id).step_count),
    Site("run.tokens_used", "runs", lambda s, c, w, v: s.create_run(c, make_run(tokens_used=v)),
         read=lambda s, c, w, r: s.get_run(c, r.id).tokens_used),
    Site("update_run.step_count", "runs", lambda s, c, w, v: s.update_run(c, make_run(id=w.run_id, step_count=v)),
         read=lambda s, c, w, r: s.get_run(c, w.run_id).step_count),
    Site("update_run.tokens_used", "runs", lambda s, c, w, v: s.update_run(c, make_run(id=w.run_id, tokens_used=v)),
         read=lambda s, c, w, r: s.get_run(c, w.run_id).tokens_used),
    Site("step.index", "runs", lambda s, c, w, v: s.create_step(c, make_step(w.run_id, index=v)),
         read=lambda s, c, w, r: _step_of(s, c, w, r).index),
    Site("step.tokens_used", "runs", lambda s, c, w, v: s.create_step(c, make_step(w.run_id, tokens_used=v)),
         read=lambda s, c, w, r: _step_of(s, c, w, r).tokens_used),
    Site("checkpoint.step_index", "checkpoints",
         lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(step_index=v)),
         read=lambda s, c, w, r: s.get_checkpoint(c, r.id).step_index),
]


@pytest.mark.clause("RSC-GEN-9")
@pytest.mark.parametrize("site", _params(COUNTER_SITES))
def test_counters_are_non_negative_ints(store, site):
    """`bool`, negative numbers, floats (even whole ones), strings and None are
    refused; 0 and large ints (beyond 32 bits, beyond a double's exact range)
    are stored and read back as `int`."""
    _expect_invalid(store, site, [True, False, -1, -(2**63), 1.0, 0.0, "1", None, Decimal(1)])
    _expect_stored(store, site, [0, 7, 2**31 + 1, 2**53 + 1])


# ===========================================================================
# RSC-GEN-10: enumerations
# ===========================================================================

ENUM_SITES = [
    Site("run.state", "runs", lambda s, c, w, v: s.create_run(c, make_run(state=v)),
         read=lambda s, c, w, r: s.get_run(c, r.id).state),
    Site("update_run.state", "runs", lambda s, c, w, v: s.update_run(c, make_run(id=w.run_id, state=v)),
         read=lambda s, c, w, r: s.get_run(c, w.run_id).state),
    Site("list_runs.filter.state", "runs", lambda s, c, w, v: s.list_runs(c, RunFilter(state=v))),
    Site("count_runs.filter.state", "runs", lambda s, c, w, v: s.count_runs(c, RunFilter(state=v))),
    Site("suspension.reason", "suspensions",
         lambda s, c, w, v: s.create_suspension(c, make_suspension(ids.new_id(ids.RUN), reason=v)),
         read=lambda s, c, w, r: s.get_suspension(c, r.run_id).reason),
]
_ENUM_OF = {"run.state": RunState, "update_run.state": RunState, "list_runs.filter.state": RunState,
            "count_runs.filter.state": RunState, "suspension.reason": SuspensionReason}


@pytest.mark.clause("RSC-GEN-10", "RUN-ENT-1", "RUN-LIST-5")
@pytest.mark.parametrize("site", _params(ENUM_SITES))
def test_enumerations_accept_only_their_values(store, site):
    """Each member, as the enum or as its exact lowercase string, is accepted
    (and reads back as that member); any other value, including case and
    whitespace variants and members of another enumeration, is refused."""
    enum = _ENUM_OF[site.name]
    foreign = SuspensionReason.APPROVAL if enum is RunState else RunState.PAUSED
    first = next(iter(enum)).value
    bad = ["bogus", "", first.upper(), first.capitalize(), f" {first}", f"{first} ", 1, 0, foreign,
           CheckpointState.PENDING]
    if "filter" not in site.name:
        bad.append(None)
    _expect_invalid(store, site, bad)
    members = list(enum)
    _expect_stored(store, site, members + [m.value for m in members],
                   expect=lambda v: enum(v if isinstance(v, str) else v.value))


@pytest.mark.clause("RSC-GEN-10", "CP-CREATE-2")
@classes("checkpoints")
def test_checkpoint_state_enumeration(store):
    site = Site("checkpoint.state", "checkpoints",
                lambda s, c, w, v: s.create_checkpoint(c, make_checkpoint(state=v)))
    _expect_invalid(store, site, ["bogus", "PENDING", " pending", "", None, 1, RunState.CREATED])
    for good in (CheckpointState.PENDING, "pending"):
        cp = store.create_checkpoint(ctx(HOME), make_checkpoint(state=good))
        assert store.get_checkpoint(ctx(HOME), cp.id).state == CheckpointState.PENDING


# ===========================================================================
# RSC-GEN-11: binary collation
# ===========================================================================

#: TypeID suffixes whose code-point order differs from natural/numeric order
#: ("...9" < "...10" numerically, "...10" < "...9" by code point).
CRAFTED_SUFFIXES = [
    "0000000000000000000000000a",
    "00000000000000000000000010",
    "00000000000000000000000009",
    "7zzzzzzzzzzzzzzzzzzzzzzzzz",
    "0000000000000000000000009z",
    "000000000000000000000000a1",
    "10000000000000000000000000",
    "00000000000000000000000z00",
]


def _crafted(prefix: str) -> list[str]:
    out = [f"{prefix}_{s}" for s in CRAFTED_SUFFIXES]
    assert all(ids.is_id(i, prefix) for i in out)
    assert out != sorted(out)
    return out


@pytest.mark.clause("RSC-GEN-11", "RUN-LIST-2", "STEP-4", "TCALL-2")
@classes("runs")
def test_id_tie_breaks_use_code_point_order_runs(store):
    c = ctx(HOME)
    run_ids = _crafted(ids.RUN)
    for rid in run_ids:
        store.create_run(c, make_run(id=rid))
    assert [r.id for r in store.list_runs(c)] == sorted(run_ids, reverse=True)
    assert [r.id for r in store.list_runs(c, RunFilter(limit=3, offset=2))] == sorted(run_ids, reverse=True)[2:5]
    step_ids = _crafted(ids.STEP)
    for sid in step_ids:
        store.create_step(c, make_step(run_ids[0], id=sid, index=1))
    assert [s.id for s in store.list_steps(c, run_ids[0])] == sorted(step_ids)
    tc_ids = _crafted(ids.TOOL_CALL)
    for tid in tc_ids:
        store.create_tool_call(c, make_tool_call(step_ids[0], run_ids[0], id=tid))
    assert [t.id for t in store.list_tool_calls(c, step_ids[0])] == sorted(tc_ids)


@pytest.mark.clause("RSC-GEN-11", "SUSP-LIST-3", "SUSP-XLIST-1")
@classes("suspensions")
def test_id_tie_breaks_use_code_point_order_suspensions(store):
    sus_ids = _crafted(ids.SUSPENSION)
    scopes = ["ws=w1", "ws=w1/proj=p1", "ws=w2"]
    for i, sid in enumerate(sus_ids):
        store.create_suspension(ctx(scopes[i % 3]), make_suspension(ids.new_id(ids.RUN), id=sid, expires_at=PAST))
    assert [s.id for s in store.list_expired_across_scopes(ZERO, EPOCH)] == sorted(sus_ids)
    assert [s.id for s in store.list_expired_across_scopes(ZERO, EPOCH, limit=3)] == sorted(sus_ids)[:3]
    mine = [sid for i, sid in enumerate(sus_ids) if scopes[i % 3] != "ws=w2"]
    assert [s.id for s in store.list_expired(ctx("ws=w1"), EPOCH)] == sorted(mine)


@pytest.mark.clause("RSC-GEN-11", "CP-LIST-2", "CP-XLIST-1", "CP-XLIST-2", "CP-XLIST-4")
@classes("checkpoints")
def test_id_order_and_cursor_use_code_point_order_checkpoints(store):
    cp_ids = _crafted(ids.CHECKPOINT)
    scopes = ["ws=w1", "ws=w1/proj=p1", "ws=w2"]
    for i, cid in enumerate(cp_ids):
        store.create_checkpoint(ctx(scopes[i % 3]), make_checkpoint(id=cid))
    ordered = sorted(cp_ids)
    assert [c.id for c in store.list_pending_across_scopes(ZERO)] == ordered
    assert [c.id for c in store.list_pending_across_scopes(ZERO, after_id=ordered[3])] == ordered[4:]
    # a cursor that names no stored checkpoint, between "...0a" and "...10"
    cursor = "acp_0000000000000000000000000b"
    assert [c.id for c in store.list_pending_across_scopes(ZERO, after_id=cursor)] == [i for i in ordered if i > cursor]
    pages, after = [], None
    while True:
        page = store.list_pending_across_scopes(ZERO, after_id=after, limit=3)
        if not page:
            break
        pages += [c.id for c in page]
        after = page[-1].id
    assert pages == ordered
    mine = [cid for i, cid in enumerate(cp_ids) if scopes[i % 3] != "ws=w2"]
    assert [c.id for c in store.list_pending(ctx("ws=w1"))] == sorted(mine)
    assert [c.id for c in store.list_pending(ctx("ws=w1"), CheckpointFilter(offset=1, limit=2))] == sorted(mine)[1:3]


# ===========================================================================
# RSC-GEN-12: linearizability
# ===========================================================================

_MUTABLE = ("agent_id", "session_id", "state", "input", "output", "error", "step_count", "tokens_used",
            "started_at", "completed_at", "persona_ref", "metadata")


def _payload(i: int, size: int = 4000) -> dict[str, Any]:
    """Writer ``i``'s whole set of mutable fields; every field tells ``i`` apart."""
    return dict(
        agent_id=f"agt_{'0' * 24}{i:02d}",
        session_id=f"ses_{'0' * 24}{i:02d}",
        state=list(RunState)[i % len(RunState)],
        input=f"in-{i}-" + chr(0x41 + i % 26) * size,
        output=f"out-{i}-" + chr(0x61 + i % 26) * size,
        error=f"err-{i}",
        step_count=i,
        tokens_used=100_000 + i,
        started_at=EPOCH + timedelta(seconds=i),
        completed_at=EPOCH + timedelta(minutes=i),
        persona_ref=f"persona-{i}",
        metadata={"writer": i, "items": [i] * (size // 20), "nested": {"w": str(i)}},
    )


def _fields(run: Any) -> dict[str, Any]:
    return {f: getattr(run, f) for f in _MUTABLE}


@pytest.mark.clause("RSC-GEN-12", "RUN-UPD-6")
@classes("runs")
def test_concurrent_whole_updates_are_never_seen_mixed(store, profile):
    """Writers each replace every mutable field of one run with their own
    payload while readers read it: every read, and the final state, shows
    exactly one writer's complete payload (or the original), never a mix."""
    c = ctx(HOME)
    writers = profile.race_threads
    readers = max(2, profile.race_threads // 2)
    payloads = {i: _payload(i) for i in range(writers + 1)}
    for i, p in payloads.items():
        assert ids.is_id(p["agent_id"], ids.AGENT) and ids.is_id(p["session_id"], ids.SESSION), i
    original = writers  # the payload the run starts with
    for _ in range(profile.race_rounds):
        run = store.create_run(c, make_run(id=ids.new_id(ids.RUN), **payloads[original]))

        def write(i: int) -> None:
            store.update_run(c, make_run(id=run.id, **payloads[i]))

        def read() -> list:
            return [_fields(store.get_run(c, run.id)) for _ in range(20)]

        outcomes = race([functools.partial(write, i) for i in range(writers)] + [read] * readers)
        for o in outcomes:
            assert o.ok, repr(o.error)
        for o in outcomes[writers:]:
            for seen in o.value:
                i = seen["step_count"]
                assert i in payloads and strict_equal(seen, payloads[i]), f"a read mixed writers: {seen['step_count']}"
        final = _fields(store.get_run(c, run.id))
        assert final["step_count"] in range(writers) and strict_equal(final, payloads[final["step_count"]])


@pytest.mark.clause("RSC-GEN-12")
@classes("runs")
def test_concurrent_creates_never_listed_half_written(store, profile):
    """Creators add runs with large payloads while listers list: every listed
    run is complete (equal to what its create returned), a lister never sees a
    run disappear, and at the end every run is listed."""
    creators = profile.race_threads
    listers = max(2, profile.race_threads // 2)
    for n in range(profile.race_rounds):
        c = ctx(f"ws=w1/round=r{n}")  # a fresh scope per round: lists show only this round
        present: set[str] = set()

        def create(i: int) -> list:
            return [store.create_run(c, make_run(**_payload((i * 3 + k) % 26, size=1000))) for k in range(3)]

        def lister() -> list:
            return [store.list_runs(c) for _ in range(10)]

        outcomes = race([functools.partial(create, i) for i in range(creators)] + [lister] * listers)
        for o in outcomes:
            assert o.ok, repr(o.error)
        created = {r.id: r for o in outcomes[:creators] for r in o.value}
        for o in outcomes[creators:]:
            seen_before: set[str] = set()
            for snapshot in o.value:
                new = [r for r in snapshot if r.id not in present]
                for r in new:
                    assert r.id in created, "a listed run was never created"
                    assert_strict_equal(r, created[r.id], "a run listed while being created")
                ids_now = {r.id for r in new}
                assert seen_before <= ids_now, "a run vanished from a later list"
                seen_before = ids_now
        assert set(created) <= {r.id for r in store.list_runs(c)}


@pytest.mark.clause("RSC-GEN-12", "CP-RESOLVE-4", "CP-ENT-1")
@classes("checkpoints")
def test_concurrent_resolve_is_never_seen_half_applied(store, profile):
    """Resolvers race on one pending checkpoint while readers read it: each
    read is either pending without decision or resolved with the winner's
    complete decision, and a reader never goes back to pending."""
    c = ctx(HOME)
    resolvers = profile.race_threads
    readers = max(2, profile.race_threads // 2)
    decisions = [Decision(approved=i % 2 == 0, decided_by=f"judge-{i}", reason=f"reason {i} " * 50)
                 for i in range(resolvers)]
    for _ in range(profile.race_rounds):
        cp = store.create_checkpoint(c, make_checkpoint())

        def read() -> list:
            out = []
            for _ in range(20):
                got = store.get_checkpoint(c, cp.id)
                out.append((got.state, got.decision, got.updated_at))
            return out

        outcomes = race([functools.partial(store.resolve, c, cp.id, d) for d in decisions] + [read] * readers)
        winners = [i for i, o in enumerate(outcomes[:resolvers]) if o.ok]
        assert len(winners) == 1
        for o in outcomes[:resolvers]:
            assert o.ok or isinstance(o.error, InvalidState), repr(o.error)
        win = decisions[winners[0]]
        final = store.get_checkpoint(c, cp.id)
        assert (final.decision.approved, final.decision.decided_by, final.decision.reason) == (
            win.approved, win.decided_by, win.reason)
        for o in outcomes[resolvers:]:
            assert o.ok, repr(o.error)
            resolved_seen = False
            for state, decision, updated_at in o.value:
                if state == CheckpointState.PENDING:
                    assert decision is None and not resolved_seen
                    assert updated_at == cp.updated_at
                else:
                    resolved_seen = True
                    assert_strict_equal(decision, final.decision, "decision seen by a reader")
                    assert updated_at == final.updated_at
