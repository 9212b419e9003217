"""Conformance class ``suspensions`` (requires ``runs``; spec: suspensions.md).

A suspension records why a run paused and how to continue it.  Two claims
move the paused run to ``running``: the resume claim (deadline ahead or
none) and the sweep claim (deadline reached).  The deadline instant itself
belongs to the sweeper (SUSP-PART-2), and on every backend the deadline check
is part of the same atomic step as the run's state change (SUSP-CLAIM-9).
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any, Protocol, Sequence, runtime_checkable

import attrs

from . import ids
from .context import Context
from .entities import entity
from .errors import InvalidArgument
from .scope import Scope
from .validation import (
    check_entity_size,
    check_enum,
    check_json_object,
    check_nonempty_short_str,
    check_optional_instant,
    check_str,
)
from .views import FAR_FUTURE, Refs, attempt

__all__ = [
    "SuspensionReason",
    "PendingCall",
    "Suspension",
    "SuspensionStore",
    "validate_new_suspension",
    "resume_eligible",
    "sweep_eligible",
]


class SuspensionReason(str, Enum):
    APPROVAL = "approval"
    EXTERNAL_TOOL = "external_tool"
    AGENT_REPLY = "agent_reply"

    def __str__(self) -> str:
        return self.value


@entity
class PendingCall:
    """A tool call the paused run waits on; ``arguments`` is kept verbatim."""

    id: str
    name: str
    arguments: str = ""


@entity
class Suspension:
    """Why a run paused and how to continue it; keyed by ``run_id``."""

    id: str
    run_id: str
    scope: Scope = Scope()
    reason: SuspensionReason | str = SuspensionReason.APPROVAL
    pending: tuple[PendingCall, ...] = ()
    continuation: dict[str, Any] = attrs.Factory(dict)
    expires_at: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


def resume_eligible(expires_at: datetime | None, now: datetime) -> bool:
    """SUSP-PART-1, resume side: no deadline, or the deadline is after ``now``."""
    return expires_at is None or expires_at > now


def sweep_eligible(expires_at: datetime | None, now: datetime) -> bool:
    """SUSP-PART-1, sweep side: a deadline at or before ``now``."""
    return expires_at is not None and expires_at <= now


def _check_pending(value: object) -> tuple[PendingCall, ...]:
    if not isinstance(value, (tuple, list)):
        raise InvalidArgument(
            f"suspension.pending must be a tuple of PendingCall, got {type(value).__name__}"
        )
    out = []
    for i, call in enumerate(value):
        if not isinstance(call, PendingCall):
            raise InvalidArgument(f"suspension.pending[{i}] must be a PendingCall")
        out.append(
            PendingCall(
                id=check_nonempty_short_str(call.id, f"suspension.pending[{i}].id"),
                name=check_nonempty_short_str(call.name, f"suspension.pending[{i}].name"),
                arguments=check_str(call.arguments, f"suspension.pending[{i}].arguments"),
            )
        )
    return tuple(out)


def validate_new_suspension(s: object, ctx: Context, now: datetime) -> Suspension:
    """SUSP-CREATE-1: the suspension as it will be stored, or ``InvalidArgument``."""
    if not isinstance(s, Suspension):
        raise InvalidArgument(f"suspension must be a Suspension, got {type(s).__name__}")
    stored = Suspension(
        id=ids.check_id(s.id, ids.SUSPENSION, "suspension.id"),
        run_id=ids.check_id(s.run_id, ids.RUN, "suspension.run_id"),
        scope=ctx.scope,
        reason=check_enum(s.reason, SuspensionReason, "suspension.reason"),
        pending=_check_pending(s.pending),
        continuation=check_json_object(s.continuation, "suspension.continuation"),
        expires_at=check_optional_instant(s.expires_at, "suspension.expires_at"),
        created_at=now,
        updated_at=now,
    )
    check_entity_size(stored, "suspension")
    return stored


@runtime_checkable
class SuspensionStore(Protocol):
    """What a store of class ``suspensions`` provides (SUSP-*)."""

    def create_suspension(self, ctx: Context, suspension: Suspension) -> Suspension:
        """One per ``run_id`` across all scopes (SUSP-CREATE-2); the run is not
        checked (SUSP-CREATE-4); a past deadline is accepted (SUSP-CREATE-6)."""
        ...

    def get_suspension(self, ctx: Context, run_id: str) -> Suspension:
        """The visible suspension of the run, else ``NotSuspended`` (SUSP-GET-1)."""
        ...

    def claim_suspension(self, ctx: Context, run_id: str) -> Suspension:
        """The resume claim (SUSP-CLAIM-1..11).

        One atomic step: the suspension is visible and its deadline is absent
        or after clock now, and the run is visible and ``paused``; the run
        becomes ``running``.  ``SuspensionExpired`` at or past the deadline,
        ``NotSuspended`` otherwise; a refusal changes nothing.
        """
        ...

    def claim_expired_suspension(self, ctx: Context, run_id: str, now: datetime) -> Suspension:
        """The sweep claim (SUSP-XCLAIM-1..4): deadline ``<= now``; every refusal
        is ``NotSuspended``."""
        ...

    def delete_suspension(self, ctx: Context, run_id: str) -> None:
        """Remove the visible suspension, else ``NotSuspended`` (SUSP-DEL-1..2)."""
        ...

    def list_expired(self, ctx: Context, now: datetime, limit: int = 0) -> list[Suspension]:
        """Visible rows with ``expires_at <= now``, ``expires_at`` ASC then ``id``
        ASC (SUSP-LIST-1..3)."""
        ...

    def list_expired_across_scopes(
        self, ctx: Context, now: datetime, limit: int = 0
    ) -> list[Suspension]:
        """The same over every scope; ignores ``ctx.scope`` (SUSP-XLIST-1)."""
        ...


# -- what the class shows (cortex_spec.views) ------------------------------------------------


def view(store: Any, contexts: Sequence[Context], refs: Refs) -> dict[str, Any]:
    """Expired suspensions from each caller, and those of the runs in ``refs``."""
    out: dict[str, Any] = {}
    for c in contexts:
        key = c.scope.canonical()
        out[f"expired@{key}"] = store.list_expired(c, FAR_FUTURE)
        for rid in refs.get("run_ids", ()):
            out[f"suspension[{rid}]@{key}"] = attempt(store.get_suspension, c, rid)
    return out


def view_across(store: Any, contexts: Sequence[Context]) -> dict[str, Any]:
    return {"expired@*": store.list_expired_across_scopes(Context(Scope()), FAR_FUTURE)}


# -- builders for tests ------------------------------------------------------------------------
# A valid suspension, fresh ids and the fields given; cortex_spec.testing re-exports them.


def make_suspension(run_id: str, **fields: Any) -> Suspension:
    fields.setdefault("id", ids.new_id(ids.SUSPENSION))
    fields.setdefault("reason", SuspensionReason.APPROVAL)
    fields.setdefault(
        "pending", (PendingCall(id="call_1", name="deploy", arguments='{"env": "prod"}'),)
    )
    fields.setdefault("continuation", {"step": 3, "resume_token": "abc"})
    return Suspension(run_id=run_id, **fields)


#: The builders of this module (:mod:`cortex_spec.testing` re-exports them).
BUILDERS: tuple[str, ...] = ("make_suspension",)
__all__ += BUILDERS
