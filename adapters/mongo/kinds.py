"""The MongoDB interpreter of stored kinds (:mod:`cortex_spec.kinds`).

One collection per stored kind (``<prefix><table>``), one document per row
keyed by its id.  Stored forms follow :mod:`.store`: instants are BSON
dates, JSON objects and values are JSON text (types and odd keys kept),
scopes are stored per level; string tuples are arrays and nested records
arrays of sub-documents whose fields use the same forms.  Two derived
fields serve the queries no plain field can:

* ``u_<key>`` for each unique key: a digest of the row's exact scope and the
  key's fields, present only while the key's condition holds (only default
  sessions, say), under a unique *sparse* index — so "one name per exact
  scope" is one index, whatever the length of the scope, and a partial
  condition needs no ``partialFilterExpression``;
* ``f_<field>`` for the searched field: its ASCII-folded copy, matched with
  an escaped (literal) regular expression (MC-GEN-10).

A table of :data:`PARTS` is not a collection of its own: its row is one
*part* (a sub-document) of a slot document keyed by the row's id, whose
other parts other classes write (a run is the ``run`` part of its slot in
``runs``, beside the run's suspension, see :mod:`.runs`).  Every path is
then under the part, a read projects the part, and an insert fills the
part of the slot if it is empty (the store's ``_fill_slot``).

Primitives (:class:`cortex_spec.kinds.Storage`): ``insert`` is one
``insert_one``; ``select``/``count`` one query (a snapshot session where the
deployment has snapshot reads); ``update`` reads the visible row, checks
the size of the row it will store (its other fields are the key, the scope,
the creation time and store-owned fields), then writes the mutable fields
with one ``find_one_and_update`` on the same filter — unconditional on
their old values, so the last writer wins and lands whole, unless the call
names conditions (``expect``, a claim's ``state: pending``): both filters
then hold them, and of racing claims one matches; ``delete`` one
``delete_one``.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from typing import Any

import attrs

from cortex_spec import kinds as k
from cortex_spec.kinds import Query, Table, ascii_fold, check_size
from cortex_spec.scope import Scope

from .store import MongoStoreBase, decode, dt_in, dt_out, json_in, json_out, scope_filter, scope_in, scope_out

__all__ = ["MongoStorage", "kind_indexes", "doc_of", "entity_of", "encode_field", "part_of", "PARTS"]

#: Tables stored as a part of slot documents: table name -> the part
#: (their layout predates the description; the store declares its indexes).
PARTS = {"runs": "run"}


def part_of(table: Table) -> str | None:
    return PARTS.get(table.name)


def _path(table: Table, name: str) -> str:
    """The document path of a field (or of ``scope``/a derived field)."""
    if name == "id":
        return "_id"
    part = part_of(table)
    return name if part is None else f"{part}.{name}"


def _encode(kind: k.FieldKind, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(kind, k.Optional):
        return _encode(kind.inner, value)
    if isinstance(kind, k.Instant):
        return dt_out(value)
    if isinstance(kind, k.Choice):
        return value.value
    if isinstance(kind, (k.Json, k.FloatMap)):
        return json_out(value)
    if isinstance(kind, k.JsonValue):
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if isinstance(kind, k.Strings):
        return [_encode(kind.item, v) for v in value]
    if isinstance(kind, k.Records):
        return [_record_doc(r) for r in value]
    if isinstance(kind, k.Record):
        return _record_doc(value)
    return value


def encode_field(table: Table, name: str, value: Any) -> Any:
    """A field's value as a document holds it."""
    return _encode(table.fields[name].kind, value)


def _record_doc(record: Any) -> dict[str, Any]:
    return {name: _encode(spec.kind, getattr(record, name)) for name, spec in k.specs(type(record)).items()}


def _decode(kind: k.FieldKind, raw: Any) -> Any:
    if raw is None:
        return None
    if isinstance(kind, k.Optional):
        return _decode(kind.inner, raw)
    if isinstance(kind, k.Instant):
        return dt_in(raw)
    if isinstance(kind, k.Choice):
        return kind.enum(raw)
    if isinstance(kind, (k.Json, k.FloatMap)):
        return json_in(raw)
    if isinstance(kind, k.JsonValue):
        if not isinstance(raw, str):
            raise ValueError("a stored JSON value is not JSON text")
        return json.loads(raw)
    if isinstance(kind, k.Strings):
        return tuple(_decode(kind.item, v) for v in raw)
    if isinstance(kind, k.Records):
        return tuple(_record_of(kind.record, d) for d in raw)
    if isinstance(kind, k.Record):
        return _record_of(kind.record, raw)
    if isinstance(kind, (k.Count, k.Int)):
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValueError(f"a stored integer is a {type(raw).__name__}")
        return raw
    if isinstance(kind, k.Float):
        return float(raw)
    return raw


def _record_of(record: type, doc: dict[str, Any]) -> Any:
    return record(**{name: _decode(spec.kind, doc[name]) for name, spec in k.specs(record).items()})


