"""What each class gives the cross-class suites, and how they find it.

The scope suite (``test_scope.py``) and the common suite (``test_common.py``)
check their rules on every method of every declared class, yet name no
class: each class supplies its own :class:`Examples` next to its own tests
(``EXAMPLES`` in ``conformance/test_<class>.py``), and the examples of a
class's stored kinds are generated from their description
(:func:`table_examples`).  :func:`examples` merges both, per class.

The fields of :class:`Examples` (every one optional but ``cls``):

* ``seed(store, fixture) -> world``: rows at :data:`HOME` the calls address,
  as a namespace.  ``fixture(name)`` is pytest's ``request.getfixturevalue``:
  a class whose methods live on an object opened through a fixture opens it
  here and keeps it in the world (the calls then use ``world.<attribute>``).
  ``world.view`` may hold keyword arguments of
  :func:`cortex_spec.testing.state_view` (the ids the default view reads).
* ``good[method](store, ctx, world)``: a call with valid arguments,
  addressing the seeded rows; ``bad[method](store, ctx, world)``: a call
  whose other arguments are garbage (``InvalidArgument`` under a valid
  context, ``NoScope`` under the zero scope).  Every method of the class
  needs both.
* ``view(store, world, scopes)``: everything observable from ``scopes``, to
  prove a refused call wrote nothing (default: ``state_view`` of the class
  with ``world.view``).
* ``kinds``: the entity kinds (:class:`Kind`: create, by-id read, lists) of
  the visibility, immutability, id and read-back clauses.
* ``byid``: the methods that address one row by its key (:class:`ByIdOp`,
  SCOPE-BYID); ``byid_methods``: the names among them that must have one
  (the check that none was dropped, SCOPE-EXACT-3); ``exact_byid``: the
  by-id methods the class's area file marks **exact** (SCOPE-EXACT-3: only
  at the row's own scope), which its own module tests and which have no
  ``byid`` entry (those reach a row from its ancestors).
* ``xs``: the across-scope methods by name (:class:`XsMethod`, SCOPE-XS);
  every method a scoped class marks unscoped needs one.
* ``precedence(store, world) -> [call(ctx)]``: calls with a bad argument
  that address a seeded row or a missing one: ``InvalidArgument`` must come
  before the not-found error (SCOPE-ZERO-3).
* ``state_errors``: rows in a state that makes a by-id call a state error
  (:class:`StateError`): out of reach, the call is the not-found error.
* ``every_write(store, row, callers) -> (written, check)``: every write
  method of the class called from each of ``callers`` on rows stored at
  ``row``; ``written`` names the keys involved (attributes the classes'
  ``hidden`` read), ``check()`` asserts each row still reads back at ``row``
  (SCOPE-IMM-4/5).  ``hidden(store, ctx, written)``: asserts that ``ctx``
  (an outsider of ``row``) sees none of the class's rows; it runs for every
  declared class after any class's writes.
* ``exact``: the methods that offer ``exact``, as a keyword or as a field
  of their filter argument (SCOPE-EXACT-2); no other method may.
* ``scope_args``: the methods that take a scope argument besides ``ctx``
  (SCOPE-COVERS-3; the class's own module tests them); no other may.
* ``sites``: where values go, per rule of the common suite, as
  :class:`Site` tuples.  The rules: ``"instant"`` (RSC-GEN-2), ``"create"``
  (RSC-GEN-4: a create with stamps given as keyword fields), ``"id"``
  (RSC-GEN-5), ``"short"`` (RSC-GEN-6), ``"text"`` (RSC-GEN-6/7),
  ``"json"`` (RSC-GEN-7), ``"counter"`` (RSC-GEN-9), ``"enum"``
  (RSC-GEN-10) and ``"size"`` (RSC-GEN-8/13, ``test_sizes.py``: the call
  takes the payload text, ``read`` reads back the row the write stored).
  ``size_methods``: the write methods whose payload is unbounded; each needs
  a ``"size"`` site (the check that none was dropped).
* ``long_scopes(store, c, up)``: every writing method of the class called
  at ``c``, a scope of the longest keys and values SCOPE-VAL allows, and the
  rows read back from ``c`` and from its parent ``up`` (SCOPE-CANON-6,
  ``test_long_scopes.py``), through :func:`long_call`, :func:`long_check`
  and :func:`long_scope_of`; every scoped class of the store itself needs it.

Class-specific clauses a generic test also checks (``Kind.clauses``,
``Site.clauses``, ``StateError.clauses``) are added to that test's clause
marks, as the union over every class, so each case of the test counts for
them (the marks the tests carried when they named the classes).
"""

