"""Certifies SCOPE-CANON-6 on every declared class: rows written at the
longest scopes SCOPE-VAL allows — two and three levels whose keys and values
are 255 code points of text outside ASCII (three- and four-byte UTF-8, drawn
so that it does not compress) — are stored by every writing method and read
back equal, from their own scope and from an ancestor that sees them.

A backend that indexes the whole scope in a structure with an entry limit
(PostgreSQL's btree: about 2.7 KB per entry) refuses such rows with a storage
error; SCOPE-CANON-6 says it must index a digest or a part of the scope
instead.  Each class gives its calls in its examples
(``Examples.long_scopes``, ``conformance/examples.py``: next to its own
tests, or generated from its stored kinds by ``table_long_scopes``); a class
whose methods live on no scope, or behind an opener, has none.
"""

from __future__ import annotations

import random

import pytest

from cortex_spec import CLASSES, Context, Scope
from cortex_spec.testing import clause, ctx, expect, expect_false, expect_op

from .examples import examples

#: code points of three UTF-8 bytes (CJK) and of four (emoji, CJK extension B)
_RANGES = ((0x4E00, 0x9FFF), (0x1F300, 0x1F64F), (0x20000, 0x2A6DF))


def _text(rng: random.Random, n: int = 255) -> str:
    out = []
    for _ in range(n):
        lo, hi = rng.choice(_RANGES)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def long_scope(depth: int, seed: int = 0) -> Scope:
    """A valid scope of ``depth`` levels, every key and value 255 code points
    of incompressible non-ASCII text."""
    rng = random.Random(1000 * depth + seed)
    return Scope(*((_text(rng), _text(rng)) for _ in range(depth)))


def _params() -> list:
    return [pytest.param(name, depth, marks=pytest.mark.cortex_classes(name), id=f"{name}-depth{depth}")
            for name, ex in examples().items() if ex.long_scopes is not None for depth in (2, 3)]


@pytest.mark.clause("SCOPE-CANON-6", "SCOPE-CANON-5", "SCOPE-VAL-5")
@pytest.mark.parametrize("cls, depth", _params())
def test_longest_valid_scopes_are_stored_by_every_method(store, cls, depth):
    """Every writing method of the class at a scope of ``depth`` levels of
    255-code-point keys and values (SCOPE-VAL-5's limit) succeeds, and the
    rows read back at that scope from it and from its parent."""
    scope = long_scope(depth)
    if not all(len(k) == 255 and len(v) == 255 for k, v in scope.levels):
        raise TypeError("long_scope must give 255-code-point keys and values")
    calls = examples()[cls].long_scopes
    if calls is None:
        raise TypeError(f"{cls} gives no long-scope calls")  # _params gives only classes with calls
    calls(store, Context(scope), Context(scope.parent()))


@pytest.mark.clause("SCOPE-CANON-6")
def test_every_scoped_class_has_its_long_scope_calls():
    """A scoped class of the store itself (not behind an opener) added to
    the catalogue without long-scope calls in its examples would go
    unchecked: this fails instead.  (A class whose rows carry no scope,
    ``ConformanceClass.scoped`` False, writes nothing at one.)"""
    scoped = {name for name, cls in CLASSES.items() if cls.scoped and cls.opened_by is None}
    missing = sorted(name for name in scoped if examples()[name].long_scopes is None)
    with clause("SCOPE-CANON-6", what="classes without long-scope calls"):
        expect_false("SCOPE-CANON-6", missing, f"no long-scope calls for {missing}")


def test_long_scope_is_valid_and_incompressible():
    """(A check of the test itself: the scope is valid and far beyond a
    btree entry if indexed whole.)"""
    s = long_scope(3)
    with clause("SCOPE-CANON-3", what="a long scope parsed back from its canonical form"):
        expect("SCOPE-CANON-3", Scope.parse(s.canonical()), s, "Scope.parse(s.canonical())")
    with clause("SCOPE-VAL-5", what="the long scope's canonical form in UTF-8 bytes"):
        expect_op("SCOPE-VAL-5", len(s.canonical().encode("utf-8")), ">", 6 * 255 * 3,
                  'len(s.canonical().encode("utf-8"))')
    ctx(s)  # a context can be made of it
