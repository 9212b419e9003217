"""The conformance classes: names, dependencies, protocols, methods.

A store declares the classes it implements in ``store.capabilities`` (a
``frozenset`` of names).  Certification runs every clause of every declared
class and reports every other class as *not claimed* — never as passed.

This table is the single place a new class plugs in: its protocol, the
classes it needs, and the scope rule of each method (used by the scope
clauses, which run against every scoped method of every declared class).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import attrs

from . import a2a, checkpoints, runs, suspensions
from .a2a import A2AStore
from .a2a_discovery import DISCOVERY_METHODS, ScopedDiscoveryStore
from .a2a_held import TABLES as HELD_TABLES
from .a2a_held import HeldAskStore
from .a2a_replies import TABLES as REPLY_TABLES
from .a2a_replies import ReservedReplyStore
from .a2a_resolutions import TABLES as RESOLUTION_TABLES
from .a2a_resolutions import AskResolutionStore
from .admin import ADMIN_METHODS, AdminStore
from .catalog import CatalogStore
from .catalog import TABLES as CATALOG_TABLES
from .checkpoints import CheckpointStore
from .context import Context
from .gateway import GATEWAY_METHODS, GatewayStore
from .kinds import Table, protocol_methods
from .leases import LeaseStore
from .memory import TABLES as MEMORY_TABLES
from .memory import AgentMemoryStore
from .orchestration import TABLES as ORCHESTRATION_TABLES
from .orchestration import OrchestrationStore
from .preparation import PreparationStore
from .progress import TABLES as PROGRESS_TABLES
from .progress import ProgressStore
from .runs import RunStore
from .suspensions import SuspensionStore
from .views import Refs

__all__ = ["Method", "ConformanceClass", "CLASSES", "Store", "declared_classes", "closure"]


@attrs.frozen
class Method:
    """One store method of a class.

    ``scoped`` is False only for the methods of SCOPE-XS-1 (they ignore
    ``ctx.scope`` and accept the zero scope).
    """

    name: str
    scoped: bool = True


@attrs.frozen
class ConformanceClass:
    name: str
    title: str
    protocol: type
    methods: tuple[Method, ...]
    requires: tuple[str, ...] = ()
    #: False for a class whose rows carry no scope at all (``gateway``,
    #: GW-SCOPE-1/2): its methods take ``ctx`` for uniformity and ignore its
    #: scope by design, so the scope tables treat them neither as scoped nor
    #: as across-scope methods (SCOPE-XS-1 is about scoped rows).
    scoped: bool = True
    #: The opener method of the declaring store that returns the object these
    #: methods live on (``open_gateway(location)``), or None when they are
    #: methods of the store itself.
    opened_by: str | None = None
    #: The class's stored kinds described by :mod:`cortex_spec.kinds` (what
    #: the interpreters store and the suites generate clauses for).
    tables: tuple[Table, ...] = ()
    #: What the class shows of a store's state (:mod:`cortex_spec.views`):
    #: ``view(store, contexts, refs)`` per caller, ``view_across(store,
    #: contexts)`` through its across-scope reads.
    view: Callable[[Any, Sequence[Context], Refs], dict[str, Any]] | None = None
    view_across: Callable[[Any, Sequence[Context]], dict[str, Any]] | None = None

    def method(self, name: str) -> Method:
        for m in self.methods:
            if m.name == name:
                return m
        raise KeyError(name)


def _m(*names: str, scoped: bool = True) -> tuple[Method, ...]:
    return tuple(Method(n, scoped) for n in names)


CLASSES: dict[str, ConformanceClass] = {
    c.name: c
    for c in (
        ConformanceClass(
            "runs",
            "Runs, steps and tool calls",
            RunStore,
            _m(
                "create_run",
                "get_run",
                "update_run",
                "list_runs",
                "count_runs",
                "create_step",
                "list_steps",
                "create_tool_call",
                "list_tool_calls",
            ),
            tables=runs.TABLES,
            view=runs.view,
        ),
        ConformanceClass(
            "suspensions",
            "Suspensions and the resume/sweep claims",
            SuspensionStore,
            _m(
                "create_suspension",
                "get_suspension",
                "claim_suspension",
                "claim_expired_suspension",
                "delete_suspension",
                "list_expired",
            )
            + _m("list_expired_across_scopes", scoped=False),
            requires=("runs",),
            view=suspensions.view,
            view_across=suspensions.view_across,
        ),
        ConformanceClass(
            "leases",
            "Run leases, takeovers and continuation discovery",
            LeaseStore,
            _m("hold_lease", "mark_notified")
            + _m("list_lapsed_across_scopes", "list_continuable_across_scopes", scoped=False),
            requires=("runs", "suspensions"),
        ),
        ConformanceClass(
            "checkpoints",
            "Approval checkpoints",
            CheckpointStore,
            _m(
                "create_checkpoint",
                "get_checkpoint",
                "resolve",
                "list_pending",
                "count_pending",
            )
            + _m("list_pending_across_scopes", scoped=False),
            tables=checkpoints.TABLES,
            view=checkpoints.view,
            view_across=checkpoints.view_across,
        ),
        ConformanceClass(
            "a2a",
            "Agent-to-agent messages, conversations, deliveries and pending asks",
            A2AStore,
            _m(
                "record_message",
                "get_message",
                "list_messages",
                "create_conversation",
                "get_conversation",
                "get_conversation_by_peer_context",
                "update_conversation",
                "list_conversations",
                "create_delivery",
                "get_delivery",
                "claim_delivery",
                "bind_delivery_run",
                "finish_delivery",
                "list_inbox",
                "mark_delivery_read",
            )
            + _m("list_queued_deliveries", "reclaim_stale_deliveries", scoped=False)
            + _m(
                "create_pending_ask",
                "get_pending_ask",
                "claim_pending_ask",
                "list_expired_asks",
            )
            + _m("list_expired_asks_across_scopes", scoped=False)
            + _m("list_pending_asks_by_conversation"),
            view=a2a.view,
            view_across=a2a.view_across,
        ),
        ConformanceClass(
            "a2a_resolutions",
            "Ask resolutions: a pending ask claimed with its exact outcome in one commit",
            AskResolutionStore,
            _m(*protocol_methods(AskResolutionStore)),
            requires=("a2a",),
            tables=RESOLUTION_TABLES,
        ),
        ConformanceClass(
            "a2a_replies",
            "Reserved replies committed with their delivery, hop and reply queue; deferred recipients",
            ReservedReplyStore,
            _m(*protocol_methods(ReservedReplyStore)),
            requires=("a2a",),
            tables=REPLY_TABLES,
        ),
        ConformanceClass(
            "a2a_held",
            "Held asks released against their pinned pause; agent-reply runs",
            HeldAskStore,
            _m(*protocol_methods(HeldAskStore)),
            requires=("runs", "suspensions", "a2a_resolutions"),
            tables=HELD_TABLES,
        ),
        ConformanceClass(
            "a2a_discovery",
            "Queue discovery, stale reclaim and ask expiry at exactly one scope",
            ScopedDiscoveryStore,
            _m(*DISCOVERY_METHODS),
            requires=("a2a",),
        ),
        ConformanceClass(
            "memory",
            "Sessions, conversation memory, working memory and summaries",
            AgentMemoryStore,
            _m(*protocol_methods(AgentMemoryStore)),
            tables=MEMORY_TABLES,
        ),
        ConformanceClass(
            "catalog",
            "Agents, skills, traits, behaviors, personas and prompt overlays",
            CatalogStore,
            _m(*protocol_methods(CatalogStore)),
            tables=CATALOG_TABLES,
        ),
        ConformanceClass(
            "orchestration",
            "Team configurations and runs, the continuation claim and child admission",
            OrchestrationStore,
            _m(*protocol_methods(OrchestrationStore)),
            tables=ORCHESTRATION_TABLES,
        ),
        ConformanceClass(
            "gateway",
            "Chat gateway durable state: inbox, reply queue, offsets, selection, lock",
            GatewayStore,
            _m(*GATEWAY_METHODS, scoped=False),
            scoped=False,
            opened_by="open_gateway",
        ),
        ConformanceClass(
            "progress",
            "A run's progress snapshot at one exact scope",
            ProgressStore,
            _m(*protocol_methods(ProgressStore)),
            tables=PROGRESS_TABLES,
        ),
        ConformanceClass(
            "preparation",
            "The reads of a run's preparation in one snapshot (catalog and memory)",
            PreparationStore,
            _m(*protocol_methods(PreparationStore)),
            requires=("catalog", "memory"),
        ),
        ConformanceClass(
            # the storage as a whole: the methods ignore ctx.scope and hold no rows
            "admin",
            "Administration: ping, schema versions and migration, scope inspection",
            AdminStore,
            _m(*ADMIN_METHODS, scoped=False),
            scoped=False,
        ),
    )
}


@runtime_checkable
class Store(Protocol):
    """The part every store shares, whatever classes it declares."""

    #: The conformance classes this store implements.
    capabilities: frozenset[str]

    def close(self) -> None:
        """Release connections and locks; idempotent."""
        ...


def declared_classes(store: object) -> frozenset[str]:
    """``store.capabilities`` checked: a frozenset of known class names."""
    caps = getattr(store, "capabilities", None)
    if not isinstance(caps, (frozenset, set)) or not all(isinstance(c, str) for c in caps):
        raise TypeError(
            f"{type(store).__name__}.capabilities must be a frozenset of class names, got {caps!r}"
        )
    return frozenset(caps)


def closure(names: frozenset[str] | set[str]) -> frozenset[str]:
    """Classes plus every class they require, transitively."""
    out: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out.add(name)
        if name in CLASSES:
            todo.extend(CLASSES[name].requires)
    return frozenset(out)
