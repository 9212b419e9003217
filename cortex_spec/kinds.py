"""Stored kinds, described once and read by every layer.

A *stored kind* is an entity class whose fields carry their kind in attrs
metadata, and a :class:`Table` that says how it is stored: its key and the
error for a key that names nothing visible, its unique keys, and its
listings.  From that one description

* the contract validates new and updated entities (:func:`new_entity`,
  :func:`update_fields`) and states the generic operations once
  (:class:`Crud`: create, get, get by name, update, delete, list, count,
  with their error precedence);
* each backend's interpreter (``reference/kinds.py``,
  ``adapters/sql/kinds.py``, ``adapters/mongo/kinds.py``) makes its
  storage: table or collection and indexes, codec, and five atomic
  primitives (:class:`Storage`) the operations run on;
* the suites generate the scope, common, bad-input, round-trip, size and
  CRUD clauses per table and per field.

Declaring an entity::

    @entity
    class Skill:
        id: str = key(ids.SKILL)
        scope: Scope = scope_field()
        name: str = field(Short(nonempty=True), update=True)
        tools: tuple[SkillTool, ...] = field(Records(SkillTool), update=True, factory=tuple)
        metadata: dict = field(Json(), update=True, factory=dict)
        created_at: datetime | None = created()
        updated_at: datetime | None = updated()

Roles of a field: the key (never updated), the scope stamp (``ctx.scope``
on create, never written again, SCOPE-IMM), the created and updated stamps
(clock now, RSC-GEN-4), the caller's principal (``ctx.principal``),
*owned* fields that only the store's own methods write (counters; on create
the object's value must be the default, or is reset to it), and data
fields, taken from the object on create and written by update when
``update=True``.
"""

from __future__ import annotations

import enum
from enum import Enum
import math
from datetime import datetime
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, TypeVar

import attrs

from . import ids as idlib
from .clock import to_instant
from .context import Context, require_context, require_scope
from .errors import InvalidArgument, NotFound
from .scope import Scope
from .validation import (
    INT64_MAX,
    INT64_MIN,
    SHORT_STRING,
    check_entity_size,
    check_json_object,
    check_page,
    check_str,
)

__all__ = [
    "FieldKind",
    "Id",
    "Short",
    "Text",
    "Count",
    "Int",
    "Float",
    "Bool",
    "Instant",
    "Json",
    "JsonValue",
    "FloatMap",
    "Choice",
    "Strings",
    "Records",
    "Record",
    "Optional",
    "ScopeKind",
    "FieldSpec",
    "field",
    "key",
    "scope_field",
    "created",
    "updated",
    "owned",
    "principal",
    "specs",
    "check_value",
    "check_filter",
    "Unique",
    "Filter",
    "Listing",
    "Table",
    "Query",
    "Storage",
    "Crud",
    "new_entity",
    "update_fields",
    "ascii_fold",
    "matches_search",
    "BY_NAME_ORDER",
]

META = "cortex"
T = TypeVar("T")


# -- field kinds ----------------------------------------------------------------------------


class FieldKind:
    """What a field holds, and how a value is checked (``InvalidArgument``)
    and normalised on its way into a store."""

    #: the value a field of this kind takes when the caller gives none
    nullable = False

    def check(self, value: object, where: str) -> Any:
        raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__.lower()


@attrs.frozen
class Id(FieldKind):
    """A TypeID with ``prefix`` (RSC-GEN-5)."""

    prefix: str

    def check(self, value: object, where: str) -> str:
        return idlib.check_id(value, self.prefix, where)

    def describe(self) -> str:
        return f"{self.prefix}_ id"


@attrs.frozen
class Short(FieldKind):
    """A short string: at most 255 code points (RSC-GEN-6); ``nonempty``
    refuses ``""``."""

    nonempty: bool = False

    def check(self, value: object, where: str) -> str:
        text = check_str(value, where)
        if len(text) > SHORT_STRING:
            raise InvalidArgument(f"{where} is {len(text)} code points long (at most {SHORT_STRING})")
        if self.nonempty and not text:
            raise InvalidArgument(f"{where} must not be empty")
        return text

    def describe(self) -> str:
        return "non-empty short string" if self.nonempty else "short string"


@attrs.frozen
class Text(FieldKind):
    """A string of any length (no NUL, no lone surrogate, RSC-GEN-6)."""

    def check(self, value: object, where: str) -> str:
        return check_str(value, where)

    def describe(self) -> str:
        return "string"


def _check_int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{where} must be an int, got {type(value).__name__}")
    return value


@attrs.frozen
class Count(FieldKind):
    """An ``int`` (never a ``bool``) in ``0 .. 2**63-1`` (RSC-GEN-9)."""

    def check(self, value: object, where: str) -> int:
        n = _check_int(value, where)
        if not 0 <= n <= INT64_MAX:
            raise InvalidArgument(f"{where} must be >= 0 and fit in 64 bits, got {n}")
        return n

    def describe(self) -> str:
        return "count"


