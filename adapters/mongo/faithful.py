"""Faithful mongomock: every collection operation atomic, as on a server.

mongomock is a convenient in-process MongoDB, but it is not thread-safe: a
``find_one_and_update`` matches a document and then writes it in two Python
steps, so two threads can both match the same ``{"state": "paused"}``
document and both "win" (measured for this project: 8 threads claiming 2,000
documents reported 6,892 winners).  A real server applies each
single-document operation atomically.  Certifying a store on raw mongomock
would therefore fail correct adapters; certifying on a globally locked
mongomock would pass broken ones.  This module sits in between.

What the wrapper guarantees
---------------------------

* **Every call is atomic.**  Each method call on a :class:`FaithfulCollection`
  (``find_one``, ``find``, ``insert_one``/``insert_many``, ``update_one``/
  ``update_many``, ``replace_one``, every ``find_one_and_*``,
  ``delete_one``/``delete_many``, ``count_documents``, ``distinct``,
  ``aggregate``, ``bulk_write``, index management, ...) runs entirely under
  one lock shared by every client opened on the same mongomock storage.
  ``find`` and ``aggregate`` materialise their results *inside* the lock
  (mongomock's cursors are lazy and would otherwise read the documents after
  the lock is gone); they return a :class:`MaterializedCursor`.
* **No lock is ever held across two calls.**  The lock is taken when a call
  starts and released when it returns, and after releasing it the calling
  thread yields the interpreter while other threads use the same storage
  (one of them made one of its last 64 calls), so other threads'
  operations interleave between any two operations of one thread — as other
  clients' operations interleave between two round trips to a server.  An
  adapter that reads a document and then writes it in a second call races
  as it would against a server, so repeated claim races catch it.
* **Stronger than a server in one respect**: a call that touches several
  documents (``find``, ``update_many``, ``count_documents``) is atomic as a
  whole here, whereas a server only makes each document's part atomic.  The
  wrapper therefore cannot catch an adapter that relies on a multi-document
  read being a snapshot.  :mod:`cortex_spec.adapters.mongo` makes every
  decision with one single-document operation, and on a real server it runs
  its list reads in a snapshot session where the server has them (see
  ``MongoStoreBase._detect_snapshot_reads``).

Reads by ``_id``
----------------

One change to how mongomock finds documents, not to what it finds: a
filter naming a string ``_id`` (``{"_id": "run_…", "scope.ws": …}``) tests
mongomock's own filter on the one document stored under that key instead of
on every document of the collection (see :func:`_read_by_key`); a server
reads it through its ``_id`` index the same way.  Every other filter is
scanned as mongomock does.

And three to how mongomock works, not to what it gives, installed for
the whole process when the first :class:`FaithfulClient` is made: the walk
over every filter and written document that turns a ``datetime`` into a
BSON date, and the copy of every document it returns, leave strings and
numbers alone without testing several types on each (see
:func:`_datetime_walk` and :func:`_copy_walk`); and the
commonest filters (plain values and the comparison operators on paths
through plain dicts) are tested without mongomock's general matcher, with
its answers (see :func:`_filter_shortcut`).  Each is compared with
mongomock's own function on generated values in
``tests/test_mongo_faithful.py``.

Transactions, emulated
----------------------

mongomock has no sessions or transactions; a few decisions of the adapter
need one (class ``a2a``: a message is admitted together with its
conversation's hop charge).  ``client.start_session()`` gives a
:class:`FaithfulSession` whose transaction (``with_transaction(callback)``,
or ``start_transaction()`` … ``commit_transaction()`` /
``abort_transaction()``) is emulated the only way an in-process store can:

* **atomic**: the transaction holds the storage's lock from its start to
  its end, so no other client's operation runs in between (as if every
  concurrent transaction on a server conflicted and was retried after this
  one); the lock is re-entrant for the transaction's own operations only;
* **all or nothing**: before its first write to a collection the
  transaction copies that collection, and an abort (or an exception out of
  ``with_transaction``'s callback) puts every copied collection back;
* **strict**: an operation of the owning thread inside the transaction
  must pass ``session=`` (a server would run it *outside* the transaction),
  and a session anywhere else (an object that is not this storage's
  session, a session without a transaction or snapshot) is refused with
  :class:`NotImplementedError` rather than silently ignored.

The copy costs time in the size of the collection: fine for certification
data, not meant for anything large.

Snapshot sessions, emulated
---------------------------

``client.start_session(snapshot=True)`` gives a session whose reads (each
passing ``session=``) all see one point in time, as a server's snapshot
session does.  It is emulated the same way: the session holds the
storage's lock from its start to its end, so no other client's write lands
between two of its reads.  It only reads: a write passing it, and a
transaction on it, are refused with :class:`NotImplementedError` (a server
refuses them too).  The session of a raw mongomock has no snapshot at all:
only this wrapper offers it.

Usage::

    client = FaithfulClient()                  # a fresh mongomock storage
    db = client["cortex"]                      # a FaithfulDatabase
    store = MongoStore(db, clock)

    other = client.reopen()                    # a second client on the same
                                               # storage and the same lock
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Iterator

__all__ = [
    "FaithfulClient",
    "FaithfulDatabase",
    "FaithfulCollection",
    "FaithfulSession",
    "MaterializedCursor",
    "mongomock_version",
]

#: Collection methods whose results are cursors: materialised inside the lock.
_CURSOR_METHODS = frozenset({"find", "aggregate", "list_indexes", "find_raw_batches"})
#: Collection methods that write (a transaction copies the collection first).
_WRITE_METHODS = frozenset({
    "insert_one", "insert_many", "update_one", "update_many", "replace_one", "find_one_and_update",
    "find_one_and_replace", "find_one_and_delete", "delete_one", "delete_many", "bulk_write",
})


def mongomock_version() -> str:
    from importlib.metadata import version

    return version("mongomock")


def _refuse_session(kwargs: dict[str, Any]) -> None:
    if kwargs.get("session") is not None:
        raise NotImplementedError(
            "the faithful mongomock wrapper only takes session= inside an emulated "
            "transaction of the same storage (see cortex_spec.adapters.mongo.faithful)"
        )
    kwargs.pop("session", None)


class MaterializedCursor:
    """The rows of a ``find``/``aggregate``, read inside the lock.

    Iterate it, or call :meth:`to_list`.  Chaining ``sort``/``skip``/``limit``
    after the fact is refused: they would run after the lock was released,
    on rows already read.  Pass them to ``find(...)`` instead.
    """

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows
        self._iter = iter(rows)

    def __iter__(self) -> Iterator[Any]:
        return self._iter

    def __next__(self) -> Any:
        return next(self._iter)

    def to_list(self, length: int | None = None) -> list[Any]:
        rest = list(self._iter)
        return rest if length is None else rest[:length]

    def close(self) -> None:
        self._iter = iter(())

    def __enter__(self) -> "MaterializedCursor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _refuse(self, *_a: Any, **_k: Any) -> None:
        raise NotImplementedError(
            "the faithful wrapper materialises a cursor inside its lock: pass "
            "sort/skip/limit as arguments of find() instead of chaining them"
        )

    sort = skip = limit = batch_size = hint = _refuse


def _yield() -> None:
    """Give the interpreter to another thread (``sched_yield`` releases the
    GIL; ``time.sleep(0)`` would too, at ~30x the cost through timer slack)."""
    if _sched_yield is not None:
        _sched_yield()


_sched_yield = getattr(os, "sched_yield", None)


class _Gate:
    """The lock of one mongomock storage, and the yield after each call."""

    #: After a call by another thread than the one before, this many calls
    #: yield the interpreter (see :meth:`shared`).
    SHARED_WINDOW = 64

    def __init__(self, yield_between_calls: bool = True) -> None:
        # re-entrant: a transaction holds it while its own operations run
        self.lock = threading.RLock()
        self.yield_between_calls = yield_between_calls
        #: operations run through this gate (for tests and diagnostics)
        self.calls = 0
        #: the transaction holding the lock, if any
        self.txn: FaithfulSession | None = None
        #: the thread of the last call, and the call count up to which calls yield
        self._last_caller = 0
        self._shared_until = 0

    def shared(self) -> bool:
        """Whether threads take turns on this storage: another thread than
        the one before made one of the last :data:`SHARED_WINDOW` calls.
        Only then does a call yield the interpreter after it: a thread alone
        on its storage (most of a certification; a pytest-xdist worker always
        has other threads, which never call) has nobody to let in, and the
        yield was 6 % of a Mongo certification's samples (py-spy)."""
        return self.yield_between_calls and self.calls <= self._shared_until

    def run(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], materialize: bool,
            collection: Any = None, method: str = "") -> Any:
        session = kwargs.get("session")
        txn = self.txn
        mine = txn is not None and txn.owner == threading.get_ident()
        if session is not None:
            if not (mine and session is txn):
                _refuse_session(kwargs)
            kwargs.pop("session")
        elif mine:
            raise NotImplementedError(
                f"{method or 'an operation'} inside a transaction without session=: on a "
                "server it would run outside the transaction"
            )
        try:
            with self.lock:
                self.calls += 1
                caller = threading.get_ident()
                if caller != self._last_caller:
                    self._last_caller = caller
                    self._shared_until = self.calls + self.SHARED_WINDOW
                if mine and txn is not None and collection is not None and method in _WRITE_METHODS:
                    txn.remember(collection)
                result = fn(*args, **kwargs)
                if materialize:
                    result = MaterializedCursor(list(result))
                return result
        finally:
            # let other "clients" run between two calls of this thread (not
            # inside its own transaction)
            if not mine and self.shared():
                _yield()


