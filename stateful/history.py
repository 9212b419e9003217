"""Histories: every call recorded as an invoke and a response event.

A :class:`Recorder` hands out :class:`Call` records stamped with
``time.monotonic_ns()`` at invocation and at response, and the branch (lane)
that made them.  A call that never returned (its thread hung past the
timeout, or died) keeps ``end = None`` and outcome *unknown*: the checker may
place it anywhere after its invocation, or nowhere.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import attrs

from .ops import UNKNOWN, Op, Outcome, outcome_of

__all__ = ["Call", "Recorder", "render_timeline"]


@attrs.define
class Call:
    index: int
    lane: int
    op: Op
    start: int
    end: int | None = None
    outcome: Outcome = UNKNOWN

    @property
    def completed(self) -> bool:
        return self.end is not None and self.outcome.kind != "unknown"


class Recorder:
    """Thread-safe recorder of one history."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[Call] = []

    def call(self, store: Any, op: Op, lane: int) -> Outcome:
        """Run ``op`` on ``store`` from ``lane`` and record it."""
        with self._lock:
            record = Call(len(self.calls), lane, op, time.monotonic_ns())
            self.calls.append(record)
        result = outcome_of(lambda: op(store))
        end = time.monotonic_ns()
        with self._lock:
            record.end = end
            record.outcome = result
        return result

    def invoke_only(self, op: Op, lane: int) -> Call:
        with self._lock:
            record = Call(len(self.calls), lane, op, time.monotonic_ns())
            self.calls.append(record)
            return record

    def snapshot(self) -> list[Call]:
        """The calls so far (completed or not), in invocation order."""
        with self._lock:
            return [attrs.evolve(c) for c in self.calls]


def timeline_data(calls: list[Call], lanes: list[str], highlight: set[int] | None = None) -> dict:
    """The history as plain data for pictures (times in microseconds from the
    first invocation)."""
    highlight = highlight or set()
    t0 = min((c.start for c in calls), default=0)
    return {
        "lanes": list(lanes),
        "calls": [
            {
                "index": c.index,
                "lane": c.lane,
                "start_us": (c.start - t0) // 1000,
                "end_us": None if c.end is None else (c.end - t0) // 1000,
                "call": c.op.short(),
                "label": c.op.label,
                "outcome": c.outcome.describe(),
                "unexplained": c.index in highlight,
            }
            for c in calls
        ],
    }


def render_timeline(
    calls: list[Call], lanes: list[str], highlight: set[int] | None = None, width: int = 60
) -> str:
    """One line per call, grouped in lanes, with a bar showing when it ran.

    ::

        lane 1 (claimer) |  ████████                      | claim_suspension[ws=a](arun…1x2y) -> <Suspension …>
        lane 2 (sweeper) |      ██████████                | claim_expired_suspension[ws=a](…) !! NotSuspended
    """
    highlight = highlight or set()
    if not calls:
        return "(empty history)"
    t0 = min(c.start for c in calls)
    t1 = max((c.end if c.end is not None else c.start) for c in calls)
    span = max(t1 - t0, 1)

    def col(t: int) -> int:
        return min(width - 1, int((t - t0) * (width - 1) / span))

    name_w = max(len(n) for n in lanes) if lanes else 6
    out = []
    for lane, name in enumerate(lanes):
        for c in (c for c in calls if c.lane == lane):
            a = col(c.start)
            b = col(c.end) if c.end is not None else width - 1
            bar = [" "] * width
            for i in range(a, b + 1):
                bar[i] = "█" if c.end is not None else "░"
            mark = "✗" if c.index in highlight else " "
            out.append(
                f"{mark} {name:<{name_w}} |{''.join(bar)}| #{c.index} {c.op.short()} {c.outcome.describe()}"
            )
    return "\n".join(out)

