"""Unit tests of the contract library: ids, clock, errors, validation, Scope."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_spec import Context, ManualClock, Scope, errors, ids
from cortex_spec.clock import EPOCH, from_millis, to_instant, to_millis, truncate_ms
from cortex_spec.context import require_context, require_scope
from cortex_spec.validation import (
    MAX_ENTITY_BYTES,
    check_count,
    check_json_object,
    check_page,
    check_short_str,
    copy_json,
    entity_size,
    page,
)

# -- ids -----------------------------------------------------------------------------


def test_new_id_has_prefix_and_validates():
    rid = ids.new_id(ids.RUN)
    assert rid.startswith("arun_") and len(rid) == len("arun_") + 26
    assert ids.check_id(rid, ids.RUN, "run_id") == rid


def test_new_ids_are_k_sortable():
    made = [ids.new_id(ids.RUN) for _ in range(200)]
    assert made == sorted(made)
    assert len(set(made)) == 200


@pytest.mark.parametrize(
    "value",
    [
        None,
        42,
        b"arun_01m8ndjptte62t9wamc3yt2ac5",
        "",
        "arun",
        "arun_",
        "sus_01m8ndjptte62t9wamc3yt2ac5",  # wrong prefix
        "ARUN_01m8ndjptte62t9wamc3yt2ac5",
        "arun_01M8NDJPTTE62T9WAMC3YT2AC5",  # upper-case suffix
        "arun_81m8ndjptte62t9wamc3yt2ac5",  # first char > 7 overflows 128 bits
        "arun_01m8ndjptte62t9wamc3yt2ac",  # too short
        "arun_01m8ndjptte62t9wamc3yt2ac5x",
        "arun_01m8ndjptte62t9wamc3yt2ac\x00",
    ],
)
def test_check_id_refuses(value):
    with pytest.raises(errors.InvalidArgument):
        ids.check_id(value, ids.RUN, "run_id")


def test_is_id_fast_path_agrees_with_the_typeid_library():
    """ids.is_id accepts by one regular expression; it must accept exactly
    what TypeID.from_string accepts (with the prefix)."""
    import random

    from typeid import TypeID

    def library(value):
        try:
            return TypeID.from_string(value).prefix == ids.RUN
        except Exception:  # noqa: BLE001 - any refusal
            return False

    rng = random.Random(14)
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCZ_-\x00 "
    good = ids.new_id(ids.RUN)
    samples = [good, good[:-1] + "u", good[:-1] + "i", good[:-1] + "L", good.replace("_", "_8", 1)[:-1]]
    for _ in range(3000):
        chars = list(good)
        for _ in range(rng.randint(1, 3)):
            chars[rng.randrange(len("arun_"), len(chars))] = rng.choice(alphabet)
        samples.append("".join(chars))
    for value in samples:
        assert ids.is_id(value, ids.RUN) == library(value), value


def test_optional_id():
    assert ids.check_optional_id(None, ids.RUN, "x") is None
    with pytest.raises(errors.InvalidArgument):
        ids.check_optional_id("", ids.RUN, "x")


# -- clock ---------------------------------------------------------------------------


def test_truncate_ms_drops_microseconds_and_converts_to_utc():
    plus2 = timezone(timedelta(hours=2))
    t = datetime(2026, 5, 1, 12, 0, 0, 123999, tzinfo=plus2)
    got = truncate_ms(t)
    assert got == datetime(2026, 5, 1, 10, 0, 0, 123000, tzinfo=UTC)
    assert got.utcoffset() == timedelta(0)


def test_to_instant_refuses_naive_and_non_datetimes():
    with pytest.raises(errors.InvalidArgument):
        to_instant(datetime(2026, 1, 1))
    with pytest.raises(errors.InvalidArgument):
        to_instant("2026-01-01T00:00:00Z")


def test_millis_round_trip_exact():
    for t in (EPOCH, datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
              datetime(2999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)):
        assert from_millis(to_millis(t)) == t


def test_manual_clock_moves_only_when_told():
    c = ManualClock()
    assert c.now() == EPOCH
    c.advance(milliseconds=1500)
    assert c.now() == EPOCH + timedelta(milliseconds=1500)
    c.advance(timedelta(microseconds=999))  # sub-ms steps are truncated away
    assert c.now() == EPOCH + timedelta(milliseconds=1500)
    c.set(EPOCH - timedelta(days=1))
    assert c.now() == EPOCH - timedelta(days=1)
    with pytest.raises(errors.InvalidArgument):
        c.set(datetime(2026, 1, 1))


def test_manual_clock_is_thread_safe():
    c = ManualClock()

    def bump():
        for _ in range(1000):
            c.advance(milliseconds=1)

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.now() == EPOCH + timedelta(milliseconds=8000)


def test_race_runs_its_threads_interleaved_and_restores_the_switch_interval():
    """Racing threads run at RACE_SWITCH_INTERVAL (a store whose calls never
    release the interpreter finishes a read and its write inside one 5 ms
    slice otherwise); the interval is put back after, also when a call
    fails; every outcome comes back in the order of the calls."""
    import sys

    from cortex_spec import testing

    before = sys.getswitchinterval()
    assert before > testing.RACE_SWITCH_INTERVAL  # the default (5 ms) is what the race lowers

    def fails():
        raise ValueError("boom")

    outcomes = testing.race([sys.getswitchinterval, fails, lambda: threading.current_thread().name])
    assert outcomes[0].value == pytest.approx(testing.RACE_SWITCH_INTERVAL)  # kept in microseconds
    assert isinstance(outcomes[1].error, ValueError) and not outcomes[1].ok
    assert outcomes[2].value == "cortex-race-2"
    assert sys.getswitchinterval() == before
    with pytest.raises(RuntimeError), testing.interleaved():
        assert sys.getswitchinterval() == pytest.approx(testing.RACE_SWITCH_INTERVAL)
        raise RuntimeError("inside")
    assert sys.getswitchinterval() == before
    sys.setswitchinterval(testing.RACE_SWITCH_INTERVAL / 2)  # a finer interval is kept
    try:
        finer = sys.getswitchinterval()
        with testing.interleaved():
            assert sys.getswitchinterval() == finer
        assert sys.getswitchinterval() == finer
    finally:
        sys.setswitchinterval(before)


# -- errors --------------------------------------------------------------------------


def test_every_error_is_a_cortex_error_except_backend_unavailable():
    for name in errors.__all__:
        cls = getattr(errors, name)
        if name == "BackendUnavailable":
            assert not issubclass(cls, errors.CortexError)
        else:
            assert issubclass(cls, errors.CortexError), name


@pytest.mark.parametrize(
    "child,parent",
    [
        (errors.RunNotFound, errors.NotFound),
        (errors.CheckpointNotFound, errors.NotFound),
        (errors.DeliveryNotFound, errors.NotFound),
        (errors.AskNotFound, errors.NotFound),
        (errors.InvalidPerformative, errors.InvalidArgument),
        (errors.SelfAddressed, errors.InvalidArgument),
        (errors.DeliveryAlreadyBound, errors.InvalidState),
    ],
)
def test_error_family(child, parent):
    assert issubclass(child, parent)


def test_not_suspended_is_not_a_not_found():
    # NotSuspended also means "the run is not paused": it is its own class.
    assert not issubclass(errors.NotSuspended, errors.NotFound)


# -- context ---------------------------------------------------------------------------


def test_context_validates_at_construction():
    with pytest.raises(errors.InvalidArgument):
        Context("ws=a")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument):
        Context(Scope(), partition="p\x00")
    with pytest.raises(errors.InvalidArgument):
        Context(Scope(), principal="x" * 256)
    assert Context.of("ws=a").scope == Scope(("ws", "a"))


def test_require_scope_precedence():
    with pytest.raises(errors.InvalidArgument):
        require_scope(None)
    with pytest.raises(errors.NoScope):
        require_scope(Context(Scope()))
    assert require_context(Context(Scope())).scope.is_zero


# -- validation ------------------------------------------------------------------------


def test_short_strings():
    assert check_short_str("é" * 255, "f") == "é" * 255
    for bad in ("x" * 256, "a\x00b", "\ud800", 5):
        with pytest.raises(errors.InvalidArgument):
            check_short_str(bad, "f")


def test_counts():
    assert check_count(0, "n") == 0
    assert check_count(2**63 - 1, "n") == 2**63 - 1
    for bad in (-1, True, 1.0, "1", 2**63):
        with pytest.raises(errors.InvalidArgument):
            check_count(bad, "n")


def test_json_object_rules():
    ok = {"i": 1, "f": 1.0, "b": True, "n": None, "s": "x", "l": [1, [2.5]], "d": {"k": {}}}
    assert check_json_object(ok, "m") is ok
    for bad in (
        [],
        {1: "x"},
        {"t": (1, 2)},
        {"s": {1}},
        {"x": float("nan")},
        {"x": float("inf")},
        {"x": 2**63},
        {"x": -(2**63) - 1},
        {"x": b"bytes"},
        {"x": datetime.now(UTC)},
        {"k\x00": 1},
        {"k": "\ud800"},
    ):
        with pytest.raises(errors.InvalidArgument):
            check_json_object(bad, "m")


def test_copy_json_is_deep_and_type_exact():
    src = {"a": [1, {"b": 1.0}], "c": True}
    dup = copy_json(src)
    assert dup == src and dup is not src and dup["a"] is not src["a"]
    assert type(dup["a"][1]["b"]) is float and type(dup["c"]) is bool


def test_entity_size_counts_utf8_bytes():
    assert entity_size({"a": "é"}) == len('{"a":"é"}'.encode())
    assert MAX_ENTITY_BYTES == 8 * 1024 * 1024


def _encoded_size(value: object) -> int:
    """RSC-GEN-8's measure as the contract words it: the compact JSON, encoded."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