class FaithfulSession:
    """A session of the faithful wrapper: emulated transactions only (see the
    module docstring).  ``with_transaction(callback)`` runs
    ``callback(session)`` atomically and all or nothing."""

    def __init__(self, gate: _Gate, client: "FaithfulClient", snapshot: bool = False) -> None:
        self._gate = gate
        self._client = client
        self.owner: int | None = None
        self._copies: dict[str, tuple[Any, list[Any]]] = {}
        self._ended = False
        #: a snapshot session: it reads only, holding the lock while it lives
        self.snapshot = snapshot
        if snapshot:
            self._begin()

    @property
    def client(self) -> "FaithfulClient":
        return self._client

    @property
    def in_transaction(self) -> bool:
        return self.owner is not None

    def start_transaction(self, *_a: Any, **_k: Any) -> "FaithfulSession":
        if self._ended:
            raise NotImplementedError("the session has ended")
        if self.snapshot:
            raise NotImplementedError("a snapshot session has no transactions (as on a server)")
        if self.in_transaction:
            raise NotImplementedError("a transaction is already in progress on this session")
        self._begin()
        return self

    def _begin(self) -> None:
        self._gate.lock.acquire()
        self._gate.txn = self
        self.owner = threading.get_ident()
        self._copies = {}

    def remember(self, collection: Any) -> None:
        """Copy ``collection`` before the transaction's first write to it."""
        if self.snapshot:
            raise NotImplementedError("a snapshot session only reads (as on a server)")
        name = collection.full_name
        if name not in self._copies:
            # mongomock's find gives copies already (see _copy_walk)
            self._copies[name] = (collection, list(collection.find({})))

    def _end(self) -> None:
        self.owner = None
        self._copies = {}
        self._gate.txn = None
        self._gate.lock.release()
        if self._gate.shared():
            _yield()

    def commit_transaction(self) -> None:
        if not self.in_transaction:
            raise NotImplementedError("no transaction in progress")
        self._end()

    def abort_transaction(self) -> None:
        if not self.in_transaction:
            raise NotImplementedError("no transaction in progress")
        try:
            for collection, docs in self._copies.values():
                collection.delete_many({})
                if docs:
                    collection.insert_many(docs)
        finally:
            self._end()

    def with_transaction(self, callback: Any, *_a: Any, **_k: Any) -> Any:
        self.start_transaction()
        try:
            result = callback(self)
        except BaseException:
            self.abort_transaction()
            raise
        self.commit_transaction()
        return result

    def end_session(self) -> None:
        if self.snapshot and self.in_transaction:
            self._end()
        elif self.in_transaction:
            self.abort_transaction()
        self._ended = True

    def __enter__(self) -> "FaithfulSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.end_session()


