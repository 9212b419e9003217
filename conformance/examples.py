"""What each class gives the cross-class suites, and how they find it.

The scope suite (``test_scope.py``) and the common suite (``test_common.py``)
check their rules on every method of every declared class, yet name no
class: each class supplies its own :class:`Examples` next to its own tests
(``EXAMPLES`` in ``conformance/test_<class>.py``), and the examples of a
class's stored kinds are generated from their description
(:func:`table_examples`).  :func:`examples` merges both, per class.

A class gives:

* ``seed(store) -> world``: rows at :data:`HOME` the calls address (a
  namespace; ``world.view`` may name the ids a whole-state view reads);
* ``good[method](store, ctx, world)``: a call with valid arguments,
  addressing the seeded rows; ``bad[method](store, ctx, world)``: a call
  whose other arguments are garbage (``InvalidArgument`` under a valid
  context, ``NoScope`` under the zero scope);
* ``view(store, world, scopes)``: everything observable, to prove a refused
  call wrote nothing (default: :func:`cortex_spec.testing.state_view` of
  the class);
* ``kinds``: entity kinds (create, by-id read, lists) for the visibility,
  immutability and id clauses; ``byid``: the by-id methods (setup, call,
  effect) for SCOPE-BYID; ``xs``: the across-scope methods (SCOPE-XS);
* ``sites``: where values go, per rule of the common suite (``"instant"``,
  ``"id"``, ``"short"``, ``"text"``, ``"json"``, ``"counter"``, ``"enum"``,
  ``"create"`` …), as :class:`Site` lists.
"""

from __future__ import annotations

import functools
import importlib
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Sequence

import attrs

from cortex_spec import CLASSES, Context, ids
from cortex_spec import kinds as k
from cortex_spec.testing import ctx, example, state_view

__all__ = [
    "HOME",
    "Call",
    "Kind",
    "ByIdOp",
    "XsMethod",
    "Site",
    "Examples",
    "examples",
    "table_examples",
]

#: The scope the seeded rows live at.
HOME = "ws=w1/proj=p1"

#: ``call(store, ctx, world)``
Call = Callable[[Any, Any, SimpleNamespace], Any]


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
    across: Callable[[Any, SimpleNamespace], list] | None = None
    not_found: type | None = None
    vary: Callable[[Any], Any] = lambda o: o  # same id, different payload
    #: rows also confined to a partition (a2a, A2A-GEN-3)
    partitioned: bool = False
    #: more reads of the row's scope for SCOPE-CANON-5: (store, ctx, obj, shared) -> [(what, scope)]
    reads: Callable[[Any, Context, Any, SimpleNamespace], list] | None = None


@attrs.frozen
class ByIdOp:
    name: str
    cls: str
    not_found: type
    setup: Callable[[Any, Context], tuple[str, list[str]]]  # -> (key, run ids to view)
    call: Callable[[Any, Context, str], Any]
    done: Callable[[Any, Context, str], None]  # the effect, checked from the row's scope
    #: a key naming no row
    missing: Callable[[], str] | None = None


@attrs.frozen
class XsMethod:
    """An across-scope method (SCOPE-XS): rows of many scopes, the call, how
    to act on a returned row under its own scope, the scoped twin, bad calls."""

    name: str
    cls: str
    seed: Callable[[Any], dict[str, Any]]
    call: Callable[[Any, Any], list]
    act: Callable[[Any, Any], None]
    scoped_twin: Callable[[Any, Any], list]
    bad: tuple[Callable[[Any, Any], Any], ...]
    #: also confined to ``ctx.partition`` (A2A-PART-3)
    partitioned: bool = False


@attrs.frozen
class Site:
    """One place a value goes: a field of an entity or an argument of a method.

    ``call(store, ctx, world, value)`` makes the call; ``read(store, ctx, world,
    result)`` reads the stored value back afresh (None when nothing is stored);
    ``prepare`` makes the rows one call consumes (a fresh pending checkpoint…).
    """

    name: str
    cls: str
    call: Callable[[Any, Context, SimpleNamespace, Any], Any]
    read: Callable[[Any, Context, SimpleNamespace, Any], Any] | None = None
    prepare: Callable[[Any, Context, SimpleNamespace], None] | None = None
    prefix: str = ""  # id sites: the TypeID prefix
    optional: bool = False  # None is a valid value