_ESCAPED = st.sampled_from(['"', "\\", "\b", "\t", "\n", "\f", "\r", "\x00", "\x1f", "\x7f", "/",
                            "\ud800", "\udfff", "é", "\U0001F600", "\u2028", "x"])


@settings(max_examples=200, deadline=None)
@given(head=st.text(max_size=50), pieces=st.lists(_ESCAPED, max_size=40), repeat=st.integers(1, 300),
       key=st.text(max_size=5))
def test_entity_size_of_long_strings_equals_the_encoded_size(head, pieces, repeat, key):
    """Strings of 4096 code points and more are measured without the
    encoder: to the byte what the encoder gives, escapes, surrogates and
    wide characters included, alone, nested in lists and objects, and
    beside short strings."""
    long = (head + "".join(pieces)) * repeat + "q" * 4096
    for value in (long, [long, head], {key: long, "b": [1, 2.5, None, True, {"c": long}]}, {"s": head}):
        assert entity_size(value) == _encoded_size(value), value if len(str(value)) < 200 else len(str(value))


def test_page_and_check_page():
    rows = list(range(10))
    assert page(rows, 3, 2) == [2, 3, 4]
    assert page(rows, 0, 0) == rows
    assert page(rows, 5, 20) == []
    assert check_page(-5, -1) == (0, 0)
    with pytest.raises(errors.InvalidArgument):
        check_page(True, 0)
    with pytest.raises(errors.InvalidArgument):
        check_page(1, "2")


