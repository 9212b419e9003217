"""Conformance class ``runs``: runs, steps and tool calls (spec: runs.md).

This module holds the entities, filters and the store protocol of the
class; runs, steps and tool calls are stored kinds (:mod:`.kinds`), so their
validation, codecs and storage come from their description.  Every rule
cited (``RUN-*``, ``STEP-*``, ``TCALL-*``) is a clause of
``cortex_spec/spec/runs.md``.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

from . import ids
from .context import Context, require_scope
from .entities import entity
from .errors import RunNotFound
from .kinds import (
    Choice,
    Count,
    Filter,
    Id,
    Instant,
    Json,
    Listing,
    Optional,
    Record,
    Short,
    Table,
    Text,
    check_protocol,
    created,
    field,
    install,
    key,
    owned,
    principal,
    scope_field,
    update_fields,
    updated,
)
from .scope import Scope
from .views import Refs

__all__ = [
    "RunState",
    "TERMINAL_STATES",
    "Lease",
    "Run",
    "Step",
    "ToolCall",
    "RunFilter",
    "RunStore",
    "apply_run_update",
    "RUNS",
    "STEPS",
    "TOOL_CALLS",
    "TABLES",
    "RunsMethods",
    "FIRST_REVISION",
]


class RunState(str, Enum):
    """RUN-ENT-1: the six run states; the last three are terminal."""

    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


TERMINAL_STATES = frozenset({RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED})


@entity
class Lease:
    """A worker's hold on a running run (written only by the ``leases`` class)."""

    owner: str = field(Short())
    expires_at: datetime = field(Instant())


#: RUN-REV-1: the revision ``create_run`` stores.
FIRST_REVISION = 1


@entity
class Run:
    """One agent run.  See the field table of runs.md for who writes what:
    ``update_run`` writes the fields marked ``update`` (RUN-UPD-2); the
    owned ones only the leases, suspensions and a2a classes write."""

    id: str = key(ids.RUN)
    agent_id: str = field(Id(ids.AGENT), update=True)
    session_id: str | None = field(Optional(Id(ids.SESSION)), default=None, update=True)
    scope: Scope = scope_field()
    state: RunState | str = field(Choice(RunState), default=RunState.CREATED, update=True)
    input: str = field(Text(), default="", update=True)
    output: str = field(Text(), default="", update=True)
    error: str = field(Text(), default="", update=True)
    step_count: int = field(Count(), default=0, update=True)
    tokens_used: int = field(Count(), default=0, update=True)
    started_at: datetime | None = field(Optional(Instant()), default=None, update=True)
    completed_at: datetime | None = field(Optional(Instant()), default=None, update=True)
    persona_ref: str = field(Short(), default="", update=True)
    metadata: dict[str, Any] = field(Json(), factory=dict, update=True)
    principal: str | None = principal()
    reply_route: dict[str, Any] | None = field(Optional(Json()), default=None)
    #: RUN-ENT-2: written only by class ``leases`` (and cleared by update_run)
    lease: Lease | None = owned(Optional(Record(Lease)), None)
    reclaim_count: int = owned(Count(), 0)
    notified_at: datetime | None = owned(Optional(Instant()), None)
    #: advanced by every write of the run through the runs and suspensions
    #: methods (RUN-REV); never taken from an argument
    revision: int = owned(Count(), 0, initial=(FIRST_REVISION,))
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


@entity
class Step:
    """One step of a run; never updated or deleted (STEP-5)."""

    id: str = key(ids.STEP)
    run_id: str = field(Id(ids.RUN))
    scope: Scope = scope_field()
    index: int = field(Count(), default=0)
    type: str = field(Short(), default="")
    input: str = field(Text(), default="")
    output: str = field(Text(), default="")
    tokens_used: int = field(Count(), default=0)
    started_at: datetime | None = field(Optional(Instant()), default=None)
    completed_at: datetime | None = field(Optional(Instant()), default=None)
    metadata: dict[str, Any] = field(Json(), factory=dict)
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


@entity
class ToolCall:
    """One tool call of a step; never updated or deleted (STEP-5)."""

    id: str = key(ids.TOOL_CALL)
    step_id: str = field(Id(ids.STEP))
    run_id: str = field(Id(ids.RUN))
    scope: Scope = scope_field()
    tool_name: str = field(Short(nonempty=True), default="")
    arguments: str = field(Text(), default="")
    result: str = field(Text(), default="")
    error: str = field(Text(), default="")
    started_at: datetime | None = field(Optional(Instant()), default=None)
    completed_at: datetime | None = field(Optional(Instant()), default=None)
    metadata: dict[str, Any] = field(Json(), factory=dict)
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


