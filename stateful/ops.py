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
from typing import Any, Callable, Hashable, Iterable

import attrs

from cortex_spec import errors
from cortex_spec.clock import to_millis
from cortex_spec.context import Context
from cortex_spec.scope import Scope

__all__ = [
    "Op",
    "Outcome",
    "StoreSession",
    "normalize",
    "outcome_of",
    "run_op",
    "UNKNOWN",
    "py",
    "HeldToken",
    "Bindings",
    "OpaqueMap",
]


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
    #: keyword arguments, as ``((name, value), ...)`` (for keyword-only parameters)
    kwargs: tuple[tuple[str, Any], ...] = ()
    #: "" for a method of the store itself; else the name of the object the
    #: store opened that the method belongs to (``"gateway"``), found through
    #: :meth:`StoreSession.target`
    target: str = ""
    #: the opaque field of the result that later calls of a scenario refer
    #: to (a claim's ``claim_token``, see :class:`HeldToken`), or ""
    binds: str = ""

    def __call__(self, store: Any) -> Any:
        obj = store.target(self.target) if self.target else store
        return getattr(obj, self.method)(self.ctx, *self.args, **dict(self.kwargs))

    def render(self, store_name: str = "store") -> str:
        """The call as Python source."""
        args = ", ".join([py(self.ctx)] + [py(a) for a in self.args]
                         + [f"{k}={py(v)}" for k, v in self.kwargs])
        return f"{self.target or store_name}.{self.method}({args})"

    def short(self) -> str:
        """A compact one-line form for timelines."""
        args = ", ".join([_short(a) for a in self.args] + [f"{k}={_short(v)}" for k, v in self.kwargs])
        scope = self.ctx.scope.canonical() or "∅"
        prefix = f"{self.target}." if self.target else ""
        return f"{prefix}{self.method}[{scope}]({args})"


class StoreSession:
    """A store together with the objects it opened for the classes whose
    methods do not live on the store itself (class ``gateway``: the object
    ``open_gateway`` returns).  Ops with a ``target`` run on those objects;
    everything else (attributes included) goes to the store.

    ``handles`` maps a target name to whatever manages the opened object
    (see :func:`cortex_spec.stateful.classes.open_session`); ``target(name)``
    is its current ``obj``.
    """

    def __init__(self, store: Any, handles: dict[str, Any] | None = None) -> None:
        object.__setattr__(self, "store", store)
        object.__setattr__(self, "handles", dict(handles or {}))

    def target(self, name: str) -> Any:
        return self.handles[name].obj

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def __repr__(self) -> str:
        return f"StoreSession({self.store!r}, {sorted(self.handles)})"


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
    if value is None:
        return None
    kind = type(value)
    handler = _NORMALIZERS.get(kind)
    if handler is None:
        handler = _NORMALIZERS[kind] = _normalizer(kind)
    return handler(value)


def _datetime(value: datetime) -> Hashable:
    if value.utcoffset() is None:
        return ("naive-datetime", value.isoformat())
    return ("t", to_millis(value))


def _normalizer(kind: type) -> Callable[[Any], Hashable]:
    """How :func:`normalize` represents a value of type ``kind`` (decided
    once per type: the machines normalise every value every call returns)."""
    if issubclass(kind, str) and not issubclass(kind, enum.Enum):
        return lambda v: v
    if issubclass(kind, bool):
        return lambda v: ("bool", v)
    if issubclass(kind, int):
        return lambda v: ("int", v)
    if issubclass(kind, float):
        return lambda v: ("float", v)
    if issubclass(kind, enum.Enum):
        return lambda v: v.value
    if issubclass(kind, datetime):
        return _datetime
    if issubclass(kind, Scope):
        return lambda v: ("scope", v.canonical())
    if issubclass(kind, dict):
        return lambda v: ("dict", tuple(sorted((k, normalize(x)) for k, x in v.items())))
    if issubclass(kind, list):
        return lambda v: ("list", tuple(normalize(x) for x in v))
    if issubclass(kind, tuple):
        return lambda v: ("tuple", tuple(normalize(x) for x in v))
    if attrs.has(kind):
        return _attrs_normalizer(kind)
    return lambda v: ("repr", repr(v))


def _attrs_normalizer(kind: type) -> Callable[[Any], Hashable]:
    """``(class name, ((field, normalized value), ...))`` for an attrs class,
    made as one expression over the class's fields (a loop over them, with
    a ``getattr`` each, cost half as much again: 12 against 8 µs an entity;
    the machines normalise every entity every call returns)."""
    fields = tuple(f.name for f in attrs.fields(kind))
    pairs = "".join(f"({name!r}, _normalize(value.{name})), " for name in fields)
    made: Callable[[Any], Hashable] = eval(  # noqa: S307 - attrs field names are identifiers
        f"lambda value: (_name, ({pairs}))", {"_normalize": normalize, "_name": kind.__name__})
    return made


