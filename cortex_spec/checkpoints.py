"""Conformance class ``checkpoints`` (spec: checkpoints.md).

A checkpoint is a human-approval gate.  It is created ``pending`` and
decided exactly once by :meth:`CheckpointStore.resolve`; a second resolve is
refused with ``InvalidState`` and the first decision stays (CP-RESOLVE-3).
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

from . import ids
from .context import Context, require_context, require_scope
from .entities import entity, replace
from .errors import CheckpointNotFound, InvalidArgument, InvalidState, StoreError
from .kinds import (
    Bool,
    Choice,
    Count,
    Filter,
    Id,
    Instant,
    Json,
    Listing,
    Optional,
    Query,
    Record,
    Short,
    Table,
    Text,
    check_filter,
    check_protocol,
    check_value,
    created,
    field,
    install,
    key,
    new_entity,
    owned,
    scope_field,
    updated,
)
from .scope import Scope
from .validation import check_bool, check_entity_size, check_page, check_short_str, check_str
from .views import Refs

__all__ = [
    "CheckpointState",
    "Decision",
    "Checkpoint",
    "CheckpointFilter",
    "CheckpointStore",
    "CHECKPOINTS",
    "TABLES",
    "CheckpointsMethods",
    "validate_new_checkpoint",
    "validate_decision",
    "validate_checkpoint_filter",
    "resolved",
]


class CheckpointState(str, Enum):
    PENDING = "pending"
    RESOLVED = "resolved"

    def __str__(self) -> str:
        return self.value


@entity
class Decision:
    """A human's decision; ``decided_at`` is stamped by the store (CP-RESOLVE-1)."""

    approved: bool = field(Bool())
    decided_by: str = field(Short(), default="")
    reason: str = field(Text(), default="")
    decided_at: datetime | None = field(Optional(Instant()), default=None)


@entity
class Checkpoint:
    """A stored kind (:mod:`.kinds`): created ``pending`` without a decision
    (CP-CREATE-2: the two are store-owned, a new object holding anything
    else is refused); only :meth:`CheckpointsMethods.resolve` writes them."""

    id: str = key(ids.CHECKPOINT)
    run_id: str = field(Id(ids.RUN))
    agent_id: str = field(Id(ids.AGENT))
    scope: Scope = scope_field()
    reason: str = field(Text(), default="")
    step_index: int = field(Count(), default=0)
    state: CheckpointState | str = owned(Choice(CheckpointState), CheckpointState.PENDING, on_create="require")
    decision: Decision | None = owned(Optional(Record(Decision)), None, on_create="require")
    metadata: dict[str, Any] = field(Json(), factory=dict)
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


@entity
class CheckpointFilter:
    """Filter of ``list_pending``/``count_pending`` (CP-LIST-1..3)."""

    run_id: str | None = None
    limit: int = 0
    offset: int = 0


#: The stored kind: created and read by id, listed while pending (CP-LIST-1..3);
#: never updated but by ``resolve``, never deleted.
CHECKPOINTS = Table(
    Checkpoint, "checkpoints", "checkpoints", CheckpointNotFound, "checkpoint", "checkpoints",
    ops=("create", "get"),
    listings=(Listing("list_pending", count="count_pending", filters=(Filter("run_id", "run_id"),),
                      fixed=(("state", CheckpointState.PENDING),), exact=False,
                      filter_class=CheckpointFilter),),
    clauses={"create": "CP-CREATE-1", "create.id": "CP-CREATE-3", "create.nonempty": "CP-CREATE-1",
             "get": "CP-GET-1", "list": "CP-LIST-2", "count": "CP-LIST-3", "fields": "CP-CREATE-1"},
)

#: Every stored kind of the class.
TABLES = (CHECKPOINTS,)


def validate_new_checkpoint(cp: object, ctx: Context, now: datetime) -> Checkpoint:
    """CP-CREATE-1/2: the checkpoint as stored, or ``InvalidArgument`` (the
    description's validation, for stores written without :class:`~.kinds.Crud`)."""
    stored: Checkpoint = new_entity(CHECKPOINTS, cp, ctx, now)
    return stored


def validate_decision(decision: object) -> Decision:
    """CP-RESOLVE-5: a well-shaped decision (``decided_at`` is ignored)."""
    if not isinstance(decision, Decision):
        raise InvalidArgument(f"decision must be a Decision, got {type(decision).__name__}")
    return Decision(
        approved=check_bool(decision.approved, "decision.approved"),
        decided_by=check_short_str(decision.decided_by, "decision.decided_by"),
        reason=check_str(decision.reason, "decision.reason"),
        decided_at=None,
    )


def resolved(cp: Checkpoint, decision: Decision, now: datetime) -> Checkpoint:
    """The checkpoint ``resolve`` stores (CP-RESOLVE-1), measured as stored
    (CP-RESOLVE-7, RSC-GEN-13): ``InvalidArgument`` over the size limit."""
    done = replace(cp, state=CheckpointState.RESOLVED, decision=replace(decision, decided_at=now),
                   updated_at=now)
    check_entity_size(done, "resolved checkpoint")
    return done


def validate_checkpoint_filter(flt: object) -> CheckpointFilter:
    """``flt`` (``None``: no filter) checked as ``list_pending`` checks it
    (CP-LIST-1..3), for a store written without the generated methods."""
    return check_filter(CHECKPOINTS, CHECKPOINTS.listing("list_pending"), flt)  # type: ignore[no-any-return]


if TYPE_CHECKING:  # the methods install() generates below, declared for type checkers (cortex_spec.stubs)
    from .generated import GeneratedCheckpointsMethods as _Generated
else:
    _Generated = object

