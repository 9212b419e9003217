"""The machines of stored kinds, generated from their description.

:func:`class_machines` turns the :class:`cortex_spec.kinds.Table` list of a
class into its :class:`~.plugin.ClassMachines`: differential rules for every
generated method, whole-state views, a scenario world of a few rows per
table, racing calls and the storms every described kind has —

* two to four creates of one unique key (a name, an agent's overlay) at one
  exact scope: exactly one wins (CAT-RACE-1/3);
* an update renaming a row into a name against a create of that name
  (CAT-RACE-2);
* updates against deletes of one row: the row never comes back
  (CAT-RACE-4).

Values are drawn from small pools so that collisions are frequent: a few
names differing only in case or by a LIKE wildcard, short strings, counts
at 0 and the 64-bit bound, JSON objects whose values keep their types.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import attrs
from hypothesis import strategies as st

from cortex_spec import kinds as k

from .ops import Op
from .plugin import ClassMachines, World, storm
from .world import ROLES, ctx_of, fixed_id, json_objects, make_op, optional, record, sampled

#: the generic races the storms below exercise (rule keys of :data:`cortex_spec.kinds.RULES`)
RACE_RULES = ("race.unique", "race.rename", "race.delete")

__all__ = ["class_machines", "entities", "NAMES", "KindRows"]

#: Names a rule draws: case and wildcard look-alikes collide only where they should.
NAMES = ("alpha", "Alpha", "beta", "a%a", "a_a", "alpha ")
SHORTS = ("", "x", "X", "ünï")
TEXTS = ("", "text", "line\nline")
SEARCHES = (None, "", "alp", "ALP", "%", "_", "a")


@functools.cache
def _kind_strategy(kind: k.FieldKind, name: str, refs: tuple[tuple[str, tuple[str, ...]], ...]) -> Any:
    if isinstance(kind, k.Optional):
        return optional(_kind_strategy(kind.inner, name, refs))
    if isinstance(kind, k.Id):
        pool = dict(refs).get(kind.prefix) or tuple(fixed_id(kind.prefix, n) for n in (1, 2))
        return sampled(pool)
    if isinstance(kind, k.Short):
        return sampled(NAMES if kind.nonempty else SHORTS)
    if isinstance(kind, k.Text):
        return sampled(TEXTS)
    if isinstance(kind, k.Count):
        return sampled((0, 1, 2**63 - 1))
    if isinstance(kind, k.Int):
        return sampled((0, -1, 2**63 - 1))
    if isinstance(kind, k.Float):
        return sampled((0.0, 0.5, -1.5))
    if isinstance(kind, k.Bool):
        return st.booleans()
    if isinstance(kind, (k.Json, k.JsonValue)):
        return json_objects()
    if isinstance(kind, k.FloatMap):
        return sampled(({}, {"x": 0.5}))
    if isinstance(kind, k.Choice):
        return sampled(tuple(kind.enum))
    if isinstance(kind, k.Strings):
        return sampled(((), ("a",), ("a", "b")))
    if isinstance(kind, k.Records):
        return st.lists(entities(kind.record, refs), max_size=2).map(tuple)
    if isinstance(kind, k.Record):
        return entities(kind.record, refs)
    if isinstance(kind, k.Instant):
        from cortex_spec.clock import EPOCH

        from .world import instants_around

        return instants_around([EPOCH])
    raise TypeError(f"no strategy for {kind!r}")


@functools.cache
def entities(cls: type, refs: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> Any:
    """Entities (or nested records) of a described class with every data
    field drawn; the key and stamps are the caller's (``attrs.evolve``)."""
    specs = k.specs(cls)
    data = [(name, spec) for name, spec in specs.items() if spec.role == k.DATA]
    names = tuple(name for name, _ in data)
    # a placeholder key (an entity's id is required), made once per class
    key = specs.get("id")
    placeholder = {"id": fixed_id(key.kind.prefix, 0)} if key is not None and key.role == k.KEY else {}
    return record((_kind_strategy(spec.kind, name, refs) for name, spec in data),
                  lambda values: cls(**dict(zip(names, values)), **placeholder))


def _keys(table: k.Table) -> list[Any]:
    # every call of a table may touch a unique key of it: the checker keeps a
    # table's calls together and splits only between tables
    return [("table", table.name)]