@attrs.frozen
class Int(FieldKind):
    """A signed 64-bit ``int`` (never a ``bool``)."""

    def check(self, value: object, where: str) -> int:
        n = _check_int(value, where)
        if not INT64_MIN <= n <= INT64_MAX:
            raise InvalidArgument(f"{where} must fit in a signed 64-bit int, got {n}")
        return n

    def describe(self) -> str:
        return "integer"


@attrs.frozen
class Float(FieldKind):
    """A finite ``float`` (an ``int`` or ``bool`` is refused: types are kept)."""

    def check(self, value: object, where: str) -> float:
        if type(value) is not float:
            raise InvalidArgument(f"{where} must be a float, got {type(value).__name__}")
        if not math.isfinite(value):
            raise InvalidArgument(f"{where} must be finite, got {value!r}")
        return value

    def describe(self) -> str:
        return "finite float"


@attrs.frozen
class Bool(FieldKind):
    def check(self, value: object, where: str) -> bool:
        if not isinstance(value, bool):
            raise InvalidArgument(f"{where} must be a bool, got {type(value).__name__}")
        return value

    def describe(self) -> str:
        return "bool"


@attrs.frozen
class Instant(FieldKind):
    """An aware ``datetime``, stored in UTC and truncated to ms (RSC-GEN-2)."""

    def check(self, value: object, where: str) -> datetime:
        return to_instant(value, where)

    def describe(self) -> str:
        return "instant"


@attrs.frozen
class Json(FieldKind):
    """A JSON object (RSC-GEN-7)."""

    def check(self, value: object, where: str) -> dict[str, Any]:
        return check_json_object(value, where)

    def describe(self) -> str:
        return "JSON object"


@attrs.frozen
class FloatMap(FieldKind):
    """A JSON object whose values are all finite floats (PersonaTrait)."""

    def check(self, value: object, where: str) -> dict[str, float]:
        obj = check_json_object(value, where)
        for k, v in obj.items():
            Float().check(v, f"{where}[{k!r}]")
        return obj

    def describe(self) -> str:
        return "JSON object of finite floats"


@attrs.frozen
class JsonValue(FieldKind):
    """Any JSON value RSC-GEN-7 allows inside an object (MEM-WORK-5)."""

    def check(self, value: object, where: str) -> Any:
        return check_json_object({"v": value}, where)["v"]

    def describe(self) -> str:
        return "JSON value"


@attrs.frozen
class Choice(FieldKind):
    """A member of ``enum`` or its exact string value (RSC-GEN-10); read
    back as the member."""

    enum: type[Enum]

    def check(self, value: object, where: str) -> Enum:
        if isinstance(value, self.enum):
            return value
        if isinstance(value, str):
            try:
                return self.enum(value)
            except ValueError:
                pass
        allowed = ", ".join(repr(m.value) for m in self.enum)
        raise InvalidArgument(f"{where} must be one of {allowed}, got {value!r}")

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(str(m.value) for m in self.enum)

    def describe(self) -> str:
        return f"one of {', '.join(self.values)}"


@attrs.frozen
class Strings(FieldKind):
    """A ``tuple`` (or ``list``) of strings of ``item`` kind, read back as a
    tuple in order (MC-GEN-13)."""

    item: FieldKind = Short()
    #: no item twice (a repeated one is ``InvalidArgument``)
    unique: bool = False

    def check(self, value: object, where: str) -> tuple[Any, ...]:
        if not isinstance(value, (tuple, list)):
            raise InvalidArgument(f"{where} must be a tuple, got {type(value).__name__}")
        items = tuple(self.item.check(v, f"{where}[{i}]") for i, v in enumerate(value))
        if self.unique and len(set(items)) != len(items):
            raise InvalidArgument(f"{where} repeats an item: {list(items)!r}")
        return items

    def describe(self) -> str:
        return f"tuple of {'distinct ' if self.unique else ''}{self.item.describe()}s"


@attrs.frozen
class Records(FieldKind):
    """A tuple of nested records: frozen attrs classes whose own fields are
    described, stored and read back whole, in order."""

    record: type

    def check(self, value: object, where: str) -> tuple[Any, ...]:
        if not isinstance(value, (tuple, list)):
            raise InvalidArgument(f"{where} must be a tuple, got {type(value).__name__}")
        return tuple(check_record(self.record, v, f"{where}[{i}]") for i, v in enumerate(value))

    def describe(self) -> str:
        return f"tuple of {self.record.__name__}"


@attrs.frozen
class Record(FieldKind):
    """One nested record (a :class:`Records` item on its own)."""

    record: type

    def check(self, value: object, where: str) -> Any:
        return check_record(self.record, value, where)

    def describe(self) -> str:
        return self.record.__name__


@attrs.frozen
class Optional(FieldKind):
    """``None`` or a value of ``inner``."""

    inner: FieldKind
    nullable = True

    def check(self, value: object, where: str) -> Any:
        return None if value is None else self.inner.check(value, where)

    def describe(self) -> str:
        return f"{self.inner.describe()} or None"


