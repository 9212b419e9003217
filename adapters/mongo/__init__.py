"""MongoDB backend: a pymongo store of classes ``runs``, ``suspensions``,
``checkpoints``, ``a2a``, ``catalog`` and ``gateway``.

``MongoStore(database, clock)`` takes a :class:`pymongo.database.Database`
(any server: standalone, replica set or sharded) or the
:class:`~cortex_spec.adapters.mongo.faithful.FaithfulDatabase` of the
embedded, faithful mongomock::

    from pymongo import MongoClient
    from cortex_spec import SystemClock
    from cortex_spec.adapters.mongo import MongoStore

    store = MongoStore(MongoClient("mongodb://localhost:27017")["cortex"], SystemClock())

Design, in one paragraph (details in :mod:`.suspensions` and :mod:`.store`):
every decision the contract makes atomic is one single-document MongoDB
operation, so no transaction is needed anywhere.  A run and its suspension
share one document (the run *slot*, keyed by the run id), so both claims
are one ``find_one_and_update`` whose filter holds the suspension's
visibility, its deadline compared with clock now, and the run's visibility
and ``paused`` state (SUSP-CLAIM-9) — the window the Go Mongo store leaves
between reading the deadline and flipping the run does not exist here.

Class ``a2a`` (:mod:`.a2a`) is the exception: a message is admitted
together with its conversation's hop charge, two documents, so
``record_message`` runs in a multi-document transaction (emulated by the
faithful mongomock, real on a replica set); on a standalone server, which
has no transactions, the store does not declare ``a2a``.

Class ``gateway`` (:mod:`.gateway`): ``store.open_gateway(database_name)``
opens a chat gateway's state in that database, locked by a lease
(``gateway_lease`` seconds, default 10) that a heartbeat renews.

Certify it with ``--cortex-store mongo`` (faithful mongomock, or the server
at ``CORTEX_SPEC_MONGO_URL`` when that is set), ``mongo-url`` or
``mongo-docker``; see :mod:`.harness`.
"""

from collections.abc import Callable
from typing import Any

from cortex_spec.a2a_held import HeldMethods
from cortex_spec.a2a_replies import ReplyMethods
from cortex_spec.a2a_resolutions import ResolutionMethods
from cortex_spec.clock import Clock
from cortex_spec.orchestration import OrchestrationMethods

from .a2a import A2AMixin
from .a2a_discovery import DiscoveryMixin
from .admin import AdminMixin
from .catalog import CatalogMixin
from .checkpoints import CheckpointsMixin
from .gateway import DEFAULT_LEASE, GatewayOpenerMixin, MongoGateway
from .leases import LeasesMixin
from .memory import MemoryMixin
from .preparation import PreparationMixin
from .progress import ProgressMixin
from .store import SCHEMA_VERSION, MongoStoreBase
from .suspensions import SuspensionsMixin

__all__ = ["MongoStore", "MongoGateway"]


class MongoStore(SuspensionsMixin, LeasesMixin, CheckpointsMixin, ResolutionMethods, ReplyMethods, HeldMethods,
                 DiscoveryMixin, A2AMixin, MemoryMixin, CatalogMixin, OrchestrationMethods, GatewayOpenerMixin,
                 ProgressMixin, PreparationMixin, AdminMixin, MongoStoreBase):
    """A MongoDB store of classes ``runs``, ``suspensions``, ``leases``, ``checkpoints``,
    ``a2a`` with ``a2a_resolutions``, ``a2a_replies``, ``a2a_held`` and
    ``a2a_discovery``, ``memory`` and ``orchestration`` (those only where the
    deployment has transactions), ``catalog``, ``gateway``, ``progress``,
    ``preparation`` (only where it has snapshot sessions) and ``admin``.

    ``MongoStore(database, clock, *, collection_prefix="cortex_",
    snapshot_reads=None, close_client=False, gateway_client=None,
    gateway_lease=10.0, lease_clock=time.time)``.  Collections and indexes
    are created when the store opens (idempotently).  ``close()`` is
    idempotent; it closes the client only when ``close_client=True``.
    """

    capabilities = frozenset({"runs", "suspensions", "leases", "checkpoints", "a2a", "a2a_resolutions", "a2a_replies",
                              "a2a_held", "a2a_discovery", "memory", "catalog", "orchestration", "gateway",
                              "progress", "preparation", "admin"})
    schema_version = SCHEMA_VERSION

    def __init__(self, database: Any, clock: Clock | None = None, *, gateway_client: Any = None,
                 gateway_lease: float = DEFAULT_LEASE, lease_clock: Callable[[], float] | None = None,
                 **options: Any) -> None:
        super().__init__(database, clock, **options)
        if not self._transactions:
            # a conversation's batch and its counters are one transaction
            # (and a team run's claim and child link read and write in one)
            self.capabilities = frozenset(self.capabilities - {"memory", "orchestration"})
        if not self._snapshot_sessions:
            # PREP-7: a capture's reads need one snapshot session
            self.capabilities = frozenset(self.capabilities - {"preparation"})
        self.gateway_client = gateway_client
        self.gateway_lease = gateway_lease
        if lease_clock is not None:
            self.lease_clock = lease_clock

    def __repr__(self) -> str:
        return f"MongoStore(database={getattr(self.database, 'name', '?')!r}, clock={self.clock!r})"