def _digest(*parts: Any) -> str:
    text = json.dumps(parts, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _unique_field(table: Table, unique: k.Unique) -> str:
    return f"u_{k.unique_name(table, unique)}"


def _derived(table: Table, entity: Any) -> dict[str, Any]:
    """The ``u_*`` and ``f_*`` fields of a row (None where a key's condition
    does not hold: the sparse index skips missing fields, so those are unset)."""
    out: dict[str, Any] = {}
    for unique in table.unique:
        holds = all(getattr(entity, f) == v for f, v in unique.where)
        parts = [entity.scope.canonical()] if unique.exact_scope else []
        parts += [_encode(table.fields[f].kind, getattr(entity, f)) for f in unique.fields]
        out[_unique_field(table, unique)] = _digest(*parts) if holds else None
    for listing in table.listings:
        if listing.search:
            out[f"f_{listing.search}"] = ascii_fold(getattr(entity, listing.search))
    return out


def doc_of(table: Table, entity: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for name, spec in table.fields.items():
        value = getattr(entity, name)
        if spec.role == k.KEY:
            doc["_id"] = value
        elif spec.role == k.SCOPE:
            doc["scope"] = scope_out(value)
        else:
            doc[name] = _encode(spec.kind, value)
    for name, value in _derived(table, entity).items():
        if value is not None:
            doc[name] = value
    return doc


def entity_of(table: Table, doc: dict[str, Any]) -> Any:
    """The entity a document holds (a slot's part, for a table of :data:`PARTS`)."""
    part = part_of(table)
    if part is not None:
        doc = {"_id": doc["_id"], **doc[part]}

    def build() -> Any:
        values = {}
        for name, spec in table.fields.items():
            if spec.role == k.KEY:
                values[name] = doc["_id"]
            elif spec.role == k.SCOPE:
                values[name] = scope_in(doc["scope"])
            else:
                values[name] = _decode(spec.kind, doc[name])
        return table.entity(**values)

    return decode(f"a stored {table.singular}", build)


def kind_indexes(collection: Any, table: Table) -> list[tuple[Any, list[tuple[str, int]], str, dict[str, Any]]]:
    """The indexes of one kind's collection (for ``create_missing_indexes``)."""
    out: list[tuple[Any, list[tuple[str, int]], str, dict[str, Any]]] = []
    if part_of(table) is not None:
        return out  # the slot's indexes are the store's (.store.MongoStoreBase.ensure_indexes)
    if not table.listings or any(li.parent is None for li in table.listings):
        out.append((collection, [("scope.k0", 1), ("scope.v0", 1), ("created_at", 1), ("_id", 1)],
                    f"{table.name}_scope", {}))
    for listing in table.listings:  # a listing by parent: the parent, then its order
        if listing.parent is not None:
            keys = [(listing.parent, 1)] + [(_sort_field(n), -1 if desc else 1) for n, desc in listing.order]
            out.append((collection, keys, f"{table.name}_of_{listing.parent.removesuffix('_id')}", {}))
    for unique in table.unique:
        name = _unique_field(table, unique)
        out.append((collection, [(name, 1)], f"{table.name}_{name}", {"unique": True, "sparse": True}))
    return out


def _sort_field(name: str, table: Table | None = None) -> str:
    if name == "id":
        return "_id"
    path = {k.SCOPE_DEPTH: "scope.n", k.SCOPE_TEXT: "scope.c"}.get(name, name)
    return path if table is None else _path(table, path)


class MongoStorage:
    """:class:`cortex_spec.kinds.Storage` on a :class:`.store.MongoStoreBase`;
    with ``session``, the storage of one multi-document transaction
    (:meth:`atomic`; a server detects a conflicting write and
    ``with_transaction`` retries the whole step)."""

    def __init__(self, store: MongoStoreBase, session: Any = None) -> None:
        self.store = store
        self.session = session

    def _s(self) -> dict[str, Any]:
        return {} if self.session is None else {"session": self.session}

    def atomic(self, body: Any) -> Any:
        if self.session is not None:
            return body(self)
        with self.store._guard():
            return self.store._txn(lambda session: body(MongoStorage(self.store, session)))

    def snapshot(self, body: Any) -> Any:
        """``body``'s reads in one snapshot session (class preparation)."""
        if self.session is not None:
            return body(self)
        with self.store._guard(), self.store._snapshot_session() as session:
            return body(MongoStorage(self.store, session))

    def delete_where(self, table: Table, query: Query) -> int:
        if part_of(table) is not None:
            raise TypeError(f"{table.name}: a slot's part is never deleted")
        with self.store._guard():
            result = self._collection(table).delete_many(self._filter(table, query), **self._s())
            return int(result.deleted_count)

    def _collection(self, table: Table) -> Any:
        if part_of(table) is not None:  # the slots' collection, as the store opened it (``_runs``)
            return getattr(self.store, f"_{table.name}")
        return self.store.database[self.store.collection_prefix + table.name]

    def _filter(self, table: Table, query: Query) -> dict[str, Any]:
        part = part_of(table)
        found: dict[str, Any] = {} if query.scope is None else scope_filter(_path(table, "scope"), query.scope,
                                                                            exact=query.exact)
        if part is not None and query.scope is None:
            found[part] = {"$exists": True}  # a slot may hold other parts only
        for name, value in query.where:
            found[_path(table, name)] = _encode(table.fields[name].kind, value)
        if query.search is not None:
            name, text = query.search
            found[_path(table, f"f_{name}")] = {"$regex": re.escape(ascii_fold(text))}
        if query.after is not None:  # keyset paging (strings: BSON binary order, by code point)
            name, value = query.after
            path = _path(table, name)
            bound = {"$gt": _encode(table.fields[name].kind, value)}
            found[path] = {"$eq": found[path], **bound} if path in found else bound
        return found

    def _projection(self, table: Table) -> dict[str, Any]:
        part = part_of(table)
        return {} if part is None else {"projection": {part: 1}}

    def insert(self, table: Table, entity: Any) -> None:
        part = part_of(table)
        with self.store._guard():
            if part is None:
                self._collection(table).insert_one(doc_of(table, entity), **self._s())
                return
            if self.session is not None:
                raise TypeError(f"{table.name}: a slot's part is not inserted inside a transaction")
            doc = doc_of(table, entity)
            del doc["_id"]
            # the key is the slot's: taken in any scope -> AlreadyExists (SCOPE-ID-1)
            slots: Any = self.store  # the runs mixin's (.runs.RunsMixin._fill_slot), which owns the slots
            slots._fill_slot(entity.id, part, doc, f"{table.singular} {entity.id} already exists")

    def select(self, table: Table, query: Query) -> list[Any]:
        sort = [(_sort_field(n, table), -1 if desc else 1) for n, desc in query.order]
        with self.store._guard():
            if self.session is None and query.offset == 0 and any(n == "id" for n, _ in query.where):
                # one document at most (a read by key): one find_one, no snapshot session needed
                doc = self._collection(table).find_one(self._filter(table, query), **self._projection(table))
                return [] if doc is None else [entity_of(table, doc)]
            if self.session is not None:
                docs = list(self._collection(table).find(self._filter(table, query), sort=sort,
                                                         skip=query.offset, limit=query.limit,
                                                         session=self.session, **self._projection(table)))
            else:
                docs = self.store._find(self._collection(table), self._filter(table, query),
                                        sort=sort, skip=query.offset, limit=query.limit,
                                        **self._projection(table))
            return [entity_of(table, d) for d in docs]

    def count(self, table: Table, query: Query) -> int:
        with self.store._guard():
            if self.session is not None:
                return int(self._collection(table).count_documents(self._filter(table, query),
                                                                    session=self.session))
            return self.store._count(self._collection(table), self._filter(table, query))

    def update(self, table: Table, key: str, scope: Scope, fields: dict[str, Any],
               now: datetime, expect: tuple[tuple[str, Any], ...] = (),
               advance: tuple[str, ...] = ()) -> Any | None:
        from pymongo import ReturnDocument

        if self.session is None and self.store._transactions and any(
                s.role == k.OWNED for s in table.fields.values()):
            # the size check reads store-owned fields another step may be
            # changing: read and write in one transaction
            return self.atomic(lambda s: s.update(table, key, scope, fields, now, expect, advance))
        collection = self._collection(table)
        mine = {"_id": key, **scope_filter(_path(table, "scope"), scope),
                **{_path(table, name): _encode(table.fields[name].kind, value) for name, value in expect}}
        with self.store._guard():
            doc = collection.find_one(mine, **self._projection(table), **self._s())
            if doc is None:
                return None
            # RSC-GEN-8 of the row as it will be stored: its other fields are
            # never written by an update, so this read cannot go stale
            old = entity_of(table, doc)
            new = attrs.evolve(old, updated_at=now, **fields, **{n: getattr(old, n) + 1 for n in advance})
            check_size(new, table)
            changes = {_path(table, name): _encode(table.fields[name].kind, value) for name, value in fields.items()}
            changes[_path(table, "updated_at")] = dt_out(now)
            unset = {}
            for name, value in _derived(table, new).items():
                if value is None:
                    unset[_path(table, name)] = ""
                else:
                    changes[_path(table, name)] = value
            update: dict[str, Any] = {"$set": changes}
            if advance:  # in the same operation
                update["$inc"] = {_path(table, name): 1 for name in advance}
            if unset:
                update["$unset"] = unset
            doc = collection.find_one_and_update(mine, update, return_document=ReturnDocument.AFTER,
                                                 **self._projection(table), **self._s())
            return None if doc is None else entity_of(table, doc)

    def delete(self, table: Table, key: str, scope: Scope) -> bool:
        if part_of(table) is not None:
            raise TypeError(f"{table.name}: a slot's part is never deleted")
        with self.store._guard():
            result = self._collection(table).delete_one({"_id": key, **scope_filter("scope", scope)},
                                                        **self._s())
            return bool(result.deleted_count == 1)
