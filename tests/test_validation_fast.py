"""The fast paths of the contract's checks and of the SQL row codecs give the
answers of their general paths (issue 14: the claim and accept paths made
cheap without weakening a check).

Each fast path only ever *accepts* (or decodes) the common, well-formed
value; these properties compare it, on every kind of input, with the
general code it stands in front of: the same value back, or the same error
class with the same message.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum
from typing import Any, Callable

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_spec import Context, Scope, errors, gateway, validation
from cortex_spec.adapters.sql import store as sql_store
from cortex_spec.a2a import DeliveryState
from cortex_spec.clock import from_millis, to_instant
from cortex_spec.entities import entity
from cortex_spec.gateway import InboundMessage, InboxItem, ItemStatus, validate_message
from cortex_spec.runs import RunState
from cortex_spec.suspensions import SuspensionReason


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """What a call gives: ``("ok", type, value)`` or ``("error", class, message)``."""
    try:
        value = fn(*args)
    except errors.CortexError as exc:
        return ("error", type(exc), str(exc))
    return ("ok", type(value), value)


# -- the string checks ------------------------------------------------------------------


class _Str(str):
    """A str subclass: never the fast path's (``type(value) is str``)."""


#: Characters the checks care about: NUL, lone surrogates, non-ASCII, controls.
_CHARS = st.sampled_from(["a", "Z", "\x00", "\ud800", "\udfff", "é", "\U0001F600", "\x7f", "\x1f", "/", " "])
_TEXTS = st.one_of(
    st.text(max_size=20),
    st.lists(_CHARS, max_size=12).map("".join),
    # around the short-string limit, with or without a bad character
    st.tuples(st.integers(250, 260), st.sampled_from(["", "\x00", "é", "\ud800"])).map(
        lambda n_bad: "x" * n_bad[0] + n_bad[1]),
)
_VALUES = st.one_of(_TEXTS, _TEXTS.map(_Str), st.none(), st.integers(), st.booleans(),
                    st.binary(max_size=4), st.lists(st.text(max_size=2), max_size=2))

_STRING_CHECKS = [
    (validation.check_str, validation._check_str_general),
    (validation.check_short_str, validation._check_short_str_general),
    (validation.check_nonempty_short_str, validation._check_nonempty_short_str_general),
]


@settings(max_examples=400, deadline=None)
@given(value=_VALUES)
def test_string_checks_answer_as_their_general_paths(value: object) -> None:
    for fast, general in _STRING_CHECKS:
        assert outcome(fast, value, "field") == outcome(general, value, "field"), (fast.__name__, value)


def test_string_checks_still_refuse_what_rsc_gen_6_refuses() -> None:
    for bad, words in (("a\x00b", r"U\+0000"), ("\ud800", "lone surrogate"), ("x" * 256, "256 code points")):
        with pytest.raises(errors.InvalidArgument, match=words):
            validation.check_short_str(bad, "f")
    with pytest.raises(errors.InvalidArgument, match="must not be empty"):
        validation.check_nonempty_short_str("", "f")
    with pytest.raises(errors.InvalidArgument, match="must be a str"):
        validation.check_str(b"x", "f")


# -- instants -------------------------------------------------------------------------


_ZONES = st.sampled_from([UTC, timezone.utc, timezone(timedelta(0)), timezone(timedelta(hours=5, minutes=30)),
                          timezone(timedelta(hours=-11)), timezone(timedelta(seconds=1, microseconds=7)), None])


@settings(max_examples=300, deadline=None)
@given(when=st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)), zone=_ZONES,
       whole_ms=st.booleans())
def test_check_instant_answers_as_to_instant(when: datetime, zone: Any, whole_ms: bool) -> None:
    if whole_ms:
        when = when.replace(microsecond=when.microsecond // 1000 * 1000)
    value = when if zone is None else when.replace(tzinfo=zone)
    assert outcome(validation.check_instant, value, "now") == outcome(to_instant, value, "now")
    assert outcome(validation.check_optional_instant, value, "t") == outcome(to_instant, value, "t")


def test_check_instant_refuses_non_datetimes() -> None:
    for bad in ("2026-01-01", 0, None):
        assert outcome(validation.check_instant, bad, "now") == outcome(to_instant, bad, "now")
        assert outcome(validation.check_instant, bad, "now")[0] == "error"


# -- the size bound of flat entities ------------------------------------------------------------


class _Colour(str, Enum):
    RED = "r\u00e9d\x00"


class _Number(int, Enum):
    ONE = 1


@entity
class _Flat:
    """Every kind of field :func:`validation._size_bound` measures, and some it does not."""

    text: str = ""
    other: object = None
    when: datetime | None = None
    scope: Scope = Scope()
    colour: _Colour = _Colour.RED


_ANY_TEXT = st.one_of(st.text(max_size=30), st.lists(_CHARS | st.sampled_from(['"', "\\", "\n", "\b"]),
                                                    max_size=30).map("".join))
_OTHERS = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([-(2**63), 2**63 - 1, 2**63, -(2**64), -1.7976931348623157e308, -2.2250738585072014e-308]),
    st.integers(), _ANY_TEXT, _ANY_TEXT.map(_Str), st.sampled_from([_Number.ONE, ItemStatus.DONE]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
#: JSON objects and arrays of any of the above (nested, tuples, keys that are
#: not exact ``str``), and entities inside them
_NESTED = st.recursive(
    _OTHERS | st.builds(lambda v: _One(v=v), _OTHERS),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_ANY_TEXT | _ANY_TEXT.map(_Str) | st.integers(), inner, max_size=3),
        st.builds(lambda v: _One(v=v), inner)),
    max_leaves=12)
