"""Conformance class ``orchestration``: team configurations, team runs, the
continuation claim that elects a team's next pass and the admission of
children while the team runs (spec: orchestration.md).

Configurations and team runs are stored kinds (:mod:`.kinds`): their
create, read, update, delete and list methods are generated from the
tables below.  Two methods are written by hand, once, over a backend's
storage primitives (:class:`OrchestrationMethods`); each is one
:meth:`~.kinds.Storage.atomic` step whose read locks the team run
(``SELECT … FOR UPDATE`` on PostgreSQL, SQLite's write lock, a MongoDB
transaction), so the status it decides on is the status at its write.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from . import ids
from .context import Context, require_scope
from .entities import entity
from .errors import InvalidState, OrchestrationNotFound, OrchestrationRunNotFound
from .kinds import (
    Choice,
    Filter,
    Id,
    Json,
    Listing,
    Optional,
    Instant,
    Query,
    Short,
    Strings,
    Table,
    Text,
    Unique,
    check_protocol,
    created,
    field,
    install,
    key,
    owned,
    scope_field,
    updated,
)
from .scope import Scope

__all__ = [
    "OrchestrationStatus",
    "OrchestrationConfig",
    "OrchestrationRun",
    "ConfigFilter",
    "OrchestrationRunFilter",
    "CONFIGS",
    "TEAM_RUNS",
    "TABLES",
    "OrchestrationMethods",
    "OrchestrationStore",
]


class OrchestrationStatus(str, enum.Enum):
    """ORCH-RUN-1: a team pass executes (``running``: the only status that
    admits children), ended with work outstanding (``waiting``: only the
    continuation claim starts the next pass), or is over."""

    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


@entity
class OrchestrationConfig:
    """How a team is put together (ORCH-CFG)."""

    id: str = key(ids.ORCHESTRATION)
    name: str = field(Short(nonempty=True), default="", update=True)
    description: str = field(Text(), default="", update=True)
    scope: Scope = scope_field()
    strategy: str = field(Short(), default="", update=True)
    participants: tuple[str, ...] = field(Strings(), factory=tuple, update=True)
    settings: dict[str, Any] = field(Json(), factory=dict, update=True)
    metadata: dict[str, Any] = field(Json(), factory=dict, update=True)
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


@entity
class OrchestrationRun:
    """One run of a team (ORCH-RUN); ``child_run_ids`` are the agent runs
    admitted to it, in admission order — given at creation, then written
    only by :meth:`OrchestrationMethods.link_orchestration_child`."""

    id: str = key(ids.ORCHESTRATION_RUN)
    config_id: str | None = field(Optional(Id(ids.ORCHESTRATION)), default=None, update=True)
    scope: Scope = scope_field()
    strategy: str = field(Short(), default="", update=True)
    status: OrchestrationStatus | str = field(Choice(OrchestrationStatus), default=OrchestrationStatus.RUNNING,
                                              update=True)
    input: str = field(Text(), default="", update=True)
    output: str = field(Text(), default="", update=True)
    error: str = field(Text(), default="", update=True)
    child_run_ids: tuple[str, ...] = owned(Strings(Id(ids.RUN), unique=True), factory=tuple, on_create="keep")
    started_at: datetime | None = field(Optional(Instant()), default=None, update=True)
    completed_at: datetime | None = field(Optional(Instant()), default=None, update=True)
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


@entity
class ConfigFilter:
    """The filter of ``list_orchestrations`` / ``count_orchestrations`` (ORCH-CFG-9/10)."""

    exact: bool = False
    search: str = ""
    limit: int = 0
    offset: int = 0


@entity
class OrchestrationRunFilter:
    """The filter of ``list_orchestration_runs`` / ``count_orchestration_runs`` (ORCH-RUN-7/8)."""

    exact: bool = False
    status: OrchestrationStatus | str | None = None
    limit: int = 0
    offset: int = 0


CONFIGS = Table(
    OrchestrationConfig, "orchestrations", "orchestration", OrchestrationNotFound, "orchestration",
    "orchestrations", ops=("create", "get", "get_by_name", "update", "delete"),
    unique=(Unique(("name",), name="name"),), by_name="name",
    listings=(Listing("list_orchestrations", "count_orchestrations", search="name", filter_class=ConfigFilter),),
    clauses={
        "create": "ORCH-CFG-1",
        "create.nonempty": "ORCH-CFG-1",
        "create.id": "ORCH-CFG-2",
        "create.unique": "ORCH-CFG-2",
        "get": "ORCH-CFG-3",
        "get_by_name": "ORCH-CFG-4",
        "update": "ORCH-CFG-5",
        "update.immutable": "ORCH-CFG-6",
        "update.unique": "ORCH-CFG-7",
        "update.missing": "ORCH-CFG-5",
        "delete": "ORCH-CFG-8",
        "list": "ORCH-CFG-9",
        "search": "ORCH-CFG-9",
        "count": "ORCH-CFG-10",
        "fields": "MC-GEN-13",
        "race.unique": "ORCH-RACE-5",
        "race.rename": "ORCH-RACE-5",
        "race.delete": "ORCH-RACE-6",
    },
)

TEAM_RUNS = Table(
    OrchestrationRun, "orchestration_runs", "orchestration", OrchestrationRunNotFound, "orchestration_run",
    "orchestration_runs", ops=("create", "get", "update"),
    listings=(Listing("list_orchestration_runs", "count_orchestration_runs",
                      filters=(Filter("status", "status"),),
                      order=(("created_at", True), ("id", True)), filter_class=OrchestrationRunFilter),),
    clauses={
        "create": "ORCH-RUN-2",
        "create.id": "ORCH-RUN-3",
        "get": "ORCH-RUN-4",
        "update": "ORCH-RUN-5",
        "update.immutable": "ORCH-RUN-6",
        "update.missing": "ORCH-RUN-5",
        "list": "ORCH-RUN-7",
        "count": "ORCH-RUN-8",
        "fields": "MC-GEN-13",
    },
)

#: Every stored kind of the class, in the order of the spec.
TABLES = (CONFIGS, TEAM_RUNS)


if TYPE_CHECKING:  # the methods install() generates below, declared for type checkers (cortex_spec.stubs)
    from .generated import GeneratedOrchestrationMethods as _Generated
else:
    _Generated = object


class OrchestrationMethods(_Generated):
    """The class's store methods: the generic ones of :data:`TABLES` and the
    two coordination primitives, on ``self._crud`` (a :class:`~.kinds.Crud`
    over the backend's storage).  Every store inherits this as it is."""

    _crud: Any

    def claim_orchestration_continuation(self, ctx: Context, team_id: str) -> OrchestrationRun:
        """ORCH-CLAIM-1..4: ``waiting`` → ``running`` at exactly ``ctx.scope``."""
        scope = require_scope(ctx)
        team = Id(ids.ORCHESTRATION_RUN).check(team_id, "team_id")
        now = self._crud.now()

        def step(storage: Any) -> OrchestrationRun:
            run = _own_team_run(storage, scope, team)
            if run.status != OrchestrationStatus.WAITING:
                raise InvalidState(f"team run {team} is {run.status}, not waiting")  # ORCH-CLAIM-3
            stored = storage.update(TEAM_RUNS, team, scope, {"status": OrchestrationStatus.RUNNING}, now)
            return stored  # type: ignore[no-any-return]

        return self._crud.storage.atomic(step)  # type: ignore[no-any-return]

    def link_orchestration_child(self, ctx: Context, team_id: str, child_run_id: str) -> None:
        """ORCH-LINK-1..7: append a child to a running team run at exactly
        ``ctx.scope``; a child already there is a success."""
        scope = require_scope(ctx)
        team = Id(ids.ORCHESTRATION_RUN).check(team_id, "team_id")
        child = Id(ids.RUN).check(child_run_id, "child_run_id")  # ORCH-LINK-2
        now = self._crud.now()

        def step(storage: Any) -> None:
            run = _own_team_run(storage, scope, team)
            if child in run.child_run_ids:
                return  # ORCH-LINK-3: a retried link, whatever the status
            if run.status != OrchestrationStatus.RUNNING:
                raise InvalidState(f"team run {team} is {run.status}: it admits no child")  # ORCH-LINK-5
            storage.update(TEAM_RUNS, team, scope, {"child_run_ids": run.child_run_ids + (child,)}, now)

        self._crud.storage.atomic(step)


def _own_team_run(storage: Any, scope: Scope, team: str) -> OrchestrationRun:
    """ORCH-CLAIM-1 / ORCH-LINK-1: the team run stored at exactly ``scope``."""
    rows = storage.select(TEAM_RUNS, Query(scope, exact=True, where=(("id", team),)))
    if not rows:
        raise OrchestrationRunNotFound(f"team run {team} not found")
    return rows[0]  # type: ignore[no-any-return]


install(OrchestrationMethods, TABLES)


@runtime_checkable
class OrchestrationStore(Protocol):
    """What a store of class ``orchestration`` provides (ORCH-*)."""

    def create_orchestration(self, ctx: Context, orchestration: OrchestrationConfig) -> OrchestrationConfig: ...
    def get_orchestration(self, ctx: Context, orchestration_id: str) -> OrchestrationConfig: ...
    def get_orchestration_by_name(self, ctx: Context, name: str) -> OrchestrationConfig: ...
    def update_orchestration(self, ctx: Context, orchestration: OrchestrationConfig) -> OrchestrationConfig: ...
    def delete_orchestration(self, ctx: Context, orchestration_id: str) -> None: ...
    def list_orchestrations(self, ctx: Context, filter: ConfigFilter | None = None) -> list[OrchestrationConfig]: ...
    def count_orchestrations(self, ctx: Context, filter: ConfigFilter | None = None) -> int: ...

    def create_orchestration_run(self, ctx: Context, orchestration_run: OrchestrationRun) -> OrchestrationRun: ...
    def get_orchestration_run(self, ctx: Context, orchestration_run_id: str) -> OrchestrationRun: ...
    def update_orchestration_run(self, ctx: Context, orchestration_run: OrchestrationRun) -> OrchestrationRun: ...
    def list_orchestration_runs(self, ctx: Context,
                                filter: OrchestrationRunFilter | None = None) -> list[OrchestrationRun]: ...
    def count_orchestration_runs(self, ctx: Context, filter: OrchestrationRunFilter | None = None) -> int: ...

    def claim_orchestration_continuation(self, ctx: Context, team_id: str) -> OrchestrationRun: ...
    def link_orchestration_child(self, ctx: Context, team_id: str, child_run_id: str) -> None: ...


check_protocol(OrchestrationStore, TABLES, OrchestrationMethods)
