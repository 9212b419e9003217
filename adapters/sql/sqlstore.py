"""``SqlStore``: the class mixins of the SQL adapter put together."""

from .a2a import A2AMixin
from .checkpoints import CheckpointsMixin
from .runs import RunsMixin
from .store import SqlStoreBase
from .suspensions import SuspensionsMixin

__all__ = ["SqlStore"]


class SqlStore(RunsMixin, SuspensionsMixin, CheckpointsMixin, A2AMixin, SqlStoreBase):
    """SQL store of classes ``runs``, ``suspensions``, ``checkpoints``, ``a2a``.

    ``SqlStore(url_or_engine, clock)``; see :class:`.store.SqlStoreBase`
    for the options.
    """

    capabilities = frozenset({"runs", "suspensions", "checkpoints", "a2a"})
