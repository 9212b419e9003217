"""Conformance class ``leases``: a worker's hold on a running run, the
takeover of a dead worker's run, and the discovery a sweeper makes across
every scope (spec: leases.md).

The lease lives on the run (``Run.lease``, ``reclaim_count``,
``notified_at``: runs.md, RUN-ENT-2).  This module holds the rules every
backend shares, as functions a backend's statement mirrors:

* :func:`hold_decision` — what a ``hold_lease`` does to a run's current
  lease (LEASE-HOLD-1/4/6);
* :func:`lapsed` and :func:`continuable` — the selections of the two
  across-scope listings (LEASE-LAPSED-1, LEASE-CONT-1);
* the argument checks, and the protocol.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Protocol, runtime_checkable

from . import ids
from .context import Context
from .errors import InvalidArgument
from .runs import Lease, Run, RunState
from .suspensions import Suspension, resume_eligible
from .validation import check_instant, check_nonempty_short_str

__all__ = [
    "CONTINUABLE_ORDER",
    "LAPSED_ORDER",
    "Hold",
    "LeaseStore",
    "check_lease",
    "continuable",
    "hold_decision",
    "lapsed",
    "notified_since",
    "ready",
]


class Hold(enum.Enum):
    """What a ``hold_lease`` by one owner does to a running run's lease."""

    #: no lease, or the caller's own (live or lapsed): written, not counted
    TAKE = "take"
    #: another owner's lapsed lease: written, and ``reclaim_count`` + 1 (LEASE-HOLD-6)
    RECLAIM = "reclaim"
    #: another owner's live lease: ``LeaseHeld``, nothing written (LEASE-HOLD-4)
    HELD = "held"


def hold_decision(current: Lease | None, owner: str, now: datetime) -> Hold:
    """LEASE-HOLD-1/4/6 on a running run whose lease is ``current``: the
    expiry instant belongs to the taker (a lease with ``expires_at <= now``
    has no live owner)."""
    if current is None or current.owner == owner:
        return Hold.TAKE
    if current.expires_at <= now:
        return Hold.RECLAIM
    return Hold.HELD


def lapsed(run: Run, now: datetime) -> bool:
    """LEASE-LAPSED-1: running, leased, and the lease expired at or before ``now``."""
    return run.state == RunState.RUNNING and run.lease is not None and run.lease.expires_at <= now


def ready(run: Run, suspension: Suspension | None, now: datetime) -> bool:
    """*ready(R, t)*: paused with a suspension a resume could still claim
    at ``now`` (SUSP-PART-1, resume side)."""
    return run.state == RunState.PAUSED and suspension is not None and resume_eligible(
        suspension.expires_at, now)


def notified_since(run: Run, notified_before: datetime) -> bool:
    """LEASE-CONT-1/LEASE-NOTIFY-5: marked at or after ``notified_before``."""
    return run.notified_at is not None and run.notified_at >= notified_before


def continuable(run: Run, suspension: Suspension | None, now: datetime, notified_before: datetime) -> bool:
    """LEASE-CONT-1: ready or lapsed at ``now``, and not marked since ``notified_before``."""
    return (ready(run, suspension, now) or lapsed(run, now)) and not notified_since(run, notified_before)


#: LEASE-LAPSED-2: the lease's expiry, then the id
LAPSED_ORDER = ("lease.expires_at", "id")
#: LEASE-CONT-2: the id
CONTINUABLE_ORDER = ("id",)


def check_lease(lease: object) -> Lease:
    """LEASE-HOLD-7: a ``Lease`` with a non-empty short owner and an aware
    expiry (UTC, truncated to milliseconds, RSC-GEN-2)."""
    if not isinstance(lease, Lease):
        raise InvalidArgument(f"lease must be a Lease, got {type(lease).__name__}")
    return Lease(owner=check_nonempty_short_str(lease.owner, "lease.owner"),
                 expires_at=check_instant(lease.expires_at, "lease.expires_at"))


def check_run_id(run_id: object) -> str:
    return ids.check_id(run_id, ids.RUN, "run_id")


@runtime_checkable
class LeaseStore(Protocol):
    """What a store of class ``leases`` provides (LEASE-*).  No lease or
    notification write changes a run's ``state``, ``updated_at`` or any
    field ``update_run`` writes (LEASE-GEN-1)."""

    def hold_lease(self, ctx: Context, run_id: str, lease: Lease) -> None:
        """Take, renew or take over the lease of a visible running run
        (LEASE-HOLD-1..8): ``RunNotFound``, ``InvalidState`` (not running) or
        ``LeaseHeld`` (another owner's live lease) otherwise."""
        ...

    def list_lapsed_across_scopes(self, ctx: Context, now: datetime, limit: int = 0) -> list[Run]:
        """Running runs of every scope whose lease expired at or before
        ``now``, by expiry then id (LEASE-LAPSED-1..3)."""
        ...

    def list_continuable_across_scopes(self, ctx: Context, notified_before: datetime,
                                       limit: int = 0) -> list[Run]:
        """Runs of every scope that are ready or lapsed at clock now and not
        marked since ``notified_before``, by id (LEASE-CONT-1..4)."""
        ...

    def mark_notified(self, ctx: Context, run_id: str, at: datetime) -> None:
        """Move the visible run's ``notified_at`` forward to ``at``
        (LEASE-NOTIFY-1..5)."""
        ...
