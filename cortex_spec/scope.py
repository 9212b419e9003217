"""`Scope`: the hierarchical tenant boundary (spec: scope.md).

A scope is an ordered tuple of at most three ``(key, value)`` levels, for
example ``workspace=acme/project=billing``.  It is a plain immutable value:
stores compare scopes, they never interpret keys.

>>> s = Scope.parse("workspace=acme/project=billing")
>>> s.depth, s.get("project"), s.canonical()
(2, 'billing', 'workspace=acme/project=billing')
>>> Scope(("workspace", "acme")).covers(s)
True

Invalid scopes cannot be built: every rule of SCOPE-VAL raises
:class:`~cortex_spec.errors.InvalidArgument` at construction, so a store never
sees one.
"""

from __future__ import annotations

from typing import Iterator

from .errors import InvalidArgument

__all__ = ["Scope", "MAX_DEPTH", "MAX_PART_LENGTH"]

#: SCOPE-VAL-1: the deepest a scope may be.
MAX_DEPTH = 3
#: SCOPE-VAL-5: the longest key or value, in code points.
MAX_PART_LENGTH = 255


def _check_part(part: object, what: str) -> str:
    if not isinstance(part, str):
        raise InvalidArgument(f"scope {what} must be a str, got {type(part).__name__}")
    if part == "":
        raise InvalidArgument(f"scope {what} must not be empty")  # SCOPE-VAL-2
    if "/" in part:
        raise InvalidArgument(f"scope {what} {part!r} contains '/'")  # SCOPE-VAL-3
    if what == "key" and "=" in part:
        raise InvalidArgument(f"scope key {part!r} contains '='")  # SCOPE-VAL-4
    if "\x00" in part:
        raise InvalidArgument(f"scope {what} contains U+0000")  # SCOPE-VAL-5
    if len(part) > MAX_PART_LENGTH:
        raise InvalidArgument(
            f"scope {what} is {len(part)} code points long (at most {MAX_PART_LENGTH})"
        )
    try:
        part.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"scope {what} is not encodable as UTF-8") from None
    return part


class Scope:
    """An immutable, validated, ordered tuple of ``(key, value)`` levels.

    ``Scope()`` is the zero scope ("no scope", never "every scope").
    ``Scope(("workspace", "w1"), ("project", "p1"))`` has depth 2.
    """

    __slots__ = ("_levels", "_canonical", "_hash")

    _levels: tuple[tuple[str, str], ...]
    _canonical: str
    _hash: int  # of the levels, computed once: scopes key the stores' caches

    def __init__(self, *levels: tuple[str, str]) -> None:
        if len(levels) > MAX_DEPTH:
            raise InvalidArgument(
                f"a scope has at most {MAX_DEPTH} levels, got {len(levels)}"
            )  # SCOPE-VAL-1
        checked = []
        for level in levels:
            if not isinstance(level, (tuple, list)) or len(level) != 2:
                raise InvalidArgument(
                    f"a scope level must be a (key, value) pair, got {level!r}"
                )  # SCOPE-VAL-6
            key, value = level
            checked.append((_check_part(key, "key"), _check_part(value, "value")))
        object.__setattr__(self, "_levels", tuple(checked))
        object.__setattr__(
            self, "_canonical", "/".join(f"{k}={v}" for k, v in self._levels)
        )
        object.__setattr__(self, "_hash", hash(("Scope", self._levels)))

    # -- construction helpers -------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> "Scope":
        """Inverse of :meth:`canonical` (SCOPE-CANON-2, SCOPE-CANON-3)."""
        if not isinstance(text, str):
            raise InvalidArgument(f"a scope string must be a str, got {type(text).__name__}")
        if text == "":
            return cls()
        levels = []
        for segment in text.split("/"):
            if segment == "":
                raise InvalidArgument(f"empty segment in scope string {text!r}")
            key, sep, value = segment.partition("=")
            if not sep:
                raise InvalidArgument(f"segment {segment!r} of {text!r} has no '='")
            levels.append((key, value))
        return cls(*levels)

    @classmethod
    def of(cls, **levels: str) -> "Scope":
        """``Scope.of(workspace="w1", project="p1")``: levels in keyword order."""
        return cls(*levels.items())

    def child(self, key: str, value: str) -> "Scope":
        """This scope with one more level appended."""
        return Scope(*self._levels, (key, value))

    def parent(self) -> "Scope":
        """This scope without its last level (the zero scope stays zero)."""
        return Scope(*self._levels[:-1])

    # -- the value -------------------------------------------------------------

    @property
    def levels(self) -> tuple[tuple[str, str], ...]:
        return self._levels

    @property
    def depth(self) -> int:
        return len(self._levels)

    @property
    def is_zero(self) -> bool:
        """SCOPE-MODEL-2: true for the scope with no levels."""
        return not self._levels

    def get(self, key: str) -> str | None:
        """Value of the first level whose key is ``key`` (SCOPE-MODEL-5)."""
        for k, v in self._levels:
            if k == key:
                return v
        return None

    def canonical(self) -> str:
        """``key=value`` per level joined by ``/``; ``""`` for zero (SCOPE-CANON-1)."""
        return self._canonical

    def covers(self, other: "Scope") -> bool:
        """True iff ``self`` is ``other`` or one of its ancestors (SCOPE-COVERS-1).

        Comparison is positional on whole keys and values: ``ws=ws1`` does
        not cover ``ws=ws10``.
        """
        if not isinstance(other, Scope):
            raise TypeError(f"covers() needs a Scope, got {type(other).__name__}")
        n = len(self._levels)
        return n <= len(other._levels) and other._levels[:n] == self._levels

    def ancestors(self) -> list["Scope"]:
        """Every non-zero proper ancestor, shallowest first."""
        return [Scope(*self._levels[:i]) for i in range(1, len(self._levels))]

    # -- protocol ---------------------------------------------------------------

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Scope is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Scope is immutable")

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._levels)

    def __len__(self) -> int:
        return len(self._levels)

    def __getitem__(self, index: int) -> tuple[str, str]:
        return self._levels[index]

    def __bool__(self) -> bool:
        return bool(self._levels)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Scope):
            return NotImplemented
        return self._levels == other._levels

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Scope.parse({self._canonical!r})"

    def __str__(self) -> str:
        return self._canonical

    def __reduce__(self) -> tuple[type[Scope], tuple[tuple[str, str], ...]]:
        return (Scope, self._levels)

    def __copy__(self) -> "Scope":
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> "Scope":
        return self