from __future__ import annotations

import functools
import importlib
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs
import pytest

from cortex_spec import CLASSES, Context, Scope, ids
from cortex_spec import kinds as k
from cortex_spec.clock import EPOCH
from cortex_spec.errors import InvalidArgument
from cortex_spec.testing import assert_strict_equal, clause, ctx, example, example_value, expect, state_view

from .helpers import assert_scope, raises

__all__ = [
    "HOME",
    "VIEW_SCOPES",
    "OUTSIDERS_OF_HOME",
    "ID_CALLERS",
    "XS_SCOPES",
    "PAST",
    "XS_NOW",
    "Call",
    "Fixture",
    "Kind",
    "ByIdOp",
    "XsMethod",
    "StateError",
    "Site",
    "Keyed",
    "Examples",
    "examples",
    "table_examples",
    "clauses_of",
    "FAR",
    "LongScopes",
    "long_call",
    "long_check",
    "long_scope_of",
    "long_ids",
    "table_long_scopes",
    "SITE_VIEW_SCOPES",
    "expect_invalid",
    "expect_stored",
]

#: The scope the seeded rows live at.
HOME = "ws=w1/proj=p1"
#: The scopes a whole-state view of the seeded world is read from.
VIEW_SCOPES = [HOME, "ws=w1", "ws=w2", "ws=w1/proj=p1/env=e1"]
#: Outsiders of a row stored at HOME: descendant, sibling, unrelated, look-alikes,
#: positional look-alike, swapped order and case variants.
OUTSIDERS_OF_HOME = [
    "ws=w1/proj=p1/env=e1",  # a descendant never sees its ancestor (SCOPE-VIS-2)
    "ws=w1/proj=p2",  # sibling (SCOPE-VIS-3)
    "ws=w2",  # unrelated
    "ws=w10/proj=p1",  # look-alikes (SCOPE-VIS-5)
    "ws=w1x/proj=p1",
    "ws=w1/proj=p10",
    "ws=w1/proj=p1x",
    "org=w1/proj=p1",  # positional look-alike (SCOPE-VIS-4)
    "proj=p1/ws=w1",  # swapped order (SCOPE-VIS-4)
    "WS=w1/proj=p1",  # case (SCOPE-MODEL-4)
    "ws=w1/proj=P1",
]
#: Callers that reuse an id stored at HOME (SCOPE-ID-1).
ID_CALLERS = [HOME, "ws=w1", "ws=w1/proj=p1/env=e1", "ws=w1/proj=p2", "ws=w2", "ws=w10/proj=p1", "org=w1"]
#: The scopes an across-scope seed (``XsMethod.seed``) stores rows at.
XS_SCOPES = ["ws=w1", HOME, "ws=w10", "org=w1", "a=1/b=2", "b=2/a=1"]
#: A deadline that has passed when a test starts (the clock starts at EPOCH).
PAST = EPOCH - timedelta(hours=1)
#: The instant the across-scope sweeps compare with.
XS_NOW = EPOCH + timedelta(hours=1)
#: An instant after every deadline a test sets.
FAR = EPOCH + timedelta(days=365 * 100)

#: ``call(store, ctx, world)``
Call = Callable[[Any, Any, SimpleNamespace], Any]
#: ``fixture(name)``: the value of a pytest fixture of the running test
Fixture = Callable[[str], Any]
#: ``view(store, world, scopes)``
View = Callable[[Any, SimpleNamespace, Sequence[Any]], dict]
#: ``long_scopes(store, c, up)``: calls at the long scope ``c``, reads from ``c`` and its parent ``up``
LongScopes = Callable[[Any, Context, Context], None]


