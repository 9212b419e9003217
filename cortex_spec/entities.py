"""Helpers shared by the entity modules: attrs conventions and detaching.

Entities are frozen ``attrs`` classes.  They carry no validators: a test must
be able to build a bad entity and hand it to a store, which refuses it with
``InvalidArgument`` (the store owns validation, see :mod:`.validation`).
"""

from __future__ import annotations

from typing import TypeVar, dataclass_transform

import attrs

__all__ = ["entity", "detach", "replace"]

T = TypeVar("T")

C = TypeVar("C", bound=type)


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(attrs.field,))
def entity(cls: C) -> C:
    """The decorator every entity uses: a frozen, keyword-only attrs class,
    compared by value (``dataclass_transform`` tells type checkers so)."""
    return attrs.frozen(kw_only=True, eq=True, hash=False)(cls)


def detach(value: T) -> T:
    """A copy that shares no mutable part (dicts, lists) with ``value``.

    Entities are frozen; their only mutable parts are JSON objects and lists,
    so those are copied and everything else (strings, datetimes, scopes,
    enums) is shared.
    """
    if isinstance(value, dict):
        return {k: detach(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, list):
        return [detach(v) for v in value]  # type: ignore[return-value]
    if isinstance(value, tuple):
        return tuple(detach(v) for v in value)  # type: ignore[return-value]
    names = _field_names(type(value))
    if names:
        changes = {}
        for name in names:
            v = getattr(value, name)
            if isinstance(v, (dict, list, tuple)) or _field_names(type(v)):
                changes[name] = detach(v)
        return attrs.evolve(value, **changes) if changes else value  # type: ignore[misc]
    return value


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    """The attrs fields of ``cls`` (empty when it is not an attrs class),
    looked up once per class: every read of every store detaches its rows."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in attrs.fields(cls)) if attrs.has(cls) else ()
    return names


def replace(value: T, **changes: object) -> T:
    """``attrs.evolve``: a copy of a frozen entity with some fields changed."""
    return attrs.evolve(value, **changes)  # type: ignore[misc]