def _read_by_key(collection: Any) -> None:
    """Let ``collection`` (a mongomock collection) read the one document a
    filter's string ``_id`` names by its key, as a server reads it through
    the ``_id`` index, instead of testing the filter on every document.

    mongomock finds the documents of every read, update, delete and count
    with ``_iter_documents(filter)``, which tests ``filter`` on each
    document (a ``find_one_and_update`` scans three times: to find, to
    update by ``_id``, to read the result).  A document matching
    ``{"_id": s, ...}`` with ``s`` a string has ``_id == s``, and mongomock
    keeps it under exactly that key, so looking it up and testing the whole
    filter on it alone finds the same documents, each match decided as
    mongomock decides it (by its matcher, or the shortcut of
    :func:`_filter_shortcut`).  Any other filter (no ``_id``, an operator or a non-string
    value under it) is scanned as before.
    """
    import mongomock.collection

    filter_applies: Any = vars(mongomock.collection)["filter_applies"]  # the shortcut, once installed

    scan = collection._iter_documents

    def iter_documents(filter: Any) -> Any:
        key = filter.get("_id") if type(filter) is dict else None
        if type(key) is not str:
            return scan(filter)
        store = collection._store
        store._remove_expired_documents()  # TTL indexes, as mongomock's own reads do
        doc = store._documents.get(key)
        # mongomock tests the filter on an empty document when there is none
        # (so a malformed filter is refused either way)
        if doc is None:
            filter_applies(filter, {})
            return iter(())
        return iter((doc,)) if filter_applies(filter, doc) else iter(())

    collection._iter_documents = iter_documents


