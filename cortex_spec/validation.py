"""Field checks shared by every store (RSC-GEN-5..10).

Stores call these before touching storage so that every backend refuses the
same input with the same class, :class:`~cortex_spec.errors.InvalidArgument`,
and writes nothing.  They are part of the contract, not of one backend.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

import attrs

from .clock import UTC, to_instant
from .errors import InvalidArgument
from .scope import Scope

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_ENTITY_BYTES",
    "SHORT_STRING",
    "check_bool",
    "check_count",
    "check_entity_size",
    "check_enum",
    "check_instant",
    "check_json_object",
    "check_nonempty_short_str",
    "check_optional_instant",
    "check_optional_json_object",
    "check_page",
    "check_short_str",
    "check_str",
    "copy_json",
    "entity_size",
    "page",
]

#: RSC-GEN-6: a short string has at most this many code points.
SHORT_STRING = 255
#: RSC-GEN-8: the largest entity, as measured by :func:`entity_size`.
MAX_ENTITY_BYTES = 8 * 1024 * 1024
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

E = TypeVar("E", bound=Enum)
T = TypeVar("T")


def _check_text(value: str, field: str) -> None:
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        if "\x00" in value:  # U+0000 is named first when a text has both
            raise InvalidArgument(f"{field} contains U+0000") from None
        raise InvalidArgument(f"{field} contains a lone surrogate") from None
    if b"\x00" in data:  # (in UTF-8 the zero byte stands only for U+0000)
        raise InvalidArgument(f"{field} contains U+0000")
    if len(value) > _HAND_OVER:
        global _ENCODED
        _ENCODED = (value, data)


#: A text longer than this many code points may exceed RSC-GEN-8 by itself
#: (each takes at most 6 bytes in :func:`entity_size`'s JSON), so the size
#: check that follows its validation measures it exactly (:func:`_text_size`).
_HAND_OVER = MAX_ENTITY_BYTES // 6
#: The last such text :func:`_check_text` accepted and its UTF-8 bytes, which
#: :func:`_text_size` takes (and drops) instead of encoding it again: about
#: 10 ms of an 8 MiB write's 30 ms of checks.  One slot, replaced whole, so a
#: thread reads a consistent pair; ``is`` tells it is the same text.
_ENCODED: tuple[str, bytes] = ("", b"")
_NOTHING_ENCODED = _ENCODED


# The checks below open with a fast path for the common, well-formed value:
# an exact ``str`` that is ASCII (so it holds no lone surrogate) without
# U+0000, short enough where that matters.  It only ever *accepts*; every
# other value takes the general check (the ``_..._general`` functions), which
# decides and words every refusal.  tests/test_validation_fast.py checks that
# both give the same answer on every input.


def check_str(value: object, field: str) -> str:
    """Any length; no NUL, no lone surrogate (RSC-GEN-6)."""
    if type(value) is str and value.isascii() and "\x00" not in value:
        return value
    return _check_str_general(value, field)


def _check_str_general(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{field} must be a str, got {type(value).__name__}")
    _check_text(value, field)
    return value


def check_short_str(value: object, field: str) -> str:
    """At most 255 code points (RSC-GEN-6)."""
    if type(value) is str and len(value) <= SHORT_STRING and value.isascii() and "\x00" not in value:
        return value
    return _check_short_str_general(value, field)


def _check_short_str_general(value: object, field: str) -> str:
    _check_str_general(value, field)
    assert isinstance(value, str)
    if len(value) > SHORT_STRING:
        raise InvalidArgument(f"{field} is {len(value)} code points long (at most {SHORT_STRING})")
    return value


def check_nonempty_short_str(value: object, field: str) -> str:
    if (type(value) is str and 0 < len(value) <= SHORT_STRING and value.isascii()
            and "\x00" not in value):
        return value
    return _check_nonempty_short_str_general(value, field)


def _check_nonempty_short_str_general(value: object, field: str) -> str:
    _check_short_str_general(value, field)
    if value == "":
        raise InvalidArgument(f"{field} must not be empty")
    return value  # type: ignore[return-value]


def check_count(value: object, field: str) -> int:
    """An ``int`` (never a ``bool``) in ``0 .. 2**63-1`` (RSC-GEN-9)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{field} must be an int, got {type(value).__name__}")
    if not 0 <= value <= INT64_MAX:
        raise InvalidArgument(f"{field} must be >= 0 and fit in 64 bits, got {value}")
    return value


