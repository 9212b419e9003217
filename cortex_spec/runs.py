"""Conformance class ``runs``: runs, steps and tool calls (spec: runs.md).

This module holds the entities, filters, validation and the store protocol
of the class; steps and tool calls are stored kinds (:mod:`.kinds`), so
their validation, codecs and storage come from their description.  Every rule cited (``RUN-*``, ``STEP-*``, ``TCALL-*``) is a
clause of ``cortex_spec/spec/runs.md``.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

import attrs

from . import ids
from .context import Context
from .entities import entity, replace
from .errors import InvalidArgument, RunNotFound
from .kinds import (
    Count,
    Id,
    Instant,
    Json,
    Listing,
    Optional,
    Short,
    Table,
    Text,
    check_protocol,
    created,
    field,
    install,
    key,
    scope_field,
    updated,
)
from .scope import Scope
from .validation import (
    check_bool,
    check_count,
    check_entity_size,
    check_enum,
    check_json_object,
    check_optional_instant,
    check_optional_json_object,
    check_page,
    check_short_str,
    check_str,
)
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
    "validate_new_run",
    "validate_run_update",
    "apply_run_update",
    "validate_run_filter",
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

    owner: str
    expires_at: datetime


@entity
class Run:
    """One agent run.  See the field table of runs.md for who writes what."""

    id: str
    agent_id: str
    session_id: str | None = None
    scope: Scope = Scope()
    state: RunState | str = RunState.CREATED
    input: str = ""
    output: str = ""
    error: str = ""
    step_count: int = 0
    tokens_used: int = 0
    started_at: datetime | None = None
    completed_at: datetime | None = None
    persona_ref: str = ""
    metadata: dict[str, Any] = attrs.Factory(dict)
    principal: str | None = None
    reply_route: dict[str, Any] | None = None
    lease: Lease | None = None
    reclaim_count: int = 0
    notified_at: datetime | None = None
    #: advanced by every write of the run through the runs and suspensions
    #: methods (RUN-REV); never taken from an argument
    revision: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None


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


# -- validation (the store calls these before touching storage) --------------

#: RUN-REV-1: the revision ``create_run`` stores.
FIRST_REVISION = 1

#: RUN-UPD-2: the fields ``update_run`` writes from its argument.
RUN_MUTABLE_FIELDS = (
    "agent_id",
    "session_id",
    "state",
    "input",
    "output",
    "error",
    "step_count",
    "tokens_used",
    "started_at",
    "completed_at",
    "persona_ref",
    "metadata",
)


def _mutable_run_fields(run: Run) -> dict[str, Any]:
    return {
        "agent_id": ids.check_id(run.agent_id, ids.AGENT, "run.agent_id"),
        "session_id": ids.check_optional_id(run.session_id, ids.SESSION, "run.session_id"),
        "state": check_enum(run.state, RunState, "run.state"),
        "input": check_str(run.input, "run.input"),
        "output": check_str(run.output, "run.output"),
        "error": check_str(run.error, "run.error"),
        "step_count": check_count(run.step_count, "run.step_count"),
        "tokens_used": check_count(run.tokens_used, "run.tokens_used"),
        "started_at": check_optional_instant(run.started_at, "run.started_at"),
        "completed_at": check_optional_instant(run.completed_at, "run.completed_at"),
        "persona_ref": check_short_str(run.persona_ref, "run.persona_ref"),
        "metadata": check_json_object(run.metadata, "run.metadata"),
    }


def validate_new_run(run: object, ctx: Context, now: datetime) -> Run:
    """RUN-CREATE-1/3: the run as it will be stored, or ``InvalidArgument``."""
    if not isinstance(run, Run):
        raise InvalidArgument(f"run must be a Run, got {type(run).__name__}")
    stored = Run(
        id=ids.check_id(run.id, ids.RUN, "run.id"),
        scope=ctx.scope,
        principal=ctx.principal,
        reply_route=check_optional_json_object(run.reply_route, "run.reply_route"),
        lease=None,
        reclaim_count=0,
        notified_at=None,
        revision=FIRST_REVISION,
        created_at=now,
        updated_at=now,
        **_mutable_run_fields(run),
    )
    check_entity_size(stored, "run")
    return stored


def validate_run_update(run: object) -> tuple[str, dict[str, Any]]:
    """RUN-UPD-2/3/7: ``(id, fields to write)``; other fields are ignored."""
    if not isinstance(run, Run):
        raise InvalidArgument(f"run must be a Run, got {type(run).__name__}")
    run_id = ids.check_id(run.id, ids.RUN, "run.id")
    return run_id, _mutable_run_fields(run)


def apply_run_update(stored: Run, fields: dict[str, Any], now: datetime) -> Run:
    """The run an update will store: ``stored`` with the written ``fields``,
    ``updated_at = now`` and the next revision (RUN-REV-2), refused if it
    breaks the size limit (RUN-UPD-7).  A run that leaves ``running`` loses
    its lease in the same step (LEASE-CLEAR-1); one that stays keeps it
    (LEASE-CLEAR-2)."""
    lease = stored.lease if fields["state"] == RunState.RUNNING else None
    updated = replace(stored, updated_at=now, revision=stored.revision + 1, lease=lease, **fields)
    check_entity_size(updated, "run")
    return updated


def validate_run_filter(flt: object) -> RunFilter:
    """RUN-LIST-5: a normalised filter (``None`` means every default)."""
    if flt is None:
        return RunFilter()
    if not isinstance(flt, RunFilter):
        raise InvalidArgument(f"filter must be a RunFilter or None, got {type(flt).__name__}")
    limit, offset = check_page(flt.limit, flt.offset)
    return RunFilter(
        agent_id=ids.check_optional_id(flt.agent_id, ids.AGENT, "filter.agent_id"),
        state=None if flt.state is None else check_enum(flt.state, RunState, "filter.state"),
        exact=check_bool(flt.exact, "filter.exact"),
        limit=limit,
        offset=offset,
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

#: The stored kinds of the class (runs themselves are written by hand: their
#: revision, lease and the classes that claim them).
TABLES = (STEPS, TOOL_CALLS)


if TYPE_CHECKING:  # the methods install() generates below, declared for type checkers (cortex_spec.stubs)
    from .generated import GeneratedRunsMethods as _Generated
else:
    _Generated = object


class RunsMethods(_Generated):
    """The generated methods of :data:`TABLES` on ``self._crud`` (a
    :class:`~.kinds.Crud` over the backend's storage); a backend's runs
    mixin inherits this and writes the run methods itself."""

    _crud: Any


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


# the run methods are each backend's own; the generated ones must be declared as they are
check_protocol(RunStore, TABLES, RunsMethods, shared_only=False)


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