@attrs.frozen
class Kind:
    """How to create, address and list one entity kind."""

    name: str
    cls: str
    new: Callable[..., Any]  # (shared, **fields) -> entity object
    create: Callable[[Any, Context, Any], Any]
    get: Callable[[Any, Context, Any], Any] | None  # by-id read of the object's row
    lists: tuple[Callable[[Any, Context, SimpleNamespace], list], ...]
    counts: tuple[Callable[[Any, Context, SimpleNamespace], int], ...] = ()
    #: the paged form of ``lists[0]``, ``(store, ctx, shared, start, size) -> list``:
    #: ``size`` (>= 1) rows from the ``start``-th on, or None when it does not
    #: page; the visibility matrix reads pages of it while the look-alike
    #: rows are present
    page: Callable[[Any, Context, SimpleNamespace, int, int], list] | None = None
    across: Callable[[Any, SimpleNamespace], list] | None = None
    not_found: type | None = None
    vary: Callable[[Any], Any] = lambda o: o  # same id, different payload
    #: rows also confined to a partition (A2A-GEN-3)
    partitioned: bool = False
    #: more reads of the row's scope for SCOPE-CANON-5: (store, ctx, obj, shared) -> [(what, scope)]
    reads: Callable[[Any, Context, Any, SimpleNamespace], list] | None = None
    #: the references rows of one test share (``new``'s first argument), made afresh per test
    shared: Callable[[], SimpleNamespace] = SimpleNamespace
    #: (store, shared, obj, scopes) -> everything observable of the kind (default: ``state_view``)
    view: Callable[[Any, SimpleNamespace, Any, Sequence[Any]], dict] | None = None
    #: fields of rows that carry one shared reference at several scopes
    #: (SCOPE-ID-2), or None when the kind carries none
    same_reference: Mapping[str, Any] | None = None
    #: class clauses a kind test also checks, by test: ``"ids"`` (an id reused
    #: in any scope), ``"same_reference"``
    clauses: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)

    def observe(self, store: Any, shared: SimpleNamespace, obj: Any, scopes: Sequence[Any]) -> dict:
        if self.view is not None:
            return self.view(store, shared, obj, scopes)
        return state_view(store, scopes)


@attrs.frozen
class ByIdOp:
    """A method that addresses one row by its key."""

    name: str
    cls: str
    not_found: type
    setup: Callable[[Any, Context], str]  # a fresh row at ctx's scope -> its key
    call: Callable[[Any, Context, str], Any]
    done: Callable[[Any, Context, str], None]  # the effect, checked from the row's scope
    #: a key naming no row
    missing: Callable[[], str]
    #: (store, key, scopes) -> everything observable (default: ``state_view``)
    view: Callable[[Any, str, Sequence[Any]], dict] | None = None

    def observe(self, store: Any, key: str, scopes: Sequence[Any]) -> dict:
        if self.view is not None:
            return self.view(store, key, scopes)
        return state_view(store, scopes)


@attrs.frozen
class XsMethod:
    """An across-scope method (SCOPE-XS): rows of many scopes, the call, how
    to act on a returned row under its own scope, the scoped twin, bad calls."""

    name: str
    cls: str
    seed: Callable[[Any], dict[str, Any]]  # rows at XS_SCOPES: selected id -> its scope
    call: Callable[[Any, Any], list]
    act: Callable[[Any, Any], None]
    scoped_twin: Callable[[Any, Any], list]
    bad: tuple[Callable[[Any, Any], Any], ...]
    #: also confined to ``ctx.partition`` (A2A-PART-3)
    partitioned: bool = False


@attrs.frozen
class StateError:
    """A row in a state that makes a by-id call a state error: a caller that
    cannot see the row gets the not-found error instead."""

    name: str
    cls: str
    #: store -> (the call under a context, view(scopes) of what it could change)
    setup: Callable[[Any], tuple[Callable[[Context], Any], Callable[[Sequence[Any]], dict]]]
    not_found: type
    state_error: type
    clauses: tuple[str, ...] = ()


@attrs.frozen
class Site:
    """One place a value goes: a field of an entity or an argument of a method.

    ``call(store, ctx, world, value)`` makes the call; ``read(store, ctx, world,
    result)`` reads the stored value back afresh (None when nothing is stored);
    ``prepare`` makes the rows one call consumes (a fresh row in the state the
    call needs).  The last dotted part of ``name`` is the attribute of the
    call's result that holds the value (instant and JSON sites).
    """

    name: str
    cls: str
    call: Callable[[Any, Context, SimpleNamespace, Any], Any]
    read: Callable[[Any, Context, SimpleNamespace, Any], Any] | None = None
    prepare: Callable[[Any, Context, SimpleNamespace], None] | None = None
    prefix: str = ""  # id sites: the TypeID prefix
    optional: bool = False  # None is a valid value
    enum: type | None = None  # enum sites: the enumeration
    #: more values refused here (members of other enumerations …)
    invalid: tuple[Any, ...] = ()
    #: class clauses the site's rule test also checks
    clauses: tuple[str, ...] = ()
    #: size sites: the store refuses exactly the rows over the limit (False
    #: where the contract refuses earlier, on a bound that does not depend
    #: on the stored row)
    exact: bool = True


@attrs.frozen
class Keyed:
    """A row of a list whose entity has no ``id``, keyed for the suites."""

    id: str
    scope: Scope
    row: Any


def _default_view(cls: str) -> View:
    def view(store: Any, world: SimpleNamespace, scopes: Sequence[Any]) -> dict:
        return state_view(store, scopes, classes={cls}, **getattr(world, "view", {}))
    return view


