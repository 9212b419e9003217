"""Class ``gateway`` on MongoDB (spec: gateway.md).

Location.  A gateway location is a **database name**; its database (on the
opener's *gateway client*, by default the client of the store's own
database) holds four collections: ``gw_items`` (the inbox, one document per
key, ``_id: {"c": channel, "m": message_id}``), ``gw_offsets``
(``_id: channel``), ``gw_selections`` (``_id: {"c": channel, "v":
conversation}``) and ``gw_meta`` (the schema version, the sequence floor and
the lock).

Lock: a lease (GW-OPEN-6).  MongoDB has no lock that dies with a client
process, so the lock is the document ``gw_meta/lock`` holding an owner token
and an expiry, taken with one ``find_one_and_update`` (upsert) whose filter
only matches a free or expired lock — a second open hits the ``_id`` unique
key and raises ``StoreLocked`` at once (GW-OPEN-2/3) before it reads or
writes anything else (GW-OPEN-4).  A heartbeat thread renews the lease every
third of its length; ``close`` deletes the document (GW-OPEN-5).  When the
holder dies the lease runs out: **the declared lease time is
``gateway_lease`` seconds (default 10)**, and only within it may an open
after the holder's death still raise ``StoreLocked``.  Lease times are read
from ``lease_clock`` (wall-clock seconds; certification injects a clock it
can move) — the only clock the gateway reads, and never for data
(GW-SCOPE-5).  A heartbeat that finds the lease taken by someone else marks
the store lost: every later call raises ``StoreError``.

Atomicity without transactions (any server, and faithful mongomock):

* ``accept`` inserts the row with ``insert_one``; the ``_id`` unique key is
  the deduplication (GW-ACC-5).  Its insertion number comes from a unique
  index on ``seq``: the number is one more than the largest stored (or the
  floor in ``gw_meta``, raised after each insert), and an insert that loses
  the number to a concurrent accept retries with the next one.  A number is
  therefore only taken by an insert that becomes visible after every row
  holding a smaller one, so the order by ``seq`` is the order in which the
  accepts succeeded (GW-ORD-2), with no lock across the calls.  A duplicate
  key error is told apart (``_id`` or ``seq``) by reading the key's row.
* ``set_replied`` and ``mark_done`` are single conditional updates on the
  row's status (GW-ST-8); ``set_replied`` first reads the row to check the
  size of the row with its reply (RSC-GEN-8) and then updates only that
  incarnation of it (its ``seq``), still pending.
* ``prune_done`` is one ``delete_many`` (each row's deletion is atomic);
  offsets and the two selection setters are single upserts (``$set`` of one
  field, GW-SEL-6).
* Queues are one ``find`` sorted by ``(received_at, seq)`` (BSON dates:
  instants, never text, GW-ORD-1), in a snapshot session where the server
  has them (replica sets and sharded clusters of MongoDB 5.0+, as the
  store's own lists), so a queue read is one instant (GW-RACE-8).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Callable, Iterator

from cortex_spec.context import Context, require_context
from cortex_spec.errors import (
    CortexError,
    InvalidArgument,
    StoreClosed,
    StoreError,
    StoreLocked,
)
from cortex_spec.gateway import (
    GatewayStore,
    InboundMessage,
    InboxItem,
    ItemStatus,
    check_channel,
    check_cutoff,
    check_key,
    check_offset_value,
    check_queue_page,
    check_reply,
    check_reply_fits,
    check_selection_key,
    check_selection_value,
    validate_message,
)

from .store import create_missing_indexes, decode, dt_in, dt_out

__all__ = ["MongoGateway", "GatewayOpenerMixin", "GATEWAY_SCHEMA_VERSION", "DEFAULT_LEASE",
           "check_database_name"]

#: Version of the gateway's collections (``gw_meta/schema``).
GATEWAY_SCHEMA_VERSION = 1
#: Seconds of the lock's lease unless the opener says otherwise.
DEFAULT_LEASE = 10.0

_ITEMS, _OFFSETS, _SELECTIONS, _META = "gw_items", "gw_offsets", "gw_selections", "gw_meta"
_PENDING, _REPLIED, _DONE = ItemStatus.PENDING.value, ItemStatus.REPLIED.value, ItemStatus.DONE.value
_FIELDS = ("channel", "message_id", "conversation", "principal", "text", "trusted", "agent", "project")
_BAD_DB_CHARS = re.compile(r'[/\\. "$*<>:|?\x00]')


def check_database_name(location: object) -> str:
    """A MongoDB database name: a non-empty ``str`` of at most 63 bytes
    without ``/\\. "$*<>:|?`` (else ``InvalidArgument``)."""
    if not isinstance(location, str):
        raise InvalidArgument(f"a gateway location is a database name (str), got {type(location).__name__}")
    if not location or len(location.encode("utf-8", "surrogatepass")) > 63 or _BAD_DB_CHARS.search(location):
        raise InvalidArgument(f"{location!r} is not a valid MongoDB database name")
    return location


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _item_from_doc(doc: dict[str, Any]) -> InboxItem:
    return decode("a stored inbox row", lambda: InboxItem(
        **{f: doc[f] for f in _FIELDS},
        status=ItemStatus(doc["status"]),
        reply=doc["reply"],
        received_at=dt_in(doc["received_at"]),
    ))


