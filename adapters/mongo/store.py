"""The MongoDB store's core: database handle, clock, indexes, codecs, errors.

Everything the class mixins (:mod:`.runs`, :mod:`.suspensions`,
:mod:`.checkpoints`) share lives here:

* the collections and their indexes, created idempotently when a store is
  opened (``create_index`` with the same name and options is a no-op);
* the codecs between entities and BSON documents (see "Stored forms");
* :meth:`MongoStoreBase._guard`, the one place driver errors are
  translated: ``DuplicateKeyError`` → :class:`~cortex_spec.errors.AlreadyExists`,
  any other ``PyMongoError`` → :class:`~cortex_spec.errors.StoreError` with
  the driver error chained; and a closed store → ``StoreClosed``.

Stored forms
------------

* **Instants** are BSON dates.  They are written as naive UTC ``datetime``
  values (what both pymongo and mongomock store without conversion) and read
  back as aware UTC whatever the client's ``tz_aware`` codec option, so the
  store works on any :class:`pymongo.database.Database` handed to it.  Every
  instant is already truncated to milliseconds (RSC-GEN-1/2), which is BSON's
  precision, so round trips are exact.
* **JSON objects** (``metadata``, ``continuation``, ``reply_route``) are
  stored as JSON text, not as BSON sub-documents: their keys may contain
  ``.`` or start with ``$`` or be empty, and BSON would turn an int into a
  float or an int64 into a Decimal128 on some paths; JSON text keeps every
  type exactly (RSC-GEN-7).
* **Scopes** are stored per level: ``{"n": depth, "k0": key, "v0": value,
  "k1": ..., "c": canonical}``.  Visibility (SCOPE-VIS) is then a query of
  whole-string equalities, level by level, plus ``n >= depth`` (or
  ``n == depth`` for exact mode): ``[ws=ws1]`` can never see ``[ws=ws10]``,
  and no key or value is ever interpreted as a pattern.  The canonical form
  ``c`` is kept for operators reading the collections; queries never use it.
* **Ids** are the documents' ``_id`` (TypeIDs are ASCII, so MongoDB's binary
  string order, by UTF-8 bytes, is code-point order: RSC-GEN-11).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Callable, Iterator, TypeVar

from cortex_spec.clock import UTC, Clock, SystemClock, truncate_ms
from cortex_spec.errors import (
    AlreadyExists,
    CortexError,
    InvalidArgument,
    StoreClosed,
    StoreError,
)
from cortex_spec.scope import MAX_DEPTH, Scope

__all__ = [
    "MongoStoreBase",
    "SCHEMA_VERSION",
    "COLLECTIONS",
    "dt_out",
    "dt_in",
    "opt_dt_in",
    "json_out",
    "json_in",
    "scope_out",
    "scope_in",
    "scope_filter",
]

#: The layout version of a database (class admin, ADMIN-MIG): the version is
#: the ``schema`` document of the ``meta`` collection; a database holding the
#: collections but no such document was made before versions were stored:
#: version 0, the same collections, which ``migrate`` brings to 1.
SCHEMA_VERSION = 1

#: Collection names (after the store's prefix) by role.
COLLECTIONS = {
    # one document per run id: the run (``run``) and its suspension (``susp``)
    "runs": "runs",
    "checkpoints": "checkpoints",
    # the layout version (class admin)
    "meta": "meta",
}


# -- codecs --------------------------------------------------------------------------


T = TypeVar("T")


def dt_out(value: datetime | None) -> datetime | None:
    """An aware instant as the naive UTC ``datetime`` BSON stores."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None)


def dt_in(value: Any) -> datetime:
    """A stored BSON date back to an aware UTC instant (any codec options)."""
    if not isinstance(value, datetime):
        raise StoreError(f"a stored instant is a {type(value).__name__}, not a date")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def opt_dt_in(value: Any) -> datetime | None:
    return None if value is None else dt_in(value)


def json_out(value: Any) -> str | None:
    """A JSON object as compact JSON text (``None`` stays ``None``)."""
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def json_in(text: Any) -> Any:
    if text is None:
        return None
    if not isinstance(text, str):
        raise StoreError(f"a stored JSON object is a {type(text).__name__}, not JSON text")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise StoreError("a stored JSON object is not valid JSON") from exc
    if not isinstance(value, dict):
        raise StoreError("a stored JSON object is not an object")
    return value


