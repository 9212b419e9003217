"""Checks and clocks the cross-class suites share with the class modules.

The scope and common suites (``test_scope.py``, ``test_common.py``) and the
examples each class gives them (``EXAMPLES`` in ``test_<class>.py``) assert
with these, so a check reads the same wherever it is written.  Nothing here
names a class: these are statements about scopes, instants and ids.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

from cortex_spec import ids
from cortex_spec.clock import EPOCH
from cortex_spec.scope import Scope

__all__ = [
    "UTC",
    "MS",
    "US",
    "PLUS_0530",
    "MINUS_0800",
    "BOGUS_STAMPS",
    "T1",
    "T2",
    "T3",
    "CRAFTED_SUFFIXES",
    "raises",
    "assert_scope",
    "RawClock",
    "ms",
    "assert_instant",
    "crafted",
    "payload_of_bytes",
]

UTC = timezone.utc
MS = timedelta(milliseconds=1)
US = timedelta(microseconds=1)
PLUS_0530 = timezone(timedelta(hours=5, minutes=30))
MINUS_0800 = timezone(timedelta(hours=-8))

#: Stamps an object carries into a create or an update; a store must ignore
#: them (RSC-GEN-4).
BOGUS_STAMPS: dict[str, datetime] = dict(
    created_at=datetime(1999, 1, 2, 3, 4, 5, tzinfo=UTC),
    updated_at=datetime(2999, 1, 2, 3, 4, 5, tzinfo=PLUS_0530),
)


#: Instants with sub-millisecond digits (a clock handing them out must be
#: truncated, never rounded, RSC-GEN-1).
T1 = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
T2 = datetime(2026, 3, 4, 5, 6, 8, 999999, tzinfo=UTC)
T3 = datetime(2026, 3, 4, 5, 6, 9, 500, tzinfo=UTC)


def raises(fn: Callable[[], Any], exc: type[BaseException]) -> BaseException:
    """Call ``fn``, require it to raise an instance of ``exc``, return the error."""
    with pytest.raises(exc) as info:
        fn()
    return info.value


def assert_scope(actual: object, expected: Scope, what: str = "scope") -> None:
    """The stored scope reads back as an equal `Scope`, level for level, as `str`s."""
    assert isinstance(actual, Scope), f"{what} is a {type(actual).__name__}, not a Scope"
    assert actual == expected, f"{what}: got {actual!r}, expected {expected!r}"
    assert actual.levels == expected.levels, f"{what}: levels {actual.levels!r}, expected {expected.levels!r}"
    assert all(type(k) is str and type(v) is str for k, v in actual.levels), (
        f"{what}: levels of types {[(type(k).__name__, type(v).__name__) for k, v in actual.levels]}, expected str")
    assert actual.canonical() == expected.canonical(), (
        f"{what}: canonical {actual.canonical()!r}, expected {expected.canonical()!r}")


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


def ms(instant: datetime) -> datetime:
    """The instant in UTC with its sub-millisecond part dropped."""
    instant = instant.astimezone(UTC)
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)


def assert_instant(actual: object, expected: datetime, what: str) -> None:
    """An aware UTC datetime, whole milliseconds, equal to ``expected``."""
    assert isinstance(actual, datetime), f"{what} is {actual!r}"
    assert actual.utcoffset() == timedelta(0), f"{what} is not in UTC: {actual!r}"
    assert actual.microsecond % 1000 == 0, f"{what} keeps sub-millisecond digits: {actual!r}"
    assert actual == expected and actual.replace(tzinfo=None) == expected.astimezone(UTC).replace(tzinfo=None), (
        f"{what}: got {actual.isoformat()}, expected {expected.astimezone(UTC).isoformat()}"
    )


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


def crafted(prefix: str) -> list[str]:
    """Valid ids of ``prefix`` with :data:`CRAFTED_SUFFIXES`, not in code-point order."""
    out = [f"{prefix}_{s}" for s in CRAFTED_SUFFIXES]
    assert all(ids.is_id(i, prefix) for i in out), f"crafted ids of {prefix!r} are not all valid: {out}"
    assert out != sorted(out), "the crafted ids must not be in code-point order"
    return out


#: Two- and four-byte characters (2 code points, 3 UTF-16 units, 6 UTF-8 bytes).
_WIDE = "\u00e9\U0001F600"
#: The most bytes of wide characters a payload holds.
_MOST_WIDE = 6144
#: The longest payload built so far and its UTF-8 bytes (see :func:`payload_of_bytes`).
_longest: list[tuple[str, int]] = []


def _build(n: int) -> str:
    wide = min(n // 4, _MOST_WIDE) // len(_WIDE.encode("utf-8"))
    text = _WIDE * wide
    return text + "x" * (n - len(text.encode("utf-8")))


def payload_of_bytes(n: int) -> str:
    """Text of exactly ``n`` UTF-8 bytes, a quarter of them (at most 6 KiB)
    in two- and four-byte characters, so that a size measured in code
    points or UTF-16 units comes out smaller than the bytes.

    A payload of at least ``4 * 6144`` bytes is its 6 KiB of wide
    characters and then ``x``: a prefix of every longer one.  It is cut
    from the longest built so far (one copy) rather than built again (the
    size tests ask for 8 MiB payloads a few bytes apart, site after site)."""
    if n < 4 * _MOST_WIDE:
        return _build(n)
    if not _longest or _longest[0][1] < n:
        _longest[:] = [(_build(n), n)]
    longest, size = _longest[0]
    cut = len(longest) - (size - n)  # every code point after the wide part is one byte
    return longest if cut == len(longest) else longest[:cut]