def _listing_args(data: Any, table: k.Table, listing: k.Listing, refs: tuple, paged: bool) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for f in listing.filters:
        if f.flag is not k.UNSET:
            args[f.arg] = data.draw(st.booleans(), f.arg)
        else:
            args[f.arg] = data.draw(optional(_kind_strategy(table.fields[f.field].kind, f.field, refs)), f.arg)
    if listing.search:
        args["search"] = data.draw(sampled(SEARCHES), "search")
    if listing.exact:
        args["exact"] = data.draw(st.booleans(), "exact")
    if listing.paged and paged:
        # 0 (no limit), 1, about the rows a scenario holds and beyond them;
        # offsets past the first row, inside a page and past the end
        args["limit"] = data.draw(sampled((0, 1, 2, 3, 8, -1)), "limit")
        args["offset"] = data.draw(sampled((0, 1, 2, 3, 9)), "offset")
    return args


def _listing_op(table: k.Table, listing: k.Listing, c: Any, args: dict[str, Any], count: bool,
                label: str = "") -> Op:
    method = listing.count if count else listing.method
    assert method is not None
    if listing.filter_class is not None:
        return make_op(method, c, listing.filter_class(**args), keys=_keys(table), label=label)
    return make_op(method, c, keys=_keys(table), kwargs=args, label=label)


def _rules(table: k.Table, refs: tuple) -> dict[str, Callable[[Any, Any], Op | None]]:
    """One differential rule per generated method of the table (``refs``:
    the ids Id fields naming another table's rows draw from)."""
    kind = table.name
    rules: dict[str, Callable[[Any, Any], Op | None]] = {}

    def entity(m: Any, data: Any, key: str) -> Any:
        return attrs.evolve(data.draw(entities(table.entity, refs), "fields"), id=key)

    def create(m: Any, data: Any) -> Op:
        key = data.draw(m.id_choice(kind, fresh=True), "id")
        m.remember(kind, key)
        return make_op(table.method("create"), data.draw(m.ctx_choice(), "ctx"), entity(m, data, key),
                       keys=_keys(table))

    def by_key(op: str) -> Callable[[Any, Any], Op]:
        def rule(m: Any, data: Any) -> Op:
            key = data.draw(m.id_choice(kind), "id")
            return make_op(table.method(op), data.draw(m.ctx_choice(), "ctx"), key, keys=_keys(table))
        return rule

    def by_name(m: Any, data: Any) -> Op:
        return make_op(table.method("get_by_name"), data.draw(m.ctx_choice(), "ctx"),
                       data.draw(sampled(NAMES), "name"), keys=_keys(table))

    def update(m: Any, data: Any) -> Op:
        key = data.draw(m.id_choice(kind), "id")
        return make_op(table.method("update"), data.draw(m.ctx_choice(), "ctx"), entity(m, data, key),
                       keys=_keys(table))

    for op in table.ops:
        rules[f"{kind}_{op}"] = {"create": create, "update": update, "get_by_name": by_name}.get(op) or by_key(op)
    for listing in table.listings:
        for count in (False, True) if listing.count else (False,):
            def listing_rule(m: Any, data: Any, listing: k.Listing = listing, count: bool = count) -> Op:
                args = _listing_args(data, table, listing, refs, paged=not count)
                return _listing_op(table, listing, data.draw(m.ctx_choice(), "ctx"), args, count)
            rules[f"{kind}_{listing.count if count else listing.method}"] = listing_rule
    return rules


def _views(tables: Sequence[k.Table]) -> Callable[[Sequence[Any], Any], dict[str, Op]]:
    def views(ctxs: Sequence[Any], known: Any) -> dict[str, Op]:
        out: dict[str, Op] = {}
        root = ctx_of("ws=w1")
        for table in tables:
            for c in ctxs:
                for listing in table.listings:
                    if listing.filter_class is not None:
                        out[f"{listing.method}@{c.scope.canonical()}"] = make_op(
                            listing.method, c, None, keys=None)
                    else:
                        out[f"{listing.method}@{c.scope.canonical()}"] = make_op(listing.method, c, keys=None)
            if "get" in table.ops:
                for key in known.get(table.name, [])[:6]:
                    out[f"{table.method('get')}[{key}]"] = make_op(table.method("get"), root, key, keys=None)
        return out
    return views


# -- concurrent scenarios -------------------------------------------------------------------


@attrs.frozen
class KindRows:
    """Per table: ``rows`` created at the exact role (named ``alpha``, ``beta``
    …), and ``spare`` ids no row has."""

    rows: dict[str, tuple[Any, ...]] = attrs.field(hash=False)
    spare: dict[str, tuple[str, ...]] = attrs.field(hash=False)