def scope_out(scope: Scope) -> dict[str, Any]:
    doc: dict[str, Any] = {"n": scope.depth}
    for i, (key, value) in enumerate(scope.levels):
        doc[f"k{i}"] = key
        doc[f"v{i}"] = value
    doc["c"] = scope.canonical()
    return doc


def scope_in(doc: Any) -> Scope:
    """Rebuild a stored scope; one that cannot be rebuilt is a ``StoreError``
    (SCOPE-CANON-5), never a different or shorter scope."""
    try:
        depth = doc["n"]
        if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH:
            raise ValueError(f"depth {depth!r}")
        return Scope(*((doc[f"k{i}"], doc[f"v{i}"]) for i in range(depth)))
    except (KeyError, TypeError, ValueError, InvalidArgument) as exc:
        raise StoreError("a stored scope cannot be rebuilt") from exc


def decode(subject: str, build: Callable[[], T]) -> T:
    """``build()`` an entity from a stored document; a document that does not
    fit (a missing field, a wrong type or value) is ``StoreError``
    "<subject> cannot be read", never a raw ``KeyError``."""
    try:
        return build()
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"{subject} cannot be read") from exc


def create_missing_indexes(
    wanted: list[tuple[Any, list[tuple[str, int]], str, dict[str, Any]]],
) -> None:
    """Create each ``(collection, keys, name, options)`` whose name its
    collection does not have yet, reading each collection's index list once.
    By name, not by repeating ``create_index``: a server would accept the
    repeat, but mongomock re-validates a unique index against every stored
    document and ignores its ``partialFilterExpression`` while doing so."""
    existing: dict[str, set[str]] = {}
    for collection, keys, name, options in wanted:
        names = existing.get(collection.name)
        if names is None:
            names = existing[collection.name] = set(collection.index_information())
        if name not in names:
            collection.create_index(keys, name=name, **options)
            names.add(name)


def scope_filter(path: str, scope: Scope, *, exact: bool = False) -> dict[str, Any]:
    """The query of SCOPE-VIS (or SCOPE-EXACT) on the scope stored at ``path``.

    A row is visible iff it is at least as deep as ``scope`` and agrees with
    it on every level of ``scope``, key and value compared whole.
    """
    query: dict[str, Any] = {f"{path}.n": scope.depth if exact else {"$gte": scope.depth}}
    for i, (key, value) in enumerate(scope.levels):
        query[f"{path}.k{i}"] = key
        query[f"{path}.v{i}"] = value
    return query


# -- the base ------------------------------------------------------------------------