def _default_view(cls: str) -> Callable[[Any, SimpleNamespace, Sequence[Any]], dict]:
    def view(store: Any, world: SimpleNamespace, scopes: Sequence[Any]) -> dict:
        return state_view(store, scopes, classes={cls}, **getattr(world, "view", {}))
    return view


@attrs.frozen
class Examples:
    """What one class gives the cross-class suites (see the module docstring)."""

    cls: str
    seed: Callable[[Any], SimpleNamespace] = lambda store: SimpleNamespace()
    good: Mapping[str, Call] = attrs.field(factory=dict)
    bad: Mapping[str, Call] = attrs.field(factory=dict)
    view: Callable[[Any, SimpleNamespace, Sequence[Any]], dict] | None = None
    kinds: tuple[Kind, ...] = ()
    byid: tuple[ByIdOp, ...] = ()
    xs: Mapping[str, XsMethod] = attrs.field(factory=dict)
    sites: Mapping[str, tuple[Site, ...]] = attrs.field(factory=dict)

    def viewer(self) -> Callable[[Any, SimpleNamespace, Sequence[Any]], dict]:
        return self.view or _default_view(self.cls)

    def merged(self, other: "Examples") -> "Examples":
        """These examples with ``other``'s added (``other`` wins per method)."""
        seeds = (self.seed, other.seed)

        def seed(store: Any) -> SimpleNamespace:
            world = SimpleNamespace()
            for s in seeds:
                for key, value in vars(s(store)).items():
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
        )


# -- generated from the description ---------------------------------------------------------


def _seed_table(table: k.Table) -> Callable[[Any], SimpleNamespace]:
    def seed(store: Any) -> SimpleNamespace:
        row = getattr(store, table.method("create"))(ctx(HOME), example(table.entity))
        return SimpleNamespace(**{f"{table.name}_row": row})
    return seed


def _listing_call(listing: k.Listing, count: bool, garbage: bool) -> Call:
    method = listing.count if count else listing.method
    assert method is not None

    def call(store: Any, c: Any, w: SimpleNamespace) -> Any:
        if listing.filter_class is not None:
            return getattr(store, method)(c, "not a filter" if garbage else None)
        if garbage:
            bad = {"limit": "x"} if listing.paged and not count else (
                {"exact": "yes"} if listing.exact else {"search": 5} if listing.search else None)
            if bad is None:
                bad = {listing.filters[0].arg: 3.5} if listing.filters else {}
            return getattr(store, method)(c, **bad)
        return getattr(store, method)(c)
    return call