def _install_replacements() -> None:
    """Put the three replacements below into mongomock, once per process
    (when the first :class:`FaithfulClient` is made)."""
    global _DATETIME_WALK, _COPY_WALK, _FILTER_SHORTCUT
    from mongomock import collection, helpers

    with _INSTALLING:
        if _FILTER_SHORTCUT is not None:
            return
        _DATETIME_WALK = _replace(helpers, "patch_datetime_awareness_in_document", _datetime_walk)
        _COPY_WALK = _replace(collection, "_copy_field", _copy_walk)
        _FILTER_SHORTCUT = _replace(collection, "filter_applies", _filter_shortcut)


_INSTALLING = threading.Lock()
#: what :func:`_install_replacements` put in mongomock, once installed
#: (each keeps mongomock's function as its ``original``)
_DATETIME_WALK: Any = None
_COPY_WALK: Any = None
_FILTER_SHORTCUT: Any = None

#: the immutable values mongomock's walks give back as they are, and that a
#: dotted path cannot go through
_PLAIN: frozenset[type] = frozenset({str, int, float, bool, type(None)})


def _replace(module: Any, name: str, make: Callable[[Any], Any]) -> Any:
    """``module.name`` replaced by ``make(original)``, which keeps the
    original as its ``original``."""
    original = getattr(module, name)
    made = make(original)
    made.original = original
    setattr(module, name, made)
    return made


def _datetime_walk(original: Any) -> Any:
    """Make mongomock's walk over every filter and stored document (its
    ``helpers.patch_datetime_awareness_in_document``) cheaper on the values
    a store keeps, without changing one value it gives.

    mongomock passes every filter it reads by and every document it inserts
    or updates through that function, which rebuilds the value whole to turn
    each ``datetime`` into a naive UTC one of millisecond precision (a
    server's BSON date).  It tries ``isinstance`` against five types at
    every level, strings and numbers included: 3–4 % of a Mongo
    certification's samples (py-spy).  The walk installed here gives a
    plain ``dict`` and ``list`` the same copy (a new ``dict`` of the same
    keys in the same order, a new ``list``), returns a ``str``, ``int``,
    ``bool``, ``float`` or ``None`` as it is, as mongomock does, and hands
    every other value (a ``datetime``, an ``OrderedDict``, a ``tuple``, a
    ``Timestamp``, a ``dict`` or ``list`` subclass …) to mongomock's own
    function, whose recursion comes back to this one by the module's name.
    ``tests/test_mongo_faithful.py`` checks that both give equal values of
    the same types."""
    def walk(value: Any) -> Any:
        t = type(value)
        if t is dict:
            return {k: walk(v) for k, v in value.items()}
        if t in _PLAIN:
            return value
        if t is list:
            return [walk(v) for v in value]
        return original(value)

    return walk