_NORMALIZERS: dict[type, Callable[[Any], Hashable]] = {}


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
    if hasattr(value, "render_py"):
        return value.render_py()
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


# -- opaque values: claim tokens ----------------------------------------------------------
#
# Some values a store creates are opaque and differ between any two stores:
# a delivery's claim token (A2A-DLV-6) is only ever compared for equality.
# The machines handle them in three ways:
#
# * the differential machine keeps an :class:`OpaqueMap`, a bijection between
#   the backend's tokens and the reference's, bound where both return a value
#   in an opaque field (``claim_token``) and applied to every later argument
#   and result, so a backend that re-issues an old token, or accepts a stale
#   one, still shows up as a difference;
# * a concurrent scenario is drawn before anything runs, so its calls name a
#   token by a :class:`HeldToken` placeholder, resolved when the call is made
#   from the tokens that claims of that execution returned (:class:`Bindings`);
# * the linearizability model adopts the token the backend reported for a
#   claim (see ``model.py``).


@attrs.frozen
class HeldToken:
    """The claim token a worker holds on a delivery, resolved at call time:
    the token its own branch's latest successful claim got, else the one the
    setup's claim got (a late worker still holding an old claim), else a
    token no store ever issued."""

    delivery_id: str

    def fill(self, bindings: "Bindings", lane: int) -> str:
        return bindings.token(self.delivery_id, lane)

    def render_py(self) -> str:
        return f"held.get({self.delivery_id!r}, 'never-issued')"


NEVER_ISSUED = "never-issued"


class Bindings:
    """The opaque values one execution has seen, per branch (lane 0 is the
    setup)."""

    def __init__(self) -> None:
        self._tokens: dict[tuple[int, str], str] = {}

    def observe(self, outcome: Outcome, lane: int) -> None:
        raw = outcome.raw if outcome.ok else None
        token = getattr(raw, "claim_token", None)
        key = getattr(raw, "id", None)
        if isinstance(token, str) and isinstance(key, str):
            self._tokens[(lane, key)] = token

    def token(self, delivery_id: str, lane: int) -> str:
        for where in (lane, 0):
            if (where, delivery_id) in self._tokens:
                return self._tokens[(where, delivery_id)]
        return NEVER_ISSUED

    def fill(self, op: Op, lane: int) -> Op:
        """``op`` with every placeholder argument replaced by its value."""
        if not any(hasattr(a, "fill") for a in op.args) and not any(
            hasattr(v, "fill") for _, v in op.kwargs
        ):
            return op
        args = tuple(a.fill(self, lane) if hasattr(a, "fill") else a for a in op.args)
        kwargs = tuple((k, v.fill(self, lane) if hasattr(v, "fill") else v) for k, v in op.kwargs)
        return attrs.evolve(op, args=args, kwargs=kwargs)


class OpaqueMap:
    """A bijection between a backend's opaque values and the reference's."""

    def __init__(self, fields: Iterable[str]) -> None:
        self.fields = frozenset(fields)
        self.to_ref: dict[str, str] = {}
        self.to_sut: dict[str, str] = {}

    def bind(self, sut: Hashable, ref: Hashable) -> None:
        """Walk two normalised values side by side and pair the strings found
        in opaque fields (a pair is made once, never remade)."""
        if not self.fields or not isinstance(sut, tuple) or not isinstance(ref, tuple):
            return
        if (len(sut) == 2 == len(ref) and sut[0] == ref[0] and sut[0] in self.fields
                and isinstance(sut[1], str) and isinstance(ref[1], str)):
            if sut[1] not in self.to_ref and ref[1] not in self.to_sut:
                self.to_ref[sut[1]] = ref[1]
                self.to_sut[ref[1]] = sut[1]
            return
        if len(sut) == len(ref):
            for a, b in zip(sut, ref):
                self.bind(a, b)

    def translate(self, value: Any) -> Any:
        """A normalised value (or an argument) with backend values replaced
        by their reference twins."""
        if isinstance(value, str):
            return self.to_ref.get(value, value)
        if isinstance(value, tuple) and not attrs.has(type(value)):
            return tuple(self.translate(v) for v in value)
        return value

    def translate_op(self, op: Op) -> Op:
        if not self.to_ref:
            return op
        return attrs.evolve(
            op,
            args=tuple(self.translate(a) if isinstance(a, str) else a for a in op.args),
            kwargs=tuple((k, self.translate(v) if isinstance(v, str) else v) for k, v in op.kwargs),
        )

    def translate_outcome(self, outcome: Outcome) -> Outcome:
        if not self.to_ref or outcome.kind != "ok":
            return outcome
        return Outcome(outcome.kind, self.translate(outcome.value), raw=outcome.raw)