# -- scope -----------------------------------------------------------------------------


def test_scope_helpers():
    s = Scope.of(workspace="w", project="p")
    assert s.canonical() == "workspace=w/project=p"
    assert s.parent() == Scope.of(workspace="w")
    assert s.child("env", "prod").depth == 3
    assert s.ancestors() == [Scope.of(workspace="w")]
    assert repr(s) == "Scope.parse('workspace=w/project=p')"
    assert Scope().parent().is_zero
    with pytest.raises(AttributeError):
        s._levels = ()  # type: ignore[misc]


def test_a_listing_by_parent_takes_the_parent_by_position_or_by_name():
    """``Listing.parent`` (kinds): ``list_steps(ctx, run_id)`` as the runs
    protocol declares it — one positional or keyword parent, checked by its
    field's kind after the scope, nothing else."""
    from cortex_spec.reference import MemoryStore
    from cortex_spec.runs import Step

    store = MemoryStore()
    c = Context.of("ws=w1")
    run_id = ids.new_id(ids.RUN)
    step = store.create_step(c, Step(id=ids.new_id(ids.STEP), run_id=run_id))
    assert store.list_steps(c, run_id) == store.list_steps(c, run_id=run_id) == [step]
    for call in (lambda: store.list_steps(c), lambda: store.list_steps(c, run_id, run_id),
                 lambda: store.list_steps(c, run_id, run_id=run_id), lambda: store.list_steps(c, run_id, limit=1)):
        with pytest.raises(TypeError):
            call()
    with pytest.raises(errors.InvalidArgument, match="run_id"):
        store.list_steps(c, ids.new_id(ids.STEP))
    with pytest.raises(errors.NoScope):
        store.list_steps(Context.of(""), "garbage")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=30)


def _retyped(value: object) -> object | None:
    """``value`` with its first bool, int or float leaf (depth first) made
    equal by ``==`` but of another type; None when it has none."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return float(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, list):
        for i, item in enumerate(value):
            changed = _retyped(item)
            if changed is not None:
                return value[:i] + [changed] + value[i + 1:]
    if isinstance(value, dict):
        for key, item in value.items():
            changed = _retyped(item)
            if changed is not None:
                return {**value, key: changed}
    return None


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_strict_equal_is_type_exact_deep_equality(value):
    """``testing.strict_equal`` (RSC-GEN-7's checks): a deep copy is equal
    (NaN included), the same value with one leaf of another type that ``==``
    accepts (``1``/``1.0``/``True``) is not, and an entity compares field by
    field, a str-valued enum equal to its string."""
    import copy

    from cortex_spec.runs import RunState, make_run
    from cortex_spec.testing import strict_equal

    assert strict_equal(value, copy.deepcopy(value))
    retyped = _retyped(value)
    if retyped is not None:
        assert retyped == value or value != value  # NaN aside, == cannot tell them apart
        assert not strict_equal(value, retyped) and not strict_equal(retyped, value)
        assert not strict_equal(make_run(metadata={"v": value}), make_run(metadata={"v": retyped}))
    run = make_run(metadata={"v": value})
    assert strict_equal(run, copy.deepcopy(run))
    assert strict_equal(RunState.PAUSED, "paused") and strict_equal(["paused"], [RunState.PAUSED])
    assert not strict_equal(RunState.PAUSED, "running") and not strict_equal((1, 2), [1, 2])
