"""Certifies the tenant boundary of scope.md: the `Scope` value itself (model,
validation, canonical form, `covers`) as library-level properties, and, against
the store under test, every scope rule on every method of every declared class:
zero-scope callers refused with `NoScope` before storage is touched and with the
error precedence of SCOPE-ZERO-3, the across-scopes methods that ignore the
caller's scope, prefix visibility for lists, counts and by-id methods (ancestors
see descendants; descendants, siblings and look-alike scopes see nothing), exact
mode, errors for unreachable rows that are indistinguishable from missing rows,
scope immutability, global id uniqueness, and the scope read back from storage.

Nothing here names a class: the store-level tests read what each class gives
them (``conformance/examples.py``: ``EXAMPLES`` in each class's module, and
examples generated from each stored kind's description) and are
parametrized per class, method, entity kind, by-id method and across-scope
method.  A class's own scope tests live in its own module.
"""

from __future__ import annotations

import inspect
import re
import typing
import unicodedata
from importlib import resources
from types import SimpleNamespace
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cortex_spec import CLASSES, Context, Scope
from cortex_spec.clauses import catalogue
from cortex_spec.errors import AlreadyExists, InvalidArgument, NoScope
from cortex_spec.profiles import library_settings
from cortex_spec.testing import (
    ZERO,
    ClauseViolation,
    assert_strict_equal,
    clause,
    ctx,
    expect,
    expect_false,
    expect_is,
    expect_op,
    expect_raises,
    expect_true,
    state_view,
)

from .examples import (
    HOME,
    ID_CALLERS,
    OUTSIDERS_OF_HOME,
    VIEW_SCOPES,
    XS_SCOPES,
    Examples,
    Kind,
    clauses_of,
    examples,
)
from .helpers import assert_scope, raises

S = Scope.parse


def classes(*names: str) -> pytest.MarkDecorator:
    return pytest.mark.cortex_classes(*names)


# ===========================================================================
# Part 1: the Scope value (library level, no store)
# ===========================================================================

# -- SCOPE-MODEL -------------------------------------------------------------


@pytest.mark.clause("SCOPE-MODEL-1")
@pytest.mark.parametrize(
    "levels",
    [
        (),
        (("workspace", "w1"),),
        (("workspace", "w1"), ("project", "p1")),
        (("workspace", "w1"), ("project", "p1"), ("environment", "prod")),
        (("🙂", "x"), ("any key at all", "y")),
        (["k", "v"], ["k2", "v2"]),
    ],
    ids=["zero", "depth1", "depth2", "depth3", "arbitrary-keys", "list-pairs"],
)
def test_scope_is_an_ordered_sequence_of_up_to_three_str_pairs(levels):
    """Zero to three levels, each a (key, value) pair of `str`, kept in order."""
    with clause("SCOPE-MODEL-1", what="scope is an ordered sequence of up to three str pairs"):
        s = Scope(*levels)
        expect("SCOPE-MODEL-1", s.depth, len(levels), 's.depth == len(levels)')
        expect("SCOPE-MODEL-1", len(levels), len(s), 'len(levels) == len(s)')
        expect("SCOPE-MODEL-1", s.levels, tuple((k, v) for k, v in levels),
               's.levels == tuple((k, v) for k, v in levels)')
        expect_true("SCOPE-MODEL-1", all(type(level) is tuple and len(level) == 2 for level in s.levels),
                    'all(type(level) is tuple and len(level) == 2 for level in s.levels)')
        expect_true("SCOPE-MODEL-1", all(type(k) is str and type(v) is str for k, v in s.levels),
                    'all(type(k) is str and type(v) is str for k, v in s.levels)')
        expect("SCOPE-MODEL-1", [s[i] for i in range(s.depth)], [tuple(level) for level in levels],
               '[s[i] for i in range(s.depth)] == [tuple(level) for level in levels]')


@pytest.mark.clause("SCOPE-MODEL-1")
def test_level_order_is_significant():
    with clause("SCOPE-MODEL-1", what="level order is significant"):
        a = Scope(("a", "1"), ("b", "2"))
        b = Scope(("b", "2"), ("a", "1"))
        expect_op("SCOPE-MODEL-1", a, '!=', b, 'a != b')
        expect("SCOPE-MODEL-1", a.levels[0], ("a", "1"), 'a.levels[0] == ("a", "1")')
        expect("SCOPE-MODEL-1", b.levels[0], ("b", "2"), 'b.levels[0] == ("b", "2")')


@pytest.mark.clause("SCOPE-MODEL-2")
def test_zero_scope():
    with clause("SCOPE-MODEL-2", what="zero scope"):
        for zero in (Scope(), Scope.parse(""), Scope(("a", "1")).parent()):
            expect_is("SCOPE-MODEL-2", zero.is_zero, True, 'zero.is_zero is True')
            expect("SCOPE-MODEL-2", zero.depth, 0, 'zero.depth == 0')
            expect("SCOPE-MODEL-2", zero.levels, (), 'zero.levels == ()')
            expect("SCOPE-MODEL-2", zero, Scope(), 'zero == Scope()')
        for depth in (1, 2, 3):
            s = Scope(*[(f"k{i}", "v") for i in range(depth)])
            expect_is("SCOPE-MODEL-2", s.is_zero, False, 's.is_zero is False')
            expect("SCOPE-MODEL-2", s.depth, depth, 's.depth == depth')


@pytest.mark.clause("SCOPE-MODEL-3")
def test_scope_is_immutable():
    with clause("SCOPE-MODEL-3", what="scope is immutable"):
        s = Scope(("ws", "w1"), ("proj", "p1"))
        with pytest.raises((AttributeError, TypeError)):
            s._levels = (("ws", "other"),)  # type: ignore[misc]
        with pytest.raises((AttributeError, TypeError)):
            s.depth = 5  # type: ignore[misc]
        with pytest.raises((AttributeError, TypeError)):
            del s._levels
        with pytest.raises((AttributeError, TypeError)):
            s.levels[0] = ("x", "y")  # type: ignore[index]
        expect("SCOPE-MODEL-3", s, Scope(("ws", "w1"), ("proj", "p1")), 's == Scope(("ws", "w1"), ("proj", "p1"))')


@pytest.mark.clause("SCOPE-MODEL-3")
def test_scope_does_not_alias_its_input():
    with clause("SCOPE-MODEL-3", what="scope does not alias its input"):
        level = ["ws", "w1"]
        s = Scope(level)  # type: ignore[arg-type]
        level[1] = "changed"
        expect("SCOPE-MODEL-3", s.levels, (("ws", "w1"),), 's.levels == (("ws", "w1"),)')


@pytest.mark.clause("SCOPE-MODEL-3")
def test_scope_is_hashable_and_equal_by_levels():
    with clause("SCOPE-MODEL-3", what="scope is hashable and equal by levels"):
        a = Scope(("ws", "w1"), ("proj", "p1"))
        b = Scope.parse("ws=w1/proj=p1")
        expect("SCOPE-MODEL-3", a, b, 'a == b')
        expect("SCOPE-MODEL-3", hash(a), hash(b), 'hash(a) == hash(b)')
        expect("SCOPE-MODEL-3", len({a, b, Scope(("ws", "w1"))}), 2, 'len({a, b, Scope(("ws", "w1"))}) == 2')
        expect("SCOPE-MODEL-3", {a: 1}[b], 1, '{a: 1}[b] == 1')
        expect_op("SCOPE-MODEL-3", a, '!=', Scope(("ws", "w1")),
                  'a != Scope(("ws", "w1"))')  # different number of levels
        expect_op("SCOPE-MODEL-3", a, '!=', Scope(("ws", "w1"), ("proj", "p2")),
                  'a != Scope(("ws", "w1"), ("proj", "p2"))')  # different value
        expect_op("SCOPE-MODEL-3", a, '!=', Scope(("ws", "w1"), ("project", "p1")),
                  'a != Scope(("ws", "w1"), ("project", "p1"))')  # different key
        expect_op("SCOPE-MODEL-3", Scope(("ws", "w1")), '!=', Scope(("ws", "w1"), ("proj", "p1")),
                  'Scope(("ws", "w1")) != Scope(("ws", "w1"), ("proj", "p1"))')


# -- strategies -----------------------------------------------------------------

_TRICKY = [
    "w1", "W1", "w1 ", " w1", "w10", "w1x", "é", "e\u0301", "ß", "SS", "项目", "😀",
    "a b", "%", "_", "\\", "'", '"', "\t", "null",
]
_key_text = st.text(st.characters(codec="utf-8", exclude_characters="/=\x00"), min_size=1, max_size=10)
_value_text = st.text(st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=10)
KEYS = st.one_of(st.sampled_from(_TRICKY), _key_text, st.just("k" * 255))
VALUES = st.one_of(
    st.sampled_from(_TRICKY + ["a=b", "=", "==x", "k=v=w", "=w1"]),
    _value_text,
    st.just("v" * 254 + "="),
)
SCOPES = st.lists(st.tuples(KEYS, VALUES), max_size=3).map(lambda ls: Scope(*ls))
NONZERO_SCOPES = st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=3).map(lambda ls: Scope(*ls))
# A small alphabet, so that equal, nested and colliding scopes are drawn often.
_SMALL_KEYS = st.sampled_from(["a", "b", "A", "a "])
_SMALL_VALUES = st.sampled_from(["1", "2", "1=2", "=", "=2", "1="])
SMALL_SCOPES = st.lists(st.tuples(_SMALL_KEYS, _SMALL_VALUES), max_size=3).map(lambda ls: Scope(*ls))

