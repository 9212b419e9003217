"""Certifies RSC-GEN-8/13 on every write method: the entity a write stores
is measured as stored — the new row of a create, and the row after the
change for an update, a resolve, a save, a finish, a reply — and one byte
over 8 MiB is refused with ``InvalidArgument`` and nothing written, while
exactly 8 MiB is stored and read back whole.

The tests are generated, one per *size site*: a write method and the field
its payload goes in.  Sites come from two places:

* every stored kind of a declared class (``cortex_spec.kinds``): its create
  and, where the field is updated, its update, on its first text field (else
  its first JSON object field);
* each class's examples (``Examples.sites["size"]``, ``conformance/examples.py``),
  given next to the class's own tests; ``Examples.size_methods`` names the
  write methods that must have one.

A site is measured, not computed: the write is made once with a payload of
one character and its stored row measured by ``cortex_spec``'s size
function; since the payload appears once in the row, a payload of ``n``
UTF-8 bytes makes the row ``n - 1`` bytes larger.  The payloads are partly
two- and four-byte characters, so that a store measuring code points or
UTF-16 units instead of bytes lets the row one byte over through.  Each
site runs in its class's seeded world (``Examples.seed``: a class whose
methods live behind an opener opens it there) and a refused write is
compared through its class's view.  Rows that grow by what the store adds
rather than by one payload have tests of their own in their class's module.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import attrs
import pytest

from cortex_spec import CLASSES, Context
from cortex_spec import kinds as k
from cortex_spec.errors import InvalidArgument
from cortex_spec.testing import clause, ctx, expect, expect_raises, state_view
from cortex_spec.validation import MAX_ENTITY_BYTES, entity_size

from .examples import HOME, Site, call_listing, examples, sample
from .helpers import payload_of_bytes

#: the scopes whose views prove that a refused write wrote nothing
VIEW_SCOPES = [HOME, "ws=w1"]


# -- generated from the stored kinds ------------------------------------------------------------


def _payload_field(table: k.Table) -> tuple[str, bool] | None:
    """(field, as JSON) the payload of the table's writes goes in."""
    data = [(n, s) for n, s in table.fields.items() if s.role == k.DATA]
    for n, s in data:
        if isinstance(s.kind, k.Text):
            return n, False
    for n, s in data:
        if isinstance(s.kind, k.Json):
            return n, True
    return None


def _table_sites(table: k.Table) -> list[Site]:
    found = _payload_field(table)
    if found is None:
        return []
    field, as_json = found
    held = {f: v for u in table.unique for f, v in u.where}

    def value(text: str) -> Any:
        return {"p": text} if as_json else text

    def create(s: Any, c: Context, w: SimpleNamespace, text: str) -> Any:
        return getattr(s, table.method("create"))(c, sample(table, **held, **{field: value(text)}))

    def read(s: Any, c: Context, w: SimpleNamespace, result: Any) -> Any:
        key = result.id if result is not None else w.row.id
        if "get" in table.ops:
            return getattr(s, table.method("get"))(c, key)
        return next(r for r in call_listing(s, table, table.listings[0], c) if r.id == key)

    sites = [Site(table.method("create"), table.cls, create, read, clauses=(table.clauses.get("create", ""),))]
    if "update" in table.ops and table.fields[field].update and "get" in table.ops:
        def prepare(s: Any, c: Context, w: SimpleNamespace) -> None:
            w.row = getattr(s, table.method("create"))(c, sample(table, **held))

        def update(s: Any, c: Context, w: SimpleNamespace, text: str) -> Any:
            return getattr(s, table.method("update"))(c, attrs.evolve(w.row, **{field: value(text)}))

        sites.append(Site(table.method("update"), table.cls, update, read, prepare,
                          clauses=(table.clauses.get("update", ""),)))
    return sites


def all_sites() -> list[Site]:
    """Every size site: each class's stored kinds', then its examples'."""
    out: list[Site] = []
    for name, cls in CLASSES.items():
        for table in cls.tables:
            if not table.internal:
                out += _table_sites(table)
        out += examples()[name].sites.get("size", ())
    return out


