"""Conformance class ``checkpoints`` (spec: checkpoints.md).

A checkpoint is a human-approval gate.  It is created ``pending`` and
decided exactly once by :meth:`CheckpointStore.resolve`; a second resolve is
refused with ``InvalidState`` and the first decision stays (CP-RESOLVE-3).
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any, Protocol, Sequence, runtime_checkable

import attrs

from . import ids
from .context import Context
from .entities import entity, replace
from .errors import InvalidArgument
from .scope import Scope
from .validation import (
    check_bool,
    check_count,
    check_entity_size,
    check_json_object,
    check_page,
    check_short_str,
    check_str,
)
from .views import Refs

__all__ = [
    "CheckpointState",
    "Decision",
    "Checkpoint",
    "CheckpointFilter",
    "CheckpointStore",
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

    approved: bool
    decided_by: str = ""
    reason: str = ""
    decided_at: datetime | None = None


@entity
class Checkpoint:
    id: str
    run_id: str
    agent_id: str
    scope: Scope = Scope()
    reason: str = ""
    step_index: int = 0
    state: CheckpointState | str = CheckpointState.PENDING
    decision: Decision | None = None
    metadata: dict[str, Any] = attrs.Factory(dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None


@entity
class CheckpointFilter:
    """Filter of ``list_pending``/``count_pending`` (CP-LIST-1..3)."""

    run_id: str | None = None
    limit: int = 0
    offset: int = 0


def validate_new_checkpoint(cp: object, ctx: Context, now: datetime) -> Checkpoint:
    """CP-CREATE-1/2: the checkpoint as stored, or ``InvalidArgument``."""
    if not isinstance(cp, Checkpoint):
        raise InvalidArgument(f"checkpoint must be a Checkpoint, got {type(cp).__name__}")
    if not (
        isinstance(cp.state, str) and cp.state == CheckpointState.PENDING.value
    ):
        raise InvalidArgument(f"a new checkpoint must be 'pending', got {cp.state!r}")
    if cp.decision is not None:
        raise InvalidArgument("a new checkpoint must not carry a decision")
    stored = Checkpoint(
        id=ids.check_id(cp.id, ids.CHECKPOINT, "checkpoint.id"),
        run_id=ids.check_id(cp.run_id, ids.RUN, "checkpoint.run_id"),
        agent_id=ids.check_id(cp.agent_id, ids.AGENT, "checkpoint.agent_id"),
        scope=ctx.scope,
        reason=check_str(cp.reason, "checkpoint.reason"),
        step_index=check_count(cp.step_index, "checkpoint.step_index"),
        state=CheckpointState.PENDING,
        decision=None,
        metadata=check_json_object(cp.metadata, "checkpoint.metadata"),
        created_at=now,
        updated_at=now,
    )
    check_entity_size(stored, "checkpoint")
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
    if flt is None:
        return CheckpointFilter()
    if not isinstance(flt, CheckpointFilter):
        raise InvalidArgument(
            f"filter must be a CheckpointFilter or None, got {type(flt).__name__}"
        )
    limit, offset = check_page(flt.limit, flt.offset)
    return CheckpointFilter(
        run_id=ids.check_optional_id(flt.run_id, ids.RUN, "filter.run_id"),
        limit=limit,
        offset=offset,
    )


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