@attrs.frozen
class ScopeKind(FieldKind):
    """The scope stamp: always ``ctx.scope`` (never checked from an object)."""

    def check(self, value: object, where: str) -> Scope:
        if not isinstance(value, Scope):
            raise InvalidArgument(f"{where} must be a Scope, got {type(value).__name__}")
        return value


def check_record(record: type, value: object, where: str) -> Any:
    """A nested record checked field by field (every field is data)."""
    if not isinstance(value, record):
        raise InvalidArgument(f"{where} must be a {record.__name__}, got {type(value).__name__}")
    return record(**{name: spec.kind.check(getattr(value, name), f"{where}.{name}")
                     for name, spec in specs(record).items()})


# -- field roles ------------------------------------------------------------------------------

KEY, SCOPE, CREATED, UPDATED, PRINCIPAL, OWNED, DATA = (
    "key", "scope", "created", "updated", "principal", "owned", "data")


@attrs.frozen
class FieldSpec:
    """What the description says of one field."""

    kind: FieldKind
    role: str = DATA
    #: written by the generic update (data fields only)
    update: bool = False
    #: owned fields: ``"require"`` refuses a create whose object holds
    #: another value than the default (MEM-SES-1, CP-CREATE-2); ``"reset"``
    #: stores the default whatever the object holds (RUN-CREATE-1); ``"keep"``
    #: stores the object's value, checked (a team run's first children)
    on_create: str = "reset"
    #: ``(value,)``: what a ``"reset"`` create stores instead of the default
    #: (a run's first revision); ``()``: the default
    initial: tuple[Any, ...] = ()


def field(kind: FieldKind, *, default: Any = attrs.NOTHING, factory: Callable[[], Any] | None = None,
          update: bool = False, role: str = DATA, on_create: str = "reset",
          initial: tuple[Any, ...] = ()) -> Any:
    """An attrs field that carries its :class:`FieldSpec`."""
    meta = {META: FieldSpec(kind, role, update, on_create, initial)}
    if factory is not None:
        return attrs.field(factory=factory, metadata=meta)
    return attrs.field(default=default, metadata=meta)


def key(prefix: str) -> Any:
    """The key: a TypeID with ``prefix``, supplied by the caller, never updated."""
    return field(Id(prefix), role=KEY)


def scope_field() -> Any:
    return field(ScopeKind(), default=Scope(), role=SCOPE)


def created() -> Any:
    return field(Optional(Instant()), default=None, role=CREATED)


def updated() -> Any:
    return field(Optional(Instant()), default=None, role=UPDATED)


def owned(kind: FieldKind, default: Any = None, *, factory: Callable[[], Any] | None = None,
          on_create: str = "reset", initial: tuple[Any, ...] = ()) -> Any:
    """A field only the store's own methods write (counters, states a claim
    moves); the generic update never writes it.  ``initial=(value,)``: a
    create stores ``value`` rather than the default."""
    return field(kind, default=default, factory=factory, role=OWNED, on_create=on_create, initial=initial)


def principal() -> Any:
    """``ctx.principal`` of the creating call, never written again."""
    return field(Optional(Short()), default=None, role=PRINCIPAL)


def specs(cls: type) -> dict[str, FieldSpec]:
    """The described fields of an entity or record class, in order."""
    cached = cls.__dict__.get("__cortex_specs__")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    out: dict[str, FieldSpec] = {}
    for a in attrs.fields(cls):
        spec = a.metadata.get(META)
        if spec is None:
            raise TypeError(f"{cls.__name__}.{a.name} carries no field kind (use cortex_spec.kinds.field)")
        out[a.name] = spec
    type.__setattr__(cls, "__cortex_specs__", out)
    return out


def _default(cls: type, name: str) -> Any:
    a = attrs.fields_dict(cls)[name]
    if isinstance(a.default, attrs.Factory):  # type: ignore[arg-type]
        return a.default.factory()  # type: ignore[union-attr]
    return a.default


def check_value(cls: type, name: str, value: object, where: str | None = None) -> Any:
    """``value`` checked against the kind of field ``name`` of ``cls``."""
    return specs(cls)[name].kind.check(value, where or f"{cls.__name__.lower()}.{name}")


# -- tables -----------------------------------------------------------------------------------


@attrs.frozen
class Unique:
    """A unique key: no two rows share ``fields`` (within one exact scope
    when ``exact_scope``), among the rows where every ``(field, value)`` of
    ``where`` holds (e.g. only default sessions)."""

    fields: tuple[str, ...]
    exact_scope: bool = True
    where: tuple[tuple[str, Any], ...] = ()
    #: a short name for indexes
    name: str = ""


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@attrs.frozen
class Filter:
    """An argument of a listing: rows whose ``field`` equals the argument
    (``None``: no filter), or, for a ``flag``, rows whose ``field`` equals
    ``flag`` when the argument is True."""

    arg: str
    field: str
    flag: Any = UNSET


#: The arguments of a paged listing (a keyword or a field of its filter):
#: rows to skip, then at most how many (``0``: all).
PAGE_ARGUMENTS = ("offset", "limit")

#: Orders are ``((field, descending), ...)``.
Order = tuple[tuple[str, bool], ...]