#: Part 1's properties are of the library's Scope value and call no store: the
#: profile's budget of library-level properties (``Profile.library_examples``:
#: 50 examples under quick, 500 under full), no example database.
PROPERTY = library_settings()


@pytest.mark.clause("SCOPE-MODEL-3")
@PROPERTY
@given(SMALL_SCOPES, SMALL_SCOPES)
def test_equality_and_hash_follow_the_levels(a, b):
    with clause("SCOPE-MODEL-3", what="equality and hash follow the levels"):
        same = len(a.levels) == len(b.levels) and all(
            ka == kb and va == vb for (ka, va), (kb, vb) in zip(a.levels, b.levels)
        )
        expect_is("SCOPE-MODEL-3", a == b, same, '(a == b) is same')
        if same:
            expect("SCOPE-MODEL-3", hash(a), hash(b), 'hash(a) == hash(b)')


# -- SCOPE-MODEL-4 -----------------------------------------------------------------


@pytest.mark.clause("SCOPE-MODEL-4")
@pytest.mark.parametrize(
    "x, y",
    [
        ("ws=w1", "ws=W1"),
        ("ws=w1", "WS=w1"),
        ("ws=w1", "ws=w1 "),
        ("ws=w1", "ws= w1"),
        ("ws=w1", " ws=w1"),
        ("ws=a b", "ws=a  b"),
        ("ws=\u00e9", "ws=e\u0301"),  # NFC vs NFD
        ("\u00e9=x", "e\u0301=x"),
        ("ws=ß", "ws=SS"),
        ("ws=\ufb01", "ws=fi"),  # NFKC would fold the ligature
    ],
)
def test_keys_and_values_are_never_normalised(x, y):
    with clause("SCOPE-MODEL-4", what="keys and values are never normalised"):
        a, b = S(x), S(y)
        expect_op("SCOPE-MODEL-4", a, '!=', b, 'a != b')
        expect("SCOPE-MODEL-4", a.canonical(), x, 'a.canonical() == x')
        expect("SCOPE-MODEL-4", b.canonical(), y, 'b.canonical() == y')
        expect_false("SCOPE-MODEL-4", a.covers(b), 'not a.covers(b)')
        expect_false("SCOPE-MODEL-4", b.covers(a), 'not b.covers(a)')
        expect("SCOPE-MODEL-4", Scope.parse(x), a, 'Scope.parse(x) == a')
        expect("SCOPE-MODEL-4", Scope.parse(y), b, 'Scope.parse(y) == b')


@pytest.mark.clause("SCOPE-MODEL-5")
def test_get_returns_the_earliest_level_with_the_key():
    with clause("SCOPE-MODEL-5", what="get returns the earliest level with the key"):
        s = Scope(("k", "1"), ("other", "x"), ("k", "3"))
        expect("SCOPE-MODEL-5", s.get("k"), "1", 's.get("k") == "1"')
        expect("SCOPE-MODEL-5", s.get("other"), "x", 's.get("other") == "x"')
        expect_is("SCOPE-MODEL-5", s.get("missing"), None, 's.get("missing") is None')
        expect_is("SCOPE-MODEL-5", s.get("K"), None, 's.get("K") is None')  # exact comparison of keys
        expect_is("SCOPE-MODEL-5", Scope().get("k"), None, 'Scope().get("k") is None')


@pytest.mark.clause("SCOPE-MODEL-5")
@PROPERTY
@given(SCOPES, KEYS)
def test_get_matches_first_level_property(s, key):
    with clause("SCOPE-MODEL-5", what="get matches first level property"):
        expected = next((v for k, v in s.levels if k == key), None)
        expect("SCOPE-MODEL-5", s.get(key), expected, 's.get(key) == expected')
        for k, v in s.levels:
            expect("SCOPE-MODEL-5", s.get(k), next(v2 for k2, v2 in s.levels if k2 == k),
                   's.get(k) == next(v2 for k2, v2 in s.levels if k2 == k)')


# -- SCOPE-VAL ------------------------------------------------------------------------

_OK = ("ok", "1")


def _assert_refused(*levels: object) -> None:
    """Refused alone and at every position among valid levels."""
    with pytest.raises(InvalidArgument):
        Scope(*levels)  # type: ignore[arg-type]
    if len(levels) == 1:
        with pytest.raises(InvalidArgument):
            Scope(_OK, levels[0])  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            Scope(_OK, ("ok2", "2"), levels[0])  # type: ignore[arg-type]


def _assert_parse_refused(text: str) -> None:
    with pytest.raises(InvalidArgument):
        Scope.parse(text)


@pytest.mark.clause("SCOPE-VAL-1")
def test_more_than_three_levels_refused():
    with clause("SCOPE-VAL-1", what="more than three levels refused"):
        _assert_refused(("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"))
        _assert_refused(*[(f"k{i}", "v") for i in range(10)])
        _assert_parse_refused("a=1/b=2/c=3/d=4")
        three = Scope(("a", "1"), ("b", "2"), ("c", "3"))
        expect("SCOPE-VAL-1", three.depth, 3, 'three.depth == 3')
        expect("SCOPE-VAL-1", Scope.parse("a=1/b=2/c=3"), three, 'Scope.parse("a=1/b=2/c=3") == three')
        with pytest.raises(InvalidArgument):
            three.child("d", "4")


@pytest.mark.clause("SCOPE-VAL-2")
@pytest.mark.parametrize("level", [("", "v"), ("k", ""), ("", "")], ids=["empty-key", "empty-value", "both"])
def test_empty_key_or_value_refused(level):
    _assert_refused(level)
    _assert_parse_refused(f"{level[0]}={level[1]}")
    _assert_parse_refused(f"ok=1/{level[0]}={level[1]}")


@pytest.mark.clause("SCOPE-VAL-3")
@pytest.mark.parametrize(
    "level",
    [("a/b", "v"), ("/k", "v"), ("k/", "v"), ("/", "v"), ("k", "a/b"), ("k", "/v"), ("k", "v/"), ("k", "/")],
)
def test_slash_in_key_or_value_refused(level):
    _assert_refused(level)


@pytest.mark.clause("SCOPE-VAL-4")
@pytest.mark.parametrize("key", ["a=b", "=k", "k=", "="])
def test_equals_in_key_refused(key):
    _assert_refused((key, "v"))


@pytest.mark.clause("SCOPE-VAL-4")
@pytest.mark.parametrize("value", ["a=b", "=v", "v=", "=", "a==b"])
def test_equals_in_value_allowed(value):
    with clause("SCOPE-VAL-4", what="equals in value allowed"):
        s = Scope(("k", value))
        expect("SCOPE-VAL-4", s.levels, (("k", value),), 's.levels == (("k", value),)')
        expect("SCOPE-VAL-4", Scope.parse(f"k={value}"), s, 'Scope.parse(f"k={value}") == s')


@pytest.mark.clause("SCOPE-VAL-5")
@pytest.mark.parametrize(
    "bad",
    [1, None, b"k", 1.5, ["k"], "k\x00", "\x00", "\ud800", "a\udfffb", "k" * 256, "😀" * 256],
    ids=["int", "None", "bytes", "float", "list", "nul-inside", "nul", "lone-high-surrogate",
         "lone-low-surrogate", "256-ascii", "256-astral"],
)
@pytest.mark.parametrize("where", ["key", "value"])
def test_bad_key_or_value_refused(bad, where):
    _assert_refused((bad, "v") if where == "key" else ("k", bad))
    if isinstance(bad, str):
        _assert_parse_refused(f"{bad}=v" if where == "key" else f"k={bad}")


@pytest.mark.clause("SCOPE-VAL-5")
@pytest.mark.parametrize("text", ["k" * 255, "😀" * 255, "é" * 255], ids=["ascii", "astral", "latin"])
def test_255_code_points_accepted(text):
    with clause("SCOPE-VAL-5", what="255 code points accepted"):
        s = Scope((text, text))
        expect("SCOPE-VAL-5", s.levels, ((text, text),), 's.levels == ((text, text),)')
        expect("SCOPE-VAL-5", Scope.parse(s.canonical()), s, 'Scope.parse(s.canonical()) == s')


@pytest.mark.clause("SCOPE-VAL-6")
@pytest.mark.parametrize(
    "level",
    [("k",), ("k", "v", "x"), (), "kv", "k", None, 5, {"k": "v"}, ["k"], ["k", "v", "x"]],
    ids=["one", "three", "empty", "two-char-str", "str", "None", "int", "dict", "list1", "list3"],
)
def test_level_not_a_pair_refused(level):
    _assert_refused(level)


@pytest.mark.clause("SCOPE-VAL-1", "SCOPE-VAL-2", "SCOPE-VAL-5")
def test_invalid_scope_never_replaced_by_another():
    """Every refusal is an exception: neither constructor nor parse hands back a
    different (for example shorter or zero) scope instead."""
    for text in ["a=1/b=2/c=3/d=4", "a=", "=1", "a=\x00", "a=" + "v" * 256]:
        try:
            got = Scope.parse(text)
        except InvalidArgument:
            continue
        pytest.fail(f"Scope.parse({text!r}) returned {got!r} instead of raising")