_WHEN = st.one_of(st.none(), st.builds(lambda d, z: d.replace(tzinfo=z), st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)), _ZONES))
_SCOPES = st.sampled_from([Scope(), Scope.parse("ws=w1"), Scope.parse("wé=\U0001F600/p=\"q\\"),
                           Scope(("a" * 255, "b" * 255), ("c", "d"), ("e", "f")),
                           Scope(("\U0001F600" * 255, '"' * 255), ("\\" * 255, "\x01" * 255))])


@settings(max_examples=400, deadline=None)
@given(text=_ANY_TEXT, other=_OTHERS | _NESTED, when=_WHEN, scope=_SCOPES)
def test_size_bound_is_an_upper_bound_of_entity_size(text: str, other: object, when: Any, scope: Scope) -> None:
    value = _Flat(text=text, other=other, when=when, scope=scope)
    bound = validation._size_bound(value)
    if bound is not None:
        assert bound >= validation.entity_size(value), value


@entity
class _One:
    """One field: the bound's slack outside the value is a few bytes."""

    v: object = None


@settings(max_examples=400, deadline=None)
@given(value=st.one_of(_ANY_TEXT, _OTHERS, _WHEN, _SCOPES, st.just(_Colour.RED), _NESTED))
def test_size_bound_of_each_kind_of_field_is_an_upper_bound(value: object) -> None:
    one = _One(v=value)
    bound = validation._size_bound(one)
    if bound is not None:
        assert bound >= validation.entity_size(one), value


@pytest.mark.parametrize("value", [
    {"k": '"' * 100}, ["\x01" * 50], ("\\" * 64,), {"a": [{"b": "\U0001F600" * 40}]}, [[[["\x1f" * 30]]]],
    {"\x02" * 40: None}, [_One(v="\x03" * 40)], {"e": _One(v={"f": "\ud800" * 40})},
], ids=["quotes", "controls", "backslashes", "wide", "deep", "key", "entity", "surrogates"])
def test_size_bound_of_nested_values_covers_their_widest_characters(value: object) -> None:
    """Strings deep inside JSON values, in keys and in nested entities, made
    of the characters JSON writes widest: the bound still covers them."""
    one = _One(v=value)
    bound = validation._size_bound(one)
    assert bound is not None and bound >= validation.entity_size(one), value


@settings(max_examples=400, deadline=None)
@given(text=_ANY_TEXT, other=_OTHERS | _NESTED, when=_WHEN, scope=_SCOPES, value=st.one_of(
    _ANY_TEXT, _OTHERS, _WHEN, _SCOPES, st.just(_Colour.RED), _NESTED))
def test_size_bound_by_plan_is_the_field_by_field_bound(text: str, other: object, when: Any, scope: Scope,
                                                         value: object) -> None:
    """The planned sum (one per combination of the values' types) is the sum
    of the fields' bounds, None included, for every kind of value; asked
    twice, the second time from the kept plan."""
    for entity_ in (_Flat(text=text, other=other, when=when, scope=scope), _One(v=value)):
        general = validation._general_size_bound(entity_)
        assert validation._size_bound(entity_) == general, entity_
        assert validation._size_bound(entity_) == general, entity_


def _item(text: str) -> InboxItem:
    return InboxItem(channel="c", message_id="m", text=text, received_at=datetime(2026, 1, 1, tzinfo=UTC))


def test_check_entity_size_near_the_limit_is_the_exact_measure() -> None:
    """Past the bound, :func:`validation.check_entity_size` measures: a row
    whose bound is over the limit but whose JSON is not is accepted, one
    byte more than the limit is refused with the exact size."""
    overhead = validation.entity_size(_item(""))
    fits = _item("x" * (validation.MAX_ENTITY_BYTES - overhead))
    bound = validation._size_bound(fits)
    assert bound is not None and bound > validation.MAX_ENTITY_BYTES  # the measure decides
    validation.check_entity_size(fits, "inbox item")
    over = _item("x" * (validation.MAX_ENTITY_BYTES - overhead + 1))
    with pytest.raises(errors.InvalidArgument, match=f"is {validation.MAX_ENTITY_BYTES + 1} bytes"):
        validation.check_entity_size(over, "inbox item")