#: MC-GEN-9: several visible rows match a read of one row: the shallowest
#: scope, then the oldest, then the smallest key.
BY_NAME_ORDER: Order = (("scope", False), ("created_at", False), ("id", False))

#: In an order, ``scope`` sorts by the scope's depth and ``scope_text`` by
#: its canonical string (code point order, RSC-GEN-11).
SCOPE_DEPTH, SCOPE_TEXT = "scope", "scope_text"


@attrs.frozen
class Listing:
    """A list method (and the count that goes with it).

    ``order`` must end in the table's key, so every list has a total order
    (RSC-GEN-11); ``fixed`` are conditions always applied (``state =
    pending``); ``search`` names the field ``search=`` matches (MC-GEN-10);
    ``exact`` lets the caller ask for rows of exactly ``ctx.scope``;
    ``filter_class`` is the attrs class the arguments come in (``None``:
    keyword arguments); ``parent`` names a field the method takes as its
    one required positional argument after ``ctx`` (``list_steps(ctx,
    run_id)``): rows whose field equals it, the argument checked by the
    field's kind and named as the field."""

    method: str
    count: str | None = None
    filters: tuple[Filter, ...] = ()
    order: Order = (("created_at", False), ("id", False))
    fixed: tuple[tuple[str, Any], ...] = ()
    search: str | None = None
    exact: bool = True
    paged: bool = True
    filter_class: type | None = None
    parent: str | None = None


@attrs.frozen
class Table:
    """How a stored kind is stored (see the module docstring)."""

    entity: type
    #: storage name: table ``cortex_<name>``, collection ``<prefix><name>``
    name: str
    #: the conformance class the kind belongs to
    cls: str
    not_found: type[NotFound]
    #: method names: ``create_<singular>``, ``get_<singular>``, ... ``list_<plural>``
    singular: str
    plural: str
    #: which generic operations the class offers (``create``, ``get``,
    #: ``get_by_name``, ``update``, ``delete``; listings are declared below)
    ops: tuple[str, ...] = ("create", "get", "update", "delete")
    unique: tuple[Unique, ...] = ()
    listings: tuple[Listing, ...] = ()
    #: the field ``get_<singular>_by_name`` reads (MC-GEN-9)
    by_name: str | None = None
    #: clause ids of the generic rules (keys: see :data:`RULES`)
    clauses: Mapping[str, str] = attrs.field(factory=dict)
    #: rows only the class's own methods write and read (conversation
    #: messages, working memory): no generated methods, no generated tests;
    #: the key may be any short string the class derives
    internal: bool = False

    def __attrs_post_init__(self) -> None:
        fields = specs(self.entity)
        if [n for n, s in fields.items() if s.role == KEY] != ["id"]:
            raise TypeError(f"{self.entity.__name__}: the key must be one field named id")
        if not self.internal and not isinstance(fields["id"].kind, Id):
            raise TypeError(f"{self.entity.__name__}: the key of a caller-created kind is a TypeID")
        for listing in self.listings:
            if not listing.order or listing.order[-1][0] != "id":
                raise TypeError(f"{self.name}.{listing.method}: an order must end in the key (RSC-GEN-11)")
            if listing.parent is not None and (listing.parent not in fields or listing.filter_class is not None):
                raise TypeError(f"{self.name}.{listing.method}: a parent is a field, and takes no filter object")

    @property
    def fields(self) -> dict[str, FieldSpec]:
        return specs(self.entity)

    @property
    def prefix(self) -> str:
        kind = self.fields["id"].kind
        if not isinstance(kind, Id):
            raise TypeError(f"{self.name}: an internal table's key has no prefix")
        return kind.prefix

    @property
    def mutable(self) -> tuple[str, ...]:
        return tuple(n for n, s in self.fields.items() if s.update)

    def method(self, op: str) -> str:
        """The store method of a generic operation."""
        if op == "get_by_name":
            return f"get_{self.singular}_by_name"
        return f"{op}_{self.singular}"

    def methods(self) -> dict[str, str]:
        """Every store method the table gives: name -> operation (``list:<method>``
        and ``count:<method>`` for listings)."""
        out = {self.method(op): op for op in self.ops}
        for listing in self.listings:
            out[listing.method] = f"list:{listing.method}"
            if listing.count:
                out[listing.count] = f"count:{listing.method}"
        return out

    def listing(self, method: str) -> Listing:
        return next(li for li in self.listings if li.method == method or li.count == method)

    def clause(self, rule: str) -> str:
        return self.clauses[rule]