#: How often a resolve that lost the race between its read and its write
#: (another resolve won) goes round again; the next read classifies it.
_RETRIES = 100


class CheckpointsMethods(_Generated):
    """The class's store methods on ``self._crud`` (a :class:`~.kinds.Crud`
    over the backend's storage): the generated create, get and pending
    listing of :data:`CHECKPOINTS`, and the two written here.  A backend's
    checkpoints mixin inherits this."""

    _crud: Any

    def resolve(self, ctx: Context, checkpoint_id: str, decision: Decision) -> Checkpoint:
        """CP-RESOLVE-1..7: read the visible row (absent: ``CheckpointNotFound``,
        resolved: ``InvalidState``), measure the resolved row (CP-RESOLVE-7),
        then one conditional update on ``state = pending``: of concurrent
        resolves exactly one matches (CP-RESOLVE-4) and it returns the row
        as written.  A pending checkpoint changes only by a resolve, so the
        row written is the row measured; a loser wrote nothing and reads again."""
        scope = require_scope(ctx)
        cp_id = check_value(Checkpoint, "id", checkpoint_id, "checkpoint_id")
        decision = validate_decision(decision)
        storage = self._crud.storage
        for _ in range(_RETRIES):
            rows = storage.select(CHECKPOINTS, Query(scope, where=(("id", cp_id),)))
            if not rows:
                raise CheckpointNotFound(f"checkpoint {cp_id} not found")  # CP-RESOLVE-2
            if rows[0].state != CheckpointState.PENDING:
                raise InvalidState(f"checkpoint {cp_id} is already resolved")  # CP-RESOLVE-3: the first stays
            now = self._crud.now()
            done = resolved(rows[0], decision, now)
            stored: Checkpoint | None = storage.update(
                CHECKPOINTS, cp_id, scope, {"state": done.state, "decision": done.decision}, now,
                expect=(("state", CheckpointState.PENDING),))
            if stored is not None:
                return stored
        raise StoreError(f"resolving checkpoint {cp_id} kept racing concurrent writes")

    def list_pending_across_scopes(
        self, ctx: Context, after_id: str | None = None, limit: int = 0
    ) -> list[Checkpoint]:
        """CP-XLIST-1..4: pending checkpoints of every scope after the cursor, by id."""
        require_context(ctx)  # SCOPE-XS-2
        after = ids.check_optional_id(after_id, ids.CHECKPOINT, "after_id")
        limit, _ = check_page(limit)
        rows: list[Checkpoint] = self._crud.storage.select(CHECKPOINTS, Query(
            None, where=(("state", CheckpointState.PENDING),), order=(("id", False),), limit=limit,
            after=None if after is None else ("id", after)))
        return rows


install(CheckpointsMethods, TABLES)


@runtime_checkable
class CheckpointStore(Protocol):
    """What a store of class ``checkpoints`` provides (CP-*)."""

    def create_checkpoint(self, ctx: Context, checkpoint: Checkpoint) -> Checkpoint:
        """Store a new ``pending`` checkpoint (CP-CREATE-1..4)."""
        ...

    def get_checkpoint(self, ctx: Context, checkpoint_id: str) -> Checkpoint:
        """The visible checkpoint, else ``CheckpointNotFound`` (CP-GET-1)."""
        ...

    def resolve(self, ctx: Context, checkpoint_id: str, decision: Decision) -> Checkpoint:
        """Decide a pending checkpoint exactly once (CP-RESOLVE-1..6)."""
        ...

    def list_pending(self, ctx: Context, filter: CheckpointFilter | None = None) -> list[Checkpoint]:
        """Visible pending checkpoints, ``created_at`` ASC then ``id`` ASC (CP-LIST-1..2)."""
        ...

    def count_pending(self, ctx: Context, filter: CheckpointFilter | None = None) -> int:
        """How many ``list_pending`` selects, ignoring the page (CP-LIST-3)."""
        ...

    def list_pending_across_scopes(
        self, ctx: Context, after_id: str | None = None, limit: int = 0
    ) -> list[Checkpoint]:
        """Pending checkpoints of every scope with ``id > after_id``, ``id`` ASC;
        ignores ``ctx.scope`` (CP-XLIST-1..4)."""
        ...


check_protocol(CheckpointStore, TABLES, CheckpointsMethods)


# -- what the class shows (cortex_spec.views) ------------------------------------------------


def view(store: Any, contexts: Sequence[Context], refs: Refs) -> dict[str, Any]:
    """Pending checkpoints from each caller."""
    return {f"pending@{c.scope.canonical()}": store.list_pending(c) for c in contexts}


def view_across(store: Any, contexts: Sequence[Context]) -> dict[str, Any]:
    return {"pending@*": store.list_pending_across_scopes(Context(Scope()))}


# -- builders for tests ------------------------------------------------------------------------
# A valid checkpoint (fresh ids, the fields given) or decision; cortex_spec.testing re-exports them.


def make_checkpoint(run_id: str | None = None, **fields: Any) -> Checkpoint:
    fields.setdefault("id", ids.new_id(ids.CHECKPOINT))
    fields.setdefault("agent_id", ids.new_id(ids.AGENT))
    fields.setdefault("reason", "approve the deployment")
    return Checkpoint(run_id=run_id or ids.new_id(ids.RUN), **fields)


def approve(by: str = "alice", reason: str = "looks good") -> Decision:
    return Decision(approved=True, decided_by=by, reason=reason)


def reject(by: str = "bob", reason: str = "not now") -> Decision:
    return Decision(approved=False, decided_by=by, reason=reason)


#: The builders of this module (:mod:`cortex_spec.testing` re-exports them).
BUILDERS: tuple[str, ...] = ("make_checkpoint", "approve", "reject")
__all__ += BUILDERS