# -- validate_message, end to end ------------------------------------------------------------------


_FIELD_VALUES = st.one_of(_TEXTS, st.sampled_from(["", "tg", "chat-42"]), st.none(), st.integers(0, 2),
                          _TEXTS.map(_Str))
_NOWS = st.one_of(st.just(datetime(2026, 1, 1, 0, 0, 0, 999999, tzinfo=UTC)),
                  st.just(datetime(2026, 1, 1, tzinfo=UTC)),
                  st.just(datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2)))),
                  st.just(datetime(2026, 1, 1)), st.just("now"))


def _general_validate_message(ctx: object, message: object, now: object) -> InboxItem:
    """:func:`validate_message` with every check on its general path."""
    patches = {
        "check_nonempty_short_str": validation._check_nonempty_short_str_general,
        "check_short_str": validation._check_short_str_general,
        "check_str": validation._check_str_general,
        "check_instant": to_instant,
        "check_entity_size": _exact_size_check,
    }
    saved = {name: getattr(gateway, name) for name in patches}
    try:
        for name, fn in patches.items():
            setattr(gateway, name, fn)
        return validate_message(ctx, message, now)
    finally:
        for name, fn in saved.items():
            setattr(gateway, name, fn)


def _exact_size_check(entity: object, what: str) -> None:
    size = validation.entity_size(entity)
    if size > validation.MAX_ENTITY_BYTES:
        raise errors.InvalidArgument(f"{what} is {size} bytes as JSON (at most {validation.MAX_ENTITY_BYTES})")


@settings(max_examples=300, deadline=None)
@given(fields=st.fixed_dictionaries({name: _FIELD_VALUES for name in (
    "channel", "message_id", "conversation", "principal", "text", "agent", "project")}),
       trusted=st.one_of(st.booleans(), st.integers(0, 1), st.none()), now=_NOWS)
def test_validate_message_answers_as_its_general_path(fields: dict[str, Any], trusted: Any, now: Any) -> None:
    message = InboundMessage(trusted=trusted, **fields)
    ctx = Context(Scope())
    assert outcome(validate_message, ctx, message, now) == outcome(_general_validate_message, ctx, message, now)


# -- the SQL row codecs -----------------------------------------------------------------------------


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
_STORED = st.one_of(
    _JSON_VALUES.map(lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))),
    _JSON_VALUES.map(lambda v: " " + json.dumps(v) + "\n"),
    _JSON_VALUES.map(lambda v: json.dumps(v) + " x"),
    st.text(max_size=8),
    st.sampled_from(["", "{", "[1,", "NaN", "-Infinity", "\ufeff{}", "{}{}", "1 2"]),
)


def _load(text: str) -> tuple[Any, ...]:
    try:
        return ("ok", repr(sql_store.load_json(text)))  # repr: NaN equals itself, types show
    except errors.StoreError as exc:
        return ("error", str(exc))


def _load_general(text: str) -> tuple[Any, ...]:
    try:
        return ("ok", repr(json.loads(text)))
    except ValueError:
        return ("error", "a stored JSON value cannot be decoded")


@settings(max_examples=400, deadline=None)
@given(text=_STORED)
def test_load_json_answers_as_json_loads(text: str) -> None:
    assert _load(text) == _load_general(text)
    assert sql_store.load_json(None) is None


@settings(max_examples=200, deadline=None)
@given(millis=st.integers(-62_135_596_800_000, 253_402_300_799_999))
def test_instant_is_from_millis(millis: int) -> None:
    decoded = sql_store.instant(millis)
    assert decoded == from_millis(millis) and decoded is not None and decoded.tzinfo is UTC
    assert sql_store.instant(None) is None


@pytest.mark.parametrize("enum", [SuspensionReason, DeliveryState, ItemStatus, RunState])
def test_members_are_the_enum_call(enum: type[Enum]) -> None:
    members = sql_store.Members(enum)
    for member in enum:
        assert members[member.value] is enum(member.value)
    for bad in ("", "nope", 1):
        with pytest.raises(ValueError) as raised:
            enum(bad)
        with pytest.raises(ValueError, match=str(raised.value)):
            members[bad]


def test_json_and_floats_in_the_size_bound_cover_the_longest_repr() -> None:
    longest = max((repr(x) for x in (-1.7976931348623157e308, -2.2250738585072014e-308, -5e-324)), key=len)
    assert len(longest) <= validation._MAX_SCALAR_BYTES and not math.isnan(float(longest))
    value = _Flat(other=-2.2250738585072014e-308, when=datetime(1, 1, 2, 0, 0, 0, 1,
                  tzinfo=timezone(-timedelta(hours=23, minutes=59, seconds=59, microseconds=999999))))
    bound = validation._size_bound(value)
    assert bound is not None and bound >= validation.entity_size(value)
    assert attrs.has(_Flat)
