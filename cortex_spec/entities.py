"""Helpers shared by the entity modules: attrs conventions and detaching.

Entities are frozen ``attrs`` classes.  They carry no validators: a test must
be able to build a bad entity and hand it to a store, which refuses it with
``InvalidArgument`` (the store owns validation, see :mod:`.validation`).
"""

from __future__ import annotations

import copy
from typing import TypeVar

import attrs

__all__ = ["entity", "detach", "replace"]

T = TypeVar("T")

#: The decorator every entity uses: frozen, keyword-only, compared by value.
entity = attrs.frozen(kw_only=True, eq=True, hash=False)


def detach(value: T) -> T:
    """A deep copy that shares no mutable part (dicts, lists) with ``value``."""
    return copy.deepcopy(value)


def replace(value: T, **changes: object) -> T:
    """``attrs.evolve``: a copy of a frozen entity with some fields changed."""
    return attrs.evolve(value, **changes)  # type: ignore[misc]
