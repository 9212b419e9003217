"""Operations and their observable outcomes.

An :class:`Op` is one store call as data — method name, context, arguments
and the instant the manual clock showed when it was invoked — so that it can
be run on any store, replayed on the reference model, and printed as
runnable Python.  An :class:`Outcome` is what a call did, normalised so that
two backends can be compared: entities become tuples of fields, JSON values
keep their types (``1``, ``1.0`` and ``True`` differ), errors become their
contract class name.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Callable, Hashable

import attrs

from cortex_spec import errors
from cortex_spec.clock import to_millis
from cortex_spec.context import Context
from cortex_spec.scope import Scope

__all__ = ["Op", "Outcome", "normalize", "outcome_of", "run_op", "UNKNOWN", "py"]


@attrs.frozen
class Op:
    """One store call: ``store.<method>(ctx, *args)`` at clock instant ``at``."""

    method: str
    ctx: Context
    args: tuple[Any, ...] = ()
    #: the manual clock's value when the call was made (the model uses it)
    at: datetime | None = None
    #: object keys the call touches; ``None`` means "spans every object"
    keys: frozenset[Hashable] | None = None
    #: a label shown in timelines (e.g. the writer script it belongs to)
    label: str = ""

    def __call__(self, store: Any) -> Any:
        return getattr(store, self.method)(self.ctx, *self.args)

    def render(self, store_name: str = "store") -> str:
        """The call as Python source."""
        args = ", ".join([py(self.ctx)] + [py(a) for a in self.args])
        return f"{store_name}.{self.method}({args})"

    def short(self) -> str:
        """A compact one-line form for timelines."""
        args = ", ".join(_short(a) for a in self.args)
        scope = self.ctx.scope.canonical() or "∅"
        return f"{self.method}[{scope}]({args})"


@attrs.frozen
class Outcome:
    """``ok`` with a normalised value, ``error`` with a class name, or
    ``unknown`` (the call did not return in time, or died)."""

    kind: str  # "ok" | "error" | "unknown" | "crash"
    value: Hashable = None
    #: original value / exception, for messages only (not compared)
    raw: Any = attrs.field(default=None, eq=False, hash=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    def describe(self) -> str:
        if self.kind == "ok":
            shown = self.value if self.raw is None and self.value is not None else self.raw
            return f"-> {_short(shown) if shown is self.raw else repr(shown)}"
        if self.kind == "error":
            return f"!! {self.value}"
        if self.kind == "crash":
            return f"!! non-contract {self.value}"
        return "?? unknown"


UNKNOWN = Outcome("unknown")


def normalize(value: Any) -> Hashable:
    """A hashable, type-exact representation of a returned value."""
    if value is None or isinstance(value, str) and not isinstance(value, enum.Enum):
        return value
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            return ("naive-datetime", value.isoformat())
        return ("t", to_millis(value))
    if isinstance(value, Scope):
        return ("scope", value.canonical())
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, normalize(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("list", tuple(normalize(v) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(normalize(v) for v in value))
    if attrs.has(type(value)):
        return (
            type(value).__name__,
            tuple((f.name, normalize(getattr(value, f.name))) for f in attrs.fields(type(value))),
        )
    return ("repr", repr(value))


def _error_name(exc: BaseException) -> str:
    """The most specific contract class of an exception."""
    for cls in type(exc).__mro__:
        if cls.__module__ == errors.__name__:
            return cls.__name__
    return type(exc).__name__


def outcome_of(call: Callable[[], Any]) -> Outcome:
    """Run ``call`` and classify what happened."""
    try:
        value = call()
    except errors.CortexError as exc:
        return Outcome("error", _error_name(exc), raw=exc)
    except Exception as exc:  # noqa: BLE001 - a non-contract error is a finding
        return Outcome("crash", f"{type(exc).__name__}: {exc}", raw=exc)
    return Outcome("ok", normalize(value), raw=value)


def run_op(store: Any, op: Op) -> Outcome:
    return outcome_of(lambda: op(store))


# -- rendering ---------------------------------------------------------------------


def py(value: Any) -> str:
    """Python source that rebuilds ``value`` (entities, scopes, instants)."""
    if isinstance(value, Context):
        parts = [repr(value.scope.canonical())]
        if value.partition:
            parts.append(f"partition={value.partition!r}")
        if value.principal is not None:
            parts.append(f"principal={value.principal!r}")
        return f"ctx({', '.join(parts)})"
    if isinstance(value, Scope):
        return f"Scope.parse({value.canonical()!r})"
    if isinstance(value, enum.Enum):
        return repr(value.value)
    if isinstance(value, datetime):
        return f"T({to_millis(value)})"
    if attrs.has(type(value)):
        fields = []
        for f in attrs.fields(type(value)):
            v = getattr(value, f.name)
            if f.default is not attrs.NOTHING and not isinstance(f.default, attrs.Factory) and v == f.default:
                continue
            if isinstance(f.default, attrs.Factory) and v == f.default.factory():
                continue
            fields.append(f"{f.name}={py(v)}")
        return f"{type(value).__name__}({', '.join(fields)})"
    if isinstance(value, tuple):
        inner = ", ".join(py(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(py(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {py(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _short(value: Any) -> str:
    if isinstance(value, str):
        # ids: keep the prefix and the last 4 characters
        if "_" in value and len(value) > 20:
            prefix, _, rest = value.partition("_")
            return f"{prefix}…{rest[-4:]}"
        return repr(value) if len(value) <= 24 else repr(value[:21] + "…")
    if isinstance(value, datetime):
        return f"T{to_millis(value)}"
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value[:4]) + (", …" if len(value) > 4 else "") + "]"
    if attrs.has(type(value)):
        ident = getattr(value, "id", None)
        state = getattr(value, "state", None)
        bits = [type(value).__name__]
        if ident is not None:
            bits.append(_short(ident))
        if state is not None:
            bits.append(str(getattr(state, "value", state)))
        return "<" + " ".join(bits) + ">"
    if value is None:
        return "None"
    return repr(value) if len(repr(value)) < 30 else repr(value)[:27] + "…"
