"""Which clause a failed check belongs to, and the message a person reads.

A certification test names the clauses it checks (``@pytest.mark.clause``);
a failure is charged to the clause whose *check* failed, found in this order
(the report's ``attribution`` says which rule applied):

``check``
    the check named its clause: a :class:`~cortex_spec.testing.ClauseViolation`
    (``clause()``, ``expect()``, ``expect_raises()``, ``expect_result()``) or
    any exception carrying ``cortex_clauses`` (the state machines' failures);
``comment``
    a comment on the failed statement, or in the comment lines right above
    it, names clause ids (``assert row.decision is None  # CP-ENT-1``);
``words``
    the failed statement calls a method, or expects an error, that the rules
    of some but not all of the test's clauses name in backticks: those
    clauses (``with pytest.raises(InvalidState): store.resolve(...)`` in a
    test of ``RSC-GEN-4`` and ``CP-RESOLVE-3`` is charged to the rule that
    says a second `resolve` raises `InvalidState`);
``subject``
    otherwise the test's first clause, its subject: ``clause(subject, *also)``;
``test``
    no check ran (an error in a fixture): every clause of the test.

The test's other clauses are reported *not established* by that test.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .clauses import UnknownClause, catalogue
from .words import clip

__all__ = ["attribute", "rule_of"]

_CLAUSE_ID = re.compile(r"\b[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+\b")
_TICKED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)")


def rule_of(clause_id: str, limit: int = 300) -> str:
    """A clause's rule in words (Markdown backticks dropped), clipped at a word."""
    try:
        text = catalogue()[clause_id].text.replace("`", "")
    except UnknownClause:
        return "(a clause the spec does not define)"
    return clip(" ".join(text.split()), limit)


@functools.cache
def _tree(path: str) -> tuple[ast.Module, list[str]] | None:
    try:
        source = Path(path).read_text(encoding="utf-8")
        return ast.parse(source), source.splitlines()
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def _statement_at(tree: ast.Module, line: int) -> tuple[ast.stmt | None, list[ast.With]]:
    """The innermost statement spanning ``line`` and the ``with`` statements around it."""
    found: ast.stmt | None = None
    withs: list[ast.With] = []

    def visit(node: ast.AST) -> None:
        nonlocal found
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt) and child.lineno <= line <= (child.end_lineno or child.lineno):
                found = child
                if isinstance(child, ast.With):
                    withs.append(child)
                visit(child)
                return
            if not isinstance(child, ast.stmt):
                continue

    visit(tree)
    return found, withs


def _raised_names(with_: ast.With) -> list[str]:
    """The errors a ``with pytest.raises(E, ...)`` expects."""
    names = []
    for item in with_.items:
        call = item.context_expr
        if isinstance(call, ast.Call) and _name(call.func) == "raises":
            for arg in call.args[:1]:
                elts = arg.elts if isinstance(arg, ast.Tuple) else [arg]
                names += [n for n in map(_name, elts) if n]
    return names


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _called(node: ast.AST) -> list[str]:
    return [n for sub in ast.walk(node) if isinstance(sub, ast.Call) for n in [_name(sub.func)] if n]


def _comment_ids(lines: list[str], first: int, last: int) -> list[str]:
    """Clause ids in comments on lines ``first..last`` (1-based) and in the
    comment lines right above ``first``."""
    texts = []
    for n in range(first, last + 1):
        line = lines[n - 1]
        if "#" in line:
            texts.append(line[line.index("#"):])
    n = first - 1
    while n >= 1 and lines[n - 1].strip().startswith("#"):
        texts.append(lines[n - 1])
        n -= 1
    cat = catalogue()
    return list(dict.fromkeys(c for t in texts for c in _CLAUSE_ID.findall(t) if c in cat))


def _by_words(words: Sequence[str], clauses: Sequence[str]) -> tuple[str, ...]:
    """The clauses among ``clauses`` whose rules name most of ``words``;
    empty when none, or all of them, do (the words tell nothing)."""
    cat = catalogue()
    wanted = set(words)
    scores = {}
    for cid in clauses:
        try:
            ticked = set(_TICKED.findall(cat[cid].text))
        except UnknownClause:
            continue
        scores[cid] = len(wanted & ticked)
    best = max(scores.values(), default=0)
    if best == 0:
        return ()
    chosen = tuple(c for c in clauses if scores.get(c) == best)
    return chosen if len(chosen) < len(clauses) else ()


def source_path(item: Any) -> Path:
    """The file a test's code is in: its module's, or for a suite test run
    through a suite class (:mod:`cortex_spec.suite`) the suite module's."""
    code = getattr(getattr(item, "function", None), "__code__", None)
    if code is not None:
        return Path(code.co_filename)
    return Path(str(getattr(item, "path", "")))


def _frame(excinfo: Any, path: Path) -> int | None:
    """The 1-based line of the last traceback entry in the test's file."""
    line = None
    for entry in excinfo.traceback:
        try:
            if Path(str(entry.path)) == path:
                line = entry.lineno + 1
        except (TypeError, ValueError):
            continue
    return line


def _observed(excinfo: Any) -> str:
    exc = excinfo.value
    text = str(exc).strip()
    if isinstance(exc, AssertionError):
        return text or "the assertion was false"
    name = type(exc).__name__
    if name == "Failed":  # pytest.fail / pytest.raises' "DID NOT RAISE"
        return text
    return f"raised {name}: {text}" if text else f"raised {name}"