def _copy_walk(original: Any) -> Any:
    """The same for the copy mongomock makes of every document it returns
    (``collection._copy_field``, so that a caller's changes never reach the
    storage): a plain ``dict`` becomes a new ``container()`` filled in the
    same order, a plain ``list`` a new ``list``, and a ``str``, ``int``,
    ``bool``, ``float`` or ``None`` is kept, which is what mongomock's
    ``copy.copy`` of an immutable value gives, and so is a ``datetime``
    (``copy.copy`` rebuilds an equal one through its ``__reduce_ex__``: the
    same value, immutable, another object); anything else goes to
    mongomock's own function.  About 3 % of a Mongo certification's
    samples went to that copy."""
    from datetime import datetime

    kept = _PLAIN | {datetime}

    def copy_field(obj: Any, container: Any) -> Any:
        t = type(obj)
        if t in kept:
            return obj
        if t is dict:
            new = container()
            for key, value in obj.items():
                new[key] = copy_field(value, container)
            return new
        if t is list:
            return [copy_field(item, container) for item in obj]
        return original(obj, container)

    return copy_field


def _filter_shortcut(original: Any) -> Any:
    """Let mongomock test the commonest filters without its general matcher,
    deciding exactly what the matcher decides.

    mongomock tests a filter on a document with ``filter_applies``, which
    for every key resolves the dotted path into a list of candidates,
    classifies the wanted value and walks a chain of checks around its
    operators: 8–9 % of a Mongo certification's samples, most of them on
    the store's scope filters (``{"_id": …, "run.scope.n": {"$gte": 2},
    "run.scope.k0": "ws", …}``).  The shortcut goes through the filter's
    keys in order, as the matcher does, and decides a key itself only when
    the key has no ``$`` and no empty part and its path goes through plain
    dicts, and the wanted value is not a regular expression, has no
    ``$all`` and, if it is a dict of operators, uses only ``$eq``, ``$ne``,
    ``$gt``, ``$gte``, ``$lt``, ``$lte``, ``$in``, ``$nin`` and
    ``$exists``.  Then:

    * the path ends at one value that is not a list or tuple (``NOTHING``
      for a missing field): the matcher's verdict on one candidate is its
      own expression — the operators' functions from its own table, in the
      filter's order, or ``==`` with ``None`` also matching a missing
      field — and the shortcut computes exactly that;
    * the path meets ``None``, a string, a number or a boolean on the way
      (no candidate): a plain value, or a dict with a key other than
      ``$ne`` and ``$nin``, does not match; ``{"$exists": False}``, ``{}``
      and ``$ne``/``$nin`` alone do, as in the matcher.

    A key decided false ends the test (the matcher stops there too); any
    other key (a list on the way or at the end, a ``dict`` subclass, a
    ``$`` key, another operator) hands the whole filter to the matcher,
    which decides the keys already seen as the shortcut did.
    ``tests/test_mongo_faithful.py`` compares both, answers and errors, on
    generated filters and documents."""
    import operator

    from mongomock import filtering

    matcher: Any = filtering
    NOTHING: Any = matcher.NOTHING
    regexes: Any = matcher._RE_TYPES
    operators: dict[str, Any] = {name: matcher._filterer_inst._operator_map[name] for name in (
        "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists")}
    negative = frozenset({"$ne", "$nin"})
    ranges = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}

    def filter_applies(search_filter: Any, document: Any) -> Any:
        if type(search_filter) is not dict or type(document) is not dict:
            return original(search_filter, document)
        for key, wanted in search_filter.items():
            if not key or key[0] == "$" or isinstance(wanted, regexes):
                return original(search_filter, document)
            keyed = type(wanted) is dict
            compare = None
            if not keyed:
                ops = False
            elif len(wanted) == 1:
                name = next(iter(wanted))
                ops = name[:1] == "$"
                if ops:
                    if name not in operators:
                        return original(search_filter, document)  # $all among them
                    # one numeric range (the scopes' depth): its comparison
                    # itself, where the matcher's comes to the same (below)
                    compare = ranges.get(name)
            else:
                # ({}: the matcher lets a missing field match it, wanting
                # neither something there nor something else)
                ops = all(name[:1] == "$" for name in wanted)
                if not wanted or ops and not all(name in operators for name in wanted) or "$all" in wanted:
                    return original(search_filter, document)
            parts = key.split(".")
            if "" in parts:
                return original(search_filter, document)
            at: Any = document
            for part in parts[:-1]:
                at = at.get(part, {})
                if type(at) is not dict:
                    break
            if type(at) is not dict:  # the path ended on the way
                if type(at) not in _PLAIN:  # (a path meeting one has no candidate)
                    return original(search_filter, document)
                if not keyed or wanted != {"$exists": False} and set(wanted) - negative:
                    return False  # wanting something there (the matcher's "positive" match)
                continue
            found = at.get(parts[-1], NOTHING)
            if isinstance(found, (list, tuple)):
                return original(search_filter, document)
            if compare is not None and (type(found) is int or type(found) is float) \
                    and type(bound := next(iter(wanted.values()))) is int:
                if not compare(found, bound):  # two numbers: BSON compares them as Python does
                    return False
            elif ops:
                if not all(operators[name](found, value) for name, value in wanted.items()):
                    return False
            elif not (found == wanted or (wanted is None and found is NOTHING)):
                return False
        return True

    return filter_applies