@entity
class RunFilter:
    """Filter of ``list_runs``/``count_runs`` (RUN-LIST-1..5)."""

    agent_id: str | None = None
    state: RunState | str | None = None
    exact: bool = False
    limit: int = 0
    offset: int = 0


# -- runs: a stored kind with a hand-written update ------------------------------------------
#
# Validation (RUN-CREATE-1/3, RUN-UPD-2/3/7, RUN-LIST-5), codecs and
# storage come from the description; update_run is written once below, on
# the storage primitives: unconditional and whole over the mutable fields,
# the revision advanced in the same step, the lease kept only while running.


def apply_run_update(fields: dict[str, Any]) -> dict[str, Any]:
    """What ``update_run`` writes: the validated mutable ``fields``; a run
    that leaves ``running`` loses its lease in the same step (LEASE-CLEAR-1),
    one that stays keeps it (LEASE-CLEAR-2)."""
    if fields["state"] == RunState.RUNNING:
        return fields
    return {**fields, "lease": None}


RUNS = Table(
    Run, "runs", "runs", RunNotFound, "run", "runs", ops=("create", "get"),
    listings=(Listing("list_runs", "count_runs",
                      filters=(Filter("agent_id", "agent_id"), Filter("state", "state")),
                      order=(("created_at", True), ("id", True)), filter_class=RunFilter),),
    clauses={"create": "RUN-CREATE-1", "create.id": "RUN-CREATE-2", "get": "RUN-GET-1",
             "list": "RUN-LIST-1", "list.order": "RUN-LIST-2", "list.page": "RUN-LIST-3",
             "count": "RUN-LIST-4", "fields": "RUN-CREATE-1"},
)


# -- steps and tool calls: stored kinds (cortex_spec.kinds) ------------------------------------
#
# Append-only (STEP-5): a create and one listing by parent each; neither
# reference is checked (STEP-3, TCALL-1) and ``(run_id, index)`` is not
# unique.  Their validation, codecs and storage come from the description.
# Neither has a by-id read, so no method raises their not-found class (the
# run's, as they are the run's rows).

STEPS = Table(
    Step, "steps", "runs", RunNotFound, "step", "steps", ops=("create",),
    listings=(Listing("list_steps", parent="run_id", order=(("index", False), ("id", False)),
                      exact=False, paged=False),),
    clauses={"create": "STEP-1", "create.id": "STEP-2", "list": "STEP-4", "fields": "STEP-1"},
)
TOOL_CALLS = Table(
    ToolCall, "tool_calls", "runs", RunNotFound, "tool_call", "tool_calls", ops=("create",),
    listings=(Listing("list_tool_calls", parent="step_id", exact=False, paged=False),),
    clauses={"create": "TCALL-1", "create.id": "TCALL-1", "create.nonempty": "TCALL-1", "list": "TCALL-2",
             "fields": "TCALL-1"},
)

#: The stored kinds of the class.
TABLES = (RUNS, STEPS, TOOL_CALLS)


if TYPE_CHECKING:  # the methods install() generates below, declared for type checkers (cortex_spec.stubs)
    from .generated import GeneratedRunsMethods as _Generated
else:
    _Generated = object


class RunsMethods(_Generated):
    """The class's store methods on ``self._crud`` (a :class:`~.kinds.Crud`
    over the backend's storage): the generated methods of :data:`TABLES`
    and ``update_run``.  A backend's runs mixin inherits this (the Mongo one
    keeps its own run methods: a run lives in its slot document)."""

    _crud: Any

    def update_run(self, ctx: Context, run: Run) -> Run:
        """RUN-UPD-1..7: one write of the visible run, unconditional on its
        old values (the last writer wins, whole): the mutable fields,
        ``updated_at``, the lease :func:`apply_run_update` clears, and the
        next revision (RUN-REV-2), refused whole if the run as stored breaks
        the size limit (RUN-UPD-7)."""
        scope = require_scope(ctx)
        run_id, fields = update_fields(RUNS, run)
        stored: Run | None = self._crud.storage.update(RUNS, run_id, scope, apply_run_update(fields),
                                                       self._crud.now(), advance=("revision",))
        if stored is None:
            raise RunNotFound(f"run {run_id} not found")  # RUN-UPD-1
        return stored


