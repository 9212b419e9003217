"""The reference store as a sequential model for the linearizability checker.

A model state is an immutable snapshot of a :class:`MemoryMedium`; its
identity (hash, equality) is a canonical fingerprint of every table, so the
checker's memo recognises equal states reached by different orders.
Executing an operation clones the medium, opens a :class:`MemoryStore` on the
clone with a clock frozen at the operation's recorded instant, and runs it.

Two extensions serve classes whose calls are not plain single steps:

* **Token adoption.**  A claim issues an opaque token that differs between
  the backend and the reference.  The model's store takes its next token
  from the *observed* outcome (``MemoryStore.token_source``), so that later
  calls of the history, made with the backend's token, replay as they ran.
  The reference still checks that every token it takes is fresh for its
  delivery (A2A-DLV-6): a backend that re-issues an old token is refused.
* **Split calls.**  A call declared atomic only per row (A2A-RCL-8:
  ``reclaim_stale_deliveries``) is modelled as several steps, each
  linearized on its own inside the call's interval: a :class:`Split` says
  how (a first step, further steps carrying a hashable *progress*, and when
  it is done).  The checker (``linearizability.py``) places each step
  separately and requires the observed result only of the completed call.
"""

from __future__ import annotations

import itertools
import operator
from datetime import datetime
from typing import Any, Callable, Hashable, Protocol

from cortex_spec.clock import EPOCH
from cortex_spec.reference import MemoryMedium, MemoryStore

from .classes import reference_session
from .ops import Op, Outcome, normalize, outcome_of, run_op

__all__ = ["FixedClock", "RefState", "ReferenceModel", "Split"]


class FixedClock:
    """A clock stuck at one instant."""

    __slots__ = ("instant",)

    def __init__(self, instant: datetime) -> None:
        self.instant = instant

    def now(self) -> datetime:
        return self.instant