def _empty_seed(store: Any, fixture: Fixture) -> SimpleNamespace:
    return SimpleNamespace()


def _both(a: Any, b: Any, join: Callable[[Any, Any], Any]) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return join(a, b)


def _join_precedence(a: Callable, b: Callable) -> Callable:
    return lambda store, world: [*a(store, world), *b(store, world)]


def _join_writes(a: Callable, b: Callable) -> Callable:
    def every_write(store: Any, row: str, callers: list[str]) -> tuple[SimpleNamespace, Callable[[], None]]:
        wa, check_a = a(store, row, callers)
        wb, check_b = b(store, row, callers)

        def check() -> None:
            check_a()
            check_b()
        return SimpleNamespace(**{**vars(wa), **vars(wb)}), check
    return every_write


def _join_hidden(a: Callable, b: Callable) -> Callable:
    def hidden(store: Any, c: Context, written: SimpleNamespace) -> None:
        a(store, c, written)
        b(store, c, written)
    return hidden


def _join_long_scopes(a: LongScopes, b: LongScopes) -> LongScopes:
    def long_scopes(store: Any, c: Context, up: Context) -> None:
        a(store, c, up)
        b(store, c, up)
    return long_scopes


@attrs.frozen
class Examples:
    """What one class gives the cross-class suites (see the module docstring)."""

    cls: str
    seed: Callable[[Any, Fixture], SimpleNamespace] = _empty_seed
    good: Mapping[str, Call] = attrs.field(factory=dict)
    bad: Mapping[str, Call] = attrs.field(factory=dict)
    view: View | None = None
    kinds: tuple[Kind, ...] = ()
    byid: tuple[ByIdOp, ...] = ()
    xs: Mapping[str, XsMethod] = attrs.field(factory=dict)
    sites: Mapping[str, tuple[Site, ...]] = attrs.field(factory=dict)
    precedence: Callable[[Any, SimpleNamespace], list[Callable[[Context], Any]]] | None = None
    state_errors: tuple[StateError, ...] = ()
    every_write: Callable[[Any, str, list[str]], tuple[SimpleNamespace, Callable[[], None]]] | None = None
    hidden: Callable[[Any, Context, SimpleNamespace], None] | None = None
    byid_methods: frozenset[str] = frozenset()
    exact: frozenset[str] = frozenset()
    scope_args: frozenset[str] = frozenset()
    exact_byid: frozenset[str] = frozenset()
    long_scopes: LongScopes | None = None
    size_methods: frozenset[str] = frozenset()

    def viewer(self) -> View:
        return self.view or _default_view(self.cls)

    def merged(self, other: "Examples") -> "Examples":
        """These examples with ``other``'s added (``other`` wins per method;
        seeds, views, writes and checks run both)."""
        seeds = (self.seed, other.seed)

        def seed(store: Any, fixture: Fixture) -> SimpleNamespace:
            world = SimpleNamespace()
            for s in seeds:
                for key, value in vars(s(store, fixture)).items():
                    if key == "view" and hasattr(world, "view"):
                        value = {**world.view, **value}
                    setattr(world, key, value)
            return world

        sites = dict(self.sites)
        for name, more in other.sites.items():
            sites[name] = tuple(sites.get(name, ())) + tuple(more)
        views = [v for v in (self.view, other.view) if v is not None]

        def view(store: Any, world: SimpleNamespace, scopes: Sequence[Any]) -> dict:
            out: dict = {}
            for v in views:
                out.update(v(store, world, scopes))
            return out

        return Examples(
            self.cls, seed, {**self.good, **other.good}, {**self.bad, **other.bad},
            view if views else None, self.kinds + other.kinds, self.byid + other.byid,
            {**self.xs, **other.xs}, sites,
            _both(self.precedence, other.precedence, _join_precedence),
            self.state_errors + other.state_errors,
            _both(self.every_write, other.every_write, _join_writes),
            _both(self.hidden, other.hidden, _join_hidden),
            self.byid_methods | other.byid_methods, self.exact | other.exact,
            self.scope_args | other.scope_args, self.exact_byid | other.exact_byid,
            _both(self.long_scopes, other.long_scopes, _join_long_scopes),
            self.size_methods | other.size_methods,
        )


# -- generated from the description ---------------------------------------------------------

#: A value no field kind accepts (an object of no type a kind checks for).
_NOT_A_VALUE = object()

#: The parent every generated row of a table holds, by (table, field): a
#: listing by parent (``list_steps(ctx, run_id)``) then sees the rows the
#: generated tests write.
_PARENTS: dict[tuple[str, str], Any] = {}


