"""Shared vocabulary of the machines: scopes, ids, instants, entities.

Everything here is deterministic given Hypothesis' choices, so a failing
example replays and shrinks: ids are built from small integers
(``fixed_id("arun", 7)``), scopes come from a fixed pool with ancestors,
siblings and look-alikes, and instants are chosen relative to the clock and
to known deadlines.
"""

from __future__ import annotations

import copy
import functools
import uuid
from datetime import datetime, timedelta
from typing import Any, Callable, Hashable, Iterable

import attrs
from hypothesis import strategies as st
from typeid import TypeID

from cortex_spec.context import Context
from cortex_spec.scope import Scope

from cortex_spec.clock import to_millis

from .ops import Op, Outcome

__all__ = [
    "Tick",
    "Script",
    "SCOPE_POOL",
    "ROLES",
    "PRINCIPALS",
    "fixed_id",
    "ctx_of",
    "contexts",
    "instants_around",
    "json_objects",
    "optional",
    "record",
    "RECORDS",
    "short_texts",
    "make_op",
]

#: The scope pool: an exact scope, its ancestors and descendant, a sibling,
#: look-alikes that share a string prefix, a positional look-alike, and an
#: unrelated tenant.
SCOPE_POOL: tuple[str, ...] = (
    "ws=w1",
    "ws=w1/proj=p1",
    "ws=w1/proj=p1/env=e1",
    "ws=w1/proj=p2",
    "ws=w10",
    "ws=w10/proj=p1",
    "ws=w1x",
    "org=w1",
    "ws=w2",
)

#: Roles relative to the scope rows of a scenario are created in.
ROLES: dict[str, str] = {
    "exact": "ws=w1/proj=p1",
    "ancestor": "ws=w1",
    "descendant": "ws=w1/proj=p1/env=e1",
    "sibling": "ws=w1/proj=p2",
    "lookalike": "ws=w10/proj=p1",
    "other": "ws=w2",
}


def fixed_id(prefix: str, n: int) -> str:
    """A valid TypeID whose suffix encodes ``n`` (ids order like ``n``)."""
    return str(TypeID.from_uuid(uuid.UUID(int=n), prefix=prefix))


@functools.cache
def ctx_of(scope: str) -> Context:
    return Context(Scope.parse(scope))


#: The principals a caller acts for: none, and two distinct ones, so that a
#: store writing the caller's principal where the rule keeps the creator's
#: (or keying by it) shows up.
PRINCIPALS: tuple[str | None, ...] = (None, "alice", "bob")


@functools.cache
def contexts(zero: bool = False, actors: bool = False) -> st.SearchStrategy[Context]:
    """A context from the scope pool (optionally the zero scope too); with
    ``actors``, acting for one of :data:`PRINCIPALS`."""
    choices = [ctx_of(s) for s in SCOPE_POOL]
    if zero:
        choices.append(Context(Scope()))
    if actors:
        choices = [attrs.evolve(c, principal=p) for c in choices for p in PRINCIPALS]
    return sampled(tuple(choices))


def instants_around(points: Iterable[datetime]) -> st.SearchStrategy[datetime]:
    """Exactly at, one millisecond either side of, and far before/after each
    point (deadlines, the clock)."""
    out: set[datetime] = set()
    for p in points:
        out |= {p, p - timedelta(milliseconds=1), p + timedelta(milliseconds=1),
                p - timedelta(days=1), p + timedelta(days=1)}
    return sampled(tuple(sorted(out)))


def sampled(choices: Iterable[Any]) -> st.SearchStrategy[Any]:
    """``sampled(choices)``, built once per distinct choice list.

    A machine draws from the same few choice lists thousands of times, and
    Hypothesis validates every strategy it has not seen on its first draw:
    building ``st.sampled_from`` anew for each draw made the draw about half
    as expensive again.  Choices are told apart by value and type (``1``,
    ``1.0`` and ``True`` are equal in Python, not to a store); a list with an
    unhashable element is built each time."""
    key = choices if type(choices) is tuple else tuple(choices)
    try:
        return _sampled(key, tuple(map(type, key)))
    except TypeError:  # an unhashable choice
        return st.sampled_from(key)


@functools.lru_cache(maxsize=4096)
def _sampled(choices: tuple, types: tuple) -> st.SearchStrategy:
    return st.sampled_from(choices)