def _table_image(table: dict[Any, Any], memo: dict[int, tuple[Any, Hashable]] | None) -> Hashable:
    """The canonical image of one table: its rows' images, by key.

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

    return tuple(sorted((key, image(row)) for key, row in table.items()))


class _Image:
    """A table's image with its hash computed once: a state that keeps a
    table's image from its parent does not hash the table's rows again."""

    __slots__ = ("hash", "value")

    def __init__(self, value: Hashable) -> None:
        self.value = value
        self.hash = hash(value)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _Image) and self.hash == other.hash
                                 and self.value == other.value)


def _same_rows(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    """Whether two tables hold the very same row objects under the same keys
    in the same order (a clone's table nobody wrote to): then their images
    are equal.  Conservative: a table written back to equal rows, or
    reordered, is imaged again."""
    return (a is b or (len(a) == len(b) and all(map(operator.is_, a.values(), b.values()))
                       and list(a) == list(b)))


class RefState:
    """An immutable model state: a medium nobody mutates, and its fingerprint.

    A state reached by a step from ``parent`` images only the tables the step
    wrote (:func:`_same_rows`); the others keep the parent's images, so a
    step costs what it changed rather than the whole medium.  The hash is
    computed once (the checker looks states up in its memo many times)."""

    __slots__ = ("_hash", "_images", "_tables", "key", "medium")

    def __init__(self, medium: MemoryMedium, memo: dict | None = None, parent: RefState | None = None) -> None:
        self.medium = medium
        tables = medium.tables()
        images: dict[str, Hashable] = {}
        before, known = (parent._tables, parent._images) if parent is not None else ({}, {})
        for name, table in tables.items():
            if not table:
                images[name] = ()
                continue
            old = before.get(name)
            images[name] = (known[name] if old is not None and _same_rows(old, table)
                            else _Image(_table_image(table, memo)))
        self._tables, self._images = tables, images
        self.key = tuple((name, images[name]) for name in sorted(images))
        self._hash = hash(self.key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RefState) and (self is other or (self._hash == other._hash
                                                                    and self.key == other.key))


#: How an observed outcome is compared with the model's.
Matcher = Callable[[Outcome, Outcome], bool]


class Split(Protocol):
    """How a call that is atomic only per part is modelled as several steps.

    ``first`` runs the call's first step on ``store`` (it may raise a contract
    error: the call is then one refused step) and returns the progress;
    ``next`` runs one more step; ``done`` says whether none is left;
    ``result`` is the call's return value once done; ``viable`` prunes a
    progress that can no longer end in the observed value.  Progress values
    must be hashable (the checker memoises them).
    """

    def first(self, store: Any, op: Op) -> Hashable: ...

    def next(self, store: Any, op: Op, partial: Any) -> Hashable: ...

    def done(self, partial: Any) -> bool: ...

    def result(self, partial: Any) -> Any: ...

    def viable(self, partial: Any, observed: Outcome) -> bool: ...


_fallback_tokens = itertools.count(1)


def _token_source(observed: Outcome) -> Callable[[], str]:
    """Token adoption: the claim token the backend reported, if the call was
    observed to succeed with one; else a token no backend ever issued."""
    raw = observed.raw if observed.ok else None
    token = getattr(raw, "claim_token", None)
    if isinstance(token, str):
        return lambda: token
    return lambda: f"model-token-{next(_fallback_tokens)}"


class ReferenceModel:
    """The contract's semantics, step by step (see the module docstring)."""

    def __init__(
        self,
        initial: MemoryMedium | None = None,
        matcher: Matcher | None = None,
        splits: dict[str, Split] | None = None,
    ) -> None:
        self._memo: dict[int, tuple[Any, Hashable]] = {}
        self._initial = RefState(
            initial.clone() if initial is not None else MemoryMedium(), self._memo
        )
        self._matches = matcher or (lambda expected, observed: expected == observed)
        self._splits = dict(splits or {})

    def init(self) -> RefState:
        return self._initial

    def _store(self, state: RefState, op: Op, observed: Outcome) -> MemoryStore:
        store = MemoryStore(FixedClock(op.at or EPOCH), medium=state.medium.clone())
        store.token_source = _token_source(observed)
        return store

    def step(self, state: RefState, op: Op, observed: Outcome) -> tuple[bool, Any, Outcome]:
        store = self._store(state, op, observed)
        expected = run_op(reference_session(store) if op.target else store, op)
        if expected.kind == "error":
            next_state = state  # a refused call writes nothing
        else:
            next_state = RefState(store.medium, self._memo, state)
        if observed.kind == "unknown":
            return True, next_state, expected
        return self._matches(expected, observed), next_state, expected

    # -- split calls -------------------------------------------------------------

    def is_split(self, op: Op) -> bool:
        return op.method in self._splits

    def step_part(
        self, state: RefState, op: Op, observed: Outcome, partial: Any
    ) -> tuple[bool, Any, Outcome | None, Any, bool]:
        """One step of a split call: ``(accepted, next state, expected outcome
        when the call is complete, new progress, complete)``."""
        split = self._splits[op.method]
        store = self._store(state, op, observed)
        if partial is None:
            first = outcome_of(lambda: split.first(store, op))
            if first.kind != "ok":  # refused (or broken): one step that wrote nothing
                accepted = observed.kind == "unknown" or self._matches(first, observed)
                return accepted, state, first, None, True
            partial, next_state = first.raw, state  # selecting writes nothing
        else:
            partial = split.next(store, op, partial)
            next_state = RefState(store.medium, self._memo, state)
        if split.done(partial):
            value = split.result(partial)
            expected = Outcome("ok", normalize(value), raw=value)
            accepted = observed.kind == "unknown" or self._matches(expected, observed)
            return accepted, next_state, expected, partial, True
        accepted = observed.kind == "unknown" or split.viable(partial, observed)
        return accepted, next_state, None, partial, False