def parent_value(table: k.Table, listing: k.Listing) -> Any:
    """The value of ``listing``'s parent field the generated rows hold."""
    assert listing.parent is not None
    found = _PARENTS.get((table.name, listing.parent))
    if found is None:
        found = _PARENTS[(table.name, listing.parent)] = example_value(table.fields[listing.parent].kind)
    return found


def sample(table: k.Table, variant: int = 0, **fields: Any) -> Any:
    """``example(table.entity, …)`` holding each listing's parent value
    (unless ``fields`` gives one)."""
    parents = {li.parent: parent_value(table, li) for li in table.listings
               if li.parent is not None and li.parent not in fields}
    return example(table.entity, variant=variant, **parents, **fields)


def call_listing(store: Any, table: k.Table, listing: k.Listing, c: Any, count: bool = False,
                 **args: Any) -> Any:
    """``listing``'s list (or its count) with ``args``: keywords, or its
    filter object; a parent by position (the generated rows' one unless
    ``args`` names another)."""
    method = listing.count if count else listing.method
    assert method is not None
    given: tuple[Any, ...] = ()
    if listing.parent is not None:
        given = (args.pop(listing.parent, parent_value(table, listing)),)
    if listing.filter_class is not None:
        return getattr(store, method)(c, listing.filter_class(**args))
    return getattr(store, method)(c, *given, **args)


def _seed_table(table: k.Table) -> Callable[[Any, Fixture], SimpleNamespace]:
    def seed(store: Any, fixture: Fixture) -> SimpleNamespace:
        row = getattr(store, table.method("create"))(ctx(HOME), sample(table))
        return SimpleNamespace(**{f"{table.name}_row": row})
    return seed


def _listing_call(table: k.Table, listing: k.Listing, count: bool, garbage: bool) -> Call:
    method = listing.count if count else listing.method
    assert method is not None

    def call(store: Any, c: Any, w: SimpleNamespace) -> Any:
        if listing.filter_class is not None:
            return getattr(store, method)(c, "not a filter" if garbage else None)
        if garbage:
            if listing.parent is not None:
                return call_listing(store, table, listing, c, count, **{listing.parent: 3.5})
            bad = {"limit": "x"} if listing.paged and not count else (
                {"exact": "yes"} if listing.exact else {"search": 5} if listing.search else None)
            if bad is None:
                bad = {listing.filters[0].arg: 3.5} if listing.filters else {}
            return getattr(store, method)(c, **bad)
        return call_listing(store, table, listing, c, count)
    return call


def _table_view(store: Any, table: k.Table, scopes: Sequence[Any], keys: Iterable[str]) -> dict:
    """Everything observable of ``table`` from ``scopes``: each listing, and
    each of ``keys`` read by id (the error class when it is not seen)."""
    out: dict = {}
    keys = list(keys)
    for sc in scopes:
        c = sc if isinstance(sc, Context) else ctx(sc)
        where = c.scope.canonical()
        for listing in table.listings:
            out[f"{listing.method}@{where}"] = call_listing(store, table, listing, c)
        if "get" in table.ops:
            for key in keys:
                try:
                    out[f"{table.method('get')}[{key}]@{where}"] = getattr(store, table.method("get"))(c, key)
                except Exception as exc:  # noqa: BLE001 - the class is the observation
                    out[f"{table.method('get')}[{key}]@{where}"] = type(exc).__name__
    return out


