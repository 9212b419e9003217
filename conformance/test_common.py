"""Certifies the rules of common.md (RSC-GEN-1..12) that every method of every
declared class obeys: aware instants converted to UTC and truncated before
they are compared or stored, creates that stamp their own times, TypeID
checks, short strings, NUL and lone surrogates refused anywhere (JSON keys
included), JSON objects that round-trip with their exact types, counters and
enumerations.  Every refused input is checked to be `InvalidArgument` with
nothing written.

Nothing here names a class: each test is parametrized per *site*, a place a
value goes (a field of an entity, an argument of a method), which each class
gives in its examples (``Examples.sites`` in ``conformance/test_<class>.py``,
see ``conformance/examples.py``).  What a rule needs of one class alone (one
clock read per call, the tie-breaks of its lists, the size limit of its
largest entity, linearizable calls under concurrency) is tested in that
class's own module; a stored kind's fields are certified from its
description by ``test_kinds.py``.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from cortex_spec import Context, Scope, ids
from cortex_spec.errors import InvalidArgument
from cortex_spec.testing import ctx, expect_strict

from .examples import HOME, Site, clauses_of, examples, expect_invalid, expect_stored
from .helpers import BOGUS_STAMPS, MINUS_0800, PLUS_0530, UTC, assert_instant

#: Every class's sites, by rule.
SITES: dict[str, list[Site]] = {}
for _ex in examples().values():
    for _rule, _sites in _ex.sites.items():
        SITES.setdefault(_rule, []).extend(_sites)


def classes(*names: str) -> pytest.MarkDecorator:
    return pytest.mark.cortex_classes(*names)


def _params(rule: str, only: Any = lambda site: True) -> list:
    return [pytest.param(s, marks=classes(s.cls), id=s.name) for s in SITES.get(rule, []) if only(s)]


def _site_clauses(rule: str) -> tuple[str, ...]:
    """The class clauses the sites of ``rule`` also check (``Site.clauses``)."""
    return clauses_of(SITES.get(rule, []))


def _attribute(site: Site) -> str:
    """The attribute of a call's result that holds the site's value."""
    return site.name.split(".")[-1]


# ===========================================================================
# RSC-GEN-2: aware instants only, converted to UTC and truncated
# ===========================================================================

NAIVE_OR_NOT_INSTANTS = [
    datetime(2026, 1, 1),
    datetime(2026, 1, 1, 0, 0, 0, 123456),
    date(2026, 1, 1),
    "2026-01-01T00:00:00+00:00",
    1767225600,
    1767225600.0,
]


@pytest.mark.clause("RSC-GEN-2")
@pytest.mark.parametrize("site", _params("instant"))
def test_naive_or_non_datetime_instant_refused(store, request, site):
    expect_invalid(store, request.getfixturevalue, site, NAIVE_OR_NOT_INSTANTS)


#: (given, expected as stored): other offsets converted to UTC, sub-ms dropped (never rounded up)
CONVERTED = [
    (datetime(2026, 1, 1, 5, 30, 0, 999999, tzinfo=PLUS_0530), datetime(2026, 1, 1, 0, 0, 0, 999000, tzinfo=UTC)),
    (datetime(2025, 12, 31, 16, 0, 0, 123456, tzinfo=MINUS_0800), datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)),
    (datetime(2026, 1, 1, 0, 0, 0, 999, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)),
    (datetime(2026, 1, 1, 0, 0, 0, 500, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)),
    (datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), datetime(1999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)),
]


@pytest.mark.clause("RSC-GEN-2")
@pytest.mark.parametrize("site", _params("instant", lambda s: s.read is not None))
def test_aware_instant_stored_in_utc_truncated_to_ms(store, request, site):
    c = ctx(HOME)
    w = examples()[site.cls].seed(store, request.getfixturevalue)
    for given, expected in CONVERTED:
        result = site.call(store, c, w, given)
        assert_instant(getattr(result, _attribute(site)), expected, f"{site.name} as returned")
        assert_instant(site.read(store, c, w, result), expected, f"{site.name} read back")


# ===========================================================================
# RSC-GEN-4: creates stamp created_at and updated_at from the clock
# ===========================================================================


@pytest.mark.clause("RSC-GEN-4", *_site_clauses("create"))
@pytest.mark.parametrize("site", _params("create"))
def test_create_ignores_passed_timestamps(store, request, clock, site):
    c = ctx(HOME)
    w = examples()[site.cls].seed(store, request.getfixturevalue)
    clock.advance(seconds=1, milliseconds=234)
    for fields in (BOGUS_STAMPS, {"created_at": clock.now() - timedelta(days=1)}, {}):
        result = site.call(store, c, w, dict(fields))
        for got in (result, site.read(store, c, w, result)):
            assert_instant(got.created_at, clock.now(), f"{site.name} created_at")
            assert_instant(got.updated_at, clock.now(), f"{site.name} updated_at")
        clock.advance(milliseconds=1)


# ===========================================================================
# RSC-GEN-5: TypeIDs
# ===========================================================================


def _bad_ids(prefix: str, optional: bool) -> list:
    valid = ids.new_id(prefix)
    suffix = valid.split("_", 1)[1]
    # a well-formed id of another entity: the contract's first prefix, or its
    # second for a site of the first
    first, second = list(ids.PREFIXES.values())[:2]
    other = ids.new_id(second if prefix == first else first)
    values: list = [
        other,
        f"{prefix}_notatypeid",
        f"{prefix}_{'8' * 26}",  # 130 bits: overflows a UUID
        f"{prefix}_{'0' * 25}",
        f"{prefix}_{'0' * 27}",
        f"{prefix}_{suffix.upper()}",
        f"{prefix.upper()}_{suffix}",
        f"{prefix}{suffix}",
        f"{prefix}-{suffix}",
        f"{prefix}_{suffix[:-1]}u",  # 'u' is not in the base32 alphabet
        " " + valid,
        valid + " ",
        valid + "\x00",
        "",
        42,
        3.5,
        valid.encode(),
        [valid],
    ]
    if not optional:
        values.append(None)
    return values


@pytest.mark.clause("RSC-GEN-5")
@pytest.mark.parametrize("site", _params("id"))
def test_bad_ids_refused(store, request, site):
    """Wrong prefix, malformed TypeIDs and non-`str` values are InvalidArgument
    and write nothing; a well-formed id of the right prefix is not refused."""
    expect_invalid(store, request.getfixturevalue, site, _bad_ids(site.prefix, site.optional))
    w = examples()[site.cls].seed(store, request.getfixturevalue)
    for good in [ids.new_id(site.prefix)] + ([None] if site.optional else []):
        try:
            site.call(store, ctx(HOME), w, good)
        except InvalidArgument as exc:
            pytest.fail(f"{site.name}: a well-formed {site.prefix}_ id was refused: {exc}")
        except Exception:  # noqa: BLE001 - NotFound and the like are fine here
            pass


# ===========================================================================
# RSC-GEN-6: short strings; no NUL and no lone surrogate anywhere
# ===========================================================================


@pytest.mark.clause("RSC-GEN-6")
@pytest.mark.parametrize("site", _params("short"))
def test_short_string_limit_is_255_code_points(store, request, site):
    """255 code points are accepted and read back exactly (astral characters
    count once each); 256 are refused and nothing is written."""
    expect_stored(store, request.getfixturevalue, site, ["s" * 255, "😀" * 255, "é" * 254 + "x"])
    expect_invalid(store, request.getfixturevalue, site, ["s" * 256, "😀" * 256, "s" * 1000])


BAD_TEXT = ["a\x00b", "\x00", "\ud800", "x\udfffy", "\udbff"]

#: Unusual but valid text: control characters, separators, BOM, combining marks, quotes.
ODD_TEXT = "\x01\x1f\t\n\r\x7f\u2028\ufeff😀 e\u0301 \\ ' \" %_ <&> \u00a0"


@pytest.mark.clause("RSC-GEN-6", "RSC-GEN-7")
@pytest.mark.parametrize("site", _params("text"))
def test_nul_and_lone_surrogates_refused_everywhere(store, request, site):
    """A NUL or a lone surrogate anywhere (fields, nested JSON keys and values,
    nested records, the context) is InvalidArgument with nothing written;
    other unusual characters are stored and read back exactly."""
    expect_invalid(store, request.getfixturevalue, site, BAD_TEXT)
    expect_stored(store, request.getfixturevalue, site, [ODD_TEXT])


@pytest.mark.clause("RSC-GEN-6")
@pytest.mark.parametrize("field", ["partition", "principal"])
def test_context_refuses_bad_short_strings(field):
    Context(Scope.parse(HOME), **{field: "p" * 255})
    for bad in ["p" * 256, "a\x00", "\ud800", 5, b"p"]:
        with pytest.raises(InvalidArgument):
            Context(Scope.parse(HOME), **{field: bad})


# ===========================================================================
# RSC-GEN-7: JSON objects
# ===========================================================================

GOOD_JSON = {
    "int": 1,
    "float": 1.0,
    "true": True,
    "false": False,
    "none": None,
    "zero": 0,
    "zero_float": 0.0,
    "neg": -7,
    "int64_max": 2**63 - 1,
    "int64_min": -(2**63),
    "big_float": 1.7976931348623157e308,
    "tiny_float": 5e-324,
    "tenth": 0.1,
    "float_big_int": 1e16,
    "str": "text",
    "empty": "",
    "unicode": "é😀\u2028",
    "list": [1, 1.0, True, None, "s", [], {}, [0, [0.0, False]]],
    "nested": {"a": {"b": {"c": [False, 0, 0.0, "0"]}}},
    "": "empty key",
    "a.b": "dotted key",
    "$x": "dollar key",
    "é😀": "unicode key",
    " ": "space key",
    "1": "numeric-looking key",
}


@pytest.mark.clause("RSC-GEN-7")
@pytest.mark.parametrize("site", _params("json"))
def test_json_object_round_trips_with_exact_types(store, request, site):
    """1 stays an int, 1.0 a float, True a bool, the int64 bounds and extreme
    floats survive, lists and dicts nest, and any str is a key (empty, dotted,
    `$`-prefixed, unicode)."""
    c = ctx(HOME)
    w = examples()[site.cls].seed(store, request.getfixturevalue)
    for value in (GOOD_JSON, {}, {"only": [1.0]}):
        result = site.call(store, c, w, value)
        expect_strict("RSC-GEN-7", getattr(result, _attribute(site)), value, f"{site.name} as returned")
        got = site.read(store, c, w, result)
        expect_strict("RSC-GEN-7", got, value, f"{site.name} read back")


class _Dummy:
    pass


#: Content that is not JSON (or out of range), placed at the top level and nested.
BAD_JSON_CONTENT = [
    2**63, -(2**63) - 1, 10**30, float("nan"), float("inf"), float("-inf"),
    (1, 2), {1, 2}, frozenset(), b"bytes", bytearray(b"x"), datetime(2026, 1, 1, tzinfo=UTC),
    date(2026, 1, 1), Decimal("1.5"), 1 + 2j, _Dummy(), object, print,
]
BAD_JSON_KEYS = [1, None, (1, 2), True, 1.5, b"k"]


def _bad_json_objects() -> list:
    out: list = []
    for bad in BAD_JSON_CONTENT:
        out += [{"k": bad}, {"a": {"b": [1, {"c": bad}]}}]
    for key in BAD_JSON_KEYS:
        out += [{key: 1}, {"a": [{key: "v"}]}]
    out += [[], "{}", 1, (("k", 1),), {"k": [1, 2], 5: 2}]
    return out


@pytest.mark.clause("RSC-GEN-7")
@pytest.mark.parametrize("site", _params("json"))
def test_non_json_content_refused(store, request, site):
    """Out-of-range ints, non-finite floats, tuples, sets, bytes, datetimes,
    Decimals, other objects and non-`str` keys, at the top or nested, and a
    field that is not a dict at all: InvalidArgument, nothing written."""
    bad = _bad_json_objects()
    if not site.optional:  # a site whose JSON object may be None
        bad.append(None)
    expect_invalid(store, request.getfixturevalue, site, bad)


# ===========================================================================
# RSC-GEN-9: counters and indexes
# ===========================================================================


@pytest.mark.clause("RSC-GEN-9")
@pytest.mark.parametrize("site", _params("counter"))
def test_counters_are_non_negative_ints(store, request, site):
    """`bool`, negative numbers, floats (even whole ones), strings and None are
    refused; 0 and large ints (beyond 32 bits, beyond a double's exact range)
    are stored and read back as `int`."""
    expect_invalid(store, request.getfixturevalue, site, [True, False, -1, -(2**63), 1.0, 0.0, "1", None, Decimal(1)])
    expect_stored(store, request.getfixturevalue, site, [0, 7, 2**31 + 1, 2**53 + 1])


# ===========================================================================
# RSC-GEN-10: enumerations
# ===========================================================================


@pytest.mark.clause("RSC-GEN-10", *_site_clauses("enum"))
@pytest.mark.parametrize("site", _params("enum"))
def test_enumerations_accept_only_their_values(store, request, site):
    """Each member, as the enum or as its exact lowercase string, is accepted
    (and reads back as that member); any other value, including case and
    whitespace variants and members of other enumerations (``Site.invalid``),
    is refused."""
    enum = site.enum
    if enum is None:
        raise TypeError(f"{site.name}: an enum site names its enumeration (Site.enum)")
    first = next(iter(enum)).value
    bad = ["bogus", "", first.upper(), first.capitalize(), f" {first}", f"{first} ", 1, 0, *site.invalid]
    if not site.optional:  # a filter's None means no filter
        bad.append(None)
    expect_invalid(store, request.getfixturevalue, site, bad)
    members = list(enum)
    expect_stored(store, request.getfixturevalue, site, members + [m.value for m in members],
                  expect=lambda v: enum(v if isinstance(v, str) else v.value))
