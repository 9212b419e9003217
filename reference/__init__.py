"""The reference store: the contract's semantics in plain Python.

:class:`MemoryStore` implements every class of the suite in memory.  It is
linearizable by construction (one lock around every method), deterministic
(an injected clock, read once per call), and returns detached copies.
Every backend must be observably identical to it; read it as the spec in
code.

>>> from cortex_spec import Context, ManualClock
>>> store = MemoryStore(ManualClock())
>>> sorted(store.capabilities)  # doctest: +NORMALIZE_WHITESPACE
['a2a', 'a2a_discovery', 'a2a_held', 'a2a_replies', 'a2a_resolutions', 'admin', 'catalog', 'checkpoints',
 'gateway', 'leases', 'memory', 'orchestration', 'preparation', 'progress', 'runs', 'suspensions']
"""

from cortex_spec.a2a_held import HeldMethods
from cortex_spec.a2a_replies import ReplyMethods
from cortex_spec.a2a_resolutions import ResolutionMethods
from cortex_spec.orchestration import OrchestrationMethods

from .a2a import A2AMixin
from .a2a_discovery import DiscoveryMixin
from .admin import AdminMixin
from .catalog import CatalogMixin
from .checkpoints import CheckpointsMixin
from .gateway import GatewayMixin, MemoryGateway
from .leases import LeasesMixin
from .memory import MemoryMixin
from .preparation import PreparationMixin
from .progress import ProgressMixin
from .runs import RunsMixin
from .store import MemoryMedium, StoreBase
from .suspensions import SuspensionsMixin

__all__ = ["MemoryStore", "MemoryMedium", "MemoryGateway"]


class MemoryStore(RunsMixin, SuspensionsMixin, LeasesMixin, CheckpointsMixin, ResolutionMethods, ReplyMethods,
                  HeldMethods, DiscoveryMixin, A2AMixin, MemoryMixin, CatalogMixin, OrchestrationMethods,
                  GatewayMixin, ProgressMixin, PreparationMixin, AdminMixin, StoreBase):
    """In-memory store of classes ``runs``, ``suspensions``, ``leases``, ``checkpoints``,
    ``a2a`` (with ``a2a_resolutions``, ``a2a_replies``, ``a2a_held`` and
    ``a2a_discovery``), ``memory``, ``catalog``, ``orchestration``, ``gateway``,
    ``progress``, ``preparation`` and ``admin``.

    ``MemoryStore(clock, medium=m)`` opens a store on an existing medium:
    closing one store and opening another on the same medium is a restart.
    ``store.open_gateway(name)`` opens the gateway location ``name`` (see
    :mod:`.gateway`).
    """

    capabilities = frozenset({"runs", "suspensions", "leases", "checkpoints", "a2a", "a2a_resolutions", "a2a_replies",
                              "a2a_held", "a2a_discovery", "memory", "catalog", "orchestration", "gateway",
                              "progress", "preparation", "admin"})

    def __repr__(self) -> str:
        return f"MemoryStore(clock={self.clock!r})"
