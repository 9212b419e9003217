"""A linearizability checker (Wing & Gong's search with Lowe's memoisation).

Given a history — calls with invocation and response times and observed
outcomes — the checker searches for one total order of the calls that

* respects real time: a call that returned before another was invoked comes
  first, and
* reproduces every observed outcome when executed, in that order, on a
  sequential :class:`Model` (normally the reference store).

The search is the one Porcupine uses: walk the time-ordered list of
invocation/response entries; at an invocation, try to linearize that call
next (step the model, require the observed outcome), remove it and restart;
at a response, the call it belongs to should already have been linearized,
so backtrack.  Lowe's memoisation prunes configurations already seen as
``(set of linearized calls, model state)``.

Calls with an *unknown* outcome (they timed out or died) respond at +∞ and
accept any outcome: they may be placed anywhere after their invocation.

Histories split into independent sub-histories by object
(P-compositionality): calls carry the set of object keys they touch, calls
that share a key are checked together, and a call that spans every object
(``keys is None``, e.g. a list) keeps the history whole.

The search is exponential in the worst case, so it runs under a time budget;
running out yields the verdict ``unknown`` — never a pass.

**Split calls.**  A model may declare some calls atomic only per part
(``model.is_split(op)``; a2a's ``reclaim_stale_deliveries`` is one step per
row it moves, A2A-RCL-8).  Such a call is linearized as a sequence of steps
(``model.step_part``), each placed on its own anywhere after the call's
invocation and — like every step — before its response; other calls may be
linearized between two of its steps.  The call counts as linearized when its
last step is; until then its progress is part of the configuration the memo
records, and its response entry stays in the list, so a call not complete by
its response is backtracked exactly like a plain call.
"""

from __future__ import annotations

import time
from typing import Any, Hashable, Protocol, Sequence

import attrs

from .history import Call
from .ops import Op, Outcome

__all__ = ["Model", "Verdict", "Unexplained", "check", "partition"]


class Model(Protocol):
    """A sequential specification.

    ``step(state, op, observed)`` returns ``(accepted, next_state,
    expected)``: whether executing ``op`` in ``state`` can produce the
    ``observed`` outcome, the state after it, and the outcome the model
    itself produced (for messages).  States must be hashable.
    """

    def init(self) -> Hashable: ...

    def step(self, state: Any, op: Op, observed: Outcome) -> tuple[bool, Any, Outcome | None]: ...


class SplitModel(Model, Protocol):
    """A model with split calls (see the module docstring)."""

    def is_split(self, op: Op) -> bool: ...

    def step_part(
        self, state: Any, op: Op, observed: Outcome, progress: Any
    ) -> tuple[bool, Any, Outcome | None, Any, bool]: ...


@attrs.frozen
class Unexplained:
    """A call no legal order explains, at the deepest point the search reached."""

    call: int
    observed: str
    expected: str


@attrs.frozen
class Verdict:
    #: "ok", "violation" or "unknown" (the budget ran out)
    result: str
    #: calls of the failing sub-history (a violation), or of the whole history
    calls: tuple[int, ...] = ()
    #: the longest legal prefix the search found, as call indexes
    best_order: tuple[int, ...] = ()
    #: calls that could not be placed next at that point, with the reason
    unexplained: tuple[Unexplained, ...] = ()
    #: configurations explored
    steps: int = 0
    seconds: float = 0.0
    partitions: int = 1

    @property
    def ok(self) -> bool:
        return self.result == "ok"


def partition(calls: Sequence[Call]) -> list[list[Call]]:
    """Split into independent sub-histories by shared object keys."""
    if any(c.op.keys is None for c in calls):
        return [list(calls)] if calls else []
    parent: dict[Hashable, Hashable] = {}

    def find(k: Hashable) -> Hashable:
        while parent.setdefault(k, k) != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for c in calls:
        keys = list(c.op.keys or ())
        for k in keys[1:]:
            parent[find(k)] = find(keys[0])
    groups: dict[Hashable, list[Call]] = {}
    loose: list[Call] = []
    for c in calls:
        keys = c.op.keys or frozenset()
        if not keys:
            loose.append(c)  # touches nothing: its own partition
            continue
        groups.setdefault(find(next(iter(keys))), []).append(c)
    return list(groups.values()) + [[c] for c in loose]


class _Budget(Exception):
    pass


