"""Conformance class ``admin``: what an operator asks of the storage as a
whole (spec: admin.md) — is it reachable (``ping``), which layout does it
hold and bring it up to date (``get_schema_version``, ``migrate``), which
stored rows carry a scope that is not a valid tenant (``inspect_scopes``) —
and what a closed store does (ADMIN-CLOSE).

These methods take ``ctx`` like every method (a :class:`~.context.Context`,
else ``InvalidArgument``) but ignore its scope: they hold no rows of their
own and work on every tenant's.  The scope rules of scope.md apply to the
rows of the other classes, which these methods never change (but
``migrate``, which changes the layout, never a row's content).

A stored scope is judged by :func:`scope_problem`, the same for every
backend: each backend hands it what it stored — the canonical text and,
where it keeps them, the levels and the depth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from .context import Context, require_context
from .entities import entity
from .errors import InvalidArgument, SchemaMismatch
from .scope import Scope

__all__ = [
    "AdminStore",
    "Inspection",
    "ScopeIssue",
    "ScopeProblem",
    "check_visitor",
    "schema_mismatch",
    "scope_problem",
]


class ScopeProblem(str, Enum):
    """What is wrong with a stored scope (ADMIN-INSPECT-4)."""

    #: the row has the zero scope: it belongs to no tenant
    ZERO = "zero"
    #: what is stored does not make a valid scope (SCOPE-VAL, SCOPE-CANON-2):
    #: bad syntax, too many levels, an empty, overlong or forbidden key or value
    UNREADABLE = "unreadable"
    #: the scope's stored forms disagree (its canonical text and its levels)
    INCONSISTENT = "inconsistent"

    def __str__(self) -> str:
        return self.value


@entity
class ScopeIssue:
    """One stored row whose scope is not a valid tenant (ADMIN-INSPECT-1).

    ``kind`` is the stored kind the row belongs to, by its storage name
    (``runs``, ``suspensions``, ``checkpoints``, ``a2a_conversations``, a
    stored kind's table name such as ``agents`` …); ``key`` its key as stored
    (an id, a pending ask's ``reply_with``); ``stored`` the scope as found
    (its canonical text, or a description of what is there)."""

    kind: str
    key: str
    stored: str
    problem: ScopeProblem


def scope_problem(canonical: Any, levels: Sequence[Any] | None = None, depth: Any = None) -> ScopeProblem | None:
    """The problem of a stored scope, or None when it is a valid, non-zero
    scope whose stored forms agree.

    ``canonical`` is the stored canonical text (None where the backend keeps
    none); ``levels`` the stored ``(key, value)`` pairs and ``depth`` the
    stored depth, where the backend keeps them (the levels alone decide
    where there is no canonical text)."""
    parsed: Scope | None = None
    if canonical is not None:
        if not isinstance(canonical, str):
            return ScopeProblem.UNREADABLE
        try:
            parsed = Scope.parse(canonical)
        except InvalidArgument:
            return ScopeProblem.UNREADABLE
    built: Scope | None = None
    if levels is not None:
        try:
            built = Scope(*(tuple(level) for level in levels))
        except (InvalidArgument, TypeError, ValueError):
            return ScopeProblem.UNREADABLE
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int)):
        return ScopeProblem.UNREADABLE
    scope = parsed if parsed is not None else built
    if scope is None:
        return ScopeProblem.UNREADABLE
    if parsed is not None and built is not None and parsed != built:
        return ScopeProblem.INCONSISTENT
    if depth is not None and depth != scope.depth:
        return ScopeProblem.INCONSISTENT
    if scope.is_zero:
        return ScopeProblem.ZERO
    return None


def schema_mismatch(found: int | None, expected: int) -> SchemaMismatch:
    """ADMIN-MIG-3/4: the refusal of a store whose storage holds layout
    ``found`` (None: no layout at all) while it reads ``expected``."""
    if found is not None and found < expected:
        text = (f"the storage holds cortex-spec schema version {found}; this store reads version {expected}: "
                f"call migrate() to bring it up to date")
    elif found is None:
        text = f"the storage holds no cortex-spec schema (this store reads version {expected})"
    else:
        text = (f"the storage holds cortex-spec schema version {found}, newer than version {expected} that "
                f"this store reads: open it with a newer store")
    return SchemaMismatch(text, found, expected)


def check_visitor(ctx: object, visit: object) -> Context:
    """ADMIN-INSPECT-6: a Context, then a callable ``visit``."""
    c = require_context(ctx)
    if not callable(visit):
        raise InvalidArgument(f"visit must be callable, got {type(visit).__name__}")
    return c


class VisitFailed(BaseException):
    """Carries an exception ``visit`` raised through a backend's own error
    handling (which wraps what it does not know), so that
    :class:`Inspection` re-raises it unchanged (ADMIN-INSPECT-5)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


class Inspection:
    """The counting and the visiting of one ``inspect_scopes`` call, written
    once: ``offer(kind, key, canonical, levels, depth)`` per stored scope;
    ``run(scan)`` runs a backend's scan and returns the number of issues."""

    def __init__(self, visit: Callable[[ScopeIssue], object]) -> None:
        self.visit = visit
        self.found = 0

    def offer(self, kind: str, key: Any, canonical: Any, levels: Sequence[Any] | None = None,
              depth: Any = None, agrees: bool = True) -> None:
        """One stored scope; ``agrees`` is False when a form the backend
        derives from it (a digest) does not match it."""
        problem = scope_problem(canonical, levels, depth)
        if problem is None and not agrees:
            problem = ScopeProblem.INCONSISTENT
        if problem is None:
            return
        stored = canonical if isinstance(canonical, str) else repr(canonical if canonical is not None else levels)
        self.found += 1
        try:
            self.visit(ScopeIssue(kind=kind, key=str(key), stored=stored, problem=problem))
        except BaseException as exc:  # noqa: BLE001 - the operator's error, carried out unchanged
            raise VisitFailed(exc) from None

    def run(self, scan: Callable[[Inspection], None]) -> int:
        try:
            scan(self)
        except VisitFailed as carried:
            error = carried.error
            raise error from error.__cause__
        return self.found


@runtime_checkable
class AdminStore(Protocol):
    """What a store of class ``admin`` provides (admin.md).

    ``schema_version`` (an ``int`` attribute) is the layout version the
    store reads and writes."""

    schema_version: int

    def ping(self, ctx: Context) -> None:
        """ADMIN-PING-1/2: returns when the storage answers."""
        ...

    def get_schema_version(self, ctx: Context) -> int:
        """ADMIN-MIG-1: the layout version the storage holds."""
        ...

    def migrate(self, ctx: Context) -> int:
        """ADMIN-MIG-2..5: bring the storage to ``schema_version``; idempotent."""
        ...

    def inspect_scopes(self, ctx: Context, visit: Callable[[ScopeIssue], object]) -> int:
        """ADMIN-INSPECT-1..6: ``visit`` every stored row whose scope is not a
        valid tenant; how many there were.  Changes nothing."""
        ...


#: The methods of the class, in the order of the spec.
ADMIN_METHODS = ("ping", "get_schema_version", "migrate", "inspect_scopes")

__all__ += ["ADMIN_METHODS", "VisitFailed"]