#: The generic rules a table maps to its clause ids (the suites check each).
RULES = {
    "create": "create stores the stamped entity and returns it",
    "create.nonempty": "a create with an empty non-empty field is InvalidArgument",
    "create.id": "a reused id, in any scope, is AlreadyExists",
    "create.unique": "a unique key already taken is AlreadyExists",
    "get": "get returns the visible row, else the not-found class",
    "get_by_name": "by-name reads match exactly, shallowest scope, oldest, smallest id",
    "update": "update replaces every mutable field and sets updated_at",
    "update.immutable": "update never writes the key, the scope, created_at or owned fields",
    "update.unique": "an update into a taken unique key is AlreadyExists, nothing written",
    "update.missing": "update of a row that is not visible is the not-found class",
    "delete": "delete removes the visible row, else the not-found class",
    "list": "lists return visible rows in their order, filtered, paged",
    # optional: where a table's spec states them apart, the generated list
    # test charges a wrong order and a wrong page to these (else to "list")
    "list.order": "a list's rows come in the listing's total order",
    "list.page": "a page skips offset rows of that order, then returns at most limit",
    "count": "a count equals the list without its page",
    "search": "search is a literal ASCII-case-folded substring",
    "fields": "every field written reads back equal, types kept",
    # the races the concurrent machine storms every table with (stateful.kinds)
    "race.unique": "racing creates of one unique key at one exact scope: exactly one succeeds",
    "race.rename": "an update renaming into a key racing a create of that key: exactly one succeeds",
    "race.delete": "an update racing a delete of the row: first, or the not-found class; never resurrected",
}


# -- validation -----------------------------------------------------------------------------


def new_entity(table: Table, obj: object, ctx: Context, now: datetime) -> Any:
    """The entity ``create`` will store, or ``InvalidArgument``: data fields
    checked by kind, stamps from ``ctx`` and ``now``, owned fields at their
    defaults (RSC-GEN-4, MC-GEN-4), and the size limit (RSC-GEN-8)."""
    cls = table.entity
    if not isinstance(obj, cls):
        raise InvalidArgument(f"{table.singular} must be a {cls.__name__}, got {type(obj).__name__}")
    values: dict[str, Any] = {}
    for name, spec in specs(cls).items():
        where = f"{table.singular}.{name}"
        if spec.role == SCOPE:
            values[name] = ctx.scope
        elif spec.role in (CREATED, UPDATED):
            values[name] = now
        elif spec.role == PRINCIPAL:
            values[name] = ctx.principal
        elif spec.role == OWNED:
            default = _default(cls, name)
            if spec.on_create == "keep":  # given at creation, then only the class's own methods write it
                values[name] = spec.kind.check(getattr(obj, name), where)
                continue
            if spec.on_create == "require" and getattr(obj, name) != default:
                raise InvalidArgument(f"{where} is set by the store; a new {table.singular} must "
                                      f"hold {default!r}, got {getattr(obj, name)!r}")
            values[name] = spec.initial[0] if spec.initial else default
        else:
            values[name] = spec.kind.check(getattr(obj, name), where)
    stored = cls(**values)
    check_entity_size(stored, table.singular)
    return stored


def update_fields(table: Table, obj: object) -> tuple[str, dict[str, Any]]:
    """``(key, fields to write)`` of an update: the mutable fields, checked;
    every other field of ``obj`` is ignored (never validated)."""
    cls = table.entity
    if not isinstance(obj, cls):
        raise InvalidArgument(f"{table.singular} must be a {cls.__name__}, got {type(obj).__name__}")
    key_value = specs(cls)["id"].kind.check(getattr(obj, "id"), f"{table.singular}.id")
    fields = {name: specs(cls)[name].kind.check(getattr(obj, name), f"{table.singular}.{name}")
              for name in table.mutable}
    return key_value, fields


def ascii_fold(text: str) -> str:
    """A–Z to a–z, every other character as it is (MC-GEN-10)."""
    return text.translate(_FOLD)


_FOLD = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def matches_search(value: str, search: str | None) -> bool:
    """MC-GEN-10: a literal, ASCII-case-folded substring (``None``/``""``: all)."""
    return not search or ascii_fold(search) in ascii_fold(value)


# -- queries and storage --------------------------------------------------------------------


@attrs.frozen
class Query:
    """What a read selects: rows visible to ``scope`` (prefix, or exactly
    ``scope`` when ``exact``; every scope when ``scope`` is None) whose
    fields equal ``where``, whose ``search`` field contains ``text``
    (ASCII-folded), whose ``after`` field sorts strictly after its value
    (keyset paging: strings by code point, RSC-GEN-11), in ``order``,
    paged."""

    scope: Scope | None
    exact: bool = False
    where: tuple[tuple[str, Any], ...] = ()
    search: tuple[str, str] | None = None
    order: Order = (("id", False),)
    limit: int = 0
    offset: int = 0
    after: tuple[str, Any] | None = None