def _world(tables: Sequence[k.Table], name: str) -> Callable[..., KindRows]:
    def world(draw: Any, w: World, size: int, live: bool) -> KindRows:
        rows: dict[str, tuple[Any, ...]] = {}
        spare: dict[str, tuple[str, ...]] = {}
        refs = _world_refs(tables)
        for table in tables:
            made = []
            for i in range(max(size, 1)):
                # example rows (no drawing: the world is cheap; the racing
                # calls draw their own values)
                fields = {"id": fixed_id(table.prefix, 100 + i)}
                if table.by_name:
                    fields[table.by_name] = NAMES[i]
                # the first row holds every unique key's condition (it is the
                # one the storms contend for); the others hold none
                fields.update(_held(table) if i == 0 else
                              {f: not v if isinstance(v, bool) else v for f, v in _held(table).items()})
                made.append(_example(table, draw(st.integers(0, 2)), refs, **fields))
            rows[table.name] = tuple(made)
            spare[table.name] = tuple(fixed_id(table.prefix, 190 + i) for i in range(4))
        return KindRows(rows, spare)
    return world


def _held(table: k.Table) -> dict[str, Any]:
    return {f: v for u in table.unique for f, v in u.where}


def _example(table: k.Table, variant: int, refs: tuple, **fields: Any) -> Any:
    """An example row whose Id fields name rows of the class's world."""
    from cortex_spec.testing import example

    pools = dict(refs)
    for name, spec in table.fields.items():
        kind = spec.kind.inner if isinstance(spec.kind, k.Optional) else spec.kind
        if spec.role != k.DATA or name in fields:
            continue
        # deterministic values where example() would make fresh ones: a
        # scenario must replay exactly
        if isinstance(kind, k.Id):
            fields[name] = pools.get(kind.prefix, (fixed_id(kind.prefix, 1), fixed_id(kind.prefix, 2)))[variant % 2]
        elif isinstance(kind, k.Short) and kind.nonempty:
            fields[name] = f"{name} {variant}"
    return example(table.entity, variant=variant, **fields)