class MongoGateway:
    """An open gateway store on one MongoDB database (see the module docstring)."""

    def __init__(self, database: Any, *, lease: float, lease_clock: Callable[[], float],
                 snapshot_reads: bool = False) -> None:
        self.database = database
        self.snapshot_reads = snapshot_reads
        self.lease = float(lease)
        self.lease_clock = lease_clock
        self.owner = uuid.uuid4().hex
        self._items = database[_ITEMS]
        self._offsets = database[_OFFSETS]
        self._selections = database[_SELECTIONS]
        self._meta = database[_META]
        self._closed = False
        self._lost = False
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    # -- opening ---------------------------------------------------------------------

    @classmethod
    def open(cls, database: Any, *, lease: float = DEFAULT_LEASE,
             lease_clock: Callable[[], float] = time.time,
             snapshot_reads: bool = False) -> "MongoGateway":
        """Take the lease, then create or check the state (GW-OPEN-1..4, 8)."""
        from pymongo import ReturnDocument
        from pymongo.errors import DuplicateKeyError, PyMongoError

        store = cls(database, lease=lease, lease_clock=lease_clock, snapshot_reads=snapshot_reads)
        now = _ms(lease_clock())
        try:
            store._meta.find_one_and_update(
                {"_id": "lock", "$or": [{"owner": None}, {"expires": {"$lt": now}}]},
                {"$set": {"owner": store.owner, "expires": now + _ms(store.lease)}},
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError:
            raise StoreLocked(f"gateway location {database.name!r} is held by another open store") from None
        except PyMongoError as exc:
            raise StoreError(f"cannot open gateway location {database.name!r}: {exc}") from exc
        try:
            store._prepare()
        except BaseException as exc:
            store._release()  # GW-OPEN-8: no lock left held
            if isinstance(exc, CortexError):
                raise
            if isinstance(exc, PyMongoError):
                raise StoreError(f"cannot open gateway location {database.name!r}: {exc}") from exc
            raise
        store._heartbeat = threading.Thread(target=store._renew, daemon=True,
                                            name=f"cortex-gw-lease-{database.name}")
        store._heartbeat.start()
        return store

    def _prepare(self) -> None:
        schema = self._meta.find_one({"_id": "schema"})
        if schema is None:
            self._meta.update_one({"_id": "schema"}, {"$setOnInsert": {"version": GATEWAY_SCHEMA_VERSION}},
                                  upsert=True)
        elif schema.get("version") != GATEWAY_SCHEMA_VERSION:
            raise StoreError(
                f"gateway location {self.database.name!r} has schema version "
                f"{schema.get('version')!r}; this adapter reads {GATEWAY_SCHEMA_VERSION}")
        create_missing_indexes([
            (self._items, [("seq", 1)], "seq_unique", {"unique": True}),
            (self._items, [("status", 1), ("received_at", 1), ("seq", 1)], "queue", {}),
        ])

    def _renew(self) -> None:
        """Heartbeat: extend the lease every third of its length."""
        while not self._stop.wait(self.lease / 3):
            try:
                now = _ms(self.lease_clock())
                result = self._meta.update_one({"_id": "lock", "owner": self.owner},
                                               {"$set": {"expires": now + _ms(self.lease)}})
                if result.matched_count == 0:
                    self._lost = True
                    return
            except Exception:  # noqa: BLE001 - a failed renewal is retried next beat
                continue

    # -- closing ---------------------------------------------------------------------

    def _release(self) -> None:
        try:
            self._meta.delete_one({"_id": "lock", "owner": self.owner})
        except Exception:  # noqa: BLE001 - best effort: the lease runs out anyway
            pass

    def close(self) -> None:
        """Idempotent: stop the heartbeat, release the lease (GW-OPEN-5/7)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._release()

    def abandon(self) -> None:
        """What the death of the holding process does: the heartbeat stops and
        the lease is left to run out (the harness's crash hook)."""
        self._closed = True
        self._stop.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"MongoGateway({self.database.name!r})"

    @contextmanager
    def _guard(self) -> Iterator[None]:
        if self._closed:
            raise StoreClosed("the gateway store is closed")
        if self._lost:
            raise StoreError("the gateway lost its lease to another open store")
        from pymongo.errors import PyMongoError

        try:
            yield
        except CortexError:
            raise
        except PyMongoError as exc:
            raise StoreError(f"MongoDB error: {exc}") from exc

    # -- inbox -------------------------------------------------------------------------

    def _next_seq(self) -> int:
        top = self._items.find_one({}, projection={"seq": 1}, sort=[("seq", -1)])
        floor = self._meta.find_one({"_id": "seq"})
        return max(int(top["seq"]) if top else 0, int(floor["last"]) if floor else 0) + 1

    def accept(self, ctx: Context, message: InboundMessage, now: datetime) -> bool:
        item = validate_message(ctx, message, now)
        from pymongo.errors import DuplicateKeyError

        key = {"c": item.channel, "m": item.message_id}
        doc: dict[str, Any] = {f: getattr(item, f) for f in _FIELDS}
        doc.update(_id=key, status=_PENDING, reply="", received_at=dt_out(item.received_at))
        with self._guard():
            for _ in range(1000):
                seq = self._next_seq()
                try:
                    self._items.insert_one(dict(doc, seq=seq))
                except DuplicateKeyError:
                    if self._items.find_one({"_id": key}, projection={"_id": 1}) is not None:
                        return False  # GW-ACC-3: the key has a row
                    continue  # another accept took the number: take the next one
                self._meta.update_one({"_id": "seq"}, {"$max": {"last": seq}}, upsert=True)
                return True
            raise StoreError("accept kept losing its insertion number to concurrent accepts")

    def get_item(self, ctx: Context, channel: str, message_id: str) -> InboxItem | None:
        require_context(ctx)
        channel, message_id = check_key(channel, message_id)
        with self._guard():
            doc = self._items.find_one({"_id": {"c": channel, "m": message_id}})
            return None if doc is None else _item_from_doc(doc)

    def _queue(self, ctx: Context, status: str, limit: int, offset: int) -> list[InboxItem]:
        require_context(ctx)
        limit, offset = check_queue_page(limit, offset)
        options: dict[str, Any] = {"sort": [("received_at", 1), ("seq", 1)], "skip": offset,
                                   "limit": limit}
        with self._guard():
            if not self.snapshot_reads:
                return [_item_from_doc(d) for d in self._items.find({"status": status}, **options)]
            with self.database.client.start_session(snapshot=True) as session:
                docs = list(self._items.find({"status": status}, session=session, **options))
            return [_item_from_doc(d) for d in docs]

    def pending(self, ctx: Context, limit: int = 0, offset: int = 0) -> list[InboxItem]:
        return self._queue(ctx, _PENDING, limit, offset)

    def pending_replies(self, ctx: Context, limit: int = 0, offset: int = 0) -> list[InboxItem]:
        return self._queue(ctx, _REPLIED, limit, offset)

    def set_replied(self, ctx: Context, channel: str, message_id: str, reply: str) -> bool:
        require_context(ctx)
        channel, message_id = check_key(channel, message_id)
        reply = check_reply(reply)
        key = {"c": channel, "m": message_id}
        with self._guard():
            doc = self._items.find_one({"_id": key})
            if doc is None:
                return False  # GW-ST-5
            check_reply_fits(_item_from_doc(doc), reply)
            result = self._items.update_one(
                {"_id": key, "seq": doc["seq"], "status": _PENDING},
                {"$set": {"status": _REPLIED, "reply": reply}},
            )
            return bool(result.modified_count == 1)

    def mark_done(self, ctx: Context, channel: str, message_id: str) -> bool:
        require_context(ctx)
        channel, message_id = check_key(channel, message_id)
        with self._guard():
            result = self._items.update_one(
                {"_id": {"c": channel, "m": message_id}, "status": {"$in": [_PENDING, _REPLIED]}},
                {"$set": {"status": _DONE}},
            )
            return bool(result.modified_count == 1)

    def prune_done(self, ctx: Context, before: datetime) -> int:
        require_context(ctx)
        cutoff = check_cutoff(before)
        with self._guard():
            result = self._items.delete_many({"status": _DONE, "received_at": {"$lt": dt_out(cutoff)}})
            return int(result.deleted_count)

    # -- offsets -------------------------------------------------------------------------

    def offset(self, ctx: Context, channel: str) -> int:
        require_context(ctx)
        channel = check_channel(channel)
        with self._guard():
            doc = self._offsets.find_one({"_id": channel})
            return 0 if doc is None else int(doc["value"])

    def set_offset(self, ctx: Context, channel: str, value: int) -> None:
        require_context(ctx)
        channel = check_channel(channel)
        value = check_offset_value(value)
        with self._guard():
            self._offsets.update_one({"_id": channel}, {"$set": {"value": value}}, upsert=True)

    # -- selection ------------------------------------------------------------------------

    def conversation(self, ctx: Context, channel: str, conversation: str) -> tuple[str, str]:
        require_context(ctx)
        channel, conversation = check_selection_key(channel, conversation)
        with self._guard():
            doc = self._selections.find_one({"_id": {"c": channel, "v": conversation}})
            if doc is None:
                return ("", "")
            return (doc.get("agent", ""), doc.get("project", ""))

    def _set_selection(self, ctx: Context, channel: str, conversation: str, value: str, field: str) -> None:
        require_context(ctx)
        channel, conversation = check_selection_key(channel, conversation)
        value = check_selection_value(value, field)
        other = "project" if field == "agent" else "agent"
        with self._guard():
            self._selections.update_one(
                {"_id": {"c": channel, "v": conversation}},
                {"$set": {field: value}, "$setOnInsert": {other: ""}},
                upsert=True,
            )

    def set_conversation_agent(self, ctx: Context, channel: str, conversation: str, agent: str) -> None:
        self._set_selection(ctx, channel, conversation, agent, "agent")

    def set_conversation_project(
        self, ctx: Context, channel: str, conversation: str, project: str
    ) -> None:
        self._set_selection(ctx, channel, conversation, project, "project")


class GatewayOpenerMixin:
    """Makes :class:`~cortex_spec.adapters.mongo.MongoStore` a gateway opener.

    Options (keyword arguments of the store): ``gateway_client`` (whose
    databases are gateway locations; default the store database's client),
    ``gateway_lease`` (seconds, default :data:`DEFAULT_LEASE`) and
    ``lease_clock`` (wall-clock seconds, default :func:`time.time`).
    """

    gateway_client: Any = None
    #: the store's database (MongoStoreBase)
    database: Any
    gateway_lease: float = DEFAULT_LEASE
    lease_clock: Callable[[], float] = staticmethod(time.time)

    def open_gateway(self, location: Any) -> GatewayStore:
        """Open the gateway at database ``location`` (see :mod:`.gateway`)."""
        if getattr(self, "_closed", False):
            raise StoreClosed("the store is closed")
        name = check_database_name(location)
        client = self.gateway_client if self.gateway_client is not None else self.database.client
        same_client = self.gateway_client is None or self.gateway_client is self.database.client
        snapshot = same_client and bool(getattr(self, "_snapshot_reads", False))
        return MongoGateway.open(client[name], lease=self.gateway_lease, lease_clock=self.lease_clock,
                                 snapshot_reads=snapshot)
