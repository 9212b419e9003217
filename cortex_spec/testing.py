"""Helpers for writing certification tests: contexts, checks, races, views.

These are what the clause suite is written with, and they are public so a
backend author can write extra tests in the same style::

    from cortex_spec.runs import make_run
    from cortex_spec.testing import ctx, race

    def test_my_extra(cortex_store):
        c = ctx("workspace=w1")
        cortex_store.create_run(c, make_run(state="paused"))

This module names no class: the builders of a class's entities (a run, a
suspension, an envelope, …) live at the end of the class's own module,
listed in its ``BUILDERS``.  They are re-exported here, as before
(``from cortex_spec.testing import make_run`` still works): the module's
``__getattr__`` finds a name in the ``BUILDERS`` of the module of each
class of :data:`cortex_spec.classes.CLASSES`.
"""

from __future__ import annotations

import importlib
import math
import operator
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Any, Callable, Iterable, Iterator, Sequence

import attrs

from . import ids
from .context import Context
from .scope import Scope
from .views import FAR_FUTURE

__all__ = [
    "ClauseViolation",
    "clause",
    "expect",
    "expect_raises",
    "expect_result",
    "expect_is",
    "expect_op",
    "expect_true",
    "expect_false",
    "expect_that",
    "expect_strict",
    "Said",
    "shorten",
    "ctx",
    "ZERO",
    "Outcome",
    "race",
    "interleaved",
    "strict_equal",
    "assert_strict_equal",
    "FAR_FUTURE",
    "state_view",
]


def _builders() -> dict[str, Any]:
    """Every class's builders (the ``BUILDERS`` of the module of its
    protocol), by name."""
    from .classes import CLASSES

    out: dict[str, Any] = {}
    for cls in CLASSES.values():
        module = importlib.import_module(cls.protocol.__module__)
        for name in getattr(module, "BUILDERS", ()):
            out[name] = getattr(module, name)
    return out


def __getattr__(name: str) -> Any:
    """A class's builder, re-exported (see the module's docstring)."""
    if name.startswith("__"):
        raise AttributeError(name)
    found = _builders()
    if name in found:
        return found[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_builders()))


# ``from cortex_spec.testing import *`` gives every class's builders too
__all__ += sorted(_builders())

#: A context with the zero scope.
ZERO = Context(Scope())


# -- entities of a described kind (cortex_spec.kinds) -------------------------------------


def example_value(kind: Any, variant: int = 0) -> Any:
    """A valid value of a field kind; ``variant`` 0, 1, 2… give distinct
    values (an update writes a variant different from what it replaces)."""
    from . import kinds as k

    n = variant
    if isinstance(kind, k.Optional):
        return None if n % 3 == 2 else example_value(kind.inner, n)
    if isinstance(kind, k.Id):
        return ids.new_id(kind.prefix)
    if isinstance(kind, k.Short):
        return ("short", "ünï 😀 %_", "Short value")[n % 3] + (f" {n}" if n >= 3 else "")
    if isinstance(kind, k.Text):
        return ("text", "line one\nline two", "")[n % 3] + (f" {n}" if n >= 3 else "")
    if isinstance(kind, k.Count):
        return (1, 0, 2**63 - 1)[n % 3]
    if isinstance(kind, k.Int):
        return (-2, 7, -(2**63))[n % 3]
    if isinstance(kind, k.Float):
        return (0.5, -1.0, 1e300)[n % 3]
    if isinstance(kind, k.Bool):
        return n % 2 == 0
    if isinstance(kind, k.Instant):
        return datetime(2026, 1, 2, tzinfo=timezone.utc) + timedelta(milliseconds=n)
    if isinstance(kind, k.Json):
        return ({"k": 1, "f": 1.0, "b": True, "n": None, "s": "x", "l": [1, "a"]}, {}, {"$a.b": {"": [2**63 - 1]}})[n % 3]
    if isinstance(kind, k.FloatMap):
        return ({"x": 0.5}, {}, {"a": -1.0, "b": 2.0})[n % 3]
    if isinstance(kind, k.JsonValue):
        return ([1, "a", 1.0], 7, {"k": None})[n % 3]
    if isinstance(kind, k.Choice):
        members = list(kind.enum)
        return members[n % len(members)]
    if isinstance(kind, k.Strings):
        return (("a", "b"), (), ("c",))[n % 3]
    if isinstance(kind, k.Records):
        return ((example(kind.record, variant=n), example(kind.record, variant=n + 1)), (),
                (example(kind.record, variant=n),))[n % 3]
    if isinstance(kind, k.Record):
        return example(kind.record, variant=n)
    raise TypeError(f"no example value for {kind!r}")