def _unreplayed(exc: BaseException) -> BaseException | None:
    """The check's failure inside an exception group that Hypothesis raises
    when an example failed once and its replay did not fail the same way
    (``FlakyFailure``: the first run's error, then the replay's): the first
    error in it that names its clauses, or None."""
    if not isinstance(exc, BaseExceptionGroup):
        return None
    for sub in exc.exceptions:
        found = sub if getattr(sub, "cortex_clauses", None) else _unreplayed(sub)
        if found is not None:
            return found
    return None


#: The line a failure that Hypothesis could not replay ends with.
_UNREPLAYED = ("(this failure happened once: when Hypothesis replayed the example it did not fail "
              "the same way, so the outcome depended on timing or on something else that differs "
              "between runs; the replay command may pass)")


def attribute(item: Any, excinfo: Any, clauses: Sequence[str], when: str = "call") -> dict[str, Any]:
    """The structured failure of ``item`` (see the report schema's
    ``failure``): the clauses charged, the rule first in the message, what
    was checked, expected and observed, and where.  A failure Hypothesis
    could not replay is reported as the check's own failure, marked
    ``replayed: false``."""
    exc = excinfo.value
    unreplayed = _unreplayed(exc)
    if unreplayed is not None:
        exc = unreplayed
    named = tuple(getattr(exc, "cortex_clauses", ()) or ())
    failure: dict[str, Any] = {}
    path = source_path(item)
    line = _frame(excinfo, path) if when == "call" else None
    stmt: ast.stmt | None = None
    withs: list[ast.With] = []
    parsed = _tree(str(path)) if line is not None else None
    if parsed is not None and line is not None:
        stmt, withs = _statement_at(parsed[0], line)
    if stmt is not None and parsed is not None:
        first = stmt.lineno
        segment = ast.get_source_segment("\n".join(parsed[1]), stmt) or parsed[1][first - 1]
        failure["where"] = f"{path.name}:{line}"
        check = " ".join(segment.split("\n", 1)[0].split())
        if isinstance(stmt, ast.With) and len(segment.splitlines()) > 1:
            inner = [s for s in stmt.body if isinstance(s, ast.stmt)][:1]
            if inner:
                body = ast.get_source_segment("\n".join(parsed[1]), inner[0]) or ""
                check = f"{check} {' '.join(body.split())}"
        failure["check"] = clip(check, 200)
    if named:
        how = "check"
        charged = named
    elif when != "call":
        how, charged = "test", tuple(clauses)
    else:
        charged = ()
        if stmt is not None and parsed is not None:
            charged = tuple(_comment_ids(parsed[1], stmt.lineno, stmt.end_lineno or stmt.lineno))
            how = "comment"
            if not charged:
                errors = [n for w in withs for n in _raised_names(w)]
                words = errors + (_called(stmt) if not isinstance(stmt, ast.With) else _called(stmt.items[0].context_expr) + [
                    n for s in stmt.body for n in _called(s)])
                charged = _by_words(words, clauses)
                how = "words"
        if not charged:
            how, charged = "subject", tuple(clauses[:1])
    failure["attribution"] = how
    failure["clauses"] = list(charged)

    # the message: rule first, then the check, expected and observed
    if named and str(exc).strip():
        body = str(exc).strip()
        if type(exc).__name__ == "ClauseViolation":
            expected, observed = getattr(exc, "expected", None), getattr(exc, "observed", None)
            if expected is not None or observed is not None:
                from .testing import shorten

                failure["expected"] = shorten(expected)
                failure["observed"] = shorten(observed)
            match = re.search(r"^checked: (.*)$", body, re.MULTILINE)
            if match:
                failure["check"] = match.group(1)
        else:  # a machine's failure: its own first line is the headline
            failure.pop("check", None)
            for key in ("expected", "observed"):
                value = getattr(exc, key, None)
                if value:
                    failure[key] = clip(str(value), 600)
            headline = body.split("\n", 1)[0]
            body = headline + "\n" + "\n".join(f"{c} broken: {rule_of(c)}" for c in charged) + "\n" + body.split("\n", 1)[-1]
    else:
        observed = _observed(excinfo)
        if isinstance(stmt, ast.Assert) and parsed is not None:
            expected = "that " + " ".join((ast.get_source_segment("\n".join(parsed[1]), stmt.test) or "").split()) + " holds"
        elif withs and isinstance(exc, BaseException) and type(exc).__name__ == "Failed" or withs:
            expected = "raises " + ", ".join(n for w in withs for n in _raised_names(w))
        else:
            expected = "no error"
        failure["expected"] = clip(expected, 200)
        failure["observed"] = clip(" ".join(observed.split()), 400)
        lines = [f"{c} broken: {rule_of(c)}" for c in charged]
        if when != "call":
            lines.append(f"error in {when} (no check of the test ran)")
        if "check" in failure:
            lines.append(f"checked: {failure['check']}" + (f" ({failure['where']})" if "where" in failure else ""))
        lines.append(f"expected: {failure['expected']}")
        lines.append(f"observed: {failure['observed']}")
        if how == "subject" and len(clauses) > 1:
            lines.append(f"(the failed check names no clause of its own: charged to {clauses[0]}, "
                         "the test's first clause)")
        body = "\n".join(lines)
    if unreplayed is not None:
        failure["replayed"] = False
        body = f"{body}\n{_UNREPLAYED}"
    failure["message"] = body
    failure["summary"] = body.split("\n", 1)[0]
    return failure