def check_bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{field} must be a bool, got {type(value).__name__}")
    return value


def _check_json_value(value: object, path: str, depth: int) -> None:
    if depth > 100:
        raise InvalidArgument(f"{path} nests deeper than 100 levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise InvalidArgument(f"{path} holds an int outside the signed 64-bit range")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument(f"{path} holds a non-finite float")
        return
    if isinstance(value, str):
        _check_text(value, path)
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_json_value(item, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgument(f"{path} has a non-str key {key!r}")
            _check_text(key, f"{path} key")
            _check_json_value(item, f"{path}[{key!r}]", depth + 1)
        return
    raise InvalidArgument(f"{path} holds a {type(value).__name__}, which is not JSON")


def check_json_object(value: object, field: str) -> dict[str, Any]:
    """A ``dict`` of JSON values, recursively (RSC-GEN-7).

    Exact types only: ``tuple``, ``set``, ``Decimal``, ``datetime`` and
    subclasses of ``dict``/``list`` other than the builtins are refused.
    """
    if type(value) is not dict:
        raise InvalidArgument(f"{field} must be a dict (JSON object), got {type(value).__name__}")
    _check_json_value(value, field, 0)
    return value


def check_optional_json_object(value: object, field: str) -> dict[str, Any] | None:
    return None if value is None else check_json_object(value, field)


def check_instant(value: object, field: str) -> datetime:
    """Aware ``datetime`` → UTC, truncated to ms (RSC-GEN-2)."""
    if type(value) is datetime and value.tzinfo is UTC:
        # what to_instant makes of a UTC instant (an equal datetime), without
        # its conversion to UTC
        extra = value.microsecond % 1000
        return value.replace(microsecond=value.microsecond - extra) if extra else value
    return to_instant(value, field)


def check_optional_instant(value: object, field: str) -> datetime | None:
    return None if value is None else check_instant(value, field)


def check_enum(value: object, enum: type[E], field: str) -> E:
    """A member of ``enum``, or its exact string value (RSC-GEN-10)."""
    if isinstance(value, enum):
        return value
    if isinstance(value, str):
        try:
            return enum(value)
        except ValueError:
            pass
    allowed = ", ".join(repr(m.value) for m in enum)
    raise InvalidArgument(f"{field} must be one of {allowed}, got {value!r}")


def check_page(limit: object, offset: object = 0) -> tuple[int, int]:
    """``limit``/``offset`` ints; ``<= 0`` means none (README 'Lists')."""
    for name, value in (("limit", limit), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(f"{name} must be an int, got {type(value).__name__}")
    return max(limit, 0), max(offset, 0)  # type: ignore[call-overload]


def page(rows: list[T], limit: int, offset: int) -> list[T]:
    """Apply ``offset`` then ``limit`` (``0`` = none) to an ordered list."""
    if offset > 0:
        rows = rows[offset:]
    if limit > 0:
        rows = rows[:limit]
    return rows


#: Values :func:`_jsonable` returns as they are, by exact type (the common
#: case: checked first, so a field costs one lookup, not six isinstance).
_PLAIN = frozenset({str, int, float, bool, type(None)})

#: The field names of each attrs class :func:`_jsonable` has met.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


#: Strings at least this long are measured apart (:func:`_text_size`)
#: rather than run through the JSON encoder.
_LONG_TEXT = 4096


def _jsonable(value: object, long: list[str] | None = None) -> object:
    """``value`` as JSON-ready data.  With ``long``, every string of at
    least :data:`_LONG_TEXT` code points is appended to it and replaced by
    ``""`` (:func:`entity_size` adds its encoded size apart)."""
    kind = type(value)
    if kind in _PLAIN:
        if long is not None and kind is str and len(value) >= _LONG_TEXT:  # type: ignore[arg-type]
            long.append(value)  # type: ignore[arg-type]
            return ""
        return value
    names = _FIELD_NAMES.get(kind)
    if names is not None:
        return {name: _jsonable(getattr(value, name), long) for name in names}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Scope):
        return value.canonical()
    if isinstance(value, Enum):
        return value.value
    if attrs.has(kind):
        names = _FIELD_NAMES[kind] = tuple(f.name for f in attrs.fields(kind))
        return {name: _jsonable(getattr(value, name), long) for name in names}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, long) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, long) for k, v in value.items()}
    return value