def example(cls: type, variant: int = 0, **fields: Any) -> Any:
    """A valid entity (or nested record) of a described class: a fresh key,
    a value of each data field's kind (``variant`` picks which), and the
    ``fields`` given; stamps and store-owned fields keep their defaults,
    or hold the value a create stores when the field declares one (a run's
    first revision)."""
    from . import kinds as k

    values: dict[str, Any] = {}
    for name, spec in k.specs(cls).items():
        if name in fields:
            continue
        if spec.role == k.KEY:
            values[name] = example_value(spec.kind)
        elif spec.role == k.DATA:
            kind = spec.kind
            if isinstance(kind, k.Short) and kind.nonempty:
                values[name] = f"{name}-{ids.new_id('x')[2:]}"
            else:
                values[name] = example_value(kind, variant)
        elif spec.role == k.OWNED and spec.initial:
            values[name] = spec.initial[0]
    values.update(fields)
    return cls(**values)


# -- checks charged to one clause ---------------------------------------------------


def shorten(value: Any, limit: int = 160) -> str:
    """``repr(value)`` of at most about ``limit`` characters, cut at a word or
    item boundary (never inside a word) with the number of characters left
    out."""
    from .words import clip

    text = value if isinstance(value, str) and value.startswith("<") else repr(value)
    return clip(text, limit)


def _rule(clause_id: str) -> str:
    from .attribution import rule_of

    return rule_of(clause_id)


class ClauseViolation(AssertionError):
    """A check of one or more clauses failed.

    The message leads with the clause and its rule in words, then what was
    checked, what was expected and what was observed.  ``cortex_clauses``
    tells the certification report which clauses failed (the test's other
    clauses are not charged)."""

    def __init__(self, clauses: str | Sequence[str], what: str, expected: Any = None,
                 observed: Any = None, detail: str = "") -> None:
        ids = (clauses,) if isinstance(clauses, str) else tuple(clauses)
        lines = [f"{c} broken: {_rule(c)}" for c in ids]
        if what:
            lines.append(f"checked: {what}")
        if expected is not None or observed is not None:
            lines.append(f"expected: {shorten(expected)}")
            lines.append(f"observed: {shorten(observed)}")
        if detail:
            lines.append(detail)
        super().__init__("\n".join(lines))
        self.cortex_clauses = ids
        self.expected = expected
        self.observed = observed


@contextmanager
def clause(*ids: str, what: str = "") -> Iterator[None]:
    """Charge a failed check inside the block to ``ids`` (not to every clause
    the test names)::

        with clause("GW-ST-3", what="a second set_replied"):
            assert gateway.set_replied(c, "tg", "m0", "other") is False

    A failing ``assert`` (or an unexpected exception) becomes a
    :class:`ClauseViolation` of ``ids``; a violation raised by an inner
    check keeps its own, more precise clause."""
    try:
        yield
    except ClauseViolation:
        raise
    except AssertionError as exc:
        raise ClauseViolation(ids, what, detail=str(exc).strip()) from exc
    except Exception as exc:  # noqa: BLE001 - an unexpected error fails the clause too
        raise ClauseViolation(ids, what, detail=f"raised {type(exc).__name__}: {exc}") from exc


def expect(clause_id: str | Sequence[str], observed: Any, expected: Any, what: str) -> None:
    """Fail ``clause_id`` unless ``observed == expected``."""
    if observed != expected:
        raise ClauseViolation(clause_id, what, expected, observed)


def expect_is(clause_id: str | Sequence[str], observed: Any, expected: Any, what: str) -> None:
    """Fail ``clause_id`` unless ``observed is expected`` (``True`` is not
    ``1``, ``None`` is not an empty value)."""
    if observed is not expected:
        raise ClauseViolation(clause_id, what, expected, observed)


#: The comparisons :func:`expect_op` knows, by the operator's source text.
COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "is": operator.is_,
    "is not": operator.is_not,
    "in": lambda a, b: a in b,
    "not in": lambda a, b: a not in b,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def expect_op(clause_id: str | Sequence[str], observed: Any, op: str, other: Any, what: str) -> None:
    """Fail ``clause_id`` unless ``observed <op> other`` holds, ``op`` one of
    :data:`COMPARISONS` (``expect_op(c, row.id, "in", listed, what)``); the
    failure shows the operator and ``other`` as what was expected."""
    if op not in COMPARISONS:
        raise TypeError(f"expect_op: unknown comparison {op!r} (one of {', '.join(COMPARISONS)})")
    if not COMPARISONS[op](observed, other):
        raise ClauseViolation(clause_id, what, Said(f"{op} {shorten(other)}"), observed)