def table_examples(table: k.Table) -> Examples:
    """The examples of one stored kind, from its description: a seeded row
    at HOME, a good and a bad call of every generated method, its entity
    kind and its by-id methods."""
    row_of = f"{table.name}_row"
    good: dict[str, Call] = {}
    bad: dict[str, Call] = {}
    held = {f: v for u in table.unique for f, v in u.where}

    def m(op: str) -> Callable[..., Any]:
        return lambda s: getattr(s, table.method(op))

    for op in table.ops:
        if op == "create":
            good[table.method(op)] = lambda s, c, w: m("create")(s)(c, example(table.entity, **held))
            bad[table.method(op)] = lambda s, c, w: m("create")(s)(c, example(table.entity, id="bad-id"))
        elif op == "update":
            good[table.method(op)] = lambda s, c, w: m("update")(s)(
                c, attrs.evolve(example(table.entity, variant=1, **held), id=getattr(w, row_of).id))
            bad[table.method(op)] = lambda s, c, w: m("update")(s)(c, attrs.evolve(getattr(w, row_of), id=7))
        elif op == "get_by_name":
            good[table.method(op)] = lambda s, c, w: m("get_by_name")(s)(c, getattr(getattr(w, row_of),
                                                                                    table.by_name))
            bad[table.method(op)] = lambda s, c, w: m("get_by_name")(s)(c, None)
        else:
            good[table.method(op)] = lambda s, c, w, op=op: m(op)(s)(c, getattr(w, row_of).id)
            bad[table.method(op)] = lambda s, c, w, op=op: m(op)(s)(c, ids.new_id("zzz"))
    for listing in table.listings:
        good[listing.method] = _listing_call(listing, False, False)
        bad[listing.method] = _listing_call(listing, False, True)
        if listing.count:
            good[listing.count] = _listing_call(listing, True, False)
            bad[listing.count] = _listing_call(listing, True, True)

    lists = tuple((lambda s, c, sh, li=li: getattr(s, li.method)(c)) for li in table.listings)
    counts = tuple((lambda s, c, sh, li=li: getattr(s, li.count)(c)) for li in table.listings if li.count)
    mutable = [f for f in table.mutable if f not in held]
    kind = Kind(
        table.name, table.cls,
        new=lambda sh, **f: example(table.entity, **{**held, **f}),
        create=lambda s, c, o: m("create")(s)(c, o),
        get=(lambda s, c, o: m("get")(s)(c, o.id)) if "get" in table.ops else None,
        lists=lists,
        counts=counts,
        not_found=table.not_found,
        vary=lambda o: attrs.evolve(example(table.entity, variant=1, **held), id=o.id),
        reads=(lambda s, c, o, sh: [("update", m("update")(s)(c, attrs.evolve(o, **{
            f: getattr(example(table.entity, variant=2), f) for f in mutable[:1]})).scope)])
        if "update" in table.ops and mutable else None,
    )

    byid: list[ByIdOp] = []

    def setup(store: Any, c: Any) -> tuple[str, list[str]]:
        return m("create")(store)(c, example(table.entity, **held)).id, []

    def read_back(store: Any, c: Any, key: str) -> None:
        if "get" in table.ops:
            assert m("get")(store)(c, key).scope == c.scope
    missing = functools.partial(ids.new_id, table.prefix)
    if "get" in table.ops:
        byid.append(ByIdOp(table.method("get"), table.cls, table.not_found, setup,
                           lambda s, c, key: m("get")(s)(c, key), read_back, missing))
    if "update" in table.ops and mutable:
        field = mutable[0]
        changed = getattr(example(table.entity, variant=2), field)

        def updated(store: Any, c: Any, key: str) -> None:
            row = m("get")(store)(c, key)
            assert getattr(row, field) == changed and row.scope == c.scope, row

        byid.append(ByIdOp(
            table.method("update"), table.cls, table.not_found, setup,
            lambda s, c, key: m("update")(s)(c, attrs.evolve(
                example(table.entity, **held), id=key, scope=Context.of("ws=elsewhere").scope,
                **{field: changed})),
            updated if "get" in table.ops else (lambda s, c, key: None), missing))
    if "delete" in table.ops:
        def deleted(store: Any, c: Any, key: str) -> None:
            if "get" in table.ops:
                try:
                    m("get")(store)(c, key)
                except table.not_found:
                    return
                raise AssertionError(f"{table.singular} {key} is still there after delete")

        byid.append(ByIdOp(table.method("delete"), table.cls, table.not_found, setup,
                           lambda s, c, key: m("delete")(s)(c, key), deleted, missing))

    def view(store: Any, world: SimpleNamespace, scopes: Sequence[Any]) -> dict:
        out: dict = {}
        key = getattr(getattr(world, row_of, None), "id", None)
        for sc in scopes:
            c = sc if isinstance(sc, Context) else ctx(sc)
            for listing in table.listings:
                out[f"{listing.method}@{c.scope.canonical()}"] = getattr(store, listing.method)(c)
            if key is not None and "get" in table.ops:
                try:
                    out[f"{table.method('get')}[{key}]@{c.scope.canonical()}"] = m("get")(store)(c, key)
                except Exception as exc:  # noqa: BLE001 - the class is the observation
                    out[f"{table.method('get')}[{key}]@{c.scope.canonical()}"] = type(exc).__name__
        return out

    return Examples(table.cls, _seed_table(table), good, bad, view, (kind,), tuple(byid))


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


def class_of_method(method: str) -> str:
    """The class a method belongs to (by the class table)."""
    for name, cls in CLASSES.items():
        if any(m.name == method for m in cls.methods):
            return name
    raise KeyError(method)
