"""The error taxonomy every store speaks.

Every refusal a store makes is an instance of one class below, all under
:class:`CortexError`.  A store never lets a driver exception escape raw: a
unique-key violation becomes :class:`AlreadyExists`, anything else unexpected
becomes :class:`StoreError` with the driver error chained as ``__cause__``.

Tests and the differential machine compare outcomes by error *class*, so the
class is the contract; messages are for humans.  A message for a row that is
invisible to the caller must read exactly like the message for an absent row
(SCOPE-BYID-3): never include a stored scope or any hint of existence.
"""

from __future__ import annotations

__all__ = [
    "CortexError",
    "NoScope",
    "InvalidArgument",
    "InvalidPerformative",
    "NoSender",
    "NoReceivers",
    "SelfAddressed",
    "AlreadyExists",
    "NotFound",
    "RunNotFound",
    "CheckpointNotFound",
    "MessageNotFound",
    "ConversationNotFound",
    "DeliveryNotFound",
    "AskNotFound",
    "AskResolutionNotFound",
    "ReplyCommitNotFound",
    "HeldAskNotFound",
    "OrchestrationNotFound",
    "AgentNotFound",
    "SkillNotFound",
    "TraitNotFound",
    "BehaviorNotFound",
    "PersonaNotFound",
    "OverlayNotFound",
    "OrchestrationRunNotFound",
    "SessionNotFound",
    "WorkingMemoryNotFound",
    "NotSuspended",
    "SuspensionExpired",
    "InvalidState",
    "DeliveryAlreadyBound",
    "AskResolutionConflict",
    "ReplyCommitConflict",
    "HeldAskConflict",
    "DeliveryAlreadyClaimed",
    "DeliveryClaimLost",
    "AskAlreadyClaimed",
    "LeaseHeld",
    "ConversationClosed",
    "HopCeilingExceeded",
    "StoreLocked",
    "StoreClosed",
    "StoreError",
    "BackendUnavailable",
]


class CortexError(Exception):
    """Base class of every error a conforming store raises."""


class NoScope(CortexError):
    """A scoped method was called with the zero scope (SCOPE-ZERO-1)."""


class InvalidArgument(CortexError, ValueError):
    """An argument or entity field breaks a rule; nothing was written."""


class InvalidPerformative(InvalidArgument):
    """Not one of the 22 FIPA-ACL performatives (A2A-PERF-5)."""


class NoSender(InvalidArgument):
    """An envelope whose sender has an empty agent (A2A-ENV-1)."""


class NoReceivers(InvalidArgument):
    """An envelope without receivers, or with a receiver of empty agent."""


class SelfAddressed(InvalidArgument):
    """An envelope that names its sender among its receivers."""


class AlreadyExists(CortexError):
    """A create reused a unique key (an id, or a per-scope unique name)."""


class NotFound(CortexError, LookupError):
    """The entity is absent or outside the caller's reach (same outcome)."""


class RunNotFound(NotFound):
    pass


class CheckpointNotFound(NotFound):
    pass


class MessageNotFound(NotFound):
    pass


class ConversationNotFound(NotFound):
    pass


class DeliveryNotFound(NotFound):
    pass


class AskNotFound(NotFound):
    pass


class AskResolutionNotFound(NotFound):
    """No resolution was retained for that ask (A2A-RES-11)."""


class ReplyCommitNotFound(NotFound):
    """No reply was committed for that delivery (A2A-REPLY-8)."""


class HeldAskNotFound(NotFound):
    """No release receipt exists for that held question (A2A-HELD-9)."""


class OrchestrationNotFound(NotFound):
    pass


class AgentNotFound(NotFound):
    pass


class SkillNotFound(NotFound):
    pass


class TraitNotFound(NotFound):
    pass


class BehaviorNotFound(NotFound):
    pass


class PersonaNotFound(NotFound):
    pass


class OverlayNotFound(NotFound):
    pass


class OrchestrationRunNotFound(NotFound):
    pass


class SessionNotFound(NotFound):
    pass


class WorkingMemoryNotFound(NotFound):
    pass


class NotSuspended(CortexError):
    """No claimable suspension: absent, invisible, or its run is not paused.

    It is also the suspension's "not found" class (SCOPE-BYID-4).
    """


class SuspensionExpired(CortexError):
    """A resume claim at or past the suspension's deadline (SUSP-CLAIM-6)."""


class InvalidState(CortexError):
    """The row exists but its state forbids the operation."""


class DeliveryAlreadyBound(InvalidState):
    """The delivery is already bound to another run (A2A-BIND-5)."""


class AskResolutionConflict(InvalidState):
    """The ask a seal names is not the ask it was decided about (A2A-RES-5)."""


class ReplyCommitConflict(InvalidState):
    """Another result, or another binding, already owns the delivery (A2A-REPLY-3/4)."""


class HeldAskConflict(InvalidState):
    """The held question or the pinned pause does not match the release (A2A-HELD-2..5)."""


class DeliveryAlreadyClaimed(CortexError):
    pass


class DeliveryClaimLost(CortexError):
    """The caller's claim token is no longer the delivery's current claim."""


class AskAlreadyClaimed(CortexError):
    pass


class LeaseHeld(CortexError):
    pass


class ConversationClosed(CortexError):
    pass


class HopCeilingExceeded(CortexError):
    pass


class StoreLocked(CortexError):
    """Another open store holds the location's exclusive lock."""


class StoreClosed(CortexError):
    """A method was called on a store after ``close()``."""


class StoreError(CortexError):
    """Anything unexpected from the storage layer; the cause is chained."""


class BackendUnavailable(Exception):
    """A certification backend could not start (server, driver, URL).

    Not a :class:`CortexError`: it is raised by harnesses, never by stores,
    and it makes a certification run end as *not certified*.
    """


# -- classes progress and admin (appended: their own block, for clean merges) --------------------


class ProgressNotFound(NotFound):
    """No progress snapshot of the run at exactly the caller's scope (PROG-GET-1)."""


class SchemaMismatch(StoreError):
    """The storage holds another schema version than the store reads
    (ADMIN-MIG-3/4): ``found`` and ``expected`` say which; an older one is
    brought up to date by ``migrate``, a newer one needs a newer store."""

    def __init__(self, message: str, found: int | None = None, expected: int | None = None) -> None:
        super().__init__(message)
        self.found = found
        self.expected = expected


__all__ += ["ProgressNotFound", "SchemaMismatch"]