def expect_true(clause_id: str | Sequence[str], observed: Any, what: str) -> None:
    """Fail ``clause_id`` unless ``observed`` is true (truthy, as ``if`` tests it)."""
    if not observed:
        raise ClauseViolation(clause_id, what, Said("a true value"), observed)


def expect_false(clause_id: str | Sequence[str], observed: Any, what: str) -> None:
    """Fail ``clause_id`` unless ``observed`` is false (falsy: ``False``,
    ``None``, an empty collection, zero)."""
    if observed:
        raise ClauseViolation(clause_id, what, Said("a false value"), observed)


def expect_that(clause_id: str | Sequence[str], holds: Any, what: str, expected: Any, observed: Any) -> None:
    """Fail ``clause_id`` unless ``holds`` is true: a condition no other
    ``expect_*`` states; ``expected`` and ``observed`` say what the failure
    shows (pass :class:`Said` words for a description)."""
    if not holds:
        raise ClauseViolation(clause_id, what, expected, observed)


def expect_strict(clause_id: str | Sequence[str], observed: Any, expected: Any, what: str) -> None:
    """Fail ``clause_id`` unless :func:`strict_equal` (types included) holds."""
    if not strict_equal(observed, expected):
        raise ClauseViolation(clause_id, what, expected, observed, detail="(compared with types: 1 is not 1.0)")


def expect_result(clause_id: str, call: Callable[[], Any], expected: Any, what: str) -> None:
    """Fail ``clause_id`` unless ``call()`` returns ``expected``: an error it
    raises is the observation (charged to ``clause_id``, not to the test)."""
    try:
        observed = call()
    except Exception as exc:  # noqa: BLE001 - the error is the observation
        raise ClauseViolation(clause_id, what, expected, f"{type(exc).__name__}: {exc}") from exc
    expect(clause_id, observed, expected, what)


class Said(str):
    """Words, not a value: shown as they are (no quotes) as expected or observed."""

    def __repr__(self) -> str:
        return str(self)


def expect_raises(clause_id: str, error: type[BaseException], call: Callable[[], Any],
                  what: str) -> BaseException:
    """Fail ``clause_id`` unless ``call()`` raises exactly an ``error``; returns it."""
    expected = Said(f"raises {error.__name__}")
    try:
        value = call()
    except error as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - the wrong error is the observation
        raise ClauseViolation(clause_id, what, expected, Said(f"raised {type(exc).__name__}: {exc}")) from exc
    raise ClauseViolation(clause_id, what, expected, Said(f"did not raise {error.__name__}: returned {shorten(value)}"))


def ctx(scope: str | Scope, partition: str = "", principal: str | None = None) -> Context:
    """``ctx("workspace=w1/project=p1")``."""
    return Context.of(scope, partition, principal)


@attrs.frozen
class Outcome:
    """What one racing call did: a value, or an exception."""

    value: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


#: The interpreter's switch interval while threads race (seconds): the
#: longest a thread keeps the interpreter while another waits for it.
RACE_SWITCH_INTERVAL = 5e-5