class Storage(Protocol):
    """The five primitives a backend's interpreter gives a table; each is
    one atomic step of the backend (one statement, one locked block, one
    document operation, or one transaction)."""

    def insert(self, table: Table, entity: Any) -> None:
        """Store ``entity``; a taken key or unique key → ``AlreadyExists``."""

    def select(self, table: Table, query: Query) -> list[Any]: ...

    def count(self, table: Table, query: Query) -> int: ...

    def update(self, table: Table, key: str, scope: Scope, fields: dict[str, Any],
               now: datetime, expect: tuple[tuple[str, Any], ...] = (),
               advance: tuple[str, ...] = ()) -> Any | None:
        """Write ``fields`` and ``updated_at = now`` to the row ``key`` (and
        add one to each count field of ``advance``, from the value the row
        holds when written: a run's revision, RUN-REV-2) if
        ``scope`` sees it and each ``(field, value)`` of ``expect`` holds of
        it (a claim's condition, ``state = pending``), in the same atomic
        step, and return the row as stored (``None`` when it is not visible
        or a condition fails); a unique key taken by another row → ``AlreadyExists``;
        a row over the size limit → ``InvalidArgument``; either way nothing
        is written."""

    def delete(self, table: Table, key: str, scope: Scope) -> bool:
        """Remove the row ``key`` if ``scope`` sees it; whether it did."""

    def delete_where(self, table: Table, query: Query) -> int:
        """Remove every row ``query`` selects (its order and page ignored);
        how many."""

    def atomic(self, body: Callable[["Storage"], T]) -> T:
        """Run ``body`` with a storage whose calls are one atomic step
        together: one transaction (SQL, Mongo) or one hold of the lock
        (reference).  Reads in it lock what they read where the backend
        needs that for the step's writes to be decided on what was read
        (``SELECT … FOR UPDATE`` on PostgreSQL).  Committed when ``body``
        returns, rolled back (nothing written) when it raises."""

    def snapshot(self, body: Callable[["Storage"], T]) -> T:
        """Run ``body`` with a storage whose reads (``select``, ``count``)
        all see one state of the store, at one instant between the call and
        its return, without locking out writers where the backend need not:
        one hold of the lock (reference), a read-only transaction at
        REPEATABLE READ (PostgreSQL) or a read transaction (SQLite, WAL), a
        snapshot session (MongoDB).  ``body`` only reads (class preparation)."""


def _listing_args(table: Table, listing: Listing, args: dict[str, Any], flt: object) -> dict[str, Any]:
    """The listing's arguments, from keywords or from its filter object."""
    if listing.filter_class is not None:
        if flt is None:
            flt = listing.filter_class()
        if not isinstance(flt, listing.filter_class):
            raise InvalidArgument(f"filter must be a {listing.filter_class.__name__} or None, "
                                  f"got {type(flt).__name__}")
        return {a.name: getattr(flt, a.name) for a in attrs.fields(listing.filter_class)}
    return args


def listing_arguments(table: Table, listing: Listing, args: dict[str, Any],
                      flt: object = None) -> dict[str, Any]:
    """The arguments of a list or count call, each checked (the call's
    ``InvalidArgument``), by argument name: the parent, every filter, then
    ``exact``, ``search``, ``limit`` and ``offset``."""
    given = _listing_args(table, listing, args, flt)
    out: dict[str, Any] = {}
    if listing.parent is not None:
        out[listing.parent] = check_value(table.entity, listing.parent, given[listing.parent], listing.parent)
    for f in listing.filters:
        value = given.get(f.arg, False if f.flag is not UNSET else None)
        if f.flag is not UNSET:
            if not isinstance(value, bool):
                raise InvalidArgument(f"{f.arg} must be a bool, got {type(value).__name__}")
        elif value is not None:
            value = check_value(table.entity, f.field, value, f"filter.{f.arg}")
        out[f.arg] = value
    exact = given.get("exact", False)
    if not isinstance(exact, bool):
        raise InvalidArgument(f"exact must be a bool, got {type(exact).__name__}")
    out["exact"] = exact
    text = given.get("search") if listing.search is not None else None
    out["search"] = check_str(text, "search") if text is not None else None
    out["limit"], out["offset"] = (check_page(given.get("limit", 0), given.get("offset", 0))
                                   if listing.paged else (0, 0))
    return out


def check_filter(table: Table, listing: Listing, flt: object) -> Any:
    """A listing's filter object checked as its list call checks it, and
    rebuilt from the checked values (for a store written without
    :class:`Crud`)."""
    if listing.filter_class is None:
        raise TypeError(f"{listing.method} takes no filter object")
    checked = listing_arguments(table, listing, {}, flt)
    return listing.filter_class(**{a.name: checked[a.name] for a in attrs.fields(listing.filter_class)})


def listing_query(table: Table, listing: Listing, ctx: object, args: dict[str, Any],
                  flt: object = None) -> Query:
    """The :class:`Query` of a list or count call (scope first, then the
    arguments, each checked)."""
    scope = require_scope(ctx)
    given = listing_arguments(table, listing, args, flt)
    where: list[tuple[str, Any]] = list(listing.fixed)
    if listing.parent is not None:
        where.append((listing.parent, given[listing.parent]))
    for f in listing.filters:
        value = given[f.arg]
        if f.flag is not UNSET:
            if value:
                where.append((f.field, f.flag))
        elif value is not None:
            where.append((f.field, value))
    text = given["search"]
    search = (listing.search, text) if listing.search is not None and text else None
    return Query(scope, given["exact"] and listing.exact, tuple(where), search, listing.order,
                 given["limit"], given["offset"])