# -- SCOPE-CANON ----------------------------------------------------------------------


@pytest.mark.clause("SCOPE-CANON-1")
@pytest.mark.parametrize(
    "levels, text",
    [
        ((), ""),
        ((("ws", "w1"),), "ws=w1"),
        ((("ws", "w1"), ("proj", "p1")), "ws=w1/proj=p1"),
        ((("a", "1"), ("b", "x=y"), ("c", " sp ")), "a=1/b=x=y/c= sp "),
        ((("é", "😀"),), "é=😀"),
    ],
)
def test_canonical_form(levels, text):
    with clause("SCOPE-CANON-1", what="canonical form"):
        expect("SCOPE-CANON-1", Scope(*levels).canonical(), text, 'Scope(*levels).canonical() == text')


@pytest.mark.clause("SCOPE-CANON-1")
@PROPERTY
@given(SCOPES)
def test_canonical_form_property(s):
    with clause("SCOPE-CANON-1", what="canonical form property"):
        expect("SCOPE-CANON-1", s.canonical(), "/".join(f"{k}={v}" for k, v in s.levels),
               's.canonical() == "/".join(f"{k}={v}" for k, v in s.levels)')


@pytest.mark.clause("SCOPE-CANON-2")
@pytest.mark.parametrize(
    "text, levels",
    [
        ("", ()),
        ("a=1", (("a", "1"),)),
        ("a=1/b=2", (("a", "1"), ("b", "2"))),
        ("a=1=2", (("a", "1=2"),)),
        ("k==", (("k", "="),)),
        ("a=1/b==2/c=3=", (("a", "1"), ("b", "=2"), ("c", "3="))),
        (" a = 1 ", ((" a ", " 1 "),)),
    ],
)
def test_parse(text, levels):
    with clause("SCOPE-CANON-2", what="parse"):
        expect("SCOPE-CANON-2", Scope.parse(text).levels, levels, 'Scope.parse(text).levels == levels')


@pytest.mark.clause("SCOPE-CANON-2")
@pytest.mark.parametrize(
    "text",
    ["a", "a=1/b", "/a=1", "a=1/", "a=1//b=2", "/", "//", "=1", "a=", "a=1/=2",
     "a=1/b=2/c=3/d=4", "a=\x00", "a=\ud800", "a=" + "x" * 256],
)
def test_parse_refuses(text):
    _assert_parse_refused(text)


@pytest.mark.clause("SCOPE-CANON-3")
@PROPERTY
@given(SCOPES)
def test_parse_inverts_canonical(s):
    with clause("SCOPE-CANON-3", what="parse inverts canonical"):
        back = Scope.parse(s.canonical())
        expect("SCOPE-CANON-3", back, s, 'back == s')
        expect("SCOPE-CANON-3", back.levels, s.levels, 'back.levels == s.levels')


@pytest.mark.clause("SCOPE-CANON-4")
@PROPERTY
@given(st.one_of(st.tuples(SMALL_SCOPES, SMALL_SCOPES), st.tuples(SCOPES, SCOPES)))
def test_canonical_form_is_injective(pair):
    with clause("SCOPE-CANON-4", what="canonical form is injective"):
        a, b = pair
        expect_is("SCOPE-CANON-4", a.canonical() == b.canonical(), a == b,
                  '(a.canonical() == b.canonical()) is (a == b)')


@pytest.mark.clause("SCOPE-CANON-4", "SCOPE-VAL-3", "SCOPE-VAL-4")
def test_upstream_canonical_clash_cannot_be_built():
    """Deviation 1: one level `ws=x/project=y` would clash with two levels."""
    with clause("SCOPE-CANON-4", "SCOPE-VAL-3", "SCOPE-VAL-4", what="upstream canonical clash cannot be built"):
        two = Scope(("ws", "x"), ("project", "y"))
        with pytest.raises(InvalidArgument):
            Scope(("ws", "x/project=y"))
        with pytest.raises(InvalidArgument):
            Scope(("ws=x", "y"))
        expect(("SCOPE-CANON-4", "SCOPE-VAL-3", "SCOPE-VAL-4"), Scope.parse(two.canonical()), two,
               'Scope.parse(two.canonical()) == two')


# -- SCOPE-COVERS -----------------------------------------------------------------------


@pytest.mark.clause("SCOPE-COVERS-1")
@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("ws=w1", "ws=w1", True),
        ("ws=w1", "ws=w1/proj=p1", True),
        ("ws=w1", "ws=w1/proj=p1/env=e", True),
        ("ws=w1/proj=p1", "ws=w1", False),
        ("ws=w1", "ws=w10", False),
        ("ws=w1", "ws=w1x", False),
        ("ws=w10", "ws=w1", False),
        ("ws=w1", "org=w1", False),
        ("org=w1", "ws=w1/proj=p1", False),
        ("a=1/b=2", "b=2/a=1", False),
        ("ws=w1/proj=p1", "ws=w1/proj=p10", False),
        ("ws=w1/proj=p1", "ws=w1/proj=p2/env=e", False),
        ("k=1", "k=1/k=1", True),
        ("ws=w1", "ws=W1", False),
    ],
)
def test_covers_examples(a, b, expected):
    with clause("SCOPE-COVERS-1", what="covers examples"):
        x, y = S(a), S(b)
        x_before, y_before = x.levels, y.levels
        expect_is("SCOPE-COVERS-1", x.covers(y), expected, 'x.covers(y) is expected')
        expect("SCOPE-COVERS-1", x.levels, x_before, 'x.levels == x_before')
        expect("SCOPE-COVERS-1", y.levels, y_before, 'y.levels == y_before')


@pytest.mark.clause("SCOPE-COVERS-1")
@PROPERTY
@given(st.one_of(st.tuples(SMALL_SCOPES, SMALL_SCOPES), st.tuples(SCOPES, SCOPES)))
def test_covers_definition_property(pair):
    with clause("SCOPE-COVERS-1", what="covers definition property"):
        a, b = pair
        expected = a.depth <= b.depth and all(
            a.levels[i][0] == b.levels[i][0] and a.levels[i][1] == b.levels[i][1] for i in range(a.depth)
        )
        expect_is("SCOPE-COVERS-1", a.covers(b), expected, 'a.covers(b) is expected')
        expect_is("SCOPE-COVERS-1", a.covers(b), expected,
                  'a.covers(b) is expected')  # no side effect: the same answer again
        expect("SCOPE-COVERS-1", a, Scope(*a.levels), 'a == Scope(*a.levels)')
        expect("SCOPE-COVERS-1", b, Scope(*b.levels), 'b == Scope(*b.levels)')


@pytest.mark.clause("SCOPE-COVERS-2")
@PROPERTY
@given(SCOPES)
def test_covers_is_reflexive_and_zero_covers_all(s):
    with clause("SCOPE-COVERS-2", what="covers is reflexive and zero covers all"):
        expect_true("SCOPE-COVERS-2", s.covers(s), 's.covers(s)')
        expect_true("SCOPE-COVERS-2", Scope().covers(s), 'Scope().covers(s)')
        if not s.is_zero:
            expect_false("SCOPE-COVERS-2", s.covers(Scope()), 'not s.covers(Scope())')


@st.composite
def _chains(draw):
    a = draw(SMALL_SCOPES)
    levels = list(a.levels)
    b_extra = draw(st.lists(st.tuples(_SMALL_KEYS, _SMALL_VALUES), max_size=3 - len(levels)))
    b = Scope(*levels, *b_extra)
    c_extra = draw(st.lists(st.tuples(_SMALL_KEYS, _SMALL_VALUES), max_size=3 - b.depth))
    return a, b, Scope(*b.levels, *c_extra)


@pytest.mark.clause("SCOPE-COVERS-2")
@PROPERTY
@given(st.one_of(_chains(), st.tuples(SMALL_SCOPES, SMALL_SCOPES, SMALL_SCOPES)))
def test_covers_is_transitive(triple):
    with clause("SCOPE-COVERS-2", what="covers is transitive"):
        a, b, c = triple
        if a.covers(b) and b.covers(c):
            expect_true("SCOPE-COVERS-2", a.covers(c), 'a.covers(c)')


@pytest.mark.clause("SCOPE-COVERS-2")
@PROPERTY
@given(st.one_of(st.tuples(SMALL_SCOPES, SMALL_SCOPES), _chains().map(lambda t: (t[0], t[1]))))
def test_covers_is_antisymmetric(pair):
    with clause("SCOPE-COVERS-2", what="covers is antisymmetric"):
        a, b = pair
        if a.covers(b) and b.covers(a):
            expect("SCOPE-COVERS-2", a, b, 'a == b')



# ===========================================================================
# Part 2: what every class gives the store-level clauses
# ===========================================================================

#: Every class's examples (its module's EXAMPLES and those of its stored kinds).
ALL: dict[str, Examples] = examples()


def _world(request: pytest.FixtureRequest, store: Any, cls: str) -> tuple[Examples, SimpleNamespace]:
    """The class's examples and its rows seeded at HOME."""
    ex = ALL[cls]
    return ex, ex.seed(store, request.getfixturevalue)


def _method_params(scoped: bool | None = None) -> list:
    out = []
    for cls in CLASSES.values():
        for m in cls.methods:
            if scoped is None or m.scoped == scoped:
                out.append(pytest.param(cls.name, m.name, marks=classes(cls.name), id=f"{cls.name}.{m.name}"))
    return out


