"""The reference store as a sequential model for the linearizability checker.

A model state is an immutable snapshot of a :class:`MemoryMedium`; its
identity (hash, equality) is a canonical fingerprint of every table, so the
checker's memo recognises equal states reached by different orders.
Executing an operation clones the medium, opens a :class:`MemoryStore` on the
clone with a clock frozen at the operation's recorded instant, and runs it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Hashable

from cortex_spec.clock import EPOCH
from cortex_spec.reference import MemoryMedium, MemoryStore

from .ops import Op, Outcome, normalize, run_op

__all__ = ["FixedClock", "RefState", "ReferenceModel", "fingerprint"]


class FixedClock:
    """A clock stuck at one instant."""

    __slots__ = ("instant",)

    def __init__(self, instant: datetime) -> None:
        self.instant = instant

    def now(self) -> datetime:
        return self.instant


def fingerprint(medium: MemoryMedium, memo: dict[int, tuple[Any, Hashable]] | None = None) -> Hashable:
    """A canonical, hashable image of every table of ``medium``.

    ``memo`` caches the image of each (immutable) row object by identity; it
    keeps the objects alive so identities are not reused.
    """

    def image(row: Any) -> Hashable:
        if memo is None:
            return normalize(row)
        hit = memo.get(id(row))
        if hit is None:
            hit = memo[id(row)] = (row, normalize(row))
        return hit[1]

    return tuple(
        (name, tuple(sorted((key, image(row)) for key, row in table.items())))
        for name, table in sorted(medium.tables().items())
    )


class RefState:
    """An immutable model state: a medium nobody mutates, and its fingerprint."""

    __slots__ = ("medium", "key")

    def __init__(self, medium: MemoryMedium, memo: dict | None = None) -> None:
        self.medium = medium
        self.key = fingerprint(medium, memo)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RefState) and self.key == other.key


#: How an observed outcome is compared with the model's (a2a binds tokens).
Matcher = Callable[[Outcome, Outcome], bool]


class ReferenceModel:
    """The contract's semantics, step by step (see the module docstring)."""

    def __init__(self, initial: MemoryMedium | None = None, matcher: Matcher | None = None) -> None:
        self._memo: dict[int, tuple[Any, Hashable]] = {}
        self._initial = RefState(
            initial.clone() if initial is not None else MemoryMedium(), self._memo
        )
        self._matches = matcher or (lambda expected, observed: expected == observed)

    def init(self) -> RefState:
        return self._initial

    def step(self, state: RefState, op: Op, observed: Outcome) -> tuple[bool, Any, Outcome]:
        medium = state.medium.clone()
        store = MemoryStore(FixedClock(op.at or EPOCH), medium=medium)
        expected = run_op(store, op)
        if expected.kind == "error":
            next_state = state  # a refused call writes nothing
        else:
            next_state = RefState(medium, self._memo)
        if observed.kind == "unknown":
            return True, next_state, expected
        return self._matches(expected, observed), next_state, expected
