"""Time: the `Clock` a store reads, a manual clock for tests, ms truncation.

Every timestamp a store writes and every "now" a claim compares against comes
from the store's clock (or from an explicit argument), never from a database
server (RSC-GEN-1..3).  Every stored instant is a timezone-aware UTC
``datetime`` truncated to whole milliseconds, because BSON dates hold no more.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Protocol, runtime_checkable

from .errors import InvalidArgument

__all__ = [
    "Clock",
    "SystemClock",
    "ManualClock",
    "UTC",
    "EPOCH",
    "truncate_ms",
    "to_instant",
    "to_millis",
    "from_millis",
]

UTC = timezone.utc
#: The instant a :class:`ManualClock` starts at unless told otherwise.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@runtime_checkable
class Clock(Protocol):
    """Anything with ``now() -> datetime`` (timezone-aware)."""

    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that only moves when told to; thread-safe.

    >>> c = ManualClock(); c.advance(milliseconds=1500); c.now().second
    1
    """

    def __init__(self, start: datetime = EPOCH) -> None:
        self._lock = threading.Lock()
        self._now = to_instant(start, "start")

    def now(self) -> datetime:
        # No lock for a read: the instant is one immutable value in one
        # attribute, which every writer replaces whole, so a reader sees one
        # of the values written and never half of one.  The lock orders the
        # writers (``advance`` reads, adds and writes).  A lock here made
        # every concurrent caller a convoy: a thread switched out while
        # holding it put the other readers to sleep on it (8 threads racing
        # for claims through the SQL store: 5-10 context switches per call
        # instead of under 1, and half the throughput).
        return self._now

    def set(self, instant: datetime) -> None:
        """Move to ``instant`` (may go backwards: tests decide)."""
        value = to_instant(instant, "instant")
        with self._lock:
            self._now = value

    def advance(self, delta: timedelta | None = None, /, **kwargs: float) -> datetime:
        """Move forward by a ``timedelta`` or by ``timedelta(**kwargs)``."""
        step = delta if delta is not None else timedelta(**kwargs)
        with self._lock:
            self._now = truncate_ms(self._now + step)
            return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now.isoformat()})"


def truncate_ms(instant: datetime) -> datetime:
    """Convert an aware ``datetime`` to UTC and drop sub-millisecond digits."""
    instant = instant.astimezone(UTC)
    return instant.replace(microsecond=instant.microsecond - instant.microsecond % 1000)


def to_instant(value: object, field: str = "instant") -> datetime:
    """Validate and normalise an instant argument or field (RSC-GEN-2).

    Naive datetimes and non-datetimes are refused with ``InvalidArgument``.
    """
    if not isinstance(value, datetime):
        raise InvalidArgument(f"{field} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidArgument(f"{field} must be timezone-aware, got naive {value!r}")
    try:
        return truncate_ms(value)
    except OverflowError:
        raise InvalidArgument(f"{field} {value!r} is out of range in UTC") from None


_EPOCH0 = datetime(1970, 1, 1, tzinfo=UTC)


def to_millis(instant: datetime) -> int:
    """Milliseconds since the Unix epoch of an aware instant (exact)."""
    delta = instant - _EPOCH0
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_millis(millis: int) -> datetime:
    """Inverse of :func:`to_millis`."""
    return _EPOCH0 + timedelta(milliseconds=millis)