def _class_params(has: Any) -> list:
    """One parameter per class whose examples hold what ``has`` picks."""
    return [pytest.param(name, marks=classes(name), id=name) for name, ex in ALL.items() if has(ex)]


NON_CONTEXTS = [
    None,
    S(HOME),
    Scope(),
    HOME,
    "",
    {"scope": S(HOME)},
    SimpleNamespace(scope=S(HOME), partition="", principal=None),
]


@pytest.mark.clause("SCOPE-ZERO-1", "SCOPE-XS-1")
def test_method_tables_cover_every_method_of_every_class():
    """The scope clauses below are checked against every method of
    `cortex_spec.classes.CLASSES`; a method added there without a good and a
    bad call in its class's examples (and, for a method that ignores the
    caller's scope, an across-scope example) makes this test fail instead of
    going unchecked.  Every example names a method of its own class."""
    with clause("SCOPE-ZERO-1", "SCOPE-XS-1", what="method tables cover every method of every class"):
        for name, cls in CLASSES.items():
            ex = ALL[name]
            names = {m.name for m in cls.methods}
            expect_op(("SCOPE-ZERO-1", "SCOPE-XS-1"), names, '<=', set(ex.good),
                      'names <= set(ex.good)' + ': ' + str((name, sorted(names - set(ex.good)))))
            expect_op(("SCOPE-ZERO-1", "SCOPE-XS-1"), names, '<=', set(ex.bad),
                      'names <= set(ex.bad)' + ': ' + str((name, sorted(names - set(ex.bad)))))
            if cls.scoped:
                unscoped = {m.name for m in cls.methods if not m.scoped}
                expect_op(("SCOPE-ZERO-1", "SCOPE-XS-1"), unscoped, '<=', set(ex.xs),
                          'unscoped <= set(ex.xs)' + ': ' + str((name, sorted(unscoped - set(ex.xs)))))
            for op in ex.byid:
                expect(("SCOPE-ZERO-1", "SCOPE-XS-1"), op.cls, name, 'op.cls == name' + ': ' + str((name, op.name)))
                expect_op(("SCOPE-ZERO-1", "SCOPE-XS-1"), op.name, 'in', names,
                          'op.name in names' + ': ' + str((name, op.name)))
            for method, xs in ex.xs.items():
                expect(("SCOPE-ZERO-1", "SCOPE-XS-1"), xs.cls, name, 'xs.cls == name' + ': ' + str((name, method)))
                expect(("SCOPE-ZERO-1", "SCOPE-XS-1"), xs.name, method,
                       'xs.name == method' + ': ' + str((name, method)))
                expect_op(("SCOPE-ZERO-1", "SCOPE-XS-1"), method, 'in', names,
                          'method in names' + ': ' + str((name, method)))
            for kind in ex.kinds:
                expect(("SCOPE-ZERO-1", "SCOPE-XS-1"), kind.cls, name,
                       'kind.cls == name' + ': ' + str((name, kind.name)))
            expect_op(("SCOPE-ZERO-1", "SCOPE-XS-1"), ex.exact, '<=', names, 'ex.exact <= names' + ': ' + str(name))
            expect_op(("SCOPE-ZERO-1", "SCOPE-XS-1"), ex.scope_args, '<=', names,
                      'ex.scope_args <= names' + ': ' + str(name))
            expect_op(("SCOPE-ZERO-1", "SCOPE-XS-1"), ex.byid_methods, '<=', names,
                      'ex.byid_methods <= names' + ': ' + str(name))


# ===========================================================================
# Part 3: the zero scope as caller (SCOPE-ZERO-*, SCOPE-XS-6)
# ===========================================================================


@pytest.mark.clause("SCOPE-ZERO-1", "SCOPE-ZERO-2", "SCOPE-ZERO-3", "SCOPE-XS-6", "SCOPE-MODEL-6")
@pytest.mark.parametrize("cls, method", _method_params(scoped=True))
def test_zero_scope_caller_gets_no_scope(store, request, cls, method):
    """A zero-scope caller is refused with NoScope by every scoped method: with
    valid arguments addressing existing rows (never read as "every scope"), with
    garbage arguments (NoScope comes first), whatever its partition and
    principal; nothing is written."""
    with clause("SCOPE-ZERO-1", "SCOPE-ZERO-2", "SCOPE-ZERO-3", "SCOPE-XS-6", "SCOPE-MODEL-6", what="zero scope caller gets no scope"):
        ex, w = _world(request, store, cls)
        view = ex.viewer()
        before = view(store, w, VIEW_SCOPES)
        zeros = [ZERO, Context(Scope(), partition="p1", principal="alice")]
        for z in zeros:
            raises(lambda: ex.good[method](store, z, w), NoScope)
            raises(lambda: ex.bad[method](store, z, w), NoScope)
        expect(("SCOPE-ZERO-1", "SCOPE-ZERO-2", "SCOPE-ZERO-3", "SCOPE-XS-6", "SCOPE-MODEL-6"),
               view(store, w, VIEW_SCOPES), before, 'view(store, w, VIEW_SCOPES) == before')
        # the garbage really is garbage: under a valid context it is InvalidArgument
        raises(lambda: ex.bad[method](store, ctx(HOME), w), InvalidArgument)
        expect(("SCOPE-ZERO-1", "SCOPE-ZERO-2", "SCOPE-ZERO-3", "SCOPE-XS-6", "SCOPE-MODEL-6"),
               view(store, w, VIEW_SCOPES), before, 'view(store, w, VIEW_SCOPES) == before')


@pytest.mark.clause("SCOPE-ZERO-2")
@pytest.mark.parametrize("cls, method", _method_params(scoped=True))
def test_zero_scope_refused_even_when_storage_is_unavailable(store, request, cls, method, cortex_harness,
                                                             cortex_open, clock):
    """After `close()` the storage is out of reach, yet a zero-scope call still
    raises NoScope (not StoreClosed/StoreError): the check precedes any storage
    access.  When the harness can reopen the storage, it also holds nothing new
    (storage read afresh before and after the calls, so that what a restart
    keeps is the durability clauses' business, not this one's)."""
    with clause("SCOPE-ZERO-2", what="zero scope refused even when storage is unavailable"):
        ex, w = _world(request, store, cls)
        view = ex.viewer()
        store.close()
        before = view(cortex_open(clock), w, VIEW_SCOPES) if cortex_harness.reopenable else None
        raises(lambda: ex.good[method](store, ZERO, w), NoScope)
        raises(lambda: ex.bad[method](store, ZERO, w), NoScope)
        if before is not None:
            expect("SCOPE-ZERO-2", view(cortex_open(clock), w, VIEW_SCOPES), before,
                   'view(cortex_open(clock), w, VIEW_SCOPES) == before')


@pytest.mark.clause("SCOPE-ZERO-3")
@pytest.mark.parametrize("cls, method", _method_params())
def test_non_context_ctx_is_invalid_argument(store, request, cls, method):
    """`ctx` that is not a `Context` (None, a Scope, the zero Scope, a scope
    string, a look-alike object) is InvalidArgument for every method, scoped and
    across-scopes alike, before anything else; nothing is written."""
    with clause("SCOPE-ZERO-3", what="non context ctx is invalid argument"):
        ex, w = _world(request, store, cls)
        view = ex.viewer()
        before = view(store, w, VIEW_SCOPES)
        for bad in NON_CONTEXTS:
            raises(lambda: ex.good[method](store, bad, w), InvalidArgument)
            raises(lambda: ex.bad[method](store, bad, w), InvalidArgument)
        expect("SCOPE-ZERO-3", view(store, w, VIEW_SCOPES), before, 'view(store, w, VIEW_SCOPES) == before')


# -- precedence after the context ------------------------------------------------


@pytest.mark.clause("SCOPE-ZERO-3")
@pytest.mark.parametrize("cls", _class_params(lambda ex: ex.precedence is not None))
def test_invalid_arguments_precede_not_found(store, request, cls):
    """Calls with a bad argument that address a row the caller cannot reach
    or that does not exist (``Examples.precedence``): InvalidArgument wins
    over the NotFound; NoScope wins over both; nothing is written."""
    with clause("SCOPE-ZERO-3", what="invalid arguments precede not found"):
        ex, w = _world(request, store, cls)
        view = ex.viewer()
        before = view(store, w, VIEW_SCOPES)
        for call in ex.precedence(store, w):
            for caller in ("ws=w2", "ws=w1/proj=p1/env=e1", HOME):
                raises(lambda: call(ctx(caller)), InvalidArgument)
            raises(lambda: call(ZERO), NoScope)
        expect("SCOPE-ZERO-3", view(store, w, VIEW_SCOPES), before, 'view(store, w, VIEW_SCOPES) == before')


STATE_ERRORS = [case for ex in ALL.values() for case in ex.state_errors]