def table_examples(table: k.Table) -> Examples:
    """The examples of one stored kind, from its description: a seeded row
    at HOME, a good and a bad call of every generated method, its entity
    kind, its by-id methods, the precedence of a bad field over a missing
    row, its writes from above (SCOPE-IMM-4/5) and the methods offering
    ``exact``."""
    row_of = f"{table.name}_row"
    keys_of = f"{table.name}_ids"
    good: dict[str, Call] = {}
    bad: dict[str, Call] = {}
    held = {f: v for u in table.unique for f, v in u.where}

    def m(op: str) -> Callable[..., Any]:
        return lambda s: getattr(s, table.method(op))

    for op in table.ops:
        if op == "create":
            good[table.method(op)] = lambda s, c, w: m("create")(s)(c, sample(table, **held))
            bad[table.method(op)] = lambda s, c, w: m("create")(s)(c, sample(table, id="bad-id"))
        elif op == "update":
            good[table.method(op)] = lambda s, c, w: m("update")(s)(
                c, attrs.evolve(sample(table, variant=1, **held), id=getattr(w, row_of).id))
            bad[table.method(op)] = lambda s, c, w: m("update")(s)(c, attrs.evolve(getattr(w, row_of), id=7))
        elif op == "get_by_name":
            good[table.method(op)] = lambda s, c, w: m("get_by_name")(s)(c, getattr(getattr(w, row_of),
                                                                                    table.by_name))
            bad[table.method(op)] = lambda s, c, w: m("get_by_name")(s)(c, None)
        else:
            good[table.method(op)] = lambda s, c, w, op=op: m(op)(s)(c, getattr(w, row_of).id)
            bad[table.method(op)] = lambda s, c, w, op=op: m(op)(s)(c, ids.new_id("zzz"))
    for listing in table.listings:
        good[listing.method] = _listing_call(table, listing, False, False)
        bad[listing.method] = _listing_call(table, listing, False, True)
        if listing.count:
            good[listing.count] = _listing_call(table, listing, True, False)
            bad[listing.count] = _listing_call(table, listing, True, True)

    lists = tuple((lambda s, c, sh, li=li: call_listing(s, table, li, c)) for li in table.listings)
    counts = tuple((lambda s, c, sh, li=li: call_listing(s, table, li, c, True)) for li in table.listings
                   if li.count)
    first = table.listings[0] if table.listings else None
    paged = None
    if first is not None and first.paged:
        def paged(s: Any, c: Context, sh: SimpleNamespace, start: int, size: int) -> list:
            assert first is not None
            window = dict(zip(k.PAGE_ARGUMENTS, (start, size)))
            return call_listing(s, table, first, c, **window)  # type: ignore[no-any-return]
    mutable = [f for f in table.mutable if f not in held]
    updates = "update" in table.ops and bool(mutable)
    #: the field the examples' updates write: one in no unique key when there
    #: is one (rows of one scope may then take the same value)
    field = next((f for f in mutable if not any(f in u.fields for u in table.unique)), mutable[0]) \
        if mutable else None
    kind = Kind(
        table.name, table.cls,
        new=lambda sh, **f: sample(table, **{**held, **f}),
        create=lambda s, c, o: m("create")(s)(c, o),
        get=(lambda s, c, o: m("get")(s)(c, o.id)) if "get" in table.ops else None,
        lists=lists,
        counts=counts,
        page=paged,
        not_found=table.not_found,
        vary=lambda o: attrs.evolve(sample(table, variant=1, **held), id=o.id),
        reads=(lambda s, c, o, sh: [("update", m("update")(s)(c, attrs.evolve(o, **{
            field: getattr(sample(table, variant=2), field)})).scope)])
        if updates else None,
        view=lambda s, sh, o, scopes: _table_view(s, table, scopes, [o.id]),
    )

    byid: list[ByIdOp] = []

    def setup(store: Any, c: Any) -> str:
        return m("create")(store)(c, sample(table, **held)).id

    def read_back(store: Any, c: Any, key: str) -> None:
        if "get" in table.ops:
            with clause("SCOPE-IMM-3", what=f"the scope a {table.singular} reads back at after a by-id call"):
                scope = m("get")(store)(c, key).scope
                assert scope == c.scope, f"read back at {scope}, expected {c.scope}"

    def observe(store: Any, key: str, scopes: Sequence[Any]) -> dict:
        return _table_view(store, table, scopes, [key])

    missing = functools.partial(ids.new_id, table.prefix)
    if "get" in table.ops:
        byid.append(ByIdOp(table.method("get"), table.cls, table.not_found, setup,
                           lambda s, c, key: m("get")(s)(c, key), read_back, missing, observe))
    if updates:
        changed = getattr(sample(table, variant=2), field)

        def updated(store: Any, c: Any, key: str) -> None:
            with clause("SCOPE-IMM-3", what=f"a {table.singular} updated from its scope or an ancestor"):
                row = m("get")(store)(c, key)
                assert getattr(row, field) == changed and row.scope == c.scope, (
                    f"read back {field}={getattr(row, field)!r:.80} at {row.scope}, "
                    f"expected {field}={changed!r:.80} at {c.scope}")

        byid.append(ByIdOp(
            table.method("update"), table.cls, table.not_found, setup,
            lambda s, c, key: m("update")(s)(c, attrs.evolve(
                sample(table, **held), id=key, scope=Context.of("ws=elsewhere").scope,
                **{field: changed})),
            updated if "get" in table.ops else (lambda s, c, key: None), missing, observe))
    if "delete" in table.ops:
        def deleted(store: Any, c: Any, key: str) -> None:
            if "get" in table.ops:
                try:
                    m("get")(store)(c, key)
                except table.not_found:
                    return
                raise AssertionError(f"{table.singular} {key} is still there after delete")

        byid.append(ByIdOp(table.method("delete"), table.cls, table.not_found, setup,
                           lambda s, c, key: m("delete")(s)(c, key), deleted, missing, observe))

    def view(store: Any, world: SimpleNamespace, scopes: Sequence[Any]) -> dict:
        key = getattr(getattr(world, row_of, None), "id", None)
        return _table_view(store, table, scopes, [] if key is None else [key])

    precedence = None
    if updates:
        refused = {field: _NOT_A_VALUE}

        def precedence(store: Any, world: SimpleNamespace) -> list[Callable[[Context], Any]]:
            row = getattr(world, row_of)
            return [
                lambda c: m("update")(store)(c, attrs.evolve(row, **refused)),
                lambda c: m("update")(store)(c, sample(table, **held, **refused)),
            ]

    every_write = None
    if updates or "delete" in table.ops:
        def every_write(store: Any, row: str, callers: list[str]) -> tuple[SimpleNamespace, Callable[[], None]]:
            home = ctx(row)
            kept = m("create")(store)(home, sample(table, **held))
            last = getattr(kept, field) if updates else None
            if updates:
                kind_of = table.fields[field].kind
                for i, caller in enumerate(callers):
                    last = example_value(kind_of, i + 1)
                    m("update")(store)(ctx(caller), attrs.evolve(kept, scope=Scope.parse(caller), **{field: last}))
            dropped = None
            if "delete" in table.ops:
                dropped = m("create")(store)(home, sample(table, **held))
                m("delete")(store)(ctx(callers[-1]), dropped.id)

            def check() -> None:
                with clause("SCOPE-IMM-5", what=f"the {table.singular} rows after writes from above"):
                    _check()

            def _check() -> None:
                if "get" in table.ops:
                    got = m("get")(store)(home, kept.id)
                    assert_scope(got.scope, Scope.parse(row))
                    if updates:
                        assert getattr(got, field) == last, (
                            f"{field} reads back {getattr(got, field)!r:.80}, expected the last write {last!r:.80}")
                    if dropped is not None:
                        raises(lambda: m("get")(store)(home, dropped.id), table.not_found)
                for caller in callers:
                    for listing in table.listings:
                        seen = call_listing(store, table, listing, ctx(caller))
                        found = [r.scope for r in seen if r.id == kept.id]
                        assert found == [Scope.parse(row)], (
                            f"{listing.method} from {caller}: {kept.id} listed at {[str(f) for f in found]}, "
                            f"expected once at {row}")
                        assert dropped is None or dropped.id not in {r.id for r in seen}, (
                            f"{listing.method} from {caller}: the deleted {dropped.id} is still listed")
            keys = [kept.id] + ([dropped.id] if dropped is not None else [])
            return SimpleNamespace(**{keys_of: keys}), check

    def hidden(store: Any, c: Context, written: SimpleNamespace) -> None:
        for listing in table.listings:
            expect("SCOPE-VIS-3", call_listing(store, table, listing, c), [],
                   f"{listing.method} from {c.scope!r}, an outsider of the written rows")
        if "get" in table.ops:
            for key in getattr(written, keys_of, ()):
                raises(lambda: m("get")(store)(c, key), table.not_found)

    exact = frozenset(n for li in table.listings if li.exact for n in (li.method, li.count) if n)
    return Examples(
        table.cls, _seed_table(table), good, bad, view, (kind,), tuple(byid),
        precedence=precedence, every_write=every_write, hidden=hidden,
        byid_methods=frozenset(op.name for op in byid), exact=exact,
    )