#: ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` without a
#: new encoder per call (``dumps`` builds one whenever an option is given).
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


#: Control characters JSON writes as a two-character escape; the other
#: characters below U+0020 take six (``\\u00XX``).  (In UTF-8 these bytes
#: stand only for themselves: every byte of a multi-byte character is >= 0x80.)
_SHORT_ESCAPES = b"\b\t\n\f\r"
_CONTROLS = bytes(range(0x20))
#: Every byte the encoder escapes: the controls, ``"`` and ``\\``.
_ESCAPED = _CONTROLS + b'"\\'


def _text_size(text: str) -> int:
    """Bytes of ``text`` as a compact UTF-8 JSON string (quotes included),
    without the JSON encoder: its UTF-8 bytes, plus one byte for every
    ``"``, ``\\`` and two-character escape, five for every other control
    character (the encoder with ``ensure_ascii=False`` escapes nothing
    else).  One pass over the bytes finds whether anything is escaped at
    all (the common case: nothing, and the size is the bytes and two
    quotes); only text with escapes is counted kind by kind.  For an 8 MiB
    string this costs under a third of the encoder's time (measured on one
    loaded core: 12 ms ASCII, 29 ms with wide characters, against 47 and
    100 ms), and the encode is most of it."""
    global _ENCODED
    handed = _ENCODED
    if handed[0] is text:  # accepted by _check_text: no lone surrogate, the same bytes
        _ENCODED = _NOTHING_ENCODED
        data = handed[1]
    else:
        data = text.encode("utf-8", "surrogatepass")
    escaped = len(data) - len(data.translate(None, _ESCAPED))
    if not escaped:
        return len(data) + 2
    controls = len(data) - len(data.translate(None, _CONTROLS))
    short = len(data) - len(data.translate(None, _SHORT_ESCAPES)) if controls else 0
    # escaped - controls: the quotes and backslashes, one extra byte each
    return len(data) + 2 + (escaped - controls) + short + 5 * (controls - short)


def entity_size(entity: object) -> int:
    """RSC-GEN-8's measure: bytes of the compact UTF-8 JSON of all fields
    (``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``; long
    strings are measured by :func:`_text_size`, to the same byte)."""
    long: list[str] = []
    text = _COMPACT.encode(_jsonable(entity, long))
    size = len(text.encode("utf-8", "surrogatepass"))
    return size + sum(_text_size(t) - 2 for t in long)  # each stands in the text as ""


#: An upper bound of the bytes one code point takes in :func:`entity_size`'s
#: JSON: at most 4 in UTF-8 (3 for a lone surrogate), 6 as an escape
#: (``\\u00XX``; the encoder escapes nothing but ``"``, ``\\`` and controls).
_MAX_CHAR_BYTES = 6
#: An upper bound of the JSON of a scalar that is not a string: ``null``,
#: ``false``, a 64-bit int (20 characters), a float's ``repr`` (at most 24,
#: ``-1.7976931348623157e+308``) or ``Infinity``/``NaN``.
_MAX_SCALAR_BYTES = 24
#: An upper bound of a ``datetime``'s ``isoformat()`` in quotes (26 characters
#: with microseconds, an offset of at most 16: ``+HH:MM:SS.ffffff``).
_MAX_INSTANT_BYTES = 48