@pytest.mark.clause("SCOPE-ZERO-3", "SCOPE-BYID-2", *clauses_of(STATE_ERRORS))
@pytest.mark.parametrize("case", [pytest.param(e, marks=classes(e.cls), id=e.name) for e in STATE_ERRORS])
def test_not_found_precedes_state_errors(store, clock, case):
    """A row in a state that would give a state error, but out of the caller's
    reach, gives the entity's NotFound; only a caller who can see it gets the
    state error."""
    with clause("SCOPE-ZERO-3", "SCOPE-BYID-2", what="not found precedes state errors"):
        call, view = case.setup(store)
        before = view(VIEW_SCOPES)
        for outsider in OUTSIDERS_OF_HOME:
            err = raises(lambda: call(ctx(outsider)), case.not_found)
            expect_false(("SCOPE-ZERO-3", "SCOPE-BYID-2"), isinstance(err, case.state_error),
                         'not isinstance(err, case.state_error)')
        raises(lambda: call(ZERO), NoScope)
        for insider in (HOME, "ws=w1"):
            raises(lambda: call(ctx(insider)), case.state_error)
        expect(("SCOPE-ZERO-3", "SCOPE-BYID-2"), view(VIEW_SCOPES), before, 'view(VIEW_SCOPES) == before')


# ===========================================================================
# Part 4: the across-scopes methods (SCOPE-XS-*)
# ===========================================================================

XS = {name: xs for ex in ALL.values() for name, xs in ex.xs.items()}


def _xs_params() -> list:
    out = []
    for cls in CLASSES.values():
        if not cls.scoped:
            continue  # an unscoped class reaches no scoped rows at all
        for m in cls.methods:
            if not m.scoped:
                out.append(pytest.param(m.name, marks=classes(cls.name), id=m.name))
    return out


def _xs_1() -> tuple[str, set[str], dict[str, set[str]]]:
    """SCOPE-XS-1 as the spec states it: its text, the methods it names, and
    the methods it names with their class, ``name`` (class)."""
    text = catalogue()["SCOPE-XS-1"].text
    named = set(re.findall(r"`(\w+)`", text))
    owned: dict[str, set[str]] = {}
    for method, owner in re.findall(r"`(\w+)`\s*\((\w+)\)", text):
        owned.setdefault(owner, set()).add(method)
    return text, named, owned


@pytest.mark.clause("SCOPE-XS-1")
def test_across_scope_methods_are_exactly_those_named():
    """Of the classes this project defines, only the methods SCOPE-XS-1 names
    are marked as ignoring the caller's scope; a class the clause gives
    methods to by name has exactly those, a class it does not mention has
    none, and every other method is scoped."""
    with clause("SCOPE-XS-1", what="across scope methods are exactly those named"):
        text, named, owned = _xs_1()
        expect_true("SCOPE-XS-1", named, 'named' + ': ' + str("SCOPE-XS-1 names no method: the spec's wording changed"))
        expect_true("SCOPE-XS-1", owned, 'owned' + ': ' + str("SCOPE-XS-1 names no method: the spec's wording changed"))
        unscoped = {cls.name: {m.name for m in cls.methods if not m.scoped}
                    for cls in CLASSES.values() if cls.scoped}
        for name, methods in unscoped.items():
            expect_op("SCOPE-XS-1", methods, '<=', named, 'methods <= named' + ': ' + str((name, methods - named)))
            if name in owned:
                expect("SCOPE-XS-1", methods, owned[name], 'methods == owned[name]' + ': ' + str(name))
            elif not re.search(rf"\b{re.escape(name)}\b", text):
                expect("SCOPE-XS-1", methods, set(), 'methods == set()' + ': ' + str(name))


@pytest.mark.clause("SCOPE-XS-1", "SCOPE-XS-2", "SCOPE-XS-3", "SCOPE-XS-4", "SCOPE-MODEL-6")
@pytest.mark.parametrize("method", _xs_params())
def test_across_scope_result_ignores_caller_scope(store, method):
    """The across-scopes method returns the selected rows of every scope, each
    with its own stored scope, and the very same result whether the caller's
    scope is zero, a row's scope, an ancestor, a deep scope or unrelated to
    every row; the scoped twin from one scope shows only that scope's rows."""
    with clause("SCOPE-XS-1", "SCOPE-XS-2", "SCOPE-XS-3", "SCOPE-XS-4", "SCOPE-MODEL-6", what="across scope result ignores caller scope"):
        spec = XS[method]
        expected = spec.seed(store)
        reference = spec.call(store, ZERO)
        expect(("SCOPE-XS-1", "SCOPE-XS-2", "SCOPE-XS-3", "SCOPE-XS-4", "SCOPE-MODEL-6"),
               sorted(r.id for r in reference), sorted(expected),
               'sorted(r.id for r in reference) == sorted(expected)')
        for row in reference:
            assert_scope(row.scope, expected[row.id], f"scope of {row.id}")
        partition = "" if spec.partitioned else "p9"  # A2A-PART-3: partitioned lists keep the rows' partition
        callers = [Context(Scope(), partition=partition, principal="sweeper")] + [
            ctx(sc) for sc in XS_SCOPES + ["unrelated=zz", "ws=w1/proj=p1/env=deep", "ws=w2"]
        ]
        for c in callers:
            with clause("SCOPE-XS-3", what=f"{method} from {c.scope!r} against the zero scope's result"):
                assert_strict_equal(spec.call(store, c), reference, f"{method} from {c.scope!r}")
        # the scoped twin of the same list really is narrower from an unrelated scope
        expect(("SCOPE-XS-1", "SCOPE-XS-2", "SCOPE-XS-3", "SCOPE-XS-4", "SCOPE-MODEL-6"),
               spec.scoped_twin(store, ctx("unrelated=zz")), [], 'spec.scoped_twin(store, ctx("unrelated=zz")) == []')


@pytest.mark.clause("SCOPE-XS-4", "SCOPE-XS-6", "SCOPE-ZERO-1")
@pytest.mark.parametrize("method", _xs_params())
def test_rows_from_across_scope_list_are_acted_on_under_their_own_scope(store, method):
    """A sweeper acts on each returned row through scoped methods with
    `Context(scope=row.scope)`; the zero scope is no way to act on them."""
    with clause("SCOPE-XS-4", "SCOPE-XS-6", "SCOPE-ZERO-1", what="rows from across scope list are acted on under their own scope"):
        spec = XS[method]
        spec.seed(store)
        rows = spec.call(store, ZERO)
        expect_true(("SCOPE-XS-4", "SCOPE-XS-6", "SCOPE-ZERO-1"), rows, 'rows')
        for row in rows:
            with pytest.raises(NoScope):
                spec.act(store, attrs.evolve(row, scope=Scope()))
            spec.act(store, row)
        expect(("SCOPE-XS-4", "SCOPE-XS-6", "SCOPE-ZERO-1"), spec.call(store, ZERO), [], 'spec.call(store, ZERO) == []')


@pytest.mark.clause("SCOPE-XS-5", "SCOPE-XS-2")
@pytest.mark.parametrize("method", _xs_params())
def test_across_scope_methods_still_validate_arguments(store, method):
    with clause("SCOPE-XS-5", "SCOPE-XS-2", what="across scope methods still validate arguments"):
        spec = XS[method]
        spec.seed(store)
        before = state_view(store, XS_SCOPES)
        for bad in spec.bad:
            for c in (ZERO, ctx("ws=w1")):
                raises(lambda: bad(store, c), InvalidArgument)
        expect(("SCOPE-XS-5", "SCOPE-XS-2"), state_view(store, XS_SCOPES), before,
               'state_view(store, XS_SCOPES) == before')


# ===========================================================================
# Part 5: entity kinds, prefix visibility and exact mode (SCOPE-VIS, SCOPE-EXACT)
# ===========================================================================

KINDS = [kind for ex in ALL.values() for kind in ex.kinds]
KIND_PARAMS = [pytest.param(kind, marks=classes(kind.cls), id=kind.name) for kind in KINDS]

#: Scopes at which the visibility matrix stores one row each.
ROW_SCOPES = [
    "ws=w1", "ws=w1/proj=p1", "ws=w1/proj=p1/env=e1", "ws=w1/proj=p2", "ws=w1/proj=p10",
    "ws=w10", "ws=w10/proj=p1", "ws=w1x", "ws=w2", "org=w1", "org=w1/proj=p1",
    "WS=w1", "ws=W1", "ws=w1 ", "a=1/b=2", "b=2/a=1", "ws=w%/proj=p1", "ws=w_/proj=p1",
    "ws=\u00e9", "ws=e\u0301",
]
#: Callers: every row scope plus scopes that hold no row.
CALLER_SCOPES = ROW_SCOPES + ["ws=w%", "ws=w_", "ws=w1/proj=p3", "zz=top", "a=1", "b=2", "ws=w1/proj=p1/env=e2"]