def _check_one(
    model: Model, calls: list[Call], deadline: float
) -> tuple[str, tuple[int, ...], tuple[Unexplained, ...], int]:
    n = len(calls)
    # entries: (time, kind, call position); kind 0 = invocation, 1 = response.
    # Invocations sort before responses at equal times: calls that touch
    # overlap (the conservative choice: more orders are legal, no false alarm).
    entries: list[tuple[float, int, int]] = []
    for i, c in enumerate(calls):
        entries.append((c.start, 0, i))
        entries.append((c.end if c.completed else float("inf"), 1, i))
    entries.sort()
    m = len(entries)
    head = m
    # a doubly linked list over entry positions, head sentinel at index m
    nxt = [p + 1 for p in range(m)] + [0]
    prv = [p - 1 for p in range(m)] + [-1]
    nxt[m - 1] = -1
    prv[0] = head
    inv_pos = [0] * n
    ret_pos = [0] * n
    for pos, (_, kind, i) in enumerate(entries):
        (ret_pos if kind else inv_pos)[i] = pos

    def unlink(p: int) -> None:
        a, b = prv[p], nxt[p]
        nxt[a] = b
        if b != -1:
            prv[b] = a

    def relink(p: int) -> None:
        a, b = prv[p], nxt[p]
        nxt[a] = p
        if b != -1:
            prv[b] = p

    is_split = getattr(model, "is_split", None)
    splits = [bool(is_split and is_split(c.op)) for c in calls]
    state = model.init()
    linearized = 0
    #: progress of split calls that have taken some but not all of their steps
    inflight: dict[int, Any] = {}
    #: (call, state before the step, its progress before the step, step completed the call)
    stack: list[tuple[int, Any, Any, bool]] = []
    cache: set[tuple[int, Hashable, Hashable]] = set()
    best_order: tuple[int, ...] = ()
    best_rejections: dict[int, Unexplained] = {}
    steps = 0

    def completed() -> tuple[int, ...]:
        return tuple(j for j, _, _, done in stack if done)

    entry = nxt[head]
    while nxt[head] != -1:
        steps += 1
        if steps % 256 == 0 and time.monotonic() > deadline:
            raise _Budget(steps)
        _, kind, i = entries[entry]
        if kind == 0:  # an invocation: try to linearize this call (or its next step) next
            call = calls[i]
            before = inflight.get(i)
            if splits[i]:
                accepted, new_state, expected, progress, done = model.step_part(  # type: ignore[attr-defined]
                    state, call.op, call.outcome, before
                )
            else:
                accepted, new_state, expected = model.step(state, call.op, call.outcome)
                progress, done = None, True
            after = dict(inflight)
            if done:
                after.pop(i, None)
            else:
                after[i] = progress
            key = (linearized | (1 << i) if done else linearized, tuple(sorted(after.items())), new_state)
            if accepted and key not in cache:
                cache.add(key)
                stack.append((i, state, before, done))
                state = new_state
                inflight = after
                if done:
                    linearized |= 1 << i
                    unlink(inv_pos[i])
                    unlink(ret_pos[i])
                order = completed()
                if len(order) > len(best_order):
                    best_order = order
                    best_rejections = {}
                entry = nxt[head]
                continue
            if not accepted and expected is not None and len(completed()) >= len(best_order):
                if len(completed()) > len(best_order):
                    best_order = completed()
                    best_rejections = {}
                best_rejections[i] = Unexplained(
                    call.index, call.outcome.describe(), expected.describe()
                )
            entry = nxt[entry]
        else:  # a response: its call should have been linearized (completed) by now
            if not stack:
                order = tuple(calls[j].index for j in best_order)
                return "violation", order, tuple(best_rejections.values()), steps
            i, state, before, done = stack.pop()
            if before is None:
                inflight.pop(i, None)
            else:
                inflight[i] = before
            if done:
                linearized &= ~(1 << i)
                relink(ret_pos[i])
                relink(inv_pos[i])
            entry = nxt[inv_pos[i]]
    return "ok", tuple(calls[j].index for j in completed()), (), steps


def check(model: Model, calls: Sequence[Call], budget_s: float = 10.0) -> Verdict:
    """Decide whether ``calls`` is linearizable with respect to ``model``."""
    started = time.monotonic()
    deadline = started + budget_s
    parts = partition(calls)
    total_steps = 0
    for part in parts:
        part = sorted(part, key=lambda c: c.start)
        try:
            result, order, unexplained, steps = _check_one(model, part, deadline)
        except _Budget as exc:
            return Verdict(
                "unknown",
                calls=tuple(c.index for c in part),
                steps=total_steps + int(exc.args[0]),
                seconds=time.monotonic() - started,
                partitions=len(parts),
            )
        total_steps += steps
        if result == "violation":
            return Verdict(
                "violation",
                calls=tuple(c.index for c in part),
                best_order=order,
                unexplained=unexplained,
                steps=total_steps,
                seconds=time.monotonic() - started,
                partitions=len(parts),
            )
    return Verdict(
        "ok", steps=total_steps, seconds=time.monotonic() - started, partitions=len(parts)
    )