@contextmanager
def interleaved() -> Iterator[None]:
    """Make racing threads take turns often: the interpreter's switch
    interval is :data:`RACE_SWITCH_INTERVAL` inside, and what it was after.

    At the default 5 ms a thread runs up to 5 ms of Python before a waiting
    thread gets the interpreter.  A store whose calls never release it (an
    in-memory store, mongomock) then finishes a read and the write that
    depends on it inside one slice more often the faster it is, and its race
    goes unseen: measured on the faithful mongomock, a charge-then-insert
    mutant's race showed in 47 % of 4-thread rounds at 5 ms, 87 % at 0.1 ms
    and 99 % at 0.05 ms.  Stores whose calls wait on a database release the
    interpreter in every call and lose nothing.  The interval is
    process-wide: a test process races one set of threads at a time."""
    before = sys.getswitchinterval()
    if before <= RACE_SWITCH_INTERVAL:  # already as fine (or finer): left alone
        yield
        return
    sys.setswitchinterval(RACE_SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def race(calls: Sequence[Callable[[], Any]], timeout: float = 60.0) -> list[Outcome]:
    """Run each call in its own thread, all released by one barrier, the
    threads :func:`interleaved`.

    Returns one :class:`Outcome` per call, in the order given.  A thread that
    does not finish within ``timeout`` seconds fails the race loudly (a hung
    store is a bug, not a pass).
    """
    barrier = threading.Barrier(len(calls))
    results: list[Outcome | None] = [None] * len(calls)

    def worker(i: int, call: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[i] = Outcome(value=call())
        except BaseException as exc:  # noqa: BLE001 - the outcome is the data
            results[i] = Outcome(error=exc)

    threads = [
        threading.Thread(target=worker, args=(i, c), name=f"cortex-race-{i}", daemon=True)
        for i, c in enumerate(calls)
    ]
    with interleaved():
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    if hung:
        raise AssertionError(f"{len(hung)} racing call(s) did not return within {timeout}s")
    return [r for r in results if r is not None]


#: Types compared by ``==`` alone once both sides have the same one (no
#: subclass: a str-valued enum is not ``str``).
_PLAIN = frozenset({str, int, bool, bytes, type(None)})
#: An attrs class's field names, by class (``attrs.has`` and ``attrs.fields``
#: cost more than the comparison of a short field; a check compares
#: hundreds of thousands of values).
_FIELDS: dict[type, tuple[str, ...] | None] = {}


def strict_equal(a: Any, b: Any) -> bool:
    """Deep equality that also requires equal types (``1`` is not ``1.0`` or
    ``True``), as RSC-GEN-7 demands of JSON round trips."""
    t = type(a)
    if t is type(b) and t in _PLAIN:
        return bool(a == b)
    if isinstance(a, Enum) or isinstance(b, Enum):
        # str-valued enums (RunState, …) compare by value with their strings
        return isinstance(a, str) and isinstance(b, str) and str.__eq__(a, b)
    if t is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and _all_strict_equal(a.values(), map(b.__getitem__, a))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and _all_strict_equal(a, b)
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    try:
        names = _FIELDS[t]
    except KeyError:
        names = _FIELDS[t] = tuple(f.name for f in attrs.fields(t)) if attrs.has(t) else None
    if names is not None:
        return _all_strict_equal([getattr(a, n) for n in names], [getattr(b, n) for n in names])
    return bool(a == b)


def _all_strict_equal(xs: Iterable[Any], ys: Iterable[Any]) -> bool:
    """:func:`strict_equal` of each pair, a plain value of the same type on
    both sides compared in place (most of a JSON document's values)."""
    plain = _PLAIN
    for x, y in zip(xs, ys):
        t = type(x)
        if t is type(y) and t in plain:
            if x != y:
                return False
        elif not strict_equal(x, y):
            return False
    return True


def assert_strict_equal(actual: Any, expected: Any, what: str = "value") -> None:
    if not strict_equal(actual, expected):
        raise AssertionError(f"{what} differs (types included):\n  got      {actual!r}\n  expected {expected!r}")




def state_view(
    store: Any,
    scopes: Sequence[str | Scope | Context],
    *,
    run_ids: Sequence[str] = (),
    step_ids: Sequence[str] = (),
    delivery_ids: Sequence[str] = (),
    reply_withs: Sequence[str] = (),
    conversation_ids: Sequence[str] = (),
    classes: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Everything observable through the store's declared classes, as seen
    from each of ``scopes`` (and through the across-scope lists).

    Compare two views taken before and after a call to prove the call wrote
    nothing (a refused call writes nothing).  Only methods of declared
    classes are called; ``classes`` narrows the view to those classes and
    the classes they require (the rows a call of those classes can touch:
    classes share rows only through their requirements).  a2a rows are seen through the partition of each
    context (a ``Context`` may carry one); the scope-ignoring a2a lists are
    read for every partition of ``scopes`` and for the global one.
    """
    from .classes import CLASSES, closure

    caps = frozenset(getattr(store, "capabilities", frozenset()))
    if classes is not None:
        caps &= closure(frozenset(classes))
    contexts = [s if isinstance(s, Context) else ctx(s) for s in scopes]
    refs = {"run_ids": run_ids, "step_ids": step_ids, "delivery_ids": delivery_ids,
            "reply_withs": reply_withs, "conversation_ids": conversation_ids}
    view: dict[str, Any] = {}
    for cls in CLASSES.values():
        if cls.name in caps and cls.view is not None:
            view.update(cls.view(store, contexts, refs))
    for cls in CLASSES.values():
        if cls.name in caps and cls.view_across is not None:
            view.update(cls.view_across(store, contexts))
    return view