#: JSON values a machine stores: every type the contract tells apart (1, 1.0
#: and True; "" and null; the 64-bit bounds; nested lists and objects) ...
_JSON_VALUES: tuple[Any, ...] = (
    None, True, False, 0, 1, -1, 2**63 - 1, -(2**63), 1.0, 0.5, -2.25, 1e300, "", "1", "\u00e9\u00a0x",
    "line\nline", [], [1, 1.0, True], ["a", [None]], {}, {"k": 1}, {"\u00e9": {"$x": [1.5]}},
)
#: ... under keys a document store treats specially ($, dots) or folds (é)
_JSON_KEYS = ("a", "b", "$x", "k.y", "\u00e9", "")
#: The objects the machines draw from: each value once under a key, each key
#: once, and objects mixing look-alike values (a pool, not a recursive
#: strategy: a drawn nested object cost a machine ~5 ms, most of a row's
#: draw, while the machines look for wrong states and races, not for values
#: a codec mangles — the generated field tests and the JSON round-trip
#: tests try those).
JSON_POOL: tuple[dict[str, Any], ...] = (
    {},
    *({_JSON_KEYS[i % len(_JSON_KEYS)]: v} for i, v in enumerate(_JSON_VALUES)),
    {"a": 1, "b": 1.0},
    {"a": True, "b": 1, "$x": "1"},
    {"k.y": None, "\u00e9": ""},
    {"a": [1, [1.0, {"b": False}]], "b": {}},
)


@functools.cache
def json_objects() -> st.SearchStrategy[dict[str, Any]]:
    """Small JSON objects whose values keep their types (1, 1.0, True
    differ), drawn from :data:`JSON_POOL`; each draw is a fresh copy (a store
    that changed its argument must not change later examples)."""
    return sampled(JSON_POOL).map(copy.deepcopy)


@functools.lru_cache(maxsize=4096)
def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``None`` or a value of ``strategy``, built once per strategy (a
    strategy Hypothesis has not seen yet is validated on its first draw; the
    strategies passed here are themselves built once, see :func:`sampled`)."""
    return st.one_of(st.none(), strategy)


#: The strategies :func:`record` made: their fields' strategies, in order, and
#: the function that makes a value of the fields' values (so that
#: :class:`.differential.Draws` draws the fields itself).
RECORDS: dict[st.SearchStrategy[Any], tuple[tuple[st.SearchStrategy[Any], ...], Callable[[tuple[Any, ...]], Any]]] = {}


def record(fields: Iterable[st.SearchStrategy[Any]], make: Callable[[tuple[Any, ...]], Any]) -> st.SearchStrategy[Any]:
    """``make`` of a value of each of ``fields``, drawn in order: the fields
    of an entity.  (``st.fixed_dictionaries`` also draws a shuffle of its
    keys, one choice per key, to vary a dict's order, which an entity made
    from keywords does not have.)  Build it once per field list: it is kept
    in :data:`RECORDS`."""
    fields = tuple(fields)
    strategy = st.tuples(*fields).map(make)
    RECORDS[strategy] = (fields, make)
    return strategy


@functools.cache
def short_texts() -> st.SearchStrategy[str]:
    return st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)


def make_op(
    method: str,
    ctx: Context,
    *args: Any,
    keys: Iterable[Hashable] | None,
    label: str = "",
    kwargs: dict[str, Any] | None = None,
    target: str = "",
    binds: str = "",
) -> Op:
    return Op(method, ctx, tuple(args), None, None if keys is None else frozenset(keys), label,
              tuple((kwargs or {}).items()), target, binds)


@attrs.frozen
class Tick:
    """A setup step that sets the clock (rows claimed "at various times")."""

    at: datetime

    def render(self) -> str:
        return f"clock.set(T({to_millis(self.at)}))"


@attrs.frozen
class Script:
    """A branch step with control flow between store calls (a writer that
    stops when it loses its claim): ``run(call)`` makes the calls through
    ``call(op) -> Outcome``; ``source`` is the same as Python, and
    ``imports`` what that line needs."""

    name: str
    run: Callable[[Callable[[Op], Outcome]], None] = attrs.field(eq=False, hash=False)
    source: str
    imports: str = ""

    def render(self) -> str:
        return self.source
