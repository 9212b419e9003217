"""`Context`: the first argument of every store method.

``Context(scope, partition="", principal=None)`` carries the caller's tenant
scope, the a2a routing partition and the acting principal.  It is frozen and
validated at construction; a store checks that ``ctx`` *is* a ``Context``
(``InvalidArgument`` otherwise) and then, for scoped methods, that its scope
is not zero (``NoScope``), before anything else (SCOPE-ZERO-3).
"""

from __future__ import annotations

from typing import Any

import attrs

from .errors import InvalidArgument, NoScope
from .scope import Scope
from .validation import check_short_str

__all__ = ["Context", "require_context", "require_scope"]


def _scope_validator(_inst: object, _attr: object, value: Any) -> None:
    if not isinstance(value, Scope):
        raise InvalidArgument(f"Context.scope must be a Scope, got {type(value).__name__}")


def _partition_validator(_inst: object, _attr: object, value: Any) -> None:
    check_short_str(value, "Context.partition")


def _principal_validator(_inst: object, _attr: object, value: Any) -> None:
    if value is not None:
        check_short_str(value, "Context.principal")


@attrs.frozen
class Context:
    """Who is calling, and within which tenant scope and partition."""

    scope: Scope = attrs.field(validator=_scope_validator)
    partition: str = attrs.field(default="", validator=_partition_validator)
    principal: str | None = attrs.field(default=None, validator=_principal_validator)

    @classmethod
    def of(cls, scope: str | Scope, partition: str = "", principal: str | None = None) -> "Context":
        """``Context.of("workspace=w1")``: a scope given by its canonical string."""
        if isinstance(scope, str):
            scope = Scope.parse(scope)
        return cls(scope, partition, principal)


def require_context(ctx: object) -> Context:
    """SCOPE-ZERO-3, first step: ``ctx`` must be a :class:`Context`."""
    if not isinstance(ctx, Context):
        raise InvalidArgument(f"ctx must be a cortex_spec.Context, got {type(ctx).__name__}")
    return ctx


def require_scope(ctx: object) -> Scope:
    """The opening of every scoped method: a ``Context`` with a non-zero scope.

    Raises before any storage access (SCOPE-ZERO-1, SCOPE-ZERO-2).
    """
    scope = require_context(ctx).scope
    if scope.is_zero:
        raise NoScope("this method needs a non-zero ctx.scope")
    return scope