class Crud:
    """The generic operations of a stored kind, written once: validation and
    error precedence (the context, then ``NoScope``, then ``InvalidArgument``,
    then the not-found class), on top of a backend's :class:`Storage`.

    Every backend's store runs these; only the five primitives differ."""

    def __init__(self, storage: Storage, now: Callable[[], datetime]) -> None:
        self.storage = storage
        self.now = now

    def create(self, table: Table, ctx: object, obj: object) -> Any:
        require_scope(ctx)
        stored = new_entity(table, obj, ctx, self.now())  # type: ignore[arg-type]
        self.storage.insert(table, stored)
        return stored

    def get(self, table: Table, ctx: object, key: object) -> Any:
        scope = require_scope(ctx)
        key = table.fields["id"].kind.check(key, f"{table.singular}_id")
        rows = self.storage.select(table, Query(scope, where=(("id", key),)))
        if not rows:
            raise table.not_found(f"{table.singular} {key} not found")
        return rows[0]

    def get_by_name(self, table: Table, ctx: object, name: object) -> Any:
        scope = require_scope(ctx)
        assert table.by_name is not None
        text = check_str(name, "name")
        rows = self.storage.select(table, Query(scope, where=((table.by_name, text),),
                                                order=BY_NAME_ORDER, limit=1))
        if not rows:
            raise table.not_found(f"no {table.singular} named {text!r}")
        return rows[0]

    def update(self, table: Table, ctx: object, obj: object) -> Any:
        scope = require_scope(ctx)
        key, fields = update_fields(table, obj)
        stored = self.storage.update(table, key, scope, fields, self.now())
        if stored is None:
            raise table.not_found(f"{table.singular} {key} not found")
        return stored

    def delete(self, table: Table, ctx: object, key: object) -> None:
        scope = require_scope(ctx)
        key = table.fields["id"].kind.check(key, f"{table.singular}_id")
        if not self.storage.delete(table, str(key), scope):
            raise table.not_found(f"{table.singular} {key} not found")

    def list(self, table: Table, listing: Listing, ctx: object, args: dict[str, Any],
             flt: object = None) -> list[Any]:
        return self.storage.select(table, listing_query(table, listing, ctx, args, flt))

    def count(self, table: Table, listing: Listing, ctx: object, args: dict[str, Any],
              flt: object = None) -> int:
        query = listing_query(table, listing, ctx, args, flt)
        return self.storage.count(table, attrs.evolve(query, limit=0, offset=0))


def install(cls: type, tables: Iterable[Table], crud: str = "_crud") -> type:
    """Give ``cls`` (a store class) the generated methods of ``tables``: each
    calls ``getattr(self, crud)`` (a :class:`Crud`) with its table.  A
    method the class defines itself is left alone.  The names it gives are
    recorded in ``cls.__cortex_installed__`` (:mod:`cortex_spec.stubs`
    declares them to type checkers)."""
    installed = list(getattr(cls, "__cortex_installed__", ()))
    for table in tables:
        for name, op in table.methods().items():
            if name in cls.__dict__:
                continue
            setattr(cls, name, _method(table, op, crud, name))
            installed.append(name)
    type.__setattr__(cls, "__cortex_installed__", tuple(installed))
    return cls