class FaithfulCollection:
    """A mongomock collection whose every method call is one atomic step."""

    def __init__(self, collection: Any, gate: _Gate, database: "FaithfulDatabase") -> None:
        self._collection = collection
        self._gate = gate
        self._database = database
        if "_iter_documents" not in vars(collection):
            _read_by_key(collection)

    @property
    def name(self) -> str:
        return str(self._collection.name)

    @property
    def full_name(self) -> str:
        return str(self._collection.full_name)

    @property
    def database(self) -> "FaithfulDatabase":
        return self._database

    @property
    def unwrapped(self) -> Any:
        """The raw mongomock collection (no atomicity: for tests only)."""
        return self._collection

    def __getitem__(self, name: str) -> "FaithfulCollection":
        return FaithfulCollection(self._collection[name], self._gate, self._database)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        import mongomock

        attr = getattr(self._collection, name)
        if isinstance(attr, mongomock.Collection):
            return FaithfulCollection(attr, self._gate, self._database)  # a sub-collection
        if not callable(attr):
            return attr
        materialize = name in _CURSOR_METHODS
        gate = self._gate

        collection = self._collection

        def atomic_call(*args: Any, **kwargs: Any) -> Any:
            return gate.run(attr, args, kwargs, materialize, collection, name)

        atomic_call.__name__ = name
        atomic_call.__doc__ = getattr(attr, "__doc__", None)
        # kept: the next lookup of the method finds it without this hook (a
        # collection's methods do not change)
        self.__dict__[name] = atomic_call
        return atomic_call

    def __repr__(self) -> str:
        return f"FaithfulCollection({self.full_name!r})"


