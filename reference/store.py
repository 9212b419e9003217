"""The reference store's core: one medium, one lock, one clock.

Everything the reference does happens inside ``with self._tx() as t:``,
which holds the medium's single lock.  Every method is therefore one atomic
step (RSC-GEN-12): the reference is linearizable by construction, and it
reads clock now exactly once per call, inside the lock (RSC-GEN-1).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterator

from cortex_spec.a2a import Conversation, Delivery, Envelope, PendingAsk
from cortex_spec.admin import schema_mismatch
from cortex_spec.clock import Clock, SystemClock, truncate_ms
from cortex_spec.errors import StoreClosed
from cortex_spec.runs import Run
from cortex_spec.suspensions import Suspension

if TYPE_CHECKING:
    from .gateway import GatewayRow

__all__ = ["MemoryMedium", "StoreBase", "SCHEMA_VERSION"]

#: The layout version of a medium (class admin, ADMIN-MIG): the reference has
#: had one layout; a medium of another version is refused until migrated.
SCHEMA_VERSION = 1


class MemoryMedium:
    """The durable part of a reference store: its tables and its lock.

    A medium outlives the stores opened on it, so closing a store and opening
    another on the same medium is a faithful "restart" (nothing acknowledged
    is lost).  Tables are plain dicts of frozen entities, keyed by id.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.runs: dict[str, Run] = {}
        #: suspensions by run_id (one per run, SUSP-CREATE-2)
        self.suspensions: dict[str, Suspension] = {}
        #: suspension id -> run_id (ids are unique too, SUSP-CREATE-3)
        self.suspension_ids: dict[str, str] = {}
        # class a2a: envelopes, conversations, deliveries by id; pending asks
        # by reply_with; and every claim token issued, per delivery (A2A-DLV-6)
        self.a2a_messages: dict[str, Envelope] = {}
        self.a2a_conversations: dict[str, Conversation] = {}
        self.a2a_deliveries: dict[str, Delivery] = {}
        self.a2a_asks: dict[str, PendingAsk] = {}
        self.a2a_tokens: dict[str, tuple[str, ...]] = {}
        #: gateway inbox rows by (channel, message_id) (see .gateway)
        self.gw_items: dict[tuple[str, str], GatewayRow] = {}
        #: gateway poll offsets by channel
        self.gw_offsets: dict[str, int] = {}
        #: gateway selections by (channel, conversation): (agent, project)
        self.gw_selections: dict[tuple[str, str], tuple[str, str]] = {}
        #: the gateway's insertion sequence: {"last": the last number handed out}
        self.gw_sequence: dict[str, int] = {}
        #: the layout version the medium holds (ADMIN-MIG-1)
        self.schema: dict[str, int] = {"version": SCHEMA_VERSION}
        # the stored kinds of every class (cortex_spec.kinds): kind_<table> by key
        from cortex_spec.classes import CLASSES

        from .kinds import medium_table_name

        for cls in CLASSES.values():
            for table in cls.tables:
                setattr(self, medium_table_name(table), getattr(self, medium_table_name(table), {}))

    def tables(self) -> dict[str, dict[Any, Any]]:
        """Every table by name (every attribute but the lock)."""
        return {k: v for k, v in vars(self).items() if k != "lock"}

    def clone(self) -> "MemoryMedium":
        """An independent copy of the data, with a new lock.

        Copying each table dict is enough: the reference never mutates a
        stored entity in place (entities are frozen, JSON fields are detached
        on the way in and out, and a change replaces the table entry).
        """
        with self.lock:
            twin = MemoryMedium.__new__(MemoryMedium)
            twin.lock = threading.RLock()
            for name, table in self.tables().items():
                setattr(twin, name, dict(table))
            return twin


class StoreBase:
    """What every reference class mixin builds on."""

    capabilities: frozenset[str] = frozenset()

    def __init__(self, clock: Clock | None = None, *, medium: MemoryMedium | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.medium = medium if medium is not None else MemoryMedium()
        self._closed = False
        from cortex_spec.kinds import Crud

        from .kinds import MemoryStorage

        #: the generic operations of the stored kinds, on this store's medium
        self._crud = Crud(MemoryStorage(self), self._now)

    def close(self) -> None:
        """Idempotent.  The medium (the data) survives."""
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    @contextmanager
    def _tx(self) -> Iterator[MemoryMedium]:
        """Hold the single lock for one whole method (its linearization)."""
        with self._admin_tx() as medium:
            found = medium.schema["version"]
            if found != SCHEMA_VERSION:  # ADMIN-MIG-3/4
                raise schema_mismatch(found, SCHEMA_VERSION)
            yield medium

    @contextmanager
    def _admin_tx(self) -> Iterator[MemoryMedium]:
        """``_tx`` without the layout check (the methods of class admin)."""
        with self.medium.lock:
            if self._closed:
                raise StoreClosed("the store is closed")
            yield self.medium

    def _now(self) -> datetime:
        """Clock now, truncated to ms (call once per method, inside ``_tx``)."""
        return truncate_ms(self.clock.now())

