"""Certifies every stored kind (a :class:`cortex_spec.kinds.Table` of a
declared class) from its description: the generic operations (create, get,
get by name, update, delete, list, count) and, per field, round trips,
bad input and the size limit.

Nothing here names a class or an entity: the tests are generated per table
(and per field) from what the tables declare, and each check is charged to
the clause the table maps the rule to (``Table.clauses``) or to the common
rule of the field's kind.  Adding a stored kind to a class adds its tests.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import attrs
import pytest

from cortex_spec import CLASSES, Context, Scope, ids
from cortex_spec import kinds as k
from cortex_spec.errors import AlreadyExists, InvalidArgument, NoScope
from cortex_spec.testing import (
    ZERO,
    ClauseViolation,
    clause,
    ctx,
    example,
    example_value,
    expect,
    expect_is,
    expect_op,
    expect_raises,
    expect_strict,
    strict_equal,
)
from cortex_spec.validation import MAX_ENTITY_BYTES, entity_size

from .examples import call_listing, parent_value, sample
from .helpers import payload_of_bytes

HOME = "ws=w1/proj=p1"
#: a row at HOME is seen from these ...
INSIDERS = [HOME, "ws=w1"]
#: ... and not from these
OUTSIDERS = ["ws=w1/proj=p1/env=e1", "ws=w1/proj=p2", "ws=w10/proj=p1", "ws=w1/proj=p10", "org=w1/proj=p1",
             "WS=w1/proj=p1", "ws=w2"]
S = Scope.parse
MS = timedelta(milliseconds=1)

#: the kinds callers create (internal tables are the class's own business)
ALL_TABLES = [t for cls in CLASSES.values() for t in cls.tables if not t.internal]


def _params(only: Any = lambda t: True, rules: tuple[str, ...] = ()) -> list:
    """One case per table, marked with its class and with the table's own
    clauses for ``rules`` (a case is charged to its table's clauses, and a
    store that declares the table's class alone runs it)."""
    return [pytest.param(t, marks=[pytest.mark.cortex_classes(t.cls), _clause_marks(t, rules)], id=t.name)
            for t in ALL_TABLES if only(t)]


def _has(op: str) -> Any:
    return lambda t: op in t.ops


def _clause_marks(table: k.Table, rules: tuple[str, ...]) -> Any:
    """The clauses ``table`` maps ``rules`` to (MC-GEN-13 when it maps none)."""
    ids_ = sorted({table.clauses[r] for r in rules if r in table.clauses})
    return pytest.mark.clause(*(ids_ or ["MC-GEN-13"]))


def _call(store: Any, table: k.Table, op: str, *args: Any, **kwargs: Any) -> Any:
    return getattr(store, table.method(op))(*args, **kwargs)


def _list(store: Any, table: k.Table, c: Context, listing: k.Listing, **args: Any) -> list:
    return call_listing(store, table, listing, c, **args)  # type: ignore[no-any-return]


def _count(store: Any, table: k.Table, c: Context, listing: k.Listing, **args: Any) -> int:
    args = {a: v for a, v in args.items() if a not in ("limit", "offset")}
    return call_listing(store, table, listing, c, True, **args)  # type: ignore[no-any-return]


def _view(store: Any, table: k.Table, scopes: list[str], keys: list[str] = ()) -> dict:
    """Everything observable of the table: each listing (no filter) from each
    scope, and each key read from each scope."""
    out: dict[str, Any] = {}
    for sc in scopes:
        c = ctx(sc)
        for listing in table.listings:
            out[f"{listing.method}@{sc}"] = _list(store, table, c, listing)
        if "get" in table.ops:
            for key in keys:
                try:
                    out[f"get[{key}]@{sc}"] = _call(store, table, "get", c, key)
                except Exception as exc:  # noqa: BLE001 - the class is the observation
                    out[f"get[{key}]@{sc}"] = type(exc).__name__
    return out


def _new(table: k.Table, variant: int = 0, **fields: Any) -> Any:
    return sample(table, variant=variant, **fields)


def _data_fields(table: k.Table) -> list[str]:
    return [n for n, s in table.fields.items() if s.role == k.DATA]


def _unique_values(table: k.Table) -> dict[str, Any]:
    """Field values that make a row hold every unique key's condition."""
    return {f: v for u in table.unique for f, v in u.where}


# ===========================================================================
# create and get
# ===========================================================================


@pytest.mark.clause("MC-GEN-4", "RSC-GEN-4", "SCOPE-IMM-1", "MC-GEN-13")
@pytest.mark.parametrize("table", _params(rules=("create", "get", "fields")))
def test_create_returns_the_stored_row(store, clock, table):
    """A create stamps the caller's scope and clock now over whatever the
    object carries, keeps every data field as given, and the row reads back
    equal (types kept) through get and every listing."""
    c = ctx(HOME)
    obj = _new(table, scope=S("ws=elsewhere"), created_at=datetime(2000, 1, 1, tzinfo=timezone.utc),
               updated_at=datetime(2000, 1, 1, tzinfo=timezone.utc))
    clock.advance(milliseconds=5)
    stored = _call(store, table, "create", c, obj)
    expected = attrs.evolve(obj, scope=c.scope, created_at=clock.now(), updated_at=clock.now())
    with clause(table.clause("create"), what=f"the {table.singular} create returned"):
        expect_strict(table.clause("create"), stored, expected, f"the {table.singular} create returned")
    if "get" in table.ops:
        with clause(table.clause("fields"), what=f"get_{table.singular} after the create"):
            got = _call(store, table, "get", c, obj.id)
            expect_strict(table.clause("fields"), got, expected, f"get_{table.singular} after the create")
    for listing in table.listings:
        with clause(table.clause("list"), what=f"{listing.method} after the create"):
            found = [r for r in _list(store, table, c, listing) if r.id == obj.id]
            expect(table.clause("list"), len(found), 1, f"rows of {listing.method} with the created id")
            expect_strict(table.clause("list"), found[0], expected, f"the row {listing.method} lists")


@pytest.mark.clause("SCOPE-ID-1")
@pytest.mark.parametrize("table", _params(rules=("create.id",)))
def test_reused_id_is_refused_in_every_scope(store, table):
    """An id taken anywhere, seen by the caller or not, is AlreadyExists,
    and the stored row stays as it was."""
    original = _call(store, table, "create", ctx(HOME), _new(table))
    scopes = [HOME, "ws=w1", "ws=w2", "ws=w1/proj=p1/env=e1", "ws=w10/proj=p1"]
    before = _view(store, table, scopes, [original.id])
    for caller in scopes:
        impostor = _new(table, variant=1, id=original.id)
        expect_raises(table.clause("create.id"), AlreadyExists,
                      lambda: _call(store, table, "create", ctx(caller), impostor),
                      f"create_{table.singular} reusing an id from {caller}")
    with clause("MC-GEN-11", what="the rows after the refused creates"):
        expect("MC-GEN-11", _view(store, table, scopes, [original.id]), before, "the rows after the refused creates")


@pytest.mark.clause("MC-GEN-11")
@pytest.mark.parametrize("table", _params(lambda t: bool(t.unique), rules=("create.unique", "update.unique")))
def test_unique_keys_hold_within_one_exact_scope(store, table):
    """A second row with a unique key's values at the same exact scope is
    AlreadyExists; at an ancestor, a descendant or a sibling it is allowed;
    an update into a taken key is AlreadyExists and writes nothing."""
    held = _unique_values(table)
    for unique in table.unique:
        shared = {f: example_value(table.fields[f].kind, 4) for f in unique.fields}
        if any(table.fields[f].kind == k.Short(nonempty=True) for f in unique.fields):
            shared = {f: f"taken-{ids.new_id('x')[2:]}" for f in unique.fields}
        first = _call(store, table, "create", ctx(HOME), _new(table, **shared, **held))
        expect_raises(table.clause("create.unique"), AlreadyExists,
                      lambda: _call(store, table, "create", ctx(HOME), _new(table, **shared, **held)),
                      f"a second {table.singular} with the same {', '.join(unique.fields)} at one scope")
        if unique.exact_scope:
            for other in ("ws=w1", "ws=w1/proj=p1/env=e1", "ws=w1/proj=p2"):
                with clause(table.clause("create.unique"), what=f"the same key at {other}"):
                    _call(store, table, "create", ctx(other), _new(table, **shared, **held))
        mutable = [f for f in unique.fields if table.fields[f].update]
        if "update" in table.ops and mutable:
            second = _call(store, table, "create", ctx(HOME), _new(table, **held))
            before = _view(store, table, [HOME, "ws=w1"], [first.id, second.id])
            rename = attrs.evolve(second, **{f: shared[f] for f in mutable})
            expect_raises(table.clause("update.unique"), AlreadyExists,
                          lambda: _call(store, table, "update", ctx(HOME), rename),
                          f"an update of a {table.singular} into a taken {', '.join(mutable)}")
            with clause(table.clause("update.unique"), what="the rows after the refused update"):
                expect(table.clause("update.unique"), _view(store, table, [HOME, "ws=w1"], [first.id, second.id]),
                       before, "the rows after the refused update")


@pytest.mark.clause("MC-GEN-3", "MC-GEN-6", "SCOPE-BYID-2")
@pytest.mark.parametrize("table", _params(_has("get"), rules=("get",)))
def test_get_sees_exactly_what_the_scope_covers(store, table):
    """A row is read from its own scope and from its ancestors; from a
    descendant, a sibling and every look-alike it raises the not-found class,
    the same as for an id that names nothing; a malformed id is
    InvalidArgument and the zero scope NoScope."""
    row = _call(store, table, "create", ctx(HOME), _new(table))
    rule = table.clause("get")
    for caller in INSIDERS:
        with clause(rule, what=f"get_{table.singular} from {caller}"):
            expect(rule, _call(store, table, "get", ctx(caller), row.id).id, row.id,
                   f"the id get_{table.singular} reads from {caller}")
    for caller in OUTSIDERS:
        expect_raises(rule, table.not_found, lambda: _call(store, table, "get", ctx(caller), row.id),
                      f"get_{table.singular} from {caller}, which does not cover the row")
    expect_raises(rule, table.not_found,
                  lambda: _call(store, table, "get", ctx(HOME), ids.new_id(table.prefix)),
                  f"get_{table.singular} of an id that names nothing")
    for bad in ("not-an-id", ids.new_id("zzz"), 5, None):
        expect_raises("MC-GEN-6", InvalidArgument, lambda: _call(store, table, "get", ctx(HOME), bad),
                      f"get_{table.singular}({bad!r})")
    expect_raises("MC-GEN-1", NoScope, lambda: _call(store, table, "get", ZERO, row.id),
                  f"get_{table.singular} with the zero scope")


# ===========================================================================
# by name (MC-GEN-9)
# ===========================================================================


@pytest.mark.clause("MC-GEN-9")
@pytest.mark.parametrize("table", _params(_has("get_by_name"), rules=("get_by_name",)))
def test_by_name_reads_pick_shallowest_then_oldest_then_smallest_id(store, clock, table):
    """The name matches exactly (case counts); among visible matches the
    shallowest scope wins, then the oldest, then the smallest id; an ancestor's
    row is never seen from below."""
    name_field = table.by_name
    held = _unique_values(table)
    rule = table.clause("get_by_name")
    name = f"Named {ids.new_id('x')[2:]}"
    # at equal depth and time the smallest id wins, wherever the two rows'
    # scopes sort and whichever was written first: once the smaller id at the
    # scope that sorts last, written last; once the other way round
    for suffix, (small_at, large_at) in (("", ("ws=w1/proj=p2", "ws=w1/proj=p1")),
                                         ("~", ("ws=w1/proj=p1", "ws=w1/proj=p2"))):
        small, large = sorted(ids.new_id(table.prefix) for _ in range(2))
        order = [(large, large_at), (small, small_at)] if not suffix else [(small, small_at), (large, large_at)]
        for key, sc in order:
            _call(store, table, "create", ctx(sc), _new(table, id=key, **{name_field: name + suffix}, **held))
        with clause(rule, what=f"two matches at one depth and instant, the smaller id at {small_at}"):
            expect(rule, _call(store, table, "get_by_name", ctx("ws=w1"), name + suffix).id, small,
                   "the id read by name: the smaller")
    # the older of two at one depth, created 1 ms apart, though its id is the
    # larger and its scope sorts last
    clock.advance(milliseconds=1)
    small, large = sorted(ids.new_id(table.prefix) for _ in range(2))
    older = _call(store, table, "create", ctx("ws=w1/proj=p4"),
                  _new(table, id=large, **{name_field: name + "!"}, **held))
    clock.advance(milliseconds=1)
    _call(store, table, "create", ctx("ws=w1/proj=p3"), _new(table, id=small, **{name_field: name + "!"}, **held))
    with clause(rule, what="two matches at one depth created 1 ms apart, the older under the larger id"):
        expect(rule, _call(store, table, "get_by_name", ctx("ws=w1"), name + "!").id, older.id,
               "the id read by name: the older")
    # a shallower one wins over older, deeper ones
    clock.advance(milliseconds=1)
    shallow = _call(store, table, "create", ctx("ws=w1"), _new(table, **{name_field: name}, **held))
    with clause(rule, what="a match one level shallower, created later"):
        expect(rule, _call(store, table, "get_by_name", ctx("ws=w1"), name).id, shallow.id,
               "the id read by name: the shallower")
    with clause(rule, what="a read from below an ancestor's row"):
        expect_op(rule, _call(store, table, "get_by_name", ctx(HOME), name).id, "!=", shallow.id,
                  "the id read by name from below the ancestor's row")
    for other in (name.upper(), name.lower(), name + " ", name[:-1]):
        expect_raises(rule, table.not_found, lambda: _call(store, table, "get_by_name", ctx("ws=w1"), other),
                      f"get_{table.singular}_by_name({other!r}): no exact match")
    expect_raises(rule, table.not_found, lambda: _call(store, table, "get_by_name", ctx("ws=w2"), name),
                  "a by-name read from an unrelated scope")


# ===========================================================================
# update
# ===========================================================================


@pytest.mark.clause("MC-GEN-5", "SCOPE-IMM-2")
@pytest.mark.parametrize("table", _params(_has("update"), rules=("update", "update.immutable", "update.missing")))
def test_update_replaces_the_mutable_fields_only(store, clock, table):
    """An update from an ancestor replaces every mutable field (with values
    unlike the old ones), stamps updated_at, keeps the key, the scope, the
    creation time and every other field; a row the caller cannot see is the
    not-found class."""
    row = _call(store, table, "create", ctx(HOME), _new(table))
    clock.advance(milliseconds=7)
    other = _new(table, variant=1, id=row.id)
    carried = attrs.evolve(other, scope=S("ws=elsewhere"), created_at=datetime(2000, 1, 1, tzinfo=timezone.utc),
                           updated_at=datetime(2000, 1, 1, tzinfo=timezone.utc))
    stored = _call(store, table, "update", ctx("ws=w1"), carried)
    expected = attrs.evolve(row, updated_at=clock.now(), **{f: getattr(other, f) for f in table.mutable})
    for name in table.fields:
        rule = table.clause("update" if name in table.mutable or name == "updated_at" else "update.immutable")
        with clause(rule, what=f"{name} after update_{table.singular}"):
            expect_strict(rule, getattr(stored, name), getattr(expected, name),
                          f"{name} update_{table.singular} returned")
    if "get" in table.ops:
        with clause(table.clause("update"), what="the row read back after the update"):
            expect_strict(table.clause("update"), _call(store, table, "get", ctx(HOME), row.id), expected,
                          "the row read back after the update")
    for caller in OUTSIDERS[:3]:
        expect_raises(table.clause("update.missing"), table.not_found,
                      lambda: _call(store, table, "update", ctx(caller), other),
                      f"update_{table.singular} from {caller}")
    expect_raises(table.clause("update.missing"), table.not_found,
                  lambda: _call(store, table, "update", ctx(HOME), _new(table)),
                  f"update_{table.singular} of an id that names nothing")


# ===========================================================================
# delete
# ===========================================================================


@pytest.mark.parametrize("table", _params(_has("delete"), rules=("delete",)))
def test_delete_removes_only_the_visible_row(store, table):
    row = _call(store, table, "create", ctx(HOME), _new(table))
    keep = _call(store, table, "create", ctx(HOME), _new(table, **_unique_values(table)))
    rule = table.clause("delete")
    for caller in OUTSIDERS[:4]:
        expect_raises(rule, table.not_found, lambda: _call(store, table, "delete", ctx(caller), row.id),
                      f"delete_{table.singular} from {caller}")
    with clause(rule, what=f"delete_{table.singular} from an ancestor"):
        expect_is(rule, _call(store, table, "delete", ctx("ws=w1"), row.id), None,
                  f"what delete_{table.singular} from an ancestor returns")
    expect_raises(rule, table.not_found, lambda: _call(store, table, "delete", ctx(HOME), row.id),
                  f"a second delete_{table.singular}")
    if "get" in table.ops:
        expect_raises(rule, table.not_found, lambda: _call(store, table, "get", ctx(HOME), row.id),
                      f"get_{table.singular} after the delete")
        with clause(rule, what="the other row after the delete"):
            expect(rule, _call(store, table, "get", ctx(HOME), keep.id), keep, "the other row after the delete")


# ===========================================================================
# lists and counts
# ===========================================================================

#: rows of the list tests: (scope, created 0/1 ms apart)
ROW_SCOPES = [HOME, HOME, "ws=w1", "ws=w1/proj=p1/env=e1", "ws=w1/proj=p2", "ws=w10/proj=p1",
              "ws=w1/proj=p10", "org=w1/proj=p1"]
CALLERS = [HOME, "ws=w1", "ws=w1/proj=p1/env=e1", "ws=w10", "ws=w1x"]


def _listing_params() -> list:
    return [pytest.param(t, li, marks=[pytest.mark.cortex_classes(t.cls),
                                       _clause_marks(t, ("list", "list.order", "list.page", "count")
                                                     if li.count else ("list", "list.order", "list.page"))],
                         id=f"{t.name}.{li.method}")
            for t in ALL_TABLES for li in t.listings]


def _partition(table: k.Table, listing: k.Listing, i: int) -> dict[str, Any]:
    """Fields of the ``i``-th row of the list tests: the even rows (at four
    distinct scopes) share one value of each filter, the odd ones hold
    others; a unique key's boolean condition holds on the even rows only, so
    a flag filter (``default_only``) splits the rows too."""
    held = _unique_values(table)
    if i % 2:
        other = {} if listing.parent is None else {listing.parent: example_value(table.fields[listing.parent].kind, i)}
        return {**{f: (not v) if isinstance(v, bool) else v for f, v in held.items()}, **other}
    shared = {f.field: example_value(table.fields[f.field].kind, 5) for f in listing.filters
              if f.flag is k.UNSET and f.field not in held}
    return {**shared, **held}


def _filter_values(table: k.Table, listing: k.Listing, rows: list[Any]) -> list[dict[str, Any]]:
    """Argument sets of the listing's filters worth trying: none, each filter
    with a value some rows hold, and with a value none holds (a parent: the
    even rows' one, an odd row's, one no row holds)."""
    out: list[dict[str, Any]] = [{}]
    if listing.parent is not None:
        kind = table.fields[listing.parent].kind
        out += [{listing.parent: getattr(rows[1], listing.parent)}, {listing.parent: example_value(kind, 99)}]
    for f in listing.filters:
        if f.flag is not k.UNSET:
            out += [{f.arg: True}, {f.arg: False}]
            continue
        values = [getattr(r, f.field) for r in rows]
        out.append({f.arg: values[0]})
        out.append({f.arg: example_value(table.fields[f.field].kind, 7)})
    return out


def _expected(table: k.Table, listing: k.Listing, rows: list[Any], c: Context, args: dict[str, Any]) -> list:
    exact = bool(args.get("exact")) and listing.exact
    out = [r for r in rows if k.visible(c.scope, exact, r.scope)]
    if listing.parent is not None:
        value = args.get(listing.parent, parent_value(table, listing))
        out = [r for r in out if getattr(r, listing.parent) == value]
    for name, value in listing.fixed:
        out = [r for r in out if getattr(r, name) == value]
    for f in listing.filters:
        value = args.get(f.arg)
        if f.flag is not k.UNSET:
            if value:
                out = [r for r in out if getattr(r, f.field) == f.flag]
        elif value is not None:
            out = [r for r in out if getattr(r, f.field) == value]
    if listing.search and args.get("search"):
        out = [r for r in out if k.matches_search(getattr(r, listing.search), args["search"])]
    out = k.sort_rows(list(out), listing.order)
    offset, limit = max(args.get("offset", 0), 0), max(args.get("limit", 0), 0)
    out = out[offset:]
    return out[:limit] if limit else out


@pytest.mark.clause("MC-GEN-2", "MC-GEN-7", "MC-GEN-8", "SCOPE-VIS-1", "SCOPE-VIS-5", "SCOPE-EXACT-1")
@pytest.mark.parametrize("table, listing", _listing_params())
def test_list_is_visible_rows_in_a_total_order_paged(store, clock, table, listing):
    """Rows at look-alike, ancestor, descendant and sibling scopes, two of
    them created at one instant, half of them sharing each filter's value
    and the flag a unique key's condition reads: from every caller, with each filter, exact
    or not, each page (offset 0, 1 and past the end; limit 0, 1, the number
    of rows and more) is exactly the visible, filtered rows in the listing's
    order, and the count equals the list without its page."""
    rows = []
    for i, sc in enumerate(ROW_SCOPES):
        if i % 2:
            clock.advance(milliseconds=1)
        rows.append(_call(store, table, "create", ctx(sc), _new(table, variant=i % 3, **_partition(table, listing, i))))
    # a wrong selection is charged to "list", the right rows in a wrong
    # order to "list.order", a wrong page to "list.page" (each "list"
    # unless the table maps it)
    rule = table.clause("list")
    order_rule, page_rule = (table.clauses.get(r, rule) for r in ("list.order", "list.page"))
    for caller in CALLERS:
        c = ctx(caller)
        for args in _filter_values(table, listing, rows):
            for exact in ((False, True) if listing.exact else (False,)):
                base = dict(args, **({"exact": exact} if listing.exact else {}))
                full = _expected(table, listing, rows, c, base)
                pages = [(0, 0)] + ([(1, 0), (0, 1), (1, 1), (0, len(full)), (0, len(full) + 1), (len(full), 5), (9, 0)]
                                    if listing.paged else [])
                for offset, limit in pages:
                    page = dict(base, **({"offset": offset, "limit": limit} if listing.paged else {}))
                    want = _expected(table, listing, rows, c, page)
                    got = [r.id for r in _list(store, table, c, listing, **page)]
                    what = f"{listing.method}{page} from {caller}"
                    if (offset, limit) == (0, 0):
                        expect(rule, sorted(got), sorted(r.id for r in want), f"the rows {what} selects")
                        expect(order_rule, got, [r.id for r in want], f"the order of {what}")
                    else:
                        expect(page_rule, got, [r.id for r in want], what)
                if listing.count:
                    expect(table.clause("count"), _count(store, table, c, listing, **base), len(full),
                           f"{listing.count}{base} from {caller}")


_SEARCH_NAMES = ["alpha", "Alpha", "ALPHA!", "al%pha", "al_pha", "a.pha", "a*", "[a]", "back\\slash", "éclair",
                 "Éclair", "straße"]
_SEARCHES = {"alpha": {"alpha", "Alpha", "ALPHA!"}, "ALP": {"alpha", "Alpha", "ALPHA!"}, "%": {"al%pha"},
             "_": {"al_pha"}, "l%p": {"al%pha"}, ".": {"a.pha"}, "a.p": {"a.pha"}, "*": {"a*"},
             "[a]": {"[a]"}, "\\": {"back\\slash"}, "é": {"éclair"}, "É": {"Éclair"}, "ss": set(),
             "": set(_SEARCH_NAMES), "zzz": set()}


def _search_params() -> list:
    return [pytest.param(t, li, marks=[pytest.mark.cortex_classes(t.cls),
                                       pytest.mark.clause(t.clause("search"), t.clause("list"))],
                         id=f"{t.name}.{li.method}")
            for t in ALL_TABLES for li in t.listings if li.search]


@pytest.mark.clause("MC-GEN-10")
@pytest.mark.parametrize("table, listing", _search_params())
def test_search_is_a_literal_ascii_folded_substring(store, table, listing):
    """`%`, `_`, `.`, `*`, `[` and `\\` match only themselves; A–Z fold to
    a–z and nothing else does (É is not é, ß is not ss); the count agrees."""
    held = _unique_values(table)
    for name in _SEARCH_NAMES:
        _call(store, table, "create", ctx(HOME), _new(table, **{listing.search: name}, **held))
    c = ctx(HOME)
    for text, names in _SEARCHES.items():
        got = {getattr(r, listing.search) for r in _list(store, table, c, listing, search=text)}
        expect(table.clause("search"), sorted(got), sorted(names), f"{listing.method}(search={text!r})")
        if listing.count:
            expect(table.clause("search"), _count(store, table, c, listing, search=text), len(names),
                   f"{listing.count}(search={text!r})")
    got = {getattr(r, listing.search) for r in _list(store, table, c, listing, search=None)}
    expect(table.clause("search"), sorted(got), sorted(_SEARCH_NAMES), f"{listing.method}(search=None)")


# ===========================================================================
# fields: round trips, bad input, size
# ===========================================================================


def _field_params(rules: tuple[str, ...] = ("fields",)) -> list:
    out = []
    for t in ALL_TABLES:
        for name in _data_fields(t):
            out.append(pytest.param(t, name, marks=[pytest.mark.cortex_classes(t.cls), _clause_marks(t, rules)],
                                    id=f"{t.name}.{name}"))
    return out


def _round_trip_values(kind: k.FieldKind) -> list[Any]:
    """Values of a kind that a careless store changes on the way back."""
    if isinstance(kind, k.Optional):
        return [None] + _round_trip_values(kind.inner)
    if isinstance(kind, k.Short):
        base = ["x" * 255, "😀" * 255, "e\u0301 ñ 项目", " lead and trail ", "%_\\'\"", "\t\n"]
        return base if kind.nonempty else [""] + base
    if isinstance(kind, k.Text):
        return ["", "x" * 70000, "\u2028\ufeff\x01\x7f", "😀 e\u0301"]
    if isinstance(kind, k.Count):
        return [0, 1, 2**31, 2**53 + 1, 2**63 - 1]
    if isinstance(kind, k.Int):
        return [0, -1, -(2**63), 2**63 - 1, 2**53 + 1]
    if isinstance(kind, k.Float):
        return [0.0, -0.0, 1.0, 0.1, -1e308, 5e-324, 2.0**53]
    if isinstance(kind, k.Bool):
        return [True, False]
    if isinstance(kind, (k.Json, k.FloatMap, k.JsonValue, k.Choice, k.Strings, k.Records, k.Record, k.Instant,
                         k.Id)):
        values = [example_value(kind, n) for n in range(3)]
        if isinstance(kind, k.Json):
            values.append({"1": 1, "1.0": 1.0, "t": True, "big": 2**63 - 1, "neg": -(2**63), "deep": [[{"a": []}]]})
        if isinstance(kind, k.Strings):
            values.append(tuple(f"item {i}" for i in range(40)) + ("", "😀"))
        return values
    raise TypeError(kind)


@pytest.mark.clause("MC-GEN-12", "MC-GEN-13", "RSC-GEN-7")
@pytest.mark.parametrize("table, field", _field_params())
def test_every_field_reads_back_equal(store, table, field):
    """Each value (extremes, odd characters, exact JSON types, empty and long
    tuples, nested records in order) reads back equal, type for type, after a
    create and after an update."""
    held = _unique_values(table)
    kind = table.fields[field].kind
    rule = table.clause("fields")
    for value in _round_trip_values(kind):
        row = _call(store, table, "create", ctx(HOME), _new(table, **{field: value}, **held) if field not in held
                    else _new(table, **held))
        if field in held:
            continue
        if "get" in table.ops:
            got = getattr(_call(store, table, "get", ctx(HOME), row.id), field)
        else:
            first = table.listings[0]
            mine = {} if first.parent is None else {first.parent: getattr(row, first.parent)}
            got = getattr(next(r for r in _list(store, table, ctx(HOME), first, **mine) if r.id == row.id), field)
        if not strict_equal(got, value):  # (-0.0 equals 0.0: SQLite keeps no sign of zero)
            raise ClauseViolation(rule, f"{table.singular}.{field} after a create", value, got)
        if "update" in table.ops and table.fields[field].update:
            # another exact scope: a unique field may take the value again there
            elsewhere = ctx("ws=w1/proj=p9")
            other = _call(store, table, "create", elsewhere, _new(table, **held))
            updated = _call(store, table, "update", elsewhere, attrs.evolve(other, **{field: value}))
            if not strict_equal(getattr(updated, field), value):
                raise ClauseViolation(rule, f"{table.singular}.{field} after an update", value,
                                      getattr(updated, field))


def _bad_values(kind: k.FieldKind) -> list[tuple[Any, str]]:
    """(value, the common rule it breaks) for a kind."""
    if isinstance(kind, k.Optional):
        return [(v, rule) for v, rule in _bad_values(kind.inner) if v is not None]
    text = [("a\x00b", "RSC-GEN-6"), ("\ud800", "RSC-GEN-6"), (5, "RSC-GEN-6"), (b"x", "RSC-GEN-6")]
    if isinstance(kind, k.Id):
        return [("not-an-id", "RSC-GEN-5"), (ids.new_id("zzz"), "RSC-GEN-5"), (7, "RSC-GEN-5"), ("", "RSC-GEN-5")]
    if isinstance(kind, k.Short):
        out = text + [("x" * 256, "RSC-GEN-6"), ("😀" * 256, "RSC-GEN-6")]
        return out + ([("", "MC-GEN-13")] if kind.nonempty else [])
    if isinstance(kind, k.Text):
        return text
    if isinstance(kind, k.Count):
        return [(-1, "RSC-GEN-9"), (2**63, "RSC-GEN-9"), (True, "RSC-GEN-9"), (1.0, "RSC-GEN-9"), ("1", "RSC-GEN-9")]
    if isinstance(kind, k.Int):
        return [(2**63, "RSC-GEN-9"), (-(2**63) - 1, "RSC-GEN-9"), (False, "RSC-GEN-9"), (2.5, "RSC-GEN-9")]
    if isinstance(kind, k.Float):
        return [(1, "RSC-GEN-7"), (float("nan"), "RSC-GEN-7"), (float("inf"), "RSC-GEN-7"), (True, "RSC-GEN-7"),
                ("0.5", "RSC-GEN-7")]
    if isinstance(kind, k.Bool):
        return [(1, "RSC-GEN-7"), (None, "RSC-GEN-7"), ("true", "RSC-GEN-7")]
    if isinstance(kind, k.Instant):
        return [(datetime(2026, 1, 1), "RSC-GEN-2"), ("2026-01-01T00:00:00Z", "RSC-GEN-2")]
    if isinstance(kind, (k.Json, k.FloatMap)):
        out = [([], "RSC-GEN-7"), ({1: "a"}, "RSC-GEN-7"), ({"a": float("nan")}, "RSC-GEN-7"),
               ({"a": (1,)}, "RSC-GEN-7"), ({"a": 2**63}, "RSC-GEN-7"), ({"a\x00": 1}, "RSC-GEN-6"), (None, "RSC-GEN-7")]
        return out + ([({"a": 1}, "RSC-GEN-7")] if isinstance(kind, k.FloatMap) else [])
    if isinstance(kind, k.JsonValue):
        return [((1,), "RSC-GEN-7"), (float("inf"), "RSC-GEN-7"), ({1: 2}, "RSC-GEN-7"), (object(), "RSC-GEN-7")]
    if isinstance(kind, k.Choice):
        return [("bogus", "RSC-GEN-10"), (1, "RSC-GEN-10"), (None, "RSC-GEN-10")]
    if isinstance(kind, k.Strings):
        return [("ab", "RSC-GEN-6"), (("x" * 256,), "RSC-GEN-6"), ((1,), "RSC-GEN-6"), (None, "RSC-GEN-6"),
                (("a\x00",), "RSC-GEN-6")]
    if isinstance(kind, (k.Records, k.Record)):
        record = kind.record
        bad_inner = next(((n, v) for n, s in k.specs(record).items() for v, _ in _bad_values(s.kind)[:1]), None)
        out: list[tuple[Any, str]] = [("x", "MC-GEN-13"), (None, "MC-GEN-13"), (object(), "MC-GEN-13")]
        if bad_inner is not None:
            wrong = attrs.evolve(example(record), **{bad_inner[0]: bad_inner[1]})
            out.append(((wrong,) if isinstance(kind, k.Records) else wrong, "MC-GEN-13"))
        if isinstance(kind, k.Records):
            out.append(((example(record), "x"), "MC-GEN-13"))
        return out
    raise TypeError(kind)


@pytest.mark.clause("MC-GEN-11", "MC-GEN-12", "RSC-GEN-2", "RSC-GEN-5", "RSC-GEN-6", "RSC-GEN-7", "RSC-GEN-9",
                    "RSC-GEN-10")
@pytest.mark.parametrize("table, field", _field_params(("fields", "create.nonempty")))
def test_bad_values_are_refused_and_write_nothing(store, table, field):
    """Each value outside the field's kind is InvalidArgument, from a create
    and (when update writes the field) from an update, and nothing changes."""
    held = _unique_values(table)
    kind = table.fields[field].kind
    row = _call(store, table, "create", ctx(HOME), _new(table, **held))
    before = _view(store, table, [HOME, "ws=w1"], [row.id])
    for value, rule in _bad_values(kind):
        if value == "" and isinstance(kind, k.Short) and kind.nonempty:
            rule = table.clauses.get("create.nonempty", rule)
        expect_raises(rule, InvalidArgument,
                      lambda: _call(store, table, "create", ctx(HOME), _new(table, **{field: value})),
                      f"create_{table.singular} with {field}={value!r:.60}")
        if "update" in table.ops and table.fields[field].update:
            expect_raises(rule, InvalidArgument,
                          lambda: _call(store, table, "update", ctx(HOME), attrs.evolve(row, **{field: value})),
                          f"update_{table.singular} with {field}={value!r:.60}")
        with clause("MC-GEN-11", what=f"the rows after {field}={value!r:.40} was refused"):
            expect("MC-GEN-11", _view(store, table, [HOME, "ws=w1"], [row.id]), before,
                   f"the rows after {field}={value!r:.40} was refused")


@pytest.mark.clause("MC-GEN-11")
@pytest.mark.parametrize("table", _params())
def test_an_object_of_another_type_is_refused(store, table):
    for bad in (None, {"id": ids.new_id(table.prefix)}, "x", attrs.evolve):
        expect_raises("MC-GEN-11", InvalidArgument, lambda: _call(store, table, "create", ctx(HOME), bad),
                      f"create_{table.singular}({type(bad).__name__})")
        if "update" in table.ops:
            expect_raises("MC-GEN-11", InvalidArgument, lambda: _call(store, table, "update", ctx(HOME), bad),
                          f"update_{table.singular}({type(bad).__name__})")


def _big_field(table: k.Table) -> str | None:
    return next((n for n in _data_fields(table) if isinstance(table.fields[n].kind, k.Text)), None)


@pytest.mark.clause("RSC-GEN-8", "MC-GEN-11")
@pytest.mark.parametrize("over", [True, False], ids=["one-byte-over", "just-under"])
@pytest.mark.parametrize("table", _params(lambda t: _big_field(t) is not None))
def test_size_limit_applies_to_the_row_as_stored(store, clock, table, over):
    """The row as it would be stored (stamps and scope included) is measured
    in UTF-8 bytes (the payload partly multi-byte, so that characters or
    UTF-16 units undercount): one byte over 8 MiB is refused by create and
    update, and nothing changes; at the limit it is stored and read back
    whole."""
    big = _big_field(table)
    if big is None:
        raise TypeError(f"{table.name} has no text field")  # _params picks tables that have one
    c = ctx(HOME)
    held = _unique_values(table)
    base = _new(table, **{big: ""}, **held)
    stored_form = attrs.evolve(base, scope=c.scope, created_at=clock.now(), updated_at=clock.now())
    target = MAX_ENTITY_BYTES + 1 if over else MAX_ENTITY_BYTES
    text = payload_of_bytes(target - entity_size(stored_form))
    row = _call(store, table, "create", c, _new(table))
    if over:
        before = _view(store, table, [HOME], [row.id])
        expect_raises("RSC-GEN-8", InvalidArgument,
                      lambda: _call(store, table, "create", c, attrs.evolve(base, **{big: text})),
                      f"create_{table.singular} of {target} bytes")
        if "update" in table.ops and table.fields[big].update:
            grown = attrs.evolve(row, **{big: payload_of_bytes(target - entity_size(attrs.evolve(row, **{big: ""})))})
            expect_raises("RSC-GEN-8", InvalidArgument, lambda: _call(store, table, "update", c, grown),
                          f"update_{table.singular} to {target} bytes")
        with clause("MC-GEN-11", what="the rows after the refused oversized writes"):
            expect("MC-GEN-11", _view(store, table, [HOME], [row.id]), before,
                   "the rows after the refused oversized writes")
    else:
        made = _call(store, table, "create", c, attrs.evolve(base, **{big: text}))
        with clause("RSC-GEN-8", what=f"a {table.singular} of exactly {MAX_ENTITY_BYTES} bytes"):
            expect("RSC-GEN-8", entity_size(made), MAX_ENTITY_BYTES, f"bytes of the {table.singular} created")
            if "get" in table.ops:
                expect("RSC-GEN-8", getattr(_call(store, table, "get", c, made.id), big), text,
                       f"{big} read back from the {table.singular} of exactly {MAX_ENTITY_BYTES} bytes")


@pytest.mark.clause("MC-GEN-1", "SCOPE-ZERO-1")
@pytest.mark.parametrize("table", _params())
def test_zero_scope_is_refused_before_anything_else(store, table):
    """Every generated method refuses the zero scope with NoScope, even with
    garbage arguments, and writes nothing."""
    row = _call(store, table, "create", ctx(HOME), _new(table))
    before = _view(store, table, [HOME], [row.id])
    calls = {"create": (_new(table),), "get": (row.id,), "get_by_name": ("x",), "update": (row,),
             "delete": (row.id,)}
    for op in table.ops:
        for args in (calls[op], ("garbage",)):
            expect_raises("MC-GEN-1", NoScope, lambda: _call(store, table, op, ZERO, *args),
                          f"{table.method(op)} with the zero scope")
    for listing in table.listings:
        expect_raises("MC-GEN-1", NoScope, lambda: _list(store, table, ZERO, listing),
                      f"{listing.method} with the zero scope")
        if listing.count:
            expect_raises("MC-GEN-1", NoScope, lambda: _count(store, table, ZERO, listing),
                          f"{listing.count} with the zero scope")
    with clause("MC-GEN-11", what="the rows after the refused calls"):
        expect("MC-GEN-11", _view(store, table, [HOME], [row.id]), before, "the rows after the refused calls")


@pytest.mark.clause("MC-GEN-7")
@pytest.mark.parametrize("table, listing", _listing_params())
def test_list_arguments_are_checked(store, table, listing):
    """Page arguments must be ints, exact a bool, search a string, filter
    values of their field's kind; an unknown keyword is a TypeError."""
    row = _call(store, table, "create", ctx(HOME), _new(table))
    before = _view(store, table, [HOME], [row.id])
    bad: list[dict[str, Any]] = []
    if listing.paged:
        bad += [{"limit": "1"}, {"limit": True}, {"offset": 1.5}, {"offset": None}]
    if listing.exact:
        bad += [{"exact": 1}, {"exact": "yes"}]
    if listing.search:
        bad += [{"search": 5}, {"search": "a\x00"}]
    for f in listing.filters:
        bad += [{f.arg: v} for v, _ in _bad_values(table.fields[f.field].kind)[:2] if v is not None]
    if listing.parent is not None:
        bad += [{listing.parent: v} for v, _ in _bad_values(table.fields[listing.parent].kind)]
    for args in bad:
        expect_raises("MC-GEN-7", InvalidArgument, lambda: _list(store, table, ctx(HOME), listing, **args),
                      f"{listing.method}({args!r:.60})")
    if listing.filter_class is None:
        with pytest.raises(TypeError):
            _list(store, table, ctx(HOME), listing, bogus_keyword=1)
    with clause("MC-GEN-11", what="the rows after the refused lists"):
        expect("MC-GEN-11", _view(store, table, [HOME], [row.id]), before, "the rows after the refused lists")

