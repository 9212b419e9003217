"""cortex-spec: the executable contract of durable agent-runtime stores.

The contract, as Python types:

* :class:`Context` and :class:`Scope` — who calls, in which tenant;
* ids (:mod:`cortex_spec.ids`), a :class:`Clock` and a :class:`ManualClock`;
* the errors (:mod:`cortex_spec.errors`);
* entities and store protocols per conformance class
  (:mod:`cortex_spec.runs`, :mod:`cortex_spec.suspensions`,
  :mod:`cortex_spec.checkpoints`, :mod:`cortex_spec.a2a`,
  :mod:`cortex_spec.gateway`), grouped in
  :data:`CLASSES`.

Sub-packages: :mod:`cortex_spec.reference` (the in-memory store that defines
the semantics), :mod:`cortex_spec.adapters` (real backends),
:mod:`cortex_spec.conformance` (the clause suite), :mod:`cortex_spec.stateful`
(the state machines) and :mod:`cortex_spec.reports`.
"""

import pathlib as _pathlib


def _checkout_root() -> str | None:
    """The repository root when this package is imported straight from a
    source checkout, else None.

    In a checkout the sub-packages live beside this folder (reference/,
    adapters/, conformance/, stateful/, reports/) and setuptools' package-dir
    installs them under cortex_spec.  ``python -m pytest`` in the repository
    root puts the root first on sys.path; extending ``__path__`` lets
    ``cortex_spec.reference`` & co. resolve there too.
    """
    here = _pathlib.Path(__file__).resolve().parent
    root = here.parent
    if (here / "reference").is_dir() or not (root / "reference" / "__init__.py").is_file():
        return None
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or 'name = "cortex-spec"' not in pyproject.read_text(errors="ignore"):
        return None
    return str(root)


if (_root := _checkout_root()) is not None and _root not in __path__:  # type: ignore[name-defined]
    __path__.append(_root)  # type: ignore[name-defined]

from . import errors, ids  # noqa: E402
from .a2a import (  # noqa: E402
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
from .gateway import GatewayOpener, GatewayStore, InboundMessage, InboxItem, ItemStatus
from .leases import LeaseStore
from .orchestration import OrchestrationStore
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
    "GatewayOpener",
    "GatewayStore",
    "InboundMessage",
    "InboxItem",
    "ItemStatus",
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
    "LeaseStore",
    "OrchestrationStore",
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