#: The bound of a value whose type alone decides it.
_FIXED_BOUNDS: dict[type, int] = {type(None): _MAX_SCALAR_BYTES, bool: _MAX_SCALAR_BYTES,
                                  float: _MAX_SCALAR_BYTES, datetime: _MAX_INSTANT_BYTES}


def _text_bound(length: int) -> int:
    """The bound of a quoted string of ``length`` code points."""
    return _MAX_CHAR_BYTES * length + 2


def _field_bound(value: object) -> int | None:
    """The bound of one field's value in :func:`_size_bound`, or ``None``
    when it is not measured (see :func:`_size_bound`)."""
    kind = type(value)
    if kind is str:
        return _text_bound(len(value))  # type: ignore[arg-type]
    fixed = _FIXED_BOUNDS.get(kind)
    if fixed is not None:
        return fixed
    if kind is int:
        return _MAX_SCALAR_BYTES if INT64_MIN <= value <= INT64_MAX else None  # type: ignore[operator]
    if kind is Scope:
        return _text_bound(len(value.canonical()))  # type: ignore[attr-defined]
    if isinstance(value, Enum) and type(value._value_) is str:  # (``.value``, without its descriptor)
        return _text_bound(len(value._value_))
    if kind is dict or kind is list or kind is tuple:
        return _nested_bound(value)
    if kind in _FRAMES or attrs.has(kind):
        return _size_bound(value)  # a nested entity: an object of its fields
    return None


def _nested_bound(value: Any) -> int | None:
    """The bound of a JSON object or array (``dict`` with ``str`` keys,
    ``list``, ``tuple``): brackets, per member its quoted key and colon,
    its value's :func:`_field_bound` and a comma; ``None`` when a key is
    not an exact ``str`` or a value is not measured.  A walk that builds
    nothing: cheaper than the encoder, which the few values this cannot
    bound (or whose bound is over the limit) still get."""
    bound = 2
    items: Any = value
    if type(value) is dict:
        for key in value:
            if type(key) is not str:
                return None
            bound += _text_bound(len(key)) + 1  # "key":
        items = value.values()
    for item in items:
        one = _field_bound(item)
        if one is None:
            return None
        bound += one + 1  # the value and its comma
    return bound


#: Per attrs class met by :func:`_size_bound`: its field names, the bound of
#: everything but the values (braces, quoted names, colons, commas), and its
#: values as a tuple.
_FRAMES: dict[type, tuple[tuple[str, ...], int, Callable[[object], tuple[Any, ...]]]] = {}


def _frame(kind: type) -> tuple[tuple[str, ...], int, Callable[[object], tuple[Any, ...]]]:
    names = tuple(f.name for f in attrs.fields(kind))
    values: Callable[[object], tuple[Any, ...]]
    if len(names) == 1:
        one = operator.attrgetter(names[0])

        def values(entity: object) -> tuple[Any, ...]:
            return (one(entity),)
    else:
        values = operator.attrgetter(*names)
    frame = _FRAMES[kind] = (names, 2 + sum(_MAX_CHAR_BYTES * len(n) + 4 for n in names), values)
    return frame


#: How :func:`_size_bound` adds up the values of an attrs class for one
#: combination of the values' exact types, by (class, type of each field):
#: the bound of the fields whose type decides it (and of the quotes of the
#: strings), the strings among the values, and the positions of the other
#: values, each measured by :func:`_field_bound`; ``None``: a type that is
#: never measured.
_PLANS: dict[tuple[type, ...], tuple[int, Callable[[tuple[Any, ...]], tuple[str, ...]] | None,
                                     tuple[int, ...]] | None] = {}