class FaithfulDatabase:
    """A mongomock database handing out :class:`FaithfulCollection` objects."""

    def __init__(self, database: Any, gate: _Gate, client: "FaithfulClient") -> None:
        self._database = database
        self._gate = gate
        self._client = client
        #: the collections asked for by name alone (a mongomock collection is
        #: a view of the storage by its name, so one serves every call; an
        #: adapter asks for one on every operation), shared by every client
        #: of the storage: a reopened store finds its collections made (see
        #: :meth:`FaithfulClient.reopen`)
        self._collections: dict[str, FaithfulCollection] = client._collections.setdefault(self.name, {})

    @property
    def name(self) -> str:
        return str(self._database.name)

    @property
    def client(self) -> "FaithfulClient":
        return self._client

    def get_collection(self, name: str, **options: Any) -> FaithfulCollection:
        if options:
            return FaithfulCollection(self._database.get_collection(name, **options), self._gate, self)
        try:
            return self._collections[name]
        except KeyError:
            made = self._collections[name] = FaithfulCollection(
                self._database.get_collection(name), self._gate, self)
            return made

    def __getitem__(self, name: str) -> FaithfulCollection:
        return self.get_collection(name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in ("list_collection_names", "drop_collection", "create_collection", "command"):
            fn = getattr(self._database, name)
            gate = self._gate

            def atomic_call(*args: Any, **kwargs: Any) -> Any:
                result = gate.run(fn, args, kwargs, False)
                if name == "create_collection":
                    return FaithfulCollection(result, gate, self)
                return result

            return atomic_call
        return self.get_collection(name)

    def __repr__(self) -> str:
        return f"FaithfulDatabase({self.name!r})"


class FaithfulClient:
    """A mongomock client whose collections are atomic per call.

    ``FaithfulClient()`` opens a fresh in-process storage;
    :meth:`reopen` opens another client on the same storage (a "restart":
    everything written is still there) sharing the same lock.
    """

    def __init__(
        self,
        *,
        tz_aware: bool = False,
        yield_between_calls: bool = True,
        _storage: Any = None,
        _gate: _Gate | None = None,
        _collections: dict[str, dict[str, FaithfulCollection]] | None = None,
    ) -> None:
        import mongomock
        from mongomock.store import ServerStore

        _install_replacements()
        # mongomock.store has no annotations
        self._storage = _storage if _storage is not None else ServerStore()  # type: ignore[no-untyped-call]
        self._gate = _gate if _gate is not None else _Gate(yield_between_calls)
        self._tz_aware = tz_aware
        self._client: Any = mongomock.MongoClient(tz_aware=tz_aware, _store=self._storage)
        #: the storage's collections by database and name (see FaithfulDatabase)
        self._collections: dict[str, dict[str, FaithfulCollection]] = (
            {} if _collections is None else _collections)
        self._closed = False

    def reopen(self) -> "FaithfulClient":
        """A new client on the same storage, behind the same lock.

        It hands out the collection objects the storage's earlier clients
        made (views of the storage by name, holding no state of their own
        but their methods: 30 of them made anew were a third of a store's
        open), so such a collection's ``database`` is the database object
        of the client that first asked for it, on the same storage."""
        return FaithfulClient(tz_aware=self._tz_aware, _storage=self._storage, _gate=self._gate,
                              _collections=self._collections)

    def idle(self) -> bool:
        """Whether no transaction or snapshot session holds the storage now."""
        if not self._gate.lock.acquire(blocking=False):
            return False
        try:
            return self._gate.txn is None
        finally:
            self._gate.lock.release()

    def document_counts(self, database: str) -> dict[str, int]:
        """How many documents each collection of ``database`` holds (the
        collections that exist, by name), read at one point in time: under
        the storage's lock, as one atomic call.  For harnesses and tests
        (emptying a storage for reuse touches only the collections holding
        something)."""
        def counts() -> dict[str, int]:
            stored = self._storage[database]
            out = {}
            for name in stored.list_created_collection_names():
                collection = stored[name]
                # without TTL indexes, the count of mongomock's own dict
                # (len() takes its reader lock and looks for expired documents)
                out[name] = len(collection._documents if not collection._ttl_indexes else collection)
            return out

        return dict(self._gate.run(counts, (), {}, False))

    @property
    def gate_calls(self) -> int:
        """How many atomic operations went through this storage's lock."""
        return self._gate.calls

    @property
    def unwrapped(self) -> Any:
        """The raw mongomock client (no atomicity: for tests only)."""
        return self._client

    def get_database(self, name: str) -> FaithfulDatabase:
        return FaithfulDatabase(self._client.get_database(name), self._gate, self)

    def __getitem__(self, name: str) -> FaithfulDatabase:
        return self.get_database(name)

    def list_database_names(self) -> list[str]:
        return list(self._gate.run(self._client.list_database_names, (), {}, False))

    def drop_database(self, name: str) -> None:
        self._gate.run(self._client.drop_database, (name,), {}, False)

    def server_info(self) -> dict[str, Any]:
        return dict(self._client.server_info())

    def start_session(self, *_a: Any, snapshot: bool = False, **_k: Any) -> FaithfulSession:
        """A session for emulated transactions, or (``snapshot=True``) an
        emulated snapshot session: see the module docstring."""
        return FaithfulSession(self._gate, self, snapshot=snapshot)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()

    def __enter__(self) -> "FaithfulClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FaithfulClient(mongomock {mongomock_version()})"
