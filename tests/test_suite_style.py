"""The certification suites check through clause-charged calls, never a bare
``assert``.

Every check in a ``conformance/test_*.py`` module names the clause it checks
and says what was expected and what was observed (``expect``,
``expect_raises``, ``expect_is``, ``expect_op``, … of
:mod:`cortex_spec.testing`): a bare ``assert`` fails with no rule, and
often with no observation either.  This test fails, naming file and line,
when a bare ``assert`` statement appears in a suite.

:data:`KNOWN_REMAINDER` lists the suites still being converted, with the
number of bare asserts each holds: such a suite fails too when its count
grows.  Lower a count (or drop the entry) as a suite is converted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITES = ROOT / "conformance"

#: Suites still holding bare asserts (being converted by another change),
#: with how many: a count may only shrink.  None is left.
KNOWN_REMAINDER: dict[str, int] = {}


def _asserts(source: str, filename: str) -> list[ast.Assert]:
    """Every ``assert`` statement in ``source``."""
    return [node for node in ast.walk(ast.parse(source, filename=filename)) if isinstance(node, ast.Assert)]


def bare_asserts(source: str, filename: str = "<suite>") -> list[int]:
    """The line of each ``assert`` statement in ``source``, in order."""
    return sorted(node.lineno for node in _asserts(source, filename))


def _suites() -> list[Path]:
    return sorted(SUITES.glob("test_*.py"))


def test_the_suites_are_found():
    names = {p.name for p in _suites()}
    assert len(names) >= 10, f"too few suites under {SUITES}: {sorted(names)}"
    missing = sorted(set(KNOWN_REMAINDER) - names)
    assert not missing, f"KNOWN_REMAINDER names suites that do not exist: {missing}"


def test_bare_asserts_are_found_wherever_they_are():
    """The finder sees an assert at module level, in a function, a nested
    function, a ``with`` block and a loop; it ignores the word elsewhere."""
    source = "\n".join([
        "assert a",                                # 1
        "def f():",                                # 2
        "    with clause('X-1'):",                 # 3
        "        assert b == c, 'message'",        # 4
        "    def g():",                            # 5
        "        for x in y:",                     # 6
        "            assert x",                    # 7
        "    expect('X-1', a, b, 'assert a')",     # 8
        "# assert in a comment",                   # 9
        "s = 'assert in a string'",                # 10
    ])
    assert bare_asserts(source) == [1, 4, 7]


@pytest.mark.parametrize("path", _suites(), ids=lambda p: p.name)
def test_no_bare_assert_in_a_suite(path: Path):
    lines = bare_asserts(path.read_text(encoding="utf-8"), str(path))
    allowed = KNOWN_REMAINDER.get(path.name, 0)
    where = ", ".join(f"{path.relative_to(ROOT)}:{n}" for n in lines)
    if allowed:
        assert len(lines) <= allowed, (
            f"{path.name} holds {len(lines)} bare asserts, more than the {allowed} it held when "
            f"KNOWN_REMAINDER was written; check through cortex_spec.testing (expect, expect_raises, "
            f"expect_is, expect_op, …) with the clause instead: {where}")
    else:
        assert not lines, (
            f"{len(lines)} bare assert(s) in {path.name}: a suite's check names its clause and says "
            f"expected and observed (cortex_spec.testing: expect, expect_raises, expect_is, expect_op, "
            f"expect_true, expect_that, …): {where}")


def test_the_checks_that_replace_asserts_fail_as_the_asserts_did():
    """Each ``expect_*`` holds exactly when the assert it replaces held, and
    a failure is a ClauseViolation of its clause with expected and observed."""
    from cortex_spec.testing import (
        ClauseViolation, expect, expect_false, expect_is, expect_op, expect_strict, expect_that, expect_true,
    )

    holds = [
        lambda: expect("X-1", [1], [1], "equal"),
        lambda: expect_is("X-1", None, None, "is"),
        lambda: expect_op("X-1", 1, "in", (1, 2), "in"),
        lambda: expect_op("X-1", 1, "<=", 1, "<="),
        lambda: expect_op("X-1", 1, "is not", None, "is not"),
        lambda: expect_true("X-1", [0], "truthy"),
        lambda: expect_false("X-1", [], "falsy"),
        lambda: expect_that("X-1", True, "that", "e", "o"),
        lambda: expect_strict("X-1", {"a": 1}, {"a": 1}, "strict"),
    ]
    for check in holds:
        check()
    fails = [
        (lambda: expect("X-1", [1], [2], "equal"), [2], [1]),
        (lambda: expect_is("X-1", 1, True, "1 is not True"), True, 1),
        (lambda: expect_op("X-1", 3, "in", (1, 2), "in"), "in (1, 2)", 3),
        (lambda: expect_op("X-1", 2, "<=", 1, "<="), "<= 1", 2),
        (lambda: expect_true("X-1", 0, "truthy"), "a true value", 0),
        (lambda: expect_false("X-1", [0], "falsy"), "a false value", [0]),
        (lambda: expect_that("X-1", False, "that", "e", "o"), "e", "o"),
        (lambda: expect_strict("X-1", {"a": 1}, {"a": 1.0}, "strict"), {"a": 1.0}, {"a": 1}),
    ]
    for check, expected, observed in fails:
        try:
            check()
        except ClauseViolation as exc:
            assert exc.cortex_clauses == ("X-1",)
            assert (exc.expected, exc.observed) == (expected, observed)
        else:
            raise AssertionError(f"{check} did not fail")
    try:
        expect_op("X-1", 1, "=", 1, "a typo")
    except TypeError:
        pass
    else:
        raise AssertionError("expect_op took an unknown operator")


# -- the helpers' asserts explain themselves --------------------------------------------------

#: The certification's other modules: helpers the suites call inside
#: ``clause(...)``, where a failing ``assert`` becomes a ClauseViolation
#: whose detail is the assert's own message.  `cortex-spec certify` and the
#: tox envs run without pytest's assertion rewriting (``--assert=plain``),
#: so an assert without a message would report nothing it saw.
HELPERS = sorted(p for p in [*SUITES.glob("*.py"), *(ROOT / "stateful").glob("*.py")]
                 if not p.name.startswith("test_"))


def unexplained_asserts(source: str, filename: str = "<module>") -> list[int]:
    """The line of each ``assert`` without a message, other than a type
    narrowing (``x is not None``, ``isinstance(...)``) that states an
    invariant of the code rather than checking a store."""
    def narrowing(test: ast.expr) -> bool:
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot):
            return isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None
        return isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"

    return sorted(node.lineno for node in _asserts(source, filename)
                  if node.msg is None and not narrowing(node.test))


def test_unexplained_asserts_are_found():
    source = "\n".join([
        "assert a == b",                       # 1: no message
        "assert a == b, f'{a} != {b}'",        # 2
        "assert x is not None",                # 3: narrowing
        "assert isinstance(x, str)",           # 4: narrowing
        "assert x is not y",                   # 5: not a narrowing
        "def f():",                            # 6
        "    with clause('X-1'):",             # 7
        "        assert all(v for v in w)",    # 8
    ])
    assert unexplained_asserts(source) == [1, 5, 8]


@pytest.mark.parametrize("path", HELPERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_helpers_assert_says_what_it_saw(path: Path):
    lines = unexplained_asserts(path.read_text(encoding="utf-8"), str(path))
    where = ", ".join(f"{path.relative_to(ROOT)}:{n}" for n in lines)
    assert not lines, (
        f"{len(lines)} assert(s) without a message in {path.name}: under --assert=plain (how "
        f"`cortex-spec certify` runs) a failure would say nothing of what it saw: {where}")