# -- long scopes (SCOPE-CANON-6) ---------------------------------------------------------------


def long_check(what: str, observed: Any, expected: Any) -> None:
    """``observed == expected`` for a read at (or above) a long scope."""
    with clause("SCOPE-CANON-6", "SCOPE-CANON-5", what=what):
        assert observed == expected, f"{what}: expected {expected!r:.120}, observed {observed!r:.120}"


def long_scope_of(what: str, row: Any, scope: Scope) -> None:
    """``row`` reads back at the long ``scope``."""
    with clause("SCOPE-CANON-6", "SCOPE-CANON-5", what=f"the scope {what} reads back with"):
        assert isinstance(row.scope, Scope) and row.scope == scope, f"{what} reads back at another scope"


def long_ids(rows: list, key: str = "id") -> set:
    """The keys (attribute ``key``) of ``rows``."""
    return {getattr(r, key) for r in rows}


def long_call(what: str, fn: Callable[[], Any]) -> Any:
    """``fn()``; an error (a storage limit hit) fails SCOPE-CANON-6 with the call named."""
    with clause("SCOPE-CANON-6", what=what):
        return fn()


def table_long_scopes(tables: Iterable[k.Table]) -> LongScopes:
    """The long-scope calls of stored kinds, from their description: for
    each, a create, a by-id read from the parent, an update and every
    listing from the parent."""
    tables = [t for t in tables if not t.internal]

    def long_scopes(store: Any, c: Context, up: Context) -> None:
        for table in tables:
            held = {f: v for u in table.unique for f, v in u.where}
            create, update = getattr(store, table.method("create")), getattr(store, table.method("update"))
            fresh = example(table.entity, **held)
            row = long_call(table.method("create"), lambda create=create, fresh=fresh: create(c, fresh))
            long_scope_of(f"a created {table.singular}", row, c.scope)
            long_scope_of(table.method("get"), getattr(store, table.method("get"))(up, row.id), c.scope)
            changed = attrs.evolve(example(table.entity, variant=1, **held), id=row.id)
            long_scope_of(f"an updated {table.singular}",
                          long_call(table.method("update"), lambda update=update, changed=changed: update(c, changed)),
                          c.scope)
            for listing in table.listings:
                rows = getattr(store, listing.method)(up)
                long_check(f"{listing.method} from the ancestor", row.id in long_ids(rows), True)
    return long_scopes