def _params() -> list:
    # a site's own clauses (CP-RESOLVE-7 …) are marks of its case, so the report counts them
    return [pytest.param(s, marks=[pytest.mark.cortex_classes(s.cls)]
                         + ([pytest.mark.clause(*filter(None, s.clauses))] if any(s.clauses) else []),
                         id=f"{s.cls}.{s.name}")
            for s in all_sites()]


# -- the generated test --------------------------------------------------------------------------


def _world(request: Any, store: Any, site: Site) -> SimpleNamespace:
    """The site's class's seeded world (an opened object lives in it)."""
    return examples()[site.cls].seed(store, request.getfixturevalue)


def _view(store: Any, site: Site, w: SimpleNamespace) -> dict:
    view = examples()[site.cls].viewer()(store, w, VIEW_SCOPES)
    view.update(state_view(store, VIEW_SCOPES, classes={site.cls}))
    return view


def _write(store: Any, site: Site, c: Context, w: SimpleNamespace, text: str) -> tuple[Any, Any]:
    if site.prepare is not None:
        site.prepare(store, c, w)
    result = site.call(store, c, w, text)
    if site.read is None:
        raise TypeError(f"size site {site.name} gives no read")  # test_sites_cover_the_unbounded_writes
    return result, site.read(store, c, w, result)


@pytest.mark.clause("RSC-GEN-8", "RSC-GEN-13")
@pytest.mark.parametrize("site", _params())
def test_every_write_refuses_a_stored_row_over_8_mib(request, store, clock, site):
    """One byte over the limit, as stored, is refused and writes nothing;
    exactly at the limit is stored and read back whole (where the contract
    bounds the row exactly, ``Site.exact``)."""
    c = ctx(HOME, principal="alice")
    w = _world(request, store, site)
    clauses = ("RSC-GEN-13", "RSC-GEN-8") + tuple(x for x in site.clauses if x)
    with clause(*clauses, what=f"{site.name} with a one-character payload"):
        _, probe = _write(store, site, c, w, "x")
    base = entity_size(probe) - 1  # the row's size without its payload
    over = payload_of_bytes(MAX_ENTITY_BYTES + 1 - base)
    if site.prepare is not None:
        site.prepare(store, c, w)
    before = _view(store, site, w)
    expect_raises(clauses[0], InvalidArgument, lambda: site.call(store, c, w, over),
                  f"{site.name} storing a row of {MAX_ENTITY_BYTES + 1} bytes")
    with clause(*clauses, what=f"the store after the refused {site.name}"):
        expect(clauses, _view(store, site, w), before, f"what the store shows after the refused {site.name}")
    if site.exact:
        at = payload_of_bytes(MAX_ENTITY_BYTES - base)
        with clause(*clauses, what=f"{site.name} storing a row of exactly {MAX_ENTITY_BYTES} bytes"):
            _, stored = _write(store, site, c, w, at)
            expect(clauses, entity_size(stored), MAX_ENTITY_BYTES, f"bytes of the row {site.name} stored, read back")


@pytest.mark.clause("RSC-GEN-13")
def test_sites_cover_the_unbounded_writes():
    """(Of the suite itself.)  Every generated create of a stored kind with
    a text or JSON field, and every write a class's examples name in
    ``size_methods``, has a site that reads the row back; a write method
    renamed without its site, or a site dropped, shows up."""
    sites = all_sites()
    expect("RSC-GEN-13", [s.name for s in sites if s.read is None], [], "size sites that read nothing back")
    for name, cls in CLASSES.items():
        wanted = set(examples()[name].size_methods)
        for table in cls.tables:
            if not table.internal and _payload_field(table) is not None:
                wanted.add(table.method("create"))
        names = {s.name.split(".")[0] for s in sites if s.cls == name}
        methods = {m.name for m in cls.methods}
        expect("RSC-GEN-13", sorted(wanted - names), [], f"write methods of class {name} without a size site")
        expect("RSC-GEN-13", sorted(names - methods), [], f"size sites of class {name} naming no method of it")