#: combinations kept at most (the entities' field types are few; past this,
#: a combination is planned on every call, to the same result)
_MAX_PLANS = 4096


def _plan(types: tuple[type, ...]) -> tuple[int, Callable[[tuple[Any, ...]], tuple[str, ...]] | None,
                                            tuple[int, ...]] | None:
    constant, strings, others = 0, [], []
    for i, kind in enumerate(types):
        if kind is str:
            strings.append(i)
            constant += _text_bound(0)
        elif kind in _FIXED_BOUNDS:
            constant += _FIXED_BOUNDS[kind]
        elif (kind is int or kind is Scope or issubclass(kind, Enum) or kind is dict or kind is list
              or kind is tuple or attrs.has(kind)):
            others.append(i)  # decided by the value: _field_bound
        else:
            return None  # _field_bound's None, whatever the value
    pick: Callable[[tuple[Any, ...]], tuple[str, ...]] | None = None
    if len(strings) == 1:
        pick = lambda values, _i=strings[0]: (values[_i],)  # noqa: E731
    elif strings:
        pick = operator.itemgetter(*strings)
    return constant, pick, tuple(others)


def _size_bound(entity: object) -> int | None:
    """An upper bound of :func:`entity_size` for an attrs entity whose every
    field is an exact ``str``, ``None``, ``bool``, ``float``, 64-bit ``int``,
    ``datetime``, ``Scope`` or enum with a ``str`` value, or a JSON object
    or array or nested entity of such values (:func:`_nested_bound`),
    computed from lengths alone; ``None`` when a value is anything else (a
    subclass, a larger int, a key that is not a ``str``), which only the
    encoder measures.

    The sum of :func:`_field_bound` over the fields (:func:`_general_size_bound`),
    added up by the plan of the values' types: one length sum over the
    strings, a constant for the rest but the few values that decide their
    own bound."""
    kind = type(entity)
    frame = _FRAMES.get(kind)
    if frame is None:
        if not attrs.has(kind):
            return None
        frame = _frame(kind)
    bound: int = frame[1]
    values = frame[2](entity)
    types = (kind, *map(type, values))
    plan = _PLANS.get(types, _UNPLANNED)
    if plan is _UNPLANNED:
        plan = _plan(types[1:])
        if len(_PLANS) < _MAX_PLANS:
            _PLANS[types] = plan
    if plan is None:
        return None
    constant, strings, others = plan
    bound += constant
    if strings is not None:
        bound += _MAX_CHAR_BYTES * sum(map(len, strings(values)))
    for i in others:
        one = _field_bound(values[i])
        if one is None:
            return None
        bound += one
    return bound


_UNPLANNED: Any = object()


def _general_size_bound(entity: object) -> int | None:
    """:func:`_size_bound` field by field (what its plans add up)."""
    kind = type(entity)
    if not attrs.has(kind):
        return None
    names, bound, _ = _FRAMES.get(kind) or _frame(kind)
    for name in names:
        one = _field_bound(getattr(entity, name))
        if one is None:
            return None
        bound += one
    return bound


def check_entity_size(entity: object, what: str) -> None:
    """RSC-GEN-8: ``InvalidArgument`` when :func:`entity_size` of ``entity``
    exceeds :data:`MAX_ENTITY_BYTES`.  An entity whose
    :func:`_size_bound` is within the limit is accepted without encoding it
    (the common case: the bound costs a length per value)."""
    bound = _size_bound(entity)
    if bound is not None and bound <= MAX_ENTITY_BYTES:
        return
    size = entity_size(entity)
    if size > MAX_ENTITY_BYTES:
        raise InvalidArgument(f"{what} is {size} bytes as JSON (at most {MAX_ENTITY_BYTES})")


def copy_json(value: Any) -> Any:
    """Deep copy of a JSON value, keeping every type exactly."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value