# -- the registry -----------------------------------------------------------------------------


@functools.cache
def examples() -> dict[str, Examples]:
    """Every class's examples: those its test module gives (``EXAMPLES``)
    merged with those generated for its stored kinds, in catalogue order."""
    out: dict[str, Examples] = {}
    for name, cls in CLASSES.items():
        found = Examples(name)
        for table in cls.tables:
            if not table.internal:
                found = found.merged(table_examples(table))
        try:
            module = importlib.import_module(f"{__package__}.test_{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.test_{name}":
                raise
            module = None
        given = getattr(module, "EXAMPLES", None)
        if given is not None:
            if not isinstance(given, Examples) or given.cls != name:
                raise TypeError(f"test_{name}.EXAMPLES must be the Examples of class {name!r}")
            found = found.merged(given)
        out[name] = found
    return out


def clauses_of(items: Iterable[Any], rule: str | None = None) -> tuple[str, ...]:
    """The class clauses ``items`` (kinds, sites, state errors) add to a
    generic test's marks: the union, sorted (``rule`` picks a kind test)."""
    found: set[str] = set()
    for item in items:
        given = item.clauses
        if isinstance(given, Mapping):
            given = given.get(rule, ()) if rule is not None else ()
        found.update(given)
    return tuple(sorted(found))


# -- checking a site (the common suite, and a class's own site tests) ------------------------

#: One ancestor of HOME sees every row a site's call writes (plus any written
#: at "ws=w1"); the across-scope lists of a class's view see the rest.
SITE_VIEW_SCOPES = ["ws=w1"]


def expect_invalid(store: Any, fixture: Fixture, site: Site, values: Sequence[Any],
                   c: Context | None = None) -> None:
    """Each value raises InvalidArgument at ``site`` and writes nothing (its
    class's world seeded, its view compared)."""
    c = c or ctx(HOME)
    ex = examples()[site.cls]
    w = ex.seed(store, fixture)
    view = ex.viewer()
    if site.prepare is not None:
        site.prepare(store, c, w)  # a refused call consumes nothing: one preparation serves all
    before = view(store, w, SITE_VIEW_SCOPES)
    for value in values:
        try:
            site.call(store, c, w, value)
        except InvalidArgument:
            pass
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"{site.name}={value!r:.80} raised {type(exc).__name__}, not InvalidArgument")
        else:
            pytest.fail(f"{site.name}={value!r:.80} was accepted")
        assert view(store, w, SITE_VIEW_SCOPES) == before, f"{site.name}={value!r:.80} was refused but wrote something"


def expect_stored(store: Any, fixture: Fixture, site: Site, values: Sequence[Any],
                  expect: Callable[[Any], Any] = lambda v: v) -> None:
    """Each value is accepted at ``site`` and reads back (types included) as ``expect(value)``."""
    c = ctx(HOME)
    w = examples()[site.cls].seed(store, fixture)
    for value in values:
        if site.prepare is not None:
            site.prepare(store, c, w)
        result = site.call(store, c, w, value)
        if site.read is not None:
            assert_strict_equal(site.read(store, c, w, result), expect(value), f"{site.name} read back")


def class_of_method(method: str) -> str:
    """The class a method belongs to (by the class table)."""
    for name, cls in CLASSES.items():
        if any(m.name == method for m in cls.methods):
            return name
    raise KeyError(method)
