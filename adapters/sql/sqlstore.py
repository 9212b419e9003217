"""``SqlStore``: the class mixins of the SQL adapter put together."""

from typing import Any

from cortex_spec.a2a_held import HeldMethods
from cortex_spec.a2a_replies import ReplyMethods
from cortex_spec.a2a_resolutions import ResolutionMethods
from cortex_spec.orchestration import OrchestrationMethods

from .a2a import A2AMixin
from .a2a_discovery import DiscoveryMixin
from .admin import AdminMixin
from .catalog import CatalogMixin
from .checkpoints import CheckpointsMixin
from .gateway import GatewayOpenerMixin
from .leases import LeasesMixin
from .memory import MemoryMixin
from .preparation import PreparationMixin
from .progress import ProgressMixin
from .runs import RunsMixin
from .store import SqlStoreBase
from .suspensions import SuspensionsMixin

__all__ = ["SqlStore"]


class SqlStore(RunsMixin, SuspensionsMixin, LeasesMixin, CheckpointsMixin, ResolutionMethods, ReplyMethods,
               HeldMethods, DiscoveryMixin, A2AMixin, MemoryMixin, CatalogMixin, OrchestrationMethods,
               GatewayOpenerMixin, ProgressMixin, PreparationMixin, AdminMixin, SqlStoreBase):
    """SQL store of classes ``runs``, ``suspensions``, ``leases``, ``checkpoints``, ``a2a``
    (with ``a2a_resolutions``, ``a2a_replies``, ``a2a_held`` and
    ``a2a_discovery``: each commit of those is one transaction),
    ``memory``, ``catalog``, ``orchestration``, ``gateway``, ``progress``,
    ``preparation`` and ``admin``.

    ``SqlStore(url_or_engine, clock)``; see :class:`.store.SqlStoreBase`
    for the options.  ``store.open_gateway(location)`` opens a chat
    gateway's state (see :mod:`.gateway`): a directory on SQLite, a schema
    name on PostgreSQL (in ``gateway_engine``'s database, default the
    store's); ``gateway_synchronous`` is the SQLite gateway file's ``PRAGMA
    synchronous`` (default ``FULL``).
    """

    capabilities = frozenset({"runs", "suspensions", "leases", "checkpoints", "a2a", "a2a_resolutions", "a2a_replies",
                              "a2a_held", "a2a_discovery", "memory", "catalog", "orchestration", "gateway",
                              "progress", "preparation", "admin"})

    def __init__(self, url_or_engine: Any, clock: Any = None, *, gateway_engine: Any = None,
                 gateway_synchronous: str = "FULL", **options: Any) -> None:
        super().__init__(url_or_engine, clock, **options)
        self.gateway_engine = gateway_engine
        self.gateway_synchronous = gateway_synchronous