class _DriverErrors:
    """The context of every store call's driver work: a driver error out of
    it becomes the contract's (a duplicate key ``AlreadyExists``, any other
    ``StoreError``); the contract's own errors and everything else pass.
    One object serves every call (a class, not a generator: a store call
    enters it once or twice)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        # (None: the error, if any, goes on as it is)
        if kind is None or issubclass(kind, CortexError):
            return
        try:
            from pymongo.errors import DuplicateKeyError, PyMongoError
        except ImportError:  # pragma: no cover - the mongo extra is missing
            raise StoreError("pymongo is not installed (pip install 'cortex-spec[mongo]')") from exc
        if issubclass(kind, DuplicateKeyError):
            raise AlreadyExists("a unique key is already taken") from exc
        if issubclass(kind, PyMongoError):
            raise StoreError(f"MongoDB error: {exc}") from exc


_DRIVER_ERRORS = _DriverErrors()


class MongoStoreBase:
    """Database handle, clock, collections and error translation.

    ``MongoStoreBase(database, clock)``: ``database`` is a
    :class:`pymongo.database.Database` or a
    :class:`~cortex_spec.adapters.mongo.faithful.FaithfulDatabase`.  The
    store does not own the client: :meth:`close` marks the store closed and
    closes the client only when ``close_client=True``.
    """

    capabilities: frozenset[str] = frozenset()

    def __init__(
        self,
        database: Any,
        clock: Clock | None = None,
        *,
        collection_prefix: str = "cortex_",
        snapshot_reads: bool | None = None,
        close_client: bool = False,
    ) -> None:
        self.database = database
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.collection_prefix = collection_prefix
        self._close_client = close_client
        self._closed = False
        self._runs = database[collection_prefix + COLLECTIONS["runs"]]
        self._checkpoints = database[collection_prefix + COLLECTIONS["checkpoints"]]
        self._meta = database[collection_prefix + COLLECTIONS["meta"]]
        from cortex_spec.kinds import Crud

        from .kinds import MongoStorage

        #: the generic operations of the stored kinds (cortex_spec.kinds)
        self._crud = Crud(MongoStorage(self), self._now)
        with self._driver_guard():
            #: the layout version found (ADMIN-MIG): another one refuses every
            #: method but those of class admin
            self._schema_found: int | None = self._open_schema()
            self._snapshot_reads = (
                self._detect_snapshot_reads() if snapshot_reads is None else snapshot_reads
            )
            #: multi-document transactions (the classes that need them are
            #: declared only where there are)
            self._transactions = self._detect_transactions()
            #: snapshot sessions for a read spanning collections (class
            #: preparation): a server's, or the faithful wrapper's emulation
            self._snapshot_sessions = self._snapshot_reads or self._is_faithful()

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        """Idempotent.  The data stays in the database."""
        if self._closed:
            return
        self._closed = True
        if self._close_client:
            try:
                self.database.client.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    @property
    def closed(self) -> bool:
        return self._closed

    # -- the layout version ------------------------------------------------------------

    def _read_version(self) -> int | None:
        """The stored version; 0 for collections without one; None for a
        database holding none of the store's collections."""
        meta = self._meta.find_one({"_id": "schema"})
        if meta is not None:
            return meta.get("version")  # type: ignore[no-any-return]
        prefix = self.collection_prefix
        names = [n for n in self.database.list_collection_names() if n.startswith(prefix) and n != self._meta.name]
        return 0 if names else None

    def _write_version(self) -> None:
        from pymongo.errors import DuplicateKeyError

        for _ in range(3):  # two first upserts of one _id: one of them retries as an update
            try:
                self._meta.update_one({"_id": "schema"}, {"$max": {"version": SCHEMA_VERSION}}, upsert=True)
                return
            except DuplicateKeyError:
                continue

    def _open_schema(self) -> int:
        """At open: an empty database gets the current layout (its version
        written first, so a store opening meanwhile never takes the new
        collections for an older layout); the current one gets any missing
        index; another version is left as it is (refused until migrated)."""
        found = self._read_version()
        if found is None:
            self._write_version()
            found = SCHEMA_VERSION
        if found == SCHEMA_VERSION:
            self.ensure_indexes()
        return found

    # -- indexes ---------------------------------------------------------------------

    def ensure_indexes(self) -> None:
        """Create every index the store relies on that does not exist yet.

        Idempotent.  An index that already exists (by name) is left alone
        rather than created again: a server would accept the repeat, but
        mongomock re-validates a unique index against every stored document
        and ignores its ``partialFilterExpression`` while doing so, so
        reopening a store whose slots mostly carry no suspension would fail.
        """
        has_susp = {"susp.id": {"$exists": True}}
        wanted: list[tuple[Any, list[tuple[str, int]], str, dict[str, Any]]] = [
            # SUSP-CREATE-3: suspension ids are unique over all scopes.
            # Partial, because most documents carry no suspension.  Run ids
            # (RUN-CREATE-2) and one suspension per run (SUSP-CREATE-2) are
            # both enforced by `_id`: one document per run id.
            (self._runs, [("susp.id", 1)], "susp_id_unique",
             {"unique": True, "partialFilterExpression": has_susp}),
            (self._runs,
             [("run.scope.k0", 1), ("run.scope.v0", 1), ("run.created_at", -1), ("_id", -1)],
             "run_list", {}),
            (self._runs, [("susp.expires_at", 1), ("susp.id", 1)], "susp_expired",
             {"partialFilterExpression": has_susp}),
            (self._checkpoints, [("state", 1), ("created_at", 1), ("_id", 1)],
             "pending_by_created", {}),
            (self._checkpoints, [("state", 1), ("_id", 1)], "pending_by_id", {}),
        ]
        from cortex_spec.classes import CLASSES

        from .kinds import kind_indexes

        for cls in CLASSES.values():  # the stored kinds: one collection each
            for table in cls.tables:
                wanted += kind_indexes(self.database[self.collection_prefix + table.name], table)
        create_missing_indexes(wanted)

    # -- the guard ---------------------------------------------------------------------

    def _guard(self) -> _DriverErrors:
        """Refuse a closed store and a database of another layout version
        (ADMIN-MIG-3/4: read again, in case another store migrated it);
        the ``with`` block's driver errors are translated (never leaked raw)."""
        errors = self._driver_guard()  # a closed store first
        if self._schema_found != SCHEMA_VERSION:
            with errors:
                self._schema_found = self._read_version()
            if self._schema_found != SCHEMA_VERSION:
                from cortex_spec.admin import schema_mismatch

                raise schema_mismatch(self._schema_found, SCHEMA_VERSION)
        return errors

    def _driver_guard(self) -> _DriverErrors:
        """Refuse a closed store; the ``with`` block's driver errors are
        translated (never leaked raw)."""
        if self._closed:
            raise StoreClosed("the store is closed")
        return _DRIVER_ERRORS

    def _now(self) -> datetime:
        """Clock now, truncated to ms: read once per call (RSC-GEN-1)."""
        return truncate_ms(self.clock.now())

    # -- reads spanning documents ---------------------------------------------------------

    def _detect_snapshot_reads(self) -> bool:
        """True on a replica set or sharded cluster of MongoDB 5.0 or later.

        There, list and count queries run in a snapshot session so that a
        read spanning several documents sees one point in time (RSC-GEN-12).
        A standalone server has no snapshot reads: each document is still
        read atomically, but a list may interleave with concurrent writes.
        The faithful mongomock wrapper makes every call atomic as a whole.
        """
        from .faithful import FaithfulDatabase

        if isinstance(self.database, FaithfulDatabase):
            return False
        if type(self.database).__module__.startswith("mongomock"):
            return False  # raw mongomock: no sessions (and no thread safety)
        client = getattr(self.database, "client", None)
        if client is None or not hasattr(client, "start_session"):
            return False
        from pymongo.errors import OperationFailure

        try:
            hello = client.admin.command("hello")
        except OperationFailure:  # servers before 4.4.2 only know isMaster
            hello = client.admin.command("isMaster")
        clustered = bool(hello.get("setName")) or hello.get("msg") == "isdbgrid"
        return clustered and int(hello.get("maxWireVersion", 0)) >= 13

    def _is_faithful(self) -> bool:
        from .faithful import FaithfulDatabase

        return isinstance(self.database, FaithfulDatabase)

    def _detect_transactions(self) -> bool:
        """Multi-document transactions: emulated by the faithful mongomock,
        real on a replica set or a sharded cluster, absent on a standalone
        server and on raw mongomock."""
        from .faithful import FaithfulDatabase

        if isinstance(self.database, FaithfulDatabase):
            return True
        if type(self.database).__module__.startswith("mongomock"):
            return False
        client = getattr(self.database, "client", None)
        if client is None or not hasattr(client, "start_session"):
            return False
        hello = client.admin.command("hello")
        clustered = bool(hello.get("setName")) or hello.get("msg") == "isdbgrid"
        return clustered and int(hello.get("maxWireVersion", 0)) >= 8

    @contextmanager
    def _session(self) -> Iterator[Any]:
        with self.database.client.start_session() as session:
            yield session

    def _txn(self, body: Callable[[Any], T]) -> T:
        """``body(session)`` in one transaction (retried on a server's
        transient conflicts by ``with_transaction``)."""
        if not self._transactions:
            raise StoreError("this MongoDB deployment has no multi-document transactions")
        with self._session() as session:
            # the driver is untyped: with_transaction returns what body returns
            result: T = session.with_transaction(body)
            return result

    @contextmanager
    def _snapshot_session(self) -> Iterator[Any]:
        """A snapshot session for several reads that must see one point in
        time (class preparation): every read passing it sees the data as of
        the session's first read (a server), or holds the storage's lock
        (the faithful wrapper)."""
        if not self._snapshot_sessions:
            raise StoreError("this MongoDB deployment has no snapshot reads")
        with self.database.client.start_session(snapshot=True) as session:
            yield session

    @contextmanager
    def _read_session(self) -> Iterator[Any]:
        """A snapshot session for one multi-document read, or ``None``."""
        if not self._snapshot_reads:
            yield None
            return
        with self.database.client.start_session(snapshot=True) as s:
            yield s

    def _find(self, collection: Any, query: dict[str, Any], **kwargs: Any) -> list[dict[str, Any]]:
        """Every matching document, read as one query (snapshot where possible)."""
        with self._read_session() as session:
            if session is not None:
                kwargs["session"] = session
            return list(collection.find(query, **kwargs))

    def _count(self, collection: Any, query: dict[str, Any]) -> int:
        with self._read_session() as session:
            if session is not None:
                return int(collection.count_documents(query, session=session))
            return int(collection.count_documents(query))
