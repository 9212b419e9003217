"""cortex-spec: the executable contract of durable agent-runtime stores.

The contract, as Python types:

* :class:`Context` and :class:`Scope` — who calls, in which tenant;
* ids (:mod:`cortex_spec.ids`), a :class:`Clock` and a :class:`ManualClock`;
* the errors (:mod:`cortex_spec.errors`);
* entities and store protocols per conformance class
  (:mod:`cortex_spec.runs`, :mod:`cortex_spec.suspensions`,
  :mod:`cortex_spec.checkpoints`, :mod:`cortex_spec.a2a`), grouped in
  :data:`CLASSES`.

Sub-packages: :mod:`cortex_spec.reference` (the in-memory store that defines
the semantics), :mod:`cortex_spec.adapters` (real backends),
:mod:`cortex_spec.conformance` (the clause suite), :mod:`cortex_spec.stateful`
(the state machines) and :mod:`cortex_spec.reports`.
"""

from . import errors, ids
from .a2a import (
    A2AStore,
    Address,
    Conversation,
    ConversationStatus,
    Delivery,
    DeliveryState,
    Envelope,
    PendingAsk,
    Performative,
    RoutingClass,
    answers_ask,
    format_address,
    parse_address,
    performative_class,
    validate_envelope,
)
from .checkpoints import Checkpoint, CheckpointFilter, CheckpointState, CheckpointStore, Decision
from .classes import CLASSES, ConformanceClass, Store
from .clock import Clock, ManualClock, SystemClock, truncate_ms
from .context import Context
from .runs import Lease, Run, RunFilter, RunState, RunStore, Step, ToolCall
from .scope import Scope
from .suspensions import PendingCall, Suspension, SuspensionReason, SuspensionStore

__version__ = "0.1.0"

__all__ = [
    "A2AStore",
    "Address",
    "CLASSES",
    "Checkpoint",
    "CheckpointFilter",
    "CheckpointState",
    "CheckpointStore",
    "Clock",
    "ConformanceClass",
    "Context",
    "Conversation",
    "ConversationStatus",
    "Delivery",
    "DeliveryState",
    "Envelope",
    "Decision",
    "Lease",
    "ManualClock",
    "PendingAsk",
    "PendingCall",
    "Performative",
    "RoutingClass",
    "Run",
    "RunFilter",
    "RunState",
    "RunStore",
    "Scope",
    "Step",
    "Store",
    "Suspension",
    "SuspensionReason",
    "SuspensionStore",
    "SystemClock",
    "ToolCall",
    "answers_ask",
    "errors",
    "format_address",
    "ids",
    "parse_address",
    "performative_class",
    "truncate_ms",
    "validate_envelope",
]