#: The pairs the spec spells out: (caller, row, seen, the clause that says so).
NAMED_PAIRS = [
    ("ws=w1", "ws=w1/proj=p1", True, "SCOPE-VIS-1"),
    ("ws=w1", "ws=w1/proj=p1/env=e1", True, "SCOPE-VIS-1"),
    ("ws=w1/proj=p1", "ws=w1/proj=p1", True, "SCOPE-VIS-1"),
    ("ws=w1/proj=p1", "ws=w1", False, "SCOPE-VIS-2"),
    ("ws=w1/proj=p1/env=e1", "ws=w1/proj=p1", False, "SCOPE-VIS-2"),
    ("ws=w1/proj=p2", "ws=w1/proj=p1", False, "SCOPE-VIS-3"),
    ("ws=w2", "ws=w1", False, "SCOPE-VIS-3"),
    ("org=w1", "ws=w1", False, "SCOPE-VIS-4"),
    ("a=1/b=2", "b=2/a=1", False, "SCOPE-VIS-4"),
    ("b=2/a=1", "a=1/b=2", False, "SCOPE-VIS-4"),
    ("ws=w1", "ws=w10", False, "SCOPE-VIS-5"),
    ("ws=w1", "ws=w1x", False, "SCOPE-VIS-5"),
    ("ws=w10", "ws=w1", False, "SCOPE-VIS-5"),
    ("ws=w1x", "ws=w1", False, "SCOPE-VIS-5"),
    ("ws=w1/proj=p1", "ws=w1/proj=p10", False, "SCOPE-VIS-5"),
    ("ws=w%", "ws=w1/proj=p1", False, "SCOPE-VIS-5"),
    ("ws=w_", "ws=w1/proj=p1", False, "SCOPE-VIS-5"),
    ("ws=w%", "ws=w%/proj=p1", True, "SCOPE-VIS-1"),
    ("ws=W1", "ws=w1", False, "SCOPE-MODEL-4"),
    ("WS=w1", "ws=w1", False, "SCOPE-MODEL-4"),
    ("ws=w1 ", "ws=w1", False, "SCOPE-MODEL-4"),
    ("ws=\u00e9", "ws=e\u0301", False, "SCOPE-MODEL-4"),
]


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().replace(" ", "")


def _shown_wrongly(caller: Scope, row: Scope) -> str:
    """The clause a list breaks by showing ``caller`` the row at ``row``,
    which ``caller`` does not cover: the nearest rule the store mistook."""
    if row.covers(caller):
        return "SCOPE-VIS-2"
    if _fold(row.canonical()).startswith(_fold(caller.canonical())):
        return "SCOPE-MODEL-4"  # equal once case, spaces or unicode forms are folded
    if row.canonical().startswith(caller.canonical()) or caller.canonical().startswith(row.canonical()):
        return "SCOPE-VIS-5"  # a string prefix, not a level prefix
    if [v for _, v in caller.levels] == [v for _, v in row.levels][:caller.depth] or \
            sorted(caller.levels) == sorted(row.levels[:caller.depth]):
        return "SCOPE-VIS-4"  # the values (or the levels) match, not level by level
    return "SCOPE-VIS-3"


def _check_listed(what: str, caller: Scope, got: list[str], expected: set[str],
                  rows: dict[str, tuple[Scope, Any]], allowed: list[str] | None = None) -> None:
    """``got`` (ids, in the order listed) holds no row twice, no row
    ``caller`` does not cover (each charged to the rule it breaks), and
    exactly ``allowed`` when given (a page: what the full list puts there),
    else every row of ``expected``."""
    twice = sorted({i for i in got if got.count(i) > 1})
    expect("SCOPE-VIS-6", twice, [], f"{what}: rows listed more than once")
    for rid in got:
        if rid not in expected:
            scope = rows[rid][0] if rid in rows else None
            raise ClauseViolation(_shown_wrongly(caller, scope) if scope is not None else "SCOPE-VIS-6", what,
                                  "only rows the caller covers", f"a row at {scope!r}")
    if allowed is None:
        missing = sorted(rows[i][0].canonical() for i in expected - set(got))
        expect("SCOPE-VIS-1", missing, [], f"{what}: rows the caller covers left out (their scopes)")
    else:
        expect("SCOPE-VIS-6", got, allowed, f"{what}: the page against the full list's rows there")


def _pages(n: int) -> list[tuple[int, int]]:
    """(start, size) of the pages the matrix reads of a list of ``n``
    visible rows: past the first row, one and two rows, exactly ``n``
    rows, beyond ``n``, and from the end."""
    return sorted({(1, 1), (1, 2), (0, max(n, 1)), (1, max(n - 1, 1)), (0, n + 1), (n - 1 if n else 0, 2), (n, 1)})


@pytest.mark.clause(
    "SCOPE-VIS-1", "SCOPE-VIS-2", "SCOPE-VIS-3", "SCOPE-VIS-4", "SCOPE-VIS-5", "SCOPE-VIS-6",
    "SCOPE-BYID-1", "SCOPE-BYID-2", "SCOPE-BYID-4", "SCOPE-MODEL-4", "SCOPE-ID-3",
)
@pytest.mark.parametrize("kind", KIND_PARAMS)
def test_visibility_matrix(store, kind):
    """One row at each of twenty tricky scopes; from each of many caller scopes
    every list and count returns exactly the rows whose scope the caller covers,
    and the by-id read finds exactly those, raising the entity's NotFound for
    every other row.  Where the kind's list pages (``Kind.page``), every page
    (from the second row and past the end, of 1, 2, exactly the rows and more) holds
    exactly the rows the full list holds there, with the look-alike rows
    present all the while.  Rows that carry a shared reference
    (``Kind.shared``) all carry the same one, so a shared reference never
    widens visibility."""
    for caller, row, seen, rule in NAMED_PAIRS:
        expect(rule, S(caller).covers(S(row)), seen, f"Scope({caller!r}).covers(Scope({row!r}))")
    sh = kind.shared()
    rows: dict[str, tuple[Scope, Any]] = {}
    for sc in ROW_SCOPES:
        obj = kind.new(sh)
        created = kind.create(store, ctx(sc), obj)
        rows[created.id] = (S(sc), obj)
    for caller in CALLER_SCOPES:
        c = ctx(caller)
        expected = {rid for rid, (r, _) in rows.items() if c.scope.covers(r)}
        full: list[str] = []
        for i, lst in enumerate(kind.lists):
            got = [row.id for row in lst(store, c, sh)]
            _check_listed(f"{kind.name} list {i} from {caller!r}", c.scope, got, expected, rows)
            full = full or got
        if kind.page is not None:
            for start, size in _pages(len(full)):
                got = [row.id for row in kind.page(store, c, sh, start, size)]
                _check_listed(f"{kind.name} page of {size} from row {start} from {caller!r}", c.scope, got,
                              expected, rows, allowed=full[start:start + size])
        for i, cnt in enumerate(kind.counts):
            expect("SCOPE-VIS-6", cnt(store, c, sh), len(expected), f"{kind.name} count {i} from {caller!r}")
        if kind.get is not None:
            missing = type(expect_raises("SCOPE-BYID-2", kind.not_found, lambda: kind.get(store, c, kind.new(sh)),
                                         f"{kind.name} by-id read of a missing row from {caller!r}"))
            for rid, (r, obj) in rows.items():
                if rid in expected:
                    with clause("SCOPE-BYID-1", what=f"{kind.name} by-id read from {caller!r} of a row at {r!r}"):
                        assert_scope(kind.get(store, c, obj).scope, r)
                else:
                    err = expect_raises(_shown_wrongly(c.scope, r), kind.not_found, lambda: kind.get(store, c, obj),
                                        f"{kind.name} by-id read from {caller!r} of a row at {r!r}")
                    expect("SCOPE-BYID-4", type(err), missing,
                           f"the error for a row at {r!r} from {caller!r} against a missing row's")
    for caller, row, seen, rule in NAMED_PAIRS:
        if row in ROW_SCOPES:
            rid = next(i for i, (r, _) in rows.items() if r == S(row))
            listed = {x.id for x in kind.lists[0](store, ctx(caller), sh)}
            expect(rule, rid in listed, seen, f"{kind.name}: the row at {row!r} listed from {caller!r}")


def _exact_params(fn: Any) -> tuple[Any, Any]:
    """Where ``fn`` offers ``exact``: its keyword parameter (or None), and the
    attrs field of a filter argument's class (or None)."""
    params = inspect.signature(fn).parameters
    hints = typing.get_type_hints(fn)
    keyword = params.get("exact")
    fields = []
    for p in params:
        for hint in _types_in(hints.get(p)):
            if isinstance(hint, type) and attrs.has(hint) and "exact" in attrs.fields_dict(hint):
                fields.append(attrs.fields_dict(hint)["exact"])
    expect_op("SCOPE-EXACT-2", len(fields), "<=", 1, f"filter arguments of {fn.__name__} with an exact field")
    return keyword, (fields[0] if fields else None)


def _types_in(hint: Any) -> list[Any]:
    return [hint] + [t for arg in typing.get_args(hint) for t in _types_in(arg)] if hint is not None else []


@pytest.mark.clause("SCOPE-EXACT-2")
def test_exact_exists_only_where_the_area_file_gives_it():
    """Only the methods a class's examples name (``Examples.exact``: those
    its area file gives ``exact``) offer it, each in one place, a keyword or a
    field of its filter, defaulting to False; no other list/count signature or
    filter offers it."""
    with clause("SCOPE-EXACT-2", what="exact exists only where the area file gives it"):
        for name, cls in CLASSES.items():
            given = ALL[name].exact
            for m in cls.methods:
                keyword, field = _exact_params(getattr(cls.protocol, m.name))
                expect_is("SCOPE-EXACT-2", keyword is not None or field is not None, m.name in given,
                          '(keyword is not None or field is not None) is (m.name in given)' + ': ' + str(f"{m.name}: exact argument"))
                expect_true("SCOPE-EXACT-2", keyword is None or field is None,
                            'keyword is None or field is None' + ': ' + str(f"{m.name}: exact both as a keyword and in its filter"))
                if keyword is not None:
                    expect_is("SCOPE-EXACT-2", keyword.default, False,
                              'keyword.default is False' + ': ' + str(f"{m.name}: exact defaults to {keyword.default!r}"))
                if field is not None:
                    expect_is("SCOPE-EXACT-2", field.default, False,
                              'field.default is False' + ': ' + str(f"{m.name}: the filter's exact defaults to {field.default!r}"))


