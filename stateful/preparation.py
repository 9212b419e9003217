"""Machine operations of class ``preparation``: captures (PREP-2) in the
differential machine's rules and views, in the concurrent machine's mixes
of catalog and memory calls, and in a family of its own where one writer
updates the world's agent, persona, skill, trait, overlay and session one
after the other, twice, while other branches capture.

A capture reads every list a preparation reads (:class:`Capture`) and spans
every object (``keys=None``), so the linearizability checker must place it
at one instant: a capture that saw a write but not one completed before it
began, or half of what it read at one moment and half at another, has no
such instant and refutes PREP-2.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import strategies as st

from cortex_spec import catalog, memory

from .kinds import _example, _held, _keys, _world_refs
from .ops import Op
from .plugin import ClassMachines, Family, Race, World
from .world import ROLES, ctx_of, make_op, sampled

NAME = "preparation"

#: What a capture reads: every list of a run's preparation, from its ctx.
READS = ("list_agents", "list_personas", "list_skills", "list_traits", "list_overlays", "list_sessions")


@attrs.frozen
class Capture:
    """The ``collect`` of the machines' captures: the lists of :data:`READS`
    through the sources, as one tuple (hashable, rendered as
    ``Capture(...)`` in a failing scenario's script)."""

    reads: tuple[str, ...] = READS

    def __call__(self, sources: Any) -> tuple:
        return tuple(tuple(getattr(sources, name)()) for name in self.reads)


CAPTURE = Capture()


def capture(c: Any, label: str = "") -> Op:
    return make_op("capture_preparation", c, CAPTURE, keys=None, label=label)


def r_capture(m: Any, data: Any) -> Op:
    return capture(data.draw(m.ctx_choice(), "ctx"))


def views(ctxs: list, known: dict) -> dict[str, Op]:
    """A capture from every context: the whole preparation, compared with
    the reference's (MACH-DIFF-2)."""
    return {f"capture@{c.scope.canonical()}": capture(c) for c in ctxs}


_CAPTURE_ROLES = ("exact", "exact", "ancestor", "descendant")


def racing_ops(w: World) -> list[Any]:
    """A capture from the rows' scope or around it, among any catalog and
    memory calls."""
    return [lambda draw: capture(ctx_of(ROLES[draw(sampled(_CAPTURE_ROLES))]))]


# -- the family: one writer, captures ----------------------------------------------------------

#: The tables whose first world row the writer updates, in its order.
WRITTEN = tuple(t for t in (*catalog.TABLES, memory.SESSIONS) if "update" in t.ops and not t.internal)


def _owner(table: Any) -> str:
    return "memory" if table is memory.SESSIONS else "catalog"


def _updates(w: World, generation: int) -> tuple[Op, ...]:
    """Updates of the first world row of every table of :data:`WRITTEN`,
    each to a variant other than its own (generation 1 and 2 differ from
    each other and from the row as created)."""
    exact = ctx_of(ROLES["exact"])
    out = []
    for table in WRITTEN:
        first = w[_owner(table)].rows[table.name][0]
        refs = _world_refs([t for t in (catalog.TABLES if _owner(table) == "catalog" else memory.TABLES)
                            if not t.internal])
        created = next((v for v in range(3) if _example(table, v, refs, id=first.id, **_same(table, first)) == first),
                       0)
        row = _example(table, (created + generation) % 3, refs, id=first.id, **_same(table, first))
        out.append(make_op(table.method("update"), exact, row, keys=_keys(table), label=f"writer g{generation}"))
    return tuple(out)


def _same(table: Any, first: Any) -> dict[str, Any]:
    """The fields an update keeps as the world row has them: its unique
    keys' conditions and its name (a rename could collide)."""
    fields = dict(_held(table))
    if table.by_name:
        fields[table.by_name] = getattr(first, table.by_name)
    return fields


def _writer_and_captures(draw: Any, w: World, declared: frozenset[str]) -> Race:
    writer = _updates(w, 1) + _updates(w, 2)
    readers = tuple(
        tuple(capture(ctx_of(ROLES[draw(sampled(_CAPTURE_ROLES))]), label="capture")
              for _ in range(draw(st.integers(1, 3))))
        for _ in range(draw(st.integers(1, 3)))
    )
    return Race(("PREP-2",), (writer, *readers))


FAMILIES = (Family("writer-and-captures", _writer_and_captures, ("PREP-2", "RSC-GEN-12"), weight=0.3, cost=5.0),)

MACHINES = ClassMachines(
    name=NAME,
    rules={"preparation_capture": r_capture},
    views=views,
    racing_ops=racing_ops,
    families=FAMILIES,
    weight=0.4,
    cost=3.0,
)