def _method(table: Table, op: str, crud: str, name: str) -> Callable[..., Any]:
    if op.startswith(("list:", "count:")):
        kind, _, method = op.partition(":")
        listing = table.listing(method)

        if listing.filter_class is not None:
            def call(self: Any, ctx: Any, filter: Any = None) -> Any:
                return getattr(getattr(self, crud), kind)(table, listing, ctx, {}, filter)
        elif listing.parent is not None:
            call = _parent_call(table, listing, kind, crud, name)
        else:
            def call(self: Any, ctx: Any, **args: Any) -> Any:  # type: ignore[misc]
                unknown = sorted(set(args) - _listing_keywords(listing, paged=kind == "list"))
                if unknown:
                    raise TypeError(f"{name}() got unexpected keyword argument(s) {', '.join(unknown)}")
                return getattr(getattr(self, crud), kind)(table, listing, ctx, args)
    elif op == "create":
        def call(self: Any, ctx: Any, obj: Any) -> Any:  # type: ignore[misc]
            return getattr(self, crud).create(table, ctx, obj)
    elif op == "update":
        def call(self: Any, ctx: Any, obj: Any) -> Any:  # type: ignore[misc]
            return getattr(self, crud).update(table, ctx, obj)
    else:
        def call(self: Any, ctx: Any, value: Any) -> Any:  # type: ignore[misc]
            return getattr(getattr(self, crud), op)(table, ctx, value)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{RULES.get(op.partition(':')[0], op)} ({table.name}; see the class's protocol)"
    return call


def _parent_call(table: Table, listing: Listing, kind: str, crud: str, name: str) -> Callable[..., Any]:
    """``name(ctx, <parent>, **keywords)``: the parent by position or by its name."""
    parent = listing.parent
    assert parent is not None

    def call(self: Any, ctx: Any, *given: Any, **args: Any) -> Any:
        if len(given) > 1 or (given and parent in args):
            raise TypeError(f"{name}() takes ctx and {parent} only")
        if given:
            args[parent] = given[0]
        if parent not in args:
            raise TypeError(f"{name}() missing required argument: {parent!r}")
        unknown = sorted(set(args) - _listing_keywords(listing, paged=kind == "list") - {parent})
        if unknown:
            raise TypeError(f"{name}() got unexpected keyword argument(s) {', '.join(unknown)}")
        return getattr(getattr(self, crud), kind)(table, listing, ctx, args)
    return call


def _listing_keywords(listing: Listing, paged: bool = True) -> set[str]:
    out = {f.arg for f in listing.filters}
    if listing.search:
        out.add("search")
    if listing.exact:
        out.add("exact")
    if listing.paged and paged:
        out |= set(PAGE_ARGUMENTS)
    return out


def listing_keywords(listing: Listing, paged: bool = True) -> set[str]:
    """The keyword arguments a keyword listing (``paged``) or its count takes."""
    return _listing_keywords(listing, paged)


def protocol_methods(protocol: type) -> list[str]:
    """The method names a store protocol declares, in declaration order."""
    return [n for n, v in protocol.__dict__.items() if callable(v) and not n.startswith("_")]


def check_protocol(protocol: type, tables: Iterable[Table], methods: type, *, shared_only: bool = True) -> None:
    """The protocol declares exactly the generated methods of ``tables`` and
    the methods ``methods`` (the class's shared implementation) writes by
    hand; raises ``TypeError`` at import time otherwise, so the typed
    interface and the description cannot drift apart.  With
    ``shared_only=False`` the protocol may declare more: methods each
    backend writes itself (class ``runs``: the run methods), and only the
    generated and shared ones are checked.  The pair is recorded
    (:func:`checked_protocols`) for :mod:`cortex_spec.stubs`."""
    declared = set(protocol_methods(protocol))
    generated = {n for t in tables for n in t.methods()}
    hand = {n for n, v in methods.__dict__.items() if callable(v) and not n.startswith("_")} - generated
    if not shared_only:
        declared &= generated | hand
    if declared != generated | hand:
        missing = sorted((generated | hand) - declared)
        extra = sorted(declared - generated - hand)
        raise TypeError(f"{protocol.__name__} and the tables disagree: not declared {missing}, "
                        f"not implemented {extra}")
    _CHECKED[methods] = protocol


#: ``methods class -> protocol`` of every :func:`check_protocol` call so far.
_CHECKED: dict[type, type] = {}


def checked_protocols() -> list[tuple[type, type]]:
    """``(methods class, protocol)`` of every class whose protocol
    :func:`check_protocol` has checked (in the order of the checks)."""
    return list(_CHECKED.items())


def require(ctx: object) -> Context:
    """Re-exported for interpreters: the context check of unscoped calls."""
    return require_context(ctx)


def by_name_key(row: Any) -> tuple[int, Any, str]:
    """MC-GEN-9's sort key of a row."""
    return (row.scope.depth, row.created_at, row.id)


def sort_rows(rows: list[Any], order: Order) -> list[Any]:
    """``rows`` in ``order`` (stable sorts from the last key to the first;
    strings by code point, RSC-GEN-11; a scope sorts by its depth)."""
    for name, descending in reversed(order):
        rows.sort(key=lambda r, n=name: _sort_key(r, n), reverse=descending)  # type: ignore[misc]
    return rows


def _sort_value(value: Any) -> Any:
    if isinstance(value, Scope):
        return value.depth
    if isinstance(value, enum.Enum):
        return value.value
    return value


def _sort_key(row: Any, name: str) -> Any:
    if name == SCOPE_TEXT:
        return row.scope.canonical()
    return _sort_value(getattr(row, name))


def visible(scope: Scope | None, exact: bool, row_scope: Scope) -> bool:
    """SCOPE-VIS / SCOPE-EXACT of one row (``scope`` None: every scope)."""
    if scope is None:
        return True
    return row_scope == scope if exact else scope.covers(row_scope)


def unique_conflict(table: Table, rows: Iterable[Any], candidate: Any) -> Unique | None:
    """The unique key of ``table`` that ``candidate`` shares with one of
    ``rows`` (other rows than itself), or None."""
    for unique in table.unique:
        if any(getattr(candidate, f) != v for f, v in unique.where):
            continue
        for row in rows:
            if row.id == candidate.id:
                continue
            if any(getattr(row, f) != v for f, v in unique.where):
                continue
            if unique.exact_scope and row.scope != candidate.scope:
                continue
            if all(getattr(row, f) == getattr(candidate, f) for f in unique.fields):
                return unique
    return None


def check_size(entity: Any, table: Table) -> None:
    check_entity_size(entity, table.singular)


def unique_name(table: Table, unique: Unique) -> str:
    return unique.name or "_".join(unique.fields)


def describe_tables(tables: Sequence[Table]) -> list[str]:
    """One line per table and field, for documentation and error messages."""
    lines = []
    for t in tables:
        lines.append(f"{t.name} ({t.cls}): key {t.prefix}_, not found {t.not_found.__name__}")
        for name, spec in t.fields.items():
            flag = " (updated)" if spec.update else ""
            lines.append(f"  {name}: {spec.kind.describe()} [{spec.role}]{flag}")
    return lines