@pytest.mark.clause("SCOPE-EXACT-3")
def test_no_by_id_method_is_marked_exact_unless_its_class_says_so():
    """SCOPE-EXACT-3 applies to by-id methods an area file marks **exact**;
    only the area files of classes whose examples name such methods
    (``exact_byid``, tested by the class's own module) mark any, and every
    other by-id method follows SCOPE-BYID-1 (checked by
    test_by_id_reaches_row_from_its_scope_and_ancestors).  This fails when an
    area file starts marking one that its class does not name, so that it
    gets a test, or when a class's by-id example of a method it names is
    dropped."""
    with clause("SCOPE-EXACT-3", what="no by id method is marked exact unless its class says so"):
        spec = resources.files("cortex_spec.spec")
        for cls in CLASSES:
            text = (spec / f"{cls}.md").read_text(encoding="utf-8")
            marked = bool(re.search(r"\*\*exact\*\*|marked\s+exact|marks?\s+\S*\s*as\s+exact", text, re.I))
            expect_is("SCOPE-EXACT-3", marked, bool(ALL[cls].exact_byid),
                      'marked is bool(ALL[cls].exact_byid)' + ': ' + str((cls, sorted(ALL[cls].exact_byid))))
        for name, ex in ALL.items():
            expect_op("SCOPE-EXACT-3", ex.byid_methods, '<=', {op.name for op in ex.byid},
                      'ex.byid_methods <= {op.name for op in ex.byid}' + ': ' + str((name, ex.byid_methods)))
            expect_false("SCOPE-EXACT-3", ex.exact_byid & {op.name for op in ex.byid},
                         'not ex.exact_byid & {op.name for op in ex.byid}' + ': ' + str((name, "an exact method with a by-id example")))
            expect_op("SCOPE-EXACT-3", ex.exact_byid, '<=', {m.name for m in CLASSES[name].methods},
                      'ex.exact_byid <= {m.name for m in CLASSES[name].methods}' + ': ' + str((name, ex.exact_byid)))


# ===========================================================================
# Part 6: access by id (SCOPE-BYID-*, SCOPE-IMM-3/4)
# ===========================================================================

BYID = [op for ex in ALL.values() for op in ex.byid]
BYID_PARAMS = [pytest.param(op, marks=classes(op.cls), id=op.name) for op in BYID]


@pytest.mark.clause(
    "SCOPE-BYID-1", "SCOPE-VIS-1", "SCOPE-EXACT-3", "SCOPE-IMM-2", "SCOPE-IMM-3", "SCOPE-IMM-4",
)
@pytest.mark.parametrize("op", BYID_PARAMS)
def test_by_id_reaches_row_from_its_scope_and_ancestors(store, op):
    """A by-id method acts on a row from the row's own scope and from each of its
    ancestors; writes from an ancestor keep the row's narrower scope (an update
    also ignores the scope carried by its argument)."""
    row_scope = "ws=w1/proj=p1/env=e1"
    for caller in (row_scope, "ws=w1/proj=p1", "ws=w1"):
        key = op.setup(store, ctx(row_scope))
        result = op.call(store, ctx(caller), key)
        if result is not None:
            assert_scope(result.scope, S(row_scope), f"{op.name} result")
        op.done(store, ctx(row_scope), key)


@pytest.mark.clause(
    "SCOPE-BYID-2", "SCOPE-BYID-4", "SCOPE-VIS-2", "SCOPE-VIS-3", "SCOPE-VIS-4", "SCOPE-VIS-5",
    "SCOPE-MODEL-4", "SCOPE-IMM-4",
)
@pytest.mark.parametrize("op", BYID_PARAMS)
def test_by_id_outsiders_get_not_found(store, op):
    """From a descendant, a sibling, an unrelated scope and every look-alike of
    the row's scope, the by-id method raises the entity's NotFound, the same
    class as for a missing row, and writes nothing; afterwards the row's own
    scope can still act on it."""
    with clause("SCOPE-BYID-2", "SCOPE-BYID-4", "SCOPE-VIS-2", "SCOPE-VIS-3", "SCOPE-VIS-4", "SCOPE-VIS-5", "SCOPE-MODEL-4", "SCOPE-IMM-4", what="by id outsiders get not found"):
        key = op.setup(store, ctx(HOME))
        before = op.observe(store, key, VIEW_SCOPES + OUTSIDERS_OF_HOME)
        for outsider in OUTSIDERS_OF_HOME:
            c = ctx(outsider)
            err = raises(lambda: op.call(store, c, key), op.not_found)
            missing = raises(lambda: op.call(store, c, op.missing()), op.not_found)
            expect_is(("SCOPE-BYID-2", "SCOPE-BYID-4", "SCOPE-VIS-2", "SCOPE-VIS-3", "SCOPE-VIS-4", "SCOPE-VIS-5", "SCOPE-MODEL-4", "SCOPE-IMM-4"),
                      type(err), type(missing),
                      'type(err) is type(missing)' + ': ' + str((outsider, type(err), type(missing))))
        expect(("SCOPE-BYID-2", "SCOPE-BYID-4", "SCOPE-VIS-2", "SCOPE-VIS-3", "SCOPE-VIS-4", "SCOPE-VIS-5", "SCOPE-MODEL-4", "SCOPE-IMM-4"),
               op.observe(store, key, VIEW_SCOPES + OUTSIDERS_OF_HOME), before,
               'op.observe(store, key, VIEW_SCOPES + OUTSIDERS_OF_HOME) == before')
        op.call(store, ctx(HOME), key)
        op.done(store, ctx(HOME), key)


def _normalise(err: BaseException, key: str) -> tuple:
    return type(err), str(err).replace(key, "<id>"), repr(err.args).replace(key, "<id>")


@pytest.mark.clause("SCOPE-BYID-3", "SCOPE-BYID-2")
@pytest.mark.parametrize("op", BYID_PARAMS)
def test_error_for_unreachable_row_reveals_nothing(store, op):
    """The error for a row out of reach reads like the error for a missing row
    (same class, same text once the id is blanked out) and never names the
    row's stored scope or any of its levels the caller does not itself hold."""
    with clause("SCOPE-BYID-3", "SCOPE-BYID-2", what="error for unreachable row reveals nothing"):
        secret = "tenant=acme7/proj=secret9"
        key = op.setup(store, ctx(secret))
        for caller in ("tenant=acme7/proj=other", "tenant=zz", "other=acme7/proj=secret9",
                       "tenant=acme7/proj=secret9/env=e1"):
            c = ctx(caller)
            missing_key = op.missing()
            err = raises(lambda: op.call(store, c, key), op.not_found)
            missing = raises(lambda: op.call(store, c, missing_key), op.not_found)
            expect(("SCOPE-BYID-3", "SCOPE-BYID-2"), _normalise(err, key), _normalise(missing, missing_key),
                   '_normalise(err, key) == _normalise(missing, missing_key)' + ': ' + str(caller))
            text = str(err) + repr(err.args)
            for part in [secret] + [v for _, v in S(secret).levels] + [f"{k}={v}" for k, v in S(secret).levels]:
                if part not in caller:
                    expect_op(("SCOPE-BYID-3", "SCOPE-BYID-2"), part, 'not in', text,
                              'part not in text' + ': ' + str(f"error for an unreachable row mentions {part!r}: {text}"))


# ===========================================================================
# Part 7: scope immutability (SCOPE-IMM-*)
# ===========================================================================


@pytest.mark.clause("SCOPE-IMM-1")
@pytest.mark.parametrize("kind", KIND_PARAMS)
def test_create_stores_ctx_scope_whatever_the_object_carries(store, kind):
    """The object's own scope (zero, equal, an ancestor, a descendant or an
    unrelated one) is ignored without error; the create returns and every read
    shows `ctx.scope`, and the row is not visible at the carried scope."""
    with clause("SCOPE-IMM-1", what="create stores ctx scope whatever the object carries"):
        sh = kind.shared()
        c = ctx(HOME)
        carried_scopes = [Scope(), S(HOME), S("ws=w1"), S("ws=w1/proj=p1/env=e9"), S("ws=zz"), S("ws=w1/proj=p2")]
        for carried in carried_scopes:
            obj = kind.new(sh, scope=carried)
            created = kind.create(store, c, obj)
            assert_scope(created.scope, S(HOME), "create result")
            if kind.get is not None:
                assert_scope(kind.get(store, c, obj).scope, S(HOME), "get")
            for lst in kind.lists:
                found = [r for r in lst(store, c, sh) if r.id == obj.id]
                expect("SCOPE-IMM-1", len(found), 1, 'len(found) == 1')
                assert_scope(found[0].scope, S(HOME), "list")
            if not carried.is_zero and not carried.covers(S(HOME)):
                expect_op("SCOPE-IMM-1", obj.id, 'not in',
                          {r.id for r in kind.lists[0](store, Context(carried), sh)},
                          'obj.id not in {r.id for r in kind.lists[0](store, Context(carried), sh)}')
                if kind.get is not None:
                    raises(lambda: kind.get(store, Context(carried), obj), kind.not_found)