def _world_refs(tables: Sequence[k.Table]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Ids an Id field of another table of the class may name: the world's rows."""
    return tuple((t.prefix, (fixed_id(t.prefix, 100), fixed_id(t.prefix, 101))) for t in tables)


def _setup(tables: Sequence[k.Table], name: str) -> Callable[[World], list[Op]]:
    def setup(w: World) -> list[Op]:
        rows: KindRows = w[name]
        exact = ctx_of(ROLES["exact"])
        return [make_op(t.method("create"), exact, row, keys=_keys(t)) for t in tables for row in rows.rows[t.name]]
    return setup


_ROLES = ("exact", "exact", "ancestor", "sibling", "lookalike")


def _racing(tables: Sequence[k.Table], name: str) -> Callable[[World], list[Callable[[Any], Op]]]:
    def racing(w: World) -> list[Callable[[Any], Op]]:
        rows: KindRows = w[name]
        refs = _world_refs(tables)
        out: list[Callable[[Any], Op]] = []
        for table in tables:
            keys = tuple(r.id for r in rows.rows[table.name]) + rows.spare[table.name][:1]

            def read(draw: Any, table: k.Table = table, keys: tuple = keys) -> Op:
                c = ctx_of(ROLES[draw(sampled(_ROLES))])
                if "get" in table.ops and draw(st.booleans()):
                    return make_op(table.method("get"), c, draw(sampled(keys)), keys=_keys(table))
                listing = table.listings[0]
                return _listing_op(table, listing, c, {}, count=False)

            def write(draw: Any, table: k.Table = table, keys: tuple = keys) -> Op:
                c = ctx_of(ROLES[draw(sampled(_ROLES[:3]))])
                op = draw(sampled(tuple(o for o in table.ops if o in ("create", "update", "delete"))))
                if op == "delete":
                    return make_op(table.method(op), c, draw(sampled(keys)), keys=_keys(table))
                key = draw(sampled(keys if op == "update" else rows.spare[table.name]))
                obj = _example(table, draw(st.integers(0, 2)), refs, id=key, **_held(table))
                return make_op(table.method(op), c, obj, keys=_keys(table))

            out += [read, write]
        return out
    return racing


def _storms(tables: Sequence[k.Table], name: str) -> Callable[[World], list[Callable[[Any], Op]]]:
    """The CAT-RACE storms of every table (see the module docstring); as
    many builders whatever the world."""
    def storms(w: World) -> list[Callable[[Any], Op]]:
        rows: KindRows = w[name]
        refs = _world_refs(tables)
        out: list[Callable[[Any], Op]] = []
        for table in tables:
            first = rows.rows[table.name][0]
            if table.unique:
                unique = table.unique[0]
                taken = {f: getattr(first, f) for f in unique.fields}

                def same_key(draw: Any, table: k.Table = table, taken: dict = taken) -> Op:
                    # each branch a fresh id, all with one unique key at one exact scope
                    key = draw(sampled(rows.spare[table.name]))
                    obj = _example(table, draw(st.integers(0, 2)), refs, id=key, **_fresh_key(table, taken))
                    return make_op(table.method("create"), ctx_of(ROLES["exact"]), obj, keys=_keys(table),
                                   label="same key")

                out.append(storm(same_key, table.clauses.get("race.unique", "")))
                mutable = [f for f in unique.fields if table.fields[f].update]
                if mutable and "update" in table.ops and len(rows.rows[table.name]) >= 1:
                    def rename_or_create(draw: Any, table: k.Table = table, mutable: list = mutable) -> Op:
                        target = {f: "gamma" for f in mutable}
                        c = ctx_of(ROLES["exact"])
                        if draw(st.booleans()):
                            row = rows.rows[table.name][0]
                            obj = _example(table, draw(st.integers(0, 2)), refs, id=row.id, **target,
                                           **_held(table))
                            return make_op(table.method("update"), c, obj, keys=_keys(table), label="rename")
                        key = draw(sampled(rows.spare[table.name]))
                        obj = _example(table, draw(st.integers(0, 2)), refs, id=key, **target, **_held(table))
                        return make_op(table.method("create"), c, obj, keys=_keys(table), label="create")

                    out.append(storm(rename_or_create, table.clauses.get("race.rename", "")))
            if "update" in table.ops and "delete" in table.ops:
                def update_or_delete(draw: Any, table: k.Table = table, first: Any = first) -> Op:
                    c = ctx_of(ROLES[draw(sampled(("exact", "ancestor")))])
                    if draw(st.booleans()):
                        return make_op(table.method("delete"), c, first.id, keys=_keys(table), label="delete")
                    obj = _example(table, draw(st.integers(0, 2)), refs, id=first.id, **_held(table),
                                   **({table.by_name: getattr(first, table.by_name)} if table.by_name else {}))
                    return make_op(table.method("update"), c, obj, keys=_keys(table), label="update")

                out.append(storm(update_or_delete, table.clauses.get("race.delete", "")))
        return out
    return storms


def _fresh_key(table: k.Table, taken: dict[str, Any]) -> dict[str, Any]:
    """The taken unique key, and the fields its condition needs."""
    return {**_held(table), **taken}


def class_machines(name: str, tables: Sequence[k.Table], *,
                   rules: dict[str, Callable[[Any, Any], Op | None]] | None = None,
                   views: Callable[[Sequence[Any], Any], dict[str, Op]] | None = None,
                   racing_ops: Callable[[World], list[Callable[[Any], Op]]] | None = None,
                   storm_ops: Callable[[World], list[Callable[[Any], Op]]] | None = None,
                   **extra: Any) -> ClassMachines:
    """The :class:`~.plugin.ClassMachines` of a class whose behaviour is its
    stored kinds, plus what the class adds by hand: ``rules``, ``views``,
    ``racing_ops`` and ``storm_ops`` are added to the generated ones (a
    class's storms after its tables'), ``extra`` sets other fields (seed
    rules, families, a weight)."""
    tables = [t for t in tables if not t.internal]
    refs = _world_refs(tables)
    generated: dict[str, Callable[[Any, Any], Op | None]] = {}
    for table in tables:
        generated.update(_rules(table, refs))
    generated.update(rules or {})
    table_views = _views(tables)

    def all_views(ctxs: Sequence[Any], known: Any) -> dict[str, Op]:
        out = table_views(ctxs, known)
        if views is not None:
            out.update(views(ctxs, known))
        return out

    def joined(first: Callable[[World], list], more: Callable[[World], list] | None) -> Callable[[World], list]:
        return first if more is None else (lambda w: first(w) + more(w))
    races = tuple(dict.fromkeys(table.clauses[r] for table in tables for r in RACE_RULES if r in table.clauses))
    fields: dict[str, Any] = dict(
        name=name,
        race_clauses=races + tuple(extra.pop("race_clauses", ())),
        rules=generated,
        views=all_views,
        id_kinds={t.name: t.prefix for t in tables},
        seed_rules=tuple(f"{t.name}_create" for t in tables),
        world=_world(tables, name),
        setup=_setup(tables, name),
        racing_ops=joined(_racing(tables, name), racing_ops),
        storm_ops=joined(_storms(tables, name), storm_ops),
    )
    fields.update(extra)
    return ClassMachines(**fields)