install(RunsMethods, TABLES)


# -- the protocol ---------------------------------------------------------------


@runtime_checkable
class RunStore(Protocol):
    """What a store of class ``runs`` provides.

    Every method takes ``ctx`` first, refuses a non-``Context`` with
    ``InvalidArgument`` and a zero scope with ``NoScope`` before touching
    storage (SCOPE-ZERO-1..3), and applies prefix visibility (SCOPE-VIS,
    SCOPE-BYID).
    """

    def create_run(self, ctx: Context, run: Run) -> Run:
        """Store a new run stamped with ``ctx.scope``/``ctx.principal`` and clock
        now (RUN-CREATE-1); an id used in any scope → ``AlreadyExists``
        (RUN-CREATE-2); bad fields → ``InvalidArgument`` (RUN-CREATE-3)."""
        ...

    def get_run(self, ctx: Context, run_id: str) -> Run:
        """The visible run, else ``RunNotFound`` (RUN-GET-1)."""
        ...

    def update_run(self, ctx: Context, run: Run) -> Run:
        """Write the mutable fields, unconditionally and whole (RUN-UPD-1..7)."""
        ...

    def list_runs(self, ctx: Context, filter: RunFilter | None = None) -> list[Run]:
        """Visible runs, ``created_at`` DESC then ``id`` DESC (RUN-LIST-1..3)."""
        ...

    def count_runs(self, ctx: Context, filter: RunFilter | None = None) -> int:
        """How many runs ``list_runs`` selects, ignoring the page (RUN-LIST-4)."""
        ...

    def create_step(self, ctx: Context, step: Step) -> Step:
        """STEP-1..3: run not checked; ``(run_id, index)`` not unique."""
        ...

    def list_steps(self, ctx: Context, run_id: str) -> list[Step]:
        """Visible steps of the run, ``index`` ASC then ``id`` ASC (STEP-4)."""
        ...

    def create_tool_call(self, ctx: Context, tool_call: ToolCall) -> ToolCall:
        """TCALL-1: step and run not checked."""
        ...

    def list_tool_calls(self, ctx: Context, step_id: str) -> list[ToolCall]:
        """Visible tool calls of the step, ``created_at`` ASC then ``id`` ASC (TCALL-2)."""
        ...


check_protocol(RunStore, TABLES, RunsMethods)


# -- what the class shows (cortex_spec.views) ------------------------------------------------


def view(store: Any, contexts: Sequence[Context], refs: Refs) -> dict[str, Any]:
    """Runs from each caller, and the steps and tool calls of the runs and
    steps named in ``refs``."""
    out: dict[str, Any] = {}
    for c in contexts:
        key = c.scope.canonical()
        out[f"runs@{key}"] = store.list_runs(c)
        for rid in refs.get("run_ids", ()):
            out[f"steps[{rid}]@{key}"] = store.list_steps(c, rid)
        for sid in refs.get("step_ids", ()):
            out[f"tool_calls[{sid}]@{key}"] = store.list_tool_calls(c, sid)
    return out


# -- builders for tests ------------------------------------------------------------------------
# A valid run, step or tool call, fresh ids and the fields given; cortex_spec.testing re-exports them.


def make_run(state: RunState | str = RunState.CREATED, **fields: Any) -> Run:
    fields.setdefault("id", ids.new_id(ids.RUN))
    fields.setdefault("agent_id", ids.new_id(ids.AGENT))
    return Run(state=state, **fields)


def make_step(run_id: str | None = None, **fields: Any) -> Step:
    fields.setdefault("id", ids.new_id(ids.STEP))
    return Step(run_id=run_id or ids.new_id(ids.RUN), **fields)


def make_tool_call(step_id: str | None = None, run_id: str | None = None, **fields: Any) -> ToolCall:
    fields.setdefault("id", ids.new_id(ids.TOOL_CALL))
    fields.setdefault("tool_name", "search")
    return ToolCall(
        step_id=step_id or ids.new_id(ids.STEP), run_id=run_id or ids.new_id(ids.RUN), **fields
    )


#: The builders of this module (:mod:`cortex_spec.testing` re-exports them).
BUILDERS: tuple[str, ...] = ("make_run", "make_step", "make_tool_call")
__all__ += BUILDERS