@pytest.mark.clause("SCOPE-IMM-4", "SCOPE-IMM-5")
@pytest.mark.parametrize("cls", _class_params(lambda ex: ex.every_write is not None))
def test_no_method_moves_a_row(store, cls):
    """Every write method of the class (``Examples.every_write``), called from
    the row's own scope and from each ancestor, leaves each row at its stored
    scope: it is still found there and stays invisible from siblings and
    look-alikes, through every declared class (``Examples.hidden``)."""
    row = "ws=w1/proj=p1/env=e1"
    callers = [row, "ws=w1/proj=p1", "ws=w1"]
    written, check = ALL[cls].every_write(store, row, callers)
    check()
    caps = store.capabilities
    for o in ["ws=w1/proj=p2", "ws=w10/proj=p1/env=e1", "ws=w1/proj=p1/env=e10", "ws=w2"]:
        c = ctx(o)
        for name, ex in ALL.items():
            if name in caps and ex.hidden is not None:
                ex.hidden(store, c, written)


# ===========================================================================
# Part 8: identifiers (SCOPE-ID-*)
# ===========================================================================


@pytest.mark.clause("SCOPE-ID-1", *clauses_of(KINDS, "ids"))
@pytest.mark.parametrize("kind", KIND_PARAMS)
def test_ids_are_unique_across_all_scopes(store, kind):
    """Reusing an id from any scope, whether it can see the existing row or
    not, raises AlreadyExists and leaves the existing row as it was."""
    with clause("SCOPE-ID-1", what="ids are unique across all scopes"):
        sh = kind.shared()
        original = kind.new(sh)
        kind.create(store, ctx(HOME), original)
        before = kind.observe(store, sh, original, ID_CALLERS)
        for caller in ID_CALLERS:
            impostor = kind.vary(original)
            raises(lambda: kind.create(store, ctx(caller), impostor), AlreadyExists)
        expect("SCOPE-ID-1", kind.observe(store, sh, original, ID_CALLERS), before,
               'kind.observe(store, sh, original, ID_CALLERS) == before')


@pytest.mark.clause("SCOPE-ID-2", "SCOPE-ID-3", *clauses_of(KINDS, "same_reference"))
@pytest.mark.parametrize("kind", [p for p in KIND_PARAMS if p.values[0].same_reference is not None])
def test_same_reference_in_ancestor_and_descendant_scopes(store, kind):
    """SCOPE-ID-2 is checked through its nearest promise where a class's only
    uniqueness is global (ids, and keys a class's own tests cover): rows at an
    ancestor, a descendant and a sibling may carry the same reference
    (``Kind.same_reference``), each stored at its own scope and each caller
    seeing only what it covers."""
    with clause("SCOPE-ID-2", "SCOPE-ID-3", what="same reference in ancestor and descendant scopes"):
        sh = kind.shared()
        scopes = ["ws=w1", "ws=w1/proj=p1", "ws=w1/proj=p2"]
        made = {sc: kind.create(store, ctx(sc), kind.new(sh, **kind.same_reference)) for sc in scopes}
        for caller in scopes:
            got = {r.id: r.scope for r in kind.lists[0](store, ctx(caller), sh)}
            expected = {made[sc].id: S(sc) for sc in scopes if S(caller).covers(S(sc))}
            expect(("SCOPE-ID-2", "SCOPE-ID-3"), got, expected, 'got == expected' + ': ' + str(caller))


# ===========================================================================
# Part 9: scope read back from storage, partition and principal, scope arguments
# ===========================================================================

TRICKY_STORED_SCOPES = [
    "ws=w1",
    "ws=a=b",
    "ws==",
    "ws= a b /proj=\tp",
    "WS=W1/ws=w1",
    "k=1/k=2/k=3",
    "ws=\u00e9/项目=ü/env=😀",
    "ws=e\u0301",
    "ws=%_\\'\"/proj=null",
    "k" * 255 + "=" + "😀" * 255,
    "a=" + "v" * 255 + "/b=" + "=" * 255 + "/c=\u2028\ufeff",
]


def _round_trip_reads(kind: Kind, store: Any, c: Context, obj: Any, sh: SimpleNamespace) -> list[tuple[str, Any]]:
    """Every read (and write result) of the row's scope for one kind."""
    out: list[tuple[str, Any]] = []
    if kind.get is not None:
        out.append(("get", kind.get(store, c, obj).scope))
    for i, lst in enumerate(kind.lists):
        out.append((f"list{i}", next(r for r in lst(store, c, sh) if r.id == obj.id).scope))
    if kind.across is not None:
        out.append(("across", next(r for r in kind.across(store, sh) if r.id == obj.id).scope))
    if kind.reads is not None:
        out.extend(kind.reads(store, c, obj, sh))
    return out


@pytest.mark.clause("SCOPE-CANON-5", "SCOPE-MODEL-4")
@pytest.mark.parametrize("kind", KIND_PARAMS)
def test_stored_scope_reads_back_equal(store, kind):
    """The scope stamped on a row reads back equal, level for level, through
    every read of the class, for depths 1 to 3 and awkward characters ('=' in
    values, repeated and case-variant keys, unicode, spaces, 255 code points).
    The other half of SCOPE-CANON-5 (a stored scope the backend cannot parse
    raises StoreError) needs a corrupted row, which the public API cannot
    produce generically; it is left to each backend's own tests."""
    sh = kind.shared()
    for text in TRICKY_STORED_SCOPES:
        expected = S(text)
        c = Context(expected)
        obj = kind.new(sh)
        assert_scope(kind.create(store, c, obj).scope, expected, f"create at {text!r}")
        for what, got in _round_trip_reads(kind, store, c, obj, sh):
            assert_scope(got, expected, f"{kind.name} {what} at {text!r}")


@pytest.mark.clause("SCOPE-MODEL-6")
@pytest.mark.parametrize("kind", KIND_PARAMS)
def test_partition_and_principal_do_not_affect_visibility(store, kind):
    """Rows written with one partition and principal are seen, and not seen,
    exactly as the scopes alone say, whatever partition and principal the
    reader carries.  (Rows of a partitioned kind are in addition confined to
    their partition, A2A-GEN-3: for them only the reader's principal is free.)"""
    with clause("SCOPE-MODEL-6", what="partition and principal do not affect visibility"):
        sh = kind.shared()
        obj = kind.new(sh)
        kind.create(store, Context(S(HOME), partition="part-a", principal="alice"), obj)
        for caller, in_scope in [(HOME, True), ("ws=w1", True), ("ws=w1/proj=p2", False), ("ws=w10/proj=p1", False)]:
            for partition, principal in [("", None), ("part-a", "alice"), ("part-b", "bob")]:
                shown = in_scope and (not kind.partitioned or partition == "part-a")
                c = Context(S(caller), partition=partition, principal=principal)
                listed = {r.id for r in kind.lists[0](store, c, sh)}
                expect_is("SCOPE-MODEL-6", obj.id in listed, shown,
                          '(obj.id in listed) is shown' + ': ' + str((caller, partition, principal)))
                if kind.get is not None:
                    if shown:
                        assert_scope(kind.get(store, c, obj).scope, S(HOME))
                    else:
                        raises(lambda: kind.get(store, c, obj), kind.not_found)
        with pytest.raises(AlreadyExists):
            kind.create(store, Context(S("ws=w9"), partition="part-a", principal="alice"), kind.vary(obj))


def _mentions_scope(hint: object) -> bool:
    if hint is Scope:
        return True
    return any(_mentions_scope(arg) for arg in typing.get_args(hint))


@pytest.mark.clause("SCOPE-COVERS-3")
def test_no_method_of_these_classes_takes_a_scope_argument():
    """SCOPE-COVERS-3 governs methods that take a scope argument; only the
    methods a class's examples name (``Examples.scope_args``) take one, and
    the class's own module tests them against the clause.  This test fails as
    soon as another such parameter appears, so that the new method gets its
    own COVERS-3 test, or when a named method no longer takes one."""
    with clause("SCOPE-COVERS-3", what="no method of these classes takes a scope argument"):
        for cls in CLASSES.values():
            given = ALL[cls.name].scope_args
            declared = {name for name, _ in inspect.getmembers(cls.protocol, inspect.isfunction)
                        if not name.startswith("_")} - {"close"}  # a store's close takes no ctx
            expect("SCOPE-COVERS-3", declared, {m.name for m in cls.methods},
                   'declared == {m.name for m in cls.methods}' + ': ' + str(cls.name))
            for name in declared:
                fn = getattr(cls.protocol, name)
                hints = typing.get_type_hints(fn)
                params = list(inspect.signature(fn).parameters)
                expect("SCOPE-COVERS-3", params[:2], ["self", "ctx"],
                       'params[:2] == ["self", "ctx"]' + ': ' + str((cls.name, name)))
                expect_is("SCOPE-COVERS-3", hints["ctx"], Context,
                          'hints["ctx"] is Context' + ': ' + str((cls.name, name)))
                takes = [p for p in params[2:] if "scope" in p.lower() or _mentions_scope(hints.get(p))]
                if name in given:
                    expect_true("SCOPE-COVERS-3", takes,
                                'takes' + ': ' + str((cls.name, name, "named in Examples.scope_args but takes no scope")))
                else:
                    expect_false("SCOPE-COVERS-3", takes, 'not takes' + ': ' + str((cls.name, name, takes)))
